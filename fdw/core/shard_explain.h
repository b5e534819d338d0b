/*-------------------------------------------------------------------------
 *
 * shard_explain.h
 *		  EXPLAIN ANALYZE through mongos: the shards a scan's requests
 *		  reached, learnt from mongos's explain of each request.
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/core/shard_explain.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef IDXTABLE_SHARD_EXPLAIN_H
#define IDXTABLE_SHARD_EXPLAIN_H

#include "commands/explain.h"

#include "core/mongoc_compat.h"
#include "core/pg_compat.h"

typedef struct IdxShardLog IdxShardLog;

/*
 * Start noting the reads sent while "counter" counts round trips
 * (idx_count_round_trips()): find, aggregate, count and distinct, each
 * distinct command once with the number of times it was sent.  Reads of
 * collection "collection" of "database" are the scan's collection, others
 * its index collections.  The log lives in the current memory context and
 * stops noting when that context is reset.
 */
extern IdxShardLog *idx_shard_log_start(uint64 *counter,
										mongoc_client_t *client,
										const mongoc_read_prefs_t *read_prefs,
										const char *database,
										const char *collection);

/*
 * EXPLAIN ANALYZE: explain each noted command through the same mongos
 * (verbosity queryPlanner, once per command, not counted as the scan's
 * round trips) and show "Index Collection Shards" and "Collection Shards".
 */
extern void idx_shard_log_explain(IdxShardLog *log, ExplainState *es);

#endif							/* IDXTABLE_SHARD_EXPLAIN_H */
