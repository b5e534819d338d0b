/*-------------------------------------------------------------------------
 *
 * index_verify.c
 *		  idxtable.verify_index() and idxtable.repair_index(): compare an
 *		  index collection with the facts of its table, and fix it.
 *
 * Two passes, each streaming in batches of IDX_VERIFY_BATCH documents:
 *
 *	1. facts -> entries.  Read the facts (projection: the key and included
 *	   columns), compute the entries each fact should have, read the
 *	   entries the index holds for the facts of the batch (one find
 *	   {id: {$in: [...]}}, served by the index collection's "fact" index)
 *	   and compare them:
 *		 missing	an entry the fact should have and the index lacks;
 *		 stale		an entry of the fact that the fact should not have (an old
 *					key) or whose included values differ from the fact's.
 *	2. entries -> facts.  Read the entries (_id and id) and look their facts
 *	   up by _id, a batch at a time:
 *		 orphan		an entry whose fact does not exist.
 *
 * "checked" counts the facts of pass 1, "unconvertible" those among them
 * whose key or included columns do not convert (a wrongly typed value):
 * they are skipped, their entries neither checked nor repaired, and a
 * WARNING names the first few.  The claim time "t" of an ordered
 * mode unique claim is not part of the comparison.
 *
 * repair_index fixes what it finds, batch by batch: a missing entry is
 * written (upserted by its _id); a unique key's claim held by another fact
 * is taken over if that fact lacks the key, and is a unique violation that
 * repair cannot fix if it has it; a stale entry is replaced or deleted and
 * an orphan deleted, each by the filter {_id, id} that matches the entry
 * only as it was read.  Every fix is complete by itself, so a cancelled or
 * failed repair leaves the index no worse than it found it.
 *
 * Both functions take a ShareLock on the foreign table, as CREATE INDEX
 * does: writes through PostgreSQL wait, so a write in flight is never
 * mistaken for drift.  Progress shows in pg_stat_progress_create_index
 * (command REINDEX; phase "index validation: scanning table" over the
 * facts, then "index validation: scanning index" over the entries).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <mongoc/mongoc.h>

#include "access/relation.h"
#include "access/sysattr.h"
#include "commands/progress.h"
#include "fmgr.h"
#include "foreign/foreign.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/tuplestore.h"

#include "connection.h"
#include "convert.h"
#include "deparse.h"
#include "handle.h"
#include "index_catalog.h"
#include "index_ddl.h"
#include "index_entry.h"
#include "mongo_limits.h"
#include "option.h"
#include "protocol_read.h"
#include "xact.h"

PG_FUNCTION_INFO_V1(idxtable_verify_index);
PG_FUNCTION_INFO_V1(idxtable_repair_index);

/* Facts or entries per batch */
#define IDX_VERIFY_BATCH	1000

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
 * One fact of the batch of pass 1.
 */
typedef struct FactItem
{
	bson_t	   *id;				/* {"v": <fact _id>} */
	int			nentries;
	ExpectedEntry *entries;
} FactItem;

/*
 * One document of a batch as read, with its sort key.
 */
typedef struct ReadDoc
{
	bson_t	   *doc;
	bson_t	   *key;			/* what it is found by: _id or {"v": id} */
	bool		matched;
} ReadDoc;

typedef struct VerifyCounts
{
	int64		checked;
	int64		missing;
	int64		orphan;
	int64		stale;
	int64		unconvertible;	/* facts whose values do not fit */
} VerifyCounts;

/* How many unconvertible facts the WARNING names */
#define IDX_VERIFY_NAMED_FACTS	5

typedef struct VerifyState
{
	IdxIndexDef *def;
	IdxTableInfo *info;
	mongoc_client_t *client;
	const char *servername;
	bool		repair;
	IdxRowConv *rowconv;
	Bitmapset  *attrs;			/* key and included columns */
	Datum	   *values;
	bool	   *nulls;

	/* libmongoc objects, released by release_verify() */
	mongoc_collection_t *facts;
	mongoc_collection_t *index;
	mongoc_cursor_t *cursor;	/* the pass's stream */
	mongoc_cursor_t *lookup;	/* a batch's lookup */
	mongoc_bulk_operation_t *bulk;	/* a batch's fixes */

	MemoryContext batch_cxt;
	int			nitems;
	FactItem   *items;			/* pass 1 */
	int			ndocs;
	ReadDoc    *docs;			/* pass 2 */

	VerifyCounts counts;
	int64		done;			/* documents of the pass so far */
	bool		hide_id;		/* the user may not read the _id column */
	MemoryContext long_cxt;		/* lives as long as the function */
	StringInfoData bad_ids;		/* the first unconvertible facts' _ids */
	char	   *first_error;	/* the first conversion error's message */
} VerifyState;

