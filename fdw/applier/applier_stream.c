/*-------------------------------------------------------------------------
 *
 * applier_stream.c
 *		  The applier's work on one MongoDB database: its change stream,
 *		  the batches of events (applied to the index tables by
 *		  applier_apply.c), the time applied through, and the rebuild
 *		  after a lost history.  Its stored position and its heartbeats
 *		  are applier_position.c's.
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/applier/applier_stream.c
 *
 * Applied through.  Events come in cluster-time order, but the events of
 * one transaction share its commit's clusterTime and a batch may end in
 * the middle of them.  So after a batch whose last event has time T the
 * stream has applied through T - 1 only, unless the batch's
 * postBatchResumeToken is a later high-water mark (the server scanned on
 * past T and found nothing more) or a getMore came back empty (every
 * event of the oplog entry at T would have been returned at once): then
 * through the PBRT's time.  A heartbeat, a single-document write of ours
 * into <db>.idxtable.sync, has a cluster time no other event of a replica
 * set shares, so once its event is applied the stream has applied through
 * its time.  A backend that waits for time R raises the slot's
 * "requested" time; the applier then writes a heartbeat (its time is at
 * least R) and the stream passes it at once, also on an idle server.  A
 * backend that wrote a wake-up of its own before it asked (sync_wait.c)
 * says so in the slot; its request is then first looked for in a short
 * getMore, and a heartbeat follows only if that did not pass it.
 *
 * Through mongos (a sharded cluster) the shards have clocks of their own
 * and often share times: an event at T of one shard may follow a
 * high-water-mark token, or a heartbeat, at T of another (mongos sorts a
 * high-water mark at T before every event at T, resume_token.h).  So there
 * a PBRT's or a heartbeat's time T counts as applied through T - 1 only.
 * And mongos releases an event only once every shard's high-water mark
 * has passed it, which an idle shard moves only by its periodic no-op:
 * the heartbeat is then an appendOplogNote, a no-op on every shard, sent
 * twice (the second carries the first's time, so every shard writes one
 * later than the request), and the backends' wake-ups are the same
 * (sync_wait.c); the stream's high-water mark then passes the request.
 *
 * Position.  The PBRT after an applied batch, with the time applied
 * through and the definition_ids of the indexes it covers, is stored now
 * and then (applier_position.c).  A restart resumes after it; an index
 * not covered by it whose sync_from is older makes the stream start at
 * that time instead.  Applying an event again changes nothing.
 *
 * Markers.  A write through the FDW in transaction mode writes its facts
 * and their entries in one MongoDB transaction, and at its pre-commit a
 * marker into <db>.idxtable.sync (xact_marker.c) that lists, per fact
 * collection, the index tables every write of the transaction to it
 * maintained.  All events of a transaction carry its lsid and txnNumber,
 * so the events of the facts and the marker's own event (the last of the
 * transaction) are matched by them within a batch.  A fact event whose
 * marker is in the same batch is not applied to the index tables its
 * marker lists for its collection (still counted, and applied_through
 * moves as before); no read of those facts or entries is made for it.
 * Everything else is applied as ever: events of a transaction without a
 * marker in the batch (an outside writer, ordered or eventual mode, a
 * transaction cut by the end of a batch), and the index tables the marker
 * does not list (a write through another foreign table over the same
 * collection without them).  Skipping is exact because the transaction
 * wrote those facts and exactly the entries they need atomically, from
 * the facts as its snapshot had them; a later change of the same facts has
 * events of its own; and a change before it that the index lacked at its
 * snapshot has its own event, applied (entries read before the facts,
 * index_repair_named.c) before or in this batch, reading the facts as they are
 * then.  The one case left is a repair write of ours to the index that
 * the transaction's snapshot did not see: its write of entries the fact
 * then had could survive beside the transaction's.  So a marker counts
 * for an index only if everything the applier wrote to it is at or before
 * a time the transaction's session knew before it started (the marker's
 * "after"; fixed_through, a time at or after our writes: the latest
 * operationTime of their replies, written_through(); a causally consistent
 * transaction reads at or after "after", so its snapshot holds every write
 * of that time or earlier), only for valid indexes (a build's writes are
 * not ours), and not for an index with
 * unique key conflicts (freeing a conflicting key must reach the repair,
 * which hands the key to the fact that waited for it).
 *
 * Leaving them out.  While it is safe, the stream does not even carry the
 * transactions of the FDW's sessions (applier_exclude.c): each getMore
 * is then checked before its batch is applied, and the stream reopened
 * without that when anything else comes.
 *
 * Updates of other fields.  An update event whose updateDescription names
 * no field an index table's entries are computed from is not applied to
 * that index table (applier_fields.c): its entries for the fact cannot
 * have changed.  Its image, if an earlier event of the same _id in the
 * batch gave one, stays right for that index table too.
 *
 * A transaction's marker is its last event, so a batch can end between
 * its facts and its marker.  The facts of the transaction the batch ends
 * in (when its postBatchResumeToken is that last event's: more of it may
 * follow) then wait for the next batch, copied (AppStream.deferred); the
 * time applied through stays before the transaction's, and the position
 * is not stored while they wait (a restart reads them again).  If the
 * stream is closed or reopened first, or too many wait, they are applied.
 * On mongos the parts of a transaction over several shards come at times
 * of their own, so its marker can come batches before or after its other
 * facts: the markers seen lately are kept, and facts of the FDW's
 * sessions wait a while for a marker not seen yet (applier_markers.c).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "miscadmin.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "applier/applier.h"
#include "core/handle.h"
#include "core/mongoc_compat.h"
#include "index/index_repair.h"
#include "sync/cluster_time.h"

/* The _ids of the markers in each MongoDB database's idxtable.sync */
#define MARKER_PREFIX			"fdw:"

