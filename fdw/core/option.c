/*-------------------------------------------------------------------------
 *
 * option.c
 *		  Validation and lookup of idxtable_fdw options.
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/core/option.c
 *
 * Options are accepted on the server (uri, database, timeouts, fetch_size,
 * fetch_batch_size, batch_size, consistency, change_streams,
 * use_remote_estimate), on user mappings (username,
 * password, auth_source, password_required, and the secrets
 * tls_certificate_key_file_password and aws_session_token), on foreign
 * tables (database, collection, fetch_size, fetch_batch_size, batch_size,
 * consistency, shard_key, use_remote_estimate) and on columns (field).  Credentials and other secrets
 * belong in the user mapping only: a server URI that carries them is
 * refused, so that they never show up in pg_foreign_server or in messages.
 * Who may set what is in trust.c.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/reloptions.h"
#include "access/table.h"
#include "catalog/pg_foreign_server.h"
#include "catalog/pg_foreign_table.h"
#include "catalog/pg_user_mapping.h"
#include "catalog/pg_attribute.h"
#include "commands/defrem.h"
#include "common/hashfn.h"
#include "fmgr.h"
#include "lib/stringinfo.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"

#include "core/document.h"
#include "core/handle.h"
#include "core/mongo_limits.h"
#include "core/mongoc_compat.h"
#include "core/option.h"
#include "core/shard_key.h"
#include "core/trust.h"

/* Default number of documents per cursor batch */
#define IDX_DEFAULT_FETCH_SIZE 1000
/* Default number of facts fetched by _id per round trip after an index lookup */
#define IDX_DEFAULT_FETCH_BATCH_SIZE 500
/* Default number of rows per batched INSERT (one bulk write per collection) */
#define IDX_DEFAULT_BATCH_SIZE 100

/*
 * Describes a valid option: its name and the catalog it may appear in.
 */
typedef struct IdxOption
{
	const char *name;
	Oid			context;		/* catalog OID the option may appear in */
} IdxOption;

static const IdxOption valid_options[] = {
	{"uri", ForeignServerRelationId},
	{"database", ForeignServerRelationId},
	{"fetch_size", ForeignServerRelationId},
	{"fetch_batch_size", ForeignServerRelationId},
	{"batch_size", ForeignServerRelationId},
	{"consistency", ForeignServerRelationId},
	{"connect_timeout_ms", ForeignServerRelationId},
	{"socket_timeout_ms", ForeignServerRelationId},
	{"server_selection_timeout_ms", ForeignServerRelationId},
	{"change_streams", ForeignServerRelationId},
	{"use_remote_estimate", ForeignServerRelationId},
	{"username", UserMappingRelationId},
	{"password", UserMappingRelationId},
	{"auth_source", UserMappingRelationId},
	{"password_required", UserMappingRelationId},
	{"tls_certificate_key_file_password", UserMappingRelationId},
	{"aws_session_token", UserMappingRelationId},
	{"database", ForeignTableRelationId},
	{"collection", ForeignTableRelationId},
	{"fetch_size", ForeignTableRelationId},
	{"fetch_batch_size", ForeignTableRelationId},
	{"batch_size", ForeignTableRelationId},
	{"consistency", ForeignTableRelationId},
	{"shard_key", ForeignTableRelationId},
	{"use_remote_estimate", ForeignTableRelationId},
	{"field", AttributeRelationId},
	{NULL, InvalidOid}
};

PG_FUNCTION_INFO_V1(idxtable_fdw_validator);

/*
 * Is "name" a valid option for the catalog "context"?
 */
static bool
is_valid_option(const char *name, Oid context)
{
	const IdxOption *opt;

	for (opt = valid_options; opt->name; opt++)
	{
		if (opt->context == context && strcmp(opt->name, name) == 0)
			return true;
	}
	return false;
}

/*
 * Raise the "invalid option" error with a hint listing the options valid
 * in this context, as postgres_fdw does.
 */
static void
report_invalid_option(const char *name, Oid context)
{
	const IdxOption *opt;
	StringInfoData buf;

	initStringInfo(&buf);
	for (opt = valid_options; opt->name; opt++)
	{
		if (opt->context == context)
			appendStringInfo(&buf, "%s%s", buf.len > 0 ? ", " : "", opt->name);
	}

	ereport(ERROR,
			(errcode(ERRCODE_FDW_INVALID_OPTION_NAME),
			 errmsg("invalid option \"%s\"", name),
			 buf.len > 0
			 ? errhint("Valid options in this context are: %s", buf.data)
			 : errhint("There are no valid options in this context.")));
}

