/*-------------------------------------------------------------------------
 *
 * applier_apply.c
 *		  The applier's work on one batch of changed facts: which index
 *		  tables need which of them, one read of the facts they share, and
 *		  the repair of each index table as its owner.
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/applier/applier_apply.c
 *
 * applier_stream.c gathers, per fact collection, the _ids a batch of
 * events names (CollIds), with what each event said of its fact: the
 * document of an insert or a replace, the delete, or an update's
 * updateDescription, and the marker of a transaction through the FDW.
 * For each index table of the collection, the events it needs not apply
 * are left out first (skip_events(): a marker that counts for it, an
 * update of fields it does not use).  Each index table is then repaired
 * for the rest (index_repair_named.c), in one of two ways (below): a
 * first, checking pass that takes the facts it knows as they are given
 * and reads the others, then reads their entries, and writes only a
 * difference it confirms by reading again; or, when it knows none of
 * them, its entries read first and then the facts, and the difference
 * written at once.
 *
 * One read of the facts.  The facts an event did not show (updates, and
 * all of a transaction whose marker was skipped for some index table) are
 * read once per batch for all the index tables of one foreign table that
 * need them, with the union of their projections.
 *
 * - An index table that knows none of its facts (every event it applies
 *   is an update, say an outside client's) is repaired directly
 *   (index_repair_named.c): the entries of each such index table of the
 *   foreign table are read first, then all their facts once, and each
 *   writes its difference at once.  Reading the entries before the facts
 *   is what the confirming second look of a check relies on, so none is
 *   needed: an outside update of fields of three index tables costs three
 *   reads of entries and one of facts, where checking and confirming cost
 *   ten.
 * - The others check first (index_repair_named.c): the facts they lack
 *   are read once for all of them, before their entries, and handed to
 *   each as known, as an event's document is; a difference is then
 *   confirmed by reading that index table's entries and then the facts
 *   again before anything is written.  An index table alone reads them
 *   itself.  A write through the FDW, which already wrote its entries,
 *   thus costs one read of the facts for all index tables (an UPDATE of a
 *   column two of them use: one read, not two) and one of entries each.
 *
 * Facts moved between shards.  The image of a fact is its last mention's
 * in the batch, except on mongos for a fact a batch shows both deleted and
 * as a document: it is read (forget_moved_images()), since the delete and
 * the insert of a change of its shard key come in either order.
 *
 * Claims left to writes in flight.  Every repair here leaves alone the
 * young unique claims that a write in ordered mode may have made before
 * its fact, a write that was running when the repair read the facts
 * (index_claims.h); their facts are noted in AppStream.spared and checked
 * again at the end of a later batch, once every such write that began by
 * the claim's time is over.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/relation.h"
#include "commands/progress.h"
#include "miscadmin.h"
#include "nodes/bitmapset.h"
#include "utils/memutils.h"
#include "utils/rel.h"

#include "applier/applier.h"
#include "core/deparse.h"
#include "core/handle.h"
#include "core/mongoc_compat.h"
#include "index/index_claims.h"
#include "index/index_conflict.h"
#include "index/index_entry.h"
#include "index/index_repair.h"

/* What one index table applies of a batch's facts of its collection */
typedef struct IndexPlan
{
	AppIndex   *ix;
	bson_value_t *ids;			/* the _ids it applies */
	const bson_t **images;		/* what is known of each; NULL: not yet */
	int			n;
	bool		direct;			/* none known: repaired directly */
	int64		written;		/* entries written */
} IndexPlan;


/* ----------------------------------------------------------------
 *		Repairing one index table
 * ----------------------------------------------------------------
 */

/*
 * Set up "rs" for the repair of index "ix" (definition "def", of the open
 * foreign table "rel") by the applier: its conflicts found and resolved
 * become rows of idxtable.conflicts, which also say who waits for a key a
 * fact of the batch held.
 */
static void
begin_repair(IdxRepairState *rs, AppIndex *ix, IdxIndexDef *def,
			 Relation rel)
{
	idx_repair_begin(rs, def, idx_get_table_info(ix->relid),
					 RelationGetDescr(rel), applier.client,
					 applier.servername, true);
	rs->spare_in_flight = true;
	rs->on_conflict = idx_conflict_callback;
	rs->on_resolved = idx_conflict_resolved_callback;
	rs->on_waiters = idx_conflict_waiting_callback;
}

