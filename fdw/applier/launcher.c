/*-------------------------------------------------------------------------
 *
 * launcher.c
 *		  The processes of the change-stream applier: the launcher, one
 *		  database worker per database that has idxtable_fdw, and the
 *		  appliers those start.
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/applier/launcher.c
 *
 * The launcher is a static background worker (registered by _PG_init when
 * the library is preloaded) connected to no database.  Every
 * idxtable.launcher_naptime, or when woken by a catalog change or the
 * exit of one of its workers, it reads pg_database and starts a database
 * worker for each database that accepts connections and has none.
 * Template databases are left alone: a session in one would make CREATE
 * DATABASE from it fail.  A database worker that finds no idxtable_fdw
 * extension exits at once; the launcher starts it again only when the
 * database's definitions change (idx_sync_catalog_changed) or after ten
 * naptimes.
 *
 * The database worker reads which (foreign server, table owner) pairs
 * have index tables that are not failed, claims an applier slot for each
 * and starts an applier (fdw/applier/applier.c) in it.  An applier that dies
 * is started again after 1 s, the delay doubling up to 60 s while it
 * keeps failing within a minute of its start; an applier whose pair has
 * no index table left is terminated and its slot freed.  It wakes on its
 * naptime, on a catalog change of its database, and when an applier
 * starts or exits (bgw_notify_pid).  When it exits it terminates its
 * appliers; their slots stay claimed (WAITING) for the next database
 * worker, and are freed by the launcher when the database is gone.
 *
 * DROP DATABASE, ALTER DATABASE RENAME and the like wait up to 5 s for
 * the database's other sessions to leave.  Hooks (sync_notify.c) ask our
 * workers in the database to exit when one begins, and the launcher
 * starts none there for the next ten seconds.
 *
 * Catalog SQL runs through SPI in a transaction with a snapshot, with
 * search_path = pg_catalog, pg_temp for the worker's whole session and
 * schema-qualified tables and operators.  Every worker sets its
 * application_name to its bgw_type, and takes SIGTERM (die: FATAL at the
 * next CHECK_FOR_INTERRUPTS) and SIGHUP (configuration reload).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <signal.h>

#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/pg_database.h"
#include "commands/dbcommands.h"
#include "commands/extension.h"
#include "executor/spi.h"
#include "foreign/foreign.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "tcop/tcopprot.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"

#include "applier/launcher.h"
#include "core/option.h"
#include "sync/sync_state.h"
#include "sync/sync_workers.h"

PGDLLEXPORT void idx_launcher_main(Datum main_arg);
PGDLLEXPORT void idx_database_worker_main(Datum main_arg);

/* idxtable.launcher_naptime, seconds */
int			idx_launcher_naptime = 10;

/* idxtable.applier_batch_delay, milliseconds */
int			idx_applier_batch_delay = 100;

/* naptimes before a database without the extension is looked at again */
#define NO_EXTENSION_NAPS		10
/* seconds after the start of a DROP DATABASE in which no worker starts */
#define DROPPING_SECS			10
/* applier restart delays, ms; a run shorter than this is a quick failure */
#define RESTART_MIN_MS			1000
#define RESTART_MAX_MS			10000
#define QUICK_FAILURE_MS		10000

/* The launcher's knowledge of one database */
typedef struct LauncherDb
{
	Oid			dbid;
	bool		seen;			/* in the latest read of pg_database */
	BackgroundWorkerHandle *handle; /* its running worker, or NULL */
	TimestampTz not_before;		/* no new worker before then */
	uint64		generation;		/* catalog generation when it exited */
	bool		no_extension;	/* its last worker found no extension */
} LauncherDb;

/* The database worker's knowledge of one applier slot */
typedef struct DbWorkerSlot
{
	bool		in_use;			/* a pair of ours has this slot */
	bool		wanted;			/* the pair has index tables (this pass) */
	bool		stopping;		/* terminated; free the slot once stopped */
	BackgroundWorkerHandle *handle; /* its applier, or NULL */
	TimestampTz started_at;
	TimestampTz restart_at;		/* start (again) no sooner than this */
	int			backoff_ms;		/* the next restart delay */
	int			attempts;		/* restarts after failures */
} DbWorkerSlot;

