/*-------------------------------------------------------------------------
 *
 * pg_compat.h
 *		  What differs between the PostgreSQL versions idxtable_fdw builds
 *		  against (15, 17 and 18), in one place.
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/core/pg_compat.h
 *
 * The rest of the source is written against one API: the newest where a
 * newer version renamed something (object_ownercheck, pg_noreturn,
 * Anum_pg_database_datlocale are PostgreSQL 16-18's names, given here to
 * the older versions), and small idx_ wrappers where the versions need
 * different arguments or fields.  No PG_VERSION_NUM test belongs anywhere
 * else; each one here says which versions differ and why.
 *
 * Included after postgres.h (by .c files only).  The macros expand in the
 * caller, which includes the PostgreSQL headers that declare what they
 * use (those are the same header in every version); this file includes
 * only the headers that exist in some versions and not in others.
 *
 *-------------------------------------------------------------------------
 */
#ifndef IDXTABLE_PG_COMPAT_H
#define IDXTABLE_PG_COMPAT_H

#if PG_VERSION_NUM < 150000
#error "idxtable_fdw needs PostgreSQL 15 or later"
#endif

/*
 * VARDATA, SET_VARSIZE and the other varlena macros: PostgreSQL 16 moved
 * them from postgres.h to varatt.h.
 */
#if PG_VERSION_NUM >= 160000
#include "varatt.h"
#endif

/*
 * Functions that never return: PostgreSQL 18 replaced the trailing
 * pg_attribute_noreturn() with the leading pg_noreturn (C11 _Noreturn).
 * Before 18 the GCC attribute is what pg_attribute_noreturn() was, and GCC
 * and clang accept it in front of a declaration too.
 */
#ifndef pg_noreturn
#define pg_noreturn pg_attribute_noreturn()
#endif

/*
 * The number of this backend, 1 .. MaxBackends for every regular backend
 * and background worker: the slot of per-backend tables in shared memory
 * and part of names that must differ between live backends.  PostgreSQL
 * 17 replaced the 1-based MyBackendId (storage/backendid.h) by the 0-based
 * MyProcNumber (storage/procnumber.h), whose first MaxBackends numbers are
 * those of the same processes.
 */
#if PG_VERSION_NUM >= 170000
#include "storage/procnumber.h"
#define idx_backend_number() ((int) MyProcNumber + 1)
#else
#include "storage/backendid.h"
#define idx_backend_number() ((int) MyBackendId)
#endif

/*
 * The local transaction id of this backend's current top-level
 * transaction (storage/proc.h): PostgreSQL 17 moved it into MyProc->vxid.
 */
#if PG_VERSION_NUM >= 170000
#define idx_local_xid() (MyProc->vxid.lxid)
#else
#define idx_local_xid() (MyProc->lxid)
#endif

/*
 * The database's default collation locale: PostgreSQL 17 renamed
 * daticulocale to datlocale (the locale of every provider but libc, with
 * the new builtin provider).  Before 17 only ICU databases have one.
 */
#if PG_VERSION_NUM < 170000
#define Anum_pg_database_datlocale Anum_pg_database_daticulocale
#endif

/*
 * Ownership checks (utils/acl.h): PostgreSQL 16 replaced one function per
 * catalog (pg_class_ownercheck, pg_database_ownercheck, ...) by
 * object_ownercheck(classid, ...).  The two catalogs we ask about.
 */
#if PG_VERSION_NUM < 160000
#define object_ownercheck(classid, objectid, roleid) \
	((classid) == RelationRelationId ? \
	 pg_class_ownercheck((objectid), (roleid)) : \
	 (AssertMacro((classid) == DatabaseRelationId), \
	  pg_database_ownercheck((objectid), (roleid))))
#endif

/*
 * EXECUTE on a function (utils/acl.h): PostgreSQL 16 replaced
 * pg_proc_aclcheck() by object_aclcheck(ProcedureRelationId, ...).
 */
#if PG_VERSION_NUM >= 160000
#define idx_proc_aclcheck(funcid, roleid, mode) \
	object_aclcheck(ProcedureRelationId, (funcid), (roleid), (mode))
#else
#define idx_proc_aclcheck(funcid, roleid, mode) \
	pg_proc_aclcheck((funcid), (roleid), (mode))
#endif

/*
 * The checkAsUser of a foreign scan (InvalidOid: the current user), the
 * one of the relation the query names (the owner of a view read through).
 * PostgreSQL 16 puts it in the ForeignScan plan (the planner takes it from
 * RelOptInfo.userid, which an inheritance child and an upper relation
 * inherit from the relation the query names), since the range table entry
 * of an inheritance child has none of its own.  Before 16 the range table
 * entry of the scanned relation ("rtindex") has it, children's copies too.
 */
