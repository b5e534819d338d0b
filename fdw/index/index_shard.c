/*-------------------------------------------------------------------------
 *
 * index_shard.c
 *		  Sharded index collections on a sharded cluster (mongos).
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/index/index_shard.c
 *
 * An index collection on a sharded cluster is sharded by its leading key,
 * the entry field "_id.k0": ranged ({"_id.k0": 1}, key order kept, so a
 * range targets the shards of its chunks) or hashed ({"_id.k0":
 * "hashed"}, entries spread at once, ranges broadcast).  Whatever the
 * kind, every entry of one key value is on one shard, because the shard
 * key is a prefix of the entry's _id; mongod enforces _id per shard, so a
 * unique index table's _id (the key, without the fact id) stays unique in
 * the whole cluster.  Lookups and entry writes hold the shard key: lookups
 * as "_id.k0" equalities, $in lists or ranges (route_scan.c), writes as an
 * equality on the whole _id, from which mongos reads "_id.k0".
 *
 * create_index decides once, and the choice is kept in idxtable.index_defs
 * (sharding): by default an index table of a foreign table over a sharded
 * collection (config.collections has it) is ranged, any other 'none'.  Key
 * values are never arrays (a multi-valued key has one entry per element)
 * nor documents, so either kind can shard any index table.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"

#include "core/connection.h"
#include "core/privileges.h"
#include "core/protocol_read.h"
#include "core/remote_error.h"
#include "index/index_catalog.h"
#include "index/index_shard.h"

#define MONGO_UNAUTHORIZED		13

/* The action shardCollection needs on the collection it shards */
static const char *const shard_actions[] = {"enableSharding", NULL};

/* The action reading config.collections needs */
static const char *const config_actions[] = {"find", NULL};

/*
 * The choice a create_index argument names; NULL is the default.
 */
IdxSharding
idx_parse_sharding(const char *value)
{
	if (value == NULL)
		return IDX_SHARDING_DEFAULT;
	if (strcmp(value, "none") == 0)
		return IDX_SHARDING_NONE;
	if (strcmp(value, "ranged") == 0)
		return IDX_SHARDING_RANGED;
	if (strcmp(value, "hashed") == 0)
		return IDX_SHARDING_HASHED;
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("invalid value for argument sharding: \"%s\"", value),
			 errhint("Valid values are 'ranged', 'hashed' and 'none'.")));
	return IDX_SHARDING_NONE;	/* keep compiler quiet */
}

/*
 * The catalog's name of a choice.
 */
const char *
idx_sharding_name(IdxSharding sharding)
{
	switch (sharding)
	{
		case IDX_SHARDING_RANGED:
			return "ranged";
		case IDX_SHARDING_HASHED:
			return "hashed";
		default:
			return "none";
	}
}

/*
 * The type of the server the client writes to, as libmongoc describes it
 * ("Mongos", "RSPrimary", "Standalone", "LoadBalancer", ...), palloc'd.
 */
static char *
server_type(mongoc_client_t *client, const char *servername)
{
	bson_error_t error;
	mongoc_server_description_t *sd;
	char	   *type;

	sd = mongoc_client_select_server(client, true, NULL, &error);
	if (sd == NULL)
		idx_report_error(&error, servername,
						 idx_op(IDX_OP_SELECT_SERVER, NULL, NULL));
	type = pstrdup(mongoc_server_description_type(sd));
	mongoc_server_description_destroy(sd);
	return type;
}

/*
 * Is "type" a router: a mongos, or a load balancer (which fronts mongos)?
 */
static bool
is_router(const char *type)
{
	return strcmp(type, "Mongos") == 0 || strcmp(type, "LoadBalancer") == 0;
}

/*
 * The actions of "actions" the MongoDB user lacks on "collection" of
 * "database", as a list for messages; NULL when it has them all or its
 * privileges cannot be read (then the server decides).
 */
static char *
missing_actions(mongoc_client_t *client, const char *database,
				const char *collection, const char *const *actions)
{
	IdxPrivileges *privileges = idx_privileges_fetch(client);

	if (privileges == NULL)
		return NULL;
	return idx_privileges_missing(privileges, database, collection, actions);
}

/*
 * Refuse to shard index collection "collection" of "database" (of index
 * table "indexname") for lack of the actions "missing": 42501.
 */
