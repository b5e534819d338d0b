/*-------------------------------------------------------------------------
 *
 * applier_position.c
 *		  The stored position of the applier's stream on one MongoDB
 *		  database, and the heartbeats that move the stream on when a
 *		  backend waits for it.
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/applier/applier_position.c
 *
 * Position.  The PBRT after an applied batch, with the time applied
 * through and the definition_ids of the indexes it covers, is upserted
 * (w: majority) into <db>.idxtable.positions, a collection the stream does
 * not watch: at most every second while events are applied, every ten
 * seconds while only the PBRT moves, and before the stream is closed.  A
 * restart resumes after it (applier_stream.c).  While a repair has left
 * young claims to writes in flight (index_claims.h, applier_apply.c), no
 * position is stored: a restart applies their batch again, and so checks
 * those facts again.  Nor is one stored inside a split event
 * (applier_split.c), nor, unless the stream is to be closed, while facts
 * wait for their transaction's marker (applier_stream.c's header): those
 * are applied first when it is.
 *
 * Heartbeats.  A backend that waits for a time the stream has not applied
 * through raises its slot's "requested" time; the applier then writes a
 * heartbeat whose event the stream passes at once, or first looks for the
 * backend's own wake-up.  How the heartbeat's time counts, on a replica
 * set and through mongos, is in applier_stream.c's header ("Applied
 * through").
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "utils/timestamp.h"

#include "applier/applier.h"
#include "core/connection.h"
#include "core/convert.h"
#include "core/mongoc_compat.h"
#include "core/protocol_read.h"
#include "sync/cluster_time.h"

/* The collection of the positions in each MongoDB database */
#define POSITIONS_COLLECTION	"idxtable.positions"

/* Intervals (ms) between stored positions, and between heartbeats */
#define SAVE_AFTER_EVENTS_MS	1000
#define SAVE_IDLE_MS			10000
#define HEARTBEAT_RETRY_MS		1000


/*
 * The strings of the array at "iter" (a view), appended to "list".
 */
static List *
string_list(bson_iter_t *iter, List *list)
{
	bson_iter_t items;

	if (BSON_ITER_HOLDS_ARRAY(iter) && bson_iter_recurse(iter, &items))
		while (bson_iter_next(&items))
			if (BSON_ITER_HOLDS_UTF8(&items))
				list = lappend(list, pstrdup(bson_iter_utf8(&items, NULL)));
	return list;
}

/*
 * Read the stored position of the stream of "s": its token (caller
 * destroys), the time applied through, the definition_ids it covers and
 * the fact collections its stream watched (*watched is NIL if the
 * position does not say); *other_server if it was stored through a
 * connection to another server (the server's uri or database changed to
 * a copy of the data).
 */
bool
idx_applier_read_position(AppStream *s, bson_t **token,
						  IdxClusterTime *covered, List **followed,
						  List **watched, bool *start_after,
						  bool *other_server)
{
	mongoc_collection_t *coll;
	mongoc_cursor_t *cursor;
	bson_t		filter = BSON_INITIALIZER;
	bson_t		opts = BSON_INITIALIZER;
	const bson_t *doc;
	bool		found = false;

	coll = mongoc_client_get_collection(applier.client, s->database,
										POSITIONS_COLLECTION);
	idx_check_append(BSON_APPEND_UTF8(&filter, "_id", applier.key));
	idx_check_append(BSON_APPEND_INT64(&opts, "limit", 1));
	cursor = mongoc_collection_find_with_opts(coll, &filter, &opts,
											  idx_primary_read_prefs());
	bson_destroy(&filter);
	bson_destroy(&opts);
	*followed = NIL;
	*watched = NIL;
	if (mongoc_cursor_next(cursor, &doc))
	{
		bson_iter_t iter;

		if (bson_iter_init_find(&iter, doc, "token") &&
			BSON_ITER_HOLDS_DOCUMENT(&iter))
		{
			const uint8_t *data;
			uint32_t	len;

			bson_iter_document(&iter, &len, &data);
			*token = bson_new_from_data(data, len);
			found = *token != NULL;
		}
		if (bson_iter_init_find(&iter, doc, "clusterTime"))
			*covered = idx_sync_iter_time(&iter);
		*start_after = bson_iter_init_find(&iter, doc, "startAfter") &&
			bson_iter_as_bool(&iter);
		/* written through another server's options: a copy of the data */
		*other_server = bson_iter_init_find(&iter, doc, "server") &&
			(!BSON_ITER_HOLDS_INT64(&iter) ||
			 bson_iter_int64(&iter) != (int64) applier.server_hash);
		if (bson_iter_init_find(&iter, doc, "indexes"))
			*followed = string_list(&iter, NIL);
		if (bson_iter_init_find(&iter, doc, "collections"))
			*watched = string_list(&iter, NIL);
	}
	else
	{
		bson_error_t error;

		if (mongoc_cursor_error(cursor, &error))
		{
			mongoc_cursor_destroy(cursor);
			mongoc_collection_destroy(coll);
			idx_report_error(&error, applier.servername,
							 idx_op(IDX_OP_READ_STREAM_POS, NULL, NULL));
		}
	}
	mongoc_cursor_destroy(cursor);
	mongoc_collection_destroy(coll);
	return found && *covered != 0;
}

