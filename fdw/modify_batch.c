/*-------------------------------------------------------------------------
 *
 * modify_batch.c
 *		  UPDATE and DELETE in batches, in transaction and eventual mode.
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/modify_batch.c
 *
 * Row by row, an UPDATE costs a findAndModify per row, plus a bulk of new
 * entries and one of old entries per index whose entries change.  In
 * transaction mode, where the executor needs no row back (no RETURNING, no
 * row triggers, no WITH CHECK OPTION), rows are instead collected and
 * written batch_size at a time, and at the end of the statement's rows:
 *
 *	1. the facts as MongoDB holds them, with one find {_id: {$in: [...]}}
 *	   in the transaction (projection: the columns entries are computed
 *	   from), so that the entries to change are computed from the facts
 *	   themselves; a concurrent writer that changes one of them afterwards
 *	   makes the transaction fail with a write conflict (SQLSTATE 40001);
 *	2. the new entries of all rows: one bulk per index collection;
 *	3. the facts: one bulk of updateOne {$set} (UPDATE), or one deleteMany
 *	   (DELETE);
 *	4. the old entries: one bulk per index collection.
 *
 * With a shard key (shard_key.c) the filters of steps 1 and 3 hold each
 * fact's shard key values beside its _id.
 *
 * In eventual mode there is no transaction and no entry to write, but a
 * failed statement is undone as in ordered mode (modify_undo.c): step 1
 * reads the whole facts, outside any transaction, and each is remembered
 * for the undo before step 3 writes it.  The undo so restores a fact as
 * the batch read it (a findAndModify per row, as ordered mode makes, would
 * return it as it was at the write: the difference is a concurrent change
 * between the two, which an undo of this statement overwrites either way).
 * A batch of one row is one findAndModify instead, as in ordered mode.
 *
 * On MongoDB 8.0 (ms->bulk_write), steps 2, 3 and 4 are one bulkWrite
 * command, in that order, so that a batch is two round trips however many
 * index collections it changes.  Its step 3 deletes each fact by its own op
 * (not one multi-document delete), so that outside a transaction the
 * command can be a retryable write (bulk_write.c).
 *
 * Steps 1, 2 and 4 are skipped where no entry can change (no index, or an
 * UPDATE that assigns none of the indexed columns).  A row whose fact is
 * gone by step 1 (deleted by another transaction since the scan read it)
 * is skipped, and taken back from the executor's count (uncount_unmatched).
 * The last batch is written when the ModifyTable's subplan returns its last
 * row (rowid.h), inside ExecutorRun: before the executor reports the row
 * count, before AFTER statement triggers, before EXPLAIN ANALYZE prints.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/sysattr.h"
#include "executor/executor.h"
#include "miscadmin.h"
#include "utils/memutils.h"
#include "utils/rel.h"

#include "core/connection.h"
#include "core/convert.h"
#include "core/document.h"
#include "core/handle.h"
#include "core/mongo_limits.h"
#include "core/protocol_read.h"
#include "core/shard_key.h"
#include "core/xact.h"
#include "index/index_entry.h"
#include "modify_batch.h"
#include "modify_fact.h"
#include "modify_row.h"
#include "scan.h"

/*
 * Writing the facts of a batch, for messages.
 */
static const IdxOp *
batch_what(IdxModifyState *ms)
{
	return idx_op(ms->operation == CMD_DELETE ?
				  IDX_OP_DELETE_ROWS : IDX_OP_UPDATE_ROWS,
				  ms->info->collection, ms->info->database);
}

/*
 * One row of a batch.
 */
typedef struct BatchRow
{
	bson_t	   *id;				/* {_id: <fact _id>} */
	bson_t	   *shard;			/* its shard key values, or NULL */
	HeapTuple	newtuple;		/* UPDATE: the new row */
	bson_t	   *update;			/* UPDATE: its {$set: ...}, built (and so
								 * checked) when the row is added */
} BatchRow;

typedef struct IdxModifyBatch
{
	MemoryContext cxt;			/* the rows; reset after each batch */
	int			size;
	int			n;
	BatchRow   *rows;
	bool		entries_change; /* can entries change (steps 1, 2, 4)? */
	int64		id_bytes;		/* of the rows' _ids, for the $in filters */
} IdxModifyBatch;

