/*-------------------------------------------------------------------------
 *
 * agg_path.c
 *		  Aggregates and GROUP BY pushed down as an aggregate pipeline on the
 *		  fact collection (UPPERREL_GROUP_AGG; scan kind IDX_SCAN_AGG, run by
 *		  agg_scan.c).
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/agg_path.c
 *
 * A grouping is pushed only when every row of the scan below it is chosen
 * by MongoDB exactly (no local or rechecked condition), every GROUP BY item
 * is a column whose MongoDB equality is PostgreSQL's, and every aggregate
 * is one of those below, computed so that the result is PostgreSQL's:
 *
 *	count(*), count(col)	$sum of 1 (col: where the field is neither null,
 *							missing nor undefined; integer, timestamp(tz)
 *							or text columns, whose values agg_scan.c checks)
 *	count(DISTINCT col)		a first $group by the groups and the column's
 *							value, then a count of the non-null values; of
 *							integer, timestamp(tz) columns, and text under
 *							a deterministic collation (equal only when
 *							bytewise equal, as in MongoDB's simple
 *							collation); only beside other count(DISTINCT)
 *							of the same column and count(*)
 *	sum/avg of int2/4/8		$sum of $convert to decimal (exact for any
 *							sum of int8 values) and the count of values;
 *							NULL over no values; avg divides with numeric_div
 *							as int8_avg and numeric_avg do
 *	min/max					of integers, timestamp(tz), and text under
 *							the "C" or "POSIX" collation (MongoDB's simple
 *							collation compares UTF-8 bytes)
 *
 * GROUP BY may also name a date column.  Anything else (floats, whose NaN
 * MongoDB orders below every number; dates, which must be midnights;
 * columns on a dotted path, which may cross an array;
 * DISTINCT in another aggregate, ORDER BY or FILTER in an aggregate;
 * grouping sets) stays local.
 * HAVING and expressions over the pushed aggregates and groups are
 * evaluated locally on the rows the pipeline returns.
 *
 * ORDER BY over a pushed grouping (UPPERREL_ORDERED) becomes a $sort of
 * the pipeline when every key is one of its outputs that MongoDB orders as
 * PostgreSQL: counts, sums of integers, and groups, min and max of
 * integers, timestamps and (groups) dates, by their type's default btree
 * order.  A LIMIT/OFFSET of constants above it (UPPERREL_FINAL, no HAVING)
 * becomes $skip and $limit, and so does one over a grouping without ORDER
 * BY (any groups are a right answer then, but exactly as many).  agg_scan.c
 * places NULLs as PostgreSQL asks.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <limits.h>
#include <math.h>

#include "catalog/pg_collation.h"
#include "catalog/pg_type.h"
#include "nodes/makefuncs.h"
#include "nodes/nodeFuncs.h"
#include "optimizer/cost.h"
#include "optimizer/optimizer.h"
#include "optimizer/pathnode.h"
#include "optimizer/planmain.h"
#include "optimizer/tlist.h"
#include "parser/parsetree.h"
#include "utils/fmgroids.h"
#include "utils/lsyscache.h"
#include "utils/pg_locale.h"
#include "utils/selfuncs.h"
#include "utils/typcache.h"

#include "agg_scan.h"
#include "core/deparse.h"
#include "core/guc.h"
#include "core/pg_compat.h"
#include "path_shared.h"
#include "planner.h"
#include "upper.h"

/*
 * What the planner found out about a grouping it pushes down
 * (grouped_rel->fdw_private).
 */
struct IdxAggRelInfo
{
	List	   *tlist;			/* fdw_scan_tlist: groups, then aggregates */
	List	   *items;			/* per tlist entry: IdxAggItem as a List */
	List	   *local_quals;	/* HAVING, evaluated locally */
	Index		relid;			/* the foreign table's range table index */
	ForeignPath *path;			/* the path of idx_add_agg_paths() */
	List	   *sort;			/* the $sort of an ordered path (agg_scan.h) */
};
typedef struct IdxAggRelInfo IdxAggRelInfo;

