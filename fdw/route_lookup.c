/*-------------------------------------------------------------------------
 *
 * route_lookup.c
 *		  The lookup of a scan routed through an index table: the finds
 *		  that read its entries from the index collection.
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/route_lookup.c
 *
 * The lookup filter is built from the index conditions and this
 * execution's values on the _id.kN fields, which the index collection's
 * "lookup" index serves; an ordered scan sorts on the order keys.  The
 * lookup is one find, or two ("parts") where the NULL entries of a key are
 * read apart (route_scan_int.h).  Under a LIMIT its batches start small
 * and double as the scan wants more rows.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "nodes/nodeFuncs.h"
#include "utils/array.h"
#include "utils/lsyscache.h"

#include "core/connection.h"
#include "core/convert.h"
#include "core/pg_compat.h"
#include "core/xact.h"
#include "index/index_entry.h"
#include "route_path.h"
#include "route_scan_int.h"

/*
 * After a group of equal keys read by _id (route_id_order.c), the lookup
 * goes on past it: append {$and: [{"_id.kN": {$gt: v}}]} on the order key
 * ($lt descending, $ne: null after the NULL group), which MongoDB
 * intersects with the key's other bounds.
 */
static void
append_after_group(IdxIndexScan *ix, bson_t *filter)
{
	bson_t		list;
	bson_t		clause;
	bson_t		cond;
	bson_t		value;
	bson_iter_t iter;

	if (ix->after_op == NULL)
		return;
	if (!bson_init_static(&value, ix->after_data, ix->after_len) ||
		!bson_iter_init_find(&iter, &value, "v"))
		elog(ERROR, "invalid bound after a group of equal keys");
	idx_check_append(IDX_BSON_APPEND_ARRAY_BEGIN(filter, "$and", &list));
	idx_check_append(BSON_APPEND_DOCUMENT_BEGIN(&list, "0", &clause));
	idx_check_append(BSON_APPEND_DOCUMENT_BEGIN(&clause,
												psprintf("_id.%s",
														 idx_key_field(ix->order_key)),
												&cond));
	idx_check_append(bson_append_iter(&cond, ix->after_op, -1, &iter));
	idx_check_append(bson_append_document_end(&clause, &cond));
	idx_check_append(bson_append_document_end(&list, &clause));
	idx_check_append(bson_append_array_end(filter, &list));
}

/*
 * Build the lookup filter {"_id.k0": {$eq: v}, "_id.k1": {$gte: a}, ...}
 * of the current part from the conditions and this execution's values.
 * The key whose NULL entries are read apart (split_key) is {$eq: null} in
 * their part, and in the other its ranges, or {$ne: null} (which MongoDB
 * turns into the index bounds [MinKey, null) and (null, MaxKey]).
 * Returns false, leaving "filter" unfinished, when the part can match
 * nothing (a NULL compared, an empty IN list).
 */
static bool
build_lookup_filter(IdxIndexScan *ix, bson_t *filter)
{
	static const char *const ops[] = {"$eq", "$in", "$eq", "$lt", "$lte", "$gt", "$gte"};
	int			k;

	for (k = 0; k < ix->def->nkeys; k++)
	{
		bson_t		child;
		bool		any = false;
		ListCell   *lc;
		char	   *field = psprintf("_id.%s", idx_key_field(k));

		if (k == ix->split_key && ix->part == ix->null_part)
		{
			idx_check_append(BSON_APPEND_DOCUMENT_BEGIN(filter, field, &child));
			idx_check_append(BSON_APPEND_NULL(&child, "$eq"));
			idx_check_append(bson_append_document_end(filter, &child));
			continue;
		}
		foreach(lc, ix->conds)
		{
			List	   *cond = lfirst(lc);
			IdxCondOp	op = list_nth_int(cond, 1);
			int			exprpos = list_nth_int(cond, 2);

			if (list_nth_int(cond, 0) != k || op == ICOND_NULL_OR)
				continue;
			if (!any)
				idx_check_append(BSON_APPEND_DOCUMENT_BEGIN(filter, field, &child));
			any = true;
			if (op == ICOND_NULL)
				idx_check_append(BSON_APPEND_NULL(&child, "$eq"));
			else if (ix->nulls[exprpos])
				return false;
			else if (op == ICOND_IN)
			{
				if (!idx_append_key_in(&child, &ix->def->keys[k],
									   ix->values[exprpos]))
					return false;
			}
			else
			{
				Oid			type = exprType(list_nth(ix->value_exprs, exprpos));
				const char *mop = ops[op];

				/*
				 * Keys hold timestamps in milliseconds, rounded down: "<" a
				 * value with finer digits must keep the entries of its
				 * millisecond (the facts are rechecked).
				 */
				if (op == ICOND_LT &&
					(type == TIMESTAMPOID || type == TIMESTAMPTZOID))
					mop = "$lte";
				idx_append_key_value(&child, mop,
									 idx_key_lookup_datum(&ix->def->keys[k],
														  ix->values[exprpos]),
									 OidIsValid(ix->def->keys[k].sortcoll)
									 ? TEXTOID : type, false);
			}
		}
		if (k == ix->split_key && !any)
		{
			idx_check_append(BSON_APPEND_DOCUMENT_BEGIN(filter, field, &child));
			idx_check_append(BSON_APPEND_NULL(&child, "$ne"));
			any = true;
		}
		if (any)
			idx_check_append(bson_append_document_end(filter, &child));
	}
	append_after_group(ix, filter);
	return true;
}

