/*-------------------------------------------------------------------------
 *
 * xact.c
 *		  MongoDB transactions tied to the PostgreSQL transaction.
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/core/xact.c
 *
 * The state of a client's MongoDB transaction (IdxRemoteXact) lives in the
 * client's connection cache entry and holds the client's session for the
 * client's whole life (a session runs one transaction after another); the
 * session is ended only when the connection cache destroys the client.
 * Keeping the session alive past an abort matters: at XACT_EVENT_ABORT the
 * scans' cursors, which refer to the session, are released only later with
 * the portal's memory.
 *
 * The order of the work at transaction end is not decided here: the
 * FDW's only transaction callbacks are in coordinator.c, which calls the
 * functions below for each cached client (idx_conn_foreach_xact).
 *
 * Subtransactions: "write_level" is the deepest nesting level that holds
 * foreign writes.  A subtransaction commit hands its writes to the parent;
 * a subtransaction abort at or above write_level aborts the MongoDB
 * transaction (MongoDB has no savepoints) and dooms the PostgreSQL
 * transaction: every later foreign access and the COMMIT fail.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "miscadmin.h"
#include "storage/latch.h"
#include "utils/memutils.h"
#include "utils/wait_event.h"

#include "core/connection.h"
#include "core/convert.h"
#include "core/mongo_limits.h"
#include "core/protocol_read.h"
#include "core/remote_error.h"
#include "core/xact.h"
#include "core/xact_state.h"

/* Attempts at commitTransaction while the result is unknown */
#define IDX_COMMIT_ATTEMPTS 3

/* Attempts at a transaction's first command that MongoDB aborted */
#define IDX_FIRST_COMMAND_ATTEMPTS 4

/* WriteConflict: another transaction holds the document */
#define IDX_WRITE_CONFLICT 112

static char *ordered_write_rel = NULL;	/* a table written in ordered mode */
static IdxConsistency ordered_write_mode;	/* its mode (not TRANSACTION) */

/*
 * The transaction state of a client; an error if it is not a cached one
 * (every client that writes comes from the connection cache).
 */
static IdxRemoteXact *
find_xact(mongoc_client_t *client)
{
	IdxRemoteXact *x = idx_conn_xact(client);

	if (x == NULL)
		elog(ERROR, "MongoDB client is not in the connection cache");
	return x;
}

/*
 * Does the server the client talks to support transactions?  A replica set
 * primary of wire version 7 (MongoDB 4.0) or later, or a mongos or load
 * balancer of wire version 8 (4.2) or later.
 */
static bool
server_supports_transactions(mongoc_client_t *client, const char *servername)
{
	bson_error_t error;
	mongoc_server_description_t *sd;
	const char *type;
	const bson_t *hello;
	bson_iter_t iter;
	int64		wire = 0;
	bool		result;

	sd = mongoc_client_select_server(client, true, NULL, &error);
	if (sd == NULL)
		idx_report_error(&error, servername,
						 idx_op(IDX_OP_SELECT_SERVER, NULL, NULL));
	type = mongoc_server_description_type(sd);
	hello = mongoc_server_description_hello_response(sd);
	if (hello && bson_iter_init_find(&iter, hello, "maxWireVersion") &&
		BSON_ITER_HOLDS_NUMBER(&iter))
		wire = bson_iter_as_int64(&iter);
	if (strcmp(type, "RSPrimary") == 0)
		result = wire >= 7;
	else if (strcmp(type, "Mongos") == 0 || strcmp(type, "LoadBalancer") == 0)
		result = wire >= 8;
	else
		result = false;
	mongoc_server_description_destroy(sd);
	return result;
}

/*
 * The consistency mode of a write to the table.
 */
IdxConsistency
idx_xact_mode(const IdxTableInfo *info, mongoc_client_t *client,
			  const char *servername)
{
	bool		supported;

	if (info->consistency == IDX_CONSISTENCY_ORDERED ||
		info->consistency == IDX_CONSISTENCY_EVENTUAL)
		return info->consistency;	/* no MongoDB transaction needed */
	supported = server_supports_transactions(client, servername);
	if (info->consistency == IDX_CONSISTENCY_DEFAULT)
		return supported ? IDX_CONSISTENCY_TRANSACTION : IDX_CONSISTENCY_ORDERED;
	if (!supported)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("server \"%s\" does not support transactions, which foreign table \"%s\" requires",
						servername, info->relname),
				 errdetail("MongoDB transactions need a replica set or a sharded cluster."),
				 errhint("Set the option consistency to '%s' on the table or the server.",
						 idx_consistency_name(IDX_CONSISTENCY_ORDERED))));
	return IDX_CONSISTENCY_TRANSACTION;
}

