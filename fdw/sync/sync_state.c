/*-------------------------------------------------------------------------
 *
 * sync_state.c
 *		  The shared memory of the change-stream applier: applier slots,
 *		  the status of every maintained index table, and the catalog
 *		  generation and workers of each database.
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/sync/sync_state.c
 *
 * The state exists only when idxtable_fdw is loaded through
 * shared_preload_libraries: _PG_init then installs the PostgreSQL 15
 * shmem_request_hook (space and two named LWLocks) and shmem_startup_hook
 * (initialisation).  In a backend that loaded the library later,
 * idx_sync_enabled() is false and every index table is unmaintained.
 *
 * Locking.  The slot table's allocation (claim, release: the identity fields)
 * and the hash of index statuses are under the tranche's first LWLock; the
 * registry of transaction sessions (sync_sessions.c) is under its second; the
 * registry of ordered writes in flight (index_claims.c) needs no lock.  A
 * slot's own fields (state, pid, latch, counters, last error) are under its
 * spinlock; "requested" is an atomic.  The small table of databases (catalog
 * generation, database worker's latch) is under a spinlock of its own, because
 * appliers read their generation on every loop and index DDL bumps it at
 * commit.  No lock is ever held while another is taken, except the LWLock
 * around a slot's spinlock.
 *
 * Waiting.  A backend that waits for an index (idx_sync_wait) sleeps on
 * the condition variable of the index's applier slot, which the applier
 * broadcasts after every applied batch and every state change; the sleep
 * is timed and interruptible.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <signal.h>

#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/proc.h"
#include "storage/shmem.h"
#include "utils/hsearch.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"

#include "index/index_claims.h"
#include "sync/sync_state.h"
#include "sync/sync_sessions.h"
#include "sync/sync_workers.h"

#define IDX_SYNC_TRANCHE		"idxtable_fdw"

/* One database the shared state knows of */
typedef struct IdxSyncDatabase
{
	Oid			dbid;			/* InvalidOid: unused */
	uint64		generation;		/* bumped by idx_sync_catalog_changed */
	pid_t		worker_pid;		/* its database worker, 0 if none */
	Latch	   *worker_latch;
	bool		no_extension;	/* its last worker found no idxtable_fdw */
	TimestampTz dropping_at;	/* DROP DATABASE or the like began then */
} IdxSyncDatabase;

/* The whole shared state but the index hash */
typedef struct IdxSyncShared
{
	LWLock	   *lock;			/* slot allocation and the index hash */

	slock_t		db_mutex;		/* the databases and the launcher fields */
	pid_t		launcher_pid;
	Latch	   *launcher_latch;
	uint64		overflow_generation;	/* for databases not in the table */
	IdxSyncDatabase databases[IDX_SYNC_MAX_DATABASES];

	IdxApplierSlot slots[IDX_SYNC_MAX_APPLIERS];
} IdxSyncShared;

/* The hash key: an IdxSyncIndexStatus's leading fields, zero-padded */
#define IDX_SYNC_KEY_SIZE \
	(offsetof(IdxSyncIndexStatus, definition_id) + IDX_SYNC_UUID_LEN)

static IdxSyncShared *sync_shared = NULL;
static HTAB *sync_indexes = NULL;

static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

/*
 * The size of the shared state.
 */
static Size
sync_shmem_size(void)
{
	Size		size = MAXALIGN(sizeof(IdxSyncShared));

	size = add_size(size, hash_estimate_size(IDX_SYNC_MAX_INDEXES,
											 sizeof(IdxSyncIndexStatus)));
	size = add_size(size, idx_sync_sessions_shmem_size());
	return add_size(size, idx_claims_shmem_size());
}

/*
 * shmem_request_hook: reserve the space and the LWLock.
 */
static void
sync_shmem_request(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	RequestAddinShmemSpace(sync_shmem_size());
	RequestNamedLWLockTranche(IDX_SYNC_TRANCHE, 2);
}

/*
 * Initialise a freshly allocated shared state.
 */
