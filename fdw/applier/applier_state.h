/*-------------------------------------------------------------------------
 *
 * applier_state.h
 *		  The change-stream applier's own state (applier_state.c): the
 *		  types every file of fdw/applier shares, the one Applier of the
 *		  process, and what they all ask of it.
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/applier/applier_state.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef IDXTABLE_APPLIER_STATE_H
#define IDXTABLE_APPLIER_STATE_H

#include "nodes/pg_list.h"

#include "applier/change_stream.h"
#include "core/connection.h"
#include "core/mongoc_compat.h"
#include "sync/sync_state.h"

/* An index table the applier maintains */
typedef struct AppIndex
{
	char	   *name;
	Oid			relid;			/* its foreign table */
	char	   *collection;		/* the table's fact collection */
	char		state;			/* 'v' valid, 'b' building, 's' stale */
	IdxClusterTime sync_from;	/* from when its changes are needed; 0 if
								 * unknown */
	IdxSyncIndexStatus status;	/* as reported to the shared state */
	IdxClusterTime fixed_through;	/* every entry the applier wrote to it
									 * is at or before this time */
	bool		wrote;			/* wrote entries since fixed_through */
} AppIndex;

/* One MongoDB database of fact collections: its stream and its indexes */
typedef struct AppStream
{
	char	   *database;
	List	   *indexes;		/* AppIndex * */
	IdxChangeStream cs;
	bool		open;
	IdxClusterTime covered;		/* every event up to here is applied */
	IdxClusterTime heartbeat_for;	/* the request the last heartbeat met */
	IdxClusterTime wake_looked_for;	/* a request first looked for in the
									 * stream (its backend's wake-up) */
	TimestampTz heartbeat_at;
	TimestampTz saved_at;		/* when the position was last stored */
	bool		unsaved;		/* the position moved since */
	bool		events_unsaved; /* ... and events were applied */
	bool		caught_up;		/* the last batch was empty: nothing pending */
	bool		partial;		/* the last batch had events, but did not
								 * fill: more may follow soon */
	List	   *deferred;		/* facts of a transaction cut by the end of
								 * the last batch, waiting for its marker */
	int			ndeferred;
	MemoryContext defer_cxt;	/* their memory */
	List	   *spared;			/* AppSpared *: facts whose young claims a
								 * repair left to writes in flight */
	MemoryContext spare_cxt;	/* their memory */
	bson_t	   *split_event;	/* what identifies a split event whose
								 * fragments came so far (applier_stream.c),
								 * or NULL */
	int32		split_next;		/* the fragment number expected next */
	TimestampTz complete_since; /* the last batch held every event committed
								 * before this time (sent its getMore), or 0 */
	bool		repaired;		/* the last batch wrote to an index table */
	bool		election_known; /* "election" is the primary's before the
								 * reads of the coming repairs */
	uint64		election;		/* idx_primary_election(), 0: none held */

	/* leaving the FDW's own transactions out (applier_exclude.c) */
	bool		armed;			/* the stream leaves them out now */
	bool		arm_pending;	/* the next step reopens it so */
	uint64		armed_generation;	/* the registry's, when it armed */
	List	   *hazards;		/* AppHazard *: transactions to see pass in
								 * the stream before it may arm */
	uint64	   *doubts_seen;	/* per registry entry, the start of the
								 * doubtful transaction last seen */
	uint64		doubts_looked;	/* the registry's sequence at the last look
								 * at the doubts */
	TimestampTz quiet_since;	/* no batch wrote to an index table since */
	TimestampTz arm_checked_at; /* the last check of the catalog for it */
	bson_t	   *before;			/* the token before the current getMore */

	/* markers of cross-shard transactions (applier_markers.c) */
	bool		mongos;			/* the stream goes through mongos */
	List	   *kept_markers;	/* markers seen recently (KeptMarker *) */
	MemoryContext marker_cxt;	/* their memory */
} AppStream;

/*
 * A fact whose young unique claim a repair of index table "ix" left alone
 * to a write in ordered mode that may have made it (index_claims.h);
 * checked again once every such write that began by "time" is over.
 */
typedef struct AppSpared
{
	AppIndex   *ix;
	bson_t	   *fact;			/* {"v": _id} */
	int64		time;			/* the claim's */
} AppSpared;

/* The marker of a transaction through the FDW (applier_stream.c's header) */
typedef struct Marker
{
	const uint8_t *lsid;		/* the event's lsid, raw (a view) */
	uint32_t	lsid_len;
	int64		txn;			/* the event's txnNumber */
	IdxClusterTime after;		/* a time its snapshot includes; 0 unknown */
	bson_t		doc;			/* its fullDocument (a view) */
} Marker;

/* The _ids of the changed facts of one collection in a batch */
typedef struct CollIds
{
	const char *collection;
	bson_value_t *ids;			/* views into the stream's reply */
	const bson_t **images;		/* each id's fact as its event left it, or
								 * NULL (index_repair.h) */
	Marker	  **marks;			/* the marker of each id's event, or NULL */
	const bson_t **changes;		/* an update event's updateDescription, or
								 * NULL: any field may have changed */
	int			n;
	int			alloc;
	int64		events;
	bool		marked;			/* any marks[i] set */
	bool		described;		/* any changes[i] set */
} CollIds;


/* The applier (one per process) */
typedef struct Applier
{
	int			slotno;
	IdxApplierSlot *slot;
	char	   *servername;
	char	   *key;			/* sysid/dboid/server/owner */
	mongoc_client_t *client;	/* our own, appName "idxtable_fdw applier" */
	uint32		server_hash;	/* idx_server_target_hash() it was made
								 * with */
	bool		mongos;			/* the client talks to mongos (a sharded
								 * cluster): heartbeats, covered times and
								 * arming differ (applier_stream.c) */
	bool		durable_reads;	/* writes wait for a majority (the URI's
								 * write concern): facts are read at majority
								 * (applier_stream.c) */
	uint64		generation;		/* catalog generation loaded */
	char	   *signature;		/* of what it loaded (applier.c), in
								 * TopMemoryContext */
	List	   *streams;		/* AppStream * */
	MemoryContext cxt;			/* the catalog's memory */
	IdxReplyTimes replies;		/* the latest operationTime of the replies
								 * to this process's commands (connection.c) */
} Applier;

extern Applier applier;

/* ---- applier_state.c ---- */
extern void idx_applier_spi_begin(void);
extern void idx_applier_spi_end(void);
extern struct IdxIndexDef *idx_applier_current_def(AppIndex *ix);
extern void idx_applier_set_state(AppStream *s, const char *from_states,
								  const char *to_state);
extern void idx_applier_fail_collection(AppStream *s, const char *collection,
										IdxClusterTime at);
extern void idx_applier_report(AppStream *s, bool streaming);
extern char *idx_applier_time_str(IdxClusterTime ct);
extern bool idx_applier_has_conflicts(AppIndex *ix);

#endif							/* IDXTABLE_APPLIER_STATE_H */
