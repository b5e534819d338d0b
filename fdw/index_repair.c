/*-------------------------------------------------------------------------
 *
 * index_repair.c
 *		  The per-batch core of verify_index and repair_index: bring the
 *		  entries of an index table up to date with a list of its facts.
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
 * deleted and an orphan deleted by the filter {_id, id} that matches the
 * entry only as it was read; a missing unique claim is inserted, or taken
 * over from a fact that lacks the key.  Every fix is complete by itself,
 * and applying a batch twice changes nothing.
 *
 * idx_repair_facts() is the entry point for a list of fact _ids: it reads
 * the facts with one find {_id: {$in: [...]}}, and a fact that is gone
 * has all its entries counted as orphans (and deleted).  The change-stream
 * applier will call it for the _ids a stream names; verify_index's pass 1
 * (index_verify.c) feeds the same core, idx_repair_fact_docs(), from its
 * stream of every fact.  Nothing here depends on the state of an SQL
 * function call.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <mongoc/mongoc.h>

#include "miscadmin.h"
#include "utils/memutils.h"

#include "connection.h"
#include "convert.h"
#include "deparse.h"
#include "handle.h"
#include "index_catalog.h"
#include "index_ddl.h"
#include "index_entry.h"
#include "index_repair.h"
#include "mongo_limits.h"
#include "option.h"
#include "protocol_read.h"
#include "xact.h"

/* Attempts at writing a unique claim that others race for */
#define IDX_REPAIR_CLAIM_ATTEMPTS 3

/*
 * One entry a fact should have, with its key values for messages.
 */
typedef struct ExpectedEntry
{
	bson_t	   *entry;
	Datum	   *keyvalues;
	bool	   *keynulls;
} ExpectedEntry;

/*
 * One fact of a batch, present (with the entries it should have) or gone.
 */
typedef struct FactItem
{
	bson_t	   *id;				/* {"v": <fact _id>} */
	bool		gone;			/* no fact has this _id */
	int			nentries;
	ExpectedEntry *entries;
} FactItem;

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
const char *
idx_repair_index_what(IdxRepairState *st)
{
	return psprintf("verifying index collection \"%s\" of database \"%s\"",
					st->def->collection, st->def->database);
}

