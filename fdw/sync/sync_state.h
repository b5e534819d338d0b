/*-------------------------------------------------------------------------
 *
 * sync_state.h
 *		  Shared memory of the change-stream applier: one slot per applier
 *		  (database, foreign server, table owner) and one status entry per
 *		  maintained index table, read by backends that route through it.
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/sync/sync_state.h
 *
 * The shared state exists only when idxtable_fdw is in
 * shared_preload_libraries (idx_sync_enabled()).  Appliers write it;
 * backends read it and ask an applier to catch up with a cluster time.
 *
 * Cluster times are MongoDB Timestamps packed as (seconds << 32) | increment,
 * which orders them as MongoDB does; 0 means "none".
 *
 *-------------------------------------------------------------------------
 */
#ifndef IDXTABLE_SYNC_STATE_H
#define IDXTABLE_SYNC_STATE_H

#include "datatype/timestamp.h"
#include "port/atomics.h"
#include "storage/condition_variable.h"
#include "storage/latch.h"
#include "storage/spin.h"

typedef uint64 IdxClusterTime;

#define IDX_CLUSTER_TIME(t, i)	(((uint64) (t) << 32) | (uint64) (i))
#define IDX_CLUSTER_TIME_SECONDS(ct)	((uint32) ((ct) >> 32))

/* Limits of the shared state (fixed at server start) */
#define IDX_SYNC_MAX_APPLIERS	64
#define IDX_SYNC_MAX_INDEXES	1024
#define IDX_SYNC_ERROR_LEN		256
#define IDX_SYNC_UUID_LEN		37	/* definition_id as text, with NUL */

/*
 * The collection of each MongoDB database that the applier's stream
 * watches besides the facts: transaction markers (xact_marker.c) and
 * heartbeats, single-document writes whose _id starts with the prefix
 * (the applier's own, and a waiting backend's wake-up, sync_wait.c).
 */
#define IDX_SYNC_COLLECTION			"idxtable.sync"
#define IDX_SYNC_HEARTBEAT_PREFIX	"heartbeat:"
#define IDX_SYNC_WAKE_ID			IDX_SYNC_HEARTBEAT_PREFIX "wake"

typedef enum IdxApplierState
{
	IDX_APPLIER_FREE = 0,		/* slot unused */
	IDX_APPLIER_STARTING,		/* registered, not yet streaming */
	IDX_APPLIER_RUNNING,		/* following its streams */
	IDX_APPLIER_WAITING,		/* failed; restarted after a delay */
	IDX_APPLIER_STOPPED			/* nothing to maintain; slot to be freed */
} IdxApplierState;

/*
 * One applier.  Identity fields are set by whoever claims the slot and
 * never change while it is in use; the rest is the applier's, under
 * "mutex" except the atomics.
 */
typedef struct IdxApplierSlot
{
	slock_t		mutex;
	IdxApplierState state;
	Oid			dbid;			/* PostgreSQL database */
	Oid			serverid;		/* foreign server */
	Oid			ownerid;		/* owner of the tables (user mapping) */
	pid_t		pid;			/* 0 when not running */
	Latch	   *latch;			/* the applier's, to wake it */
	TimestampTz started_at;
	TimestampTz last_batch_at;
	int			restarts;
	char		last_error[IDX_SYNC_ERROR_LEN];
	TimestampTz error_logged_at;	/* when last_error was last logged */

	/* the highest cluster time a backend waits for (max, never lowered) */
	pg_atomic_uint64 requested;

	/* 1 while the applier's getMores wait long (an idle stream) */
	pg_atomic_uint32 long_poll;

	/* when a backend last failed to write its wake-up (TimestampTz) */
	pg_atomic_uint64 wake_failed_at;

	/* the latest time of a backend's wake-up (max, never lowered) */
	pg_atomic_uint64 woken_for;

	/* broadcast after every applied batch and on every state change */
	ConditionVariable applied_cv;
} IdxApplierSlot;

/*
 * One maintained index table, keyed by (database, definition_id).
 */
