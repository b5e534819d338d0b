/*-------------------------------------------------------------------------
 *
 * index_ddl.h
 *		  Internals of index-table definitions shared by index_catalog.c
 *		  (reading idxtable.index_defs), index_ddl.c (create_index and
 *		  drop_index) and index_build.c (filling an index collection).
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/index/index_ddl.h
 *
 * The rest of the FDW reads definitions through index_catalog.h and
 * computes entries through index_entry.h.
 *
 *-------------------------------------------------------------------------
 */
#ifndef IDXTABLE_INDEX_DDL_H
#define IDXTABLE_INDEX_DDL_H

#include "access/tupdesc.h"
#include "fmgr.h"
#include "nodes/parsenodes.h"
#include "storage/lockdefs.h"
#include "utils/relcache.h"

#include "core/mongoc_compat.h"
#include "core/option.h"
#include "index/index_catalog.h"

/* Where the definitions live */
#define IDX_CATALOG_SCHEMA		"idxtable"
#define IDX_CATALOG_TABLE		"index_defs"

/* Columns of idxtable.index_defs */
#define Natts_index_defs				14
#define Anum_index_defs_name			1
#define Anum_index_defs_tbl				2
#define Anum_index_defs_keys			3
#define Anum_index_defs_include			4
#define Anum_index_defs_is_unique		5
#define Anum_index_defs_collection		6
#define Anum_index_defs_state			7
#define Anum_index_defs_entries			8
#define Anum_index_defs_distinct_keys	9
#define Anum_index_defs_definition_id	10
#define Anum_index_defs_sync_from		11
#define Anum_index_defs_key_collations	12
#define Anum_index_defs_collation_versions	13
#define Anum_index_defs_sharding		14

/* Prefix of every index collection; IMPORT FOREIGN SCHEMA skips them */
#define IDX_COLLECTION_PREFIX	"idxtable."

/* Index collection names stay below this many bytes */
#define IDX_MAX_COLLECTION_NAME 200

/*
 * Why a definition does not resolve against a table: a SQLSTATE, the
 * message and an optional hint (create_index raises them as an error,
 * the planner-time lookup as a WARNING).
 */
typedef struct IdxDefError
{
	int			sqlstate;
	char	   *message;
	char	   *hint;
} IdxDefError;

/* OID of idxtable.index_defs, InvalidOid if the extension is not there */
extern Oid	idx_index_defs_relid(void);

/* Record ANALYZE's statistics of a valid index */
extern void idx_set_index_stats(const char *name, int64 entries,
								int64 distinct_keys);

/*
 * Resolve key specifications ("town", "lower(name)", ...) and included
 * column names against a table's columns, filling def->nkeys, keys,
 * ninclude and include.  If normalized is not NULL it receives the
 * normalized key specifications (palloc'd strings).  Returns false and
 * fills *err when something does not resolve or is not allowed.
 */
extern bool idx_resolve_definition(IdxIndexDef *def, TupleDesc tupdesc,
								   const char *relname,
								   char **keyspecs, int nkeys,
								   char **includes, int ninclude,
								   char **normalized, IdxDefError *err);

/*
 * The table and collection of an index; false if there is no such index
 * (index_defs_sql.c)
 */
extern bool idx_lookup_index(const char *name, Oid *relid, char **collection);

/*
 * Run a statement on idxtable.index_defs as the extension's owner, in a
 * security-restricted operation (index_defs_sql.c); returns the number of
 * rows processed.  With result_relid, the first row's first two columns
 * (an OID, a text) are copied into the caller's context.
 */
extern uint64 idx_catalog_execute(const char *sql, int nargs, Oid *argtypes,
								  Datum *args, const char *argnulls,
								  Oid *result_relid, char **result_coll);

/*
 * Open an idxtable_fdw foreign table for an index function; the current
 * user must own it (privilege ACL_NO_RIGHTS) or hold "privilege" on it,
 * which is checked before the lock is taken and again under it.
 */
extern Relation idx_open_table(Oid relid, LOCKMODE lockmode,
							   AclMode privilege);

/*
 * Open the foreign table of index "name" in the same way (the definition
 * is looked up again under the lock); *collection is the index collection.
 */
extern Relation idx_open_index_table(const char *name, LOCKMODE lockmode,
									 AclMode privilege, char **collection);

/* The MongoDB database of a foreign table's documents */
extern char *idx_table_database(Oid relid);

/* Column names of the keys, joined by "_" (for default index names) */
extern char *idx_key_columns_for_name(const IdxIndexDef *def);

/*
 * What a build produced: the number of entries and the (estimated) number
 * of distinct full keys.
 */
typedef struct IdxBuildResult
{
	int64		entries;
	int64		distinct_keys;
} IdxBuildResult;

/*
 * Fill the (new, empty) index collection of "def" from the facts of its
 * table.  Unique violations raise ERRCODE_UNIQUE_VIOLATION with the key
 * as DETAIL; everything else goes through idx_report_error().
 */
