/*-------------------------------------------------------------------------
 *
 * rawscan.c
 *		  The floor of a full scan's client CPU: a find read with libmongoc
 *		  and nothing else.
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  test/bench/rawscan.c
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
 * turns with the backend run by run.  A line starting with "rows" runs a
 * read in rows mode (below), any other line a plain read.
 *
 * A plain read only takes each document from the cursor
 * (mongoc_cursor_next), as the FDW takes it before converting it: what the
 * backend spends beyond this is the FDW's and PostgreSQL's.  That is the
 * floor of a scan whose rows go nowhere.  Rows sent to a client cost more
 * than that anywhere: in rows mode each document is also turned into a
 * row for a client, the least a program that serves rows does, to compare
 * fairly with rows that PostgreSQL sends: every top-level value as text
 * (strings as they are, integers in decimal, doubles with %.17g, booleans,
 * ObjectIds in hex; null as no value; other types as their BSON type
 * number), each row framed as a PostgreSQL DataRow message (type byte,
 * length, field count, length-prefixed fields) in an 8 kB buffer that is
 * written to /dev/null whenever full.  It does no less than that, and
 * costs less than a socket to a real client.  The credentials come from
 * MONGO_USER and
 * MONGO_PASSWORD (authSource admin), as the bench's user mapping has them.
 * Exits 1 with a message on any error.
 *
 * Build (test/bench/measure.py does): cc -O2 rawscan.c $(pkg-config
 * --cflags --libs libmongoc-1.0)
 *
 *-------------------------------------------------------------------------
 */
#include <mongoc/mongoc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

/*
 * Rows mode: a row is built in rowbuf (grown as needed, reused), then
 * copied whole into the 8 kB output buffer, which is written to /dev/null
 * when full: as PostgreSQL builds a DataRow and then copies it into its
 * send buffer.
 */
static char outbuf[8192];
static size_t outlen;
static char *rowbuf;
static size_t rowlen;
static size_t rowsize;
static FILE *devnull;

static void
flush_out(void)
{
	if (outlen > 0 && fwrite(outbuf, 1, outlen, devnull) != outlen)
		fail("output", "write to /dev/null failed");
	outlen = 0;
}

/* Append "len" bytes to the output, flushing as it fills. */
static void
send_bytes(const char *p, size_t len)
{
	while (len > 0)
	{
		size_t		n = sizeof(outbuf) - outlen;

		if (n == 0)
		{
			flush_out();
			continue;
		}
		if (n > len)
			n = len;
		memcpy(outbuf + outlen, p, n);
		outlen += n;
		p += n;
		len -= n;
	}
}

/* Append "len" bytes to the row being built. */
static void
put_bytes(const void *p, size_t len)
{
	if (rowlen + len > rowsize)
	{
		rowsize = (rowlen + len) * 2;
		rowbuf = realloc(rowbuf, rowsize);
		if (rowbuf == NULL)
			fail("output", "out of memory");
	}
	memcpy(rowbuf + rowlen, p, len);
	rowlen += len;
}

/* A big-endian integer of "bytes" bytes, as the message format has them. */
static void
put_int(uint32_t v, int bytes)
{
	unsigned char b[4];
	int			i;

	for (i = 0; i < bytes; i++)
		b[i] = (unsigned char) (v >> (8 * (bytes - 1 - i)));
	put_bytes(b, bytes);
}

/* An int64 in decimal, into buf (at least 21 bytes); returns the length. */
static int
format_int64(int64_t v, char *buf)
{
	char		tmp[21];
	uint64_t	u = v < 0 ? -(uint64_t) v : (uint64_t) v;
	int			n = 0;
	int			len = 0;

	do
	{
		tmp[n++] = (char) ('0' + u % 10);
		u /= 10;
	} while (u > 0);
	if (v < 0)
		buf[len++] = '-';
	while (n > 0)
		buf[len++] = tmp[--n];
	return len;
}

