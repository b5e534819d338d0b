/*-------------------------------------------------------------------------
 *
 * sync_wait.c
 *		  Consistent reads through index tables (see sync_wait.h).
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/sync/sync_wait.c
 *
 * An index table is "maintained" when the library is preloaded (the
 * shared state exists), the applier slot of its (database, server, table
 * owner) is starting or running, and the index's status entry, if the
 * applier has made one yet, carries no error.  It is "known to be behind"
 * when a backend asked its applier for a cluster time the index has not
 * reached and the index has not moved for longer than
 * idxtable.sync_wait_timeout: a query would only time out.
 *
 * The cluster time a statement waits for is the operationTime of a ping
 * sent on the statement's client without a session's transaction: on a
 * replica-set member the time of the latest write the node has applied,
 * so every write acknowledged to any client before the ping is at or
 * before it (mongod's computeOperationTime, service_entry_point_common.cpp).
 *
 * Not through mongos: a ping reaches no shard and mongos answers with its
 * own clock, which a write acknowledged through another mongos can be
 * past; and mongos releases an event of its merged change stream only once
 * every shard's high-water mark has passed it, which an idle shard moves
 * only by its periodic no-op (every 10 s).  So through mongos the target
 * is the operationTime of an appendOplogNote, a no-op on every shard, and
 * a second one, sent once the client knows that time (libmongoc gossips
 * it), moves every shard past it (cluster_target).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <limits.h>

#include "access/htup_details.h"
#include "catalog/pg_class.h"
#include "catalog/pg_foreign_table.h"
#include "foreign/foreign.h"
#include "miscadmin.h"
#include "portability/instr_time.h"
#include "storage/condition_variable.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/plancache.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"

#include "core/connection.h"
#include "core/handle.h"
#include "core/option.h"
#include "core/pg_compat.h"
#include "core/xact.h"
#include "sync/cluster_time.h"
#include "sync/sync_state.h"
#include "sync/sync_wait.h"

int			idx_index_consistency = IDX_READ_CURRENT;
int			idx_sync_wait_timeout = 5000;

static const struct config_enum_entry consistency_options[] = {
	{"current", IDX_READ_CURRENT, false},
	{"any", IDX_READ_ANY, false},
	{NULL, 0, false}
};

/*
 * What the shared state says about the applier of an index.
 */
typedef struct ApplierView
{
	int			slotno;			/* -1: no slot for the index's table */
	IdxApplierState state;
	TimestampTz started_at;
	IdxClusterTime requested;
	char		last_error[IDX_SYNC_ERROR_LEN];
	bool		has_status;		/* the index has a status entry */
	IdxSyncIndexStatus status;
} ApplierView;

pg_noreturn static void report_behind(const IdxIndexDef *def,
									  IdxClusterTime target);
pg_noreturn static void report_unmaintained(const IdxIndexDef *def);

/*
 * Define idxtable.index_consistency and idxtable.sync_wait_timeout.
 */
void
idx_sync_define_read_gucs(void)
{
	DefineCustomEnumVariable("idxtable.index_consistency",
							 "Sets what a query routed through an index table sees.",
							 "current: every write MongoDB acknowledged before the "
							 "query started (the query waits for the change-stream "
							 "applier); any: the index table as far as the applier "
							 "has come, without waiting.",
							 &idx_index_consistency,
							 IDX_READ_CURRENT,
							 consistency_options,
							 PGC_USERSET,
							 0,
							 NULL, NULL, NULL);
	DefineCustomIntVariable("idxtable.sync_wait_timeout",
							"Longest wait of a routed query for the change-stream applier.",
							"With idxtable.index_consistency = current, a routed scan "
							"that waits longer fails; an index table whose applier "
							"has not moved for longer while asked to is not routed "
							"through.",
							&idx_sync_wait_timeout,
							5000, 0, INT_MAX,
							PGC_USERSET,
							GUC_UNIT_MS,
							NULL, NULL, NULL);
}

/*
 * The owner of a relation (whose user mapping its applier connects with).
 */
