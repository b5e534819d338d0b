#!/usr/bin/python3
"""The applier leaves the FDW's transactions out of its stream only after it
has seen every one that may lack its writes (fdw/applier/applier_exclude.c,
"hazards"), even when their commits are acknowledged before they are
majority-committed.

Needs a replica set of three members in the test server (test/env with
IDXTABLE_MONGO_MEMBERS=3; test/run starts one).  A foreign table "hz" over
a server whose URI asks for w=1, with an index table on k, the stream
leaving the FDW's transactions out (skips_fdw_transactions):

1. both secondaries replicate 2 s late, so the majority commit point (and
   with it what change streams show) is 2 s behind the primary;
2. an outside update moves fact 1 from k = 'a' to 'b'; a session then
   begins an FDW transaction that updates fact 1 to 'c' (its snapshot has
   'b', so it deletes the entry under 'b', which does not exist yet, and
   writes one under 'c');
3. the applier sees the outside update once it is majority-committed and
   writes the entry under 'b' (read from the primary): a write the open
   transaction's snapshot lacks, so that transaction becomes a hazard;
4. the transaction commits 3.5 s later (acknowledged at w: 1 at once; in
   the stream 2 s later).  The applier's wait for its batch to be
   majority-committed and its majority write of its position return
   before that, and its next getMore brings a short batch without the
   commit.  Before the fix that batch
   ended the hazard, the stream left the session's transactions out again
   at once, never saw the commit, and the entry under 'b' stayed beside
   the fact's 'c' (the check below, with the lag still on, failed in 3 of
   3 runs; in a longer run the entries stayed so for 17 s, and verify_index
   found 1 stale entry after the lag);
5. within 8 s of the commit reaching the stream (the lag still on) fact 1
   has its entry under 'c' only; once everything is majority-committed
   verify_index finds nothing wrong, routed reads of 'b' and 'c' are
   right, and the stream leaves the FDW's transactions out again.

The last line is "applier_hazard: N passed, M failed".
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

DATABASE = "idxtable_hazard"
LAG_MS = 2000
COMMIT_DELAY = 3.5


def skips(conn):
    """Does the stream of hz_k leave the FDW's transactions out now?"""
    row = q(conn, "SELECT coalesce(skips_fdw_transactions, false) FROM idxtable.sync_status "
                  "WHERE name = 'hz_k'")
    return bool(row and row[0][0])


def entry_keys(mongo, fact_id):
    """The keys k of the entries of fact fact_id, read from the primary."""
    names = [n for n in mongo[DATABASE].list_collection_names() if n.startswith("idxtable.hz")]
    coll = mongo[DATABASE][names[0]]
    keys = []
    for doc in coll.find({"$or": [{"_id.id": fact_id}, {"id": fact_id}]}):
        ident = doc["_id"]
        keys.append(ident.get("k0") if isinstance(ident, dict) else doc.get("k0"))
    return sorted(str(k) for k in keys)


def set_lag(admin, ms):
    for m in admin.command("replSetGetStatus")["members"]:
        if m["stateStr"] == "SECONDARY":
            admin.command({"setReplicationLag": 1, "member": m["_id"], "lagMs": ms})


def setup(res, mongo):
    mongo.drop_database(DATABASE)
    sep = "&" if "?" in os.environ["MONGO_URI"] else "?"
    conn = pg_fixture.setup_database(DATABASE, uri=os.environ["MONGO_URI"] + sep + "w=1")
    pg_fixture.create_foreign_table(conn, "hz", "_id int, k text")
    q(conn, "INSERT INTO hz SELECT i, 'k' || i FROM generate_series(1, 5) i")
    q(conn, "SELECT idxtable.create_index('hz', '{k}', name => 'hz_k')")
    q(conn, "ANALYZE hz")
    q(conn, "SET idxtable.index_consistency = 'current'")
    q(conn, "SET idxtable.enable_plain_scan = off")
    ok = res.check(wait_for(lambda: streaming(conn, "hz_k"), 60), "the applier does not follow hz_k")
    for i in range(3):
        q(conn, "UPDATE hz SET k = 'w' || %s WHERE _id = 5", (i,))
    ok = ok and res.check(wait_for(lambda: skips(conn), 30),
                          "the stream did not leave the FDW's transactions out within 30 s")
    return conn if ok else None


