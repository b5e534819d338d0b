"""The applier's lag under a steady outside load, measured so that runs compare.

run() expects the table applier.TABLE with its index tables (applier.run or load_only made them)
and an applier following them.  In one run it:

  capacity   CAPACITY_TURNS bursts of `events` outside updates (applier.burst, from update
             number CAPACITY_SEED on), just before the reps: the median events/s is the
             applier's capacity in this run, and the loads are shares of it
  reps       `reps` repetitions; each runs every share in LOADS (their order alternates from rep
             to rep), each share as a warm-up of WARMUP_S (not counted) and then `seconds`
             measured, then waits until the applier has applied everything
  lag        per bulk of the writer (a bulk every applier.TICK_S), from its acknowledgement until
             the counters of every index table in idxtable.sync_status (read every
             applier.POLL_S) include it; p50, p95, p99 and max per rep, and per share the median
             and the range over the reps
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
import statistics
import threading
import time

import applier
import report as table_report

LOADS = (0.5, 0.8)          # shares of the applier's capacity measured in the same run
CAPACITY_TURNS = 3          # bursts that measure the capacity (median)
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
CSV_FIELDS = ["load", "rep", "capacity_s", "target_s", "written_s", "bulks", "p50_ms", "p95_ms",
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


def window(db, cur, writer, names, rate, seconds, cpu):
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
    lo = time.perf_counter()
    cpu.start()
    time.sleep(seconds)
    hi = time.perf_counter()
    machine = cpu.stop()
    stop.set()
    threads[0].join()
    total = acks[-1][1] if acks else 0
    t_limit = time.perf_counter() + max(60.0, total / 50.0)
    while time.perf_counter() < t_limit and not (samples and samples[-1][1] >= total):
        time.sleep(applier.POLL_S)
    stop_polling.set()
    threads[1].join()
    return window_row(rate, acks, samples, lo, hi, machine, failures)


def window_row(rate, acks, samples, lo, hi, machine, failures):
    """The row of one measured window [lo, hi)."""
    lags, missing = applier.bulk_lags(acks, samples, lo, hi)
    before = max([n for t, n in acks if t < lo] or [0])
    written = max([n for t, n in acks if t < hi] or [0]) - before
    r = {"target_s": rate, "written_s": written / (hi - lo), "bulks": len(lags)}
    r.update(machine)
    if lags:
        r.update(percentiles(lags))
    notes = list(failures)
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

def capacity(cur, writer, names, events, srv, log):
    """The applier's events/s in CAPACITY_TURNS bursts (median) and the bursts' median row."""
    turns = [applier.burst(cur, writer, names, events, srv, log) for _ in range(CAPACITY_TURNS)]
    rates = [t["events_s"] for t in turns if t.get("events_s")]
    if len(rates) < len(turns):
        raise applier.Unavailable("a capacity burst was not applied: %s"
                                  % [t.get("note") for t in turns])
    row = applier.median_turn([(t, {"measurement": ""}) for t in turns])[0]
    row["measurement"] = "capacity: " + row["measurement"]
    row["note"] = "turns %s events/s; %s" % (" ".join("%.0f" % x for x in rates), turns[-1]["note"])
    return statistics.median(rates), row


def summarize(share, reps):
    """The row of one share over its reps: medians, and the range of p50/p95/p99."""
    r = {"load": "%.0f%%" % (share * 100), "rep": "median"}
    for key in ("target_s", "written_s", "bulks", "p50_ms", "p95_ms", "p99_ms", "max_ms",
                "srv_pct", "applier_pct", "bench_pct", "others_pct", "loadavg"):
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
    """Capacity, then the reps; returns (capacity row, lag rows: each rep's and each share's)."""
    cur = applier.connect(db).cursor()
    srv = applier.ServerCounts(mdb)
    cap_writer = applier.Writer(mdb[applier.TABLE], n)
    cap_writer.seq = CAPACITY_SEED
    cap, cap_row = capacity(cur, cap_writer, names, events, srv, log)
    log("  capacity: %.0f events/s (median of %d bursts of %d)" % (cap, CAPACITY_TURNS, events))
    cpu = Cpu(cur)
    per_share = {share: [] for share in LOADS}
    rows = []
    for rep in range(reps):
        order = list(enumerate(LOADS))
        for k, share in (order if rep % 2 == 0 else order[::-1]):
            writer = applier.Writer(mdb[applier.TABLE], n)
            writer.seq = SEED + (rep * len(LOADS) + k) * SEED_STRIDE
            r = window(db, cur, writer, names, cap * share, seconds, cpu)
            r.update(load="%.0f%%" % (share * 100), rep=str(rep + 1), capacity_s=cap)
            per_share[share].append(r)
            rows.append(r)
            log("  lag rep %d at %.0f%% (%.0f/s): p50 %s, p99 %s ms; server %.0f%%, applier %.0f%%, "
                "others %.0f%% of a core; load %.2f%s"
                % (rep + 1, share * 100, cap * share, fmt(r.get("p50_ms")), fmt(r.get("p99_ms")),
                   r["srv_pct"], r["applier_pct"], r["others_pct"], r["loadavg"],
                   " " + r["note"] if r["note"] else ""))
    for share in LOADS:
        s = summarize(share, per_share[share])
        s["capacity_s"] = cap
        rows.append(s)
    cur.connection.close()
    return cap_row, rows


def fmt(v):
    return "-" if v is None else "%.0f" % v


def index_names(cur):
    """The names of the index tables of applier.TABLE."""
    cur.execute("SELECT name FROM idxtable.indexes WHERE \"table\" = %s::regclass ORDER BY name",
                (applier.TABLE,))
    return [r[0] for r in cur.fetchall()]


def load_only(db, mdb, n, log):
    """The table and its three index tables, for a run of this section alone; their names."""
    cur = applier.connect(db).cursor()
    applier.check_prerequisites(cur)
    applier.load(cur, mdb, n, log)
    names = applier.create_indexes(cur, 0, len(applier.INDEXES), log)
    applier.wait_ready(cur, names, log)
    cur.connection.close()
    return names


def report(cap_row, rows, reps, seconds):
    """The section's lines for stdout."""
    out = ["", "idxtable_fdw applier lag: %d reps of %.0f s per load (after %.0f s of warm-up), "
           "loads as shares of the applier's capacity measured in the same run: %.0f events/s "
           "(3 index tables, %s)" % (reps, seconds, WARMUP_S, rows[-1]["capacity_s"],
                                     cap_row.get("note", "")),
           "capacity rt/batch %s, applier CPU %s us/event"
           % (fmt1(cap_row.get("rt_batch")), fmt(cap_row.get("cpu_us"))),
           "lag: per bulk, acknowledged -> counted applied in idxtable.sync_status; srv%, appl%, "
           "bench%, others%: CPU as % of one core of the test server, the applier, the rest of the "
           "benchmark and the rest of the machine (" + str(os.cpu_count()) + " cores)", ""]
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
