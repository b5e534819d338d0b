/*-------------------------------------------------------------------------
 *
 * convert_row.c
 *		  Conversion of whole documents to rows (see convert.h).
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/core/convert_row.c
 *
 * The columns of a row read the top-level fields of a document (or dotted
 * paths into it).  The fields are located by a walk over the document's
 * bytes, and their common values (strings for text, integers, doubles,
 * booleans, ObjectIds for text, null) are converted without libbson's
 * iterator; everything else goes through idx_bson_to_datum() (convert.c),
 * which gives the same results and reports what does not fit.  A scan's
 * converter keeps one buffer for its rows' text datums and converts each
 * field as its walk finds it (onepass_walk()).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/sysattr.h"
#include "catalog/pg_type.h"
#include "mb/pg_wchar.h"
#include "port/pg_bitutils.h"
#include "utils/memutils.h"

#include "core/convert.h"
#include "core/convert_error.h"
#include "core/convert_path.h"
#include "core/option.h"
#include "core/pg_compat.h"
#include "core/reply_check.h"

/*
 * How the one-pass walk converts a field's common values: the column that
 * alone reads it is text (or varchar without a typmod) in a UTF-8
 * database, smallint, integer, bigint, double precision or boolean; any
 * other column, or a field several columns read, leaves its values to
 * convert_late().
 */
typedef enum IdxWalkKind
{
	WALK_LATE,
	WALK_TEXT,
	WALK_INT2,
	WALK_INT4,
	WALK_INT8,
	WALK_FLOAT8,
	WALK_BOOL,
	WALK_SKIP					/* an element of no column */
} IdxWalkKind;

/*
 * A top-level field of a row converter, as the one-pass walk sees it: its
 * key and the key's NUL as two words with masks of the bytes that count
 * (for a name of 16 bytes or more, compared bytewise, a first word no key
 * matches: a mask of zero and a word of one), its bit among the fields,
 * the key's length, the attribute that alone reads it (-1 if several do),
 * the field to expect after it and its IdxWalkKind.
 */
typedef struct IdxWalkField
{
	uint64		word[2];
	uint64		mask[2];
	uint64		bit;
	const struct IdxWalkField *next;	/* the field after it, or the first */
	uint32		len;
	int			att;
	uint8		kind;
} IdxWalkField;

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
	{
		dst[i] = src[i];
		/* 0 wraps to 0xFF; bytes from 0x80 land at 0x7F and above */
		if ((uint8) (src[i] - 1) >= 0x7F)
			highbit = 0x80;
	}
	return highbit == 0;
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
 * The IdxWalkKind of column "conv" of rc.
 */
static uint8
walk_kind(const IdxRowConv *rc, const IdxColumnConv *conv)
{
	if (OidIsValid(conv->elemtype))
		return WALK_LATE;
	if (takes_string_as_is(conv))
		return rc->utf8_db ? WALK_TEXT : WALK_LATE;
	switch (conv->typid)
	{
		case INT2OID:
			return WALK_INT2;
		case INT4OID:
			return WALK_INT4;
		case INT8OID:
			return WALK_INT8;
		case FLOAT8OID:
			return WALK_FLOAT8;
		case BOOLOID:
			return WALK_BOOL;
		default:
			return WALK_LATE;
	}
}

/*
 * The one-pass walk's view of rc's columns and top-level fields: each
 * one's IdxWalkKind, and each field's key with the key's NUL as two words
 * and their masks (names of 16 bytes or more get empty masks and are
 * compared bytewise).
 */
