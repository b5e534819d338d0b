/*-------------------------------------------------------------------------
 *
 * scan.c
 *		  Execution of idxtable_fdw scans, and their EXPLAIN output: the
 *		  scan callbacks, and the plain scan kind.
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/scan.c
 *
 * The callbacks do what every scan shares (its state, client, parameters,
 * the release of its finds) and hand the rest to the scan kind of the
 * plan through the kind's table of callbacks (scan.h): a plain scan
 * (here), a scan routed through an index table (route_scan.c), an
 * aggregate pipeline (agg_scan.c) or aggregates read from an index table
 * (route_agg_scan.c).  The kinds read through scan_cursor.c and
 * scan_node.c and never call back into this file.
 *
 * A plain scan runs one MongoDB find: the filter built from the pushed-down
 * clauses (with this execution's parameter values), the projection of the
 * needed columns, and batchSize = fetch_size.  Documents are converted to
 * rows one at a time in the per-tuple memory context.
 *
 * libmongoc objects (collection, cursor, bson buffers) are not palloc'd;
 * they are released by EndForeignScan or, if the query fails or is
 * cancelled first, by a reset callback on the scan's memory context, so
 * nothing leaks across aborted queries.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/sysattr.h"
#include "executor/executor.h"
#include "miscadmin.h"
#include "utils/memutils.h"
#include "utils/rel.h"

#include "core/connection.h"
#include "core/convert.h"
#include "core/deparse.h"
#include "core/mongoc_compat.h"
#include "core/option.h"
#include "core/pg_compat.h"
#include "core/protocol_read.h"
#include "core/rowid.h"
#include "core/shard_explain.h"
#include "core/stream.h"
#include "core/xact.h"
#include "idxtable_fdw.h"
#include "order.h"
#include "planner.h"
#include "scan.h"

static void plain_begin(ForeignScanState *node, IdxScanState *state,
						int eflags);
static TupleTableSlot *plain_next(ForeignScanState *node,
								  IdxScanState *state);
static void plain_rescan(IdxScanState *state);
static void explain_plain_scan(IdxScanState *state, ExplainState *es);
static void explain_finds(IdxScanState *state, ExplainState *es);

/* A plain scan: one find, or a pushed sort's finds (order.h) */
static const IdxScanMethods plain_scan_methods = {
	.begin = plain_begin,
	.next = plain_next,
	.rescan = plain_rescan,
	.explain = explain_plain_scan
};

/* The callbacks of each scan kind, by IDX_SCAN_* (planner.h) */
static const IdxScanMethods *const scan_kinds[] = {
	[IDX_SCAN_PLAIN] = &plain_scan_methods,
	[IDX_SCAN_INDEX] = &idx_route_scan_methods,
	[IDX_SCAN_AGG] = &idx_agg_scan_methods,
	[IDX_SCAN_INDEX_AGG] = &idx_route_agg_scan_methods
};

/*
 * Release the cursor and collection handle, and unpin the client.  Safe to
 * call more than once; also runs as a memory context reset callback when
 * the query ends in an error.
 */
static void
release_cursor(void *arg)
{
	IdxScanState *state = (IdxScanState *) arg;
	mongoc_collection_t *shared = NULL; /* the second find uses the first's */

	idx_release_find(state, &state->cursor2, &shared);
	idx_release_find(state, &state->cursor, &state->collection);
	state->merge_open[0] = state->merge_open[1] = false;
	if (state->methods && state->methods->release)
		state->methods->release(state);
	if (state->pinned)
		idx_client_pin(state->client, -1);
	state->pinned = false;
}

/*
 * Release the cursor, then the pin the scan holds on its client from
 * BeginForeignScan on.  Safe to call more than once; also the memory
 * context reset callback, for a query that ends in an error.
 */
static void
release_scan(void *arg)
{
	IdxScanState *state = (IdxScanState *) arg;

	release_cursor(state);
	if (state->holds_client)
		idx_client_pin(state->client, -1);
	state->holds_client = false;
}

/*
 * Integer list back to an attribute bitmap.
 */
Bitmapset *
idx_list_to_bitmap(List *list)
{
	Bitmapset  *result = NULL;
	ListCell   *lc;

	foreach(lc, list)
		result = bms_add_member(result, lfirst_int(lc));
	return result;
}

