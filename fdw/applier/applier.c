/*-------------------------------------------------------------------------
 *
 * applier.c
 *		  The change-stream applier: a background worker that keeps the
 *		  index tables of one (database, foreign server, table owner) up to
 *		  date with every change to their facts, by any MongoDB client.
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/applier/applier.c
 *
 * The database worker (launcher.c) claims a slot of the shared state for
 * the triple and starts idx_applier_main() with the slot number.  The
 * applier reads the index tables it maintains (not failed, of foreign
 * tables of the server owned by the owner), groups them by the MongoDB
 * database of their facts and follows one database-level change stream per
 * database (applier_stream.c).  For every batch of events it brings each
 * index of the named facts up to date (applier_apply.c, on
 * index_repair_named.c: the entries each fact should have against those
 * the index holds, only the difference written), then reports how far it has applied
 * (idx_sync_index_report) and wakes the backends that wait for it.
 *
 * Work done for the table owner (reading facts, type input, computing
 * entries) runs as the owner, as a security-restricted operation; the
 * applier's own catalog reads and writes run as the bootstrap superuser
 * with schema-qualified SQL.  A fact collection that is dropped or renamed
 * makes its indexes "failed"; a stream that cannot resume (the history it
 * needs is gone) makes its indexes "stale" until they are rebuilt.
 *
 * Any ERROR ends the worker (exit 1) after its message is copied into the
 * slot and the statuses of its indexes; the database worker starts it
 * again and it resumes from its stored position.  SIGTERM ends it at once
 * (every wait, also on MongoDB, is a latch wait).
 *
 * This file is the top of the applier: the worker's entry, its signals,
 * connection, catalog and rounds.  The state every part shares, with the
 * index states and status reports, is applier_state.c's.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "foreign/foreign.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/lmgr.h"
#include "tcop/tcopprot.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/inval.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"

#include "applier/applier.h"
#include "applier/launcher.h"
#include "core/connection.h"
#include "core/mongoc_compat.h"
#include "core/option.h"
#include "core/stream.h"

/* Every applier slot can watch the registry of sessions */
StaticAssertDecl(IDX_SYNC_MAX_APPLIERS <= IDX_SYNC_MAX_WATCHERS,
				 "an applier slot number must be a watcher number");

PGDLLEXPORT void idx_applier_main(Datum main_arg);

/* the server's option change_streams turned 'off': the applier stops */
static bool applier_server_off = false;

/*
 * A foreign server or user mapping changed (a syscache invalidation): the
 * options the applier connected with may no longer be those of the
 * catalog, which conn_options keeps (in TopMemoryContext; it holds the
 * password: never logged).
 */
static bool conn_options_inval = false;
static char *conn_options = NULL;

/*
 * How long a getMore waits for events: APPLIER_POLL_MS while the streams
 * bring events or a backend asked for a time within APPLIER_AWAKE_MS,
 * else APPLIER_IDLE_POLL_MS (see poll_ms()).
 */
#define APPLIER_POLL_MS			25
#define APPLIER_IDLE_POLL_MS	500
#define APPLIER_AWAKE_MS		2000

/* The same failure is logged again only after this long (ms) */
#define APPLIER_ERROR_LOG_MS	(10 * 60 * 1000)

/* a round stepped no stream: every stream is refused (applier_denied.c) */
static bool round_idle = false;

/* The requested time last seen, and when it was seen to change */
static IdxClusterTime seen_requested = 0;
static TimestampTz asked_at = 0;

/*
 * The AppStream of MongoDB database "database", created if new.
 */
static AppStream *
stream_for(const char *database)
{
	ListCell   *lc;
	AppStream  *s;

	foreach(lc, applier.streams)
	{
		s = lfirst(lc);
		if (strcmp(s->database, database) == 0)
			return s;
	}
	s = palloc0(sizeof(AppStream));
	s->database = pstrdup(database);
	s->cs.client = applier.client;
	s->cs.servername = applier.servername;
	s->cs.database = s->database;
	applier.streams = lappend(applier.streams, s);
	return s;
}

