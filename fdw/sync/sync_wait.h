/*-------------------------------------------------------------------------
 *
 * sync_wait.h
 *		  Consistent reads through index tables: which index tables the
 *		  planner may route through, and the wait of a routed scan (or of a
 *		  write that claims unique keys) for the change-stream applier.
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/sync/sync_wait.h
 *
 * With idxtable.index_consistency = current (the default) a routed scan
 * learns the server's cluster time T at its start (a ping's operationTime)
 * and waits until the index's applier has applied every change through T,
 * so that it sees every write MongoDB acknowledged to any client before
 * the query started; an index that no applier maintains, or that is known
 * to be behind, is not routed through at all.  With "any" there is no
 * wait and every valid index is routed through.
 *
 *-------------------------------------------------------------------------
 */
#ifndef IDXTABLE_SYNC_WAIT_H
#define IDXTABLE_SYNC_WAIT_H

#include "nodes/pg_list.h"

#include "core/mongoc_compat.h"
#include "index/index_catalog.h"

/* An index table has not caught up with writes made before a statement */
#define ERRCODE_IDX_INDEX_NOT_CURRENT	MAKE_SQLSTATE('I','X','0','0','1')

/* Values of idxtable.index_consistency */
typedef enum IdxReadConsistency
{
	IDX_READ_CURRENT,			/* wait for the applier */
	IDX_READ_ANY				/* read the index as far as it has come */
} IdxReadConsistency;

/* GUCs */
extern int	idx_index_consistency;
extern int	idx_sync_wait_timeout;	/* milliseconds */

/* Define the GUCs above (from _PG_init) */
extern void idx_sync_define_read_gucs(void);

/*
 * May the planner route a query through "def" (a valid index)?  Always
 * with "any"; with "current" only while an applier maintains it and it is
 * not known to be behind.
 */
extern bool idx_sync_routable(const IdxIndexDef *def);

/*
 * The wait of a routed scan, with "current": learn the cluster time on
 * "client" (outside any MongoDB transaction), then wait for the index.
 * An index that does not get there in time is an ERROR (IX001).  Returns
 * false, doing nothing, with "any"; else true with *elapsed_ms the time
 * taken (the ping included).
 */
extern bool idx_sync_wait_for_read(const IdxIndexDef *def,
								   mongoc_client_t *client,
								   const char *servername,
								   double *elapsed_ms);

/*
 * The wait of a write that claims unique keys, with "current", in two
 * parts.  idx_sync_write_wait_start takes one cluster time at the
 * statement's start and wakes the appliers of each unique index of "defs"
 * that an applier maintains and whose key reads a column of
 * "target_attrs" (a list of attnums; NIL: every column, an INSERT); it
 * returns NULL when there is nothing to wait for.  idx_sync_write_wait_end
 * waits until each of them has applied through that time, and must be
 * called before the statement writes anything: the appliers' work then
 * runs beside the statement's reads and the making of its rows.
 */
typedef struct IdxWriteWait IdxWriteWait;

extern IdxWriteWait *idx_sync_write_wait_start(List *defs, List *target_attrs,
											   mongoc_client_t *client,
											   const char *servername);
extern void idx_sync_write_wait_end(IdxWriteWait *wait);

#endif							/* IDXTABLE_SYNC_WAIT_H */
