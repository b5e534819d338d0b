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
 * here use as well; strings reach the server encoding through
 * convert_text.c, and the errors are convert_error.c's.
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
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/date.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/numeric.h"
#include "utils/timestamp.h"
#include "utils/uuid.h"

#include "core/convert.h"
#include "core/convert_error.h"
#include "core/convert_json.h"
#include "core/convert_path.h"
#include "core/convert_text.h"
#include "core/option.h"
#include "core/pg_compat.h"
#include "core/reply_check.h"

static Datum bson_to_datum(const bson_iter_t *iter, const IdxColumnConv *conv,
						   const IdxConvSource *src, bool *isnull);


/* ----------------------------------------------------------------
 *		Rendering values as text
 * ----------------------------------------------------------------
 */

/*
 * Decimal text of an int64, palloc'd.
 */
static char *
format_int64(int64 value)
{
	return psprintf(INT64_FORMAT, value);
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
	server = idx_utf8_to_server(str, len, conv, src);

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
 * idx_bson_to_datum(), called directly by the array conversion above (a
 * call of the exported function goes through the PLT, once per value).
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
 *		Column converters (the row converters are in convert_row.c)
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
