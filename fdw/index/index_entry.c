/*-------------------------------------------------------------------------
 *
 * index_entry.c
 *		  Entries of index tables: canonical key BSON and entry documents.
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/index/index_entry.c
 *
 * An index entry is computed from a fact's row (the datums a scan would
 * produce) and the fact's _id as stored in MongoDB.  Key values are
 * written in one canonical BSON form per PostgreSQL type (integers always
 * as int64, ...), so that an index holds one BSON type per key component
 * and lookups, which encode their constants with the same function, hit
 * the entries byte for byte.  The rules are listed in index_entry.h.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/sysattr.h"
#include "catalog/pg_type.h"
#include "datatype/timestamp.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/date.h"
#include "utils/fmgrprotos.h"
#include "utils/lsyscache.h"
#include "utils/timestamp.h"

#include "core/convert.h"
#include "core/handle.h"
#include "core/pg_compat.h"
#include "index/index_collate.h"
#include "index/index_entry.h"

/* One distinct element of a multi-valued key */
typedef struct KeyElement
{
	Datum		value;
	const uint8_t *bytes;		/* its key BSON, for comparisons */
	uint32_t	len;
	int			pos;			/* position in the array */
} KeyElement;

/*
 * Raise an error if appending to an entry failed; libbson refuses only
 * when the document would exceed its maximum size.
 */
static void
check_append(bool ok)
{
	if (!ok)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("index entry exceeds the maximum BSON document size")));
}

/*
 * Append a timestamp (or timestamptz) key.  Infinities become the extreme
 * BSON dates, which keeps the order; finite values go through the
 * conversion rules (milliseconds, rounded toward minus infinity).
 */
static void
append_timestamp_key(bson_t *doc, const char *field, Datum value, Oid type)
{
	Timestamp	ts = DatumGetTimestamp(value);

	if (TIMESTAMP_IS_NOBEGIN(ts))
		check_append(bson_append_date_time(doc, field, -1, PG_INT64_MIN));
	else if (TIMESTAMP_IS_NOEND(ts))
		check_append(bson_append_date_time(doc, field, -1, PG_INT64_MAX));
	else
		idx_append_datum(doc, field, -1, value, false, type);
}

/*
 * Append a date key: midnight UTC of the day; infinities as for timestamps.
 */
static void
append_date_key(bson_t *doc, const char *field, Datum value)
{
	DateADT		d = DatumGetDateADT(value);

	if (DATE_IS_NOBEGIN(d))
		check_append(bson_append_date_time(doc, field, -1, PG_INT64_MIN));
	else if (DATE_IS_NOEND(d))
		check_append(bson_append_date_time(doc, field, -1, PG_INT64_MAX));
	else
		idx_append_datum(doc, field, -1, value, false, DATEOID);
}

/*
 * Append the canonical BSON of a key value.  Integers of every width
 * become int64, so that an index on a smallint column and a lookup with
 * a bigint constant agree; the other types follow the conversion rules.
 */
void
idx_append_key_value(bson_t *doc, const char *field, Datum value, Oid type,
					 bool isnull)
{
	if (isnull)
	{
		check_append(bson_append_null(doc, field, -1));
		return;
	}

	switch (type)
	{
		case INT2OID:
			check_append(bson_append_int64(doc, field, -1,
										   (int64) DatumGetInt16(value)));
			break;
		case INT4OID:
			check_append(bson_append_int64(doc, field, -1,
										   (int64) DatumGetInt32(value)));
			break;
		case INT8OID:
			check_append(bson_append_int64(doc, field, -1,
										   DatumGetInt64(value)));
			break;
		case BOOLOID:
			check_append(bson_append_bool(doc, field, -1,
										  DatumGetBool(value)));
			break;
		case TIMESTAMPOID:
		case TIMESTAMPTZOID:
			append_timestamp_key(doc, field, value, type);
			break;
		case DATEOID:
			append_date_key(doc, field, value);
			break;
		case TEXTOID:
		case VARCHAROID:
		case UUIDOID:
			idx_append_datum(doc, field, -1, value, false, type);
			break;
		default:
			ereport(ERROR,
					(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
					 errmsg("values of type %s cannot be index keys",
							format_type_be(type))));
	}
}

/*
 * See index_entry.h.
 */
