/*-------------------------------------------------------------------------
 *
 * deparse.c
 *		  Translate WHERE clauses into MongoDB find filters.
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/core/deparse.c
 *
 * PostgreSQL evaluates a WHERE clause in three-valued logic, MongoDB's
 * match is two-valued and has its own rules for null, missing fields and
 * values of other types.  To push NOT and OR down without changing results,
 * every clause is translated twice: T(e) selects the documents on which e
 * is TRUE and F(e) those on which e is FALSE (neither selects the rows on
 * which e is NULL).  Then T(NOT e) = F(e), T(a AND b) = T(a) AND T(b),
 * F(a AND b) = F(a) OR F(b), and so on.
 *
 * A clause is pushed only if its comparison means the same in MongoDB:
 *	- integers (int2/int4/int8, also across those types): all comparisons;
 *	  MongoDB compares int32, int64 and double by value;
 *	- float4/float8: all comparisons; PostgreSQL sorts NaN above every
 *	  number, MongoDB below, so ranges name NaN explicitly (append_float_range);
 *	- text/varchar: = and <> under a deterministic collation, ranges only
 *	  under a collation that orders as bytes (MongoDB compares UTF-8 bytes;
 *	  core/collate_bytes.h), in a UTF-8 database;
 *	- boolean, uuid, timestamp, timestamptz, date: all comparisons of
 *	  values of the column's own type;
 *	- IS [NOT] NULL on any scalar column (MongoDB's {f: null} matches null
 *	  and missing, which both read as SQL NULL);
 *	- IN / = ANY(array) and <> ALL(array) of the above;
 *	- comparisons of two columns (deparse_expr.c).
 * In a conjunction, a lower and an upper bound on one field become one
 * condition document {f: {$gt: a, $lt: b}} (pair_range_bounds).
 * numeric, bpchar, bytea, json, jsonb and array columns are compared
 * locally (bytea reads a binary of any subtype, and MongoDB's equality
 * would compare the subtype too: {b: BinData(0, x)} misses BinData(3, x)).
 *
 * undefined (deprecated BSON) reads as SQL NULL too, but from MongoDB 8.0
 * on {f: null}, $eq/$in with null no longer match it and $ne/$nin with null
 * do (8.0 compatibility notes).  So the null forms name it explicitly, in
 * forms that select the same documents on 6.0, 7.0 and 8.0: IS NULL is
 * {$or: [{f: null}, {f: {$type: "undefined"}}]}, and every form meant to
 * exclude null ($ne, $nin with null) also has {$not: {$type: "undefined"}}.
 *
 * A dotted path that crosses an array has one value per element in
 * MongoDB's matcher, and a scalar column cannot read such a document
 * (convert_path.h: an error).  Such documents must come back, so that the
 * error is raised as it would be with the clause evaluated locally: a
 * clause on a dotted path "a.b.c" is {$or: [clause, {a: {$type: "array"}},
 * {"a.b": {$type: "array"}}]}.
 *
 * Text columns may hold ObjectIds (read as 24 hex digits), so an equality
 * with such a string also matches the ObjectId, and a text range is a range
 * of the strings or one of the ObjectIds (deparse_text.c).  Constants that BSON
 * cannot hold exactly (sub-millisecond timestamps, NaN) are not pushed;
 * parameters are only known at execution, so clauses with parameters are
 * always rechecked locally and an inexact parameter value matches all.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <math.h>

#include "access/stratnum.h"
#include "access/sysattr.h"
#include "catalog/pg_collation.h"
#include "catalog/pg_type.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "nodes/nodeFuncs.h"
#include "optimizer/optimizer.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/pg_locale.h"

#include "core/clause_shape.h"
#include "core/collate_bytes.h"
#include "core/convert.h"
#include "core/deparse.h"
#include "core/pg_compat.h"

/* Comparison strategies we translate */
typedef enum IdxCmp
{
	CMP_EQ,
	CMP_NE,
	CMP_LT,
	CMP_LE,
	CMP_GT,
	CMP_GE
} IdxCmp;

/* What a column's type allows */
typedef enum IdxColKind
{
	KIND_NONE,					/* nothing pushed */
	KIND_NULLTEST_ONLY,			/* scalar, but comparisons stay local */
	KIND_ORDERED,				/* all comparisons */
	KIND_FLOAT,					/* all comparisons, NaN named explicitly */
	KIND_TEXT					/* depends on the collation */
} IdxColKind;

/*
 * A "column op value" comparison taken apart.
 */
typedef struct IdxComparison
{
	Var		   *var;
	Expr	   *value;			/* Const or Param (relabels stripped) */
	IdxCmp		cmp;
	bool		is_text;
	bool		is_float;
} IdxComparison;

/*
 * One bound of a range on a field, as MongoDB must apply it: "op" is the
 * comparison after NOT has been applied (CMP_LT to CMP_GE).
 */
typedef struct IdxBound
{
	IdxCmp		op;
	Datum		value;
	Oid			type;
} IdxBound;

/* MongoDB's operator for each range comparison, and each one's negation */
static const char *const range_ops[] = {NULL, NULL, "$lt", "$lte", "$gt", "$gte"};
static const IdxCmp negated_cmp[] = {CMP_NE, CMP_EQ, CMP_GE, CMP_GT, CMP_LE, CMP_LT};

/* Execution-time state of the filter builder */
typedef struct BuildContext
{
	Index		relid;			/* range table index the Vars use */
	const IdxTableInfo *info;
	const IdxParamValues *params;
	const char *bracket_field;	/* text ranges on this field keep ... */
	IdxTextBracket bracket;		/* ... only this bracket's branch */
} BuildContext;

static void build_clause(Expr *expr, Expr *pair, bool truth, bson_t *out,
						 BuildContext *ctx);
