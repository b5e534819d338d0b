/*-------------------------------------------------------------------------
 *
 * index_agg.c
 *		  count(*) answered from an index collection (UPPERREL_GROUP_AGG;
 *		  scan kind IDX_SCAN_INDEX_AGG).
 *
 * "SELECT count(*) FROM t WHERE <conditions on an index's keys>" becomes a
 * "count" command on the index collection, whose filter the collection's
 * lookup index serves by itself: mongod counts index keys (COUNT_SCAN) and
 * examines no document.  That count is the number of matching facts only
 * where every fact has exactly one entry the filter can match and the
 * filter is every condition of the query, exactly:
 *
 *	- no multi-valued key (a fact has one entry per element);
 *	- every WHERE clause is an equality, IN list, IS NULL or range on a
 *	  plain key column, pushed down exactly into the fact filter too (the
 *	  fallback below), forming an equality prefix and at most one range;
 *	- key types whose entries hold the value itself: integers, text (ranges
 *	  only under "C"), boolean (equality), date, uuid; never timestamps,
 *	  whose keys drop sub-millisecond digits;
 *	- entries that are trusted as covering reads trust them: not in
 *	  "ordered" mode (orphaned entries and claims), and with
 *	  idxtable.index_consistency = current after the same wait for the
 *	  applier as a routed scan (sync_wait.h).  A unique index's claim and a
 *	  conflict's entry of the non-unique form are each the one entry of
 *	  their fact.
 *
 * A table without a consistency mode of its own is planned this way; if
 * the executor finds its server without transactions (writes "ordered"),
 * or the index no longer valid, it counts the facts with the pushed-down
 * filter instead, which is exact too.  Inside a MongoDB transaction the
 * count runs as an aggregate ($match, $count), since MongoDB refuses the
 * count command in transactions.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/stratnum.h"
#include "catalog/pg_aggregate.h"
#include "catalog/pg_type.h"
#include "executor/executor.h"
#include "nodes/makefuncs.h"
#include "nodes/nodeFuncs.h"
#include "optimizer/optimizer.h"
#include "optimizer/pathnode.h"
#include "optimizer/planmain.h"
#include "optimizer/tlist.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "rewrite/rewriteManip.h"
#include "utils/array.h"
#include "utils/lsyscache.h"
#include "utils/pg_locale.h"
#include "utils/plancache.h"
#include "utils/selfuncs.h"
#include "utils/ruleutils.h"

#include "connection.h"
#include "handle.h"
#include "idxtable_fdw.h"
#include "index_catalog.h"
#include "index_collate.h"
#include "index_entry.h"
#include "index_path.h"
#include "planner.h"
#include "remote_error.h"
#include "sync_wait.h"
#include "upper.h"
#include "xact.h"

/*
 * Elements of fdw_private after IdxPrivIndexFirst, for IDX_SCAN_INDEX_AGG.
 */
enum IdxIndexAggPrivateIndex
{
	/* the index name (String) */
	IdxAggPrivIndexName = IdxPrivIndexFirst,
	/* conditions: List of integer Lists (key position, IdxCondOp, position
	 * of the value in fdw_exprs or -1) */
	IdxAggPrivConds,
	/* the conditions as text, for EXPLAIN (String) */
	IdxAggPrivCondText,
	/* per column of fdw_scan_tlist: 1 the count, 0 a constant (Integers) */
	IdxAggPrivOutputs,
	/* 1 if counting the facts with the pushed-down filter is exact as long
	 * as the parameter values are exact in BSON (Integer) */
	IdxAggPrivFactsExact,
	/* the key position rows are counted per (GROUP BY), or -1 (Integer) */
	IdxAggPrivGroupKey
};

/* What a column of fdw_scan_tlist holds (IdxAggPrivOutputs) */
#define AGG_OUT_CONST	0
#define AGG_OUT_COUNT	1
#define AGG_OUT_KEY		2

/* A condition on one key, found while matching the WHERE clauses */
typedef struct AggCond
{
	int			keypos;
	IdxCondOp	op;
	Expr	   *value;			/* Const or Param; NULL for IS NULL */
	Expr	   *clause;			/* the WHERE clause it comes from */
} AggCond;

