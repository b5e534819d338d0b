/*-------------------------------------------------------------------------
 *
 * option.h
 *		  Options of the idxtable_fdw server, user mapping, foreign table
 *		  and columns, and the resolved description of a foreign table.
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/core/option.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef IDXTABLE_OPTION_H
#define IDXTABLE_OPTION_H

#include "foreign/foreign.h"
#include "nodes/pg_list.h"
#include "utils/relcache.h"

/* Name of the BSON field that holds the document key */
#define IDX_ID_FIELD "_id"

/*
 * How writes keep index tables consistent with the facts (option
 * "consistency"): in one MongoDB transaction per PostgreSQL transaction, or
 * by the crash-safe write order (index entries before facts, deletions of
 * entries after), or not at all: EVENTUAL writes the facts only, each
 * final when made, and leaves the index tables to the change-stream
 * applier (fdw/sync/).  DEFAULT means "transaction where the server
 * supports it, else ordered", decided at the first write.
 */
typedef enum IdxConsistency
{
	IDX_CONSISTENCY_DEFAULT,
	IDX_CONSISTENCY_TRANSACTION,
	IDX_CONSISTENCY_ORDERED,
	IDX_CONSISTENCY_EVENTUAL
} IdxConsistency;

/*
 * The name of a consistency mode, as the option "consistency" spells it
 * (for every message and EXPLAIN; DEFAULT is described, not named), in
 * consistency.c.
 */
extern const char *idx_consistency_name(IdxConsistency mode);

/*
 * A foreign table as MongoDB sees it: where its documents live and which
 * field each column maps to.  Built by idx_get_table_info() from the
 * catalogs; everything is palloc'd in the current memory context.
 */
typedef struct IdxTableInfo
{
	Oid			relid;
	char	   *relname;		/* for messages */
	Oid			serverid;
	char	   *database;		/* MongoDB database */
	char	   *collection;		/* MongoDB collection */
	int			natts;			/* number of attributes (incl. dropped) */
	char	  **fields;			/* per attribute (attnum - 1): dotted field
								 * path, NULL for dropped columns */
	AttrNumber	id_attnum;		/* column mapped to _id, or InvalidAttrNumber */
	int			fetch_size;		/* cursor batch size */
	int			fetch_batch_size;	/* facts fetched by _id per round trip
									 * after an index lookup */
	int			batch_size;		/* rows per batched INSERT */
	IdxConsistency consistency; /* from the table, else the server */
	int			nshard_key;		/* columns in option "shard_key" (0: none) */
	AttrNumber *shard_key_attnums;	/* their attribute numbers */
	bool		use_remote_estimate;	/* before ANALYZE, may planning count
										 * index entries (route_estimate.c)? */
} IdxTableInfo;

/* Resolve the options of a foreign table (server options as fallback) */
extern IdxTableInfo *idx_get_table_info(Oid relid);

/* Option lookups shared by several modules */
extern char *idx_find_option(List *options, const char *name);
extern void idx_table_namespace(Oid relid, char **database,
								char **collection);
extern char *idx_server_database(ForeignServer *server);
extern int	idx_server_fetch_size(ForeignServer *server);
extern bool idx_server_change_streams(ForeignServer *server);
extern bool idx_srvoptions_change_streams(Datum srvoptions);

/* Options as a string to compare; a hash of what a server connects to */
extern char *idx_options_identity(List *options);
extern uint32 idx_server_target_hash(ForeignServer *server);

/* Field path of a column, from its "field" option or its name */
extern char *idx_column_field(Oid relid, AttrNumber attnum);

#endif							/* IDXTABLE_OPTION_H */
