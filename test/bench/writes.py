"""Write scenarios: bulk INSERT, UPDATE of an indexed key, DELETE, with 0, 1 and 3
index tables, in the consistency modes "transaction", "ordered" and "eventual".

run() expects a database with the extension and the server "mongo" (bench.py
makes it).  Per mode and index count it creates a foreign table w_<mode>_<n>idx
with the columns of customers over a fresh collection of that name, creates
its index tables, then runs each statement as EXPLAIN (ANALYZE), so that the
FDW's write counters come with it:

  insert        INSERT INTO t SELECT * FROM w_source    (n rows, a local table)
  update town   UPDATE t SET town = town || ' North'     (k rows by _id)
  update email  UPDATE t SET email = 'moved.' || email   (k other rows by _id)
  delete        DELETE FROM t                            (k other rows by _id)

A write cannot be repeated on the same rows: each repetition gets tables and
collections of its own (w_<mode>_<n>idx_r2, ...); after it, each table's row
count is checked and every index table verified (idxtable.verify_index).  Every
rows/s is compared with the insert without index tables of the same mode
(x_ins0) and with the same statement without index tables (x_same0).

In mode "eventual" the write leaves the index tables to the change-stream
applier, and a unique index table is refused, so there the first index is
{lower(email)} without is_unique.  While each statement on a table with index
tables runs (any mode: the applier follows FDW writes too, and finds nothing
to write for those of "transaction" and "ordered"), a second connection
samples idxtable.sync_status every 0.1 s (and once right after): lag_ms is
the largest lag of the table's index tables seen.  catch_ms is the time from
the statement's end until the applier has applied it: routed reads through
the table's index tables with idxtable.index_consistency = current, which wait
for that (bounded by CATCHUP_TIMEOUT; without that setting, until every index
table has applied_through at or past the statement's end, which an idle stream
may reach only seconds later).  The next statement starts only then, so that
the applier's work does not spill into the next measurement, and the index
tables can be verified.  Before the first statement on a new table, the bench waits in the same way
until the applier follows its new index tables (LagSampler.settle), so that the applier's start on
them is not counted as part of that statement.

On the project's test server, srv_fdw_ms and srv_applier_ms are the server CPU that the FDW's
commands and the applier's took from the statement's start through the catch-up (its commandCpu
command), and srv_applier_pct the second as a share of the first.  That server runs one command at a
time, so this share is what the applier slows the FDW's writes there, measured without the noise of
wall-clock rows/s; on mongod the applier's reads run beside the writes on other cores.
"""
import csv
import statistics
import threading
import time

import psycopg2
import psycopg2.extras

import data
import measure
import report

MODES = ("transaction", "ordered", "eventual")
CATCHUP_TIMEOUT = 120.0     # s an eventual statement's index tables may take to catch up
# (keys, include, unique); a table with n indexes gets the first n
INDEXES = [("{lower(email)}", None, True),
           ("{town,last_name}", None, False),
           ("{town}", "{first_name,last_name}", False)]
INDEX_COUNTS = (0, 1, 3)
COLUMNS_DDL = ("customer_id int OPTIONS (field '_id'), town text, last_name text, "
               "first_name text, email text, balance int")

# the ModifyTable node's EXPLAIN ANALYZE properties (fdw/modify.c)
_COUNTS = {"Facts Written": "facts", "Index Entries Written": "entries_w",
           "Index Entries Deleted": "entries_d", "Round Trips": "modify_rt"}