/*
 * Note fact "fact" ({"v": _id}) of index "ix" of stream "s", whose claim
 * of time "time" a repair left to a write in flight (a copy, in
 * s->spare_cxt).
 */
static void
note_spared(AppStream *s, AppIndex *ix, const bson_t *fact, int64 time)
{
	MemoryContext oldcxt;
	AppSpared  *sp;

	if (s->spare_cxt == NULL)
		s->spare_cxt = AllocSetContextCreate(TopMemoryContext,
											 "idxtable_fdw applier spared claims",
											 ALLOCSET_SMALL_SIZES);
	oldcxt = MemoryContextSwitchTo(s->spare_cxt);
	sp = palloc(sizeof(AppSpared));
	sp->ix = ix;
	sp->fact = idx_bson_pcopy(fact);
	sp->time = time;
	s->spared = lappend(s->spared, sp);
	MemoryContextSwitchTo(oldcxt);
}

/*
 * Note each IdxSparedClaim of "spared", of index "ix", in s->spared.
 */
static void
note_all_spared(AppStream *s, AppIndex *ix, List *spared)
{
	ListCell   *lc;

	foreach(lc, spared)
	{
		IdxSparedClaim *sc = lfirst(lc);

		note_spared(s, ix, sc->fact, sc->time);
	}
}

/*
 * After the repair of index "ix" of stream "s" by "rs" (released): the
 * facts whose claims it left to writes in flight, noted in s->spared; the
 * entries it wrote, noted in ix->wrote (a conflict entry counts too).
 */
static int64
end_repair(AppStream *s, IdxRepairState *rs, AppIndex *ix)
{
	int64		written = rs->counts.missing + rs->counts.stale +
		rs->counts.orphan;

	note_all_spared(s, ix, rs->spared);
	if (written > 0 || rs->counts.conflicts > 0)
		ix->wrote = true;
	MemoryContextDelete(rs->batch_cxt);
	return written;
}

/*
 * index_verify.c's repair pass over every fact and every entry of index
 * "ix" (definition "def", of the open foreign table "rel"); returns the
 * entries written.
 */
static int64
repair_all(AppStream *s, AppIndex *ix, IdxIndexDef *def, Relation rel)
{
	VerifyCounts counts;
	List	   *spared = NIL;

	idx_verify_run(def, rel, true, PROGRESS_CREATEIDX_COMMAND_REINDEX,
				   PROGRESS_CREATEIDX_PHASE_VALIDATE_TABLESCAN, true, &counts,
				   &spared);
	note_all_spared(s, ix, spared);
	return counts.missing + counts.stale + counts.orphan;
}

/*
 * Bring index "ix" up to date with the facts whose _ids are ids[0..n-1]
 * (all its facts if ids is NULL), as the table owner in a
 * security-restricted operation; returns the entries written.  images
 * (or NULL) holds what is known of the facts: what their events said
 * (applier_stream.c, event_image()) or the shared read below.
 */
int64
idx_applier_repair(AppStream *s, AppIndex *ix, const bson_value_t *ids,
				   const bson_t *const *images, int n)
{
	Oid			save_userid;
	int			save_sec;
	Relation	rel;
	IdxIndexDef *def = NULL;
	IdxRepairState rs;
	int64		written = 0;

	GetUserIdAndSecContext(&save_userid, &save_sec);
	SetUserIdAndSecContext(applier.slot->ownerid,
						   save_sec | SECURITY_RESTRICTED_OPERATION);
	rel = try_relation_open(ix->relid, AccessShareLock);
	if (rel != NULL)
		def = idx_applier_current_def(ix);
	if (def != NULL && ids == NULL)
		written = repair_all(s, ix, def, rel);
	else if (def != NULL)
	{
		begin_repair(&rs, ix, def, rel);
		PG_TRY();
		{
			idx_repair_facts_known(&rs, ids, images, n);
		}
		PG_FINALLY();
		{
			idx_repair_release(&rs);
		}
		PG_END_TRY();
		written = end_repair(s, &rs, ix);
	}
	if (rel != NULL)
		relation_close(rel, AccessShareLock);
	SetUserIdAndSecContext(save_userid, save_sec);
	if (written > 0)
		ix->wrote = true;
	return written;
}


