/*-------------------------------------------------------------------------
 *
 * agg_scan.c
 *		  Execution of aggregates pushed down as an aggregate pipeline (scan
 *		  kind IDX_SCAN_AGG, planned by agg_path.c), and its EXPLAIN.
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/agg_scan.c
 *
 * The pipeline is
 *		[{$match: <pushed conditions>},
 *		 {$group: {_id: null | {g<i>: {$ifNull: ["$field", null]}, ...},
 *				   a<i>: <accumulator>, n<i>: <count of values>, ...}}]
 * where i is the position in fdw_scan_tlist.  $ifNull makes null, missing
 * and undefined one group, as they are all NULL to PostgreSQL; a text
 * column's ObjectId is grouped and compared as its hexadecimal string.
 * With a text group key the first $group is by the fields as they are,
 *		{$group: {_id: "$field" | {g<i>: "$field", ...}, a<i>: ..., ...}},
 *		{$group: {_id: {g<i>: {$ifNull: [<value of "$_id[.g<i>]">, null]}, ...},
 *				  a<i>: {<a<i>'s operator>: "$a<i>"}, ...}}
 * and a second one merges what reads as one group (build_merge()): the
 * ObjectId test costs a few operators per group instead of per document.
 *
 * Sums are of Decimal128 values ($convert to decimal), which hold any sum
 * of int8 values exactly; the least and greatest value of a summed column
 * go through the column's conversion, so that a value the column cannot
 * hold (out of range, no integer, no number: in BSON order, strings,
 * documents, booleans and dates sort above numbers) is the error a local
 * scan gives; a sum or average over no values is NULL, which the count of
 * values tells (MongoDB's $sum gives 0).  Without GROUP BY, no rows give no
 * group in MongoDB but one row in PostgreSQL: count 0, the rest NULL.
 *
 * With count(DISTINCT col) the pipeline has two $group stages:
 *		{$group: {_id: {g<i>: ..., v: {$ifNull: [<col's value>, null]}},
 *				  c<i>: {$sum: 1}}},
 *		{$group: {_id: null | {g<i>: "$_id.g<i>", ...},
 *				  a<i>: <count of non-null "$_id.v">, a<j>: {$sum: "$c<j>"}}}
 * The first has one document per group and distinct value (MongoDB's
 * equality, which agg_path.c allows only where it is PostgreSQL's), the
 * second counts them; count(*) adds up the first stage's counts.  The
 * checks of the values read (check_values()) read the distinct values,
 * which have the same least, greatest and fractional members as all.
 *
 * A pushed ORDER BY (agg_path.c) appends
 *		{$setWindowFields: {output: {l<i>: {$min: ...}, h<i>: {$max: ...},
 *									 f<i>: {$sum: ...}}}},
 *		{$sort: {z<i>: 1 | -1, <output i>: 1 | -1, ...}}, [{$skip}], [{$limit}]
 * and a pushed LIMIT/OFFSET without ORDER BY the same without the $sort.
 * The window makes every group carry the least, greatest and fractional
 * values of all groups (of the aggregates' values and of the group keys),
 * so that a value a scan refuses is an error even in groups that $limit or
 * a local Limit leaves unread.  z<i>, a $min over the group of "the value
 * is null", is 1 for a NULL output (a group key NULL, a sum, min or max
 * over no values), and sorts NULLs where PostgreSQL places them.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "executor/executor.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/fmgrprotos.h"
#include "utils/memutils.h"
#include "utils/numeric.h"

#include "agg_scan.h"
#include "core/connection.h"
#include "core/convert.h"
#include "core/deparse.h"
#include "core/mongoc_compat.h"
#include "core/pg_compat.h"
#include "core/remote_error.h"
#include "core/xact.h"
#include "planner.h"
#include "scan.h"

StaticAssertDecl((int) IdxPrivAggItems == (int) IdxPrivIndexFirst,
				 "agg_scan.h's fdw_private slots follow the common prefix");

/* One column of the scan's rows */
typedef struct IdxAggColumn
{
	IdxAggKind	kind;
	char	   *field;			/* field path read, "" for count(*) */
	char		key[16];		/* its field in the $group output */
	char		nkey[16];		/* sum/avg: the count of values */
	char		lowkey[16];		/* sum/avg: the least value */
	char		highkey[16];	/* sum/avg: the greatest value */
	char		fkey[16];		/* sum/avg: values with a fraction */
	bool		int8_sum;		/* a sum of int2/int4: int8 result */
	bool		integer;		/* the column is int2, int4 or int8 */
	IdxColumnConv conv;			/* group key, min/max: the result type;
								 * sum/avg: the column's; counts: int8 */
	IdxColumnConv numconv;		/* sum/avg: numeric */
} IdxAggColumn;

