/*-------------------------------------------------------------------------
 *
 * route_scan.c
 *		  Execution of scans routed through an index table.
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/route_scan.c
 *
 * A key-only scan reads entries from the index collection (a find on the
 * _id.kN fields, served by the index collection's own MongoDB index:
 * route_lookup.c) and
 * fetches the facts they point to by _id in batches of fetch_batch_size,
 * with the pushed-down filter added, so every fact is rechecked by MongoDB
 * and, for the clauses that stay local, by PostgreSQL.  A covering scan
 * builds rows from the entries alone (keys and included columns).
 *
 * The facts' collection handle and cursor are those of the plain scan
 * state (scan.c), so releasing them on error is shared; the lookup cursor
 * and the index collection handle are released by idx_index_scan_release,
 * which scan.c calls from the same memory-context callback.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "executor/executor.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/plancache.h"
#include "utils/rel.h"

#include "core/connection.h"
#include "core/convert.h"
#include "core/mongo_limits.h"
#include "core/pg_compat.h"
#include "core/protocol_read.h"
#include "core/rowid.h"
#include "core/xact.h"
#include "index/index_catalog.h"
#include "index/index_entry.h"
#include "index/index_owner.h"
#include "planner.h"
#include "route_path.h"
#include "route_scan_int.h"
#include "sync/sync_wait.h"

/*
 * Find an index definition of the table by name, with its ownership
 * marker checked unless "explain_only" (EXPLAIN without ANALYZE talks to
 * MongoDB no more than planning does).
 */
static IdxIndexDef *
find_index(Oid relid, Oid userid, const char *name, bool explain_only)
{
	List	   *defs;
	bool		deferred = idx_owner_defer_reads(explain_only);
	ListCell   *lc;

	PG_TRY();
	{
		defs = idx_get_indexes(relid, userid);
	}
	PG_FINALLY();
	{
		idx_owner_defer_reads(deferred);
	}
	PG_END_TRY();

	foreach(lc, defs)
	{
		IdxIndexDef *def = lfirst(lc);

		if (strcmp(def->name, name) == 0)
			return def;
	}
	ereport(ERROR,
			(errcode(ERRCODE_UNDEFINED_OBJECT),
			 errmsg("index table \"%s\" of foreign table \"%s\" does not exist",
					name, get_rel_name(relid)),
			 errhint("The plan is older than the index; run the query again.")));
	return NULL;				/* keep compiler quiet */
}

/*
 * Planning does not read ownership markers (route_path.c), so a plan may
 * name an index whose collection turns out, when the scan starts, not to
 * be the index's (idx_owner_check_indexes has said so in a WARNING).  Its
 * entries are never read: the scan reads the facts as a plain scan does,
 * which is exact because every clause the lookup served also stayed in
 * the pushed-down filter or the local quals; only an ordered scan, whose
 * rows nothing sorts, cannot, and fails after dropping the cached plans,
 * so that the next planning, which knows the verdict, leaves the index
 * out.  Returns true when the scan is to be a plain one.
 */
static bool
scan_without_index(IdxScanState *state, const IdxIndexDef *def,
				   bool ordered)
{
	if (def->owner_problem == NULL)
		return false;
	if (ordered)
	{
		ResetPlanCache();
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("cannot read foreign table \"%s\" in the order of its index \"%s\": the index's collection does not carry the index's ownership marker",
						state->info->relname, def->name),
				 errdetail_internal("%s", def->owner_problem),
				 errhint("Run the query again: it is planned without the index now.")));
	}
	state->kind = IDX_SCAN_PLAIN;
	return true;
}

/*
 * Row converters reading columns out of entries: key columns from
 * "_id.kN", included columns from "v.iN".
 */