/* The txnNumber of a client's first retryable bulkWrite (see below) */
#define IDX_RETRY_TXN_FIRST (INT64CONST(1) << 32)

/*
 * Raise the error for any use of a doomed transaction.
 */
void
idx_xact_check_not_doomed(IdxRemoteXact *x)
{
	if (x->doomed)
		ereport(ERROR,
				(errcode(ERRCODE_IN_FAILED_SQL_TRANSACTION),
				 errmsg("the MongoDB transaction on server \"%s\" was aborted by a rollback to a savepoint",
						x->servername),
				 errdetail("MongoDB has no savepoints, so the foreign writes made since the savepoint could not be undone alone."),
				 errhint("Roll back the whole transaction.")));
}

/*
 * Start a MongoDB transaction on "session" whose reads go to the primary.
 * Without a read preference of its own a transaction takes the client's,
 * i.e. the URI's readPreference, and libmongoc refuses every read in it
 * that is not primary (mongoc-cursor.c: "Read preference in a transaction
 * must be primary"), so a SELECT after an INSERT would fail.
 */
static bool
start_transaction(mongoc_client_session_t *session, bson_error_t *error)
{
	mongoc_transaction_opt_t *opts = mongoc_transaction_opts_new();
	bool		ok;

	mongoc_transaction_opts_set_read_prefs(opts, idx_primary_read_prefs());
	ok = mongoc_client_session_start_transaction(session, opts, error);
	mongoc_transaction_opts_destroy(opts);
	return ok;
}

/*
 * A new session knows no cluster time, so its first transaction could not
 * name one that its snapshot includes (the marker's "after",
 * xact_marker.c), and the applier would confirm that transaction's writes
 * by reading them back.  A ping in the session teaches it the server's
 * operationTime.  Once per session, and only if the client has learned no
 * time otherwise; a server without cluster times (a standalone) answers
 * without one and nothing changes.
 */
static void
learn_operation_time(mongoc_client_t *client, mongoc_client_session_t *session,
					 const char *servername)
{
	bson_t		cmd = BSON_INITIALIZER;
	bson_t		opts = BSON_INITIALIZER;
	bson_t		reply;
	bson_error_t error;
	bool		ok;

	idx_check_append(BSON_APPEND_INT32(&cmd, "ping", 1));
	ok = mongoc_client_session_append(session, &opts, &error);
	if (ok)
	{
		/* the reply is initialized either way */
		ok = mongoc_client_command_with_opts(client, "admin", &cmd, NULL,
											 &opts, &reply, &error);
		bson_destroy(&reply);
	}
	bson_destroy(&cmd);
	bson_destroy(&opts);
	if (!ok)
		idx_report_error(&error, servername,
						 idx_op(IDX_OP_START_SESSION, NULL, NULL));
}

/*
 * Remember a cluster time the server reported to the client (a consistent
 * read's ping, sync_wait.c).
 */
void
idx_xact_note_cluster_time(mongoc_client_t *client, uint64 ct)
{
	IdxRemoteXact *x = idx_conn_xact(client);

	if (x != NULL && ct > x->learned_time)
		x->learned_time = ct;
}

/*
 * The latest cluster time the session of "x" knows, before its transaction
 * starts: its own operationTime, advanced to what the client learned since
 * (the session is causally consistent, so the transaction then reads at or
 * after it).  The applier trusts a marker only for index tables it has not
 * written since this time, so the later the better.
 */
static uint64
session_time(IdxRemoteXact *x)
{
	uint32_t	t = 0,
				i = 0;

	if (x->learned_time != 0)
		mongoc_client_session_advance_operation_time(x->session,
													 (uint32_t) (x->learned_time >> 32),
													 (uint32_t) x->learned_time);
	mongoc_client_session_get_operation_time(x->session, &t, &i);
	return ((uint64) t << 32) | (uint64) i;
}

/*
 * The search of latest_xact(): the cached client of server "servername"
 * whose MongoDB transaction started last.
 */
typedef struct LatestXact
{
	const char *servername;
	IdxRemoteXact *found;
} LatestXact;

/*
 * idx_conn_foreach_xact callback of latest_xact(): keep "x" if its
 * transaction is the server's latest so far.
 */
