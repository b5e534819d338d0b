/*-------------------------------------------------------------------------
 *
 * route_path.h
 *		  Planner routing of secondary-key predicates through index tables.
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/route_path.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef IDXTABLE_ROUTE_PATH_H
#define IDXTABLE_ROUTE_PATH_H

#include "nodes/pathnodes.h"
#include "nodes/plannodes.h"

#include "planner.h"

/*
 * How a key component is constrained by an index condition.
 */
typedef enum IdxCondOp
{
	ICOND_EQ,					/* key = value */
	ICOND_IN,					/* key = ANY(array value) */
	ICOND_NULL,					/* key IS NULL */
	ICOND_LT,
	ICOND_LE,
	ICOND_GT,
	ICOND_GE,
	ICOND_NULL_OR				/* key IS NULL, or the key's ranges (the
								 * conditions after it on the same key, from
								 * the same clause) */
} IdxCondOp;

/*
 * Elements of fdw_private after IdxPrivIndexFirst, for index scans.
 */
enum IdxIndexPrivateIndex
{
	/* the index name (String) */
	IdxPrivIndexName = IdxPrivIndexFirst,
	/* 1 if the index covers the query: no fact is fetched (Integer) */
	IdxPrivCovering,
	/*
	 * the index conditions: a List of integer Lists (key position, IdxCondOp,
	 * position of the value in fdw_exprs or -1)
	 */
	IdxPrivIndexConds,
	/* the index conditions as text, for EXPLAIN (String) */
	IdxPrivIndexCondText,
	/*
	 * the order the rows follow, NIL for none: an IntList (position of the
	 * first key, number of keys, descending, NULLs of the first key first,
	 * equal keys in the order of their fact's _id); keys after the first
	 * place NULLs as MongoDB does, the _id is ASC NULLS LAST
	 * (route_path.c: id_tiebreak_pathkey)
	 */
	IdxPrivOrder,
	/*
	 * entries of the first lookup batch and fact fetch under a LIMIT, or -1
	 * for full batches (Integer; route_path.c: path_row_limit)
	 */
	IdxPrivFirstBatch
};

/*
 * How the entries of one group of equal keys can come in the _id column's
 * order from MongoDB (route_id_order.c): not at all (read whole and
 * sorted), as numbers (integer columns), or as strings and ObjectIds
 * merged as bytes (text under a bytewise collation).
 */
typedef enum IdxIdOrder
{
	IDX_ID_ORDER_LOCAL,
	IDX_ID_ORDER_INTEGERS,
	IDX_ID_ORDER_TEXT
} IdxIdOrder;

/*
 * route_id_order.c: how MongoDB can give the entries of one group of equal
 * keys in the order of an _id column of this type and collation
 */
extern IdxIdOrder idx_id_order_kind(Oid typid, Oid collid);

/* Valid index definitions of a table (routing reads only those) */
extern List *idx_valid_indexes(Oid relid, Oid userid);

/* Add index-table paths for the relation */
extern void idx_add_index_paths(PlannerInfo *root, RelOptInfo *baserel,
								IdxRelInfo *fpinfo);

/* Is the path one of idx_add_index_paths()? */
extern bool idx_is_index_path(const ForeignPath *path);

/*
 * The index part of the plan of an index path: returns the elements of
 * fdw_private from IdxPrivIndexFirst on, appends the lookup values to
 * fdw_exprs, and sets the rows the scan is asked for (IdxPrivLimit).  A
 * covering scan evaluates every clause locally: the pushed-down ones join
 * local_exprs and their columns attrs_used.
 */
extern List *idx_index_plan_private(PlannerInfo *root, RelOptInfo *baserel,
									ForeignPath *best_path,
									List *remote_conds, List **fdw_exprs,
									List **local_exprs,
									Bitmapset **attrs_used, int *limit);

#endif							/* IDXTABLE_ROUTE_PATH_H */
