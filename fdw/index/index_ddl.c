/*-------------------------------------------------------------------------
 *
 * index_ddl.c
 *		  idxtable.create_index() and idxtable.drop_index(), and keeping the
 *		  index collections in step with the transactions that create and
 *		  drop them.
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/index/index_ddl.c
 *
 * create_index() validates the definition, inserts it into
 * idxtable.index_defs with state 'building', claims the index collection
 * with an ownership marker (index_owner.c: a collection of another index
 * is an error, never dropped; a leftover of this database's, from a build
 * that could not clean up after itself, is dropped), creates the index
 * collection, fills it (index_build.c) and marks the definition 'valid'
 * with its statistics.  If the transaction (or the subtransaction) then
 * aborts, for whatever reason, a transaction callback drops the collection
 * again if this build created it, with a client of its own whose timeouts
 * are short, and only WARNs if that fails: the definition is rolled back,
 * and nothing half-built survives in MongoDB.  The marker stays (this
 * database's, for a definition that is gone), so that whatever the server
 * still writes into the collection after the drop (a cancel interrupts
 * only our wait for a bulk insert) is recognized as a leftover of this
 * database's, which the next create_index of the name takes over.
 *
 * drop_index() deletes the definition at once and drops the collection
 * (if its marker is the definition's) when the transaction commits, so
 * that a rollback keeps both.  The transaction coordinator (xact.c) runs
 * this file's end-of-transaction work after the MongoDB commits and
 * aborts, never while a MongoDB transaction of ours is open.  If the
 * transaction's foreign writes are not final yet (no MongoDB commit, no
 * ordered-mode write), the drop runs at pre-commit and a server that
 * cannot be reached makes the commit fail rather than leave a collection
 * behind.  Otherwise failing the commit would keep a definition whose
 * index misses the writes made after drop_index, so the drop runs after
 * PostgreSQL's commit, and a failure is a WARNING that leaves the
 * collection with its marker: a leftover of a definition that is gone,
 * which the next create_index of that name takes over.
 *
 * ALTER INDEX ... RENAME (index_utility.c) renames the definition at once
 * and the ownership marker of its collection after the commit, as a
 * pending entry of the same list (a failure is a WARNING; an abort
 * forgets it).
 *
 * Index DDL and foreign writes in one transaction.  create_index builds
 * outside any MongoDB transaction, so it refuses to run once the
 * transaction has one open (the build would miss its uncommitted writes);
 * writes after it join the transaction as usual.  An ordered-mode write
 * (final at once) to a table whose index the transaction dropped is
 * refused: if the transaction then rolled back, the index would come back
 * without that write's entries.
 *
 * Catalog SQL.  Every statement on idxtable.index_defs goes through
 * idx_catalog_execute() (index_defs_sql.c), which runs it as the
 * extension's owner in a security-restricted operation.
 *
 * Permissions before locks.  create_index, drop_index, verify_index and
 * repair_index check the caller's privileges on the foreign table before
 * they queue their lock on it, and again once they hold it (ownership
 * could have changed meanwhile), as RangeVarGetRelidExtended() does with
 * its callbacks: a role without the privilege gets 42501 at once, and
 * neither waits for nor blocks anybody's lock.  A function given an index
 * name looks the definition up again under the lock, and starts over if
 * the name has moved to another table meanwhile.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/relation.h"
#include "access/xact.h"
#include "catalog/pg_class.h"
#include "catalog/pg_type.h"
#include "commands/defrem.h"
#include "fmgr.h"
#include "foreign/foreign.h"
#include "miscadmin.h"
#include "storage/lmgr.h"
#include "utils/acl.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/syscache.h"

#include "core/connection.h"
#include "core/handle.h"
#include "core/mongo_limits.h"
#include "core/mongoc_compat.h"
#include "core/option.h"
#include "core/pg_compat.h"
#include "core/stream.h"
#include "core/xact.h"
#include "index/index_catalog.h"
#include "index/index_ddl.h"
#include "index/index_entry.h"
#include "index/index_notify.h"
#include "index/index_owner.h"
#include "index/index_shard.h"
#include "module.h"

/* Timeouts of the client that drops collections after an abort */
#define IDX_CLEANUP_TIMEOUT_MS	3000

/* MongoDB's NamespaceNotFound and NamespaceExists */
#define MONGO_NAMESPACE_NOT_FOUND	26
#define MONGO_NAMESPACE_EXISTS		48

PG_FUNCTION_INFO_V1(idxtable_create_index);
PG_FUNCTION_INFO_V1(idxtable_drop_index);

/*
 * A collection to drop when the transaction ends: one created by this
 * transaction, dropped if it aborts, or one whose index was dropped,
 * dropped at commit.
 */
typedef enum PendingKind
{
	DROP_ON_ABORT,
	DROP_AT_COMMIT,
	RENAME_AT_COMMIT			/* not a drop: the marker of a renamed index */
} PendingKind;

typedef struct PendingDrop
{
	PendingKind kind;
	SubTransactionId subid;		/* (sub)transaction that registered it */
	Oid			relid;			/* the index's table */
	char	   *index;			/* the index's name */
	bool		done;			/* DROP_AT_COMMIT: dropped at pre-commit */
	mongoc_client_t *client;	/* DROP_AT_COMMIT: cached client, pinned */
	mongoc_uri_t *cleanup_uri;	/* for a client of its own after the end */
	char	   *servername;
	char	   *database;
	char	   *collection;
	char	   *definition_id;	/* of the collection's ownership marker */
	bool		created;		/* DROP_ON_ABORT: this build created the
								 * collection: it goes, the marker stays;
								 * else only the marker goes */
	char	   *new_name;		/* RENAME_AT_COMMIT: the index's new name */
} PendingDrop;

/* Pending drops of the current transaction (in TopTransactionContext) */
static List *pending_drops = NIL;


/* ----------------------------------------------------------------
 *		Catalog access
 * ----------------------------------------------------------------
 */

/*
 * Does an index of this name exist?
 */
static bool
index_name_exists(const char *name)
{
	Oid			argtypes[1] = {TEXTOID};
	Datum		args[1];

	args[0] = CStringGetTextDatum(name);
	return idx_catalog_execute("SELECT 1 FROM idxtable.index_defs "
							   "WHERE name OPERATOR(pg_catalog.=) $1",
							   1, argtypes, args, NULL, NULL, NULL) > 0;
}

/*
 * The definition_id of an index (see index_owner.c), or NULL.
 */