/*
 * Release the libmongoc objects (safe to repeat).
 */
static void
release_verify(VerifyState *st)
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

static const char *
index_what(VerifyState *st)
{
	return psprintf("verifying index collection \"%s\" of database \"%s\"",
					st->def->collection, st->def->database);
}

static const char *
facts_what(VerifyState *st)
{
	return psprintf("reading collection \"%s\" of database \"%s\"",
					st->info->collection, st->info->database);
}

/*
 * {"v": <doc.field>} as a palloc'd document, or NULL if doc lacks field:
 * values wrapped this way compare by type and bytes.
 */
static bson_t *
wrap_field(const bson_t *doc, const char *field)
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
static ReadDoc *
find_read_doc(VerifyState *st, const bson_t *key)
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
static mongoc_cursor_t *
open_stream(VerifyState *st, mongoc_collection_t *coll, const bson_t *filter,
			const bson_t *projection)
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
static void
check_cursor(VerifyState *st, mongoc_cursor_t *cursor, const char *what)
{
	bson_error_t error;
	const bson_t *reply;

	if (mongoc_cursor_error_document(cursor, &error, &reply))
		idx_report_reply_error(reply, &error, st->servername, what);
}

static int	lookup_part(VerifyState *st, mongoc_collection_t *coll,
						const char *field, bson_t **keys, int from, int nkeys,
						const bson_t *projection, bool by_entry_id,
						const char *what, int *alloc);

/*
 * Read all documents of "coll" matching {field: {$in: [the "v" of each
 * key]}} into st->docs, each keyed by keyfn, sorted for find_read_doc().
 */
static void
lookup_batch(VerifyState *st, mongoc_collection_t *coll, const char *field,
			 bson_t **keys, int nkeys, const bson_t *projection,
			 bool by_entry_id, const char *what)
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
 * One find of lookup_batch(), for keys[from..] up to IDX_IN_LIST_MAX_BYTES
 * of key values (so that the command stays under MongoDB's 16 MB), adding
 * to st->docs; returns where the next one starts.
 */
static int
lookup_part(VerifyState *st, mongoc_collection_t *coll, const char *field,
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

	st->lookup = open_stream(st, coll, &filter, projection);
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
		rd->key = by_entry_id ? entry_id_key(rd->doc) : wrap_field(rd->doc, "_id");
		rd->matched = false;
		if (rd->key != NULL)
			st->ndocs++;
	}
	check_cursor(st, st->lookup, what);
	mongoc_cursor_destroy(st->lookup);
	st->lookup = NULL;
	return i;
}


/* ----------------------------------------------------------------
 *		Fixes
 * ----------------------------------------------------------------
 */

static mongoc_bulk_operation_t *
fix_bulk(VerifyState *st)
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
static void
fix_delete(VerifyState *st, const bson_t *entry)
{
	bson_t	   *filter = idx_entry_own_filter(entry);
	bson_error_t error;

	if (!mongoc_bulk_operation_remove_one_with_opts(fix_bulk(st), filter,
													NULL, &error))
		idx_report_error(&error, st->servername, index_what(st));
}

/*
 * Queue the replacement of "selector"'s entry by "entry" (upsert: also
 * when there is none).
 */
static void
fix_replace(VerifyState *st, const bson_t *selector, const bson_t *entry,
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
		idx_report_error(&error, st->servername, index_what(st));
}

/*
 * Send the queued fixes of a batch.
 */
static void
flush_fixes(VerifyState *st)
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
find_one(VerifyState *st, mongoc_collection_t *coll, const bson_t *filter,
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
		check_cursor(st, st->lookup, what);
	mongoc_cursor_destroy(st->lookup);
	st->lookup = NULL;
	return result;
}

/*
 * Does the fact whose _id is the "v" of "wrapped_id" exist and have the
 * entry _id of "entry"?
 */
