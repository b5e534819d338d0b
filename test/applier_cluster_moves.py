#!/usr/bin/python3
"""The applier on a sharded cluster: shard-key changes whose insert comes before their delete (issue 28,
item 4), and the FDW's cross-shard transactions whose marker is not their last event (item 5).

Needs the test server's sharded cluster: 2 shards, 2 routers, no-ops every second (test/env with
IDXTABLE_MONGO_SHARDS=2 IDXTABLE_MONGO_ROUTERS=2 IDXTABLE_MONGO_NOOP_INTERVAL_S=1; test/run starts one).
MONGO_URI lists both routers (the FDW and pymongo use them both).  The collection items is sharded on
{region: 1}, split at "m", the chunk of "z" on shard1 (shard0 holds "a", the database's primary shard,
where the index collection and idxtable.sync live).  A foreign table items (_id, region, sku) with
shard_key 'region' and an index table on sku.

1. Shard-key changes (item 4).  MOVES times, through pymongo, in one transaction: insert {_id: m<k>,
   region: "a", sku: S<k>} (shard0), then move it to region "z": mongos deletes it on shard0 and
   inserts it on shard1, and the parts' events come in either order (a change stream of our own
   records which).  On the test server the order follows the two parts' commit times, and when they
   are equal (most often here) the events' places in their parts, then their identities (a hash of
   operationType and documentKey, as in a resume token): the shard0 part's insert and delete are its
   first and second statements, so the delete then comes last, after shard1's insert.  A
   transaction's events are applied in one batch, so the index has no entry of m<k> when the batch is
   checked.  Before the fix the applier took the fact's last mention in the batch (the delete) for the
   fact ("gone"), found no entry to remove, and left the fact out of the index for good: a routed read
   of S<k> found nothing and verify_index counted it missing (7 of 8 facts in each of 3 runs on the
   code before this test; 4, 6 and 6 of 8 with only this fix taken out; a fact whose transaction a
   batch's end cut waits for the next batch and is read).  Then the same with facts e<k> already in the index,
   moved in a transaction of their own (right before the fix too).  Each fact must be found by a
   routed read within 20 s, and verify_index must be clean.
2. Cross-shard transactions (item 5).  TXNS times, the stream taking the FDW's transactions (an outside
   update of a field no index table uses, just before, makes it take them again, and makes the
   applier write nothing: a marker counts only for index tables the applier has not written to since
   the transaction's session learnt its time): BEGIN; INSERT a row of region "a" (shard0, with the
   marker) and one of region "z" (shard1); COMMIT.  The parts commit on the two shards one after the
   other, at one time or at different times, so the shard1 part's event comes in another batch than
   the marker, before it or after it.  The transaction wrote the entries itself: the applier must read
   none of its facts (the test server's recentCommands: finds of items with the applier's appName
   naming the rows' _ids).  Before the fix the applier read the shard1 row of each transaction
   (5 reads of 5 in each of 3 runs).

3. A transaction that meets a moved chunk (shard versions).  STALE times: BEGIN; INSERT a row of items
   in region "a" (shard0: the MongoDB transaction begins there); a chunk of another foreign table,
   parts (sharded like items, not touched by the transaction, so the migration need not wait for it),
   moves from shard1 to shard0 through pymongo; INSERT a row of parts in that chunk.  mongos refuses
   the second statement (a stale router: StaleConfig from shard1; a fresh one: the placement changed
   on shard0 after the transaction began there) with TransientTransactionError and aborts the
   transaction (mongos never retries StaleConfig inside a transaction); the FDW must raise SQLSTATE
   40001 and leave nothing of the transaction: neither row in MongoDB, no index entry (verify_index
   clean), and the same transaction run again (as an application retries 40001) commits.  Before
   the test server checked shard versions the second INSERT succeeded (a stale router wrote the parts
   row onto shard1, outside its chunk: an orphan that reads never see).
4. Writes racing chunk moves.  For RACE_SECONDS, outside writers (pymongo, one per router: inserts,
   sku updates and deletes of items, by shard key) and FDW writes (ordered consistency, each final
   when made) run while a mover moves items's chunks between the shards; then every fact is where its
   chunk is and the index table is exact: verify_index clean, and a routed read of every sku finds its
   facts.  Before the shard versions, writes routed before a move landed on the donor (orphans).

5. Routers that knew an index collection's old routing.  Three rounds on gadgets (sharded on
   {region: 1}): create_index (its index collection created and sharded through one mongos),
   FLUSH_INSERTS transaction-mode INSERTs, drop_index and DELETE.  A mongos that keeps what it cached
   of the dropped index collection (or of the new one before it was sharded) sends the next
   transaction's entries with a version the shards refuse: StaleConfig, which mongos does not retry in
   a transaction (40001).  create_index must leave no router stale (flushRouterConfig on each mongos
   the client knows): every INSERT succeeds.
6. A transaction that BEGINS by meeting a moved chunk.  A second foreign server "solo" names only the
   second router (B); bolts (sharded on {region: 1}, split at "m", with an index table on sku) and nuts
   (unsharded) are read and written through it.  Each round makes B cache bolts's routing, then moves
   the chunk of "z" through the first router (A) while B still holds the old versions, then writes
   through B in transaction mode: an autocommit INSERT (its facts are the transaction's first command),
   an UPDATE ... RETURNING (findAndModify) and a DELETE (a batch, whose first command reads the facts in
   the transaction).  For the UPDATE and the DELETE the chunk moves during the statement, after their
   scan (which B, outside a transaction, refreshes and retries by itself) and before their write: a
   local WHERE condition waits there for an advisory lock that the test holds while it moves the chunk.  Their first
   command meets StaleConfig, mongos aborts the transaction (TransientTransactionError), and the FDW
   starts the transaction again and sends the command again: each statement must succeed (no 40001),
   with a DEBUG1 message saying so, leave the right rows, and verify_index(bolts_sku) must be clean.
   Then BEGIN; INSERT INTO nuts (the first command); the chunk moves; INSERT INTO bolts: the second
   command's StaleConfig must stay SQLSTATE 40001, and leave neither row.  Before the FDW started a
   transaction again, every statement of the rounds failed with 40001.

The last line is "applier_cluster_moves: N passed, M failed".
"""
import collections
import os
import sys
import threading
import time