/*
 * Execution state of a count from an index collection.
 */
typedef struct IdxIndexAggScan
{
	char	   *name;			/* the index's */
	IdxIndexDef *def;			/* NULL: the facts are counted */
	List	   *conds;
	char	   *cond_text;
	List	   *outputs;
	List	   *value_exprs;	/* fdw_exprs */
	List	   *value_states;
	Datum	   *values;
	bool	   *nulls;
	bool		facts_exact;	/* the plan's IdxAggPrivFactsExact */
	int			group_key;		/* the plan's IdxAggPrivGroupKey */
	IdxColumnConv keyconv;		/* the group key's column */
	bool		started;		/* GROUP BY: the aggregate has been sent */
	bool		done;			/* the row has been returned */
	bool		ran;			/* a command was sent */
	bool		in_txn;			/* the count ran in a MongoDB transaction */
	bool		sync_waited;
	double		sync_wait_ms;
	int64		count;
	char	   *last_filter;	/* the count's filter, as JSON */
} IdxIndexAggScan;

/*
 * Is "agg" count(*) without DISTINCT, ORDER BY or FILTER?
 */
static bool
is_count_star(Node *node)
{
	Aggref	   *agg = (Aggref *) node;

	return IsA(node, Aggref) && agg->aggfnoid == F_COUNT_ &&
		agg->aggstar && agg->aggfilter == NULL && agg->aggdistinct == NIL &&
		agg->aggorder == NIL && agg->agglevelsup == 0 &&
		agg->aggsplit == AGGSPLIT_SIMPLE;
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
	List	   *interps;
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
	interps = get_op_btree_interpretation(opno);
	if (interps == NIL)
		return false;
	strategy = ((OpBtreeInterpretation *) linitial(interps))->strategy;
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
	List	   *interps;

	cond->keypos = key_of_var(def, linitial(saop->args), relid);
	if (!saop->useOr || cond->keypos < 0 || !is_value(array) ||
		!idx_compatible_types(def->keys[cond->keypos].keytype,
							  get_element_type(exprType(array))))
		return false;
	interps = get_op_btree_interpretation(saop->opno);
	if (interps == NIL ||
		((OpBtreeInterpretation *) linitial(interps))->strategy !=
		BTEqualStrategyNumber ||
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
 * "group" (NULL: none) only, with at least one count?
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

		if (is_count_star(node))
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
	double		entries = input_rel->rows;
	double		rows = 1;
	Cost		cost;

	if ((group && gk < 0) ||
		!match_all_clauses(def, input_rel, &conds, &facts_exact))
		return;

	/*
	 * A count needs a condition (without one the collection's own count is
	 * cheaper).  A table without a consistency mode of its own finds out at
	 * executor start whether its server writes "ordered"; then the facts
	 * are counted instead, which must be exact.
	 */
	if (!group &&
		(conds == NIL ||
		 (!facts_exact &&
		  fpinfo->table->consistency == IDX_CONSISTENCY_DEFAULT)))
		return;
	if (group)
		rows = estimate_num_groups(root, list_make1(group), entries, NULL,
								   NULL);
	/* one round trip; the server reads keys only */
	cost = ROUND_TRIP_COST + entries * INDEX_ENTRY_COST * 0.5 +
		rows * (DOCUMENT_TRANSFER_COST + cpu_tuple_cost);
	if (grouped_rel->fdw_private == NULL)
		grouped_rel->fdw_private = fpinfo;
	add_path(grouped_rel, (Path *)
			 create_foreign_upper_path(root, grouped_rel,
									   root->upper_targets[UPPERREL_GROUP_AGG],
									   rows, cost, cost, NIL, NULL,
									   list_make5(makeInteger(IDX_UPPER_INDEX_AGG),
												  makeString(def->name),
												  conds,
												  makeInteger(input_rel->relid),
												  list_make2_int(facts_exact, gk))));
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
static IdxIndexDef *
index_named(List *indexes, const char *name)
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
	IdxIndexDef *def = index_named(fpinfo->indexes,
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

		outputs = lappend_int(outputs,
							  is_count_star(expr) ? AGG_OUT_COUNT :
							  IsA(expr, Const) ? AGG_OUT_CONST : AGG_OUT_KEY);
	}

	fdw_private = lappend(fdw_private, makeString(def->name));
	fdw_private = lappend(fdw_private, conds);
	fdw_private = lappend(fdw_private, makeString(text.data));
	fdw_private = lappend(fdw_private, outputs);
	fdw_private = lappend(fdw_private,
						  makeInteger(linitial_int(list_nth(best_path->fdw_private, 4))));
	fdw_private = lappend(fdw_private,
						  makeInteger(lsecond_int(list_nth(best_path->fdw_private, 4))));

	return make_foreignscan(tlist, NIL, 0, fdw_exprs, fdw_private,
							scan_tlist, NIL, outer_plan);
}

/*
 * GROUP BY: the converter of the key column's values, and the index (only
 * its entries can give the groups).
 */
static void
init_group_key(ForeignScan *plan, IdxScanState *state, IdxIndexAggScan *ia)
{
	ListCell   *lc,
			   *lc2;

	if (ia->def == NULL)
	{
		ResetPlanCache();
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("cannot count the rows of foreign table \"%s\" per key of index table \"%s\"",
						state->info->relname, ia->name),
				 errdetail("The index table cannot be read now: it is no longer valid, or the table's writes are in consistency mode \"ordered\"."),
				 errhint("Run the query again, or with idxtable.enable_aggregate_pushdown off.")));
	}
	forboth(lc, ia->outputs, lc2, plan->fdw_scan_tlist)
	{
		Var		   *var = (Var *) lfirst_node(TargetEntry, lc2)->expr;

		if (lfirst_int(lc) == AGG_OUT_KEY)
			idx_conv_init(&ia->keyconv,
						  get_attname(state->info->relid, var->varattno, false),
						  var->vartype, var->vartypmod);
	}
}

