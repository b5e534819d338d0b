"""The benchmark's planning section: planning time with and without index tables, and plans
before and after ANALYZE.

Issue 12 asks that planning a point query on a table with 20 index tables
take at most 1.5x the time it takes on a table with none (index definitions
come from a per-backend cache, not from a scan of idxtable.index_defs).  Two
foreign tables of 20 integer columns over 200 documents each: plan_none
without index tables, plan_twenty with one index table per column; both
ANALYZEd.  Two point queries: "WHERE id = <k>" (an _id lookup, for which the
planner does not look at index tables) and "WHERE c20 = <k>" (a key of one
of plan_twenty's index tables: all twenty are matched against it).  Planning
time is EXPLAIN's "Planning Time", the mean of the fastest 90% of many runs
after a warm-up, in one session, with idxtable.index_consistency as
configured (default 'current').

Issue 29 asks that a table never analyzed be planned from what MongoDB says
of its collection (document count and mean size) as it is after ANALYZE:
the same plan, or one within 1.5x of its time.  plan_movies, 5,000 movies
(title, year, a plot of ~300 bytes, 5 actors each) with two index tables,
one on the multi-valued actors and one on year; three queries: a rare actor
(43 movies, by the actors index), one year (~48 movies, by the year index)
and the years from 1950 on (~70%: the scan).  Each is run in a new session
before ANALYZE, then again after it: the plan (the index table, or "scan"),
its estimated total cost, the execution time (EXPLAIN ANALYZE's, the median
of a few runs) and its round trips.  Then the same for the benchmark's own
queries (scenarios.py) over its data (data.py: customers with skewed towns
and last names, movies with actor arrays; 20,000 customers, 5,000 with
--quick) and its index tables (bench.INDEXES), never analyzed, then
ANALYZEd.
"""
import os
import statistics

import psycopg2


COLUMNS = 20
DOCS = 200
WARMUP = 50
RUNS, RUNS_QUICK = 1000, 300
TARGET = 1.5
TABLES = (("plan_none", 0), ("plan_twenty", COLUMNS))

# (label, condition): a point query by _id, and one by a key that plan_twenty
# has an index table on (every index table is then matched against it)
QUERIES = (("_id", "id = %d"), ("key c20", "c20 = %d"))

HEAD = "%-8s %-12s %7s %9s %9s %7s" % ("query", "table", "indexes", "mean_us", "p90_us", "ratio")


SCENARIO_SIZE, SCENARIO_SIZE_QUICK = 20000, 5000
MOVIES = 5000
RARE_ACTOR = "Actor 7"          # in every 119th movie: 43 of them
EXEC_RUNS = 5
# (label, condition, the plan expected after ANALYZE: an index table or "scan")
MOVIE_QUERIES = (("rare actor", "'%s' = ANY(actors)" % RARE_ACTOR, "plan_movies_actors"),
                 ("one year", "year = 1977", "plan_movies_year"),
                 ("years >= 1950", "year >= 1950", "scan"))


def movie(i):
    """Movie i: 'Actor 7' plays in every 119th, other actors come from a pool of 3,000."""
    actors = ["Actor %d" % (1000 + (i * 7 + k * 131) % 3000) for k in range(5)]
    if i % 119 == 0:
        actors[0] = RARE_ACTOR
    return {"_id": i, "title": "Movie %d" % i, "year": 1920 + (i * 37) % 105,
            "plot": ("A story of %d. " % i) * 18, "actors": actors}


def load(mongo_db):
    """The collections."""
    for name, _ in TABLES:
        mongo_db[name].drop()
        mongo_db[name].insert_many([dict({"_id": i}, **{"c%d" % k: i % (k + 2)
                                                        for k in range(1, COLUMNS + 1)})
                                    for i in range(DOCS)])
    mongo_db.plan_movies.drop()
    mongo_db.plan_movies.insert_many([movie(i) for i in range(MOVIES)])


