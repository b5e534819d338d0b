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

#include "nodes/pg_list.h"
#include "option.h"
#include "utils/timestamp.h"

/*
 * The MongoDB transaction state of one cached client.  It lives in the
 * client's connection cache entry (connection.c), beside the client it
 * belongs to, and holds the client's session for the client's whole life.
 */
typedef struct IdxRemoteXact
{
	mongoc_client_t *client;	/* NULL: the entry is not connected */
	char		servername[NAMEDATALEN];
	mongoc_client_session_t *session;	/* NULL until the first write */
	bool		in_txn;			/* a MongoDB transaction is open */
	int			write_level;	/* deepest nest level holding writes */
	bool		doomed;			/* rolled back to a savepoint after writes */
	TimestampTz started;		/* start of its latest MongoDB transaction */
	int			lifetime;		/* the server's transaction lifetime limit in
								 * s, 0: not asked yet (mongo_limits.c) */
	/* for the applier's marker (xact_marker.c), in TopTransactionContext */
	List	   *maintained;		/* IdxXactMaintained *: what the writes of
								 * the open transaction maintained */
	uint64		known_before;	/* a cluster time the session knew before
								 * the transaction started (0: none) */
	uint64		learned_time;	/* the latest cluster time the server told
								 * this client outside the session (0: none) */
} IdxRemoteXact;

/*
 * Register the transaction callbacks (once per backend).  They are the
 * only ones of the FDW: they commit and abort the MongoDB transactions,
 * then run the pending index DDL (index_ddl.c), then let the connection
 * cache clean up, always in that order.
 */
extern void idx_xact_register_callbacks(void);

/*
 * The consistency mode a write to this table uses: the option, or for the
 * default, "transaction" if the server supports transactions (a replica set
 * member or mongos of wire version 7/8 or later) and "ordered" otherwise.
 * "ordered" and "eventual" need no MongoDB transaction.
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

/*
 * Remember a write outside a MongoDB transaction, in mode "ordered" or
 * "eventual" (for the warning at rollback)
 */
extern void idx_xact_note_ordered_write(const char *relname,
										const char *mode);

/*
 * A cluster time the server of "client" reported (packed: seconds << 32 |
 * increment), for the next transaction's marker to name (xact_marker.c).
 */
extern void idx_xact_note_cluster_time(mongoc_client_t *client, uint64 ct);

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

/* The client of "x" is about to be destroyed: end its session */
extern void idx_xact_release(IdxRemoteXact *x);

/* Does the client have an open MongoDB transaction (holding its session)? */
extern bool idx_xact_client_busy(mongoc_client_t *client);

/*
 * The server of a MongoDB transaction this PostgreSQL transaction has
 * open (or has doomed by a rollback to a savepoint), or NULL if none.
 */
extern const char *idx_xact_open_server(void);

/* ---- xact_marker.c: what a transaction's writes maintained ---- */

/*
 * A write in transaction mode to fact collection "collection" of MongoDB
 * database "database" maintained the index tables "defs" (IdxIndexDef *);
 * the transaction's marker lists, per fact collection, the index tables
 * every such write maintained.
 */
extern void idx_xact_note_maintained(mongoc_client_t *client,
									 const char *servername,
									 const char *database,
									 const char *collection, List *defs);

/*
 * Pre-commit of the MongoDB transaction of "x": write its markers into
 * <db>.idxtable.sync, in the transaction (see xact_marker.c).
 */
extern void idx_xact_write_markers(IdxRemoteXact *x);

#endif							/* IDXTABLE_XACT_H */
