/*-------------------------------------------------------------------------
 *
 * index_owner.c
 *		  Index collections that cannot collide or be taken: their names,
 *		  and the ownership markers that create_index writes, drop_index
 *		  and the abort cleanup check, and routing verifies.
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/index/index_owner.c
 *
 * Names.  create_index names an index collection
 * idxtable.<fact collection>.<index name> and stores that name in
 * index_defs.collection, where everything after reads it.  Fact
 * collections may contain dots, so index names may not (nor "$", which
 * MongoDB refuses in collection names): then the text after the last dot
 * is the index, and two (table, index) pairs never share a collection.
 * Default names replace those characters by "_".  ALTER INDEX ... RENAME
 * (index_utility.c) keeps the collection, so a later index may take the
 * old name: create_index then appends _1, _2, ... to the index name until
 * no definition of index_defs has the collection (index_ddl.c).
 *
 * Markers.  Each index collection has one document in the registry
 * collection "idxtable.owners" of its database, whose _id is the index
 * collection's name:
 *
 *	{ _id: "idxtable.people.people_name", fact: "people",
 *	  index: "people_name", created_as: "people_name",
 *	  system: "<PostgreSQL system identifier>",
 *	  database_oid: <OID>, database: "<name>",
 *	  definition: "<index_defs.definition_id>", created: <date>,
 *	  created_collection: <bool> }
 *
 * "index" is the definition's name, which a rename changes when it
 * commits (idx_owner_rename); "created_as" is the name it was created
 * under, which never changes (a marker without it was never renamed:
 * "index" is that name).
 *
 * The marker is kept outside the index collection so that nothing which
 * reads entries (lookups, where {"_id.k0": null} also matches documents
 * without that field; covering reads; verify and repair; the count of
 * ANALYZE) can ever see it, and because MongoDB 6 to 8 have no collection
 * metadata of a client's own.  A marker is claimed by an upsert by _id
 * that only sets fields on insert: the _id index of the registry makes
 * two claims of one collection impossible,
 * across PostgreSQL databases and clusters.  Every delete of a marker is
 * conditional on the definition that made it.
 *
 * create_index claims first and refuses (42P07) a collection whose marker
 * names another owner.  It takes over only (a) a marker of this database for
 * the same index name ("index" or "created_as") whose definition is gone (an
 * aborted build, or a table dropped with DROP FOREIGN TABLE: index names are
 * unique per database and create_index has already inserted its own
 * definition, so no other definition has the name now, and a definition
 * renamed away from it keeps its collection in index_defs, which create_index
 * never chooses) and that says the definition created its collection
 * ("created_collection", set once the build has created it), whatever that
 * collection holds, and (b) a marker whose collection does not exist (it
 * guards nothing).  A collection without a marker is dropped only when it
 * holds no document; so is one whose marker of this database never got as far
 * as creating it (a claim refused because an unmarked collection held
 * documents, whose cleanup could not delete the marker): that claim is taken
 * over as if there were no marker, so a marker left by a refused attempt never
 * makes another's collection ours.  The abort of a build drops the collection
 * it created but keeps the marker (index_ddl.c): a bulk insert of entries
 * whose wait was cancelled may still be running on the server and create the
 * collection again after the drop, and (a) then lets this database build the
 * index again while the other owners still see a marked collection.  Such a
 * marker is replaced by the next create_index of the name (there is one marker
 * per collection name, so they do not pile up per attempt); one of a name
 * never used again stays, and guards nothing once its collection is gone.
 *
 * Routing checks the markers of a table's indexes with one find per table,
 * once per backend per definition (the result is cached with the server,
 * database, collection and definition id as key, so a re-created
 * definition is checked again).  An index whose marker is missing or names
 * another definition is unusable, with a WARNING once; writes through the
 * FDW that would maintain it fail (index_write.c) rather than write into a
 * collection that is not the index's.  Routing asks for the definition
 * only, not the cluster and database: the definition id travels with
 * pg_dump (index_defs is dumped) and pg_upgrade (which gives the cluster a
 * new system identifier), and a copy of a definition computes exactly the
 * entries the original does, so it may read and maintain them.  Dropping
 * is the owner's alone: drop_index drops a collection only if the marker
 * names this cluster, this database and this definition, so a restored
 * copy never drops the original's collection (it leaves it, with a
 * WARNING).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xlog.h"
#include "commands/dbcommands.h"
#include "foreign/foreign.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/uuid.h"

#include "core/connection.h"
#include "core/handle.h"
#include "core/mongoc_compat.h"
#include "core/protocol_read.h"
#include "index/index_catalog.h"
#include "index/index_entry.h"
#include "index/index_owner.h"

/* MongoDB's DuplicateKey */
#define MONGO_DUPLICATE_KEY		11000