static char *
lookup_definition_id(const char *name)
{
	Oid			argtypes[1] = {TEXTOID};
	Datum		args[1];
	Oid			relid;
	char	   *definition_id = NULL;

	args[0] = CStringGetTextDatum(name);
	idx_catalog_execute("SELECT tbl, definition_id::pg_catalog.text "
						"FROM idxtable.index_defs "
						"WHERE name OPERATOR(pg_catalog.=) $1",
						1, argtypes, args, NULL, &relid, &definition_id);
	return definition_id;
}

/*
 * A text[] datum from C strings.
 */
static Datum
strings_to_text_array(char **strings, int n)
{
	Datum	   *elems = (Datum *) palloc(sizeof(Datum) * Max(n, 1));
	int			i;

	for (i = 0; i < n; i++)
		elems[i] = CStringGetTextDatum(strings[i]);
	return PointerGetDatum(construct_array(elems, n, TEXTOID, -1, false,
										   TYPALIGN_INT));
}

/*
 * The key_collations of a definition: a regcollation[] with the sort-key
 * collation of each key (NULL elements for the others); false, with no
 * array, if no key has one.
 */
static bool
key_collations_array(const IdxIndexDef *def, Datum *array)
{
	Datum	   *elems = (Datum *) palloc(sizeof(Datum) * def->nkeys);
	bool	   *nulls = (bool *) palloc(sizeof(bool) * def->nkeys);
	int			dims[1] = {def->nkeys};
	int			lbs[1] = {1};
	bool		any = false;
	int			k;

	for (k = 0; k < def->nkeys; k++)
	{
		elems[k] = ObjectIdGetDatum(def->keys[k].sortcoll);
		nulls[k] = !OidIsValid(def->keys[k].sortcoll);
		any |= !nulls[k];
	}
	if (!any)
		return false;
	*array = PointerGetDatum(construct_md_array(elems, nulls, 1, dims, lbs,
												REGCOLLATIONOID, sizeof(Oid),
												true, TYPALIGN_INT));
	return true;
}

/*
 * SQL: the current versions of the collations of "key_collations" (the
 * column, or a parameter in an INSERT), element by element.
 */
#define COLLATION_VERSIONS_SQL(colls) \
	"(SELECT pg_catalog.array_agg(" \
	"idxtable.collation_version(u.c) ORDER BY u.o) " \
	"FROM pg_catalog.unnest(" colls ") WITH ORDINALITY AS u(c, o))"

/*
 * Insert a definition in state 'building', with the cluster time its
 * change stream starts from (0: unknown, NULL), the collations whose sort
 * keys its entries hold and their current versions.
 */
static void
insert_definition(const IdxIndexDef *def, char **keyspecs, uint64 sync_from)
{
	Oid			argtypes[10] = {TEXTOID, REGCLASSOID, TEXTARRAYOID,
	TEXTARRAYOID, BOOLOID, TEXTOID, TEXTOID, INT8OID, REGCOLLATIONARRAYOID,
	TEXTOID};
	Datum		args[10];
	char		argnulls[11] = "          ";
	char	  **includes;
	int			i;

	includes = (char **) palloc(sizeof(char *) * Max(def->ninclude, 1));
	for (i = 0; i < def->ninclude; i++)
		includes[i] = pstrdup(quote_identifier(get_attname(def->relid,
														   def->include[i],
														   false)));
	args[0] = CStringGetTextDatum(def->name);
	args[1] = ObjectIdGetDatum(def->relid);
	args[2] = strings_to_text_array(keyspecs, def->nkeys);
	args[3] = strings_to_text_array(includes, def->ninclude);
	args[4] = BoolGetDatum(def->unique);
	args[5] = CStringGetTextDatum(def->collection);
	args[6] = CStringGetTextDatum(def->definition_id);
	args[7] = Int64GetDatum((int64) sync_from);
	if (sync_from == 0)
		argnulls[7] = 'n';
	if (!key_collations_array(def, &args[8]))
		argnulls[8] = 'n';
	args[9] = CStringGetTextDatum(def->sharding ? def->sharding : "none");
	idx_catalog_execute("INSERT INTO idxtable.index_defs "
						"(name, tbl, keys, include, is_unique, collection, state, "
						"definition_id, sync_from, key_collations, "
						"collation_versions, sharding) "
						"VALUES ($1, $2, $3, $4, $5, $6, 'building', "
						"$7::pg_catalog.uuid, $8, $9, "
						COLLATION_VERSIONS_SQL("$9") ", $10)",
						10, argtypes, args, argnulls, NULL, NULL);
}

/*
 * Mark a definition valid, with the statistics of its build (a negative
 * distinct_keys is unknown: NULL, for ANALYZE to fill in).
 */
void
idx_mark_index_valid(const char *name, const IdxBuildResult *result)
{
	Oid			argtypes[3] = {TEXTOID, INT8OID, INT8OID};
	Datum		args[3];
	char		argnulls[4] = "   ";

	args[0] = CStringGetTextDatum(name);
	args[1] = Int64GetDatum(result->entries);
	args[2] = Int64GetDatum(result->distinct_keys);
	if (result->distinct_keys < 0)
		argnulls[2] = 'n';
	idx_catalog_execute("UPDATE idxtable.index_defs "
						"SET state = 'valid', entries = $2, distinct_keys = $3, "
						"collation_versions = "
						COLLATION_VERSIONS_SQL("key_collations") " "
						"WHERE name OPERATOR(pg_catalog.=) $1",
						3, argtypes, args, argnulls, NULL, NULL);
}

/*
 * Record the current versions of the collations whose sort keys the
 * entries of "def" hold, once verify_index found them all right or
 * repair_index made them so (a no-op when they have not changed).
 */
void
idx_refresh_collation_versions(const IdxIndexDef *def)
{
	Oid			argtypes[1] = {TEXTOID};
	Datum		args[1];

	if (!def->collation_changed)
		return;
	args[0] = CStringGetTextDatum(def->name);
	idx_catalog_execute("UPDATE idxtable.index_defs "
						"SET collation_versions = "
						COLLATION_VERSIONS_SQL("key_collations") " "
						"WHERE name OPERATOR(pg_catalog.=) $1",
						1, argtypes, args, NULL, NULL, NULL);
}

/*
 * Mark the definition with this definition_id failed, whatever its name
 * now (ALTER INDEX ... RENAME), if it still exists.
 */
void
idx_mark_index_failed(const char *definition_id)
{
	Oid			argtypes[1] = {TEXTOID};
	Datum		args[1];

	args[0] = CStringGetTextDatum(definition_id);
	idx_catalog_execute("UPDATE idxtable.index_defs SET state = 'failed' "
						"WHERE definition_id OPERATOR(pg_catalog.=) "
						"$1::pg_catalog.uuid",
						1, argtypes, args, NULL, NULL, NULL);
}