/* Execution state of a pushed grouping (IdxScanState.agg) */
typedef struct IdxAggScan
{
	int			ncols;
	IdxAggColumn *cols;
	bool		grouped;		/* the query has a GROUP BY */
	bool		distinct;		/* a count(DISTINCT): two $group stages */
	bool		merged;			/* raw keys, then a $group merging them */
	List	   *sort;			/* IdxPrivSort: (column, desc, nulls first) */
	int			limit;			/* OFFSET + LIMIT groups at most, or -1 */
	int			offset;			/* groups skipped first */
	bool		returned;		/* a row was returned since the start */
	bool		started;		/* the aggregate command was sent */
	char	   *last_pipeline;	/* JSON of the latest pipeline */
} IdxAggScan;

/*
 * One item of fdw_private's IdxPrivAggItems (agg_scan.h).
 */
List *
idx_agg_item_make(IdxAggKind kind, const char *field, Oid typid, int32 typmod,
				  const char *colname)
{
	return list_make5(makeInteger(kind), makeString(pstrdup(field ? field : "")),
					  makeInteger(typid), makeInteger(typmod),
					  makeString(pstrdup(colname ? colname : "")));
}

/*
 * The columns of the scan from the plan's items.
 */
static void
init_columns(IdxAggScan *agg, List *items)
{
	ListCell   *lc;
	int			i = 0;

	agg->ncols = list_length(items);
	agg->cols = palloc0(sizeof(IdxAggColumn) * Max(agg->ncols, 1));
	foreach(lc, items)
	{
		List	   *item = lfirst(lc);
		IdxAggColumn *col = &agg->cols[i];
		Oid			typid = intVal(lthird(item));

		col->kind = intVal(linitial(item));
		col->field = strVal(lsecond(item));
		if (col->kind == IDX_AGG_COUNT_DISTINCT)
			agg->distinct = true;
		snprintf(col->key, sizeof(col->key), "%c%d",
				 col->kind == IDX_AGG_GROUP ? 'g' : 'a', i);
		snprintf(col->nkey, sizeof(col->nkey), "n%d", i);
		snprintf(col->lowkey, sizeof(col->lowkey), "l%d", i);
		snprintf(col->highkey, sizeof(col->highkey), "h%d", i);
		snprintf(col->fkey, sizeof(col->fkey), "f%d", i);
		col->int8_sum = (col->kind == IDX_AGG_SUM && typid != INT8OID);
		col->integer = (typid == INT2OID || typid == INT4OID ||
						typid == INT8OID);
		idx_conv_init(&col->conv, strVal(list_nth(item, 4)), typid,
					  intVal(lfourth(item)));
		idx_conv_init(&col->numconv, strVal(list_nth(item, 4)), NUMERICOID,
					  -1);
		i++;
	}
}

/*
 * Does the pipeline of "agg" group by the fields as they are, then merge
 * the groups (see the file header)?  With a text group key, whose ObjectId
 * test is several operators, and not with count(DISTINCT), whose first
 * stage groups by the keys as the columns read them.
 */
static bool
merges_groups(const IdxAggScan *agg)
{
	int			i;

	if (!agg->grouped || agg->distinct)
		return false;
	for (i = 0; i < agg->ncols; i++)
	{
		if (agg->cols[i].kind == IDX_AGG_GROUP &&
			(agg->cols[i].conv.typid == TEXTOID ||
			 agg->cols[i].conv.typid == VARCHAROID))
			return true;
	}
	return false;
}

/*
 * Executor start: the columns; the command is sent at the first row.
 */
static void
idx_agg_scan_begin(ForeignScanState *node, IdxScanState *state, int eflags)
{
	ForeignScan *plan = (ForeignScan *) node->ss.ps.plan;
	IdxAggScan *agg = palloc0(sizeof(IdxAggScan));

	state->agg = agg;
	agg->grouped = intVal(list_nth(plan->fdw_private, IdxPrivAggGrouped));
	agg->sort = list_nth(plan->fdw_private, IdxPrivSort);
	agg->limit = intVal(list_nth(plan->fdw_private, IdxPrivLimit));
	agg->offset = intVal(list_nth(plan->fdw_private, IdxPrivOffset));
	init_columns(agg, list_nth(plan->fdw_private, IdxPrivAggItems));
	agg->merged = merges_groups(agg);
}

/*
 * Append key: {$sum: {$cond: [{$eq: [{$ifNull: ["$field", null]}, null]},
 * 0, 1]}}, the number of values of the field that are not null, missing or
 * undefined (count(col)).  The pipeline is a few hundred bytes per column,
 * far from any BSON size limit, so BCON's unchecked appends are safe.
 */
static void
append_count_values(bson_t *group, const char *key, const char *ref)
{
	BCON_APPEND(group, key, "{", "$sum", "{", "$cond", "[",
				"{", "$eq", "[", "{", "$ifNull", "[", BCON_UTF8(ref), BCON_NULL,
				"]", "}", BCON_NULL, "]", "}",
				BCON_INT32(0), BCON_INT32(1), "]", "}", "}");
}

/*
 * Append under "key" the expression of the value of column "col" that
 * "ref" reads ("$field", or a first stage's output): the value, or for
 * text an ObjectId as its hexadecimal string, which is how the column
 * reads it (convert.h), so that they group and order as equal.
 */