bool
idx_append_key_in(bson_t *doc, const IdxIndexKey *key, Datum arraydatum)
{
	ArrayType  *arr = DatumGetArrayTypeP(arraydatum);
	Oid			elemtype = ARR_ELEMTYPE(arr);
	int16		elmlen;
	bool		elmbyval;
	char		elmalign;
	Datum	   *elems;
	bool	   *nulls;
	int			nelems,
				i;
	uint32		n = 0;
	bson_t		list;

	get_typlenbyvalalign(elemtype, &elmlen, &elmbyval, &elmalign);
	deconstruct_array(arr, elemtype, elmlen, elmbyval, elmalign,
					  &elems, &nulls, &nelems);
	idx_check_append(IDX_BSON_APPEND_ARRAY_BEGIN(doc, "$in", &list));
	for (i = 0; i < nelems; i++)
	{
		char		pos[16];

		if (nulls[i])
			continue;
		snprintf(pos, sizeof(pos), "%u", n++);
		idx_append_key_value(&list, pos, idx_key_lookup_datum(key, elems[i]),
							 OidIsValid(key->sortcoll) ? TEXTOID : elemtype,
							 false);
	}
	idx_check_append(bson_append_array_end(doc, &list));
	return n > 0;
}

/*
 * The value of a key component computed from a (non-null) column value:
 * lower() or upper() under the key's collation, the stored form of a
 * sort-key key, or the value itself.
 */
Datum
idx_key_datum(const IdxIndexKey *key, Datum value)
{
	switch (key->kind)
	{
		case IDX_KEY_LOWER:
			return DirectFunctionCall1Coll(lower, key->collation, value);
		case IDX_KEY_UPPER:
			return DirectFunctionCall1Coll(upper, key->collation, value);
		case IDX_KEY_COLUMN:
			break;
	}
	return idx_key_lookup_datum(key, value);
}

/*
 * The value a lookup compares key component "key" with, for a (non-null)
 * value of the key's type: the stored form for a sort-key key.
 */
Datum
idx_key_lookup_datum(const IdxIndexKey *key, Datum value)
{
	if (OidIsValid(key->sortcoll))
		return idx_sortkey_encode(key->sortcoll, value);
	return value;
}

/*
 * The path of the text of sort-key key "k" inside an entry ("v.c0").
 */
char *
idx_key_original_path(int k)
{
	return psprintf("%s.%s%d", IDX_ENTRY_INCLUDE, IDX_ENTRY_ORIGINAL, k);
}

/*
 * qsort comparator: elements by key bytes, then by position, so that the
 * first of equal elements is the earliest one.
 */
static int
element_bytes_cmp(const void *a, const void *b)
{
	const KeyElement *ea = (const KeyElement *) a;
	const KeyElement *eb = (const KeyElement *) b;
	int			c;

	c = memcmp(ea->bytes, eb->bytes, Min(ea->len, eb->len));
	if (c != 0)
		return c;
	if (ea->len != eb->len)
		return (ea->len < eb->len) ? -1 : 1;
	return (ea->pos < eb->pos) ? -1 : (ea->pos > eb->pos);
}

/* qsort comparator: elements by position */
static int
element_pos_cmp(const void *a, const void *b)
{
	const KeyElement *ea = (const KeyElement *) a;
	const KeyElement *eb = (const KeyElement *) b;

	return (ea->pos < eb->pos) ? -1 : (ea->pos > eb->pos);
}

/*
 * The distinct non-null elements of an array key value, in order of first
 * occurrence.  Distinct means a different key BSON, which is what the
 * index collection would tell apart.  Returns the number of elements.
 */
static int
distinct_elements(Datum array, Oid elemtype, KeyElement **result)
{
	ArrayType  *arr = DatumGetArrayTypeP(array);
	int16		elemlen;
	bool		elembyval;
	char		elemalign;
	Datum	   *elems;
	bool	   *elemnulls;
	int			nelems;
	KeyElement *out;
	int			n = 0;
	int			i;

	get_typlenbyvalalign(elemtype, &elemlen, &elembyval, &elemalign);
	deconstruct_array(arr, elemtype, elemlen, elembyval, elemalign,
					  &elems, &elemnulls, &nelems);

	out = (KeyElement *) palloc(sizeof(KeyElement) * Max(nelems, 1));
	for (i = 0; i < nelems; i++)
	{
		bson_t		tmp = BSON_INITIALIZER;
		uint8_t    *copy;

		if (elemnulls[i])
			continue;
		PG_TRY();
		{
			idx_append_key_value(&tmp, "k", elems[i], elemtype, false);
			copy = palloc(tmp.len);
			memcpy(copy, bson_get_data(&tmp), tmp.len);
			out[n].len = tmp.len;
		}
		PG_FINALLY();
		{
			bson_destroy(&tmp);
		}
		PG_END_TRY();
		out[n].bytes = copy;
		out[n].value = elems[i];
		out[n].pos = i;
		n++;
	}

	if (n > 1)
	{
		int			kept = 1;

		qsort(out, n, sizeof(KeyElement), element_bytes_cmp);
		for (i = 1; i < n; i++)
		{
			if (out[i].len == out[kept - 1].len &&
				memcmp(out[i].bytes, out[kept - 1].bytes, out[i].len) == 0)
				continue;
			out[kept++] = out[i];
		}
		n = kept;
		qsort(out, n, sizeof(KeyElement), element_pos_cmp);
	}
	*result = out;
	return n;
}

