/*-------------------------------------------------------------------------
 *
 * route_agg_scan.c
 *		  Execution of aggregates answered from an index collection (scan
 *		  kind IDX_SCAN_INDEX_AGG; planned by route_agg.c, which says when
 *		  the entries give them exactly): a "count" of the entries the
 *		  conditions select (an aggregate with $count inside a MongoDB
 *		  transaction), an aggregate with $group for count(*) GROUP BY a key,
 *		  a find sorted on the key with limit 1 for its min() and max().
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/route_agg_scan.c
 *
 * Every command runs after the wait of idxtable.index_consistency =
 * current (sync_wait.h).  Where the index cannot be read when the scan
 * starts (no longer valid, or the server writes "ordered"), a count reads
 * the facts with the pushed-down filter instead when that is exact; the
 * other aggregates fail with 55000 and drop the cached plans.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "executor/executor.h"
#include "nodes/nodeFuncs.h"
#include "utils/array.h"
#include "utils/lsyscache.h"
#include "utils/plancache.h"

#include "core/connection.h"
#include "core/handle.h"
#include "core/pg_compat.h"
#include "core/protocol_read.h"
#include "core/remote_error.h"
#include "core/xact.h"
#include "index/index_entry.h"
#include "route_agg.h"
#include "route_path.h"
#include "scan.h"
#include "sync/sync_wait.h"

/*
 * GROUP BY, min() and max(): the converter of the key column's values, and
 * the index (only its entries can give them).
 */
static void
init_key_conv(ForeignScan *plan, IdxScanState *state, IdxIndexAggScan *ia)
{
	ListCell   *lc,
			   *lc2;

	if (ia->def == NULL)
	{
		ResetPlanCache();
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("cannot aggregate the rows of foreign table \"%s\" from index table \"%s\"",
						state->info->relname, ia->name),
				 errdetail("The index table cannot be read now: it is no longer valid, it is known to be behind the writes made outside PostgreSQL, or the table's writes are in consistency mode '%s'.",
						   idx_consistency_name(IDX_CONSISTENCY_ORDERED)),
				 errhint("Run the query again, or with idxtable.enable_aggregate_pushdown off.")));
	}
	forboth(lc, ia->outputs, lc2, plan->fdw_scan_tlist)
	{
		Var		   *var = (Var *) lfirst_node(TargetEntry, lc2)->expr;

		if (lfirst_int(lc) == AGG_OUT_MIN || lfirst_int(lc) == AGG_OUT_MAX)
			var = (Var *) linitial_node(TargetEntry,
										((Aggref *) var)->args)->expr;
		else if (lfirst_int(lc) != AGG_OUT_KEY)
			continue;
		idx_conv_init(&ia->keyconv,
					  get_attname(state->info->relid, var->varattno, false),
					  var->vartype, var->vartypmod);
	}
}

/*
 * Executor start: the index (if it is still valid, and the table's writes
 * keep its entries exact), the values, and with
 * idxtable.index_consistency = current the wait for the applier.
 */
static void
idx_index_agg_scan_begin(ForeignScanState *node, IdxScanState *state, int eflags)
{
	ForeignScan *plan = (ForeignScan *) node->ss.ps.plan;
	IdxIndexAggScan *ia = palloc0(sizeof(IdxIndexAggScan));
	int			nexprs = list_length(plan->fdw_exprs);
	char	   *name = strVal(list_nth(plan->fdw_private, IdxAggPrivIndexName));

	ia->conds = list_nth(plan->fdw_private, IdxAggPrivConds);
	ia->cond_text = strVal(list_nth(plan->fdw_private, IdxAggPrivCondText));
	ia->outputs = list_nth(plan->fdw_private, IdxAggPrivOutputs);
	ia->facts_exact = intVal(list_nth(plan->fdw_private, IdxAggPrivFactsExact));
	ia->group_key = intVal(list_nth(plan->fdw_private, IdxAggPrivGroupKey));
	ia->minmax_key = intVal(list_nth(plan->fdw_private, IdxAggPrivMinMaxKey));
	ia->value_exprs = plan->fdw_exprs;
	ia->value_states = ExecInitExprList(plan->fdw_exprs, (PlanState *) node);
	ia->values = palloc0(sizeof(Datum) * Max(nexprs, 1));
	ia->nulls = palloc0(sizeof(bool) * Max(nexprs, 1));
	ia->name = name;
	state->index_agg = ia;
	if (eflags & EXEC_FLAG_EXPLAIN_ONLY)
		return;					/* EXPLAIN talks to no server */

	/*
	 * An index that is gone, not the table's, or known to be behind: a
	 * count reads the facts instead
	 */
	ia->def = idx_agg_index_named(idx_valid_indexes(state->info->relid,
											idx_scan_user(node)), name);
	if (ia->def != NULL &&
		idx_xact_mode(state->info, state->client,
					  state->server->servername) == IDX_CONSISTENCY_ORDERED)
		ia->def = NULL;			/* entries may be orphans */
	if (ia->def != NULL)
		ia->sync_waited = idx_sync_wait_for_read(ia->def, state->client,
												 state->server->servername,
												 &ia->sync_wait_ms);
	/* what it waited for is on the primary (see idx_index_scan_begin) */
	if (ia->def != NULL && ia->sync_waited)
		state->read_prefs = idx_primary_read_prefs();
	if (ia->group_key >= 0 || ia->minmax_key >= 0)
		init_key_conv(plan, state, ia);
}

