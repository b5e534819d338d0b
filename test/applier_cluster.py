#!/usr/bin/python3
"""The applier and consistent reads through mongos (issue 28, items 1-3):
cold shards, several routers, high-water-mark tokens at shared times.

Needs the test server's sharded cluster (test/env with
IDXTABLE_MONGO_SHARDS=2 IDXTABLE_MONGO_ROUTERS=2, idle shards writing a
no-op every 10 s; test/run starts one).  shard0 is the primary shard of
the database; items is sharded on {region: 1}, split at "m", the chunk of
"z" on shard1.  The foreign server's URI names router 0 only; outside
writers use router 0 or router 1.  items has a unique index table on sku.

T1 (cold shard): shard1 idle; three times an outside insert through
   router 0, then at once a routed read of its sku and an FDW insert of a
   new unique sku.  Each finishes within 1 s with the right rows.  Before
   the fix each waited for shard1's next no-op, since mongos released
   nothing later than it: reads failed with IX001 after 5.0 s (or were not
   routed once the index was known behind), inserts took 4.1 to 5.0 s.
T2 (several routers): the shards level at router 0's time, then the
   applier's next getMore on shard1 is held 3 s (asked through router 1),
   so router 0 hears nothing of shard1; an outside insert through router 1
   lands on shard1.  A routed read of its sku through router 0 finds it;
   an FDW insert of the same sku (on shard0) fails with 23505.  Before the
   fix the read's time was router 0's clock (a ping), before the insert:
   the read returned 0 rows, and the FDW insert of the duplicate key
   succeeded.  Then its facts are removed and the index catches up.
T3 (a) (high-water marks): shard0 and shard1 at one cluster time T: an
   outside insert on shard0 at T, a no-op on shard1 at T, shard1 idle.  A
   routed read of its sku finds it within 1 s.  Before the fix the
   stream's high-water mark at T counted as applied through T, so the
   read ended at once with 0 rows (right after T1; later in this script,
   IX001 or not routed, the index being behind).
T3 (b) (arming at a shared time): the stream leaves the FDW's
   transactions out; the same two writes at one time T; then a new
   PostgreSQL session writes through the FDW, so the stream is armed again
   while mongos still holds the insert back.  Once every shard moved on,
   verify_index is clean and a routed read finds it.  Before the fix (also
   with only item 3's part of it undone) the arming reopened the stream at
   T + 1 and the insert was skipped for good: verify_index found 1
   missing entry and the routed read 0 rows.
T4 (privilege): a second server whose user mapping's MongoDB user has
   readWrite only: create_index fails with 42501 naming appendOplogNote on
   the cluster; with a role that grants it the index is created; once the
   role is revoked, a routed current read fails with 42501 and a message
   that names appendOplogNote.

The last line is "applier_cluster: N passed, M failed".
"""
import os
import sys
import time

import psycopg2
import pymongo
from bson.timestamp import Timestamp

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures"))
from results import Results  # noqa: E402  (test/fixtures)
import mongo_client  # noqa: E402
import pg_fixture  # noqa: E402  (test/fixtures)
from routed_reads import q, streaming, wait_for  # noqa: E402

DATABASE = "idxtable_cluster"
INDEX = "items_sku"
FAST_S = 1.0


def router_clients():
    """A pymongo client of each router named in MONGO_URI (their own cluster-time gossip)."""
    hosts = os.environ["MONGO_URI"].split("//", 1)[1].split("/", 1)[0].replace("\\,", ",").split(",")
    kwargs = {"serverSelectionTimeoutMS": 10000, "directConnection": False}
    if os.environ.get("MONGO_USER"):
        kwargs.update(username=os.environ["MONGO_USER"], password=os.environ.get("MONGO_PASSWORD", ""),
                      authSource="admin")
    return [pymongo.MongoClient("mongodb://%s/" % h, **kwargs) for h in hosts], hosts


def timed(fn):
    """(fn()'s result or (None, SQLSTATE), seconds)."""
    start = time.monotonic()
    try:
        got = fn()
    except psycopg2.Error as exc:
        got = (None, exc.pgcode)
    return got, time.monotonic() - start


