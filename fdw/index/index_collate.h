/*-------------------------------------------------------------------------
 *
 * index_collate.h
 *		  Text keys of index tables under the column's collation.
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/index/index_collate.h
 *
 * MongoDB compares strings byte for byte.  A text key whose collation
 * orders as bytes do (C, POSIX, a libc "C.<encoding>" locale checked to
 * agree with strcmp) is stored as the string itself.  Under any other
 * deterministic collation whose sort keys agree with its comparisons (ICU:
 * ucol_getSortKey; libc: strxfrm, only if it agrees with strcoll on a
 * check set) the key is stored as
 *
 *		hex(sort key) || "00" || the original string
 *
 * The sort key holds no zero byte, so the "00" ends it and no encoded sort
 * key is a prefix of another: MongoDB's binary order of the stored strings
 * is the collation's order, and strings the collation finds equal follow
 * in byte order, PostgreSQL's tie-breaker for deterministic collations.
 * Nondeterministic collations are never given sort keys (they are never
 * routed but for nothing: their equality is not byte equality).
 *
 *-------------------------------------------------------------------------
 */
#ifndef IDXTABLE_INDEX_COLLATE_H
#define IDXTABLE_INDEX_COLLATE_H

/* idx_collation_bytewise(): does "collid" order strings as bytes do? */
#include "core/collate_bytes.h"


/*
 * Can keys under "collid" be stored as sort keys (deterministic, not
 * bytewise, and its sort keys agree with its comparisons)?
 */
extern bool idx_collation_has_sortkeys(Oid collid);

/* The stored form of a (non-null) text value under "collid" (a text) */
extern Datum idx_sortkey_encode(Oid collid, Datum value);

/* The original string of a stored form (palloc'd) */
extern char *idx_sortkey_original(const char *stored, int len);

/* The collation's version as its provider now reports it, or NULL */
extern const char *idx_collation_version(Oid collid);

#endif							/* IDXTABLE_INDEX_COLLATE_H */
