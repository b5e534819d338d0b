/*-------------------------------------------------------------------------
 *
 * order_path.c
 *		  ORDER BY, LIMIT and OFFSET pushed down to the find of a plain scan
 *		  (order.h): sorted paths of the base relation, and LIMIT/OFFSET
 *		  paths of UPPERREL_FINAL.
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/order_path.c
 *
 * A LIMIT/OFFSET path is planned as a scan of the base relation itself
 * (scanrelid > 0, no fdw_scan_tlist) that returns at most the rows the
 * Limit node would have: only when every condition is pushed down
 * exactly, so that MongoDB's limit counts the rows PostgreSQL would.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <limits.h>

#include "access/stratnum.h"
#include "access/sysattr.h"
#include "catalog/pg_type.h"
#include "mb/pg_wchar.h"
#include "nodes/makefuncs.h"
#include "nodes/nodeFuncs.h"
#include "optimizer/cost.h"
#include "optimizer/optimizer.h"
#include "optimizer/pathnode.h"
#include "optimizer/planmain.h"
#include "utils/lsyscache.h"
#include "utils/typcache.h"

#include "core/collate_bytes.h"
#include "core/deparse.h"
#include "core/guc.h"
#include "core/pg_compat.h"
#include "order.h"
#include "path_shared.h"
#include "upper.h"

/* path fdw_private of a LIMIT/OFFSET path, after its IdxUpperKind */
enum IdxFinalPathPrivate
{
	IdxFinalKind,				/* IDX_UPPER_FINAL */
	IdxFinalRelid,				/* the base relation (Integer) */
	IdxFinalLimit,				/* OFFSET + LIMIT, -1 for none (Integer) */
	IdxFinalOffset				/* OFFSET (Integer) */
};

/*
 * Is a column of type "type" sorted by MongoDB as PostgreSQL sorts it,
 * for every BSON value the column accepts (convert.c)?  Integers come
 * from numbers only, timestamps and dates from BSON dates, booleans from
 * booleans, uuids from 16-byte binaries of one subtype.  Floats come from
 * doubles, int32 and int64 that the type holds exactly (no rounding, so
 * no ties or swaps among mixed BSON types, which MongoDB compares by
 * exact value), but MongoDB sorts NaN below every number: only as a
 * first key ("first"), whose NaNs the scan reads with a find of their
 * own.  Text is sorted by merging the finds of its strings and of its
 * ObjectIds (order.h), as the only key under a collation that orders as
 * bytes (sort_key()).  Numeric is not: a double reads as its shortest
 * decimal, which may sort apart from its exact value against an int64 or
 * a decimal128 (the double 2^62 reads as 4611686018427388000, MongoDB
 * sorts the int64 4611686018427387950 above it).
 */
static bool
sortable_type(Oid type, bool first)
{
	switch (type)
	{
		case INT2OID:
		case INT4OID:
		case INT8OID:
		case BOOLOID:
		case DATEOID:
		case TIMESTAMPOID:
		case TIMESTAMPTZOID:
		case UUIDOID:
			return true;
		case FLOAT4OID:
		case FLOAT8OID:
		case TEXTOID:
		case VARCHAROID:
			return first;
		default:
			return false;
	}
}

/* What pathkey_column() looks for, and finds */
typedef struct ColumnMatch
{
	Index		relid;
	Var		   *var;
} ColumnMatch;

/*
 * An IdxPathkeyMatch: is "expr" a user column of the relation?
 */
static bool
match_column(Expr *expr, void *arg)
{
	ColumnMatch *m = (ColumnMatch *) arg;

	if (IsA(expr, Var) && ((Var *) expr)->varno == m->relid &&
		((Var *) expr)->varlevelsup == 0 && ((Var *) expr)->varattno > 0)
	{
		m->var = (Var *) expr;
		return true;
	}
	return false;
}

/*
 * The column of "baserel" a pathkey sorts on, or NULL if it sorts on
 * something else.
 */