static IdxRowConv *
entry_row_conv(Relation rel, IdxScanState *state, IdxIndexDef *def)
{
	IdxTableInfo *einfo = palloc(sizeof(IdxTableInfo));
	int			i;

	*einfo = *state->info;
	einfo->fields = palloc0(sizeof(char *) * Max(einfo->natts, 1));
	for (i = 0; i < def->nkeys; i++)
	{
		if (OidIsValid(def->keys[i].sortcoll))
			einfo->fields[def->keys[i].attnum - 1] = idx_key_original_path(i);
		else if (def->keys[i].kind == IDX_KEY_COLUMN && !def->keys[i].multi)
			einfo->fields[def->keys[i].attnum - 1] =
				psprintf("_id.%s", idx_key_field(i));
	}
	for (i = 0; i < def->ninclude; i++)
		einfo->fields[def->include[i] - 1] =
			psprintf("%s.%s", IDX_ENTRY_INCLUDE, idx_include_field(i));
	return idx_row_conv_create(RelationGetDescr(rel), einfo, state->attrs_used);
}

/*
 * Must a covering plan read the facts after all?  A table without a
 * consistency mode of its own writes in its server's: 'ordered' on a
 * server without transactions, and then an entry may be an orphan or
 * stale (index_write.h), so that only reads that recheck each fact may use
 * the index.  Planning does not ask the server (route_path.c): here, at
 * executor start, the client is connected and knows it.
 */
static bool
covering_needs_facts(IdxScanState *state)
{
	return state->info->consistency == IDX_CONSISTENCY_DEFAULT &&
		idx_xact_mode(state->info, state->client,
					  state->server->servername) == IDX_CONSISTENCY_ORDERED;
}

/*
 * Set up the index part of a scan.
 */
static void
idx_index_scan_begin(ForeignScanState *node, IdxScanState *state, int eflags)
{
	ForeignScan *plan = (ForeignScan *) node->ss.ps.plan;
	Relation	rel = node->ss.ss_currentRelation;
	IdxIndexScan *ix;
	IdxIndexDef *def;
	List	   *order;
	int			nexprs = list_length(plan->fdw_exprs);

	def = find_index(RelationGetRelid(rel), idx_scan_user(node),
					 strVal(list_nth(plan->fdw_private, IdxPrivIndexName)),
					 (eflags & EXEC_FLAG_EXPLAIN_ONLY) != 0);
	order = list_nth(plan->fdw_private, IdxPrivOrder);
	if (!(eflags & EXEC_FLAG_EXPLAIN_ONLY) &&
		scan_without_index(state, def, order != NIL))
		return;
	ix = palloc0(sizeof(IdxIndexScan));
	ix->def = def;
	ix->covering = intVal(list_nth(plan->fdw_private, IdxPrivCovering)) &&
		((eflags & EXEC_FLAG_EXPLAIN_ONLY) || !covering_needs_facts(state));
	ix->conds = list_nth(plan->fdw_private, IdxPrivIndexConds);
	ix->cond_text = strVal(list_nth(plan->fdw_private, IdxPrivIndexCondText));
	ix->value_exprs = plan->fdw_exprs;
	ix->value_states = ExecInitExprList(plan->fdw_exprs, (PlanState *) node);
	ix->values = palloc0(sizeof(Datum) * Max(nexprs, 1));
	ix->nulls = palloc0(sizeof(bool) * Max(nexprs, 1));
	ix->order_key = -1;
	ix->split_key = -1;
	if (order != NIL)
	{
		ix->order_key = linitial_int(order);
		ix->order_nkeys = lsecond_int(order);
		ix->order_desc = lthird_int(order);
		ix->nulls_first = lfourth_int(order);
		ix->order_by_id = list_nth_int(order, 4);
	}
	ix->first_batch = intVal(list_nth(plan->fdw_private, IdxPrivFirstBatch));
	ix->batch_cxt = AllocSetContextCreate(state->scan_cxt,
										  "idxtable_fdw ordered batch",
										  ALLOCSET_DEFAULT_SIZES);
	if (ix->covering && !(eflags & EXEC_FLAG_EXPLAIN_ONLY))
		ix->entryconv = entry_row_conv(rel, state, ix->def);
	if (ix->order_by_id && !(eflags & EXEC_FLAG_EXPLAIN_ONLY))
		idx_id_order_begin(rel, state, ix);
	if (!ix->covering && !(eflags & EXEC_FLAG_EXPLAIN_ONLY))
	{
		Bitmapset  *keys = NULL;
		int			k;

		for (k = 0; k < ix->def->nkeys; k++)
			keys = bms_add_member(keys, ix->def->keys[k].attnum -
								  FirstLowInvalidHeapAttributeNumber);
		ix->keyconv = idx_row_conv_create(RelationGetDescr(rel), state->info,
										  keys);
		ix->fetch_attrs = bms_union(state->attrs_used, keys);
	}
	state->index = ix;

	/* see every write acknowledged before now (sync_wait.h) */
	if (!(eflags & EXEC_FLAG_EXPLAIN_ONLY))
		ix->sync_waited = idx_sync_wait_for_read(ix->def, state->client,
												 state->server->servername,
												 &ix->sync_wait_ms);

	/*
	 * What the wait waited for is on the primary: the applier's entries and
	 * the facts they point to may not be on a secondary yet, so the lookup
	 * and the fact fetch go there too, whatever the URI prefers.
	 */
	if (ix->sync_waited)
		state->read_prefs = idx_primary_read_prefs();
}

