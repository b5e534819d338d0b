/*-------------------------------------------------------------------------
 *
 * modify_undo.h
 *		  The undo of a statement that failed in ordered or eventual mode
 *		  (modify_undo.c).
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/modify_undo.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef IDXTABLE_MODIFY_UNDO_H
#define IDXTABLE_MODIFY_UNDO_H

#include "modify_int.h"

/*
 * The statement failed in one of the callbacks (the error is being raised):
 * undo the writes it remembered (idx_modify_remember_write, modify_fact.h)
 * in a subtransaction, then raise the error on.
 */
pg_noreturn extern void idx_modify_fail_statement(IdxModifyState *ms);

#endif							/* IDXTABLE_MODIFY_UNDO_H */