/*
 * Set up the scan: table description, row converters, client, parameter
 * expressions.  No round trip happens here (the client is cached).
 */
void
idxBeginForeignScan(ForeignScanState *node, int eflags)
{
	ForeignScan *plan = (ForeignScan *) node->ss.ps.plan;
	EState	   *estate = node->ss.ps.state;
	Relation	rel = node->ss.ss_currentRelation;	/* NULL above a scan */
	Oid			relid = exec_rt_fetch(idx_scan_rtindex(node), estate)->relid;
	MemoryContext scan_cxt;
	MemoryContext oldcxt;
	IdxScanState *state;
	int			nparams;

	scan_cxt = AllocSetContextCreate(estate->es_query_cxt,
									 "idxtable_fdw scan",
									 ALLOCSET_SMALL_SIZES);
	oldcxt = MemoryContextSwitchTo(scan_cxt);

	state = palloc0(sizeof(IdxScanState));
	state->scan_cxt = scan_cxt;
	state->release_cb.func = release_scan;
	state->release_cb.arg = state;
	MemoryContextRegisterResetCallback(scan_cxt, &state->release_cb);
	node->fdw_state = state;

	state->kind = intVal(list_nth(plan->fdw_private, IdxPrivScanKind));
	state->info = idx_get_table_info(relid);
	state->remote_conds = (List *) list_nth(plan->fdw_private,
											IdxPrivRemoteConds);
	state->relid = intVal(list_nth(plan->fdw_private, IdxPrivRelid));
	state->attrs_used = idx_list_to_bitmap(list_nth(plan->fdw_private,
												IdxPrivAttrsUsed));
	state->id_lookup = intVal(list_nth(plan->fdw_private, IdxPrivIdLookup));
	state->read_prefs = idx_scan_read_prefs(node);
	state->keep_ids = idx_rowid_scan_wanted(node);
	if (state->kind < 0 || state->kind >= lengthof(scan_kinds))
		elog(ERROR, "unrecognized idxtable_fdw scan kind %d", state->kind);

	/* the leading fdw_exprs are the Params of the pushed-down clauses */
	nparams = intVal(list_nth(plan->fdw_private, IdxPrivNumFilterParams));
	state->params.params = list_copy_head(plan->fdw_exprs, nparams);
	state->params.values = palloc0(sizeof(Datum) * Max(nparams, 1));
	state->params.nulls = palloc0(sizeof(bool) * Max(nparams, 1));
	state->param_states = ExecInitExprList(state->params.params,
										   (PlanState *) node);

	if (!(eflags & EXEC_FLAG_EXPLAIN_ONLY))
	{
		/* rows of the table; a scan above it makes its own (upper.h) */
		if (rel != NULL)
		{
			state->rowconv = idx_row_conv_create(RelationGetDescr(rel),
												 state->info,
												 state->attrs_used);
			/* a row lives until the next Iterate, as its per-row context */
			idx_row_conv_reuse(state->rowconv);
		}
		state->client = idx_get_client_for_rel(relid, idx_scan_user(node),
											   &state->server);

		/*
		 * Pinned until the scan ends: a later lookup of the same client in
		 * this statement (the UPDATE's or DELETE's own, after an ALTER
		 * SERVER or USER MAPPING it took in, or once the client is broken)
		 * must not destroy it before the first cursor pins it.
		 */
		idx_client_pin(state->client, 1);
		state->holds_client = true;
		/* EXPLAIN ANALYZE through mongos notes the shards reached */
		if (estate->es_instrument &&
			idx_client_is_mongos(state->client, state->server->servername))
			state->shard_log = idx_shard_log_start(&state->round_trips,
												   state->client,
												   state->read_prefs,
												   state->info->database,
												   state->info->collection);
	}
	else
		state->server = GetForeignServer(state->info->serverid);

	/*
	 * The kind's own part; it may turn the scan into a plain one
	 * (route_scan.c: an index whose collection is not the index's), whose
	 * callbacks then run.
	 */
	state->methods = scan_kinds[state->kind];
	state->methods->begin(node, state, eflags);
	state->methods = scan_kinds[state->kind];

	MemoryContextSwitchTo(oldcxt);
}

/*
 * Set up a plain scan's part: its pushed sort, limit and offset (order.h).
 */
