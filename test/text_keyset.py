#!/usr/bin/python3
"""Keyset pages on a text _id of strings and ObjectIds read O(k) documents, not the collection.

Under a collation that orders as bytes (COLLATE "C"), a sort on a text
column is pushed as two finds, one for its strings and one for its ObjectIds,
each sorted on _id (served by the _id index) and limited to OFFSET + LIMIT,
merged as bytes; a text range on _id becomes a range of the strings and one
of the ObjectIds (fdw/order.h, fdw/core/text_order.h).  So, for collections
of N strings, of N ObjectIds and of both:

- ``ORDER BY _id LIMIT k`` and ``WHERE _id > x ORDER BY _id LIMIT k`` (how
  MongoDB applications page), DESC and with an OFFSET, examine at most
  2(k + OFFSET) + 2 documents and 2(k + OFFSET) + 2 index keys
  (serverStatus metrics.queryExecutor.scannedObjects and scanned);
- ``WHERE town = ... ORDER BY _id LIMIT k`` returns what PostgreSQL's sort
  of the whole table returns;
- every page equals the same query on a local copy of the table, and
  walking the whole collection page by page returns every key once, in
  PostgreSQL's order.

Environment as for test/differential.py (PGHOST..., MONGO_URI, MONGO_USER,
MONGO_PASSWORD).  The PostgreSQL and MongoDB databases ``idxtable_keyset``
are dropped and created, and left in place.  The last line is
``text keyset: N passed, M failed``.
"""
import os
import random
import sys

from bson.objectid import ObjectId

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures"))
from results import Results  # noqa: E402  (test/fixtures)
import mongo_client  # noqa: E402  (test/fixtures)
import pg_fixture  # noqa: E402  (test/fixtures)

DATABASE = "idxtable_keyset"
N = int(os.environ.get("KEYSET_DOCS") or 20000)
TOWNS = ["Seattle", "Redmond", "Tacoma", "Spokane", "Everett"]


