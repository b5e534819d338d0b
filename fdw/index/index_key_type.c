/*-------------------------------------------------------------------------
 *
 * index_key_type.c
 *		  Which types can be index keys, and which collation's sort keys a
 *		  text key holds.
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/index/index_key_type.c
 *
 * The catalog resolves a definition's keys with these (index_catalog.c);
 * the entries' BSON form of each type is index_entry.c's.  Neither of
 * those is needed here.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"

#include "index/index_collate.h"
#include "index/index_key_type.h"

/*
 * Key types: those whose BSON form MongoDB orders exactly as PostgreSQL
 * orders the values (bytewise strings; the planner restricts text lookups
 * to collations where that is the same thing).
 */
bool
idx_key_type_supported(Oid typid)
{
	switch (typid)
	{
		case INT2OID:
		case INT4OID:
		case INT8OID:
		case TEXTOID:
		case VARCHAROID:
		case BOOLOID:
		case DATEOID:
		case TIMESTAMPOID:
		case TIMESTAMPTZOID:
		case UUIDOID:
			return true;
		default:
			return false;
	}
}

/*
 * The key types as a list, for hints.
 */
const char *
idx_key_type_list(void)
{
	return "smallint, integer, bigint, text, varchar, boolean, date, "
		"timestamp, timestamptz, uuid";
}

/*
 * The collation whose sort keys a new definition's key "key" should hold:
 * its column's, for a plain (not multi-valued) text key under a collation
 * that gives trustworthy sort keys; lower()/upper() and element keys serve
 * equalities alone, which need no sort key.
 */
Oid
idx_key_sortcoll(const IdxIndexKey *key)
{
	if (key->kind != IDX_KEY_COLUMN || key->multi ||
		(key->keytype != TEXTOID && key->keytype != VARCHAROID) ||
		!idx_collation_has_sortkeys(key->collation))
		return InvalidOid;
	return key->collation;
}
