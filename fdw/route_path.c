/*-------------------------------------------------------------------------
 *
 * route_path.c
 *		  Planner routing of secondary-key predicates through index tables.
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/route_path.c
 *
 * For every valid index table of a foreign table, the restriction clauses
 * (and, for parameterized paths, the join clauses) are matched against the
 * index's key components in order: equality (=, IN / = ANY, IS NULL) on a
 * prefix of the key, then at most one range on the next component, or
 * "key IS NULL OR <range>" there (the scan reads the NULL entries and the
 * range's apart).
 * lower(col) / upper(col) keys match the same expression; a multi-valued
 * key (an array column) matches "value = ANY(col)" and "col @> ARRAY[...]".
 *
 * Every matched clause also stays where it was: pushed down into the fact
 * filter or evaluated locally, so a stale or dangling entry can never make
 * a wrong row.  A covering path (keys + included columns hold every column
 * the query needs) reads no fact at all and evaluates all clauses locally,
 * on the values stored in the entries.
 *
 * The cost of an index path is one lookup round trip per fetch_size
 * entries plus, when not covering, one fact fetch per fetch_batch_size
 * facts; the plain path examines the whole collection.  With ANALYZE'd
 * column statistics the selectivity of a skewed key's common value makes
 * the plain scan cheaper, and its rare values the index.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <math.h>

#include "access/stratnum.h"
#include "access/sysattr.h"
#include "catalog/pg_operator.h"
#include "catalog/pg_type.h"
#include "miscadmin.h"
#include "nodes/makefuncs.h"
#include "nodes/nodeFuncs.h"
#include "optimizer/clauses.h"
#include "optimizer/cost.h"
#include "optimizer/optimizer.h"
#include "optimizer/pathnode.h"
#include "optimizer/paths.h"
#include "optimizer/restrictinfo.h"
#include "parser/parsetree.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/lsyscache.h"
#include "utils/pg_locale.h"
#include "utils/ruleutils.h"
#include "utils/typcache.h"

#include "core/deparse.h"
#include "core/guc.h"
#include "core/pg_compat.h"
#include "index/index_catalog.h"
#include "index/index_collate.h"
#include "index/index_owner.h"
#include "path_shared.h"
#include "route_estimate.h"
#include "route_path.h"
#include "sync/sync_wait.h"

/*
 * One index condition found while matching clauses to an index.
 */
typedef struct IdxKeyCond
{
	int			keypos;			/* key component */
	IdxCondOp	op;
	Expr	   *value;			/* value expression, or NULL (IS NULL) */
	RestrictInfo *rinfo;		/* the clause it came from */
} IdxKeyCond;

/*
 * Elements of an index path's fdw_private (ForeignPath.fdw_private),
 * built once by add_index_path() and read by idx_index_plan_private().
 */
enum IdxIndexPathPrivateIndex
{
	/* IDX_SCAN_INDEX, which tells an index path from others (Integer) */
	IdxPathScanKind,
	/* the index definition's name (String) */
	IdxPathIndexName,
	/* 1 if the entries answer the query: no fact is read (Integer) */
	IdxPathCovering,
	/*
	 * the index conditions: a List of Lists (key position Integer, IdxCondOp
	 * Integer, value Expr or NULL for IS NULL)
	 */
	IdxPathConds,
	/* the order the rows follow, or NIL (IdxPrivOrder's IntList) */
	IdxPathOrder,
	/* rows the query asks for at most, or -1 (Integer, see IdxPrivLimit) */
	IdxPathLimit,
	/* entries of the first lookup batch, or -1 (Integer) */
	IdxPathFirstBatch
};

static List *index_path_private(const IdxIndexDef *def, bool covering,
								List *conds, List *order, int limit,
								int first_batch);

/*
 * Valid index definitions of a table: only those are used for reads, and
 * with idxtable.index_consistency = current only those an applier keeps
 * current with every writer (sync_wait.h).  Planning reads no markers
 * (it asks MongoDB only a never-analyzed table's size, table_size.c): an
 * index whose ownership marker this backend has not read yet counts as
 * valid, and the scan that uses it checks the marker when it
 * starts (route_scan.c).
 */
List *
idx_valid_indexes(Oid relid, Oid userid)
{
	List	   *result = NIL;
	List	   *defs;
	bool		deferred = idx_owner_defer_reads(true);
	ListCell   *lc;

	PG_TRY();
	{
		defs = idx_get_indexes(relid, userid);
	}
	PG_FINALLY();
	{
		idx_owner_defer_reads(deferred);
	}
	PG_END_TRY();

	foreach(lc, defs)
	{
		IdxIndexDef *def = lfirst(lc);

		if (def->state == IDX_STATE_VALID && !def->collation_changed &&
			idx_sync_routable(def))
			result = lappend(result, def);
	}
	return result;
}

/*
 * Is "node" a Var of column "attnum" of the scanned relation?
 */
static bool
is_column(Node *node, Index relid, AttrNumber attnum)
{
	node = (Node *) idx_strip_relabel((Expr *) node);
	return node && IsA(node, Var) &&
		((Var *) node)->varno == relid &&
		((Var *) node)->varlevelsup == 0 &&
		((Var *) node)->varattno == attnum;
}

/*
 * Does "node" compute the (non-multi) key component "key"?
 */
static bool
is_key_expr(Node *node, Index relid, const IdxIndexKey *key)
{
	node = (Node *) idx_strip_relabel((Expr *) node);
	if (key->multi || node == NULL)
		return false;
	if (key->kind == IDX_KEY_COLUMN)
		return is_column(node, relid, key->attnum);
	if (IsA(node, FuncExpr))
	{
		FuncExpr   *func = (FuncExpr *) node;
		Oid			expected = key->kind == IDX_KEY_LOWER ? F_LOWER_TEXT : F_UPPER_TEXT;

		return func->funcid == expected &&
			list_length(func->args) == 1 &&
			func->inputcollid == key->collation &&
			is_column(linitial(func->args), relid, key->attnum);
	}
	return false;
}

