/*-------------------------------------------------------------------------
 *
 * index_repair_claims.c
 *		  The unique claims a repair finds missing: written, taken over from
 *		  a fact that lacks the key, or a unique key conflict.
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/index/index_repair_claims.c
 *
 * A unique index's entry whose key has no NULL is a claim: its _id lacks
 * the fact id, so MongoDB's _id index lets one fact hold the key.  When
 * the comparison of a batch (index_repair_batch.c) finds a fact's claim
 * missing, repairing, the batch's missing claims are inserted in one
 * unordered bulk, after the batch's other fixes, and each that meets a
 * duplicate key is taken over from a fact that lacks the key, as a write
 * would.
 *
 *		conflict	a unique claim the fact should have, held by another fact
 *					that has the key too (a client writing straight into
 *					MongoDB can make two facts share a unique key).  Not
 *					missing, and not taken over: it is counted and reported
 *					to st->on_conflict, which the applier and repair_index
 *					use to record it in idxtable.conflicts; the claim stays
 *					its holder's, and the fact has a conflict entry (the
 *					claim with its fact id) instead, so that reads through
 *					the index still find it.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "utils/memutils.h"

#include "core/convert.h"
#include "core/deparse.h"
#include "core/handle.h"
#include "core/mongoc_compat.h"
#include "core/protocol_read.h"
#include "core/remote_error.h"
#include "index/index_catalog.h"
#include "index/index_entry.h"
#include "index/index_repair.h"
#include "index/index_repair_int.h"

/*
 * Does the fact whose _id is the "v" of "wrapped_id" exist and have the
 * entry _id of "entry"?
 */
static bool
fact_has_entry(IdxRepairState *st, const bson_t *wrapped_id,
			   const bson_t *entry)
{
	bson_t		filter = BSON_INITIALIZER;
	bson_t		projection = BSON_INITIALIZER;
	bson_iter_t iter;
	bson_t	   *fact;
	bson_t	  **entries;
	int			n,
				e;
	bool		result = false;

	if (!bson_iter_init_find(&iter, wrapped_id, "v"))
		return false;
	idx_check_append(bson_append_iter(&filter, "_id", 3, &iter));
	idx_build_projection(&projection, st->info, st->attrs);
	fact = idx_repair_find_one(st, st->facts, &filter, &projection,
							   idx_repair_facts_what(st));
	bson_destroy(&filter);
	bson_destroy(&projection);
	if (fact == NULL || !idx_doc_id_is(fact, bson_iter_value(&iter)))
		return false;

	memset(st->nulls, true, sizeof(bool) * st->rowconv->natts);
	idx_document_to_row(st->rowconv, fact, st->values, st->nulls);
	n = idx_build_entries(st->def, st->values, st->nulls,
						  bson_iter_value(&iter), &entries);
	for (e = 0; e < n; e++)
	{
		if (!result && idx_entry_same_id(st->def, entries[e], entry))
			result = true;
		bson_destroy(entries[e]);
	}
	return result;
}

/*
 * The _id ({"v": ...}) of the fact that holds "claim" if that is another
 * fact than item's and it has the claim's key too: two facts share a
 * unique key, a conflict that repair cannot fix.  NULL if the claim is
 * item's own, or its holder lacks the key (a claim to take over).
 */
static bson_t *
conflicting_holder(IdxRepairState *st, const FactItem *item,
				   const bson_t *claim)
{
	bson_t	   *holder = idx_repair_wrap_field(claim, IDX_ENTRY_FACT_ID);

	if (holder == NULL || idx_bson_same_bytes(holder, item->id))
		return NULL;
	if (!fact_has_entry(st, holder, claim))
		return NULL;
	return holder;
}

/*
 * Verify mode: the conflicting holder (see conflicting_holder()) of the
 * claim that item's missing claim "ee" would be, or NULL.
 */
static bson_t *
claim_conflict(IdxRepairState *st, const FactItem *item,
			   const ExpectedEntry *ee)
{
	bson_t	   *key = idx_repair_entry_id_key(st, ee->entry);
	bson_t	   *claim = idx_repair_find_one(st, st->index, key, NULL,
											idx_repair_index_what(st));

	if (claim == NULL)
		return NULL;
	return conflicting_holder(st, item, claim);
}

