/*-------------------------------------------------------------------------
 *
 * modify.c
 *		  INSERT, UPDATE, DELETE and COPY FROM on idxtable_fdw foreign
 *		  tables, keeping their index tables consistent (index_write.c).
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/modify.c
 *
 * Rows are identified by the column mapped to _id, which the planner adds
 * as a row identity column.  Each write runs in one of three consistency
 * modes (option "consistency", resolved by xact.c):
 *
 *	INSERT	entries of the new rows, then the facts (one bulk write per
 *			collection per batch of batch_size rows)
 *	UPDATE	new entries (from the old and new rows PostgreSQL has), then
 *			findAndModify of the fact with $set, which returns the fact as
 *			it really was; if that differs from the row PostgreSQL had (a
 *			concurrent writer in ordered mode), the entries are computed
 *			again from it; then the old entries are deleted
 *	DELETE	findAndModify removing the fact, then its entries are deleted
 *
 * In transaction mode all of it runs in the MongoDB transaction of the
 * PostgreSQL transaction (xact.c), where the order does not matter (any
 * failure aborts it all), so the facts go first: INSERT writes them before
 * the entries, and UPDATE computes the entries from the fact findAndModify
 * returns.  A statement that begins the MongoDB transaction then begins it
 * with a write of its facts, the command that a migrated chunk of the fact
 * collection makes a stale mongos fail, and which xact.c lets be sent again
 * in the transaction started again.  In ordered mode each step is its own
 * MongoDB write, and the order above is what makes any prefix of the steps
 * a state that reads tolerate and repair_index fixes.  In eventual mode
 * only the facts are written, each final when made as in ordered mode (so
 * that a failed statement is undone the same way, and a read that waits
 * for the applier sees the write at once), and the change-stream applier
 * writes the entries (fdw/applier/applier.c).  Unique index tables cannot be
 * enforced that way, so eventual writes refuse them.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/sysattr.h"
#include "access/table.h"
#include "catalog/pg_type.h"
#include "common/hashfn.h"
#include "executor/executor.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "nodes/makefuncs.h"
#include "optimizer/appendinfo.h"
#include "optimizer/inherit.h"
#include "optimizer/pathnode.h"
#include "parser/parsetree.h"
#include "utils/builtins.h"
#include "utils/datum.h"
#include "utils/hsearch.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"

#include "core/connection.h"
#include "core/convert.h"
#include "core/document.h"
#include "core/guc.h"
#include "core/handle.h"
#include "core/option.h"
#include "core/pg_compat.h"
#include "core/rowid.h"
#include "core/shard_key.h"
#include "core/xact.h"
#include "index/index_catalog.h"
#include "index/index_claims.h"
#include "index/index_write.h"
#include "modify.h"
#include "modify_batch.h"
#include "modify_fact.h"
#include "modify_insert.h"
#include "modify_row.h"
#include "modify_undo.h"
#include "scan.h"
#include "sync/sync_wait.h"

/* Name of the row identity junk column (the _id column's value) */
#define IDX_ROWID_NAME "idxtable_id"

/* fdw_private of a ModifyTable: (target attnums, has RETURNING, may repeat) */
enum IdxModifyPrivate
{
	IdxModPrivTargetAttrs,
	IdxModPrivHasReturning,
	IdxModPrivMayRepeat			/* can the plan give a row twice (a join)? */
};

/*
 * Release libmongoc objects and the client pin (reset callback).
 */
static void
release_modify(void *arg)
{
	IdxModifyState *ms = arg;

	if (ms->facts)
		mongoc_collection_destroy(ms->facts);
	ms->facts = NULL;
	if (ms->pinned)
		idx_client_pin(ms->client, -1);
	ms->pinned = false;
	if (ms->claiming)
		idx_claims_write_end();
	ms->claiming = false;
}

/*
 * In ordered mode with index tables, the statement (or the undo of its
 * failure) writes entries, unique keys' claims among them, before it
 * writes their facts: it is noted as running, so that a repair leaves its
 * young entries alone until it ends (index_claims.h).
 */
static void
note_claiming(IdxModifyState *ms)
{
	if (ms->mode != IDX_CONSISTENCY_ORDERED ||
		idx_writer_nindexes(ms->writer) == 0)
		return;
	idx_claims_write_begin();
	ms->claiming = true;
}

