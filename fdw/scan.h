/*-------------------------------------------------------------------------
 *
 * scan.h
 *		  The execution state of a scan, the callbacks of each scan kind
 *		  (scan.c dispatches to them), and the pieces every kind shares
 *		  (scan_cursor.c, scan_node.c).
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

#include "core/connection.h"
#include "core/convert.h"
#include "core/deparse.h"
#include "core/mongoc_compat.h"
#include "core/option.h"
#include "core/pg_compat.h"
#include "core/remote_error.h"
#include "core/stream.h"

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
	const struct IdxScanMethods *methods;	/* the kind's callbacks */
	struct IdxAggScan *agg;		/* agg_scan.c */
	struct IdxIndexAggScan *index_agg;	/* route_agg_scan.c */

	/* plain scans: pushed sort, limit and offset, or NULL (order.h) */
	struct IdxOrderScan *order;

	/* for EXPLAIN ANALYZE */
	char	   *last_filter;	/* the filter of the latest find, as JSON */
	uint64		docs_fetched;
	uint64		round_trips;
	struct IdxShardLog *shard_log;	/* through mongos: the reads' shards
									 * (core/shard_explain.h), or NULL */
} IdxScanState;

/*
 * The kinds of scans (planner.h: IDX_SCAN_*), each one's callbacks, which
 * scan.c calls after its own part: begin sets the kind's state up (and
 * may turn the scan into a plain one, state->kind IDX_SCAN_PLAIN, whose
 * callbacks then run); next returns the next row, or an empty slot at the
 * end; release frees the kind's libmongoc objects (idempotent, also on
 * error and before a rescan); rescan forgets the execution; end frees the
 * rest; explain adds the kind's properties.  release, rescan and end may
 * be NULL: nothing to do.
 */
typedef struct IdxScanMethods
{
	void		(*begin) (ForeignScanState *node, IdxScanState *state,
						  int eflags);
	TupleTableSlot *(*next) (ForeignScanState *node, IdxScanState *state);
	void		(*release) (IdxScanState *state);
	void		(*rescan) (IdxScanState *state);
	void		(*end) (IdxScanState *state);
	void		(*explain) (IdxScanState *state, ExplainState *es);
} IdxScanMethods;

/* IDX_SCAN_INDEX: routed through an index table (route_scan.c) */
extern const IdxScanMethods idx_route_scan_methods;
/* IDX_SCAN_AGG: an aggregate pipeline on the facts (agg_scan.c) */
extern const IdxScanMethods idx_agg_scan_methods;
/* IDX_SCAN_INDEX_AGG: aggregates read from an index table (route_agg_scan.c) */
extern const IdxScanMethods idx_route_agg_scan_methods;

/*
 * scan_cursor.c: the finds and cursors every scan kind reads through.
 */

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

/* The end of a cursor: its error reported, else NULL (see below) */
extern const bson_t *idx_scan_cursor_ended(IdxScanState *state,
										   mongoc_cursor_t **cursor,
										   const char *collection,
										   const char *database);

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
 * idx_scan_next_doc(); with "defer_check", the documents of the batches
 * read are left to the caller to check before anything reads them
 * (idx_document_to_row_checked(), see idx_check_reply()).  The stream is
 * told so only while mongoc_cursor_next() runs, which never throws.
 * Inline: the plain scan (scan.c) calls it once a row.
 */
static inline const bson_t *
idx_scan_next_doc_inline(IdxScanState *state, mongoc_cursor_t **cursor,
						 const char *collection, const char *database,
						 bool defer_check)
{
	const bson_t *doc;
	uint64	   *previous = idx_count_round_trips(&state->round_trips);
	bool		found;

	idx_stream_defer_batch_check(defer_check);
	found = mongoc_cursor_next(*cursor, &doc);
	idx_stream_defer_batch_check(false);
	idx_count_round_trips(previous);
	if (found)
		return doc;
	return idx_scan_cursor_ended(state, cursor, collection, database);
}

/*
 * scan_node.c: what every scan kind reads from its executor node.
 */

/* The user a scan reads its table as (a view's owner, else the current user) */
extern Oid	idx_scan_user(ForeignScanState *node);
/* The range table index of the table read (also above it: upper paths) */
extern Index idx_scan_rtindex(ForeignScanState *node);

/* Evaluate ExprStates into values/nulls in the per-tuple context */
extern void idx_eval_exprs(ForeignScanState *node, List *states,
						   Datum *values, bool *nulls);

/*
 * scan.c
 */

/* Integer list (fdw_private) back to an attribute bitmap */
extern Bitmapset *idx_list_to_bitmap(List *list);

#endif							/* IDXTABLE_SCAN_H */
