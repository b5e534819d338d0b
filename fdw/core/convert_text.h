/*-------------------------------------------------------------------------
 *
 * convert_text.h
 *		  The text of conversions (convert_text.c): BSON strings in the
 *		  server encoding, doubles as text.
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/core/convert_text.h
 *
 * Internal to the conversion code: the rest of the FDW goes through
 * convert.h.
 *
 *-------------------------------------------------------------------------
 */
#ifndef IDXTABLE_CONVERT_TEXT_H
#define IDXTABLE_CONVERT_TEXT_H

#include "core/convert.h"
#include "core/mongoc_compat.h"

/* A BSON string (UTF-8) in the server encoding; may point into the BSON */
extern char *idx_utf8_to_server(const char *str, uint32 len,
								const IdxColumnConv *conv,
								const IdxConvSource *src);

/* Shortest exact text of a double (buf: DOUBLE_SHORTEST_DECIMAL_LEN bytes) */
extern char *idx_format_double(double value, char *buf);

#endif							/* IDXTABLE_CONVERT_TEXT_H */
