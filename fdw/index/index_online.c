/*-------------------------------------------------------------------------
 *
 * index_online.c
 *		  Building index tables without a gap and without blocking writers:
 *		  the cluster time a build starts from, idxtable.rebuild_index()
 *		  and the procedure idxtable.create_index_concurrently().
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/index/index_online.c
 *
 * Writers that do not go through this PostgreSQL cannot be locked out of
 * a build, so every build notes MongoDB's cluster time T (the
 * operationTime of a {ping: 1}) before it reads the facts, and records it
 * in index_defs.sync_from.  The change-stream applier re-applies every
 * change from T on to the index; applying a change twice changes nothing,
 * so a write the build saw, missed or saw half of is in the index once the
 * applier has passed it.  A server that reports no cluster time (a
 * standalone mongod) gives sync_from NULL: unknown.
 *
 * rebuild_index(name) fills an index again from all facts with the repair
 * passes of verify_index (index_verify.c, settled as below), under the
 * ShareLock that
 * repair_index takes (writes through PostgreSQL wait; the stream covers
 * the others), and marks it valid with sync_from = the time before the
 * pass.  It is how a 'stale' index (its stream could not resume) comes
 * back.
 *
 * create_index_concurrently is a procedure, as CREATE INDEX CONCURRENTLY
 * is a statement that commits between its phases:
 *	1. the definition is inserted as 'building' with sync_from, its index
 *	   collection created, and committed: from then on every write through
 *	   the FDW in any session maintains the index (index_write.c maintains
 *	   building indexes);
 *	2. it waits for the transactions that were writing to the table when
 *	   the definition committed (they may not have seen it), then fills the
 *	   index under ShareUpdateExclusiveLock, which writers through the FDW
 *	   (RowExclusiveLock) do not wait for.  The fill is the repair pass, not
 *	   create_index's inserts: entries that concurrent writes put in first
 *	   are compared and kept, never a duplicate-key error.  A write racing
 *	   with the batch that covers its fact could have its entries undone
 *	   by the batch's fixes (made from the fact as the batch read it), so
 *	   each batch is settled: its facts are read again after the fixes,
 *	   and those that changed are repaired again until none did
 *	   (index_verify.c).  Writes by other clients are also re-applied by
 *	   the applier from sync_from;
 *	3. the definition is committed 'valid'.
 * Each commit tells the sync workers (idx_note_index_change), so that the
 * applier follows the new index from its sync_from on.
 * If phase 2 fails (or is cancelled), the definition is committed 'failed'
 * and the error raised: the index collection stays until drop_index().
 * A session that dies in phase 2 leaves the definition 'building', which
 * drop_index() removes and rebuild_index() completes.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/relation.h"
#include "access/xact.h"
#include "commands/progress.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "foreign/foreign.h"
#include "miscadmin.h"
#include "nodes/parsenodes.h"
#include "pgstat.h"
#include "storage/lmgr.h"
#include "tcop/tcopprot.h"
#include "utils/builtins.h"
#include "utils/inval.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"

#include "core/connection.h"
#include "core/handle.h"
#include "core/mongoc_compat.h"
#include "core/xact.h"
#include "index/index_catalog.h"
#include "index/index_ddl.h"
#include "index/index_notify.h"
#include "index/index_repair.h"

PG_FUNCTION_INFO_V1(idxtable_rebuild_index);
PG_FUNCTION_INFO_V1(idxtable_create_index_concurrently);

/*
 * The definition "name" of the foreign table "rel" (if definition_id is
 * given, that definition, whatever its name now), which must not be
 * failed.
 */
static IdxIndexDef *
find_definition(Relation rel, const char *name, const char *definition_id)
{
	ListCell   *lc;

	foreach(lc, idx_get_indexes(RelationGetRelid(rel), InvalidOid))
	{
		IdxIndexDef *def = lfirst(lc);

		if (definition_id != NULL ?
			strcmp(def->definition_id, definition_id) != 0 :
			strcmp(def->name, name) != 0)
			continue;
		if (def->state == IDX_STATE_FAILED)
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("index \"%s\" has failed and cannot be rebuilt",
							name),
					 errhint("Drop the index with idxtable.drop_index() and create it again.")));
		return def;
	}
	ereport(ERROR,
			(errcode(ERRCODE_UNDEFINED_OBJECT),
			 errmsg("index \"%s\" does not exist", name)));
	return NULL;				/* keep compiler quiet */
}