/*
 * Append one condition's operator and value to the key's sub-document.
 * Returns false when it can match nothing (a NULL value, an empty list).
 */
static bool
append_cond(IdxIndexAggScan *ia, bson_t *child, const IdxIndexKey *key,
			IdxCondOp op, int exprpos)
{
	static const char *const ops[] = {"$eq", "$in", "$eq", "$lt", "$lte", "$gt", "$gte"};

	if (op == ICOND_NULL)
	{
		idx_check_append(BSON_APPEND_NULL(child, "$eq"));
		return true;
	}
	if (ia->nulls[exprpos])
		return false;
	if (op == ICOND_IN)
		return idx_append_key_in(child, key, ia->values[exprpos]);
	idx_append_key_value(child, ops[op],
						 idx_key_lookup_datum(key, ia->values[exprpos]),
						 OidIsValid(key->sortcoll) ? TEXTOID :
						 exprType(list_nth(ia->value_exprs, exprpos)), false);
	return true;
}

/*
 * Build the count's filter {"_id.k0": {$eq: v}, "_id.k1": {$gte: a, $lt:
 * b}} from the conditions and this execution's values, in key order, as
 * the lookup of a routed scan does.  Returns false, leaving "filter"
 * unfinished, when the conditions can match nothing.
 */
static bool
build_count_filter(IdxIndexAggScan *ia, bson_t *filter)
{
	int			k;
	int			done = 0;

	for (k = 0; done < list_length(ia->conds); k++)
	{
		bson_t		child;
		bool		any = false;
		ListCell   *lc;

		foreach(lc, ia->conds)
		{
			List	   *cond = lfirst(lc);

			if (linitial_int(cond) != k)
				continue;
			if (!any)
				idx_check_append(BSON_APPEND_DOCUMENT_BEGIN(filter,
															psprintf("_id.%s", idx_key_field(k)),
															&child));
			any = true;
			done++;
			if (!append_cond(ia, &child, &ia->def->keys[k], lsecond_int(cond),
							 lthird_int(cond)))
				return false;
		}
		if (any)
			idx_check_append(bson_append_document_end(filter, &child));
	}
	return true;
}

/*
 * Run "command" on "database" as a read (the scan's read preference, in
 * the session of an open MongoDB transaction); the reply is a heap copy
 * owned by the current memory context through *handle.
 */
static bson_t *
run_read(IdxScanState *state, const char *database, const bson_t *command,
		 const IdxOp *what, IdxHandle **handle)
{
	bson_t		opts = BSON_INITIALIZER;
	bson_t		reply;
	bson_t	   *owned;
	bson_error_t error;
	bool		ok;
	uint64	   *previous;

	idx_xact_append_session(state->client, &opts);
	previous = idx_count_round_trips(&state->round_trips);
	ok = mongoc_client_read_command_with_opts(state->client, database,
											  command, state->read_prefs,
											  &opts, &reply, &error);
	idx_count_round_trips(previous);
	bson_destroy(&opts);
	if (!ok)
	{
		owned = idx_own_reply(&reply);
		idx_merge_reply_error(&error, owned);
		idx_report_error(&error, state->server->servername, what);
	}
	owned = bson_copy(&reply);
	bson_destroy(&reply);
	*handle = idx_own_bson(owned);
	return owned;
}

