/*-------------------------------------------------------------------------
 *
 * shard_key.c
 *		  The table option "shard_key" and the filters it targets.
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/core/shard_key.c
 *
 * On a sharded collection mongos routes a write that addresses one
 * document by the shard key values in its filter.  MongoDB 6.0 and 7.0
 * refuse a findAndModify whose query lacks the full shard key (error 61,
 * ShardKeyNotFound, src/mongo/s/commands/cluster_find_and_modify_cmd.cpp),
 * and a single-document update or delete that holds neither the full shard
 * key nor an _id equality (72 InvalidOptions, 61 ShardKeyNotFound,
 * src/mongo/s/chunk_manager_targeter.cpp); only 7.1 and later run such
 * writes through a two-phase protocol.  And _id is unique per shard only:
 * two documents of different shard key values may share an _id, so a
 * filter on _id alone need not even name the document that was read.
 *
 * So a foreign table over a sharded collection names the columns of the
 * shard key ("shard_key 'region, id'"), and every filter that addresses a
 * fact for a write holds, beside the _id, the shard key values of the fact
 * as it was read: for UPDATE and DELETE those of the old row (the whole-row
 * junk column), for the undo of ordered mode those of the fact as it was
 * written or found.  A shard key value may change in transaction mode
 * only (see idx_shard_key_check_ordered_update).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/varlena.h"

#include "core/convert.h"
#include "core/handle.h"
#include "core/message_scrub.h"
#include "core/shard_key.h"

/* mongos's error codes for a write its filter does not target */
#define MONGO_INVALID_OPTIONS		72
#define MONGO_SHARD_KEY_NOT_FOUND	61

/*
 * Split the option's value into column names (SplitIdentifierString's
 * rules: commas, double quotes for names that need them), or fail.
 */
static List *
split_column_names(const char *value)
{
	char	   *copy = pstrdup(value);
	List	   *names = NIL;

	if (!SplitIdentifierString(copy, ',', &names) || names == NIL)
		ereport(ERROR,
				(errcode(ERRCODE_FDW_INVALID_ATTRIBUTE_VALUE),
				 errmsg("invalid value for option \"shard_key\": \"%s\"", value),
				 errhint("The value is a comma-separated list of column names, as in 'region, customer_id'.")));
	return names;
}

/*
 * Check the option's value where it is set: a non-empty list of distinct
 * column names.  Whether the columns exist is checked when the table is
 * used (the validator does not know the table, and a column can be
 * dropped or renamed later).
 */
void
idx_shard_key_validate(const char *value)
{
	List	   *names = split_column_names(value);
	ListCell   *a;
	ListCell   *b;

	foreach(a, names)
	{
		foreach(b, names)
		{
			if (b == a)
				break;
			if (strcmp(lfirst(a), lfirst(b)) == 0)
				ereport(ERROR,
						(errcode(ERRCODE_FDW_INVALID_ATTRIBUTE_VALUE),
						 errmsg("invalid value for option \"shard_key\": \"%s\"", value),
						 errdetail("Column \"%s\" is named twice.",
								   (char *) lfirst(a))));
		}
	}
}

/*
 * The attribute number of the live column "name", or InvalidAttrNumber.
 */
static AttrNumber
column_attnum(TupleDesc tupdesc, const char *name)
{
	int			i;

	for (i = 0; i < tupdesc->natts; i++)
	{
		Form_pg_attribute attr = TupleDescAttr(tupdesc, i);

		if (!attr->attisdropped && strcmp(NameStr(attr->attname), name) == 0)
			return attr->attnum;
	}
	return InvalidAttrNumber;
}

/*
 * Resolve the option against the table's columns: info->shard_key_attnums
 * gets their attribute numbers, in the option's order.  Each column's field
 * path (info->fields, filled already) is a shard key field; two columns of
 * one field are refused.
 */
void
idx_shard_key_resolve(IdxTableInfo *info, const char *value,
					  TupleDesc tupdesc)
{
	List	   *names = split_column_names(value);
	ListCell   *lc;
	int			n = 0;
	int			i;

	info->shard_key_attnums = palloc(sizeof(AttrNumber) * list_length(names));
	foreach(lc, names)
	{
		AttrNumber	attnum = column_attnum(tupdesc, lfirst(lc));

		if (attnum == InvalidAttrNumber)
			ereport(ERROR,
					(errcode(ERRCODE_UNDEFINED_COLUMN),
					 errmsg("column \"%s\" named in option \"shard_key\" of foreign table \"%s\" does not exist",
							(char *) lfirst(lc), info->relname),
					 errhint("Change the option with ALTER FOREIGN TABLE ... OPTIONS (SET shard_key '...').")));
		for (i = 0; i < n; i++)
		{
			if (strcmp(info->fields[info->shard_key_attnums[i] - 1],
					   info->fields[attnum - 1]) == 0)
				ereport(ERROR,
						(errcode(ERRCODE_FDW_INVALID_ATTRIBUTE_VALUE),
						 errmsg("columns \"%s\" and \"%s\" named in option \"shard_key\" of foreign table \"%s\" map to the same field \"%s\"",
								NameStr(TupleDescAttr(tupdesc, info->shard_key_attnums[i] - 1)->attname),
								(char *) lfirst(lc), info->relname,
								info->fields[attnum - 1])));
		}
		info->shard_key_attnums[n++] = attnum;
	}
	info->nshard_key = n;
}

