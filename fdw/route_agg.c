/*-------------------------------------------------------------------------
 *
 * route_agg.c
 *		  count(*), count(*) GROUP BY a key, and min()/max() of a key
 *		  answered from an index collection (UPPERREL_GROUP_AGG; scan kind
 *		  IDX_SCAN_INDEX_AGG): the paths and plans.  Executed by
 *		  route_agg_scan.c.
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/route_agg.c
 *
 * "SELECT count(*) FROM t WHERE <conditions on an index's keys>" becomes a
 * "count" command on the index collection, whose filter the collection's
 * lookup index serves by itself: mongod counts index keys (COUNT_SCAN) and
 * examines no document.  "SELECT k, count(*) ... GROUP BY k" groups the
 * entries by key k; "SELECT min(k), max(k) ..." reads the first entry in
 * each direction of k.  The entries give the facts' answer only where every
 * fact has exactly one entry the filter can match and the filter is every
 * condition of the query, exactly:
 *
 *	- no multi-valued key (a fact has one entry per element);
 *	- every WHERE clause is an equality, IN list, IS NULL, boolean key or
 *	  range on a plain key column, forming an equality prefix and at most
 *	  one range;
 *	- key types whose entries hold the value itself: integers, text (ranges
 *	  only where the entries hold the comparison's collation order),
 *	  boolean (equality), date, uuid; never timestamps, whose keys drop
 *	  sub-millisecond digits (group keys and min/max also no dates, whose
 *	  infinities are stored as the ends of BSON dates);
 *	- entries that are trusted as covering reads trust them: not in
 *	  "ordered" mode (orphaned entries and claims), and with
 *	  idxtable.index_consistency = current after the same wait for the
 *	  applier as a routed scan (sync_wait.h).  A unique index's claim and a
 *	  conflict's entry of the non-unique form are each the one entry of
 *	  their fact.
 *
 * A table without a consistency mode of its own is planned this way,
 * although the executor may find its server without transactions (writes
 * "ordered") or the index no longer usable: a count then counts the facts
 * with the pushed-down filter instead, so it is planned only where that
 * filter is exact too (route_agg_scan.c).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <math.h>

#include "access/stratnum.h"
#include "catalog/pg_aggregate.h"
#include "catalog/pg_type.h"
#include "nodes/makefuncs.h"
#include "nodes/nodeFuncs.h"
#include "optimizer/optimizer.h"
#include "optimizer/pathnode.h"
#include "optimizer/planmain.h"
#include "optimizer/tlist.h"
#include "rewrite/rewriteManip.h"
#include "utils/fmgroids.h"
#include "utils/lsyscache.h"
#include "utils/ruleutils.h"
#include "utils/selfuncs.h"
#include "utils/syscache.h"

#include "core/deparse.h"
#include "core/guc.h"
#include "core/pg_compat.h"
#include "index/index_catalog.h"
#include "index/index_collate.h"
#include "planner.h"
#include "route_agg.h"
#include "route_path.h"
#include "upper.h"

/*
 * Server-side cost of one entry read by the $group of a count per key.  An
 * entry of a key or two is a smaller document than its fact, but its keys
 * are in a sub-document: test/bench measured a $group by "$_id.k0" over
 * 100,000 entries of customers {town,last_name} (half the facts' bytes) at
 * 1.2 times the CPU of a $group by "$town" over the facts in the test
 * server.  So the entries answer a GROUP BY where the filter reads fewer of
 * them than the facts pipeline reads facts, not over a whole table.
 */
#define ENTRY_GROUP_COST (DOCUMENT_EXAMINE_COST * 1.2)

/* A condition on one key, found while matching the WHERE clauses */
typedef struct AggCond
{
	int			keypos;
	IdxCondOp	op;
	Expr	   *value;			/* Const or Param; NULL for IS NULL */
	Expr	   *clause;			/* the WHERE clause it comes from */
} AggCond;

/*
 * Is "agg" count(*) without DISTINCT, ORDER BY or FILTER?
 */
