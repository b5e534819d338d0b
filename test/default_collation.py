#!/usr/bin/python3
"""Collections with a default collation: _id lookups and fact fetches use the _id index, rows stay exact.

A collection created with {locale: "en", strength: 2} (case-insensitive)
builds its _id index under that collation, and MongoDB uses an index only for
a query under the index's collation.  The FDW reads the collection's default
collation (listCollections) and runs _id lookups and the fact fetch of a
routed query under it, rechecking each _id byte for byte, so that:

- an _id lookup (=, IN) and a query routed through an index table (text
  equalities in the fact fetch included) examine O(1) documents per row, not
  the whole collection (serverStatus metrics.queryExecutor.scannedObjects);
- the rows are exactly those PostgreSQL's comparison gives: `_id = 'abc'`
  does not return the row whose _id is 'Abc';
- text equalities run under the collation are rechecked byte for byte; other
  pushed-down string comparisons keep the simple (binary) collation;
- on a collection without a default collation nothing changes: 'abc' and
  'ABC' are two rows.

Environment as for test/differential.py (PGHOST..., MONGO_URI, MONGO_USER,
MONGO_PASSWORD).  The PostgreSQL and MongoDB databases
``idxtable_collation`` are dropped and created, and left in place.  The last
line is ``default collation: N passed, M failed``.
"""
import os
import sys

import psycopg2

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures"))
from results import Results  # noqa: E402  (test/fixtures)
import mongo_client  # noqa: E402  (test/fixtures)
import pg_fixture  # noqa: E402  (test/fixtures)

DATABASE = "idxtable_collation"
N = 500
CI = {"locale": "en", "strength": 2}


def setup_mongo(client):
    client.drop_database(DATABASE)
    db = client[DATABASE]
    db.command("create", "people", collation=CI)
    db.people.insert_many([{"_id": "p%04d" % i, "name": "Name%d" % i, "town": "Town%d" % (i % 50), "n": i}
                           for i in range(N)])
    db.people.insert_one({"_id": "Abc", "name": "mixed", "town": "Elsewhere", "n": -1})
    db.plain.insert_many([{"_id": "abc", "n": 1}, {"_id": "ABC", "n": 2}])


def setup_pg():
    conn = pg_fixture.setup_database(DATABASE, server="m")
    pg_fixture.create_foreign_table(conn, "people", "_id text, name text, town text, n int", server="m",
                                    options=[("fetch_batch_size", "100")])
    pg_fixture.create_foreign_table(conn, "plain", "_id text, n int", server="m")
    with conn.cursor() as cur:
        cur.execute("SELECT idxtable.create_index('people', '{town}')")
        cur.execute("SELECT idxtable.create_index('people', '{n}')")
    return conn


def scanned(client):
    metrics = client.admin.command("serverStatus")["metrics"]["queryExecutor"]
    return metrics["scannedObjects"]


def query(conn, client, sql, params=None):
    """Rows of a query and the documents MongoDB examined for it."""
    before = scanned(client)
    with conn.cursor() as cur:
        cur.execute(sql, params)
        rows = cur.fetchall()
    return rows, scanned(client) - before


