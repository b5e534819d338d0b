/*-------------------------------------------------------------------------
 *
 * analyze.c
 *		  ANALYZE support for idxtable_fdw foreign tables.
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/analyze.c
 *
 * A MongoDB collection has no pages, so we report a page count derived
 * from the document count, and we never read the whole collection: the
 * sample is drawn on the server with a $sample aggregation stage that
 * returns only the fields mapped by the foreign table.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <math.h>

#include "access/htup_details.h"
#include "access/sysattr.h"
#include "miscadmin.h"
#include "utils/memutils.h"
#include "utils/rel.h"

#include "core/connection.h"
#include "core/convert.h"
#include "core/deparse.h"
#include "core/handle.h"
#include "core/mongoc_compat.h"
#include "core/option.h"
#include "core/table_size.h"
#include "idxtable_fdw.h"
#include "index/index_stats.h"

/* Number of documents assumed to make up one "page" of a collection */
#define IDX_DOCS_PER_PAGE	100

static int	idxAcquireSampleRows(Relation relation, int elevel,
								 HeapTuple *rows, int targrows,
								 double *totalrows,
								 double *totaldeadrows);
static bson_t *build_sample_pipeline(const IdxTableInfo *info, int targrows);
static int	fetch_sample_rows(mongoc_cursor_t *cursor, Relation relation,
							  const IdxRowConv *rc, const char *servername,
							  const IdxTableInfo *info,
							  HeapTuple *rows, int targrows);


/*
 * idxAnalyzeForeignTable
 *		Tell ANALYZE that we can sample this table, and how big it is.
 *
 * The page count only feeds relpages and the split of the sample among the
 * members of an inheritance tree, so an estimate proportional to the
 * document count (one page per IDX_DOCS_PER_PAGE documents, at least one)
 * is all we need.  The count comes from the "count" command without a
 * query, which MongoDB answers from collection metadata (table_size.c,
 * which also keeps it for the sampling and for planning).
 */
bool
idxAnalyzeForeignTable(Relation relation,
					   AcquireSampleRowsFunc *func,
					   BlockNumber *totalpages)
{
	IdxTableInfo *info;
	ForeignServer *server;
	mongoc_client_t *client;
	double		ndocs;
	double		pages;

	info = idx_get_table_info(RelationGetRelid(relation));
	/* as the table's owner, whoever runs ANALYZE (as postgres_fdw does) */
	client = idx_get_client_for_rel(RelationGetRelid(relation),
									relation->rd_rel->relowner, &server);

	ndocs = idx_analyze_document_count(info, client, server->servername,
									   true);

	pages = ceil(ndocs / IDX_DOCS_PER_PAGE);
	if (pages < 1)
		pages = 1;
	if (pages > (double) MaxBlockNumber)
		pages = (double) MaxBlockNumber;

	*totalpages = (BlockNumber) pages;
	*func = idxAcquireSampleRows;

	return true;
}

/*
 * idxAcquireSampleRows
 *		Fetch a random sample of at most targrows rows from the collection.
 *
 * The rows are chosen by MongoDB ($sample), so they are already a random
 * sample and no reservoir sampling is needed here.  Each document is
 * converted in a short-lived memory context; only the finished heap tuple
 * is allocated in the caller's context.  Returns the number of rows
 * stored in rows[], and the estimated live rows in *totalrows.  A
 * collection has no dead rows we could know of.
 *
 * Note that $sample may return the same document twice when MongoDB uses
 * its pseudo-random cursor; ANALYZE copes with that as slight noise.
 */