static void build_leaf(Expr *expr, bool truth, bson_t *out,
					   BuildContext *ctx);

/*
 * Is "expr" a plain user column of the scanned relation?
 */
static Var *
column_var(Expr *expr, Index relid)
{
	expr = idx_strip_relabel(expr);
	if (expr && IsA(expr, Var))
	{
		Var		   *var = (Var *) expr;

		if (var->varno == relid && var->varlevelsup == 0 && var->varattno > 0)
			return var;
	}
	return NULL;
}

/*
 * Is "expr" a value known before the scan starts: a Const or a Param?
 */
static Expr *
value_expr(Expr *expr)
{
	expr = idx_strip_relabel(expr);
	if (expr && (IsA(expr, Const) || IsA(expr, Param)))
		return expr;
	return NULL;
}

/*
 * The type of a column as stored (before any relabel in the expression).
 */
static Oid
var_type(Var *var)
{
	return var->vartype;
}

/*
 * What comparisons does the column's type allow to push down?
 */
static IdxColKind
column_kind(Oid typid)
{
	switch (typid)
	{
		case INT2OID:
		case INT4OID:
		case INT8OID:
		case BOOLOID:
		case TIMESTAMPOID:
		case TIMESTAMPTZOID:
		case DATEOID:
		case UUIDOID:
			return KIND_ORDERED;
		case FLOAT4OID:
		case FLOAT8OID:
			return KIND_FLOAT;
		case TEXTOID:
		case VARCHAROID:
			return KIND_TEXT;
		case NUMERICOID:
		case BPCHAROID:
		case BYTEAOID:			/* reads any binary subtype, compares one */
			return KIND_NULLTEST_ONLY;
		default:
			return KIND_NONE;
	}
}

/*
 * The btree strategy of an operator, as one of our comparisons.
 */
static bool
operator_comparison(Oid opno, IdxCmp *cmp)
{
	switch (idx_op_btree_strategy(opno))
	{
		case BTEqualStrategyNumber:
			*cmp = CMP_EQ;
			break;
		case IDX_STRATEGY_NE:
			*cmp = CMP_NE;
			break;
		case BTLessStrategyNumber:
			*cmp = CMP_LT;
			break;
		case BTLessEqualStrategyNumber:
			*cmp = CMP_LE;
			break;
		case BTGreaterStrategyNumber:
			*cmp = CMP_GT;
			break;
		case BTGreaterEqualStrategyNumber:
			*cmp = CMP_GE;
			break;
		default:
			return false;
	}
	return true;
}

/*
 * Does the column kind allow comparison "cmp" under collation "collid"?
 * Returns NONE or EXACT.
 */
static IdxPushKind
comparison_pushability(IdxColKind kind, IdxCmp cmp, Oid collid)
{
	bool		is_equality = (cmp == CMP_EQ || cmp == CMP_NE);

	switch (kind)
	{
		case KIND_ORDERED:
		case KIND_FLOAT:
			return IDX_PUSH_EXACT;
		case KIND_TEXT:
			if (GetDatabaseEncoding() != PG_UTF8 || !OidIsValid(collid))
				return IDX_PUSH_NONE;
			if (is_equality)
				return get_collation_isdeterministic(collid)
					? IDX_PUSH_EXACT : IDX_PUSH_NONE;
			return idx_collation_bytewise(collid) ?
				IDX_PUSH_EXACT : IDX_PUSH_NONE;
		default:
			return IDX_PUSH_NONE;
	}
}

/*
 * Take apart "column op value" (in either order).  Returns false if the
 * expression has another shape.
 */
static bool
parse_comparison(OpExpr *op, Index relid, IdxComparison *out)
{
	IdxSplitComparison split;

	if (!idx_split_comparison(op, relid, &split))
		return false;
	out->var = column_var(split.operand, relid);
	out->value = value_expr(split.other);
	if (out->var == NULL || out->value == NULL ||
		!operator_comparison(split.opno, &out->cmp))
		return false;
	out->is_text = column_kind(var_type(out->var)) == KIND_TEXT;
	out->is_float = column_kind(var_type(out->var)) == KIND_FLOAT;
	return idx_compatible_types(var_type(out->var), exprType((Node *) out->value));
}

/*
 * Is a float NaN?
 */
static bool
float_is_nan(Datum value, Oid type)
{
	if (type == FLOAT4OID)
		return isnan(DatumGetFloat4(value));
	if (type == FLOAT8OID)
		return isnan(DatumGetFloat8(value));
	return false;
}

/*
 * Can a filter compare with "value" as PostgreSQL would?  NaN can: the
 * filter builder names it explicitly (append_float_range); $eq, $in and
 * $nin treat NaN as equal to NaN, as PostgreSQL does.
 */
static bool
value_is_exact(Datum value, Oid type)
{
	return float_is_nan(value, type) || idx_datum_is_exact_in_bson(value, type);
}

/*
 * Is a Const value representable exactly in BSON?  Params are checked at
 * execution time; the clause is then LOSSY.
 */
static IdxPushKind
value_pushability(Expr *value)
{
	if (IsA(value, Param))
		return IDX_PUSH_LOSSY;
	if (((Const *) value)->constisnull)
		return IDX_PUSH_EXACT;
	return value_is_exact(((Const *) value)->constvalue,
						  ((Const *) value)->consttype)
		? IDX_PUSH_EXACT : IDX_PUSH_NONE;
}

/*
 * Classify an array constant for = ANY / <> ALL: every element must be
 * exactly representable.
 */
