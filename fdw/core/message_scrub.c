/*-------------------------------------------------------------------------
 *
 * message_scrub.c
 *		  libmongoc's messages without anything that looks like a
 *		  connection string, for detail lines.
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/core/message_scrub.c
 *
 * libmongoc may quote the URI it was given, credentials and all, in its
 * messages.  Whoever shows one of them to a user (remote_error.c,
 * mongo_limits.c, the shard key's and index DDL's errors) shows a scrubbed
 * copy, so that no secret leaks.  Below all of them, it depends on nothing
 * of ours.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "core/message_scrub.h"

/*
 * Remove anything that looks like a connection string from a libmongoc
 * message, in place, so that it can be shown in a detail line.
 */
char *
idx_scrub_message(const char *msg)
{
	char	   *copy = pstrdup(msg);
	char	   *p;

	while ((p = strstr(copy, "mongodb://")) != NULL ||
		   (p = strstr(copy, "mongodb+srv://")) != NULL)
	{
		char	   *end = p;

		while (*end && *end != ' ' && *end != '\'' && *end != '"')
			end++;
		memmove(p + 5, end, strlen(end) + 1);
		memcpy(p, "(uri)", 5);
	}
	return copy;
}
