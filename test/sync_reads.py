#!/usr/bin/python3
"""Consistent reads through index tables (idxtable.index_consistency).

Needs idxtable_fdw in shared_preload_libraries (test/env start does it), so
that the change-stream applier runs.  On a table with a unique index table
on lower(email) and one on town:

1. outside writes: a pymongo client inserts a document straight into
   MongoDB, or moves one to another town, and at once a query routed
   through the index table with "current" finds it, and a count(*) read
   from the index table counts it (--rounds times in a row for each); an
   INSERT through the FDW of a unique key an outside
   document has just taken fails with 23505;
2. latency: the Sync Wait (EXPLAIN ANALYZE) of a routed point query on an
   idle server, and the query's time with "current" against "any"
   (median and p99 reported);
3. an idle applier: with no event and no waiting query for a few seconds
   its getMores wait long (at most a few per second, counted by the test
   server's recentCommands), and a routed query after a write the stream does
   not carry (another collection) still waits only briefly, because the
   query wakes the applier with a heartbeat of its own, and so does an
   INSERT of a unique key, which waits for the applier at its start;
4. a stopped applier (SIGSTOP): after an outside write, a routed query
   with "current" fails with SQLSTATE IX001 after about
   idxtable.sync_wait_timeout; the planner then knows the index is behind
   and plans a plain scan, which finds the row; with "any" the routed query
   runs at once; after SIGCONT the routed query finds the row again.

Environment as for test/differential.py (PGHOST..., MONGO_URI...).  The
last line is "sync_reads: N passed, M failed".
"""
import argparse
import json
import os
import signal
import statistics
import sys
import time

import psycopg2

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures"))
from results import Results  # noqa: E402  (test/fixtures)
import mongo_client  # noqa: E402
import pg_fixture  # noqa: E402  (test/fixtures)

DATABASE = "idxtable_sync_reads"
INDEXES = ["sr_email", "sr_town"]
ROWS = 500


def connect_pg():
    return pg_fixture.connect(DATABASE)


def setup():
    """A fresh PostgreSQL and MongoDB database, the table, its rows and index tables."""
    mongo_client.connect().drop_database(DATABASE)
    conn = pg_fixture.setup_database(DATABASE)
    pg_fixture.create_foreign_table(conn, "sr", "_id int, email text, town text")
    with conn.cursor() as cur:
        cur.execute("INSERT INTO sr SELECT i, 'p' || i || '@example.com', 'Town' || (i %% 50) "
                    "FROM generate_series(1, %s) i", (ROWS,))
        cur.execute("SELECT idxtable.create_index('sr', '{lower(email)}', is_unique => true, name => 'sr_email')")
        cur.execute("SELECT idxtable.create_index('sr', '{town}', name => 'sr_town')")
        cur.execute("ANALYZE sr")
    return conn


def streaming(conn):
    """Are all index tables streaming (a lag in idxtable.sync_status)?"""
    with conn.cursor() as cur:
        cur.execute("SELECT count(*) FROM idxtable.sync_status WHERE name = ANY (%s) AND lag IS NOT NULL",
                    (INDEXES,))
        return cur.fetchone()[0] == len(INDEXES)


def wait_streaming(conn, seconds=60):
    deadline = time.time() + seconds
    while time.time() < deadline:
        if streaming(conn):
            return True
        time.sleep(0.1)
    return False


def applier_pid(conn):
    with conn.cursor() as cur:
        cur.execute("SELECT pid FROM pg_stat_activity WHERE backend_type = 'idxtable_fdw applier' "
                    "AND datname = %s", (DATABASE,))
        rows = cur.fetchall()
    return rows[0][0] if len(rows) == 1 else None


def plan_of(conn, sql):
    with conn.cursor() as cur:
        cur.execute("EXPLAIN (COSTS OFF) " + sql)
        return "\n".join(r[0] for r in cur.fetchall())


def routed(conn, sql):
    return "Index Table" in plan_of(conn, sql)


def rows(conn, sql, params=None):
    with conn.cursor() as cur:
        cur.execute(sql, params)
        return sorted(cur.fetchall())


def set_gucs(conn, consistency, timeout=None):
    with conn.cursor() as cur:
        cur.execute("SET idxtable.enable_plain_scan = off")
        cur.execute("SET idxtable.index_consistency = %s", (consistency,))
        cur.execute("SET idxtable.sync_wait_timeout = %s", (str(timeout or 5000),))