static DbWorkerSlot dbw_slots[IDX_SYNC_MAX_APPLIERS];

/*
 * Define idxtable.launcher_naptime and idxtable.applier_batch_delay (from
 * _PG_init, preloaded or not, so that SHOW and ALTER SYSTEM know them).
 */
void
idx_applier_define_gucs(void)
{
	DefineCustomIntVariable("idxtable.launcher_naptime",
							"Sets the time between two passes of the idxtable_fdw launcher and database workers over the catalogs.",
							"Changes of index tables made with idxtable_fdw's functions wake them at once; "
							"this bounds the delay for other changes (DROP FOREIGN TABLE, ALTER ... OWNER).",
							&idx_launcher_naptime,
							10, 1, INT_MAX / 1000,
							PGC_SIGHUP,
							GUC_UNIT_S,
							NULL, NULL, NULL);
	DefineCustomIntVariable("idxtable.applier_batch_delay",
							"Sets how long an applier lets changes gather after the getMore of a batch that did not fill.",
							"A longer delay applies a run of small writes in fewer, larger batches; "
							"a query that waits for the applier ends the delay at once.  0 turns it off.",
							&idx_applier_batch_delay,
							100, 0, 10000,
							PGC_SIGHUP,
							GUC_UNIT_MS,
							NULL, NULL, NULL);
}

/*
 * Register the launcher (static: from _PG_init while preloading); not
 * during pg_upgrade, which must have the cluster to itself.
 */
void
idx_applier_register_launcher(void)
{
	BackgroundWorker bgw;

	if (IsBinaryUpgrade)
		return;
	memset(&bgw, 0, sizeof(bgw));
	bgw.bgw_flags = BGWORKER_SHMEM_ACCESS |
		BGWORKER_BACKEND_DATABASE_CONNECTION;
	bgw.bgw_start_time = BgWorkerStart_RecoveryFinished;
	bgw.bgw_restart_time = 10;
	snprintf(bgw.bgw_library_name, BGW_MAXLEN, "idxtable_fdw");
	snprintf(bgw.bgw_function_name, BGW_MAXLEN, "idx_launcher_main");
	snprintf(bgw.bgw_name, BGW_MAXLEN, IDX_LAUNCHER_TYPE);
	snprintf(bgw.bgw_type, BGW_MAXLEN, IDX_LAUNCHER_TYPE);
	RegisterBackgroundWorker(&bgw);
}

/*
 * The signal handlers every worker shares: SIGHUP reloads the
 * configuration at the loop top, SIGTERM ends the worker at its next
 * CHECK_FOR_INTERRUPTS.
 */
static void
worker_setup_signals(void)
{
	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();
}

/*
 * Loop top of every worker: interrupts (SIGTERM), configuration reload.
 */
static void
worker_loop_top(void)
{
	CHECK_FOR_INTERRUPTS();
	if (ConfigReloadPending)
	{
		ConfigReloadPending = false;
		ProcessConfigFile(PGC_SIGHUP);
	}
}

/*
 * Sleep until the latch is set or timeout_ms pass.
 */
static void
worker_sleep(long timeout_ms)
{
	(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
					 Max(timeout_ms, 1), PG_WAIT_EXTENSION);
	ResetLatch(MyLatch);
}

/* ----------------------------------------------------------------
 *		The launcher
 * ----------------------------------------------------------------
 */

/*
 * RegisterDynamicBackgroundWorker, with the handle in TopMemoryContext:
 * it outlives the transaction the worker may be started in.
 */
static bool
register_worker(BackgroundWorker *bgw, BackgroundWorkerHandle **handle)
{
	MemoryContext oldcxt = MemoryContextSwitchTo(TopMemoryContext);
	bool		ok = RegisterDynamicBackgroundWorker(bgw, handle);

	MemoryContextSwitchTo(oldcxt);
	return ok;
}

/*
 * The OIDs of the databases a worker may connect to (not templates, not
 * half-dropped), read from pg_database in "cxt".
 */
