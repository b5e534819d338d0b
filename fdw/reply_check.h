/*-------------------------------------------------------------------------
 *
 * reply_check.h
 *		  Validation of MongoDB wire-protocol replies.
 *
 *-------------------------------------------------------------------------
 */
#ifndef IDXTABLE_REPLY_CHECK_H
#define IDXTABLE_REPLY_CHECK_H

/*
 * Check a whole reply of "len" bytes (header included, len >= 16): NULL if
 * it is well-formed, else a sentence saying what is wrong, marked for
 * translation (pass it through _()).
 */
extern const char *idx_check_reply(const uint8 *msg, size_t len);

/* A little-endian int32 of the wire protocol, at "p" (any alignment) */
extern int32 idx_wire_int32(const uint8 *p);

#endif							/* IDXTABLE_REPLY_CHECK_H */