static IdxPushKind
array_pushability(Expr *value)
{
	Const	   *c;
	ArrayType  *arr;
	Datum	   *elems;
	bool	   *nulls;
	int			nelems;
	int16		elmlen;
	bool		elmbyval;
	char		elmalign;
	int			i;

	if (IsA(value, Param))
		return IDX_PUSH_LOSSY;
	c = (Const *) value;
	if (c->constisnull)
		return IDX_PUSH_EXACT;
	arr = DatumGetArrayTypeP(c->constvalue);
	get_typlenbyvalalign(ARR_ELEMTYPE(arr), &elmlen, &elmbyval, &elmalign);
	deconstruct_array(arr, ARR_ELEMTYPE(arr), elmlen, elmbyval, elmalign,
					  &elems, &nulls, &nelems);
	for (i = 0; i < nelems; i++)
	{
		if (!nulls[i] && !value_is_exact(elems[i], ARR_ELEMTYPE(arr)))
			return IDX_PUSH_NONE;
	}
	return IDX_PUSH_EXACT;
}

/*
 * Take apart "column = ANY(array)" or "column <> ALL(array)".
 */
static bool
parse_array_comparison(ScalarArrayOpExpr *saop, Index relid,
					   IdxComparison *out)
{
	Oid			elemtype;

	if (list_length(saop->args) != 2)
		return false;
	out->var = column_var(linitial(saop->args), relid);
	out->value = value_expr(lsecond(saop->args));
	if (out->var == NULL || out->value == NULL)
		return false;
	if (!operator_comparison(saop->opno, &out->cmp))
		return false;
	if (!((saop->useOr && out->cmp == CMP_EQ) ||
		  (!saop->useOr && out->cmp == CMP_NE)))
		return false;
	elemtype = get_element_type(exprType((Node *) out->value));
	out->is_text = column_kind(var_type(out->var)) == KIND_TEXT;
	out->is_float = column_kind(var_type(out->var)) == KIND_FLOAT;
	return OidIsValid(elemtype) && idx_compatible_types(var_type(out->var), elemtype);
}

/*
 * The weaker of two pushabilities.
 */
static IdxPushKind
weaker(IdxPushKind a, IdxPushKind b)
{
	return a < b ? a : b;
}

/*
 * Plan time: can "clause" be pushed down, and exactly?
 */
IdxPushKind
idx_classify_clause(Expr *clause, Index relid, const IdxTableInfo *info)
{
	IdxComparison c;

	if (clause == NULL)
		return IDX_PUSH_NONE;

	switch (nodeTag(clause))
	{
		case T_Var:
			{
				Var		   *var = column_var(clause, relid);

				return var && var_type(var) == BOOLOID
					? IDX_PUSH_EXACT : IDX_PUSH_NONE;
			}
		case T_BoolExpr:
			{
				BoolExpr   *b = (BoolExpr *) clause;
				IdxPushKind result = IDX_PUSH_EXACT;
				ListCell   *lc;

				foreach(lc, b->args)
					result = weaker(result,
									idx_classify_clause(lfirst(lc), relid, info));
				return result;
			}
		case T_NullTest:
			{
				NullTest   *nt = (NullTest *) clause;
				Var		   *var = column_var(nt->arg, relid);

				if (var == NULL || nt->argisrow ||
					column_kind(var_type(var)) == KIND_NONE)
					return IDX_PUSH_NONE;
				return IDX_PUSH_EXACT;
			}
		case T_OpExpr:
			{
				OpExpr	   *op = (OpExpr *) clause;

				if (!parse_comparison(op, relid, &c))
					return idx_classify_column_comparison(op, relid, info);
				return weaker(comparison_pushability(column_kind(var_type(c.var)),
													 c.cmp, op->inputcollid),
							  value_pushability(c.value));
			}
		case T_ScalarArrayOpExpr:
			{
				ScalarArrayOpExpr *saop = (ScalarArrayOpExpr *) clause;

				if (!parse_array_comparison(saop, relid, &c))
					return IDX_PUSH_NONE;
				return weaker(comparison_pushability(column_kind(var_type(c.var)),
													 c.cmp, saop->inputcollid),
							  array_pushability(c.value));
			}
		default:
			return IDX_PUSH_NONE;
	}
}

/*
 * If "clause" (already known to be pushed down) is "_id = value" or
 * "_id = ANY(array)", the number of values it names, else -1.  Used for row
 * estimates and EXPLAIN.
 */
int
idx_id_lookup_count(Expr *clause, Index relid, const IdxTableInfo *info)
{
	IdxComparison c;

	if (info->id_attnum == InvalidAttrNumber)
		return -1;
	if (IsA(clause, OpExpr))
	{
		if (parse_comparison((OpExpr *) clause, relid, &c) &&
			c.cmp == CMP_EQ && c.var->varattno == info->id_attnum)
			return 1;
	}
	else if (IsA(clause, ScalarArrayOpExpr))
	{
		ScalarArrayOpExpr *saop = (ScalarArrayOpExpr *) clause;

		if (parse_array_comparison(saop, relid, &c) && c.cmp == CMP_EQ &&
			c.var->varattno == info->id_attnum)
		{
			Const	   *array = (Const *) c.value;

			if (IsA(array, Const) && !array->constisnull)
			{
				ArrayType  *arr = DatumGetArrayTypeP(array->constvalue);

				return ArrayGetNItems(ARR_NDIM(arr), ARR_DIMS(arr));
			}
			/* a parameter: assume a short list */
			return 10;
		}
	}
	return -1;
}

/*
 * Walker for idx_collect_params.
 */
static bool
collect_params_walker(Node *node, List **params)
{
	if (node == NULL)
		return false;
	if (IsA(node, Param))
	{
		ListCell   *lc;

		foreach(lc, *params)
		{
			Param	   *p = lfirst(lc);

			if (p->paramkind == ((Param *) node)->paramkind &&
				p->paramid == ((Param *) node)->paramid)
				return false;
		}
		*params = lappend(*params, node);
		return false;
	}
	return expression_tree_walker(node, collect_params_walker, params);
}

/*
 * The distinct Params in "conds", in order of appearance.
 */