/*
 * Can this write go in batches?
 */
bool
idx_modify_batch_wanted(IdxModifyState *ms, ResultRelInfo *rinfo)
{
	TriggerDesc *trig = rinfo->ri_TrigDesc;

	if (ms->mode == IDX_CONSISTENCY_ORDERED || ms->has_returning ||
		ms->info->batch_size <= 1)
		return false;
	if (ms->operation != CMD_UPDATE && ms->operation != CMD_DELETE)
		return false;
	if (rinfo->ri_WithCheckOptions != NIL)
		return false;
	/*
	 * Row triggers need each row.  AFTER statement triggers run after the
	 * last batch (ExecutorFinish; the batch is written when the subplan's
	 * rows end), so they do not stop batches.
	 */
	if (trig && (trig->trig_update_before_row || trig->trig_update_after_row ||
				 trig->trig_delete_before_row || trig->trig_delete_after_row))
		return false;
	return true;
}

/*
 * Set up the batch of a write (in its memory context).
 */
void
idx_modify_batch_init(IdxModifyState *ms)
{
	IdxModifyBatch *b = palloc0(sizeof(IdxModifyBatch));
	Bitmapset  *needed = idx_writer_needed_attrs(ms->writer);
	ListCell   *lc;

	b->cxt = AllocSetContextCreate(ms->cxt, "idxtable_fdw modify batch",
								   ALLOCSET_DEFAULT_SIZES);
	b->size = ms->info->batch_size;
	b->rows = palloc0(sizeof(BatchRow) * b->size);
	if (idx_writer_nindexes(ms->writer) > 0)
	{
		if (ms->operation == CMD_DELETE)
			b->entries_change = true;
		foreach(lc, ms->target_attrs)
		{
			if (bms_is_member(lfirst_int(lc), needed))
				b->entries_change = true;
		}
	}
	ms->batch = b;
}

/*
 * Is the fact "id" ({_id: ..}) in the batch already?
 */
static bool
in_batch(IdxModifyBatch *b, const bson_t *id)
{
	int			i;

	for (i = 0; i < b->n; i++)
	{
		if (idx_bson_same_bytes(b->rows[i].id, id))
			return true;
	}
	return false;
}

/*
 * Add a row to the batch; write the batch when it is full.  A second
 * change of a fact already in the batch writes the batch first, as does a
 * row whose _id would take the batch's {$in: [...]} filters (step 1, and
 * the deleteMany of step 3) past IDX_IN_LIST_MAX_BYTES.
 */
void
idx_modify_batch_add(IdxModifyState *ms, TupleTableSlot *slot,
					 TupleTableSlot *planSlot)
{
	IdxModifyBatch *b = ms->batch;
	MemoryContext oldcxt;
	bson_value_t id;
	bson_t		iddoc = BSON_INITIALIZER;
	BatchRow   *row;
	bson_t	   *update = NULL;
	bson_t	   *shard;

	if (ms->operation == CMD_UPDATE && ms->target_attrs == NIL)
		return;					/* nothing MongoDB stores changes */
	idx_modify_target_id(ms, planSlot, &id);
	if (ms->operation == CMD_UPDATE)
	{
		/* a value MongoDB cannot store fails here, before this batch */
		slot_getallattrs(slot);
		update = idx_row_to_update(ms->info, RelationGetDescr(ms->rel),
								   ms->target_attrs, slot->tts_values,
								   slot->tts_isnull);
	}
	shard = idx_modify_target_shard_key(ms, planSlot);
	idx_check_append(BSON_APPEND_VALUE(&iddoc, "_id", &id));
	if (in_batch(b, &iddoc) ||
		b->id_bytes + iddoc.len > IDX_IN_LIST_MAX_BYTES)
		idx_modify_batch_flush(ms);

	oldcxt = MemoryContextSwitchTo(b->cxt);
	row = &b->rows[b->n];
	row->id = idx_bson_pcopy(&iddoc);
	row->shard = shard ? idx_bson_pcopy(shard) : NULL;
	row->newtuple = (ms->operation == CMD_UPDATE)
		? ExecCopySlotHeapTuple(slot) : NULL;
	row->update = update ? idx_bson_pcopy(update) : NULL;
	MemoryContextSwitchTo(oldcxt);
	b->id_bytes += iddoc.len;
	bson_destroy(&iddoc);
	if (row->update)
		idx_check_document_size(row->update,
								idx_modify_max_document_size(ms), ms->info,
								true);

	if (++b->n >= b->size)
		idx_modify_batch_flush(ms);
}

