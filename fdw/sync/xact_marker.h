/*-------------------------------------------------------------------------
 *
 * xact_marker.h
 *		  The marker of what a MongoDB transaction's writes maintained, for
 *		  the change-stream applier (xact_marker.c).
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/sync/xact_marker.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef IDXTABLE_XACT_MARKER_H
#define IDXTABLE_XACT_MARKER_H

#include "nodes/pg_list.h"

#include "core/mongoc_compat.h"
#include "core/xact.h"

/*
 * A write in transaction mode through foreign table "info" maintained the
 * index tables "defs" (IdxIndexDef *); the transaction's marker lists, per
 * fact collection, the index tables every such write maintained, and
 * whether that was all of the collection's (else, before the commit, the
 * session tells the applier: sync_sessions.h).
 */
extern void idx_xact_note_maintained(mongoc_client_t *client,
									 const char *servername,
									 const IdxTableInfo *info, List *defs);

/*
 * Pre-commit of the MongoDB transaction of "x": write its markers into
 * <db>.idxtable.sync, in the transaction (see xact_marker.c).
 */
extern void idx_xact_write_markers(IdxRemoteXact *x);

/*
 * The registry of the sessions of the FDW's transactions, which the
 * applier leaves out of its stream while that is safe (sync_sessions.h):
 * a transaction was started on "client" (before any command in it), and
 * that of "x" has ended.
 */
extern void idx_xact_note_started(mongoc_client_t *client);
extern void idx_xact_note_ended(IdxRemoteXact *x);

#endif							/* IDXTABLE_XACT_MARKER_H */