/*
 * Start the status of "ix" from its shared entry, if it has one: a catalog
 * reload or a restart of the applier must not zero its counters nor move
 * applied_through back.  applied_through stays right when the stream
 * restarts earlier (a new index with an older sync_from, or a stored
 * position older than the last report): the index holds every change up to
 * it, and replaying older changes repairs entries idempotently;
 * idx_applier_report only raises it.  The error of a failed applier is
 * not kept: the index is followed again (routing depends on that).
 */
static void
keep_status(AppIndex *ix)
{
	IdxSyncIndexStatus old;

	if (idx_sync_index_lookup(MyDatabaseId, ix->status.definition_id, &old))
		ix->status = old;
	ix->status.slotno = applier.slotno;
	ix->status.server_hash = applier.server_hash;
	ix->status.streaming = false;
	ix->status.last_error[0] = '\0';	/* a failed applier's: it runs again */
	ix->status.blocked = false; /* a refused stream's: applier_denied.c */
}

/*
 * Add one index_defs row (of the SPI result) to the stream of its facts'
 * database.  A foreign table dropped since the query's snapshot is
 * skipped: its drop bumps the catalog generation, so a reload follows
 * (opening it would fail, and the applier with it).  The lock keeps it
 * while its options are read.
 */
static void
add_index_row(HeapTuple tuple, TupleDesc desc)
{
	bool		isnull;
	AppIndex   *ix;
	IdxTableInfo *info;
	AppStream  *s;
	char	   *state;
	Datum		d;
	Oid			relid = DatumGetObjectId(SPI_getbinval(tuple, desc, 2, &isnull));

	LockRelationOid(relid, AccessShareLock);
	if (!SearchSysCacheExists1(RELOID, ObjectIdGetDatum(relid)))
	{
		UnlockRelationOid(relid, AccessShareLock);
		return;
	}
	ix = palloc0(sizeof(AppIndex));
	ix->name = TextDatumGetCString(SPI_getbinval(tuple, desc, 1, &isnull));
	ix->relid = relid;
	state = TextDatumGetCString(SPI_getbinval(tuple, desc, 3, &isnull));
	ix->state = strcmp(state, "stale") == 0 ? 's' :
		strcmp(state, "building") == 0 ? 'b' : 'v';
	strlcpy(ix->status.definition_id,
			TextDatumGetCString(SPI_getbinval(tuple, desc, 4, &isnull)),
			IDX_SYNC_UUID_LEN);
	d = SPI_getbinval(tuple, desc, 5, &isnull);
	ix->sync_from = isnull ? 0 : (IdxClusterTime) DatumGetInt64(d);
	ix->status.dbid = MyDatabaseId;
	keep_status(ix);

	info = idx_get_table_info(ix->relid);
	UnlockRelationOid(relid, AccessShareLock);
	ix->collection = pstrdup(info->collection);
	s = stream_for(info->database);
	s->indexes = lappend(s->indexes, ix);
}

/*
 * Forget the statuses of the indexes this applier reported and no longer
 * follows (dropped since the last load), so that their entries go back to
 * the shared table.
 */
static void
forget_unfollowed(void)
{
	char	  **keep = palloc(sizeof(char *) * IDX_SYNC_MAX_INDEXES);
	int			nkeep = 0;
	ListCell   *lc;

	foreach(lc, applier.streams)
	{
		ListCell   *lc2;

		foreach(lc2, ((AppStream *) lfirst(lc))->indexes)
			if (nkeep < IDX_SYNC_MAX_INDEXES)
				keep[nkeep++] = ((AppIndex *) lfirst(lc2))->status.definition_id;
	}
	idx_sync_index_forget_others(applier.slotno, MyDatabaseId, keep, nkeep);
	pfree(keep);
}

