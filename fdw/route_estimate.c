/*-------------------------------------------------------------------------
 *
 * route_estimate.c
 *		  Remote estimates of index-table paths before ANALYZE: the count
 *		  of the index entries that constant conditions select.
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/route_estimate.c
 *
 * A table that was never analyzed has no column statistics: PostgreSQL
 * then assumes a default selectivity for each clause (0.5% for an
 * equality), whatever the data.  A key value that most documents hold
 * looks as rare as any other, and its index path wins against a plain
 * scan that would have been cheaper.  In the spirit of postgres_fdw's
 * use_remote_estimate, planning then asks MongoDB: one "count" on the
 * index collection with the lookup's filter on the constant key values
 * (equalities, IN lists, ranges, IS NULL), which the index collection's
 * lookup index answers by counting keys.  The count stops at a cap
 * beyond which the index path loses whatever the exact number (the
 * caller's), and at IDX_ESTIMATE_MAX_TIME_MS on the server, so that it
 * cannot hold planning long.  Parameters (generic plans, joins) are not
 * counted: their values are not known when planning.
 *
 * Counts are cached per backend by server, index collection and filter
 * for IDX_ESTIMATE_MAX_AGE_MS, as the collection sizes are
 * (table_size.c).  Failures are quiet, as collStats' are: an estimate is
 * no reason to fail a query that the executor may well run (the server
 * may be back by then, a user may lack the count privilege on index
 * collections yet read them, a filter too long to cache is merely not
 * asked), so the default selectivity is used, and a failed ask is not
 * repeated for IDX_ESTIMATE_RETRY_MS.  A cancel during the ask is raised
 * as ever.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <math.h>

#include "catalog/pg_type.h"
#include "foreign/foreign.h"
#include "miscadmin.h"
#include "nodes/primnodes.h"
#include "nodes/value.h"
#include "utils/hsearch.h"
#include "utils/inval.h"
#include "utils/memutils.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"

#include "core/connection.h"
#include "core/convert.h"
#include "core/mongo_limits.h"
#include "core/pg_compat.h"
#include "core/protocol_read.h"
#include "core/stream.h"
#include "core/table_size.h"
#include "index/index_entry.h"
#include "route_estimate.h"
#include "route_path.h"

/* A cached count older than this is asked for again */
#define IDX_ESTIMATE_MAX_AGE_MS (5 * 60 * 1000)
/* After an ask that learned nothing, wait this long to ask again */
#define IDX_ESTIMATE_RETRY_MS (60 * 1000)
/* The server stops counting after this long (maxTimeMS) */
#define IDX_ESTIMATE_MAX_TIME_MS 1000
/* Longest filter (as JSON) whose count is asked and cached */
#define IDX_ESTIMATE_MAX_FILTER 512
/* "<server OID>/<database>.<collection> <filter>" */
#define ESTIMATE_KEY_LEN (IDX_MAX_NAMESPACE_BYTES + 16 + IDX_ESTIMATE_MAX_FILTER)

typedef struct EstimateEntry
{
	char		key[ESTIMATE_KEY_LEN];	/* hash key */
	double		count;			/* entries counted, or -1 if unknown */
	double		cap;			/* the count's limit */
	TimestampTz counted_at;
	TimestampTz asked_at;		/* the last ask, or 0 */
} EstimateEntry;

static HTAB *estimate_cache = NULL;

/*
 * A changed server may be another cluster: forget every count.
 */
static void
estimate_inval_callback(Datum arg, int cacheid, uint32 hashvalue)
{
	HASH_SEQ_STATUS scan;
	EstimateEntry *entry;

	if (estimate_cache == NULL)
		return;
	hash_seq_init(&scan, estimate_cache);
	while ((entry = hash_seq_search(&scan)) != NULL)
		hash_search(estimate_cache, entry->key, HASH_REMOVE, NULL);
}

/*
 * The cache entry of "key", created (not counted) if needed.
 */
static EstimateEntry *
estimate_entry(const char *key)
{
	EstimateEntry *entry;
	bool		found;

	if (estimate_cache == NULL)
	{
		HASHCTL		ctl;

		ctl.keysize = ESTIMATE_KEY_LEN;
		ctl.entrysize = sizeof(EstimateEntry);
		ctl.hcxt = CacheMemoryContext;
		estimate_cache = hash_create("idxtable_fdw index entry counts", 64,
									 &ctl,
									 HASH_ELEM | HASH_STRINGS | HASH_CONTEXT);
		CacheRegisterSyscacheCallback(FOREIGNSERVEROID,
									  estimate_inval_callback, (Datum) 0);
	}
	entry = hash_search(estimate_cache, key, HASH_ENTER, &found);
	if (!found)
	{
		entry->count = -1;
		entry->cap = 0;
		entry->counted_at = 0;
		entry->asked_at = 0;
	}
	return entry;
}

/*
 * Does the entry answer a count capped at "cap": counted within
 * IDX_ESTIMATE_MAX_AGE_MS, below its own cap (an exact count) or with a
 * cap no smaller?
 */
static bool
estimate_fresh(const EstimateEntry *entry, double cap)
{
	if (entry->count < 0 ||
		TimestampDifferenceExceeds(entry->counted_at, GetCurrentTimestamp(),
								   IDX_ESTIMATE_MAX_AGE_MS))
		return false;
	return entry->count < entry->cap || cap <= entry->cap;
}

/*
 * Should the count be asked now: not fresh, and no failed ask within
 * IDX_ESTIMATE_RETRY_MS?
 */
