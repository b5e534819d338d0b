/*-------------------------------------------------------------------------
 *
 * applier_exclude.c
 *		  Leaving the FDW's own MongoDB transactions out of the applier's
 *		  change stream, while that is safe.
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/applier/applier_exclude.c
 *
 * A write through the FDW in transaction mode writes its facts and their
 * entries in one MongoDB transaction, so the applier has nothing to do
 * for it; its marker (xact_marker.c) lets the applier skip its events.
 * But the events still cost the server their making, and a write of a
 * unique key waits until the applier has passed them.  So, while it is
 * safe, the stream is "armed": its $match leaves out every transaction of
 * the sessions the backends registered for this database and server
 * (sync_sessions.h), with a predicate on lsid that mongod applies to the
 * oplog before it makes any event (change_stream.c).  A transaction left
 * out is one the applier would have skipped; the rules that make it so:
 *
 * 1. The transaction maintained every index table of every collection it
 *    wrote, all of them valid.  A backend that cannot say so (a foreign
 *    table without some of them, one building or stale) raises a "doubt"
 *    for its transaction before committing it.  After each getMore the
 *    armed applier looks for doubts it has not seen; on one, it drops the
 *    batch and reopens the stream unarmed after the token it had before
 *    that getMore.  That token is older than the commit: the doubt was
 *    raised after the previous look, which came after the batch that ended
 *    at that token.  The applier then applies the transaction as any.
 *
 * 2. Its snapshot holds every write the applier made to the index tables
 *    (the marker's "after" rule, applier_stream.c, made prospective).  The
 *    applier writes nothing while armed: a batch with any event but our
 *    own heartbeats is someone else's write (an outside application, a
 *    write in ordered or eventual mode, a session not registered), and is
 *    dropped, the stream reopened unarmed as above, and applied.  Before it
 *    arms, every transaction that was open when the applier last wrote is
 *    a "hazard": the stream must first have passed it unarmed, that is, a
 *    complete batch whose getMore was sent after it ended, and the time
 *    its session's operationTime had when it ended (a complete batch holds
 *    what is majority-committed: a commit acknowledged with w: 1 may not
 *    be in it yet; the time is unknown only for a session that has gone
 *    without a doubt, whose entry another session may take).  Transactions
 *    that start later start after the write was acknowledged (a backend
 *    takes its start number under the registry's lock, before its first
 *    command; the applier reads the open ones after its write returned).
 *
 * 3. No index of the stream has unique key conflicts (freeing a key must
 *    reach the repair, as the marker rule says), all are valid, no fact
 *    waits for its marker, and no batch wrote to an index table for a
 *    second (so that a run of outside writes does not make the stream
 *    reopen at each).
 *
 * Arming reopens the stream after its current token with the list; a
 * longer list (a new session) arms it again the same way.  Opening the
 * stream (also after a restart or a reload of the catalog) starts
 * unarmed, with the open transactions and every doubt as hazards.  Writes
 * in ordered mode carry no lsid in their events: they stay in the stream.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "applier/applier.h"

/* No batch wrote to an index table for this long (ms) before arming */
#define EXCLUDE_QUIET_MS		1000

/* Interval (ms) between the catalog checks of an arming */
#define EXCLUDE_CHECK_MS		1000

/* At most this many sessions in the $match (else the stream stays unarmed) */
#define EXCLUDE_MAX_SESSIONS	256

/* A transaction the stream must see pass before it arms */
typedef struct AppHazard
{
	IdxSessionTxn txn;
	bool		ended_before_ask;	/* had ended when the getMore was sent */
	IdxClusterTime ended_by;	/* ... at or before this cluster time (0:
								 * not known) */
} AppHazard;

/*
 * Add "txn" to the hazards of "s", once.
 */
static void
add_hazard(AppStream *s, const IdxSessionTxn *txn)
{
	MemoryContext old;
	AppHazard  *h;
	ListCell   *lc;

	foreach(lc, s->hazards)
	{
		h = lfirst(lc);
		if (h->txn.entry == txn->entry && h->txn.start_seq == txn->start_seq)
			return;
	}
	old = MemoryContextSwitchTo(applier.cxt);
	h = palloc0(sizeof(AppHazard));
	h->txn = *txn;
	s->hazards = lappend(s->hazards, h);
	MemoryContextSwitchTo(old);
}

/*
 * The open transactions of our sessions (or, with "doubtful", those that
 * raised a doubt), palloc'd; *n their number.
 */
static IdxSessionTxn *
session_txns(bool doubtful, int *n, uint64 *as_of)
{
	int			max = 64;
	IdxSessionTxn *txns;

	for (;;)
	{
		txns = palloc(sizeof(IdxSessionTxn) * max);
		*n = idx_sync_sessions_txns(MyDatabaseId, applier.slot->serverid,
									doubtful, txns, max, as_of);
		if (*n <= max)
			return txns;
		pfree(txns);
		max = *n;
	}
}

