/*-------------------------------------------------------------------------
 *
 * remote_error.h
 *		  Translation of libmongoc and MongoDB errors (remote_error.c).
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/core/remote_error.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef IDXTABLE_REMOTE_ERROR_H
#define IDXTABLE_REMOTE_ERROR_H

#include "core/mongoc_compat.h"
#include "core/pg_compat.h"
#include "core/remote_op.h"

/* the scrubbed message, also for the callers that find it here */
#include "core/message_scrub.h"

/*
 * Raise an ERROR for a failed MongoDB operation.  "server" names the
 * foreign server, "what" says what was being done (the CONTEXT line).  The
 * libmongoc message goes into the DETAIL, reduced to its server-provided
 * part and never with the URI or credentials.  Chooses the SQLSTATE from
 * the error domain/code (connection problems -> class 08, duplicate key
 * -> 23505, interrupted/timeouts -> 57014, everything else -> HV000).
 */
pg_noreturn extern void idx_report_error(const bson_error_t *error,
										 const char *server,
										 const IdxOp *what);

/* A command reply that failed: same, using the reply's code/errmsg */
pg_noreturn extern void idx_report_reply_error(const bson_t *reply,
											   const bson_error_t *error,
											   const char *server,
											   const IdxOp *what);

/* A cursor that failed: same, using its error document */
pg_noreturn extern void idx_report_cursor_error(mongoc_cursor_t *cursor,
												const char *server,
												const IdxOp *what);

/*
 * Put a failed command's reply code and errmsg (the server's words) into
 * *error, unless the connection itself failed.
 */
extern void idx_merge_reply_error(bson_error_t *error, const bson_t *reply);

#endif							/* IDXTABLE_REMOTE_ERROR_H */