static void
consider_xact(IdxRemoteXact *x, void *arg)
{
	LatestXact *latest = (LatestXact *) arg;

	if (x->started != 0 && strcmp(x->servername, latest->servername) == 0 &&
		(latest->found == NULL || x->started > latest->found->started))
		latest->found = x;
}

/*
 * The transaction state of the server's client whose MongoDB transaction
 * started last, or NULL: for MongoDB's lifetime limit (mongo_limits.c),
 * which gets this function from idx_xact_begin_write().
 */
static IdxRemoteXact *
latest_xact(const char *server)
{
	LatestXact	latest = {server, NULL};

	idx_conn_foreach_xact(consider_xact, &latest);
	return latest.found;
}

/*
 * Start (or continue) the MongoDB transaction for a write.
 */
mongoc_client_session_t *
idx_xact_begin_write(mongoc_client_t *client, const char *servername)
{
	IdxRemoteXact *x = find_xact(client);
	bson_error_t error;
	int			level = GetCurrentTransactionNestLevel();

	idx_xact_check_not_doomed(x);
	if (x->session == NULL)
	{
		x->session = mongoc_client_start_session(client, NULL, &error);
		if (x->session == NULL)
			idx_report_error(&error, servername,
							 idx_op(IDX_OP_START_SESSION, NULL, NULL));
		if (x->learned_time == 0)
			learn_operation_time(client, x->session, servername);
	}
	if (!x->in_txn)
	{
		/* the limits find a transaction's age through this (idempotent) */
		idx_limits_set_xact_finder(latest_xact);
		/* before it starts: a time its snapshot includes (xact_marker.c) */
		x->known_before = session_time(x);
		x->maintained = NIL;
		if (!start_transaction(x->session, &error))
			idx_report_error(&error, servername,
							 idx_op(IDX_OP_START_XACT, NULL, NULL));
		x->started = GetCurrentTimestamp();
		x->in_txn = true;
		x->write_level = level;
	}
	x->write_level = Max(x->write_level, level);
	return x->session;
}

/*
 * Is "session" in a MongoDB transaction that has sent no command yet?  The
 * caller asks before sending a command, to know whether the command is the
 * transaction's first (libmongoc starts the transaction on the server with
 * it, and leaves the state "starting" until then).
 */
bool
idx_xact_sends_first(mongoc_client_session_t *session)
{
	return session != NULL &&
		mongoc_client_session_get_transaction_state(session) ==
		MONGOC_TRANSACTION_STARTING;
}

/*
 * Did the failed command of "reply" and "error" abort its transaction on
 * every participant, for a reason that is gone on a second try?  MongoDB
 * labels such errors TransientTransactionError (a stale router's
 * StaleConfig after a chunk migration, a primary that stepped down).  A
 * write conflict is labelled so too, but another transaction holds the
 * document: that stays the statement's serialization failure at once.
 */
static bool
aborted_for_now(const bson_t *reply, const bson_error_t *error)
{
	bson_iter_t iter;

	if (reply == NULL ||
		!mongoc_error_has_label(reply, "TransientTransactionError"))
		return false;
	if (error->code == IDX_WRITE_CONFLICT)
		return false;
	return !(bson_iter_init_find(&iter, reply, "code") &&
			 BSON_ITER_HOLDS_NUMBER(&iter) &&
			 bson_iter_as_int64(&iter) == IDX_WRITE_CONFLICT);
}

/*
 * Wait a little before attempt "attempt" + 1, cancellably.
 */
static void
backoff(int attempt)
{
	(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
					 10L * attempt, PG_WAIT_EXTENSION);
	ResetLatch(MyLatch);
	CHECK_FOR_INTERRUPTS();
}

/*
 * The FIRST command of the MongoDB transaction of "session" failed (the
 * caller asked idx_xact_sends_first() before sending it): should it be
 * sent again?  If MongoDB aborted the transaction with
 * TransientTransactionError, nothing of it took effect and nothing of it
 * was read, so, as MongoDB drivers' withTransaction does, the transaction
 * is started again (abortTransaction, then a new txnNumber) and the caller
 * sends the same command again: true.  *attempts counts the attempts made
 * (0 before the first); after IDX_FIRST_COMMAND_ATTEMPTS of them, or for
 * any other error, false, and the caller reports the error.  The
 * transaction's marker and registry entry (xact_marker.c) stay: they
 * describe the PostgreSQL transaction's writes, which are still to come.
 */