/*
 * Can "node" supply a lookup value: no column of the scanned relation, no
 * volatile function?  (Columns of other relations make a parameterized
 * path.)
 */
static bool
is_lookup_value(Node *node, Index relid)
{
	Relids		varnos;

	if (node == NULL || contain_volatile_functions(node) ||
		contain_subplans(node))
		return false;
	varnos = pull_varnos(NULL, node);
	return !bms_is_member(relid, varnos);
}

/*
 * Do the stored values of text key "key" come in the order of collation
 * "collid"?  Sort keys of that very collation do; the strings themselves
 * do under a collation that orders as bytes (MongoDB compares bytes).
 */
static bool
text_key_orders_as(const IdxIndexKey *key, Oid collid)
{
	if (!OidIsValid(collid))
		return false;
	if (OidIsValid(key->sortcoll))
		return key->sortcoll == collid;
	return idx_collation_bytewise(collid);
}

/*
 * The condition an operator makes on a key, if its btree strategy is one
 * an index lookup can serve.  Text ranges need entries in the order of
 * the operator's collation (text_key_orders_as); equality needs a
 * deterministic one (byte equality; sort keys keep the text after them).
 */
static bool
operator_cond(Oid opno, const IdxIndexKey *key, Oid collid, bool allow_range,
			  IdxCondOp *op)
{
	int			strategy = idx_op_btree_strategy(opno);
	Oid			keytype = key->keytype;
	bool		is_text = (keytype == TEXTOID || keytype == VARCHAROID);

	if (strategy == BTEqualStrategyNumber)
	{
		*op = ICOND_EQ;
		return !is_text ||
			(OidIsValid(collid) && get_collation_isdeterministic(collid));
	}
	if (!allow_range || keytype == BOOLOID ||
		(is_text && !text_key_orders_as(key, collid)))
		return false;
	switch (strategy)
	{
		case BTLessStrategyNumber:
			*op = ICOND_LT;
			return true;
		case BTLessEqualStrategyNumber:
			*op = ICOND_LE;
			return true;
		case BTGreaterStrategyNumber:
			*op = ICOND_GT;
			return true;
		case BTGreaterEqualStrategyNumber:
			*op = ICOND_GE;
			return true;
	}
	return false;
}

/*
 * Match "key op value" or "value op key" (commuted).
 */
static bool
match_opexpr(OpExpr *opexpr, Index relid, const IdxIndexKey *key,
			 IdxKeyCond *cond)
{
	Node	   *left,
			   *right;
	Oid			opno = opexpr->opno;
	IdxSplitComparison split;

	if (list_length(opexpr->args) != 2)
		return false;
	left = linitial(opexpr->args);
	right = lsecond(opexpr->args);

	/* multi-valued: array_col @> ARRAY[v, ...] looks up the first element */
	if (key->multi && opno == OID_ARRAY_CONTAINS_OP &&
		is_column(left, relid, key->attnum) && IsA(right, Const) &&
		!((Const *) right)->constisnull)
	{
		ArrayType  *arr = DatumGetArrayTypeP(((Const *) right)->constvalue);
		Datum	   *elems;
		bool	   *nulls;
		int			nelems;
		int16		elmlen;
		bool		elmbyval;
		char		elmalign;

		if (ARR_ELEMTYPE(arr) != key->keytype)
			return false;
		get_typlenbyvalalign(key->keytype, &elmlen, &elmbyval, &elmalign);
		deconstruct_array(arr, key->keytype, elmlen, elmbyval, elmalign,
						  &elems, &nulls, &nelems);
		if (nelems == 0 || nulls[0])
			return false;
		cond->op = ICOND_EQ;
		cond->value = (Expr *) makeConst(key->keytype, -1,
										 ((Const *) right)->constcollid,
										 elmlen, elems[0], false, elmbyval);
		return true;
	}

	if (!idx_split_comparison(opexpr, relid, &split) ||
		!is_key_expr((Node *) split.operand, relid, key) ||
		!is_lookup_value((Node *) split.other, relid) ||
		!idx_compatible_types(key->keytype, exprType((Node *) split.other)) ||
		!operator_cond(split.opno, key, opexpr->inputcollid,
					   key->kind == IDX_KEY_COLUMN, &cond->op))
		return false;
	cond->value = split.other;
	return true;
}

/*
 * Match "key = ANY(array)" (IN) and, for a multi-valued key,
 * "value = ANY(array_col)".
 */
static bool
match_saop(ScalarArrayOpExpr *saop, Index relid, const IdxIndexKey *key,
		   IdxKeyCond *cond)
{
	Node	   *scalar = linitial(saop->args);
	Node	   *array = lsecond(saop->args);
	IdxCondOp	op;

	if (!saop->useOr)
		return false;
	if (key->multi)
	{
		if (!is_column(array, relid, key->attnum) ||
			!is_lookup_value(scalar, relid) ||
			!idx_compatible_types(key->keytype, exprType(scalar)) ||
			!operator_cond(saop->opno, key, saop->inputcollid,
						   false, &op))
			return false;
		cond->op = ICOND_EQ;
		cond->value = (Expr *) scalar;
		return true;
	}
	array = (Node *) idx_strip_relabel((Expr *) array);
	if (!is_key_expr(scalar, relid, key) ||
		!(IsA(array, Const) || IsA(array, Param)) ||
		!idx_compatible_types(key->keytype,
							 get_element_type(exprType(array))) ||
		!operator_cond(saop->opno, key, saop->inputcollid, false,
					   &op))
		return false;
	cond->op = ICOND_IN;
	cond->value = (Expr *) array;
	return true;
}

/*
 * Does clause "rinfo" constrain key component "key"?
 */
