/*-------------------------------------------------------------------------
 *
 * import.c
 *		  IMPORT FOREIGN SCHEMA for idxtable_fdw.
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/import.c
 *
 * The remote schema is a MongoDB database.  Each collection becomes a
 * foreign table whose columns are the top-level fields of a server-side
 * random sample of its documents, typed from their BSON values.  Tables
 * are ordered by collection name; columns are "_id", then the other
 * fields in bytewise order of their names.
 *
 * A text column for "_id" or for a field whose sample holds ObjectIds is
 * declared COLLATE "C", and a NOTICE names those columns: MongoDB orders
 * strings and ObjectIds by their bytes, as PostgreSQL does under "C", so
 * that ORDER BY, LIMIT and ranges on them are pushed down exactly and an
 * _id compares as MongoDB compares it.  (A command of IMPORT FOREIGN
 * SCHEMA can only be a CREATE FOREIGN TABLE, so no COMMENT can say it.)
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/heap.h"
#include "commands/defrem.h"
#include "common/hashfn.h"
#include "foreign/foreign.h"
#include "lib/stringinfo.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"

#include "core/connection.h"
#include "core/convert.h"
#include "core/handle.h"
#include "core/mongoc_compat.h"
#include "core/option.h"
#include "idxtable_fdw.h"

#define IMPORT_DEFAULT_SAMPLE_SIZE	100
#define IMPORT_MAX_SAMPLE_SIZE		100000

/*
 * Set of BSON types, one bit per type.  The types are 0x01..0x13 plus
 * 0x7F (maxKey) and 0xFF (minKey), which share bit 31: no collisions.
 */
#define TYPE_BIT(t)		((uint32) 1 << ((t) & 0x1F))
#define INTEGER_BITS	(TYPE_BIT(BSON_TYPE_INT32) | TYPE_BIT(BSON_TYPE_INT64))
#define FLOAT_BITS		(INTEGER_BITS | TYPE_BIT(BSON_TYPE_DOUBLE))
#define NUMBER_BITS		(FLOAT_BITS | TYPE_BIT(BSON_TYPE_DECIMAL128))

/* A collection to import: its name as MongoDB and as PostgreSQL see it */
typedef struct ImportCollection
{
	char	   *remote;			/* UTF-8, for talking to MongoDB */
	char	   *local;			/* server encoding, for the table options */
	char	   *tablename;		/* local, cut to NAMEDATALEN - 1 bytes */
} ImportCollection;

/* A top-level field seen in the sample; hash entry keyed by name */
typedef struct ImportField
{
	char	   *name;			/* hash key: UTF-8 field name */
	char	   *pgtype;			/* type of the first non-null value */
	bool		mixed;			/* did later values infer another type? */
	uint32		seen;			/* TYPE_BIT()s of non-null values */
} ImportField;

/*
 * parse_import_options
 *		Validate the OPTIONS of IMPORT FOREIGN SCHEMA; return sample_size.
 */
static int
parse_import_options(List *options)
{
	int			sample_size = IMPORT_DEFAULT_SAMPLE_SIZE;
	ListCell   *lc;

	foreach(lc, options)
	{
		DefElem    *def = (DefElem *) lfirst(lc);

		if (strcmp(def->defname, "sample_size") == 0)
		{
			char	   *value = defGetString(def);
			char	   *end;
			long		n;

			errno = 0;
			n = strtol(value, &end, 10);
			if (end == value || *end != '\0' || errno != 0 ||
				n < 1 || n > IMPORT_MAX_SAMPLE_SIZE)
				ereport(ERROR,
						(errcode(ERRCODE_FDW_INVALID_ATTRIBUTE_VALUE),
						 errmsg("invalid value for option \"%s\": \"%s\"",
								def->defname, value),
						 errdetail("Valid values are integers from 1 to %d.",
								   IMPORT_MAX_SAMPLE_SIZE)));
			sample_size = (int) n;
		}
		else
			ereport(ERROR,
					(errcode(ERRCODE_FDW_INVALID_OPTION_NAME),
					 errmsg("invalid option \"%s\"", def->defname),
					 errhint("Valid options in this context are: %s",
							 "sample_size")));
	}

	return sample_size;
}

/*
 * to_server_encoding
 *		A fresh copy of a UTF-8 name from MongoDB in the server encoding,
 *		as SQL text needs (this also rejects invalid UTF-8).
 */