/*
 * Set the cluster time the change stream of an index re-applies writes
 * from (0: unknown, NULL).
 */
void
idx_set_sync_from(const char *name, uint64 sync_from)
{
	Oid			argtypes[2] = {TEXTOID, INT8OID};
	Datum		args[2];
	char		argnulls[3] = "  ";

	args[0] = CStringGetTextDatum(name);
	args[1] = Int64GetDatum((int64) sync_from);
	if (sync_from == 0)
		argnulls[1] = 'n';
	idx_catalog_execute("UPDATE idxtable.index_defs SET sync_from = $2 "
						"WHERE name OPERATOR(pg_catalog.=) $1",
						2, argtypes, args, argnulls, NULL, NULL);
}

/*
 * Record fresh statistics of a valid index (ANALYZE).
 */
void
idx_set_index_stats(const char *name, int64 entries, int64 distinct_keys)
{
	Oid			argtypes[3] = {TEXTOID, INT8OID, INT8OID};
	Datum		args[3];

	args[0] = CStringGetTextDatum(name);
	args[1] = Int64GetDatum(entries);
	args[2] = Int64GetDatum(distinct_keys);
	idx_catalog_execute("UPDATE idxtable.index_defs "
						"SET entries = $2, distinct_keys = $3 "
						"WHERE name OPERATOR(pg_catalog.=) $1 "
						"AND state OPERATOR(pg_catalog.=) 'valid'",
						3, argtypes, args, NULL, NULL, NULL);
}

/*
 * Delete a definition; false if it was not there.
 */
static bool
delete_definition(const char *name)
{
	Oid			argtypes[1] = {TEXTOID};
	Datum		args[1];

	args[0] = CStringGetTextDatum(name);
	return idx_catalog_execute("DELETE FROM idxtable.index_defs "
							   "WHERE name OPERATOR(pg_catalog.=) $1",
							   1, argtypes, args, NULL, NULL, NULL) > 0;
}


/* ----------------------------------------------------------------
 *		MongoDB collections
 * ----------------------------------------------------------------
 */

/*
 * Run {drop: collection} or {create: collection}.  A drop of a missing
 * collection succeeds.
 */
static void
collection_command(mongoc_client_t *client, const char *servername,
				   const char *database, const char *collection, bool create)
{
	bson_t		command = BSON_INITIALIZER;
	bson_t		reply;
	bson_error_t error;
	bool		ok;

	BSON_APPEND_UTF8(&command, create ? "create" : "drop", collection);
	ok = mongoc_client_command_simple(client, database, &command, NULL,
									  &reply, &error);
	bson_destroy(&command);
	bson_destroy(&reply);
	if (!ok && !(!create && error.domain == MONGOC_ERROR_SERVER &&
				 error.code == MONGO_NAMESPACE_NOT_FOUND))
		idx_report_error(&error, servername,
						 idx_op(create ? IDX_OP_CREATE_INDEX_COLL :
								IDX_OP_DROP_INDEX_COLL, collection, database));
}

/*
 * Create a new collection; false if one of that name exists.
 */
static bool
create_new_collection(mongoc_client_t *client, const char *servername,
					  const char *database, const char *collection)
{
	bson_t		command = BSON_INITIALIZER;
	bson_t		reply;
	bson_error_t error;
	bool		ok;

	BSON_APPEND_UTF8(&command, "create", collection);
	ok = mongoc_client_command_simple(client, database, &command, NULL,
									  &reply, &error);
	bson_destroy(&command);
	bson_destroy(&reply);
	if (!ok && error.domain == MONGOC_ERROR_SERVER &&
		error.code == MONGO_NAMESPACE_EXISTS)
		return false;
	if (!ok)
		idx_report_error(&error, servername,
						 idx_op(IDX_OP_CREATE_INDEX_COLL, collection, database));
	return true;
}

/*
 * Drop the collection of a dropped index at pre-commit (an error makes the
 * commit fail, and nothing is lost), then its ownership marker: a marker
 * left behind names a collection that no longer exists, which the next
 * create_index of that name takes over, so that failure is only a
 * WARNING.
 */
static void
drop_at_commit(PendingDrop *p)
{
	bson_error_t error;

	collection_command(p->client, p->servername, p->database, p->collection,
					   false);
	memset(&error, 0, sizeof(error));
	if (!idx_owner_release(p->client, p->database, p->collection,
						   p->definition_id, &error) && error.domain != 0)
		ereport(WARNING,
				(errmsg("could not delete the ownership marker of dropped index collection \"%s\" of database \"%s\" on server \"%s\"",
						p->collection, p->database, p->servername),
				 errdetail("MongoDB error %u: %s", error.code,
						   idx_scrub_message(error.message))));
}

/*
 * Create the MongoDB index that serves lookups: {"_id.k0": 1, "_id.k1": 1,
 * ...}.  Equality on a key prefix, a range on the next key and scans in key
 * order then cost O(log n + matches), and MongoDB applies its own type
 * bracketing to the comparisons.  (Uniqueness is MongoDB's _id index.)
 */
static void
create_lookup_index(mongoc_client_t *client, const char *servername,
					const IdxIndexDef *def)
{
	bson_t	   *command = bson_new();
	IdxHandle  *owned = idx_own_bson(command);
	bson_t		indexes,
				index,
				key;
	bson_t		reply;
	int			i;

	BSON_APPEND_UTF8(command, "createIndexes", def->collection);
	IDX_BSON_APPEND_ARRAY_BEGIN(command, "indexes", &indexes);
	BSON_APPEND_DOCUMENT_BEGIN(&indexes, "0", &index);
	BSON_APPEND_DOCUMENT_BEGIN(&index, "key", &key);
	for (i = 0; i < def->nkeys; i++)
	{
		char	   *field = psprintf("_id.%s", idx_key_field(i));

		BSON_APPEND_INT32(&key, field, 1);
	}
	bson_append_document_end(&index, &key);
	BSON_APPEND_UTF8(&index, "name", "lookup");
	bson_append_document_end(&indexes, &index);
	/* the entries of given facts: verify_index and repair_index */
	BSON_APPEND_DOCUMENT_BEGIN(&indexes, "1", &index);
	BSON_APPEND_DOCUMENT_BEGIN(&index, "key", &key);
	BSON_APPEND_INT32(&key, IDX_ENTRY_FACT_ID, 1);
	bson_append_document_end(&index, &key);
	BSON_APPEND_UTF8(&index, "name", "fact");
	bson_append_document_end(&indexes, &index);
	bson_append_array_end(command, &indexes);

	idx_run_command(client, servername, def->database, command, &reply,
					idx_op(IDX_OP_CREATE_LOOKUP, def->collection,
						   def->database));
	bson_destroy(&reply);
	idx_release(owned);
}

