/*-------------------------------------------------------------------------
 *
 * route_id_order.c
 *		  ORDER BY key, _id through an index table: the entries of each
 *		  group of equal keys in the order of their fact's _id.
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/route_id_order.c
 *
 * The lookup gives entries in the order of their keys, but the entries of
 * equal keys in no defined order.  A group of equal keys is read whole
 * and sorted as the _id column compares.  A group that outgrows one batch
 * of the lookup (a LIMIT over a key that most rows share) is read apart
 * where MongoDB can give it in that order: an entry's _id is {k0: key,
 * ..., id: fact _id} (index_entry.c), so where the group fixes every key,
 * the group's entries sorted on their _id, which MongoDB's _id index
 * serves, come in MongoDB's order of the fact _ids.  Within one BSON type
 * bracket that is the column's order for integer columns (numbers compare
 * by value, and their conversion never reverses two of them) and for text
 * under a bytewise collation (strings and symbols as bytes, ObjectIds as
 * bytes, which is the order of their hex digits), so one find per bracket
 * (numbers; strings and ObjectIds, merged as bytes) over the group's _id
 * range reads what the LIMIT needs.  A group holding ids of another type
 * (which a limit-1 find looks for first), or a claim of a unique index
 * ({k0: key} without "id"), is read whole as before.  The lookup then
 * goes on after the group's key (route_lookup.c).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "miscadmin.h"
#include "utils/memutils.h"
#include "utils/typcache.h"

#include "core/collate_bytes.h"
#include "core/convert.h"
#include "core/text_order.h"
#include "index/index_entry.h"
#include "route_path.h"
#include "route_scan_int.h"

/* The "id" of a bound on a group's entry _ids (append_bound) */
typedef enum IdBound
{
	BOUND_NONE,					/* no "id": the group's key alone, below all */
	BOUND_NULL,					/* null: above MinKey, undefined */
	BOUND_STRING,				/* "": the least string */
	BOUND_OBJECT,				/* {}: the least document, above strings */
	BOUND_OID_LEAST,			/* the least ObjectId */
	BOUND_OID_GREATEST,			/* the greatest ObjectId */
	BOUND_MAXKEY				/* MaxKey: above all */
} IdBound;

static bool outgrows_lookup(IdxScanState *state, IdxIndexScan *ix);
static bool start_group_apart(IdxScanState *state, IdxIndexScan *ix);

/*
 * Is MongoDB's order of the fact _ids within one type bracket (numbers;
 * strings; ObjectIds) the order of an _id column of type "typid" under
 * collation "collid"?  Integers compare by value; text under a bytewise
 * collation as bytes, as MongoDB compares strings and, through their hex
 * digits, ObjectIds.
 */
IdxIdOrder
idx_id_order_kind(Oid typid, Oid collid)
{
	switch (typid)
	{
		case INT2OID:
		case INT4OID:
		case INT8OID:
			return IDX_ID_ORDER_INTEGERS;
		case TEXTOID:
			if (idx_collation_bytewise(collid))
				return IDX_ID_ORDER_TEXT;
			return IDX_ID_ORDER_LOCAL;
		default:
			return IDX_ID_ORDER_LOCAL;
	}
}

/*
 * Can a group of equal keys come in the _id column's order from MongoDB
 * ("att" is that column)?  The group must fix every key of the entries'
 * _id (the scan's one order key is the index's last, the keys before it
 * fixed by equalities), so that its entries are one range of the _id
 * index; and the column's order must be MongoDB's (idx_id_order_kind).
 */
static IdxIdOrder
choose_id_order(IdxIndexScan *ix, Form_pg_attribute att)
{
	if (ix->order_nkeys != 1 || ix->order_key != ix->def->nkeys - 1)
		return IDX_ID_ORDER_LOCAL;
	return idx_id_order_kind(att->atttypid, att->attcollation);
}

/*
 * ORDER BY key, _id: prepare the conversion of an entry's "id" (its
 * fact's _id as stored) to the _id column's value, and that column's
 * comparison (its type's default btree order and its collation, NULLS
 * LAST: the pathkey of route_path.c's id_tiebreak_pathkey), and whether
 * MongoDB can give a group of equal keys in that order (choose_id_order).
 */