/*
 * Is a column of type "typid" grouped by MongoDB's $group exactly as by
 * PostgreSQL's equality?  Integers (int32, int64 and integral doubles are
 * equal in both), dates and timestamps (BSON dates) and text under a
 * deterministic collation (equal only if bytewise equal in both).
 */
static bool
group_type_ok(Oid typid, Oid collid)
{
	switch (typid)
	{
		case INT2OID:
		case INT4OID:
		case INT8OID:
		case DATEOID:
		case TIMESTAMPOID:
		case TIMESTAMPTZOID:
			return true;
		case TEXTOID:
		case VARCHAROID:
			return OidIsValid(collid) && get_collation_isdeterministic(collid);
		default:
			return false;
	}
}

/*
 * Can an aggregate read a column of type "typid" in MongoDB and tell every
 * value a scan would refuse (agg_scan.c's checks)?  Integers, timestamps
 * and text; not date, whose values must also be at midnight.
 */
static bool
value_type_ok(Oid typid)
{
	switch (typid)
	{
		case INT2OID:
		case INT4OID:
		case INT8OID:
		case TIMESTAMPOID:
		case TIMESTAMPTZOID:
		case TEXTOID:
		case VARCHAROID:
			return true;
		default:
			return false;
	}
}

/*
 * The column "expr" reads, if it is a plain column of relation "relid"
 * (binary-compatible casts stripped), else NULL.
 */
static Var *
plain_column(Expr *expr, Index relid)
{
	expr = idx_strip_relabel(expr);
	if (IsA(expr, Var) && ((Var *) expr)->varno == relid &&
		((Var *) expr)->varattno > 0 && ((Var *) expr)->varlevelsup == 0)
		return (Var *) expr;
	return NULL;
}

/*
 * The field path of column "var", if an aggregation expression can name it
 * as "$path" (a path holding "$" would be read as something else).
 */
static const char *
column_path(Var *var, const IdxTableInfo *info)
{
	const char *field = info->fields[var->varattno - 1];

	/* a dotted path may cross an array, which a scan refuses to read and
	 * an aggregation expression reads through */
	if (field == NULL || strchr(field, '$') != NULL || strchr(field, '.') != NULL)
		return NULL;
	return field;
}

/*
 * The pushed kind of aggregate "fnoid", or IDX_AGG_NONE.
 */
static IdxAggKind
agg_kind(Oid fnoid)
{
	switch (fnoid)
	{
		case F_COUNT_:
			return IDX_AGG_COUNT_STAR;
		case F_COUNT_ANY:
			return IDX_AGG_COUNT;
		case F_SUM_INT2:
		case F_SUM_INT4:
		case F_SUM_INT8:
			return IDX_AGG_SUM;
		case F_AVG_INT2:
		case F_AVG_INT4:
		case F_AVG_INT8:
			return IDX_AGG_AVG;
		case F_MIN_INT2:
		case F_MIN_INT4:
		case F_MIN_INT8:
		case F_MIN_TIMESTAMP:
		case F_MIN_TIMESTAMPTZ:
		case F_MIN_TEXT:
			return IDX_AGG_MIN;
		case F_MAX_INT2:
		case F_MAX_INT4:
		case F_MAX_INT8:
		case F_MAX_TIMESTAMP:
		case F_MAX_TIMESTAMPTZ:
		case F_MAX_TEXT:
			return IDX_AGG_MAX;
		default:
			return IDX_AGG_NONE;
	}
}

/*
 * The plan item of aggregate "agg" over relation "relid", or NIL when
 * MongoDB cannot compute it exactly.
 */
