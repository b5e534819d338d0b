/*-------------------------------------------------------------------------
 *
 * idxtable_fdw.h
 *		  FDW callback entry points, one group per module.
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/idxtable_fdw.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef IDXTABLE_FDW_H
#define IDXTABLE_FDW_H

#include "commands/explain.h"
#include "foreign/fdwapi.h"
#include "nodes/execnodes.h"
#include "nodes/parsenodes.h"
#include "nodes/pathnodes.h"
#include "utils/relcache.h"

#include "core/pg_compat.h"

/* planner.c */
extern void idxGetForeignRelSize(PlannerInfo *root, RelOptInfo *baserel,
								 Oid foreigntableid);
extern void idxGetForeignPaths(PlannerInfo *root, RelOptInfo *baserel,
							   Oid foreigntableid);
extern ForeignScan *idxGetForeignPlan(PlannerInfo *root, RelOptInfo *baserel,
									  Oid foreigntableid, ForeignPath *best_path,
									  List *tlist, List *scan_clauses,
									  Plan *outer_plan);

/* scan.c */
extern void idxBeginForeignScan(ForeignScanState *node, int eflags);
extern TupleTableSlot *idxIterateForeignScan(ForeignScanState *node);
extern void idxReScanForeignScan(ForeignScanState *node);
extern void idxEndForeignScan(ForeignScanState *node);
extern void idxExplainForeignScan(ForeignScanState *node, ExplainState *es);

/* analyze.c */
extern bool idxAnalyzeForeignTable(Relation relation,
								   AcquireSampleRowsFunc *func,
								   BlockNumber *totalpages);

/* import.c */
extern List *idxImportForeignSchema(ImportForeignSchemaStmt *stmt,
									Oid serverOid);

#endif							/* IDXTABLE_FDW_H */
