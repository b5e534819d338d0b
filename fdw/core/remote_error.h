/*-------------------------------------------------------------------------
 *
 * remote_error.h
 *		  Translation of libmongoc and MongoDB errors (remote_error.c).
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/core/remote_error.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef IDXTABLE_REMOTE_ERROR_H
#define IDXTABLE_REMOTE_ERROR_H

#include "core/mongoc_compat.h"
#include "core/pg_compat.h"

/*
 * What the FDW was doing on a MongoDB server when an operation failed.  An
 * error's CONTEXT line says it, in a whole sentence of its own for each
 * kind (idx_op_context()), so that messages are not put together from
 * pieces and can be translated; the kind, not any text, also decides what
 * the error is (IDX_OP_CONNECT: could not connect).  The names a sentence
 * holds are "object" and "container", as each kind below says.
 */
typedef enum IdxOpKind
{
	IDX_OP_CONNECT,				/* (no names) */
	IDX_OP_SELECT_SERVER,		/* (no names) */
	IDX_OP_START_SESSION,		/* (no names) */
	IDX_OP_START_XACT,			/* (no names) */
	IDX_OP_JOIN_XACT,			/* (no names) */
	IDX_OP_COMMIT_XACT,			/* (no names) */
	IDX_OP_WRITE_XACT_MARKER,	/* (no names) */
	IDX_OP_CLUSTER_TIME,		/* (no names) */
	IDX_OP_LIST_COLLECTIONS,	/* container: database */
	IDX_OP_READ,				/* collection, database */
	IDX_OP_COUNT,				/* collection, database */
	IDX_OP_SAMPLE,				/* collection, database */
	IDX_OP_INSERT,				/* collection, database */
	IDX_OP_UPDATE_ROWS,			/* collection, database */
	IDX_OP_DELETE_ROWS,			/* collection, database */
	IDX_OP_UPDATE_ONE,			/* collection, database */
	IDX_OP_DELETE_ONE,			/* collection, database */
	IDX_OP_UNDO_INSERT,			/* collection, database */
	IDX_OP_UNDO_WRITE,			/* collection, database */
	IDX_OP_CREATE_INDEX_COLL,	/* index collection, database */
	IDX_OP_DROP_INDEX_COLL,		/* index collection, database */
	IDX_OP_CREATE_LOOKUP,		/* index collection, database */
	IDX_OP_SHARD_INDEX_COLL,	/* index collection, database */
	IDX_OP_BUILD_INDEX,			/* index collection, database */
	IDX_OP_VERIFY_INDEX,		/* index collection, database */
	IDX_OP_REPAIR_INDEX,		/* index collection, database */
	IDX_OP_WRITE_INDEX,			/* index collection, index */
	IDX_OP_WRITE_INDEXES,		/* (no names) */
	IDX_OP_CHECK_ENTRY,			/* (object: index) */
	IDX_OP_FIND_INDEX_COLL,		/* index collection */
	IDX_OP_READ_OWNER,			/* index collection */
	IDX_OP_WRITE_OWNER,			/* index collection */
	IDX_OP_TAKE_OWNER,			/* index collection */
	IDX_OP_READ_OWNERS,			/* (object: foreign table) */
	IDX_OP_FOLLOW_STREAM,		/* (container: database) */
	IDX_OP_READ_STREAM_POS,		/* (no names) */
	IDX_OP_STORE_STREAM_POS,	/* (no names) */
	IDX_OP_HEARTBEAT,			/* (no names) */
	IDX_OP_CONFIRM_DURABLE,		/* (no names) */
	IDX_OP_READ_ELECTION,		/* (no names) */
	IDX_OP_OPLOG_NOTE			/* (no names) */
} IdxOpKind;

typedef struct IdxOp
{
	IdxOpKind	kind;
	const char *object;			/* collection, index or table, or NULL */
	const char *container;		/* its database (or index), or NULL */
} IdxOp;

/* An IdxOp, palloc'd, naming "object" in "container" (see IdxOpKind) */
extern const IdxOp *idx_op(IdxOpKind kind, const char *object,
						   const char *container);

/* The CONTEXT line of an error, inside an ereport(): errcontext(...) */
extern int	idx_op_context(const IdxOp *what);

/*
 * Raise an ERROR for a failed MongoDB operation.  "server" names the
 * foreign server, "what" says what was being done (the CONTEXT line).  The
 * libmongoc message goes into the DETAIL, reduced to its server-provided
 * part and never with the URI or credentials.  Chooses the SQLSTATE from
 * the error domain/code (connection problems -> class 08, duplicate key
 * -> 23505, interrupted/timeouts -> 57014, everything else -> HV000).
 */
pg_noreturn extern void idx_report_error(const bson_error_t *error,
										 const char *server,
										 const IdxOp *what);

/*
 * A copy of a libmongoc message with anything that looks like a connection
 * string removed, for a detail line.
 */
extern char *idx_scrub_message(const char *msg);

/* A command reply that failed: same, using the reply's code/errmsg */
pg_noreturn extern void idx_report_reply_error(const bson_t *reply,
											   const bson_error_t *error,
											   const char *server,
											   const IdxOp *what);

/* A cursor that failed: same, using its error document */
pg_noreturn extern void idx_report_cursor_error(mongoc_cursor_t *cursor,
												const char *server,
												const IdxOp *what);

/*
 * Put a failed command's reply code and errmsg (the server's words) into
 * *error, unless the connection itself failed.
 */
extern void idx_merge_reply_error(bson_error_t *error, const bson_t *reply);

#endif							/* IDXTABLE_REMOTE_ERROR_H */