/*
 * Entries of the lookup's next batch.
 */
int
idx_lookup_batch_size(IdxScanState *state, IdxIndexScan *ix)
{
	/* ORDER BY key, _id reads the entry after a group to see it end */
	if (ix->batch_target > 0)
		return Min(ix->batch_target + (ix->order_by_id ? 1 : 0),
				   state->info->fetch_size);
	return state->info->fetch_size;
}

/*
 * The rows asked for did not come from the batches read so far (some
 * were filtered out, or the plan's LIMIT is not all the executor wants):
 * double the batches, up to their full sizes.  The lookup's next getMore
 * asks for the new size (libmongoc sends a cursor's batchSize option with
 * each getMore, mongoc-cursor.c: _mongoc_cursor_prepare_getmore_command;
 * mongoc_cursor_set_batch_size changes it only if it is an int64).
 */
void
idx_lookup_grow_batches(IdxScanState *state, IdxIndexScan *ix)
{
	if (ix->batch_target <= 0)
		return;
	if (ix->batch_target >= Max(state->info->fetch_size,
								state->info->fetch_batch_size) / 2)
		ix->batch_target = 0;
	else
		ix->batch_target *= 2;
	if (ix->lookup)
		mongoc_cursor_set_batch_size(ix->lookup, idx_lookup_batch_size(state, ix));
}

/*
 * Remember the lookup filter of the part being opened, for EXPLAIN: the
 * first part's alone, the next's after it.  In the scan's context: a part
 * after the first is opened while a row is fetched, in its short-lived
 * context.
 */
static void
note_lookup(IdxScanState *state, IdxIndexScan *ix, const bson_t *filter)
{
	MemoryContext oldcxt = MemoryContextSwitchTo(state->scan_cxt);
	char	   *json = idx_bson_as_json(filter);
	char	   *previous = ix->last_lookup;

	if (ix->part == 0 || previous == NULL)
		ix->last_lookup = json;
	else
	{
		ix->last_lookup = psprintf("%s then %s", previous, json);
		pfree(json);
	}
	if (previous)
		pfree(previous);
	MemoryContextSwitchTo(oldcxt);
}

/*
 * Append the projection of the lookup's finds: the entry's _id and the
 * fact's _id, and for covering scans the included columns.
 */
static void
append_projection(IdxIndexScan *ix, bson_t *opts)
{
	bson_t		child;

	idx_check_append(BSON_APPEND_DOCUMENT_BEGIN(opts, "projection", &child));
	/* _id: the fact must vouch for the entry (vouching_entry) */
	idx_check_append(BSON_APPEND_INT32(&child, "_id", 1));
	if (ix->covering)
	{
		idx_check_append(BSON_APPEND_INT32(&child, IDX_ENTRY_INCLUDE, 1));
		if (ix->order_by_id)
			idx_check_append(BSON_APPEND_INT32(&child, IDX_ENTRY_FACT_ID, 1));
	}
	else
		idx_check_append(BSON_APPEND_INT32(&child, IDX_ENTRY_FACT_ID, 1));
	idx_check_append(bson_append_document_end(opts, &child));
}

/*
 * Open a find of entries on the index collection with the lookup's
 * projection, the options "opts" (sort, batch size, limit) and the
 * session of the transaction, if any.
 */
mongoc_cursor_t *
idx_lookup_find(IdxScanState *state, IdxIndexScan *ix, const bson_t *filter,
				bson_t *opts)
{
	append_projection(ix, opts);
	if (ix->index_coll == NULL)
		ix->index_coll = mongoc_client_get_collection(state->client,
													  ix->def->database,
													  ix->def->collection);
	if (!state->pinned)
		idx_client_pin(state->client, 1);
	state->pinned = true;
	idx_xact_append_session(state->client, opts);
	return mongoc_collection_find_with_opts(ix->index_coll, filter, opts,
											state->read_prefs);
}

/*
 * Open the lookup cursor of the current part, sorted on the order keys of
 * an ordered scan.  Returns false (and opens nothing) when its conditions
 * can match nothing.  A lookup reopened after a group of equal keys is
 * not noted for EXPLAIN: it shows the filter the conditions make.
 */
