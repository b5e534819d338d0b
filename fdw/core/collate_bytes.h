/*-------------------------------------------------------------------------
 *
 * collate_bytes.h
 *		  Which collations order text as its bytes do, as MongoDB's simple
 *		  collation compares strings: C, POSIX, and libc "C.<encoding>"
 *		  locales checked to agree with strcmp.
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/core/collate_bytes.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef IDXTABLE_COLLATE_BYTES_H
#define IDXTABLE_COLLATE_BYTES_H

#include "utils/pg_locale.h"

/*
 * Does "collid" order strings of a UTF-8 database as their bytes do (so
 * as MongoDB's simple collation does)?  False for an invalid collation.
 */
extern bool idx_collation_bytewise(Oid collid);

/*
 * The strings a libc collation is checked on (collate_bytes.c), and
 * strcoll under a libc collation (NULL: the database's default).
 */
extern const char *const idx_collation_check_strings[];
extern const int idx_collation_ncheck;
extern int	idx_libc_strcoll(pg_locale_t loc, const char *a, const char *b);

#endif							/* IDXTABLE_COLLATE_BYTES_H */