bool
idx_xact_restart_first(mongoc_client_session_t *session, const bson_t *reply,
					   const bson_error_t *error, int *attempts)
{
	IdxRemoteXact *x;
	bson_error_t start_error;

	(*attempts)++;
	if (session == NULL || *attempts >= IDX_FIRST_COMMAND_ATTEMPTS ||
		!aborted_for_now(reply, error))
		return false;
	x = find_xact(mongoc_client_session_get_client(session));
	if (!x->in_txn || x->session != session)
		return false;
	ereport(DEBUG1,
			(errmsg_internal("MongoDB aborted the transaction on server \"%s\" at its first command: starting it again (attempt %d)",
							 x->servername, *attempts + 1),
			 errdetail_internal("%s", error->message)));
	/* libmongoc ignores the server's answer (NoSuchTransaction) */
	(void) mongoc_client_session_abort_transaction(session, &start_error);
	backoff(*attempts);
	if (!start_transaction(session, &start_error))
	{
		x->in_txn = false;
		idx_report_error(&start_error, x->servername,
						 idx_op(IDX_OP_START_XACT, NULL, NULL));
	}
	x->started = GetCurrentTimestamp();
	return true;
}

/*
 * Remember that a table was written outside a MongoDB transaction (mode
 * ORDERED or EVENTUAL) in this transaction.
 */
void
idx_xact_note_ordered_write(const char *relname, IdxConsistency mode)
{
	if (ordered_write_rel == NULL)
	{
		ordered_write_rel = MemoryContextStrdup(TopMemoryContext, relname);
		ordered_write_mode = mode;
	}
}

/*
 * Has the transaction made ordered-mode writes (so far)?
 */
bool
idx_xact_has_ordered_write(void)
{
	return ordered_write_rel != NULL;
}

/*
 * Forget the ordered-mode writes noted since the transaction had none:
 * the statement that made them undid them again; and at the end of the
 * transaction.
 */
void
idx_xact_unnote_ordered_write(void)
{
	if (ordered_write_rel)
		pfree(ordered_write_rel);
	ordered_write_rel = NULL;
}

/*
 * Put the open transaction's session into a read's options.
 */
void
idx_xact_append_session(mongoc_client_t *client, bson_t *opts)
{
	IdxRemoteXact *x = idx_conn_xact(client);
	bson_error_t error;

	if (x == NULL)
		return;
	idx_xact_check_not_doomed(x);
	if (!x->in_txn)
		return;
	if (!mongoc_client_session_append(x->session, opts, &error))
		idx_report_error(&error, x->servername,
						 idx_op(IDX_OP_JOIN_XACT, NULL, NULL));
}

/*
 * Is a MongoDB transaction open on the client?
 */
bool
idx_xact_client_busy(mongoc_client_t *client)
{
	IdxRemoteXact *x = idx_conn_xact(client);

	return x != NULL && x->in_txn;
}

/*
 * Find an open (or doomed) MongoDB transaction, for
 * idx_xact_open_server().
 */
static void
find_open(IdxRemoteXact *x, void *arg)
{
	const char **server = (const char **) arg;

	if (*server == NULL && (x->in_txn || x->doomed))
		*server = x->servername;
}

/*
 * The server of an open or doomed MongoDB transaction, or NULL.
 */
const char *
idx_xact_open_server(void)
{
	const char *server = NULL;

	idx_conn_foreach_xact(find_open, &server);
	return server;
}

/*
 * The session the client's bulkWrite commands outside a MongoDB transaction
 * go in as retryable writes, and in "txn_number" the number of the next
 * one.  libmongoc 1.23 numbers only the writes it retries itself (insert,
 * update, delete, findAndModify), so bulk_write.c numbers its own, in a
 * session no other command uses, which lives as long as the client: so
 * libmongoc never hands its server session to another command that would
 * count from its own number (mongod refuses a lower txnNumber, and takes an
 * equal one for a retry of ours).  The server session may come from
 * libmongoc's pool, used before by its retryable writes and transactions,
 * whose last txnNumber libmongoc does not expose; it counts up by one from
 * 0, so ours start at 2^32, above any it can have reached.  A client
 * outside the connection cache (the applier's, an index build's) gets
 * NULL: its bulkWrites are not retried.
 */
