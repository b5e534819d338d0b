/*-------------------------------------------------------------------------
 *
 * route_scan_int.h
 *		  The state of a scan routed through an index table, shared by
 *		  route_scan.c (the scan: facts, rows, EXPLAIN), route_id_order.c
 *		  (ORDER BY key, _id) and route_lookup.c (the finds of entries).
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/route_scan_int.h
 *
 * route_scan.c calls route_id_order.c and route_lookup.c, and
 * route_id_order.c calls route_lookup.c, never the other way round.
 *
 *-------------------------------------------------------------------------
 */
#ifndef IDXTABLE_ROUTE_SCAN_INT_H
#define IDXTABLE_ROUTE_SCAN_INT_H

#include "utils/rel.h"
#include "utils/sortsupport.h"

#include "index/index_catalog.h"
#include "route_path.h"
#include "scan.h"

/*
 * One entry of a group of equal order keys, with its fact's _id.  The
 * entry is its bytes (a copy in tie_cxt), not a bson_t: a static bson_t
 * points into itself, and sorting moves the TieEntries.
 */
typedef struct TieEntry
{
	uint8_t    *data;
	uint32_t	len;
	Datum		id;
	bool		id_null;
} TieEntry;

/*
 * The index part of a scan's state.
 */
typedef struct IdxIndexScan
{
	IdxIndexDef *def;
	bool		covering;
	List	   *conds;			/* integer Lists (keypos, op, exprpos) */
	char	   *cond_text;		/* for EXPLAIN */
	List	   *value_exprs;	/* all of the plan's fdw_exprs */
	List	   *value_states;	/* their ExprStates */
	Datum	   *values;			/* their values for this execution */
	bool	   *nulls;
	IdxRowConv *entryconv;		/* covering: columns read from entries */
	IdxRowConv *keyconv;		/* key-only: a fact's key columns */
	Bitmapset  *fetch_attrs;	/* key-only: columns to fetch (+ keys) */
	const bson_t *fetch_collation;	/* the collection's, or NULL: simple */
	List	   *checks;			/* string equalities to recheck under it */
	Bitmapset  *check_attrs;	/* the columns they read */

	/* libmongoc objects, released by idx_index_scan_release() */
	mongoc_collection_t *index_coll;
	mongoc_cursor_t *lookup;
	bson_t	   *fact_filter;	/* pushed-down filter of this execution */

	bool		started;		/* lookup set up for this execution */
	bool		lookup_done;	/* no more entries */

	/*
	 * Ordered scans follow "order_nkeys" keys from "order_key" (-1: no
	 * order), descending or not; the first key places its NULLs first or last
	 * ("nulls_first"), the others as MongoDB does.  Key-only ordered scans
	 * put each batch of facts back in entry order.
	 *
	 * The lookup is one find, or two (parts): where a key "split_key" has its
	 * NULL entries read apart, those of an "IS NULL OR" condition, or of the
	 * first order key when MongoDB, which sorts null below every other value,
	 * would place them otherwise than the order asks (and no condition on the
	 * key decides them).  "null_part" is the part that reads them.
	 */
	int			order_key;
	int			order_nkeys;
	bool		order_desc;
	bool		nulls_first;
	int			split_key;
	int			nparts;
	int			part;			/* the find under way, from 0 */
	int			null_part;

	/*
	 * ORDER BY key, _id ("order_by_id"): the entries of equal order keys (a
	 * "tie" group, read whole, across the parts' boundary too: the NULL
	 * entries are one group) are sorted by their fact's _id, read from the
	 * entry's "id" as the _id column reads it ("idconv") and compared as
	 * PostgreSQL compares that column ("id_sort").  "pending" is the first
	 * entry of the next group, read to see the group end.
	 */
	bool		order_by_id;
	IdxRowConv *idconv;
	SortSupportData id_sort;
	MemoryContext tie_cxt;
	MemoryContext pending_cxt;
	struct TieEntry *tie;
	int			tie_n;
	int			tie_pos;
	bson_t		tie_current;	/* static, over the entry returned */
	bson_t	   *pending;

	/*
	 * A group that outgrows a batch of the lookup is read apart, in the order
	 * MongoDB gives its entries sorted on their _id, where that is the _id
	 * column's order ("id_order", route_id_order.c): one find per BSON type
	 * of the ids ("group_finds", merged by "group_head"), once a limit-1 find
	 * ("group_checked") has shown the group has no id of another type.  The
	 * lookup then goes on after the group: "after_op" on the order key's
	 * value {"v": value} ("after_data").
	 */
	IdxIdOrder	id_order;
	bool		group_checked;
	bool		in_group;		/* the group finds are under way */
	mongoc_cursor_t *group_finds[2];
	const bson_t *group_head[2];	/* each find's next entry, or NULL */
	int			group_taken;	/* the find whose head was returned, -1 */
	uint8	   *group_key;		/* the group's entry _id without "id" */
	uint32		group_key_len;
	const char *after_op;
	uint8	   *after_data;
	uint32		after_len;
	uint64		groups_apart;	/* groups read apart, for EXPLAIN */
	MemoryContext batch_cxt;
	int			batch_n;		/* facts of the current batch, in order */
	int			batch_pos;
	char	  **batch_ids;		/* {"v": fact _id} of each entry */
	uint32	   *batch_id_lens;
	const uint8 **batch_entry_ids;	/* each entry's _id document */
	uint32	   *batch_entry_id_lens;
	bson_t	   *batch_docs;		/* the facts, static bsons over copies */
	bool	   *batch_found;
	char	   *last_lookup;	/* the lookup filters of the parts opened in
								 * the latest execution, as JSON */

	/*
	 * Under a LIMIT, the lookup's batches and the fact fetches hold
	 * "batch_target" entries: "first_batch" (IdxPrivFirstBatch, -1: none) at
	 * first, then twice as many each time, up to fetch_size and
	 * fetch_batch_size (batch_target 0: those sizes).
	 */
	int			first_batch;
	int			batch_target;
	uint64		exec_entries;	/* entries read in this execution */
	uint64		next_grow;		/* ... when the lookup's batch is used up */
	int			fetches;		/* fact fetches in this execution */

	/* idxtable.index_consistency = current: the wait at the start */
	bool		sync_waited;
	double		sync_wait_ms;	/* the ping and the wait, for EXPLAIN */

	uint64		entries_read;
	uint64		facts_fetched;
	uint64		entries_skipped;	/* entries their fact did not vouch for */
} IdxIndexScan;

