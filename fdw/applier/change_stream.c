/*-------------------------------------------------------------------------
 *
 * change_stream.c
 *		  A database-level MongoDB change stream, followed with raw
 *		  aggregate and getMore commands for the change-stream applier.
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/applier/change_stream.c
 *
 * libmongoc's mongoc_change_stream_t fixes the getMore's maxTimeMS when
 * the stream is opened and resumes by itself in a loop; the applier needs
 * to choose the wait per call (short when a backend waits for it) and to
 * tell a lost history from a resumable error.  So the commands are sent
 * as the driver would send them (mongodb/specifications change-streams):
 * one explicit session whose lsid goes with the aggregate and every
 * getMore (mongod refuses a getMore from another session: getmore_cmd.cpp
 * validateLSID), the postBatchResumeToken (PBRT) of every reply kept as
 * the position, and the errors classified as the specification says:
 * a network error, CursorNotFound (43) or the ResumableChangeStreamError
 * label on a getMore is resumable; ChangeStreamHistoryLost (286),
 * ChangeStreamFatalError (280) and CappedPositionLost (136) mean the
 * position is gone; anything else is an ERROR.
 *
 * Every reply is checked before anything of it is used: an event the
 * applier cannot read whole (no resume token, no operationType string of
 * a kind a stream without expanded events has, no clusterTime Timestamp,
 * a namespace that is not a document of strings, a document event
 * without documentKey._id, a malformed lsid or txnNumber), a time past
 * the cluster time the same reply reports (no event, nor the scan
 * position, can be later than the server's clock when it answered; the
 * position of a stream opened at a time can be that time), or
 * a postBatchResumeToken that is not a token, is an ERROR: skipped, it
 * would leave an index table without a change while the applier calls
 * it current.
 *
 * Events over 16 MB.  mongod serializes each event; one over the BSON
 * size limit (an insert of a document with a large _id, which the event
 * holds in both fullDocument and documentKey) fails the aggregate or
 * getMore with BSONObjectTooLarge (10334), which no resume can pass: the
 * stream meets it again.  From MongoDB 7.0 (wire version 21) the pipeline
 * ends with $changeStreamSplitLargeEvent, and such an event comes as
 * fragments (applier_stream.c puts them together).  On any server, when a
 * command of the stream still fails so (10334, or 7182500: a fragment that
 * cannot be made small enough), the stream is opened again after its
 * token, for one batch, with a $project that keeps only what identifies
 * each event (its type, time, namespaces, document key and transaction),
 * none of the documents: the applier reads those facts from the
 * collection instead ("slim"); the next getMore reopens it whole after
 * that batch's token.  If even that fails, the caller learns it
 * (IDX_CS_TOO_LARGE).
 *
 * Resume tokens are opaque to clients, except that mongod's (and the test
 * server's) _data starts with the KeyString of the cluster time: the byte
 * 0x82 then the Timestamp as 8 big-endian bytes (mongod
 * src/mongo/db/pipeline/resume_token.cpp, ResumeTokenData::toDocument).
 * idx_cs_token_time() reads that time to know how far an idle stream has
 * scanned; a token of another shape gives 0 ("unknown"), and the applier
 * then relies on the events and its heartbeats only.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"

#include "applier/change_stream.h"
#include "core/connection.h"
#include "core/convert.h"
#include "core/mongoc_compat.h"
#include "core/stream.h"
#include "sync/cluster_time.h"
#include "sync/sync_state.h"

/* Error codes of mongod (src/mongo/base/error_codes.yml) */
#define MONGO_CURSOR_NOT_FOUND		43
#define MONGO_CAPPED_POSITION_LOST	136
#define MONGO_INVALID_RESUME_TOKEN	260
#define MONGO_CS_FATAL				280
#define MONGO_CS_HISTORY_LOST		286
#define MONGO_UNAUTHORIZED			13

/*
 * The kinds of event a stream without showExpandedEvents has (mongod
 * src/mongo/db/pipeline/document_source_change_stream.h); any other is
 * one the applier does not know how to apply.
 */
static const char *const known_operations[] = {
	"insert", "update", "replace", "delete", "drop", "rename",
	"dropDatabase", "invalidate"
};

#define MONGO_BSON_TOO_LARGE		10334
#define MONGO_SPLIT_FAILED			7182500

/* The wire version of MongoDB 7.0, the first with $changeStreamSplitLargeEvent */
#define SPLIT_WIRE_VERSION			21

/*
 * The predicate that leaves out the transactions of the excluded
 * sessions: {"lsid.id": {$nin: [<UUID>, ...]}}.  Events outside a
 * transaction have no lsid, which $nin lets through.
 */
