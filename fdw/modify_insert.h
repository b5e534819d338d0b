/*-------------------------------------------------------------------------
 *
 * modify_insert.h
 *		  INSERT batches (modify_insert.c).
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/modify_insert.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef IDXTABLE_MODIFY_INSERT_H
#define IDXTABLE_MODIFY_INSERT_H

#include "executor/tuptable.h"

#include "modify_int.h"

/*
 * Write the facts of "slots" and their entries; an error reports the
 * duplicates and removes the batch's other facts.
 */
extern void idx_modify_insert_rows(IdxModifyState *ms, TupleTableSlot **slots,
								   int n);

#endif							/* IDXTABLE_MODIFY_INSERT_H */
