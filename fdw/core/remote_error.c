/*-------------------------------------------------------------------------
 *
 * remote_error.c
 *		  Translation of libmongoc and MongoDB errors into PostgreSQL errors.
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/core/remote_error.c
 *
 * libmongoc's messages are never passed through as they are: the primary
 * message is ours and names the foreign server; the server's own message
 * goes into the detail with anything that looks like a connection string
 * removed (message_scrub.c), so credentials cannot leak.  What the FDW was
 * doing is the CONTEXT line, one whole sentence per kind of operation
 * (IdxOp, remote_op.c).  The SQLSTATE comes from the error domain and code
 * (class 08 for connections, 23505 for duplicate keys, 57014 for
 * interruptions, 40001 for transactions MongoDB aborted, ...).  MongoDB's
 * limits have errors of their own (mongo_limits.c).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "core/mongo_limits.h"
#include "core/mongoc_compat.h"
#include "core/remote_error.h"
#include "core/stream.h"

/*
 * Is this libmongoc error a failure to reach or keep a connection?
 */
static bool
is_connection_error(const bson_error_t *error)
{
	return error->domain == MONGOC_ERROR_STREAM ||
		error->domain == MONGOC_ERROR_SERVER_SELECTION ||
		(error->domain == MONGOC_ERROR_CLIENT &&
		 error->code == MONGOC_ERROR_CLIENT_AUTHENTICATE) ||
		(error->domain == MONGOC_ERROR_SERVER && error->code == 18);
}

/*
 * Map a libmongoc / server error to a SQLSTATE.
 */
static int
error_sqlstate(const bson_error_t *error, bool connecting)
{
	if (is_connection_error(error))
		return connecting ? ERRCODE_SQLCLIENT_UNABLE_TO_ESTABLISH_SQLCONNECTION
			: ERRCODE_CONNECTION_FAILURE;
	if (error->domain == MONGOC_ERROR_SERVER ||
		error->domain == MONGOC_ERROR_WRITE_CONCERN)
	{
		switch (error->code)
		{
			case 11000:
			case 11001:
				return ERRCODE_UNIQUE_VIOLATION;
			case 50:			/* MaxTimeMSExpired */
			case 11601:			/* Interrupted */
				return ERRCODE_QUERY_CANCELED;
			case 13:			/* Unauthorized */
				return ERRCODE_INSUFFICIENT_PRIVILEGE;
			case 112:			/* WriteConflict */
			case 251:			/* NoSuchTransaction */
				return ERRCODE_T_R_SERIALIZATION_FAILURE;
			case 257:			/* TransactionTooLarge */
			case 10334:			/* BSONObjectTooLarge */
			case 17419:			/* an update's result is over 16 MiB */
			case 17420:			/* (older servers) */
				return ERRCODE_PROGRAM_LIMIT_EXCEEDED;
		}
	}
	return ERRCODE_FDW_ERROR;
}

/*
 * Raise an ERROR for a failed operation on the server named "server".
 */
void
idx_report_error(const bson_error_t *error, const char *server,
				 const IdxOp *what)
{
	bool		connecting = (what->kind == IDX_OP_CONNECT);
	char	   *detail;

	idx_stream_raise_failure(server);	/* a cancel or malformed reply */
	idx_limits_check_error(error, server, what);	/* lifetime, size, w */
	detail = idx_scrub_message(error->message);

	if (is_connection_error(error) && connecting)
		ereport(ERROR,
				(errcode(error_sqlstate(error, true)),
				 errmsg("could not connect to server \"%s\"", server),
				 errdetail("MongoDB: %s", detail)));
	if (is_connection_error(error))
		ereport(ERROR,
				(errcode(error_sqlstate(error, false)),
				 errmsg("lost connection to server \"%s\"", server),
				 errdetail("MongoDB: %s", detail),
				 idx_op_context(what)));

	ereport(ERROR,
			(errcode(error_sqlstate(error, false)),
			 errmsg("MongoDB error on server \"%s\"", server),
			 errdetail("MongoDB error %u: %s", error->code, detail),
			 idx_op_context(what)));
}

