/*-------------------------------------------------------------------------
 *
 * index_collate.c
 *		  Text keys of index tables under the column's collation: which
 *		  collations order as bytes, which give trustworthy sort keys, the
 *		  stored form of a key, and the collations' versions.
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/index/index_collate.c
 *
 * The stored form is described in index_collate.h.  What a collation can
 * do is decided once per backend and collation (the provider's library
 * does not change under a running backend) and forgotten when pg_collation
 * changes.  A libc collation is trusted only after a check set: every pair
 * of its strings must compare alike through strcoll and through strcmp of
 * their strxfrm (for a bytewise collation, through strcmp itself:
 * core/collate_bytes.c);
 * glibc has had locales where strxfrm disagreed with strcoll, which is why
 * PostgreSQL itself does not use strxfrm for libc collations.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <locale.h>

#include "access/htup_details.h"
#include "catalog/pg_collation.h"
#include "catalog/pg_database.h"
#include "fmgr.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/fmgrprotos.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/pg_locale.h"
#include "utils/syscache.h"

#include "core/collate_bytes.h"
#include "core/pg_compat.h"
#include "index/index_collate.h"

#ifdef USE_ICU
#include <unicode/ucol.h>
#include <unicode/ustring.h>
#endif

/* What one collation can do, as found in this backend */
typedef struct CollCapability
{
	Oid			collid;
	bool		bytewise;		/* orders as bytes */
	bool		sortkeys;		/* gives sort keys that agree with it */
	bool		version_known;	/* "version" has been asked for */
	char	   *version;		/* provider's version, or NULL */
} CollCapability;

static List *capabilities = NIL;	/* in TopMemoryContext */
static bool callback_registered = false;

/*
 * pg_collation changed: forget what was found (a collation dropped and
 * created again may come back under the same OID).
 */
static void
collation_changed(Datum arg, int cacheid, uint32 hashvalue)
{
	capabilities = NIL;			/* the few bytes are left behind */
}

/*
 * strxfrm under a libc collation, into a palloc'd string.
 */
static char *
libc_strxfrm(pg_locale_t loc, const char *s, size_t *len)
{
	size_t		size = strlen(s) * 4 + 16;
	char	   *buf = palloc(size);
	size_t		n;

	for (;;)
	{
		errno = 0;
		n = loc ? strxfrm_l(buf, s, size, loc->info.lt) : strxfrm(buf, s, size);
		if (errno != 0)
			ereport(ERROR,
					(errcode(ERRCODE_INTERNAL_ERROR),
					 errmsg("could not compute the sort key of a string: %m")));
		if (n < size)
			break;
		size = n + 1;
		buf = repalloc(buf, size);
	}
	*len = n;
	return buf;
}

/*
 * Do all pairs of the check set (collate_bytes.c) compare alike through
 * strcoll and through strcmp of their strxfrm?
 */
static bool
libc_check_sortkeys(pg_locale_t loc)
{
	const char *forms[64];
	size_t		len;
	int			i,
				j;

	Assert(idx_collation_ncheck <= lengthof(forms));
	for (i = 0; i < idx_collation_ncheck; i++)
		forms[i] = libc_strxfrm(loc, idx_collation_check_strings[i], &len);
	for (i = 0; i < idx_collation_ncheck; i++)
	{
		for (j = 0; j < idx_collation_ncheck; j++)
		{
			int			coll = idx_libc_strcoll(loc,
												idx_collation_check_strings[i],
												idx_collation_check_strings[j]);
			int			cmp = strcmp(forms[i], forms[j]);

			if ((coll > 0) - (coll < 0) != (cmp > 0) - (cmp < 0))
				return false;
		}
	}
	return true;
}

/*
 * Find what a collation can do.
 */
static void
examine_collation(CollCapability *cap)
{
	Oid			collid = cap->collid;
	pg_locale_t loc;

	if (idx_collation_bytewise(collid))
	{
		cap->bytewise = true;
		return;
	}
	if (!get_collation_isdeterministic(collid))
		return;
	loc = pg_newlocale_from_collation(collid);
	if (loc && loc->provider == COLLPROVIDER_ICU)
	{
#ifdef USE_ICU
		cap->sortkeys = true;	/* ICU: sort keys compare as ucol_strcoll */
#endif
		return;
	}
	cap->sortkeys = libc_check_sortkeys(loc);
}

