/*-------------------------------------------------------------------------
 *
 * index_limits.c
 *		  What one role may create: the refusals and limits create_index
 *		  checks before it builds anything, and drop_index of a definition
 *		  whose foreign table is gone.
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/index/index_limits.c
 *
 * Every maintained index table takes one status entry in the shared memory
 * of the change-stream applier (sync_state.h, IDX_SYNC_MAX_INDEXES for the
 * whole cluster), and one index collection in MongoDB.  Any role with USAGE
 * on a foreign server can create foreign tables and index tables, so
 * without a limit of its own one role could take every status entry, and
 * the next role's new unique index would have none (its writes would fail
 * with IX001).  create_index therefore counts, before it builds, the index
 * tables of the table's owner: those of this database (not failed) and
 * those the appliers of other databases maintain for it (from the shared
 * state, through idx_index_room_hook); at idxtable.max_index_tables_per_role
 * it fails with 53400.  The limit is the table owner's, as the applier and
 * its user mapping are: a superuser creating an index on another role's
 * table counts against that role.  Tables owned by a superuser are exempt:
 * a superuser can change the setting anyway, and the limit exists to keep
 * roles from crowding each other out, not the administrator.  The cluster's
 * total is checked by the hook for everybody, superusers included: an
 * index table without a status entry is an error at create_index, not a
 * stream of WARNINGs later.  It counts this database's definitions (not
 * failed) rather than its status entries, which the appliers create only
 * once they have picked a new index table up, and the status entries of the
 * other databases.  Neither check locks out a concurrent
 * create_index of another table: two of them may pass together, so the
 * limit can be exceeded by the number of concurrent creators.
 *
 * Temporary foreign tables.  A session's temporary tables are dropped when
 * it ends without the event trigger that deletes the definitions of a
 * dropped table (PostgreSQL fires no event triggers for that cleanup), so
 * their definitions would outlive them, holding their names and index
 * collections.  create_index refuses them (0A000).  A definition whose
 * table is gone (one of a temporary table made before that refusal, or of
 * a table dropped while the event trigger was disabled) has no owner left
 * to check: only a superuser may drop it, and then only the definition
 * goes; its collection stays in MongoDB (its server is unknown), and the
 * next create_index of that name in this database takes it over
 * (index_owner.c).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <limits.h>

#include "catalog/pg_class.h"
#include "catalog/pg_type.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/rel.h"
#include "utils/syscache.h"

#include "index/index_ddl.h"

/* idxtable.max_index_tables_per_role */
int			idx_max_index_tables_per_role = 100;

/* Set by the change-stream workers' code when preloaded (sync_notify.c) */
IdxIndexRoomHook idx_index_room_hook = NULL;

/*
 * Define idxtable.max_index_tables_per_role (from _PG_init, preloaded or
 * not).  PGC_SIGHUP: one value for the cluster, set in postgresql.conf (or
 * ALTER SYSTEM) by its administrator; no session can raise its own.
 */
void
idx_define_limit_gucs(void)
{
	DefineCustomIntVariable("idxtable.max_index_tables_per_role",
							"Sets the most index tables the foreign tables of one role may have.",
							"Counted per table owner: the index tables (not failed) of its foreign "
							"tables in the database, and those the appliers of other databases "
							"maintain for it.  Tables owned by superusers are exempt.",
							&idx_max_index_tables_per_role,
							100, 0, INT_MAX,
							PGC_SIGHUP,
							0,
							NULL, NULL, NULL);
}

/*
 * The index tables, not failed, of the foreign tables that "ownerid" owns
 * in this database (all of them for InvalidOid), counted up to "limit" +
 * 1.  The transaction's own new definitions are counted too.
 */