import pymongo

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures"))
from results import Results  # noqa: E402  (test/fixtures)
import mongo_client  # noqa: E402
import pg_fixture  # noqa: E402
from routed_reads import q, streaming, wait_for  # noqa: E402

DATABASE = "idxtable_moves"
APPLIER = "idxtable_fdw applier"
MOVES = int(os.environ.get("MOVES", "8"))
TXNS = int(os.environ.get("TXNS", "5"))
STALE = int(os.environ.get("STALE", "3"))
RACE_SECONDS = float(os.environ.get("RACE_SECONDS", "4"))
FLUSH_INSERTS = int(os.environ.get("FLUSH_INSERTS", "10"))
FIRST_ROUNDS = int(os.environ.get("FIRST_ROUNDS", "2"))
RESTARTED = "at its first command: starting it again"
HOLD = 4242  # the advisory lock that holds part 6's statements between their scan and their write


def is_cluster(client):
    """Is MONGO_URI the test server's sharded cluster?"""
    try:
        client.admin.command("clusterShardStats")
        return client.is_mongos
    except pymongo.errors.PyMongoError:
        return False


def setup(res, client):
    """The sharded collection, the foreign table and its index table, followed by an applier."""
    client.drop_database(DATABASE)
    ns = DATABASE + ".items"
    client.admin.command("shardCollection", ns, key={"region": 1})
    client.admin.command("split", ns, middle={"region": "m"})
    client.admin.command("moveChunk", ns, find={"region": "z"}, to="shard1")
    mongo_client.flush_routers(client)  # (a router may hold the dropped collection's routing)
    conn = pg_fixture.setup_database(DATABASE)
    pg_fixture.create_foreign_table(conn, "items", "_id text, region text, sku text",
                                    options={"shard_key": "region"})
    q(conn, "INSERT INTO items VALUES ('s1', 'a', 'seed1'), ('s2', 'z', 'seed2')")
    q(conn, "SELECT idxtable.create_index('items', '{sku}', name => 'items_sku')")
    q(conn, "ANALYZE items")
    q(conn, "SET idxtable.enable_plain_scan = off")
    q(conn, "SET idxtable.index_consistency = 'current'")
    ok = res.check(wait_for(lambda: streaming(conn, "items_sku"), 60), "the applier does not follow items_sku")
    return conn if ok else None


