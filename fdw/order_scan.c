/*-------------------------------------------------------------------------
 *
 * order_scan.c
 *		  Execution of a plain scan with a pushed sort, limit or offset
 *		  (order.h): the find's sort, limit and skip, and the finds of a
 *		  sorted scan (the values, NaNs and NULLs of its first key).
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/order_scan.c
 *
 * Without a sort the find skips OFFSET documents and returns at most
 * LIMIT.  A sorted scan skips locally instead: how many documents a find
 * would have skipped is not known when the next one starts.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "utils/float.h"

#include "core/pg_compat.h"
#include "core/text_order.h"
#include "order.h"

/*
 * The execution state of a plain scan's pushed sort, limit and offset
 * from its plan's fdw_private, or NULL if nothing is pushed.
 */
IdxOrderScan *
idx_order_scan_create(List *fdw_private)
{
	IdxOrderScan *os;
	List	   *sort = list_nth(fdw_private, IdxPrivSort);
	int			limit = intVal(list_nth(fdw_private, IdxPrivLimit));
	int			offset = intVal(list_nth(fdw_private, IdxPrivOffset));

	if (sort == NIL && limit < 0 && offset == 0)
		return NULL;
	os = palloc0(sizeof(IdxOrderScan));
	os->sort = sort;
	os->limit = limit;
	os->offset = offset;
	return os;
}

/*
 * Has the scan returned all the rows it may (or skipped past them)?
 */
bool
idx_order_exhausted(const IdxOrderScan *os)
{
	if (os->limit < 0)
		return false;
	return os->sort != NIL ? os->seen >= os->limit : os->limit <= os->offset;
}

/* The part of the rows a find of a sorted scan reads (order.h) */
typedef enum IdxOrderPart
{
	IDX_PART_VALUES,			/* first key neither NULL nor NaN */
	IDX_PART_NAN,				/* first key NaN (float keys only) */
	IDX_PART_NULLS,				/* first key NULL */
	IDX_PART_OTHERS				/* first key of a type text does not read
								 * (text keys only) */
} IdxOrderPart;

#define MAX_PARTS 4

static IdxOrderPart current_part(const IdxOrderScan *os);

/*
 * Documents the current find may return at most, -1 for no limit.  The
 * find of a text key's other types needs one: it only shows that there
 * is one, whose conversion fails as it would in a plain scan.
 */
static int
find_limit(const IdxOrderScan *os)
{
	if (os->sort != NIL && current_part(os) == IDX_PART_OTHERS)
		return 1;
	if (os->limit < 0)
		return -1;
	return os->sort != NIL ? os->limit - os->seen : os->limit - os->offset;
}

/*
 * The batch size of the find: the fetch size, or less if the limit asks
 * for fewer documents.
 */
int
idx_order_batch_size(const IdxOrderScan *os, int fetch_size)
{
	int			limit = find_limit(os);

	return (limit > 0 && limit < fetch_size) ? limit : fetch_size;
}

/*
 * Is the first key of a pushed sort a float column, whose NaNs MongoDB
 * sorts below every number and PostgreSQL above?
 */
static bool
first_key_is_float(const IdxOrderScan *os)
{
	Oid			type = lfourth_int(linitial(os->sort));

	return type == FLOAT4OID || type == FLOAT8OID;
}

/*
 * Is the first key of a pushed sort a text column (order_path.c: then the
 * only key, under a collation that orders as bytes), whose strings and
 * ObjectIds MongoDB sorts apart and PostgreSQL together?
 */
static bool
first_key_is_text(const IdxOrderScan *os)
{
	Oid			type = lfourth_int(linitial(os->sort));

	return type == TEXTOID || type == VARCHAROID;
}

/*
 * The parts of a sorted scan in the order PostgreSQL returns them, in
 * "parts"; returns how many.  NULLs first or last as the query says;
 * NaNs of a float key above the numbers: after them ascending, before
 * them descending.  A text key's values of other types come first: a
 * plain scan would fail to convert them.
 */
