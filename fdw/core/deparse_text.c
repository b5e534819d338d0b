/*-------------------------------------------------------------------------
 *
 * deparse_text.c
 *		  Ranges on text columns as find filters: the strings and the
 *		  ObjectIds a range selects (core/text_order.h).
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/core/deparse_text.c
 *
 * Under a collation that orders as bytes, "f > 'abc'" selects the strings
 * above "abc", which {f: {$gt: "abc"}} selects (MongoDB compares a string
 * with strings and symbols only, as bytes under the simple collation), and
 * the ObjectIds whose text is above "abc", which one bound on ObjectIds
 * selects: {$or: [{f: {$gt: "abc"}}, {f: {$gte: ObjectId("abc000...")}}]}.
 * Each branch is one index interval.  A branch that selects no ObjectId is
 * left out; one that selects every ObjectId is {f: {$gte: ObjectId of
 * zeros}}, which an index serves as ObjectIds' whole bracket.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"

#include "core/convert.h"
#include "core/deparse.h"
#include "core/pg_compat.h"
#include "core/text_order.h"

/* MongoDB's operator for each ObjectId bound (IdxOidRange) */
static const char *const oid_ops[] = {NULL, NULL, "$gt", "$gte", "$lt", "$lte"};

/*
 * The ObjectId bounds of "nbounds" text bounds, into oids[] and ops[] (at
 * most two); returns how many, or -1 if the range selects no ObjectId.
 * Zero bounds: every ObjectId.
 */
static int
objectid_bounds(const char *const *ops, const Datum *values, int nbounds,
				bson_oid_t *oids, const char **out_ops)
{
	int			n = 0;
	int			i;

	for (i = 0; i < nbounds; i++)
	{
		text	   *t = DatumGetTextPP(values[i]);
		bool		lower = ops[i][1] == 'g';
		bool		inclusive = ops[i][3] == 'e';
		IdxOidRange r;

		r = idx_text_bound_objectids(VARDATA_ANY(t), VARSIZE_ANY_EXHDR(t),
									 lower, inclusive, &oids[n]);
		if (r == IDX_OIDS_NONE)
			return -1;
		if (r != IDX_OIDS_ALL)
			out_ops[n++] = oid_ops[r];
	}
	return n;
}

/*
 * Append {field: {op: ObjectId, ...}}: the ObjectIds of the bounds, every
 * one for no bound.
 */
static void
append_objectid_range(bson_t *out, const char *field, const bson_oid_t *oids,
					  const char *const *ops, int n)
{
	bson_t		child;
	bson_oid_t	zero;
	int			i;

	idx_check_append(BSON_APPEND_DOCUMENT_BEGIN(out, field, &child));
	if (n == 0)
	{
		idx_objectid_least(&zero);
		idx_check_append(BSON_APPEND_OID(&child, "$gte", &zero));
	}
	for (i = 0; i < n; i++)
		idx_check_append(BSON_APPEND_OID(&child, ops[i], &oids[i]));
	idx_check_append(bson_append_document_end(out, &child));
}

/*
 * Append {field: {op: "text", ...}}: the strings of the bounds.
 */
static void
append_string_range(bson_t *out, const char *field, const char *const *ops,
					const Datum *values, int nbounds)
{
	bson_t		child;
	int			i;

	idx_check_append(BSON_APPEND_DOCUMENT_BEGIN(out, field, &child));
	for (i = 0; i < nbounds; i++)
		idx_append_datum(&child, ops[i], -1, values[i], false, TEXTOID);
	idx_check_append(bson_append_document_end(out, &child));
}

/*
 * Append a range on a text column (deparse.h): both branches in an $or,
 * or the one of "bracket".  In the ObjectIds' bracket a range that selects
 * none of them is {field: {$in: []}}.
 */
void
idx_append_text_range(bson_t *out, const char *field, const char *const *ops,
					  const Datum *values, int nbounds,
					  IdxTextBracket bracket)
{
	bson_oid_t	oids[2];
	const char *oid_ops_used[2];
	int			noids;
	bson_t		array;
	bson_t		branch;
	bson_t		child;

	Assert(nbounds >= 1 && nbounds <= 2);
	if (bracket == IDX_TEXT_STRINGS)
	{
		append_string_range(out, field, ops, values, nbounds);
		return;
	}
	noids = objectid_bounds(ops, values, nbounds, oids, oid_ops_used);
	if (bracket == IDX_TEXT_OBJECTIDS)
	{
		if (noids >= 0)
			append_objectid_range(out, field, oids, oid_ops_used, noids);
		else
		{
			idx_check_append(BSON_APPEND_DOCUMENT_BEGIN(out, field, &child));
			idx_check_append(IDX_BSON_APPEND_ARRAY_BEGIN(&child, "$in",
														 &array));
			idx_check_append(bson_append_array_end(&child, &array));
			idx_check_append(bson_append_document_end(out, &child));
		}
		return;
	}
	if (noids < 0)
	{
		append_string_range(out, field, ops, values, nbounds);
		return;
	}
	idx_check_append(IDX_BSON_APPEND_ARRAY_BEGIN(out, "$or", &array));
	idx_check_append(BSON_APPEND_DOCUMENT_BEGIN(&array, "0", &branch));
	append_string_range(&branch, field, ops, values, nbounds);
	idx_check_append(bson_append_document_end(&array, &branch));
	idx_check_append(BSON_APPEND_DOCUMENT_BEGIN(&array, "1", &branch));
	append_objectid_range(&branch, field, oids, oid_ops_used, noids);
	idx_check_append(bson_append_document_end(&array, &branch));
	idx_check_append(bson_append_array_end(out, &array));
}
