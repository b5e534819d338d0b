/*-------------------------------------------------------------------------
 *
 * index_privileges.c
 *		  create_index refuses an index table whose upkeep the MongoDB user
 *		  of the user mapping may not do.
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/index/index_privileges.c
 *
 * An index table needs, besides reading its facts, to write its index
 * collection and the ownership marker in idxtable.owners; and when a
 * change-stream applier is to follow it (the library is preloaded and the
 * server's change_streams is on), the applier's database-level change
 * stream (find and changeStream on the whole database, {db: D,
 * collection: ""}: mongod grants no database stream on collection-scoped
 * privileges) and its heartbeats, markers and positions in
 * idxtable.sync and idxtable.positions.  Without them the build fails half
 * way, or the applier fails at every open of its stream, the index table
 * is never current and unique-key writes wait for it in vain.  So
 * create_index asks the server what the user may do (connectionStatus,
 * core/privileges.c) and refuses with 42501, naming what is missing and on
 * which collection.  A server that cannot tell is not refused here.
 * Through mongos the applier and every current read need appendOplogNote
 * on the cluster too (sync_wait.c); the owner's user mapping is checked
 * for it.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "foreign/foreign.h"
#include "lib/stringinfo.h"

#include "core/connection.h"
#include "core/privileges.h"
#include "index/index_ddl.h"
#include "index/index_notify.h"
#include "index/index_owner.h"

/* The applier's collections per database (sync_state.h, applier_position.c) */
#define SYNC_COLLECTION			"idxtable.sync"
#define POSITIONS_COLLECTION	"idxtable.positions"

static const char *const read_actions[] = {"find", NULL};
static const char *const stream_actions[] = {"find", "changeStream", NULL};
static const char *const index_actions[] = {"find", "insert", "update",
	"remove", "createIndex", "dropCollection", NULL};
static const char *const marker_actions[] = {"find", "insert", "update",
	"remove", NULL};
static const char *const sync_actions[] = {"find", "insert", "update", NULL};
static const char *const cluster_actions[] = {"appendOplogNote", NULL};

/*
 * Add "actions on collection" (or on the whole database, when collection
 * is "", or on the cluster, when database is NULL) to "detail" if the user
 * lacks any of them; true if it does.
 */
static bool
note_missing(StringInfo detail, const IdxPrivileges *privileges,
			 const char *database, const char *collection,
			 const char *const *actions)
{
	char	   *missing = idx_privileges_missing(privileges, database,
												 collection, actions);

	if (missing == NULL)
		return false;
	if (detail->len > 0)
		appendStringInfoString(detail, "; ");
	if (database == NULL)
		appendStringInfo(detail, _("%s on the cluster ({cluster: true})"),
						 missing);
	else if (*collection == '\0')
		appendStringInfo(detail, _("%s on the whole database \"%s\" ({db: \"%s\", collection: \"\"})"),
						 missing, database, database);
	else
		appendStringInfo(detail, _("%s on collection \"%s\""), missing,
						 collection);
	return true;
}

/*
 * Refuse index table "def" (of the fact collection of "info") when the
 * MongoDB user of "client" may not do what it needs on "server".  A
 * change-stream applier is to follow it when the library is preloaded
 * (the workers' hook is installed) and the server has change streams.
 */
void
idx_check_index_privileges(mongoc_client_t *client, ForeignServer *server,
						   const IdxIndexDef *def, const IdxTableInfo *info)
{
	IdxPrivileges *privileges = idx_privileges_fetch(client);
	bool		streams = idx_index_change_hook != NULL &&
		idx_server_change_streams(server);
	const char *servername = server->servername;
	StringInfoData detail;
	bool		no_stream = false;
	bool		no_note = false;

	if (privileges == NULL)
		return;
	initStringInfo(&detail);
	if (streams)
		no_stream = note_missing(&detail, privileges, def->database, "",
								 stream_actions);
	note_missing(&detail, privileges, def->database, info->collection,
				 read_actions);
	note_missing(&detail, privileges, def->database, def->collection,
				 index_actions);
	note_missing(&detail, privileges, def->database, IDX_OWNER_REGISTRY,
				 marker_actions);
	if (streams)
	{
		note_missing(&detail, privileges, def->database, SYNC_COLLECTION,
					 sync_actions);
		note_missing(&detail, privileges, def->database,
					 POSITIONS_COLLECTION, sync_actions);
		if (idx_client_is_mongos(client, servername))
			no_note = note_missing(&detail, privileges, NULL, NULL,
								   cluster_actions);
	}
	if (detail.len == 0)
		return;
	ereport(ERROR,
			(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
			 errmsg("the MongoDB user of foreign server \"%s\" may not maintain index table \"%s\" on collection \"%s\" of database \"%s\"",
					servername, def->name, info->collection, def->database),
			 errdetail("The user lacks these actions: %s.", detail.data),
			 no_stream ?
			 errhint("Grant the MongoDB user the role readWrite on database \"%s\" (it holds every action needed), or these actions on these resources; the change-stream applier needs find and changeStream on the whole database. Without change streams, set the server's option change_streams to 'off'.",
					 def->database) :
			 no_note ?
			 errhint("Grant the MongoDB user the role readWrite on database \"%s\" and, through mongos, the action appendOplogNote on the cluster (the role clusterManager has it), or these actions on these resources.",
					 def->database) :
			 errhint("Grant the MongoDB user the role readWrite on database \"%s\" (it holds every action needed), or these actions on these resources.",
					 def->database)));
}