List *
idx_collect_params(List *conds)
{
	List	   *params = NIL;

	collect_params_walker((Node *) conds, &params);
	return params;
}

/*
 * The field path of a column.
 */
static const char *
var_field(Var *var, BuildContext *ctx)
{
	return ctx->info->fields[var->varattno - 1];
}

/*
 * The bracket text ranges on "field" keep (idx_build_filter_bracketed).
 */
static IdxTextBracket
field_bracket(const char *field, BuildContext *ctx)
{
	if (ctx->bracket_field != NULL && strcmp(field, ctx->bracket_field) == 0)
		return ctx->bracket;
	return IDX_TEXT_BOTH;
}

/*
 * Append a filter that matches no document.
 */
static void
append_match_nothing(bson_t *out)
{
	bson_t		child,
				array;

	idx_check_append(BSON_APPEND_DOCUMENT_BEGIN(out, IDX_ID_FIELD, &child));
	idx_check_append(IDX_BSON_APPEND_ARRAY_BEGIN(&child, "$in", &array));
	idx_check_append(bson_append_array_end(&child, &array));
	idx_check_append(bson_append_document_end(out, &child));
}

/*
 * Find the value of a Param for this execution; returns false with
 * placeholders.
 */
static bool
param_value(Param *param, BuildContext *ctx, Datum *value, bool *isnull)
{
	const IdxParamValues *pv = ctx->params;
	ListCell   *lc;
	int			i = 0;

	if (pv == NULL || pv->placeholders)
		return false;
	foreach(lc, pv->params)
	{
		Param	   *p = lfirst(lc);

		if (p->paramkind == param->paramkind && p->paramid == param->paramid)
		{
			*value = pv->values[i];
			*isnull = pv->nulls[i];
			return true;
		}
		i++;
	}
	elog(ERROR, "parameter $%d not found for pushed-down filter",
		 param->paramid);
	return false;				/* keep compiler quiet */
}

/*
 * The placeholder shown in EXPLAIN for a parameter.
 */
static char *
param_placeholder(Param *param)
{
	if (param->paramkind == PARAM_EXTERN)
		return psprintf("$%d", param->paramid);
	return psprintf("$exec%d", param->paramid);
}

/*
 * Is "s" exactly what an ObjectId reads as (24 lowercase hex digits)?
 */
static bool
looks_like_objectid(const char *s)
{
	int			i;

	for (i = 0; i < 24; i++)
	{
		if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
			return false;
	}
	return s[24] == '\0';
}

/*
 * Append a value to a BSON array under key "key".  For text compared with a
 * text column, a string that reads like an ObjectId is followed by the
 * ObjectId itself (both read as the same text).  Returns the next index.
 */
static uint32
append_value_to_array(bson_t *array, uint32 index, Datum value, Oid type,
					  bool is_text)
{
	char		key[16];

	snprintf(key, sizeof(key), "%u", index++);
	idx_append_datum(array, key, -1, value, false, type);
	if (is_text)
	{
		char	   *s = TextDatumGetCString(value);

		if (looks_like_objectid(s))
		{
			bson_oid_t	oid;

			bson_oid_init_from_string(&oid, s);
			snprintf(key, sizeof(key), "%u", index++);
			idx_check_append(BSON_APPEND_OID(array, key, &oid));
		}
	}
	return index;
}

/*
 * Append "$not": {"$type": "undefined"} to a condition document: with null
 * excluded, undefined (read as NULL too) must be excluded as well.
 */
static void
append_not_undefined(bson_t *cond)
{
	bson_t		child;

	idx_check_append(BSON_APPEND_DOCUMENT_BEGIN(cond, "$not", &child));
	idx_check_append(BSON_APPEND_UTF8(&child, "$type", "undefined"));
	idx_check_append(bson_append_document_end(cond, &child));
}

/*
 * Append {$or: [{field: null}, {field: {$type: "undefined"}}]}: the
 * documents whose field reads as SQL NULL, on MongoDB 6.0 to 8.0.
 */
static void
append_is_null(bson_t *out, const char *field)
{
	bson_t		array,
				branch,
				child;

	idx_check_append(IDX_BSON_APPEND_ARRAY_BEGIN(out, "$or", &array));
	idx_check_append(BSON_APPEND_DOCUMENT_BEGIN(&array, "0", &branch));
	idx_check_append(BSON_APPEND_NULL(&branch, field));
	idx_check_append(bson_append_document_end(&array, &branch));
	idx_check_append(BSON_APPEND_DOCUMENT_BEGIN(&array, "1", &branch));
	idx_check_append(BSON_APPEND_DOCUMENT_BEGIN(&branch, field, &child));
	idx_check_append(BSON_APPEND_UTF8(&child, "$type", "undefined"));
	idx_check_append(bson_append_document_end(&branch, &child));
	idx_check_append(bson_append_document_end(&array, &branch));
	idx_check_append(bson_append_array_end(out, &array));
}

/*
 * Append {field: {op: [values..., (null)]}} for $in / $nin.
 */
static void
append_in_list(bson_t *out, const char *field, const char *op,
			   Datum *values, int nvalues, Oid type, bool is_text,
			   bool add_null)
{
	bson_t		child,
				array;
	uint32		index = 0;
	int			i;

	idx_check_append(BSON_APPEND_DOCUMENT_BEGIN(out, field, &child));
	idx_check_append(IDX_BSON_APPEND_ARRAY_BEGIN(&child, op, &array));
	for (i = 0; i < nvalues; i++)
		index = append_value_to_array(&array, index, values[i], type, is_text);
	if (add_null)
	{
		char		key[16];

		snprintf(key, sizeof(key), "%u", index);
		idx_check_append(BSON_APPEND_NULL(&array, key));
	}
	idx_check_append(bson_append_array_end(&child, &array));
	if (add_null)
		append_not_undefined(&child);
	idx_check_append(bson_append_document_end(out, &child));
}

