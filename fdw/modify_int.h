/*-------------------------------------------------------------------------
 *
 * modify_int.h
 *		  Internals shared by modify.c (the write callbacks, row by row and
 *		  INSERT batches), modify_batch.c (UPDATE and DELETE batches) and
 *		  modify_undo.c (the undo of a failed statement in ordered mode).
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/modify_int.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef IDXTABLE_MODIFY_INT_H
#define IDXTABLE_MODIFY_INT_H

#include "executor/tuptable.h"
#include "foreign/foreign.h"
#include "nodes/execnodes.h"
#include "nodes/nodes.h"
#include "utils/relcache.h"

#include "core/convert.h"
#include "core/mongoc_compat.h"
#include "core/option.h"
#include "core/pg_compat.h"
#include "index/index_write.h"

/*
 * Execution state of a write to one foreign table.
 */
typedef struct IdxModifyState
{
	Relation	rel;
	IdxTableInfo *info;
	ForeignServer *server;
	mongoc_client_t *client;
	CmdType		operation;
	bool		ordered;		/* no MongoDB transaction: each write final
								 * when made, a failed statement undone
								 * (modes 'ordered' and 'eventual') */
	bool		eventual;		/* mode 'eventual': the facts only */
	bool		bulk_write;		/* a batch's facts and entries in one
								 * bulkWrite (MongoDB 8.0, bulk_write.h) */
	List	   *target_attrs;	/* UPDATE: assigned columns */
	bool		has_returning;
	AttrNumber	rowid_attno;	/* junk _id in the subplan's output */
	AttrNumber	wholerow_attno; /* junk whole row (UPDATE) */
	AttrNumber	rawid_attno;	/* junk handle of the stored _id (rowid.h) */
	struct EState *estate;		/* whose scans keep the stored _ids */
	bool		can_set_tag;	/* the executor counts our rows (es_processed) */

	IdxIndexWriter *writer;
	struct IdxWriteWait *unique_wait;	/* to end before the first write */
	IdxRowConv *preconv;		/* a fact's index columns (pre-images) */
	IdxRowConv *fullconv;		/* every column (DELETE RETURNING) */

	mongoc_collection_t *facts;
	bool		pinned;
	bool		claiming;		/* noted as a write that may claim keys in
								 * ordered mode (index_claims.h) */
	MemoryContext cxt;			/* owns this state; reset releases */
	MemoryContext row_cxt;		/* per row / batch */
	MemoryContextCallback release_cb;

	uint64		facts_written;
	uint64		round_trips;
	int64		max_doc_size;	/* server's maxBsonObjectSize; 0: not yet */

	/* UPDATE/DELETE with a join: the facts changed so far (by _id hash) */
	bool		may_repeat;
	struct HTAB *changed;

	/* transaction mode: UPDATE/DELETE rows waiting for one bulk write */
	struct IdxModifyBatch *batch;	/* NULL: row by row */

	/* ordered mode: the facts this statement wrote, for undoing it */
	List	   *undo;			/* UndoRecord * */
	int			nundo;
	bool		undo_overflow;	/* more than IDX_UNDO_MAX (modify_undo.c) */
	bool		noted_before;	/* the transaction had ordered writes */
} IdxModifyState;

/*
 * What a statement did to one fact in ordered mode (modify_undo.c).
 */
typedef enum UndoKind
{
	UNDO_INSERTED,
	UNDO_UPDATED,
	UNDO_DELETED
} UndoKind;

/* The session of this write: the transaction's (begun now if needed) */
extern mongoc_client_session_t *idx_modify_session(IdxModifyState *ms);

/* The largest document the server takes (asked once per statement) */
extern int64 idx_modify_max_document_size(IdxModifyState *ms);

/* The consistency mode of the write, as the option names it */
extern const char *idx_modify_mode_name(IdxModifyState *ms);

/* Count facts written (ordered mode: noted for the rollback warning) */
extern void idx_modify_note_written(IdxModifyState *ms, int n);

