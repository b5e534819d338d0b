/*-------------------------------------------------------------------------
 *
 * deparse.h
 *		  Translation of WHERE clauses into MongoDB find filters, and of
 *		  the needed columns into a projection.
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/core/deparse.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef IDXTABLE_DEPARSE_H
#define IDXTABLE_DEPARSE_H

#include "nodes/bitmapset.h"
#include "nodes/primnodes.h"

/* the shapes of clauses, also for the callers that find them here */
#include "core/clause_shape.h"
#include "core/mongoc_compat.h"
#include "core/option.h"

/*
 * How a clause can be sent to MongoDB.
 *
 * EXACT: MongoDB's filter selects exactly the rows for which PostgreSQL
 * would find the clause true; the clause is not evaluated locally.
 * LOSSY: the filter selects a superset; the clause is also rechecked
 * locally.  NONE: evaluated locally only.
 */
typedef enum IdxPushKind
{
	IDX_PUSH_NONE,
	IDX_PUSH_LOSSY,
	IDX_PUSH_EXACT
} IdxPushKind;

/* Plan time: can "clause" (over relation "relid") be pushed down? */
extern IdxPushKind idx_classify_clause(Expr *clause, Index relid,
									   const IdxTableInfo *info);

/* deparse_expr.c: comparisons of two columns as an $expr filter */
extern IdxPushKind idx_classify_column_comparison(OpExpr *op, Index relid,
												  const IdxTableInfo *info);
extern const char *idx_column_comparison_field(OpExpr *op, Index relid,
											   const IdxTableInfo *info);
extern void idx_build_column_comparison(OpExpr *op, bool truth, bson_t *out,
										Index relid, const IdxTableInfo *info);

/* Number of distinct _id values the clause selects, or -1 if it is no _id lookup */
extern int	idx_id_lookup_count(Expr *clause, Index relid,
								const IdxTableInfo *info);

/*
 * Values of the Params that pushed-down clauses refer to, known only at
 * execution time.  With "placeholders" (EXPLAIN without execution) the
 * filter shows "$n" in place of each parameter.
 */
typedef struct IdxParamValues
{
	List	   *params;			/* Param nodes */
	Datum	   *values;
	bool	   *nulls;
	bool		placeholders;
} IdxParamValues;

/* The distinct Param nodes that appear in "conds" */
extern List *idx_collect_params(List *conds);

/* Build the find filter for the implicitly-ANDed pushed-down "conds" */
extern void idx_build_filter(bson_t *filter, List *conds, Index relid,
							 const IdxTableInfo *info,
							 const IdxParamValues *params);

/*
 * The values a range on a text column selects (core/text_order.h): the
 * strings and the ObjectIds, or one of them alone.
 */
typedef enum IdxTextBracket
{
	IDX_TEXT_BOTH,
	IDX_TEXT_STRINGS,
	IDX_TEXT_OBJECTIDS
} IdxTextBracket;

/* idx_build_filter(), text ranges on "field" selecting "bracket" alone */
extern void idx_build_filter_bracketed(bson_t *filter, List *conds,
									   Index relid, const IdxTableInfo *info,
									   const IdxParamValues *params,
									   const char *field,
									   IdxTextBracket bracket);

/*
 * deparse_text.c: {field: {op: text, ...}} for "nbounds" bounds ("$gt",
 * ...) on a text column, as the strings and ObjectIds it selects
 */
extern void idx_append_text_range(bson_t *out, const char *field,
								  const char *const *ops, const Datum *values,
								  int nbounds, IdxTextBracket bracket);

/*
 * Build the projection for the attributes in "attrs_used" (pull_varattnos
 * convention, whole-row = all columns); _id is always included.
 */
extern void idx_build_projection(bson_t *projection, const IdxTableInfo *info,
								 Bitmapset *attrs_used);

#endif							/* IDXTABLE_DEPARSE_H */