static bool
match_clause(RestrictInfo *rinfo, Index relid, const IdxIndexKey *key,
			 IdxKeyCond *cond)
{
	Node	   *clause = (Node *) rinfo->clause;

	cond->rinfo = rinfo;
	cond->value = NULL;
	switch (nodeTag(clause))
	{
		case T_OpExpr:
			return match_opexpr((OpExpr *) clause, relid, key, cond);
		case T_ScalarArrayOpExpr:
			return match_saop((ScalarArrayOpExpr *) clause, relid, key, cond);
		case T_NullTest:
			if (((NullTest *) clause)->nulltesttype != IS_NULL ||
				key->kind != IDX_KEY_COLUMN ||
				!is_key_expr((Node *) ((NullTest *) clause)->arg, relid, key))
				return false;
			cond->op = ICOND_NULL;
			return true;
		default:
			return false;
	}
}

/*
 * A palloc'd copy of a condition.
 */
static IdxKeyCond *
copy_cond(const IdxKeyCond *cond)
{
	IdxKeyCond *copy = palloc_object(IdxKeyCond);

	*copy = *cond;
	return copy;
}

/*
 * Match "key IS NULL OR <arm>", where the arm is one comparison on the key,
 * or an AND of a lower and an upper bound: the conditions (ICOND_NULL_OR,
 * then the arm's bounds; an equality becomes a lower and an upper bound
 * where ranges are exact), all of clause "rinfo", or NIL.  The scan reads
 * the NULL entries and the arm's apart (route_scan.c).  Only plain
 * columns: a multi-valued key's NULL entries are not its NULL rows, and
 * lower()/upper() keys serve no ranges.
 */
static List *
match_null_or(RestrictInfo *rinfo, Index relid, const IdxIndexKey *key,
			  int keypos)
{
	BoolExpr   *or = (BoolExpr *) rinfo->clause;
	Node	   *arm = NULL;
	bool		null_arm = false;
	bool		lower = false;
	bool		upper = false;
	List	   *result;
	IdxKeyCond	cond = {keypos, ICOND_NULL_OR, NULL, rinfo};
	ListCell   *lc;

	if (!is_orclause(or) || list_length(or->args) != 2 ||
		key->kind != IDX_KEY_COLUMN || key->multi)
		return NIL;
	foreach(lc, or->args)
	{
		NullTest   *nt = lfirst(lc);

		if (!null_arm && IsA(nt, NullTest) && nt->nulltesttype == IS_NULL &&
			is_key_expr((Node *) nt->arg, relid, key))
			null_arm = true;
		else
			arm = (Node *) nt;
	}
	if (!null_arm || arm == NULL)
		return NIL;
	result = list_make1(copy_cond(&cond));
	foreach(lc, is_andclause(arm) ? ((BoolExpr *) arm)->args : list_make1(arm))
	{
		if (!IsA(lfirst(lc), OpExpr) ||
			!match_opexpr(lfirst(lc), relid, key, &cond))
			return NIL;
		cond.keypos = keypos;
		cond.rinfo = rinfo;
		if (cond.op == ICOND_EQ)
		{
			/* text and boolean keys serve equality where not ranges */
			if (key->keytype == TEXTOID || key->keytype == VARCHAROID ||
				key->keytype == BOOLOID || lower || upper)
				return NIL;
			cond.op = ICOND_GE;
			result = lappend(result, copy_cond(&cond));
			cond.op = ICOND_LE;
			lower = true;
		}
		else if (cond.op == ICOND_IN ||
				 ((cond.op == ICOND_GT || cond.op == ICOND_GE) ? lower : upper))
			return NIL;			/* one bound of each side at most */
		lower |= (cond.op == ICOND_GT || cond.op == ICOND_GE);
		upper |= (cond.op == ICOND_LT || cond.op == ICOND_LE);
		result = lappend(result, copy_cond(&cond));
	}
	return result;
}

/*
 * Match clauses to the keys of "def": equality on a prefix, then at most a
 * lower and an upper bound on the next component, or else one
 * "IS NULL OR <range>" clause there (match_null_or).  Returns IdxKeyConds.
 */
static List *
match_index(IdxIndexDef *def, Index relid, List *clauses)
{
	List	   *conds = NIL;
	int			k;

	for (k = 0; k < def->nkeys; k++)
	{
		IdxKeyCond *eq = NULL;
		IdxKeyCond *lower = NULL;
		IdxKeyCond *upper = NULL;
		List	   *null_or = NIL;
		ListCell   *lc;

		foreach(lc, clauses)
		{
			IdxKeyCond	cond;

			if (!match_clause(lfirst(lc), relid, &def->keys[k], &cond))
			{
				if (null_or == NIL)
					null_or = match_null_or(lfirst(lc), relid,
											&def->keys[k], k);
				continue;
			}
			cond.keypos = k;
			if (cond.op == ICOND_EQ || cond.op == ICOND_NULL ||
				cond.op == ICOND_IN)
			{
				/* prefer a single value over a list */
				if (eq == NULL || (eq->op == ICOND_IN && cond.op != ICOND_IN))
					eq = copy_cond(&cond);
			}
			else if ((cond.op == ICOND_GT || cond.op == ICOND_GE) && !lower)
				lower = copy_cond(&cond);
			else if ((cond.op == ICOND_LT || cond.op == ICOND_LE) && !upper)
				upper = copy_cond(&cond);
		}
		if (eq)
		{
			conds = lappend(conds, eq);
			continue;
		}
		if (lower)
			conds = lappend(conds, lower);
		if (upper)
			conds = lappend(conds, upper);
		if (!lower && !upper)
			conds = list_concat(conds, null_or);
		break;
	}

	/*
	 * A fact has one entry per element of a multi-valued key: unless that
	 * key is fixed by an equality, a lookup would return facts repeatedly.
	 */
	for (k = 0; k < def->nkeys; k++)
	{
		ListCell   *lc;
		bool		fixed = false;

		if (!def->keys[k].multi)
			continue;
		foreach(lc, conds)
		{
			IdxKeyCond *cond = lfirst(lc);

			fixed |= (cond->keypos == k && cond->op == ICOND_EQ);
		}
		if (!fixed)
			return NIL;
	}
	return conds;
}

