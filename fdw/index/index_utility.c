/*-------------------------------------------------------------------------
 *
 * index_utility.c
 *		  CREATE INDEX, DROP INDEX, ALTER INDEX and REINDEX on foreign
 *		  tables of this FDW: PostgreSQL's index commands, translated into
 *		  the index-table functions of the idxtable schema.
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/index/index_utility.c
 *
 * PostgreSQL refuses CREATE INDEX on a foreign table.  A ProcessUtility
 * hook takes the index commands whose target is an index table, or a
 * foreign table whose server belongs to this FDW, and runs them as the
 * SQL functions do: it looks up idxtable.create_index (or the procedure
 * idxtable.create_index_concurrently, drop_index, rebuild_index) by its
 * qualified name and signature, checks EXECUTE on it as a call would,
 * and calls it through fmgr, so that the checks, privileges, names,
 * NOTICEs and locks are those of the function.  Everything else goes on
 * unchanged to the previous hook or standard_ProcessUtility, including
 * CREATE INDEX on a foreign table of another FDW, which PostgreSQL
 * refuses as ever.
 *
 * What an index table cannot do is refused with 0A000 and named: a WHERE
 * clause, an access method other than btree, operator classes, COLLATE,
 * DESC, NULLS FIRST/LAST, keys other than a column, lower(column) and
 * upper(column), storage parameters other than "sharding" (the
 * function's argument of that name), TABLESPACE and NULLS NOT DISTINCT.
 *
 * Names.  Index tables live in idxtable.index_defs, whose names are
 * unique per database, not in pg_class.  A name given to CREATE INDEX is
 * refused with 42P07 (or skipped with a NOTICE under IF NOT EXISTS, as
 * PostgreSQL does) when an index table or a relation of the table's
 * schema has it, as index names share the relation namespace.  DROP,
 * ALTER and REINDEX INDEX take a name for an index table when
 * idxtable.index_defs has it and, if the name is schema-qualified, its
 * table is in that schema; other names are PostgreSQL's.  A DROP INDEX
 * list may mix both: the index tables are dropped here, the other names
 * are passed to PostgreSQL in one DropStmt, in the same transaction.
 *
 * ALTER INDEX [IF EXISTS] name RENAME TO new renames an index table: as
 * PostgreSQL's, for the table's owner, with 42P07 if the new name is
 * taken (as CREATE INDEX checks) and ShareUpdateExclusiveLock on the
 * table (queries and writes go on; builds, repairs and other renames
 * wait).  The definition's name changes in idxtable.index_defs, and with
 * it the rows keyed by it (idxtable.conflicts, ON UPDATE CASCADE), the
 * backends' caches (index_defs_changed) and the applier's view (which
 * follows the definition_id, and reloads its names at the commit).  The
 * MongoDB collection keeps its name, which index_defs.collection holds;
 * its ownership marker names the new name once the transaction commits
 * (index_ddl.c), and a later index of the old name gets a collection of
 * its own (index_owner.c).  The other forms of ALTER INDEX are refused
 * (0A000), named.  REINDEX INDEX rebuilds an index table (rebuild_index),
 * REINDEX TABLE every index table of a foreign table of ours; REINDEX
 * CONCURRENTLY is refused, rebuild_index blocking writes.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/relation.h"
#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/objectaccess.h"
#include "catalog/pg_class.h"
#include "catalog/pg_proc.h"
#include "catalog/pg_type.h"
#include "commands/defrem.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "foreign/foreign.h"
#include "miscadmin.h"
#include "nodes/makefuncs.h"
#include "nodes/parsenodes.h"
#include "parser/parse_func.h"
#include "tcop/utility.h"
#include "utils/acl.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"

#include "core/pg_compat.h"
#include "index/index_ddl.h"
#include "index/index_notify.h"
#include "index/index_owner.h"
#include "index/index_utility.h"

static ProcessUtility_hook_type prev_process_utility = NULL;
static IdxFdwIsOurs fdw_is_ours = NULL;

/* Arguments of the idxtable.* functions, as their SQL signatures have them */
#define CREATE_NARGS 6


/* ----------------------------------------------------------------
 *		Calling the idxtable functions
 * ----------------------------------------------------------------
 */