/*
 * The number a count reply holds: "n" of a count command, or "n" of the
 * first document of an aggregate's first batch (none: 0).
 */
static int64
reply_count(const bson_t *reply, bool aggregate, const IdxOp *what,
			const char *servername)
{
	bson_iter_t iter;

	if (aggregate)
	{
		bson_iter_t batch;

		if (!bson_iter_init_find(&iter, reply, "cursor") ||
			!BSON_ITER_HOLDS_DOCUMENT(&iter) ||
			!bson_iter_recurse(&iter, &batch) ||
			!bson_iter_find(&batch, "firstBatch") ||
			!BSON_ITER_HOLDS_ARRAY(&batch) ||
			!bson_iter_recurse(&batch, &iter))
			goto bad;
		if (!bson_iter_next(&iter))
			return 0;			/* $count of nothing gives no document */
		if (!BSON_ITER_HOLDS_DOCUMENT(&iter) ||
			!bson_iter_recurse(&iter, &batch) ||
			!bson_iter_find(&batch, "n"))
			goto bad;
		iter = batch;
	}
	else if (!bson_iter_init_find(&iter, reply, "n"))
		goto bad;
	if ((BSON_ITER_HOLDS_INT32(&iter) || BSON_ITER_HOLDS_INT64(&iter)) &&
		bson_iter_as_int64(&iter) >= 0)
		return bson_iter_as_int64(&iter);
bad:
	ereport(ERROR,
			(errcode(ERRCODE_FDW_INVALID_DATA_TYPE),
			 errmsg("MongoDB server \"%s\" sent a reply without a count",
					servername),
			 idx_op_context(what)));
	return 0;					/* keep compiler quiet */
}

/*
 * Count the documents of "collection" matching "filter": a count command,
 * or inside a MongoDB transaction (which refuses count) an aggregate with
 * $match and $count.
 */
static int64
count_documents(IdxScanState *state, const char *database,
				const char *collection, const bson_t *filter)
{
	bson_t	   *command = bson_new();
	IdxHandle  *owned = idx_own_bson(command);
	bool		aggregate = idx_xact_client_busy(state->client);
	const IdxOp *what = idx_op(IDX_OP_COUNT, collection, database);
	bson_t	   *reply;
	IdxHandle  *reply_owned;
	int64		n;

	state->index_agg->ran = true;
	if (aggregate)
	{
		bson_t		pipeline,
					stage,
					child;

		idx_check_append(BSON_APPEND_UTF8(command, "aggregate", collection));
		idx_check_append(IDX_BSON_APPEND_ARRAY_BEGIN(command, "pipeline", &pipeline));
		idx_check_append(BSON_APPEND_DOCUMENT_BEGIN(&pipeline, "0", &stage));
		idx_check_append(BSON_APPEND_DOCUMENT(&stage, "$match", filter));
		idx_check_append(bson_append_document_end(&pipeline, &stage));
		idx_check_append(BSON_APPEND_DOCUMENT_BEGIN(&pipeline, "1", &stage));
		idx_check_append(BSON_APPEND_UTF8(&stage, "$count", "n"));
		idx_check_append(bson_append_document_end(&pipeline, &stage));
		idx_check_append(bson_append_array_end(command, &pipeline));
		idx_check_append(BSON_APPEND_DOCUMENT_BEGIN(command, "cursor", &child));
		idx_check_append(bson_append_document_end(command, &child));
	}
	else
	{
		idx_check_append(BSON_APPEND_UTF8(command, "count", collection));
		idx_check_append(BSON_APPEND_DOCUMENT(command, "query", filter));
	}
	reply = run_read(state, database, command, what, &reply_owned);
	n = reply_count(reply, aggregate, what, state->server->servername);
	idx_release(reply_owned);
	idx_release(owned);
	return n;
}

/*
 * Is a parameter value (an array: each element) exact in BSON?
 */
