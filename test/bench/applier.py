"""The applier section: how fast the change-stream applier brings index tables up to
date with writes made straight to MongoDB, how far it lags behind a steady outside
write load, and what idxtable.index_consistency = current adds to a routed query.

run() expects a database with the extension and the server "mongo" (bench.py makes
it) in a PostgreSQL that preloads idxtable_fdw.  It loads n customers into the
collection a_customers (pymongo), creates the foreign table a_customers and its
first index table (unique lower(email)), then:

  burst, 1 idx   pymongo updates `events` distinct customers (town, last_name and
                 email each get a new value) in unordered bulk writes; measured
                 from the first write until the events_applied counter of every
                 index table in idxtable.sync_status has grown by `events`
  burst, 3 idx   the same after adding {town,last_name} and {town} INCLUDE
                 {first_name,last_name}
  point query    SELECT * FROM a_customers WHERE lower(email) = <a customer nobody
                 writes>, routed through the unique index table, in two sessions:
                 index_consistency = current and = any, taking turns; on an idle
                 server, then while the steady load below runs
  lag + queries  a writer thread updates customers at half the floor's 3-index burst
                 rate, in small bulks every TICK_S; a poller thread reads the counters
                 every POLL_S.  A bulk's lag is the time from its acknowledgement
                 until the counters of every index table include it; the lag
                 column of idxtable.sync_status (clock_timestamp() -
                 applied_through, whole seconds of cluster time) is sampled too.  The load
                 runs `seconds` alone (a warm-up), then as long with the busy point queries.
                 The lag alone, at 50% and 80% of the floor's rate, repeated: lag.py.

At the end every index table must be clean in idxtable.verify_index.
"""
import csv
import math
import os
import re
import shutil
import subprocess
import statistics
import sys
import tempfile
import threading
import time

import psycopg2
import pymongo

import data
import measure
import pg_fixture  # test/fixtures, on the path bench.py sets
import report
import scenarios

TABLE = "a_customers"
FLOOR_TABLE = "f_customers"  # the same customers, followed by the floor (floor.py) alone
FLOOR_SPECS = ["u:email", "town,last_name", "town+first_name,last_name"]  # INDEXES for floor.py
TURNS = 3               # bursts of the applier and of the floor, taking turns, per index count
BUSY_LOAD = 0.5         # the steady load under the busy queries, a share of the floor's 3-index
                        # rate (the lag alone at 50% and 80%: lag.py)
APPLIER_APP = "idxtable_fdw applier"
RING_SIZE = 2000        # the test server's ring of recent commands (cmdlog.py)
FLOOR_APP = "idxtable_bench floor"  # floor.py's appName
INDEXES = [("{lower(email)}", None, True),          # as writes.py: a table with n gets the first n
           ("{town,last_name}", None, False),
           ("{town}", "{first_name,last_name}", False)]
BULK = 1000             # updates per bulk_write of a burst
TICK_S = 0.02           # the steady writer's interval between bulks
POLL_S = 0.01           # the poller's interval between reads of idxtable.sync_status
QUIET_S = 1.0           # counters unchanged this long: the applier has caught up
READY_TIMEOUT_S = 90.0  # to wait for the applier to follow new index tables
SPARE = 200             # customers no writer touches (the point queries read them)
EXPLAIN_EVERY = 5       # every 5th point query with current is an EXPLAIN ANALYZE
_SYNC_WAIT = re.compile(r"Sync Wait:\s*([0-9.]+)\s*ms")

# (heading, key, width, format) for report.table
COLUMNS = [
    ("measurement", "measurement", 29, "s"),
    ("idx", "indexes", 3, "d"),
    ("events", "events", 7, "d"),
    ("seconds", "seconds", 7, ".2f"),
    ("events/s", "events_s", 8, ".0f"),
    ("entries/s", "entries_s", 9, ".0f"),
    ("x_floor", "x_floor", 7, ".2f"),
    ("cpu_us/ev", "cpu_us", 9, ".0f"),
    ("srv_us/ev", "srv_us", 9, ".0f"),
    ("rt/batch", "rt_batch", 8, ".1f"),
    ("runs", "runs", 5, "d"),
    ("median_ms", "median_ms", 9, ".2f"),
    ("p99_ms", "p99_ms", 8, ".2f"),
    ("max_ms", "max_ms", 8, ".1f"),
    ("x_any", "x_any", 6, ".3g"),
    ("+ms", "added_ms", 7, ".2f"),
    ("note", "note", 0, "s"),
]
CSV_FIELDS = ["measurement", "indexes", "events", "seconds", "events_s", "entries_s",
              "x_floor", "cpu_us", "srv_us", "rt_batch",
              "drain_events_s", "runs", "median_ms", "p99_ms", "max_ms", "x_any", "added_ms",
              "sync_wait_ms", "lag_col_median_s", "lag_col_p99_s", "note"]


