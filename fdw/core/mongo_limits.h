/*-------------------------------------------------------------------------
 *
 * mongo_limits.h
 *		  MongoDB's limits: transaction lifetime and size, write concern
 *		  errors, and the sizes of the commands the FDW builds.
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/core/mongo_limits.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef IDXTABLE_MONGO_LIMITS_H
#define IDXTABLE_MONGO_LIMITS_H

#include "core/mongoc_compat.h"
#include "core/pg_compat.h"
#include "core/remote_op.h"

/*
 * The most bytes of values one {$in: [...]} list the FDW builds may hold
 * before it is cut into another command.  A command document may not pass
 * 16 MiB (BSONObjMaxUserSize, plus 16 KiB for the command's own fields);
 * half of that leaves room for the rest of the filter and for the one value
 * that crosses the mark.
 */
#define IDX_IN_LIST_MAX_BYTES	(8 * 1024 * 1024)

/* mongod's longest namespace, "database.collection", in bytes */
#define IDX_MAX_NAMESPACE_BYTES 255

/*
 * Raise the ERROR for a failure that is one of MongoDB's limits: the
 * transaction's lifetime or size, or a write concern that was not met.
 * Returns if the error is none of these.
 */
extern void idx_limits_check_error(const bson_error_t *error,
								   const char *server, const IdxOp *what);

/*
 * The transaction state (xact_state.h) of the client of server "server"
 * whose MongoDB transaction started last, or NULL: how the limits learn a
 * transaction's age.  xact.c, which starts the transactions, hands its
 * finder over before the first one starts.
 */
struct IdxRemoteXact;
typedef struct IdxRemoteXact *(*IdxLatestXactFn) (const char *server);
extern void idx_limits_set_xact_finder(IdxLatestXactFn fn);

/* Is this a writeConcernError (the write was made, not acknowledged)? */
extern bool idx_is_write_concern_error(const bson_error_t *error);

/* Is it one that a retry cannot satisfy (spec: no retry of the commit)? */
extern bool idx_write_concern_unsatisfiable(const bson_error_t *error);

/* Raise the ERROR for a commit whose outcome MongoDB left unknown */
pg_noreturn extern void idx_report_commit_unknown(const bson_error_t *error,
												  const char *server);

#endif							/* IDXTABLE_MONGO_LIMITS_H */
