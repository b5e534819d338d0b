/*-------------------------------------------------------------------------
 *
 * cluster_time.h
 *		  MongoDB cluster times read, written and asked of the server
 *		  (cluster_time.c), for the applier and for the backends that wait
 *		  for it.
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/sync/cluster_time.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef IDXTABLE_CLUSTER_TIME_H
#define IDXTABLE_CLUSTER_TIME_H

#include "core/mongoc_compat.h"
#include "sync/sync_state.h"

/* Read a BSON Timestamp (0 if the iterator holds none) */
extern IdxClusterTime idx_sync_iter_time(const bson_iter_t *iter);

/* Append a cluster time as a BSON Timestamp */
extern bool idx_sync_append_time(bson_t *doc, const char *key,
								 IdxClusterTime ct);

/* The operationTime of a "ping" on "database" (the server's "now") */
extern IdxClusterTime idx_sync_server_time(mongoc_client_t *client,
										   const char *servername,
										   const char *database);

/* A no-op on every shard through mongos (appendOplogNote): its time */
extern IdxClusterTime idx_sync_oplog_note(mongoc_client_t *client,
										  const char *servername,
										  const char *why);

#endif							/* IDXTABLE_CLUSTER_TIME_H */
