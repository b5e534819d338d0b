/*-------------------------------------------------------------------------
 *
 * index_repair.c
 *		  A verify or repair of one index table: its state, its reads of
 *		  facts and entries, and its fixes queued as one bulk write.
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/index/index_repair.c
 *
 * Everything here is below the comparison of a batch of facts with their
 * entries (index_repair_batch.c), the unique claims (index_repair_claims.c)
 * and the entry points (index_repair_named.c for the facts the applier
 * names, index_verify.c for verify_index and repair_index), which share it:
 *
 *		the state	set up by idx_repair_begin(), released by
 *					idx_repair_release(), also on error;
 *		reads		streams over a collection, and lookups of the facts or
 *					entries of a list of _ids (one find {field: {$in: ...}}
 *					per part of IDX_IN_LIST_MAX_BYTES), kept sorted by
 *					their keys for idx_repair_find_doc(); values wrapped as
 *					{"v": value} compare by type and bytes;
 *		fixes		one unordered bulk per batch: an entry replaced, upserted
 *					or deleted by a filter that matches it only as it was
 *					read (idx_repair_read_filter()), so that every fix is
 *					complete by itself and applying a batch twice changes
 *					nothing.
 *
 * The change-stream applier's repairs read the facts with readConcern
 * majority (idx_repair_read_durable_after()).  A repair that runs beside
 * writes (st->spare_in_flight: the applier's, an online build's) leaves
 * alone a unique claim that a write in ordered mode may have made before
 * its fact, a write that was running when the facts were read
 * (index_claims.h): neither deleted as stale or orphaned nor replaced, and
 * not counted; its fact is noted in st->spared for the caller to check
 * again.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "utils/memutils.h"

#include "core/connection.h"
#include "core/convert.h"
#include "core/deparse.h"
#include "core/handle.h"
#include "core/mongo_limits.h"
#include "core/mongoc_compat.h"
#include "core/option.h"
#include "core/protocol_read.h"
#include "core/xact.h"
#include "index/index_catalog.h"
#include "index/index_claims.h"
#include "index/index_entry.h"
#include "index/index_repair.h"
#include "index/index_repair_int.h"

/*
 * Release the libmongoc objects (safe to repeat).
 */
void
idx_repair_release(IdxRepairState *st)
{
	if (st->bulk)
		mongoc_bulk_operation_destroy(st->bulk);
	st->bulk = NULL;
	if (st->lookup)
		mongoc_cursor_destroy(st->lookup);
	st->lookup = NULL;
	if (st->cursor)
		mongoc_cursor_destroy(st->cursor);
	st->cursor = NULL;
	if (st->index)
		mongoc_collection_destroy(st->index);
	st->index = NULL;
	if (st->facts)
		mongoc_collection_destroy(st->facts);
	st->facts = NULL;
}

/*
 * What is being done, for the messages of errors of the index collection
 * or of the fact collection.
 */
const IdxOp *
idx_repair_index_what(IdxRepairState *st)
{
	return idx_op(IDX_OP_VERIFY_INDEX, st->def->collection, st->def->database);
}

/*
 * The same for the fact collection.
 */
const IdxOp *
idx_repair_facts_what(IdxRepairState *st)
{
	return idx_op(IDX_OP_READ, st->info->collection, st->info->database);
}

/*
 * {"v": <doc.field>} as a palloc'd document, or NULL if doc lacks field:
 * values wrapped this way compare by type and bytes.
 */
bson_t *
idx_repair_wrap_field(const bson_t *doc, const char *field)
{
	bson_t		wrapped = BSON_INITIALIZER;
	bson_iter_t iter;
	bson_t	   *result;

	if (!bson_iter_init_find(&iter, doc, field))
		return NULL;
	idx_check_append(bson_append_iter(&wrapped, "v", 1, &iter));
	result = idx_bson_pcopy(&wrapped);
	bson_destroy(&wrapped);
	return result;
}

/*
 * The entry's "_id" as a palloc'd document {"_id": ...}, for sorting and
 * finding entries by _id.
 */
bson_t *
idx_repair_entry_id_key(IdxRepairState *st, const bson_t *entry)
{
	bson_t		key = BSON_INITIALIZER;
	bson_t	   *result;
	const uint8 *data;
	uint32		len;
	bson_t		id;

	idx_entry_id_bytes(st->def, entry, &data, &len);
	if (!bson_init_static(&id, data, len))
		ereport(ERROR,
				(errcode(ERRCODE_DATA_CORRUPTED),
				 errmsg("an entry of index \"%s\" in collection \"%s\" has an invalid _id document",
						st->def->name, st->def->collection),
				 errhint("Delete the document from the index collection, then run idxtable.repair_index() on index \"%s\".",
						 st->def->name)));
	idx_check_append(BSON_APPEND_DOCUMENT(&key, "_id", &id));
	result = idx_bson_pcopy(&key);
	bson_destroy(&key);
	return result;
}

