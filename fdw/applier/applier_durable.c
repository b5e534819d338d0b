/*-------------------------------------------------------------------------
 *
 * applier_durable.c
 *		  Repairs of the applier that count only once nothing they read or
 *		  wrote can be rolled back, when the URI's write concern is below
 *		  majority.
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/applier/applier_durable.c
 *
 * With no w or w=majority in the server's uri the applier reads facts at
 * majority (applier.c, index_repair.c): nothing it reads can be rolled
 * back, and its own writes are majority-committed when they return.  With
 * a smaller w it reads facts as the URI says, since a majority read could
 * miss the fact of a unique claim the FDW just made (index_claims.h).  A
 * failover can then roll back a write the applier read, and the entries
 * it wrote for it, while its change stream (majority-committed changes
 * only) has moved past the event it applied and never shows the rollback;
 * or libmongoc retries its entry write on a new primary that never had
 * what it read.  So each set of repairs (a batch, a rebuild) is confirmed:
 * the primary's election is noted before the reads, and after the writes
 * the applier waits until everything the primary had then is
 * majority-committed, and asks again for the election.  The same election
 * means one primary in one term all along, whose history up to a
 * majority-committed point holds every write the repairs saw or made.
 * Another means a failover in between: the caller repairs the same facts
 * again, read from the new primary.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "applier/applier.h"
#include "applier/change_stream.h"
#include "core/connection.h"
#include "sync/cluster_time.h"

/* Repairs applied again at most this often while the primary changes */
#define MAX_REAPPLY				3

/* How long (ms) repairs wait for their changes to be majority-committed */
#define CONFIRM_TIMEOUT_MS		60000

/*
 * Before repairs of "s" read facts: note the primary's election, if the
 * repairs must be confirmed (see the file header) and it is not known
 * yet (it is, after the last confirmation).
 */
void
idx_applier_note_election(AppStream *s)
{
	if (applier.durable_reads || s->election_known)
		return;
	s->election = idx_primary_election(applier.client, applier.servername);
	s->election_known = true;
}

/*
 * After repairs of "s": can nothing they read or wrote be rolled back?
 * Waits until everything the primary has now is majority-committed, then
 * compares its election with the one noted before the reads (see the file
 * header); false after a failover in between: the caller repairs the same
 * facts again.  Always true when the facts are read at majority anyway,
 * and on a server that holds no elections (a standalone server or a
 * mongos).  "Now" is a ping's time, sent after the repairs: unlike the
 * time of our own writes (applier_stream.c, written_through()), the
 * replies to the repairs' reads at the URI's read concern report the
 * node's last applied time as the reply was made, which nothing promises
 * to cover every write the read saw.
 */
bool
idx_applier_primary_kept(AppStream *s)
{
	IdxClusterTime now;
	uint64		election;
	bool		kept;

	if (applier.durable_reads || !s->election_known || s->election == 0)
		return true;
	now = idx_sync_server_time(applier.client, applier.servername, s->database);
	idx_cs_wait_majority(applier.client, applier.servername, s->database,
						 now, CONFIRM_TIMEOUT_MS);
	election = idx_primary_election(applier.client, applier.servername);
	kept = (election == s->election);
	s->election = election;
	return kept;
}

/*
 * An election happened while repairs of "s" ran: log it, or raise an
 * ERROR if this is the "attempt"th time for the same facts.
 */
void
idx_applier_primary_changed(AppStream *s, int attempt)
{
	if (attempt > MAX_REAPPLY)
		ereport(ERROR,
				(errcode(ERRCODE_FDW_ERROR),
				 errmsg("the primary of server \"%s\" changed %d times while the applier applied changes of database \"%s\"",
						applier.servername, attempt, s->database)));
	ereport(LOG,
			(errmsg("idxtable_fdw applier: the primary of server \"%s\" changed while changes of database \"%s\" were applied",
					applier.servername, s->database),
			 errdetail("The facts they read may be rolled back; they are read again from the new primary and applied again.")));
}
