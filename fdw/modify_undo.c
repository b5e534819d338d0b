/*-------------------------------------------------------------------------
 *
 * modify_undo.c
 *		  Undo of a statement that failed in ordered mode (modify.c).
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/modify_undo.c
 *
 * In ordered mode each write is final when it is made, but a statement
 * that fails in one of our callbacks (a unique violation on its third
 * row, a cancel) should leave nothing of itself, as it would in a local
 * table.  So the statement remembers the facts it wrote, each with the
 * fact as it was (idx_modify_remember_write), and on such an error
 * (idx_modify_fail_statement) writes them back, newest first, by the same
 * crash-safe protocol as any write: index entries for the restored state
 * first, then the fact, then the entries of the state undone.
 *
 * The undo is remote work, so it never runs in a catch block as it is:
 * the error is copied and flushed, and the undo runs in a subtransaction
 * of its own, so that an error while undoing is rolled back cleanly and
 * cannot corrupt the error being raised.  A failure of the undo itself
 * (or a statement past IDX_UNDO_MAX rows) is a WARNING; the rows stay as
 * they were written, as after a crash.  Connection errors are not undone:
 * the server is unlikely to take the undo either.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "miscadmin.h"
#include "nodes/pg_list.h"
#include "utils/memutils.h"
#include "utils/resowner.h"

#include "core/convert.h"
#include "core/handle.h"
#include "core/option.h"
#include "core/remote_error.h"
#include "core/xact.h"
#include "index/index_entry.h"
#include "index/index_write.h"
#include "modify_fact.h"
#include "modify_row.h"
#include "modify_undo.h"

/*
 * Undo an INSERT: delete the fact, then its entries.
 */
static void
undo_insert(IdxModifyState *ms, const bson_value_t *id, const bson_t *shard)
{
	bson_t	   *was = idx_modify_find_and_modify(ms, NULL, id, shard, NULL,
												 false);

	if (was != NULL && idx_writer_nindexes(ms->writer) > 0)
	{
		Datum	   *vals;
		bool	   *nulls;

		idx_modify_doc_to_row(ms, ms->preconv, was, &vals, &nulls);
		idx_writer_queue(ms->writer, 0, vals, nulls, NULL, NULL, id);
		idx_writer_delete_old(ms->writer, NULL);
	}
}

/*
 * The update that puts the assigned columns back as "before" had them:
 * $set what it had, $unset what it lacked.
 */
static void
restore_update(IdxModifyState *ms, const bson_t *before, bson_t *update)
{
	bson_t		set = BSON_INITIALIZER;
	bson_t		unset = BSON_INITIALIZER;
	ListCell   *lc;

	foreach(lc, ms->target_attrs)
	{
		const char *path = ms->info->fields[lfirst_int(lc) - 1];
		bson_iter_t iter;
		bson_iter_t field;

		if (bson_iter_init(&iter, before) &&
			bson_iter_find_descendant(&iter, path, &field))
			idx_check_append(bson_append_iter(&set, path, -1, &field));
		else
			idx_check_append(BSON_APPEND_UTF8(&unset, path, ""));
	}
	if (!bson_empty(&set))
		idx_check_append(BSON_APPEND_DOCUMENT(update, "$set", &set));
	if (!bson_empty(&unset))
		idx_check_append(BSON_APPEND_DOCUMENT(update, "$unset", &unset));
	bson_destroy(&set);
	bson_destroy(&unset);
}

/*
 * Undo an UPDATE: entries of the old state, the fact, then the entries of
 * the state undone.
 */
static void
undo_update(IdxModifyState *ms, const bson_value_t *id, const bson_t *before)
{
	IdxIndexWriter *w = ms->writer;
	bool		indexed = idx_writer_nindexes(w) > 0;
	bson_t		update = BSON_INITIALIZER;
	bson_t	   *now;

	if (indexed)
	{
		Datum	   *nowvals,
				   *oldvals;
		bool	   *nownulls,
				   *oldnulls;

		now = idx_modify_fetch_fact(ms, id, before, false);
		if (now == NULL)
			return;				/* deleted meanwhile */
		idx_modify_doc_to_row(ms, ms->preconv, now, &nowvals, &nownulls);
		idx_modify_doc_to_row(ms, ms->preconv, before, &oldvals, &oldnulls);
		idx_writer_queue(w, 0, nowvals, nownulls, oldvals, oldnulls, id);
		idx_writer_write_new(w, NULL);
	}
	restore_update(ms, before, &update);
	if (!bson_empty(&update))
		(void) idx_modify_find_and_modify(ms, NULL, id, before, &update, false);
	bson_destroy(&update);
	if (indexed)
		idx_writer_delete_old(w, NULL);
}

/*
 * Undo a DELETE: the entries, then the fact as it was.  A fact with that
 * _id that is there again needs no restoring (a batch of eventual mode
 * remembers its deletes before its deleteMany, which may have failed
 * before it removed them).
 */
