/*-------------------------------------------------------------------------
 *
 * index_write.c
 *		  Index maintenance of INSERT, UPDATE and DELETE (see index_write.h
 *		  for the protocol).
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/index/index_write.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/sysattr.h"
#include "miscadmin.h"
#include "utils/memutils.h"
#include "utils/rel.h"

#include "core/connection.h"
#include "core/convert.h"
#include "core/guc.h"
#include "core/handle.h"
#include "core/protocol_read.h"
#include "core/xact.h"
#include "index/bulk_write.h"
#include "index/index_catalog.h"
#include "index/index_claims.h"
#include "index/index_ddl.h"
#include "index/index_entry.h"
#include "index/index_write.h"

/* Attempts at taking over an orphaned unique claim that others race for */
#define IDX_CLAIM_ATTEMPTS 3


/*
 * One new entry to write.
 */
typedef struct PendingEntry
{
	bson_t	   *entry;			/* the entry document (static over palloc) */
	bool		claim;			/* a unique key's claim (_id without id) */
	bool		replace;		/* the old row had this _id: replace it */
	bool		fresh;			/* a row without an old state (INSERT) */
	bool		written;		/* written by the latest write_new */
	bool		created;		/* ... as a new document (not over one with
								 * the same _id that was there before) */
	int			row;			/* row within the batch */
	Datum	   *keyvalues;		/* key values, for messages */
	bool	   *keynulls;
} PendingEntry;

/*
 * The queue of one index collection.
 */
typedef struct IndexQueue
{
	IdxIndexDef *def;
	mongoc_collection_t *coll;
	List	   *inserts;		/* PendingEntry * */
	List	   *deletes;		/* bson_t * filters {_id, id} */
} IndexQueue;

struct IdxIndexWriter
{
	IdxTableInfo *info;
	mongoc_client_t *client;
	const char *servername;
	IdxConsistency mode;		/* of the writes (idx_xact_mode) */
	int			nindexes;
	IndexQueue *queues;
	Bitmapset  *needed;
	IdxRowConv *rowconv;		/* needed columns of a fact document */
	mongoc_collection_t *facts; /* for claim checks */
	MemoryContext batch_cxt;	/* the queue */
	MemoryContextCallback release_cb;
	uint64		written;
	uint64		deleted;
	bool		take_back;		/* ordered: a claim could not be resolved, so
								 * the batch's new entries are to be taken
								 * back (idx_writer_take_back()) */
	bool		bulk_write;		/* write all index collections in one
								 * bulkWrite command (MongoDB 8.0) */
	/* the new entries queued in a bulkWrite (idx_writer_add_new) */
	int			bw_first;		/* op index of the first of them */
	int			bw_marked;		/* ops before this one are marked */
	int			bw_nnew;		/* how many */
	PendingEntry **bw_entries;	/* each op's entry ... */
	int		   *bw_queues;		/* ... and its queue */
	int			bw_ndeletes;	/* old entries queued (idx_writer_add_old) */
};

static void write_new_bulk_write(IdxIndexWriter *w,
								 mongoc_client_session_t *session);
static void delete_old_bulk_write(IdxIndexWriter *w,
								  mongoc_client_session_t *session);

/*
 * Release the collection handles (memory context reset callback).
 */
static void
release_writer(void *arg)
{
	IdxIndexWriter *w = arg;
	int			i;

	for (i = 0; i < w->nindexes; i++)
	{
		if (w->queues[i].coll)
			mongoc_collection_destroy(w->queues[i].coll);
		w->queues[i].coll = NULL;
	}
	if (w->facts)
		mongoc_collection_destroy(w->facts);
	w->facts = NULL;
}

/*
 * Set up index maintenance for writes to a table.
 */
IdxIndexWriter *
idx_writer_create(Relation rel, Oid userid, IdxTableInfo *info,
				  mongoc_client_t *client, const char *servername,
				  IdxConsistency mode)
{
	IdxIndexWriter *w = palloc0(sizeof(IdxIndexWriter));
	List	   *defs = idx_get_indexes(RelationGetRelid(rel), userid);
	ListCell   *lc;
	int			i;

	if (mode != IDX_CONSISTENCY_TRANSACTION)
		idx_ddl_check_ordered_write(RelationGetRelid(rel), info->relname);
	w->info = info;
	w->client = client;
	w->servername = servername;
	w->mode = mode;
	w->queues = palloc0(sizeof(IndexQueue) * Max(list_length(defs), 1));
	w->batch_cxt = AllocSetContextCreate(CurrentMemoryContext,
										 "idxtable_fdw index writes",
										 ALLOCSET_DEFAULT_SIZES);
	w->release_cb.func = release_writer;
	w->release_cb.arg = w;
	MemoryContextRegisterResetCallback(CurrentMemoryContext, &w->release_cb);

	foreach(lc, defs)
	{
		IdxIndexDef *def = lfirst(lc);
		int			k;

		if (def->owner_problem != NULL)
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("cannot write to foreign table \"%s\": the collection of its index \"%s\" does not carry the index's ownership marker",
							RelationGetRelationName(rel), def->name),
					 errdetail_internal("%s", def->owner_problem),
					 errhint("Drop the index with idxtable.drop_index().")));
		if (def->state == IDX_STATE_FAILED)
			continue;
		w->queues[w->nindexes].def = def;
		w->queues[w->nindexes].coll =
			mongoc_client_get_collection(client, def->database,
										 def->collection);
		w->nindexes++;
		for (k = 0; k < def->nkeys; k++)
			w->needed = bms_add_member(w->needed, def->keys[k].attnum);
		for (k = 0; k < def->ninclude; k++)
			w->needed = bms_add_member(w->needed, def->include[k]);
	}
	for (i = 0; i < w->nindexes; i++)
		Assert(w->queues[i].coll != NULL);
	if (w->nindexes > 0)
	{
		Bitmapset  *offsets = NULL;
		int			attnum = -1;

		/* idx_row_conv_create wants pull_varattnos offsets */
		while ((attnum = bms_next_member(w->needed, attnum)) >= 0)
			offsets = bms_add_member(offsets,
									 attnum - FirstLowInvalidHeapAttributeNumber);
		w->rowconv = idx_row_conv_create(RelationGetDescr(rel), info,
										 offsets);
		w->facts = mongoc_client_get_collection(client, info->database,
												info->collection);
	}
	return w;
}