/*
 * Drop a pending drop's collection after the transaction ended; false
 * (with *error) if that failed.  A missing collection is dropped already.
 */
static bool
quiet_drop_collection(mongoc_client_t *client, const PendingDrop *p,
					  bson_error_t *error)
{
	bson_t		command = BSON_INITIALIZER;
	bson_t		reply;
	bool		ok;

	BSON_APPEND_UTF8(&command, "drop", p->collection);
	ok = mongoc_client_command_simple(client, p->database, &command, NULL,
									  &reply, error);
	bson_destroy(&reply);
	bson_destroy(&command);
	return ok || (error->domain == MONGOC_ERROR_SERVER &&
				  error->code == MONGO_NAMESPACE_NOT_FOUND);
}

/*
 * The DETAIL of a cleanup after the transaction's end that did not work.
 */
static int
abort_errdetail(const bson_error_t *error)
{
	if (error->domain == MONGOC_ERROR_SERVER)
		return errdetail("MongoDB error %u: %s", error->code,
						 idx_scrub_message(error->message));
	return errdetail("The server could not be reached or did not answer within %d ms.",
					 IDX_CLEANUP_TIMEOUT_MS);
}

/*
 * The WARNING for a cleanup after an abort that did not work.
 */
static void
warn_after_abort(const PendingDrop *p, const bson_error_t *error)
{
	if (p->created)
		ereport(WARNING,
				(errmsg("could not drop index collection \"%s\" of database \"%s\" on server \"%s\" after the transaction aborted",
						p->collection, p->database, p->servername),
				 abort_errdetail(error),
				 errhint("Drop the collection in MongoDB; creating an index of the same name also drops it.")));
	else
		ereport(WARNING,
				(errmsg("could not delete the ownership marker of index collection \"%s\" of database \"%s\" on server \"%s\" after the transaction aborted",
						p->collection, p->database, p->servername),
				 abort_errdetail(error),
				 errhint("Delete the collection's document in \"%s\" in MongoDB: the collection is not this index's.",
						 IDX_OWNER_REGISTRY)));
}

/*
 * A client of its own for the cleanup of a pending drop after the
 * transaction's end (the cached client's URI, short timeouts: interrupts
 * are held then), or NULL.
 */
static mongoc_client_t *
cleanup_client(const PendingDrop *p)
{
	mongoc_client_t *client = idx_stream_client_new(p->cleanup_uri,
													p->servername);

	if (client != NULL)
		mongoc_client_set_error_api(client, MONGOC_ERROR_API_VERSION_2);
	return client;
}

/*
 * Drop the collection of a dropped index after PostgreSQL's commit (the
 * transaction's foreign writes were final before it), then its marker.  A
 * failure is a WARNING: the definition is gone, so the collection left
 * behind, still marked as this database's, is a leftover the next
 * create_index of the name takes over, and no query reads it meanwhile.
 */
static void
drop_after_commit(PendingDrop *p)
{
	mongoc_client_t *client = cleanup_client(p);
	bson_error_t error;
	bool		ok = false;

	memset(&error, 0, sizeof(error));
	if (client != NULL)
	{
		ok = quiet_drop_collection(client, p, &error);
		if (ok && !idx_owner_release(client, p->database, p->collection,
									 p->definition_id, &error) &&
			error.domain != 0)
			ereport(WARNING,
					(errmsg("could not delete the ownership marker of dropped index collection \"%s\" of database \"%s\" on server \"%s\"",
							p->collection, p->database, p->servername),
					 abort_errdetail(&error)));
		idx_stream_client_destroy(client);
	}
	if (!ok)
		ereport(WARNING,
				(errmsg("could not drop the collection \"%s\" of dropped index \"%s\" of database \"%s\" on server \"%s\" after the transaction committed",
						p->collection, p->index, p->database, p->servername),
				 abort_errdetail(&error),
				 errhint("The collection is left over: drop it in MongoDB, or create an index of the same name on the same table, which takes it over.")));
}

/*
 * After the commit of ALTER INDEX ... RENAME: the ownership marker of the
 * collection names the index's new name.  A failure is a WARNING: no claim
 * or read depends on that name (index_owner.c).
 */
static void
rename_after_commit(PendingDrop *p)
{
	mongoc_client_t *client = cleanup_client(p);
	bson_error_t error;
	bool		ok = false;

	memset(&error, 0, sizeof(error));
	if (client != NULL)
	{
		ok = idx_owner_rename(client, p->database, p->collection,
							  p->definition_id, p->new_name, &error);
		idx_stream_client_destroy(client);
	}
	if (!ok)
		ereport(WARNING,
				(errmsg("could not record the new name \"%s\" of index \"%s\" in the ownership marker of its collection \"%s\" of database \"%s\" on server \"%s\"",
						p->new_name, p->index, p->collection, p->database,
						p->servername),
				 abort_errdetail(&error)));
}

/*
 * Clean up after an abort: a client of its own with short timeouts, and a
 * WARNING, never an error, if it does not work.
 *
 * If this build created the collection, drop it and keep the ownership
 * marker: it names this cluster, this database and a definition that is
 * gone, which the next create_index of the same name takes over whatever
 * the collection then holds (index_owner.c).  A cancel interrupts only our
 * wait, so the server may still be executing a bulk insert of entries,
 * and an insert after the drop creates the collection again: without the
 * marker, that collection would hold documents but no marker, and
 * create_index would refuse it.  If the build did not create the
 * collection (its claim found one it may not take), the marker goes: the
 * collection is not ours to keep a claim on.
 */
static void
drop_after_abort(PendingDrop *p)
{
	mongoc_client_t *client = cleanup_client(p);
	bson_error_t error;
	bool		ok = false;

	memset(&error, 0, sizeof(error));
	if (client != NULL)
	{
		if (p->created)
			ok = quiet_drop_collection(client, p, &error);
		else
			ok = idx_owner_release(client, p->database, p->collection,
								   p->definition_id, &error) ||
				error.domain == 0;
		idx_stream_client_destroy(client);
	}
	if (!ok)
		warn_after_abort(p, &error);
}

/*
 * Release what a pending drop holds.
 */