/*
 * Total order on documents by length, then bytes (for bsearch).
 */
int
idx_repair_compare_bson(const bson_t *a, const bson_t *b)
{
	if (a->len != b->len)
		return a->len < b->len ? -1 : 1;
	return memcmp(bson_get_data(a), bson_get_data(b), a->len);
}

/*
 * {"v": value} as a palloc'd document.
 */
bson_t *
idx_repair_wrap_value(const bson_value_t *value)
{
	bson_t		wrapped = BSON_INITIALIZER;
	bson_t	   *result;

	idx_check_append(bson_append_value(&wrapped, "v", 1, value));
	result = idx_bson_pcopy(&wrapped);
	bson_destroy(&wrapped);
	return result;
}

/*
 * The distinct _ids of "ids", wrapped as {"v": _id}; returns how many.
 */
int
idx_repair_distinct_ids(const bson_value_t *ids, int n, bson_t ***keys)
{
	bson_t	  **all = palloc(sizeof(bson_t *) * Max(n, 1));
	int			nkeys = 0;
	int			i;

	for (i = 0; i < n; i++)
		all[i] = idx_repair_wrap_value(&ids[i]);
	if (n > 1)
		qsort(all, n, sizeof(bson_t *), idx_repair_compare_bson_ptrs);
	for (i = 0; i < n; i++)
		if (nkeys == 0 || idx_repair_compare_bson(all[nkeys - 1], all[i]) != 0)
			all[nkeys++] = all[i];
	*keys = all;
	return nkeys;
}

/*
 * qsort and bsearch comparator: pointers to documents, by
 * idx_repair_compare_bson().
 */
int
idx_repair_compare_bson_ptrs(const void *a, const void *b)
{
	return idx_repair_compare_bson(*(bson_t *const *) a, *(bson_t *const *) b);
}

/*
 * qsort comparator: read documents by their keys.
 */
static int
compare_read_docs(const void *a, const void *b)
{
	return idx_repair_compare_bson(((const ReadDoc *) a)->key,
						((const ReadDoc *) b)->key);
}

/*
 * The document of st->docs whose key is "key", or NULL.
 */
ReadDoc *
idx_repair_find_doc(IdxRepairState *st, const bson_t *key)
{
	int			lo = 0,
				hi = st->ndocs - 1;

	while (lo <= hi)
	{
		int			mid = (lo + hi) / 2;
		int			c = idx_repair_compare_bson(st->docs[mid].key, key);

		if (c == 0)
			return &st->docs[mid];
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid - 1;
	}
	return NULL;
}

/*
 * An entry as it is compared: without the claim time "t".
 */
bson_t *
idx_repair_without_claim_time(const bson_t *entry)
{
	bson_t		copy = BSON_INITIALIZER;
	bson_t	   *result;

	if (!bson_has_field(entry, IDX_ENTRY_CLAIM_TIME))
		return (bson_t *) entry;
	bson_copy_to_excluding_noinit(entry, &copy, IDX_ENTRY_CLAIM_TIME, NULL);
	result = idx_bson_pcopy(&copy);
	bson_destroy(&copy);
	return result;
}

/*
 * Repairing with writes in flight (st->spare_in_flight): is "entry" one
 * that a write in ordered mode may have made before it wrote its fact, a
 * write that was running when the facts compared were read
 * (st->facts_read_at; index_claims.h)?  Removing or replacing it then
 * would leave the fact without it once the write has written the fact,
 * and for a unique claim free the key for another write.  Such an entry
 * is left alone and its fact noted in st->spared, for the caller to check
 * again once that write is over.
 */
bool
idx_repair_spare_claim(IdxRepairState *st, const bson_t *entry)
{
	MemoryContext oldcxt;
	IdxSparedClaim *sc;
	bson_t	   *fact;

	if (!st->repair || !st->spare_in_flight ||
		!idx_claim_in_flight(entry, st->facts_read_at))
		return false;
	oldcxt = MemoryContextSwitchTo(st->long_cxt);
	fact = idx_repair_wrap_field(entry, IDX_ENTRY_FACT_ID);
	if (fact != NULL)
	{
		sc = palloc(sizeof(IdxSparedClaim));
		sc->fact = fact;
		sc->time = idx_claim_time(entry);
		st->spared = lappend(st->spared, sc);
	}
	MemoryContextSwitchTo(oldcxt);
	return fact != NULL;
}