class Unavailable(Exception):
    """This build or server cannot run the applier section (the message says why)."""


def percentile(values, q):
    """The q-quantile (0..1) of values by nearest rank; None if there are none."""
    v = sorted(values)
    if not v:
        return None
    return v[min(len(v), max(1, math.ceil(q * len(v)))) - 1]


def first_line(e):
    """The first line of an exception's message (its class name if it has none)."""
    return str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__


def connect(dsn_db, settings=()):
    """A psycopg2 connection in autocommit with the given (GUC, value) pairs set."""
    conn = pg_fixture.connect(dsn_db)
    cur = conn.cursor()
    for name, value in settings:
        cur.execute("SELECT set_config(%s, %s, false)", (name, value))
    return conn


def check_prerequisites(cur):
    """Raise Unavailable unless the applier and idxtable.sync_status are there."""
    cur.execute("SHOW shared_preload_libraries")
    preload = cur.fetchone()[0]
    if "idxtable_fdw" not in [p.strip().strip('"') for p in preload.split(",")]:
        raise Unavailable("idxtable_fdw is not in shared_preload_libraries (%r): no applier runs"
                          % preload)
    cur.execute("SELECT to_regclass('idxtable.sync_status') IS NOT NULL")
    if not cur.fetchone()[0]:
        raise Unavailable("idxtable.sync_status does not exist in this build")
    cur.execute("SELECT count(*) FROM pg_settings WHERE name = 'idxtable.index_consistency'")
    if not cur.fetchone()[0]:
        raise Unavailable("the setting idxtable.index_consistency does not exist in this build")


def load(cur, mdb, n, log):
    """n customers in MongoDB, the foreign table over them; returns {_id: email}."""
    mdb.drop_collection(TABLE)
    emails = {}
    t0 = time.monotonic()
    for batch in data.Dataset(n).customers():
        mdb[TABLE].insert_many(batch, ordered=False)
        emails.update((doc["_id"], doc["email"]) for doc in batch)
    log("  loaded %d customers in %.1f s" % (n, time.monotonic() - t0))
    cur.execute("CREATE FOREIGN TABLE %s (customer_id int OPTIONS (field '_id'), town text, "
                "last_name text, first_name text, email text, balance int) SERVER mongo "
                "OPTIONS (collection %%s)" % TABLE, (TABLE,))
    cur.execute("ANALYZE %s" % TABLE)
    return emails


def load_floor(mdb, n, log):
    """The same n customers in FLOOR_TABLE: no foreign table over it, so no applier follows it."""
    mdb.drop_collection(FLOOR_TABLE)
    t0 = time.monotonic()
    for batch in data.Dataset(n).customers():
        mdb[FLOOR_TABLE].insert_many(batch, ordered=False)
    log("  loaded %d customers for the floor in %.1f s" % (n, time.monotonic() - t0))


class ServerCounts:
    """The test server's commands and CPU by client (its commandCpu command); ok is False on mongod."""

    def __init__(self, mdb):
        self.admin = mdb.client.admin
        try:
            self.take()
            self.ok = True
        except pymongo.errors.PyMongoError:
            self.ok = False

    def take(self):
        """{appName: (commands, batches, server cpu ms)} since the last call ({} on mongod).

        batches: the client's finds of the facts (one per batch that brought events, for the
        applier as for the floor), from the server's ring of recent commands (the appliers of
        other databases share the appName, but read other collections); commands: all the
        client's commands less its getMores but one per batch (the others waited and brought
        nothing).
        If the ring overflowed: all commands, and batches None.
        """
        out = {}
        try:
            commands = self.admin.command("commandCpu", clear=True)["commands"]
            ring = self.admin.command("recentCommands", clear=True)["commands"]
        except pymongo.errors.PyMongoError:
            return out
        batches = {}
        for rec in ring:
            if rec["command"] == "find" and rec.get("collection") in (TABLE, FLOOR_TABLE):
                batches[rec.get("appName")] = batches.get(rec.get("appName"), 0) + 1
        overflow = len(ring) >= RING_SIZE
        for c in commands:
            n, g, ms = out.get(c["appName"], (0, 0, 0.0))
            out[c["appName"]] = (n + c["count"],
                                 g + (c["count"] if c["command"] == "getMore" else 0),
                                 ms + c["cpu_ms"])
        # round trips of the batches: every command but the getMores that brought nothing
        return {app: (n - g + batches.get(app, 0), batches.get(app, 0), ms) if not overflow
                else (n, None, ms) for app, (n, g, ms) in out.items()}


