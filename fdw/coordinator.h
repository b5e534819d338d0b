/*-------------------------------------------------------------------------
 *
 * coordinator.h
 *		  The FDW's transaction callbacks, which fix the order of the work
 *		  at the end of a transaction (coordinator.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef IDXTABLE_COORDINATOR_H
#define IDXTABLE_COORDINATOR_H

/* Register the transaction callbacks (at module load, once) */
extern void idx_register_xact_callbacks(void);

#endif							/* IDXTABLE_COORDINATOR_H */