static char *
to_server_encoding(const char *utf8)
{
	char	   *result = pg_any_to_server(utf8, strlen(utf8), PG_UTF8);

	return (result == utf8) ? pstrdup(utf8) : result;
}

/*
 * truncate_name
 *		Cut a name to what PostgreSQL keeps of an identifier, as the parser
 *		would (without its NOTICE); LIMIT TO / EXCEPT names were cut alike.
 */
static char *
truncate_name(const char *name)
{
	int			len = strlen(name);

	if (len >= NAMEDATALEN)
		len = pg_mbcliplen(name, len, NAMEDATALEN - 1);
	return pnstrdup(name, len);
}

/* list_sort comparator: collections bytewise by MongoDB name */
static int
collection_cmp(const ListCell *a, const ListCell *b)
{
	const ImportCollection *ca = (const ImportCollection *) lfirst(a);
	const ImportCollection *cb = (const ImportCollection *) lfirst(b);

	return strcmp(ca->remote, cb->remote);
}

/*
 * list_remote_collections
 *		The importable collections of a database, ordered by name.
 *
 * nameOnly avoids collection locks on the server; authorizedCollections
 * lets users who may read only some collections list them.  A database
 * without any collection or view does not exist in MongoDB: report it as
 * a missing schema, which also catches misspelled names.
 */
static List *
list_remote_collections(mongoc_client_t *client, const char *servername,
						const char *database, const char *database_local)
{
	List	   *result = NIL;
	int			nlisted = 0;
	mongoc_database_t *db;
	mongoc_cursor_t *cursor;
	bson_t	   *opts;
	const bson_t *doc;
	bson_error_t error;
	IdxHandle  *owned_opts;
	IdxHandle  *owned_db;
	IdxHandle  *owned_cursor;

	opts = bson_new();
	owned_opts = idx_own_bson(opts);
	idx_check_append(BSON_APPEND_BOOL(opts, "nameOnly", true));
	idx_check_append(BSON_APPEND_BOOL(opts, "authorizedCollections", true));
	db = mongoc_client_get_database(client, database);
	owned_db = idx_own_database(db);
	cursor = mongoc_database_find_collections_with_opts(db, opts);
	owned_cursor = idx_own_cursor(cursor);

	while (mongoc_cursor_next(cursor, &doc))
	{
		bson_iter_t iter;
		ImportCollection *coll;

		CHECK_FOR_INTERRUPTS();
		nlisted++;

		if (bson_iter_init_find(&iter, doc, "type") &&
			BSON_ITER_HOLDS_UTF8(&iter) &&
			strcmp(bson_iter_utf8(&iter, NULL), "view") == 0)
			continue;
		if (!bson_iter_init_find(&iter, doc, "name") ||
			!BSON_ITER_HOLDS_UTF8(&iter) ||
			strncmp(bson_iter_utf8(&iter, NULL), "system.", 7) == 0 ||
			strncmp(bson_iter_utf8(&iter, NULL), "idxtable.", 9) == 0)
			continue;			/* system and index-table collections */

		coll = (ImportCollection *) palloc(sizeof(ImportCollection));
		coll->remote = pstrdup(bson_iter_utf8(&iter, NULL));
		coll->local = to_server_encoding(coll->remote);
		coll->tablename = truncate_name(coll->local);
		result = lappend(result, coll);
	}

	if (mongoc_cursor_error(cursor, &error))
		idx_report_error(&error, servername,
						 idx_op(IDX_OP_LIST_COLLECTIONS, NULL, database_local));
	idx_release(owned_cursor);
	idx_release(owned_db);
	idx_release(owned_opts);

	if (nlisted == 0)
		ereport(ERROR,
				(errcode(ERRCODE_FDW_SCHEMA_NOT_FOUND),
				 errmsg("database \"%s\" does not exist on foreign server \"%s\"",
						database_local, servername),
				 errdetail("The database has no collections.")));

	list_sort(result, collection_cmp);
	return result;
}

/*
 * collection_wanted
 *		Apply LIMIT TO / EXCEPT to a table name.
 */
static bool
collection_wanted(ImportForeignSchemaStmt *stmt, const char *tablename)
{
	ListCell   *lc;

	/* table_list is empty for FDW_IMPORT_SCHEMA_ALL */
	foreach(lc, stmt->table_list)
	{
		if (strcmp(((RangeVar *) lfirst(lc))->relname, tablename) == 0)
			return (stmt->list_type == FDW_IMPORT_SCHEMA_LIMIT_TO);
	}
	return (stmt->list_type != FDW_IMPORT_SCHEMA_LIMIT_TO);
}