static Oid
table_owner(Oid relid)
{
	HeapTuple	tup = SearchSysCache1(RELOID, ObjectIdGetDatum(relid));
	Oid			owner;

	if (!HeapTupleIsValid(tup))
		elog(ERROR, "cache lookup failed for relation %u", relid);
	owner = ((Form_pg_class) GETSTRUCT(tup))->relowner;
	ReleaseSysCache(tup);
	return owner;
}

/*
 * The server of a foreign table (a syscache lookup: planning calls this
 * for every index of the table, and GetForeignTable() would parse the
 * table's options each time).
 */
static Oid
table_server(Oid relid)
{
	HeapTuple	tup = SearchSysCache1(FOREIGNTABLEREL, ObjectIdGetDatum(relid));
	Oid			serverid;

	if (!HeapTupleIsValid(tup))
		elog(ERROR, "cache lookup failed for foreign table %u", relid);
	serverid = ((Form_pg_foreign_table) GETSTRUCT(tup))->ftserver;
	ReleaseSysCache(tup);
	return serverid;
}

/*
 * Fill *view with the applier slot of (this database, server, owner) and
 * the index's status entry.  The shared state must exist.
 */
static void
look_up_applier(const IdxIndexDef *def, ApplierView *view)
{
	Oid			serverid = table_server(def->relid);
	Oid			ownerid = table_owner(def->relid);
	int			i;

	memset(view, 0, sizeof(ApplierView));
	view->slotno = -1;
	for (i = 0; i < IDX_SYNC_MAX_APPLIERS && view->slotno < 0; i++)
	{
		IdxApplierSlot *slot = idx_sync_slot(i);

		SpinLockAcquire(&slot->mutex);
		if (slot->state != IDX_APPLIER_FREE && slot->dbid == MyDatabaseId &&
			slot->serverid == serverid && slot->ownerid == ownerid)
		{
			view->slotno = i;
			view->state = slot->state;
			view->started_at = slot->started_at;
			memcpy(view->last_error, slot->last_error, IDX_SYNC_ERROR_LEN);
			view->last_error[IDX_SYNC_ERROR_LEN - 1] = '\0';
		}
		SpinLockRelease(&slot->mutex);
		if (view->slotno >= 0)
			view->requested = pg_atomic_read_u64(&slot->requested);
	}
	view->has_status = idx_sync_index_lookup(MyDatabaseId, def->definition_id,
											 &view->status);
	if (view->has_status)
		view->status.last_error[IDX_SYNC_ERROR_LEN - 1] = '\0';
}

/*
 * Does an applier maintain the index, or is one about to: its slot is
 * starting or running, and its status entry, if the applier has made one
 * yet, carries no error?  (An entry that is not streaming without an
 * error is a moment's state: the applier is opening or reopening its
 * streams, after a change of the definitions.)
 */
static bool
is_maintained(const ApplierView *view)
{
	if (view->slotno < 0 ||
		(view->state != IDX_APPLIER_STARTING &&
		 view->state != IDX_APPLIER_RUNNING))
		return false;
	return !view->has_status || view->status.last_error[0] == '\0';
}

/*
 * Is the index known to be behind: asked for a cluster time it has not
 * reached, without moving for longer than idxtable.sync_wait_timeout
 * (counted from the applier's start if it has not moved since)?
 */
static bool
is_behind(const ApplierView *view)
{
	TimestampTz since;

	if (!view->has_status || view->requested <= view->status.applied_through)
		return false;
	since = Max(view->status.applied_at, view->started_at);
	return TimestampDifferenceExceeds(since, GetCurrentTimestamp(),
									  idx_sync_wait_timeout);
}

/*
 * May the planner route through "def" (see sync_wait.h)?
 */
bool
idx_sync_routable(const IdxIndexDef *def)
{
	ApplierView view;

	if (idx_index_consistency == IDX_READ_ANY)
		return true;
	if (!idx_sync_enabled())
		return false;
	look_up_applier(def, &view);
	return is_maintained(&view) && !is_behind(&view);
}

