/*-------------------------------------------------------------------------
 *
 * index_repair_named.c
 *		  The repair of facts named by their _ids, whether they exist or
 *		  not: what the change-stream applier calls for the facts a stream
 *		  names.
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/index/index_repair_named.c
 *
 * Two ways, both on the core of index_repair_batch.c (the entries each
 * fact should have against those the index holds, the fixes as one bulk
 * write):
 *
 * idx_repair_facts_known() checks first and confirms.  Most facts a
 * stream names were written through the FDW with their entries, and the
 * caller often knows them already (an insert's document, a delete): a
 * first pass takes those as given, reads the others and then their
 * entries, and only checks; a difference it finds is confirmed by reading
 * the entries again and then the facts (repair_entries_first()) and
 * written as one bulk.
 *
 * idx_repair_named_entries() and idx_repair_named_fix() repair at once,
 * for facts that must be read anyway (no event showed them): the entries
 * first, then the facts, which the caller reads once for several index
 * tables in between, then the fix.  Reading the entries before the facts
 * is what makes a fix safe without a second look: a write through the FDW
 * between the two reads shows as old entries and a new fact (it wrote the
 * new entries before the fact in ordered mode, and both at once in a
 * transaction), and the fix moves the index towards that newer state,
 * never back to an older one.
 *
 * Either way, a claim deleted frees its key for a fact that waited for it
 * as a unique key conflict: those facts are checked again.  So are they
 * after a batch of facts already read (idx_repair_fact_docs(), verify's
 * pass 1), which is why that entry point is here too.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "utils/memutils.h"

#include "core/handle.h"
#include "core/mongoc_compat.h"
#include "index/index_catalog.h"
#include "index/index_entry.h"
#include "index/index_repair.h"
#include "index/index_repair_int.h"

/* The image of a fact deleted (idx_repair_facts_known) */
const bson_t idx_repair_fact_gone;

/* One mention of a fact _id, for last_images() */
typedef struct Mention
{
	bson_t	   *key;			/* {"v": _id} */
	int			pos;			/* its place in the caller's list */
} Mention;

static int
compare_mentions(const void *a, const void *b)
{
	const Mention *ma = a;
	const Mention *mb = b;
	int			c = idx_repair_compare_bson(ma->key, mb->key);

	return c != 0 ? c : (ma->pos > mb->pos) - (ma->pos < mb->pos);
}

/*
 * For each of the distinct keys[0..nkeys-1] (sorted, from
 * idx_repair_distinct_ids()), the image of its last mention in
 * ids/images[0..n-1] (or NULL).  The caller leaves no image for a fact
 * whose last mention need not be its last change (on mongos, a shard-key
 * change's delete and insert come in either order: applier_apply.c).
 */
static const bson_t **
last_images(const bson_value_t *ids, const bson_t *const *images, int n,
			bson_t **keys, int nkeys)
{
	Mention    *m = palloc(sizeof(Mention) * Max(n, 1));
	const bson_t **known = palloc0(sizeof(bson_t *) * Max(nkeys, 1));
	int			i,
				k = 0;

	for (i = 0; i < n; i++)
	{
		m[i].key = idx_repair_wrap_value(&ids[i]);
		m[i].pos = i;
	}
	qsort(m, n, sizeof(Mention), compare_mentions);
	for (i = 0; i < n; i++)
	{
		if (i + 1 < n && idx_repair_compare_bson(m[i].key, m[i + 1].key) == 0)
			continue;			/* not the last mention of its _id */
		while (k < nkeys && idx_repair_compare_bson(keys[k], m[i].key) < 0)
			k++;
		if (k < nkeys && idx_repair_compare_bson(keys[k], m[i].key) == 0)
			known[k] = images[m[i].pos];
	}
	return known;
}

/*
 * Read the facts named by keys[0..nkeys-1] (one find by _id) into
 * st->items: those that exist, with the entries they should have, and
 * those that are gone.  With "images", a fact whose images[i] is set is
 * taken from there (IDX_REPAIR_GONE: gone) and not read.
 */
