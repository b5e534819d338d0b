/*-------------------------------------------------------------------------
 *
 * convert_describe.c
 *		  Descriptions of BSON values: a document or a single value as JSON,
 *		  a document's _id for messages, BSON type names, and the column
 *		  type a value suggests to IMPORT FOREIGN SCHEMA.
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/core/convert_describe.c
 *
 * Split from convert.c, which keeps the conversions themselves.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "lib/stringinfo.h"
#include "mb/pg_wchar.h"
#include "utils/uuid.h"

#include "core/convert.h"
#include "core/option.h"

/* How much of a document's _id goes into an error message */
#define ID_STRING_MAX		100

/* ----------------------------------------------------------------
 *		Descriptions of BSON values
 * ----------------------------------------------------------------
 */

/*
 * Render a document as relaxed extended JSON in the server encoding
 * (for EXPLAIN and debugging).
 */
char *
idx_bson_as_json(const bson_t *doc)
{
	size_t		len;
	char	   *json = idx_bson_as_relaxed_json(doc, &len);
	char	   *copy;
	char	   *result;

	if (json == NULL)
		elog(ERROR, "could not render BSON document as JSON");
	copy = pnstrdup(json, len);
	bson_free(json);

	result = pg_any_to_server(copy, (int) strlen(copy), PG_UTF8);
	if (result != copy)
		pfree(copy);
	return result;
}

/*
 * Relaxed extended JSON of the single value under "iter" (UTF-8, palloc'd),
 * or NULL if libbson cannot render it (invalid UTF-8).  libbson only
 * renders whole documents, so render {"v": value} and cut the value out.
 */
char *
idx_value_as_relaxed_json(const bson_iter_t *iter)
{
	static const char prefix[] = "{ \"v\" : ";
	static const char suffix[] = " }";
	const size_t prefixlen = sizeof(prefix) - 1;
	const size_t suffixlen = sizeof(suffix) - 1;
	bson_t		tmp;
	char	   *json = NULL;
	char	   *result = NULL;
	size_t		len = 0;

	bson_init(&tmp);
	if (bson_append_iter(&tmp, "v", 1, iter))
		json = bson_as_relaxed_extended_json(&tmp, &len);
	bson_destroy(&tmp);

	if (json == NULL)
		return NULL;
	if (len >= prefixlen + suffixlen &&
		strncmp(json, prefix, prefixlen) == 0 &&
		strcmp(json + len - suffixlen, suffix) == 0)
		result = pnstrdup(json + prefixlen, len - prefixlen - suffixlen);
	bson_free(json);
	return result;
}

/*
 * Render the _id of a document for error messages: its relaxed extended
 * JSON, cut after ID_STRING_MAX bytes.  Never raises an error (it is also
 * used from an error context callback); outside UTF-8 databases non-ASCII
 * characters are shown as "?".
 */
char *
idx_document_id_string(const bson_t *document)
{
	bson_iter_t iter;
	char	   *json;
	StringInfoData buf;
	bool		ascii_only;
	const char *p;
	int			len;
	int			clen;

	if (document == NULL)
		return pstrdup("(unknown)");
	if (!bson_iter_init_find(&iter, document, IDX_ID_FIELD))
		return pstrdup("(none)");
	json = idx_value_as_relaxed_json(&iter);
	if (json == NULL)
		return pstrdup("(unprintable)");

	ascii_only = (GetDatabaseEncoding() != PG_UTF8 &&
				  GetDatabaseEncoding() != PG_SQL_ASCII);
	initStringInfo(&buf);
	len = strlen(json);
	for (p = json; p < json + len; p += clen)
	{
		clen = Min(pg_utf_mblen((const unsigned char *) p),
				   (int) (json + len - p));
		if (buf.len + clen > ID_STRING_MAX)
		{
			appendStringInfoString(&buf, "...");
			break;
		}
		if (ascii_only && IS_HIGHBIT_SET(*p))
			appendStringInfoChar(&buf, '?');
		else
			appendBinaryStringInfo(&buf, p, clen);
	}
	pfree(json);
	return buf.data;
}