/*
 * The cluster time of the server: the operationTime of a ping, sent
 * without a session (so never inside the session's MongoDB transaction).
 * A server that tells none (a standalone mongod, which has no change
 * streams either) cannot serve consistent reads.
 */
static IdxClusterTime
server_cluster_time(mongoc_client_t *client, const char *servername)
{
	bson_t	   *command = BCON_NEW("ping", BCON_INT32(1));
	IdxHandle  *owned = idx_own_bson(command);
	bson_t		reply;
	bson_iter_t iter;
	uint32		t = 0;
	uint32		i = 0;

	idx_run_command(client, servername, "admin", command, &reply,
					idx_op(IDX_OP_CLUSTER_TIME, NULL, NULL));
	idx_release(owned);
	if (bson_iter_init_find(&iter, &reply, "operationTime") &&
		BSON_ITER_HOLDS_TIMESTAMP(&iter))
		bson_iter_timestamp(&iter, &t, &i);
	bson_destroy(&reply);
	idx_xact_note_cluster_time(client, IDX_CLUSTER_TIME(t, i));
	if (t == 0 && i == 0)
		ereport(ERROR,
				(errcode(ERRCODE_IDX_INDEX_NOT_CURRENT),
				 errmsg("MongoDB server \"%s\" reports no cluster time, so its index tables cannot be read as current",
						servername),
				 errdetail("Only a replica set or a sharded cluster has change streams and cluster times."),
				 errhint("SET idxtable.index_consistency = 'any' to read index tables as far as they have been maintained.")));
	return IDX_CLUSTER_TIME(t, i);
}

/*
 * A cluster time's seconds as a timestamp, palloc'd (timestamptz_to_str's
 * result is a static buffer, and a message shows two times).
 */
static char *
cluster_time_text(IdxClusterTime ct)
{
	pg_time_t	seconds = IDX_CLUSTER_TIME_SECONDS(ct);

	return pstrdup(timestamptz_to_str(time_t_to_timestamptz(seconds)));
}

/*
 * ERROR: the index did not reach "target" within the timeout.  Cached
 * plans are invalidated first, so that a prepared statement routed
 * through the index is planned again (as a plain scan while the index is
 * behind) when it runs next, instead of failing again.
 */
static void
report_behind(const IdxIndexDef *def, IdxClusterTime target)
{
	ApplierView view;

	ResetPlanCache();
	look_up_applier(def, &view);
	if (view.has_status && view.status.applied_through != 0)
		ereport(ERROR,
				(errcode(ERRCODE_IDX_INDEX_NOT_CURRENT),
				 errmsg("index table \"%s\" did not catch up with the writes made before the statement started",
						def->name),
				 errdetail("Its change-stream applier has applied the changes through cluster time %s (increment %u), not yet through the statement's %s (increment %u), and did not get there within %d ms.",
						   cluster_time_text(view.status.applied_through),
						   (uint32) view.status.applied_through,
						   cluster_time_text(target), (uint32) target,
						   idx_sync_wait_timeout),
				 errhint("Check idxtable.sync_status, or SET idxtable.index_consistency = 'any' to read the index table as far as it has been maintained.")));
	ereport(ERROR,
			(errcode(ERRCODE_IDX_INDEX_NOT_CURRENT),
			 errmsg("index table \"%s\" did not catch up with the writes made before the statement started",
					def->name),
			 errdetail("Its change-stream applier has applied no change yet and did not reach the statement's cluster time %s (increment %u) within %d ms.",
					   cluster_time_text(target), (uint32) target,
					   idx_sync_wait_timeout),
			 errhint("Check idxtable.sync_status, or SET idxtable.index_consistency = 'any' to read the index table as far as it has been maintained.")));
}

/*
 * ERROR: no applier maintains the index (cached plans are invalidated, as
 * in report_behind).
 */