/*
 * Append {field: {op: value, ...}} for one or two bounds (a merged range,
 * which MongoDB serves as one index interval); text ranges select strings
 * and ObjectIds, or one of them in "bracket" (deparse_text.c).
 */
static void
append_range(bson_t *out, const char *field, const IdxBound *bounds,
			 int nbounds, bool is_text, IdxTextBracket bracket)
{
	bson_t		child;
	int			i;

	if (is_text)
	{
		const char *ops[2];
		Datum		values[2];

		for (i = 0; i < nbounds; i++)
		{
			ops[i] = range_ops[bounds[i].op];
			values[i] = bounds[i].value;
		}
		idx_append_text_range(out, field, ops, values, nbounds, bracket);
		return;
	}
	idx_check_append(BSON_APPEND_DOCUMENT_BEGIN(out, field, &child));
	for (i = 0; i < nbounds; i++)
		idx_append_datum(&child, range_ops[bounds[i].op], -1, bounds[i].value,
						 false, bounds[i].type);
	idx_check_append(bson_append_document_end(out, &child));
}

/*
 * Append {field: {$eq: NaN}}.
 */
static void
append_is_nan(bson_t *out, const char *field)
{
	bson_t		child;

	idx_check_append(BSON_APPEND_DOCUMENT_BEGIN(out, field, &child));
	idx_check_append(BSON_APPEND_DOUBLE(&child, "$eq", NAN));
	idx_check_append(bson_append_document_end(out, &child));
}

/*
 * Append a one-sided range on a float column.  PostgreSQL sorts NaN above
 * every number and finds it equal to itself; MongoDB's $lt and $gt never
 * match NaN, and its $lte and $gte match it only against NaN (mongod's
 * src/mongo/db/matcher/expression_leaf.cpp, ComparisonMatchExpression::
 * matchesSingleElement; index bounds agree, NaN sorting below -Infinity).
 * So a lower bound adds {field: {$eq: NaN}}, and a bound at NaN becomes:
 * "> NaN" nothing, ">= NaN" {$eq: NaN}, "< NaN" every number
 * ({$gte: -Infinity}), "<= NaN" every number or NaN.
 */
static void
append_float_range(bson_t *out, const char *field, const IdxBound *bound)
{
	bool		nan = float_is_nan(bound->value, bound->type);
	bool		add_nan = nan ? bound->op == CMP_LE :
		(bound->op == CMP_GT || bound->op == CMP_GE);
	IdxBound	numbers = {CMP_GE, Float8GetDatum(-INFINITY), FLOAT8OID};
	bson_t		array,
				branch;

	if (nan && bound->op == CMP_GT)
	{
		append_match_nothing(out);
		return;
	}
	if (nan && bound->op == CMP_GE)
	{
		append_is_nan(out, field);
		return;
	}
	if (!add_nan)
	{
		append_range(out, field, nan ? &numbers : bound, 1, false,
					 IDX_TEXT_BOTH);
		return;
	}
	idx_check_append(IDX_BSON_APPEND_ARRAY_BEGIN(out, "$or", &array));
	idx_check_append(BSON_APPEND_DOCUMENT_BEGIN(&array, "0", &branch));
	append_range(&branch, field, nan ? &numbers : bound, 1, false,
				 IDX_TEXT_BOTH);
	idx_check_append(bson_append_document_end(&array, &branch));
	idx_check_append(BSON_APPEND_DOCUMENT_BEGIN(&array, "1", &branch));
	append_is_nan(&branch, field);
	idx_check_append(bson_append_document_end(&array, &branch));
	idx_check_append(bson_append_array_end(out, &array));
}

/*
 * Translate a comparison with one known, non-null, exact value.  "truth"
 * selects T or F.  Equality and inequality go through $in / $nin so that
 * the ObjectId alternative and the exclusion of null are uniform.
 */
static void
build_comparison(const char *field, IdxCmp cmp, bool truth, Datum value,
				 Oid type, bool is_text, bool is_float, IdxTextBracket bracket,
				 bson_t *out)
{
	IdxBound	bound;

	if (cmp == CMP_EQ || cmp == CMP_NE)
	{
		bool		positive = (cmp == CMP_EQ) == truth;

		if (positive &&
			!(is_text && looks_like_objectid(TextDatumGetCString(value))))
		{
			bson_t		child;

			/* plain {field: {$eq: v}}, the form every MongoDB index serves */
			idx_check_append(BSON_APPEND_DOCUMENT_BEGIN(out, field, &child));
			idx_append_datum(&child, "$eq", -1, value, false, type);
			idx_check_append(bson_append_document_end(out, &child));
		}
		else
			append_in_list(out, field, positive ? "$in" : "$nin", &value, 1,
						   type, is_text, !positive);
		return;
	}
	bound.op = truth ? cmp : negated_cmp[cmp];
	bound.value = value;
	bound.type = type;
	if (is_float)
		append_float_range(out, field, &bound);
	else
		append_range(out, field, &bound, 1, is_text, bracket);
}

/*
 * Resolve a Const or Param to a value.  Returns false if it is a
 * placeholder (EXPLAIN without execution).
 */
static bool
resolve_value(Expr *value, BuildContext *ctx, Datum *datum, bool *isnull)
{
	if (IsA(value, Const))
	{
		*datum = ((Const *) value)->constvalue;
		*isnull = ((Const *) value)->constisnull;
		return true;
	}
	return param_value((Param *) value, ctx, datum, isnull);
}

/*
 * Append {field: "$n"}, {field: {op: "$n"}}: how EXPLAIN shows a comparison
 * with a parameter whose value is not known yet.
 */
