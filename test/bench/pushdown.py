"""The pushdown table: the queries of issue 12's "Why" section, pushed and not pushed,
and the CPU of a full scan against a raw libmongoc reader of the same find.

Each query runs with idxtable.enable_order_pushdown and
idxtable.enable_aggregate_pushdown both on (path "on") and both off ("off");
index routing stays on.  A build that does not push a query down runs the same
plan both ways: the table then shows no gain, not an error.

The scan CPU section (scan_ratio) builds test/bench/rawscan.c with the C
compiler and libmongoc's pkg-config flags, runs the find the FDW runs for
SELECT * FROM customers (its projection from EXPLAIN VERBOSE, its batch size
and collation), and divides the backend's CPU per row by the raw reader's:
"scan only" is EXPLAIN ANALYZE (rows go nowhere), "rows to the client" a
plain SELECT whose rows psycopg2 receives; a heap table with the same rows
shows what PostgreSQL itself spends on each.  Rows to the client are also
divided by the raw reader's rows mode, which turns each document into a row
of text for a client (rawscan.c), as PostgreSQL must.
"""
import json
import os
import re
import shutil
import statistics
import subprocess
import tempfile

import measure
import report
import scenarios

HERE = os.path.dirname(os.path.abspath(__file__))
GUCS = ("idxtable.enable_order_pushdown", "idxtable.enable_aggregate_pushdown")
PATHS = (("on", "on"), ("off", "off"))
FDW_DEFAULT_FETCH_SIZE = 1000       # IDX_DEFAULT_FETCH_SIZE in fdw/core/option.c
SCAN_SQL = "SELECT * FROM customers"
RAW_RUNS, RAW_RUNS_QUICK = 9, 7     # turns of the scan CPU ratio (a run of each side)
RATIO_TARGET = 1.3                  # issue 12, section 5

COLUMNS = [
    ("scenario", "scenario", 24, "s"),
    ("push", "path", 4, "s"),
    ("rows", "rows", 6, "d"),
    ("rtrips", "round_trips", 6, "d"),
    ("entries", "entries_read", 7, "d"),
    ("facts", "facts_fetched", 7, "d"),
    ("fetched", "docs_fetched", 7, "d"),
    ("keys_ex", "keys_examined", 8, "d"),
    ("docs_ex", "docs_examined", 8, "d"),
    ("cpu_ms", "cpu_ms", 8, ".2f"),
    ("wall_ms", "wall_ms", 9, ".1f"),
    ("runs", "executions", 4, "d"),
    ("docs×", "r_docs", 7, ".3g"),
    ("keys×", "r_keys", 7, ".3g"),
    ("rt×", "r_rt", 6, ".3g"),
    ("cpu×", "r_cpu", 7, ".3g"),
    ("plan", "plan", 0, "s"),
]
RATIOS = report.RATIOS + (("keys_examined", "r_keys"),)
CSV_FIELDS = ["size", "scenario", "path", "rows", "round_trips", "entries_read",
              "facts_fetched", "docs_fetched", "keys_examined", "docs_examined",
              "cpu_ms", "wall_ms", "executions", "r_docs", "r_keys", "r_rt", "r_cpu",
              "r_wall", "plan", "sql"]