static List *
agg_item(Aggref *agg, Index relid, const IdxTableInfo *info)
{
	IdxAggKind	kind = agg_kind(agg->aggfnoid);
	Var		   *var = NULL;

	if (agg->aggdistinct != NIL)
	{
		if (kind != IDX_AGG_COUNT)
			return NIL;
		kind = IDX_AGG_COUNT_DISTINCT;
	}
	if (kind == IDX_AGG_NONE || agg->aggorder != NIL ||
		agg->aggfilter != NULL ||
		agg->agglevelsup != 0 || agg->aggsplit != AGGSPLIT_SIMPLE ||
		agg->aggvariadic)
		return NIL;
	if (kind == IDX_AGG_COUNT_STAR)
		return idx_agg_item_make(kind, NULL, agg->aggtype, -1, NULL);
	if (list_length(agg->args) != 1)
		return NIL;
	var = plain_column(linitial_node(TargetEntry, agg->args)->expr, relid);
	if (var == NULL || column_path(var, info) == NULL)
		return NIL;
	/* text is compared as bytes: only a collation that sorts as C agrees */
	if ((agg->aggfnoid == F_MIN_TEXT || agg->aggfnoid == F_MAX_TEXT) &&
		!idx_collate_is_c(agg->inputcollid))
		return NIL;
	/* DISTINCT: MongoDB's equality must be PostgreSQL's, as for groups */
	if (kind == IDX_AGG_COUNT_DISTINCT &&
		!group_type_ok(var->vartype, agg->inputcollid))
		return NIL;
	/* the column's type: the scan checks every value read (agg_scan.c) */
	if (!value_type_ok(var->vartype))
		return NIL;
	return idx_agg_item_make(kind, column_path(var, info), var->vartype,
							 var->vartypmod,
							 get_attname(info->relid, var->varattno, false));
}

/*
 * Add the columns and aggregates "expr" needs to the scan's target list
 * and items; false if one of them cannot be pushed (a column that is no
 * GROUP BY item, an aggregate MongoDB cannot compute exactly).
 */
static bool
add_needed(IdxAggRelInfo *ainfo, Expr *expr, Index relid,
		   const IdxTableInfo *info)
{
	List	   *needed = pull_var_clause((Node *) expr,
										 PVC_INCLUDE_AGGREGATES |
										 PVC_RECURSE_PLACEHOLDERS);
	ListCell   *lc;

	foreach(lc, needed)
	{
		Node	   *node = lfirst(lc);
		List	   *item;

		if (tlist_member((Expr *) node, ainfo->tlist))
			continue;
		if (!IsA(node, Aggref))
			return false;		/* a column that is not grouped */
		item = agg_item((Aggref *) node, relid, info);
		if (item == NIL)
			return false;
		ainfo->tlist = lappend(ainfo->tlist,
							   makeTargetEntry((Expr *) node,
											   list_length(ainfo->tlist) + 1,
											   NULL, false));
		ainfo->items = lappend(ainfo->items, item);
	}
	return true;
}

/*
 * Can the pipeline compute the items of "ainfo"?  A count(DISTINCT col)
 * comes from a first $group by the groups and the value of col, so every
 * other aggregate must be computable from that stage's output: another
 * count(DISTINCT) of the same column, or count(*) (a sum of the first
 * stage's counts).
 */
static bool
distinct_ok(IdxAggRelInfo *ainfo)
{
	const char *field = NULL;
	bool		others = false;
	ListCell   *lc;

	foreach(lc, ainfo->items)
	{
		List	   *item = lfirst(lc);
		IdxAggKind	kind = intVal(linitial(item));

		if (kind == IDX_AGG_COUNT_DISTINCT)
		{
			if (field != NULL && strcmp(field, strVal(lsecond(item))) != 0)
				return false;
			field = strVal(lsecond(item));
		}
		else if (kind != IDX_AGG_GROUP && kind != IDX_AGG_COUNT_STAR)
			others = true;
	}
	return field == NULL || !others;
}

/*
 * Put the GROUP BY items into the scan's target list; false if one of
 * them is not a column MongoDB groups exactly as PostgreSQL.
 */
static bool
add_groups(IdxAggRelInfo *ainfo, Query *parse, Index relid,
		   const IdxTableInfo *info)
{
	ListCell   *lc;

	foreach(lc, parse->groupClause)
	{
		SortGroupClause *sgc = lfirst_node(SortGroupClause, lc);
		Expr	   *expr = (Expr *) get_sortgroupclause_expr(sgc,
															 parse->targetList);
		Var		   *var = plain_column(expr, relid);

		if (var == NULL || !IsA(expr, Var) || column_path(var, info) == NULL ||
			!group_type_ok(var->vartype, var->varcollid))
			return false;
		if (tlist_member(expr, ainfo->tlist))
			continue;
		ainfo->tlist = lappend(ainfo->tlist,
							   makeTargetEntry(expr,
											   list_length(ainfo->tlist) + 1,
											   NULL, false));
		ainfo->items = lappend(ainfo->items,
							   idx_agg_item_make(IDX_AGG_GROUP,
												 info->fields[var->varattno - 1],
												 var->vartype, var->vartypmod,
												 get_attname(info->relid,
															 var->varattno,
															 false)));
	}
	return true;
}

