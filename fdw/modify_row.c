/*-------------------------------------------------------------------------
 *
 * modify_row.c
 *		  The rows of a write: which fact a row to UPDATE or DELETE targets
 *		  (its _id, its shard key values, the row as PostgreSQL read it),
 *		  and a fact document as a row.
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/modify_row.c
 *
 * No remote work: the bottom of the write path's files (modify_int.h).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "executor/executor.h"
#include "utils/rel.h"

#include "core/convert.h"
#include "core/document.h"
#include "core/rowid.h"
#include "core/shard_key.h"
#include "modify_row.h"

/*
 * Read the row of a fact document into palloc'd values/nulls (all NULL
 * except the columns "conv" converts).
 */
void
idx_modify_doc_to_row(IdxModifyState *ms, IdxRowConv *conv,
					  const bson_t *doc, Datum **values, bool **nulls)
{
	int			natts = RelationGetDescr(ms->rel)->natts;

	*values = palloc0(sizeof(Datum) * Max(natts, 1));
	*nulls = palloc(sizeof(bool) * Max(natts, 1));
	memset(*nulls, true, sizeof(bool) * Max(natts, 1));
	idx_document_to_row(conv, doc, *values, *nulls);
}


/*
 * The row identity (_id) of the row being updated or deleted, as BSON: the
 * _id as the scan read it where the column's value cannot write it back
 * exactly (rowid.h), else the one the value writes.
 */
void
idx_modify_target_id(IdxModifyState *ms, TupleTableSlot *planSlot,
					 bson_value_t *id)
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
idx_modify_old_row(IdxModifyState *ms, TupleTableSlot *planSlot,
				   Datum **values, bool **nulls)
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

