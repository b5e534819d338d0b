/*-------------------------------------------------------------------------
 *
 * modify_int.h
 *		  The state of a write to a foreign table, shared by the files of the
 *		  write path (modify*.c); types only, so that every one of them can
 *		  include it whatever its place in the layers below.
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/modify_int.h
 *
 * The files call down only, from the callbacks to the single facts:
 *
 *	modify.c		the FDW callbacks and the steps of a row (top)
 *	modify_batch.c	UPDATE and DELETE batches
 *	modify_insert.c	INSERT batches
 *	modify_undo.c	the undo of a failed statement
 *	modify_fact.c	one fact: read, findAndModify; the session, the notes
 *					and the undo record of a write
 *	modify_row.c	the row a write targets, a fact as a row
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
	IdxConsistency mode;		/* as resolved (idx_xact_mode), never
								 * DEFAULT: other than TRANSACTION, no
								 * MongoDB transaction, each write final
								 * when made and a failed statement undone;
								 * EVENTUAL writes the facts only */
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
	bool		undo_overflow;	/* more than IDX_UNDO_MAX (modify_fact.c) */
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

/* Most rows a statement remembers for undoing it (ordered mode) */
#define IDX_UNDO_MAX 100000

/*
 * One fact a statement wrote in ordered mode, and how it was before.
 */
typedef struct UndoRecord
{
	UndoKind	kind;
	bson_t	   *id;				/* {_id: <fact _id>} */
	bson_t	   *before;			/* UPDATED, DELETED: the whole fact before;
								 * INSERTED: its shard key values, if any */
} UndoRecord;

#endif							/* IDXTABLE_MODIFY_INT_H */
