#!/usr/bin/python3
"""idxtable_fdw benchmark: index-table routing against the plain MongoDB find.

    test/bench/bench.py [--sizes 100000,1000000] [--quick] [--reps N] [--only TEXT]
                        [--pushdown-only | --no-pushdown]
                        [--writes-only | --no-writes] [--write-rows N]
                        [--applier-only | --no-applier] [--applier-events N]
                        [--applier-lag-only] [--lag-reps N] [--lag-seconds S]
                        [--planning-only | --no-planning]

Needs the environment of `eval "$(test/env start)"` (test/bench/run provides
it).  For each size: loads customers and movies into MongoDB database
idxtable_bench (dropped first), creates PostgreSQL database idxtable_bench
(dropped first) with the foreign tables, the local table orders and the
index tables, ANALYZEs, then runs every scenario with index routing on
("index") and off ("plain").  Prints a table and a summary per size and
writes test/bench/results-<size>.csv.  Then, in the same database, the
pushdown table (pushdown.py: issue 12's queries with the pushdown GUCs on and
off, and the scan CPU against a raw libmongoc reader built from rawscan.c):
test/bench/results-pushdown-<size>.csv; --pushdown-only runs just that (with
the index tables it needs) and no write or applier section.  Then the write
scenarios (writes.py) in
database idxtable_bench_writes (dropped first): test/bench/results-writes.csv.
Then the applier (applier.py: outside writes with pymongo, the change-stream
applier's rate and lag, routed reads with index_consistency current and any) in
database idxtable_bench_applier (dropped first): test/bench/results-applier.csv;
then its lag under a steady load at 50% and 80% of the floor's rate measured in the
same run, repeated (lag.py): test/bench/results-applier-lag.csv
(--applier-lag-only: that alone, on a table of its own).
Then the planning section (planning.py): the planning time of a point query on a
table with 20 index tables against one without, in database
idxtable_bench_planning (dropped first).  --writes-only, --applier-only and
--planning-only select sections (several: those).
"""
import argparse
import os
import random
import sys
import time

import psycopg2
import psycopg2.extras

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "fixtures"))
import applier  # noqa: E402
import data  # noqa: E402
import lag  # noqa: E402
import measure  # noqa: E402
import mongo_client  # noqa: E402
import pg_fixture  # noqa: E402  (test/fixtures)
import pushdown  # noqa: E402
import planning  # noqa: E402
import report  # noqa: E402
import scenarios  # noqa: E402
import sustained  # noqa: E402
import writes  # noqa: E402

DB = "idxtable_bench"
WRITE_DB = "idxtable_bench_writes"
WRITE_ROWS, WRITE_ROWS_QUICK = 10000, 2000     # rows per bulk insert
WRITE_KEYED = 1000                              # rows per UPDATE / DELETE (at most rows/4)
SUSTAINED_TURNS, SUSTAINED_TURNS_QUICK = 30, 24  # turns of sustained writes, of
SUSTAINED_ROWS, SUSTAINED_ROWS_QUICK = 500, 200   # new customers each
APPLIER_DB = "idxtable_bench_applier"
PLANNING_DB = "idxtable_bench_planning"
# (customers, burst events, seconds of each half of the steady load, idle query pairs)
APPLIER_RUN, APPLIER_RUN_QUICK = (20000, 10000, 20.0, 100), (5000, 2000, 5.0, 30)
LAG_REPS, LAG_CAPACITY_EVENTS = 3, 2000   # the lag's reps (lag.py), its bursts (applier, floor)
GUC = "idxtable.enable_index_routing"
# 1,000,000 is supported, but not the default: on the Python test server its
# setup takes ~9 minutes (measured: loading 23 s, the six index builds 45-123 s
# each, ANALYZE 10 s) and its scenarios ~4 more.
DEFAULT_SIZES = "100000"
BIG_NOTE = ("note: default size 100,000 only; --sizes 100000,1000000 also runs 1,000,000 "
            "customers (~15 minutes on the test server: loading takes ~25 s, building the "
            "index tables ~9 minutes)")
QUICK_SIZE = 20000
SLOW_LOAD_S = 180.0
SLOW_QUERY_S = 3.0

