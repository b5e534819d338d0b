/*-------------------------------------------------------------------------
 *
 * bulk_write.c
 *		  MongoDB 8.0's bulkWrite command (see bulk_write.h): building it,
 *		  sending it, and reading the first failed op from its reply.
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/index/bulk_write.c
 *
 * Ops are queued with the namespace they write; the command lists each
 * namespace once in nsInfo, and each op names its namespace by its index
 * there.  The command is sent with ordered: true and errorsOnly: true, so
 * that its reply holds counts and at most one per-op result, the failed
 * op, whose index (idx) says that every op before it was executed and
 * none after it.  A command document is limited to maxBsonObjectSize (plus
 * 16 KB for the command itself), and libmongoc's command API cannot send
 * the ops as a document sequence, so a queue larger than that is sent as
 * several commands, in order, each starting where the last one ended.
 *
 * Outside a MongoDB transaction each command is a retryable write, as the
 * retryable writes specification makes insert, update and delete: it goes
 * in a session of its own (xact.c) with a txnNumber of ours, and is sent
 * once more, unchanged, after a network error or an error labelled
 * RetryableWriteError.  The server knows the statements (ops) it executed
 * under that txnNumber and does not execute them again, so a lost reply
 * neither fails the statement nor writes twice.  libmongoc 1.23 adds a
 * txnNumber only to the commands it knows (mongoc-cmd.c,
 * _allow_txn_number: findAndModify, and insert, update and delete through
 * its bulk API), hence this.  A command with a multi-document op is not
 * retryable (mongod refuses it as InvalidOptions), nor is one to a
 * standalone server or with retryWrites=false in the URI.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "nodes/pg_list.h"

#include "core/connection.h"
#include "core/convert.h"
#include "core/handle.h"
#include "core/remote_error.h"
#include "core/xact.h"
#include "index/bulk_write.h"
#include "index/index_entry.h"

/* Bytes of ops per command: under MongoDB's 16 MB, with room for the rest */
#define IDX_BULK_WRITE_MAX_BYTES (16 * 1024 * 1024 - 64 * 1024)

/* Ops per command at most (mongod's maxWriteBatchSize) */
#define IDX_BULK_WRITE_MAX_OPS 100000

struct IdxBulkWrite
{
	mongoc_client_t *client;
	const char *servername;
	List	   *namespaces;		/* "db.coll" strings, nsInfo order */
	bson_t	  **ops;			/* palloc'd op documents */
	int			nops;
	int			alloc;
	int64		matched;		/* nMatched of the commands sent */
	int64		deleted;		/* nDeleted of the commands sent */
	bool		has_multi;		/* a multi-document op is queued */
	int			retryable;		/* -1: not known yet; 0/1: can the server
								 * take retryable writes? */
};

/*
 * Does the server writes go to take bulkWrite (wire version 25 or later,
 * from the hello of the connection's server description)?  Called at
 * executor start: planning asks MongoDB nothing but a never-analyzed
 * table's size.
 */
bool
idx_bulk_write_supported(mongoc_client_t *client, const char *servername)
{
	return idx_primary_wire_version(client, servername) >=
		IDX_BULK_WRITE_WIRE_VERSION;
}

/*
 * An empty queue of ops, in the current memory context.
 */
IdxBulkWrite *
idx_bulk_write_create(mongoc_client_t *client, const char *servername)
{
	IdxBulkWrite *bw = palloc0(sizeof(IdxBulkWrite));

	bw->client = client;
	bw->servername = servername;
	bw->alloc = 64;
	bw->ops = palloc(sizeof(bson_t *) * bw->alloc);
	bw->retryable = -1;
	return bw;
}

/*
 * The nsInfo index of a namespace, added if new.
 */
static int
namespace_index(IdxBulkWrite *bw, const char *database, const char *collection)
{
	char	   *ns = psprintf("%s.%s", database, collection);
	ListCell   *lc;

	foreach(lc, bw->namespaces)
	{
		if (strcmp(lfirst(lc), ns) == 0)
		{
			pfree(ns);
			return foreach_current_index(lc);
		}
	}
	bw->namespaces = lappend(bw->namespaces, ns);
	return list_length(bw->namespaces) - 1;
}