bool
idx_agg_is_count_star(Node *node)
{
	Aggref	   *agg = (Aggref *) node;

	return IsA(node, Aggref) && agg->aggfnoid == F_COUNT_ &&
		agg->aggstar && agg->aggfilter == NULL && agg->aggdistinct == NIL &&
		agg->aggorder == NIL && agg->agglevelsup == 0 &&
		agg->aggsplit == AGGSPLIT_SIMPLE;
}

/*
 * AGG_OUT_MIN or AGG_OUT_MAX if "node" is min() or max() of a Var, without
 * DISTINCT, ORDER BY or FILTER (*arg: the Var); else -1.
 */
int
idx_agg_min_max_of(Node *node, Var **arg)
{
	Aggref	   *agg = (Aggref *) node;
	HeapTuple	tuple;
	Oid			sortop;
	int			strategy;

	if (!IsA(node, Aggref) || agg->aggstar || agg->aggfilter != NULL ||
		agg->aggdistinct != NIL || agg->aggorder != NIL ||
		agg->agglevelsup != 0 || agg->aggsplit != AGGSPLIT_SIMPLE ||
		list_length(agg->args) != 1 ||
		!IsA(linitial_node(TargetEntry, agg->args)->expr, Var))
		return -1;
	tuple = SearchSysCache1(AGGFNOID, ObjectIdGetDatum(agg->aggfnoid));
	if (!HeapTupleIsValid(tuple))
		return -1;
	sortop = ((Form_pg_aggregate) GETSTRUCT(tuple))->aggsortop;
	ReleaseSysCache(tuple);
	strategy = OidIsValid(sortop) ? idx_op_btree_strategy(sortop) : 0;
	*arg = (Var *) linitial_node(TargetEntry, agg->args)->expr;
	if (strategy == BTLessStrategyNumber)
		return AGG_OUT_MIN;
	if (strategy == BTGreaterStrategyNumber)
		return AGG_OUT_MAX;
	return -1;
}

/*
 * Can key "key" be matched exactly by a condition of strategy "strategy"
 * under collation "collid"?  Key values must be the column's values
 * themselves (no timestamp: its keys are rounded to milliseconds), and
 * ordered as PostgreSQL orders them for ranges: text only where the
 * entries hold that collation's order (its sort keys, or the strings under
 * a collation that orders as bytes do).
 */
static bool
exact_key_strategy(const IdxIndexKey *key, int strategy, Oid collid)
{
	bool		range = strategy != BTEqualStrategyNumber;

	switch (key->keytype)
	{
		case INT2OID:
		case INT4OID:
		case INT8OID:
		case DATEOID:
		case UUIDOID:
			return true;
		case BOOLOID:
			return !range;
		case TEXTOID:
		case VARCHAROID:
			if (!OidIsValid(collid))
				return false;
			if (!range)
				return get_collation_isdeterministic(collid);
			if (OidIsValid(key->sortcoll))
				return key->sortcoll == collid;
			return idx_collation_bytewise(collid);
		default:
			return false;
	}
}

/*
 * The plain, single-valued key of "def" that "node" reads, or -1.
 */
static int
key_of_var(const IdxIndexDef *def, Node *node, Index relid)
{
	Var		   *var = (Var *) idx_strip_relabel((Expr *) node);
	int			k;

	if (var == NULL || !IsA(var, Var) || var->varno != relid ||
		var->varlevelsup != 0)
		return -1;
	for (k = 0; k < def->nkeys; k++)
	{
		if (def->keys[k].kind == IDX_KEY_COLUMN && !def->keys[k].multi &&
			def->keys[k].attnum == var->varattno)
			return k;
	}
	return -1;
}

/*
 * Is key "keypos" of "def" text?
 */
static bool
is_text_key(const IdxIndexDef *def, int keypos)
{
	Oid			type = def->keys[keypos].keytype;

	return type == TEXTOID || type == VARCHAROID;
}

/*
 * Is "node" a value a lookup can take: a constant or an outside parameter?
 */
static bool
is_value(Node *node)
{
	node = (Node *) idx_strip_relabel((Expr *) node);
	return node != NULL && (IsA(node, Const) ||
							(IsA(node, Param) &&
							 ((Param *) node)->paramkind == PARAM_EXTERN));
}

