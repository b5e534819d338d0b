/*-------------------------------------------------------------------------
 *
 * sync_sessions.c
 *		  The registry of the sessions of the FDW's own MongoDB transactions
 *		  (see sync_sessions.h), in shared memory.
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/sync/sync_sessions.c
 *
 * A fixed array of entries under one LWLock: backends change only their
 * own entries, at a transaction's start and end (exclusive, a few stores),
 * and the applier reads them after each getMore (shared).  A full array
 * only means that a session is not registered: its transactions then stay
 * in the stream, as every write does without the registry.
 *
 * A session that ends (its backend exits, or its client is destroyed)
 * with a doubt raised does not free its entry at once: an armed stream
 * may have left out the doubtful transaction's events already, and only
 * the doubt makes its applier take them again.  The entry is "retired":
 * it keeps its doubt, with the sequence number of its retirement, until
 * every applier of its database and server (a "watcher") has looked at
 * the doubts after that (idx_sync_sessions_looked).  A watcher whose
 * streams are all closed holds nothing back: a stream that opens takes
 * every transaction from its stored position, which is older than any
 * event it left out without having seen its doubt.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "port/atomics.h"
#include "storage/ipc.h"
#include "storage/shmem.h"

#include "sync/sync_sessions.h"

/* One registered session */
typedef struct SessionEntry
{
	Oid			dbid;			/* InvalidOid: a free entry */
	Oid			serverid;
	int			pid;			/* the backend's */
	uint8		lsid[IDX_LSID_LEN];
	bool		in_txn;			/* a transaction is open */
	uint64		start_seq;		/* the start of the latest transaction */
	uint64		doubt_start;	/* the start of the latest transaction that
								 * raised a doubt; 0 none */
	uint64		retired_seq;	/* the session ended with a doubt at this
								 * number (pid is 0 then); 0 live */
	uint64		ended_through;	/* every ended transaction of the session
								 * ended at or before this cluster time (its
								 * operationTime then); 0 unknown */
} SessionEntry;

/* An applier that looks at the doubts of (dbid, serverid) */
typedef struct SessionWatcher
{
	Oid			dbid;			/* InvalidOid: none */
	Oid			serverid;
	uint64		looked_seq;		/* it has seen every doubt of a session
								 * retired at or before this number */
} SessionWatcher;

typedef struct SessionRegistry
{
	LWLock	   *lock;
	pg_atomic_uint64 seq;		/* the shared sequence */
	uint64		generation;		/* bumped by every registration */
	SessionWatcher watchers[IDX_SYNC_MAX_WATCHERS];
	SessionEntry entries[IDX_SYNC_MAX_SESSIONS];
} SessionRegistry;

static SessionRegistry *registry = NULL;

/* This backend has its exit callback */
static bool exit_callback_set = false;

/*
 * The size of the registry in shared memory.
 */
Size
idx_sync_sessions_shmem_size(void)
{
	return MAXALIGN(sizeof(SessionRegistry));
}

/*
 * Attach to (or create) the registry; from the shmem startup hook, with
 * AddinShmemInitLock held.
 */
void
idx_sync_sessions_shmem_init(LWLock *lock)
{
	bool		found;

	registry = ShmemInitStruct("idxtable_fdw transaction sessions",
							   sizeof(SessionRegistry), &found);
	if (found)
		return;
	memset(registry, 0, sizeof(SessionRegistry));
	registry->lock = lock;
	pg_atomic_init_u64(&registry->seq, 1);
}

/*
 * A new number of the shared sequence.
 */
static uint64
seq_next(void)
{
	return pg_atomic_fetch_add_u64(&registry->seq, 1) + 1;
}

/*
 * Has every watcher of retired entry "e" looked at the doubts since its
 * retirement?  With the lock held.
 */
static bool
retirement_seen(const SessionEntry *e)
{
	int			i;

	for (i = 0; i < IDX_SYNC_MAX_WATCHERS; i++)
	{
		const SessionWatcher *w = &registry->watchers[i];

		if (w->dbid == e->dbid && w->serverid == e->serverid &&
			w->looked_seq < e->retired_seq)
			return false;
	}
	return true;
}

/*
 * Free the retired entries that every watcher has seen; with the lock
 * held exclusively.
 */
static void
free_seen_retired(void)
{
	int			i;

	for (i = 0; i < IDX_SYNC_MAX_SESSIONS; i++)
	{
		SessionEntry *e = &registry->entries[i];

		if (e->retired_seq != 0 && retirement_seen(e))
			memset(e, 0, sizeof(SessionEntry));
	}
}

/*
 * The session of entry "e" has ended: free the entry, or retire it if its
 * latest doubt may not have been seen yet (see the file header).  A
 * transaction still open then is never committed by it.  With the lock
 * held exclusively.
 */
