/*-------------------------------------------------------------------------
 *
 * floor.c
 *		  The applier's floor in C: a bare follower of a collection's change
 *		  stream that does, per batch of events, the least an applier must.
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  test/bench/floor.c
 *
 *   floor URI DATABASE COLLECTION INDEX [INDEX ...]
 *
 * INDEX as floor.py has it: comma-separated fields, "u:" before them for a
 * unique one on lower() of the first, "+field,..." for included fields.
 * floor.py builds the index collections floor_<COLLECTION>_<i> first and
 * then runs this (when it compiles), which opens the change stream now
 * and, per getMore that brings events: one find of the facts they name
 * ({_id: {$in: [...]}}, the fields the entries need), per index
 * collection one find of those facts' entries ({id: {$in: [...]}}) and one
 * unordered bulk write of the differences (an entry no longer wanted
 * deleted, a wanted one that differs upserted).  Nothing else: no markers,
 * no stored position, no conflicts, no PostgreSQL.
 *
 * stdout: "ready <cpu s>", then after each batch applied "<events> <monotonic s>
 * <cpu s> <commands> <getMores>" (running totals).  It stops when stdin
 * closes.  The credentials come from MONGO_USER and MONGO_PASSWORD.
 *
 * Build (test/bench/floor.py does): cc -O2 floor.c $(pkg-config --cflags
 * --libs libmongoc-1.0)
 *
 *-------------------------------------------------------------------------
 */
#include <ctype.h>
#include <mongoc/mongoc.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define BATCH		1000		/* as the applier's (IDX_CS_BATCH_SIZE) */
#define AWAIT_MS	500
#define MAX_FIELDS	8

typedef struct FloorIndex
{
	int			unique;
	int			nkeys;
	char	   *keys[MAX_FIELDS];
	int			ninclude;
	char	   *include[MAX_FIELDS];
	mongoc_collection_t *coll;
} FloorIndex;

/* An entry: its _id's bytes (to find it) and the whole document */
typedef struct Entry
{
	bson_t	   *doc;
	const uint8_t *id;
	uint32_t	idlen;
} Entry;

static long commands;
static long get_mores;

static void
fail(const char *step, const char *message)
{
	fprintf(stderr, "floor: %s: %s\n", step, message);
	exit(1);
}

