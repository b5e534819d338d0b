/*-------------------------------------------------------------------------
 *
 * scan_node.c
 *		  What every scan kind reads from its executor node: the user the
 *		  foreign table is read as, its range table index, and the values
 *		  of the plan's expressions for this execution.
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/scan_node.c
 *
 * Below scan.c (the FDW callbacks) and every scan kind it dispatches to
 * (scan.h): those call these, never the other way round.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "executor/executor.h"
#include "miscadmin.h"

#include "core/pg_compat.h"
#include "scan.h"

/*
 * The user to read the foreign table as: the checkAsUser of the relation
 * the query names (the owner of a view the table is read through, also
 * for an inheritance child of it), else the current user, as
 * ExecCheckPermissions() and postgres_fdw decide (core/pg_compat.h).
 */
Oid
idx_scan_user(ForeignScanState *node)
{
	Oid			user;

	user = idx_foreign_scan_check_as_user((ForeignScan *) node->ss.ps.plan,
										  node->ss.ps.state,
										  idx_scan_rtindex(node));
	return OidIsValid(user) ? user : GetUserId();
}

/*
 * The range table index of the foreign table read: the scan's own, or for
 * a scan above it (an upper path, scanrelid 0) the one relation of its
 * fs_relids.  Not IdxPrivRelid: that is the planner's index, which setrefs
 * does not adjust when the query's range table is flattened into an outer
 * one (INSERT ... SELECT, a PL/pgSQL statement); fs_relids it does.
 */
Index
idx_scan_rtindex(ForeignScanState *node)
{
	ForeignScan *plan = (ForeignScan *) node->ss.ps.plan;

	if (plan->scan.scanrelid > 0)
		return plan->scan.scanrelid;
	return bms_singleton_member(plan->fs_relids);
}

/*
 * Evaluate expressions (parameters, lookup values) for this execution, in
 * the per-tuple memory context.
 */
void
idx_eval_exprs(ForeignScanState *node, List *states, Datum *values,
			   bool *nulls)
{
	ExprContext *econtext = node->ss.ps.ps_ExprContext;
	ListCell   *lc;
	int			i = 0;
	MemoryContext oldcxt;

	oldcxt = MemoryContextSwitchTo(econtext->ecxt_per_tuple_memory);
	foreach(lc, states)
	{
		values[i] = ExecEvalExpr((ExprState *) lfirst(lc), econtext,
								 &nulls[i]);
		i++;
	}
	MemoryContextSwitchTo(oldcxt);
}
