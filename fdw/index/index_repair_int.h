/*-------------------------------------------------------------------------
 *
 * index_repair_int.h
 *		  What the files of a verify or repair share among themselves:
 *		  index_repair.c (the state, its reads and fixes), below
 *		  index_repair_claims.c (unique claims), below index_repair_batch.c
 *		  (a batch of facts against its entries), below
 *		  index_repair_named.c (the entry points: facts named by _id, or
 *		  already read).
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

/* ---- index_repair.c ---- */

/* Total order on documents by length, then bytes (for bsearch) */
extern int	idx_repair_compare_bson(const bson_t *a, const bson_t *b);
extern int	idx_repair_compare_bson_ptrs(const void *a, const void *b);

/* An entry's "_id" as {"_id": ...}: how entries are sorted and found */
extern bson_t *idx_repair_entry_id_key(IdxRepairState *st,
									   const bson_t *entry);

/* An entry as it is compared: without the claim time */
extern bson_t *idx_repair_without_claim_time(const bson_t *entry);

/* The filter that matches an entry only as it was read */
extern bson_t *idx_repair_read_filter(const bson_t *entry);

/* The batch's bulk of fixes, begun on first use */
extern mongoc_bulk_operation_t *idx_repair_fix_bulk(IdxRepairState *st);

/* Queue the replacement (or upsert) of "selector"'s entry by "entry" */
extern void idx_repair_fix_replace(IdxRepairState *st, const bson_t *selector,
								   const bson_t *entry, bool upsert);

/* One document of "coll" by filter (and projection), or NULL */
extern bson_t *idx_repair_find_one(IdxRepairState *st,
								   mongoc_collection_t *coll,
								   const bson_t *filter,
								   const bson_t *projection,
								   const IdxOp *what);

/* ---- index_repair_claims.c ---- */

/* A missing unique claim "ee" of "item": written, taken over or conflict */
extern void idx_repair_check_claim(IdxRepairState *st, FactItem *item,
								   ExpectedEntry *ee);

/* Repairing, write the batch's missing claims noted by the above */
extern void idx_repair_write_claims(IdxRepairState *st);

/* ---- index_repair_batch.c ---- */

/* Add a fact of the batch to st->items: one that exists, or one gone */
extern void idx_repair_add_fact(IdxRepairState *st, const bson_t *doc);
extern void idx_repair_add_gone(IdxRepairState *st, bson_t *wrapped_id);

/* Read the entries of st->items, then compare (and fix); or compare only */
extern int	idx_repair_check_batch(IdxRepairState *st);
extern int	idx_repair_compare_batch(IdxRepairState *st);

/* The facts waiting for a claim: note one */
extern void idx_repair_add_waiting_id(IdxRepairState *st, bson_t *id);

/* ---- index_repair_named.c ---- */

/* Check again the facts waiting for a claim */
extern void idx_repair_recheck_waiting(IdxRepairState *st);

#endif							/* IDXTABLE_INDEX_REPAIR_INT_H */
