"""The applier's lag under a steady outside load, measured so that runs compare.

run() expects the table applier.TABLE with its index tables (applier.run or load_only made them),
an applier following them, and the same customers in applier.FLOOR_TABLE (no foreign table over it).
In one run it:

  rates      CAPACITY_TURNS turns, each a burst of `events` outside updates of applier.TABLE
             (applier.burst) and the same burst of FLOOR_TABLE followed by the floor
             (applier.Floor: floor.c, or floor.py if it does not build) with the same three index
             collections; the floor's median events/s is the rate the loads are shares of (issue
             29: "80% of the floor's rate"); the applier's median is reported beside it, with the
             median of the turns' floor / applier ratios, each side's CPU per event, the test
             server's CPU per event and the round trips per batch (applier.median_turn)
  reps       `reps` repetitions; each runs every share in LOADS (their order alternates from rep
             to rep), each share as a warm-up of WARMUP_S (not counted) and then `seconds`
             measured, then waits until the applier has applied everything
  lag        per bulk of the writer (a bulk every applier.TICK_S), from its acknowledgement until
             the counters of every index table in idxtable.sync_status (read every
             applier.POLL_S) include it; p50, p95, p99 and max per rep, and per share the median
             and the range over the reps
  applier    per measured window: its CPU per event written, and its round trips per batch that
             brought events (the test server's ring of recent commands, read every RING_READ_S so
             that it does not overflow; blank on mongod)
  writer     deterministic: the writer of rep r, share k, starts at update number
             SEED + (r * len(LOADS) + k) * SEED_STRIDE (applier.Writer: which customer, town,
             last name and e-mail each update writes follow from that number), so every run
             writes the same updates in the same order
  machine    per measured window: the CPU of the test server, of the applier and of everything
             else of this benchmark (PostgreSQL's other processes, this process), as % of one
             core, the CPU the rest of the machine used ("others"), and the load average; a
             window where others used more than BUSY_OTHERS_PCT of one core, or the writer
             wrote less than WRITER_SHORT of its target rate, is flagged: its lag says as much
             about the machine as about the applier
"""
import csv
import os
import shutil
import statistics
import tempfile
import threading
import time

import applier
import report as table_report

LOADS = (0.5, 0.8)          # shares of the floor's rate measured in the same run
CAPACITY_TURNS = 3          # turns (an applier burst, a floor burst) that measure the rates (median)
RING_READ_S = 1.0           # the test server's ring of commands is read this often in a window
WARMUP_S = 3.0              # each share's load runs this long before it is measured
CAPACITY_SEED = 5_000_000   # the first update number of the capacity bursts (applier.py's: 1)
SEED = 10_000_000           # the first update number of the lag writers
SEED_STRIDE = 1_000_000     # update numbers between two measured windows' writers
BUSY_OTHERS_PCT = 50.0      # others' CPU (% of one core) above which a window is flagged
WRITER_SHORT = 0.95         # a writer below this share of its target rate is flagged
CLK = os.sysconf("SC_CLK_TCK")

COLUMNS = [
    ("load", "load", 5, "s"),
    ("rep", "rep", 6, "s"),
    ("target/s", "target_s", 8, ".0f"),
    ("written/s", "written_s", 9, ".0f"),
    ("bulks", "bulks", 6, "d"),
    ("appl_us/ev", "applier_us", 10, ".0f"),
    ("rt/batch", "rt_batch", 8, ".1f"),
    ("ev/batch", "ev_batch", 8, ".0f"),
    ("p50_ms", "p50_ms", 7, ".0f"),
    ("p95_ms", "p95_ms", 7, ".0f"),
    ("p99_ms", "p99_ms", 7, ".0f"),
    ("max_ms", "max_ms", 7, ".0f"),
    ("p50 range", "p50_range", 10, "s"),
    ("p99 range", "p99_range", 11, "s"),
    ("srv%", "srv_pct", 5, ".0f"),
    ("appl%", "applier_pct", 5, ".0f"),
    ("bench%", "bench_pct", 6, ".0f"),
    ("others%", "others_pct", 7, ".0f"),
    ("loadavg", "loadavg", 7, ".2f"),
    ("note", "note", 0, "s"),
]
CSV_FIELDS = ["load", "rep", "floor_s", "capacity_s", "target_s", "written_s", "bulks", "applier_us",
              "rt_batch", "ev_batch", "p50_ms", "p95_ms",
              "p99_ms", "max_ms", "p50_range", "p95_range", "p99_range", "srv_pct", "applier_pct",
              "bench_pct", "others_pct", "loadavg", "busy", "note"]


