/*-------------------------------------------------------------------------
 *
 * index_utility.h
 *		  CREATE INDEX, DROP INDEX, ALTER INDEX and REINDEX on foreign
 *		  tables of this FDW, through PostgreSQL's ProcessUtility_hook.
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/index/index_utility.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef IDXTABLE_INDEX_UTILITY_H
#define IDXTABLE_INDEX_UTILITY_H

/* Is a foreign-data wrapper ours? (passed in by _PG_init) */
typedef bool (*IdxFdwIsOurs) (Oid fdwid);

/*
 * Install the utility hook (from _PG_init), chained after any hook
 * installed before it; "is_ours" recognises this FDW's wrappers.
 */
extern void idx_install_utility_hook(IdxFdwIsOurs is_ours);

#endif							/* IDXTABLE_INDEX_UTILITY_H */
