/*-------------------------------------------------------------------------
 *
 * connection.c
 *		  Cache of MongoDB clients.
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/core/connection.c
 *
 * Each backend keeps one mongoc_client_t per user mapping, created on first
 * use and kept for the life of the backend, so that a query costs no extra
 * round trip.  ALTER SERVER / ALTER USER MAPPING invalidate the entry; the
 * stale client is destroyed when no scan is using it (at the next lookup
 * outside a scan, or at transaction end).  Beside each client the entry
 * holds the state of its MongoDB transaction (xact_state.h), which xact.c
 * drives; the cache only asks whether a transaction is open and ends the
 * client's sessions when it destroys the client (xact_state.c).
 *
 * Errors are translated by remote_error.c.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "commands/defrem.h"
#include "common/hashfn.h"
#include "miscadmin.h"
#include "utils/hsearch.h"
#include "utils/inval.h"
#include "utils/memutils.h"
#include "utils/syscache.h"

#include "core/connection.h"
#include "core/handle.h"
#include "core/mongoc_compat.h"
#include "core/option.h"
#include "core/stream.h"
#include "core/trust.h"
#include "core/xact_state.h"

/*
 * One cached client.  The hash key is the user mapping OID.
 */
typedef struct IdxConnEntry
{
	Oid			umid;			/* hash key */
	mongoc_client_t *client;	/* NULL if not connected */
	bool		invalidated;	/* options changed: reconnect when idle */
	uint32		server_hashvalue;	/* syscache hash of the server row */
	uint32		mapping_hashvalue;	/* syscache hash of the user mapping */
	int			active_scans;	/* scans currently using the client */
	bool		superuser_only; /* trust rules not yet checked for a
								 * non-superuser (trust.c) */
	IdxRemoteXact xact;			/* the client's MongoDB transaction */
	int8		mongos;			/* the client talks to mongos: 1 yes, 0 no,
								 * -1 not asked yet (idx_client_is_mongos) */
} IdxConnEntry;

static HTAB *ConnectionHash = NULL;

/* Where to count commands sent (EXPLAIN ANALYZE round trips), or NULL */
static uint64 *round_trip_counter = NULL;

/* Who is told of each command counted (idx_note_counted_commands()) */
static IdxCountedCommandFn counted_command_note = NULL;

/* Where to note the operationTime of replies (the applier's), or NULL */
static IdxReplyTimes *reply_times = NULL;

/* The appName of the clients made (idx_connect_private() changes it) */
static const char *conn_appname = "idxtable_fdw";

static void idx_inval_callback(Datum arg, int cacheid, uint32 hashvalue);
static mongoc_client_t *get_client(ForeignServer *server, UserMapping *user,
								   bool quiet);
static void run_command_at(mongoc_client_t *client, const char *server,
						   const char *database, const bson_t *command,
						   const mongoc_read_prefs_t *read_prefs,
						   bson_t *reply, const IdxOp *what);

/*
 * APM hook: count every command libmongoc sends (find, getMore, ...) for
 * whoever asked, and tell the function that asked to hear of them (the
 * scan's reads for EXPLAIN ANALYZE's shards, shard_explain.c).
 */
static void
command_started(const mongoc_apm_command_started_t *event)
{
	if (round_trip_counter)
	{
		(*round_trip_counter)++;
		if (counted_command_note)
			counted_command_note(round_trip_counter, event);
	}
}

/*
 * Tell "fn" of each command counted from now on, with the counter that
 * counted it.  One function for the backend; the last one set is told.
 */
void
idx_note_counted_commands(IdxCountedCommandFn fn)
{
	counted_command_note = fn;
}

/*
 * APM hook: the operationTime of a reply, into the tracker of whoever asked
 * (idx_track_reply_times()).  A reply without one (a network error, whose
 * command may have run anyway, or a server without cluster times) marks
 * the tracker "unanswered": its latest time may not cover that command.
 */
static void
note_reply_time(const bson_t *reply)
{
	bson_iter_t iter;
	uint32_t	t,
				i;
	uint64		ct;

	if (reply == NULL || !bson_iter_init_find(&iter, reply, "operationTime") ||
		!BSON_ITER_HOLDS_TIMESTAMP(&iter))
	{
		reply_times->unanswered = true;
		return;
	}
	bson_iter_timestamp(&iter, &t, &i);
	ct = ((uint64) t << 32) | (uint64) i;
	if (ct == 0)
		reply_times->unanswered = true;
	reply_times->latest = Max(reply_times->latest, ct);
}