static bool
open_lookup(IdxScanState *state, IdxIndexScan *ix)
{
	bson_t		filter = BSON_INITIALIZER;
	bson_t		opts = BSON_INITIALIZER;
	bson_t		child;
	bool		ok;

	PG_TRY();
	{
		ok = build_lookup_filter(ix, &filter);
		if (ok)
		{
			if (ix->order_key >= 0)
			{
				int			k;

				idx_check_append(BSON_APPEND_DOCUMENT_BEGIN(&opts, "sort", &child));
				for (k = ix->order_key; k < ix->order_key + ix->order_nkeys; k++)
					idx_check_append(BSON_APPEND_INT32(&child,
													   psprintf("_id.%s",
																idx_key_field(k)),
													   ix->order_desc ? -1 : 1));
				idx_check_append(bson_append_document_end(&opts, &child));
			}
			/* int64, which mongoc_cursor_set_batch_size() can overwrite */
			idx_check_append(BSON_APPEND_INT64(&opts, "batchSize",
											   idx_lookup_batch_size(state, ix)));
			ix->lookup = idx_lookup_find(state, ix, &filter, &opts);
		}
		else
			bson_reinit(&filter);	/* the half-built filter goes */
		if (ix->after_op == NULL)
			note_lookup(state, ix, &filter);
	}
	PG_FINALLY();
	{
		bson_destroy(&filter);
		bson_destroy(&opts);
	}
	PG_END_TRY();
	return ok;
}

/*
 * The key whose NULL entries the lookup reads in a part of their own, or
 * -1 (see IdxIndexScan): the key of an "IS NULL OR" condition, or the
 * first order key when the order places NULLs where MongoDB does not
 * (MongoDB sorts them first ascending, last descending) and no condition
 * on it decides them (a range, an equality or IN excludes NULL keys,
 * IS NULL all others; the order key of ORDER BY _id under equalities on
 * every key is fixed).
 */
int
idx_lookup_split_key(IdxIndexScan *ix)
{
	ListCell   *lc;

	foreach(lc, ix->conds)
	{
		List	   *cond = lfirst(lc);
		IdxCondOp	op = list_nth_int(cond, 1);

		if (op == ICOND_NULL_OR)
			return list_nth_int(cond, 0);
		/* any other condition on the order key decides its NULLs */
		if (list_nth_int(cond, 0) == ix->order_key)
			return -1;
	}
	if (ix->order_key >= 0 && ix->nulls_first == ix->order_desc)
		return ix->order_key;
	return -1;
}

/*
 * Open the lookup of the first part from "ix->part" on that can match
 * anything; false when none can.
 */
bool
idx_lookup_open_next_part(IdxScanState *state, IdxIndexScan *ix)
{
	for (; ix->part < ix->nparts; ix->part++)
	{
		if (open_lookup(state, ix))
			return true;
		ix->after_op = NULL;	/* a bound after a group is its part's */
	}
	return false;
}

/*
 * Go on with the lookup after a group of equal keys read apart
 * (route_id_order.c): close its cursor, and open the current part again
 * past the group (the bound "after_op" on the {"v": value} document
 * "data" of "len" bytes, see append_after_group), or, when "after_op" is
 * NULL, the next part.  The lookup is done when no part is left.
 */
void
idx_lookup_reopen(IdxScanState *state, IdxIndexScan *ix, const char *after_op,
				  const uint8 *data, uint32 len)
{
	mongoc_collection_t *none = NULL;	/* the collection handle stays */

	idx_release_find(state, &ix->lookup, &none);
	if (ix->after_data)
		pfree(ix->after_data);
	ix->after_data = NULL;
	ix->after_op = after_op;
	if (after_op != NULL)
	{
		ix->after_data = MemoryContextAlloc(state->scan_cxt, len);
		memcpy(ix->after_data, data, len);
		ix->after_len = len;
	}
	else
		ix->part++;
	if (!idx_lookup_open_next_part(state, ix))
		ix->lookup_done = true;
}

/*
 * The next entry of the lookup, in the order MongoDB returns them, or NULL
 * when there is none.  It stays valid until the next read of the lookup.
 */
const bson_t *
idx_lookup_next_entry(IdxScanState *state, IdxIndexScan *ix)
{
	const bson_t *entry;

	/* covering: the lookup's batch is used up, and rows are still wanted */
	if (ix->covering && ix->batch_target > 0 &&
		ix->exec_entries >= ix->next_grow)
	{
		idx_lookup_grow_batches(state, ix);
		ix->next_grow += idx_lookup_batch_size(state, ix);
	}
	for (;;)
	{
		if (ix->lookup_done)
			return NULL;
		entry = idx_scan_next_doc(state, &ix->lookup, ix->def->collection,
								  ix->def->database);
		if (entry != NULL)
			break;
		/* the next part's entries come after this one's */
		ix->part++;
		ix->after_op = NULL;
		if (!idx_lookup_open_next_part(state, ix))
		{
			ix->lookup_done = true;
			return NULL;
		}
	}
	ix->entries_read++;
	ix->exec_entries++;
	return entry;
}