void
idx_id_order_begin(Relation rel, IdxScanState *state, IdxIndexScan *ix)
{
	IdxTableInfo *einfo = palloc(sizeof(IdxTableInfo));
	AttrNumber	attnum = state->info->id_attnum;
	Form_pg_attribute att = TupleDescAttr(RelationGetDescr(rel), attnum - 1);
	TypeCacheEntry *tce = lookup_type_cache(att->atttypid, TYPECACHE_LT_OPR);

	*einfo = *state->info;
	einfo->fields = palloc0(sizeof(char *) * Max(einfo->natts, 1));
	einfo->fields[attnum - 1] = IDX_ENTRY_FACT_ID;
	ix->idconv = idx_row_conv_create(RelationGetDescr(rel), einfo,
									 bms_make_singleton(attnum - FirstLowInvalidHeapAttributeNumber));
	ix->id_sort.ssup_cxt = state->scan_cxt;
	ix->id_sort.ssup_collation = att->attcollation;
	ix->id_sort.ssup_nulls_first = false;
	PrepareSortSupportFromOrderingOp(tce->lt_opr, &ix->id_sort);
	ix->id_order = choose_id_order(ix, att);
	ix->tie_cxt = AllocSetContextCreate(state->scan_cxt,
										"idxtable_fdw equal keys",
										ALLOCSET_DEFAULT_SIZES);
	ix->pending_cxt = AllocSetContextCreate(state->scan_cxt,
											"idxtable_fdw next key",
											ALLOCSET_SMALL_SIZES);
}

/*
 * The BSON value of order key "keypos" in an entry's _id, or false if the
 * entry has none (not an entry).  Keys are canonical (index_entry.c):
 * equal keys have equal bytes.
 */
static bool
entry_key_value(const bson_t *entry, int keypos, bson_iter_t *key)
{
	bson_iter_t iter;

	return bson_iter_init_find(&iter, entry, "_id") &&
		BSON_ITER_HOLDS_DOCUMENT(&iter) &&
		bson_iter_recurse(&iter, key) &&
		bson_iter_find(key, idx_key_field(keypos));
}

/*
 * Do two entries have the same key "keypos", byte for byte (both missing
 * counts as the same)?
 */
static bool
same_key(const bson_t *a, const bson_t *b, int keypos)
{
	bson_iter_t ka;
	bson_iter_t kb;
	bool		has_a = entry_key_value(a, keypos, &ka);
	bool		has_b = entry_key_value(b, keypos, &kb);
	bson_t		da = BSON_INITIALIZER;
	bson_t		db = BSON_INITIALIZER;
	bool		same;

	if (!has_a || !has_b)
		return has_a == has_b;
	/* {"v": value} of each, compared byte for byte */
	idx_check_append(bson_append_iter(&da, "v", 1, &ka));
	idx_check_append(bson_append_iter(&db, "v", 1, &kb));
	same = da.len == db.len &&
		memcmp(bson_get_data(&da), bson_get_data(&db), da.len) == 0;
	bson_destroy(&da);
	bson_destroy(&db);
	return same;
}

/*
 * Do two entries have the same order keys (all "order_nkeys" of them)?
 */
static bool
same_order_keys(IdxIndexScan *ix, const bson_t *a, const bson_t *b)
{
	int			k;

	for (k = ix->order_key; k < ix->order_key + ix->order_nkeys; k++)
	{
		if (!same_key(a, b, k))
			return false;
	}
	return true;
}

/*
 * A palloc'd copy of a document's bytes.
 */
static uint8_t *
copy_entry(const bson_t *src)
{
	uint8_t    *copy = palloc(src->len);

	memcpy(copy, bson_get_data(src), src->len);
	return copy;
}

/*
 * qsort_arg comparator of TieEntries: by the fact's _id, as the _id
 * column compares (SortSupport "arg").
 */
static int
tie_entry_cmp(const void *a, const void *b, void *arg)
{
	const TieEntry *ta = (const TieEntry *) a;
	const TieEntry *tb = (const TieEntry *) b;

	return ApplySortComparator(ta->id, ta->id_null, tb->id, tb->id_null,
							   (SortSupport) arg);
}