# (heading, key, width, format) for report.table
COLUMNS = [
    ("mode", "mode", 11, "s"),
    ("scenario", "scenario", 12, "s"),
    ("idx", "indexes", 3, "d"),
    ("rows", "rows", 6, "d"),
    ("runs", "executions", 4, "d"),
    ("wall_ms", "wall_ms", 9, ".1f"),
    ("rows/s", "rows_s", 8, ".0f"),
    ("rtrips", "round_trips", 6, "d"),
    ("rt/row", "rt_per_row", 7, ".3g"),
    ("ent_w", "entries_w", 6, "d"),
    ("ent_d", "entries_d", 6, "d"),
    ("cpu_ms", "cpu_ms", 8, ".1f"),
    ("cpu/row", "cpu_ms_per_row", 7, ".3f"),
    ("x_ins0", "x_insert0", 6, ".3f"),
    ("x_same0", "x_same0", 7, ".3f"),
    ("lag_ms", "lag_max_ms", 7, ".0f"),
    ("catch_ms", "catchup_ms", 8, ".0f"),
]
CSV_FIELDS = ["mode", "scenario", "indexes", "rows", "expected_rows", "executions", "wall_ms",
              "wall_min_ms", "wall_max_ms", "rows_s",
              "round_trips", "modify_rt", "scan_rt", "rt_per_row", "facts", "entries_w",
              "entries_d", "cpu_ms", "cpu_ms_per_row", "x_insert0", "x_same0", "lag_max_ms",
              "catchup_ms", "srv_fdw_ms", "srv_applier_ms", "srv_applier_pct", "sql"]


def table_name(mode, n):
    return "w_%s_%didx" % (mode, n)


def load_source(cur, n):
    """w_source: the first n customers of the benchmark's generator, as a local table."""
    cur.execute("DROP TABLE IF EXISTS w_source")
    cur.execute("CREATE TABLE w_source (customer_id int PRIMARY KEY, town text, "
                "last_name text, first_name text, email text, balance int)")
    cols = ("_id", "town", "last_name", "first_name", "email", "balance")
    for batch in data.Dataset(n).customers():
        psycopg2.extras.execute_values(cur, "INSERT INTO w_source VALUES %s",
                                       [tuple(doc[c] for c in cols) for doc in batch])
    cur.execute("ANALYZE w_source")


def create_table(cur, mode, n, name):
    """Foreign table name over a fresh collection of that name, with the first n index tables."""
    cur.execute("CREATE FOREIGN TABLE %s (%s) SERVER mongo OPTIONS (collection %%s, "
                "consistency %%s)" % (name, COLUMNS_DDL), (name, mode))
    for keys, include, unique in INDEXES[:n]:
        cur.execute("SELECT idxtable.create_index(%s::regclass, %s::text[], "
                    "include => %s::text[], is_unique => %s)",
                    (name, keys, include or "{}", unique and mode != "eventual"))
    return name