/*
 * Start an op document {<kind>: <ns index>, ...} in "op".
 */
static void
begin_op(IdxBulkWrite *bw, bson_t *op, const char *kind,
		 const char *database, const char *collection)
{
	bson_init(op);
	idx_check_append(BSON_APPEND_INT32(op, kind,
									   namespace_index(bw, database,
													   collection)));
}

/*
 * Queue a finished op document (copied; "op" is destroyed).
 */
static void
add_op(IdxBulkWrite *bw, bson_t *op)
{
	if (bw->nops == bw->alloc)
	{
		bw->alloc *= 2;
		bw->ops = repalloc(bw->ops, sizeof(bson_t *) * bw->alloc);
	}
	bw->ops[bw->nops++] = idx_bson_pcopy(op);
	bson_destroy(op);
}

/*
 * Queue an insert of "doc".
 */
void
idx_bulk_write_insert(IdxBulkWrite *bw, const char *database,
					  const char *collection, const bson_t *doc)
{
	bson_t		op;

	begin_op(bw, &op, "insert", database, collection);
	idx_check_append(BSON_APPEND_DOCUMENT(&op, "document", doc));
	add_op(bw, &op);
}

/*
 * Queue an update of one document: "update" is a replacement or an update
 * with operators ($set), as the update command takes it.
 */
void
idx_bulk_write_update(IdxBulkWrite *bw, const char *database,
					  const char *collection, const bson_t *filter,
					  const bson_t *update, bool upsert)
{
	bson_t		op;

	begin_op(bw, &op, "update", database, collection);
	idx_check_append(BSON_APPEND_DOCUMENT(&op, "filter", filter));
	idx_check_append(BSON_APPEND_DOCUMENT(&op, "updateMods", update));
	if (upsert)
		idx_check_append(BSON_APPEND_BOOL(&op, "upsert", true));
	add_op(bw, &op);
}

/*
 * Queue a delete of the documents "filter" matches (multi) or the first.
 */
void
idx_bulk_write_delete(IdxBulkWrite *bw, const char *database,
					  const char *collection, const bson_t *filter, bool multi)
{
	bson_t		op;

	begin_op(bw, &op, "delete", database, collection);
	idx_check_append(BSON_APPEND_DOCUMENT(&op, "filter", filter));
	idx_check_append(BSON_APPEND_BOOL(&op, "multi", multi));
	bw->has_multi |= multi;
	add_op(bw, &op);
}

/*
 * How many ops are queued.
 */
int
idx_bulk_write_nops(IdxBulkWrite *bw)
{
	return bw->nops;
}

/*
 * Can a document go in an op of a command (with room for the op's other
 * fields)?
 */
bool
idx_bulk_write_fits(const bson_t *doc)
{
	return doc->len + 64 * 1024 <= IDX_BULK_WRITE_MAX_BYTES;
}

/*
 * The nMatched and nDeleted of the commands sent so far.
 */
void
idx_bulk_write_counts(IdxBulkWrite *bw, int64 *matched, int64 *deleted)
{
	*matched = bw->matched;
	*deleted = bw->deleted;
}

/*
 * The command of ops [from, end), where "end" is as far as one command
 * holds; returns "end".
 */