static void
report_unmaintained(const IdxIndexDef *def)
{
	ApplierView view;

	ResetPlanCache();

	if (!idx_sync_enabled())
		ereport(ERROR,
				(errcode(ERRCODE_IDX_INDEX_NOT_CURRENT),
				 errmsg("index table \"%s\" is not maintained against writes made outside this PostgreSQL",
						def->name),
				 errdetail("idxtable_fdw is not in shared_preload_libraries, so no change-stream applier runs."),
				 errhint("Add idxtable_fdw to shared_preload_libraries, or SET idxtable.index_consistency = 'any' to read the index table as it is.")));
	look_up_applier(def, &view);
	if (view.has_status && view.status.blocked &&
		view.status.last_error[0] != '\0')
		ereport(ERROR,
				(errcode(ERRCODE_IDX_INDEX_NOT_CURRENT),
				 errmsg("index table \"%s\" is not maintained against writes made outside this PostgreSQL",
						def->name),
				 errdetail("Its change-stream applier cannot follow it: %s.",
						   view.status.last_error),
				 errhint("Check idxtable.sync_status, or SET idxtable.index_consistency = 'any' to read the index table as it is.")));
	if (view.slotno >= 0 && view.last_error[0] != '\0')
		ereport(ERROR,
				(errcode(ERRCODE_IDX_INDEX_NOT_CURRENT),
				 errmsg("index table \"%s\" is not maintained against writes made outside this PostgreSQL",
						def->name),
				 errdetail("No change-stream applier follows it now; the last one failed: %s",
						   view.last_error),
				 errhint("Check idxtable.sync_status, or SET idxtable.index_consistency = 'any' to read the index table as it is.")));
	ereport(ERROR,
			(errcode(ERRCODE_IDX_INDEX_NOT_CURRENT),
			 errmsg("index table \"%s\" is not maintained against writes made outside this PostgreSQL",
					def->name),
			 errdetail("No change-stream applier follows it now."),
			 errhint("Check idxtable.sync_status, or SET idxtable.index_consistency = 'any' to read the index table as it is.")));
}

/*
 * Wait until the applier of "def" follows the index (its status entry
 * exists and is streaming), at most until "deadline": an index committed
 * a moment ago has its slot (claimed at commit, idx_sync_expect_applier)
 * before its applier has read the definition, and an applier reopening
 * its streams reports them not streaming for a moment.  Returns true once
 * it streams; false, with *view as last seen, when no applier maintains
 * it or time is up.  The applier broadcasts its slot's condition variable
 * on every state change and report; the sleeps are short as well, so that
 * a report without a broadcast is seen soon.  "patient" (a write): an
 * applier that has a slot but failed, or waits to be restarted, is waited
 * for too, until the deadline.
 */
static bool
wait_until_streaming(const IdxIndexDef *def, TimestampTz deadline,
					 bool patient, ApplierView *view)
{
	int			prepared = -1;
	bool		streaming = false;

	for (;;)
	{
		long		remaining;

		look_up_applier(def, view);
		if (view->has_status && view->status.blocked)
			break;				/* a lasting condition: applier_denied.c */
		if (!is_maintained(view) && !(patient && view->slotno >= 0))
			break;
		if (view->has_status && view->status.streaming &&
			view->status.last_error[0] == '\0')
		{
			streaming = true;
			break;
		}
		if (view->slotno != prepared)
		{
			/* look again once prepared, so that no broadcast is missed */
			ConditionVariablePrepareToSleep(&idx_sync_slot(view->slotno)->applied_cv);
			prepared = view->slotno;
			continue;
		}
		remaining = TimestampDifferenceMilliseconds(GetCurrentTimestamp(),
													deadline);
		if (remaining <= 0)
			break;
		ConditionVariableTimedSleep(&idx_sync_slot(view->slotno)->applied_cv,
									Min(remaining, 100), PG_WAIT_EXTENSION);
	}
	if (prepared >= 0)
		ConditionVariableCancelSleep();
	return streaming;
}

/*
 * Wait until "def" has applied every change through "target" (within
 * idxtable.sync_wait_timeout), or raise the ERROR that says why it did
 * not.  "patient": see wait_until_streaming.
 */
