#!/usr/bin/python3
"""Online builds, verify_index, repair_index and the applier on sharded index collections while chunks
move and other clients write (issue 28: "Online builds, verify, repair and the applier work on sharded
index collections. So do chunk migrations during all of them.").

Needs the test server's cluster of two shards behind two mongos routers (test/env with
IDXTABLE_MONGO_SHARDS=2 IDXTABLE_MONGO_ROUTERS=2; test/run starts one).  The foreign server's uri names
router 0 only; the outside writers and the chunk mover use router 1.  The fact collection f (_id int,
k int, s text; FACTS documents) is sharded on a ranged _id, split at 250, 500 and 750.  A mover thread
runs from the start to the end: it moves the chunks of f, and of the index collections once they exist
(the ranged one split at k0 = 20 and 40 first; the hashed one has four chunks), each to the other
shard, one after the other, through router 1.  Outside writers (pymongo, router 1) insert, update (k,
s) and delete facts while they run.  s is unique: a writer writes s<_id>_<n>.

1. create_index_concurrently of a ranged index table on k (f_k) and of a hashed unique one on s (f_s),
   each while the mover and the writers run; both end valid;
2. the writers stop; routed reads of f with index_consistency 'current' (k =, IN, ranges, ORDER BY ...
   LIMIT, s =) give what the collection read directly (pymongo, router 1) holds, and verify_index of
   both is clean (the applier re-applied the outside writes the builds missed);
3. the index collections damaged through pymongo (entries deleted, entries of old keys, entries of no
   fact); verify_index (chunks moving) counts exactly that damage; repair_index (chunks moving, the
   writers running again) fixes it; after the writers stop, verify_index is clean and reads right;
4. the applier keeping up: an outside write through router 1, then at once a routed 'current' read
   through router 0 of the key it wrote (and of the key it left), ROUNDS times, chunks moving.

At the end the mover must have moved chunks of f and of both index collections (about 170 each), and
no shard may hold a document outside its chunks (on the test server, which deletes a migrated chunk's
documents at once, such a document is a write that reached a shard after its chunk had moved away).

The test server's cluster must behave as mongod and mongos do while chunks move: a shard refuses an
operation routed with an outdated routing table (StaleConfig) and the router retries it.  Where it does
not (a write targeted before a move lands on the donor; a find that read the recipient before the move
and the donor after it misses the chunk), this test fails with entries left on the wrong shard, entries
duplicated or not deleted, and routed reads that miss a chunk; none of that is the FDW's.  FACTS and
ROUNDS (environment) change the sizes; NO_MOVES=1 runs without the mover.  The last line is
"index_sharded_moves: N passed, M failed".
"""
import os
import random
import sys
import threading
import time

import psycopg2
import pymongo

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures"))
from results import Results  # noqa: E402  (test/fixtures)
import mongo_client  # noqa: E402
import pg_fixture  # noqa: E402
from routed_reads import q, verify_clean  # noqa: E402

DATABASE = "idxtable_ixmv"
SHARDS = ("shard0", "shard1")
FACTS = int(os.environ.get("FACTS", "1000"))
KEYS = 60
ROUNDS = int(os.environ.get("ROUNDS", "40"))
INDEXES = {"f_k": "ranged", "f_s": "hashed"}


def router_clients():
    """A pymongo client of each router named in MONGO_URI, and their hosts."""
    hosts = os.environ["MONGO_URI"].split("//", 1)[1].split("/", 1)[0].replace("\\,", ",").split(",")
    kwargs = {"serverSelectionTimeoutMS": 10000}
    if os.environ.get("MONGO_USER"):
        kwargs.update(username=os.environ["MONGO_USER"], password=os.environ.get("MONGO_PASSWORD", ""),
                      authSource="admin")
    return [pymongo.MongoClient("mongodb://%s/" % h, **kwargs) for h in hosts], hosts


def full(collection):
    """The namespace of a collection of the test's database."""
    return "%s.%s" % (DATABASE, collection)