static void
append_excluded(IdxChangeStream *cs, bson_t *match)
{
	bson_t		cond,
				list;
	int			i;

	idx_check_append(BSON_APPEND_DOCUMENT_BEGIN(match, "lsid.id", &cond));
	idx_check_append(IDX_BSON_APPEND_ARRAY_BEGIN(&cond, "$nin", &list));
	for (i = 0; i < cs->nexcluded; i++)
	{
		char		key[16];

		snprintf(key, sizeof(key), "%d", i);
		idx_check_append(bson_append_binary(&list, key, -1, BSON_SUBTYPE_UUID,
											cs->excluded[i], IDX_LSID_LEN));
	}
	idx_check_append(bson_append_array_end(&cond, &list));
	idx_check_append(bson_append_document_end(match, &cond));
}

/*
 * Append the $match stage: events of the watched collections (and the
 * heartbeats), a rename onto one of them, and the events that end the
 * stream of a database; and none of a transaction of an excluded session.
 * mongod evaluates a predicate on lsid on the oplog entry, before it
 * builds any event (change_stream_rewrite_helpers.cpp): a transaction of
 * those sessions costs the stream no event at all, its marker included.
 */
static void
append_match(IdxChangeStream *cs, bson_t *pipeline)
{
	bson_t		stage,
				match,
				or,
				clause,
				cond,
				list;
	ListCell   *lc;
	int			i;
	static const char *const fields[] = {"ns.coll", "to.coll"};

	idx_check_append(BSON_APPEND_DOCUMENT_BEGIN(pipeline, "1", &stage));
	idx_check_append(BSON_APPEND_DOCUMENT_BEGIN(&stage, "$match", &match));
	idx_check_append(IDX_BSON_APPEND_ARRAY_BEGIN(&match, "$or", &or));
	for (i = 0; i < 2; i++)
	{
		uint32		k = 0;
		char		key[16];

		snprintf(key, sizeof(key), "%d", i);
		idx_check_append(BSON_APPEND_DOCUMENT_BEGIN(&or, key, &clause));
		idx_check_append(BSON_APPEND_DOCUMENT_BEGIN(&clause, fields[i], &cond));
		idx_check_append(IDX_BSON_APPEND_ARRAY_BEGIN(&cond, "$in", &list));
		foreach(lc, cs->collections)
		{
			snprintf(key, sizeof(key), "%u", k++);
			idx_check_append(BSON_APPEND_UTF8(&list, key, lfirst(lc)));
		}
		snprintf(key, sizeof(key), "%u", k);
		idx_check_append(BSON_APPEND_UTF8(&list, key, IDX_SYNC_COLLECTION));
		idx_check_append(bson_append_array_end(&cond, &list));
		idx_check_append(bson_append_document_end(&clause, &cond));
		idx_check_append(bson_append_document_end(&or, &clause));
	}
	idx_check_append(BSON_APPEND_DOCUMENT_BEGIN(&or, "2", &clause));
	idx_check_append(BSON_APPEND_DOCUMENT_BEGIN(&clause, "operationType", &cond));
	idx_check_append(IDX_BSON_APPEND_ARRAY_BEGIN(&cond, "$in", &list));
	idx_check_append(BSON_APPEND_UTF8(&list, "0", "dropDatabase"));
	idx_check_append(BSON_APPEND_UTF8(&list, "1", "invalidate"));
	idx_check_append(bson_append_array_end(&cond, &list));
	idx_check_append(bson_append_document_end(&clause, &cond));
	idx_check_append(bson_append_document_end(&or, &clause));
	idx_check_append(bson_append_array_end(&match, &or));
	if (cs->nexcluded > 0)
		append_excluded(cs, &match);
	idx_check_append(bson_append_document_end(&stage, &match));
	idx_check_append(bson_append_document_end(pipeline, &stage));
}

/*
 * Append the stage that keeps only what identifies each event (a slim
 * batch, see the file header).
 */
static void
append_slim(bson_t *pipeline, const char *key)
{
	bson_t		stage,
				project;
	int			i;
	static const char *const fields[] = {"operationType", "clusterTime", "ns",
	"to", "documentKey", "txnNumber", "lsid"};

	idx_check_append(BSON_APPEND_DOCUMENT_BEGIN(pipeline, key, &stage));
	idx_check_append(BSON_APPEND_DOCUMENT_BEGIN(&stage, "$project", &project));
	for (i = 0; i < lengthof(fields); i++)
		idx_check_append(BSON_APPEND_INT32(&project, fields[i], 1));
	idx_check_append(bson_append_document_end(&stage, &project));
	idx_check_append(bson_append_document_end(pipeline, &stage));
}

