/*-------------------------------------------------------------------------
 *
 * index_repair.h
 *		  The per-batch core of verify_index/repair_index: bring the entries
 *		  of an index table up to date with a list of facts named by _id.
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/index/index_repair.h
 *
 * idx_repair_facts() is what the change-stream applier calls for the
 * _ids a stream names; verify_index and repair_index feed the same core
 * from their stream of every fact (idx_repair_fact_docs()).  The state and
 * the helpers below the line are shared with index_verify.c's pass 2.
 * Defined in index_repair.c (the state, reads and fixes),
 * index_repair_batch.c (the per-batch core) and index_repair_named.c (the
 * entry points); index_repair_int.h is what those share among themselves.
 *
 *-------------------------------------------------------------------------
 */
#ifndef IDXTABLE_INDEX_REPAIR_H
#define IDXTABLE_INDEX_REPAIR_H

#include "access/tupdesc.h"
#include "lib/stringinfo.h"
#include "nodes/bitmapset.h"
#include "utils/relcache.h"

#include "core/convert.h"
#include "core/mongoc_compat.h"
#include "core/option.h"
#include "core/remote_error.h"
#include "index/index_catalog.h"

/* Facts or entries per batch */
#define IDX_VERIFY_BATCH	1000

/*
 * One document of a batch as read, with its sort key.
 */
typedef struct ReadDoc
{
	bson_t	   *doc;
	bson_t	   *key;			/* what it is found by: _id or {"v": id} */
	bool		matched;
} ReadDoc;

/*
 * What verify or repair found (and, repairing, fixed).
 */
typedef struct VerifyCounts
{
	int64		checked;
	int64		missing;
	int64		orphan;
	int64		stale;
	int64		unconvertible;	/* facts whose values do not fit */
	int64		conflicts;		/* unique keys that another fact holds */
} VerifyCounts;

/* How many unconvertible facts the WARNING names */
#define IDX_VERIFY_NAMED_FACTS	5

/*
 * A unique claim that a repair left alone (st->spare_in_flight): a write
 * in ordered mode that may not have written its fact yet runs
 * (index_claims.h).  The caller checks the fact again when it is over.
 */
typedef struct IdxSparedClaim
{
	bson_t	   *fact;			/* {"v": _id} of the claim's fact */
	int64		time;			/* the claim's time */
} IdxSparedClaim;

struct IdxRepairState;

/*
 * Called for a unique key conflict: the fact fact_id should have the
 * unique key described by key_desc ("Key (...)=(...)" of
 * idx_key_description(), NULL if the user may not see it), and holder_id,
 * another fact that has that key too, holds its claim.  Repair leaves it
 * in place, unless the callback raises an error.
 */
typedef void (*IdxConflictCallback) (struct IdxRepairState *st,
									 const char *key_desc,
									 const bson_value_t *fact_id,
									 const bson_value_t *holder_id,
									 void *arg);

/*
 * Called, repairing, when the fact fact_id no longer has a unique key
 * conflict in the index (it is gone, or its conflict entry was deleted and
 * none is left).
 */
typedef void (*IdxResolvedCallback) (struct IdxRepairState *st,
									 const bson_value_t *fact_id,
									 void *arg);

/*
 * Called, repairing a unique index, with the facts holders[0..n-1]
 * ({"v": _id} each) that a batch named: the facts recorded in a conflict
 * with a key whose claim one of them held, which may have freed it, in
 * *facts ({"v": _id} each, palloc'd); returns how many.
 */
typedef int (*IdxWaitersCallback) (struct IdxRepairState *st,
								   bson_t **holders, int n,
								   bson_t ***facts, void *arg);

/*
 * The state of a verify or repair of one index: set up by
 * idx_repair_begin(), then batch after batch of facts, in counts.
 */
typedef struct IdxRepairState
{
	IdxIndexDef *def;
	IdxTableInfo *info;
	mongoc_client_t *client;
	const char *servername;
	bool		repair;
	IdxRowConv *rowconv;
	Bitmapset  *attrs;			/* key and included columns */
	Datum	   *values;
	bool	   *nulls;

	/* libmongoc objects, released by idx_repair_release() */
	mongoc_collection_t *facts;
	mongoc_collection_t *index;
	mongoc_cursor_t *cursor;	/* the pass's stream */
	mongoc_cursor_t *lookup;	/* a batch's lookup */
	mongoc_bulk_operation_t *bulk;	/* a batch's fixes */

	MemoryContext batch_cxt;
	int			nitems;
	struct FactItem *items;		/* the facts of the batch */
	int			ndocs;
	ReadDoc    *docs;			/* a batch's lookup, sorted */

	VerifyCounts counts;
	int64		done;			/* documents of the pass so far */
	bool		hide_id;		/* the user may not read the _id column */
	MemoryContext long_cxt;		/* lives as long as the function */
	StringInfoData bad_ids;		/* the first unconvertible facts' _ids */
	char	   *first_error;	/* the first conversion error's message */

	/* a batch's missing unique claims, written together (in batch_cxt) */
	List	   *pending_claims;

	/* facts to check again after a batch: their key's claim was freed */
	MemoryContext wait_cxt;
	bson_t	  **waiting;		/* {"v": _id} each, in wait_cxt */
	int			nwaiting;
	int			maxwaiting;

	/* a direct repair between its two halves (index_repair_named.c) */
	bson_t	  **named_keys;		/* {"v": _id} each, in batch_cxt */
	int			named_nkeys;
	ReadDoc    *named_entries;	/* their entries, read first */
	int			named_nentries;

	/* young claims of writes in flight: leave them, and note them */
	bool		spare_in_flight;	/* set by the caller, optional */
	List	   *spared;			/* IdxSparedClaim *, in long_cxt */
	int64		facts_read_at;	/* when the facts compared were read, at
								 * the earliest (index_claims.h); 0 unknown */

	/* set by the caller after idx_repair_begin(), optional */
	IdxConflictCallback on_conflict;
	IdxResolvedCallback on_resolved;
	IdxWaitersCallback on_waiters;	/* idx_repair_facts_known() only */
	void	   *conflict_arg;	/* passed to all three */
} IdxRepairState;