static void
append_value_expr(bson_t *parent, const char *key, const IdxAggColumn *col,
				  const char *ref)
{
	if (col->conv.typid == TEXTOID || col->conv.typid == VARCHAROID)
		BCON_APPEND(parent, key, "{", "$cond", "[",
					"{", "$eq", "[", "{", "$type", BCON_UTF8(ref), "}",
					BCON_UTF8("objectId"), "]", "}",
					"{", "$toString", BCON_UTF8(ref), "}",
					BCON_UTF8(ref), "]", "}");
	else
		BCON_APPEND(parent, key, BCON_UTF8(ref));
}

/*
 * Append key: {op: <value of column "col">}, an accumulator.
 */
static void
append_extreme(bson_t *group, const char *key, const char *op,
			   const IdxAggColumn *col)
{
	bson_t		acc;
	char	   *ref = psprintf("$%s", col->field);

	idx_check_append(BSON_APPEND_DOCUMENT_BEGIN(group, key, &acc));
	append_value_expr(&acc, op, col, ref);
	idx_check_append(bson_append_document_end(group, &acc));
	pfree(ref);
}

/*
 * Append key: the exact sum of the integer values of field "ref" as a
 * Decimal128.  A double goes through $convert to long first: mongod turns a
 * double into a decimal rounded to 15 digits (Decimal128(double) with
 * kRoundTo15Digits, src/mongo/db/exec/document_value/value.cpp), which
 * integral doubles past 10^15 would not survive.  A value that is no
 * number adds nothing here, and the column's conversion of $max (which it
 * is, in BSON order) or $min reports it as a local scan would.
 */
static void
append_sum(bson_t *group, const char *key, const char *ref)
{
	BCON_APPEND(group, key, "{", "$sum", "{", "$convert", "{",
				"input", "{", "$cond", "[",
				"{", "$eq", "[", "{", "$type", BCON_UTF8(ref), "}",
				BCON_UTF8("double"), "]", "}",
				"{", "$convert", "{", "input", BCON_UTF8(ref),
				"to", BCON_UTF8("long"), "onError", BCON_NULL,
				"onNull", BCON_NULL, "}", "}",
				BCON_UTF8(ref), "]", "}",
				"to", BCON_UTF8("decimal"), "onError", BCON_NULL,
				"onNull", BCON_NULL, "}", "}", "}");
}

/*
 * Append key: the number of values of field "ref" that are doubles or
 * decimals with a fraction, which an integer column cannot read.
 */
static void
append_fractions(bson_t *group, const char *key, const char *ref)
{
	BCON_APPEND(group, key, "{", "$sum", "{", "$cond", "[",
				"{", "$and", "[",
				"{", "$in", "[", "{", "$type", BCON_UTF8(ref), "}",
				"[", BCON_UTF8("double"), BCON_UTF8("decimal"), "]", "]", "}",
				"{", "$ne", "[", BCON_UTF8(ref),
				"{", "$trunc", BCON_UTF8(ref), "}", "]", "}",
				"]", "}", BCON_INT32(1), BCON_INT32(0), "]", "}", "}");
}

/*
 * Append the accumulators of column "col" to the $group stage that counts
 * and checks the values of "ref" (the field, or the first stage's "$_id.v"
 * with count(DISTINCT)).
 */
static void
append_accumulators(bson_t *group, const IdxAggColumn *col, const char *ref)
{
	switch (col->kind)
	{
		case IDX_AGG_COUNT_STAR:
			BCON_APPEND(group, col->key, "{", "$sum", BCON_INT32(1), "}");
			break;
		case IDX_AGG_COUNT:
		case IDX_AGG_COUNT_DISTINCT:
			append_count_values(group, col->key, ref);
			break;
		case IDX_AGG_SUM:
		case IDX_AGG_AVG:
			append_sum(group, col->key, ref);
			append_count_values(group, col->nkey, ref);
			break;
		case IDX_AGG_MIN:
			append_extreme(group, col->key, "$min", col);
			break;
		case IDX_AGG_MAX:
			append_extreme(group, col->key, "$max", col);
			break;
		default:
			break;
	}
	/* the checks of every value the aggregate reads (check_values()) */
	if (col->kind != IDX_AGG_GROUP && col->kind != IDX_AGG_COUNT_STAR)
	{
		BCON_APPEND(group, col->lowkey, "{", "$min", BCON_UTF8(ref), "}");
		BCON_APPEND(group, col->highkey, "{", "$max", BCON_UTF8(ref), "}");
		if (col->integer)
			append_fractions(group, col->fkey, ref);
	}
}

/*
 * Append under "key" the group key expression {$ifNull: [<value of
 * "col" that "ref" reads>, null]}: null, missing and undefined are one
 * group, NULL.  "ref" is NULL for the column's field.
 */
