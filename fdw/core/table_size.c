/*-------------------------------------------------------------------------
 *
 * table_size.c
 *		  The document count of a foreign table's collection, cached per
 *		  backend for planning before ANALYZE.
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/core/table_size.c
 *
 * Without statistics the planner takes a table's size from a valid index
 * table's entry count (index_catalog.c), else from here: MongoDB's
 * metadata count of the collection (the "count" command without a query,
 * which is what the drivers' estimatedDocumentCount sends: see
 * mongodb/specifications, source/crud/crud.md), cached per backend by
 * server, database and collection.  Planning never talks to MongoDB: when
 * it finds no count, it marks the collection as wanted, and the next
 * scan of the table counts at executor start (not for EXPLAIN without
 * ANALYZE), outside the scan's round trips, with the scan's read
 * preference (the URI's for a plain read, the primary for one that
 * decides a write).  So the first query of a
 * backend on a never-analyzed table without index tables is planned with
 * DEFAULT_COLLECTION_SIZE, the next ones with the count.  A count older
 * than IDX_COUNT_MAX_AGE_MS is taken again the same way.  ANALYZE counts
 * once per table and keeps the count here too.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "storage/proc.h"
#include "utils/hsearch.h"
#include "utils/inval.h"
#include "utils/memutils.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"

#include "core/connection.h"
#include "core/mongo_limits.h"
#include "core/pg_compat.h"
#include "core/table_size.h"

/* A cached count older than this is taken again when planning wants it */
#define IDX_COUNT_MAX_AGE_MS (5 * 60 * 1000)

/* "<server OID>/<database>.<collection>": the namespace is limited */
#define SIZE_KEY_LEN (IDX_MAX_NAMESPACE_BYTES + 16)

typedef struct TableSizeEntry
{
	char		key[SIZE_KEY_LEN];	/* hash key */
	double		count;			/* documents, or -1 if not counted yet */
	TimestampTz counted_at;
	LocalTransactionId counted_in;	/* the transaction that counted */
	bool		wanted;			/* planning found no (fresh) count */
} TableSizeEntry;

static HTAB *size_cache = NULL;

/*
 * A changed server may be another cluster: forget every count.
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
		entry->counted_at = 0;
		entry->counted_in = InvalidLocalTransactionId;
		entry->wanted = false;
	}
	return entry;
}

/*
 * Is the entry's count missing or older than IDX_COUNT_MAX_AGE_MS?
 */
static bool
count_is_old(const TableSizeEntry *entry)
{
	return entry->count < 0 ||
		TimestampDifferenceExceeds(entry->counted_at, GetCurrentTimestamp(),
								   IDX_COUNT_MAX_AGE_MS);
}

/*
 * Count the collection (one "count" command, not counted as a round trip
 * of any scan) into its entry, on a server "read_prefs" selects (NULL: the
 * primary).
 */
static void
count_into(const IdxTableInfo *info, mongoc_client_t *client,
		   const char *servername, const mongoc_read_prefs_t *read_prefs)
{
	uint64	   *previous = idx_count_round_trips(NULL);
	TableSizeEntry *entry;
	int64		n;

	n = idx_count_documents_at(client, servername, info->database,
							   info->collection, read_prefs);
	idx_count_round_trips(previous);
	/* looked up after the command: an invalidation may have removed it */
	entry = size_entry(info);
	entry->count = (double) n;
	entry->counted_at = GetCurrentTimestamp();
	entry->counted_in = idx_local_xid();
	entry->wanted = false;
}

/*
 * See table_size.h.
 */
double
idx_cached_document_count(const IdxTableInfo *info)
{
	TableSizeEntry *entry = size_entry(info);

	if (count_is_old(entry))
		entry->wanted = true;
	return entry->count;
}

/*
 * See table_size.h.
 */
void
idx_refresh_document_count(const IdxTableInfo *info, mongoc_client_t *client,
						   const char *servername,
						   const mongoc_read_prefs_t *read_prefs)
{
	TableSizeEntry *entry;

	if (size_cache == NULL)
		return;					/* planning wanted nothing yet */
	entry = size_entry(info);
	if (read_prefs == NULL)
		read_prefs = mongoc_client_get_read_prefs(client);	/* as a find's */
	if (entry->wanted && count_is_old(entry))
		count_into(info, client, servername, read_prefs);
}

/*
 * See table_size.h.
 */
double
idx_analyze_document_count(const IdxTableInfo *info, mongoc_client_t *client,
						   const char *servername, bool fresh)
{
	TableSizeEntry *entry = size_entry(info);

	if (fresh || entry->count < 0 || entry->counted_in != idx_local_xid())
		count_into(info, client, servername, NULL);
	return size_entry(info)->count;
}