/*
 * A group of equal keys is read whole, however small the LIMIT made the
 * lookup's batches: double them as the group outgrows them, up to
 * fetch_size.
 */
static void
grow_tie_lookup(IdxScanState *state, IdxIndexScan *ix)
{
	uint32_t	size;

	if (ix->lookup == NULL)
		return;
	size = mongoc_cursor_get_batch_size(ix->lookup);
	if (size > 0 && ix->tie_n >= (int) size &&
		size < (uint32_t) state->info->fetch_size)
		mongoc_cursor_set_batch_size(ix->lookup,
									 Min(size * 2,
										 (uint32_t) state->info->fetch_size));
}

/*
 * ORDER BY key, _id: read the next group of entries with equal order keys
 * (MongoDB returns them in key order, but equal keys in no defined order)
 * and sort it by the facts' _ids.  A group that outgrows a batch of the
 * lookup is read apart instead when it can be (start_group_apart): then
 * "in_group" is set and "tie" is empty.  Returns false when there is no
 * group left.
 */
static bool
read_tie_group(IdxScanState *state, IdxIndexScan *ix)
{
	MemoryContext oldcxt;
	const bson_t *entry;
	int			cap = 16;
	Datum	   *values;
	bool	   *nulls;
	int			natts = ix->idconv->natts;
	int			id = state->info->id_attnum - 1;

	MemoryContextReset(ix->tie_cxt);
	ix->tie_n = ix->tie_pos = 0;
	ix->group_checked = false;
	oldcxt = MemoryContextSwitchTo(ix->tie_cxt);
	ix->tie = palloc(sizeof(TieEntry) * cap);
	values = palloc0(sizeof(Datum) * Max(natts, 1));
	nulls = palloc(sizeof(bool) * Max(natts, 1));
	for (;;)
	{
		TieEntry   *te;
		bson_t		first;		/* a group's first entry, or this one */

		CHECK_FOR_INTERRUPTS();
		if (ix->pending != NULL)
		{
			entry = ix->pending;
			ix->pending = NULL;
		}
		else
		{
			MemoryContextSwitchTo(oldcxt);
			entry = idx_lookup_next_entry(state, ix);
			MemoryContextSwitchTo(ix->tie_cxt);
			if (entry == NULL)
				break;
			if (ix->tie_n > 0)
			{
				bson_init_static(&first, ix->tie[0].data, ix->tie[0].len);
				if (!same_order_keys(ix, &first, entry))
				{
					/* the next group's first entry: keep it for then */
					MemoryContextReset(ix->pending_cxt);
					MemoryContextSwitchTo(ix->pending_cxt);
					ix->pending = palloc(sizeof(bson_t));
					bson_init_static(ix->pending, copy_entry(entry),
									 entry->len);
					break;
				}
			}
		}
		if (ix->tie_n == cap)
		{
			cap *= 2;
			ix->tie = repalloc(ix->tie, sizeof(TieEntry) * cap);
		}
		grow_tie_lookup(state, ix);
		te = &ix->tie[ix->tie_n++];
		te->data = copy_entry(entry);
		te->len = entry->len;
		memset(nulls, true, sizeof(bool) * Max(natts, 1));
		bson_init_static(&first, te->data, te->len);
		idx_document_to_row(ix->idconv, &first, values, nulls);
		te->id = values[id];
		te->id_null = nulls[id];
		if (outgrows_lookup(state, ix) && start_group_apart(state, ix))
			break;
	}
	MemoryContextSwitchTo(oldcxt);
	if (ix->tie_n > 1)
		qsort_arg(ix->tie, ix->tie_n, sizeof(TieEntry), tie_entry_cmp,
				  &ix->id_sort);
	return ix->tie_n > 0 || ix->in_group;
}

/*
 * Append {op: {k0: .., id: ..}} to "cond": a bound on the _ids of the
 * current group's entries, its key ("group_key") and the "id" "bound"
 * says.
 */