# ---- CPU of the machine and of its processes ----------------------------------------------------

def proc_cpu_s(pid):
    """CPU seconds (user + system) of process pid so far; 0.0 if it is gone."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLK
    except (OSError, ValueError, IndexError):
        return 0.0


def parents():
    """{pid: parent pid} of every process now."""
    out = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open("/proc/%s/stat" % name) as f:
                    out[int(name)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                pass
    return out


def tree(root, ppids):
    """root and its descendants."""
    pids, todo = set(), [root]
    while todo:
        p = todo.pop()
        if p not in pids:
            pids.add(p)
            todo.extend(c for c, pp in ppids.items() if pp == p)
    return pids


def machine_busy_s():
    """CPU seconds the whole machine spent busy so far (/proc/stat: all but idle and iowait)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:9]]
    return (sum(v) - v[3] - v[4]) / CLK


def env_pid(name):
    """The pid in the environment's pid file (test/env's IDXTABLE_ENV_DIR), or None."""
    d = os.environ.get("IDXTABLE_ENV_DIR", "/tmp/idxtable_fdw_env")
    try:
        with open(os.path.join(d, name)) as f:
            return int(f.readline().split()[0])
    except (OSError, ValueError, IndexError):
        return None


class Cpu:
    """The CPU used between start() and stop(): test server, applier, the rest of this benchmark
    (PostgreSQL's other processes, this process) and the rest of the machine, as % of one core."""

    def __init__(self, cur):
        self.cur = cur

    def groups(self):
        """{group: set of pids} now."""
        ppids = parents()
        self.cur.execute("SELECT pid FROM idxtable.appliers WHERE pid IS NOT NULL")
        appliers = {p for (p,) in self.cur.fetchall()}
        srv = env_pid("mongo.pid")
        pg = env_pid(os.path.join("pg", "data", "postmaster.pid"))
        return {"srv": tree(srv, ppids) if srv else set(), "applier": appliers,
                "bench": ((tree(pg, ppids) if pg else set()) | {os.getpid()}) - appliers}

    def sample(self):
        """(monotonic, machine busy s, {group: cpu s}, {pid: cpu s})."""
        groups = self.groups()
        per_pid = {p: proc_cpu_s(p) for g in groups.values() for p in g}
        return time.monotonic(), machine_busy_s(), groups, per_pid

    def start(self):
        self.first = self.sample()

    def stop(self):
        """{srv_pct, applier_pct, bench_pct, others_pct, loadavg} since start()."""
        t0, busy0, _, cpu0 = self.first
        t1, busy1, groups, cpu1 = self.sample()
        wall = max(t1 - t0, 1e-6)
        out, ours = {}, 0.0
        for g, pids in groups.items():
            used = sum(cpu1[p] - cpu0.get(p, 0.0) for p in pids)
            out[g + "_pct"] = 100.0 * used / wall
            ours += used
        out["others_pct"] = max(0.0, 100.0 * ((busy1 - busy0) - ours) / wall)
        out["loadavg"] = os.getloadavg()[0]
        return out


# ---- one measured window ---------------------------------------------------------------------------

def percentiles(lags):
    """{p50_ms, p95_ms, p99_ms, max_ms} of the lags (ms)."""
    return {"p50_ms": applier.percentile(lags, 0.50), "p95_ms": applier.percentile(lags, 0.95),
            "p99_ms": applier.percentile(lags, 0.99), "max_ms": max(lags)}


