/*-------------------------------------------------------------------------
 *
 * applier_markers.c
 *		  The markers of the FDW's transactions on a sharded cluster, whose
 *		  parts' events do not come together: the markers seen recently,
 *		  and which facts wait for theirs.
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/applier/applier_markers.c
 *
 * On a replica set a transaction's events share one cluster time and come
 * in order, its marker last (applier_stream.c's header).  Through mongos a
 * transaction that wrote to several shards has a part on each, committed
 * by that shard at a time of its own; the events of every shard are merged
 * by time, then by each event's place in its own shard's part, so the
 * marker (written on the database's primary shard, where idxtable.sync
 * lives) can come before or after the other parts' events, and in another
 * batch.  Applied without their marker, those facts would be read again for
 * nothing (the transaction wrote their entries itself): never wrong, but
 * the cost the marker is there to save.  So, on mongos only:
 *
 * - the markers seen in the last MARKER_KEEP_SECS of cluster time (at most
 *   MARKER_KEEP of them) are kept, copied, in the stream, and a fact event
 *   whose marker is not in its batch is matched against them (the marker
 *   came first).  A kept marker counts exactly as one in the batch does:
 *   applier_apply.c's marker_counts() checks its "after" against what the
 *   applier wrote since, whenever it is used;
 * - a fact event of a transaction of one of the FDW's sessions (the
 *   registry of sync_sessions.h; each of their transactions over a
 *   collection with index tables writes a marker, xact_marker.c) whose
 *   marker is neither in its batch nor kept waits for it (the marker
 *   comes later), as the facts of a transaction cut by the end of a batch
 *   do (applier_stream.c): for at most MARKER_WAIT_MS, or until the stream
 *   is closed or its position is to be stored; meanwhile the time applied
 *   through stays before the earliest of them.  A marker that does not come
 *   (a session that ended at once, so no longer in the registry, is not
 *   waited for at all) leaves them applied as any fact.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "utils/memutils.h"

#include "applier/applier.h"
#include "core/handle.h"
#include "core/mongoc_compat.h"
#include "sync/sync_sessions.h"

/* Markers kept: at most this many, of at most this much cluster time */
#define MARKER_KEEP				1000
#define MARKER_KEEP_SECS		30

/* A marker kept, with its event's cluster time */
typedef struct KeptMarker
{
	Marker		m;				/* its lsid and doc are copies */
	IdxClusterTime time;
} KeptMarker;

/*
 * Forget the kept marker "k" (its memory too).
 */
static void
free_kept(KeptMarker *k)
{
	pfree((void *) k->m.lsid);
	bson_destroy(&k->m.doc);
	pfree(k);
}

/*
 * Keep a copy of each marker of "markers" (Marker *, of events at "times",
 * IdxClusterTime *), then forget those MARKER_KEEP_SECS older than the
 * newest and the oldest past MARKER_KEEP.  Nothing on a replica set.
 */
void
idx_applier_keep_markers(AppStream *s, List *markers, List *times)
{
	MemoryContext old;
	ListCell   *lc,
			   *lc2;
	IdxClusterTime newest = 0;

	if (!s->mongos || markers == NIL)
		return;
	if (s->marker_cxt == NULL)
		s->marker_cxt = AllocSetContextCreate(TopMemoryContext,
											  "idxtable_fdw applier markers kept",
											  ALLOCSET_SMALL_SIZES);
	old = MemoryContextSwitchTo(s->marker_cxt);
	forboth(lc, markers, lc2, times)
	{
		Marker	   *m = lfirst(lc);
		KeptMarker *k = palloc0(sizeof(KeptMarker));
		uint8_t    *lsid = palloc(Max(m->lsid_len, 1));

		memcpy(lsid, m->lsid, m->lsid_len);
		k->m.lsid = lsid;
		k->m.lsid_len = m->lsid_len;
		k->m.txn = m->txn;
		k->m.after = m->after;
		bson_copy_to(&m->doc, &k->m.doc);
		k->time = *(IdxClusterTime *) lfirst(lc2);
		s->kept_markers = lappend(s->kept_markers, k);
	}
	MemoryContextSwitchTo(old);
	foreach(lc, s->kept_markers)
		newest = Max(newest, ((KeptMarker *) lfirst(lc))->time);
	foreach(lc, s->kept_markers)
	{
		KeptMarker *k = lfirst(lc);

		if (list_length(s->kept_markers) > MARKER_KEEP ||
			k->time + ((IdxClusterTime) MARKER_KEEP_SECS << 32) < newest)
		{
			s->kept_markers = foreach_delete_current(s->kept_markers, lc);
			free_kept(k);
		}
	}
}

/*
 * The kept marker of transaction (lsid, txn), or NULL.
 */
Marker *
idx_applier_kept_marker(AppStream *s, const uint8_t *lsid, uint32_t len,
						int64 txn)
{
	ListCell   *lc;

	foreach(lc, s->kept_markers)
	{
		KeptMarker *k = lfirst(lc);

		if (k->m.txn == txn && k->m.lsid_len == len &&
			memcmp(k->m.lsid, lsid, len) == 0)
			return &k->m;
	}
	return NULL;
}

/*
 * Forget the kept markers (the stream is closed).
 */
void
idx_applier_forget_markers(AppStream *s)
{
	if (s->marker_cxt)
		MemoryContextDelete(s->marker_cxt);
	s->marker_cxt = NULL;
	s->kept_markers = NIL;
}

/*
 * Is "lsid" (an event's lsid document, raw) a session of the FDW's, of our
 * database and server, per the registry (sync_sessions.h)?  The registry's
 * lsids are read once per batch, into *registry (*nregistry of them, each
 * IDX_LSID_LEN bytes; -1: not read yet), in the current memory context.
 */
static bool
fdw_session(const uint8_t *lsid, uint32_t len, uint8 **registry,
			int *nregistry)
{
	bson_t		doc;
	bson_iter_t iter;
	bson_subtype_t subtype;
	uint32_t	idlen;
	const uint8_t *id;
	int			i;

	if (!bson_init_static(&doc, lsid, len) ||
		!bson_iter_init_find(&iter, &doc, "id") ||
		!BSON_ITER_HOLDS_BINARY(&iter))
		return false;
	bson_iter_binary(&iter, &subtype, &idlen, &id);
	if (idlen != IDX_LSID_LEN)
		return false;
	if (*nregistry < 0)
	{
		uint8		(*out)[IDX_LSID_LEN];

		out = palloc(sizeof(*out) * IDX_SYNC_MAX_SESSIONS);
		*registry = (uint8 *) out;
		*nregistry = Min(idx_sync_sessions_lsids(MyDatabaseId,
												 applier.slot->serverid, out,
												 IDX_SYNC_MAX_SESSIONS),
						 IDX_SYNC_MAX_SESSIONS);
	}
	for (i = 0; i < *nregistry; i++)
		if (memcmp(*registry + i * IDX_LSID_LEN, id, IDX_LSID_LEN) == 0)
			return true;
	return false;
}

/*
 * Should a fact event of the transaction of session "lsid", whose marker
 * is neither in its batch nor kept, wait for it (see the file header)?
 * Only on mongos, for a session of the FDW's; *registry and *nregistry as
 * for fdw_session().
 */
bool
idx_applier_awaits_marker(AppStream *s, const uint8_t *lsid, uint32_t len,
						  uint8 **registry, int *nregistry)
{
	return s->mongos && fdw_session(lsid, len, registry, nregistry);
}