/*
 * Release the lookup cursor, the index collection handle and the fact
 * filter, and forget the execution, so that the next row starts a new
 * lookup (rescan).  Idempotent.
 */
static void
idx_index_scan_release(IdxScanState *state)
{
	IdxIndexScan *ix = state->index;

	if (ix == NULL)
		return;					/* begin has not set it up (yet) */
	idx_release_find(state, &ix->lookup, &ix->index_coll);
	if (ix->fact_filter)
		bson_destroy(ix->fact_filter);
	ix->fact_filter = NULL;
	ix->started = false;
	ix->lookup_done = false;
	ix->batch_n = ix->batch_pos = 0;
	if (ix->order_by_id)
		idx_id_order_release(state, ix);
}

/*
 * Entries, and so facts, of the next fact fetch.
 */
static int
fact_batch_size(IdxScanState *state, IdxIndexScan *ix)
{
	if (ix->batch_target > 0)
		return Min(ix->batch_target, state->info->fetch_batch_size);
	return state->info->fetch_batch_size;
}

/*
 * Choose the collation of this execution's fact fetches: the collection's
 * default, so that the $in on _id can use the _id index, when the
 * pushed-down filter's string comparisons are positive equalities on
 * columns (idx_string_equalities: the collation can only widen them, and
 * vouching_entry() narrows each fact back to the binary comparison and
 * checks its _id byte for byte); else the simple collation PostgreSQL's
 * text semantics need.
 */
static void
choose_fetch_collation(IdxScanState *state, IdxIndexScan *ix)
{
	List	   *fields;
	ListCell   *lc;

	ix->fetch_collation = NULL;
	ix->checks = NIL;
	ix->check_attrs = NULL;
	if (!idx_string_equalities(ix->fact_filter, &ix->checks, &fields))
		return;
	foreach(lc, fields)
	{
		const char *field = (const char *) lfirst(lc);
		int			attnum = state->info->natts;

		while (attnum > 0 && (state->info->fields[attnum - 1] == NULL ||
							  strcmp(state->info->fields[attnum - 1], field) != 0))
			attnum--;
		if (attnum == 0)
		{
			ix->checks = NIL;
			return;				/* not a column's field: keep simple */
		}
		ix->check_attrs = bms_add_member(ix->check_attrs,
										 attnum - FirstLowInvalidHeapAttributeNumber);
	}
	ix->fetch_collation = idx_collection_collation(state->client,
												   state->server->servername,
												   state->info->database,
												   state->info->collection);
}

