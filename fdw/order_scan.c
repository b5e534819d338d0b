/*-------------------------------------------------------------------------
 *
 * order_scan.c
 *		  Execution of a plain scan with a pushed sort, limit or offset
 *		  (order.h): the find's sort, limit and skip, and the two finds of
 *		  a sorted scan (non-NULL and NULL first keys).
 *
 * Without a sort the find skips OFFSET documents and returns at most
 * LIMIT.  A sorted scan skips locally instead: how many documents the
 * first find would have skipped is not known when the second starts.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"


#include "idxtable_fdw.h"
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

/*
 * Does the first find of a sorted scan read the non-NULL first keys (the
 * second the NULL ones)?  Yes unless the first key's NULLs come first.
 */
static bool
phase_reads_values(const IdxOrderScan *os)
{
	bool		nulls_first = lthird_int(linitial(os->sort));

	return (os->phase == 0) != nulls_first;
}

/*
 * Append the condition of the current find of a sorted scan on its first
 * key "field": not NULL ({f: {$ne: null, $not: {$type: "undefined"}}}) or
 * NULL ({$or: [{f: null}, {f: {$type: "undefined"}}]}), the forms of IS
 * [NOT] NULL (deparse.c), which MongoDB serves from an index on the field
 * (mongod 8.0's {f: null} no longer matches undefined).  Values of another
 * BSON type than the column's go with the non-NULL ones and fail to read,
 * as they do in a plain scan.  _id is never undefined (mongod refuses it),
 * so its conditions are {_id: {$ne: null}} and {_id: null}.
 */
static void
append_phase_cond(const IdxOrderScan *os, const IdxTableInfo *info,
				  bson_t *doc)
{
	const char *field = info->fields[linitial_int(linitial(os->sort)) - 1];
	bool		is_id = strcmp(field, "_id") == 0;
	bson_t		cond;
	bson_t		array;
	bson_t		item;

	if (phase_reads_values(os))
	{
		idx_check_append(BSON_APPEND_DOCUMENT_BEGIN(doc, field, &cond));
		idx_check_append(BSON_APPEND_NULL(&cond, "$ne"));
		if (!is_id)
		{
			bson_t		not;

			idx_check_append(BSON_APPEND_DOCUMENT_BEGIN(&cond, "$not", &not));
			idx_check_append(BSON_APPEND_UTF8(&not, "$type", "undefined"));
			idx_check_append(bson_append_document_end(&cond, &not));
		}
		idx_check_append(bson_append_document_end(doc, &cond));
		return;
	}
	if (is_id)
	{
		idx_check_append(BSON_APPEND_NULL(doc, field));
		return;
	}
	idx_check_append(BSON_APPEND_ARRAY_BEGIN(doc, "$or", &array));
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
		idx_check_append(BSON_APPEND_ARRAY_BEGIN(&result, "$and", &array));
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
 * the values of the first key, the others when it reads its NULLs.
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

		if (foreach_current_index(lc) == 0 && !phase_reads_values(os))
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
 * At the end of a find: should a second one run (a sorted scan's other
 * keys, while the limit is not reached)?
 */
bool
idx_order_next_phase(IdxOrderScan *os)
{
	if (os->sort == NIL || os->phase > 0 || idx_order_exhausted(os))
		return false;
	os->phase = 1;
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
 * EXPLAIN VERBOSE: the sort (with where NULL first keys are read), the
 * limit and the skip of the find.
 */
void
idx_order_explain(const IdxOrderScan *os, const IdxTableInfo *info,
				  ExplainState *es)
{
	if (os->sort != NIL)
	{
		IdxOrderScan values = *os;
		bson_t		sort = BSON_INITIALIZER;

		values.phase = lthird_int(linitial(os->sort)) ? 1 : 0;
		append_sort(&values, info, &sort);
		ExplainPropertyText("MongoDB Sort", idx_bson_as_json(&sort), es);
		bson_destroy(&sort);
		ExplainPropertyText("MongoDB Sort NULLs",
							lthird_int(linitial(os->sort)) ?
							"read first, by a find of their own" :
							"read last, by a find of their own", es);
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