static Var *
pathkey_column(PathKey *pathkey, RelOptInfo *baserel)
{
	ColumnMatch m = {baserel->relid, NULL};

	idx_pathkey_match(pathkey, match_column, &m);
	return m.var;
}

/*
 * One key of a pushed sort (order.h) for a pathkey, or NIL if MongoDB
 * cannot sort on it: a plain column mapped to a top-level field, of a
 * sortable type, sorted by its type's default btree operator.  "first"
 * says whether it is the sort's first key (the only one whose NULLs may
 * go either way and that may be a float: the scan reads its NULLs and
 * NaNs with finds of their own).
 */
static List *
sort_key(PathKey *pathkey, RelOptInfo *baserel, IdxRelInfo *fpinfo,
		 bool first)
{
	Var		   *var = pathkey_column(pathkey, baserel);
	const char *field;
	bool		desc = idx_pathkey_descending(pathkey);

	if (var == NULL || !sortable_type(var->vartype, first))
		return NIL;
	field = fpinfo->table->fields[var->varattno - 1];
	if (field == NULL || strchr(field, '.') != NULL)
		return NIL;
	if (!idx_pathkey_default_order(pathkey, var->vartype))
		return NIL;
	/* text as MongoDB orders it: UTF-8 bytes (the merge compares them) */
	if ((var->vartype == TEXTOID || var->vartype == VARCHAROID) &&
		(GetDatabaseEncoding() != PG_UTF8 ||
		 !idx_collation_bytewise(pathkey->pk_eclass->ec_collation)))
		return NIL;
	/* MongoDB's NULLs come first ascending and last descending */
	if (!first && pathkey->pk_nulls_first != !desc)
		return NIL;
	return list_make4_int(var->varattno, desc, pathkey->pk_nulls_first,
						  var->vartype);
}

/*
 * The pushed sort (order.h) for "pathkeys" on a plain scan of "baserel",
 * or NIL when MongoDB cannot return rows in that order exactly (also for
 * no pathkeys).  At most two keys: NULLs (and NaNs) of the first are read
 * apart, the second must place NULLs as MongoDB does, and a third would
 * see NULLs of the second sorted by BSON type (undefined before null).  A
 * text key is the only one: a string and an ObjectId may read as the same
 * text, and the merge of their finds compares nothing else.
 */
List *
idx_order_sort_spec(PlannerInfo *root, RelOptInfo *baserel, List *pathkeys)
{
	IdxRelInfo *fpinfo = baserel->fdw_private;
	List	   *result = NIL;
	ListCell   *lc;

	if (list_length(pathkeys) > 2)
		return NIL;
	foreach(lc, pathkeys)
	{
		List	   *key = sort_key(lfirst(lc), baserel, fpinfo, result == NIL);

		if (key == NIL)
			return NIL;
		result = lappend(result, key);
	}
	if (list_length(result) > 1 &&
		(lfourth_int(linitial(result)) == TEXTOID ||
		 lfourth_int(linitial(result)) == VARCHAROID))
		return NIL;
	return result;
}

/*
 * Is the first key of a pushed sort the collection's _id (which MongoDB
 * always has an index on, so the find reads documents in order)?
 */
static bool
sort_on_id(List *sort, IdxRelInfo *fpinfo)
{
	int			attnum = linitial_int(linitial(sort));

	return strcmp(fpinfo->table->fields[attnum - 1], "_id") == 0;
}

/*
 * The finds of a pushed sort after the first: one for the NULLs of the
 * first key, and one for its NaNs if it is a float, or for a text key the
 * second find of its values and the one of its other types.
 */
static int
extra_finds(List *sort)
{
	Oid			type = lfourth_int(linitial(sort));

	if (type == TEXTOID || type == VARCHAROID)
		return 3;
	return (type == FLOAT4OID || type == FLOAT8OID) ? 2 : 1;
}

