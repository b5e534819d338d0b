/*-------------------------------------------------------------------------
 *
 * scan.h
 *		  Pieces shared by plain scans (scan.c) and index scans
 *		  (route_scan.c).
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/scan.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef IDXTABLE_SCAN_H
#define IDXTABLE_SCAN_H

#include "commands/explain.h"
#include "foreign/foreign.h"
#include "nodes/execnodes.h"

#include "core/convert.h"
#include "core/deparse.h"
#include "core/mongoc_compat.h"
#include "core/option.h"
#include "core/pg_compat.h"
#include "core/remote_error.h"

/*
 * Execution state of one scan.
 */
typedef struct IdxScanState
{
	IdxTableInfo *info;
	ForeignServer *server;
	mongoc_client_t *client;

	/* from the plan */
	List	   *remote_conds;
	Index		relid;			/* range table index in remote_conds' Vars */
	Bitmapset  *attrs_used;
	int			id_lookup;
	bool		keep_ids;		/* target of UPDATE/DELETE: rows carry the
								 * handle of their stored _id (rowid.h) */

	IdxRowConv *rowconv;
	List	   *param_states;	/* ExprStates of the plan's fdw_exprs */
	IdxParamValues params;

	/* libmongoc objects, released by release_cursor() */
	mongoc_collection_t *collection;
	mongoc_cursor_t *cursor;
	/* a sorted scan merging two finds (order.h): the second one's cursor,
	 * and the next document of each find, NULL once taken */
	mongoc_cursor_t *cursor2;
	const bson_t *merge_docs[2];
	bool		merge_open[2];	/* the find has documents left */
	bool		pinned;			/* holds a pin on the client */
	bool		holds_client;	/* pins the client from Begin to End */
	const mongoc_read_prefs_t *read_prefs;	/* NULL: the URI's */
	List	   *recheck_ids;	/* _ids a lookup under the collection's
								 * collation asked for (protocol_read.h) */
	MemoryContext scan_cxt;		/* owns this state; its reset releases */
	MemoryContextCallback release_cb;

	/* index scans: the lookup and fact fetch state (route_scan.c) */
	struct IdxIndexScan *index;

	/* scan kinds IDX_SCAN_AGG and IDX_SCAN_INDEX_AGG: their owners' state */
	int			kind;			/* IDX_SCAN_* of the plan */
	struct IdxAggScan *agg;		/* agg_path.c */
	struct IdxIndexAggScan *index_agg;	/* route_agg.c */

	/* plain scans: pushed sort, limit and offset, or NULL (order.h) */
	struct IdxOrderScan *order;

	/* for EXPLAIN ANALYZE */
	char	   *last_filter;	/* the filter of the latest find, as JSON */
	uint64		docs_fetched;
	uint64		round_trips;
	struct IdxShardLog *shard_log;	/* through mongos: the reads' shards
									 * (core/shard_explain.h), or NULL */
} IdxScanState;


/* Destroy a find's cursor and collection handle, clearing the pointers */
extern void idx_release_find(IdxScanState *state, mongoc_cursor_t **cursor,
							 mongoc_collection_t **collection);

/*
 * Next document of a cursor (round trips counted, errors reported naming
 * the collection); NULL at the end, with the cursor destroyed and cleared
 */
extern const bson_t *idx_scan_next_doc(IdxScanState *state,
									   mongoc_cursor_t **cursor,
									   const char *collection,
									   const char *database);

/* Integer list (fdw_private) back to an attribute bitmap */
/* The user a scan reads its table as (a view's owner, else the current user) */
extern Oid	idx_scan_user(ForeignScanState *node);
extern Index idx_scan_rtindex(ForeignScanState *node);

extern Bitmapset *idx_list_to_bitmap(List *list);

/* Evaluate ExprStates into values/nulls in the per-tuple context */
extern void idx_eval_exprs(ForeignScanState *node, List *states,
						   Datum *values, bool *nulls);

/*
 * Append the find options for facts: projection of "attrs_used",
 * batchSize, and "collation" (NULL: the simple collation).
 */
extern void idx_append_find_options(bson_t *opts, const IdxTableInfo *info,
									Bitmapset *attrs_used, int batch_size,
									const bson_t *collation);

/* Reading collection "collection" of "database", for messages */
extern const IdxOp *idx_reading_what(const char *collection,
									 const char *database);

/*
 * route_scan.c: the index part of a scan.  begin sets state->index;
 * release frees libmongoc objects (idempotent, also on error); next
 * returns the next row.
 */
extern void idx_index_scan_begin(ForeignScanState *node, IdxScanState *state,
								 int eflags);
extern TupleTableSlot *idx_index_scan_next(ForeignScanState *node,
										   IdxScanState *state);
extern void idx_index_scan_release(IdxScanState *state);
extern void idx_index_scan_explain(IdxScanState *state, ExplainState *es);

#endif							/* IDXTABLE_SCAN_H */
