/*-------------------------------------------------------------------------
 *
 * rowid.c
 *		  The exact _id of each row an UPDATE or DELETE scans (see rowid.h).
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/core/rowid.c
 *
 * A handle is a number k packed into the row's ctid (block k >> 16,
 * offset k & 0xFFFF): 0 means "the _id column's value writes the _id
 * exactly", k > 0 is the k-th stored _id kept by a scan of the same
 * executor state.  The stores are kept per executor state, in its query
 * memory, and forget themselves when that memory goes (end of statement or
 * error).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "executor/executor.h"
#include "storage/itemptr.h"
#include "utils/memutils.h"

#include "core/document.h"
#include "core/handle.h"
#include "core/rowid.h"

/* The stored _ids kept by the scans of one executor state */
typedef struct RowIdStore
{
	EState	   *estate;
	MemoryContext cxt;			/* child of es_query_cxt; owns this */
	bson_t	  **ids;			/* {_id: <stored _id>}, palloc'd */
	uint64		n;
	uint64		cap;
	struct RowIdStore *next;
	MemoryContextCallback forget_cb;
	List	   *rows_ends;		/* RowsEnd *, in cxt */
} RowIdStore;

/* What to do when the subplan of a ModifyTable returns its last row */
typedef struct RowsEnd
{
	PlanState  *subplan;
	ExecProcNodeMtd real;		/* the subplan's own function, kept by the
								 * first registration for it */
	IdxRowsEndFn fn;			/* NULL once its write has ended */
	void	   *arg;
} RowsEnd;

/* The live stores (few: one per executor state that has kept an _id) */
static RowIdStore *stores = NULL;

/* Largest handle a ctid holds (48 bits) */
#define IDX_RAWID_MAX	((((uint64) 1) << 48) - 1)

/*
 * Unlink a store whose memory is being released (reset callback).
 */
static void
forget_store(void *arg)
{
	RowIdStore **p;

	for (p = &stores; *p != NULL; p = &(*p)->next)
	{
		if (*p == arg)
		{
			*p = (*p)->next;
			return;
		}
	}
}

/*
 * The store of an executor state, created if "create".
 */
static RowIdStore *
get_store(EState *estate, bool create)
{
	RowIdStore *s;
	MemoryContext cxt;

	for (s = stores; s != NULL; s = s->next)
	{
		if (s->estate == estate)
			return s;
	}
	if (!create)
		return NULL;
	cxt = AllocSetContextCreate(estate->es_query_cxt, "idxtable_fdw row _ids",
								ALLOCSET_DEFAULT_SIZES);
	s = MemoryContextAllocZero(cxt, sizeof(RowIdStore));
	s->estate = estate;
	s->cxt = cxt;
	s->cap = 64;
	s->ids = MemoryContextAlloc(cxt, sizeof(bson_t *) * s->cap);
	s->forget_cb.func = forget_store;
	s->forget_cb.arg = s;
	MemoryContextRegisterResetCallback(cxt, &s->forget_cb);
	s->next = stores;
	stores = s;
	return s;
}

/*
 * Is this scan the target of an UPDATE or DELETE of the statement (also
 * one in a WITH clause of a SELECT)?  Only those scans have a range table
 * index among the result relations; another scan of the same table, as in
 * a self-join, has another one.
 */
bool
idx_rowid_scan_wanted(ForeignScanState *node)
{
	PlannedStmt *stmt = node->ss.ps.state->es_plannedstmt;
	Index		scanrelid = ((Scan *) node->ss.ps.plan)->scanrelid;

	return stmt != NULL &&
		list_member_int(stmt->resultRelations, (int) scanrelid);
}

/*
 * Keep a copy of "iddoc" ({_id: <stored _id>}) and return its handle.
 */
static uint64
keep_id(EState *estate, const bson_t *iddoc)
{
	RowIdStore *s = get_store(estate, true);

	if (s->n >= IDX_RAWID_MAX)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("too many rows with an _id that needs its stored form")));
	if (s->n == s->cap)
	{
		s->cap *= 2;
		s->ids = repalloc_huge(s->ids, sizeof(bson_t *) * s->cap);
	}
	s->ids[s->n] = MemoryContextAlloc(s->cxt, sizeof(bson_t));
	{
		uint32		len = iddoc->len;
		uint8	   *data = MemoryContextAlloc(s->cxt, len);

		memcpy(data, bson_get_data(iddoc), len);
		if (!bson_init_static(s->ids[s->n], data, len))
			elog(ERROR, "could not keep the _id of a row");
	}
	return ++s->n;
}

/*
 * Set the row's handle (see rowid.h).
 */
