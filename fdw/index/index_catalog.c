/*-------------------------------------------------------------------------
 *
 * index_catalog.c
 *		  Reading index-table definitions from idxtable.index_defs.
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/index/index_catalog.c
 *
 * idx_get_indexes() runs at planning time for every foreign table, so
 * each backend caches the resolved definitions per table, invalidated
 * through the relcache (see "The per-backend cache" below).  A miss reads
 * the small definitions table directly (a heap scan with a key on "tbl",
 * no SPI), with a fresh MVCC snapshot rather than the statement's: a
 * query that waited for drop_index() (which locks the foreign table) must
 * see the definition gone, as it would see a dropped PostgreSQL index
 * (during a parallel operation, which cannot take one, the query's).
 *
 * Definitions name their key columns by name ("town", "lower(name)"),
 * as written and normalized by create_index().  They are resolved against
 * the table's current columns on every read; a definition that no longer
 * resolves (a column was dropped, renamed or changed to a type that cannot
 * be a key) is returned with state IDX_STATE_FAILED, with one WARNING per
 * backend, and can only be dropped.  So is one whose index collection is
 * not its own (index_owner.c checks the ownership markers, once per
 * backend per definition).  States 'building' and 'stale' (written by
 * the applier when a change stream cannot resume) are maintained by
 * writes but not used by reads.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <ctype.h>

#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/stratnum.h"
#include "access/table.h"
#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/pg_type.h"
#include "commands/defrem.h"
#include "commands/trigger.h"
#include "foreign/foreign.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "parser/scansup.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/datum.h"
#include "utils/fmgroids.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"
#include "utils/uuid.h"

#include "core/convert.h"
#include "core/option.h"
#include "index/index_catalog.h"
#include "index/index_collate.h"
#include "index/index_ddl.h"
#include "index/index_key_type.h"
#include "index/index_notify.h"
#include "index/index_owner.h"

PG_FUNCTION_INFO_V1(idxtable_index_defs_changed);

/* Entry field names "k0".."k31" and "i0".."i31", built on first use */
static char key_field_names[INDEX_MAX_KEYS][8];
static char include_field_names[INDEX_MAX_KEYS][8];
static bool field_names_ready = false;

/* Definitions already warned about in this backend ("relid/name") */
static List *warned_definitions = NIL;

/*
 * Fill the static field-name tables.
 */
static void
init_field_names(void)
{
	int			i;

	for (i = 0; i < INDEX_MAX_KEYS; i++)
	{
		snprintf(key_field_names[i], sizeof(key_field_names[i]), "k%d", i);
		snprintf(include_field_names[i], sizeof(include_field_names[i]),
				 "i%d", i);
	}
	field_names_ready = true;
}

/*
 * Name of key component i inside an entry's _id.
 */
const char *
idx_key_field(int i)
{
	if (i < 0 || i >= INDEX_MAX_KEYS)
		elog(ERROR, "index key number %d out of range", i);
	if (!field_names_ready)
		init_field_names();
	return key_field_names[i];
}

/*
 * Name of included column i inside an entry's "v".
 */
const char *
idx_include_field(int i)
{
	if (i < 0 || i >= INDEX_MAX_KEYS)
		elog(ERROR, "included column number %d out of range", i);
	if (!field_names_ready)
		init_field_names();
	return include_field_names[i];
}

/*
 * OID of idxtable.index_defs (two syscache lookups), or InvalidOid.
 */
Oid
idx_index_defs_relid(void)
{
	Oid			nspid = get_namespace_oid(IDX_CATALOG_SCHEMA, true);

	if (!OidIsValid(nspid))
		return InvalidOid;
	return get_relname_relid(IDX_CATALOG_TABLE, nspid);
}

/*
 * The MongoDB database of a foreign table.
 */
char *
idx_table_database(Oid relid)
{
	char	   *database;

	idx_table_namespace(relid, &database, NULL);
	return database;
}


/* ----------------------------------------------------------------
 *		Key specifications
 * ----------------------------------------------------------------
 */

/*
 * Parse an SQL identifier at *p: "quoted" (with "" for a quote) or
 * unquoted (downcased), truncated to NAMEDATALEN - 1 bytes as the parser
 * would.  Returns NULL if there is none; advances *p past it.
 */
static char *
parse_identifier(const char **p)
{
	const char *s = *p;
	char	   *result;

	if (*s == '"')
	{
		StringInfoData buf;

		initStringInfo(&buf);
		for (s++;; s++)
		{
			if (*s == '\0')
				return NULL;
			if (*s == '"')
			{
				if (s[1] != '"')
					break;
				s++;
			}
			appendStringInfoChar(&buf, *s);
		}
		if (buf.len == 0)
			return NULL;
		truncate_identifier(buf.data, buf.len, false);
		*p = s + 1;
		return buf.data;
	}

	if (!(isalpha((unsigned char) *s) || *s == '_' || IS_HIGHBIT_SET(*s)))
		return NULL;
	while (isalnum((unsigned char) *s) || *s == '_' || *s == '$' ||
		   IS_HIGHBIT_SET(*s))
		s++;
	result = downcase_identifier(*p, s - *p, false, true);
	*p = s;
	return result;
}