static void
append_bound(bson_t *cond, const char *op, IdxIndexScan *ix, IdBound bound)
{
	bson_t		key;
	bson_t		doc;
	bson_t		empty = BSON_INITIALIZER;
	bson_iter_t iter;
	bson_oid_t	oid;

	if (!bson_init_static(&key, ix->group_key, ix->group_key_len) ||
		!bson_iter_init(&iter, &key))
		elog(ERROR, "invalid key of a group of equal keys");
	idx_check_append(BSON_APPEND_DOCUMENT_BEGIN(cond, op, &doc));
	while (bson_iter_next(&iter))
		idx_check_append(bson_append_iter(&doc, NULL, -1, &iter));
	switch (bound)
	{
		case BOUND_NONE:
			break;
		case BOUND_NULL:
			idx_check_append(BSON_APPEND_NULL(&doc, IDX_ENTRY_FACT_ID));
			break;
		case BOUND_STRING:
			idx_check_append(BSON_APPEND_UTF8(&doc, IDX_ENTRY_FACT_ID, ""));
			break;
		case BOUND_OBJECT:
			idx_check_append(BSON_APPEND_DOCUMENT(&doc, IDX_ENTRY_FACT_ID,
												  &empty));
			break;
		case BOUND_OID_LEAST:
			idx_objectid_least(&oid);
			idx_check_append(BSON_APPEND_OID(&doc, IDX_ENTRY_FACT_ID, &oid));
			break;
		case BOUND_OID_GREATEST:
			memset(oid.bytes, 0xff, sizeof(oid.bytes));
			idx_check_append(BSON_APPEND_OID(&doc, IDX_ENTRY_FACT_ID, &oid));
			break;
		case BOUND_MAXKEY:
			idx_check_append(BSON_APPEND_MAXKEY(&doc, IDX_ENTRY_FACT_ID));
			break;
	}
	idx_check_append(bson_append_document_end(cond, &doc));
}

/*
 * Append {"_id": {lo_op: .., hi_op: ..}} to "doc": the entries of the
 * current group whose ids lie between two bounds.
 */
static void
append_id_range(bson_t *doc, IdxIndexScan *ix, const char *lo_op, IdBound lo,
				const char *hi_op, IdBound hi)
{
	bson_t		cond;

	idx_check_append(BSON_APPEND_DOCUMENT_BEGIN(doc, "_id", &cond));
	append_bound(&cond, lo_op, ix, lo);
	append_bound(&cond, hi_op, ix, hi);
	idx_check_append(bson_append_document_end(doc, &cond));
}

/*
 * Append one range of append_id_range() as element "pos" of an $or list.
 */
static void
append_or_range(bson_t *list, const char *pos, IdxIndexScan *ix,
				const char *lo_op, IdBound lo, const char *hi_op, IdBound hi)
{
	bson_t		branch;

	idx_check_append(BSON_APPEND_DOCUMENT_BEGIN(list, pos, &branch));
	append_id_range(&branch, ix, lo_op, lo, hi_op, hi);
	idx_check_append(bson_append_document_end(list, &branch));
}

/*
 * Remember the key of the current group (the _id of its first entry
 * without the fact's "id") in "group_key".  False if the entry has no _id
 * document (not an entry).
 */
static bool
set_group_key(IdxScanState *state, IdxIndexScan *ix)
{
	bson_t		entry;
	bson_t		key = BSON_INITIALIZER;
	bson_iter_t iter;
	bson_iter_t child;

	if (!bson_init_static(&entry, ix->tie[0].data, ix->tie[0].len) ||
		!bson_iter_init_find(&iter, &entry, "_id") ||
		!BSON_ITER_HOLDS_DOCUMENT(&iter) || !bson_iter_recurse(&iter, &child))
		return false;
	while (bson_iter_next(&child))
	{
		if (strcmp(bson_iter_key(&child), IDX_ENTRY_FACT_ID) != 0)
			idx_check_append(bson_append_iter(&key, NULL, -1, &child));
	}
	if (ix->group_key)
		pfree(ix->group_key);
	ix->group_key = MemoryContextAlloc(state->scan_cxt, key.len);
	memcpy(ix->group_key, bson_get_data(&key), key.len);
	ix->group_key_len = key.len;
	bson_destroy(&key);
	return true;
}