/*
 * Executor start: the index (if it is still valid, and the table's writes
 * keep its entries exact), the values, and with
 * idxtable.index_consistency = current the wait for the applier.
 */
void
idx_index_agg_scan_begin(ForeignScanState *node, IdxScanState *state, int eflags)
{
	ForeignScan *plan = (ForeignScan *) node->ss.ps.plan;
	IdxIndexAggScan *ia = palloc0(sizeof(IdxIndexAggScan));
	int			nexprs = list_length(plan->fdw_exprs);
	char	   *name = strVal(list_nth(plan->fdw_private, IdxAggPrivIndexName));

	ia->conds = list_nth(plan->fdw_private, IdxAggPrivConds);
	ia->cond_text = strVal(list_nth(plan->fdw_private, IdxAggPrivCondText));
	ia->outputs = list_nth(plan->fdw_private, IdxAggPrivOutputs);
	ia->facts_exact = intVal(list_nth(plan->fdw_private, IdxAggPrivFactsExact));
	ia->group_key = intVal(list_nth(plan->fdw_private, IdxAggPrivGroupKey));
	ia->value_exprs = plan->fdw_exprs;
	ia->value_states = ExecInitExprList(plan->fdw_exprs, (PlanState *) node);
	ia->values = palloc0(sizeof(Datum) * Max(nexprs, 1));
	ia->nulls = palloc0(sizeof(bool) * Max(nexprs, 1));
	ia->name = name;
	state->index_agg = ia;
	if (eflags & EXEC_FLAG_EXPLAIN_ONLY)
		return;					/* EXPLAIN talks to no server */

	/* an index that is gone or not the table's: count the facts instead */
	ia->def = index_named(idx_valid_indexes(state->info->relid,
											idx_scan_user(node)), name);
	if (ia->def != NULL &&
		idx_xact_mode(state->info, state->client,
					  state->server->servername) == IDX_CONSISTENCY_ORDERED)
		ia->def = NULL;			/* entries may be orphans */
	if (ia->def != NULL)
		ia->sync_waited = idx_sync_wait_for_read(ia->def, state->client,
												 state->server->servername,
												 &ia->sync_wait_ms);
	if (ia->group_key >= 0)
		init_group_key(plan, state, ia);
}

/*
 * Append the values of an IN list as key values; false if it holds none
 * (NULL elements never match).
 */