/*
 * Does the server split large events ($changeStreamSplitLargeEvent): a
 * maxWireVersion of 21 (MongoDB 7.0) or later in the hello of the server
 * the stream's commands go to?
 */
static bool
server_splits(IdxChangeStream *cs)
{
	return idx_primary_wire_version(cs->client, cs->servername) >=
		SPLIT_WIRE_VERSION;
}

/*
 * The aggregate command that opens the stream.
 */
static void
build_aggregate(IdxChangeStream *cs, const bson_t *token,
				IdxClusterTime start_at, bson_t *cmd)
{
	bson_t		pipeline,
				stage,
				spec,
				cursor;

	idx_check_append(BSON_APPEND_INT32(cmd, "aggregate", 1));
	idx_check_append(IDX_BSON_APPEND_ARRAY_BEGIN(cmd, "pipeline", &pipeline));
	idx_check_append(BSON_APPEND_DOCUMENT_BEGIN(&pipeline, "0", &stage));
	idx_check_append(BSON_APPEND_DOCUMENT_BEGIN(&stage, "$changeStream", &spec));
	if (token)
		idx_check_append(BSON_APPEND_DOCUMENT(&spec, cs->start_after ?
											  "startAfter" : "resumeAfter",
											  token));
	else if (start_at != 0)
		idx_check_append(idx_sync_append_time(&spec, "startAtOperationTime",
											  start_at));
	idx_check_append(bson_append_document_end(&stage, &spec));
	idx_check_append(bson_append_document_end(&pipeline, &stage));
	append_match(cs, &pipeline);
	if (cs->slim)
		append_slim(&pipeline, "2");
	if (cs->split)
	{
		idx_check_append(BSON_APPEND_DOCUMENT_BEGIN(&pipeline,
													cs->slim ? "3" : "2",
													&stage));
		idx_check_append(bson_append_document_begin(&stage,
													"$changeStreamSplitLargeEvent",
													-1, &spec));
		idx_check_append(bson_append_document_end(&stage, &spec));
		idx_check_append(bson_append_document_end(&pipeline, &stage));
	}
	idx_check_append(bson_append_array_end(cmd, &pipeline));
	idx_check_append(BSON_APPEND_DOCUMENT_BEGIN(cmd, "cursor", &cursor));
	idx_check_append(BSON_APPEND_INT32(&cursor, "batchSize", IDX_CS_BATCH_SIZE));
	idx_check_append(bson_append_document_end(cmd, &cursor));
}

/*
 * Does the failed reply carry the error label "label"?
 */
static bool
has_label(const bson_t *reply, const char *label)
{
	bson_iter_t iter,
				labels;

	if (!bson_iter_init_find(&iter, reply, "errorLabels") ||
		!BSON_ITER_HOLDS_ARRAY(&iter) || !bson_iter_recurse(&iter, &labels))
		return false;
	while (bson_iter_next(&labels))
		if (BSON_ITER_HOLDS_UTF8(&labels) &&
			strcmp(bson_iter_utf8(&labels, NULL), label) == 0)
			return true;
	return false;
}

/*
 * Classify the failure of a command of the stream: history lost,
 * resumable (a getMore's only), refused to the user (Unauthorized: the
 * applier marks its index tables, applier_denied.c), or an ERROR naming
 * the database.  An open that resumes after a token ("resuming") and is
 * told the token is invalid (260) has lost its position as well: looping
 * on it would stop the applier for good.
 */
static IdxCsResult
classify_failure(IdxChangeStream *cs, bson_error_t *error, bson_t *reply,
				 bool get_more, bool resuming)
{
	/* a cancel or terminate that made the I/O fail comes first */
	idx_stream_raise_failure(cs->servername);

	if (error->domain == MONGOC_ERROR_SERVER ||
		error->domain == MONGOC_ERROR_WRITE_CONCERN)
	{
		if (error->code == MONGO_BSON_TOO_LARGE ||
			error->code == MONGO_SPLIT_FAILED)
			return IDX_CS_TOO_LARGE;
		if (error->code == MONGO_CS_HISTORY_LOST ||
			error->code == MONGO_CS_FATAL ||
			error->code == MONGO_CAPPED_POSITION_LOST)
			return IDX_CS_HISTORY_LOST;
		/* a stored position the server does not take as a token */
		if (!get_more && resuming &&
			error->code == MONGO_INVALID_RESUME_TOKEN)
			return IDX_CS_HISTORY_LOST;
		if (error->code == MONGO_UNAUTHORIZED)
			return IDX_CS_DENIED;
		if (get_more && (error->code == MONGO_CURSOR_NOT_FOUND ||
						 has_label(reply, "ResumableChangeStreamError")))
			return IDX_CS_RESUMABLE;
	}
	else if (get_more && (error->domain == MONGOC_ERROR_STREAM ||
						  error->domain == MONGOC_ERROR_SERVER_SELECTION))
		return IDX_CS_RESUMABLE;

	idx_merge_reply_error(error, reply);
	idx_report_error(error, cs->servername,
					 idx_op(IDX_OP_FOLLOW_STREAM, NULL, cs->database));
	return IDX_CS_OK;			/* keep compiler quiet */
}

