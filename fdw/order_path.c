/*-------------------------------------------------------------------------
 *
 * order_path.c
 *		  LIMIT and OFFSET pushed down to the find of a plain scan
 *		  (UPPERREL_FINAL).  Not yet built: no paths are added.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "upper.h"

/*
 * Add a ForeignPath with LIMIT/OFFSET pushed down to "final_rel".
 */
void
idx_add_final_paths(PlannerInfo *root, RelOptInfo *input_rel,
					RelOptInfo *final_rel, FinalPathExtraData *extra)
{
}

/*
 * GetForeignPlan of a path of idx_add_final_paths().
 */
ForeignScan *
idx_order_plan(PlannerInfo *root, RelOptInfo *rel, ForeignPath *best_path,
			   List *tlist, List *scan_clauses, Plan *outer_plan)
{
	elog(ERROR, "idxtable_fdw: LIMIT pushdown is not built yet");
	return NULL;				/* keep compiler quiet */
}
