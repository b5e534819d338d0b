/*-------------------------------------------------------------------------
 *
 * planner.h
 *		  What the planner hands to the executor in ForeignScan.fdw_private.
 *
 *-------------------------------------------------------------------------
 */
#ifndef IDXTABLE_PLANNER_H
#define IDXTABLE_PLANNER_H

/*
 * Indexes into the fdw_private list of an idxtable_fdw ForeignScan.
 */
enum IdxScanPrivateIndex
{
	/* pushed-down clauses (List of Expr), implicitly ANDed */
	IdxPrivRemoteConds,
	/* range table index their Vars use (Integer) */
	IdxPrivRelid,
	/* attribute numbers to fetch (List of Integer, pull_varattnos offsets) */
	IdxPrivAttrsUsed,
	/* number of _id values looked up, or -1 (Integer) */
	IdxPrivIdLookup
};

#endif							/* IDXTABLE_PLANNER_H */
