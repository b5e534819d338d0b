/*-------------------------------------------------------------------------
 *
 * protocol_read.c
 *		  How the index-table protocol's own reads are sent.
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/core/protocol_read.c
 *
 * A server's URI may ask for readPreference=secondaryPreferred (or any
 * other non-primary mode) so that user-visible scans can be served by
 * secondaries.  The reads whose answer decides what the FDW writes next
 * (who holds a claim, whether a fact still has an entry, what a fact was
 * before an undo) must not see a lagging secondary: they name the primary
 * explicitly.  Inside a MongoDB transaction every read follows the
 * transaction's read preference, which xact.c sets to primary (libmongoc
 * refuses any other there, as the transactions specification says).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "executor/executor.h"
#include "utils/builtins.h"
#include "utils/memutils.h"

#include "core/convert.h"
#include "core/handle.h"
#include "core/pg_compat.h"
#include "core/protocol_read.h"
#include "core/remote_error.h"

/*
 * The primary read preference, made once per backend.  libmongoc copies
 * the preference into each cursor, so one instance serves every read.
 * For primary, libmongoc 1.23 sends no $readPreference, to mongos
 * (mongoc-cmd.c, _mongoc_cmd_parts_assemble_mongos, after the Server
 * Selection specification) nor to a replica-set member (as
 * test/protocol_reads.py observes); servers read its absence as primary.
 */
const mongoc_read_prefs_t *
idx_primary_read_prefs(void)
{
	static mongoc_read_prefs_t *primary = NULL;

	if (primary == NULL)
		primary = mongoc_read_prefs_new(MONGOC_READ_PRIMARY);
	return primary;
}

/*
 * A scan whose rows the statement is about to write (UPDATE/DELETE of the
 * table, or SELECT ... FOR UPDATE/SHARE on it) reads from the primary: an
 * UPDATE computes the new values from what it read, so a lagging
 * secondary would make it write over a newer version of the document.
 * Other scans keep the readPreference of the server's URI.
 */
const mongoc_read_prefs_t *
idx_scan_read_prefs(ForeignScanState *node)
{
	EState	   *estate = node->ss.ps.state;
	Index		scanrelid = ((Scan *) node->ss.ps.plan)->scanrelid;

	if (scanrelid == 0)
		return NULL;
	if (ExecRelationIsTargetRelation(estate, scanrelid) ||
		(estate->es_rowmarks != NULL &&
		 estate->es_rowmarks[scanrelid - 1] != NULL))
		return idx_primary_read_prefs();
	return NULL;
}

/*
 * Read from the primary the first document of "collection" in "database"
 * that matches "filter", projected to _id and "field" (NULL: the whole
 * document).  Returns whether there is one; if so and "doc" is not NULL,
 * the document is copied into *doc, which the caller then destroys.  An
 * error of the read is raised as one of operation "op".  For the
 * protocol's questions about one document (is a collection empty, is it
 * sharded, what does an ownership marker say).
 */
bool
idx_find_one_primary(mongoc_client_t *client, const char *servername,
					 const char *database, const char *collection,
					 const bson_t *filter, const char *field, bson_t *doc,
					 const IdxOp *op)
{
	mongoc_collection_t *coll;
	mongoc_cursor_t *cursor;
	IdxHandle  *owned_coll;
	IdxHandle  *owned_cursor;
	bson_t		opts = BSON_INITIALIZER;
	bson_t		projection;
	bson_error_t error;
	const bson_t *found;
	bool		any;

	BSON_APPEND_INT64(&opts, "limit", 1);
	if (field != NULL)
	{
		BSON_APPEND_DOCUMENT_BEGIN(&opts, "projection", &projection);
		BSON_APPEND_INT32(&projection, field, 1);
		bson_append_document_end(&opts, &projection);
	}
	coll = mongoc_client_get_collection(client, database, collection);
	owned_coll = idx_own_collection(coll);
	cursor = mongoc_collection_find_with_opts(coll, filter, &opts,
											  idx_primary_read_prefs());
	bson_destroy(&opts);
	owned_cursor = idx_own_cursor(cursor);
	any = mongoc_cursor_next(cursor, &found);
	if (any && doc != NULL)
		bson_copy_to(found, doc);
	else if (!any && mongoc_cursor_error(cursor, &error))
		idx_report_cursor_error(cursor, servername, op);
	idx_release(owned_cursor);
	idx_release(owned_coll);
	return any;
}