/*
 * Upsert {_id: id} of "collection" in the stream's database with update
 * "u", acknowledged by a majority (the position and the heartbeats).  A
 * write error or write concern error in the reply is an ERROR like a
 * failed command: the applier must not believe a position or heartbeat
 * stored that is not.
 */
static void
majority_upsert(AppStream *s, const char *collection, const char *id,
				const bson_t *u, const IdxOp *what)
{
	bson_t		cmd = BSON_INITIALIZER;
	bson_t		updates,
				update,
				q,
				wc;
	bson_t		reply;
	bson_iter_t iter;
	bson_error_t error;

	idx_check_append(BSON_APPEND_UTF8(&cmd, "update", collection));
	idx_check_append(IDX_BSON_APPEND_ARRAY_BEGIN(&cmd, "updates", &updates));
	idx_check_append(BSON_APPEND_DOCUMENT_BEGIN(&updates, "0", &update));
	idx_check_append(BSON_APPEND_DOCUMENT_BEGIN(&update, "q", &q));
	idx_check_append(BSON_APPEND_UTF8(&q, "_id", id));
	idx_check_append(bson_append_document_end(&update, &q));
	idx_check_append(BSON_APPEND_DOCUMENT(&update, "u", u));
	idx_check_append(BSON_APPEND_BOOL(&update, "upsert", true));
	idx_check_append(bson_append_document_end(&updates, &update));
	idx_check_append(bson_append_array_end(&cmd, &updates));
	idx_check_append(BSON_APPEND_DOCUMENT_BEGIN(&cmd, "writeConcern", &wc));
	idx_check_append(BSON_APPEND_UTF8(&wc, "w", "majority"));
	idx_check_append(bson_append_document_end(&cmd, &wc));
	idx_run_command(applier.client, applier.servername, s->database, &cmd,
					&reply, what);
	bson_destroy(&cmd);
	if (bson_iter_init_find(&iter, &reply, "writeErrors") ||
		bson_iter_init_find(&iter, &reply, "writeConcernError"))
	{
		memset(&error, 0, sizeof(error));
		idx_report_reply_error(&reply, &error, applier.servername, what);
	}
	bson_destroy(&reply);
}

/*
 * Must the position of the stream of "s" stay as it is stored (see the
 * file header)?  Unless "force" (the stream is to be closed or reopened),
 * also while facts wait for their transaction's marker; when forced, the
 * caller applies those before it stores the position (they are
 * applier_stream.c's: idx_applier_save_position()).
 */
bool
idx_applier_position_held(AppStream *s, bool force)
{
	if (!s->open || s->cs.token == NULL || !s->unsaved)
		return true;
	/* the token is past claims left to writes in flight: kept before them */
	if (s->spared != NIL)
		return true;
	/* the token is inside a split event: kept before it */
	if (s->split_event != NULL)
		return true;
	/* the token is past facts that wait for their marker */
	if (s->deferred != NIL && !force)
		return true;
	return false;
}

/*
 * Store the position of the stream of "s", which idx_applier_position_held()
 * does not hold and whose waiting facts are applied: if "force", or if it
 * was last stored long enough before "now" (see the file header).
 */