/* A getMore that looks for a backend's wake-up (ms) */
#define WAKE_LOOK_MS			25

/* What one batch of events says */
typedef struct Batch
{
	List	   *colls;			/* CollIds * */
	List	   *markers;		/* Marker * */
	List	   *marker_times;	/* ... their events' (IdxClusterTime *) */
	AppStream  *stream;			/* its stream (its kept markers count) */
	uint8	   *registry;		/* the FDW's sessions (applier_markers.c) */
	int			nregistry;		/* how many; -1: not read yet */
	List	   *failed;			/* fact collections dropped or renamed */
	List	   *failed_at;		/* ... and when (IdxClusterTime *) */
	bool		invalidated;	/* the stream was invalidated */
	int			nevents;
	IdxClusterTime last_time;
	const char *last_token;		/* _data of the last event's _id */
	IdxClusterTime heartbeat_time;
	/* the transaction of the batch's last event, if it may go on */
	bool		defer;
	List	   *new_deferred;	/* DeferredId *, in the stream's new
								 * defer_cxt */
	const uint8_t *tail_lsid;
	uint32_t	tail_lsid_len;
	int64		tail_txn;
} Batch;

/* A fact of a transaction cut by the end of a batch (see the header) */
typedef struct DeferredId
{
	const char *collection;
	bson_value_t id;			/* a view into "wrapped" */
	bson_t	   *wrapped;		/* {"v": _id}, palloc'd */
	uint8_t    *lsid;
	uint32_t	lsid_len;
	int64		txn;
	IdxClusterTime time;		/* its event's */
	TimestampTz since;			/* waits for a marker not seen (mongos,
								 * applier_markers.c) since; 0: its
								 * transaction ended the batch */
} DeferredId;

/* At most this many facts wait for their transaction's marker */
#define MAX_DEFERRED	(10 * IDX_CS_BATCH_SIZE)

/* At most this long (ms) for a marker not seen (applier_markers.c) */
#define MARKER_WAIT_MS	2000

static void apply_batch(AppStream *s);
static void restart_now(AppStream *s);


/* ----------------------------------------------------------------
 *		Applying to one index
 * ----------------------------------------------------------------
 */

/* What this process wrote to each index, by time (AppFix *) */
typedef struct AppFix
{
	char		definition_id[IDX_SYNC_UUID_LEN];
	IdxClusterTime fixed_through;
} AppFix;

static List *process_fixes = NIL;	/* in TopMemoryContext */
static IdxClusterTime process_floor = 0;	/* before: an earlier process */

/*
 * The entry of index "ix" in process_fixes, added if new.
 */
static AppFix *
process_fix(AppIndex *ix)
{
	ListCell   *lc;
	AppFix	   *f;
	MemoryContext old;

	foreach(lc, process_fixes)
	{
		f = lfirst(lc);
		if (strcmp(f->definition_id, ix->status.definition_id) == 0)
			return f;
	}
	old = MemoryContextSwitchTo(TopMemoryContext);
	f = palloc0(sizeof(AppFix));
	strlcpy(f->definition_id, ix->status.definition_id, IDX_SYNC_UUID_LEN);
	process_fixes = lappend(process_fixes, f);
	MemoryContextSwitchTo(old);
	return f;
}

/*
 * A cluster time at or after every write of this process that the server
 * acknowledged: the latest operationTime of the replies to its commands
 * (connection.c notes them).  A write's operationTime is the time of its
 * own last oplog entry, and through mongos the latest of the shards it
 * reached, so the writes of a batch need no ping after them to learn it.
 * If a command ended without such a reply since the last look (a network
 * error: it may have written all the same), or nothing replied yet, the
 * server's time now, as a ping tells it, covers what was applied by then.
 */
static IdxClusterTime
written_through(AppStream *s)
{
	if (applier.replies.unanswered || applier.replies.latest == 0)
	{
		applier.replies.unanswered = false;
		return idx_sync_server_time(applier.client, applier.servername,
									s->database);
	}
	return applier.replies.latest;
}

/*
 * After repairs of the indexes of "s": those that were written have had
 * every write of ours by written_through() (markers, file header).
 * "all" (the stream opens): every index takes what this process knows of
 * it, and no less than the time this process first opened a stream (an
 * earlier process may have written anything before).  An index created
 * since needs no more: its build wrote before any transaction that marks
 * it began (a marker lists valid index tables only).
 */
static void
note_fixes(AppStream *s, bool all)
{
	ListCell   *lc;
	IdxClusterTime now = 0;

	if (all && process_floor == 0)
		process_floor = idx_sync_server_time(applier.client, applier.servername,
											 s->database);
	foreach(lc, s->indexes)
	{
		AppIndex   *ix = lfirst(lc);
		AppFix	   *f = process_fix(ix);

		if (ix->wrote)
		{
			if (now == 0)
				now = written_through(s);
			f->fixed_through = now;
			ix->wrote = false;
		}
		ix->fixed_through = Max(f->fixed_through, process_floor);
	}
}

/*
 * Rebuild the stale indexes of "s" (a full repair pass each, the stream
 * already open at a time before it), then make them valid; again after
 * an election during the pass (applier_durable.c).
 */
static void
rebuild_stale(AppStream *s)
{
	ListCell   *lc;
	bool		any = false;
	int			attempt = 0;

	for (;;)
	{
		idx_applier_note_election(s);
		foreach(lc, s->indexes)
		{
			AppIndex   *ix = lfirst(lc);

			if (ix->state != 's')
				continue;
			ereport(LOG,
					(errmsg("idxtable_fdw applier: rebuilding stale index \"%s\"",
							ix->name)));
			ix->status.entries_written += idx_applier_repair(s, ix, NULL,
															 NULL, 0);
			s->repaired = true;
			any = true;
		}
		if (!any)
			return;
		note_fixes(s, false);
		if (idx_applier_primary_kept(s))
			break;
		idx_applier_primary_changed(s, ++attempt);
	}
	idx_applier_set_state(s, "s", "valid");
}

