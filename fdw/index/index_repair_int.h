/*-------------------------------------------------------------------------
 *
 * index_repair_int.h
 *		  What index_repair.c (the batch core: facts against entries, the
 *		  fixes, unique claims) shares with index_repair_named.c (the facts
 *		  named by _id: the applier's entry points).
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/index/index_repair_int.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef IDXTABLE_INDEX_REPAIR_INT_H
#define IDXTABLE_INDEX_REPAIR_INT_H

#include "index/index_repair.h"

/* Attempts at writing a unique claim that others race for */
#define IDX_REPAIR_CLAIM_ATTEMPTS 3

/*
 * One entry a fact should have, with its key values for messages.
 */
typedef struct ExpectedEntry
{
	bson_t	   *entry;
	Datum	   *keyvalues;
	bool	   *keynulls;
} ExpectedEntry;

/*
 * One fact of a batch, present (with the entries it should have) or gone.
 */
typedef struct FactItem
{
	bson_t	   *id;				/* {"v": <fact _id>} */
	bool		gone;			/* no fact has this _id */
	int			nentries;
	ExpectedEntry *entries;
	int			nconflicts;		/* unique key conflicts reported */
	bool		resolved;		/* reported to on_resolved */
} FactItem;

/* Total order on documents by length, then bytes (for bsearch) */
extern int	idx_repair_compare_bson(const bson_t *a, const bson_t *b);
extern int	idx_repair_compare_bson_ptrs(const void *a, const void *b);

/* Add a fact of the batch to st->items: one that exists, or one gone */
extern void idx_repair_add_fact(IdxRepairState *st, const bson_t *doc);
extern void idx_repair_add_gone(IdxRepairState *st, bson_t *wrapped_id);

/* Read the entries of st->items, then compare (and fix); or compare only */
extern int	idx_repair_check_batch(IdxRepairState *st);
extern int	idx_repair_compare_batch(IdxRepairState *st);

/* The facts waiting for a claim: note one, check them again */
extern void idx_repair_add_waiting_id(IdxRepairState *st, bson_t *id);
extern void idx_repair_recheck_waiting(IdxRepairState *st);

#endif							/* IDXTABLE_INDEX_REPAIR_INT_H */
