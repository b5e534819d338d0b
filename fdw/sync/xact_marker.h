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

#include <mongoc/mongoc.h>

#include "nodes/pg_list.h"

#include "core/xact.h"

/*
 * A write in transaction mode to fact collection "collection" of MongoDB
 * database "database" maintained the index tables "defs" (IdxIndexDef *);
 * the transaction's marker lists, per fact collection, the index tables
 * every such write maintained.
 */
extern void idx_xact_note_maintained(mongoc_client_t *client,
									 const char *servername,
									 const char *database,
									 const char *collection, List *defs);

/*
 * Pre-commit of the MongoDB transaction of "x": write its markers into
 * <db>.idxtable.sync, in the transaction (see xact_marker.c).
 */
extern void idx_xact_write_markers(IdxRemoteXact *x);

#endif							/* IDXTABLE_XACT_MARKER_H */