/*
 * Is column "attnum" part of the table's shard key?
 */
bool
idx_shard_key_has_column(const IdxTableInfo *info, AttrNumber attnum)
{
	int			i;

	for (i = 0; i < info->nshard_key; i++)
	{
		if (info->shard_key_attnums[i] == attnum)
			return true;
	}
	return false;
}

/*
 * Refuse an UPDATE outside a MongoDB transaction (in consistency "mode",
 * 'ordered' or 'eventual') that assigns a shard key column.  A
 * new shard key value moves the document to another shard, which mongos
 * does only in a transaction or a retryable write, with the whole old
 * shard key in the filter (src/mongo/db/exec/update_stage.cpp: 31025, 72,
 * 20); outside a transaction that depends on the uri's retryWrites, and
 * the undo of a failed ordered statement would have to find the document
 * by values the row no longer shows.  In transaction mode the filter holds
 * the old values, and the update goes through.
 */
void
idx_shard_key_check_ordered_update(const IdxTableInfo *info,
								   TupleDesc tupdesc, List *target_attrs,
								   IdxConsistency mode)
{
	ListCell   *lc;

	foreach(lc, target_attrs)
	{
		AttrNumber	attnum = lfirst_int(lc);

		if (idx_shard_key_has_column(info, attnum))
			ereport(ERROR,
					(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
					 errmsg("cannot update column \"%s\" of foreign table \"%s\" in consistency mode '%s'",
							NameStr(TupleDescAttr(tupdesc, attnum - 1)->attname),
							info->relname, idx_consistency_name(mode)),
					 errdetail("The column is in the option \"shard_key\": MongoDB moves a document to the shard of its new shard key value only inside a transaction, and a failed statement in consistency mode '%s' could not be undone.",
							   idx_consistency_name(mode)),
					 errhint("Use consistency '%s', or delete the row and insert it with the new value.",
							 idx_consistency_name(IDX_CONSISTENCY_TRANSACTION))));
	}
}

/*
 * Is the shard key column "i" the _id itself (which every filter holds)?
 */
static bool
is_id_field(const IdxTableInfo *info, int i)
{
	return strcmp(info->fields[info->shard_key_attnums[i] - 1],
				  IDX_ID_FIELD) == 0;
}

/*
 * The shard key values of a row, {path: value, ...} with the paths as
 * keys, converted as the row's document would be (a NULL is null, which
 * MongoDB's routing also uses for a missing field); palloc'd, or NULL if
 * the table has no shard key.
 */
bson_t *
idx_shard_key_of_row(const IdxTableInfo *info, TupleDesc tupdesc,
					 const Datum *values, const bool *nulls)
{
	bson_t		image = BSON_INITIALIZER;
	bson_t	   *result;
	int			i;

	if (info->nshard_key == 0)
		return NULL;
	PG_TRY();
	{
		for (i = 0; i < info->nshard_key; i++)
		{
			AttrNumber	attnum = info->shard_key_attnums[i];
			Form_pg_attribute attr = TupleDescAttr(tupdesc, attnum - 1);
			IdxJsonTarget target;

			if (is_id_field(info, i))
				continue;
			target.colname = NameStr(attr->attname);
			target.relname = info->relname;
			idx_append_column_value(&image, info->fields[attnum - 1],
									values[attnum - 1], nulls[attnum - 1],
									attr->atttypid, &target);
		}
		result = idx_bson_pcopy(&image);
	}
	PG_FINALLY();
	{
		bson_destroy(&image);
	}
	PG_END_TRY();
	return result;
}

/*
 * Append the value of shard key path "path" in "source" to "out" under the
 * key "path": a key spelled as the path (an image of
 * idx_shard_key_of_row), else the dotted path into a document, else null.
 */
static void
append_path_value(bson_t *out, const char *path, const bson_t *source)
{
	bson_iter_t iter;
	bson_iter_t found;

	if (bson_iter_init_find(&iter, source, path))
		idx_check_append(bson_append_iter(out, path, -1, &iter));
	else if (bson_iter_init(&iter, source) &&
			 bson_iter_find_descendant(&iter, path, &found))
		idx_check_append(bson_append_iter(out, path, -1, &found));
	else
		idx_check_append(BSON_APPEND_NULL(out, path));
}

/*
 * The shard key values of a fact document, as idx_shard_key_of_row gives
 * them for a row; palloc'd, or NULL if the table has no shard key.
 */
bson_t *
idx_shard_key_of_document(const IdxTableInfo *info, const bson_t *doc)
{
	bson_t		image = BSON_INITIALIZER;
	bson_t	   *result;
	int			i;

	if (info->nshard_key == 0)
		return NULL;
	for (i = 0; i < info->nshard_key; i++)
	{
		if (!is_id_field(info, i))
			append_path_value(&image,
							  info->fields[info->shard_key_attnums[i] - 1],
							  doc);
	}
	result = idx_bson_pcopy(&image);
	bson_destroy(&image);
	return result;
}

