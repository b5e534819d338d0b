/*-------------------------------------------------------------------------
 *
 * guc.c
 *		  The settings (GUC variables) of idxtable_fdw's planner and writers.
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/core/guc.c
 *
 * The variables live here rather than beside the FDW's entry points, so
 * that the planner and the writers that read them do not depend on
 * idxtable_fdw.c, which depends on them for its callback table.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <limits.h>

#include "utils/guc.h"

#include "core/guc.h"

bool		idxtable_enable_index_routing = true;
bool		idxtable_enable_plain_scan = true;
bool		idxtable_enable_order_pushdown = true;
bool		idxtable_enable_aggregate_pushdown = true;
bool		idxtable_enable_bulk_write = true;
int			idx_unique_claim_timeout = 5000;

/*
 * Register the settings with PostgreSQL; called once per backend from
 * _PG_init(), before the prefix "idxtable" is reserved.
 */
void
idx_define_gucs(void)
{
	DefineCustomBoolVariable("idxtable.enable_index_routing",
							 "Lets the planner route queries through index tables.",
							 "Like enable_indexscan: off leaves only plain "
							 "scans of the collections, for comparisons.",
							 &idxtable_enable_index_routing,
							 true,
							 PGC_USERSET,
							 0,
							 NULL, NULL, NULL);
	DefineCustomBoolVariable("idxtable.enable_plain_scan",
							 "Lets the planner choose plain scans of collections that have index tables.",
							 "Like enable_seqscan: off makes them look very expensive, "
							 "so that an index table is used wherever one applies.",
							 &idxtable_enable_plain_scan,
							 true,
							 PGC_USERSET,
							 0,
							 NULL, NULL, NULL);
	DefineCustomBoolVariable("idxtable.enable_order_pushdown",
							 "Lets the planner push ORDER BY, LIMIT and OFFSET down to MongoDB.",
							 "Off sorts and limits in PostgreSQL, for comparisons.",
							 &idxtable_enable_order_pushdown,
							 true,
							 PGC_USERSET,
							 0,
							 NULL, NULL, NULL);
	DefineCustomBoolVariable("idxtable.enable_bulk_write",
							 "Writes a batch's facts and index entries in one bulkWrite command where MongoDB has it (8.0).",
							 "Off writes one bulk per collection, as on older servers; "
							 "those writes are retried after a lost reply in "
							 "consistency mode 'ordered', a bulkWrite is not.",
							 &idxtable_enable_bulk_write,
							 true,
							 PGC_USERSET,
							 0,
							 NULL, NULL, NULL);
	DefineCustomBoolVariable("idxtable.enable_aggregate_pushdown",
							 "Lets the planner push aggregates and GROUP BY down to MongoDB.",
							 "Off aggregates in PostgreSQL, for comparisons.",
							 &idxtable_enable_aggregate_pushdown,
							 true,
							 PGC_USERSET,
							 0,
							 NULL, NULL, NULL);
	DefineCustomIntVariable("idxtable.unique_claim_timeout",
							"Age after which an orphaned unique-key claim may be taken over.",
							"In consistency mode 'ordered', a unique key's claim whose "
							"fact lacks the key is taken over only when it is older "
							"than this; a younger one may belong to a write in flight.",
							&idx_unique_claim_timeout,
							5000, 0, INT_MAX,
							PGC_USERSET,
							GUC_UNIT_MS,
							NULL, NULL, NULL);
}