/*
 * Send a command of the stream within its session, to the server of its
 * aggregate (cs->server_id, if chosen); the reply (also of a failure) is
 * left in *reply.  A cursor lives on the server that opened it: through
 * several mongos, libmongoc would choose any of them for each command,
 * and a getMore sent to another mongos fails with CursorNotFound.
 */
static bool
run_in_session(IdxChangeStream *cs, const bson_t *cmd, bson_t *reply,
			   bson_error_t *error)
{
	bson_t		opts = BSON_INITIALIZER;
	bool		ok;

	if (!mongoc_client_session_append(cs->session, &opts, error))
	{
		bson_destroy(&opts);
		bson_init(reply);
		return false;
	}
	if (cs->server_id != 0)
		idx_check_append(BSON_APPEND_INT32(&opts, "serverId",
										   (int32) cs->server_id));
	ok = mongoc_client_command_with_opts(cs->client, cs->database, cmd, NULL,
										 &opts, reply, error);
	bson_destroy(&opts);
	CHECK_FOR_INTERRUPTS();
	return ok;
}

/*
 * Refuse a reply of the stream of "cs": "what" says what is wrong with it.
 */
static void
refuse_reply(IdxChangeStream *cs, const char *what)
{
	ereport(ERROR,
			(errcode(ERRCODE_PROTOCOL_VIOLATION),
			 errmsg("the change stream of database \"%s\" on server \"%s\" returned %s",
					cs->database, cs->servername, what),
			 errdetail("The applier cannot tell which index table entries the change needs; the index tables of the stream are not current until it can.")));
}

/*
 * The latest cluster time a reply reports ($clusterTime.clusterTime or
 * operationTime), or 0 if it reports none.
 */
static IdxClusterTime
reply_cluster_time(const bson_t *reply)
{
	bson_iter_t iter;
	IdxClusterTime t = 0;

	if (bson_iter_init(&iter, reply) &&
		bson_iter_find_descendant(&iter, "$clusterTime.clusterTime", &iter))
		t = idx_sync_iter_time(&iter);
	if (bson_iter_init_find(&iter, reply, "operationTime"))
		t = Max(t, idx_sync_iter_time(&iter));
	return t;
}

/*
 * Is the value at "iter" a resume token: a document with a "_data" string
 * of hexadecimal digits (and, from old servers, "_typeBits" binary data)?
 */
static bool
is_token(const bson_iter_t *iter)
{
	bson_iter_t fields;
	bool		data = false;

	if (!BSON_ITER_HOLDS_DOCUMENT(iter) || !bson_iter_recurse(iter, &fields))
		return false;
	while (bson_iter_next(&fields))
	{
		const char *key = bson_iter_key(&fields);

		if (strcmp(key, "_data") == 0 && BSON_ITER_HOLDS_UTF8(&fields))
		{
			uint32_t	len;
			const char *hex = bson_iter_utf8(&fields, &len);

			data = len > 0 && len % 2 == 0 && strspn(hex, "0123456789abcdefABCDEF") == len;
			if (!data)
				return false;
		}
		else if (strcmp(key, "_typeBits") != 0 ||
				 !BSON_ITER_HOLDS_BINARY(&fields))
			return false;
	}
	return data;
}

/*
 * Is field "path" of "event" a string?  Also true if it is absent and
 * "optional".
 */
static bool
has_string(const bson_t *event, const char *path, bool optional)
{
	bson_iter_t iter,
				found;

	if (!bson_iter_init(&iter, event) ||
		!bson_iter_find_descendant(&iter, path, &found))
		return optional;
	return BSON_ITER_HOLDS_UTF8(&found);
}

/*
 * What is wrong with the transaction fields of "event" (lsid.id binary
 * data and txnNumber a number, both or neither), or NULL.
 */
static const char *
bad_txn_fields(const bson_t *event)
{
	bson_iter_t iter,
				id;
	bool		lsid = bson_iter_init_find(&iter, event, "lsid");
	bool		txn;

	if (lsid && (!BSON_ITER_HOLDS_DOCUMENT(&iter) ||
				 !bson_iter_recurse(&iter, &id) ||
				 !bson_iter_find(&id, "id") || !BSON_ITER_HOLDS_BINARY(&id)))
		return "an event with a malformed lsid";
	txn = bson_iter_init_find(&iter, event, "txnNumber");
	if (txn && !BSON_ITER_HOLDS_NUMBER(&iter))
		return "an event with a malformed txnNumber";
	if (lsid != txn)
		return "an event with only one of lsid and txnNumber";
	return NULL;
}

