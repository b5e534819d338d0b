/*-------------------------------------------------------------------------
 *
 * trust.c
 *		  postgres_fdw's trust rules, applied to MongoDB connection strings.
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/core/trust.c
 *
 * The backend connects as the PostgreSQL server's operating-system user,
 * from the database host.  Whatever a role can make it do there, the role
 * gains.  So, as postgres_fdw does:
 *
 * - A non-superuser authenticates with a password of its own, from its
 *   user mapping (a username and a password, and an authentication
 *   mechanism that uses them: SCRAM-SHA-256, SCRAM-SHA-1 or PLAIN).  A
 *   superuser may waive this for one mapping with password_required
 *   'false'.  MongoDB authentication is started by the client, and
 *   libmongoc authenticates every connection of a URI that carries a
 *   username, so a successful connection with a username and a password
 *   has used the password: there is no counterpart to postgres_fdw's
 *   "the server did not ask for the password" check.
 * - Only a superuser may set URI options that make the backend open a
 *   local file (tlsCAFile, tlsCertificateKeyFile and their ssl* aliases)
 *   or a Unix-domain socket (a host ending in ".sock").  The validator
 *   checks the user who sets the option; at connect time a non-superuser
 *   may use such a server only if a superuser owns it (which covers
 *   servers created before these rules and servers handed over with
 *   ALTER SERVER ... OWNER TO).
 * - Nobody may put a secret in a server's URI (every role can read
 *   pg_foreign_server.srvoptions): credentials, the client key's password,
 *   a token in authMechanismProperties.  The user mapping, which only its
 *   user, the server's owner and superusers can read, takes them.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <sys/socket.h>

#include "commands/defrem.h"
#include "miscadmin.h"
#include "utils/formatting.h"

#include "core/trust.h"

/* URI options (as libmongoc canonicalizes them) that name a local file */
static const char *const file_options[] = {
	MONGOC_URI_TLSCAFILE,
	MONGOC_URI_TLSCERTIFICATEKEYFILE,
	MONGOC_URI_SSLCERTIFICATEAUTHORITYFILE,
	MONGOC_URI_SSLCLIENTCERTIFICATEKEYFILE,
	NULL
};

/* The user mapping options handled here */
#define OPT_PASSWORD_REQUIRED	"password_required"
#define OPT_TLS_KEY_PASSWORD	"tls_certificate_key_file_password"
#define OPT_AWS_SESSION_TOKEN	"aws_session_token"

/*
 * Look up a generic option in a DefElem list.
 */
static DefElem *
find_def(List *options, const char *name)
{
	ListCell   *lc;

	foreach(lc, options)
	{
		DefElem    *def = (DefElem *) lfirst(lc);

		if (strcmp(def->defname, name) == 0)
			return def;
	}
	return NULL;
}

/*
 * Is the option "name" present with a non-empty value?
 */
static bool
has_value(List *options, const char *name)
{
	DefElem    *def = find_def(options, name);

	return def != NULL && defGetString(def)[0] != '\0';
}

/*
 * The password_required option of a user mapping's option list (default
 * true).
 */
static bool
password_required(List *options)
{
	DefElem    *def = find_def(options, OPT_PASSWORD_REQUIRED);

	return def == NULL || defGetBoolean(def);
}

/*
 * The first URI option that names a local file, or NULL.
 */
static const char *
local_file_option(const mongoc_uri_t *uri)
{
	const bson_t *options = mongoc_uri_get_options(uri);
	const char *const *name;
	bson_iter_t iter;

	for (name = file_options; *name; name++)
	{
		if (options && bson_iter_init(&iter, options) &&
			bson_iter_find_case(&iter, *name))
			return *name;
	}
	return NULL;
}

/*
 * The first host of the URI that is a Unix-domain socket, or NULL.
 */
static const char *
local_socket_host(const mongoc_uri_t *uri)
{
	const mongoc_host_list_t *host;

	for (host = mongoc_uri_get_hosts(uri); host; host = host->next)
	{
		if (host->family == AF_UNIX)
			return host->host;
	}
	return NULL;
}

/*
 * Does an authMechanismProperties key name a secret?  AWS_SESSION_TOKEN
 * is the one libmongoc 1.23 knows; any key naming a token, a secret or a
 * password is treated the same, for mechanisms to come.
 */
static bool
is_secret_property(const char *key)
{
	char	   *upper = asc_toupper(key, strlen(key));

	return strstr(upper, "TOKEN") != NULL ||
		strstr(upper, "SECRET") != NULL ||
		strstr(upper, "PASSWORD") != NULL;
}