static int
build_command(IdxBulkWrite *bw, int from, bson_t *cmd)
{
	bson_t		ops;
	bson_t		nsinfo;
	int64		bytes = 0;
	int			end;
	ListCell   *lc;

	idx_check_append(BSON_APPEND_INT32(cmd, "bulkWrite", 1));
	idx_check_append(IDX_BSON_APPEND_ARRAY_BEGIN(cmd, "ops", &ops));
	for (end = from; end < bw->nops; end++)
	{
		char		key[16];

		if (end > from && (end - from >= IDX_BULK_WRITE_MAX_OPS ||
						   bytes + bw->ops[end]->len > IDX_BULK_WRITE_MAX_BYTES))
			break;
		bytes += bw->ops[end]->len;
		snprintf(key, sizeof(key), "%d", end - from);
		idx_check_append(BSON_APPEND_DOCUMENT(&ops, key, bw->ops[end]));
	}
	idx_check_append(bson_append_array_end(cmd, &ops));
	idx_check_append(IDX_BSON_APPEND_ARRAY_BEGIN(cmd, "nsInfo", &nsinfo));
	foreach(lc, bw->namespaces)
	{
		bson_t		ns;
		char		key[16];

		snprintf(key, sizeof(key), "%d", foreach_current_index(lc));
		idx_check_append(BSON_APPEND_DOCUMENT_BEGIN(&nsinfo, key, &ns));
		idx_check_append(BSON_APPEND_UTF8(&ns, "ns", lfirst(lc)));
		idx_check_append(bson_append_document_end(&nsinfo, &ns));
	}
	idx_check_append(bson_append_array_end(cmd, &nsinfo));
	idx_check_append(BSON_APPEND_BOOL(cmd, "ordered", true));
	idx_check_append(BSON_APPEND_BOOL(cmd, "errorsOnly", true));
	return end;
}

/*
 * A count of the reply ("nMatched"...), 0 if absent.
 */
static int64
reply_count(const bson_t *reply, const char *field)
{
	bson_iter_t iter;

	if (bson_iter_init_find(&iter, reply, field) &&
		BSON_ITER_HOLDS_NUMBER(&iter))
		return bson_iter_as_int64(&iter);
	return 0;
}

/*
 * The failed op of a successful reply with nErrors > 0: the first result
 * of the cursor's first batch with ok 0.  Returns false if there is none.
 */
static bool
first_failed_op(const bson_t *reply, int from, IdxBulkWriteError *failed)
{
	bson_iter_t iter;
	bson_iter_t item;
	bson_iter_t field;

	if (!bson_iter_init(&iter, reply) ||
		!bson_iter_find_descendant(&iter, "cursor.firstBatch", &item) ||
		!BSON_ITER_HOLDS_ARRAY(&item) || !bson_iter_recurse(&item, &item))
		return false;
	while (bson_iter_next(&item))
	{
		bson_t		doc;
		const uint8_t *data;
		uint32_t	len;

		if (!BSON_ITER_HOLDS_DOCUMENT(&item))
			continue;
		bson_iter_document(&item, &len, &data);
		if (!bson_init_static(&doc, data, len) ||
			!bson_iter_init_find(&field, &doc, "ok") ||
			bson_iter_as_double(&field) != 0.0 ||
			!bson_iter_init_find(&field, &doc, "idx") ||
			!BSON_ITER_HOLDS_NUMBER(&field))
			continue;
		failed->op = from + (int) bson_iter_as_int64(&field);
		failed->code = bson_iter_init_find(&field, &doc, "code") &&
			BSON_ITER_HOLDS_NUMBER(&field) ? (int) bson_iter_as_int64(&field) : 0;
		failed->doc = idx_bson_pcopy(&doc);
		failed->error.domain = MONGOC_ERROR_SERVER;
		failed->error.code = (uint32) failed->code;
		strlcpy(failed->error.message,
				bson_iter_init_find(&field, &doc, "errmsg") &&
				BSON_ITER_HOLDS_UTF8(&field) ?
				bson_iter_utf8(&field, NULL) : "bulkWrite op failed",
				sizeof(failed->error.message));
		return true;
	}
	return false;
}

/*
 * Read the reply of a command that succeeded: add its counts; returns
 * false with the failed op, if one failed.
 */
