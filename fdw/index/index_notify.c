/*-------------------------------------------------------------------------
 *
 * index_notify.c
 *		  Index DDL tells the change-stream workers (fdw/sync/) that the
 *		  index tables of a foreign table changed.
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/index/index_notify.c
 *
 * The workers' code (sync_notify.c) installs a hook when the library is
 * preloaded, so that index DDL does not depend on it; without it nothing
 * is told.  This file is below everything else of fdw/index that changes
 * definitions (the catalog, create_index and drop_index, the online
 * builds), so each of them can note its change without reaching the
 * others.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "index/index_notify.h"

/* Set by the change-stream workers' code when preloaded (sync_notify.c) */
IdxIndexChangeHook idx_index_change_hook = NULL;

/*
 * Tell the change-stream workers, if any, that the index tables of foreign
 * table "relid" changed; they learn it when the transaction commits.
 * "expect_applier": an index is maintained from now on, so its applier is
 * expected.  The workers' code installs the hook when the library is
 * preloaded, so that index DDL does not depend on it.
 */
void
idx_note_index_change(Oid relid, bool expect_applier)
{
	if (idx_index_change_hook)
		idx_index_change_hook(relid, expect_applier);
}