/* Skip blanks */
static const char *
skip_space(const char *s)
{
	while (scanner_isspace(*s))
		s++;
	return s;
}

/*
 * Parse a key specification: "col", "lower(col)" or "upper(col)", with
 * SQL identifier rules and optional blanks.  Returns false on bad syntax.
 */
static bool
parse_key_spec(const char *spec, IdxKeyKind *kind, char **column)
{
	const char *p = skip_space(spec);
	char	   *first = parse_identifier(&p);

	if (first == NULL)
		return false;
	p = skip_space(p);
	if (*p == '\0')
	{
		*kind = IDX_KEY_COLUMN;
		*column = first;
		return true;
	}
	if (*p != '(')
		return false;
	if (strcmp(first, "lower") == 0)
		*kind = IDX_KEY_LOWER;
	else if (strcmp(first, "upper") == 0)
		*kind = IDX_KEY_UPPER;
	else
		return false;
	p = skip_space(p + 1);
	*column = parse_identifier(&p);
	if (*column == NULL)
		return false;
	p = skip_space(p);
	if (*p != ')')
		return false;
	p = skip_space(p + 1);
	return *p == '\0';
}

/*
 * The normalized text of a key specification.
 */
static char *
normalize_key_spec(IdxKeyKind kind, const char *column)
{
	const char *quoted = quote_identifier(column);

	switch (kind)
	{
		case IDX_KEY_LOWER:
			return psprintf("lower(%s)", quoted);
		case IDX_KEY_UPPER:
			return psprintf("upper(%s)", quoted);
		case IDX_KEY_COLUMN:
			break;
	}
	return pstrdup(quoted);
}

/*
 * Fill *err and return false (for the resolve functions).  The message and
 * hint are whole sentences, translated where they are made (_()), because
 * they are reported later: as an ERROR by create_index, or as the reason
 * of a WARNING that an existing index cannot be used.
 */
static bool
def_error(IdxDefError *err, int sqlstate, char *message, char *hint)
{
	err->sqlstate = sqlstate;
	err->message = message;
	err->hint = hint;
	return false;
}

/*
 * A non-dropped column by name, or NULL.
 */
static Form_pg_attribute
find_column(TupleDesc tupdesc, const char *name)
{
	int			i;

	for (i = 0; i < tupdesc->natts; i++)
	{
		Form_pg_attribute attr = TupleDescAttr(tupdesc, i);

		if (!attr->attisdropped && strcmp(NameStr(attr->attname), name) == 0)
			return attr;
	}
	return NULL;
}

/*
 * Resolve one key specification into *key.
 */
static bool
resolve_key(TupleDesc tupdesc, const char *relname, const char *spec,
			IdxIndexKey *key, char **normalized, IdxDefError *err)
{
	IdxKeyKind	kind;
	char	   *colname;
	Form_pg_attribute attr;
	Oid			elemtype;

	if (!parse_key_spec(spec, &kind, &colname))
		return def_error(err, ERRCODE_INVALID_PARAMETER_VALUE,
						 psprintf(_("invalid index key \"%s\""), spec),
						 pstrdup(_("An index key is a column name, lower(column) or upper(column).")));

	attr = find_column(tupdesc, colname);
	if (attr == NULL)
		return def_error(err, ERRCODE_UNDEFINED_COLUMN,
						 psprintf(_("column \"%s\" of relation \"%s\" does not exist"),
								  colname, relname),
						 NULL);

	memset(key, 0, sizeof(IdxIndexKey));
	key->attnum = attr->attnum;
	key->kind = kind;
	key->collation = attr->attcollation;
	key->keytype = attr->atttypid;
	elemtype = get_element_type(attr->atttypid);
	if (OidIsValid(elemtype))
	{
		key->multi = true;
		key->keytype = elemtype;
	}

	if (!idx_key_type_supported(key->keytype))
		return def_error(err, ERRCODE_FEATURE_NOT_SUPPORTED,
						 psprintf(_("column \"%s\" of type %s cannot be an index key"),
								  colname, format_type_be(attr->atttypid)),
						 psprintf(_("Index keys can be of type %s, or one-dimensional arrays of those (multi-valued keys)."),
								  idx_key_type_list()));

	if (kind != IDX_KEY_COLUMN)
	{
		if (key->multi ||
			(key->keytype != TEXTOID && key->keytype != VARCHAROID))
			return def_error(err, ERRCODE_INVALID_PARAMETER_VALUE,
							 psprintf(_("%s() cannot be applied to column \"%s\" of type %s"),
									  kind == IDX_KEY_LOWER ? "lower" : "upper",
									  colname, format_type_be(attr->atttypid)),
							 pstrdup(_("lower() and upper() keys need a text or varchar column.")));
		key->keytype = TEXTOID; /* what lower() and upper() return */
	}
	key->sortcoll = idx_key_sortcoll(key);

	if (normalized)
		*normalized = normalize_key_spec(kind, colname);
	return true;
}