static void
build_walk(IdxRowConv *rc)
{
	int			i;
	int			j;

	rc->col_kind = (uint8 *) palloc0(sizeof(uint8) * Max(rc->natts, 1));
	for (i = 0; i < rc->natts; i++)
		rc->col_kind[i] = rc->fields[i] ? walk_kind(rc, &rc->cols[i]) :
			WALK_LATE;
	for (j = 0; j < rc->ntop; j++)
	{
		IdxWalkField *f = &rc->walk[j];
		char		bytes[16] = {0};
		char		mask[16] = {0};

		f->kind = f->att >= 0 ? rc->col_kind[f->att] : WALK_LATE;
		f->len = rc->top_len[j];
		f->next = &rc->walk[j + 1 < rc->ntop ? j + 1 : 0];
		if (f->len < 16)
		{
			memcpy(bytes, rc->top_name[j], f->len);
			memset(mask, 0xFF, f->len + 1);
		}
		memcpy(f->word, bytes, 16);
		memcpy(f->mask, mask, 16);
		if (f->len >= 16)
			f->word[0] = 1;
		f->bit = UINT64CONST(1) << j;
	}
	/* with no field, walk[0] (next stays 0) is one that no key matches */
	if (rc->ntop == 0)
	{
		rc->walk[0].word[0] = 1;
		rc->walk[0].kind = WALK_SKIP;
		rc->walk[0].next = &rc->walk[0];
	}
	rc->walk_sets_all = !rc->has_late_cols;
	for (i = 0; i < rc->natts; i++)
		if (rc->top_of[i] < 0 || rc->walk[rc->top_of[i]].att != i)
			rc->walk_sets_all = false;
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
	rc->walk = (IdxWalkField *) palloc0(sizeof(IdxWalkField) * n);
	for (i = 0; i < rc->natts; i++)
	{
		int			j;

		rc->top_of[i] = -1;
		if (rc->fields[i] == NULL)
			continue;
		if (strchr(rc->fields[i], '.') != NULL)
		{
			rc->has_late_cols = true;
			continue;
		}
		for (j = 0; j < rc->ntop; j++)
			if (strcmp(rc->top_name[j], rc->fields[i]) == 0)
				break;
		if (j == rc->ntop)
		{
			rc->top_name[j] = rc->fields[i];
			rc->top_len[j] = strlen(rc->fields[i]);
			rc->walk[j].att = i;
			rc->ntop++;
		}
		else
		{
			/* a field several columns read is converted after the walk */
			rc->walk[j].att = -1;
			rc->has_late_cols = true;
		}
		rc->top_of[i] = j;
		if (takes_string_as_is(&rc->cols[i]))
			rc->top_ntext[j]++;
	}
	build_walk(rc);
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
	rc->utf8_db = idx_database_is_utf8();

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
	Size		want;			/* what the last one-pass row lacked */
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
 * Convert column i's top-level field, found by the walk at rc->top_off,
 * through an iterator made at its element: the values walk_convert()
 * leaves, and their errors.
 */
static void
convert_at(const IdxRowConv *rc, int i, const IdxConvSource *src,
		   Datum *value, bool *isnull)
{
	int			j = rc->top_of[i];
	bson_iter_t iter;

	if (!bson_iter_init_from_data_at_offset(&iter, bson_get_data(src->document),
											src->document->len,
											rc->top_off[j], rc->top_keylen[j]))
		elog(ERROR, "could not read field \"%s\" of a document",
			 rc->fields[i]);
	*value = idx_bson_to_datum(&iter, &rc->cols[i], src, isnull);
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
 * end), given that its key is "klen" bytes; a string's length field goes
 * to *vlen, the document a document, array or code-with-scope value holds
 * to *sub and *sublen (*sub is left alone for other values).  Fixed-size values and strings are sized here, the others by
 * reply_check.c, with libbson's checks, so that the walk sees the elements
 * bson_iter_next() would.
 */
static pg_attribute_always_inline uint32
element_end(const uint8 *d, uint32 len, uint32 off, uint32 klen,
			uint32 *vlen, const uint8 **sub, uint32 *sublen)
{
	uint32		o = off + klen + 2;
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
			*vlen = l;
			break;
		default:
			end = idx_bson_value_end(d, len, o, d[off], sub, sublen);
			break;
	}
	return end < len ? end : 0;
}

