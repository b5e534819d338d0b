/*-------------------------------------------------------------------------
 *
 * modify_insert.c
 *		  INSERT batches: the facts written, then their index entries; a
 *		  failed batch's duplicates reported and its other facts removed.
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/modify_insert.c
 *
 * The steps of a batch and their order are modify.c's (run_step); this
 * file writes one INSERT batch in the order of index_write.h's protocol,
 * as one bulk per collection or as one bulkWrite command (MongoDB 8.0).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "executor/executor.h"
#include "fmgr.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
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
#include "index/bulk_write.h"
#include "index/index_write.h"
#include "modify_fact.h"
#include "modify_insert.h"

/*
 * Inserting into the facts of write "ms", for messages.
 */
static const IdxOp *
insert_what(IdxModifyState *ms)
{
	return idx_op(IDX_OP_INSERT, ms->info->collection, ms->info->database);
}

/*
 * Give a row without _id a new ObjectId (stored in the slot, so that
 * RETURNING shows it) and return the row's BSON _id.
 */
static void
row_id(IdxModifyState *ms, TupleTableSlot *slot, bson_value_t *id)
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
static int
errdetail_duplicate_id(IdxModifyState *ms, TupleTableSlot *slot)
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
 * Delete the facts ids[from..] of a failed insert batch that are not
 * duplicates (dup[i]), with one deleteMany {_id: {$in: [...]}} of at most
 * IDX_IN_LIST_MAX_BYTES of _ids; returns where the next one starts.
 */
static int
remove_inserted(IdxModifyState *ms, bson_value_t *ids, bson_t **docs,
				const bool *dup, int from, int n)
{
	bson_t		filter = BSON_INITIALIZER;
	bson_t		ids_in;
	bson_t		in;
	bson_t		dreply;
	bson_error_t derror;
	int			k = 0;
	int			i;

	idx_check_append(BSON_APPEND_DOCUMENT_BEGIN(&filter, "_id", &in));
	idx_check_append(IDX_BSON_APPEND_ARRAY_BEGIN(&in, "$in", &ids_in));
	/* with a shard key, the $or below repeats each _id beside its key */
	for (i = from; i < n && ids_in.len < IDX_IN_LIST_MAX_BYTES /
		 (ms->info->nshard_key > 0 ? 3 : 1); i++)
	{
		char		key[16];

		if (dup[i])
			continue;
		snprintf(key, sizeof(key), "%d", k++);
		idx_check_append(BSON_APPEND_VALUE(&ids_in, key, &ids[i]));
	}
	idx_check_append(bson_append_array_end(&in, &ids_in));
	idx_check_append(bson_append_document_end(&filter, &in));
	idx_shard_key_restrict(ms->info, &filter, docs + from, dup + from,
						   i - from);
	if (k > 0 && !mongoc_collection_delete_many(ms->facts, &filter, NULL,
												&dreply, &derror))
		idx_report_reply_error(&dreply, &derror, ms->server->servername,
							   idx_op(IDX_OP_UNDO_INSERT, ms->info->collection,
									  ms->info->database));
	if (k > 0)
		bson_destroy(&dreply);
	bson_destroy(&filter);
	return i;
}

/*
 * The fact bulk insert of a batch failed.  A write concern error means
 * the facts were written: in ordered mode they are remembered for the
 * statement's undo before the error is raised.  A duplicate _id is a unique
 * violation; in ordered mode the batch's other facts and all entries the
 * batch wrote are removed again first (entries it wrote over those of the
 * existing facts are written back as those facts have them).  Other errors are reported as they are (in ordered
 * mode the entries already written are orphans that reads skip).
 */