def main():
    res = Results()
    client = mongo_client.connect()
    setup_mongo(client)
    conn = setup_pg()
    query(conn, client, "SELECT * FROM people WHERE _id = 'p0000'")  # the collation is read once

    rows, docs = query(conn, client, "SELECT _id, n FROM people WHERE _id = 'p0042'")
    res.check(rows == [("p0042", 42)], "lookup: %s" % rows)
    res.check(docs <= 2, "an _id lookup examined %d documents of %d" % (docs, N + 1))

    rows, docs = query(conn, client, "SELECT _id FROM people WHERE _id IN ('p0001', 'p0002', 'P0003') ORDER BY 1")
    res.check(rows == [("p0001",), ("p0002",)], "IN lookup: %s" % rows)
    res.check(docs <= 4, "an IN lookup examined %d documents" % docs)

    # exact rows: the case-insensitive _id index finds 'Abc' for 'abc'; PostgreSQL's = does not
    for value, expected in (("abc", []), ("ABC", []), ("Abc", [("Abc", -1)])):
        rows, docs = query(conn, client, "SELECT _id, n FROM people WHERE _id = %s", (value,))
        res.check(rows == expected, "_id = %r: %s, expected %s" % (value, rows, expected))
        res.check(docs <= 2, "_id = %r examined %d documents" % (value, docs))
    rows, _ = query(conn, client, "SELECT _id FROM people WHERE _id IN ('abc', 'ABC', 'Abc')")
    res.check(rows == [("Abc",)], "IN over case variants: %s" % rows)

    # other string comparisons keep PostgreSQL's (binary) semantics
    rows, _ = query(conn, client, "SELECT _id FROM people WHERE name = 'MIXED'")
    res.check(rows == [], "name = 'MIXED' matched %s" % rows)
    rows, _ = query(conn, client, "SELECT _id FROM people WHERE _id = 'Abc' AND name = 'MIXED'")
    res.check(rows == [], "_id lookup with a string condition: %s" % rows)
    rows, _ = query(conn, client, "SELECT _id FROM people WHERE _id = 'Abc' AND name = 'mixed'")
    res.check(rows == [("Abc",)], "_id lookup with a string condition: %s" % rows)

    # routed queries: the fact fetch by $in uses the _id index
    with conn.cursor() as cur:
        cur.execute("SET idxtable.enable_plain_scan = off")
    # the first routed scan of a backend reads the index tables' ownership markers (index_owner.c)
    query(conn, client, "SELECT _id FROM people WHERE n = 1")
    rows, docs = query(conn, client, "SELECT _id FROM people WHERE n BETWEEN 10 AND 19 ORDER BY 1")
    res.check(rows == [("p%04d" % i,) for i in range(10, 20)], "routed by n: %s" % rows)
    res.check(docs <= 20, "a routed query for 10 rows examined %d documents" % docs)
    rows, docs = query(conn, client, "SELECT count(*) FROM people WHERE town = 'Town7'")
    res.check(rows == [(N // 50,)], "routed by town: %s" % rows)
    res.check(docs <= 2 * (N // 50), "a key-only routed query for %d rows examined %d documents"
              % (N // 50, docs))
    # text equalities in the fact fetch run under the collation too, rechecked byte for byte
    rows, docs = query(conn, client, "SELECT _id FROM people WHERE town = 'Town7' ORDER BY 1")
    res.check(rows == [("p%04d" % i,) for i in range(7, N, 50)], "routed by town, facts fetched: %s" % rows)
    res.check(docs <= 2 * (N // 50), "a routed query on a text key examined %d documents" % docs)
    rows, docs = query(conn, client, "SELECT _id FROM people WHERE town = 'Town7' AND name = 'NAME57'")
    res.check(rows == [], "name = 'NAME57' matched %s" % rows)
    res.check(docs <= 2 * (N // 50), "a routed query with a text condition examined %d documents" % docs)
    rows, _ = query(conn, client, "SELECT _id FROM people WHERE town = 'Town7' AND name IN ('Name57', 'NAME107')")
    res.check(rows == [("p0057",)], "name IN (...): %s" % rows)
    # other text comparisons keep the simple collation (exact rows, a collection scan per batch)
    rows, docs = query(conn, client, "SELECT count(*) FROM people WHERE town = 'Town7' AND name <> 'NAME57'")
    res.check(rows == [(N // 50,)], "name <> 'NAME57': %s" % rows)
    rows, _ = query(conn, client, "SELECT count(*) FROM people WHERE town = 'TOWN7'")
    res.check(rows == [(0,)], "routed by town in the wrong case: %s" % rows)
    with conn.cursor() as cur:
        cur.execute("RESET idxtable.enable_plain_scan")

    # writes address the right document; _id is unique case-insensitively on such a collection
    with conn.cursor() as cur:
        cur.execute("UPDATE people SET n = 100 WHERE _id = 'Abc'")
        res.check(cur.rowcount == 1, "UPDATE of 'Abc': %d rows" % cur.rowcount)
        cur.execute("UPDATE people SET n = 101 WHERE _id = 'abc'")
        res.check(cur.rowcount == 0, "UPDATE of 'abc': %d rows" % cur.rowcount)
        try:
            cur.execute("INSERT INTO people (_id, n) VALUES ('ABC', 7)")
            res.check(False, "INSERT of 'ABC' next to 'Abc' succeeded")
        except psycopg2.Error as exc:
            res.check(exc.pgcode == "23505", "INSERT of 'ABC': %s %s" % (exc.pgcode, exc.pgerror))
    res.check(client[DATABASE].people.find_one({"_id": "Abc"}, collation={"locale": "simple"})["n"] == 100,
              "the UPDATE reached 'Abc'")

    # a collection without a default collation: case variants are distinct rows, as before
    rows, _ = query(conn, client, "SELECT _id, n FROM plain WHERE _id = 'abc'")
    res.check(rows == [("abc", 1)], "plain collection: %s" % rows)
    rows, _ = query(conn, client, "SELECT count(*) FROM plain")
    res.check(rows == [(2,)], "plain collection rows: %s" % rows)

    # verify_index is clean
    for name in ("people_town_idx", "people_n_idx"):
        rows, _ = query(conn, client, "SELECT missing, orphan, stale FROM idxtable.verify_index(%s)", (name,))
        res.check(rows == [(0, 0, 0)], "verify_index(%s): %s" % (name, rows))
    conn.close()
    print(res.summary("default collation"))
    return 1 if res.failed else 0


if __name__ == "__main__":
    sys.exit(main())
