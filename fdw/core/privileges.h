/*-------------------------------------------------------------------------
 *
 * privileges.h
 *		  What the MongoDB user of a connection may do, as the server's
 *		  connectionStatus (showPrivileges) lists it.
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/core/privileges.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef IDXTABLE_PRIVILEGES_H
#define IDXTABLE_PRIVILEGES_H

#include "core/mongoc_compat.h"

/* The privileges of a connection's user (palloc'd) */
typedef struct IdxPrivileges IdxPrivileges;

/*
 * Ask the server; NULL when it cannot tell (a server without
 * connectionStatus, or without authentication, where nothing is refused).
 */
extern IdxPrivileges *idx_privileges_fetch(mongoc_client_t *client);

/*
 * The actions of "actions" (NULL-terminated) the user may not do on
 * collection "collection" of "database" ("" names the database resource,
 * {db: database, collection: ""}; a NULL database the cluster resource,
 * {cluster: true}): NULL when it may do them all, else a palloc'd list
 * "a, b".
 */
extern char *idx_privileges_missing(const IdxPrivileges *privileges,
									const char *database,
									const char *collection,
									const char *const *actions);

#endif							/* IDXTABLE_PRIVILEGES_H */