/* One value as a length-prefixed text field (-1 and nothing for null). */
static void
put_value(const bson_iter_t *iter)
{
	char		buf[64];
	const char *text = buf;
	uint32_t	len;

	switch (bson_iter_type(iter))
	{
		case BSON_TYPE_UTF8:
			text = bson_iter_utf8(iter, &len);
			break;
		case BSON_TYPE_INT32:
			len = format_int64(bson_iter_int32(iter), buf);
			break;
		case BSON_TYPE_INT64:
			len = format_int64(bson_iter_int64(iter), buf);
			break;
		case BSON_TYPE_DOUBLE:
			len = snprintf(buf, sizeof(buf), "%.17g", bson_iter_double(iter));
			break;
		case BSON_TYPE_BOOL:
			len = 1;
			buf[0] = bson_iter_bool(iter) ? 't' : 'f';
			break;
		case BSON_TYPE_OID:
			bson_oid_to_string(bson_iter_oid(iter), buf);
			len = 24;
			break;
		case BSON_TYPE_NULL:
		case BSON_TYPE_UNDEFINED:
			put_int(0xFFFFFFFF, 4);
			return;
		default:
			len = format_int64(bson_iter_type(iter), buf);
			break;
	}
	put_int(len, 4);
	put_bytes(text, len);
}

/* A document as a DataRow message, sent. */
static void
send_row(const bson_t *doc)
{
	bson_iter_t iter;
	uint32_t	len;
	uint32_t	nfields = 0;

	rowlen = 0;
	put_bytes("D", 1);
	put_int(0, 4);				/* the length and field count, set below */
	put_int(0, 2);
	if (bson_iter_init(&iter, doc))
		while (bson_iter_next(&iter))
		{
			put_value(&iter);
			nfields++;
		}
	len = (uint32_t) (rowlen - 1);
	rowbuf[1] = (char) (len >> 24);
	rowbuf[2] = (char) (len >> 16);
	rowbuf[3] = (char) (len >> 8);
	rowbuf[4] = (char) len;
	rowbuf[5] = (char) (nfields >> 8);
	rowbuf[6] = (char) nfields;
	send_bytes(rowbuf, rowlen);
}

/*
 * One full read of the find, in rows mode if "rows"; returns the number of
 * documents.
 */
static long
scan_once(mongoc_collection_t *coll, const bson_t *opts, int rows)
{
	bson_t		filter = BSON_INITIALIZER;
	mongoc_cursor_t *cursor;
	const bson_t *doc;
	bson_error_t error;
	long		n = 0;

	cursor = mongoc_collection_find_with_opts(coll, &filter, opts, NULL);
	while (mongoc_cursor_next(cursor, &doc))
	{
		if (rows)
			send_row(doc);
		n++;
	}
	if (rows)
		flush_out();
	if (mongoc_cursor_error(cursor, &error))
		fail("cursor", error.message);
	mongoc_cursor_destroy(cursor);
	bson_destroy(&filter);
	return n;
}

/* One read, measured, and its line on stdout. */
static void
measured_run(mongoc_collection_t *coll, const bson_t *opts, int rows)
{
	double		c0 = clock_ms(CLOCK_PROCESS_CPUTIME_ID);
	double		w0 = clock_ms(CLOCK_MONOTONIC);
	long		n = scan_once(coll, opts, rows);
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

	devnull = fopen("/dev/null", "w");
	if (devnull == NULL)
		fail("output", "cannot open /dev/null");
	setvbuf(devnull, NULL, _IONBF, 0);
	scan_once(coll, opts, 0);	/* warm-up */
	if (runs == 0)
	{
		char		line[64];

		printf("ready\n");
		fflush(stdout);
		while (fgets(line, sizeof(line), stdin) != NULL)
			measured_run(coll, opts, strncmp(line, "rows", 4) == 0);
	}
	for (i = 0; i < runs; i++)
		measured_run(coll, opts, 0);
	mongoc_collection_destroy(coll);
	bson_destroy(opts);
	mongoc_client_destroy(client);
	mongoc_uri_destroy(uri);
	mongoc_cleanup();
	return 0;
}
