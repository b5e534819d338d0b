/*-------------------------------------------------------------------------
 *
 * convert_json.h
 *		  The json/jsonb conversions and the ISO 8601 text of BSON dates
 *		  (convert_json.c), for the other conversion files.
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/core/convert_json.h
 *
 * Internal to the conversion code: the rest of the FDW goes through
 * convert.h.  The reading direction (convert.c) takes json/jsonb values
 * and the text of dates from here, the writing direction (convert_write.c)
 * json/jsonb values and the epochs.
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

#endif							/* IDXTABLE_CONVERT_JSON_H */