static void
forget_pending(PendingDrop *p)
{
	if (p->cleanup_uri)
		mongoc_uri_destroy(p->cleanup_uri);
	p->cleanup_uri = NULL;
	if (p->client)
		idx_client_pin(p->client, -1);
	p->client = NULL;
}

/*
 * Register a collection to drop at abort (a new one) or at commit (that of
 * a dropped index).
 */
static PendingDrop *
add_pending_drop(PendingKind kind, mongoc_client_t *client,
				 const char *servername, const IdxIndexDef *def)
{
	MemoryContext oldcxt;
	PendingDrop *p;

	oldcxt = MemoryContextSwitchTo(TopTransactionContext);
	p = (PendingDrop *) palloc0(sizeof(PendingDrop));
	p->kind = kind;
	p->subid = GetCurrentSubTransactionId();
	p->relid = def->relid;
	p->index = pstrdup(def->name);
	p->servername = pstrdup(servername);
	p->database = pstrdup(def->database);
	p->collection = pstrdup(def->collection);
	p->definition_id = pstrdup(def->definition_id);
	/* the cached client's URI (with credentials), short timeouts */
	p->cleanup_uri = mongoc_uri_copy(mongoc_client_get_uri(client));
	mongoc_uri_set_option_as_int32(p->cleanup_uri,
								   MONGOC_URI_CONNECTTIMEOUTMS,
								   IDX_CLEANUP_TIMEOUT_MS);
	mongoc_uri_set_option_as_int32(p->cleanup_uri,
								   MONGOC_URI_SOCKETTIMEOUTMS,
								   IDX_CLEANUP_TIMEOUT_MS);
	mongoc_uri_set_option_as_int32(p->cleanup_uri,
								   MONGOC_URI_SERVERSELECTIONTIMEOUTMS,
								   IDX_CLEANUP_TIMEOUT_MS);
	if (kind == DROP_AT_COMMIT)
	{
		p->client = client;
		idx_client_pin(client, 1);
	}
	pending_drops = lappend(pending_drops, p);
	MemoryContextSwitchTo(oldcxt);
	return p;
}

/*
 * Release every pending drop; the memory goes with the transaction.
 */
static void
forget_all_pending(void)
{
	ListCell   *lc;

	foreach(lc, pending_drops)
		forget_pending((PendingDrop *) lfirst(lc));
	pending_drops = NIL;
}

/*
 * Pre-commit, after the MongoDB commits (xact.c): drop the collections of
 * dropped indexes now if the transaction's foreign writes are not final
 * yet (an error fails the commit and keeps everything), else leave them
 * for idx_ddl_at_commit().
 */
void
idx_ddl_pre_commit(bool writes_final)
{
	ListCell   *lc;

	if (writes_final)
		return;
	foreach(lc, pending_drops)
	{
		PendingDrop *p = (PendingDrop *) lfirst(lc);

		if (p->kind == DROP_AT_COMMIT && !p->done)
		{
			drop_at_commit(p);
			p->done = true;
		}
	}
}

/*
 * PREPARE TRANSACTION of a transaction that created or dropped indexes.
 */
void
idx_ddl_pre_prepare(void)
{
	if (pending_drops != NIL)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("cannot prepare a transaction that created, dropped or renamed index tables")));
}

/*
 * After PostgreSQL's commit: the drops left for now, each a WARNING at
 * worst.
 */
void
idx_ddl_at_commit(void)
{
	ListCell   *lc;

	foreach(lc, pending_drops)
	{
		PendingDrop *p = (PendingDrop *) lfirst(lc);

		if (p->kind == DROP_AT_COMMIT && !p->done)
			drop_after_commit(p);
		else if (p->kind == RENAME_AT_COMMIT)
			rename_after_commit(p);
	}
	forget_all_pending();
}

/*
 * After the abort of the MongoDB transactions: drop the collections the
 * aborted transaction's builds created.
 */
void
idx_ddl_at_abort(void)
{
	ListCell   *lc;

	foreach(lc, pending_drops)
	{
		PendingDrop *p = (PendingDrop *) lfirst(lc);

		if (p->kind == DROP_ON_ABORT)
			drop_after_abort(p);
	}
	forget_all_pending();
}

/*
 * Subtransaction end, after the MongoDB transactions' (xact.c): a commit
 * hands the pending drops to the parent; an abort drops the collections
 * it created and forgets the drops it registered (their definitions are
 * back).
 */
void
idx_ddl_subxact_end(bool commit, SubTransactionId mySubid,
					SubTransactionId parentSubid)
{
	ListCell   *lc;

	foreach(lc, pending_drops)
	{
		PendingDrop *p = (PendingDrop *) lfirst(lc);

		if (p->subid != mySubid)
			continue;
		if (commit)
		{
			p->subid = parentSubid;
			continue;
		}
		if (p->kind == DROP_ON_ABORT)
			drop_after_abort(p);
		forget_pending(p);
		pending_drops = foreach_delete_current(pending_drops, lc);
	}
}

/*
 * Before a write in consistency mode 'ordered' to a table: refuse it if
 * the transaction dropped one of the table's indexes.  The write is final
 * at once, but the index would come back without its entries if the
 * transaction rolled back.
 */
void
idx_ddl_check_ordered_write(Oid relid, const char *relname)
{
	ListCell   *lc;

	foreach(lc, pending_drops)
	{
		PendingDrop *p = (PendingDrop *) lfirst(lc);

		if (p->kind == DROP_AT_COMMIT && p->relid == relid)
			ereport(ERROR,
					(errcode(ERRCODE_ACTIVE_SQL_TRANSACTION),
					 errmsg("cannot write to foreign table \"%s\" in consistency mode '%s' in the transaction that dropped its index \"%s\"",
							relname,
							idx_consistency_name(IDX_CONSISTENCY_ORDERED),
							p->index),
					 errdetail("Ordered-mode writes are final at once; if the transaction rolled back, index \"%s\" on server \"%s\" would come back without their entries.",
							   p->index, p->servername),
					 errhint("Commit the transaction that drops the index before writing to the table.")));
	}
}


/* ----------------------------------------------------------------
 *		create_index
 * ----------------------------------------------------------------
 */

/*
 * Open the table, which must be an idxtable_fdw foreign table owned by the
 * current user.
 */
static Relation
open_foreign_table(Oid relid, LOCKMODE lockmode)
{
	return idx_open_table(relid, lockmode, ACL_NO_RIGHTS);
}

/*
 * Check, from the syscache alone and without a lock, that the current user
 * owns relation "relid" (privilege ACL_NO_RIGHTS) or holds "privilege" on
 * it: 42501 if not, 42P01 if there is no such relation.
 */
