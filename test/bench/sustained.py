"""What the change-stream applier costs FDW writes: sustained writes with and without it.

Issue 11 asks that writes through the FDW, which need nothing from the applier, do not slow down by
more than 10% because an applier follows them.  This measures that directly.  For the consistency
modes "transaction" and "ordered", with 1 and with 3 index tables (writes.INDEXES), two foreign
tables with the same columns and index tables: one on the benchmark's server "mongo", followed by
an applier, and one on a second server "mongo_unfollowed" over the same MongoDB database with
change_streams 'off', which no applier follows.  A turn runs, on each table in turn, a workload of
back-to-back statements (no wait between them, so that the applier's work on one statement runs
beside the next): INSERT of B new customers, UPDATE of the town of half of them, UPDATE of the
email of a quarter, DELETE of a quarter.  After the followed table's workload the bench waits until
the applier has applied it (not counted), so that turns do not overlap.  Turns alternate which
table goes first; "slowdown" is the median over turns of the followed wall time over the
unfollowed one, less 1, with its 95% confidence interval (median_interval).  The followed side
includes everything following costs a write: the applier's reads beside the writes, and the wait
of a write of a unique key for the applier (for the time of the statement's start).  On the project's test server, which runs one command at a time, the applier's
server CPU delays the FDW's commands, so this is a pessimistic case; srv_applier_pct is that CPU as
a share of the FDW's (its commandCpu command).
"""
import math
import statistics
import time

import psycopg2

import writes

MODES = ("transaction", "ordered")
INDEX_COUNTS = (1, 3)
UNFOLLOWED = "mongo_unfollowed"

COLUMNS = [("mode", "mode", 12, "s"), ("idx", "indexes", 4, "d"), ("rows/turn", "rows", 10, "d"),
           ("turns", "turns", 6, "d"), ("followed ms", "followed_ms", 12, ".1f"),
           ("unfollowed ms", "unfollowed_ms", 14, ".1f"), ("slowdown %", "slowdown_pct", 10, "+.1f"),
           ("95% CI", "ci", 16, "s"),
           ("range", "range", 16, "s"), ("armed", "armed", 6, "s"), ("wait %", "wait_pct", 7, "+.1f"),
           ("catch-up ms", "catchup_ms", 12, ".0f"),
           ("srv_applier_pct", "srv_applier_pct", 16, ".0f")]


def median_interval(values, level=0.95):
    """A distribution-free confidence interval of the median of values: the order statistics
    x(k) and x(n+1-k) (1-based), with the largest k for which P(B < k) <= (1 - level) / 2, B being
    binomial (n, 1/2), the count of values below the median.  With fewer than 6 values there is
    no such k: the whole range."""
    xs = sorted(values)
    n = len(xs)
    tail, k = 0.0, 0
    while k < n // 2:
        tail += math.comb(n, k) / 2.0 ** n      # P(fewer than k + 1 below the median)
        if tail > (1.0 - level) / 2.0:
            break
        k += 1
    k = max(k, 1)
    return xs[k - 1], xs[n - k]


def create_unfollowed_server(cur):
    """The second server: the same MongoDB database, change_streams 'off' (no applier)."""
    cur.execute("SELECT srvoptions FROM pg_foreign_server WHERE srvname = 'mongo'")
    options = [o.split("=", 1) for o in cur.fetchone()[0]]
    options = [(k, v) for k, v in options if k != "change_streams"] + [("change_streams", "off")]
    cur.execute("DROP SERVER IF EXISTS %s CASCADE" % UNFOLLOWED)
    cur.execute("CREATE SERVER %s FOREIGN DATA WRAPPER idxtable_fdw OPTIONS (%s)"
                % (UNFOLLOWED, ", ".join("%s %%s" % k for k, _ in options)), [v for _, v in options])
    cur.execute("SELECT umoptions FROM pg_user_mappings WHERE srvname = 'mongo' "
                "AND usename = current_user")
    um = [o.split("=", 1) for o in cur.fetchone()[0] or []]
    cur.execute("CREATE USER MAPPING FOR CURRENT_USER SERVER %s%s"
                % (UNFOLLOWED, " OPTIONS (%s)" % ", ".join("%s %%s" % k for k, _ in um) if um else ""),
                [v for _, v in um])