static bool
param_is_exact(Oid type, Datum value)
{
	Oid			elemtype = get_element_type(type);
	ArrayType  *arr;
	Datum	   *elems;
	bool	   *nulls;
	int			nelems,
				i;
	int16		elmlen;
	bool		elmbyval;
	char		elmalign;

	if (!OidIsValid(elemtype))
		return idx_datum_is_exact_in_bson(value, type);
	arr = DatumGetArrayTypeP(value);
	get_typlenbyvalalign(elemtype, &elmlen, &elmbyval, &elmalign);
	deconstruct_array(arr, elemtype, elmlen, elmbyval, elmalign,
					  &elems, &nulls, &nelems);
	for (i = 0; i < nelems; i++)
	{
		if (!nulls[i] && !idx_datum_is_exact_in_bson(elems[i], elemtype))
			return false;
	}
	return true;
}

/*
 * Before counting the facts instead of the entries: is that exact?  Only
 * if the plan says so and this execution's parameter values are exact in
 * BSON (an inexact one makes the pushed-down filter match everything).
 * Otherwise the query fails, and cached plans are dropped.
 */
static void
check_facts_countable(IdxScanState *state, IdxIndexAggScan *ia)
{
	bool		exact = ia->facts_exact;
	ListCell   *lc;
	int			i = 0;

	foreach(lc, state->params.params)
	{
		if (!state->params.nulls[i] &&
			!param_is_exact(exprType(lfirst(lc)), state->params.values[i]))
			exact = false;
		i++;
	}
	if (exact)
		return;
	ResetPlanCache();
	ereport(ERROR,
			(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
			 errmsg("cannot count the rows of foreign table \"%s\" through index table \"%s\"",
					state->info->relname, ia->name),
			 errdetail("The index table cannot be read now, and the conditions pushed down to the facts do not select the rows exactly."),
			 errhint("Run the query again, or with idxtable.enable_aggregate_pushdown off.")));
}

/*
 * Run this execution's count: on the index collection, or (no usable
 * index) on the facts with the pushed-down filter.
 */
static int64
run_count(ForeignScanState *node, IdxScanState *state, IdxIndexAggScan *ia)
{
	bson_t	   *filter = bson_new();
	IdxHandle  *owned = idx_own_bson(filter);
	int64		n = 0;

	idx_eval_exprs(node, ia->value_states, ia->values, ia->nulls);
	ia->in_txn = idx_xact_client_busy(state->client);
	if (ia->def == NULL)
	{
		idx_eval_exprs(node, state->param_states, state->params.values,
					   state->params.nulls);
		check_facts_countable(state, ia);
		idx_build_filter(filter, state->remote_conds, state->relid,
						 state->info, &state->params);
		ia->last_filter = idx_bson_as_json(filter);
		n = count_documents(state, state->info->database,
							state->info->collection, filter);
	}
	else if (build_count_filter(ia, filter))
	{
		ia->last_filter = idx_bson_as_json(filter);
		n = count_documents(state, ia->def->database, ia->def->collection,
							filter);
	}
	else
		ia->last_filter = NULL; /* matches nothing: no round trip */
	idx_release(owned);
	return n;
}

/*
 * GROUP BY: send the aggregate {$match: <filter>}, {$group: {_id: <key>,
 * n: {$sum: 1}[, o: {$first: <original text>}]}} on the index collection
 * (a sort-key key groups by its stored form, byte equality as the
 * column's, and gives back the text it ends with).  False when the
 * conditions can match nothing.
 */
