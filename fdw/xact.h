/*-------------------------------------------------------------------------
 *
 * xact.h
 *		  MongoDB transactions tied to the PostgreSQL transaction (option
 *		  consistency 'transaction').
 *
 * The first foreign write of a PostgreSQL transaction on a server starts a
 * MongoDB transaction on that client's session; every later write and read
 * of the PostgreSQL transaction on that client runs in it.  It is committed
 * at PostgreSQL pre-commit (a failed commit fails the COMMIT) and aborted
 * when the PostgreSQL transaction aborts.  MongoDB has no savepoints, so a
 * rollback to a savepoint taken before a foreign write aborts the MongoDB
 * transaction and the PostgreSQL transaction can then only roll back.
 *
 *-------------------------------------------------------------------------
 */
#ifndef IDXTABLE_XACT_H
#define IDXTABLE_XACT_H

#include "postgres.h"

#include <mongoc/mongoc.h>

#include "option.h"

/*
 * The consistency mode a write to this table uses: the option, or for the
 * default, "transaction" if the server supports transactions (a replica set
 * member or mongos of wire version 7/8 or later) and "ordered" otherwise.
 * An explicit "transaction" on a server without transactions is an error.
 */
extern IdxConsistency idx_xact_mode(const IdxTableInfo *info,
									mongoc_client_t *client,
									const char *servername);

/*
 * Before a write in transaction mode: the session of the client's open
 * MongoDB transaction, started now if this is the first write.
 */
extern mongoc_client_session_t *idx_xact_begin_write(mongoc_client_t *client,
													 const char *servername);

/* Remember an ordered-mode write (for the warning at rollback) */
extern void idx_xact_note_ordered_write(const char *relname);

/* Has the transaction made ordered-mode writes? */
extern bool idx_xact_has_ordered_write(void);

/* A statement undid the transaction's only ordered-mode writes */
extern void idx_xact_unnote_ordered_write(void);

/*
 * Before a read: append the session of the client's open transaction to
 * the command options, so the read sees the transaction's own writes.
 * Does nothing if the client has no open transaction.
 */
extern void idx_xact_append_session(mongoc_client_t *client, bson_t *opts);

/* The client is about to be destroyed: end its session */
extern void idx_xact_forget_client(mongoc_client_t *client);

/* Does the client have an open MongoDB transaction (holding its session)? */
extern bool idx_xact_client_busy(mongoc_client_t *client);

#endif							/* IDXTABLE_XACT_H */