def create_table(cur, server, mode, nidx, name):
    """A foreign table over a fresh collection on "server", with the first nidx index tables."""
    cur.execute("CREATE FOREIGN TABLE %s (%s) SERVER %s OPTIONS (collection %%s, consistency %%s)"
                % (name, writes.COLUMNS_DDL, server), (name, mode))
    for keys, include, unique in writes.INDEXES[:nidx]:
        cur.execute("SELECT idxtable.create_index(%s::regclass, %s::text[], "
                    "include => %s::text[], is_unique => %s)", (name, keys, include or "{}", unique))


def workload(name, turn, rows):
    """The statements of one turn on table "name": customers turn*rows+1 .. (turn+1)*rows."""
    lo, hi = turn * rows + 1, (turn + 1) * rows
    return [
        "INSERT INTO %s SELECT * FROM w_source WHERE customer_id BETWEEN %d AND %d" % (name, lo, hi),
        "UPDATE %s SET town = town || ' North' WHERE customer_id BETWEEN %d AND %d AND "
        "customer_id %% 2 = 0" % (name, lo, hi),
        "UPDATE %s SET email = 'moved.' || email WHERE customer_id BETWEEN %d AND %d AND "
        "customer_id %% 4 = 1" % (name, lo, hi),
        "DELETE FROM %s WHERE customer_id BETWEEN %d AND %d AND customer_id %% 4 = 3" % (name, lo, hi),
    ]


def armed(cur, names):
    """Does the applier's stream leave the FDW's own transactions out now, for every index table of
    names (idxtable.sync_status.skips_fdw_transactions)?"""
    cur.execute("SELECT coalesce(bool_and(skips_fdw_transactions), false) FROM idxtable.sync_status "
                "WHERE name = ANY (%s)", (names,))
    return cur.fetchone()[0]


def run_workload(cur, statements):
    """Wall ms of the statements run back to back."""
    t0 = time.perf_counter()
    for sql in statements:
        cur.execute(sql)
    return (time.perf_counter() - t0) * 1000.0


def unique_wait_pct(cur, name, turns, rows):
    """What the wait of a write of a unique key for the applier costs, on its own: UPDATEs of the
    email of an eighth of each turn's customers on the followed table, by pairs, one with
    idxtable.index_consistency 'current' (it waits) and one with 'any' (it does not), taking turns
    at going first; the median of the first over the median of the second, less 1 (%)."""
    times = {"current": [], "any": []}
    for turn in range(turns):
        lo, hi = turn * rows + 1, (turn + 1) * rows
        order = ("current", "any") if turn % 2 == 0 else ("any", "current")
        for k, consistency in enumerate(order):
            cur.execute("SET idxtable.index_consistency = %s", (consistency,))
            t0 = time.perf_counter()
            cur.execute("UPDATE %s SET email = 'w%d.' || email WHERE customer_id BETWEEN %d AND %d AND "
                        "customer_id %% 8 = %d" % (name, k, lo, hi, 2 * k))
            times[consistency].append((time.perf_counter() - t0) * 1000.0)
    cur.execute("RESET idxtable.index_consistency")
    return (statistics.median(times["current"]) / statistics.median(times["any"]) - 1.0) * 100.0


