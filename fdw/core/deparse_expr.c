/*-------------------------------------------------------------------------
 *
 * deparse_expr.c
 *		  Comparisons of two columns of the scanned table as MongoDB $expr
 *		  filters.
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/core/deparse_expr.c
 *
 * "a < b" on two columns cannot be a query operator ({a: {$lt: ...}} takes
 * a constant); MongoDB evaluates it with an aggregation expression,
 * {$expr: {$lt: ["$a", "$b"]}}.  No index serves it, so it only narrows
 * what the find returns, next to the clauses an index can serve (which
 * keep their own form).  It is pushed only where its result is
 * PostgreSQL's:
 *	- both columns of one family: integers (int2/int4/int8 mixed), floats
 *	  (float4/float8 mixed), or the same type among boolean, timestamp,
 *	  timestamptz, date and uuid, so that both hold values of one BSON
 *	  type bracket that MongoDB compares by value as PostgreSQL does
 *	  (int64 against double exactly; uuids as 16 bytes of subtype 4);
 *	- top-level fields only: "$a.b" would yield the array a path crosses
 *	  instead of the error reading it raises (deparse.c);
 *	- aggregation comparisons order null and missing below every value, so
 *	  both fields are required to be neither null, missing nor undefined
 *	  ({f: {$ne: null, $not: {$type: "undefined"}}}, which an index can
 *	  serve), which is also where PostgreSQL's comparison is not NULL;
 *	- floats: aggregation sorts NaN below every number (and equal to NaN),
 *	  PostgreSQL above, so "<" and "<=" name NaN explicitly (float_order).
 * Under NOT the comparison is negated; both fields must still be non-null.
 *
 * Integer sums and differences of columns and constants ("a + 1 < b",
 * "a - b >= 10") are pushed too, but only as a superset, rechecked locally
 * (LOSSY): PostgreSQL raises an error on int2/int4 overflow where MongoDB
 * widens to int64, and a field may hold an integral double, whose
 * arithmetic is exact only up to 2^53.  So the $expr also lets through
 * every document where a field is not a number within +-2^48 (with at
 * most 16 operands no sum reaches 2^53, in int64 or double), and every one
 * where an int2/int4 step leaves its type's range, so that the local
 * recheck raises PostgreSQL's error there:
 * {$or: [{$not: [a in range]}, ..., step out of range, ..., a + 1 < b]},
 * the guards first ($or evaluates its operands in order and stops at the
 * first true one, so $add never meets a string or a date).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <math.h>

#include "access/stratnum.h"
#include "catalog/pg_type.h"
#include "nodes/nodeFuncs.h"
#include "nodes/value.h"
#include "utils/fmgroids.h"
#include "utils/lsyscache.h"

#include "core/clause_shape.h"
#include "core/convert.h"
#include "core/deparse.h"
#include "core/pg_compat.h"

/* A comparison of two columns, taken apart */
typedef struct ColumnComparison
{
	Var		   *left;
	Var		   *right;
	int			strategy;		/* BT*StrategyNumber or IDX_STRATEGY_NE */
	bool		is_float;
} ColumnComparison;

/* Bounds of the integer arithmetic pushed (see the file header) */
#define ARITH_MAX_OPERANDS 16
#define ARITH_BOUND (INT64CONST(1) << 48)

/* A comparison of integer sums and differences, taken apart */
typedef struct ArithComparison
{
	Expr	   *left;
	Expr	   *right;
	int			strategy;
	List	   *fields;			/* distinct fields of the columns used */
	int			noperands;
} ArithComparison;

/*
 * The family of types whose values compare with each other as in
 * PostgreSQL: integers, floats, else the type itself.
 */
static Oid
type_family(Oid typid)
{
	switch (typid)
	{
		case INT2OID:
		case INT4OID:
		case INT8OID:
			return INT8OID;
		case FLOAT4OID:
		case FLOAT8OID:
			return FLOAT8OID;
		case BOOLOID:
		case TIMESTAMPOID:
		case TIMESTAMPTZOID:
		case DATEOID:
		case UUIDOID:
			return typid;
		default:
			return InvalidOid;
	}
}