/*
 * The {_id: {$in: [...]}} filter of the batch's facts.
 */
static void
ids_filter(IdxModifyBatch *b, bson_t *filter)
{
	bson_t		cond,
				list;
	int			i;

	idx_check_append(BSON_APPEND_DOCUMENT_BEGIN(filter, "_id", &cond));
	idx_check_append(IDX_BSON_APPEND_ARRAY_BEGIN(&cond, "$in", &list));
	for (i = 0; i < b->n; i++)
	{
		bson_iter_t iter;
		char		key[16];

		bson_iter_init_find(&iter, b->rows[i].id, "_id");
		snprintf(key, sizeof(key), "%d", i);
		idx_check_append(bson_append_iter(&list, key, -1, &iter));
	}
	idx_check_append(bson_append_array_end(&cond, &list));
	idx_check_append(bson_append_document_end(filter, &cond));
}

/*
 * The filter of row i's fact: its _id and shard key values (palloc'd).
 */
static bson_t *
row_filter(IdxModifyState *ms, BatchRow *row)
{
	bson_t		filter = BSON_INITIALIZER;
	bson_t	   *result;
	bson_iter_t iter;

	bson_iter_init_find(&iter, row->id, "_id");
	idx_check_append(bson_append_iter(&filter, "_id", -1, &iter));
	idx_shard_key_append(ms->info, &filter, row->shard);
	result = idx_bson_pcopy(&filter);
	bson_destroy(&filter);
	return result;
}

/*
 * The filter of all the batch's facts: {_id: {$in: [...]}}, or with a
 * shard key {$or: [{_id, shard key}, ...]}, so that each fact is the one
 * of the row read (_id is unique per shard only) and mongos can target it.
 */
static void
batch_filter(IdxModifyState *ms, IdxModifyBatch *b, bson_t *filter)
{
	bson_t		list;
	int			i;

	if (ms->info->nshard_key == 0)
	{
		ids_filter(b, filter);
		return;
	}
	idx_check_append(IDX_BSON_APPEND_ARRAY_BEGIN(filter, "$or", &list));
	for (i = 0; i < b->n; i++)
	{
		char		key[16];

		snprintf(key, sizeof(key), "%d", i);
		idx_check_append(BSON_APPEND_DOCUMENT(&list, key,
											  row_filter(ms, &b->rows[i])));
	}
	idx_check_append(bson_append_array_end(filter, &list));
}

/*
 * Keep "doc", a fact read by read_facts, as pre[i] of the row i it is of.
 */
static void
take_fact(IdxModifyBatch *b, bson_t **pre, const bson_t *doc)
{
	bson_t		key = BSON_INITIALIZER;
	bson_iter_t iter;
	int			i;

	if (bson_iter_init_find(&iter, doc, "_id"))
		idx_check_append(bson_append_iter(&key, "_id", -1, &iter));
	for (i = 0; i < b->n; i++)
	{
		if (pre[i] == NULL && idx_bson_same_bytes(b->rows[i].id, &key))
		{
			pre[i] = idx_bson_pcopy(doc);
			break;
		}
	}
	bson_destroy(&key);
}

/*
 * Did the find of "cursor", which returned nothing, begin the MongoDB
 * transaction of "session" (if "first") and fail in a way that lets the
 * transaction start again (idx_xact_restart_first)?  Then true: open the
 * cursor again.  A find that returned nothing failed at its first command
 * (its first batch is not empty while documents match, so no getMore
 * came after it).
 */
static bool
find_aborted(mongoc_cursor_t *cursor, mongoc_client_session_t *session,
			 bool first, int *attempts)
{
	const bson_t *reply;
	bson_error_t error;

	return first &&
		mongoc_cursor_error_document(cursor, &error, &reply) &&
		idx_xact_restart_first(session, reply, &error, attempts);
}

/*
 * Step 1: the batch's facts as they are, in the transaction; pre[i] is
 * row i's fact (index columns; in eventual mode, outside a transaction,
 * the whole fact, for the undo), or NULL if it is gone.
 */