static int
order_parts(const IdxOrderScan *os, IdxOrderPart *parts)
{
	List	   *key = linitial(os->sort);
	bool		desc = lsecond_int(key);
	bool		nulls_first = lthird_int(key);
	bool		nans = first_key_is_float(os);
	int			n = 0;

	if (first_key_is_text(os))
		parts[n++] = IDX_PART_OTHERS;
	if (nulls_first)
		parts[n++] = IDX_PART_NULLS;
	if (nans && desc)
		parts[n++] = IDX_PART_NAN;
	parts[n++] = IDX_PART_VALUES;
	if (nans && !desc)
		parts[n++] = IDX_PART_NAN;
	if (!nulls_first)
		parts[n++] = IDX_PART_NULLS;
	return n;
}

/*
 * The part of the rows the current find of a sorted scan reads.
 */
static IdxOrderPart
current_part(const IdxOrderScan *os)
{
	IdxOrderPart parts[MAX_PARTS];

	order_parts(os, parts);
	return parts[os->phase];
}

/*
 * Append the condition of a sorted scan's find of the values of its first
 * key "field": not NULL ({f: {$ne: null, $not: {$type: "undefined"}}}),
 * the form of IS NOT NULL (deparse.c), which MongoDB serves from an index
 * on the field; for a float key not NaN either ($nin: [null, NaN] in place
 * of $ne: null).  Values of another BSON type than the column's go with
 * them and fail to read, as they do in a plain scan.  _id is never
 * undefined (mongod refuses it).
 */
static void
append_values_cond(const IdxOrderScan *os, const char *field, bson_t *doc)
{
	bson_t		cond;
	bson_t		not;
	bson_t		array;

	idx_check_append(BSON_APPEND_DOCUMENT_BEGIN(doc, field, &cond));
	if (first_key_is_float(os))
	{
		idx_check_append(IDX_BSON_APPEND_ARRAY_BEGIN(&cond, "$nin", &array));
		idx_check_append(BSON_APPEND_NULL(&array, "0"));
		idx_check_append(BSON_APPEND_DOUBLE(&array, "1", get_float8_nan()));
		idx_check_append(bson_append_array_end(&cond, &array));
	}
	else
		idx_check_append(BSON_APPEND_NULL(&cond, "$ne"));
	if (strcmp(field, "_id") != 0)
	{
		idx_check_append(BSON_APPEND_DOCUMENT_BEGIN(&cond, "$not", &not));
		idx_check_append(BSON_APPEND_UTF8(&not, "$type", "undefined"));
		idx_check_append(bson_append_document_end(&cond, &not));
	}
	idx_check_append(bson_append_document_end(doc, &cond));
}

/*
 * Append the condition of a sorted scan's find of the NULLs of its first
 * key "field": {$or: [{f: null}, {f: {$type: "undefined"}}]}, the form of
 * IS NULL (deparse.c; mongod 8.0's {f: null} no longer matches undefined),
 * or {_id: null} for _id.
 */
static void
append_nulls_cond(const char *field, bson_t *doc)
{
	bson_t		cond;
	bson_t		array;
	bson_t		item;

	if (strcmp(field, "_id") == 0)
	{
		idx_check_append(BSON_APPEND_NULL(doc, field));
		return;
	}
	idx_check_append(IDX_BSON_APPEND_ARRAY_BEGIN(doc, "$or", &array));
	idx_check_append(BSON_APPEND_DOCUMENT_BEGIN(&array, "0", &item));
	idx_check_append(BSON_APPEND_NULL(&item, field));
	idx_check_append(bson_append_document_end(&array, &item));
	idx_check_append(BSON_APPEND_DOCUMENT_BEGIN(&array, "1", &item));
	idx_check_append(BSON_APPEND_DOCUMENT_BEGIN(&item, field, &cond));
	idx_check_append(BSON_APPEND_UTF8(&cond, "$type", "undefined"));
	idx_check_append(bson_append_document_end(&item, &cond));
	idx_check_append(bson_append_document_end(&array, &item));
	idx_check_append(bson_append_array_end(doc, &array));
}

/*
 * Append the condition of one of the two finds of a text key's values:
 * its strings and symbols ("sub" 0: {f: {$gte: ""}}) or its ObjectIds
 * (1: {f: {$gte: ObjectId("000000000000000000000000")}}), each its type
 * bracket, which an index on the field serves as one interval.
 */