static void
read_named_facts(IdxRepairState *st, bson_t **keys, int nkeys,
				 const bson_t *const *images)
{
	bson_t		projection = BSON_INITIALIZER;
	bson_t	  **unknown = keys;
	int			nunknown = nkeys;
	ReadDoc    *facts;
	int			nfacts;
	int			i;

	if (images != NULL)
	{
		unknown = palloc(sizeof(bson_t *) * Max(nkeys, 1));
		nunknown = 0;
		for (i = 0; i < nkeys; i++)
			if (images[i] == NULL)
				unknown[nunknown++] = keys[i];
	}
	st->ndocs = 0;
	if (nunknown > 0)
	{
		idx_repair_projection(st, &projection);
		idx_repair_lookup(st, st->facts, "_id", unknown, nunknown,
						  &projection, false, idx_repair_facts_what(st));
		bson_destroy(&projection);
	}
	facts = st->docs;
	nfacts = st->ndocs;

	st->items = palloc(sizeof(FactItem) * Max(nkeys + nfacts, 1));
	st->nitems = 0;
	for (i = 0; i < nkeys; i++)
	{
		const bson_t *image = images ? images[i] : NULL;

		if (image == IDX_REPAIR_GONE ||
			(image == NULL && nunknown > 0 &&
			 idx_repair_find_doc(st, keys[i]) == NULL))
			idx_repair_add_gone(st, keys[i]);
		else if (image != NULL)
			idx_repair_add_fact(st, image);
	}
	for (i = 0; i < nfacts; i++)
		idx_repair_add_fact(st, facts[i].doc);
}

/*
 * Repair the named facts reading their entries first, then the facts.  A
 * write through the FDW that commits between the two reads then shows as
 * old entries and new facts, and the fix moves the index towards the newer
 * state (which that write also wrote), never back to an older one.
 */
static int
repair_entries_first(IdxRepairState *st, bson_t **keys, int nkeys)
{
	ReadDoc    *entries;
	int			nentries;

	idx_repair_lookup(st, st->index, IDX_ENTRY_FACT_ID, keys, nkeys,
					  NULL, true, idx_repair_index_what(st));
	entries = st->docs;
	nentries = st->ndocs;
	read_named_facts(st, keys, nkeys, NULL);
	st->docs = entries;
	st->ndocs = nentries;
	return idx_repair_compare_batch(st);
}

/*
 * Check (and, in repair mode, repair) the entries of the facts whose _ids
 * are ids[0..n-1], whether the facts exist or not: one find of the facts
 * by {_id: {$in: [...]}}, one of their entries by {id: {$in: [...]}}.  The
 * entries of a fact that is gone are orphans.  A repeated _id counts once.
 * This is what the change-stream applier calls for the _ids a stream
 * names, most of them written through the FDW with their entries: so a
 * repair first only checks, and writes only a difference it confirms by
 * reading the entries again, then the facts (repair_entries_first()), as
 * one bulk write.  The counts are those of the confirmed difference.  A
 * fact in a unique key conflict is repaired too (its conflict entry is
 * checked there), and reported to st->on_conflict then.  A claim deleted
 * frees its key for a fact that waited for it as a conflict: those facts
 * are checked again (idx_repair_recheck_waiting()).  Returns how many
 * facts were checked (those that exist and convert, and those that are
 * gone).
 */