/*
 * Parse a strictly positive integer option, erroring with the option name.
 */
static int
parse_positive_int(const char *name, const char *value, int maxval)
{
	char	   *end;
	long		val;

	errno = 0;
	val = strtol(value, &end, 10);
	if (errno != 0 || end == value || *end != '\0' || val <= 0 || val > maxval)
		ereport(ERROR,
				(errcode(ERRCODE_FDW_INVALID_ATTRIBUTE_VALUE),
				 errmsg("invalid value for option \"%s\": \"%s\"", name, value),
				 errhint("The value must be an integer between 1 and %d.",
						 maxval)));
	return (int) val;
}

/*
 * Parse the "consistency" option: the name of a mode other than the
 * default (idx_consistency_name).
 */
static IdxConsistency
parse_consistency(const char *value)
{
	static const IdxConsistency modes[] = {
		IDX_CONSISTENCY_TRANSACTION,
		IDX_CONSISTENCY_ORDERED,
		IDX_CONSISTENCY_EVENTUAL
	};
	int			i;

	for (i = 0; i < lengthof(modes); i++)
	{
		if (strcmp(value, idx_consistency_name(modes[i])) == 0)
			return modes[i];
	}
	ereport(ERROR,
			(errcode(ERRCODE_FDW_INVALID_ATTRIBUTE_VALUE),
			 errmsg("invalid value for option \"consistency\": \"%s\"", value),
			 errhint("Valid values are \"%s\", \"%s\" and \"%s\".",
					 idx_consistency_name(modes[0]),
					 idx_consistency_name(modes[1]),
					 idx_consistency_name(modes[2]))));
	return IDX_CONSISTENCY_DEFAULT;	/* keep compiler quiet */
}

/*
 * Parse a Boolean option ("on", "off", "true", ...) named "name".
 */
static bool
parse_bool_option(const char *name, const char *value)
{
	bool		result;

	if (!parse_bool(value, &result))
		ereport(ERROR,
				(errcode(ERRCODE_FDW_INVALID_ATTRIBUTE_VALUE),
				 errmsg("invalid value for option \"%s\": \"%s\"",
						name, value),
				 errhint("Valid values are \"on\" and \"off\".")));
	return result;
}

/*
 * Parse the server option "change_streams": a Boolean ("on", "off", ...).
 */
static bool
parse_change_streams(const char *value)
{
	return parse_bool_option("change_streams", value);
}

/*
 * Check a server "uri": it must parse as a MongoDB URI, must not carry
 * credentials or other secrets, must not ask for wire compression
 * (libmongoc 1.23 decompresses any compressed reply without checks, so
 * the stream refuses them; stream.c checks again when it connects, for
 * servers defined before this rule), and may name local files or sockets
 * only when a superuser sets it (see trust.c).  The URI itself is never
 * repeated in a message, since a rejected one may well contain a password.
 */
static void
validate_uri(const char *value)
{
	bson_error_t error;
	mongoc_uri_t *uri;
	IdxHandle  *owned;
	bool		has_credentials;
	const bson_t *compressors;

	uri = mongoc_uri_new_with_error(value, &error);
	if (uri == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_FDW_INVALID_ATTRIBUTE_VALUE),
				 errmsg("invalid value for option \"uri\""),
				 errdetail("The value is not a valid MongoDB connection string.")));
	owned = idx_own_uri(uri);

	has_credentials = mongoc_uri_get_username(uri) != NULL ||
		mongoc_uri_get_password(uri) != NULL;
	compressors = mongoc_uri_get_compressors(uri);

	if (has_credentials)
		ereport(ERROR,
				(errcode(ERRCODE_FDW_INVALID_ATTRIBUTE_VALUE),
				 errmsg("option \"uri\" must not contain credentials"),
				 errhint("Put \"username\" and \"password\" in a user mapping.")));
	if (compressors != NULL && !bson_empty(compressors))
		ereport(ERROR,
				(errcode(ERRCODE_FDW_INVALID_ATTRIBUTE_VALUE),
				 errmsg("option \"uri\" must not ask for wire compression"),
				 errdetail("idxtable_fdw does not accept compressed replies."),
				 errhint("Remove \"compressors\" from the uri.")));
	idx_check_server_uri(uri);
	idx_release(owned);
}

/*
 * Check a dotted field path: non-empty components, no "$" at the start of
 * a component (MongoDB operators), no NUL.
 */
