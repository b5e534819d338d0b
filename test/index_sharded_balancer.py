#!/usr/bin/python3
"""Online builds, verify_index, repair_index, routed reads and the applier on sharded index collections
while the cluster's balancer moves chunks continuously (issue 28: "Online builds, verify, repair and the
applier work on sharded index collections. So do chunk migrations during all of them.").

Needs the test server's cluster of two shards behind two mongos routers (test/env with
IDXTABLE_MONGO_SHARDS=2 IDXTABLE_MONGO_ROUTERS=2; test/run starts one).  Where test/index_sharded_moves.py
moves chunks with moveChunk from a thread of its own, here the cluster's balancer moves them, as MongoDB's
sharding tests make it: the config server's test-only fail points balancerShouldReturnRandomMigrations
(each round moves a random chunk of a random collection to the other shard) and
overrideBalanceRoundInterval (a round every INTERVAL_MS ms), set through router 1, and balancerStart.
So the fact collection f and both index collections move from the moment they exist, the index
collections from their creation by create_index_concurrently on, and the moves race the FDW's own
commands as they race the outside writers'.  The balancer is stopped and the fail points turned off at
the end, whatever happened (the environment is shared with the cluster's other tests); the sharded
collections of other databases (earlier tests') are kept out of the balancer meanwhile, as
sh.disableBalancing marks them (config.collections noBalance), so that every move is one of this test's.

The collection, the outside writers (pymongo, router 1) and the checks are test/index_sharded_moves.py's
(its helpers, in a database of this test's own):
1. create_index_concurrently of a ranged index table on k (f_k; split at k0 = 15, 30 and 45 by the test
   as soon as the build has sharded it) and of a hashed unique one on s (f_s), each while the balancer
   and the writers run; both end valid; chunks moved during each build;
2. the writers stop; routed reads ('current') of k =, IN, ranges, ORDER BY ... LIMIT, s =, counts and
   aggregates give the rows a local heap copy of the collection gives (a heap table loaded from the
   collection read directly), and verify_index of both is clean, again and again for 3 s (the
   differences, read directly, are named when it is not);
3. damage made through pymongo is counted exactly by verify_index and fixed by repair_index (writers
   running again), after which verify_index is clean;
4. the applier keeping up: an outside write through router 1, then at once a routed 'current' read
   through router 0, ROUNDS times;
5. a last burst of outside writes, and of writes through the foreign table in `ordered` mode (no
   MongoDB transaction); once the applier has applied them, verify_index of both is clean and the
   routed reads match the heap copy once more.

Writes through the foreign table (a session of their own) run beside the outside writers in 1 (in
`transaction` mode: one that meets a moved chunk fails with 40001 and is run again) and in 5.

What it found once, in about 20 runs made while writing it (before the other databases' collections
were kept out of the balancer): f_s lacked the entry of one fact after its online build, for good
(verify_index counted 1 missing every time until repair_index; the differences were not named yet, as
they are now).  A likely cause is the test server's, not the FDW's: its migrations do not carry the
donor's cluster time to the recipient (mongod's do: the commands between the two shards gossip
$clusterTime), so a write to a moved chunk on a recipient whose clock is behind can take a time before
the build's sync_from (the operationTime of a ping through the FDW's mongos, whose clock has the
donor's time), and the applier passes over its event.  Making migrations gossip the clocks made
applier_cluster.py's T3 (two shards writing at one cluster time) fail every time after
index_sharded_moves.py, for a reason not found yet, so it is not done (test/server/README.md, "Not
emulated").

At the end the balancer must have moved chunks of f and of both index collections (counted from the
collections' chunk versions: each migration gives its chunk the next major version), routers must have
met StaleConfig and retried, and no shard may hold a document outside its chunks.  FACTS, ROUNDS and
INTERVAL_MS (environment) change the sizes.  At the end the PostgreSQL database is dropped (its applier
stops; the MongoDB database stays).  The last line is "index_sharded_balancer: N passed, M
failed".
"""
import os
import random
import sys
import threading
import time

import psycopg2

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures"))
os.environ.setdefault("FACTS", "600")
os.environ.setdefault("ROUNDS", "20")
import index_sharded_moves as moves  # noqa: E402  (its helpers; DATABASE set below)
from results import Results  # noqa: E402  (test/fixtures)
import mongo_client  # noqa: E402
import pg_fixture  # noqa: E402
from routed_reads import q, verify_clean, wait_for  # noqa: E402