def routed_ids(conn, sku):
    """The _ids of a routed read of sku (the plan must go through the index table), or (None, SQLSTATE)."""
    try:
        plan = "\n".join(r[0] for r in q(conn, "EXPLAIN (COSTS OFF) SELECT _id FROM items WHERE sku = %s",
                                         (sku,)))
        if "Index Table" not in plan:
            return ("not routed", plan)
        return sorted(r[0] for r in q(conn, "SELECT _id FROM items WHERE sku = %s", (sku,)))
    except psycopg2.Error as exc:
        return (None, exc.pgcode)


def skips(conn):
    """Does the stream of items_sku leave the FDW's transactions out now?"""
    row = q(conn, "SELECT coalesce(skips_fdw_transactions, false) FROM idxtable.sync_status WHERE name = %s",
            (INDEX,))
    return bool(row and row[0][0])


def verify(conn):
    """verify_index(items_sku)'s row."""
    return q(conn, "SELECT * FROM idxtable.verify_index(%s)", (INDEX,))[0]


def setup(res, r0, hosts):
    """The sharded collection, the foreign table over router 0, the unique index table."""
    r0.drop_database(DATABASE)
    try:
        r0.admin.command("enableSharding", DATABASE)
    except pymongo.errors.OperationFailure:
        pass  # (not needed from MongoDB 6.0 on)
    r0.admin.command("shardCollection", DATABASE + ".items", key={"region": 1})
    r0.admin.command("split", DATABASE + ".items", middle={"region": "m"})
    r0.admin.command("moveChunk", DATABASE + ".items", find={"region": "z"}, to="shard1")
    r0[DATABASE].items.insert_many([{"_id": "s%d" % i, "region": "az"[i % 2], "sku": "S%d" % i}
                                    for i in range(6)])
    conn = pg_fixture.setup_database(DATABASE, uri="mongodb://%s/" % hosts[0])
    pg_fixture.create_foreign_table(conn, "items", "_id text, region text, sku text, note text",
                                    options={"shard_key": "region"})
    q(conn, "SELECT idxtable.create_index('items', '{sku}', is_unique => true, name => %s)", (INDEX,))
    q(conn, "ANALYZE items")
    q(conn, "SET idxtable.index_consistency = 'current'")
    q(conn, "SET idxtable.enable_plain_scan = off")
    ok = res.check(wait_for(lambda: streaming(conn, INDEX), 60), "the applier does not follow %s" % INDEX)
    return conn if ok else None


def cold_shard(res, r0, conn):
    """T1: routed reads and unique-key writes right after outside writes, shard1 idle."""
    for k in range(3):
        r0[DATABASE].items.insert_one({"_id": "o%d" % k, "region": "a", "sku": "X%d" % k})
        got, secs = timed(lambda: routed_ids(conn, "X%d" % k))
        print("T1 read %d: %r in %.2f s" % (k, got, secs))
        res.check(got == ["o%d" % k] and secs < FAST_S,
                  "T1: routed read %d after an outside insert: %r in %.2f s" % (k, got, secs))
        got, secs = timed(lambda: q(conn, "INSERT INTO items VALUES (%s, 'a', %s)", ("f%d" % k, "U%d" % k)))
        print("T1 insert %d: %r in %.2f s" % (k, got, secs))
        res.check(got is None and secs < FAST_S,
                  "T1: FDW insert %d of a unique key: %r in %.2f s" % (k, got, secs))


def shared_time(res, r0, r1, name, what):
    """Insert {_id: name<n>, region: "a", sku: name.upper()<n>} through router 0 on shard0, then a no-op
    on shard1 through router 1 at the very same cluster time (both shard clocks 5 s ahead of the
    cluster's); tried again (n + 1) if another write took that time first.  Returns (_id, sku)."""
    for n in range(5):
        doc = {"_id": "%s%d" % (name, n), "region": "a", "sku": "%s%d" % (name.upper(), n)}
        base = r0.admin.command("appendOplogNote", data={"t3": "base"})["operationTime"]
        r0.admin.command("setShardClock", "shard0", time=Timestamp(base.time + 5, 1))
        at = r0[DATABASE].command({"insert": "items", "documents": [doc]})["operationTime"]
        r1.admin.command("setShardClock", "shard1", time=Timestamp(at.time, at.inc - 1))
        noted = r1.admin.command({"runOnShard": "shard1", "db": "admin",
                                  "command": {"appendOplogNote": 1, "data": {"t3": 1}}}).get("operationTime")
        print("%s: insert of %s at %s, shard1's no-op at %s" % (what, doc["_id"], at, noted))
        if at == noted:
            break
    res.check(at == noted, "%s: the two shards wrote at one time: %s, %s" % (what, at, noted))
    return doc["_id"], doc["sku"]