static void
build_placeholder(const char *field, IdxCmp cmp, bool truth, Param *param,
				  bson_t *out)
{
	static const char *const ops[] = {"$eq", "$ne", "$lt", "$lte", "$gt", "$gte"};
	bson_t		child;

	idx_check_append(BSON_APPEND_DOCUMENT_BEGIN(out, field, &child));
	idx_check_append(BSON_APPEND_UTF8(&child, truth ? ops[cmp] : "$not",
									  param_placeholder(param)));
	idx_check_append(bson_append_document_end(out, &child));
}

/*
 * Translate "column op value".  A NULL value makes the comparison NULL
 * (neither T nor F); a parameter value BSON cannot hold exactly matches
 * everything (the clause is rechecked locally).  "column op column" goes
 * to deparse_expr.c.
 */
static void
build_opexpr(OpExpr *op, bool truth, bson_t *out, BuildContext *ctx)
{
	IdxComparison c;
	Datum		value;
	bool		isnull;
	Oid			type;

	if (!parse_comparison(op, ctx->relid, &c))
	{
		idx_build_column_comparison(op, truth, out, ctx->relid, ctx->info);
		return;
	}

	if (!resolve_value(c.value, ctx, &value, &isnull))
	{
		build_placeholder(var_field(c.var, ctx), c.cmp, truth,
						  (Param *) c.value, out);
		return;
	}
	if (isnull)
	{
		append_match_nothing(out);
		return;
	}
	type = exprType((Node *) c.value);
	if (!value_is_exact(value, type))
		return;					/* {}: everything; rechecked locally */
	build_comparison(var_field(c.var, ctx), c.cmp, truth, value, type,
					 c.is_text, c.is_float,
					 field_bracket(var_field(c.var, ctx), ctx), out);
}

/*
 * Translate "column = ANY(array)" (T: $in, F: $nin plus null, unless the
 * array holds a NULL, which makes the result never FALSE) and its mirror
 * "column <> ALL(array)".
 */
static void
build_array_comparison(ScalarArrayOpExpr *saop, bool truth, bson_t *out,
					   BuildContext *ctx)
{
	IdxComparison c;
	Datum		arraydatum;
	bool		isnull;
	ArrayType  *arr;
	Oid			elemtype;
	int16		elmlen;
	bool		elmbyval;
	char		elmalign;
	Datum	   *elems;
	bool	   *nulls;
	int			nelems,
				nvalues = 0,
				i;
	bool		has_null = false;
	bool		positive;

	if (!parse_array_comparison(saop, ctx->relid, &c))
		elog(ERROR, "unexpected clause in pushed-down filter");

	if (!resolve_value(c.value, ctx, &arraydatum, &isnull))
	{
		build_placeholder(var_field(c.var, ctx), c.cmp == CMP_EQ ? CMP_EQ : CMP_NE,
						  truth, (Param *) c.value, out);
		return;
	}
	if (isnull)
	{
		append_match_nothing(out);
		return;
	}

	arr = DatumGetArrayTypeP(arraydatum);
	elemtype = ARR_ELEMTYPE(arr);
	get_typlenbyvalalign(elemtype, &elmlen, &elmbyval, &elmalign);
	deconstruct_array(arr, elemtype, elmlen, elmbyval, elmalign,
					  &elems, &nulls, &nelems);

	/*
	 * With no elements the result does not depend on the column, not even
	 * on its being NULL: "= ANY('{}')" is FALSE and "<> ALL('{}')" is TRUE.
	 */
	if (nelems == 0)
	{
		if (saop->useOr == truth)
			append_match_nothing(out);
		return;					/* else {}: everything */
	}
	for (i = 0; i < nelems; i++)
	{
		if (nulls[i])
			has_null = true;
		else if (!value_is_exact(elems[i], elemtype))
			return;				/* {}: everything; rechecked locally */
		else
			elems[nvalues++] = elems[i];
	}

	/* "positive" = the rows whose value is in the list */
	positive = (c.cmp == CMP_EQ) == truth;
	if (positive)
	{
		if (nvalues == 0)
			append_match_nothing(out);
		else
			append_in_list(out, var_field(c.var, ctx), "$in", elems, nvalues,
						   elemtype, c.is_text, false);
	}
	else if (has_null)
		append_match_nothing(out);
	else
		append_in_list(out, var_field(c.var, ctx), "$nin", elems, nvalues,
					   elemtype, c.is_text, true);
}

/*
 * If "expr" is a range comparison ("column < value", ...) with a known,
 * non-null, exact value (not NaN), its comparison and its bound under
 * "truth".
 */
static bool
range_bound(Expr *expr, bool truth, BuildContext *ctx, IdxComparison *c,
			IdxBound *bound)
{
	bool		isnull;

	if (!IsA(expr, OpExpr) || !parse_comparison((OpExpr *) expr, ctx->relid, c) ||
		c->cmp == CMP_EQ || c->cmp == CMP_NE ||
		!resolve_value(c->value, ctx, &bound->value, &isnull) || isnull)
		return false;
	bound->type = exprType((Node *) c->value);
	bound->op = truth ? c->cmp : negated_cmp[c->cmp];
	return idx_datum_is_exact_in_bson(bound->value, bound->type);
}

/*
 * Pair the lower and upper bounds on one field among the arguments of a
 * conjunction: partner[i] is the argument merged with argument i into one
 * {field: {$gt: a, $lt: b}}, or -1.  MongoDB intersects such bounds
 * itself; one condition document is what every planner (the test server's
 * too) serves as one index interval, and reads better in EXPLAIN.
 */