mongoc_client_session_t *
idx_xact_retry_session(mongoc_client_t *client, const char *servername,
					   int64 *txn_number)
{
	IdxRemoteXact *x = idx_conn_xact(client);
	bson_error_t error;

	if (x == NULL)
		return NULL;
	if (x->retry_session == NULL)
	{
		x->retry_session = mongoc_client_start_session(client, NULL, &error);
		if (x->retry_session == NULL)
			idx_report_error(&error, servername,
							 idx_op(IDX_OP_START_SESSION, NULL, NULL));
		x->retry_txn = IDX_RETRY_TXN_FIRST - 1;
	}
	*txn_number = ++x->retry_txn;
	return x->retry_session;
}

/*
 * Abort the MongoDB transaction, ignoring errors: the server aborts it on
 * its own after transactionLifetimeLimitSeconds anyway.
 */
void
idx_xact_abort_remote(IdxRemoteXact *x)
{
	bson_error_t error;

	if (!x->in_txn)
		return;
	x->in_txn = false;
	if (!mongoc_client_session_abort_transaction(x->session, &error))
		ereport(WARNING,
				(errmsg("could not abort the MongoDB transaction on server \"%s\"",
						x->servername),
				 errdetail("MongoDB will abort it when it times out.")));
}

/*
 * Commit the MongoDB transaction, retrying while the outcome is unknown
 * (UnknownTransactionCommitResult), as MongoDB's drivers do.  Failure is
 * an ERROR, which makes the PostgreSQL COMMIT fail; a write concern error
 * that stays, or that no retry can satisfy, is "outcome unknown" (08007).
 */
void
idx_xact_commit_remote(IdxRemoteXact *x)
{
	int			attempt;

	for (attempt = 1;; attempt++)
	{
		bson_t		reply;
		bson_error_t error;

		if (mongoc_client_session_commit_transaction(x->session, &reply,
													 &error))
		{
			bson_destroy(&reply);
			x->in_txn = false;
			return;
		}
		if (attempt < IDX_COMMIT_ATTEMPTS &&
			mongoc_error_has_label(&reply, "UnknownTransactionCommitResult") &&
			!idx_write_concern_unsatisfiable(&error))
		{
			bson_destroy(&reply);
			continue;
		}
		x->in_txn = false;
		if (idx_is_write_concern_error(&error))
		{
			/* committed on the primary, not acknowledged: outcome unknown */
			bson_destroy(&reply);
			idx_report_commit_unknown(&error, x->servername);
		}
		{
			/* keep the reply in palloc'd memory across the ereport */
			uint8	   *data = palloc(reply.len);
			bson_t		kept;

			memcpy(data, bson_get_data(&reply), reply.len);
			bson_init_static(&kept, data, reply.len);
			bson_destroy(&reply);
			idx_report_reply_error(&kept, &error, x->servername,
								   idx_op(IDX_OP_COMMIT_XACT, NULL, NULL));
		}
	}
}

/*
 * The table written in mode ORDERED or EVENTUAL in this transaction,
 * with its mode in *mode, or NULL: for the warning at rollback.
 */
const char *
idx_xact_ordered_write_rel(IdxConsistency *mode)
{
	*mode = ordered_write_mode;
	return ordered_write_rel;
}

/*
 * PREPARE TRANSACTION: refuse it if the client wrote.
 */
void
idx_xact_refuse_prepare(IdxRemoteXact *x)
{
	if (x->in_txn || x->doomed)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("cannot prepare a transaction that has written to foreign tables of server \"%s\"",
						x->servername),
				 errdetail("MongoDB transactions cannot take part in two-phase commit.")));
}

/*
 * Forget one client's transaction at the end of the PostgreSQL one.
 */
void
idx_xact_reset(IdxRemoteXact *x)
{
	x->in_txn = false;
	x->doomed = false;
	x->write_level = 0;
	x->maintained = NIL;		/* was in TopTransactionContext */
}

/*
 * Subtransaction end of one client: a commit hands the writes to the
 * parent; an abort at or above the write level aborts the MongoDB
 * transaction and dooms the PostgreSQL one.
 */
void
idx_xact_subxact_end(IdxRemoteXact *x, bool commit)
{
	int			level = GetCurrentTransactionNestLevel();

	if (!x->in_txn || x->write_level < level)
		return;
	if (commit)
	{
		x->write_level = level - 1;
		return;
	}
	idx_xact_abort_remote(x);
	x->doomed = true;
	ereport(WARNING,
			(errmsg("the MongoDB transaction on server \"%s\" was aborted",
					x->servername),
			 errdetail("MongoDB has no savepoints: writes to its foreign tables cannot be rolled back to a savepoint."),
			 errhint("Roll back the whole transaction.")));
}