def routed(conn, sku):
    """(routed?, ids) of SELECT _id FROM items WHERE sku = sku, or (None, SQLSTATE)."""
    try:
        plan = "\n".join(r[0] for r in q(conn, "EXPLAIN (COSTS OFF) SELECT _id FROM items WHERE sku = %s", (sku,)))
        return "Index Table" in plan, sorted(r[0] for r in q(conn, "SELECT _id FROM items WHERE sku = %s", (sku,)))
    except Exception as exc:  # psycopg2.Error: a failed read is no wrong row
        return None, getattr(exc, "pgcode", str(exc))


def verify(res, conn, what):
    """verify_index(items_sku) finds nothing wrong; the row it returned."""
    row = q(conn, "SELECT * FROM idxtable.verify_index('items_sku')")[0]
    res.check(all(v == 0 for v in row[1:]), "%s: verify_index(items_sku): %r" % (what, row))
    return row


class Orders(threading.Thread):
    """A change stream of our own on items: the order of each move's delete and insert."""

    def __init__(self, client):
        super().__init__(daemon=True)
        self.stream = client[DATABASE].items.watch(max_await_time_ms=100)
        self.kinds = {}
        self.stop = False

    def run(self):
        while not self.stop:
            try:
                event = self.stream.try_next()
            except pymongo.errors.PyMongoError:
                return
            if event is not None:
                self.kinds.setdefault(event["documentKey"]["_id"], []).append(event["operationType"])

    def delete_last(self):
        """The _ids whose events ended with the move's delete, after its insert."""
        return sorted(k for k, v in self.kinds.items() if len(v) >= 3 and v[-1] == "delete")


def shard_key_changes(res, client, conn):
    """Part 1: MOVES facts inserted and moved to shard1 in one transaction, then MOVES facts in the index
    moved; every fact in the index afterwards."""
    orders = Orders(client)
    orders.start()
    items = client[DATABASE].items
    items.insert_many([{"_id": "e%d" % k, "region": "a", "sku": "E%d" % k} for k in range(MOVES)])
    for k in range(MOVES):
        with client.start_session() as session:
            with session.start_transaction():
                items.insert_one({"_id": "m%d" % k, "region": "a", "sku": "S%d" % k}, session=session)
                items.update_one({"_id": "m%d" % k, "region": "a"}, {"$set": {"region": "z"}},
                                 session=session)
    missing = []
    for sku, doc_id in [("S%d" % k, "m%d" % k) for k in range(MOVES)]:
        if not wait_for(lambda: routed(conn, sku) == (True, [doc_id]), 20 if not missing else 2):
            missing.append("%s (%r)" % (doc_id, routed(conn, sku)))
    for k in range(MOVES):
        with client.start_session() as session:
            with session.start_transaction():
                items.update_one({"_id": "e%d" % k, "region": "a"}, {"$set": {"region": "z"}},
                                 session=session)
    for sku, doc_id in [("E%d" % k, "e%d" % k) for k in range(MOVES)]:
        if not wait_for(lambda: routed(conn, sku) == (True, [doc_id]), 20 if not missing else 2):
            missing.append("%s (%r)" % (doc_id, routed(conn, sku)))
    time.sleep(0.5)
    orders.stop = True
    orders.join(5)
    last = orders.delete_last()
    print("shard-key changes: %d moves, the delete came last in %d (%s); %d facts not found by a routed read"
          % (2 * MOVES, len(last), ", ".join(last), len(missing)))
    res.check(not missing, "shard-key changes: routed reads did not find %s (moves whose delete came last: %s)"
              % (", ".join(missing), ", ".join(last)))
    verify(res, conn, "after the shard-key changes")