/*
 * A text that changes whenever the catalog changes in a way that concerns
 * this applier: its index tables (name, table, state, definition_id,
 * sync_from), the rows of their foreign tables (options, owner, columns:
 * their xmin) and the rows of its server and user mappings; NULL if there
 * is no idxtable schema.  A generation bump that leaves it unchanged was
 * made for others (another owner's index DDL, say): the streams stay open.
 */
static char *
catalog_signature(void)
{
	static const char *query =
		"SELECT pg_catalog.concat_ws('|', "
		"  (SELECT pg_catalog.string_agg(pg_catalog.concat_ws('/', d.name, "
		"            d.tbl::pg_catalog.oid, d.state, d.definition_id, "
		"            pg_catalog.to_jsonb(d) OPERATOR(pg_catalog.->>) 'sync_from', "
		"            ft.xmin, c.xmin), ',' ORDER BY d.name) "
		"     FROM idxtable.index_defs d "
		"     JOIN pg_catalog.pg_foreign_table ft "
		"       ON ft.ftrelid OPERATOR(pg_catalog.=) d.tbl::pg_catalog.oid "
		"     JOIN pg_catalog.pg_class c "
		"       ON c.oid OPERATOR(pg_catalog.=) ft.ftrelid "
		"    WHERE ft.ftserver OPERATOR(pg_catalog.=) $1 "
		"      AND c.relowner OPERATOR(pg_catalog.=) $2 "
		"      AND d.state OPERATOR(pg_catalog.<>) 'failed'), "
		"  (SELECT s.xmin FROM pg_catalog.pg_foreign_server s "
		"    WHERE s.oid OPERATOR(pg_catalog.=) $1), "
		"  (SELECT pg_catalog.string_agg(u.xmin::pg_catalog.text, ',' "
		"                                ORDER BY u.oid) "
		"     FROM pg_catalog.pg_user_mapping u "
		"    WHERE u.umserver OPERATOR(pg_catalog.=) $1 "
		"      AND u.umuser OPERATOR(pg_catalog.=) ANY (ARRAY[$2, 0::pg_catalog.oid])))";
	Oid			types[2] = {OIDOID, OIDOID};
	Datum		values[2];
	char	   *result = NULL;

	if (!OidIsValid(get_namespace_oid("idxtable", true)))
		return NULL;
	values[0] = ObjectIdGetDatum(applier.slot->serverid);
	values[1] = ObjectIdGetDatum(applier.slot->ownerid);
	idx_applier_spi_begin();
	if (SPI_execute_with_args(query, 2, types, values, NULL, true, 1) !=
		SPI_OK_SELECT || SPI_processed != 1)
		elog(ERROR, "could not read the catalog of the index tables to maintain");
	result = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1);
	if (result != NULL)
		result = MemoryContextStrdup(TopMemoryContext, result);
	idx_applier_spi_end();
	return result;
}

/*
 * Did the catalog change since load_catalog() only in ways that concern
 * others (catalog_signature())?  Then the generation is taken as loaded.
 */
static bool
catalog_unchanged(void)
{
	uint64		generation = idx_sync_catalog_generation(MyDatabaseId);
	char	   *signature = catalog_signature();
	bool		same;

	same = signature != NULL && applier.signature != NULL &&
		strcmp(signature, applier.signature) == 0;
	if (signature)
		pfree(signature);
	if (same)
		applier.generation = generation;
	return same;
}

/*
 * Read the index tables this applier maintains into applier.streams (in
 * applier.cxt); false if there are none.  sync_from is read through
 * to_jsonb so that a catalog without the column reads as NULL.  The
 * catalog's signature is read first, so that a change committed between
 * the two reads makes the next comparison differ.
 */
