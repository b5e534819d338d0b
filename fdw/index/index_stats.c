/*-------------------------------------------------------------------------
 *
 * index_stats.c
 *		  Statistics of index tables, refreshed by ANALYZE.
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/index/index_stats.c
 *
 * For every valid index of the analyzed table: the number of entries (a
 * metadata count of the index collection) and the number of distinct
 * keys, estimated from the rows ANALYZE sampled with the Duj1 estimator
 * PostgreSQL itself uses (Haas and Stokes): n * d / (n - f1 + f1 * n / N),
 * where the sample has n entries, d distinct keys and f1 keys seen once,
 * and the index N entries.  The planner uses them for keys that have no
 * column statistics of their own (lower()/upper()).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <math.h>

#include "access/htup_details.h"
#include "common/hashfn.h"
#include "miscadmin.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"
#include "utils/rel.h"

#include "core/connection.h"
#include "core/convert.h"
#include "core/handle.h"
#include "index/index_catalog.h"
#include "index/index_ddl.h"
#include "index/index_entry.h"
#include "index/index_stats.h"

/* One distinct key of the sample (hash of its BSON) and how often seen */
typedef struct KeyCount
{
	uint64		hash;
	int64		count;
} KeyCount;

/*
 * A 64-bit hash of one entry's key values, as their canonical BSON.
 */
static uint64
key_hash(const IdxIndexDef *def, const Datum *keyvalues, const bool *keynulls)
{
	bson_t		doc = BSON_INITIALIZER;
	uint64		hash;
	int			k;

	for (k = 0; k < def->nkeys; k++)
		idx_append_key_value(&doc, idx_key_field(k), keyvalues[k],
							 def->keys[k].keytype, keynulls[k]);
	hash = hash_bytes_extended(bson_get_data(&doc), doc.len, 0);
	bson_destroy(&doc);
	return hash;
}

/*
 * Estimate the distinct keys of "def" from the sampled rows, given the
 * index's total number of entries.
 */
static double
estimate_distinct_keys(const IdxIndexDef *def, Relation rel, HeapTuple *rows,
					   int numrows, double entries)
{
	TupleDesc	tupdesc = RelationGetDescr(rel);
	Datum	   *values = palloc(sizeof(Datum) * tupdesc->natts);
	bool	   *nulls = palloc(sizeof(bool) * tupdesc->natts);
	HASHCTL		ctl;
	HTAB	   *seen;
	HASH_SEQ_STATUS scan;
	KeyCount   *kc;
	double		n = 0,
				d = 0,
				f1 = 0;
	int			i;

	ctl.keysize = sizeof(uint64);
	ctl.entrysize = sizeof(KeyCount);
	ctl.hcxt = CurrentMemoryContext;
	seen = hash_create("idxtable_fdw key sample", 1024, &ctl,
					   HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);

	for (i = 0; i < numrows; i++)
	{
		Datum	   *keyvalues;
		bool	   *keynulls;
		int			nentries,
					e;

		CHECK_FOR_INTERRUPTS();
		heap_deform_tuple(rows[i], tupdesc, values, nulls);
		nentries = idx_compute_keys(def, values, nulls, &keyvalues, &keynulls);
		for (e = 0; e < nentries; e++)
		{
			uint64		hash = key_hash(def, keyvalues + e * def->nkeys,
										keynulls + e * def->nkeys);
			bool		found;

			kc = hash_search(seen, &hash, HASH_ENTER, &found);
			kc->count = found ? kc->count + 1 : 1;
			n++;
		}
	}

	hash_seq_init(&scan, seen);
	while ((kc = hash_seq_search(&scan)) != NULL)
	{
		d++;
		if (kc->count == 1)
			f1++;
	}
	if (n == 0)
		return 0;
	if (n >= entries)
		return d;				/* the whole index was sampled */
	return Min(Max(n * d / (n - f1 + f1 * n / entries), d), entries);
}

/*
 * Refresh entries and distinct keys of every valid index of "rel" from the
 * rows ANALYZE sampled.
 */
void
idx_analyze_indexes(Relation rel, HeapTuple *rows, int numrows,
					mongoc_client_t *client, const char *servername)
{
	List	   *indexes = idx_get_indexes(RelationGetRelid(rel),
									  rel->rd_rel->relowner);
	MemoryContext cxt = AllocSetContextCreate(CurrentMemoryContext,
											  "idxtable_fdw index stats",
											  ALLOCSET_DEFAULT_SIZES);
	MemoryContext oldcxt = MemoryContextSwitchTo(cxt);
	ListCell   *lc;

	/* the definitions live in the caller's context; cxt is per index */
	foreach(lc, indexes)
	{
		IdxIndexDef *def = lfirst(lc);
		double		entries;
		double		distinct;

		if (def->state != IDX_STATE_VALID)
			continue;
		entries = (double) idx_count_documents(client, servername,
											   def->database,
											   def->collection);
		distinct = def->unique ? entries :
			estimate_distinct_keys(def, rel, rows, numrows, entries);
		idx_set_index_stats(def->name, (int64) entries,
							(int64) rint(distinct));
		MemoryContextReset(cxt);
	}
	MemoryContextSwitchTo(oldcxt);
	MemoryContextDelete(cxt);
}