def applier_fact_reads(admin, ids):
    """The applier's finds of items that name any of ids, since the last call."""
    cmds = admin.command({"recentCommands": 1, "clear": True})["commands"]
    return [c for c in cmds if c.get("appName") == APPLIER and c.get("command") == "find"
            and c.get("collection") == "items" and any('"%s"' % i in str(c.get("filter")).replace("'", '"')
                                                        for i in ids)]


def skips(conn):
    """Does the stream of items_sku leave the FDW's transactions out now?"""
    row = q(conn, "SELECT coalesce(skips_fdw_transactions, false) FROM idxtable.sync_status "
                  "WHERE name = 'items_sku'")
    return bool(row and row[0][0])


def cross_shard_transactions(res, client, conn):
    """Part 2: TXNS FDW transactions over both shards; the applier reads none of their facts."""
    admin = client.admin
    items = client[DATABASE].items
    reads, armed, wrong = [], 0, []
    for k in range(TXNS):
        # an outside update of a field no index table uses: the stream takes every transaction again
        # (it is someone else's write), and the applier writes nothing for it (a marker counts only for
        # index tables the applier has not written to since the transaction's session last learnt
        # the time)
        items.update_one({"_id": "s1", "region": "a"}, {"$set": {"note": k}})
        routed(conn, "seed1")
        applier_fact_reads(admin, [])
        was_armed = skips(conn)
        q(conn, "BEGIN")
        q(conn, "INSERT INTO items VALUES (%s, 'a', %s), (%s, 'z', %s)",
          ("ta%d" % k, "P%d" % k, "tz%d" % k, "Q%d" % k))
        q(conn, "COMMIT")
        armed += 1 if was_armed or skips(conn) else 0
        for sku, doc_id in (("Q%d" % k, "tz%d" % k), ("P%d" % k, "ta%d" % k)):
            if not wait_for(lambda: routed(conn, sku) == (True, [doc_id]), 20):
                wrong.append(doc_id)
        # (a current read returns once the applier has applied every event before it, so what it
        # reads for the transaction it has read by now)
        found = applier_fact_reads(admin, ["ta%d" % k, "tz%d" % k])
        reads.extend(found)
    print("cross-shard transactions: %d, %d with the stream leaving them out; the applier read their facts "
          "%d times" % (TXNS, armed, len(reads)))
    res.check(not wrong, "cross-shard transactions: routed reads did not find %s" % wrong)
    res.check(armed < TXNS, "cross-shard transactions: the stream left every one out (nothing tested)")
    res.check(not reads, "cross-shard transactions: the applier read facts the FDW's transactions wrote "
                         "(%d finds, e.g. %r)" % (len(reads), [c.get("filter") for c in reads[:3]]))
    verify(res, conn, "after the cross-shard transactions")


def shard_of(client, coll, doc_id):
    """The shards holding the document `doc_id` of `coll` (runOnShard: each shard's own data)."""
    out = []
    for shard in ("shard0", "shard1"):
        reply = client.admin.command({"runOnShard": shard, "db": DATABASE,
                                      "command": {"find": coll, "filter": {"_id": doc_id}}})
        if reply["cursor"]["firstBatch"]:
            out.append(shard)
    return out