/*
 * Default collations
 *
 * A collection created with a collation (say {locale: "en", strength: 2})
 * builds its _id index under it, and a query can use an index only under
 * the index's own collation.  Scans ask for the "simple" collation, which
 * PostgreSQL's comparison of text needs, so on such a collection an _id
 * lookup or a fact fetch by $in would read every document.  Lookups whose
 * only string comparisons are on _id therefore run under the collection's
 * collation, and the FDW keeps only the documents whose _id is exactly
 * (byte for byte) one asked for.  Under a case-insensitive collation _id
 * is unique case-insensitively, so at most one document answers each
 * value.
 */
typedef struct CollationEntry
{
	char	   *servername;
	char	   *database;
	char	   *collection;
	bson_t	   *collation;		/* NULL: none */
} CollationEntry;

static List *collation_cache = NIL;

/*
 * Read the default collation of a collection from listCollections; NULL
 * if it has none, does not exist, or cannot be listed (then *failed).
 */
static bson_t *
fetch_collation(mongoc_client_t *client, const char *servername,
				const char *database, const char *collection, bool *failed)
{
	mongoc_database_t *db;
	bson_t	   *opts;
	mongoc_cursor_t *cursor;
	IdxHandle  *owned_db;
	IdxHandle  *owned_cursor;
	const bson_t *info;
	bson_iter_t top;
	bson_iter_t iter;
	bson_t	   *result = NULL;

	db = mongoc_client_get_database(client, database);
	owned_db = idx_own_database(db);
	opts = BCON_NEW("filter", "{", "name", BCON_UTF8(collection), "}");
	cursor = mongoc_database_find_collections_with_opts(db, opts);
	bson_destroy(opts);
	owned_cursor = idx_own_cursor(cursor);
	if (mongoc_cursor_next(cursor, &info) &&
		bson_iter_init(&top, info) &&
		bson_iter_find_descendant(&top, "options.collation", &iter) &&
		BSON_ITER_HOLDS_DOCUMENT(&iter))
	{
		const uint8_t *data;
		uint32_t	len;
		bson_t		doc;

		bson_iter_document(&iter, &len, &data);
		if (bson_init_static(&doc, data, len))
			result = bson_copy(&doc);
	}
	else if ((*failed = mongoc_cursor_error(cursor, NULL)))
		elog(DEBUG1, "could not read the options of collection \"%s\" on server \"%s\"; its lookups use the simple collation",
			 collection, servername);
	idx_release(owned_cursor);
	idx_release(owned_db);
	return result;
}

/*
 * Is a collation document MongoDB's "simple" one?
 */
static bool
collation_is_simple(const bson_t *collation)
{
	bson_iter_t iter;

	return bson_count_keys(collation) == 1 &&
		bson_iter_init_find(&iter, collation, "locale") &&
		BSON_ITER_HOLDS_UTF8(&iter) &&
		strcmp(bson_iter_utf8(&iter, NULL), "simple") == 0;
}

/*
 * The collection's default collation (NULL: none), from the backend's
 * cache or asked once with listCollections (not in the transaction: it
 * carries no session, and mongod refuses listCollections in one).
 */
const bson_t *
idx_collection_collation(mongoc_client_t *client, const char *servername,
						 const char *database, const char *collection)
{
	CollationEntry *entry;
	MemoryContext oldcxt;
	ListCell   *lc;
	bson_t	   *found;
	bool		failed = false;

	foreach(lc, collation_cache)
	{
		entry = (CollationEntry *) lfirst(lc);
		if (strcmp(entry->servername, servername) == 0 &&
			strcmp(entry->database, database) == 0 &&
			strcmp(entry->collection, collection) == 0)
			return entry->collation;
	}
	found = fetch_collation(client, servername, database, collection, &failed);
	if (failed)
		return NULL;			/* simple this time; asked again next time */
	if (found && collation_is_simple(found))
	{
		bson_destroy(found);
		found = NULL;
	}
	oldcxt = MemoryContextSwitchTo(TopMemoryContext);
	entry = palloc(sizeof(CollationEntry));
	entry->servername = pstrdup(servername);
	entry->database = pstrdup(database);
	entry->collection = pstrdup(collection);
	entry->collation = found ? idx_bson_pcopy(found) : NULL;
	collation_cache = lappend(collation_cache, entry);
	MemoryContextSwitchTo(oldcxt);
	if (found)
		bson_destroy(found);
	return entry->collation;
}