/*
 * Forget how far the index tables of "s" were applied: the times applied
 * through before a lost history (or of another server, see
 * idx_applier_open_stream) say nothing about what they lack now.
 */
static void
forget_applied_through(AppStream *s)
{
	ListCell   *lc;

	foreach(lc, s->indexes)
	{
		AppIndex   *ix = lfirst(lc);

		ix->status.applied_through = 0;
		ix->status.streaming = false;
		idx_sync_index_report(&ix->status);
	}
}

/*
 * The stream of "s" cannot resume (its history is gone): its indexes
 * become stale (routing through them stops, committed at once), the
 * stream starts again at the server's current time T0, and each index is
 * rebuilt from the facts as they are after T0; the stream then applies
 * every change since T0.
 */
static void
lost_history(AppStream *s)
{
	ereport(LOG,
			(errmsg("idxtable_fdw applier: the change stream of database \"%s\" on server \"%s\" cannot resume",
					s->database, applier.servername),
			 errdetail("The history it needs is no longer on the server; its index tables are rebuilt.")));
	restart_now(s);
}

/*
 * An event of the stream of "s" cannot be read, even without its
 * documents (change_stream.c): which fact it changed is unknown, so every
 * index table of the database becomes stale, with the reason in its
 * last_error, and is rebuilt as after a lost history.
 */
static void
unreadable_event(AppStream *s)
{
	ListCell   *lc;
	char	   *why = psprintf("a change event of database \"%s\" was over 16 MB even without its documents; the index table was rebuilt",
							   s->database);

	ereport(LOG,
			(errmsg("idxtable_fdw applier: the change stream of database \"%s\" on server \"%s\" cannot read an event over 16 MB",
					s->database, applier.servername),
			 errdetail("Which facts it changed is unknown; the index tables of the database are rebuilt.")));
	foreach(lc, s->indexes)
	{
		AppIndex   *ix = lfirst(lc);

		strlcpy(ix->status.last_error, why, IDX_SYNC_ERROR_LEN);
	}
	restart_now(s);
}

/*
 * The stream of "s" starts again now, its indexes stale until rebuilt
 * (see lost_history()).
 */
static void
restart_now(AppStream *s)
{
	IdxClusterTime t0;

	idx_applier_set_state(s, "vs", "stale");
	forget_applied_through(s);
	CommitTransactionCommand();
	StartTransactionCommand();

	idx_applier_forget_split(s);
	idx_exclude_open(s);
	t0 = idx_sync_server_time(applier.client, applier.servername, s->database);
	if (idx_cs_open(&s->cs, NULL, t0) != IDX_CS_OK)
		ereport(ERROR,
				(errcode(ERRCODE_FDW_ERROR),
				 errmsg("could not open the change stream of database \"%s\" on server \"%s\"",
						s->database, applier.servername)));
	s->open = true;
	s->covered = t0 - 1;
	s->unsaved = true;
	note_fixes(s, true);
	idx_applier_report(s, false);
	rebuild_stale(s);
	apply_batch(s);
	idx_applier_save_position(s, true);
}


/* ----------------------------------------------------------------
 *		Batches
 * ----------------------------------------------------------------
 */

/*
 * The name of a fact collection of "s" equal to "coll", or NULL.
 */
static const char *
fact_collection(AppStream *s, const char *coll)
{
	ListCell   *lc;

	if (coll == NULL)
		return NULL;
	foreach(lc, s->indexes)
	{
		AppIndex   *ix = lfirst(lc);

		if (strcmp(ix->collection, coll) == 0)
			return ix->collection;
	}
	return NULL;
}

/*
 * The UTF-8 string at "path" of "doc", or NULL.
 */
static const char *
doc_string(const bson_t *doc, const char *path)
{
	bson_iter_t iter,
				found;

	if (bson_iter_init(&iter, doc) &&
		bson_iter_find_descendant(&iter, path, &found) &&
		BSON_ITER_HOLDS_UTF8(&found))
		return bson_iter_utf8(&found, NULL);
	return NULL;
}

/*
 * Add a changed fact's _id to the batch.
 */
static void
add_id(Batch *b, const char *collection, const bson_value_t *id,
	   const bson_t *image, Marker *marker, const bson_t *changes)
{
	ListCell   *lc;
	CollIds    *c = NULL;

	foreach(lc, b->colls)
	{
		c = lfirst(lc);
		if (c->collection == collection)
			break;
		c = NULL;
	}
	if (c == NULL)
	{
		c = palloc0(sizeof(CollIds));
		c->collection = collection;
		c->alloc = 64;
		c->ids = palloc(sizeof(bson_value_t) * c->alloc);
		c->images = palloc(sizeof(bson_t *) * c->alloc);
		c->marks = palloc(sizeof(Marker *) * c->alloc);
		c->changes = palloc(sizeof(bson_t *) * c->alloc);
		b->colls = lappend(b->colls, c);
	}
	if (c->n >= c->alloc)
	{
		c->alloc *= 2;
		c->ids = repalloc(c->ids, sizeof(bson_value_t) * c->alloc);
		c->images = repalloc(c->images, sizeof(bson_t *) * c->alloc);
		c->marks = repalloc(c->marks, sizeof(Marker *) * c->alloc);
		c->changes = repalloc(c->changes, sizeof(bson_t *) * c->alloc);
	}
	c->images[c->n] = image;
	c->marks[c->n] = marker;
	c->marked = c->marked || marker != NULL;
	c->changes[c->n] = changes;
	c->described = c->described || changes != NULL;
	c->ids[c->n++] = *id;
	c->events++;
}