/*
 * Name of a BSON type for messages, as MongoDB's $type spells most of them.
 */
const char *
idx_bson_type_name(bson_type_t type)
{
	static const char *const names[] = {
		[BSON_TYPE_EOD] = "end of document",
		[BSON_TYPE_DOUBLE] = "double",
		[BSON_TYPE_UTF8] = "string",
		[BSON_TYPE_DOCUMENT] = "document",
		[BSON_TYPE_ARRAY] = "array",
		[BSON_TYPE_BINARY] = "binary",
		[BSON_TYPE_UNDEFINED] = "undefined",
		[BSON_TYPE_OID] = "objectId",
		[BSON_TYPE_BOOL] = "bool",
		[BSON_TYPE_DATE_TIME] = "date",
		[BSON_TYPE_NULL] = "null",
		[BSON_TYPE_REGEX] = "regex",
		[BSON_TYPE_DBPOINTER] = "dbPointer",
		[BSON_TYPE_CODE] = "javascript",
		[BSON_TYPE_SYMBOL] = "symbol",
		[BSON_TYPE_CODEWSCOPE] = "javascriptWithScope",
		[BSON_TYPE_INT32] = "int32",
		[BSON_TYPE_TIMESTAMP] = "timestamp",
		[BSON_TYPE_INT64] = "int64",
		[BSON_TYPE_DECIMAL128] = "decimal128",
	};

	if (type == BSON_TYPE_MAXKEY)
		return "maxKey";
	if (type == BSON_TYPE_MINKEY)
		return "minKey";
	if ((unsigned int) type < lengthof(names) && names[type] != NULL)
		return names[type];
	return "unknown";
}

/*
 * PostgreSQL type a scalar BSON value reads as; NULL for values that only
 * jsonb can hold.
 */
static const char *
scalar_pgtype(const bson_iter_t *iter)
{
	bson_subtype_t subtype;
	uint32		len;
	const uint8_t *data;

	switch (bson_iter_type(iter))
	{
		case BSON_TYPE_UTF8:
		case BSON_TYPE_SYMBOL:
		case BSON_TYPE_OID:
			return "text";
		case BSON_TYPE_INT32:
			return "integer";
		case BSON_TYPE_INT64:
			return "bigint";
		case BSON_TYPE_DOUBLE:
			return "double precision";
		case BSON_TYPE_DECIMAL128:
			return "numeric";
		case BSON_TYPE_BOOL:
			return "boolean";
		case BSON_TYPE_DATE_TIME:
			return "timestamp with time zone";
		case BSON_TYPE_BINARY:
			bson_iter_binary(iter, &subtype, &len, &data);
			return (subtype == BSON_SUBTYPE_UUID && len == UUID_LEN)
				? "uuid" : "bytea";
		default:
			return NULL;
	}
}

/*
 * Infer a column type for IMPORT FOREIGN SCHEMA from one value.  An array
 * whose non-null elements all read as the same scalar type becomes an
 * array of it (palloc'd name); everything else that is not a scalar,
 * including empty and all-null arrays, becomes jsonb.
 */
const char *
idx_bson_type_to_pgtype(const bson_iter_t *iter)
{
	const char *type = NULL;
	bson_iter_t child;

	if (bson_iter_type(iter) != BSON_TYPE_ARRAY)
	{
		type = scalar_pgtype(iter);
		return type ? type : "jsonb";
	}

	if (!bson_iter_recurse(iter, &child))
		return "jsonb";
	while (bson_iter_next(&child))
	{
		bson_type_t elemtype = bson_iter_type(&child);
		const char *elem;

		if (elemtype == BSON_TYPE_NULL || elemtype == BSON_TYPE_UNDEFINED)
			continue;
		elem = scalar_pgtype(&child);
		if (elem == NULL || (type != NULL && strcmp(type, elem) != 0))
			return "jsonb";
		type = elem;
	}
	return type ? psprintf("%s[]", type) : "jsonb";
}