/* Hash support for ImportField: the key is a pointer to a C string */
static uint32
field_name_hash(const void *key, Size keysize)
{
	const char *name = *(const char *const *) key;

	return hash_bytes((const unsigned char *) name, strlen(name));
}

static int
field_name_match(const void *key1, const void *key2, Size keysize)
{
	return strcmp(*(const char *const *) key1, *(const char *const *) key2);
}

/*
 * lookup_field
 *		Find a field by name, adding it (name copied into fieldcxt) if new.
 */
static ImportField *
lookup_field(HTAB *fields, const char *name, MemoryContext fieldcxt)
{
	bool		found;
	ImportField *field;

	field = (ImportField *) hash_search(fields, &name, HASH_ENTER, &found);
	if (!found)
	{
		/* the stored key may point into a document: copy it */
		field->name = MemoryContextStrdup(fieldcxt, name);
		field->pgtype = NULL;
		field->mixed = false;
		field->seen = 0;
	}
	return field;
}

/*
 * record_document_fields
 *		Add the top-level fields of one sampled document to "fields".
 *
 * Null and undefined values only make the field known.  The first other
 * value sets the type; a later value of another type marks the field as
 * mixed, and the set of BSON types seen then decides the merged type.
 */
static void
record_document_fields(HTAB *fields, const bson_t *doc,
					   MemoryContext fieldcxt)
{
	bson_iter_t iter;

	if (!bson_iter_init(&iter, doc))
		return;

	while (bson_iter_next(&iter))
	{
		const char *key = bson_iter_key(&iter);
		bson_type_t type = bson_iter_type(&iter);
		const char *pgtype;
		ImportField *field;

		/*
		 * A name with '.' is not a field path, '$' is not allowed in
		 * projections, and an empty name cannot be a column.
		 */
		if (key[0] == '\0' || key[0] == '$' || strchr(key, '.') != NULL)
			continue;

		field = lookup_field(fields, key, fieldcxt);

		if (type == BSON_TYPE_NULL || type == BSON_TYPE_UNDEFINED)
			continue;
		field->seen |= TYPE_BIT(type);

		pgtype = idx_bson_type_to_pgtype(&iter);
		if (pgtype == NULL)
			pgtype = "jsonb";

		if (field->pgtype == NULL)
			field->pgtype = MemoryContextStrdup(fieldcxt, pgtype);
		else if (!field->mixed && strcmp(field->pgtype, pgtype) != 0)
			field->mixed = true;
	}
}

/*
 * sample_collection_fields
 *		Sample a collection with $sample and return its top-level fields as
 *		a hash of ImportField in the current memory context.  Documents are
 *		examined in a scratch context reset for each one.
 */
static HTAB *
sample_collection_fields(mongoc_client_t *client, ForeignServer *server,
						 const char *database, const char *database_local,
						 const ImportCollection *coll, int sample_size)
{
	MemoryContext fieldcxt = CurrentMemoryContext;
	MemoryContext doccxt;
	HASHCTL		ctl;
	HTAB	   *fields;
	bson_t	   *pipeline;
	bson_t	   *opts;
	mongoc_collection_t *collection;
	mongoc_cursor_t *cursor;
	const bson_t *doc;
	bson_error_t error;
	IdxHandle  *owned[4];		/* pipeline, opts, collection, cursor */
	int			i;
	int			fetch_size = idx_server_fetch_size(server);

	ctl.keysize = sizeof(char *);
	ctl.entrysize = sizeof(ImportField);
	ctl.hash = field_name_hash;
	ctl.match = field_name_match;
	ctl.hcxt = fieldcxt;
	fields = hash_create("idxtable_fdw import fields", 64, &ctl,
						 HASH_ELEM | HASH_FUNCTION | HASH_COMPARE |
						 HASH_CONTEXT);
	/* _id is a column even when the collection has no documents */
	lookup_field(fields, IDX_ID_FIELD, fieldcxt);

	doccxt = AllocSetContextCreate(fieldcxt, "idxtable_fdw import document",
								   ALLOCSET_DEFAULT_SIZES);

	pipeline = BCON_NEW("pipeline", "[", "{", "$sample", "{",
						"size", BCON_INT32(sample_size), "}", "}", "]");
	owned[0] = idx_own_bson(pipeline);
	opts = bson_new();
	owned[1] = idx_own_bson(opts);
	if (fetch_size > 0)
		idx_check_append(BSON_APPEND_INT32(opts, "batchSize", fetch_size));

	collection = mongoc_client_get_collection(client, database, coll->remote);
	owned[2] = idx_own_collection(collection);
	cursor = mongoc_collection_aggregate(collection, MONGOC_QUERY_NONE,
										 pipeline, opts, NULL);
	owned[3] = idx_own_cursor(cursor);

	while (mongoc_cursor_next(cursor, &doc))
	{
		CHECK_FOR_INTERRUPTS();

		MemoryContextReset(doccxt);
		MemoryContextSwitchTo(doccxt);
		record_document_fields(fields, doc, fieldcxt);
		MemoryContextSwitchTo(fieldcxt);
	}

	if (mongoc_cursor_error(cursor, &error))
		idx_report_error(&error, server->servername,
						 idx_op(IDX_OP_SAMPLE, coll->local, database_local));
	for (i = 3; i >= 0; i--)
		idx_release(owned[i]);

	MemoryContextDelete(doccxt);
	return fields;
}