#if PG_VERSION_NUM >= 160000
#define idx_foreign_scan_check_as_user(plan, estate, rtindex) \
	((plan)->checkAsUser)
#else
#define idx_foreign_scan_check_as_user(plan, estate, rtindex) \
	(exec_rt_fetch((rtindex), (estate))->checkAsUser)
#endif

/*
 * The user to write a result relation as (executor/executor.h): the
 * checkAsUser of the relation the statement names (the owner of a view
 * written through), else the current user.  PostgreSQL 16 moved
 * checkAsUser into an RTEPermissionInfo that only the statement's own
 * relations have, not the inheritance children and partitions it reaches,
 * and added ExecGetResultRelCheckAsUser() to ask the root's.  Before 16
 * every range table entry has it (an inheritance child a copy of its
 * parent's), and a partition that tuple routing reached has no entry: its
 * root's decides, as in postgres_fdw.
 */
#if PG_VERSION_NUM >= 160000
#define idx_result_rel_user(rinfo, estate) \
	ExecGetResultRelCheckAsUser((rinfo), (estate))
#else
#include "executor/executor.h"
#include "miscadmin.h"

static inline Oid
idx_result_rel_user(ResultRelInfo *rinfo, EState *estate)
{
	Index		rti = rinfo->ri_RangeTableIndex;
	Oid			user;

	if (rti == 0 && rinfo->ri_RootResultRelInfo != NULL)
		rti = rinfo->ri_RootResultRelInfo->ri_RangeTableIndex;
	if (rti == 0)
		return GetUserId();
	user = exec_rt_fetch(rti, estate)->checkAsUser;
	return OidIsValid(user) ? user : GetUserId();
}
#endif

/*
 * Paths (optimizer/pathnode.h).  PostgreSQL 17 added fdw_restrictinfo to
 * create_foreignscan_path and create_foreign_upper_path, and 18 the
 * number of disabled nodes (of enable_* settings off) below the path.
 *
 * fdw_restrictinfo is NIL here: PostgreSQL 17 and 18 read it only for a
 * foreign join (the gating quals createplan.c evaluates above the scan of
 * a join relation); a base relation's pseudoconstant quals stay in its
 * baserestrictinfo, and for an upper relation it is not read at all, so
 * the upper paths keep refusing queries with pseudoconstant quals
 * (order_path.c, agg_path.c, route_agg.c).  No path of ours has a disabled
 * node below it.
 */
#if PG_VERSION_NUM >= 180000
#define idx_create_foreignscan_path(root, rel, target, rows, startup, total, \
									pathkeys, outer, outerpath, priv) \
	create_foreignscan_path((root), (rel), (target), (rows), 0, (startup), \
							(total), (pathkeys), (outer), (outerpath), NIL, \
							(priv))
#define idx_create_foreign_upper_path(root, rel, target, rows, startup, total, \
									  pathkeys, outerpath, priv) \
	create_foreign_upper_path((root), (rel), (target), (rows), 0, (startup), \
							  (total), (pathkeys), (outerpath), NIL, (priv))
#elif PG_VERSION_NUM >= 170000
#define idx_create_foreignscan_path(root, rel, target, rows, startup, total, \
									pathkeys, outer, outerpath, priv) \
	create_foreignscan_path((root), (rel), (target), (rows), (startup), \
							(total), (pathkeys), (outer), (outerpath), NIL, \
							(priv))
#define idx_create_foreign_upper_path(root, rel, target, rows, startup, total, \
									  pathkeys, outerpath, priv) \
	create_foreign_upper_path((root), (rel), (target), (rows), (startup), \
							  (total), (pathkeys), (outerpath), NIL, (priv))
#else
#define idx_create_foreignscan_path create_foreignscan_path
#define idx_create_foreign_upper_path create_foreign_upper_path
#endif

/*
 * The pathkey of one expression (optimizer/paths.h): PostgreSQL 16 dropped
 * the nullable_relids argument (outer-join nullability moved into the
 * Vars).  We ask only about plain base relation columns, never nullable.
 */
#if PG_VERSION_NUM >= 160000
#define idx_build_expression_pathkey(root, expr, opno, rel) \
	build_expression_pathkey((root), (expr), (opno), (rel), false)
#else
#define idx_build_expression_pathkey(root, expr, opno, rel) \
	build_expression_pathkey((root), (expr), NULL, (opno), (rel), false)
#endif

/*
 * A WaitEventSet (storage/latch.h) that its creator frees itself with
 * FreeWaitEventSet, on error as well.  PostgreSQL 17 allocates every set
 * in TopMemoryContext and takes a resource owner instead of a memory
 * context (NULL: none, as here); before 17 the set lives in "cxt".
 */