static int
repair_ids(IdxRepairState *st, const bson_value_t *ids,
		   const bson_t *const *images, int n)
{
	MemoryContext oldcxt = MemoryContextSwitchTo(st->batch_cxt);
	bson_t	  **keys;
	int			nkeys = idx_repair_distinct_ids(ids, n, &keys);
	const bson_t **known = images ? last_images(ids, images, n, keys, nkeys)
		: NULL;
	VerifyCounts before = st->counts;
	bool		repair = st->repair;
	IdxConflictCallback on_conflict = st->on_conflict;
	int			result;

	/* a conflict is reported by the repair below, which it leads to */
	st->repair = false;
	st->on_conflict = repair ? NULL : on_conflict;
	read_named_facts(st, keys, nkeys, known);
	result = idx_repair_check_batch(st);
	st->repair = repair;
	st->on_conflict = on_conflict;
	if (repair && (st->counts.missing != before.missing ||
				   st->counts.stale != before.stale ||
				   st->counts.orphan != before.orphan ||
				   st->counts.conflicts != before.conflicts))
	{
		/* keys live in batch_cxt, reset by the check: compute them again */
		MemoryContextSwitchTo(st->batch_cxt);
		nkeys = idx_repair_distinct_ids(ids, n, &keys);
		st->counts = before;
		result = repair_entries_first(st, keys, nkeys);
	}
	MemoryContextSwitchTo(oldcxt);
	return result;
}

/*
 * Check again the facts that waited for a claim the batch freed (noted by
 * index_repair_batch.c): the first to want a freed claim takes it.  They
 * are not counted as checked twice.  A round frees no claim unless the
 * facts changed meanwhile; at most a few rounds.
 */
void
idx_repair_recheck_waiting(IdxRepairState *st)
{
	int			round;

	for (round = 0; round < IDX_REPAIR_CLAIM_ATTEMPTS && st->nwaiting > 0;
		 round++)
	{
		int			n = st->nwaiting;
		bson_t	  **waiting = st->waiting;
		bson_value_t *ids;
		int64		checked = st->counts.checked;
		int			i;

		ids = MemoryContextAlloc(st->wait_cxt, sizeof(bson_value_t) * n);
		for (i = 0; i < n; i++)
		{
			bson_iter_t iter;

			if (!bson_iter_init_find(&iter, waiting[i], "v"))
				elog(ERROR, "invalid fact _id");
			ids[i] = *bson_iter_value(&iter);	/* points into waiting[i] */
		}
		st->waiting = NULL;
		st->nwaiting = st->maxwaiting = 0;
		repair_ids(st, ids, NULL, n);
		st->counts.checked = checked;
	}
	st->waiting = NULL;
	st->nwaiting = st->maxwaiting = 0;
	MemoryContextReset(st->wait_cxt);
}

/*
 * Repairing a unique index, the facts ids[0..n-1] were repaired: those that
 * st->on_waiters says are in a conflict with one of them as the holder
 * wait too.  The batch finds them only when this repair deletes the
 * claim; the claim may already be gone (see index_conflict.c), and then
 * nothing else would ever hand them the key.  A fact whose holder still
 * has the key only costs a check.
 */
static void
note_waiters(IdxRepairState *st, const bson_value_t *ids, int n)
{
	MemoryContext oldcxt;
	bson_t	  **holders;
	bson_t	  **facts;
	int			nholders;
	int			nfacts;
	int			i;

	if (!st->repair || !st->def->unique || st->on_waiters == NULL)
		return;
	oldcxt = MemoryContextSwitchTo(st->wait_cxt);
	nholders = idx_repair_distinct_ids(ids, n, &holders);
	nfacts = st->on_waiters(st, holders, nholders, &facts, st->conflict_arg);
	for (i = 0; i < nfacts; i++)
		idx_repair_add_waiting_id(st, facts[i]);
	MemoryContextSwitchTo(oldcxt);
}

/*
 * repair_ids(), then the facts that waited for a claim it freed, or (with
 * st->on_waiters) for one that a named fact held.
 */
int
idx_repair_facts(IdxRepairState *st, const bson_value_t *ids, int n)
{
	return idx_repair_facts_known(st, ids, NULL, n);
}