def outside_writes(res, conn, coll, rounds):
    """Inserts and moves made straight to MongoDB, each read at once through an index table."""
    set_gucs(conn, "current")
    by_email = "SELECT _id FROM sr WHERE lower(email) = %s"
    by_town = "SELECT _id FROM sr WHERE town = %s"
    count_town = "SELECT count(*) FROM sr WHERE town = %s"
    res.check(routed(conn, by_email % "'x'") and routed(conn, by_town % "'x'"),
              "the point queries are not routed with current: %s" % plan_of(conn, by_email % "'x'"))
    res.check("(count)" in plan_of(conn, count_town % "'x'"),
              "the count is not read from the index table: %s" % plan_of(conn, count_town % "'x'"))
    found = moved = counted = 0
    for i in range(rounds):
        _id = 10000 + i
        coll.insert_one({"_id": _id, "email": "Out%d@Example.com" % i, "town": "Outside%d" % i})
        before = rows(conn, count_town, ("Outside%d" % i,))  # the first read after the write
        found += rows(conn, by_email, ("out%d@example.com" % i,)) == [(_id,)]
        coll.update_one({"_id": _id}, {"$set": {"town": "Moved%d" % i}})
        after = rows(conn, count_town, ("Moved%d" % i,))
        moved += rows(conn, by_town, ("Moved%d" % i,)) == [(_id,)]
        counted += (before == [(1,)] and after == [(1,)]
                    and rows(conn, count_town, ("Outside%d" % i,)) == [(0,)])
    res.check(found == rounds, "outside inserts found at once: %d of %d" % (found, rounds))
    res.check(moved == rounds, "outside moves found at once: %d of %d" % (moved, rounds))
    res.check(counted == rounds, "outside inserts and moves counted at once from the index table: %d of %d"
              % (counted, rounds))
    print("outside writes read at once with current: inserts %d/%d, moves %d/%d, counts %d/%d"
          % (found, rounds, moved, rounds, counted, rounds))
    dup = 0
    for i in range(min(rounds, 20)):
        coll.insert_one({"_id": 20000 + i, "email": "dup%d@example.com" % i, "town": "Dup"})
        try:
            with conn.cursor() as cur:
                cur.execute("INSERT INTO sr VALUES (%s, %s, 'Dup')", (30000 + i, "DUP%d@example.com" % i))
        except psycopg2.Error as e:
            dup += e.pgcode == "23505"
    res.check(dup == min(rounds, 20), "FDW inserts of a key just taken outside refused with 23505: %d of %d"
              % (dup, min(rounds, 20)))
    print("FDW inserts of a key taken outside just before: %d/%d refused (23505)" % (dup, min(rounds, 20)))


def sync_wait_ms(conn, sql):
    with conn.cursor() as cur:
        cur.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + sql)
        plan = cur.fetchone()[0]
    if isinstance(plan, str):
        plan = json.loads(plan)
    return plan[0]["Plan"].get("Sync Wait")


def percentile(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100.0 * (len(values) - 1))))]


def latency(res, conn, n):
    """The wait of a routed point query on an idle server."""
    sql = "SELECT _id FROM sr WHERE lower(email) = 'p42@example.com'"
    set_gucs(conn, "current")
    waits = [sync_wait_ms(conn, sql) for _ in range(n)]
    res.check(all(w is not None and w >= 0 for w in waits), "Sync Wait missing or negative: %r" % waits[:5])
    waits = [w for w in waits if w is not None]
    times = {}
    for mode in ("current", "any"):
        set_gucs(conn, mode)
        t = []
        with conn.cursor() as cur:
            for _ in range(n):
                start = time.perf_counter()
                cur.execute(sql)
                cur.fetchall()
                t.append((time.perf_counter() - start) * 1000)
        times[mode] = t
    if waits:
        print("idle server, Sync Wait of a routed point query (%d runs): median %.2f ms, p99 %.2f ms"
              % (len(waits), statistics.median(waits), percentile(waits, 99)))
        res.check(statistics.median(waits) < 100, "median Sync Wait on an idle server %.1f ms >= 100 ms"
                  % statistics.median(waits))
    for mode in ("current", "any"):
        print("idle server, routed point query with %-7s: median %.2f ms, p99 %.2f ms"
              % (mode, statistics.median(times[mode]), percentile(times[mode], 99)))


def applier_get_mores(admin):
    """getMores of this database's applier since the last call (the test server's recentCommands,
    which it empties), or None.  Appliers of other databases of the server are not counted."""
    try:
        commands = admin.command("recentCommands", clear=True)["commands"]
    except Exception:  # mongod: no such command
        return None
    return sum(1 for c in commands if c["command"] == "getMore" and c["db"] == DATABASE
               and "applier" in (c["appName"] or ""))


