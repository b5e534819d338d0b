/*-------------------------------------------------------------------------
 *
 * index_build.c
 *		  Filling a new index collection from the facts of its table.
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/index/index_build.c
 *
 * The build reads the fact collection with one find (projection: _id and
 * the key and included columns; batchSize = fetch_size), converts each
 * document to the table's row with the scan's conversion rules, computes
 * its entries (index_entry.c) and inserts them with ordered bulk writes
 * of IDX_BUILD_BATCH entries.  Entries are inserted, never upserted: in a
 * unique index a second fact with the same key collides with the first in
 * the index collection's _id index (error 11000), and the build fails with
 * a unique violation whose DETAIL is built from our own key values.
 *
 * Progress is reported in pg_stat_progress_create_index (tuples_total from
 * a metadata count of the facts, tuples_done per bulk write).  The number
 * of distinct keys is counted exactly for unique indexes (one per entry)
 * and estimated with a HyperLogLog sketch of the key BSON otherwise.
 *
 * The cluster time a new index's change stream starts from, noted before
 * the build reads the facts (idx_cluster_time_now()), is here too: both
 * create_index and the online builds (index_online.c) take it.
 *
 * libmongoc objects (collections, cursor, bulk operation) belong to the
 * memory context they were made in (handle.h): the build releases them
 * when done, and an error or cancel releases them with the context.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <math.h>

#include "access/sysattr.h"
#include "access/table.h"
#include "commands/progress.h"
#include "common/hashfn.h"
#include "lib/hyperloglog.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "utils/memutils.h"
#include "utils/rel.h"

#include "core/connection.h"
#include "core/convert.h"
#include "core/deparse.h"
#include "core/handle.h"
#include "core/mongoc_compat.h"
#include "core/protocol_read.h"
#include "index/index_ddl.h"
#include "index/index_entry.h"

/* Entries per bulk write */
#define IDX_BUILD_BATCH		1000

/* Register width of the distinct-key sketch (2^12 registers, ~1.6% error) */
#define IDX_HLL_BWIDTH		12

/*
 * State of one build.
 */
typedef struct BuildState
{
	const IdxIndexDef *def;
	const IdxTableInfo *info;
	mongoc_client_t *client;
	const char *servername;
	const IdxOp *what;		/* for error messages */
	IdxRowConv *rowconv;
	Datum	   *values;			/* one fact's row */
	bool	   *nulls;

	/* libmongoc objects, owned by memory contexts (handle.h) */
	mongoc_collection_t *facts;
	mongoc_collection_t *index;
	mongoc_cursor_t *cursor;
	mongoc_bulk_operation_t *bulk;	/* in batch_cxt */
	IdxHandle  *owned_facts;
	IdxHandle  *owned_index;
	IdxHandle  *owned_cursor;
	IdxHandle  *owned_bulk;

	/* the current bulk: key values of each entry, for error messages */
	MemoryContext batch_cxt;
	int			nbatch;
	int			batch_alloc;
	Datum	  **batch_keyvalues;
	bool	  **batch_keynulls;

	int64		facts_done;
	int64		entries;
	hyperLogLogState distinct;	/* non-unique indexes only */
} BuildState;

/*
 * Start the find over all facts.
 */
static void
open_fact_cursor(BuildState *st, Bitmapset *attrs)
{
	bson_t	   *filter = bson_new();
	IdxHandle  *owned_filter = idx_own_bson(filter);
	bson_t	   *opts = bson_new();
	IdxHandle  *owned_opts = idx_own_bson(opts);
	bson_t		child;

	idx_check_append(BSON_APPEND_DOCUMENT_BEGIN(opts, "projection", &child));
	idx_build_projection(&child, st->info, attrs);
	idx_check_append(bson_append_document_end(opts, &child));
	idx_check_append(BSON_APPEND_INT32(opts, "batchSize", st->info->fetch_size));

	st->facts = mongoc_client_get_collection(st->client, st->info->database,
											 st->info->collection);
	st->owned_facts = idx_own_collection(st->facts);
	st->cursor = mongoc_collection_find_with_opts(st->facts, filter, opts,
												  idx_primary_read_prefs());
	st->owned_cursor = idx_own_cursor(st->cursor);
	idx_release(owned_opts);
	idx_release(owned_filter);
}