const char *
idx_repair_facts_what(IdxRepairState *st)
{
	return psprintf("reading collection \"%s\" of database \"%s\"",
					st->info->collection, st->info->database);
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
entry_id_key(const bson_t *entry)
{
	bson_t		key = BSON_INITIALIZER;
	bson_t	   *result;
	const uint8 *data;
	uint32		len;
	bson_t		id;

	idx_entry_id_bytes(entry, &data, &len);
	if (!bson_init_static(&id, data, len))
		elog(ERROR, "invalid _id in an index entry");
	idx_check_append(BSON_APPEND_DOCUMENT(&key, "_id", &id));
	result = idx_bson_pcopy(&key);
	bson_destroy(&key);
	return result;
}

/*
 * Total order on documents by length, then bytes (for bsearch).
 */
static int
compare_bson(const bson_t *a, const bson_t *b)
{
	if (a->len != b->len)
		return a->len < b->len ? -1 : 1;
	return memcmp(bson_get_data(a), bson_get_data(b), a->len);
}

static int
compare_read_docs(const void *a, const void *b)
{
	return compare_bson(((const ReadDoc *) a)->key,
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
		int			c = compare_bson(st->docs[mid].key, key);

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

	if (!bson_has_field(entry, "t"))
		return (bson_t *) entry;
	bson_copy_to_excluding_noinit(entry, &copy, "t", NULL);
	result = idx_bson_pcopy(&copy);
	bson_destroy(&copy);
	return result;
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
						const char *what)
{
	bson_error_t error;
	const bson_t *reply;

	if (mongoc_cursor_error_document(cursor, &error, &reply))
		idx_report_reply_error(reply, &error, st->servername, what);
}

static int	compare_fact_batch(IdxRepairState *st);
static int	lookup_part(IdxRepairState *st, mongoc_collection_t *coll,
						const char *field, bson_t **keys, int from, int nkeys,
						const bson_t *projection, bool by_entry_id,
						const char *what, int *alloc);

/*
 * Read all documents of "coll" matching {field: {$in: [the "v" of each
 * key]}} into st->docs, each keyed by keyfn, sorted for idx_repair_find_doc().
 */
void
idx_repair_lookup(IdxRepairState *st, mongoc_collection_t *coll,
				  const char *field, bson_t **keys, int nkeys,
				  const bson_t *projection, bool by_entry_id, const char *what)
{
	int			alloc = nkeys + 16;
	int			from = 0;

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
			bool by_entry_id, const char *what, int *alloc)
{
	bson_t		filter = BSON_INITIALIZER;
	bson_t		cond,
				list;
	const bson_t *doc;
	int			i;
	uint32		k = 0;

	idx_check_append(BSON_APPEND_DOCUMENT_BEGIN(&filter, field, &cond));
	idx_check_append(BSON_APPEND_ARRAY_BEGIN(&cond, "$in", &list));
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
		rd->key = by_entry_id ? entry_id_key(rd->doc) :
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
 * Queue the deletion of an entry as it was read (pass its own filter).
 */
void
idx_repair_queue_delete(IdxRepairState *st, const bson_t *entry)
{
	bson_t	   *filter = idx_entry_own_filter(entry);
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
							   psprintf("repairing index collection \"%s\" of database \"%s\"",
										st->def->collection,
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
		 const bson_t *projection, const char *what)
{
	bson_t		opts = BSON_INITIALIZER;
	const bson_t *doc;
	bson_t	   *result = NULL;

	idx_check_append(BSON_APPEND_INT64(&opts, "limit", 1));
	if (projection)
		idx_check_append(BSON_APPEND_DOCUMENT(&opts, "projection", projection));
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
		if (!result && idx_entry_same_id(entries[e], entry))
			result = true;
		bson_destroy(entries[e]);
	}
	return result;
}

/*
 * Write a missing unique claim.  If another fact's entry holds the key,
 * take it over when that fact lacks the key; when it has it, two facts
 * share a unique key, which repair cannot fix.
 */
static void
fix_claim(IdxRepairState *st, const ExpectedEntry *ee)
{
	bson_t	   *holder_filter = entry_id_key(ee->entry);
	int			attempt;

	for (attempt = 0; attempt < IDX_REPAIR_CLAIM_ATTEMPTS; attempt++)
	{
		bson_t		reply;
		bson_error_t error;
		bson_t	   *claim;
		bson_t	   *holder;

		CHECK_FOR_INTERRUPTS();
		if (mongoc_collection_insert_one(st->index, ee->entry, NULL, &reply,
										 &error))
		{
			bson_destroy(&reply);
			return;
		}
		if (error.code != 11000)
		{
			bson_t	   *failed_reply = idx_own_reply(&reply);

			idx_report_reply_error(failed_reply, &error, st->servername,
								   idx_repair_index_what(st));
		}
		bson_destroy(&reply);

		claim = find_one(st, st->index, holder_filter, NULL,
						 idx_repair_index_what(st));
		if (claim == NULL)
			continue;			/* gone meanwhile: insert again */
		holder = idx_repair_wrap_field(claim, IDX_ENTRY_FACT_ID);
		if (holder != NULL && fact_has_entry(st, holder, ee->entry))
			ereport(ERROR,
					(errcode(ERRCODE_UNIQUE_VIOLATION),
					 errmsg("could not repair unique index \"%s\"",
							st->def->name),
					 idx_errdetail_key_duplicated(idx_key_description(st->def,
															   ee->keyvalues,
															   ee->keynulls)),
					 errhint("Change or delete one of the rows with this key, then repair the index again.")));
		{
			bson_t	   *selector = idx_entry_own_filter(claim);
			bson_iter_t iter;
			bool		ok;

			ok = mongoc_collection_replace_one(st->index, selector, ee->entry,
											   NULL, &reply, &error);
			if (!ok)
			{
				bson_t	   *failed_reply = idx_own_reply(&reply);

				idx_report_reply_error(failed_reply, &error, st->servername,
									   idx_repair_index_what(st));
			}
			if (bson_iter_init_find(&iter, &reply, "matchedCount") &&
				BSON_ITER_HOLDS_NUMBER(&iter) && bson_iter_as_int64(&iter) > 0)
			{
				bson_destroy(&reply);
				return;
			}
			bson_destroy(&reply);
		}
	}
	ereport(ERROR,
			(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
			 errmsg("could not repair the claim of a key of index \"%s\"",
					st->def->name),
			 errdetail("The claim kept changing while it was repaired."),
			 errhint("Retry when no other session writes the key.")));
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
static void
add_fact(IdxRepairState *st, const bson_t *doc)
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
 * Compare one expected entry with what the index has for its fact.
 */
static void
check_expected(IdxRepairState *st, FactItem *item, ExpectedEntry *ee)
{
	ReadDoc    *rd = idx_repair_find_doc(st, entry_id_key(ee->entry));
	bson_t	   *holder = NULL;

	if (rd != NULL)
		holder = idx_repair_wrap_field(rd->doc, IDX_ENTRY_FACT_ID);

	if (rd != NULL && holder != NULL && idx_bson_same_bytes(holder, item->id))
	{
		rd->matched = true;
		if (idx_bson_same_bytes(without_claim_time(rd->doc), ee->entry))
			return;
		st->counts.stale++;
		if (st->repair)
			fix_replace(st, idx_entry_own_filter(rd->doc), ee->entry, false);
		return;
	}

	/* not there (or a claim of another fact of the batch) */
	st->counts.missing++;
	if (!st->repair)
		return;
	if (idx_entry_is_claim(ee->entry))
	{
		idx_repair_flush(st);	/* the holder may be a stale entry queued */
		fix_claim(st, ee);
	}
	else
		fix_replace(st, entry_id_key(ee->entry), ee->entry, true);
}

/*
 * Remember a fact of the batch that is gone: it should have no entries.
 */
static void
add_gone(IdxRepairState *st, bson_t *wrapped_id)
{
	FactItem   *item = &st->items[st->nitems++];

	item->id = wrapped_id;
	item->gone = true;
	item->nentries = 0;
	item->entries = NULL;
}

static int
compare_bson_ptrs(const void *a, const void *b)
{
	return compare_bson(*(bson_t *const *) a, *(bson_t *const *) b);
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
		qsort(result, *ngone, sizeof(bson_t *), compare_bson_ptrs);
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
				compare_bson_ptrs) != NULL;
}

/*
 * The per-batch core: check (and repair) the facts of st->items against
 * the entries the index holds for them.  Returns how many facts were
 * checked; st->batch_cxt is reset.
 */
static int
check_fact_batch(IdxRepairState *st)
{
	bson_t	  **ids = palloc(sizeof(bson_t *) * Max(st->nitems, 1));
	int			i;

	for (i = 0; i < st->nitems; i++)
		ids[i] = st->items[i].id;
	idx_repair_lookup(st, st->index, IDX_ENTRY_FACT_ID, ids, st->nitems,
					  NULL, true, idx_repair_index_what(st));
	return compare_fact_batch(st);
}

/*
 * Compare the facts of st->items with their entries, read into st->docs.
 */
static int
compare_fact_batch(IdxRepairState *st)
{
	bson_t	  **gone;
	int			ngone;
	int			nchecked = st->nitems;
	int			i,
				e;

	gone = gone_ids(st, &ngone);
	for (i = 0; i < st->nitems; i++)
		for (e = 0; e < st->items[i].nentries; e++)
			check_expected(st, &st->items[i], &st->items[i].entries[e]);

	/* entries of these facts that no fact of the batch should have */
	for (i = 0; i < st->ndocs; i++)
	{
		if (st->docs[i].matched)
			continue;
		if (is_orphan(&st->docs[i], gone, ngone))
			st->counts.orphan++;
		else
			st->counts.stale++;
		if (st->repair)
			idx_repair_queue_delete(st, st->docs[i].doc);
	}
	idx_repair_flush(st);

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
		add_fact(st, facts[i]);
	result = check_fact_batch(st);
	MemoryContextSwitchTo(oldcxt);
	return result;
}

/*
 * {"v": value} as a palloc'd document.
 */
static bson_t *
wrap_value(const bson_value_t *value)
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
static int
distinct_ids(const bson_value_t *ids, int n, bson_t ***keys)
{
	bson_t	  **all = palloc(sizeof(bson_t *) * Max(n, 1));
	int			nkeys = 0;
	int			i;

	for (i = 0; i < n; i++)
		all[i] = wrap_value(&ids[i]);
	if (n > 1)
		qsort(all, n, sizeof(bson_t *), compare_bson_ptrs);
	for (i = 0; i < n; i++)
		if (nkeys == 0 || compare_bson(all[nkeys - 1], all[i]) != 0)
			all[nkeys++] = all[i];
	*keys = all;
	return nkeys;
}

/*
 * Read the facts named by keys[0..nkeys-1] (one find by _id) into
 * st->items: those that exist, with the entries they should have, and
 * those that are gone.
 */
static void
read_named_facts(IdxRepairState *st, bson_t **keys, int nkeys)
{
	bson_t		projection = BSON_INITIALIZER;
	ReadDoc    *facts;
	int			nfacts;
	int			i;

	idx_repair_projection(st, &projection);
	idx_repair_lookup(st, st->facts, "_id", keys, nkeys, &projection, false,
					  idx_repair_facts_what(st));
	bson_destroy(&projection);
	facts = st->docs;
	nfacts = st->ndocs;

	st->items = palloc(sizeof(FactItem) * Max(nkeys + nfacts, 1));
	st->nitems = 0;
	for (i = 0; i < nkeys; i++)
		if (idx_repair_find_doc(st, keys[i]) == NULL)
			add_gone(st, keys[i]);
	for (i = 0; i < nfacts; i++)
		add_fact(st, facts[i].doc);
}

/*
 * Repair the named facts reading their entries first, then the facts.  A
 * write through the FDW that commits between the two reads then shows as
 * old entries and new facts, and the fix moves the index towards the newer
 * state (which that write also wrote), never back to an older one.
 */
static int
repair_entries_first(IdxRepairState *st, bson_t **keys, int nkeys)
{
	ReadDoc    *entries;
	int			nentries;

	idx_repair_lookup(st, st->index, IDX_ENTRY_FACT_ID, keys, nkeys,
					  NULL, true, idx_repair_index_what(st));
	entries = st->docs;
	nentries = st->ndocs;
	read_named_facts(st, keys, nkeys);
	st->docs = entries;
	st->ndocs = nentries;
	return compare_fact_batch(st);
}

/*
 * Check (and, in repair mode, repair) the entries of the facts whose _ids
 * are ids[0..n-1], whether the facts exist or not: one find of the facts
 * by {_id: {$in: [...]}}, one of their entries by {id: {$in: [...]}}.  The
 * entries of a fact that is gone are orphans.  A repeated _id counts once.
 * This is what the change-stream applier calls for the _ids a stream
 * names, most of them written through the FDW with their entries: so a
 * repair first only checks, and writes only a difference it confirms by
 * reading the entries again, then the facts (repair_entries_first()), as
 * one bulk write.  The counts are those of the confirmed difference.
 * Returns how many facts were checked (those that exist and convert, and
 * those that are gone).
 */
int
idx_repair_facts(IdxRepairState *st, const bson_value_t *ids, int n)
{
	MemoryContext oldcxt = MemoryContextSwitchTo(st->batch_cxt);
	bson_t	  **keys;
	int			nkeys = distinct_ids(ids, n, &keys);
	VerifyCounts before = st->counts;
	bool		repair = st->repair;
	int			result;

	st->repair = false;
	read_named_facts(st, keys, nkeys);
	result = check_fact_batch(st);
	st->repair = repair;
	if (repair && (st->counts.missing != before.missing ||
				   st->counts.stale != before.stale ||
				   st->counts.orphan != before.orphan))
	{
		/* keys live in batch_cxt, reset by the check: compute them again */
		MemoryContextSwitchTo(st->batch_cxt);
		nkeys = distinct_ids(ids, n, &keys);
		st->counts = before;
		result = repair_entries_first(st, keys, nkeys);
	}
	MemoryContextSwitchTo(oldcxt);
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
	st->facts = mongoc_client_get_collection(client, info->database,
											 info->collection);
	st->index = mongoc_client_get_collection(client, def->database,
											 def->collection);
}
