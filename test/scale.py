#!/usr/bin/python3
"""Scale checks on 100,000 documents, through the FDW.

- A query by _id examines exactly one index key and one document on the
  server (serverStatus metrics.queryExecutor deltas).
- A full scan of the collection runs at a reasonable rate (printed).
- A pushed-down filter returns exactly the rows of a local copy.
- ORDER BY a nullable key LIMIT k through an index table (40% of the keys
  NULL), in every NULL order, examines at most 3k + 2 keys and 3k + 2
  documents on the server, whatever the share of NULLs; so does an
  "IS NULL OR <range>" condition ordered on the key.
- verify_index / repair_index over 20,000 facts: progress shows in
  pg_stat_progress_create_index, drift made directly in MongoDB is counted
  exactly, a cancelled repair leaves nothing worse, a full repair ends clean.

Prints "scale: N passed, M failed" last; exits non-zero on failure.
"""
import os
import random
import sys
import threading
import time

import psycopg2

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures"))
import mongo_client  # noqa: E402
import pg_fixture  # noqa: E402  (test/fixtures)
from results import Results  # noqa: E402  (test/fixtures)

DB = "idxtable_scale"
N = 100000
TOWNS = ["Redmond", "Seattle", "Bellevue", "Kirkland", "Renton", "Tacoma"]

RESULTS = Results()


def check(name, ok, detail=""):
    """Record one check in the shared tally (which prints it when it
    failed); a check that passed is printed too, as "ok"."""
    line = name + ((": " + detail) if detail else "")
    if ok:
        print("ok   " + line)
    RESULTS.check(ok, line)


def load(client):
    """Drop and load the collection: N documents in batches."""
    client.drop_database(DB)
    coll = mongo_client.database(client, DB).people
    rng = random.Random(7)
    ages = random.Random(8)
    batch = []
    for i in range(1, N + 1):
        batch.append({"_id": i, "town": rng.choice(TOWNS), "n": i % 1000,
                      "name": "person%d" % i})
        roll = ages.random()
        if roll >= NULL_AGES:
            batch[-1]["age"] = ages.randrange(100)
        elif roll < NULL_AGES / 2:
            batch[-1]["age"] = None     # else missing
        if len(batch) == 10000:
            coll.insert_many(batch)
            batch = []
    return coll


def expected_ages(client):
    """The ages of the collection as the FDW reads them (None: NULL)."""
    return [d.get("age") for d in mongo_client.database(client, DB).people.find({}, {"age": 1})]


def executor_counters(client):
    """serverStatus metrics.queryExecutor (keys, documents examined)."""
    qe = client.admin.command("serverStatus")["metrics"]["queryExecutor"]
    return int(qe["scanned"]), int(qe["scannedObjects"])


def setup_postgres():
    """A fresh database with the extension, server and foreign table."""
    conn = pg_fixture.setup_database(DB)
    pg_fixture.create_foreign_table(conn, "people", "id int OPTIONS (field '_id'), town text, n int, name text, "
                                    "age int")
    return conn.cursor()


VERIFY_N = 20000
NULL_AGES = 0.4


def ordered(values, desc, nulls_first):
    """``values`` in PostgreSQL's order of ORDER BY with these options."""
    known = sorted((v for v in values if v is not None), reverse=desc)
    nulls = [None] * (len(values) - len(known))
    return nulls + known if nulls_first else known + nulls


def null_order_at_scale(client, cur):
    """ORDER BY age LIMIT k through the {age} index table, key-only (the
    facts fetched) and covering: the rows of PostgreSQL's order, and at
    most 3k + 2 keys and documents examined on the server in every NULL
    order, though 40% of the ages are NULL."""
    cur.execute("SELECT idxtable.create_index('people', '{age}', name => 'people_age')")
    ages = expected_ages(client)
    for k, columns in ((1, "age, name"), (10, "age, name"), (10, "age"), (100, "age, name")):
        for spec, desc, nulls_first, where in (
                ("", False, False, None), (" NULLS FIRST", False, True, None),
                (" DESC", True, True, None), (" DESC NULLS LAST", True, False, None),
                (" DESC", True, True, 95), (" NULLS LAST", False, False, 95)):
            clause = " WHERE age IS NULL OR age > %d" % where if where is not None else ""
            sql = "SELECT %s FROM people%s ORDER BY age%s LIMIT %d" % (columns, clause, spec, k)
            cur.execute("EXPLAIN " + sql)
            plan = "\n".join(r[0] for r in cur.fetchall())
            cur.execute(sql)            # once first: the index's ownership marker is read then
            counts = []
            for _ in range(2):          # the lower counts: background readers add to the server's
                before = executor_counters(client)
                cur.execute(sql)
                rows = [r[0] for r in cur.fetchall()]
                after = executor_counters(client)
                counts.append((after[0] - before[0], after[1] - before[1]))
            keys, docs = min(counts)
            want = ordered([a for a in ages if where is None or a is None or a > where], desc, nulls_first)[:k]
            check("%s: the index order, its rows, at most %d keys and documents" % (sql, 3 * k + 2),
                  "Index Order:" in plan and rows == want and keys <= 3 * k + 2 and docs <= 3 * k + 2,
                  "keys %d, documents %d, %d rows%s" % (keys, docs, len(rows),
                                                        "" if rows == want else " (wrong)"))