/*
 * Refuse a secret among the URI's authMechanismProperties.
 */
static void
check_mechanism_properties(const mongoc_uri_t *uri)
{
	bson_t		props;
	bson_iter_t iter;

	if (!mongoc_uri_get_mechanism_properties(uri, &props) ||
		!bson_iter_init(&iter, &props))
		return;
	while (bson_iter_next(&iter))
	{
		if (is_secret_property(bson_iter_key(&iter)))
			ereport(ERROR,
					(errcode(ERRCODE_FDW_INVALID_ATTRIBUTE_VALUE),
					 errmsg("option \"uri\" must not contain secrets"),
					 errdetail("The URI sets authentication mechanism property \"%s\", and every role can read a server's options.",
							   bson_iter_key(&iter)),
					 errhint("Put an AWS session token in the user mapping option \"%s\".",
							 OPT_AWS_SESSION_TOKEN)));
	}
}

/*
 * Validator checks of a server's parsed URI.  The URI itself is never
 * quoted in a message.
 */
void
idx_check_server_uri(const mongoc_uri_t *uri)
{
	const bson_t *options = mongoc_uri_get_options(uri);
	bson_iter_t iter;
	const char *name;

	if (options && bson_iter_init(&iter, options) &&
		bson_iter_find_case(&iter, MONGOC_URI_TLSCERTIFICATEKEYFILEPASSWORD))
		ereport(ERROR,
				(errcode(ERRCODE_FDW_INVALID_ATTRIBUTE_VALUE),
				 errmsg("option \"uri\" must not contain secrets"),
				 errdetail("The URI sets the password of the client key, and every role can read a server's options."),
				 errhint("Put it in the user mapping option \"%s\".",
						 OPT_TLS_KEY_PASSWORD)));
	check_mechanism_properties(uri);

	if (superuser())
		return;
	if ((name = local_file_option(uri)) != NULL)
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied to set URI option \"%s\"", name),
				 errdetail("The option makes the database server read a local file."),
				 errhint("Only superusers may set URI options that name local files.")));
	if (local_socket_host(uri) != NULL)
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied to connect through a Unix-domain socket"),
				 errdetail("The URI names a local socket as a host."),
				 errhint("Only superusers may name Unix-domain sockets in option \"uri\".")));
}

/*
 * Validator checks of a user mapping's (complete) option list.  ALTER
 * USER MAPPING passes the resulting list, so a non-superuser can neither
 * drop the password nor keep a password_required 'false' a superuser set
 * (postgres_fdw behaves the same: it cannot see the old list either).
 */
void
idx_check_mapping_options(List *options)
{
	DefElem    *def;

	if ((def = find_def(options, OPT_PASSWORD_REQUIRED)) != NULL &&
		!defGetBoolean(def) && !superuser())
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("password_required=false is superuser-only"),
				 errhint("User mappings with the password_required option set to false may only be created or modified by the superuser.")));

	if (((def = find_def(options, OPT_TLS_KEY_PASSWORD)) != NULL &&
		 defGetString(def)[0] == '\0') ||
		((def = find_def(options, OPT_AWS_SESSION_TOKEN)) != NULL &&
		 defGetString(def)[0] == '\0'))
		ereport(ERROR,
				(errcode(ERRCODE_FDW_INVALID_ATTRIBUTE_VALUE),
				 errmsg("option \"%s\" must not be empty", def->defname)));

	if (!superuser() && password_required(options) &&
		!(has_value(options, "username") && has_value(options, "password")))
		ereport(ERROR,
				(errcode(ERRCODE_S_R_E_PROHIBITED_SQL_STATEMENT_ATTEMPTED),
				 errmsg("password is required"),
				 errdetail("Non-superusers must provide a username and a password in the user mapping.")));
}

/*
 * Add an AWS session token to the URI's authMechanismProperties.
 */
static void
add_session_token(mongoc_uri_t *uri, const char *token)
{
	bson_t		props;
	bson_t		merged = BSON_INITIALIZER;
	bson_iter_t iter;

	if (mongoc_uri_get_mechanism_properties(uri, &props) &&
		bson_iter_init(&iter, &props))
	{
		while (bson_iter_next(&iter))
		{
			if (pg_strcasecmp(bson_iter_key(&iter), "AWS_SESSION_TOKEN") != 0)
				bson_append_iter(&merged, bson_iter_key(&iter), -1, &iter);
		}
	}
	if (!BSON_APPEND_UTF8(&merged, "AWS_SESSION_TOKEN", token) ||
		!mongoc_uri_set_mechanism_properties(uri, &merged))
	{
		bson_destroy(&merged);
		ereport(ERROR,
				(errcode(ERRCODE_FDW_INVALID_ATTRIBUTE_VALUE),
				 errmsg("invalid value for option \"%s\"",
						OPT_AWS_SESSION_TOKEN)));
	}
	bson_destroy(&merged);
}