moves.DATABASE = "idxtable_ixbal"
INTERVAL_MS = int(os.environ.get("INTERVAL_MS", "30"))
FAIL_POINTS = ("balancerShouldReturnRandomMigrations", "overrideBalanceRoundInterval")


class BalancerMoves:
    """The balancer's migrations so far, per collection (the shape of index_sharded_moves.Mover's
    `moves`): the collection's highest major chunk version less the one it had when first seen."""

    def __init__(self, mongo):
        self.mongo = mongo
        self.config = mongo_client.database(mongo, "config")
        self.first = self.majors()

    def majors(self):
        """{namespace: highest major chunk version} of the test's sharded collections."""
        out = {}
        for coll in self.config.collections.find({"_id": {"$regex": "^%s\\." % moves.DATABASE}}):
            query = {"uuid": coll["uuid"]} if "uuid" in coll else {"ns": coll["_id"]}
            out[coll["_id"]] = max(c["lastmod"].time for c in self.config.chunks.find(query))
        return out

    @property
    def moves(self):
        """{namespace: migrations since the namespace was first seen}."""
        out = {}
        for ns, major in self.majors().items():
            first = self.first.setdefault(ns, 1)  # a sharded collection starts at major 1
            out[ns] = major - first
        return out


class Splitter(threading.Thread):
    """Splits the ranged index collection at k0 = 15, 30 and 45 as soon as create_index_concurrently
    has sharded it (during the build), so that its chunks move one by one and range reads span shards
    (the balancer splits nothing: MongoDB 6.0.3+ does not split by size, and a test's data never make a
    chunk big enough)."""

    def __init__(self, mongo):
        super().__init__(daemon=True)
        self.mongo = mongo
        self.stop = threading.Event()
        self.done = False
        self.errors = []

    def run(self):
        ns = moves.full("idxtable.f.f_k")
        config = mongo_client.database(self.mongo, "config")
        while not self.stop.is_set() and not self.done:
            if config.collections.find_one({"_id": ns}):
                try:
                    for middle in (15, 30, 45):
                        self.mongo.admin.command({"split": ns, "middle": {"_id.k0": middle}})
                    self.done = True
                except Exception as exc:  # noqa: BLE001  (reported by the test)
                    self.errors.append(str(exc))
                    return
            time.sleep(0.01)


class FdwWriters(threading.Thread):
    """Writes through the foreign table (a PostgreSQL session of its own) until stopped: inserts of facts
    from `first_id` on, updates of k and of s (kept unique: w<_id>_<n>), deletes.  A write the FDW
    refuses with 40001 (its MongoDB transaction met a moved chunk: TransientTransactionError) is run
    again, as an application retries a serialization failure."""

    def __init__(self, dbname, seed, first_id):
        super().__init__(daemon=True)
        self.conn = pg_fixture.connect(dbname)
        self.rng = random.Random(seed)
        self.stop = threading.Event()
        self.first_id = first_id
        self.next_id = first_id
        self.version = 0
        self.writes = 0
        self.retries = 0
        self.errors = []

    def statement(self):
        """(sql, params) of one random write."""
        rng = self.rng
        self.version += 1
        op = rng.random()
        if op < 0.35 or self.next_id == self.first_id:
            self.next_id += 1
            return ("INSERT INTO f (_id, k, s) VALUES (%s, %s, %s)",
                    (self.next_id - 1, rng.randrange(moves.KEYS), "w%d_0" % (self.next_id - 1)))
        target = rng.choice([rng.randrange(moves.FACTS), rng.randrange(self.first_id, self.next_id)])
        if op < 0.65:
            return "UPDATE f SET k = %s WHERE _id = %s", (rng.randrange(moves.KEYS), target)
        if op < 0.85:
            return "UPDATE f SET s = %s WHERE _id = %s", ("w%d_%d" % (target, self.version), target)
        return "DELETE FROM f WHERE _id = %s", (target,)

    def run(self):
        while not self.stop.is_set():
            sql, params = self.statement()
            for _ in range(20):
                try:
                    q(self.conn, sql, params)
                    self.writes += 1
                    break
                except psycopg2.Error as exc:
                    if exc.pgcode != "40001":
                        self.errors.append("%s: %s %s" % (sql, exc.pgcode, str(exc).strip().splitlines()[0]))
                        break
                    self.retries += 1
            else:
                self.errors.append("%s: 40001 twenty times" % sql)
            time.sleep(0.01)

    def halt(self):
        """Stop, wait and close the session."""
        self.stop.set()
        self.join(60)
        self.conn.close()