/*
 * Can the grouping of "input_rel" be pushed at all: a plain scan of one
 * foreign table whose conditions MongoDB evaluates exactly?
 */
static bool
input_pushable(PlannerInfo *root, RelOptInfo *input_rel,
			   GroupPathExtraData *extra)
{
	IdxRelInfo *fpinfo = input_rel->fdw_private;
	ListCell   *lc;

	if (!idxtable_enable_aggregate_pushdown ||
		input_rel->reloptkind != RELOPT_BASEREL ||
		extra->patype != PARTITIONWISE_AGGREGATE_NONE ||
		root->parse->groupingSets != NIL ||
		fpinfo->local_conds != NIL || fpinfo->remote_lossy != NIL)
		return false;
	foreach(lc, input_rel->baserestrictinfo)
	{
		if (lfirst_node(RestrictInfo, lc)->pseudoconstant)
			return false;
	}
	return true;
}

/*
 * Add the ForeignPath that pushes the grouping of "input_rel" down as an
 * aggregate pipeline, when every part of it is exact.
 */
void
idx_add_agg_paths(PlannerInfo *root, RelOptInfo *input_rel,
				  RelOptInfo *grouped_rel, GroupPathExtraData *extra)
{
	IdxRelInfo *fpinfo = input_rel->fdw_private;
	PathTarget *target = root->upper_targets[UPPERREL_GROUP_AGG];
	IdxAggRelInfo *ainfo;
	ListCell   *lc;
	double		groups;
	double		examined;
	Cost		startup_cost;
	Cost		total_cost;
	QualCost	having_cost;

	if (!input_pushable(root, input_rel, extra))
		return;
	ainfo = palloc0(sizeof(IdxAggRelInfo));
	ainfo->relid = input_rel->relid;
	if (!add_groups(ainfo, root->parse, input_rel->relid, fpinfo->table))
		return;
	foreach(lc, target->exprs)
	{
		if (!add_needed(ainfo, lfirst(lc), input_rel->relid, fpinfo->table))
			return;
	}
	if (extra->havingQual)
	{
		if (!add_needed(ainfo, (Expr *) extra->havingQual, input_rel->relid,
						fpinfo->table))
			return;
		ainfo->local_quals = (List *) extra->havingQual;
	}
	if (!distinct_ok(ainfo))
		return;

	/* groups: as the planner estimates them for a local grouping */
	if (root->parse->groupClause == NIL)
		groups = 1;
	else
		groups = estimate_num_groups(root,
									 get_sortgrouplist_exprs(root->parse->groupClause,
															 root->parse->targetList),
									 input_rel->rows, NULL, NULL);
	examined = fpinfo->id_lookup >= 0 ? input_rel->rows : input_rel->tuples;
	cost_qual_eval(&having_cost, ainfo->local_quals, root);
	startup_cost = ROUND_TRIP_COST + examined * DOCUMENT_EXAMINE_COST +
		having_cost.startup;
	/* it reads the facts as a plain scan does (idxtable.enable_plain_scan) */
	if (!idxtable_enable_plain_scan && fpinfo->id_lookup < 0 &&
		fpinfo->indexes != NIL)
		startup_cost += disable_cost;
	total_cost = startup_cost +
		Max(ceil(groups / fpinfo->table->fetch_size) - 1, 0) * ROUND_TRIP_COST +
		groups * (DOCUMENT_TRANSFER_COST + cpu_tuple_cost +
				  having_cost.per_tuple);

	grouped_rel->fdw_private = ainfo;
	ainfo->path = idx_create_foreign_upper_path(root, grouped_rel, target,
												clamp_row_est(groups),
												startup_cost, total_cost, NIL,
												NULL,
												list_make1(makeInteger(IDX_UPPER_AGG)));
	add_path(grouped_rel, (Path *) ainfo->path);
}