/*
 * Does the current group hold an entry whose id the group finds do not
 * read: one of another BSON type, or a unique index's claim (its _id is
 * the key alone)?  One find, limit 1, over the _id ranges around theirs.
 * Its cursor is group_finds[0] while it runs, so that an error releases
 * it (idx_id_order_release).
 */
static bool
group_has_others(IdxScanState *state, IdxIndexScan *ix)
{
	bson_t		filter = BSON_INITIALIZER;
	bson_t		opts = BSON_INITIALIZER;
	bson_t		list;
	mongoc_collection_t *none = NULL;
	bool		found;

	PG_TRY();
	{
		idx_check_append(IDX_BSON_APPEND_ARRAY_BEGIN(&filter, "$or", &list));
		if (ix->id_order == IDX_ID_ORDER_INTEGERS)
		{
			append_or_range(&list, "0", ix, "$gte", BOUND_NONE,
							"$lte", BOUND_NULL);
			append_or_range(&list, "1", ix, "$gte", BOUND_STRING,
							"$lte", BOUND_MAXKEY);
		}
		else
		{
			append_or_range(&list, "0", ix, "$gte", BOUND_NONE,
							"$lt", BOUND_STRING);
			append_or_range(&list, "1", ix, "$gte", BOUND_OBJECT,
							"$lt", BOUND_OID_LEAST);
			append_or_range(&list, "2", ix, "$gt", BOUND_OID_GREATEST,
							"$lte", BOUND_MAXKEY);
		}
		idx_check_append(bson_append_array_end(&filter, &list));
		idx_check_append(BSON_APPEND_INT64(&opts, "limit", 1));
		idx_check_append(BSON_APPEND_BOOL(&opts, "singleBatch", true));
		ix->group_finds[0] = idx_lookup_find(state, ix, &filter, &opts);
		found = idx_scan_next_doc(state, &ix->group_finds[0],
								  ix->def->collection,
								  ix->def->database) != NULL;
		idx_release_find(state, &ix->group_finds[0], &none);
	}
	PG_FINALLY();
	{
		bson_destroy(&filter);
		bson_destroy(&opts);
	}
	PG_END_TRY();
	return found;
}

/*
 * Open group find "i": the current group's entries whose ids lie between
 * two bounds, sorted on their _id (the _id index), in batches as the
 * lookup's.
 */
static void
open_group_find(IdxScanState *state, IdxIndexScan *ix, int i,
				const char *lo_op, IdBound lo, const char *hi_op, IdBound hi)
{
	bson_t		filter = BSON_INITIALIZER;
	bson_t		opts = BSON_INITIALIZER;
	bson_t		sort;

	PG_TRY();
	{
		append_id_range(&filter, ix, lo_op, lo, hi_op, hi);
		idx_check_append(BSON_APPEND_DOCUMENT_BEGIN(&opts, "sort", &sort));
		idx_check_append(BSON_APPEND_INT32(&sort, "_id", 1));
		idx_check_append(bson_append_document_end(&opts, &sort));
		/* int64, which mongoc_cursor_set_batch_size() can overwrite */
		idx_check_append(BSON_APPEND_INT64(&opts, "batchSize",
										   idx_lookup_batch_size(state, ix)));
		ix->group_finds[i] = idx_lookup_find(state, ix, &filter, &opts);
	}
	PG_FINALLY();
	{
		bson_destroy(&filter);
		bson_destroy(&opts);
	}
	PG_END_TRY();
}

/*
 * The next entry of group find "i", or NULL at its end (or if it is not
 * open).  Its next batch is as large as the lookup's would be now.
 */
static const bson_t *
read_group_find(IdxScanState *state, IdxIndexScan *ix, int i)
{
	if (ix->group_finds[i] == NULL)
		return NULL;
	mongoc_cursor_set_batch_size(ix->group_finds[i],
								 idx_lookup_batch_size(state, ix));
	return idx_scan_next_doc(state, &ix->group_finds[i], ix->def->collection,
							 ix->def->database);
}

