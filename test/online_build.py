#!/usr/bin/python3
"""An online build does not block writers: CALL idxtable.create_index_concurrently.

A collection of FACTS documents (written with pymongo, fast) is exposed as
the foreign table ob.  One session runs

    CALL idxtable.create_index_concurrently('ob', '{town}', include => '{n}')

and, while it runs, another session writes through the FDW in a loop: an
INSERT of a new row, an UPDATE that moves a row to another town, a DELETE,
each timed, and watches idxtable.indexes and pg_stat_progress_create_index.
Checks:

- the writer's statements are not blocked: no lock request on ob waits
  (sampled from a third session), the slowest write takes less than
  WRITE_BOUND_S, and at least MIN_WRITES of them ran while the index was
  'building' (a ShareLock build would hold them all until its end);
- the writer sees the index 'building' in idxtable.indexes, and the build
  in pg_stat_progress_create_index as CREATE INDEX CONCURRENTLY with
  tuples_done moving;
- all this for a non-unique index (town, with an included column) and a
  unique one (lower(name), whose keys the writer's UPDATEs change), the
  second made by CREATE UNIQUE INDEX CONCURRENTLY, which runs the same
  procedure;
- afterwards the index is 'valid', has sync_from, its entries count is the
  number of facts (give or take the writer's last round), and
  idxtable.verify_index finds nothing missing, stale
  or orphaned: the writes made during the build are in it;
- for contrast, idxtable.create_index (ShareLock) does make a writer wait
  (its INSERT ends only when the build does), so the first check can
  fail.

Environment as for test/faults.py (PGHOST..., MONGO_URI...).  Bounded:
about a minute on the test server.  The last line is
"online_build: N passed, M failed".
"""
import os
import statistics
import sys
import threading
import time

import psycopg2

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures"))
import mongo_client  # noqa: E402  (test/fixtures)
from results import Results  # noqa: E402
import pg_fixture  # noqa: E402  (test/fixtures)

DATABASE = "idxtable_online"
FACTS = 20000
WRITE_BOUND_S = 5.0  # sanity bound: the test server serves the build's batches meanwhile (2 shared cores)
MIN_WRITES = 10
TOWNS = ["Oslo", "Rome", "Lima", "Kiev", "Nice", "Bern", "Riga", "Graz"]


def connect(dbname=DATABASE):
    # a guard against a hang, not a bound: a build of FACTS on a loaded 2-core machine took up to 120 s
    return pg_fixture.connect(dbname, settings=["SET statement_timeout = '300s'"])


query = pg_fixture.execute


def setup():
    """Database, extension, server, mapping, FACTS facts and the table."""
    mongo = mongo_client.connect()
    mongo.drop_database(DATABASE)
    facts = mongo[DATABASE]["ob"]
    docs = [{"_id": "f%05d" % i, "name": "name%d" % i,
             "town": TOWNS[i % len(TOWNS)], "n": i} for i in range(FACTS)]
    for start in range(0, FACTS, 5000):
        facts.insert_many(docs[start:start + 5000])
    mongo.close()

    conn = pg_fixture.setup_database(DATABASE)
    pg_fixture.create_foreign_table(conn, "ob", "_id text, name text, town text, n int")
    conn.close()


def teardown():
    conn = connect()
    query(conn, "SELECT idxtable.drop_index(name) FROM idxtable.index_defs")
    conn.close()
    pg_fixture.recreate_database(DATABASE, create=False)
    mongo = mongo_client.connect()
    mongo.drop_database(DATABASE)
    mongo.close()


def timed(conn, sql, args=None):
    start = time.monotonic()
    query(conn, sql, args)
    return time.monotonic() - start


class Writer:
    """Writes through the FDW in a loop until stopped, timing each write,
    and watches the index's state and the build's progress."""

    def __init__(self, index):
        self.index = index
        self.conn = connect()
        self.latencies = []
        self.building_writes = 0
        self.states = set()
        self.progress = []
        self.error = None
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run)
        self.seq = Writer.rounds  # the next writer goes on from here

    rounds = 0

    def one_round(self):
        self.seq += 1
        Writer.rounds = self.seq
        i = self.seq
        self.latencies.append(timed(self.conn, "INSERT INTO ob VALUES (%s, %s, %s, %s)",
                                    ("w%05d" % i, "new%d" % i, TOWNS[i % len(TOWNS)], -i)))
        self.latencies.append(timed(self.conn, "UPDATE ob SET town = %s, n = n + 1, "
                                    "name = name || 'u' WHERE _id = %s",
                                    (TOWNS[(i + 3) % len(TOWNS)], "f%05d" % (i * 7))))
        self.latencies.append(timed(self.conn, "DELETE FROM ob WHERE _id = %s",
                                    ("f%05d" % (i * 7 + 1),)))

    def watch(self):
        rows = query(self.conn, "SELECT state FROM idxtable.indexes WHERE name = %s",
                     (self.index,))
        state = rows[0][0] if rows else None
        self.states.add(state)
        rows = query(self.conn, "SELECT command, phase, tuples_done, tuples_total "
                     "FROM pg_stat_progress_create_index WHERE relid = 'ob'::regclass")
        self.progress.extend(rows)
        return state

    def run(self):
        try:
            while not self.stop.is_set():
                building = self.watch() == "building"
                self.one_round()
                if building:
                    self.building_writes += 3
                time.sleep(0.005)
        except psycopg2.Error as e:
            self.error = "%s %s" % (e.pgcode, e)

    def start(self):
        self.thread.start()

    def finish(self):
        self.stop.set()
        self.thread.join(130)
        self.conn.close()