def stale_transactions(res, client, conn):
    """Part 3: a transaction whose second statement meets a moved chunk fails with 40001, leaving
    nothing; run again, it commits."""
    import psycopg2
    ns = DATABASE + ".parts"
    client.admin.command("shardCollection", ns, key={"region": 1})
    client.admin.command("split", ns, middle={"region": "m"})
    client.admin.command("moveChunk", ns, find={"region": "z"}, to="shard1")
    pg_fixture.create_foreign_table(conn, "parts", "_id text, region text, sku text",
                                    options={"shard_key": "region"})
    mongo_client.flush_routers(client)
    q(conn, "INSERT INTO parts VALUES ('p0', 'z', 'first')")  # the FDW's routers learn the chunks
    codes, left = [], []
    for k in range(STALE):
        client.admin.command("moveChunk", ns, find={"region": "z"}, to="shard1")
        mongo_client.flush_routers(client)  # no router stale before the transaction begins
        q(conn, "INSERT INTO parts VALUES (%s, 'z', 'warm')", ("w%d" % k,))
        q(conn, "BEGIN")
        code = None
        try:
            q(conn, "INSERT INTO items VALUES (%s, 'a', %s)", ("st%d" % k, "ST%d" % k))
            client.admin.command("moveChunk", ns, find={"region": "z"}, to="shard0")
            q(conn, "INSERT INTO parts VALUES (%s, 'z', 'late')", ("pz%d" % k,))
            q(conn, "COMMIT")
        except psycopg2.Error as exc:
            code = exc.pgcode
            q(conn, "ROLLBACK")
        codes.append(code)
        for coll, doc_id in (("items", "st%d" % k), ("parts", "pz%d" % k)):
            where = shard_of(client, coll, doc_id)
            if where:
                left.append("%s %s on %s" % (coll, doc_id, where))
        for attempt in range(5 if code is not None else 0):  # run again, as an application retries 40001 (the other router may be stale too)
            try:
                q(conn, "BEGIN")
                q(conn, "INSERT INTO items VALUES (%s, 'a', %s)", ("st%d" % k, "ST%d" % k))
                q(conn, "INSERT INTO parts VALUES (%s, 'z', 'late')", ("pz%d" % k,))
                q(conn, "COMMIT")
                break
            except psycopg2.Error as exc:
                q(conn, "ROLLBACK")
                if exc.pgcode != "40001" or attempt == 4:
                    raise
    print("transactions meeting a moved chunk: SQLSTATEs %s; left behind: %s" % (codes, left or "nothing"))
    res.check(codes == ["40001"] * STALE, "a transaction meeting a moved chunk fails with 40001: %s" % codes)
    res.check(not left, "nothing of the failed transactions is left: %s" % left)
    for k in range(STALE):
        res.check(routed(conn, "ST%d" % k) == (True, ["st%d" % k]), "the transaction run again committed st%d" % k)
        where = shard_of(client, "parts", "pz%d" % k)
        res.check(where == ["shard0"], "pz%d on its chunk's shard: %s" % (k, where))
    verify(res, conn, "after the transactions meeting moved chunks")


def router_clients():
    """A pymongo client of each router named in MONGO_URI."""
    hosts = os.environ["MONGO_URI"].split("//", 1)[1].split("/", 1)[0].replace("\\,", ",").split(",")
    kwargs = {"serverSelectionTimeoutMS": 10000}
    if os.environ.get("MONGO_USER"):
        kwargs.update(username=os.environ["MONGO_USER"], password=os.environ.get("MONGO_PASSWORD", ""),
                      authSource="admin")
    return [pymongo.MongoClient("mongodb://%s/" % h, **kwargs) for h in hosts]


def misplaced_facts(client, coll):
    """(_id, shard, owners) of the documents of `coll` stored outside their chunk's shard (a region key)."""
    chunks = list(client.config.chunks.find({"ns": "%s.%s" % (DATABASE, coll)}))

    def owners(region):
        return [c["shard"] for c in chunks
                if (not isinstance(c["min"]["region"], str) or c["min"]["region"] <= region)
                and (not isinstance(c["max"]["region"], str) or region < c["max"]["region"])]
    out = []
    for shard in ("shard0", "shard1"):
        reply = client.admin.command({"runOnShard": shard, "db": DATABASE,
                                      "command": {"find": coll, "filter": {}, "batchSize": 1000000}})
        out.extend((d["_id"], shard, owners(d["region"])) for d in reply["cursor"]["firstBatch"]
                   if owners(d["region"]) != [shard])
    return out