#if PG_VERSION_NUM >= 170000
#define idx_create_wait_event_set(cxt, nevents) \
	CreateWaitEventSet(NULL, (nevents))
#else
#define idx_create_wait_event_set(cxt, nevents) \
	CreateWaitEventSet((cxt), (nevents))
#endif

/*
 * JSON lexing (common/jsonapi.h, utils/jsonfuncs.h).  PostgreSQL 17's
 * makeJsonLexContextCstringLen takes a context to fill (NULL: a new one is
 * allocated, as before).  PostgreSQL 16 replaced json_ereport_error by
 * json_errsave_error, which reports softly into an escape context when
 * given one (NULL: ereport(ERROR), as before).
 */
#if PG_VERSION_NUM >= 170000
#define idx_json_lex_context(json, len, encoding, need_escapes) \
	makeJsonLexContextCstringLen(NULL, (json), (len), (encoding), \
								 (need_escapes))
#else
#define idx_json_lex_context(json, len, encoding, need_escapes) \
	makeJsonLexContextCstringLen((json), (len), (encoding), (need_escapes))
#endif
#if PG_VERSION_NUM >= 160000
#define idx_json_report_error(error, lex) \
	json_errsave_error((error), (lex), NULL)
#else
#define idx_json_report_error(error, lex) json_ereport_error((error), (lex))
#endif

/*
 * The B-tree strategy of an operator (BTLessStrategyNumber ..
 * BTGreaterStrategyNumber, or IDX_STRATEGY_NE for the negator of a B-tree
 * equality) in the first B-tree operator family that has it; 0 if none
 * has.  PostgreSQL 18 generalised get_op_btree_interpretation() to the
 * operator families of every index method that can translate its
 * strategies (get_op_index_interpretation()); its CompareType numbers the
 * five comparisons as B-tree strategies and inequality as 6, like the
 * ROWCOMPARE_NE of the earlier versions.  Only B-tree families count here,
 * as before: a hash family knows equality, not its order.
 */
#if PG_VERSION_NUM >= 180000
#include "catalog/pg_am_d.h"
#define IDX_STRATEGY_NE ((int) COMPARE_NE)
#else
#define IDX_STRATEGY_NE ((int) ROWCOMPARE_NE)
#endif
#include "utils/lsyscache.h"

static inline int
idx_op_btree_strategy(Oid opno)
{
#if PG_VERSION_NUM >= 180000
	ListCell   *lc;

	foreach(lc, get_op_index_interpretation(opno))
	{
		OpIndexInterpretation *interp = lfirst(lc);

		if (get_opfamily_method(interp->opfamily_id) == BTREE_AM_OID)
			return (int) interp->cmptype;
	}
	return 0;
#else
	List	   *interps = get_op_btree_interpretation(opno);

	return interps == NIL ? 0 :
		((OpBtreeInterpretation *) linitial(interps))->strategy;
#endif
}

/*
 * Is a pathkey's order descending?  PostgreSQL 18 replaced its B-tree
 * strategy (pk_strategy) by a CompareType (pk_cmptype).
 */
#if PG_VERSION_NUM >= 180000
#define idx_pathkey_descending(pathkey) ((pathkey)->pk_cmptype == COMPARE_GT)
#else
#define idx_pathkey_descending(pathkey) \
	((pathkey)->pk_strategy == BTGreaterStrategyNumber)
#endif

/*
 * Does a collation (utils/pg_locale.h) sort as C does, bytewise?
 * PostgreSQL 18 removed lc_collate_is_c(); its locale objects say it
 * (collate_is_c, in every locale object since 17).  An invalid collation
 * is not C, as lc_collate_is_c() answered.
 */
#if PG_VERSION_NUM >= 180000
#define idx_collate_is_c(collid) \
	(OidIsValid(collid) && pg_newlocale_from_collation(collid)->collate_is_c)
#else
#define idx_collate_is_c(collid) lc_collate_is_c(collid)
#endif

/*
 * Base64 (common/base64.h): PostgreSQL 18 types the bytes to encode as
 * uint8 rather than char.
 */
#if PG_VERSION_NUM >= 180000
#define idx_b64_encode(src, len, dst, dstlen) \
	pg_b64_encode((const uint8 *) (src), (len), (dst), (dstlen))
#else
#define idx_b64_encode(src, len, dst, dstlen) \
	pg_b64_encode((const char *) (src), (len), (dst), (dstlen))
#endif

/*
 * EXPLAIN: PostgreSQL 18 moved ExplainState into commands/explain_state.h
 * and the ExplainProperty functions into commands/explain_format.h;
 * commands/explain.h declares both before 18.
 */
#if PG_VERSION_NUM >= 180000
#include "commands/explain_format.h"
#include "commands/explain_state.h"
#endif

#endif							/* IDXTABLE_PG_COMPAT_H */