class LockWatch:
    """Samples, from a session of its own, the lock requests on ob that
    wait (not granted) until stopped."""

    def __init__(self):
        self.conn = connect()
        self.samples = 0
        self.waiting = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run)
        self.thread.start()

    def run(self):
        while not self.stop.is_set():
            rows = query(self.conn, "SELECT mode FROM pg_locks WHERE NOT granted "
                         "AND relation = 'ob'::regclass")
            self.samples += 1
            self.waiting.extend(r[0] for r in rows)
            time.sleep(0.02)

    def finish(self):
        self.stop.set()
        self.thread.join(30)
        self.conn.close()


def online(res, index, call):
    """create_index_concurrently (call: the CALL or a CREATE INDEX
    CONCURRENTLY) of index with a writer going on."""
    builder = connect()
    writer = Writer(index)
    writer.start()
    locks = LockWatch()
    time.sleep(0.3)
    start = time.monotonic()
    error = None
    try:
        query(builder, call)
    except psycopg2.Error as e:
        error = "%s %s" % (e.pgcode, e)
    build_s = time.monotonic() - start
    locks.finish()
    time.sleep(0.3)
    writer.finish()
    res.check(locks.samples >= 10 and not locks.waiting,
              "lock requests on ob that waited during the online build (%d samples): %r"
              % (locks.samples, locks.waiting))
    res.check(error is None, "create_index_concurrently failed: %s" % error)
    res.check(writer.error is None, "the writer failed: %s" % writer.error)
    lat = writer.latencies
    worst = max(lat) if lat else 99
    med = statistics.median(lat) if lat else 99
    print("online build of %s over %d facts: %.1f s; %d writes during it (%d while 'building'), "
          "latency median %.1f ms, max %.1f ms"
          % (index, FACTS, build_s, len(lat), writer.building_writes, med * 1000, worst * 1000))
    res.check(worst < WRITE_BOUND_S,
              "slowest write during the online build: %.2f s (bound %.1f s)" % (worst, WRITE_BOUND_S))
    res.check(writer.building_writes >= MIN_WRITES,
              "writes while the index was building: %d, want >= %d"
              % (writer.building_writes, MIN_WRITES))
    res.check("building" in writer.states,
              "the writer's session saw states %r, want 'building' among them" % writer.states)
    commands = {p[0] for p in writer.progress}
    done = [p[2] for p in writer.progress if p[1] == "building index"]
    print("progress seen: %d samples, commands %r, tuples_done in 'building index' %s..%s"
          % (len(writer.progress), commands, min(done, default=None), max(done, default=None)))
    res.check("CREATE INDEX CONCURRENTLY" in commands,
              "pg_stat_progress_create_index commands seen: %r" % commands)
    res.check(len(set(done)) >= 2 and max(done) > 0,
              "tuples_done of the build did not move: %r" % sorted(set(done)))

    (state, entries, sync_from), = query(builder, "SELECT state, entries, sync_from "
                                         "FROM idxtable.index_defs WHERE name = %s", (index,))
    (facts,), = query(builder, "SELECT count(*) FROM ob")
    res.check(state == "valid", "state after the build: %s" % state)
    res.check(sync_from is not None and sync_from > 0, "sync_from after the build: %r" % sync_from)
    # entries is counted when the build ends; the writer's last round may follow
    res.check(entries is not None and abs(entries - facts) <= 3,
              "entries %r, facts %d" % (entries, facts))
    (checked, missing, orphan, stale, unconv, conflicts), = query(
        builder, "SELECT * FROM idxtable.verify_index(%s)", (index,))
    res.check((checked, missing, orphan, stale, unconv, conflicts) == (facts, 0, 0, 0, 0, 0),
              "verify_index after the online build: checked %d missing %d orphan %d "
              "stale %d unconvertible %d conflicts %d (facts %d)"
              % (checked, missing, orphan, stale, unconv, conflicts, facts))
    query(builder, "SET idxtable.enable_plain_scan = off")
    (routed,), = query(builder, "SELECT count(*) FROM ob WHERE town = 'Oslo'")
    query(builder, "SET idxtable.enable_plain_scan = on")
    query(builder, "SET idxtable.enable_index_routing = off")
    (plain,), = query(builder, "SELECT count(*) FROM ob WHERE town = 'Oslo'")
    res.check(routed == plain, "routed count %d, plain count %d" % (routed, plain))
    builder.close()


def blocking(res):
    """For contrast: create_index takes ShareLock, and a writer waits for
    the end of the build."""
    builder = connect()
    result = {}

    def build():
        query(builder, "SELECT idxtable.create_index('ob', '{n}', name => 'ob_n')")
        result["end"] = time.monotonic()

    start = time.monotonic()
    thread = threading.Thread(target=build)
    thread.start()
    time.sleep(0.2)
    writer = connect()
    wait = timed(writer, "INSERT INTO ob VALUES ('blocked', 'b', 'Oslo', 0)")
    written = time.monotonic()
    thread.join(130)
    writer.close()
    builder.close()
    build_end = result.get("end", written + 99)
    print("create_index (ShareLock) of %d facts: %.1f s; a writer started 0.2 s in waited %.1f s"
          % (FACTS, build_end - start, wait))
    res.check(written >= build_end - 0.05,
              "a write started during create_index finished %.2f s before the build did: "
              "the contrast does not show" % (build_end - written))


def main():
    res = Results()
    setup()
    try:
        online(res, "ob_town", "CALL idxtable.create_index_concurrently('ob', '{town}', "
               "include => '{n}', name => 'ob_town')")
        # the same procedure through the utility hook (index_utility.c)
        online(res, "ob_name", "CREATE UNIQUE INDEX CONCURRENTLY ob_name ON ob (lower(name))")
        blocking(res)
    finally:
        teardown()
    print(res.summary("online_build"))
    return 1 if res.failed else 0


if __name__ == "__main__":
    sys.exit(main())
