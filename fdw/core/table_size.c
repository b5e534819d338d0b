/*-------------------------------------------------------------------------
 *
 * table_size.c
 *		  The size of a foreign table's collection as MongoDB reports it,
 *		  cached per backend for planning before ANALYZE.
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/core/table_size.c
 *
 * Without statistics the planner costs a table from what MongoDB says of
 * its collection: the number of documents and their mean BSON size.  One
 * aggregate with a $collStats stage asking for storageStats gives both
 * (storageStats.count and .size, what the drivers' estimatedDocumentCount
 * and collStats read from the same metadata); through mongos it returns
 * one document per shard of a sharded collection, and the shards' counts
 * and sizes are added.  A user without the collStats action (or a server
 * or a view that refuses the stage) gets the "count" command without a
 * query instead, which is estimatedDocumentCount: the count alone.
 *
 * Planning asks at most once per relation, cached per backend by server,
 * database and collection for IDX_SIZE_MAX_AGE_MS, where the scan's reads
 * go (the URI's read preference for a plain read, the primary for one that
 * decides a write), outside any scan's round trips.  It never
 * fails for MongoDB's sake: a server that cannot be reached or refuses
 * both commands leaves the size unknown (the planner then assumes a
 * default, planner.c), and is asked again after IDX_SIZE_RETRY_MS only,
 * so that EXPLAIN while the server is down does not wait for it at every
 * planning.  A cancel during the ask is raised as ever.  ANALYZE counts
 * once per table and keeps the count here too.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "foreign/foreign.h"
#include "miscadmin.h"
#include "storage/proc.h"
#include "utils/hsearch.h"
#include "utils/inval.h"
#include "utils/memutils.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"

#include "core/connection.h"
#include "core/mongo_limits.h"
#include "core/pg_compat.h"
#include "core/protocol_read.h"
#include "core/stream.h"
#include "core/table_size.h"

/* A cached size older than this is asked for again by planning */
#define IDX_SIZE_MAX_AGE_MS (5 * 60 * 1000)
/* After an ask that learned nothing, planning waits this long to ask again */
#define IDX_SIZE_RETRY_MS (60 * 1000)

/* "<server OID>/<database>.<collection>": the namespace is limited */
#define SIZE_KEY_LEN (IDX_MAX_NAMESPACE_BYTES + 16)

typedef struct TableSizeEntry
{
	char		key[SIZE_KEY_LEN];	/* hash key */
	double		count;			/* documents, or -1 if not counted yet */
	double		avg_bytes;		/* mean document size, or -1 if unknown */
	TimestampTz counted_at;
	LocalTransactionId counted_in;	/* the transaction that counted */
	TimestampTz asked_at;		/* planning's last ask, or 0 */
} TableSizeEntry;

static HTAB *size_cache = NULL;

/*
 * A changed server may be another cluster: forget every size.
 */
static void
size_inval_callback(Datum arg, int cacheid, uint32 hashvalue)
{
	HASH_SEQ_STATUS scan;
	TableSizeEntry *entry;

	if (size_cache == NULL)
		return;
	hash_seq_init(&scan, size_cache);
	while ((entry = hash_seq_search(&scan)) != NULL)
		hash_search(size_cache, entry->key, HASH_REMOVE, NULL);
}

/*
 * The entry of the table's collection, created (not counted) if needed.
 */
static TableSizeEntry *
size_entry(const IdxTableInfo *info)
{
	char		key[SIZE_KEY_LEN];
	TableSizeEntry *entry;
	bool		found;

	if (size_cache == NULL)
	{
		HASHCTL		ctl;

		ctl.keysize = SIZE_KEY_LEN;
		ctl.entrysize = sizeof(TableSizeEntry);
		ctl.hcxt = CacheMemoryContext;
		size_cache = hash_create("idxtable_fdw collection sizes", 64, &ctl,
								 HASH_ELEM | HASH_STRINGS | HASH_CONTEXT);
		CacheRegisterSyscacheCallback(FOREIGNSERVEROID, size_inval_callback,
									  (Datum) 0);
	}
	snprintf(key, sizeof(key), "%u/%s.%s", info->serverid, info->database,
			 info->collection);
	entry = hash_search(size_cache, key, HASH_ENTER, &found);
	if (!found)
	{
		entry->count = -1;
		entry->avg_bytes = -1;
		entry->counted_at = 0;
		entry->counted_in = InvalidLocalTransactionId;
		entry->asked_at = 0;
	}
	return entry;
}

/*
 * Should planning ask MongoDB: is the entry's count missing or older than
 * IDX_SIZE_MAX_AGE_MS, and its last ask not a failed one of the last
 * IDX_SIZE_RETRY_MS?
 */
static bool
size_wanted(const TableSizeEntry *entry)
{
	TimestampTz now = GetCurrentTimestamp();

	if (entry->count >= 0 &&
		!TimestampDifferenceExceeds(entry->counted_at, now,
									IDX_SIZE_MAX_AGE_MS))
		return false;
	return entry->asked_at == 0 ||
		TimestampDifferenceExceeds(entry->asked_at, now, IDX_SIZE_RETRY_MS);
}

/*
 * The number in "doc" at dotted "path", added to *sum; false if there is
 * none.
 */
static bool
add_number(const bson_t *doc, const char *path, double *sum)
{
	bson_iter_t iter;
	bson_iter_t found;

	if (!bson_iter_init(&iter, doc) ||
		!bson_iter_find_descendant(&iter, path, &found) ||
		!BSON_ITER_HOLDS_NUMBER(&found))
		return false;
	*sum += (double) bson_iter_as_int64(&found);
	return true;
}

/*
 * Count and total size of the collection from a $collStats stage, summed
 * over the documents it returns (one per shard through mongos).  False if
 * the aggregate failed or said nothing of storage.
 */