/*
 * Call idxtable.<fname>(argtypes) with "args" and "nulls", as a call from
 * SQL would: the function is found by its qualified name (USAGE on the
 * schema), EXECUTE on it is checked and the object-access hook told.
 * "context" is a CallContext for a procedure, else NULL.  The result
 * (create_index's name, rebuild_index's count) is not needed.
 */
static void
call_index_function(const char *fname, ObjectType objtype, int nargs,
					Oid *argtypes, Datum *args, bool *nulls, Node *context)
{
	LOCAL_FCINFO(fcinfo, CREATE_NARGS);
	ObjectWithArgs *func = makeNode(ObjectWithArgs);
	Oid			funcid;
	AclResult	aclresult;
	FmgrInfo	flinfo;
	int			i;

	Assert(nargs <= CREATE_NARGS);
	func->objname = list_make2(makeString(IDX_CATALOG_SCHEMA),
							   makeString(pstrdup(fname)));
	for (i = 0; i < nargs; i++)
		func->objargs = lappend(func->objargs,
								makeTypeNameFromOid(argtypes[i], -1));
	funcid = LookupFuncWithArgs(objtype, func, false);
	aclresult = idx_proc_aclcheck(funcid, GetUserId(), ACL_EXECUTE);
	if (aclresult != ACLCHECK_OK)
		aclcheck_error(aclresult, objtype, get_func_name(funcid));
	InvokeFunctionExecuteHook(funcid);

	fmgr_info(funcid, &flinfo);
	InitFunctionCallInfoData(*fcinfo, &flinfo, nargs, InvalidOid, context,
							 NULL);
	for (i = 0; i < nargs; i++)
	{
		fcinfo->args[i].value = args[i];
		fcinfo->args[i].isnull = nulls[i];
	}
	(void) FunctionCallInvoke(fcinfo);
}

/*
 * idxtable.drop_index(name) or idxtable.rebuild_index(name): the functions
 * of one index-table name.
 */
static void
call_name_function(const char *fname, const char *name)
{
	Oid			argtypes[1] = {TEXTOID};
	Datum		args[1];
	bool		nulls[1] = {false};

	args[0] = CStringGetTextDatum(name);
	call_index_function(fname, OBJECT_FUNCTION, 1, argtypes, args, nulls,
						NULL);
}


/* ----------------------------------------------------------------
 *		Which objects are ours
 * ----------------------------------------------------------------
 */

/*
 * Is "relid" a foreign table whose server belongs to this FDW?  Looked up
 * without a lock: the function called locks it and checks again.
 */
static bool
is_our_foreign_table(Oid relid)
{
	ForeignTable *table;

	if (!OidIsValid(relid) || get_rel_relkind(relid) != RELKIND_FOREIGN_TABLE)
		return false;
	table = GetForeignTable(relid);
	return fdw_is_ours(GetForeignServer(table->serverid)->fdwid);
}

/*
 * The foreign table of ours that "rv" names, else InvalidOid (no such
 * relation, or not ours: PostgreSQL then handles the command).
 */
static Oid
our_foreign_table(const RangeVar *rv)
{
	Oid			relid = RangeVarGetRelid(rv, NoLock, true);

	return is_our_foreign_table(relid) ? relid : InvalidOid;
}

/*
 * Is "rv" the name of an index table: in idxtable.index_defs and, if
 * qualified, of a table in that schema?  *relid receives its table.
 */
static bool
is_index_table_name(const RangeVar *rv, Oid *relid)
{
	char	   *collection;

	if (rv->catalogname != NULL || !OidIsValid(idx_index_defs_relid()))
		return false;
	if (!idx_lookup_index(rv->relname, relid, &collection))
		return false;
	if (rv->schemaname != NULL &&
		get_rel_namespace(*relid) !=
		LookupExplicitNamespace(rv->schemaname, true))
		return false;
	return true;
}


/* ----------------------------------------------------------------
 *		CREATE INDEX
 * ----------------------------------------------------------------
 */

/*
 * Refuse what an index table cannot do (0A000); "message" is a whole
 * sentence naming it, already translated (marked with _() by the caller).
 */
static void
refuse_feature(const char *message)
{
	ereport(ERROR,
			(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
			 errmsg_internal("%s", message),
			 errhint("An index table indexes columns, lower(column) and upper(column) in ascending order, with optional INCLUDE columns.")));
}

/*
 * Refuse the clauses of CREATE INDEX that an index table has no use for.
 */