static bool
load_catalog(void)
{
	static const char *query =
		"SELECT d.name, d.tbl::pg_catalog.oid, d.state, "
		"       d.definition_id::pg_catalog.text, "
		"       (pg_catalog.to_jsonb(d) OPERATOR(pg_catalog.->>) 'sync_from')::pg_catalog.int8 "
		"  FROM idxtable.index_defs d "
		"  JOIN pg_catalog.pg_foreign_table ft "
		"    ON ft.ftrelid OPERATOR(pg_catalog.=) d.tbl::pg_catalog.oid "
		"  JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) ft.ftrelid "
		" WHERE ft.ftserver OPERATOR(pg_catalog.=) $1 "
		"   AND c.relowner OPERATOR(pg_catalog.=) $2 "
		"   AND d.state OPERATOR(pg_catalog.<>) 'failed' "
		" ORDER BY d.name";
	Oid			types[2] = {OIDOID, OIDOID};
	Datum		values[2];
	MemoryContext old;
	uint64		i;

	applier.generation = idx_sync_catalog_generation(MyDatabaseId);
	if (applier.signature)
		pfree(applier.signature);
	applier.signature = catalog_signature();
	MemoryContextReset(applier.cxt);
	applier.streams = NIL;
	if (!OidIsValid(get_namespace_oid("idxtable", true)))
		return false;

	values[0] = ObjectIdGetDatum(applier.slot->serverid);
	values[1] = ObjectIdGetDatum(applier.slot->ownerid);
	idx_applier_spi_begin();
	if (SPI_execute_with_args(query, 2, types, values, NULL, true, 0) !=
		SPI_OK_SELECT)
		elog(ERROR, "could not read the index tables to maintain");
	old = MemoryContextSwitchTo(applier.cxt);
	for (i = 0; i < SPI_processed; i++)
		add_index_row(SPI_tuptable->vals[i], SPI_tuptable->tupdesc);
	MemoryContextSwitchTo(old);
	idx_applier_spi_end();
	forget_unfollowed();
	return applier.streams != NIL;
}

/*
 * Close every stream, storing its position first.
 */
static void
close_streams(void)
{
	ListCell   *lc;

	foreach(lc, applier.streams)
	{
		AppStream  *s = lfirst(lc);

		if (s->open)
			idx_applier_save_position(s, true);
		idx_applier_close_stream(s);
		idx_applier_report(s, false);
	}
}

/*
 * The options of our server that the connection is made from, and those
 * of the owner's user mapping for it (an ERROR if the mapping is gone), as
 * one string to compare.  Other server options (consistency, fetch_size,
 * change_streams, ...) reach the applier with the catalog, without a new
 * connection.
 */
static char *
connection_options(ForeignServer *server, UserMapping *user)
{
	static const char *const server_options[] = {
		"uri", "database", "connect_timeout_ms", "socket_timeout_ms",
		"server_selection_timeout_ms"
	};
	List	   *connecting = NIL;
	ListCell   *lc;
	int			i;

	foreach(lc, server->options)
	{
		DefElem    *def = lfirst(lc);

		for (i = 0; i < lengthof(server_options); i++)
			if (strcmp(def->defname, server_options[i]) == 0)
				connecting = lappend(connecting, def);
	}
	return psprintf("%s;%s;%u", idx_options_identity(connecting),
					idx_options_identity(user->options), user->umid);
}

/*
 * Syscache callback of pg_foreign_server and pg_user_mapping: check the
 * connection's options at the start of the next round.
 */
static void
connection_inval(Datum arg, int cacheid, uint32 hashvalue)
{
	conn_options_inval = true;
}

/*
 * At the start of a round after a server or user mapping changed: if the
 * options of our connection are no longer the catalog's (ALTER SERVER ...
 * OPTIONS, ALTER or DROP USER MAPPING), stop following the streams with
 * the old connection at once, without writing through it: the statuses
 * say not streaming, and the process exits so that it is started again
 * with the catalog's options (or fails to connect, with the reason in
 * last_error).  The stored positions are older than what was applied, so
 * the new process applies some events again, which changes nothing.  The
 * times applied through are forgotten: the new options may name another
 * server, whose cluster times are not comparable with the old one's, and
 * a read must not take the old server's for the new one's.
 */