/*
 * Resolve one included column name.
 */
static bool
resolve_include(TupleDesc tupdesc, const char *relname, const char *spec,
				AttrNumber *attnum, IdxDefError *err)
{
	const char *p = skip_space(spec);
	char	   *colname = parse_identifier(&p);
	Form_pg_attribute attr;

	if (colname == NULL || *skip_space(p) != '\0')
		return def_error(err, ERRCODE_INVALID_PARAMETER_VALUE,
						 psprintf(_("invalid included column \"%s\""), spec),
						 pstrdup(_("INCLUDE lists column names.")));
	attr = find_column(tupdesc, colname);
	if (attr == NULL)
		return def_error(err, ERRCODE_UNDEFINED_COLUMN,
						 psprintf(_("column \"%s\" of relation \"%s\" does not exist"),
								  colname, relname),
						 NULL);
	if (!idx_type_is_supported(attr->atttypid))
		return def_error(err, ERRCODE_FEATURE_NOT_SUPPORTED,
						 psprintf(_("column \"%s\" of type %s cannot be included"),
								  colname, format_type_be(attr->atttypid)),
						 NULL);
	*attnum = attr->attnum;
	return true;
}

/*
 * Resolve and check a whole definition (see index_ddl.h).  Besides the
 * per-column checks: at most INDEX_MAX_KEYS columns in all, no key twice,
 * one multi-valued key at most, and no included column that is also a
 * plain key (an included column may be the argument of a lower()/upper()
 * key: the entry then holds the original text as well).
 */
bool
idx_resolve_definition(IdxIndexDef *def, TupleDesc tupdesc,
					   const char *relname, char **keyspecs, int nkeys,
					   char **includes, int ninclude, char **normalized,
					   IdxDefError *err)
{
	int			nmulti = 0;
	int			i;
	int			j;

	if (nkeys == 0)
		return def_error(err, ERRCODE_INVALID_PARAMETER_VALUE,
						 pstrdup(_("an index needs at least one key")), NULL);
	if (nkeys + ninclude > INDEX_MAX_KEYS)
		return def_error(err, ERRCODE_PROGRAM_LIMIT_EXCEEDED,
						 psprintf(_("cannot use more than %d columns in an index"),
								  INDEX_MAX_KEYS),
						 NULL);

	def->nkeys = nkeys;
	def->keys = (IdxIndexKey *) palloc0(sizeof(IdxIndexKey) * nkeys);
	def->ninclude = ninclude;
	def->include = (AttrNumber *) palloc0(sizeof(AttrNumber) * Max(ninclude, 1));

	for (i = 0; i < nkeys; i++)
	{
		if (!resolve_key(tupdesc, relname, keyspecs[i], &def->keys[i],
						 normalized ? &normalized[i] : NULL, err))
			return false;
		for (j = 0; j < i; j++)
		{
			if (def->keys[j].attnum == def->keys[i].attnum &&
				def->keys[j].kind == def->keys[i].kind)
				return def_error(err, ERRCODE_DUPLICATE_COLUMN,
								 psprintf(_("index key \"%s\" appears more than once"),
										  keyspecs[i]),
								 NULL);
		}
		if (def->keys[i].multi)
			nmulti++;
	}
	if (nmulti > 1)
		return def_error(err, ERRCODE_FEATURE_NOT_SUPPORTED,
						 pstrdup(_("an index can have only one multi-valued (array) key")),
						 NULL);

	for (i = 0; i < ninclude; i++)
	{
		AttrNumber	attnum;

		if (!resolve_include(tupdesc, relname, includes[i], &attnum, err))
			return false;
		for (j = 0; j < nkeys; j++)
		{
			if (def->keys[j].attnum == attnum &&
				def->keys[j].kind == IDX_KEY_COLUMN)
				return def_error(err, ERRCODE_DUPLICATE_COLUMN,
								 psprintf(_("included column \"%s\" is already an index key"),
										  includes[i]),
								 NULL);
		}
		for (j = 0; j < i; j++)
		{
			if (def->include[j] == attnum)
				return def_error(err, ERRCODE_DUPLICATE_COLUMN,
								 psprintf(_("column \"%s\" is included more than once"),
										  includes[i]),
								 NULL);
		}
		def->include[i] = attnum;
	}
	return true;
}

/*
 * Column names of the keys joined by "_", for default index names.
 */
char *
idx_key_columns_for_name(const IdxIndexDef *def)
{
	StringInfoData buf;
	int			k;

	initStringInfo(&buf);
	for (k = 0; k < def->nkeys; k++)
	{
		if (k > 0)
			appendStringInfoChar(&buf, '_');
		appendStringInfoString(&buf, get_attname(def->relid,
												 def->keys[k].attnum, false));
	}
	return buf.data;
}


/* ----------------------------------------------------------------
 *		Reading the definitions
 * ----------------------------------------------------------------
 */

/*
 * The elements of a text[] datum as C strings.
 */
