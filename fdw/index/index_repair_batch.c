/*-------------------------------------------------------------------------
 *
 * index_repair_batch.c
 *		  The per-batch core of verify_index, repair_index and the
 *		  applier's repairs: the entries a batch of facts should have
 *		  against those the index holds for them.
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/index/index_repair_batch.c
 *
 * For a batch of facts (named by _id, or already read), compute the
 * entries each fact should have (exactly as a write through the FDW
 * computes them), read the entries the index holds for those facts (one
 * find {id: {$in: [...]}}, served by the index collection's "fact" index)
 * and compare them:
 *		missing		an entry the fact should have and the index lacks;
 *		stale		an entry of the fact that the fact should not have (an old
 *					key) or whose included values differ from the fact's;
 *		orphan		an entry of a named fact that no longer exists.
 * In repair mode the difference is written as one unordered bulk per
 * batch (index_repair.c): a missing entry upserted by its _id, a stale one
 * replaced or deleted and an orphan deleted by a filter that matches the
 * entry only as it was read; then the batch's missing unique claims are
 * written (index_repair_claims.c).  A claim deleted frees its key for a
 * fact that waited for it as a unique key conflict: those facts are noted
 * for the caller to check again (index_repair_named.c).
 *
 * The facts named by a list of _ids (index_repair_named.c, what the
 * change-stream applier calls for the _ids a stream names) are read with
 * one find {_id: {$in: [...]}}, and a fact that is gone has all its
 * entries counted as orphans (and deleted).  verify_index's pass 1
 * (index_verify.c) feeds the same core with the facts of its stream of
 * every fact.  Nothing here depends on the state of an SQL function call.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "utils/memutils.h"

#include "core/convert.h"
#include "core/handle.h"
#include "core/mongoc_compat.h"
#include "index/index_catalog.h"
#include "index/index_claims.h"
#include "index/index_entry.h"
#include "index/index_repair.h"
#include "index/index_repair_int.h"

/* ----------------------------------------------------------------
 *		Pass 1: facts -> entries
 * ----------------------------------------------------------------
 */

/*
 * Is this error one of a value that does not fit its column (convert.c's
 * wrong type, out of range, corrupt value, or a type input function's data
 * exception)?  Only those are counted; anything else stops the function.
 */
static bool
is_conversion_error(int sqlerrcode)
{
	return sqlerrcode == ERRCODE_FDW_INVALID_DATA_TYPE ||
		ERRCODE_TO_CATEGORY(sqlerrcode) == ERRCODE_DATA_EXCEPTION;
}

/*
 * Count an unconvertible fact; remember the _ids of the first few (for a
 * user who may read them) and the first error, in st->long_cxt.
 */
static void
note_unconvertible(IdxRepairState *st, const bson_t *doc, const char *message)
{
	MemoryContext old = MemoryContextSwitchTo(st->long_cxt);

	st->counts.checked++;
	if (st->counts.unconvertible++ < IDX_VERIFY_NAMED_FACTS && !st->hide_id)
	{
		if (st->bad_ids.len > 0)
			appendStringInfoString(&st->bad_ids, ", ");
		appendStringInfoString(&st->bad_ids, idx_document_id_string(doc));
	}
	if (st->first_error == NULL)
		st->first_error = pstrdup(message);
	MemoryContextSwitchTo(old);
}

/*
 * Convert a fact's key and included columns into st->values/nulls.  A
 * fact whose values do not fit is counted, its _id remembered for the
 * WARNING, and false returned: it is skipped (its entries are neither
 * checked nor repaired).  The conversion only computes (type input
 * functions of the supported built-in types hold no resources), so its
 * error can be caught without a subtransaction, which would abort the
 * MongoDB transaction of a transaction that has written.
 */
static bool
convert_fact(IdxRepairState *st, const bson_t *doc)
{
	MemoryContext cxt = CurrentMemoryContext;
	bool		ok = true;

	memset(st->nulls, true, sizeof(bool) * st->rowconv->natts);
	PG_TRY();
	{
		idx_document_to_row(st->rowconv, doc, st->values, st->nulls);
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		MemoryContextSwitchTo(st->long_cxt);
		edata = CopyErrorData();
		if (!is_conversion_error(edata->sqlerrcode))
			PG_RE_THROW();
		FlushErrorState();
		note_unconvertible(st, doc, edata->message);
		FreeErrorData(edata);
		MemoryContextSwitchTo(cxt);
		ok = false;
	}
	PG_END_TRY();
	return ok;
}