static void
check_statement_clauses(const IndexStmt *stmt)
{
	if (stmt->whereClause != NULL)
		refuse_feature(_("index tables do not support WHERE clauses (partial indexes)"));
	if (stmt->accessMethod != NULL &&
		strcmp(stmt->accessMethod, "btree") != 0)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("index tables do not support access method \"%s\"",
						stmt->accessMethod),
				 errhint("Omit USING, or write USING btree.")));
	if (stmt->tableSpace != NULL)
		refuse_feature(_("index tables do not support TABLESPACE"));
	if (stmt->nulls_not_distinct)
		refuse_feature(_("index tables do not support NULLS NOT DISTINCT"));
}

/*
 * The sharding of WITH (sharding = ranged | hashed | none), the one
 * storage parameter of an index table (create_index's argument); NULL if
 * not given.  Any other parameter is refused.
 */
static char *
sharding_option(List *options)
{
	char	   *sharding = NULL;
	ListCell   *lc;

	foreach(lc, options)
	{
		DefElem    *opt = lfirst_node(DefElem, lc);

		if (opt->defnamespace == NULL && strcmp(opt->defname, "sharding") == 0)
			sharding = defGetString(opt);
		else
			ereport(ERROR,
					(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
					 errmsg("index tables do not support storage parameter \"%s\"",
							opt->defname),
					 errhint("The only parameter of an index table is sharding (ranged, hashed or none).")));
	}
	return sharding;
}

/*
 * The column that a ColumnRef names, or NULL if it is not a plain column
 * name.
 */
static char *
column_ref_name(Node *node)
{
	ColumnRef  *ref;

	if (node == NULL || !IsA(node, ColumnRef))
		return NULL;
	ref = (ColumnRef *) node;
	if (list_length(ref->fields) != 1 || !IsA(linitial(ref->fields), String))
		return NULL;
	return strVal(linitial(ref->fields));
}

/*
 * "lower" or "upper" if "call" is lower(column) or upper(column), possibly
 * qualified with pg_catalog, with *column its column; else NULL.
 */
static const char *
case_function(FuncCall *call, char **column)
{
	const char *fname;
	char	   *schema = NULL;

	if (list_length(call->args) != 1 || call->agg_order != NIL ||
		call->agg_filter != NULL || call->over != NULL ||
		call->agg_star || call->agg_distinct || call->func_variadic)
		return NULL;
	if (list_length(call->funcname) == 2)
		schema = strVal(linitial(call->funcname));
	else if (list_length(call->funcname) != 1)
		return NULL;
	if (schema != NULL && strcmp(schema, "pg_catalog") != 0)
		return NULL;
	fname = strVal(llast(call->funcname));
	if (strcmp(fname, "lower") != 0 && strcmp(fname, "upper") != 0)
		return NULL;
	*column = column_ref_name(linitial(call->args));
	return *column ? fname : NULL;
}

/*
 * Refuse the options of one key or included column that an index table
 * has no use for.
 */
static void
check_element_options(const IndexElem *elem)
{
	if (elem->collation != NIL)
		refuse_feature(_("index tables do not support COLLATE on a key"));
	if (elem->opclass != NIL || elem->opclassopts != NIL)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("index tables do not support operator class \"%s\"",
						NameListToString(elem->opclass)),
				 errhint("Index table keys compare as the column's type and collation do.")));
	if (elem->ordering == SORTBY_DESC)
		refuse_feature(_("index tables do not support DESC keys"));
	if (elem->nulls_ordering != SORTBY_NULLS_DEFAULT)
		refuse_feature(_("index tables do not support NULLS FIRST or NULLS LAST"));
}

/*
 * The key specification of one element, in create_index's syntax:
 * "column", "lower(column)" or "upper(column)", quoted as needed.
 */
static char *
key_spec(const IndexElem *elem)
{
	char	   *column = NULL;
	const char *fname = NULL;

	check_element_options(elem);
	if (elem->name != NULL)
		return pstrdup(quote_identifier(elem->name));
	if (elem->expr != NULL && IsA(elem->expr, FuncCall))
		fname = case_function((FuncCall *) elem->expr, &column);
	else
		column = column_ref_name(elem->expr);
	if (fname != NULL)
		return psprintf("%s(%s)", fname, quote_identifier(column));
	if (column != NULL)
		return pstrdup(quote_identifier(column));
	refuse_feature(_("index tables do not support keys other than a column, lower(column) and upper(column)"));
	return NULL;				/* keep compiler quiet */
}