/*
 * Compute the key values of every entry of one fact (see index_entry.h).
 */
int
idx_compute_keys(const IdxIndexDef *def, const Datum *values,
				 const bool *nulls, Datum **keyvalues, bool **keynulls)
{
	int			nkeys = def->nkeys;
	int			multi = -1;
	Datum	   *scalar_values;
	bool	   *scalar_nulls;
	KeyElement *elements = NULL;
	int			nentries = 1;
	int			e;
	int			k;

	scalar_values = (Datum *) palloc(sizeof(Datum) * nkeys);
	scalar_nulls = (bool *) palloc(sizeof(bool) * nkeys);
	for (k = 0; k < nkeys; k++)
	{
		const IdxIndexKey *key = &def->keys[k];
		int			att = key->attnum - 1;

		scalar_values[k] = (Datum) 0;
		scalar_nulls[k] = nulls[att];
		if (key->multi)
			multi = k;
		else if (!nulls[att])
			scalar_values[k] = idx_key_datum(key, values[att]);
	}

	if (multi < 0)
	{
		*keyvalues = scalar_values;
		*keynulls = scalar_nulls;
		return 1;
	}

	/* a NULL array has no entries, like an empty one */
	if (scalar_nulls[multi])
		nentries = 0;
	else
		nentries = distinct_elements(values[def->keys[multi].attnum - 1],
									 def->keys[multi].keytype, &elements);

	*keyvalues = (Datum *) palloc(sizeof(Datum) * Max(nentries * nkeys, 1));
	*keynulls = (bool *) palloc(sizeof(bool) * Max(nentries * nkeys, 1));
	for (e = 0; e < nentries; e++)
	{
		for (k = 0; k < nkeys; k++)
		{
			(*keyvalues)[e * nkeys + k] = scalar_values[k];
			(*keynulls)[e * nkeys + k] = scalar_nulls[k];
		}
		(*keyvalues)[e * nkeys + multi] = elements[e].value;
		(*keynulls)[e * nkeys + multi] = false;
	}
	return nentries;
}

/*
 * Append an entry's _id: the key components k0.. and, unless the index is
 * unique and no component is NULL, the fact's _id as "id".
 */
void
idx_append_entry_id(bson_t *doc, const char *field, const IdxIndexDef *def,
					const Datum *keyvalues, const bool *keynulls,
					const bson_value_t *fact_id)
{
	bson_t		child;
	bool		anynull = false;
	int			k;

	check_append(bson_append_document_begin(doc, field, -1, &child));
	for (k = 0; k < def->nkeys; k++)
	{
		idx_append_key_value(&child, idx_key_field(k), keyvalues[k],
							 def->keys[k].keytype, keynulls[k]);
		if (keynulls[k])
			anynull = true;
	}
	if (!def->unique || anynull)
		check_append(bson_append_value(&child, IDX_ENTRY_FACT_ID, -1,
									   fact_id));
	check_append(bson_append_document_end(doc, &child));
}

/*
 * Does any key of "def" hold sort keys?
 */
static bool
has_sortkey_keys(const IdxIndexDef *def)
{
	int			k;

	for (k = 0; k < def->nkeys; k++)
	{
		if (OidIsValid(def->keys[k].sortcoll))
			return true;
	}
	return false;
}

/*
 * Append the included columns and the texts of sort-key keys as the
 * sub-document "v": {i0: .., i1: .., c0: ..}.
 */
static void
append_included(bson_t *doc, const IdxIndexDef *def, const Datum *values,
				const bool *nulls)
{
	bson_t		child;
	int			i;

	check_append(bson_append_document_begin(doc, IDX_ENTRY_INCLUDE, -1,
											&child));
	for (i = 0; i < def->ninclude; i++)
	{
		int			att = def->include[i] - 1;

		idx_append_datum(&child, idx_include_field(i), -1, values[att],
						 nulls[att], get_atttype(def->relid, def->include[i]));
	}
	for (i = 0; i < def->nkeys; i++)
	{
		int			att = def->keys[i].attnum - 1;
		char		field[16];

		if (!OidIsValid(def->keys[i].sortcoll))
			continue;
		snprintf(field, sizeof(field), "%s%d", IDX_ENTRY_ORIGINAL, i);
		idx_append_datum(&child, field, -1, values[att], nulls[att],
						 TEXTOID);
	}
	check_append(bson_append_document_end(doc, &child));
}