static void
check_connection_options(void)
{
	ForeignServer *server;
	UserMapping *user;
	char	   *now;
	ListCell   *lc;

	if (!conn_options_inval)
		return;
	conn_options_inval = false;
	server = GetForeignServerExtended(applier.slot->serverid, FSV_MISSING_OK);
	if (server == NULL)
		return;					/* dropped: load_catalog() finds nothing */
	user = GetUserMapping(applier.slot->ownerid, applier.slot->serverid);
	now = connection_options(server, user);
	if (strcmp(now, conn_options) == 0)
		return;
	ereport(LOG,
			(errmsg("idxtable_fdw applier for server \"%s\" restarts: the options of the server or of the user mapping of its tables' owner changed",
					applier.servername)));
	foreach(lc, applier.streams)
	{
		AppStream  *s = lfirst(lc);
		ListCell   *lc2;

		foreach(lc2, s->indexes)
		{
			AppIndex   *ix = lfirst(lc2);

			ix->status.streaming = false;
			ix->status.applied_through = 0;
			idx_sync_index_report(&ix->status);
		}
	}
	ConditionVariableBroadcast(&applier.slot->applied_cv);
	proc_exit(1);
}

/*
 * Do writes through "client" wait for a majority (the URI names w:
 * "majority", or no w, which mongod 5.0+ takes as majority)?  Then the
 * facts the FDW wrote are majority-committed once its statement ends, and
 * the applier reads facts at majority (a fact a failover rolls back is
 * never read).  With a smaller w the FDW's own writes may not be, and a
 * majority read would miss the fact of a unique claim it just made; the
 * applier then reads as the URI says (README: rollback with w below
 * majority).
 */
static bool
writes_wait_for_majority(mongoc_client_t *client)
{
	const mongoc_write_concern_t *wc = mongoc_client_get_write_concern(client);
	int32_t		w = mongoc_write_concern_get_w(wc);

	return w == MONGOC_WRITE_CONCERN_W_DEFAULT ||
		mongoc_write_concern_get_wmajority(wc);
}

/*
 * Connect to the server as the owner's user mapping, with our appName.
 */
static void
connect_applier(void)
{
	ForeignServer *server = GetForeignServer(applier.slot->serverid);
	UserMapping *user = GetUserMapping(applier.slot->ownerid,
									   applier.slot->serverid);

	conn_options = MemoryContextStrdup(TopMemoryContext,
									   connection_options(server, user));
	applier.server_hash = idx_server_target_hash(server);

	applier.servername = MemoryContextStrdup(TopMemoryContext,
											 server->servername);
	applier.key = MemoryContextStrdup(TopMemoryContext,
									  psprintf(UINT64_FORMAT "/%u/%s@%u/%u",
											   GetSystemIdentifier(),
											   MyDatabaseId,
											   server->servername,
											   server->serverid,
											   applier.slot->ownerid));
	/* from its first reply on: applier_stream.c's written_through() */
	idx_track_reply_times(&applier.replies);
	applier.client = idx_connect_private(server, user,
										 "idxtable_fdw applier");
	applier.durable_reads = writes_wait_for_majority(applier.client);
	applier.mongos = idx_client_is_mongos(applier.client, applier.servername);
}

/*
 * Does our server still have change streams to follow?  ALTER SERVER ...
 * OPTIONS (change_streams 'off') bumps the catalog generation (see
 * sync_notify.c), so this is read again with the catalog, through SPI
 * (see idx_srvoptions_change_streams).  A server that is gone counts as on:
 * load_catalog() then finds no index tables.
 */