/*
 * Attributes (pull_varattnos offsets) the entries of "def" hold: plain
 * key columns and included columns.
 */
static Bitmapset *
covered_attrs(const IdxIndexDef *def)
{
	Bitmapset  *result = NULL;
	int			i;

	for (i = 0; i < def->nkeys; i++)
	{
		/* one entry per array element: entries are not rows */
		if (def->keys[i].multi)
			return NULL;
		if (def->keys[i].kind == IDX_KEY_COLUMN)
			result = bms_add_member(result, def->keys[i].attnum -
									FirstLowInvalidHeapAttributeNumber);
	}
	for (i = 0; i < def->ninclude; i++)
		result = bms_add_member(result, def->include[i] -
								FirstLowInvalidHeapAttributeNumber);
	return result;
}

/*
 * May a plan read the table's entries without their facts?  Not when its
 * writes are in consistency mode 'ordered': then an entry may be an orphan
 * or stale (see index_write.h), and only reads that recheck each fact may
 * use the index.  Without a mode of its own the table's mode depends on
 * whether the server has transactions, which planning does not ask: the
 * covering plan is made, and its execution
 * reads the facts after all on a server without transactions
 * (idx_index_scan_begin).
 */
static bool
covering_allowed(const IdxTableInfo *info)
{
	return info->consistency != IDX_CONSISTENCY_ORDERED;
}

/*
 * Does "def" hold every column the query needs (target list and every
 * clause, including the join clauses "extra")?
 */
static bool
index_covers(const IdxIndexDef *def, RelOptInfo *baserel, IdxRelInfo *fpinfo,
			 List *extra)
{
	Bitmapset  *needed = bms_copy(fpinfo->attrs_used);
	Bitmapset  *covered;
	ListCell   *lc;
	int			x = -1;

	foreach(lc, list_concat_copy(baserel->baserestrictinfo, extra))
		pull_varattnos((Node *) lfirst_node(RestrictInfo, lc)->clause,
					   baserel->relid, &needed);

	/* only user columns can come from entries; a whole row never */
	while ((x = bms_next_member(needed, x)) >= 0)
	{
		if (x + FirstLowInvalidHeapAttributeNumber <= 0)
			return false;
	}
	covered = covered_attrs(def);
	if (covered == NULL || !bms_is_subset(needed, covered))
		return false;
	return covering_allowed(fpinfo->table);
}

/*
 * Before ANALYZE, the number of entries MongoDB counts for the conditions
 * "private_conds" (as fdw_private holds them) of a path that is not
 * parameterized, if the table's use_remote_estimate allows (see
 * route_estimate.c), or -1.  The count stops at the entries whose reading
 * alone costs as much as the plain scan's examining every document: at
 * that many the index path has lost, whatever the exact number.
 */
static double
remote_entries(RelOptInfo *baserel, IdxIndexDef *def, List *private_conds,
			   Relids required_outer)
{
	IdxRelInfo *fpinfo = baserel->fdw_private;
	double		count;

	if (!fpinfo->unanalyzed || !fpinfo->table->use_remote_estimate ||
		required_outer != NULL)
		return -1;
	count = idx_remote_entry_count(fpinfo->table, def, private_conds,
								   baserel->tuples * DOCUMENT_EXAMINE_COST /
								   INDEX_ENTRY_COST,
								   baserel->userid, fpinfo->reads_primary);
	return count < 0 ? -1 : clamp_row_est(count);
}

/*
 * Expected number of index entries the conditions select.  Column
 * statistics of the foreign table give the selectivity (they see skew);
 * a full-key equality on a unique index, or on an expression key whose
 * distinct count ANALYZE measured, is estimated from the index itself.
 * Before ANALYZE there are no column statistics: MongoDB's count of the
 * entries constant conditions select (remote_entries) stands in for
 * them.  (The relation's rows stay PostgreSQL's estimate: a path never
 * claims more rows than the relation, as a path with other rows than its
 * siblings' would not be compared with them on cost alone.)
 */
static double
estimate_entries(PlannerInfo *root, RelOptInfo *baserel, IdxIndexDef *def,
				 List *conds, List *private_conds, Relids required_outer)
{
	List	   *clauses = NIL;
	bool		all_eq = list_length(conds) == def->nkeys;
	bool		has_expr = false;
	double		nvalues = 1;
	double		remote;
	ListCell   *lc;
	Selectivity sel;

	foreach(lc, conds)
	{
		IdxKeyCond *cond = lfirst(lc);

		clauses = list_append_unique_ptr(clauses, cond->rinfo);
		if (cond->op == ICOND_IN)
		{
			Expr	   *array = cond->value;

			if (IsA(array, Const) && !((Const *) array)->constisnull)
			{
				ArrayType  *arr = DatumGetArrayTypeP(((Const *) array)->constvalue);

				nvalues *= ArrayGetNItems(ARR_NDIM(arr), ARR_DIMS(arr));
			}
			else
				nvalues *= 10;
		}
		else if (cond->op != ICOND_EQ && cond->op != ICOND_NULL)
			all_eq = false;
		if (def->keys[cond->keypos].kind != IDX_KEY_COLUMN)
			has_expr = true;
	}

	if (all_eq && def->unique)
		return nvalues;
	if (all_eq && has_expr && def->distinct_keys > 0 && def->entries > 0)
		return nvalues * def->entries / def->distinct_keys;
	remote = remote_entries(baserel, def, private_conds, required_outer);
	if (remote >= 0)
		return remote;

	sel = clauselist_selectivity(root, clauses, baserel->relid, JOIN_INNER,
								 NULL);
	return clamp_row_est(baserel->tuples * sel);
}

/*
 * The number of leading keys that the conditions fix to one value each
 * (= or IS NULL): the entries after them are in the order of the next keys.
 */
