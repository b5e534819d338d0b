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
 * writes the entries (fdw/sync/applier.c).  Unique index tables cannot be
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
#include "core/mongo_limits.h"
#include "core/option.h"
#include "core/pg_compat.h"
#include "core/protocol_read.h"
#include "core/rowid.h"
#include "core/shard_key.h"
#include "core/xact.h"
#include "index/index_catalog.h"
#include "index/index_claims.h"
#include "index/index_entry.h"
#include "index/index_write.h"
#include "modify.h"
#include "modify_int.h"
#include "scan.h"
#include "sync/sync_wait.h"
#include "sync/xact_marker.h"

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
	if (!ms->ordered || ms->eventual ||
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
 * to refuse the write that made it.
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
					 errmsg("cannot write to foreign table \"%s\" in consistency mode 'eventual' because it has the unique index table \"%s\"",
							RelationGetRelationName(rel), def->name),
					 errdetail("In consistency mode 'eventual' the index tables are written after the facts, so a unique key cannot be enforced."),
					 errhint("Set the option consistency of the table to 'transaction' or 'ordered', or drop the index with idxtable.drop_index().")));
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
	IdxConsistency mode;

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
	mode = idx_xact_mode(ms->info, ms->client, ms->server->servername);
	ms->eventual = (mode == IDX_CONSISTENCY_EVENTUAL);
	ms->ordered = (mode == IDX_CONSISTENCY_ORDERED || ms->eventual);
	if (operation == CMD_UPDATE && ms->ordered)
		idx_shard_key_check_ordered_update(ms->info, RelationGetDescr(rel),
										   target_attrs,
										   idx_modify_mode_name(ms));
	ms->noted_before = idx_xact_has_ordered_write();
	ms->facts = mongoc_client_get_collection(ms->client, ms->info->database,
											 ms->info->collection);
	if (ms->eventual)
	{
		check_eventual_indexes(rel, modify_user(estate, rinfo));
		ms->writer = idx_writer_create_facts_only(ms->info, ms->client,
												  ms->server->servername);
	}
	else
		ms->writer = idx_writer_create(rel, modify_user(estate, rinfo),
									   ms->info, ms->client,
									   ms->server->servername, ms->ordered);
	note_claiming(ms);
	ms->preconv = idx_writer_row_conv(ms->writer);
	/* the server's capability, decided here: planning never asks it */
	if (idxtable_enable_bulk_write && !ms->eventual &&
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

/*
 * Inserting into the facts of write "ms", for messages.
 */
const IdxOp *
idx_modify_insert_what(IdxModifyState *ms)
{
	return idx_op(IDX_OP_INSERT, ms->info->collection, ms->info->database);
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
 * The MongoDB session of this write: the transaction's, started now if
 * needed, or none in ordered mode.
 */
mongoc_client_session_t *
idx_modify_session(IdxModifyState *ms)
{
	mongoc_client_session_t *session;
	bool		starts;
	List	   *defs;

	if (ms->ordered)
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
 * The consistency mode of the write, as the option "consistency" names it
 * (for messages).
 */
const char *
idx_modify_mode_name(IdxModifyState *ms)
{
	if (ms->eventual)
		return "eventual";
	return ms->ordered ? "ordered" : "transaction";
}

/*
 * Count facts written; in ordered and eventual mode they are final now,
 * which the transaction remembers for its warning at rollback.
 */
void
idx_modify_note_written(IdxModifyState *ms, int n)
{
	ms->facts_written += n;
	if (ms->ordered)
		idx_xact_note_ordered_write(ms->info->relname,
									idx_modify_mode_name(ms));
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
 * Give a row without _id a new ObjectId (stored in the slot, so that
 * RETURNING shows it) and return the row's BSON _id.
 */
void
idx_modify_row_id(IdxModifyState *ms, TupleTableSlot *slot, bson_value_t *id)
{
	AttrNumber	idatt = ms->info->id_attnum;
	bson_oid_t	oid;

	if (idatt != InvalidAttrNumber && !slot->tts_isnull[idatt - 1])
	{
		idx_id_value(slot->tts_values[idatt - 1],
					 TupleDescAttr(slot->tts_tupleDescriptor, idatt - 1)->atttypid,
					 id);
		return;
	}
	if (idatt != InvalidAttrNumber)
	{
		Oid			typid = TupleDescAttr(slot->tts_tupleDescriptor, idatt - 1)->atttypid;
		char		hex[25];

		if (!idx_id_type_takes_objectid(typid))
			ereport(ERROR,
					(errcode(ERRCODE_NOT_NULL_VIOLATION),
					 errmsg("null value in column \"%s\" of relation \"%s\" violates not-null constraint",
							NameStr(TupleDescAttr(slot->tts_tupleDescriptor, idatt - 1)->attname),
							ms->info->relname),
					 errdetail("A new ObjectId can only be generated for a text _id column; a column of type %s needs a value.",
							   format_type_be(typid))));
		bson_oid_init(&oid, NULL);
		bson_oid_to_string(&oid, hex);
		slot->tts_values[idatt - 1] = typid == NAMEOID
			? DirectFunctionCall1(namein, CStringGetDatum(hex))
			: CStringGetTextDatum(hex);
		slot->tts_isnull[idatt - 1] = false;
	}
	else
		bson_oid_init(&oid, NULL);
	id->value_type = BSON_TYPE_OID;
	bson_oid_copy(&oid, &id->value.v_oid);
}

/*
 * The DETAIL of a duplicate fact: "Key (_id)=(x) already exists.", the
 * value only for a role that may read the _id column (as PostgreSQL shows
 * key values), no DETAIL at all without a row.
 */
int
idx_modify_errdetail_duplicate_id(IdxModifyState *ms, TupleTableSlot *slot)
{
	AttrNumber	idatt = ms->info->id_attnum;
	Oid			outfunc;
	bool		isvarlena;
	Form_pg_attribute attr;

	if (slot == NULL)
		return 0;
	if (idatt == InvalidAttrNumber)
		return errdetail("Key (_id) already exists.");
	attr = TupleDescAttr(slot->tts_tupleDescriptor, idatt - 1);
	if (!idx_id_visible(RelationGetRelid(ms->rel), idatt))
		return errdetail("Key (%s) already exists.", NameStr(attr->attname));
	getTypeOutputInfo(attr->atttypid, &outfunc, &isvarlena);
	return errdetail("Key (%s)=(%s) already exists.", NameStr(attr->attname),
					 OidOutputFunctionCall(outfunc,
										   slot->tts_values[idatt - 1]));
}

/*
 * Read the row of a fact document into palloc'd values/nulls (all NULL
 * except the columns "conv" converts).
 */
void
idx_modify_doc_to_row(IdxModifyState *ms, IdxRowConv *conv, const bson_t *doc,
		   Datum **values, bool **nulls)
{
	int			natts = RelationGetDescr(ms->rel)->natts;

	*values = palloc0(sizeof(Datum) * Max(natts, 1));
	*nulls = palloc(sizeof(bool) * Max(natts, 1));
	memset(*nulls, true, sizeof(bool) * Max(natts, 1));
	idx_document_to_row(conv, doc, *values, *nulls);
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

/*
 * Do two rows agree on every column that entries are computed from?
 */
bool
idx_modify_same_index_values(IdxModifyState *ms, const Datum *av, const bool *an,
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
 * The row identity (_id) of the row being updated or deleted, as BSON: the
 * _id as the scan read it where the column's value cannot write it back
 * exactly (rowid.h), else the one the value writes.
 */
void
idx_modify_target_id(IdxModifyState *ms, TupleTableSlot *planSlot, bson_value_t *id)
{
	bool		isnull;
	Datum		value;

	if (AttributeNumberIsValid(ms->rawid_attno))
	{
		value = ExecGetJunkAttribute(planSlot, ms->rawid_attno, &isnull);
		if (!isnull &&
			idx_rowid_lookup(ms->estate, (ItemPointer) DatumGetPointer(value), id))
			return;
	}
	value = ExecGetJunkAttribute(planSlot, ms->rowid_attno, &isnull);
	if (isnull)
		elog(ERROR, "_id of the row to modify is NULL");
	idx_id_value(value,
				 TupleDescAttr(RelationGetDescr(ms->rel),
							   ms->info->id_attnum - 1)->atttypid,
				 id);
}

/*
 * The old row PostgreSQL read (the whole-row junk column), or false.
 */
bool
idx_modify_old_row(IdxModifyState *ms, TupleTableSlot *planSlot, Datum **values,
		bool **nulls)
{
	TupleDesc	tupdesc = RelationGetDescr(ms->rel);
	HeapTupleData tuple;
	HeapTupleHeader td;
	bool		isnull;
	Datum		datum;

	if (!AttributeNumberIsValid(ms->wholerow_attno))
		return false;
	datum = ExecGetJunkAttribute(planSlot, ms->wholerow_attno, &isnull);
	if (isnull)
		return false;
	td = DatumGetHeapTupleHeader(datum);
	tuple.t_len = HeapTupleHeaderGetDatumLength(td);
	ItemPointerSetInvalid(&tuple.t_self);
	tuple.t_tableOid = InvalidOid;
	tuple.t_data = td;
	*values = palloc(sizeof(Datum) * tupdesc->natts);
	*nulls = palloc(sizeof(bool) * tupdesc->natts);
	heap_deform_tuple(&tuple, tupdesc, *values, *nulls);
	return true;
}

/*
 * The shard key values of the row being updated or deleted, as it was
 * read (the whole-row junk column), or NULL if the table has no shard key.
 */
bson_t *
idx_modify_target_shard_key(IdxModifyState *ms, TupleTableSlot *planSlot)
{
	Datum	   *values;
	bool	   *nulls;

	if (ms->info->nshard_key == 0)
		return NULL;
	if (!idx_modify_old_row(ms, planSlot, &values, &nulls))
		elog(ERROR, "could not find the whole-row junk column of foreign table \"%s\"",
			 ms->info->relname);
	return idx_shard_key_of_row(ms->info, RelationGetDescr(ms->rel), values,
								nulls);
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
										update, ms->ordered);
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
			!idx_modify_same_index_values(ms, prevals, prenulls, oldvals, oldnulls))
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
										NULL, ms->has_returning || ms->ordered);
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
 * Run one write step with round trips counted and per-row memory.  The
 * first one ends the statement's wait for the appliers of its unique
 * indexes (create_modify_state), before anything is written.
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

TupleTableSlot *
idxExecForeignInsert(EState *estate, ResultRelInfo *rinfo,
					 TupleTableSlot *slot, TupleTableSlot *planSlot)
{
	return run_step(rinfo->ri_FdwState, STEP_INSERT, &slot, 1, planSlot);
}

TupleTableSlot **
idxExecForeignBatchInsert(EState *estate, ResultRelInfo *rinfo,
						  TupleTableSlot **slots, TupleTableSlot **planSlots,
						  int *numSlots)
{
	run_step(rinfo->ri_FdwState, STEP_INSERT, slots, *numSlots, NULL);
	return slots;
}

TupleTableSlot *
idxExecForeignUpdate(EState *estate, ResultRelInfo *rinfo,
					 TupleTableSlot *slot, TupleTableSlot *planSlot)
{
	IdxModifyState *ms = rinfo->ri_FdwState;

	return run_step(ms, ms->batch ? STEP_BATCH : STEP_UPDATE, &slot, 1,
					planSlot);
}

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
	if (ms)
		ExplainPropertyText("Consistency", idx_modify_mode_name(ms), es);
	else
		ExplainPropertyText("Consistency",
							info->consistency == IDX_CONSISTENCY_ORDERED ? "ordered"
							: info->consistency == IDX_CONSISTENCY_TRANSACTION ? "transaction"
							: info->consistency == IDX_CONSISTENCY_EVENTUAL ? "eventual"
							: "transaction if supported, else ordered", es);
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
