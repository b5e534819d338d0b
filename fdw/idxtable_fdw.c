/*-------------------------------------------------------------------------
 *
 * idxtable_fdw.c
 *		  Entry points of idxtable_fdw: the handler, module initialisation
 *		  and small SQL-callable utilities.
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/idxtable_fdw.c
 *
 * The callbacks themselves live in one module per responsibility:
 * planner.c (paths and plans), scan.c (execution and EXPLAIN), deparse.c
 * (WHERE clauses to MongoDB filters), convert.c (BSON <-> datums),
 * connection.c (client cache and errors), option.c (options), analyze.c
 * and import.c.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fmgr.h"
#include "foreign/foreign.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "utils/guc.h"

#include "coordinator.h"
#include "applier/launcher.h"
#include "core/connection.h"
#include "core/guc.h"
#include "core/mongoc_compat.h"
#include "idxtable_fdw.h"
#include "index/index_ddl.h"
#include "index/index_utility.h"
#include "modify.h"
#include "module.h"
#include "sync/sync_state.h"
#include "sync/sync_wait.h"
#include "sync/sync_workers.h"
#include "upper.h"

PG_MODULE_MAGIC;

PG_FUNCTION_INFO_V1(idxtable_fdw_handler);
PG_FUNCTION_INFO_V1(idxtable_fdw_disconnect_all);

void		_PG_init(void);


/*
 * libmongoc's own log lines: those below WARNING are dropped, the others
 * go to the server log only, never to a client (they can name local files
 * and tell whether they hold a key).  ereport at LOG level does not throw,
 * which matters: this runs inside libmongoc.
 */
static void
log_handler(mongoc_log_level_t level, const char *domain, const char *message,
			void *user_data)
{
	if (level > MONGOC_LOG_LEVEL_WARNING)
		return;
	ereport(LOG_SERVER_ONLY,
			(errmsg_internal("libmongoc %s: %s", domain, message),
			 errhidestmt(true)));
}

/*
 * Release libmongoc's global state when the backend exits.
 */
static void
cleanup_mongoc(int code, Datum arg)
{
	mongoc_cleanup();
}

/*
 * Module load: initialise libmongoc once per backend.
 */
void
_PG_init(void)
{
	idx_define_gucs();
	idx_applier_define_gucs();
	idx_sync_define_read_gucs();
	idx_define_limit_gucs();
	MarkGUCPrefixReserved("idxtable");

	/* the change-stream applier's processes exist only when preloaded */
	if (process_shared_preload_libraries_in_progress)
	{
		idx_sync_shmem_install();
		idx_sync_install_object_hook();
		idx_applier_register_launcher();
	}

	/* CREATE INDEX and its siblings on our foreign tables */
	idx_install_utility_hook(idx_fdw_is_ours);

	idx_register_xact_callbacks();
	mongoc_init();
	mongoc_log_set_handler(log_handler, NULL);
	on_proc_exit(cleanup_mongoc, (Datum) 0);
}

/*
 * The FDW handler: return the callback table.
 */
Datum
idxtable_fdw_handler(PG_FUNCTION_ARGS)
{
	FdwRoutine *routine = makeNode(FdwRoutine);

	routine->GetForeignRelSize = idxGetForeignRelSize;
	routine->GetForeignPaths = idxGetForeignPaths;
	routine->GetForeignPlan = idxGetForeignPlan;
	routine->GetForeignUpperPaths = idxGetForeignUpperPaths;
	routine->BeginForeignScan = idxBeginForeignScan;
	routine->IterateForeignScan = idxIterateForeignScan;
	routine->ReScanForeignScan = idxReScanForeignScan;
	routine->EndForeignScan = idxEndForeignScan;
	routine->ExplainForeignScan = idxExplainForeignScan;
	routine->AnalyzeForeignTable = idxAnalyzeForeignTable;
	routine->ImportForeignSchema = idxImportForeignSchema;

	routine->AddForeignUpdateTargets = idxAddForeignUpdateTargets;
	routine->PlanForeignModify = idxPlanForeignModify;
	routine->BeginForeignModify = idxBeginForeignModify;
	routine->ExecForeignInsert = idxExecForeignInsert;
	routine->ExecForeignBatchInsert = idxExecForeignBatchInsert;
	routine->GetForeignModifyBatchSize = idxGetForeignModifyBatchSize;
	routine->ExecForeignUpdate = idxExecForeignUpdate;
	routine->ExecForeignDelete = idxExecForeignDelete;
	routine->EndForeignModify = idxEndForeignModify;
	routine->BeginForeignInsert = idxBeginForeignInsert;
	routine->EndForeignInsert = idxEndForeignInsert;
	routine->IsForeignRelUpdatable = idxIsForeignRelUpdatable;
	routine->ExplainForeignModify = idxExplainForeignModify;

	PG_RETURN_POINTER(routine);
}

/*
 * Is foreign-data wrapper "fdwid" served by this library?  Its handler
 * function is ours whatever the wrapper or the function is called in SQL,
 * so the address of the function fmgr resolves is compared, not names.
 * Index functions and the applier's hooks use this to recognise our
 * foreign tables and servers.
 */
bool
idx_fdw_is_ours(Oid fdwid)
{
	ForeignDataWrapper *fdw = GetForeignDataWrapper(fdwid);
	FmgrInfo	handler;

	if (!OidIsValid(fdw->fdwhandler))
		return false;
	fmgr_info(fdw->fdwhandler, &handler);
	return handler.fn_addr == idxtable_fdw_handler;
}

/*
 * idxtable_fdw_disconnect_all(): close every idle cached client.
 */
Datum
idxtable_fdw_disconnect_all(PG_FUNCTION_ARGS)
{
	PG_RETURN_BOOL(idx_disconnect_all());
}