/*
 * A text[] of the key specifications of "elems" (included columns if
 * "include": plain column names only).
 */
static Datum
element_array(List *elems, bool include)
{
	Datum	   *items;
	int			n = 0;
	ListCell   *lc;

	items = (Datum *) palloc(sizeof(Datum) * Max(list_length(elems), 1));

	foreach(lc, elems)
	{
		IndexElem  *elem = lfirst_node(IndexElem, lc);

		if (include && elem->name == NULL)
		{
			check_element_options(elem);
			refuse_feature(_("index tables do not support expressions in INCLUDE"));
		}
		items[n++] = CStringGetTextDatum(key_spec(elem));
	}
	return PointerGetDatum(construct_array(items, n, TEXTOID, -1, false,
										   TYPALIGN_INT));
}

/*
 * Is "name" taken, by an index table or by a relation of the table's
 * schema (index names share the relation namespace)?
 */
static bool
index_name_taken(const char *name, Oid relid)
{
	Oid			tbl;
	char	   *collection;

	return idx_lookup_index(name, &tbl, &collection) ||
		OidIsValid(get_relname_relid(name, get_rel_namespace(relid)));
}

/*
 * The owner check of CREATE INDEX (as PostgreSQL's, before any lock and
 * before the name is checked).
 */
static void
check_table_owner(Oid relid)
{
	if (!object_ownercheck(RelationRelationId, relid, GetUserId()))
		aclcheck_error(ACLCHECK_NOT_OWNER, OBJECT_FOREIGN_TABLE,
					   get_rel_name(relid));
}

/*
 * CREATE INDEX on foreign table "relid" of ours: create_index, or under
 * CONCURRENTLY (outside a transaction block) the procedure
 * create_index_concurrently, with the statement's keys, included columns,
 * uniqueness, name and sharding.
 */
static void
create_index(IndexStmt *stmt, Oid relid, bool isTopLevel)
{
	Oid			argtypes[CREATE_NARGS] = {REGCLASSOID, TEXTARRAYOID,
	TEXTARRAYOID, BOOLOID, TEXTOID, TEXTOID};
	Datum		args[CREATE_NARGS];
	bool		nulls[CREATE_NARGS] = {false};
	char	   *sharding;

	if (stmt->concurrent)
		PreventInTransactionBlock(isTopLevel, "CREATE INDEX CONCURRENTLY");
	check_table_owner(relid);
	check_statement_clauses(stmt);
	sharding = sharding_option(stmt->options);
	args[0] = ObjectIdGetDatum(relid);
	args[1] = element_array(stmt->indexParams, false);
	args[2] = element_array(stmt->indexIncludingParams, true);
	args[3] = BoolGetDatum(stmt->unique);
	nulls[4] = stmt->idxname == NULL;
	args[4] = nulls[4] ? (Datum) 0 : CStringGetTextDatum(stmt->idxname);
	nulls[5] = sharding == NULL;
	args[5] = nulls[5] ? (Datum) 0 : CStringGetTextDatum(sharding);

	if (stmt->idxname != NULL && index_name_taken(stmt->idxname, relid))
	{
		if (!stmt->if_not_exists)
			ereport(ERROR,
					(errcode(ERRCODE_DUPLICATE_TABLE),
					 errmsg("relation \"%s\" already exists",
							stmt->idxname)));
		ereport(NOTICE,
				(errcode(ERRCODE_DUPLICATE_TABLE),
				 errmsg("relation \"%s\" already exists, skipping",
						stmt->idxname)));
		return;
	}

	if (stmt->concurrent)
	{
		CallContext *callcontext = makeNode(CallContext);

		callcontext->atomic = false;
		call_index_function("create_index_concurrently", OBJECT_PROCEDURE,
							CREATE_NARGS, argtypes, args, nulls,
							(Node *) callcontext);
	}
	else
		call_index_function("create_index", OBJECT_FUNCTION, CREATE_NARGS,
							argtypes, args, nulls, NULL);
}


/* ----------------------------------------------------------------
 *		DROP INDEX
 * ----------------------------------------------------------------
 */