/*
 * Remember one fact of the batch and the entries it should have.
 */
void
idx_repair_add_fact(IdxRepairState *st, const bson_t *doc)
{
	const IdxIndexDef *def = st->def;
	FactItem   *item = &st->items[st->nitems];
	bson_iter_t iter;
	Datum	   *keyvalues;
	bool	   *keynulls;
	int			e;

	if (!bson_iter_init_find(&iter, doc, "_id"))
		ereport(ERROR,
				(errcode(ERRCODE_FDW_ERROR),
				 errmsg("document without _id in collection \"%s\"",
						st->info->collection)));
	if (!convert_fact(st, doc))
		return;
	item->id = idx_repair_wrap_field(doc, "_id");
	item->gone = false;
	item->nconflicts = 0;
	item->resolved = false;
	item->nentries = idx_compute_keys(def, st->values, st->nulls,
									  &keyvalues, &keynulls);
	item->entries = palloc(sizeof(ExpectedEntry) * Max(item->nentries, 1));
	for (e = 0; e < item->nentries; e++)
	{
		ExpectedEntry *ee = &item->entries[e];
		bson_t	   *entry;

		ee->keyvalues = keyvalues + e * def->nkeys;
		ee->keynulls = keynulls + e * def->nkeys;
		entry = idx_make_entry(def, ee->keyvalues, ee->keynulls,
							   bson_iter_value(&iter), st->values, st->nulls);
		ee->entry = idx_bson_pcopy(entry);
		bson_destroy(entry);
	}
	st->nitems++;
}

/*
 * Compare one expected entry with what the index has for its fact.
 */
static void
check_expected(IdxRepairState *st, FactItem *item, ExpectedEntry *ee)
{
	bson_t	   *key = idx_repair_entry_id_key(st, ee->entry);
	ReadDoc    *rd = idx_repair_find_doc(st, key);
	bson_t	   *holder = NULL;

	if (rd != NULL)
		holder = idx_repair_wrap_field(rd->doc, IDX_ENTRY_FACT_ID);

	if (rd != NULL && holder != NULL && idx_bson_same_bytes(holder, item->id))
	{
		rd->matched = true;
		if (idx_bson_same_bytes(idx_repair_without_claim_time(rd->doc),
								ee->entry) ||
			idx_repair_spare_claim(st, rd->doc))
			return;
		st->counts.stale++;
		if (st->repair)
			idx_repair_fix_replace(st, idx_repair_read_filter(rd->doc),
								   ee->entry, false);
		return;
	}

	/* not there (or a claim of another fact of the batch) */
	if (idx_entry_is_claim(ee->entry))
	{
		idx_repair_check_claim(st, item, ee);
		return;
	}
	st->counts.missing++;
	if (st->repair)
		idx_repair_fix_replace(st, key, ee->entry, true);
}

/*
 * Remember a fact of the batch that is gone: it should have no entries.
 */
void
idx_repair_add_gone(IdxRepairState *st, bson_t *wrapped_id)
{
	FactItem   *item = &st->items[st->nitems++];

	item->id = wrapped_id;
	item->gone = true;
	item->nconflicts = 0;
	item->resolved = false;
	item->nentries = 0;
	item->entries = NULL;
}

/*
 * The sorted _ids of the gone facts of the batch, for is_orphan().
 */
static bson_t **
gone_ids(IdxRepairState *st, int *ngone)
{
	bson_t	  **result = palloc(sizeof(bson_t *) * Max(st->nitems, 1));
	int			i;

	*ngone = 0;
	for (i = 0; i < st->nitems; i++)
		if (st->items[i].gone)
			result[(*ngone)++] = st->items[i].id;
	if (*ngone > 1)
		qsort(result, *ngone, sizeof(bson_t *), idx_repair_compare_bson_ptrs);
	return result;
}