/*
 * What is wrong with fragment "event" of a split event (see
 * applier_split.c; its fields are checked once it is whole), or NULL.
 */
static const char *
bad_fragment(const bson_t *event, IdxClusterTime reply_time)
{
	bson_iter_t iter,
				split;
	int			numbers = 0;

	if (!bson_iter_init_find(&iter, event, "splitEvent") ||
		!BSON_ITER_HOLDS_DOCUMENT(&iter) || !bson_iter_recurse(&iter, &split))
		return "a fragment of an event without a valid splitEvent";
	while (bson_iter_next(&split))
		if ((strcmp(bson_iter_key(&split), "fragment") == 0 ||
			 strcmp(bson_iter_key(&split), "of") == 0) &&
			BSON_ITER_HOLDS_NUMBER(&split))
			numbers++;
	if (numbers != 2)
		return "a fragment of an event without a valid splitEvent";
	if (bson_iter_init_find(&iter, event, "clusterTime") &&
		(!BSON_ITER_HOLDS_TIMESTAMP(&iter) ||
		 idx_sync_iter_time(&iter) > reply_time))
		return "an event without a valid clusterTime";
	return NULL;
}

/*
 * What is wrong with "event" of a reply that reports cluster time
 * "reply_time", or NULL if nothing is.  A fragment of a split event is
 * checked as one; a split event put together ("whole") has no _id.
 */
static const char *
bad_event(const bson_t *event, IdxClusterTime reply_time, bool whole)
{
	bson_iter_t iter,
				found;
	const char *op = NULL;
	IdxClusterTime time;
	bool		document_event;
	int			i;

	if (!whole &&
		(!bson_iter_init_find(&iter, event, "_id") || !is_token(&iter)))
		return "an event without a valid resume token";
	if (!whole && bson_iter_init_find(&iter, event, "splitEvent"))
		return bad_fragment(event, reply_time);
	if (bson_iter_init_find(&iter, event, "operationType") &&
		BSON_ITER_HOLDS_UTF8(&iter))
		op = bson_iter_utf8(&iter, NULL);
	for (i = 0; op != NULL && i < lengthof(known_operations); i++)
		if (strcmp(op, known_operations[i]) == 0)
			break;
	if (op == NULL || i == lengthof(known_operations))
		return "an event of an unknown operationType";
	if (!bson_iter_init_find(&iter, event, "clusterTime") ||
		!BSON_ITER_HOLDS_TIMESTAMP(&iter) ||
		(time = idx_sync_iter_time(&iter)) == 0)
		return "an event without a valid clusterTime";
	if (time > reply_time)
		return "an event whose clusterTime is later than the cluster time of its reply";
	if (strcmp(op, "invalidate") == 0)
		return NULL;
	if (!bson_iter_init_find(&iter, event, "ns") ||
		!BSON_ITER_HOLDS_DOCUMENT(&iter) ||
		!has_string(event, "ns.db", false) ||
		!has_string(event, "ns.coll", strcmp(op, "dropDatabase") == 0))
		return "an event without a valid namespace";
	if (strcmp(op, "rename") == 0 &&
		(!has_string(event, "to.db", false) ||
		 !has_string(event, "to.coll", false)))
		return "a rename event without a valid target namespace";
	document_event = strcmp(op, "insert") == 0 || strcmp(op, "update") == 0 ||
		strcmp(op, "replace") == 0 || strcmp(op, "delete") == 0;
	if (document_event &&
		(!bson_iter_init(&iter, event) ||
		 !bson_iter_find_descendant(&iter, "documentKey._id", &found)))
		return "a document event without documentKey._id";
	return bad_txn_fields(event);
}

/*
 * Check a reply of the stream of "cs" (whose events are in
 * cursor.<batch_field>) before anything of it is used.
 */
