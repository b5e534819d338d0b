/*-------------------------------------------------------------------------
 *
 * convert_error.h
 *		  The errors of conversions (convert_error.c): each names the
 *		  column, the collection and the document's _id.
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/core/convert_error.h
 *
 * Internal to the conversion code: the rest of the FDW goes through
 * convert.h (idx_check_append() is declared there, for every file that
 * builds BSON).
 *
 *-------------------------------------------------------------------------
 */
#ifndef IDXTABLE_CONVERT_ERROR_H
#define IDXTABLE_CONVERT_ERROR_H

#include "core/convert.h"
#include "core/mongoc_compat.h"
#include "core/pg_compat.h"

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

#endif							/* IDXTABLE_CONVERT_ERROR_H */
