/*-------------------------------------------------------------------------
 *
 * scan_cursor.c
 *		  The finds and cursors every scan kind reads through: the next
 *		  document of a cursor, a find's release, the options of a find of
 *		  facts, and what a failed read was doing.
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/scan_cursor.c
 *
 * Below scan.c (the FDW callbacks) and every scan kind it dispatches to
 * (scan.h): those call these, never the other way round.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "core/connection.h"
#include "core/convert.h"
#include "core/deparse.h"
#include "core/protocol_read.h"
#include "core/remote_error.h"
#include "scan.h"

/*
 * Destroy a cursor (a killCursors counts as a round trip of the scan) and
 * a collection handle, and clear the pointers.  Safe on NULLs.
 */
void
idx_release_find(IdxScanState *state, mongoc_cursor_t **cursor,
				 mongoc_collection_t **collection)
{
	uint64	   *previous = idx_count_round_trips(&state->round_trips);

	if (*cursor)
		mongoc_cursor_destroy(*cursor);
	*cursor = NULL;
	idx_count_round_trips(previous);
	if (*collection)
		mongoc_collection_destroy(*collection);
	*collection = NULL;
}

/*
 * The next document of "*cursor", counting round trips, or NULL at the end,
 * when the cursor is destroyed and *cursor cleared.  A failure is reported
 * naming the collection.
 */
const bson_t *
idx_scan_next_doc(IdxScanState *state, mongoc_cursor_t **cursor,
				  const char *collection, const char *database)
{
	return idx_scan_next_doc_inline(state, cursor, collection, database,
									false);
}

/*
 * The end of idx_scan_next_doc_inline()'s cursor: report its error if it
 * has one, else destroy it and return NULL.  Out of line, as it runs once
 * a scan.
 */
pg_noinline const bson_t *
idx_scan_cursor_ended(IdxScanState *state, mongoc_cursor_t **cursor,
					  const char *collection, const char *database)
{
	if (mongoc_cursor_error(*cursor, NULL))
		idx_report_cursor_error(*cursor, state->server->servername,
								idx_reading_what(collection, database));
	mongoc_cursor_destroy(*cursor);
	*cursor = NULL;
	return NULL;
}

/*
 * Append the find options: projection, batch size, and the collation:
 * "simple" (binary), which the pushdown rules for text assume even where
 * the collection has a default collation of its own, unless the caller
 * passes that default for a lookup that compares no strings but _ids and
 * rechecks them (protocol_read.c).
 */
void
idx_append_find_options(bson_t *opts, const IdxTableInfo *info,
						Bitmapset *attrs_used, int batch_size,
						const bson_t *collation)
{
	bson_t		child;

	idx_check_append(BSON_APPEND_DOCUMENT_BEGIN(opts, "projection", &child));
	idx_build_projection(&child, info, attrs_used);
	idx_check_append(bson_append_document_end(opts, &child));
	idx_check_append(BSON_APPEND_INT32(opts, "batchSize", batch_size));
	if (collation)
	{
		idx_check_append(BSON_APPEND_DOCUMENT(opts, "collation", collation));
		return;
	}
	idx_check_append(BSON_APPEND_DOCUMENT_BEGIN(opts, "collation", &child));
	idx_check_append(BSON_APPEND_UTF8(&child, "locale", "simple"));
	idx_check_append(bson_append_document_end(opts, &child));
}

/*
 * What a failed read was doing, for messages.
 */
const IdxOp *
idx_reading_what(const char *collection, const char *database)
{
	return idx_op(IDX_OP_READ, collection, database);
}