static int
equality_prefix(const IdxIndexDef *def, List *conds)
{
	int			prefix = 0;
	ListCell   *lc;

	foreach(lc, conds)
	{
		IdxKeyCond *cond = lfirst(lc);

		if (cond->keypos == prefix &&
			(cond->op == ICOND_EQ || cond->op == ICOND_NULL))
			prefix++;
	}
	return prefix;
}

/* What key_match() looks for in a pathkey's equivalence class */
typedef struct KeyMatch
{
	Index		relid;
	AttrNumber	attnum;
	Oid			type;			/* out: the column's type */
} KeyMatch;

/*
 * An IdxPathkeyMatch (order.h): is "expr" the key's column?
 */
static bool
key_match(Expr *expr, void *arg)
{
	KeyMatch   *m = (KeyMatch *) arg;

	if (!is_column((Node *) expr, m->relid, m->attnum))
		return false;
	m->type = exprType((Node *) expr);
	return true;
}

/*
 * Does a pathkey sort on key "key" of "def", in an order its entries can
 * give: a plain column whose BSON order is PostgreSQL's (integers, dates
 * and timestamps, uuid, boolean, and text whose entries are in the order
 * of the pathkey's collation: text_key_orders_as), sorted by its type's
 * default operator?
 */
static bool
pathkey_is_key(PathKey *pathkey, RelOptInfo *baserel, const IdxIndexKey *key)
{
	KeyMatch	m = {baserel->relid, key->attnum, InvalidOid};

	if (key->kind != IDX_KEY_COLUMN || key->multi ||
		!idx_pathkey_match(pathkey, key_match, &m))
		return false;
	switch (m.type)
	{
		case INT2OID:
		case INT4OID:
		case INT8OID:
		case DATEOID:
		case TIMESTAMPOID:
		case TIMESTAMPTZOID:
		case UUIDOID:
		case BOOLOID:
			break;
		case TEXTOID:
			if (text_key_orders_as(key, pathkey->pk_eclass->ec_collation))
				break;
			return false;
		default:
			return false;
	}
	return idx_pathkey_default_order(pathkey, m.type);
}

/*
 * Is the query's sort key at "pos" the column mapped to _id, ASC NULLS
 * LAST under the column's own type and collation (ORDER BY key, _id; or
 * ORDER BY _id where equalities fix every key)?  An ordered index scan
 * can give that order whatever the _id's BSON types: it sorts the entries
 * of each group of equal order keys by their fact's _id with the column's
 * own comparison (route_scan.c), so PostgreSQL's order is the one
 * followed, byte order under C-like collations.  Other orders of the _id
 * (DESC, NULLS FIRST) are left to a local sort.
 */
static bool
id_tiebreak_pathkey(PlannerInfo *root, RelOptInfo *baserel, int pos)
{
	IdxRelInfo *fpinfo = baserel->fdw_private;
	AttrNumber	id_attnum = fpinfo->table->id_attnum;
	PathKey    *wanted;
	Oid			type;
	int32		typmod;
	Oid			collid;
	TypeCacheEntry *tce;
	List	   *pathkeys;

	if (id_attnum == InvalidAttrNumber ||
		list_length(root->query_pathkeys) <= pos)
		return false;
	wanted = list_nth(root->query_pathkeys, pos);
	get_atttypetypmodcoll(fpinfo->table->relid, id_attnum, &type, &typmod,
						  &collid);
	tce = lookup_type_cache(type, TYPECACHE_LT_OPR | TYPECACHE_CMP_PROC);
	if (!OidIsValid(tce->lt_opr) || !OidIsValid(tce->cmp_proc))
		return false;
	pathkeys = idx_build_expression_pathkey(root,
											(Expr *) makeVar(baserel->relid, id_attnum,
															 type, typmod, collid, 0),
											tce->lt_opr, baserel->relids);
	return pathkeys != NIL && linitial(pathkeys) == wanted;
}

/*
 * The leading pathkeys of the query that an index path can follow, and
 * the order (IdxPrivOrder) in "*order", or NIL for none.  After an
 * equality prefix of single values, the entries are in the order of the
 * next keys, both ways: the first of those may place its NULLs first or
 * last (the scan reads its NULL entries apart where MongoDB places them
 * otherwise, route_scan.c), the others in the same direction, placing
 * NULLs as MongoDB does (ASC NULLS FIRST, DESC NULLS LAST).
 *
 * When the query's next sort key is the column mapped to _id, ASC NULLS
 * LAST (ORDER BY key, _id: a keyset's tie-break), the scan also orders the
 * entries of equal order keys by their fact's _id (route_scan.c), and the
 * pathkeys have that key too.  When equalities fix every key, the query's
 * first sort key may be the _id (WHERE key = v ORDER BY _id): the order
 * key is then the last (fixed) one and all entries are one group of
 * equal keys.
 */
static List *
index_pathkeys(PlannerInfo *root, RelOptInfo *baserel, IdxIndexDef *def,
			   List *conds, List **order)
{
	List	   *result = NIL;
	int			prefix = equality_prefix(def, conds);
	int			first = prefix;
	int			nkeys;
	bool		desc = false;
	bool		nulls_first = false;
	bool		order_by_id = false;
	ListCell   *lc;

	*order = NIL;
	foreach(lc, root->query_pathkeys)
	{
		PathKey    *pathkey = lfirst(lc);
		int			keypos = prefix + list_length(result);

		if (keypos >= def->nkeys ||
			!pathkey_is_key(pathkey, baserel, &def->keys[keypos]))
			break;
		if (result == NIL)
		{
			desc = idx_pathkey_descending(pathkey);
			nulls_first = pathkey->pk_nulls_first;
		}
		else if (idx_pathkey_descending(pathkey) != desc ||
				 pathkey->pk_nulls_first == desc)
			break;
		result = lappend(result, pathkey);
	}
	nkeys = list_length(result);
	if ((result != NIL || prefix >= def->nkeys) &&
		id_tiebreak_pathkey(root, baserel, nkeys))
	{
		order_by_id = true;
		result = lappend(result, list_nth(root->query_pathkeys, nkeys));
		if (nkeys == 0)
		{
			/* every key fixed: the entries are one group, sorted by _id */
			first = def->nkeys - 1;
			nkeys = 1;
		}
	}
	if (result != NIL)
	{
		*order = list_make4_int(first, nkeys, desc, nulls_first);
		*order = lappend_int(*order, order_by_id);
	}
	return result;
}