static void
insert_failed(IdxModifyState *ms, TupleTableSlot **slots, bson_value_t *ids,
			  bson_t **docs, int n, mongoc_client_session_t *session,
			  bson_t *reply, const bson_error_t *error)
{
	int		   *indexes,
			   *codes;
	int			nerr = idx_bulk_write_errors(reply, &indexes, &codes);
	bool	   *dup = palloc0(sizeof(bool) * n);
	int			first = -1;
	int			i;

	if (nerr == 0 && idx_is_write_concern_error(error))
	{
		/* all were written, only not acknowledged as asked: undo them */
		for (i = 0; i < n; i++)
			idx_modify_remember_write(ms, UNDO_INSERTED, &ids[i], NULL);
		idx_report_reply_error(reply, error, ms->server->servername,
							   insert_what(ms));
	}
	for (i = 0; i < nerr; i++)
	{
		if (codes[i] != 11000 || indexes[i] < 0 || indexes[i] >= n)
			break;
		dup[indexes[i]] = true;
		if (first < 0 || indexes[i] < first)
			first = indexes[i];
	}
	if (nerr == 0 && error->code == 11000 &&
		ms->mode == IDX_CONSISTENCY_TRANSACTION &&
		!mongoc_error_has_label(reply, "TransientTransactionError"))
	{
		/* a transaction fails the whole command: find the duplicate */
		for (i = 0; i < n && first < 0; i++)
		{
			if (idx_modify_fetch_fact(ms, &ids[i], NULL, false) != NULL)
				first = i;
		}
		ereport(ERROR,
				(errcode(ERRCODE_UNIQUE_VIOLATION),
				 errmsg("duplicate key value violates unique constraint \"%s\"",
						"_id_"),
				 errdetail_duplicate_id(ms, first >= 0 ? slots[first] : NULL)));
	}
	if (nerr == 0 || i < nerr ||
		mongoc_error_has_label(reply, "TransientTransactionError"))
		idx_report_reply_error(reply, error, ms->server->servername,
							   insert_what(ms));

	if (ms->mode != IDX_CONSISTENCY_TRANSACTION)
	{
		/* remove the facts of this batch that did get in */
		for (i = 0; i < n;)
			i = remove_inserted(ms, ids, docs, dup, i, n);

		/* then their entries */
		for (i = 0; i < n && idx_writer_nindexes(ms->writer) > 0; i++)
			idx_writer_unwrite_row(ms->writer, i, NULL);
	}
	ereport(ERROR,
			(errcode(ERRCODE_UNIQUE_VIOLATION),
			 errmsg("duplicate key value violates unique constraint \"%s\"",
					"_id_"),
			 errdetail_duplicate_id(ms, slots[first])));
}

/*
 * The fact documents of a batch of rows, built (and so checked: JSON keys,
 * size) before anything is written; palloc'd.
 */
static bson_t **
build_documents(IdxModifyState *ms, TupleTableSlot **slots,
				bson_value_t *ids, int n)
{
	TupleDesc	tupdesc = RelationGetDescr(ms->rel);
	int64		max_size = idx_modify_max_document_size(ms);
	bson_t	  **docs = palloc(sizeof(bson_t *) * n);
	int			i;

	for (i = 0; i < n; i++)
	{
		docs[i] = idx_row_to_document(ms->info, tupdesc, slots[i]->tts_values,
									  slots[i]->tts_isnull, &ids[i]);
		idx_check_document_size(docs[i], max_size, ms->info, false);
	}
	return docs;
}

/*
 * The bulk insert of a batch's facts, every document queued (libmongoc
 * checks each as it is queued), nothing sent yet.
 */
static mongoc_bulk_operation_t *
queue_documents(IdxModifyState *ms, mongoc_client_session_t *session,
				bson_t **docs, int n)
{
	bson_t		opts = BSON_INITIALIZER;
	mongoc_bulk_operation_t *bulk;
	bson_error_t error;
	int			i;

	idx_check_append(BSON_APPEND_BOOL(&opts, "ordered", false));
	idx_modify_append_session(ms, session, &opts, insert_what(ms));
	bulk = mongoc_collection_create_bulk_operation_with_opts(ms->facts, &opts);
	bson_destroy(&opts);
	for (i = 0; i < n; i++)
	{
		if (!mongoc_bulk_operation_insert_with_opts(bulk, docs[i], NULL,
													&error))
			idx_document_refused(ms->info, bulk, &error);
	}
	return bulk;
}

/*
 * A batch of facts was inserted: count them, remember them for the undo
 * of ordered mode, and forget the entries' queue.
 */
