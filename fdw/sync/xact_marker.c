/*-------------------------------------------------------------------------
 *
 * xact_marker.c
 *		  The marker a MongoDB transaction of the FDW writes for the
 *		  change-stream applier: which index tables its writes maintained.
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/sync/xact_marker.c
 *
 * In transaction mode a write through the FDW writes its facts and their
 * entries in one MongoDB transaction, so its changes need nothing from the
 * applier.  To let the applier know that without reading the facts and
 * entries again, the transaction writes, at pre-commit and inside the
 * transaction, one document per MongoDB database it wrote facts of: a
 * replaceOne upsert into <db>.idxtable.sync (which the applier's change
 * stream watches) of
 *
 *	 {_id: "fdw:<system identifier>/<backend id>/<user mapping OID>",
 *	  txn: <a counter>,
 *	  after: <a cluster time the session knew before the transaction>,
 *	  maintained: [{c: <fact collection>, i: [<definition_id>, ...]}, ...]}
 *
 * where "i" lists the index tables that EVERY write of the transaction to
 * that collection maintained: a write through another foreign table over
 * the same collection that lacks one of them removes it.  The change
 * events of a transaction carry its lsid and txnNumber, the marker's event
 * among them (mongod document_source_change_stream_unwind_transaction.cpp),
 * so the applier matches them without reading the marker's _id; why it
 * may then skip them is explained in applier_stream.c.  Markers are
 * written only where an applier can run (idx_sync_enabled()) and only for
 * databases with a fact collection that has index tables.
 *
 * How many markers.  The applier reads markers only from their events
 * (an insert's or replace's fullDocument, with the event's own lsid and
 * txnNumber), never the stored document, so a stored marker is needed by
 * nobody once its transaction has committed; but it must not be deleted
 * while a transaction may still write it (an outside delete between that
 * transaction's snapshot and its write would make it fail with a write
 * conflict).  So the document is not one per session (a backend's session
 * is new with every connection, and a document per session would pile up
 * forever) but one per client that can be live at once: the PostgreSQL
 * cluster (its system identifier), the backend (its id, unique among the
 * live backends) and the client's user mapping (a backend has one client
 * per mapping).  Each transaction replaces its document, so a database
 * holds at most one marker per backend slot and user mapping of each
 * PostgreSQL cluster that writes to it.  Two live sessions never share a
 * document, so their transactions do not conflict on it; only a
 * transaction of a backend that ended without ending its MongoDB
 * transaction (killed during COMMIT) can hold the document of a later
 * backend with the same id, until mongod aborts it (at its transaction
 * lifetime limit, 60 s by default): that backend's COMMIT then fails with
 * a serialization failure (40001), which can be retried.
 *
 * The same knowledge lets the applier leave our transactions out of its
 * stream altogether (applier_exclude.c): each client's session is
 * registered in shared memory (sync_sessions.c) with the start and end of
 * each transaction, and a transaction that did not maintain every index
 * table of a collection it wrote (see write_complete) says so before its
 * commit, so that the applier takes it into its stream again.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xlog.h"
#include "utils/memutils.h"

#include "core/connection.h"
#include "core/convert.h"
#include "core/mongoc_compat.h"
#include "core/pg_compat.h"
#include "core/remote_error.h"
#include "core/xact.h"
#include "index/index_catalog.h"
#include "sync/sync_sessions.h"
#include "sync/sync_state.h"
#include "sync/xact_marker.h"

/* The applier's collection in each database (applier_stream.c) */
#define MARKER_PREFIX		"fdw:"

/* mongod's NamespaceExists */
#define MONGO_NAMESPACE_EXISTS	48

/*
 * What the writes of a transaction to one fact collection maintained.
 */
typedef struct IdxXactMaintained
{
	char	   *database;
	char	   *collection;
	List	   *defids;			/* definition_ids (char *) */
	bool		complete;		/* every write maintained every index table
								 * of the collection (see below) */
	Oid			last_relid;		/* the table and first definition of the last
								 * write noted (a row of the same statement
								 * needs no look: its definitions are the
								 * same structs) */
	void	   *last_def;
} IdxXactMaintained;

