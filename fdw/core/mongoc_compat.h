/*-------------------------------------------------------------------------
 *
 * mongoc_compat.h
 *		  libmongoc and libbson for idxtable_fdw, and what differs between
 *		  the versions it builds against (1.23, 1.30 and 2.x), in one place.
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/core/mongoc_compat.h
 *
 * Every file includes libmongoc through this header.  The Makefile finds
 * the library with pkg-config: 1.x as libmongoc-1.0 (headers under
 * libmongoc-1.0/ and libbson-1.0/), 2.x as mongoc2 and bson2 (headers
 * under mongoc-2.x.y/ and bson-2.x.y/); both name their headers
 * <mongoc/mongoc.h> and <bson/bson.h> below the folder --cflags gives.
 *
 * The rest of the source is written against libmongoc 2's API where it
 * differs; each wrapper here says which versions differ and why.  No
 * MONGOC_CHECK_VERSION or BSON_CHECK_VERSION test belongs anywhere else.
 *
 *-------------------------------------------------------------------------
 */
#ifndef IDXTABLE_MONGOC_COMPAT_H
#define IDXTABLE_MONGOC_COMPAT_H

#include <mongoc/mongoc.h>

/*
 * Start an array "key" in "doc" whose keys the caller appends itself
 * ("0", "1", ... in order).  libbson 2.3 deprecated bson_append_array_begin
 * for this and named it bson_append_array_unsafe_begin (unsafe: libbson
 * does not number the elements; bson_append_array_builder_begin does).
 * The same function under either name.
 */
#if BSON_CHECK_VERSION(2, 3, 0)
#define idx_bson_append_array_begin(doc, key, keylen, child) \
	bson_append_array_unsafe_begin((doc), (key), (keylen), (child))
#else
#define idx_bson_append_array_begin(doc, key, keylen, child) \
	bson_append_array_begin((doc), (key), (keylen), (child))
#endif
#define IDX_BSON_APPEND_ARRAY_BEGIN(doc, key, child) \
	idx_bson_append_array_begin((doc), (key), (int) strlen(key), (child))

/*
 * A document as relaxed extended JSON (bson_as_relaxed_extended_json; free
 * it with bson_free), with every empty document or array written "{ }" or
 * "[ ]".  libbson 1.23 writes an empty one inside another with two spaces
 * ("{  }"), 1.30 and 2.x with one, as at the top level; EXPLAIN shows
 * these texts, so they read the same whichever libbson the FDW was built
 * with.  Nothing changes inside strings; a no-op on the later versions.
 */
static inline char *
idx_bson_as_relaxed_json(const bson_t *doc, size_t *len)
{
	char	   *json = bson_as_relaxed_extended_json(doc, len);
	size_t		from;
	size_t		to = 0;
	bool		in_string = false;

	if (json == NULL)
		return NULL;
	for (from = 0; json[from] != '\0'; from++)
	{
		char		c = json[from];

		if (in_string)
		{
			if (c == '\\' && json[from + 1] != '\0')
			{
				json[to++] = c;
				c = json[++from];
			}
			else if (c == '"')
				in_string = false;
		}
		else if (c == '"')
			in_string = true;
		else if ((c == '{' || c == '[') && json[from + 1] == ' ' &&
				 json[from + 2] == ' ' &&
				 json[from + 3] == (c == '{' ? '}' : ']'))
			from++;				/* keep one of the two spaces */
		json[to++] = c;
	}
	json[to] = '\0';
	if (len != NULL)
		*len = to;
	return json;
}

#endif							/* IDXTABLE_MONGOC_COMPAT_H */