class LagSampler:
    """Samples max(lag) of some index tables in idxtable.sync_status from a connection of its own.

    ok is False where the view does not exist (no applier): then nothing is sampled.
    """

    def __init__(self, dsn):
        self.conn = psycopg2.connect(dsn)
        self.conn.autocommit = True
        self.cur = self.conn.cursor()
        self.cur.execute("SELECT to_regclass('idxtable.sync_status') IS NOT NULL")
        self.ok = self.cur.fetchone()[0]
        self.thread = None
        self.table = None
        self.cur.execute("SELECT 'idxtable_fdw' = ANY(string_to_array("
                         "replace(current_setting('shared_preload_libraries'), ' ', ''), ','))")
        self.preloaded = self.cur.fetchone()[0]
        self.cur.execute("LOAD 'idxtable_fdw'")
        self.cur.execute("SELECT current_setting('idxtable.index_consistency', true) IS NOT NULL")
        self.waits = self.cur.fetchone()[0]
        if self.waits:
            self.cur.execute("SET idxtable.index_consistency = current")
            self.cur.execute("SET idxtable.sync_wait_timeout = %d" % (CATCHUP_TIMEOUT * 1000))
            self.cur.execute("SET idxtable.enable_plain_scan = off")

    def sample(self, names):
        """The largest lag (ms) of the index tables "names" now, or None."""
        self.cur.execute("SELECT max(extract(epoch FROM lag)) * 1000 FROM idxtable.sync_status "
                         "WHERE name = ANY(%s)", (names,))
        value = self.cur.fetchone()[0]
        return None if value is None else float(value)

    def start(self, names, table=None):
        """Sample every 0.1 s in a thread until stop()."""
        self.names, self.max, self.stopping = names, None, threading.Event()
        self.table = table
        if not self.ok or not names:
            return
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def _loop(self):
        while not self.stopping.wait(0.1):
            self._note(self.sample(self.names))

    def _note(self, value):
        if value is not None and (self.max is None or value > self.max):
            self.max = value

    def stop(self, since):
        """Stop sampling; one more sample; then wait until the index tables have applied
        everything up to "since" (a timestamptz).  Returns (max lag ms, catch-up ms)."""
        if self.thread:
            self.stopping.set()
            self.thread.join()
            self.thread = None
        if not self.ok or not self.names or since is None:
            return None, None
        self._note(self.sample(self.names))
        t0 = time.monotonic()
        if self.waits and self.table:
            # each routed read waits until the applier has passed the write
            try:
                for where in ("lower(email) = 'nobody'", "town = 'Nowhere'",
                              "town = 'Nowhere' AND last_name = 'Nobody'"):
                    self.cur.execute("SELECT count(*) FROM %s WHERE %s" % (self.table, where))
            except psycopg2.Error:
                return self.max, None
            return self.max, (time.monotonic() - t0) * 1000.0
        while time.monotonic() - t0 < CATCHUP_TIMEOUT:
            self.cur.execute("SELECT count(*) = count(*) FILTER (WHERE applied_through >= %s) "
                             "FROM idxtable.sync_status WHERE name = ANY(%s)",
                             (since, self.names))
            if self.cur.fetchone()[0]:
                return self.max, (time.monotonic() - t0) * 1000.0
            time.sleep(0.02)
        return self.max, None

    def settle(self, names):
        """Wait until the applier follows the new index tables "names" and has applied everything
        up to now, so that its start on them (a catalog reload, a stream reopened) is not measured
        as the cost of the first statement."""
        if not self.ok or not self.preloaded or not names:
            return
        self.cur.execute("SELECT clock_timestamp()")
        since = self.cur.fetchone()[0]
        t0 = time.monotonic()
        while time.monotonic() - t0 < CATCHUP_TIMEOUT:
            self.cur.execute("SELECT count(*) = %s AND bool_and(applied_through >= %s) "
                             "FROM idxtable.sync_status WHERE name = ANY(%s)",
                             (len(names), since, names))
            if self.cur.fetchone()[0]:
                return
            time.sleep(0.02)

    def close(self):
        self.conn.close()


def index_names(cur, name):
    """The index tables of the foreign table "name"."""
    cur.execute("SELECT coalesce(array_agg(name), '{}') FROM idxtable.indexes "
                "WHERE \"table\" = %s::regclass", (name,))
    return cur.fetchone()[0]