static void
sync_shared_init(IdxSyncShared *shared)
{
	int			i;

	memset(shared, 0, sizeof(IdxSyncShared));
	shared->lock = &(GetNamedLWLockTranche(IDX_SYNC_TRANCHE))->lock;
	SpinLockInit(&shared->db_mutex);
	for (i = 0; i < IDX_SYNC_MAX_APPLIERS; i++)
	{
		IdxApplierSlot *slot = &shared->slots[i];

		SpinLockInit(&slot->mutex);
		slot->state = IDX_APPLIER_FREE;
		pg_atomic_init_u64(&slot->requested, 0);
		pg_atomic_init_u32(&slot->long_poll, 0);
		pg_atomic_init_u64(&slot->wake_failed_at, 0);
		pg_atomic_init_u64(&slot->woken_for, 0);
		ConditionVariableInit(&slot->applied_cv);
	}
}

/*
 * shmem_startup_hook: attach to (or create) the shared state.
 */
static void
sync_shmem_startup(void)
{
	bool		found;
	HASHCTL		ctl;

	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	sync_shared = ShmemInitStruct("idxtable_fdw sync state",
								  sizeof(IdxSyncShared), &found);
	if (!found)
		sync_shared_init(sync_shared);

	memset(&ctl, 0, sizeof(ctl));
	ctl.keysize = IDX_SYNC_KEY_SIZE;
	ctl.entrysize = sizeof(IdxSyncIndexStatus);
	sync_indexes = ShmemInitHash("idxtable_fdw index status",
								 IDX_SYNC_MAX_INDEXES, IDX_SYNC_MAX_INDEXES,
								 &ctl, HASH_ELEM | HASH_BLOBS);
	idx_sync_sessions_shmem_init(&(GetNamedLWLockTranche(IDX_SYNC_TRANCHE))[1].lock);
	idx_claims_shmem_init();
	LWLockRelease(AddinShmemInitLock);
}

/*
 * Install the hooks that create the shared state; from _PG_init while
 * shared_preload_libraries is processed.
 */
void
idx_sync_shmem_install(void)
{
	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = sync_shmem_request;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = sync_shmem_startup;
}

/*
 * True if the shared state exists (the library is preloaded).
 */
bool
idx_sync_enabled(void)
{
	return sync_shared != NULL;
}

/*
 * Slot "slotno"; an out-of-range number is a bug of the caller's.
 */
IdxApplierSlot *
idx_sync_slot(int slotno)
{
	Assert(sync_shared != NULL);
	if (slotno < 0 || slotno >= IDX_SYNC_MAX_APPLIERS)
		elog(ERROR, "idxtable_fdw applier slot %d does not exist", slotno);
	return &sync_shared->slots[slotno];
}

/*
 * The state of a slot, read under its spinlock.
 */
static IdxApplierState
slot_state(IdxApplierSlot *slot)
{
	IdxApplierState state;

	SpinLockAcquire(&slot->mutex);
	state = slot->state;
	SpinLockRelease(&slot->mutex);
	return state;
}

/*
 * The slot in use for (dbid, serverid, ownerid), or -1.  Caller holds the
 * LWLock.
 */
static int
find_slot(Oid dbid, Oid serverid, Oid ownerid)
{
	int			i;

	for (i = 0; i < IDX_SYNC_MAX_APPLIERS; i++)
	{
		IdxApplierSlot *slot = &sync_shared->slots[i];

		if (slot_state(slot) != IDX_APPLIER_FREE &&
			slot->dbid == dbid && slot->serverid == serverid &&
			slot->ownerid == ownerid)
			return i;
	}
	return -1;
}

/*
 * Make free slot "slot" the one of (dbid, serverid, ownerid), STARTING.
 * Caller holds the LWLock exclusively.
 */
static void
init_slot(IdxApplierSlot *slot, Oid dbid, Oid serverid, Oid ownerid)
{
	slot->dbid = dbid;
	slot->serverid = serverid;
	slot->ownerid = ownerid;
	pg_atomic_write_u64(&slot->requested, 0);
	pg_atomic_write_u32(&slot->long_poll, 0);
	pg_atomic_write_u64(&slot->wake_failed_at, 0);
	pg_atomic_write_u64(&slot->woken_for, 0);
	SpinLockAcquire(&slot->mutex);
	slot->state = IDX_APPLIER_STARTING;
	slot->pid = 0;
	slot->latch = NULL;
	slot->started_at = 0;
	slot->last_batch_at = 0;
	slot->restarts = 0;
	slot->last_error[0] = '\0';
	slot->error_logged_at = 0;
	SpinLockRelease(&slot->mutex);
}