/*
 * Add the _id column as the row identity of UPDATE and DELETE.
 */
void
idxAddForeignUpdateTargets(PlannerInfo *root, Index rtindex,
						   RangeTblEntry *target_rte, Relation target_relation)
{
	IdxTableInfo *info = idx_get_table_info(RelationGetRelid(target_relation));
	Form_pg_attribute attr;
	Var		   *var;

	if (info->id_attnum == InvalidAttrNumber)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("cannot update or delete rows of foreign table \"%s\": it has no column for \"_id\"",
						RelationGetRelationName(target_relation)),
				 errhint("Add a column named _id or with the option (field '_id').")));

	attr = TupleDescAttr(RelationGetDescr(target_relation),
						 info->id_attnum - 1);
	var = makeVar(rtindex, info->id_attnum, attr->atttypid, attr->atttypmod,
				  attr->attcollation, 0);
	add_row_identity_var(root, var, rtindex, IDX_ROWID_NAME);

	/*
	 * A DELETE's filter needs the shard key values of the old row: ask for
	 * the whole row, as the core does for UPDATE (the same Var, so that
	 * the core's own request shares it).
	 */
	if (info->nshard_key > 0 && root->parse->commandType == CMD_DELETE)
		add_row_identity_var(root,
							 makeVar(rtindex, InvalidAttrNumber, RECORDOID,
									 -1, InvalidOid, 0),
							 rtindex, "wholerow");

	/* the handle of the _id as stored, where the value cannot rebuild it */
	var = makeVar(rtindex, SelfItemPointerAttributeNumber, TIDOID, -1,
				  InvalidOid, 0);
	add_row_identity_var(root, var, rtindex, IDX_RAWID_NAME);
}

/*
 * Can the rows to UPDATE or DELETE come more than once: does the query join
 * the target table to anything (UPDATE ... FROM, DELETE ... USING)?
 */
static bool
may_repeat_rows(PlannerInfo *root, Index resultRelation)
{
	List	   *from = root->parse->jointree->fromlist;

	return !(list_length(from) == 1 && IsA(linitial(from), RangeTblRef) &&
			 ((RangeTblRef *) linitial(from))->rtindex == (int) resultRelation);
}

/*
 * Plan a write: remember the assigned columns; refuse updates of _id.
 */
List *
idxPlanForeignModify(PlannerInfo *root, ModifyTable *plan,
					 Index resultRelation, int subplan_index)
{
	CmdType		operation = plan->operation;
	RangeTblEntry *rte = planner_rt_fetch(resultRelation, root);
	Relation	rel = table_open(rte->relid, NoLock);
	TupleDesc	tupdesc = RelationGetDescr(rel);
	List	   *target_attrs = NIL;
	bool		has_returning = plan->returningLists != NIL;

	if (plan->onConflictAction != ONCONFLICT_NONE)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("ON CONFLICT is not supported on foreign table \"%s\"",
						RelationGetRelationName(rel))));

	if (operation == CMD_UPDATE)
	{
		RelOptInfo *baserel = find_base_rel(root, resultRelation);
		Bitmapset  *cols = get_rel_all_updated_cols(root, baserel);
		IdxTableInfo *info = idx_get_table_info(rte->relid);
		int			col = -1;

		while ((col = bms_next_member(cols, col)) >= 0)
		{
			AttrNumber	attno = col + FirstLowInvalidHeapAttributeNumber;

			if (attno <= InvalidAttrNumber)
				elog(ERROR, "system-column update is not supported");
			if (attno == info->id_attnum)
				ereport(ERROR,
						(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
						 errmsg("cannot update column \"%s\" of foreign table \"%s\"",
								NameStr(TupleDescAttr(tupdesc, attno - 1)->attname),
								RelationGetRelationName(rel)),
						 errdetail("The column maps to \"_id\", which identifies a MongoDB document and cannot change."),
						 errhint("Delete the row and insert it with the new value.")));
			target_attrs = lappend_int(target_attrs, attno);
		}
	}
	table_close(rel, NoLock);
	return list_make3(target_attrs, makeBoolean(has_returning),
					  makeBoolean(may_repeat_rows(root, resultRelation)));
}

