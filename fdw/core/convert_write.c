/*-------------------------------------------------------------------------
 *
 * convert_write.c
 *		  Conversion of PostgreSQL datums to BSON (the writing direction).
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/core/convert_write.c
 *
 * The inverse of the reading rules in convert.c (see convert.h): a value
 * goes to the BSON type that reads back as the same value (sub-millisecond
 * timestamp digits aside, which BSON dates lack), and a value BSON cannot
 * hold (an infinite date, a numeric beyond decimal128) is an error rather
 * than something close to it.  It serves the documents of
 * INSERT and UPDATE and the pushed-down constants of filters;
 * idx_datum_is_exact_in_bson() tells the pushdown code which values
 * survive the trip unchanged.  json/jsonb values go through
 * convert_json.c.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <math.h>

#include "catalog/pg_type.h"
#include "datatype/timestamp.h"
#include "mb/pg_wchar.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/date.h"
#include "utils/lsyscache.h"
#include "utils/numeric.h"
#include "utils/timestamp.h"
#include "utils/uuid.h"

#include "core/convert.h"
#include "core/convert_error.h"
#include "core/convert_json.h"
#include "core/pg_compat.h"

/* Limits of BSON decimal128 (IEEE 754-2008, BID encoding) */
#define DEC128_MAX_DIGITS	34
#define DEC128_MIN_EXPONENT (-6176)
#define DEC128_MAX_EXPONENT 6111

/*
 * Convert a numeric to decimal128 if that is exact.  Decimal128 holds a
 * coefficient of up to 34 digits with an exponent in [-6176, 6111];
 * numeric holds far more.  Trailing zeros are moved into the exponent
 * (or padded onto the coefficient) when that makes the value fit, which
 * keeps the value although not necessarily its display scale.
 */
static bool
numeric_to_decimal128(Numeric num, bson_decimal128_t *dec)
{
	char	   *str;
	char	   *digits;
	const char *p;
	int			ndigits = 0;
	int			exponent = 0;
	bool		negative = false;
	bool		fraction = false;
	char	   *text;

	if (numeric_is_nan(num))
		return bson_decimal128_from_string("NaN", dec);

	str = DatumGetCString(DirectFunctionCall1(numeric_out,
											  NumericGetDatum(num)));
	if (numeric_is_inf(num))
		return bson_decimal128_from_string(str, dec);

	/* numeric_out prints [-]digits[.digits]; collect the significant digits */
	digits = palloc(strlen(str) + DEC128_MAX_DIGITS + 1);
	p = str;
	if (*p == '-')
	{
		negative = true;
		p++;
	}
	for (; *p; p++)
	{
		if (*p == '.')
		{
			fraction = true;
			continue;
		}
		if (fraction)
			exponent--;
		if (ndigits == 0 && *p == '0')
			continue;			/* leading zero */
		digits[ndigits++] = *p;
	}

	if (ndigits == 0)
	{
		/* zero: any exponent will do, keep the scale where possible */
		digits[ndigits++] = '0';
		exponent = Max(exponent, DEC128_MIN_EXPONENT);
	}

	while ((ndigits > DEC128_MAX_DIGITS || exponent < DEC128_MIN_EXPONENT) &&
		   ndigits > 1 && digits[ndigits - 1] == '0')
	{
		ndigits--;
		exponent++;
	}
	while (exponent > DEC128_MAX_EXPONENT && ndigits < DEC128_MAX_DIGITS)
	{
		digits[ndigits++] = '0';
		exponent--;
	}
	if (ndigits > DEC128_MAX_DIGITS || exponent < DEC128_MIN_EXPONENT ||
		exponent > DEC128_MAX_EXPONENT)
		return false;

	text = psprintf("%s%.*sE%d", negative ? "-" : "", ndigits, digits,
					exponent);
	return bson_decimal128_from_string(text, dec);
}

/*
 * Shorten a (numeric, ASCII) value for an error message.
 */
static char *
abbreviate(char *str)
{
	if (strlen(str) > 40)
		strcpy(str + 37, "...");
	return str;
}

/*
 * Milliseconds since the Unix epoch of a finite timestamp, rounded toward
 * minus infinity.  Every finite timestamp fits.
 */
static int64
timestamp_to_bson_date(Timestamp ts)
{
	int64		ms = ts / 1000;

	if (ts % 1000 < 0)
		ms--;
	return ms + EPOCH_DIFF_MS;
}