/* An ownership marker as read from the registry (strings never NULL) */
typedef struct OwnerMarker
{
	char	   *fact;
	char	   *index;
	char	   *created_as;		/* the index's name at create_index */
	char	   *system;
	int64		database_oid;
	char	   *database;
	char	   *definition;
	bool		created_collection; /* the definition created the collection */
} OwnerMarker;

/* Routing's verdicts, per backend: key, and NULL or why not the index's */
typedef struct OwnerVerdict
{
	char	   *key;
	char	   *problem;
} OwnerVerdict;

static List *verdicts = NIL;
static bool defer_reads = false;	/* see idx_owner_defer_reads */


/* ----------------------------------------------------------------
 *		Names
 * ----------------------------------------------------------------
 */

/*
 * Refuse an index name that cannot be the last part of an unambiguous
 * collection name: empty, or with ".", "$" (text cannot hold NUL).
 */
void
idx_check_index_name(const char *name)
{
	if (name[0] == '\0' || strpbrk(name, ".$") != NULL)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_NAME),
				 errmsg("invalid index name \"%s\"", name),
				 errdetail("Index names end MongoDB collection names: not empty, no \".\" or \"$\".")));
}

/*
 * Replace "." and "$" by "_" (default names come from table and column
 * names, which may contain them).
 */
void
idx_sanitize_index_name(char *name)
{
	char	   *p;

	for (p = name; *p; p++)
	{
		if (*p == '.' || *p == '$')
			*p = '_';
	}
}

/*
 * A new definition identifier: a random UUID as text.
 */
char *
idx_new_definition_id(void)
{
	Datum		uuid = DirectFunctionCall1(gen_random_uuid, (Datum) 0);

	return DatumGetCString(DirectFunctionCall1(uuid_out, uuid));
}


/* ----------------------------------------------------------------
 *		Markers
 * ----------------------------------------------------------------
 */

/*
 * This cluster's system identifier, as decimal text.
 */
static char *
system_identifier(void)
{
	return psprintf(UINT64_FORMAT, GetSystemIdentifier());
}

/*
 * A new marker document for "collection" (caller destroys it).
 */
static bson_t *
make_marker(const char *collection, const char *fact, const char *index,
			const char *definition_id, bool created_collection)
{
	bson_t	   *doc = bson_new();
	char	   *dbname = get_database_name(MyDatabaseId);
	bool		ok;

	ok = BSON_APPEND_UTF8(doc, "_id", collection) &&
		BSON_APPEND_UTF8(doc, "fact", fact) &&
		BSON_APPEND_UTF8(doc, "index", index) &&
		BSON_APPEND_UTF8(doc, "created_as", index) &&
		BSON_APPEND_UTF8(doc, "system", system_identifier()) &&
		BSON_APPEND_INT64(doc, "database_oid", (int64) MyDatabaseId) &&
		BSON_APPEND_UTF8(doc, "database", dbname ? dbname : "") &&
		BSON_APPEND_UTF8(doc, "definition", definition_id) &&
		bson_append_now_utc(doc, "created", -1) &&
		BSON_APPEND_BOOL(doc, "created_collection", created_collection);
	if (!ok)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("ownership marker of index collection \"%s\" is too large",
						collection)));
	return doc;
}

/*
 * A string field of a marker, or "" (a marker written by someone else may
 * lack it or have another type).
 */