static void
append_text_values_cond(const char *field, int sub, bson_t *doc)
{
	bson_t		cond;
	bson_oid_t	zero;

	idx_check_append(BSON_APPEND_DOCUMENT_BEGIN(doc, field, &cond));
	if (sub == 0)
		idx_check_append(BSON_APPEND_UTF8(&cond, "$gte", ""));
	else
	{
		idx_objectid_least(&zero);
		idx_check_append(BSON_APPEND_OID(&cond, "$gte", &zero));
	}
	idx_check_append(bson_append_document_end(doc, &cond));
}

/*
 * Append the condition of the find of a text key's other types: every
 * BSON type but strings, symbols, ObjectIds, null and undefined, as a
 * $type list, which mongod serves from an index as one interval per type
 * bracket.  Arrays too, but for _id (never an array): an index cannot
 * bound them, and they read as an error wherever they come from.
 */
static void
append_other_types_cond(const char *field, bson_t *doc)
{
	static const char *const types[] = {
		"double", "int", "long", "decimal", "object", "binData", "bool",
		"date", "timestamp", "regex", "dbPointer", "javascript",
		"javascriptWithScope", "minKey", "maxKey"
	};
	bson_t		cond;
	bson_t		array;
	char		key[16];
	int			i;

	idx_check_append(BSON_APPEND_DOCUMENT_BEGIN(doc, field, &cond));
	idx_check_append(IDX_BSON_APPEND_ARRAY_BEGIN(&cond, "$type", &array));
	for (i = 0; i < lengthof(types); i++)
	{
		snprintf(key, sizeof(key), "%d", i);
		idx_check_append(BSON_APPEND_UTF8(&array, key, types[i]));
	}
	if (strcmp(field, "_id") != 0)
	{
		snprintf(key, sizeof(key), "%d", i);
		idx_check_append(BSON_APPEND_UTF8(&array, key, "array"));
	}
	idx_check_append(bson_append_array_end(&cond, &array));
	idx_check_append(bson_append_document_end(doc, &cond));
}

/*
 * Append the condition of the current find of a sorted scan on its first
 * key: its values (for a text key those of find "sub", see
 * idx_order_merging()), its NaNs ({f: NaN}, which matches double and
 * decimal NaNs alike), its NULLs, or its other types.  Together the parts
 * hold every document the filter matches.
 */
static void
append_phase_cond(const IdxOrderScan *os, const IdxTableInfo *info, int sub,
				  bson_t *doc)
{
	const char *field = info->fields[linitial_int(linitial(os->sort)) - 1];

	switch (current_part(os))
	{
		case IDX_PART_VALUES:
			if (first_key_is_text(os))
				append_text_values_cond(field, sub, doc);
			else
				append_values_cond(os, field, doc);
			break;
		case IDX_PART_OTHERS:
			append_other_types_cond(field, doc);
			break;
		case IDX_PART_NAN:
			idx_check_append(BSON_APPEND_DOUBLE(doc, field, get_float8_nan()));
			break;
		case IDX_PART_NULLS:
			append_nulls_cond(field, doc);
			break;
	}
}

/*
 * Replace "filter" by {$and: [filter, phase condition]} (or the condition
 * alone for an empty filter).
 */
static void
restrict_filter(const IdxOrderScan *os, const IdxTableInfo *info, int sub,
				bson_t *filter)
{
	bson_t		result = BSON_INITIALIZER;
	bson_t		array;
	bson_t		item;

	if (bson_empty(filter))
		append_phase_cond(os, info, sub, &result);
	else
	{
		idx_check_append(IDX_BSON_APPEND_ARRAY_BEGIN(&result, "$and", &array));
		idx_check_append(BSON_APPEND_DOCUMENT(&array, "0", filter));
		idx_check_append(BSON_APPEND_DOCUMENT_BEGIN(&array, "1", &item));
		append_phase_cond(os, info, sub, &item);
		idx_check_append(bson_append_document_end(&array, &item));
		idx_check_append(bson_append_array_end(&result, &array));
	}
	bson_destroy(filter);
	bson_init(filter);
	bson_concat(filter, &result);
	bson_destroy(&result);
}