static double
clock_s(clockid_t clock)
{
	struct timespec ts;

	clock_gettime(clock, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Split "a,b,c" (a copy) into out[]; the count. */
static int
split(char *list, char **out)
{
	int			n = 0;
	char	   *tok;

	for (tok = strtok(list, ","); tok != NULL && n < MAX_FIELDS; tok = strtok(NULL, ","))
		out[n++] = tok;
	return n;
}

static void
parse_index(FloorIndex *ix, const char *spec)
{
	char	   *s = strdup(spec);
	char	   *plus;

	memset(ix, 0, sizeof(*ix));
	if (strncmp(s, "u:", 2) == 0)
	{
		ix->unique = 1;
		s += 2;
	}
	plus = strchr(s, '+');
	if (plus)
	{
		*plus = '\0';
		ix->ninclude = split(plus + 1, ix->include);
	}
	ix->nkeys = split(s, ix->keys);
}

/* Append the field "name" of fact (null if it lacks it) as "key" (lower: in lower case). */
static void
append_field(bson_t *out, const char *key, const bson_t *fact, const char *name,
			 int lower)
{
	bson_iter_t iter;

	if (!bson_iter_init_find(&iter, fact, name))
	{
		BSON_APPEND_NULL(out, key);
		return;
	}
	if (lower && BSON_ITER_HOLDS_UTF8(&iter))
	{
		uint32_t	len;
		const char *v = bson_iter_utf8(&iter, &len);
		char	   *l = malloc(len + 1);
		uint32_t	i;

		for (i = 0; i < len; i++)
			l[i] = tolower((unsigned char) v[i]);
		l[len] = '\0';
		bson_append_utf8(out, key, -1, l, len);
		free(l);
		return;
	}
	bson_append_iter(out, key, -1, &iter);
}

/* The entry of fact (with its _id) for ix, as floor.py builds it. */
static bson_t *
make_entry(FloorIndex *ix, const bson_t *fact)
{
	bson_t	   *doc = bson_new();
	bson_t		id;
	bson_iter_t fid;
	int			i;
	char		name[16];

	if (!bson_iter_init_find(&fid, fact, "_id"))
		fail("fact", "no _id");
	BSON_APPEND_DOCUMENT_BEGIN(doc, "_id", &id);
	if (ix->unique)
		append_field(&id, "k0", fact, ix->keys[0], 1);
	else
	{
		for (i = 0; i < ix->nkeys; i++)
		{
			snprintf(name, sizeof(name), "k%d", i);
			append_field(&id, name, fact, ix->keys[i], 0);
		}
		bson_append_iter(&id, "id", 2, &fid);
	}
	bson_append_document_end(doc, &id);
	bson_append_iter(doc, "id", 2, &fid);
	if (ix->ninclude > 0)
	{
		bson_t		v;

		BSON_APPEND_DOCUMENT_BEGIN(doc, "v", &v);
		for (i = 0; i < ix->ninclude; i++)
		{
			snprintf(name, sizeof(name), "i%d", i);
			append_field(&v, name, fact, ix->include[i], 0);
		}
		bson_append_document_end(doc, &v);
	}
	return doc;
}

static void
set_id(Entry *e)
{
	bson_iter_t iter;

	if (!bson_iter_init_find(&iter, e->doc, "_id"))
		fail("entry", "no _id");
	bson_iter_document(&iter, &e->idlen, &e->id);
}

static int
compare_entries(const void *a, const void *b)
{
	const Entry *x = a;
	const Entry *y = b;

	if (x->idlen != y->idlen)
		return x->idlen < y->idlen ? -1 : 1;
	return memcmp(x->id, y->id, x->idlen);
}

/* All documents of a find, copied; their count in *n. */
static bson_t **
find_all(mongoc_collection_t *coll, const bson_t *filter, const bson_t *opts, int *n)
{
	mongoc_cursor_t *cursor = mongoc_collection_find_with_opts(coll, filter, opts, NULL);
	const bson_t *doc;
	bson_error_t error;
	int			cap = 64;
	bson_t	  **out = malloc(sizeof(bson_t *) * cap);

	*n = 0;
	while (mongoc_cursor_next(cursor, &doc))
	{
		if (*n == cap)
			out = realloc(out, sizeof(bson_t *) * (cap *= 2));
		out[(*n)++] = bson_copy(doc);
	}
	if (mongoc_cursor_error(cursor, &error))
		fail("find", error.message);
	mongoc_cursor_destroy(cursor);
	commands++;
	return out;
}

/* One find of ix's entries of the facts, one bulk of the differences. */
static void
apply_index(FloorIndex *ix, const bson_t *in_ids, int nids, bson_t **facts, int nfacts)
{
	bson_t		filter = BSON_INITIALIZER;
	bson_t		cond;
	bson_t		opts = BSON_INITIALIZER;
	bson_t		bulk_opts = BSON_INITIALIZER;
	mongoc_bulk_operation_t *bulk;
	bson_t	  **have_docs;
	Entry	   *have;
	Entry	   *want;
	char	   *wanted;
	int			nhave;
	int			nops = 0;
	int			i;
	bson_error_t error;

	BSON_APPEND_DOCUMENT_BEGIN(&filter, "id", &cond);
	BSON_APPEND_ARRAY(&cond, "$in", in_ids);
	bson_append_document_end(&filter, &cond);
	BSON_APPEND_INT32(&opts, "batchSize", nids * 2 + 1);
	have_docs = find_all(ix->coll, &filter, &opts, &nhave);
	have = malloc(sizeof(Entry) * (nhave + 1));
	for (i = 0; i < nhave; i++)
	{
		have[i].doc = have_docs[i];
		set_id(&have[i]);
	}
	qsort(have, nhave, sizeof(Entry), compare_entries);
	wanted = calloc(nhave + 1, 1);
	want = malloc(sizeof(Entry) * (nfacts + 1));
	BSON_APPEND_BOOL(&bulk_opts, "ordered", false);
	bulk = mongoc_collection_create_bulk_operation_with_opts(ix->coll, &bulk_opts);
	for (i = 0; i < nfacts; i++)
	{
		Entry	   *found;

		want[i].doc = make_entry(ix, facts[i]);
		set_id(&want[i]);
		found = bsearch(&want[i], have, nhave, sizeof(Entry), compare_entries);
		if (found)
			wanted[found - have] = 1;
		if (found == NULL || found->doc->len != want[i].doc->len ||
			memcmp(bson_get_data(found->doc), bson_get_data(want[i].doc), found->doc->len) != 0)
		{
			bson_t		sel = BSON_INITIALIZER;
			bson_t		upsert = BSON_INITIALIZER;
			bson_iter_t it;

			bson_iter_init_find(&it, want[i].doc, "_id");
			bson_append_iter(&sel, "_id", 3, &it);
			BSON_APPEND_BOOL(&upsert, "upsert", true);
			if (!mongoc_bulk_operation_replace_one_with_opts(bulk, &sel, want[i].doc, &upsert, &error))
				fail("bulk", error.message);
			bson_destroy(&sel);
			bson_destroy(&upsert);
			nops++;
		}
	}
	for (i = 0; i < nhave; i++)
	{
		bson_t		sel = BSON_INITIALIZER;
		bson_iter_t it;

		if (wanted[i])
			continue;
		bson_iter_init_find(&it, have[i].doc, "_id");
		bson_append_iter(&sel, "_id", 3, &it);
		bson_iter_init_find(&it, have[i].doc, "id");
		bson_append_iter(&sel, "id", 2, &it);
		if (!mongoc_bulk_operation_remove_one_with_opts(bulk, &sel, NULL, &error))
			fail("bulk", error.message);
		bson_destroy(&sel);
		nops++;
	}
	if (nops > 0)
	{
		bson_t		reply;

		if (!mongoc_bulk_operation_execute(bulk, &reply, &error))
			fail("bulk write", error.message);
		bson_destroy(&reply);
		commands++;
	}
	mongoc_bulk_operation_destroy(bulk);
	for (i = 0; i < nhave; i++)
		bson_destroy(have[i].doc);
	for (i = 0; i < nfacts; i++)
		bson_destroy(want[i].doc);
	free(have_docs);
	free(have);
	free(want);
	free(wanted);
	bson_destroy(&filter);
	bson_destroy(&opts);
	bson_destroy(&bulk_opts);
}

/* The least an applier does for the batch "events" (an array). */
static long
apply_batch(mongoc_collection_t *facts_coll, FloorIndex *ixs, int nix,
			const bson_t *projection, bson_iter_t *events)
{
	bson_t		ids = BSON_INITIALIZER;
	bson_t		filter = BSON_INITIALIZER;
	bson_t		cond;
	bson_t		opts = BSON_INITIALIZER;
	bson_t	  **facts;
	long		nevents = 0;
	int			nids = 0;
	int			nfacts;
	int			i;

	while (bson_iter_next(events))
	{
		bson_iter_t id;
		char		key[16];
		const char *k;

		nevents++;
		if (!BSON_ITER_HOLDS_DOCUMENT(events) ||
			!bson_iter_recurse(events, &id) || !bson_iter_find_descendant(&id, "documentKey._id", &id))
			continue;
		bson_uint32_to_string(nids++, &k, key, sizeof(key));
		bson_append_iter(&ids, k, -1, &id);
	}
	if (nids > 0)
	{
		BSON_APPEND_DOCUMENT_BEGIN(&filter, "_id", &cond);
		BSON_APPEND_ARRAY(&cond, "$in", &ids);
		bson_append_document_end(&filter, &cond);
		BSON_APPEND_DOCUMENT(&opts, "projection", projection);
		BSON_APPEND_INT32(&opts, "batchSize", nids + 1);
		facts = find_all(facts_coll, &filter, &opts, &nfacts);
		for (i = 0; i < nix; i++)
			apply_index(&ixs[i], &ids, nids, facts, nfacts);
		for (i = 0; i < nfacts; i++)
			bson_destroy(facts[i]);
		free(facts);
	}
	bson_destroy(&ids);
	bson_destroy(&filter);
	bson_destroy(&opts);
	return nevents;
}

/* A command of the stream, in its session; the reply's cursor document. */
static int64_t
run_stream(mongoc_database_t *db, mongoc_client_session_t *session, const bson_t *cmd,
		   bson_t *reply, const char *batch, bson_iter_t *events)
{
	bson_t		opts = BSON_INITIALIZER;
	bson_error_t error;
	bson_iter_t iter;
	int64_t		id = 0;

	if (!mongoc_client_session_append(session, &opts, &error))
		fail("session", error.message);
	if (!mongoc_database_command_with_opts(db, cmd, NULL, &opts, reply, &error))
		fail("change stream", error.message);
	bson_destroy(&opts);
	commands++;
	if (bson_iter_init_find(&iter, reply, "cursor") && BSON_ITER_HOLDS_DOCUMENT(&iter))
	{
		bson_iter_t c;

		bson_iter_recurse(&iter, &c);
		if (bson_iter_find(&c, "id"))
			id = bson_iter_as_int64(&c);
		bson_iter_recurse(&iter, &c);
		if (bson_iter_find(&c, batch) && BSON_ITER_HOLDS_ARRAY(&c))
		{
			bson_iter_recurse(&c, events);
			return id;
		}
	}
	fail("change stream", "a reply without a cursor");
	return 0;
}

static int
stdin_closed(void)
{
	struct pollfd p = {0, POLLIN, 0};
	char		buf[256];

	if (poll(&p, 1, 0) > 0)
		return read(0, buf, sizeof(buf)) <= 0;
	return 0;
}

int
main(int argc, char **argv)
{
	mongoc_uri_t *uri;
	mongoc_client_t *client;
	mongoc_database_t *db;
	mongoc_collection_t *facts;
	mongoc_client_session_t *session;
	FloorIndex *ixs;
	bson_t		projection = BSON_INITIALIZER;
	bson_t		cmd;
	bson_t		reply;
	bson_iter_t events;
	bson_error_t error;
	const char *user = getenv("MONGO_USER");
	int64_t		cursor;
	long		total = 0;
	int			nix = argc - 4;
	int			i,
				j;

	if (argc < 5)
		fail("usage", "floor URI DATABASE COLLECTION INDEX [INDEX ...]");
	mongoc_init();
	uri = mongoc_uri_new_with_error(argv[1], &error);
	if (uri == NULL)
		fail("uri", error.message);
	if (user && *user)
	{
		mongoc_uri_set_username(uri, user);
		mongoc_uri_set_password(uri, getenv("MONGO_PASSWORD") ? getenv("MONGO_PASSWORD") : "");
		mongoc_uri_set_auth_source(uri, "admin");
	}
	mongoc_uri_set_appname(uri, "idxtable_bench floor");
	client = mongoc_client_new_from_uri(uri);
	if (client == NULL)
		fail("client", "mongoc_client_new_from_uri failed");
	db = mongoc_client_get_database(client, argv[2]);
	facts = mongoc_client_get_collection(client, argv[2], argv[3]);
	ixs = calloc(nix, sizeof(FloorIndex));
	for (i = 0; i < nix; i++)
	{
		char		name[256];

		parse_index(&ixs[i], argv[4 + i]);
		snprintf(name, sizeof(name), "floor_%s_%d", argv[3], i);
		ixs[i].coll = mongoc_client_get_collection(client, argv[2], name);
		for (j = 0; j < ixs[i].nkeys; j++)
			BSON_APPEND_INT32(&projection, ixs[i].keys[j], 1);
		for (j = 0; j < ixs[i].ninclude; j++)
			BSON_APPEND_INT32(&projection, ixs[i].include[j], 1);
	}
	session = mongoc_client_start_session(client, NULL, &error);
	if (session == NULL)
		fail("session", error.message);

	bson_init(&cmd);
	BCON_APPEND(&cmd, "aggregate", BCON_UTF8(argv[3]),
				"pipeline", "[", "{", "$changeStream", "{", "}", "}", "]",
				"cursor", "{", "batchSize", BCON_INT32(BATCH), "}");
	cursor = run_stream(db, session, &cmd, &reply, "firstBatch", &events);
	bson_destroy(&cmd);
	printf("ready %.4f\n", clock_s(CLOCK_PROCESS_CPUTIME_ID));
	fflush(stdout);
	for (;;)
	{
		long		n = apply_batch(facts, ixs, nix, &projection, &events);

		bson_destroy(&reply);
		if (n > 0)
		{
			total += n;
			printf("%ld %.6f %.4f %ld %ld\n", total, clock_s(CLOCK_MONOTONIC),
				   clock_s(CLOCK_PROCESS_CPUTIME_ID), commands, get_mores);
			fflush(stdout);
		}
		if (stdin_closed())
			break;
		bson_init(&cmd);
		BSON_APPEND_INT64(&cmd, "getMore", cursor);
		BSON_APPEND_UTF8(&cmd, "collection", argv[3]);
		BSON_APPEND_INT64(&cmd, "batchSize", BATCH);
		BSON_APPEND_INT64(&cmd, "maxTimeMS", AWAIT_MS);
		cursor = run_stream(db, session, &cmd, &reply, "nextBatch", &events);
		get_mores++;
		bson_destroy(&cmd);
	}
	mongoc_client_session_destroy(session);
	mongoc_client_destroy(client);
	mongoc_uri_destroy(uri);
	mongoc_cleanup();
	return 0;
}