static char *
marker_string(const bson_t *doc, const char *field)
{
	bson_iter_t iter;

	if (bson_iter_init_find(&iter, doc, field) && BSON_ITER_HOLDS_UTF8(&iter))
		return pstrdup(bson_iter_utf8(&iter, NULL));
	return pstrdup("");
}

/*
 * Parse a marker document.
 */
static void
parse_marker(const bson_t *doc, OwnerMarker *m)
{
	bson_iter_t iter;

	m->fact = marker_string(doc, "fact");
	m->index = marker_string(doc, "index");
	m->created_as = marker_string(doc, "created_as");
	if (m->created_as[0] == '\0')
		m->created_as = m->index;	/* written before renames existed */
	m->system = marker_string(doc, "system");
	m->database = marker_string(doc, "database");
	m->definition = marker_string(doc, "definition");
	m->created_collection = bson_iter_init_find(&iter, doc,
												"created_collection") &&
		BSON_ITER_HOLDS_BOOL(&iter) && bson_iter_bool(&iter);
	m->database_oid = -1;
	if (bson_iter_init_find(&iter, doc, "database_oid") &&
		BSON_ITER_HOLDS_NUMBER(&iter))
		m->database_oid = bson_iter_as_int64(&iter);
}

/*
 * Read the marker of "collection"; false if there is none.
 */
static bool
read_marker(mongoc_client_t *client, const char *servername,
			const char *database, const char *collection, OwnerMarker *m)
{
	bson_t		filter = BSON_INITIALIZER;
	bson_t		doc;
	bool		found;

	BSON_APPEND_UTF8(&filter, "_id", collection);
	found = idx_find_one_primary(client, servername, database,
								 IDX_OWNER_REGISTRY, &filter, NULL, &doc,
								 idx_op(IDX_OP_READ_OWNER, collection,
										database));
	bson_destroy(&filter);
	if (found)
	{
		parse_marker(&doc, m);
		bson_destroy(&doc);
	}
	return found;
}

/*
 * Is the marker this cluster's and this database's?
 */
static bool
marker_is_this_database(const OwnerMarker *m)
{
	return strcmp(m->system, system_identifier()) == 0 &&
		m->database_oid == (int64) MyDatabaseId;
}

/*
 * Is the marker that of definition "definition_id" of this database?
 */
static bool
marker_is_definition(const OwnerMarker *m, const char *definition_id)
{
	return marker_is_this_database(m) &&
		strcmp(m->definition, definition_id) == 0;
}

/*
 * A whole sentence saying whom a marker names (for DETAIL).
 */
static char *
describe_marker(const OwnerMarker *m)
{
	return psprintf(_("Its ownership marker names index \"%s\" of collection \"%s\" in database \"%s\" (OID %lld) of the PostgreSQL cluster with system identifier %s, definition %s."),
					m->index, m->fact, m->database,
					(long long) m->database_oid, m->system, m->definition);
}

/*
 * Does "collection" exist in "database"?
 */
static bool
collection_exists(mongoc_client_t *client, const char *servername,
				  const char *database, const char *collection)
{
	mongoc_database_t *db = mongoc_client_get_database(client, database);
	bson_t		opts = BSON_INITIALIZER;
	bson_t		filter;
	bson_error_t error;
	char	  **names;
	bool		exists;

	BSON_APPEND_DOCUMENT_BEGIN(&opts, "filter", &filter);
	BSON_APPEND_UTF8(&filter, "name", collection);
	bson_append_document_end(&opts, &filter);
	names = mongoc_database_get_collection_names_with_opts(db, &opts, &error);
	bson_destroy(&opts);
	mongoc_database_destroy(db);
	if (names == NULL)
		idx_report_error(&error, servername,
						 idx_op(IDX_OP_FIND_INDEX_COLL, collection, database));
	exists = names[0] != NULL;
	bson_strfreev(names);
	return exists;
}

/*
 * Does "collection" hold at least one document?
 */