static bool
fact_has_entry(VerifyState *st, const bson_t *wrapped_id, const bson_t *entry)
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
	fact = find_one(st, st->facts, &filter, &projection, facts_what(st));
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
fix_claim(VerifyState *st, const ExpectedEntry *ee)
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
								   index_what(st));
		}
		bson_destroy(&reply);

		claim = find_one(st, st->index, holder_filter, NULL, index_what(st));
		if (claim == NULL)
			continue;			/* gone meanwhile: insert again */
		holder = wrap_field(claim, IDX_ENTRY_FACT_ID);
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
									   index_what(st));
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
note_unconvertible(VerifyState *st, const bson_t *doc, const char *message)
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
convert_fact(VerifyState *st, const bson_t *doc)
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
add_fact(VerifyState *st, const bson_t *doc)
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
	item->id = wrap_field(doc, "_id");
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
check_expected(VerifyState *st, FactItem *item, ExpectedEntry *ee)
{
	ReadDoc    *rd = find_read_doc(st, entry_id_key(ee->entry));
	bson_t	   *holder = rd ? wrap_field(rd->doc, IDX_ENTRY_FACT_ID) : NULL;

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
		flush_fixes(st);		/* the holder may be a stale entry queued */
		fix_claim(st, ee);
	}
	else
		fix_replace(st, entry_id_key(ee->entry), ee->entry, true);
}

/*
 * Check (and repair) the facts of the batch against their entries.
 */
static void
check_fact_batch(VerifyState *st)
{
	bson_t	  **ids = palloc(sizeof(bson_t *) * Max(st->nitems, 1));
	int			i,
				e;

	for (i = 0; i < st->nitems; i++)
		ids[i] = st->items[i].id;
	lookup_batch(st, st->index, IDX_ENTRY_FACT_ID, ids, st->nitems,
				 NULL, true, index_what(st));

	for (i = 0; i < st->nitems; i++)
		for (e = 0; e < st->items[i].nentries; e++)
			check_expected(st, &st->items[i], &st->items[i].entries[e]);

	/* entries of these facts that no fact of the batch should have */
	for (i = 0; i < st->ndocs; i++)
	{
		if (st->docs[i].matched)
			continue;
		st->counts.stale++;
		if (st->repair)
			fix_delete(st, st->docs[i].doc);
	}
	flush_fixes(st);

	st->counts.checked += st->nitems;
	st->done += st->nitems;
	st->nitems = 0;
	st->ndocs = 0;
	MemoryContextReset(st->batch_cxt);
	pgstat_progress_update_param(PROGRESS_CREATEIDX_TUPLES_DONE, st->done);
}

/*
 * Pass 1: every fact against its entries.
 */
static void
check_facts(VerifyState *st)
{
	bson_t		filter = BSON_INITIALIZER;
	bson_t		projection = BSON_INITIALIZER;
	const bson_t *doc;
	MemoryContext oldcxt;

	idx_build_projection(&projection, st->info, st->attrs);
	st->cursor = open_stream(st, st->facts, &filter, &projection);
	bson_destroy(&projection);
	bson_destroy(&filter);

	st->items = MemoryContextAlloc(CurrentMemoryContext,
								   sizeof(FactItem) * IDX_VERIFY_BATCH);
	oldcxt = MemoryContextSwitchTo(st->batch_cxt);
	while (mongoc_cursor_next(st->cursor, &doc))
	{
		CHECK_FOR_INTERRUPTS();
		add_fact(st, doc);
		if (st->nitems >= IDX_VERIFY_BATCH)
			check_fact_batch(st);
	}
	check_cursor(st, st->cursor, facts_what(st));
	check_fact_batch(st);
	MemoryContextSwitchTo(oldcxt);
	mongoc_cursor_destroy(st->cursor);
	st->cursor = NULL;
}


/* ----------------------------------------------------------------
 *		Pass 2: entries -> facts
 * ----------------------------------------------------------------
 */

/*
 * Check (and repair) a batch of entries: does the fact of each exist?
 */
