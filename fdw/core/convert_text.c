/*-------------------------------------------------------------------------
 *
 * convert_text.c
 *		  The text of conversions: BSON strings (UTF-8) checked and put in
 *		  the server encoding, and doubles as their shortest exact text.
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/core/convert_text.c
 *
 * Every string a document holds goes through idx_utf8_to_server() before a
 * datum is made of it, whether it is a text column's value (convert.c) or
 * a piece of JSON text (convert_json.c); both also print doubles the same
 * way.  A string that is not valid UTF-8, or holds a zero byte, is an
 * error naming the column and the document (convert_error.c).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "common/shortest_dec.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "utils/ascii.h"

#include "core/convert.h"
#include "core/convert_error.h"
#include "core/convert_text.h"

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
 * database_is_utf8() for the row conversion of convert_row.c, which asks
 * once per scan.
 */
bool
idx_database_is_utf8(void)
{
	return database_is_utf8();
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
 * Turn a BSON string (UTF-8, "len" bytes, NUL-terminated by the BSON
 * format) into a NUL-terminated string in the server encoding.  Invalid
 * UTF-8 and embedded zero bytes are rejected.  The result may point into
 * the BSON buffer; it must not be modified.  ASCII in a UTF-8 database,
 * the common case, is returned as it is.
 */
char *
idx_utf8_to_server(const char *str, uint32 len, const IdxColumnConv *conv,
				   const IdxConvSource *src)
{
	if (database_is_utf8() && len <= (uint32) PG_INT32_MAX &&
		is_plain_ascii(str, len))
		return unconstify(char *, str);
	return utf8_to_server_checked(str, len, conv, src);
}

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