static char **
text_array_strings(Datum array, int *count)
{
	Datum	   *elems;
	bool	   *nulls;
	char	  **result;
	int			n;
	int			i;

	deconstruct_array(DatumGetArrayTypeP(array), TEXTOID, -1, false,
					  TYPALIGN_INT, &elems, &nulls, &n);
	result = (char **) palloc(sizeof(char *) * Max(n, 1));
	for (i = 0; i < n; i++)
		result[i] = nulls[i] ? pstrdup("") : TextDatumGetCString(elems[i]);
	*count = n;
	return result;
}

/*
 * Warn, once per backend, that a definition no longer resolves.
 */
static void
warn_unusable(const IdxIndexDef *def, const char *relname,
			  const IdxDefError *err)
{
	char	   *tag = psprintf("%u/%s", def->relid, def->name);
	ListCell   *lc;
	MemoryContext oldcxt;

	foreach(lc, warned_definitions)
	{
		if (strcmp((char *) lfirst(lc), tag) == 0)
			return;
	}
	oldcxt = MemoryContextSwitchTo(TopMemoryContext);
	warned_definitions = lappend(warned_definitions, pstrdup(tag));
	MemoryContextSwitchTo(oldcxt);

	ereport(WARNING,
			(errmsg("index \"%s\" on foreign table \"%s\" cannot be used: %s",
					def->name, relname, err->message),
			 errhint("Drop it with idxtable.drop_index() and create it again.")));
}

/*
 * One index_defs row, before its key specifications are resolved.
 */
typedef struct DefRow
{
	IdxIndexDef *def;
	char	  **keyspecs;
	int			nkeys;
	char	  **includes;
	int			ninclude;
	Datum		key_collations;	/* regcollation[], or 0 (NULL) */
	Datum		collation_versions; /* text[], or 0 (NULL) */
} DefRow;

/*
 * Turn one index_defs row into an unresolved definition (the database is
 * filled in later).
 */
static DefRow *
row_to_definition(Datum *values, bool *nulls, Oid relid)
{
	DefRow	   *row = (DefRow *) palloc0(sizeof(DefRow));
	IdxIndexDef *def = (IdxIndexDef *) palloc0(sizeof(IdxIndexDef));
	char	   *state;

	def->name = TextDatumGetCString(values[Anum_index_defs_name - 1]);
	def->relid = relid;
	def->collection = TextDatumGetCString(values[Anum_index_defs_collection - 1]);
	def->unique = DatumGetBool(values[Anum_index_defs_is_unique - 1]);
	def->sharding = TextDatumGetCString(values[Anum_index_defs_sharding - 1]);
	def->entries = nulls[Anum_index_defs_entries - 1] ? -1 :
		(double) DatumGetInt64(values[Anum_index_defs_entries - 1]);
	def->distinct_keys = nulls[Anum_index_defs_distinct_keys - 1] ? -1 :
		(double) DatumGetInt64(values[Anum_index_defs_distinct_keys - 1]);
	def->definition_id =
		DatumGetCString(DirectFunctionCall1(uuid_out,
											values[Anum_index_defs_definition_id - 1]));

	state = TextDatumGetCString(values[Anum_index_defs_state - 1]);
	if (strcmp(state, "valid") == 0)
		def->state = IDX_STATE_VALID;
	else if (strcmp(state, "building") == 0)
		def->state = IDX_STATE_BUILDING;
	else if (strcmp(state, "stale") == 0)
		def->state = IDX_STATE_STALE;
	else
		def->state = IDX_STATE_FAILED;

	row->def = def;
	row->keyspecs = text_array_strings(values[Anum_index_defs_keys - 1],
									   &row->nkeys);
	row->includes = text_array_strings(values[Anum_index_defs_include - 1],
									   &row->ninclude);
	/* copies: the tuple's page is released before the keys are resolved */
	if (!nulls[Anum_index_defs_key_collations - 1])
		row->key_collations =
			datumCopy(values[Anum_index_defs_key_collations - 1], false, -1);
	if (!nulls[Anum_index_defs_collation_versions - 1])
		row->collation_versions =
			datumCopy(values[Anum_index_defs_collation_versions - 1], false, -1);
	return row;
}

/*
 * Resolve a definition against "ftrel", whose documents are in the
 * collection "collection".  An index collection is named after the fact
 * collection it was built from, so a table that now reads another
 * collection (changed option, or a renamed table without the option) has
 * an unusable index, as has one whose columns no longer resolve.
 */
static void
resolve_row(DefRow *row, Relation ftrel, const char *collection)
{
	IdxIndexDef *def = row->def;
	char	   *prefix = psprintf("%s%s.", IDX_COLLECTION_PREFIX, collection);
	IdxDefError err;
	bool		ok;

	if (strncmp(def->collection, prefix, strlen(prefix)) != 0)
	{
		err.message = psprintf(_("the table's collection is now \"%s\""),
							   collection);
		ok = false;
	}
	else
		ok = idx_resolve_definition(def, RelationGetDescr(ftrel),
									RelationGetRelationName(ftrel),
									row->keyspecs, row->nkeys,
									row->includes, row->ninclude,
									NULL, &err);
	if (!ok)
	{
		if (def->state != IDX_STATE_FAILED)
			warn_unusable(def, RelationGetRelationName(ftrel), &err);
		def->state = IDX_STATE_FAILED;
	}
}