/*
 * merged_type
 *		The column type for a field, given every value seen for it.
 *
 * int32/int64 merge to bigint, integers and doubles to double precision,
 * numbers including decimal128 to numeric; other mixes become jsonb, which
 * holds any value, as does a field that was only ever null.
 */
static const char *
merged_type(const ImportField *field)
{
	if (field->pgtype == NULL)
		return "jsonb";
	if (!field->mixed)
		return field->pgtype;
	if ((field->seen & ~INTEGER_BITS) == 0)
		return "bigint";
	if ((field->seen & ~FLOAT_BITS) == 0)
		return "double precision";
	if ((field->seen & ~NUMBER_BITS) == 0)
		return "numeric";
	return "jsonb";
}

/*
 * byte_order_column
 *		Is a field's column declared COLLATE "C": a text column for "_id",
 *		or for a field whose sample holds ObjectIds (read as their hex
 *		digits), which MongoDB compares by their bytes?
 */
static bool
byte_order_column(const ImportField *field, const char *pgtype)
{
	if (strcmp(pgtype, "text") != 0)
		return false;
	return strcmp(field->name, IDX_ID_FIELD) == 0 ||
		(field->seen & TYPE_BIT(BSON_TYPE_OID)) != 0;
}

/*
 * report_byte_order_columns
 *		Say which columns of a table byte_order_column() declared COLLATE
 *		"C", and why (a NOTICE, as PostgreSQL says what a command did
 *		beyond what was written).
 */
static void
report_byte_order_columns(List *columns, const char *tablename)
{
	StringInfoData names;
	ListCell   *lc;

	if (columns == NIL)
		return;
	initStringInfo(&names);
	foreach(lc, columns)
		appendStringInfo(&names, "%s\"%s\"", names.len > 0 ? ", " : "",
						 (char *) lfirst(lc));
	ereport(NOTICE,
			(errmsg_plural("column %s of foreign table \"%s\" is declared COLLATE \"C\"",
						   "columns %s of foreign table \"%s\" are declared COLLATE \"C\"",
						   list_length(columns), names.data, tablename),
			 errdetail("MongoDB compares strings and ObjectIds by their bytes, as PostgreSQL compares text under the collation \"C\"; ORDER BY, LIMIT and ranges on these columns can then be pushed down exactly.")));
}

/* qsort comparator: "_id" first, then the fields bytewise by name */
static int
field_cmp(const void *a, const void *b)
{
	const char *na = (*(const ImportField *const *) a)->name;
	const char *nb = (*(const ImportField *const *) b)->name;
	bool		ida = (strcmp(na, IDX_ID_FIELD) == 0);
	bool		idb = (strcmp(nb, IDX_ID_FIELD) == 0);

	if (ida != idb)
		return ida ? -1 : 1;
	return strcmp(na, nb);
}

/*
 * build_create_command
 *		Render the CREATE FOREIGN TABLE command for one collection.
 *
 * A column is named exactly like its field, except where it cannot be (a
 * system column name such as "xmin" gets a "_" appended, a name too long
 * is truncated); then a "field" option says where it comes from.  A name
 * repeating an earlier column's is skipped with a warning.
 */
