/*-------------------------------------------------------------------------
 *
 * index_claims.h
 *		  The time of a unique claim written in ordered mode, and the
 *		  registry of the ordered writes in flight that the repair of an
 *		  index table asks before it removes a young claim.
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/index/index_claims.h
 *
 * A write in ordered mode claims a new unique key (inserts its entry,
 * with the time "t") before it writes the fact.  Until the fact is
 * written, the claim matches no fact: to a repair that runs beside writes
 * (the applier's, an online build's) it looks stale, or orphaned.
 * Removing it then would free the key for another write while the first
 * is still going to write it.  The write's other entries, written with
 * their time too, are in the same state: removed, the fact would lack
 * them until the repair of the write's change put them back.  So each
 * backend notes in shared memory when its statements that may write
 * entries in ordered mode begin and end, and a repair leaves an entry
 * with a time alone while it is younger than idxtable.unique_claim_timeout
 * if a statement that began at or before that time was running when the
 * repair read the fact (it runs now, or ended since).  The caller checks
 * the fact again once every such statement is over (the applier does).
 *
 * Times are milliseconds since the Unix epoch on this machine's clock,
 * the clock the claims' "t" is written with.
 *
 *-------------------------------------------------------------------------
 */
#ifndef IDXTABLE_INDEX_CLAIMS_H
#define IDXTABLE_INDEX_CLAIMS_H

#include "core/mongoc_compat.h"

/* Field of an entry written in ordered mode: when it was written */
#define IDX_ENTRY_CLAIM_TIME "t"

/* Now, as a claim's time */
extern int64 idx_claim_now_ms(void);

/* The time of "claim", or 0 if it has none (a transaction or a build) */
extern int64 idx_claim_time(const bson_t *claim);

/* ---- the registry (shared memory, from sync_state.c's hooks) ---- */
extern Size idx_claims_shmem_size(void);
extern void idx_claims_shmem_init(void);

/* A statement that may write entries in ordered mode begins, or ends */
extern void idx_claims_write_begin(void);
extern void idx_claims_write_end(void);

/* The transaction ended: none of its statements runs any longer */
extern void idx_claims_xact_end(void);

/*
 * May "claim" belong to a write whose fact a repair that read the fact at
 * "read_at" (0: at an unknown time) did not see: is the claim younger
 * than idxtable.unique_claim_timeout, and was a statement that began at
 * or before it running at read_at or later?  Without the registry (the
 * library not preloaded), any young claim may.
 */
extern bool idx_claim_in_flight(const bson_t *claim, int64 read_at);

/*
 * Was a statement that began at or before "claim_time" running at
 * "read_at" or later (with read_at now: is one still running)?
 */
extern bool idx_claims_write_since(int64 claim_time, int64 read_at);

#endif							/* IDXTABLE_INDEX_CLAIMS_H */