static bool
append_in_list(bson_t *doc, const IdxIndexKey *key, Datum arraydatum)
{
	ArrayType  *arr = DatumGetArrayTypeP(arraydatum);
	Oid			elemtype = ARR_ELEMTYPE(arr);
	int16		elmlen;
	bool		elmbyval;
	char		elmalign;
	Datum	   *elems;
	bool	   *nulls;
	int			nelems,
				i;
	uint32		n = 0;
	bson_t		list;

	get_typlenbyvalalign(elemtype, &elmlen, &elmbyval, &elmalign);
	deconstruct_array(arr, elemtype, elmlen, elmbyval, elmalign,
					  &elems, &nulls, &nelems);
	idx_check_append(BSON_APPEND_ARRAY_BEGIN(doc, "$in", &list));
	for (i = 0; i < nelems; i++)
	{
		char		pos[16];

		if (nulls[i])
			continue;
		snprintf(pos, sizeof(pos), "%u", n++);
		idx_append_key_value(&list, pos, idx_key_lookup_datum(key, elems[i]),
							 OidIsValid(key->sortcoll) ? TEXTOID : elemtype,
							 false);
	}
	idx_check_append(bson_append_array_end(doc, &list));
	return n > 0;
}

/*
 * Append one condition's operator and value to the key's sub-document.
 * Returns false when it can match nothing (a NULL value, an empty list).
 */
static bool
append_cond(IdxIndexAggScan *ia, bson_t *child, const IdxIndexKey *key,
			IdxCondOp op, int exprpos)
{
	static const char *const ops[] = {"$eq", "$in", "$eq", "$lt", "$lte", "$gt", "$gte"};

	if (op == ICOND_NULL)
	{
		idx_check_append(BSON_APPEND_NULL(child, "$eq"));
		return true;
	}
	if (ia->nulls[exprpos])
		return false;
	if (op == ICOND_IN)
		return append_in_list(child, key, ia->values[exprpos]);
	idx_append_key_value(child, ops[op],
						 idx_key_lookup_datum(key, ia->values[exprpos]),
						 OidIsValid(key->sortcoll) ? TEXTOID :
						 exprType(list_nth(ia->value_exprs, exprpos)), false);
	return true;
}

/*
 * Build the count's filter {"_id.k0": {$eq: v}, "_id.k1": {$gte: a, $lt:
 * b}} from the conditions and this execution's values, in key order, as
 * the lookup of a routed scan does.  Returns false, leaving "filter"
 * unfinished, when the conditions can match nothing.
 */
static bool
build_count_filter(IdxIndexAggScan *ia, bson_t *filter)
{
	int			k;
	int			done = 0;

	for (k = 0; done < list_length(ia->conds); k++)
	{
		bson_t		child;
		bool		any = false;
		ListCell   *lc;

		foreach(lc, ia->conds)
		{
			List	   *cond = lfirst(lc);

			if (linitial_int(cond) != k)
				continue;
			if (!any)
				idx_check_append(BSON_APPEND_DOCUMENT_BEGIN(filter,
															psprintf("_id.%s", idx_key_field(k)),
															&child));
			any = true;
			done++;
			if (!append_cond(ia, &child, &ia->def->keys[k], lsecond_int(cond),
							 lthird_int(cond)))
				return false;
		}
		if (any)
			idx_check_append(bson_append_document_end(filter, &child));
	}
	return true;
}

/*
 * Run "command" on "database" as a read (the scan's read preference, in
 * the session of an open MongoDB transaction); the reply is a heap copy
 * owned by the current memory context through *handle.
 */
static bson_t *
run_read(IdxScanState *state, const char *database, const bson_t *command,
		 const char *what, IdxHandle **handle)
{
	bson_t		opts = BSON_INITIALIZER;
	bson_t		reply;
	bson_t	   *owned;
	bson_error_t error;
	bool		ok;
	uint64	   *previous;

	idx_xact_append_session(state->client, &opts);
	previous = idx_count_round_trips(&state->round_trips);
	ok = mongoc_client_read_command_with_opts(state->client, database,
											  command, state->read_prefs,
											  &opts, &reply, &error);
	idx_count_round_trips(previous);
	bson_destroy(&opts);
	if (!ok)
	{
		owned = idx_own_reply(&reply);
		idx_merge_reply_error(&error, owned);
		idx_report_error(&error, state->server->servername, what);
	}
	owned = bson_copy(&reply);
	bson_destroy(&reply);
	*handle = idx_own_bson(owned);
	return owned;
}