/*
 * Start this execution: evaluate the values, open the lookup, and build
 * the facts' filter.
 */
static void
start_lookup(ForeignScanState *node, IdxScanState *state, IdxIndexScan *ix)
{
	MemoryContext oldcxt;

	idx_eval_exprs(node, ix->value_states, ix->values, ix->nulls);
	idx_eval_exprs(node, state->param_states, state->params.values,
				   state->params.nulls);

	oldcxt = MemoryContextSwitchTo(state->scan_cxt);
	ix->started = true;
	ix->batch_target = Max(ix->first_batch, 0);
	ix->exec_entries = 0;
	ix->fetches = 0;
	ix->split_key = idx_lookup_split_key(ix);
	ix->nparts = ix->split_key >= 0 ? 2 : 1;
	/* the NULL entries of an unordered scan first: any part may be */
	ix->null_part = (ix->order_key < 0 || ix->nulls_first) ? 0 : 1;
	ix->part = 0;
	if (!idx_lookup_open_next_part(state, ix))
		ix->lookup_done = true;
	ix->next_grow = idx_lookup_batch_size(state, ix);

	if (!ix->covering)
	{
		ix->fact_filter = bson_new();
		idx_build_filter(ix->fact_filter, state->remote_conds,
						 state->relid, state->info, &state->params);
		if (state->last_filter)
			pfree(state->last_filter);
		state->last_filter = idx_bson_as_json(ix->fact_filter);
		choose_fetch_collation(state, ix);
		state->collection = mongoc_client_get_collection(state->client,
														 state->info->database,
														 state->info->collection);
	}
	MemoryContextSwitchTo(oldcxt);
}

/*
 * The next entry of the scan, or NULL when there is none: the lookup's,
 * or for ORDER BY key, _id, the next in the order of keys and _ids.  It
 * stays valid until the next call.
 */
static const bson_t *
next_entry(IdxScanState *state, IdxIndexScan *ix)
{
	if (!ix->order_by_id)
		return idx_lookup_next_entry(state, ix);
	return idx_id_order_next(state, ix);
}

/*
 * The BSON bytes of {"v": <value under iter>}, palloc'd: a fact _id in a
 * form that compares byte for byte.
 */
static char *
raw_id(bson_iter_t *iter, uint32 *len)
{
	bson_t		tmp = BSON_INITIALIZER;
	char	   *result;

	idx_check_append(bson_append_iter(&tmp, "v", 1, iter));
	*len = tmp.len;
	result = palloc(tmp.len);
	memcpy(result, bson_get_data(&tmp), tmp.len);
	bson_destroy(&tmp);
	return result;
}

/*
 * Is "entry_id" (len bytes) the _id of the entry of index "def" with these
 * key values for the fact fact_id?
 */
static bool
entry_id_is(const IdxIndexDef *def, const Datum *kv, const bool *kn,
			const bson_value_t *fact_id, const uint8 *entry_id, uint32 len)
{
	bson_t		tmp = BSON_INITIALIZER;
	bson_iter_t it;
	const uint8 *data;
	uint32		dlen;
	bool		match;

	idx_append_entry_id(&tmp, "_id", def, kv, kn, fact_id);
	bson_iter_init_find(&it, &tmp, "_id");
	bson_iter_document(&it, &dlen, &data);
	match = dlen == len && memcmp(data, entry_id, dlen) == 0;
	bson_destroy(&tmp);
	return match;
}

/*
 * Verification on read: the position of a batch entry that points to the
 * fact "doc" and is one of the fact's own entries now (its _id is what the
 * fact's key values give), skipping positions already "taken"; -1 if no
 * entry of the batch vouches for the fact.  An entry left behind by an
 * interrupted write (consistency 'ordered') or changed behind the FDW's
 * back is thereby never used: its fact is not returned through it, and a
 * fact reached through a stale and a current entry comes out once.  In a
 * unique index, a fact whose key another fact's claim holds (a conflict
 * made by a writer outside PostgreSQL) has an entry of the non-unique form
 * instead (index_repair_claims.c), which vouches for it as well.
 */