static void
append_group_key(bson_t *id, const char *key, const IdxAggColumn *col,
				 const char *ref)
{
	bson_t		op;
	bson_t		args;
	char	   *field_ref = psprintf("$%s", col->field);

	idx_check_append(BSON_APPEND_DOCUMENT_BEGIN(id, key, &op));
	idx_check_append(IDX_BSON_APPEND_ARRAY_BEGIN(&op, "$ifNull", &args));
	append_value_expr(&args, "0", col, ref ? ref : field_ref);
	pfree(field_ref);
	idx_check_append(BSON_APPEND_NULL(&args, "1"));
	idx_check_append(bson_append_array_end(&op, &args));
	idx_check_append(bson_append_document_end(id, &op));
}

/*
 * The number of GROUP BY columns of "agg".
 */
static int
group_count(const IdxAggScan *agg)
{
	int			n = 0;
	int			i;

	for (i = 0; i < agg->ncols; i++)
		n += agg->cols[i].kind == IDX_AGG_GROUP;
	return n;
}

/*
 * The reference of a merged pipeline's second stage to group column "col"
 * of the first stage: "$_id", the one group column, or "$_id.g<i>".
 */
static char *
first_stage_ref(const IdxAggScan *agg, const IdxAggColumn *col)
{
	return group_count(agg) == 1 ? pstrdup("$_id") :
		psprintf("$_id.%s", col->key);
}

/*
 * The $group stage over the documents of a pipeline without
 * count(DISTINCT): by the group key expressions, or when "agg" is merged
 * by the fields' values as they are ("$field" for one group column, else
 * {g<i>: "$field", ...}, where a missing field is left out), which
 * build_merge() then turns into the groups.
 */
static void
build_group(bson_t *group, const IdxAggScan *agg)
{
	bson_t		id = BSON_INITIALIZER;
	int			i;

	for (i = 0; i < agg->ncols; i++)
	{
		const IdxAggColumn *col = &agg->cols[i];
		char	   *ref;

		if (col->kind != IDX_AGG_GROUP)
			continue;
		if (!agg->merged)
		{
			append_group_key(&id, col->key, col, NULL);
			continue;
		}
		ref = psprintf("$%s", col->field);
		idx_check_append(BSON_APPEND_UTF8(&id, col->key, ref));
		pfree(ref);
	}
	if (!agg->grouped)
		BCON_APPEND(group, "_id", BCON_NULL);
	else if (agg->merged && group_count(agg) == 1)
	{
		bson_iter_t iter;

		/* the one field path alone (cheaper than a document per input) */
		if (!bson_iter_init(&iter, &id) || !bson_iter_next(&iter))
			elog(ERROR, "could not read the group key of the first $group stage");
		BCON_APPEND(group, "_id", BCON_UTF8(bson_iter_utf8(&iter, NULL)));
	}
	else
		BCON_APPEND(group, "_id", BCON_DOCUMENT(&id));
	for (i = 0; i < agg->ncols; i++)
	{
		char	   *ref = psprintf("$%s", agg->cols[i].field);

		append_accumulators(group, &agg->cols[i], ref);
		pfree(ref);
	}
	bson_destroy(&id);
}

/*
 * The second $group stage of a merged pipeline: the first stage's groups
 * by their group key expressions over first_stage_ref(), so that values one
 * group key reads alike (an ObjectId and its hexadecimal string; null,
 * missing and undefined) become one group, and each output of "first"
 * accumulated again by its own operator ($sum of sums and counts, $min of
 * least values, $max of greatest ones), which is exact for every output
 * build_group() and append_null_flags() make.  It costs a document per
 * first-stage group, where the key expressions over the documents would
 * cost several operators per document.
 */
static void
build_merge(bson_t *second, const bson_t *first, const IdxAggScan *agg)
{
	bson_t		id = BSON_INITIALIZER;
	bson_iter_t iter;
	bson_iter_t op;
	int			i;

	for (i = 0; i < agg->ncols; i++)
	{
		const IdxAggColumn *col = &agg->cols[i];
		char	   *ref;

		if (col->kind != IDX_AGG_GROUP)
			continue;
		ref = first_stage_ref(agg, col);
		append_group_key(&id, col->key, col, ref);
		pfree(ref);
	}
	BCON_APPEND(second, "_id", BCON_DOCUMENT(&id));
	bson_destroy(&id);
	if (!bson_iter_init(&iter, first))
		elog(ERROR, "could not read the first $group stage");
	while (bson_iter_next(&iter))
	{
		const char *key = bson_iter_key(&iter);
		char	   *ref;

		if (strcmp(key, "_id") == 0)
			continue;
		if (!BSON_ITER_HOLDS_DOCUMENT(&iter) ||
			!bson_iter_recurse(&iter, &op) || !bson_iter_next(&op))
			elog(ERROR, "unexpected accumulator \"%s\" in the first $group stage",
				 key);
		ref = psprintf("$%s", key);
		BCON_APPEND(second, key, "{", bson_iter_key(&op), BCON_UTF8(ref), "}");
		pfree(ref);
	}
}

