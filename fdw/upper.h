/*-------------------------------------------------------------------------
 *
 * upper.h
 *		  Paths above the scan of a foreign table: ORDER BY/LIMIT/OFFSET and
 *		  aggregates pushed down to MongoDB (upper.c dispatches them).
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/upper.h
 *
 * Each kind of upper path has an owner file:
 *		order_path.c	LIMIT/OFFSET (UPPERREL_FINAL) over a plain scan
 *		agg_path.c		aggregates and GROUP BY as an aggregate pipeline on
 *						the fact collection (UPPERREL_GROUP_AGG), executed
 *						as scan kind IDX_SCAN_AGG
 *		route_agg.c		count, GROUP BY a key, min/max of a key answered
 *						from an index collection (UPPERREL_GROUP_AGG),
 *						executed as scan kind IDX_SCAN_INDEX_AGG
 * An upper ForeignPath's fdw_private starts with an Integer IdxUpperKind,
 * by which idx_upper_plan() hands GetForeignPlan to the owner.
 *
 *-------------------------------------------------------------------------
 */
#ifndef IDXTABLE_UPPER_H
#define IDXTABLE_UPPER_H

#include "foreign/fdwapi.h"
#include "nodes/pathnodes.h"
#include "nodes/plannodes.h"

#include "core/pg_compat.h"

/* First element of an upper ForeignPath's fdw_private (Integer) */
typedef enum IdxUpperKind
{
	IDX_UPPER_FINAL = 1,		/* order_path.c */
	IDX_UPPER_AGG,				/* agg_path.c */
	IDX_UPPER_INDEX_AGG			/* route_agg.c */
} IdxUpperKind;

/*
 * fdw_private of an ordered relation (UPPERREL_ORDERED) over a base
 * relation (order_path.c: baserel) or over a grouping pushed by agg_path.c
 * (agg: its IdxAggRelInfo; also the final relation's then).
 */
typedef struct IdxOrderedRel
{
	RelOptInfo *baserel;
	struct IdxAggRelInfo *agg;
} IdxOrderedRel;

/* upper.c */
extern void idxGetForeignUpperPaths(PlannerInfo *root, UpperRelationKind stage,
									RelOptInfo *input_rel, RelOptInfo *output_rel,
									void *extra);
extern ForeignScan *idx_upper_plan(PlannerInfo *root, RelOptInfo *rel,
								   ForeignPath *best_path, List *tlist,
								   List *scan_clauses, Plan *outer_plan);

/* order_path.c */
extern void idx_add_final_paths(PlannerInfo *root, RelOptInfo *input_rel,
								RelOptInfo *final_rel, FinalPathExtraData *extra);
extern ForeignScan *idx_order_plan(PlannerInfo *root, RelOptInfo *rel,
								   ForeignPath *best_path, List *tlist,
								   List *scan_clauses, Plan *outer_plan);

/* agg_path.c */
extern void idx_add_agg_paths(PlannerInfo *root, RelOptInfo *input_rel,
							  RelOptInfo *grouped_rel, GroupPathExtraData *extra);
extern bool idx_add_agg_ordered_paths(PlannerInfo *root,
									  RelOptInfo *grouped_rel,
									  RelOptInfo *ordered_rel);
extern bool idx_add_agg_final_paths(PlannerInfo *root,
									RelOptInfo *input_rel,
									RelOptInfo *final_rel,
									FinalPathExtraData *extra);
extern ForeignScan *idx_agg_plan(PlannerInfo *root, RelOptInfo *rel,
								 ForeignPath *best_path, List *tlist,
								 List *scan_clauses, Plan *outer_plan);

/* route_agg.c */
extern void idx_add_index_agg_paths(PlannerInfo *root, RelOptInfo *input_rel,
									RelOptInfo *grouped_rel,
									GroupPathExtraData *extra);
extern ForeignScan *idx_index_agg_plan(PlannerInfo *root, RelOptInfo *rel,
									   ForeignPath *best_path, List *tlist,
									   List *scan_clauses, Plan *outer_plan);

#endif							/* IDXTABLE_UPPER_H */
