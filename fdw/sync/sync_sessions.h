/*-------------------------------------------------------------------------
 *
 * sync_sessions.h
 *		  The registry of the MongoDB sessions that run the FDW's own
 *		  transactions, in shared memory, for the applier that leaves them
 *		  out of its change stream (applier_exclude.c).
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/sync/sync_sessions.h
 *
 * Every backend registers the session of each of its cached clients
 * (IdxRemoteXact.session, used for nothing but the FDW's transactions)
 * with its lsid, and marks the start and end of each transaction, and
 * whether the transaction left an index table of a collection it wrote
 * to the applier ("doubt", xact_marker.c).  Events are ordered by one
 * shared sequence: a number taken later was taken after every earlier
 * one, by any process.
 *
 *-------------------------------------------------------------------------
 */
#ifndef IDXTABLE_SYNC_SESSIONS_H
#define IDXTABLE_SYNC_SESSIONS_H

#include "core/mongoc_compat.h"

#include "storage/lwlock.h"

/* Entries of the registry (fixed at server start) */
#define IDX_SYNC_MAX_SESSIONS	1024

/* Appliers that look at doubts (each by its slot number, < this) */
#define IDX_SYNC_MAX_WATCHERS	64

/* The bytes of an lsid's "id" (a UUID) */
#define IDX_LSID_LEN			16

/* A transaction of a registered session: its entry and its start */
typedef struct IdxSessionTxn
{
	int			entry;
	uint64		start_seq;
	uint8		lsid[IDX_LSID_LEN]; /* its session's */
} IdxSessionTxn;

/* ---- set up (from sync_state.c's shared memory hooks) ---- */
extern Size idx_sync_sessions_shmem_size(void);
extern void idx_sync_sessions_shmem_init(LWLock *lock);

/* ---- backends (core/xact.c, sync/xact_marker.c) ---- */

/* Register a session of server "serverid"; -1 if none can be (full) */
extern int	idx_sync_session_register(Oid serverid,
									  mongoc_client_session_t *session);

/* Forget entry "entry" (the session is ended) */
extern void idx_sync_session_forget(int entry);

/* Before a transaction's first command, and after its commit or abort */
extern void idx_sync_session_begin(int entry);
extern void idx_sync_session_end(int entry, uint64 end_time);

/* Before its commit: the transaction leaves work to the applier */
extern void idx_sync_session_doubt(int entry);

/* ---- the applier (applier/applier_exclude.c) ---- */

/* Bumped by every registration: a longer list to leave out */
extern uint64 idx_sync_sessions_generation(void);

/*
 * Into "out" (at most "max"), the open transactions of the sessions of
 * (dbid, serverid), or with "doubtful", the latest transaction of each
 * that raised a doubt (its entry keeps it until a later one does, or, for
 * a session that ended, until every watcher has seen it).  Returns how
 * many there are (may exceed max).  *as_of (if not NULL) is set to the
 * sequence number as of the look, for idx_sync_sessions_looked.
 */
extern int	idx_sync_sessions_txns(Oid dbid, Oid serverid, bool doubtful,
								   IdxSessionTxn *out, int max,
								   uint64 *as_of);

/*
 * Has that transaction ended (committed, aborted, or its session gone)?
 * *ended_by: a cluster time at or after its end, 0 if not known.
 */
extern bool idx_sync_txn_ended(const IdxSessionTxn *txn, uint64 *ended_by);

/*
 * The lsids of the live sessions of (dbid, serverid) into "out" (at most
 * max); returns how many there are (may exceed max).
 */
extern int	idx_sync_sessions_lsids(Oid dbid, Oid serverid,
									uint8 (*out)[IDX_LSID_LEN], int max);

/*
 * An applier (by slot number) looks at the doubts of (dbid, serverid)
 * from now on, until it unwatches (at exit); after each round it tells
 * up to which look it has seen them all (0: no stream open), so that the
 * entries of ended sessions with doubts can be freed.
 */
extern void idx_sync_sessions_watch(int watcher, Oid dbid, Oid serverid);
extern void idx_sync_sessions_unwatch(int watcher);
extern void idx_sync_sessions_looked(int watcher, uint64 seq);

#endif							/* IDXTABLE_SYNC_SESSIONS_H */