def hazard(res, mongo, conn):
    """Steps 1-5 (with the lag): a transaction open across the applier's write, committed at w: 1.  Returns its
    session, still open (its lsid stays in the list the stream leaves out)."""
    facts = mongo[DATABASE]["hz"].with_options(write_concern=pymongo.WriteConcern(w=1))
    facts.update_one({"_id": 1}, {"$set": {"k": "a"}})
    res.check(wait_for(lambda: entry_keys(mongo, 1) == ["a"], 30),
              "the entry of fact 1 under 'a': %r" % entry_keys(mongo, 1))
    set_lag(mongo.admin, LAG_MS)
    time.sleep(LAG_MS / 1000.0 + 1.0)  # the lag is in force for what follows
    facts.update_one({"_id": 1}, {"$set": {"k": "b"}})
    other = pg_fixture.connect(DATABASE, autocommit=False)
    with other.cursor() as cur:
        cur.execute("UPDATE hz SET k = 'c' WHERE _id = 1")  # its snapshot has 'b', not its entry
    wrote = wait_for(lambda: "b" in entry_keys(mongo, 1), LAG_MS / 1000.0 + 20)
    res.check(wrote, "the applier wrote no entry under 'b' for the outside update: %r" % entry_keys(mongo, 1))
    # The applier's wait for that batch to be majority-committed, then its position write, return
    # once the majority has them (LAG_MS each); its next getMore is sent then.  Committing a while
    # after the applier's write makes that getMore come after the commit but before the commit is
    # in the stream.
    time.sleep(COMMIT_DELAY)
    other.commit()  # acknowledged at w: 1; majority-committed LAG_MS later
    committed = time.time()
    armed_before = False
    while time.time() < committed + LAG_MS / 1000.0:
        armed_before = armed_before or skips(conn)
        time.sleep(0.1)
    print("the stream left the FDW's transactions out before the commit reached it: %s" % armed_before)
    res.check(wait_for(lambda: entry_keys(mongo, 1) == ["c"], 8),
              "the entries of fact 1 once the commit is in the stream (lag still on): %r" % entry_keys(mongo, 1))
    return other


def settled(res, mongo, conn):
    """Step 5 (after the lag): nothing of 'b' is left."""
    set_lag(mongo.admin, 0)
    mongo[DATABASE]["hz"].with_options(write_concern=pymongo.WriteConcern(w="majority")).insert_one(
        {"_id": 100, "k": "after"})
    res.check(wait_for(lambda: read(conn, "hz", "after") == (True, [100]), 60),
              "a routed read of an outside insert after the lag: %r" % (read(conn, "hz", "after"),))
    time.sleep(2.0)
    res.check(entry_keys(mongo, 1) == ["c"], "the entries of fact 1 (k = 'c'): %r" % entry_keys(mongo, 1))
    verify_clean(res, conn, "hz_k", "after the transaction")
    res.check(read(conn, "hz", "c") == (True, [1]), "routed k = 'c': %r" % (read(conn, "hz", "c"),))
    res.check(read(conn, "hz", "b") == (True, []), "routed k = 'b': %r" % (read(conn, "hz", "b"),))
    res.check(wait_for(lambda: skips(conn), 30), "the stream does not leave the FDW's transactions out again")


def main():
    res = Results()
    start = time.time()
    mongo = mongo_client.connect()
    if len(mongo.admin.command("replSetGetStatus")["members"]) < 3:
        print("applier_hazard: needs a replica set of three members (IDXTABLE_MONGO_MEMBERS=3)")
        print("applier_hazard: 0 passed, 1 failed")
        sys.exit(1)
    conn = setup(res, mongo)
    if conn is not None:
        try:
            other = hazard(res, mongo, conn)
            settled(res, mongo, conn)
            other.close()
        finally:
            set_lag(mongo.admin, 0)
        conn.close()
    print("elapsed %.1fs" % (time.time() - start))
    print(res.summary("applier_hazard"))
    sys.exit(1 if res.failed else 0)


if __name__ == "__main__":
    main()
