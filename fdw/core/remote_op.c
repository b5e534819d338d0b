/*-------------------------------------------------------------------------
 *
 * remote_op.c
 *		  What the FDW was doing on a MongoDB server: the CONTEXT line of
 *		  an error about it.
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/core/remote_op.c
 *
 * Each kind of operation (IdxOpKind) has a whole sentence of its own, so
 * that messages are not put together from pieces and can be translated.
 * Every error about a remote operation ends with one: the translated
 * libmongoc and MongoDB errors (remote_error.c), MongoDB's limits
 * (mongo_limits.c) and the errors other files raise about a write or a
 * read of their own.  Below all of them, it depends on nothing of ours.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "core/remote_op.h"

/*
 * An IdxOp naming "object" in "container", in the current memory context.
 */
const IdxOp *
idx_op(IdxOpKind kind, const char *object, const char *container)
{
	IdxOp	   *op = palloc(sizeof(IdxOp));

	op->kind = kind;
	op->object = object;
	op->container = container;
	return op;
}

/*
 * The CONTEXT line of an error about operation "what": a sentence of its
 * own for each kind, so that each can be translated whole.  Called inside
 * an ereport(); returns 0 as the errxxx() functions do.
 */
int
idx_op_context(const IdxOp *what)
{
	const char *o = what->object;
	const char *c = what->container;

	switch (what->kind)
	{
		case IDX_OP_CONNECT:
			return errcontext("while connecting to the server");
		case IDX_OP_SELECT_SERVER:
			return errcontext("while selecting a server for writes");
		case IDX_OP_START_SESSION:
			return errcontext("while starting a session");
		case IDX_OP_START_XACT:
			return errcontext("while starting a transaction");
		case IDX_OP_JOIN_XACT:
			return errcontext("while joining the transaction");
		case IDX_OP_COMMIT_XACT:
			return errcontext("while committing the transaction");
		case IDX_OP_WRITE_XACT_MARKER:
			return errcontext("while writing the transaction's marker for the change-stream applier");
		case IDX_OP_CLUSTER_TIME:
			return errcontext("while reading the cluster time of the server");
		case IDX_OP_LIST_COLLECTIONS:
			return errcontext("while listing the collections of database \"%s\"", c);
		case IDX_OP_READ:
			return errcontext("while reading collection \"%s\" of database \"%s\"", o, c);
		case IDX_OP_COUNT:
			return errcontext("while counting the documents of collection \"%s\" of database \"%s\"", o, c);
		case IDX_OP_SAMPLE:
			return errcontext("while sampling collection \"%s\" of database \"%s\"", o, c);
		case IDX_OP_INSERT:
			return errcontext("while inserting into collection \"%s\" of database \"%s\"", o, c);
		case IDX_OP_UPDATE_ROWS:
			return errcontext("while updating documents of collection \"%s\" of database \"%s\"", o, c);
		case IDX_OP_DELETE_ROWS:
			return errcontext("while deleting documents of collection \"%s\" of database \"%s\"", o, c);
		case IDX_OP_UPDATE_ONE:
			return errcontext("while updating a document of collection \"%s\" of database \"%s\"", o, c);
		case IDX_OP_DELETE_ONE:
			return errcontext("while deleting a document of collection \"%s\" of database \"%s\"", o, c);
		case IDX_OP_UNDO_INSERT:
			return errcontext("while removing the documents of a failed insert from collection \"%s\" of database \"%s\"", o, c);
		case IDX_OP_UNDO_WRITE:
			return errcontext("while restoring a document of collection \"%s\" of database \"%s\"", o, c);
		case IDX_OP_CREATE_INDEX_COLL:
			return errcontext("while creating index collection \"%s\" of database \"%s\"", o, c);
		case IDX_OP_DROP_INDEX_COLL:
			return errcontext("while dropping index collection \"%s\" of database \"%s\"", o, c);
		case IDX_OP_CREATE_LOOKUP:
			return errcontext("while creating the lookup index of index collection \"%s\" of database \"%s\"", o, c);
		case IDX_OP_SHARD_INDEX_COLL:
			return errcontext("while sharding index collection \"%s\" of database \"%s\"", o, c);
		case IDX_OP_BUILD_INDEX:
			return errcontext("while building index collection \"%s\" of database \"%s\"", o, c);
		case IDX_OP_VERIFY_INDEX:
			return errcontext("while verifying index collection \"%s\" of database \"%s\"", o, c);
		case IDX_OP_REPAIR_INDEX:
			return errcontext("while repairing index collection \"%s\" of database \"%s\"", o, c);
		case IDX_OP_WRITE_INDEX:
			return errcontext("while writing index collection \"%s\" of index \"%s\"", o, c);
		case IDX_OP_WRITE_INDEXES:
			return errcontext("while writing the index collections");
		case IDX_OP_CHECK_ENTRY:
			return errcontext("while checking an entry of index \"%s\"", o);
		case IDX_OP_FIND_INDEX_COLL:
			return errcontext("while looking for index collection \"%s\"", o);
		case IDX_OP_READ_OWNER:
			return errcontext("while reading the ownership marker of index collection \"%s\"", o);
		case IDX_OP_WRITE_OWNER:
			return errcontext("while writing the ownership marker of index collection \"%s\"", o);
		case IDX_OP_TAKE_OWNER:
			return errcontext("while taking over the ownership marker of index collection \"%s\"", o);
		case IDX_OP_READ_OWNERS:
			return errcontext("while reading the ownership markers of the indexes of foreign table \"%s\"", o);
		case IDX_OP_FOLLOW_STREAM:
			return errcontext("while following the change stream of database \"%s\"", c);
		case IDX_OP_READ_STREAM_POS:
			return errcontext("while reading the position of the change stream");
		case IDX_OP_STORE_STREAM_POS:
			return errcontext("while storing the position of the change stream");
		case IDX_OP_HEARTBEAT:
			return errcontext("while writing a heartbeat of the change stream");
		case IDX_OP_CONFIRM_DURABLE:
			return errcontext("while waiting for the change stream's applied changes to be majority-committed");
		case IDX_OP_READ_ELECTION:
			return errcontext("while asking the primary for its election");
		case IDX_OP_OPLOG_NOTE:
			return errcontext("while writing a no-op on every shard with appendOplogNote");
	}
	return 0;
}