static int
vouching_entry(IdxIndexScan *ix, const bson_t *doc, const bool *taken)
{
	const IdxIndexDef *def = ix->def;
	IdxIndexDef plain = *def;	/* the form of a conflict entry's _id */
	bson_iter_t iter;
	uint32		len;
	char	   *id;
	Datum	   *values;
	bool	   *nulls;
	Datum	   *kv;
	bool	   *kn;
	int			natts = ix->keyconv->natts;
	int			n,
				e,
				i;

	plain.unique = false;
	if (!bson_iter_init_find(&iter, doc, "_id"))
		return -1;
	if (ix->fetch_collation && !idx_doc_passes_equalities(doc, ix->checks))
		return -1;				/* matched only under the collation */
	id = raw_id(&iter, &len);
	values = palloc0(sizeof(Datum) * Max(natts, 1));
	nulls = palloc(sizeof(bool) * Max(natts, 1));
	memset(nulls, true, sizeof(bool) * Max(natts, 1));
	idx_document_to_row(ix->keyconv, doc, values, nulls);
	n = idx_compute_keys(def, values, nulls, &kv, &kn);

	for (i = 0; i < ix->batch_n; i++)
	{
		if ((taken && taken[i]) || ix->batch_id_lens[i] != len ||
			memcmp(ix->batch_ids[i], id, len) != 0)
			continue;
		for (e = 0; e < n; e++)
		{
			if (entry_id_is(def, kv + e * def->nkeys, kn + e * def->nkeys,
							bson_iter_value(&iter), ix->batch_entry_ids[i],
							ix->batch_entry_id_lens[i]) ||
				(def->unique &&
				 entry_id_is(&plain, kv + e * def->nkeys, kn + e * def->nkeys,
							 bson_iter_value(&iter), ix->batch_entry_ids[i],
							 ix->batch_entry_id_lens[i])))
				return i;
		}
	}
	ix->entries_skipped++;
	return -1;
}

/*
 * Ordered key-only scans: read the whole batch of facts and put them in
 * the order of their entries (facts fetched by $in come in _id order).
 * A fact that no longer matches its entry is simply missing.
 */
static void
order_batch(IdxScanState *state, IdxIndexScan *ix)
{
	MemoryContext oldcxt = MemoryContextSwitchTo(ix->batch_cxt);
	const bson_t *doc;

	ix->batch_docs = palloc0(sizeof(bson_t) * Max(ix->batch_n, 1));
	ix->batch_found = palloc0(sizeof(bool) * Max(ix->batch_n, 1));
	for (;;)
	{
		int			i;

		CHECK_FOR_INTERRUPTS();
		doc = idx_scan_next_doc(state, &state->cursor, state->info->collection,
								state->info->database);
		if (doc == NULL)
			break;
		ix->facts_fetched++;
		state->docs_fetched++;
		i = vouching_entry(ix, doc, ix->batch_found);
		if (i >= 0)
		{
			char	   *copy = palloc(doc->len);

			memcpy(copy, bson_get_data(doc), doc->len);
			bson_init_static(&ix->batch_docs[i], (uint8_t *) copy, doc->len);
			ix->batch_found[i] = true;
		}
	}
	ix->batch_pos = 0;
	MemoryContextSwitchTo(oldcxt);
}

/*
 * Read up to fetch_batch_size entries (fewer under a LIMIT, see
 * idx_lookup_grow_batches) and start the find of their facts:
 * {_id: {$in: [...]}} combined with the pushed-down filter.  Large _ids
 * end the batch early, once the list holds IDX_IN_LIST_MAX_BYTES, so that
 * the find stays under MongoDB's 16 MB command size.  Returns false when
 * the lookup has no more entries.
 */