INDEXES = [
    ("customers", "{town,last_name}", None, False),
    ("customers", "{lower(email)}", None, True),
    ("customers", "{email}", None, False),
    ("customers", "{town}", "{first_name,last_name}", False),
    ("customers", "{last_name}", None, False),
    ("customers", "{age}", None, False),
    ("movies", "{actors}", None, False),
    ("ids_str", "{town}", None, False),
    ("ids_oid", "{town}", None, False),
    ("ids_mixed", "{town}", None, False),
]
# the index tables the pushdown queries use (all that --pushdown-only builds)
PUSHDOWN_INDEXES = {("customers", "{town,last_name}"), ("customers", "{town}"), ("customers", "{age}"),
                    ("customers", "{last_name}"), ("ids_str", "{town}"), ("ids_oid", "{town}"),
                    ("ids_mixed", "{town}")}


def log(msg=""):
    print(msg, file=sys.stderr, flush=True)


def connect(dbname):
    return pg_fixture.connect(dbname)


def recreate_database(create=True, db=DB):
    pg_fixture.recreate_database(db, create=create)


def setup_server(db):
    """A fresh database db with the extension, server mongo (MongoDB database db), user mapping."""
    try:
        return pg_fixture.setup_database(db)
    except RuntimeError as e:
        sys.exit("bench.py: %s" % e)


def setup_postgres(d):
    """Database, extension, server, user mapping, foreign tables, orders."""
    conn = setup_server(DB)
    cur = conn.cursor()
    pg_fixture.create_foreign_table(conn, "customers", "customer_id int OPTIONS (field '_id'), "
                                    "town text, last_name text, first_name text, email text, balance int, "
                                    "age int")
    pg_fixture.create_foreign_table(conn, "movies", "movie_id int OPTIONS (field '_id'), "
                                    "title text, year int, actors text[]")
    for kind in ("str", "oid", "mixed"):
        # text that compares as MongoDB does (README: "Text that compares as MongoDB does")
        pg_fixture.create_foreign_table(conn, "ids_" + kind, '_id text COLLATE "C", '
                                        'town text COLLATE "C", n int')
    cur.execute("CREATE TABLE orders (order_id int PRIMARY KEY, email text)")
    rng = random.Random(d.seed + 3)
    ids = sorted(d.emails)
    psycopg2.extras.execute_values(
        cur, "INSERT INTO orders VALUES %s",
        [(i, d.emails[rng.choice(ids)]) for i in range(1, 1001)])
    return conn


def have_create_index(cur):
    cur.execute("SELECT count(*) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace "
                "WHERE n.nspname = 'idxtable' AND p.proname = 'create_index'")
    return cur.fetchone()[0] > 0


def create_indexes(cur, notes, keys_only=None):
    """The benchmark's index tables (of customers with keys in keys_only, if given);
    returns {description: seconds}."""
    times = {}
    if not have_create_index(cur):
        notes.append("idxtable.create_index() does not exist in this build: no index tables "
                     "were created, both paths are the plain scan")
        log("  NOTE: " + notes[-1])
        return times
    for table, keys, include, unique in INDEXES:
        if keys_only is not None and (table, keys) not in keys_only:
            continue
        desc = "%s %s%s%s" % (table, keys, " INCLUDE " + include if include else "",
                              " UNIQUE" if unique else "")
        args, params = ["%s::regclass", "%s::text[]"], [table, keys]
        if include:
            args.append("include => %s::text[]")
            params.append(include)
        if unique:
            args.append("is_unique => true")
        t0 = time.monotonic()
        try:
            cur.execute("SELECT idxtable.create_index(%s)" % ", ".join(args), params)
            name = cur.fetchone()[0]
        except psycopg2.Error as e:
            notes.append("create_index %s failed: %s" % (desc, str(e).strip().splitlines()[0]))
            log("  NOTE: " + notes[-1])
            continue
        times[desc] = time.monotonic() - t0
        log("  index %-50s %-36s built in %.1f s" % (desc, name, times[desc]))
    return times


def guc_exists(cur):
    cur.execute("SELECT count(*) FROM customers WHERE customer_id = 1")   # loads the module
    cur.execute("SELECT count(*) FROM pg_settings WHERE name = %s", (GUC,))
    return cur.fetchone()[0] > 0


