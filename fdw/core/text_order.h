/*-------------------------------------------------------------------------
 *
 * text_order.h
 *		  Text columns that hold strings and ObjectIds, ordered as bytes
 *		  (under a bytewise collation, collate_bytes.h): the ObjectIds a
 *		  text bound selects, and the text a BSON value reads as.
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/core/text_order.h
 *
 * A text column reads a string or a symbol as itself and an ObjectId as
 * its 24 lowercase hex digits (convert.c).  MongoDB's simple collation
 * orders strings (and symbols) as bytes, below every ObjectId, and
 * ObjectIds as their 12 bytes, which is the byte order of their hex
 * digits.  So under a bytewise collation "column op 'text'" selects a
 * range of the strings and a range of the ObjectIds, each one index
 * interval, and the rows of both come in PostgreSQL's order by merging
 * a find sorted on each.
 *
 *-------------------------------------------------------------------------
 */
#ifndef IDXTABLE_TEXT_ORDER_H
#define IDXTABLE_TEXT_ORDER_H

#include "core/mongoc_compat.h"

/* The ObjectIds a text bound selects (idx_text_bound_objectids) */
typedef enum IdxOidRange
{
	IDX_OIDS_NONE,				/* no ObjectId */
	IDX_OIDS_ALL,				/* every ObjectId */
	IDX_OIDS_GT,				/* those above *oid */
	IDX_OIDS_GE,				/* those at or above *oid */
	IDX_OIDS_LT,				/* those below *oid */
	IDX_OIDS_LE					/* those at or below *oid */
} IdxOidRange;

/*
 * The ObjectIds whose text is above (lower, else below) the string "s"
 * of "len" bytes, or equal to it too if "inclusive", as a bound on
 * ObjectIds (in *oid).
 */
extern IdxOidRange idx_text_bound_objectids(const char *s, size_t len,
											bool lower, bool inclusive,
											bson_oid_t *oid);

/*
 * The text a BSON string, symbol or ObjectId reads as, in *str and *len
 * ("buf" holds an ObjectId's 24 hex digits and a zero byte); false for
 * another type.
 */
extern bool idx_bson_text(const bson_iter_t *iter, char *buf,
						  const char **str, uint32 *len);

/* The least ObjectId (twelve zero bytes): {$gte: it} is every ObjectId */
extern void idx_objectid_least(bson_oid_t *oid);

/* Compare two texts as their bytes (memcmp, then the shorter first) */
extern int	idx_text_bytes_cmp(const char *a, uint32 alen,
							   const char *b, uint32 blen);

#endif							/* IDXTABLE_TEXT_ORDER_H */