/*
 * The two $group stages of a pipeline with count(DISTINCT) (see the file
 * header): "first" groups by the groups and the distinct column's value,
 * "second" counts per group.
 */
static void
build_distinct_groups(bson_t *first, bson_t *second, const IdxAggScan *agg)
{
	bson_t		id = BSON_INITIALIZER;
	bson_t		outer_id = BSON_INITIALIZER;
	const IdxAggColumn *value = NULL;
	int			i;

	for (i = 0; i < agg->ncols; i++)
	{
		const IdxAggColumn *col = &agg->cols[i];

		if (col->kind == IDX_AGG_GROUP)
		{
			char	   *ref = psprintf("$_id.%s", col->key);

			append_group_key(&id, col->key, col, NULL);
			idx_check_append(BSON_APPEND_UTF8(&outer_id, col->key, ref));
			pfree(ref);
		}
		else if (col->kind == IDX_AGG_COUNT_DISTINCT && value == NULL)
			value = col;
	}
	Assert(value != NULL);
	append_group_key(&id, "v", value, NULL);
	BCON_APPEND(first, "_id", BCON_DOCUMENT(&id));
	if (agg->grouped)
		BCON_APPEND(second, "_id", BCON_DOCUMENT(&outer_id));
	else
		BCON_APPEND(second, "_id", BCON_NULL);
	for (i = 0; i < agg->ncols; i++)
	{
		const IdxAggColumn *col = &agg->cols[i];

		if (col->kind == IDX_AGG_COUNT_STAR)
		{
			char	   *ref = psprintf("$c%d", i);

			BCON_APPEND(first, ref + 1, "{", "$sum", BCON_INT32(1), "}");
			BCON_APPEND(second, col->key, "{", "$sum", BCON_UTF8(ref), "}");
			pfree(ref);
		}
		else if (col->kind == IDX_AGG_COUNT_DISTINCT)
			append_accumulators(second, col, "$_id.v");
	}
	bson_destroy(&id);
	bson_destroy(&outer_id);
}

/*
 * Is column "i" a key of the pushed sort, and NULL for some groups (a sort
 * key on it then needs a null flag z<i>)?
 */
static bool
sorted_nullable(const IdxAggScan *agg, int i)
{
	ListCell   *lc;

	if (agg->cols[i].kind == IDX_AGG_COUNT_STAR ||
		agg->cols[i].kind == IDX_AGG_COUNT ||
		agg->cols[i].kind == IDX_AGG_COUNT_DISTINCT)
		return false;
	foreach(lc, agg->sort)
	{
		if (linitial_int(lfirst(lc)) == i)
			return true;
	}
	return false;
}

/*
 * Append to the last $group stage "group" the null flags of the sorted
 * columns: z<i>: {$min: {$cond: [{$eq: [{$ifNull: [ref, null]}, null]}, 1,
 * 0]}}, 1 when every value the column's output comes from is null (a group
 * key is one value per group).
 */
static void
append_null_flags(bson_t *group, const IdxAggScan *agg)
{
	int			i;

	for (i = 0; i < agg->ncols; i++)
	{
		const IdxAggColumn *col = &agg->cols[i];
		char		key[16];
		char	   *ref;

		if (!sorted_nullable(agg, i))
			continue;
		snprintf(key, sizeof(key), "z%d", i);
		if (agg->distinct)
			ref = psprintf("$_id.%s", col->key);
		else
			ref = psprintf("$%s", col->field);
		BCON_APPEND(group, key, "{", "$min", "{", "$cond", "[",
					"{", "$eq", "[", "{", "$ifNull", "[", BCON_UTF8(ref),
					BCON_NULL, "]", "}", BCON_NULL, "]", "}",
					BCON_INT32(1), BCON_INT32(0), "]", "}", "}");
		pfree(ref);
	}
}

/*
 * The $setWindowFields stage that gives every group the checks of all
 * groups (see the file header).
 */
static void
build_window(bson_t *window, const IdxAggScan *agg)
{
	bson_t		output = BSON_INITIALIZER;
	int			i;

	for (i = 0; i < agg->ncols; i++)
	{
		const IdxAggColumn *col = &agg->cols[i];
		char	   *low;
		char	   *high;

		if (col->kind == IDX_AGG_COUNT_STAR)
			continue;
		if (col->kind == IDX_AGG_GROUP)
		{
			low = psprintf("$_id.%s", col->key);
			high = pstrdup(low);
		}
		else
		{
			low = psprintf("$%s", col->lowkey);
			high = psprintf("$%s", col->highkey);
		}
		BCON_APPEND(&output, col->lowkey, "{", "$min", BCON_UTF8(low), "}",
					col->highkey, "{", "$max", BCON_UTF8(high), "}");
		if (col->integer && col->kind == IDX_AGG_GROUP)
			append_fractions(&output, col->fkey, low);
		else if (col->integer)
		{
			char	   *fref = psprintf("$%s", col->fkey);

			BCON_APPEND(&output, col->fkey, "{", "$sum", BCON_UTF8(fref), "}");
			pfree(fref);
		}
		pfree(low);
		pfree(high);
	}
	BCON_APPEND(window, "output", BCON_DOCUMENT(&output));
	bson_destroy(&output);
}