/*
 * Every transaction of our sessions open now is a hazard (after a write
 * to an index table, at the open).
 */
static void
add_open_txns(AppStream *s)
{
	int			n;
	int			i;
	IdxSessionTxn *txns = session_txns(false, &n, NULL);

	for (i = 0; i < n; i++)
		add_hazard(s, &txns[i]);
	pfree(txns);
}

/*
 * Doubts not seen before become hazards; true if there was one.  The
 * look's sequence number is kept for idx_exclude_doubts_looked.
 */
static bool
new_doubts(AppStream *s)
{
	int			n;
	int			i;
	bool		fresh = false;
	IdxSessionTxn *txns = session_txns(true, &n, &s->doubts_looked);

	for (i = 0; i < n; i++)
	{
		if (s->doubts_seen[txns[i].entry] == txns[i].start_seq)
			continue;
		s->doubts_seen[txns[i].entry] = txns[i].start_seq;
		add_hazard(s, &txns[i]);
		fresh = true;
	}
	pfree(txns);
	return fresh;
}

/*
 * The stream of "s" opens (or starts again after a lost history):
 * unarmed, with every open and doubtful transaction a hazard, and as if
 * it had just written (an earlier process, or the rebuild, may have).
 */
void
idx_exclude_open(AppStream *s)
{
	s->armed = false;
	s->arm_pending = false;
	s->cs.nexcluded = 0;
	s->hazards = NIL;
	if (s->doubts_seen == NULL)
		s->doubts_seen = MemoryContextAllocZero(applier.cxt,
												sizeof(uint64) * IDX_SYNC_MAX_SESSIONS);
	add_open_txns(s);
	(void) new_doubts(s);
	s->repaired = true;
	s->quiet_since = GetCurrentTimestamp();
}

/*
 * Before a getMore (or the reopen of an arming): keep the token it starts
 * from, and note which hazards have ended by now.
 */
void
idx_exclude_before_get_more(AppStream *s)
{
	ListCell   *lc;

	if (s->before)
		bson_destroy(s->before);
	s->before = s->cs.token ? bson_copy(s->cs.token) : NULL;
	foreach(lc, s->hazards)
	{
		AppHazard  *h = lfirst(lc);

		h->ended_before_ask = idx_sync_txn_ended(&h->txn, &h->ended_by);
	}
}

/*
 * Arm the stream of "s": reopen it just after the time of its token,
 * leaving out the sessions found when the arming was decided
 * (cs.excluded); its first batch is then checked as a getMore's.  Not
 * after the token itself: that may be the token of an event of one of
 * those sessions (the last of a transaction), which the new stream does
 * not have, and mongod may refuse to resume after an event it cannot find
 * (280).  The arming follows a complete batch, so its token is either a
 * high-water mark or the last event of everything up to its time: the
 * stream has passed every event of that time.  Not so through mongos,
 * where a high-water mark at T comes before the events at T of other
 * shards: there the stream reopens just after what it has covered
 * (advance_covered counts such a token as T - 1), at T at the latest;
 * an event of that time applied again changes nothing.
 */
IdxCsResult
idx_exclude_arm(AppStream *s)
{
	IdxClusterTime t = idx_cs_token_time(s->before);
	IdxClusterTime at;

	s->arm_pending = false;
	if (t == 0)
	{
		s->cs.nexcluded = 0;	/* cannot tell: stay unarmed */
		return idx_cs_get_more(&s->cs, 1);
	}
	s->armed = true;
	ereport(DEBUG1,
			(errmsg_internal("idxtable_fdw applier: the stream of database \"%s\" leaves out the transactions of %d sessions",
							 s->database, s->cs.nexcluded)));
	at = t + 1;
	if (applier.mongos)
		at = (s->covered > 0 && s->covered < t) ? s->covered + 1 : t;
	return idx_cs_open(&s->cs, NULL, at);
}

/*
 * Does the current batch of "s" hold an event of someone else's: any
 * but a single-document write into our own collection (heartbeats)?
 */
static bool
batch_has_others(AppStream *s)
{
	bson_iter_t iter;
	bson_t		event;

	idx_cs_batch(&s->cs, &iter);
	while (idx_cs_next_event(&iter, &event))
	{
		bson_iter_t top;
		bson_iter_t coll;

		if (!bson_iter_init(&top, &event) ||
			!bson_iter_find_descendant(&top, "ns.coll", &coll) ||
			!BSON_ITER_HOLDS_UTF8(&coll) ||
			strcmp(bson_iter_utf8(&coll, NULL), IDX_SYNC_COLLECTION) != 0)
			return true;
	}
	return false;
}

