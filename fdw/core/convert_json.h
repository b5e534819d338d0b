/*-------------------------------------------------------------------------
 *
 * convert_json.h
 *		  Interface between convert.c, convert_write.c and convert_json.c.
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/core/convert_json.h
 *
 * Internal to the conversion code: the rest of the FDW goes through
 * convert.h.  convert_json.c provides the json/jsonb conversions and the
 * ISO 8601 rendering of BSON dates; convert.c provides the error reporting
 * and text helpers that the files use; convert_write.c the writing
 * direction (datum -> BSON).
 *
 *-------------------------------------------------------------------------
 */
#ifndef IDXTABLE_CONVERT_JSON_H
#define IDXTABLE_CONVERT_JSON_H

#include "core/convert.h"
#include "core/mongoc_compat.h"
#include "core/pg_compat.h"

/* Milliseconds per day */
#define MS_PER_DAY			INT64CONST(86400000)

/* Days and milliseconds from the Unix epoch to the PostgreSQL epoch */
#define EPOCH_DIFF_DAYS		(POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE)
#define EPOCH_DIFF_MS		(EPOCH_DIFF_DAYS * MS_PER_DAY)

/* Buffer for an ISO 8601 rendering of any BSON date */
#define DATE_STRING_LEN		48


/* In convert_json.c */

/* ISO 8601 UTC text of a BSON date into buf (DATE_STRING_LEN bytes) */
extern char *idx_format_bson_date(int64 ms, char *buf);

/* json, jsonb: any BSON value, as JSON text through the input function */
extern Datum idx_json_from_bson(const bson_iter_t *iter,
							const IdxColumnConv *conv,
							const IdxConvSource *src);

/* Append a json or jsonb datum as the BSON equivalent of its JSON text */
extern void idx_append_json(bson_t *doc, const char *key, int keylen,
						Datum value, Oid typid,
						const IdxJsonTarget *target);


/* In convert.c and convert_error.c */

/* Argument of the error context callback */
typedef struct ConvErrorState
{
	const IdxColumnConv *conv;
	const IdxConvSource *src;
} ConvErrorState;

/* The error context callback of a conversion ("arg": a ConvErrorState) */
extern void idx_conv_error_callback(void *arg);

/* DETAIL naming the collection and _id of the document being converted */
extern int	idx_errdetail_conv_source(const IdxConvSource *src);

/* Errors naming the column, collection and _id of a value that does not fit */
pg_noreturn extern void idx_report_wrong_type(const IdxColumnConv *conv,
											  const IdxConvSource *src,
											  const char *bsontype);
pg_noreturn extern void idx_report_out_of_range(const IdxColumnConv *conv,
												const IdxConvSource *src,
												const char *value);
pg_noreturn extern void idx_report_inexact(const IdxColumnConv *conv,
										   const IdxConvSource *src,
										   const char *value);
pg_noreturn extern void idx_report_corrupt(const IdxColumnConv *conv,
										   const IdxConvSource *src);
pg_noreturn extern void idx_report_bad_string(const IdxColumnConv *conv,
											  const IdxConvSource *src);
pg_noreturn extern void idx_report_wrong_binary(const IdxColumnConv *conv,
												const IdxConvSource *src,
												bson_subtype_t subtype,
												uint32 len);
pg_noreturn extern void idx_report_binary_too_long(const IdxColumnConv *conv,
												   const IdxConvSource *src,
												   uint32 len);
pg_noreturn extern void idx_report_wrong_number(const IdxColumnConv *conv,
												const IdxConvSource *src,
												bson_type_t bsontype,
												const char *value);

/* Call conv's type input function with conv's typmod */
extern Datum idx_call_input_function(const IdxColumnConv *conv,
								 const IdxConvSource *src, char *str);

/* A BSON string (UTF-8) in the server encoding; may point into the BSON */
extern char *idx_utf8_to_server(const char *str, uint32 len,
							const IdxColumnConv *conv,
							const IdxConvSource *src);

/* Shortest exact text of a double (buf: DOUBLE_SHORTEST_DECIMAL_LEN bytes) */
extern char *idx_format_double(double value, char *buf);

/* Relaxed extended JSON of one BSON value (palloc'd), NULL if unprintable */
extern char *idx_value_as_relaxed_json(const bson_iter_t *iter);

#endif							/* IDXTABLE_CONVERT_JSON_H */