/*
 * The slot of (dbid, serverid, ownerid), claimed (STARTING) if there is
 * none; -1 if every slot is taken.
 */
int
idx_sync_claim_slot(Oid dbid, Oid serverid, Oid ownerid)
{
	int			slotno;
	int			i;

	Assert(sync_shared != NULL);
	LWLockAcquire(sync_shared->lock, LW_EXCLUSIVE);
	slotno = find_slot(dbid, serverid, ownerid);
	for (i = 0; slotno < 0 && i < IDX_SYNC_MAX_APPLIERS; i++)
	{
		IdxApplierSlot *slot = &sync_shared->slots[i];

		if (slot_state(slot) == IDX_APPLIER_FREE)
		{
			init_slot(slot, dbid, serverid, ownerid);
			slotno = i;
		}
	}
	LWLockRelease(sync_shared->lock);
	return slotno;
}

/*
 * Free a slot and forget the status of its indexes; wake whoever waits
 * on it (they find the index unmaintained).
 */
void
idx_sync_release_slot(int slotno)
{
	IdxApplierSlot *slot = idx_sync_slot(slotno);
	HASH_SEQ_STATUS seq;
	IdxSyncIndexStatus *entry;

	LWLockAcquire(sync_shared->lock, LW_EXCLUSIVE);
	hash_seq_init(&seq, sync_indexes);
	while ((entry = (IdxSyncIndexStatus *) hash_seq_search(&seq)) != NULL)
	{
		if (entry->slotno == slotno)
			hash_search(sync_indexes, entry, HASH_REMOVE, NULL);
	}
	SpinLockAcquire(&slot->mutex);
	slot->state = IDX_APPLIER_FREE;
	slot->pid = 0;
	slot->latch = NULL;
	SpinLockRelease(&slot->mutex);
	LWLockRelease(sync_shared->lock);
	ConditionVariableBroadcast(&slot->applied_cv);
}

/*
 * The applier of slot "slotno" failed with "message": none of its index
 * tables is followed now, whether or not it had loaded them yet.
 */
void
idx_sync_slot_failed(int slotno, const char *message)
{
	HASH_SEQ_STATUS seq;
	IdxSyncIndexStatus *entry;

	LWLockAcquire(sync_shared->lock, LW_EXCLUSIVE);
	hash_seq_init(&seq, sync_indexes);
	while ((entry = (IdxSyncIndexStatus *) hash_seq_search(&seq)) != NULL)
	{
		if (entry->slotno != slotno)
			continue;
		entry->streaming = false;
		entry->blocked = false; /* it is started again */
		strlcpy(entry->last_error, message, IDX_SYNC_ERROR_LEN);
	}
	LWLockRelease(sync_shared->lock);
	ConditionVariableBroadcast(&idx_sync_slot(slotno)->applied_cv);
}

/*
 * Note that a backend's wake-up for the applier of slot "slotno" was
 * acknowledged at "time": its event is in the history, so the applier
 * need not write a heartbeat of its own for a request up to that time
 * (applier_position.c).  Done before the request that it answers.
 */
void
idx_sync_note_wake_up(int slotno, IdxClusterTime time)
{
	IdxApplierSlot *slot = idx_sync_slot(slotno);
	uint64		cur = pg_atomic_read_u64(&slot->woken_for);

	while (cur < time &&
		   !pg_atomic_compare_exchange_u64(&slot->woken_for, &cur, time))
		;
}

/*
 * Raise a slot's requested time to "target" and wake its applier if that
 * raised it.
 */
void
idx_sync_request(int slotno, IdxClusterTime target)
{
	IdxApplierSlot *slot = idx_sync_slot(slotno);
	uint64		cur = pg_atomic_read_u64(&slot->requested);
	Latch	   *latch;

	while (cur < target)
	{
		if (pg_atomic_compare_exchange_u64(&slot->requested, &cur, target))
		{
			SpinLockAcquire(&slot->mutex);
			latch = slot->latch;
			SpinLockRelease(&slot->mutex);
			if (latch)
				SetLatch(latch);
			break;
		}
	}
}