/*
 * The user to write the foreign table as: the checkAsUser of the table
 * the statement names (the owner of a view written through; for an
 * inheritance child or a partition that tuple routing reached, its root's),
 * else the current user, as in postgres_fdw (core/pg_compat.h).
 */
static Oid
modify_user(EState *estate, ResultRelInfo *rinfo)
{
	return idx_result_rel_user(rinfo, estate);
}

/*
 * Before a write in consistency mode 'eventual': refuse it if the table has
 * a unique index table.  The applier writes the entries after the facts,
 * so a duplicate key would be found only once both facts exist, too late
 * to refuse the write that made it.  (idx_ddl_check_unique_allowed refuses
 * the index in the first place.)
 */
static void
check_eventual_indexes(Relation rel, Oid userid)
{
	ListCell   *lc;

	foreach(lc, idx_get_indexes(RelationGetRelid(rel), userid))
	{
		IdxIndexDef *def = lfirst(lc);

		if (def->unique && def->state != IDX_STATE_FAILED)
			ereport(ERROR,
					(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
					 errmsg("cannot write to foreign table \"%s\" in consistency mode '%s' because it has the unique index table \"%s\"",
							RelationGetRelationName(rel),
							idx_consistency_name(IDX_CONSISTENCY_EVENTUAL),
							def->name),
					 errdetail("In consistency mode '%s' the index tables are written after the facts, so a unique key cannot be enforced.",
							   idx_consistency_name(IDX_CONSISTENCY_EVENTUAL)),
					 errhint("Set the option consistency of the table to '%s' or '%s', or drop the index with idxtable.drop_index().",
							 idx_consistency_name(IDX_CONSISTENCY_TRANSACTION),
							 idx_consistency_name(IDX_CONSISTENCY_ORDERED))));
	}
}

/*
 * Set up the state of a write (INSERT, UPDATE, DELETE, COPY).
 */
static IdxModifyState *
create_modify_state(EState *estate, ResultRelInfo *rinfo, CmdType operation,
					List *target_attrs, bool has_returning, Plan *subplan)
{
	Relation	rel = rinfo->ri_RelationDesc;
	MemoryContext cxt = AllocSetContextCreate(estate->es_query_cxt,
											  "idxtable_fdw modify",
											  ALLOCSET_DEFAULT_SIZES);
	MemoryContext oldcxt = MemoryContextSwitchTo(cxt);
	IdxModifyState *ms = palloc0(sizeof(IdxModifyState));

	ms->cxt = cxt;
	ms->row_cxt = AllocSetContextCreate(cxt, "idxtable_fdw modify row",
										ALLOCSET_DEFAULT_SIZES);
	ms->release_cb.func = release_modify;
	ms->release_cb.arg = ms;
	MemoryContextRegisterResetCallback(cxt, &ms->release_cb);

	ms->rel = rel;
	ms->operation = operation;
	ms->target_attrs = target_attrs;
	ms->has_returning = has_returning;
	ms->info = idx_get_table_info(RelationGetRelid(rel));
	ms->client = idx_get_client_for_rel(RelationGetRelid(rel),
										modify_user(estate, rinfo),
										&ms->server);
	idx_client_pin(ms->client, 1);
	ms->pinned = true;
	ms->mode = idx_xact_mode(ms->info, ms->client, ms->server->servername);
	Assert(ms->mode != IDX_CONSISTENCY_DEFAULT);
	if (operation == CMD_UPDATE && ms->mode != IDX_CONSISTENCY_TRANSACTION)
		idx_shard_key_check_ordered_update(ms->info, RelationGetDescr(rel),
										   target_attrs, ms->mode);
	ms->noted_before = idx_xact_has_ordered_write();
	ms->facts = mongoc_client_get_collection(ms->client, ms->info->database,
											 ms->info->collection);
	if (ms->mode == IDX_CONSISTENCY_EVENTUAL)
	{
		check_eventual_indexes(rel, modify_user(estate, rinfo));
		ms->writer = idx_writer_create_facts_only(ms->info, ms->client,
												  ms->server->servername);
	}
	else
		ms->writer = idx_writer_create(rel, modify_user(estate, rinfo),
									   ms->info, ms->client,
									   ms->server->servername, ms->mode);
	note_claiming(ms);
	ms->preconv = idx_writer_row_conv(ms->writer);
	/* the server's capability, decided here: planning never asks it */
	if (idxtable_enable_bulk_write && ms->mode != IDX_CONSISTENCY_EVENTUAL &&
		idx_writer_nindexes(ms->writer) > 0 &&
		idx_bulk_write_supported(ms->client, ms->server->servername))
	{
		ms->bulk_write = true;
		idx_writer_set_bulk_write(ms->writer, true);
	}
	/*
	 * A key an outside fact holds must be in its unique index first: the
	 * wait starts now and ends before the first write (run_step).
	 */
	if (operation != CMD_DELETE)
		ms->unique_wait =
			idx_sync_write_wait_start(idx_writer_indexes(ms->writer),
									  operation == CMD_UPDATE ? target_attrs : NIL,
									  ms->client, ms->server->servername);
	if (operation == CMD_DELETE && has_returning)
		ms->fullconv = idx_row_conv_create(RelationGetDescr(rel), ms->info,
										   NULL);

	if (idx_modify_batch_wanted(ms, rinfo))
		idx_modify_batch_init(ms);

	if (subplan && (operation == CMD_UPDATE || operation == CMD_DELETE))
	{
		ms->rowid_attno = ExecFindJunkAttributeInTlist(subplan->targetlist,
													   IDX_ROWID_NAME);
		if (!AttributeNumberIsValid(ms->rowid_attno))
			elog(ERROR, "could not find junk _id column");
		ms->wholerow_attno = ExecFindJunkAttributeInTlist(subplan->targetlist,
														  "wholerow");
		ms->rawid_attno = ExecFindJunkAttributeInTlist(subplan->targetlist,
													   IDX_RAWID_NAME);
		ms->estate = estate;
	}
	MemoryContextSwitchTo(oldcxt);
	return ms;
}

