/*-------------------------------------------------------------------------
 *
 * order.h
 *		  ORDER BY, LIMIT and OFFSET pushed down to the find of a plain scan:
 *		  sorted paths of the base relation and LIMIT/OFFSET paths of
 *		  UPPERREL_FINAL (order_path.c), and their execution (order_scan.c).
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/order.h
 *
 * A pushed sort (IdxPrivSort) is a List with one IntList per key:
 * (attnum, descending, nulls_first, type OID).  MongoDB sorts null,
 * missing and undefined values below every other value, and undefined
 * below null, while PostgreSQL treats all three as NULL, placed as the
 * query says.  So a sorted scan runs a find for the documents whose first
 * key is not NULL (sorted on all keys) and one for the others (NULL first
 * keys, sorted on the other keys), in the order the first key's NULLS
 * FIRST/LAST asks for.  A float first key has a third find for its NaNs
 * (sorted on the other keys), which MongoDB sorts below every number and
 * PostgreSQL above: after the numbers ascending, before them descending.
 * Keys after the first must place NULLs where MongoDB does, may be at
 * most one (so that NULLs of different BSON types never decide an order)
 * and are not floats.
 *
 * A text key (the only key, under a collation that orders as bytes) holds
 * strings, which MongoDB sorts below every ObjectId, and ObjectIds, whose
 * text sorts among the strings (core/text_order.h).  Its values are read
 * by two finds, one for the strings and symbols and one for the ObjectIds,
 * each sorted and limited, whose rows the scan merges as bytes; a third
 * find, run first with limit 1, returns a value of any other type, whose
 * conversion fails as it would in a plain scan.
 *
 *-------------------------------------------------------------------------
 */
#ifndef IDXTABLE_ORDER_H
#define IDXTABLE_ORDER_H

#include "commands/explain.h"
#include "nodes/pathnodes.h"

#include "core/mongoc_compat.h"
#include "core/pg_compat.h"
#include "planner.h"
#include "scan.h"

/* Execution state of a pushed sort, limit or offset (order_scan.c) */
typedef struct IdxOrderScan
{
	List	   *sort;			/* IdxPrivSort of the plan, NIL: none */
	int			limit;			/* OFFSET + LIMIT rows at most, -1: no limit */
	int			offset;			/* rows to skip first */
	int			phase;			/* sorted scans: the find under way, from 0
								 * (order_scan.c) */
	int			seen;			/* documents read in earlier finds and this
								 * one (sorted scans, which skip locally) */
} IdxOrderScan;

/* order_path.c */
extern List *idx_order_sort_spec(PlannerInfo *root, RelOptInfo *baserel,
								 List *pathkeys);
extern void idx_add_order_paths(PlannerInfo *root, RelOptInfo *baserel,
								IdxRelInfo *fpinfo, Cost startup_cost,
								Cost total_cost);
extern void idx_add_ordered_paths(PlannerInfo *root, RelOptInfo *input_rel,
								  RelOptInfo *ordered_rel);

/* order_scan.c */
extern IdxOrderScan *idx_order_scan_create(List *fdw_private);
extern bool idx_order_exhausted(const IdxOrderScan *os);
extern int	idx_order_batch_size(const IdxOrderScan *os, int fetch_size);
extern void idx_order_find(const IdxOrderScan *os, const IdxTableInfo *info,
						   int sub, bson_t *filter, bson_t *opts);
extern bool idx_order_skip_row(IdxOrderScan *os);
extern bool idx_order_merging(const IdxOrderScan *os);
extern const char *idx_order_bracket(const IdxOrderScan *os,
									 const IdxTableInfo *info, int sub,
									 IdxTextBracket *bracket);
extern int	idx_order_merge_pick(const IdxOrderScan *os,
								 const IdxTableInfo *info,
								 const bson_t *doc0, const bson_t *doc1);
extern bool idx_order_next_phase(IdxOrderScan *os);
extern void idx_order_rescan(IdxOrderScan *os);
extern bool idx_order_text_sort(const IdxOrderScan *os);
extern const char *idx_order_find_label(const IdxOrderScan *os, int phase,
										int sub);
extern void idx_order_explain(const IdxOrderScan *os,
							  const IdxTableInfo *info, ExplainState *es);

#endif							/* IDXTABLE_ORDER_H */