/*
 * Fill the zero-padded hash key of (dbid, definition_id) into *key.
 */
static void
status_key(IdxSyncIndexStatus *key, Oid dbid, const char *definition_id)
{
	memset(key, 0, IDX_SYNC_KEY_SIZE);
	key->dbid = dbid;
	strlcpy(key->definition_id, definition_id, IDX_SYNC_UUID_LEN);
}

/*
 * Create or update an index's status (the applier's report).  When the
 * table is full the index stays without status, that is unmaintained,
 * and a WARNING says so, at most once a minute per process (an applier
 * reports after every batch; create_index refuses an index table when the
 * table is full, so this takes a race of concurrent creators).
 */
void
idx_sync_index_report(const IdxSyncIndexStatus *status)
{
	static TimestampTz last_warning = 0;
	IdxSyncIndexStatus key;
	IdxSyncIndexStatus *entry;
	bool		found;

	Assert(sync_shared != NULL);
	status_key(&key, status->dbid, status->definition_id);
	LWLockAcquire(sync_shared->lock, LW_EXCLUSIVE);
	entry = hash_search(sync_indexes, &key, HASH_FIND, NULL);
	if (entry == NULL &&
		hash_get_num_entries(sync_indexes) < IDX_SYNC_MAX_INDEXES)
		entry = hash_search(sync_indexes, &key, HASH_ENTER_NULL, &found);
	if (entry != NULL)
	{
		memcpy((char *) entry + IDX_SYNC_KEY_SIZE,
			   (const char *) status + IDX_SYNC_KEY_SIZE,
			   sizeof(IdxSyncIndexStatus) - IDX_SYNC_KEY_SIZE);
		entry->last_error[IDX_SYNC_ERROR_LEN - 1] = '\0';
	}
	LWLockRelease(sync_shared->lock);
	if (entry == NULL &&
		TimestampDifferenceExceeds(last_warning, GetCurrentTimestamp(),
								   60 * 1000))
	{
		last_warning = GetCurrentTimestamp();
		ereport(WARNING,
				(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
				 errmsg("index table %s is not maintained because %d index tables are maintained already",
						status->definition_id, IDX_SYNC_MAX_INDEXES),
				 errdetail("This message is repeated at most once a minute.")));
	}
}

/*
 * How many index tables of databases other than "dbid" have a status now
 * (*elsewhere), and how many of them their appliers maintain for table
 * owner "ownerid" (*others): create_index's limits (index_limits.c).
 */
void
idx_sync_index_counts(Oid dbid, Oid ownerid, int *elsewhere, int *others)
{
	HASH_SEQ_STATUS scan;
	IdxSyncIndexStatus *entry;

	*elsewhere = 0;
	*others = 0;
	if (sync_shared == NULL)
		return;
	LWLockAcquire(sync_shared->lock, LW_SHARED);
	hash_seq_init(&scan, sync_indexes);
	while ((entry = hash_seq_search(&scan)) != NULL)
	{
		IdxApplierSlot *slot;

		if (entry->dbid == dbid)
			continue;
		(*elsewhere)++;
		if (entry->slotno < 0 || entry->slotno >= IDX_SYNC_MAX_APPLIERS)
			continue;
		slot = &sync_shared->slots[entry->slotno];
		if (slot->dbid == entry->dbid && slot->ownerid == ownerid)
			(*others)++;
	}
	LWLockRelease(sync_shared->lock);
}

/*
 * Remove the statuses that the applier of slot "slotno" reported for
 * indexes of database "dbid" that it no longer follows: those whose
 * definition_id is not among the "nkeep" of "keep" (after a reload of its
 * catalog; dropped index tables must not keep their entries, or creating
 * and dropping index tables would fill the table).
 */
