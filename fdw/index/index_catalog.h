/*-------------------------------------------------------------------------
 *
 * index_catalog.h
 *		  Definitions of index tables (idxtable.index_defs) as the planner,
 *		  the executor and the write path see them.
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/index/index_catalog.h
 *
 * An index table is a companion MongoDB collection, maintained by the FDW,
 * whose entries map a secondary key to the fact's _id.  Entry format (the
 * README's "How it works" documents it for users):
 *
 *	{ _id: { k0: <key 0>, k1: <key 1>, ..., id: <fact _id> },
 *	  id: <fact _id>,
 *	  v: { i0: <included column 0>, i1: ...,			-- INCLUDE columns
 *		   c0: <text of key 0>, ... } }				-- sort-key keys
 *
 * For a unique index whose key has no NULL component the _id is
 * { k0: ..., k1: ... } without "id", so MongoDB's own _id index rejects a
 * second fact with the same key.  Keys are BSON values written by the FDW
 * from PostgreSQL datums (integers as int64, text as strings, ...), so all
 * entries of one index compare within one BSON type per key component.
 * A text key under a collation that does not order as bytes do holds the
 * collation's sort key followed by the text (index_collate.h), and the
 * text alone in "v.c<k>" for covering reads; "v" is there only if it has
 * something in it.
 *
 *-------------------------------------------------------------------------
 */
#ifndef IDXTABLE_INDEX_CATALOG_H
#define IDXTABLE_INDEX_CATALOG_H

#include "access/attnum.h"
#include "nodes/pg_list.h"

/* What a key component is computed from */
typedef enum IdxKeyKind
{
	IDX_KEY_COLUMN,				/* the column's value */
	IDX_KEY_LOWER,				/* lower(column) */
	IDX_KEY_UPPER				/* upper(column) */
} IdxKeyKind;

typedef enum IdxIndexState
{
	IDX_STATE_BUILDING,			/* maintained by writes, not used by reads */
	IDX_STATE_VALID,			/* maintained and used */
	IDX_STATE_STALE,			/* maintained by writes, not used by reads
								 * until rebuilt (the change stream could not
								 * resume) */
	IDX_STATE_FAILED			/* neither; can only be dropped */
} IdxIndexState;

typedef struct IdxIndexKey
{
	AttrNumber	attnum;			/* column of the foreign table */
	IdxKeyKind	kind;
	bool		multi;			/* the column is an array: one entry per
								 * element (multi-valued index) */
	Oid			keytype;		/* type of one key value: the column's type,
								 * or its element type when multi */
	Oid			collation;		/* collation for lower()/upper() */
	Oid			sortcoll;		/* the entries hold this collation's sort
								 * keys (index_collate.h), or InvalidOid:
								 * the value itself */
} IdxIndexKey;

typedef struct IdxIndexDef
{
	char	   *name;			/* index name (unique per database) */
	Oid			relid;			/* the foreign table */
	char	   *database;		/* MongoDB database of the index collection */
	char	   *collection;		/* the index collection */
	int			nkeys;
	IdxIndexKey *keys;
	int			ninclude;
	AttrNumber *include;		/* included columns */
	bool		unique;
	IdxIndexState state;
	double		entries;		/* from ANALYZE or the build; -1 unknown */
	double		distinct_keys;	/* distinct full keys; -1 unknown */
	char	   *definition_id;	/* UUID naming the definition in the index
								 * collection's ownership marker */
	char	   *owner_problem;	/* why the collection is not this index's
								 * (state is then failed), or NULL */
	const char *sharding;		/* how the index collection is sharded:
								 * "none", "ranged" or "hashed"
								 * (index_shard.h) */
	bool		collation_changed;	/* a sortcoll's version is not the one
									 * the entries were written under: stale
									 * for reads until repaired or rebuilt */
} IdxIndexDef;

/* Field names inside an entry */
#define IDX_ENTRY_FACT_ID	"id"	/* in _id and at top level */
#define IDX_ENTRY_INCLUDE	"v"
#define IDX_ENTRY_ORIGINAL	"c"	/* "v.c<k>": the text of sort-key key k */

/*
 * All index definitions of a foreign table, any state (palloc'd); those
 * whose collection's ownership marker is not theirs are failed.  A marker
 * not yet checked in this backend is read connecting as "userid" (the
 * user the table is read or written as; InvalidOid: the current user).
 */
extern List *idx_get_indexes(Oid relid, Oid userid);

/*
 * Facts counted by a valid single-valued index table of the table (its
 * "entries"), or -1: a row count for planning before ANALYZE.
 */
extern double idx_indexed_fact_count(Oid relid);

/*
 * Does another foreign table of the server have index tables over the
 * same fact collection (see index_catalog.c)?
 */
extern bool idx_collection_shared(Oid relid, Oid serverid,
								  const char *database,
								  const char *collection);

/* Name of key component i inside the entry _id ("k0", "k1", ...) */
extern const char *idx_key_field(int i);

/* Name of included column i inside the entry's "v" ("i0", ...) */
extern const char *idx_include_field(int i);

#endif							/* IDXTABLE_INDEX_CATALOG_H */
