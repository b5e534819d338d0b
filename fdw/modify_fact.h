/*-------------------------------------------------------------------------
 *
 * modify_fact.h
 *		  One fact of a write (modify_fact.c): read it, change it with
 *		  findAndModify; the session of the write, what it notes of the
 *		  facts it wrote, and their record for the undo.
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/modify_fact.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef IDXTABLE_MODIFY_FACT_H
#define IDXTABLE_MODIFY_FACT_H

#include "core/mongoc_compat.h"
#include "core/remote_error.h"
#include "modify_int.h"

/* The session of this write: the transaction's (begun now if needed) */
extern mongoc_client_session_t *idx_modify_session(IdxModifyState *ms);

/* Options carrying "session" (none: nothing), "what" for the error */
extern void idx_modify_append_session(IdxModifyState *ms,
									  mongoc_client_session_t *session,
									  bson_t *opts, const IdxOp *what);

/* The largest document the server takes (asked once per statement) */
extern int64 idx_modify_max_document_size(IdxModifyState *ms);

/* Count facts written (ordered mode: noted for the rollback warning) */
extern void idx_modify_note_written(IdxModifyState *ms, int n);

/*
 * Remember a fact the statement wrote in ordered mode, with the fact as it
 * was before ("before": NULL for an insert, or its shard key values), for
 * the undo of a failed statement (modify_undo.h).
 */
extern void idx_modify_remember_write(IdxModifyState *ms, UndoKind kind,
									  const bson_value_t *id,
									  const bson_t *before);

/* The projection of _id and the columns entries are computed from */
extern void idx_modify_index_projection(IdxModifyState *ms,
										bson_t *projection);

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

#endif							/* IDXTABLE_MODIFY_FACT_H */