/* "server/database" of the databases whose idxtable.sync is known to exist */
static List *ensured = NIL;

/* Transactions that wrote a marker in this backend (the marker's "txn") */
static int64 marker_count = 0;

/* This backend's entries in the registry of sessions (int) */
static List *own_entries = NIL;

/*
 * Make sure <database>.idxtable.sync exists, once per backend and
 * database, with a "create" outside the transaction: creating a collection
 * implicitly inside a transaction is refused where it would be a
 * cross-shard write transaction.  False if it could not be created (then
 * no marker is written there; the applier applies the writes as any).
 */
static bool
ensure_marker_collection(mongoc_client_t *client, const char *servername,
						 const char *database)
{
	char	   *key = psprintf("%s/%s", servername, database);
	bson_t		cmd = BSON_INITIALIZER;
	bson_t		reply;
	bson_error_t error;
	ListCell   *lc;
	MemoryContext old;
	bool		ok;

	foreach(lc, ensured)
		if (strcmp(lfirst(lc), key) == 0)
			return true;
	idx_check_append(BSON_APPEND_UTF8(&cmd, "create", IDX_SYNC_COLLECTION));
	ok = mongoc_client_command_with_opts(client, database, &cmd, NULL, NULL,
										 &reply, &error);
	bson_destroy(&cmd);
	bson_destroy(&reply);
	if (!ok && !(error.domain == MONGOC_ERROR_SERVER &&
				 error.code == MONGO_NAMESPACE_EXISTS))
		return false;
	old = MemoryContextSwitchTo(TopMemoryContext);
	ensured = lappend(ensured, pstrdup(key));
	MemoryContextSwitchTo(old);
	return true;
}

/*
 * The entry of "x" for database/collection, or NULL.
 */
static IdxXactMaintained *
find_maintained(IdxRemoteXact *x, const char *database,
				const char *collection)
{
	ListCell   *lc;

	foreach(lc, x->maintained)
	{
		IdxXactMaintained *m = lfirst(lc);

		if (strcmp(m->database, database) == 0 &&
			strcmp(m->collection, collection) == 0)
			return m;
	}
	return NULL;
}

/*
 * Does "defs" (IdxIndexDef *) hold the definition "defid", valid?  Only
 * valid index tables are marked: a building or stale one is written by its
 * build or rebuild at the same time, which the transaction may not see.
 */
static bool
defs_contain(List *defs, const char *defid)
{
	ListCell   *lc;

	foreach(lc, defs)
	{
		IdxIndexDef *def = lfirst(lc);

		if (def->state == IDX_STATE_VALID &&
			strcmp(def->definition_id, defid) == 0)
			return true;
	}
	return false;
}

/*
 * Did a write through foreign table "info" that maintained "defs" leave
 * nothing of its collection to the applier?  Not if an index table of the
 * table is building or stale (its build, or rebuild, needs the events),
 * nor if another foreign table of the server has index tables over the
 * same collection.
 */
static bool
write_complete(const IdxTableInfo *info, List *defs)
{
	ListCell   *lc;

	foreach(lc, defs)
	{
		IdxIndexDef *def = lfirst(lc);

		if (def->state != IDX_STATE_VALID && def->state != IDX_STATE_FAILED)
			return false;
	}
	return !idx_collection_shared(info->relid, info->serverid, info->database,
								  info->collection);
}

/*
 * Note what a write through foreign table "info" in the open transaction
 * maintained (see xact.h): the first write to a collection sets its list,
 * every later one keeps only the index tables it maintained too (and the
 * collection is then no longer complete if that removed one).
 */
