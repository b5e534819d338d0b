/*-------------------------------------------------------------------------
 *
 * c_smoke.c
 *		  libmongoc smoke test against the test server.
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  test/server/c_smoke.c
 *
 * Connects with the URI given as argv[1] (e.g.
 * mongodb://user:pw@127.0.0.1:PORT/?replicaSet=rs0&authSource=admin), pings,
 * inserts documents, reads them back through a cursor over several batches,
 * commits one transaction and aborts another, and checks that a session keeps
 * and gossips $clusterTime, and follows a change stream (an insert by another
 * client, then a resume from the token, as the FDW's applier will).  Prints "c_smoke: ok" and exits 0 when every step
 * behaves as with a real mongod; otherwise prints the failing step and exits 1.
 *
 * Build: gcc c_smoke.c $(pkg-config --cflags --libs libmongoc-1.0)
 *
 *-------------------------------------------------------------------------
 */
#include <mongoc/mongoc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NDOCS 250

static void
fail(const char *step, const bson_error_t *error)
{
	fprintf(stderr, "c_smoke: %s failed: %s (domain %u, code %u)\n", step,
			error ? error->message : "unexpected result",
			error ? error->domain : 0, error ? error->code : 0);
	exit(1);
}

/* Number of documents matching {tag: tag}, read in _id order through a cursor of small batches. */
static int64_t
count_by_cursor(mongoc_collection_t *coll, const char *tag)
{
	bson_t	   *filter = BCON_NEW("tag", BCON_UTF8(tag));
	bson_t	   *opts = BCON_NEW("batchSize", BCON_INT32(40), "sort", "{", "_id", BCON_INT32(1), "}");
	mongoc_cursor_t *cursor = mongoc_collection_find_with_opts(coll, filter, opts, NULL);
	const bson_t *doc;
	bson_error_t error;
	int64_t		n = 0;
	int32_t		previous = -1;
	bson_iter_t iter;

	while (mongoc_cursor_next(cursor, &doc))
	{
		if (!bson_iter_init_find(&iter, doc, "_id") || bson_iter_int32(&iter) <= previous)
			fail("cursor order", NULL);
		previous = bson_iter_int32(&iter);
		n++;
	}
	if (mongoc_cursor_error(cursor, &error))
		fail("cursor", &error);
	mongoc_cursor_destroy(cursor);
	bson_destroy(opts);
	bson_destroy(filter);
	return n;
}

static void
ping(mongoc_client_t *client)
{
	bson_t	   *cmd = BCON_NEW("ping", BCON_INT32(1));
	bson_error_t error;

	if (!mongoc_client_command_simple(client, "admin", cmd, NULL, NULL, &error))
		fail("ping", &error);
	bson_destroy(cmd);
}

static void
insert_docs(mongoc_collection_t *coll)
{
	bson_t	   *docs[NDOCS];
	bson_error_t error;
	bson_t		reply;

	for (int i = 0; i < NDOCS; i++)
		docs[i] = BCON_NEW("_id", BCON_INT32(i), "tag", BCON_UTF8("bulk"), "v", BCON_DOUBLE(i * 0.5));
	if (!mongoc_collection_insert_many(coll, (const bson_t **) docs, NDOCS, NULL, &reply, &error))
		fail("insert_many", &error);
	bson_destroy(&reply);
	for (int i = 0; i < NDOCS; i++)
		bson_destroy(docs[i]);

	/* a duplicate _id must fail with code 11000 */
	{
		bson_t	   *dup = BCON_NEW("_id", BCON_INT32(0));

		if (mongoc_collection_insert_one(coll, dup, NULL, NULL, &error) || error.code != 11000)
			fail("duplicate key detection", &error);
		bson_destroy(dup);
	}
}

