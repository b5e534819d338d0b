/*-------------------------------------------------------------------------
 *
 * index_repair.c
 *		  The per-batch core of verify_index and repair_index: bring the
 *		  entries of an index table up to date with a list of its facts.
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/index/index_repair.c
 *
 * For a batch of facts (named by _id, or already read), compute the
 * entries each fact should have (exactly as a write through the FDW
 * computes them), read the entries the index holds for those facts (one
 * find {id: {$in: [...]}}, served by the index collection's "fact" index)
 * and compare them:
 *		missing		an entry the fact should have and the index lacks;
 *		stale		an entry of the fact that the fact should not have (an old
 *					key) or whose included values differ from the fact's;
 *		orphan		an entry of a named fact that no longer exists.
 * In repair mode the difference is written as one unordered bulk per
 * batch: a missing entry upserted by its _id, a stale one replaced or
 * deleted and an orphan deleted by the filter {_id, id} (and the entry's
 * time, read_filter()) that matches the entry only as it was read; then
 * the batch's missing unique claims are inserted in one unordered bulk,
 * and each that meets a duplicate key is taken over from a fact that
 * lacks the key.  Every fix is complete by itself, and applying a batch
 * twice changes nothing.
 *
 *		conflict	a unique claim the fact should have, held by another fact
 *					that has the key too (a client writing straight into
 *					MongoDB can make two facts share a unique key).  Not
 *					missing, and not taken over: it is counted and reported
 *					to st->on_conflict, which the applier and repair_index
 *					use to record it in idxtable.conflicts; the claim stays
 *					its holder's, and every other entry of both facts is
 *					checked and repaired as usual.
 *
 * The facts named by a list of _ids (index_repair_named.c, what the
 * change-stream applier calls for the _ids a stream names) are read with
 * one find {_id: {$in: [...]}}, and a fact that is gone has all its
 * entries counted as orphans (and deleted).  verify_index's pass 1
 * (index_verify.c) feeds the same core, idx_repair_fact_docs(), from its
 * stream of every fact.  Nothing here depends on the state of an SQL
 * function call.
 *
 * A repair that runs beside writes (st->spare_in_flight: the applier's,
 * an online build's) leaves alone a unique claim that a write in ordered
 * mode may have made before its fact, a write that was running when the
 * facts were read (index_claims.h): neither deleted as stale or orphaned
 * nor replaced, and not counted; its fact is noted in st->spared for the
 * caller to check again.
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
#include "index/index_ddl.h"
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
static bson_t *
entry_id_key(IdxRepairState *st, const bson_t *entry)
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
static bson_t *
without_claim_time(const bson_t *entry)
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
		rd->key = by_entry_id ? entry_id_key(st, rd->doc) :
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

static mongoc_bulk_operation_t *
fix_bulk(IdxRepairState *st)
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
static bson_t *
read_filter(const bson_t *entry)
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
 * Queue the deletion of an entry as it was read (read_filter()).
 */
void
idx_repair_queue_delete(IdxRepairState *st, const bson_t *entry)
{
	bson_t	   *filter = read_filter(entry);
	bson_error_t error;

	if (!mongoc_bulk_operation_remove_one_with_opts(fix_bulk(st), filter,
													NULL, &error))
		idx_report_error(&error, st->servername, idx_repair_index_what(st));
}

/*
 * Queue the replacement of "selector"'s entry by "entry" (upsert: also
 * when there is none).
 */
