/*-------------------------------------------------------------------------
 *
 * document.h
 *		  Fact documents written from rows: the insert document, the $set of
 *		  an UPDATE, and the BSON _id of a row.
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/core/document.h
 *
 * The one rule for SQL NULL on writes: a NULL column is written as BSON
 * null (the field is present with value null), by INSERT and by UPDATE
 * alike.  Reads turn a null and a missing field into NULL, so both read the
 * same; the rule only decides what other MongoDB clients see.
 *
 * _id: a text-like _id column value of exactly 24 lowercase hex digits is
 * written as an ObjectId (the way an ObjectId reads), anything else by the
 * ordinary conversion; a NULL _id gets a new ObjectId.
 *
 *-------------------------------------------------------------------------
 */
#ifndef IDXTABLE_DOCUMENT_H
#define IDXTABLE_DOCUMENT_H

#include "access/tupdesc.h"
#include "nodes/pg_list.h"

#include "core/mongoc_compat.h"
#include "core/option.h"
#include "core/pg_compat.h"

/* Append the BSON _id for an _id column value (see above) */
extern void idx_append_id_value(bson_t *doc, const char *key, Datum value,
								Oid typid);

/* The _id column value as a bson_value_t (copy; bson_value_destroy it) */
extern void idx_id_value(Datum value, Oid typid, bson_value_t *out);

/*
 * Can a new ObjectId be stored in an _id column of this type (read back as
 * its hex text)?  Text-like types only.
 */
extern bool idx_id_type_takes_objectid(Oid typid);

/*
 * The document of a new fact from a row, palloc'd (no bson_destroy): every
 * non-dropped column at its field path (dotted paths become embedded
 * documents), _id first.  The row's _id must already be set
 * (values[id_attnum - 1]); "id" is its BSON.
 */
extern bson_t *idx_row_to_document(const IdxTableInfo *info,
								   TupleDesc tupdesc, const Datum *values,
								   const bool *nulls, const bson_value_t *id);

/*
 * The update document {$set: {field: value, ...}} of an UPDATE that
 * assigns the columns "attnums" (an integer List), palloc'd.
 */
extern bson_t *idx_row_to_update(const IdxTableInfo *info, TupleDesc tupdesc,
								 List *attnums, const Datum *values,
								 const bool *nulls);

/*
 * Field paths: is "path" dot-separated non-empty names not starting with
 * "$"?  idx_check_column_name_path() refuses a column name that is used as
 * its path and is not one (SQLSTATE 42602).
 */
extern bool idx_field_path_is_valid(const char *path);
extern void idx_check_column_name_path(Oid relid, const char *colname);

/*
 * Document size: the server's maxBsonObjectSize, and the check that a
 * document (or update document) fits it, before anything is written
 * (SQLSTATE 54000 naming the table).
 */
extern int64 idx_max_document_size(mongoc_client_t *client);
extern void idx_check_document_size(const bson_t *doc, int64 max_size,
									const IdxTableInfo *info,
									bool is_update);

/*
 * A write libmongoc refused to queue (a document it will not send):
 * SQLSTATE 22023 naming the table; destroys "bulk" first.
 */
pg_noreturn extern void idx_document_refused(const IdxTableInfo *info,
											 mongoc_bulk_operation_t *bulk,
											 const bson_error_t *error);

#endif							/* IDXTABLE_DOCUMENT_H */