static void
end_entry(SessionEntry *e)
{
	if (e->doubt_start == 0)
	{
		memset(e, 0, sizeof(SessionEntry));
		return;
	}
	e->pid = 0;
	e->in_txn = false;
	e->retired_seq = seq_next();
	if (retirement_seen(e))
		memset(e, 0, sizeof(SessionEntry));
}

/*
 * At backend exit: end the sessions of this process.
 */
static void
forget_own_sessions(int code, Datum arg)
{
	int			i;

	if (registry == NULL)
		return;
	LWLockAcquire(registry->lock, LW_EXCLUSIVE);
	for (i = 0; i < IDX_SYNC_MAX_SESSIONS; i++)
		if (registry->entries[i].pid == MyProcPid)
			end_entry(&registry->entries[i]);
	LWLockRelease(registry->lock);
}

/*
 * The number of a free entry, freeing the retired entries every watcher
 * has seen if there is none; -1 if none is free then either.  With the
 * lock held exclusively.
 */
static int
free_entry(void)
{
	int			pass;
	int			i;

	for (pass = 0; pass < 2; pass++)
	{
		for (i = 0; i < IDX_SYNC_MAX_SESSIONS; i++)
			if (!OidIsValid(registry->entries[i].dbid))
				return i;
		free_seen_retired();
	}
	return -1;
}

/*
 * Register "session" of server "serverid" in this database; the entry's
 * number, or -1 if the registry is not there, is full, or the lsid is not
 * a UUID.
 */
int
idx_sync_session_register(Oid serverid, mongoc_client_session_t *session)
{
	const bson_t *lsid = mongoc_client_session_get_lsid(session);
	bson_iter_t iter;
	const uint8_t *data = NULL;
	uint32_t	len = 0;
	bson_subtype_t subtype;
	int			i;

	if (registry == NULL)
		return -1;
	if (bson_iter_init_find(&iter, lsid, "id") && BSON_ITER_HOLDS_BINARY(&iter))
		bson_iter_binary(&iter, &subtype, &len, &data);
	if (len != IDX_LSID_LEN)
		return -1;
	if (!exit_callback_set)
	{
		before_shmem_exit(forget_own_sessions, (Datum) 0);
		exit_callback_set = true;
	}
	LWLockAcquire(registry->lock, LW_EXCLUSIVE);
	i = free_entry();
	if (i >= 0)
	{
		SessionEntry *e = &registry->entries[i];

		memset(e, 0, sizeof(SessionEntry));
		e->dbid = MyDatabaseId;
		e->serverid = serverid;
		e->pid = MyProcPid;
		memcpy(e->lsid, data, IDX_LSID_LEN);
		registry->generation++;
	}
	LWLockRelease(registry->lock);
	return i;
}

/*
 * Lock the registry and return entry "entry" of this backend; NULL (and
 * not locked) if there is no registry or the entry is not ours (a bug of
 * the caller's, or an entry freed at exit).  The caller releases the lock.
 */
static SessionEntry *
lock_own_entry(int entry)
{
	SessionEntry *e;

	if (registry == NULL || entry < 0 || entry >= IDX_SYNC_MAX_SESSIONS)
		return NULL;
	LWLockAcquire(registry->lock, LW_EXCLUSIVE);
	e = &registry->entries[entry];
	if (e->pid == MyProcPid)
		return e;
	LWLockRelease(registry->lock);
	return NULL;
}

/*
 * Forget entry "entry": its session is ended (see end_entry).
 */
void
idx_sync_session_forget(int entry)
{
	SessionEntry *e = lock_own_entry(entry);

	if (e == NULL)
		return;
	end_entry(e);
	LWLockRelease(registry->lock);
}

/*
 * A transaction of the session starts (before its first command): its
 * number is taken under the lock, so an applier that looks later sees it
 * open, and one that looked earlier wrote before it started.
 */
void
idx_sync_session_begin(int entry)
{
	SessionEntry *e = lock_own_entry(entry);

	if (e == NULL)
		return;
	e->in_txn = true;
	e->start_seq = seq_next();
	LWLockRelease(registry->lock);
}

/*
 * The transaction of the session has ended (after its commit or abort
 * returned, or failed), at cluster time "end_time" (the session's
 * operationTime then, or 0 if unknown).  Idempotent.
 */
void
idx_sync_session_end(int entry, uint64 end_time)
{
	SessionEntry *e = lock_own_entry(entry);

	if (e == NULL)
		return;
	if (e->in_txn)
		e->ended_through = Max(e->ended_through, end_time);
	e->in_txn = false;
	LWLockRelease(registry->lock);
}

/*
 * The open transaction of the session leaves work to the applier: said
 * before its commit.
 */
void
idx_sync_session_doubt(int entry)
{
	SessionEntry *e = lock_own_entry(entry);

	if (e == NULL)
		return;
	if (e->in_txn)
		e->doubt_start = e->start_seq;
	LWLockRelease(registry->lock);
}

/*
 * The registry's generation (see sync_sessions.h).
 */