static void
check_reply(IdxChangeStream *cs, const bson_t *reply, const char *batch_field)
{
	IdxClusterTime reply_time = reply_cluster_time(reply);
	bson_iter_t iter,
				events;
	char		path[32];

	cs->reply_time = reply_time;

	if (reply_time == 0)
		refuse_reply(cs, "a reply without a cluster time");
	if (bson_iter_init(&iter, reply) &&
		bson_iter_find_descendant(&iter, "cursor.postBatchResumeToken", &iter))
	{
		bson_t		token;
		const uint8_t *data;
		uint32_t	len;

		if (!is_token(&iter))
			refuse_reply(cs, "an invalid postBatchResumeToken");
		bson_iter_document(&iter, &len, &data);
		if (!bson_init_static(&token, data, len) ||
			idx_cs_token_time(&token) > Max(reply_time, cs->start_at))
			refuse_reply(cs, "a postBatchResumeToken later than the cluster time of its reply");
	}
	snprintf(path, sizeof(path), "cursor.%s", batch_field);
	if (!bson_iter_init(&iter, reply) ||
		!bson_iter_find_descendant(&iter, path, &iter))
		return;					/* no batch: take_reply's checks */
	if (!BSON_ITER_HOLDS_ARRAY(&iter) || !bson_iter_recurse(&iter, &events))
		refuse_reply(cs, "a batch that is not an array");
	while (bson_iter_next(&events))
	{
		const uint8_t *data;
		uint32_t	len;
		bson_t		event;
		const char *what;

		if (!BSON_ITER_HOLDS_DOCUMENT(&events))
			refuse_reply(cs, "an event that is not a document");
		bson_iter_document(&events, &len, &data);
		if (!bson_init_static(&event, data, len) ||
			!bson_validate(&event, BSON_VALIDATE_NONE, NULL))
			refuse_reply(cs, "a malformed event");
		if ((what = bad_event(&event, reply_time, false)) != NULL)
			refuse_reply(cs, what);
	}
}

/*
 * Check a split event put together from its fragments (applier_split.c),
 * whose fragments' times were checked with their replies.
 */
void
idx_cs_check_whole(IdxChangeStream *cs, const bson_t *event)
{
	const char *what = bad_event(event, PG_UINT64_MAX, true);

	if (what != NULL)
		refuse_reply(cs, what);
}

/*
 * Take the cursor of a successful reply: id, batch and PBRT.  The reply
 * is kept (it owns the batch).
 */
static void
take_reply(IdxChangeStream *cs, bson_t *reply, const char *batch_field)
{
	bson_iter_t iter,
				cursor;

	check_reply(cs, reply, batch_field);
	if (cs->reply)
		bson_destroy(cs->reply);
	cs->reply = bson_copy(reply);
	cs->batch_field = batch_field;
	if (!bson_iter_init_find(&iter, cs->reply, "cursor") ||
		!BSON_ITER_HOLDS_DOCUMENT(&iter) || !bson_iter_recurse(&iter, &cursor))
		ereport(ERROR,
				(errcode(ERRCODE_FDW_ERROR),
				 errmsg("the change stream of database \"%s\" on server \"%s\" returned no cursor",
						cs->database, cs->servername)));
	while (bson_iter_next(&cursor))
	{
		const char *key = bson_iter_key(&cursor);

		if (strcmp(key, "id") == 0 && BSON_ITER_HOLDS_NUMBER(&cursor))
			cs->cursor_id = bson_iter_as_int64(&cursor);
		else if (strcmp(key, "postBatchResumeToken") == 0 &&
				 BSON_ITER_HOLDS_DOCUMENT(&cursor))
		{
			const uint8_t *data;
			uint32_t	len;
			bson_t		token;

			bson_iter_document(&cursor, &len, &data);
			if (!bson_init_static(&token, data, len))
				continue;		/* not reached: check_reply refused it */
			if (cs->token && !bson_equal(cs->token, &token))
			{
				cs->token_moved = true;
				cs->start_after = false;	/* past the invalidate */
			}
			if (cs->token)
				bson_destroy(cs->token);
			cs->token = bson_copy(&token);
			cs->token_time = idx_cs_token_time(cs->token);
		}
	}
}

/*
 * Send the aggregate that opens the stream (slim or not, as cs->slim
 * says).  On a sharded cluster every later command of the stream goes to
 * the mongos that opens it: a mongos keeps the cursor of a change stream
 * for itself (another answers a getMore with CursorNotFound), and
 * libmongoc picks any mongos of the URI for each command, so with several
 * the stream's getMores would fail half of the time and the stream be
 * reopened each time.  Elsewhere libmongoc chooses as before.
 */