/*
 * Match "key op value" (or commuted) exactly.
 */
static bool
match_op(const IdxIndexDef *def, OpExpr *op, Index relid, AggCond *cond)
{
	Node	   *left = linitial(op->args);
	Node	   *right = lsecond(op->args);
	Oid			opno = op->opno;
	int			strategy;
	static const IdxCondOp ops[] = {0, ICOND_LT, ICOND_LE, ICOND_EQ,
	ICOND_GE, ICOND_GT};

	if (list_length(op->args) != 2)
		return false;
	cond->keypos = key_of_var(def, left, relid);
	if (cond->keypos < 0)
	{
		Node	   *tmp = left;

		left = right;
		right = tmp;
		opno = get_commutator(opno);
		cond->keypos = key_of_var(def, left, relid);
		if (cond->keypos < 0 || !OidIsValid(opno))
			return false;
	}
	if (!is_value(right) ||
		!idx_compatible_types(def->keys[cond->keypos].keytype,
							  exprType(right)))
		return false;
	strategy = idx_op_btree_strategy(opno);
	if (strategy < BTLessStrategyNumber ||
		strategy > BTGreaterStrategyNumber ||
		!exact_key_strategy(&def->keys[cond->keypos], strategy,
							op->inputcollid))
		return false;
	cond->op = ops[strategy];
	cond->value = (Expr *) idx_strip_relabel((Expr *) right);
	return true;
}

/*
 * Match "key = ANY (array value)" exactly.
 */
static bool
match_in(const IdxIndexDef *def, ScalarArrayOpExpr *saop, Index relid,
		 AggCond *cond)
{
	Node	   *array = (Node *) idx_strip_relabel(lsecond(saop->args));

	cond->keypos = key_of_var(def, linitial(saop->args), relid);
	if (!saop->useOr || cond->keypos < 0 || !is_value(array) ||
		!idx_compatible_types(def->keys[cond->keypos].keytype,
							  get_element_type(exprType(array))))
		return false;
	if (idx_op_btree_strategy(saop->opno) != BTEqualStrategyNumber ||
		!exact_key_strategy(&def->keys[cond->keypos],
							BTEqualStrategyNumber, saop->inputcollid))
		return false;
	cond->op = ICOND_IN;
	cond->value = (Expr *) array;
	return true;
}

/*
 * Match one WHERE clause to a key of "def" exactly.
 */
static bool
match_agg_clause(const IdxIndexDef *def, Expr *clause, Index relid,
				 AggCond *cond)
{
	cond->value = NULL;
	if (IsA(clause, Var) || is_notclause(clause))
	{
		/* a boolean key alone (true) or under NOT (false) */
		Node	   *arg = IsA(clause, Var) ? (Node *) clause :
		(Node *) get_notclausearg(clause);

		cond->keypos = key_of_var(def, arg, relid);
		if (cond->keypos < 0 || def->keys[cond->keypos].keytype != BOOLOID)
			return false;
		cond->op = ICOND_EQ;
		cond->value = (Expr *) makeBoolConst(IsA(clause, Var), false);
		return true;
	}
	if (IsA(clause, OpExpr))
		return match_op(def, (OpExpr *) clause, relid, cond);
	if (IsA(clause, ScalarArrayOpExpr))
		return match_in(def, (ScalarArrayOpExpr *) clause, relid, cond);
	if (IsA(clause, NullTest) &&
		((NullTest *) clause)->nulltesttype == IS_NULL &&
		!((NullTest *) clause)->argisrow)
	{
		cond->keypos = key_of_var(def, (Node *) ((NullTest *) clause)->arg,
								  relid);
		cond->op = ICOND_NULL;
		return cond->keypos >= 0;
	}
	return false;
}

/*
 * Do the conditions make a lookup the index serves exactly: on each key in
 * order one equality (=, IN, IS NULL), then on the next at most one lower
 * and one upper bound, and nothing after?
 */
