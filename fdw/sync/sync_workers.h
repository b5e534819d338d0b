/*-------------------------------------------------------------------------
 *
 * sync_workers.h
 *		  The parts of the shared state (sync_state.c) that only the
 *		  change-stream applier's processes (fdw/applier) and the views
 *		  (sync_status.c) use, and the hooks that tell those processes of
 *		  catalog changes (sync_notify.c).
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/sync/sync_workers.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef IDXTABLE_SYNC_WORKERS_H
#define IDXTABLE_SYNC_WORKERS_H

#include "datatype/timestamp.h"
#include "nodes/pg_list.h"
#include "storage/latch.h"

#include "sync/sync_state.h"

/* Databases the shared state tracks (catalog generations, workers) */
#define IDX_SYNC_MAX_DATABASES	64

/* A copy of an applier slot's fields, for the views */
typedef struct IdxApplierInfo
{
	IdxApplierState state;
	Oid			dbid;
	Oid			serverid;
	Oid			ownerid;
	pid_t		pid;
	TimestampTz started_at;
	TimestampTz last_batch_at;
	int			restarts;
	uint64		requested;
	char		last_error[IDX_SYNC_ERROR_LEN];
} IdxApplierInfo;

/* in sync_notify.c */
extern void idx_sync_install_object_hook(void);	/* and the utility hook */

/* in sync_state.c: the launcher's and database workers' latches */
extern void idx_sync_attach_launcher(void);
extern void idx_sync_attach_database_worker(Oid dbid);
extern void idx_sync_wake_database_worker(Oid dbid);
extern pid_t idx_sync_database_worker_pid(Oid dbid);
extern void idx_sync_database_no_extension(Oid dbid);
extern void idx_sync_database_info(Oid dbid, uint64 *generation,
								   bool *no_extension,
								   TimestampTz *dropping_at);
extern void idx_sync_database_exclusive(Oid dbid);
extern void idx_sync_forget_database(Oid dbid);
extern bool idx_sync_applier_info(int slotno, IdxApplierInfo *info);
extern List *idx_sync_index_statuses(Oid dbid);

#endif							/* IDXTABLE_SYNC_WORKERS_H */