/*
 * Is "expr" a column of the scanned relation mapped to a top-level field
 * an aggregation expression can name ("$field")?
 */
static Var *
expr_column(Expr *expr, Index relid, const IdxTableInfo *info)
{
	Var		   *var;
	const char *field;

	expr = idx_strip_relabel(expr);
	if (expr == NULL || !IsA(expr, Var))
		return NULL;
	var = (Var *) expr;
	if (var->varno != relid || var->varlevelsup != 0 || var->varattno <= 0 ||
		var->varattno > info->natts)
		return NULL;
	field = info->fields[var->varattno - 1];
	if (field == NULL || field[0] == '\0' || field[0] == '$' ||
		strchr(field, '.') != NULL)
		return NULL;
	return var;
}

/*
 * Take apart "column op column" with a btree comparison operator on
 * columns of one type family.
 */
static bool
parse_column_comparison(OpExpr *op, Index relid, const IdxTableInfo *info,
						ColumnComparison *out)
{
	Oid			family;

	if (list_length(op->args) != 2)
		return false;
	out->left = expr_column(linitial(op->args), relid, info);
	out->right = expr_column(lsecond(op->args), relid, info);
	if (out->left == NULL || out->right == NULL)
		return false;
	family = type_family(out->left->vartype);
	if (!OidIsValid(family) || family != type_family(out->right->vartype))
		return false;
	out->strategy = idx_op_btree_strategy(op->opno);
	out->is_float = (family == FLOAT8OID);
	return out->strategy == IDX_STRATEGY_NE ||
		(out->strategy >= BTLessStrategyNumber &&
		 out->strategy <= BTGreaterStrategyNumber);
}

/*
 * Is "funcid" integer + or - (of any two integer types)?  Sets "is_plus".
 */
static bool
integer_plus_minus(Oid funcid, bool *is_plus)
{
	switch (funcid)
	{
		case F_INT2PL:
		case F_INT4PL:
		case F_INT8PL:
		case F_INT24PL:
		case F_INT42PL:
		case F_INT28PL:
		case F_INT82PL:
		case F_INT48PL:
		case F_INT84PL:
			*is_plus = true;
			return true;
		case F_INT2MI:
		case F_INT4MI:
		case F_INT8MI:
		case F_INT24MI:
		case F_INT42MI:
		case F_INT28MI:
		case F_INT82MI:
		case F_INT48MI:
		case F_INT84MI:
			*is_plus = false;
			return true;
		default:
			return false;
	}
}

/*
 * The value of a non-null integer constant, if it is one.
 */
static bool
integer_const(Expr *expr, int64 *value)
{
	Const	   *c;

	if (!IsA(expr, Const) || ((Const *) expr)->constisnull)
		return false;
	c = (Const *) expr;
	switch (c->consttype)
	{
		case INT2OID:
			*value = DatumGetInt16(c->constvalue);
			return true;
		case INT4OID:
			*value = DatumGetInt32(c->constvalue);
			return true;
		case INT8OID:
			*value = DatumGetInt64(c->constvalue);
			return true;
		default:
			return false;
	}
}

/*
 * Is "expr" an integer column (top-level field), an integer constant
 * within +-2^48, or a sum or difference of such terms?  Collects the
 * fields and counts the operands.
 */
static bool
arith_term(Expr *expr, Index relid, const IdxTableInfo *info,
		   ArithComparison *out)
{
	Var		   *var;
	int64		value;
	bool		is_plus;

	expr = idx_strip_relabel(expr);
	if (expr == NULL || ++out->noperands > ARITH_MAX_OPERANDS)
		return false;
	if ((var = expr_column(expr, relid, info)) != NULL)
	{
		out->fields = list_append_unique(out->fields,
										 makeString(info->fields[var->varattno - 1]));
		return type_family(var->vartype) == INT8OID;
	}
	if (integer_const(expr, &value))
		return value >= -ARITH_BOUND && value <= ARITH_BOUND;
	if (!IsA(expr, OpExpr) || list_length(((OpExpr *) expr)->args) != 2 ||
		!integer_plus_minus(get_opcode(((OpExpr *) expr)->opno), &is_plus))
		return false;
	out->noperands--;			/* the operator is no operand */
	return arith_term(linitial(((OpExpr *) expr)->args), relid, info, out) &&
		arith_term(lsecond(((OpExpr *) expr)->args), relid, info, out);
}