class Mover(threading.Thread):
    """Moves chunks of f and of the index collections to the other shard, one after the other, until
    stopped; counts the moves per collection and keeps the errors."""

    def __init__(self, mongo):
        super().__init__(daemon=True)
        self.mongo = mongo
        self.stop = threading.Event()
        self.moves = {}
        self.errors = []
        self.split_done = set()

    def chunks(self, ns):
        """[([min, max], shard)] of a sharded collection's chunks, or [] when it is not sharded (yet)."""
        config = mongo_client.database(self.mongo, "config")
        coll = config.collections.find_one({"_id": ns})
        if not coll:
            return []
        query = {"uuid": coll["uuid"]} if "uuid" in coll else {"ns": ns}
        return [([c["min"], c["max"]], c["shard"]) for c in config.chunks.find(query)]

    def prepare(self, ns):
        """Split a ranged index collection at k0 = 20 and 40 the first time it is seen."""
        if ns in self.split_done or not ns.endswith(".f_k"):
            return
        self.split_done.add(ns)
        for middle in (20, 40):
            self.mongo.admin.command({"split": ns, "middle": {"_id.k0": middle}})

    def move_one(self, ns):
        """Move a random chunk of ns to the other shard."""
        chunks = self.chunks(ns)
        if not chunks:
            return
        self.prepare(ns)
        chunks = self.chunks(ns)
        bounds, shard = random.choice(chunks)
        to = SHARDS[1 - SHARDS.index(shard)]
        self.mongo.admin.command({"moveChunk": ns, "bounds": bounds, "to": to})
        self.moves[ns] = self.moves.get(ns, 0) + 1

    def run(self):
        if os.environ.get("NO_MOVES"):
            return
        names = [full("f")] + [full("idxtable.f.%s" % name) for name in INDEXES]
        turn = 0
        while not self.stop.is_set():
            ns = names[turn % len(names)]
            turn += 1
            try:
                self.move_one(ns)
            except Exception as exc:  # noqa: BLE001  (reported by the test)
                self.errors.append("%s: %s" % (ns, exc))
            time.sleep(0.02)


class Writers(threading.Thread):
    """Outside writes (pymongo through router 1) to f until stopped: inserts, updates of k and of s
    (kept unique), deletes."""

    def __init__(self, mongo, seed, first_id):
        super().__init__(daemon=True)
        self.coll = mongo[DATABASE]["f"]
        self.rng = random.Random(seed)
        self.stop = threading.Event()
        self.next_id = first_id
        self.version = 0
        self.writes = 0
        self.errors = []

    def step(self):
        """One random outside write."""
        rng = self.rng
        op = rng.random()
        self.version += 1
        target = rng.randrange(self.next_id)
        if op < 0.3:
            doc = {"_id": self.next_id, "k": rng.randrange(KEYS), "s": "s%d_0" % self.next_id}
            self.next_id += 1
            self.coll.insert_one(doc)
        elif op < 0.65:
            self.coll.update_one({"_id": target}, {"$set": {"k": rng.randrange(KEYS)}})
        elif op < 0.85:
            self.coll.update_one({"_id": target}, {"$set": {"s": "s%d_%d" % (target, self.version)}})
        else:
            self.coll.delete_one({"_id": target})
        self.writes += 1

    def run(self):
        while not self.stop.is_set():
            try:
                self.step()
            except Exception as exc:  # noqa: BLE001  (reported by the test)
                self.errors.append(str(exc))
            time.sleep(0.005)

    def halt(self):
        """Stop and wait."""
        self.stop.set()
        self.join(30)