static void
check_entry_batch(VerifyState *st, ReadDoc *entries, int n)
{
	bson_t	  **ids = palloc(sizeof(bson_t *) * Max(n, 1));
	bson_t		projection = BSON_INITIALIZER;
	int			nids = 0;
	int			i;

	for (i = 0; i < n; i++)
		if (entries[i].key != NULL)
			ids[nids++] = entries[i].key;
	idx_check_append(BSON_APPEND_INT32(&projection, "_id", 1));
	lookup_batch(st, st->facts, "_id", ids, nids, &projection, false,
				 facts_what(st));
	bson_destroy(&projection);

	for (i = 0; i < n; i++)
	{
		if (entries[i].key != NULL && find_read_doc(st, entries[i].key))
			continue;
		st->counts.orphan++;
		if (st->repair)
			fix_delete(st, entries[i].doc);
	}
	flush_fixes(st);

	st->done += n;
	st->ndocs = 0;
	MemoryContextReset(st->batch_cxt);
	pgstat_progress_update_param(PROGRESS_CREATEIDX_TUPLES_DONE, st->done);
}

/*
 * Pass 2: every entry against the existence of its fact.
 */
static void
check_entries(VerifyState *st)
{
	bson_t		filter = BSON_INITIALIZER;
	bson_t		projection = BSON_INITIALIZER;
	ReadDoc    *entries;
	const bson_t *doc;
	int			n = 0;
	MemoryContext oldcxt;

	idx_check_append(BSON_APPEND_INT32(&projection, IDX_ENTRY_FACT_ID, 1));
	st->cursor = open_stream(st, st->index, &filter, &projection);
	bson_destroy(&projection);
	bson_destroy(&filter);

	entries = MemoryContextAlloc(CurrentMemoryContext,
								 sizeof(ReadDoc) * IDX_VERIFY_BATCH);
	oldcxt = MemoryContextSwitchTo(st->batch_cxt);
	while (mongoc_cursor_next(st->cursor, &doc))
	{
		CHECK_FOR_INTERRUPTS();
		entries[n].doc = idx_bson_pcopy(doc);
		entries[n].key = wrap_field(entries[n].doc, IDX_ENTRY_FACT_ID);
		n++;
		if (n >= IDX_VERIFY_BATCH)
		{
			check_entry_batch(st, entries, n);
			n = 0;
		}
	}
	check_cursor(st, st->cursor, index_what(st));
	check_entry_batch(st, entries, n);
	MemoryContextSwitchTo(oldcxt);
	mongoc_cursor_destroy(st->cursor);
	st->cursor = NULL;
}


/* ----------------------------------------------------------------
 *		SQL functions
 * ----------------------------------------------------------------
 */

/*
 * Start a phase of the progress report.
 */
static void
progress_phase(VerifyState *st, int phase, const char *collection)
{
	const int	index[] = {
		PROGRESS_CREATEIDX_COMMAND,
		PROGRESS_CREATEIDX_PHASE,
		PROGRESS_CREATEIDX_TUPLES_TOTAL,
		PROGRESS_CREATEIDX_TUPLES_DONE
	};
	int64		vals[4];

	vals[0] = PROGRESS_CREATEIDX_COMMAND_REINDEX;
	vals[1] = phase;
	vals[2] = idx_count_documents(st->client, st->servername,
								  st->info->database, collection);
	vals[3] = 0;
	pgstat_progress_update_multi_param(4, index, vals);
	st->done = 0;
}

/*
 * The valid index "name", with its table opened (and locked) for the
 * function; the caller closes it.
 */
static IdxIndexDef *
open_index(const char *name, bool repair, Relation *rel)
{
	Oid			relid;
	char	   *collection;
	ListCell   *lc;

	/* as CREATE INDEX: writes wait, reads go on (privileges come first) */
	*rel = idx_open_index_table(name, ShareLock,
								repair ? ACL_NO_RIGHTS : ACL_SELECT,
								&collection);
	relid = RelationGetRelid(*rel);

	foreach(lc, idx_get_indexes(relid, InvalidOid))
	{
		IdxIndexDef *def = lfirst(lc);

		if (strcmp(def->name, name) != 0)
			continue;
		if (def->state != IDX_STATE_VALID)
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("index \"%s\" is not valid", name),
					 errhint("Drop the index with idxtable.drop_index() and create it again.")));
		return def;
	}
	ereport(ERROR,
			(errcode(ERRCODE_UNDEFINED_OBJECT),
			 errmsg("index \"%s\" does not exist", name)));
	return NULL;				/* keep compiler quiet */
}

/*
 * WARNING about the facts that could not be converted: how many, the
 * first few _ids (if the user may read them) and the first error.
 */