/*
 * Reads of this process see only what is majority-committed and at least
 * as new as this cluster time, when not 0 (idx_repair_read_durable_after).
 */
static uint64 durable_after = 0;

/*
 * From now on, the repairs of this process (the change-stream applier's)
 * read facts with readConcern majority after cluster time "after" (0: the
 * URI's read concern again).  A write that a failover may still roll back is
 * then never read: an entry made for it could survive the rollback (the
 * applier's write retried on the new primary) while no change stream ever
 * shows the rollback.  Waiting for "after" (the time of the reply that
 * brought the changes to apply) makes the reads see every write
 * acknowledged before that reply, once it is majority-committed.
 */
void
idx_repair_read_durable_after(uint64 after)
{
	durable_after = after;
}

/*
 * Append the read concern of the repairs (see above) to "opts" of a read
 * of "coll", if any: for the facts only.  Entries and claims are read as
 * the URI says: the applier's and the FDW's own recent writes of them must
 * be seen (a claim that exists is not "missing"), and an entry made for a
 * fact that rolls back is rolled back with it or repaired from the fact.
 */
static void
append_read_concern(IdxRepairState *st, mongoc_collection_t *coll,
					bson_t *opts)
{
	bson_t		rc;

	if (durable_after == 0 || coll != st->facts)
		return;
	idx_check_append(BSON_APPEND_DOCUMENT_BEGIN(opts, "readConcern", &rc));
	idx_check_append(BSON_APPEND_UTF8(&rc, "level", "majority"));
	idx_check_append(bson_append_timestamp(&rc, "afterClusterTime", -1,
										   (uint32_t) (durable_after >> 32),
										   (uint32_t) durable_after));
	idx_check_append(bson_append_document_end(opts, &rc));
}

/*
 * Open a find over the documents of "coll" matching "filter", with a
 * projection (optional).  verify_index
 * inside a transaction that has written reads through its session.
 */
mongoc_cursor_t *
idx_repair_open_stream(IdxRepairState *st, mongoc_collection_t *coll,
					   const bson_t *filter, const bson_t *projection)
{
	bson_t		opts = BSON_INITIALIZER;
	mongoc_cursor_t *cursor;

	if (projection)
		idx_check_append(BSON_APPEND_DOCUMENT(&opts, "projection", projection));
	idx_check_append(BSON_APPEND_INT32(&opts, "batchSize", IDX_VERIFY_BATCH));
	append_read_concern(st, coll, &opts);
	idx_xact_append_session(st->client, &opts);
	cursor = mongoc_collection_find_with_opts(coll, filter, &opts,
											  idx_primary_read_prefs());
	bson_destroy(&opts);
	return cursor;
}

/*
 * Raise the error of a cursor that ended, if any.
 */
void
idx_repair_check_cursor(IdxRepairState *st, mongoc_cursor_t *cursor,
						const IdxOp *what)
{
	bson_error_t error;
	const bson_t *reply;

	if (mongoc_cursor_error_document(cursor, &error, &reply))
		idx_report_reply_error(reply, &error, st->servername, what);
}

static int	lookup_part(IdxRepairState *st, mongoc_collection_t *coll,
						const char *field, bson_t **keys, int from, int nkeys,
						const bson_t *projection, bool by_entry_id,
						const IdxOp *what, int *alloc);

/*
 * Read all documents of "coll" matching {field: {$in: [the "v" of each
 * key]}} into st->docs, each keyed by keyfn, sorted for idx_repair_find_doc().
 */
void
idx_repair_lookup(IdxRepairState *st, mongoc_collection_t *coll,
				  const char *field, bson_t **keys, int nkeys,
				  const bson_t *projection, bool by_entry_id, const IdxOp *what)
{
	int			alloc = nkeys + 16;
	int			from = 0;

	if (coll == st->facts)
		st->facts_read_at = idx_claim_now_ms();
	st->ndocs = 0;
	st->docs = palloc(sizeof(ReadDoc) * alloc);
	do
	{
		from = lookup_part(st, coll, field, keys, from, nkeys, projection,
						   by_entry_id, what, &alloc);
	} while (from < nkeys);
	if (st->ndocs > 1)
		qsort(st->docs, st->ndocs, sizeof(ReadDoc), compare_read_docs);
}

/*
 * One find of idx_repair_lookup(), for keys[from..] up to
 * IDX_IN_LIST_MAX_BYTES of key values (so that the command stays under
 * MongoDB's 16 MB), adding to st->docs; returns where the next one starts.
 */