def keys(kind, rng):
    """N distinct _ids: strings (hex-like and not), ObjectIds, or half of each."""
    strings = set()
    while len(strings) < N:
        if rng.random() < 0.5:
            strings.add("%024x" % rng.getrandbits(96))
        else:
            strings.add("c%07d" % rng.randrange(10 ** 7))
    strings = sorted(strings)
    oids = [ObjectId("%024x" % rng.getrandbits(96)) for _ in range(N)]
    if kind == "strings":
        return strings
    if kind == "objectids":
        return oids
    return strings[: N // 2] + [o for o in oids[: N // 2] if str(o) not in strings]


def setup(rng):
    """The three collections and their foreign tables and local copies."""
    client = mongo_client.connect()
    client.drop_database(DATABASE)
    db = client[DATABASE]
    conn = pg_fixture.setup_database(DATABASE, db_options=pg_fixture.UTF8_C)
    for kind in ("strings", "objectids", "mixed"):
        docs = [{"_id": k, "town": TOWNS[i % len(TOWNS)], "n": i} for i, k in enumerate(keys(kind, rng))]
        db[kind].insert_many(docs)
        pg_fixture.create_foreign_table(conn, kind, "_id text COLLATE \"C\", town text, n int")
        with conn.cursor() as cur:
            cur.execute("CREATE TABLE %s_local AS SELECT * FROM %s" % (kind, kind))
            cur.execute("ANALYZE %s_local" % kind)
    return client, conn


def counters(client):
    """(index keys, documents) examined so far."""
    metrics = client.admin.command("serverStatus")["metrics"]["queryExecutor"]
    return metrics["scanned"], metrics["scannedObjects"]


def query(conn, client, sql, params=None):
    """Rows of a query, and the keys and documents MongoDB examined for it."""
    before = counters(client)
    with conn.cursor() as cur:
        cur.execute(sql, params)
        rows = cur.fetchall()
    after = counters(client)
    return rows, after[0] - before[0], after[1] - before[1]


def local(conn, sql, params=None):
    """Rows of a query on the local copies (table names suffixed _local)."""
    with conn.cursor() as cur:
        cur.execute(sql, params)
        return cur.fetchall()


def check_bounded(res, conn, client, table, sql, params, k):
    """One query on the foreign table: rows as the local copy's, at most 2k + 2
    keys and documents examined."""
    rows, keys_ex, docs_ex = query(conn, client, sql % table, params)
    expected = local(conn, sql % (table + "_local"), params)
    res.check(rows == expected, "%s %r on %s: %d rows, local %d, first %r vs %r"
              % (sql % table, params, table, len(rows), len(expected), rows[:2], expected[:2]))
    res.check(docs_ex <= 2 * k + 2 and keys_ex <= 2 * k + 2,
              "%s %r on %s examined %d documents and %d keys, bound %d"
              % (sql % table, params, table, docs_ex, keys_ex, 2 * k + 2))
    return rows


def walk(res, conn, client, table, page):
    """Page through the whole table by keyset: every key once, in order."""
    seen = []
    last = ""
    worst = 0
    while True:
        rows, keys_ex, docs_ex = query(conn, client,
                                       "SELECT _id FROM %s WHERE _id > %%s ORDER BY _id LIMIT %d" % (table, page),
                                       (last,))
        worst = max(worst, docs_ex, keys_ex)
        if not rows:
            break
        seen += [r[0] for r in rows]
        last = rows[-1][0]
    expected = [r[0] for r in local(conn, "SELECT _id FROM %s_local WHERE _id > '' ORDER BY _id" % table)]
    res.check(seen == expected, "walking %s by pages of %d: %d keys, expected %d"
              % (table, page, len(seen), len(expected)))
    res.check(worst <= 2 * page + 2, "a page of %d on %s examined %d" % (page, table, worst))


def main():
    res = Results()
    rng = random.Random(int(os.environ.get("KEYSET_SEED") or 29))
    client, conn = setup(rng)
    for table in ("strings", "objectids", "mixed"):
        sample = [r[0] for r in local(conn, "SELECT _id FROM %s_local ORDER BY random() LIMIT 6" % table)]
        check_bounded(res, conn, client, table, "SELECT * FROM %s ORDER BY _id LIMIT 10", None, 10)
        check_bounded(res, conn, client, table, "SELECT _id FROM %s ORDER BY _id DESC LIMIT 5 OFFSET 10",
                      None, 15)
        for x in sample + ["", "5", "c", "C", "abc", "g", "ffffffffffffffffffffffff"]:
            check_bounded(res, conn, client, table,
                          "SELECT _id, n FROM %s WHERE _id > %%s ORDER BY _id LIMIT 100", (x,), 100)
            check_bounded(res, conn, client, table,
                          "SELECT _id FROM %s WHERE _id <= %%s ORDER BY _id DESC LIMIT 7", (x,), 7)
        # another condition: exact rows (how many documents it examines depends on the matches)
        rows, _, _ = query(conn, client, "SELECT * FROM %s WHERE town = 'Seattle' ORDER BY _id LIMIT 7" % table)
        expected = local(conn, "SELECT * FROM %s_local WHERE town = 'Seattle' ORDER BY _id LIMIT 7" % table)
        res.check(rows == expected, "town = 'Seattle' on %s: %r, local %r" % (table, rows[:2], expected[:2]))
        # the plan says what it sends
        plan = local(conn, "EXPLAIN (VERBOSE) SELECT _id FROM %s WHERE _id > 'abc' ORDER BY _id LIMIT 10" % table)
        text = "\n".join(r[0] for r in plan)
        res.check("MongoDB Find Strings" in text and "MongoDB Find ObjectIds" in text and "Limit:" in text
                  and "Sort Key" not in text, "plan on %s:\n%s" % (table, text))
    walk(res, conn, client, "mixed", 1000)
    conn.close()
    client.close()
    print(res.summary("text keyset"))
    return 1 if res.failed else 0


if __name__ == "__main__":
    sys.exit(main())