static char *
build_create_command(HTAB *fields, const char *servername,
					 const char *database_local,
					 const ImportCollection *coll)
{
	StringInfoData buf;
	ImportField **sorted;
	ImportField *field;
	HASH_SEQ_STATUS status;
	List	   *colnames = NIL;
	List	   *bytewise = NIL;
	int			n = 0;
	int			i;

	sorted = (ImportField **) palloc(hash_get_num_entries(fields) *
									 sizeof(ImportField *));
	hash_seq_init(&status, fields);
	while ((field = (ImportField *) hash_seq_search(&status)) != NULL)
		sorted[n++] = field;
	qsort(sorted, n, sizeof(ImportField *), field_cmp);

	initStringInfo(&buf);
	appendStringInfo(&buf, "CREATE FOREIGN TABLE %s (",
					 quote_identifier(coll->tablename));

	for (i = 0; i < n; i++)
	{
		char	   *fieldname = to_server_encoding(sorted[i]->name);
		char	   *colname = fieldname;
		const char *pgtype;
		ListCell   *lc;

		if (SystemAttributeByName(colname) != NULL)
			colname = psprintf("%s_", colname);
		colname = truncate_name(colname);

		foreach(lc, colnames)
		{
			if (strcmp((char *) lfirst(lc), colname) == 0)
				break;
		}
		if (lc != NULL)
		{
			ereport(WARNING,
					(errcode(ERRCODE_DUPLICATE_COLUMN),
					 errmsg("skipping field \"%s\" of collection \"%s\": column name \"%s\" is already used",
							fieldname, coll->local, colname)));
			continue;
		}
		colnames = lappend(colnames, colname);

		/* _id (sorted first) of a collection without documents is text */
		pgtype = (i == 0 && sorted[i]->pgtype == NULL) ?
			"text" : merged_type(sorted[i]);
		appendStringInfo(&buf, "%s\n  %s %s", (i > 0) ? "," : "",
						 quote_identifier(colname), pgtype);
		if (byte_order_column(sorted[i], pgtype))
		{
			appendStringInfoString(&buf, " COLLATE \"C\"");
			bytewise = lappend(bytewise, colname);
		}
		if (strcmp(colname, fieldname) != 0)
			appendStringInfo(&buf, " OPTIONS (field %s)",
							 quote_literal_cstr(fieldname));
	}

	appendStringInfo(&buf, "\n) SERVER %s\nOPTIONS (database %s, collection %s);",
					 quote_identifier(servername),
					 quote_literal_cstr(database_local),
					 quote_literal_cstr(coll->local));

	report_byte_order_columns(bytewise, coll->tablename);
	pfree(sorted);
	list_free(colnames);
	list_free(bytewise);
	return buf.data;
}

/*
 * idxImportForeignSchema
 *		Build CREATE FOREIGN TABLE commands for the collections of a
 *		MongoDB database.
 *
 * LIMIT TO / EXCEPT are applied before sampling, so that excluded
 * collections cost nothing; the core code's own filtering of the commands
 * agrees, the table name being the collection name.  Views and system.*
 * collections are not imported.
 */
List *
idxImportForeignSchema(ImportForeignSchemaStmt *stmt, Oid serverOid)
{
	ForeignServer *server;
	UserMapping *user;
	mongoc_client_t *client;
	int			sample_size;
	char	   *database;
	List	   *collections;
	List	   *commands = NIL;
	MemoryContext importcxt;
	ListCell   *lc;

	/* Check the options before connecting */
	sample_size = parse_import_options(stmt->options);

	server = GetForeignServer(serverOid);
	user = GetUserMapping(GetUserId(), serverOid);
	client = idx_get_client(server, user);

	database = pg_server_to_any(stmt->remote_schema,
								strlen(stmt->remote_schema), PG_UTF8);

	collections = list_remote_collections(client, server->servername,
										  database, stmt->remote_schema);

	/* Each sample's bookkeeping is freed once its command is built */
	importcxt = AllocSetContextCreate(CurrentMemoryContext,
									  "idxtable_fdw import",
									  ALLOCSET_DEFAULT_SIZES);

	foreach(lc, collections)
	{
		ImportCollection *coll = (ImportCollection *) lfirst(lc);
		MemoryContext oldcxt;
		HTAB	   *fields;

		if (!collection_wanted(stmt, coll->tablename))
			continue;

		oldcxt = MemoryContextSwitchTo(importcxt);
		fields = sample_collection_fields(client, server, database,
										  stmt->remote_schema, coll,
										  sample_size);
		MemoryContextSwitchTo(oldcxt);

		commands = lappend(commands,
						   build_create_command(fields, server->servername,
												stmt->remote_schema, coll));
		MemoryContextReset(importcxt);
	}

	MemoryContextDelete(importcxt);
	return commands;
}
