/*-------------------------------------------------------------------------
 *
 * modify_fact.c
 *		  One fact of a write: read it by _id, change or remove it with
 *		  findAndModify; the MongoDB session of the write, the facts it
 *		  counts and notes as written, and its record of them for the undo
 *		  of a failed statement.
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/modify_fact.c
 *
 * The lowest of the write path's files with remote work (modify_int.h):
 * the callbacks (modify.c), the batches (modify_batch.c, modify_insert.c)
 * and the undo (modify_undo.c) all write facts through these, and these
 * call none of them.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "nodes/pg_list.h"
#include "utils/memutils.h"
#include "utils/rel.h"

#include "core/connection.h"
#include "core/convert.h"
#include "core/document.h"
#include "core/handle.h"
#include "core/mongo_limits.h"
#include "core/option.h"
#include "core/protocol_read.h"
#include "core/remote_error.h"
#include "core/shard_key.h"
#include "core/xact.h"
#include "index/index_write.h"
#include "modify_fact.h"
#include "scan.h"
#include "sync/xact_marker.h"

/*
 * The MongoDB session of this write: the transaction's, started now if
 * needed, or none in ordered mode.
 */
mongoc_client_session_t *
idx_modify_session(IdxModifyState *ms)
{
	mongoc_client_session_t *session;
	bool		starts;
	List	   *defs;

	if (ms->mode != IDX_CONSISTENCY_TRANSACTION)
		return NULL;
	starts = !idx_xact_client_busy(ms->client);
	session = idx_xact_begin_write(ms->client, ms->server->servername);
	/* for the applier's exclusion of our transactions */
	if (starts)
		idx_xact_note_started(ms->client);
	/* for the transaction's marker: these facts need no applier */
	defs = idx_writer_indexes(ms->writer);
	idx_xact_note_maintained(ms->client, ms->server->servername, ms->info,
							 defs);
	list_free(defs);
	return session;
}

/*
 * Count facts written; in ordered and eventual mode they are final now,
 * which the transaction remembers for its warning at rollback.
 */
void
idx_modify_note_written(IdxModifyState *ms, int n)
{
	ms->facts_written += n;
	if (ms->mode != IDX_CONSISTENCY_TRANSACTION)
		idx_xact_note_ordered_write(ms->info->relname, ms->mode);
}

/*
 * Options carrying the session, for the writes of "ms"; "what" says which,
 * for the error if libmongoc cannot add it.
 */
void
idx_modify_append_session(IdxModifyState *ms,
						  mongoc_client_session_t *session, bson_t *opts,
						  const IdxOp *what)
{
	bson_error_t error;

	if (session && !mongoc_client_session_append(session, opts, &error))
		idx_report_error(&error, ms->server->servername, what);
}


/*
 * The largest document the server takes, asked once per statement.
 */
int64
idx_modify_max_document_size(IdxModifyState *ms)
{
	if (ms->max_doc_size == 0)
		ms->max_doc_size = idx_max_document_size(ms->client);
	return ms->max_doc_size;
}

/*
 * Remember a fact the statement wrote, and how it was before, for the undo
 * of the statement if it fails (modify_undo.c); only where each write is
 * final when made (ordered and eventual mode), at most IDX_UNDO_MAX.
 */
void
idx_modify_remember_write(IdxModifyState *ms, UndoKind kind,
						  const bson_value_t *id, const bson_t *before)
{
	MemoryContext oldcxt;
	UndoRecord *rec;
	bson_t		iddoc = BSON_INITIALIZER;

	if (ms->mode == IDX_CONSISTENCY_TRANSACTION || ms->undo_overflow)
		return;
	if (ms->nundo >= IDX_UNDO_MAX)
	{
		ms->undo_overflow = true;
		return;
	}
	oldcxt = MemoryContextSwitchTo(ms->cxt);
	rec = palloc(sizeof(UndoRecord));
	rec->kind = kind;
	idx_check_append(BSON_APPEND_VALUE(&iddoc, IDX_ID_FIELD, id));
	rec->id = idx_bson_pcopy(&iddoc);
	bson_destroy(&iddoc);
	rec->before = before ? idx_bson_pcopy(before) : NULL;
	ms->undo = lappend(ms->undo, rec);
	ms->nundo++;
	MemoryContextSwitchTo(oldcxt);
}

/*
 * The projection of the columns entries are computed from (and _id).
 */
void
idx_modify_index_projection(IdxModifyState *ms, bson_t *projection)
{
	Bitmapset  *needed = idx_writer_needed_attrs(ms->writer);
	int			attnum = -1;

	idx_check_append(BSON_APPEND_INT32(projection, IDX_ID_FIELD, 1));
	while ((attnum = bms_next_member(needed, attnum)) >= 0)
		idx_check_append(BSON_APPEND_INT32(projection,
										   ms->info->fields[attnum - 1], 1));
}

/*
 * A fact by _id with the index columns, or NULL (palloc'd copy); read in
 * the open transaction if "in_txn", else outside it.
 */