/*
 * APM hooks of a command's end, ok or not: its reply's time (see above).
 */
static void
command_succeeded(const mongoc_apm_command_succeeded_t *event)
{
	if (reply_times)
		note_reply_time(mongoc_apm_command_succeeded_get_reply(event));
}

static void
command_failed(const mongoc_apm_command_failed_t *event)
{
	if (reply_times)
		note_reply_time(mongoc_apm_command_failed_get_reply(event));
}

/*
 * Note the operationTime of every reply from now on in *times (NULL:
 * stop); returns the previous target.  The applier's way to learn a time
 * at or after its own writes without asking the server (applier_stream.c).
 */
IdxReplyTimes *
idx_track_reply_times(IdxReplyTimes *times)
{
	IdxReplyTimes *previous = reply_times;

	reply_times = times;
	return previous;
}

/*
 * Count the commands sent from now on into *counter (NULL: stop counting).
 * Returns the previous target, so calls can nest.
 */
uint64 *
idx_count_round_trips(uint64 *counter)
{
	uint64	   *previous = round_trip_counter;

	round_trip_counter = counter;
	return previous;
}

/*
 * Set up the hash table and the invalidation callbacks on first use.
 */
static void
init_connection_cache(void)
{
	HASHCTL		ctl;

	ctl.keysize = sizeof(Oid);
	ctl.entrysize = sizeof(IdxConnEntry);
	ConnectionHash = hash_create("idxtable_fdw connections", 8, &ctl,
								 HASH_ELEM | HASH_BLOBS);

	CacheRegisterSyscacheCallback(FOREIGNSERVEROID, idx_inval_callback,
								  (Datum) 0);
	CacheRegisterSyscacheCallback(USERMAPPINGOID, idx_inval_callback,
								  (Datum) 0);
}

/*
 * Copy an integer server option into the URI as a libmongoc option.
 */
static void
apply_int_option(mongoc_uri_t *uri, List *options, const char *optname,
				 const char *urioption)
{
	const char *val = idx_find_option(options, optname);

	if (val)
		mongoc_uri_set_option_as_int32(uri, urioption, atoi(val));
}

/*
 * Build the URI for a server and user mapping: the server's "uri" plus the
 * timeouts and the credentials and secrets of the user mapping.  Refuses a
 * connection the trust rules forbid for the mapping's user.
 */
static mongoc_uri_t *
build_uri(ForeignServer *server, UserMapping *user)
{
	const char *uristr = idx_find_option(server->options, "uri");
	const char *username = idx_find_option(user->options, "username");
	const char *password = idx_find_option(user->options, "password");
	const char *auth_source = idx_find_option(user->options, "auth_source");
	bson_error_t error;
	mongoc_uri_t *uri;
	IdxHandle  *owned;

	if (uristr == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_FDW_OPTION_NAME_NOT_FOUND),
				 errmsg("server \"%s\" has no \"uri\" option",
						server->servername)));

	uri = mongoc_uri_new_with_error(uristr, &error);
	if (uri == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_FDW_INVALID_ATTRIBUTE_VALUE),
				 errmsg("invalid \"uri\" option for server \"%s\"",
						server->servername)));

	apply_int_option(uri, server->options, "connect_timeout_ms",
					 MONGOC_URI_CONNECTTIMEOUTMS);
	apply_int_option(uri, server->options, "socket_timeout_ms",
					 MONGOC_URI_SOCKETTIMEOUTMS);
	apply_int_option(uri, server->options, "server_selection_timeout_ms",
					 MONGOC_URI_SERVERSELECTIONTIMEOUTMS);

	if (username)
	{
		mongoc_uri_set_username(uri, username);
		if (password)
			mongoc_uri_set_password(uri, password);
		mongoc_uri_set_auth_source(uri, auth_source ? auth_source : "admin");
	}
	mongoc_uri_set_appname(uri, conn_appname);

	/* the mapping's secrets, then postgres_fdw's trust rules (trust.c) */
	owned = idx_own_uri(uri);
	idx_apply_mapping_secrets(uri, user->options);
	idx_check_connect_trust(server, user, uri);
	idx_disown(owned);
	return uri;
}

