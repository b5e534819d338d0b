/*-------------------------------------------------------------------------
 *
 * index_notify.h
 *		  How index DDL tells the change-stream workers (fdw/sync/) that the
 *		  index tables of a foreign table changed, without depending on them.
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/index/index_notify.h
 *
 * A leaf: the catalog (a definition deleted with its table), create_index,
 * drop_index and the online builds note their changes here, and
 * sync_notify.c installs the hook when the library is preloaded.
 *
 *-------------------------------------------------------------------------
 */
#ifndef IDXTABLE_INDEX_NOTIFY_H
#define IDXTABLE_INDEX_NOTIFY_H

/*
 * Set by sync_notify.c when the library is preloaded; NULL means that no
 * worker runs.  "expect_applier": an index is maintained from now on, so
 * its applier is expected.
 */
typedef void (*IdxIndexChangeHook) (Oid relid, bool expect_applier);
extern PGDLLIMPORT IdxIndexChangeHook idx_index_change_hook;

/*
 * Tell the workers, if any, that the index tables of foreign table "relid"
 * changed; they learn it when the transaction commits.
 */
extern void idx_note_index_change(Oid relid, bool expect_applier);

#endif							/* IDXTABLE_INDEX_NOTIFY_H */
