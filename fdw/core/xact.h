/*-------------------------------------------------------------------------
 *
 * xact.h
 *		  MongoDB transactions tied to the PostgreSQL transaction (option
 *		  consistency 'transaction').
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/core/xact.h
 *
 * The first foreign write of a PostgreSQL transaction on a server starts a
 * MongoDB transaction on that client's session; every later write and read
 * of the PostgreSQL transaction on that client runs in it.  It is committed
 * at PostgreSQL pre-commit (a failed commit fails the COMMIT) and aborted
 * when the PostgreSQL transaction aborts.  MongoDB has no savepoints, so a
 * rollback to a savepoint taken before a foreign write aborts the MongoDB
 * transaction and the PostgreSQL transaction can then only roll back.
 *
 *-------------------------------------------------------------------------
 */
#ifndef IDXTABLE_XACT_H
#define IDXTABLE_XACT_H

#include "core/mongoc_compat.h"
#include "core/option.h"
#include "core/xact_state.h"

/*
 * For the transaction callbacks (coordinator.c), which decide the order:
 * refuse a doomed transaction; commit (an ERROR if it fails) or abort the
 * client's MongoDB transaction; refuse PREPARE after writes; forget the
 * client's transaction at the end; end a subtransaction.
 */
extern void idx_xact_check_not_doomed(IdxRemoteXact *x);
extern void idx_xact_commit_remote(IdxRemoteXact *x);
extern void idx_xact_abort_remote(IdxRemoteXact *x);
extern void idx_xact_refuse_prepare(IdxRemoteXact *x);
extern void idx_xact_reset(IdxRemoteXact *x);
extern void idx_xact_subxact_end(IdxRemoteXact *x, bool commit);

/* The table written outside a MongoDB transaction (and its mode), or NULL */
extern const char *idx_xact_ordered_write_rel(IdxConsistency *mode);

/*
 * The consistency mode a write to this table uses: the option, or for the
 * default, "transaction" if the server supports transactions (a replica set
 * member or mongos of wire version 7/8 or later) and "ordered" otherwise.
 * "ordered" and "eventual" need no MongoDB transaction.
 * An explicit "transaction" on a server without transactions is an error.
 */
extern IdxConsistency idx_xact_mode(const IdxTableInfo *info,
									mongoc_client_t *client,
									const char *servername);

/*
 * Before a write in transaction mode: the session of the client's open
 * MongoDB transaction, started now if this is the first write.
 */
extern mongoc_client_session_t *idx_xact_begin_write(mongoc_client_t *client,
													 const char *servername);

/*
 * A transaction's first command that MongoDB aborted for now is sent
 * again: before sending a command in "session", ask whether it is the
 * transaction's first; if it fails, idx_xact_restart_first() starts the
 * transaction again and says whether to send it again.
 */
extern bool idx_xact_sends_first(mongoc_client_session_t *session);
extern bool idx_xact_restart_first(mongoc_client_session_t *session,
								   const bson_t *reply,
								   const bson_error_t *error, int *attempts);

/*
 * Remember a write outside a MongoDB transaction, in mode ORDERED or
 * EVENTUAL (for the warning at rollback)
 */
extern void idx_xact_note_ordered_write(const char *relname,
										IdxConsistency mode);

/*
 * A cluster time the server of "client" reported (packed: seconds << 32 |
 * increment), for the next transaction's marker to name (xact_marker.c).
 */
extern void idx_xact_note_cluster_time(mongoc_client_t *client, uint64 ct);

/* Has the transaction made ordered-mode writes? */
extern bool idx_xact_has_ordered_write(void);

/* A statement undid the transaction's only ordered-mode writes */
extern void idx_xact_unnote_ordered_write(void);

/*
 * Before a read: append the session of the client's open transaction to
 * the command options, so the read sees the transaction's own writes.
 * Does nothing if the client has no open transaction.
 */
extern void idx_xact_append_session(mongoc_client_t *client, bson_t *opts);

/*
 * The session of the client's retryable bulkWrite commands and the
 * txnNumber of the next one, or NULL for a client outside the cache.
 */
extern mongoc_client_session_t *idx_xact_retry_session(mongoc_client_t *client,
													   const char *servername,
													   int64 *txn_number);

/* Does the client have an open MongoDB transaction (holding its session)? */
extern bool idx_xact_client_busy(mongoc_client_t *client);

/*
 * The server of a MongoDB transaction this PostgreSQL transaction has
 * open (or has doomed by a rollback to a savepoint), or NULL if none.
 */
extern const char *idx_xact_open_server(void);

#endif							/* IDXTABLE_XACT_H */