typedef struct IdxSyncIndexStatus
{
	Oid			dbid;
	char		definition_id[IDX_SYNC_UUID_LEN];
	int			slotno;			/* its applier's slot */
	uint32		server_hash;	/* what its applier connected to
								 * (idx_server_target_hash): applied_through
								 * is a time of that server's */
	bool		streaming;		/* the applier follows its facts now */
	IdxClusterTime applied_through; /* every change up to here is in it */
	TimestampTz applied_at;		/* when applied_through last moved */
	TimestampTz caught_up_at;	/* when its stream last had nothing pending */
	int64		events_applied;
	int64		entries_written;
	int64		conflicts;
	bool		skips_fdw;		/* its stream leaves out the FDW's own
								 * transactions now (applier_exclude.c) */
	bool		blocked;		/* its running applier cannot follow it until
								 * something outside changes (last_error
								 * says what): waits end at once */
	char		last_error[IDX_SYNC_ERROR_LEN];
} IdxSyncIndexStatus;

/* Result of waiting for an index to catch up */
typedef enum IdxSyncWaitResult
{
	IDX_SYNC_CAUGHT_UP,			/* applied_through >= the target */
	IDX_SYNC_TIMED_OUT,			/* the applier runs but did not get there */
	IDX_SYNC_UNMAINTAINED		/* no applier follows this index */
} IdxSyncWaitResult;

/* ---- set up (sync_state.c; called from _PG_init when preloading) ---- */
extern void idx_sync_shmem_install(void);

/* true if the shared state exists (the library is preloaded) */
extern bool idx_sync_enabled(void);

/* ---- slots ---- */
extern IdxApplierSlot *idx_sync_slot(int slotno);

/* The slot of (db, server, owner), claimed if none; -1 if all are taken */
extern int	idx_sync_claim_slot(Oid dbid, Oid serverid, Oid ownerid);

/* Free a slot and forget the status of its indexes */
extern void idx_sync_release_slot(int slotno);

/* The slot's applier failed: its indexes are not followed, with why */
extern void idx_sync_slot_failed(int slotno, const char *message);

/* Raise a slot's requested time to "target" and wake its applier */
extern void idx_sync_request(int slotno, IdxClusterTime target);

/* A backend wrote a wake-up at "time" for the applier of a slot */
extern void idx_sync_note_wake_up(int slotno, IdxClusterTime time);

/* ---- index status ---- */

/* Create or update an index's entry (applier): copies *status */
extern void idx_sync_index_report(const IdxSyncIndexStatus *status);

/* Remove the entries of slotno's indexes of dbid not named in keep */
extern void idx_sync_index_forget_others(int slotno, Oid dbid, char **keep,
										 int nkeep);

/* Remove an index's entry (dropped, or no longer followed) */
extern void idx_sync_index_forget(Oid dbid, const char *definition_id);

/*
 * How many index tables of other databases than dbid have an entry
 * (*elsewhere), and how many of them their appliers maintain for ownerid
 * (*others)
 */
extern void idx_sync_index_counts(Oid dbid, Oid ownerid, int *elsewhere,
								  int *others);

/* Copy an index's entry into *status; false if there is none */
extern bool idx_sync_index_lookup(Oid dbid, const char *definition_id,
								  IdxSyncIndexStatus *status);

/*
 * Wait until index (dbid, definition_id) has applied_through >= target,
 * asking its applier to catch up; at most timeout_ms (interruptible).
 * "target" is a time of the server whose target hashes to server_hash:
 * an applier connected to another is waited for as behind.
 * *waited_ms is set to the time spent.
 */
extern IdxSyncWaitResult idx_sync_wait(Oid dbid, const char *definition_id,
									   uint32 server_hash,
									   IdxClusterTime target, int timeout_ms,
									   int *waited_ms);

/* Tell the launcher and the database's workers that definitions changed */
extern void idx_sync_catalog_changed(Oid dbid);

/* Per-database generation of definitions, bumped by the above */
extern uint64 idx_sync_catalog_generation(Oid dbid);

/*
 * Claim the slot of (db, server, owner) (STARTING if it was free) and wake
 * the launcher and the database's worker: an applier is known to be coming
 * before its process exists (create_index, at commit).
 */
extern void idx_sync_expect_applier(Oid dbid, Oid serverid, Oid ownerid);

/* ---- index DDL (sync_notify.c) ---- */

/*
 * Index DDL changed the index tables of foreign table relid (create, drop,
 * state change): at commit the workers are told; with expect_applier the
 * applier's slot of the table's (server, owner) is claimed then.
 */
extern void idx_sync_note_change(Oid relid, bool expect_applier);

/* From the transaction callbacks (coordinator.c) */
extern void idx_sync_at_commit(void);
extern void idx_sync_at_abort(void);

#endif							/* IDXTABLE_SYNC_STATE_H */
