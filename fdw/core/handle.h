/*-------------------------------------------------------------------------
 *
 * handle.h
 *		  libmongoc handles owned by a memory context (handle.c).
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/core/handle.h
 *
 * idx_own_*() hands a libmongoc handle (cursor, collection, bulk, heap
 * bson_t, URI) to the current memory context: it is destroyed when that
 * context is reset or deleted, so an error or cancel releases it without a
 * PG_TRY block, as the scans release their cursors.  idx_release()
 * destroys it earlier, on the normal path; handles registered in one
 * context are destroyed in the reverse order of registration.
 *
 * Only heap objects may be owned: a bson_t on the stack is gone by the
 * time an error resets the context (idx_own_reply() moves a reply to the
 * heap first).
 *
 *-------------------------------------------------------------------------
 */
#ifndef IDXTABLE_HANDLE_H
#define IDXTABLE_HANDLE_H

#include "core/mongoc_compat.h"

typedef struct IdxHandle IdxHandle;

/* Own "handle", destroyed by "destroy" at the latest with the context */
extern IdxHandle *idx_own(void *handle, void (*destroy) (void *));

/* Destroy an owned handle now (the context then has nothing to do) */
extern void idx_release(IdxHandle *owned);

/* Take an owned handle back, undestroyed: the caller owns it again */
extern void idx_disown(IdxHandle *owned);

static inline IdxHandle *
idx_own_cursor(mongoc_cursor_t *cursor)
{
	return idx_own(cursor, (void (*) (void *)) mongoc_cursor_destroy);
}

static inline IdxHandle *
idx_own_collection(mongoc_collection_t *collection)
{
	return idx_own(collection, (void (*) (void *)) mongoc_collection_destroy);
}

/* a bson_t from bson_new() and the like, never one on the stack */
static inline IdxHandle *
idx_own_bson(bson_t *bson)
{
	return idx_own(bson, (void (*) (void *)) bson_destroy);
}

static inline IdxHandle *
idx_own_bulk(mongoc_bulk_operation_t *bulk)
{
	return idx_own(bulk, (void (*) (void *)) mongoc_bulk_operation_destroy);
}

static inline IdxHandle *
idx_own_database(mongoc_database_t *database)
{
	return idx_own(database, (void (*) (void *)) mongoc_database_destroy);
}

static inline IdxHandle *
idx_own_uri(mongoc_uri_t *uri)
{
	return idx_own(uri, (void (*) (void *)) mongoc_uri_destroy);
}

/*
 * A reply libmongoc filled into a bson_t on the stack (initialized even
 * when the operation failed), moved to the heap and owned: the stack one
 * is destroyed.  For the error paths that report from a reply.
 */
extern bson_t *idx_own_reply(bson_t *reply);

/*
 * Documents in palloc'd memory, for the code that keeps a reply's or a
 * batch's documents beyond libmongoc's buffers.
 */
extern bson_t *idx_bson_pcopy(const bson_t *b);
extern bool idx_bson_same_bytes(const bson_t *a, const bson_t *b);

#endif							/* IDXTABLE_HANDLE_H */
