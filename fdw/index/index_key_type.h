/*-------------------------------------------------------------------------
 *
 * index_key_type.h
 *		  Which types can be index keys, and which collation's sort keys a
 *		  text key holds.
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/index/index_key_type.h
 *
 * What the catalog needs to resolve a key specification, kept apart from
 * the entries (index_entry.h), which use the catalog's key fields: so the
 * catalog does not depend on the entries.
 *
 *-------------------------------------------------------------------------
 */
#ifndef IDXTABLE_INDEX_KEY_TYPE_H
#define IDXTABLE_INDEX_KEY_TYPE_H

#include "index/index_catalog.h"

/* Can values of this (scalar) type be index keys? */
extern bool idx_key_type_supported(Oid typid);

/* Type names for messages: "smallint, integer, ..., uuid" */
extern const char *idx_key_type_list(void);

/*
 * The collation whose sort keys a new definition's key "key" should hold
 * (its column's, if that collation does not order as bytes and gives
 * trustworthy sort keys), or InvalidOid.
 */
extern Oid	idx_key_sortcoll(const IdxIndexKey *key);

#endif							/* IDXTABLE_INDEX_KEY_TYPE_H */