static void
validate_field(const char *value)
{
	const char *p = value;
	bool		at_start = true;

	if (*p == '\0')
		goto bad;
	for (; *p; p++)
	{
		if (*p == '.')
		{
			if (at_start)
				goto bad;
			at_start = true;
			continue;
		}
		if (at_start && *p == '$')
			goto bad;
		at_start = false;
	}
	if (!at_start)
		return;
bad:
	ereport(ERROR,
			(errcode(ERRCODE_FDW_INVALID_ATTRIBUTE_VALUE),
			 errmsg("invalid value for option \"field\": \"%s\"", value),
			 errhint("A field is a dot-separated path of non-empty names that do not start with \"$\".")));
}

/*
 * Check a collection or database name as MongoDB restricts them.
 */
static void
validate_namespace_part(const char *name, const char *value)
{
	if (*value == '\0' || strchr(value, '$') != NULL ||
		(strcmp(name, "database") == 0 && strpbrk(value, "/\\. \"") != NULL))
		ereport(ERROR,
				(errcode(ERRCODE_FDW_INVALID_ATTRIBUTE_VALUE),
				 errmsg("invalid value for option \"%s\": \"%s\"", name, value)));
}

/*
 * Validate the generic options given to a FOREIGN DATA WRAPPER, SERVER,
 * USER MAPPING or FOREIGN TABLE (and its columns) that uses idxtable_fdw.
 */
Datum
idxtable_fdw_validator(PG_FUNCTION_ARGS)
{
	List	   *options = untransformRelOptions(PG_GETARG_DATUM(0));
	Oid			catalog = PG_GETARG_OID(1);
	ListCell   *cell;
	bool		have_uri = false;

	foreach(cell, options)
	{
		DefElem    *def = (DefElem *) lfirst(cell);
		char	   *value = defGetString(def);

		if (!is_valid_option(def->defname, catalog))
			report_invalid_option(def->defname, catalog);

		if (strcmp(def->defname, "uri") == 0)
		{
			validate_uri(value);
			have_uri = true;
		}
		else if (strcmp(def->defname, "fetch_size") == 0 ||
				 strcmp(def->defname, "fetch_batch_size") == 0 ||
				 strcmp(def->defname, "batch_size") == 0)
			(void) parse_positive_int(def->defname, value, 100000);
		else if (strcmp(def->defname, "connect_timeout_ms") == 0 ||
				 strcmp(def->defname, "socket_timeout_ms") == 0 ||
				 strcmp(def->defname, "server_selection_timeout_ms") == 0)
			(void) parse_positive_int(def->defname, value, INT_MAX);
		else if (strcmp(def->defname, "consistency") == 0)
			(void) parse_consistency(value);
		else if (strcmp(def->defname, "change_streams") == 0)
			(void) parse_change_streams(value);
		else if (strcmp(def->defname, "use_remote_estimate") == 0)
			(void) parse_bool_option(def->defname, value);
		else if (strcmp(def->defname, "field") == 0)
			validate_field(value);
		else if (strcmp(def->defname, "shard_key") == 0)
			idx_shard_key_validate(value);
		else if (strcmp(def->defname, "database") == 0 ||
				 strcmp(def->defname, "collection") == 0)
			validate_namespace_part(def->defname, value);
		else if ((strcmp(def->defname, "username") == 0 ||
				  strcmp(def->defname, "auth_source") == 0) && *value == '\0')
			ereport(ERROR,
					(errcode(ERRCODE_FDW_INVALID_ATTRIBUTE_VALUE),
					 errmsg("option \"%s\" must not be empty", def->defname)));
	}

	/*
	 * A server needs a URI.  The validator also sees ALTER SERVER's partial
	 * lists, but those go through with the full resulting option list, so
	 * the check is sound.
	 */
	if (catalog == UserMappingRelationId)
		idx_check_mapping_options(options);
	if (catalog == ForeignServerRelationId && !have_uri)
		ereport(ERROR,
				(errcode(ERRCODE_FDW_OPTION_NAME_NOT_FOUND),
				 errmsg("option \"uri\" is required for an idxtable_fdw server")));

	PG_RETURN_VOID();
}

/*
 * Find the value of option "name" in a DefElem list, or NULL.
 */
char *
idx_find_option(List *options, const char *name)
{
	ListCell   *cell;

	foreach(cell, options)
	{
		DefElem    *def = (DefElem *) lfirst(cell);

		if (strcmp(def->defname, name) == 0)
			return defGetString(def);
	}
	return NULL;
}

/*
 * The server's default database: its "database" option, else the database
 * named in its URI, else "test" (MongoDB's own default).
 */
