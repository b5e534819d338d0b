/*-------------------------------------------------------------------------
 *
 * shard_key.h
 *		  The table option "shard_key": the columns of a sharded collection's
 *		  shard key, which the filters of writes addressing one fact hold.
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/core/shard_key.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef IDXTABLE_SHARD_KEY_H
#define IDXTABLE_SHARD_KEY_H

#include "access/tupdesc.h"

#include "core/mongoc_compat.h"
#include "core/option.h"

/* Check the option's value: a list of distinct column names */
extern void idx_shard_key_validate(const char *value);

/* Resolve the option against the table's columns (into "info") */
extern void idx_shard_key_resolve(IdxTableInfo *info, const char *value,
								  TupleDesc tupdesc);

/* Is column "attnum" part of the table's shard key? */
extern bool idx_shard_key_has_column(const IdxTableInfo *info,
									 AttrNumber attnum);

/* Refuse an UPDATE outside a transaction that assigns a shard key column */
extern void idx_shard_key_check_ordered_update(const IdxTableInfo *info,
											   TupleDesc tupdesc,
											   List *target_attrs,
											   IdxConsistency mode);

/* The shard key values of a row, as BSON (palloc'd), or NULL if none */
extern bson_t *idx_shard_key_of_row(const IdxTableInfo *info,
									TupleDesc tupdesc, const Datum *values,
									const bool *nulls);

/* The shard key values of a fact document (palloc'd), or NULL if none */
extern bson_t *idx_shard_key_of_document(const IdxTableInfo *info,
										 const bson_t *doc);

/* Append the shard key equalities of "source" to a filter */
extern void idx_shard_key_append(const IdxTableInfo *info, bson_t *filter,
								 const bson_t *source);

/* Restrict a filter of several facts to the documents "docs" (not "skip") */
extern void idx_shard_key_restrict(const IdxTableInfo *info, bson_t *filter,
								   bson_t **docs, const bool *skip, int n);

/* Raise a clear ERROR if a failed write is mongos's shard key refusal */
extern void idx_shard_key_check_refusal(const IdxTableInfo *info,
										const bson_t *reply,
										const bson_error_t *error);

#endif							/* IDXTABLE_SHARD_KEY_H */