static bool
read_reply(IdxBulkWrite *bw, const bson_t *reply, int from,
		   IdxBulkWriteError *failed, const IdxOp *what)
{
	bson_iter_t iter;

	bw->matched += reply_count(reply, "nMatched");
	bw->deleted += reply_count(reply, "nDeleted");
	if (reply_count(reply, "nErrors") == 0)
		return true;
	if (bson_iter_init(&iter, reply) &&
		bson_iter_find_descendant(&iter, "cursor.id", &iter) &&
		BSON_ITER_HOLDS_NUMBER(&iter) && bson_iter_as_int64(&iter) != 0)
		ereport(ERROR,
				(errcode(ERRCODE_FDW_ERROR),
				 errmsg("MongoDB server \"%s\" left the cursor of a bulkWrite's errors open",
						bw->servername),
				 errdetail("The FDW reads a bulkWrite's errors from its first reply only."),
				 idx_op_context(what)));
	if (!first_failed_op(reply, from, failed))
		ereport(ERROR,
				(errcode(ERRCODE_FDW_ERROR),
				 errmsg("MongoDB server \"%s\" reported bulkWrite errors without naming a failed operation",
						bw->servername),
				 idx_op_context(what)));
	return false;
}

/*
 * Does a successful reply carry a writeConcernError?  Then "error" gets it,
 * as libmongoc reports one.
 */
static bool
write_concern_error(const bson_t *reply, bson_error_t *error)
{
	bson_iter_t iter;
	bson_iter_t field;

	if (!bson_iter_init_find(&iter, reply, "writeConcernError") ||
		!BSON_ITER_HOLDS_DOCUMENT(&iter))
		return false;
	error->domain = MONGOC_ERROR_WRITE_CONCERN;
	error->code = bson_iter_recurse(&iter, &field) &&
		bson_iter_find(&field, "code") && BSON_ITER_HOLDS_NUMBER(&field) ?
		(uint32) bson_iter_as_int64(&field) : 64;
	strlcpy(error->message,
			bson_iter_recurse(&iter, &field) &&
			bson_iter_find(&field, "errmsg") && BSON_ITER_HOLDS_UTF8(&field) ?
			bson_iter_utf8(&field, NULL) : "write concern error",
			sizeof(error->message));
	return true;
}

/*
 * Does the _id of "doc" (a document, or a filter {_id: ...}) equal the
 * "_id" of "key"?
 */
static bool
same_id(const bson_t *doc, const bson_t *key)
{
	bson_iter_t a;
	bson_iter_t b;
	bson_t		x = BSON_INITIALIZER;
	bson_t		y = BSON_INITIALIZER;
	bool		same;

	if (!bson_iter_init_find(&a, doc, "_id") ||
		!bson_iter_init_find(&b, key, "_id"))
		return false;
	idx_check_append(bson_append_iter(&x, "v", 1, &a));
	idx_check_append(bson_append_iter(&y, "v", 1, &b));
	same = bson_equal(&x, &y);
	bson_destroy(&x);
	bson_destroy(&y);
	return same;
}

/*
 * A duplicate key that failed a command of ops [from, end) as a whole
 * (code 11000 at the top of the reply): the op it came from, so that it is
 * handled as the failed op of the cursor it usually is.  mongod 8.0 returns
 * it as that op's error, in a transaction too (write_ops_exec.cpp,
 * handleError: only a transient error fails the whole command), so this
 * is a precaution, for a server that does otherwise: the op is the first
 * insert or upsert into the namespace of the reply's errmsg whose _id is
 * the reply's keyValue (index entries and facts are unique by _id).
 * Returns false if there is no such op.
 */
