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

/*
 * Documents the current find may return at most, -1 for no limit.
 */
static int
find_limit(const IdxOrderScan *os)
{
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

/* The part of the rows a find of a sorted scan reads (order.h) */
typedef enum IdxOrderPart
{
	IDX_PART_VALUES,			/* first key neither NULL nor NaN */
	IDX_PART_NAN,				/* first key NaN (float keys only) */
	IDX_PART_NULLS				/* first key NULL */
} IdxOrderPart;

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
 * The parts of a sorted scan in the order PostgreSQL returns them, in
 * "parts"; returns how many.  NULLs first or last as the query says;
 * NaNs of a float key above the numbers: after them ascending, before
 * them descending.
 */
static int
order_parts(const IdxOrderScan *os, IdxOrderPart *parts)
{
	List	   *key = linitial(os->sort);
	bool		desc = lsecond_int(key);
	bool		nulls_first = lthird_int(key);
	bool		nans = first_key_is_float(os);
	int			n = 0;

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
	IdxOrderPart parts[3];

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
 * Append the condition of the current find of a sorted scan on its first
 * key: its values, its NaNs ({f: NaN}, which matches double and decimal
 * NaNs alike) or its NULLs.  Together the parts hold every document the
 * filter matches.
 */
static void
append_phase_cond(const IdxOrderScan *os, const IdxTableInfo *info,
				  bson_t *doc)
{
	const char *field = info->fields[linitial_int(linitial(os->sort)) - 1];

	switch (current_part(os))
	{
		case IDX_PART_VALUES:
			append_values_cond(os, field, doc);
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
restrict_filter(const IdxOrderScan *os, const IdxTableInfo *info,
				bson_t *filter)
{
	bson_t		result = BSON_INITIALIZER;
	bson_t		array;
	bson_t		item;

	if (bson_empty(filter))
		append_phase_cond(os, info, &result);
	else
	{
		idx_check_append(IDX_BSON_APPEND_ARRAY_BEGIN(&result, "$and", &array));
		idx_check_append(BSON_APPEND_DOCUMENT(&array, "0", filter));
		idx_check_append(BSON_APPEND_DOCUMENT_BEGIN(&array, "1", &item));
		append_phase_cond(os, info, &item);
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
idx_order_find(const IdxOrderScan *os, const IdxTableInfo *info,
			   bson_t *filter, bson_t *opts)
{
	int			limit = find_limit(os);

	if (os->sort != NIL)
	{
		bson_t		sort;

		restrict_filter(os, info, filter);
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
	if (os->sort == NIL)
		return false;
	return ++os->seen <= os->offset;
}

/*
 * At the end of a find: should another one run (a sorted scan's next
 * part, while the limit is not reached)?
 */
bool
idx_order_next_phase(IdxOrderScan *os)
{
	IdxOrderPart parts[3];

	if (os->sort == NIL || idx_order_exhausted(os) ||
		os->phase + 1 >= order_parts(os, parts))
		return false;
	os->phase++;
	return true;
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
		IdxOrderPart parts[3];
		int			nparts = order_parts(os, parts);
		bson_t		sort = BSON_INITIALIZER;

		for (values.phase = 0; parts[values.phase] != IDX_PART_VALUES;
			 values.phase++)
			;
		append_sort(&values, info, &sort);
		ExplainPropertyText("MongoDB Sort", idx_bson_as_json(&sort), es);
		bson_destroy(&sort);
		ExplainPropertyText("MongoDB Sort NULLs",
							parts[0] == IDX_PART_NULLS ?
							"read first, by a find of their own" :
							"read last, by a find of their own", es);
		if (nparts == 3)
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