/*
 * DROP INDEX: drop the index tables among its names (drop_index), and
 * return the other names for PostgreSQL (NIL if none).  CONCURRENTLY
 * keeps PostgreSQL's rules (one name, no CASCADE, outside a transaction
 * block); an index table is dropped as drop_index does.
 */
static List *
drop_indexes(DropStmt *stmt, bool isTopLevel)
{
	List	   *rest = NIL;
	List	   *ours = NIL;
	ListCell   *lc;

	foreach(lc, stmt->objects)
	{
		List	   *names = (List *) lfirst(lc);
		RangeVar   *rv = makeRangeVarFromNameList(names);
		Oid			relid;

		if (is_index_table_name(rv, &relid))
			ours = lappend(ours, rv->relname);
		else
			rest = lappend(rest, names);
	}
	if (ours == NIL)
		return stmt->objects;

	if (stmt->concurrent)
	{
		PreventInTransactionBlock(isTopLevel, "DROP INDEX CONCURRENTLY");
		if (list_length(stmt->objects) != 1)
			ereport(ERROR,
					(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
					 errmsg("DROP INDEX CONCURRENTLY does not support dropping multiple objects")));
		if (stmt->behavior == DROP_CASCADE)
			ereport(ERROR,
					(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
					 errmsg("DROP INDEX CONCURRENTLY does not support CASCADE")));
	}
	foreach(lc, ours)
		call_name_function("drop_index", (const char *) lfirst(lc));
	return rest;
}


/* ----------------------------------------------------------------
 *		ALTER INDEX and REINDEX
 * ----------------------------------------------------------------
 */

/*
 * ALTER INDEX name RENAME TO new_name of index table "name" (see the file
 * header).  The new name is checked once the table is locked, as the
 * definition is looked up again then.
 */
static void
rename_index(const char *name, const char *new_name)
{
	Oid			argtypes[2] = {TEXTOID, TEXTOID};
	Datum		args[2];
	char	   *collection;
	Relation	rel;
	Oid			relid;

	/* the owner only, checked before the lock is queued and again under it */
	rel = idx_open_index_table(name, ShareUpdateExclusiveLock, ACL_NO_RIGHTS,
							   &collection);
	relid = RelationGetRelid(rel);
	idx_check_index_name(new_name);
	if (index_name_taken(new_name, relid))
		ereport(ERROR,
				(errcode(ERRCODE_DUPLICATE_TABLE),
				 errmsg("relation \"%s\" already exists", new_name)));

	args[0] = CStringGetTextDatum(name);
	args[1] = CStringGetTextDatum(new_name);
	if (idx_catalog_execute("UPDATE idxtable.index_defs SET name = $2 "
							"WHERE name OPERATOR(pg_catalog.=) $1",
							2, argtypes, args, NULL, NULL, NULL) != 1)
		elog(ERROR, "could not rename index \"%s\"", name);
	idx_ddl_rename_at_commit(relid, name, new_name);
	CacheInvalidateRelcacheByRelid(relid);	/* replan queries */
	relation_close(rel, NoLock);
	idx_note_index_change(relid, false);	/* the applier's names */
}

/*
 * The words of an ALTER INDEX form after the name, for its refusal.
 */
static const char *
alter_form(const AlterTableStmt *stmt)
{
	AlterTableCmd *cmd;

	if (list_length(stmt->cmds) != 1)
		return "";
	cmd = linitial_node(AlterTableCmd, stmt->cmds);
	switch (cmd->subtype)
	{
		case AT_SetTableSpace:
			return " SET TABLESPACE";
		case AT_SetRelOptions:
			return " SET (...)";
		case AT_ResetRelOptions:
			return " RESET (...)";
		case AT_SetStatistics:
			return " ALTER COLUMN ... SET STATISTICS";
		case AT_AttachPartition:
			return " ATTACH PARTITION";
		default:
			return "";
	}
}

/*
 * Refuse a form of ALTER INDEX ("form": its words after the name) on
 * index table "name".
 */
static void
refuse_alter(const char *name, const char *form)
{
	ereport(ERROR,
			(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
			 errmsg("index tables do not support ALTER INDEX ...%s", form),
			 errdetail("\"%s\" is an index table: a MongoDB collection, without a tablespace, storage parameters, statistics targets or partitions of its own.",
					   name),
			 errhint("ALTER INDEX ... RENAME TO renames an index table.")));
}

