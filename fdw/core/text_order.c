/*-------------------------------------------------------------------------
 *
 * text_order.c
 *		  Text columns that hold strings and ObjectIds, ordered as bytes
 *		  (text_order.h).
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/core/text_order.c
 *
 * An ObjectId reads as 24 digits of "0123456789abcdef", an alphabet whose
 * byte order is the digits' value order.  The ObjectIds at or above a
 * string s are those at or above the least 24-digit hex text that is not
 * below s (its "ceiling"), and the ObjectIds below s are those below the
 * ceiling; so every bound maps to one bound on ObjectIds, or to none or
 * all of them.  A string of another alphabet, of uppercase digits, or of
 * another length than 24 is never equal to an ObjectId's text.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "core/text_order.h"

#define OID_HEX_LEN 24

/*
 * Is byte "c" a digit of an ObjectId's text?
 */
static bool
is_hex_digit(unsigned char c)
{
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
}

/*
 * The least hex digit above byte "c" (which is none), or 0 if none is.
 */
static char
hex_digit_above(unsigned char c)
{
	if (c < '0')
		return '0';
	if (c < 'a')
		return c < '9' ? (char) (c + 1) : 'a';
	return c < 'f' ? (char) (c + 1) : 0;
}

/*
 * Make the hex text buf[0..n) its successor of the same length; false if
 * it has none (all "f", or n = 0).
 */
static bool
hex_increment(char *buf, size_t n)
{
	while (n > 0)
	{
		char		c = buf[--n];

		if (c != 'f')
		{
			buf[n] = (c == '9') ? 'a' : (char) (c + 1);
			return true;
		}
		buf[n] = '0';
	}
	return false;
}

/*
 * The ceiling of "s" (see above) into buf (24 digits and a zero byte);
 * false if every ObjectId's text is below s.  *exact says whether the
 * ceiling is s itself.
 */
static bool
hex_ceiling(const char *s, size_t len, char *buf, bool *exact)
{
	size_t		n = Min(len, OID_HEX_LEN);
	size_t		p = 0;

	*exact = false;
	while (p < n && is_hex_digit((unsigned char) s[p]))
		p++;
	memcpy(buf, s, p);
	memset(buf + p, '0', OID_HEX_LEN - p);
	buf[OID_HEX_LEN] = '\0';
	if (p == n && len <= OID_HEX_LEN)
	{
		/* s, padded with the least digit: s itself, or just above it */
		*exact = (len == OID_HEX_LEN);
		return true;
	}
	if (p == n)
	{
		/* s continues past 24 digits: its first 24 are below it */
		return hex_increment(buf, OID_HEX_LEN);
	}
	/* s[p] is no digit: a digit above it there, or a carry before it */
	buf[p] = hex_digit_above((unsigned char) s[p]);
	if (buf[p] != 0)
		return true;
	buf[p] = '0';
	return hex_increment(buf, p);
}

/*
 * The ObjectIds a bound on their text selects (text_order.h).
 */
IdxOidRange
idx_text_bound_objectids(const char *s, size_t len, bool lower,
						 bool inclusive, bson_oid_t *oid)
{
	char		buf[OID_HEX_LEN + 1];
	bool		exact;

	if (!hex_ceiling(s, len, buf, &exact))
		return lower ? IDX_OIDS_NONE : IDX_OIDS_ALL;
	bson_oid_init_from_string(oid, buf);
	if (exact)
	{
		if (lower)
			return inclusive ? IDX_OIDS_GE : IDX_OIDS_GT;
		return inclusive ? IDX_OIDS_LE : IDX_OIDS_LT;
	}
	/* the ceiling is above s: at or above it is above s, below it below s */
	return lower ? IDX_OIDS_GE : IDX_OIDS_LT;
}

/*
 * The text of a BSON string, symbol or ObjectId (text_order.h).
 */
bool
idx_bson_text(const bson_iter_t *iter, char *buf, const char **str,
			  uint32 *len)
{
	switch (bson_iter_type(iter))
	{
		case BSON_TYPE_UTF8:
			*str = bson_iter_utf8(iter, len);
			return true;
		case BSON_TYPE_SYMBOL:
			*str = bson_iter_symbol(iter, len);
			return true;
		case BSON_TYPE_OID:
			bson_oid_to_string(bson_iter_oid(iter), buf);
			*str = buf;
			*len = OID_HEX_LEN;
			return true;
		default:
			return false;
	}
}

/*
 * The least ObjectId, whose bound selects the ObjectIds' whole bracket.
 */
void
idx_objectid_least(bson_oid_t *oid)
{
	static const uint8_t zeros[12] = {0};

	bson_oid_init_from_data(oid, zeros);
}

/*
 * Compare two texts as bytes, as PostgreSQL's C collation does.
 */
int
idx_text_bytes_cmp(const char *a, uint32 alen, const char *b, uint32 blen)
{
	int			cmp = memcmp(a, b, Min(alen, blen));

	if (cmp != 0)
		return cmp;
	return (alen > blen) - (alen < blen);
}