/*
 * Remember the key values of the entry just added to the bulk.
 */
static void
remember_keys(BuildState *st, Datum *keyvalues, bool *keynulls)
{
	if (st->nbatch >= st->batch_alloc)
	{
		MemoryContext oldcxt = MemoryContextSwitchTo(st->batch_cxt);

		if (st->batch_alloc == 0)
		{
			st->batch_alloc = IDX_BUILD_BATCH;
			st->batch_keyvalues = palloc(sizeof(Datum *) * st->batch_alloc);
			st->batch_keynulls = palloc(sizeof(bool *) * st->batch_alloc);
		}
		else
		{
			st->batch_alloc *= 2;
			st->batch_keyvalues = repalloc(st->batch_keyvalues,
										   sizeof(Datum *) * st->batch_alloc);
			st->batch_keynulls = repalloc(st->batch_keynulls,
										  sizeof(bool *) * st->batch_alloc);
		}
		MemoryContextSwitchTo(oldcxt);
	}
	st->batch_keyvalues[st->nbatch] = keyvalues;
	st->batch_keynulls[st->nbatch] = keynulls;
	st->nbatch++;
}

/*
 * Add one full key to the distinct-key sketch.
 */
static void
count_distinct(BuildState *st, const Datum *keyvalues, const bool *keynulls)
{
	bson_t	   *key = bson_new();
	IdxHandle  *owned = idx_own_bson(key);
	int			k;

	for (k = 0; k < st->def->nkeys; k++)
		idx_append_key_value(key, idx_key_field(k), keyvalues[k],
							 st->def->keys[k].keytype, keynulls[k]);
	addHyperLogLog(&st->distinct,
				   hash_bytes(bson_get_data(key), (int) key->len));
	idx_release(owned);
}

/*
 * Queue one entry document in the current bulk write.
 */
static void
queue_entry(BuildState *st, bson_t *entry)
{
	bson_error_t error;
	bool		ok;

	if (st->bulk == NULL)
	{
		bson_t		opts = BSON_INITIALIZER;

		idx_check_append(BSON_APPEND_BOOL(&opts, "ordered", true));
		st->bulk = mongoc_collection_create_bulk_operation_with_opts(st->index,
																	 &opts);
		st->owned_bulk = idx_own(st->bulk, (void (*) (void *))
								 mongoc_bulk_operation_destroy);
		bson_destroy(&opts);
	}
	ok = mongoc_bulk_operation_insert_with_opts(st->bulk, entry, NULL, &error);
	bson_destroy(entry);
	if (!ok)
		idx_report_error(&error, st->servername, st->what);
}

/*
 * Compute and queue the entries of one fact document.
 */
static void
add_fact(BuildState *st, const bson_t *doc)
{
	const IdxIndexDef *def = st->def;
	MemoryContext oldcxt = MemoryContextSwitchTo(st->batch_cxt);
	bson_iter_t iter;
	const bson_value_t *fact_id;
	Datum	   *keyvalues;
	bool	   *keynulls;
	int			n;
	int			e;

	if (!bson_iter_init_find(&iter, doc, "_id"))
		ereport(ERROR,
				(errcode(ERRCODE_FDW_ERROR),
				 errmsg("document without _id in collection \"%s\"",
						st->info->collection)));
	fact_id = bson_iter_value(&iter);

	idx_document_to_row(st->rowconv, doc, st->values, st->nulls);
	n = idx_compute_keys(def, st->values, st->nulls, &keyvalues, &keynulls);
	for (e = 0; e < n; e++)
	{
		Datum	   *kv = keyvalues + e * def->nkeys;
		bool	   *kn = keynulls + e * def->nkeys;

		queue_entry(st, idx_make_entry(def, kv, kn, fact_id,
									   st->values, st->nulls));
		remember_keys(st, kv, kn);
		if (!def->unique)
			count_distinct(st, kv, kn);
	}
	st->facts_done++;
	MemoryContextSwitchTo(oldcxt);
}