def setup(r0, r1, hosts):
    """The sharded fact collection with FACTS documents, the database and the foreign table (router 0)."""
    r1.drop_database(DATABASE)
    r1.admin.command({"shardCollection": full("f"), "key": {"_id": 1}})
    for middle in (FACTS // 4, FACTS // 2, 3 * FACTS // 4):
        r1.admin.command({"split": full("f"), "middle": {"_id": middle}})
    r1.admin.command({"moveChunk": full("f"), "find": {"_id": FACTS // 2}, "to": "shard1"})
    r1[DATABASE]["f"].insert_many([{"_id": i, "k": i % KEYS, "s": "s%d_0" % i} for i in range(FACTS)])
    conn = pg_fixture.setup_database(DATABASE, uri="mongodb://%s/" % hosts[0])
    pg_fixture.create_foreign_table(conn, "f", "_id int, k int, s text", options=[("shard_key", "_id")])
    q(conn, "SET idxtable.enable_plain_scan = off")
    q(conn, "SET idxtable.index_consistency = 'current'")
    return conn


def routed(conn, sql, params=None):
    """The rows of a read that must go through an index table (its plan says so), or a string saying
    why not."""
    try:
        plan = "\n".join(r[0] for r in q(conn, "EXPLAIN (COSTS OFF) " + sql, params))
        if "Index Table" not in plan:
            return "not routed: " + plan
        return sorted(q(conn, sql, params))
    except psycopg2.Error as exc:
        return "%s %s" % (exc.pgcode, str(exc).strip().splitlines()[0])


def compare_reads(res, conn, coll, rng, what, count=25):
    """Routed reads of f give what the collection holds (read directly)."""
    wrong = []
    for _ in range(count):
        k = rng.randrange(KEYS)
        ids = sorted(d["_id"] for d in coll.find({"k": k}, {"_id": 1}))
        got = routed(conn, "SELECT _id FROM f WHERE k = %s", (k,))
        if got != [(i,) for i in ids]:
            wrong.append(("k =", k, got if isinstance(got, str) else len(got), len(ids)))
        keys = [k, (k + 17) % KEYS, (k + 41) % KEYS]
        want = sorted((d["_id"], d["k"]) for d in coll.find({"k": {"$in": keys}}))
        got = routed(conn, "SELECT _id, k FROM f WHERE k IN (%s, %s, %s)", keys)
        if got != want:
            wrong.append(("IN", keys, got if isinstance(got, str) else len(got), len(want)))
        want = sorted((d["_id"],) for d in coll.find({"k": {"$gte": k, "$lt": k + 9}}))
        got = routed(conn, "SELECT _id FROM f WHERE k >= %s AND k < %s", (k, k + 9))
        if got != want:
            wrong.append(("range", k, got if isinstance(got, str) else len(got), len(want)))
        want = sorted((d["k"], d["_id"]) for d in coll.find({"k": {"$gt": k}}))[:7]
        got = routed(conn, "SELECT k, _id FROM f WHERE k > %s ORDER BY k, _id LIMIT 7", (k,))
        if got != want:
            wrong.append(("order", k, got, want))
        doc = coll.find_one({"_id": rng.randrange(FACTS)})
        if doc is not None:
            got = routed(conn, "SELECT _id, s FROM f WHERE s = %s", (doc["s"],))
            if got != [(doc["_id"], doc["s"])]:
                wrong.append(("s =", doc["s"], got))
    res.check(not wrong, "%s: routed reads differ from the collection (%d): %r" % (what, len(wrong), wrong[:3]))
    print("%s: %d routed reads compared" % (what, count * 5))


def check_builds(res, conn, mover, writers):
    """1 and 2: the online builds with chunks moving and outside writers, then reads and verify."""
    for name, sharding in INDEXES.items():
        keys = "{k}" if name == "f_k" else "{s}"
        start = time.time()
        before = dict(mover.moves)
        try:
            q(conn, "CALL idxtable.create_index_concurrently('f', %s, is_unique => %s, name => %s, sharding => %s)",
              (keys, name == "f_s", name, sharding))
            error = None
        except psycopg2.Error as exc:
            error = "%s %s" % (exc.pgcode, str(exc).strip())
        moved = sum(mover.moves.values()) - sum(before.values())
        print("create_index_concurrently %s (%s): %.1f s, %d chunk moves meanwhile, %d outside writes so far"
              % (name, sharding, time.time() - start, moved, writers.writes))
        res.check(error is None, "create_index_concurrently %s with chunks moving: %s" % (name, error))
        state = q(conn, "SELECT state, sharding FROM idxtable.indexes WHERE name = %s", (name,))
        res.check(state == [("valid", sharding)], "%s after its online build: %r" % (name, state))
        res.check(moved > 0, "%s: chunks moved during its online build: %d" % (name, moved))


def entry_of(index_coll, fact_id):
    """One entry of a fact (by its id field)."""
    return index_coll.find_one({"id": fact_id})


def damage(mongo, rng):
    """Delete 5 entries of each index, add to each an entry of an old key of 3 existing facts (stale)
    and 4 entries of no fact (orphan).  Returns {index: (missing, orphan, stale)}."""
    db = mongo[DATABASE]
    ids = sorted(d["_id"] for d in db["f"].find({}, {"_id": 1}))
    victims = rng.sample(ids, 12)
    done = {}
    for name in INDEXES:
        coll = db["idxtable.f.%s" % name]
        for fact in victims[:5]:
            res = coll.delete_one({"_id": entry_of(coll, fact)["_id"]})
            assert res.deleted_count == 1
        for n, fact in enumerate(victims[5:8]):
            entry = entry_of(coll, fact)
            old = dict(entry)
            if name == "f_k":
                old["_id"] = {"k0": KEYS + 100 + n, "id": fact}
            else:
                old["_id"] = {"k0": "old%d_%d" % (fact, n)}
            coll.insert_one(old)
        for n in range(4):
            entry = dict(entry_of(coll, victims[8 + n]))
            ghost = 900000 + n
            entry["id"] = ghost
            entry["_id"] = ({"k0": n, "id": ghost} if name == "f_k" else {"k0": "ghost%d" % n})
            coll.insert_one(entry)
        done[name] = (5, 4, 3)
    return done


def verify_row(conn, name, function="verify_index"):
    """(missing, orphan, stale) of verify_index or repair_index, or an error string."""
    try:
        row = q(conn, "SELECT missing, orphan, stale, unconvertible, conflicts FROM idxtable.%s(%%s)" % function,
                (name,))[0]
        return row
    except psycopg2.Error as exc:
        return "%s %s" % (exc.pgcode, str(exc).strip().splitlines()[0])


def check_verify_repair(res, conn, r1, mover, writers_factory):
    """3: damage, verify (chunks moving), repair (chunks moving, writers running), verify clean."""
    rng = random.Random(11)
    expected = damage(r1, rng)
    for name in INDEXES:
        before = sum(mover.moves.values())
        row = verify_row(conn, name)
        res.check(row == expected[name] + (0, 0), "verify_index(%s) of the damage, chunks moving: %r (expected %r)"
                  % (name, row, expected[name]))
        print("verify_index(%s): %r, %d chunk moves meanwhile" % (name, row, sum(mover.moves.values()) - before))
    writers = writers_factory(12)
    writers.start()
    for name in INDEXES:
        before = sum(mover.moves.values())
        row = verify_row(conn, name, "repair_index")
        # the outside writers' changes may add to the counts (the applier may not have applied them yet)
        ok = not isinstance(row, str) and all(row[i] >= expected[name][i] for i in range(3))
        res.check(ok, "repair_index(%s), chunks moving, writers writing: %r (at least %r)"
                  % (name, row, expected[name]))
        print("repair_index(%s): %r, %d chunk moves meanwhile" % (name, row, sum(mover.moves.values()) - before))
    writers.halt()
    return writers


def has(rows, fact):
    """Whether the rows of a routed read hold fact (or the read's error)."""
    return rows if isinstance(rows, str) else (fact,) in rows


def check_applier(res, conn, coll, mover):
    """4: outside writes through router 1, read at once through router 0 with 'current'."""
    rng = random.Random(4)
    wrong, slow = [], 0
    before = sum(mover.moves.values())
    for n in range(ROUNDS):
        fact = 800000 + n
        k = rng.randrange(KEYS)
        coll.insert_one({"_id": fact, "k": k, "s": "a%d" % n})
        start = time.time()
        got = has(routed(conn, "SELECT _id FROM f WHERE k = %s", (k,)), fact)
        if got is not True:
            wrong.append(("insert", fact, k, got))
        got = routed(conn, "SELECT _id FROM f WHERE s = %s", ("a%d" % n,))
        if got != [(fact,)]:
            wrong.append(("insert s", fact, got))
        newk = (k + 1 + rng.randrange(KEYS - 1)) % KEYS
        coll.update_one({"_id": fact}, {"$set": {"k": newk, "s": "b%d" % n}})
        got = has(routed(conn, "SELECT _id FROM f WHERE k = %s", (k,)), fact)
        if got is not False:
            wrong.append(("old key", fact, k, got))
        got = has(routed(conn, "SELECT _id FROM f WHERE k = %s", (newk,)), fact)
        if got is not True:
            wrong.append(("new key", fact, newk, got))
        got = routed(conn, "SELECT _id FROM f WHERE s IN (%s, %s)", ("a%d" % n, "b%d" % n))
        if got != [(fact,)]:
            wrong.append(("new s", fact, got))
        if n % 3 == 0:
            coll.delete_one({"_id": fact})
            got = routed(conn, "SELECT _id FROM f WHERE s = %s", ("b%d" % n,))
            if got != []:
                wrong.append(("deleted", fact, got))
        if time.time() - start > 2:
            slow += 1
    res.check(not wrong, "the applier, chunks moving: routed 'current' reads after outside writes wrong (%d): %r"
              % (len(wrong), wrong[:3]))
    res.check(slow == 0, "the applier: %d of %d rounds took over 2 s" % (slow, ROUNDS))
    print("applier: %d rounds of outside writes and routed 'current' reads, %d chunk moves meanwhile"
          % (ROUNDS, sum(mover.moves.values()) - before))


def strays(mongo):
    """{namespace: [(shard, _id)]} of the documents a shard holds outside its chunks.  The test server
    moves a chunk's documents at once (no range deleter, no orphans), so each is a write that its router
    targeted before a move and sent to the donor after it; mongod would have answered StaleConfig and
    mongos retried on the new owner.  (Hashes are the test server's own: test/server/idxmongo/routing.py.)"""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "server"))
    from idxmongo.bsonkeys import sort_key  # noqa: E402
    from idxmongo.routing import hashed  # noqa: E402
    out = {}
    config = mongo_client.database(mongo, "config")
    for name in ["f"] + ["idxtable.f.%s" % index for index in INDEXES]:
        coll = config.collections.find_one({"_id": full(name)})
        field = list(coll["key"])[0]
        chunks = sorted(((sort_key(c["min"][field]), c["shard"]) for c in config.chunks.find({"uuid": coll["uuid"]})),
                        key=lambda c: c[0])
        for shard in SHARDS:
            docs = mongo.admin.command({"runOnShard": shard, "db": DATABASE,
                                        "command": {"find": name, "batchSize": 1000000}})["cursor"]["firstBatch"]
            for doc in docs:
                value = doc["_id"]["k0"] if field == "_id.k0" else doc["_id"]
                if coll["key"][field] == "hashed":
                    value = hashed(value)
                owner = [s for low, s in chunks if low <= sort_key(value)][-1]
                if owner != shard:
                    out.setdefault(name, []).append((shard, doc["_id"]))
    return out


def main():
    res = Results()
    start = time.time()
    (r0, r1), hosts = router_clients()
    if len(r1.admin.command("listShards").get("shards", [])) < 2 or len(hosts) < 2:
        print("index_sharded_moves: needs a cluster of two shards and two routers "
              "(IDXTABLE_MONGO_SHARDS=2 IDXTABLE_MONGO_ROUTERS=2)")
        print("index_sharded_moves: 0 passed, 1 failed")
        sys.exit(1)
    conn = setup(r0, r1, hosts)
    coll = r1[DATABASE]["f"]
    mover = Mover(r1)
    ids = [FACTS]

    def writers_factory(seed):
        w = Writers(r1, seed, ids[0])
        ids[0] += 100000
        return w

    mover.start()
    try:
        writers = writers_factory(1)
        writers.start()
        try:
            check_builds(res, conn, mover, writers)
        finally:
            writers.halt()
        res.check(not writers.errors, "outside writes failed: %r" % writers.errors[:3])
        compare_reads(res, conn, coll, random.Random(2), "after the online builds")
        for name in INDEXES:
            verify_clean(res, conn, name, "after the online builds, chunks moving")
        writers = check_verify_repair(res, conn, r1, mover, writers_factory)
        res.check(not writers.errors, "outside writes during repair_index failed: %r" % writers.errors[:3])
        # the writers' last changes are the applier's: a 'current' read waits for it
        compare_reads(res, conn, coll, random.Random(3), "after repair_index")
        for name in INDEXES:
            verify_clean(res, conn, name, "after repair_index, chunks moving")
        check_applier(res, conn, coll, mover)
    finally:
        mover.stop.set()
        mover.join(30)
    res.check(not mover.errors, "chunk moves failed: %r" % mover.errors[:3])
    names = [full("f")] + [full("idxtable.f.%s" % name) for name in INDEXES]
    res.check(all(mover.moves.get(ns, 0) >= 3 for ns in names), "chunk moves per collection: %r" % mover.moves)
    print("chunk moves: %r" % mover.moves)
    left = strays(r1)
    res.check(not left, "test server: documents on a shard that does not own their chunk (writes that reached "
              "a shard after their chunk moved away; mongod answers StaleConfig): %r" % left)
    for name in INDEXES:
        verify_clean(res, conn, name, "at the end")
    conn.close()
    print("elapsed %.1fs" % (time.time() - start))
    print(res.summary("index_sharded_moves"))
    sys.exit(1 if res.failed else 0)


if __name__ == "__main__":
    main()