static bool take_over_claim(IdxRepairState *st, const bson_t *claim,
							const ExpectedEntry *ee);

/*
 * Write item's missing unique claim "ee".  If another fact's entry holds
 * the key, take it over when that fact lacks the key.  When it has it, two
 * facts share a unique key: nothing is written, and the holder's _id
 * ({"v": ...}) is returned for the conflict to be reported; NULL when the
 * claim was written.  "taken": an insert of the claim has just failed
 * with a duplicate key (idx_repair_write_claims()), so the first attempt
 * looks for the holder at once.
 */
static bson_t *
fix_claim(IdxRepairState *st, const FactItem *item, const ExpectedEntry *ee,
		  bool taken)
{
	bson_t	   *holder_filter = idx_repair_entry_id_key(st, ee->entry);
	int			attempt;

	for (attempt = 0; attempt < IDX_REPAIR_CLAIM_ATTEMPTS; attempt++)
	{
		bson_t		reply;
		bson_error_t error;
		bson_t	   *claim;
		bson_t	   *holder;

		CHECK_FOR_INTERRUPTS();
		if (taken)
			taken = false;
		else if (mongoc_collection_insert_one(st->index, ee->entry, NULL,
											  &reply, &error))
		{
			bson_destroy(&reply);
			return NULL;
		}
		else
		{
			if (error.code != 11000)
			{
				bson_t	   *failed_reply = idx_own_reply(&reply);

				idx_report_reply_error(failed_reply, &error, st->servername,
									   idx_repair_index_what(st));
			}
			bson_destroy(&reply);
		}

		claim = idx_repair_find_one(st, st->index, holder_filter, NULL,
									idx_repair_index_what(st));
		if (claim == NULL)
			continue;			/* gone meanwhile: insert again */
		holder = conflicting_holder(st, item, claim);
		if (holder != NULL)
			return holder;
		if (take_over_claim(st, claim, ee))
			return NULL;
	}
	ereport(ERROR,
			(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
			 errmsg("could not repair the claim of a key of index \"%s\"",
					st->def->name),
			 errdetail("The claim kept changing while it was repaired."),
			 errhint("Retry when no other session writes the key.")));
	return NULL;				/* keep compiler quiet */
}

/*
 * Replace "claim", as it was read, by the claim "ee"; false if the claim
 * changed meanwhile.
 */
static bool
take_over_claim(IdxRepairState *st, const bson_t *claim,
				const ExpectedEntry *ee)
{
	bson_t	   *selector = idx_repair_read_filter(claim);
	bson_t		reply;
	bson_error_t error;
	bson_iter_t iter;
	bool		matched;

	if (!mongoc_collection_replace_one(st->index, selector, ee->entry, NULL,
									   &reply, &error))
	{
		bson_t	   *failed_reply = idx_own_reply(&reply);

		idx_report_reply_error(failed_reply, &error, st->servername,
							   idx_repair_index_what(st));
	}
	matched = bson_iter_init_find(&iter, &reply, "matchedCount") &&
		BSON_ITER_HOLDS_NUMBER(&iter) && bson_iter_as_int64(&iter) > 0;
	bson_destroy(&reply);
	return matched;
}

/*
 * Report to st->on_conflict the conflict of item's claim "ee" with the
 * fact "holder" ({"v": _id}).  "conflicts" counts facts in conflict, once
 * each however many of their keys other facts hold, as
 * idxtable.sync_status counts the facts of idxtable.conflicts.
 */
static void
report_conflict(IdxRepairState *st, FactItem *item,
				const ExpectedEntry *ee, const bson_t *holder)
{
	bson_iter_t fact_iter;
	bson_iter_t holder_iter;
	char	   *desc;

	if (item->nconflicts++ == 0)
		st->counts.conflicts++;
	if (st->on_conflict == NULL)
		return;
	if (!bson_iter_init_find(&fact_iter, item->id, "v") ||
		!bson_iter_init_find(&holder_iter, holder, "v"))
		elog(ERROR, "a unique key conflict without _ids");
	desc = idx_key_description(st->def, ee->keyvalues, ee->keynulls);
	st->on_conflict(st, desc, bson_iter_value(&fact_iter),
					bson_iter_value(&holder_iter), st->conflict_arg);
}