def racing_moves(res, client, conn):
    """Part 4: outside and FDW writes racing moves of items's chunks; the index table stays exact."""
    ns = DATABASE + ".items"
    stop = time.monotonic() + RACE_SECONDS
    errors, moves, written = [], [0], {}
    lock = threading.Lock()

    def outside(index, one):
        items = one[DATABASE].items
        i = 0
        try:
            while time.monotonic() < stop:
                doc_id, region, sku = "o%d-%d" % (index, i), "az"[i % 2], "R%d" % (i % 20)
                items.insert_one({"_id": doc_id, "region": region, "sku": sku})
                with lock:
                    written[doc_id] = sku
                if i % 3 == 0:
                    items.update_one({"_id": doc_id, "region": region}, {"$set": {"sku": "U%d" % (i % 20)}})
                    with lock:
                        written[doc_id] = "U%d" % (i % 20)
                if i % 5 == 0:
                    items.delete_one({"_id": doc_id, "region": region})
                    with lock:
                        del written[doc_id]
                i += 1
        except Exception as exc:  # reported below
            errors.append(exc)

    def mover():
        to = 0
        try:
            while time.monotonic() < stop:
                client.admin.command("moveChunk", ns, find={"region": "z"}, to="shard%d" % to)
                moves[0] += 1
                to = 1 - to
                time.sleep(0.02)
        except Exception as exc:
            errors.append(exc)

    threads = [threading.Thread(target=outside, args=(i, one)) for i, one in enumerate(router_clients())]
    threads.append(threading.Thread(target=mover))
    q(conn, "ALTER FOREIGN TABLE items OPTIONS (ADD consistency 'ordered')")
    for thread in threads:
        thread.start()
    i = 0
    while time.monotonic() < stop:
        doc_id, region, sku = "f%d" % i, "az"[i % 2], "R%d" % (i % 20)
        q(conn, "INSERT INTO items VALUES (%s, %s, %s)", (doc_id, region, sku))
        with lock:
            written[doc_id] = sku
        i += 1
    for thread in threads:
        thread.join()
    q(conn, "ALTER FOREIGN TABLE items OPTIONS (DROP consistency)")
    res.check(not errors, "writes and moves through mongos succeeded: %s" % errors[:3])
    misplaced = misplaced_facts(client, "items")
    by_sku = {}
    for doc_id, sku in written.items():
        by_sku.setdefault(sku, set()).add(doc_id)
    wrong = []
    for sku, ids in sorted(by_sku.items()):
        want = sorted(ids)
        if not wait_for(lambda: [x for x in (routed(conn, sku)[1] or []) if x[0] in "fo"] == want, 10):
            wrong.append((sku, routed(conn, sku), want))
    print("writes racing %d moves: %d facts written, %d misplaced, %d skus read wrong"
          % (moves[0], len(written), len(misplaced), len(wrong)))
    res.check(moves[0] > 3, "the chunk moved while the writes ran: %d moves" % moves[0])
    res.check(not misplaced, "every fact on its chunk's shard: %s" % misplaced[:5])
    res.check(not wrong, "routed reads find the facts written: %s" % wrong[:3])
    verify(res, conn, "after the writes racing moves")