/*
 * Raise the error of a failed bulk write.  A duplicate key in a unique
 * index becomes a unique violation described from the key values we
 * inserted (writeErrors[0].index says which); anything else is reported
 * with the server's code and message.  Destroys "reply".
 */
static void
report_bulk_error(BuildState *st, bson_t *reply, const bson_error_t *error)
{
	bson_error_t copy = *error;
	bson_iter_t iter;
	bson_iter_t werr;
	int64		index = -1;

	if (bson_iter_init_find(&iter, reply, "writeErrors") &&
		BSON_ITER_HOLDS_ARRAY(&iter) && bson_iter_recurse(&iter, &werr) &&
		bson_iter_next(&werr) && BSON_ITER_HOLDS_DOCUMENT(&werr))
	{
		bson_iter_t field;

		if (bson_iter_recurse(&werr, &field) &&
			bson_iter_find(&field, "index") && BSON_ITER_HOLDS_NUMBER(&field))
			index = bson_iter_as_int64(&field);
		if (bson_iter_recurse(&werr, &field) &&
			bson_iter_find(&field, "code") && BSON_ITER_HOLDS_NUMBER(&field))
		{
			copy.domain = MONGOC_ERROR_SERVER;
			copy.code = (uint32) bson_iter_as_int64(&field);
			if (bson_iter_recurse(&werr, &field) &&
				bson_iter_find(&field, "errmsg") &&
				BSON_ITER_HOLDS_UTF8(&field))
				strlcpy(copy.message, bson_iter_utf8(&field, NULL),
						sizeof(copy.message));
		}
	}
	bson_destroy(reply);

	if (copy.domain == MONGOC_ERROR_SERVER && copy.code == 11000 &&
		st->def->unique && index >= 0 && index < st->nbatch)
		ereport(ERROR,
				(errcode(ERRCODE_UNIQUE_VIOLATION),
				 errmsg("could not create unique index \"%s\"", st->def->name),
				 idx_errdetail_key_duplicated(idx_key_description(st->def,
																  st->batch_keyvalues[index],
																  st->batch_keynulls[index]))));
	idx_report_error(&copy, st->servername, st->what);
}

/*
 * Send the queued entries, then forget them.
 */
static void
flush_batch(BuildState *st)
{
	if (st->bulk != NULL)
	{
		bson_t		reply;
		bson_error_t error;

		if (!mongoc_bulk_operation_execute(st->bulk, &reply, &error))
			report_bulk_error(st, &reply, &error);
		bson_destroy(&reply);
		idx_release(st->owned_bulk);
		st->bulk = NULL;
		st->entries += st->nbatch;
		CHECK_FOR_INTERRUPTS(); /* a cancel that came during the write */
	}
	st->nbatch = 0;
	st->batch_alloc = 0;
	MemoryContextReset(st->batch_cxt);
	pgstat_progress_update_param(PROGRESS_CREATEIDX_TUPLES_DONE,
								 st->facts_done);
}

/*
 * Read all facts and fill the index collection.
 */
static void
run_build(BuildState *st)
{
	const bson_t *doc;
	bson_error_t error;
	const bson_t *reply;

	while (mongoc_cursor_next(st->cursor, &doc))
	{
		CHECK_FOR_INTERRUPTS();
		add_fact(st, doc);
		if (st->nbatch >= IDX_BUILD_BATCH)
			flush_batch(st);
	}
	if (mongoc_cursor_error_document(st->cursor, &error, &reply))
		idx_report_reply_error(reply, &error, st->servername,
							   idx_op(IDX_OP_READ, st->info->collection,
									  st->info->database));
	flush_batch(st);
}

/*
 * Build the index collection of "def" (see index_ddl.h).
 */