/*
 * Create a client for (server, user) and check it with a "ping", so that
 * connection and authentication problems surface here, as class-08 errors
 * naming the server, rather than in the middle of a scan.  With "quiet",
 * a failed ping returns NULL instead (planning's look at the collection's
 * size, which must not fail: table_size.c).
 */
static mongoc_client_t *
connect_client(ForeignServer *server, UserMapping *user, bool quiet)
{
	mongoc_uri_t *uri = build_uri(server, user);
	IdxHandle  *owned_uri = idx_own_uri(uri);
	mongoc_client_t *client;
	mongoc_apm_callbacks_t *callbacks;
	bson_t		ping = BSON_INITIALIZER;
	bson_error_t error;
	bool		ok;

	client = idx_stream_client_new(uri, server->servername);
	idx_release(owned_uri);
	if (client == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_SQLCLIENT_UNABLE_TO_ESTABLISH_SQLCONNECTION),
				 errmsg("could not connect to server \"%s\"",
						server->servername),
				 errdetail("The connection string could not be used.")));

	mongoc_client_set_error_api(client, MONGOC_ERROR_API_VERSION_2);
	callbacks = mongoc_apm_callbacks_new();
	mongoc_apm_set_command_started_cb(callbacks, command_started);
	mongoc_apm_set_command_succeeded_cb(callbacks, command_succeeded);
	mongoc_apm_set_command_failed_cb(callbacks, command_failed);
	mongoc_client_set_apm_callbacks(client, callbacks, NULL);
	mongoc_apm_callbacks_destroy(callbacks);

	BSON_APPEND_INT32(&ping, "ping", 1);
	ok = mongoc_client_command_simple(client, "admin", &ping, NULL, NULL,
									  &error);
	bson_destroy(&ping);
	if (!ok)
	{
		idx_stream_client_destroy(client);
		if (quiet)
		{
			/* a cancel is not a server that cannot be reached */
			idx_stream_raise_failure(server->servername);
			return NULL;
		}
		idx_report_error(&error, server->servername,
						 idx_op(IDX_OP_CONNECT, NULL, NULL));
	}
	return client;
}

/*
 * A client for (server, user) that is not cached, with its own appName
 * (the applier's, so that it can be told apart in the server's logs and
 * failpoints).  The caller owns it: idx_stream_client_destroy().
 */
mongoc_client_t *
idx_connect_private(ForeignServer *server, UserMapping *user,
					const char *appname)
{
	const char *saved = conn_appname;
	mongoc_client_t *client;

	conn_appname = appname;
	PG_TRY();
	{
		client = connect_client(server, user, false);
	}
	PG_FINALLY();
	{
		conn_appname = saved;
	}
	PG_END_TRY();
	return client;
}

/*
 * Destroy the client of a cache entry.
 */
static void
disconnect_entry(IdxConnEntry *entry)
{
	if (entry->client)
	{
		idx_xact_release(&entry->xact);
		idx_stream_client_destroy(entry->client);
	}
	memset(&entry->xact, 0, sizeof(entry->xact));
	entry->client = NULL;
	entry->invalidated = false;
}

/*
 * A client made for a superuser, now wanted by a non-superuser through the
 * same user mapping (a PUBLIC one, or after a SECURITY DEFINER function):
 * apply the trust rules the connection skipped, by building the URI again.
 */
static void
recheck_trust(IdxConnEntry *entry, ForeignServer *server, UserMapping *user)
{
	mongoc_uri_destroy(build_uri(server, user));
	entry->superuser_only = false;
}

/*
 * Return the cached client for (server, user mapping), connecting on first
 * use or after the options changed.
 */
mongoc_client_t *
idx_get_client(ForeignServer *server, UserMapping *user)
{
	return get_client(server, user, false);
}

/*
 * The same, but NULL when the server cannot be reached (see
 * connect_client); the options and the trust rules are checked as ever.
 */
mongoc_client_t *
idx_get_client_quiet(ForeignServer *server, UserMapping *user)
{
	return get_client(server, user, true);
}

/*
 * idx_get_client() and idx_get_client_quiet().
 */