static bool
open_group_cursor(ForeignScanState *node, IdxScanState *state,
				  IdxIndexAggScan *ia)
{
	const IdxIndexKey *key = &ia->def->keys[ia->group_key];
	bson_t	   *filter = bson_new();
	IdxHandle  *owned_filter = idx_own_bson(filter);
	bson_t	   *pipeline = bson_new();
	IdxHandle  *owned_pipeline = idx_own_bson(pipeline);
	bson_t	   *opts = bson_new();
	IdxHandle  *owned_opts = idx_own_bson(opts);
	bson_t		stage,
				child,
				group;

	idx_eval_exprs(node, ia->value_states, ia->values, ia->nulls);
	if (!build_count_filter(ia, filter))
		return false;
	ia->last_filter = idx_bson_as_json(filter);
	idx_check_append(BSON_APPEND_DOCUMENT_BEGIN(pipeline, "0", &stage));
	idx_check_append(BSON_APPEND_DOCUMENT(&stage, "$match", filter));
	idx_check_append(bson_append_document_end(pipeline, &stage));
	idx_check_append(BSON_APPEND_DOCUMENT_BEGIN(pipeline, "1", &stage));
	idx_check_append(BSON_APPEND_DOCUMENT_BEGIN(&stage, "$group", &group));
	idx_check_append(BSON_APPEND_UTF8(&group, "_id",
									  psprintf("$_id.%s", idx_key_field(ia->group_key))));
	idx_check_append(BSON_APPEND_DOCUMENT_BEGIN(&group, "n", &child));
	idx_check_append(BSON_APPEND_INT32(&child, "$sum", 1));
	idx_check_append(bson_append_document_end(&group, &child));
	if (OidIsValid(key->sortcoll))
	{
		idx_check_append(BSON_APPEND_DOCUMENT_BEGIN(&group, "o", &child));
		idx_check_append(BSON_APPEND_UTF8(&child, "$first",
										  psprintf("$%s", idx_key_original_path(ia->group_key))));
		idx_check_append(bson_append_document_end(&group, &child));
	}
	idx_check_append(bson_append_document_end(&stage, &group));
	idx_check_append(bson_append_document_end(pipeline, &stage));
	ia->last_pipeline = idx_bson_as_json(pipeline);
	idx_check_append(BSON_APPEND_INT32(opts, "batchSize",
									   state->info->fetch_size));

	ia->in_txn = idx_xact_client_busy(state->client);
	idx_xact_append_session(state->client, opts);
	state->collection = mongoc_client_get_collection(state->client,
													 ia->def->database,
													 ia->def->collection);
	if (!state->pinned)
		idx_client_pin(state->client, 1);
	state->pinned = true;
	ia->ran = true;
	state->cursor = mongoc_collection_aggregate(state->collection,
												MONGOC_QUERY_NONE, pipeline,
												opts, state->read_prefs);
	idx_release(owned_opts);
	idx_release(owned_pipeline);
	idx_release(owned_filter);
	return true;
}

/*
 * min() (which 0) or max() (1) of the min/max key: a find on the index
 * collection with the conditions and a non-null key, sorted on the key,
 * limit 1.  A sort-key key gives back the text its entries end with.
 */
static void
find_extreme(IdxScanState *state, IdxIndexAggScan *ia, int which)
{
	int			k = ia->minmax_key;
	char	   *field = psprintf("_id.%s", idx_key_field(k));
	bool		sortkey = OidIsValid(ia->def->keys[k].sortcoll);
	char	   *value_path = sortkey ? idx_key_original_path(k) : field;
	bson_t	   *cond = bson_new();
	IdxHandle  *owned_cond = idx_own_bson(cond);
	bson_t	   *filter = bson_new();
	IdxHandle  *owned_filter = idx_own_bson(filter);
	bson_t	   *opts = bson_new();
	IdxHandle  *owned_opts = idx_own_bson(opts);
	bson_t		arr,
				elem,
				child;
	const bson_t *doc;
	bson_iter_t iter;

	ia->minmax_null[which] = true;
	if (!build_count_filter(ia, cond))
		return;
	idx_check_append(IDX_BSON_APPEND_ARRAY_BEGIN(filter, "$and", &arr));
	idx_check_append(BSON_APPEND_DOCUMENT(&arr, "0", cond));
	idx_check_append(BSON_APPEND_DOCUMENT_BEGIN(&arr, "1", &elem));
	idx_check_append(BSON_APPEND_DOCUMENT_BEGIN(&elem, field, &child));
	idx_check_append(BSON_APPEND_NULL(&child, "$ne"));
	idx_check_append(bson_append_document_end(&elem, &child));
	idx_check_append(bson_append_document_end(&arr, &elem));
	idx_check_append(bson_append_array_end(filter, &arr));
	idx_check_append(BSON_APPEND_DOCUMENT_BEGIN(opts, "sort", &child));
	idx_check_append(BSON_APPEND_INT32(&child, field, which == 0 ? 1 : -1));
	idx_check_append(bson_append_document_end(opts, &child));
	idx_check_append(BSON_APPEND_DOCUMENT_BEGIN(opts, "projection", &child));
	idx_check_append(BSON_APPEND_INT32(&child, value_path, 1));
	idx_check_append(bson_append_document_end(opts, &child));
	idx_check_append(BSON_APPEND_INT64(opts, "limit", 1));
	idx_xact_append_session(state->client, opts);
	if (ia->last_filter == NULL)
		ia->last_filter = idx_bson_as_json(filter);

	state->collection = mongoc_client_get_collection(state->client,
													 ia->def->database,
													 ia->def->collection);
	if (!state->pinned)
		idx_client_pin(state->client, 1);
	state->pinned = true;
	ia->ran = true;
	state->cursor = mongoc_collection_find_with_opts(state->collection, filter,
													 opts, state->read_prefs);
	doc = idx_scan_next_doc(state, &state->cursor, ia->def->collection,
							ia->def->database);
	if (doc != NULL && bson_iter_init(&iter, doc) &&
		bson_iter_find_descendant(&iter, value_path, &iter))
	{
		IdxConvSource src = {ia->def->collection, NULL, true};

		ia->minmax[which] = idx_bson_to_datum(&iter, &ia->keyconv, &src,
											  &ia->minmax_null[which]);
	}
	idx_release_find(state, &state->cursor, &state->collection);
	idx_release(owned_opts);
	idx_release(owned_filter);
	idx_release(owned_cond);
}