/*
 * Append a text datum as a UTF-8 string.  bpchar values go as stored,
 * with their trailing blanks (what bpcharout prints).
 */
static bool
append_text(bson_t *doc, const char *key, int keylen, Datum value)
{
	text	   *t = DatumGetTextPP(value);
	char	   *str = VARDATA_ANY(t);
	int			len = VARSIZE_ANY_EXHDR(t);
	char	   *utf8;

	if (GetDatabaseEncoding() == PG_SQL_ASCII &&
		!pg_verify_mbstr(PG_UTF8, str, len, true))
		ereport(ERROR,
				(errcode(ERRCODE_CHARACTER_NOT_IN_REPERTOIRE),
				 errmsg("string is not valid UTF-8 and cannot be stored in BSON")));

	utf8 = pg_server_to_any(str, len, PG_UTF8);
	if (utf8 != str)
		len = strlen(utf8);
	return bson_append_utf8(doc, key, keylen, utf8, len);
}

/*
 * Append a one-dimensional array as a BSON array with keys "0", "1", ...
 */
static void
append_array(bson_t *doc, const char *key, int keylen, Datum value)
{
	ArrayType  *arr = DatumGetArrayTypeP(value);
	Oid			elemtype = ARR_ELEMTYPE(arr);
	int16		elemlen;
	bool		elembyval;
	char		elemalign;
	Datum	   *elems;
	bool	   *nulls;
	int			nelems;
	int			i;
	bson_t		child;

	if (ARR_NDIM(arr) > 1)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("multidimensional arrays cannot be converted to BSON")));
	if (elemtype == JSONOID || elemtype == JSONBOID ||
		!idx_type_is_supported(elemtype))
		ereport(ERROR,
				(errcode(ERRCODE_FDW_INVALID_DATA_TYPE),
				 errmsg("cannot convert values of type %s to BSON",
						format_type_be(get_array_type(elemtype)))));

	get_typlenbyvalalign(elemtype, &elemlen, &elembyval, &elemalign);
	deconstruct_array(arr, elemtype, elemlen, elembyval, elemalign,
					  &elems, &nulls, &nelems);

	idx_check_append(idx_bson_append_array_begin(doc, key, keylen, &child));
	for (i = 0; i < nelems; i++)
	{
		char		keybuf[16];
		const char *ikey;
		size_t		ikeylen;

		ikeylen = bson_uint32_to_string((uint32) i, &ikey, keybuf,
										sizeof(keybuf));
		idx_append_datum(&child, ikey, (int) ikeylen, elems[i], nulls[i],
						 elemtype);
	}
	idx_check_append(bson_append_array_end(doc, &child));
}

/*
 * Append "value" of type "typid" under "key" (keylen -1: NUL-terminated),
 * following the reading rules in reverse.  Values BSON cannot hold at all
 * (infinite dates, numerics beyond decimal128) are errors; sub-millisecond
 * timestamp digits are dropped (see idx_datum_is_exact_in_bson).
 */