/*
 * Copy the secrets of a user mapping into the URI used to connect: the
 * client key's password if the URI names a client key (any TLS option
 * turns TLS on in libmongoc), the AWS session token if the mechanism is
 * MONGODB-AWS.  Elsewhere they mean nothing and are left out.
 */
void
idx_apply_mapping_secrets(mongoc_uri_t *uri, List *options)
{
	const bson_t *uriopts = mongoc_uri_get_options(uri);
	const char *mechanism = mongoc_uri_get_auth_mechanism(uri);
	bson_iter_t iter;
	DefElem    *def;

	if ((def = find_def(options, OPT_TLS_KEY_PASSWORD)) != NULL &&
		uriopts && bson_iter_init(&iter, uriopts) &&
		bson_iter_find_case(&iter, MONGOC_URI_TLSCERTIFICATEKEYFILE) &&
		!mongoc_uri_set_option_as_utf8(uri,
									   MONGOC_URI_TLSCERTIFICATEKEYFILEPASSWORD,
									   defGetString(def)))
		ereport(ERROR,
				(errcode(ERRCODE_FDW_INVALID_ATTRIBUTE_VALUE),
				 errmsg("invalid value for option \"%s\"", def->defname)));
	if ((def = find_def(options, OPT_AWS_SESSION_TOKEN)) != NULL &&
		mechanism && pg_strcasecmp(mechanism, "MONGODB-AWS") == 0)
		add_session_token(uri, defGetString(def));
}

/*
 * Does the authentication mechanism use the user mapping's password?  No
 * mechanism means libmongoc negotiates SCRAM.
 */
static bool
is_password_mechanism(const char *mechanism)
{
	return mechanism == NULL ||
		pg_strcasecmp(mechanism, "SCRAM-SHA-256") == 0 ||
		pg_strcasecmp(mechanism, "SCRAM-SHA-1") == 0 ||
		pg_strcasecmp(mechanism, "PLAIN") == 0;
}

/*
 * A non-superuser must authenticate with a password from the user
 * mapping, unless a superuser set password_required 'false' on it.
 */
static void
check_password_used(UserMapping *user, const mongoc_uri_t *uri)
{
	const char *mechanism = mongoc_uri_get_auth_mechanism(uri);

	if (!password_required(user->options))
		return;
	if (!has_value(user->options, "username") ||
		!has_value(user->options, "password"))
		ereport(ERROR,
				(errcode(ERRCODE_S_R_E_PROHIBITED_SQL_STATEMENT_ATTEMPTED),
				 errmsg("password is required"),
				 errdetail("Non-superusers must provide a username and a password in the user mapping.")));
	if (!is_password_mechanism(mechanism))
		ereport(ERROR,
				(errcode(ERRCODE_S_R_E_PROHIBITED_SQL_STATEMENT_ATTEMPTED),
				 errmsg("password is required"),
				 errdetail("Non-superusers must authenticate with a password, and authentication mechanism \"%s\" does not use one.",
						   mechanism),
				 errhint("Use SCRAM-SHA-256, SCRAM-SHA-1 or PLAIN, or have a superuser set password_required=false in the user mapping attributes.")));
}

/*
 * A non-superuser may use a server whose URI names local files or
 * sockets only if a superuser owns the server.
 */
static void
check_local_resources(ForeignServer *server, const mongoc_uri_t *uri)
{
	if (superuser_arg(server->owner))
		return;
	if (local_file_option(uri) != NULL || local_socket_host(uri) != NULL)
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied to use server \"%s\"",
						server->servername),
				 errdetail("Its URI names a local file or socket, and it is not owned by a superuser."),
				 errhint("Only a server owned by a superuser may read local files or sockets for a non-superuser.")));
}

/*
 * Connect-time checks for the user the connection is made for (the view
 * owner, for a table read through a view).
 */
void
idx_check_connect_trust(ForeignServer *server, UserMapping *user,
						const mongoc_uri_t *uri)
{
	if (superuser_arg(user->userid))
		return;
	check_local_resources(server, uri);
	check_password_used(user, uri);
}