/*
 * The count of a group document ("n", a non-negative integer).
 */
static int64
group_count(const bson_t *doc, IdxScanState *state, IdxIndexAggScan *ia)
{
	bson_iter_t iter;

	if (bson_iter_init_find(&iter, doc, "n") &&
		(BSON_ITER_HOLDS_INT32(&iter) || BSON_ITER_HOLDS_INT64(&iter)) &&
		bson_iter_as_int64(&iter) > 0)
		return bson_iter_as_int64(&iter);
	ereport(ERROR,
			(errcode(ERRCODE_FDW_INVALID_DATA_TYPE),
			 errmsg("MongoDB server \"%s\" sent a group without a count while reading index collection \"%s\"",
					state->server->servername, ia->def->collection)));
	return 0;					/* keep compiler quiet */
}

/*
 * Fill the slot's columns: the count, the group key of "doc" (NULL: no
 * GROUP BY) or a constant.
 */
static void
fill_row(ForeignScanState *node, IdxScanState *state, IdxIndexAggScan *ia,
		 const bson_t *doc)
{
	TupleTableSlot *slot = node->ss.ss_ScanTupleSlot;
	ForeignScan *plan = (ForeignScan *) node->ss.ps.plan;
	ListCell   *lc,
			   *lc2;
	int			i = 0;

	forboth(lc, ia->outputs, lc2, plan->fdw_scan_tlist)
	{
		Expr	   *expr = lfirst_node(TargetEntry, lc2)->expr;

		slot->tts_isnull[i] = false;
		if (lfirst_int(lc) == AGG_OUT_COUNT)
			slot->tts_values[i] = Int64GetDatum(doc ? group_count(doc, state, ia)
												: ia->count);
		else if (lfirst_int(lc) == AGG_OUT_MIN || lfirst_int(lc) == AGG_OUT_MAX)
		{
			int			which = lfirst_int(lc) == AGG_OUT_MAX;

			slot->tts_values[i] = ia->minmax[which];
			slot->tts_isnull[i] = ia->minmax_null[which];
		}
		else if (lfirst_int(lc) == AGG_OUT_KEY)
		{
			IdxConvSource src = {ia->def->collection, NULL, true};
			bson_iter_t iter;
			bool		sortkey = OidIsValid(ia->def->keys[ia->group_key].sortcoll);

			/* a NULL key groups NULLs: no original text then */
			if (!bson_iter_init_find(&iter, doc, "_id") ||
				BSON_ITER_HOLDS_NULL(&iter) ||
				(sortkey && !bson_iter_init_find(&iter, doc, "o")))
				slot->tts_isnull[i] = true;
			else
				slot->tts_values[i] = idx_bson_to_datum(&iter, &ia->keyconv,
														&src,
														&slot->tts_isnull[i]);
		}
		else
		{
			slot->tts_values[i] = ((Const *) expr)->constvalue;
			slot->tts_isnull[i] = ((Const *) expr)->constisnull;
		}
		i++;
	}
	ExecStoreVirtualTuple(slot);
}

/*
 * The next row: the one row of counts, or the next group.
 */
