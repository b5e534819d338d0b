/*-------------------------------------------------------------------------
 *
 * index_conflict.c
 *		  Unique key conflicts with writers outside PostgreSQL: the rows of
 *		  idxtable.conflicts.
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/index/index_conflict.c
 *
 * A client that writes straight into MongoDB can give a second fact a key
 * that a unique index table's claim already holds for a first fact that
 * has it too.  Nothing in MongoDB refuses that, and no repair can fix it:
 * the index keeps the claim of the fact that holds it, and the repair core
 * (index_repair_claims.c) reports the other fact as a conflict.  The change-stream
 * applier and repair_index record each conflict here, one row per (index,
 * fact, holder): the key (as in the DETAIL of a unique violation, NULL if
 * the user who found it may not see key values), both _ids as relaxed
 * extended JSON, the fact's _id exactly (BSON), and when it was first
 * found.  The applier forgets a fact's rows when the repair core finds its
 * conflicts resolved (on_resolved); repair_index, which checks every fact,
 * first forgets what was recorded for its index; the rows of an index go
 * with its definition (ON DELETE CASCADE).
 *
 * The rows are also how the applier finds, from a holder it applies, the
 * facts that wait for its key (on_waiters, idx_conflict_waiting()).  The
 * index collection alone cannot tell it: once a holder's claim is gone,
 * nothing there links the holder to its old key.  The claim may be gone
 * before the applier sees the change, deleted by the FDW's own write of
 * the holder, or by an earlier attempt at the same batch that failed before
 * the waiting fact took the key (the batch is applied again after a
 * restart).  A row, written in the applier's transaction, outlives both.
 *
 * The table belongs to the extension's owner.  Its rows are written, as
 * index_ddl.c writes idxtable.index_defs, through SPI as that owner in a
 * security-restricted operation with search_path "pg_catalog, pg_temp"
 * and schema-qualified names and operators, whoever calls: the applier, or
 * the owner of the foreign table repairing its index.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/namespace.h"
#include "catalog/pg_class.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"

#include "core/convert.h"
#include "core/handle.h"
#include "core/mongoc_compat.h"
#include "core/pg_compat.h"
#include "index/index_conflict.h"
#include "index/index_ddl.h"

/*
 * The owner of idxtable.conflicts.
 */
static Oid
conflicts_owner(void)
{
	Oid			nspid = get_namespace_oid(IDX_CATALOG_SCHEMA, false);
	Oid			relid = get_relname_relid("conflicts", nspid);
	HeapTuple	classtup;
	Oid			owner;

	if (!OidIsValid(relid))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_TABLE),
				 errmsg("relation \"%s.%s\" does not exist",
						IDX_CATALOG_SCHEMA, "conflicts")));
	classtup = SearchSysCache1(RELOID, ObjectIdGetDatum(relid));
	if (!HeapTupleIsValid(classtup))
		elog(ERROR, "cache lookup failed for relation %u", relid);
	owner = ((Form_pg_class) GETSTRUCT(classtup))->relowner;
	ReleaseSysCache(classtup);
	return owner;
}

/*
 * What reads the rows a query returned (SPI_tuptable, SPI_processed), while
 * SPI is still connected; "arg" is the caller's.
 */
typedef void (*ConflictRowsFn) (void *arg);

/*
 * Run one statement through SPI, with a snapshot of its own if none is
 * active (on error, the abort pops it); "rows" (or NULL) reads its result.
 */
static void
conflicts_spi(const char *sql, int nargs, Oid *argtypes, Datum *args,
			  const char *argnulls, ConflictRowsFn rows, void *rows_arg)
{
	int			rc;

	bool		pushed = false;

	/* a background worker (the applier) may have no snapshot set */
	if (!ActiveSnapshotSet())
	{
		PushActiveSnapshot(GetTransactionSnapshot());
		pushed = true;
	}
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	rc = SPI_execute_with_args(sql, nargs, argtypes, args, argnulls, false, 0);
	if (rc < 0)
		elog(ERROR, "could not run \"%s\": %s", sql,
			 SPI_result_code_string(rc));
	if (rows != NULL)
		rows(rows_arg);
	SPI_finish();
	if (pushed)
		PopActiveSnapshot();
}

/*
 * Run a statement on idxtable.conflicts as the table's owner, as a
 * security-restricted operation with search_path "pg_catalog, pg_temp"
 * (see idx_catalog_execute() in index_defs_sql.c, which this follows);
 * "rows" (or NULL) reads the rows of a query (conflicts_spi()).  On error the
 * caller's user, security context and search_path come back before the
 * error goes on.
 */
