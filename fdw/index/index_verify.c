/*-------------------------------------------------------------------------
 *
 * index_verify.c
 *		  idxtable.verify_index() and idxtable.repair_index(): compare an
 *		  index collection with the facts of its table, and fix it.
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/index/index_verify.c
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
 *	   The per-batch core of this pass is index_repair_batch.c's, which
 *	   the change-stream applier calls for the facts a stream names.
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
 * "conflicts" counts the facts whose unique key's claim another fact
 * holds that has the key too: two facts share a unique key, which a client
 * writing straight into MongoDB can do.  Such a fact's claim is not
 * "missing"; the claim stays its holder's.
 *
 * repair_index fixes what it finds, batch by batch: a missing entry is
 * written (upserted by its _id); a unique key's claim held by another fact
 * is taken over if that fact lacks the key, and is a conflict left in
 * place if it has it (counted, recorded in idxtable.conflicts, whose rows
 * for the index the repair replaces, and reported in a WARNING; the other
 * entries of both facts are repaired as usual); a stale entry is replaced
 * or deleted and an orphan deleted, each by the filter {_id, id} that
 * matches the entry only as it was read.  Every fix is complete by itself,
 * so a cancelled or failed repair leaves the index no worse than it found
 * it.
 *
 * rebuild_index and create_index_concurrently (index_online.c) fill an
 * index with the same passes, repairing, and "settle" each batch of pass
 * 1: its facts are read again after its fixes, and those that changed
 * meanwhile (a write in flight, whose entries the fixes may have undone)
 * are repaired again, until none did.  A unique claim that a write in
 * ordered mode still running may have made before its fact is left alone
 * in both passes (index_claims.h): the write's fact, or its undo, follows
 * in the stream the build applies next.
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

#include "access/relation.h"
#include "access/sysattr.h"
#include "access/xact.h"
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
#include "index/index_conflict.h"
#include "index/index_ddl.h"
#include "index/index_entry.h"
#include "index/index_repair.h"

/* Rounds of settling a batch of a build whose facts keep changing */
#define IDX_SETTLE_ROUNDS	10

PG_FUNCTION_INFO_V1(idxtable_verify_index);
PG_FUNCTION_INFO_V1(idxtable_repair_index);

/* ----------------------------------------------------------------
 *		Pass 1: facts -> entries
 * ----------------------------------------------------------------
 */

/*
 * Report the progress of a batch of n facts.
 */
static void
fact_batch_done(IdxRepairState *st, int n)
{
	st->done += n;
	pgstat_progress_update_param(PROGRESS_CREATEIDX_TUPLES_DONE, st->done);
}

/*
 * The facts named by keys[0..n-1] ({"v": _id} each) as they are now, read
 * with one find: an array parallel to keys, in "cxt", with NULL for a fact
 * that is gone.
 */
static bson_t **
read_versions(IdxRepairState *st, bson_t **keys, int n, MemoryContext cxt)
{
	bson_t		projection = BSON_INITIALIZER;
	bson_t	  **result = MemoryContextAllocZero(cxt, sizeof(bson_t *) * Max(n, 1));
	MemoryContext oldcxt = MemoryContextSwitchTo(st->batch_cxt);
	int			i;

	idx_repair_projection(st, &projection);
	idx_repair_lookup(st, st->facts, "_id", keys, n, &projection, false,
					  idx_repair_facts_what(st));
	bson_destroy(&projection);
	MemoryContextSwitchTo(cxt);
	for (i = 0; i < n; i++)
	{
		ReadDoc    *doc = idx_repair_find_doc(st, keys[i]);

		if (doc != NULL)
			result[i] = idx_bson_pcopy(doc->doc);
	}
	st->ndocs = 0;
	MemoryContextReset(st->batch_cxt);
	MemoryContextSwitchTo(oldcxt);
	return result;
}

/*
 * Are two versions of a fact (NULL: gone), read with the same projection,
 * the same?
 */
static bool
same_version(const bson_t *a, const bson_t *b)
{
	if (a == NULL || b == NULL)
		return a == b;
	return a->len == b->len &&
		memcmp(bson_get_data(a), bson_get_data(b), a->len) == 0;
}

/*
 * The _ids inside keys[0..n-1] ({"v": _id} each).
 */
