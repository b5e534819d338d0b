/*-------------------------------------------------------------------------
 *
 * convert_path.h
 *		  Finding a column's value at its field path in a document.
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/core/convert_path.h
 *
 * A dotted path descends through embedded documents.  Where it meets an
 * array before its last component, MongoDB's matcher descends into every
 * element of the array that is a document ({"a.b": 1} matches
 * {a: [{b: 1}, {b: 2}]}), so the path has several values, or none.  A
 * scalar column cannot hold them: reading it is an error (SQLSTATE 2202E,
 * convert.c), so that no row a pushed-down filter selected through an
 * array comes back with a value that contradicts the filter.  An array
 * column reads them all, in document order, a value that is itself an
 * array spliced in (as the matcher looks into an array at the end of a
 * path).  A component of digits is a field name here, as in a find
 * projection (the matcher would also take it as a position): "a.0.b"
 * crosses an array "a" like any other path.
 *
 *-------------------------------------------------------------------------
 */
#ifndef IDXTABLE_CONVERT_PATH_H
#define IDXTABLE_CONVERT_PATH_H

#include "core/mongoc_compat.h"

typedef enum IdxPathResult
{
	IDX_PATH_MISSING,			/* no value (reads as NULL) */
	IDX_PATH_FOUND,				/* one value, "iter" is on it */
	IDX_PATH_THROUGH_ARRAY		/* the path crosses an array */
} IdxPathResult;

/* Find the value at "path" in "doc" (see above) */
extern IdxPathResult idx_path_find(const bson_t *doc, const char *path,
								   bson_iter_t *iter);

/*
 * The values at "path", for a path that crosses an array, as the array
 * "v" of a palloc'd document.
 */
extern bson_t *idx_path_collect(const bson_t *doc, const char *path);

#endif							/* IDXTABLE_CONVERT_PATH_H */