static bool
conds_form_prefix(const IdxIndexDef *def, List *conds)
{
	int			k;
	int			used = 0;

	for (k = 0; k < def->nkeys; k++)
	{
		int			eq = 0,
					lower = 0,
					upper = 0;
		ListCell   *lc;

		foreach(lc, conds)
		{
			AggCond    *cond = lfirst(lc);

			if (cond->keypos != k)
				continue;
			if (cond->op == ICOND_EQ || cond->op == ICOND_IN ||
				cond->op == ICOND_NULL)
				eq++;
			else if (cond->op == ICOND_GT || cond->op == ICOND_GE)
				lower++;
			else
				upper++;
		}
		used += eq + lower + upper;
		if (eq == 1 && lower + upper == 0)
			continue;
		if (eq > 0 || lower > 1 || upper > 1)
			return false;
		break;
	}
	return used == list_length(conds);
}

/*
 * list_sort comparator: conditions in key order.
 */
static int
cond_cmp(const ListCell *a, const ListCell *b)
{
	return ((AggCond *) lfirst(a))->keypos - ((AggCond *) lfirst(b))->keypos;
}

/*
 * Match every WHERE clause of "baserel" to "def" (*result: AggConds in
 * key order); false if one does not match exactly, or the index cannot
 * count facts.  *facts_exact says
 * whether counting the facts with the pushed-down filter is exact too
 * (the fallback of idx_index_agg_scan_begin): every clause pushed down
 * exactly, or only for being a parameter, whose value is checked then.
 */
static bool
match_all_clauses(const IdxIndexDef *def, RelOptInfo *baserel,
				  List **result, bool *facts_exact)
{
	IdxRelInfo *fpinfo = baserel->fdw_private;
	List	   *conds = NIL;
	ListCell   *lc;
	int			k;

	for (k = 0; k < def->nkeys; k++)
	{
		if (def->keys[k].multi)
			return false;		/* one entry per element */
	}
	*facts_exact = true;
	foreach(lc, baserel->baserestrictinfo)
	{
		RestrictInfo *rinfo = lfirst_node(RestrictInfo, lc);
		AggCond		cond;

		if (rinfo->pseudoconstant ||
			!match_agg_clause(def, rinfo->clause, baserel->relid, &cond))
			return false;

		/*
		 * The facts' filter may be a superset (a text range lets other BSON
		 * types through) or leave the clause out (a text range under a
		 * collation MongoDB cannot compare in); a Param's value is checked
		 * when the facts are counted.
		 */
		if (!list_member_ptr(fpinfo->remote_exact, rinfo) &&
			!(cond.value && IsA(cond.value, Param) &&
			  (cond.op == ICOND_EQ || cond.op == ICOND_IN ||
			   !is_text_key(def, cond.keypos))))
			*facts_exact = false;
		cond.clause = rinfo->clause;
		conds = lappend(conds, palloc_object(AggCond));
		*(AggCond *) llast(conds) = cond;
	}
	if (!conds_form_prefix(def, conds))
		return false;
	list_sort(conds, cond_cmp);
	*result = conds;
	return true;
}

/*
 * The one GROUP BY expression of the query, NULL for none; false for a
 * query this file cannot answer: grouping sets, HAVING, several grouping
 * expressions.
 */
static bool
query_grouping(PlannerInfo *root, GroupPathExtraData *extra, Node **group)
{
	Query	   *parse = root->parse;
	List	   *exprs;

	*group = NULL;
	if (parse->groupingSets != NIL || extra->havingQual != NULL ||
		extra->patype != PARTITIONWISE_AGGREGATE_NONE ||
		root->upper_targets[UPPERREL_GROUP_AGG] == NULL)
		return false;
	exprs = get_sortgrouplist_exprs(parse->groupClause, parse->targetList);
	if (list_length(exprs) > 1)
		return false;
	if (exprs != NIL)
		*group = linitial(exprs);
	return true;
}

/*
 * Is the grouping target count(*)s, constants and the GROUP BY expression
 * "group" (NULL: none; then also min() and max() of columns) only, with at
 * least one aggregate?
 */
