/*-------------------------------------------------------------------------
 *
 * xact_state.h
 *		  The state of a cached client's MongoDB transaction, kept beside
 *		  the client in the connection cache (xact_state.c).
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/core/xact_state.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef IDXTABLE_XACT_STATE_H
#define IDXTABLE_XACT_STATE_H

#include "nodes/pg_list.h"
#include "utils/timestamp.h"

#include "core/mongoc_compat.h"

/*
 * The MongoDB transaction state of one cached client.  It lives in the
 * client's connection cache entry (connection.c), beside the client it
 * belongs to, and holds the client's session for the client's whole life.
 */
typedef struct IdxRemoteXact
{
	mongoc_client_t *client;	/* NULL: the entry is not connected */
	char		servername[NAMEDATALEN];
	Oid			serverid;
	Oid			umid;			/* the client's user mapping */
	mongoc_client_session_t *session;	/* NULL until the first write */
	int			registered;		/* the session's entry + 1 in the registry of
								 * the applier (sync/xact_marker.c); 0: none */
	bool		registry_open;	/* the registry has its transaction open */
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
	/* retryable bulkWrite commands outside transactions (bulk_write.c) */
	mongoc_client_session_t *retry_session; /* NULL until the first one */
	int64		retry_txn;		/* the txnNumber of the last one */
	uint64		learned_time;	/* the latest cluster time the server told
								 * this client outside the session (0: none) */
} IdxRemoteXact;

/* Does "x" hold an open MongoDB transaction (and so its session)? */
extern bool idx_xact_state_open(const IdxRemoteXact *x);

/* The client of "x" is about to be destroyed: end its session */
extern void idx_xact_release(IdxRemoteXact *x);

#endif							/* IDXTABLE_XACT_STATE_H */