static int
lookup_part(IdxRepairState *st, mongoc_collection_t *coll, const char *field,
			bson_t **keys, int from, int nkeys, const bson_t *projection,
			bool by_entry_id, const IdxOp *what, int *alloc)
{
	bson_t		filter = BSON_INITIALIZER;
	bson_t		cond,
				list;
	const bson_t *doc;
	int			i;
	uint32		k = 0;

	idx_check_append(BSON_APPEND_DOCUMENT_BEGIN(&filter, field, &cond));
	idx_check_append(IDX_BSON_APPEND_ARRAY_BEGIN(&cond, "$in", &list));
	for (i = from; i < nkeys && list.len < IDX_IN_LIST_MAX_BYTES; i++)
	{
		bson_iter_t iter;
		const char *idxkey;
		char		buf[16];

		bson_uint32_to_string(k, &idxkey, buf, sizeof(buf));
		if (bson_iter_init_find(&iter, keys[i], "v"))
		{
			idx_check_append(bson_append_iter(&list, idxkey, -1, &iter));
			k++;
		}
	}
	idx_check_append(bson_append_array_end(&cond, &list));
	idx_check_append(bson_append_document_end(&filter, &cond));

	st->lookup = idx_repair_open_stream(st, coll, &filter, projection);
	bson_destroy(&filter);

	while (mongoc_cursor_next(st->lookup, &doc))
	{
		ReadDoc    *rd;

		CHECK_FOR_INTERRUPTS();
		if (st->ndocs >= *alloc)
		{
			*alloc *= 2;
			st->docs = repalloc(st->docs, sizeof(ReadDoc) * *alloc);
		}
		rd = &st->docs[st->ndocs];
		rd->doc = idx_bson_pcopy(doc);
		rd->key = by_entry_id ? idx_repair_entry_id_key(st, rd->doc) :
			idx_repair_wrap_field(rd->doc, "_id");
		rd->matched = false;
		if (rd->key != NULL)
			st->ndocs++;
	}
	idx_repair_check_cursor(st, st->lookup, what);
	mongoc_cursor_destroy(st->lookup);
	st->lookup = NULL;
	return i;
}


/* ----------------------------------------------------------------
 *		Fixes
 * ----------------------------------------------------------------
 */

/*
 * The batch's bulk of fixes (unordered), begun on first use and sent by
 * idx_repair_flush().
 */
mongoc_bulk_operation_t *
idx_repair_fix_bulk(IdxRepairState *st)
{
	if (st->bulk == NULL)
	{
		bson_t		opts = BSON_INITIALIZER;

		idx_check_append(BSON_APPEND_BOOL(&opts, "ordered", false));
		st->bulk = mongoc_collection_create_bulk_operation_with_opts(st->index,
																	 &opts);
		bson_destroy(&opts);
	}
	return st->bulk;
}

/*
 * The filter that matches "entry" only as it was read, for a fix that
 * deletes or replaces it: its own filter (idx_entry_own_filter) and the
 * time "t" it was written with in ordered mode, or none.  A write in
 * ordered mode may delete or replace an entry after the repair read it and
 * then write it again, as the undo of a failed statement writes a fact's
 * old entries again: the entry written again has the time it was written
 * at, so the fix of the entry as it was read, decided on the fact as it
 * was then, leaves it alone (the repair of the write's change of the fact
 * sees it as it is).
 */
bson_t *
idx_repair_read_filter(const bson_t *entry)
{
	bson_t	   *own = idx_entry_own_filter(entry);
	bson_t		filter;
	bson_t		cond;
	bson_iter_t iter;
	bson_t	   *result;

	bson_copy_to(own, &filter);
	if (bson_iter_init_find(&iter, entry, IDX_ENTRY_CLAIM_TIME))
		idx_check_append(bson_append_iter(&filter, IDX_ENTRY_CLAIM_TIME, -1,
										  &iter));
	else
	{
		idx_check_append(BSON_APPEND_DOCUMENT_BEGIN(&filter,
													IDX_ENTRY_CLAIM_TIME,
													&cond));
		idx_check_append(BSON_APPEND_BOOL(&cond, "$exists", false));
		idx_check_append(bson_append_document_end(&filter, &cond));
	}
	result = idx_bson_pcopy(&filter);
	bson_destroy(&filter);
	return result;
}

/*
 * Queue the deletion of an entry as it was read (idx_repair_read_filter()).
 */
void
idx_repair_queue_delete(IdxRepairState *st, const bson_t *entry)
{
	bson_t	   *filter = idx_repair_read_filter(entry);
	bson_error_t error;

	if (!mongoc_bulk_operation_remove_one_with_opts(idx_repair_fix_bulk(st),
													filter, NULL, &error))
		idx_report_error(&error, st->servername, idx_repair_index_what(st));
}

