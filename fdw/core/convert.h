/*-------------------------------------------------------------------------
 *
 * convert.h
 *		  Conversion between BSON values and PostgreSQL datums.
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/core/convert.h
 *
 * The rules, shared by scans (BSON -> datum) and by pushed-down filter
 * constants (datum -> BSON), are:
 *
 *	text/varchar/bpchar		UTF-8 string; an ObjectId reads as 24 lowercase hex
 *	int2/int4/int8			int32, int64, or a double/decimal128 holding an
 *							integral value that fits
 *	float4/float8			double, int32, int64 (exactly representable)
 *	numeric					int32, int64, double, decimal128 (decimal128 goes
 *							through its decimal string, never through double)
 *	boolean					bool
 *	timestamp/timestamptz	BSON date (milliseconds since the epoch, UTC);
 *	date					a timestamp without tz is taken as UTC
 *	uuid					binary subtype 4 (16 bytes)
 *	bytea					binary (any subtype on read; subtype 0 on write)
 *	json/jsonb				any value; documents and arrays as JSON
 *	one-dim arrays			BSON array of elements convertible to the element
 *							type (json[]/jsonb[] not supported)
 *
 * A missing field or BSON null is SQL NULL.  Everything else that does not
 * fit the column raises ERRCODE_FDW_INVALID_DATA_TYPE (wrong type) or
 * ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE (overflow, precision loss) naming the
 * column, the collection and the document's _id.
 *
 *-------------------------------------------------------------------------
 */
#ifndef IDXTABLE_CONVERT_H
#define IDXTABLE_CONVERT_H

#include "access/tupdesc.h"
#include "fmgr.h"
#include "nodes/bitmapset.h"

#include "core/mongoc_compat.h"

/*
 * How to convert one column.  Filled once per scan by idx_conv_init()
 * and reused for every row; lives in the caller's memory context.
 */
typedef struct IdxColumnConv
{
	const char *colname;		/* column name, for messages */
	Oid			typid;			/* column type */
	int32		typmod;			/* column typmod */
	Oid			elemtype;		/* element type for arrays, else InvalidOid */
	int16		elemlen;		/* element type storage info (arrays) */
	bool		elembyval;
	char		elemalign;
	FmgrInfo	typinput;		/* input function of typid (typmod coercion,
								 * numeric from decimal string, ...) */
	Oid			typioparam;
	FmgrInfo	eleminput;		/* input function of elemtype, if an array */
	Oid			elemioparam;
} IdxColumnConv;

/*
 * Where the value being converted comes from; used only to build error
 * messages ("column \"x\" of collection \"c\", document _id ...").
 */
typedef struct IdxConvSource
{
	const char *collection;		/* collection name */
	const bson_t *document;		/* whole document (for its _id), or NULL */
	bool		hide_id;		/* the user may not read the _id column */
} IdxConvSource;

/*
 * The column a written value belongs to, for messages about values MongoDB
 * cannot store (JSON keys).
 */
typedef struct IdxJsonTarget
{
	const char *colname;
	const char *relname;
} IdxJsonTarget;

/*
 * Converters for a whole row: one IdxColumnConv and one field path per
 * attribute of the foreign table.  fields[i] is NULL for dropped columns
 * and for columns the query does not need (they come back NULL).
 */
typedef struct IdxRowConv
{
	int			natts;
	IdxColumnConv *cols;		/* per attribute (attnum - 1) */
	const char **fields;		/* per attribute: dotted path, or NULL */
	const char *collection;		/* for messages */
	bool		hide_id;		/* messages leave out the document's _id */

	/*
	 * The distinct top-level fields (paths without a dot) that columns read,
	 * all located in one walk of each document rather than one search per
	 * column.  top_of[i] is attribute i's entry, or -1; top_found, top_off
	 * (the offset of the field's element in the document) and top_keylen
	 * are per-document scratch space.
	 */
	int			ntop;
	const char **top_name;
	uint32	   *top_len;
	int		   *top_of;			/* per attribute */
	bool	   *top_found;
	uint32	   *top_off;
	uint32	   *top_keylen;
	int		   *top_ntext;		/* columns taking the field's string as is */

	/*
	 * For the one-pass conversion of a scan's rows (convert_row.c): per
	 * top-level field, what the walk needs to find and convert it; per
	 * attribute, how its common values convert; and whether some column is
	 * read only after the walk (a dotted path, or a field several columns
	 * read).
	 */
	struct IdxWalkField *walk;	/* per field (convert_row.c) */
	uint8	   *col_kind;		/* per attribute: an IdxWalkKind */
	bool		has_late_cols;
	bool		walk_sets_all;	/* each column the one reader of a field */
	bool		utf8_db;		/* the database's encoding is UTF-8 */

	/*
	 * Where a row's text datums go: a fresh allocation per row if NULL, else
	 * this buffer, kept and reused from row to row (idx_row_conv_reuse()).
	 */
	struct IdxRowBuffer *reuse;
} IdxRowConv;