/*
 * Must the armed stream of "s" stop leaving transactions out before this
 * batch is applied: a doubt not seen yet, or someone else's write?  New
 * doubts become hazards either way.
 */
bool
idx_exclude_must_disarm(AppStream *s)
{
	bool		fresh = new_doubts(s);

	return s->armed && (fresh || batch_has_others(s));
}

/*
 * Drop the current batch and reopen the stream of "s" unarmed after the
 * token it had before the getMore (see the file header); its first batch
 * replaces the dropped one.
 */
IdxCsResult
idx_exclude_disarm(AppStream *s)
{
	s->armed = false;
	s->arm_pending = false;
	s->cs.nexcluded = 0;
	s->quiet_since = GetCurrentTimestamp();
	ereport(DEBUG1,
			(errmsg_internal("idxtable_fdw applier: the stream of database \"%s\" takes every transaction again",
							 s->database)));
	return idx_cs_open(&s->cs, s->before, 0);
}

/*
 * May the stream of "s" leave out transactions as far as its indexes go:
 * all valid, none with unique key conflicts?
 */
static bool
indexes_allow(AppStream *s)
{
	ListCell   *lc;

	foreach(lc, s->indexes)
	{
		AppIndex   *ix = lfirst(lc);

		if (ix->state != 'v' || idx_applier_has_conflicts(ix))
			return false;
	}
	return true;
}

/*
 * Decide whether the next step arms the stream of "s" (again, with a
 * longer list), and take the list of sessions now.
 */
static void
consider_arming(AppStream *s, TimestampTz now)
{
	uint64		generation = idx_sync_sessions_generation();
	uint8		(*lsids)[IDX_LSID_LEN];
	int			n;

	if (s->armed && generation == s->armed_generation)
		return;
	if (!TimestampDifferenceExceeds(s->arm_checked_at, now, EXCLUDE_CHECK_MS))
		return;
	s->arm_checked_at = now;
	if (!indexes_allow(s))
		return;
	lsids = MemoryContextAlloc(applier.cxt,
							   sizeof(*lsids) * EXCLUDE_MAX_SESSIONS);
	n = idx_sync_sessions_lsids(MyDatabaseId, applier.slot->serverid,
								lsids, EXCLUDE_MAX_SESSIONS);
	if (n == 0 || n > EXCLUDE_MAX_SESSIONS || new_doubts(s))
	{
		pfree(lsids);
		return;
	}
	if (s->cs.excluded)
		pfree(s->cs.excluded);
	s->cs.excluded = lsids;
	s->cs.nexcluded = n;
	s->armed_generation = generation;
	s->arm_pending = true;
}

/*
 * After a batch of "s" was applied: a write to an index table makes the
 * open transactions hazards; a complete batch lets the hazards go that
 * had ended before its getMore, once the stream has also passed the time
 * they ended by (a batch holds only what is majority-committed: a commit
 * acknowledged with a smaller write concern may not be in it yet); then,
 * if everything allows it, the next step arms the stream.
 */
void
idx_exclude_after_batch(AppStream *s, bool complete)
{
	TimestampTz now = GetCurrentTimestamp();
	ListCell   *lc;

	if (s->repaired)
	{
		s->repaired = false;
		s->quiet_since = now;
		add_open_txns(s);
	}
	if (!complete)
		return;
	foreach(lc, s->hazards)
	{
		AppHazard  *h = lfirst(lc);

		if (h->ended_before_ask && s->covered >= h->ended_by)
			s->hazards = foreach_delete_current(s->hazards, lc);
	}
	if (s->hazards != NIL || s->deferred != NIL || s->cs.token == NULL ||
		idx_cs_token_time(s->cs.token) == 0 || s->cs.start_after || !s->open ||
		!TimestampDifferenceExceeds(s->quiet_since, now, EXCLUDE_QUIET_MS))
		return;
	consider_arming(s, now);
}

/*
 * The stream of "s" is closed.
 */
void
idx_exclude_close(AppStream *s)
{
	if (s->before)
		bson_destroy(s->before);
	s->before = NULL;
	s->armed = false;
	s->arm_pending = false;
	s->cs.nexcluded = 0;
}

/*
 * Up to which look of the registry every open stream has seen the doubts
 * (the earliest of their latest looks); 0 if no stream is open.  Told to
 * the registry after each round, so that it frees the entries of ended
 * sessions whose doubts every stream has seen (sync_sessions.c).
 */
uint64
idx_exclude_doubts_looked(void)
{
	uint64		looked = 0;
	ListCell   *lc;

	foreach(lc, applier.streams)
	{
		AppStream  *s = lfirst(lc);

		if (s->open && (looked == 0 || s->doubts_looked < looked))
			looked = s->doubts_looked;
	}
	return looked;
}