void
idx_xact_note_maintained(mongoc_client_t *client, const char *servername,
						 const IdxTableInfo *info, List *defs)
{
	IdxRemoteXact *x = idx_conn_xact(client);
	IdxXactMaintained *m;
	MemoryContext old;
	ListCell   *lc;
	bool		complete;

	if (x == NULL || !x->in_txn || !idx_sync_enabled())
		return;
	m = find_maintained(x, info->database, info->collection);
	if (m != NULL && m->last_relid == info->relid &&
		m->last_def == (defs != NIL ? linitial(defs) : NULL))
		return;					/* another row of the same statement */
	complete = write_complete(info, defs);
	if (m != NULL)
	{
		m->last_relid = info->relid;
		m->last_def = defs != NIL ? linitial(defs) : NULL;
		m->complete = m->complete && complete;
		foreach(lc, m->defids)
			if (!defs_contain(defs, lfirst(lc)))
			{
				m->defids = foreach_delete_current(m->defids, lc);
				m->complete = false;
			}
		return;
	}
	old = MemoryContextSwitchTo(TopTransactionContext);
	m = palloc0(sizeof(IdxXactMaintained));
	m->database = pstrdup(info->database);
	m->collection = pstrdup(info->collection);
	m->complete = complete;
	m->last_relid = info->relid;
	m->last_def = defs != NIL ? linitial(defs) : NULL;
	if (defs != NIL &&
		ensure_marker_collection(client, servername, info->database))
	{
		foreach(lc, defs)
			if (((IdxIndexDef *) lfirst(lc))->state == IDX_STATE_VALID)
				m->defids = lappend(m->defids,
									pstrdup(((IdxIndexDef *) lfirst(lc))->definition_id));
	}
	x->maintained = lappend(x->maintained, m);
	MemoryContextSwitchTo(old);
}

/*
 * The _id of the markers of "x": "fdw:<system identifier>/<backend
 * id>/<user mapping OID>" (see the file header).
 */
static char *
marker_id(IdxRemoteXact *x)
{
	return psprintf(MARKER_PREFIX UINT64_FORMAT "/%d/%u",
					GetSystemIdentifier(), idx_backend_number(), x->umid);
}

/*
 * The marker document of "x" for "database"; false if no collection of
 * the database has an index table to mark.
 */
static bool
build_marker(IdxRemoteXact *x, const char *database, bson_t *doc)
{
	bson_t		list,
				item,
				ids;
	ListCell   *lc,
			   *lc2;
	uint32		n = 0;
	bool		any = false;
	char		key[16];

	idx_check_append(BSON_APPEND_UTF8(doc, "_id", marker_id(x)));
	idx_check_append(BSON_APPEND_INT64(doc, "txn", marker_count));
	idx_check_append(bson_append_timestamp(doc, "after", -1,
										   (uint32_t) (x->known_before >> 32),
										   (uint32_t) x->known_before));
	idx_check_append(IDX_BSON_APPEND_ARRAY_BEGIN(doc, "maintained", &list));
	foreach(lc, x->maintained)
	{
		IdxXactMaintained *m = lfirst(lc);
		uint32		k = 0;

		if (strcmp(m->database, database) != 0 || m->defids == NIL)
			continue;
		snprintf(key, sizeof(key), "%u", n++);
		idx_check_append(BSON_APPEND_DOCUMENT_BEGIN(&list, key, &item));
		idx_check_append(BSON_APPEND_UTF8(&item, "c", m->collection));
		idx_check_append(IDX_BSON_APPEND_ARRAY_BEGIN(&item, "i", &ids));
		foreach(lc2, m->defids)
		{
			snprintf(key, sizeof(key), "%u", k++);
			idx_check_append(BSON_APPEND_UTF8(&ids, key, lfirst(lc2)));
		}
		idx_check_append(bson_append_array_end(&item, &ids));
		idx_check_append(bson_append_document_end(&list, &item));
		any = true;
	}
	idx_check_append(bson_append_array_end(doc, &list));
	return any;
}

/*
 * Write the marker of "x" for "database" in its transaction.
 */