/*
 * The bytes of a row's text buffer that the value of the element at
 * offset "off" (key length "klen") of document "d" takes if
 * walk_convert() converts it to text: a string's or an ObjectId's text
 * datum, MAXALIGNed; 0 for other values.
 */
static inline Size
text_space(const uint8 *d, uint32 off, uint32 klen)
{
	if (d[off] == BSON_TYPE_UTF8)
		return MAXALIGN(VARHDRSZ + bson_uint32_at(d + off + klen + 2) - 1);
	if (d[off] == BSON_TYPE_OID)
		return MAXALIGN(VARHDRSZ + 24);
	return 0;
}

/*
 * The 12 bytes of an ObjectId at "v" as a text datum of 24 lowercase hex
 * digits (bson_oid_to_string()'s), carved from "*textbuf".
 */
static inline Datum
oid_as_text(const uint8 *v, char **textbuf)
{
	static const char hex[] = "0123456789abcdef";
	text	   *t = (text *) *textbuf;
	char	   *p = VARDATA(t);
	int			i;

	for (i = 0; i < 12; i++)
	{
		*p++ = hex[v[i] >> 4];
		*p++ = hex[v[i] & 0x0F];
	}
	SET_VARSIZE(t, VARHDRSZ + 24);
	*textbuf += MAXALIGN(VARHDRSZ + 24);
	return PointerGetDatum(t);
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
		uint32		vlen;
		uint32		klen = key_length(d, len, off, rc->top_name[next],
									  rc->top_len[next], &expected);
		const uint8 *sub;
		uint32		sublen;
		uint32		end = element_end(d, len, off, klen, &vlen, &sub, &sublen);
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
			if (rc->top_ntext[j] > 0)
				space += rc->top_ntext[j] * text_space(d, off, klen);
			next = (j + 1 < rc->ntop) ? j + 1 : 0;
			if (--left == 0)
				break;
		}
		off = end;
	}
	return space;
}

/*
 * Which top-level field of rc, not yet in "seen", is the key "key" of
 * "klen" bytes, trying those after "next" first; -1 if none.
 */
static inline int
match_top_field(const IdxRowConv *rc, int next, const char *key,
				uint32 klen, uint64 seen)
{
	int			k;

	for (k = 1; k < rc->ntop; k++)
	{
		int			t = next + k;

		if (t >= rc->ntop)
			t -= rc->ntop;
		if ((seen & (UINT64CONST(1) << t)) == 0 && rc->top_len[t] == klen &&
			same_bytes(rc->top_name[t], key, klen))
			return t;
	}
	return -1;
}

/*
 * The columns onepass_walk() leaves to after its walk, in
 * attribute order: those whose field the walk found but did not convert
 * ("late", a bit per field; always a field several columns read), and
 * dotted paths.
 */
static void
convert_late(const IdxRowConv *rc, const bson_t *doc, uint64 late,
			 Datum *values, bool *nulls)
{
	IdxConvSource src;
	int			i;

	src.collection = rc->collection;
	src.document = doc;
	src.hide_id = rc->hide_id;
	for (i = 0; i < rc->natts; i++)
	{
		int			j = rc->top_of[i];

		if (j >= 0)
		{
			if ((late & (UINT64CONST(1) << j)) != 0)
				convert_at(rc, i, &src, &values[i], &nulls[i]);
		}
		else if (rc->fields[i] != NULL)
			read_column(rc, i, &src, &values[i], &nulls[i]);
	}
}

/*
 * Is the key at "key" (whose document ends at "end") the top-level field
 * "f", NUL included?  The key's first one or two words against the field's
 * (build_walk()); false where they would reach past the document, or for a
 * long name (whose first word no key matches), which the caller then
 * compares bytewise.
 */