def run_size(size, args, mongo):
    """Load, set up and measure one data size; print and write its results."""
    notes = []
    log("== %d customers, %d movies ==" % (size, max(1, size // 10)))
    d = data.Dataset(size)
    recreate_database(create=False)     # its index catalog goes with it
    mongo.drop_database(DB)
    load_times = data.load(mongo_client.database(mongo, DB), d, log=log)

    conn = setup_postgres(d)
    cur = conn.cursor()
    index_times = create_indexes(cur, notes, PUSHDOWN_INDEXES if args.pushdown_only else None)
    setup_s = sum(load_times.values()) + sum(index_times.values())
    if setup_s > SLOW_LOAD_S:
        notes.append("loading and index builds took %.0f s (> %.0f s)" % (setup_s, SLOW_LOAD_S))
    t0 = time.monotonic()
    cur.execute("ANALYZE customers, movies, orders, ids_str, ids_oid, ids_mixed")
    analyze_s = time.monotonic() - t0
    log("  ANALYZE in %.1f s" % analyze_s)

    has_guc = guc_exists(cur)
    if not has_guc:
        notes.append("GUC %s is not defined by this build: SET only creates a placeholder, "
                     "both paths are the same plan" % GUC)
        log("  NOTE: " + notes[-1])
    try:
        cur.execute("SELECT * FROM idxtable.indexes")
        cols = [c[0] for c in cur.description]
        for row in cur.fetchall():
            log("  idxtable.indexes: " + ", ".join("%s=%s" % kv for kv in zip(cols, row)))
    except psycopg2.Error:
        pass

    cur.execute("SELECT pg_backend_pid()")
    cpu = measure.BackendCpu(cur.fetchone()[0])
    if not cpu.ok:
        notes.append("backend CPU not readable from /proc: cpu_ms is blank")
    counters = measure.MongoCounters(mongo)
    if args.pushdown_only:
        run_pushdown(cur, d, cpu, counters, args, size)
        conn.close()
        return

    scen = scenarios.build(d)
    if args.only:
        scen = [s for s in scen if args.only.lower() in s.key.lower()]
    rows = []
    t_run = time.monotonic()
    for i, s in enumerate(scen, 1):
        for path, setting in (("index", "on"), ("plain", "off")):
            cur.execute("SET %s = %s" % (GUC, setting))
            m = measure.measure(cur, s.sql, cpu, counters, reps=args.reps or 3,
                                slow_s=SLOW_QUERY_S)
            m.update(scenario=s.key, path=path)
            rows.append(m)
            log("  [%2d/%d] %-22s %-5s %8s rows %10.1f ms  %s"
                % (i, len(scen), s.key, path, m["rows"], m["wall_ms"], m["plan"]))
            if args.explain:
                log("\n".join("      " + line for line in m["explain"]))
    cur.execute("RESET %s" % GUC)
    run_s = time.monotonic() - t_run

    report.add_ratios(rows)
    print()
    print("idxtable_fdw benchmark: %d customers, %d movies (wall: median of %d runs, 1 run "
          "if a run takes > %.0f s; cpu: mean, backend /proc/<pid>/%s)"
          % (size, d.n_movies, args.reps or 3, SLOW_QUERY_S, cpu.source or "-"))
    print("load: " + ", ".join("%s %.1f s" % kv for kv in load_times.items())
          + "; index builds: " + (", ".join("%.1f s" % v for v in index_times.values()) or "none")
          + "; ANALYZE %.1f s; scenarios %.0f s" % (analyze_s, run_s))
    print()
    for line in report.table(rows):
        print(line)
    print()
    for s in scen:
        print("  %-22s %s   -- %s" % (s.key, s.sql, s.note))
    print()
    print("summary (%d):" % size)
    for line in report.summary(rows) + notes:
        print("  " + line)
    sys.stdout.flush()
    path = os.path.join(HERE, "results-%d.csv" % size)
    report.write_csv(path, size, rows, {s.key: s.sql for s in scen})
    log("  wrote " + os.path.relpath(path, os.path.join(HERE, "..", "..")))
    if not args.no_pushdown:
        run_pushdown(cur, d, cpu, counters, args, size)
    conn.close()


def run_pushdown(cur, d, cpu, counters, args, size):
    """The pushdown table and the scan CPU ratio (pushdown.py) of one size; print and
    write them."""
    reps = args.reps or 3
    log("== pushdown: %d customers ==" % size)
    rows, scen, notes = pushdown.run(cur, d, cpu, counters, reps, log, explain=args.explain,
                                     only=args.only)
    runs = args.reps or (pushdown.RAW_RUNS_QUICK if args.quick else pushdown.RAW_RUNS)
    if args.only:
        ratio = "not measured (--only)"
    else:
        try:
            ratio = pushdown.scan_ratio(cur, cpu, DB, d.size, runs, log)
        except pushdown.Unavailable as e:
            ratio = str(e)
            log("  NOTE: scan CPU ratio not measured: %s" % e)
    pushdown.print_report(size, rows, scen, ratio, notes, reps)
    sys.stdout.flush()
    path = os.path.join(HERE, "results-pushdown-%d.csv" % size)
    pushdown.write_csv(path, size, rows, scen, ratio)
    log("  wrote " + os.path.relpath(path, os.path.join(HERE, "..", "..")))


def run_writes(args, mongo):
    """The write scenarios, in a database of their own; print and write their results."""
    n = args.write_rows or (WRITE_ROWS_QUICK if args.quick else WRITE_ROWS)
    k = max(1, min(WRITE_KEYED, n // 4))
    log("== writes: %d rows per INSERT, %d per UPDATE / DELETE, modes %s =="
        % (n, k, " and ".join(writes.MODES)))
    recreate_database(create=False, db=WRITE_DB)
    mongo.drop_database(WRITE_DB)
    conn = setup_server(WRITE_DB)
    reps = args.reps or (1 if args.quick else 3)
    rows, notes, run_s = writes.run(conn.cursor(), mongo_client.database(mongo, WRITE_DB),
                                    n, k, reps, log, explain=args.explain)
    turns = SUSTAINED_TURNS_QUICK if args.quick else SUSTAINED_TURNS
    s_n = SUSTAINED_ROWS_QUICK if args.quick else SUSTAINED_ROWS
    log("== sustained writes with and without the applier: %d turns of %d rows ==" % (turns, s_n))
    s_rows, s_notes = sustained.run(conn.cursor(), mongo_client.database(mongo, WRITE_DB),
                                    s_n, turns, log)
    conn.close()
    wire = mongo.admin.command("hello").get("maxWireVersion", 0)
    bulk_write = wire >= 25

    print()
    print("idxtable_fdw write benchmark: INSERT ... SELECT of %d rows from a local table, "
          "UPDATE and DELETE of %d rows by _id, as EXPLAIN ANALYZE (wall: %s, each on fresh "
          "collections; cpu: mean; %.0f s with setup and checks)"
          % (n, k, "1 run" if reps == 1 else "median of %d runs" % reps, run_s))
    print("server wire version %d: %s" % (wire, "each batch in one bulkWrite command (MongoDB 8.0)" if bulk_write
                                           else "one bulk write per collection (no bulkWrite)"))
    print("x_ins0: rows/s / rows/s of the insert without index tables in the same mode; "
          "x_same0: / the same statement without index tables")
    print("lag_ms: the applier's largest lag on the table's index tables in idxtable.sync_status, "
          "sampled every 0.1 s during the statement and once right after; catch_ms: from the "
          "statement's end until routed reads with index_consistency current have waited for it "
          "(the next statement starts only then)")
    print()
    for line in report.table(rows, writes.COLUMNS, min_width=0):
        print(line)
    print()
    print("summary (writes):")
    for line in writes.summary(rows) + notes:
        print("  " + line)
    sys.stdout.flush()
    path = os.path.join(HERE, "results-writes%s.csv" % ("-bulkwrite" if bulk_write else ""))
    writes.write_csv(path, rows)
    log("  wrote " + os.path.relpath(path, os.path.join(HERE, "..", "..")))
    print()
    print("sustained writes: each turn INSERTs %d customers, UPDATEs the town of half of them, "
          "the email of a quarter, DELETEs a quarter, back to back, on a table followed by the "
          "applier and on one of a server with change_streams 'off'; wall ms: median over turns; "
          "slowdown: median of the turns' followed/unfollowed - 1, with its 95%% confidence "
          "interval" % s_n)
    print()
    for line in report.table(s_rows, sustained.COLUMNS, min_width=0):
        print(line)
    for line in sustained.summary(s_rows) + s_notes:
        print("  " + line)
    sys.stdout.flush()


def run_applier(args, mongo):
    """The applier section, in a database of its own; print and write its results."""
    n, events, seconds, idle_reps = APPLIER_RUN_QUICK if args.quick else APPLIER_RUN
    events = args.applier_events or events
    log("== applier: %d outside updates per burst, steady load 2 x %.0f s ==" % (events, seconds))
    recreate_database(create=False, db=APPLIER_DB)
    mongo.drop_database(APPLIER_DB)
    setup_server(APPLIER_DB).close()
    try:
        rows, notes, run_s = applier.run(APPLIER_DB, mongo_client.database(mongo, APPLIER_DB),
                                         max(n, events + applier.SPARE), events, seconds,
                                         idle_reps, log)
    except applier.Unavailable as e:
        print()
        print("idxtable_fdw applier benchmark: not run: %s" % e)
        log("  NOTE: applier section not run: %s" % e)
        return
    applier.print_report(rows, notes, max(n, events + applier.SPARE), run_s)
    sys.stdout.flush()
    path = os.path.join(HERE, "results-applier.csv")
    applier.write_csv(path, rows)
    log("  wrote " + os.path.relpath(path, os.path.join(HERE, "..", "..")))
    run_lag(args, mongo, max(n, events + applier.SPARE), None)


def run_lag(args, mongo, n, names):
    """The applier's lag, repeated (lag.py), on the applier section's table (names: its index
    tables), or on a table of its own made first if names is None and the section did not run."""
    _, events, seconds, _ = APPLIER_RUN_QUICK if args.quick else APPLIER_RUN
    events = args.applier_events or min(events, LAG_CAPACITY_EVENTS)
    reps, seconds = args.lag_reps, args.lag_seconds or seconds
    mdb = mongo_client.database(mongo, APPLIER_DB)
    conn = connect(APPLIER_DB)
    names = names or lag.index_names(conn.cursor())
    conn.close()
    log("== applier lag: rates from %d turns of %d updates (applier, floor), then %d reps of %.0f s "
        "per load ==" % (lag.CAPACITY_TURNS, events, reps, seconds))
    try:
        rate_rows, rows = lag.run(APPLIER_DB, mdb, names, n, events, reps, seconds, log)
    except applier.Unavailable as e:
        print()
        print("idxtable_fdw applier lag: not run: %s" % e)
        return
    for line in lag.report(rate_rows, rows, reps, seconds):
        print(line)
    sys.stdout.flush()
    path = os.path.join(HERE, "results-applier-lag.csv")
    lag.write_csv(path, rows)
    log("  wrote " + os.path.relpath(path, os.path.join(HERE, "..", "..")))


def run_lag_only(args, mongo):
    """The lag alone: its table and three index tables in the applier's database, then run_lag."""
    n = APPLIER_RUN_QUICK[0] if args.quick else APPLIER_RUN[0]
    recreate_database(create=False, db=APPLIER_DB)
    mongo.drop_database(APPLIER_DB)
    setup_server(APPLIER_DB).close()
    try:
        names = lag.load_only(APPLIER_DB, mongo_client.database(mongo, APPLIER_DB), n, log)
    except applier.Unavailable as e:
        print("idxtable_fdw applier lag: not run: %s" % e)
        return
    run_lag(args, mongo, n, names)


def run_planning(args, mongo):
    """The planning section (planning.py), in a database of its own."""
    log("== planning: a point query with 0 and %d index tables; plans before and after ANALYZE =="
        % planning.COLUMNS)
    recreate_database(create=False, db=PLANNING_DB)
    mongo.drop_database(PLANNING_DB)
    conn = setup_server(PLANNING_DB)
    rows, lines = planning.run(conn, mongo_client.database(mongo, PLANNING_DB), args.quick, log)
    conn.close()
    print()
    print("idxtable_fdw planning benchmark: EXPLAIN's planning time of a point query on a table "
          "without index tables and on one with %d (%d documents each, ANALYZEd; mean of the "
          "fastest 90%% of %d runs)" % (planning.COLUMNS, planning.DOCS,
                                       planning.RUNS_QUICK if args.quick else planning.RUNS))
    print("then the plans of queries before and after ANALYZE (each in a new session; execution time the "
          "median of %d EXPLAIN ANALYZE runs)" % planning.EXEC_RUNS)
    print()
    for line in lines:
        print(line)
    sys.stdout.flush()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default=None,
                    help="comma-separated customer counts (default %s)" % DEFAULT_SIZES)
    ap.add_argument("--quick", action="store_true",
                    help="one small size (%d customers) for a fast check" % QUICK_SIZE)
    ap.add_argument("--reps", type=int, default=None,
                    help="measured runs per query and path (default 3), and per write "
                    "statement (default 3, --quick 1)")
    ap.add_argument("--only", help="run only scenarios whose name contains this text")
    ap.add_argument("--explain", action="store_true", help="print each EXPLAIN ANALYZE to stderr")
    ap.add_argument("--pushdown-only", action="store_true",
                    help="only the pushdown table and the scan CPU ratio (no routing "
                    "table, writes or applier)")
    ap.add_argument("--no-pushdown", action="store_true",
                    help="no pushdown table or scan CPU ratio")
    ap.add_argument("--writes-only", action="store_true", help="only the write scenarios")
    ap.add_argument("--no-writes", action="store_true", help="no write scenarios")
    ap.add_argument("--applier-only", action="store_true",
                    help="only the applier section (with --writes-only: those two)")
    ap.add_argument("--no-applier", action="store_true", help="no applier section")
    ap.add_argument("--planning-only", action="store_true",
                    help="only the planning section (planning time with 0 and 20 index tables)")
    ap.add_argument("--no-planning", action="store_true", help="no planning section")
    ap.add_argument("--applier-events", type=int, default=None,
                    help="outside updates per burst in the applier section (default %d, "
                    "--quick %d)" % (APPLIER_RUN[1], APPLIER_RUN_QUICK[1]))
    ap.add_argument("--applier-lag-only", action="store_true",
                    help="only the applier's lag, repeated (lag.py), on a table of its own")
    ap.add_argument("--lag-reps", type=int, default=LAG_REPS,
                    help="repetitions of each load in the lag measurement (default %d)" % LAG_REPS)
    ap.add_argument("--lag-seconds", type=float, default=None,
                    help="seconds measured per load and rep (default %.0f, --quick %.0f)"
                    % (APPLIER_RUN[2], APPLIER_RUN_QUICK[2]))
    ap.add_argument("--write-rows", type=int, default=None,
                    help="rows per bulk INSERT (default %d, --quick %d)"
                    % (WRITE_ROWS, WRITE_ROWS_QUICK))
    args = ap.parse_args()
    if args.quick and args.sizes:
        ap.error("--quick and --sizes exclude each other")
    if args.writes_only and args.no_writes:
        ap.error("--writes-only and --no-writes exclude each other")
    if args.applier_only and args.no_applier:
        ap.error("--applier-only and --no-applier exclude each other")
    if args.planning_only and args.no_planning:
        ap.error("--planning-only and --no-planning exclude each other")
    if args.pushdown_only and (args.no_pushdown or args.writes_only or args.applier_only or args.planning_only):
        ap.error("--pushdown-only excludes --no-pushdown, --writes-only, --applier-only and --planning-only")
    only = args.writes_only or args.applier_only or args.planning_only or args.applier_lag_only
    do_writes = args.writes_only or not (only or args.no_writes or args.pushdown_only)
    do_applier = args.applier_only or not (only or args.no_applier or args.pushdown_only)
    do_planning = args.planning_only or not (only or args.no_planning or args.pushdown_only)
    sizes = [QUICK_SIZE] if args.quick else \
        [int(x.replace("_", "")) for x in (args.sizes or DEFAULT_SIZES).split(",") if x]
    for var in ("MONGO_URI", "PGHOST"):
        if not os.environ.get(var):
            sys.exit("bench.py: %s is not set; run test/bench/run, or eval \"$(test/env start)\" first"
                     % var)
    if not args.quick and not args.sizes and not only:
        log(BIG_NOTE)
    mongo = mongo_client.connect()
    for size in ([] if only else sizes):
        run_size(size, args, mongo)
    if do_writes:
        run_writes(args, mongo)
    if do_applier:
        run_applier(args, mongo)
    elif args.applier_lag_only:
        run_lag_only(args, mongo)
    if do_planning:
        run_planning(args, mongo)


if __name__ == "__main__":
    main()