/*
 * A writer that maintains no index for writes in consistency mode
 * 'eventual': the facts are written alone and the change-stream applier
 * brings the index tables up to date (fdw/applier/applier.c), so the write
 * costs what one to a table without index tables costs.
 */
IdxIndexWriter *
idx_writer_create_facts_only(IdxTableInfo *info, mongoc_client_t *client,
							 const char *servername)
{
	IdxIndexWriter *w = palloc0(sizeof(IdxIndexWriter));

	w->info = info;
	w->client = client;
	w->servername = servername;
	w->mode = IDX_CONSISTENCY_EVENTUAL;
	w->queues = palloc0(sizeof(IndexQueue));
	w->batch_cxt = AllocSetContextCreate(CurrentMemoryContext,
										 "idxtable_fdw index writes",
										 ALLOCSET_DEFAULT_SIZES);
	return w;
}

int
idx_writer_nindexes(IdxIndexWriter *w)
{
	return w->nindexes;
}

/*
 * The definitions of the maintained indexes (for the wait of writes that
 * claim unique keys, sync_wait.h).
 */
List *
idx_writer_indexes(IdxIndexWriter *w)
{
	List	   *result = NIL;
	int			i;

	for (i = 0; i < w->nindexes; i++)
		result = lappend(result, w->queues[i].def);
	return result;
}

Bitmapset *
idx_writer_needed_attrs(IdxIndexWriter *w)
{
	return w->needed;
}

IdxRowConv *
idx_writer_row_conv(IdxIndexWriter *w)
{
	return w->rowconv;
}

void
idx_writer_counters(IdxIndexWriter *w, uint64 *written, uint64 *deleted)
{
	*written = w->written;
	*deleted = w->deleted;
}

/*
 * The entries of one fact for one index, with their key values.
 * Returns the count; *entries and *keys are palloc'd.
 */
static int
fact_entries(const IdxIndexDef *def, const Datum *values, const bool *nulls,
			 const bson_value_t *fact_id, bson_t ***entries,
			 Datum **keyvalues, bool **keynulls)
{
	int			n = idx_compute_keys(def, values, nulls, keyvalues, keynulls);
	int			e;

	*entries = palloc(sizeof(bson_t *) * Max(n, 1));
	for (e = 0; e < n; e++)
	{
		bson_t	   *entry = idx_make_entry(def, *keyvalues + e * def->nkeys,
										   *keynulls + e * def->nkeys,
										   fact_id, values, nulls);

		(*entries)[e] = idx_bson_pcopy(entry);
		bson_destroy(entry);
	}
	return n;
}

/*
 * Queue the entry changes of one fact.
 */
void
idx_writer_queue(IdxIndexWriter *w, int row,
				 const Datum *oldvals, const bool *oldnulls,
				 const Datum *newvals, const bool *newnulls,
				 const bson_value_t *fact_id)
{
	MemoryContext oldcxt = MemoryContextSwitchTo(w->batch_cxt);
	int			i;

	for (i = 0; i < w->nindexes; i++)
	{
		IndexQueue *q = &w->queues[i];
		bson_t	  **olde = NULL,
				  **newe = NULL;
		Datum	   *okv,
				   *nkv = NULL;
		bool	   *okn,
				   *nkn = NULL;
		int			no = 0,
					nn = 0,
					a,
					b;

		if (oldvals)
			no = fact_entries(q->def, oldvals, oldnulls, fact_id, &olde,
							  &okv, &okn);
		if (newvals)
			nn = fact_entries(q->def, newvals, newnulls, fact_id, &newe,
							  &nkv, &nkn);

		for (b = 0; b < nn; b++)
		{
			PendingEntry *pe;
			int			match = -1;

			for (a = 0; a < no && match < 0; a++)
			{
				if (idx_entry_same_id(q->def, olde[a], newe[b]))
					match = a;
			}
			if (match >= 0 && idx_bson_same_bytes(olde[match], newe[b]))
				continue;		/* unchanged entry */
			pe = palloc0(sizeof(PendingEntry));
			pe->entry = newe[b];
			pe->claim = idx_entry_is_claim(newe[b]);
			pe->replace = (match >= 0);
			pe->fresh = (oldvals == NULL);
			pe->row = row;
			pe->keyvalues = nkv + b * q->def->nkeys;
			pe->keynulls = nkn + b * q->def->nkeys;
			q->inserts = lappend(q->inserts, pe);
		}
		for (a = 0; a < no; a++)
		{
			bool		kept = false;

			for (b = 0; b < nn && !kept; b++)
				kept = idx_entry_same_id(q->def, olde[a], newe[b]);
			if (!kept)
				q->deletes = lappend(q->deletes, idx_entry_own_filter(olde[a]));
		}
	}
	MemoryContextSwitchTo(oldcxt);
}

/*
 * Writing the index collection of queue "q", for messages.
 */
static const IdxOp *
writing_what(IndexQueue *q)
{
	return idx_op(IDX_OP_WRITE_INDEX, q->def->collection, q->def->name);
}

/*
 * A bulk write on an index collection, in the transaction's session if any.
 * Unordered, except where the caller needs the first error to be the one
 * reported (in a transaction, the first failed command aborts it, and the
 * commands after it fail with NoSuchTransaction).
 */