static bool
collection_has_documents(mongoc_client_t *client, const char *servername,
						 const char *database, const char *collection)
{
	bson_t		filter = BSON_INITIALIZER;

	return idx_find_one_primary(client, servername, database, collection,
								&filter, "_id", NULL,
								idx_op(IDX_OP_READ, collection, database));
}

/*
 * The count "field" (matchedCount, upsertedCount, deletedCount) of the
 * reply of a write that succeeded ("ok"), 0 otherwise; destroys the reply.
 */
static int64
reply_count(bson_t *reply, const char *field, bool ok)
{
	bson_iter_t iter;
	int64		count = 0;

	if (ok && bson_iter_init_find(&iter, reply, field) &&
		BSON_ITER_HOLDS_NUMBER(&iter))
		count = bson_iter_as_int64(&iter);
	bson_destroy(reply);
	return count;
}

/*
 * Replace the marker "old" (exactly as read: same owner and definition)
 * by "marker"; false if it changed meanwhile.
 */
static bool
take_over_marker(mongoc_client_t *client, const char *servername,
				 const char *database, const char *collection,
				 const OwnerMarker *old, const bson_t *marker)
{
	mongoc_collection_t *registry;
	bson_t	   *filter;
	bson_t		reply;
	bson_error_t error;
	bool		ok;
	int64		matched = 0;

	filter = BCON_NEW("_id", BCON_UTF8(collection),
					  "system", BCON_UTF8(old->system),
					  "database_oid", BCON_INT64(old->database_oid),
					  "definition", BCON_UTF8(old->definition));
	registry = mongoc_client_get_collection(client, database,
											IDX_OWNER_REGISTRY);
	ok = mongoc_collection_replace_one(registry, filter, marker, NULL,
									   &reply, &error);
	mongoc_collection_destroy(registry);
	bson_destroy(filter);
	matched = reply_count(&reply, "matchedCount", ok);
	if (!ok)
		idx_report_error(&error, servername,
						 idx_op(IDX_OP_TAKE_OWNER, collection, database));
	return matched == 1;
}

/*
 * Write "marker" unless the collection has one: an upsert by _id that
 * only sets fields when it inserts (the registry's _id index makes two
 * claims impossible; an update rather than an insert, so that nothing
 * else about an insert can affect it).  False if there was a marker.
 */
static bool
insert_marker(mongoc_client_t *client, const char *servername,
			  const char *database, const char *collection,
			  const bson_t *marker)
{
	mongoc_collection_t *registry;
	bson_t		selector = BSON_INITIALIZER;
	bson_t		update = BSON_INITIALIZER;
	bson_t	   *opts = BCON_NEW("upsert", BCON_BOOL(true));
	bson_t		reply;
	bson_t		fields;
	bson_error_t error;
	bool		ok;
	int64		upserted = 0;

	BSON_APPEND_UTF8(&selector, "_id", collection);
	/* the _id comes from the selector */
	BSON_APPEND_DOCUMENT_BEGIN(&update, "$setOnInsert", &fields);
	bson_copy_to_excluding_noinit(marker, &fields, "_id", NULL);
	bson_append_document_end(&update, &fields);
	registry = mongoc_client_get_collection(client, database,
											IDX_OWNER_REGISTRY);
	ok = mongoc_collection_update_one(registry, &selector, &update, opts,
									  &reply, &error);
	mongoc_collection_destroy(registry);
	bson_destroy(&selector);
	bson_destroy(&update);
	bson_destroy(opts);
	upserted = reply_count(&reply, "upsertedCount", ok);
	if (!ok && error.code == MONGO_DUPLICATE_KEY)
		return false;			/* a concurrent claim won */
	if (!ok)
		idx_report_error(&error, servername,
						 idx_op(IDX_OP_WRITE_OWNER, collection, database));
	return upserted == 1;
}

/*
 * The ERROR for a collection that belongs to someone else.
 */