/*
 * The number a count reply holds: "n" of a count command, or "n" of the
 * first document of an aggregate's first batch (none: 0).
 */
static int64
reply_count(const bson_t *reply, bool aggregate, const char *what,
			const char *servername)
{
	bson_iter_t iter;

	if (aggregate)
	{
		bson_iter_t batch;

		if (!bson_iter_init_find(&iter, reply, "cursor") ||
			!BSON_ITER_HOLDS_DOCUMENT(&iter) ||
			!bson_iter_recurse(&iter, &batch) ||
			!bson_iter_find(&batch, "firstBatch") ||
			!BSON_ITER_HOLDS_ARRAY(&batch) ||
			!bson_iter_recurse(&batch, &iter))
			goto bad;
		if (!bson_iter_next(&iter))
			return 0;			/* $count of nothing gives no document */
		if (!BSON_ITER_HOLDS_DOCUMENT(&iter) ||
			!bson_iter_recurse(&iter, &batch) ||
			!bson_iter_find(&batch, "n"))
			goto bad;
		iter = batch;
	}
	else if (!bson_iter_init_find(&iter, reply, "n"))
		goto bad;
	if ((BSON_ITER_HOLDS_INT32(&iter) || BSON_ITER_HOLDS_INT64(&iter)) &&
		bson_iter_as_int64(&iter) >= 0)
		return bson_iter_as_int64(&iter);
bad:
	ereport(ERROR,
			(errcode(ERRCODE_FDW_INVALID_DATA_TYPE),
			 errmsg("MongoDB server \"%s\" sent a reply without a count while %s",
					servername, what)));
	return 0;					/* keep compiler quiet */
}

/*
 * Count the documents of "collection" matching "filter": a count command,
 * or inside a MongoDB transaction (which refuses count) an aggregate with
 * $match and $count.
 */
static int64
count_documents(IdxScanState *state, const char *database,
				const char *collection, const bson_t *filter)
{
	bson_t	   *command = bson_new();
	IdxHandle  *owned = idx_own_bson(command);
	bool		aggregate = idx_xact_client_busy(state->client);
	char	   *what = psprintf("counting collection \"%s\" of database \"%s\"",
								collection, database);
	bson_t	   *reply;
	IdxHandle  *reply_owned;
	int64		n;

	state->index_agg->ran = true;
	if (aggregate)
	{
		bson_t		pipeline,
					stage,
					child;

		idx_check_append(BSON_APPEND_UTF8(command, "aggregate", collection));
		idx_check_append(BSON_APPEND_ARRAY_BEGIN(command, "pipeline", &pipeline));
		idx_check_append(BSON_APPEND_DOCUMENT_BEGIN(&pipeline, "0", &stage));
		idx_check_append(BSON_APPEND_DOCUMENT(&stage, "$match", filter));
		idx_check_append(bson_append_document_end(&pipeline, &stage));
		idx_check_append(BSON_APPEND_DOCUMENT_BEGIN(&pipeline, "1", &stage));
		idx_check_append(BSON_APPEND_UTF8(&stage, "$count", "n"));
		idx_check_append(bson_append_document_end(&pipeline, &stage));
		idx_check_append(bson_append_array_end(command, &pipeline));
		idx_check_append(BSON_APPEND_DOCUMENT_BEGIN(command, "cursor", &child));
		idx_check_append(bson_append_document_end(command, &child));
	}
	else
	{
		idx_check_append(BSON_APPEND_UTF8(command, "count", collection));
		idx_check_append(BSON_APPEND_DOCUMENT(command, "query", filter));
	}
	reply = run_read(state, database, command, what, &reply_owned);
	n = reply_count(reply, aggregate, what, state->server->servername);
	idx_release(reply_owned);
	idx_release(owned);
	return n;
}