static void
inserted(IdxModifyState *ms, bson_value_t *ids, bson_t **docs, int n)
{
	int			i;

	idx_modify_note_written(ms, n);
	for (i = 0; i < n; i++)
		idx_modify_remember_write(ms, UNDO_INSERTED, &ids[i],
								  idx_shard_key_of_document(ms->info,
															docs[i]));
	idx_writer_reset(ms->writer);
}

/*
 * Can every fact of the batch go in a bulkWrite?  Its command document is
 * limited to 16 MB with the ops, where an insert's documents are not: a
 * fact near the limit goes by the insert command.
 */
static bool
facts_fit_bulk_write(bson_t **docs, int n)
{
	int			i;

	for (i = 0; i < n; i++)
	{
		if (!idx_bulk_write_fits(docs[i]))
			return false;
	}
	return true;
}

/*
 * A fact insert of a bulkWrite failed (op "row" of the facts): a duplicate
 * _id is remembered in dup[] (the caller goes on after it, and reports it
 * when the command is done, as insert_failed() does for a bulk); any other
 * error is raised, after the facts written before it (ordered: those
 * before "row" that are no duplicates) are remembered for the undo.
 */
static void
bulk_write_fact_failed(IdxModifyState *ms, IdxBulkWrite *bw,
					   const IdxBulkWriteError *failed, int row,
					   bson_value_t *ids, bool *dup)
{
	int			i;

	if (failed->code == 11000)
	{
		dup[row] = true;
		return;
	}
	for (i = 0; i < row; i++)
	{
		if (!dup[i])
			idx_modify_remember_write(ms, UNDO_INSERTED, &ids[i], NULL);
	}
	idx_bulk_write_report(bw, failed, insert_what(ms));
}

/*
 * The duplicate _ids of a bulkWrite's facts, reported as insert_failed()
 * reports those of a bulk insert (it undoes the rest in ordered mode).
 */
static void
bulk_write_duplicates(IdxModifyState *ms, TupleTableSlot **slots,
					  bson_value_t *ids, bson_t **docs, int n,
					  mongoc_client_session_t *session, const bool *dup)
{
	bson_t	   *reply = bson_new();
	bson_t		errors;
	bson_error_t error = {0};
	int			k = 0;
	int			i;

	idx_own_bson(reply);
	idx_check_append(IDX_BSON_APPEND_ARRAY_BEGIN(reply, "writeErrors", &errors));
	for (i = 0; i < n; i++)
	{
		bson_t		werr;
		char		key[16];

		if (!dup[i])
			continue;
		snprintf(key, sizeof(key), "%d", k++);
		idx_check_append(BSON_APPEND_DOCUMENT_BEGIN(&errors, key, &werr));
		idx_check_append(BSON_APPEND_INT32(&werr, "index", i));
		idx_check_append(BSON_APPEND_INT32(&werr, "code", 11000));
		idx_check_append(bson_append_document_end(&errors, &werr));
	}
	idx_check_append(bson_append_array_end(reply, &errors));
	error.domain = MONGOC_ERROR_SERVER;
	error.code = 11000;
	insert_failed(ms, slots, ids, docs, n, session, reply, &error);
}

/*
 * Insert a batch with one bulkWrite (MongoDB 8.0): the new entries of all
 * index collections, then the facts, ordered, so that ordered mode's
 * crash-safe order holds within the command.  A failed op ends the
 * command; the ops after it go in the next one (ordered mode takes over
 * an orphaned claim there, as write_new does; a duplicate _id is reported
 * once all facts were tried, as an unordered bulk insert does).
 */