/* ----------------------------------------------------------------
 *		Which events an index table applies
 * ----------------------------------------------------------------
 */

/*
 * Does marker "m" list index "defid" for collection "collection"?
 */
static bool
marker_lists(Marker *m, const char *collection, const char *defid)
{
	bson_iter_t iter,
				items,
				item,
				ids;

	if (!bson_iter_init_find(&iter, &m->doc, "maintained") ||
		!BSON_ITER_HOLDS_ARRAY(&iter) || !bson_iter_recurse(&iter, &items))
		return false;
	while (bson_iter_next(&items))
	{
		const char *c;

		if (!BSON_ITER_HOLDS_DOCUMENT(&items) ||
			!bson_iter_recurse(&items, &item) ||
			!bson_iter_find(&item, "c") || !BSON_ITER_HOLDS_UTF8(&item))
			continue;
		c = bson_iter_utf8(&item, NULL);
		if (strcmp(c, collection) != 0 ||
			!bson_iter_recurse(&items, &item) ||
			!bson_iter_find(&item, "i") || !BSON_ITER_HOLDS_ARRAY(&item) ||
			!bson_iter_recurse(&item, &ids))
			continue;
		while (bson_iter_next(&ids))
			if (BSON_ITER_HOLDS_UTF8(&ids) &&
				strcmp(bson_iter_utf8(&ids, NULL), defid) == 0)
				return true;
	}
	return false;
}

/*
 * May index "ix" take marker "m" for its write (see the file header)?
 */
static bool
marker_counts(AppIndex *ix, Marker *m, const char *collection)
{
	return ix->state == 'v' && m->after != 0 && ix->fixed_through != 0 &&
		ix->fixed_through <= m->after &&
		marker_lists(m, collection, ix->status.definition_id);
}

/*
 * Which events of "c" index "ix" needs not apply (skip[i]): those whose
 * marker counts for it, and updates that change none of its fields
 * (applier_fields.c).  Sets *marker_skipped if a marker made one skip.
 */
static bool
skip_events(AppIndex *ix, CollIds *c, bool *skip, bool *marker_skipped)
{
	List	   *fields = NIL;
	bool		any = false;
	bool		by_fields;
	int			i;

	*marker_skipped = false;
	by_fields = c->described && idx_applier_index_fields(ix, &fields);
	for (i = 0; i < c->n; i++)
	{
		if (c->marks[i] != NULL &&
			marker_counts(ix, c->marks[i], c->collection))
			skip[i] = *marker_skipped = true;
		else
			skip[i] = by_fields && c->changes[i] != NULL &&
				!idx_applier_update_touches(c->changes[i], fields);
		any = any || skip[i];
	}
	/* freeing a conflicting key must reach the repair (file header) */
	if (*marker_skipped && idx_applier_has_conflicts(ix))
	{
		*marker_skipped = false;
		any = false;
		for (i = 0; i < c->n; i++)
		{
			skip[i] = c->marks[i] == NULL && by_fields &&
				c->changes[i] != NULL &&
				!idx_applier_update_touches(c->changes[i], fields);
			any = any || skip[i];
		}
	}
	return any;
}

/*
 * The _ids of "c" to apply to index "ix" (in *ids, their images in
 * *images; returns how many): those of the events skip_events() keeps.
 */
static int
ids_to_apply(AppIndex *ix, CollIds *c, bson_value_t **ids,
			 const bson_t *const **images)
{
	bool	   *skip;
	bool		marker_skipped;
	const bson_t **kept_images;
	int			i,
				n = 0;

	*ids = c->ids;
	*images = c->images;
	if (!c->marked && !c->described)
		return c->n;
	skip = palloc0(sizeof(bool) * Max(c->n, 1));
	if (!skip_events(ix, c, skip, &marker_skipped))
		return c->n;
	*ids = palloc(sizeof(bson_value_t) * Max(c->n, 1));
	kept_images = palloc(sizeof(bson_t *) * Max(c->n, 1));
	for (i = 0; i < c->n; i++)
	{
		if (skip[i])
			continue;
		kept_images[n] = c->images[i];
		(*ids)[n++] = c->ids[i];
	}

	/*
	 * An image stays right for the index when a later event of its _id was
	 * skipped for its fields (they did not change), not when a marker's
	 * transaction, which may have changed them, was skipped.
	 */
	*images = marker_skipped ? NULL : kept_images;
	return n;
}


