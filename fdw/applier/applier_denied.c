/*-------------------------------------------------------------------------
 *
 * applier_denied.c
 *		  A change stream the server refuses to the applier's user
 *		  (Unauthorized, 13): its index tables are not current, said once,
 *		  and the stream is tried again with a backoff.
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/applier/applier_denied.c
 *
 * A database-level change stream needs find and changeStream on the whole
 * database; create_index checks that (index_privileges.c), but a role can
 * lose them later.  Then every open of the stream, and the getMore of an
 * open one, fails with 13.  Ending the applier would only start it again,
 * fail again and log again, while unique-key writes wait for it in vain.
 * Instead the stream of that database is closed and its index tables get
 * the reason as their status's last_error, with "blocked" set: routing
 * stops (sync_wait.c), waits of reads and writes end at once with IX001
 * and the reason, and idxtable.sync_status shows it.  The applier goes on
 * with its other databases and tries the stream again after 1 s, the
 * delay doubling up to 10 s; the first refusal is logged as a WARNING and
 * the recovery once, the retries only at DEBUG1.  The state is kept per
 * MongoDB database for the life of the process, so that a reload of the
 * catalog (which builds the streams anew) neither logs again nor retries
 * sooner.  Nothing is skipped meanwhile: the stored position stays where
 * the last applied batch left it, and a stream opened again resumes there.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "storage/latch.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"

#include "applier/applier.h"
#include "core/privileges.h"

#define DENIED_FIRST_RETRY_MS	1000
#define DENIED_MAX_RETRY_MS		10000

/* One database whose change stream the server refuses */
typedef struct Denial
{
	char	   *database;
	TimestampTz retry_at;
	int			delay_ms;
	char		message[IDX_SYNC_ERROR_LEN];
} Denial;

/* Denial *, in TopMemoryContext */
static List *denials = NIL;

static const char *const stream_actions[] = {"find", "changeStream", NULL};

/*
 * The denial of database "database", or NULL.
 */
static Denial *
find_denial(const char *database)
{
	ListCell   *lc;

	foreach(lc, denials)
	{
		Denial	   *d = lfirst(lc);

		if (strcmp(d->database, database) == 0)
			return d;
	}
	return NULL;
}

/*
 * Give the index tables of "s" the denial's message: not current, and
 * waits for them end at once.
 */
static void
mark_indexes(AppStream *s, const Denial *d)
{
	ListCell   *lc;

	foreach(lc, s->indexes)
	{
		AppIndex   *ix = lfirst(lc);

		strlcpy(ix->status.last_error, d->message, IDX_SYNC_ERROR_LEN);
		ix->status.streaming = false;
		ix->status.blocked = true;
		idx_sync_index_report(&ix->status);
	}
	ConditionVariableBroadcast(&applier.slot->applied_cv);
}

/*
 * The reason for index tables' last_error: the actions the user lacks on
 * the database, if the server tells (connectionStatus).
 */
static void
denial_message(Denial *d)
{
	IdxPrivileges *privileges = idx_privileges_fetch(applier.client);
	char	   *missing = privileges ?
		idx_privileges_missing(privileges, d->database, "", stream_actions) :
		NULL;

	if (missing != NULL)
		snprintf(d->message, IDX_SYNC_ERROR_LEN,
				 _("the MongoDB user may not follow the change stream of database \"%s\": it lacks %s on the whole database"),
				 d->database, missing);
	else
		snprintf(d->message, IDX_SYNC_ERROR_LEN,
				 _("the MongoDB user was refused the change stream of database \"%s\" (not authorized)"),
				 d->database);
}

/*
 * The server refused the stream of "s" (see the header comment): mark its
 * index tables; the caller has stored its position and closed the stream.
 */
void
idx_applier_deny(AppStream *s)
{
	Denial	   *d = find_denial(s->database);

	if (d == NULL)
	{
		MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);

		d = palloc0(sizeof(Denial));
		d->database = pstrdup(s->database);
		d->delay_ms = DENIED_FIRST_RETRY_MS;
		denials = lappend(denials, d);
		MemoryContextSwitchTo(old);
		denial_message(d);
		ereport(WARNING,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("idxtable_fdw applier for server \"%s\": %s",
						applier.servername, d->message),
				 errdetail("Its index tables in that database are not current until the stream opens again; it is tried again every %d s at most.",
						   DENIED_MAX_RETRY_MS / 1000),
				 errhint("Grant the MongoDB user of the table owner's user mapping the actions find and changeStream on {db: \"%s\", collection: \"\"} (the role read on the database has them).",
						 s->database)));
	}
	else
	{
		d->delay_ms = Min(d->delay_ms * 2, DENIED_MAX_RETRY_MS);
		elog(DEBUG1, "idxtable_fdw applier: the change stream of database \"%s\" is still refused",
			 s->database);
	}
	d->retry_at = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
											  d->delay_ms);
	mark_indexes(s, d);
}

/*
 * May the stream of "s" be opened now?  Not while its database's denial
 * waits for its retry; its index tables (built anew by a catalog reload)
 * keep the denial's message meanwhile.
 */
bool
idx_applier_may_open(AppStream *s)
{
	Denial	   *d = find_denial(s->database);
	ListCell   *lc;

	if (d == NULL || GetCurrentTimestamp() >= d->retry_at)
		return true;
	foreach(lc, s->indexes)
	{
		AppIndex   *ix = lfirst(lc);

		if (!ix->status.blocked)
		{
			mark_indexes(s, d);
			break;
		}
	}
	return false;
}

/*
 * The stream of "s" is open: a denial of its database is over (logged
 * once); its index tables follow again, from the stored position.
 */
void
idx_applier_stream_allowed(AppStream *s)
{
	Denial	   *d = find_denial(s->database);
	ListCell   *lc;

	if (d == NULL)
		return;
	denials = list_delete_ptr(denials, d);
	pfree(d->database);
	pfree(d);
	foreach(lc, s->indexes)
	{
		AppIndex   *ix = lfirst(lc);

		ix->status.last_error[0] = '\0';
		ix->status.blocked = false;
		idx_sync_index_report(&ix->status);
	}
	ereport(LOG,
			(errmsg("idxtable_fdw applier for server \"%s\" follows database \"%s\" again: its change stream is allowed",
					applier.servername, s->database)));
}

/*
 * After a round in which no stream could be stepped (all refused), wait
 * for the earliest retry, at most a second, or for our latch (a catalog
 * change, a backend's request).  Outside any transaction.
 */
void
idx_applier_denied_sleep(void)
{
	TimestampTz now = GetCurrentTimestamp();
	long		wait_ms = 1000;
	ListCell   *lc;

	foreach(lc, denials)
	{
		Denial	   *d = lfirst(lc);

		wait_ms = Min(wait_ms,
					  TimestampDifferenceMilliseconds(now, d->retry_at));
	}
	(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
					 Max(wait_ms, 1), PG_WAIT_EXTENSION);
	ResetLatch(MyLatch);
	CHECK_FOR_INTERRUPTS();
}