def applier_cpu(cur):
    """The CPU seconds the appliers' processes have used (/proc/PID/stat); None if unreadable."""
    cur.execute("SELECT pid FROM idxtable.appliers WHERE pid IS NOT NULL")
    total = 0.0
    try:
        for (pid,) in cur.fetchall():
            with open("/proc/%d/stat" % pid) as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None
    return total


def add_costs(r, events, cpu_s, counts):
    """CPU per event, the test server's CPU per event and round trips per batch into row r.

    counts: (commands, batches, server cpu ms) of the follower, or None.
    """
    if cpu_s is not None:
        r["cpu_us"] = cpu_s / events * 1e6
    if counts:
        commands, batches, srv_ms = counts
        r["srv_us"] = srv_ms * 1000.0 / events
        if batches:
            r["rt_batch"] = commands / batches
            r["note"] = r.get("note", "") + "; %d commands in %d batches" % (commands, batches)
        elif batches is None:       # more commands than the ring holds: per 1,000 events
            r["rt_batch"] = commands * 1000.0 / events
            r["note"] = r.get("note", "") + ("; %d commands (rt/batch: per 1,000 events, the "
                                             "test server's ring of commands overflowed)" % commands)


def build_floor(tmpdir):
    """Compile floor.c (cc, pkg-config libmongoc-1.0); its path, or None if it does not build."""
    cc = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
    if not cc:
        return None
    try:
        flags = subprocess.check_output(["pkg-config", "--cflags", "--libs", "libmongoc-1.0"],
                                        text=True).split()
    except (OSError, subprocess.CalledProcessError):
        return None
    binary = os.path.join(tmpdir, "floor")
    out = subprocess.run([cc, "-O2", "-Wall", "-o", binary,
                          os.path.join(os.path.dirname(os.path.abspath(__file__)), "floor.c")]
                         + flags, capture_output=True, text=True)
    return binary if out.returncode == 0 else None