static bson_t **
read_facts(IdxModifyState *ms, IdxModifyBatch *b,
		   mongoc_client_session_t *session)
{
	bson_t	  **pre = palloc0(sizeof(bson_t *) * b->n);
	bson_t		filter = BSON_INITIALIZER;
	bson_t		opts = BSON_INITIALIZER;
	bson_t		projection;
	bson_error_t error;
	mongoc_cursor_t *cursor;
	IdxHandle  *owned_cursor;
	const bson_t *doc;
	bool		first;
	int			attempts = 0;

	batch_filter(ms, b, &filter);
	if (ms->mode != IDX_CONSISTENCY_EVENTUAL)
	{
		idx_check_append(BSON_APPEND_DOCUMENT_BEGIN(&opts, "projection", &projection));
		idx_modify_index_projection(ms, &projection);
		idx_check_append(bson_append_document_end(&opts, &projection));
	}
	if (session && !mongoc_client_session_append(session, &opts, &error))
		idx_report_error(&error, ms->server->servername, batch_what(ms));
	first = idx_xact_sends_first(session);
	for (;;)
	{
		bool		seen = false;

		cursor = mongoc_collection_find_with_opts(ms->facts, &filter, &opts,
												  idx_primary_read_prefs());
		owned_cursor = idx_own_cursor(cursor);
		while (mongoc_cursor_next(cursor, &doc))
		{
			take_fact(b, pre, doc);
			seen = true;
		}
		if (seen || !find_aborted(cursor, session, first, &attempts))
			break;
		idx_release(owned_cursor);	/* the transaction began again */
	}
	bson_destroy(&filter);
	bson_destroy(&opts);
	if (mongoc_cursor_error(cursor, NULL))
		idx_report_cursor_error(cursor, ms->server->servername,
								idx_reading_what(ms->info->collection,
												 ms->info->database));
	idx_release(owned_cursor);
	return pre;
}

/*
 * Step 2 for row i: queue its entry changes, from the fact as it is to the
 * fact with the row's assignments (UPDATE) or to nothing (DELETE).
 */
static void
queue_row(IdxModifyState *ms, int i, BatchRow *row, const bson_t *pre)
{
	TupleDesc	tupdesc = RelationGetDescr(ms->rel);
	Datum	   *prevals,
			   *newvals = NULL;
	bool	   *prenulls,
			   *newnulls = NULL;
	bson_iter_t iter;

	idx_modify_doc_to_row(ms, ms->preconv, pre, &prevals, &prenulls);
	if (row->newtuple)
	{
		Datum	   *assigned = palloc(sizeof(Datum) * tupdesc->natts);
		bool	   *assignednulls = palloc(sizeof(bool) * tupdesc->natts);
		ListCell   *lc;

		heap_deform_tuple(row->newtuple, tupdesc, assigned, assignednulls);
		newvals = palloc(sizeof(Datum) * tupdesc->natts);
		newnulls = palloc(sizeof(bool) * tupdesc->natts);
		memcpy(newvals, prevals, sizeof(Datum) * tupdesc->natts);
		memcpy(newnulls, prenulls, sizeof(bool) * tupdesc->natts);
		foreach(lc, ms->target_attrs)
		{
			int			att = lfirst_int(lc);

			newvals[att - 1] = assigned[att - 1];
			newnulls[att - 1] = assignednulls[att - 1];
		}
	}
	bson_iter_init_find(&iter, row->id, "_id");
	idx_writer_queue(ms->writer, i, prevals, prenulls, newvals, newnulls,
					 bson_iter_value(&iter));
}

/*
 * The bulk of step 3, every write queued, nothing sent yet.
 */