/*
 * Add a plain path sorted in the query's order, when MongoDB can sort in
 * it.  It costs the plain path's cost, plus the finds for the NULL (and
 * NaN) keys, plus a sort of the documents examined unless the order is
 * _id's (other native indexes are not known when planning).
 */
void
idx_add_order_paths(PlannerInfo *root, RelOptInfo *baserel,
					IdxRelInfo *fpinfo, Cost startup_cost, Cost total_cost)
{
	List	   *sort;
	Cost		sort_cost = 0;

	if (!idxtable_enable_order_pushdown || fpinfo->id_lookup >= 0 ||
		root->query_pathkeys == NIL)
		return;
	sort = idx_order_sort_spec(root, baserel, root->query_pathkeys);
	if (sort == NIL)
		return;
	if (!sort_on_id(sort, fpinfo))
		sort_cost = baserel->tuples * DOCUMENT_EXAMINE_COST;
	add_path(baserel, (Path *)
			 idx_create_foreignscan_path(root, baserel, NULL, baserel->rows,
										 startup_cost + sort_cost,
										 total_cost + sort_cost +
										 extra_finds(sort) * ROUND_TRIP_COST,
										 root->query_pathkeys, NULL, NULL, NIL));
}

/*
 * UPPERREL_ORDERED: remember the base relation under the ordered one, so
 * that UPPERREL_FINAL can push a LIMIT over the sorted scan.  The sorted
 * paths themselves are the base relation's (idx_add_order_paths).
 */
void
idx_add_ordered_paths(PlannerInfo *root, RelOptInfo *input_rel,
					  RelOptInfo *ordered_rel)
{
	IdxOrderedRel *orel;

	if (input_rel->reloptkind != RELOPT_BASEREL)
		return;
	orel = palloc0(sizeof(IdxOrderedRel));
	orel->baserel = input_rel;
	ordered_rel->fdw_private = orel;
}

/*
 * Can the rows of a plain scan of "baserel" be limited by MongoDB for
 * this query?  Every condition must be pushed exactly, nothing between
 * the scan and the Limit node may change the rows (SRFs, row locks,
 * pseudoconstant quals), and the target list may not need system
 * columns, which a scan planned for an upper relation does not fill.
 */
static bool
limit_pushable(PlannerInfo *root, RelOptInfo *baserel)
{
	IdxRelInfo *fpinfo = baserel->fdw_private;
	Query	   *parse = root->parse;
	int			x = -1;

	if (fpinfo->local_conds != NIL || fpinfo->remote_lossy != NIL ||
		fpinfo->id_lookup >= 0 || root->hasPseudoConstantQuals ||
		parse->commandType != CMD_SELECT || parse->rowMarks != NIL ||
		parse->hasTargetSRFs || parse->limitOption != LIMIT_OPTION_COUNT)
		return false;
	while ((x = bms_next_member(fpinfo->attrs_used, x)) >= 0)
		if (x + FirstLowInvalidHeapAttributeNumber <= 0)
			return false;
	return true;
}

/*
 * UPPERREL_FINAL: add a path that pushes LIMIT/OFFSET (constants) to the
 * find of a plain scan, sorted if the query has an ORDER BY MongoDB can
 * sort in.  MongoDB examines the first OFFSET + LIMIT matches (of the
 * order, through an index on _id) instead of every document.
 */