static inline bool
key_is_field(const IdxWalkField *f, const uint8 *key, const uint8 *end)
{
	uint64		w;

	if (end - key < 8)
		return false;
	memcpy(&w, key, 8);
	if ((w & f->mask[0]) != f->word[0])
		return false;
	if (f->mask[1] == 0)
		return true;
	if (end - key < 16)
		return false;
	memcpy(&w, key + 8, 8);
	return (w & f->mask[1]) == f->word[1];
}

/*
 * The common cases of idx_bson_to_datum(), without a bson_iter_t: convert
 * the value at "v" (of BSON type "type"; "vlen", a string's length field)
 * for a column of kind "kind", into *value / *isnull, a text datum into
 * the buffer at "*textbuf" (which has text_space() bytes for it).  The
 * results are idx_bson_to_datum()'s; a BSON null leaves the NULL the row
 * starts with.  Returns false for anything else, errors included, which
 * idx_bson_to_datum() then converts or reports.
 */
static pg_attribute_always_inline bool
walk_convert(uint8 kind, uint8 type, const uint8 *v, uint32 vlen,
			 char **textbuf, Datum *value, bool *isnull)
{
	int64		n;

	switch (type)
	{
		case BSON_TYPE_UTF8:
			{
				text	   *t = (text *) *textbuf;
				uint32		len = vlen - 1;

				if (kind != WALK_TEXT || len > (uint32) PG_INT32_MAX - VARHDRSZ ||
					(!copy_plain_ascii(VARDATA(t), (const char *) v + 4, len) &&
					 !pg_verify_mbstr(PG_UTF8, (const char *) v + 4, (int) len,
									  true)))
					return false;
				SET_VARSIZE(t, VARHDRSZ + len);
				*textbuf += MAXALIGN(VARHDRSZ + len);
				*value = PointerGetDatum(t);
				break;
			}
		case BSON_TYPE_INT32:
			n = (int32) bson_uint32_at(v);
			if (kind == WALK_INT4)
				*value = Int32GetDatum((int32) n);
			else if (kind == WALK_INT8)
				*value = Int64GetDatum(n);
			else if (kind == WALK_FLOAT8)
				*value = Float8GetDatum((double) n);
			else if (kind == WALK_INT2 && n >= PG_INT16_MIN && n <= PG_INT16_MAX)
				*value = Int16GetDatum((int16) n);
			else
				return false;
			break;
		case BSON_TYPE_INT64:
			{
				uint64		u;

				memcpy(&u, v, 8);
				n = (int64) BSON_UINT64_FROM_LE(u);
				if (kind == WALK_INT8)
					*value = Int64GetDatum(n);
				else if (kind == WALK_INT4 && n >= PG_INT32_MIN && n <= PG_INT32_MAX)
					*value = Int32GetDatum((int32) n);
				else if (kind == WALK_INT2 && n >= PG_INT16_MIN && n <= PG_INT16_MAX)
					*value = Int16GetDatum((int16) n);
				else
					return false;
				break;
			}
		case BSON_TYPE_DOUBLE:
			{
				uint64		u;
				double		f;

				if (kind != WALK_FLOAT8)
					return false;
				memcpy(&u, v, 8);
				u = BSON_UINT64_FROM_LE(u);
				memcpy(&f, &u, 8);
				*value = Float8GetDatum(f);
				break;
			}
		case BSON_TYPE_BOOL:
			if (kind != WALK_BOOL)
				return false;
			*value = BoolGetDatum(*v != 0);
			break;
		case BSON_TYPE_OID:
			if (kind != WALK_TEXT)
				return false;
			*value = oid_as_text(v, textbuf);
			break;
		case BSON_TYPE_NULL:
		case BSON_TYPE_UNDEFINED:
			return true;		/* the row starts out NULL */
		default:
			return false;
	}
	*isnull = false;
	return true;
}