static TupleTableSlot *run_step_flush(IdxModifyState *ms);

/*
 * The ModifyTable's subplan returned its last row: write the last batch
 * now, while the executor can still take back the rows MongoDB did not
 * match from its count (modify_batch.c), and before AFTER statement
 * triggers or EXPLAIN ANALYZE look at what the statement did (rowid.h).
 */
static void
flush_at_rows_end(void *arg)
{
	run_step_flush((IdxModifyState *) arg);
}

/*
 * Begin an UPDATE or DELETE (or an INSERT of a plain INSERT statement):
 * set up the write's state; a write in batches writes its last batch when
 * the subplan's rows end.
 */
void
idxBeginForeignModify(ModifyTableState *mtstate, ResultRelInfo *rinfo,
					  List *fdw_private, int subplan_index, int eflags)
{
	IdxModifyState *ms;

	if (eflags & EXEC_FLAG_EXPLAIN_ONLY)
		return;
	ms = create_modify_state(mtstate->ps.state, rinfo, mtstate->operation,
							 (List *) list_nth(fdw_private, IdxModPrivTargetAttrs),
							 boolVal(list_nth(fdw_private, IdxModPrivHasReturning)),
							 outerPlanState(mtstate)->plan);
	ms->may_repeat = boolVal(list_nth(fdw_private, IdxModPrivMayRepeat));
	ms->can_set_tag = mtstate->canSetTag;
	rinfo->ri_FdwState = ms;
	if (ms->batch)
		idx_rowid_on_rows_end(outerPlanState(mtstate), flush_at_rows_end, ms);
}

/*
 * Begin an INSERT that reaches the table by tuple routing or COPY FROM.
 */
void
idxBeginForeignInsert(ModifyTableState *mtstate, ResultRelInfo *rinfo)
{
	rinfo->ri_FdwState =
		create_modify_state(mtstate->ps.state, rinfo, CMD_INSERT, NIL,
							rinfo->ri_returningList != NIL, NULL);
}

/*
 * Rows per ExecForeignBatchInsert call: batch_size, or 1 where the
 * executor needs each row back at once (RETURNING, row triggers, WITH
 * CHECK OPTION).
 */