static void
refuse_sharding(const char *servername, const char *database,
				const char *collection, const char *indexname,
				const char *missing)
{
	ereport(ERROR,
			(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
			 errmsg("the MongoDB user of foreign server \"%s\" may not shard index collection \"%s\" of database \"%s\"",
					servername, collection, database),
			 errdetail("shardCollection needs the action %s on the collection, which the user lacks.",
					   missing),
			 errhint("Grant the MongoDB user the action enableSharding on the index collection (the built-in roles enableSharding and clusterManager have it), or create index table \"%s\" with sharding => 'none'.",
					 indexname)));
}

/*
 * The default left unsharded for lack of the actions "missing" on
 * "what": a WARNING saying so (the index table works, on one shard).
 */
static void
warn_unsharded(const char *servername, const char *indexname,
			   const char *missing, const char *what)
{
	ereport(WARNING,
			(errmsg("the index collection of index table \"%s\" is not sharded", indexname),
			 errdetail("The MongoDB user of foreign server \"%s\" lacks the action %s on %s.",
					   servername, missing, what),
			 errhint("To shard it, grant the MongoDB user find on config.collections (the built-in role clusterMonitor has it) and enableSharding on the index collection (the built-in role enableSharding has it), then drop the index and create it again, or name the sharding: sharding => 'ranged' or 'hashed' (an error without the privilege), 'none' (no warning).")));
}

/*
 * Is collection "collection" of "database" sharded?  Read from the config
 * server through mongos: config.collections has a document for every
 * sharded collection (MongoDB 8.0 also for some unsharded ones, marked
 * unsplittable).
 */
static bool
collection_is_sharded(mongoc_client_t *client, const char *servername,
					  const char *database, const char *collection)
{
	bson_t		filter = BSON_INITIALIZER;
	bson_t		doc;
	bson_iter_t iter;
	bool		found;

	BSON_APPEND_UTF8(&filter, "_id", psprintf("%s.%s", database, collection));
	found = idx_find_one_primary(client, servername, "config", "collections",
								 &filter, "unsplittable", &doc,
								 idx_op(IDX_OP_READ, "collections", "config"));
	bson_destroy(&filter);
	if (found)
	{
		if (bson_iter_init_find(&iter, &doc, "unsplittable") &&
			bson_iter_as_bool(&iter))
			found = false;
		bson_destroy(&doc);
	}
	return found;
}

/*
 * The sharding of a new index table (see index_shard.h).  Asked for
 * explicitly, ranged or hashed needs a mongos and the action
 * enableSharding (0A000, 42501); the default falls back to unsharded, with
 * a WARNING, where the user may not read config.collections or shard, as
 * index collections were before they could be sharded.
 */
IdxSharding
idx_resolve_sharding(mongoc_client_t *client, const char *servername,
					 const IdxIndexDef *def, const IdxTableInfo *info,
					 IdxSharding requested)
{
	char	   *type;
	char	   *missing;

	if (requested == IDX_SHARDING_NONE)
		return IDX_SHARDING_NONE;
	type = server_type(client, servername);
	if (!is_router(type))
	{
		if (requested == IDX_SHARDING_DEFAULT)
			return IDX_SHARDING_NONE;
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("cannot shard the index collection of index table \"%s\": foreign server \"%s\" is not a sharded cluster",
						def->name, servername),
				 errdetail("Only a mongos (or a load balancer in front of mongos) shards collections."),
				 errhint("Create the index with sharding => 'none', or without the argument.")));
	}
	if (requested == IDX_SHARDING_DEFAULT)
	{
		/* without the privileges, the default stays what it was: unsharded */
		missing = missing_actions(client, "config", "collections",
								  config_actions);
		if (missing != NULL)
		{
			warn_unsharded(servername, def->name, missing,
						   "config.collections");
			return IDX_SHARDING_NONE;
		}
		if (!collection_is_sharded(client, servername, info->database,
								   info->collection))
			return IDX_SHARDING_NONE;
		missing = missing_actions(client, def->database, def->collection,
								  shard_actions);
		if (missing != NULL)
		{
			warn_unsharded(servername, def->name, missing,
						   psprintf("the index collection \"%s\"",
									def->collection));
			return IDX_SHARDING_NONE;
		}
		return IDX_SHARDING_RANGED;
	}
	missing = missing_actions(client, def->database, def->collection,
							  shard_actions);
	if (missing != NULL)
		refuse_sharding(servername, def->database, def->collection,
						def->name, missing);
	return requested;
}