/*
 * Append the sort document of the current find: every key when it reads
 * the values of the first key, the others when it reads its NaNs or NULLs.
 * Returns whether there was a key to sort on.
 */
static bool
append_sort(const IdxOrderScan *os, const IdxTableInfo *info, bson_t *doc)
{
	ListCell   *lc;
	bool		any = false;

	foreach(lc, os->sort)
	{
		List	   *key = lfirst(lc);

		if (foreach_current_index(lc) == 0 &&
			current_part(os) != IDX_PART_VALUES)
			continue;
		idx_check_append(BSON_APPEND_INT32(doc,
										   info->fields[linitial_int(key) - 1],
										   lsecond_int(key) ? -1 : 1));
		any = true;
	}
	return any;
}

/*
 * Adapt a find to the pushed sort, limit and offset: restrict the filter
 * to the current phase of a sorted scan, and add sort, limit and skip to
 * the options.  Sorts may spill to disk on the server (a sort on a field
 * without an index examines every match).
 */
void
idx_order_find(const IdxOrderScan *os, const IdxTableInfo *info, int sub,
			   bson_t *filter, bson_t *opts)
{
	int			limit = find_limit(os);

	if (os->sort != NIL)
	{
		bson_t		sort;

		restrict_filter(os, info, sub, filter);
		idx_check_append(BSON_APPEND_DOCUMENT_BEGIN(opts, "sort", &sort));
		append_sort(os, info, &sort);
		idx_check_append(bson_append_document_end(opts, &sort));
		idx_check_append(BSON_APPEND_BOOL(opts, "allowDiskUse", true));
	}
	else if (os->offset > 0)
		idx_check_append(BSON_APPEND_INT64(opts, "skip", os->offset));
	if (limit > 0)
		idx_check_append(BSON_APPEND_INT64(opts, "limit", limit));
}

/*
 * Count a document read by a sorted scan; true if it is to be skipped
 * (OFFSET).
 */
bool
idx_order_skip_row(IdxOrderScan *os)
{
	if (os->sort == NIL || current_part(os) == IDX_PART_OTHERS)
		return false;			/* the other types' row fails to convert */
	return ++os->seen <= os->offset;
}

/*
 * Does the current find of a sorted scan read a text key's values, by two
 * finds (0: strings and symbols, 1: ObjectIds) whose rows are merged
 * (idx_order_merge_pick())?
 */
bool
idx_order_merging(const IdxOrderScan *os)
{
	return os->sort != NIL && first_key_is_text(os) &&
		current_part(os) == IDX_PART_VALUES;
}

/*
 * The field and bracket (deparse.h) of the text ranges in the filter of
 * find "sub" of the current part: for a text key's values, the ranges on
 * the key select only the strings (0) or only the ObjectIds (1), which the
 * find's condition asks for alone.  Returns the field, or NULL for the
 * unrestricted filter.
 */
const char *
idx_order_bracket(const IdxOrderScan *os, const IdxTableInfo *info, int sub,
				  IdxTextBracket *bracket)
{
	*bracket = IDX_TEXT_BOTH;
	if (os == NULL || !idx_order_merging(os))
		return NULL;
	*bracket = sub == 0 ? IDX_TEXT_STRINGS : IDX_TEXT_OBJECTIDS;
	return info->fields[linitial_int(linitial(os->sort)) - 1];
}

/*
 * Which of the next documents of the two finds of a text key's values
 * comes first in PostgreSQL's order: 0 or 1.  Their keys compare as the
 * text they read as, byte by byte (the key's collation orders as bytes).
 * A key of another type (an array, which the strings' find matches by an
 * element) comes first, to fail its conversion.
 */