static mongoc_client_t *
get_client(ForeignServer *server, UserMapping *user, bool quiet)
{
	IdxConnEntry *entry;
	bool		found;

	if (ConnectionHash == NULL)
		init_connection_cache();

	entry = hash_search(ConnectionHash, &user->umid, HASH_ENTER, &found);
	if (!found)
	{
		entry->client = NULL;
		entry->invalidated = false;
		entry->active_scans = 0;
		memset(&entry->xact, 0, sizeof(entry->xact));
	}

	if (entry->client &&
		(entry->invalidated || idx_stream_client_broken(entry->client)) &&
		entry->active_scans == 0 && !idx_xact_state_open(&entry->xact))
		disconnect_entry(entry);

	if (entry->client == NULL)
	{
		entry->server_hashvalue =
			GetSysCacheHashValue1(FOREIGNSERVEROID,
								  ObjectIdGetDatum(server->serverid));
		entry->mapping_hashvalue =
			GetSysCacheHashValue1(USERMAPPINGOID,
								  ObjectIdGetDatum(user->umid));
		entry->client = connect_client(server, user, quiet);
		if (entry->client == NULL)
			return NULL;
		entry->superuser_only = superuser_arg(user->userid);
		entry->xact.client = entry->client;
		strlcpy(entry->xact.servername, server->servername, NAMEDATALEN);
		entry->xact.serverid = server->serverid;
		entry->xact.umid = user->umid;
		entry->mongos = -1;
	}
	else if (entry->superuser_only && !superuser_arg(user->userid))
		recheck_trust(entry, server, user);
	return entry->client;
}

/*
 * Return the client for a foreign table, for the user "userid": the
 * checkAsUser of the table's range table entry (the view owner, for a
 * table read through a view) in scans and writes, the current user in
 * ANALYZE and the idxtable.* functions.  InvalidOid means the current
 * user.
 */
mongoc_client_t *
idx_get_client_for_rel(Oid relid, Oid userid, ForeignServer **server_out)
{
	ForeignTable *table = GetForeignTable(relid);
	ForeignServer *server = GetForeignServer(table->serverid);
	UserMapping *user;

	if (!OidIsValid(userid))
		userid = GetUserId();
	user = GetUserMapping(userid, server->serverid);

	if (server_out)
		*server_out = server;
	return idx_get_client(server, user);
}

/*
 * The cache entry of "client", or NULL if it is not a cached one.
 */
static IdxConnEntry *
entry_of_client(mongoc_client_t *client)
{
	HASH_SEQ_STATUS scan;
	IdxConnEntry *entry;

	if (ConnectionHash == NULL || client == NULL)
		return NULL;
	hash_seq_init(&scan, ConnectionHash);
	while ((entry = hash_seq_search(&scan)) != NULL)
	{
		if (entry->client == client)
		{
			hash_seq_term(&scan);
			return entry;
		}
	}
	return NULL;
}

/*
 * Track scans and writes that hold a cached client (from their Begin
 * callback on) or a cursor on it, so that an invalidation or a broken
 * connection never destroys a client still in use: idx_get_client()
 * drops only unpinned clients.
 */
void
idx_client_pin(mongoc_client_t *client, int delta)
{
	IdxConnEntry *entry = entry_of_client(client);

	if (entry != NULL)
		entry->active_scans = Max(entry->active_scans + delta, 0);
}

/*
 * Release callback of idx_client_pin_owned().
 */
static void
unpin_client(void *client)
{
	idx_client_pin((mongoc_client_t *) client, -1);
}

/*
 * Pin a cached client for a function that holds it across calls which may
 * look the same client up again (such as the read of index tables'
 * ownership markers in idx_get_indexes): that lookup, after an
 * invalidation or once the connection is broken, must not destroy it.  The
 * pin goes with idx_release() of the handle, or with the current memory
 * context on an error.  Release it before a commit inside a procedure: a
 * commit forgets every pin.
 */
IdxHandle *
idx_client_pin_owned(mongoc_client_t *client)
{
	idx_client_pin(client, 1);
	return idx_own(client, unpin_client);
}

/*
 * Syscache invalidation: mark the clients of a changed server or user
 * mapping (hashvalue 0 means "everything").
 */
