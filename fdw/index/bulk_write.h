/*-------------------------------------------------------------------------
 *
 * bulk_write.h
 *		  MongoDB 8.0's bulkWrite command: the writes of several collections
 *		  in one round trip (bulk_write.c).
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/index/bulk_write.h
 *
 * On a server of wire version 25 or later a write batch's facts and all
 * its index entries go to MongoDB as one bulkWrite command on "admin",
 * ordered (each op runs after the ones before it, and the first failed op
 * ends the command), so that the crash-safe order of steps of ordered mode
 * holds inside the command.  libmongoc 1.23 has no helper for it: the
 * command is built here and sent with mongoc_client_write_command_with_opts,
 * with the transaction's session in its options (lsid, txnNumber,
 * autocommit come from libmongoc).  Such a command is not retried by
 * libmongoc: a lost connection fails the statement (see the README).
 *
 *-------------------------------------------------------------------------
 */
#ifndef IDXTABLE_BULK_WRITE_H
#define IDXTABLE_BULK_WRITE_H

#include "core/mongoc_compat.h"
#include "core/pg_compat.h"
#include "core/remote_error.h"

/* The wire version of MongoDB 8.0, the first with bulkWrite */
#define IDX_BULK_WRITE_WIRE_VERSION 25

typedef struct IdxBulkWrite IdxBulkWrite;

/* The first op that failed, as the reply's cursor reports it */
typedef struct IdxBulkWriteError
{
	int			op;				/* index of the op in the IdxBulkWrite */
	int			code;			/* MongoDB's error code */
	bson_t	   *doc;			/* the per-op error {ok: 0, idx, code, ...},
								 * palloc'd; a reply for
								 * idx_report_reply_error() */
	bson_error_t error;			/* the same as libmongoc would give it */
} IdxBulkWriteError;

extern bool idx_bulk_write_supported(mongoc_client_t *client,
									 const char *servername);

extern IdxBulkWrite *idx_bulk_write_create(mongoc_client_t *client,
										   const char *servername);

extern void idx_bulk_write_insert(IdxBulkWrite *bw, const char *database,
								  const char *collection, const bson_t *doc);

extern void idx_bulk_write_update(IdxBulkWrite *bw, const char *database,
								  const char *collection,
								  const bson_t *filter, const bson_t *update,
								  bool upsert);

extern void idx_bulk_write_delete(IdxBulkWrite *bw, const char *database,
								  const char *collection,
								  const bson_t *filter, bool multi);

extern int	idx_bulk_write_nops(IdxBulkWrite *bw);

extern bool idx_bulk_write_fits(const bson_t *doc);

extern bool idx_bulk_write_execute(IdxBulkWrite *bw, int from,
								   mongoc_client_session_t *session,
								   const IdxOp *what,
								   IdxBulkWriteError *failed);

extern void idx_bulk_write_counts(IdxBulkWrite *bw, int64 *matched,
								  int64 *deleted);

pg_noreturn extern void idx_bulk_write_report(IdxBulkWrite *bw,
											  const IdxBulkWriteError *failed,
											  const IdxOp *what);

#endif							/* IDXTABLE_BULK_WRITE_H */