static bson_value_t *
key_values(bson_t **keys, int n)
{
	bson_value_t *ids = palloc(sizeof(bson_value_t) * Max(n, 1));
	int			i;

	for (i = 0; i < n; i++)
	{
		bson_iter_t iter;

		if (!bson_iter_init_find(&iter, keys[i], "v"))
			elog(ERROR, "fact key without its value");
		ids[i] = *bson_iter_value(&iter);
	}
	return ids;
}

/*
 * After a batch of a build's pass was repaired: read its facts again, and
 * repair again those that changed meanwhile (or went), until none did.  A
 * write that ran between the batch's read of a fact and its fixes may have
 * had its entries undone by them; its fact then differs from the version
 * the batch used.  A write whose fact is unchanged once the fixes are made
 * comes after them, and brings its own entries.  In "cxt" (reset by the
 * caller).
 */
static void
settle_batch(IdxRepairState *st, bson_t **facts, int n, MemoryContext cxt)
{
	MemoryContext oldcxt = MemoryContextSwitchTo(cxt);
	bson_t	  **keys = palloc(sizeof(bson_t *) * Max(n, 1));
	bson_t	  **before = facts;
	int			round;
	int			i;

	for (i = 0; i < n; i++)
		keys[i] = idx_repair_wrap_field(facts[i], "_id");
	for (round = 0; n > 0; round++)
	{
		bson_t	  **after = read_versions(st, keys, n, cxt);
		int			nchanged = 0;

		for (i = 0; i < n; i++)
			if (!same_version(before[i], after[i]))
			{
				keys[nchanged] = keys[i];
				after[nchanged] = after[i];
				nchanged++;
			}
		if (nchanged > 0 && round >= IDX_SETTLE_ROUNDS)
			ereport(ERROR,
					(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
					 errmsg("could not build index \"%s\": its facts kept changing while they were read",
							st->def->name),
					 errhint("Retry when fewer writes go to the table.")));
		if (nchanged > 0)
			(void) idx_repair_facts(st, key_values(keys, nchanged), nchanged);
		before = after;
		n = nchanged;
	}
	MemoryContextSwitchTo(oldcxt);
}

/*
 * Repair (or check) one batch of facts read by the pass, at "read_at" or
 * later; with a settle context, settle it (see settle_batch).
 */
static void
fact_batch(IdxRepairState *st, bson_t **facts, int n, int64 read_at,
		   MemoryContext settle)
{
	st->facts_read_at = read_at;
	fact_batch_done(st, idx_repair_fact_docs(st, facts, n));
	if (settle != NULL)
	{
		settle_batch(st, facts, n, settle);
		MemoryContextReset(settle);
	}
}

/*
 * Pass 1: every fact against its entries.  The facts are streamed and
 * handed, a batch at a time, to the core the change-stream applier uses
 * (index_repair_batch.c).  With "settle", each batch is settled against writes
 * that run meanwhile (a build that does not block writers).
 */