static void
insert_rows_bulk_write(IdxModifyState *ms, TupleTableSlot **slots,
					   bson_value_t *ids, bson_t **docs, int n,
					   mongoc_client_session_t *session)
{
	IdxBulkWrite *bw = idx_bulk_write_create(ms->client,
											 ms->server->servername);
	IdxBulkWriteError failed;
	bool	   *dup = palloc0(sizeof(bool) * n);
	bool		any_dup = false;
	const IdxOp *what = insert_what(ms);
	int			first_fact;
	int			from = 0;
	int			i;

	for (i = 0; i < n; i++)
		idx_writer_queue(ms->writer, i, NULL, NULL, slots[i]->tts_values,
						 slots[i]->tts_isnull, &ids[i]);
	idx_writer_add_new(ms->writer, bw);
	first_fact = idx_bulk_write_nops(bw);
	for (i = 0; i < n; i++)
		idx_bulk_write_insert(bw, ms->info->database, ms->info->collection,
							  docs[i]);
	while (!idx_bulk_write_execute(bw, from, session, what, &failed))
	{
		if (failed.op >= idx_bulk_write_nops(bw))
		{
			/* all written, only not acknowledged as asked: undo them */
			for (i = 0; i < n; i++)
				if (!dup[i])
					idx_modify_remember_write(ms, UNDO_INSERTED, &ids[i], NULL);
			idx_bulk_write_report(bw, &failed, what);
		}
		if (failed.op < first_fact)
		{
			if (!idx_writer_bulk_failed(ms->writer, bw, &failed))
				idx_bulk_write_report(bw, &failed, what);
		}
		else
		{
			bulk_write_fact_failed(ms, bw, &failed, failed.op - first_fact,
								   ids, dup);
			any_dup = true;
			if (ms->mode == IDX_CONSISTENCY_TRANSACTION)
				break;			/* the transaction is aborted */
		}
		from = failed.op + 1;
	}
	idx_writer_bulk_done(ms->writer, first_fact);
	if (any_dup)
		bulk_write_duplicates(ms, slots, ids, docs, n, session, dup);
}

/*
 * Insert a batch of rows: the fact documents are built and queued first
 * (anything MongoDB cannot store fails here, before any write), then the
 * entries are written, then the facts in one bulk.  In a MongoDB
 * transaction the facts go first (the order of a transaction's writes
 * does not matter, any failure aborts it all): a batch that begins the
 * transaction then begins it with its facts, the command that meets a
 * migrated chunk of the fact collection, which can be sent again in the
 * transaction started again (idx_xact_restart_first).
 */
void
idx_modify_insert_rows(IdxModifyState *ms, TupleTableSlot **slots, int n)
{
	mongoc_client_session_t *session;
	mongoc_bulk_operation_t *bulk;
	IdxHandle  *owned_bulk;
	bson_value_t *ids = palloc(sizeof(bson_value_t) * n);
	bson_t	  **docs;
	bson_t		reply;
	bson_error_t error;
	bool		ok;
	int			i;
	uint64	   *prev;
	bool		first;
	int			attempts = 0;

	for (i = 0; i < n; i++)
	{
		slot_getallattrs(slots[i]);
		row_id(ms, slots[i], &ids[i]);
	}
	docs = build_documents(ms, slots, ids, n);
	session = idx_modify_session(ms);
	if (ms->bulk_write && facts_fit_bulk_write(docs, n))
	{
		insert_rows_bulk_write(ms, slots, ids, docs, n, session);
		inserted(ms, ids, docs, n);
		return;
	}
	bulk = queue_documents(ms, session, docs, n);
	owned_bulk = idx_own_bulk(bulk);

	for (i = 0; i < n && idx_writer_nindexes(ms->writer) > 0; i++)
		idx_writer_queue(ms->writer, i, NULL, NULL, slots[i]->tts_values,
						 slots[i]->tts_isnull, &ids[i]);
	if (session == NULL)
		idx_writer_write_new(ms->writer, session);

	first = idx_xact_sends_first(session);
	for (;;)
	{
		prev = idx_count_round_trips(&ms->round_trips);
		ok = mongoc_bulk_operation_execute(bulk, &reply, &error);
		idx_count_round_trips(prev);
		idx_release(owned_bulk);
		if (ok || !first ||
			!idx_xact_restart_first(session, &reply, &error, &attempts))
			break;
		/* the transaction was started again: send the facts again */
		bson_destroy(&reply);
		bulk = queue_documents(ms, session, docs, n);
		owned_bulk = idx_own_bulk(bulk);
	}
	if (!ok)
	{
		bson_t	   *failed_reply = idx_own_reply(&reply);

		insert_failed(ms, slots, ids, docs, n, session, failed_reply, &error);
	}
	bson_destroy(&reply);
	if (session != NULL)
		idx_writer_write_new(ms->writer, session);
	inserted(ms, ids, docs, n);
}