/*
 * Walk a document or array for string values.
 */
static bool
iter_has_strings(bson_iter_t *iter)
{
	while (bson_iter_next(iter))
	{
		bson_iter_t child;

		if (BSON_ITER_HOLDS_UTF8(iter) || BSON_ITER_HOLDS_SYMBOL(iter))
			return true;
		if ((BSON_ITER_HOLDS_DOCUMENT(iter) || BSON_ITER_HOLDS_ARRAY(iter)) &&
			bson_iter_recurse(iter, &child) && iter_has_strings(&child))
			return true;
	}
	return false;
}

/*
 * Does a filter compare any string?  Only such comparisons depend on the
 * collation a find runs under.
 */
bool
idx_filter_compares_strings(const bson_t *filter)
{
	bson_iter_t iter;

	return bson_iter_init(&iter, filter) && iter_has_strings(&iter);
}

/*
 * The BSON bytes of {"v": <value under iter>} as a palloc'd bytea-style
 * copy (length word first), so that _ids compare byte for byte.
 */
static bytea *
wrapped_id(const bson_iter_t *iter)
{
	bson_t		tmp = BSON_INITIALIZER;
	bytea	   *result;

	idx_check_append(bson_append_iter(&tmp, "v", 1, iter));
	result = palloc(VARHDRSZ + tmp.len);
	SET_VARSIZE(result, VARHDRSZ + tmp.len);
	memcpy(VARDATA(result), bson_get_data(&tmp), tmp.len);
	bson_destroy(&tmp);
	return result;
}

/*
 * The values of an _id condition {$eq: v} or {$in: [...]}; NIL (and
 * *ok false) for any other form.
 */
static List *
id_condition_values(bson_iter_t *cond, bool *ok)
{
	bson_iter_t ops;
	bson_iter_t elems;
	List	   *ids = NIL;

	*ok = false;
	if (!BSON_ITER_HOLDS_DOCUMENT(cond) || !bson_iter_recurse(cond, &ops) ||
		!bson_iter_next(&ops))
		return NIL;
	if (strcmp(bson_iter_key(&ops), "$eq") == 0)
		ids = list_make1(wrapped_id(&ops));
	else if (strcmp(bson_iter_key(&ops), "$in") == 0 &&
			 BSON_ITER_HOLDS_ARRAY(&ops) && bson_iter_recurse(&ops, &elems))
	{
		while (bson_iter_next(&elems))
			ids = lappend(ids, wrapped_id(&elems));
	}
	else
		return NIL;
	*ok = !bson_iter_next(&ops);	/* nothing but the one operator */
	return ids;
}

/*
 * One element of a filter (a {key: condition} document): its _id values
 * if it is an _id lookup ("*is_id"), else whether it compares strings.
 */
static bool
lookup_clause(bson_iter_t *clause, List **ids, bool *is_id)
{
	bool		ok;

	*is_id = false;
	if (strcmp(bson_iter_key(clause), "_id") != 0)
	{
		bson_iter_t child;

		if (BSON_ITER_HOLDS_UTF8(clause) || BSON_ITER_HOLDS_SYMBOL(clause))
			return false;
		return !((BSON_ITER_HOLDS_DOCUMENT(clause) ||
				  BSON_ITER_HOLDS_ARRAY(clause)) &&
				 bson_iter_recurse(clause, &child) &&
				 iter_has_strings(&child));
	}
	*ids = id_condition_values(clause, &ok);
	*is_id = ok;
	return ok;
}

/*
 * The _id values of an _id lookup whose other conditions compare no
 * strings (see protocol_read.h); NIL otherwise.
 */
