/*-------------------------------------------------------------------------
 *
 * index_stats.h
 *		  Statistics of index tables, refreshed by ANALYZE.
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/index/index_stats.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef IDXTABLE_INDEX_STATS_H
#define IDXTABLE_INDEX_STATS_H

#include "core/mongoc_compat.h"

#include "access/htup.h"
#include "utils/relcache.h"

/* Refresh entries and distinct keys of the valid indexes of "rel" */
extern void idx_analyze_indexes(Relation rel, HeapTuple *rows, int numrows,
								mongoc_client_t *client,
								const char *servername);

#endif							/* IDXTABLE_INDEX_STATS_H */
