/*-------------------------------------------------------------------------
 *
 * mongo_limits.c
 *		  MongoDB's transaction limits and write concern errors as errors
 *		  that say what happened and what to do.
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/core/mongo_limits.c
 *
 * mongod aborts a transaction transactionLifetimeLimitSeconds (60 s by
 * default) after its start, busy or not (a periodic task in
 * transaction_participant.cpp; an operation running at that moment is
 * interrupted with TransactionExceededLifetimeLimitSeconds, 290), and the
 * transaction's later statements and its commit get NoSuchTransaction (251)
 * with the TransientTransactionError label.  A transaction that needs more
 * of the WiredTiger cache than it can ever get fails with
 * TransactionTooLargeForCache (388, mongod 6.2+, no transient label);
 * TransactionTooLarge (257) is the older size limit.  Retrying such a
 * transaction fails the same way, so these are reported as limits
 * (54000) with a hint to write in smaller transactions or in ordered mode,
 * never as serialization failures to retry.
 *
 * A NoSuchTransaction is taken for an expiry when the transaction has been
 * open for at least the server's lifetime limit, which is asked for
 * (getParameter) only then, once per client; a user without the privilege
 * to ask gets mongod's default, 60 s.  The start of each client's
 * transaction, and the limit once asked, are kept in its transaction state
 * beside the connection (IdxRemoteXact, set by idx_xact_begin_write()).
 * Those states are found through the function xact.c hands over before it
 * starts the first transaction (idx_limits_set_xact_finder()): the limits
 * are below the connection cache and the error reporting that uses them,
 * and never call up into either.
 *
 * A writeConcernError means the write was made on the primary but not
 * acknowledged as the write concern asks: a failover may still roll it
 * back.  On a write it is an ERROR (40003, statement completion unknown),
 * so that an ordered-mode statement undoes what it wrote; on
 * commitTransaction, which libmongoc labels UnknownTransactionCommitResult
 * (mongoc-client-session.c, txn_commit), the commit is retried (with
 * w:majority, as the transactions specification says) and if the error
 * stays, the COMMIT fails with 08007 (transaction resolution unknown).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "core/message_scrub.h"
#include "core/mongo_limits.h"
#include "core/option.h"
#include "core/pg_compat.h"
#include "core/remote_op.h"
#include "core/xact_state.h"

/* mongod's default transactionLifetimeLimitSeconds */
#define IDX_DEFAULT_TXN_LIFETIME 60

/* mongod error codes (src/mongo/base/error_codes.yml) */
#define MONGO_UNKNOWN_REPL_WRITE_CONCERN 79
#define MONGO_UNSATISFIABLE_WRITE_CONCERN 100
#define MONGO_NO_SUCH_TRANSACTION 251
#define MONGO_TRANSACTION_TOO_LARGE 257
#define MONGO_TXN_EXCEEDED_LIFETIME 290
#define MONGO_TXN_TOO_LARGE_FOR_CACHE 388

/*
 * The server's transactionLifetimeLimitSeconds, asked once per client;
 * mongod's default if the server does not say (getParameter needs a
 * privilege many users lack).  Errors are not raised: this runs while
 * another error is being reported.
 */
static int
server_lifetime(IdxRemoteXact *x)
{
	bson_t	   *command;
	bson_t		reply;
	bson_error_t error;
	bson_iter_t iter;

	if (x->lifetime > 0)
		return x->lifetime;
	x->lifetime = IDX_DEFAULT_TXN_LIFETIME;
	command = BCON_NEW("getParameter", BCON_INT32(1),
					   "transactionLifetimeLimitSeconds", BCON_INT32(1));
	if (mongoc_client_command_simple(x->client, "admin", command, NULL,
									 &reply, &error) &&
		bson_iter_init_find(&iter, &reply, "transactionLifetimeLimitSeconds") &&
		BSON_ITER_HOLDS_NUMBER(&iter) && bson_iter_as_int64(&iter) > 0)
		x->lifetime = (int) Min(bson_iter_as_int64(&iter), INT_MAX);
	bson_destroy(&reply);
	bson_destroy(command);
	return x->lifetime;
}

/*
 * Where the transaction states are looked up (idx_limits_set_xact_finder()),
 * or NULL while no transaction has started in this backend.
 */
static IdxLatestXactFn latest_xact = NULL;

/*
 * Let "fn" find the transaction state of a server's latest transaction.
 */
void
idx_limits_set_xact_finder(IdxLatestXactFn fn)
{
	latest_xact = fn;
}

/*
 * The transaction state of the server's client whose MongoDB transaction
 * started last, or NULL (none has started, or none on this server).
 */
static IdxRemoteXact *
server_xact(const char *server)
{
	return latest_xact != NULL ? latest_xact(server) : NULL;
}

/*
 * Has the server's transaction passed its lifetime?  Sets *age and
 * *lifetime (seconds).  A second of slack covers the two clocks.
 */
static bool
lifetime_passed(const char *server, long *age, int *lifetime)
{
	IdxRemoteXact *x = server_xact(server);
	long		secs;
	int			usecs;

	if (x == NULL)
		return false;
	TimestampDifference(x->started, GetCurrentTimestamp(), &secs, &usecs);
	*age = secs;
	*lifetime = server_lifetime(x);
	return secs + 1 >= *lifetime;
}

