/*-------------------------------------------------------------------------
 *
 * xact_state.c
 *		  The state of a cached client's MongoDB transaction as the
 *		  connection cache sees it: is a transaction open, and the end of
 *		  the client's sessions when the client goes.
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/core/xact_state.c
 *
 * The state (IdxRemoteXact) lives in the client's connection cache entry
 * (connection.c) and holds the client's sessions for the client's whole
 * life; xact.c starts, commits and aborts its transactions.  The cache
 * must not destroy a client whose transaction is open, and ends its
 * sessions when it destroys one: those two answers are here, below both
 * files, so that the cache never calls up into xact.c.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "core/xact_state.h"

/*
 * Is a MongoDB transaction open in "x"?  Its client must then be kept:
 * the transaction lives in the client's session.
 */
bool
idx_xact_state_open(const IdxRemoteXact *x)
{
	return x->in_txn;
}

/*
 * End the client's sessions before the client is destroyed.
 */
void
idx_xact_release(IdxRemoteXact *x)
{
	if (x->session)
		mongoc_client_session_destroy(x->session);
	if (x->retry_session)
		mongoc_client_session_destroy(x->retry_session);
	x->session = NULL;
	x->retry_session = NULL;
	x->in_txn = false;
}