static bool
server_streams_on(void)
{
	static const char *query =
		"SELECT srvoptions FROM pg_catalog.pg_foreign_server "
		" WHERE oid OPERATOR(pg_catalog.=) $1";
	Oid			types[1] = {OIDOID};
	Datum		values[1];
	bool		on = true;		/* a dropped server: no index tables left */

	values[0] = ObjectIdGetDatum(applier.slot->serverid);
	idx_applier_spi_begin();
	if (SPI_execute_with_args(query, 1, types, values, NULL, true, 1) !=
		SPI_OK_SELECT)
		elog(ERROR, "could not read foreign server %u",
			 applier.slot->serverid);
	if (SPI_processed == 1)
	{
		bool		isnull;
		Datum		srvoptions = SPI_getbinval(SPI_tuptable->vals[0],
											   SPI_tuptable->tupdesc, 1,
											   &isnull);

		on = idx_srvoptions_change_streams(isnull ? (Datum) 0 : srvoptions);
	}
	idx_applier_spi_end();
	return on;
}

/*
 * How long the getMores of this round may wait.  An idle stream is asked
 * less often, so that an idle applier costs the server little: a getMore
 * returns as soon as an event arrives, so only a backend's request (the
 * applier's heartbeat is written before a getMore) and a catalog change
 * must wait for the end of a long one.  A backend that waits meanwhile
 * (a routed read, a write of a unique key) writes a wake-up event itself
 * (sync_wait.c), so the long wait is announced in the slot.  A stream that
 * leaves the FDW's own transactions out is asked as seldom even while
 * backends wait, since each of them writes its wake-up then; short
 * getMores would only return empty batches and take the server's time
 * from the FDW's own writes; unless a backend could not write its wake-up
 * lately (a user mapping that may not write idxtable.sync).
 *
 * Through mongos the wake-ups are no-ops on every shard (appendOplogNote),
 * which are no events: they move the streams' high-water marks but do not
 * end a getMore.  So while a backend's request is past what a stream has
 * covered, the getMores are short, armed or not.
 */
static int
poll_ms(void)
{
	IdxClusterTime requested = pg_atomic_read_u64(&applier.slot->requested);
	TimestampTz now = GetCurrentTimestamp();
	ListCell   *lc;
	bool		busy = false;
	bool		backends_wake_us = true;	/* every waiting backend writes a
										 * wake-up (sync_wait.c) */
	TimestampTz wake_failed_at;

	if (requested != seen_requested)
	{
		seen_requested = requested;
		asked_at = now;
	}
	foreach(lc, applier.streams)
	{
		AppStream  *s = lfirst(lc);

		busy = busy || !s->caught_up ||
			(applier.mongos && requested > s->covered);
		backends_wake_us = backends_wake_us && s->armed && !s->arm_pending;
	}
	wake_failed_at = (TimestampTz) pg_atomic_read_u64(&applier.slot->wake_failed_at);
	if (!TimestampDifferenceExceeds(wake_failed_at, now, APPLIER_AWAKE_MS))
		backends_wake_us = false;	/* that one waits for our getMores */
	if (busy || (!backends_wake_us &&
				 !TimestampDifferenceExceeds(asked_at, now, APPLIER_AWAKE_MS)))
		return APPLIER_POLL_MS;
	return APPLIER_IDLE_POLL_MS;
}

/*
 * One round: reload the catalog if it changed (exit when there is nothing
 * to maintain, or the server's change_streams is now 'off'), then one
 * step of every stream.  Returns false to stop.
 */