static void
idx_inval_callback(Datum arg, int cacheid, uint32 hashvalue)
{
	HASH_SEQ_STATUS scan;
	IdxConnEntry *entry;

	hash_seq_init(&scan, ConnectionHash);
	while ((entry = hash_seq_search(&scan)) != NULL)
	{
		if (entry->client == NULL)
			continue;
		if (hashvalue == 0 ||
			(cacheid == FOREIGNSERVEROID &&
			 entry->server_hashvalue == hashvalue) ||
			(cacheid == USERMAPPINGOID &&
			 entry->mapping_hashvalue == hashvalue))
			entry->invalidated = true;
	}
}

/*
 * At commit no scan is open any more: drop invalidated clients.  At abort
 * the scans' cursors are released only later, when the portal's memory is
 * cleaned up, so clients are left alone (the next lookup drops them) and
 * only the pins are forgotten.  Called by xact.c's transaction callback,
 * after the MongoDB transactions and the index DDL are done.
 */
void
idx_conn_xact_end(bool commit)
{
	HASH_SEQ_STATUS scan;
	IdxConnEntry *entry;

	idx_stream_reset_state();
	if (ConnectionHash == NULL)
		return;
	hash_seq_init(&scan, ConnectionHash);
	while ((entry = hash_seq_search(&scan)) != NULL)
	{
		entry->active_scans = 0;
		if (commit && entry->invalidated)
			disconnect_entry(entry);
	}
}

/*
 * The transaction state kept beside a cached client, or NULL.
 */
struct IdxRemoteXact *
idx_conn_xact(mongoc_client_t *client)
{
	IdxConnEntry *entry = entry_of_client(client);

	return entry ? &entry->xact : NULL;
}

/*
 * Call "fn" on the transaction state of every connected client.  "fn" may
 * raise an error (a failed commit): the scan is then ended by the abort.
 */
void
idx_conn_foreach_xact(IdxConnXactFn fn, void *arg)
{
	HASH_SEQ_STATUS scan;
	IdxConnEntry *entry;

	if (ConnectionHash == NULL)
		return;
	hash_seq_init(&scan, ConnectionHash);
	while ((entry = hash_seq_search(&scan)) != NULL)
	{
		if (entry->client != NULL)
			fn(&entry->xact, arg);
	}
}

/*
 * Destroy every cached client (idxtable_fdw_disconnect_all()).
 */
bool
idx_disconnect_all(void)
{
	HASH_SEQ_STATUS scan;
	IdxConnEntry *entry;
	bool		any = false;

	if (ConnectionHash == NULL)
		return false;
	hash_seq_init(&scan, ConnectionHash);
	while ((entry = hash_seq_search(&scan)) != NULL)
	{
		if (entry->client && entry->active_scans == 0 &&
			!idx_xact_state_open(&entry->xact))
		{
			disconnect_entry(entry);
			any = true;
		}
	}
	return any;
}

/*
 * Run "command" on "database" on the primary; on failure report it,
 * destroying the reply.
 */
void
idx_run_command(mongoc_client_t *client, const char *server,
				const char *database, const bson_t *command, bson_t *reply,
				const IdxOp *what)
{
	run_command_at(client, server, database, command, NULL, reply, what);
}

/*
 * The same on a server "read_prefs" selects (NULL: the primary).
 */
static void
run_command_at(mongoc_client_t *client, const char *server,
			   const char *database, const bson_t *command,
			   const mongoc_read_prefs_t *read_prefs, bson_t *reply,
			   const IdxOp *what)
{
	bson_error_t error;

	if (!mongoc_client_command_simple(client, database, command, read_prefs,
									  reply, &error))
	{
		idx_merge_reply_error(&error, reply);
		bson_destroy(reply);
		idx_report_error(&error, server, what);
	}
}

/*
 * The metadata count of a collection's documents (the "count" command
 * without a filter, as estimatedDocumentCount: fast, possibly inexact),
 * for ANALYZE, planning before it (table_size.c) and progress reports; 0
 * if the server does not say.  Asks the primary.
 */
int64
idx_count_documents(mongoc_client_t *client, const char *server,
					const char *database, const char *collection)
{
	return idx_count_documents_at(client, server, database, collection,
								  NULL);
}

/*
 * The same, asking a server "read_prefs" selects (NULL: the primary).
 */