/*
 * Is a parameter value (an array: each element) exact in BSON?
 */
static bool
param_is_exact(Oid type, Datum value)
{
	Oid			elemtype = get_element_type(type);
	ArrayType  *arr;
	Datum	   *elems;
	bool	   *nulls;
	int			nelems,
				i;
	int16		elmlen;
	bool		elmbyval;
	char		elmalign;

	if (!OidIsValid(elemtype))
		return idx_datum_is_exact_in_bson(value, type);
	arr = DatumGetArrayTypeP(value);
	get_typlenbyvalalign(elemtype, &elmlen, &elmbyval, &elmalign);
	deconstruct_array(arr, elemtype, elmlen, elmbyval, elmalign,
					  &elems, &nulls, &nelems);
	for (i = 0; i < nelems; i++)
	{
		if (!nulls[i] && !idx_datum_is_exact_in_bson(elems[i], elemtype))
			return false;
	}
	return true;
}

/*
 * Before counting the facts instead of the entries: is that exact?  Only
 * if the plan says so and this execution's parameter values are exact in
 * BSON (an inexact one makes the pushed-down filter match everything).
 * Otherwise the query fails, and cached plans are dropped.
 */
static void
check_facts_countable(IdxScanState *state, IdxIndexAggScan *ia)
{
	bool		exact = ia->facts_exact;
	ListCell   *lc;
	int			i = 0;

	foreach(lc, state->params.params)
	{
		if (!state->params.nulls[i] &&
			!param_is_exact(exprType(lfirst(lc)), state->params.values[i]))
			exact = false;
		i++;
	}
	if (exact)
		return;
	ResetPlanCache();
	ereport(ERROR,
			(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
			 errmsg("cannot count the rows of foreign table \"%s\" through index table \"%s\"",
					state->info->relname, ia->name),
			 errdetail("The index table cannot be read now, and the conditions pushed down to the facts do not select the rows exactly."),
			 errhint("Run the query again, or with idxtable.enable_aggregate_pushdown off.")));
}

/*
 * Run this execution's count: on the index collection, or (no usable
 * index) on the facts with the pushed-down filter.
 */
static int64
run_count(ForeignScanState *node, IdxScanState *state, IdxIndexAggScan *ia)
{
	bson_t	   *filter = bson_new();
	IdxHandle  *owned = idx_own_bson(filter);
	int64		n = 0;

	idx_eval_exprs(node, ia->value_states, ia->values, ia->nulls);
	ia->in_txn = idx_xact_client_busy(state->client);
	if (ia->def == NULL)
	{
		idx_eval_exprs(node, state->param_states, state->params.values,
					   state->params.nulls);
		check_facts_countable(state, ia);
		idx_build_filter(filter, state->remote_conds, state->relid,
						 state->info, &state->params);
		ia->last_filter = idx_bson_as_json(filter);
		n = count_documents(state, state->info->database,
							state->info->collection, filter);
	}
	else if (build_count_filter(ia, filter))
	{
		ia->last_filter = idx_bson_as_json(filter);
		n = count_documents(state, ia->def->database, ia->def->collection,
							filter);
	}
	else
		ia->last_filter = NULL; /* matches nothing: no round trip */
	idx_release(owned);
	return n;
}

/*
 * GROUP BY: send the aggregate {$match: <filter>}, {$group: {_id: <key>,
 * n: {$sum: 1}[, o: {$first: <original text>}]}} on the index collection
 * (a sort-key key groups by its stored form, byte equality as the
 * column's, and gives back the text it ends with).  False when the
 * conditions can match nothing.
 */
