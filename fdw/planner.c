/*-------------------------------------------------------------------------
 *
 * planner.c
 *		  Planning of scans of idxtable_fdw foreign tables.
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/planner.c
 *
 * Each restriction clause is classified once (deparse.c): pushed down
 * exactly, pushed down and rechecked, or evaluated locally.  Row counts
 * come from ANALYZE (pg_class.reltuples and column statistics); before
 * it, from what MongoDB says of the collection (its document count and
 * mean document size, asked once per relation and cached by the backend:
 * table_size.c), else from the entry count of a valid index table (the
 * facts its build or the latest ANALYZE counted), else a collection is
 * assumed to hold DEFAULT_COLLECTION_SIZE documents.
 *
 * Costs model what MongoDB does: a lookup by _id touches only the matching
 * documents, anything else examines every document of the collection; the
 * documents the pushed-down filter lets through are returned, each costing
 * the server its fetch and reply, and the FDW its transfer and conversion
 * (per document and per byte of the columns read), and every batch a round
 * trip (fetch_size documents, or fewer when 16 MiB of them fill a reply).  Clauses evaluated locally only
 * choose among the returned documents: they make the scan no cheaper.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <math.h>

#include "access/sysattr.h"
#include "optimizer/cost.h"
#include "optimizer/optimizer.h"
#include "optimizer/pathnode.h"
#include "optimizer/planmain.h"
#include "optimizer/prep.h"
#include "optimizer/restrictinfo.h"

#include "core/deparse.h"
#include "core/guc.h"
#include "core/option.h"
#include "core/pg_compat.h"
#include "core/table_size.h"
#include "idxtable_fdw.h"
#include "index/index_catalog.h"
#include "order.h"
#include "path_shared.h"
#include "planner.h"
#include "route_path.h"
#include "upper.h"

/* Assumed collection size when ANALYZE has never run and MongoDB did not say */
#define DEFAULT_COLLECTION_SIZE 1000.0

/*
 * The number of documents of a table that was never analyzed (see the
 * file header).  A count of 0 is not taken: the collection was empty when
 * counted and has likely been filled since (an index table created with
 * the table, say), as PostgreSQL assumes ten pages for a heap table that
 * was empty and never vacuumed.
 */
static double
unanalyzed_size(const IdxTableInfo *table, const IdxCollectionSize *size)
{
	double		count = size->documents;

	if (count <= 0)
		count = idx_indexed_fact_count(table->relid);
	return count <= 0 ? DEFAULT_COLLECTION_SIZE : count;
}

/*
 * Does the scan of the relation decide a write: is it a result relation
 * of the UPDATE or DELETE, or locked (FOR UPDATE)?  Its reads then go to
 * the primary (protocol_read.h), planning's too.
 */
static bool
scan_decides_write(PlannerInfo *root, RelOptInfo *baserel)
{
	return bms_is_member(baserel->relid, root->all_result_relids) ||
		get_plan_rowmark(root->rowMarks, baserel->relid) != NULL;
}

/*
 * Bytes of one document as the scans of the relation return it: after
 * ANALYZE, PostgreSQL's width of the columns read (from their statistics);
 * before it, the mean document size MongoDB reports, for the share of the
 * table's columns the scan reads (its projection returns no other field).
 */
static double
returned_bytes(RelOptInfo *baserel, IdxRelInfo *fpinfo,
			   const IdxCollectionSize *size)
{
	int			columns = 0;
	int			read = 0;
	int			i;

	if (size == NULL || size->avg_bytes <= 0)
		return baserel->reltarget->width;
	for (i = 0; i < fpinfo->table->natts; i++)
	{
		if (fpinfo->table->fields[i] == NULL)
			continue;
		columns++;
		if (bms_is_member(i + 1 - FirstLowInvalidHeapAttributeNumber,
						  fpinfo->attrs_used))
			read++;
	}
	/* a whole-row reference reads every column */
	if (bms_is_member(-FirstLowInvalidHeapAttributeNumber, fpinfo->attrs_used))
		read = columns;
	return size->avg_bytes * Max(read, 1) / Max(columns, 1);
}

/*
 * Estimate the relation's size and classify its restriction clauses.
 */
