/*-------------------------------------------------------------------------
 *
 * deparse_expr.c
 *		  Comparisons of two columns of the scanned table as MongoDB $expr
 *		  filters.
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
 * Arithmetic (a + 1 < b) is not pushed: PostgreSQL raises an error on
 * integer overflow where MongoDB widens to int64 or double.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <math.h>

#include "access/stratnum.h"
#include "catalog/pg_type.h"
#include "utils/lsyscache.h"

#include "convert.h"
#include "deparse.h"

/* A comparison of two columns, taken apart */
typedef struct ColumnComparison
{
	Var		   *left;
	Var		   *right;
	int			strategy;		/* BT*StrategyNumber or ROWCOMPARE_NE */
	bool		is_float;
} ColumnComparison;

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
	List	   *interps;
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
	interps = get_op_btree_interpretation(op->opno);
	if (interps == NIL)
		return false;
	out->strategy = ((OpBtreeInterpretation *) linitial(interps))->strategy;
	out->is_float = (family == FLOAT8OID);
	return out->strategy == ROWCOMPARE_NE ||
		(out->strategy >= BTLessStrategyNumber &&
		 out->strategy <= BTGreaterStrategyNumber);
}

/*
 * Plan time: is "op" a comparison of two columns that can be pushed as an
 * $expr filter?  It is then exact (see the file header).
 */
IdxPushKind
idx_classify_column_comparison(OpExpr *op, Index relid,
							   const IdxTableInfo *info)
{
	ColumnComparison c;

	return parse_column_comparison(op, relid, info, &c)
		? IDX_PUSH_EXACT : IDX_PUSH_NONE;
}

/*
 * The field of the left column of a pushed column comparison (a top-level
 * field: no guard for paths through arrays is needed).
 */
const char *
idx_column_comparison_field(OpExpr *op, Index relid, const IdxTableInfo *info)
{
	ColumnComparison c;

	if (!parse_column_comparison(op, relid, info, &c))
		elog(ERROR, "unexpected clause in pushed-down filter");
	return info->fields[c.left->varattno - 1];
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
	idx_check_append(BSON_APPEND_ARRAY_BEGIN(&child, op, &args));
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
	idx_check_append(BSON_APPEND_ARRAY_BEGIN(&child, inclusive ? "$or" : "$and",
											 &outer));
	if (inclusive)
		append_cmp(&outer, "0", "$eq", b, NULL);
	else
		append_cmp(&outer, "0", "$ne", a, NULL);
	idx_check_append(BSON_APPEND_DOCUMENT_BEGIN(&outer, "1", &branch));
	idx_check_append(BSON_APPEND_ARRAY_BEGIN(&branch, inclusive ? "$and" : "$or",
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
			return ROWCOMPARE_NE;
		case BTGreaterEqualStrategyNumber:
			return BTLessStrategyNumber;
		case BTGreaterStrategyNumber:
			return BTLessEqualStrategyNumber;
		default:
			return BTEqualStrategyNumber;
	}
}

/*
 * Translate a comparison of two columns for truth value "truth" (T or F,
 * see deparse.c) into the fields of one query document: both fields not
 * null, and the $expr.
 */
void
idx_build_column_comparison(OpExpr *op, bool truth, bson_t *out, Index relid,
							const IdxTableInfo *info)
{
	static const char *const ops[] = {NULL, "$lt", "$lte", "$eq", "$gte", "$gt"};
	ColumnComparison c;
	const char *left,
			   *right;
	char	   *a,
			   *b;
	int			strategy;

	if (!parse_column_comparison(op, relid, info, &c))
		elog(ERROR, "unexpected clause in pushed-down filter");
	left = info->fields[c.left->varattno - 1];
	right = info->fields[c.right->varattno - 1];
	append_not_null(out, left);
	if (strcmp(left, right) != 0)
		append_not_null(out, right);

	a = psprintf("$%s", left);
	b = psprintf("$%s", right);
	strategy = truth ? c.strategy : negate_strategy(c.strategy);
	if (strategy == ROWCOMPARE_NE)
		append_cmp(out, "$expr", "$ne", a, b);
	else if (!c.is_float || strategy == BTEqualStrategyNumber)
		append_cmp(out, "$expr", ops[strategy], a, b);
	else if (strategy < BTEqualStrategyNumber)
		append_float_order(out, "$expr", a, b,
						   strategy == BTLessEqualStrategyNumber);
	else
		append_float_order(out, "$expr", b, a,
						   strategy == BTGreaterEqualStrategyNumber);
	pfree(a);
	pfree(b);
}