void
idx_applier_store_position(AppStream *s, bool force, TimestampTz now)
{
	bson_t		u = BSON_INITIALIZER;
	bson_t		set,
				list;
	ListCell   *lc;
	uint32		k = 0;

	Assert(s->deferred == NIL);
	if (!force && !TimestampDifferenceExceeds(s->saved_at, now,
											  s->events_unsaved ? SAVE_AFTER_EVENTS_MS :
											  SAVE_IDLE_MS))
		return;

	idx_check_append(BSON_APPEND_DOCUMENT_BEGIN(&u, "$set", &set));
	idx_check_append(BSON_APPEND_DOCUMENT(&set, "token", s->cs.token));
	idx_check_append(idx_sync_append_time(&set, "clusterTime", s->covered));
	idx_check_append(BSON_APPEND_BOOL(&set, "startAfter", s->cs.start_after));
	idx_check_append(BSON_APPEND_INT64(&set, "server",
									   (int64) applier.server_hash));
	idx_check_append(IDX_BSON_APPEND_ARRAY_BEGIN(&set, "indexes", &list));
	foreach(lc, s->indexes)
	{
		char		key[16];

		snprintf(key, sizeof(key), "%u", k++);
		idx_check_append(BSON_APPEND_UTF8(&list, key,
										  ((AppIndex *) lfirst(lc))->status.definition_id));
	}
	idx_check_append(bson_append_array_end(&set, &list));
	k = 0;
	idx_check_append(IDX_BSON_APPEND_ARRAY_BEGIN(&set, "collections", &list));
	foreach(lc, s->cs.collections)
	{
		char		key[16];

		snprintf(key, sizeof(key), "%u", k++);
		idx_check_append(BSON_APPEND_UTF8(&list, key, lfirst(lc)));
	}
	idx_check_append(bson_append_array_end(&set, &list));
	idx_check_append(bson_append_document_end(&u, &set));

	/*
	 * The rows of idxtable.conflicts written for the events the position
	 * passes are committed first: the applier killed after storing it and
	 * before the round's commit would lose them for good (those events are
	 * not read again), and with them the way from a holder to the facts
	 * that wait for its key (index_conflict.c).
	 */
	CommitTransactionCommand();
	StartTransactionCommand();
	majority_upsert(s, POSITIONS_COLLECTION, applier.key, &u,
					idx_op(IDX_OP_STORE_STREAM_POS, NULL, NULL));
	bson_destroy(&u);
	s->saved_at = now;
	s->unsaved = false;
	s->events_unsaved = false;
}

/*
 * Has a backend written its own wake-up at or after the request
 * "requested", so that the next getMore of the stream of "s" passes it
 * without our heartbeat?  A backend notes the time of its wake-up in the
 * slot before it asks (sync_wait.c).  Looked for once per request: if the
 * getMore after it did not pass it (a wake-up into another database of
 * ours), the heartbeat follows.
 */
static bool
backend_woke(AppStream *s, IdxClusterTime requested)
{
	if (requested <= s->wake_looked_for ||
		requested > pg_atomic_read_u64(&applier.slot->woken_for))
		return false;
	s->wake_looked_for = requested;
	return true;
}

/*
 * A backend waits for a time this stream has not applied through: write
 * a heartbeat, whose event the stream passes at once (its time is at least
 * the requested one, as it is acknowledged after the request was made).
 * Through mongos, two no-ops on every shard instead (applier_stream.c):
 * the first's time is past the request (the shard whose clock gave the
 * request's time ticks on), and the second, carrying it, makes every
 * shard write one later.  Returns true when it wrote none because the
 * backend's own wake-up is to be looked for first: the next getMore is
 * then a short one.
 */
bool
idx_applier_heartbeat(AppStream *s)
{
	IdxClusterTime requested = pg_atomic_read_u64(&applier.slot->requested);
	TimestampTz now;
	bson_t		u = BSON_INITIALIZER;
	bson_t		inc;

	if (requested <= s->covered)
		return false;
	now = GetCurrentTimestamp();
	if (requested <= s->heartbeat_for &&
		!TimestampDifferenceExceeds(s->heartbeat_at, now, HEARTBEAT_RETRY_MS))
		return false;
	if (backend_woke(s, requested))
		return true;

	if (applier.mongos)
	{
		(void) idx_sync_oplog_note(applier.client, applier.servername,
								   "heartbeat");
		(void) idx_sync_oplog_note(applier.client, applier.servername,
								   "heartbeat");
		s->heartbeat_for = requested;
		s->heartbeat_at = now;
		return false;
	}
	idx_check_append(BSON_APPEND_DOCUMENT_BEGIN(&u, "$inc", &inc));
	idx_check_append(BSON_APPEND_INT64(&inc, "n", 1));
	idx_check_append(bson_append_document_end(&u, &inc));
	majority_upsert(s, IDX_SYNC_COLLECTION,
					psprintf(IDX_SYNC_HEARTBEAT_PREFIX "%s", applier.key), &u,
					idx_op(IDX_OP_HEARTBEAT, NULL, NULL));
	bson_destroy(&u);
	s->heartbeat_for = requested;
	s->heartbeat_at = now;
	return false;
}