static void
report_taken(const char *database, const char *collection,
			 const OwnerMarker *m)
{
	ereport(ERROR,
			(errcode(ERRCODE_DUPLICATE_TABLE),
			 errmsg("index collection \"%s\" of database \"%s\" belongs to another index",
					collection, database),
			 errdetail_internal("%s", describe_marker(m)),
			 errhint("Choose another index name.  If that index no longer exists, drop the collection and its document in \"%s\" in MongoDB.",
					 IDX_OWNER_REGISTRY)));
}

/*
 * How create_index may take over the marker "old" that its claim found
 * (see the file header), or an ERROR naming the owner: a leftover of this
 * database's that created its collection; a claim of this database's that
 * never created one, which counts as no marker at all (the collection, if
 * any, is then checked as an unmarked one); a marker whose collection does
 * not exist.
 */
static IdxClaim
classify_marker(mongoc_client_t *client, const char *servername,
				const char *database, const char *collection,
				const OwnerMarker *old, const char *fact, const char *index,
				const char *definition_id)
{
	bool		dead_claim_of_ours = marker_is_this_database(old) &&
		(strcmp(old->index, index) == 0 ||
		 strcmp(old->created_as, index) == 0) &&
		strcmp(old->fact, fact) == 0 &&
		strcmp(old->definition, definition_id) != 0;

	if (dead_claim_of_ours && old->created_collection)
		return IDX_CLAIM_LEFTOVER;
	if (dead_claim_of_ours)
		return IDX_CLAIM_NEW;
	if (!collection_exists(client, servername, database, collection))
		return IDX_CLAIM_ORPHAN;
	report_taken(database, collection, old);
	return IDX_CLAIM_NEW;		/* keep compiler quiet */
}

/*
 * Claim "collection" for definition "definition_id" (see the file header).
 */
IdxClaim
idx_owner_claim(mongoc_client_t *client, const char *servername,
				const char *database, const char *collection,
				const char *fact, const char *index,
				const char *definition_id)
{
	bson_t	   *marker = make_marker(collection, fact, index, definition_id,
									 false);
	OwnerMarker old;
	IdxClaim	claim;
	int			attempt;

	for (attempt = 0; attempt < 3; attempt++)
	{
		bson_t	   *takeover;
		bool		taken;

		if (insert_marker(client, servername, database, collection, marker))
		{
			bson_destroy(marker);
			return IDX_CLAIM_NEW;
		}
		if (!read_marker(client, servername, database, collection, &old))
			continue;			/* deleted meanwhile: insert again */

		claim = classify_marker(client, servername, database, collection,
								&old, fact, index, definition_id);
		/* a leftover's collection stays ours if this build fails too */
		takeover = make_marker(collection, fact, index, definition_id,
							   claim == IDX_CLAIM_LEFTOVER);
		taken = take_over_marker(client, servername, database, collection,
								 &old, takeover);
		bson_destroy(takeover);
		if (taken)
		{
			bson_destroy(marker);
			return claim;
		}
	}
	bson_destroy(marker);
	ereport(ERROR,
			(errcode(ERRCODE_OBJECT_IN_USE),
			 errmsg("ownership marker of index collection \"%s\" of database \"%s\" keeps changing",
					collection, database),
			 errhint("Another session is creating or dropping an index of that collection.")));
	return IDX_CLAIM_NEW;		/* keep compiler quiet */
}

/*
 * "collection" existed after create_index claimed it (see index_owner.h).
 * A leftover of this database's is ours whatever it holds: documents in
 * it after its drop are late writes of the aborted build.
 */
void
idx_owner_check_unmarked(mongoc_client_t *client, const char *servername,
						 const char *database, const char *collection,
						 const char *definition_id, IdxClaim claim)
{
	OwnerMarker m;

	if (!read_marker(client, servername, database, collection, &m) ||
		!marker_is_definition(&m, definition_id))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_IN_USE),
				 errmsg("index collection \"%s\" of database \"%s\" was claimed by another session meanwhile",
						collection, database)));
	if (claim == IDX_CLAIM_ORPHAN)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_IN_USE),
				 errmsg("index collection \"%s\" of database \"%s\" was created by another session meanwhile",
						collection, database)));
	if (claim != IDX_CLAIM_LEFTOVER &&
		collection_has_documents(client, servername, database, collection))
		ereport(ERROR,
				(errcode(ERRCODE_DUPLICATE_TABLE),
				 errmsg("collection \"%s\" of database \"%s\" already exists and holds documents",
						collection, database),
				 errdetail("It has no ownership marker in \"%s\", so it may belong to another index or application.",
						   IDX_OWNER_REGISTRY),
				 errhint("Choose another index name, or drop the collection in MongoDB if it is not needed.")));
}