bson_t *
idx_modify_fetch_fact(IdxModifyState *ms, const bson_value_t *id,
					  const bson_t *shard, bool in_txn)
{
	bson_t		filter = BSON_INITIALIZER;
	bson_t		opts = BSON_INITIALIZER;
	bson_t		projection;
	mongoc_cursor_t *cursor;
	const bson_t *doc;
	bson_t	   *result = NULL;

	idx_check_append(BSON_APPEND_VALUE(&filter, IDX_ID_FIELD, id));
	if (shard)
		idx_shard_key_append(ms->info, &filter, shard);
	idx_check_append(BSON_APPEND_DOCUMENT_BEGIN(&opts, "projection", &projection));
	idx_modify_index_projection(ms, &projection);
	idx_check_append(bson_append_document_end(&opts, &projection));
	idx_check_append(BSON_APPEND_INT64(&opts, "limit", 1));
	if (in_txn)
		idx_xact_append_session(ms->client, &opts);
	cursor = mongoc_collection_find_with_opts(ms->facts, &filter, &opts,
											  idx_primary_read_prefs());
	bson_destroy(&filter);
	bson_destroy(&opts);
	if (mongoc_cursor_next(cursor, &doc))
		result = idx_doc_id_is(doc, id) ? bson_copy(doc) : NULL;
	else if (mongoc_cursor_error(cursor, NULL))
	{
		(void) idx_own_cursor(cursor);	/* the error destroys it */
		idx_report_cursor_error(cursor, ms->server->servername,
								idx_reading_what(ms->info->collection,
												 ms->info->database));
	}
	mongoc_cursor_destroy(cursor);
	if (result)
	{
		bson_t	   *copy = palloc(sizeof(bson_t));
		uint8	   *data = palloc(result->len);

		memcpy(data, bson_get_data(result), result->len);
		bson_init_static(copy, data, result->len);
		bson_destroy(result);
		result = copy;
	}
	return result;
}

/*
 * The "value" of a findAndModify reply (the document as it was), palloc'd,
 * or NULL.
 */
static bson_t *
reply_value(const bson_t *reply)
{
	bson_iter_t iter;
	const uint8 *data;
	uint32		len;
	uint8	   *copy;
	bson_t	   *result;

	if (!bson_iter_init_find(&iter, reply, "value") ||
		!BSON_ITER_HOLDS_DOCUMENT(&iter))
		return NULL;
	bson_iter_document(&iter, &len, &data);
	copy = palloc(len);
	memcpy(copy, data, len);
	result = palloc(sizeof(bson_t));
	bson_init_static(result, copy, len);
	return result;
}

/*
 * findAndModify of the fact "id": $set "update", or remove it (update
 * NULL).  Returns the fact as it was before (with the index columns, or
 * everything if "full"), palloc'd, or NULL if there is no such fact.
 * "shard" holds the fact's shard key values (see shard_key.c), if the
 * table has a shard key.
 */
bson_t *
idx_modify_find_and_modify(IdxModifyState *ms,
						   mongoc_client_session_t *session,
						   const bson_value_t *id, const bson_t *shard,
						   const bson_t *update, bool full)
{
	mongoc_find_and_modify_opts_t *fam = mongoc_find_and_modify_opts_new();
	bson_t		query = BSON_INITIALIZER;
	bson_t		projection = BSON_INITIALIZER;
	bson_t		extra = BSON_INITIALIZER;
	bson_t		reply;
	bson_error_t error;
	bson_t	   *result = NULL;
	bool		ok;
	bool		first;
	int			attempts = 0;

	idx_check_append(BSON_APPEND_VALUE(&query, IDX_ID_FIELD, id));
	idx_shard_key_append(ms->info, &query, shard);
	if (update)
		mongoc_find_and_modify_opts_set_update(fam, update);
	else
		mongoc_find_and_modify_opts_set_flags(fam,
											  MONGOC_FIND_AND_MODIFY_REMOVE);
	if (!full)
	{
		idx_modify_index_projection(ms, &projection);
		mongoc_find_and_modify_opts_set_fields(fam, &projection);
	}
	idx_modify_append_session(ms, session, &extra,
							  idx_op(update ? IDX_OP_UPDATE_ONE : IDX_OP_DELETE_ONE,
									 ms->info->collection,
									 ms->info->database));
	mongoc_find_and_modify_opts_append(fam, &extra);
	first = idx_xact_sends_first(session);
	for (;;)
	{
		ok = mongoc_collection_find_and_modify_with_opts(ms->facts, &query,
														 fam, &reply, &error);
		if (ok || !first ||
			!idx_xact_restart_first(session, &reply, &error, &attempts))
			break;
		bson_destroy(&reply);	/* the transaction began again: resend */
	}
	mongoc_find_and_modify_opts_destroy(fam);
	bson_destroy(&query);
	bson_destroy(&projection);
	bson_destroy(&extra);
	if (!ok)
	{
		bson_t	   *failed_reply = idx_own_reply(&reply);

		/* the write was made, only not acknowledged: undo it too */
		if (idx_is_write_concern_error(&error) &&
			(result = reply_value(failed_reply)) != NULL)
			idx_modify_remember_write(ms,
									  update ? UNDO_UPDATED : UNDO_DELETED,
									  id, result);
		idx_shard_key_check_refusal(ms->info, failed_reply, &error);
		idx_report_reply_error(failed_reply, &error, ms->server->servername,
							   idx_op(update ? IDX_OP_UPDATE_ONE : IDX_OP_DELETE_ONE,
									  ms->info->collection,
									  ms->info->database));
	}
	result = reply_value(&reply);
	bson_destroy(&reply);
	return result;
}