/*
 * onepass_walk()'s sizing of an element of a type it does not size itself
 * (idx_bson_value_end(), libbson's acceptance), the value at offset "o" of
 * the "len"-byte document "d": where it ends, or 0 if it is malformed,
 * which with "check" includes a nested document that is not well-formed
 * throughout.  Not inline: the walk's own loop then keeps no addressed
 * variables.
 */
static pg_noinline uint32
other_value_end(const uint8 *d, uint32 len, uint32 o, uint8 type, bool check)
{
	const uint8 *sub = NULL;
	uint32		sublen = 0;
	uint32		end = idx_bson_value_end(d, len, o, type, &sub, &sublen);

	if (end == 0 || end >= len)
		return 0;
	if (check && sub != NULL &&
		!idx_bson_document_ok(sub, sublen, IDX_BATCH_DOCUMENT_DEPTH + 1))
		return 0;
	return end;
}

/*
 * The NULLs of a one-pass row that its walk did not set: with rc->walk_sets_all
 * (every column is the one reader of a top-level field, so the walk sets
 * each found field's column), those of the fields in "unseen"; otherwise
 * the walk started from an all-NULL row and there is nothing to do.
 */
static inline void
null_unseen(const IdxRowConv *rc, uint64 unseen, Datum *values, bool *nulls)
{
	if (!rc->walk_sets_all)
		return;
	while (unseen != 0)
	{
		int			att = rc->walk[pg_rightmost_one_pos64(unseen)].att;

		values[att] = (Datum) 0;
		nulls[att] = true;
		unseen &= unseen - 1;
	}
}

/*
 * idx_document_to_row() for a converter with a kept buffer and at most 64
 * top-level fields: one walk of the document's elements, each sized,
 * checked and converted in one dispatch on its type.  An element's key is
 * first compared with the field after the last one found, a word at a time
 * (key_is_field()), so that documents whose fields come in the usual order
 * cost one comparison per element.  Each element is sized with libbson's
 * checks (as element_end() and reply_check.c's value_end() size them; the
 * common types here, the others by idx_bson_value_end()) before any byte
 * of its value is read.  The common values of a field's one column
 * convert where the walk finds them (as walk_convert() converts them), a
 * text straight from the document's bytes into the kept buffer.  What the
 * walk leaves (other values, a text that does not fit the buffer's rest,
 * fields several columns read, dotted paths) convert_late() converts.  The
 * walk's conversions never fail, so the first column in attribute order
 * that does not fit is still the one an error names.  A buffer found too
 * small grows before the next row (this row's datums may not move).
 *
 * With "check" (a document of a cursor batch whose reply was checked only
 * as far as libmongoc needs, see idx_check_reply()), the same walk also
 * makes reply_check.c's checks of the document: it goes on to the end,
 * every element must be one bson_iter_next() accepts and every nested
 * document well-formed throughout (idx_bson_document_ok()).  Returns
 * false, having converted nothing after the walk, if the document fails
 * them; true otherwise.  Always inline, so that each caller's walk is
 * compiled for its constant "check".
 */