List *
idx_id_lookup_values(const bson_t *filter)
{
	bson_iter_t iter;
	bson_iter_t elems;
	bson_iter_t clause;
	List	   *ids = NIL;
	bool		is_id;
	bool		found = false;

	if (!bson_iter_init(&iter, filter) || !bson_iter_next(&iter))
		return NIL;
	if (strcmp(bson_iter_key(&iter), "$and") != 0)
		return lookup_clause(&iter, &ids, &is_id) && is_id &&
			!bson_iter_next(&iter) ? ids : NIL;
	if (!BSON_ITER_HOLDS_ARRAY(&iter) || !bson_iter_recurse(&iter, &elems))
		return NIL;
	while (bson_iter_next(&elems))
	{
		List	   *these = NIL;

		if (!BSON_ITER_HOLDS_DOCUMENT(&elems) ||
			!bson_iter_recurse(&elems, &clause) || !bson_iter_next(&clause) ||
			!lookup_clause(&clause, &these, &is_id) || bson_iter_next(&clause))
			return NIL;
		if (is_id && !found)
		{
			ids = these;
			found = true;
		}
		else if (is_id)
			return NIL;			/* two _id conditions: not worth it */
	}
	return found && !bson_iter_next(&iter) ? ids : NIL;
}

/*
 * Local recheck of a lookup run under the collection's collation: is the
 * document's _id exactly one of those asked for?
 */
bool
idx_doc_id_among(const bson_t *doc, List *ids)
{
	bson_iter_t iter;
	bytea	   *id;
	ListCell   *lc;
	bool		found = false;

	if (!bson_iter_init_find(&iter, doc, "_id"))
		return false;
	id = wrapped_id(&iter);
	foreach(lc, ids)
	{
		bytea	   *want = (bytea *) lfirst(lc);

		if (VARSIZE(want) == VARSIZE(id) &&
			memcmp(VARDATA(want), VARDATA(id), VARSIZE(id) - VARHDRSZ) == 0)
		{
			found = true;
			break;
		}
	}
	pfree(id);
	return found;
}

/*
 * Exact _id check of a document fetched by _id (see protocol_read.h).
 */
bool
idx_doc_id_is(const bson_t *doc, const bson_value_t *id)
{
	bson_t		want = BSON_INITIALIZER;
	bson_iter_t iter;
	bytea	   *have;
	bool		same;

	if (!bson_iter_init_find(&iter, doc, "_id"))
		return false;
	have = wrapped_id(&iter);
	idx_check_append(BSON_APPEND_VALUE(&want, "v", id));
	same = VARSIZE(have) - VARHDRSZ == want.len &&
		memcmp(VARDATA(have), bson_get_data(&want), want.len) == 0;
	bson_destroy(&want);
	pfree(have);
	return same;
}

/*
 * One binary string equality a collated fetch rechecks: the top-level
 * "field" (a string, or an array with such an element) must be one of
 * "values" byte for byte.
 */
typedef struct StringEquality
{
	char	   *field;
	List	   *values;			/* of text (the UTF-8 bytes) */
} StringEquality;

/*
 * The strings of an $eq or $in condition, NIL with *ok false if it is
 * anything else or also compares non-strings.
 */
static List *
equality_strings(bson_iter_t *cond, bool *ok)
{
	bson_iter_t ops;
	bson_iter_t elems;
	List	   *values = NIL;
	uint32		len;
	const char *str;

	*ok = false;
	if (BSON_ITER_HOLDS_UTF8(cond))
	{
		str = bson_iter_utf8(cond, &len);
		*ok = true;
		return list_make1(cstring_to_text_with_len(str, len));
	}
	if (!BSON_ITER_HOLDS_DOCUMENT(cond) || !bson_iter_recurse(cond, &ops) ||
		!bson_iter_next(&ops))
		return NIL;
	if (strcmp(bson_iter_key(&ops), "$eq") == 0 && BSON_ITER_HOLDS_UTF8(&ops))
	{
		str = bson_iter_utf8(&ops, &len);
		values = list_make1(cstring_to_text_with_len(str, len));
	}
	else if (strcmp(bson_iter_key(&ops), "$in") == 0 &&
			 BSON_ITER_HOLDS_ARRAY(&ops) && bson_iter_recurse(&ops, &elems))
	{
		while (bson_iter_next(&elems))
		{
			if (!BSON_ITER_HOLDS_UTF8(&elems))
				return NIL;
			str = bson_iter_utf8(&elems, &len);
			values = lappend(values, cstring_to_text_with_len(str, len));
		}
	}
	else
		return NIL;
	*ok = values != NIL && !bson_iter_next(&ops);
	return values;
}