/*
 * The $sort stage of the pushed ORDER BY: per key, its null flag if it
 * has one (NULLs last ascending by default: flag 1 sorts after 0), then
 * the output itself.
 */
static void
build_sort(bson_t *sort, const IdxAggScan *agg)
{
	ListCell   *lc;

	foreach(lc, agg->sort)
	{
		int			i = linitial_int(lfirst(lc));
		bool		desc = lsecond_int(lfirst(lc));
		bool		nulls_first = lthird_int(lfirst(lc));
		const IdxAggColumn *col = &agg->cols[i];
		char		key[32];

		if (sorted_nullable(agg, i))
		{
			snprintf(key, sizeof(key), "z%d", i);
			idx_check_append(BSON_APPEND_INT32(sort, key, nulls_first ? -1 : 1));
		}
		if (col->kind == IDX_AGG_GROUP)
			snprintf(key, sizeof(key), "_id.%s", col->key);
		else
			snprintf(key, sizeof(key), "%s", col->key);
		idx_check_append(BSON_APPEND_INT32(sort, key, desc ? -1 : 1));
	}
}

/*
 * Does the pipeline sort or cut its groups (a pushed ORDER BY, LIMIT or
 * OFFSET)?  Then a window carries every group's value checks, so that the
 * groups it leaves unread, or the local Limit above it, are checked too.
 */
static bool
windowed(const IdxAggScan *agg)
{
	return agg->sort != NIL || agg->limit >= 0 || agg->offset > 0;
}

/*
 * Append the stages of a pushed ORDER BY and LIMIT/OFFSET after the
 * $group stage(s), at position "pos" of the pipeline.  Without ORDER BY
 * there is no $sort: any groups are a right answer, as long as there are
 * as many as the LIMIT and OFFSET leave.
 */
static void
append_order_stages(bson_t *pipeline, const IdxAggScan *agg, int pos)
{
	bson_t		window = BSON_INITIALIZER;
	bson_t		sort = BSON_INITIALIZER;
	char		key[16];

	build_window(&window, agg);
	snprintf(key, sizeof(key), "%d", pos++);
	BCON_APPEND(pipeline, key, "{", "$setWindowFields", BCON_DOCUMENT(&window), "}");
	if (agg->sort != NIL)
	{
		build_sort(&sort, agg);
		snprintf(key, sizeof(key), "%d", pos++);
		BCON_APPEND(pipeline, key, "{", "$sort", BCON_DOCUMENT(&sort), "}");
	}
	if (agg->offset > 0)
	{
		snprintf(key, sizeof(key), "%d", pos++);
		BCON_APPEND(pipeline, key, "{", "$skip", BCON_INT64(agg->offset), "}");
	}
	if (agg->limit >= 0)
	{
		snprintf(key, sizeof(key), "%d", pos++);
		BCON_APPEND(pipeline, key, "{", "$limit",
					BCON_INT64(agg->limit - agg->offset), "}");
	}
	bson_destroy(&window);
	bson_destroy(&sort);
}

/*
 * Build the pipeline: $match of "filter", then the $group stage(s).
 */
static void
build_pipeline(bson_t *pipeline, const IdxAggScan *agg, const bson_t *filter)
{
	bson_t		group = BSON_INITIALIZER;
	bson_t		second = BSON_INITIALIZER;

	BCON_APPEND(pipeline, "0", "{", "$match", BCON_DOCUMENT(filter), "}");
	if (agg->distinct)
	{
		build_distinct_groups(&group, &second, agg);
		append_null_flags(&second, agg);
		BCON_APPEND(pipeline, "1", "{", "$group", BCON_DOCUMENT(&group), "}",
					"2", "{", "$group", BCON_DOCUMENT(&second), "}");
	}
	else
	{
		build_group(&group, agg);
		append_null_flags(&group, agg);
		BCON_APPEND(pipeline, "1", "{", "$group", BCON_DOCUMENT(&group), "}");
		if (agg->merged)
		{
			build_merge(&second, &group, agg);
			BCON_APPEND(pipeline, "2", "{", "$group", BCON_DOCUMENT(&second), "}");
		}
	}
	if (windowed(agg))
		append_order_stages(pipeline, agg,
							agg->distinct || agg->merged ? 3 : 2);
	bson_destroy(&group);
	bson_destroy(&second);
}

/*
 * The aggregate command's options: the simple collation the pushdown rules
 * assume, the batch size, and the transaction's session.
 */
static void
build_options(bson_t *opts, IdxScanState *state)
{
	BCON_APPEND(opts, "collation", "{", "locale", BCON_UTF8("simple"), "}",
				"batchSize", BCON_INT32(state->info->fetch_size));
	idx_xact_append_session(state->client, opts);
}