static void
check_facts(IdxRepairState *st, bool settle)
{
	bson_t		filter = BSON_INITIALIZER;
	bson_t		projection = BSON_INITIALIZER;
	bson_t	  **facts;
	const bson_t *doc;
	int			n = 0;
	MemoryContext settle_cxt = NULL;
	MemoryContext oldcxt;
	int64		opened = idx_claim_now_ms();	/* no fact read before */

	idx_repair_projection(st, &projection);
	st->cursor = idx_repair_open_stream(st, st->facts, &filter, &projection);
	bson_destroy(&projection);
	bson_destroy(&filter);

	facts = MemoryContextAlloc(CurrentMemoryContext,
							   sizeof(bson_t *) * IDX_VERIFY_BATCH);
	if (settle)
		settle_cxt = AllocSetContextCreate(CurrentMemoryContext,
										   "idxtable_fdw settle batch",
										   ALLOCSET_DEFAULT_SIZES);
	/* the facts of a batch to be settled must outlive its repair */
	oldcxt = MemoryContextSwitchTo(settle ? settle_cxt : st->batch_cxt);
	while (mongoc_cursor_next(st->cursor, &doc))
	{
		CHECK_FOR_INTERRUPTS();
		facts[n++] = idx_bson_pcopy(doc);
		if (n >= IDX_VERIFY_BATCH)
		{
			fact_batch(st, facts, n, opened, settle_cxt);
			n = 0;
		}
	}
	idx_repair_check_cursor(st, st->cursor, idx_repair_facts_what(st));
	fact_batch(st, facts, n, opened, settle_cxt);
	MemoryContextSwitchTo(oldcxt);
	if (settle_cxt != NULL)
		MemoryContextDelete(settle_cxt);
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
check_entry_batch(IdxRepairState *st, ReadDoc *entries, int n)
{
	bson_t	  **ids = palloc(sizeof(bson_t *) * Max(n, 1));
	bson_t		projection = BSON_INITIALIZER;
	int			nids = 0;
	int			i;

	for (i = 0; i < n; i++)
		if (entries[i].key != NULL)
			ids[nids++] = entries[i].key;
	idx_check_append(BSON_APPEND_INT32(&projection, "_id", 1));
	idx_repair_lookup(st, st->facts, "_id", ids, nids, &projection, false,
					  idx_repair_facts_what(st));
	bson_destroy(&projection);

	for (i = 0; i < n; i++)
	{
		if (entries[i].key != NULL && idx_repair_find_doc(st, entries[i].key))
			continue;
		if (idx_repair_spare_claim(st, entries[i].doc))
			continue;			/* its write may not have written the fact */
		st->counts.orphan++;
		if (st->repair)
			idx_repair_queue_delete(st, entries[i].doc);
	}
	idx_repair_flush(st);

	st->done += n;
	st->ndocs = 0;
	MemoryContextReset(st->batch_cxt);
	pgstat_progress_update_param(PROGRESS_CREATEIDX_TUPLES_DONE, st->done);
}

/*
 * Pass 2: every entry against the existence of its fact.
 */
static void
check_entries(IdxRepairState *st)
{
	bson_t		filter = BSON_INITIALIZER;
	bson_t		projection = BSON_INITIALIZER;
	ReadDoc    *entries;
	const bson_t *doc;
	int			n = 0;
	MemoryContext oldcxt;

	idx_check_append(BSON_APPEND_INT32(&projection, IDX_ENTRY_FACT_ID, 1));
	idx_check_append(BSON_APPEND_INT32(&projection, IDX_ENTRY_CLAIM_TIME, 1));
	st->cursor = idx_repair_open_stream(st, st->index, &filter, &projection);
	bson_destroy(&projection);
	bson_destroy(&filter);

	entries = MemoryContextAlloc(CurrentMemoryContext,
								 sizeof(ReadDoc) * IDX_VERIFY_BATCH);
	oldcxt = MemoryContextSwitchTo(st->batch_cxt);
	while (mongoc_cursor_next(st->cursor, &doc))
	{
		CHECK_FOR_INTERRUPTS();
		entries[n].doc = idx_bson_pcopy(doc);
		entries[n].key = idx_repair_wrap_field(entries[n].doc,
											   IDX_ENTRY_FACT_ID);
		n++;
		if (n >= IDX_VERIFY_BATCH)
		{
			check_entry_batch(st, entries, n);
			n = 0;
		}
	}
	idx_repair_check_cursor(st, st->cursor, idx_repair_index_what(st));
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
 * Start a phase of the progress report of "command".
 */
static void
progress_phase(IdxRepairState *st, int command, int phase,
			   const char *collection)
{
	const int	index[] = {
		PROGRESS_CREATEIDX_COMMAND,
		PROGRESS_CREATEIDX_PHASE,
		PROGRESS_CREATEIDX_TUPLES_TOTAL,
		PROGRESS_CREATEIDX_TUPLES_DONE
	};
	int64		vals[4];

	vals[0] = command;
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
report_unconvertible(IdxRepairState *st)
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
 * A unique key conflict met by the build of a new index: a duplicate key,
 * which fails the build as it fails create_index (index_online.c names the
 * index in the message).
 */
static void
conflict_fails_build(IdxRepairState *st, const char *key_desc,
					 const bson_value_t *fact_id,
					 const bson_value_t *holder_id, void *arg)
{
	ereport(ERROR,
			(errcode(ERRCODE_UNIQUE_VIOLATION),
			 errmsg("could not repair unique index \"%s\"", st->def->name),
			 idx_errdetail_key_duplicated(key_desc),
			 errhint("Change or delete one of the rows with this key, then repair the index again.")));
}

/*
 * WARNING about the unique key conflicts repair left in place.
 */
static void
report_conflicts(IdxRepairState *st)
{
	int64		n = st->counts.conflicts;

	if (n == 0)
		return;
	ereport(WARNING,
			(errcode(ERRCODE_UNIQUE_VIOLATION),
			 errmsg_plural("%lld fact of collection \"%s\" has a key of unique index \"%s\" that another fact has too",
						   "%lld facts of collection \"%s\" have a key of unique index \"%s\" that another fact has too",
						   n, (long long) n, st->info->collection,
						   st->def->name),
			 errdetail("Each key stays claimed by the fact that held it first; reads through the index find all of them.  The conflicts are listed in idxtable.conflicts."),
			 errhint("Change or delete one of the rows with each key, then repair the index again.")));
}

/*
 * Run both passes over index "def" of the foreign table "rel" (opened and
 * locked by the caller), repairing if "repair"; progress is reported as
 * "command" (PROGRESS_CREATEIDX_COMMAND_*), the first pass as phase
 * "fact_phase".  Used by verify_index and repair_index, and by
 * rebuild_index and create_index_concurrently to fill an index, which
 * "settle" the batches of the first pass against writes that run meanwhile.
 */
void
idx_verify_run(IdxIndexDef *def, Relation rel, bool repair, int command,
			   int fact_phase, bool settle, VerifyCounts *counts,
			   List **spared)
{
	IdxRepairState st;
	ForeignServer *server;
	IdxTableInfo *info;
	mongoc_client_t *client;

	info = idx_get_table_info(def->relid);
	client = idx_get_client_for_rel(def->relid, InvalidOid, &server);
	idx_repair_begin(&st, def, info, RelationGetDescr(rel), client,
					 server->servername, repair);
	st.spare_in_flight = settle;	/* writers are not locked out */
	if (repair && command == PROGRESS_CREATEIDX_COMMAND_CREATE_CONCURRENTLY)
		st.on_conflict = conflict_fails_build;
	else if (repair)
	{
		idx_conflict_forget(def->name);
		st.on_conflict = idx_conflict_callback;
	}

	pgstat_progress_start_command(PROGRESS_COMMAND_CREATE_INDEX,
								  st.def->relid);
	PG_TRY();
	{
		progress_phase(&st, command, fact_phase, st.info->collection);
		check_facts(&st, settle);
		progress_phase(&st, command,
					   PROGRESS_CREATEIDX_PHASE_VALIDATE_IDXSCAN,
					   st.def->collection);
		check_entries(&st);
	}
	PG_FINALLY();
	{
		idx_repair_release(&st);
		pgstat_progress_end_command();
	}
	PG_END_TRY();
	MemoryContextDelete(st.batch_cxt);
	report_unconvertible(&st);
	if (repair)
		report_conflicts(&st);
	*counts = st.counts;
	if (spared != NULL)
		*spared = st.spared;
}

/*
 * verify_index and repair_index of index "name".
 */
static void
verify_index(const char *name, bool repair, VerifyCounts *counts)
{
	Relation	rel;
	IdxIndexDef *def;
	ForeignServer *server;
	mongoc_client_t *client;

	def = open_index(name, repair, &rel);
	client = idx_get_client_for_rel(def->relid, InvalidOid, &server);
	if (repair && idx_xact_client_busy(client))
		ereport(ERROR,
				(errcode(ERRCODE_ACTIVE_SQL_TRANSACTION),
				 errmsg("repair_index cannot run in a transaction that has written to server \"%s\"",
						server->servername),
				 errhint("Run it in a transaction of its own.")));
	idx_verify_run(def, rel, repair, PROGRESS_CREATEIDX_COMMAND_REINDEX,
				   PROGRESS_CREATEIDX_PHASE_VALIDATE_TABLESCAN, false, counts,
				   NULL);
	/*
	 * Entries right under the collations' current versions: not stale (a
	 * read-only transaction, a standby's say, verifies without recording).
	 */
	if (repair || (counts->missing == 0 && counts->orphan == 0 &&
				   counts->stale == 0 && !XactReadOnly))
		idx_refresh_collation_versions(def);
	relation_close(rel, NoLock);
}

/*
 * Return the counts as the function's one row.
 */
static Datum
return_counts(FunctionCallInfo fcinfo, const VerifyCounts *counts)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	Datum		values[6];
	bool		nulls[6] = {false, false, false, false, false, false};

	InitMaterializedSRF(fcinfo, 0);
	values[0] = Int64GetDatum(counts->checked);
	values[1] = Int64GetDatum(counts->missing);
	values[2] = Int64GetDatum(counts->orphan);
	values[3] = Int64GetDatum(counts->stale);
	values[4] = Int64GetDatum(counts->unconvertible);
	values[5] = Int64GetDatum(counts->conflicts);
	tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	return (Datum) 0;
}

/*
 * idxtable.verify_index(name): what is missing, orphaned or stale, and
 * the unique key conflicts.
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