/*
 * Has the group being read whole filled a batch of the lookup without
 * ending, and could MongoDB give it in _id order (not yet ruled out for
 * this group)?
 */
static bool
outgrows_lookup(IdxScanState *state, IdxIndexScan *ix)
{
	return ix->id_order != IDX_ID_ORDER_LOCAL && !ix->group_checked &&
		ix->tie_n >= idx_lookup_batch_size(state, ix);
}

/*
 * Read the current group apart, in _id order (see the file's comment):
 * one find of its numbers, or one of its strings and one of its
 * ObjectIds, unless it holds other ids.  The entries read so far go: the
 * group finds read them again.  False to go on reading the group whole.
 */
static bool
start_group_apart(IdxScanState *state, IdxIndexScan *ix)
{
	ix->group_checked = true;
	if (!set_group_key(state, ix) || group_has_others(state, ix))
		return false;
	if (ix->id_order == IDX_ID_ORDER_INTEGERS)
		open_group_find(state, ix, 0, "$gt", BOUND_NULL, "$lt", BOUND_STRING);
	else
	{
		open_group_find(state, ix, 0, "$gte", BOUND_STRING,
						"$lt", BOUND_OBJECT);
		open_group_find(state, ix, 1, "$gte", BOUND_OID_LEAST,
						"$lte", BOUND_OID_GREATEST);
	}
	ix->group_head[0] = read_group_find(state, ix, 0);
	ix->group_head[1] = read_group_find(state, ix, 1);
	ix->group_taken = -1;
	ix->tie_n = ix->tie_pos = 0;
	ix->in_group = true;
	ix->groups_apart++;
	return true;
}

/*
 * Which group find's next entry comes first in the _id column's order: 0
 * or 1, -1 when both are at their end.  Text ids (strings, ObjectIds)
 * compare as the text they read as, byte by byte.
 */
static int
pick_group_head(IdxIndexScan *ix)
{
	bson_iter_t it0;
	bson_iter_t it1;
	char		buf0[25];
	char		buf1[25];
	const char *s0;
	const char *s1;
	uint32		len0;
	uint32		len1;

	if (ix->group_head[0] == NULL)
		return ix->group_head[1] != NULL ? 1 : -1;
	if (ix->group_head[1] == NULL)
		return 0;
	if (!bson_iter_init_find(&it0, ix->group_head[0], IDX_ENTRY_FACT_ID) ||
		!idx_bson_text(&it0, buf0, &s0, &len0))
		return 0;
	if (!bson_iter_init_find(&it1, ix->group_head[1], IDX_ENTRY_FACT_ID) ||
		!idx_bson_text(&it1, buf1, &s1, &len1))
		return 1;
	return idx_text_bytes_cmp(s0, len0, s1, len1) <= 0 ? 0 : 1;
}

/*
 * The next entry of the group read apart, or NULL at its end.  It stays
 * valid until the next call (each find's entry is its cursor's current
 * document, and only the find whose entry was returned reads on).
 */
static const bson_t *
group_next(IdxScanState *state, IdxIndexScan *ix)
{
	int			pick;

	if (ix->group_taken >= 0)
		ix->group_head[ix->group_taken] =
			read_group_find(state, ix, ix->group_taken);
	pick = pick_group_head(ix);
	ix->group_taken = pick;
	if (pick < 0)
		return NULL;
	ix->entries_read++;
	ix->exec_entries++;
	return ix->group_head[pick];
}

/*
 * Is the order key fixed by an equality (WHERE key = v ORDER BY _id): all
 * the lookup's entries are then one group?
 */
static bool
order_key_fixed(IdxIndexScan *ix)
{
	ListCell   *lc;

	foreach(lc, ix->conds)
	{
		List	   *cond = lfirst(lc);
		IdxCondOp	op = list_nth_int(cond, 1);

		if (list_nth_int(cond, 0) == ix->order_key &&
			(op == ICOND_EQ || op == ICOND_NULL))
			return true;
	}
	return false;
}

/*
 * Is there a condition on the order key (any leaves its NULL entries out,
 * or decides them: route_lookup.c)?
 */
