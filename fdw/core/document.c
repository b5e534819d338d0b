/*-------------------------------------------------------------------------
 *
 * document.c
 *		  Fact documents written from rows (see document.h for the rules on
 *		  NULL and _id).
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/core/document.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"

#include "core/convert.h"
#include "core/document.h"
#include "core/handle.h"
#include "core/pg_compat.h"

/* MongoDB's maximum document size where the server does not say (16 MiB) */
#define IDX_DEFAULT_MAX_BSON_SIZE	(16 * 1024 * 1024)

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
			idx_check_append(BSON_APPEND_OID(doc, key, &oid));
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
			 const Datum *values, const bool *nulls, const char *relname)
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
			IdxJsonTarget target;

			target.colname = NameStr(attr->attname);
			target.relname = relname;
			idx_append_column_value(doc, name, values[items[i].attidx],
									nulls[items[i].attidx], attr->atttypid,
									&target);
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
			idx_check_append(bson_append_document_begin(doc, name, -1, &child));
			append_items(&child, items + i, j - i, tupdesc, values, nulls,
						 relname);
			idx_check_append(bson_append_document_end(doc, &child));
		}
		pfree(name);
		i = j;
	}
}

/*
 * Build the insert document of a row into "doc".
 */
static void
build_document(const IdxTableInfo *info, TupleDesc tupdesc,
			   const Datum *values, const bool *nulls,
			   const bson_value_t *id, bson_t *doc)
{
	FieldItem  *items = palloc(sizeof(FieldItem) * Max(tupdesc->natts, 1));
	int			n = 0;
	int			i;

	idx_check_append(BSON_APPEND_VALUE(doc, IDX_ID_FIELD, id));
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
	append_items(doc, items, n, tupdesc, values, nulls, info->relname);
	pfree(items);
}

/*
 * Build {$set: {...}} for the assigned columns into "update".  Dotted
 * paths are MongoDB update paths already.
 */
static void
build_update(const IdxTableInfo *info, TupleDesc tupdesc, List *attnums,
			 const Datum *values, const bool *nulls, bson_t *update)
{
	bson_t		set;
	ListCell   *lc;

	idx_check_append(BSON_APPEND_DOCUMENT_BEGIN(update, "$set", &set));
	foreach(lc, attnums)
	{
		int			attnum = lfirst_int(lc);
		Form_pg_attribute attr = TupleDescAttr(tupdesc, attnum - 1);
		IdxJsonTarget target;

		if (attr->attisdropped || info->fields[attnum - 1] == NULL)
			continue;
		target.colname = NameStr(attr->attname);
		target.relname = info->relname;
		idx_append_column_value(&set, info->fields[attnum - 1],
								values[attnum - 1], nulls[attnum - 1],
								attr->atttypid, &target);
	}
	idx_check_append(bson_append_document_end(update, &set));
}

/*
 * The insert document of a row, palloc'd.  libbson builds in malloc'd
 * memory, which an error while building (a JSON key MongoDB cannot store,
 * a document over libbson's limit) must not leak: it is released before
 * the error goes on.
 */
bson_t *
idx_row_to_document(const IdxTableInfo *info, TupleDesc tupdesc,
					const Datum *values, const bool *nulls,
					const bson_value_t *id)
{
	bson_t		doc = BSON_INITIALIZER;
	bson_t	   *result;

	PG_TRY();
	{
		build_document(info, tupdesc, values, nulls, id, &doc);
		result = idx_bson_pcopy(&doc);
	}
	PG_FINALLY();
	{
		bson_destroy(&doc);
	}
	PG_END_TRY();
	return result;
}

/*
 * The update document of an UPDATE, palloc'd (an error while building
 * leaks nothing, as in idx_row_to_document).
 */