/*
 * The pushed grouping of "rel", if "rel" is a grouping relation that kept
 * the path of idx_add_agg_paths() (route_agg.c may have set fdw_private to
 * its own otherwise).
 */
static IdxAggRelInfo *
pushed_grouping(PlannerInfo *root, RelOptInfo *rel)
{
	IdxAggRelInfo *ainfo;
	ListCell   *lc;

	if (!list_member_ptr(root->upper_rels[UPPERREL_GROUP_AGG], rel) ||
		rel->fdw_private == NULL)
		return NULL;
	foreach(lc, rel->pathlist)
	{
		Path	   *path = lfirst(lc);

		if (IsA(path, ForeignPath) &&
			((ForeignPath *) path)->fdw_private != NIL &&
			intVal(linitial(((ForeignPath *) path)->fdw_private)) ==
			IDX_UPPER_AGG)
		{
			ainfo = rel->fdw_private;
			return ainfo->path == (ForeignPath *) path ? ainfo : NULL;
		}
	}
	return NULL;
}

/*
 * Does MongoDB order the values of "item" as PostgreSQL orders its result:
 * counts (int8, never NULL), sums of integers (exact), and groups, min and
 * max of integers, timestamps and dates (BSON numbers compared by value,
 * BSON dates)?  Text is left out: a text column may read ObjectIds.
 */
static bool
sortable_item(List *item)
{
	Oid			typid = intVal(lthird(item));

	switch ((IdxAggKind) intVal(linitial(item)))
	{
		case IDX_AGG_COUNT_STAR:
		case IDX_AGG_COUNT:
		case IDX_AGG_COUNT_DISTINCT:
		case IDX_AGG_SUM:
			return true;
		case IDX_AGG_GROUP:
		case IDX_AGG_MIN:
		case IDX_AGG_MAX:
			return typid == INT2OID || typid == INT4OID || typid == INT8OID ||
				typid == DATEOID || typid == TIMESTAMPOID ||
				typid == TIMESTAMPTZOID;
		default:
			return false;
	}
}

/* What match_output() looks for, and finds */
typedef struct OutputMatch
{
	IdxAggRelInfo *ainfo;
	int			pos;			/* the output's position in the tlist */
	Expr	   *expr;			/* its expression */
} OutputMatch;

/*
 * An IdxPathkeyMatch (order_path.c): is "expr" an output of the grouping
 * that MongoDB can sort (sortable_item())?
 */
static bool
match_output(Expr *expr, void *arg)
{
	OutputMatch *m = (OutputMatch *) arg;
	ListCell   *lt;
	int			i = 0;

	expr = idx_strip_relabel(expr);
	foreach(lt, m->ainfo->tlist)
	{
		TargetEntry *tle = lfirst_node(TargetEntry, lt);

		if (equal(idx_strip_relabel(tle->expr), expr) &&
			sortable_item(list_nth(m->ainfo->items, i)))
		{
			m->pos = i;
			m->expr = tle->expr;
			return true;
		}
		i++;
	}
	return false;
}

/*
 * One key of the pipeline's $sort for "pathkey": (position of the output
 * in fdw_scan_tlist, descending, nulls first) as an IntList, or NIL if it
 * sorts on something else or in another order than its type's default.
 */
static List *
agg_sort_key(PathKey *pathkey, IdxAggRelInfo *ainfo)
{
	OutputMatch m = {ainfo, -1, NULL};

	if (!idx_pathkey_match(pathkey, match_output, &m) ||
		!idx_pathkey_default_order(pathkey, exprType((Node *) m.expr)))
		return NIL;
	return list_make3_int(m.pos,
						  idx_pathkey_descending(pathkey),
						  pathkey->pk_nulls_first);
}

/*
 * UPPERREL_ORDERED over a pushed grouping: add the path whose pipeline
 * sorts its groups as the query's ORDER BY does, when every key can be
 * sorted by MongoDB (agg_sort_key()).  True if "grouped_rel" is such a
 * grouping (the ordered relation is then this file's).
 */
