/*-------------------------------------------------------------------------
 *
 * agg_path.c
 *		  Aggregates and GROUP BY pushed down as an aggregate pipeline on the fact
 *		  collection (UPPERREL_GROUP_AGG; scan kind IDX_SCAN_AGG).
 *		  Not yet built: no paths are added.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "upper.h"

/*
 * Add the ForeignPaths that push the grouping of "input_rel" down.
 */
void
idx_add_agg_paths(PlannerInfo *root, RelOptInfo *input_rel,
							  RelOptInfo *grouped_rel, GroupPathExtraData *extra)
{
}

/*
 * GetForeignPlan of a path of idx_add_agg_paths().
 */
ForeignScan *
idx_agg_plan(PlannerInfo *root, RelOptInfo *rel, ForeignPath *best_path,
			 List *tlist, List *scan_clauses, Plan *outer_plan)
{
	elog(ERROR, "idxtable_fdw: this aggregate pushdown is not built yet");
	return NULL;				/* keep compiler quiet */
}

/*
 * Executor start of a scan of this kind.
 */
void
idx_agg_scan_begin(ForeignScanState *node, IdxScanState *state, int eflags)
{
	elog(ERROR, "idxtable_fdw: this aggregate pushdown is not built yet");
}

/*
 * The next row, or an empty slot at the end.
 */
TupleTableSlot *
idx_agg_scan_next(ForeignScanState *node, IdxScanState *state)
{
	return ExecClearTuple(node->ss.ss_ScanTupleSlot);
}

/*
 * Restart: the next row comes from a new command.
 */
void
idx_agg_scan_rescan(IdxScanState *state)
{
}

/*
 * Release what the scan holds.
 */
void
idx_agg_scan_end(IdxScanState *state)
{
}

/*
 * EXPLAIN of the scan.
 */
void
idx_agg_scan_explain(IdxScanState *state, ExplainState *es)
{
}
