/*-------------------------------------------------------------------------
 *
 * path_shared.h
 *		  What the builders of paths share (path_shared.c): the round trips
 *		  of a find, an attribute bitmap as fdw_private holds it, the
 *		  matching of pathkeys, and the value of a LIMIT or OFFSET.
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/path_shared.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef IDXTABLE_PATH_SHARED_H
#define IDXTABLE_PATH_SHARED_H

#include "nodes/pathnodes.h"

/*
 * Round trips that return "docs" documents of "bytes" each, at most
 * "per_batch" a batch
 */
extern double idx_batches(double docs, int per_batch, double bytes);

/* Turn an attribute bitmap into an integer list for fdw_private */
extern List *idx_bitmap_to_list(Bitmapset *bms);

/* accepts (true) or not one member expression of a pathkey's class */
typedef bool (*IdxPathkeyMatch) (Expr *expr, void *arg);

/* Does "match" accept a member expression of the pathkey's class? */
extern bool idx_pathkey_match(PathKey *pathkey, IdxPathkeyMatch match,
							  void *arg);

/* Does the pathkey sort by the default btree order of "type"? */
extern bool idx_pathkey_default_order(PathKey *pathkey, Oid type);

/* A constant LIMIT or OFFSET's value (-1: none); false if not known */
extern bool idx_limit_value(Node *node, int64 *value);

#endif							/* IDXTABLE_PATH_SHARED_H */
