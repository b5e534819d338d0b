/*-------------------------------------------------------------------------
 *
 * applier_state.c
 *		  The applier's state (one per process) and what every part of it
 *		  asks of it: the current definition of an index table, the state
 *		  and failure of index tables in the catalog, their conflicts, the
 *		  status reported to the backends, and times for log lines.
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/applier/applier_state.c
 *
 * The worker (applier.c) fills the state when it connects and loads its
 * catalog; its streams (applier_stream.c) and the files they use read and
 * update it.  This file uses no other file of the applier, so that all of
 * them can use it without a loop.  Catalog reads and writes run through
 * SPI in the caller's transaction, as the bootstrap superuser with
 * schema-qualified SQL (applier.c's header).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "applier/applier_state.h"
#include "index/index_catalog.h"

Applier		applier;

/*
 * Begin an SPI block in the current transaction, with a snapshot.
 */
void
idx_applier_spi_begin(void)
{
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	PushActiveSnapshot(GetTransactionSnapshot());
}

/*
 * End the SPI block of idx_applier_spi_begin().
 */
void
idx_applier_spi_end(void)
{
	SPI_finish();
	PopActiveSnapshot();
}

/*
 * A cluster time for log lines: its wall-clock second and increment.
 */
char *
idx_applier_time_str(IdxClusterTime ct)
{
	TimestampTz ts = time_t_to_timestamptz((pg_time_t) IDX_CLUSTER_TIME_SECONDS(ct));

	return psprintf("%s (increment %u)", timestamptz_to_str(ts),
					(uint32) ct);
}

/*
 * Set the state of the indexes of stream "s" whose state is one of
 * "from_states" (letters as in AppIndex.state) to "to_state", in
 * idxtable.index_defs, and tell the workers the catalog changed.
 */
void
idx_applier_set_state(AppStream *s, const char *from_states,
					  const char *to_state)
{
	static const char *query =
		"UPDATE idxtable.index_defs SET state = $1 "
		" WHERE definition_id OPERATOR(pg_catalog.=) $2::pg_catalog.uuid "
		"   AND state OPERATOR(pg_catalog.<>) 'failed'";
	Oid			types[2] = {TEXTOID, TEXTOID};
	ListCell   *lc;
	bool		any = false;

	idx_applier_spi_begin();
	foreach(lc, s->indexes)
	{
		AppIndex   *ix = lfirst(lc);
		Datum		values[2];

		if (strchr(from_states, ix->state) == NULL)
			continue;
		values[0] = CStringGetTextDatum(to_state);
		values[1] = CStringGetTextDatum(ix->status.definition_id);
		if (SPI_execute_with_args(query, 2, types, values, NULL, false, 0) !=
			SPI_OK_UPDATE)
			elog(ERROR, "could not update the state of index \"%s\"",
				 ix->name);
		ix->state = to_state[0] == 's' ? 's' : to_state[0] == 'v' ? 'v' : 'b';
		ereport(LOG,
				(errmsg("idxtable_fdw applier: index \"%s\" is now %s",
						ix->name, to_state)));
		any = true;
	}
	idx_applier_spi_end();
	if (any)
		idx_sync_catalog_changed(MyDatabaseId);
}

/*
 * The fact collection "collection" of stream "s" was dropped or renamed at
 * cluster time "at": its indexes fail (routing stops, drop_index still
 * works).  Not those whose sync_from is at or after it: their build read
 * the facts after the drop (a stream that starts at a sync_from includes
 * the changes at that very time).
 */
void
idx_applier_fail_collection(AppStream *s, const char *collection,
							IdxClusterTime at)
{
	static const char *query =
		"UPDATE idxtable.index_defs SET state = 'failed' "
		" WHERE definition_id OPERATOR(pg_catalog.=) $1::pg_catalog.uuid";
	Oid			types[1] = {TEXTOID};
	ListCell   *lc;

	idx_applier_spi_begin();
	foreach(lc, s->indexes)
	{
		AppIndex   *ix = lfirst(lc);
		Datum		values[1];

		if (strcmp(ix->collection, collection) != 0 || ix->sync_from >= at)
			continue;
		values[0] = CStringGetTextDatum(ix->status.definition_id);
		if (SPI_execute_with_args(query, 1, types, values, NULL, false, 0) !=
			SPI_OK_UPDATE)
			elog(ERROR, "could not update the state of index \"%s\"",
				 ix->name);
		ereport(LOG,
				(errmsg("idxtable_fdw applier: index \"%s\" failed: its collection \"%s\" of database \"%s\" was dropped or renamed",
						ix->name, collection, s->database)));
		idx_sync_index_forget(MyDatabaseId, ix->status.definition_id);
	}
	idx_applier_spi_end();
	idx_sync_catalog_changed(MyDatabaseId);
}

/*
 * Has index "ix" unique key conflicts recorded in idxtable.conflicts?
 * (A write that frees a conflicting key must then reach the repair, which
 * hands the key to the fact that waited for it: applier_stream.c.)
 */
bool
idx_applier_has_conflicts(AppIndex *ix)
{
	static const char *query =
		"SELECT 1 FROM idxtable.conflicts "
		" WHERE index_name OPERATOR(pg_catalog.=) $1 LIMIT 1";
	Oid			types[1] = {TEXTOID};
	Datum		values[1];
	bool		result;

	values[0] = CStringGetTextDatum(ix->name);
	idx_applier_spi_begin();
	if (SPI_execute_with_args(query, 1, types, values, NULL, true, 1) !=
		SPI_OK_SELECT)
		elog(ERROR, "could not read the conflicts of index \"%s\"", ix->name);
	result = SPI_processed > 0;
	idx_applier_spi_end();
	return result;
}

/*
 * Report the status of the indexes of "s" (applied through s->covered)
 * and wake the backends waiting for them.  caught_up_at: now after an
 * empty batch; after a complete batch (applied by now) the time its
 * getMore was sent, as every event committed before then was in it or
 * earlier.  Under a steady load it is what keeps sync_status's lag close
 * to the real one (applied_through has whole seconds).
 */
void
idx_applier_report(AppStream *s, bool streaming)
{
	TimestampTz now = GetCurrentTimestamp();
	ListCell   *lc;

	foreach(lc, s->indexes)
	{
		AppIndex   *ix = lfirst(lc);

		ix->status.streaming = streaming && ix->state != 's';
		ix->status.skips_fdw = ix->status.streaming && s->armed;
		if (ix->status.streaming && s->caught_up)
			ix->status.caught_up_at = now;
		else if (ix->status.streaming && s->ndeferred == 0 &&
				 s->complete_since > ix->status.caught_up_at)
			ix->status.caught_up_at = s->complete_since;
		if (s->covered > ix->status.applied_through)
		{
			ix->status.applied_through = s->covered;
			ix->status.applied_at = now;
		}
		idx_sync_index_report(&ix->status);
	}
	s->complete_since = 0;		/* it held for this batch only */
	SpinLockAcquire(&applier.slot->mutex);
	applier.slot->last_batch_at = now;
	SpinLockRelease(&applier.slot->mutex);
	ConditionVariableBroadcast(&applier.slot->applied_cv);
}

/*
 * The current definition of index "ix" (NULL if dropped or failed).
 */
IdxIndexDef *
idx_applier_current_def(AppIndex *ix)
{
	ListCell   *lc;

	foreach(lc, idx_get_indexes(ix->relid, applier.slot->ownerid))
	{
		IdxIndexDef *def = lfirst(lc);

		if (strcmp(def->definition_id, ix->status.definition_id) == 0)
			return def->state == IDX_STATE_FAILED ? NULL : def;
	}
	return NULL;
}
