/*-------------------------------------------------------------------------
 *
 * table_size.h
 *		  The document count of a foreign table's collection, cached per
 *		  backend for planning before ANALYZE.
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/core/table_size.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef IDXTABLE_TABLE_SIZE_H
#define IDXTABLE_TABLE_SIZE_H

#include "core/mongoc_compat.h"
#include "core/option.h"

/*
 * Planning: the cached count of the table's collection, or -1 (it is then
 * asked for at the table's next scan).  Never talks to MongoDB.
 */
extern double idx_cached_document_count(const IdxTableInfo *info);

/*
 * Executor start of a scan (not for EXPLAIN alone): count the collection
 * if planning asked for it and the cached count is missing or old, with
 * the scan's read preference (NULL: the client's, as a find's).
 */
extern void idx_refresh_document_count(const IdxTableInfo *info,
									   mongoc_client_t *client,
									   const char *servername,
									   const mongoc_read_prefs_t *read_prefs);

/*
 * ANALYZE: count the collection now ("fresh") or, within the transaction
 * that counted it last, reuse that count; the cache keeps it.
 */
extern double idx_analyze_document_count(const IdxTableInfo *info,
										 mongoc_client_t *client,
										 const char *servername, bool fresh);

#endif							/* IDXTABLE_TABLE_SIZE_H */