/*
 * Take apart a comparison of integer sums and differences of columns and
 * constants, with at least one column and one operator (plain "column op
 * value" and "column op column" have their own forms).
 */
static bool
parse_arith_comparison(OpExpr *op, Index relid, const IdxTableInfo *info,
					   ArithComparison *out)
{

	memset(out, 0, sizeof(*out));
	if (list_length(op->args) != 2)
		return false;
	out->left = idx_strip_relabel(linitial(op->args));
	out->right = idx_strip_relabel(lsecond(op->args));
	if (!(IsA(out->left, OpExpr) || IsA(out->right, OpExpr)) ||
		type_family(exprType((Node *) out->left)) != INT8OID ||
		type_family(exprType((Node *) out->right)) != INT8OID ||
		!arith_term(out->left, relid, info, out) ||
		!arith_term(out->right, relid, info, out) || out->fields == NIL)
		return false;
	out->strategy = idx_op_btree_strategy(op->opno);
	return out->strategy == IDX_STRATEGY_NE ||
		(out->strategy >= BTLessStrategyNumber &&
		 out->strategy <= BTGreaterStrategyNumber);
}

/*
 * Plan time: is "op" a comparison of two columns (exact) or of integer
 * arithmetic (a superset, rechecked locally) that can be pushed as an
 * $expr filter?  See the file header.
 */
IdxPushKind
idx_classify_column_comparison(OpExpr *op, Index relid,
							   const IdxTableInfo *info)
{
	ColumnComparison c;
	ArithComparison a;

	if (parse_column_comparison(op, relid, info, &c))
		return IDX_PUSH_EXACT;
	if (parse_arith_comparison(op, relid, info, &a))
		return IDX_PUSH_LOSSY;
	return IDX_PUSH_NONE;
}

/*
 * The field of the first column of a pushed $expr comparison (a top-level
 * field: no guard for paths through arrays is needed).
 */
const char *
idx_column_comparison_field(OpExpr *op, Index relid, const IdxTableInfo *info)
{
	ColumnComparison c;
	ArithComparison a;

	if (parse_column_comparison(op, relid, info, &c))
		return info->fields[c.left->varattno - 1];
	if (parse_arith_comparison(op, relid, info, &a))
		return strVal(linitial(a.fields));
	elog(ERROR, "unexpected clause in pushed-down filter");
	return NULL;				/* keep compiler quiet */
}

/*
 * Append {field: {$ne: null, $not: {$type: "undefined"}}}: the field reads
 * as a value, not as SQL NULL.
 */
static void
append_not_null(bson_t *out, const char *field)
{
	bson_t		child,
				type;

	idx_check_append(BSON_APPEND_DOCUMENT_BEGIN(out, field, &child));
	idx_check_append(BSON_APPEND_NULL(&child, "$ne"));
	idx_check_append(BSON_APPEND_DOCUMENT_BEGIN(&child, "$not", &type));
	idx_check_append(BSON_APPEND_UTF8(&type, "$type", "undefined"));
	idx_check_append(bson_append_document_end(&child, &type));
	idx_check_append(bson_append_document_end(out, &child));
}

/*
 * Append key: {op: [a, b]}, where a and b are "$field" references, or a
 * field and NaN when "b" is NULL.
 */