/*
 * Send the aggregate command with this execution's parameter values.
 */
static void
open_cursor(ForeignScanState *node, IdxScanState *state)
{
	IdxAggScan *agg = state->agg;
	bson_t		filter = BSON_INITIALIZER;
	bson_t		pipeline = BSON_INITIALIZER;
	bson_t		opts = BSON_INITIALIZER;
	MemoryContext oldcxt;

	idx_eval_exprs(node, state->param_states, state->params.values,
				   state->params.nulls);
	oldcxt = MemoryContextSwitchTo(state->scan_cxt);
	PG_TRY();
	{
		idx_build_filter(&filter, state->remote_conds, state->relid,
						 state->info, &state->params);
		build_pipeline(&pipeline, agg, &filter);
		build_options(&opts, state);
		if (agg->last_pipeline)
			pfree(agg->last_pipeline);
		agg->last_pipeline = idx_bson_as_json(&pipeline);

		state->collection = mongoc_client_get_collection(state->client,
														 state->info->database,
														 state->info->collection);
		idx_client_pin(state->client, 1);
		state->pinned = true;
		state->cursor = mongoc_collection_aggregate(state->collection,
													MONGOC_QUERY_NONE,
													&pipeline, &opts,
													state->read_prefs);
	}
	PG_FINALLY();
	{
		bson_destroy(&filter);
		bson_destroy(&pipeline);
		bson_destroy(&opts);
	}
	PG_END_TRY();
	MemoryContextSwitchTo(oldcxt);
	agg->started = true;
}

/*
 * A sum of integers as PostgreSQL returns it: numeric with scale 0 (or
 * int8 for int2/int4, 22003 beyond its range).  A sum that is no integer
 * can only come from values that are no integers, which reading them as
 * the column's type would have refused.
 */
static Datum
integer_sum(Datum sum, const IdxAggColumn *col, const IdxScanState *state)
{
	Datum		rounded = DirectFunctionCall2(numeric_round, sum,
											  Int32GetDatum(0));

	if (!DatumGetBool(DirectFunctionCall2(numeric_eq, sum, rounded)))
		ereport(ERROR,
				(errcode(ERRCODE_FDW_INVALID_DATA_TYPE),
				 errmsg("the sum of column \"%s\" of collection \"%s\" is not an integer",
						col->conv.colname, state->info->collection),
				 errdetail("The sum is %s.",
						   DatumGetCString(DirectFunctionCall1(numeric_out,
															   sum)))));
	if (col->int8_sum)
		return DirectFunctionCall1(numeric_int8, rounded);
	return rounded;
}

/*
 * Convert field "key" of "doc" with the column's converter.
 */
static Datum
read_value(const bson_t *doc, const char *key, const IdxColumnConv *conv,
		   const IdxScanState *state, bool *isnull)
{
	bson_iter_t iter;
	IdxConvSource src = {state->info->collection, NULL, true};

	if (!bson_iter_init_find(&iter, doc, key))
	{
		*isnull = true;
		return (Datum) 0;
	}
	return idx_bson_to_datum(&iter, conv, &src, isnull);
}

/*
 * The count of values in field "key" of "doc" (0 if absent).
 */
static int64
read_count(const bson_t *doc, const char *key)
{
	bson_iter_t iter;

	if (!bson_iter_init_find(&iter, doc, key) ||
		!BSON_ITER_HOLDS_NUMBER(&iter))
		return 0;
	return bson_iter_as_int64(&iter);
}

/*
 * An aggregate over a column reads every value of it, and a scan would
 * fail on one the column cannot read.  A value of another BSON type than
 * the column's is, in BSON order, below or above all of the column's type,
 * so it is the least or the greatest: those two go through the column's
 * conversion, which raises the scan's error (HV004; 22003 out of range).
 * Values of the right type the column still refuses lie anywhere: for
 * integer columns those with a fraction, counted apart.
 */
static void
check_values(const bson_t *doc, const IdxAggColumn *col,
			const IdxScanState *state)
{
	bool		isnull;

	(void) read_value(doc, col->lowkey, &col->conv, state, &isnull);
	(void) read_value(doc, col->highkey, &col->conv, state, &isnull);
	if (col->integer && read_count(doc, col->fkey) > 0)
		ereport(ERROR,
				(errcode(ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE),
				 errmsg("a value in column \"%s\" cannot be represented exactly in type %s",
						col->conv.colname, format_type_be(col->conv.typid)),
				 errdetail("Collection \"%s\".", state->info->collection)));
}


/*
 * Fill column "i" of the row from a $group output document "doc" (NULL:
 * the one row of an ungrouped aggregate over no rows).
 */