/* The row of a fact document (columns "conv" converts; others NULL) */
extern void idx_modify_doc_to_row(IdxModifyState *ms, IdxRowConv *conv,
								  const bson_t *doc, Datum **values,
								  bool **nulls);

/* The projection of _id and the columns entries are computed from */
extern void idx_modify_index_projection(IdxModifyState *ms,
										bson_t *projection);

/* Do two rows agree on every column entries are computed from? */
extern bool idx_modify_same_index_values(IdxModifyState *ms,
										 const Datum *av, const bool *an,
										 const Datum *bv, const bool *bn);

/* The BSON _id of the row to UPDATE or DELETE (its junk column) */
extern void idx_modify_target_id(IdxModifyState *ms, TupleTableSlot *planSlot,
								 bson_value_t *id);

/* The row as PostgreSQL read it (UPDATE's junk whole row), if there */
extern bool idx_modify_old_row(IdxModifyState *ms, TupleTableSlot *planSlot,
							   Datum **values, bool **nulls);

/* The shard key values of the row to UPDATE or DELETE, or NULL if none */
extern bson_t *idx_modify_target_shard_key(IdxModifyState *ms,
										   TupleTableSlot *planSlot);

/* A fact by _id with the index columns, or NULL ("in_txn": in the txn) */
extern bson_t *idx_modify_fetch_fact(IdxModifyState *ms,
									 const bson_value_t *id,
									 const bson_t *shard, bool in_txn);

/* findAndModify of one fact ($set "update", or remove); the fact before */
extern bson_t *idx_modify_find_and_modify(IdxModifyState *ms,
										  mongoc_client_session_t *session,
										  const bson_value_t *id,
										  const bson_t *shard,
										  const bson_t *update, bool full);

/*
 * The undo of a statement that failed in ordered mode (modify_undo.c):
 * each write is remembered with the fact as it was; on an error in one of
 * the callbacks the writes are undone in a subtransaction, then the error
 * is raised on.
 */
extern void idx_modify_remember_write(IdxModifyState *ms, UndoKind kind,
									  const bson_value_t *id,
									  const bson_t *before);
pg_noreturn extern void idx_modify_fail_statement(IdxModifyState *ms);

/*
 * Batches of UPDATE and DELETE (modify_batch.c): in transaction mode and
 * where the executor needs no row back (no RETURNING, row triggers or
 * WITH CHECK OPTION), rows are collected and written batch_size at a time.
 */
extern bool idx_modify_batch_wanted(IdxModifyState *ms, ResultRelInfo *rinfo);
extern void idx_modify_batch_init(IdxModifyState *ms);
extern void idx_modify_batch_add(IdxModifyState *ms, TupleTableSlot *slot,
								 TupleTableSlot *planSlot);
extern void idx_modify_batch_flush(IdxModifyState *ms);

/*
 * Shared by modify.c and modify_insert.c: what an INSERT's errors name (a
 * CONTEXT line), a write's session in its options, a row's _id, and the
 * DETAIL naming a duplicate _id.
 */
extern const IdxOp *idx_modify_insert_what(IdxModifyState *ms);
extern void idx_modify_append_session(IdxModifyState *ms,
									  mongoc_client_session_t *session,
									  bson_t *opts, const IdxOp *what);
extern void idx_modify_row_id(IdxModifyState *ms, TupleTableSlot *slot,
							  bson_value_t *id);
extern int	idx_modify_errdetail_duplicate_id(IdxModifyState *ms,
											  TupleTableSlot *slot);

/*
 * INSERT batches (modify_insert.c): write the facts of "slots" and their
 * entries; an error reports the duplicates and removes the batch's other
 * facts.
 */
extern void idx_modify_insert_rows(IdxModifyState *ms, TupleTableSlot **slots,
								   int n);

#endif							/* IDXTABLE_MODIFY_INT_H */
