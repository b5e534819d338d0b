/*-------------------------------------------------------------------------
 *
 * index_defs_sql.c
 *		  SQL on idxtable.index_defs, run as the extension's owner.
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/index/index_defs_sql.c
 *
 * Catalog SQL.  The definitions table belongs to the extension's owner.
 * Every statement on it (the lookups by name and the writes) goes through
 * idx_catalog_execute(), which runs it through SPI as that owner, the way
 * PostgreSQL runs index builds and ANALYZE: as a security-restricted
 * operation, with search_path set to "pg_catalog, pg_temp" for the
 * statement's duration, and with schema-qualified tables and operators
 * (OPERATOR(pg_catalog.=)) besides.  No function or operator of the
 * caller's can be chosen by the parser, so none runs with the owner's
 * rights.  SPI rather than heap access keeps the table's constraints and
 * primary key doing their work; the planner's read of the definitions
 * (index_catalog.c) is a heap scan with an OID scan key and runs no SQL.
 * The lookup of an index's table and collection by its name, which the
 * index functions, the limits and the utility hook share, is here too.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_class.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/syscache.h"

#include "index/index_ddl.h"

/*
 * OID of idxtable.index_defs; an error if the extension is incomplete.
 */
static Oid
catalog_relid(void)
{
	Oid			relid = idx_index_defs_relid();

	if (!OidIsValid(relid))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_TABLE),
				 errmsg("relation \"%s.%s\" does not exist",
						IDX_CATALOG_SCHEMA, IDX_CATALOG_TABLE)));
	return relid;
}

/*
 * The owner of idxtable.index_defs.
 */
static Oid
catalog_owner(void)
{
	HeapTuple	classtup;
	Oid			owner;

	classtup = SearchSysCache1(RELOID, ObjectIdGetDatum(catalog_relid()));
	if (!HeapTupleIsValid(classtup))
		elog(ERROR, "cache lookup failed for %s.%s",
			 IDX_CATALOG_SCHEMA, IDX_CATALOG_TABLE);
	owner = ((Form_pg_class) GETSTRUCT(classtup))->relowner;
	ReleaseSysCache(classtup);
	return owner;
}

/*
 * Run one statement through SPI; returns the number of rows processed.  If
 * "result_relid" is not NULL, the first row's first two columns (tbl,
 * collection) are copied into "resultcxt".
 */
static uint64
catalog_spi(const char *sql, int nargs, Oid *argtypes, Datum *args,
			const char *argnulls, MemoryContext resultcxt,
			Oid *result_relid, char **result_coll)
{
	uint64		processed;
	int			rc;

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	rc = SPI_execute_with_args(sql, nargs, argtypes, args, argnulls, false, 0);
	if (rc < 0)
		elog(ERROR, "could not run \"%s\": %s", sql,
			 SPI_result_code_string(rc));
	processed = SPI_processed;
	if (result_relid && processed > 0 && SPI_tuptable != NULL)
	{
		HeapTuple	tuple = SPI_tuptable->vals[0];
		TupleDesc	tupdesc = SPI_tuptable->tupdesc;
		bool		isnull;
		Datum		coll;
		MemoryContext oldcxt;

		*result_relid = DatumGetObjectId(SPI_getbinval(tuple, tupdesc, 1,
													   &isnull));
		coll = SPI_getbinval(tuple, tupdesc, 2, &isnull);
		oldcxt = MemoryContextSwitchTo(resultcxt);
		*result_coll = TextDatumGetCString(coll);
		MemoryContextSwitchTo(oldcxt);
	}
	SPI_finish();
	return processed;
}

/*
 * Run a statement on idxtable.index_defs as the table's owner; returns the
 * number of rows processed.  If "result_relid" is not NULL, the first
 * row's first two columns (tbl, collection) are copied into the caller's
 * context.
 *
 * As PostgreSQL does for index builds and ANALYZE, the statement runs as a
 * security-restricted operation with search_path "pg_catalog, pg_temp"
 * (a GUC nest level of its own): nothing the caller put in its search_path
 * can be chosen by the parser, and even a function that did run could not
 * SET ROLE or leave anything behind.  On error the caller's user, security
 * context and search_path come back here, before the error goes on (the
 * abort would restore them too, but code between here and there must not
 * run as the owner).
 */
uint64
idx_catalog_execute(const char *sql, int nargs, Oid *argtypes, Datum *args,
				const char *argnulls, Oid *result_relid, char **result_coll)
{
	MemoryContext callercxt = CurrentMemoryContext;
	Oid			owner = catalog_owner();
	Oid			save_userid;
	int			save_sec;
	int			save_nestlevel;
	uint64		processed = 0;

	GetUserIdAndSecContext(&save_userid, &save_sec);
	SetUserIdAndSecContext(owner, save_sec | SECURITY_LOCAL_USERID_CHANGE |
						   SECURITY_RESTRICTED_OPERATION);
	save_nestlevel = NewGUCNestLevel();
	PG_TRY();
	{
		(void) set_config_option("search_path", "pg_catalog, pg_temp",
								 PGC_USERSET, PGC_S_SESSION,
								 GUC_ACTION_SAVE, true, 0, false);
		processed = catalog_spi(sql, nargs, argtypes, args, argnulls,
								callercxt, result_relid, result_coll);
	}
	PG_CATCH();
	{
		AtEOXact_GUC(false, save_nestlevel);
		SetUserIdAndSecContext(save_userid, save_sec);
		PG_RE_THROW();
	}
	PG_END_TRY();
	AtEOXact_GUC(true, save_nestlevel);
	SetUserIdAndSecContext(save_userid, save_sec);
	return processed;
}

/*
 * The table and collection of an index; false if there is no such index.
 */
bool
idx_lookup_index(const char *name, Oid *relid, char **collection)
{
	Oid			argtypes[1] = {TEXTOID};
	Datum		args[1];

	args[0] = CStringGetTextDatum(name);
	return idx_catalog_execute("SELECT tbl, collection FROM idxtable.index_defs "
							   "WHERE name OPERATOR(pg_catalog.=) $1",
							   1, argtypes, args, NULL, relid, collection) > 0;
}
