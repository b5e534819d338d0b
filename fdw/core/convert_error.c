/*-------------------------------------------------------------------------
 *
 * convert_error.c
 *		  The errors of BSON -> datum conversion: each names the column,
 *		  the field, the collection and the document's _id; and the one
 *		  error of building BSON, a document past its maximum size.
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/core/convert_error.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <float.h>
#include <math.h>

#include "access/sysattr.h"
#include "catalog/pg_type.h"
#include "common/int.h"
#include "common/shortest_dec.h"
#include "datatype/timestamp.h"
#include "lib/stringinfo.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/array.h"
#include "utils/ascii.h"
#include "utils/builtins.h"
#include "utils/date.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/numeric.h"
#include "utils/timestamp.h"
#include "utils/uuid.h"

#include "core/convert.h"
#include "core/convert_error.h"
#include "core/convert_path.h"
#include "core/option.h"
#include "core/reply_check.h"


/* ----------------------------------------------------------------
 *		Error reporting
 * ----------------------------------------------------------------
 */

/*
 * Collection name of a conversion source, for messages.
 */
static const char *
source_collection(const IdxConvSource *src)
{
	return (src && src->collection) ? src->collection : "(unknown)";
}

/*
 * _id of the document a value comes from, for messages.
 */
static char *
source_id(const IdxConvSource *src)
{
	return idx_document_id_string(src ? src->document : NULL);
}

/*
 * The DETAIL of a conversion error: the collection, and the document's _id
 * unless the user may not read the _id column.
 */
int
idx_errdetail_conv_source(const IdxConvSource *src)
{
	if (src && src->hide_id)
		return errdetail("Collection \"%s\".", source_collection(src));
	return errdetail("Collection \"%s\", document _id %s.",
					 source_collection(src), source_id(src));
}

/*
 * The BSON value does not have a type the column accepts.
 */
void
idx_report_wrong_type(const IdxColumnConv *conv, const IdxConvSource *src,
				  const char *bsontype)
{
	ereport(ERROR,
			(errcode(ERRCODE_FDW_INVALID_DATA_TYPE),
			 errmsg("cannot convert BSON %s to %s for column \"%s\"",
					bsontype, format_type_be(conv->typid), conv->colname),
			 idx_errdetail_conv_source(src)));
}

/*
 * A BSON string that is not valid UTF-8 or holds a zero byte, which no
 * PostgreSQL text can hold.
 */
void
idx_report_bad_string(const IdxColumnConv *conv, const IdxConvSource *src)
{
	ereport(ERROR,
			(errcode(ERRCODE_FDW_INVALID_DATA_TYPE),
			 errmsg("cannot convert BSON string with invalid UTF-8 or a zero byte to %s for column \"%s\"",
					format_type_be(conv->typid), conv->colname),
			 idx_errdetail_conv_source(src)));
}

/*
 * A BSON binary of a subtype or length the column does not accept.
 */
void
idx_report_wrong_binary(const IdxColumnConv *conv, const IdxConvSource *src,
						bson_subtype_t subtype, uint32 len)
{
	ereport(ERROR,
			(errcode(ERRCODE_FDW_INVALID_DATA_TYPE),
			 errmsg("cannot convert BSON binary (subtype %d, %u bytes) to %s for column \"%s\"",
					(int) subtype, len, format_type_be(conv->typid),
					conv->colname),
			 idx_errdetail_conv_source(src)));
}

/*
 * A BSON binary longer than a datum of the column's type can be.
 */
void
idx_report_binary_too_long(const IdxColumnConv *conv,
						   const IdxConvSource *src, uint32 len)
{
	ereport(ERROR,
			(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
			 errmsg("BSON binary of %u bytes in column \"%s\" is too long for type %s",
					len, conv->colname, format_type_be(conv->typid)),
			 idx_errdetail_conv_source(src)));
}

/*
 * A BSON number that has no form in the column's type (a NaN or an
 * infinity in json): "value" is its text.
 */
void
idx_report_wrong_number(const IdxColumnConv *conv, const IdxConvSource *src,
						bson_type_t bsontype, const char *value)
{
	ereport(ERROR,
			(errcode(ERRCODE_FDW_INVALID_DATA_TYPE),
			 bsontype == BSON_TYPE_DECIMAL128
			 ? errmsg("cannot convert BSON decimal128 %s to %s for column \"%s\"",
					  value, format_type_be(conv->typid), conv->colname)
			 : errmsg("cannot convert BSON double %s to %s for column \"%s\"",
					  value, format_type_be(conv->typid), conv->colname),
			 idx_errdetail_conv_source(src)));
}

/*
 * The BSON value has an acceptable type but does not fit the column's range.
 */
void
idx_report_out_of_range(const IdxColumnConv *conv, const IdxConvSource *src,
					const char *value)
{
	ereport(ERROR,
			(errcode(ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE),
			 errmsg("value %s in column \"%s\" is out of range for type %s",
					value, conv->colname, format_type_be(conv->typid)),
			 idx_errdetail_conv_source(src)));
}

/*
 * The BSON value is in range but would lose precision in the column type.
 */
void
idx_report_inexact(const IdxColumnConv *conv, const IdxConvSource *src,
			   const char *value)
{
	ereport(ERROR,
			(errcode(ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE),
			 errmsg("value %s in column \"%s\" cannot be represented exactly in type %s",
					value, conv->colname, format_type_be(conv->typid)),
			 idx_errdetail_conv_source(src)));
}

/*
 * An embedded document or array could not be iterated.
 */
void
idx_report_corrupt(const IdxColumnConv *conv, const IdxConvSource *src)
{
	ereport(ERROR,
			(errcode(ERRCODE_FDW_INVALID_DATA_TYPE),
			 errmsg("corrupt BSON value for column \"%s\"", conv->colname),
			 idx_errdetail_conv_source(src)));
}

/*
 * Error context for errors raised by PostgreSQL functions we call during a
 * conversion (type input functions, encoding conversion): their messages
 * know nothing about the column or the document.
 */
void
idx_conv_error_callback(void *arg)
{
	ConvErrorState *state = (ConvErrorState *) arg;

	if (state->src && state->src->hide_id)
		errcontext("column \"%s\" of collection \"%s\"",
				   state->conv->colname, source_collection(state->src));
	else
		errcontext("column \"%s\" of collection \"%s\", document _id %s",
				   state->conv->colname, source_collection(state->src),
				   source_id(state->src));
}

/*
 * Call the input function of conv's type with conv's typmod, under the
 * error context above.
 */
Datum
idx_call_input_function(const IdxColumnConv *conv, const IdxConvSource *src,
					char *str)
{
	ErrorContextCallback errcb;
	ConvErrorState state;
	Datum		result;

	state.conv = conv;
	state.src = src;
	errcb.callback = idx_conv_error_callback;
	errcb.arg = &state;
	errcb.previous = error_context_stack;
	error_context_stack = &errcb;

	result = InputFunctionCall(unconstify(FmgrInfo *, &conv->typinput), str,
							   conv->typioparam, conv->typmod);

	error_context_stack = errcb.previous;
	return result;
}

/*
 * Raise an error if appending to a BSON document failed (libbson refuses
 * only when the document would exceed its maximum size).
 */
void
idx_check_append(bool ok)
{
	if (!ok)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("BSON document exceeds the maximum size")));
}