/*
 * drop_index: may the collection be dropped with the definition?
 */
bool
idx_owner_check_drop(mongoc_client_t *client, const char *servername,
					 const char *database, const char *collection,
					 const char *index, const char *definition_id)
{
	OwnerMarker m;

	if (!read_marker(client, servername, database, collection, &m))
	{
		ereport(WARNING,
				(errmsg("index collection \"%s\" of database \"%s\" is left in MongoDB",
						collection, database),
				 errdetail("Index \"%s\" is dropped, but the collection has no ownership marker in \"%s\", so it may belong to another index.",
						   index, IDX_OWNER_REGISTRY),
				 errhint("Drop the collection in MongoDB if it is not needed.")));
		return false;
	}
	if (!marker_is_definition(&m, definition_id))
	{
		ereport(WARNING,
				(errmsg("index collection \"%s\" of database \"%s\" is left in MongoDB",
						collection, database),
				 errdetail_internal("%s", describe_marker(&m)),
				 errhint("Index \"%s\" is dropped; only the database that the marker names drops the collection.",
						 index)));
		return false;
	}
	return true;
}

/*
 * Delete the marker of "collection" if it is the definition's.
 */
bool
idx_owner_release(mongoc_client_t *client, const char *database,
				  const char *collection, const char *definition_id,
				  bson_error_t *error)
{
	mongoc_collection_t *registry;
	bson_t	   *filter;
	bson_t		reply;
	bool		ok;
	int64		deleted = 0;

	filter = BCON_NEW("_id", BCON_UTF8(collection),
					  "system", BCON_UTF8(system_identifier()),
					  "database_oid", BCON_INT64((int64) MyDatabaseId),
					  "definition", BCON_UTF8(definition_id));
	registry = mongoc_client_get_collection(client, database,
											IDX_OWNER_REGISTRY);
	ok = mongoc_collection_delete_one(registry, filter, NULL, &reply, error);
	mongoc_collection_destroy(registry);
	bson_destroy(filter);
	deleted = reply_count(&reply, "deletedCount", ok);
	return ok && deleted == 1;
}

/*
 * ALTER INDEX ... RENAME, once committed: the marker of "collection", if it
 * is still the definition's, names the index "index" from now on.  False,
 * with *error, if the update failed; a marker that is not the
 * definition's is left alone.  Errors are never raised (the commit is
 * over when it runs).
 */
bool
idx_owner_rename(mongoc_client_t *client, const char *database,
				 const char *collection, const char *definition_id,
				 const char *index, bson_error_t *error)
{
	mongoc_collection_t *registry;
	bson_t	   *filter;
	bson_t	   *update;
	bson_t		reply;
	bool		ok;

	filter = BCON_NEW("_id", BCON_UTF8(collection),
					  "system", BCON_UTF8(system_identifier()),
					  "database_oid", BCON_INT64((int64) MyDatabaseId),
					  "definition", BCON_UTF8(definition_id));
	update = BCON_NEW("$set", "{", "index", BCON_UTF8(index), "}");
	registry = mongoc_client_get_collection(client, database,
											IDX_OWNER_REGISTRY);
	ok = mongoc_collection_update_one(registry, filter, update, NULL,
									  &reply, error);
	mongoc_collection_destroy(registry);
	bson_destroy(filter);
	bson_destroy(update);
	bson_destroy(&reply);
	return ok;
}

/*
 * Record in the definition's marker that it has created "collection", so
 * that a later create_index of the name may take the collection over if
 * this build is aborted (see the file header).
 */
