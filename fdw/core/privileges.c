/*-------------------------------------------------------------------------
 *
 * privileges.c
 *		  What the MongoDB user of a connection may do (see privileges.h).
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/core/privileges.c
 *
 * connectionStatus with showPrivileges lists the privileges of the
 * authenticated user, its roles' and their inherited roles' merged: a
 * resource and its actions each.  A resource is {db, collection},
 * {cluster: true} or {anyResource: true}; "" in db or collection stands
 * for every database or every collection.  An action on a collection is
 * granted by a privilege on that exact collection, on its database
 * ({db: D, collection: ""}), on the collection name in every database
 * ({db: "", collection: C}), on every normal resource ({db: "",
 * collection: ""}) or on anyResource; an action on a database resource by
 * the last three of these with db "" or D; a system.* collection only by
 * its exact namespace, its name in every database or anyResource.  That
 * is the search list mongod's AuthorizationSessionImpl builds for a
 * resource (authorization_session_impl.cpp).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "lib/stringinfo.h"
#include "miscadmin.h"

#include "core/privileges.h"

struct IdxPrivileges
{
	bson_t		list;			/* authenticatedUserPrivileges (an array),
								 * over "data" */
	uint8_t    *data;			/* palloc'd */
};

/*
 * Ask the server (see privileges.h).  A failed command, a reply without
 * the list or a connection without an authenticated user (a server without
 * access control: every action is allowed) gives NULL.
 */
IdxPrivileges *
idx_privileges_fetch(mongoc_client_t *client)
{
	bson_t	   *command = BCON_NEW("connectionStatus", BCON_INT32(1),
								   "showPrivileges", BCON_BOOL(true));
	bson_t		reply;
	bson_error_t error;
	bson_iter_t iter;
	bson_iter_t users;
	IdxPrivileges *result = NULL;
	bool		ok;

	ok = mongoc_client_command_simple(client, "admin", command, NULL, &reply,
									  &error);
	bson_destroy(command);
	CHECK_FOR_INTERRUPTS();
	if (ok &&
		bson_iter_init(&iter, &reply) &&
		bson_iter_find_descendant(&iter, "authInfo.authenticatedUsers",
								  &users) &&
		BSON_ITER_HOLDS_ARRAY(&users) &&
		bson_iter_init(&iter, &reply) &&
		bson_iter_find_descendant(&iter,
								  "authInfo.authenticatedUserPrivileges",
								  &iter) &&
		BSON_ITER_HOLDS_ARRAY(&iter))
	{
		const uint8_t *data;
		uint32_t	len;
		bson_t		empty;
		bson_iter_t first;

		/* no authenticated user: no access control */
		bson_iter_array(&users, &len, &data);
		if (bson_init_static(&empty, data, len) &&
			bson_iter_init(&first, &empty) && bson_iter_next(&first))
		{
			bson_iter_array(&iter, &len, &data);
			result = palloc0(sizeof(IdxPrivileges));
			result->data = palloc(len);
			memcpy(result->data, data, len);
			if (!bson_init_static(&result->list, result->data, len))
				result = NULL;
		}
	}
	bson_destroy(&reply);
	return result;
}

/*
 * A string field of a resource document, or NULL if absent.
 */
static const char *
resource_field(const bson_t *resource, const char *key)
{
	bson_iter_t iter;

	if (bson_iter_init_find(&iter, resource, key) &&
		BSON_ITER_HOLDS_UTF8(&iter))
		return bson_iter_utf8(&iter, NULL);
	return NULL;
}

/*
 * Does a privilege on "resource" cover collection "collection" of
 * "database" ("" : the database resource; a NULL database: the cluster
 * resource, {cluster: true}, which only itself and anyResource cover)?
 * See the header comment.
 */
static bool
resource_covers(const bson_t *resource, const char *database,
				const char *collection)
{
	bson_iter_t iter;
	const char *db;
	const char *coll;

	if (bson_iter_init_find(&iter, resource, "anyResource") &&
		bson_iter_as_bool(&iter))
		return true;
	if (database == NULL)		/* the cluster resource */
		return bson_iter_init_find(&iter, resource, "cluster") &&
			bson_iter_as_bool(&iter);
	db = resource_field(resource, "db");
	coll = resource_field(resource, "collection");
	if (db == NULL || coll == NULL)
		return false;			/* the cluster, or a kind we do not know */
	if (*db != '\0' && strcmp(db, database) != 0)
		return false;
	if (*collection == '\0')
		return *coll == '\0';
	if (strncmp(collection, "system.", 7) == 0)
		return strcmp(coll, collection) == 0;
	return *coll == '\0' || strcmp(coll, collection) == 0;
}

/*
 * Does the privilege document "privilege" ({resource, actions}) grant
 * "action" on the collection (or database)?
 */
static bool
privilege_grants(const bson_t *privilege, const char *database,
				 const char *collection, const char *action)
{
	bson_iter_t iter;
	bson_iter_t actions;
	const uint8_t *data;
	uint32_t	len;
	bson_t		resource;

	if (!bson_iter_init_find(&iter, privilege, "resource") ||
		!BSON_ITER_HOLDS_DOCUMENT(&iter))
		return false;
	bson_iter_document(&iter, &len, &data);
	if (!bson_init_static(&resource, data, len) ||
		!resource_covers(&resource, database, collection))
		return false;
	if (!bson_iter_init_find(&iter, privilege, "actions") ||
		!BSON_ITER_HOLDS_ARRAY(&iter) || !bson_iter_recurse(&iter, &actions))
		return false;
	while (bson_iter_next(&actions))
	{
		if (BSON_ITER_HOLDS_UTF8(&actions) &&
			(strcmp(bson_iter_utf8(&actions, NULL), action) == 0 ||
			 strcmp(bson_iter_utf8(&actions, NULL), "anyAction") == 0))
			return true;
	}
	return false;
}

/*
 * May the user do "action" on the collection (or database)?
 */
static bool
may_do(const IdxPrivileges *privileges, const char *database,
	   const char *collection, const char *action)
{
	bson_iter_t list;

	if (!bson_iter_init(&list, &privileges->list))
		return false;
	while (bson_iter_next(&list))
	{
		const uint8_t *data;
		uint32_t	len;
		bson_t		privilege;

		if (!BSON_ITER_HOLDS_DOCUMENT(&list))
			continue;
		bson_iter_document(&list, &len, &data);
		if (bson_init_static(&privilege, data, len) &&
			privilege_grants(&privilege, database, collection, action))
			return true;
	}
	return false;
}

/*
 * The actions the user may not do (see privileges.h).
 */
char *
idx_privileges_missing(const IdxPrivileges *privileges, const char *database,
					   const char *collection, const char *const *actions)
{
	StringInfoData missing;

	initStringInfo(&missing);
	for (; *actions != NULL; actions++)
	{
		if (may_do(privileges, database, collection, *actions))
			continue;
		appendStringInfo(&missing, "%s%s", missing.len > 0 ? ", " : "",
						 *actions);
	}
	if (missing.len == 0)
	{
		pfree(missing.data);
		return NULL;
	}
	return missing.data;
}