/*
 * Can the entries of a group of equal keys come from MongoDB in the order
 * of the table's _id column, its type's and collation's
 * (idx_id_order_kind)?
 */
static bool
id_order_from_server(IdxRelInfo *fpinfo)
{
	Oid			type;
	int32		typmod;
	Oid			collid;

	if (fpinfo->table->id_attnum == InvalidAttrNumber)
		return false;
	get_atttypetypmodcoll(fpinfo->table->relid, fpinfo->table->id_attnum,
						  &type, &typmod, &collid);
	return idx_id_order_kind(type, collid) != IDX_ID_ORDER_LOCAL;
}

/*
 * Does the order "order" (IdxPrivOrder) sort equal keys by their fact's
 * _id?
 */
static bool
order_sorts_by_id(List *order)
{
	return order != NIL && list_nth_int(order, 4);
}

/*
 * The finds of the lookup after the first (route_scan.c): one for the
 * NULL entries of an "IS NULL OR" key, or of the first order key when the
 * order places them where MongoDB does not and no condition (an equality,
 * IN list or range) leaves them out or alone.
 */
static int
extra_lookups(List *conds, List *order)
{
	ListCell   *lc;

	foreach(lc, conds)
	{
		IdxKeyCond *cond = lfirst(lc);

		if (cond->op == ICOND_NULL_OR)
			return 1;
		if (order != NIL && cond->keypos == linitial_int(order))
			return 0;
	}
	/* MongoDB's NULLs come first ascending, last descending */
	if (order != NIL && lfourth_int(order) == lthird_int(order))
		return 1;
	return 0;
}

/*
 * Is "rinfo" the clause of one of the conditions "conds"?
 */
static bool
is_index_cond(List *conds, RestrictInfo *rinfo)
{
	ListCell   *lc;

	foreach(lc, conds)
	{
		if (((IdxKeyCond *) lfirst(lc))->rinfo == rinfo)
			return true;
	}
	return false;
}

/*
 * The selectivity of the restriction clauses that are not index
 * conditions "conds" (the ones checked on the facts).
 */
static Selectivity
other_clauses_selectivity(PlannerInfo *root, RelOptInfo *baserel, List *conds)
{
	List	   *others = NIL;
	ListCell   *lc;

	foreach(lc, baserel->baserestrictinfo)
	{
		RestrictInfo *rinfo = lfirst_node(RestrictInfo, lc);

		if (!rinfo->pseudoconstant && !is_index_cond(conds, rinfo))
			others = lappend(others, rinfo);
	}
	return clauselist_selectivity(root, others, baserel->relid, JOIN_INNER,
								  NULL);
}

/*
 * The rows the query takes from an index path at most (LIMIT + OFFSET),
 * or -1 if unknown or idxtable.enable_order_pushdown is off.  Known only
 * when the scan's rows go straight to the LIMIT: the relation is the
 * query's only one, the path is not parameterized, and its order is the
 * query's (or the query has none).
 *
 * The scan then sizes its first lookup batch and fact fetch from it
 * (route_scan.c), "first_batch" entries: as many as the rows asked for
 * when every restriction clause is an index condition (only a stale entry
 * can then miss its fact), else as many as the other clauses' selectivity
 * says give that many rows.  The batches grow if they were not enough.
 */
static int
path_row_limit(PlannerInfo *root, RelOptInfo *baserel, List *conds,
			   List *pathkeys, Relids required_outer, int *first_batch)
{
	Selectivity sel;

	*first_batch = -1;
	if (!idxtable_enable_order_pushdown || root->limit_tuples < 1 || root->limit_tuples > PG_INT32_MAX ||
		required_outer != NULL || baserel->reloptkind != RELOPT_BASEREL ||
		!bms_equal(root->all_baserels, baserel->relids))
		return -1;
	if (root->query_pathkeys != NIL &&
		!pathkeys_contained_in(root->query_pathkeys, pathkeys))
		return -1;
	sel = other_clauses_selectivity(root, baserel, conds);
	*first_batch = (int) Min(ceil(root->limit_tuples / Max(sel, 1e-6)),
							 PG_INT32_MAX / 2);
	return (int) root->limit_tuples;
}

/*
 * The conditions "conds" as an index path's fdw_private holds them: a
 * List of (key position, IdxCondOp, value) Lists.
 */
static List *
private_conditions(List *conds)
{
	List	   *result = NIL;
	ListCell   *lc;

	foreach(lc, conds)
	{
		IdxKeyCond *cond = lfirst(lc);

		result = lappend(result, list_make3(makeInteger(cond->keypos),
											makeInteger(cond->op),
											cond->value));
	}
	return result;
}

/*
 * Add one index path for "def" with conditions "conds".
 */
