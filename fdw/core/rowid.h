/*-------------------------------------------------------------------------
 *
 * rowid.h
 *		  The exact _id of each row an UPDATE or DELETE scans.
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/core/rowid.h
 *
 * UPDATE and DELETE address a fact by its _id.  The _id column's value is
 * not always enough to rebuild that _id: a string of 24 hex digits reads
 * like an ObjectId, jsonb reorders the keys of a document _id, and a uuid
 * column reads binary subtype 3 as well as 4.  So the scan of a table that
 * is the target of the statement compares, row by row, the _id as MongoDB
 * stored it with the _id the column's value would write; where they differ
 * it keeps the stored _id and puts a handle to it into the row's ctid
 * (a junk column the planner carries to the write).  The write then uses
 * the stored _id.  Handles live as long as the executor state (the
 * statement), and only rows whose _id does not round-trip cost memory.
 *
 *-------------------------------------------------------------------------
 */
#ifndef IDXTABLE_ROWID_H
#define IDXTABLE_ROWID_H

#include "nodes/execnodes.h"

#include "core/convert.h"
#include "core/mongoc_compat.h"

/* Name of the junk column carrying the handle (a ctid) */
#define IDX_RAWID_NAME "idxtable_rawid"

/* Is this scan (of relation "scanrelid") the target of an UPDATE/DELETE? */
extern bool idx_rowid_scan_wanted(ForeignScanState *node);

/*
 * Set the row's ctid in "slot" (a stored row whose _id column, attribute
 * "id_attnum", was read from "doc"): a handle to the _id found under
 * "id_field" of "doc" if the column's value would not write it back
 * exactly, else the "exact" handle.
 */
extern void idx_rowid_note(ForeignScanState *node, TupleTableSlot *slot,
						   AttrNumber id_attnum, const bson_t *doc,
						   const char *id_field);

/*
 * The stored _id a handle refers to, as a value pointing into memory of
 * the statement (not to be destroyed); false for the "exact" handle.
 */
extern bool idx_rowid_lookup(EState *estate, ItemPointer tid,
							 bson_value_t *id);

/*
 * The end of the rows a ModifyTable writes: an UPDATE or DELETE in batches
 * writes its last batch when the ModifyTable's subplan (a scan of the
 * target, a join, an Append of partitions) returns its last row, through
 * "fn".  That is inside ExecutorRun, before the executor reports the row
 * count, before AFTER statement triggers run (ExecutorFinish) and before
 * EXPLAIN ANALYZE prints the plan.  "forget" stops the calls for "arg".
 */
typedef void (*IdxRowsEndFn) (void *arg);
extern void idx_rowid_on_rows_end(PlanState *subplan, IdxRowsEndFn fn,
								  void *arg);
extern void idx_rowid_forget_rows_end(EState *estate, void *arg);

#endif							/* IDXTABLE_ROWID_H */