void
idx_sync_index_forget_others(int slotno, Oid dbid, char **keep, int nkeep)
{
	HASH_SEQ_STATUS seq;
	IdxSyncIndexStatus *entry;

	Assert(sync_shared != NULL);
	LWLockAcquire(sync_shared->lock, LW_EXCLUSIVE);
	hash_seq_init(&seq, sync_indexes);
	while ((entry = (IdxSyncIndexStatus *) hash_seq_search(&seq)) != NULL)
	{
		bool		kept = false;
		int			i;

		if (entry->slotno != slotno || entry->dbid != dbid)
			continue;
		for (i = 0; i < nkeep && !kept; i++)
			kept = strcmp(entry->definition_id, keep[i]) == 0;
		if (!kept)
			hash_search(sync_indexes, entry, HASH_REMOVE, NULL);
	}
	LWLockRelease(sync_shared->lock);
}

/*
 * Remove an index's status (dropped, or no longer followed).
 */
void
idx_sync_index_forget(Oid dbid, const char *definition_id)
{
	IdxSyncIndexStatus key;

	Assert(sync_shared != NULL);
	status_key(&key, dbid, definition_id);
	LWLockAcquire(sync_shared->lock, LW_EXCLUSIVE);
	hash_search(sync_indexes, &key, HASH_REMOVE, NULL);
	LWLockRelease(sync_shared->lock);
}

/*
 * Copy an index's status into *status; false if there is none (or no
 * shared state).
 */
bool
idx_sync_index_lookup(Oid dbid, const char *definition_id,
					  IdxSyncIndexStatus *status)
{
	IdxSyncIndexStatus key;
	IdxSyncIndexStatus *entry;

	if (sync_shared == NULL)
		return false;
	status_key(&key, dbid, definition_id);
	LWLockAcquire(sync_shared->lock, LW_SHARED);
	entry = hash_search(sync_indexes, &key, HASH_FIND, NULL);
	if (entry != NULL)
		memcpy(status, entry, sizeof(IdxSyncIndexStatus));
	LWLockRelease(sync_shared->lock);
	return entry != NULL;
}

/*
 * One look at an index for idx_sync_wait: CAUGHT_UP, UNMAINTAINED, or
 * -1 when the wait goes on (then *slotno is its applier's slot).  An
 * applier connected to another server than the waiter's has not caught
 * up, whatever its time: it is about to reconnect.
 */
static int
wait_check(Oid dbid, const char *definition_id, uint32 server_hash,
		   IdxClusterTime target, int *slotno)
{
	IdxSyncIndexStatus status;
	IdxApplierSlot *slot;
	IdxApplierState state;

	if (!idx_sync_index_lookup(dbid, definition_id, &status))
		return IDX_SYNC_UNMAINTAINED;
	/* a time of another server's says nothing (the applier reconnects) */
	if (status.applied_through >= target && status.server_hash == server_hash)
		return IDX_SYNC_CAUGHT_UP;
	slot = idx_sync_slot(status.slotno);
	state = slot_state(slot);
	if (state == IDX_APPLIER_FREE || state == IDX_APPLIER_STOPPED ||
		slot->dbid != dbid)
		return IDX_SYNC_UNMAINTAINED;
	/* a running applier that does not follow the index will not get there */
	if (state == IDX_APPLIER_RUNNING && !status.streaming)
		return IDX_SYNC_UNMAINTAINED;
	*slotno = status.slotno;
	return -1;
}

/*
 * Wait until index (dbid, definition_id) has applied everything through
 * "target", asking its applier to catch up, for at most timeout_ms; an
 * applier that is restarting is waited for.  Interruptible: a cancel
 * raises its ERROR from the sleep (the transaction's abort cancels the
 * sleep).
 */
IdxSyncWaitResult
idx_sync_wait(Oid dbid, const char *definition_id, uint32 server_hash,
			  IdxClusterTime target, int timeout_ms, int *waited_ms)
{
	TimestampTz start = GetCurrentTimestamp();
	int			sleeping_on = -1;
	int			result;

	for (;;)
	{
		int			slotno = -1;
		long		remaining;

		result = wait_check(dbid, definition_id, server_hash, target,
							&slotno);
		if (result >= 0)
			break;
		if (slotno != sleeping_on)
		{
			/* check again once prepared, so that no broadcast is missed */
			ConditionVariablePrepareToSleep(&idx_sync_slot(slotno)->applied_cv);
			sleeping_on = slotno;
			continue;
		}
		idx_sync_request(slotno, target);
		remaining = timeout_ms -
			TimestampDifferenceMilliseconds(start, GetCurrentTimestamp());
		if (remaining <= 0)
		{
			result = IDX_SYNC_TIMED_OUT;
			break;
		}
		ConditionVariableTimedSleep(&idx_sync_slot(slotno)->applied_cv,
									remaining, PG_WAIT_EXTENSION);
	}
	if (sleeping_on >= 0)
		ConditionVariableCancelSleep();
	*waited_ms = (int) TimestampDifferenceMilliseconds(start,
													   GetCurrentTimestamp());
	return (IdxSyncWaitResult) result;
}