/*
 * The lsid (raw) and txnNumber of an event of a transaction; false if it
 * has none.
 */
static bool
event_txn(const bson_t *event, const uint8_t **lsid, uint32_t *lsid_len,
		  int64 *txn)
{
	bson_iter_t iter;

	if (!bson_iter_init_find(&iter, event, "lsid") ||
		!BSON_ITER_HOLDS_DOCUMENT(&iter))
		return false;
	bson_iter_document(&iter, lsid_len, lsid);
	if (!bson_iter_init_find(&iter, event, "txnNumber") ||
		!BSON_ITER_HOLDS_NUMBER(&iter))
		return false;
	*txn = bson_iter_as_int64(&iter);
	return true;
}

/*
 * The marker of transaction (lsid, txn) in the batch, or kept by its
 * stream from an earlier one (on mongos, applier_markers.c), or NULL.
 */
static Marker *
find_marker(Batch *b, const uint8_t *lsid, uint32_t len, int64 txn)
{
	ListCell   *lc;

	foreach(lc, b->markers)
	{
		Marker	   *m = lfirst(lc);

		if (m->txn == txn && m->lsid_len == len &&
			memcmp(m->lsid, lsid, len) == 0)
			return m;
	}
	if (b->stream != NULL && b->stream->kept_markers != NIL)
		return idx_applier_kept_marker(b->stream, lsid, len, txn);
	return NULL;
}

/*
 * Is (lsid, txn) the transaction of the batch's last event, whose facts
 * wait for the next batch?
 */
static bool
is_deferred_txn(Batch *b, const uint8_t *lsid, uint32_t len, int64 txn)
{
	return b->defer && b->tail_txn == txn && b->tail_lsid_len == len &&
		memcmp(b->tail_lsid, lsid, len) == 0;
}

/*
 * Keep a fact (of event time "time") of transaction (lsid, txn) for the
 * next batch, in the new list "*into" (in s->defer_cxt): a fact of the
 * transaction the batch ends in ("since" 0), or one that waits since then
 * for a marker not seen (applier_markers.c).
 */
static void
defer_id(AppStream *s, List **into, const char *collection,
		 const bson_value_t *id, const uint8_t *lsid, uint32_t len,
		 int64 txn, IdxClusterTime time, TimestampTz since)
{
	MemoryContext old = MemoryContextSwitchTo(s->defer_cxt);
	DeferredId *d = palloc0(sizeof(DeferredId));
	bson_t		wrapped = BSON_INITIALIZER;
	bson_iter_t iter;

	idx_check_append(bson_append_value(&wrapped, "v", 1, id));
	d->wrapped = idx_bson_pcopy(&wrapped);
	bson_destroy(&wrapped);
	if (!bson_iter_init_find(&iter, d->wrapped, "v"))
		elog(ERROR, "invalid fact _id");
	d->id = *bson_iter_value(&iter);
	d->collection = collection;
	d->lsid = palloc(Max(len, 1));
	memcpy(d->lsid, lsid, len);
	d->lsid_len = len;
	d->txn = txn;
	d->time = time;
	d->since = since;
	*into = lappend(*into, d);
	MemoryContextSwitchTo(old);
}

/*
 * Should a fact of transaction (session "lsid") whose marker was not seen
 * wait for it (applier_markers.c), room left?
 */
static bool
awaits_marker(AppStream *s, Batch *b, const uint8_t *lsid, uint32_t len)
{
	return s->ndeferred + list_length(b->new_deferred) < MAX_DEFERRED &&
		idx_applier_awaits_marker(s, lsid, len, &b->registry, &b->nregistry);
}

/*
 * If "event" writes the marker of a transaction through the FDW (an
 * insert or replace of an "fdw:" document of idxtable.sync, in a
 * transaction), add it to the batch's markers, with its time.
 */
static void
note_marker(Batch *b, const bson_t *event)
{
	const char *op = doc_string(event, "operationType");
	const char *coll = doc_string(event, "ns.coll");
	const char *id = doc_string(event, "documentKey._id");
	bson_iter_t iter;
	Marker	   *m;
	const uint8_t *data;
	uint32_t	len;
	IdxClusterTime *time;

	if (op == NULL || coll == NULL || id == NULL ||
		strcmp(coll, IDX_SYNC_COLLECTION) != 0 ||
		strncmp(id, MARKER_PREFIX, strlen(MARKER_PREFIX)) != 0 ||
		(strcmp(op, "insert") != 0 && strcmp(op, "replace") != 0) ||
		!bson_iter_init_find(&iter, event, "fullDocument") ||
		!BSON_ITER_HOLDS_DOCUMENT(&iter))
		return;
	m = palloc0(sizeof(Marker));
	bson_iter_document(&iter, &len, &data);
	if (!bson_init_static(&m->doc, data, len) ||
		!event_txn(event, &m->lsid, &m->lsid_len, &m->txn))
		return;
	if (bson_iter_init_find(&iter, &m->doc, "after"))
		m->after = idx_sync_iter_time(&iter);
	b->markers = lappend(b->markers, m);
	time = palloc(sizeof(IdxClusterTime));
	*time = idx_cs_event_time(event);
	b->marker_times = lappend(b->marker_times, time);
}

/*
 * The fact as an event left it, for the first look of the repair
 * (index_repair.h): the document of an insert or a replace (a view into
 * the reply), IDX_REPAIR_GONE for a delete, NULL for an update (its
 * event holds only the change).
 */