static void
report_unconvertible(VerifyState *st)
{
	int64		n = st->counts.unconvertible;

	if (n == 0)
		return;
	ereport(WARNING,
			(errcode(ERRCODE_FDW_INVALID_DATA_TYPE),
			 errmsg_plural("%lld fact of collection \"%s\" could not be converted for index \"%s\" and was skipped",
						   "%lld facts of collection \"%s\" could not be converted for index \"%s\" and were skipped",
						   n, (long long) n, st->info->collection,
						   st->def->name),
			 st->hide_id ?
			 errdetail("The first error was: %s.", st->first_error) :
			 errdetail("The first error was: %s.  First _ids: %s%s.",
					   st->first_error, st->bad_ids.data,
					   n > IDX_VERIFY_NAMED_FACTS ? ", ..." : "")));
}

/*
 * Run both passes over index "name".
 */
static void
verify_index(const char *name, bool repair, VerifyCounts *counts)
{
	VerifyState st;
	Relation	rel;
	ForeignServer *server;

	memset(&st, 0, sizeof(st));
	st.repair = repair;
	st.def = open_index(name, repair, &rel);
	st.info = idx_get_table_info(st.def->relid);
	st.client = idx_get_client_for_rel(st.def->relid, InvalidOid, &server);
	st.servername = server->servername;
	if (repair && idx_xact_client_busy(st.client))
		ereport(ERROR,
				(errcode(ERRCODE_ACTIVE_SQL_TRANSACTION),
				 errmsg("repair_index cannot run in a transaction that has written to server \"%s\"",
						st.servername),
				 errhint("Run it in a transaction of its own.")));

	st.attrs = idx_entry_columns(st.def);
	st.rowconv = idx_row_conv_create(RelationGetDescr(rel), st.info, st.attrs);
	st.values = palloc0(sizeof(Datum) * Max(st.rowconv->natts, 1));
	st.nulls = palloc0(sizeof(bool) * Max(st.rowconv->natts, 1));
	st.hide_id = st.rowconv->hide_id;
	st.long_cxt = CurrentMemoryContext;
	initStringInfo(&st.bad_ids);
	st.batch_cxt = AllocSetContextCreate(CurrentMemoryContext,
										 "idxtable_fdw verify batch",
										 ALLOCSET_DEFAULT_SIZES);

	pgstat_progress_start_command(PROGRESS_COMMAND_CREATE_INDEX,
								  st.def->relid);
	PG_TRY();
	{
		st.facts = mongoc_client_get_collection(st.client, st.info->database,
												st.info->collection);
		st.index = mongoc_client_get_collection(st.client, st.def->database,
												st.def->collection);
		progress_phase(&st, PROGRESS_CREATEIDX_PHASE_VALIDATE_TABLESCAN,
					   st.info->collection);
		check_facts(&st);
		progress_phase(&st, PROGRESS_CREATEIDX_PHASE_VALIDATE_IDXSCAN,
					   st.def->collection);
		check_entries(&st);
	}
	PG_FINALLY();
	{
		release_verify(&st);
		pgstat_progress_end_command();
	}
	PG_END_TRY();
	MemoryContextDelete(st.batch_cxt);
	relation_close(rel, NoLock);
	report_unconvertible(&st);
	*counts = st.counts;
}

/*
 * Return the counts as the function's one row.
 */
static Datum
return_counts(FunctionCallInfo fcinfo, const VerifyCounts *counts)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	Datum		values[5];
	bool		nulls[5] = {false, false, false, false, false};

	InitMaterializedSRF(fcinfo, 0);
	values[0] = Int64GetDatum(counts->checked);
	values[1] = Int64GetDatum(counts->missing);
	values[2] = Int64GetDatum(counts->orphan);
	values[3] = Int64GetDatum(counts->stale);
	values[4] = Int64GetDatum(counts->unconvertible);
	tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	return (Datum) 0;
}

/*
 * idxtable.verify_index(name): what is missing, orphaned or stale.
 */
Datum
idxtable_verify_index(PG_FUNCTION_ARGS)
{
	VerifyCounts counts;

	verify_index(text_to_cstring(PG_GETARG_TEXT_PP(0)), false, &counts);
	return return_counts(fcinfo, &counts);
}

/*
 * idxtable.repair_index(name): fix it; the counts of what was fixed.
 */
Datum
idxtable_repair_index(PG_FUNCTION_ARGS)
{
	VerifyCounts counts;

	verify_index(text_to_cstring(PG_GETARG_TEXT_PP(0)), true, &counts);
	return return_counts(fcinfo, &counts);
}