static void
wait_for_index(const IdxIndexDef *def, IdxClusterTime target, bool patient)
{
	TimestampTz deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
													   idx_sync_wait_timeout);
	ApplierView view;
	uint32		server_hash;

	if (!idx_sync_enabled())
		report_unmaintained(def);
	server_hash = idx_server_target_hash(GetForeignServer(table_server(def->relid)));
	while (wait_until_streaming(def, deadline, patient, &view))
	{
		long		remaining = TimestampDifferenceMilliseconds(GetCurrentTimestamp(),
																deadline);
		int			waited_ms;
		IdxSyncWaitResult result;

		result = idx_sync_wait(MyDatabaseId, def->definition_id, server_hash,
							   target, (int) remaining, &waited_ms);
		if (result == IDX_SYNC_CAUGHT_UP)
			return;
		if (result == IDX_SYNC_TIMED_OUT || remaining <= 0)
			report_behind(def, target);
		/* unmaintained: wait again if it stopped streaming for a moment */
		look_up_applier(def, &view);
		if (view.has_status && view.status.streaming)
		{
			view.slotno = -1;	/* it streams, but not for this applier */
			break;
		}
	}
	/* time is up, or no applier maintains the index */
	if (is_maintained(&view))
		report_behind(def, target);
	report_unmaintained(def);
}

/*
 * Write a wake-up for the applier of "def": a heartbeat of our own into
 * the database's idxtable.sync, whose event ends the applier's getMore at
 * once.  Each backend has a document of its own ("heartbeat:wake:<backend
 * id>"), so that concurrent writers of unique keys do not all update one
 * document (mongod would serialize them, retrying write conflicts), and
 * writes it with w: 1: the stream returns its event only once it is
 * majority-committed anyway, so waiting for that here would only add a
 * round before the wait for the applier.  Best effort: a user mapping that may not write there (or any
 * other failure) leaves the wake-up to the applier's own heartbeat,
 * written when its getMore ends, and a failure is noted in the applier's
 * slot "slotno", whose getMores are then kept short for a while
 * (applier.c, poll_ms).  Sent without a session, so never inside the
 * statement's MongoDB transaction.  Returns the write's operationTime (0
 * if it failed or has none).
 */
static IdxClusterTime
write_wake_up(const IdxIndexDef *def, mongoc_client_t *client, int slotno)
{
	bson_t	   *command;
	IdxHandle  *owned;
	bson_t		reply;
	bson_error_t error;
	bson_iter_t iter;
	char		id[64];
	uint32		t = 0;
	uint32		i = 0;

	snprintf(id, sizeof(id), "%s:%d", IDX_SYNC_WAKE_ID, idx_backend_number());
	command = BCON_NEW("update", BCON_UTF8(IDX_SYNC_COLLECTION),
					   "updates", "[",
					   "{", "q", "{", "_id", BCON_UTF8(id), "}",
					   "u", "{", "$inc", "{", "n", BCON_INT64(1), "}", "}",
					   "upsert", BCON_BOOL(true), "}",
					   "]",
					   "writeConcern", "{", "w", BCON_INT32(1), "}");
	owned = idx_own_bson(command);
	if (!mongoc_client_write_command_with_opts(client, def->database, command,
											   NULL, &reply, &error))
	{
		elog(DEBUG1, "could not wake the applier of index table \"%s\"",
			 def->name);
		pg_atomic_write_u64(&idx_sync_slot(slotno)->wake_failed_at,
							(uint64) GetCurrentTimestamp());
	}
	else if (bson_iter_init_find(&iter, &reply, "operationTime") &&
			 BSON_ITER_HOLDS_TIMESTAMP(&iter))
	{
		bson_iter_timestamp(&iter, &t, &i);
		idx_sync_note_wake_up(slotno, IDX_CLUSTER_TIME(t, i));
	}
	bson_destroy(&reply);
	idx_release(owned);
	return IDX_CLUSTER_TIME(t, i);
}