/* Insert one document tagged `tag` inside a transaction, then commit or abort it. */
static void
transaction(mongoc_client_t *client, mongoc_collection_t *coll, const char *tag, bool commit)
{
	bson_error_t error;
	mongoc_client_session_t *session = mongoc_client_start_session(client, NULL, &error);
	bson_t		opts = BSON_INITIALIZER;
	bson_t	   *doc = BCON_NEW("_id", BCON_INT32(commit ? 1000 : 1001), "tag", BCON_UTF8(tag));

	if (!session)
		fail("start_session", &error);
	if (!mongoc_client_session_start_transaction(session, NULL, &error))
		fail("start_transaction", &error);
	if (!mongoc_client_session_append(session, &opts, &error))
		fail("session_append", &error);
	if (!mongoc_collection_insert_one(coll, doc, &opts, NULL, &error))
		fail("insert in transaction", &error);
	if (commit)
	{
		if (!mongoc_client_session_commit_transaction(session, NULL, &error))
			fail("commit_transaction", &error);
	}
	else if (!mongoc_client_session_abort_transaction(session, &error))
		fail("abort_transaction", &error);
	bson_destroy(doc);
	bson_destroy(&opts);
	mongoc_client_session_destroy(session);
}

/* The reply's $clusterTime seconds (0 when absent). */
static uint32_t
reply_cluster_seconds(const bson_t *reply)
{
	bson_iter_t iter;
	uint32_t	t = 0,
				i = 0;

	if (bson_iter_init(&iter, reply) &&
		bson_iter_find_descendant(&iter, "$clusterTime.clusterTime", &iter) &&
		BSON_ITER_HOLDS_TIMESTAMP(&iter))
		bson_iter_timestamp(&iter, &t, &i);
	return t;
}

/* A session keeps the $clusterTime and operationTime of replies, and gossips its cluster time back:
 * after advancing it by 1000 s, the server's next reply carries at least that time. */
static void
cluster_time(mongoc_client_t *client)
{
	bson_error_t error;
	mongoc_client_session_t *session = mongoc_client_start_session(client, NULL, &error);
	bson_t	   *ping = BCON_NEW("ping", BCON_INT32(1));
	bson_t		opts = BSON_INITIALIZER;
	bson_t		reply;
	bson_t	   *future;
	const bson_t *kept;
	static const uint8_t zero_hash[20];
	uint32_t	t = 0,
				i = 0;

	if (!session || !mongoc_client_session_append(session, &opts, &error))
		fail("start_session", &error);
	if (!mongoc_client_command_with_opts(client, "admin", ping, NULL, &opts, &reply, &error))
		fail("ping with session", &error);
	bson_destroy(&reply);
	kept = mongoc_client_session_get_cluster_time(session);
	mongoc_client_session_get_operation_time(session, &t, &i);
	if (!kept || t == 0)
		fail("session keeps $clusterTime and operationTime", NULL);
	future = BCON_NEW("clusterTime", BCON_TIMESTAMP(t + 1000, 1),
					  "signature", "{",
					  "hash", BCON_BIN(BSON_SUBTYPE_BINARY, zero_hash, sizeof(zero_hash)),
					  "keyId", BCON_INT64(0), "}");
	mongoc_client_session_advance_cluster_time(session, future);
	if (!mongoc_client_command_with_opts(client, "admin", ping, NULL, &opts, &reply, &error))
		fail("ping with advanced cluster time", &error);
	if (reply_cluster_seconds(&reply) < t + 1000)
		fail("$clusterTime gossiped back to the server", NULL);
	bson_destroy(&reply);
	bson_destroy(future);
	bson_destroy(ping);
	bson_destroy(&opts);
	mongoc_client_session_destroy(session);
}

/* The next event of a change stream within about 5 s (NULL if none came); a stream error fails. */
static const bson_t *
next_event(mongoc_change_stream_t *stream)
{
	const bson_t *event;
	const bson_t *error_doc;
	bson_error_t error;

	for (int tries = 0; tries < 25; tries++)
	{
		if (mongoc_change_stream_next(stream, &event))
			return event;
		if (mongoc_change_stream_error_document(stream, &error, &error_doc))
			fail("change stream next", &error);
	}
	return NULL;
}