static const bson_t *
event_image(const bson_t *event)
{
	const char *op = doc_string(event, "operationType");
	bson_iter_t iter;
	const uint8_t *data;
	uint32_t	len;
	bson_t	   *image;

	if (op == NULL)
		return NULL;
	if (strcmp(op, "delete") == 0)
		return IDX_REPAIR_GONE;
	if ((strcmp(op, "insert") != 0 && strcmp(op, "replace") != 0) ||
		!bson_iter_init_find(&iter, event, "fullDocument") ||
		!BSON_ITER_HOLDS_DOCUMENT(&iter))
		return NULL;
	bson_iter_document(&iter, &len, &data);
	image = palloc(sizeof(bson_t));
	if (!bson_init_static(image, data, len))
		return NULL;
	return image;
}

/*
 * The updateDescription of an update event (a view into the reply), or
 * NULL for other events (applier_fields.c).
 */
static const bson_t *
event_changes(const bson_t *event)
{
	const char *op = doc_string(event, "operationType");
	bson_iter_t iter;
	const uint8_t *data;
	uint32_t	len;
	bson_t	   *desc;

	if (op == NULL || strcmp(op, "update") != 0 ||
		!bson_iter_init_find(&iter, event, "updateDescription") ||
		!BSON_ITER_HOLDS_DOCUMENT(&iter))
		return NULL;
	bson_iter_document(&iter, &len, &data);
	desc = palloc(sizeof(bson_t));
	if (!bson_init_static(desc, data, len))
		return NULL;
	return desc;
}

/*
 * A change of a document: a fact's _id to apply, or one of the heartbeats.
 */
static void
note_document_event(AppStream *s, Batch *b, const bson_t *event,
					const char *coll, IdxClusterTime time)
{
	bson_iter_t iter,
				id;
	const char *fact = fact_collection(s, coll);

	if (!bson_iter_init(&iter, event) ||
		!bson_iter_find_descendant(&iter, "documentKey._id", &id))
		return;
	if (fact != NULL)
	{
		const uint8_t *lsid;
		uint32_t	len;
		int64		txn;
		bool		in_txn = event_txn(event, &lsid, &len, &txn);
		Marker	   *marker = in_txn ? find_marker(b, lsid, len, txn) : NULL;

		if (in_txn && b->defer && is_deferred_txn(b, lsid, len, txn))
			defer_id(s, &b->new_deferred, fact, bson_iter_value(&id), lsid,
					 len, txn, time, 0);
		else if (in_txn && marker == NULL && awaits_marker(s, b, lsid, len))
			defer_id(s, &b->new_deferred, fact, bson_iter_value(&id), lsid,
					 len, txn, time, GetCurrentTimestamp());
		else
			add_id(b, fact, bson_iter_value(&id), event_image(event),
				   marker, event_changes(event));
	}
	else if (coll != NULL && strcmp(coll, IDX_SYNC_COLLECTION) == 0 &&
			 BSON_ITER_HOLDS_UTF8(&id) &&
			 strncmp(bson_iter_utf8(&id, NULL), IDX_SYNC_HEARTBEAT_PREFIX,
					 strlen(IDX_SYNC_HEARTBEAT_PREFIX)) == 0)
		b->heartbeat_time = Max(b->heartbeat_time, time);
}

/*
 * Take one event into the batch; a fragment of a split event counts as
 * an event, and its event is taken with its last fragment.
 */
static void
note_event(AppStream *s, Batch *b, const bson_t *event)
{
	const char *op;
	const char *coll;
	IdxClusterTime time = idx_cs_event_time(event);
	bson_iter_t split;

	b->nevents++;
	b->last_time = Max(b->last_time, time);
	b->last_token = doc_string(event, "_id._data");
	if (bson_iter_init_find(&split, event, "splitEvent") &&
		BSON_ITER_HOLDS_DOCUMENT(&split))
	{
		event = idx_applier_take_fragment(s, event, &split);
		if (event == NULL)
			return;
		time = idx_cs_event_time(event);
		b->last_time = Max(b->last_time, time);
	}
	op = doc_string(event, "operationType");
	coll = doc_string(event, "ns.coll");
	if (op == NULL)
		return;
	if (strcmp(op, "insert") == 0 || strcmp(op, "update") == 0 ||
		strcmp(op, "replace") == 0 || strcmp(op, "delete") == 0)
		note_document_event(s, b, event, coll, time);
	else if (strcmp(op, "drop") == 0 || strcmp(op, "rename") == 0)
	{
		const char *to = doc_string(event, "to.coll");
		int			i;

		for (i = 0; i < 2; i++)
		{
			const char *fact = fact_collection(s, i == 0 ? coll : to);
			IdxClusterTime *at = palloc(sizeof(IdxClusterTime));

			*at = time;
			if (fact == NULL)
				continue;
			b->failed = lappend(b->failed, (char *) fact);
			b->failed_at = lappend(b->failed_at, at);
		}
	}
	else if (strcmp(op, "invalidate") == 0)
		b->invalidated = true;
}

/*
 * The time a high-water-mark token or a heartbeat at "t" says the stream
 * has applied through: "t" on a replica set, "t" - 1 through mongos (see
 * the file header).  A cluster time is (seconds << 32 | increment), so
 * (t, 0) - 1 is (t - 1, 0xFFFFFFFF), which sorts right.
 */
static IdxClusterTime
through(IdxClusterTime t)
{
	return applier.mongos && t > 0 ? t - 1 : t;
}

/*
 * How far the stream has applied after batch "b" (see the file header).
 */
static void
advance_covered(AppStream *s, const Batch *b)
{
	IdxChangeStream *cs = &s->cs;
	bool		token_is_last = false;

	if (b->nevents == 0)
	{
		if (cs->token_moved && cs->token_time > 0)
			s->covered = Max(s->covered, through(cs->token_time));
		return;
	}
	if (cs->token && b->last_token)
	{
		const char *data = doc_string(cs->token, "_data");

		token_is_last = data != NULL && strcmp(data, b->last_token) == 0;
	}
	if (!token_is_last && cs->token_time >= b->last_time)
		s->covered = Max(s->covered, through(cs->token_time));
	else if (b->last_time > 0)
		s->covered = Max(s->covered, b->last_time - 1);
	s->covered = Max(s->covered, through(b->heartbeat_time));
}