static bool
order_key_has_cond(IdxIndexScan *ix)
{
	ListCell   *lc;

	foreach(lc, ix->conds)
	{
		if (list_nth_int(lfirst(lc), 0) == ix->order_key)
			return true;
	}
	return false;
}

/*
 * Descending, MongoDB places the NULL entries of the order key last, in
 * the same find; $lt, which only matches values of the key's own type,
 * leaves them out.  When the lookup reads them there (no part of their
 * own, no condition on the key), they become a part of their own after
 * the current one, as idx_lookup_split_key would have made them.
 */
static void
split_null_tail(IdxIndexScan *ix)
{
	if (!ix->order_desc || ix->split_key >= 0 || order_key_has_cond(ix))
		return;
	ix->split_key = ix->order_key;
	ix->null_part = ix->part + 1;
	ix->nparts = ix->part + 2;
}

/*
 * The group read apart is over: the lookup goes on past its key ($gt, or
 * $lt descending; after the NULL group ascending, the non-NULL keys), or
 * from the next part where the current one holds nothing after the group
 * (the NULL group, last descending or in a part of its own).  Where an
 * equality fixes the key the group was every entry, and the lookup is
 * done.
 */
static void
end_group(IdxScanState *state, IdxIndexScan *ix)
{
	bson_t		key;
	bson_t		value = BSON_INITIALIZER;
	bson_iter_t iter;
	const char *op;
	uint8	   *data;
	uint32		len;

	ix->in_group = false;
	if (order_key_fixed(ix))
	{
		ix->lookup_done = true;
		return;
	}
	if (!bson_init_static(&key, ix->group_key, ix->group_key_len) ||
		!bson_iter_init_find(&iter, &key, idx_key_field(ix->order_key)))
		elog(ERROR, "invalid key of a group of equal keys");
	if (!BSON_ITER_HOLDS_NULL(&iter))
	{
		op = ix->order_desc ? "$lt" : "$gt";
		split_null_tail(ix);
	}
	else if (ix->order_desc ||
			 (ix->split_key == ix->order_key && ix->part == ix->null_part))
		op = NULL;
	else
		op = "$ne";
	idx_check_append(bson_append_iter(&value, "v", 1, &iter));
	len = value.len;
	data = palloc(len);
	memcpy(data, bson_get_data(&value), len);
	bson_destroy(&value);
	idx_lookup_reopen(state, ix, op, data, len);
	pfree(data);
}

/*
 * The next entry of an ORDER BY key, _id scan, or NULL when there is none:
 * the next of the group read apart, or of the group read whole and
 * sorted.  It stays valid until the next call.
 */
const bson_t *
idx_id_order_next(IdxScanState *state, IdxIndexScan *ix)
{
	for (;;)
	{
		if (ix->in_group)
		{
			const bson_t *entry = group_next(state, ix);

			if (entry != NULL)
				return entry;
			end_group(state, ix);
		}
		else if (ix->tie_pos < ix->tie_n)
		{
			bson_init_static(&ix->tie_current, ix->tie[ix->tie_pos].data,
							 ix->tie[ix->tie_pos].len);
			ix->tie_pos++;
			return &ix->tie_current;
		}
		else if (!read_tie_group(state, ix))
			return NULL;
	}
}

/*
 * Are entries still to be returned that the lookup gave already: a group
 * read apart, the rest of a group read whole, or the next group's first
 * entry ("pending")?
 */
bool
idx_id_order_holds(IdxIndexScan *ix)
{
	return ix->in_group || ix->tie_pos < ix->tie_n || ix->pending != NULL;
}

/*
 * Close the group finds and forget the groups of this execution (rescan,
 * error).  Idempotent.
 */
void
idx_id_order_release(IdxScanState *state, IdxIndexScan *ix)
{
	int			i;

	for (i = 0; i < 2; i++)
	{
		mongoc_collection_t *none = NULL;

		idx_release_find(state, &ix->group_finds[i], &none);
		ix->group_head[i] = NULL;
	}
	ix->in_group = false;
	ix->group_taken = -1;
	ix->after_op = NULL;
	ix->tie_n = ix->tie_pos = 0;
	ix->pending = NULL;
}