static List *
launcher_read_databases(MemoryContext cxt)
{
	List	   *dbids = NIL;
	Relation	rel;
	TableScanDesc scan;
	HeapTuple	tup;

	StartTransactionCommand();
	(void) GetTransactionSnapshot();
	rel = table_open(DatabaseRelationId, AccessShareLock);
	scan = table_beginscan_catalog(rel, 0, NULL);
	while ((tup = heap_getnext(scan, ForwardScanDirection)) != NULL)
	{
		Form_pg_database db = (Form_pg_database) GETSTRUCT(tup);
		MemoryContext oldcxt;

		if (!db->datallowconn || db->datistemplate ||
			database_is_invalid_form(db))
			continue;
		oldcxt = MemoryContextSwitchTo(cxt);
		dbids = lappend_oid(dbids, db->oid);
		MemoryContextSwitchTo(oldcxt);
	}
	table_endscan(scan);
	table_close(rel, AccessShareLock);
	CommitTransactionCommand();
	return dbids;
}

/*
 * Start a database worker for "db"; false if no worker slot is free
 * (max_worker_processes), which is said once until it works again.
 */
static bool
launcher_start_worker(LauncherDb *db)
{
	static bool warned = false;
	BackgroundWorker bgw;

	memset(&bgw, 0, sizeof(bgw));
	bgw.bgw_flags = BGWORKER_SHMEM_ACCESS |
		BGWORKER_BACKEND_DATABASE_CONNECTION;
	bgw.bgw_start_time = BgWorkerStart_RecoveryFinished;
	bgw.bgw_restart_time = BGW_NEVER_RESTART;
	snprintf(bgw.bgw_library_name, BGW_MAXLEN, "idxtable_fdw");
	snprintf(bgw.bgw_function_name, BGW_MAXLEN, "idx_database_worker_main");
	snprintf(bgw.bgw_name, BGW_MAXLEN, IDX_DBWORKER_TYPE " for database %u",
			 db->dbid);
	snprintf(bgw.bgw_type, BGW_MAXLEN, IDX_DBWORKER_TYPE);
	bgw.bgw_main_arg = ObjectIdGetDatum(db->dbid);
	bgw.bgw_notify_pid = MyProcPid;
	if (!register_worker(&bgw, &db->handle))
	{
		db->handle = NULL;
		if (!warned)
			ereport(WARNING,
					(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
					 errmsg("idxtable_fdw launcher could not start a database worker"),
					 errhint("Raise max_worker_processes.")));
		warned = true;
		return false;
	}
	warned = false;
	return true;
}

/*
 * Has database worker of "db" exited?  Then note when it may be started
 * again: after a naptime, or (no extension) at the next catalog change or
 * after NO_EXTENSION_NAPS naptimes.
 */
static void
launcher_check_worker(LauncherDb *db, TimestampTz now)
{
	pid_t		pid;
	TimestampTz dropping_at;

	if (db->handle == NULL ||
		GetBackgroundWorkerPid(db->handle, &pid) != BGWH_STOPPED)
		return;
	pfree(db->handle);
	db->handle = NULL;
	idx_sync_database_info(db->dbid, &db->generation, &db->no_extension,
						   &dropping_at);
	db->not_before = TimestampTzPlusMilliseconds(now,
												 (db->no_extension ? NO_EXTENSION_NAPS : 1) *
												 idx_launcher_naptime * 1000L);
}

/*
 * May a database worker for "db" start now?
 */
static bool
launcher_may_start(LauncherDb *db, TimestampTz now)
{
	uint64		generation;
	bool		no_extension;
	TimestampTz dropping_at;

	if (db->handle != NULL)
		return false;
	idx_sync_database_info(db->dbid, &generation, &no_extension,
						   &dropping_at);
	if (dropping_at != 0 &&
		now < TimestampTzPlusMilliseconds(dropping_at, DROPPING_SECS * 1000))
		return false;
	if (generation != db->generation)
		return true;			/* its definitions changed */
	return now >= db->not_before;
}

/*
 * The LauncherDb of "dbid" in "dbs", added if new.
 */
static LauncherDb *
launcher_find_db(List **dbs, Oid dbid)
{
	ListCell   *lc;
	LauncherDb *db;

	foreach(lc, *dbs)
	{
		db = (LauncherDb *) lfirst(lc);
		if (db->dbid == dbid)
			return db;
	}
	db = (LauncherDb *) MemoryContextAllocZero(TopMemoryContext,
											   sizeof(LauncherDb));
	db->dbid = dbid;
	*dbs = lappend(*dbs, db);
	return db;
}