class RingReader:
    """The applier's commands, batches and server CPU in a window: the test server's counters
    (applier.ServerCounts) read every RING_READ_S on a thread of its own, so that its ring of
    recent commands does not overflow (nothing on mongod)."""

    def __init__(self, srv):
        self.srv = srv
        self.stop_event = threading.Event()
        self.totals = [0, 0, 0.0]
        self.overflow = False
        self.thread = None

    def start(self):
        if not self.srv.ok:
            return
        self.srv.take()
        self.thread = threading.Thread(target=self.loop)
        self.thread.start()

    def loop(self):
        while not self.stop_event.wait(RING_READ_S):
            self.add()

    def add(self):
        commands, batches, ms = self.srv.take().get(applier.APPLIER_APP, (0, 0, 0.0))
        self.totals[0] += commands
        self.totals[2] += ms
        if batches is None:
            self.overflow = True
        else:
            self.totals[1] += batches

    def stop(self):
        """(commands, batches or None, server cpu ms) since start(); None without the counters."""
        if self.thread is None:
            return None
        self.stop_event.set()
        self.thread.join()
        self.add()
        return self.totals[0], None if self.overflow else self.totals[1], self.totals[2]


def window(db, cur, writer, names, rate, seconds, cpu, srv):
    """A warm-up of WARMUP_S, then `seconds` measured at `rate` updates/s: one row."""
    base = applier.wait_ready(cur, names, lambda *a: None)[0]
    per_tick = max(1, int(round(rate * applier.TICK_S)))
    tick = per_tick / rate
    acks, samples, failures = [], [], []
    stop, stop_polling = threading.Event(), threading.Event()

    def write_loop():
        applier.write_steadily(writer, per_tick, tick, acks, stop, failures)

    def poll_loop():
        cur = applier.connect(db).cursor()
        try:
            while not stop_polling.is_set():
                c = applier.counters(applier.read_status(cur, names), names)
                if c is not None:
                    samples.append((time.perf_counter(), c[0] - base))
                time.sleep(applier.POLL_S)
        except Exception as e:      # noqa: BLE001
            failures.append("poller: " + applier.first_line(e))
        finally:
            cur.connection.close()

    threads = [threading.Thread(target=write_loop), threading.Thread(target=poll_loop)]
    for t in threads:
        t.start()
    time.sleep(WARMUP_S)
    ring = RingReader(srv)
    ring.start()
    lo = time.perf_counter()
    cpu.start()
    time.sleep(seconds)
    hi = time.perf_counter()
    machine = cpu.stop()
    counts = ring.stop()
    stop.set()
    threads[0].join()
    total = acks[-1][1] if acks else 0
    t_limit = time.perf_counter() + max(60.0, total / 50.0)
    while time.perf_counter() < t_limit and not (samples and samples[-1][1] >= total):
        time.sleep(applier.POLL_S)
    stop_polling.set()
    threads[1].join()
    return window_row(rate, acks, samples, lo, hi, machine, counts, failures)


def window_row(rate, acks, samples, lo, hi, machine, counts, failures):
    """The row of one measured window [lo, hi); counts: the applier's (commands, batches, server
    cpu ms) in it, or None."""
    lags, missing = applier.bulk_lags(acks, samples, lo, hi)
    before = max([n for t, n in acks if t < lo] or [0])
    written = max([n for t, n in acks if t < hi] or [0]) - before
    r = {"target_s": rate, "written_s": written / (hi - lo), "bulks": len(lags)}
    r.update(machine)
    if written:
        r["applier_us"] = r["applier_pct"] / 100.0 * (hi - lo) / written * 1e6
    if counts and counts[1]:
        r["rt_batch"] = counts[0] / counts[1]
        r["ev_batch"] = written / counts[1]
    if lags:
        r.update(percentiles(lags))
    notes = list(failures)
    if counts and counts[1] is None:
        notes.append("rt/batch not measured: the test server's ring of commands overflowed")
    if missing:
        notes.append("%d bulks NOT APPLIED" % missing)
    if r["others_pct"] > BUSY_OTHERS_PCT:
        notes.append("BUSY: others used %.0f%% of a core" % r["others_pct"])
    if r["written_s"] < WRITER_SHORT * rate:
        notes.append("BUSY: the writer wrote %.0f of %.0f/s" % (r["written_s"], rate))
    r["busy"] = any(n.startswith("BUSY") for n in notes)
    r["note"] = "; ".join(notes)
    return r