static pg_attribute_always_inline bool
onepass_walk(const IdxRowConv *rc, const bson_t *doc, bool check,
			 Datum *values, bool *nulls)
{
	const uint8 *d = bson_get_data(doc);
	uint32		len = doc->len;
	const uint8 *dend = d + len;
	const uint8 *p = d + 4;
	const IdxWalkField *walk = rc->walk;
	const IdxWalkField *expect = walk;
	IdxRowBuffer *buf = rc->reuse;
	char	   *textbuf;
	char	   *textend;
	uint64		all;
	uint64		seen = 0;
	uint64		late = 0;

	if (buf->want > buf->size)
		row_text_space(rc, buf->want);
	textbuf = buf->data;
	textend = buf->data + buf->size;
	if (!rc->walk_sets_all)
	{
		memset(values, 0, sizeof(Datum) * rc->natts);
		memset(nulls, true, sizeof(bool) * rc->natts);
	}
	/* the bits of all fields (no shift by 64) */
	all = rc->ntop == 0 ? 0 : ~UINT64CONST(0) >> (64 - rc->ntop);
	if (len < 5)
	{
		if (check)
			return false;
		null_unseen(rc, all, values, nulls);
		return true;
	}

	/*
	 * "p" is the element, "v" its value; the document's trailing NUL (at
	 * dend - 1) ends every key, so "v" is at most "dend".
	 */
	while ((check || seen != all) && p < dend - 1)
	{
		const uint8 *key = p + 1;
		const IdxWalkField *f = expect;
		uint8		type = *p;
		uint8		kind = WALK_SKIP;
		int			att = 0;
		const uint8 *v;
		const uint8 *end;
		uint32		l;
		int64		n;

		/* which field, if any, and where the value starts */
		if ((seen & f->bit) == 0 && key_is_field(f, key, dend))
			v = key + f->len + 1;
		else
		{
			bool		expected;
			uint32		klen = key_length(d, len, (uint32) (p - d),
										  rc->top_name[f - walk], f->len,
										  &expected);

			if (!expected || (seen & f->bit) != 0)
			{
				int			j = match_top_field(rc, (int) (f - walk),
												(const char *) key, klen,
												seen);

				f = j >= 0 ? &walk[j] : NULL;
			}
			v = key + klen + 1;
		}
		if (f != NULL)
		{
			seen |= f->bit;
			kind = f->kind;
			att = f->att;
			expect = f->next;
		}

		/*
		 * One dispatch: size and check the value (element_end()'s checks),
		 * then convert it.
		 */
		switch (type)
		{
			case BSON_TYPE_UTF8:
				/* 0 < l < the bytes after the length field, a NUL */
				if (dend - v <= 4)
					goto malformed;
				l = bson_uint32_at(v);
				if (l - 1 >= (uint32) (dend - v) - 5 || v[4 + l - 1] != '\0')
					goto malformed;
				end = v + 4 + l;
				if (kind == WALK_TEXT)
				{
					text	   *t = (text *) textbuf;
					Size		space = MAXALIGN(VARHDRSZ + l - 1);

					/*
					 * What fits the buffer (under MaxAllocSize) also fits
					 * pg_verify_mbstr()'s int length.
					 */
					if (space > (Size) (textend - textbuf))
						goto grow;
					if (!copy_plain_ascii(VARDATA(t), (const char *) v + 4,
										  l - 1) &&
						!pg_verify_mbstr(PG_UTF8, (const char *) v + 4,
										 (int) (l - 1), true))
						goto late;
					SET_VARSIZE(t, VARHDRSZ + l - 1);
					textbuf += space;
					values[att] = PointerGetDatum(t);
					nulls[att] = false;
					break;
				}
				goto other;
			case BSON_TYPE_INT32:
				if (dend - v <= 4)
					goto malformed;
				end = v + 4;
				n = (int32) bson_uint32_at(v);
				if (kind == WALK_INT4)
					values[att] = Int32GetDatum((int32) n);
				else if (kind == WALK_INT8)
					values[att] = Int64GetDatum(n);
				else if (kind == WALK_FLOAT8)
					values[att] = Float8GetDatum((double) n);
				else if (kind == WALK_INT2 && n >= PG_INT16_MIN &&
						 n <= PG_INT16_MAX)
					values[att] = Int16GetDatum((int16) n);
				else
					goto other;
				nulls[att] = false;
				break;
			case BSON_TYPE_INT64:
			case BSON_TYPE_DOUBLE:
			case BSON_TYPE_DATE_TIME:
			case BSON_TYPE_TIMESTAMP:
				if (dend - v <= 8)
					goto malformed;
				end = v + 8;
				if (kind == WALK_SKIP || kind == WALK_LATE ||
					type == BSON_TYPE_DATE_TIME || type == BSON_TYPE_TIMESTAMP)
					goto other;
				if (!walk_convert(kind, type, v, 0, &textbuf,
								  &values[att], &nulls[att]))
					goto late;
				break;
			default:
				l = other_value_end(d, len, (uint32) (v - d), type, check);
				if (l == 0)
					goto malformed;
				end = d + l;
				if (kind == WALK_SKIP || kind == WALK_LATE)
					goto other;
				if (type == BSON_TYPE_NULL || type == BSON_TYPE_UNDEFINED)
				{
					values[att] = (Datum) 0;
					nulls[att] = true;
					break;
				}
				if (type == BSON_TYPE_OID && kind == WALK_TEXT &&
					MAXALIGN(VARHDRSZ + 24) > (Size) (textend - textbuf))
					goto grow;
				if (!walk_convert(kind, type, v, 0, &textbuf,
								  &values[att], &nulls[att]))
					goto late;
				break;
		}
		p = end;
		continue;

grow:
		/* room for all texts of such a row (text_space()), next row */
		buf->want = Max(buf->size * 2, (Size) len + 32 * rc->ntop);
		textend = textbuf;
		goto late;
other:
		if (kind == WALK_SKIP)
		{
			p = end;
			continue;
		}
late:
		late |= f->bit;
		rc->top_off[f - walk] = (uint32) (p - d);
		rc->top_keylen[f - walk] = (uint32) (v - key) - 1;
		p = end;
		continue;
malformed:
		if (check)
			return false;
		break;
	}
	null_unseen(rc, all & ~seen, values, nulls);
	if (late != 0 || rc->has_late_cols)
		convert_late(rc, doc, late, values, nulls);
	return true;
}

