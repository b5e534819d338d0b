/*-------------------------------------------------------------------------
 *
 * index_shard.h
 *		  Sharded index collections on a sharded cluster (mongos).
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/index/index_shard.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef IDXTABLE_INDEX_SHARD_H
#define IDXTABLE_INDEX_SHARD_H

#include "core/mongoc_compat.h"
#include "core/option.h"
#include "index/index_catalog.h"

/* How an index collection is sharded (idxtable.index_defs.sharding) */
typedef enum IdxSharding
{
	IDX_SHARDING_DEFAULT,		/* not given: decided by the fact collection */
	IDX_SHARDING_NONE,			/* unsharded, on the primary shard */
	IDX_SHARDING_RANGED,		/* {"_id.k0": 1} */
	IDX_SHARDING_HASHED			/* {"_id.k0": "hashed"} */
} IdxSharding;

/* The choice a create_index argument names (NULL: the default); 22023 else */
extern IdxSharding idx_parse_sharding(const char *value);

/* Its name in the catalog: "none", "ranged" or "hashed" */
extern const char *idx_sharding_name(IdxSharding sharding);

/*
 * The sharding of new index table "def" of the fact collection of "info":
 * "requested" checked against the server (ranged and hashed need a mongos
 * and the privilege to shard), the default resolved (ranged when the fact
 * collection is sharded, else none; none with a WARNING when the user may
 * not read config.collections or shard).
 */
extern IdxSharding idx_resolve_sharding(mongoc_client_t *client,
										const char *servername,
										const IdxIndexDef *def,
										const IdxTableInfo *info,
										IdxSharding requested);

/* Shard the new, empty index collection of "def" by its leading key */
extern void idx_shard_index_collection(mongoc_client_t *client,
									   const char *servername,
									   const IdxIndexDef *def,
									   IdxSharding sharding);

#endif							/* IDXTABLE_INDEX_SHARD_H */