static void
append_cmp(bson_t *out, const char *key, const char *op, const char *a,
		   const char *b)
{
	bson_t		child,
				args;

	idx_check_append(BSON_APPEND_DOCUMENT_BEGIN(out, key, &child));
	idx_check_append(IDX_BSON_APPEND_ARRAY_BEGIN(&child, op, &args));
	idx_check_append(BSON_APPEND_UTF8(&args, "0", a));
	if (b)
		idx_check_append(BSON_APPEND_UTF8(&args, "1", b));
	else
		idx_check_append(BSON_APPEND_DOUBLE(&args, "1", NAN));
	idx_check_append(bson_append_array_end(&child, &args));
	idx_check_append(bson_append_document_end(out, &child));
}

/*
 * Append key: PostgreSQL's "a < b" (or "a <= b" with "inclusive") on two
 * floats, where NaN sorts above every number and equals NaN; aggregation
 * comparisons put it below.  a < b: a is not NaN and (b is NaN or a < b);
 * a <= b: b is NaN or (a is not NaN and a <= b).
 */
static void
append_float_order(bson_t *out, const char *key, const char *a,
				   const char *b, bool inclusive)
{
	bson_t		child,
				outer,
				inner,
				branch;

	idx_check_append(BSON_APPEND_DOCUMENT_BEGIN(out, key, &child));
	idx_check_append(IDX_BSON_APPEND_ARRAY_BEGIN(&child, inclusive ? "$or" : "$and",
											 &outer));
	if (inclusive)
		append_cmp(&outer, "0", "$eq", b, NULL);
	else
		append_cmp(&outer, "0", "$ne", a, NULL);
	idx_check_append(BSON_APPEND_DOCUMENT_BEGIN(&outer, "1", &branch));
	idx_check_append(IDX_BSON_APPEND_ARRAY_BEGIN(&branch, inclusive ? "$and" : "$or",
											 &inner));
	if (inclusive)
	{
		append_cmp(&inner, "0", "$ne", a, NULL);
		append_cmp(&inner, "1", "$lte", a, b);
	}
	else
	{
		append_cmp(&inner, "0", "$eq", b, NULL);
		append_cmp(&inner, "1", "$lt", a, b);
	}
	idx_check_append(bson_append_array_end(&branch, &inner));
	idx_check_append(bson_append_document_end(&outer, &branch));
	idx_check_append(bson_append_array_end(&child, &outer));
	idx_check_append(bson_append_document_end(out, &child));
}

/*
 * Negate a comparison strategy (NOT a < b is a >= b on non-null values).
 */
static int
negate_strategy(int strategy)
{
	switch (strategy)
	{
		case BTLessStrategyNumber:
			return BTGreaterEqualStrategyNumber;
		case BTLessEqualStrategyNumber:
			return BTGreaterStrategyNumber;
		case BTEqualStrategyNumber:
			return IDX_STRATEGY_NE;
		case BTGreaterEqualStrategyNumber:
			return BTLessStrategyNumber;
		case BTGreaterStrategyNumber:
			return BTLessEqualStrategyNumber;
		default:
			return BTEqualStrategyNumber;
	}
}

/* aggregation comparison operators by btree strategy */
static const char *const strategy_ops[] = {NULL, "$lt", "$lte", "$eq", "$gte", "$gt"};

/*
 * Append an integer term as an aggregation expression under "key":
 * "$field", a number, {$add: [l, r]} or {$subtract: [l, r]}.
 */
static void
append_term(bson_t *out, const char *key, Expr *expr, const IdxTableInfo *info,
			Index relid)
{
	Var		   *var;
	int64		value;
	bool		is_plus = false;
	bson_t		child,
				args;

	expr = idx_strip_relabel(expr);
	if ((var = expr_column(expr, relid, info)) != NULL)
	{
		char	   *path = psprintf("$%s", info->fields[var->varattno - 1]);

		idx_check_append(BSON_APPEND_UTF8(out, key, path));
		pfree(path);
		return;
	}
	if (integer_const(expr, &value))
	{
		idx_check_append(BSON_APPEND_INT64(out, key, value));
		return;
	}
	if (!IsA(expr, OpExpr) ||
		!integer_plus_minus(get_opcode(((OpExpr *) expr)->opno), &is_plus))
		elog(ERROR, "unexpected expression in pushed-down filter");
	idx_check_append(BSON_APPEND_DOCUMENT_BEGIN(out, key, &child));
	idx_check_append(IDX_BSON_APPEND_ARRAY_BEGIN(&child, is_plus ? "$add" : "$subtract",
											 &args));
	append_term(&args, "0", linitial(((OpExpr *) expr)->args), info, relid);
	append_term(&args, "1", lsecond(((OpExpr *) expr)->args), info, relid);
	idx_check_append(bson_append_array_end(&child, &args));
	idx_check_append(bson_append_document_end(out, &child));
}

