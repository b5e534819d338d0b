/*-------------------------------------------------------------------------
 *
 * agg_scan.h
 *		  Aggregates pushed down as an aggregate pipeline: what the planner
 *		  (agg_path.c) hands to the executor (agg_scan.c).
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/agg_scan.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef IDXTABLE_AGG_SCAN_H
#define IDXTABLE_AGG_SCAN_H

#include "nodes/pg_list.h"

/* What one column of a pushed grouping's fdw_scan_tlist is */
typedef enum IdxAggKind
{
	IDX_AGG_NONE,
	IDX_AGG_GROUP,				/* a GROUP BY column */
	IDX_AGG_COUNT_STAR,
	IDX_AGG_COUNT,
	IDX_AGG_COUNT_DISTINCT,		/* count(DISTINCT col): two $group stages */
	IDX_AGG_SUM,				/* of int2/int4/int8 */
	IDX_AGG_AVG,				/* of int2/int4/int8 */
	IDX_AGG_MIN,
	IDX_AGG_MAX
} IdxAggKind;

/*
 * fdw_private of scan kind IDX_SCAN_AGG, after the common prefix
 * (planner.h): the items of fdw_scan_tlist (a List of
 * idx_agg_item_make()'s), and whether the query has a GROUP BY (Integer).
 */
enum IdxAggPrivateIndex
{
	IdxPrivAggItems = 9,		/* IdxPrivIndexFirst */
	IdxPrivAggGrouped
};

/*
 * One item: its kind, the field path it reads ("" for count(*)), the type
 * and typmod of its result, and the column name for messages.
 */
extern List *idx_agg_item_make(IdxAggKind kind, const char *field,
							   Oid typid, int32 typmod, const char *colname);

#endif							/* IDXTABLE_AGG_SCAN_H */