static mongoc_bulk_operation_t *
create_bulk(IdxIndexWriter *w, IndexQueue *q,
			mongoc_client_session_t *session, bool ordered)
{
	bson_t		opts = BSON_INITIALIZER;
	bson_error_t error;
	mongoc_bulk_operation_t *bulk;

	idx_check_append(BSON_APPEND_BOOL(&opts, "ordered", ordered));
	if (session && !mongoc_client_session_append(session, &opts, &error))
	{
		bson_destroy(&opts);
		idx_report_error(&error, w->servername, writing_what(q));
	}
	bulk = mongoc_collection_create_bulk_operation_with_opts(q->coll, &opts);
	bson_destroy(&opts);
	return bulk;
}

/*
 * What we write for a pending entry: the entry, plus in ordered mode the
 * time it is written ("t"): a claim's age, and for every entry what tells
 * it from the same entry written again, so that a repair beside writes
 * touches an entry only as it read it and leaves one of a write in flight
 * alone (index_claims.h).
 */
static bson_t *
entry_to_write(IdxIndexWriter *w, PendingEntry *pe, bson_t *buf)
{
	if (w->mode == IDX_CONSISTENCY_TRANSACTION)
		return pe->entry;
	bson_copy_to(pe->entry, buf);
	idx_check_append(BSON_APPEND_DATE_TIME(buf, IDX_ENTRY_CLAIM_TIME,
										   idx_claim_now_ms()));
	return buf;
}

/*
 * The selector an entry that is not a new claim is upserted by: a claim
 * replacing its fact's own claim, conditionally on its fact
 * (idx_entry_own_filter), anything else by its _id alone, built in
 * "idonly".
 */
static bson_t *
upsert_selector(PendingEntry *pe, bson_t *idonly)
{
	bson_iter_t iter;

	if (pe->claim)
		return idx_entry_own_filter(pe->entry);
	bson_iter_init_find(&iter, pe->entry, "_id");
	idx_check_append(bson_append_iter(idonly, "_id", -1, &iter));
	return idonly;
}

/*
 * Add one pending entry to a bulk: claims are inserted (a duplicate is the
 * unique check), everything else is an idempotent upsert of the entry,
 * conditional on the fact for claims being replaced.  An entry libmongoc
 * refuses to queue is an ERROR, and the bulk is destroyed first.
 */
static void
bulk_add_entry(IdxIndexWriter *w, mongoc_bulk_operation_t *bulk,
			   PendingEntry *pe)
{
	bson_t		buf = BSON_INITIALIZER;
	bson_t	   *doc = entry_to_write(w, pe, &buf);
	bson_t		opts = BSON_INITIALIZER;
	bson_error_t error;
	bool		ok;

	if (pe->claim && !pe->replace)
		ok = mongoc_bulk_operation_insert_with_opts(bulk, doc, NULL, &error);
	else
	{
		bson_t		idonly = BSON_INITIALIZER;
		bson_t	   *selector = upsert_selector(pe, &idonly);

		idx_check_append(BSON_APPEND_BOOL(&opts, "upsert", true));
		ok = mongoc_bulk_operation_replace_one_with_opts(bulk, selector, doc,
														 &opts, &error);
		bson_destroy(&idonly);
	}
	bson_destroy(&opts);
	bson_destroy(&buf);
	if (!ok)
	{
		/* the bulk is the caller's, but nobody else releases it now */
		mongoc_bulk_operation_destroy(bulk);
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("an index entry of foreign table \"%s\" cannot be stored in MongoDB",
						w->info->relname),
				 errdetail("libmongoc: %s", error.message)));
	}
}

/*
 * Queue one pending entry into a bulkWrite, as bulk_add_entry() queues it
 * into a bulk: a claim is inserted, anything else upserted by its _id (a
 * claim replacing its fact's own claim conditionally on its fact).
 */
static void
bulk_write_entry(IdxIndexWriter *w, IdxBulkWrite *bw, IndexQueue *q,
				 PendingEntry *pe)
{
	bson_t		buf = BSON_INITIALIZER;
	bson_t	   *doc = entry_to_write(w, pe, &buf);

	if (pe->claim && !pe->replace)
		idx_bulk_write_insert(bw, w->info->database, q->def->collection, doc);
	else
	{
		bson_t		idonly = BSON_INITIALIZER;
		bson_t	   *selector = upsert_selector(pe, &idonly);

		idx_bulk_write_update(bw, w->info->database, q->def->collection,
							  selector, doc, true);
		bson_destroy(&idonly);
	}
	bson_destroy(&buf);
}

/*
 * The write errors of a bulk reply: op index and code of each, in
 * palloc'd arrays; returns how many (0 if the reply has none).
 */
int
idx_bulk_write_errors(const bson_t *reply, int **indexes, int **codes)
{
	bson_iter_t iter;
	bson_iter_t werr;
	int			n = 0;
	int			alloc = 8;

	*indexes = palloc(sizeof(int) * alloc);
	*codes = palloc(sizeof(int) * alloc);
	if (!bson_iter_init_find(&iter, reply, "writeErrors") ||
		!BSON_ITER_HOLDS_ARRAY(&iter) || !bson_iter_recurse(&iter, &werr))
		return 0;
	while (bson_iter_next(&werr))
	{
		bson_iter_t field;
		int			index = -1,
					code = 0;

		if (!BSON_ITER_HOLDS_DOCUMENT(&werr))
			continue;
		if (bson_iter_recurse(&werr, &field) &&
			bson_iter_find(&field, "index") && BSON_ITER_HOLDS_NUMBER(&field))
			index = (int) bson_iter_as_int64(&field);
		if (bson_iter_recurse(&werr, &field) &&
			bson_iter_find(&field, "code") && BSON_ITER_HOLDS_NUMBER(&field))
			code = (int) bson_iter_as_int64(&field);
		if (n == alloc)
		{
			alloc *= 2;
			*indexes = repalloc(*indexes, sizeof(int) * alloc);
			*codes = repalloc(*codes, sizeof(int) * alloc);
		}
		(*indexes)[n] = index;
		(*codes)[n] = code;
		n++;
	}
	return n;
}

