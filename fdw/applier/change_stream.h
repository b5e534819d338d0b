/*-------------------------------------------------------------------------
 *
 * change_stream.h
 *		  A database-level MongoDB change stream followed with raw aggregate
 *		  and getMore commands (change_stream.c), for the applier.
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/applier/change_stream.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef IDXTABLE_CHANGE_STREAM_H
#define IDXTABLE_CHANGE_STREAM_H

#include "nodes/pg_list.h"

#include "core/mongoc_compat.h"
#include "sync/sync_sessions.h"
#include "sync/sync_state.h"

/* Events per batch (the applier's batches of _ids) */
#define IDX_CS_BATCH_SIZE	1000

/* What came of opening a stream or of a getMore */
typedef enum IdxCsResult
{
	IDX_CS_OK,					/* a batch (possibly empty) */
	IDX_CS_RESUMABLE,			/* resumable error: reopen from the token */
	IDX_CS_HISTORY_LOST,		/* 286/280/136: the position cannot resume */
	IDX_CS_DENIED,				/* 13: the user may not follow the stream */
	IDX_CS_CLOSED,				/* the server closed the cursor (invalidate) */
	IDX_CS_TOO_LARGE			/* an event over 16 MB even without its
								 * documents (10334, 7182500) */
} IdxCsResult;

/*
 * One change stream on one MongoDB database, watching the given fact
 * collections (and idxtable.sync, the heartbeats).
 */
typedef struct IdxChangeStream
{
	mongoc_client_t *client;
	const char *servername;
	char	   *database;
	List	   *collections;	/* names (char *) of watched collections */
	mongoc_client_session_t *session;	/* one lsid for aggregate + getMores */
	uint32		server_id;		/* the mongos of the aggregate, which its
								 * getMores go to; 0: any (not mongos) */
	int64		cursor_id;		/* 0: not open */
	bson_t	   *reply;			/* the last reply (owns the batch) */
	const char *batch_field;	/* its firstBatch or nextBatch */
	bson_t	   *token;			/* the postBatchResumeToken, or NULL */
	bool		token_moved;	/* the PBRT changed since the open */
	bool		start_after;	/* the token is an invalidate's: reopen with
								 * startAfter (resumeAfter refuses it) */
	IdxClusterTime token_time;	/* cluster time of the PBRT, 0 unknown */
	IdxClusterTime start_floor; /* everything before this was covered at
								 * the open */
	IdxClusterTime reply_time;	/* the cluster time the last reply reported */
	IdxClusterTime start_at;	/* the startAtOperationTime of the open, or
								 * 0: the initial PBRT is a token of that
								 * time, which may be later than the
								 * server's clock by a tick or so */
	bool		split;			/* the server splits large events
								 * ($changeStreamSplitLargeEvent, 7.0+) */
	bool		slim;			/* this batch's events carry no documents:
								 * an event was over 16 MB (change_stream.c) */
	int			nexcluded;		/* sessions whose transactions the stream
								 * leaves out (applier_exclude.c), 0: none */
	uint8		(*excluded)[IDX_LSID_LEN];	/* their lsids' ids */
} IdxChangeStream;

/*
 * Open "cs" (database, collections, client set by the caller) after
 * "token" if given (startAfter if cs->start_after, else resumeAfter), else
 * at "start_at" (inclusive), else now.  Raises an ERROR for errors that
 * are not history lost.
 */
extern IdxCsResult idx_cs_open(IdxChangeStream *cs, const bson_t *token,
							   IdxClusterTime start_at);

/* Fetch the next batch, waiting at most max_time_ms on the server */
extern IdxCsResult idx_cs_get_more(IdxChangeStream *cs, int max_time_ms);

/*
 * Iterate over the events of the current batch: idx_cs_batch() sets up
 * "iter" (the caller's: bson_iter_t must not live in palloc'd memory, which
 * is not aligned as libbson declares it), then each idx_cs_next_event()
 * gives one event, valid until the next getMore.
 */
extern void idx_cs_batch(IdxChangeStream *cs, bson_iter_t *iter);
extern bool idx_cs_next_event(bson_iter_t *iter, bson_t *event);

/* Check a split event put together from its fragments: an ERROR if bad */
extern void idx_cs_check_whole(IdxChangeStream *cs, const bson_t *event);

/* Close the server cursor (best effort) and the session */
extern void idx_cs_close(IdxChangeStream *cs);

/* The cluster time of an event (0 if it has none) */
extern IdxClusterTime idx_cs_event_time(const bson_t *event);

/* Wait until the majority commit point has reached "ct" (ERROR after timeout_ms) */
extern void idx_cs_wait_majority(mongoc_client_t *client,
								 const char *servername,
								 const char *database, IdxClusterTime ct,
								 int timeout_ms);

/* The cluster time a resume token starts with, or 0 if not decodable */
extern IdxClusterTime idx_cs_token_time(const bson_t *token);

#endif							/* IDXTABLE_CHANGE_STREAM_H */