/*
 * Give the resolved keys of a row the collations their entries were
 * written under (not the columns' current ones: entries keep their form
 * until rebuilt), and see whether a collation's version has changed since.
 */
static void
apply_key_collations(DefRow *row, const char *relname)
{
	IdxIndexDef *def = row->def;
	Datum	   *colls = NULL;
	bool	   *collnulls = NULL;
	char	  **versions = NULL;
	int			ncolls = 0;
	int			nversions = 0;
	int			k;

	if (row->key_collations)
		deconstruct_array(DatumGetArrayTypeP(row->key_collations),
						  REGCOLLATIONOID, sizeof(Oid), true, TYPALIGN_INT,
						  &colls, &collnulls, &ncolls);
	if (row->collation_versions)
	{
		Datum	   *elems;
		bool	   *elemnulls;

		deconstruct_array(DatumGetArrayTypeP(row->collation_versions),
						  TEXTOID, -1, false, TYPALIGN_INT,
						  &elems, &elemnulls, &nversions);
		versions = palloc0(sizeof(char *) * Max(nversions, 1));
		for (k = 0; k < nversions; k++)
			versions[k] = elemnulls[k] ? NULL : TextDatumGetCString(elems[k]);
	}
	for (k = 0; k < def->nkeys; k++)
	{
		IdxIndexKey *key = &def->keys[k];
		const char *now;
		const char *then;

		key->sortcoll = InvalidOid;
		if (k >= ncolls || collnulls[k] || key->kind != IDX_KEY_COLUMN ||
			key->multi ||
			(key->keytype != TEXTOID && key->keytype != VARCHAROID))
			continue;
		key->sortcoll = DatumGetObjectId(colls[k]);
		if (!SearchSysCacheExists1(COLLOID, colls[k]))
		{
			IdxDefError err;

			err.message = psprintf(_("the collation of its key \"%s\" no longer exists"),
								   get_attname(def->relid, key->attnum, false));
			warn_unusable(def, relname, &err);
			def->state = IDX_STATE_FAILED;
			return;
		}
		now = idx_collation_version(key->sortcoll);
		then = k < nversions ? versions[k] : NULL;
		if ((now == NULL) != (then == NULL) ||
			(now && strcmp(now, then) != 0))
			def->collation_changed = true;
	}
}

/* list_sort comparator: rows by index name */
static int
row_name_cmp(const ListCell *a, const ListCell *b)
{
	return strcmp(((DefRow *) lfirst(a))->def->name,
				  ((DefRow *) lfirst(b))->def->name);
}

/*
 * Read the definitions of a foreign table from index_defs (open, locked,
 * as "defs") and resolve them, in the current memory context, without the
 * ownership check.  Reads with a fresh MVCC snapshot (see the file
 * header); during a parallel operation, which cannot take one, with the
 * query's.
 */
static List *
read_definitions(Relation defs, Oid relid)
{
	TableScanDesc scan;
	ScanKeyData skey;
	Snapshot	snapshot;
	HeapTuple	tuple;
	List	   *rows = NIL;
	List	   *result = NIL;
	ListCell   *lc;

	snapshot = RegisterSnapshot(IsInParallelMode() ? GetActiveSnapshot() :
								GetLatestSnapshot());
	ScanKeyInit(&skey, Anum_index_defs_tbl, BTEqualStrategyNumber, F_OIDEQ,
				ObjectIdGetDatum(relid));
	scan = table_beginscan(defs, snapshot, 1, &skey);
	while ((tuple = heap_getnext(scan, ForwardScanDirection)) != NULL)
	{
		Datum		values[Natts_index_defs];
		bool		nulls[Natts_index_defs];

		heap_deform_tuple(tuple, RelationGetDescr(defs), values, nulls);
		rows = lappend(rows, row_to_definition(values, nulls, relid));
	}
	table_endscan(scan);
	UnregisterSnapshot(snapshot);

	if (rows != NIL)
	{
		Relation	ftrel = table_open(relid, AccessShareLock);
		char	   *database;
		char	   *collection;

		idx_table_namespace(relid, &database, &collection);
		list_sort(rows, row_name_cmp);
		foreach(lc, rows)
		{
			DefRow	   *row = (DefRow *) lfirst(lc);

			row->def->database = database;
			resolve_row(row, ftrel, collection);
			if (row->def->state != IDX_STATE_FAILED)
				apply_key_collations(row, RelationGetRelationName(ftrel));
			result = lappend(result, row->def);
		}
		table_close(ftrel, AccessShareLock);
	}
	return result;
}