/*
 * The unique violation of a pending claim.
 */
static void
report_unique_violation(IndexQueue *q, PendingEntry *pe)
{
	char	   *key = idx_key_description(q->def, pe->keyvalues, pe->keynulls);

	ereport(ERROR,
			(errcode(ERRCODE_UNIQUE_VIOLATION),
			 errmsg("duplicate key value violates unique constraint \"%s\"",
					q->def->name),
			 key ? errdetail("%s already exists.", key) : 0));
}

/*
 * The op indexes of a bulk reply's "upserted" array: the upserts that
 * created a document.
 */
static Bitmapset *
upserted_ops(const bson_t *reply)
{
	Bitmapset  *result = NULL;
	bson_iter_t iter;
	bson_iter_t item;

	if (!bson_iter_init_find(&iter, reply, "upserted") ||
		!BSON_ITER_HOLDS_ARRAY(&iter) || !bson_iter_recurse(&iter, &item))
		return NULL;
	while (bson_iter_next(&item))
	{
		bson_iter_t field;

		if (BSON_ITER_HOLDS_DOCUMENT(&item) &&
			bson_iter_recurse(&item, &field) &&
			bson_iter_find(&field, "index") && BSON_ITER_HOLDS_NUMBER(&field))
			result = bms_add_member(result, (int) bson_iter_as_int64(&field));
	}
	return result;
}

/*
 * Execute a bulk.  Returns true on success, else false with the palloc'd
 * list of the ops that failed on a duplicate key (-1: unknown which);
 * other errors, and any error without write errors, are raised at once.
 * *upserted (if wanted) gets the upserts that created a document.
 * "first" is the session whose transaction this bulk's command begins, or
 * NULL: if MongoDB aborted that transaction for now, it is started again
 * (idx_xact_restart_first, *attempts counting) and the result is false
 * with no duplicates (*ndups 0): build the bulk again and send it again.
 */
static bool
run_bulk(IdxIndexWriter *w, IndexQueue *q, mongoc_bulk_operation_t **bulk,
		 int **dup_ops, int *ndups, Bitmapset **upserted,
		 mongoc_client_session_t *first, int *attempts)
{
	bson_t		reply;
	bson_error_t error;
	bool		ok;
	int		   *indexes,
			   *codes;
	int			n,
				i;

	ok = mongoc_bulk_operation_execute(*bulk, &reply, &error);
	mongoc_bulk_operation_destroy(*bulk);
	*bulk = NULL;
	*ndups = 0;
	if (upserted)
		*upserted = upserted_ops(&reply);
	if (ok)
	{
		bson_destroy(&reply);
		return true;
	}
	if (first && idx_xact_restart_first(first, &reply, &error, attempts))
	{
		bson_destroy(&reply);
		return false;
	}
	n = idx_bulk_write_errors(&reply, &indexes, &codes);
	if (n == 0 && error.code == 11000 &&
		!mongoc_error_has_label(&reply, "TransientTransactionError"))
	{
		/*
		 * Inside a transaction MongoDB fails the whole command on a write
		 * error: a duplicate, but of which op is unknown (-1).
		 */
		bson_destroy(&reply);
		indexes[0] = -1;
		*dup_ops = indexes;
		*ndups = 1;
		return false;
	}
	for (i = 0; i < n; i++)
	{
		if (codes[i] != 11000 || indexes[i] < 0)
			break;
	}
	if (n == 0 || i < n ||
		mongoc_error_has_label(&reply, "TransientTransactionError"))
	{
		bson_t	   *failed_reply = idx_own_reply(&reply);

		idx_report_reply_error(failed_reply, &error, w->servername,
							   writing_what(q));
	}
	bson_destroy(&reply);
	*dup_ops = indexes;
	*ndups = n;
	return false;
}

/*
 * Find one document by filter (projection optional), in the open
 * transaction if "in_txn"; returns a palloc'd copy or NULL.
 */
static bson_t *
find_one(IdxIndexWriter *w, mongoc_collection_t *coll, const bson_t *filter,
		 const bson_t *projection, bool in_txn, const IdxOp *what)
{
	bson_t		opts = BSON_INITIALIZER;
	mongoc_cursor_t *cursor;
	const bson_t *doc;
	bson_t	   *result = NULL;

	idx_check_append(BSON_APPEND_INT64(&opts, "limit", 1));
	if (projection)
		idx_check_append(BSON_APPEND_DOCUMENT(&opts, "projection", projection));
	if (in_txn)
		idx_xact_append_session(w->client, &opts);
	cursor = mongoc_collection_find_with_opts(coll, filter, &opts,
											  idx_primary_read_prefs());
	bson_destroy(&opts);
	if (mongoc_cursor_next(cursor, &doc))
		result = idx_bson_pcopy(doc);
	if (result == NULL && mongoc_cursor_error(cursor, NULL))
	{
		(void) idx_own_cursor(cursor);	/* the error destroys it */
		idx_report_cursor_error(cursor, w->servername, what);
	}
	mongoc_cursor_destroy(cursor);
	return result;
}

/*
 * The entry of the fact "fact_id", as the fact now is, that has the _id of
 * "entry" (palloc'd), or NULL if the fact does not exist or lacks it.
 */
