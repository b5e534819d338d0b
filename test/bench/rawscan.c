/*
 * rawscan.c - the floor of a full scan's client CPU: a find read with
 * libmongoc and nothing else.
 *
 *   rawscan URI DATABASE COLLECTION OPTIONS_JSON RUNS
 *
 * Runs the find {} with the given options (the bench passes the FDW's own:
 * projection, batchSize, collation) RUNS + 1 times on one client, the first
 * as a warm-up (connection, authentication, server selection), and prints
 * one line per measured run:
 *
 *   rows <documents> cpu_ms <process CPU, user + system> wall_ms <elapsed>
 *
 * With RUNS 0, after the warm-up it prints "ready" and then runs one read
 * for each line it reads on stdin, until EOF, so that the bench can take
 * turns with the backend run by run.
 *
 * Each document is only taken from the cursor (mongoc_cursor_next), as the
 * FDW takes it before converting it: what the backend spends beyond this is
 * the FDW's and PostgreSQL's.  The credentials come from MONGO_USER and
 * MONGO_PASSWORD (authSource admin), as the bench's user mapping has them.
 * Exits 1 with a message on any error.
 *
 * Build (test/bench/measure.py does): cc -O2 rawscan.c $(pkg-config
 * --cflags --libs libmongoc-1.0)
 */
#include <mongoc/mongoc.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static void
fail(const char *step, const char *message)
{
	fprintf(stderr, "rawscan: %s: %s\n", step, message);
	exit(1);
}

static double
clock_ms(clockid_t clock)
{
	struct timespec ts;

	clock_gettime(clock, &ts);
	return ts.tv_sec * 1000.0 + ts.tv_nsec / 1e6;
}

/* One full read of the find; returns the number of documents. */
static long
scan_once(mongoc_collection_t *coll, const bson_t *opts)
{
	bson_t		filter = BSON_INITIALIZER;
	mongoc_cursor_t *cursor;
	const bson_t *doc;
	bson_error_t error;
	long		n = 0;

	cursor = mongoc_collection_find_with_opts(coll, &filter, opts, NULL);
	while (mongoc_cursor_next(cursor, &doc))
		n++;
	if (mongoc_cursor_error(cursor, &error))
		fail("cursor", error.message);
	mongoc_cursor_destroy(cursor);
	bson_destroy(&filter);
	return n;
}

/* One read, measured, and its line on stdout. */
static void
measured_run(mongoc_collection_t *coll, const bson_t *opts)
{
	double		c0 = clock_ms(CLOCK_PROCESS_CPUTIME_ID);
	double		w0 = clock_ms(CLOCK_MONOTONIC);
	long		n = scan_once(coll, opts);
	double		c1 = clock_ms(CLOCK_PROCESS_CPUTIME_ID);
	double		w1 = clock_ms(CLOCK_MONOTONIC);

	printf("rows %ld cpu_ms %.3f wall_ms %.3f\n", n, c1 - c0, w1 - w0);
	fflush(stdout);
}

int
main(int argc, char **argv)
{
	mongoc_uri_t *uri;
	mongoc_client_t *client;
	mongoc_collection_t *coll;
	bson_t	   *opts;
	bson_error_t error;
	const char *user = getenv("MONGO_USER");
	int			runs;
	int			i;

	if (argc != 6)
		fail("usage", "rawscan URI DATABASE COLLECTION OPTIONS_JSON RUNS");
	runs = atoi(argv[5]);
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
	client = mongoc_client_new_from_uri(uri);
	if (client == NULL)
		fail("client", "mongoc_client_new_from_uri failed");
	opts = bson_new_from_json((const uint8_t *) argv[4], -1, &error);
	if (opts == NULL)
		fail("options", error.message);
	coll = mongoc_client_get_collection(client, argv[2], argv[3]);

	scan_once(coll, opts);		/* warm-up */
	if (runs == 0)
	{
		char		line[64];

		printf("ready\n");
		fflush(stdout);
		while (fgets(line, sizeof(line), stdin) != NULL)
			measured_run(coll, opts);
	}
	for (i = 0; i < runs; i++)
		measured_run(coll, opts);
	mongoc_collection_destroy(coll);
	bson_destroy(opts);
	mongoc_client_destroy(client);
	mongoc_uri_destroy(uri);
	mongoc_cleanup();
	return 0;
}