int
idx_order_merge_pick(const IdxOrderScan *os, const IdxTableInfo *info,
					 const bson_t *doc0, const bson_t *doc1)
{
	const char *field = info->fields[linitial_int(linitial(os->sort)) - 1];
	bool		desc = lsecond_int(linitial(os->sort));
	bson_iter_t it0;
	bson_iter_t it1;
	char		buf0[25];
	char		buf1[25];
	const char *s0;
	const char *s1;
	uint32		len0;
	uint32		len1;
	int			cmp;

	if (!bson_iter_init_find(&it0, doc0, field) ||
		!idx_bson_text(&it0, buf0, &s0, &len0))
		return 0;
	if (!bson_iter_init_find(&it1, doc1, field) ||
		!idx_bson_text(&it1, buf1, &s1, &len1))
		return 1;
	cmp = idx_text_bytes_cmp(s0, len0, s1, len1);
	return (desc ? cmp < 0 : cmp > 0) ? 1 : 0;
}

/*
 * At the end of a find: should another one run (a sorted scan's next
 * part, while the limit is not reached)?
 */
bool
idx_order_next_phase(IdxOrderScan *os)
{
	IdxOrderPart parts[MAX_PARTS];

	if (os->sort == NIL || idx_order_exhausted(os) ||
		os->phase + 1 >= order_parts(os, parts))
		return false;
	os->phase++;
	return true;
}

/*
 * Is the pushed sort on a text key (order.h), whose finds EXPLAIN shows
 * one by one (idx_order_find_label())?
 */
bool
idx_order_text_sort(const IdxOrderScan *os)
{
	return os->sort != NIL && first_key_is_text(os);
}

/*
 * What EXPLAIN calls find "sub" of part "phase" of a sorted scan, or NULL
 * past its last part.
 */
const char *
idx_order_find_label(const IdxOrderScan *os, int phase, int sub)
{
	IdxOrderPart parts[MAX_PARTS];

	if (phase >= order_parts(os, parts))
		return NULL;
	switch (parts[phase])
	{
		case IDX_PART_VALUES:
			if (!first_key_is_text(os))
				return "MongoDB Find Values";
			return sub == 0 ? "MongoDB Find Strings" : "MongoDB Find ObjectIds";
		case IDX_PART_NAN:
			return "MongoDB Find NaNs";
		case IDX_PART_NULLS:
			return "MongoDB Find NULLs";
		case IDX_PART_OTHERS:
			return "MongoDB Find Other Types";
	}
	return NULL;
}

/*
 * Start again (rescan).
 */
void
idx_order_rescan(IdxOrderScan *os)
{
	os->phase = 0;
	os->seen = 0;
}

/*
 * EXPLAIN VERBOSE: the sort (with where NULL and NaN first keys are read),
 * the limit and the skip of the find.
 */
void
idx_order_explain(const IdxOrderScan *os, const IdxTableInfo *info,
				  ExplainState *es)
{
	if (os->sort != NIL)
	{
		IdxOrderScan values = *os;
		IdxOrderPart parts[MAX_PARTS];
		bson_t		sort = BSON_INITIALIZER;

		order_parts(os, parts);
		for (values.phase = 0; parts[values.phase] != IDX_PART_VALUES;
			 values.phase++)
			;
		append_sort(&values, info, &sort);
		ExplainPropertyText("MongoDB Sort", idx_bson_as_json(&sort), es);
		bson_destroy(&sort);
		if (first_key_is_text(os))
			ExplainPropertyText("MongoDB Sort Merge",
								"strings and ObjectIds read by a find each, "
								"merged as bytes", es);
		/* a text key's other types are read first, then NULLs or values */
		ExplainPropertyText("MongoDB Sort NULLs",
							parts[first_key_is_text(os)] == IDX_PART_NULLS ?
							"read first, by a find of their own" :
							"read last, by a find of their own", es);
		if (first_key_is_float(os))
			ExplainPropertyText("MongoDB Sort NaNs",
								lsecond_int(linitial(os->sort)) ?
								"read before the numbers, by a find of their own" :
								"read after the numbers, by a find of their own",
								es);
	}
	if (os->limit >= 0)
		ExplainPropertyInteger("MongoDB Limit", NULL,
							   os->sort != NIL ? os->limit :
							   os->limit - os->offset, es);
	if (os->offset > 0)
		ExplainPropertyText("MongoDB Skip",
							os->sort != NIL ?
							psprintf("%d, in PostgreSQL", os->offset) :
							psprintf("%d", os->offset), es);
}