/*
 * The entry of database "dbid", added if "add" and there is room; NULL
 * otherwise.  Caller holds db_mutex.
 */
static IdxSyncDatabase *
find_database(Oid dbid, bool add)
{
	IdxSyncDatabase *free_entry = NULL;
	int			i;

	for (i = 0; i < IDX_SYNC_MAX_DATABASES; i++)
	{
		IdxSyncDatabase *db = &sync_shared->databases[i];

		if (db->dbid == dbid)
			return db;
		if (db->dbid == InvalidOid && free_entry == NULL)
			free_entry = db;
	}
	if (add && free_entry != NULL)
	{
		free_entry->dbid = dbid;
		free_entry->generation = 0;
		free_entry->worker_pid = 0;
		free_entry->worker_latch = NULL;
		free_entry->no_extension = false;
		free_entry->dropping_at = 0;
	}
	return add ? free_entry : NULL;
}

/*
 * Tell the launcher, the database's worker and its appliers that the
 * definitions of database "dbid" changed.  Called at commit; never
 * throws for want of room (a database beyond the table bumps a
 * generation every database shares).
 */
void
idx_sync_catalog_changed(Oid dbid)
{
	IdxSyncDatabase *db;
	Latch	   *latches[2] = {NULL, NULL};
	int			i;

	if (sync_shared == NULL)
		return;
	SpinLockAcquire(&sync_shared->db_mutex);
	db = find_database(dbid, true);
	if (db != NULL)
	{
		db->generation++;
		latches[0] = db->worker_latch;
	}
	else
		sync_shared->overflow_generation++;
	latches[1] = sync_shared->launcher_latch;
	SpinLockRelease(&sync_shared->db_mutex);

	for (i = 0; i < 2; i++)
		if (latches[i])
			SetLatch(latches[i]);
	for (i = 0; i < IDX_SYNC_MAX_APPLIERS; i++)
	{
		IdxApplierSlot *slot = &sync_shared->slots[i];
		Latch	   *latch = NULL;

		SpinLockAcquire(&slot->mutex);
		if (slot->state != IDX_APPLIER_FREE && slot->dbid == dbid)
			latch = slot->latch;
		SpinLockRelease(&slot->mutex);
		if (latch)
			SetLatch(latch);
	}
}

/*
 * The generation of database "dbid"'s definitions: it changes whenever
 * idx_sync_catalog_changed(dbid) is called.
 */
uint64
idx_sync_catalog_generation(Oid dbid)
{
	IdxSyncDatabase *db;
	uint64		generation;

	if (sync_shared == NULL)
		return 0;
	SpinLockAcquire(&sync_shared->db_mutex);
	db = find_database(dbid, false);
	generation = sync_shared->overflow_generation + (db ? db->generation : 0);
	SpinLockRelease(&sync_shared->db_mutex);
	return generation;
}

/*
 * Claim the slot of (dbid, serverid, ownerid) and wake the launcher and
 * the database's worker, so that an applier is known to be coming before
 * its process exists (create_index, at commit).  A WARNING if every slot
 * is taken.
 */
void
idx_sync_expect_applier(Oid dbid, Oid serverid, Oid ownerid)
{
	if (sync_shared == NULL)
		return;
	if (idx_sync_claim_slot(dbid, serverid, ownerid) < 0)
		ereport(WARNING,
				(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
				 errmsg("no index table of this foreign server and owner can be maintained because %d appliers run already",
						IDX_SYNC_MAX_APPLIERS)));
	idx_sync_catalog_changed(dbid);
}

/*
 * on_shmem_exit of the launcher: forget its latch.
 */