def index_on_stale_routers(res, client, conn):
    """Part 5: create_index leaves no router holding its new index collection's old routing."""
    import psycopg2
    client.admin.command("shardCollection", DATABASE + ".gadgets", key={"region": 1})
    mongo_client.flush_routers(client)
    pg_fixture.create_foreign_table(conn, "gadgets", "_id text, region text, sku text",
                                    options={"shard_key": "region"})
    codes, rounds = [], 3
    for round_ in range(rounds):
        q(conn, "SELECT idxtable.create_index('gadgets', '{sku}', name => 'gadgets_sku')")
        for k in range(FLUSH_INSERTS):
            try:
                q(conn, "INSERT INTO gadgets VALUES (%s, %s, %s)",
                  ("g%d-%d" % (round_, k), "az"[k % 2], "G%d" % k))
            except psycopg2.Error as exc:
                codes.append(exc.pgcode)
        row = q(conn, "SELECT * FROM idxtable.verify_index('gadgets_sku')")[0]
        res.check(all(v == 0 for v in row[1:]), "verify_index(gadgets_sku), round %d: %r" % (round_, row))
        if round_ < rounds - 1:
            q(conn, "SELECT idxtable.drop_index('gadgets_sku')")
            q(conn, "DELETE FROM gadgets")
    print("transactions after create_index on a sharded collection (%d rounds of create, %d INSERTs, drop): "
          "%d failed %s" % (rounds, FLUSH_INSERTS, len(codes), codes))
    res.check(not codes, "no router kept an index collection's old routing: %s" % codes)


def move_z(router_a, ns, shards):
    """Move the chunk of "z" of ns through router A to the other shard; the shard it went to."""
    where = shards[0]
    shards.reverse()
    router_a.admin.command("moveChunk", ns, find={"region": "z"}, to=where)
    return where


def during(conn, holder, sql, params, action):
    """Run sql on conn (its local WHERE condition waits for the advisory lock HOLD, which `holder`, a
    second connection, holds) and, once it waits there (its scan done, its write not begun), action();
    then let it go on. The error it raised, or None."""
    out = []

    def run():
        try:
            q(conn, sql, params)
            out.append(None)
        except Exception as exc:  # psycopg2.Error
            out.append(exc)

    q(holder, "SELECT pg_advisory_lock(%s)", (HOLD,))
    thread = threading.Thread(target=run)
    thread.start()
    try:
        waiting = wait_for(lambda: q(holder, "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' "
                                             "AND objid = %s AND NOT granted", (HOLD,))[0][0] > 0, 10)
        if waiting:
            action()
    finally:
        q(holder, "SELECT pg_advisory_unlock(%s)", (HOLD,))
        thread.join()
    return out[0] if waiting else RuntimeError("the statement never reached its advisory lock")


