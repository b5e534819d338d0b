/*-------------------------------------------------------------------------
 *
 * coordinator.h
 *		  The FDW's transaction callbacks, which fix the order of the work
 *		  at the end of a transaction (coordinator.c).
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/coordinator.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef IDXTABLE_COORDINATOR_H
#define IDXTABLE_COORDINATOR_H

/* Register the transaction callbacks (at module load, once) */
extern void idx_register_xact_callbacks(void);

#endif							/* IDXTABLE_COORDINATOR_H */