/*
 * One pass of the launcher: start the database workers that are due;
 * forget the databases that are gone (and their appliers' slots).
 */
static void
launcher_pass(List **dbs, MemoryContext passcxt)
{
	TimestampTz now = GetCurrentTimestamp();
	List	   *dbids = launcher_read_databases(passcxt);
	ListCell   *lc;

	foreach(lc, *dbs)
		((LauncherDb *) lfirst(lc))->seen = false;
	foreach(lc, dbids)
		launcher_find_db(dbs, lfirst_oid(lc))->seen = true;

	foreach(lc, *dbs)
	{
		LauncherDb *db = (LauncherDb *) lfirst(lc);

		launcher_check_worker(db, now);
		if (!db->seen && db->handle == NULL)
		{
			idx_sync_forget_database(db->dbid);
			*dbs = foreach_delete_current(*dbs, lc);
			pfree(db);
		}
		else if (db->seen && launcher_may_start(db, now))
		{
			if (!launcher_start_worker(db))
				break;
		}
	}
	MemoryContextReset(passcxt);
}

/*
 * Main of the launcher.
 */
void
idx_launcher_main(Datum main_arg)
{
	List	   *dbs = NIL;
	MemoryContext passcxt;

	worker_setup_signals();
	BackgroundWorkerInitializeConnection(NULL, NULL, 0);
	pgstat_report_appname(IDX_LAUNCHER_TYPE);
	idx_sync_attach_launcher();
	passcxt = AllocSetContextCreate(TopMemoryContext, "idxtable_fdw launcher",
									ALLOCSET_DEFAULT_SIZES);
	ereport(LOG, (errmsg("idxtable_fdw launcher started")));

	for (;;)
	{
		worker_loop_top();
		launcher_pass(&dbs, passcxt);
		worker_sleep(idx_launcher_naptime * 1000L);
	}
}

/* ----------------------------------------------------------------
 *		The database worker
 * ----------------------------------------------------------------
 */

/*
 * Is idxtable_fdw installed in this database?  (In a transaction.)
 */
static bool
dbworker_has_extension(void)
{
	return OidIsValid(get_extension_oid("idxtable_fdw", true));
}

/*
 * The name of foreign server "serverid", or its OID if it is gone.  In a
 * transaction.
 */
static char *
server_name(Oid serverid)
{
	ForeignServer *server = GetForeignServerExtended(serverid,
													 FSV_MISSING_OK);

	return server ? server->servername : psprintf("%u", serverid);
}

/*
 * Mark, in dbw_slots, the slots of the (server, owner) pairs that have
 * index tables that are not failed (claiming a slot for each), or return
 * false if the extension is gone.  Servers with change_streams 'off' get
 * no applier.  In a transaction, through SPI.
 */
static bool
dbworker_read_pairs(void)
{
	static bool warned = false;
	uint64		i;
	int			ret;

	if (!dbworker_has_extension())
		return false;
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	ret = SPI_execute("SELECT DISTINCT ft.ftserver, c.relowner, s.srvoptions"
					  "  FROM idxtable.index_defs d"
					  "  JOIN pg_catalog.pg_foreign_table ft"
					  "    ON ft.ftrelid OPERATOR(pg_catalog.=) d.tbl::pg_catalog.oid"
					  "  JOIN pg_catalog.pg_class c"
					  "    ON c.oid OPERATOR(pg_catalog.=) ft.ftrelid"
					  "  JOIN pg_catalog.pg_foreign_server s"
					  "    ON s.oid OPERATOR(pg_catalog.=) ft.ftserver"
					  " WHERE d.state OPERATOR(pg_catalog.<>) 'failed'",
					  true, 0);
	if (ret != SPI_OK_SELECT)
		elog(ERROR, "reading the index tables failed: %s",
			 SPI_result_code_string(ret));
	for (i = 0; i < SPI_processed; i++)
	{
		bool		isnull;
		Oid			serverid = DatumGetObjectId(SPI_getbinval(SPI_tuptable->vals[i],
															  SPI_tuptable->tupdesc, 1, &isnull));
		Oid			ownerid = DatumGetObjectId(SPI_getbinval(SPI_tuptable->vals[i],
															 SPI_tuptable->tupdesc, 2, &isnull));
		Datum		srvoptions = SPI_getbinval(SPI_tuptable->vals[i],
											   SPI_tuptable->tupdesc, 3,
											   &isnull);
		int			slotno;

		if (!idx_srvoptions_change_streams(isnull ? (Datum) 0 : srvoptions))
			continue;			/* change_streams 'off': no applier */
		slotno = idx_sync_claim_slot(MyDatabaseId, serverid, ownerid);
		if (slotno < 0)
		{
			if (!warned)
				ereport(WARNING,
						(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
						 errmsg("index tables of foreign server \"%s\" are not maintained because %d appliers run already",
								server_name(serverid),
								IDX_SYNC_MAX_APPLIERS)));
			warned = true;
			continue;
		}
		dbw_slots[slotno].in_use = true;
		dbw_slots[slotno].wanted = true;
	}
	SPI_finish();
	return true;
}

