/*-------------------------------------------------------------------------
 *
 * convert.c
 *		  Conversion between BSON values and PostgreSQL datums.
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/core/convert.c
 *
 * The reading direction (BSON -> datum) is strict: a value is accepted
 * only if it converts without loss, otherwise the scan fails with an error
 * naming the column, the collection and the document's _id.  Values that
 * come out as text (strings, numbers for numeric, JSON) go through the
 * column type's input function with the column typmod, so varchar(n),
 * bpchar(n) and numeric(p,s) checks apply exactly as for a local table.
 * Errors raised inside those input functions carry the same information
 * as an error context line.
 *
 * The writing direction (datum -> BSON), the inverse of the reading
 * rules, lives in convert_write.c.
 *
 * The json/jsonb conversions (both directions) live in convert_json.c,
 * together with the ISO 8601 rendering of BSON dates that the messages
 * here use as well.
 *
 * Decisions worth knowing (see also convert.h and convert_json.c):
 *	- timestamp(p) with p < 3 rejects BSON dates with finer digits rather
 *	  than rounding them, so that what is read equals what is stored.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <float.h>
#include <math.h>

#include "access/sysattr.h"
#include "catalog/pg_type.h"
#include "common/int.h"
#include "common/shortest_dec.h"
#include "datatype/timestamp.h"
#include "lib/stringinfo.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/array.h"
#include "utils/ascii.h"
#include "utils/builtins.h"
#include "utils/date.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/numeric.h"
#include "utils/timestamp.h"
#include "utils/uuid.h"

#include "core/convert.h"
#include "core/convert_json.h"
#include "core/convert_path.h"
#include "core/option.h"
#include "core/reply_check.h"

static Datum bson_to_datum(const bson_iter_t *iter, const IdxColumnConv *conv,
						   const IdxConvSource *src, bool *isnull);


/*
 * Are the "len" bytes at "str" ASCII without zero bytes?  Such a string is
 * valid UTF-8, so the common case skips pg_verify_mbstr()'s character by
 * character walk, which is costly on the short strings of a typical
 * document.  Eight bytes at a time as PostgreSQL's own fast path does,
 * four for shorter strings.
 */
static inline bool
is_plain_ascii(const char *str, uint32 len)
{
	const unsigned char *s = (const unsigned char *) str;
	uint32		whole = len & ~(uint32) 7;
	uint32		i;

	/* the last eight bytes, overlapping the whole words, cover the rest */
	if (len >= 8)
		return is_valid_ascii(s, (int) whole) &&
			(whole == len || is_valid_ascii(s + len - 8, 8));
	if (len >= 4)
	{
		uint32		a,
					b;

		/* no high bit set, and no byte that borrows (a zero) */
		memcpy(&a, s, 4);
		memcpy(&b, s + len - 4, 4);
		return ((a | (a - 0x01010101) | b | (b - 0x01010101)) &
				0x80808080) == 0;
	}
	for (i = 0; i < len; i++)
	{
		/* 0 wraps to 0xFF; bytes from 0x80 land at 0x7F and above */
		if ((uint8) (s[i] - 1) >= 0x7F)
			return false;
	}
	return true;
}

/*
 * Copy the "len" bytes at "src" to "dst" and say whether they are ASCII
 * without zero bytes (is_plain_ascii()), in one pass: the scan's strings
 * are short, and a memcpy() call after a separate check costs more than
 * both.  Eight bytes at a time (the last word overlapping the others),
 * four for shorter strings; "dst" must have room for "len" bytes only, as
 * no byte past them is written.  On false, "dst" holds the bytes anyway.
 */
static inline bool
copy_plain_ascii(char *dst, const char *src, uint32 len)
{
	uint64		w;
	uint64		highbit = 0;
	uint64		nonzero = UINT64CONST(0x8080808080808080);
	uint32		i;

	if (len >= 8)
	{
		for (i = 0; i + 8 < len; i += 8)
		{
			memcpy(&w, src + i, 8);
			memcpy(dst + i, &w, 8);
			highbit |= w;
			nonzero &= w + UINT64CONST(0x7f7f7f7f7f7f7f7f);
		}
		memcpy(&w, src + len - 8, 8);
		memcpy(dst + len - 8, &w, 8);
		highbit |= w;
		nonzero &= w + UINT64CONST(0x7f7f7f7f7f7f7f7f);
		/* as is_valid_ascii(): a carry matters only past a high bit */
		return (highbit & UINT64CONST(0x8080808080808080)) == 0 &&
			nonzero == UINT64CONST(0x8080808080808080);
	}
	if (len >= 4)
	{
		uint32		a,
					b;

		memcpy(&a, src, 4);
		memcpy(&b, src + len - 4, 4);
		memcpy(dst, &a, 4);
		memcpy(dst + len - 4, &b, 4);
		return ((a | (a - 0x01010101) | b | (b - 0x01010101)) &
				0x80808080) == 0;
	}
	for (i = 0; i < len; i++)
		dst[i] = src[i];
	return is_plain_ascii(src, len);
}

/*
 * Is the database's encoding UTF-8?  It cannot change once a backend is
 * connected to its database, so from then on it is looked up once rather
 * than once per string.
 */
static inline bool
database_is_utf8(void)
{
	static int	encoding = -1;

	if (encoding < 0)
	{
		if (!OidIsValid(MyDatabaseId))
			return GetDatabaseEncoding() == PG_UTF8;
		encoding = GetDatabaseEncoding();
	}
	return encoding == PG_UTF8;
}

/*
 * idx_utf8_to_server() past its fast path: check the string as UTF-8, and
 * convert it to the server encoding if that is not UTF-8.
 */
