#!/usr/bin/python3
"""Scale checks on 100,000 documents, through the FDW.

- A query by _id examines exactly one index key and one document on the
  server (serverStatus metrics.queryExecutor deltas).
- A full scan of the collection runs at a reasonable rate (printed).
- A pushed-down filter returns exactly the rows of a local copy.

Prints "scale: N passed, M failed" last; exits non-zero on failure.
"""
import os
import random
import sys
import time

import psycopg2

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures"))
import mongo_client  # noqa: E402

DB = "idxtable_scale"
N = 100000
TOWNS = ["Redmond", "Seattle", "Bellevue", "Kirkland", "Renton", "Tacoma"]

results = {"passed": 0, "failed": 0}


def check(name, ok, detail=""):
    """Record and print one check."""
    results["passed" if ok else "failed"] += 1
    print("%s %s%s" % ("ok  " if ok else "FAIL", name, (": " + detail) if detail else ""))


def load(client):
    """Drop and load the collection: N documents in batches."""
    client.drop_database(DB)
    coll = mongo_client.database(client, DB).people
    rng = random.Random(7)
    batch = []
    for i in range(1, N + 1):
        batch.append({"_id": i, "town": rng.choice(TOWNS), "n": i % 1000,
                      "name": "person%d" % i})
        if len(batch) == 10000:
            coll.insert_many(batch)
            batch = []
    return coll


def executor_counters(client):
    """serverStatus metrics.queryExecutor (keys, documents examined)."""
    qe = client.admin.command("serverStatus")["metrics"]["queryExecutor"]
    return int(qe["scanned"]), int(qe["scannedObjects"])


def setup_postgres():
    """A fresh database with the extension, server and foreign table."""
    admin = psycopg2.connect(dbname="postgres")
    admin.autocommit = True
    admin.cursor().execute("DROP DATABASE IF EXISTS %s" % DB)
    admin.cursor().execute("CREATE DATABASE %s" % DB)
    admin.close()
    conn = psycopg2.connect(dbname=DB)
    conn.autocommit = True
    cur = conn.cursor()
    cur.execute("CREATE EXTENSION idxtable_fdw")
    cur.execute("CREATE SERVER mongo FOREIGN DATA WRAPPER idxtable_fdw "
                "OPTIONS (uri %s, database %s)", (os.environ["MONGO_URI"], DB))
    if os.environ.get("MONGO_USER"):
        cur.execute("CREATE USER MAPPING FOR CURRENT_USER SERVER mongo "
                    "OPTIONS (username %s, password %s)",
                    (os.environ["MONGO_USER"], os.environ.get("MONGO_PASSWORD", "")))
    else:
        cur.execute("CREATE USER MAPPING FOR CURRENT_USER SERVER mongo")
    cur.execute("CREATE FOREIGN TABLE people (id int OPTIONS (field '_id'), "
                "town text, n int, name text) SERVER mongo")
    return cur


def main():
    """Run the checks."""
    client = mongo_client.connect()
    t0 = time.time()
    load(client)
    print("loaded %d documents in %.2f s" % (N, time.time() - t0))
    cur = setup_postgres()

    cur.execute("SELECT 1 FROM people WHERE id = 1")   # connect outside the measurement
    before = executor_counters(client)
    cur.execute("SELECT name FROM people WHERE id = 54321")
    rows = cur.fetchall()
    after = executor_counters(client)
    keys, docs = after[0] - before[0], after[1] - before[1]
    check("_id lookup returns its row", rows == [("person54321",)], repr(rows))
    check("_id lookup examines 1 key and 1 document", (keys, docs) == (1, 1),
          "keys %d, documents %d" % (keys, docs))

    t0 = time.time()
    cur.execute("SELECT count(*), sum(n) FROM people")
    count, total = cur.fetchone()
    elapsed = time.time() - t0
    check("full scan sees every document", count == N and total == sum(i % 1000 for i in range(1, N + 1)))
    print("full scan of %d documents: %.2f s (%.0f rows/s)" % (N, elapsed, N / elapsed))

    cur.execute("CREATE TABLE local_people AS SELECT * FROM people")
    for clause in ["town = 'Tacoma' AND n < 100", "n IN (1, 2, 3) OR town IS NULL",
                   "NOT (town <> 'Renton') AND n >= 990", "id > 99000 AND town <> 'Seattle'"]:
        cur.execute("EXPLAIN (VERBOSE) SELECT id FROM people WHERE " + clause)
        plan = "\n".join(r[0] for r in cur.fetchall())
        cur.execute("SELECT id FROM people WHERE %s ORDER BY id" % clause)
        remote = cur.fetchall()
        cur.execute("SELECT id FROM local_people WHERE %s ORDER BY id" % clause)
        local = cur.fetchall()
        check("pushed-down filter equals local table: " + clause,
              remote == local and "MongoDB Filter: { }" not in plan,
              "%d rows vs %d" % (len(remote), len(local)))

    print("scale: %d passed, %d failed" % (results["passed"], results["failed"]))
    sys.exit(1 if results["failed"] else 0)


if __name__ == "__main__":
    main()