/* ----------------------------------------------------------------
 *		The per-backend cache of definitions
 *
 * Planning reads the definitions of every foreign table it sees, so each
 * backend keeps them, resolved, per table: a hash table from the table's
 * OID to the list, each entry with a memory context of its own.  An entry
 * goes when the table's relcache entry is invalidated: every change of
 * index_defs does that for the table of the changed row (the trigger
 * idxtable.index_defs_changed() calls idx_index_defs_changed(), below,
 * for every writer: create_index and drop_index, ANALYZE's statistics,
 * the applier's state changes, pg_restore, a superuser's UPDATE), and so
 * does every ALTER of the table itself (columns, options).  Everything
 * goes on a relcache reset, an invalidation of index_defs itself
 * (TRUNCATE, DROP EXTENSION) and a change of any foreign server (its
 * "database" option), foreign table row or collation.  Every read first
 * processes the invalidations that have arrived, so a planning sees what was
 * committed before it, as the heap scan it replaces did (a query that
 * waited for drop_index's lock included); one's own changes are seen
 * from the next command on.
 *
 * Callers get a list of their own, but the strings and arrays inside
 * stay the cache's: an invalidated entry's context is therefore moved
 * under TopTransactionContext, which goes at the end of the transaction
 * (after every transaction callback; no caller keeps a definition
 * longer).  An entry read while an invalidation arrived (the
 * read itself takes locks, which processes them) is not kept, since it
 * may predate the change; nor is one read with the query's snapshot (in
 * parallel mode), nor any in a background worker: the applier runs no
 * planner, and reads the latest definitions every time.
 * ----------------------------------------------------------------
 */

typedef struct DefsCacheEntry
{
	Oid			relid;			/* hash key */
	MemoryContext cxt;			/* holds defs and everything they point to */
	List	   *defs;			/* resolved IdxIndexDefs, by name */
	bool		owners_checked; /* defs carry the ownership verdicts */
} DefsCacheEntry;

static HTAB *defs_cache = NULL;

/* OID of index_defs while known, or InvalidOid */
static Oid	cached_defs_relid = InvalidOid;

/* Bumped by every invalidation callback (reads compare it) */
static uint64 defs_inval_count = 0;

/*
 * Drop an entry's context: at the end of the transaction (see above), at
 * once outside one.
 */
static void
retire_context(MemoryContext cxt)
{
	if (TopTransactionContext != NULL)
		MemoryContextSetParent(cxt, TopTransactionContext);
	else
		MemoryContextDelete(cxt);
}

/*
 * Drop every entry.
 */
static void
flush_all_definitions(void)
{
	HASH_SEQ_STATUS scan;
	DefsCacheEntry *entry;

	cached_defs_relid = InvalidOid;
	if (defs_cache == NULL)
		return;
	hash_seq_init(&scan, defs_cache);
	while ((entry = hash_seq_search(&scan)) != NULL)
	{
		retire_context(entry->cxt);
		hash_search(defs_cache, &entry->relid, HASH_REMOVE, NULL);
	}
}

/*
 * Relcache invalidation: drop the table's entry, or everything.
 */
static void
defs_relcache_callback(Datum arg, Oid relid)
{
	DefsCacheEntry *entry;

	defs_inval_count++;
	if (!OidIsValid(relid) || relid == cached_defs_relid)
	{
		flush_all_definitions();
		return;
	}
	if (defs_cache == NULL)
		return;
	entry = hash_search(defs_cache, &relid, HASH_FIND, NULL);
	if (entry != NULL)
	{
		retire_context(entry->cxt);
		hash_search(defs_cache, &relid, HASH_REMOVE, NULL);
	}
}

/*
 * Syscache invalidation of a foreign server, a foreign table or a
 * collation (a key's): drop everything (rare).
 */
static void
defs_syscache_callback(Datum arg, int cacheid, uint32 hashvalue)
{
	defs_inval_count++;
	flush_all_definitions();
}

/*
 * Create the hash table and register the callbacks, once per backend.
 */