/* Set up "st" for index "def" of the table described by info and desc */
extern void idx_repair_begin(IdxRepairState *st, IdxIndexDef *def,
							 IdxTableInfo *info, TupleDesc desc,
							 mongoc_client_t *client, const char *servername,
							 bool repair);

/* Release the libmongoc objects of "st" (safe to repeat, also on error) */
extern void idx_repair_release(IdxRepairState *st);

/* Check (and repair) the facts with these _ids, present or gone */
extern int	idx_repair_facts(IdxRepairState *st, const bson_value_t *ids,
							 int n);

/*
 * What a caller may know of a named fact (idx_repair_facts_known): its
 * document as of its last change, or that it was deleted then.
 */
extern const bson_t idx_repair_fact_gone;

#define IDX_REPAIR_GONE (&idx_repair_fact_gone)

extern int	idx_repair_facts_known(IdxRepairState *st,
								   const bson_value_t *ids,
								   const bson_t *const *images, int n);

/*
 * A direct repair of facts the caller reads itself (index_repair_named.c):
 * their entries first, then, after the caller has read the facts (with
 * "facts", a state of any index of the table, by idx_repair_lookup()), the
 * fix.
 */
extern void idx_repair_named_entries(IdxRepairState *st,
									 const bson_value_t *ids, int n);
extern int	idx_repair_named_fix(IdxRepairState *st, IdxRepairState *facts,
								 const bson_value_t *ids, int n);

/* The same for facts already read (projection: idx_repair_projection) */
extern int	idx_repair_fact_docs(IdxRepairState *st, bson_t **facts, int n);

/*
 * Both passes of verify_index (repair_index if "repair") over index "def"
 * of the foreign table "rel", which the caller has opened and locked;
 * progress is reported as "command", the pass over the facts as phase
 * "fact_phase" (commands/progress.h).  With "settle" (writers run beside:
 * a build, the applier), each batch of facts is read again after its
 * repair, and the facts that changed meanwhile are repaired again, until
 * none did; young claims of writes in flight are left alone, and their
 * facts returned in *spared (IdxSparedClaim *) if spared is not NULL.
 */
extern void idx_verify_run(IdxIndexDef *def, Relation rel, bool repair,
						   int command, int fact_phase, bool settle,
						   VerifyCounts *counts, List **spared);

/* ---- shared with index_verify.c ---- */
extern bool idx_repair_spare_claim(IdxRepairState *st, const bson_t *entry);
extern void idx_repair_projection(IdxRepairState *st, bson_t *projection);
extern const IdxOp *idx_repair_index_what(IdxRepairState *st);
extern const IdxOp *idx_repair_facts_what(IdxRepairState *st);
extern bson_t *idx_repair_wrap_field(const bson_t *doc, const char *field);
extern ReadDoc *idx_repair_find_doc(IdxRepairState *st, const bson_t *key);
extern bson_t *idx_repair_wrap_value(const bson_value_t *value);
extern int	idx_repair_distinct_ids(const bson_value_t *ids, int n,
									bson_t ***keys);
/* The applier's repairs read only what is majority-committed (0: off) */
extern void idx_repair_read_durable_after(uint64 after);

extern mongoc_cursor_t *idx_repair_open_stream(IdxRepairState *st,
											   mongoc_collection_t *coll,
											   const bson_t *filter,
											   const bson_t *projection);
extern void idx_repair_check_cursor(IdxRepairState *st,
									mongoc_cursor_t *cursor,
									const IdxOp *what);
extern void idx_repair_lookup(IdxRepairState *st, mongoc_collection_t *coll,
							  const char *field, bson_t **keys, int nkeys,
							  const bson_t *projection, bool by_entry_id,
							  const IdxOp *what);
extern void idx_repair_queue_delete(IdxRepairState *st, const bson_t *entry);
extern void idx_repair_flush(IdxRepairState *st);

#endif							/* IDXTABLE_INDEX_REPAIR_H */