int64
idx_count_documents_at(mongoc_client_t *client, const char *server,
					   const char *database, const char *collection,
					   const mongoc_read_prefs_t *read_prefs)
{
	bson_t	   *command = bson_new();
	IdxHandle  *owned = idx_own_bson(command);
	bson_t		reply;
	bson_iter_t iter;
	int64		n = 0;

	BSON_APPEND_UTF8(command, "count", collection);
	run_command_at(client, server, database, command, read_prefs, &reply,
				   idx_op(IDX_OP_COUNT, collection, database));
	idx_release(owned);
	if (bson_iter_init_find(&iter, &reply, "n") &&
		BSON_ITER_HOLDS_NUMBER(&iter))
		n = bson_iter_as_int64(&iter);
	bson_destroy(&reply);
	return Max(n, 0);
}

/*
 * The maxWireVersion in the hello of the server that writes through
 * "client" go to (0 if it tells none); selecting it may connect.  For the
 * features a server version brings (bulkWrite, split change events).
 */
int64
idx_primary_wire_version(mongoc_client_t *client, const char *servername)
{
	bson_error_t error;
	mongoc_server_description_t *sd;
	const bson_t *hello;
	bson_iter_t iter;
	int64		wire = 0;

	sd = mongoc_client_select_server(client, true, NULL, &error);
	if (sd == NULL)
		idx_report_error(&error, servername,
						 idx_op(IDX_OP_SELECT_SERVER, NULL, NULL));
	hello = mongoc_server_description_hello_response(sd);
	if (hello && bson_iter_init_find(&iter, hello, "maxWireVersion") &&
		BSON_ITER_HOLDS_NUMBER(&iter))
		wire = bson_iter_as_int64(&iter);
	mongoc_server_description_destroy(sd);
	return wire;
}

/*
 * Does "client" talk to a sharded cluster's mongos: is the server that
 * writes go to one whose hello says msg "isdbgrid" (libmongoc's server
 * type "Mongos")?  Selecting it may connect.  The answer is kept in the
 * client's cache entry (a cached client is made again when its server's
 * options change); a caller of a private client keeps it itself.  The
 * consistent reads and the applier work differently through mongos
 * (sync_wait.c, applier_stream.c).
 */
bool
idx_client_is_mongos(mongoc_client_t *client, const char *servername)
{
	IdxConnEntry *entry = entry_of_client(client);
	bson_error_t error;
	mongoc_server_description_t *sd;
	bool		mongos;

	if (entry != NULL && entry->mongos >= 0)
		return entry->mongos == 1;
	sd = mongoc_client_select_server(client, true, NULL, &error);
	if (sd == NULL)
		idx_report_error(&error, servername,
						 idx_op(IDX_OP_SELECT_SERVER, NULL, NULL));
	mongos = strcmp(mongoc_server_description_type(sd), "Mongos") == 0;
	mongoc_server_description_destroy(sd);
	if (entry != NULL)
		entry->mongos = mongos ? 1 : 0;
	return mongos;
}

/*
 * The election of the primary of "client", asked of it now with a
 * "hello" (not libmongoc's description of it, which may be a heartbeat
 * old): a hash of the member that answers and its electionId, which is
 * new at each election (it holds the term).  0 if the reply has no
 * electionId (a standalone server or a mongos).  Two equal values mean
 * that no election happened in between: the same member was primary all
 * along, in one term.
 */
uint64
idx_primary_election(mongoc_client_t *client, const char *servername)
{
	bson_t		cmd = BSON_INITIALIZER;
	bson_t		reply;
	bson_iter_t iter;
	uint64		election = 0;

	BSON_APPEND_INT32(&cmd, "hello", 1);
	idx_run_command(client, servername, "admin", &cmd, &reply,
					idx_op(IDX_OP_READ_ELECTION, NULL, NULL));
	bson_destroy(&cmd);
	if (bson_iter_init_find(&iter, &reply, "electionId") &&
		BSON_ITER_HOLDS_OID(&iter))
	{
		const bson_oid_t *oid = bson_iter_oid(&iter);

		election = hash_bytes_extended(oid->bytes, sizeof(oid->bytes), 0);
		if (bson_iter_init_find(&iter, &reply, "me") &&
			BSON_ITER_HOLDS_UTF8(&iter))
		{
			const char *me = bson_iter_utf8(&iter, NULL);

			election = hash_combine64(election,
									  hash_bytes_extended((const unsigned char *) me,
														  strlen(me), 0));
		}
		if (election == 0)
			election = 1;
	}
	bson_destroy(&reply);
	return election;
}