/*
 * Append an equality on every shard key field to "filter", with the values
 * of "source": a shard key image or a whole fact document.  A table with a
 * shard key always has a source; one without appends nothing.
 */
void
idx_shard_key_append(const IdxTableInfo *info, bson_t *filter,
					 const bson_t *source)
{
	int			i;

	if (info->nshard_key == 0)
		return;
	if (source == NULL)
		elog(ERROR, "no shard key values for a write to foreign table \"%s\"",
			 info->relname);
	for (i = 0; i < info->nshard_key; i++)
	{
		if (!is_id_field(info, i))
			append_path_value(filter,
							  info->fields[info->shard_key_attnums[i] - 1],
							  source);
	}
}

/*
 * Restrict a filter that names several facts by _id (a multi-document
 * delete) to the documents "docs" themselves: with a shard key, add
 * {$or: [{_id, shard key values}, ...]} of those not marked in "skip", so
 * that a document of another shard with the same _id is not touched.
 */
void
idx_shard_key_restrict(const IdxTableInfo *info, bson_t *filter,
					   bson_t **docs, const bool *skip, int n)
{
	bson_t		list;
	int			i;
	int			k = 0;

	if (info->nshard_key == 0)
		return;
	idx_check_append(IDX_BSON_APPEND_ARRAY_BEGIN(filter, "$or", &list));
	for (i = 0; i < n; i++)
	{
		bson_t		one;
		bson_iter_t iter;
		char		key[16];

		if (skip && skip[i])
			continue;
		snprintf(key, sizeof(key), "%d", k++);
		idx_check_append(BSON_APPEND_DOCUMENT_BEGIN(&list, key, &one));
		if (bson_iter_init_find(&iter, docs[i], IDX_ID_FIELD))
			idx_check_append(bson_append_iter(&one, IDX_ID_FIELD, -1, &iter));
		idx_shard_key_append(info, &one, docs[i]);
		idx_check_append(bson_append_document_end(&list, &one));
	}
	idx_check_append(bson_append_array_end(filter, &list));
}

/*
 * The error code and message of a failed write: the reply's own, or its
 * first write error's, else libmongoc's.
 */
static uint32
refusal_code(const bson_t *reply, const bson_error_t *error,
			 const char **message)
{
	bson_iter_t iter;
	bson_iter_t sub;

	*message = error->message;
	if (reply && bson_iter_init_find(&iter, reply, "code") &&
		BSON_ITER_HOLDS_NUMBER(&iter))
	{
		uint32		code = (uint32) bson_iter_as_int64(&iter);

		if (bson_iter_init_find(&iter, reply, "errmsg") &&
			BSON_ITER_HOLDS_UTF8(&iter))
			*message = bson_iter_utf8(&iter, NULL);
		return code;
	}
	if (reply && bson_iter_init(&iter, reply) &&
		bson_iter_find_descendant(&iter, "writeErrors.0.code", &sub) &&
		BSON_ITER_HOLDS_NUMBER(&sub))
	{
		uint32		code = (uint32) bson_iter_as_int64(&sub);

		if (bson_iter_init(&iter, reply) &&
			bson_iter_find_descendant(&iter, "writeErrors.0.errmsg", &sub) &&
			BSON_ITER_HOLDS_UTF8(&sub))
			*message = bson_iter_utf8(&sub, NULL);
		return code;
	}
	return error->code;
}

/*
 * If a write failed because mongos could not target it (its filter lacks
 * the collection's shard key), raise an ERROR that says so and what to do;
 * otherwise return, for the caller's usual report.
 */
void
idx_shard_key_check_refusal(const IdxTableInfo *info, const bson_t *reply,
							const bson_error_t *error)
{
	const char *message;
	uint32		code = refusal_code(reply, error, &message);

	if (code != MONGO_SHARD_KEY_NOT_FOUND &&
		!(code == MONGO_INVALID_OPTIONS &&
		  strstr(message, "sharded collection") != NULL))
		return;
	if (info->nshard_key == 0)
		ereport(ERROR,
				(errcode(ERRCODE_FDW_OPTION_NAME_NOT_FOUND),
				 errmsg("MongoDB refused a write to foreign table \"%s\" because collection \"%s.%s\" is sharded",
						info->relname, info->database, info->collection),
				 errdetail("MongoDB error %u: %s", code,
						   idx_scrub_message(message)),
				 errhint("Set the option \"shard_key\" of the foreign table to the columns of the collection's shard key.")));
	ereport(ERROR,
			(errcode(ERRCODE_FDW_INVALID_ATTRIBUTE_VALUE),
			 errmsg("MongoDB refused a write to foreign table \"%s\" because its filter lacks part of the shard key of collection \"%s.%s\"",
					info->relname, info->database, info->collection),
			 errdetail("MongoDB error %u: %s", code, idx_scrub_message(message)),
			 errhint("The option \"shard_key\" must name a column for every field of the collection's shard key.")));
}