static bool
collection_stats(mongoc_client_t *client, const char *servername,
				 const IdxTableInfo *info,
				 const mongoc_read_prefs_t *read_prefs, double *count,
				 double *bytes)
{
	mongoc_collection_t *collection;
	mongoc_cursor_t *cursor;
	bson_t	   *pipeline;
	const bson_t *doc;
	bson_error_t error;
	bool		ok = true;
	int			shards = 0;

	*count = 0;
	*bytes = 0;
	pipeline = BCON_NEW("pipeline", "[",
						"{", "$collStats", "{", "storageStats", "{", "}", "}", "}",
						"]");
	collection = mongoc_client_get_collection(client, info->database,
											  info->collection);
	cursor = mongoc_collection_aggregate(collection, MONGOC_QUERY_NONE,
										 pipeline, NULL, read_prefs);
	while (mongoc_cursor_next(cursor, &doc))
	{
		ok &= add_number(doc, "storageStats.count", count);
		ok &= add_number(doc, "storageStats.size", bytes);
		shards++;
	}
	if (mongoc_cursor_error(cursor, &error))
		ok = false;
	mongoc_cursor_destroy(cursor);
	mongoc_collection_destroy(collection);
	bson_destroy(pipeline);
	if (!ok)
		idx_stream_raise_failure(servername);
	return ok && shards > 0;
}

/*
 * The "count" command without a query (estimatedDocumentCount), for a
 * user or server that refuses $collStats.  False if it failed.
 */
static bool
metadata_count(mongoc_client_t *client, const char *servername,
			   const IdxTableInfo *info,
			   const mongoc_read_prefs_t *read_prefs, double *count)
{
	bson_t	   *command = BCON_NEW("count", BCON_UTF8(info->collection));
	bson_t		reply;
	bson_error_t error;
	bool		ok;

	*count = 0;
	ok = mongoc_client_command_simple(client, info->database, command,
									  read_prefs, &reply, &error) &&
		add_number(&reply, "n", count);
	bson_destroy(&reply);
	bson_destroy(command);
	if (!ok)
		idx_stream_raise_failure(servername);
	return ok;
}

/*
 * May planning connect as "userid" to the server: has it a user mapping
 * (its own or PUBLIC's, as GetUserMapping looks them up)?
 */
static bool
has_user_mapping(Oid userid, Oid serverid)
{
	return SearchSysCacheExists2(USERMAPPINGUSERSERVER,
								 ObjectIdGetDatum(userid),
								 ObjectIdGetDatum(serverid)) ||
		SearchSysCacheExists2(USERMAPPINGUSERSERVER,
							  ObjectIdGetDatum(InvalidOid),
							  ObjectIdGetDatum(serverid));
}

/*
 * See table_size.h.
 */
mongoc_client_t *
idx_planning_client(ForeignServer *server, Oid userid)
{
	/* a parallel worker plans nothing of ours; a missing mapping errs later */
	if (IsInParallelMode() || !has_user_mapping(userid, server->serverid))
		return NULL;
	return idx_get_client_quiet(server,
								GetUserMapping(userid, server->serverid));
}

/*
 * Ask MongoDB for the collection's size (see the file header) and keep
 * what it said in the entry: where the scan's reads go, the primary for
 * one that decides a write ("primary"), else where the client's read
 * preference says.
 */
static void
ask_size(const IdxTableInfo *info, Oid userid, bool primary)
{
	ForeignServer *server = GetForeignServer(info->serverid);
	mongoc_client_t *client = idx_planning_client(server, userid);
	TableSizeEntry *entry;
	double		count = -1;
	double		bytes = -1;

	if (client != NULL)
	{
		uint64	   *previous = idx_count_round_trips(NULL);
		const mongoc_read_prefs_t *read_prefs = primary ?
			idx_primary_read_prefs() : mongoc_client_get_read_prefs(client);

		if (collection_stats(client, server->servername, info, read_prefs,
							 &count, &bytes))
			bytes = count > 0 ? bytes / count : -1;
		else if (!metadata_count(client, server->servername, info,
								 read_prefs, &count))
			count = -1;
		idx_count_round_trips(previous);
	}

	/* looked up after the commands: an invalidation may have removed it */
	entry = size_entry(info);
	entry->asked_at = GetCurrentTimestamp();
	if (count >= 0)
	{
		entry->count = count;
		entry->avg_bytes = bytes;
		entry->counted_at = entry->asked_at;
		entry->counted_in = idx_local_xid();
	}
}

/*
 * See table_size.h.
 */
void
idx_planning_collection_size(const IdxTableInfo *info, Oid userid,
							 bool primary, IdxCollectionSize *size)
{
	TableSizeEntry *entry = size_entry(info);

	if (size_wanted(entry))
	{
		ask_size(info, OidIsValid(userid) ? userid : GetUserId(), primary);
		entry = size_entry(info);
	}
	size->documents = entry->count;
	size->avg_bytes = entry->avg_bytes;
}

/*
 * See table_size.h.
 */
double
idx_analyze_document_count(const IdxTableInfo *info, mongoc_client_t *client,
						   const char *servername, bool fresh)
{
	TableSizeEntry *entry = size_entry(info);
	uint64	   *previous;
	int64		n;

	if (!fresh && entry->count >= 0 && entry->counted_in == idx_local_xid())
		return entry->count;
	previous = idx_count_round_trips(NULL);
	n = idx_count_documents(client, servername, info->database,
							info->collection);
	idx_count_round_trips(previous);
	/* looked up after the command: an invalidation may have removed it */
	entry = size_entry(info);
	entry->count = (double) n;
	entry->counted_at = GetCurrentTimestamp();
	entry->counted_in = idx_local_xid();
	return entry->count;
}
