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

#include <mongoc/mongoc.h>

/*
 * Raise an ERROR for a failed MongoDB operation.  "server" names the
 * foreign server, "what" says what was being done ("find on collection
 * \"x\"").  The libmongoc message is reduced to its server-provided part
 * and never contains the URI or credentials.  Chooses the SQLSTATE from
 * the error domain/code (connection problems -> class 08, duplicate key
 * -> 23505, interrupted/timeouts -> 57014, everything else -> HV000).
 */
extern void idx_report_error(const bson_error_t *error, const char *server,
							 const char *what) pg_attribute_noreturn();

/*
 * A copy of a libmongoc message with anything that looks like a connection
 * string removed, for a detail line.
 */
extern char *idx_scrub_message(const char *msg);

/* A command reply that failed: same, using the reply's code/errmsg */
extern void idx_report_reply_error(const bson_t *reply,
								   const bson_error_t *error,
								   const char *server,
								   const char *what) pg_attribute_noreturn();

/* A cursor that failed: same, using its error document */
extern void idx_report_cursor_error(mongoc_cursor_t *cursor, const char *server,
									const char *what) pg_attribute_noreturn();

/*
 * Put a failed command's reply code and errmsg (the server's words) into
 * *error, unless the connection itself failed.
 */
extern void idx_merge_reply_error(bson_error_t *error, const bson_t *reply);

#endif							/* IDXTABLE_REMOTE_ERROR_H */