def setup(conn):
    """Foreign tables, index tables, ANALYZE."""
    cur = conn.cursor()
    cols = ", ".join("c%d int" % k for k in range(1, COLUMNS + 1))
    for name, nindexes in TABLES:
        cur.execute("CREATE FOREIGN TABLE %s (id int OPTIONS (field '_id'), %s) SERVER mongo "
                    "OPTIONS (collection '%s')" % (name, cols, name))
        for k in range(1, nindexes + 1):
            cur.execute("SELECT idxtable.create_index(%s::regclass, %s::text[])",
                        (name, "{c%d}" % k))
        cur.execute("ANALYZE %s" % name)
    # never analyzed until movie_plans() says so
    cur.execute("CREATE FOREIGN TABLE plan_movies (id int OPTIONS (field '_id'), title text, year int, "
                "plot text, actors text[]) SERVER mongo OPTIONS (collection 'plan_movies')")
    cur.execute("SELECT idxtable.create_index('plan_movies', '{actors}', name => 'plan_movies_actors')")
    cur.execute("SELECT idxtable.create_index('plan_movies', '{year}', name => 'plan_movies_year')")


def planning_us(cur, table, cond, runs):
    """Planning times in microseconds of one query, after a warm-up."""
    times = []
    for i in range(WARMUP + runs):
        cur.execute("EXPLAIN (SUMMARY ON) SELECT * FROM %s WHERE %s" % (table, cond % (i % DOCS)))
        line = [r[0] for r in cur.fetchall() if r[0].startswith("Planning Time:")][0]
        if i >= WARMUP:
            times.append(float(line.split()[2]) * 1000.0)
    return times


def trimmed_mean(values):
    """The mean of the lower 90% (EXPLAIN prints whole microseconds, so a median is coarse)."""
    v = sorted(values)[:max(1, int(len(values) * 0.9))]
    return sum(v) / len(v)


def plan_of(node):
    """The plan of an EXPLAIN (FORMAT JSON) node: the index table its foreign scan reads, or "scan"."""
    if node.get("Node Type") == "Foreign Scan":
        return node.get("Index Table", "scan").split(" ")[0]
    for child in node.get("Plans", []):
        found = plan_of(child)
        if found:
            return found
    return None


def round_trips(node):
    """The round trips EXPLAIN ANALYZE counted in the plan."""
    return int(node.get("Round Trips", 0)) + sum(round_trips(c) for c in node.get("Plans", []))


def plans(conn, queries, phase):
    """Each (label, sql) in a new session: plan, cost, median execution time, round trips, rows."""
    out = []
    for label, sql in queries:
        session = psycopg2.connect(conn.dsn)
        session.autocommit = True
        cur = session.cursor()
        times = []
        for _ in range(EXEC_RUNS):
            cur.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + sql)
            result = cur.fetchone()[0][0]
            times.append(result["Execution Time"])
        session.close()
        top = result["Plan"]
        out.append({"query": label, "phase": phase, "plan": plan_of(top), "cost": top["Total Cost"],
                    "exec_ms": statistics.median(times), "trips": round_trips(top),
                    "rows": top["Actual Rows"]})
    return out


def compare(conn, queries, tables, expected, log):
    """Plans of queries [(label, sql)] before and after ANALYZE of tables; (rows, lines to print).
    expected: {label: the plan expected after ANALYZE}, or None."""
    rows = plans(conn, queries, "before")
    conn.cursor().execute("ANALYZE " + tables)
    rows += plans(conn, queries, "after")
    width = max(len(label) for label, _ in queries)
    for r in rows:
        log("  %-*s %-6s ANALYZE: %s, cost %.0f, %.1f ms" % (width, r["query"], r["phase"], r["plan"], r["cost"],
                                                              r["exec_ms"]))
    head = "%-*s %-7s %-36s %9s %8s %7s %6s" % (width, "query", "phase", "plan", "cost", "exec_ms", "trips", "rows")
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append("%-*s %-7s %-36s %9.0f %8.2f %7d %6d" % (width, r["query"], r["phase"], r["plan"], r["cost"],
                                                              r["exec_ms"], r["trips"], r["rows"]))
    lines.append("")
    for label, _ in queries:
        before, after = [r for r in rows if r["query"] == label]
        ratio = before["exec_ms"] / after["exec_ms"] if after["exec_ms"] else 1.0
        met = before["plan"] == after["plan"] or ratio <= TARGET
        lines.append("%s: before ANALYZE %s, after %s%s, time %.2fx (target: the same plan or <= %.1fx): %s"
                     % (label, before["plan"], after["plan"],
                        " (expected %s)" % expected[label] if expected else "", ratio, TARGET,
                        "met" if met else "NOT met"))
    return rows, lines