static void
add_index_path(PlannerInfo *root, RelOptInfo *baserel, IdxRelInfo *fpinfo,
			   IdxIndexDef *def, List *conds, Relids required_outer,
			   List *join_clauses)
{
	bool		covering = index_covers(def, baserel, fpinfo, join_clauses);
	List	   *private_conds = private_conditions(conds);
	double		entries = estimate_entries(root, baserel, def, conds,
										   private_conds, required_outer);
	double		rows = baserel->rows;
	double		lookups;
	Cost		startup_cost;
	Cost		total_cost;
	List	   *pathkeys;
	List	   *order;
	int			limit;
	int			first_batch;

	if (required_outer)
		rows = get_parameterized_baserel_size(root, baserel, join_clauses);
	rows = Min(rows, entries);

	lookups = Max(1, ceil(entries / fpinfo->table->fetch_size));
	startup_cost = ROUND_TRIP_COST;
	total_cost = lookups * ROUND_TRIP_COST +
		entries * (INDEX_ENTRY_COST + DOCUMENT_TRANSFER_COST);
	if (!covering)
	{
		double		fetches = Max(1, idx_batches(entries,
												 fpinfo->table->fetch_batch_size,
												 fpinfo->doc_bytes));

		startup_cost += ROUND_TRIP_COST;
		total_cost += fetches * ROUND_TRIP_COST +
			entries * (FACT_FETCH_COST + DOCUMENT_TRANSFER_COST +
					   fpinfo->doc_bytes * DOCUMENT_BYTE_COST);
	}
	total_cost += entries * cpu_tuple_cost;

	pathkeys = index_pathkeys(root, baserel, def, conds, &order);
	total_cost += extra_lookups(conds, order) * ROUND_TRIP_COST;

	/*
	 * A group of equal keys is read whole before its first row: when
	 * equalities fix every key, that is every entry, however small the LIMIT.
	 * Unless MongoDB gives the group in the _id's order (route_id_order.c):
	 * then a batch at a time.
	 */
	if (order_sorts_by_id(order) &&
		equality_prefix(def, conds) >= def->nkeys &&
		!id_order_from_server(fpinfo))
		startup_cost += lookups * ROUND_TRIP_COST +
			entries * (INDEX_ENTRY_COST + DOCUMENT_TRANSFER_COST);
	limit = path_row_limit(root, baserel, conds, pathkeys, required_outer,
						   &first_batch);

	add_path(baserel, (Path *)
			 idx_create_foreignscan_path(root, baserel, NULL, rows,
										 startup_cost, total_cost, pathkeys,
										 required_outer, NULL,
										 index_path_private(def, covering,
															private_conds,
															order, limit,
															first_batch)));
}

/*
 * The fdw_private of an index path (enum IdxIndexPathPrivateIndex).
 */
static List *
index_path_private(const IdxIndexDef *def, bool covering, List *conds,
				   List *order, int limit, int first_batch)
{
	List	   *result = NIL;

	/* in the order of the enum */
	result = lappend(result, makeInteger(IDX_SCAN_INDEX));
	result = lappend(result, makeString(pstrdup(def->name)));
	result = lappend(result, makeInteger(covering));
	result = lappend(result, conds);
	result = lappend(result, order);
	result = lappend(result, makeInteger(limit));
	result = lappend(result, makeInteger(first_batch));
	return result;
}

/*
 * Is "path" an index path (one of idx_add_index_paths)?
 */
bool
idx_is_index_path(const ForeignPath *path)
{
	return path->fdw_private != NIL &&
		intVal(list_nth(path->fdw_private, IdxPathScanKind)) == IDX_SCAN_INDEX;
}

/*
 * Callback of generate_implied_equalities_for_column: is the equivalence
 * member the index key passed as "arg"?
 */
static bool
ec_member_is_key(PlannerInfo *root, RelOptInfo *rel, EquivalenceClass *ec,
				 EquivalenceMember *em, void *arg)
{
	return is_key_expr((Node *) em->em_expr, rel->relid,
					   (const IdxIndexKey *) arg);
}

/*
 * Join clauses that could give an index key its value from another
 * relation: the relation's movable join clauses, and the equalities that
 * equivalence classes imply for each key component ("c.email = o.email"
 * lives in an equivalence class, not in joininfo).
 */
static List *
join_clause_candidates(PlannerInfo *root, RelOptInfo *baserel,
					   IdxIndexDef *def)
{
	List	   *result = NIL;
	ListCell   *lc;
	int			k;

	foreach(lc, baserel->joininfo)
	{
		if (join_clause_is_movable_to(lfirst(lc), baserel))
			result = lappend(result, lfirst(lc));
	}
	for (k = 0; k < def->nkeys; k++)
		result = list_concat(result,
							 generate_implied_equalities_for_column(root, baserel,
																	ec_member_is_key,
																	&def->keys[k],
																	baserel->lateral_referencers));
	return result;
}

/*
 * Add index paths: for each valid index, one path from the restriction
 * clauses and, if join clauses can supply leading keys, one parameterized
 * path per outer relation set.
 */
void
idx_add_index_paths(PlannerInfo *root, RelOptInfo *baserel,
					IdxRelInfo *fpinfo)
{
	ListCell   *lc;

	foreach(lc, fpinfo->indexes)
	{
		IdxIndexDef *def = lfirst(lc);
		List	   *conds;
		List	   *join_clauses = NIL;
		ListCell   *lc2;

		conds = match_index(def, baserel->relid, baserel->baserestrictinfo);
		if (conds != NIL)
			add_index_path(root, baserel, fpinfo, def, conds, NULL, NIL);
		else
		{
			List	   *order;

			/* no condition, but the entries' order may serve ORDER BY */
			if (index_pathkeys(root, baserel, def, NIL, &order) != NIL)
				add_index_path(root, baserel, fpinfo, def, NIL, NULL, NIL);
		}

		/* join clauses that can move to this relation, one outer at a time */
		foreach(lc2, join_clause_candidates(root, baserel, def))
		{
			RestrictInfo *rinfo = lfirst_node(RestrictInfo, lc2);
			List	   *with_join;
			Relids		outer;

			with_join = match_index(def, baserel->relid,
									lappend(list_copy(baserel->baserestrictinfo),
											rinfo));
			if (list_length(with_join) > list_length(conds))
			{
				bool		uses_join = false;
				ListCell   *lc3;

				foreach(lc3, with_join)
					uses_join |= ((IdxKeyCond *) lfirst(lc3))->rinfo == rinfo;
				if (!uses_join)
					continue;
				outer = bms_difference(rinfo->clause_relids,
									   bms_make_singleton(baserel->relid));
				join_clauses = list_make1(rinfo);
				add_index_path(root, baserel, fpinfo, def, with_join, outer,
							   join_clauses);
			}
		}
	}
}