/*
 * The options of REINDEX that a rebuild can honour: VERBOSE (an INFO per
 * index table).  CONCURRENTLY and TABLESPACE are refused.
 */
static bool
reindex_verbose(const ReindexStmt *stmt)
{
	bool		verbose = false;
	ListCell   *lc;

	foreach(lc, stmt->params)
	{
		DefElem    *opt = lfirst_node(DefElem, lc);

		if (strcmp(opt->defname, "verbose") == 0)
			verbose = defGetBoolean(opt);
		else if (strcmp(opt->defname, "concurrently") == 0)
		{
			if (defGetBoolean(opt))
				ereport(ERROR,
						(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
						 errmsg("index tables do not support REINDEX CONCURRENTLY"),
						 errhint("Create a new index with CREATE INDEX CONCURRENTLY, then drop the old one.")));
		}
		else
			ereport(ERROR,
					(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
					 errmsg("index tables do not support REINDEX option \"%s\"",
							opt->defname)));
	}
	return verbose;
}

/*
 * Rebuild index table "name" (rebuild_index), with an INFO under VERBOSE.
 */
static void
rebuild_index(const char *name, bool verbose)
{
	call_name_function("rebuild_index", name);
	if (verbose)
		ereport(INFO,
				(errmsg("index table \"%s\" was rebuilt", name)));
}

/*
 * The names of the index tables of foreign table "relid", in name order
 * (idxtable.index_defs is readable by everyone).
 */
