/*-------------------------------------------------------------------------
 *
 * stream.h
 *		  The PostgreSQL-aware stream under libmongoc: cancellable waits and
 *		  validated replies.
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/core/stream.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef IDXTABLE_STREAM_H
#define IDXTABLE_STREAM_H

#include "core/mongoc_compat.h"

/*
 * Create a single-threaded client for "uri" whose connections all go
 * through our stream.  "servername" names the foreign server in errors
 * (the URI may not ask for wire compression).  NULL if libmongoc refuses
 * the URI.  Destroy it with idx_stream_client_destroy() only.
 */
extern mongoc_client_t *idx_stream_client_new(const mongoc_uri_t *uri,
											  const char *servername);

/* Destroy a client made by idx_stream_client_new(), without network I/O
 * if its connection was broken */
extern void idx_stream_client_destroy(mongoc_client_t *client);

/* Was the client's connection broken by a cancel or a malformed reply?
 * (Every later operation fails at once: the client must be replaced.) */
extern bool idx_stream_client_broken(mongoc_client_t *client);

/*
 * After a libmongoc call failed: raise the cancel, timeout or terminate
 * that made it fail, or the protocol violation found in a reply, if any.
 * Returns only if the failure had neither cause.
 */
extern void idx_stream_raise_failure(const char *servername);

/* Forget a latched cancel or protocol error (transaction end) */
extern void idx_stream_reset_state(void);

/* Leave cursor batches' documents to the scan reading them (or stop) */
extern void idx_stream_defer_batch_check(bool on);

/* Raise a malformed document a deferred batch's reader found (08P01) */
extern void idx_stream_raise_malformed_document(mongoc_client_t *client,
												const char *servername,
												const char *host);

#endif							/* IDXTABLE_STREAM_H */
