/*-------------------------------------------------------------------------
 *
 * index_claims.c
 *		  The time of a unique claim written in ordered mode, and the
 *		  registry of the ordered writes in flight (see index_claims.h).
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/index/index_claims.c
 *
 * The registry is one word per backend: when its oldest running statement
 * that may claim keys in ordered mode began, or 0.  Only the backend
 * writes its own word, so no lock is needed; a reader scans them all.  A
 * backend stores its word before the statement writes anything, and a
 * repair reads the words after it has read a claim, which the statement
 * wrote later than it stored the word: a memory barrier on each side is
 * all the ordering this needs.
 *
 * The statements are counted per backend (a trigger's write inside
 * another), and the count is cleared when the transaction ends, whatever
 * ended it: a statement that failed is over then, even if its state is
 * released later.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <sys/time.h>

#include "miscadmin.h"
#include "port/atomics.h"
#include "storage/backendid.h"
#include "storage/ipc.h"
#include "storage/shmem.h"

#include "core/guc.h"
#include "index/index_claims.h"

typedef struct ClaimsRegistry
{
	int			nslots;
	pg_atomic_uint64 since[FLEXIBLE_ARRAY_MEMBER];	/* per backend id - 1 */
} ClaimsRegistry;

static ClaimsRegistry *registry = NULL;

/* This backend's running statements, and its exit callback */
static int	write_depth = 0;
static bool exit_callback_set = false;

/*
 * Now, in milliseconds since the Unix epoch: the clock of claim times.
 */
int64
idx_claim_now_ms(void)
{
	struct timeval tv;

	gettimeofday(&tv, NULL);
	return (int64) tv.tv_sec * 1000 + tv.tv_usec / 1000;
}

/*
 * The time "t" of a claim, or 0 if it has none.
 */
int64
idx_claim_time(const bson_t *claim)
{
	bson_iter_t iter;

	if (!bson_iter_init_find(&iter, claim, IDX_ENTRY_CLAIM_TIME) ||
		!BSON_ITER_HOLDS_DATE_TIME(&iter))
		return 0;
	return bson_iter_date_time(&iter);
}

/*
 * The size of the registry in shared memory: a word per backend.
 */
Size
idx_claims_shmem_size(void)
{
	return MAXALIGN(add_size(offsetof(ClaimsRegistry, since),
							 mul_size(sizeof(pg_atomic_uint64),
									  MaxBackends)));
}

/*
 * Attach to (or create) the registry; from the shmem startup hook, with
 * AddinShmemInitLock held.
 */
void
idx_claims_shmem_init(void)
{
	bool		found;
	int			i;

	registry = ShmemInitStruct("idxtable_fdw ordered writes",
							   idx_claims_shmem_size(), &found);
	if (found)
		return;
	registry->nslots = MaxBackends;
	for (i = 0; i < MaxBackends; i++)
		pg_atomic_init_u64(&registry->since[i], 0);
}

/*
 * This backend's word, or NULL if it has none.
 */
static pg_atomic_uint64 *
own_word(void)
{
	if (registry == NULL || MyBackendId < 1 || MyBackendId > registry->nslots)
		return NULL;
	return &registry->since[MyBackendId - 1];
}

/*
 * At backend exit: no statement of ours runs any longer.
 */
static void
clear_own_word(int code, Datum arg)
{
	idx_claims_xact_end();
}

/*
 * A statement that may claim keys in ordered mode begins: the first of
 * the backend's running ones stores its start.
 */
void
idx_claims_write_begin(void)
{
	pg_atomic_uint64 *word = own_word();

	if (word == NULL)
		return;
	if (!exit_callback_set)
	{
		before_shmem_exit(clear_own_word, (Datum) 0);
		exit_callback_set = true;
	}
	if (write_depth++ == 0)
	{
		pg_atomic_write_u64(word, (uint64) idx_claim_now_ms());
		pg_memory_barrier();	/* before anything it writes to MongoDB */
	}
}

/*
 * A statement of idx_claims_write_begin() ends (its state is released).
 */
void
idx_claims_write_end(void)
{
	pg_atomic_uint64 *word = own_word();

	if (word == NULL || write_depth == 0)
		return;
	if (--write_depth == 0)
		pg_atomic_write_u64(word, 0);
}

/*
 * The transaction ended: none of its statements runs any longer.
 */
void
idx_claims_xact_end(void)
{
	pg_atomic_uint64 *word = own_word();

	write_depth = 0;
	if (word != NULL)
		pg_atomic_write_u64(word, 0);
}

/*
 * Is a statement that began at or before "claim_time" still running, in
 * any backend?  Without the registry, any may be.
 */
bool
idx_claims_write_since(int64 claim_time)
{
	int			i;

	if (registry == NULL)
		return true;
	pg_memory_barrier();		/* after the claim was read */
	for (i = 0; i < registry->nslots; i++)
	{
		uint64		since = pg_atomic_read_u64(&registry->since[i]);

		if (since != 0 && (int64) since <= claim_time)
			return true;
	}
	return false;
}

/*
 * May "claim" belong to a write that has not written its fact yet (see
 * index_claims.h)?
 */
bool
idx_claim_in_flight(const bson_t *claim)
{
	int64		t = idx_claim_time(claim);

	if (t == 0 || idx_claim_now_ms() - t >= idx_unique_claim_timeout)
		return false;
	return idx_claims_write_since(t);
}