static void
plain_begin(ForeignScanState *node, IdxScanState *state, int eflags)
{
	ForeignScan *plan = (ForeignScan *) node->ss.ps.plan;

	state->order = idx_order_scan_create(plan->fdw_private);
}

/*
 * The collation of a scan's find: the collection's default for an _id
 * lookup that compares no other strings (its _ids to recheck go to
 * state->recheck_ids), else NULL (simple).
 */
static const bson_t *
scan_collation(IdxScanState *state, const bson_t *filter)
{
	const bson_t *collation;

	list_free_deep(state->recheck_ids);
	state->recheck_ids = NIL;
	if (state->id_lookup < 0)
		return NULL;
	collation = idx_collection_collation(state->client,
										 state->server->servername,
										 state->info->database,
										 state->info->collection);
	if (collation)
		state->recheck_ids = idx_id_lookup_values(filter);
	return state->recheck_ids != NIL ? collation : NULL;
}

/*
 * Start find "sub" of the current part (0, or 1 for the second of two
 * merged finds: order.h) into *cursor.  The filter uses the parameter
 * values of this execution; the filter's JSON is kept for EXPLAIN ANALYZE.
 */
static void
open_find(ForeignScanState *node, IdxScanState *state, int sub,
		  mongoc_cursor_t **cursor)
{
	bson_t		filter = BSON_INITIALIZER;
	bson_t		opts = BSON_INITIALIZER;
	MemoryContext oldcxt;

	idx_eval_exprs(node, state->param_states, state->params.values,
				   state->params.nulls);

	oldcxt = MemoryContextSwitchTo(state->scan_cxt);
	PG_TRY();
	{
		IdxTextBracket bracket;
		const char *field = idx_order_bracket(state->order, state->info, sub,
											  &bracket);

		idx_build_filter_bracketed(&filter, state->remote_conds, state->relid,
								   state->info, &state->params, field,
								   bracket);
		idx_append_find_options(&opts, state->info, state->attrs_used,
								state->order ?
								idx_order_batch_size(state->order,
													 state->info->fetch_size) :
								state->info->fetch_size,
								scan_collation(state, &filter));
		if (state->order)
			idx_order_find(state->order, state->info, sub, &filter, &opts);
		if (state->last_filter)
			pfree(state->last_filter);
		state->last_filter = idx_bson_as_json(&filter);

		if (state->collection == NULL)	/* the second find shares it */
			state->collection =
				mongoc_client_get_collection(state->client,
											 state->info->database,
											 state->info->collection);
		if (!state->pinned)
			idx_client_pin(state->client, 1);
		state->pinned = true;
		idx_xact_append_session(state->client, &opts);
		*cursor = mongoc_collection_find_with_opts(state->collection,
												   &filter, &opts,
												   state->read_prefs);
	}
	PG_FINALLY();
	{
		bson_destroy(&filter);
		bson_destroy(&opts);
	}
	PG_END_TRY();
	MemoryContextSwitchTo(oldcxt);
}

/*
 * Start the current part's find, or its two finds where it merges them
 * (order.h).
 */
static void
open_cursor(ForeignScanState *node, IdxScanState *state)
{
	open_find(node, state, 0, &state->cursor);
	if (state->order && idx_order_merging(state->order))
	{
		open_find(node, state, 1, &state->cursor2);
		state->merge_docs[0] = state->merge_docs[1] = NULL;
		state->merge_open[0] = state->merge_open[1] = true;
	}
}

/*
 * The next document of two merged finds (order.h), or NULL when both
 * have ended.  A document stays valid until its own cursor moves on, so
 * the other find's next one waits in merge_docs until it is taken.
 */
static const bson_t *
next_merged(IdxScanState *state)
{
	mongoc_cursor_t **cursors[2] = {&state->cursor, &state->cursor2};
	const bson_t *doc;
	int			pick;
	int			i;

	if (idx_order_exhausted(state->order))
		return NULL;			/* the limit is reached: the finds end */
	for (i = 0; i < 2; i++)
	{
		if (state->merge_docs[i] == NULL && state->merge_open[i])
		{
			state->merge_docs[i] =
				idx_scan_next_doc_inline(state, cursors[i],
										 state->info->collection,
										 state->info->database, false);
			state->merge_open[i] = state->merge_docs[i] != NULL;
		}
	}
	if (state->merge_docs[0] == NULL && state->merge_docs[1] == NULL)
		return NULL;
	if (state->merge_docs[0] == NULL || state->merge_docs[1] == NULL)
		pick = state->merge_docs[0] == NULL ? 1 : 0;
	else
		pick = idx_order_merge_pick(state->order, state->info,
									state->merge_docs[0], state->merge_docs[1]);
	doc = state->merge_docs[pick];
	state->merge_docs[pick] = NULL;
	return doc;
}

