/*-------------------------------------------------------------------------
 *
 * protocol_read.c
 *		  How the index-table protocol's own reads are sent.
 *
 * A server's URI may ask for readPreference=secondaryPreferred (or any
 * other non-primary mode) so that user-visible scans can be served by
 * secondaries.  The reads whose answer decides what the FDW writes next
 * (who holds a claim, whether a fact still has an entry, what a fact was
 * before an undo) must not see a lagging secondary: they name the primary
 * explicitly.  Inside a MongoDB transaction libmongoc sends every read to
 * the primary anyway (the transactions specification requires it); the
 * explicit preference matters outside one.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "executor/executor.h"

#include "protocol_read.h"

/*
 * The primary read preference, made once per backend.  libmongoc copies
 * the preference into each cursor, so one instance serves every read.
 * (libmongoc 1.23 sends no $readPreference to a replica-set member for
 * primary, which the server reads as primary; to mongos it sends none
 * either, since primary is mongos's default.)
 */
const mongoc_read_prefs_t *
idx_primary_read_prefs(void)
{
	static mongoc_read_prefs_t *primary = NULL;

	if (primary == NULL)
		primary = mongoc_read_prefs_new(MONGOC_READ_PRIMARY);
	return primary;
}

/*
 * A scan whose rows the statement is about to write (UPDATE/DELETE of the
 * table, or SELECT ... FOR UPDATE/SHARE on it) reads from the primary: an
 * UPDATE computes the new values from what it read, so a lagging
 * secondary would make it write over a newer version of the document.
 * Other scans keep the readPreference of the server's URI.
 */
const mongoc_read_prefs_t *
idx_scan_read_prefs(ForeignScanState *node)
{
	EState	   *estate = node->ss.ps.state;
	Index		scanrelid = ((Scan *) node->ss.ps.plan)->scanrelid;

	if (scanrelid == 0)
		return NULL;
	if (ExecRelationIsTargetRelation(estate, scanrelid) ||
		(estate->es_rowmarks != NULL &&
		 estate->es_rowmarks[scanrelid - 1] != NULL))
		return idx_primary_read_prefs();
	return NULL;
}