static void
fix_replace(IdxRepairState *st, const bson_t *selector, const bson_t *entry,
			bool upsert)
{
	bson_t		opts = BSON_INITIALIZER;
	bson_error_t error;
	bool		ok;

	idx_check_append(BSON_APPEND_BOOL(&opts, "upsert", upsert));
	ok = mongoc_bulk_operation_replace_one_with_opts(fix_bulk(st), selector,
													 entry, &opts, &error);
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
static bson_t *
find_one(IdxRepairState *st, mongoc_collection_t *coll, const bson_t *filter,
		 const bson_t *projection, const IdxOp *what)
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
 * Does the fact whose _id is the "v" of "wrapped_id" exist and have the
 * entry _id of "entry"?
 */
static bool
fact_has_entry(IdxRepairState *st, const bson_t *wrapped_id,
			   const bson_t *entry)
{
	bson_t		filter = BSON_INITIALIZER;
	bson_t		projection = BSON_INITIALIZER;
	bson_iter_t iter;
	bson_t	   *fact;
	bson_t	  **entries;
	int			n,
				e;
	bool		result = false;

	if (!bson_iter_init_find(&iter, wrapped_id, "v"))
		return false;
	idx_check_append(bson_append_iter(&filter, "_id", 3, &iter));
	idx_build_projection(&projection, st->info, st->attrs);
	fact = find_one(st, st->facts, &filter, &projection,
					idx_repair_facts_what(st));
	bson_destroy(&filter);
	bson_destroy(&projection);
	if (fact == NULL || !idx_doc_id_is(fact, bson_iter_value(&iter)))
		return false;

	memset(st->nulls, true, sizeof(bool) * st->rowconv->natts);
	idx_document_to_row(st->rowconv, fact, st->values, st->nulls);
	n = idx_build_entries(st->def, st->values, st->nulls,
						  bson_iter_value(&iter), &entries);
	for (e = 0; e < n; e++)
	{
		if (!result && idx_entry_same_id(st->def, entries[e], entry))
			result = true;
		bson_destroy(entries[e]);
	}
	return result;
}

/*
 * The _id ({"v": ...}) of the fact that holds "claim" if that is another
 * fact than item's and it has the claim's key too: two facts share a
 * unique key, a conflict that repair cannot fix.  NULL if the claim is
 * item's own, or its holder lacks the key (a claim to take over).
 */
static bson_t *
conflicting_holder(IdxRepairState *st, const FactItem *item,
				   const bson_t *claim)
{
	bson_t	   *holder = idx_repair_wrap_field(claim, IDX_ENTRY_FACT_ID);

	if (holder == NULL || idx_bson_same_bytes(holder, item->id))
		return NULL;
	if (!fact_has_entry(st, holder, claim))
		return NULL;
	return holder;
}

/*
 * Verify mode: the conflicting holder (see conflicting_holder()) of the
 * claim that item's missing claim "ee" would be, or NULL.
 */
static bson_t *
claim_conflict(IdxRepairState *st, const FactItem *item,
			   const ExpectedEntry *ee)
{
	bson_t	   *claim = find_one(st, st->index, entry_id_key(st, ee->entry), NULL,
								 idx_repair_index_what(st));

	if (claim == NULL)
		return NULL;
	return conflicting_holder(st, item, claim);
}

static bool take_over_claim(IdxRepairState *st, const bson_t *claim,
							const ExpectedEntry *ee);

/*
 * Write item's missing unique claim "ee".  If another fact's entry holds
 * the key, take it over when that fact lacks the key.  When it has it, two
 * facts share a unique key: nothing is written, and the holder's _id
 * ({"v": ...}) is returned for the conflict to be reported; NULL when the
 * claim was written.  "taken": an insert of the claim has just failed
 * with a duplicate key (write_claims()), so the first attempt looks for
 * the holder at once.
 */
static bson_t *
fix_claim(IdxRepairState *st, const FactItem *item, const ExpectedEntry *ee,
		  bool taken)
{
	bson_t	   *holder_filter = entry_id_key(st, ee->entry);
	int			attempt;

	for (attempt = 0; attempt < IDX_REPAIR_CLAIM_ATTEMPTS; attempt++)
	{
		bson_t		reply;
		bson_error_t error;
		bson_t	   *claim;
		bson_t	   *holder;

		CHECK_FOR_INTERRUPTS();
		if (taken)
			taken = false;
		else if (mongoc_collection_insert_one(st->index, ee->entry, NULL,
											  &reply, &error))
		{
			bson_destroy(&reply);
			return NULL;
		}
		else
		{
			if (error.code != 11000)
			{
				bson_t	   *failed_reply = idx_own_reply(&reply);

				idx_report_reply_error(failed_reply, &error, st->servername,
									   idx_repair_index_what(st));
			}
			bson_destroy(&reply);
		}

		claim = find_one(st, st->index, holder_filter, NULL,
						 idx_repair_index_what(st));
		if (claim == NULL)
			continue;			/* gone meanwhile: insert again */
		holder = conflicting_holder(st, item, claim);
		if (holder != NULL)
			return holder;
		if (take_over_claim(st, claim, ee))
			return NULL;
	}
	ereport(ERROR,
			(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
			 errmsg("could not repair the claim of a key of index \"%s\"",
					st->def->name),
			 errdetail("The claim kept changing while it was repaired."),
			 errhint("Retry when no other session writes the key.")));
	return NULL;				/* keep compiler quiet */
}

/*
 * Replace "claim", as it was read, by the claim "ee"; false if the claim
 * changed meanwhile.
 */
static bool
take_over_claim(IdxRepairState *st, const bson_t *claim,
				const ExpectedEntry *ee)
{
	bson_t	   *selector = read_filter(claim);
	bson_t		reply;
	bson_error_t error;
	bson_iter_t iter;
	bool		matched;

	if (!mongoc_collection_replace_one(st->index, selector, ee->entry, NULL,
									   &reply, &error))
	{
		bson_t	   *failed_reply = idx_own_reply(&reply);

		idx_report_reply_error(failed_reply, &error, st->servername,
							   idx_repair_index_what(st));
	}
	matched = bson_iter_init_find(&iter, &reply, "matchedCount") &&
		BSON_ITER_HOLDS_NUMBER(&iter) && bson_iter_as_int64(&iter) > 0;
	bson_destroy(&reply);
	return matched;
}

/*
 * Report to st->on_conflict the conflict of item's claim "ee" with the
 * fact "holder" ({"v": _id}).  "conflicts" counts facts in conflict, once
 * each however many of their keys other facts hold, as
 * idxtable.sync_status counts the facts of idxtable.conflicts.
 */
static void
report_conflict(IdxRepairState *st, FactItem *item,
				const ExpectedEntry *ee, const bson_t *holder)
{
	bson_iter_t fact_iter;
	bson_iter_t holder_iter;
	char	   *desc;

	if (item->nconflicts++ == 0)
		st->counts.conflicts++;
	if (st->on_conflict == NULL)
		return;
	if (!bson_iter_init_find(&fact_iter, item->id, "v") ||
		!bson_iter_init_find(&holder_iter, holder, "v"))
		elog(ERROR, "a unique key conflict without _ids");
	desc = idx_key_description(st->def, ee->keyvalues, ee->keynulls);
	st->on_conflict(st, desc, bson_iter_value(&fact_iter),
					bson_iter_value(&holder_iter), st->conflict_arg);
}


/* ----------------------------------------------------------------
 *		Pass 1: facts -> entries
 * ----------------------------------------------------------------
 */

/*
 * Is this error one of a value that does not fit its column (convert.c's
 * wrong type, out of range, corrupt value, or a type input function's data
 * exception)?  Only those are counted; anything else stops the function.
 */
static bool
is_conversion_error(int sqlerrcode)
{
	return sqlerrcode == ERRCODE_FDW_INVALID_DATA_TYPE ||
		ERRCODE_TO_CATEGORY(sqlerrcode) == ERRCODE_DATA_EXCEPTION;
}

/*
 * Count an unconvertible fact; remember the _ids of the first few (for a
 * user who may read them) and the first error, in st->long_cxt.
 */
static void
note_unconvertible(IdxRepairState *st, const bson_t *doc, const char *message)
{
	MemoryContext old = MemoryContextSwitchTo(st->long_cxt);

	st->counts.checked++;
	if (st->counts.unconvertible++ < IDX_VERIFY_NAMED_FACTS && !st->hide_id)
	{
		if (st->bad_ids.len > 0)
			appendStringInfoString(&st->bad_ids, ", ");
		appendStringInfoString(&st->bad_ids, idx_document_id_string(doc));
	}
	if (st->first_error == NULL)
		st->first_error = pstrdup(message);
	MemoryContextSwitchTo(old);
}

/*
 * Convert a fact's key and included columns into st->values/nulls.  A
 * fact whose values do not fit is counted, its _id remembered for the
 * WARNING, and false returned: it is skipped (its entries are neither
 * checked nor repaired).  The conversion only computes (type input
 * functions of the supported built-in types hold no resources), so its
 * error can be caught without a subtransaction, which would abort the
 * MongoDB transaction of a transaction that has written.
 */
static bool
convert_fact(IdxRepairState *st, const bson_t *doc)
{
	MemoryContext cxt = CurrentMemoryContext;
	bool		ok = true;

	memset(st->nulls, true, sizeof(bool) * st->rowconv->natts);
	PG_TRY();
	{
		idx_document_to_row(st->rowconv, doc, st->values, st->nulls);
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		MemoryContextSwitchTo(st->long_cxt);
		edata = CopyErrorData();
		if (!is_conversion_error(edata->sqlerrcode))
			PG_RE_THROW();
		FlushErrorState();
		note_unconvertible(st, doc, edata->message);
		FreeErrorData(edata);
		MemoryContextSwitchTo(cxt);
		ok = false;
	}
	PG_END_TRY();
	return ok;
}

/*
 * Remember one fact of the batch and the entries it should have.
 */
void
idx_repair_add_fact(IdxRepairState *st, const bson_t *doc)
{
	const IdxIndexDef *def = st->def;
	FactItem   *item = &st->items[st->nitems];
	bson_iter_t iter;
	Datum	   *keyvalues;
	bool	   *keynulls;
	int			e;

	if (!bson_iter_init_find(&iter, doc, "_id"))
		ereport(ERROR,
				(errcode(ERRCODE_FDW_ERROR),
				 errmsg("document without _id in collection \"%s\"",
						st->info->collection)));
	if (!convert_fact(st, doc))
		return;
	item->id = idx_repair_wrap_field(doc, "_id");
	item->gone = false;
	item->nconflicts = 0;
	item->resolved = false;
	item->nentries = idx_compute_keys(def, st->values, st->nulls,
									  &keyvalues, &keynulls);
	item->entries = palloc(sizeof(ExpectedEntry) * Max(item->nentries, 1));
	for (e = 0; e < item->nentries; e++)
	{
		ExpectedEntry *ee = &item->entries[e];
		bson_t	   *entry;

		ee->keyvalues = keyvalues + e * def->nkeys;
		ee->keynulls = keynulls + e * def->nkeys;
		entry = idx_make_entry(def, ee->keyvalues, ee->keynulls,
							   bson_iter_value(&iter), st->values, st->nulls);
		ee->entry = idx_bson_pcopy(entry);
		bson_destroy(entry);
	}
	st->nitems++;
}

/*
 * The entry of a fact whose unique key's claim another fact holds: the
 * claim "claim" with the fact's _id ("v" of wrapped_id) added to its _id,
 * as an entry of a non-unique index or of a unique key with a NULL has it.
 */
static bson_t *
conflict_entry(const bson_t *claim, const bson_t *wrapped_id)
{
	bson_t		entry = BSON_INITIALIZER;
	bson_iter_t iter;
	bson_iter_t fact;
	bson_t	   *result;

	if (!bson_iter_init_find(&fact, wrapped_id, "v") ||
		!bson_iter_init(&iter, claim))
		elog(ERROR, "invalid unique key claim");
	while (bson_iter_next(&iter))
	{
		bson_iter_t key;
		bson_t		id;

		if (strcmp(bson_iter_key(&iter), "_id") != 0)
		{
			idx_check_append(bson_append_iter(&entry, NULL, 0, &iter));
			continue;
		}
		if (!BSON_ITER_HOLDS_DOCUMENT(&iter) || !bson_iter_recurse(&iter, &key))
			elog(ERROR, "invalid unique key claim");
		idx_check_append(BSON_APPEND_DOCUMENT_BEGIN(&entry, "_id", &id));
		while (bson_iter_next(&key))
			idx_check_append(bson_append_iter(&id, NULL, 0, &key));
		idx_check_append(bson_append_iter(&id, IDX_ENTRY_FACT_ID, -1, &fact));
		idx_check_append(bson_append_document_end(&entry, &id));
	}
	result = idx_bson_pcopy(&entry);
	bson_destroy(&entry);
	return result;
}

/*
 * item's claim "ee" is held by another fact that has the key too.  The
 * index has, instead of the claim, item's conflict entry (conflict_entry()),
 * so that reads through the index, which recheck every fact, still find
 * item: both facts have the key.  Check it as any entry; its absence is
 * part of the conflict, not counted as missing.
 */
static void
check_conflict_entry(IdxRepairState *st, FactItem *item, ExpectedEntry *ee)
{
	bson_t	   *entry = conflict_entry(ee->entry, item->id);
	bson_t	   *key = entry_id_key(st, entry);
	ReadDoc    *rd = idx_repair_find_doc(st, key);

	if (rd == NULL)
	{
		if (st->repair)
			fix_replace(st, key, entry, true);
		return;
	}
	rd->matched = true;			/* its _id holds item's: it is item's */
	if (idx_bson_same_bytes(without_claim_time(rd->doc), entry))
		return;
	st->counts.stale++;
	if (st->repair)
		fix_replace(st, idx_entry_own_filter(rd->doc), entry, false);
}

/*
 * The outcome of item's missing claim "ee": missing (and written,
 * repairing) if no other fact that has the key holds it ("holder" NULL),
 * else a conflict with that fact.
 */
static void
claim_outcome(IdxRepairState *st, FactItem *item, ExpectedEntry *ee,
			  bson_t *holder)
{
	if (holder == NULL)
	{
		st->counts.missing++;
		return;
	}
	report_conflict(st, item, ee, holder);
	check_conflict_entry(st, item, ee);
}

/*
 * A missing claim of a fact of the batch, written with the others by
 * write_claims().
 */
typedef struct PendingClaim
{
	FactItem   *item;
	ExpectedEntry *ee;
} PendingClaim;

/*
 * A unique claim "ee" of item that the index lacks: missing, or a conflict
 * with another fact that has the key too.  Repairing, it is written with
 * the batch's other missing claims (write_claims()).
 */
static void
check_claim(IdxRepairState *st, FactItem *item, ExpectedEntry *ee)
{
	MemoryContext oldcxt;
	PendingClaim *pc;

	if (!st->repair)
	{
		claim_outcome(st, item, ee, claim_conflict(st, item, ee));
		return;
	}
	oldcxt = MemoryContextSwitchTo(st->batch_cxt);
	pc = palloc(sizeof(PendingClaim));
	pc->item = item;
	pc->ee = ee;
	st->pending_claims = lappend(st->pending_claims, pc);
	MemoryContextSwitchTo(oldcxt);
}

/*
 * Which inserts of write_claims()'s failed bulk met a duplicate key
 * ("taken", by their place in the bulk).  Any other failure is raised: a
 * write error of another code, a write concern error, and a failure with
 * no write error at all (the command failed: nothing says which inserts
 * were made).
 */
static void
note_taken_claims(IdxRepairState *st, bson_t *reply, bson_error_t *error,
				  bool *taken, int n)
{
	bson_iter_t iter;
	bson_iter_t errors;
	int			nduplicates = 0;
	bool		other = !bson_iter_init_find(&iter, reply, "writeErrors") ||
		!BSON_ITER_HOLDS_ARRAY(&iter) || !bson_iter_recurse(&iter, &errors);

	while (!other && bson_iter_next(&errors))
	{
		bson_iter_t field;
		int64		place = -1;
		int64		code = 0;

		if (!BSON_ITER_HOLDS_DOCUMENT(&errors) ||
			!bson_iter_recurse(&errors, &field))
			break;
		while (bson_iter_next(&field))
		{
			if (strcmp(bson_iter_key(&field), "index") == 0 &&
				BSON_ITER_HOLDS_NUMBER(&field))
				place = bson_iter_as_int64(&field);
			else if (strcmp(bson_iter_key(&field), "code") == 0 &&
					 BSON_ITER_HOLDS_NUMBER(&field))
				code = bson_iter_as_int64(&field);
		}
		if (code == 11000 && place >= 0 && place < n)
		{
			taken[place] = true;
			nduplicates++;
		}
		else
			other = true;
	}
	other = other || nduplicates == 0;
	if (bson_iter_init_find(&iter, reply, "writeConcernErrors") &&
		BSON_ITER_HOLDS_ARRAY(&iter))
	{
		uint32_t	len;
		const uint8_t *data;

		bson_iter_array(&iter, &len, &data);
		other = other || len > 5;	/* not the empty array */
	}
	if (other)
		idx_report_reply_error(idx_own_reply(reply), error, st->servername,
							   idx_repair_index_what(st));
}

/*
 * Repairing, write the batch's missing unique claims (check_claim()): one
 * unordered bulk of inserts, after the fixes queued before them (a holder
 * may be a stale entry being replaced).  A claim whose key is held goes
 * the way of a single claim (fix_claim()): taken over from a holder that
 * lacks the key, or a conflict.  The server applies the inserts in the
 * order the facts came, so that a key two facts of the batch want goes to
 * the first, as one insert after the other gives it.
 */
static void
write_claims(IdxRepairState *st)
{
	int			n = list_length(st->pending_claims);
	bool	   *taken;
	bson_t		reply;
	bson_error_t error;
	ListCell   *lc;
	int			i = 0;

	if (n == 0)
		return;
	idx_repair_flush(st);
	foreach(lc, st->pending_claims)
	{
		PendingClaim *pc = lfirst(lc);

		if (!mongoc_bulk_operation_insert_with_opts(fix_bulk(st),
													pc->ee->entry, NULL,
													&error))
			idx_report_error(&error, st->servername,
							 idx_repair_index_what(st));
	}
	taken = palloc0(sizeof(bool) * n);
	if (!mongoc_bulk_operation_execute(st->bulk, &reply, &error))
		note_taken_claims(st, &reply, &error, taken, n);
	bson_destroy(&reply);
	mongoc_bulk_operation_destroy(st->bulk);
	st->bulk = NULL;
	CHECK_FOR_INTERRUPTS();		/* a cancel that came during the write */
	foreach(lc, st->pending_claims)
	{
		PendingClaim *pc = lfirst(lc);

		if (!taken[i++])
		{
			st->counts.missing++;
			continue;
		}
		idx_repair_flush(st);	/* the holder may be a stale entry queued */
		claim_outcome(st, pc->item, pc->ee,
					  fix_claim(st, pc->item, pc->ee, true));
	}
	pfree(taken);
	st->pending_claims = NIL;
}

/*
 * Compare one expected entry with what the index has for its fact.
 */
static void
check_expected(IdxRepairState *st, FactItem *item, ExpectedEntry *ee)
{
	ReadDoc    *rd = idx_repair_find_doc(st, entry_id_key(st, ee->entry));
	bson_t	   *holder = NULL;

	if (rd != NULL)
		holder = idx_repair_wrap_field(rd->doc, IDX_ENTRY_FACT_ID);

	if (rd != NULL && holder != NULL && idx_bson_same_bytes(holder, item->id))
	{
		rd->matched = true;
		if (idx_bson_same_bytes(without_claim_time(rd->doc), ee->entry) ||
			idx_repair_spare_claim(st, rd->doc))
			return;
		st->counts.stale++;
		if (st->repair)
			fix_replace(st, read_filter(rd->doc), ee->entry, false);
		return;
	}

	/* not there (or a claim of another fact of the batch) */
	if (idx_entry_is_claim(ee->entry))
	{
		check_claim(st, item, ee);
		return;
	}
	st->counts.missing++;
	if (st->repair)
		fix_replace(st, entry_id_key(st, ee->entry), ee->entry, true);
}

/*
 * Remember a fact of the batch that is gone: it should have no entries.
 */
void
idx_repair_add_gone(IdxRepairState *st, bson_t *wrapped_id)
{
	FactItem   *item = &st->items[st->nitems++];

	item->id = wrapped_id;
	item->gone = true;
	item->nconflicts = 0;
	item->resolved = false;
	item->nentries = 0;
	item->entries = NULL;
}

int
idx_repair_compare_bson_ptrs(const void *a, const void *b)
{
	return idx_repair_compare_bson(*(bson_t *const *) a, *(bson_t *const *) b);
}

/*
 * The sorted _ids of the gone facts of the batch, for is_orphan().
 */
static bson_t **
gone_ids(IdxRepairState *st, int *ngone)
{
	bson_t	  **result = palloc(sizeof(bson_t *) * Max(st->nitems, 1));
	int			i;

	*ngone = 0;
	for (i = 0; i < st->nitems; i++)
		if (st->items[i].gone)
			result[(*ngone)++] = st->items[i].id;
	if (*ngone > 1)
		qsort(result, *ngone, sizeof(bson_t *), idx_repair_compare_bson_ptrs);
	return result;
}

/*
 * Is an entry that no fact of the batch should have one of a fact that is
 * gone (an orphan) rather than of one that exists (stale)?
 */
static bool
is_orphan(const ReadDoc *rd, bson_t **gone, int ngone)
{
	bson_t	   *holder;

	if (ngone == 0)
		return false;
	holder = idx_repair_wrap_field(rd->doc, IDX_ENTRY_FACT_ID);
	return holder != NULL &&
		bsearch(&holder, gone, ngone, sizeof(bson_t *),
				idx_repair_compare_bson_ptrs) != NULL;
}

/*
 * Remember the fact "id" ({"v": _id}, in st->wait_cxt) to check again
 * after the batch.
 */
void
idx_repair_add_waiting_id(IdxRepairState *st, bson_t *id)
{
	if (st->nwaiting >= st->maxwaiting)
	{
		st->maxwaiting = Max(16, st->maxwaiting * 2);
		st->waiting = st->waiting == NULL ?
			MemoryContextAlloc(st->wait_cxt,
							   sizeof(bson_t *) * st->maxwaiting) :
			repalloc(st->waiting, sizeof(bson_t *) * st->maxwaiting);
	}
	st->waiting[st->nwaiting++] = id;
}

/*
 * Remember the fact of "entry" to check again after the batch.
 */
static void
add_waiting(IdxRepairState *st, const bson_t *entry)
{
	MemoryContext oldcxt = MemoryContextSwitchTo(st->wait_cxt);
	bson_t	   *id = idx_repair_wrap_field(entry, IDX_ENTRY_FACT_ID);

	if (id != NULL)
		idx_repair_add_waiting_id(st, id);
	MemoryContextSwitchTo(oldcxt);
}

/*
 * Append to "filter" the condition on the key of the claim "claim": each
 * key component of its _id equal, as "_id.<component>"; false if the
 * claim has no such _id.
 */
static bool
append_key_condition(bson_t *filter, const bson_t *claim)
{
	bson_iter_t iter;
	bson_iter_t key;

	if (!bson_iter_init_find(&iter, claim, "_id") ||
		!BSON_ITER_HOLDS_DOCUMENT(&iter) || !bson_iter_recurse(&iter, &key))
		return false;
	while (bson_iter_next(&key))
	{
		char	   *path = psprintf("_id.%s", bson_iter_key(&key));

		idx_check_append(bson_append_iter(filter, path, -1, &key));
		pfree(path);
	}
	return true;
}

/* The most keys note_waiting() looks for in one find (a batch's) */
#define WAITING_KEYS	1000

/*
 * Repairing, the claims "claims[0..n-1]" were deleted (their facts are
 * gone, or no longer have the key).  Facts with conflict entries of those
 * keys (see check_conflict_entry()) waited for them: note them, to be
 * checked again after the batch, when the first of them takes the claim.
 * One find for up to WAITING_KEYS keys, an $or of the keys' conditions,
 * each served by the index collection's "lookup" index on the key
 * components.
 */
static void
note_waiting(IdxRepairState *st, bson_t **claims, int n)
{
	int			from;

	for (from = 0; from < n; from += WAITING_KEYS)
	{
		bson_t		filter = BSON_INITIALIZER;
		bson_t		branches;
		bson_t		projection = BSON_INITIALIZER;
		const bson_t *doc;
		int			nkeys = 0;
		int			i;

		idx_check_append(IDX_BSON_APPEND_ARRAY_BEGIN(&filter, "$or",
													  &branches));
		for (i = from; i < n && i < from + WAITING_KEYS; i++)
		{
			bson_t		branch = BSON_INITIALIZER;
			char		index[16];
			const char *name;

			if (append_key_condition(&branch, claims[i]))
			{
				bson_uint32_to_string(nkeys++, &name, index, sizeof(index));
				idx_check_append(BSON_APPEND_DOCUMENT(&branches, name,
													  &branch));
			}
			bson_destroy(&branch);
		}
		idx_check_append(bson_append_array_end(&filter, &branches));
		if (nkeys == 0)
		{
			bson_destroy(&filter);
			continue;
		}
		idx_check_append(BSON_APPEND_INT32(&projection, IDX_ENTRY_FACT_ID, 1));
		st->lookup = idx_repair_open_stream(st, st->index, &filter,
											&projection);
		bson_destroy(&filter);
		bson_destroy(&projection);
		while (mongoc_cursor_next(st->lookup, &doc))
		{
			CHECK_FOR_INTERRUPTS();
			add_waiting(st, doc);
		}
		idx_repair_check_cursor(st, st->lookup, idx_repair_index_what(st));
		mongoc_cursor_destroy(st->lookup);
		st->lookup = NULL;
	}
}

/*
 * Repairing a unique index, "entry", an entry with its fact's _id (a
 * conflict entry, or one of a key with a NULL), was deleted: if its fact
 * is gone or has no conflict left, report it to st->on_resolved (once), so
 * that the conflicts recorded for the fact are forgotten.
 */
static void
note_resolved(IdxRepairState *st, const bson_t *entry)
{
	bson_t	   *id = idx_repair_wrap_field(entry, IDX_ENTRY_FACT_ID);
	bson_iter_t iter;
	int			i;

	if (id == NULL || st->on_resolved == NULL ||
		!bson_iter_init_find(&iter, id, "v"))
		return;
	for (i = 0; i < st->nitems; i++)
	{
		FactItem   *item = &st->items[i];

		if (!idx_bson_same_bytes(item->id, id))
			continue;
		if (item->nconflicts == 0 && !item->resolved)
		{
			item->resolved = true;
			st->on_resolved(st, bson_iter_value(&iter), st->conflict_arg);
		}
		return;
	}
}

/*
 * The per-batch core: check (and repair) the facts of st->items against
 * the entries the index holds for them.  Returns how many facts were
 * checked; st->batch_cxt is reset.
 */
int
idx_repair_check_batch(IdxRepairState *st)
{
	bson_t	  **ids = palloc(sizeof(bson_t *) * Max(st->nitems, 1));
	int			i;

	for (i = 0; i < st->nitems; i++)
		ids[i] = st->items[i].id;
	idx_repair_lookup(st, st->index, IDX_ENTRY_FACT_ID, ids, st->nitems,
					  NULL, true, idx_repair_index_what(st));
	return idx_repair_compare_batch(st);
}

/*
 * Compare the facts of st->items with their entries, read into st->docs.
 */
int
idx_repair_compare_batch(IdxRepairState *st)
{
	bson_t	  **gone;
	int			ngone;
	int			nchecked = st->nitems;
	int			i,
				e;

	gone = gone_ids(st, &ngone);
	st->pending_claims = NIL;
	for (i = 0; i < st->nitems; i++)
		for (e = 0; e < st->items[i].nentries; e++)
			check_expected(st, &st->items[i], &st->items[i].entries[e]);
	write_claims(st);

	/* entries of these facts that no fact of the batch should have */
	for (i = 0; i < st->ndocs; i++)
	{
		if (st->docs[i].matched)
			continue;
		if (idx_repair_spare_claim(st, st->docs[i].doc))
		{
			st->docs[i].matched = true; /* neither fixed nor freed */
			continue;
		}
		if (is_orphan(&st->docs[i], gone, ngone))
			st->counts.orphan++;
		else
			st->counts.stale++;
		if (st->repair)
			idx_repair_queue_delete(st, st->docs[i].doc);
	}
	idx_repair_flush(st);
	if (st->repair)
	{
		/* claims freed: who waits for their keys?  conflicts resolved? */
		bson_t	  **freed = palloc(sizeof(bson_t *) * Max(st->ndocs, 1));
		int			nfreed = 0;

		for (i = 0; i < st->ndocs; i++)
		{
			if (st->docs[i].matched)
				continue;
			if (idx_entry_is_claim(st->docs[i].doc))
				freed[nfreed++] = st->docs[i].doc;
			else if (st->def->unique)
				note_resolved(st, st->docs[i].doc);
		}
		note_waiting(st, freed, nfreed);
		pfree(freed);
	}

	st->counts.checked += nchecked;
	st->nitems = 0;
	st->ndocs = 0;
	MemoryContextReset(st->batch_cxt);
	return nchecked;
}

/*
 * Check (and repair) a batch of facts already read (each with the
 * projection of idx_repair_projection()): the entries each should have
 * against those the index holds for them.  A fact whose values do not
 * convert is counted and skipped.  Returns how many facts were checked;
 * st->batch_cxt is reset, so "facts" may live there.
 */
int
idx_repair_fact_docs(IdxRepairState *st, bson_t **facts, int n)
{
	MemoryContext oldcxt = MemoryContextSwitchTo(st->batch_cxt);
	int			i;
	int			result;

	st->items = palloc(sizeof(FactItem) * Max(n, 1));
	st->nitems = 0;
	for (i = 0; i < n; i++)
		idx_repair_add_fact(st, facts[i]);
	result = idx_repair_check_batch(st);
	MemoryContextSwitchTo(oldcxt);
	idx_repair_recheck_waiting(st);
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