static List *
table_index_names(Oid relid)
{
	Oid			argtypes[1] = {OIDOID};
	Datum		args[1];
	MemoryContext cxt = CurrentMemoryContext;
	List	   *names = NIL;
	uint64		i;

	args[0] = ObjectIdGetDatum(relid);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	if (SPI_execute_with_args("SELECT name FROM idxtable.index_defs "
							  "WHERE tbl::pg_catalog.oid OPERATOR(pg_catalog.=) $1 "
							  "ORDER BY name COLLATE pg_catalog.\"C\"",
							  1, argtypes, args, NULL, true, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not read the index tables of relation %u", relid);
	for (i = 0; i < SPI_processed; i++)
	{
		char	   *name = SPI_getvalue(SPI_tuptable->vals[i],
										SPI_tuptable->tupdesc, 1);
		MemoryContext oldcxt = MemoryContextSwitchTo(cxt);

		names = lappend(names, pstrdup(name));
		MemoryContextSwitchTo(oldcxt);
	}
	SPI_finish();
	return names;
}

/*
 * REINDEX TABLE on foreign table "relid" of ours: rebuild each of its
 * index tables, or say there is none as PostgreSQL does.
 */
static void
reindex_table(Oid relid, bool verbose)
{
	List	   *names;
	ListCell   *lc;

	check_table_owner(relid);
	names = table_index_names(relid);
	if (names == NIL)
		ereport(NOTICE,
				(errmsg("table \"%s\" has no indexes to reindex",
						get_rel_name(relid))));
	foreach(lc, names)
		rebuild_index((const char *) lfirst(lc), verbose);
}


/* ----------------------------------------------------------------
 *		The hook
 * ----------------------------------------------------------------
 */

/*
 * Run the command as PostgreSQL would have without this hook.
 */
static void
pass_on(PlannedStmt *pstmt, const char *queryString, bool readOnlyTree,
		ProcessUtilityContext context, ParamListInfo params,
		QueryEnvironment *queryEnv, DestReceiver *dest, QueryCompletion *qc)
{
	if (prev_process_utility)
		prev_process_utility(pstmt, queryString, readOnlyTree, context,
							 params, queryEnv, dest, qc);
	else
		standard_ProcessUtility(pstmt, queryString, readOnlyTree, context,
								params, queryEnv, dest, qc);
}

/*
 * Pass DROP INDEX "stmt" to PostgreSQL with the object list "objects"
 * (the names that are not index tables), in a copy of the statement.
 */
static void
pass_drop(PlannedStmt *pstmt, DropStmt *stmt, List *objects,
		  const char *queryString, ProcessUtilityContext context,
		  ParamListInfo params, QueryEnvironment *queryEnv,
		  DestReceiver *dest, QueryCompletion *qc)
{
	PlannedStmt *copy = makeNode(PlannedStmt);
	DropStmt   *drop = makeNode(DropStmt);

	*drop = *stmt;
	drop->objects = objects;
	*copy = *pstmt;
	copy->utilityStmt = (Node *) drop;
	pass_on(copy, queryString, false, context, params, queryEnv, dest, qc);
}

/*
 * Handle "stmt" if it is an index command on an index table or a foreign
 * table of ours; returns false if PostgreSQL is to run it unchanged (or,
 * for DROP INDEX, the rest of it, in *rest).
 */
static bool
run_index_command(Node *stmt, bool isTopLevel, List **rest)
{
	Oid			relid;

	switch (nodeTag(stmt))
	{
		case T_IndexStmt:
			relid = our_foreign_table(((IndexStmt *) stmt)->relation);
			if (!OidIsValid(relid))
				return false;
			create_index((IndexStmt *) stmt, relid, isTopLevel);
			return true;
		case T_DropStmt:
			if (((DropStmt *) stmt)->removeType != OBJECT_INDEX)
				return false;
			*rest = drop_indexes((DropStmt *) stmt, isTopLevel);
			if (*rest == ((DropStmt *) stmt)->objects)
			{
				*rest = NIL;	/* no index table: PostgreSQL's alone */
				return false;
			}
			return *rest == NIL;
		case T_RenameStmt:
			if (((RenameStmt *) stmt)->renameType != OBJECT_INDEX ||
				!is_index_table_name(((RenameStmt *) stmt)->relation, &relid))
				return false;
			rename_index(((RenameStmt *) stmt)->relation->relname,
						 ((RenameStmt *) stmt)->newname);
			return true;
		case T_AlterTableStmt:
			if (((AlterTableStmt *) stmt)->objtype != OBJECT_INDEX ||
				!is_index_table_name(((AlterTableStmt *) stmt)->relation,
									 &relid))
				return false;
			refuse_alter(((AlterTableStmt *) stmt)->relation->relname,
						 alter_form((AlterTableStmt *) stmt));
			return true;
		case T_AlterObjectDependsStmt:
			if (((AlterObjectDependsStmt *) stmt)->objectType != OBJECT_INDEX ||
				!is_index_table_name(((AlterObjectDependsStmt *) stmt)->relation,
									 &relid))
				return false;
			refuse_alter(((AlterObjectDependsStmt *) stmt)->relation->relname,
						 " DEPENDS ON EXTENSION");
			return true;
		case T_ReindexStmt:
			{
				ReindexStmt *reindex = (ReindexStmt *) stmt;

				if (reindex->kind == REINDEX_OBJECT_INDEX &&
					is_index_table_name(reindex->relation, &relid))
					rebuild_index(reindex->relation->relname,
								  reindex_verbose(reindex));
				else if (reindex->kind == REINDEX_OBJECT_TABLE &&
						 OidIsValid(relid = our_foreign_table(reindex->relation)))
					reindex_table(relid, reindex_verbose(reindex));
				else
					return false;
				return true;
			}
		default:
			return false;
	}
}

/*
 * ProcessUtility_hook: index commands on index tables and on foreign
 * tables of ours run here; everything else, and the names of a DROP
 * INDEX that are not index tables, go on to PostgreSQL.
 */
static void
index_process_utility(PlannedStmt *pstmt, const char *queryString,
					  bool readOnlyTree, ProcessUtilityContext context,
					  ParamListInfo params, QueryEnvironment *queryEnv,
					  DestReceiver *dest, QueryCompletion *qc)
{
	Node	   *stmt = pstmt->utilityStmt;
	List	   *rest = NIL;

	if (run_index_command(stmt, context == PROCESS_UTILITY_TOPLEVEL, &rest))
		return;
	if (rest != NIL)
		pass_drop(pstmt, (DropStmt *) stmt, rest, queryString, context,
				  params, queryEnv, dest, qc);
	else
		pass_on(pstmt, queryString, readOnlyTree, context, params, queryEnv,
				dest, qc);
}

/*
 * Install the hook (from _PG_init), after any hook installed before it.
 */
void
idx_install_utility_hook(IdxFdwIsOurs is_ours)
{
	fdw_is_ours = is_ours;
	prev_process_utility = ProcessUtility_hook;
	ProcessUtility_hook = index_process_utility;
}