/*
 * The pid in slot "slotno" if that process still exists (an applier of a
 * previous database worker, on its way out), else 0.
 */
static pid_t
dbworker_leftover_pid(int slotno)
{
	IdxApplierSlot *slot = idx_sync_slot(slotno);
	pid_t		pid;

	SpinLockAcquire(&slot->mutex);
	pid = slot->pid;
	SpinLockRelease(&slot->mutex);
	if (pid != 0 && kill(pid, 0) != 0)
	{
		SpinLockAcquire(&slot->mutex);
		if (slot->pid == pid)
			slot->pid = 0;
		SpinLockRelease(&slot->mutex);
		pid = 0;
	}
	return pid;
}

/*
 * Set the state of slot "slotno" (and count a restart).
 */
static void
dbworker_set_state(int slotno, IdxApplierState state, bool restart)
{
	IdxApplierSlot *slot = idx_sync_slot(slotno);

	SpinLockAcquire(&slot->mutex);
	slot->state = state;
	if (state != IDX_APPLIER_RUNNING)
		slot->pid = 0;
	if (restart)
		slot->restarts++;
	SpinLockRelease(&slot->mutex);
	ConditionVariableBroadcast(&slot->applied_cv);
}

/*
 * Start the applier of slot "slotno".  False if no worker process is
 * free (tried again later).
 */
static bool
dbworker_start_applier(int slotno, TimestampTz now)
{
	DbWorkerSlot *ws = &dbw_slots[slotno];
	IdxApplierSlot *slot = idx_sync_slot(slotno);
	BackgroundWorker bgw;
	char	   *servername = server_name(slot->serverid);

	memset(&bgw, 0, sizeof(bgw));
	bgw.bgw_flags = BGWORKER_SHMEM_ACCESS |
		BGWORKER_BACKEND_DATABASE_CONNECTION;
	bgw.bgw_start_time = BgWorkerStart_RecoveryFinished;
	bgw.bgw_restart_time = BGW_NEVER_RESTART;
	snprintf(bgw.bgw_library_name, BGW_MAXLEN, "idxtable_fdw");
	snprintf(bgw.bgw_function_name, BGW_MAXLEN, "idx_applier_main");
	snprintf(bgw.bgw_name, BGW_MAXLEN, IDX_APPLIER_TYPE " for server %s",
			 servername);
	snprintf(bgw.bgw_type, BGW_MAXLEN, IDX_APPLIER_TYPE);
	bgw.bgw_main_arg = Int32GetDatum(slotno);
	bgw.bgw_notify_pid = MyProcPid;

	dbworker_set_state(slotno, IDX_APPLIER_STARTING, false);
	if (!register_worker(&bgw, &ws->handle))
	{
		ws->handle = NULL;
		ws->restart_at = TimestampTzPlusMilliseconds(now, RESTART_MAX_MS);
		ereport(WARNING,
				(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
				 errmsg("could not start the idxtable_fdw applier for foreign server \"%s\"",
						servername),
				 errhint("Raise max_worker_processes.")));
		return false;
	}
	ws->started_at = now;
	if (ws->attempts == 0)
		ereport(LOG,
				(errmsg("idxtable_fdw applier for foreign server \"%s\" started",
						servername)));
	else
	{
		/* a lasting failure: attempts 1, 2, 4, 8, ... at LOG, the rest less */
		ereport((ws->attempts & (ws->attempts - 1)) == 0 ? LOG : DEBUG1,
				(errmsg("idxtable_fdw applier for foreign server \"%s\" restarted after a failure (attempt %d)",
						servername, ws->attempts)));
	}
	return true;
}

