#!/usr/bin/python3
"""Scale checks on 100,000 documents, through the FDW.

- A query by _id examines exactly one index key and one document on the
  server (serverStatus metrics.queryExecutor deltas).
- A full scan of the collection runs at a reasonable rate (printed).
- A pushed-down filter returns exactly the rows of a local copy.
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
    conn = pg_fixture.setup_database(DB)
    pg_fixture.create_foreign_table(conn, "people", "id int OPTIONS (field '_id'), town text, n int, name text")
    return conn.cursor()


VERIFY_N = 20000


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

    verify_at_scale(client, cur)

    print("scale: %d passed, %d failed" % (results["passed"], results["failed"]))
    sys.exit(1 if results["failed"] else 0)


if __name__ == "__main__":
    main()
