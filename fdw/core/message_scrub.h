/*-------------------------------------------------------------------------
 *
 * message_scrub.h
 *		  libmongoc's messages without connection strings (message_scrub.c).
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/core/message_scrub.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef IDXTABLE_MESSAGE_SCRUB_H
#define IDXTABLE_MESSAGE_SCRUB_H

/*
 * A copy of a libmongoc message with anything that looks like a connection
 * string removed, for a detail line.
 */
extern char *idx_scrub_message(const char *msg);

#endif							/* IDXTABLE_MESSAGE_SCRUB_H */