/*
 * After the index collection of "def" was sharded through one mongos, make
 * every mongos the client knows forget what it may have cached of the
 * collection while it was unsharded ({flushRouterConfig: "<db>.<coll>"}):
 * creating the collection and its lookup index may have gone through
 * another one.  Such a mongos would send the collection's writes to the
 * primary shard with an unsharded version, which the shard refuses with
 * StaleConfig; mongos retries that outside a transaction but not inside
 * one, so the first transaction to write the index collection through it
 * would fail with 40001.  Best effort: a mongos that refuses (a user
 * without the flushRouterConfig action) or cannot be reached learns the
 * change by that failure instead.
 */
static void
flush_routers(mongoc_client_t *client, const IdxIndexDef *def)
{
	mongoc_server_description_t **sds;
	size_t		n;
	bson_t		command = BSON_INITIALIZER;

	sds = mongoc_client_get_server_descriptions(client, &n);
	BSON_APPEND_UTF8(&command, "flushRouterConfig",
					 psprintf("%s.%s", def->database, def->collection));
	for (size_t i = 0; i < n; i++)
	{
		bson_t		reply;
		bson_error_t error;

		if (strcmp(mongoc_server_description_type(sds[i]), "Mongos") != 0)
			continue;
		CHECK_FOR_INTERRUPTS();
		(void) mongoc_client_command_simple_with_server_id(client, "admin",
														   &command, NULL,
														   mongoc_server_description_id(sds[i]),
														   &reply, &error);
		bson_destroy(&reply);
	}
	bson_destroy(&command);
	mongoc_server_descriptions_destroy_all(sds, n);
}

/*
 * Shard the new, empty index collection of "def": {shardCollection:
 * "<db>.<collection>", key: {"_id.k0": 1 or "hashed"}}.  Ranged uses the
 * lookup index (whose first field is "_id.k0"); hashed makes mongod create
 * the hashed index and, the collection being empty, spread its initial
 * chunks over the shards.  Never "unique": uniqueness is that of _id, per
 * shard, which the shard key being a prefix of _id makes global.
 */
void
idx_shard_index_collection(mongoc_client_t *client, const char *servername,
						   const IdxIndexDef *def, IdxSharding sharding)
{
	bson_t		command = BSON_INITIALIZER;
	bson_t		key;
	bson_t		reply;
	bson_error_t error;
	bool		ok;
	char		field[16];

	if (sharding != IDX_SHARDING_RANGED && sharding != IDX_SHARDING_HASHED)
		return;
	snprintf(field, sizeof(field), "_id.%s", idx_key_field(0));
	BSON_APPEND_UTF8(&command, "shardCollection",
					 psprintf("%s.%s", def->database, def->collection));
	BSON_APPEND_DOCUMENT_BEGIN(&command, "key", &key);
	if (sharding == IDX_SHARDING_HASHED)
		BSON_APPEND_UTF8(&key, field, "hashed");
	else
		BSON_APPEND_INT32(&key, field, 1);
	bson_append_document_end(&command, &key);
	ok = mongoc_client_command_simple(client, "admin", &command, NULL,
									  &reply, &error);
	bson_destroy(&command);
	bson_destroy(&reply);
	if (ok)
	{
		flush_routers(client, def);
		return;
	}
	if (error.domain == MONGOC_ERROR_SERVER &&
		error.code == MONGO_UNAUTHORIZED)
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("the MongoDB user of foreign server \"%s\" may not shard index collection \"%s\" of database \"%s\"",
						servername, def->collection, def->database),
				 errdetail("MongoDB refused shardCollection: %s",
						   idx_scrub_message(error.message)),
				 errhint("Grant the MongoDB user the action enableSharding on the index collection (the built-in roles enableSharding and clusterManager have it), or create index table \"%s\" with sharding => 'none'.",
						 def->name)));
	idx_report_error(&error, servername,
					 idx_op(IDX_OP_SHARD_INDEX_COLL, def->collection,
							def->database));
}