/*
 * Is an entry that no fact of the batch should have one of a fact that is
 * gone (an orphan) rather than of one that exists (stale)?
 */
static bool
is_orphan(const ReadDoc *rd, bson_t **gone, int ngone)
{
	bson_t	   *holder;

	if (ngone == 0)
		return false;
	holder = idx_repair_wrap_field(rd->doc, IDX_ENTRY_FACT_ID);
	return holder != NULL &&
		bsearch(&holder, gone, ngone, sizeof(bson_t *),
				idx_repair_compare_bson_ptrs) != NULL;
}

/*
 * Remember the fact "id" ({"v": _id}, in st->wait_cxt) to check again
 * after the batch.
 */
void
idx_repair_add_waiting_id(IdxRepairState *st, bson_t *id)
{
	if (st->nwaiting >= st->maxwaiting)
	{
		st->maxwaiting = Max(16, st->maxwaiting * 2);
		st->waiting = st->waiting == NULL ?
			MemoryContextAlloc(st->wait_cxt,
							   sizeof(bson_t *) * st->maxwaiting) :
			repalloc(st->waiting, sizeof(bson_t *) * st->maxwaiting);
	}
	st->waiting[st->nwaiting++] = id;
}

/*
 * Remember the fact of "entry" to check again after the batch.
 */
static void
add_waiting(IdxRepairState *st, const bson_t *entry)
{
	MemoryContext oldcxt = MemoryContextSwitchTo(st->wait_cxt);
	bson_t	   *id = idx_repair_wrap_field(entry, IDX_ENTRY_FACT_ID);

	if (id != NULL)
		idx_repair_add_waiting_id(st, id);
	MemoryContextSwitchTo(oldcxt);
}

/*
 * Append to "filter" the condition on the key of the claim "claim": each
 * key component of its _id equal, as "_id.<component>"; false if the
 * claim has no such _id.
 */
static bool
append_key_condition(bson_t *filter, const bson_t *claim)
{
	bson_iter_t iter;
	bson_iter_t key;

	if (!bson_iter_init_find(&iter, claim, "_id") ||
		!BSON_ITER_HOLDS_DOCUMENT(&iter) || !bson_iter_recurse(&iter, &key))
		return false;
	while (bson_iter_next(&key))
	{
		char	   *path = psprintf("_id.%s", bson_iter_key(&key));

		idx_check_append(bson_append_iter(filter, path, -1, &key));
		pfree(path);
	}
	return true;
}

/* The most keys note_waiting() looks for in one find (a batch's) */
#define WAITING_KEYS	1000

/*
 * Repairing, the claims "claims[0..n-1]" were deleted (their facts are
 * gone, or no longer have the key).  Facts with conflict entries of those
 * keys (see index_repair_claims.c) waited for them: note them, to be
 * checked again after the batch, when the first of them takes the claim.
 * One find for up to WAITING_KEYS keys, an $or of the keys' conditions,
 * each served by the index collection's "lookup" index on the key
 * components.
 */
static void
note_waiting(IdxRepairState *st, bson_t **claims, int n)
{
	int			from;

	for (from = 0; from < n; from += WAITING_KEYS)
	{
		bson_t		filter = BSON_INITIALIZER;
		bson_t		branches;
		bson_t		projection = BSON_INITIALIZER;
		const bson_t *doc;
		int			nkeys = 0;
		int			i;

		idx_check_append(IDX_BSON_APPEND_ARRAY_BEGIN(&filter, "$or",
													  &branches));
		for (i = from; i < n && i < from + WAITING_KEYS; i++)
		{
			bson_t		branch = BSON_INITIALIZER;
			char		index[16];
			const char *name;

			if (append_key_condition(&branch, claims[i]))
			{
				bson_uint32_to_string(nkeys++, &name, index, sizeof(index));
				idx_check_append(BSON_APPEND_DOCUMENT(&branches, name,
													  &branch));
			}
			bson_destroy(&branch);
		}
		idx_check_append(bson_append_array_end(&filter, &branches));
		if (nkeys == 0)
		{
			bson_destroy(&filter);
			continue;
		}
		idx_check_append(BSON_APPEND_INT32(&projection, IDX_ENTRY_FACT_ID, 1));
		st->lookup = idx_repair_open_stream(st, st->index, &filter,
											&projection);
		bson_destroy(&filter);
		bson_destroy(&projection);
		while (mongoc_cursor_next(st->lookup, &doc))
		{
			CHECK_FOR_INTERRUPTS();
			add_waiting(st, doc);
		}
		idx_repair_check_cursor(st, st->lookup, idx_repair_index_what(st));
		mongoc_cursor_destroy(st->lookup);
		st->lookup = NULL;
	}
}