/*
 * The facts of batch "b" as a batch "into" of their _ids alone: no
 * images, no markers, no events counted (they were, the first time).
 */
static Batch *
ids_only(Batch *b, Batch *into)
{
	ListCell   *lc;
	int			i;

	memset(into, 0, sizeof(Batch));
	foreach(lc, b->colls)
	{
		CollIds    *c = lfirst(lc);

		for (i = 0; i < c->n; i++)
			add_id(into, c->collection, &c->ids[i], NULL, NULL, NULL);
	}
	foreach(lc, into->colls)
		((CollIds *) lfirst(lc))->events = 0;
	return into;
}

/*
 * Apply the facts of batch "b" to the indexes of "s" (applier_apply.c),
 * then note which indexes were written.  After an election during that
 * (applier_durable.c) the same facts are applied again, as read from the
 * new primary, whatever their events said.
 */
static void
repair_colls(AppStream *s, Batch *b)
{
	ListCell   *lc;
	Batch		again;
	int			attempt = 0;

	if (b->colls != NIL)
		idx_applier_note_election(s);
	for (;;)
	{
		foreach(lc, b->colls)
			idx_applier_apply_facts(s, lfirst(lc));
		note_fixes(s, false);
		if (b->colls == NIL || idx_applier_primary_kept(s))
			return;
		idx_applier_primary_changed(s, ++attempt);
		b = ids_only(b, &again);
	}
}

/*
 * Does the batch end inside a transaction whose marker it lacks, so that
 * its facts wait for the next batch (see the file header)?  The last
 * event is "last"; the PBRT must be its token (else the server scanned
 * past the transaction's end).
 */
static void
note_tail(AppStream *s, Batch *b, const bson_t *last)
{
	const char *data = s->cs.token ? doc_string(s->cs.token, "_data") : NULL;
	const char *last_token = doc_string(last, "_id._data");

	b->defer = event_txn(last, &b->tail_lsid, &b->tail_lsid_len,
						 &b->tail_txn) &&
		find_marker(b, b->tail_lsid, b->tail_lsid_len, b->tail_txn) == NULL &&
		data != NULL && last_token != NULL && strcmp(data, last_token) == 0 &&
		s->ndeferred < MAX_DEFERRED;
}

/*
 * The facts that waited for this batch: into it (with their marker, if
 * it came), or waiting on if their transaction still goes on, or (on
 * mongos) if their marker was not seen and they have not waited long
 * (applier_markers.c).
 */
static void
take_deferred(AppStream *s, Batch *b)
{
	TimestampTz now = GetCurrentTimestamp();
	ListCell   *lc;

	foreach(lc, s->deferred)
	{
		DeferredId *d = lfirst(lc);
		Marker	   *m = find_marker(b, d->lsid, d->lsid_len, d->txn);

		if (is_deferred_txn(b, d->lsid, d->lsid_len, d->txn))
			defer_id(s, &b->new_deferred, d->collection, &d->id, d->lsid,
					 d->lsid_len, d->txn, d->time, d->since);
		else if (m == NULL &&
				 (d->since != 0 ?
				  !TimestampDifferenceExceeds(d->since, now, MARKER_WAIT_MS) :
				  awaits_marker(s, b, d->lsid, d->lsid_len)))
			defer_id(s, &b->new_deferred, d->collection, &d->id, d->lsid,
					 d->lsid_len, d->txn, d->time,
					 d->since != 0 ? d->since : now);
		else
			add_id(b, d->collection, &d->id, NULL, m, NULL);
	}
}

/*
 * While facts wait for their marker, the stream has applied through the
 * time before the earliest of them at most (but never less than
 * "before", where it was).
 */
static void
cap_covered(AppStream *s, IdxClusterTime before)
{
	IdxClusterTime earliest = 0;
	ListCell   *lc;

	foreach(lc, s->deferred)
	{
		DeferredId *d = lfirst(lc);

		if (d->time > 0 && (earliest == 0 || d->time < earliest))
			earliest = d->time;
	}
	if (earliest > 0)
		s->covered = Max(before, Min(s->covered, earliest - 1));
}

/*
 * Forget the facts that waited (their memory too).
 */
static void
forget_deferred(AppStream *s)
{
	if (s->defer_cxt)
		MemoryContextDelete(s->defer_cxt);
	s->defer_cxt = NULL;
	s->deferred = NIL;
	s->ndeferred = 0;
}

/*
 * Apply the facts that waited for their marker now, as any (the stream is
 * closed or reopened, or its position is to be stored).
 */
static void
apply_deferred(AppStream *s)
{
	Batch		b;
	ListCell   *lc;

	if (s->deferred == NIL)
		return;
	memset(&b, 0, sizeof(b));
	foreach(lc, s->deferred)
	{
		DeferredId *d = lfirst(lc);

		add_id(&b, d->collection, &d->id, NULL, NULL, NULL);
	}
	repair_colls(s, &b);
	forget_deferred(s);
}

/*
 * Store the position of the stream of "s" unless it must stay as stored
 * (applier_position.c); "force" (the stream is to be closed or reopened)
 * applies the facts that wait for their marker first, else they hold it.
 */
void
idx_applier_save_position(AppStream *s, bool force)
{
	TimestampTz now = GetCurrentTimestamp();

	if (idx_applier_position_held(s, force))
		return;
	apply_deferred(s);
	idx_applier_store_position(s, force, now);
}

/*
 * Apply the current batch of the stream of "s": each changed fact to each
 * index of its collection, then the failures, then how far it got.
 */