/*
 * route_lookup.c: the lookup.  idx_lookup_split_key chooses the key whose
 * NULL entries are read apart, idx_lookup_open_next_part opens the first
 * part from ix->part on that can match anything (false when none can),
 * idx_lookup_next_entry returns the next entry in the order MongoDB gives
 * them (NULL at the end), valid until the next read.  The batch size of
 * the lookup and its growth under a LIMIT are the lookup's.
 */
extern int	idx_lookup_split_key(IdxIndexScan *ix);
extern bool idx_lookup_open_next_part(IdxScanState *state, IdxIndexScan *ix);
extern const bson_t *idx_lookup_next_entry(IdxScanState *state,
										   IdxIndexScan *ix);
extern int	idx_lookup_batch_size(IdxScanState *state, IdxIndexScan *ix);
extern void idx_lookup_grow_batches(IdxScanState *state, IdxIndexScan *ix);

/*
 * route_lookup.c: a find of entries with the lookup's projection and
 * session (opts: sort, batch size, limit), and the lookup going on after
 * a group of equal keys read apart (idx_lookup_reopen: past the group's
 * key, or with "after_op" NULL, from the next part).
 */
extern mongoc_cursor_t *idx_lookup_find(IdxScanState *state, IdxIndexScan *ix,
										const bson_t *filter, bson_t *opts);
extern void idx_lookup_reopen(IdxScanState *state, IdxIndexScan *ix,
							  const char *after_op, const uint8 *data,
							  uint32 len);

/*
 * route_id_order.c: ORDER BY key, _id.  idx_id_order_begin prepares the
 * scan, idx_id_order_next returns the next entry in (key, _id) order (NULL
 * at the end), idx_id_order_holds says whether entries read from the
 * lookup are still to be returned, idx_id_order_release closes the group
 * finds (rescan, error).
 */
extern void idx_id_order_begin(Relation rel, IdxScanState *state,
							   IdxIndexScan *ix);
extern const bson_t *idx_id_order_next(IdxScanState *state, IdxIndexScan *ix);
extern bool idx_id_order_holds(IdxIndexScan *ix);
extern void idx_id_order_release(IdxScanState *state, IdxIndexScan *ix);

#endif							/* IDXTABLE_ROUTE_SCAN_INT_H */
