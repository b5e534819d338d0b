/*-------------------------------------------------------------------------
 *
 * index_entry.h
 *		  The entries of index tables: canonical BSON for key values, and the
 *		  entry documents of one fact.
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/index/index_entry.h
 *
 * Shared by the build (index_build.c), the write path and the lookups.
 * The entry format is documented in index_catalog.h; the rules for key
 * values are:
 *
 *	smallint, integer, bigint	int64, always (so one BSON type per key)
 *	text, varchar				UTF-8 string (lower()/upper() keys: of the
 *								lowered/uppered text); a plain key under a
 *								collation that does not order as bytes do:
 *								its sort key, then the text (index_collate.h)
 *	boolean						bool
 *	date, timestamp,			BSON date, milliseconds since the epoch, UTC
 *	timestamptz					(sub-millisecond digits are dropped, rounding
 *								toward minus infinity, so a timestamp key is
 *								lossy; -infinity/infinity become the smallest
 *								and largest BSON dates)
 *	uuid						binary subtype 4
 *	SQL NULL					BSON null
 *
 * Lookups build their bounds with idx_append_key_value() from constants of
 * the key type, so entry keys and bounds are byte-identical BSON.
 *
 * Which entries a fact has:
 *	- a plain index: exactly one entry per fact, NULL key components
 *	  included (as BSON null);
 *	- a multi-valued index (one key column is an array): one entry per
 *	  DISTINCT non-null element (distinct by the element's key BSON); a
 *	  NULL or empty array, or one holding only NULLs, gives no entry at all,
 *	  so such an index cannot answer "IS NULL" or "= '{}'";
 *	- a unique index: _id without the fact id unless a key component is
 *	  NULL (NULLs are distinct, as in PostgreSQL).  A unique multi-valued
 *	  index means: no element value (with the other key components) occurs
 *	  in two different facts.
 *
 *-------------------------------------------------------------------------
 */
#ifndef IDXTABLE_INDEX_ENTRY_H
#define IDXTABLE_INDEX_ENTRY_H

#include "nodes/bitmapset.h"

#include "core/mongoc_compat.h"
#include "index/index_catalog.h"

/*
 * Append the canonical BSON of a key value of type "type" under "field".
 * NULL appends BSON null.  Errors for unsupported types.
 */
extern void idx_append_key_value(bson_t *doc, const char *field, Datum value,
								 Oid type, bool isnull);

/*
 * Append {"$in": [...]}: the non-null elements of the array "arraydatum"
 * as lookup values of key "key".  False if it holds none (NULL elements
 * never match).
 */
extern bool idx_append_key_in(bson_t *doc, const IdxIndexKey *key,
							  Datum arraydatum);

/*
 * The key value of a non-null column value: lower()/upper() applied, the
 * stored form of a sort-key key (index_collate.h), or the value itself.
 */
extern Datum idx_key_datum(const IdxIndexKey *key, Datum value);

/*
 * The value a lookup compares with key "key", from a non-null value of the
 * key's type (a text for sort-key keys, as idx_key_datum makes them).
 */
extern Datum idx_key_lookup_datum(const IdxIndexKey *key, Datum value);

/* "v.c<k>": where an entry holds the text of sort-key key k (palloc'd) */
extern char *idx_key_original_path(int k);

/*
 * The key values of all entries of one fact, before BSON: on return,
 * (*keyvalues)[e * nkeys + k] / (*keynulls)[...] hold key component k of
 * entry e, after lower()/upper() and array expansion.  values/nulls are the
 * fact's row, indexed by attnum - 1.  Returns the number of entries;
 * allocates in the current memory context.
 */
extern int	idx_compute_keys(const IdxIndexDef *def, const Datum *values,
							 const bool *nulls, Datum **keyvalues,
							 bool **keynulls);

/*
 * The entry document for one set of key values (nkeys of them) of the fact
 * whose _id is "fact_id" and whose row is values/nulls (for INCLUDE).
 * A heap bson_t: the caller bson_destroy()s it.
 */
extern bson_t *idx_make_entry(const IdxIndexDef *def, const Datum *keyvalues,
							  const bool *keynulls,
							  const bson_value_t *fact_id,
							  const Datum *values, const bool *nulls);

/*
 * All entry documents of one fact: idx_compute_keys() + idx_make_entry().
 * *entries is a palloc'd array of heap bson_t pointers; the caller
 * bson_destroy()s each.  Returns how many.
 */
extern int	idx_build_entries(const IdxIndexDef *def, const Datum *values,
							  const bool *nulls, const bson_value_t *fact_id,
							  bson_t ***entries);

/*
 * Append the _id part of an entry ({k0: .., k1: .., [id: ..]}) as a
 * sub-document "field" of "doc"; the same rules as idx_make_entry().
 */
extern void idx_append_entry_id(bson_t *doc, const char *field,
								const IdxIndexDef *def,
								const Datum *keyvalues, const bool *keynulls,
								const bson_value_t *fact_id);

/*
 * The key specifications of an index as text, e.g. "lower(name), town"
 * (palloc'd), from the table's current column names.
 */
extern char *idx_key_specs_text(const IdxIndexDef *def);

/*
 * "Key (lower(name))=(alice)" style description of one entry's key values,
 * for unique violations (palloc'd).
 */
extern char *idx_key_description(const IdxIndexDef *def,
								 const Datum *keyvalues,
								 const bool *keynulls);

/* DETAIL "Key (...)=(...) is duplicated.", or none for a NULL description */
extern int	idx_errdetail_key_duplicated(const char *desc);

/*
 * The raw bytes of an entry's _id sub-document; an entry of index "def"
 * without one is an ERROR (read from its collection, it is corrupt)
 */
extern void idx_entry_id_bytes(const IdxIndexDef *def, const bson_t *entry,
							   const uint8 **data, uint32 *len);

/* Do two entries of index "def" have the same _id (byte for byte)? */
extern bool idx_entry_same_id(const IdxIndexDef *def, const bson_t *a,
							  const bson_t *b);

/* Does the entry's _id lack the fact id (a unique key's claim)? */
extern bool idx_entry_is_claim(const bson_t *entry);

/*
 * The filter {_id: <entry _id>, id: <fact id>} that deletes or replaces an
 * entry only while it belongs to that fact (palloc'd).
 */
extern bson_t *idx_entry_own_filter(const bson_t *entry);

/*
 * The key and included columns of an index as pull_varattnos offsets (for
 * idx_row_conv_create).
 */
extern Bitmapset *idx_entry_columns(const IdxIndexDef *def);

#endif							/* IDXTABLE_INDEX_ENTRY_H */