def others_aside(r1):
    """sh.disableBalancing of the sharded collections of other databases (earlier tests' in a shared
    environment), so that every migration is one of this test's; {namespace: its noBalance before}."""
    config = mongo_client.database(r1, "config")
    others = {}
    for coll in config.collections.find({}):
        if coll["_id"].startswith(moves.DATABASE + "."):
            continue
        others[coll["_id"]] = bool(coll.get("noBalance"))
        config.collections.update_one({"_id": coll["_id"]}, {"$set": {"noBalance": True}})
    return others


def others_back(r1, others):
    """Their noBalance as it was."""
    config = mongo_client.database(r1, "config")
    for ns, before in others.items():
        config.collections.update_one({"_id": ns}, {"$set": {"noBalance": before}})


def start_balancer(r1):
    """Random migrations every INTERVAL_MS ms (the config server's test-only fail points)."""
    r1.admin.command("configureFailPoint", FAIL_POINTS[0], mode="alwaysOn")
    r1.admin.command("configureFailPoint", FAIL_POINTS[1], mode="alwaysOn", data={"intervalMs": INTERVAL_MS})
    r1.admin.command("balancerStart")


def stop_balancer(r1, mode):
    """Back to the environment's own balancer: the fail points off, its mode as it was (`mode`)."""
    r1.admin.command("balancerStop")
    for name in FAIL_POINTS:
        r1.admin.command("configureFailPoint", name, mode="off")
    if mode != "off":
        r1.admin.command("balancerStart")


def stale_retries(r0, r1):
    """StaleConfig answers of the shards and stale errors the routers' caches met, so far."""
    shards = r1.admin.command("clusterShardStats")["shards"]
    refused = sum(s["shardingStatistics"]["countStaleConfigErrors"] for s in shards.values())
    routers = sum(r.admin.command("serverStatus")["shardingStatistics"]["catalogCache"]["countStaleConfigErrors"]
                  for r in (r0, r1))
    return refused, routers


def load_heap(conn, coll):
    """f_local: a heap table holding what the collection holds now (read directly through pymongo)."""
    q(conn, "DROP TABLE IF EXISTS f_local")
    q(conn, "CREATE TABLE f_local (_id int PRIMARY KEY, k int, s text)")
    rows = [(d["_id"], d.get("k"), d.get("s")) for d in coll.find({})]
    with conn.cursor() as cur:
        cur.executemany("INSERT INTO f_local VALUES (%s, %s, %s)", rows)
    q(conn, "ANALYZE f_local")
    return len(rows)


def heap_queries(rng, coll):
    """(sql with {t} for the table, params) of reads an index table routes, keys drawn at random."""
    out = []
    sample = [d["s"] for d in coll.aggregate([{"$sample": {"size": 6}}])]
    for _ in range(6):
        k = rng.randrange(moves.KEYS)
        out += [("SELECT _id, k, s FROM {t} WHERE k = %s ORDER BY _id", (k,)),
                ("SELECT _id, k FROM {t} WHERE k IN (%s, %s, %s) ORDER BY _id", (k, (k + 13) % moves.KEYS,
                                                                                (k + 29) % moves.KEYS)),
                ("SELECT _id FROM {t} WHERE k >= %s AND k < %s ORDER BY _id", (k, k + 7)),
                ("SELECT k, _id FROM {t} WHERE k > %s ORDER BY k, _id LIMIT 9", (k,)),
                ("SELECT k, _id FROM {t} WHERE k < %s ORDER BY k DESC, _id DESC LIMIT 5", (k + 1,)),
                ("SELECT count(*) FROM {t} WHERE k BETWEEN %s AND %s", (k, k + 11)),
                ("SELECT k, count(*) FROM {t} WHERE k >= %s AND k < %s GROUP BY k ORDER BY k", (k, k + 5))]
    for s in sample:
        out.append(("SELECT _id, k, s FROM {t} WHERE s = %s", (s,)))
    out.append(("SELECT _id, s FROM {t} WHERE s IN (%s, %s, %s) ORDER BY _id", tuple(sample[:3])))
    return out