static void
detach_launcher(int code, Datum arg)
{
	SpinLockAcquire(&sync_shared->db_mutex);
	if (sync_shared->launcher_pid == MyProcPid)
	{
		sync_shared->launcher_pid = 0;
		sync_shared->launcher_latch = NULL;
	}
	SpinLockRelease(&sync_shared->db_mutex);
}

/*
 * The launcher announces its latch, to be woken by catalog changes.
 */
void
idx_sync_attach_launcher(void)
{
	SpinLockAcquire(&sync_shared->db_mutex);
	sync_shared->launcher_pid = MyProcPid;
	sync_shared->launcher_latch = MyLatch;
	SpinLockRelease(&sync_shared->db_mutex);
	on_shmem_exit(detach_launcher, (Datum) 0);
}

/*
 * on_shmem_exit of a database worker: forget its latch.
 */
static void
detach_database_worker(int code, Datum arg)
{
	IdxSyncDatabase *db;

	SpinLockAcquire(&sync_shared->db_mutex);
	db = find_database(DatumGetObjectId(arg), false);
	if (db != NULL && db->worker_pid == MyProcPid)
	{
		db->worker_pid = 0;
		db->worker_latch = NULL;
	}
	SpinLockRelease(&sync_shared->db_mutex);
}

/*
 * A database worker announces its latch (if its database fits in the
 * table; otherwise it is woken by its naptime only).
 */
void
idx_sync_attach_database_worker(Oid dbid)
{
	IdxSyncDatabase *db;

	SpinLockAcquire(&sync_shared->db_mutex);
	db = find_database(dbid, true);
	if (db != NULL)
	{
		db->worker_pid = MyProcPid;
		db->worker_latch = MyLatch;
	}
	SpinLockRelease(&sync_shared->db_mutex);
	on_shmem_exit(detach_database_worker, ObjectIdGetDatum(dbid));
}

/*
 * Wake database "dbid"'s worker, if it has one.
 */
void
idx_sync_wake_database_worker(Oid dbid)
{
	IdxSyncDatabase *db;
	Latch	   *latch = NULL;

	if (sync_shared == NULL)
		return;
	SpinLockAcquire(&sync_shared->db_mutex);
	db = find_database(dbid, false);
	if (db != NULL)
		latch = db->worker_latch;
	SpinLockRelease(&sync_shared->db_mutex);
	if (latch)
		SetLatch(latch);
}

/*
 * The pid of database "dbid"'s worker, 0 if none is attached.
 */
pid_t
idx_sync_database_worker_pid(Oid dbid)
{
	IdxSyncDatabase *db;
	pid_t		pid = 0;

	if (sync_shared == NULL)
		return 0;
	SpinLockAcquire(&sync_shared->db_mutex);
	db = find_database(dbid, false);
	if (db != NULL)
		pid = db->worker_pid;
	SpinLockRelease(&sync_shared->db_mutex);
	return pid;
}

/*
 * A database worker that found no idxtable_fdw extension says so before
 * it exits (the launcher then leaves the database alone for a while).
 */
void
idx_sync_database_no_extension(Oid dbid)
{
	IdxSyncDatabase *db;

	SpinLockAcquire(&sync_shared->db_mutex);
	db = find_database(dbid, true);
	if (db != NULL)
		db->no_extension = true;
	SpinLockRelease(&sync_shared->db_mutex);
}

/*
 * What the launcher needs to know of database "dbid": its catalog
 * generation, whether its last worker found no extension (the flag is
 * cleared by reading it), and when a DROP DATABASE of it began.
 */
void
idx_sync_database_info(Oid dbid, uint64 *generation, bool *no_extension,
					   TimestampTz *dropping_at)
{
	IdxSyncDatabase *db;

	SpinLockAcquire(&sync_shared->db_mutex);
	db = find_database(dbid, false);
	*generation = sync_shared->overflow_generation + (db ? db->generation : 0);
	*no_extension = db ? db->no_extension : false;
	*dropping_at = db ? db->dropping_at : 0;
	if (db)
		db->no_extension = false;
	SpinLockRelease(&sync_shared->db_mutex);
}

