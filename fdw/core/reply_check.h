/*-------------------------------------------------------------------------
 *
 * reply_check.h
 *		  Validation of MongoDB wire-protocol replies.
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/core/reply_check.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef IDXTABLE_REPLY_CHECK_H
#define IDXTABLE_REPLY_CHECK_H

/*
 * Check a whole reply of "len" bytes (header included, len >= 16), given
 * as "rest", the len - 4 bytes after its length prefix: NULL if it is
 * well-formed, else a sentence saying what is wrong, marked for
 * translation (pass it through _()).  With "defer_batch", the documents of
 * a cursor batch are checked only as libmongoc's cursor needs; their
 * reader checks the rest (idx_bson_document_ok()) before reading them.
 */
extern const char *idx_check_reply(const uint8 *rest, size_t len,
								   bool defer_batch);

/* How deep a cursor batch's documents are nested in a reply's body */
#define IDX_BATCH_DOCUMENT_DEPTH	3

/*
 * Is the "len"-byte BSON document at "d", nested "depth" deep in its
 * reply, well-formed throughout (as idx_check_reply() checks a reply's
 * documents)?
 */
extern bool idx_bson_document_ok(const uint8 *d, uint32 len, int depth);

/* A little-endian int32 of the wire protocol, at "p" (any alignment) */
extern int32 idx_wire_int32(const uint8 *p);

/*
 * Where the value of type "type" at offset "o" of the "len"-byte BSON
 * document "d" ends, or 0 if libbson's bson_iter_next() would refuse it;
 * an end >= len is refused too (the caller checks).  A document, array or
 * code-with-scope value also gives the document it holds in *sub and *sublen.
 */
extern uint32 idx_bson_value_end(const uint8 *d, uint32 len, uint32 o,
								 uint8 type, const uint8 **sub,
								 uint32 *sublen);

#endif							/* IDXTABLE_REPLY_CHECK_H */