/*
 * One clause {key: condition} of a fetch filter: fine if it compares no
 * strings; a positive string equality on a top-level field adds a check;
 * false for anything else.
 */
static bool
equality_clause(bson_iter_t *clause, List **checks, List **fields)
{
	const char *key = bson_iter_key(clause);
	StringEquality *eq;
	bson_iter_t child;
	bool		ok;
	List	   *values;

	if (!(BSON_ITER_HOLDS_UTF8(clause) || BSON_ITER_HOLDS_SYMBOL(clause)) &&
		!((BSON_ITER_HOLDS_DOCUMENT(clause) || BSON_ITER_HOLDS_ARRAY(clause)) &&
		  bson_iter_recurse(clause, &child) && iter_has_strings(&child)))
		return true;			/* no string: the collation cannot matter */
	if (key[0] == '$' || strchr(key, '.') != NULL)
		return false;
	values = equality_strings(clause, &ok);
	if (!ok)
		return false;
	eq = palloc(sizeof(StringEquality));
	eq->field = pstrdup(key);
	eq->values = values;
	*checks = lappend(*checks, eq);
	*fields = lappend(*fields, eq->field);
	return true;
}

/*
 * Collect the string equalities of a fetch filter (see protocol_read.h).
 */
bool
idx_string_equalities(const bson_t *filter, List **checks, List **fields)
{
	bson_iter_t iter;
	bson_iter_t elems;
	bson_iter_t clause;

	*checks = NIL;
	*fields = NIL;
	if (!bson_iter_init(&iter, filter))
		return false;
	while (bson_iter_next(&iter))
	{
		if (strcmp(bson_iter_key(&iter), "$and") != 0)
		{
			if (!equality_clause(&iter, checks, fields))
				return false;
			continue;
		}
		if (!BSON_ITER_HOLDS_ARRAY(&iter) || !bson_iter_recurse(&iter, &elems))
			return false;
		while (bson_iter_next(&elems))
		{
			if (!BSON_ITER_HOLDS_DOCUMENT(&elems) ||
				!bson_iter_recurse(&elems, &clause))
				return false;
			while (bson_iter_next(&clause))
			{
				if (!equality_clause(&clause, checks, fields))
					return false;
			}
		}
	}
	return true;
}

/*
 * Is the string under "iter" byte for byte one of "values"?
 */
static bool
string_among(bson_iter_t *iter, List *values)
{
	uint32		len;
	const char *str;
	ListCell   *lc;

	if (!BSON_ITER_HOLDS_UTF8(iter))
		return false;
	str = bson_iter_utf8(iter, &len);
	foreach(lc, values)
	{
		text	   *want = (text *) lfirst(lc);

		if (VARSIZE_ANY_EXHDR(want) == len &&
			memcmp(VARDATA_ANY(want), str, len) == 0)
			return true;
	}
	return false;
}

/*
 * The binary recheck of a collated fetch (see protocol_read.h): MongoDB's
 * equality on a top-level field, an array matching through an element.
 */
bool
idx_doc_passes_equalities(const bson_t *doc, List *checks)
{
	ListCell   *lc;

	foreach(lc, checks)
	{
		StringEquality *eq = (StringEquality *) lfirst(lc);
		bson_iter_t iter;
		bson_iter_t elems;
		bool		found = false;

		if (!bson_iter_init_find(&iter, doc, eq->field))
			return false;
		if (BSON_ITER_HOLDS_ARRAY(&iter) && bson_iter_recurse(&iter, &elems))
		{
			while (!found && bson_iter_next(&elems))
				found = string_among(&elems, eq->values);
		}
		else
			found = string_among(&iter, eq->values);
		if (!found)
			return false;
	}
	return true;
}
