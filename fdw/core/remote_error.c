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
 * removed, so credentials cannot leak.  What the FDW was doing is the
 * CONTEXT line, one whole sentence per kind of operation (IdxOp).  The SQLSTATE comes from the error
 * domain and code (class 08 for connections, 23505 for duplicate keys,
 * 57014 for interruptions, 40001 for transactions MongoDB aborted, ...).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "core/mongo_limits.h"
#include "core/mongoc_compat.h"
#include "core/remote_error.h"
#include "core/stream.h"

/*
 * An IdxOp naming "object" in "container", in the current memory context.
 */
const IdxOp *
idx_op(IdxOpKind kind, const char *object, const char *container)
{
	IdxOp	   *op = palloc(sizeof(IdxOp));

	op->kind = kind;
	op->object = object;
	op->container = container;
	return op;
}

/*
 * The CONTEXT line of an error about operation "what": a sentence of its
 * own for each kind, so that each can be translated whole.  Called inside
 * an ereport(); returns 0 as the errxxx() functions do.
 */
int
idx_op_context(const IdxOp *what)
{
	const char *o = what->object;
	const char *c = what->container;

	switch (what->kind)
	{
		case IDX_OP_CONNECT:
			return errcontext("while connecting to the server");
		case IDX_OP_SELECT_SERVER:
			return errcontext("while selecting a server for writes");
		case IDX_OP_START_SESSION:
			return errcontext("while starting a session");
		case IDX_OP_START_XACT:
			return errcontext("while starting a transaction");
		case IDX_OP_JOIN_XACT:
			return errcontext("while joining the transaction");
		case IDX_OP_COMMIT_XACT:
			return errcontext("while committing the transaction");
		case IDX_OP_WRITE_XACT_MARKER:
			return errcontext("while writing the transaction's marker for the change-stream applier");
		case IDX_OP_CLUSTER_TIME:
			return errcontext("while reading the cluster time of the server");
		case IDX_OP_LIST_COLLECTIONS:
			return errcontext("while listing the collections of database \"%s\"", c);
		case IDX_OP_READ:
			return errcontext("while reading collection \"%s\" of database \"%s\"", o, c);
		case IDX_OP_COUNT:
			return errcontext("while counting the documents of collection \"%s\" of database \"%s\"", o, c);
		case IDX_OP_SAMPLE:
			return errcontext("while sampling collection \"%s\" of database \"%s\"", o, c);
		case IDX_OP_INSERT:
			return errcontext("while inserting into collection \"%s\" of database \"%s\"", o, c);
		case IDX_OP_UPDATE_ROWS:
			return errcontext("while updating documents of collection \"%s\" of database \"%s\"", o, c);
		case IDX_OP_DELETE_ROWS:
			return errcontext("while deleting documents of collection \"%s\" of database \"%s\"", o, c);
		case IDX_OP_UPDATE_ONE:
			return errcontext("while updating a document of collection \"%s\" of database \"%s\"", o, c);
		case IDX_OP_DELETE_ONE:
			return errcontext("while deleting a document of collection \"%s\" of database \"%s\"", o, c);
		case IDX_OP_UNDO_INSERT:
			return errcontext("while removing the documents of a failed insert from collection \"%s\" of database \"%s\"", o, c);
		case IDX_OP_UNDO_WRITE:
			return errcontext("while restoring a document of collection \"%s\" of database \"%s\"", o, c);
		case IDX_OP_CREATE_INDEX_COLL:
			return errcontext("while creating index collection \"%s\" of database \"%s\"", o, c);
		case IDX_OP_DROP_INDEX_COLL:
			return errcontext("while dropping index collection \"%s\" of database \"%s\"", o, c);
		case IDX_OP_CREATE_LOOKUP:
			return errcontext("while creating the lookup index of index collection \"%s\" of database \"%s\"", o, c);
		case IDX_OP_SHARD_INDEX_COLL:
			return errcontext("while sharding index collection \"%s\" of database \"%s\"", o, c);
		case IDX_OP_BUILD_INDEX:
			return errcontext("while building index collection \"%s\" of database \"%s\"", o, c);
		case IDX_OP_VERIFY_INDEX:
			return errcontext("while verifying index collection \"%s\" of database \"%s\"", o, c);
		case IDX_OP_REPAIR_INDEX:
			return errcontext("while repairing index collection \"%s\" of database \"%s\"", o, c);
		case IDX_OP_WRITE_INDEX:
			return errcontext("while writing index collection \"%s\" of index \"%s\"", o, c);
		case IDX_OP_WRITE_INDEXES:
			return errcontext("while writing the index collections");
		case IDX_OP_CHECK_ENTRY:
			return errcontext("while checking an entry of index \"%s\"", o);
		case IDX_OP_FIND_INDEX_COLL:
			return errcontext("while looking for index collection \"%s\"", o);
		case IDX_OP_READ_OWNER:
			return errcontext("while reading the ownership marker of index collection \"%s\"", o);
		case IDX_OP_WRITE_OWNER:
			return errcontext("while writing the ownership marker of index collection \"%s\"", o);
		case IDX_OP_TAKE_OWNER:
			return errcontext("while taking over the ownership marker of index collection \"%s\"", o);
		case IDX_OP_READ_OWNERS:
			return errcontext("while reading the ownership markers of the indexes of foreign table \"%s\"", o);
		case IDX_OP_FOLLOW_STREAM:
			return errcontext("while following the change stream of database \"%s\"", c);
		case IDX_OP_READ_STREAM_POS:
			return errcontext("while reading the position of the change stream");
		case IDX_OP_STORE_STREAM_POS:
			return errcontext("while storing the position of the change stream");
		case IDX_OP_HEARTBEAT:
			return errcontext("while writing a heartbeat of the change stream");
		case IDX_OP_CONFIRM_DURABLE:
			return errcontext("while waiting for the change stream's applied changes to be majority-committed");
		case IDX_OP_READ_ELECTION:
			return errcontext("while asking the primary for its election");
		case IDX_OP_OPLOG_NOTE:
			return errcontext("while writing a no-op on every shard with appendOplogNote");
	}
	return 0;
}

/*
 * Remove anything that looks like a connection string from a libmongoc
 * message, in place, so that it can be shown in a detail line.
 */
char *
idx_scrub_message(const char *msg)
{
	char	   *copy = pstrdup(msg);
	char	   *p;

	while ((p = strstr(copy, "mongodb://")) != NULL ||
		   (p = strstr(copy, "mongodb+srv://")) != NULL)
	{
		char	   *end = p;

		while (*end && *end != ' ' && *end != '\'' && *end != '"')
			end++;
		memmove(p + 5, end, strlen(end) + 1);
		memcpy(p, "(uri)", 5);
	}
	return copy;
}

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