static char *
utf8_to_server_checked(const char *str, uint32 len, const IdxColumnConv *conv,
					   const IdxConvSource *src)
{
	ErrorContextCallback errcb;
	ConvErrorState state;
	char	   *result;

	if (len > (uint32) PG_INT32_MAX ||
		(!is_plain_ascii(str, len) &&
		 !pg_verify_mbstr(PG_UTF8, str, (int) len, true)))
		idx_report_bad_string(conv, src);

	if (database_is_utf8())
		return unconstify(char *, str);

	state.conv = conv;
	state.src = src;
	errcb.callback = idx_conv_error_callback;
	errcb.arg = &state;
	errcb.previous = error_context_stack;
	error_context_stack = &errcb;

	result = pg_any_to_server(str, (int) len, PG_UTF8);

	error_context_stack = errcb.previous;
	return result;
}

/*
 * idx_utf8_to_server(), inlined where the scan converts strings: ASCII in a
 * UTF-8 database is returned as it is.
 */
static inline char *
utf8_to_server(const char *str, uint32 len, const IdxColumnConv *conv,
			   const IdxConvSource *src)
{
	if (database_is_utf8() && len <= (uint32) PG_INT32_MAX &&
		is_plain_ascii(str, len))
		return unconstify(char *, str);
	return utf8_to_server_checked(str, len, conv, src);
}

/*
 * Turn a BSON string (UTF-8, "len" bytes, NUL-terminated by the BSON
 * format) into a NUL-terminated string in the server encoding.  Invalid
 * UTF-8 and embedded zero bytes are rejected.  The result may point into
 * the BSON buffer; it must not be modified.
 */
char *
idx_utf8_to_server(const char *str, uint32 len, const IdxColumnConv *conv,
			   const IdxConvSource *src)
{
	return utf8_to_server(str, len, conv, src);
}


/* ----------------------------------------------------------------
 *		Rendering values as text
 * ----------------------------------------------------------------
 */

/*
 * Shortest decimal text that reads back as the same double (what float8out
 * prints with extra_float_digits > 0); "NaN", "Infinity", "-Infinity" for
 * the special values.  "buf" has DOUBLE_SHORTEST_DECIMAL_LEN bytes.
 */
char *
idx_format_double(double value, char *buf)
{
	double_to_shortest_decimal_buf(value, buf);
	return buf;
}

/*
 * Decimal text of an int64, palloc'd.
 */