static bool
command_dup_key_op(IdxBulkWrite *bw, int from, int end, const bson_t *reply,
				   const bson_error_t *error, IdxBulkWriteError *failed)
{
	bson_iter_t iter;
	const char *msg;
	const char *coll;
	bson_t		key;
	const uint8_t *data;
	uint32_t	len;
	int			i;

	if (error->domain != MONGOC_ERROR_SERVER || error->code != 11000 ||
		!bson_iter_init_find(&iter, reply, "keyValue") ||
		!BSON_ITER_HOLDS_DOCUMENT(&iter))
		return false;
	bson_iter_document(&iter, &len, &data);
	if (!bson_init_static(&key, data, len))
		return false;
	msg = strstr(error->message, "collection: ");
	if (msg == NULL)
		return false;
	coll = msg + strlen("collection: ");
	for (i = from; i < end; i++)
	{
		const char *kind = bson_iter_init(&iter, bw->ops[i]) &&
			bson_iter_next(&iter) ? bson_iter_key(&iter) : "";
		const char *ns;
		bson_iter_t field;
		bson_t		doc;

		if (strcmp(kind, "delete") == 0)
			continue;
		ns = list_nth(bw->namespaces, bson_iter_int32(&iter));
		if (strncmp(coll, ns, strlen(ns)) != 0 || coll[strlen(ns)] != ' ' ||
			!bson_iter_init_find(&field, bw->ops[i],
								 strcmp(kind, "insert") == 0 ?
								 "document" : "filter") ||
			!BSON_ITER_HOLDS_DOCUMENT(&field))
			continue;
		bson_iter_document(&field, &len, &data);
		if (!bson_init_static(&doc, data, len) || !same_id(&doc, &key))
			continue;
		failed->op = i;
		failed->code = 11000;
		failed->doc = idx_bson_pcopy(reply);
		failed->error = *error;
		return true;
	}
	return false;
}

/*
 * Can the server writes go to take retryable writes: a replica set member
 * or mongos that has sessions (logicalSessionTimeoutMinutes in its hello),
 * unless the URI says retryWrites=false?  Asked once per queue.
 */
static bool
server_takes_retryable(IdxBulkWrite *bw)
{
	if (bw->retryable < 0)
	{
		bson_error_t error;
		mongoc_server_description_t *sd;
		const bson_t *hello;
		bson_iter_t iter;

		bw->retryable = 0;
		if (!mongoc_uri_get_option_as_bool(mongoc_client_get_uri(bw->client),
										   MONGOC_URI_RETRYWRITES, true))
			return false;
		sd = mongoc_client_select_server(bw->client, true, NULL, &error);
		if (sd == NULL)
			idx_report_error(&error, bw->servername,
							 idx_op(IDX_OP_SELECT_SERVER, NULL, NULL));
		hello = mongoc_server_description_hello_response(sd);
		bw->retryable =
			strcmp(mongoc_server_description_type(sd), "Standalone") != 0 &&
			hello != NULL &&
			bson_iter_init_find(&iter, hello, "logicalSessionTimeoutMinutes") &&
			BSON_ITER_HOLDS_NUMBER(&iter);
		mongoc_server_description_destroy(sd);
	}
	return bw->retryable == 1;
}

/*
 * Does a failed attempt of a retryable write ask to be sent again?  A
 * network error does (libmongoc's _mongoc_error_is_network: the reply was
 * lost, the command may or may not have run), and so does a reply the
 * server labelled RetryableWriteError (an error or a writeConcernError
 * whose code is in mongod's RetriableError category).
 */
static bool
retry_wanted(bool ok, const bson_error_t *error, const bson_t *reply)
{
	if (!ok && (error->domain == MONGOC_ERROR_STREAM ||
				(error->domain == MONGOC_ERROR_PROTOCOL &&
				 error->code == MONGOC_ERROR_PROTOCOL_INVALID_REPLY)))
		return true;
	return mongoc_error_has_label(reply, "RetryableWriteError");
}

/*
 * One attempt of a command; a writeConcernError fails it too.
 */
static bool
run_command(IdxBulkWrite *bw, const bson_t *cmd, const bson_t *opts,
			bson_t *reply, bson_error_t *error)
{
	bool		ok;

	ok = mongoc_client_write_command_with_opts(bw->client, "admin", cmd, opts,
											   reply, error);
	if (ok && write_concern_error(reply, error))
		ok = false;
	return ok;
}

