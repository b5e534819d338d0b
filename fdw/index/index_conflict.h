/*-------------------------------------------------------------------------
 *
 * index_conflict.h
 *		  Unique key conflicts with writers outside PostgreSQL: the rows of
 *		  idxtable.conflicts.
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/index/index_conflict.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef IDXTABLE_INDEX_CONFLICT_H
#define IDXTABLE_INDEX_CONFLICT_H

#include "core/mongoc_compat.h"
#include "index/index_repair.h"

/* Record that fact_id and holder_id share a key of index "index_name" */
extern void idx_conflict_record(const char *index_name, const char *key_text,
								const bson_value_t *fact_id,
								const bson_value_t *holder_id);

/* The same, as IdxRepairState's on_conflict (arg unused) */
extern void idx_conflict_callback(IdxRepairState *st, const char *key_desc,
								  const bson_value_t *fact_id,
								  const bson_value_t *holder_id, void *arg);

/* Forget the conflicts recorded for fact_id in index "index_name" */
extern void idx_conflict_resolved(const char *index_name,
								  const bson_value_t *fact_id);

/* The same, as IdxRepairState's on_resolved (arg unused) */
extern void idx_conflict_resolved_callback(IdxRepairState *st,
										   const bson_value_t *fact_id,
										   void *arg);

/* The facts recorded as waiting for a key one of the holders held */
extern int	idx_conflict_waiting(const char *index_name, bson_t **holders,
								 int n, bson_t ***facts);

/* The same, as IdxRepairState's on_waiters (arg unused) */
extern int	idx_conflict_waiting_callback(IdxRepairState *st,
										  bson_t **holders, int n,
										  bson_t ***facts, void *arg);

/* Forget the conflicts recorded for index "index_name" */
extern void idx_conflict_forget(const char *index_name);

#endif							/* IDXTABLE_INDEX_CONFLICT_H */