static TupleTableSlot *
idx_index_agg_scan_next(ForeignScanState *node, IdxScanState *state)
{
	IdxIndexAggScan *ia = state->index_agg;
	TupleTableSlot *slot = node->ss.ss_ScanTupleSlot;
	MemoryContext oldcxt;
	const bson_t *doc;

	ExecClearTuple(slot);
	if (ia->done)
		return slot;
	oldcxt = MemoryContextSwitchTo(state->scan_cxt);
	if (ia->group_key < 0)
	{
		if (list_member_int(ia->outputs, AGG_OUT_COUNT) ||
			ia->minmax_key < 0)
			ia->count = run_count(node, state, ia);
		else
			idx_eval_exprs(node, ia->value_states, ia->values, ia->nulls);
		if (list_member_int(ia->outputs, AGG_OUT_MIN))
			find_extreme(state, ia, 0);
		if (list_member_int(ia->outputs, AGG_OUT_MAX))
			find_extreme(state, ia, 1);
		ia->done = true;
		MemoryContextSwitchTo(oldcxt);
		fill_row(node, state, ia, NULL);
		return slot;
	}
	if (!ia->started)
	{
		ia->started = true;
		if (!open_group_cursor(node, state, ia))
			ia->done = true;
	}
	MemoryContextSwitchTo(oldcxt);
	if (ia->done)
		return slot;
	doc = idx_scan_next_doc(state, &state->cursor, ia->def->collection,
							ia->def->database);
	if (doc == NULL)
	{
		ia->done = true;
		return slot;
	}
	ia->count++;				/* groups, for EXPLAIN ANALYZE */
	oldcxt = MemoryContextSwitchTo(node->ss.ps.ps_ExprContext->ecxt_per_tuple_memory);
	fill_row(node, state, ia, doc);
	MemoryContextSwitchTo(oldcxt);
	return slot;
}

/*
 * Restart: the next row comes from a new command.
 */
static void
idx_index_agg_scan_rescan(IdxScanState *state)
{
	state->index_agg->done = false;
	state->index_agg->started = false;
	state->index_agg->count = 0;
}

/*
 * Release what the scan holds: nothing outlives run_count().
 */
static void
idx_index_agg_scan_end(IdxScanState *state)
{
}

/*
 * EXPLAIN: the index and its conditions; VERBOSE the count's filter (and a
 * count per key's pipeline) once run; ANALYZE the wait, the count and the
 * round trips.
 */
static void
idx_index_agg_scan_explain(IdxScanState *state, ExplainState *es)
{
	IdxIndexAggScan *ia = state->index_agg;

	ExplainPropertyText("Index Table",
						psprintf(ia->group_key >= 0 ? "%s (count per key)" :
								 ia->minmax_key >= 0 ? "%s (min/max)" :
								 "%s (count)", ia->name), es);
	if (ia->cond_text[0] != '\0')
		ExplainPropertyText("Index Cond", ia->cond_text, es);
	if (!es->analyze)
		return;
	if (ia->done && ia->def == NULL)
		ExplainPropertyText("Counted", "facts (the index cannot count them)",
							es);
	if (es->verbose && ia->last_filter)
		ExplainPropertyText("MongoDB Index Filter", ia->last_filter, es);
	if (es->verbose && ia->last_pipeline)
		ExplainPropertyText("MongoDB Pipeline", ia->last_pipeline, es);
	if (ia->group_key >= 0)
		ExplainPropertyInteger("Groups", NULL, ia->count, es);
	if (ia->sync_waited && es->timing)
		ExplainPropertyFloat("Sync Wait", "ms", ia->sync_wait_ms, 3, es);
	if (ia->ran)
		ExplainPropertyText("Command",
							ia->group_key >= 0 ? "aggregate ($group)" :
							ia->minmax_key >= 0 ? "find (sort, limit 1)" :
							ia->in_txn ? "aggregate ($count)" : "count", es);
	ExplainPropertyUInteger("Round Trips", NULL, state->round_trips, es);
}

/*
 * The callbacks of scan kind IDX_SCAN_INDEX_AGG (scan.h).
 */
const IdxScanMethods idx_route_agg_scan_methods = {
	.begin = idx_index_agg_scan_begin,
	.next = idx_index_agg_scan_next,
	.rescan = idx_index_agg_scan_rescan,
	.end = idx_index_agg_scan_end,
	.explain = idx_index_agg_scan_explain
};
