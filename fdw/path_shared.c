/*-------------------------------------------------------------------------
 *
 * path_shared.c
 *		  What the builders of paths share: the round trips of a find, an
 *		  attribute bitmap as fdw_private holds it, the matching of
 *		  pathkeys, and the value of a LIMIT or OFFSET.
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/path_shared.c
 *
 * Below planner.c, order_path.c, agg_path.c and route_path.c, which call
 * these and are never called from here.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <math.h>

#include "catalog/pg_type.h"
#include "utils/typcache.h"

#include "path_shared.h"
#include "planner.h"

/*
 * Round trips that return "docs" documents of "bytes" each, at most
 * "per_batch" a batch: MongoDB ends a reply at the batch size or at 16
 * MiB, whichever comes first.
 */
double
idx_batches(double docs, int per_batch, double bytes)
{
	double		batches = ceil(docs / Max(per_batch, 1));

	return Max(batches, ceil(docs * Max(bytes, 0) / MAX_BATCH_BYTES));
}

/*
 * Turn an attribute bitmap into an integer list (Bitmapset is no Node in
 * PostgreSQL 15, and fdw_private must be copyable).
 */
List *
idx_bitmap_to_list(Bitmapset *bms)
{
	List	   *result = NIL;
	int			x = -1;

	while ((x = bms_next_member(bms, x)) >= 0)
		result = lappend_int(result, x);
	return result;
}

/*
 * Call "match" on each member expression of a pathkey's equivalence class
 * (none if the class is volatile) until it accepts one.  Returns whether
 * one was accepted.  Shared by the sorts of plain scans (order_path.c),
 * of routed scans (route_path.c) and of pushed groupings (agg_path.c),
 * which look for different expressions.
 */
bool
idx_pathkey_match(PathKey *pathkey, IdxPathkeyMatch match, void *arg)
{
	EquivalenceClass *ec = pathkey->pk_eclass;
	ListCell   *lc;

	if (ec->ec_has_volatile)
		return false;
	foreach(lc, ec->ec_members)
	{
		if (match(((EquivalenceMember *) lfirst(lc))->em_expr, arg))
			return true;
	}
	return false;
}

/*
 * Does a pathkey sort by the default btree operator family of "type",
 * the only order MongoDB's $sort can follow?
 */
bool
idx_pathkey_default_order(PathKey *pathkey, Oid type)
{
	TypeCacheEntry *tce = lookup_type_cache(type, TYPECACHE_BTREE_OPFAMILY);

	return pathkey->pk_opfamily == tce->btree_opf;
}

/*
 * The value of a LIMIT or OFFSET clause if it is a constant, in *value
 * (-1 for a NULL: no limit); false if it is not known when planning or
 * negative (PostgreSQL's error then stays PostgreSQL's).
 */
bool
idx_limit_value(Node *node, int64 *value)
{
	Const	   *c = (Const *) node;

	*value = -1;
	if (node == NULL)
		return true;
	if (!IsA(node, Const) || c->consttype != INT8OID)
		return false;
	if (c->constisnull)
		return true;
	*value = DatumGetInt64(c->constvalue);
	return *value >= 0;
}
