/*-------------------------------------------------------------------------
 *
 * index_write.h
 *		  Keeping a table's index collections consistent with its facts on
 *		  INSERT, UPDATE and DELETE.
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/index/index_write.h
 *
 * A write queues the entry changes of each fact it writes: the entries the
 * new row has and the old row had not (or had with other included values),
 * and the entries the old row had and the new row has not.  The queue is
 * written as one bulk write per index collection: new entries BEFORE the
 * facts are written, old entries deleted AFTER.  In ordered mode that order
 * is the crash-safety argument: a failure between steps can leave an entry
 * whose fact does not (or no longer) match it, which reads recheck and
 * repair_index removes, but never a fact without its entry.  In transaction
 * mode all of it runs in the MongoDB transaction.
 *
 * Unique keys: the entry _id of a unique key ({k0: ..}) is the claim on the
 * key.  A claim held by another fact that still has the key is a unique
 * violation (23505).  In ordered mode a claim whose fact lacks the key is
 * an orphan and is taken over, once it is older than
 * idxtable.unique_claim_timeout (a younger one may belong to a write in
 * flight, whose fact is not written yet); claims written in ordered mode
 * carry their time in the field "t" for that.  A statement that may claim
 * keys so is noted as running (index_claims.h), for the repairs that run
 * beside writes to leave its young claims alone too.
 *
 *-------------------------------------------------------------------------
 */
#ifndef IDXTABLE_INDEX_WRITE_H
#define IDXTABLE_INDEX_WRITE_H

#include "nodes/bitmapset.h"
#include "nodes/pg_list.h"
#include "utils/relcache.h"

#include "core/mongoc_compat.h"
#include "core/option.h"
#include "index/bulk_write.h"
#include "index/index_claims.h"

typedef struct IdxIndexWriter IdxIndexWriter;

/*
 * Set up the index maintenance of writes to "rel": the indexes in state
 * valid or building ("userid": the user the table is written as; "mode":
 * the writes' consistency mode, 'transaction' or 'ordered').
 * Allocates in the current memory context, whose reset releases the
 * libmongoc objects.
 */
extern IdxIndexWriter *idx_writer_create(Relation rel, Oid userid,
										 IdxTableInfo *info,
										 mongoc_client_t *client,
										 const char *servername,
										 IdxConsistency mode);

/*
 * A writer of consistency mode 'eventual': no index maintained (the
 * applier does it), so every idx_writer_* call below has nothing to do.
 */
extern IdxIndexWriter *idx_writer_create_facts_only(IdxTableInfo *info,
													mongoc_client_t *client,
													const char *servername);

/* Number of maintained indexes */
extern int	idx_writer_nindexes(IdxIndexWriter *w);

/* Their definitions (IdxIndexDef *), in a new list */
extern List *idx_writer_indexes(IdxIndexWriter *w);

/* Columns that entries are computed from (attnums, as a bitmap) */
extern Bitmapset *idx_writer_needed_attrs(IdxIndexWriter *w);

/* Converter of those columns from a fact document (NULL: no indexes) */
extern struct IdxRowConv *idx_writer_row_conv(IdxIndexWriter *w);

/*
 * Queue the entry changes of one fact from the old row (NULL: none, an
 * INSERT) to the new row (NULL: none, a DELETE).  "row" numbers the fact
 * within the batch, for messages and compensation.
 */
extern void idx_writer_queue(IdxIndexWriter *w, int row,
							 const Datum *oldvals, const bool *oldnulls,
							 const Datum *newvals, const bool *newnulls,
							 const bson_value_t *fact_id);

/*
 * Write the queued new entries (before the facts).  A unique violation is
 * an ERROR 23505 naming the index and key; in ordered mode the entries
 * this call already wrote are removed again first.
 */
extern void idx_writer_write_new(IdxIndexWriter *w,
								 mongoc_client_session_t *session);

/*
 * Ordered mode: a claim of the batch could not be resolved (an error), so
 * the batch's new entries must be taken back; the statement's undo does it
 * with idx_writer_take_back(), in a subtransaction.
 */
extern bool idx_writer_must_take_back(IdxIndexWriter *w);
extern void idx_writer_take_back(IdxIndexWriter *w);

/*
 * Undo idx_writer_write_new() for one row of the batch (its fact was not
 * written): delete the entries it created; an entry it wrote over one with
 * the same _id (an existing fact's, when the row's _id is a duplicate) is
 * written back as that fact has it.  Ordered mode only.
 */
extern void idx_writer_unwrite_row(IdxIndexWriter *w, int row,
								   mongoc_client_session_t *session);

/* Delete the queued old entries (after the facts) and clear the queue */
extern void idx_writer_delete_old(IdxIndexWriter *w,
								  mongoc_client_session_t *session);

/* Forget the queue without writing */
extern void idx_writer_reset(IdxIndexWriter *w);

/* Counters for EXPLAIN ANALYZE */
extern void idx_writer_counters(IdxIndexWriter *w, uint64 *written,
								uint64 *deleted);

/*
 * The write errors of a bulk write's reply: op index and code of each, in
 * palloc'd arrays; returns how many.
 */
extern int	idx_bulk_write_errors(const bson_t *reply, int **indexes,
								  int **codes);

/*
 * MongoDB 8.0's bulkWrite (bulk_write.h): with bulk writes on, write_new
 * and delete_old send one command each for all index collections; a
 * caller that writes the facts in the same command queues the new entries
 * before them (idx_writer_add_new) and the old entries after them
 * (idx_writer_add_old), hands each failed op to idx_writer_bulk_failed()
 * (true: an entry's failure was handled, go on after it) and says how far
 * the command got with idx_writer_bulk_done().
 */
extern void idx_writer_set_bulk_write(IdxIndexWriter *w, bool on);
extern void idx_writer_add_new(IdxIndexWriter *w, IdxBulkWrite *bw);
extern void idx_writer_add_old(IdxIndexWriter *w, IdxBulkWrite *bw);
extern bool idx_writer_bulk_failed(IdxIndexWriter *w, IdxBulkWrite *bw,
								   const IdxBulkWriteError *failed);
extern void idx_writer_bulk_done(IdxIndexWriter *w, int upto);

#endif							/* IDXTABLE_INDEX_WRITE_H */