static void
undo_delete(IdxModifyState *ms, const bson_value_t *id, const bson_t *before)
{
	bson_t		reply;
	bson_error_t error;

	if (idx_writer_nindexes(ms->writer) > 0)
	{
		Datum	   *vals;
		bool	   *nulls;

		idx_modify_doc_to_row(ms, ms->preconv, before, &vals, &nulls);
		idx_writer_queue(ms->writer, 0, NULL, NULL, vals, nulls, id);
		idx_writer_write_new(ms->writer, NULL);
	}
	if (!mongoc_collection_insert_one(ms->facts, before, NULL, &reply, &error))
	{
		bson_t	   *failed_reply = idx_own_reply(&reply);

		if (ms->mode == IDX_CONSISTENCY_EVENTUAL && error.code == 11000)
			return;				/* not deleted: nothing to restore */
		idx_report_reply_error(failed_reply, &error, ms->server->servername,
							   idx_op(IDX_OP_UNDO_WRITE, ms->info->collection,
									  ms->info->database));
	}
	bson_destroy(&reply);
}

/*
 * Undo the remembered writes, newest first.  Returns false (after a
 * WARNING) if there were too many to remember; an error undoing one is
 * raised, for undo_in_subtransaction() to turn into a WARNING; *left
 * then counts the rows not undone, of *total.
 */
static bool
undo_statement(IdxModifyState *ms, volatile int *left, volatile int *total)
{
	MemoryContext oldcxt = CurrentMemoryContext;
	List	   *records = ms->undo;
	int			i;

	ms->undo = NIL;				/* never twice */
	*total = list_length(records);
	idx_writer_take_back(ms->writer);	/* entries of an unwritten batch */
	if (ms->undo_overflow)
	{
		ereport(WARNING,
				(errmsg("the writes of the failed statement to foreign table \"%s\" were not undone",
						ms->info->relname),
				 errdetail("It wrote more than %d rows, more than are remembered for an undo; its consistency mode is '%s'.",
						   IDX_UNDO_MAX, idx_consistency_name(ms->mode))));
		return false;
	}

	for (i = list_length(records) - 1; i >= 0; i--)
	{
		UndoRecord *rec = list_nth(records, i);
		bson_iter_t iter;

		*left = i + 1;
		MemoryContextReset(ms->row_cxt);
		MemoryContextSwitchTo(ms->row_cxt);
		idx_writer_reset(ms->writer);
		bson_iter_init_find(&iter, rec->id, IDX_ID_FIELD);
		switch (rec->kind)
		{
			case UNDO_INSERTED:
				undo_insert(ms, bson_iter_value(&iter), rec->before);
				break;
			case UNDO_UPDATED:
				undo_update(ms, bson_iter_value(&iter), rec->before);
				break;
			case UNDO_DELETED:
				undo_delete(ms, bson_iter_value(&iter), rec->before);
				break;
		}
	}
	MemoryContextSwitchTo(oldcxt);
	idx_writer_reset(ms->writer);
	return true;
}

/*
 * Run undo_statement() in a subtransaction of its own, as PL/pgSQL runs
 * an exception block, so that an error while undoing (MongoDB refusing,
 * the connection lost) is rolled back cleanly and cannot disturb the
 * error being raised: it becomes a WARNING saying what was left, and
 * false is returned.  Interrupts are held: a second cancel must not stop
 * the undo half way (an error inside leaves the holdoff count raised by
 * whatever held them then, so it is put back).
 */
static bool
undo_in_subtransaction(IdxModifyState *ms)
{
	MemoryContext oldcxt = CurrentMemoryContext;
	ResourceOwner oldowner = CurrentResourceOwner;
	volatile bool ok = false;
	volatile int left = 0;
	volatile int total = 0;
	uint32		holdoff;

	HOLD_INTERRUPTS();
	holdoff = InterruptHoldoffCount;
	BeginInternalSubTransaction(NULL);
	MemoryContextSwitchTo(oldcxt);
	PG_TRY();
	{
		ok = undo_statement(ms, &left, &total);
		ReleaseCurrentSubTransaction();
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		MemoryContextSwitchTo(oldcxt);
		edata = CopyErrorData();
		FlushErrorState();
		InterruptHoldoffCount = holdoff;
		RollbackAndReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(oldcxt);
		CurrentResourceOwner = oldowner;
		idx_writer_reset(ms->writer);
		/* the undo's own error, whole (detail, hint, context), as a WARNING */
		edata->elevel = WARNING;
		ThrowErrorData(edata);
		ereport(WARNING,
				(errmsg("could not undo the writes of the failed statement to foreign table \"%s\"",
						ms->info->relname),
				 errdetail("%d of the %d rows the statement wrote remain as written after the error above.",
						   left, total),
				 errhint("idxtable.verify_index() and idxtable.repair_index() check and fix the table's indexes.")));
		FreeErrorData(edata);
		ok = false;
	}
	PG_END_TRY();
	MemoryContextSwitchTo(oldcxt);
	CurrentResourceOwner = oldowner;
	RESUME_INTERRUPTS();
	return ok;
}

/*
 * The statement failed in one of our callbacks (the error is being
 * raised): undo what it wrote in ordered mode, in a subtransaction, then
 * raise the original error on.
 */
void
idx_modify_fail_statement(IdxModifyState *ms)
{
	ErrorData  *edata = CopyErrorData();

	FlushErrorState();
	if (ERRCODE_TO_CATEGORY(edata->sqlerrcode) != ERRCODE_CONNECTION_EXCEPTION &&
		undo_in_subtransaction(ms) && !ms->noted_before)
		idx_xact_unnote_ordered_write();	/* nothing of it remains */
	ReThrowError(edata);
}