static bson_t *
fact_entry_now(IdxIndexWriter *w, IndexQueue *q, const bson_iter_t *fact_id,
			   const bson_t *entry)
{
	bson_t		filter = BSON_INITIALIZER;
	bson_t		projection = BSON_INITIALIZER;
	bson_t	   *fact;
	int			attnum = -1;
	int			natts = w->info->natts;
	Datum	   *values;
	bool	   *nulls;
	bson_t	  **entries;
	Datum	   *kv;
	bool	   *kn;
	int			n,
				e;

	idx_check_append(bson_append_iter(&filter, "_id", -1, fact_id));
	while ((attnum = bms_next_member(w->needed, attnum)) >= 0)
		idx_check_append(BSON_APPEND_INT32(&projection,
										   w->info->fields[attnum - 1], 1));
	fact = find_one(w, w->facts, &filter, &projection, true,
					idx_op(IDX_OP_CHECK_ENTRY, q->def->name, NULL));
	bson_destroy(&filter);
	bson_destroy(&projection);
	if (fact == NULL ||
		!idx_doc_id_is(fact, bson_iter_value((bson_iter_t *) fact_id)))
		return NULL;

	values = palloc0(sizeof(Datum) * natts);
	nulls = palloc(sizeof(bool) * natts);
	memset(nulls, true, sizeof(bool) * natts);
	idx_document_to_row(w->rowconv, fact, values, nulls);
	n = fact_entries(q->def, values, nulls,
					 bson_iter_value((bson_iter_t *) fact_id),
					 &entries, &kv, &kn);
	for (e = 0; e < n; e++)
	{
		if (idx_entry_same_id(q->def, entries[e], entry))
			return entries[e];
	}
	return NULL;
}

/*
 * Milliseconds since a claim was made (its "t"), or a large number for
 * claims without a time (written by transactions or the build).
 */
static int64
claim_age_ms(const bson_t *claim)
{
	int64		t = idx_claim_time(claim);

	return t == 0 ? PG_INT64_MAX : idx_claim_now_ms() - t;
}

/*
 * Are two BSON values the same (same type and bytes)?
 */
static bool
same_value(const bson_value_t *a, const bson_value_t *b)
{
	bson_t		da = BSON_INITIALIZER;
	bson_t		db = BSON_INITIALIZER;
	bool		result;

	idx_check_append(BSON_APPEND_VALUE(&da, "v", a));
	idx_check_append(BSON_APPEND_VALUE(&db, "v", b));
	result = idx_bson_same_bytes(&da, &db);
	bson_destroy(&da);
	bson_destroy(&db);
	return result;
}

/*
 * Write one claim with insert_one (holder NULL) or as a takeover of the
 * holder's claim with replace_one.  Returns true if it was written, false
 * if someone else got there first; other errors are raised.
 */
static bool
write_claim(IdxIndexWriter *w, IndexQueue *q, PendingEntry *pe,
			const bson_value_t *entry_id, const bson_value_t *holder)
{
	bson_t		buf = BSON_INITIALIZER;
	bson_t	   *doc = entry_to_write(w, pe, &buf);
	bson_t		reply;
	bson_error_t error;
	bool		ok;
	bool		written = true;

	if (holder == NULL)
		ok = mongoc_collection_insert_one(q->coll, doc, NULL, &reply, &error);
	else
	{
		bson_t		selector = BSON_INITIALIZER;
		bson_iter_t iter;

		idx_check_append(BSON_APPEND_VALUE(&selector, "_id", entry_id));
		idx_check_append(BSON_APPEND_VALUE(&selector, IDX_ENTRY_FACT_ID,
										   holder));
		ok = mongoc_collection_replace_one(q->coll, &selector, doc, NULL,
										   &reply, &error);
		bson_destroy(&selector);
		if (ok && bson_iter_init_find(&iter, &reply, "matchedCount") &&
			BSON_ITER_HOLDS_NUMBER(&iter) && bson_iter_as_int64(&iter) == 0)
			written = false;
	}
	bson_destroy(&buf);
	if (!ok && error.code == 11000)
		written = false;
	else if (!ok)
	{
		bson_t	   *failed_reply = idx_own_reply(&reply);

		idx_report_reply_error(failed_reply, &error, w->servername,
							   writing_what(q));
	}
	bson_destroy(&reply);
	return written;
}

/*
 * Did another new row (INSERT) of this batch write the claim of "pe"
 * already?  The two rows have the same _id when the claim is held by the
 * fact "pe" is for: two facts with one _id, whose claim a sharded
 * collection would otherwise let the second take over from the first (the
 * facts are written after the claims, on the shards of their keys).
 */
static bool
claimed_in_batch(IndexQueue *q, PendingEntry *pe)
{
	ListCell   *lc;

	foreach(lc, q->inserts)
	{
		PendingEntry *other = lfirst(lc);

		if (other != pe && other->row != pe->row && other->fresh &&
			other->claim && other->written &&
			idx_entry_same_id(q->def, other->entry, pe->entry))
			return true;
	}
	return false;
}

/*
 * Ordered mode: a claim we could not insert is held by someone.  Take it
 * over if it is ours already, or an orphan (its fact lacks the key) older
 * than idxtable.unique_claim_timeout; otherwise it is a unique violation.
 * A claim of our own _id is not ours for a new row (INSERT) whose _id
 * already has a fact with the key: that is a second fact with the same
 * _id, which a sharded collection takes where the shard key differs (_id
 * is unique per shard only), so a unique index on _id must refuse it; so
 * is a claim that another new row of the batch wrote (its fact is not
 * written yet).
 */