static bool
fetch_next_batch(IdxScanState *state, IdxIndexScan *ix)
{
	bson_t		filter = BSON_INITIALIZER;
	bson_t		opts = BSON_INITIALIZER;
	bson_t		clauses,
				idclause,
				idcond,
				ids;
	uint32		n = 0;
	const bson_t *entry;
	bool		ordered = ix->order_key >= 0;
	uint32		max;

	/* the facts of the batches so far were not enough */
	if (ix->fetches++ > 0)
		idx_lookup_grow_batches(state, ix);
	max = fact_batch_size(state, ix);
	MemoryContextReset(ix->batch_cxt);
	ix->batch_ids = MemoryContextAlloc(ix->batch_cxt, sizeof(char *) *
									   state->info->fetch_batch_size);
	ix->batch_id_lens = MemoryContextAlloc(ix->batch_cxt, sizeof(uint32) *
										   state->info->fetch_batch_size);
	ix->batch_entry_ids = MemoryContextAlloc(ix->batch_cxt, sizeof(uint8 *) *
											 state->info->fetch_batch_size);
	ix->batch_entry_id_lens = MemoryContextAlloc(ix->batch_cxt, sizeof(uint32) *
												 state->info->fetch_batch_size);
	idx_check_append(IDX_BSON_APPEND_ARRAY_BEGIN(&filter, "$and", &clauses));
	idx_check_append(BSON_APPEND_DOCUMENT_BEGIN(&clauses, "0", &idclause));
	idx_check_append(BSON_APPEND_DOCUMENT_BEGIN(&idclause, "_id", &idcond));
	idx_check_append(IDX_BSON_APPEND_ARRAY_BEGIN(&idcond, "$in", &ids));
	while (n < max &&
		   ids.len < IDX_IN_LIST_MAX_BYTES &&
		   (entry = next_entry(state, ix)) != NULL)
	{
		bson_iter_t iter;
		bson_iter_t eiter;
		char		key[16];

		CHECK_FOR_INTERRUPTS();
		if (!bson_iter_init_find(&iter, entry, IDX_ENTRY_FACT_ID) ||
			!bson_iter_init_find(&eiter, entry, "_id") ||
			!BSON_ITER_HOLDS_DOCUMENT(&eiter))
			continue;			/* not an entry: ignore it */
		{
			MemoryContext oldcxt = MemoryContextSwitchTo(ix->batch_cxt);
			const uint8 *data;
			uint8	   *copy;

			ix->batch_ids[n] = raw_id(&iter, &ix->batch_id_lens[n]);
			bson_iter_document(&eiter, &ix->batch_entry_id_lens[n], &data);
			copy = palloc(ix->batch_entry_id_lens[n]);
			memcpy(copy, data, ix->batch_entry_id_lens[n]);
			ix->batch_entry_ids[n] = copy;
			MemoryContextSwitchTo(oldcxt);
		}
		snprintf(key, sizeof(key), "%u", n++);
		idx_check_append(bson_append_iter(&ids, key, -1, &iter));
	}
	ix->batch_n = n;
	idx_check_append(bson_append_array_end(&idcond, &ids));
	idx_check_append(bson_append_document_end(&idclause, &idcond));
	idx_check_append(bson_append_document_end(&clauses, &idclause));
	idx_check_append(BSON_APPEND_DOCUMENT(&clauses, "1", ix->fact_filter));
	idx_check_append(bson_append_array_end(&filter, &clauses));

	if (n > 0)
	{
		PG_TRY();
		{
			idx_append_find_options(&opts, state->info,
									ix->fetch_collation ?
									bms_union(ix->fetch_attrs, ix->check_attrs) :
									ix->fetch_attrs,
									state->info->fetch_batch_size,
									ix->fetch_collation);
			idx_xact_append_session(state->client, &opts);
			state->cursor = mongoc_collection_find_with_opts(state->collection,
															 &filter, &opts,
															 state->read_prefs);
			if (ordered)
				order_batch(state, ix);
		}
		PG_FINALLY();
		{
			bson_destroy(&filter);
			bson_destroy(&opts);
		}
		PG_END_TRY();
		return true;
	}
	bson_destroy(&filter);
	bson_destroy(&opts);
	return false;
}