/*
 * The capability entry of a collation, examined on first use.
 */
static CollCapability *
capability(Oid collid)
{
	CollCapability *cap;
	ListCell   *lc;
	MemoryContext oldcxt;

	foreach(lc, capabilities)
	{
		cap = lfirst(lc);
		if (cap->collid == collid)
			return cap;
	}
	if (!callback_registered)
	{
		CacheRegisterSyscacheCallback(COLLOID, collation_changed, (Datum) 0);
		callback_registered = true;
	}
	oldcxt = MemoryContextSwitchTo(TopMemoryContext);
	cap = palloc0(sizeof(CollCapability));
	cap->collid = collid;
	MemoryContextSwitchTo(oldcxt);
	examine_collation(cap);		/* errors leave nothing half-made behind */
	oldcxt = MemoryContextSwitchTo(TopMemoryContext);
	capabilities = lappend(capabilities, cap);
	MemoryContextSwitchTo(oldcxt);
	return cap;
}

/*
 * Can keys under "collid" be stored as sort keys?
 */
bool
idx_collation_has_sortkeys(Oid collid)
{
	return OidIsValid(collid) && capability(collid)->sortkeys;
}

#ifdef USE_ICU
/*
 * A string of the database encoding as the UTF-16 ICU collates, palloc'd;
 * its length in code units.  (PostgreSQL's icu_to_uchar() did this; it is
 * no longer exported since PostgreSQL 18.)
 */
static int32
icu_uchars(const char *s, int len, UChar **uchars)
{
	char	   *utf8 = pg_server_to_any(s, len, PG_UTF8);
	int32		utf8len = (utf8 == s) ? len : (int32) strlen(utf8);
	int32		ulen = 0;
	UErrorCode	status = U_ZERO_ERROR;

	u_strFromUTF8(NULL, 0, &ulen, utf8, utf8len, &status);
	if (U_FAILURE(status) && status != U_BUFFER_OVERFLOW_ERROR)
		ereport(ERROR,
				(errcode(ERRCODE_INTERNAL_ERROR),
				 errmsg("could not convert a string to UTF-16 for ICU: %s",
						u_errorName(status))));
	*uchars = palloc((ulen + 1) * sizeof(UChar));
	status = U_ZERO_ERROR;
	u_strFromUTF8(*uchars, ulen + 1, &ulen, utf8, utf8len, &status);
	if (U_FAILURE(status))
		ereport(ERROR,
				(errcode(ERRCODE_INTERNAL_ERROR),
				 errmsg("could not convert a string to UTF-16 for ICU: %s",
						u_errorName(status))));
	if (utf8 != s)
		pfree(utf8);
	return ulen;
}

/*
 * The ICU sort key of a string, without its terminating zero byte.
 */
static uint8 *
icu_sortkey(pg_locale_t loc, const char *s, int len, int32 *keylen)
{
	UChar	   *uchars;
	int32		ulen = icu_uchars(s, len, &uchars);
	int32		size = ulen * 4 + 16;
	uint8	   *buf = palloc(size);
	int32		n;

	n = ucol_getSortKey(loc->info.icu.ucol, uchars, ulen, buf, size);
	if (n > size)
	{
		buf = repalloc(buf, n);
		n = ucol_getSortKey(loc->info.icu.ucol, uchars, ulen, buf, n);
	}
	if (n <= 0)
		ereport(ERROR,
				(errcode(ERRCODE_INTERNAL_ERROR),
				 errmsg("could not compute the ICU sort key of a string")));
	pfree(uchars);
	*keylen = n - 1;
	return buf;
}
#endif

/*
 * The sort key of a text value (no zero byte in it), palloc'd.
 */
static const uint8 *
sortkey(Oid collid, text *t, int32 *keylen)
{
	pg_locale_t loc = pg_newlocale_from_collation(collid);
	char	   *s = text_to_cstring(t);
	size_t		n;
	const uint8 *result;

#ifdef USE_ICU
	if (loc && loc->provider == COLLPROVIDER_ICU)
		return icu_sortkey(loc, VARDATA_ANY(t), VARSIZE_ANY_EXHDR(t), keylen);
#endif
	result = (const uint8 *) libc_strxfrm(loc, s, &n);
	*keylen = (int32) n;
	return result;
}