static bool
applier_round(void)
{
	ListCell   *lc;
	int			wait_ms;

	check_connection_options();
	if (applier.streams == NIL ||
		(idx_sync_catalog_generation(MyDatabaseId) != applier.generation &&
		 !catalog_unchanged()))
	{
		close_streams();
		if (!server_streams_on())
		{
			applier_server_off = true;
			return false;
		}
		if (!load_catalog())
			return false;
	}
	wait_ms = poll_ms() / list_length(applier.streams);
	pg_atomic_write_u32(&applier.slot->long_poll,
						wait_ms > APPLIER_POLL_MS ? 1 : 0);
	/* announced before the heartbeat check reads "requested" again */
	pg_memory_barrier();
	round_idle = true;
	foreach(lc, applier.streams)
	{
		AppStream  *s = lfirst(lc);

		if (!s->open && !idx_applier_may_open(s))
			continue;			/* refused: tried again later */
		if (!s->open)
			idx_applier_open_stream(s);
		if (applier.generation != idx_sync_catalog_generation(MyDatabaseId))
		{
			round_idle = false; /* no sleep: the reload comes first */
			break;				/* states changed: reload first */
		}
		if (!s->open)
			continue;			/* refused again */
		idx_applier_step(s, Max(wait_ms, 1));
		round_idle = false;
	}
	pg_atomic_write_u32(&applier.slot->long_poll, 0);
	idx_sync_sessions_looked(applier.slotno, idx_exclude_doubts_looked());
	return true;
}

/*
 * After a round whose batches brought events without filling up, and
 * with no stream behind, let more events come before the next getMore
 * (idxtable.applier_batch_delay): a run of small writes, one getMore
 * each, is then applied in a few batches instead of a confirming read of
 * the facts and entries per write.  The delay counts from the start of
 * the round ("round_start"), when its getMores went out: events gathered
 * while the round applied its batches too, and a round that took longer
 * than the delay is followed at once (under a steady load near the
 * applier's rate, a delay after each batch would only add to the lag).
 * A backend that waits for a time we have not applied (its request sets
 * our latch) ends the delay at once, and none starts while one waits.
 * Outside any transaction.
 */
static void
gather_events(TimestampTz round_start)
{
	ListCell   *lc;
	bool		partial = false;
	IdxClusterTime requested;
	long		wait_ms;

	if (idx_applier_batch_delay <= 0)
		return;
	requested = pg_atomic_read_u64(&applier.slot->requested);
	foreach(lc, applier.streams)
	{
		AppStream  *s = lfirst(lc);

		if (!s->open)
			continue;
		if (!s->caught_up && !s->partial)
			return;				/* a full batch: more is waiting now */
		if (requested > s->covered)
			return;				/* a backend waits */
		partial = partial || s->partial;
	}
	if (!partial)
		return;
	wait_ms = idx_applier_batch_delay -
		TimestampDifferenceMilliseconds(round_start, GetCurrentTimestamp());
	if (wait_ms <= 0)
		return;
	(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
					 wait_ms, PG_WAIT_EXTENSION);
	ResetLatch(MyLatch);
	CHECK_FOR_INTERRUPTS();
}

/*
 * The main loop, one transaction per round.
 */
static void
applier_loop(void)
{
	bool		more = true;

	StartTransactionCommand();
	connect_applier();
	CommitTransactionCommand();
	ereport(LOG,
			(errmsg("idxtable_fdw applier for server \"%s\" started",
					applier.servername)));

	while (more)
	{
		TimestampTz round_start;

		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
		}
		round_start = GetCurrentTimestamp();
		StartTransactionCommand();
		more = applier_round();
		CommitTransactionCommand();
		if (more && round_idle)
			idx_applier_denied_sleep();
		else if (more)
			gather_events(round_start);
	}
	if (applier_server_off)
		ereport(LOG,
				(errmsg("idxtable_fdw applier for server \"%s\" stops: the server's option change_streams is off",
						applier.servername)));
	else
		ereport(LOG,
				(errmsg("idxtable_fdw applier for server \"%s\" stops: it has no index tables to maintain",
						applier.servername)));
}