def shared_timestamp(res, r0, r1, conn):
    """T3 (a): a high-water mark at T comes before an event at T of another shard."""
    ident, sku = shared_time(res, r0, r1, "e", "T3 (a)")
    got, secs = timed(lambda: routed_ids(conn, sku))
    print("T3 (a) read: %r in %.2f s" % (got, secs))
    res.check(got == [ident] and secs < FAST_S, "T3 (a): routed read of %s: %r in %.2f s" % (sku, got, secs))


def arming_at_shared_time(res, r0, r1, conn):
    """T3 (b): the stream armed again (a new FDW session) while an event at T is held back."""
    q(conn, "UPDATE items SET note = 'n' WHERE _id = 'f0'")
    armed = wait_for(lambda: skips(conn), 30)
    res.check(armed, "T3 (b): the stream did not leave the FDW's transactions out within 30 s")
    if not armed:
        return
    ident, sku = shared_time(res, r0, r1, "h", "T3 (b)")
    time.sleep(1.5)
    other = pg_fixture.connect(DATABASE)
    q(other, "UPDATE items SET note = 'm' WHERE _id = 'f1'")  # a new session: the stream arms again
    time.sleep(3.0)
    other.close()
    r0.admin.command("appendOplogNote", data={"t3": "release"})  # every shard moves on
    found = wait_for(lambda: routed_ids(conn, sku) == [ident], 5)
    row = verify(conn)
    print("T3 (b): routed read of %s %r, verify_index %r" % (sku, routed_ids(conn, sku), row))
    res.check(found, "T3 (b): routed read of %s after the arming: %r" % (sku, routed_ids(conn, sku)))
    res.check(all(v == 0 for v in row[1:]), "T3 (b): verify_index(%s) after the arming: %r" % (INDEX, row))


def hold_shard1(r0, r1):
    """Every shard moved on and the applier caught up (1 s), then the applier's next getMore on shard1
    (router 0 polls it) waits 3 s there; asked through router 1, so router 0's clock stays."""
    r0.admin.command("appendOplogNote", data={"t2": "settle"})
    time.sleep(1.0)
    # both shards write their no-ops at one time, the latest router 0 knows (it gossips it to both)
    r0.admin.command("appendOplogNote", data={"t2": "level"})
    time.sleep(0.2)
    r1.admin.command({"runOnShard": "shard1", "db": "admin", "command": {
        "configureFailPoint": "failCommand", "mode": {"times": 1},
        "data": {"failCommands": ["getMore"], "blockConnection": True, "blockTimeMS": 3000,
                 "appName": "idxtable_fdw applier"}}})
    time.sleep(0.3)


def other_router(res, r0, r1, conn):
    """T2: a write acknowledged through router 1 on shard1, router 0 not told."""
    for step, (sku, fdw_id) in enumerate((("K", None), ("K2", "d"))):
        hold_shard1(r0, r1)
        written = r1[DATABASE].command({"insert": "items",
                                        "documents": [{"_id": "w%d" % step, "region": "z", "sku": sku}]})
        pinged = r0.admin.command("ping")["operationTime"]
        print("T2 %s: written through router 1 at %s, router 0's clock %s" % (sku, written["operationTime"],
                                                                            pinged))
        if fdw_id is None:
            got, secs = timed(lambda: routed_ids(conn, sku))
            print("T2 read: %r in %.2f s" % (got, secs))
            res.check(got == ["w%d" % step], "T2: routed read through router 0 of a write through router 1: "
                                             "%r in %.2f s" % (got, secs))
        else:
            got, secs = timed(lambda: q(conn, "INSERT INTO items VALUES (%s, 'a', %s)", (fdw_id, sku)))
            print("T2 insert: %r in %.2f s" % (got, secs))
            res.check(got == (None, "23505"), "T2: FDW insert of a unique key written through router 1: %r "
                                              "(expected a unique violation)" % (got,))
        time.sleep(3.0)  # the hold is over