void
idx_owner_mark_created(mongoc_client_t *client, const char *servername,
					   const char *database, const char *collection,
					   const char *definition_id)
{
	mongoc_collection_t *registry;
	bson_t	   *filter;
	bson_t	   *update;
	bson_t		reply;
	bson_error_t error;
	bool		ok;
	int64		matched = 0;

	filter = BCON_NEW("_id", BCON_UTF8(collection),
					  "definition", BCON_UTF8(definition_id));
	update = BCON_NEW("$set", "{", "created_collection", BCON_BOOL(true),
					  "}");
	registry = mongoc_client_get_collection(client, database,
											IDX_OWNER_REGISTRY);
	ok = mongoc_collection_update_one(registry, filter, update, NULL,
									  &reply, &error);
	mongoc_collection_destroy(registry);
	bson_destroy(filter);
	bson_destroy(update);
	matched = reply_count(&reply, "matchedCount", ok);
	if (!ok)
		idx_report_error(&error, servername,
						 idx_op(IDX_OP_WRITE_OWNER, collection, database));
	if (matched != 1)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_IN_USE),
				 errmsg("index collection \"%s\" of database \"%s\" was claimed by another session meanwhile",
						collection, database)));
}


/* ----------------------------------------------------------------
 *		Routing
 * ----------------------------------------------------------------
 */

/*
 * The cache key of a definition read through server "serverid".
 */
static char *
verdict_key(Oid serverid, const IdxIndexDef *def)
{
	return psprintf("%u/%s/%s/%s", serverid, def->database, def->collection,
					def->definition_id);
}

/*
 * The cached verdict for "key", or NULL.
 */
static OwnerVerdict *
find_verdict(const char *key)
{
	ListCell   *lc;

	foreach(lc, verdicts)
	{
		OwnerVerdict *v = (OwnerVerdict *) lfirst(lc);

		if (strcmp(v->key, key) == 0)
			return v;
	}
	return NULL;
}

/*
 * Judge the marker of a definition (NULL: none) and remember the verdict;
 * the first time an index is refused, a WARNING says why.
 */
static OwnerVerdict *
judge(const char *key, const IdxIndexDef *def, const bson_t *doc)
{
	MemoryContext oldcxt = MemoryContextSwitchTo(TopMemoryContext);
	OwnerVerdict *v = (OwnerVerdict *) palloc0(sizeof(OwnerVerdict));
	OwnerMarker m;

	v->key = pstrdup(key);
	if (doc == NULL)
		v->problem = psprintf(_("Index collection \"%s\" has no ownership marker in \"%s\"."),
							  def->collection, IDX_OWNER_REGISTRY);
	else
	{
		parse_marker(doc, &m);
		/* the definition, wherever its copy lives (see the file header) */
		if (strcmp(m.definition, def->definition_id) != 0)
			v->problem = psprintf(_("Index collection \"%s\" is not this index's. %s"),
								  def->collection, describe_marker(&m));
	}
	verdicts = lappend(verdicts, v);
	MemoryContextSwitchTo(oldcxt);

	if (v->problem)
		ereport(WARNING,
				(errmsg("index \"%s\" on foreign table \"%s\" cannot be used: its index collection does not carry its ownership marker",
						def->name, get_rel_name(def->relid)),
				 errdetail_internal("%s", v->problem),
				 errhint("Drop it with idxtable.drop_index() and create it under another name.")));
	return v;
}

/*
 * The filter {_id: {$in: [<collections of defs>]}} (caller destroys it).
 */
static bson_t *
collections_filter(List *defs)
{
	bson_t	   *filter = bson_new();
	bson_t		cond,
				names;
	ListCell   *lc;
	int			i = 0;

	BSON_APPEND_DOCUMENT_BEGIN(filter, "_id", &cond);
	IDX_BSON_APPEND_ARRAY_BEGIN(&cond, "$in", &names);
	foreach(lc, defs)
	{
		char		idx[16];

		snprintf(idx, sizeof(idx), "%d", i++);
		BSON_APPEND_UTF8(&names, idx,
						 ((IdxIndexDef *) lfirst(lc))->collection);
	}
	bson_append_array_end(&cond, &names);
	bson_append_document_end(filter, &cond);
	return filter;
}