/*
 * An ERROR ends the worker: keep its message in the slot and in the
 * statuses of its indexes, also of those it had not loaded yet (a failure
 * to connect; translated FDW messages, never a URI), log it and exit 1 so
 * that the database worker starts it again.  The same error again within
 * APPLIER_ERROR_LOG_MS of its last report is not logged again (a lasting
 * condition, e.g. a refused connection, would otherwise fill the log at
 * every restart); it stays in last_error.
 */
static void
applier_failed(void)
{
	ErrorData  *edata;
	TimestampTz now = GetCurrentTimestamp();
	bool		repeated;

	HOLD_INTERRUPTS();
	MemoryContextSwitchTo(TopMemoryContext);
	edata = CopyErrorData();
	SpinLockAcquire(&applier.slot->mutex);
	repeated = strncmp(applier.slot->last_error, edata->message,
					   IDX_SYNC_ERROR_LEN - 1) == 0 &&
		!TimestampDifferenceExceeds(applier.slot->error_logged_at, now,
									APPLIER_ERROR_LOG_MS);
	if (!repeated)
		applier.slot->error_logged_at = now;
	strlcpy(applier.slot->last_error, edata->message, IDX_SYNC_ERROR_LEN);
	SpinLockRelease(&applier.slot->mutex);
	idx_sync_slot_failed(applier.slotno, edata->message);
	if (repeated)
		ereport(DEBUG1,
				(errmsg_internal("idxtable_fdw applier for server \"%s\" failed again: %s",
								 applier.servername ? applier.servername : "?",
								 edata->message)));
	else
		EmitErrorReport();
	proc_exit(1);
}

/*
 * At exit (also on FATAL): the slot no longer has a process to wake, and
 * the registry of sessions no watcher of ours.
 */
static void
applier_exit(int code, Datum arg)
{
	idx_sync_sessions_unwatch(applier.slotno);
	SpinLockAcquire(&applier.slot->mutex);
	applier.slot->pid = 0;
	applier.slot->latch = NULL;
	if (code == 0)
		applier.slot->state = IDX_APPLIER_STOPPED;
	SpinLockRelease(&applier.slot->mutex);
	ConditionVariableBroadcast(&applier.slot->applied_cv);
}

/*
 * Entry point of the applier (bgw_function_name), with the slot number.
 */
void
idx_applier_main(Datum main_arg)
{
	pqsignal(SIGTERM, die);
	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	BackgroundWorkerUnblockSignals();

	memset(&applier, 0, sizeof(applier));
	applier.slotno = DatumGetInt32(main_arg);
	applier.slot = idx_sync_slot(applier.slotno);
	BackgroundWorkerInitializeConnectionByOid(applier.slot->dbid,
											  InvalidOid, 0);
	pgstat_report_appname("idxtable_fdw applier");
	SetConfigOption("search_path", "pg_catalog, pg_temp", PGC_SUSET,
					PGC_S_OVERRIDE);
	applier.cxt = AllocSetContextCreate(TopMemoryContext,
										"idxtable_fdw applier catalog",
										ALLOCSET_DEFAULT_SIZES);

	SpinLockAcquire(&applier.slot->mutex);
	applier.slot->pid = MyProcPid;
	applier.slot->latch = MyLatch;
	applier.slot->state = IDX_APPLIER_RUNNING;
	applier.slot->started_at = GetCurrentTimestamp();
	SpinLockRelease(&applier.slot->mutex);
	ConditionVariableBroadcast(&applier.slot->applied_cv);
	before_shmem_exit(applier_exit, (Datum) 0);
	CacheRegisterSyscacheCallback(FOREIGNSERVEROID, connection_inval,
								  (Datum) 0);
	CacheRegisterSyscacheCallback(USERMAPPINGOID, connection_inval,
								  (Datum) 0);
	idx_sync_sessions_watch(applier.slotno, applier.slot->dbid,
							applier.slot->serverid);

	PG_TRY();
	{
		applier_loop();
	}
	PG_CATCH();
	{
		applier_failed();
	}
	PG_END_TRY();
	proc_exit(0);
}