/*
 * idx_repair_facts() for a caller that may know the facts: images[i] is
 * the fact ids[i] as of a change the caller saw (IDX_REPAIR_GONE: deleted
 * then), or NULL if unknown; of an _id named more than once, its last
 * mention counts.  The first, checking pass takes a known fact as it is
 * given instead of reading it; whatever difference it finds is confirmed
 * by reading the entries and then the facts as they are now, as ever, so
 * a fact that has changed since only costs that second look.  The
 * change-stream applier gives the documents of insert and replace events
 * and the deletes: for a write through the FDW, which wrote the entries
 * before the facts, its first pass then reads just the entries.
 */
int
idx_repair_facts_known(IdxRepairState *st, const bson_value_t *ids,
					   const bson_t *const *images, int n)
{
	int			result = repair_ids(st, ids, images, n);

	note_waiters(st, ids, n);
	idx_repair_recheck_waiting(st);
	return result;
}


/*
 * The first half of a direct repair of the facts ids[0..n-1] (see the file
 * header): read their entries (one find by {id: {$in: [...]}}), kept in
 * "st" until idx_repair_named_fix().
 */
void
idx_repair_named_entries(IdxRepairState *st, const bson_value_t *ids, int n)
{
	MemoryContext oldcxt = MemoryContextSwitchTo(st->batch_cxt);

	st->named_nkeys = idx_repair_distinct_ids(ids, n, &st->named_keys);
	idx_repair_lookup(st, st->index, IDX_ENTRY_FACT_ID, st->named_keys,
					  st->named_nkeys, NULL, true, idx_repair_index_what(st));
	st->named_entries = st->docs;
	st->named_nentries = st->ndocs;
	st->ndocs = 0;
	MemoryContextSwitchTo(oldcxt);
}

/*
 * The second half: the facts as "facts" read them (after the entries; a
 * named fact it lacks is gone), compared with the entries read before and
 * fixed; then the facts that waited for a claim this freed, or (with
 * st->on_waiters) for one that a named fact held.  Returns how many facts
 * were checked.
 */
int
idx_repair_named_fix(IdxRepairState *st, IdxRepairState *facts,
					 const bson_value_t *ids, int n)
{
	MemoryContext oldcxt = MemoryContextSwitchTo(st->batch_cxt);
	const bson_t **known = palloc(sizeof(bson_t *) * Max(st->named_nkeys, 1));
	int			result;
	int			i;

	for (i = 0; i < st->named_nkeys; i++)
	{
		ReadDoc    *rd = idx_repair_find_doc(facts, st->named_keys[i]);

		known[i] = rd != NULL ? rd->doc : IDX_REPAIR_GONE;
	}
	read_named_facts(st, st->named_keys, st->named_nkeys, known);
	st->facts_read_at = facts->facts_read_at;
	st->docs = st->named_entries;
	st->ndocs = st->named_nentries;
	result = idx_repair_compare_batch(st);	/* resets batch_cxt */
	st->named_keys = NULL;
	st->named_entries = NULL;
	st->named_nkeys = st->named_nentries = 0;
	MemoryContextSwitchTo(oldcxt);
	note_waiters(st, ids, n);
	idx_repair_recheck_waiting(st);
	return result;
}

/*
 * Check (and repair) a batch of facts already read (each with the
 * projection of idx_repair_projection()): the entries each should have
 * against those the index holds for them.  A fact whose values do not
 * convert is counted and skipped.  Returns how many facts were checked;
 * st->batch_cxt is reset, so "facts" may live there.
 */
int
idx_repair_fact_docs(IdxRepairState *st, bson_t **facts, int n)
{
	MemoryContext oldcxt = MemoryContextSwitchTo(st->batch_cxt);
	int			i;
	int			result;

	st->items = palloc(sizeof(FactItem) * Max(n, 1));
	st->nitems = 0;
	for (i = 0; i < n; i++)
		idx_repair_add_fact(st, facts[i]);
	result = idx_repair_check_batch(st);
	MemoryContextSwitchTo(oldcxt);
	idx_repair_recheck_waiting(st);
	return result;
}