/*
 * Return the next row, or an empty slot at the end: the scan kind's.
 */
TupleTableSlot *
idxIterateForeignScan(ForeignScanState *node)
{
	IdxScanState *state = (IdxScanState *) node->fdw_state;

	CHECK_FOR_INTERRUPTS();
	return state->methods->next(node, state);
}

/*
 * A document of the scan's cursor failed the check its reply deferred to
 * the conversion: the same error, and the same broken client, as a
 * malformed reply.
 */
static void
raise_malformed_document(IdxScanState *state)
{
	mongoc_host_list_t host;

	mongoc_cursor_get_host(state->cursor, &host);
	idx_stream_raise_malformed_document(state->client,
										state->server->servername,
										host.host_and_port);
}

/*
 * The next row of a plain scan, or an empty slot at the end.
 */
static TupleTableSlot *
plain_next(ForeignScanState *node, IdxScanState *state)
{
	TupleTableSlot *slot = node->ss.ss_ScanTupleSlot;
	const bson_t *doc;
	bool		defer_check;
	MemoryContext oldcxt;

	ExecClearTuple(slot);

	if (state->cursor == NULL && state->cursor2 == NULL)
	{
		if (state->collection != NULL)
			return slot;		/* already exhausted, no rescan yet */
		if (state->order && idx_order_exhausted(state->order))
			return slot;		/* LIMIT 0 */
		open_cursor(node, state);
	}

	/*
	 * Where every document taken is converted, the conversion checks it
	 * (deferred from the reply's check, see idx_check_reply()).
	 */
	defer_check = state->recheck_ids == NIL && state->order == NULL;

	/* at the end the collection handle stays, as the "exhausted" marker */
	for (;;)
	{
		if (state->order && idx_order_merging(state->order))
			doc = next_merged(state);
		else
			doc = idx_scan_next_doc_inline(state, &state->cursor,
										   state->info->collection,
										   state->info->database,
										   defer_check);
		if (doc == NULL)
		{
			/* a sorted scan reads the NULL keys by another find */
			if (state->order == NULL || !idx_order_next_phase(state->order))
				return slot;
			release_cursor(state);
			open_cursor(node, state);
			continue;
		}
		if (state->recheck_ids != NIL &&
			!idx_doc_id_among(doc, state->recheck_ids))
			continue;
		if (state->order == NULL || !idx_order_skip_row(state->order))
			break;
		state->docs_fetched++;	/* read, and skipped for OFFSET */
	}

	state->docs_fetched++;
	oldcxt = MemoryContextSwitchTo(node->ss.ps.ps_ExprContext->ecxt_per_tuple_memory);
	if (!defer_check)
		idx_document_to_row(state->rowconv, doc, slot->tts_values,
							slot->tts_isnull);
	else if (!idx_document_to_row_checked(state->rowconv, doc,
										  slot->tts_values,
										  slot->tts_isnull))
		raise_malformed_document(state);
	ExecStoreVirtualTuple(slot);
	if (state->keep_ids)
		idx_rowid_note(node, slot, state->info->id_attnum, doc, "_id");
	MemoryContextSwitchTo(oldcxt);
	return slot;
}

/*
 * Restart the scan: the next Iterate runs a new find (parameters may have
 * changed).
 */
void
idxReScanForeignScan(ForeignScanState *node)
{
	IdxScanState *state = (IdxScanState *) node->fdw_state;

	release_cursor(state);
	if (state->methods->rescan)
		state->methods->rescan(state);
}

/*
 * Restart a plain scan's pushed sort, limit and offset from their start.
 */
static void
plain_rescan(IdxScanState *state)
{
	if (state->order)
		idx_order_rescan(state->order);
}

/*
 * End the scan and release everything.
 */