/*
 * Send one command (destroyed here): in "session" if there is one (a
 * transaction's: libmongoc adds lsid, txnNumber and autocommit), else as a
 * retryable write if it can be one (see the top of the file), sent a second
 * time if the first attempt asks for it; else in libmongoc's implicit
 * session.  The first command of a transaction that MongoDB aborted for
 * now is sent again in the transaction started again
 * (idx_xact_restart_first).  A session libmongoc cannot add to the command
 * is an ERROR of "what".
 */
static bool
send_command(IdxBulkWrite *bw, bson_t *cmd, mongoc_client_session_t *session,
			 bson_t *reply, bson_error_t *error, const IdxOp *what)
{
	bson_t		opts = BSON_INITIALIZER;
	bool		retryable = false;
	bool		ok;
	bool		first = idx_xact_sends_first(session);
	int			attempts = 0;

	if (session == NULL && !bw->has_multi && server_takes_retryable(bw))
	{
		int64		txn_number;

		session = idx_xact_retry_session(bw->client, bw->servername,
										 &txn_number);
		if (session != NULL)
		{
			idx_check_append(BSON_APPEND_INT64(cmd, "txnNumber", txn_number));
			retryable = true;
		}
	}
	if (session && !mongoc_client_session_append(session, &opts, error))
	{
		bson_destroy(cmd);
		bson_destroy(&opts);
		idx_report_error(error, bw->servername, what);
	}
	ok = run_command(bw, cmd, &opts, reply, error);
	if (retryable && retry_wanted(ok, error, reply))
	{
		bson_destroy(reply);
		ok = run_command(bw, cmd, &opts, reply, error);
	}
	/* the transaction's first command, which MongoDB aborted for now */
	while (!ok && first &&
		   idx_xact_restart_first(session, reply, error, &attempts))
	{
		bson_destroy(reply);
		ok = run_command(bw, cmd, &opts, reply, error);
	}
	bson_destroy(cmd);
	bson_destroy(&opts);
	return ok;
}

/*
 * Send the ops from "from" on, as few commands as they fit in, in the
 * session if any (a transaction's), else each as a retryable write if it
 * can be one (see send_command).  Returns true if every
 * op was executed; false with "failed" set if an op failed (the ops before
 * it were executed, those after it not), or with failed->op = the number
 * of ops if all were executed but their write concern was not satisfied.
 * A command that fails as a whole is raised as an ERROR ("what" says what
 * was being done).
 */
bool
idx_bulk_write_execute(IdxBulkWrite *bw, int from,
					   mongoc_client_session_t *session, const IdxOp *what,
					   IdxBulkWriteError *failed)
{
	while (from < bw->nops)
	{
		bson_t		cmd = BSON_INITIALIZER;
		bson_t		reply;
		bson_error_t error;
		bool		ok;
		int			end;

		CHECK_FOR_INTERRUPTS();
		end = build_command(bw, from, &cmd);
		ok = send_command(bw, &cmd, session, &reply, &error, what);
		if (!ok)
		{
			bson_t	   *failed_reply = idx_own_reply(&reply);

			if (error.domain == MONGOC_ERROR_WRITE_CONCERN &&
				read_reply(bw, failed_reply, from, failed, what))
			{
				/* executed, but not acknowledged as asked */
				failed->op = bw->nops;
				failed->code = (int) error.code;
				failed->doc = failed_reply;
				failed->error = error;
				return false;
			}
			if (error.domain == MONGOC_ERROR_WRITE_CONCERN)
				return false;
			if (command_dup_key_op(bw, from, end, failed_reply, &error, failed))
				return false;
			idx_report_reply_error(failed_reply, &error, bw->servername, what);
		}
		ok = read_reply(bw, &reply, from, failed, what);
		bson_destroy(&reply);
		if (!ok)
			return false;
		from = end;
	}
	return true;
}

/*
 * Raise the ERROR of a failed op (or of the write concern), as the write
 * command of that op would have been reported.
 */
void
idx_bulk_write_report(IdxBulkWrite *bw, const IdxBulkWriteError *failed,
					  const IdxOp *what)
{
	idx_report_reply_error(failed->doc, &failed->error, bw->servername, what);
}