bool
idx_add_agg_ordered_paths(PlannerInfo *root, RelOptInfo *grouped_rel,
						  RelOptInfo *ordered_rel)
{
	IdxAggRelInfo *ainfo = pushed_grouping(root, grouped_rel);
	IdxOrderedRel *orel;
	List	   *sort = NIL;
	ForeignPath *path;
	Cost		total_cost;
	ListCell   *lc;

	if (ainfo == NULL || !idxtable_enable_order_pushdown ||
		root->sort_pathkeys == NIL || root->parse->groupClause == NIL)
		return false;
	foreach(lc, root->sort_pathkeys)
	{
		List	   *key = agg_sort_key(lfirst(lc), ainfo);

		if (key == NIL)
			return true;
		sort = lappend(sort, key);
	}
	orel = palloc0(sizeof(IdxOrderedRel));
	orel->agg = palloc(sizeof(IdxAggRelInfo));
	*orel->agg = *ainfo;
	orel->agg->sort = sort;
	ordered_rel->fdw_private = orel;

	/* MongoDB sorts the groups: a little cheaper than a local Sort */
	path = ainfo->path;
	total_cost = path->path.total_cost +
		path->path.rows * cpu_operator_cost;
	add_path(ordered_rel, (Path *)
			 idx_create_foreign_upper_path(root, ordered_rel,
										   root->upper_targets[UPPERREL_ORDERED],
										   path->path.rows, total_cost,
										   total_cost, root->sort_pathkeys, NULL,
										   list_make4(makeInteger(IDX_UPPER_AGG),
													  sort, makeInteger(-1),
													  makeInteger(0))));
	return true;
}

/*
 * The pushed grouping a LIMIT/OFFSET would go over: the sorted one of an
 * ordered relation of this file's, or, without ORDER BY, the grouping
 * itself, unsorted (with GROUP BY only: an aggregate without it is one row
 * however many documents the pipeline returns).  NULL if neither.
 */
static IdxOrderedRel *
limited_grouping(PlannerInfo *root, RelOptInfo *input_rel)
{
	IdxAggRelInfo *ainfo;
	IdxOrderedRel *orel;

	if (list_member_ptr(root->upper_rels[UPPERREL_ORDERED], input_rel))
	{
		orel = input_rel->fdw_private;
		return orel->agg != NULL ? orel : NULL;
	}
	ainfo = pushed_grouping(root, input_rel);
	if (ainfo == NULL || root->parse->sortClause != NIL ||
		root->parse->groupClause == NIL)
		return NULL;
	orel = palloc0(sizeof(IdxOrderedRel));
	orel->agg = palloc(sizeof(IdxAggRelInfo));
	*orel->agg = *ainfo;
	orel->agg->sort = NIL;
	return orel;
}

/*
 * UPPERREL_FINAL over a pushed grouping, sorted or (without ORDER BY) not:
 * a constant LIMIT/OFFSET becomes the pipeline's $skip and $limit, so that
 * MongoDB returns only the groups asked for.  Unsorted, any groups are a
 * right answer, and $skip and $limit in one pipeline leave as many as
 * PostgreSQL's Limit would.  Not with HAVING, which drops groups after
 * them.  Returns false if "input_rel" is not such a grouping.
 */