/*
 * Repairing a unique index, "entry", an entry with its fact's _id (a
 * conflict entry, or one of a key with a NULL), was deleted: if its fact
 * is gone or has no conflict left, report it to st->on_resolved (once), so
 * that the conflicts recorded for the fact are forgotten.
 */
static void
note_resolved(IdxRepairState *st, const bson_t *entry)
{
	bson_t	   *id = idx_repair_wrap_field(entry, IDX_ENTRY_FACT_ID);
	bson_iter_t iter;
	int			i;

	if (id == NULL || st->on_resolved == NULL ||
		!bson_iter_init_find(&iter, id, "v"))
		return;
	for (i = 0; i < st->nitems; i++)
	{
		FactItem   *item = &st->items[i];

		if (!idx_bson_same_bytes(item->id, id))
			continue;
		if (item->nconflicts == 0 && !item->resolved)
		{
			item->resolved = true;
			st->on_resolved(st, bson_iter_value(&iter), st->conflict_arg);
		}
		return;
	}
}

/*
 * The per-batch core: check (and repair) the facts of st->items against
 * the entries the index holds for them.  Returns how many facts were
 * checked; st->batch_cxt is reset.
 */
int
idx_repair_check_batch(IdxRepairState *st)
{
	bson_t	  **ids = palloc(sizeof(bson_t *) * Max(st->nitems, 1));
	int			i;

	for (i = 0; i < st->nitems; i++)
		ids[i] = st->items[i].id;
	idx_repair_lookup(st, st->index, IDX_ENTRY_FACT_ID, ids, st->nitems,
					  NULL, true, idx_repair_index_what(st));
	return idx_repair_compare_batch(st);
}

/*
 * Compare the facts of st->items with their entries, read into st->docs.
 */
int
idx_repair_compare_batch(IdxRepairState *st)
{
	bson_t	  **gone;
	int			ngone;
	int			nchecked = st->nitems;
	int			i,
				e;

	gone = gone_ids(st, &ngone);
	st->pending_claims = NIL;
	for (i = 0; i < st->nitems; i++)
		for (e = 0; e < st->items[i].nentries; e++)
			check_expected(st, &st->items[i], &st->items[i].entries[e]);
	idx_repair_write_claims(st);

	/* entries of these facts that no fact of the batch should have */
	for (i = 0; i < st->ndocs; i++)
	{
		if (st->docs[i].matched)
			continue;
		if (idx_repair_spare_claim(st, st->docs[i].doc))
		{
			st->docs[i].matched = true; /* neither fixed nor freed */
			continue;
		}
		if (is_orphan(&st->docs[i], gone, ngone))
			st->counts.orphan++;
		else
			st->counts.stale++;
		if (st->repair)
			idx_repair_queue_delete(st, st->docs[i].doc);
	}
	idx_repair_flush(st);
	if (st->repair)
	{
		/* claims freed: who waits for their keys?  conflicts resolved? */
		bson_t	  **freed = palloc(sizeof(bson_t *) * Max(st->ndocs, 1));
		int			nfreed = 0;

		for (i = 0; i < st->ndocs; i++)
		{
			if (st->docs[i].matched)
				continue;
			if (idx_entry_is_claim(st->docs[i].doc))
				freed[nfreed++] = st->docs[i].doc;
			else if (st->def->unique)
				note_resolved(st, st->docs[i].doc);
		}
		note_waiting(st, freed, nfreed);
		pfree(freed);
	}

	st->counts.checked += nchecked;
	st->nitems = 0;
	st->ndocs = 0;
	MemoryContextReset(st->batch_cxt);
	return nchecked;
}