/*
 * Append {op: [term, bound]} as element "*index" of an array.
 */
static void
append_term_cmp(bson_t *array, uint32 *index, const char *op, Expr *term,
				int64 bound, const IdxTableInfo *info, Index relid)
{
	bson_t		child,
				args;
	char		key[16];

	snprintf(key, sizeof(key), "%u", (*index)++);
	idx_check_append(BSON_APPEND_DOCUMENT_BEGIN(array, key, &child));
	idx_check_append(IDX_BSON_APPEND_ARRAY_BEGIN(&child, op, &args));
	append_term(&args, "0", term, info, relid);
	idx_check_append(BSON_APPEND_INT64(&args, "1", bound));
	idx_check_append(bson_append_array_end(&child, &args));
	idx_check_append(bson_append_document_end(array, &child));
}

/*
 * Append to the $or array the alternatives that let a document through for
 * the local recheck: a field that is not a number within +-2^48, then
 * every int2/int4 step of "expr" outside its type's range.
 */
static void
append_arith_escapes(bson_t *array, uint32 *index, Expr *expr,
					 const IdxTableInfo *info, Index relid)
{
	OpExpr	   *op;
	int64		lo,
				hi;

	expr = idx_strip_relabel(expr);
	if (!IsA(expr, OpExpr))
		return;
	op = (OpExpr *) expr;
	append_arith_escapes(array, index, linitial(op->args), info, relid);
	append_arith_escapes(array, index, lsecond(op->args), info, relid);
	if (op->opresulttype == INT8OID)
		return;					/* within +-2^52: no int8 overflow */
	lo = op->opresulttype == INT2OID ? PG_INT16_MIN : PG_INT32_MIN;
	hi = op->opresulttype == INT2OID ? PG_INT16_MAX : PG_INT32_MAX;
	append_term_cmp(array, index, "$lt", expr, lo, info, relid);
	append_term_cmp(array, index, "$gt", expr, hi, info, relid);
}

/*
 * Append key: {op: [path, bound]}.
 */
static void
append_path_bound(bson_t *out, const char *key, const char *op,
				  const char *path, int64 bound)
{
	bson_t		cmp,
				args;

	idx_check_append(BSON_APPEND_DOCUMENT_BEGIN(out, key, &cmp));
	idx_check_append(IDX_BSON_APPEND_ARRAY_BEGIN(&cmp, op, &args));
	idx_check_append(BSON_APPEND_UTF8(&args, "0", path));
	idx_check_append(BSON_APPEND_INT64(&args, "1", bound));
	idx_check_append(bson_append_array_end(&cmp, &args));
	idx_check_append(bson_append_document_end(out, &cmp));
}

/*
 * Append {$not: [{$and: [{$gte: ["$f", -2^48]}, {$lte: ["$f", 2^48]}]}]}
 * as element "*index" of an array: the field is no number within range
 * (strings, dates and booleans sort above numbers, null below).
 */
static void
append_out_of_bound(bson_t *array, uint32 *index, const char *field)
{
	bson_t		not,
				list,
				and,
				both;
	char		key[16];
	char	   *path = psprintf("$%s", field);

	snprintf(key, sizeof(key), "%u", (*index)++);
	idx_check_append(BSON_APPEND_DOCUMENT_BEGIN(array, key, &not));
	idx_check_append(IDX_BSON_APPEND_ARRAY_BEGIN(&not, "$not", &list));
	idx_check_append(BSON_APPEND_DOCUMENT_BEGIN(&list, "0", &and));
	idx_check_append(IDX_BSON_APPEND_ARRAY_BEGIN(&and, "$and", &both));
	append_path_bound(&both, "0", "$gte", path, -ARITH_BOUND);
	append_path_bound(&both, "1", "$lte", path, ARITH_BOUND);
	idx_check_append(bson_append_array_end(&and, &both));
	idx_check_append(bson_append_document_end(&list, &and));
	idx_check_append(bson_append_array_end(&not, &list));
	idx_check_append(bson_append_document_end(array, &not));
	pfree(path);
}