static IdxCsResult
open_once(IdxChangeStream *cs, const bson_t *token, IdxClusterTime start_at)
{
	bson_t		cmd = BSON_INITIALIZER;
	bson_t		reply;
	bson_error_t error;
	mongoc_server_description_t *sd;
	IdxCsResult r;
	bool		ok;

	idx_cs_close(cs);
	cs->start_at = token ? 0 : start_at;
	cs->split = server_splits(cs);
	cs->session = mongoc_client_start_session(cs->client, NULL, &error);
	if (cs->session == NULL)
		idx_report_error(&error, cs->servername,
						 idx_op(IDX_OP_START_SESSION, NULL, NULL));
	sd = mongoc_client_select_server(cs->client, true, NULL, &error);
	if (sd == NULL)
	{
		bson_init(&reply);
		r = classify_failure(cs, &error, &reply, false, token != NULL);
		bson_destroy(&reply);
		return r;
	}
	if (strcmp(mongoc_server_description_type(sd), "Mongos") == 0)
		cs->server_id = mongoc_server_description_id(sd);
	mongoc_server_description_destroy(sd);
	build_aggregate(cs, token, start_at, &cmd);
	ok = run_in_session(cs, &cmd, &reply, &error);
	bson_destroy(&cmd);
	if (!ok)
	{
		r = classify_failure(cs, &error, &reply, false, token != NULL);
		bson_destroy(&reply);
		return r;
	}
	cs->token_moved = false;
	if (cs->token)
		bson_destroy(cs->token);
	cs->token = token ? bson_copy(token) : NULL;
	cs->token_time = 0;
	take_reply(cs, &reply, "firstBatch");
	bson_destroy(&reply);
	return IDX_CS_OK;
}

/*
 * Open the stream (see change_stream.h); slim if an event is too large
 * (see the file header).
 */
IdxCsResult
idx_cs_open(IdxChangeStream *cs, const bson_t *token, IdxClusterTime start_at)
{
	IdxCsResult r;

	cs->slim = false;
	r = open_once(cs, token, start_at);
	if (r == IDX_CS_TOO_LARGE)
	{
		cs->slim = true;
		r = open_once(cs, token, start_at);
	}
	return r;
}

/*
 * Open the stream again after its token, slim or not (see the file
 * header); the caller's getMore gets the first batch.
 */
static IdxCsResult
reopen_after_token(IdxChangeStream *cs, bool slim)
{
	bson_t	   *token;
	IdxCsResult r;

	if (cs->token == NULL)
		return IDX_CS_TOO_LARGE;	/* nothing to resume after */
	token = bson_copy(cs->token);
	cs->slim = slim;
	r = open_once(cs, token, 0);	/* keeps cs->start_after */
	bson_destroy(token);
	return r;
}

/*
 * One getMore, waiting at most max_time_ms for events.  After a slim
 * batch, the stream is opened whole again after its token instead; an
 * event too large to send makes the next batch slim.
 */
IdxCsResult
idx_cs_get_more(IdxChangeStream *cs, int max_time_ms)
{
	bson_t		cmd = BSON_INITIALIZER;
	bson_t		reply;
	bson_error_t error;
	bool		ok;

	if (cs->cursor_id == 0)
		return IDX_CS_CLOSED;
	if (cs->slim)
	{
		IdxCsResult r = reopen_after_token(cs, false);

		if (r == IDX_CS_TOO_LARGE)
			r = reopen_after_token(cs, true);
		return r;
	}
	idx_check_append(BSON_APPEND_INT64(&cmd, "getMore", cs->cursor_id));
	idx_check_append(BSON_APPEND_UTF8(&cmd, "collection", "$cmd.aggregate"));
	idx_check_append(BSON_APPEND_INT64(&cmd, "batchSize", IDX_CS_BATCH_SIZE));
	idx_check_append(BSON_APPEND_INT64(&cmd, "maxTimeMS", Max(max_time_ms, 1)));
	ok = run_in_session(cs, &cmd, &reply, &error);
	bson_destroy(&cmd);
	if (!ok)
	{
		IdxCsResult r = classify_failure(cs, &error, &reply, true, true);

		bson_destroy(&reply);
		cs->cursor_id = 0;		/* a failed getMore kills the cursor */
		if (r == IDX_CS_TOO_LARGE)
			r = reopen_after_token(cs, true);
		return r;
	}
	take_reply(cs, &reply, "nextBatch");
	bson_destroy(&reply);
	return IDX_CS_OK;
}

/*
 * Set up "iter" over the events of the current batch (none if there is no
 * batch).
 */
void
idx_cs_batch(IdxChangeStream *cs, bson_iter_t *iter)
{
	bson_iter_t found;
	char		path[32];

	memset(iter, 0, sizeof(*iter));
	if (cs->reply == NULL)
		return;
	snprintf(path, sizeof(path), "cursor.%s", cs->batch_field);
	if (bson_iter_init(&found, cs->reply) &&
		bson_iter_find_descendant(&found, path, iter) &&
		BSON_ITER_HOLDS_ARRAY(iter) && bson_iter_recurse(iter, &found))
		*iter = found;
	else
		memset(iter, 0, sizeof(*iter));
}

/*
 * The next event of the batch (a static view into the kept reply).
 */
