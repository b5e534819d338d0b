/*-------------------------------------------------------------------------
 *
 * remote_op.h
 *		  What the FDW was doing on a MongoDB server, for the CONTEXT line
 *		  of an error about it (remote_op.c).
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/core/remote_op.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef IDXTABLE_REMOTE_OP_H
#define IDXTABLE_REMOTE_OP_H

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

#endif							/* IDXTABLE_REMOTE_OP_H */