/* ----------------------------------------------------------------
 *		One read of the facts
 * ----------------------------------------------------------------
 */

/*
 * The plan of index "ix" for the facts of "c": the _ids it applies, with a
 * copy of what is known of them that the shared read may fill in.
 */
static void
plan_index(IndexPlan *p, AppIndex *ix, CollIds *c)
{
	const bson_t *const *images;
	int			i;

	p->ix = ix;
	p->n = ids_to_apply(ix, c, &p->ids, &images);
	p->images = palloc(sizeof(bson_t *) * Max(p->n, 1));
	for (i = 0; i < p->n; i++)
		p->images[i] = images ? images[i] : NULL;
}

/*
 * Does plan "p" still need facts read?
 */
static bool
needs_facts(const IndexPlan *p)
{
	int			i;

	for (i = 0; i < p->n; i++)
		if (p->images[i] == NULL)
			return true;
	return false;
}

/*
 * The distinct _ids the plans group[0..ng-1] do not know yet, as keys
 * ({"v": _id}, index_repair.c).
 */
static int
unknown_keys(IndexPlan **group, int ng, bson_t ***keys)
{
	int			total = 0;
	int			n = 0;
	int			g,
				i;
	bson_value_t *unknown;

	for (g = 0; g < ng; g++)
		total += group[g]->n;
	unknown = palloc(sizeof(bson_value_t) * Max(total, 1));
	for (g = 0; g < ng; g++)
		for (i = 0; i < group[g]->n; i++)
			if (group[g]->images[i] == NULL)
				unknown[n++] = group[g]->ids[i];
	return idx_repair_distinct_ids(unknown, n, keys);
}

/*
 * Read the facts the plans group[0..ng-1] do not know yet, once, with the
 * projection of every column "attrs" names, into st->docs ("st" is set up
 * for any index of their table).
 */
static void
read_group_facts(IdxRepairState *st, IndexPlan **group, int ng,
				 Bitmapset *attrs)
{
	bson_t		projection = BSON_INITIALIZER;
	bson_t	  **keys;
	int			nkeys = unknown_keys(group, ng, &keys);

	idx_build_projection(&projection, st->info, attrs);
	idx_repair_lookup(st, st->facts, "_id", keys, nkeys, &projection, false,
					  idx_repair_facts_what(st));
	bson_destroy(&projection);
}

/*
 * The shared read for the plans group[0..ng-1] through "st": each plan
 * then knows the facts it lacked as read, or as gone.
 */
static void
lookup_shared(IdxRepairState *st, IndexPlan **group, int ng,
			  Bitmapset *attrs)
{
	int			g,
				i;

	read_group_facts(st, group, ng, attrs);
	for (g = 0; g < ng; g++)
		for (i = 0; i < group[g]->n; i++)
		{
			ReadDoc    *rd;

			if (group[g]->images[i] != NULL)
				continue;
			rd = idx_repair_find_doc(st,
									 idx_repair_wrap_value(&group[g]->ids[i]));
			group[g]->images[i] = rd ? rd->doc : IDX_REPAIR_GONE;
		}
}

/*
 * The shared read for the plans group[0..ng-1], all of one foreign table,
 * as its owner in a security-restricted operation (as the repairs read).
 * An index table dropped meanwhile adds no columns (its repair does
 * nothing); with none left, nothing is read.
 */
