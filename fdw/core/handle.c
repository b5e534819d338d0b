/*-------------------------------------------------------------------------
 *
 * handle.c
 *		  libmongoc handles owned by a memory context.
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/core/handle.c
 *
 * Instead of "PG_TRY, then destroy the handle in PG_FINALLY" around every
 * use of a libmongoc handle, the handle is registered with a reset
 * callback on the current memory context (the mechanism the scans use for
 * their cursors): however the code leaves, by returning or by an error,
 * the handle is destroyed at the latest when the context goes.  Code that
 * is done with a handle releases it at once, as before.
 *
 * The callback never throws: libmongoc's destroy functions free memory
 * and, for a cursor, may send killCursors through the stream, whose
 * callbacks never throw either (stream.c).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "utils/memutils.h"

#include "core/handle.h"

struct IdxHandle
{
	MemoryContextCallback callback; /* first: the context's list links it */
	void	   *handle;			/* NULL once destroyed */
	void		(*destroy) (void *);
};

/*
 * Destroy the handle unless that was done already.
 */
static void
destroy_handle(void *arg)
{
	IdxHandle  *owned = (IdxHandle *) arg;
	void	   *handle = owned->handle;

	owned->handle = NULL;
	if (handle != NULL)
		owned->destroy(handle);
}

/*
 * Register "handle" with the current memory context.  A NULL handle is
 * accepted (nothing to destroy).  The registration is allocated before
 * anything can fail, so a handle passed in is never lost.
 */
IdxHandle *
idx_own(void *handle, void (*destroy) (void *))
{
	IdxHandle  *owned;

	owned = (IdxHandle *) MemoryContextAllocExtended(CurrentMemoryContext,
													 sizeof(IdxHandle),
													 MCXT_ALLOC_NO_OOM);
	if (owned == NULL)
	{
		if (handle != NULL)
			destroy(handle);
		ereport(ERROR,
				(errcode(ERRCODE_OUT_OF_MEMORY),
				 errmsg("out of memory")));
	}
	owned->handle = handle;
	owned->destroy = destroy;
	owned->callback.func = destroy_handle;
	owned->callback.arg = owned;
	MemoryContextRegisterResetCallback(CurrentMemoryContext,
									   &owned->callback);
	return owned;
}

/*
 * Destroy an owned handle now.
 */
void
idx_release(IdxHandle *owned)
{
	destroy_handle(owned);
}

/*
 * Give an owned handle back to the caller (a function that returns it).
 */
void
idx_disown(IdxHandle *owned)
{
	owned->handle = NULL;
}

/*
 * Move a failed operation's reply from the stack to the heap, owned by the
 * current memory context, so that the error raised from it needs no
 * PG_TRY block to destroy it.  Only error paths do this (a copy).
 */
bson_t *
idx_own_reply(bson_t *reply)
{
	bson_t	   *copy = bson_copy(reply);

	bson_destroy(reply);
	idx_own_bson(copy);
	return copy;
}

/*
 * A palloc'd static copy of a bson_t (no bson_destroy needed).
 */
bson_t *
idx_bson_pcopy(const bson_t *b)
{
	bson_t	   *copy = palloc(sizeof(bson_t));
	uint8	   *data = palloc(b->len);

	memcpy(data, bson_get_data(b), b->len);
	if (!bson_init_static(copy, data, b->len))
		elog(ERROR, "could not copy a BSON document");
	return copy;
}

/*
 * Are two documents byte for byte the same?
 */
bool
idx_bson_same_bytes(const bson_t *a, const bson_t *b)
{
	return a->len == b->len &&
		memcmp(bson_get_data(a), bson_get_data(b), a->len) == 0;
}
