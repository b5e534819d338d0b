/*-------------------------------------------------------------------------
 *
 * planner.h
 *		  Planner state of an idxtable_fdw relation, and what the planner
 *		  hands to the executor in ForeignScan.fdw_private.
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/planner.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef IDXTABLE_PLANNER_H
#define IDXTABLE_PLANNER_H

#include "nodes/pathnodes.h"

#include "core/option.h"

/*
 * Planner state of one foreign relation, kept in baserel->fdw_private.
 */
typedef struct IdxRelInfo
{
	IdxTableInfo *table;
	List	   *remote_exact;	/* RestrictInfos pushed down exactly */
	List	   *remote_lossy;	/* pushed down and rechecked locally */
	List	   *local_conds;	/* evaluated locally only */
	Bitmapset  *attrs_used;		/* columns to fetch */
	int			id_lookup;		/* _id values looked up, or -1 */
	List	   *indexes;		/* valid IdxIndexDefs of the table */
	double		doc_bytes;		/* bytes of one document a scan returns */
	bool		unanalyzed;		/* never analyzed: sized from MongoDB */
	bool		reads_primary;	/* the scan decides a write: planning's
								 * questions go to the primary too */
} IdxRelInfo;

/* Kinds of scans (first element of fdw_private) */
#define IDX_SCAN_PLAIN	0		/* one find on the collection */
#define IDX_SCAN_INDEX	1		/* index lookup, then facts by _id */
#define IDX_SCAN_AGG	2		/* aggregate pipeline on the facts (agg_path.c) */
#define IDX_SCAN_INDEX_AGG 3	/* count/group/min/max on an index collection
								 * (route_agg.c) */

/*
 * fdw_private of every scan starts with these; fdw_exprs starts with the
 * Params of the pushed-down clauses (IdxPrivNumFilterParams of them).
 */
enum IdxScanPrivateIndex
{
	/* IDX_SCAN_PLAIN or IDX_SCAN_INDEX (Integer) */
	IdxPrivScanKind,
	/* pushed-down clauses (List of Expr), implicitly ANDed */
	IdxPrivRemoteConds,
	/* range table index their Vars use (Integer) */
	IdxPrivRelid,
	/* attribute numbers to fetch (List of Integer, pull_varattnos offsets) */
	IdxPrivAttrsUsed,
	/* number of _id values looked up, or -1 (Integer) */
	IdxPrivIdLookup,
	/* how many leading fdw_exprs are Params of the pushed-down clauses */
	IdxPrivNumFilterParams,
	/* the order the scan returns rows in, pushed down: NIL for none (a List
	 * whose items order_path.c and route_path.c define) */
	IdxPrivSort,
	/* rows the executor asks for at most (OFFSET + LIMIT, Integer), -1 if
	 * unknown: a plain scan passes it as the find's limit; an index scan
	 * sizes its first lookup and fetch from it */
	IdxPrivLimit,
	/* rows a plain scan skips first (OFFSET, Integer), pushed as skip */
	IdxPrivOffset,
	/* what follows depends on the scan kind: index scans see route_path.h;
	 * IDX_SCAN_AGG and IDX_SCAN_INDEX_AGG are their owners' */
	IdxPrivIndexFirst
};

/* Cost of one round trip to MongoDB */
#define ROUND_TRIP_COST 100.0
/* Server-side cost of examining one document or index entry */
#define DOCUMENT_EXAMINE_COST 0.05
/* Cost of transferring and converting one returned document */
#define DOCUMENT_TRANSFER_COST 0.02
/* ... and each of its bytes (the projection's: the columns read) */
#define DOCUMENT_BYTE_COST 0.0002
/*
 * Server-side cost of fetching and sending one document a find returns,
 * beyond examining it (measured at ~6x examining one in test/bench: a
 * scan returning every document costs ~7x one that returns none).  A fact
 * fetched by _id (FACT_FETCH_COST) includes it.
 */
#define DOCUMENT_RETURN_COST 0.3
/* MongoDB ends a reply batch at 16 MiB, whatever the batch size asked */
#define MAX_BATCH_BYTES (16.0 * 1024 * 1024)
/* Server-side cost of reading one index entry through the lookup index */
#define INDEX_ENTRY_COST 0.1
/*
 * Cost of fetching one fact by _id after a lookup (an _id index probe and
 * a document fetch each, measured at ~14x a collection scan's per-document
 * cost in test/bench)
 */
#define FACT_FETCH_COST 0.7

#endif							/* IDXTABLE_PLANNER_H */