/*
 * If the applier of "def" has not applied through "target" and waits long
 * in its getMores (an idle stream, applier.c), or follows a stream that
 * leaves the FDW's own transactions out (quiet while only we write, so its
 * getMore would end only when its wait does: applier_exclude.c), ask for
 * the time and write a wake-up, whose event carries a time later than
 * "target".
 */
static void
wake_idle_applier(const IdxIndexDef *def, mongoc_client_t *client,
				  IdxClusterTime target)
{
	ApplierView view;

	look_up_applier(def, &view);
	if (view.slotno < 0 ||
		(view.has_status && view.status.applied_through >= target))
		return;
	/* a full barrier: the applier announces a long wait, then reads this */
	idx_sync_request(view.slotno, target);
	if (pg_atomic_read_u32(&idx_sync_slot(view.slotno)->long_poll) == 0 &&
		!(view.has_status && view.status.skips_fdw))
		return;
	(void) write_wake_up(def, client, view.slotno);
}

/*
 * Through mongos, wake the applier of "def" for "target" if it has not
 * applied through it: a no-op on every shard (appendOplogNote) after
 * "target", unless *woke already holds the time of one (a statement with
 * several index tables writes one), noted in the slot as the backend's
 * wake-up before the request, so that the applier looks for it with a
 * short getMore instead of writing its own.  Once every shard has written
 * a no-op later than "target", the merged stream's high-water mark passes
 * it (the shards' marks are past it) and the applier has applied through
 * it (applier_stream.c).
 */
static void
wake_cluster_applier(const IdxIndexDef *def, mongoc_client_t *client,
					 const char *servername, IdxClusterTime target,
					 IdxClusterTime *woke)
{
	ApplierView view;

	look_up_applier(def, &view);
	if (view.slotno < 0 ||
		(view.has_status && view.status.applied_through >= target))
		return;
	if (*woke <= target)
		*woke = idx_sync_oplog_note(client, servername, "wake");
	idx_sync_note_wake_up(view.slotno, *woke);
	idx_sync_request(view.slotno, target);
}

/*
 * The cluster time a statement waits for through mongos (see the file
 * header), with the applier of "def" woken (wake_cluster_applier): the
 * operationTime of an appendOplogNote, the latest of the shards' no-ops.
 * Every write acknowledged on any shard, through any mongos, before the
 * statement started is at or before it.  One round alone is not enough to
 * wake the applier: a shard whose no-op is earlier than that time holds
 * the merged stream below it until its next write.  "*woke" is the time
 * of the second round, or 0 if none was needed.
 */
static IdxClusterTime
cluster_target(const IdxIndexDef *def, mongoc_client_t *client,
			   const char *servername, IdxClusterTime *woke)
{
	IdxClusterTime target = idx_sync_oplog_note(client, servername, "target");

	idx_xact_note_cluster_time(client, target);
	*woke = 0;
	if (idx_sync_enabled())
		wake_cluster_applier(def, client, servername, target, woke);
	return target;
}

/*
 * The cluster time a statement waits for, with the applier of "def"
 * woken if it needs it (wake_idle_applier).  When its stream leaves our
 * transactions out it always needs it, and a write (a claim of unique
 * keys, "writer") writes anyway, so then the wake-up is written first and
 * its operationTime is the target, saving the ping and the applier's own
 * heartbeat: it was acknowledged after the statement started, so every
 * write acknowledged before then is at or before it, and the stream
 * passes its event at once.  Otherwise (a read of a stream that brings
 * events, whose applier's one heartbeat serves every reader waiting, or
 * if the write failed) the ping's operationTime.  Through mongos,
 * cluster_target()'s; "*woke" is then the time of its wake-up (0: none).
 */
static IdxClusterTime
statement_target(const IdxIndexDef *def, mongoc_client_t *client,
				 const char *servername, bool writer, IdxClusterTime *woke)
{
	ApplierView view;
	IdxClusterTime target;

	*woke = 0;
	if (idx_client_is_mongos(client, servername))
		return cluster_target(def, client, servername, woke);
	if (idx_sync_enabled())
	{
		look_up_applier(def, &view);
		if (view.slotno >= 0 && view.has_status &&
			(view.status.skips_fdw || writer) &&
			(target = write_wake_up(def, client, view.slotno)) != 0)
		{
			idx_xact_note_cluster_time(client, target);
			idx_sync_request(view.slotno, target);
			return target;
		}
	}
	target = server_cluster_time(client, servername);
	if (idx_sync_enabled())
		wake_idle_applier(def, client, target);
	return target;
}