int
idxGetForeignModifyBatchSize(ResultRelInfo *rinfo)
{
	IdxTableInfo *info;

	if (rinfo->ri_projectReturning != NULL ||
		rinfo->ri_WithCheckOptions != NIL ||
		(rinfo->ri_TrigDesc &&
		 (rinfo->ri_TrigDesc->trig_insert_before_row ||
		  rinfo->ri_TrigDesc->trig_insert_after_row)))
		return 1;
	info = idx_get_table_info(RelationGetRelid(rinfo->ri_RelationDesc));
	return info->batch_size;
}

/*
 * Do two rows agree on every column that entries are computed from?
 */
static bool
same_index_values(IdxModifyState *ms, const Datum *av, const bool *an,
				  const Datum *bv, const bool *bn)
{
	TupleDesc	tupdesc = RelationGetDescr(ms->rel);
	Bitmapset  *needed = idx_writer_needed_attrs(ms->writer);
	int			attnum = -1;

	while ((attnum = bms_next_member(needed, attnum)) >= 0)
	{
		Form_pg_attribute attr = TupleDescAttr(tupdesc, attnum - 1);

		if (an[attnum - 1] != bn[attnum - 1])
			return false;
		if (an[attnum - 1])
			continue;
		if (attr->attlen == -1)
		{
			/* varlena: compare contents, whatever the header format */
			struct varlena *va = pg_detoast_datum_packed((struct varlena *) DatumGetPointer(av[attnum - 1]));
			struct varlena *vb = pg_detoast_datum_packed((struct varlena *) DatumGetPointer(bv[attnum - 1]));

			if (VARSIZE_ANY_EXHDR(va) != VARSIZE_ANY_EXHDR(vb) ||
				memcmp(VARDATA_ANY(va), VARDATA_ANY(vb),
					   VARSIZE_ANY_EXHDR(va)) != 0)
				return false;
		}
		else if (!datumIsEqual(av[attnum - 1], bv[attnum - 1],
							   attr->attbyval, attr->attlen))
			return false;
	}
	return true;
}

/*
 * UPDATE one row (see the file header for the steps).
 */
static TupleTableSlot *
update_row(IdxModifyState *ms, TupleTableSlot *slot, TupleTableSlot *planSlot)
{
	IdxIndexWriter *w = ms->writer;
	bool		indexed = idx_writer_nindexes(w) > 0;
	mongoc_client_session_t *session;
	bson_value_t id;
	bson_t	   *update;
	Datum	   *oldvals = NULL;
	bool	   *oldnulls = NULL;
	bool		have_old;
	bson_t	   *before;

	if (ms->target_attrs == NIL)
		return slot;			/* nothing MongoDB stores changes */
	idx_modify_target_id(ms, planSlot, &id);
	slot_getallattrs(slot);

	/* the update first: a value MongoDB cannot store fails before writes */
	update = idx_row_to_update(ms->info, RelationGetDescr(ms->rel),
							   ms->target_attrs, slot->tts_values,
							   slot->tts_isnull);
	idx_check_document_size(update, idx_modify_max_document_size(ms),
							ms->info, true);
	session = idx_modify_session(ms);

	/* in a transaction, the entries from the fact as it was (file header) */
	have_old = indexed && session == NULL &&
		idx_modify_old_row(ms, planSlot, &oldvals, &oldnulls);
	if (have_old)
	{
		idx_writer_queue(w, 0, oldvals, oldnulls, slot->tts_values,
						 slot->tts_isnull, &id);
		idx_writer_write_new(w, session);
	}

	before = idx_modify_find_and_modify(ms, session, &id,
										idx_modify_target_shard_key(ms, planSlot),
										update,
										ms->mode != IDX_CONSISTENCY_TRANSACTION);
	if (before == NULL)
	{
		/* the fact is gone: take back the entries written for it */
		if (have_old)
			idx_writer_unwrite_row(w, 0, session);
		idx_writer_reset(w);
		return NULL;
	}
	idx_modify_note_written(ms, 1);
	idx_modify_remember_write(ms, UNDO_UPDATED, &id, before);

	if (indexed)
	{
		Datum	   *prevals;
		bool	   *prenulls;

		idx_modify_doc_to_row(ms, ms->preconv, before, &prevals, &prenulls);
		if (!have_old ||
			!same_index_values(ms, prevals, prenulls, oldvals, oldnulls))
		{
			Datum	   *newvals;
			bool	   *newnulls;
			ListCell   *lc;
			int			natts = RelationGetDescr(ms->rel)->natts;

			/*
			 * The fact was not what PostgreSQL read: its new state is the
			 * old fact with our assignments.  Go from the entries written
			 * above to those of the new state, then drop the old fact's.
			 */
			newvals = palloc(sizeof(Datum) * natts);
			newnulls = palloc(sizeof(bool) * natts);
			memcpy(newvals, prevals, sizeof(Datum) * natts);
			memcpy(newnulls, prenulls, sizeof(bool) * natts);
			foreach(lc, ms->target_attrs)
			{
				int			att = lfirst_int(lc);

				newvals[att - 1] = slot->tts_values[att - 1];
				newnulls[att - 1] = slot->tts_isnull[att - 1];
			}
			idx_writer_reset(w);
			if (have_old)
			{
				idx_writer_queue(w, 0, slot->tts_values, slot->tts_isnull,
								 newvals, newnulls, &id);
				idx_writer_write_new(w, session);
				idx_writer_delete_old(w, session);
			}
			idx_writer_queue(w, 0, prevals, prenulls, newvals, newnulls, &id);
			idx_writer_write_new(w, session);
		}
		idx_writer_delete_old(w, session);
	}
	return slot;
}