static void
conflicts_execute(const char *sql, int nargs, Oid *argtypes, Datum *args,
				  const char *argnulls, ConflictRowsFn rows, void *rows_arg)
{
	Oid			owner = conflicts_owner();
	Oid			save_userid;
	int			save_sec;
	int			save_nestlevel;

	GetUserIdAndSecContext(&save_userid, &save_sec);
	SetUserIdAndSecContext(owner, save_sec | SECURITY_LOCAL_USERID_CHANGE |
						   SECURITY_RESTRICTED_OPERATION);
	save_nestlevel = NewGUCNestLevel();
	PG_TRY();
	{
		(void) set_config_option("search_path", "pg_catalog, pg_temp",
								 PGC_USERSET, PGC_S_SESSION,
								 GUC_ACTION_SAVE, true, 0, false);
		conflicts_spi(sql, nargs, argtypes, args, argnulls, rows, rows_arg);
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
}

/*
 * A fact's _id as its row shows it: relaxed extended JSON, as in messages.
 */
static Datum
id_text(const bson_value_t *id)
{
	bson_t		doc = BSON_INITIALIZER;
	char	   *text;

	idx_check_append(BSON_APPEND_VALUE(&doc, "_id", id));
	text = idx_document_id_string(&doc);
	bson_destroy(&doc);
	return CStringGetTextDatum(text);
}

/*
 * A fact's _id exactly, for its row's fact_bson: the BSON document
 * {"_id": <_id>}.
 */
static Datum
id_bson(const bson_value_t *id)
{
	bson_t		doc = BSON_INITIALIZER;
	bytea	   *result;

	idx_check_append(BSON_APPEND_VALUE(&doc, "_id", id));
	result = palloc(VARHDRSZ + doc.len);
	SET_VARSIZE(result, VARHDRSZ + doc.len);
	memcpy(VARDATA(result), bson_get_data(&doc), doc.len);
	bson_destroy(&doc);
	return PointerGetDatum(result);
}

/*
 * Record that the fact fact_id should have the unique key "key_text" of
 * index "index_name" (NULL: not to be shown), whose claim the fact
 * holder_id holds and has the key too.  A conflict already recorded stays
 * as it is, with the time it was first found; a row of the same fact and
 * key with another holder (whose claim has since passed to this one) goes.
 * Runs in the caller's transaction.
 */
void
idx_conflict_record(const char *index_name, const char *key_text,
					const bson_value_t *fact_id, const bson_value_t *holder_id)
{
	Oid			argtypes[5] = {TEXTOID, TEXTOID, TEXTOID, TEXTOID, BYTEAOID};
	Datum		args[5];
	char		argnulls[5] = {' ', ' ', ' ', ' ', ' '};

	args[0] = CStringGetTextDatum(index_name);
	if (key_text != NULL)
		args[1] = CStringGetTextDatum(key_text);
	else
	{
		args[1] = (Datum) 0;
		argnulls[1] = 'n';
	}
	args[2] = id_text(fact_id);
	args[3] = id_text(holder_id);
	args[4] = id_bson(fact_id);
	conflicts_execute("WITH outdated AS ("
					  "DELETE FROM idxtable.conflicts "
					  "WHERE index_name OPERATOR(pg_catalog.=) $1 "
					  "AND fact_id OPERATOR(pg_catalog.=) $3 "
					  "AND COALESCE(key, '') OPERATOR(pg_catalog.=) "
					  "COALESCE($2, '') "
					  "AND holder_id OPERATOR(pg_catalog.<>) $4) "
					  "INSERT INTO idxtable.conflicts "
					  "(index_name, key, fact_id, holder_id, found_at, fact_bson) "
					  "VALUES ($1, $2, $3, $4, pg_catalog.now(), $5) "
					  "ON CONFLICT (index_name, fact_id, holder_id) DO NOTHING",
					  5, argtypes, args, argnulls, NULL, NULL);
}

/*
 * idx_conflict_record() as an IdxRepairState on_conflict callback, for
 * the applier and repair_index.
 */
void
idx_conflict_callback(IdxRepairState *st, const char *key_desc,
					  const bson_value_t *fact_id,
					  const bson_value_t *holder_id, void *arg)
{
	const char *key_text = key_desc;

	/* the table's key column: "(...)=(...)" */
	if (key_text != NULL && strncmp(key_text, "Key ", 4) == 0)
		key_text += 4;
	idx_conflict_record(st->def->name, key_text, fact_id, holder_id);
}

/*
 * Forget every conflict recorded for index "index_name" (before a pass
 * over all its facts records those that remain).
 */
void
idx_conflict_forget(const char *index_name)
{
	Oid			argtypes[1] = {TEXTOID};
	Datum		args[1];

	args[0] = CStringGetTextDatum(index_name);
	conflicts_execute("DELETE FROM idxtable.conflicts "
					  "WHERE index_name OPERATOR(pg_catalog.=) $1",
					  1, argtypes, args, NULL, NULL, NULL);
}

/*
 * Forget the conflicts recorded for the fact fact_id in index
 * "index_name": it has none left.
 */
void
idx_conflict_resolved(const char *index_name, const bson_value_t *fact_id)
{
	Oid			argtypes[2] = {TEXTOID, TEXTOID};
	Datum		args[2];

	args[0] = CStringGetTextDatum(index_name);
	args[1] = id_text(fact_id);
	conflicts_execute("DELETE FROM idxtable.conflicts "
					  "WHERE index_name OPERATOR(pg_catalog.=) $1 "
					  "AND fact_id OPERATOR(pg_catalog.=) $2",
					  2, argtypes, args, NULL, NULL, NULL);
}

/*
 * idx_conflict_resolved() as an IdxRepairState on_resolved callback.
 */
void
idx_conflict_resolved_callback(IdxRepairState *st,
							   const bson_value_t *fact_id, void *arg)
{
	idx_conflict_resolved(st->def->name, fact_id);
}

/* What idx_conflict_waiting() collects */
typedef struct WaitingRows
{
	MemoryContext cxt;			/* the caller's */
	const char *index_name;		/* whose rows, for messages */
	bool		any;			/* the index has rows */
	int			n;
	bson_t	  **facts;			/* {"v": _id} each */
} WaitingRows;

/*
 * ConflictRowsFn of the query that asks whether an index has rows.
 */
static void
note_any(void *arg)
{
	((WaitingRows *) arg)->any = SPI_processed > 0;
}

/*
 * ConflictRowsFn of the query of the waiting facts: each row's fact_bson,
 * {"_id": <_id>}, as {"v": <_id>} in the caller's context.
 */
static void
collect_waiting(void *arg)
{
	WaitingRows *w = arg;
	MemoryContext old = MemoryContextSwitchTo(w->cxt);
	uint64		i;

	w->facts = palloc(sizeof(bson_t *) * Max(SPI_processed, 1));
	for (i = 0; i < SPI_processed; i++)
	{
		bool		isnull;
		Datum		d = SPI_getbinval(SPI_tuptable->vals[i],
									  SPI_tuptable->tupdesc, 1, &isnull);
		bytea	   *raw;
		bson_t		doc;
		bson_iter_t iter;
		bson_t		wrapped = BSON_INITIALIZER;

		if (isnull)
			continue;
		raw = DatumGetByteaPP(d);
		if (!bson_init_static(&doc, (const uint8_t *) VARDATA_ANY(raw),
							  VARSIZE_ANY_EXHDR(raw)) ||
			!bson_validate(&doc, BSON_VALIDATE_NONE, NULL) ||
			!bson_iter_init_find(&iter, &doc, "_id"))
			ereport(ERROR,
					(errcode(ERRCODE_DATA_CORRUPTED),
					 errmsg("a row of idxtable.conflicts for index \"%s\" has a fact_bson that is not a BSON document with an _id",
							w->index_name),
					 errhint("idxtable.repair_index() on index \"%s\" records its conflicts again.",
							 w->index_name)));
		idx_check_append(bson_append_iter(&wrapped, "v", 1, &iter));
		w->facts[w->n++] = idx_bson_pcopy(&wrapped);
		bson_destroy(&wrapped);
	}
	MemoryContextSwitchTo(old);
}

/*
 * The facts recorded in index "index_name" as in conflict with a key whose
 * claim one of holders[0..n-1] ({"v": _id} each) held: in *facts
 * ({"v": _id} each, palloc'd), returns how many.  Holders are matched by
 * their text (holder_id), as the rows were written; two _ids that only
 * differ after the 100 characters it keeps match both, which costs a
 * needless check, never a miss.  An index without rows costs one query.
 */
int
idx_conflict_waiting(const char *index_name, bson_t **holders, int n,
					 bson_t ***facts)
{
	Oid			argtypes[2] = {TEXTOID, TEXTARRAYOID};
	Datum		args[2];
	Datum	   *texts;
	WaitingRows w;
	int			i;

	memset(&w, 0, sizeof(w));
	w.cxt = CurrentMemoryContext;
	w.index_name = index_name;
	*facts = NULL;
	args[0] = CStringGetTextDatum(index_name);
	conflicts_execute("SELECT 1 FROM idxtable.conflicts "
					  "WHERE index_name OPERATOR(pg_catalog.=) $1 LIMIT 1",
					  1, argtypes, args, NULL, note_any, &w);
	if (!w.any || n == 0)
		return 0;

	texts = palloc(sizeof(Datum) * n);
	for (i = 0; i < n; i++)
	{
		bson_iter_t iter;

		if (!bson_iter_init_find(&iter, holders[i], "v"))
			elog(ERROR, "invalid fact _id");
		texts[i] = id_text(bson_iter_value(&iter));
	}
	args[1] = PointerGetDatum(construct_array(texts, n, TEXTOID, -1, false,
											  TYPALIGN_INT));
	conflicts_execute("SELECT fact_bson FROM idxtable.conflicts "
					  "WHERE index_name OPERATOR(pg_catalog.=) $1 "
					  "AND holder_id OPERATOR(pg_catalog.=) ANY ($2)",
					  2, argtypes, args, NULL, collect_waiting, &w);
	*facts = w.facts;
	return w.n;
}

/*
 * idx_conflict_waiting() as an IdxRepairState on_waiters callback, for the
 * applier.
 */
int
idx_conflict_waiting_callback(IdxRepairState *st, bson_t **holders, int n,
							  bson_t ***facts, void *arg)
{
	return idx_conflict_waiting(st->def->name, holders, n, facts);
}