/*
 * Store a document (a fact, or an entry for covering scans) in the slot.
 */
static TupleTableSlot *
store_row(ForeignScanState *node, const IdxRowConv *conv, const bson_t *doc)
{
	TupleTableSlot *slot = node->ss.ss_ScanTupleSlot;
	IdxScanState *state = (IdxScanState *) node->fdw_state;
	MemoryContext oldcxt;

	oldcxt = MemoryContextSwitchTo(node->ss.ps.ps_ExprContext->ecxt_per_tuple_memory);
	idx_document_to_row(conv, doc, slot->tts_values, slot->tts_isnull);
	ExecStoreVirtualTuple(slot);
	/* an entry holds its fact's _id, as stored, in "id" */
	if (state->keep_ids)
		idx_rowid_note(node, slot, state->info->id_attnum, doc,
					   state->index->covering ? IDX_ENTRY_FACT_ID : "_id");
	MemoryContextSwitchTo(oldcxt);
	return slot;
}

/*
 * Has the scan used up its entries?  The lookup may be done while ORDER BY
 * key, _id still holds entries read from it (route_id_order.c).
 */
static bool
entries_used_up(IdxIndexScan *ix)
{
	if (!ix->lookup_done)
		return false;
	return !ix->order_by_id || !idx_id_order_holds(ix);
}

/*
 * Return the next row of an index scan, or an empty slot at the end.
 */
static TupleTableSlot *
idx_index_scan_next(ForeignScanState *node, IdxScanState *state)
{
	IdxIndexScan *ix = state->index;
	TupleTableSlot *slot = node->ss.ss_ScanTupleSlot;
	const bson_t *doc;

	ExecClearTuple(slot);
	if (!ix->started)
		start_lookup(node, state, ix);

	if (ix->covering)
	{
		doc = next_entry(state, ix);
		return doc ? store_row(node, ix->entryconv, doc) : slot;
	}

	for (;;)
	{
		CHECK_FOR_INTERRUPTS();
		while (ix->order_key >= 0 && ix->batch_pos < ix->batch_n)
		{
			int			pos = ix->batch_pos++;

			if (!ix->batch_found[pos])
				continue;
			return store_row(node, state->rowconv, &ix->batch_docs[pos]);
		}
		if (state->cursor && (doc = idx_scan_next_doc(state, &state->cursor,
													  state->info->collection,
													  state->info->database)) != NULL)
		{
			MemoryContext oldcxt;
			int			pos;

			ix->facts_fetched++;
			state->docs_fetched++;
			oldcxt = MemoryContextSwitchTo(node->ss.ps.ps_ExprContext->ecxt_per_tuple_memory);
			pos = vouching_entry(ix, doc, NULL);
			MemoryContextSwitchTo(oldcxt);
			if (pos < 0)
				continue;
			return store_row(node, state->rowconv, doc);
		}
		if (entries_used_up(ix) || !fetch_next_batch(state, ix))
			return slot;
	}
}

/*
 * The order of an ordered scan, for EXPLAIN: "a DESC NULLS FIRST, b DESC
 * NULLS LAST", and ", _id ASC NULLS LAST" when equal keys come in the
 * order of their fact's _id.
 */
static char *
order_text(IdxScanState *state, const IdxIndexScan *ix)
{
	StringInfoData buf;
	int			k;

	initStringInfo(&buf);
	for (k = ix->order_key; k < ix->order_key + ix->order_nkeys; k++)
	{
		/* keys after the first place NULLs as MongoDB does */
		bool		nulls_first = k == ix->order_key ? ix->nulls_first :
			!ix->order_desc;

		appendStringInfo(&buf, "%s%s %s NULLS %s", buf.len > 0 ? ", " : "",
						 quote_identifier(get_attname(ix->def->relid,
													  ix->def->keys[k].attnum,
													  false)),
						 ix->order_desc ? "DESC" : "ASC",
						 nulls_first ? "FIRST" : "LAST");
	}
	if (ix->order_by_id)
		appendStringInfo(&buf, ", %s ASC NULLS LAST",
						 quote_identifier(get_attname(ix->def->relid,
													  state->info->id_attnum,
													  false)));
	return buf.data;
}