static bool
estimate_wanted(const EstimateEntry *entry, double cap)
{
	if (estimate_fresh(entry, cap))
		return false;
	return entry->asked_at == 0 ||
		TimestampDifferenceExceeds(entry->asked_at, GetCurrentTimestamp(),
								   IDX_ESTIMATE_RETRY_MS);
}

/*
 * Append one condition's bound to the key's sub-document "child": false
 * if its value is not a non-null constant (nothing to count by).
 */
static bool
append_bound(bson_t *child, const IdxIndexKey *key, IdxCondOp op,
			 Expr *value)
{
	static const char *const ops[] = {"$eq", "$in", "$eq", "$lt", "$lte", "$gt", "$gte"};
	Const	   *c = (Const *) value;

	if (op == ICOND_NULL)
	{
		idx_check_append(BSON_APPEND_NULL(child, "$eq"));
		return true;
	}
	if (value == NULL || !IsA(value, Const) || c->constisnull)
		return false;
	if (op == ICOND_IN)
		return idx_append_key_in(child, key, c->constvalue);
	/* keys hold timestamps in milliseconds: as the lookup (route_scan.c) */
	if (op == ICOND_LT &&
		(c->consttype == TIMESTAMPOID || c->consttype == TIMESTAMPTZOID))
		op = ICOND_LE;
	idx_append_key_value(child, ops[op],
						 idx_key_lookup_datum(key, c->constvalue),
						 OidIsValid(key->sortcoll) ? TEXTOID : c->consttype,
						 false);
	return true;
}

/*
 * Build the lookup filter {"_id.k0": {...}, ...} of the conditions "conds"
 * (see route_estimate.h) into "filter", as the lookup of an index scan
 * would send it; false if some value is not constant or a condition is
 * of a kind not counted (IS NULL OR, read by two finds).
 */
static bool
build_count_filter(const IdxIndexDef *def, List *conds, bson_t *filter)
{
	int			k;

	for (k = 0; k < def->nkeys; k++)
	{
		bson_t		child;
		bool		any = false;
		ListCell   *lc;

		foreach(lc, conds)
		{
			List	   *cond = lfirst(lc);
			IdxCondOp	op = intVal(lsecond(cond));

			if (intVal(linitial(cond)) != k)
				continue;
			if (op == ICOND_NULL_OR)
				return false;
			if (!any)
			{
				char	   *field = psprintf("_id.%s", idx_key_field(k));

				idx_check_append(BSON_APPEND_DOCUMENT_BEGIN(filter, field,
															 &child));
				any = true;
			}
			if (!append_bound(&child, &def->keys[k], op, lthird(cond)))
				return false;
		}
		if (any)
			idx_check_append(bson_append_document_end(filter, &child));
	}
	return true;
}

/*
 * Count the entries of "def" that "filter" selects, up to "cap", where
 * the scan's reads go (the primary if "primary"); -1 if the server could
 * not be reached or the count failed.  Its round trip is planning's, not
 * a scan's.
 */
static double
ask_count(const IdxTableInfo *table, const IdxIndexDef *def,
		  const bson_t *filter, double cap, Oid userid, bool primary)
{
	ForeignServer *server = GetForeignServer(table->serverid);
	mongoc_client_t *client = idx_planning_client(server, userid);
	uint64	   *previous;
	bson_t	   *command;
	bson_t		reply;
	bson_error_t error;
	bson_iter_t iter;
	double		count = -1;

	if (client == NULL)
		return -1;
	command = BCON_NEW("count", BCON_UTF8(def->collection),
					   "query", BCON_DOCUMENT(filter),
					   "limit", BCON_INT64((int64) cap),
					   "maxTimeMS", BCON_INT32(IDX_ESTIMATE_MAX_TIME_MS));
	previous = idx_count_round_trips(NULL);
	if (mongoc_client_command_simple(client, def->database, command,
									 primary ? idx_primary_read_prefs() :
									 mongoc_client_get_read_prefs(client),
									 &reply, &error) &&
		bson_iter_init_find(&iter, &reply, "n") &&
		BSON_ITER_HOLDS_NUMBER(&iter))
		count = (double) bson_iter_as_int64(&iter);
	else
		idx_stream_raise_failure(server->servername);
	idx_count_round_trips(previous);
	bson_destroy(&reply);
	bson_destroy(command);
	return count;
}

/*
 * See route_estimate.h.
 */
double
idx_remote_entry_count(const IdxTableInfo *table, const IdxIndexDef *def,
					   List *conds, double cap, Oid userid, bool primary)
{
	bson_t		filter = BSON_INITIALIZER;
	char	   *json;
	char	   *key;
	EstimateEntry *entry;
	double		count;

	cap = Max(ceil(cap), 1);
	if (!build_count_filter(def, conds, &filter))
	{
		bson_destroy(&filter);
		return -1;
	}
	json = idx_bson_as_json(&filter);
	key = psprintf("%u/%s.%s %s", table->serverid, def->database,
				   def->collection, json);
	if (strlen(key) >= ESTIMATE_KEY_LEN)
	{
		bson_destroy(&filter);
		return -1;
	}
	entry = estimate_entry(key);
	if (estimate_wanted(entry, cap))
	{
		count = ask_count(table, def, &filter, cap,
						  OidIsValid(userid) ? userid : GetUserId(), primary);
		/* looked up after the command: an invalidation may have removed it */
		entry = estimate_entry(key);
		entry->asked_at = GetCurrentTimestamp();
		if (count >= 0)
		{
			entry->count = count;
			entry->cap = cap;
			entry->counted_at = entry->asked_at;
		}
	}
	bson_destroy(&filter);
	if (!estimate_fresh(entry, Min(cap, entry->cap)))
		return -1;
	return Min(entry->count, cap);
}
