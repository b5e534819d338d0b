/*-------------------------------------------------------------------------
 *
 * convert_path.c
 *		  Finding a column's value at its field path (see convert_path.h).
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/core/convert_path.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"

#include "core/convert.h"
#include "core/convert_path.h"

/* Collected values of a path through arrays */
typedef struct PathValues
{
	bson_t	   *array;
	uint32		n;
} PathValues;

static void collect_in(bson_iter_t *container, const char *path,
					   PathValues *pv);

/*
 * Length of the first component of a dotted path.
 */
static size_t
component_len(const char *path)
{
	const char *dot = strchr(path, '.');

	return dot ? (size_t) (dot - path) : strlen(path);
}

/*
 * Position "iter" (on the start of a document or array) on the key of the
 * first "len" bytes of "path".
 */
static bool
find_key(bson_iter_t *iter, const char *path, size_t len)
{
	return bson_iter_find_w_len(iter, path, (int) len);
}

/*
 * Find the value at "path" (see convert_path.h).
 */
IdxPathResult
idx_path_find(const bson_t *doc, const char *path, bson_iter_t *iter)
{
	bson_iter_t cur;

	if (!bson_iter_init(&cur, doc))
		return IDX_PATH_MISSING;
	for (;;)
	{
		size_t		len = component_len(path);

		if (!find_key(&cur, path, len))
			return IDX_PATH_MISSING;
		if (path[len] == '\0')
		{
			*iter = cur;
			return IDX_PATH_FOUND;
		}
		if (BSON_ITER_HOLDS_ARRAY(&cur))
			return IDX_PATH_THROUGH_ARRAY;
		if (!BSON_ITER_HOLDS_DOCUMENT(&cur) || !bson_iter_recurse(&cur, &cur))
			return IDX_PATH_MISSING;
		path += len + 1;
	}
}

/*
 * Add one value at the end of a path: an array's elements, else itself.
 */
static void
collect_value(const bson_iter_t *value, PathValues *pv)
{
	char		key[16];

	if (BSON_ITER_HOLDS_ARRAY(value))
	{
		bson_iter_t elem;

		if (bson_iter_recurse(value, &elem))
		{
			while (bson_iter_next(&elem))
			{
				snprintf(key, sizeof(key), "%u", pv->n++);
				idx_check_append(bson_append_iter(pv->array, key, -1, &elem));
			}
		}
		return;
	}
	snprintf(key, sizeof(key), "%u", pv->n++);
	idx_check_append(bson_append_iter(pv->array, key, -1, value));
}

/*
 * Collect the values at "path" below the current element "value": in a
 * document, at the path; in an array, below each element that is a
 * document (the matcher does not look into arrays nested in arrays);
 * nothing below anything else.
 */
static void
collect_below(const bson_iter_t *value, const char *path, PathValues *pv)
{
	bson_iter_t child;

	check_stack_depth();
	CHECK_FOR_INTERRUPTS();
	if (BSON_ITER_HOLDS_DOCUMENT(value))
	{
		if (bson_iter_recurse(value, &child))
			collect_in(&child, path, pv);
	}
	else if (BSON_ITER_HOLDS_ARRAY(value) && bson_iter_recurse(value, &child))
	{
		while (bson_iter_next(&child))
		{
			if (BSON_ITER_HOLDS_DOCUMENT(&child))
				collect_below(&child, path, pv);
		}
	}
}

/*
 * Collect the values at "path" in the container "container" iterates.
 */
static void
collect_in(bson_iter_t *container, const char *path, PathValues *pv)
{
	size_t		len = component_len(path);

	if (!find_key(container, path, len))
		return;
	if (path[len] == '\0')
		collect_value(container, pv);
	else
		collect_below(container, path + len + 1, pv);
}

/*
 * The values at "path" as an array (see convert_path.h).
 */
bson_t *
idx_path_collect(const bson_t *doc, const char *path)
{
	bson_t		out = BSON_INITIALIZER;
	bson_t		array;
	bson_t	   *result = palloc(sizeof(bson_t));
	uint8	   *data;
	PathValues	pv;
	bson_iter_t iter;

	PG_TRY();
	{
		idx_check_append(idx_bson_append_array_begin(&out, "v", 1, &array));
		pv.array = &array;
		pv.n = 0;
		if (bson_iter_init(&iter, doc))
			collect_in(&iter, path, &pv);
		idx_check_append(bson_append_array_end(&out, &array));
		data = palloc(out.len);
		memcpy(data, bson_get_data(&out), out.len);
		if (!bson_init_static(result, data, out.len))
			elog(ERROR, "could not collect the values of field path \"%s\"",
				 path);
	}
	PG_FINALLY();
	{
		bson_destroy(&out);
	}
	PG_END_TRY();
	return result;
}
