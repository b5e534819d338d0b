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

#include <mongoc/mongoc.h>

#include "fmgr.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "utils/guc.h"

#include "coordinator.h"
#include "core/connection.h"
#include "idxtable_fdw.h"
#include "index/index_write.h"
#include "modify.h"
#include "sync/sync_state.h"
#include "sync/sync_wait.h"
#include "sync/sync_workers.h"
#include "upper.h"

PG_MODULE_MAGIC;

PG_FUNCTION_INFO_V1(idxtable_fdw_handler);
PG_FUNCTION_INFO_V1(idxtable_fdw_disconnect_all);

void		_PG_init(void);

/* idxtable.enable_index_routing: may the planner use index tables? */
bool		idxtable_enable_index_routing = true;
bool		idxtable_enable_plain_scan = true;
bool		idxtable_enable_order_pushdown = true;
bool		idxtable_enable_aggregate_pushdown = true;
bool		idxtable_enable_bulk_write = true;

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
	DefineCustomBoolVariable("idxtable.enable_index_routing",
							 "Lets the planner route queries through index tables.",
							 "Like enable_indexscan: off leaves only plain "
							 "scans of the collections, for comparisons.",
							 &idxtable_enable_index_routing,
							 true,
							 PGC_USERSET,
							 0,
							 NULL, NULL, NULL);
	DefineCustomBoolVariable("idxtable.enable_plain_scan",
							 "Lets the planner choose plain scans of collections that have index tables.",
							 "Like enable_seqscan: off makes them look very expensive, "
							 "so that an index table is used wherever one applies.",
							 &idxtable_enable_plain_scan,
							 true,
							 PGC_USERSET,
							 0,
							 NULL, NULL, NULL);
	DefineCustomBoolVariable("idxtable.enable_order_pushdown",
							 "Lets the planner push ORDER BY, LIMIT and OFFSET down to MongoDB.",
							 "Off sorts and limits in PostgreSQL, for comparisons.",
							 &idxtable_enable_order_pushdown,
							 true,
							 PGC_USERSET,
							 0,
							 NULL, NULL, NULL);
	DefineCustomBoolVariable("idxtable.enable_bulk_write",
							 "Writes a batch's facts and index entries in one bulkWrite command where MongoDB has it (8.0).",
							 "Off writes one bulk per collection, as on older servers; "
							 "those writes are retried after a lost reply in "
							 "consistency mode ordered, a bulkWrite is not.",
							 &idxtable_enable_bulk_write,
							 true,
							 PGC_USERSET,
							 0,
							 NULL, NULL, NULL);
	DefineCustomBoolVariable("idxtable.enable_aggregate_pushdown",
							 "Lets the planner push aggregates and GROUP BY down to MongoDB.",
							 "Off aggregates in PostgreSQL, for comparisons.",
							 &idxtable_enable_aggregate_pushdown,
							 true,
							 PGC_USERSET,
							 0,
							 NULL, NULL, NULL);
	DefineCustomIntVariable("idxtable.unique_claim_timeout",
							"Age after which an orphaned unique-key claim may be taken over.",
							"In consistency mode 'ordered', a unique key's claim whose "
							"fact lacks the key is taken over only when it is older "
							"than this; a younger one may belong to a write in flight.",
							&idx_unique_claim_timeout,
							5000, 0, INT_MAX,
							PGC_USERSET,
							GUC_UNIT_MS,
							NULL, NULL, NULL);
	idx_sync_define_gucs();
	idx_sync_define_read_gucs();
	MarkGUCPrefixReserved("idxtable");

	/* the change-stream applier's processes exist only when preloaded */
	if (process_shared_preload_libraries_in_progress)
	{
		idx_sync_shmem_install();
		idx_sync_install_object_hook();
		idx_sync_register_launcher();
	}

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
 * idxtable_fdw_disconnect_all(): close every idle cached client.
 */
Datum
idxtable_fdw_disconnect_all(PG_FUNCTION_ARGS)
{
	PG_RETURN_BOOL(idx_disconnect_all());
}