/*
 * The ERROR for a transaction that ran past the server's lifetime limit.
 */
pg_noreturn static void
report_lifetime(const bson_error_t *error, const char *server,
				const IdxOp *what, long age, int lifetime)
{
	ereport(ERROR,
			(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
			 errmsg("the MongoDB transaction on server \"%s\" ran longer than the server allows, and was aborted",
					server),
			 errdetail("MongoDB aborts a transaction %d seconds after its start (transactionLifetimeLimitSeconds); this one had been open for %ld seconds.  MongoDB error %u: %s",
					   lifetime, age, error->code,
					   idx_scrub_message(error->message)),
			 errhint("Retrying does not help.  Write in smaller transactions, or set the option consistency to '%s' on the foreign table for bulk loads: each write is then final when it is made, without a MongoDB transaction.",
					 idx_consistency_name(IDX_CONSISTENCY_ORDERED)),
			 idx_op_context(what)));
}

/*
 * The ERROR for a transaction too large for the server.
 */
pg_noreturn static void
report_size(const bson_error_t *error, const char *server, const IdxOp *what)
{
	ereport(ERROR,
			(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
			 errmsg("the MongoDB transaction on server \"%s\" is too large for the server, and was aborted",
					server),
			 errdetail("MongoDB limits how much a transaction may write before it commits (the storage engine's cache).  MongoDB error %u: %s",
					   error->code, idx_scrub_message(error->message)),
			 errhint("Retrying does not help.  Write in smaller transactions, or set the option consistency to '%s' on the foreign table for bulk loads: each write is then final when it is made, without a MongoDB transaction.",
					 idx_consistency_name(IDX_CONSISTENCY_ORDERED)),
			 idx_op_context(what)));
}

/*
 * Is this a writeConcernError?
 */
bool
idx_is_write_concern_error(const bson_error_t *error)
{
	return error->domain == MONGOC_ERROR_WRITE_CONCERN;
}

/*
 * Is it a write concern error that no retry can satisfy?  The transactions
 * specification leaves UnknownTransactionCommitResult off these.
 */
bool
idx_write_concern_unsatisfiable(const bson_error_t *error)
{
	return idx_is_write_concern_error(error) &&
		(error->code == MONGO_UNSATISFIABLE_WRITE_CONCERN ||
		 error->code == MONGO_UNKNOWN_REPL_WRITE_CONCERN);
}

/*
 * The ERROR for a write the server made but did not acknowledge as asked.
 */
pg_noreturn static void
report_write_concern(const bson_error_t *error, const char *server,
					 const IdxOp *what)
{
	ereport(ERROR,
			(errcode(ERRCODE_T_R_STATEMENT_COMPLETION_UNKNOWN),
			 errmsg("MongoDB did not acknowledge a write on server \"%s\" as the write concern asks",
					server),
			 errdetail("The write was made on the primary, but a failover may still roll it back.  MongoDB write concern error %u: %s",
					   error->code, idx_scrub_message(error->message)),
			 errhint("Check the health of the replica set and the w option of the server's uri.  A statement on a table in ordered mode undoes its writes."),
			 idx_op_context(what)));
}

/*
 * Raise the ERROR for a failure that is one of MongoDB's limits; return if
 * it is not one.
 */
void
idx_limits_check_error(const bson_error_t *error, const char *server,
					   const IdxOp *what)
{
	long		age = 0;
	int			lifetime = IDX_DEFAULT_TXN_LIFETIME;

	if (idx_is_write_concern_error(error))
		report_write_concern(error, server, what);
	if (error->domain != MONGOC_ERROR_SERVER)
		return;
	switch (error->code)
	{
		case MONGO_TXN_EXCEEDED_LIFETIME:
			if (!lifetime_passed(server, &age, &lifetime))
				age = lifetime;
			report_lifetime(error, server, what, age, lifetime);
		case MONGO_NO_SUCH_TRANSACTION:
			if (lifetime_passed(server, &age, &lifetime))
				report_lifetime(error, server, what, age, lifetime);
			break;
		case MONGO_TRANSACTION_TOO_LARGE:
		case MONGO_TXN_TOO_LARGE_FOR_CACHE:
			report_size(error, server, what);
	}
}

/*
 * The ERROR for a commit whose outcome is unknown: a write concern error
 * that retries with w:majority did not clear.
 */
void
idx_report_commit_unknown(const bson_error_t *error, const char *server)
{
	ereport(ERROR,
			(errcode(ERRCODE_TRANSACTION_RESOLUTION_UNKNOWN),
			 errmsg("could not confirm the commit of the MongoDB transaction on server \"%s\"",
					server),
			 errdetail("MongoDB committed the transaction on the primary but did not acknowledge it as the write concern asks, so a failover may still roll it back; the PostgreSQL transaction is rolled back.  MongoDB write concern error %u: %s",
					   error->code, idx_scrub_message(error->message)),
			 idx_write_concern_unsatisfiable(error)
			 ? errhint("The replica set cannot satisfy the write concern: check the w option of the server's uri.")
			 : errhint("Check the health of the replica set, then whether the transaction's writes are in MongoDB.")));
}