/*
 * walk_convert() for column i, whose field locate_top_fields() found.
 */
static inline bool
convert_located(const IdxRowConv *rc, int i, const uint8 *d, char **textbuf,
				Datum *value, bool *isnull)
{
	int			j = rc->top_of[i];
	const uint8 *v = d + rc->top_off[j] + rc->top_keylen[j] + 2;
	uint8		type = d[rc->top_off[j]];

	return walk_convert(rc->col_kind[i], type, v,
						type == BSON_TYPE_UTF8 ? bson_uint32_at(v) : 0,
						textbuf, value, isnull);
}

/*
 * Fill values/nulls from a document; missing fields are NULL.  Columns are
 * converted in attribute order (the first one that does not fit is the
 * one an error names), top-level fields from one walk of the document;
 * the common values without an iterator, the others through one made at
 * the field's element.  The text datums of the row's strings share one
 * allocation, sized by the walk (the per-row context frees them together).
 * With a kept buffer (idx_row_conv_reuse()), onepass_walk()
 * instead.
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

	if (rc->reuse != NULL && rc->ntop <= 64)
	{
		onepass_walk(rc, doc, false, values, nulls);
		return;
	}
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
			if (!rc->top_found[j] ||
				convert_located(rc, i, d, &textbuf, &values[i], &nulls[i]))
				continue;
			convert_at(rc, i, &src, &values[i], &nulls[i]);
		}
		else if (rc->fields[i] != NULL)
			read_column(rc, i, &src, &values[i], &nulls[i]);
	}
}

/*
 * idx_document_to_row() for a document of a cursor batch whose reply was
 * checked only as far as libmongoc needs (idx_check_reply()'s
 * "defer_batch"): first checks it as reply_check.c checks every document,
 * in the conversion's own walk where the scan's converter allows it, and
 * returns false, converting nothing, if it is malformed.
 */
bool
idx_document_to_row_checked(const IdxRowConv *rc, const bson_t *doc,
							Datum *values, bool *nulls)
{
	if (rc->reuse != NULL && rc->ntop <= 64)
		return onepass_walk(rc, doc, true, values, nulls);
	if (!idx_bson_document_ok(bson_get_data(doc), doc->len,
							  IDX_BATCH_DOCUMENT_DEPTH))
		return false;
	idx_document_to_row(rc, doc, values, nulls);
	return true;
}