def idle_applier(res, conn, mdb, runs):
    """An idle applier polls rarely, and a query's own wake-up keeps its wait short."""
    set_gucs(conn, "current")
    sql = "SELECT _id FROM sr WHERE lower(email) = 'p42@example.com'"
    other = mdb["sr_elsewhere"]
    waits = []
    polls = []
    for i in range(runs):
        time.sleep(2.5)  # no event and no request for longer than the applier stays awake
        applier_get_mores(mdb.client.admin)
        time.sleep(1.0)
        polls.append(applier_get_mores(mdb.client.admin))
        other.insert_one({"_id": i})  # moves the cluster time, but is no event of the stream
        if i % 2:
            waits.append(sync_wait_ms(conn, sql))
        else:
            # an INSERT of a unique key waits for the applier at its start, as a read does
            start = time.perf_counter()
            with conn.cursor() as cur:
                cur.execute("INSERT INTO sr VALUES (%s, %s, 'Idle')", (60000 + i, "idle%d@example.com" % i))
            waits.append((time.perf_counter() - start) * 1000.0)
    if polls[0] is not None:
        res.check(max(polls) <= 6, "getMores of an idle applier in 1 s: %r (expected a few)" % polls)
        print("idle applier: getMores per second %r" % polls)
    res.check(all(w is not None for w in waits), "Sync Wait missing: %r" % waits)
    waits = [w for w in waits if w is not None]
    if waits:
        # without the wake-up a wait lasts until the applier's long getMore ends (up to 500 ms)
        res.check(max(waits) < 200,
                  "an INSERT's time / a read's Sync Wait after a write outside the stream, idle "
                  "applier: %r ms" % waits)
        print("idle applier, after a write outside the stream: an INSERT of a unique key's time / "
              "a routed read's Sync Wait, by turns: %s ms" % ", ".join("%.1f" % w for w in waits))


def stopped_applier(res, conn, coll, timeout_ms):
    """A stopped applier: current times out with IX001, then plans a plain scan; any reads at once."""
    pid = applier_pid(conn)
    if not res.check(pid is not None, "no single applier for %s in pg_stat_activity" % DATABASE):
        return
    sql = "SELECT _id FROM sr WHERE lower(email) = 'stopped@example.com'"
    os.kill(pid, signal.SIGSTOP)
    try:
        coll.insert_one({"_id": 40000, "email": "stopped@example.com", "town": "Stopped"})
        set_gucs(conn, "current", timeout_ms)
        res.check(routed(conn, sql), "not routed before the timeout: %s" % plan_of(conn, sql))
        start = time.perf_counter()
        code = None
        try:
            rows(conn, sql)
        except psycopg2.Error as e:
            code = e.pgcode
            print("stopped applier, current: %s %s" % (e.pgcode, e.pgerror.strip().replace("\n", " | ")))
        elapsed = (time.perf_counter() - start) * 1000
        res.check(code == "IX001", "stopped applier: SQLSTATE %r, not IX001" % code)
        # (latch waits and gettimeofday() may disagree by a fraction of a ms)
        res.check(timeout_ms - 5 <= elapsed < timeout_ms + 2000,
                  "IX001 after %.0f ms, sync_wait_timeout %d ms" % (elapsed, timeout_ms))
        print("stopped applier, current: failed after %.0f ms (sync_wait_timeout %d ms)" % (elapsed, timeout_ms))
        # known to be behind now: the planner scans the collection instead
        res.check(not routed(conn, sql), "routed although known to be behind: %s" % plan_of(conn, sql))
        res.check(rows(conn, sql) == [(40000,)], "the plain scan misses the outside row")
        set_gucs(conn, "any", timeout_ms)
        res.check(routed(conn, sql), "not routed with any: %s" % plan_of(conn, sql))
        start = time.perf_counter()
        got = rows(conn, sql)
        elapsed = (time.perf_counter() - start) * 1000
        res.check(elapsed < timeout_ms / 2, "with any the query took %.0f ms" % elapsed)
        print("stopped applier, any: %d row(s) in %.0f ms (the index as far as it has come)" % (len(got), elapsed))
    finally:
        os.kill(pid, signal.SIGCONT)
    set_gucs(conn, "current")
    deadline = time.time() + 30
    while time.time() < deadline and not routed(conn, sql):
        time.sleep(0.1)
    res.check(routed(conn, sql), "not routed again after SIGCONT: %s" % plan_of(conn, sql))
    res.check(rows(conn, sql) == [(40000,)], "the routed query misses the outside row after SIGCONT")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--latency-runs", type=int, default=200)
    parser.add_argument("--timeout-ms", type=int, default=1500)
    parser.add_argument("--idle-runs", type=int, default=6)
    args = parser.parse_args()
    res = Results()
    start = time.time()
    conn = setup()
    coll = mongo_client.database(mongo_client.connect(), DATABASE)["sr"]
    if not res.check(wait_streaming(conn), "the index tables are not streaming after 60 s"):
        print(rows(conn, "SELECT name, state, lag, last_error FROM idxtable.sync_status"))
    else:
        outside_writes(res, conn, coll, args.rounds)
        latency(res, conn, args.latency_runs)
        idle_applier(res, conn, coll.database, args.idle_runs)
        stopped_applier(res, conn, coll, args.timeout_ms)
    print("elapsed %.1fs" % (time.time() - start))
    print(res.summary("sync_reads"))
    sys.exit(1 if res.failed else 0)


if __name__ == "__main__":
    main()
