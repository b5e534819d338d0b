/*-------------------------------------------------------------------------
 *
 * convert_json.c
 *		  Conversion between BSON values and json/jsonb datums.
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/core/convert_json.c
 *
 * Reading (BSON -> json/jsonb) renders any BSON value as JSON text that
 * then goes through the column type's input function, like the other
 * text-based conversions in convert.c.  Writing (json/jsonb -> BSON, for
 * written rows, index entries and pushed-down constants) lexes the JSON
 * text and appends the BSON equivalent.  The ISO 8601 rendering of BSON dates lives here too; the
 * messages in convert.c use it as well.
 *
 * Decisions worth knowing (see also convert.h):
 *	- BSON dates render in JSON as ISO 8601 UTC strings with milliseconds;
 *	  years outside 0000-9999 use the expanded form "+012345-...".
 *	- BSON binary renders in JSON as a base64 string (any subtype).
 *	- BSON types without a JSON counterpart (regex, timestamp, code,
 *	  minKey, ...) render as their relaxed extended JSON form.
 *	- JSON numbers written to BSON: integers that fit int32 -> int32, then
 *	  int64, anything else -> double.
 *	- JSON object keys written to BSON must be non-empty, must not start
 *	  with "$" and must not contain ".": MongoDB could not store or match
 *	  them as they are (SQLSTATE 22023, before anything is written).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <inttypes.h>
#include <math.h>

#include "catalog/pg_type.h"
#include "common/base64.h"
#include "common/jsonapi.h"
#include "lib/stringinfo.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/json.h"
#include "utils/jsonfuncs.h"
#include "utils/memutils.h"

#include "core/convert.h"
#include "core/convert_error.h"
#include "core/convert_json.h"
#include "core/convert_text.h"
#include "core/pg_compat.h"

static void json_append_value(StringInfo buf, const bson_iter_t *iter,
							  const IdxColumnConv *conv,
							  const IdxConvSource *src);
static void append_json_value(bson_t *doc, const char *key, int keylen,
							  JsonLexContext *lex, const IdxJsonTarget *target);


/* ----------------------------------------------------------------
 *		BSON dates as ISO 8601 text
 * ----------------------------------------------------------------
 */

/*
 * Proleptic Gregorian calendar date of a day count since 1970-01-01
 * (year 0 is 1 BC, as in ISO 8601).  Works for the whole int64 millisecond
 * range of BSON dates, unlike PostgreSQL's j2date().
 */
static void
civil_from_days(int64 days, int64 *year, int *month, int *day)
{
	int64		z = days + 719468;	/* days since 0000-03-01 */
	int64		era = (z >= 0 ? z : z - 146096) / 146097;
	int64		doe = z - era * 146097; /* day of 400-year era */
	int64		yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
	int64		doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
	int64		mp = (5 * doy + 2) / 153;	/* month, March = 0 */

	*day = (int) (doy - (153 * mp + 2) / 5 + 1);
	*month = (int) (mp < 10 ? mp + 3 : mp - 9);
	*year = yoe + era * 400 + (*month <= 2 ? 1 : 0);
}

/*
 * ISO 8601 UTC rendering of a BSON date: "2020-01-02T03:04:05.006Z", with
 * a signed six-digit year outside 0000-9999.  "buf" has DATE_STRING_LEN
 * bytes.
 */
char *
idx_format_bson_date(int64 ms, char *buf)
{
	int64		days = ms / MS_PER_DAY;
	int64		rem = ms % MS_PER_DAY;
	int64		year;
	int			month,
				day;

	if (rem < 0)
	{
		rem += MS_PER_DAY;
		days--;
	}
	civil_from_days(days, &year, &month, &day);

	if (year >= 0 && year <= 9999)
		snprintf(buf, DATE_STRING_LEN, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ",
				 (int) year, month, day,
				 (int) (rem / 3600000), (int) (rem / 60000 % 60),
				 (int) (rem / 1000 % 60), (int) (rem % 1000));
	else
		snprintf(buf, DATE_STRING_LEN,
				 "%+07" PRId64 "-%02d-%02dT%02d:%02d:%02d.%03dZ",
				 year, month, day,
				 (int) (rem / 3600000), (int) (rem / 60000 % 60),
				 (int) (rem / 1000 % 60), (int) (rem % 1000));
	return buf;
}