bson_t *
idx_row_to_update(const IdxTableInfo *info, TupleDesc tupdesc, List *attnums,
				  const Datum *values, const bool *nulls)
{
	bson_t		update = BSON_INITIALIZER;
	bson_t	   *result;

	PG_TRY();
	{
		build_update(info, tupdesc, attnums, values, nulls, &update);
		result = idx_bson_pcopy(&update);
	}
	PG_FINALLY();
	{
		bson_destroy(&update);
	}
	PG_END_TRY();
	return result;
}

/*
 * Is "path" a field path MongoDB reads as written: dot-separated names,
 * none empty and none starting with "$" (an operator)?  C strings hold no
 * NUL.
 */
bool
idx_field_path_is_valid(const char *path)
{
	const char *p;

	for (p = path;; p++)
	{
		/* p is at the start of a component */
		if (*p == '\0' || *p == '.' || *p == '$')
			return false;
		p += strcspn(p, ".");
		if (*p == '\0')
			return true;
	}
}

/*
 * Refuse a column whose name, used as its field path, is not one.  Called
 * when a table is first used: the options validator never sees column
 * names.
 */
void
idx_check_column_name_path(Oid relid, const char *colname)
{
	if (!idx_field_path_is_valid(colname))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_NAME),
				 errmsg("column \"%s\" of foreign table \"%s\" is not a valid MongoDB field path",
						colname, get_rel_name(relid)),
				 errdetail("A field path is a dot-separated list of non-empty names that do not start with \"$\"."),
				 errhint("Set the column's \"field\" option to the field it reads.")));
}

/*
 * The largest document the server of "client" takes: maxBsonObjectSize
 * from its hello, or MongoDB's 16 MiB if no server can be selected now
 * (the write itself then reports why).
 */
int64
idx_max_document_size(mongoc_client_t *client)
{
	mongoc_server_description_t *sd;
	bson_error_t error;
	int64		result = IDX_DEFAULT_MAX_BSON_SIZE;

	sd = mongoc_client_select_server(client, true, NULL, &error);
	if (sd != NULL)
	{
		const bson_t *hello = mongoc_server_description_hello_response(sd);
		bson_iter_t iter;

		if (hello && bson_iter_init_find(&iter, hello, "maxBsonObjectSize") &&
			BSON_ITER_HOLDS_NUMBER(&iter) && bson_iter_as_int64(&iter) > 0)
			result = bson_iter_as_int64(&iter);
		mongoc_server_description_destroy(sd);
	}
	return result;
}

/*
 * Refuse a document larger than "max_size" bytes before it is sent, as
 * MongoDB would refuse it (libmongoc's own refusal comes too late to say
 * which table): SQLSTATE 54000 naming the table.  "is_update": "doc" is
 * the update document of an UPDATE, not a whole row.
 */
void
idx_check_document_size(const bson_t *doc, int64 max_size,
						const IdxTableInfo *info, bool is_update)
{
	if ((int64) doc->len <= max_size)
		return;
	if (is_update)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("updated values of foreign table \"%s\" are too large for MongoDB",
						info->relname),
				 errdetail("The update document is %u bytes; the maximum is " INT64_FORMAT " bytes.",
						   doc->len, max_size)));
	ereport(ERROR,
			(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
			 errmsg("row of foreign table \"%s\" is too large for MongoDB",
					info->relname),
			 errdetail("The document is %u bytes; the maximum is " INT64_FORMAT " bytes.",
					   doc->len, max_size)));
}

/*
 * libmongoc refused to queue a write of a fact of "info"'s table: its
 * client-side checks found a document it will not send.  Documents are
 * checked while they are built, so this is a safety net; nothing of the
 * bulk has been sent.  Destroys "bulk".
 */
void
idx_document_refused(const IdxTableInfo *info, mongoc_bulk_operation_t *bulk,
					 const bson_error_t *error)
{
	char	   *message = pstrdup(error->message);

	mongoc_bulk_operation_destroy(bulk);
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("a row of foreign table \"%s\" cannot be stored in MongoDB",
					info->relname),
			 errdetail("libmongoc: %s", message)));
}
