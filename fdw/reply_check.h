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

#endif							/* IDXTABLE_REPLY_CHECK_H */