/* ----------------------------------------------------------------
 *		BSON -> JSON text (json, jsonb columns)
 * ----------------------------------------------------------------
 */

/*
 * Append a BSON string (or key) as a quoted JSON string in the server
 * encoding.
 */
static void
json_append_string(StringInfo buf, const char *str, uint32 len,
				   const IdxColumnConv *conv, const IdxConvSource *src)
{
	escape_json(buf, idx_utf8_to_server(str, len, conv, src));
}

/*
 * Append the members of an embedded document ({...}) or array ([...]).
 */
static void
json_append_container(StringInfo buf, const bson_iter_t *iter, bool is_array,
					  const IdxColumnConv *conv, const IdxConvSource *src)
{
	bson_iter_t child;
	bool		first = true;

	if (!bson_iter_recurse(iter, &child))
		idx_report_corrupt(conv, src);

	appendStringInfoChar(buf, is_array ? '[' : '{');
	while (bson_iter_next(&child))
	{
		if (!first)
			appendStringInfoChar(buf, ',');
		first = false;
		if (!is_array)
		{
			json_append_string(buf, bson_iter_key(&child),
							   bson_iter_key_len(&child), conv, src);
			appendStringInfoChar(buf, ':');
		}
		json_append_value(buf, &child, conv, src);
	}
	appendStringInfoChar(buf, is_array ? ']' : '}');
}

/*
 * Append one BSON value as JSON.  JSON has no NaN or infinity, so those
 * are errors; dates become ISO 8601 strings, ObjectIds hex strings,
 * binaries base64 strings, and the remaining BSON-only types their
 * relaxed extended JSON form.
 */
static void
json_append_value(StringInfo buf, const bson_iter_t *iter,
				  const IdxColumnConv *conv, const IdxConvSource *src)
{
	char		tmp[Max(BSON_DECIMAL128_STRING, DATE_STRING_LEN)];
	const char *str;
	uint32		len;

	check_stack_depth();

	switch (bson_iter_type(iter))
	{
		case BSON_TYPE_DOCUMENT:
		case BSON_TYPE_ARRAY:
			json_append_container(buf, iter,
								  bson_iter_type(iter) == BSON_TYPE_ARRAY,
								  conv, src);
			break;
		case BSON_TYPE_UTF8:
			str = bson_iter_utf8(iter, &len);
			json_append_string(buf, str, len, conv, src);
			break;
		case BSON_TYPE_SYMBOL:
			str = bson_iter_symbol(iter, &len);
			json_append_string(buf, str, len, conv, src);
			break;
		case BSON_TYPE_INT32:
			appendStringInfo(buf, "%d", (int) bson_iter_int32(iter));
			break;
		case BSON_TYPE_INT64:
			appendStringInfo(buf, INT64_FORMAT, bson_iter_int64(iter));
			break;
		case BSON_TYPE_DOUBLE:
			{
				double		d = bson_iter_double(iter);

				idx_format_double(d, tmp);
				if (isnan(d) || isinf(d))
					idx_report_wrong_number(conv, src, BSON_TYPE_DOUBLE, tmp);
				appendStringInfoString(buf, tmp);
			}
			break;
		case BSON_TYPE_DECIMAL128:
			{
				bson_decimal128_t dec;

				if (!bson_iter_decimal128(iter, &dec))
					idx_report_corrupt(conv, src);
				bson_decimal128_to_string(&dec, tmp);
				if (!IsValidJsonNumber(tmp, strlen(tmp)))
					idx_report_wrong_number(conv, src, BSON_TYPE_DECIMAL128,
											tmp);
				appendStringInfoString(buf, tmp);
			}
			break;
		case BSON_TYPE_BOOL:
			appendStringInfoString(buf, bson_iter_bool(iter) ? "true" : "false");
			break;
		case BSON_TYPE_NULL:
		case BSON_TYPE_UNDEFINED:
			appendStringInfoString(buf, "null");
			break;
		case BSON_TYPE_DATE_TIME:
			appendStringInfo(buf, "\"%s\"",
							 idx_format_bson_date(bson_iter_date_time(iter), tmp));
			break;
		case BSON_TYPE_OID:
			bson_oid_to_string(bson_iter_oid(iter), tmp);
			appendStringInfo(buf, "\"%s\"", tmp);
			break;
		case BSON_TYPE_BINARY:
			{
				bson_subtype_t subtype;
				const uint8_t *data;
				char	   *b64;
				int			b64len;

				bson_iter_binary(iter, &subtype, &len, &data);
				if (len > (MaxAllocSize / 4) * 3 - 3)
					idx_report_binary_too_long(conv, src, len);
				b64 = palloc(pg_b64_enc_len((int) len) + 1);
				b64len = idx_b64_encode(data, (int) len, b64,
										pg_b64_enc_len((int) len));
				if (b64len < 0)
					elog(ERROR, "could not encode binary value as base64");
				appendStringInfoChar(buf, '"');
				appendBinaryStringInfo(buf, b64, b64len);
				appendStringInfoChar(buf, '"');
				pfree(b64);
			}
			break;
		default:
			{
				char	   *json = idx_value_as_relaxed_json(iter);

				if (json == NULL)
					idx_report_wrong_type(conv, src,
									  idx_bson_type_name(bson_iter_type(iter)));
				appendStringInfoString(buf,
									   idx_utf8_to_server(json, strlen(json),
													  conv, src));
			}
			break;
	}
}