def progress_poller(pid, seen, stop):
    """Collect (phase, tuples_total, tuples_done) of backend pid until stop is set."""
    conn = pg_fixture.connect(DB)
    cur = conn.cursor()
    while not stop.is_set():
        cur.execute("SELECT phase, tuples_total, tuples_done FROM pg_stat_progress_create_index "
                    "WHERE pid = %s", (pid,))
        seen.extend(cur.fetchall())
        time.sleep(0.02)
    conn.close()


def verify_counts(cur, name):
    cur.execute("SELECT * FROM idxtable.verify_index(%s)", (name,))
    return tuple(cur.fetchone())


def verify_at_scale(client, cur):
    """verify_index and repair_index over VERIFY_N facts."""
    db = mongo_client.database(client, DB)
    rng = random.Random(11)
    db.vp.insert_many([{"_id": i, "town": rng.choice(TOWNS), "n": i % 50}
                       for i in range(VERIFY_N)])
    cur.execute("CREATE FOREIGN TABLE vp (id int OPTIONS (field '_id'), town text, n int) "
                "SERVER mongo OPTIONS (collection 'vp', consistency 'ordered')")
    cur.execute("SELECT idxtable.create_index('vp', '{town}', include => '{n}', name => 'vp_town')")
    cur.execute("SELECT pg_backend_pid()")
    pid = cur.fetchone()[0]

    seen, stop = [], threading.Event()
    poller = threading.Thread(target=progress_poller, args=(pid, seen, stop))
    poller.start()
    t0 = time.time()
    counts = verify_counts(cur, "vp_town")
    elapsed = time.time() - t0
    stop.set()
    poller.join()
    print("verify_index of %d facts: %.2f s (%.0f facts/s)" % (VERIFY_N, elapsed, VERIFY_N / elapsed))
    check("verify_index of a maintained index is clean", counts == (VERIFY_N, 0, 0, 0, 0, 0), repr(counts))
    phases = {p for p, _, _ in seen}
    done = {(p, d) for p, _, d in seen}
    check("progress shows both phases, with totals and advancing counts",
          {"index validation: scanning table", "index validation: scanning index"} <= phases
          and any(t == VERIFY_N for _, t, _ in seen) and len(done) >= 3,
          "%d samples, phases %s" % (len(seen), sorted(phases)))

    index = db["idxtable.vp.vp_town"]
    gone = [d["_id"] for d in index.find({"id": {"$lt": 500}}, {"_id": 1})]
    index.delete_many({"_id": {"$in": gone}})
    index.insert_many([{"_id": {"k0": "Nowhere", "id": -i}, "id": -i, "v": {"i0": 0}}
                       for i in range(1, 301)])
    index.update_many({"id": {"$gte": 19900}}, {"$set": {"v.i0": -1}})
    counts = verify_counts(cur, "vp_town")
    check("verify_index counts drift made in MongoDB exactly", counts == (VERIFY_N, 500, 300, 100, 0, 0),
          repr(counts))

    cur.execute("SET statement_timeout = %d" % max(50, int(elapsed * 1000 / 3)))
    try:
        cur.execute("SELECT * FROM idxtable.repair_index('vp_town')")
        cancelled = False
    except psycopg2.errors.QueryCanceled:
        cancelled = True
    cur.execute("RESET statement_timeout")
    partly = verify_counts(cur, "vp_town")
    check("a cancelled repair_index leaves nothing worse",
          cancelled and partly[0] == VERIFY_N and partly[1] <= 500 and partly[2] <= 300
          and partly[3] <= 100, "cancelled %s, then %r" % (cancelled, partly))
    cur.execute("SELECT * FROM idxtable.repair_index('vp_town')")
    fixed = tuple(cur.fetchone())
    counts = verify_counts(cur, "vp_town")
    check("repair_index fixes the rest; verify_index is clean after",
          fixed[1:] == partly[1:] and counts == (VERIFY_N, 0, 0, 0, 0, 0), "fixed %r, then %r" % (fixed, counts))


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

    null_order_at_scale(client, cur)
    verify_at_scale(client, cur)

    print(RESULTS.summary("scale"))
    sys.exit(1 if RESULTS.failed else 0)


if __name__ == "__main__":
    main()