static void
read_shared_facts(IndexPlan **group, int ng)
{
	Oid			save_userid;
	int			save_sec;
	Relation	rel;
	IdxIndexDef *def = NULL;
	Bitmapset  *attrs = NULL;
	IdxRepairState rs;
	int			g;

	GetUserIdAndSecContext(&save_userid, &save_sec);
	SetUserIdAndSecContext(applier.slot->ownerid,
						   save_sec | SECURITY_RESTRICTED_OPERATION);
	rel = try_relation_open(group[0]->ix->relid, AccessShareLock);
	for (g = 0; rel != NULL && g < ng; g++)
	{
		IdxIndexDef *d = idx_applier_current_def(group[g]->ix);

		if (d != NULL)
		{
			attrs = bms_union(attrs, idx_entry_columns(d));
			def = d;
		}
	}
	if (def != NULL)
	{
		idx_repair_begin(&rs, def, idx_get_table_info(group[0]->ix->relid),
						 RelationGetDescr(rel), applier.client,
						 applier.servername, false);
		PG_TRY();
		{
			lookup_shared(&rs, group, ng, attrs);
		}
		PG_FINALLY();
		{
			idx_repair_release(&rs);
		}
		PG_END_TRY();
		MemoryContextDelete(rs.batch_cxt);
	}
	if (rel != NULL)
		relation_close(rel, AccessShareLock);
	SetUserIdAndSecContext(save_userid, save_sec);
}

/*
 * Share the read of the facts among the plans[0..nplans-1] of each foreign
 * table that two or more of them need facts of (see the file header).
 */
static void
share_facts_read(IndexPlan *plans, int nplans)
{
	IndexPlan **group = palloc(sizeof(IndexPlan *) * Max(nplans, 1));
	bool	   *done = palloc0(sizeof(bool) * Max(nplans, 1));
	int			i,
				j;

	for (i = 0; i < nplans; i++)
	{
		int			ng = 0;

		if (done[i] || plans[i].direct || !needs_facts(&plans[i]))
			continue;
		for (j = i; j < nplans; j++)
			if (!done[j] && !plans[j].direct &&
				plans[j].ix->relid == plans[i].ix->relid &&
				needs_facts(&plans[j]))
			{
				group[ng++] = &plans[j];
				done[j] = true;
			}
		if (ng > 1)
			read_shared_facts(group, ng);
	}
}

/* ----------------------------------------------------------------
 *		Facts moved between shards
 * ----------------------------------------------------------------
 */

/* One mention of a fact _id in a batch, for forget_moved_images() */
typedef struct IdMention
{
	bson_t	   *key;			/* {"v": _id} */
	int			pos;			/* its place in the CollIds */
} IdMention;

/*
 * Order of mentions by _id (as bytes: equal _ids are equal), then by
 * place.
 */
static int
compare_id_mentions(const void *a, const void *b)
{
	const IdMention *ma = a;
	const IdMention *mb = b;
	int			c;

	if (ma->key->len != mb->key->len)
		return ma->key->len < mb->key->len ? -1 : 1;
	c = memcmp(bson_get_data(ma->key), bson_get_data(mb->key),
			   ma->key->len);
	if (c != 0)
		return c;
	return (ma->pos > mb->pos) - (ma->pos < mb->pos);
}

/*
 * On mongos, forget what the events of "c" showed of each fact whose
 * mentions include both a delete and a document: it is read instead, once
 * for all index tables.  mongos changes a document's shard key by a delete
 * on the old shard and an insert on the new one, in one transaction whose
 * parts' events come in either order, so the last mention (the delete,
 * when the insert came first) need not be the fact as it is.  On a replica
 * set the events of a fact come in the order of its changes: its last
 * mention is right, and an insert and a delete in one batch (a write in
 * ordered mode) cost no read.
 */
static void
forget_moved_images(AppStream *s, CollIds *c)
{
	IdMention  *m;
	bool		gone = false;
	bool		doc = false;
	int			i,
				j,
				k;

	for (i = 0; i < c->n; i++)
	{
		gone = gone || c->images[i] == IDX_REPAIR_GONE;
		doc = doc || (c->images[i] != NULL &&
					  c->images[i] != IDX_REPAIR_GONE);
	}
	if (!s->mongos || !gone || !doc)
		return;
	m = palloc(sizeof(IdMention) * c->n);
	for (i = 0; i < c->n; i++)
	{
		m[i].key = idx_repair_wrap_value(&c->ids[i]);
		m[i].pos = i;
	}
	qsort(m, c->n, sizeof(IdMention), compare_id_mentions);
	for (i = 0; i < c->n; i = j)
	{
		gone = doc = false;
		for (j = i; j < c->n && m[j].key->len == m[i].key->len &&
			 memcmp(bson_get_data(m[j].key), bson_get_data(m[i].key),
					m[i].key->len) == 0; j++)
		{
			const bson_t *image = c->images[m[j].pos];

			gone = gone || image == IDX_REPAIR_GONE;
			doc = doc || (image != NULL && image != IDX_REPAIR_GONE);
		}
		if (gone && doc)
			for (k = i; k < j; k++)
				c->images[m[k].pos] = NULL;
	}
}