/*
 * json, jsonb: any BSON value, rendered as JSON text and read by the type's
 * input function.  Key order and duplicate keys are kept for json.
 */
Datum
idx_json_from_bson(const bson_iter_t *iter, const IdxColumnConv *conv,
			   const IdxConvSource *src)
{
	StringInfoData buf;

	initStringInfo(&buf);
	json_append_value(&buf, iter, conv, src);
	return idx_call_input_function(conv, src, buf.data);
}


/* ----------------------------------------------------------------
 *		JSON text -> BSON (json, jsonb constants)
 * ----------------------------------------------------------------
 */

/*
 * Advance the JSON lexer, raising the usual error on bad input, so that
 * the callers below need not check every step.
 */
static void
json_next(JsonLexContext *lex)
{
	JsonParseErrorType result = json_lex(lex);

	if (result != JSON_SUCCESS)
		idx_json_report_error(result, lex);
}

/*
 * Complain about a token the JSON grammar does not allow here, with the
 * message json input gives for malformed text.
 */
static void
json_expect(JsonLexContext *lex, JsonTokenType token)
{
	if (lex->token_type != token)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_TEXT_REPRESENTATION),
				 errmsg("invalid input syntax for type json")));
}

/*
 * Append a JSON number: int32 if it is an integer that fits, then int64,
 * otherwise double.  Numbers beyond double's range are errors.
 */
static bool
append_json_number(bson_t *doc, const char *key, int keylen,
				   const char *token)
{
	char	   *end;
	double		d;

	if (strpbrk(token, ".eE") == NULL)
	{
		int64		value;

		errno = 0;
		value = strtoi64(token, &end, 10);
		if (errno == 0 && *end == '\0')
		{
			if (value >= PG_INT32_MIN && value <= PG_INT32_MAX)
				return bson_append_int32(doc, key, keylen, (int32) value);
			return bson_append_int64(doc, key, keylen, value);
		}
	}

	errno = 0;
	d = strtod(token, &end);
	if (*end != '\0' ||
		(errno == ERANGE && (d == 0.0 || isinf(d))))
		ereport(ERROR,
				(errcode(ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE),
				 errmsg("JSON number %s is out of range for BSON double",
						token)));
	return bson_append_double(doc, key, keylen, d);
}

/*
 * A JSON object key as it goes into a message: cut after 64 bytes.
 */
static char *
key_for_message(const char *key)
{
	int			len = strlen(key);

	if (len <= 64)
		return pstrdup(key);
	return psprintf("%s...", pnstrdup(key, pg_mbcliplen(key, len, 64)));
}

/*
 * Refuse a JSON object key that MongoDB cannot store as a field name as it
 * is: an empty key, a key starting with "$" (MongoDB operators; libmongoc
 * refuses them in inserted documents) or a key containing "." (a path
 * separator in every query and update).  "key" is in the server encoding;
 * "target" names the column, if known.
 */
