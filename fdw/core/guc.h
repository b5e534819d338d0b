/*-------------------------------------------------------------------------
 *
 * guc.h
 *		  The settings (GUC variables) of idxtable_fdw's planner and
 *		  writers, defined in guc.c.
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/core/guc.h
 *
 * The planner and the writers read these; only idxtable_fdw.c's module
 * initialisation registers them (idx_define_gucs()), so none of the
 * modules that read a setting depends on the FDW's entry points.  The
 * change-stream applier's settings are its own and the backends' waits'
 * (applier/launcher.h, sync/sync_wait.h).
 *
 *-------------------------------------------------------------------------
 */
#ifndef IDXTABLE_GUC_H
#define IDXTABLE_GUC_H

/* idxtable.enable_index_routing: may the planner use index tables? */
extern bool idxtable_enable_index_routing;

/* idxtable.enable_plain_scan: may it choose plain scans of such tables? */
extern bool idxtable_enable_plain_scan;

/* idxtable.enable_order_pushdown: ORDER BY, LIMIT and OFFSET in MongoDB */
extern bool idxtable_enable_order_pushdown;

/* idxtable.enable_aggregate_pushdown: aggregates and GROUP BY in MongoDB */
extern bool idxtable_enable_aggregate_pushdown;

/* idxtable.enable_bulk_write: one bulkWrite per batch on MongoDB 8.0 */
extern bool idxtable_enable_bulk_write;

/* idxtable.unique_claim_timeout: age of a claim that may be taken, ms */
extern int	idx_unique_claim_timeout;

/* Register the settings above (from _PG_init) */
extern void idx_define_gucs(void);

#endif							/* IDXTABLE_GUC_H */