static void
fill_column(const bson_t *doc, int i, const IdxScanState *state,
			Datum *value, bool *isnull)
{
	const IdxAggColumn *col = &state->agg->cols[i];
	bson_t		id;
	bson_iter_t iter;
	int64		n;

	*isnull = true;
	*value = (Datum) 0;
	if (doc != NULL && col->kind != IDX_AGG_GROUP &&
		col->kind != IDX_AGG_COUNT_STAR)
		check_values(doc, col, state);
	if (col->kind == IDX_AGG_COUNT_STAR || col->kind == IDX_AGG_COUNT ||
		col->kind == IDX_AGG_COUNT_DISTINCT)
	{
		*isnull = false;
		*value = Int64GetDatum(doc ? read_count(doc, col->key) : 0);
		return;
	}
	if (doc == NULL)
		return;
	if (col->kind == IDX_AGG_GROUP)
	{
		/* the window's checks of every group's key (pushed ORDER BY) */
		if (windowed(state->agg))
			check_values(doc, col, state);
		if (bson_iter_init_find(&iter, doc, "_id") &&
			BSON_ITER_HOLDS_DOCUMENT(&iter))
		{
			uint32		len;
			const uint8_t *data;

			bson_iter_document(&iter, &len, &data);
			if (bson_init_static(&id, data, len))
				*value = read_value(&id, col->key, &col->conv, state, isnull);
		}
		return;
	}
	if (col->kind == IDX_AGG_MIN || col->kind == IDX_AGG_MAX)
	{
		*value = read_value(doc, col->key, &col->conv, state, isnull);
		return;
	}
	n = read_count(doc, col->nkey);
	if (n == 0)
		return;					/* sum/avg over no values: NULL */
	*value = read_value(doc, col->key, &col->numconv, state, isnull);
	if (*isnull)
		return;
	*value = integer_sum(*value, col, state);
	if (col->kind == IDX_AGG_AVG)
		*value = DirectFunctionCall2(numeric_div, *value,
									 NumericGetDatum(int64_to_numeric(n)));
}

/*
 * The next row, or an empty slot at the end.
 */
static TupleTableSlot *
idx_agg_scan_next(ForeignScanState *node, IdxScanState *state)
{
	IdxAggScan *agg = state->agg;
	TupleTableSlot *slot = node->ss.ss_ScanTupleSlot;
	const bson_t *doc = NULL;
	MemoryContext oldcxt;
	int			i;

	ExecClearTuple(slot);
	if (!agg->started)
		open_cursor(node, state);
	if (state->cursor != NULL)
		doc = idx_scan_next_doc(state, &state->cursor,
								state->info->collection,
								state->info->database);
	if (doc == NULL && (agg->grouped || agg->returned))
		return slot;
	agg->returned = true;
	if (doc)
		state->docs_fetched++;

	oldcxt = MemoryContextSwitchTo(node->ss.ps.ps_ExprContext->ecxt_per_tuple_memory);
	for (i = 0; i < agg->ncols; i++)
		fill_column(doc, i, state, &slot->tts_values[i], &slot->tts_isnull[i]);
	MemoryContextSwitchTo(oldcxt);
	return ExecStoreVirtualTuple(slot);
}

/*
 * Restart: the next row comes from a new command.
 */
static void
idx_agg_scan_rescan(IdxScanState *state)
{
	state->agg->started = false;
	state->agg->returned = false;
}

/*
 * Release what the scan holds (the cursor goes with the scan's).
 */
static void
idx_agg_scan_end(IdxScanState *state)
{
}

/*
 * EXPLAIN: the collection; with VERBOSE the pipeline as MongoDB JSON (the
 * latest one sent, else with "$n" for parameters); with ANALYZE the groups
 * returned and round trips.
 */
static void
idx_agg_scan_explain(IdxScanState *state, ExplainState *es)
{
	IdxAggScan *agg = state->agg;

	ExplainPropertyText("Collection",
						psprintf("%s.%s", state->info->database,
								 state->info->collection), es);
	ExplainPropertyText("Access", "aggregate pipeline", es);
	if (es->verbose)
	{
		char	   *json = agg->last_pipeline;

		if (json == NULL)
		{
			bson_t		filter = BSON_INITIALIZER;
			bson_t		pipeline = BSON_INITIALIZER;
			IdxParamValues placeholders = state->params;

			placeholders.placeholders = true;
			idx_build_filter(&filter, state->remote_conds, state->relid,
							 state->info, &placeholders);
			build_pipeline(&pipeline, agg, &filter);
			json = idx_bson_as_json(&pipeline);
			bson_destroy(&filter);
			bson_destroy(&pipeline);
		}
		ExplainPropertyText("MongoDB Pipeline", json, es);
	}
	if (es->analyze)
	{
		ExplainPropertyUInteger("Groups Fetched", NULL, state->docs_fetched,
								es);
		ExplainPropertyUInteger("Round Trips", NULL, state->round_trips, es);
	}
}

/*
 * The callbacks of scan kind IDX_SCAN_AGG (scan.h).
 */
const IdxScanMethods idx_agg_scan_methods = {
	.begin = idx_agg_scan_begin,
	.next = idx_agg_scan_next,
	.rescan = idx_agg_scan_rescan,
	.end = idx_agg_scan_end,
	.explain = idx_agg_scan_explain
};