# ---- the run -----------------------------------------------------------------------------------------

def rates(db, mdb, cur, names, n, events, srv, log):
    """CAPACITY_TURNS turns of an applier burst and a floor burst of `events` updates each: the
    applier's and the floor's rows (medians, applier.median_turn: the applier's x_floor is the
    median of the turns' floor / applier ratios)."""
    if mdb[applier.FLOOR_TABLE].estimated_document_count() < n:
        applier.load_floor(mdb, n, log)
    writer = applier.Writer(mdb[applier.TABLE], n)
    floor_writer = applier.Writer(mdb[applier.FLOOR_TABLE], n)
    writer.seq = floor_writer.seq = CAPACITY_SEED
    tmpdir = tempfile.mkdtemp(prefix="idxtable_floor_")
    try:
        binary = applier.build_floor(tmpdir)
        floor = applier.Floor(db, len(names), binary)
        turns = []
        try:
            for _ in range(CAPACITY_TURNS):
                turns.append((applier.burst(cur, writer, names, events, srv, log),
                              applier.floor_burst(floor, floor_writer, len(names), events, srv,
                                                  binary, log)))
        finally:
            floor.close()
    finally:
        shutil.rmtree(tmpdir, ignore_errors=True)
    if not all(a.get("events_s") and f.get("events_s") for a, f in turns):
        raise applier.Unavailable("a burst was not applied: %s"
                                  % [x.get("note") for t in turns for x in t if not x.get("events_s")])
    app_row, floor_row = applier.median_turn(turns)
    for row, side in ((app_row, 0), (floor_row, 1)):
        row["turns"] = " ".join("%.0f" % t[side]["events_s"] for t in turns)
    return app_row, floor_row


def summarize(share, reps):
    """The row of one share over its reps: medians, and the range of p50/p95/p99."""
    r = {"load": "%.0f%%" % (share * 100), "rep": "median"}
    for key in ("target_s", "written_s", "bulks", "applier_us", "rt_batch", "ev_batch", "p50_ms",
                "p95_ms", "p99_ms", "max_ms", "srv_pct", "applier_pct", "bench_pct", "others_pct",
                "loadavg"):
        values = [x[key] for x in reps if x.get(key) is not None]
        r[key] = statistics.median(values) if values else None
    for key in ("p50", "p95", "p99"):
        values = [x[key + "_ms"] for x in reps if x.get(key + "_ms") is not None]
        if values:
            r[key + "_range"] = "%.0f-%.0f" % (min(values), max(values))
    busy = sum(1 for x in reps if x["busy"])
    r["busy"] = busy > 0
    r["note"] = "%d of %d reps BUSY" % (busy, len(reps)) if busy else "no rep busy"
    return r