/*
 * Build one entry document (format in index_catalog.h).
 */
bson_t *
idx_make_entry(const IdxIndexDef *def, const Datum *keyvalues,
			   const bool *keynulls, const bson_value_t *fact_id,
			   const Datum *values, const bool *nulls)
{
	bson_t	   *entry = bson_new();
	IdxHandle  *owned = idx_own_bson(entry);	/* until it is built */

	idx_append_entry_id(entry, "_id", def, keyvalues, keynulls, fact_id);
	check_append(bson_append_value(entry, IDX_ENTRY_FACT_ID, -1, fact_id));
	if (def->ninclude > 0 || has_sortkey_keys(def))
		append_included(entry, def, values, nulls);
	idx_disown(owned);
	return entry;
}

/*
 * All entry documents of one fact.  On error the entries built so far are
 * destroyed (they are owned by the memory context until all are built).
 */
int
idx_build_entries(const IdxIndexDef *def, const Datum *values,
				  const bool *nulls, const bson_value_t *fact_id,
				  bson_t ***entries)
{
	Datum	   *keyvalues;
	bool	   *keynulls;
	bson_t	  **result;
	IdxHandle **owned;
	int			n;
	int			i;

	n = idx_compute_keys(def, values, nulls, &keyvalues, &keynulls);
	result = (bson_t **) palloc0(sizeof(bson_t *) * Max(n, 1));
	owned = (IdxHandle **) palloc(sizeof(IdxHandle *) * Max(n, 1));
	for (i = 0; i < n; i++)
	{
		result[i] = idx_make_entry(def, keyvalues + i * def->nkeys,
								   keynulls + i * def->nkeys,
								   fact_id, values, nulls);
		owned[i] = idx_own_bson(result[i]);
	}
	for (i = 0; i < n; i++)
		idx_disown(owned[i]);
	pfree(owned);
	*entries = result;
	return n;
}

/*
 * One key specification as text: the column's current name, quoted as
 * needed, inside lower()/upper() for such keys.
 */
static void
append_key_spec(StringInfo buf, const IdxIndexDef *def, int k)
{
	const IdxIndexKey *key = &def->keys[k];
	const char *col = quote_identifier(get_attname(def->relid, key->attnum,
												   false));

	switch (key->kind)
	{
		case IDX_KEY_LOWER:
			appendStringInfo(buf, "lower(%s)", col);
			break;
		case IDX_KEY_UPPER:
			appendStringInfo(buf, "upper(%s)", col);
			break;
		case IDX_KEY_COLUMN:
			appendStringInfoString(buf, col);
			break;
	}
}

/*
 * The key specifications, comma-separated.
 */
char *
idx_key_specs_text(const IdxIndexDef *def)
{
	StringInfoData buf;
	int			k;

	initStringInfo(&buf);
	for (k = 0; k < def->nkeys; k++)
	{
		if (k > 0)
			appendStringInfoString(&buf, ", ");
		append_key_spec(&buf, def, k);
	}
	return buf.data;
}

/*
 * May the current user see key values of "def"?  PostgreSQL's rule for
 * key values in messages (BuildIndexValueDescription): SELECT on the
 * table, or on every key column when every key is a plain column.
 */
static bool
key_values_visible(const IdxIndexDef *def)
{
	Oid			userid = GetUserId();
	int			k;

	if (pg_class_aclcheck(def->relid, userid, ACL_SELECT) == ACLCHECK_OK)
		return true;
	for (k = 0; k < def->nkeys; k++)
	{
		if (def->keys[k].kind != IDX_KEY_COLUMN ||
			pg_attribute_aclcheck(def->relid, def->keys[k].attnum, userid,
								  ACL_SELECT) != ACLCHECK_OK)
			return false;
	}
	return true;
}

/*
 * "Key (specs)=(values)", the values through their output functions, as
 * PostgreSQL describes the key of a unique violation; NULL if the current
 * user may not see the values (see key_values_visible), and the caller
 * then leaves its DETAIL out.
 */
