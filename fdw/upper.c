/*-------------------------------------------------------------------------
 *
 * upper.c
 *		  GetForeignUpperPaths: offer the upper paths of each stage (owners
 *		  in upper.h), and hand an upper path's GetForeignPlan to its owner.
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/upper.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "optimizer/pathnode.h"

#include "order.h"
#include "upper.h"

/*
 * Add the upper paths MongoDB can run for "stage" of "input_rel" (a scan
 * of one foreign table, or an upper relation over one) to "output_rel".
 * Only the first call for an output relation adds paths (postgres_fdw
 * does the same: the stages can be reached twice).
 */
void
idxGetForeignUpperPaths(PlannerInfo *root, UpperRelationKind stage,
						RelOptInfo *input_rel, RelOptInfo *output_rel,
						void *extra)
{
	if (input_rel->fdw_private == NULL || output_rel->fdw_private != NULL)
		return;
	switch (stage)
	{
		case UPPERREL_GROUP_AGG:
			idx_add_agg_paths(root, input_rel, output_rel,
							  (GroupPathExtraData *) extra);
			idx_add_index_agg_paths(root, input_rel, output_rel,
									(GroupPathExtraData *) extra);
			break;
		case UPPERREL_ORDERED:
			if (!idx_add_agg_ordered_paths(root, input_rel, output_rel))
				idx_add_ordered_paths(root, input_rel, output_rel);
			break;
		case UPPERREL_FINAL:
			if (!idx_add_agg_final_paths(root, input_rel, output_rel,
										 (FinalPathExtraData *) extra))
				idx_add_final_paths(root, input_rel, output_rel,
									(FinalPathExtraData *) extra);
			break;
		default:
			break;
	}
}

/* GetForeignPlan of one kind of upper path */
typedef ForeignScan *(*IdxUpperPlan) (PlannerInfo *root, RelOptInfo *rel,
									  ForeignPath *best_path, List *tlist,
									  List *scan_clauses, Plan *outer_plan);

/* The owner of each kind of upper path builds its ForeignScan (upper.h) */
static const IdxUpperPlan upper_plans[] = {
	[IDX_UPPER_FINAL] = idx_order_plan,
	[IDX_UPPER_AGG] = idx_agg_plan,
	[IDX_UPPER_INDEX_AGG] = idx_index_agg_plan
};

/*
 * GetForeignPlan of an upper path: its owner builds the ForeignScan.
 */
ForeignScan *
idx_upper_plan(PlannerInfo *root, RelOptInfo *rel, ForeignPath *best_path,
			   List *tlist, List *scan_clauses, Plan *outer_plan)
{
	int			kind = intVal(linitial(best_path->fdw_private));

	if (kind < 0 || kind >= lengthof(upper_plans) || upper_plans[kind] == NULL)
		elog(ERROR, "unrecognized idxtable_fdw upper path kind");
	return upper_plans[kind] (root, rel, best_path, tlist, scan_clauses,
							  outer_plan);
}
