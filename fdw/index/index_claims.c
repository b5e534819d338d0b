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
 * The registry is one slot per backend: when its running statement that
 * may write entries in ordered mode began (the outermost, if a trigger's
 * write runs inside another), and when the last such statement began and
 * ended.  Only the backend writes its own slot, under the slot's spinlock;
 * a repair reads them all, after it has read a claim, which the statement
 * wrote after it had stored its start.
 *
 * A repair decides on a claim against the fact as it read it.  A statement
 * that began by the claim's time may have made the claim; if it was still
 * running when the fact was read, the fact may not show its write yet, and
 * the claim is left alone: the statement runs now, or it ended at or after
 * that read.  Of the statements a backend ended, the slot keeps the last;
 * if that one began after the read, an earlier one may have ended after
 * it too, and the backend counts as having had one running then.
 *
 * The count of running statements is cleared when the transaction ends,
 * whatever ended it: a statement that failed is over then, even if its
 * state is released later.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <sys/time.h>

#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/shmem.h"
#include "storage/spin.h"

#include "core/guc.h"
#include "core/pg_compat.h"
#include "index/index_claims.h"

typedef struct ClaimsSlot
{
	slock_t		mutex;
	int64		since;			/* the running statement's start, or 0 */
	int64		last_since;		/* the last ended statement's start ... */
	int64		last_end;		/* ... and end; 0 if none ended */
} ClaimsSlot;

typedef struct ClaimsRegistry
{
	int			nslots;
	ClaimsSlot	slots[FLEXIBLE_ARRAY_MEMBER];	/* per backend id - 1 */
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
 * The size of the registry in shared memory: a slot per backend.
 */
Size
idx_claims_shmem_size(void)
{
	return MAXALIGN(add_size(offsetof(ClaimsRegistry, slots),
							 mul_size(sizeof(ClaimsSlot), MaxBackends)));
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
	{
		memset(&registry->slots[i], 0, sizeof(ClaimsSlot));
		SpinLockInit(&registry->slots[i].mutex);
	}
}

/*
 * This backend's slot, or NULL if it has none.
 */
static ClaimsSlot *
own_slot(void)
{
	if (registry == NULL || idx_backend_number() < 1 || idx_backend_number() > registry->nslots)
		return NULL;
	return &registry->slots[idx_backend_number() - 1];
}

/*
 * At backend exit: no statement of ours runs any longer.
 */
static void
end_own_statement(int code, Datum arg)
{
	idx_claims_xact_end();
}

/*
 * A statement that may write entries in ordered mode begins: the first of
 * the backend's running ones stores its start.
 */
void
idx_claims_write_begin(void)
{
	ClaimsSlot *slot = own_slot();

	if (slot == NULL)
		return;
	if (!exit_callback_set)
	{
		before_shmem_exit(end_own_statement, (Datum) 0);
		exit_callback_set = true;
	}
	if (write_depth++ > 0)
		return;
	SpinLockAcquire(&slot->mutex);
	slot->since = idx_claim_now_ms();
	SpinLockRelease(&slot->mutex);
}

/*
 * The backend's running statement is over: it becomes the last ended.
 */
static void
end_statement(ClaimsSlot *slot)
{
	SpinLockAcquire(&slot->mutex);
	if (slot->since != 0)
	{
		slot->last_since = slot->since;
		slot->last_end = idx_claim_now_ms();
		slot->since = 0;
	}
	SpinLockRelease(&slot->mutex);
}

/*
 * A statement of idx_claims_write_begin() ends (its state is released).
 */
void
idx_claims_write_end(void)
{
	ClaimsSlot *slot = own_slot();

	if (slot == NULL || write_depth == 0)
		return;
	if (--write_depth == 0)
		end_statement(slot);
}

/*
 * The transaction ended: none of its statements runs any longer.
 */
void
idx_claims_xact_end(void)
{
	ClaimsSlot *slot = own_slot();

	write_depth = 0;
	if (slot != NULL)
		end_statement(slot);
}

/*
 * Did backend slot "slot" run, at "read_at" or later, a statement that
 * began at or before "claim_time" (see the file header)?
 */
static bool
slot_ran_since(ClaimsSlot *slot, int64 claim_time, int64 read_at)
{
	int64		since;
	int64		last_since;
	int64		last_end;

	SpinLockAcquire(&slot->mutex);
	since = slot->since;
	last_since = slot->last_since;
	last_end = slot->last_end;
	SpinLockRelease(&slot->mutex);
	if (since != 0 && since <= claim_time)
		return true;
	if (last_end == 0)
		return false;
	return (last_since <= claim_time && last_end >= read_at) ||
		last_since > read_at;
}

/*
 * Was a statement that began at or before "claim_time" running at
 * "read_at" or later, in any backend?  Without the registry, any may
 * have been.
 */
bool
idx_claims_write_since(int64 claim_time, int64 read_at)
{
	int			i;

	if (registry == NULL)
		return true;
	for (i = 0; i < registry->nslots; i++)
		if (slot_ran_since(&registry->slots[i], claim_time, read_at))
			return true;
	return false;
}

/*
 * May "claim" belong to a write whose fact the repair that read the fact
 * at "read_at" did not see (see index_claims.h)?
 */
bool
idx_claim_in_flight(const bson_t *claim, int64 read_at)
{
	int64		t = idx_claim_time(claim);

	if (t == 0 || idx_claim_now_ms() - t >= idx_unique_claim_timeout)
		return false;
	return idx_claims_write_since(t, read_at);
}