/*
 * Queue the replacement of "selector"'s entry by "entry" (upsert: also
 * when there is none).
 */
void
idx_repair_fix_replace(IdxRepairState *st, const bson_t *selector,
					   const bson_t *entry, bool upsert)
{
	bson_t		opts = BSON_INITIALIZER;
	bson_error_t error;
	bool		ok;

	idx_check_append(BSON_APPEND_BOOL(&opts, "upsert", upsert));
	ok = mongoc_bulk_operation_replace_one_with_opts(idx_repair_fix_bulk(st),
													 selector, entry, &opts,
													 &error);
	bson_destroy(&opts);
	if (!ok)
		idx_report_error(&error, st->servername, idx_repair_index_what(st));
}

/*
 * Send the queued fixes of a batch.
 */
void
idx_repair_flush(IdxRepairState *st)
{
	bson_t		reply;
	bson_error_t error;

	if (st->bulk == NULL)
		return;
	if (!mongoc_bulk_operation_execute(st->bulk, &reply, &error))
	{
		bson_t	   *failed_reply = idx_own_reply(&reply);

		idx_report_reply_error(failed_reply, &error, st->servername,
							   idx_op(IDX_OP_REPAIR_INDEX, st->def->collection,
									  st->def->database));
	}
	bson_destroy(&reply);
	mongoc_bulk_operation_destroy(st->bulk);
	st->bulk = NULL;
	CHECK_FOR_INTERRUPTS();		/* a cancel that came during the write */
}

/*
 * Find one document by filter (and projection); palloc'd copy or NULL.
 */
bson_t *
idx_repair_find_one(IdxRepairState *st, mongoc_collection_t *coll,
					const bson_t *filter, const bson_t *projection,
					const IdxOp *what)
{
	bson_t		opts = BSON_INITIALIZER;
	const bson_t *doc;
	bson_t	   *result = NULL;

	idx_check_append(BSON_APPEND_INT64(&opts, "limit", 1));
	if (projection)
		idx_check_append(BSON_APPEND_DOCUMENT(&opts, "projection", projection));
	append_read_concern(st, coll, &opts);
	idx_xact_append_session(st->client, &opts);
	st->lookup = mongoc_collection_find_with_opts(coll, filter, &opts,
												  idx_primary_read_prefs());
	bson_destroy(&opts);
	if (mongoc_cursor_next(st->lookup, &doc))
		result = idx_bson_pcopy(doc);
	else
		idx_repair_check_cursor(st, st->lookup, what);
	mongoc_cursor_destroy(st->lookup);
	st->lookup = NULL;
	return result;
}

/*
 * The projection that reads what the index needs of a fact: its key and
 * included columns.
 */
void
idx_repair_projection(IdxRepairState *st, bson_t *projection)
{
	idx_build_projection(projection, st->info, st->attrs);
}

/*
 * Set up "st" for index "def" of the table with "info" and tuple
 * descriptor "desc", on "client" of server "servername".  The batch
 * context is a child of the current memory context; the caller releases
 * the libmongoc objects with idx_repair_release(), also on error.
 */
void
idx_repair_begin(IdxRepairState *st, IdxIndexDef *def, IdxTableInfo *info,
				 TupleDesc desc, mongoc_client_t *client,
				 const char *servername, bool repair)
{
	memset(st, 0, sizeof(*st));
	st->def = def;
	st->info = info;
	st->client = client;
	st->servername = servername;
	st->repair = repair;
	st->attrs = idx_entry_columns(def);
	st->rowconv = idx_row_conv_create(desc, info, st->attrs);
	st->values = palloc0(sizeof(Datum) * Max(st->rowconv->natts, 1));
	st->nulls = palloc0(sizeof(bool) * Max(st->rowconv->natts, 1));
	st->hide_id = st->rowconv->hide_id;
	st->long_cxt = CurrentMemoryContext;
	initStringInfo(&st->bad_ids);
	st->batch_cxt = AllocSetContextCreate(CurrentMemoryContext,
										  "idxtable_fdw verify batch",
										  ALLOCSET_DEFAULT_SIZES);
	st->wait_cxt = AllocSetContextCreate(CurrentMemoryContext,
										 "idxtable_fdw repair waiting facts",
										 ALLOCSET_SMALL_SIZES);
	st->facts = mongoc_client_get_collection(client, info->database,
											 info->collection);
	st->index = mongoc_client_get_collection(client, def->database,
											 def->collection);
}