static bool
open_group_cursor(ForeignScanState *node, IdxScanState *state,
				  IdxIndexAggScan *ia)
{
	const IdxIndexKey *key = &ia->def->keys[ia->group_key];
	bson_t	   *filter = bson_new();
	IdxHandle  *owned_filter = idx_own_bson(filter);
	bson_t	   *pipeline = bson_new();
	IdxHandle  *owned_pipeline = idx_own_bson(pipeline);
	bson_t	   *opts = bson_new();
	IdxHandle  *owned_opts = idx_own_bson(opts);
	bson_t		stage,
				child,
				group;

	idx_eval_exprs(node, ia->value_states, ia->values, ia->nulls);
	if (!build_count_filter(ia, filter))
		return false;
	ia->last_filter = idx_bson_as_json(filter);
	idx_check_append(BSON_APPEND_DOCUMENT_BEGIN(pipeline, "0", &stage));
	idx_check_append(BSON_APPEND_DOCUMENT(&stage, "$match", filter));
	idx_check_append(bson_append_document_end(pipeline, &stage));
	idx_check_append(BSON_APPEND_DOCUMENT_BEGIN(pipeline, "1", &stage));
	idx_check_append(BSON_APPEND_DOCUMENT_BEGIN(&stage, "$group", &group));
	idx_check_append(BSON_APPEND_UTF8(&group, "_id",
									  psprintf("$_id.%s", idx_key_field(ia->group_key))));
	idx_check_append(BSON_APPEND_DOCUMENT_BEGIN(&group, "n", &child));
	idx_check_append(BSON_APPEND_INT32(&child, "$sum", 1));
	idx_check_append(bson_append_document_end(&group, &child));
	if (OidIsValid(key->sortcoll))
	{
		idx_check_append(BSON_APPEND_DOCUMENT_BEGIN(&group, "o", &child));
		idx_check_append(BSON_APPEND_UTF8(&child, "$first",
										  psprintf("$%s", idx_key_original_path(ia->group_key))));
		idx_check_append(bson_append_document_end(&group, &child));
	}
	idx_check_append(bson_append_document_end(&stage, &group));
	idx_check_append(bson_append_document_end(pipeline, &stage));
	idx_check_append(BSON_APPEND_INT32(opts, "batchSize",
									   state->info->fetch_size));

	ia->in_txn = idx_xact_client_busy(state->client);
	idx_xact_append_session(state->client, opts);
	state->collection = mongoc_client_get_collection(state->client,
													 ia->def->database,
													 ia->def->collection);
	if (!state->pinned)
		idx_client_pin(state->client, 1);
	state->pinned = true;
	ia->ran = true;
	state->cursor = mongoc_collection_aggregate(state->collection,
												MONGOC_QUERY_NONE, pipeline,
												opts, state->read_prefs);
	idx_release(owned_opts);
	idx_release(owned_pipeline);
	idx_release(owned_filter);
	return true;
}

/*
 * The count of a group document ("n", a non-negative integer).
 */
static int64
group_count(const bson_t *doc, IdxScanState *state, IdxIndexAggScan *ia)
{
	bson_iter_t iter;

	if (bson_iter_init_find(&iter, doc, "n") &&
		(BSON_ITER_HOLDS_INT32(&iter) || BSON_ITER_HOLDS_INT64(&iter)) &&
		bson_iter_as_int64(&iter) > 0)
		return bson_iter_as_int64(&iter);
	ereport(ERROR,
			(errcode(ERRCODE_FDW_INVALID_DATA_TYPE),
			 errmsg("MongoDB server \"%s\" sent a group without a count while reading index collection \"%s\"",
					state->server->servername, ia->def->collection)));
	return 0;					/* keep compiler quiet */
}

/*
 * Fill the slot's columns: the count, the group key of "doc" (NULL: no
 * GROUP BY) or a constant.
 */
static void
fill_row(ForeignScanState *node, IdxScanState *state, IdxIndexAggScan *ia,
		 const bson_t *doc)
{
	TupleTableSlot *slot = node->ss.ss_ScanTupleSlot;
	ForeignScan *plan = (ForeignScan *) node->ss.ps.plan;
	ListCell   *lc,
			   *lc2;
	int			i = 0;

	forboth(lc, ia->outputs, lc2, plan->fdw_scan_tlist)
	{
		Expr	   *expr = lfirst_node(TargetEntry, lc2)->expr;

		slot->tts_isnull[i] = false;
		if (lfirst_int(lc) == AGG_OUT_COUNT)
			slot->tts_values[i] = Int64GetDatum(doc ? group_count(doc, state, ia)
												: ia->count);
		else if (lfirst_int(lc) == AGG_OUT_KEY)
		{
			IdxConvSource src = {ia->def->collection, NULL, true};
			bson_iter_t iter;
			bool		sortkey = OidIsValid(ia->def->keys[ia->group_key].sortcoll);

			/* a NULL key groups NULLs: no original text then */
			if (!bson_iter_init_find(&iter, doc, "_id") ||
				BSON_ITER_HOLDS_NULL(&iter) ||
				(sortkey && !bson_iter_init_find(&iter, doc, "o")))
				slot->tts_isnull[i] = true;
			else
				slot->tts_values[i] = idx_bson_to_datum(&iter, &ia->keyconv,
														&src,
														&slot->tts_isnull[i]);
		}
		else
		{
			slot->tts_values[i] = ((Const *) expr)->constvalue;
			slot->tts_isnull[i] = ((Const *) expr)->constisnull;
		}
		i++;
	}
	ExecStoreVirtualTuple(slot);
}