static bool
target_is_counts(PlannerInfo *root, Node *group)
{
	PathTarget *target = root->upper_targets[UPPERREL_GROUP_AGG];
	bool		any = false;
	ListCell   *lc;

	foreach(lc, target->exprs)
	{
		Node	   *node = lfirst(lc);

		Var		   *arg;

		if (idx_agg_is_count_star(node) || (!group && idx_agg_min_max_of(node, &arg) >= 0))
			any = true;
		else if (!IsA(node, Const) && !(group && equal(node, group)))
			return false;
	}
	return any;
}

/*
 * The key of "def" that GROUP BY expression "group" is, if entries can
 * give its groups exactly: a plain column whose key values convert back
 * to the column's values (no date: infinities are stored as the ends of
 * BSON dates; no timestamp) and whose equality is byte equality; else -1.
 */
static int
group_key(const IdxIndexDef *def, Node *group, Index relid)
{
	int			k = key_of_var(def, group, relid);

	if (k < 0)
		return -1;
	switch (def->keys[k].keytype)
	{
		case INT2OID:
		case INT4OID:
		case INT8OID:
		case BOOLOID:
		case UUIDOID:
			return k;
		case TEXTOID:
		case VARCHAROID:
			return OidIsValid(exprCollation(group)) &&
				get_collation_isdeterministic(exprCollation(group)) ? k : -1;
		default:
			return -1;
	}
}

/*
 * The key of "def" whose min() and max() the target asks (-1: none), if
 * the entries give them exactly: one plain key column, integers or text
 * whose entries hold the aggregate's collation order (min/max of dates
 * could meet the infinities stored as the ends of BSON dates); -2 if they
 * cannot.
 */
static int
min_max_key(PlannerInfo *root, const IdxIndexDef *def, Index relid)
{
	ListCell   *lc;
	int			result = -1;

	foreach(lc, root->upper_targets[UPPERREL_GROUP_AGG]->exprs)
	{
		Var		   *arg;
		int			k;

		if (idx_agg_min_max_of(lfirst(lc), &arg) < 0)
			continue;
		k = key_of_var(def, (Node *) arg, relid);
		if (k < 0 || (result >= 0 && k != result))
			return -2;
		switch (def->keys[k].keytype)
		{
			case INT2OID:
			case INT4OID:
			case INT8OID:
				break;
			case TEXTOID:
			case VARCHAROID:
				if (!exact_key_strategy(&def->keys[k], BTLessStrategyNumber,
										((Aggref *) lfirst(lc))->inputcollid))
					return -2;
				break;
			default:
				return -2;
		}
		result = k;
	}
	return result;
}

/*
 * Does the grouping target hold a count(*)?
 */
static bool
target_has_count(PlannerInfo *root)
{
	ListCell   *lc;

	foreach(lc, root->upper_targets[UPPERREL_GROUP_AGG]->exprs)
	{
		if (idx_agg_is_count_star(lfirst(lc)))
			return true;
	}
	return false;
}

/*
 * Cost of the finds of min() and max() of key "mk": a round trip each,
 * reading one key where the lookup index gives the key's order after the
 * conditions (a single value on each key before it), else every entry.
 */
static Cost
min_max_cost(PlannerInfo *root, List *conds, int mk, double entries)
{
	bool		ordered = true;
	int			fixed = 0;
	int			finds[2] = {0, 0};
	ListCell   *lc;
	Var		   *arg;

	/* conds are in key order: single values on keys 0..mk-1, then mk's */
	foreach(lc, conds)
	{
		AggCond    *cond = lfirst(lc);

		if (cond->keypos > mk || (cond->keypos < mk && cond->op == ICOND_IN))
			ordered = false;
		else if (cond->keypos < mk)
			fixed++;
	}
	if (fixed < mk)
		ordered = false;

	foreach(lc, root->upper_targets[UPPERREL_GROUP_AGG]->exprs)
	{
		int			kind = idx_agg_min_max_of(lfirst(lc), &arg);

		if (kind >= 0)
			finds[kind == AGG_OUT_MAX] = 1;
	}
	return (finds[0] + finds[1]) *
		(ROUND_TRIP_COST + (ordered ? 1 : entries) * INDEX_ENTRY_COST * 0.5);
}