uint64
idx_sync_sessions_generation(void)
{
	uint64		generation;

	LWLockAcquire(registry->lock, LW_SHARED);
	generation = registry->generation;
	LWLockRelease(registry->lock);
	return generation;
}

/*
 * The open or the doubtful transactions of (dbid, serverid): see
 * sync_sessions.h.
 */
int
idx_sync_sessions_txns(Oid dbid, Oid serverid, bool doubtful,
					   IdxSessionTxn *out, int max, uint64 *as_of)
{
	int			n = 0;
	int			i;

	LWLockAcquire(registry->lock, LW_SHARED);
	if (as_of)
		*as_of = pg_atomic_read_u64(&registry->seq);
	for (i = 0; i < IDX_SYNC_MAX_SESSIONS; i++)
	{
		SessionEntry *e = &registry->entries[i];
		uint64		start = doubtful ? e->doubt_start :
			(e->in_txn ? e->start_seq : 0);

		if (e->dbid != dbid || e->serverid != serverid || start == 0)
			continue;
		if (n < max)
		{
			out[n].entry = i;
			out[n].start_seq = start;
			memcpy(out[n].lsid, e->lsid, IDX_LSID_LEN);
		}
		n++;
	}
	LWLockRelease(registry->lock);
	return n;
}

/*
 * Has transaction "txn" ended?  Its session has begun another one (start
 * numbers are never reused), is between transactions, or is gone.  If so,
 * *ended_by is a cluster time at or after its end (its session's latest
 * ended transaction's), or 0 if that is not known.
 */
bool
idx_sync_txn_ended(const IdxSessionTxn *txn, uint64 *ended_by)
{
	SessionEntry *e = &registry->entries[txn->entry];
	bool		same;
	bool		ended;

	LWLockAcquire(registry->lock, LW_SHARED);
	/* the entry may have been freed, and taken by another session */
	same = OidIsValid(e->dbid) &&
		memcmp(e->lsid, txn->lsid, IDX_LSID_LEN) == 0;
	ended = !same || e->start_seq != txn->start_seq || !e->in_txn;
	*ended_by = same ? e->ended_through : 0;
	LWLockRelease(registry->lock);
	return ended;
}

/*
 * The lsids of the sessions of (dbid, serverid): see sync_sessions.h.
 */
int
idx_sync_sessions_lsids(Oid dbid, Oid serverid, uint8 (*out)[IDX_LSID_LEN],
						int max)
{
	int			n = 0;
	int			i;

	LWLockAcquire(registry->lock, LW_SHARED);
	for (i = 0; i < IDX_SYNC_MAX_SESSIONS; i++)
	{
		SessionEntry *e = &registry->entries[i];

		if (e->dbid != dbid || e->serverid != serverid || e->retired_seq != 0)
			continue;
		if (n < max)
			memcpy(out[n], e->lsid, IDX_LSID_LEN);
		n++;
	}
	LWLockRelease(registry->lock);
	return n;
}

/*
 * Applier "watcher" (its slot number) starts to look at the doubts of
 * (dbid, serverid); it holds back every retirement from now until it has
 * looked.
 */
void
idx_sync_sessions_watch(int watcher, Oid dbid, Oid serverid)
{
	SessionWatcher *w;

	Assert(watcher >= 0 && watcher < IDX_SYNC_MAX_WATCHERS);
	LWLockAcquire(registry->lock, LW_EXCLUSIVE);
	w = &registry->watchers[watcher];
	w->dbid = dbid;
	w->serverid = serverid;
	w->looked_seq = 0;
	LWLockRelease(registry->lock);
}

/*
 * Applier "watcher" stops looking (it exits): it holds nothing back.
 */
void
idx_sync_sessions_unwatch(int watcher)
{
	Assert(watcher >= 0 && watcher < IDX_SYNC_MAX_WATCHERS);
	if (registry == NULL)
		return;
	LWLockAcquire(registry->lock, LW_EXCLUSIVE);
	memset(&registry->watchers[watcher], 0, sizeof(SessionWatcher));
	free_seen_retired();
	LWLockRelease(registry->lock);
}

/*
 * Applier "watcher" has seen every doubt of a session retired at or before
 * "seq" (an as_of of idx_sync_sessions_txns); 0: it holds nothing back (no
 * stream open).  Frees the retired entries every watcher has seen.
 */
void
idx_sync_sessions_looked(int watcher, uint64 seq)
{
	SessionWatcher *w;
	bool		sweep;

	Assert(watcher >= 0 && watcher < IDX_SYNC_MAX_WATCHERS);
	if (seq == 0)
		seq = PG_UINT64_MAX;
	LWLockAcquire(registry->lock, LW_SHARED);
	w = &registry->watchers[watcher];
	sweep = w->looked_seq != seq;
	LWLockRelease(registry->lock);
	if (!sweep)
		return;
	LWLockAcquire(registry->lock, LW_EXCLUSIVE);
	w->looked_seq = seq;
	free_seen_retired();
	LWLockRelease(registry->lock);
}