void
idxGetForeignRelSize(PlannerInfo *root, RelOptInfo *baserel,
					 Oid foreigntableid)
{
	IdxRelInfo *fpinfo = palloc0(sizeof(IdxRelInfo));
	ListCell   *lc;
	Selectivity sel;

	baserel->fdw_private = fpinfo;
	fpinfo->table = idx_get_table_info(foreigntableid);
	fpinfo->id_lookup = -1;

	foreach(lc, baserel->baserestrictinfo)
	{
		RestrictInfo *ri = lfirst_node(RestrictInfo, lc);
		int			ids;

		switch (idx_classify_clause(ri->clause, baserel->relid, fpinfo->table))
		{
			case IDX_PUSH_EXACT:
				fpinfo->remote_exact = lappend(fpinfo->remote_exact, ri);
				break;
			case IDX_PUSH_LOSSY:
				fpinfo->remote_lossy = lappend(fpinfo->remote_lossy, ri);
				break;
			case IDX_PUSH_NONE:
				fpinfo->local_conds = lappend(fpinfo->local_conds, ri);
				break;
		}
		if (list_member_ptr(fpinfo->local_conds, ri))
			continue;
		ids = idx_id_lookup_count(ri->clause, baserel->relid, fpinfo->table);
		if (ids >= 0 && (fpinfo->id_lookup < 0 || ids < fpinfo->id_lookup))
			fpinfo->id_lookup = ids;
	}

	/*
	 * Index tables, unless the scan reads one document by _id: nothing is
	 * cheaper than that (an index path costs a round trip and at least one
	 * entry more), so the definitions need not even be looked at.
	 */
	if (idxtable_enable_index_routing &&
		(fpinfo->id_lookup < 0 || fpinfo->id_lookup > 1))
		fpinfo->indexes = idx_valid_indexes(foreigntableid, baserel->userid);

	/* columns needed: the target list plus everything evaluated locally */
	pull_varattnos((Node *) baserel->reltarget->exprs, baserel->relid,
				   &fpinfo->attrs_used);
	foreach(lc, list_concat_copy(fpinfo->local_conds, fpinfo->remote_lossy))
		pull_varattnos((Node *) lfirst_node(RestrictInfo, lc)->clause,
					   baserel->relid, &fpinfo->attrs_used);

	fpinfo->reads_primary = scan_decides_write(root, baserel);
	if (baserel->tuples < 0)
	{
		IdxCollectionSize size;

		fpinfo->unanalyzed = true;
		idx_planning_collection_size(fpinfo->table, baserel->userid,
									 fpinfo->reads_primary, &size);
		baserel->tuples = unanalyzed_size(fpinfo->table, &size);
		fpinfo->doc_bytes = returned_bytes(baserel, fpinfo, &size);
	}
	else
		fpinfo->doc_bytes = returned_bytes(baserel, fpinfo, NULL);
	sel = clauselist_selectivity(root, baserel->baserestrictinfo, 0,
								 JOIN_INNER, NULL);
	baserel->rows = clamp_row_est(baserel->tuples * sel);
	if (fpinfo->id_lookup >= 0)
		baserel->rows = Min(baserel->rows, Max(fpinfo->id_lookup, 1));
}

/*
 * Add the one access path: a find with the pushed-down filter.
 */
void
idxGetForeignPaths(PlannerInfo *root, RelOptInfo *baserel,
				   Oid foreigntableid)
{
	IdxRelInfo *fpinfo = baserel->fdw_private;
	double		examined;
	double		returned;
	double		batches;
	Cost		startup_cost;
	Cost		total_cost;
	QualCost	local_cost;
	List	   *pushed = list_concat_copy(fpinfo->remote_exact,
										  fpinfo->remote_lossy);
	List	   *rechecked = list_concat_copy(fpinfo->local_conds,
											 fpinfo->remote_lossy);

	/* the documents the pushed-down filter lets through */
	returned = clamp_row_est(baserel->tuples *
							 clauselist_selectivity(root, pushed, 0,
													JOIN_INNER, NULL));
	if (fpinfo->id_lookup >= 0)
		returned = Min(returned, Max(fpinfo->id_lookup, 1));
	returned = Max(returned, baserel->rows);
	examined = fpinfo->id_lookup >= 0 ? returned : baserel->tuples;
	batches = idx_batches(returned, fpinfo->table->fetch_size,
						  fpinfo->doc_bytes);

	cost_qual_eval(&local_cost, rechecked, root);

	startup_cost = ROUND_TRIP_COST + local_cost.startup;
	if (!idxtable_enable_plain_scan && fpinfo->id_lookup < 0 &&
		fpinfo->indexes != NIL)
		startup_cost += disable_cost;	/* like enable_seqscan = off */
	total_cost = startup_cost +
		examined * DOCUMENT_EXAMINE_COST +
		Max(batches - 1, 0) * ROUND_TRIP_COST +
		returned * (DOCUMENT_RETURN_COST + DOCUMENT_TRANSFER_COST +
					fpinfo->doc_bytes * DOCUMENT_BYTE_COST +
					cpu_tuple_cost) +
		returned * local_cost.per_tuple;

	add_path(baserel, (Path *)
			 idx_create_foreignscan_path(root, baserel, NULL, baserel->rows,
										 startup_cost, total_cost, NIL,
										 NULL, NULL, NIL));

	idx_add_order_paths(root, baserel, fpinfo, startup_cost, total_cost);

	if (fpinfo->indexes != NIL)
		idx_add_index_paths(root, baserel, fpinfo);
}