def settle(res, r0, conn):
    """After T2: its facts removed (a duplicate let in would stay a conflict), every shard moved on, the
    index table current again (a routed read of an outside insert)."""
    r0[DATABASE].items.delete_many({"_id": {"$in": ["w0", "w1", "d"]}})
    r0[DATABASE].items.insert_one({"_id": "settled", "region": "a", "sku": "SETTLED"})
    r0.admin.command("appendOplogNote", data={"settle": 1})
    res.check(wait_for(lambda: routed_ids(conn, "SETTLED") == ["settled"], 30),
              "after T2: a routed read of an outside insert: %r" % (routed_ids(conn, "SETTLED"),))


def failure(conn, sql):
    """(SQLSTATE, message) of a statement that should fail, or ("no error", None)."""
    try:
        q(conn, sql)
        return ("no error", None)
    except psycopg2.Error as exc:
        return (exc.pgcode, exc.pgerror)


def no_note_privilege(res, r0, hosts, conn):
    """T4: a user mapping whose MongoDB user may not run appendOplogNote: create_index refuses it, and
    a routed current read is an ERROR that says so (42501), not a read against a time that may miss
    writes."""
    for command in ({"dropUser": "idx_no_note"}, {"dropRole": "idx_note"}):
        try:
            r0.admin.command(command)
        except pymongo.errors.OperationFailure:
            pass
    r0.admin.command("createRole", "idx_note", privileges=[
        {"resource": {"cluster": True}, "actions": ["appendOplogNote"]}], roles=[])
    r0.admin.command("createUser", "idx_no_note", pwd="no-note-pw",
                     roles=[{"role": "readWrite", "db": DATABASE}])
    pg_fixture.create_server(conn, DATABASE, name="mongo_nn", uri="mongodb://%s/" % hosts[0],
                             credentials=False, mapping_options=[("username", "idx_no_note"),
                                                                 ("password", "no-note-pw")])
    pg_fixture.create_foreign_table(conn, "items_nn", "_id text, region text, sku text, note text",
                                    server="mongo_nn", collection="items", options={"shard_key": "region"})
    got = failure(conn, "SELECT idxtable.create_index('items_nn', '{sku}', name => 'items_nn_sku')")
    print("T4: create_index without the appendOplogNote privilege: %r" % (got,))
    res.check(got[0] == "42501" and "appendOplogNote on the cluster" in (got[1] or ""),
              "T4: create_index without the appendOplogNote privilege: %r" % (got,))
    r0.admin.command("grantRolesToUser", "idx_no_note", roles=[{"role": "idx_note", "db": "admin"}])
    q(conn, "SELECT idxtable.create_index('items_nn', '{sku}', name => 'items_nn_sku')")
    q(conn, "ANALYZE items_nn")
    res.check(wait_for(lambda: streaming(conn, "items_nn_sku"), 30), "T4: the applier does not follow items_nn_sku")
    r0.admin.command("revokeRolesFromUser", "idx_no_note", roles=[{"role": "idx_note", "db": "admin"}])
    got = failure(conn, "SELECT _id FROM items_nn WHERE sku = 'S1'")
    print("T4: routed read without the appendOplogNote privilege: %r" % (got,))
    res.check(got[0] == "42501" and "may not run appendOplogNote" in (got[1] or ""),
              "T4: a routed current read without the appendOplogNote privilege: %r" % (got,))


def main():
    res = Results()
    start = time.time()
    clients, hosts = router_clients()
    if len(clients) < 2 or clients[0].admin.command("hello").get("msg") != "isdbgrid":
        print("applier_cluster: needs a sharded cluster of two routers (IDXTABLE_MONGO_SHARDS=2 "
              "IDXTABLE_MONGO_ROUTERS=2)")
        print("applier_cluster: 0 passed, 1 failed")
        sys.exit(1)
    r0, r1 = clients[:2]
    conn = setup(res, r0, hosts)
    if conn is not None:
        cold_shard(res, r0, conn)
        other_router(res, r0, r1, conn)
        settle(res, r0, conn)
        shared_timestamp(res, r0, r1, conn)
        arming_at_shared_time(res, r0, r1, conn)
        no_note_privilege(res, r0, hosts, conn)
        conn.close()
    print("elapsed %.1fs" % (time.time() - start))
    print(res.summary("applier_cluster"))
    sys.exit(1 if res.failed else 0)


if __name__ == "__main__":
    main()
