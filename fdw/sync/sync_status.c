/*-------------------------------------------------------------------------
 *
 * sync_status.c
 *		  idxtable.sync_status() and idxtable.appliers(): the shared state of
 *		  the change-stream applier as rows, for the views of the same names.
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/sync/sync_status.c
 *
 * Both return the current database's rows only, and none when the
 * library is not preloaded.  The views join them with the catalogs (the
 * index definitions, the foreign servers).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"
#include "utils/uuid.h"

#include "sync/sync_state.h"
#include "sync/sync_workers.h"

PG_FUNCTION_INFO_V1(idxtable_sync_status);
PG_FUNCTION_INFO_V1(idxtable_appliers);

#define SYNC_STATUS_COLS	9
#define APPLIERS_COLS		8

/*
 * A cluster time as a timestamptz (its seconds; MongoDB's increment
 * orders events within a second and is dropped).
 */
static Datum
cluster_time_datum(IdxClusterTime ct, bool *isnull)
{
	*isnull = (ct == 0);
	if (ct == 0)
		return (Datum) 0;
	return TimestampTzGetDatum(time_t_to_timestamptz((pg_time_t) IDX_CLUSTER_TIME_SECONDS(ct)));
}

/*
 * A timestamp that may be unset (0).
 */
static Datum
timestamp_datum(TimestampTz ts, bool *isnull)
{
	*isnull = (ts == 0);
	return TimestampTzGetDatum(ts);
}

/*
 * A text that is NULL when empty.
 */
static Datum
error_datum(const char *message, bool *isnull)
{
	*isnull = (message[0] == '\0');
	return *isnull ? (Datum) 0 : CStringGetTextDatum(message);
}

/*
 * The uuid datum of a definition_id's text.
 */
static Datum
uuid_datum(const char *definition_id)
{
	return DirectFunctionCall1(uuid_in, CStringGetDatum(definition_id));
}

/*
 * idxtable.sync_status(): one row per index table of this database that
 * an applier reports.
 */
Datum
idxtable_sync_status(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	ListCell   *lc;

	InitMaterializedSRF(fcinfo, 0);
	foreach(lc, idx_sync_index_statuses(MyDatabaseId))
	{
		IdxSyncIndexStatus *st = (IdxSyncIndexStatus *) lfirst(lc);
		Datum		values[SYNC_STATUS_COLS];
		bool		nulls[SYNC_STATUS_COLS] = {0};

		values[0] = uuid_datum(st->definition_id);
		values[1] = BoolGetDatum(st->streaming);
		values[2] = cluster_time_datum(st->applied_through, &nulls[2]);
		values[3] = timestamp_datum(st->caught_up_at, &nulls[3]);
		values[4] = Int64GetDatum(st->events_applied);
		values[5] = Int64GetDatum(st->entries_written);
		values[6] = Int64GetDatum(st->conflicts);
		values[7] = error_datum(st->last_error, &nulls[7]);
		values[8] = BoolGetDatum(st->skips_fdw);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc,
							 values, nulls);
	}
	return (Datum) 0;
}

/*
 * The name of an applier state, as the view shows it.
 */
static const char *
applier_state_name(IdxApplierState state)
{
	switch (state)
	{
		case IDX_APPLIER_FREE:
			return "free";
		case IDX_APPLIER_STARTING:
			return "starting";
		case IDX_APPLIER_RUNNING:
			return "running";
		case IDX_APPLIER_WAITING:
			return "waiting";
		case IDX_APPLIER_STOPPED:
			return "stopped";
	}
	return "unknown";
}

/*
 * idxtable.appliers(): one row per applier slot of this database.
 */
Datum
idxtable_appliers(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	int			i;

	InitMaterializedSRF(fcinfo, 0);
	if (!idx_sync_enabled())
		return (Datum) 0;
	for (i = 0; i < IDX_SYNC_MAX_APPLIERS; i++)
	{
		IdxApplierInfo info;
		Datum		values[APPLIERS_COLS];
		bool		nulls[APPLIERS_COLS] = {0};

		if (!idx_sync_applier_info(i, &info) || info.dbid != MyDatabaseId)
			continue;
		values[0] = ObjectIdGetDatum(info.serverid);
		values[1] = ObjectIdGetDatum(info.ownerid);
		values[2] = Int32GetDatum(info.pid);
		nulls[2] = (info.pid == 0);
		values[3] = CStringGetTextDatum(applier_state_name(info.state));
		values[4] = timestamp_datum(info.started_at, &nulls[4]);
		values[5] = timestamp_datum(info.last_batch_at, &nulls[5]);
		values[6] = Int32GetDatum(info.restarts);
		values[7] = error_datum(info.last_error, &nulls[7]);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc,
							 values, nulls);
	}
	return (Datum) 0;
}