def compare_heap(res, conn, coll, seed, what):
    """Routed reads of f give exactly the rows of the same reads of the heap copy f_local."""
    facts = load_heap(conn, coll)
    wrong, unrouted = [], []
    queries = heap_queries(random.Random(seed), coll)
    for sql, params in queries:
        plan = "\n".join(r[0] for r in q(conn, "EXPLAIN (COSTS OFF) " + sql.format(t="f"), params))
        if "Index Table" not in plan:
            unrouted.append(sql)
        try:
            got = q(conn, sql.format(t="f"), params)
        except psycopg2.Error as exc:
            got = "%s %s" % (exc.pgcode, str(exc).strip().splitlines()[0])
        want = q(conn, sql.format(t="f_local"), params)
        if got != want:
            wrong.append((sql, params, got if isinstance(got, str) else len(got), len(want)))
    res.check(not unrouted, "%s: reads not routed through an index table: %r" % (what, unrouted[:3]))
    res.check(not wrong, "%s: routed reads differ from the heap copy (%d of %d): %r"
              % (what, len(wrong), len(queries), wrong[:3]))
    print("%s: %d routed reads compared with a heap copy of %d facts" % (what, len(queries), facts))


def differences(mongo, name):
    """[(what, fact or entry)] where index collection `name` and the facts differ now (read directly):
    a fact without its entry, an entry without its fact or of another key; to say what verify_index
    found."""
    db = mongo[moves.DATABASE]
    field = "k" if name == "f_k" else "s"
    entries = {}
    for entry in db["idxtable.f.%s" % name].find({}):
        entries.setdefault(entry["id"], []).append(entry["_id"]["k0"])
    out = []
    for fact in db["f"].find({}):
        keys = entries.pop(fact["_id"], [])
        if keys != [fact.get(field)]:
            out.append(("fact", fact, keys))
    out.extend(("entry of no fact", fact_id, keys) for fact_id, keys in entries.items())
    return out


def verify_repeatedly(res, conn, balancer, seconds, what):
    """verify_index of both index tables again and again for `seconds`, the balancer moving chunks (no
    writer running): clean every time."""
    before = sum(balancer.moves.values())
    deadline = time.time() + seconds
    runs, dirty = 0, []
    while time.time() < deadline:
        for name in moves.INDEXES:
            row = q(conn, "SELECT * FROM idxtable.verify_index(%s)", (name,))[0]
            runs += 1
            if any(v != 0 for v in row[1:]):
                dirty.append((name, row, differences(balancer.mongo, name)[:3]))
    moved = sum(balancer.moves.values()) - before
    res.check(not dirty and moved > 0, "%s: verify_index, %d chunk moves meanwhile, not clean %d of %d times: %r"
              % (what, moved, len(dirty), runs, dirty[:3]))
    print("%s: verify_index clean %d of %d times, %d chunk moves meanwhile" % (what, runs - len(dirty), runs, moved))


def applied(conn, coll):
    """Whether a 'current' count of f through each index table matches the collection's."""
    want = coll.count_documents({"k": {"$gte": 0}})
    try:
        return q(conn, "SELECT count(*) FROM f WHERE k >= 0")[0][0] == want
    except psycopg2.Error:
        return False