char *
idx_server_database(ForeignServer *server)
{
	char	   *db = idx_find_option(server->options, "database");
	char	   *uristr;

	if (db)
		return db;

	uristr = idx_find_option(server->options, "uri");
	if (uristr)
	{
		mongoc_uri_t *uri = mongoc_uri_new_with_error(uristr, NULL);

		if (uri)
		{
			const char *uridb = mongoc_uri_get_database(uri);

			if (uridb && *uridb)
				db = pstrdup(uridb);
			mongoc_uri_destroy(uri);
		}
	}
	return db ? db : pstrdup("test");
}

/*
 * The server's cursor batch size.
 */
int
idx_server_fetch_size(ForeignServer *server)
{
	char	   *val = idx_find_option(server->options, "fetch_size");

	return val ? parse_positive_int("fetch_size", val, 100000)
		: IDX_DEFAULT_FETCH_SIZE;
}

/*
 * Does the server have change streams an applier may follow?  Its option
 * "change_streams" ('on' by default); 'off' for a standalone mongod, a
 * user without the changeStream privilege or a service without them: its
 * index tables are then maintained only by writes through PostgreSQL.
 */
bool
idx_server_change_streams(ForeignServer *server)
{
	char	   *val = idx_find_option(server->options, "change_streams");

	return val ? parse_change_streams(val) : true;
}

/*
 * The same from a pg_foreign_server.srvoptions value ((Datum) 0 if NULL),
 * for the sync workers, which read it through SPI: a woken worker's
 * syscache may not have the ALTER SERVER yet, since the commit callback
 * that wakes it runs before the commit's invalidations are sent.
 */
bool
idx_srvoptions_change_streams(Datum srvoptions)
{
	char	   *val = idx_find_option(untransformRelOptions(srvoptions),
								  "change_streams");

	return val ? parse_change_streams(val) : true;
}

/*
 * The field path of a column: its "field" option, else its name, which
 * must then be a valid field path (a column "$where" must not become an
 * operator).
 */
char *
idx_column_field(Oid relid, AttrNumber attnum)
{
	List	   *options = GetForeignColumnOptions(relid, attnum);
	char	   *field = idx_find_option(options, "field");

	if (field == NULL)
	{
		field = get_attname(relid, attnum, false);
		idx_check_column_name_path(relid, field);
	}
	return field;
}

/*
 * mongod refuses a namespace "<database>.<collection>" over 255 bytes
 * (InvalidNamespace); say so before any command is sent.
 */
static void
check_namespace(const IdxTableInfo *info)
{
	int			nslen = (int) (strlen(info->database) + 1 +
							   strlen(info->collection));

	if (nslen > IDX_MAX_NAMESPACE_BYTES)
		ereport(ERROR,
				(errcode(ERRCODE_NAME_TOO_LONG),
				 errmsg("the MongoDB namespace of foreign table \"%s\" is too long (%d bytes)",
						info->relname, nslen),
				 errdetail("Database \"%s\" and collection \"%s\" make \"<database>.<collection>\" longer than the %d bytes MongoDB allows.",
						   info->database, info->collection,
						   IDX_MAX_NAMESPACE_BYTES),
				 errhint("Choose a shorter collection or database name.")));
}

/*
 * Where a foreign table's documents are: its "database" option, else the
 * server's, and its "collection" option, else the table's name.  Only the
 * options are read (not the columns), so this works for a table whose
 * columns no longer map, and costs two syscache lookups.
 */
void
idx_table_namespace(Oid relid, char **database, char **collection)
{
	ForeignTable *table = GetForeignTable(relid);
	char	   *val;

	val = idx_find_option(table->options, "database");
	*database = val ? val :
		idx_server_database(GetForeignServer(table->serverid));
	if (collection == NULL)
		return;
	val = idx_find_option(table->options, "collection");
	*collection = val ? val : get_rel_name(relid);
}

/*
 * Build the IdxTableInfo of a foreign table: namespace, per-column field
 * paths and the _id column.  Two columns mapping to the same field, or a
 * column mapped into _id's subfields while _id is also mapped, are allowed
 * (reads only); only the column that maps exactly to "_id" is the key.
 */