/* True if `event` is an insert of the document with _id `id`. */
static bool
is_insert_of(const bson_t *event, int32_t id)
{
	bson_iter_t iter;

	if (!event || !bson_iter_init_find(&iter, event, "operationType") || !BSON_ITER_HOLDS_UTF8(&iter) ||
		strcmp(bson_iter_utf8(&iter, NULL), "insert") != 0)
		return false;
	return bson_iter_init(&iter, event) && bson_iter_find_descendant(&iter, "documentKey._id", &iter) &&
		BSON_ITER_HOLDS_INT32(&iter) && bson_iter_int32(&iter) == id;
}

/* Insert {_id: id} through `client` (another client than the stream's). */
static void
insert_id(mongoc_client_t *client, int32_t id)
{
	mongoc_collection_t *coll = mongoc_client_get_collection(client, "c_smoke", "cs");
	bson_t	   *doc = BCON_NEW("_id", BCON_INT32(id));
	bson_error_t error;

	if (!mongoc_collection_insert_one(coll, doc, NULL, NULL, &error))
		fail("insert for the change stream", &error);
	bson_destroy(doc);
	mongoc_collection_destroy(coll);
}

/* mongoc_collection_watch: an idle next() returns false without an error but leaves a resume token (the
 * postBatchResumeToken); an insert by another client arrives; a new stream opened with resumeAfter the
 * saved token sees only what came after it. */
static void
change_stream(mongoc_client_t *client, const char *uri)
{
	mongoc_client_t *other = mongoc_client_new(uri);
	mongoc_collection_t *coll = mongoc_client_get_collection(client, "c_smoke", "cs");
	bson_t	   *pipeline = bson_new();
	bson_t	   *opts = BCON_NEW("maxAwaitTimeMS", BCON_INT64(200));
	mongoc_change_stream_t *stream = mongoc_collection_watch(coll, pipeline, opts);
	const bson_t *event;
	const bson_t *error_doc;
	bson_error_t error;
	bson_t	   *token;

	if (!other || mongoc_change_stream_error_document(stream, &error, &error_doc))
		fail("collection_watch", &error);
	if (mongoc_change_stream_next(stream, &event) || !mongoc_change_stream_get_resume_token(stream))
		fail("idle change stream keeps a postBatchResumeToken", NULL);
	insert_id(other, 1);
	if (!is_insert_of(next_event(stream), 1))
		fail("change stream sees another client's insert", NULL);
	token = bson_copy(mongoc_change_stream_get_resume_token(stream));
	mongoc_change_stream_destroy(stream);
	insert_id(other, 2);
	bson_destroy(opts);
	opts = BCON_NEW("maxAwaitTimeMS", BCON_INT64(200), "resumeAfter", BCON_DOCUMENT(token));
	stream = mongoc_collection_watch(coll, pipeline, opts);
	if (!is_insert_of(next_event(stream), 2))
		fail("change stream resumed from its token", NULL);
	mongoc_change_stream_destroy(stream);
	bson_destroy(token);
	bson_destroy(opts);
	bson_destroy(pipeline);
	mongoc_collection_destroy(coll);
	mongoc_client_destroy(other);
}

int
main(int argc, char **argv)
{
	mongoc_client_t *client;
	mongoc_collection_t *coll;
	bson_error_t error;

	if (argc != 2)
	{
		fprintf(stderr, "usage: %s MONGODB_URI\n", argv[0]);
		return 2;
	}
	mongoc_init();
	client = mongoc_client_new(argv[1]);
	if (!client)
		fail("parse URI", NULL);
	ping(client);
	cluster_time(client);
	coll = mongoc_client_get_collection(client, "c_smoke", "items");
	if (!mongoc_collection_drop(coll, &error) && error.code != 26)
		fail("drop", &error);
	insert_docs(coll);
	if (count_by_cursor(coll, "bulk") != NDOCS)
		fail("read back over several batches", NULL);
	transaction(client, coll, "committed", true);
	if (count_by_cursor(coll, "committed") != 1)
		fail("committed transaction visible", NULL);
	transaction(client, coll, "aborted", false);
	if (count_by_cursor(coll, "aborted") != 0)
		fail("aborted transaction invisible", NULL);
	change_stream(client, argv[1]);
	mongoc_collection_destroy(coll);
	mongoc_client_destroy(client);
	mongoc_cleanup();
	printf("c_smoke: ok\n");
	return 0;
}
