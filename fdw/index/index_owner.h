/*-------------------------------------------------------------------------
 *
 * index_owner.h
 *		  Names and ownership markers of index collections (index_owner.c).
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/index/index_owner.h
 *
 * An index collection is named idxtable.<fact collection>.<index name>
 * (with a suffix if a renamed index has that one), and index names contain
 * no "." or "$", so the name says unambiguously which fact collection and
 * index it was made for; index_defs.collection keeps it through renames.
 * Who owns it is recorded in
 * the registry collection "idxtable.owners" of the same MongoDB database:
 * one document per index collection, whose _id is the collection's name
 * and which names the fact collection, the index, the PostgreSQL cluster
 * (system identifier), the database (OID and name) and the definition
 * (index_defs.definition_id, a UUID made by create_index).
 *
 *-------------------------------------------------------------------------
 */
#ifndef IDXTABLE_INDEX_OWNER_H
#define IDXTABLE_INDEX_OWNER_H

#include "core/mongoc_compat.h"

#include "nodes/pg_list.h"

/* The registry of owners; IMPORT FOREIGN SCHEMA skips it ("idxtable.") */
#define IDX_OWNER_REGISTRY		"idxtable.owners"

/* What create_index found when it claimed an index collection */
typedef enum IdxClaim
{
	IDX_CLAIM_NEW,				/* there was no marker */
	IDX_CLAIM_LEFTOVER,			/* this database's, of a definition that is
								 * gone (an aborted build keeps its marker):
								 * its collection may be dropped, whatever
								 * it holds */
	IDX_CLAIM_ORPHAN			/* a marker whose collection did not exist */
} IdxClaim;

/* Refuse an index name that cannot be part of a collection name (42602) */
extern void idx_check_index_name(const char *name);

/* Replace the characters idx_check_index_name() refuses, in place */
extern void idx_sanitize_index_name(char *name);

/* A new definition identifier (a random UUID, as text) */
extern char *idx_new_definition_id(void);

/*
 * create_index: claim "collection" for a definition, or raise an ERROR
 * naming the owner when it belongs to another.
 */
extern IdxClaim idx_owner_claim(mongoc_client_t *client,
								const char *servername, const char *database,
								const char *collection, const char *fact,
								const char *index, const char *definition_id);

/*
 * create_index: "collection" existed though the claim found no marker (or
 * an orphan one), or came back after a leftover was dropped.  Returns if
 * it may be dropped (claim still ours, and empty unless a leftover), else
 * raises an ERROR.
 */
extern void idx_owner_check_unmarked(mongoc_client_t *client,
									 const char *servername,
									 const char *database,
									 const char *collection,
									 const char *definition_id,
									 IdxClaim claim);

/*
 * create_index: the definition has created "collection" (recorded in its
 * marker, so that an aborted build's collection stays this database's).
 */
extern void idx_owner_mark_created(mongoc_client_t *client,
								   const char *servername,
								   const char *database,
								   const char *collection,
								   const char *definition_id);

/*
 * drop_index: is the marker of "collection" this definition's?  If not, a
 * WARNING says that the collection stays, and false is returned.
 */
extern bool idx_owner_check_drop(mongoc_client_t *client,
								 const char *servername, const char *database,
								 const char *collection, const char *index,
								 const char *definition_id);

/*
 * Delete the marker of "collection" if it is still this definition's;
 * true if it was deleted.  Errors are returned in *error, never raised
 * (abort callbacks use it too).
 */
extern bool idx_owner_release(mongoc_client_t *client, const char *database,
							  const char *collection,
							  const char *definition_id, bson_error_t *error);

/*
 * ALTER INDEX ... RENAME, after the commit: the marker of "collection", if
 * still the definition's, names the index "index".  False, with *error, if
 * the update failed; errors are never raised.
 */
extern bool idx_owner_rename(mongoc_client_t *client, const char *database,
							 const char *collection,
							 const char *definition_id, const char *index,
							 bson_error_t *error);

/*
 * Reads: mark the definitions (IdxIndexDef) of a table whose collection
 * is not theirs as failed, with a WARNING once per backend.  Each index
 * is checked once per backend, connecting as "userid" (InvalidOid: the
 * current user) if a marker has to be read.  Returns false if some
 * definition is left unjudged because reads are deferred (below).
 */
extern bool idx_owner_check_indexes(Oid relid, Oid userid, List *defs);

/*
 * While true, idx_owner_check_indexes reads no marker: planning, which
 * asks MongoDB nothing but a never-analyzed table's size, sees only the
 * verdicts already made (an index not judged yet is judged when a scan of
 * it starts).  Returns the previous setting.
 */
extern bool idx_owner_defer_reads(bool defer);

#endif							/* IDXTABLE_INDEX_OWNER_H */
