/*-------------------------------------------------------------------------
 *
 * modify_batch.h
 *		  UPDATE and DELETE in batches (modify_batch.c).
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/modify_batch.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef IDXTABLE_MODIFY_BATCH_H
#define IDXTABLE_MODIFY_BATCH_H

#include "nodes/execnodes.h"

#include "modify_int.h"

/*
 * In transaction and eventual mode and where the executor needs no row
 * back (no RETURNING, row triggers or WITH CHECK OPTION), rows are
 * collected and written batch_size at a time.
 */
extern bool idx_modify_batch_wanted(IdxModifyState *ms, ResultRelInfo *rinfo);
extern void idx_modify_batch_init(IdxModifyState *ms);
extern void idx_modify_batch_add(IdxModifyState *ms, TupleTableSlot *slot,
								 TupleTableSlot *planSlot);
extern void idx_modify_batch_flush(IdxModifyState *ms);

#endif							/* IDXTABLE_MODIFY_BATCH_H */
