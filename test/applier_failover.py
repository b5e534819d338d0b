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
   and so reads there; before, it read a secondary that had neither);
5. with w=1 in the URI (the applier then reads facts as the URI says, not
   at majority): E1 majority-committed, W2 with w: 1 only (secondaries
   paused), a secondary stepped up as soon as the applier has written its
   entry for W2's value; heartbeatFrequencyMS=500 makes libmongoc find the
   new primary when the stream resumes there.  Routed reads find fact 2
   under E1's value only, verify_index is clean (before the applier
   confirmed its batches, 3 of 5 runs: the stream went on past E1 on the
   new primary while the old one rolled back W2 and the applier's entry
   writes: 1 missing, 1 stale);
6. the same, but the applier's entry write for W2's value is held while a
   secondary takes over, and libmongoc retries it on the new primary, which
   never had W2: the applier sees the election when it confirms the batch
   and applies its facts again (before: the entry for W2's value and no
   entry for E1's, 3 of 3 runs).
7. a writeConcernError (91) in the ok replies to the applier's next two
   writes (failCommand) is logged with its code and message (before:
   "MongoDB error 0:", as for the position's majority write interrupted by
   a step-up), and the applier then applies the insert.

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
LOG = os.path.join(os.environ.get("IDXTABLE_ENV_DIR", "/tmp/idxtable_fdw_env"), "pg", "server.log")


def index_collection(mongo):
    names = [n for n in mongo[DATABASE].list_collection_names() if n.startswith("idxtable.fo")]
    return mongo[DATABASE][names[0]] if names else None


def entries_of(coll, fact_id):
    """The keys of the entries of fact fact_id, read from the primary (local)."""
    return sorted(str(d) for d in coll.find({"$or": [{"_id.id": fact_id}, {"id": fact_id}]}))


def members(admin):
    return admin.command("replSetGetStatus")["members"]


def secondaries_of(admin):
    return [m for m in members(admin) if m["stateStr"] == "SECONDARY"]


def hold_applier(admin, commands, times, block_ms):
    """The applier's next `times` commands named in `commands` are held block_ms each."""
    admin.command("configureFailPoint", "failCommand", mode={"times": times},
                  data={"failCommands": commands, "blockConnection": True, "blockTimeMS": block_ms,
                        "appName": "idxtable_fdw applier"})


def majority_then_w1(admin, facts, fact_id, kept, lost):
    """E1 (k = kept) majority-committed, the secondaries paused, then W2 (k = lost) with w: 1 only."""
    facts.with_options(write_concern=pymongo.WriteConcern(w="majority")).update_one(
        {"_id": fact_id}, {"$set": {"k": kept}})
    for m in secondaries_of(admin):
        admin.command({"setReplicationLag": 1, "member": m["_id"], "paused": True})
    facts.with_options(write_concern=pymongo.WriteConcern(w=1)).update_one(
        {"_id": fact_id}, {"$set": {"k": lost}})


def step_up_secondary(admin, secondaries):
    """The first of the (paused) secondaries, which lack W2, takes over; replication goes on."""
    credentials = {"username": os.environ["MONGO_USER"], "password": os.environ.get("MONGO_PASSWORD", ""),
                   "authSource": "admin"} if os.environ.get("MONGO_USER") else {}
    secondary = pymongo.MongoClient("mongodb://%s/?directConnection=true" % secondaries[0]["name"],
                                    **credentials)
    secondary.admin.command("replSetStepUp")
    secondary.close()
    for m in secondaries:
        admin.command({"setReplicationLag": 1, "member": m["_id"], "paused": False})


def after_rollback(res, conn, facts, fact_id, kept, lost, marker, what):
    """W2 was rolled back: fact_id has k = kept; after an outside insert (marker: _id, k) routed reads
    find it under kept only, and verify_index is clean."""
    doc = facts.find_one({"_id": fact_id})
    res.check(doc and doc.get("k") == kept, "fact %d after the rollback%s: %r" % (fact_id, what, doc))
    facts.insert_one({"_id": marker[0], "k": marker[1]})
    deadline = time.time() + 60
    got_kept = got_lost = None
    while time.time() < deadline:
        got_kept, got_lost = read(conn, "fo", kept), read(conn, "fo", lost)
        if (got_kept == (True, [fact_id]) and got_lost == (True, []) and
                read(conn, "fo", marker[1]) == (True, [marker[0]])):
            break
        time.sleep(0.5)
    res.check(got_kept == (True, [fact_id]), "routed k = %r after the failover%s: %r" % (kept, what, got_kept))
    res.check(got_lost == (True, []), "routed k = %r after the failover%s: %r" % (lost, what, got_lost))
    verify_clean(res, conn, "fo_k", "after the failover" + what)


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


def rollback_with_w1(res, conn, mongo, facts):
    """5. with w=1 in the URI: an election right after the applier applied a batch."""
    admin = mongo.admin
    sep = "&" if "?" in os.environ["MONGO_URI"] else "?"
    restarts = q(conn, "SELECT restarts FROM idxtable.appliers")[0][0]
    q(conn, "ALTER SERVER mongo OPTIONS (SET uri %s)", (os.environ["MONGO_URI"] + sep + "w=1&heartbeatFrequencyMS=500",))
    res.check(wait_for(lambda: q(conn, "SELECT restarts FROM idxtable.appliers")[0][0] > restarts
                       and streaming(conn, "fo_k"), 60),
              "the applier does not follow fo_k again after w=1 came into the uri")
    secondaries = secondaries_of(admin)
    # the applier applies (and stores its position, at most once a second) an outside insert ...
    facts.insert_one({"_id": 102, "k": "before w1"})
    res.check(wait_for(lambda: read(conn, "fo", "before w1") == (True, [102]), 60),
              "a routed read of an outside insert before the w=1 failover")
    # ... and, well within a second, E1 majority-committed, then W2 with w: 1 only, while the
    # applier's read for E1 is held: its next position comes after the failover
    hold_applier(admin, ["find"], 1, 100)
    majority_then_w1(admin, facts, 2, "x", "y")
    # the applier reads W2 (w=1: facts as the URI says) and writes its entry (w: 1); the election
    # follows at once, before the applier stores its next position
    index = index_collection(mongo)
    res.check(wait_for(lambda: any("'y'" in e for e in entries_of(index, 2)), 10),
              "the applier wrote no entry for W2 (w=1): %s" % entries_of(index, 2))
    step_up_secondary(admin, secondaries)
    status = admin.command("replSetGetStatus")
    res.check(status.get("rollbacks", 0) >= 2, "no second rollback happened: %r" % status.get("rollbacks"))
    after_rollback(res, conn, facts, 2, "x", "y", (101, "after w1"), " (w=1)")


def retried_write_with_w1(res, conn, mongo, facts):
    """6. with w=1 in the URI: the applier's entry write, held while a secondary takes over, is retried
    on the new primary (libmongoc's retryable writes)."""
    admin = mongo.admin
    secondaries = secondaries_of(admin)
    facts.insert_one({"_id": 103, "k": "before retry"})
    res.check(wait_for(lambda: read(conn, "fo", "before retry") == (True, [103]), 60),
              "a routed read of an outside insert before the retried write")
    # the applier's two reads for E1 (entries, then facts) and its first write are held 0.8 s each:
    # W2 lands before its fact read, the election during its write
    hold_applier(admin, ["find", "update", "delete", "insert"], 3, 800)
    majority_then_w1(admin, facts, 3, "p", "q")
    time.sleep(1.9)
    step_up_secondary(admin, secondaries)
    after_rollback(res, conn, facts, 3, "p", "q", (104, "after retry"), " (w=1, a retried write)")


def write_concern_error(res, conn, admin, facts):
    """7. a write concern error in an ok reply to the applier's write is logged with its code."""
    start = len(log_text(0).encode("utf-8"))
    # the applier's first update after the insert writes its entry, the second stores its position
    admin.command("configureFailPoint", "failCommand", mode={"skip": 1, "times": 1},
                  data={"failCommands": ["update"], "appName": "idxtable_fdw applier",
                        "writeConcernError": {"code": 91, "errmsg": "Replication is being shut down"}})
    facts.insert_one({"_id": 105, "k": "wce"})
    res.check(wait_for(lambda: "error 91: Replication is being shut down" in log_text(start), 30),
              "the write concern error is not logged with its code: %r"
              % [line for line in log_text(start).splitlines() if "error" in line][:3])
    res.check("MongoDB error 0:" not in log_text(start), "an error logged without MongoDB's code: %r"
              % [line for line in log_text(start).splitlines() if "error 0:" in line][:3])
    admin.command("configureFailPoint", "failCommand", mode="off")
    res.check(wait_for(lambda: read(conn, "fo", "wce") == (True, [105]), 60),
              "a routed read of the insert after the write concern error")


def log_text(offset):
    """The PostgreSQL server log of test/env from byte offset on ("" if there is none here)."""
    try:
        with open(LOG, "rb") as f:
            f.seek(offset)
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


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

    secondaries = secondaries_of(admin)
    # 1. E1 majority-committed, then W2 with w: 1 only, while the applier's first read for E1 is held
    hold_applier(admin, ["find"], 1, 1500)
    majority_then_w1(admin, facts, 1, "a", "b")

    # 2. nothing of W2 in the index table while it can be rolled back
    time.sleep(3.0)  # the held getMore returned E1 long ago; the applier applied it
    seen = entries_of(index, 1)
    res.check(not any("'b'" in e for e in seen),
              "an entry for a write not majority-committed: %s" % seen)

    # 3. a secondary without W2 takes over: W2 is rolled back
    step_up_secondary(admin, secondaries)
    status = admin.command("replSetGetStatus")
    res.check(status.get("rollbacks", 0) >= 1, "no rollback happened: %r" % status.get("rollbacks"))
    after_rollback(res, conn, facts, 1, "a", "b", (100, "after"), "")
    lagging_secondaries(res, conn, admin, facts)
    rollback_with_w1(res, conn, mongo, facts)
    retried_write_with_w1(res, conn, mongo, facts)
    write_concern_error(res, conn, admin, facts)
    conn.close()
    print("elapsed %.1fs" % (time.time() - start))
    print(res.summary("applier_failover"))
    sys.exit(1 if res.failed else 0)


if __name__ == "__main__":
    main()