static void
check_table_privilege(Oid relid, AclMode privilege)
{
	HeapTuple	tuple = SearchSysCache1(RELOID, ObjectIdGetDatum(relid));
	Form_pg_class classform;
	AclResult	aclresult = ACLCHECK_OK;

	if (!HeapTupleIsValid(tuple))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_TABLE),
				 errmsg("relation with OID %u does not exist", relid)));
	classform = (Form_pg_class) GETSTRUCT(tuple);
	if (privilege == ACL_NO_RIGHTS)
	{
		if (!object_ownercheck(RelationRelationId, relid, GetUserId()))
			aclresult = ACLCHECK_NOT_OWNER;
	}
	else if (pg_class_aclcheck(relid, GetUserId(), privilege) != ACLCHECK_OK)
		aclresult = ACLCHECK_NO_PRIV;
	if (aclresult != ACLCHECK_OK)
		aclcheck_error(aclresult,
					   classform->relkind == RELKIND_FOREIGN_TABLE ?
					   OBJECT_FOREIGN_TABLE : OBJECT_TABLE,
					   NameStr(classform->relname));
	ReleaseSysCache(tuple);
}

/*
 * Open an idxtable_fdw foreign table for an index function: the current
 * user must own it (ACL_NO_RIGHTS) or hold "privilege" on it.  The
 * privilege is checked before the lock is queued, so that a role without
 * it neither waits for the lock nor makes others wait behind its request,
 * and again under the lock: the table may have been dropped, or have
 * changed owner or privileges, while we waited.
 */
Relation
idx_open_table(Oid relid, LOCKMODE lockmode, AclMode privilege)
{
	Relation	rel;
	bool		ours = false;

	check_table_privilege(relid, privilege);
	LockRelationOid(relid, lockmode);
	check_table_privilege(relid, privilege);
	rel = relation_open(relid, NoLock);

	if (rel->rd_rel->relkind == RELKIND_FOREIGN_TABLE)
	{
		ForeignTable *table = GetForeignTable(relid);
		ForeignServer *server = GetForeignServer(table->serverid);

		ours = idx_fdw_is_ours(server->fdwid);
	}
	if (!ours)
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("\"%s\" is not an idxtable_fdw foreign table",
						RelationGetRelationName(rel))));
	return rel;
}

/*
 * Open the foreign table of index "name" for an index function, as
 * idx_open_table() does; *collection receives the index collection.  The
 * definition is looked up again once the table is locked: if it has gone
 * meanwhile, the index does not exist; if its name now belongs to an index
 * of another table, we start over with that table (as
 * RangeVarGetRelidExtended() does when a name moves while it waits).
 */
Relation
idx_open_index_table(const char *name, LOCKMODE lockmode, AclMode privilege,
					 char **collection)
{
	for (;;)
	{
		Oid			relid;
		Oid			relid_now;
		Relation	rel;

		if (!idx_lookup_index(name, &relid, collection))
			break;
		rel = idx_open_table(relid, lockmode, privilege);
		if (!idx_lookup_index(name, &relid_now, collection))
			break;
		if (relid_now == relid)
			return rel;
		relation_close(rel, lockmode);
	}
	ereport(ERROR,
			(errcode(ERRCODE_UNDEFINED_OBJECT),
			 errmsg("index \"%s\" does not exist", name)));
	return NULL;				/* keep compiler quiet */
}

/*
 * The elements of a text[] argument; NULL elements and more than one
 * dimension are refused.
 */
static char **
text_array_argument(ArrayType *arr, const char *what, int *count)
{
	Datum	   *elems;
	bool	   *nulls;
	char	  **result;
	int			n;
	int			i;

	if (ARR_NDIM(arr) > 1)
		ereport(ERROR,
				(errcode(ERRCODE_ARRAY_SUBSCRIPT_ERROR),
				 errmsg("argument \"%s\" must be a one-dimensional array", what)));
	deconstruct_array(arr, TEXTOID, -1, false, TYPALIGN_INT,
					  &elems, &nulls, &n);
	result = (char **) palloc(sizeof(char *) * Max(n, 1));
	for (i = 0; i < n; i++)
	{
		if (nulls[i])
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("argument \"%s\" must not contain nulls", what)));
		result[i] = TextDatumGetCString(elems[i]);
	}
	*count = n;
	return result;
}

/*
 * Default index name: <table>_<key columns>_idx, with a number after
 * "idx" until it is free, cut to NAMEDATALEN - 1 bytes like PostgreSQL's
 * own index names; "." and "$" (from table or column names) become "_".
 */
static char *
choose_index_name(const IdxIndexDef *def, const char *relname)
{
	char	   *columns = idx_key_columns_for_name(def);
	char		label[NAMEDATALEN];
	int			pass = 0;

	strlcpy(label, "idx", sizeof(label));
	for (;;)
	{
		char	   *name = makeObjectName(relname, columns, label);

		idx_sanitize_index_name(name);
		if (!index_name_exists(name))
			return name;
		pfree(name);
		snprintf(label, sizeof(label), "idx%d", ++pass);
	}
}

/*
 * Check a name given by the user: it becomes the last part of a MongoDB
 * collection name (index_owner.c), and must be new.
 */
static void
check_index_name(const char *name)
{
	idx_check_index_name(name);
	if (index_name_exists(name))
		ereport(ERROR,
				(errcode(ERRCODE_DUPLICATE_OBJECT),
				 errmsg("index \"%s\" already exists", name)));
}

/*
 * Does a definition have this index collection?
 */
static bool
collection_in_use(const char *collection)
{
	Oid			argtypes[1] = {TEXTOID};
	Datum		args[1];

	args[0] = CStringGetTextDatum(collection);
	return idx_catalog_execute("SELECT 1 FROM idxtable.index_defs "
							   "WHERE collection OPERATOR(pg_catalog.=) $1",
							   1, argtypes, args, NULL, NULL, NULL) > 0;
}

/*
 * The index collection: idxtable.<fact collection>.<index name>, or with
 * _1, _2, ... after the index name while a definition has it (an index
 * renamed away from this name keeps its collection: index_owner.c).  Its
 * namespace "<database>.<collection>" must also fit mongod's 255 bytes.
 */
