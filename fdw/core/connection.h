/*-------------------------------------------------------------------------
 *
 * connection.h
 *		  MongoDB client cache.  (Error translation is remote_error.h,
 *		  included here for the callers that used to find it here.)
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/core/connection.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef IDXTABLE_CONNECTION_H
#define IDXTABLE_CONNECTION_H

#include "foreign/foreign.h"

#include "core/mongoc_compat.h"
#include "core/remote_error.h"

/*
 * Return the cached client for (server, user mapping), connecting on first
 * use.  The client is owned by the cache: do not destroy it.  Connection
 * and authentication failures raise class-08 errors naming the server.
 */
extern mongoc_client_t *idx_get_client(ForeignServer *server, UserMapping *user);

/*
 * Same, but NULL instead of an error when the server cannot be reached
 * (for planning, which must not fail for that).  Bad options and the
 * trust rules still raise errors.
 */
extern mongoc_client_t *idx_get_client_quiet(ForeignServer *server,
											 UserMapping *user);

/*
 * Same, looked up from a foreign table's OID and the user to connect as:
 * the range table entry's checkAsUser (view owner) for scans and writes,
 * InvalidOid (the current user) for ANALYZE and idxtable.* functions.
 */
extern mongoc_client_t *idx_get_client_for_rel(Oid relid, Oid userid,
											   ForeignServer **server);

/*
 * A client of (server, user) outside the cache, with appName "appname";
 * the caller destroys it with idx_stream_client_destroy().
 */
extern mongoc_client_t *idx_connect_private(ForeignServer *server,
											UserMapping *user,
											const char *appname);

/* The maxWireVersion of the primary (0: not told) */
extern int64 idx_primary_wire_version(mongoc_client_t *client,
									  const char *servername);

/* Does the client talk to mongos (cached for cached clients)? */
extern bool idx_client_is_mongos(mongoc_client_t *client,
								 const char *servername);

/* The primary's election as its hello tells it now (0: not a replica set) */
extern uint64 idx_primary_election(mongoc_client_t *client,
								   const char *servername);

/*
 * Run a command on a database and return the reply (caller destroys it).
 * Errors are reported with idx_report_reply_error().
 */
extern void idx_run_command(mongoc_client_t *client, const char *server,
							const char *database, const bson_t *command,
							bson_t *reply, const IdxOp *what);

/* Metadata count of a collection's documents (0: unknown), on the primary */
extern int64 idx_count_documents(mongoc_client_t *client, const char *server,
								 const char *database,
								 const char *collection);
/* The same on a server the read preference selects (NULL: the primary) */
extern int64 idx_count_documents_at(mongoc_client_t *client,
									const char *server,
									const char *database,
									const char *collection,
									const mongoc_read_prefs_t *read_prefs);

/*
 * Count commands sent from now on into *counter (NULL stops); returns the
 * previous target.  Used around cursor calls for EXPLAIN ANALYZE.
 */
extern uint64 *idx_count_round_trips(uint64 *counter);

/*
 * A function told of each command sent while a round trip counter counts,
 * with that counter: EXPLAIN ANALYZE's log of the shards a scan's reads
 * reached (shard_explain.c) sets it when it starts a log.  It runs inside
 * libmongoc and must not raise an error.
 */
typedef void (*IdxCountedCommandFn) (uint64 *counter,
									 const mongoc_apm_command_started_t *event);
extern void idx_note_counted_commands(IdxCountedCommandFn fn);

/*
 * The latest operationTime the replies to this process's commands
 * reported, once idx_track_reply_times() points here (the applier's).
 */
typedef struct IdxReplyTimes
{
	uint64		latest;			/* packed cluster time; 0: none yet */
	bool		unanswered;		/* a command ended without a reply that
								 * reports one, since the owner last
								 * cleared this */
} IdxReplyTimes;

/* Note the replies' operationTime in *times (NULL stops); the previous */
extern IdxReplyTimes *idx_track_reply_times(IdxReplyTimes *times);

/* Pin (+1) or unpin (-1) a cached client while a scan holds a cursor */
extern void idx_client_pin(mongoc_client_t *client, int delta);

/*
 * Pin a cached client until idx_release() of the handle or the end of the
 * current memory context (see connection.c)
 */
extern struct IdxHandle *idx_client_pin_owned(mongoc_client_t *client);

/*
 * The MongoDB transaction state (xact_state.h) kept in the cache entry of a
 * client, or NULL if the client is not a cached one.
 */
struct IdxRemoteXact;
extern struct IdxRemoteXact *idx_conn_xact(mongoc_client_t *client);

/* Call "fn" on the transaction state of every connected cached client */
typedef void (*IdxConnXactFn) (struct IdxRemoteXact *x, void *arg);
extern void idx_conn_foreach_xact(IdxConnXactFn fn, void *arg);

/*
 * Transaction end, called last by xact.c's callbacks: forget the pins and
 * the stream's latched failures; at commit, drop invalidated clients.
 */
extern void idx_conn_xact_end(bool commit);

/* Drop all idle cached clients; true if any was dropped */
extern bool idx_disconnect_all(void);

#endif							/* IDXTABLE_CONNECTION_H */