/*
 * The entry of a fact whose unique key's claim another fact holds: the
 * claim "claim" with the fact's _id ("v" of wrapped_id) added to its _id,
 * as an entry of a non-unique index or of a unique key with a NULL has it.
 */
static bson_t *
conflict_entry(const bson_t *claim, const bson_t *wrapped_id)
{
	bson_t		entry = BSON_INITIALIZER;
	bson_iter_t iter;
	bson_iter_t fact;
	bson_t	   *result;

	if (!bson_iter_init_find(&fact, wrapped_id, "v") ||
		!bson_iter_init(&iter, claim))
		elog(ERROR, "invalid unique key claim");
	while (bson_iter_next(&iter))
	{
		bson_iter_t key;
		bson_t		id;

		if (strcmp(bson_iter_key(&iter), "_id") != 0)
		{
			idx_check_append(bson_append_iter(&entry, NULL, 0, &iter));
			continue;
		}
		if (!BSON_ITER_HOLDS_DOCUMENT(&iter) || !bson_iter_recurse(&iter, &key))
			elog(ERROR, "invalid unique key claim");
		idx_check_append(BSON_APPEND_DOCUMENT_BEGIN(&entry, "_id", &id));
		while (bson_iter_next(&key))
			idx_check_append(bson_append_iter(&id, NULL, 0, &key));
		idx_check_append(bson_append_iter(&id, IDX_ENTRY_FACT_ID, -1, &fact));
		idx_check_append(bson_append_document_end(&entry, &id));
	}
	result = idx_bson_pcopy(&entry);
	bson_destroy(&entry);
	return result;
}

/*
 * item's claim "ee" is held by another fact that has the key too.  The
 * index has, instead of the claim, item's conflict entry (conflict_entry()),
 * so that reads through the index, which recheck every fact, still find
 * item: both facts have the key.  Check it as any entry; its absence is
 * part of the conflict, not counted as missing.
 */
static void
check_conflict_entry(IdxRepairState *st, FactItem *item, ExpectedEntry *ee)
{
	bson_t	   *entry = conflict_entry(ee->entry, item->id);
	bson_t	   *key = idx_repair_entry_id_key(st, entry);
	ReadDoc    *rd = idx_repair_find_doc(st, key);

	if (rd == NULL)
	{
		if (st->repair)
			idx_repair_fix_replace(st, key, entry, true);
		return;
	}
	rd->matched = true;			/* its _id holds item's: it is item's */
	if (idx_bson_same_bytes(idx_repair_without_claim_time(rd->doc), entry))
		return;
	st->counts.stale++;
	if (st->repair)
		idx_repair_fix_replace(st, idx_entry_own_filter(rd->doc), entry,
							   false);
}

/*
 * The outcome of item's missing claim "ee": missing (and written,
 * repairing) if no other fact that has the key holds it ("holder" NULL),
 * else a conflict with that fact.
 */
static void
claim_outcome(IdxRepairState *st, FactItem *item, ExpectedEntry *ee,
			  bson_t *holder)
{
	if (holder == NULL)
	{
		st->counts.missing++;
		return;
	}
	report_conflict(st, item, ee, holder);
	check_conflict_entry(st, item, ee);
}

/*
 * A missing claim of a fact of the batch, written with the others by
 * idx_repair_write_claims().
 */
typedef struct PendingClaim
{
	FactItem   *item;
	ExpectedEntry *ee;
} PendingClaim;

/*
 * A unique claim "ee" of item that the index lacks: missing, or a conflict
 * with another fact that has the key too.  Repairing, it is written with
 * the batch's other missing claims (idx_repair_write_claims()).
 */
void
idx_repair_check_claim(IdxRepairState *st, FactItem *item, ExpectedEntry *ee)
{
	MemoryContext oldcxt;
	PendingClaim *pc;

	if (!st->repair)
	{
		claim_outcome(st, item, ee, claim_conflict(st, item, ee));
		return;
	}
	oldcxt = MemoryContextSwitchTo(st->batch_cxt);
	pc = palloc(sizeof(PendingClaim));
	pc->item = item;
	pc->ee = ee;
	st->pending_claims = lappend(st->pending_claims, pc);
	MemoryContextSwitchTo(oldcxt);
}