static int
owned_index_tables(Oid ownerid, int limit)
{
	Oid			argtypes[2] = {OIDOID, INT8OID};
	Datum		args[2];

	args[0] = ObjectIdGetDatum(ownerid);
	args[1] = Int64GetDatum((int64) limit + 1);
	return (int) idx_catalog_execute("SELECT 1 FROM idxtable.index_defs d "
									 "JOIN pg_catalog.pg_class c "
									 "ON c.oid OPERATOR(pg_catalog.=) "
									 "d.tbl::pg_catalog.oid "
									 "WHERE ($1 OPERATOR(pg_catalog.=) 0 "
									 "OR c.relowner OPERATOR(pg_catalog.=) $1) "
									 "AND d.state OPERATOR(pg_catalog.<>) 'failed' "
									 "LIMIT $2",
									 2, argtypes, args, NULL, NULL, NULL);
}

/*
 * Refuse index table "name" on the open (locked) foreign table "rel" if
 * the table is temporary, if its owner is at
 * idxtable.max_index_tables_per_role, or if the appliers have no room left
 * (see the file header).
 */
void
idx_check_new_index(Relation rel, const char *name)
{
	Oid			ownerid = rel->rd_rel->relowner;
	int			others = 0;
	int			owned;

	if (rel->rd_rel->relpersistence == RELPERSISTENCE_TEMP)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("cannot create index table \"%s\" on temporary foreign table \"%s\"",
						name, RelationGetRelationName(rel)),
				 errdetail("A temporary table is dropped at the end of its session without the event trigger that drops its index definitions, which would outlive it."),
				 errhint("Create the foreign table in a permanent schema.")));

	if (idx_index_room_hook)
		others = idx_index_room_hook(RelationGetRelid(rel), ownerid, name,
									 owned_index_tables(InvalidOid,
														INT_MAX - 1));
	if (superuser_arg(ownerid))
		return;
	owned = others + owned_index_tables(ownerid, idx_max_index_tables_per_role);
	if (owned >= idx_max_index_tables_per_role)
		ereport(ERROR,
				(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
				 errmsg("cannot create index table \"%s\": role \"%s\" has reached idxtable.max_index_tables_per_role (%d)",
						name, GetUserNameFromId(ownerid, false),
						idx_max_index_tables_per_role),
				 errdetail("Counted are the index tables, not failed, of the foreign tables the role owns in this database, and those the appliers of other databases maintain for it: %d.",
						   owned),
				 errhint("Drop index tables the role no longer needs, or ask the administrator to raise idxtable.max_index_tables_per_role.")));
}

/*
 * drop_index("name") of a definition whose foreign table no longer exists:
 * false if there is no such definition or its table exists (drop_index
 * goes on as usual).  Otherwise only a superuser may drop it (no role can
 * be shown to own it); the definition goes, and its collection stays, with
 * a WARNING (see the file header).
 */
bool
idx_drop_orphan_definition(const char *name)
{
	Oid			argtypes[2] = {TEXTOID, OIDOID};
	Datum		args[2];
	Oid			relid;
	char	   *collection;

	if (!idx_lookup_index(name, &relid, &collection) ||
		SearchSysCacheExists1(RELOID, ObjectIdGetDatum(relid)))
		return false;
	if (!superuser())
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied to drop index \"%s\"", name),
				 errdetail("Its foreign table (OID %u) no longer exists, so only a superuser may drop it.",
						   relid)));
	args[0] = CStringGetTextDatum(name);
	args[1] = ObjectIdGetDatum(relid);
	if (idx_catalog_execute("DELETE FROM idxtable.index_defs "
							"WHERE name OPERATOR(pg_catalog.=) $1 "
							"AND tbl::pg_catalog.oid OPERATOR(pg_catalog.=) $2",
							2, argtypes, args, NULL, NULL, NULL) == 0)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("index \"%s\" does not exist", name)));
	ereport(WARNING,
			(errmsg("index collection \"%s\" of index \"%s\" was left in MongoDB",
					collection, name),
			 errdetail("The foreign table of the index no longer exists, so the server and database of the collection are unknown."),
			 errhint("A new index of the same name in this database takes the collection over; otherwise drop it with a MongoDB client.")));
	return true;
}