/*
 * Add the path of one index: a count, or a count per key of "group".
 */
static void
add_index_agg_path(PlannerInfo *root, RelOptInfo *input_rel,
				   RelOptInfo *grouped_rel, IdxIndexDef *def, Node *group)
{
	IdxRelInfo *fpinfo = input_rel->fdw_private;
	bool		facts_exact;
	List	   *conds = NIL;
	int			gk = group ? group_key(def, group, input_rel->relid) : -1;
	int			mk = group ? -1 : min_max_key(root, def, input_rel->relid);
	double		entries = input_rel->rows;
	double		rows = 1;
	Cost		cost;

	if ((group && gk < 0) || mk == -2 ||
		!match_all_clauses(def, input_rel, &conds, &facts_exact))
		return;

	/*
	 * A count needs a condition (without one the collection's own count is
	 * cheaper).  A table without a consistency mode of its own finds out at
	 * executor start whether its server writes "ordered"; then the facts
	 * are counted instead, which must be exact.
	 */
	if (!group && mk < 0 &&
		(conds == NIL ||
		 (!facts_exact &&
		  fpinfo->table->consistency == IDX_CONSISTENCY_DEFAULT)))
		return;
	if (group)
		rows = estimate_num_groups(root, list_make1(group), entries, NULL,
								   NULL);
	cost = rows * (DOCUMENT_TRANSFER_COST + cpu_tuple_cost);

	/*
	 * A count per key reads the documents of the entries the filter matches
	 * in a $group, as a pipeline over the facts reads every fact
	 * (agg_path.c), and returns the groups in batches of fetch_size as it
	 * does; a count without GROUP BY counts index keys.
	 */
	if (group)
		cost += ROUND_TRIP_COST + entries * ENTRY_GROUP_COST +
			Max(ceil(rows / fpinfo->table->fetch_size) - 1, 0) * ROUND_TRIP_COST;
	else if (mk < 0 || target_has_count(root))
		cost += ROUND_TRIP_COST + entries * INDEX_ENTRY_COST * 0.5;
	if (mk >= 0)
		cost += min_max_cost(root, conds, mk, entries);
	if (grouped_rel->fdw_private == NULL)
		grouped_rel->fdw_private = fpinfo;
	add_path(grouped_rel, (Path *)
			 idx_create_foreign_upper_path(root, grouped_rel,
										   root->upper_targets[UPPERREL_GROUP_AGG],
										   rows, cost, cost, NIL, NULL,
										   list_make5(makeInteger(IDX_UPPER_INDEX_AGG),
													  makeString(def->name),
													  conds,
													  makeInteger(input_rel->relid),
													  list_make3_int(facts_exact, gk, mk))));
}

/*
 * Add the ForeignPaths that push the grouping of "input_rel" down: a count
 * (or a count per key) from the index collection of each valid index that
 * matches every WHERE clause exactly.
 */
void
idx_add_index_agg_paths(PlannerInfo *root, RelOptInfo *input_rel,
						RelOptInfo *grouped_rel, GroupPathExtraData *extra)
{
	IdxRelInfo *fpinfo = input_rel->fdw_private;
	Node	   *group;
	ListCell   *lc;

	if (!idxtable_enable_aggregate_pushdown ||
		input_rel->reloptkind != RELOPT_BASEREL ||
		fpinfo->table->consistency == IDX_CONSISTENCY_ORDERED ||
		!query_grouping(root, extra, &group) ||
		!target_is_counts(root, group))
		return;

	foreach(lc, fpinfo->indexes)
		add_index_agg_path(root, input_rel, grouped_rel, lfirst(lc), group);
}

/*
 * The index definition of the table named "name" among "indexes", or NULL.
 */
IdxIndexDef *
idx_agg_index_named(List *indexes, const char *name)
{
	ListCell   *lc;

	foreach(lc, indexes)
	{
		if (strcmp(((IdxIndexDef *) lfirst(lc))->name, name) == 0)
			return lfirst(lc);
	}
	return NULL;
}

/*
 * GetForeignPlan of a path of idx_add_index_agg_paths(): the common
 * fdw_private prefix (the pushed-down clauses, for the fallback), then the
 * index, its conditions and what each output column is.
 */