static mongoc_bulk_operation_t *
facts_bulk(IdxModifyState *ms, IdxModifyBatch *b, bson_t **pre,
		   mongoc_client_session_t *session)
{
	bson_t		opts = BSON_INITIALIZER;
	bson_error_t error;
	mongoc_bulk_operation_t *bulk;
	bool		ok;
	int			i;

	idx_check_append(BSON_APPEND_BOOL(&opts, "ordered", false));
	if (session && !mongoc_client_session_append(session, &opts, &error))
		idx_report_error(&error, ms->server->servername, batch_what(ms));
	bulk = mongoc_collection_create_bulk_operation_with_opts(ms->facts, &opts);
	bson_destroy(&opts);
	if (ms->operation == CMD_DELETE)
	{
		bson_t		filter = BSON_INITIALIZER;

		batch_filter(ms, b, &filter);
		ok = mongoc_bulk_operation_remove_many_with_opts(bulk, &filter, NULL,
														 &error);
		bson_destroy(&filter);
		if (!ok)
			idx_document_refused(ms->info, bulk, &error);
	}
	else
	{
		for (i = 0; i < b->n; i++)
		{
			if (pre && pre[i] == NULL)
				continue;		/* gone */
			if (!mongoc_bulk_operation_update_one_with_opts(bulk,
															row_filter(ms, &b->rows[i]),
															b->rows[i].update,
															NULL, &error))
				idx_document_refused(ms->info, bulk, &error);
		}
	}
	return bulk;
}

/*
 * Step 3: the facts, in one bulk; returns how many were written.  If the
 * bulk begins the MongoDB transaction and MongoDB aborted it for now, it
 * is sent again in the transaction started again (idx_xact_restart_first).
 */
static int64
write_facts(IdxModifyState *ms, IdxModifyBatch *b, bson_t **pre,
			mongoc_client_session_t *session)
{
	bson_t		reply;
	bson_error_t error;
	mongoc_bulk_operation_t *bulk;
	bson_iter_t iter;
	int64		written = 0;
	bool		ok;
	bool		first = idx_xact_sends_first(session);
	int			attempts = 0;

	for (;;)
	{
		bulk = facts_bulk(ms, b, pre, session);
		ok = mongoc_bulk_operation_execute(bulk, &reply, &error);
		mongoc_bulk_operation_destroy(bulk);
		if (ok || !first ||
			!idx_xact_restart_first(session, &reply, &error, &attempts))
			break;
		bson_destroy(&reply);
	}
	if (!ok)
	{
		bson_t	   *failed_reply = idx_own_reply(&reply);

		idx_shard_key_check_refusal(ms->info, failed_reply, &error);
		idx_report_reply_error(failed_reply, &error, ms->server->servername,
							   batch_what(ms));
	}
	if (bson_iter_init_find(&iter, &reply,
							ms->operation == CMD_DELETE ? "nRemoved" : "nMatched") &&
		BSON_ITER_HOLDS_NUMBER(&iter))
		written = bson_iter_as_int64(&iter);
	bson_destroy(&reply);
	return written;
}

/*
 * The executor counted every row of the batch when it was added; take back
 * those MongoDB did not match (facts gone since the scan read them), so
 * that the command tag counts the facts changed.  This works for every
 * batch written while the executor runs: all but the last, and the last
 * too where the scan of the target is the plan's direct subplan (modify.c
 * writes it when the scan ends); after a join the last batch is written
 * when the statement ends, after the count is reported.
 */
static void
uncount_unmatched(IdxModifyState *ms, int64 unmatched)
{
	if (unmatched <= 0 || !ms->can_set_tag || ms->estate == NULL)
		return;
	if ((uint64) unmatched > ms->estate->es_processed)
		unmatched = (int64) ms->estate->es_processed;
	ms->estate->es_processed -= (uint64) unmatched;
}

/*
 * Eventual mode: remember the facts step 3 is about to write, as step 1
 * read them, for the undo of a statement that fails (modify_undo.c).  A
 * fact step 3 then does not change (a failed bulk) is restored to what it
 * holds, which changes nothing.
 */
static void
remember_batch(IdxModifyState *ms, IdxModifyBatch *b, bson_t **pre)
{
	int			i;

	for (i = 0; i < b->n; i++)
	{
		bson_iter_t iter;

		if (pre[i] == NULL)
			continue;			/* gone: step 3 does not write it */
		bson_iter_init_find(&iter, b->rows[i].id, "_id");
		idx_modify_remember_write(ms, ms->operation == CMD_DELETE ?
								  UNDO_DELETED : UNDO_UPDATED,
								  bson_iter_value(&iter), pre[i]);
	}
}

/*
 * Eventual mode, a batch of one row: one findAndModify, which returns the
 * fact as it was for the undo, instead of a find and a bulk.  Returns how
 * many facts it wrote.
 */