static void
check_json_key(const char *key, const IdxJsonTarget *target)
{
	const char *reason;

	if (key[0] == '\0')
		reason = _("MongoDB field names must not be empty.");
	else if (key[0] == '$')
		reason = _("MongoDB field names must not start with \"$\".");
	else if (strchr(key, '.') != NULL)
		reason = _("MongoDB field names must not contain \".\".");
	else
		return;

	if (target != NULL)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("JSON key \"%s\" in column \"%s\" of foreign table \"%s\" cannot be stored in MongoDB",
						key_for_message(key), target->colname,
						target->relname),
				 errdetail_internal("%s", reason)));
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("JSON key \"%s\" cannot be stored in MongoDB",
					key_for_message(key)),
			 errdetail_internal("%s", reason)));
}

/*
 * Append the JSON value starting at the lexer's current token under "key"
 * and leave the lexer on the token after it.  Objects keep their member
 * order.  Strings come de-escaped in the server encoding.
 */
static void
append_json_value(bson_t *doc, const char *key, int keylen,
				  JsonLexContext *lex, const IdxJsonTarget *target)
{
	bson_t		child;
	char	   *str;
	bool		ok = true;

	check_stack_depth();

	switch (lex->token_type)
	{
		case JSON_TOKEN_OBJECT_START:
			idx_check_append(bson_append_document_begin(doc, key, keylen, &child));
			json_next(lex);
			while (lex->token_type != JSON_TOKEN_OBJECT_END)
			{
				char	   *fname;

				json_expect(lex, JSON_TOKEN_STRING);
				check_json_key(lex->strval->data, target);
				fname = pg_server_to_any(lex->strval->data, lex->strval->len,
										 PG_UTF8);
				if (fname == lex->strval->data)
					fname = pstrdup(fname);
				json_next(lex);
				json_expect(lex, JSON_TOKEN_COLON);
				json_next(lex);
				append_json_value(&child, fname, -1, lex, target);
				if (lex->token_type == JSON_TOKEN_COMMA)
					json_next(lex);
				else
					json_expect(lex, JSON_TOKEN_OBJECT_END);
			}
			ok = bson_append_document_end(doc, &child);
			break;
		case JSON_TOKEN_ARRAY_START:
			{
				uint32		index = 0;

				idx_check_append(idx_bson_append_array_begin(doc, key, keylen, &child));
				json_next(lex);
				while (lex->token_type != JSON_TOKEN_ARRAY_END)
				{
					char		keybuf[16];
					const char *ikey;
					size_t		ikeylen;

					ikeylen = bson_uint32_to_string(index++, &ikey, keybuf,
													sizeof(keybuf));
					append_json_value(&child, ikey, (int) ikeylen, lex,
									  target);
					if (lex->token_type == JSON_TOKEN_COMMA)
						json_next(lex);
					else
						json_expect(lex, JSON_TOKEN_ARRAY_END);
				}
				ok = bson_append_array_end(doc, &child);
			}
			break;
		case JSON_TOKEN_STRING:
			str = pg_server_to_any(lex->strval->data, lex->strval->len,
								   PG_UTF8);
			ok = bson_append_utf8(doc, key, keylen, str, strlen(str));
			break;
		case JSON_TOKEN_NUMBER:
			str = pnstrdup(lex->token_start,
						   lex->token_terminator - lex->token_start);
			ok = append_json_number(doc, key, keylen, str);
			break;
		case JSON_TOKEN_TRUE:
		case JSON_TOKEN_FALSE:
			ok = bson_append_bool(doc, key, keylen,
								  lex->token_type == JSON_TOKEN_TRUE);
			break;
		case JSON_TOKEN_NULL:
			ok = bson_append_null(doc, key, keylen);
			break;
		default:
			json_expect(lex, JSON_TOKEN_NULL);	/* raises the error */
			break;
	}
	idx_check_append(ok);
	json_next(lex);
}

/*
 * Append a json or jsonb datum as the BSON equivalent of its JSON text.
 * Object keys MongoDB cannot store are errors naming "target"'s column
 * (NULL: no column, e.g. an INCLUDE value of an index entry).
 */
void
idx_append_json(bson_t *doc, const char *key, int keylen, Datum value,
				Oid typid, const IdxJsonTarget *target)
{
	char	   *json;
	JsonLexContext *lex;

	if (typid == JSONBOID)
		json = DatumGetCString(DirectFunctionCall1(jsonb_out, value));
	else
		json = TextDatumGetCString(value);

	lex = idx_json_lex_context(json, strlen(json), GetDatabaseEncoding(),
							   true);
	json_next(lex);
	append_json_value(doc, key, keylen, lex, target);
	json_expect(lex, JSON_TOKEN_END);
}