class Floor:
    """floor.py following FLOOR_TABLE with the first k index tables' entries, a process of its own
    (floor.c once the collections are built, if binary is not None)."""

    def __init__(self, db_name, k, binary=None):
        here = os.path.dirname(os.path.abspath(__file__))
        self.proc = subprocess.Popen([sys.executable, os.path.join(here, "floor.py")]
                                     + (["--c", binary] if binary else [])
                                     + [db_name, FLOOR_TABLE] + FLOOR_SPECS[:k],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        ready = self.proc.stdout.readline().split()
        if not ready or ready[0] != "ready":
            self.proc.kill()
            raise RuntimeError("floor.py did not start (exit status %s)" % self.proc.wait())
        self.lock = threading.Lock()
        self.last = (0, time.monotonic(), float(ready[1]), 0, 0)
        self.thread = threading.Thread(target=self.read, daemon=True)
        self.thread.start()

    def read(self):
        """Its progress lines: (events, monotonic, cpu s, commands, getMores), running totals."""
        for line in self.proc.stdout:
            p = line.split()
            with self.lock:
                self.last = (int(p[0]), float(p[1]), float(p[2]), int(p[3]), int(p[4]))

    def progress(self):
        """The last progress line."""
        with self.lock:
            return self.last

    def close(self):
        """Stop it (it stops when its stdin closes)."""
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def floor_burst(floor, writer, k, events, srv, binary, log):
    """The burst of burst(), followed by the floor (a Floor with k index collections) instead."""
    time.sleep(QUIET_S)             # as burst() waits for the applier's counters to stand still
    b0 = floor.progress()
    srv.take()
    t0 = time.monotonic()
    written = 0
    while written < events:
        n = min(BULK, events - written)
        writer.write(n)
        written += n
    t_written = time.monotonic()
    t_end = t0 + max(60.0, events / 50.0)
    while floor.progress()[0] < b0[0] + events and time.monotonic() < t_end:
        time.sleep(POLL_S)
    t_done = time.monotonic()
    p = floor.progress()
    r = {"measurement": "floor: burst of %d updates" % events, "indexes": k, "events": events}
    if p[0] < b0[0] + events:
        r["note"] = "NOT APPLIED: the floor followed %d of %d events" % (p[0] - b0[0], events)
        return r
    r.update(seconds=t_done - t0, events_s=events / (t_done - t0),
             note="%s: per batch a find of the facts, per index collection a find of its "
                  "entries and a bulk write; pymongo wrote it in %.2f s"
                  % ("floor.c" if binary else "floor.py (floor.c did not build)", t_written - t0))
    counts = srv.take().get(FLOOR_APP)
    if counts is None:      # mongod: its own count
        counts = (p[3] - b0[3], None, 0.0)
    add_costs(r, events, p[2] - b0[2], counts)
    if not srv.ok:
        r.pop("srv_us", None)
    log("  floor %d idx: %d events in %.2f s (%.0f events/s)"
        % (k, events, r["seconds"], r["events_s"]))
    return r


def median_turn(turns):
    """The rows of the applier and of the floor over turns [(applier row, floor row)]: each
    measure's median, and x_floor the median of the turns' own ratios (a load that comes and goes
    on the machine slows both sides of a turn alike)."""
    out = []
    for side in (0, 1):
        rows = [t[side] for t in turns]
        r = dict(rows[-1])
        for key in ("seconds", "events_s", "entries_s", "cpu_us", "srv_us", "rt_batch"):
            values = [x[key] for x in rows if x.get(key) is not None]
            r[key] = statistics.median(values) if len(values) == len(rows) else None
        r["measurement"] += " (median of %d)" % len(rows) if len(rows) > 1 else ""
        out.append(r)
    ratios = [f["events_s"] / a["events_s"] for a, f in turns
              if a.get("events_s") and f.get("events_s")]
    if len(ratios) == len(turns):
        out[0]["x_floor"] = statistics.median(ratios)
        out[0]["note"] = "turns' floor / applier %s; %s" % (
            " ".join("%.2f" % x for x in ratios), out[0].get("note", ""))
    return out


def create_indexes(cur, have, want, log):
    """Add index tables have..want-1 of INDEXES; return the names of all of them."""
    for keys, include, unique in INDEXES[have:want]:
        t0 = time.monotonic()
        cur.execute("SELECT idxtable.create_index(%s::regclass, %s::text[], "
                    "include => %s::text[], is_unique => %s)",
                    (TABLE, keys, include or "{}", unique))
        log("  index %s%s built in %.1f s: %s" % (keys, " INCLUDE " + include if include else "",
                                                   time.monotonic() - t0, cur.fetchone()[0]))
    cur.execute("SELECT name FROM idxtable.indexes WHERE \"table\" = %s::regclass ORDER BY name",
                (TABLE,))
    return [r[0] for r in cur.fetchall()]


def read_status(cur, names):
    """{name: (state, streaming, events_applied, entries_written, lag seconds, last_error)}.

    streaming: the view's lag is not NULL (an applier follows the index now).
    """
    cur.execute("SELECT name, state, lag IS NOT NULL, events_applied, "
                "entries_written, extract(epoch FROM lag), last_error "
                "FROM idxtable.sync_status WHERE name = ANY(%s)", (names,))
    return {r[0]: r[1:] for r in cur.fetchall()}


def counters(status, names):
    """(min events_applied, sum entries_written) over names; None if one is missing."""
    try:
        return (min(int(status[n][2] or 0) for n in names),
                sum(int(status[n][3] or 0) for n in names))
    except KeyError:
        return None


def wait_ready(cur, names, log):
    """Wait until the applier follows every index table and its counters stand still.

    Returns the counters then.  Raises Unavailable if it does not get there.
    """
    t0 = time.monotonic()
    last, since = None, time.monotonic()
    while True:
        st = read_status(cur, names)
        now = time.monotonic()
        ready = all(n in st and st[n][1] for n in names)
        c = counters(st, names) if ready else None
        if c != last:
            last, since = c, now
        elif c is not None and now - since >= QUIET_S:
            log("  applier follows %d index table(s) (after %.1f s)" % (len(names), now - t0))
            return c
        if now - t0 > READY_TIMEOUT_S:
            raise Unavailable("after %.0f s the applier does not follow every index table: %s"
                              % (READY_TIMEOUT_S, {n: st.get(n) for n in names}))
        time.sleep(0.05)


def update_op(cid, seq, towns, lasts):
    """An update of customer cid that changes a key of every index table."""
    return pymongo.UpdateOne({"_id": cid}, {"$set": {
        "town": towns[seq % len(towns)], "last_name": lasts[seq % len(lasts)],
        "email": "Outside.%d.c%d@Bench.example" % (seq, cid)}})


class Writer:
    """Outside updates of customers 1..n-SPARE, each with a fresh unique e-mail."""

    def __init__(self, coll, n):
        d = data.Dataset(1)
        self.coll = coll
        self.ids = n - SPARE
        # a prime stride that does not divide ids visits every customer once per cycle
        self.stride = 7919 if self.ids % 7919 else 7907
        self.towns = d.tail_towns[:50] + ["Redmond"]
        self.lasts = d.last_names[:200]
        self.seq = 0

    def ops(self, k):
        """The next k updates: any n - SPARE consecutive ones touch distinct customers."""
        out = []
        for _ in range(k):
            self.seq += 1
            out.append(update_op(1 + (self.seq * self.stride) % self.ids, self.seq,
                                 self.towns, self.lasts))
        return out

    def write(self, k):
        """k updates in one unordered bulk write; returns how many changed a document."""
        return self.coll.bulk_write(self.ops(k), ordered=False).modified_count


def wait_applied(cur, names, target, timeout_s, series=None):
    """Poll until the min events_applied reaches target; time.perf_counter() then, or None."""
    t_end = time.perf_counter() + timeout_s
    while True:
        c = counters(read_status(cur, names), names)
        now = time.perf_counter()
        if series is not None and c is not None:
            series.append((now, c[0]))
        if c is not None and c[0] >= target:
            return now, c
        if now > t_end:
            return None, c
        time.sleep(POLL_S)


def burst(cur, writer, names, events, srv, log):
    """Write `events` outside updates at once; measure until every index table has them."""
    base = wait_ready(cur, names, log)
    srv.take()
    cpu0 = applier_cpu(cur)
    t0 = time.perf_counter()
    written = 0
    while written < events:
        k = min(BULK, events - written)
        if writer.write(k) != k:
            raise RuntimeError("an outside bulk update changed fewer than %d customers" % k)
        written += k
    t_written = time.perf_counter()
    series = []
    t_done, c = wait_applied(cur, names, base[0] + events, max(60.0, events / 50.0), series)
    r = {"measurement": "burst of %d updates" % events, "indexes": len(names), "events": events}
    if t_done is None:
        r["note"] = ("NOT APPLIED: after %.0f s the counters show %s of %d events"
                     % (time.perf_counter() - t0, None if c is None else c[0] - base[0], events))
        return r
    cpu1 = applier_cpu(cur)
    add_costs(r, events, None if cpu0 is None or cpu1 is None else cpu1 - cpu0,
              srv.take().get(APPLIER_APP))
    at_written = max([n for t, n in series if t <= t_written] or [base[0]]) - base[0]
    r.update(seconds=t_done - t0, events_s=events / (t_done - t0),
             entries_s=(c[1] - base[1]) / (t_done - t0),
             note="pymongo wrote it in %.2f s; %d entries written"
             % (t_written - t0, c[1] - base[1]))
    if t_done > t_written and at_written < events:
        r["drain_events_s"] = (events - at_written) / (t_done - t_written)
        r["note"] += "; %.0f events/s after the writes ended" % r["drain_events_s"]
    log("  burst %d idx: %d events applied in %.2f s (%.0f events/s; written in %.2f s)"
        % (len(names), events, r["seconds"], r["events_s"], t_written - t0))
    return r


def point_sql(email):
    """The point query for the customer with this e-mail address."""
    return "SELECT * FROM %s WHERE lower(email) = %s" % (TABLE, scenarios.lit(email.lower()))


def plan_of(cur, sql):
    """(routed?, plan text, Sync Wait ms or None) from one EXPLAIN ANALYZE.

    With TIMING (the default): the FDW prints Sync Wait only then.
    """
    cur.execute("EXPLAIN (ANALYZE, VERBOSE, SUMMARY OFF) " + sql)
    lines = [r[0] for r in cur.fetchall()]
    parsed = measure.parse_explain(lines)
    waits = [float(m.group(1)) for m in map(_SYNC_WAIT.search, lines) if m]
    return measure.uses_index(parsed), measure.describe_plan(parsed), (waits[0] if waits else None)


class Queries:
    """The point query in two sessions (current, any), taking turns."""

    def __init__(self, db, emails):
        self.curs = {}
        for level in ("current", "any"):
            conn = connect(db, [("idxtable.index_consistency", level)])
            self.curs[level] = conn.cursor()
        # ASCII only: lower() is then the same in Python and in any database locale
        self.sqls = [point_sql(emails[cid]) for cid in sorted(emails)[-SPARE:]
                     if emails[cid].isascii()]

    def plans(self):
        """{level: (routed, plan, sync wait)} of one query."""
        return {level: plan_of(cur, self.sqls[0]) for level, cur in self.curs.items()}

    def run(self, reps=None, until=None):
        """Alternate current/any reps times (or until perf_counter() >= until).

        Every EXPLAIN_EVERY-th turn of current runs as EXPLAIN ANALYZE instead,
        in its place (not timed), for its Sync Wait.  Returns ({level: [wall
        ms]}, {level: [errors]}, [Sync Wait ms of current]).
        """
        walls = {level: [] for level in self.curs}
        errors = {level: [] for level in self.curs}
        waits = []
        i = 0
        while (reps is None or i < reps) and (until is None or time.perf_counter() < until):
            sql = self.sqls[i % len(self.sqls)]
            for level in (("current", "any") if i % 2 == 0 else ("any", "current")):
                try:
                    if level == "current" and i % EXPLAIN_EVERY == EXPLAIN_EVERY // 2:
                        w = plan_of(self.curs[level], sql)[2]
                        waits.extend([] if w is None else [w])
                    else:
                        self.timed(level, sql, walls, errors)
                except psycopg2.Error as e:
                    errors[level].append(first_line(e))
            i += 1
        return walls, errors, waits

    def timed(self, level, sql, walls, errors):
        """Run sql in the session of level; its wall time into walls, a wrong row count
        into errors."""
        cur = self.curs[level]
        t0 = time.perf_counter()
        cur.execute(sql)
        walls[level].append((time.perf_counter() - t0) * 1000.0)
        if cur.rowcount != 1:
            errors[level].append("%d rows instead of 1" % cur.rowcount)

    def close(self):
        """Close both sessions."""
        for cur in self.curs.values():
            cur.connection.close()


def query_rows(label, walls, errors, waits, plans):
    """Two table rows (any, current) of one query measurement."""
    rows = []
    base = statistics.median(walls["any"]) if walls["any"] else None
    for level in ("any", "current"):
        w = walls[level]
        r = {"measurement": "point query %s, %s" % (label, level), "indexes": None,
             "runs": len(w)}
        if w:
            r.update(median_ms=statistics.median(w), p99_ms=percentile(w, 0.99), max_ms=max(w))
        notes = []
        routed, plan, _ = plans[level]
        notes.append(plan if routed else "NOT ROUTED: " + plan)
        if level == "current" and w and base:
            r["x_any"] = r["median_ms"] / base
            r["added_ms"] = r["median_ms"] - base
            if waits:
                r["sync_wait_ms"] = statistics.median(waits)
                notes.append("Sync Wait median %.1f ms, max %.1f ms (%d EXPLAIN ANALYZE)"
                             % (r["sync_wait_ms"], max(waits), len(waits)))
        if errors[level]:
            notes.append("%d FAILED: %s" % (len(errors[level]), errors[level][0]))
        r["note"] = "; ".join(notes)
        rows.append(r)
    return rows


def write_steadily(writer, per_tick, tick, acks, stop, failures):
    """per_tick updates every tick until stop is set; (ack time, total) into acks after each bulk,
    an exception's first line into failures."""
    t_next, total = time.perf_counter(), 0
    try:
        while not stop.is_set():
            total += writer.write(per_tick)
            acks.append((time.perf_counter(), total))
            t_next += tick
            delay = t_next - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
    except Exception as e:      # noqa: BLE001 -- reported in the table
        failures.append("writer: " + first_line(e))


def steady(db, writer, names, rate, seconds, base, queries, log):
    """The steady load at `rate` updates/s for seconds, then as long again with the queries (if
    not None); lag rows, busy query results."""
    per_tick = max(1, int(round(rate * TICK_S)))
    tick = per_tick / rate
    acks = []                   # (perf_counter at acknowledgement, cumulative events)
    samples = []                # (perf_counter, min events_applied, max lag column s)
    stop, stop_polling = threading.Event(), threading.Event()
    failures = []

    def write_loop():
        write_steadily(writer, per_tick, tick, acks, stop, failures)

    def poll_loop():
        """The counters every POLL_S until stopped (after the writer, once drained)."""
        cur = connect(db).cursor()
        try:
            while not stop_polling.is_set():
                st = read_status(cur, names)
                c = counters(st, names)
                lag = [st[n][4] for n in names if n in st and st[n][4] is not None]
                if c is not None:
                    samples.append((time.perf_counter(), c[0] - base,
                                    float(max(lag)) if lag else None))
                time.sleep(POLL_S)
        except Exception as e:      # noqa: BLE001
            failures.append("poller: " + first_line(e))
        finally:
            cur.connection.close()

    threads = [threading.Thread(target=write_loop), threading.Thread(target=poll_loop)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    time.sleep(seconds)
    t_half = time.perf_counter()
    if queries is not None:
        walls, errors, waits = queries.run(until=t_half + seconds)
    else:
        walls, errors, waits = None, None, None
    t_end = time.perf_counter()
    stop.set()
    threads[0].join()
    total = acks[-1][1] if acks else 0
    t_done, t_limit = None, time.perf_counter() + max(60.0, total / 50.0)
    while t_done is None and time.perf_counter() < t_limit and threads[1].is_alive():
        t_done = next((t for t, n, _ in reversed(samples[-5:]) if n >= total), None)
        time.sleep(POLL_S)
    stop_polling.set()
    threads[1].join()
    log("  steady load: %d updates in %.1f s (target %.0f/s), all applied %s"
        % (total, t_end - t0, rate,
           "%.2f s after the last" % (t_done - t_end) if t_done else "NOT within the timeout"))

    rows = [lag_row("lag, steady load", len(names), rate, acks, samples, t0, t_half, failures)]
    if queries is not None:
        rows.append(lag_row("lag, load + queries", len(names), rate, acks, samples, t_half, t_end,
                            failures))
    return rows, (walls, errors, waits)


def bulk_lags(acks, samples, lo, hi):
    """The lag (ms) of each bulk acknowledged in [lo, hi): from its acknowledgement (acks: (time,
    cumulative events)) to the first sample (time, events applied, ...) that includes it; and how
    many bulks no sample includes."""
    lags, missing, j = [], 0, 0
    for t_ack, n in [(t, n) for t, n in acks if lo <= t < hi]:
        while j < len(samples) and (samples[j][0] < t_ack or samples[j][1] < n):
            j += 1
        if j >= len(samples):
            missing += 1
        else:
            lags.append((samples[j][0] - t_ack) * 1000.0)
    return lags, missing


def lag_row(label, nidx, rate, acks, samples, lo, hi, failures):
    """The lag of the bulks acknowledged between lo and hi, from the poller's samples."""
    mine = [(t, n) for t, n in acks if lo <= t < hi]
    prev = max([n for t, n in acks if t < lo] or [0])
    lags, missing = bulk_lags(acks, samples, lo, hi)
    events = (mine[-1][1] - prev) if mine else 0
    r = {"measurement": "%s (%.0f/s)" % (label, rate), "indexes": nidx, "events": events,
         "seconds": hi - lo, "events_s": events / (hi - lo) if hi > lo else None,
         "runs": len(lags)}
    notes = ["a bulk every %.0f ms; its lag: acknowledged -> the counters (read every %.0f ms) "
             "include it" % (TICK_S * 1000, POLL_S * 1000)]
    if lags:
        r.update(median_ms=statistics.median(lags), p99_ms=percentile(lags, 0.99),
                 max_ms=max(lags))
    col = [s[2] for s in samples if lo <= s[0] < hi and s[2] is not None]
    if col:
        r["lag_col_median_s"], r["lag_col_p99_s"] = statistics.median(col), percentile(col, 0.99)
        notes.append("sync_status.lag median %.2f s, p99 %.2f s"
                     % (r["lag_col_median_s"], r["lag_col_p99_s"]))
    if missing:
        notes.append("%d bulks NOT APPLIED in the samples" % missing)
    notes.extend(failures)
    r["note"] = "; ".join(notes)
    return r


def status_problems(cur, names):
    """What idxtable.sync_status shows wrong with the index tables (empty: nothing)."""
    cur.execute("SELECT name, state, conflicts, last_error FROM idxtable.sync_status "
                "WHERE name = ANY(%s) ORDER BY name", (names,))
    return ["sync_status %s: state %s, %s conflicts, last_error %s"
            % (name, state, conflicts, last_error)
            for name, state, conflicts, last_error in cur.fetchall()
            if state != "valid" or conflicts or last_error]


def verify(cur, names):
    """Problems idxtable.verify_index finds in the index tables (empty: clean)."""
    bad = []
    for name in names:
        try:
            cur.execute("SELECT checked, missing, orphan, stale, unconvertible "
                        "FROM idxtable.verify_index(%s)", (name,))
            checked, missing, orphan, stale, unconvertible = cur.fetchone()
        except psycopg2.Error as e:
            bad.append("verify_index(%s) failed: %s" % (name, first_line(e)))
            continue
        if missing or orphan or stale or unconvertible:
            bad.append("verify_index(%s): %d checked, %d missing, %d orphan, %d stale, "
                       "%d unconvertible" % (name, checked, missing, orphan, stale, unconvertible))
    return bad


def summary(rows):
    """The section's summary lines: rates, lags, what current adds."""
    out = []
    bursts = {r["indexes"]: r for r in rows if r["measurement"].startswith("burst")}
    if all(bursts.get(n, {}).get("events_s") for n in (1, 3)):
        out.append("applier: %.0f events/s with 1 index table, %.0f with 3 (%.2fx)"
                   % (bursts[1]["events_s"], bursts[3]["events_s"],
                      bursts[3]["events_s"] / bursts[1]["events_s"]))
    for n in (1, 3):
        if bursts.get(n, {}).get("x_floor"):
            out.append("floor / applier with %d index table(s): %.2fx (target: at most 1.25x)"
                       % (n, bursts[n]["x_floor"]))
    for r in rows:
        if r["measurement"].startswith("lag") and r.get("median_ms") is not None:
            out.append("%s: median %.1f ms, p99 %.1f ms over %d bulks"
                       % (r["measurement"], r["median_ms"], r["p99_ms"], r["runs"]))
        if r["measurement"].endswith("current") and r.get("added_ms") is not None:
            out.append("%s: %+.2f ms over any (%.3gx)"
                       % (r["measurement"].replace(", current", ""), r["added_ms"], r["x_any"]))
    return out


def write_csv(path, rows):
    """The table's rows (full precision, plus Sync Wait and the lag column) as CSV."""
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=CSV_FIELDS, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            rec = {k: ("" if r.get(k) is None else r.get(k)) for k in CSV_FIELDS}
            for k in CSV_FIELDS[3:-1]:
                if isinstance(r.get(k), float):
                    rec[k] = "%.4g" % r[k]
            w.writerow(rec)


def run(db, mdb, n, events, seconds, idle_reps, log):
    """The whole section; returns (rows, notes, seconds taken).

    db: the PostgreSQL database (server "mongo" made); mdb: its MongoDB database
    (pymongo).  Raises Unavailable if this build or server has no applier.
    """
    t_run = time.monotonic()
    conn = connect(db)
    cur = conn.cursor()
    check_prerequisites(cur)
    if n < events + SPARE:
        n = events + SPARE
    emails = load(cur, mdb, n, log)
    load_floor(mdb, n, log)
    writer = Writer(mdb[TABLE], n)
    floor_writer = Writer(mdb[FLOOR_TABLE], n)
    srv = ServerCounts(mdb)
    rows, notes = [], []
    floors = {}
    tmpdir = tempfile.mkdtemp(prefix="idxtable_floor_")
    binary = build_floor(tmpdir)

    for have, want in ((0, 1), (1, 3)):
        names = create_indexes(cur, have, want, log)
        floor = Floor(db, want, binary)
        turns = []
        try:
            for _ in range(TURNS):
                r = burst(cur, writer, names, events, srv, log)
                turns.append((r, floor_burst(floor, floor_writer, want, events, srv, binary, log)))
        finally:
            floor.close()
        r, f = median_turn(turns)
        floors[want] = f.get("events_s")
        rows.extend([r, f])
    shutil.rmtree(tmpdir, ignore_errors=True)

    queries = Queries(db, emails)
    wait_ready(cur, names, log)
    plans = queries.plans()
    walls, errors, waits = queries.run(reps=idle_reps)
    idle = query_rows("idle", walls, errors, waits, plans)
    log("  point query idle: any %s ms, current %s ms (medians)"
        % tuple(("%.2f" % r["median_ms"]) if r.get("median_ms") else "-" for r in idle))

    rows.extend(idle)
    rate3 = floors.get(3)
    if rate3:
        base = wait_ready(cur, names, log)[0]
        lag_rows, busy_q = steady(db, writer, names, rate3 * BUSY_LOAD, seconds, base, queries,
                                  log)
        lag_rows[-1]["measurement"] = lag_rows[-1]["measurement"].replace(
            " (", " %.0f%% (" % (BUSY_LOAD * 100), 1)
        rows.append(lag_rows[-1])       # the lag alone: lag.py, repeated
        rows.extend(query_rows("busy", *busy_q, plans=plans))
    else:
        notes.append("no steady load and no busy queries: the floor's 3-index burst did not end")
    queries.close()

    wait_ready(cur, names, log)
    notes.extend(status_problems(cur, names))
    bad = verify(cur, names)
    notes.extend(bad or ["verify_index clean on all %d index tables after the run" % len(names)])
    conn.close()
    return rows, notes, time.monotonic() - t_run


def print_report(rows, notes, n, run_s):
    """The section's table and summary on stdout."""
    print()
    print("idxtable_fdw applier benchmark: %d customers, updates made with pymongo straight to "
          "MongoDB (%.0f s in all)" % (n, run_s))
    print("x_any, +ms: current / and - any (medians); lag: per bulk of the steady writer, "
          "from its acknowledgement until idxtable.sync_status counts it applied")
    print()
    for line in report.table(rows, COLUMNS, min_width=0):
        print(line)
    print()
    print("summary (applier):")
    for line in summary(rows) + notes:
        print("  " + line)