/*
 * Which inserts of idx_repair_write_claims()'s failed bulk met a duplicate key
 * ("taken", by their place in the bulk).  Any other failure is raised: a
 * write error of another code, a write concern error, and a failure with
 * no write error at all (the command failed: nothing says which inserts
 * were made).
 */
static void
note_taken_claims(IdxRepairState *st, bson_t *reply, bson_error_t *error,
				  bool *taken, int n)
{
	bson_iter_t iter;
	bson_iter_t errors;
	int			nduplicates = 0;
	bool		other = !bson_iter_init_find(&iter, reply, "writeErrors") ||
		!BSON_ITER_HOLDS_ARRAY(&iter) || !bson_iter_recurse(&iter, &errors);

	while (!other && bson_iter_next(&errors))
	{
		bson_iter_t field;
		int64		place = -1;
		int64		code = 0;

		if (!BSON_ITER_HOLDS_DOCUMENT(&errors) ||
			!bson_iter_recurse(&errors, &field))
			break;
		while (bson_iter_next(&field))
		{
			if (strcmp(bson_iter_key(&field), "index") == 0 &&
				BSON_ITER_HOLDS_NUMBER(&field))
				place = bson_iter_as_int64(&field);
			else if (strcmp(bson_iter_key(&field), "code") == 0 &&
					 BSON_ITER_HOLDS_NUMBER(&field))
				code = bson_iter_as_int64(&field);
		}
		if (code == 11000 && place >= 0 && place < n)
		{
			taken[place] = true;
			nduplicates++;
		}
		else
			other = true;
	}
	other = other || nduplicates == 0;
	if (bson_iter_init_find(&iter, reply, "writeConcernErrors") &&
		BSON_ITER_HOLDS_ARRAY(&iter))
	{
		uint32_t	len;
		const uint8_t *data;

		bson_iter_array(&iter, &len, &data);
		other = other || len > 5;	/* not the empty array */
	}
	if (other)
		idx_report_reply_error(idx_own_reply(reply), error, st->servername,
							   idx_repair_index_what(st));
}

/*
 * Repairing, write the batch's missing unique claims
 * (idx_repair_check_claim()): one unordered bulk of inserts, after the
 * fixes queued before them (a holder may be a stale entry being replaced).
 * A claim whose key is held goes the way of a single claim (fix_claim()):
 * taken over from a holder that lacks the key, or a conflict.  The server
 * applies the inserts in the order the facts came, so that a key two facts
 * of the batch want goes to the first, as one insert after the other gives
 * it.
 */
void
idx_repair_write_claims(IdxRepairState *st)
{
	int			n = list_length(st->pending_claims);
	bool	   *taken;
	bson_t		reply;
	bson_error_t error;
	ListCell   *lc;
	int			i = 0;

	if (n == 0)
		return;
	idx_repair_flush(st);
	foreach(lc, st->pending_claims)
	{
		PendingClaim *pc = lfirst(lc);

		if (!mongoc_bulk_operation_insert_with_opts(idx_repair_fix_bulk(st),
													pc->ee->entry, NULL,
													&error))
			idx_report_error(&error, st->servername,
							 idx_repair_index_what(st));
	}
	taken = palloc0(sizeof(bool) * n);
	if (!mongoc_bulk_operation_execute(st->bulk, &reply, &error))
		note_taken_claims(st, &reply, &error, taken, n);
	bson_destroy(&reply);
	mongoc_bulk_operation_destroy(st->bulk);
	st->bulk = NULL;
	CHECK_FOR_INTERRUPTS();		/* a cancel that came during the write */
	foreach(lc, st->pending_claims)
	{
		PendingClaim *pc = lfirst(lc);

		if (!taken[i++])
		{
			st->counts.missing++;
			continue;
		}
		idx_repair_flush(st);	/* the holder may be a stale entry queued */
		claim_outcome(st, pc->item, pc->ee,
					  fix_claim(st, pc->item, pc->ee, true));
	}
	pfree(taken);
	st->pending_claims = NIL;
}