static void
resolve_claim(IdxIndexWriter *w, IndexQueue *q, PendingEntry *pe)
{
	bson_iter_t iter;
	bson_value_t entry_id;
	bson_value_t fact_id;
	int			attempt;

	bson_iter_init_find(&iter, pe->entry, "_id");
	bson_value_copy(bson_iter_value(&iter), &entry_id);
	bson_iter_init_find(&iter, pe->entry, IDX_ENTRY_FACT_ID);
	bson_value_copy(bson_iter_value(&iter), &fact_id);

	for (attempt = 0; attempt < IDX_CLAIM_ATTEMPTS; attempt++)
	{
		bson_t		filter = BSON_INITIALIZER;
		bson_t	   *claim;
		bson_iter_t holder;
		bool		done;

		CHECK_FOR_INTERRUPTS();
		idx_check_append(BSON_APPEND_VALUE(&filter, "_id", &entry_id));
		claim = find_one(w, q->coll, &filter, NULL, true, writing_what(q));
		bson_destroy(&filter);
		if (claim == NULL)
			done = write_claim(w, q, pe, &entry_id, NULL);
		else
		{
			if (!bson_iter_init_find(&holder, claim, IDX_ENTRY_FACT_ID))
				break;
			if (!same_value(bson_iter_value(&holder), &fact_id) &&
				(claim_age_ms(claim) < idx_unique_claim_timeout ||
				 fact_entry_now(w, q, &holder, pe->entry) != NULL))
				break;
			if (pe->fresh &&
				same_value(bson_iter_value(&holder), &fact_id) &&
				(claimed_in_batch(q, pe) ||
				 fact_entry_now(w, q, &holder, pe->entry) != NULL))
				break;
			done = write_claim(w, q, pe, &entry_id, bson_iter_value(&holder));
		}
		if (done)
		{
			pe->written = true;
			/* over our own fact's claim, it was there before */
			pe->created = (claim == NULL ||
						   !bson_iter_init_find(&holder, claim, IDX_ENTRY_FACT_ID) ||
						   !same_value(bson_iter_value(&holder), &fact_id));
			bson_value_destroy(&entry_id);
			bson_value_destroy(&fact_id);
			return;
		}
	}
	bson_value_destroy(&entry_id);
	bson_value_destroy(&fact_id);
	report_unique_violation(q, pe);
}

/*
 * Delete a list of entries by their own-entry filters in one bulk.
 */
static void
delete_entries(IdxIndexWriter *w, IndexQueue *q, List *filters,
			   mongoc_client_session_t *session)
{
	mongoc_bulk_operation_t *bulk;
	ListCell   *lc;
	int		   *dups;
	int			ndups;

	if (filters == NIL)
		return;
	bulk = create_bulk(w, q, session, false);
	foreach(lc, filters)
	{
		bson_error_t error;

		if (!mongoc_bulk_operation_remove_one_with_opts(bulk, lfirst(lc), NULL,
														&error))
		{
			mongoc_bulk_operation_destroy(bulk);
			idx_report_error(&error, w->servername, writing_what(q));
		}
	}
	if (!run_bulk(w, q, &bulk, &dups, &ndups, NULL, NULL, NULL))
		ereport(ERROR,
				(errcode(ERRCODE_FDW_ERROR),
				 errmsg("MongoDB server \"%s\" reported a duplicate key for a deletion of entries of index \"%s\"",
						w->servername, q->def->name),
				 idx_op_context(writing_what(q))));
	w->deleted += list_length(filters);
}

/*
 * Write one entry by itself: a replace (upsert) by its _id.
 */
static void
write_entry(IdxIndexWriter *w, IndexQueue *q, PendingEntry *pe)
{
	mongoc_bulk_operation_t *bulk = create_bulk(w, q, NULL, false);
	int		   *dups;
	int			ndups;

	bulk_add_entry(w, bulk, pe);
	if (!run_bulk(w, q, &bulk, &dups, &ndups, NULL, NULL, NULL))
		ereport(ERROR,
				(errcode(ERRCODE_FDW_ERROR),
				 errmsg("MongoDB server \"%s\" reported a duplicate key for an entry of index \"%s\" written back by its _id",
						w->servername, q->def->name),
				 idx_op_context(writing_what(q))));
}

/*
 * Take back one entry that write_new wrote, in ordered mode: delete it if
 * it was created; if it replaced a document with the same _id that was
 * there before (of an existing fact with the same _id, or left over),
 * write back the entry that fact now has, or delete it if it has none.
 */
static void
unwrite_entry(IdxIndexWriter *w, IndexQueue *q, PendingEntry *pe,
			  List **deletes)
{
	bson_iter_t iter;
	bson_t	   *own = NULL;

	if (!pe->created)
	{
		bson_iter_init_find(&iter, pe->entry, IDX_ENTRY_FACT_ID);
		own = fact_entry_now(w, q, &iter, pe->entry);
	}
	if (own != NULL)
	{
		PendingEntry again = *pe;

		again.entry = own;
		again.claim = false;	/* a plain replace by _id */
		write_entry(w, q, &again);
	}
	else
		*deletes = lappend(*deletes, idx_entry_own_filter(pe->entry));
}

/*
 * Ordered mode: take back the entries write_new wrote, for all rows of the
 * batch (row < 0) or one row (its fact was not written).
 */
static void
unwrite_rows(IdxIndexWriter *w, int row, mongoc_client_session_t *session)
{
	int			i;

	for (i = 0; i < w->nindexes; i++)
	{
		IndexQueue *q = &w->queues[i];
		List	   *deletes = NIL;
		ListCell   *lc;

		foreach(lc, q->inserts)
		{
			PendingEntry *pe = lfirst(lc);

			if ((row < 0 || pe->row == row) && pe->written && !pe->replace)
				unwrite_entry(w, q, pe, &deletes);
		}
		delete_entries(w, q, deletes, session);
	}
}

/*
 * Transaction mode, after a duplicate key failed a whole bulk write: the
 * first pending claim that is held by a committed entry (read outside the
 * aborted transaction), else the first claim.
 */
static PendingEntry *
committed_claim(IdxIndexWriter *w, IndexQueue *q)
{
	PendingEntry *first = NULL;
	ListCell   *lc;

	foreach(lc, q->inserts)
	{
		PendingEntry *pe = lfirst(lc);
		bson_t		filter = BSON_INITIALIZER;
		bson_iter_t iter;
		bson_t	   *holder;

		if (!pe->claim)
			continue;
		if (first == NULL)
			first = pe;
		bson_iter_init_find(&iter, pe->entry, "_id");
		idx_check_append(bson_append_iter(&filter, "_id", -1, &iter));
		holder = find_one(w, q->coll, &filter, NULL, false, writing_what(q));
		bson_destroy(&filter);
		if (holder)
			return pe;
	}
	if (first == NULL)
		first = linitial(q->inserts);
	return first;
}

