/*-------------------------------------------------------------------------
 *
 * applier_fields.c
 *		  Which update events an index table can ignore: those whose
 *		  updateDescription names no field its entries are computed from.
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/applier/applier_fields.c
 *
 * An index table's entries of a fact are a function of the fact's key and
 * included columns only (index_entry.c, idx_entry_columns()), so an update
 * that changes none of their fields leaves the entries the index already
 * holds for the fact exactly right: the earlier events of that fact were
 * applied (or are in the same batch), and a later change has an event of
 * its own.  Such an update needs neither the read of the fact nor the read
 * of its entries.  This spares the applier most of its work for writes
 * through the FDW in ordered mode (an UPDATE of a column no index table
 * uses) and for outside writers that change other fields.
 *
 * The test is on the first component of each path: a changed path
 * (updatedFields' names, removedFields, truncatedArrays' "field") touches
 * the index when its first component is the first component of one of the
 * index's fields.  That errs on the side of applying: a field name holding
 * a dot (which updateDescription does not tell from a path) or a change
 * elsewhere under the same top-level field only costs the reads.  An
 * updateDescription of another shape than the default one (e.g. with
 * disambiguatedPaths, which showExpandedEvents adds) counts as touching
 * everything.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/relation.h"
#include "access/sysattr.h"
#include "miscadmin.h"
#include "nodes/value.h"
#include "utils/rel.h"

#include "applier/applier.h"
#include "core/mongoc_compat.h"
#include "core/option.h"
#include "index/index_catalog.h"
#include "index/index_entry.h"

/*
 * The length of the first component of dotted path "path".
 */
static size_t
first_component_len(const char *path)
{
	const char *dot = strchr(path, '.');

	return dot ? (size_t) (dot - path) : strlen(path);
}

/*
 * The top-level field names (distinct) that the entries of index "ix" are
 * computed from, in *fields; false if that cannot be told (the index or
 * its table is gone: then nothing may be skipped).  Read as the table
 * owner, as the repair reads the definition.
 */
bool
idx_applier_index_fields(AppIndex *ix, List **fields)
{
	Oid			save_userid;
	int			save_sec;
	Relation	rel;
	bool		known = false;

	*fields = NIL;
	GetUserIdAndSecContext(&save_userid, &save_sec);
	SetUserIdAndSecContext(applier.slot->ownerid,
						   save_sec | SECURITY_RESTRICTED_OPERATION);
	rel = try_relation_open(ix->relid, AccessShareLock);
	if (rel != NULL)
	{
		IdxIndexDef *def = idx_applier_current_def(ix);

		if (def != NULL)
		{
			IdxTableInfo *info = idx_get_table_info(ix->relid);
			Bitmapset  *attrs = idx_entry_columns(def);
			int			i;

			known = true;
			for (i = 0; i < info->natts; i++)
			{
				const char *field = info->fields[i];
				char	   *name;

				if (!bms_is_member(i + 1 - FirstLowInvalidHeapAttributeNumber,
								   attrs))
					continue;
				if (field == NULL)
				{
					known = false;	/* an index on a dropped column */
					break;
				}
				name = pnstrdup(field, first_component_len(field));
				if (!list_member(*fields, makeString(name)))
					*fields = lappend(*fields, makeString(name));
			}
		}
		relation_close(rel, AccessShareLock);
	}
	SetUserIdAndSecContext(save_userid, save_sec);
	return known;
}

/*
 * Is the first component of changed path "path" one of "fields"?
 */
static bool
path_touches(const char *path, List *fields)
{
	size_t		len = first_component_len(path);
	ListCell   *lc;

	foreach(lc, fields)
	{
		const char *field = strVal(lfirst(lc));

		if (strlen(field) == len && strncmp(field, path, len) == 0)
			return true;
	}
	return false;
}

/*
 * Does array "iter" of updateDescription (removedFields: strings;
 * truncatedArrays: documents with a string "field") name one of "fields"?
 * An element of another shape counts as touching.
 */
static bool
array_touches(bson_iter_t *iter, bool truncated, List *fields)
{
	bson_iter_t items,
				item;

	if (!BSON_ITER_HOLDS_ARRAY(iter) || !bson_iter_recurse(iter, &items))
		return true;
	while (bson_iter_next(&items))
	{
		if (!truncated)
		{
			if (!BSON_ITER_HOLDS_UTF8(&items) ||
				path_touches(bson_iter_utf8(&items, NULL), fields))
				return true;
		}
		else if (!BSON_ITER_HOLDS_DOCUMENT(&items) ||
				 !bson_iter_recurse(&items, &item) ||
				 !bson_iter_find(&item, "field") ||
				 !BSON_ITER_HOLDS_UTF8(&item) ||
				 path_touches(bson_iter_utf8(&item, NULL), fields))
			return true;
	}
	return false;
}

/*
 * Does update description "desc" (an update event's updateDescription)
 * change one of "fields" (top-level names)?  Any part it does not know
 * counts as a change.
 */
bool
idx_applier_update_touches(const bson_t *desc, List *fields)
{
	bson_iter_t iter,
				updated;

	if (!bson_iter_init(&iter, desc))
		return true;
	while (bson_iter_next(&iter))
	{
		const char *key = bson_iter_key(&iter);

		if (strcmp(key, "updatedFields") == 0)
		{
			if (!BSON_ITER_HOLDS_DOCUMENT(&iter) ||
				!bson_iter_recurse(&iter, &updated))
				return true;
			while (bson_iter_next(&updated))
				if (path_touches(bson_iter_key(&updated), fields))
					return true;
		}
		else if (strcmp(key, "removedFields") == 0 ||
				 strcmp(key, "truncatedArrays") == 0)
		{
			if (array_touches(&iter, key[0] == 't', fields))
				return true;
		}
		else
			return true;		/* e.g. disambiguatedPaths: names with dots */
	}
	return false;
}
