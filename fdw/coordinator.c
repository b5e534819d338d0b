/*-------------------------------------------------------------------------
 *
 * coordinator.c
 *		  The transaction coordinator: the FDW's only transaction callbacks.
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/coordinator.c
 *
 * Several parts of the FDW have work to do when a PostgreSQL transaction
 * ends: the MongoDB transactions (xact.c), the applier's markers
 * (xact_marker.c), the pending index DDL (index_ddl.c), the notes to the
 * change-stream workers (sync_notify.c) and the connection cache
 * (connection.c).  They do not register callbacks of their own; these two
 * call them, so the order is fixed here rather than by registration:
 *
 *	 pre-commit:  for every client, the marker of what its MongoDB
 *				  transaction's writes maintained, then its commit; then
 *				  the pending index DDL, told whether foreign writes are
 *				  final by now (a MongoDB commit or ordered-mode writes);
 *	 commit:	  the index DDL deferred until PostgreSQL's commit, then the
 *				  notes to the change-stream workers;
 *	 abort:		  abort every MongoDB transaction, then the index DDL's
 *				  cleanup (dropping the collections of aborted builds),
 *				  then forget the notes to the workers;
 *	 and last, the statements noted as claiming unique keys in ordered
 *	 mode (index_claims.c) are over, and the connection cache's cleanup.
 *
 * Collection drops thus never go out while a MongoDB transaction of ours
 * holds locks on the collection (on mongod a drop waits for them until
 * the transaction expires), and a drop that fails after the MongoDB
 * commit cannot roll back a PostgreSQL transaction whose foreign writes
 * are already committed.  Subtransaction ends run in the same order.
 *
 * This file is the only one that knows every layer: the MongoDB core
 * (xact.c, connection.c), the index tables (index_ddl.c) and the
 * change-stream workers (fdw/sync/); the layers below it do not call up.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"

#include "coordinator.h"
#include "core/connection.h"
#include "core/xact.h"
#include "index/index_claims.h"
#include "index/index_ddl.h"
#include "sync/sync_state.h"
#include "sync/xact_marker.h"

static void xact_callback(XactEvent event, void *arg);
static void subxact_callback(SubXactEvent event, SubTransactionId mySubid,
							 SubTransactionId parentSubid, void *arg);

/*
 * Register the transaction callbacks.  Called once, from _PG_init: every
 * callback returns at once in a transaction that did nothing of ours.
 */
void
idx_register_xact_callbacks(void)
{
	RegisterXactCallback(xact_callback, NULL);
	RegisterSubXactCallback(subxact_callback, NULL);
}

/*
 * Pre-commit of one client: refuse a doomed transaction; write the marker
 * into an open one, commit it and say so in *arg.
 */
static void
pre_commit_one(IdxRemoteXact *x, void *arg)
{
	idx_xact_check_not_doomed(x);
	if (x->in_txn)
	{
		idx_xact_write_markers(x);
		idx_xact_commit_remote(x);
		idx_xact_note_ended(x);
		*(bool *) arg = true;
	}
}

/*
 * PREPARE TRANSACTION of one client: refused if it wrote.
 */
static void
pre_prepare_one(IdxRemoteXact *x, void *arg)
{
	idx_xact_refuse_prepare(x);
}

/*
 * Abort one client's transaction.
 */
static void
abort_one(IdxRemoteXact *x, void *arg)
{
	idx_xact_abort_remote(x);
	idx_xact_note_ended(x);
}

/*
 * Forget one client's transaction at the end of the PostgreSQL one.
 */
static void
reset_one(IdxRemoteXact *x, void *arg)
{
	idx_xact_note_ended(x);
	idx_xact_reset(x);
}

/*
 * At abort: say that the writes made outside a MongoDB transaction stay.
 */
static void
warn_ordered_writes_kept(void)
{
	IdxConsistency mode;
	const char *relname = idx_xact_ordered_write_rel(&mode);

	if (relname)
		ereport(WARNING,
				(errmsg("writes to foreign table \"%s\" were not rolled back",
						relname),
				 errdetail("The table's consistency mode is '%s': each write is final when it is made.",
						   idx_consistency_name(mode))));
}

/*
 * The coordinator (see the head of this file).
 */
static void
xact_callback(XactEvent event, void *arg)
{
	bool		committed = false;

	switch (event)
	{
		case XACT_EVENT_PRE_COMMIT:
		case XACT_EVENT_PARALLEL_PRE_COMMIT:
			idx_conn_foreach_xact(pre_commit_one, &committed);
			idx_ddl_pre_commit(committed || idx_xact_has_ordered_write());
			return;
		case XACT_EVENT_PRE_PREPARE:
			idx_conn_foreach_xact(pre_prepare_one, NULL);
			idx_ddl_pre_prepare();
			return;
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_PARALLEL_COMMIT:
		case XACT_EVENT_PREPARE:
			idx_ddl_at_commit();
			idx_sync_at_commit();
			break;
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_ABORT:
			idx_conn_foreach_xact(abort_one, NULL);
			warn_ordered_writes_kept();
			idx_ddl_at_abort();
			idx_sync_at_abort();
			break;
		default:
			return;
	}

	idx_conn_foreach_xact(reset_one, NULL);
	idx_xact_unnote_ordered_write();
	idx_claims_xact_end();
	if (event != XACT_EVENT_PREPARE)
		idx_conn_xact_end(event == XACT_EVENT_COMMIT ||
						  event == XACT_EVENT_PARALLEL_COMMIT);
}

/*
 * Subtransaction end of one client (*arg: committed?).
 */
static void
subxact_end_one(IdxRemoteXact *x, void *arg)
{
	idx_xact_subxact_end(x, *(bool *) arg);
}

/*
 * Subtransaction end: the MongoDB transactions first (an abort aborts
 * them before the index DDL drops the collections a build of the
 * subtransaction created), then the pending index DDL.
 */
static void
subxact_callback(SubXactEvent event, SubTransactionId mySubid,
				 SubTransactionId parentSubid, void *arg)
{
	bool		commit = (event == SUBXACT_EVENT_COMMIT_SUB);

	if (event != SUBXACT_EVENT_COMMIT_SUB && event != SUBXACT_EVENT_ABORT_SUB)
		return;
	idx_conn_foreach_xact(subxact_end_one, &commit);
	idx_ddl_subxact_end(commit, mySubid, parentSubid);
}
