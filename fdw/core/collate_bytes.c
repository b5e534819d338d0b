/*-------------------------------------------------------------------------
 *
 * collate_bytes.c
 *		  Which collations order text as its bytes do (collate_bytes.h).
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/core/collate_bytes.c
 *
 * C and POSIX order as bytes.  So does a libc "C.<encoding>" locale of a
 * UTF-8 database, but only after a check set: every pair of its strings
 * must compare alike through strcoll and strcmp.  The answer is found
 * once per backend and collation (the C library does not change under a
 * running backend) and forgotten when pg_collation changes.  Pushed text
 * ranges and sorts (deparse.c, order_path.c) and index-table keys
 * (index_collate.c) rely on it.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <locale.h>

#include "access/htup_details.h"
#include "catalog/pg_collation.h"
#include "mb/pg_wchar.h"
#include "utils/builtins.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/syscache.h"

#include "core/collate_bytes.h"
#include "core/pg_compat.h"

/* One collation's answer, as found in this backend */
typedef struct BytewiseEntry
{
	Oid			collid;
	bool		bytewise;
} BytewiseEntry;

static List *answers = NIL;		/* of BytewiseEntry, in TopMemoryContext */
static bool callback_registered = false;

/*
 * The check set for libc collations: cases, accents (French orders them
 * backwards), punctuation that many locales ignore at the first level,
 * digits, ligatures, combining marks, characters outside the BMP.
 */
const char *const idx_collation_check_strings[] = {
	"", " ", "a", "A", "b", "B", "z", "Z", "aa", "ab", "aB", "Ab", "a b",
	"a-b", "ab-", "-ab", "a_b", "a.b", "1", "10", "2", "9", "0.5",
	"\xc3\xa4", "\xc3\x84", "ae", "\xc3\xa9", "e", "f",
	"cote", "cot\xc3\xa9", "c\xc3\xb4te", "c\xc3\xb4t\xc3\xa9",
	"e\xcc\x81", "\xc3\x9f", "ss", "SS", "\xef\xac\x81", "fi",
	"\xc5\x93", "oe", "\xc3\xb8", "o", "\xe2\x85\xa8", "ix",
	"\xf0\x9f\x98\x80", "\xef\xbf\xbd", "\xe4\xb8\xad", "\xd0\x96", "\xce\xa9",
	"\t", "a\tb", "~", "z~"
};

const int	idx_collation_ncheck = lengthof(idx_collation_check_strings);

/*
 * pg_collation changed: forget what was found (a collation dropped and
 * created again may come back under the same OID).
 */
static void
collation_changed(Datum arg, int cacheid, uint32 hashvalue)
{
	answers = NIL;				/* the few bytes are left behind */
}

/* -1, 0 or 1 */
static int
sign(int x)
{
	return (x > 0) - (x < 0);
}

/*
 * strcoll under a libc collation (NULL: the database's default).
 */
int
idx_libc_strcoll(pg_locale_t loc, const char *a, const char *b)
{
	if (loc)
		return strcoll_l(a, b, loc->info.lt);
	return strcoll(a, b);
}

/*
 * The locale name of a libc collation ("C.UTF-8", "en_US.utf8").
 */
static char *
libc_locale_name(Oid collid)
{
	HeapTuple	tp;
	Datum		datum;
	bool		isnull;
	char	   *result;

	if (collid == DEFAULT_COLLATION_OID)
		return pstrdup(setlocale(LC_COLLATE, NULL));
	tp = SearchSysCache1(COLLOID, ObjectIdGetDatum(collid));
	if (!HeapTupleIsValid(tp))
		elog(ERROR, "cache lookup failed for collation %u", collid);
	datum = SysCacheGetAttr(COLLOID, tp, Anum_pg_collation_collcollate,
							&isnull);
	result = isnull ? pstrdup("") : TextDatumGetCString(datum);
	ReleaseSysCache(tp);
	return result;
}

/*
 * Do all pairs of the check set compare alike through strcoll and strcmp?
 */
static bool
libc_agrees_with_strcmp(pg_locale_t loc)
{
	int			i,
				j;

	for (i = 0; i < idx_collation_ncheck; i++)
	{
		for (j = 0; j < idx_collation_ncheck; j++)
		{
			const char *a = idx_collation_check_strings[i];
			const char *b = idx_collation_check_strings[j];

			if (sign(idx_libc_strcoll(loc, a, b)) != sign(strcmp(a, b)))
				return false;
		}
	}
	return true;
}

/*
 * Find whether a valid collation orders as bytes.
 */
static bool
examine_collation(Oid collid)
{
	pg_locale_t loc;

	if (idx_collate_is_c(collid))
		return true;
	if (GetDatabaseEncoding() != PG_UTF8 ||
		!get_collation_isdeterministic(collid))
		return false;
	loc = pg_newlocale_from_collation(collid);
	if (loc && loc->provider != COLLPROVIDER_LIBC)
		return false;
	return pg_strncasecmp(libc_locale_name(collid), "C.", 2) == 0 &&
		libc_agrees_with_strcmp(loc);
}

/*
 * Does "collid" order strings as their bytes do?  Examined on first use.
 */
bool
idx_collation_bytewise(Oid collid)
{
	BytewiseEntry *entry;
	ListCell   *lc;
	bool		bytewise;
	MemoryContext oldcxt;

	if (!OidIsValid(collid))
		return false;
	foreach(lc, answers)
	{
		entry = lfirst(lc);
		if (entry->collid == collid)
			return entry->bytewise;
	}
	if (!callback_registered)
	{
		CacheRegisterSyscacheCallback(COLLOID, collation_changed, (Datum) 0);
		callback_registered = true;
	}
	bytewise = examine_collation(collid);	/* errors leave nothing behind */
	oldcxt = MemoryContextSwitchTo(TopMemoryContext);
	entry = palloc(sizeof(BytewiseEntry));
	entry->collid = collid;
	entry->bytewise = bytewise;
	answers = lappend(answers, entry);
	MemoryContextSwitchTo(oldcxt);
	return bytewise;
}