/*
 * The queue with the claims first (a stable partition), so that a bulk
 * sends them in its first command.
 */
static List *
claims_first(List *inserts)
{
	List	   *claims = NIL;
	List	   *others = NIL;
	ListCell   *lc;

	foreach(lc, inserts)
	{
		PendingEntry *pe = lfirst(lc);

		if (pe->claim && !pe->replace)
			claims = lappend(claims, pe);
		else
			others = lappend(others, pe);
	}
	return list_concat(claims, others);
}

/*
 * Write the queued new entries, one bulk per index collection.
 */
void
idx_writer_write_new(IdxIndexWriter *w, mongoc_client_session_t *session)
{
	MemoryContext oldcxt;
	int			i;

	if (w->bulk_write)
	{
		write_new_bulk_write(w, session);
		return;
	}
	oldcxt = MemoryContextSwitchTo(w->batch_cxt);
	for (i = 0; i < w->nindexes; i++)
	{
		IndexQueue *q = &w->queues[i];
		mongoc_bulk_operation_t *bulk;
		ListCell   *lc;
		int		   *dups;
		int			ndups;
		int			d;
		bool		ok;
		Bitmapset  *upserted;
		mongoc_client_session_t *first;
		int			attempts;

		if (q->inserts == NIL)
			continue;
		CHECK_FOR_INTERRUPTS();
		q->inserts = claims_first(q->inserts);
		first = idx_xact_sends_first(session) ? session : NULL;
		attempts = 0;
		do
		{
			bulk = create_bulk(w, q, session, session != NULL);
			foreach(lc, q->inserts)
				bulk_add_entry(w, bulk, lfirst(lc));
			ok = run_bulk(w, q, &bulk, &dups, &ndups, &upserted, first,
						  &attempts);
		} while (!ok && ndups == 0);

		/* everything but the duplicates was written */
		foreach(lc, q->inserts)
		{
			PendingEntry *pe = lfirst(lc);
			int			op = foreach_current_index(lc);

			pe->written = true;
			for (d = 0; d < ndups; d++)
				if (dups[d] == op)
					pe->written = false;
			pe->created = pe->written &&
				((pe->claim && !pe->replace) || bms_is_member(op, upserted));
		}
		if (ok)
		{
			w->written += list_length(q->inserts);
			continue;
		}
		if (dups[0] < 0)
			report_unique_violation(q, committed_claim(w, q));
		for (d = 0; d < ndups; d++)
		{
			PendingEntry *pe = list_nth(q->inserts, dups[d]);

			if (w->mode == IDX_CONSISTENCY_TRANSACTION || !pe->claim)
				report_unique_violation(q, pe);
			/* an error takes the batch's entries back, in the statement's undo */
			w->take_back = true;
			resolve_claim(w, q, pe);
			w->take_back = false;
		}
		w->written += list_length(q->inserts);
	}
	MemoryContextSwitchTo(oldcxt);
}

/*
 * Does the writer have entries to take back: a claim of its batch could
 * not be resolved (write_entries), so its facts were never written?
 */
bool
idx_writer_must_take_back(IdxIndexWriter *w)
{
	return w != NULL && w->take_back;
}

/*
 * Take back the entries of the batch whose claim could not be resolved.
 * Called by the statement's undo, in a subtransaction of its own, never
 * while the error is being caught: removing them is remote work that can
 * fail too.
 */
void
idx_writer_take_back(IdxIndexWriter *w)
{
	MemoryContext oldcxt;

	if (!idx_writer_must_take_back(w))
		return;
	w->take_back = false;		/* never twice */
	oldcxt = MemoryContextSwitchTo(w->batch_cxt);
	unwrite_rows(w, -1, NULL);
	MemoryContextSwitchTo(oldcxt);
}

/*
 * Undo the entries of one row whose fact was not written.
 */
void
idx_writer_unwrite_row(IdxIndexWriter *w, int row,
					   mongoc_client_session_t *session)
{
	MemoryContext oldcxt = MemoryContextSwitchTo(w->batch_cxt);

	unwrite_rows(w, row, session);
	MemoryContextSwitchTo(oldcxt);
}

/*
 * Delete the queued old entries, then clear the queue.
 */
void
idx_writer_delete_old(IdxIndexWriter *w, mongoc_client_session_t *session)
{
	int			i;

	if (w->bulk_write)
		delete_old_bulk_write(w, session);
	else
	{
		for (i = 0; i < w->nindexes; i++)
		{
			CHECK_FOR_INTERRUPTS();
			delete_entries(w, &w->queues[i], w->queues[i].deletes, session);
		}
	}
	idx_writer_reset(w);
}

/*
 * Forget the queue.
 */
void
idx_writer_reset(IdxIndexWriter *w)
{
	int			i;

	for (i = 0; i < w->nindexes; i++)
	{
		w->queues[i].inserts = NIL;
		w->queues[i].deletes = NIL;
	}
	w->take_back = false;
	w->bw_nnew = 0;
	w->bw_ndeletes = 0;
	MemoryContextReset(w->batch_cxt);
}

/*
 * Write all index collections of a batch in one bulkWrite command per
 * step, instead of one bulk per collection (the server takes bulkWrite:
 * decided by the caller at executor start).
 */
void
idx_writer_set_bulk_write(IdxIndexWriter *w, bool on)
{
	w->bulk_write = on;
}

/*
 * Add the writer's pending new entries to "bw" (claims first in each index
 * collection, as write_new sends them), remembering which op is which
 * entry for idx_writer_bulk_failed() and idx_writer_bulk_done().
 */