/*
 * Build row converters for "tupdesc".  "fields" are the per-attribute field
 * paths of the table (IdxTableInfo.fields); only attributes in "attrs_used"
 * (attnum - FirstLowInvalidHeapAttributeNumber, as in pull_varattnos) get
 * a path, or all of them if attrs_used is NULL.
 */
struct IdxTableInfo;
extern IdxRowConv *idx_row_conv_create(TupleDesc tupdesc,
									   const struct IdxTableInfo *info,
									   Bitmapset *attrs_used);

/*
 * Let "rc" put each row's text datums in one buffer that it keeps and
 * overwrites at the next row, instead of a fresh allocation per row: for a
 * scan, whose rows live only until the next (ExecScan resets the per-row
 * context then).  The buffer lives in the current memory context.
 */
extern void idx_row_conv_reuse(IdxRowConv *rc);

/*
 * Fill values/nulls (natts entries) from a document.  Dotted paths descend
 * into embedded documents; a missing path is NULL.  Allocates in the
 * current memory context (the caller uses a per-row context).
 */
extern void idx_document_to_row(const IdxRowConv *rc, const bson_t *doc,
								Datum *values, bool *nulls);

/*
 * idx_document_to_row() for a document a reply check left to its reader
 * (idx_check_reply()'s "defer_batch"): false, converting nothing, if the
 * document is malformed.
 */
extern bool idx_document_to_row_checked(const IdxRowConv *rc,
										const bson_t *doc,
										Datum *values, bool *nulls);

/* Is the database's encoding UTF-8 (looked up once per backend)? */
extern bool idx_database_is_utf8(void);

/* Is this type (or, for arrays, its element type) supported at all? */
extern bool idx_type_is_supported(Oid typid);

/* Prepare conversion state for a column; errors if the type is unsupported */
extern void idx_conv_init(IdxColumnConv *conv, const char *colname,
						  Oid typid, int32 typmod);

/*
 * Convert the BSON value under "iter" to a datum of conv->typid.  Sets
 * *isnull for BSON null / undefined.  Raises an error naming the column,
 * collection and _id when the value does not fit.
 */
extern Datum idx_bson_to_datum(const bson_iter_t *iter,
							   const IdxColumnConv *conv,
							   const IdxConvSource *src,
							   bool *isnull);

/*
 * Append "value" (of type typid) to "doc" under key "key".  NULL appends
 * BSON null.  Arrays of supported scalars become BSON arrays.  Raises an
 * error for unsupported types.
 */
extern void idx_append_datum(bson_t *doc, const char *key, int keylen,
							 Datum value, bool isnull, Oid typid);

/*
 * Raise an ERROR (54000) if appending to a BSON document failed: libbson
 * refuses to grow a document past its maximum size.  Every bson_append_*
 * result goes through this.
 */
extern void idx_check_append(bool ok);

/*
 * Append a column's value to a document being written: idx_append_datum,
 * except that JSON object keys MongoDB cannot store (empty, "$"-prefixed,
 * dotted) are errors naming the column.
 */
extern void idx_append_column_value(bson_t *doc, const char *key,
									Datum value, bool isnull, Oid typid,
									const IdxJsonTarget *target);

/*
 * May the current user see the _id of table "relid"'s documents in error
 * details (SELECT on the table or on its _id column "id_attnum")?
 */
extern bool idx_id_visible(Oid relid, AttrNumber id_attnum);

/*
 * Can "value" of type "typid" be represented in BSON so that MongoDB's
 * comparison of it against stored values equals PostgreSQL's comparison
 * against the converted values?  (Timestamps with sub-millisecond digits,
 * NaN floats, ... cannot.)  Used by the pushdown code for constants.
 */
extern bool idx_datum_is_exact_in_bson(Datum value, Oid typid);

/* Render the _id of a document for error messages (palloc'd, truncated) */
extern char *idx_document_id_string(const bson_t *document);

/* Render a BSON document as relaxed extended JSON (palloc'd) */
extern char *idx_bson_as_json(const bson_t *doc);

/* Relaxed extended JSON of one BSON value (palloc'd), NULL if unprintable */
extern char *idx_value_as_relaxed_json(const bson_iter_t *iter);

/* Name of a BSON type, for messages ("string", "int32", "document", ...) */
extern const char *idx_bson_type_name(bson_type_t type);

/* Infer a PostgreSQL type name for a BSON value (IMPORT FOREIGN SCHEMA) */
extern const char *idx_bson_type_to_pgtype(const bson_iter_t *iter);

#endif							/* IDXTABLE_CONVERT_H */