ForeignScan *
idx_index_agg_plan(PlannerInfo *root, RelOptInfo *rel, ForeignPath *best_path,
				   List *tlist, List *scan_clauses, Plan *outer_plan)
{
	RelOptInfo *baserel = find_base_rel(root,
										intVal(lfourth(best_path->fdw_private)));
	IdxRelInfo *fpinfo = baserel->fdw_private;
	IdxIndexDef *def = idx_agg_index_named(fpinfo->indexes,
								   strVal(lsecond(best_path->fdw_private)));
	List	   *remote_conds = NIL;
	List	   *fdw_exprs;
	List	   *fdw_private;
	List	   *conds = NIL;
	List	   *outputs = NIL;
	List	   *scan_tlist;
	List	   *context;
	StringInfoData text;
	ListCell   *lc;

	Assert(def != NULL);
	foreach(lc, baserel->baserestrictinfo)
		remote_conds = lappend(remote_conds,
							   lfirst_node(RestrictInfo, lc)->clause);
	fdw_exprs = idx_collect_params(remote_conds);
	fdw_private = list_make5(makeInteger(IDX_SCAN_INDEX_AGG), remote_conds,
							 makeInteger(baserel->relid), NIL,
							 makeInteger(-1));
	fdw_private = lappend(fdw_private, makeInteger(list_length(fdw_exprs)));
	fdw_private = lappend(fdw_private, NIL);	/* IdxPrivSort */
	fdw_private = lappend(fdw_private, makeInteger(-1));	/* IdxPrivLimit */
	fdw_private = lappend(fdw_private, makeInteger(0));	/* IdxPrivOffset */

	foreach(lc, (List *) lthird(best_path->fdw_private))
	{
		AggCond    *cond = lfirst(lc);
		int			exprpos = -1;

		if (cond->value)
		{
			fdw_exprs = lappend(fdw_exprs, cond->value);
			exprpos = list_length(fdw_exprs) - 1;
		}
		conds = lappend(conds, list_make3_int(cond->keypos, cond->op, exprpos));
	}

	context = deparse_context_for(get_rel_name(def->relid), def->relid);
	initStringInfo(&text);
	foreach(lc, (List *) lthird(best_path->fdw_private))
	{
		Node	   *clause = copyObject((Node *) ((AggCond *) lfirst(lc))->clause);

		/* the context names the table as range table entry 1 */
		ChangeVarNodes(clause, baserel->relid, 1, 0);
		appendStringInfo(&text, "%s%s", text.len > 0 ? " AND " : "",
						 deparse_expression(clause, context, false, false));
	}

	scan_tlist = add_to_flat_tlist(NIL,
								   root->upper_targets[UPPERREL_GROUP_AGG]->exprs);
	foreach(lc, scan_tlist)
	{
		Node	   *expr = (Node *) lfirst_node(TargetEntry, lc)->expr;

		Var		   *arg;
		int			minmax = idx_agg_min_max_of(expr, &arg);

		outputs = lappend_int(outputs,
							  idx_agg_is_count_star(expr) ? AGG_OUT_COUNT :
							  IsA(expr, Const) ? AGG_OUT_CONST :
							  minmax >= 0 ? minmax : AGG_OUT_KEY);
	}

	fdw_private = lappend(fdw_private, makeString(def->name));
	fdw_private = lappend(fdw_private, conds);
	fdw_private = lappend(fdw_private, makeString(text.data));
	fdw_private = lappend(fdw_private, outputs);
	fdw_private = lappend(fdw_private,
						  makeInteger(linitial_int(list_nth(best_path->fdw_private, 4))));
	fdw_private = lappend(fdw_private,
						  makeInteger(lsecond_int(list_nth(best_path->fdw_private, 4))));
	fdw_private = lappend(fdw_private,
						  makeInteger(lthird_int(list_nth(best_path->fdw_private, 4))));

	return make_foreignscan(tlist, NIL, 0, fdw_exprs, fdw_private,
							scan_tlist, NIL, outer_plan);
}
