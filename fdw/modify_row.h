/*-------------------------------------------------------------------------
 *
 * modify_row.h
 *		  The rows of a write (modify_row.c): the fact a row to UPDATE or
 *		  DELETE targets, and a fact document as a row.
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/modify_row.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef IDXTABLE_MODIFY_ROW_H
#define IDXTABLE_MODIFY_ROW_H

#include "executor/tuptable.h"

#include "core/convert.h"
#include "core/mongoc_compat.h"
#include "modify_int.h"

/* The row of a fact document (columns "conv" converts; others NULL) */
extern void idx_modify_doc_to_row(IdxModifyState *ms, IdxRowConv *conv,
								  const bson_t *doc, Datum **values,
								  bool **nulls);

/* The BSON _id of the row to UPDATE or DELETE (its junk column) */
extern void idx_modify_target_id(IdxModifyState *ms, TupleTableSlot *planSlot,
								 bson_value_t *id);

/* The row as PostgreSQL read it (UPDATE's junk whole row), if there */
extern bool idx_modify_old_row(IdxModifyState *ms, TupleTableSlot *planSlot,
							   Datum **values, bool **nulls);

/* The shard key values of the row to UPDATE or DELETE, or NULL if none */
extern bson_t *idx_modify_target_shard_key(IdxModifyState *ms,
										   TupleTableSlot *planSlot);

#endif							/* IDXTABLE_MODIFY_ROW_H */