/*
 * DELETE one row: the fact first, then its entries.
 */
static TupleTableSlot *
delete_row(IdxModifyState *ms, TupleTableSlot *slot, TupleTableSlot *planSlot)
{
	mongoc_client_session_t *session = idx_modify_session(ms);
	bson_value_t id;
	bson_t	   *before;

	idx_modify_target_id(ms, planSlot, &id);
	before = idx_modify_find_and_modify(ms, session, &id,
										idx_modify_target_shard_key(ms, planSlot),
										NULL, ms->has_returning ||
										ms->mode != IDX_CONSISTENCY_TRANSACTION);
	if (before == NULL)
		return NULL;
	idx_modify_note_written(ms, 1);
	idx_modify_remember_write(ms, UNDO_DELETED, &id, before);
	if (idx_writer_nindexes(ms->writer) > 0)
	{
		Datum	   *prevals;
		bool	   *prenulls;

		idx_modify_doc_to_row(ms, ms->preconv, before, &prevals, &prenulls);
		idx_writer_queue(ms->writer, 0, prevals, prenulls, NULL, NULL, &id);
		idx_writer_delete_old(ms->writer, session);
	}
	if (ms->has_returning)
	{
		ExecClearTuple(slot);
		memset(slot->tts_isnull, true,
			   sizeof(bool) * slot->tts_tupleDescriptor->natts);
		idx_document_to_row(ms->fullconv, before, slot->tts_values,
							slot->tts_isnull);
		ExecStoreVirtualTuple(slot);
	}
	return slot;
}

/*
 * One hash bucket of the facts a statement changed.
 */
typedef struct ChangedEntry
{
	uint64		hash;			/* of the _id's BSON */
	List	   *ids;			/* {_id: ..} documents with this hash */
} ChangedEntry;

/*
 * Has this statement changed the fact "planSlot" targets already (an
 * UPDATE ... FROM or DELETE ... USING whose join gives a row twice)?  Then,
 * as for a local table, the row is not changed or counted again.
 * Otherwise remember it.  Only plans with a join (may_repeat) need this.
 */