def statements(name, n, k):
    """(scenario, sql, expected rows, sql as shown): disjoint sets of k _ids over 1..n."""
    step = max(4, n // k)

    def ids(offset, shown=False):
        vals = [str(offset + i * step) for i in range(k)]
        if shown and k > 4:
            vals = vals[:2] + ["...%d ids..." % k] + vals[-1:]
        return "WHERE customer_id = ANY('{%s}'::int[])" % ",".join(vals)

    out = [("insert", "INSERT INTO %s SELECT * FROM w_source" % name, n, None)]
    for scenario, head, offset in (
            ("update town", "UPDATE %s SET town = town || ' North' " % name, 1),
            ("update email", "UPDATE %s SET email = 'moved.' || email " % name, 2),
            ("delete", "DELETE FROM %s " % name, 3)):
        out.append((scenario, head + ids(offset), k, head + ids(offset, shown=True)))
    return [(sc, sql, exp, shown or sql) for sc, sql, exp, shown in out]


def parse_modify(lines):
    """The write counters of the ModifyTable node (None where not printed)."""
    out = dict.fromkeys(_COUNTS.values())
    for line in lines[1:]:
        s = line.strip()
        if s.startswith(("->", "InitPlan", "SubPlan", "CTE ")):
            break           # the node's own properties come before its children
        name, _, value = s.partition(":")
        if name in _COUNTS:
            out[_COUNTS[name]] = measure._first_int(value.strip())
    return out


class ServerCpu:
    """The test server's CPU time by client (its commandCpu command): what the FDW's own commands
    and the applier's cost the server.  That server runs one command at a time, so the applier's
    share is time the FDW's writes wait; on mongod (no such command) it is blank."""

    def __init__(self, mdb):
        self.admin = mdb.client.admin
        try:
            self.take()
            self.ok = True
        except Exception:  # mongod: no such command
            self.ok = False

    def take(self):
        """(fdw_ms, applier_ms) since the last call."""
        fdw = applier = 0.0
        for c in self.admin.command("commandCpu", clear=True)["commands"]:
            if c["appName"] == "idxtable_fdw":
                fdw += c["cpu_ms"]
            elif "applier" in (c["appName"] or ""):
                applier += c["cpu_ms"]
        return fdw, applier


def measure_write(cur, sql, cpu, lag=None, names=None, table=None, srv=None):
    """Run sql once as EXPLAIN (ANALYZE); wall and backend CPU around it, and the counters.

    With a LagSampler "lag": the applier's lag on the index tables "names" while it runs,
    and the time it then takes to catch up.  With a ServerCpu "srv": the test server's CPU
    spent on the FDW's commands and on the applier's, through the catch-up.
    """
    if srv:
        srv.take()
    if lag:
        lag.start(names, table)
    c0 = cpu.read()
    t0 = time.perf_counter()
    try:
        cur.execute("EXPLAIN (ANALYZE, VERBOSE, TIMING OFF, SUMMARY OFF) " + sql)
    except psycopg2.Error:
        if lag:
            lag.stop(None)
        raise
    t1 = time.perf_counter()
    c1 = cpu.read()
    lines = [r[0] for r in cur.fetchall()]
    if lag:
        cur.execute("SELECT clock_timestamp()")
        lag_max, catchup = lag.stop(cur.fetchone()[0])
    m = parse_modify(lines)
    m["scan_rt"] = measure.parse_explain(lines)["Round Trips"]
    m["round_trips"] = None if m["modify_rt"] is None else m["modify_rt"] + (m["scan_rt"] or 0)
    m["wall_ms"] = (t1 - t0) * 1000.0
    m["cpu_ms"] = None if c0 is None or c1 is None else (c1 - c0) * 1000.0
    m["rows"] = m["facts"]
    m["explain"] = lines
    m["sql"] = sql
    m["lag_max_ms"], m["catchup_ms"] = (lag_max, catchup) if lag else (None, None)
    m["srv_fdw_ms"], m["srv_applier_ms"] = srv.take() if srv else (None, None)
    return m


def per_row(value, rows):
    return None if value is None or not rows else value / rows


def add_ratios(rows):
    """rows/s against the mode's insert without indexes, and against the same statement."""
    base = {(r["mode"], r["scenario"]): r.get("rows_s") for r in rows if r["indexes"] == 0}
    for r in rows:
        r["x_insert0"] = report.ratio(r.get("rows_s"), base.get((r["mode"], "insert")))
        r["x_same0"] = report.ratio(r.get("rows_s"), base.get((r["mode"], r["scenario"])))


def verify(cur, counts, bad, skip=()):
    """Row counts and idxtable.verify_index of the tables' index tables; problems go to bad.

    The index tables of the tables "skip" are not verified.  Returns the number of index
    tables verified.
    """
    for name, expected in counts.items():
        cur.execute("SELECT count(*) FROM %s" % name)
        got = cur.fetchone()[0]
        if got != expected:
            bad.append("%s has %d rows, expected %d" % (name, got, expected))
    try:
        cur.execute("SELECT name FROM idxtable.indexes WHERE \"table\" = ANY(%s::regclass[]) "
                    "ORDER BY 1", ([t for t in counts if t not in skip],))
    except psycopg2.Error as e:
        bad.append("idxtable.indexes not readable: %s" % str(e).strip().splitlines()[0])
        return 0
    indexes = [r[0] for r in cur.fetchall()]
    for index in indexes:
        try:
            cur.execute("SELECT checked, missing, orphan, stale, unconvertible "
                        "FROM idxtable.verify_index(%s)", (index,))
            checked, missing, orphan, stale, unconvertible = cur.fetchone()
        except psycopg2.Error as e:
            bad.append("verify_index(%s) failed: %s" % (index, str(e).strip().splitlines()[0]))
            continue
        if missing or orphan or stale or unconvertible:
            bad.append("verify_index(%s): %d checked, %d missing, %d orphan, %d stale, "
                       "%d unconvertible"
                       % (index, checked, missing, orphan, stale, unconvertible))
    return len(indexes)


def drop_tables(cur, mdb, names):
    """Drop the foreign tables (and so their index definitions) and every collection of mdb."""
    for name in names:
        cur.execute("DROP FOREIGN TABLE %s" % name)
    for coll in mdb.list_collection_names():
        mdb.drop_collection(coll)


def summary(rows):
    out = []
    by = {(r["mode"], r["scenario"], r["indexes"]): r for r in rows}
    for mode in MODES:
        b = by.get((mode, "insert", 0))
        if not b or b.get("rows_s") is None:
            continue
        parts = ["%d idx %.2fx" % (n, by[(mode, "insert", n)]["x_insert0"])
                 for n in INDEX_COUNTS[1:] if by.get((mode, "insert", n), {}).get("x_insert0")]
        out.append("%-11s plain insert %.0f rows/s, %.3g round trips/row; with indexes: %s"
                   % (mode + ":", b["rows_s"], b.get("rt_per_row") or 0, ", ".join(parts)))
    for scenario in dict.fromkeys(k[1] for k in by):
        per_mode = {mode: "/".join("%.3g" % by[(mode, scenario, n)]["rt_per_row"]
                                   if by.get((mode, scenario, n), {}).get("rt_per_row")
                                   is not None else "-" for n in INDEX_COUNTS)
                    for mode in MODES}
        text = ("%s (both modes)" % per_mode[MODES[0]] if len(set(per_mode.values())) == 1
                else ", ".join("%s %s" % kv for kv in per_mode.items()))
        out.append("round trips/row %-12s with %s indexes: %s"
                   % (scenario, "/".join(map(str, INDEX_COUNTS)), text))
    for other in MODES[1:]:
        ratios = [by[(other,) + key[1:]]["rows_s"] / r["rows_s"]
                  for key, r in by.items() if key[0] == "transaction" and r.get("rows_s")
                  and by.get((other,) + key[1:], {}).get("rows_s")]
        if ratios:
            out.append("%s / transaction rows/s: geometric mean %.3g over %d statements "
                       "(min %.3g, median %.3g, max %.3g)"
                       % (other, report._geomean(ratios), len(ratios), min(ratios),
                          statistics.median(ratios), max(ratios)))
    for mode in MODES:
        shares = [(r["scenario"], r["indexes"], r.get("srv_applier_pct"))
                  for r in rows if r["mode"] == mode]
        if any(p is not None for _, _, p in shares):
            out.append("%s: test-server CPU of the applier, %% of the FDW's own (0/1/3 idx): %s" % (
                mode, ", ".join("%s %s" % (sc, "/".join(
                    "-" if p is None else "%.0f%%" % p for s2, _, p in shares if s2 == sc))
                    for sc in dict.fromkeys(sc for sc, _, _ in shares))))
    for mode in MODES:
        lags = [(r["scenario"], r["indexes"], r.get("lag_max_ms"), r.get("catchup_ms"))
                for r in rows if r["mode"] == mode and r["indexes"] > 0]
        if any(lag is not None or c is not None for _, _, lag, c in lags):
            out.append("%s: applier lag max / catch-up after the statement (ms): %s" % (
                mode, ", ".join("%s %d idx %s/%s" % (sc, n, "-" if lag is None else "%.0f" % lag,
                                                     "-" if c is None else "%.0f" % c)
                                for sc, n, lag, c in lags)))
    return out


def write_csv(path, rows):
    """The table's rows (full precision) as CSV."""
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=CSV_FIELDS, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            rec = {k: ("" if r.get(k) is None else r.get(k)) for k in CSV_FIELDS}
            if r.get("rows_s") is not None:
                rec["rows_s"] = "%.0f" % r["rows_s"]
            for k in ("wall_ms", "wall_min_ms", "wall_max_ms", "rt_per_row", "cpu_ms",
                      "cpu_ms_per_row", "x_insert0", "x_same0", "srv_fdw_ms", "srv_applier_ms",
                      "srv_applier_pct"):
                if r.get(k) is not None:
                    rec[k] = "%.4g" % r[k]
            w.writerow(rec)


def combine(key, expected, sql, ms, notes):
    """One table row from the runs of one statement: median wall, mean CPU, counters."""
    mode, scenario, nidx = key
    r = {"mode": mode, "scenario": scenario, "indexes": nidx, "expected_rows": expected,
         "sql": sql, "executions": len(ms)}
    if not ms:
        return r
    lags = [m["lag_max_ms"] for m in ms if m.get("lag_max_ms") is not None]
    catchups = [m["catchup_ms"] for m in ms if m.get("catchup_ms") is not None]
    r["lag_max_ms"] = max(lags) if lags else None
    r["catchup_ms"] = statistics.median(catchups) if catchups else None
    for name in ("rows", "facts", "entries_w", "entries_d", "modify_rt", "scan_rt",
                 "round_trips"):
        r[name] = ms[0][name]
        if any(m[name] != r[name] for m in ms):
            notes.append("%s %s %d idx: %s differs between runs: %s"
                         % (mode, scenario, nidx, name, [m[name] for m in ms]))
    for name in ("srv_fdw_ms", "srv_applier_ms"):
        vals = [m[name] for m in ms if m.get(name) is not None]
        r[name] = statistics.median(vals) if vals else None
    r["srv_applier_pct"] = (100.0 * r["srv_applier_ms"] / r["srv_fdw_ms"]
                            if r.get("srv_fdw_ms") and r.get("srv_applier_ms") is not None else None)
    walls = [m["wall_ms"] for m in ms]
    cpus = [m["cpu_ms"] for m in ms if m["cpu_ms"] is not None]
    r.update(wall_ms=statistics.median(walls), wall_min_ms=min(walls), wall_max_ms=max(walls),
             cpu_ms=statistics.mean(cpus) if cpus else None)
    if r["rows"] != expected:
        notes.append("%s %s %d idx: %s rows written, expected %d"
                     % (mode, scenario, nidx, r["rows"], expected))
    r["rows_s"] = r["rows"] / (r["wall_ms"] / 1000.0) if r["rows"] else None
    r["rt_per_row"] = per_row(r["round_trips"], r["rows"])
    r["cpu_ms_per_row"] = per_row(r["cpu_ms"], r["rows"])
    return r


def run(cur, mdb, n, k, reps, log, explain=False):
    """Create the tables, run the statements reps times; return (rows, notes, seconds).

    mdb is the (pymongo) MongoDB database of the server "mongo".  Each repetition
    writes to tables and collections of its own (suffix _r2, _r3, ...), and every
    second one runs the modes in reverse order.  After each, its tables are
    checked, and all but the last repetition's are dropped again, so that every
    repetition meets the test server in the same state.
    """
    notes = []
    t_run = time.monotonic()
    load_source(cur, n)
    cur.execute("SELECT pg_backend_pid()")
    cpu = measure.BackendCpu(cur.fetchone()[0])
    if not cpu.ok:
        notes.append("backend CPU not readable from /proc: cpu_ms is blank")
    lag = LagSampler(cur.connection.dsn)
    srv = ServerCpu(mdb)
    if not srv.ok:
        notes.append("no commandCpu (not the test server): srv_fdw_ms and srv_applier_ms are blank")
    if not lag.ok:
        notes.append("no idxtable.sync_status (no applier): lag_ms and catch_ms are blank, "
                     "and the index tables of mode eventual are not verified")
    runs, sqls, bad = {}, {}, []
    n_verified, check_s = 0, 0.0
    for rep in range(1, reps + 1):
        counts, unverified = {}, set()
        for mode in (MODES if rep % 2 else MODES[::-1]):
            for nidx in INDEX_COUNTS:
                name = table_name(mode, nidx) + ("_r%d" % rep if rep > 1 else "")
                try:
                    create_table(cur, mode, nidx, name)
                    cur.execute("SELECT count(*) FROM %s" % name)    # connects, loads the module
                except psycopg2.Error as e:
                    notes.append("%s %d indexes: setup failed: %s"
                                 % (mode, nidx, str(e).strip().splitlines()[0]))
                    log("  NOTE: " + notes[-1])
                    continue
                counts[name] = n
                names = index_names(cur, name)
                if mode == "eventual" and not lag.ok:
                    unverified.add(name)
                lag.settle(names)
                for scenario, sql, expected, shown in statements(name, n, k):
                    key = (mode, scenario, nidx)
                    sqls.setdefault(key, (expected, shown))
                    try:
                        m = measure_write(cur, sql, cpu, lag if names else None, names, name,
                                          srv if srv.ok else None)
                    except psycopg2.Error as e:
                        notes.append("%s %s %d idx failed: %s"
                                     % (mode, scenario, nidx, str(e).strip().splitlines()[0]))
                        log("  NOTE: " + notes[-1])
                        continue
                    runs.setdefault(key, []).append(m)
                    if scenario == "delete":
                        counts[name] -= m["rows"] or 0
                    log("  run %d %-11s %-12s %d idx %6s rows %9.1f ms %6s rtrips%s"
                        % (rep, mode, scenario, nidx, m["rows"], m["wall_ms"], m["round_trips"],
                           "" if m["lag_max_ms"] is None and m["catchup_ms"] is None else
                           "  lag %s ms, caught up after %s ms"
                           % tuple("-" if v is None else "%.0f" % v
                                   for v in (m["lag_max_ms"], m["catchup_ms"]))))
                    if names and lag.ok and m["catchup_ms"] is None:
                        notes.append("%s %s %d idx: the applier did not catch up within %.0f s"
                                     % (mode, scenario, nidx, CATCHUP_TIMEOUT))
                    if explain:
                        log("\n".join("      " + line for line in m["explain"]))
        t_check = time.monotonic()
        n_verified += verify(cur, counts, bad, unverified)
        if rep < reps:
            drop_tables(cur, mdb, counts)
        check_s += time.monotonic() - t_check
    rows = [combine(key, sqls[key][0], sqls[key][1], runs.get(key, []), notes)
            for key in sorted(sqls, key=lambda x: (MODES.index(x[0]), x[2]))]
    add_ratios(rows)
    lag.close()
    notes.extend(bad or ["row counts as expected; verify_index clean on all %d index tables "
                         "(checks took %.0f s)" % (n_verified, check_s)])
    return rows, notes, time.monotonic() - t_run
