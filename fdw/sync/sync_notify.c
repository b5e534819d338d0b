/*-------------------------------------------------------------------------
 *
 * sync_notify.c
 *		  Telling the applier's workers about catalog changes: at the commit
 *		  of index DDL, when a foreign table or the extension is dropped,
 *		  and when DROP DATABASE begins.
 *
 * Index DDL (create_index, drop_index, state changes) notes the foreign
 * table it changed; at commit (idx_ddl_at_commit, after PostgreSQL's
 * commit, so that the workers' next snapshot sees the change) the slot of
 * each (server, owner) an index was created for is claimed, so that
 * readers know an applier is coming before its process exists, and the
 * database's catalog generation is bumped, which wakes the launcher, the
 * database worker and the appliers.  An abort forgets the notes.
 *
 * An object access hook (installed only when preloaded) catches what
 * index DDL does not see: DROP FOREIGN TABLE (whose definitions an event
 * trigger deletes) and DROP EXTENSION mark the transaction's catalog
 * changed; DROP DATABASE asks our workers in that database to exit at
 * once, since it waits only 5 s for the database's other sessions.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "catalog/objectaccess.h"
#include "catalog/pg_class.h"
#include "catalog/pg_database.h"
#include "catalog/pg_extension.h"
#include "foreign/foreign.h"
#include "miscadmin.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/syscache.h"

#include "sync_state.h"
#include "sync_workers.h"
#include "xact.h"

/* (server, owner) pairs that got a new index in this transaction */
typedef struct ExpectedApplier
{
	Oid			serverid;
	Oid			ownerid;
} ExpectedApplier;

static List *expected_appliers = NIL;	/* in TopTransactionContext */
static bool catalog_dirty = false;

static object_access_hook_type prev_object_access_hook = NULL;

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
	idx_xact_register_callbacks();
	catalog_dirty = true;
	if (expect_applier)
	{
		MemoryContext oldcxt = MemoryContextSwitchTo(TopTransactionContext);
		ExpectedApplier *e = palloc(sizeof(ExpectedApplier));

		e->serverid = GetForeignTable(relid)->serverid;
		e->ownerid = relation_owner(relid);
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
 * object_access_hook: drops that concern the workers.
 */
static void
sync_object_access(ObjectAccessType access, Oid classId, Oid objectId,
				   int subId, void *arg)
{
	if (prev_object_access_hook)
		prev_object_access_hook(access, classId, objectId, subId, arg);
	if (access != OAT_DROP)
		return;
	if (classId == DatabaseRelationId)
		idx_sync_database_dropping(objectId);
	else if (classId == ExtensionRelationId ||
			 (classId == RelationRelationId && subId == 0 &&
			  get_rel_relkind(objectId) == RELKIND_FOREIGN_TABLE))
	{
		idx_xact_register_callbacks();
		catalog_dirty = true;
	}
}

/*
 * Install the object access hook (from _PG_init when preloaded).
 */
void
idx_sync_install_object_hook(void)
{
	prev_object_access_hook = object_access_hook;
	object_access_hook = sync_object_access;
}