def run_pair(cur, lag, srv, mode, nidx, turns, rows, log):
    """One (mode, index count): the turns on the followed and the unfollowed table."""
    followed, unfollowed = "s_%s_%d_f" % (mode, nidx), "s_%s_%d_u" % (mode, nidx)
    create_table(cur, "mongo", mode, nidx, followed)
    create_table(cur, UNFOLLOWED, mode, nidx, unfollowed)
    names = writes.index_names(cur, followed)
    lag.settle(names)
    walls = {followed: [], unfollowed: []}
    catchups, fdw_ms, applier_ms, armed_turns = [], 0.0, 0.0, 0
    for turn in range(turns):
        for name in ((followed, unfollowed) if turn % 2 == 0 else (unfollowed, followed)):
            if name == followed:
                armed_turns += armed(cur, names)
            if srv:
                srv.take()
            lag.start(names if name == followed else [], name)
            walls[name].append(run_workload(cur, workload(name, turn, rows)))
            if name == followed:
                cur.execute("SELECT clock_timestamp()")
                catchups.append(lag.stop(cur.fetchone()[0])[1])
                if srv:
                    f, a = srv.take()
                    fdw_ms, applier_ms = fdw_ms + f, applier_ms + a
            else:
                lag.stop(None)
        log("  sustained %-11s %d idx turn %d: followed %.1f ms, unfollowed %.1f ms"
            % (mode, nidx, turn + 1, walls[followed][-1], walls[unfollowed][-1]))
    ratios = [f / u for f, u in zip(walls[followed], walls[unfollowed])]
    wait_pct = unique_wait_pct(cur, followed, turns, rows)
    log("  sustained %-11s %d idx: the unique-key wait costs %+.1f%% of the UPDATEs of email"
        % (mode, nidx, wait_pct))
    return {"mode": mode, "indexes": nidx, "rows": rows, "turns": turns,
            "followed_ms": statistics.median(walls[followed]),
            "unfollowed_ms": statistics.median(walls[unfollowed]),
            "slowdown_pct": (statistics.median(ratios) - 1.0) * 100.0,
            "ci": "%+.1f%%..%+.1f%%" % tuple((r - 1) * 100 for r in median_interval(ratios)),
            "range": "%+.0f%%..%+.0f%%" % ((min(ratios) - 1) * 100, (max(ratios) - 1) * 100),
            "armed": "%d/%d" % (armed_turns, turns),
            "wait_pct": wait_pct,
            "catchup_ms": statistics.median([c for c in catchups if c is not None] or [float("nan")]),
            "srv_applier_pct": 100.0 * applier_ms / fdw_ms if srv and fdw_ms else None}


def run(cur, mdb, rows, turns, log):
    """Every (mode, index count); returns (table rows, notes).  mdb is the (pymongo) MongoDB
    database of the server "mongo"; w_source is made to hold turns * rows customers
    (writes.load_source) if it holds fewer."""
    notes = []
    cur.execute("SELECT count(*) FROM w_source")
    if cur.fetchone()[0] < turns * rows:
        writes.load_source(cur, turns * rows)
    lag = writes.LagSampler(cur.connection.dsn)
    if not lag.ok or not lag.preloaded:
        lag.close()
        return [], ["no applier runs (idxtable_fdw not preloaded): sustained writes not measured"]
    srv = writes.ServerCpu(mdb)
    create_unfollowed_server(cur)
    out = []
    for mode in MODES:
        for nidx in INDEX_COUNTS:
            try:
                out.append(run_pair(cur, lag, srv if srv.ok else None, mode, nidx, turns, rows, log))
            except psycopg2.Error as e:
                notes.append("sustained %s %d idx failed: %s"
                             % (mode, nidx, str(e).strip().splitlines()[0]))
                log("  NOTE: " + notes[-1])
    lag.close()
    return out, notes


def summary(rows):
    """One line per mode: the slowdown with 1 and 3 index tables."""
    out = []
    for mode in MODES:
        rs = [r for r in rows if r["mode"] == mode]
        if rs:
            out.append("%s: writes followed by the applier vs unfollowed, slowdown (1/3 idx): %s "
                       "(target: at most +10%%)" % (mode, ", ".join(
                           "%+.1f%% (95%% CI %s)" % (r["slowdown_pct"], r["ci"]) for r in rs)))
    return out