static void
apply_batch(AppStream *s)
{
	Batch		b;
	bson_iter_t iter;
	bson_t		event;
	bson_t		last;
	bool		any = false;
	ListCell   *lc,
			   *lc2;
	IdxClusterTime before = s->covered;
	MemoryContext old_defer_cxt = s->defer_cxt;

	memset(&b, 0, sizeof(b));
	b.stream = s;
	b.nregistry = -1;
	/* the markers first: a transaction's marker is its last event */
	idx_cs_batch(&s->cs, &iter);
	while (idx_cs_next_event(&iter, &event))
	{
		note_marker(&b, &event);
		last = event;
		any = true;
	}
	if (any)
		note_tail(s, &b, &last);
	s->defer_cxt = AllocSetContextCreate(TopMemoryContext,
										 "idxtable_fdw applier deferred facts",
										 ALLOCSET_SMALL_SIZES);
	take_deferred(s, &b);
	idx_cs_batch(&s->cs, &iter);
	while (idx_cs_next_event(&iter, &event))
		note_event(s, &b, &event);

	/* read only facts no failover can roll back, up to this reply's time */
	idx_repair_read_durable_after(applier.durable_reads ? s->cs.reply_time : 0);
	repair_colls(s, &b);
	/* the old deferred facts are applied or copied: their memory goes */
	if (old_defer_cxt)
		MemoryContextDelete(old_defer_cxt);
	s->deferred = b.new_deferred;
	s->ndeferred = list_length(b.new_deferred);
	forboth(lc, b.failed, lc2, b.failed_at)
		idx_applier_fail_collection(s, lfirst(lc),
									*(IdxClusterTime *) lfirst(lc2));
	if (b.invalidated)
		s->cs.start_after = true;	/* the PBRT is the invalidate's token */

	advance_covered(s, &b);
	cap_covered(s, before);
	idx_applier_keep_markers(s, b.markers, b.marker_times);
	s->caught_up = (b.nevents == 0);
	if (b.nevents > 0 || s->covered != before)
		s->unsaved = true;
	if (b.nevents > 0)
		s->events_unsaved = true;
	idx_applier_recheck_spared(s);
	idx_applier_report(s, true);
}


/* ----------------------------------------------------------------
 *		The stream
 * ----------------------------------------------------------------
 */

/*
 * The fact collections of "s" (distinct), for the stream's $match.
 */
static List *
fact_collections(AppStream *s)
{
	List	   *result = NIL;
	ListCell   *lc;

	foreach(lc, s->indexes)
	{
		AppIndex   *ix = lfirst(lc);
		ListCell   *lc2;
		bool		seen = false;

		foreach(lc2, result)
			seen = seen || strcmp(lfirst(lc2), ix->collection) == 0;
		if (!seen)
			result = lappend(result, ix->collection);
	}
	return result;
}

/*
 * The oldest sync_from of the indexes of "s" not in "followed" (all of
 * them if it is NIL), 0 if none is known.
 */
static IdxClusterTime
oldest_needed(AppStream *s, List *followed)
{
	IdxClusterTime result = 0;
	ListCell   *lc;

	foreach(lc, s->indexes)
	{
		AppIndex   *ix = lfirst(lc);
		ListCell   *lc2;
		bool		covered = false;

		foreach(lc2, followed)
			covered = covered ||
				strcmp(lfirst(lc2), ix->status.definition_id) == 0;
		if (!covered && ix->sync_from != 0 &&
			(result == 0 || ix->sync_from < result))
			result = ix->sync_from;
	}
	return result;
}

/*
 * Does the stream of "s" now watch fewer fact collections than the one
 * whose position was stored ("watched"; NIL: the position does not say)?
 */
static bool
watches_fewer(AppStream *s, List *watched)
{
	ListCell   *lc;

	if (watched == NIL)
		return true;
	foreach(lc, watched)
	{
		ListCell   *lc2;
		bool		kept = false;

		foreach(lc2, s->cs.collections)
			kept = kept || strcmp(lfirst(lc2), lfirst(lc)) == 0;
		if (!kept)
			return true;
	}
	return false;
}

/*
 * Open the stream of "s" after its stored position.  A stream that
 * watches fewer collections than the one that stored it (a collection
 * dropped or renamed outside, or its last index table dropped) does not
 * resume after the token: the token may be the event of a collection it
 * no longer watches, and mongod 5.1+ evaluates the stream's $match on the
 * oplog before it looks for the token's event, so it would not find it
 * and fail with 280 (PeerDB-io/peerdb issue 3246), which means a lost
 * history.  It starts at the token's cluster time instead (inclusive; no
 * later than the time after the one applied through): the events of that
 * time are applied again, which changes nothing, since every difference
 * a repair writes is confirmed against the facts as they are then
 * (applier_apply.c), and a transaction's events come again whole, its
 * marker with them.  An invalidate's token (startAfter) is kept: the
 * events that end a database's stream are in every filter.
 */
static IdxCsResult
resume_stream(AppStream *s, bson_t *token, IdxClusterTime stored,
			  List *watched, bool start_after)
{
	IdxClusterTime at = idx_cs_token_time(token);

	s->cs.start_after = start_after;
	if (start_after || !watches_fewer(s, watched))
		return idx_cs_open(&s->cs, token, 0);
	if (at == 0 || at > stored + 1)
		at = stored + 1;
	ereport(LOG,
			(errmsg("idxtable_fdw applier for server \"%s\" watches fewer collections of database \"%s\": it starts at the time of its position, %s",
					applier.servername, s->database,
					idx_applier_time_str(at))));
	return idx_cs_open(&s->cs, NULL, at);
}

/*
 * Open the stream of "s": after its stored position, or at the oldest
 * sync_from of an index the position does not cover, or now.  Stale
 * indexes are rebuilt once it is open.
 */