static char *
index_collection_name(const char *database, const char *collection,
					  const char *name)
{
	char	   *result = psprintf("%s%s.%s", IDX_COLLECTION_PREFIX,
								  collection, name);
	int			suffix = 0;
	int			nslen;

	while (collection_in_use(result))
		result = psprintf("%s%s.%s_%d", IDX_COLLECTION_PREFIX, collection,
						  name, ++suffix);
	nslen = (int) (strlen(database) + 1 + strlen(result));

	if (nslen > IDX_MAX_NAMESPACE_BYTES)
		ereport(ERROR,
				(errcode(ERRCODE_NAME_TOO_LONG),
				 errmsg("the namespace of index collection \"%s\" in database \"%s\" would be too long (%d bytes)",
						result, database, nslen),
				 errdetail("MongoDB allows at most %d bytes for \"<database>.<collection>\".",
						   IDX_MAX_NAMESPACE_BYTES),
				 errhint("Choose a shorter index name.")));

	if (strlen(result) >= IDX_MAX_COLLECTION_NAME)
		ereport(ERROR,
				(errcode(ERRCODE_NAME_TOO_LONG),
				 errmsg("index collection name would be too long (%d bytes)",
						(int) strlen(result)),
				 errdetail("Index collections are named %s<collection>.<index name>, in at most %d bytes.",
						   IDX_COLLECTION_PREFIX, IDX_MAX_COLLECTION_NAME - 1),
				 errhint("Choose a shorter index name.")));
	return result;
}

/*
 * Claim the index collection with an ownership marker and create it: a
 * leftover of this database's (an aborted build, whose late writes may
 * have created the collection again after its cleanup dropped it) is
 * dropped first, whatever it holds, as is an existing collection without
 * a marker if it is empty; anything else of that name is an error
 * (index_owner.c).  The abort callback then drops only what this build
 * created, and keeps the marker of what it drops.
 */
static void
create_owned_collection(IdxIndexDef *def, const IdxTableInfo *info,
						mongoc_client_t *client, const char *servername)
{
	IdxClaim	claim;
	PendingDrop *pending;

	claim = idx_owner_claim(client, servername, def->database,
							def->collection, info->collection, def->name,
							def->definition_id);
	pending = add_pending_drop(DROP_ON_ABORT, client, servername, def);
	if (claim == IDX_CLAIM_LEFTOVER)
	{
		/* ours now: if this build fails too, it goes (or stays marked) */
		pending->created = true;
		collection_command(client, servername, def->database,
						   def->collection, false);
	}
	if (!create_new_collection(client, servername, def->database,
							   def->collection))
	{
		idx_owner_check_unmarked(client, servername, def->database,
								 def->collection, def->definition_id, claim);
		collection_command(client, servername, def->database,
						   def->collection, false);
		collection_command(client, servername, def->database,
						   def->collection, true);
	}
	pending->created = true;
	if (claim != IDX_CLAIM_LEFTOVER)
		idx_owner_mark_created(client, servername, def->database,
							   def->collection, def->definition_id);
}

/*
 * Refuse create_index in a transaction that has a MongoDB transaction
 * open (or doomed): the build reads and writes outside it, so the index
 * would miss the transaction's uncommitted writes.  (Building inside it
 * is no answer either: a MongoDB transaction cannot use a collection
 * created after it started, and a build can exceed its size and time
 * limits.)
 */
static void
check_no_remote_transaction(const char *name)
{
	const char *server = idx_xact_open_server();

	if (server != NULL)
		ereport(ERROR,
				(errcode(ERRCODE_ACTIVE_SQL_TRANSACTION),
				 errmsg("cannot create index \"%s\" in a transaction that has written to foreign tables of server \"%s\"",
						name, server),
				 errdetail("The index is built outside the MongoDB transaction, so it would miss the transaction's uncommitted writes."),
				 errhint("Create the index in a transaction of its own, or before the transaction's first write to a foreign table.")));
}

/*
 * Refuse a unique index on a table whose writes are in consistency mode
 * 'eventual' (the table's option, else the server's): those writes leave
 * the entries to the applier, which can find a duplicate key only after
 * both facts are written (modify.c refuses such writes too).
 */
void
idx_ddl_check_unique_allowed(const IdxIndexDef *def, const IdxTableInfo *info)
{
	if (def->unique && info->consistency == IDX_CONSISTENCY_EVENTUAL)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("cannot create unique index \"%s\" on foreign table \"%s\" in consistency mode '%s'",
						def->name, info->relname,
						idx_consistency_name(IDX_CONSISTENCY_EVENTUAL)),
				 errdetail("In consistency mode '%s' the index tables are written after the facts, so a unique key cannot be enforced.",
						   idx_consistency_name(IDX_CONSISTENCY_EVENTUAL)),
				 errhint("Set the option consistency of the table to '%s' or '%s' first, or create the index without is_unique.",
						 idx_consistency_name(IDX_CONSISTENCY_TRANSACTION),
						 idx_consistency_name(IDX_CONSISTENCY_ORDERED))));
}

/*
 * Without the library preloaded, or on a server whose option
 * change_streams is 'off', no applier runs: say that the new index table
 * "name" of foreign table "relid" misses the writes made to MongoDB
 * directly.
 */
void
idx_warn_unmaintained(const char *name, Oid relid)
{
	ForeignServer *server;

	if (idx_index_change_hook == NULL)
	{
		ereport(WARNING,
				(errmsg("index table \"%s\" is not maintained against writes made outside this PostgreSQL",
						name),
				 errhint("Add idxtable_fdw to shared_preload_libraries and restart the server.")));
		return;
	}
	server = GetForeignServer(GetForeignTable(relid)->serverid);
	if (!idx_server_change_streams(server))
		ereport(WARNING,
				(errmsg("index table \"%s\" is not maintained against writes made outside this PostgreSQL",
						name),
				 errdetail("Foreign server \"%s\" has option change_streams set to off.",
						   server->servername),
				 errhint("Set change_streams to on if the server offers change streams to its user mapping (a replica set or a sharded cluster, and the changeStream privilege).")));
}

/*
 * The first half of create_index and create_index_concurrently, with the
 * same arguments (tbl, keys, include, is_unique, name, sharding): open
 * the table with "lockmode", resolve the definition and its sharding, note
 * the cluster time its change stream is to start from (before anything
 * reads the facts), insert the definition as 'building', and create its
 * index collection with the collection's lookup index, sharded as
 * index_shard.c decides.  The caller fills it.
 */
