/*-------------------------------------------------------------------------
 *
 * cluster_time.c
 *		  MongoDB cluster times: read from and appended to BSON, and asked
 *		  of the server (a ping's operationTime, or an appendOplogNote on
 *		  every shard through mongos).
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/sync/cluster_time.c
 *
 * Both sides of the synchronisation need them: the applier's stream
 * (fdw/applier) for its position, heartbeats and covered times, and a
 * backend that waits for the applier (sync_wait.c) for the time its read
 * or unique write must see applied.  A cluster time is packed as
 * sync_state.h says.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "core/connection.h"
#include "core/convert.h"
#include "core/mongoc_compat.h"
#include "sync/cluster_time.h"

/*
 * A BSON Timestamp as a packed cluster time.
 */
IdxClusterTime
idx_sync_iter_time(const bson_iter_t *iter)
{
	uint32_t	t,
				i;

	if (!BSON_ITER_HOLDS_TIMESTAMP(iter))
		return 0;
	bson_iter_timestamp(iter, &t, &i);
	return IDX_CLUSTER_TIME(t, i);
}

/*
 * Append a packed cluster time as a BSON Timestamp.
 */
bool
idx_sync_append_time(bson_t *doc, const char *key, IdxClusterTime ct)
{
	return bson_append_timestamp(doc, key, -1, (uint32_t) (ct >> 32),
								 (uint32_t) ct);
}

/*
 * The operationTime of "reply" to command "command", which is destroyed.
 * A server without cluster times (a standalone mongod) sends none: an
 * ERROR, since only replica sets and sharded clusters have change streams.
 */
static IdxClusterTime
reply_operation_time(bson_t *reply, const char *servername,
					 const char *command)
{
	bson_iter_t iter;
	IdxClusterTime ct = 0;

	if (bson_iter_init_find(&iter, reply, "operationTime"))
		ct = idx_sync_iter_time(&iter);
	bson_destroy(reply);
	if (ct == 0)
		ereport(ERROR,
				(errcode(ERRCODE_FDW_ERROR),
				 errmsg("server \"%s\" reports no cluster time in its reply to %s",
						servername, command),
				 errhint("Index tables are maintained against outside writes only on a replica set or a sharded cluster.")));
	return ct;
}

/*
 * The server's operationTime for a "ping" on "database": every change
 * acknowledged before it has a cluster time at or below it.
 */
IdxClusterTime
idx_sync_server_time(mongoc_client_t *client, const char *servername,
					 const char *database)
{
	bson_t		cmd = BSON_INITIALIZER;
	bson_t		reply;

	idx_check_append(BSON_APPEND_INT32(&cmd, "ping", 1));
	idx_run_command(client, servername, database, &cmd, &reply,
					idx_op(IDX_OP_CLUSTER_TIME, NULL, NULL));
	bson_destroy(&cmd);
	return reply_operation_time(&reply, servername, "ping");
}

/*
 * Write a no-op on every shard of a sharded cluster: appendOplogNote
 * through mongos, sent without a session on the admin database, "why"
 * going into the note's data.  mongos sends it to the primary of every
 * shard, each of which writes it at a new tick of its own clock, after
 * moving that clock up to the $clusterTime the command carries (libmongoc
 * sends the latest it has seen); the reply's operationTime is the latest
 * of the shards' (s/commands/strategy.cpp, the largest operationTime of
 * the shards a command reached).  So every write acknowledged on any
 * shard, through any mongos, before the command was sent is at or before
 * the time returned, and every shard's change-stream high-water mark
 * moves past the time the command carried.
 *
 * It needs the appendOplogNote action on the cluster (the clusterManager
 * role has it).  A user mapping without it gets an ERROR that says so:
 * there is no other way, through mongos, to learn a time that covers the
 * writes of every shard, and a read or claim made against a smaller time
 * could miss them.
 */
IdxClusterTime
idx_sync_oplog_note(mongoc_client_t *client, const char *servername,
					const char *why)
{
	bson_t		cmd = BSON_INITIALIZER;
	bson_t		data;
	bson_t		reply;
	bson_error_t error;

	idx_check_append(BSON_APPEND_INT32(&cmd, "appendOplogNote", 1));
	idx_check_append(BSON_APPEND_DOCUMENT_BEGIN(&cmd, "data", &data));
	idx_check_append(BSON_APPEND_UTF8(&data, "idxtable", why));
	idx_check_append(bson_append_document_end(&cmd, &data));
	if (!mongoc_client_command_simple(client, "admin", &cmd, NULL, &reply,
									  &error))
	{
		bson_destroy(&cmd);
		idx_merge_reply_error(&error, &reply);
		bson_destroy(&reply);
		if (error.domain == MONGOC_ERROR_SERVER && error.code == 13)
			ereport(ERROR,
					(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
					 errmsg("the user mapping for server \"%s\" may not run appendOplogNote, which index tables need on a sharded cluster",
							servername),
					 errdetail("Through mongos, the change-stream applier and every query that reads an index table as current or writes a unique key write a no-op on every shard (appendOplogNote) to learn a cluster time that covers the writes of all shards."),
					 errhint("Grant the MongoDB user of the mapping the appendOplogNote action on the cluster resource (the clusterManager role has it), or SET idxtable.index_consistency = 'any'.")));
		idx_report_error(&error, servername,
						 idx_op(IDX_OP_OPLOG_NOTE, NULL, NULL));
	}
	bson_destroy(&cmd);
	return reply_operation_time(&reply, servername, "appendOplogNote");
}