/*
 * Fill index "def" of "rel" from all facts with the repair passes and
 * return the number of its entries.  Facts that do not convert are an
 * error, as they are for create_index: the index would lack them.
 */
static int64
fill_index(IdxIndexDef *def, Relation rel, int command)
{
	VerifyCounts counts;
	ForeignServer *server;
	mongoc_client_t *client;

	idx_verify_run(def, rel, true, command, PROGRESS_CREATEIDX_PHASE_BUILD,
				   true, &counts, NULL);
	if (counts.unconvertible > 0)
		ereport(ERROR,
				(errcode(ERRCODE_FDW_INVALID_DATA_TYPE),
				 errmsg("could not build index \"%s\": facts of its table could not be converted",
						def->name),
				 errhint("Correct or remove the facts named in the warning, then rebuild the index with idxtable.rebuild_index().")));
	client = idx_get_client_for_rel(def->relid, InvalidOid, &server);
	return idx_count_documents(client, server->servername, def->database,
							   def->collection);
}

/*
 * The statistics a filled index is marked valid with: the number of
 * distinct keys is exact for a unique index, kept from before otherwise
 * (ANALYZE renews it).
 */
static void
mark_filled(IdxIndexDef *def, int64 entries)
{
	IdxBuildResult result;

	result.entries = entries;
	if (def->unique)
		result.distinct_keys = entries;
	else if (def->distinct_keys >= 0)
		result.distinct_keys = Min((int64) def->distinct_keys, entries);
	else
		result.distinct_keys = -1;
	idx_mark_index_valid(def->name, &result);
}

/*
 * idxtable.rebuild_index(name): fill the index again from all facts and
 * mark it valid; returns its number of entries.
 */
Datum
idxtable_rebuild_index(PG_FUNCTION_ARGS)
{
	char	   *name = text_to_cstring(PG_GETARG_TEXT_PP(0));
	char	   *collection;
	Relation	rel;
	IdxIndexDef *def;
	ForeignServer *server;
	mongoc_client_t *client;
	uint64		sync_from;
	int64		entries;

	/* as repair_index: the owner only, checked before the lock */
	rel = idx_open_index_table(name, ShareLock, ACL_NO_RIGHTS, &collection);
	def = find_definition(rel, name, NULL);
	client = idx_get_client_for_rel(def->relid, InvalidOid, &server);
	if (idx_xact_client_busy(client))
		ereport(ERROR,
				(errcode(ERRCODE_ACTIVE_SQL_TRANSACTION),
				 errmsg("rebuild_index cannot run in a transaction that has written to server \"%s\"",
						server->servername),
				 errhint("Run it in a transaction of its own.")));

	sync_from = idx_cluster_time_now(client, server->servername);
	entries = fill_index(def, rel, PROGRESS_CREATEIDX_COMMAND_REINDEX);
	mark_filled(def, entries);
	idx_set_sync_from(name, sync_from);
	CacheInvalidateRelcacheByRelid(def->relid); /* replan queries */
	relation_close(rel, NoLock);
	idx_note_index_change(def->relid, true); /* sync_from moved */

	PG_RETURN_INT64(entries);
}


/* ----------------------------------------------------------------
 *		create_index_concurrently
 * ----------------------------------------------------------------
 */

/*
 * What the procedure carries from one transaction to the next (in a
 * memory context that outlives them).
 */
typedef struct OnlineBuild
{
	Oid			relid;
	char	   *name;
	char	   *definition_id;
	MemoryContext cxt;
} OnlineBuild;

/*
 * Refuse to run as part of a larger transaction: the procedure commits.
 */
static void
check_not_atomic(FunctionCallInfo fcinfo)
{
	CallContext *callcxt = (CallContext *) fcinfo->context;

	if (callcxt == NULL || !IsA(callcxt, CallContext) || callcxt->atomic)
		ereport(ERROR,
				(errcode(ERRCODE_ACTIVE_SQL_TRANSACTION),
				 errmsg("idxtable.create_index_concurrently cannot run inside a transaction block"),
				 errhint("Call it with CALL outside a transaction block, or use idxtable.create_index().")));
}

/*
 * Commit the procedure's transaction and start the next one.
 */
static void
commit_step(void)
{
	SPI_commit();
	SPI_start_transaction();
}

/*
 * Phase 2 in a subtransaction: wait for the writers that may not have
 * seen the definition, then fill the index with writers going on, and
 * mark it valid.
 */