static bool
changed_before(IdxModifyState *ms, TupleTableSlot *planSlot)
{
	bson_value_t id;
	bson_t		iddoc = BSON_INITIALIZER;
	uint64		hash;
	ChangedEntry *entry;
	bool		found;
	ListCell   *lc;
	MemoryContext oldcxt;

	if (ms->changed == NULL)
	{
		HASHCTL		ctl;

		ctl.keysize = sizeof(uint64);
		ctl.entrysize = sizeof(ChangedEntry);
		ctl.hcxt = ms->cxt;
		ms->changed = hash_create("idxtable_fdw changed facts", 256, &ctl,
								  HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
	}
	idx_modify_target_id(ms, planSlot, &id);
	idx_check_append(BSON_APPEND_VALUE(&iddoc, "_id", &id));
	hash = hash_bytes_extended(bson_get_data(&iddoc), (int) iddoc.len, 0);
	entry = hash_search(ms->changed, &hash, HASH_ENTER, &found);
	if (!found)
		entry->ids = NIL;
	foreach(lc, entry->ids)
	{
		if (idx_bson_same_bytes(lfirst(lc), &iddoc))
		{
			bson_destroy(&iddoc);
			return true;
		}
	}
	oldcxt = MemoryContextSwitchTo(ms->cxt);
	entry->ids = lappend(entry->ids, idx_bson_pcopy(&iddoc));
	MemoryContextSwitchTo(oldcxt);
	bson_destroy(&iddoc);
	return false;
}

/*
 * The steps run_step() runs.
 */
typedef enum WriteStep
{
	STEP_INSERT,
	STEP_UPDATE,
	STEP_DELETE,
	STEP_BATCH,					/* UPDATE or DELETE into the batch */
	STEP_FLUSH,					/* write the batch */
	STEP_NONE					/* nothing (a fact changed before) */
} WriteStep;

/*
 * Run one write step with round trips counted and per-row memory.  The
 * first one ends the statement's wait for the appliers of its unique
 * indexes (create_modify_state), before anything is written.  An error
 * undoes what the statement wrote where its writes are final
 * (modify_undo.c), then is raised on.
 */
static TupleTableSlot *
run_step(IdxModifyState *ms, WriteStep step, TupleTableSlot **slots, int n,
		 TupleTableSlot *planSlot)
{
	MemoryContext oldcxt;
	uint64	   *prev;
	TupleTableSlot *result = NULL;

	if (ms->unique_wait)
	{
		idx_sync_write_wait_end(ms->unique_wait);
		ms->unique_wait = NULL;
	}
	MemoryContextReset(ms->row_cxt);
	oldcxt = MemoryContextSwitchTo(ms->row_cxt);
	prev = idx_count_round_trips(&ms->round_trips);
	PG_TRY();
	{
		CHECK_FOR_INTERRUPTS();
		if (ms->may_repeat && step != STEP_INSERT && step != STEP_FLUSH &&
			changed_before(ms, planSlot))
			step = STEP_NONE;
		switch (step)
		{
			case STEP_INSERT:
				idx_modify_insert_rows(ms, slots, n);
				result = slots[0];
				break;
			case STEP_UPDATE:
				result = update_row(ms, slots[0], planSlot);
				break;
			case STEP_DELETE:
				result = delete_row(ms, slots[0], planSlot);
				break;
			case STEP_BATCH:
				idx_modify_batch_add(ms, slots[0], planSlot);
				result = slots[0];
				break;
			case STEP_FLUSH:
				idx_modify_batch_flush(ms);
				break;
			case STEP_NONE:
				break;
		}
	}
	PG_CATCH();
	{
		idx_count_round_trips(prev);
		MemoryContextSwitchTo(oldcxt);
		if (ms->undo != NIL || ms->undo_overflow ||
			idx_writer_must_take_back(ms->writer))
			idx_modify_fail_statement(ms);
		PG_RE_THROW();
	}
	PG_END_TRY();
	idx_count_round_trips(prev);
	MemoryContextSwitchTo(oldcxt);
	return result;
}

/*
 * Write the batch (a step of its own).
 */
static TupleTableSlot *
run_step_flush(IdxModifyState *ms)
{
	return run_step(ms, STEP_FLUSH, NULL, 0, NULL);
}

/*
 * INSERT one row (a batch of one).
 */
TupleTableSlot *
idxExecForeignInsert(EState *estate, ResultRelInfo *rinfo,
					 TupleTableSlot *slot, TupleTableSlot *planSlot)
{
	return run_step(rinfo->ri_FdwState, STEP_INSERT, &slot, 1, planSlot);
}

/*
 * INSERT a batch of rows (idxGetForeignModifyBatchSize).
 */
TupleTableSlot **
idxExecForeignBatchInsert(EState *estate, ResultRelInfo *rinfo,
						  TupleTableSlot **slots, TupleTableSlot **planSlots,
						  int *numSlots)
{
	run_step(rinfo->ri_FdwState, STEP_INSERT, slots, *numSlots, NULL);
	return slots;
}

/*
 * UPDATE one row, at once or into the batch.
 */
TupleTableSlot *
idxExecForeignUpdate(EState *estate, ResultRelInfo *rinfo,
					 TupleTableSlot *slot, TupleTableSlot *planSlot)
{
	IdxModifyState *ms = rinfo->ri_FdwState;

	return run_step(ms, ms->batch ? STEP_BATCH : STEP_UPDATE, &slot, 1,
					planSlot);
}

/*
 * DELETE one row, at once or into the batch.
 */
TupleTableSlot *
idxExecForeignDelete(EState *estate, ResultRelInfo *rinfo,
					 TupleTableSlot *slot, TupleTableSlot *planSlot)
{
	IdxModifyState *ms = rinfo->ri_FdwState;

	return run_step(ms, ms->batch ? STEP_BATCH : STEP_DELETE, &slot, 1,
					planSlot);
}

/*
 * End of a write: release everything.  The last batch was written when
 * the subplan's rows ended; one left here (a ModifyTable that never read
 * its subplan to the end) is written before the state goes.
 */
void
idxEndForeignModify(EState *estate, ResultRelInfo *rinfo)
{
	IdxModifyState *ms = rinfo->ri_FdwState;

	if (ms == NULL)
		return;
	if (ms->batch)
	{
		idx_rowid_forget_rows_end(estate, ms);
		run_step_flush(ms);
	}
	MemoryContextDelete(ms->cxt);
	rinfo->ri_FdwState = NULL;
}

/*
 * End of an INSERT by tuple routing or COPY FROM: as for any write.
 */
void
idxEndForeignInsert(EState *estate, ResultRelInfo *rinfo)
{
	idxEndForeignModify(estate, rinfo);
}

/*
 * All of INSERT, UPDATE and DELETE are supported.
 */
int
idxIsForeignRelUpdatable(Relation rel)
{
	return (1 << CMD_INSERT) | (1 << CMD_UPDATE) | (1 << CMD_DELETE);
}

/*
 * EXPLAIN: the index tables the write maintains, the consistency mode;
 * with ANALYZE what was written and how many round trips it took.  It
 * only reports: the last batch was written when the subplan's rows ended,
 * inside ExecutorRun, so the counters are final when EXPLAIN prints them.
 */
void
idxExplainForeignModify(ModifyTableState *mtstate, ResultRelInfo *rinfo,
						List *fdw_private, int subplan_index,
						ExplainState *es)
{
	Oid			relid = RelationGetRelid(rinfo->ri_RelationDesc);
	IdxTableInfo *info = idx_get_table_info(relid);
	IdxModifyState *ms = rinfo->ri_FdwState;
	List	   *names = NIL;
	ListCell   *lc;

	/* in eventual mode the applier maintains them, not the write */
	foreach(lc, info->consistency == IDX_CONSISTENCY_EVENTUAL ? NIL :
			idx_get_indexes(relid, modify_user(mtstate->ps.state, rinfo)))
	{
		IdxIndexDef *def = lfirst(lc);

		if (def->state != IDX_STATE_FAILED)
			names = lappend(names, def->name);
	}
	if (names != NIL)
		ExplainPropertyList("Index Tables Maintained", names, es);
	ExplainPropertyText("Consistency",
						idx_consistency_name(ms ? ms->mode : info->consistency),
						es);
	if (ms && ms->batch)
		ExplainPropertyInteger("Batch Size", NULL, info->batch_size, es);
	if (ms && es->analyze)
	{
		uint64		written,
					deleted;

		idx_writer_counters(ms->writer, &written, &deleted);
		ExplainPropertyUInteger("Facts Written", NULL, ms->facts_written, es);
		ExplainPropertyUInteger("Index Entries Written", NULL, written, es);
		ExplainPropertyUInteger("Index Entries Deleted", NULL, deleted, es);
		ExplainPropertyUInteger("Round Trips", NULL, ms->round_trips, es);
	}
}
