/*-------------------------------------------------------------------------
 *
 * table_size.h
 *		  The size of a foreign table's collection as MongoDB reports it,
 *		  cached per backend for planning before ANALYZE.
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

#include "foreign/foreign.h"

#include "core/mongoc_compat.h"
#include "core/option.h"

/* What planning knows of a collection */
typedef struct IdxCollectionSize
{
	double		documents;		/* documents, or -1 if unknown */
	double		avg_bytes;		/* their mean BSON size, or -1 if unknown */
} IdxCollectionSize;

/*
 * Planning before ANALYZE: the collection's size, from the cache or, at
 * most once per relation every few minutes, asked of MongoDB as user
 * "userid" (one $collStats, or a count where that is refused), of the
 * primary if "primary" (the scan decides a write).  Never fails for
 * MongoDB's sake: what could not be learned is -1.
 */
extern void idx_planning_collection_size(const IdxTableInfo *info,
										 Oid userid, bool primary,
										 IdxCollectionSize *size);

/*
 * A client for planning's questions to the server as user "userid", or
 * NULL when none may or can be had now (in a parallel worker, without a
 * user mapping, or the server unreachable): planning then goes without.
 */
extern mongoc_client_t *idx_planning_client(ForeignServer *server,
											Oid userid);

/*
 * ANALYZE: count the collection now ("fresh") or, within the transaction
 * that counted it last, reuse that count; the cache keeps it.
 */
extern double idx_analyze_document_count(const IdxTableInfo *info,
										 mongoc_client_t *client,
										 const char *servername, bool fresh);

#endif							/* IDXTABLE_TABLE_SIZE_H */
