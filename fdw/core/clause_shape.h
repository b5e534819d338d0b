/*-------------------------------------------------------------------------
 *
 * clause_shape.h
 *		  The shapes of clauses that the filter builder (deparse.c,
 *		  deparse_expr.c) and index routing both recognize: casts that
 *		  change nothing stripped, the value types a column type compares
 *		  with, and a comparison split into its two sides.
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/core/clause_shape.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef IDXTABLE_CLAUSE_SHAPE_H
#define IDXTABLE_CLAUSE_SHAPE_H

#include "nodes/primnodes.h"

/* Strip binary-compatible casts (RelabelType) */
extern Expr *idx_strip_relabel(Expr *expr);

/*
 * Can a value of type "valtype" be compared in MongoDB with values of a
 * column of type "coltype" (integers mix, floats mix, text and varchar mix,
 * everything else only with its own type)?
 */
extern bool idx_compatible_types(Oid coltype, Oid valtype);

/*
 * A binary operator clause split into the side that refers to the scanned
 * relation ("operand": a column, a key expression) and the side that does
 * not ("other": a constant, a parameter, another relation's column).
 * "opno" is the operator with the operand on its left: the commutator when
 * the operand was on the right.
 */
typedef struct IdxSplitComparison
{
	Expr	   *operand;
	Expr	   *other;
	Oid			opno;
} IdxSplitComparison;

/*
 * The one recognizer of "operand op other" in either order, shared by the
 * filter builder (column op value) and index routing (key op lookup value).
 */
extern bool idx_split_comparison(OpExpr *op, Index relid,
								 IdxSplitComparison *out);

#endif							/* IDXTABLE_CLAUSE_SHAPE_H */