static void
write_marker(IdxRemoteXact *x, const char *database)
{
	bson_t		doc = BSON_INITIALIZER;
	bson_t		selector = BSON_INITIALIZER;
	bson_t		opts = BSON_INITIALIZER;
	bson_t		reply;
	bson_error_t error;
	mongoc_collection_t *coll;
	bool		ok;

	if (!build_marker(x, database, &doc))
	{
		bson_destroy(&doc);
		return;
	}
	idx_check_append(BSON_APPEND_UTF8(&selector, "_id", marker_id(x)));
	idx_check_append(BSON_APPEND_BOOL(&opts, "upsert", true));
	if (!mongoc_client_session_append(x->session, &opts, &error))
		idx_report_error(&error, x->servername,
						 idx_op(IDX_OP_JOIN_XACT, NULL, NULL));
	coll = mongoc_client_get_collection(x->client, database,
										IDX_SYNC_COLLECTION);
	ok = mongoc_collection_replace_one(coll, &selector, &doc, &opts, &reply,
									   &error);
	mongoc_collection_destroy(coll);
	bson_destroy(&reply);
	bson_destroy(&doc);
	bson_destroy(&selector);
	bson_destroy(&opts);
	if (!ok)
		idx_report_error(&error, x->servername,
						 idx_op(IDX_OP_WRITE_XACT_MARKER, NULL, NULL));
}

/*
 * Write the markers of "x", one per database it wrote facts of (see the
 * file header).
 */
void
idx_xact_write_markers(IdxRemoteXact *x)
{
	List	   *done = NIL;
	ListCell   *lc,
			   *lc2;

	if (x->maintained == NIL)
		return;
	marker_count++;
	foreach(lc, x->maintained)
	{
		IdxXactMaintained *m = lfirst(lc);
		bool		seen = false;

		/* before the commit: the applier keeps this one in its stream */
		if (!m->complete && x->registered)
			idx_sync_session_doubt(x->registered - 1);

		foreach(lc2, done)
			seen = seen || strcmp(lfirst(lc2), m->database) == 0;
		if (seen)
			continue;
		write_marker(x, m->database);
		done = lappend(done, m->database);
	}
	list_free(done);
}


/* ----------------------------------------------------------------
 *		The registry of sessions (sync_sessions.h)
 * ----------------------------------------------------------------
 */

/*
 * idx_conn_foreach_xact callback: is *arg the entry of this client's
 * session?  Then say so (-1).
 */
static void
match_entry(IdxRemoteXact *x, void *arg)
{
	int		   *entry = (int *) arg;

	if (*entry >= 0 && x->registered == *entry + 1)
		*entry = -1;
}

/*
 * Forget the entries of sessions ended since (their clients were
 * destroyed with the connection cache's entry, in core/connection.c).
 */
static void
forget_ended_sessions(void)
{
	ListCell   *lc;

	foreach(lc, own_entries)
	{
		int			probe = lfirst_int(lc);

		idx_conn_foreach_xact(match_entry, &probe);
		if (probe < 0)
			continue;
		idx_sync_session_forget(lfirst_int(lc));
		own_entries = foreach_delete_current(own_entries, lc);
	}
}

/*
 * A MongoDB transaction of the FDW was just started on "client" (no
 * command sent in it yet): register the client's session if it is not
 * yet, and tell the registry the transaction starts.
 */
void
idx_xact_note_started(mongoc_client_t *client)
{
	IdxRemoteXact *x = idx_conn_xact(client);

	if (x == NULL || !x->in_txn || x->session == NULL || !idx_sync_enabled())
		return;
	if (!x->registered)
	{
		int			entry;

		forget_ended_sessions();
		entry = idx_sync_session_register(x->serverid, x->session);
		if (entry >= 0)
		{
			MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);

			own_entries = lappend_int(own_entries, entry);
			MemoryContextSwitchTo(old);
			x->registered = entry + 1;
		}
	}
	if (x->registered)
	{
		idx_sync_session_begin(x->registered - 1);
		x->registry_open = true;
	}
}

/*
 * The MongoDB transaction of "x" has ended (its commit or abort
 * returned, or the PostgreSQL transaction ends), at the session's latest
 * operationTime: the applier's stream has seen the transaction once it
 * has passed that time (a commit acknowledged below majority is not in
 * the stream yet when the commit returns).  Idempotent.
 */
void
idx_xact_note_ended(IdxRemoteXact *x)
{
	if (x->registered && x->registry_open)
	{
		uint32_t	t = 0,
					i = 0;

		/* the commit's (or abort's) time: its reply's operationTime */
		if (x->session)
			mongoc_client_session_get_operation_time(x->session, &t, &i);
		idx_sync_session_end(x->registered - 1,
							 ((uint64) t << 32) | (uint64) i);
	}
	x->registry_open = false;
}