void
idx_rowid_note(ForeignScanState *node, TupleTableSlot *slot,
			   AttrNumber id_attnum, const bson_t *doc, const char *id_field)
{
	bson_t		stored = BSON_INITIALIZER;
	bson_t		written = BSON_INITIALIZER;
	bson_iter_t iter;
	uint64		handle = 0;

	if (bson_iter_init_find(&iter, doc, id_field))
	{
		idx_check_append(bson_append_iter(&stored, "_id", 3, &iter));
		if (id_attnum == InvalidAttrNumber || slot->tts_isnull[id_attnum - 1])
			handle = keep_id(node->ss.ps.state, &stored);
		else
		{
			idx_append_id_value(&written, "_id",
								slot->tts_values[id_attnum - 1],
								TupleDescAttr(slot->tts_tupleDescriptor,
											  id_attnum - 1)->atttypid);
			if (!idx_bson_same_bytes(&stored, &written))
				handle = keep_id(node->ss.ps.state, &stored);
		}
	}
	bson_destroy(&stored);
	bson_destroy(&written);
	ItemPointerSet(&slot->tts_tid, (BlockNumber) (handle >> 16),
				   (OffsetNumber) (handle & 0xFFFF));
}

/*
 * The stored _id of a handle (see rowid.h).
 */
bool
idx_rowid_lookup(EState *estate, ItemPointer tid, bson_value_t *id)
{
	uint64		handle;
	RowIdStore *s;
	bson_iter_t iter;

	handle = ((uint64) ItemPointerGetBlockNumberNoCheck(tid) << 16) |
		ItemPointerGetOffsetNumberNoCheck(tid);
	if (handle == 0)
		return false;
	s = get_store(estate, false);
	if (s == NULL || handle > s->n ||
		!bson_iter_init_find(&iter, s->ids[handle - 1], "_id"))
		elog(ERROR, "row _id handle " UINT64_FORMAT " is unknown", handle);
	*id = *bson_iter_value(&iter);
	return true;
}

/*
 * The function the executor calls for a ModifyTable's subplan that has an
 * end registered: the subplan's own function, then, when it returns no
 * row, what was registered for that end.
 */
static TupleTableSlot *
exec_until_rows_end(PlanState *node)
{
	RowIdStore *s = get_store(node->state, false);
	ExecProcNodeMtd real = NULL;
	TupleTableSlot *slot;
	ListCell   *lc;

	if (s != NULL)
	{
		foreach(lc, s->rows_ends)
		{
			RowsEnd    *end = lfirst(lc);

			if (end->subplan == node && end->real != NULL)
			{
				real = end->real;
				break;
			}
		}
	}
	if (real == NULL)
		elog(ERROR, "lost the executor function of a ModifyTable's subplan");
	slot = real(node);
	if (TupIsNull(slot))
	{
		foreach(lc, s->rows_ends)
		{
			RowsEnd    *end = lfirst(lc);

			if (end->subplan == node && end->fn != NULL)
				end->fn(end->arg);
		}
	}
	return slot;
}

/*
 * Register what to do when "subplan", the subplan of a ModifyTable,
 * returns its last row (see rowid.h).  The first registration for a
 * subplan puts exec_until_rows_end() in place of its function, with
 * ExecSetExecProcNode() as the executor itself sets it, so that
 * instrumentation (EXPLAIN ANALYZE) still wraps the whole.
 */
void
idx_rowid_on_rows_end(PlanState *subplan, IdxRowsEndFn fn, void *arg)
{
	RowIdStore *s = get_store(subplan->state, true);
	RowsEnd    *end;
	MemoryContext oldcxt;

	oldcxt = MemoryContextSwitchTo(s->cxt);
	end = palloc0(sizeof(RowsEnd));
	end->subplan = subplan;
	end->fn = fn;
	end->arg = arg;
	if (subplan->ExecProcNodeReal != exec_until_rows_end)
	{
		end->real = subplan->ExecProcNodeReal;
		ExecSetExecProcNode(subplan, exec_until_rows_end);
	}
	s->rows_ends = lappend(s->rows_ends, end);
	MemoryContextSwitchTo(oldcxt);
}

/*
 * Forget what was registered with "arg": its write has ended.
 */
void
idx_rowid_forget_rows_end(EState *estate, void *arg)
{
	RowIdStore *s = get_store(estate, false);
	ListCell   *lc;

	if (s == NULL)
		return;
	foreach(lc, s->rows_ends)
	{
		RowsEnd    *end = lfirst(lc);

		if (end->arg == arg)
			end->fn = NULL;
	}
}
