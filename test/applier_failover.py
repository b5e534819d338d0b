#!/usr/bin/python3
"""The applier never writes an entry for a write that a failover rolls back.

Needs a replica set of three members in the test server (test/env with
IDXTABLE_MONGO_MEMBERS=3; test/run starts one).  A foreign table "fo" over
a server whose URI names no write concern (mongod 5.0+ and the test server
take majority), with an index table on k:

1. the applier's next read is held (failCommand blockConnection on its
   first find), an outside update of fact 1 to k = 'a' is
   majority-committed (the applier reads for its event, held), the
   secondaries stop replicating, and a second outside update of fact 1 to
   k = 'b' is acknowledged with w: 1 only;
2. while that write is not majority-committed, no entry of fact 1 under
   'b' may exist: the applier must not read what a failover can still
   roll back (before: it read k = 'b' and wrote its entry, which waited
   for the paused majority, and was retried on the new primary);
3. a secondary that lacks the second update is stepped up: the update is
   rolled back; after an outside write on the new primary, routed reads
   with current find fact 1 under 'a' and not under 'b', and verify_index
   is clean;
4. with readPreference=secondaryPreferred in the URI and both secondaries
   1.5 s behind, a routed read with current right after an outside insert
   finds it (it waited for the applier, whose entries are on the primary,
   and so reads there; before, it read a secondary that had neither).

The last line is "applier_failover: N passed, M failed".
"""
import os
import sys
import time

import pymongo

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures"))
from results import Results  # noqa: E402  (test/fixtures)
import mongo_client  # noqa: E402
import pg_fixture  # noqa: E402  (test/fixtures)
from routed_reads import q, read, streaming, verify_clean, wait_for  # noqa: E402

DATABASE = "idxtable_failover"


def index_collection(mongo):
    names = [n for n in mongo[DATABASE].list_collection_names() if n.startswith("idxtable.fo")]
    return mongo[DATABASE][names[0]] if names else None


def entries_of(coll, fact_id):
    """The keys of the entries of fact fact_id, read from the primary (local)."""
    return sorted(str(d) for d in coll.find({"$or": [{"_id.id": fact_id}, {"id": fact_id}]}))


def members(admin):
    return admin.command("replSetGetStatus")["members"]


def lagging_secondaries(res, conn, admin, facts):
    """4. secondaries that lag, under readPreference=secondaryPreferred."""
    sep = "&" if "?" in os.environ["MONGO_URI"] else "?"
    restarts = q(conn, "SELECT restarts FROM idxtable.appliers")[0][0]
    q(conn, "ALTER SERVER mongo OPTIONS (SET uri %s)",
      (os.environ["MONGO_URI"] + sep + "w=1&readPreference=secondaryPreferred",))
    # the applier reconnects with the new uri (the same hosts: no rebuild), then follows again
    res.check(wait_for(lambda: q(conn, "SELECT restarts FROM idxtable.appliers")[0][0] > restarts
                       and streaming(conn, "fo_k"), 60),
              "the applier does not follow fo_k again after the uri changed")
    res.check(q(conn, "SELECT state FROM idxtable.index_defs WHERE name = 'fo_k'")[0][0] in ("valid", "v"),
              "fo_k is not valid after a new readPreference in the uri")
    for m in members(admin):
        if m["stateStr"] == "SECONDARY":
            admin.command({"setReplicationLag": 1, "member": m["_id"], "lagMs": 1500})
    try:
        facts.with_options(write_concern=pymongo.WriteConcern(w=1)).insert_one({"_id": 200, "k": "lagged"})
        got = read(conn, "fo", "lagged")
        res.check(got == (True, [200]), "a routed read with current right after an outside insert, "
                  "secondaries 1.5 s behind: %r" % (got,))
        q(conn, "SET idxtable.index_consistency = 'any'")
        q(conn, "SET idxtable.enable_plain_scan = on")
        facts.with_options(write_concern=pymongo.WriteConcern(w=1)).insert_one({"_id": 201, "k": "stale"})
        plain = sorted(r[0] for r in q(conn, "SELECT _id FROM fo WHERE _id = 201"))
        print("a plain read under any right after an insert, on a lagging secondary: %r" % plain)
    finally:
        q(conn, "SET idxtable.index_consistency = 'current'")
        q(conn, "SET idxtable.enable_plain_scan = off")
        for m in members(admin):
            if m["stateStr"] == "SECONDARY":
                admin.command({"setReplicationLag": 1, "member": m["_id"], "lagMs": 0})