def main():
    res = Results()
    start = time.time()
    (r0, r1), hosts = moves.router_clients()
    if len(r1.admin.command("listShards").get("shards", [])) < 2 or len(hosts) < 2:
        print("index_sharded_balancer: needs a cluster of two shards and two routers "
              "(IDXTABLE_MONGO_SHARDS=2 IDXTABLE_MONGO_ROUTERS=2)")
        print("index_sharded_balancer: 0 passed, 1 failed")
        sys.exit(1)
    conn = moves.setup(r0, r1, hosts)
    coll = r1[moves.DATABASE]["f"]
    balancer = BalancerMoves(r1)
    stale_before = stale_retries(r0, r1)
    ids = [moves.FACTS]

    def writers_factory(seed):
        w = moves.Writers(r1, seed, ids[0])
        ids[0] += 100000
        return w

    mode = r1.admin.command("balancerStatus")["mode"]
    others = others_aside(r1)
    start_balancer(r1)
    splitter = Splitter(r1)
    splitter.start()
    try:
        writers = writers_factory(1)
        fdw = FdwWriters(moves.DATABASE, 7, 400000)
        writers.start()
        fdw.start()
        try:
            moves.check_builds(res, conn, balancer, writers)
        finally:
            writers.halt()
            fdw.halt()
        res.check(not writers.errors, "outside writes failed: %r" % writers.errors[:3])
        res.check(not fdw.errors and fdw.writes > 0, "writes through the foreign table during the builds (%d, %d "
                  "retried after 40001) failed: %r" % (fdw.writes, fdw.retries, fdw.errors[:3]))
        fdw_writes, fdw_retries = fdw.writes, fdw.retries
        splitter.stop.set()
        splitter.join(10)
        res.check(splitter.done and not splitter.errors, "f_k split during its build: %r" % splitter.errors)
        compare_heap(res, conn, coll, 2, "after the online builds")
        verify_repeatedly(res, conn, balancer, 3, "after the online builds")
        writers = moves.check_verify_repair(res, conn, r1, balancer, writers_factory)
        res.check(not writers.errors, "outside writes during repair_index failed: %r" % writers.errors[:3])
        compare_heap(res, conn, coll, 3, "after repair_index")
        for name in moves.INDEXES:
            verify_clean(res, conn, name, "after repair_index, the balancer moving chunks")
        moves.check_applier(res, conn, coll, balancer)
        # the last writes through the foreign table in ordered mode: no MongoDB transaction, the fact and
        # then its entries (and claims of unique keys), each retried by mongos when a move made it stale
        q(conn, "ALTER FOREIGN TABLE f OPTIONS (ADD consistency 'ordered')")
        writers = writers_factory(5)
        fdw = FdwWriters(moves.DATABASE, 8, 450000)
        writers.start()
        fdw.start()
        time.sleep(2)
        writers.halt()
        fdw.halt()
        res.check(not writers.errors, "the last outside writes failed: %r" % writers.errors[:3])
        res.check(not fdw.errors and fdw.writes > 0, "the last writes through the foreign table (%d, %d retried "
                  "after 40001) failed: %r" % (fdw.writes, fdw.retries, fdw.errors[:3]))
        fdw_writes, fdw_retries = fdw_writes + fdw.writes, fdw_retries + fdw.retries
        print("writes through the foreign table: %d, %d retried after 40001" % (fdw_writes, fdw_retries))
        res.check(wait_for(lambda: applied(conn, coll), 30), "the applier applied the last outside writes")
        compare_heap(res, conn, coll, 6, "after the last outside writes")
        for name in moves.INDEXES:
            verify_clean(res, conn, name, "at the end, the balancer moving chunks")
    finally:
        counted = balancer.moves
        stop_balancer(r1, mode)
        others_back(r1, others)
    refused, retried = (a - b for a, b in zip(stale_retries(r0, r1), stale_before))
    names = [moves.full("f")] + [moves.full("idxtable.f.%s" % name) for name in moves.INDEXES]
    res.check(all(counted.get(ns, 0) >= 3 for ns in names), "the balancer's moves per collection: %r" % counted)
    res.check(refused > 0 and retried > 0, "StaleConfig refusals %d, routers' stale retries %d" % (refused, retried))
    print("balancer moves: %r; StaleConfig refusals %d, routers' stale retries %d" % (counted, refused, retried))
    left = moves.strays(r1)
    res.check(not left, "test server: documents on a shard that does not own their chunk: %r" % left)
    conn.close()
    # its applier stopped, so that the cluster tests that follow share the test server with one applier
    # less; the MongoDB database stays, to be looked at
    pg_fixture.recreate_database(moves.DATABASE, create=False)
    print("elapsed %.1fs" % (time.time() - start))
    print(res.summary("index_sharded_balancer"))
    sys.exit(1 if res.failed else 0)


if __name__ == "__main__":
    main()
