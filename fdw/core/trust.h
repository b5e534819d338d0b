/*-------------------------------------------------------------------------
 *
 * trust.h
 *		  Who may set which connection options, and who may connect how:
 *		  postgres_fdw's trust rules, applied to MongoDB URIs.
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/core/trust.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef IDXTABLE_TRUST_H
#define IDXTABLE_TRUST_H

#include "core/mongoc_compat.h"

#include "foreign/foreign.h"
#include "nodes/pg_list.h"

/*
 * Validator checks of a server's parsed "uri": no secrets (for anyone),
 * no local files or sockets unless the current user is a superuser.
 */
extern void idx_check_server_uri(const mongoc_uri_t *uri);

/*
 * Validator checks of a user mapping's option list: password_required
 * 'false' only by a superuser; a non-superuser must give a username and a
 * password unless password_required is false.
 */
extern void idx_check_mapping_options(List *options);

/* Copy the secrets of a user mapping into the URI used to connect */
extern void idx_apply_mapping_secrets(mongoc_uri_t *uri, List *options);

/*
 * Connect-time checks, on the complete URI built for (server, user): a
 * non-superuser authenticates with a password (unless a superuser set
 * password_required 'false'), and uses local files or sockets only on a
 * server owned by a superuser.
 */
extern void idx_check_connect_trust(ForeignServer *server, UserMapping *user,
									const mongoc_uri_t *uri);

#endif							/* IDXTABLE_TRUST_H */