static char *
format_int64(int64 value)
{
	return psprintf(INT64_FORMAT, value);
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


/* ----------------------------------------------------------------
 *		BSON -> datum, per type
 * ----------------------------------------------------------------
 */

/*
 * text, varchar, bpchar: a string, a symbol, or an ObjectId (as 24
 * lowercase hex digits), through the type's input function so that the
 * typmod's length check (and bpchar padding) applies.
 */
static Datum
text_from_bson(const bson_iter_t *iter, const IdxColumnConv *conv,
			   const IdxConvSource *src)
{
	char		oidbuf[25];
	const char *str;
	char	   *server;
	size_t		utf8len;
	uint32		len;

	/* libbson's checked accessors would only test the type again */
	switch (bson_iter_type_unsafe(iter))
	{
		case BSON_TYPE_UTF8:
			str = bson_iter_utf8_unsafe(iter, &utf8len);
			len = (uint32) utf8len;
			break;
		case BSON_TYPE_SYMBOL:
			str = bson_iter_symbol(iter, &len);
			break;
		case BSON_TYPE_OID:
			bson_oid_to_string(bson_iter_oid(iter), oidbuf);
			str = oidbuf;
			len = 24;
			break;
		default:
			idx_report_wrong_type(conv, src, idx_bson_type_name(bson_iter_type(iter)));
	}
	server = utf8_to_server(str, len, conv, src);

	/*
	 * textin, and varcharin without a typmod, only copy the string: do that
	 * here, without the call and the strlen (in UTF-8 the length is known).
	 * bpchar pads and varchar(n) checks, so those go through their input
	 * functions.
	 */
	if (conv->typid == TEXTOID ||
		(conv->typid == VARCHAROID && conv->typmod < (int32) VARHDRSZ))
	{
		if (server != str)
			len = strlen(server);
		return PointerGetDatum(cstring_to_text_with_len(server, (int) len));
	}
	return idx_call_input_function(conv, src, server);
}

/*
 * Integral value of a decimal128, for integer columns.  NaN, infinities
 * and values beyond int64 are out of range; fractions are inexact.
 */
static int64
int64_from_decimal128(const bson_iter_t *iter, const IdxColumnConv *conv,
					  const IdxConvSource *src)
{
	bson_decimal128_t dec;
	char		str[BSON_DECIMAL128_STRING];
	Numeric		num,
				trunc;

	if (!bson_iter_decimal128(iter, &dec))
		idx_report_corrupt(conv, src);
	bson_decimal128_to_string(&dec, str);

	num = DatumGetNumeric(DirectFunctionCall3(numeric_in, CStringGetDatum(str),
											  ObjectIdGetDatum(InvalidOid),
											  Int32GetDatum(-1)));
	if (numeric_is_nan(num) || numeric_is_inf(num))
		idx_report_out_of_range(conv, src, str);

	trunc = DatumGetNumeric(DirectFunctionCall2(numeric_trunc,
												NumericGetDatum(num),
												Int32GetDatum(0)));
	if (DatumGetInt32(DirectFunctionCall2(numeric_cmp, NumericGetDatum(num),
										  NumericGetDatum(trunc))) != 0)
		idx_report_inexact(conv, src, str);

	if (DatumGetInt32(DirectFunctionCall2(numeric_cmp, NumericGetDatum(trunc),
										  NumericGetDatum(int64_to_numeric(PG_INT64_MIN)))) < 0 ||
		DatumGetInt32(DirectFunctionCall2(numeric_cmp, NumericGetDatum(trunc),
										  NumericGetDatum(int64_to_numeric(PG_INT64_MAX)))) > 0)
		idx_report_out_of_range(conv, src, str);

	return DatumGetInt64(DirectFunctionCall1(numeric_int8,
											 NumericGetDatum(trunc)));
}

/*
 * int2, int4, int8: int32, int64, or a double or decimal128 holding an
 * integral value, then checked against the column type's range.
 */
static Datum
int_from_bson(const bson_iter_t *iter, const IdxColumnConv *conv,
			  const IdxConvSource *src)
{
	char		buf[DOUBLE_SHORTEST_DECIMAL_LEN];
	int64		value;

	/* libbson's checked accessors would only test the type again */
	switch (bson_iter_type_unsafe(iter))
	{
		case BSON_TYPE_INT32:
			value = bson_iter_int32_unsafe(iter);
			break;
		case BSON_TYPE_INT64:
			value = bson_iter_int64_unsafe(iter);
			break;
		case BSON_TYPE_DOUBLE:
			{
				double		d = bson_iter_double(iter);

				/* 2^63 is exact in double; the check also rejects NaN */
				if (!(d >= -9223372036854775808.0 && d < 9223372036854775808.0))
					idx_report_out_of_range(conv, src, idx_format_double(d, buf));
				if (d != floor(d))
					idx_report_inexact(conv, src, idx_format_double(d, buf));
				value = (int64) d;
			}
			break;
		case BSON_TYPE_DECIMAL128:
			value = int64_from_decimal128(iter, conv, src);
			break;
		default:
			idx_report_wrong_type(conv, src, idx_bson_type_name(bson_iter_type(iter)));
	}

	switch (conv->typid)
	{
		case INT2OID:
			if (value < PG_INT16_MIN || value > PG_INT16_MAX)
				idx_report_out_of_range(conv, src, format_int64(value));
			return Int16GetDatum((int16) value);
		case INT4OID:
			if (value < PG_INT32_MIN || value > PG_INT32_MAX)
				idx_report_out_of_range(conv, src, format_int64(value));
			return Int32GetDatum((int32) value);
		default:
			return Int64GetDatum(value);
	}
}

/*
 * Is an int64 exactly representable as a double (float8 = true) or a
 * float?  2^63 is the first value that rounds out of int64's range.
 */
static bool
int64_fits_float(int64 value, bool float8)
{
	double		d = float8 ? (double) value : (double) (float) value;

	return d < 9223372036854775808.0 && (int64) d == value;
}

/*
 * float4, float8: a double, int32 or int64 that the column type holds
 * exactly.  NaN and the infinities are accepted.
 */
static Datum
float_from_bson(const bson_iter_t *iter, const IdxColumnConv *conv,
				const IdxConvSource *src)
{
	bool		float8 = (conv->typid == FLOAT8OID);
	char		buf[DOUBLE_SHORTEST_DECIMAL_LEN];
	double		d;

	switch (bson_iter_type(iter))
	{
		case BSON_TYPE_DOUBLE:
			d = bson_iter_double(iter);
			if (!float8 && !isnan(d) && !isinf(d) &&
				(fabs(d) > FLT_MAX || (double) (float) d != d))
				idx_report_inexact(conv, src, idx_format_double(d, buf));
			break;
		case BSON_TYPE_INT32:
		case BSON_TYPE_INT64:
			{
				int64		value = (bson_iter_type(iter) == BSON_TYPE_INT32)
					? bson_iter_int32(iter) : bson_iter_int64(iter);

				if (!int64_fits_float(value, float8))
					idx_report_inexact(conv, src, format_int64(value));
				d = (double) value;
			}
			break;
		default:
			idx_report_wrong_type(conv, src, idx_bson_type_name(bson_iter_type(iter)));
	}
	return float8 ? Float8GetDatum(d) : Float4GetDatum((float4) d);
}

/*
 * numeric: int32, int64, double (via its shortest exact decimal text) or
 * decimal128 (via its decimal string, never through double), through
 * numeric's input function so that the typmod applies.
 */
static Datum
numeric_from_bson(const bson_iter_t *iter, const IdxColumnConv *conv,
				  const IdxConvSource *src)
{
	char		buf[Max(BSON_DECIMAL128_STRING, DOUBLE_SHORTEST_DECIMAL_LEN)];
	bson_decimal128_t dec;

	switch (bson_iter_type(iter))
	{
		case BSON_TYPE_INT32:
			snprintf(buf, sizeof(buf), "%d", (int) bson_iter_int32(iter));
			break;
		case BSON_TYPE_INT64:
			snprintf(buf, sizeof(buf), INT64_FORMAT, bson_iter_int64(iter));
			break;
		case BSON_TYPE_DOUBLE:
			idx_format_double(bson_iter_double(iter), buf);
			break;
		case BSON_TYPE_DECIMAL128:
			if (!bson_iter_decimal128(iter, &dec))
				idx_report_corrupt(conv, src);
			bson_decimal128_to_string(&dec, buf);
			break;
		default:
			idx_report_wrong_type(conv, src, idx_bson_type_name(bson_iter_type(iter)));
	}
	return idx_call_input_function(conv, src, buf);
}

/*
 * BSON date (milliseconds since the Unix epoch) to a PostgreSQL timestamp
 * (microseconds since 2000-01-01).  False if out of PostgreSQL's range.
 */
static bool
bson_date_to_timestamp(int64 ms, Timestamp *result)
{
	int64		us;

	if (pg_sub_s64_overflow(ms, EPOCH_DIFF_MS, &ms) ||
		pg_mul_s64_overflow(ms, 1000, &us) ||
		!IS_VALID_TIMESTAMP(us))
		return false;
	*result = us;
	return true;
}

/*
 * Raise the wrong-type error unless the value under "iter" is of "type".
 */
static void
require_type(const bson_iter_t *iter, bson_type_t type,
			 const IdxColumnConv *conv, const IdxConvSource *src)
{
	if (bson_iter_type(iter) != type)
		idx_report_wrong_type(conv, src, idx_bson_type_name(bson_iter_type(iter)));
}

/*
 * timestamp, timestamptz: a BSON date.  A timestamp without time zone
 * takes the UTC wall clock.  timestamp(0..2) columns reject values with
 * more fractional digits than they keep.
 */
static Datum
timestamp_from_bson(const bson_iter_t *iter, const IdxColumnConv *conv,
					const IdxConvSource *src)
{
	static const int64 unit_ms[] = {1000, 100, 10};
	char		buf[DATE_STRING_LEN];
	int64		ms;
	Timestamp	ts;

	require_type(iter, BSON_TYPE_DATE_TIME, conv, src);

	ms = bson_iter_date_time(iter);
	if (!bson_date_to_timestamp(ms, &ts))
		idx_report_out_of_range(conv, src, idx_format_bson_date(ms, buf));
	if (conv->typmod >= 0 && conv->typmod < (int32) lengthof(unit_ms) &&
		ms % unit_ms[conv->typmod] != 0)
		idx_report_inexact(conv, src, idx_format_bson_date(ms, buf));
	return TimestampGetDatum(ts);
}

/*
 * date: a BSON date at exactly midnight UTC.
 */
static Datum
date_from_bson(const bson_iter_t *iter, const IdxColumnConv *conv,
			   const IdxConvSource *src)
{
	char		buf[DATE_STRING_LEN];
	int64		ms;
	int64		days;

	require_type(iter, BSON_TYPE_DATE_TIME, conv, src);

	ms = bson_iter_date_time(iter);
	if (ms % MS_PER_DAY != 0)
		idx_report_inexact(conv, src, idx_format_bson_date(ms, buf));
	days = ms / MS_PER_DAY - EPOCH_DIFF_DAYS;
	if (!IS_VALID_DATE(days))
		idx_report_out_of_range(conv, src, idx_format_bson_date(ms, buf));
	return DateADTGetDatum((DateADT) days);
}

/*
 * uuid: binary subtype 4 of 16 bytes.  The legacy subtype 3 has
 * driver-specific byte orders (Java and C# drivers swap bytes), so it is a
 * wrong type like any other binary.
 */
static Datum
uuid_from_bson(const bson_iter_t *iter, const IdxColumnConv *conv,
			   const IdxConvSource *src)
{
	bson_subtype_t subtype;
	uint32		len;
	const uint8_t *data;
	pg_uuid_t  *uuid;

	require_type(iter, BSON_TYPE_BINARY, conv, src);

	bson_iter_binary(iter, &subtype, &len, &data);
	if (subtype != BSON_SUBTYPE_UUID || len != UUID_LEN)
		idx_report_wrong_binary(conv, src, subtype, len);

	uuid = (pg_uuid_t *) palloc(sizeof(pg_uuid_t));
	memcpy(uuid->data, data, UUID_LEN);
	return UUIDPGetDatum(uuid);
}

/*
 * bytea: the bytes of a binary value of any subtype.
 */
static Datum
bytea_from_bson(const bson_iter_t *iter, const IdxColumnConv *conv,
				const IdxConvSource *src)
{
	bson_subtype_t subtype;
	uint32		len;
	const uint8_t *data;
	bytea	   *result;

	require_type(iter, BSON_TYPE_BINARY, conv, src);

	bson_iter_binary(iter, &subtype, &len, &data);
	if (len > MaxAllocSize - VARHDRSZ)
		idx_report_binary_too_long(conv, src, len);
	result = (bytea *) palloc(VARHDRSZ + len);
	SET_VARSIZE(result, VARHDRSZ + len);
	memcpy(VARDATA(result), data, len);
	return PointerGetDatum(result);
}

/*
 * One-dimensional arrays: a BSON array whose elements convert by the
 * element type's rules; null and undefined elements are NULL elements.
 */
static Datum
array_from_bson(const bson_iter_t *iter, const IdxColumnConv *conv,
				const IdxConvSource *src)
{
	IdxColumnConv elemconv;
	bson_iter_t child;
	Datum	   *values;
	bool	   *nulls;
	int			nelems = 0;
	int			i = 0;
	int			dims[1];
	int			lbs[1];

	require_type(iter, BSON_TYPE_ARRAY, conv, src);
	if (!bson_iter_recurse(iter, &child))
		idx_report_corrupt(conv, src);
	while (bson_iter_next(&child))
		nelems++;
	if (nelems == 0)
		return PointerGetDatum(construct_empty_array(conv->elemtype));

	/* the element typmod is the column's (as for varchar(10)[]) */
	elemconv = *conv;
	elemconv.typid = conv->elemtype;
	elemconv.elemtype = InvalidOid;
	elemconv.typinput = conv->eleminput;
	elemconv.typioparam = conv->elemioparam;

	values = (Datum *) palloc(nelems * sizeof(Datum));
	nulls = (bool *) palloc(nelems * sizeof(bool));
	if (!bson_iter_recurse(iter, &child))
		idx_report_corrupt(conv, src);
	while (i < nelems && bson_iter_next(&child))
	{
		values[i] = bson_to_datum(&child, &elemconv, src, &nulls[i]);
		i++;
	}

	dims[0] = i;
	lbs[0] = 1;
	return PointerGetDatum(construct_md_array(values, nulls, 1, dims, lbs,
											  conv->elemtype, conv->elemlen,
											  conv->elembyval,
											  conv->elemalign));
}

/*
 * Convert the BSON value under "iter" to a datum of conv->typid.  BSON
 * null and undefined are SQL NULL for every type.
 */
Datum
idx_bson_to_datum(const bson_iter_t *iter, const IdxColumnConv *conv,
				  const IdxConvSource *src, bool *isnull)
{
	return bson_to_datum(iter, conv, src, isnull);
}

/*
 * idx_bson_to_datum(), called directly by the row conversion below (a call
 * of the exported function goes through the PLT, once per value).
 */
static Datum
bson_to_datum(const bson_iter_t *iter, const IdxColumnConv *conv,
			  const IdxConvSource *src, bool *isnull)
{
	bson_type_t type = bson_iter_type_unsafe(iter);	/* iter is on an element */

	*isnull = false;
	if (type == BSON_TYPE_NULL || type == BSON_TYPE_UNDEFINED)
	{
		*isnull = true;
		return (Datum) 0;
	}

	if (OidIsValid(conv->elemtype))
		return array_from_bson(iter, conv, src);

	switch (conv->typid)
	{
		case TEXTOID:
		case VARCHAROID:
		case BPCHAROID:
			return text_from_bson(iter, conv, src);
		case INT2OID:
		case INT4OID:
		case INT8OID:
			return int_from_bson(iter, conv, src);
		case FLOAT4OID:
		case FLOAT8OID:
			return float_from_bson(iter, conv, src);
		case NUMERICOID:
			return numeric_from_bson(iter, conv, src);
		case BOOLOID:
			if (type != BSON_TYPE_BOOL)
				idx_report_wrong_type(conv, src, idx_bson_type_name(type));
			return BoolGetDatum(bson_iter_bool(iter));
		case TIMESTAMPOID:
		case TIMESTAMPTZOID:
			return timestamp_from_bson(iter, conv, src);
		case DATEOID:
			return date_from_bson(iter, conv, src);
		case UUIDOID:
			return uuid_from_bson(iter, conv, src);
		case BYTEAOID:
			return bytea_from_bson(iter, conv, src);
		case JSONOID:
		case JSONBOID:
			return idx_json_from_bson(iter, conv, src);
		default:
			elog(ERROR, "unsupported type %u for column \"%s\"",
				 conv->typid, conv->colname);
	}
	return (Datum) 0;			/* keep compiler quiet */
}


/* ----------------------------------------------------------------
 *		Column and row converters
 * ----------------------------------------------------------------
 */

/*
 * May the current user see document _ids of table "relid" in error
 * details?  As PostgreSQL does for key values (BuildIndexValueDescription):
 * with SELECT on the table, or on the column that holds them.  A table
 * without an _id column shows them only with table-level SELECT.
 */
bool
idx_id_visible(Oid relid, AttrNumber id_attnum)
{
	Oid			userid = GetUserId();

	if (!OidIsValid(relid))
		return true;
	if (pg_class_aclcheck(relid, userid, ACL_SELECT) == ACLCHECK_OK)
		return true;
	return id_attnum != InvalidAttrNumber &&
		pg_attribute_aclcheck(relid, id_attnum, userid,
							  ACL_SELECT) == ACLCHECK_OK;
}

/*
 * Scalar types we convert (arrays of these, except json/jsonb, too).
 */
static bool
scalar_type_supported(Oid typid)
{
	switch (typid)
	{
		case TEXTOID:
		case VARCHAROID:
		case BPCHAROID:
		case INT2OID:
		case INT4OID:
		case INT8OID:
		case FLOAT4OID:
		case FLOAT8OID:
		case NUMERICOID:
		case BOOLOID:
		case TIMESTAMPOID:
		case TIMESTAMPTZOID:
		case DATEOID:
		case UUIDOID:
		case BYTEAOID:
		case JSONOID:
		case JSONBOID:
			return true;
		default:
			return false;
	}
}

/*
 * Is "typid" a supported scalar, or a one-dimensional array type whose
 * element is a supported scalar other than json/jsonb?  (Domains are not
 * supported.)
 */
bool
idx_type_is_supported(Oid typid)
{
	Oid			elemtype;

	if (scalar_type_supported(typid))
		return true;
	elemtype = get_element_type(typid);
	return OidIsValid(elemtype) && elemtype != JSONOID &&
		elemtype != JSONBOID && scalar_type_supported(elemtype);
}

/*
 * Look up what converting values of a column needs: the input function
 * (with typmod) of its type and, for arrays, the element type's storage
 * and input function.  Errors for unsupported types.
 */
void
idx_conv_init(IdxColumnConv *conv, const char *colname, Oid typid,
			  int32 typmod)
{
	Oid			infunc;

	if (!idx_type_is_supported(typid))
		ereport(ERROR,
				(errcode(ERRCODE_FDW_INVALID_DATA_TYPE),
				 errmsg("column \"%s\" has unsupported type %s",
						colname, format_type_be(typid)),
				 errhint("Supported types are text, varchar, bpchar, smallint, integer, bigint, real, double precision, numeric, boolean, timestamp, timestamptz, date, uuid, bytea, json, jsonb, and one-dimensional arrays of those except json and jsonb.")));

	memset(conv, 0, sizeof(IdxColumnConv));
	conv->colname = colname;
	conv->typid = typid;
	conv->typmod = typmod;
	getTypeInputInfo(typid, &infunc, &conv->typioparam);
	fmgr_info(infunc, &conv->typinput);

	if (!scalar_type_supported(typid))
	{
		conv->elemtype = get_element_type(typid);
		get_typlenbyvalalign(conv->elemtype, &conv->elemlen,
							 &conv->elembyval, &conv->elemalign);
		getTypeInputInfo(conv->elemtype, &infunc, &conv->elemioparam);
		fmgr_info(infunc, &conv->eleminput);
	}
	else
		conv->elemtype = InvalidOid;
}

/*
 * Does column "conv" take a BSON string as it is, as text_from_bson() does
 * for text and for varchar without a typmod?
 */
static inline bool
takes_string_as_is(const IdxColumnConv *conv)
{
	return conv->typid == TEXTOID ||
		(conv->typid == VARCHAROID && conv->typmod < (int32) VARHDRSZ);
}

/*
 * Collect the distinct top-level fields of rc's columns (see IdxRowConv),
 * in attribute order.  Dotted paths stay with idx_path_find().
 */
static void
build_top_fields(IdxRowConv *rc)
{
	int			n = Max(rc->natts, 1);
	int			i;

	rc->ntop = 0;
	rc->top_name = (const char **) palloc(sizeof(char *) * n);
	rc->top_len = (uint32 *) palloc(sizeof(uint32) * n);
	rc->top_of = (int *) palloc(sizeof(int) * n);
	rc->top_found = (bool *) palloc0(sizeof(bool) * n);
	rc->top_off = (uint32 *) palloc0(sizeof(uint32) * n);
	rc->top_keylen = (uint32 *) palloc0(sizeof(uint32) * n);
	rc->top_ntext = (int *) palloc0(sizeof(int) * n);
	for (i = 0; i < rc->natts; i++)
	{
		int			j;

		rc->top_of[i] = -1;
		if (rc->fields[i] == NULL || strchr(rc->fields[i], '.') != NULL)
			continue;
		for (j = 0; j < rc->ntop; j++)
			if (strcmp(rc->top_name[j], rc->fields[i]) == 0)
				break;
		if (j == rc->ntop)
		{
			rc->top_name[j] = rc->fields[i];
			rc->top_len[j] = strlen(rc->fields[i]);
			rc->ntop++;
		}
		rc->top_of[i] = j;
		if (takes_string_as_is(&rc->cols[i]))
			rc->top_ntext[j]++;
	}
}

/*
 * Build the row converters of a scan.  Only the attributes the query uses
 * (all of them for a whole-row reference or a NULL attrs_used) get a field
 * path; the others, and dropped columns, always come back NULL.
 */
IdxRowConv *
idx_row_conv_create(TupleDesc tupdesc, const struct IdxTableInfo *info,
					Bitmapset *attrs_used)
{
	IdxRowConv *rc = (IdxRowConv *) palloc0(sizeof(IdxRowConv));
	bool		all_columns;
	int			i;

	rc->natts = tupdesc->natts;
	rc->cols = (IdxColumnConv *) palloc0(sizeof(IdxColumnConv) * Max(rc->natts, 1));
	rc->fields = (const char **) palloc0(sizeof(char *) * Max(rc->natts, 1));
	rc->collection = info->collection ? pstrdup(info->collection) : NULL;
	rc->hide_id = !idx_id_visible(info->relid, info->id_attnum);

	all_columns = (attrs_used == NULL ||
				   bms_is_member(0 - FirstLowInvalidHeapAttributeNumber,
								 attrs_used));

	for (i = 0; i < rc->natts; i++)
	{
		Form_pg_attribute attr = TupleDescAttr(tupdesc, i);

		if (attr->attisdropped)
			continue;
		if (!all_columns &&
			!bms_is_member(attr->attnum - FirstLowInvalidHeapAttributeNumber,
						   attrs_used))
			continue;
		if (i >= info->natts || info->fields[i] == NULL)
			continue;

		idx_conv_init(&rc->cols[i], pstrdup(NameStr(attr->attname)),
					  attr->atttypid, attr->atttypmod);
		rc->fields[i] = pstrdup(info->fields[i]);
	}
	build_top_fields(rc);
	return rc;
}

/*
 * The buffer of a converter's text datums under idx_row_conv_reuse().
 */
typedef struct IdxRowBuffer
{
	MemoryContext cxt;			/* where "data" lives */
	char	   *data;
	Size		size;
} IdxRowBuffer;

/*
 * Give "rc" a kept buffer for its rows' text datums (see convert.h): a
 * scan's rows then cost no allocation each.
 */
void
idx_row_conv_reuse(IdxRowConv *rc)
{
	rc->reuse = (IdxRowBuffer *) palloc0(sizeof(IdxRowBuffer));
	rc->reuse->cxt = CurrentMemoryContext;
}

/*
 * "space" bytes for a row's text datums: rc's kept buffer, grown (to at
 * least twice its size, so that growing is rare) if it is too small, or a
 * fresh allocation in the current context without one.
 */
static char *
row_text_space(const IdxRowConv *rc, Size space)
{
	IdxRowBuffer *buf = rc->reuse;

	if (buf == NULL)
		return palloc(space);
	if (buf->size < space)
	{
		Size		size = Max(space, buf->size * 2);

		if (buf->data)
			pfree(buf->data);
		buf->data = MemoryContextAlloc(buf->cxt, size);
		buf->size = size;
	}
	return buf->data;
}

/*
 * A scalar column's path crosses an array, where it has one value per
 * element (convert_path.h).  2202E, the class of a subscript that does not
 * select one element: the document is fine, the mapping cannot read it.
 */
static void
report_path_through_array(const IdxColumnConv *conv, const IdxConvSource *src,
						  const char *path)
{
	ereport(ERROR,
			(errcode(ERRCODE_ARRAY_SUBSCRIPT_ERROR),
			 errmsg("field path \"%s\" of column \"%s\" crosses an array",
					path, conv->colname),
			 idx_errdetail_conv_source(src),
			 errhint("Map the path to an array column, which reads the values of all elements.")));
}

/*
 * The value of one column at its path, into *value / *isnull.
 */
static void
read_column(const IdxRowConv *rc, int i, const IdxConvSource *src,
			Datum *value, bool *isnull)
{
	bson_iter_t iter;

	switch (idx_path_find(src->document, rc->fields[i], &iter))
	{
		case IDX_PATH_MISSING:
			break;
		case IDX_PATH_FOUND:
			*value = idx_bson_to_datum(&iter, &rc->cols[i], src, isnull);
			break;
		case IDX_PATH_THROUGH_ARRAY:
			if (!OidIsValid(rc->cols[i].elemtype))
				report_path_through_array(&rc->cols[i], src, rc->fields[i]);
			if (bson_iter_init_find(&iter,
									idx_path_collect(src->document, rc->fields[i]),
									"v"))
				*value = idx_bson_to_datum(&iter, &rc->cols[i], src, isnull);
			break;
	}
}

/*
 * memcmp(a, b, len) == 0 for the short keys of documents, where the call
 * costs more than the comparison: eight or four bytes at a time (the last
 * word overlapping the others), bytes below four.
 */
static inline bool
same_bytes(const char *a, const char *b, uint32 len)
{
	uint64		x,
				y;
	uint32		v,
				w;
	uint32		i;

	if (len >= 8)
	{
		for (i = 0; i + 8 < len; i += 8)
		{
			memcpy(&x, a + i, 8);
			memcpy(&y, b + i, 8);
			if (x != y)
				return false;
		}
		memcpy(&x, a + len - 8, 8);
		memcpy(&y, b + len - 8, 8);
		return x == y;
	}
	if (len >= 4)
	{
		memcpy(&v, a, 4);
		memcpy(&w, b, 4);
		if (v != w)
			return false;
		memcpy(&v, a + len - 4, 4);
		memcpy(&w, b + len - 4, 4);
		return v == w;
	}
	for (i = 0; i < len; i++)
		if (a[i] != b[i])
			return false;
	return true;
}

/*
 * A little-endian uint32 of a BSON document, at any alignment.
 */
static inline uint32
bson_uint32_at(const uint8 *p)
{
	uint32		v;

	memcpy(&v, p, 4);
	return BSON_UINT32_FROM_LE(v);
}

/*
 * Where the element at offset "off" of the "len"-byte document "d" ends,
 * or 0 where bson_iter_next() would stop (a malformed element, or the
 * end), given that its key is "klen" bytes.  Fixed-size values and strings
 * are sized here, the others by reply_check.c, with libbson's checks, so
 * that the walk sees the elements bson_iter_next() would.
 */
static inline uint32
element_end(const uint8 *d, uint32 len, uint32 off, uint32 klen)
{
	uint32		o = off + klen + 2;
	const uint8 *sub;
	uint32		sublen;
	uint32		l;
	uint32		end;

	switch (d[off])
	{
		case BSON_TYPE_INT32:
			end = o + 4;
			break;
		case BSON_TYPE_DOUBLE:
		case BSON_TYPE_INT64:
		case BSON_TYPE_DATE_TIME:
		case BSON_TYPE_TIMESTAMP:
			end = o + 8;
			break;
		case BSON_TYPE_UTF8:
			if (o + 4 >= len)
				return 0;
			l = bson_uint32_at(d + o);
			if (l > len - (o + 4) || l == 0 || o + 4 + l >= len ||
				d[o + 4 + l - 1] != '\0')
				return 0;
			end = o + 4 + l;
			break;
		default:
			end = idx_bson_value_end(d, len, o, d[off], &sub, &sublen);
			break;
	}
	return end < len ? end : 0;
}

/*
 * The length of the key of the element at offset "off" of the "len"-byte
 * document "d".  Whether it is the field "name" ("namelen" bytes, no NUL)
 * that the walk expects, is seen first, without a search for the key's
 * end; *expected says if it is.  The document's trailing NUL (which a
 * bson_t has) ends every key.
 */
static inline uint32
key_length(const uint8 *d, uint32 len, uint32 off, const char *name,
		   uint32 namelen, bool *expected)
{
	const uint8 *key = d + off + 1;
	const uint8 *p;

	*expected = (off + 1 + namelen < len && key[namelen] == '\0' &&
				 same_bytes(name, (const char *) key, namelen));
	if (*expected)
		return namelen;
	for (p = key; *p != '\0'; p++)
		;
	return (uint32) (p - key);
}

/*
 * Walk the top-level elements of "doc" once, noting in rc->top_off and
 * rc->top_keylen where each of rc's top-level fields is.  The first
 * element with a field's name counts, as for bson_iter_find(); the walk
 * stops when every field has been seen, or where bson_iter_next() would.
 * The walk reads the bytes itself (libbson's iterator costs several times
 * more per element).  The field after the last one found is tried first,
 * so that documents whose fields come in the usual order cost one
 * comparison per element.  Returns the bytes the text datums of the
 * located strings need (see idx_document_to_row()).
 */
static Size
locate_top_fields(const IdxRowConv *rc, const bson_t *doc)
{
	const uint8 *d = bson_get_data(doc);
	uint32		len = doc->len;
	uint32		off = 4;
	int			left = rc->ntop;
	int			next = 0;
	Size		space = 0;

	memset(rc->top_found, 0, sizeof(bool) * rc->ntop);
	if (left == 0 || len < 5)
		return 0;
	while (off < len - 1)
	{
		bool		expected;
		uint32		klen = key_length(d, len, off, rc->top_name[next],
									  rc->top_len[next], &expected);
		uint32		end = element_end(d, len, off, klen);
		const char *key = (const char *) d + off + 1;
		int			j = -1;
		int			k;

		if (end == 0)
			break;
		if (expected && !rc->top_found[next])
			j = next;
		else
		{
			for (k = 1; k < rc->ntop; k++)
			{
				int			t = next + k;

				if (t >= rc->ntop)
					t -= rc->ntop;
				if (!rc->top_found[t] && rc->top_len[t] == klen &&
					same_bytes(rc->top_name[t], key, klen))
				{
					j = t;
					break;
				}
			}
		}
		if (j >= 0)
		{
			rc->top_found[j] = true;
			rc->top_off[j] = off;
			rc->top_keylen[j] = klen;
			if (rc->top_ntext[j] > 0 && d[off] == BSON_TYPE_UTF8)
				space += rc->top_ntext[j] *
					MAXALIGN(VARHDRSZ + bson_uint32_at(d + off + klen + 2) - 1);
			next = (j + 1 < rc->ntop) ? j + 1 : 0;
			if (--left == 0)
				break;
		}
		off = end;
	}
	return space;
}

/*
 * The common cases of bson_to_datum(), from the element at offset "off"
 * (key length "klen") of document "d", without a bson_iter_t: null, a
 * valid UTF-8 string for text (its datum carved from "*textbuf"), int32 and
 * int64 that fit an integer column, a double or int32 for float8, a bool.
 * The results are bson_to_datum()'s.  Returns false for anything else,
 * errors included, which bson_to_datum() then converts or reports.
 */
static inline bool
convert_common(const IdxColumnConv *conv, const uint8 *d, uint32 off,
			   uint32 klen, char **textbuf, Datum *value, bool *isnull)
{
	const uint8 *v = d + off + klen + 2;
	int64		n;

	switch (d[off])
	{
		case BSON_TYPE_NULL:
		case BSON_TYPE_UNDEFINED:
			*isnull = true;
			*value = (Datum) 0;
			return true;
		case BSON_TYPE_UTF8:
			{
				uint32		len = bson_uint32_at(v) - 1;
				const char *str = (const char *) v + 4;
				text	   *t = (text *) *textbuf;

				if (!takes_string_as_is(conv) || !database_is_utf8() ||
					len > (uint32) PG_INT32_MAX - VARHDRSZ ||
					(!copy_plain_ascii(VARDATA(t), str, len) &&
					 !pg_verify_mbstr(PG_UTF8, str, (int) len, true)))
					return false;
				SET_VARSIZE(t, VARHDRSZ + len);
				*textbuf += MAXALIGN(VARHDRSZ + len);
				*value = PointerGetDatum(t);
				break;
			}
		case BSON_TYPE_INT32:
		case BSON_TYPE_INT64:
			if (d[off] == BSON_TYPE_INT32)
				n = (int32) bson_uint32_at(v);
			else
			{
				uint64		u;

				memcpy(&u, v, 8);
				n = (int64) BSON_UINT64_FROM_LE(u);
			}
			if (conv->typid == INT8OID)
				*value = Int64GetDatum(n);
			else if (conv->typid == INT4OID &&
					 n >= PG_INT32_MIN && n <= PG_INT32_MAX)
				*value = Int32GetDatum((int32) n);
			else if (conv->typid == INT2OID &&
					 n >= PG_INT16_MIN && n <= PG_INT16_MAX)
				*value = Int16GetDatum((int16) n);
			else if (conv->typid == FLOAT8OID && d[off] == BSON_TYPE_INT32)
				*value = Float8GetDatum((double) n);
			else
				return false;
			break;
		case BSON_TYPE_DOUBLE:
			{
				uint64		u;
				double		f;

				if (conv->typid != FLOAT8OID)
					return false;
				memcpy(&u, v, 8);
				u = BSON_UINT64_FROM_LE(u);
				memcpy(&f, &u, 8);
				*value = Float8GetDatum(f);
				break;
			}
		case BSON_TYPE_BOOL:
			if (conv->typid != BOOLOID)
				return false;
			*value = BoolGetDatum(*v != 0);
			break;
		default:
			return false;
	}
	*isnull = false;
	return true;
}

/*
 * Fill values/nulls from a document; missing fields are NULL.  Columns are
 * converted in attribute order (the first one that does not fit is the
 * one an error names), top-level fields from one walk of the document;
 * the common values without an iterator, the others through one made at
 * the field's element.  The text datums of the row's strings share one
 * allocation, sized by the walk (the per-row context frees them together),
 * or rc's kept buffer (idx_row_conv_reuse()).
 */
void
idx_document_to_row(const IdxRowConv *rc, const bson_t *doc,
					Datum *values, bool *nulls)
{
	const uint8 *d = bson_get_data(doc);
	IdxConvSource src;
	Size		space;
	char	   *textbuf = NULL;
	int			i;

	src.collection = rc->collection;
	src.document = doc;
	src.hide_id = rc->hide_id;

	space = locate_top_fields(rc, doc);
	if (space > 0)
		textbuf = row_text_space(rc, space);
	for (i = 0; i < rc->natts; i++)
	{
		int			j = rc->top_of[i];

		values[i] = (Datum) 0;
		nulls[i] = true;
		if (j >= 0)
		{
			bson_iter_t iter;

			if (!rc->top_found[j] ||
				convert_common(&rc->cols[i], d, rc->top_off[j],
							   rc->top_keylen[j], &textbuf, &values[i],
							   &nulls[i]))
				continue;
			if (!bson_iter_init_from_data_at_offset(&iter, d, doc->len,
													rc->top_off[j],
													rc->top_keylen[j]))
				elog(ERROR, "could not read field \"%s\" of a document",
					 rc->fields[i]);
			values[i] = bson_to_datum(&iter, &rc->cols[i], &src, &nulls[i]);
		}
		else if (rc->fields[i] != NULL)
			read_column(rc, i, &src, &values[i], &nulls[i]);
	}
}