void
idxEndForeignScan(ForeignScanState *node)
{
	IdxScanState *state = (IdxScanState *) node->fdw_state;

	if (state == NULL)
		return;
	release_scan(state);
	if (state->methods->end)
		state->methods->end(state);
}

/*
 * EXPLAIN: the scan kind's properties; with ANALYZE through mongos the
 * shards its reads reached.
 */
void
idxExplainForeignScan(ForeignScanState *node, ExplainState *es)
{
	IdxScanState *state = (IdxScanState *) node->fdw_state;

	state->methods->explain(state, es);

	/* through mongos: the shards the scan's reads reached */
	if (es->analyze && state->shard_log)
		idx_shard_log_explain(state->shard_log, es);
}

/*
 * EXPLAIN VERBOSE of a sorted scan on a text key: each find it sends, in
 * the order it sends them, as {filter, sort, limit} (the limit as the
 * first find of its part has it).  Parameters show as placeholders: the
 * values of the latest execution lived in a per-tuple context, since
 * reset.
 */
static void
explain_finds(IdxScanState *state, ExplainState *es)
{
	IdxOrderScan probe = *state->order;
	IdxParamValues params = state->params;
	int			sub;

	params.placeholders = true;
	probe.seen = 0;
	for (probe.phase = 0;
		 idx_order_find_label(&probe, probe.phase, 0) != NULL;
		 probe.phase++)
	{
		int			nfinds = idx_order_merging(&probe) ? 2 : 1;

		for (sub = 0; sub < nfinds; sub++)
		{
			const char *label = idx_order_find_label(&probe, probe.phase, sub);
			bson_t		filter = BSON_INITIALIZER;
			bson_t		opts = BSON_INITIALIZER;
			bson_t		find = BSON_INITIALIZER;
			bson_iter_t it;
			IdxTextBracket bracket;
			const char *field = idx_order_bracket(&probe, state->info, sub,
												  &bracket);

			idx_build_filter_bracketed(&filter, state->remote_conds,
									   state->relid, state->info, &params,
									   field, bracket);
			idx_order_find(&probe, state->info, sub, &filter, &opts);
			idx_check_append(BSON_APPEND_DOCUMENT(&find, "filter", &filter));
			if (bson_iter_init_find(&it, &opts, "sort"))
				idx_check_append(bson_append_iter(&find, "sort", -1, &it));
			if (bson_iter_init_find(&it, &opts, "limit"))
				idx_check_append(bson_append_iter(&find, "limit", -1, &it));
			ExplainPropertyText(label, idx_bson_as_json(&find), es);
			bson_destroy(&filter);
			bson_destroy(&opts);
			bson_destroy(&find);
		}
	}
}

/*
 * EXPLAIN of a plain scan: the collection; with VERBOSE the filter and
 * projection as MongoDB JSON; with ANALYZE documents fetched and round
 * trips.
 */
static void
explain_plain_scan(IdxScanState *state, ExplainState *es)
{
	char	   *ns = psprintf("%s.%s", state->info->database,
							  state->info->collection);

	ExplainPropertyText("Collection", ns, es);
	if (state->id_lookup >= 0)
		ExplainPropertyText("Access", "_id lookup", es);

	if (es->verbose)
	{
		bson_t		doc = BSON_INITIALIZER;
		char	   *json;

		if (state->last_filter &&
			!(state->order && idx_order_text_sort(state->order)))
			json = state->last_filter;
		else
		{
			IdxParamValues placeholders = state->params;

			/* a text sort's finds follow: the filter they all restrict */
			placeholders.placeholders = true;
			idx_build_filter(&doc, state->remote_conds, state->relid,
							 state->info, &placeholders);
			json = idx_bson_as_json(&doc);
			bson_reinit(&doc);
		}
		ExplainPropertyText("MongoDB Filter", json, es);

		idx_build_projection(&doc, state->info, state->attrs_used);
		ExplainPropertyText("MongoDB Projection", idx_bson_as_json(&doc), es);
		bson_destroy(&doc);
		if (state->order)
			idx_order_explain(state->order, state->info, es);
		if (state->order && idx_order_text_sort(state->order))
			explain_finds(state, es);
	}

	if (es->analyze)
	{
		ExplainPropertyUInteger("Documents Fetched", NULL,
								state->docs_fetched, es);
		ExplainPropertyUInteger("Round Trips", NULL, state->round_trips, es);
	}
}