bool
idx_add_agg_final_paths(PlannerInfo *root, RelOptInfo *input_rel,
						RelOptInfo *final_rel, FinalPathExtraData *extra)
{
	IdxOrderedRel *orel = limited_grouping(root, input_rel);
	Query	   *parse = root->parse;
	ForeignPath *path;
	int64		count;
	int64		offset;
	double		rows;
	Cost		startup_cost;
	Cost		total_cost;

	if (orel == NULL)
		return false;
	path = orel->agg->path;
	if (!idxtable_enable_order_pushdown ||
		!extra->limit_needed || orel->agg->local_quals != NIL ||
		parse->rowMarks != NIL || parse->hasTargetSRFs ||
		parse->limitOption != LIMIT_OPTION_COUNT ||
		!idx_limit_value(parse->limitCount, &count) ||
		!idx_limit_value(parse->limitOffset, &offset))
		return true;
	offset = Max(offset, 0);
	/* MongoDB refuses $limit 0 */
	if (count == 0 || offset > INT_MAX ||
		(count > 0 && count + offset > INT_MAX))
		return true;
	rows = Max(path->path.rows - offset, 1);
	if (count > 0)
		rows = Min(rows, count);
	startup_cost = total_cost = path->path.startup_cost +
		rows * (DOCUMENT_TRANSFER_COST + cpu_tuple_cost);
	if (orel->agg->sort == NIL)
	{
		/*
		 * Unsorted, the local Limit over the grouping costs what this path
		 * does (PostgreSQL charges it only the rows it reads), although the
		 * scan under it receives a whole batch of groups.  Make the pushed
		 * LIMIT a little cheaper, by a share of the groups it saves, so
		 * that it is chosen (postgres_fdw does the same).
		 */
		startup_cost = path->path.startup_cost;
		if (count > 0 && count + offset < path->path.rows)
			total_cost -= (total_cost - startup_cost) * 0.05 *
				(path->path.rows - count - offset) / path->path.rows;
	}
	final_rel->fdw_private = orel;
	add_path(final_rel, (Path *)
			 idx_create_foreign_upper_path(root, final_rel,
										   root->upper_targets[UPPERREL_FINAL],
										   clamp_row_est(rows), startup_cost,
										   total_cost, root->sort_pathkeys, NULL,
										   list_make4(makeInteger(IDX_UPPER_AGG),
													  orel->agg->sort,
													  makeInteger(count > 0 ? count + offset : -1),
													  makeInteger(offset))));
	return true;
}

/*
 * GetForeignPlan of a path of idx_add_agg_paths(): the scan below's pushed
 * conditions go to the pipeline's $match, the groups and aggregates to
 * fdw_scan_tlist and their items, HAVING to the plan's qual.
 */
ForeignScan *
idx_agg_plan(PlannerInfo *root, RelOptInfo *rel, ForeignPath *best_path,
			 List *tlist, List *scan_clauses, Plan *outer_plan)
{
	IdxAggRelInfo *ainfo = rel->fdw_private;
	List	   *path_private = best_path->fdw_private;
	Index		relid;
	IdxRelInfo *fpinfo;
	List	   *remote_conds = NIL;
	List	   *fdw_private;
	List	   *fdw_exprs;
	ListCell   *lc;
	List	   *sort = NIL;
	int			limit = -1;
	int			offset = 0;

	/* a sorted or limited path (idx_add_agg_ordered/final_paths) */
	if (list_length(path_private) > 1)
	{
		ainfo = ((IdxOrderedRel *) rel->fdw_private)->agg;
		sort = lsecond(path_private);
		limit = intVal(lthird(path_private));
		offset = intVal(lfourth(path_private));
	}
	relid = ainfo->relid;
	fpinfo = find_base_rel(root, relid)->fdw_private;
	foreach(lc, fpinfo->remote_exact)
		remote_conds = lappend(remote_conds,
							   lfirst_node(RestrictInfo, lc)->clause);

	fdw_private = list_make5(makeInteger(IDX_SCAN_AGG),
							 remote_conds,
							 makeInteger(relid),
							 NIL,
							 makeInteger(fpinfo->id_lookup));
	fdw_exprs = idx_collect_params(remote_conds);
	fdw_private = lappend(fdw_private, makeInteger(list_length(fdw_exprs)));
	fdw_private = lappend(fdw_private, sort);	/* IdxPrivSort */
	fdw_private = lappend(fdw_private, makeInteger(limit)); /* IdxPrivLimit */
	fdw_private = lappend(fdw_private, makeInteger(offset));	/* IdxPrivOffset */
	fdw_private = lappend(fdw_private, ainfo->items);	/* IdxPrivAggItems */
	fdw_private = lappend(fdw_private,	/* IdxPrivAggGrouped */
						  makeInteger(root->parse->groupClause != NIL));

	return make_foreignscan(tlist, ainfo->local_quals, 0, fdw_exprs,
							fdw_private, ainfo->tlist, NIL, outer_plan);
}