/*
 * Build the ForeignScan: pushed-down clauses go to fdw_private, local and
 * lossy ones stay in the plan's qual.
 */
ForeignScan *
idxGetForeignPlan(PlannerInfo *root, RelOptInfo *baserel, Oid foreigntableid,
				  ForeignPath *best_path, List *tlist, List *scan_clauses,
				  Plan *outer_plan)
{
	IdxRelInfo *fpinfo = baserel->fdw_private;
	List	   *remote_conds = NIL;
	List	   *local_exprs = NIL;
	List	   *fdw_private;
	List	   *fdw_exprs;
	List	   *index_private = NIL;
	Bitmapset  *attrs_used;
	int			nparams;
	int			limit = -1;
	ListCell   *lc;

	/* a path above the scan (upper.h) is planned by its owner */
	if (IS_UPPER_REL(baserel))
		return idx_upper_plan(root, baserel, best_path, tlist, scan_clauses,
							  outer_plan);

	attrs_used = bms_copy(fpinfo->attrs_used);
	foreach(lc, scan_clauses)
	{
		RestrictInfo *ri = lfirst_node(RestrictInfo, lc);

		if (ri->pseudoconstant)
			continue;
		if (list_member_ptr(fpinfo->remote_exact, ri))
			remote_conds = lappend(remote_conds, ri->clause);
		else if (list_member_ptr(fpinfo->remote_lossy, ri))
		{
			remote_conds = lappend(remote_conds, ri->clause);
			local_exprs = lappend(local_exprs, ri->clause);
		}
		else
			local_exprs = lappend(local_exprs, ri->clause);
	}

	fdw_exprs = idx_collect_params(remote_conds);
	nparams = list_length(fdw_exprs);

	/* an index path adds its lookup values to fdw_exprs, its part to the plan */
	if (idx_is_index_path(best_path))
		index_private = idx_index_plan_private(root, baserel, best_path,
											   remote_conds, &fdw_exprs,
											   &local_exprs, &attrs_used,
											   &limit);

	fdw_private = list_make5(makeInteger(index_private != NIL ?
										 IDX_SCAN_INDEX : IDX_SCAN_PLAIN),
							 remote_conds,
							 makeInteger(baserel->relid),
							 idx_bitmap_to_list(attrs_used),
							 makeInteger(fpinfo->id_lookup));
	fdw_private = lappend(fdw_private, makeInteger(nparams));
	/* IdxPrivSort: a plain path's pathkeys are its pushed sort (order.h) */
	fdw_private = lappend(fdw_private, index_private != NIL ? NIL :
						  idx_order_sort_spec(root, baserel,
											  best_path->path.pathkeys));
	fdw_private = lappend(fdw_private, makeInteger(limit));	/* IdxPrivLimit */
	fdw_private = lappend(fdw_private, makeInteger(0));	/* IdxPrivOffset */
	fdw_private = list_concat(fdw_private, index_private);

	/*
	 * The parameters of the pushed-down clauses go to fdw_exprs, so that the
	 * executor evaluates them and knows to rescan when they change.
	 */
	return make_foreignscan(tlist, local_exprs, baserel->relid, fdw_exprs,
							fdw_private, NIL, NIL, outer_plan);
}
