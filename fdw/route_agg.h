/*-------------------------------------------------------------------------
 *
 * route_agg.h
 *		  What the planner of aggregates answered from index tables
 *		  (route_agg.c) hands to their executor (route_agg_scan.c).
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/route_agg.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef IDXTABLE_ROUTE_AGG_H
#define IDXTABLE_ROUTE_AGG_H

#include "core/convert.h"
#include "index/index_catalog.h"
#include "planner.h"

/*
 * Elements of fdw_private after IdxPrivIndexFirst, for IDX_SCAN_INDEX_AGG.
 */
enum IdxIndexAggPrivateIndex
{
	/* the index name (String) */
	IdxAggPrivIndexName = IdxPrivIndexFirst,
	/* conditions: List of integer Lists (key position, IdxCondOp, position
	 * of the value in fdw_exprs or -1) */
	IdxAggPrivConds,
	/* the conditions as text, for EXPLAIN (String) */
	IdxAggPrivCondText,
	/* per column of fdw_scan_tlist: an AGG_OUT_* (Integers) */
	IdxAggPrivOutputs,
	/* 1 if counting the facts with the pushed-down filter is exact as long
	 * as the parameter values are exact in BSON (Integer) */
	IdxAggPrivFactsExact,
	/* the key position rows are counted per (GROUP BY), or -1 (Integer) */
	IdxAggPrivGroupKey,
	/* the key position whose min()/max() is asked, or -1 (Integer) */
	IdxAggPrivMinMaxKey
};

/* What a column of fdw_scan_tlist holds (IdxAggPrivOutputs) */
#define AGG_OUT_CONST	0
#define AGG_OUT_COUNT	1
#define AGG_OUT_KEY		2
#define AGG_OUT_MIN		3
#define AGG_OUT_MAX		4

/*
 * Execution state of aggregates read from an index collection.
 */
typedef struct IdxIndexAggScan
{
	char	   *name;			/* the index's */
	IdxIndexDef *def;			/* NULL: the facts are counted */
	List	   *conds;
	char	   *cond_text;
	List	   *outputs;
	List	   *value_exprs;	/* fdw_exprs */
	List	   *value_states;
	Datum	   *values;
	bool	   *nulls;
	bool		facts_exact;	/* the plan's IdxAggPrivFactsExact */
	int			group_key;		/* the plan's IdxAggPrivGroupKey */
	int			minmax_key;		/* the plan's IdxAggPrivMinMaxKey */
	Datum		minmax[2];		/* min() and max() of this execution */
	bool		minmax_null[2];
	IdxColumnConv keyconv;		/* the group or min/max key's column */
	bool		started;		/* GROUP BY: the aggregate has been sent */
	bool		done;			/* the row has been returned */
	bool		ran;			/* a command was sent */
	bool		in_txn;			/* the count ran in a MongoDB transaction */
	bool		sync_waited;
	double		sync_wait_ms;
	int64		count;
	char	   *last_filter;	/* the count's filter, as JSON */
	char	   *last_pipeline;	/* GROUP BY: the aggregate's pipeline, JSON */
} IdxIndexAggScan;

/* min() or max() of a Var: AGG_OUT_MIN or AGG_OUT_MAX (*arg), else -1 */
extern int	idx_agg_min_max_of(Node *node, Var **arg);

/* count(*) without DISTINCT, ORDER BY or FILTER? */
extern bool idx_agg_is_count_star(Node *node);

/* The definition named "name" among "indexes", or NULL */
extern IdxIndexDef *idx_agg_index_named(List *indexes, const char *name);

#endif							/* IDXTABLE_ROUTE_AGG_H */
