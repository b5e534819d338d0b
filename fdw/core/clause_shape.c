/*-------------------------------------------------------------------------
 *
 * clause_shape.c
 *		  The shapes of clauses shared by the filter builder and index
 *		  routing (clause_shape.h).
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/core/clause_shape.c
 *
 * A clause reaches MongoDB, as a filter (deparse.c), an $expr comparison
 * of two columns (deparse_expr.c) or a lookup of index entries
 * (index_path.c, index_agg.c), only in a few shapes; these are the tests
 * they all start from, kept here, below each of them, so that each answers
 * alike: binary-compatible casts are looked through, a value compares with
 * a column only within the column's type family, and "operand op other"
 * is recognized in either order.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "nodes/bitmapset.h"
#include "optimizer/optimizer.h"
#include "utils/lsyscache.h"

#include "core/clause_shape.h"

/*
 * Strip RelabelType (binary-compatible casts such as varchar -> text).
 */
Expr *
idx_strip_relabel(Expr *expr)
{
	while (expr && IsA(expr, RelabelType))
		expr = ((RelabelType *) expr)->arg;
	return expr;
}

/*
 * Are a column type and a value type compatible for pushing a comparison?
 * Integers mix freely, floats mix freely, text takes text, everything else
 * only its own type.
 */
bool
idx_compatible_types(Oid coltype, Oid valtype)
{
	switch (coltype)
	{
		case INT2OID:
		case INT4OID:
		case INT8OID:
			return valtype == INT2OID || valtype == INT4OID ||
				valtype == INT8OID;
		case FLOAT4OID:
		case FLOAT8OID:
			return valtype == FLOAT4OID || valtype == FLOAT8OID;
		case TEXTOID:
		case VARCHAROID:
			return valtype == TEXTOID || valtype == VARCHAROID;
		default:
			return coltype == valtype;
	}
}

/*
 * Does "node" refer to a column of the scanned relation (at this query
 * level)?
 */
static bool
refers_to_rel(Node *node, Index relid)
{
	return bms_is_member(relid, pull_varnos(NULL, node));
}

/*
 * Split a binary operator clause into the side that refers to the scanned
 * relation and the side that does not, in either order (clause_shape.h).
 * Returns false when both or neither side refer to it, or when the
 * operator, needed commuted, has no commutator.
 */
bool
idx_split_comparison(OpExpr *op, Index relid, IdxSplitComparison *out)
{
	Expr	   *left,
			   *right;
	bool		in_left;

	if (list_length(op->args) != 2)
		return false;
	left = linitial(op->args);
	right = lsecond(op->args);
	in_left = refers_to_rel((Node *) left, relid);
	if (in_left == refers_to_rel((Node *) right, relid))
		return false;
	out->operand = in_left ? left : right;
	out->other = in_left ? right : left;
	out->opno = in_left ? op->opno : get_commutator(op->opno);
	return OidIsValid(out->opno);
}
