/*-------------------------------------------------------------------------
 *
 * modify.h
 *		  FDW callbacks of INSERT, UPDATE, DELETE and COPY FROM.
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/modify.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef IDXTABLE_MODIFY_H
#define IDXTABLE_MODIFY_H

#include "commands/explain.h"
#include "nodes/execnodes.h"
#include "nodes/pathnodes.h"
#include "nodes/plannodes.h"
#include "utils/relcache.h"

#include "core/pg_compat.h"

extern void idxAddForeignUpdateTargets(PlannerInfo *root, Index rtindex,
									   RangeTblEntry *target_rte,
									   Relation target_relation);
extern List *idxPlanForeignModify(PlannerInfo *root, ModifyTable *plan,
								  Index resultRelation, int subplan_index);
extern void idxBeginForeignModify(ModifyTableState *mtstate,
								  ResultRelInfo *rinfo, List *fdw_private,
								  int subplan_index, int eflags);
extern void idxBeginForeignInsert(ModifyTableState *mtstate,
								  ResultRelInfo *rinfo);
extern int	idxGetForeignModifyBatchSize(ResultRelInfo *rinfo);
extern TupleTableSlot *idxExecForeignInsert(EState *estate,
											ResultRelInfo *rinfo,
											TupleTableSlot *slot,
											TupleTableSlot *planSlot);
extern TupleTableSlot **idxExecForeignBatchInsert(EState *estate,
												  ResultRelInfo *rinfo,
												  TupleTableSlot **slots,
												  TupleTableSlot **planSlots,
												  int *numSlots);
extern TupleTableSlot *idxExecForeignUpdate(EState *estate,
											ResultRelInfo *rinfo,
											TupleTableSlot *slot,
											TupleTableSlot *planSlot);
extern TupleTableSlot *idxExecForeignDelete(EState *estate,
											ResultRelInfo *rinfo,
											TupleTableSlot *slot,
											TupleTableSlot *planSlot);
extern void idxEndForeignModify(EState *estate, ResultRelInfo *rinfo);
extern void idxEndForeignInsert(EState *estate, ResultRelInfo *rinfo);
extern int	idxIsForeignRelUpdatable(Relation rel);
extern void idxExplainForeignModify(ModifyTableState *mtstate,
									ResultRelInfo *rinfo, List *fdw_private,
									int subplan_index, ExplainState *es);

#endif							/* IDXTABLE_MODIFY_H */