def run_movies(conn, log):
    """Plans of the movie queries before and after ANALYZE; (rows, lines to print)."""
    return compare(conn, [(label, "SELECT * FROM plan_movies WHERE " + cond) for label, cond, _ in MOVIE_QUERIES],
                   "plan_movies", {label: plan for label, _, plan in MOVIE_QUERIES}, log)


def run_scenarios(conn, mongo_db, quick, log):
    """The benchmark's queries over its data and index tables, before and after ANALYZE."""
    import bench  # (bench imports this module: not at the top)
    import data
    import scenarios
    d = data.Dataset(SCENARIO_SIZE_QUICK if quick else SCENARIO_SIZE)
    data.load(mongo_db, d, log=lambda m: None)
    cur = conn.cursor()
    cur.execute("CREATE FOREIGN TABLE customers (customer_id int OPTIONS (field '_id'), town text, "
                "last_name text, first_name text, email text, balance int) SERVER mongo "
                "OPTIONS (collection 'customers')")
    cur.execute("CREATE FOREIGN TABLE movies (movie_id int OPTIONS (field '_id'), title text, year int, "
                "actors text[]) SERVER mongo OPTIONS (collection 'movies')")
    ids = sorted(d.emails)
    cur.execute("CREATE TABLE orders (order_id int PRIMARY KEY, email text)")
    cur.executemany("INSERT INTO orders VALUES (%s, %s)",
                    [(i, d.emails[ids[(i * 7919) % len(ids)]]) for i in range(1, 1001)])
    cur.execute("ANALYZE orders")
    bench.create_indexes(cur, [])
    return compare(conn, [(s.key, s.sql) for s in scenarios.build(d)], "customers, movies", None, log)


def run(conn, mongo_db, quick, log):
    """Measure; returns (rows, lines to print)."""
    load(mongo_db)
    setup(conn)
    cur = conn.cursor()
    runs = RUNS_QUICK if quick else RUNS
    rows = []
    for label, cond in QUERIES:
        # interleaved, twice, so that a busy machine hurts both tables alike
        samples = {name: [] for name, _ in TABLES}
        for _ in range(2):
            for name, _ in TABLES:
                samples[name] += planning_us(cur, name, cond, runs // 2)
        base = trimmed_mean(samples["plan_none"])
        for name, nindexes in TABLES:
            t = sorted(samples[name])
            mean = trimmed_mean(t)
            rows.append({"query": label, "table": name, "indexes": nindexes, "mean_us": mean,
                         "p90_us": t[int(len(t) * 0.9)], "ratio": mean / base})
            log("  planning %-8s %-12s %2d index tables: %.1f us" % (label, name, nindexes, mean))
    lines = [HEAD, "-" * len(HEAD)]
    for r in rows:
        lines.append("%-8s %-12s %7d %9.1f %9.1f %7.2f" % (r["query"], r["table"], r["indexes"],
                                                          r["mean_us"], r["p90_us"], r["ratio"]))
    lines.append("")
    for r in rows:
        if r["indexes"]:
            lines.append("point query by %s, %d index tables: %.2fx the planning time without "
                         "(target <= %.1fx): %s" % (r["query"], COLUMNS, r["ratio"], TARGET,
                                                    "met" if r["ratio"] <= TARGET else "NOT met"))
    movie_rows, movie_lines = run_movies(conn, log)
    scenario_rows, scenario_lines = run_scenarios(conn, mongo_db, quick, log)
    return rows + movie_rows + scenario_rows, lines + [""] + movie_lines + [""] + scenario_lines


if __name__ == "__main__":
    # standalone: python3 test/bench/planning.py (environment of test/env)
    import sys
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures"))
    import mongo_client
    import pg_fixture
    db = "idxtable_bench_planning"
    c = pg_fixture.setup_database(db)
    client = mongo_client.connect()
    client.drop_database(db)
    _, out = run(c, mongo_client.database(client, db), "--quick" in sys.argv,
                 lambda m: print(m, file=sys.stderr))
    print("\n".join(out))