static void
fill_concurrently(OnlineBuild *b)
{
	LOCKTAG		tag;
	Relation	rel;
	IdxIndexDef *def;
	int64		entries;

	pgstat_progress_start_command(PROGRESS_COMMAND_CREATE_INDEX, b->relid);
	pgstat_progress_update_param(PROGRESS_CREATEIDX_COMMAND,
								 PROGRESS_CREATEIDX_COMMAND_CREATE_CONCURRENTLY);
	pgstat_progress_update_param(PROGRESS_CREATEIDX_PHASE,
								 PROGRESS_CREATEIDX_PHASE_WAIT_1);
	SET_LOCKTAG_RELATION(tag, MyDatabaseId, b->relid);
	WaitForLockers(tag, ShareLock, true);
	pgstat_progress_end_command();

	rel = idx_open_table(b->relid, ShareUpdateExclusiveLock, ACL_NO_RIGHTS);
	def = find_definition(rel, b->name, b->definition_id);
	entries = fill_index(def, rel,
						 PROGRESS_CREATEIDX_COMMAND_CREATE_CONCURRENTLY);
	mark_filled(def, entries);
	CacheInvalidateRelcacheByRelid(b->relid);	/* replan queries */
	relation_close(rel, NoLock);
}

/*
 * A duplicate key found by the repair pass is reported as the failure of
 * the build it is (the DETAIL, naming the key, stays).
 */
static void
describe_unique_violation(ErrorData *edata, const char *name)
{
	edata->message = psprintf(_("could not create unique index \"%s\""),
							  name);
	edata->hint = pstrdup(_("Change or delete one of the rows with this key, then drop the index and create it again."));
}

/*
 * Phase 2 and 3: fill the index, commit it valid; on failure commit it
 * failed and raise the error.
 */
static void
build_and_commit(OnlineBuild *b)
{
	MemoryContext oldcxt = CurrentMemoryContext;
	ResourceOwner oldowner = CurrentResourceOwner;

	PushActiveSnapshot(GetTransactionSnapshot());
	BeginInternalSubTransaction(NULL);
	MemoryContextSwitchTo(oldcxt);
	PG_TRY();
	{
		fill_concurrently(b);
		ReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(oldcxt);
		CurrentResourceOwner = oldowner;
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		MemoryContextSwitchTo(b->cxt);
		edata = CopyErrorData();
		FlushErrorState();
		if (edata->sqlerrcode == ERRCODE_UNIQUE_VIOLATION)
			describe_unique_violation(edata, b->name);
		RollbackAndReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(oldcxt);
		CurrentResourceOwner = oldowner;

		idx_mark_index_failed(b->definition_id);
		idx_note_index_change(b->relid, false);
		PopActiveSnapshot();
		commit_step();
		ReThrowError(edata);
	}
	PG_END_TRY();
	idx_note_index_change(b->relid, false);
	PopActiveSnapshot();
	commit_step();
}

/*
 * CALL idxtable.create_index_concurrently(tbl, keys, include, is_unique,
 * name): create_index without blocking writes through the FDW (see the
 * file header).
 */
Datum
idxtable_create_index_concurrently(PG_FUNCTION_ARGS)
{
	OnlineBuild b;
	IdxNewIndex ni;
	MemoryContext oldcxt;

	check_not_atomic(fcinfo);
	if (SPI_connect_ext(SPI_OPT_NONATOMIC) != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	b.cxt = AllocSetContextCreate(PortalContext,
								  "idxtable_fdw online build",
								  ALLOCSET_SMALL_SIZES);

	/* phase 1: the definition, 'building', committed */
	idx_create_definition(fcinfo, ShareUpdateExclusiveLock, &ni);
	oldcxt = MemoryContextSwitchTo(b.cxt);
	b.relid = ni.def->relid;
	b.name = pstrdup(ni.def->name);
	b.definition_id = pstrdup(ni.def->definition_id);
	MemoryContextSwitchTo(oldcxt);
	CacheInvalidateRelcacheByRelid(b.relid);
	relation_close(ni.rel, NoLock);
	idx_warn_unmaintained(b.name, b.relid);
	idx_note_index_change(b.relid, true);	/* the workers learn at commit */
	commit_step();

	build_and_commit(&b);

	SPI_finish();
	MemoryContextDelete(b.cxt);
	PG_RETURN_VOID();
}
