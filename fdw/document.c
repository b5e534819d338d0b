/*-------------------------------------------------------------------------
 *
 * document.c
 *		  Fact documents written from rows (see document.h for the rules on
 *		  NULL and _id).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "utils/builtins.h"

#include "convert.h"
#include "document.h"

/* One column to write: the rest of its field path, and where its value is */
typedef struct FieldItem
{
	const char *path;			/* remaining dotted path */
	int			attidx;			/* attnum - 1 */
} FieldItem;

/*
 * Is "s" exactly the text an ObjectId reads as (24 lowercase hex digits)?
 */
static bool
is_objectid_text(const char *s, size_t len)
{
	size_t		i;

	if (len != 24)
		return false;
	for (i = 0; i < len; i++)
	{
		if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
			return false;
	}
	return true;
}

/*
 * Text-like types whose values can carry an ObjectId as hex text.
 */
bool
idx_id_type_takes_objectid(Oid typid)
{
	return typid == TEXTOID || typid == VARCHAROID || typid == BPCHAROID ||
		typid == NAMEOID;
}

/*
 * Append the BSON _id of an _id column value: 24-hex text as an ObjectId,
 * everything else as the ordinary conversion writes it.
 */
void
idx_append_id_value(bson_t *doc, const char *key, Datum value, Oid typid)
{
	if (typid == TEXTOID || typid == VARCHAROID || typid == BPCHAROID)
	{
		text	   *t = DatumGetTextPP(value);

		if (is_objectid_text(VARDATA_ANY(t), VARSIZE_ANY_EXHDR(t)))
		{
			char		hex[25];
			bson_oid_t	oid;

			memcpy(hex, VARDATA_ANY(t), 24);
			hex[24] = '\0';
			bson_oid_init_from_string(&oid, hex);
			BSON_APPEND_OID(doc, key, &oid);
			return;
		}
	}
	idx_append_datum(doc, key, -1, value, false, typid);
}

/*
 * The BSON _id of an _id column value as a bson_value_t.
 */
void
idx_id_value(Datum value, Oid typid, bson_value_t *out)
{
	bson_t		tmp = BSON_INITIALIZER;
	bson_iter_t iter;

	idx_append_id_value(&tmp, "v", value, typid);
	if (!bson_iter_init_find(&iter, &tmp, "v"))
		elog(ERROR, "could not build an _id value");
	bson_value_copy(bson_iter_value(&iter), out);
	bson_destroy(&tmp);
}

/*
 * Length of the first component of a dotted path.
 */
static size_t
first_component_len(const char *path)
{
	const char *dot = strchr(path, '.');

	return dot ? (size_t) (dot - path) : strlen(path);
}

/*
 * Order field items component by component, so that all paths under one
 * embedded document are adjacent ("a", "a.b" before "a-x").
 */
static int
field_item_cmp(const void *a, const void *b)
{
	const char *pa = ((const FieldItem *) a)->path;
	const char *pb = ((const FieldItem *) b)->path;

	for (;;)
	{
		size_t		la = first_component_len(pa);
		size_t		lb = first_component_len(pb);
		int			c = memcmp(pa, pb, Min(la, lb));

		if (c != 0)
			return c;
		if (la != lb)
			return la < lb ? -1 : 1;
		pa += la;
		pb += lb;
		if (*pa == '\0' || *pb == '\0')
			return (*pa != '\0') - (*pb != '\0');
		pa++;
		pb++;
	}
}

/*
 * Append items[0..n-1] (sorted, all under the current embedded document)
 * to "doc": leaves as values, shared first components as embedded
 * documents.  A path that is both a value and a document is an error.
 */
static void
append_items(bson_t *doc, FieldItem *items, int n, TupleDesc tupdesc,
			 const Datum *values, const bool *nulls)
{
	int			i = 0;

	while (i < n)
	{
		const char *path = items[i].path;
		size_t		len = first_component_len(path);
		char	   *name = pnstrdup(path, len);
		int			j = i + 1;

		while (j < n && first_component_len(items[j].path) == len &&
			   memcmp(items[j].path, path, len) == 0)
			j++;

		if (path[len] == '\0' && j == i + 1)
		{
			Form_pg_attribute attr = TupleDescAttr(tupdesc, items[i].attidx);

			idx_append_datum(doc, name, -1, values[items[i].attidx],
							 nulls[items[i].attidx], attr->atttypid);
		}
		else if (path[len] == '\0')
			ereport(ERROR,
					(errcode(ERRCODE_FDW_INVALID_ATTRIBUTE_VALUE),
					 errmsg("columns \"%s\" and \"%s\" map to overlapping fields",
							NameStr(TupleDescAttr(tupdesc, items[i].attidx)->attname),
							NameStr(TupleDescAttr(tupdesc, items[i + 1].attidx)->attname))));
		else
		{
			bson_t		child;
			int			k;

			for (k = i; k < j; k++)
				items[k].path += len + 1;
			bson_append_document_begin(doc, name, -1, &child);
			append_items(&child, items + i, j - i, tupdesc, values, nulls);
			bson_append_document_end(doc, &child);
		}
		pfree(name);
		i = j;
	}
}

/*
 * Build the insert document of a row.
 */
void
idx_row_to_document(const IdxTableInfo *info, TupleDesc tupdesc,
					const Datum *values, const bool *nulls,
					const bson_value_t *id, bson_t *doc)
{
	FieldItem  *items = palloc(sizeof(FieldItem) * Max(tupdesc->natts, 1));
	int			n = 0;
	int			i;

	BSON_APPEND_VALUE(doc, IDX_ID_FIELD, id);
	for (i = 0; i < tupdesc->natts; i++)
	{
		if (TupleDescAttr(tupdesc, i)->attisdropped || info->fields[i] == NULL)
			continue;
		if (i + 1 == info->id_attnum)
			continue;
		if (strcmp(info->fields[i], IDX_ID_FIELD) == 0 ||
			strncmp(info->fields[i], IDX_ID_FIELD ".", 4) == 0)
			ereport(ERROR,
					(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
					 errmsg("cannot write column \"%s\" of foreign table \"%s\": it maps into \"_id\"",
							NameStr(TupleDescAttr(tupdesc, i)->attname),
							info->relname)));
		items[n].path = info->fields[i];
		items[n].attidx = i;
		n++;
	}
	qsort(items, n, sizeof(FieldItem), field_item_cmp);
	append_items(doc, items, n, tupdesc, values, nulls);
	pfree(items);
}

/*
 * Build {$set: {...}} for the assigned columns.  Dotted paths are MongoDB
 * update paths already.
 */
void
idx_row_to_update(const IdxTableInfo *info, TupleDesc tupdesc, List *attnums,
				  const Datum *values, const bool *nulls, bson_t *update)
{
	bson_t		set;
	ListCell   *lc;

	BSON_APPEND_DOCUMENT_BEGIN(update, "$set", &set);
	foreach(lc, attnums)
	{
		int			attnum = lfirst_int(lc);
		Form_pg_attribute attr = TupleDescAttr(tupdesc, attnum - 1);

		if (attr->attisdropped || info->fields[attnum - 1] == NULL)
			continue;
		idx_append_datum(&set, info->fields[attnum - 1], -1,
						 values[attnum - 1], nulls[attnum - 1],
						 attr->atttypid);
	}
	bson_append_document_end(update, &set);
}