/*
 * The text of a key component, as written in the index definition.
 */
static char *
key_spec_text(const IdxIndexDef *def, int keypos)
{
	const IdxIndexKey *key = &def->keys[keypos];
	char	   *col = get_attname(def->relid, key->attnum, false);

	switch (key->kind)
	{
		case IDX_KEY_LOWER:
			return psprintf("lower(%s)", quote_identifier(col));
		case IDX_KEY_UPPER:
			return psprintf("upper(%s)", quote_identifier(col));
		default:
			return (char *) quote_identifier(col);
	}
}

/*
 * The text of a lookup value for EXPLAIN: a constant, a parameter, or a
 * column of an outer relation.
 */
static char *
value_text(PlannerInfo *root, Expr *value)
{
	Node	   *node = (Node *) idx_strip_relabel((Expr *) value);

	if (node == NULL)
		return NULL;
	if (IsA(node, Const))
		return deparse_expression(node, NIL, false, false);
	if (IsA(node, Param))
		return psprintf("$%d", ((Param *) node)->paramid);
	if (IsA(node, Var) && ((Var *) node)->varno <= root->simple_rel_array_size)
	{
		Var		   *var = (Var *) node;
		RangeTblEntry *rte = planner_rt_fetch(var->varno, root);

		if (rte->rtekind == RTE_RELATION)
			return psprintf("%s.%s", quote_identifier(get_rel_name(rte->relid)),
							quote_identifier(get_attname(rte->relid,
														 var->varattno,
														 false)));
	}
	return pstrdup("(expression)");
}

/*
 * One index condition as text: "town = 'Redmond'::text".
 */
static char *
cond_text(PlannerInfo *root, const IdxIndexDef *def, int keypos, IdxCondOp op,
		  Expr *value)
{
	static const char *const ops[] = {"=", "= ANY", "IS NULL", "<", "<=", ">", ">="};
	char	   *key = key_spec_text(def, keypos);

	if (op == ICOND_NULL)
		return psprintf("%s IS NULL", key);
	if (op == ICOND_IN)
		return psprintf("%s = ANY (%s)", key, value_text(root, value));
	if (def->keys[keypos].multi)
		return psprintf("%s contains %s", key, value_text(root, value));
	return psprintf("%s %s %s", key, ops[op], value_text(root, value));
}

/*
 * The index definition a path of the relation names.
 */
static IdxIndexDef *
path_index_def(IdxRelInfo *fpinfo, const char *name)
{
	ListCell   *lc;

	foreach(lc, fpinfo->indexes)
	{
		IdxIndexDef *def = lfirst(lc);

		if (strcmp(def->name, name) == 0)
			return def;
	}
	elog(ERROR, "index table \"%s\" of an index path is not among the relation's",
		 name);
	return NULL;				/* keep compiler quiet */
}

/*
 * The index part of the plan of an index path (see route_path.h).
 */
List *
idx_index_plan_private(PlannerInfo *root, RelOptInfo *baserel,
					   ForeignPath *best_path, List *remote_conds,
					   List **fdw_exprs, List **local_exprs,
					   Bitmapset **attrs_used, int *limit)
{
	List	   *path_private = best_path->fdw_private;
	IdxIndexDef *def;
	bool		covering = intVal(list_nth(path_private, IdxPathCovering));
	List	   *conds = NIL;
	List	   *result = NIL;
	StringInfoData text;
	StringInfoData arm;
	int			null_or = -1;
	ListCell   *lc;

	def = path_index_def(baserel->fdw_private,
						 strVal(list_nth(path_private, IdxPathIndexName)));
	initStringInfo(&text);
	initStringInfo(&arm);
	foreach(lc, (List *) list_nth(path_private, IdxPathConds))
	{
		List	   *pc = lfirst(lc);
		int			keypos = intVal(linitial(pc));
		IdxCondOp	op = intVal(lsecond(pc));
		Expr	   *value = lthird(pc);
		int			exprpos = -1;

		if (value)
		{
			*fdw_exprs = lappend(*fdw_exprs, value);
			exprpos = list_length(*fdw_exprs) - 1;
		}
		conds = lappend(conds, list_make3_int(keypos, op, exprpos));
		if (op == ICOND_NULL_OR)
			null_or = keypos;	/* the conditions after it are its arm */
		else if (null_or >= 0)
			appendStringInfo(&arm, "%s%s", arm.len > 0 ? " AND " : "",
							 cond_text(root, def, keypos, op, value));
		else
			appendStringInfo(&text, "%s(%s)", text.len > 0 ? " AND " : "",
							 cond_text(root, def, keypos, op, value));
	}
	if (null_or >= 0)
		appendStringInfo(&text, "%s(%s IS NULL OR %s%s%s)",
						 text.len > 0 ? " AND " : "",
						 key_spec_text(def, null_or),
						 strstr(arm.data, " AND ") ? "(" : "", arm.data,
						 strstr(arm.data, " AND ") ? ")" : "");

	if (covering)
	{
		/* no fact is read: every clause is evaluated on the entries */
		*local_exprs = list_concat_unique_ptr(*local_exprs, remote_conds);
		pull_varattnos((Node *) *local_exprs, baserel->relid, attrs_used);
	}
	*limit = intVal(list_nth(path_private, IdxPathLimit));

	/* in the order of enum IdxIndexPrivateIndex */
	result = lappend(result, makeString(def->name));
	result = lappend(result, makeInteger(covering));
	result = lappend(result, conds);
	result = lappend(result, makeString(text.data));
	result = lappend(result, list_nth(path_private, IdxPathOrder));
	result = lappend(result, list_nth(path_private, IdxPathFirstBatch));
	return result;
}