/*
 * A command that needs database "dbid" without other sessions begins
 * (DROP DATABASE, ALTER DATABASE RENAME, ...): note it, so that the
 * launcher starts no worker there for a while, and ask the database's
 * worker and appliers to exit.  These commands wait up to 5 s for the
 * other sessions of the database to go (CountOtherDBBackends); ours go
 * within that time.
 */
void
idx_sync_database_exclusive(Oid dbid)
{
	IdxSyncDatabase *db;
	pid_t		worker = 0;
	int			i;

	if (sync_shared == NULL)
		return;
	SpinLockAcquire(&sync_shared->db_mutex);
	db = find_database(dbid, true);
	if (db != NULL)
	{
		db->dropping_at = GetCurrentTimestamp();
		worker = db->worker_pid;
	}
	SpinLockRelease(&sync_shared->db_mutex);
	if (worker != 0)
		kill(worker, SIGTERM);
	for (i = 0; i < IDX_SYNC_MAX_APPLIERS; i++)
	{
		IdxApplierSlot *slot = &sync_shared->slots[i];
		pid_t		pid = 0;

		SpinLockAcquire(&slot->mutex);
		if (slot->state != IDX_APPLIER_FREE && slot->dbid == dbid)
			pid = slot->pid;
		SpinLockRelease(&slot->mutex);
		if (pid != 0)
			kill(pid, SIGTERM);
	}
}

/*
 * Database "dbid" is gone (or has no idxtable_fdw any more): free its
 * slots and its entry.
 */
void
idx_sync_forget_database(Oid dbid)
{
	IdxSyncDatabase *db;
	int			i;

	for (i = 0; i < IDX_SYNC_MAX_APPLIERS; i++)
	{
		IdxApplierSlot *slot = &sync_shared->slots[i];
		bool		mine;

		SpinLockAcquire(&slot->mutex);
		mine = slot->state != IDX_APPLIER_FREE && slot->dbid == dbid;
		SpinLockRelease(&slot->mutex);
		if (mine)
			idx_sync_release_slot(i);
	}
	SpinLockAcquire(&sync_shared->db_mutex);
	db = find_database(dbid, false);
	if (db != NULL && db->worker_pid == 0)
		db->dbid = InvalidOid;
	SpinLockRelease(&sync_shared->db_mutex);
}

/*
 * Copy the fields of slot "slotno" into *info; false if it is free.
 */
bool
idx_sync_applier_info(int slotno, IdxApplierInfo *info)
{
	IdxApplierSlot *slot = idx_sync_slot(slotno);

	LWLockAcquire(sync_shared->lock, LW_SHARED);
	SpinLockAcquire(&slot->mutex);
	info->state = slot->state;
	info->dbid = slot->dbid;
	info->serverid = slot->serverid;
	info->ownerid = slot->ownerid;
	info->pid = slot->pid;
	info->started_at = slot->started_at;
	info->last_batch_at = slot->last_batch_at;
	info->restarts = slot->restarts;
	memcpy(info->last_error, slot->last_error, IDX_SYNC_ERROR_LEN);
	SpinLockRelease(&slot->mutex);
	LWLockRelease(sync_shared->lock);
	info->last_error[IDX_SYNC_ERROR_LEN - 1] = '\0';
	info->requested = pg_atomic_read_u64(&slot->requested);
	return info->state != IDX_APPLIER_FREE;
}

/*
 * Copies (palloc'd) of the statuses of database "dbid"'s indexes.
 */
List *
idx_sync_index_statuses(Oid dbid)
{
	List	   *result = NIL;
	HASH_SEQ_STATUS seq;
	IdxSyncIndexStatus *entry;

	if (sync_shared == NULL)
		return NIL;
	LWLockAcquire(sync_shared->lock, LW_SHARED);
	hash_seq_init(&seq, sync_indexes);
	while ((entry = (IdxSyncIndexStatus *) hash_seq_search(&seq)) != NULL)
	{
		IdxSyncIndexStatus *copy;

		if (entry->dbid != dbid)
			continue;
		copy = palloc(sizeof(IdxSyncIndexStatus));
		memcpy(copy, entry, sizeof(IdxSyncIndexStatus));
		result = lappend(result, copy);
	}
	LWLockRelease(sync_shared->lock);
	return result;
}