/*
 * The wait of a routed scan (see sync_wait.h).
 */
bool
idx_sync_wait_for_read(const IdxIndexDef *def, mongoc_client_t *client,
					   const char *servername, double *elapsed_ms)
{
	instr_time	start;
	instr_time	duration;
	IdxClusterTime target;
	IdxClusterTime woke;

	if (idx_index_consistency == IDX_READ_ANY)
		return false;
	INSTR_TIME_SET_CURRENT(start);
	target = statement_target(def, client, servername, false, &woke);
	wait_for_index(def, target, false);
	INSTR_TIME_SET_CURRENT(duration);
	INSTR_TIME_SUBTRACT(duration, start);
	*elapsed_ms = INSTR_TIME_GET_MILLISEC(duration);
	return true;
}

/*
 * Does a key component of "def" read a column of "attrs" (attnums)?
 */
static bool
key_reads_any(const IdxIndexDef *def, List *attrs)
{
	int			k;

	for (k = 0; k < def->nkeys; k++)
	{
		if (list_member_int(attrs, def->keys[k].attnum))
			return true;
	}
	return false;
}

/*
 * Does an applier follow the facts of "def" when one runs: its server's
 * option change_streams is on?
 */
static bool
server_has_streams(const IdxIndexDef *def)
{
	ForeignTable *table = GetForeignTable(def->relid);

	return idx_server_change_streams(GetForeignServer(table->serverid));
}

/*
 * A started wait of a write (sync_wait.h): its indexes and its time.
 */
struct IdxWriteWait
{
	List	   *defs;			/* IdxIndexDef *, in the statement's memory */
	IdxClusterTime target;
};

/*
 * Start the wait of a write that claims unique keys (see sync_wait.h).
 * Every unique index that is not failed and whose server has change
 * streams is waited for, also one whose applier is down, restarting or
 * behind: a claim checked against an index that misses a key written
 * outside would let a duplicate in, so an index that does not catch up in
 * time is an ERROR (IX001), as for a routed read.  On a server whose
 * option change_streams is off no applier ever runs, and the claim checks
 * the keys the index holds, as before the applier.
 */
IdxWriteWait *
idx_sync_write_wait_start(List *defs, List *target_attrs,
						  mongoc_client_t *client, const char *servername)
{
	IdxWriteWait *wait;
	List	   *waits = NIL;
	ListCell   *lc;
	IdxClusterTime woke;

	if (idx_index_consistency == IDX_READ_ANY || !idx_sync_enabled())
		return NULL;
	foreach(lc, defs)
	{
		IdxIndexDef *def = lfirst(lc);

		if (!def->unique || def->state == IDX_STATE_FAILED ||
			(target_attrs != NIL && !key_reads_any(def, target_attrs)) ||
			!server_has_streams(def))
			continue;
		waits = lappend(waits, def);
	}
	if (waits == NIL)
		return NULL;
	wait = palloc(sizeof(IdxWriteWait));
	wait->defs = waits;
	wait->target = statement_target(linitial(waits), client, servername,
									true, &woke);
	for_each_from(lc, waits, 1)
	{
		if (idx_client_is_mongos(client, servername))
			wake_cluster_applier(lfirst(lc), client, servername,
								 wait->target, &woke);
		else
			wake_idle_applier(lfirst(lc), client, wait->target);
	}
	return wait;
}

/*
 * End the wait of a write (see sync_wait.h): each index has applied
 * through the statement's start, or the ERROR says why not.
 */
void
idx_sync_write_wait_end(IdxWriteWait *wait)
{
	ListCell   *lc;

	foreach(lc, wait->defs)
		wait_for_index(lfirst(lc), wait->target, true);
}