void
idx_writer_add_new(IdxIndexWriter *w, IdxBulkWrite *bw)
{
	MemoryContext oldcxt = MemoryContextSwitchTo(w->batch_cxt);
	int			total = 0;
	int			i;

	for (i = 0; i < w->nindexes; i++)
	{
		w->queues[i].inserts = claims_first(w->queues[i].inserts);
		total += list_length(w->queues[i].inserts);
	}
	w->bw_first = idx_bulk_write_nops(bw);
	w->bw_marked = w->bw_first;
	w->bw_nnew = 0;
	w->bw_entries = palloc(sizeof(PendingEntry *) * Max(total, 1));
	w->bw_queues = palloc(sizeof(int) * Max(total, 1));
	for (i = 0; i < w->nindexes; i++)
	{
		IndexQueue *q = &w->queues[i];
		ListCell   *lc;

		foreach(lc, q->inserts)
		{
			PendingEntry *pe = lfirst(lc);

			bulk_write_entry(w, bw, q, pe);
			w->bw_entries[w->bw_nnew] = pe;
			w->bw_queues[w->bw_nnew++] = i;
		}
	}
	MemoryContextSwitchTo(oldcxt);
}

/*
 * Add the deletions of the writer's pending old entries to "bw".
 */
void
idx_writer_add_old(IdxIndexWriter *w, IdxBulkWrite *bw)
{
	int			i;

	w->bw_ndeletes = 0;
	for (i = 0; i < w->nindexes; i++)
	{
		IndexQueue *q = &w->queues[i];
		ListCell   *lc;

		foreach(lc, q->deletes)
		{
			idx_bulk_write_delete(bw, w->info->database, q->def->collection,
								  lfirst(lc), false);
			w->bw_ndeletes++;
		}
	}
}

/*
 * Mark the new entries of ops before "upto" as written (executed by an
 * ordered bulkWrite); inserted claims were created by it, upserted entries
 * may have replaced one that was there (errorsOnly replies do not say), so
 * an undo reads their fact before deleting them.
 */
static void
mark_written(IdxIndexWriter *w, int upto)
{
	for (; w->bw_marked < upto &&
		 w->bw_marked < w->bw_first + w->bw_nnew; w->bw_marked++)
	{
		PendingEntry *pe = w->bw_entries[w->bw_marked - w->bw_first];

		pe->written = true;
		pe->created = pe->claim && !pe->replace;
		w->written++;
	}
	w->bw_marked = Max(w->bw_marked, upto);
}

/*
 * An op of "bw" failed: if it is one of the writer's new entries, handle
 * it as write_new handles a failed entry (a duplicate claim is a unique
 * violation, or in ordered mode an orphan to take over), and return true:
 * the caller goes on with the op after it.  Returns false for other ops;
 * other errors of entries are raised.
 */
bool
idx_writer_bulk_failed(IdxIndexWriter *w, IdxBulkWrite *bw,
					   const IdxBulkWriteError *failed)
{
	int			k = failed->op - w->bw_first;
	PendingEntry *pe;
	IndexQueue *q;
	MemoryContext oldcxt;

	if (k < 0 || k >= w->bw_nnew)
		return false;
	mark_written(w, failed->op);
	pe = w->bw_entries[k];
	q = &w->queues[w->bw_queues[k]];
	if (failed->code != 11000)
		idx_bulk_write_report(bw, failed, writing_what(q));
	if (w->mode == IDX_CONSISTENCY_TRANSACTION || !pe->claim)
		report_unique_violation(q, pe);
	oldcxt = MemoryContextSwitchTo(w->batch_cxt);
	/* an error takes the batch's entries back, in the statement's undo */
	w->take_back = true;
	resolve_claim(w, q, pe);
	w->take_back = false;
	w->written++;
	w->bw_marked = failed->op + 1;
	MemoryContextSwitchTo(oldcxt);
	return true;
}

/*
 * The ops of "bw" before "upto" were executed: mark the new entries among
 * them written, and count the old entries deleted.
 */
void
idx_writer_bulk_done(IdxIndexWriter *w, int upto)
{
	mark_written(w, upto);
	w->deleted += w->bw_ndeletes;
	w->bw_ndeletes = 0;
}

/*
 * Run a bulkWrite of the writer's own ops to its end, handling the failed
 * new entries; any other failure is raised.
 */
static void
run_writer_bulk_write(IdxIndexWriter *w, IdxBulkWrite *bw,
					  mongoc_client_session_t *session)
{
	IdxBulkWriteError failed;
	int			from = 0;
	const IdxOp *what = idx_op(IDX_OP_WRITE_INDEXES, NULL, NULL);

	while (!idx_bulk_write_execute(bw, from, session, what, &failed))
	{
		if (failed.op >= idx_bulk_write_nops(bw) ||
			!idx_writer_bulk_failed(w, bw, &failed))
			idx_bulk_write_report(bw, &failed, what);
		from = failed.op + 1;
	}
	idx_writer_bulk_done(w, idx_bulk_write_nops(bw));
}

/*
 * write_new with bulkWrite: every new entry in one command.
 */
static void
write_new_bulk_write(IdxIndexWriter *w, mongoc_client_session_t *session)
{
	IdxBulkWrite *bw;
	MemoryContext oldcxt = MemoryContextSwitchTo(w->batch_cxt);

	bw = idx_bulk_write_create(w->client, w->servername);
	idx_writer_add_new(w, bw);
	if (idx_bulk_write_nops(bw) > 0)
		run_writer_bulk_write(w, bw, session);
	MemoryContextSwitchTo(oldcxt);
}

/*
 * delete_old with bulkWrite: every old entry in one command.
 */
static void
delete_old_bulk_write(IdxIndexWriter *w, mongoc_client_session_t *session)
{
	IdxBulkWrite *bw;
	MemoryContext oldcxt = MemoryContextSwitchTo(w->batch_cxt);

	bw = idx_bulk_write_create(w->client, w->servername);
	w->bw_nnew = 0;
	idx_writer_add_old(w, bw);
	if (idx_bulk_write_nops(bw) > 0)
		run_writer_bulk_write(w, bw, session);
	MemoryContextSwitchTo(oldcxt);
}