/*
 * The next row: the one row of counts, or the next group.
 */
TupleTableSlot *
idx_index_agg_scan_next(ForeignScanState *node, IdxScanState *state)
{
	IdxIndexAggScan *ia = state->index_agg;
	TupleTableSlot *slot = node->ss.ss_ScanTupleSlot;
	MemoryContext oldcxt;
	const bson_t *doc;

	ExecClearTuple(slot);
	if (ia->done)
		return slot;
	oldcxt = MemoryContextSwitchTo(state->scan_cxt);
	if (ia->group_key < 0)
	{
		ia->count = run_count(node, state, ia);
		ia->done = true;
		MemoryContextSwitchTo(oldcxt);
		fill_row(node, state, ia, NULL);
		return slot;
	}
	if (!ia->started)
	{
		ia->started = true;
		if (!open_group_cursor(node, state, ia))
			ia->done = true;
	}
	MemoryContextSwitchTo(oldcxt);
	if (ia->done)
		return slot;
	doc = idx_scan_next_doc(state, &state->cursor, ia->def->collection,
							ia->def->database);
	if (doc == NULL)
	{
		ia->done = true;
		return slot;
	}
	ia->count++;				/* groups, for EXPLAIN ANALYZE */
	oldcxt = MemoryContextSwitchTo(node->ss.ps.ps_ExprContext->ecxt_per_tuple_memory);
	fill_row(node, state, ia, doc);
	MemoryContextSwitchTo(oldcxt);
	return slot;
}

/*
 * Restart: the next row comes from a new command.
 */
void
idx_index_agg_scan_rescan(IdxScanState *state)
{
	state->index_agg->done = false;
	state->index_agg->started = false;
	state->index_agg->count = 0;
}

/*
 * Release what the scan holds: nothing outlives run_count().
 */
void
idx_index_agg_scan_end(IdxScanState *state)
{
}

/*
 * EXPLAIN: the index and its conditions; VERBOSE the count's filter once
 * run; ANALYZE the wait, the count and the round trips.
 */
void
idx_index_agg_scan_explain(IdxScanState *state, ExplainState *es)
{
	IdxIndexAggScan *ia = state->index_agg;

	ExplainPropertyText("Index Table",
						psprintf(ia->group_key >= 0 ? "%s (count per key)" :
								 "%s (count)", ia->name), es);
	if (ia->cond_text[0] != '\0')
		ExplainPropertyText("Index Cond", ia->cond_text, es);
	if (!es->analyze)
		return;
	if (ia->done && ia->def == NULL)
		ExplainPropertyText("Counted", "facts (the index cannot count them)",
							es);
	if (es->verbose && ia->last_filter)
		ExplainPropertyText("MongoDB Count Filter", ia->last_filter, es);
	if (ia->group_key >= 0)
		ExplainPropertyInteger("Groups", NULL, ia->count, es);
	if (ia->sync_waited && es->timing)
		ExplainPropertyFloat("Sync Wait", "ms", ia->sync_wait_ms, 3, es);
	if (ia->ran)
		ExplainPropertyText("Command",
							ia->group_key >= 0 ? "aggregate ($group)" :
							ia->in_txn ? "aggregate ($count)" : "count", es);
	ExplainPropertyUInteger("Round Trips", NULL, state->round_trips, es);
}
