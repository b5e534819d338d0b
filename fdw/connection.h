/*-------------------------------------------------------------------------
 *
 * connection.h
 *		  MongoDB client cache and error translation.
 *
 *-------------------------------------------------------------------------
 */
#ifndef IDXTABLE_CONNECTION_H
#define IDXTABLE_CONNECTION_H

#include "postgres.h"

#include <mongoc/mongoc.h>

#include "foreign/foreign.h"

/*
 * Return the cached client for (server, user mapping), connecting on first
 * use.  The client is owned by the cache: do not destroy it.  Connection
 * and authentication failures raise class-08 errors naming the server.
 */
extern mongoc_client_t *idx_get_client(ForeignServer *server, UserMapping *user);

/*
 * Same, looked up from a foreign table's OID and the user to connect as:
 * the range table entry's checkAsUser (view owner) for scans and writes,
 * InvalidOid (the current user) for ANALYZE and idxtable.* functions.
 */
extern mongoc_client_t *idx_get_client_for_rel(Oid relid, Oid userid,
											   ForeignServer **server);

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
 * Run a command on a database and return the reply (caller destroys it).
 * Errors are reported with idx_report_reply_error().
 */
extern void idx_run_command(mongoc_client_t *client, const char *server,
							const char *database, const bson_t *command,
							bson_t *reply, const char *what);

/* Metadata count of a collection's documents, for progress (0: unknown) */
extern int64 idx_count_documents(mongoc_client_t *client, const char *server,
								 const char *database,
								 const char *collection);

/*
 * Count commands sent from now on into *counter (NULL stops); returns the
 * previous target.  Used around cursor calls for EXPLAIN ANALYZE.
 */
extern uint64 *idx_count_round_trips(uint64 *counter);

/* Pin (+1) or unpin (-1) a cached client while a scan holds a cursor */
extern void idx_client_pin(mongoc_client_t *client, int delta);

/* Drop all idle cached clients; true if any was dropped */
extern bool idx_disconnect_all(void);

#endif							/* IDXTABLE_CONNECTION_H */