static int
idxAcquireSampleRows(Relation relation, int elevel,
					 HeapTuple *rows, int targrows,
					 double *totalrows,
					 double *totaldeadrows)
{
	IdxTableInfo *info;
	ForeignServer *server;
	mongoc_client_t *client;
	IdxRowConv *rc;
	MemoryContext callercxt = CurrentMemoryContext;
	double		ndocs;
	int			numrows = 0;
	bson_t	   *pipeline;
	bson_t	   *opts;
	mongoc_collection_t *collection;
	mongoc_cursor_t *cursor;
	IdxHandle  *owned_pipeline;
	IdxHandle  *owned_opts;
	IdxHandle  *owned_collection;
	IdxHandle  *owned_cursor;
	IdxHandle  *pin;

	*totalrows = 0;
	*totaldeadrows = 0;

	if (targrows <= 0)
		return 0;

	info = idx_get_table_info(RelationGetRelid(relation));
	/* as the table's owner, whoever runs ANALYZE (as postgres_fdw does) */
	client = idx_get_client_for_rel(RelationGetRelid(relation),
									relation->rd_rel->relowner, &server);

	/*
	 * Pinned until the index tables' counts below: their definitions'
	 * ownership markers, when not read yet in this session, are read with a
	 * lookup of the same client, which must not destroy it (after an ALTER
	 * SERVER taken in meanwhile, or once it is broken).
	 */
	pin = idx_client_pin_owned(client);
	rc = idx_row_conv_create(RelationGetDescr(relation), info, NULL);

	/* the count idxAnalyzeForeignTable just took */
	ndocs = idx_analyze_document_count(info, client, server->servername,
									   false);

	/*
	 * The libmongoc objects belong to the caller's memory context (handle.h)
	 * until they are released here, so an error releases them too.
	 */
	pipeline = build_sample_pipeline(info, targrows);
	owned_pipeline = idx_own_bson(pipeline);
	opts = bson_new();
	owned_opts = idx_own_bson(opts);
	if (info->fetch_size > 0)
		idx_check_append(BSON_APPEND_INT32(opts, "batchSize", info->fetch_size));

	collection = mongoc_client_get_collection(client, info->database,
											  info->collection);
	owned_collection = idx_own_collection(collection);
	cursor = mongoc_collection_aggregate(collection, MONGOC_QUERY_NONE,
										 pipeline, opts, NULL);
	owned_cursor = idx_own_cursor(cursor);

	numrows = fetch_sample_rows(cursor, relation, rc, server->servername,
								info, rows, targrows);
	MemoryContextSwitchTo(callercxt);
	idx_release(owned_cursor);
	idx_release(owned_collection);
	idx_release(owned_opts);
	idx_release(owned_pipeline);

	/* the index tables' statistics come from the same sample */
	idx_analyze_indexes(relation, rows, numrows, client, server->servername);
	idx_release(pin);

	/* The count may lag behind the collection; never report less than seen */
	if (ndocs < numrows)
		ndocs = numrows;
	*totalrows = ndocs;

	ereport(elevel,
			(errmsg("\"%s\": collection \"%s\" contains about %.0f documents; %d rows in sample",
					RelationGetRelationName(relation), info->collection,
					ndocs, numrows)));

	return numrows;
}

/*
 * build_sample_pipeline
 *		Build {pipeline: [{$sample: {size: targrows}}, {$project: {...}}]}
 *		with the projection of every mapped column.
 *
 * The caller destroys the result with bson_destroy().
 */
static bson_t *
build_sample_pipeline(const IdxTableInfo *info, int targrows)
{
	bson_t	   *pipeline;
	bson_t		stages;
	bson_t		stage;
	bson_t		spec;

	pipeline = bson_new();
	idx_check_append(idx_bson_append_array_begin(pipeline, "pipeline", -1, &stages));

	idx_check_append(bson_append_document_begin(&stages, "0", -1, &stage));
	idx_check_append(bson_append_document_begin(&stage, "$sample", -1, &spec));
	idx_check_append(BSON_APPEND_INT32(&spec, "size", targrows));
	idx_check_append(bson_append_document_end(&stage, &spec));
	idx_check_append(bson_append_document_end(&stages, &stage));

	idx_check_append(bson_append_document_begin(&stages, "1", -1, &stage));
	idx_check_append(bson_append_document_begin(&stage, "$project", -1, &spec));
	idx_build_projection(&spec, info,
						 bms_make_singleton(0 - FirstLowInvalidHeapAttributeNumber));
	idx_check_append(bson_append_document_end(&stage, &spec));
	idx_check_append(bson_append_document_end(&stages, &stage));

	idx_check_append(bson_append_array_end(pipeline, &stages));
	return pipeline;
}

/*
 * fetch_sample_rows
 *		Read the sample cursor into rows[], at most targrows of them.
 *
 * The caller's memory context owns the cursor (handle.h).  Each document
 * is converted in a per-row memory context that is reset for the next
 * one; heap_form_tuple() copies the values into the caller's context.
 */
static int
fetch_sample_rows(mongoc_cursor_t *cursor, Relation relation,
				  const IdxRowConv *rc, const char *servername,
				  const IdxTableInfo *info,
				  HeapTuple *rows, int targrows)
{
	TupleDesc	tupdesc = RelationGetDescr(relation);
	MemoryContext callercxt = CurrentMemoryContext;
	MemoryContext rowcxt;
	Datum	   *values;
	bool	   *nulls;
	const bson_t *doc;
	bson_error_t error;
	int			numrows = 0;

	values = (Datum *) palloc0(tupdesc->natts * sizeof(Datum));
	nulls = (bool *) palloc(tupdesc->natts * sizeof(bool));

	rowcxt = AllocSetContextCreate(callercxt,
								   "idxtable_fdw analyze row",
								   ALLOCSET_DEFAULT_SIZES);

	while (numrows < targrows && mongoc_cursor_next(cursor, &doc))
	{
		CHECK_FOR_INTERRUPTS();

		MemoryContextReset(rowcxt);
		MemoryContextSwitchTo(rowcxt);
		idx_document_to_row(rc, doc, values, nulls);

		MemoryContextSwitchTo(callercxt);
		rows[numrows++] = heap_form_tuple(tupdesc, values, nulls);
	}

	if (numrows < targrows && mongoc_cursor_error(cursor, &error))
		idx_report_error(&error, servername,
						 idx_op(IDX_OP_SAMPLE, info->collection, info->database));

	MemoryContextDelete(rowcxt);
	pfree(values);
	pfree(nulls);

	return numrows;
}