def first_command_restarted(res, client, conn):
    """Part 6: a transaction whose FIRST command meets a moved chunk is started again and succeeds;
    one whose second command does still fails with 40001."""
    import psycopg2
    ns = DATABASE + ".bolts"
    client.admin.command("shardCollection", ns, key={"region": 1})
    client.admin.command("split", ns, middle={"region": "m"})
    client.admin.command("moveChunk", ns, find={"region": "z"}, to="shard1")
    mongo_client.flush_routers(client)
    router_a, router_b = router_clients()[:2]
    host_b = router_b.address
    pg_fixture.create_server(conn, DATABASE, name="solo", uri="mongodb://%s:%d/" % host_b)
    pg_fixture.create_foreign_table(conn, "bolts", "_id text, region text, sku text", server="solo",
                                    options={"shard_key": "region"})
    pg_fixture.create_foreign_table(conn, "nuts", "_id text, n int", server="solo")
    q(conn, "SELECT idxtable.create_index('bolts', '{sku}', name => 'bolts_sku')")
    conn.notices = collections.deque(maxlen=5000)
    q(conn, "SET client_min_messages = debug1")
    shards = ["shard0", "shard1"]
    codes, restarts, wrong = [], [], []
    holder = pg_fixture.connect(DATABASE)

    def restarted():
        n = sum(1 for m in conn.notices if RESTARTED in m)
        conn.notices.clear()
        return n

    for k in range(FIRST_ROUNDS):
        for stmt in ("insert", "update", "delete"):
            q(conn, "INSERT INTO bolts VALUES (%s, 'z', 'warm')", ("w%d%s" % (k, stmt),))  # B learns the chunks
            restarted()
            if stmt == "insert":
                move_z(router_a, ns, shards)
                try:
                    q(conn, "INSERT INTO bolts VALUES (%s, 'z', %s)", ("b%d" % k, "B%d" % k))
                    exc = None
                except psycopg2.Error as err:
                    exc = err
            elif stmt == "update":
                exc = during(conn, holder, "UPDATE bolts SET sku = %s WHERE _id = %s AND "
                             "pg_advisory_xact_lock_shared(%s)::text = '' RETURNING _id",
                             ("U%d" % k, "w%dupdate" % k, HOLD), lambda: move_z(router_a, ns, shards))
            else:
                exc = during(conn, holder, "DELETE FROM bolts WHERE _id = %s AND "
                             "pg_advisory_xact_lock_shared(%s)::text = ''",
                             ("w%ddelete" % k, HOLD), lambda: move_z(router_a, ns, shards))
            codes.append(getattr(exc, "pgcode", str(exc)) if exc else None)
            restarts.append(restarted())
        rows = q(conn, "SELECT _id, sku FROM bolts WHERE _id IN (%s, %s, %s) ORDER BY _id",
                 ("b%d" % k, "w%dupdate" % k, "w%ddelete" % k))
        if rows != [("b%d" % k, "B%d" % k), ("w%dupdate" % k, "U%d" % k)]:
            wrong.append(rows)
    print("statements beginning a transaction on a stale router: SQLSTATEs %s, restarts %s" % (codes, restarts))
    res.check(codes == [None] * len(codes), "a transaction's first command that meets a moved chunk is sent again: %s"
              % codes)
    res.check(all(n >= 1 for n in restarts), "each such statement started its transaction again (DEBUG1): %s"
              % restarts)
    res.check(not wrong, "the statements' rows are right: %s" % wrong)
    row = q(conn, "SELECT * FROM idxtable.verify_index('bolts_sku')")[0]
    res.check(all(v == 0 for v in row[1:]), "verify_index(bolts_sku) after the restarted transactions: %r" % (row,))

    # the second command of a transaction meets the moved chunk: 40001, nothing left
    q(conn, "INSERT INTO bolts VALUES ('w-second', 'z', 'warm')")
    restarted()
    q(conn, "BEGIN")
    code = None
    try:
        q(conn, "INSERT INTO nuts VALUES ('n1', 1)")
        move_z(router_a, ns, shards)
        q(conn, "INSERT INTO bolts VALUES ('b-second', 'z', 'second')")
        q(conn, "COMMIT")
    except psycopg2.Error as exc:
        code = exc.pgcode
        q(conn, "ROLLBACK")
    left = [c for c, i in (("nuts", "n1"), ("bolts", "b-second"))
            if client[DATABASE][c].find_one({"_id": i}) is not None]
    print("a transaction whose second command meets a moved chunk: SQLSTATE %s, left %s, restarts %d"
          % (code, left or "nothing", restarted()))
    res.check(code == "40001", "a transaction's second command meeting a moved chunk fails with 40001: %s" % code)
    res.check(not left, "nothing of it is left: %s" % left)
    q(conn, "RESET client_min_messages")
    holder.close()
    router_a.close()
    router_b.close()


def main():
    res = Results()
    client = mongo_client.connect()
    if not is_cluster(client):
        print("applier_cluster_moves needs the test server's sharded cluster (IDXTABLE_MONGO_SHARDS=2)")
        res.check(False, "MONGO_URI is not the test server's sharded cluster")
        print(res.summary("applier_cluster_moves"))
        return 1
    conn = setup(res, client)
    if conn is not None:
        parts = sys.argv[1:] or ["moves", "txns", "stale", "race", "flush", "first"]
        if "moves" in parts:
            shard_key_changes(res, client, conn)
        if "txns" in parts:
            cross_shard_transactions(res, client, conn)
        if "stale" in parts:
            stale_transactions(res, client, conn)
        if "race" in parts:
            racing_moves(res, client, conn)
        if "flush" in parts:
            index_on_stale_routers(res, client, conn)
        if "first" in parts:
            first_command_restarted(res, client, conn)
        conn.close()
    print(res.summary("applier_cluster_moves"))
    return 0 if res.failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
