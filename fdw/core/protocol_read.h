/*-------------------------------------------------------------------------
 *
 * protocol_read.h
 *		  How the index-table protocol's own reads are sent: to the primary,
 *		  and under the collection's default collation where that lets an
 *		  _id lookup use the _id index.
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/core/protocol_read.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef IDXTABLE_PROTOCOL_READ_H
#define IDXTABLE_PROTOCOL_READ_H

#include "core/mongoc_compat.h"

#include "nodes/execnodes.h"
#include "nodes/pg_list.h"

struct IdxOp;					/* core/remote_op.h */

/*
 * The read preference of reads whose answer decides a write (claims,
 * ownership markers, verify/repair lookups, fact fetches before a write or
 * an undo): primary, whatever the URI's readPreference says.  Owned by this
 * module; pass it to mongoc_collection_find_with_opts().
 */
extern const mongoc_read_prefs_t *idx_primary_read_prefs(void);

/*
 * The read preference of a foreign scan: primary when its rows feed a
 * write (the scan of an UPDATE/DELETE target, or of a table locked FOR
 * UPDATE/SHARE), else NULL (the URI's readPreference).
 */
extern const mongoc_read_prefs_t *idx_scan_read_prefs(ForeignScanState *node);

/*
 * Is there a document in "collection" of "database" matching "filter"?
 * Read from the primary, projected to _id and "field" (NULL: the whole
 * document); a found document is copied into *doc unless "doc" is NULL.
 * A failed read raises an ERROR about "op".
 */
extern bool idx_find_one_primary(mongoc_client_t *client,
								 const char *servername,
								 const char *database,
								 const char *collection,
								 const bson_t *filter, const char *field,
								 bson_t *doc, const struct IdxOp *op);

/*
 * The default collation of a collection (its listCollections options), or
 * NULL when it has none (binary comparison).  Asked once per collection
 * and backend, outside any MongoDB transaction; a collection that does not
 * exist counts as having none, and so does one that cannot be listed (not
 * cached: asked again next time).  Finds then ask for "simple", which is
 * always correct, only slower.  The result is owned by the cache.
 */
extern const bson_t *idx_collection_collation(mongoc_client_t *client,
											  const char *servername,
											  const char *database,
											  const char *collection);

/* Does a filter compare any string (a UTF-8 or symbol value at any depth)? */
extern bool idx_filter_compares_strings(const bson_t *filter);

/*
 * The _id values an _id lookup filter asks for, each as the BSON bytes of
 * {"v": value} (a list of bytea-like palloc'd copies, see
 * idx_doc_id_among()), when the filter is an _id $eq/$in alone or in an
 * $and whose other conditions compare no strings; else NIL.  Such a filter
 * may run under the collection's collation, with the returned documents
 * rechecked against these values.
 */
extern List *idx_id_lookup_values(const bson_t *filter);

/* Is the _id of "doc" byte for byte one of "ids" (from idx_id_lookup_values)? */
extern bool idx_doc_id_among(const bson_t *doc, List *ids);

/*
 * A fact fetch whose filter compares strings may still run under the
 * collection's collation when every string comparison is a positive
 * equality ({field: {$eq: s}} or {field: {$in: [s, ...]}}, field a
 * top-level name) in the filter's conjunction: a collation can then only
 * widen the result, and idx_doc_passes_equalities() narrows it back to
 * the binary comparison.  Returns false (use the simple collation) for any
 * other filter; else *checks (NIL if no string is compared) and *fields
 * (the field names the check reads, which the projection must include).
 */
extern bool idx_string_equalities(const bson_t *filter, List **checks,
								  List **fields);

/* Does "doc" pass the binary string equalities of idx_string_equalities()? */
extern bool idx_doc_passes_equalities(const bson_t *doc, List *checks);

/*
 * Is the _id of "doc" exactly (type and bytes) "id"?  A find by _id without
 * a collation runs under the collection's default one, which may match
 * another document (say 'ABC' for 'abc' under a case-insensitive one).
 */
extern bool idx_doc_id_is(const bson_t *doc, const bson_value_t *id);

#endif							/* IDXTABLE_PROTOCOL_READ_H */
