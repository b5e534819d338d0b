#!/usr/bin/python3
"""The benchmark's cluster section: index collections on a sharded cluster (test/bench/run --cluster runs
it on clusters of 2 and 4 shards of the test server; or by hand in an environment started with
IDXTABLE_MONGO_SHARDS=N).

Three foreign tables over collections sharded on a hashed _id, each with one index table on k (an
integer, uniform over KEYS values), its index collection ranged (split at the quantiles of k, one chunk
moved to each shard), hashed, or unsharded (sharding => 'none'). ROWS rows are inserted through the FDW
into each; then, for each:

- the share of its entries (= of its index writes) on the busiest shard, against 1/N;
- the shards a routed statement reached (from the shards' command logs): point lookups, IN lists of
  2, 4 and 8 random keys, ranges over 1% and 30% of the keys (averages over REPEATS statements);
- routed point lookups per second from THREADS sessions for SECONDS (the test server is one Python
  process: its shards share one interpreter, so this compares the FDW's work per lookup, not a
  cluster's capacity).

Prints a table and writes test/bench/results-cluster-<N>.csv.
"""
import csv
import os
import random
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures"))
import mongo_client  # noqa: E402
import pg_fixture  # noqa: E402

DATABASE = "idxtable_bench_cluster"
ROWS = 2000
KEYS = 10000
REPEATS = 20
THREADS = 4
SECONDS = 5.0
KINDS = ("ranged", "hashed", "none")
ROUTED = ("SET idxtable.enable_plain_scan = off", "SET idxtable.index_consistency = 'any'")


def q(conn, sql, params=None):
    """Rows of a statement (autocommit connection)."""
    with conn.cursor() as cur:
        cur.execute(sql, params)
        return cur.fetchall() if cur.description else []


def routed_session():
    """A session of the benchmark database that reads through index tables only."""
    conn = pg_fixture.connect(DATABASE)
    conn.autocommit = True
    for sql in ROUTED:
        q(conn, sql)
    return conn


def on_shard(mongo, shard, command, db=DATABASE):
    """A command run on one shard alone (the test server's runOnShard)."""
    return mongo.admin.command({"runOnShard": shard, "db": db, "command": command})


def setup(mongo, shards):
    """The tables, their index tables, the ranged ones split and spread, the rows."""
    mongo.drop_database(DATABASE)
    pg_fixture.recreate_database(DATABASE)
    admin = pg_fixture.connect(DATABASE)
    admin.autocommit = True
    pg_fixture.create_extension(admin)
    pg_fixture.create_server(admin, DATABASE)
    rng = random.Random(28)
    rows = [(i, rng.randrange(KEYS)) for i in range(ROWS)]
    for kind in KINDS:
        mongo.admin.command("shardCollection", "%s.items_%s" % (DATABASE, kind), key={"_id": "hashed"})
        pg_fixture.create_foreign_table(admin, "items_%s" % kind, "_id integer, k integer",
                                        collection="items_%s" % kind)
        q(admin, "SELECT idxtable.create_index(%s, '{k}', name => %s, sharding => %s)",
          ("items_%s" % kind, "items_%s_k" % kind, kind))
        if kind == "ranged":
            full = "%s.idxtable.items_ranged.items_ranged_k" % DATABASE
            for i in range(1, len(shards)):
                middle = KEYS * i // len(shards)
                mongo.admin.command({"split": full, "middle": {"_id.k0": middle}})
                mongo.admin.command({"moveChunk": full, "find": {"_id": {"k0": middle}}, "to": shards[i]})
        started = time.monotonic()
        values = ", ".join("(%d, %d)" % row for row in rows)
        q(admin, "INSERT INTO items_%s VALUES %s" % (kind, values))
        print("loaded items_%s: %d rows in %.1f s" % (kind, ROWS, time.monotonic() - started), file=sys.stderr)
    admin.close()


def busiest_share(mongo, shards, kind):
    """The share of the index collection's entries on its busiest shard."""
    counts = [on_shard(mongo, s, {"count": "idxtable.items_%s.items_%s_k" % (kind, kind)}).get("n", 0)
              for s in shards]
    return max(counts) / max(1, sum(counts))


def shards_reached(mongo, shards, conn, kind, sql, params):
    """How many shards read the index collection while the statement ran."""
    for shard in shards:
        on_shard(mongo, shard, {"recentCommands": 1, "clear": True}, db="admin")
    q(conn, sql, params)
    count = 0
    for shard in shards:
        cmds = on_shard(mongo, shard, {"recentCommands": 1, "clear": True}, db="admin")["commands"]
        count += any(c["command"] in ("find", "count", "aggregate")
                     and c["collection"] == "idxtable.items_%s.items_%s_k" % (kind, kind) for c in cmds)
    return count


def targeting(mongo, shards, conn, kind, rng):
    """{statement kind: average shards reached}."""
    table = "items_%s" % kind
    out = {}
    cases = [("point", lambda: ("SELECT _id FROM %s WHERE k = %%s" % table, (rng.randrange(KEYS),)))]
    for k in (2, 4, 8):
        cases.append(("IN %d" % k, lambda k=k: ("SELECT _id FROM %s WHERE k = ANY (%%s)" % table,
                                               ([rng.randrange(KEYS) for _ in range(k)],))))
    for pct in (1, 30):
        def ranged(pct=pct):
            low = rng.randrange(KEYS - KEYS * pct // 100)
            return "SELECT _id FROM %s WHERE k >= %%s AND k < %%s" % table, (low, low + KEYS * pct // 100)
        cases.append(("range %d%%" % pct, ranged))
    for name, make in cases:
        total = 0
        for _ in range(REPEATS):
            sql, params = make()
            total += shards_reached(mongo, shards, conn, kind, sql, params)
        out[name] = total / REPEATS
    return out


def throughput(kind):
    """Routed point lookups per second from THREADS sessions."""
    done = [0] * THREADS
    stop = time.monotonic() + SECONDS

    def worker(n):
        conn = routed_session()
        rng = random.Random(n)
        while time.monotonic() < stop:
            q(conn, "SELECT _id FROM items_%s WHERE k = %%s" % kind, (rng.randrange(KEYS),))
            done[n] += 1
        conn.close()

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(done) / SECONDS


def main():
    """Measure and report."""
    mongo = mongo_client.connect()
    if not mongo.is_mongos:
        sys.exit("cluster.py: MONGO_URI is not a sharded cluster (start test/env with IDXTABLE_MONGO_SHARDS=N)")
    shards = [s["_id"] for s in mongo.admin.command("listShards")["shards"]]
    setup(mongo, shards)
    conn = routed_session()
    rng = random.Random(7)
    rows = []
    for kind in KINDS:
        row = {"shards": len(shards), "index collection": kind,
               "busiest shard share": round(busiest_share(mongo, shards, kind), 3),
               "ideal share": round(1 / len(shards), 3)}
        row.update({"shards reached, %s" % k: round(v, 2)
                    for k, v in targeting(mongo, shards, conn, kind, rng).items()})
        row["point lookups/s"] = round(throughput(kind), 1)
        rows.append(row)
    conn.close()
    fields = list(rows[0])
    print("== cluster of %d shards: index collections (%d rows, keys uniform over %d)" % (len(shards), ROWS, KEYS))
    print(" | ".join(fields))
    for row in rows:
        print(" | ".join(str(row[f]) for f in fields))
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results-cluster-%d.csv" % len(shards))
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)


if __name__ == "__main__":
    main()
