/*-------------------------------------------------------------------------
 *
 * sync_notify.c
 *		  Telling the applier's workers about catalog changes: at the commit
 *		  of index DDL, when a foreign table or the extension is dropped,
 *		  and when DROP DATABASE begins.
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/sync/sync_notify.c
 *
 * Index DDL (create_index, drop_index, state changes) notes the foreign
 * table it changed; at commit (idx_ddl_at_commit, after PostgreSQL's
 * commit, so that the workers' next snapshot sees the change) the slot of
 * each (server, owner) an index was created for is claimed, so that
 * readers know an applier is coming before its process exists, and the
 * database's catalog generation is bumped, which wakes the launcher, the
 * database worker and the appliers.  An abort forgets the notes.
 *
 * DROP FOREIGN TABLE of a table with index tables is index DDL too: the
 * event trigger that deletes its definitions fires the row trigger of
 * idxtable.index_defs, which notes the change (index_catalog.c).  The drop
 * of any other foreign table (a temporary one of a session, say) concerns
 * no applier and tells nobody: appliers reload and reopen their streams
 * only for tables with index tables.
 *
 * An object access hook (installed only when preloaded) catches what
 * index DDL does not see: DROP EXTENSION marks the transaction's catalog
 * changed, and so does ALTER SERVER of one of our servers (its option
 * change_streams starts or stops its appliers); DROP DATABASE asks our
 * workers in that database to exit at
 * once, since it waits only 5 s for the database's other sessions.  The
 * other commands that need a database to themselves (ALTER DATABASE
 * RENAME and SET TABLESPACE, CREATE DATABASE from it as a template) have
 * no such hook before their check: a ProcessUtility hook asks the
 * workers to leave when the database's owner runs one of them.
 *
 * Room.  Before create_index builds an index table that an applier is to
 * maintain, sync_index_room() checks that the shared status table has
 * room for it (an ERROR if not, rather than an index table without status
 * whose routed reads and unique writes would fail), and counts the index
 * tables the table's owner has in other databases, for the per-role limit
 * (index_limits.c).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "catalog/objectaccess.h"
#include "commands/dbcommands.h"
#include "commands/defrem.h"
#include "catalog/pg_class.h"
#include "catalog/pg_database.h"
#include "catalog/pg_extension.h"
#include "catalog/pg_foreign_server.h"
#include "foreign/foreign.h"
#include "miscadmin.h"
#include "tcop/utility.h"
#include "utils/acl.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/syscache.h"

#include "core/option.h"
#include "core/pg_compat.h"
#include "core/xact.h"
#include "index/index_ddl.h"
#include "index/index_notify.h"
#include "module.h"
#include "sync/sync_state.h"
#include "sync/sync_workers.h"

/* (server, owner) pairs that got a new index in this transaction */
typedef struct ExpectedApplier
{
	Oid			serverid;
	Oid			ownerid;
} ExpectedApplier;

static List *expected_appliers = NIL;	/* in TopTransactionContext */
static bool catalog_dirty = false;

static object_access_hook_type prev_object_access_hook = NULL;
static ProcessUtility_hook_type prev_process_utility = NULL;

/*
 * The owner of relation "relid".
 */
static Oid
relation_owner(Oid relid)
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
 * Index DDL changed the index tables of foreign table "relid": tell the
 * workers at commit.  "expect_applier": an index is maintained from then
 * on, so its applier's slot is claimed at commit.
 */
void
idx_sync_note_change(Oid relid, bool expect_applier)
{
	if (!idx_sync_enabled())
		return;
	catalog_dirty = true;
	if (expect_applier)
	{
		MemoryContext oldcxt = MemoryContextSwitchTo(TopTransactionContext);
		ExpectedApplier *e = palloc(sizeof(ExpectedApplier));

		e->serverid = GetForeignTable(relid)->serverid;
		e->ownerid = relation_owner(relid);
		/* a server with change_streams 'off' gets no applier */
		if (idx_server_change_streams(GetForeignServer(e->serverid)))
			expected_appliers = lappend(expected_appliers, e);
		MemoryContextSwitchTo(oldcxt);
	}
}

/*
 * After PostgreSQL's commit: claim the expected appliers' slots and wake
 * the workers.  Never throws (a full slot table is a WARNING).
 */
void
idx_sync_at_commit(void)
{
	ListCell   *lc;

	if (catalog_dirty && idx_sync_enabled())
	{
		foreach(lc, expected_appliers)
		{
			ExpectedApplier *e = (ExpectedApplier *) lfirst(lc);

			idx_sync_expect_applier(MyDatabaseId, e->serverid, e->ownerid);
		}
		idx_sync_catalog_changed(MyDatabaseId);
	}
	idx_sync_at_abort();
}

/*
 * At abort (and after the commit's work): forget the notes; their memory
 * goes with the transaction.
 */
void
idx_sync_at_abort(void)
{
	expected_appliers = NIL;
	catalog_dirty = false;
}

/*
 * Is foreign server "serverid" one of idxtable_fdw's (its wrapper's
 * handler is ours, whatever the wrapper is called)?
 */