static int64
write_one_fact(IdxModifyState *ms, BatchRow *row)
{
	bson_iter_t iter;
	bson_t	   *before;

	bson_iter_init_find(&iter, row->id, "_id");
	before = idx_modify_find_and_modify(ms, NULL, bson_iter_value(&iter),
										row->shard, row->update, true);
	if (before == NULL)
		return 0;				/* gone */
	idx_modify_remember_write(ms, ms->operation == CMD_DELETE ?
							  UNDO_DELETED : UNDO_UPDATED,
							  bson_iter_value(&iter), before);
	return 1;
}

/*
 * Steps 2 to 4 as one bulkWrite: the new entries, the facts, the old
 * entries, ordered; returns how many facts were written (those step 1
 * found: in the transaction, a fact found is a fact the write matches).
 */
static int64
write_bulk_write(IdxModifyState *ms, IdxModifyBatch *b, bson_t **pre,
				 mongoc_client_session_t *session)
{
	IdxBulkWrite *bw = idx_bulk_write_create(ms->client,
											 ms->server->servername);
	IdxBulkWriteError failed;
	const IdxOp *what = batch_what(ms);
	int64		written = 0;
	int			from = 0;
	int			i;

	idx_writer_add_new(ms->writer, bw);
	for (i = 0; i < b->n; i++)
		written += (pre[i] != NULL);
	/* one op per fact, so that the command stays a retryable write */
	for (i = 0; i < b->n; i++)
	{
		if (ms->operation == CMD_DELETE)
			idx_bulk_write_delete(bw, ms->info->database,
								  ms->info->collection,
								  row_filter(ms, &b->rows[i]), false);
		else if (pre[i] != NULL)
			idx_bulk_write_update(bw, ms->info->database,
								  ms->info->collection,
								  row_filter(ms, &b->rows[i]),
								  b->rows[i].update, false);
	}
	idx_writer_add_old(ms->writer, bw);
	while (!idx_bulk_write_execute(bw, from, session, what, &failed))
	{
		if (failed.op >= idx_bulk_write_nops(bw) ||
			!idx_writer_bulk_failed(ms->writer, bw, &failed))
		{
			idx_shard_key_check_refusal(ms->info, failed.doc, &failed.error);
			idx_bulk_write_report(bw, &failed, what);
		}
		from = failed.op + 1;
	}
	idx_writer_bulk_done(ms->writer, idx_bulk_write_nops(bw));
	idx_writer_reset(ms->writer);
	return written;
}

/*
 * Write the batch (see the file header for the steps).
 */
void
idx_modify_batch_flush(IdxModifyState *ms)
{
	IdxModifyBatch *b = ms->batch;
	mongoc_client_session_t *session;
	MemoryContext oldcxt;
	bson_t	  **pre = NULL;
	int64		written;
	int			i;

	if (b == NULL || b->n == 0)
		return;
	CHECK_FOR_INTERRUPTS();
	session = idx_modify_session(ms);
	oldcxt = MemoryContextSwitchTo(b->cxt);
	if (b->entries_change)
	{
		pre = read_facts(ms, b, session);
		for (i = 0; i < b->n; i++)
		{
			if (pre[i] != NULL)
				queue_row(ms, i, &b->rows[i], pre[i]);
		}
		if (!ms->bulk_write)
			idx_writer_write_new(ms->writer, session);
	}
	if (b->entries_change && ms->bulk_write)
		written = write_bulk_write(ms, b, pre, session);
	else if (ms->mode == IDX_CONSISTENCY_EVENTUAL && b->n == 1)
		written = write_one_fact(ms, &b->rows[0]);
	else
	{
		if (ms->mode == IDX_CONSISTENCY_EVENTUAL)
		{
			pre = read_facts(ms, b, session);
			remember_batch(ms, b, pre);
		}
		written = write_facts(ms, b, pre, session);
	}
	idx_modify_note_written(ms, (int) written);
	uncount_unmatched(ms, b->n - written);
	if (b->entries_change && !ms->bulk_write)
		idx_writer_delete_old(ms->writer, session);
	MemoryContextSwitchTo(oldcxt);
	b->n = 0;
	b->id_bytes = 0;
	MemoryContextReset(b->cxt);
}