void
idx_append_datum(bson_t *doc, const char *key, int keylen,
				 Datum value, bool isnull, Oid typid)
{
	bool		ok;

	if (isnull)
	{
		idx_check_append(bson_append_null(doc, key, keylen));
		return;
	}

	switch (typid)
	{
		case TEXTOID:
		case VARCHAROID:
		case BPCHAROID:
			ok = append_text(doc, key, keylen, value);
			break;
		case INT2OID:
			ok = bson_append_int32(doc, key, keylen, DatumGetInt16(value));
			break;
		case INT4OID:
			ok = bson_append_int32(doc, key, keylen, DatumGetInt32(value));
			break;
		case INT8OID:
			ok = bson_append_int64(doc, key, keylen, DatumGetInt64(value));
			break;
		case FLOAT4OID:
			ok = bson_append_double(doc, key, keylen,
									(double) DatumGetFloat4(value));
			break;
		case FLOAT8OID:
			ok = bson_append_double(doc, key, keylen, DatumGetFloat8(value));
			break;
		case NUMERICOID:
			{
				bson_decimal128_t dec;

				if (!numeric_to_decimal128(DatumGetNumeric(value), &dec))
					ereport(ERROR,
							(errcode(ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE),
							 errmsg("numeric value %s cannot be represented exactly as BSON decimal128",
									abbreviate(DatumGetCString(DirectFunctionCall1(numeric_out, value)))),
							 errdetail("Decimal128 holds at most 34 significant digits with exponents from -6176 to 6111.")));
				ok = bson_append_decimal128(doc, key, keylen, &dec);
			}
			break;
		case BOOLOID:
			ok = bson_append_bool(doc, key, keylen, DatumGetBool(value));
			break;
		case TIMESTAMPOID:
		case TIMESTAMPTZOID:
			if (TIMESTAMP_NOT_FINITE(DatumGetTimestamp(value)))
				ereport(ERROR,
						(errcode(ERRCODE_DATETIME_VALUE_OUT_OF_RANGE),
						 errmsg("infinite timestamp cannot be converted to a BSON date")));
			ok = bson_append_date_time(doc, key, keylen,
									   timestamp_to_bson_date(DatumGetTimestamp(value)));
			break;
		case DATEOID:
			if (DATE_NOT_FINITE(DatumGetDateADT(value)))
				ereport(ERROR,
						(errcode(ERRCODE_DATETIME_VALUE_OUT_OF_RANGE),
						 errmsg("infinite date cannot be converted to a BSON date")));
			ok = bson_append_date_time(doc, key, keylen,
									   ((int64) DatumGetDateADT(value) + EPOCH_DIFF_DAYS) * MS_PER_DAY);
			break;
		case UUIDOID:
			ok = bson_append_binary(doc, key, keylen, BSON_SUBTYPE_UUID,
									DatumGetUUIDP(value)->data, UUID_LEN);
			break;
		case BYTEAOID:
			{
				bytea	   *b = DatumGetByteaPP(value);

				ok = bson_append_binary(doc, key, keylen, BSON_SUBTYPE_BINARY,
										(const uint8_t *) VARDATA_ANY(b),
										VARSIZE_ANY_EXHDR(b));
			}
			break;
		case JSONOID:
		case JSONBOID:
			idx_append_json(doc, key, keylen, value, typid, NULL);
			return;
		default:
			if (!OidIsValid(get_element_type(typid)))
				ereport(ERROR,
						(errcode(ERRCODE_FDW_INVALID_DATA_TYPE),
						 errmsg("cannot convert values of type %s to BSON",
								format_type_be(typid))));
			append_array(doc, key, keylen, value);
			return;
	}
	idx_check_append(ok);
}

/*
 * Append a column's value to a document being written (see convert.h).
 */
void
idx_append_column_value(bson_t *doc, const char *key, Datum value,
						bool isnull, Oid typid, const IdxJsonTarget *target)
{
	if (!isnull && (typid == JSONOID || typid == JSONBOID))
		idx_append_json(doc, key, -1, value, typid, target);
	else
		idx_append_datum(doc, key, -1, value, isnull, typid);
}

/*
 * Does "value" survive the trip to BSON so that MongoDB compares it as
 * PostgreSQL would?  Not for NaN (MongoDB orders it below all numbers),
 * sub-millisecond or infinite timestamps, infinite dates, numerics that
 * decimal128 cannot hold, json/jsonb (numbers may become doubles, and the
 * containers compare differently) and arrays (MongoDB matches elements).
 */
bool
idx_datum_is_exact_in_bson(Datum value, Oid typid)
{
	switch (typid)
	{
		case TEXTOID:
		case VARCHAROID:
		case BPCHAROID:
			if (GetDatabaseEncoding() == PG_SQL_ASCII)
			{
				text	   *t = DatumGetTextPP(value);

				return pg_verify_mbstr(PG_UTF8, VARDATA_ANY(t),
									   VARSIZE_ANY_EXHDR(t), true);
			}
			return true;
		case INT2OID:
		case INT4OID:
		case INT8OID:
		case BOOLOID:
		case UUIDOID:
		case BYTEAOID:
			return true;
		case FLOAT4OID:
			return !isnan(DatumGetFloat4(value));
		case FLOAT8OID:
			return !isnan(DatumGetFloat8(value));
		case NUMERICOID:
			{
				Numeric		num = DatumGetNumeric(value);
				bson_decimal128_t dec;

				return !numeric_is_nan(num) && numeric_to_decimal128(num, &dec);
			}
		case TIMESTAMPOID:
		case TIMESTAMPTZOID:
			{
				Timestamp	ts = DatumGetTimestamp(value);

				return !TIMESTAMP_NOT_FINITE(ts) && ts % 1000 == 0;
			}
		case DATEOID:
			return !DATE_NOT_FINITE(DatumGetDateADT(value));
		default:
			return false;
	}
}
