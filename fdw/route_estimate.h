/*-------------------------------------------------------------------------
 *
 * route_estimate.h
 *		  Remote estimates of index-table paths before ANALYZE: the count
 *		  of the index entries that constant conditions select.
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/route_estimate.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef IDXTABLE_ROUTE_ESTIMATE_H
#define IDXTABLE_ROUTE_ESTIMATE_H

#include "core/option.h"
#include "index/index_catalog.h"

/*
 * The entries of index "def" of table "table" that the conditions "conds"
 * select, as MongoDB counts them, up to "cap" (a count of "cap" means at
 * least that many), or -1 when not asked or not learned.  "conds" is a
 * List of (key position, IdxCondOp, value Expr) Lists, as an index path's
 * fdw_private holds them; only constant values are counted.  Asked as
 * user "userid", of the primary if "primary"; cached per backend.
 */
extern double idx_remote_entry_count(const IdxTableInfo *table,
									 const IdxIndexDef *def, List *conds,
									 double cap, Oid userid, bool primary);

#endif							/* IDXTABLE_ROUTE_ESTIMATE_H */