void
idx_build_index(const IdxIndexDef *def, const IdxTableInfo *info,
				mongoc_client_t *client, const char *servername,
				IdxBuildResult *result)
{
	BuildState	st;
	Relation	rel;
	Bitmapset  *attrs = idx_entry_columns(def);
	const int	progress_index[] = {
		PROGRESS_CREATEIDX_COMMAND,
		PROGRESS_CREATEIDX_PHASE,
		PROGRESS_CREATEIDX_TUPLES_TOTAL,
		PROGRESS_CREATEIDX_TUPLES_DONE
	};
	int64		progress_vals[4];

	memset(&st, 0, sizeof(st));
	st.def = def;
	st.info = info;
	st.client = client;
	st.servername = servername;
	st.what = idx_op(IDX_OP_BUILD_INDEX, def->collection, def->database);

	rel = table_open(def->relid, NoLock);	/* the caller holds a lock */
	st.rowconv = idx_row_conv_create(RelationGetDescr(rel), info, attrs);
	st.values = (Datum *) palloc0(sizeof(Datum) * Max(st.rowconv->natts, 1));
	st.nulls = (bool *) palloc0(sizeof(bool) * Max(st.rowconv->natts, 1));
	table_close(rel, NoLock);

	if (!def->unique)
		initHyperLogLog(&st.distinct, IDX_HLL_BWIDTH);
	st.batch_cxt = AllocSetContextCreate(CurrentMemoryContext,
										 "idxtable_fdw index build",
										 ALLOCSET_DEFAULT_SIZES);

	pgstat_progress_start_command(PROGRESS_COMMAND_CREATE_INDEX, def->relid);
	PG_TRY();
	{
		progress_vals[0] = PROGRESS_CREATEIDX_COMMAND_CREATE;
		progress_vals[1] = PROGRESS_CREATEIDX_PHASE_BUILD;
		progress_vals[2] = idx_count_documents(client, servername,
											   info->database,
											   info->collection);
		progress_vals[3] = 0;
		pgstat_progress_update_multi_param(4, progress_index, progress_vals);

		st.index = mongoc_client_get_collection(client, def->database,
												def->collection);
		st.owned_index = idx_own_collection(st.index);
		open_fact_cursor(&st, attrs);
		run_build(&st);
	}
	PG_FINALLY();
	{
		pgstat_progress_end_command();
	}
	PG_END_TRY();
	idx_release(st.owned_cursor);
	idx_release(st.owned_index);
	idx_release(st.owned_facts);
	MemoryContextDelete(st.batch_cxt);

	result->entries = st.entries;
	if (def->unique)
		result->distinct_keys = st.entries;
	else
	{
		double		estimate = estimateHyperLogLog(&st.distinct);

		result->distinct_keys = (int64) rint(estimate);
		result->distinct_keys = Min(result->distinct_keys, st.entries);
		if (st.entries > 0)
			result->distinct_keys = Max(result->distinct_keys, 1);
		freeHyperLogLog(&st.distinct);
	}
}

/*
 * MongoDB's cluster time now (see index_ddl.h).  The reply of any command
 * to a replica set member or mongos carries "operationTime", the time of
 * the latest operation the server had applied when it answered; a change
 * stream started at it (startAtOperationTime, inclusive) sees every write
 * that was not yet visible to a read started after the ping.
 */
uint64
idx_cluster_time_now(mongoc_client_t *client, const char *servername)
{
	bson_t	   *command = bson_new();
	IdxHandle  *owned = idx_own_bson(command);
	bson_t		reply;
	bson_iter_t iter;
	uint32		seconds;
	uint32		increment;
	uint64		result = 0;

	idx_check_append(BSON_APPEND_INT32(command, "ping", 1));
	idx_run_command(client, servername, "admin", command, &reply,
					idx_op(IDX_OP_CLUSTER_TIME, NULL, NULL));
	idx_release(owned);
	if (bson_iter_init_find(&iter, &reply, "operationTime") &&
		BSON_ITER_HOLDS_TIMESTAMP(&iter))
	{
		bson_iter_timestamp(&iter, &seconds, &increment);
		result = ((uint64) seconds << 32) | (uint64) increment;
	}
	bson_destroy(&reply);
	return result;
}