void
idx_add_final_paths(PlannerInfo *root, RelOptInfo *input_rel,
					RelOptInfo *final_rel, FinalPathExtraData *extra)
{
	RelOptInfo *baserel = input_rel;
	IdxRelInfo *fpinfo;
	List	   *pathkeys = NIL;
	int64		count;
	int64		offset;
	double		rows;
	double		examined;
	Cost		startup_cost;
	Cost		total_cost;

	if (!idxtable_enable_order_pushdown || !extra->limit_needed)
		return;
	if (list_member_ptr(root->upper_rels[UPPERREL_ORDERED], input_rel))
	{
		baserel = ((IdxOrderedRel *) input_rel->fdw_private)->baserel;
		pathkeys = root->sort_pathkeys;
	}
	else if (input_rel->reloptkind != RELOPT_BASEREL)
		return;
	fpinfo = baserel->fdw_private;
	if (!limit_pushable(root, baserel) ||
		!idx_limit_value(root->parse->limitCount, &count) ||
		!idx_limit_value(root->parse->limitOffset, &offset))
		return;
	offset = Max(offset, 0);
	if (count >= 0 && count + offset > INT_MAX)
		return;
	if (offset > INT_MAX)
		return;
	if (pathkeys != NIL && idx_order_sort_spec(root, baserel, pathkeys) == NIL)
		return;

	rows = baserel->rows - offset;
	if (count >= 0)
		rows = Min(rows, count);
	rows = clamp_row_est(rows);
	/* the matches MongoDB reads until it has the rows */
	examined = Min(baserel->tuples,
				   (rows + offset) * baserel->tuples / Max(baserel->rows, 1));
	if (pathkeys != NIL &&
		!sort_on_id(idx_order_sort_spec(root, baserel, pathkeys), fpinfo))
		examined = baserel->tuples;
	startup_cost = ROUND_TRIP_COST;
	if (!idxtable_enable_plain_scan && fpinfo->indexes != NIL)
		startup_cost += disable_cost;	/* a plain scan, as in planner.c */
	total_cost = startup_cost + examined * DOCUMENT_EXAMINE_COST +
		(rows + (pathkeys != NIL ? offset : 0)) *
		(DOCUMENT_RETURN_COST + DOCUMENT_TRANSFER_COST + cpu_tuple_cost);

	add_path(final_rel, (Path *)
			 idx_create_foreign_upper_path(root, final_rel,
										   root->upper_targets[UPPERREL_FINAL],
										   rows, startup_cost, total_cost,
										   pathkeys, NULL,
										   list_make4(makeInteger(IDX_UPPER_FINAL),
													  makeInteger(baserel->relid),
													  makeInteger(count >= 0 ? count + offset : -1),
													  makeInteger(offset))));
}

/*
 * GetForeignPlan of a path of idx_add_final_paths(): a plain scan of the
 * base relation with all its conditions pushed down, the sort of the
 * path's pathkeys, and the limit and offset.
 */
ForeignScan *
idx_order_plan(PlannerInfo *root, RelOptInfo *rel, ForeignPath *best_path,
			   List *tlist, List *scan_clauses, Plan *outer_plan)
{
	List	   *priv = best_path->fdw_private;
	RelOptInfo *baserel = find_base_rel(root,
										intVal(list_nth(priv, IdxFinalRelid)));
	IdxRelInfo *fpinfo = baserel->fdw_private;
	List	   *remote_conds = NIL;
	List	   *fdw_private;
	List	   *fdw_exprs;
	ListCell   *lc;

	foreach(lc, baserel->baserestrictinfo)
	{
		RestrictInfo *ri = lfirst_node(RestrictInfo, lc);

		if (!ri->pseudoconstant)
			remote_conds = lappend(remote_conds, ri->clause);
	}
	fdw_exprs = idx_collect_params(remote_conds);
	fdw_private = list_make5(makeInteger(IDX_SCAN_PLAIN),
							 remote_conds,
							 makeInteger(baserel->relid),
							 idx_bitmap_to_list(fpinfo->attrs_used),
							 makeInteger(-1));
	fdw_private = lappend(fdw_private, makeInteger(list_length(fdw_exprs)));
	fdw_private = lappend(fdw_private,
						  idx_order_sort_spec(root, baserel,
											  best_path->path.pathkeys));
	fdw_private = lappend(fdw_private, list_nth(priv, IdxFinalLimit));
	fdw_private = lappend(fdw_private, list_nth(priv, IdxFinalOffset));
	return make_foreignscan(tlist, NIL, baserel->relid, fdw_exprs,
							fdw_private, NIL, NIL, outer_plan);
}