extern void idx_build_index(const IdxIndexDef *def, const IdxTableInfo *info,
							mongoc_client_t *client, const char *servername,
							IdxBuildResult *result);

/* Mark a definition valid with its statistics (distinct_keys < 0: NULL) */
extern void idx_mark_index_valid(const char *name,
								 const IdxBuildResult *result);

/*
 * Record the current versions of the sort-key collations of "def" (its
 * entries were found or made right under them): no longer stale for them.
 */
extern void idx_refresh_collation_versions(const IdxIndexDef *def);

/* Mark the definition with this definition_id failed, if it still exists */
extern void idx_mark_index_failed(const char *definition_id);

/* Set the cluster time a definition's change stream starts from (0: NULL) */
extern void idx_set_sync_from(const char *name, uint64 sync_from);

/*
 * A definition inserted as 'building' by idx_create_definition(), with its
 * (locked) table, the table's MongoDB location and client, and the cluster
 * time noted before the facts are read.
 */
typedef struct IdxNewIndex
{
	Relation	rel;
	IdxIndexDef *def;
	IdxTableInfo *info;
	mongoc_client_t *client;
	const char *servername;
	uint64		sync_from;
} IdxNewIndex;

/*
 * The first half of create_index(tbl, keys, include, is_unique, name),
 * called with its arguments: the definition, 'building', and its empty
 * index collection.
 */
extern void idx_create_definition(FunctionCallInfo fcinfo, LOCKMODE lockmode,
								  IdxNewIndex *ni);

/* WARNING that index "name" of "relid" misses outside writes (no applier) */
extern void idx_warn_unmaintained(const char *name, Oid relid);

/* Refuse an index table the MongoDB user may not maintain (index_privileges.c) */
extern void idx_check_index_privileges(mongoc_client_t *client,
									   ForeignServer *server,
									   const IdxIndexDef *def,
									   const IdxTableInfo *info);

/* ---- what one role may create (index_limits.c) ---- */

/* idxtable.max_index_tables_per_role */
extern int	idx_max_index_tables_per_role;

/* Define the settings of index_limits.c (from _PG_init) */
extern void idx_define_limit_gucs(void);

/*
 * Set by sync_notify.c when the library is preloaded: before create_index
 * builds index table "name" of foreign table "relid", owned by "ownerid",
 * while this database has "here" index tables (not failed), raise an
 * ERROR if the appliers have no room left for it, and return how many
 * index tables of "ownerid" the appliers of other databases maintain.
 */
typedef int (*IdxIndexRoomHook) (Oid relid, Oid ownerid, const char *name,
								 int here);
extern PGDLLIMPORT IdxIndexRoomHook idx_index_room_hook;

/*
 * create_index's refusals, before anything is built: a temporary table,
 * and a table owner at idxtable.max_index_tables_per_role (ERRORs).
 */
extern void idx_check_new_index(Relation rel, const char *name);

/*
 * drop_index of a definition whose foreign table no longer exists: a
 * superuser's alone; true if "name" was such a definition and is gone.
 */
extern bool idx_drop_orphan_definition(const char *name);

/*
 * MongoDB's cluster time now: the operationTime of a {ping: 1}, packed as
 * in sync_state.h; 0 if the server does not report one (no replica set)
 * (index_build.c: where a new index's change stream starts).
 */
extern uint64 idx_cluster_time_now(mongoc_client_t *client,
								   const char *servername);

/*
 * The end of a (sub)transaction's index DDL, called by the transaction
 * coordinator (xact.c) after the MongoDB transactions' commit or abort:
 * the collections of dropped indexes go at pre-commit if no foreign write
 * is final yet ("writes_final" false), else after the commit; those that
 * aborted builds created go at abort.
 */
extern void idx_ddl_pre_commit(bool writes_final);
extern void idx_ddl_pre_prepare(void);
extern void idx_ddl_at_commit(void);
extern void idx_ddl_at_abort(void);
extern void idx_ddl_subxact_end(bool commit, SubTransactionId mySubid,
								SubTransactionId parentSubid);

/*
 * ALTER INDEX ... RENAME has renamed the definition "name" of table
 * "relid" to "new_name": the ownership marker of its collection follows
 * after the commit.
 */
extern void idx_ddl_rename_at_commit(Oid relid, const char *name,
									 const char *new_name);

/*
 * Refuse a write in consistency mode 'ordered' to a table one of whose
 * indexes the transaction dropped.
 */
extern void idx_ddl_check_ordered_write(Oid relid, const char *relname);

/*
 * Refuse a unique index on a table in consistency mode 'eventual' (for
 * every way of creating an index).
 */
extern void idx_ddl_check_unique_allowed(const IdxIndexDef *def,
										 const IdxTableInfo *info);

#endif							/* IDXTABLE_INDEX_DDL_H */