/* ----------------------------------------------------------------
 *		Direct repairs
 * ----------------------------------------------------------------
 */

/*
 * Does plan "p" know none of its facts (updates only, or a marker's
 * transaction skipped for another index table)?  Then they must all be
 * read, and its repair can be direct (see the file header).
 */
static bool
knows_none(const IndexPlan *p)
{
	int			i;

	for (i = 0; i < p->n; i++)
		if (p->images[i] != NULL)
			return false;
	return p->n > 0;
}

/*
 * The direct repair of the plans group[0..ng-1] of the open foreign table
 * "rel": the entries of each, then one read of all their facts with the
 * union of their columns, then each fix (index_repair_named.c).
 */
static void
repair_direct_in(AppStream *s, Relation rel, IndexPlan **group, int ng)
{
	IdxRepairState *rs = palloc0(sizeof(IdxRepairState) * ng);
	IdxIndexDef **defs = palloc0(sizeof(IdxIndexDef *) * ng);
	IdxRepairState facts;
	volatile bool facts_begun = false;
	Bitmapset  *attrs = NULL;
	int			g;

	PG_TRY();
	{
		for (g = 0; g < ng; g++)
		{
			defs[g] = idx_applier_current_def(group[g]->ix);
			if (defs[g] == NULL)
				continue;
			begin_repair(&rs[g], group[g]->ix, defs[g], rel);
			idx_repair_named_entries(&rs[g], group[g]->ids, group[g]->n);
			attrs = bms_union(attrs, idx_entry_columns(defs[g]));
			if (!facts_begun)
			{
				idx_repair_begin(&facts, defs[g], rs[g].info,
								 RelationGetDescr(rel), applier.client,
								 applier.servername, false);
				facts_begun = true;
			}
		}
		if (facts_begun)
			read_group_facts(&facts, group, ng, attrs);
		for (g = 0; g < ng; g++)
			if (defs[g] != NULL)
				idx_repair_named_fix(&rs[g], &facts, group[g]->ids,
									 group[g]->n);
	}
	PG_FINALLY();
	{
		for (g = 0; g < ng; g++)
			if (defs[g] != NULL)
				idx_repair_release(&rs[g]);
		if (facts_begun)
			idx_repair_release(&facts);
	}
	PG_END_TRY();
	for (g = 0; g < ng; g++)
		if (defs[g] != NULL)
			group[g]->written = end_repair(s, &rs[g], group[g]->ix);
	if (facts_begun)
		MemoryContextDelete(facts.batch_cxt);
}

/*
 * Repair the direct plans among plans[0..nplans-1], those of one foreign
 * table together, as its owner in a security-restricted operation.
 */
static void
repair_direct(AppStream *s, IndexPlan *plans, int nplans)
{
	IndexPlan **group = palloc(sizeof(IndexPlan *) * Max(nplans, 1));
	bool	   *done = palloc0(sizeof(bool) * Max(nplans, 1));
	Oid			save_userid;
	int			save_sec;
	int			i,
				j;

	GetUserIdAndSecContext(&save_userid, &save_sec);
	SetUserIdAndSecContext(applier.slot->ownerid,
						   save_sec | SECURITY_RESTRICTED_OPERATION);
	for (i = 0; i < nplans; i++)
	{
		Relation	rel;
		int			ng = 0;

		if (done[i] || !plans[i].direct)
			continue;
		for (j = i; j < nplans; j++)
			if (plans[j].direct && plans[j].ix->relid == plans[i].ix->relid)
			{
				group[ng++] = &plans[j];
				done[j] = true;
			}
		rel = try_relation_open(plans[i].ix->relid, AccessShareLock);
		if (rel == NULL)
			continue;			/* dropped: nothing to maintain */
		repair_direct_in(s, rel, group, ng);
		relation_close(rel, AccessShareLock);
	}
	SetUserIdAndSecContext(save_userid, save_sec);
}