void
idx_applier_open_stream(AppStream *s)
{
	MemoryContext old = MemoryContextSwitchTo(applier.cxt);
	bson_t	   *token = NULL;
	IdxClusterTime stored = 0;
	List	   *followed;
	List	   *watched;
	bool		found;
	bool		start_after = false;
	bool		other_server = false;
	IdxClusterTime needed;
	IdxCsResult r;

	s->cs.collections = fact_collections(s);
	MemoryContextSwitchTo(old);
	s->mongos = applier.mongos;
	idx_exclude_open(s);
	found = idx_applier_read_position(s, &token, &stored, &followed,
									  &watched, &start_after, &other_server);
	if (other_server)
	{
		/* its times and tokens are another server's: start afresh */
		if (token)
			bson_destroy(token);
		lost_history(s);
		return;
	}
	needed = oldest_needed(s, found ? followed : NIL);
	if (found && (needed == 0 || needed > stored))
	{
		r = resume_stream(s, token, stored, watched, start_after);
		s->covered = stored;
		s->unsaved = false;
		if (r != IDX_CS_DENIED)
			ereport(LOG,
					(errmsg("idxtable_fdw applier for server \"%s\" resumes database \"%s\" at %s",
							applier.servername, s->database,
							idx_applier_time_str(stored))));
	}
	else
	{
		IdxClusterTime now = idx_sync_server_time(applier.client,
												  applier.servername,
												  s->database);
		IdxClusterTime start = needed ? needed : now;

		if (start > now)
		{
			/*
			 * A sync_from later than the server's clock is a time of
			 * another server (the server's options were changed to one
			 * whose clock is behind): what the index tables lack is
			 * unknown, as after a lost history.
			 */
			if (token)
				bson_destroy(token);
			lost_history(s);
			return;
		}
		r = idx_cs_open(&s->cs, NULL, start);
		s->covered = start - 1;
		s->unsaved = true;
		if (r != IDX_CS_DENIED)
			ereport(LOG,
					(errmsg("idxtable_fdw applier for server \"%s\" starts database \"%s\" at %s",
							applier.servername, s->database,
							idx_applier_time_str(start))));
	}
	if (token)
		bson_destroy(token);
	s->saved_at = GetCurrentTimestamp();
	if (r == IDX_CS_DENIED)
	{
		idx_applier_close_stream(s);
		idx_applier_deny(s);	/* not current, tried again later */
		return;
	}
	if (r == IDX_CS_HISTORY_LOST)
	{
		lost_history(s);
		return;
	}
	if (r == IDX_CS_TOO_LARGE)
	{
		unreadable_event(s);
		return;
	}
	s->open = true;
	idx_applier_stream_allowed(s);
	note_fixes(s, true);		/* an earlier process may have written */
	rebuild_stale(s);
	apply_batch(s);
}

/*
 * Did the current batch of "s" bring everything the server had?  A
 * getMore of a change stream returns what it finds up to the end of the
 * (majority-committed) oplog unless the batch fills: batchSize events or
 * the 16 MB of a reply.  A batch below both (a reply under half of 16 MB,
 * to be safe) is taken as complete.
 */
static bool
batch_complete(AppStream *s)
{
	bson_iter_t iter;
	int			n = 0;

	if (s->cs.reply == NULL || s->cs.reply->len >= 8 * 1024 * 1024)
		return false;
	idx_cs_batch(&s->cs, &iter);
	while (bson_iter_next(&iter))
		n++;
	return n < IDX_CS_BATCH_SIZE;
}

/*
 * One getMore of the stream of "s" and the batch it brings.  A resumable
 * error reopens the stream after its token; a closed cursor (invalidate)
 * is reopened from the stored position by the next round.
 */
void
idx_applier_step(AppStream *s, int poll_ms)
{
	IdxCsResult r;
	TimestampTz asked;
	bool		complete;

	if (idx_applier_heartbeat(s))
		poll_ms = Min(poll_ms, WAKE_LOOK_MS);
	s->partial = false;
	idx_exclude_before_get_more(s);
	asked = GetCurrentTimestamp();
	if (s->arm_pending)
		r = idx_exclude_arm(s);
	else
		r = idx_cs_get_more(&s->cs, poll_ms);
	if (r != IDX_CS_OK)
		apply_deferred(s);	/* the stream is reopened past them */
	if (r == IDX_CS_RESUMABLE && s->cs.token != NULL)
	{
		bson_t	   *token = bson_copy(s->cs.token);

		r = idx_cs_open(&s->cs, token, 0);	/* keeps cs->start_after */
		bson_destroy(token);
	}
	if (r == IDX_CS_OK && idx_exclude_must_disarm(s))
		r = idx_exclude_disarm(s);	/* a new first batch replaces it */
	if (r == IDX_CS_HISTORY_LOST)
	{
		lost_history(s);
		return;
	}
	if (r == IDX_CS_TOO_LARGE)
	{
		unreadable_event(s);
		return;
	}
	if (r != IDX_CS_OK)
	{
		idx_applier_save_position(s, true);
		idx_applier_close_stream(s);
		if (r == IDX_CS_DENIED)
			idx_applier_deny(s);
		return;
	}
	complete = batch_complete(s);
	if (complete)
		s->complete_since = asked;
	apply_batch(s);
	s->partial = complete && !s->caught_up;
	idx_exclude_after_batch(s, complete);
	idx_applier_save_position(s, false);
}

/*
 * Close the stream of "s" (its position is kept as it was stored).
 */
void
idx_applier_close_stream(AppStream *s)
{
	forget_deferred(s);			/* not stored: read again after the position */
	idx_applier_forget_markers(s);
	idx_applier_forget_spared(s);	/* the same */
	idx_applier_forget_split(s);			/* the same */
	idx_exclude_close(s);
	idx_cs_close(&s->cs);
	s->open = false;
	s->partial = false;
	s->election_known = false;
}
