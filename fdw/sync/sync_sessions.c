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
} SessionEntry;

typedef struct SessionRegistry
{
	LWLock	   *lock;
	pg_atomic_uint64 seq;		/* the shared sequence */
	uint64		generation;		/* bumped by every registration */
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
 * At backend exit: free the entries of this process.  A transaction still
 * open then is never committed by it.
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
			memset(&registry->entries[i], 0, sizeof(SessionEntry));
	LWLockRelease(registry->lock);
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
	for (i = 0; i < IDX_SYNC_MAX_SESSIONS; i++)
	{
		SessionEntry *e = &registry->entries[i];

		if (OidIsValid(e->dbid))
			continue;
		e->dbid = MyDatabaseId;
		e->serverid = serverid;
		e->pid = MyProcPid;
		memcpy(e->lsid, data, IDX_LSID_LEN);
		e->in_txn = false;
		e->start_seq = 0;
		e->doubt_start = 0;
		registry->generation++;
		break;
	}
	LWLockRelease(registry->lock);
	return i < IDX_SYNC_MAX_SESSIONS ? i : -1;
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
 * Forget entry "entry": its session is ended.
 */
void
idx_sync_session_forget(int entry)
{
	SessionEntry *e = lock_own_entry(entry);

	if (e == NULL)
		return;
	memset(e, 0, sizeof(SessionEntry));
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
 * returned).  Idempotent.
 */
void
idx_sync_session_end(int entry)
{
	SessionEntry *e = lock_own_entry(entry);

	if (e == NULL)
		return;
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
					   IdxSessionTxn *out, int max)
{
	int			n = 0;
	int			i;

	LWLockAcquire(registry->lock, LW_SHARED);
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
		}
		n++;
	}
	LWLockRelease(registry->lock);
	return n;
}

/*
 * Has transaction "txn" ended?  Its session has begun another one (start
 * numbers are never reused), is between transactions, or is gone.
 */
bool
idx_sync_txn_ended(const IdxSessionTxn *txn)
{
	SessionEntry *e = &registry->entries[txn->entry];
	bool		ended;

	LWLockAcquire(registry->lock, LW_SHARED);
	ended = !OidIsValid(e->dbid) || e->start_seq != txn->start_seq ||
		!e->in_txn;
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

		if (e->dbid != dbid || e->serverid != serverid)
			continue;
		if (n < max)
			memcpy(out[n], e->lsid, IDX_LSID_LEN);
		n++;
	}
	LWLockRelease(registry->lock);
	return n;
}