static void
init_defs_cache(void)
{
	HASHCTL		ctl;

	ctl.keysize = sizeof(Oid);
	ctl.entrysize = sizeof(DefsCacheEntry);
	ctl.hcxt = CacheMemoryContext;
	defs_cache = hash_create("idxtable_fdw index definitions", 64, &ctl,
							 HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
	CacheRegisterRelcacheCallback(defs_relcache_callback, (Datum) 0);
	CacheRegisterSyscacheCallback(FOREIGNSERVEROID, defs_syscache_callback,
								  (Datum) 0);
	CacheRegisterSyscacheCallback(FOREIGNTABLEREL, defs_syscache_callback,
								  (Datum) 0);
	CacheRegisterSyscacheCallback(COLLOID, defs_syscache_callback,
								  (Datum) 0);
}

/*
 * OID of index_defs, remembered until an invalidation.
 */
static Oid
defs_relid(void)
{
	if (!OidIsValid(cached_defs_relid))
		cached_defs_relid = idx_index_defs_relid();
	return cached_defs_relid;
}

/*
 * The cached definitions of a table (any state, before the ownership
 * check), read into the cache first if needed.  The list and everything
 * in it belong to the cache: callers copy the structs they change.
 */
static List *
cached_definitions(Oid relid)
{
	Oid			defsrel;
	DefsCacheEntry *entry;
	Relation	defs;
	MemoryContext cxt;
	MemoryContext oldcxt;
	List	   *result;
	uint64		inval_count;
	bool		use_cache;

	if (defs_cache == NULL)
		init_defs_cache();
	/* changes committed since the last lock taken (cheap if none) */
	AcceptInvalidationMessages();
	defsrel = defs_relid();
	if (!OidIsValid(defsrel))
		return NIL;
	/* background workers (the applier) do not plan: they read each time */
	use_cache = MyBackendType == B_BACKEND && !IsInParallelMode();
	entry = use_cache ? hash_search(defs_cache, &relid, HASH_FIND, NULL) : NULL;
	if (entry != NULL)
		return entry->defs;

	inval_count = defs_inval_count;
	defs = table_open(defsrel, AccessShareLock);
	if (RelationGetDescr(defs)->natts != Natts_index_defs)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("catalog table %s.%s has %d columns where %d are expected",
						IDX_CATALOG_SCHEMA, IDX_CATALOG_TABLE,
						RelationGetDescr(defs)->natts, Natts_index_defs),
				 errhint("The library of idxtable_fdw and its SQL objects must come from the same version.")));
	/* a child of the caller's context until complete: errors free it */
	cxt = AllocSetContextCreate(CurrentMemoryContext,
								"idxtable_fdw index definitions",
								ALLOCSET_SMALL_SIZES);
	oldcxt = MemoryContextSwitchTo(cxt);
	result = read_definitions(defs, relid);
	MemoryContextSwitchTo(oldcxt);
	table_close(defs, AccessShareLock);

	MemoryContextSetParent(cxt, CacheMemoryContext);
	if (!use_cache || inval_count != defs_inval_count)
	{
		retire_context(cxt);	/* possibly outdated: used once */
		return result;
	}
	entry = hash_search(defs_cache, &relid, HASH_ENTER, NULL);
	entry->cxt = cxt;
	entry->defs = result;
	entry->owners_checked = false;
	return result;
}

/*
 * Ownership verdicts never change for a definition in a backend
 * (index_owner.c caches them by server, collection and definition id, all
 * fixed for a cache entry): once "checked" (copies of the entry's "defs",
 * in order) are judged, store the verdicts in the entry, unless it went
 * meanwhile, so that the next reads skip the check.
 */
static void
remember_verdicts(Oid relid, List *defs, List *checked)
{
	DefsCacheEntry *entry;
	ListCell   *lc1;
	ListCell   *lc2;

	if (defs_cache == NULL || MyBackendType != B_BACKEND)
		return;
	entry = hash_search(defs_cache, &relid, HASH_FIND, NULL);
	if (entry == NULL || entry->defs != defs)
		return;
	forboth(lc1, entry->defs, lc2, checked)
	{
		IdxIndexDef *def = lfirst(lc1);
		IdxIndexDef *judged = lfirst(lc2);

		def->state = judged->state;
		if (judged->owner_problem != NULL)
			def->owner_problem = MemoryContextStrdup(entry->cxt,
													 judged->owner_problem);
	}
	entry->owners_checked = true;
}

/*
 * Has the cached list "defs" of the table its ownership verdicts?
 */
static bool
verdicts_known(Oid relid, List *defs)
{
	DefsCacheEntry *entry;

	if (defs_cache == NULL || MyBackendType != B_BACKEND)
		return false;
	entry = hash_search(defs_cache, &relid, HASH_FIND, NULL);
	return entry != NULL && entry->defs == defs && entry->owners_checked;
}

/*
 * All index definitions of a foreign table, in any state, by name; those
 * whose index collection is not theirs are failed (index_owner.c).  The
 * structs are the caller's (palloc'd), what they point to the cache's.
 */
List *
idx_get_indexes(Oid relid, Oid userid)
{
	List	   *defs = cached_definitions(relid);
	List	   *result = NIL;
	IdxIndexDef *copies;
	ListCell   *lc;

	if (defs == NIL)
		return NIL;
	copies = palloc(sizeof(IdxIndexDef) * list_length(defs));
	foreach(lc, defs)
	{
		IdxIndexDef *def = &copies[foreach_current_index(lc)];

		memcpy(def, lfirst(lc), sizeof(IdxIndexDef));
		result = lappend(result, def);
	}
	/* collections that are not their index's make it unusable */
	if (!verdicts_known(relid, defs) &&
		idx_owner_check_indexes(relid, userid, result))
		remember_verdicts(relid, defs, result);
	return result;
}

/*
 * The number of facts a valid index table of the table counted (its
 * "entries", from its build or the latest ANALYZE), or -1 if none can
 * tell: only an index without a multi-valued key has one entry per fact.
 * With several, the largest count (the newest, for a growing table).
 * No ownership check: the count is the catalog's own.
 */