static void
pair_range_bounds(List *args, bool truth, BuildContext *ctx, int *partner)
{
	int			n = list_length(args);
	IdxComparison *cs = palloc_array(IdxComparison, n);
	IdxBound   *bs = palloc_array(IdxBound, n);
	bool	   *is_range = palloc_array(bool, n);
	int			i,
				j;

	for (i = 0; i < n; i++)
	{
		partner[i] = -1;
		is_range[i] = range_bound(list_nth(args, i), truth, ctx, &cs[i], &bs[i]);
	}
	for (i = 0; i < n; i++)
	{
		for (j = i + 1; j < n && is_range[i] && partner[i] < 0; j++)
		{
			if (is_range[j] && partner[j] < 0 &&
				(bs[i].op >= CMP_GT) != (bs[j].op >= CMP_GT) &&
				var_type(cs[i].var) == var_type(cs[j].var) &&
				strcmp(var_field(cs[i].var, ctx), var_field(cs[j].var, ctx)) == 0)
			{
				partner[i] = j;
				partner[j] = i;
			}
		}
	}
}

/*
 * Translate two range comparisons on one field (pair_range_bounds) into
 * one condition document, lower bound first.  With an upper bound neither
 * NaN nor the ObjectIds of a text range need a branch of their own except
 * text's (append_range).
 */
static void
build_range_pair(Expr *a, Expr *b, bool truth, bson_t *out, BuildContext *ctx)
{
	IdxComparison c;
	IdxBound	bounds[2];

	if (!range_bound(a, truth, ctx, &c, &bounds[0]) ||
		!range_bound(b, truth, ctx, &c, &bounds[1]))
		elog(ERROR, "unexpected clause in pushed-down filter");
	if (bounds[0].op < CMP_GT)
	{
		IdxBound	tmp = bounds[0];

		bounds[0] = bounds[1];
		bounds[1] = tmp;
	}
	append_range(out, var_field(c.var, ctx), bounds, 2, c.is_text,
				 field_bracket(var_field(c.var, ctx), ctx));
}

/*
 * Append {"$and"|"$or": [T/F of each argument]}; in a conjunction, a lower
 * and an upper bound on one field become one element.
 */
static void
build_junction(const char *op, List *args, bool truth, bson_t *out,
			   BuildContext *ctx)
{
	bson_t		array;
	int		   *partner = palloc_array(int, list_length(args));
	uint32		key_index = 0;
	int			i;

	if (strcmp(op, "$and") == 0)
		pair_range_bounds(args, truth, ctx, partner);
	else
		memset(partner, -1, sizeof(int) * list_length(args));

	/* two bounds that make one range are the filter itself */
	if (list_length(args) == 2 && partner[0] == 1)
	{
		build_clause(linitial(args), lsecond(args), truth, out, ctx);
		pfree(partner);
		return;
	}

	idx_check_append(IDX_BSON_APPEND_ARRAY_BEGIN(out, op, &array));
	for (i = 0; i < list_length(args); i++)
	{
		bson_t		child;
		char		key[16];

		if (partner[i] >= 0 && partner[i] < i)
			continue;			/* merged into an earlier element */
		snprintf(key, sizeof(key), "%u", key_index++);
		idx_check_append(BSON_APPEND_DOCUMENT_BEGIN(&array, key, &child));
		build_clause(list_nth(args, i),
					 partner[i] >= 0 ? list_nth(args, partner[i]) : NULL,
					 truth, &child, ctx);
		idx_check_append(bson_append_document_end(&array, &child));
	}
	idx_check_append(bson_append_array_end(out, &array));
	pfree(partner);
}

/*
 * The field path of the column a leaf clause (not AND/OR/NOT) tests.
 */
static const char *
leaf_field(Expr *expr, BuildContext *ctx)
{
	IdxComparison c;

	switch (nodeTag(expr))
	{
		case T_Var:
			return var_field(column_var(expr, ctx->relid), ctx);
		case T_NullTest:
			return var_field(column_var(((NullTest *) expr)->arg, ctx->relid),
							 ctx);
		case T_OpExpr:
			if (!parse_comparison((OpExpr *) expr, ctx->relid, &c))
				return idx_column_comparison_field((OpExpr *) expr, ctx->relid,
												   ctx->info);
			return var_field(c.var, ctx);
		case T_ScalarArrayOpExpr:
			if (!parse_array_comparison((ScalarArrayOpExpr *) expr, ctx->relid,
										&c))
				break;
			return var_field(c.var, ctx);
		default:
			break;
	}
	elog(ERROR, "unexpected clause in pushed-down filter");
	return NULL;				/* keep compiler quiet */
}

/*
 * Translate a leaf clause on a dotted path "a.b.c" as {$or: [clause,
 * {a: {$type: "array"}}, {"a.b": {$type: "array"}}]}: documents where the
 * path crosses an array come back, and fail to read (see the file header).
 */
static void
build_guarded_leaf(Expr *expr, Expr *pair, bool truth, bson_t *out,
				   BuildContext *ctx, const char *field)
{
	bson_t		array,
				branch,
				cond;
	const char *dot;
	uint32		i = 0;
	char		key[16];

	idx_check_append(IDX_BSON_APPEND_ARRAY_BEGIN(out, "$or", &array));
	idx_check_append(BSON_APPEND_DOCUMENT_BEGIN(&array, "0", &branch));
	if (pair)
		build_range_pair(expr, pair, truth, &branch, ctx);
	else
		build_leaf(expr, truth, &branch, ctx);
	idx_check_append(bson_append_document_end(&array, &branch));
	for (dot = strchr(field, '.'); dot != NULL; dot = strchr(dot + 1, '.'))
	{
		snprintf(key, sizeof(key), "%u", ++i);
		idx_check_append(BSON_APPEND_DOCUMENT_BEGIN(&array, key, &branch));
		idx_check_append(bson_append_document_begin(&branch, field,
													 (int) (dot - field),
													 &cond));
		idx_check_append(BSON_APPEND_UTF8(&cond, "$type", "array"));
		idx_check_append(bson_append_document_end(&branch, &cond));
		idx_check_append(bson_append_document_end(&array, &branch));
	}
	idx_check_append(bson_append_array_end(out, &array));
}