def build(d):
    """The Why-section queries for Dataset d (loaded, so its value counts are known)."""
    t_route = d.tail_town_at(max(10, d.size // 1000))         # ~0.1%: routed both ways
    lit = scenarios.lit
    S = scenarios.Scenario
    return [
        S("ORDER BY _id LIMIT 10", "SELECT * FROM customers ORDER BY customer_id LIMIT 10",
          "10 rows of %d; pushed: a sorted find with limit 10" % d.size),
        S("LIMIT 5 OFFSET 10", "SELECT * FROM customers LIMIT 5 OFFSET 10",
          "pushed: a find with skip 10, limit 5"),
        S("count(*)", "SELECT count(*) FROM customers",
          "pushed: an aggregate $group (or count)"),
        S("GROUP BY town", "SELECT town, count(*) FROM customers GROUP BY town",
          "%d groups; pushed: an aggregate $group" % len(d.town_counts)),
        S("ORDER BY last_name idx", "SELECT * FROM customers WHERE town = 'Redmond' "
          "ORDER BY last_name LIMIT 10",
          "{town,last_name} index, default collation; %d rows in Redmond; pushed: ~10 "
          "entries and facts" % d.town_counts["Redmond"]),
        S("routed count(*)", "SELECT count(*) FROM customers WHERE town = %s" % lit(t_route),
          "%s = %d rows; pushed: a count of {town} entries, no documents"
          % (t_route, d.town_counts[t_route])),
        S("count(DISTINCT town)", "SELECT count(DISTINCT town) FROM customers",
          "pushed: $group by town, then a $group count"),
        S("GROUP BY count(DISTINCT)", "SELECT town, count(DISTINCT balance), count(*) FROM customers "
          "GROUP BY town", "pushed: $group by town and balance, then by town"),
        S("GROUP BY ORDER count LIMIT", "SELECT town, count(*) FROM customers GROUP BY town "
          "ORDER BY count(*) DESC LIMIT 5", "pushed: $group, $sort, $limit 5"),
        S("GROUP BY ORDER key LIMIT", "SELECT balance, count(*) FROM customers GROUP BY balance "
          "ORDER BY balance LIMIT 3", "pushed: $group, $sort (NULLs last), $limit 3"),
        S("ORDER BY name idx LIMIT", "SELECT * FROM customers ORDER BY last_name LIMIT 10",
          "{last_name} index, C.UTF-8 (byte order); pushed: ~10 entries and facts"),
        S("ORDER BY name,_id idx", "SELECT * FROM customers ORDER BY last_name, customer_id LIMIT 10",
          "{last_name} index; each name's entries sorted by _id, 10 facts fetched"),
    ] + null_key_scenarios(d) + text_id_scenarios(d)


def null_key_scenarios(d):
    """ORDER BY a nullable key LIMIT 10 through the {age} index table (5% of
    the ages NULL) in every NULL order, and IS NULL (OR) on it: issue 29."""
    S = scenarios.Scenario
    nulls = "%d NULL ages" % d.null_ages
    result = [S("ORDER BY age%s LIMIT 10" % spec, "SELECT * FROM customers ORDER BY age%s LIMIT 10" % spec,
                "{age} index; %s, %s; pushed: ~10 entries and facts" % (nulls, where))
              for spec, where in (("", "read last"), (" NULLS FIRST", "read first, MongoDB's place"),
                                  (" DESC", "read first"), (" DESC NULLS LAST", "read last, MongoDB's place"))]
    return result + [
        S("age IS NULL OR age > 98 LIMIT", "SELECT * FROM customers WHERE age IS NULL OR age > 98 "
          "ORDER BY age DESC LIMIT 10", "{age} index; NULL entries, then > 98"),
        S("age IS NULL", "SELECT * FROM customers WHERE age IS NULL",
          "%s; the {age} index where cheaper than a scan" % nulls),
        S("age IS NULL OR age > 98", "SELECT * FROM customers WHERE age IS NULL OR age > 98",
          "{age} index (two lookups) where cheaper than a scan"),
    ]


def text_id_scenarios(d):
    """ORDER BY a text _id (COLLATE "C") on collections of string, ObjectId and mixed _ids."""
    out = []
    for kind in ("str", "oid", "mixed"):
        table = "ids_" + kind
        texts = d.id_texts.get(kind, [])
        last = texts[len(texts) // 2] if texts else ""
        S = scenarios.Scenario
        out += [
            S("%s: _id L10" % kind, "SELECT * FROM %s ORDER BY _id LIMIT 10" % table,
              "%d documents, _id text COLLATE \"C\"" % len(texts)),
            S("%s: _id DESC L5 O10" % kind,
              "SELECT * FROM %s ORDER BY _id DESC LIMIT 5 OFFSET 10" % table, ""),
            S("%s: Seattle _id L7" % kind,
              "SELECT * FROM %s WHERE town = 'Seattle' ORDER BY _id LIMIT 7" % table,
              "~10%% in Seattle; {town} index"),
            S("%s: _id>last L100" % kind,
              "SELECT * FROM %s WHERE _id > %s ORDER BY _id LIMIT 100" % (table, scenarios.lit(last)),
              "keyset page from the middle _id"),
        ]
    return out


def _set_pushdown(cur, setting):
    for guc in GUCS:
        cur.execute("SET %s = %s" % (guc, setting))


def _gucs_defined(cur):
    cur.execute("SELECT name FROM pg_settings WHERE name = ANY(%s)", (list(GUCS),))
    return {r[0] for r in cur.fetchall()}


_PLAN_NODE = re.compile(r"^\s*(?:->\s*)?([A-Z][A-Za-z ]*?)(?: on \S+(?: \S+)?)?\s+\(cost=")
_PUSHED = (("Pipeline", "aggregate"), ("Sort", "sort"), ("Limit", "limit"),
           ("Skip", "skip"), ("Offset", "skip"), ("Count", "count"))


def describe(lines):
    """The plan's nodes top-down ("Limit > Foreign Scan[find]"), a foreign scan's
    brackets naming its index table or access and what EXPLAIN VERBOSE says it
    pushed (a pipeline, a sort, a limit, a skip, a count)."""
    parsed = measure.parse_explain(lines)
    scans = iter(measure.describe_plan({"scans": [s]}) for s in parsed["scans"])
    nodes = []
    current = None
    for line in lines:
        m = _PLAN_NODE.match(line)
        if m:
            name = m.group(1).strip()
            current = None
            if name.startswith("Foreign Scan"):
                current = [next(scans, "find")]
                nodes.append(("Foreign Scan", current))
            else:
                nodes.append((name, None))
            continue
        if current is not None:
            key = line.strip().split(":", 1)[0]
            if key.startswith("MongoDB ") or key.startswith("Remote "):
                for word, what in _PUSHED:
                    if word in key and what not in current:
                        current.append(what)
    for _, extra in nodes:
        if extra and extra[0] == "find" and ("aggregate" in extra or "count" in extra):
            del extra[0]
    return " > ".join(n if extra is None else "%s[%s]" % (n, ",".join(extra))
                      for n, extra in nodes)


def run(cur, d, cpu, counters, reps, log, explain=False, only=None):
    """Measure every scenario (whose name contains only, if given) on both paths;
    returns (rows, scenarios, notes)."""
    notes = []
    defined = _gucs_defined(cur)
    missing = [g for g in GUCS if g not in defined]
    if missing:
        notes.append("not defined by this build: %s (SET makes placeholders; both paths "
                     "are the same plan)" % ", ".join(missing))
        log("  NOTE: " + notes[-1])
    scen = [s for s in build(d) if not only or only.lower() in s.key.lower()]
    rows = []
    for i, s in enumerate(scen, 1):
        for path, setting in PATHS:
            _set_pushdown(cur, setting)
            m = measure.measure(cur, s.sql, cpu, counters, reps=reps, slow_s=3.0)
            m.update(scenario=s.key, path=path, plan=describe(m["explain"]))
            rows.append(m)
            log("  [%d/%d] %-24s %-3s %6s rows %9.2f ms cpu  %s"
                % (i, len(scen), s.key, path, m["rows"], m["cpu_ms"] or 0, m["plan"]))
            if explain:
                log("\n".join("      " + line for line in m["explain"]))
    for guc in GUCS:
        cur.execute("RESET %s" % guc)
    report.add_ratios(rows, RATIOS, num="on", den="off")
    differ = [s.key for s in scen
              if len({r["rows"] for r in rows if r["scenario"] == s.key}) > 1]
    if differ:
        notes.append("ROWS DIFFER between on and off: " + ", ".join(differ))
    return rows, scen, notes


# ---------------------------------------------------------------------- scan CPU ratio

class Unavailable(Exception):
    """The raw reader cannot be built or run here."""


def build_rawscan(tmpdir):
    """Compile rawscan.c; returns the binary's path."""
    cc = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
    if cc is None:
        raise Unavailable("no C compiler")
    try:
        flags = subprocess.check_output(["pkg-config", "--cflags", "--libs", "libmongoc-1.0"],
                                        text=True).split()
    except (OSError, subprocess.CalledProcessError) as e:
        raise Unavailable("pkg-config libmongoc-1.0 failed: %s" % e)
    binary = os.path.join(tmpdir, "rawscan")
    out = subprocess.run([cc, "-O2", "-Wall", "-o", binary, os.path.join(HERE, "rawscan.c")]
                         + flags, capture_output=True, text=True)
    if out.returncode != 0:
        raise Unavailable("rawscan.c did not compile: " + out.stderr.strip()[-300:])
    return binary


def find_options(cur):
    """The options of the FDW's find for SCAN_SQL, as JSON for rawscan."""
    cur.execute("EXPLAIN (VERBOSE) " + SCAN_SQL)
    proj = None
    for (line,) in cur.fetchall():
        m = re.match(r"\s*MongoDB Projection:\s*(\{.*\})\s*$", line)
        if m:
            proj = json.loads(m.group(1))
    if proj is None:
        raise Unavailable("EXPLAIN VERBOSE shows no MongoDB Projection")
    cur.execute("SELECT coalesce((SELECT split_part(o, '=', 2) FROM pg_foreign_table t, "
                "unnest(t.ftoptions) o WHERE t.ftrelid = 'customers'::regclass "
                "AND o LIKE 'fetch\\_size=%%'), (SELECT split_part(o, '=', 2) "
                "FROM pg_foreign_table t JOIN pg_foreign_server s ON s.oid = t.ftserver, "
                "unnest(s.srvoptions) o WHERE t.ftrelid = 'customers'::regclass "
                "AND o LIKE 'fetch\\_size=%%'))")
    fetch = cur.fetchone()[0]
    return json.dumps({"projection": proj,
                       "batchSize": int(fetch) if fetch else FDW_DEFAULT_FETCH_SIZE,
                       "collation": {"locale": "simple"}})


class RawReader:
    """rawscan in its interactive mode: one measured read per call of run()."""

    def __init__(self, binary, database, opts):
        self.proc = subprocess.Popen([binary, os.environ["MONGO_URI"], database, "customers",
                                      opts, "0"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if self.proc.stdout.readline().strip() != "ready":
            self.proc.stdin.close()
            raise Unavailable("rawscan failed: " + self.proc.stderr.read().strip()[-300:])

    def run(self, rows=False):
        """(rows, cpu_ms) of one read; with rows, in rawscan's rows mode (each
        document also sent as a row in text, as to a client)."""
        self.proc.stdin.write("rows\n" if rows else "\n")
        self.proc.stdin.flush()
        f = self.proc.stdout.readline().split()
        if len(f) < 4:
            raise Unavailable("rawscan failed: " + self.proc.stderr.read().strip()[-300:])
        return int(f[1]), float(f[3])

    def close(self):
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


def backend_run(cur, cpu, sql):
    """(rows, cpu_ms) of one execution of sql."""
    c0 = cpu.read()
    cur.execute(sql)
    n = len(cur.fetchall())
    c1 = cpu.read()
    return n, (c1 - c0) * 1000.0


def scan_ratio(cur, cpu, database, rows_expected, runs, log):
    """Backend CPU per row of a full scan ÷ the raw reader's; a list of result dicts.

    The sides take turns run by run (raw, scan only, to the client, and the
    heap copy's two), and each ratio is the median of the ratios of the runs
    of one turn, so that a load that comes and goes on the machine slows the
    raw reader and the backend alike; the milliseconds are medians too.
    For scale, the same rows from a heap table (a temporary copy): what
    PostgreSQL itself spends on a scan and on sending the rows to the client,
    which no FDW can save; "to the client less PostgreSQL's sending" takes
    the heap's send cost (its client run less its scan) off the foreign
    table's client run.  The raw reader also runs in its rows mode (each
    document turned into a DataRow of text values, as PostgreSQL sends a
    row; see rawscan.c), the fair floor of rows sent to a client: the last
    line divides the client run by that (the other lines by the plain
    read).
    """
    if not cpu.ok:
        raise Unavailable("backend CPU not readable from /proc")
    tmpdir = tempfile.mkdtemp(prefix="idxbench-raw-")
    explain = "EXPLAIN (ANALYZE, TIMING OFF, SUMMARY OFF) "
    heap_sql = SCAN_SQL.replace("customers", "bench_heap_copy")
    sqls = (("scan", explain + SCAN_SQL), ("client", SCAN_SQL),
            ("heap scan", explain + heap_sql), ("heap client", heap_sql))
    raw = None
    try:
        binary = build_rawscan(tmpdir)
        opts = find_options(cur)
        log("  raw reader: find %s.customers {} with %s" % (database, opts))
        cur.execute("CREATE TEMP TABLE bench_heap_copy AS " + SCAN_SQL)
        raw = RawReader(binary, database, opts)
        for _, sql in sqls:                     # warm-up
            backend_run(cur, cpu, sql)
        turns = []
        for _ in range(runs):
            turn = {"raw": raw.run(), "raw rows": raw.run(rows=True)}
            for key, sql in sqls:
                turn[key] = backend_run(cur, cpu, sql)
            turns.append(turn)
        cur.execute("DROP TABLE bench_heap_copy")
    finally:
        if raw is not None:
            raw.close()
        shutil.rmtree(tmpdir, ignore_errors=True)
    bad = [t[k][0] for t in turns for k in ("raw", "raw rows", "client", "heap client")
           if t[k][0] != rows_expected]
    if bad:
        raise Unavailable("row counts differ from %d: %s" % (rows_expected, sorted(set(bad))))
    for t in turns:
        t["less send"] = (None, t["client"][1] - max(0.0, t["heap client"][1] - t["heap scan"][1]))
    out = []
    for what, key, den in (("raw libmongoc", "raw", "raw"), ("scan only", "scan", "raw"),
                           ("rows to the client", "client", "raw"),
                           ("heap: scan only", "heap scan", "raw"),
                           ("heap: to the client", "heap client", "raw"),
                           ("to the client less PostgreSQL's sending", "less send", "raw"),
                           ("raw libmongoc, rows as text", "raw rows", "raw rows"),
                           ("rows to the client ÷ raw rows as text", "client", "raw rows")):
        ms = statistics.median(t[key][1] for t in turns)
        ratios = [t[key][1] / t[den][1] for t in turns if t[den][1] > 0]
        out.append({"what": what, "cpu_ms": ms, "runs": len(turns),
                    "ratio": statistics.median(ratios) if ratios else None,
                    "ratio_min": min(ratios) if ratios else None,
                    "ratio_max": max(ratios) if ratios else None,
                    "us_per_row": ms * 1000.0 / rows_expected})
    return out


def print_report(size, rows, scen, ratio, notes, reps):
    """The pushdown table, its queries, and the scan CPU ratio, on stdout."""
    print()
    print("idxtable_fdw pushdown: %d customers; each query with %s on and off "
          "(cpu: mean of %d runs; keys_ex, docs_ex: serverStatus over one run; ×: on / off)"
          % (size, " and ".join(GUCS), reps))
    print()
    for line in report.table(rows, COLUMNS, min_width=0):
        print(line)
    print()
    for s in scen:
        print("  %-24s %s   -- %s" % (s.key, s.sql, s.note))
    print()
    print("scan CPU per row, %s (%d rows), against a raw libmongoc reader of the same find "
          "(target: at most %.1f×; ×: ÷ raw libmongoc, the last line ÷ its rows mode):"
          % (SCAN_SQL, size, RATIO_TARGET))
    if isinstance(ratio, str):
        print("  not measured: " + ratio)
    else:
        print("  %-40s %8s     %10s  %6s  %s" % ("", "cpu", "cpu/row", "×", "× of single turns"))
        for r in ratio:
            print("  %-40s %8.2f ms  %6.3f µs/row  %5.2f×  %.2f–%.2f (median of %d turns)"
                  % (r["what"], r["cpu_ms"], r["us_per_row"], r["ratio"], r["ratio_min"],
                     r["ratio_max"], r["runs"]))
    for n in notes:
        print("  " + n)


def write_csv(path, size, rows, scen, ratio):
    """The table's rows, then the ratio lines as scenario "scan ratio: ..."."""
    sql = {s.key: s.sql for s in scen}
    extra = []
    if not isinstance(ratio, str):
        for r in ratio:
            key = "scan ratio: " + r["what"]
            extra.append({"scenario": key, "path": "", "rows": size, "cpu_ms": r["cpu_ms"],
                          "executions": r["runs"], "r_cpu": r["ratio"], "plan": ""})
            heap = SCAN_SQL + " (a heap copy)"
            sql[key] = {"raw libmongoc": "test/bench/rawscan.c: the find of " + SCAN_SQL,
                        "scan only": "EXPLAIN (ANALYZE) " + SCAN_SQL,
                        "heap: scan only": "EXPLAIN (ANALYZE) " + heap,
                        "heap: to the client": heap,
                        "to the client less PostgreSQL's sending":
                        SCAN_SQL + " less (heap: to the client - heap: scan only)"
                        }.get(r["what"], SCAN_SQL)
    report.write_csv(path, size, rows + extra, sql, fields=CSV_FIELDS)
