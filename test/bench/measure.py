"""Measuring one query: wall time, backend CPU, MongoDB examined counters, EXPLAIN lines.

Everything that comes from the FDW's EXPLAIN output is parsed defensively: a
line that is not printed leaves its value as None (a blank cell).
"""
import os
import re
import statistics
import time

_CLK_TCK = os.sysconf("SC_CLK_TCK")

# EXPLAIN (ANALYZE, VERBOSE) properties of a foreign scan that the bench reads
_PROP = re.compile(r"^\s*(Index Table|Index Entries Read|Facts Fetched|Documents Fetched|"
                   r"Round Trips|Access|Collection):\s*(.*?)\s*$")
_SCAN = re.compile(r"Foreign Scan(?: on (\S+))?")      # no "on" above a join or aggregate
_NODE = re.compile(r"^\s*->\s")
_COUNTS = ("Index Entries Read", "Facts Fetched", "Documents Fetched", "Round Trips")


class BackendCpu:
    """CPU time used by a PostgreSQL backend (read() is None if /proc is not readable).

    The source is the on-CPU time of /proc/<pid>/task/*/schedstat (nanoseconds)
    when the kernel provides it, else utime + stime of /proc/<pid>/stat, which
    counts in clock ticks (10 ms): too coarse for a query of a few
    milliseconds, though the mean over several runs still evens it out.
    """

    def __init__(self, pid):
        self.pid = pid
        self.source = None
        for source in ("schedstat", "stat"):
            self.source = source
            if self.read() is not None:
                break
        else:
            self.source = None
        self.ok = self.source is not None

    def read(self):
        """CPU seconds used so far, or None."""
        try:
            if self.source == "schedstat":
                base = "/proc/%d/task" % self.pid
                return sum(int(open("%s/%s/schedstat" % (base, t)).read().split()[0])
                           for t in os.listdir(base)) / 1e9
            if self.source == "stat":
                with open("/proc/%d/stat" % self.pid) as f:
                    text = f.read()
                fields = text[text.rindex(")") + 2:].split()
                # after "pid (comm) ": state is field 3, utime field 14, stime field 15
                return (int(fields[11]) + int(fields[12])) / _CLK_TCK
        except (OSError, ValueError, IndexError):
            return None
        return None


class MongoCounters:
    """serverStatus metrics.queryExecutor, on a connection of its own."""

    def __init__(self, client):
        self.client = client

    def read(self):
        """(keys examined, documents examined) so far, or (None, None)."""
        try:
            qe = self.client.admin.command("serverStatus")["metrics"]["queryExecutor"]
            return int(qe["scanned"]), int(qe["scannedObjects"])
        except Exception:       # noqa: BLE001 -- a counter we cannot read is a blank cell
            return None, None


def parse_explain(lines):
    """The foreign scans of an EXPLAIN (ANALYZE, VERBOSE) text plan.

    Returns {"scans": [{"relation", "index", "access", ...counts}], and each
    of _COUNTS summed over the scans (None when no scan printed it)}.
    """
    scans = []
    current = None
    for line in lines:
        m = _SCAN.search(line)
        if m:
            current = {"relation": m.group(1) or "(upper)"}
            scans.append(current)
            continue
        if current is None:
            continue
        if _NODE.match(line):   # the next plan node: stop attaching properties
            current = None
            continue
        m = _PROP.match(line)
        if m:
            current[m.group(1)] = m.group(2)
    out = {"scans": scans}
    for name in _COUNTS:
        total = None
        for s in scans:
            v = _first_int(s.get(name))
            if v is not None:
                total = (total or 0) + v
        out[name] = total
    return out


def _first_int(text):
    if text is None:
        return None
    m = re.match(r"\d+", text)
    return int(m.group(0)) if m else None


def describe_plan(parsed):
    """How each foreign scan reached MongoDB: index table name and mode, _id lookup or find."""
    parts = []
    for s in parsed["scans"]:
        if "Index Table" in s:
            what = s["Index Table"]
        elif s.get("Access"):
            what = s["Access"]
        else:
            what = "find"
        parts.append(what)
    return " + ".join(parts) if parts else "(no foreign scan)"


def uses_index(parsed):
    """True if some foreign scan of the plan reads an index table."""
    return any("Index Table" in s for s in parsed["scans"])


def measure(cur, sql, cpu, counters, reps=3, slow_s=3.0):
    """Run sql warm + reps times; return the measurements of one query on one path.

    - warm-up once; if that alone takes longer than slow_s it is the only
      measured execution (a multi-second query gains nothing from warming);
    - wall: median over the measured executions; cpu: mean per execution
      (/proc counts in clock ticks, the mean evens out their granularity);
    - keys/docs examined: serverStatus deltas around the first measured execution;
    - rows: rows returned; round trips and the plan from one EXPLAIN ANALYZE.
    """
    runs = []

    def once():
        k0, d0 = counters.read()
        c0 = cpu.read()
        t0 = time.perf_counter()
        cur.execute(sql)
        t1 = time.perf_counter()
        c1 = cpu.read()
        k1, d1 = counters.read()
        runs.append({
            "wall": (t1 - t0) * 1000.0,
            "cpu": None if c0 is None or c1 is None else (c1 - c0) * 1000.0,
            "keys": None if k0 is None or k1 is None else k1 - k0,
            "docs": None if d0 is None or d1 is None else d1 - d0,
            "rows": cur.rowcount,
        })

    once()
    if runs[0]["wall"] / 1000.0 > slow_s:
        measured = runs
    else:
        runs.clear()
        for _ in range(max(1, reps)):
            once()
        measured = runs

    cur.execute("EXPLAIN (ANALYZE, VERBOSE, TIMING OFF, SUMMARY OFF) " + sql)
    plan_lines = [r[0] for r in cur.fetchall()]
    parsed = parse_explain(plan_lines)

    cpus = [r["cpu"] for r in measured if r["cpu"] is not None]
    return {
        "rows": measured[0]["rows"],
        "round_trips": parsed["Round Trips"],
        "entries_read": parsed["Index Entries Read"],
        "facts_fetched": parsed["Facts Fetched"],
        "docs_fetched": parsed["Documents Fetched"],
        "keys_examined": measured[0]["keys"],
        "docs_examined": measured[0]["docs"],
        "cpu_ms": statistics.mean(cpus) if cpus else None,
        "wall_ms": statistics.median(r["wall"] for r in measured),
        "executions": len(measured),
        "plan": describe_plan(parsed),
        "index_used": uses_index(parsed),
        "explain": plan_lines,
    }