IdxTableInfo *
idx_get_table_info(Oid relid)
{
	ForeignTable *table = GetForeignTable(relid);
	ForeignServer *server = GetForeignServer(table->serverid);
	IdxTableInfo *info = palloc0(sizeof(IdxTableInfo));
	Relation	rel;
	TupleDesc	tupdesc;
	char	   *val;
	int			i;

	info->relid = relid;
	info->relname = get_rel_name(relid);
	info->serverid = server->serverid;

	idx_table_namespace(relid, &info->database, &info->collection);
	check_namespace(info);
	val = idx_find_option(table->options, "fetch_size");
	info->fetch_size = val ? parse_positive_int("fetch_size", val, 100000)
		: idx_server_fetch_size(server);
	val = idx_find_option(table->options, "fetch_batch_size");
	if (val == NULL)
		val = idx_find_option(server->options, "fetch_batch_size");
	info->fetch_batch_size = val
		? parse_positive_int("fetch_batch_size", val, 100000)
		: IDX_DEFAULT_FETCH_BATCH_SIZE;
	val = idx_find_option(table->options, "batch_size");
	if (val == NULL)
		val = idx_find_option(server->options, "batch_size");
	info->batch_size = val ? parse_positive_int("batch_size", val, 100000)
		: IDX_DEFAULT_BATCH_SIZE;
	val = idx_find_option(table->options, "consistency");
	if (val == NULL)
		val = idx_find_option(server->options, "consistency");
	info->consistency = val ? parse_consistency(val) : IDX_CONSISTENCY_DEFAULT;
	val = idx_find_option(table->options, "use_remote_estimate");
	if (val == NULL)
		val = idx_find_option(server->options, "use_remote_estimate");
	info->use_remote_estimate = val ?
		parse_bool_option("use_remote_estimate", val) : true;

	rel = table_open(relid, AccessShareLock);
	tupdesc = RelationGetDescr(rel);
	info->natts = tupdesc->natts;
	info->fields = palloc0(sizeof(char *) * Max(info->natts, 1));
	for (i = 0; i < tupdesc->natts; i++)
	{
		Form_pg_attribute attr = TupleDescAttr(tupdesc, i);

		if (attr->attisdropped)
			continue;
		info->fields[i] = idx_column_field(relid, attr->attnum);
		if (info->id_attnum == InvalidAttrNumber &&
			strcmp(info->fields[i], IDX_ID_FIELD) == 0)
			info->id_attnum = attr->attnum;
	}
	val = idx_find_option(table->options, "shard_key");
	if (val != NULL)
		idx_shard_key_resolve(info, val, tupdesc);
	table_close(rel, AccessShareLock);

	return info;
}

/*
 * Options "options" (DefElem *) as one string that differs for every
 * different list: each name and value preceded by its length.  For
 * telling whether the options a connection was made from changed.
 */
char *
idx_options_identity(List *options)
{
	StringInfoData buf;
	ListCell   *lc;

	initStringInfo(&buf);
	foreach(lc, options)
	{
		DefElem    *def = lfirst(lc);
		char	   *value = defGetString(def);

		appendStringInfo(&buf, "%zu:%s%zu:%s", strlen(def->defname),
						 def->defname, strlen(value), value);
	}
	return buf.data;
}

/*
 * What the URI "uri" connects to, as a string: its hosts as written and
 * its replica set, not its read preference, timeouts or other options
 * (the URI itself if it does not parse).
 */
static char *
uri_target(const char *uri)
{
	bson_error_t error;
	mongoc_uri_t *parsed = mongoc_uri_new_with_error(uri, &error);
	const mongoc_host_list_t *host;
	StringInfoData buf;

	if (parsed == NULL)
		return pstrdup(uri);
	initStringInfo(&buf);
	for (host = mongoc_uri_get_hosts(parsed); host != NULL; host = host->next)
		appendStringInfo(&buf, "%s,", host->host_and_port);
	appendStringInfo(&buf, "/%s", mongoc_uri_get_replica_set(parsed) ?
					 mongoc_uri_get_replica_set(parsed) : "");
	mongoc_uri_destroy(parsed);
	return buf.data;
}

/*
 * A hash of what "server" connects to: the hosts and replica set of its
 * uri, and its database.  The change-stream applier notes the one it
 * connected with in the status of its index tables and in its stored
 * positions; a backend that waits for an index table compares it with its
 * own (sync_wait.c), a restarted applier with the stored position's
 * (cluster times and resume tokens of one server mean nothing on
 * another).  A new read preference or timeout is not another server.
 */
uint32
idx_server_target_hash(ForeignServer *server)
{
	const char *uri = idx_find_option(server->options, "uri");
	const char *database = idx_find_option(server->options, "database");
	char	   *hosts = uri_target(uri ? uri : "");
	char	   *target = psprintf("%zu:%s%zu:%s", strlen(hosts), hosts,
								  database ? strlen(database) : 0,
								  database ? database : "");
	uint32		hash = hash_bytes((const unsigned char *) target,
								  strlen(target));

	pfree(hosts);
	pfree(target);
	return hash;
}