def main():
    res = Results()
    start = time.time()
    mongo = mongo_client.connect()
    admin = mongo.admin
    if len(members(admin)) < 3:
        print("applier_failover: needs a replica set of three members (IDXTABLE_MONGO_MEMBERS=3)")
        print("applier_failover: 0 passed, 1 failed")
        sys.exit(1)
    mongo.drop_database(DATABASE)
    conn = pg_fixture.setup_database(DATABASE)
    pg_fixture.create_foreign_table(conn, "fo", "_id int, k text")
    q(conn, "INSERT INTO fo SELECT i, 'k' || i FROM generate_series(1, 5) i")
    q(conn, "SELECT idxtable.create_index('fo', '{k}', name => 'fo_k')")
    q(conn, "ANALYZE fo")
    q(conn, "SET idxtable.index_consistency = 'current'")
    q(conn, "SET idxtable.enable_plain_scan = off")
    facts = mongo[DATABASE]["fo"]
    if not res.check(wait_for(lambda: streaming(conn, "fo_k"), 60), "the applier does not follow fo_k"):
        print(res.summary("applier_failover"))
        sys.exit(1)
    index = index_collection(mongo)
    time.sleep(1.0)

    secondaries = [m for m in members(admin) if m["stateStr"] == "SECONDARY"]
    # 1. E1 majority-committed, then W2 with w: 1 only, while the applier's first read for E1 is held
    admin.command("configureFailPoint", "failCommand", mode={"times": 1},
                  data={"failCommands": ["find"], "blockConnection": True, "blockTimeMS": 1500,
                        "appName": "idxtable_fdw applier"})
    facts.with_options(write_concern=pymongo.WriteConcern(w="majority")).update_one(
        {"_id": 1}, {"$set": {"k": "a"}})
    for m in secondaries:
        admin.command({"setReplicationLag": 1, "member": m["_id"], "paused": True})
    facts.with_options(write_concern=pymongo.WriteConcern(w=1)).update_one({"_id": 1}, {"$set": {"k": "b"}})

    # 2. nothing of W2 in the index table while it can be rolled back
    time.sleep(3.0)  # the held getMore returned E1 long ago; the applier applied it
    seen = entries_of(index, 1)
    res.check(not any("'b'" in e for e in seen),
              "an entry for a write not majority-committed: %s" % seen)

    # 3. a secondary without W2 takes over: W2 is rolled back
    credentials = {"username": os.environ["MONGO_USER"], "password": os.environ.get("MONGO_PASSWORD", ""),
                   "authSource": "admin"} if os.environ.get("MONGO_USER") else {}
    secondary = pymongo.MongoClient("mongodb://%s/?directConnection=true" % secondaries[0]["name"],
                                    **credentials)
    secondary.admin.command("replSetStepUp")
    for m in secondaries:
        admin.command({"setReplicationLag": 1, "member": m["_id"], "paused": False})
    status = admin.command("replSetGetStatus")
    res.check(status.get("rollbacks", 0) >= 1, "no rollback happened: %r" % status.get("rollbacks"))
    doc = facts.find_one({"_id": 1})
    res.check(doc and doc.get("k") == "a", "fact 1 after the rollback: %r" % doc)
    facts.insert_one({"_id": 100, "k": "after"})
    deadline = time.time() + 60
    got_a = got_b = None
    while time.time() < deadline:
        got_a, got_b = read(conn, "fo", "a"), read(conn, "fo", "b")
        if got_a == (True, [1]) and got_b == (True, []):
            break
        time.sleep(0.5)
    res.check(got_a == (True, [1]), "routed k = 'a' after the failover: %r" % (got_a,))
    res.check(got_b == (True, []), "routed k = 'b' after the failover: %r" % (got_b,))
    verify_clean(res, conn, "fo_k", "after the failover")
    lagging_secondaries(res, conn, admin, facts)
    conn.close()
    print("elapsed %.1fs" % (time.time() - start))
    print(res.summary("applier_failover"))
    sys.exit(1 if res.failed else 0)


if __name__ == "__main__":
    main()