/*
 * Apply the facts of "c" to each index table of "s" over its collection,
 * leaving out what each needs not apply: the index tables that know none
 * of their facts directly, the others checking first, with one read of
 * the facts for those of one foreign table (see the file header).  On
 * mongos the facts a batch shows both deleted and as a document are read
 * (forget_moved_images()).
 */
void
idx_applier_apply_facts(AppStream *s, CollIds *c)
{
	IndexPlan  *plans = palloc0(sizeof(IndexPlan) *
								Max(list_length(s->indexes), 1));
	int			nplans = 0;
	ListCell   *lc;
	int			i;

	forget_moved_images(s, c);
	foreach(lc, s->indexes)
	{
		AppIndex   *ix = lfirst(lc);

		if (strcmp(ix->collection, c->collection) != 0)
			continue;
		plan_index(&plans[nplans], ix, c);
		plans[nplans].direct = knows_none(&plans[nplans]);
		nplans++;
	}
	repair_direct(s, plans, nplans);
	share_facts_read(plans, nplans);
	for (i = 0; i < nplans; i++)
	{
		IndexPlan  *p = &plans[i];

		CHECK_FOR_INTERRUPTS();
		if (p->n > 0 && !p->direct)
			p->written = idx_applier_repair(s, p->ix, p->ids, p->images,
											p->n);
		if (p->n > 0)
		{
			p->ix->status.entries_written += p->written;
			s->repaired = true;
		}
		p->ix->status.events_applied += c->events;
	}
}


/* ----------------------------------------------------------------
 *		Claims left to writes in flight
 * ----------------------------------------------------------------
 */

/*
 * Forget the facts whose claims were left to writes in flight (the
 * stream is closed: they are read again after its stored position, which
 * idx_applier_save_position() keeps before them).
 */
void
idx_applier_forget_spared(AppStream *s)
{
	if (s->spare_cxt)
		MemoryContextDelete(s->spare_cxt);
	s->spare_cxt = NULL;
	s->spared = NIL;
}

/*
 * Repair, for each index table of "s", the facts of "spared" marked in
 * "due" (ndue of them).
 */
static void
repair_spared(AppStream *s, List *spared, const bool *due, int ndue)
{
	bson_value_t *ids = palloc(sizeof(bson_value_t) * ndue);
	ListCell   *lc,
			   *lc2;

	foreach(lc, s->indexes)
	{
		AppIndex   *ix = lfirst(lc);
		int			n = 0;

		foreach(lc2, spared)
		{
			AppSpared  *sp = lfirst(lc2);
			bson_iter_t iter;

			if (sp->ix == ix && due[foreach_current_index(lc2)] &&
				bson_iter_init_find(&iter, sp->fact, "v"))
				ids[n++] = *bson_iter_value(&iter);
		}
		if (n > 0)
			ix->status.entries_written +=
				idx_applier_repair(s, ix, ids, NULL, n);
	}
}

/*
 * Check again the facts whose young claims a repair left alone, once
 * every write in ordered mode that began by the claim's time is over
 * (index_claims.h): the claim of a fact written by then stays, and one
 * whose write failed or was overtaken by another client's is removed.
 * The others wait for a later batch.
 */
void
idx_applier_recheck_spared(AppStream *s)
{
	List	   *spared = s->spared;
	MemoryContext old_cxt = s->spare_cxt;
	bool	   *due;
	int			ndue = 0;
	ListCell   *lc;

	if (spared == NIL)
		return;
	due = palloc0(sizeof(bool) * list_length(spared));
	foreach(lc, spared)
	{
		due[foreach_current_index(lc)] =
			!idx_claims_write_since(((AppSpared *) lfirst(lc))->time,
									idx_claim_now_ms());
		ndue += due[foreach_current_index(lc)] ? 1 : 0;
	}
	if (ndue == 0)
		return;					/* all still wait, as they are */
	s->spared = NIL;
	s->spare_cxt = NULL;
	foreach(lc, spared)
	{
		AppSpared  *sp = lfirst(lc);

		if (!due[foreach_current_index(lc)])
			note_spared(s, sp->ix, sp->fact, sp->time);
	}
	repair_spared(s, spared, due, ndue);
	MemoryContextDelete(old_cxt);
}