static bool
server_is_ours(Oid serverid)
{
	ForeignServer *server = GetForeignServerExtended(serverid,
													 FSV_MISSING_OK);

	return server != NULL && idx_fdw_is_ours(server->fdwid);
}

/*
 * idx_index_room_hook: may create_index build index table "name" of
 * foreign table "relid" (owned by "ownerid")?  An ERROR if the shared
 * status table is full: the status entries of the other databases and the
 * "here" index tables (not failed) of this one, whose appliers may not
 * have picked all of them up yet (this transaction's new ones included).
 * Returns the index tables that the appliers of other databases maintain
 * for the owner.  An index table that no applier is to maintain
 * (change_streams 'off') needs no room.
 */
static int
sync_index_room(Oid relid, Oid ownerid, const char *name, int here)
{
	ForeignServer *server;
	int			elsewhere;
	int			others;

	if (!idx_sync_enabled())
		return 0;
	server = GetForeignServer(GetForeignTable(relid)->serverid);
	if (!idx_server_change_streams(server))
		return 0;
	idx_sync_index_counts(MyDatabaseId, ownerid, &elsewhere, &others);
	if (elsewhere + here >= IDX_SYNC_MAX_INDEXES)
		ereport(ERROR,
				(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
				 errmsg("cannot create index table \"%s\": the change-stream appliers maintain %d index tables, the most they can",
						name, IDX_SYNC_MAX_INDEXES),
				 errdetail("The status of every maintained index table, of all databases of the cluster, is kept in shared memory of a fixed size."),
				 errhint("Drop index tables that are no longer needed.")));
	return others;
}

/*
 * object_access_hook: drops that concern the workers, and ALTER SERVER of
 * one of our servers (its option change_streams starts or stops its
 * appliers).
 */
static void
sync_object_access(ObjectAccessType access, Oid classId, Oid objectId,
				   int subId, void *arg)
{
	if (prev_object_access_hook)
		prev_object_access_hook(access, classId, objectId, subId, arg);
	if (access == OAT_POST_ALTER && classId == ForeignServerRelationId &&
		server_is_ours(objectId))
	{
		catalog_dirty = true;
		return;
	}
	if (access != OAT_DROP)
		return;
	if (classId == DatabaseRelationId)
		idx_sync_database_exclusive(objectId);
	else if (classId == ExtensionRelationId)
		catalog_dirty = true;
}

/*
 * The value of option "name" in a statement's options, or NULL.
 */
static const char *
option_value(List *options, const char *name)
{
	ListCell   *lc;

	foreach(lc, options)
	{
		DefElem    *def = (DefElem *) lfirst(lc);

		if (strcmp(def->defname, name) == 0 && def->arg != NULL)
			return defGetString(def);
	}
	return NULL;
}

/*
 * The database a utility statement needs without other sessions (see the
 * head of this file), or InvalidOid.
 */
static Oid
exclusive_database(Node *stmt)
{
	const char *dbname = NULL;

	if (IsA(stmt, RenameStmt) &&
		((RenameStmt *) stmt)->renameType == OBJECT_DATABASE)
		dbname = ((RenameStmt *) stmt)->subname;
	else if (IsA(stmt, AlterDatabaseStmt) &&
			 option_value(((AlterDatabaseStmt *) stmt)->options,
						  "tablespace") != NULL)
		dbname = ((AlterDatabaseStmt *) stmt)->dbname;
	else if (IsA(stmt, CreatedbStmt))
		dbname = option_value(((CreatedbStmt *) stmt)->options, "template");
	return dbname ? get_database_oid(dbname, true) : InvalidOid;
}

/*
 * ProcessUtility_hook: before a command that needs a database to itself,
 * ask our workers there to leave (its owner's commands only, so that no
 * one else can stop them at will).
 */
static void
sync_process_utility(PlannedStmt *pstmt, const char *queryString,
					 bool readOnlyTree, ProcessUtilityContext context,
					 ParamListInfo params, QueryEnvironment *queryEnv,
					 DestReceiver *dest, QueryCompletion *qc)
{
	Oid			dbid = exclusive_database(pstmt->utilityStmt);

	if (OidIsValid(dbid) && object_ownercheck(DatabaseRelationId, dbid, GetUserId()))
		idx_sync_database_exclusive(dbid);
	if (prev_process_utility)
		prev_process_utility(pstmt, queryString, readOnlyTree, context,
							 params, queryEnv, dest, qc);
	else
		standard_ProcessUtility(pstmt, queryString, readOnlyTree, context,
								params, queryEnv, dest, qc);
}

/*
 * Install the hooks (from _PG_init when preloaded).
 */
void
idx_sync_install_object_hook(void)
{
	prev_object_access_hook = object_access_hook;
	object_access_hook = sync_object_access;
	idx_index_change_hook = idx_sync_note_change;
	idx_index_room_hook = sync_index_room;
	prev_process_utility = ProcessUtility_hook;
	ProcessUtility_hook = sync_process_utility;
}