/*
 * The applier of slot "slotno" has exited: restart it after a delay that
 * doubles while it keeps failing quickly.
 */
static void
dbworker_applier_exited(int slotno, TimestampTz now)
{
	DbWorkerSlot *ws = &dbw_slots[slotno];

	pfree(ws->handle);
	ws->handle = NULL;
	if (ws->stopping)
		return;
	if (TimestampDifferenceExceeds(ws->started_at, now, QUICK_FAILURE_MS))
		ws->backoff_ms = RESTART_MIN_MS;
	ws->restart_at = TimestampTzPlusMilliseconds(now, ws->backoff_ms);
	ws->backoff_ms = Min(ws->backoff_ms * 2, RESTART_MAX_MS);
	ws->attempts++;
	dbworker_set_state(slotno, IDX_APPLIER_WAITING, true);
}

/*
 * One slot of ours, after the pairs were read: start, restart, stop or
 * free it.  "stable" says the catalog did not change during the read (a
 * slot not wanted may be freed).
 */
static void
dbworker_reconcile_slot(int slotno, bool stable, TimestampTz now)
{
	DbWorkerSlot *ws = &dbw_slots[slotno];
	pid_t		pid;

	if (ws->handle != NULL &&
		GetBackgroundWorkerPid(ws->handle, &pid) == BGWH_STOPPED)
		dbworker_applier_exited(slotno, now);

	if (ws->wanted)
	{
		ws->stopping = false;
		if (ws->handle == NULL && now >= ws->restart_at &&
			dbworker_leftover_pid(slotno) == 0)
			dbworker_start_applier(slotno, now);
	}
	else if (stable && ws->handle != NULL && !ws->stopping)
	{
		/*
		 * no index table left, or change_streams 'off': stop it, free the
		 * slot once it is gone
		 */
		ereport(LOG,
				(errmsg("idxtable_fdw applier for foreign server \"%s\" stops: no index table is left to maintain, or the server's option change_streams is off",
						server_name(idx_sync_slot(slotno)->serverid))));
		TerminateBackgroundWorker(ws->handle);
		ws->stopping = true;
		dbworker_set_state(slotno, IDX_APPLIER_STOPPED, false);
	}
	else if (stable && ws->handle == NULL)
	{
		idx_sync_release_slot(slotno);
		memset(ws, 0, sizeof(DbWorkerSlot));
	}
}

/*
 * Adopt the slots of this database claimed by others (create_index's
 * idx_sync_expect_applier, a previous database worker), so that they
 * are started or freed like ours.
 */
static void
dbworker_adopt_slots(void)
{
	int			i;

	for (i = 0; i < IDX_SYNC_MAX_APPLIERS; i++)
	{
		IdxApplierSlot *slot = idx_sync_slot(i);
		bool		ours;

		SpinLockAcquire(&slot->mutex);
		ours = slot->state != IDX_APPLIER_FREE &&
			slot->dbid == MyDatabaseId;
		SpinLockRelease(&slot->mutex);
		if (ours && !dbw_slots[i].in_use)
		{
			memset(&dbw_slots[i], 0, sizeof(DbWorkerSlot));
			dbw_slots[i].in_use = true;
			dbw_slots[i].backoff_ms = RESTART_MIN_MS;
		}
	}
}

/*
 * One pass of the database worker; false if the extension is gone.
 * Returns in *next_ms when it wants to run again (a restart due).
 */