/*
 * Translate one clause, for truth value "truth" (T or F), into "out",
 * which receives the fields of one query document.  "pair", if not NULL,
 * is a range comparison merged with "expr" (pair_range_bounds).
 */
static void
build_clause(Expr *expr, Expr *pair, bool truth, bson_t *out,
			 BuildContext *ctx)
{
	const char *field;

	check_stack_depth();

	if (IsA(expr, BoolExpr))
	{
		BoolExpr   *b = (BoolExpr *) expr;

		if (b->boolop == NOT_EXPR)
			build_clause(linitial(b->args), NULL, !truth, out, ctx);
		else if ((b->boolop == AND_EXPR) == truth)
			build_junction("$and", b->args, truth, out, ctx);
		else
			build_junction("$or", b->args, truth, out, ctx);
		return;
	}
	field = leaf_field(expr, ctx);
	if (strchr(field, '.') != NULL)
		build_guarded_leaf(expr, pair, truth, out, ctx, field);
	else if (pair)
		build_range_pair(expr, pair, truth, out, ctx);
	else
		build_leaf(expr, truth, out, ctx);
}

/*
 * Translate a clause that is not AND/OR/NOT (see build_clause).
 */
static void
build_leaf(Expr *expr, bool truth, bson_t *out, BuildContext *ctx)
{
	switch (nodeTag(expr))
	{
		case T_Var:
			idx_check_append(BSON_APPEND_BOOL(out,
											  var_field(column_var(expr, ctx->relid),
														ctx),
											  truth));
			break;
		case T_NullTest:
			{
				NullTest   *nt = (NullTest *) expr;
				const char *field = var_field(column_var(nt->arg, ctx->relid),
											  ctx);
				bson_t		child;

				if ((nt->nulltesttype == IS_NULL) == truth)
					append_is_null(out, field);
				else
				{
					idx_check_append(BSON_APPEND_DOCUMENT_BEGIN(out, field, &child));
					idx_check_append(BSON_APPEND_NULL(&child, "$ne"));
					append_not_undefined(&child);
					idx_check_append(bson_append_document_end(out, &child));
				}
				break;
			}
		case T_OpExpr:
			build_opexpr((OpExpr *) expr, truth, out, ctx);
			break;
		case T_ScalarArrayOpExpr:
			build_array_comparison((ScalarArrayOpExpr *) expr, truth, out, ctx);
			break;
		default:
			elog(ERROR, "unexpected node type %d in pushed-down filter",
				 (int) nodeTag(expr));
	}
}

/*
 * Build the find filter for the pushed-down "conds" (implicitly ANDed).
 * One clause becomes the filter itself; several become {$and: [...]}.
 */
void
idx_build_filter(bson_t *filter, List *conds, Index relid,
				 const IdxTableInfo *info, const IdxParamValues *params)
{
	idx_build_filter_bracketed(filter, conds, relid, info, params, NULL,
							   IDX_TEXT_BOTH);
}

/*
 * idx_build_filter(), with the text ranges on "field" selecting only the
 * values of "bracket": exact for the documents whose field is of that
 * bracket, for a find that asks for them alone (a sorted scan's,
 * order_scan.c).
 */
void
idx_build_filter_bracketed(bson_t *filter, List *conds, Index relid,
						   const IdxTableInfo *info,
						   const IdxParamValues *params, const char *field,
						   IdxTextBracket bracket)
{
	BuildContext ctx;

	ctx.relid = relid;
	ctx.info = info;
	ctx.params = params;
	ctx.bracket_field = field;
	ctx.bracket = bracket;

	if (list_length(conds) == 1)
		build_clause(linitial(conds), NULL, true, filter, &ctx);
	else if (conds != NIL)
		build_junction("$and", conds, true, filter, &ctx);
}

/*
 * Comparator for sorting field paths bytewise.
 */
static int
field_path_cmp(const ListCell *a, const ListCell *b)
{
	return strcmp((const char *) lfirst(a), (const char *) lfirst(b));
}

/*
 * Build the projection {field: 1, ...} for the attributes in "attrs_used"
 * (pull_varattnos convention; a whole-row reference means every column).  MongoDB rejects a
 * projection naming both a path and one of its prefixes ("a" and "a.b"),
 * or a key twice, so only the shortest covering paths are kept: sorted
 * bytewise, a path is dropped when an already kept one covers it.  _id
 * always comes, so that conversion errors can name the document.
 */
void
idx_build_projection(bson_t *projection, const IdxTableInfo *info,
					 Bitmapset *attrs_used)
{
	bool		all = bms_is_member(0 - FirstLowInvalidHeapAttributeNumber,
									attrs_used);
	List	   *paths = list_make1((char *) IDX_ID_FIELD);
	List	   *kept = NIL;
	ListCell   *lc;
	int			i;

	for (i = 0; i < info->natts; i++)
	{
		if (info->fields[i] != NULL &&
			(all || bms_is_member(i + 1 - FirstLowInvalidHeapAttributeNumber,
								  attrs_used)))
			paths = lappend(paths, info->fields[i]);
	}
	list_sort(paths, field_path_cmp);

	foreach(lc, paths)
	{
		const char *path = lfirst(lc);
		ListCell   *lc2;
		bool		covered = false;

		foreach(lc2, kept)
		{
			const char *prefix = lfirst(lc2);
			size_t		len = strlen(prefix);

			if (strncmp(path, prefix, len) == 0 &&
				(path[len] == '\0' || path[len] == '.'))
			{
				covered = true;
				break;
			}
		}
		if (!covered)
		{
			kept = lappend(kept, (char *) path);
			idx_check_append(BSON_APPEND_INT32(projection, path, 1));
		}
	}
	list_free(paths);
	list_free(kept);
}