/*
 * EXPLAIN of an index scan: the index, its condition, the collections;
 * with VERBOSE the MongoDB filters; with ANALYZE the wait for the applier
 * (with TIMING), entries read, facts fetched and round trips.
 */
static void
idx_index_scan_explain(IdxScanState *state, ExplainState *es)
{
	IdxIndexScan *ix = state->index;

	ExplainPropertyText("Index Table",
						psprintf("%s (%s)", ix->def->name,
								 ix->covering ? "covering" : "key-only"),
						es);
	if (ix->cond_text[0] != '\0')
		ExplainPropertyText("Index Cond", ix->cond_text, es);
	if (ix->order_key >= 0)
		ExplainPropertyText("Index Order", order_text(state, ix), es);
	/* a LIMIT made the first batch smaller than a full one */
	if (ix->first_batch > 0 &&
		ix->first_batch < (ix->covering ? state->info->fetch_size :
						   state->info->fetch_batch_size))
		ExplainPropertyInteger("First Batch", "entries", ix->first_batch, es);
	ExplainPropertyText("Collection",
						psprintf("%s.%s", state->info->database,
								 state->info->collection), es);
	if (es->verbose)
	{
		ExplainPropertyText("Index Collection",
							psprintf("%s.%s", ix->def->database,
									 ix->def->collection), es);
		if (ix->last_lookup)
			ExplainPropertyText("MongoDB Index Filter", ix->last_lookup, es);
		if (!ix->covering)
		{
			bson_t		doc = BSON_INITIALIZER;

			if (state->last_filter == NULL)
			{
				IdxParamValues placeholders = state->params;

				placeholders.placeholders = true;
				idx_build_filter(&doc, state->remote_conds, state->relid,
								 state->info, &placeholders);
				state->last_filter = idx_bson_as_json(&doc);
				bson_reinit(&doc);
			}
			ExplainPropertyText("MongoDB Filter", state->last_filter, es);
			idx_build_projection(&doc, state->info,
								 ix->fetch_attrs ? ix->fetch_attrs : state->attrs_used);
			ExplainPropertyText("MongoDB Projection", idx_bson_as_json(&doc),
								es);
			bson_destroy(&doc);
		}
	}
	if (es->analyze)
	{
		/* a time, so only with TIMING (which stable outputs turn off) */
		if (ix->sync_waited && es->timing)
			ExplainPropertyFloat("Sync Wait", "ms", ix->sync_wait_ms, 3, es);
		ExplainPropertyUInteger("Index Entries Read", NULL, ix->entries_read,
								es);
		if (!ix->covering)
			ExplainPropertyUInteger("Facts Fetched", NULL, ix->facts_fetched,
									es);
		if (ix->groups_apart > 0)
			ExplainPropertyUInteger("Groups Read in _id Order", NULL,
									ix->groups_apart, es);
		if (ix->entries_skipped > 0)
			ExplainPropertyUInteger("Stale Entries Skipped", NULL,
									ix->entries_skipped, es);
		ExplainPropertyUInteger("Round Trips", NULL, state->round_trips, es);
	}
}

/*
 * The callbacks of scan kind IDX_SCAN_INDEX (scan.h).  A rescan only
 * releases: the next row starts a new lookup.
 */
const IdxScanMethods idx_route_scan_methods = {
	.begin = idx_index_scan_begin,
	.next = idx_index_scan_next,
	.release = idx_index_scan_release,
	.explain = idx_index_scan_explain
};