static bool
dbworker_pass(long *next_ms)
{
	uint64		generation = idx_sync_catalog_generation(MyDatabaseId);
	TimestampTz now;
	bool		stable;
	bool		present;
	int			i;

	dbworker_adopt_slots();
	for (i = 0; i < IDX_SYNC_MAX_APPLIERS; i++)
		dbw_slots[i].wanted = false;

	StartTransactionCommand();
	PushActiveSnapshot(GetTransactionSnapshot());
	present = dbworker_read_pairs();
	stable = generation == idx_sync_catalog_generation(MyDatabaseId);
	now = GetCurrentTimestamp();
	*next_ms = idx_launcher_naptime * 1000L;
	for (i = 0; i < IDX_SYNC_MAX_APPLIERS; i++)
	{
		DbWorkerSlot *ws = &dbw_slots[i];

		if (!ws->in_use)
			continue;
		if (ws->backoff_ms == 0)
			ws->backoff_ms = RESTART_MIN_MS;
		dbworker_reconcile_slot(i, stable && present, now);
		if (ws->in_use && ws->wanted && ws->handle == NULL)
			*next_ms = Min(*next_ms,
						   Max(TimestampDifferenceMilliseconds(now, ws->restart_at),
							   100));
	}
	PopActiveSnapshot();
	CommitTransactionCommand();
	pgstat_report_stat(false);
	return present;
}

/*
 * before_shmem_exit of the database worker: terminate its appliers (no
 * one else would restart or stop them); their slots wait (WAITING),
 * without a process, for the next database worker.
 */
static void
dbworker_exit(int code, Datum arg)
{
	int			i;

	for (i = 0; i < IDX_SYNC_MAX_APPLIERS; i++)
	{
		if (dbw_slots[i].handle != NULL)
			TerminateBackgroundWorker(dbw_slots[i].handle);
		if (dbw_slots[i].in_use && !dbw_slots[i].stopping)
		{
			IdxApplierSlot *slot = idx_sync_slot(i);

			/* the pid stays: the next worker waits until it is gone */
			SpinLockAcquire(&slot->mutex);
			slot->state = IDX_APPLIER_WAITING;
			SpinLockRelease(&slot->mutex);
			ConditionVariableBroadcast(&slot->applied_cv);
		}
	}
}

/*
 * The extension is gone: stop every applier of ours, wait until it has
 * exited, and free its slot.
 */
static void
dbworker_stop_all(void)
{
	int			i;

	for (i = 0; i < IDX_SYNC_MAX_APPLIERS; i++)
	{
		DbWorkerSlot *ws = &dbw_slots[i];

		if (!ws->in_use)
			continue;
		if (ws->handle != NULL)
		{
			TerminateBackgroundWorker(ws->handle);
			(void) WaitForBackgroundWorkerShutdown(ws->handle);
			pfree(ws->handle);
			ws->handle = NULL;
		}
		idx_sync_release_slot(i);
		ws->in_use = false;
	}
}

/*
 * Main of a database worker; main_arg is the database's OID.
 */
void
idx_database_worker_main(Datum main_arg)
{
	Oid			dbid = DatumGetObjectId(main_arg);
	char	   *dbname;
	bool		present;
	long		next_ms;

	worker_setup_signals();
	BackgroundWorkerInitializeConnectionByOid(dbid, InvalidOid, 0);
	pgstat_report_appname(IDX_DBWORKER_TYPE);
	SetConfigOption("search_path", "pg_catalog, pg_temp",
					PGC_SUSET, PGC_S_OVERRIDE);

	StartTransactionCommand();
	present = dbworker_has_extension();
	dbname = MemoryContextStrdup(TopMemoryContext, get_database_name(dbid));
	CommitTransactionCommand();
	if (!present)
	{
		idx_sync_database_no_extension(dbid);
		proc_exit(0);
	}

	idx_sync_attach_database_worker(dbid);
	before_shmem_exit(dbworker_exit, (Datum) 0);
	ereport(LOG,
			(errmsg("idxtable_fdw database worker started for database \"%s\"",
					dbname)));

	for (;;)
	{
		worker_loop_top();
		if (!dbworker_pass(&next_ms))
			break;
		worker_sleep(next_ms);
	}

	/* the extension is gone: so are the appliers and their slots */
	dbworker_stop_all();
	idx_sync_database_no_extension(dbid);
	ereport(LOG,
			(errmsg("idxtable_fdw database worker for database \"%s\" exits because the extension was dropped",
					dbname)));
	proc_exit(0);
}