char *
idx_key_description(const IdxIndexDef *def, const Datum *keyvalues,
					const bool *keynulls)
{
	StringInfoData buf;
	int			k;

	if (!key_values_visible(def))
		return NULL;
	initStringInfo(&buf);
	appendStringInfo(&buf, "Key (%s)=(", idx_key_specs_text(def));
	for (k = 0; k < def->nkeys; k++)
	{
		Oid			outfunc;
		bool		isvarlena;

		if (k > 0)
			appendStringInfoString(&buf, ", ");
		if (keynulls[k])
		{
			appendStringInfoString(&buf, "null");
			continue;
		}
		if (OidIsValid(def->keys[k].sortcoll))
		{
			text	   *t = DatumGetTextPP(keyvalues[k]);

			appendStringInfoString(&buf,
								   idx_sortkey_original(VARDATA_ANY(t),
														VARSIZE_ANY_EXHDR(t)));
			continue;
		}
		getTypeOutputInfo(def->keys[k].keytype, &outfunc, &isvarlena);
		appendStringInfoString(&buf, OidOutputFunctionCall(outfunc,
														   keyvalues[k]));
	}
	appendStringInfoChar(&buf, ')');
	return buf.data;
}

/*
 * The DETAIL of a key that two facts share, if the key may be shown
 * ("desc" from idx_key_description); for use inside ereport().
 */
int
idx_errdetail_key_duplicated(const char *desc)
{
	if (desc == NULL)
		return 0;
	return errdetail("%s is duplicated.", desc);
}

/*
 * The raw bytes of an entry's _id sub-document.  The entries the FDW
 * computes always have one; an entry of index "def" read from its
 * collection without one was written by something else, and is reported
 * as corrupt rather than skipped, as nothing would ever delete it.
 */
void
idx_entry_id_bytes(const IdxIndexDef *def, const bson_t *entry,
				   const uint8 **data, uint32 *len)
{
	bson_iter_t iter;

	if (!bson_iter_init_find(&iter, entry, "_id") ||
		!BSON_ITER_HOLDS_DOCUMENT(&iter))
		ereport(ERROR,
				(errcode(ERRCODE_DATA_CORRUPTED),
				 errmsg("an entry of index \"%s\" in collection \"%s\" has no _id document",
						def->name, def->collection),
				 errhint("Delete the document from the index collection, then run idxtable.repair_index() on index \"%s\".",
						 def->name)));
	bson_iter_document(&iter, len, data);
}

/*
 * Do two entries have the same _id (byte for byte)?
 */
bool
idx_entry_same_id(const IdxIndexDef *def, const bson_t *a, const bson_t *b)
{
	const uint8 *da,
			   *db;
	uint32		la,
				lb;

	idx_entry_id_bytes(def, a, &da, &la);
	idx_entry_id_bytes(def, b, &db, &lb);
	return la == lb && memcmp(da, db, la) == 0;
}

/* Does the entry's _id lack the fact id (a unique key's claim)? */
bool
idx_entry_is_claim(const bson_t *entry)
{
	bson_iter_t iter;
	bson_iter_t child;

	if (!bson_iter_init_find(&iter, entry, "_id") ||
		!bson_iter_recurse(&iter, &child))
		return false;
	return !bson_iter_find(&child, IDX_ENTRY_FACT_ID);
}

/*
 * The filter {_id: <entry _id>, id: <fact id>} that deletes or replaces an
 * entry only while it belongs to that fact.
 */
bson_t *
idx_entry_own_filter(const bson_t *entry)
{
	bson_t		filter = BSON_INITIALIZER;
	bson_iter_t iter;
	bson_t	   *result;

	if (bson_iter_init_find(&iter, entry, "_id"))
		idx_check_append(bson_append_iter(&filter, "_id", -1, &iter));
	if (bson_iter_init_find(&iter, entry, IDX_ENTRY_FACT_ID))
		idx_check_append(bson_append_iter(&filter, IDX_ENTRY_FACT_ID, -1,
										  &iter));
	result = idx_bson_pcopy(&filter);
	bson_destroy(&filter);
	return result;
}

/*
 * The columns an index's entries are computed from: its key and included
 * columns, as pull_varattnos offsets (attnum -
 * FirstLowInvalidHeapAttributeNumber), which idx_row_conv_create() takes.
 */
Bitmapset *
idx_entry_columns(const IdxIndexDef *def)
{
	Bitmapset  *attrs = NULL;
	int			i;

	for (i = 0; i < def->nkeys; i++)
		attrs = bms_add_member(attrs, def->keys[i].attnum -
							   FirstLowInvalidHeapAttributeNumber);
	for (i = 0; i < def->ninclude; i++)
		attrs = bms_add_member(attrs, def->include[i] -
							   FirstLowInvalidHeapAttributeNumber);
	return attrs;
}