def run(db, mdb, names, n, events, reps, seconds, log):
    """The rates, then the reps; returns (the applier's and the floor's rate rows, lag rows: each
    rep's and each share's)."""
    cur = applier.connect(db).cursor()
    srv = applier.ServerCounts(mdb)
    rate_rows = rates(db, mdb, cur, names, n, events, srv, log)
    cap, floor = rate_rows[0]["events_s"], rate_rows[1]["events_s"]
    log("  rates: applier %.0f, floor %.0f events/s (medians of %d turns of %d updates); "
        "floor / applier %.2f" % (cap, floor, CAPACITY_TURNS, events, rate_rows[0]["x_floor"]))
    cpu = Cpu(cur)
    per_share = {share: [] for share in LOADS}
    rows = []
    for rep in range(reps):
        order = list(enumerate(LOADS))
        for k, share in (order if rep % 2 == 0 else order[::-1]):
            writer = applier.Writer(mdb[applier.TABLE], n)
            writer.seq = SEED + (rep * len(LOADS) + k) * SEED_STRIDE
            r = window(db, cur, writer, names, floor * share, seconds, cpu, srv)
            r.update(load="%.0f%%" % (share * 100), rep=str(rep + 1), capacity_s=cap, floor_s=floor)
            per_share[share].append(r)
            rows.append(r)
            log("  lag rep %d at %.0f%% (%.0f/s): p50 %s, p99 %s ms; server %.0f%%, applier %.0f%%, "
                "others %.0f%% of a core; %s rt/batch; load %.2f%s"
                % (rep + 1, share * 100, floor * share, fmt(r.get("p50_ms")), fmt(r.get("p99_ms")),
                   r["srv_pct"], r["applier_pct"], r["others_pct"], fmt1(r.get("rt_batch")),
                   r["loadavg"], " " + r["note"] if r["note"] else ""))
    for share in LOADS:
        s = summarize(share, per_share[share])
        s.update(capacity_s=cap, floor_s=floor)
        rows.append(s)
    cur.connection.close()
    return rate_rows, rows


def fmt(v):
    return "-" if v is None else "%.0f" % v


def index_names(cur):
    """The names of the index tables of applier.TABLE."""
    cur.execute("SELECT name FROM idxtable.indexes WHERE \"table\" = %s::regclass ORDER BY name",
                (applier.TABLE,))
    return [r[0] for r in cur.fetchall()]


def load_only(db, mdb, n, log):
    """The table and its three index tables, and the floor's copy of the customers, for a run of
    this section alone; the index tables' names."""
    cur = applier.connect(db).cursor()
    applier.check_prerequisites(cur)
    applier.load(cur, mdb, n, log)
    applier.load_floor(mdb, n, log)
    names = applier.create_indexes(cur, 0, len(applier.INDEXES), log)
    applier.wait_ready(cur, names, log)
    cur.connection.close()
    return names


RATE_COLUMNS = [c for c in applier.COLUMNS
                if c[1] in ("measurement", "indexes", "events", "seconds", "events_s", "entries_s",
                            "x_floor", "cpu_us", "srv_us", "rt_batch")]
RATE_COLUMNS.append(("turns' events/s", "turns", 0, "s"))


def report(rate_rows, rows, reps, seconds):
    """The section's lines for stdout."""
    app, floor = rate_rows
    out = ["", "idxtable_fdw applier lag: %d reps of %.0f s per load (after %.0f s of warm-up), "
           "loads as shares of the floor's rate measured in the same run: %.0f events/s (the "
           "applier's: %.0f events/s; floor / applier %.2f, the median of the turns' ratios)"
           % (reps, seconds, WARMUP_S, floor["events_s"], app["events_s"], app["x_floor"]), ""]
    out.extend(table_report.table(rate_rows, RATE_COLUMNS, min_width=0))
    out.extend(["", "lag: per bulk, acknowledged -> counted applied in idxtable.sync_status; "
                "appl_us/ev: the applier's CPU per event written; rt/batch, ev/batch: the "
                "applier's commands and the events per batch that brought events; srv%, appl%, "
                "bench%, others%: CPU as % of one core of the test server, the applier, the rest of "
                "the benchmark and the rest of the machine (" + str(os.cpu_count()) + " cores)", ""])
    out.extend(table_report.table(rows, COLUMNS, min_width=0))
    return out


def fmt1(v):
    return "-" if v is None else "%.1f" % v


def write_csv(path, rows):
    """Every rep's row and each share's summary."""
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=CSV_FIELDS, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow({k: ("%.4g" % r[k]) if isinstance(r.get(k), float) else
                        ("" if r.get(k) is None else r[k]) for k in CSV_FIELDS})
