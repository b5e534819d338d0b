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
	List	   *scan_ends;		/* ScanEnd *, in cxt */
} RowIdStore;

/* What to do when the scan of a target ends */
typedef struct ScanEnd
{
	Index		scanrelid;
	IdxScanEndFn fn;
	void	   *arg;
} ScanEnd;

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
 * Register (or, with fn NULL, clear) what to do when the scan of target
 * "scanrelid" ends (see rowid.h).
 */
void
idx_rowid_on_scan_end(EState *estate, Index scanrelid, IdxScanEndFn fn,
					  void *arg)
{
	RowIdStore *s = get_store(estate, fn != NULL);
	ListCell   *lc;
	ScanEnd    *end;
	MemoryContext oldcxt;

	if (s == NULL)
		return;
	foreach(lc, s->scan_ends)
	{
		end = lfirst(lc);
		if (end->scanrelid == scanrelid)
		{
			end->fn = fn;
			end->arg = arg;
			return;
		}
	}
	if (fn == NULL)
		return;
	oldcxt = MemoryContextSwitchTo(s->cxt);
	end = palloc(sizeof(ScanEnd));
	end->scanrelid = scanrelid;
	end->fn = fn;
	end->arg = arg;
	s->scan_ends = lappend(s->scan_ends, end);
	MemoryContextSwitchTo(oldcxt);
}

/*
 * A scan of a target returned its last row: run what was registered.
 */
void
idx_rowid_scan_end(ForeignScanState *node)
{
	RowIdStore *s = get_store(node->ss.ps.state, false);
	Index		scanrelid = ((Scan *) node->ss.ps.plan)->scanrelid;
	ListCell   *lc;

	if (s == NULL)
		return;
	foreach(lc, s->scan_ends)
	{
		ScanEnd    *end = lfirst(lc);

		if (end->scanrelid == scanrelid && end->fn != NULL)
			end->fn(end->arg);
	}
}