double
idx_indexed_fact_count(Oid relid)
{
	double		result = -1;
	ListCell   *lc;

	foreach(lc, cached_definitions(relid))
	{
		IdxIndexDef *def = lfirst(lc);
		bool		multi = false;
		int			k;

		if (def->state != IDX_STATE_VALID || def->entries < 0)
			continue;
		for (k = 0; k < def->nkeys; k++)
			multi |= def->keys[k].multi;
		if (!multi)
			result = Max(result, def->entries);
	}
	return result;
}

/*
 * Does a foreign table of server "serverid" other than "relid" have index
 * tables (in any state but failed) over fact collection "collection" of
 * MongoDB database "database"?  A write through "relid" then leaves
 * theirs to the applier (xact_marker.c).  The answer is kept per table
 * until any invalidation the definitions cache sees (the rows of other
 * tables matter, so any at all).
 */
bool
idx_collection_shared(Oid relid, Oid serverid, const char *database,
					  const char *collection)
{
	static Oid	known_relid = InvalidOid;
	static bool known_result;
	static uint64 known_inval = 0;
	Relation	defs;
	TableScanDesc scan;
	Snapshot	snapshot;
	HeapTuple	tuple;
	List	   *others = NIL;
	ListCell   *lc;
	bool		result = false;

	if (defs_cache == NULL)
		init_defs_cache();
	AcceptInvalidationMessages();
	if (known_relid == relid && known_inval == defs_inval_count)
		return known_result;
	if (!OidIsValid(defs_relid()))
		return false;
	known_inval = defs_inval_count;
	defs = table_open(defs_relid(), AccessShareLock);
	snapshot = RegisterSnapshot(GetLatestSnapshot());
	scan = table_beginscan(defs, snapshot, 0, NULL);
	while ((tuple = heap_getnext(scan, ForwardScanDirection)) != NULL)
	{
		bool		isnull;
		Oid			tbl = DatumGetObjectId(heap_getattr(tuple, Anum_index_defs_tbl,
														RelationGetDescr(defs),
														&isnull));
		char	   *state = TextDatumGetCString(heap_getattr(tuple, Anum_index_defs_state,
															 RelationGetDescr(defs),
															 &isnull));

		if (tbl != relid && strcmp(state, "failed") != 0)
			others = list_append_unique_oid(others, tbl);
	}
	table_endscan(scan);
	UnregisterSnapshot(snapshot);
	table_close(defs, AccessShareLock);

	foreach(lc, others)
	{
		Oid			tbl = lfirst_oid(lc);
		char	   *db;
		char	   *coll;

		if (!SearchSysCacheExists1(FOREIGNTABLEREL, ObjectIdGetDatum(tbl)) ||
			GetForeignTable(tbl)->serverid != serverid)
			continue;
		idx_table_namespace(tbl, &db, &coll);
		if (strcmp(db, database) == 0 && strcmp(coll, collection) == 0)
			result = true;
	}
	list_free(others);
	if (known_inval == defs_inval_count)
	{
		known_relid = relid;
		known_result = result;
	}
	else
		known_relid = InvalidOid;
	return result;
}

/*
 * idxtable.index_defs_changed(): the row trigger of index_defs.  Every
 * change of a definition invalidates the relcache entry of its table (of
 * the old and the new row's), at commit for the other backends, at the
 * next command for this one: cached definitions and cached plans of the
 * table are then rebuilt.  A table already dropped needs nothing.  A
 * deleted definition is noted as index DDL (idx_note_index_change): the
 * change-stream workers learn at commit that a table lost index tables,
 * also when DROP FOREIGN TABLE's event trigger deleted them.
 */
Datum
idxtable_index_defs_changed(PG_FUNCTION_ARGS)
{
	TriggerData *trigdata = (TriggerData *) fcinfo->context;
	HeapTuple	tuples[2];
	int			i;

	if (!CALLED_AS_TRIGGER(fcinfo) ||
		!TRIGGER_FIRED_FOR_ROW(trigdata->tg_event) ||
		RelationGetRelid(trigdata->tg_relation) != idx_index_defs_relid())
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("function %s must be fired as a row trigger of %s.%s",
						"idxtable.index_defs_changed()",
						IDX_CATALOG_SCHEMA, IDX_CATALOG_TABLE)));

	tuples[0] = trigdata->tg_trigtuple;
	tuples[1] = TRIGGER_FIRED_BY_UPDATE(trigdata->tg_event) ?
		trigdata->tg_newtuple : NULL;
	for (i = 0; i < 2; i++)
	{
		bool		isnull;
		Datum		tbl;

		if (tuples[i] == NULL)
			continue;
		tbl = heap_getattr(tuples[i], Anum_index_defs_tbl,
						   RelationGetDescr(trigdata->tg_relation), &isnull);
		if (!isnull && SearchSysCacheExists1(RELOID, tbl))
			CacheInvalidateRelcacheByRelid(DatumGetObjectId(tbl));
		/* a definition deleted (DROP FOREIGN TABLE's event trigger too) */
		if (!isnull && TRIGGER_FIRED_BY_DELETE(trigdata->tg_event))
			idx_note_index_change(DatumGetObjectId(tbl), false);
	}
	return PointerGetDatum(NULL);
}