void
idx_create_definition(FunctionCallInfo fcinfo, LOCKMODE lockmode,
					  IdxNewIndex *ni)
{
	Relation	rel;
	IdxIndexDef *def;
	IdxDefError err;
	ForeignServer *server;
	char	  **keyspecs;
	char	  **includes = NULL;
	char	  **normalized;
	int			nkeys;
	int			ninclude = 0;
	IdxSharding sharding;

	if (PG_ARGISNULL(0) || PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("the table and the keys of an index must not be null")));
	rel = open_foreign_table(PG_GETARG_OID(0), lockmode);

	def = (IdxIndexDef *) palloc0(sizeof(IdxIndexDef));
	def->relid = RelationGetRelid(rel);
	def->unique = PG_ARGISNULL(3) ? false : PG_GETARG_BOOL(3);
	def->state = IDX_STATE_BUILDING;
	keyspecs = text_array_argument(PG_GETARG_ARRAYTYPE_P(1), "keys", &nkeys);
	if (!PG_ARGISNULL(2))
		includes = text_array_argument(PG_GETARG_ARRAYTYPE_P(2), "include",
									   &ninclude);
	normalized = (char **) palloc0(sizeof(char *) * Max(nkeys, 1));
	if (!idx_resolve_definition(def, RelationGetDescr(rel),
								RelationGetRelationName(rel), keyspecs, nkeys,
								includes, ninclude, normalized, &err))
		ereport(ERROR,
				(errcode(err.sqlstate),
				 errmsg_internal("%s", err.message),
				 err.hint ? errhint("%s", err.hint) : 0));

	if (PG_ARGISNULL(4))
		def->name = choose_index_name(def, RelationGetRelationName(rel));
	else
	{
		def->name = text_to_cstring(PG_GETARG_TEXT_PP(4));
		check_index_name(def->name);
	}
	sharding = idx_parse_sharding(PG_NARGS() > 5 && !PG_ARGISNULL(5) ?
								  text_to_cstring(PG_GETARG_TEXT_PP(5)) :
								  NULL);
	idx_check_new_index(rel, def->name);
	check_no_remote_transaction(def->name);
	ni->info = idx_get_table_info(def->relid);
	idx_ddl_check_unique_allowed(def, ni->info);
	def->database = ni->info->database;
	def->collection = index_collection_name(ni->info->database,
											ni->info->collection, def->name);
	def->definition_id = idx_new_definition_id();

	ni->client = idx_get_client_for_rel(def->relid, InvalidOid, &server);
	ni->servername = server->servername;
	idx_check_index_privileges(ni->client, server, def, ni->info);
	sharding = idx_resolve_sharding(ni->client, ni->servername, def, ni->info,
									sharding);
	def->sharding = idx_sharding_name(sharding);
	ni->sync_from = idx_cluster_time_now(ni->client, ni->servername);
	insert_definition(def, normalized, ni->sync_from);
	create_owned_collection(def, ni->info, ni->client, ni->servername);
	create_lookup_index(ni->client, ni->servername, def);
	idx_shard_index_collection(ni->client, ni->servername, def, sharding);
	ni->rel = rel;
	ni->def = def;
}

/*
 * idxtable.create_index(tbl, keys, include, is_unique, name, sharding)
 * returns the index name.
 */
Datum
idxtable_create_index(PG_FUNCTION_ARGS)
{
	IdxNewIndex ni;
	IdxBuildResult result;

	/* like CREATE INDEX: reads go on, writes wait */
	idx_create_definition(fcinfo, ShareLock, &ni);
	idx_build_index(ni.def, ni.info, ni.client, ni.servername, &result);
	idx_mark_index_valid(ni.def->name, &result);
	CacheInvalidateRelcacheByRelid(ni.def->relid);	/* replan queries */
	relation_close(ni.rel, NoLock);
	idx_warn_unmaintained(ni.def->name, ni.def->relid);
	idx_note_index_change(ni.def->relid, true);

	PG_RETURN_TEXT_P(cstring_to_text(ni.def->name));
}


/* ----------------------------------------------------------------
 *		drop_index
 * ----------------------------------------------------------------
 */

/*
 * idxtable.drop_index(name): the definition goes now, the collection at
 * commit.
 */
Datum
idxtable_drop_index(PG_FUNCTION_ARGS)
{
	char	   *name = text_to_cstring(PG_GETARG_TEXT_PP(0));
	Oid			relid;
	char	   *collection;
	char	   *definition_id;
	Relation	rel;
	ForeignServer *server;
	mongoc_client_t *client;
	IdxIndexDef dropped;

	if (idx_drop_orphan_definition(name))
		PG_RETURN_VOID();		/* its table is gone (index_limits.c) */

	/* like DROP INDEX: no query may use the index meanwhile */
	rel = idx_open_index_table(name, AccessExclusiveLock, ACL_NO_RIGHTS,
							   &collection);
	relid = RelationGetRelid(rel);
	definition_id = lookup_definition_id(name);
	if (!delete_definition(name))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("index \"%s\" does not exist", name)));

	/* only a collection whose ownership marker is this definition's */
	client = idx_get_client_for_rel(relid, InvalidOid, &server);
	memset(&dropped, 0, sizeof(dropped));
	dropped.name = name;
	dropped.relid = relid;
	dropped.database = idx_table_database(relid);
	dropped.collection = collection;
	dropped.definition_id = definition_id;
	if (idx_owner_check_drop(client, server->servername, dropped.database,
							 collection, name, definition_id))
		add_pending_drop(DROP_AT_COMMIT, client, server->servername,
						 &dropped);
	CacheInvalidateRelcacheByRelid(relid);
	relation_close(rel, NoLock);
	idx_note_index_change(relid, false);

	PG_RETURN_VOID();
}

/*
 * ALTER INDEX ... RENAME (index_utility.c) has renamed the definition of
 * an index of table "relid" from "name" to "new_name": once the
 * transaction commits, the ownership marker of its collection names
 * "new_name" too.  An abort forgets it, with the rename.
 */
void
idx_ddl_rename_at_commit(Oid relid, const char *name, const char *new_name)
{
	IdxIndexDef renamed;
	Oid			tbl;
	ForeignServer *server;
	mongoc_client_t *client;
	PendingDrop *p;

	memset(&renamed, 0, sizeof(renamed));
	if (!idx_lookup_index(new_name, &tbl, &renamed.collection))
		elog(ERROR, "renamed index \"%s\" does not exist", new_name);
	renamed.name = pstrdup(name);
	renamed.relid = relid;
	renamed.database = idx_table_database(relid);
	renamed.definition_id = lookup_definition_id(new_name);
	client = idx_get_client_for_rel(relid, InvalidOid, &server);
	p = add_pending_drop(RENAME_AT_COMMIT, client, server->servername,
						 &renamed);
	p->new_name = MemoryContextStrdup(TopTransactionContext, new_name);
}