/*
 * The stored form of a text value under "collid": hex(sort key), "00",
 * the original bytes.
 */
Datum
idx_sortkey_encode(Oid collid, Datum value)
{
	static const char hex[] = "0123456789abcdef";
	text	   *t = DatumGetTextPP(value);
	int			len = VARSIZE_ANY_EXHDR(t);
	int32		keylen;
	const uint8 *key;
	text	   *result;
	char	   *p;
	int			i;

	if (!idx_collation_has_sortkeys(collid))
		elog(ERROR, "collation %u has no usable sort keys", collid);
	key = sortkey(collid, t, &keylen);
	result = (text *) palloc(VARHDRSZ + keylen * 2 + 2 + len);
	SET_VARSIZE(result, VARHDRSZ + keylen * 2 + 2 + len);
	p = VARDATA(result);
	for (i = 0; i < keylen; i++)
	{
		*p++ = hex[key[i] >> 4];
		*p++ = hex[key[i] & 0xf];
	}
	*p++ = '0';
	*p++ = '0';
	memcpy(p, VARDATA_ANY(t), len);
	return PointerGetDatum(result);
}

/*
 * The original string of a stored form: what follows the first "00" at
 * an even position.
 */
char *
idx_sortkey_original(const char *stored, int len)
{
	int			i;

	for (i = 0; i + 1 < len; i += 2)
	{
		if (stored[i] == '0' && stored[i + 1] == '0')
			return pnstrdup(stored + i + 2, len - i - 2);
	}
	return pnstrdup(stored, len);	/* not a stored form: as it is */
}

/*
 * The version of the database's default collation as its provider reports
 * it now (PostgreSQL 15's pg_collation_actual_version gives none for it).
 */
static char *
default_collation_version(void)
{
	HeapTuple	tp;
	char		provider;
	Datum		datum;
	bool		isnull;
	char	   *version = NULL;

	tp = SearchSysCache1(DATABASEOID, ObjectIdGetDatum(MyDatabaseId));
	if (!HeapTupleIsValid(tp))
		elog(ERROR, "cache lookup failed for database %u", MyDatabaseId);
	provider = ((Form_pg_database) GETSTRUCT(tp))->datlocprovider;
	datum = SysCacheGetAttr(DATABASEOID, tp,
							provider == COLLPROVIDER_LIBC ?
							Anum_pg_database_datcollate :
							Anum_pg_database_datlocale, &isnull);
	if (!isnull)
		version = get_collation_actual_version(provider,
											   TextDatumGetCString(datum));
	ReleaseSysCache(tp);
	return version;
}

/*
 * Another collation's version as its provider reports it now.
 */
static char *
collation_version(Oid collid)
{
	LOCAL_FCINFO(fcinfo, 1);
	Datum		result;

	if (collid == DEFAULT_COLLATION_OID)
		return default_collation_version();
	InitFunctionCallInfoData(*fcinfo, NULL, 1, InvalidOid, NULL, NULL);
	fcinfo->args[0].value = ObjectIdGetDatum(collid);
	fcinfo->args[0].isnull = false;
	result = pg_collation_actual_version(fcinfo);
	return fcinfo->isnull ? NULL : TextDatumGetCString(result);
}

/*
 * The version the provider reports now, or NULL for an unversioned
 * collation; asked once per backend.
 */
const char *
idx_collation_version(Oid collid)
{
	CollCapability *cap = capability(collid);

	if (!cap->version_known)
	{
		char	   *version = collation_version(collid);

		if (version)
			cap->version = MemoryContextStrdup(TopMemoryContext, version);
		cap->version_known = true;
	}
	return cap->version;
}

PG_FUNCTION_INFO_V1(idxtable_collation_version);

/*
 * idxtable.collation_version(regcollation): what index_defs records and
 * compares (idx_collation_version), the database default's included.  An
 * OID that names no collation is an error, as in
 * pg_collation_actual_version().
 */
Datum
idxtable_collation_version(PG_FUNCTION_ARGS)
{
	Oid			collid = PG_GETARG_OID(0);
	const char *version;

	if (!SearchSysCacheExists1(COLLOID, ObjectIdGetDatum(collid)))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("collation with OID %u does not exist", collid)));
	version = idx_collation_version(collid);

	if (version == NULL)
		PG_RETURN_NULL();
	PG_RETURN_TEXT_P(cstring_to_text(version));
}