/*
 * The marker of "collection" among "docs", or NULL.
 */
static const bson_t *
marker_of(List *docs, const char *collection)
{
	ListCell   *lc;

	foreach(lc, docs)
	{
		bson_iter_t iter;

		if (bson_iter_init_find(&iter, lfirst(lc), "_id") &&
			BSON_ITER_HOLDS_UTF8(&iter) &&
			strcmp(bson_iter_utf8(&iter, NULL), collection) == 0)
			return lfirst(lc);
	}
	return NULL;
}

/*
 * Read the markers of "defs" (of one table, so of one database) with one
 * find, and judge each.
 */
static void
read_verdicts(Oid relid, Oid userid, Oid serverid, List *defs)
{
	ForeignServer *server;
	mongoc_client_t *client = idx_get_client_for_rel(relid, userid, &server);
	const IdxIndexDef *first = (const IdxIndexDef *) linitial(defs);
	mongoc_collection_t *registry;
	mongoc_cursor_t *cursor;
	IdxHandle  *owned_registry;
	IdxHandle  *owned_cursor;
	bson_t	   *filter;
	bson_error_t error;
	const bson_t *doc;
	List	   *docs = NIL;		/* palloc'd copies */
	ListCell   *lc;

	registry = mongoc_client_get_collection(client, first->database,
											IDX_OWNER_REGISTRY);
	owned_registry = idx_own_collection(registry);
	filter = collections_filter(defs);
	cursor = mongoc_collection_find_with_opts(registry, filter, NULL,
											  idx_primary_read_prefs());
	bson_destroy(filter);
	owned_cursor = idx_own_cursor(cursor);
	while (mongoc_cursor_next(cursor, &doc))
		docs = lappend(docs, idx_bson_pcopy(doc));
	if (mongoc_cursor_error(cursor, &error))
		idx_report_cursor_error(cursor, server->servername,
								idx_op(IDX_OP_READ_OWNERS, get_rel_name(relid),
									   NULL));
	foreach(lc, defs)
	{
		IdxIndexDef *def = (IdxIndexDef *) lfirst(lc);

		judge(verdict_key(serverid, def), def,
			  marker_of(docs, def->collection));
	}
	idx_release(owned_cursor);
	idx_release(owned_registry);
}

/*
 * Mark the definitions whose collection is not theirs as failed (see the
 * file header); the markers not judged yet are read with one find, unless
 * reads are deferred.  Returns whether every definition has its verdict
 * (a caller that keeps the verdicts must not keep them otherwise).
 */
bool
idx_owner_check_indexes(Oid relid, Oid userid, List *defs)
{
	Oid			serverid = GetForeignTable(relid)->serverid;
	List	   *unjudged = NIL;
	bool		judged_all = true;
	ListCell   *lc;

	foreach(lc, defs)
	{
		IdxIndexDef *def = (IdxIndexDef *) lfirst(lc);

		if (def->state != IDX_STATE_FAILED &&
			find_verdict(verdict_key(serverid, def)) == NULL)
			unjudged = lappend(unjudged, def);
	}
	if (unjudged != NIL && defer_reads)
		judged_all = false;
	else if (unjudged != NIL)
		read_verdicts(relid, userid, serverid, unjudged);

	foreach(lc, defs)
	{
		IdxIndexDef *def = (IdxIndexDef *) lfirst(lc);
		OwnerVerdict *v;

		if (def->state == IDX_STATE_FAILED)
			continue;
		v = find_verdict(verdict_key(serverid, def));
		if (v != NULL && v->problem != NULL)
		{
			def->state = IDX_STATE_FAILED;
			def->owner_problem = v->problem;
		}
	}
	return judged_all;
}

/*
 * Defer the reads of markers (see index_owner.h).
 */
bool
idx_owner_defer_reads(bool defer)
{
	bool		previous = defer_reads;

	defer_reads = defer;
	return previous;
}