/*
 * Translate a comparison of integer arithmetic (see the file header): the
 * fields not null, and {$expr: {$or: [escapes..., comparison]}}.
 */
static void
build_arith_comparison(ArithComparison *a, bool truth, bson_t *out,
					   Index relid, const IdxTableInfo *info)
{
	int			strategy = truth ? a->strategy : negate_strategy(a->strategy);
	bson_t		expr,
				array,
				cmp,
				args;
	uint32		index = 0;
	char		key[16];
	ListCell   *lc;

	foreach(lc, a->fields)
		append_not_null(out, strVal(lfirst(lc)));
	idx_check_append(BSON_APPEND_DOCUMENT_BEGIN(out, "$expr", &expr));
	idx_check_append(IDX_BSON_APPEND_ARRAY_BEGIN(&expr, "$or", &array));
	foreach(lc, a->fields)
		append_out_of_bound(&array, &index, strVal(lfirst(lc)));
	append_arith_escapes(&array, &index, a->left, info, relid);
	append_arith_escapes(&array, &index, a->right, info, relid);
	snprintf(key, sizeof(key), "%u", index);
	idx_check_append(BSON_APPEND_DOCUMENT_BEGIN(&array, key, &cmp));
	idx_check_append(IDX_BSON_APPEND_ARRAY_BEGIN(&cmp, strategy == IDX_STRATEGY_NE ?
											 "$ne" : strategy_ops[strategy],
											 &args));
	append_term(&args, "0", a->left, info, relid);
	append_term(&args, "1", a->right, info, relid);
	idx_check_append(bson_append_array_end(&cmp, &args));
	idx_check_append(bson_append_document_end(&array, &cmp));
	idx_check_append(bson_append_array_end(&expr, &array));
	idx_check_append(bson_append_document_end(out, &expr));
}

/*
 * Translate a comparison of two columns, or of integer arithmetic, for
 * truth value "truth" (T or F, see deparse.c) into the fields of one query
 * document: the fields not null, and the $expr.
 */
void
idx_build_column_comparison(OpExpr *op, bool truth, bson_t *out, Index relid,
							const IdxTableInfo *info)
{
	ColumnComparison c;
	ArithComparison arith;
	const char *left,
			   *right;
	char	   *a,
			   *b;
	int			strategy;

	if (!parse_column_comparison(op, relid, info, &c))
	{
		if (!parse_arith_comparison(op, relid, info, &arith))
			elog(ERROR, "unexpected clause in pushed-down filter");
		build_arith_comparison(&arith, truth, out, relid, info);
		return;
	}
	left = info->fields[c.left->varattno - 1];
	right = info->fields[c.right->varattno - 1];
	append_not_null(out, left);
	if (strcmp(left, right) != 0)
		append_not_null(out, right);

	a = psprintf("$%s", left);
	b = psprintf("$%s", right);
	strategy = truth ? c.strategy : negate_strategy(c.strategy);
	if (strategy == IDX_STRATEGY_NE)
		append_cmp(out, "$expr", "$ne", a, b);
	else if (!c.is_float || strategy == BTEqualStrategyNumber)
		append_cmp(out, "$expr", strategy_ops[strategy], a, b);
	else if (strategy < BTEqualStrategyNumber)
		append_float_order(out, "$expr", a, b,
						   strategy == BTLessEqualStrategyNumber);
	else
		append_float_order(out, "$expr", b, a,
						   strategy == BTGreaterEqualStrategyNumber);
	pfree(a);
	pfree(b);
}