/*
 * The subdocument at "iter" as "doc" (a view); false if it is malformed.
 */
static bool
iter_document(const bson_iter_t *iter, bson_t *doc)
{
	uint32_t	len;
	const uint8_t *data;

	bson_iter_document(iter, &len, &data);
	return data != NULL && bson_init_static(doc, data, len);
}

/*
 * The code and errmsg of "doc" into "error", as "domain"; false if "doc"
 * has no code.
 */
static bool
take_code(bson_error_t *error, const bson_t *doc, uint32 domain)
{
	bson_iter_t iter;

	if (!bson_iter_init_find(&iter, doc, "code") ||
		!BSON_ITER_HOLDS_NUMBER(&iter))
		return false;
	error->domain = domain;
	error->code = (uint32) bson_iter_as_int64(&iter);
	error->message[0] = '\0';
	if (bson_iter_init_find(&iter, doc, "errmsg") &&
		BSON_ITER_HOLDS_UTF8(&iter))
		strlcpy(error->message, bson_iter_utf8(&iter, NULL),
				sizeof(error->message));
	return true;
}

/*
 * Prefer the reply's code and errmsg (the server's words) over libmongoc's
 * rewording, unless the connection itself failed.  A reply without a code
 * of its own (a write command that succeeded as a command) gives those of
 * its first write error or of its writeConcernError.
 */
void
idx_merge_reply_error(bson_error_t *error, const bson_t *reply)
{
	bson_iter_t iter;
	bson_iter_t child;
	bson_t		doc;

	if (reply == NULL || error->domain == MONGOC_ERROR_STREAM)
		return;
	if (take_code(error, reply, MONGOC_ERROR_SERVER))
		return;
	if (bson_iter_init_find(&iter, reply, "writeErrors") &&
		BSON_ITER_HOLDS_ARRAY(&iter) && bson_iter_recurse(&iter, &child) &&
		bson_iter_next(&child) && BSON_ITER_HOLDS_DOCUMENT(&child) &&
		iter_document(&child, &doc) &&
		take_code(error, &doc, MONGOC_ERROR_SERVER))
		return;
	if (bson_iter_init_find(&iter, reply, "writeConcernError") &&
		BSON_ITER_HOLDS_DOCUMENT(&iter) && iter_document(&iter, &doc))
		(void) take_code(error, &doc, MONGOC_ERROR_WRITE_CONCERN);
}

/*
 * Raise an ERROR for a failed command with reply "reply".
 */
void
idx_report_reply_error(const bson_t *reply, const bson_error_t *error,
					   const char *server, const IdxOp *what)
{
	bson_error_t copy = *error;

	idx_stream_raise_failure(server);	/* a cancel or malformed reply */
	idx_merge_reply_error(&copy, reply);
	idx_limits_check_error(&copy, server, what);	/* lifetime, size, w */
	if (reply && (mongoc_error_has_label(reply, "TransientTransactionError") ||
				  (copy.domain == MONGOC_ERROR_SERVER && copy.code == 251)))
		ereport(ERROR,
				(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
				 errmsg("MongoDB aborted the transaction on server \"%s\"",
						server),
				 errdetail("MongoDB error %u: %s", copy.code,
						   idx_scrub_message(copy.message)),
				 errhint("The transaction can be retried."),
				 idx_op_context(what)));
	idx_report_error(&copy, server, what);
}

/*
 * Raise an ERROR for a cursor that failed.  Everything needed is copied to
 * the stack first, so the cursor can be released by the caller's cleanup.
 */
void
idx_report_cursor_error(mongoc_cursor_t *cursor, const char *server,
						const IdxOp *what)
{
	const bson_t *reply = NULL;
	bson_error_t error;

	mongoc_cursor_error_document(cursor, &error, &reply);
	/* a read of a transaction that MongoDB aborted: 40001, as for writes */
	if (reply && mongoc_error_has_label(reply, "TransientTransactionError"))
		idx_report_reply_error(reply, &error, server, what);
	idx_merge_reply_error(&error, reply);
	idx_report_error(&error, server, what);
}