bool
idx_cs_next_event(bson_iter_t *iter, bson_t *event)
{
	while (iter->raw != NULL && bson_iter_next(iter))
	{
		const uint8_t *data;
		uint32_t	len;

		if (!BSON_ITER_HOLDS_DOCUMENT(iter))
			continue;
		bson_iter_document(iter, &len, &data);
		if (bson_init_static(event, data, len))
			return true;
	}
	return false;
}

/*
 * Kill the server cursor (best effort: the server forgets it anyway after
 * its idle timeout) and end the session.
 */
void
idx_cs_close(IdxChangeStream *cs)
{
	if (cs->cursor_id != 0 && cs->session != NULL &&
		!idx_stream_client_broken(cs->client))
	{
		bson_t		cmd = BSON_INITIALIZER;
		bson_t		cursors;
		bson_t		reply;
		bson_error_t error;

		idx_check_append(BSON_APPEND_UTF8(&cmd, "killCursors", "$cmd.aggregate"));
		idx_check_append(IDX_BSON_APPEND_ARRAY_BEGIN(&cmd, "cursors", &cursors));
		idx_check_append(BSON_APPEND_INT64(&cursors, "0", cs->cursor_id));
		idx_check_append(bson_append_array_end(&cmd, &cursors));
		(void) run_in_session(cs, &cmd, &reply, &error);
		bson_destroy(&reply);
		bson_destroy(&cmd);
	}
	cs->cursor_id = 0;
	cs->server_id = 0;
	if (cs->session)
		mongoc_client_session_destroy(cs->session);
	cs->session = NULL;
	if (cs->reply)
		bson_destroy(cs->reply);
	cs->reply = NULL;
}

/*
 * The clusterTime of an event.
 */
IdxClusterTime
idx_cs_event_time(const bson_t *event)
{
	bson_iter_t iter;

	if (!bson_iter_init_find(&iter, event, "clusterTime"))
		return 0;
	return idx_sync_iter_time(&iter);
}

/*
 * Wait until the primary's majority commit point has reached cluster time
 * "ct": everything the primary had at "ct" can no longer be rolled back.
 * A read with readConcern majority and afterClusterTime "ct" returns only
 * then (mongod waits for its majority snapshot before it reads); it reads
 * nothing (an _id no document of idxtable.sync has).  An ERROR after
 * "timeout_ms" (maxTimeMS).
 */
void
idx_cs_wait_majority(mongoc_client_t *client, const char *servername,
					 const char *database, IdxClusterTime ct, int timeout_ms)
{
	bson_t		cmd = BSON_INITIALIZER;
	bson_t		child;
	bson_t		reply;

	idx_check_append(BSON_APPEND_UTF8(&cmd, "find", IDX_SYNC_COLLECTION));
	idx_check_append(BSON_APPEND_DOCUMENT_BEGIN(&cmd, "filter", &child));
	idx_check_append(BSON_APPEND_UTF8(&child, "_id", "majority:wait"));
	idx_check_append(bson_append_document_end(&cmd, &child));
	idx_check_append(BSON_APPEND_INT32(&cmd, "limit", 1));
	idx_check_append(BSON_APPEND_BOOL(&cmd, "singleBatch", true));
	idx_check_append(BSON_APPEND_DOCUMENT_BEGIN(&cmd, "readConcern", &child));
	idx_check_append(BSON_APPEND_UTF8(&child, "level", "majority"));
	idx_check_append(idx_sync_append_time(&child, "afterClusterTime", ct));
	idx_check_append(bson_append_document_end(&cmd, &child));
	idx_check_append(BSON_APPEND_INT32(&cmd, "maxTimeMS", timeout_ms));
	idx_run_command(client, servername, database, &cmd, &reply,
					idx_op(IDX_OP_CONFIRM_DURABLE, NULL, NULL));
	bson_destroy(&cmd);
	bson_destroy(&reply);
}

/*
 * The cluster time at the start of a token's _data (see the file header),
 * or 0.
 */
IdxClusterTime
idx_cs_token_time(const bson_t *token)
{
	bson_iter_t iter;
	const char *data;
	uint32_t	len;
	uint64		ct = 0;
	int			i;

	if (!bson_iter_init_find(&iter, token, "_data") ||
		!BSON_ITER_HOLDS_UTF8(&iter))
		return 0;
	data = bson_iter_utf8(&iter, &len);
	if (len < 18 || strncmp(data, "82", 2) != 0)
		return 0;
	for (i = 2; i < 18; i++)
	{
		char		c = data[i];
		int			v;

		if (c >= '0' && c <= '9')
			v = c - '0';
		else if (c >= 'A' && c <= 'F')
			v = c - 'A' + 10;
		else if (c >= 'a' && c <= 'f')
			v = c - 'a' + 10;
		else
			return 0;
		ct = (ct << 4) | (uint64) v;
	}
	return ct;
}
