#!/usr/bin/python3
"""Test of the change-stream applier: index tables stay correct when other clients write to MongoDB.

Run inside ``eval "$(test/env start)"`` (PostgreSQL with idxtable_fdw in shared_preload_libraries; with
IDXTABLE_MONGO_DURABLE=1 for the restart case).  A foreign table ``cust`` with three index tables
({lower(email)} unique, {town} INCLUDE {first_name}, multi-valued {tags}); then:

- outside writes: pymongo inserts, updates keys and included columns, replaces, deletes, changes array
  elements and commits a transaction of several documents; once the applier has applied them, every
  index's verify_index is clean and routed queries (idxtable.enable_plain_scan = off) equal the same
  queries unrouted (idxtable.enable_index_routing = off);
- FDW writes: the applier writes nothing to the index collections (the test server's recentCommands,
  commands with appName "idxtable_fdw applier");
- FDW writes in transaction mode carry a marker: the applier reads neither their facts nor their entries,
  while an outside write of the same period is applied; a transaction that also writes the collection
  through a foreign table without the index tables is applied (the server's transaction events carry
  lsid and txnNumber, checked with pymongo's watch());
- a foreign write in transaction mode to a document another client changed after the MongoDB
  transaction started: SQLSTATE 40001, nothing of the transaction left, a retry commits;
- FDW inserts and deletes in ordered mode: the applier takes those facts from their events and reads only
  their entries;
- updates that change no field of an index table (outside, or through the FDW in ordered mode) are not
  read back for it, while updates of its fields are applied;
- an update of fields of all three index tables is read once for the three, not once for each;
- batches of outside changes cost the applier no ping (the time after its writes is their replies');
- idxtable.applier_batch_delay: 40 single outside inserts are applied in a few batches, and a query that
  waits for the applier ends a delay of 10 s at once;
- the applier killed (pg_terminate_backend) during an outside load: started again, nothing lost;
- the test server restarted (test/env restart-mongo; skipped unless IDXTABLE_MONGO_DURABLE=1): the
  applier comes back, resumes from its stored position (the server's history survives a restart with
  --dbpath, as mongod's oplog does: no rebuild) and nothing is lost;
- a server with a small history (--change-history 50, its own test server): the applier is stopped, more
  than 50 changes are written, the stream cannot resume (286): the index becomes stale, is rebuilt and is
  valid again, with every change in it;
- the fact collection dropped: its index tables become failed;
- measured: events/s applied with 1 and with 3 index tables (printed).

"Applied" is observed from MongoDB alone: a marker document written outside after the writes, then a
second one written once the first has its entries, is in the index collections only after the batch
holding every earlier change was applied (batches are applied one after another).

The last line is ``applier: N passed, M failed``.
"""
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time

import psycopg2

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "fixtures"))
import mongo_client  # noqa: E402
import pg_fixture  # noqa: E402  (test/fixtures)
from results import Results  # noqa: E402  (test/fixtures)

DATABASE = "idxtable_applier"
TOWNS = ["Oslo", "Rome", "Lima", "Kiev", "Bern"]
TAGS = ["a", "b", "c", "d", "e"]
INDEXES = [("cust_email", "{lower(email)}", "{}", True),
           ("cust_town", "{town}", "{first_name}", False),
           ("cust_tags", "{tags}", "{}", False)]
APPLIER = "idxtable_fdw applier"
SYNC_TIMEOUT = 60

RESULTS = Results()


def check(ok, what):
    """Count one check (the shared tally prints it when it failed); a
    check that passed is printed too, as "ok"."""
    if ok:
        print("ok   %s" % what)
    return RESULTS.check(ok, what)


def pg(dbname=DATABASE):
    return pg_fixture.connect(dbname)


q = pg_fixture.execute


# --------------------------------------------------------------------------
# Setup
# --------------------------------------------------------------------------

def create_table(conn, table, server, indexes):
    pg_fixture.create_foreign_table(conn, table, "_id text, email text, town text, first_name text, tags text[], n int",
                                    server=server)
    for name, keys, include, unique in indexes:
        q(conn, "SELECT idxtable.create_index(%s, %s, include => %s, is_unique => %s, name => %s)",
          (table, keys, include, unique, name.replace("cust", table)))


def setup():
    client = mongo_client.connect()
    client.drop_database(DATABASE)
    conn = pg_fixture.setup_database(DATABASE, db_options=pg_fixture.UTF8_C)
    create_table(conn, "cust", "mongo", INDEXES)
    rows = [row(i) for i in range(200)]
    with conn.cursor() as cur:
        cur.executemany("INSERT INTO cust VALUES (%s, %s, %s, %s, %s, %s)",
                        [(r["_id"], r["email"], r["town"], r["first_name"], r["tags"], r["n"]) for r in rows])
    return client, conn


def row(i, rng=random):
    return {"_id": "c%05d" % i, "email": "User%05d@Example.com" % i, "town": rng.choice(TOWNS),
            "first_name": rng.choice(["Ann", "Bob", "Cyd", "Dag"]),
            "tags": rng.sample(TAGS, rng.randint(0, 3)), "n": i}


# --------------------------------------------------------------------------
# The applier and its progress
# --------------------------------------------------------------------------

def applier_pids(conn):
    return [r[0] for r in q(conn, "SELECT pid FROM pg_stat_activity WHERE backend_type = %s "
                                  "AND datname = current_database()", (APPLIER,))]


def wait_applier(conn, timeout=30, other_than=()):
    """The pid of a running applier (a new one if other_than is given), or None."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        pids = [p for p in applier_pids(conn) if p not in other_than]
        if pids:
            return pids[0]
        time.sleep(0.2)
    return None


def index_collections(conn, table):
    return [r[0] for r in q(conn, "SELECT collection FROM idxtable.index_defs WHERE tbl = %s::regclass",
                            (table,))]


def marker_applied(db, colls, marker_id):
    return all(db[c].find_one({"id": marker_id}) is not None for c in colls)


def sync(conn, db, table, timeout=SYNC_TIMEOUT):
    """Wait until every change written to `table`'s facts so far is applied (see the module doc)."""
    colls = index_collections(conn, table)
    deadline = time.time() + timeout
    for k in range(2):
        marker = "~marker%d-%d" % (k, random.randrange(10 ** 9))
        db[table].insert_one({"_id": marker, "email": marker + "@m", "town": "Marker", "tags": ["m"], "n": -1})
        while not marker_applied(db, colls, marker):
            if time.time() > deadline:
                db[table].delete_one({"_id": marker})
                return False
            time.sleep(0.02)
        db[table].delete_one({"_id": marker})
    # the deletes of the markers: wait until their entries are gone
    while any(db[c].count_documents({"id": {"$regex": "^~marker"}}) for c in colls):
        if time.time() > deadline:
            return False
        time.sleep(0.02)
    return True


def verify_clean(conn, table):
    bad = []
    for (name,) in q(conn, "SELECT name FROM idxtable.index_defs WHERE tbl = %s::regclass ORDER BY name",
                     (table,)):
        missing, orphan, stale = q(conn, "SELECT missing, orphan, stale FROM idxtable.verify_index(%s)",
                                   (name,))[0]
        if missing or orphan or stale:
            bad.append((name, missing, orphan, stale))
    return bad


def queries(table):
    out = []
    for t in TOWNS + ["Nowhere"]:
        out.append("SELECT _id, first_name FROM %s WHERE town = '%s' ORDER BY _id" % (table, t))
    for i in (0, 3, 17, 150, 199, 250, 260, 5000):
        out.append("SELECT _id FROM %s WHERE lower(email) = 'user%05d@example.com' ORDER BY _id" % (table, i))
    for tag in TAGS:
        out.append("SELECT _id FROM %s WHERE '%s' = ANY (tags) ORDER BY _id" % (table, tag))
    return out


def routed_equals_unrouted(conn, table):
    """Mismatching queries, and how many were routed."""
    diffs = []
    routed = 0
    for sql in queries(table):
        q(conn, "SET idxtable.enable_plain_scan = off")
        plan = "\n".join(r[0] for r in q(conn, "EXPLAIN " + sql))
        routed += "index" in plan.lower() and "idxtable" in plan.lower() or "Index Table" in plan
        a = q(conn, sql)
        q(conn, "RESET idxtable.enable_plain_scan")
        q(conn, "SET idxtable.enable_index_routing = off")
        b = q(conn, sql)
        q(conn, "RESET idxtable.enable_index_routing")
        if a != b:
            diffs.append(sql)
    return diffs, routed


def check_consistent(conn, db, table, what):
    ok = sync(conn, db, table)
    check(ok, "%s: the applier applied every change (within %d s)" % (what, SYNC_TIMEOUT))
    bad = verify_clean(conn, table)
    check(not bad, "%s: verify_index clean %s" % (what, bad or ""))
    diffs, _ = routed_equals_unrouted(conn, table)
    check(not diffs, "%s: routed queries equal unrouted ones %s" % (what, diffs[:3] or ""))


# --------------------------------------------------------------------------
# Cases
# --------------------------------------------------------------------------

def outside_writes(client, conn, db):
    coll = db.cust
    rng = random.Random(11)
    coll.insert_many([row(i, rng) for i in range(200, 260)])
    coll.insert_one(row(260, rng))
    for i in range(0, 40):
        coll.update_one({"_id": "c%05d" % i}, {"$set": {"town": rng.choice(TOWNS)}})
    for i in range(40, 60):
        coll.update_one({"_id": "c%05d" % i}, {"$set": {"email": "Moved%05d@Example.com" % i}})
    for i in range(60, 80):
        coll.update_one({"_id": "c%05d" % i}, {"$set": {"first_name": "Zed%d" % i}})
    for i in range(80, 90):
        coll.replace_one({"_id": "c%05d" % i}, row(i, rng) | {"email": "Replaced%05d@Example.com" % i})
    coll.delete_many({"_id": {"$in": ["c%05d" % i for i in range(90, 100)]}})
    for i in range(100, 110):
        coll.update_one({"_id": "c%05d" % i}, {"$push": {"tags": "e"}})
        coll.update_one({"_id": "c%05d" % (i + 10)}, {"$pull": {"tags": {"$in": ["a", "b"]}}})
        coll.update_one({"_id": "c%05d" % (i + 20), "tags.0": {"$exists": True}}, {"$set": {"tags.0": "d"}})
    coll.update_many({"_id": {"$in": ["c%05d" % i for i in range(130, 140)]}}, {"$unset": {"town": ""}})
    with client.start_session() as s:
        with s.start_transaction():
            coll.insert_one(row(300, rng), session=s)
            coll.update_one({"_id": "c00140"}, {"$set": {"town": "Bern", "email": "Txn@Example.com"}}, session=s)
            coll.delete_one({"_id": "c00141"}, session=s)
            coll.update_one({"_id": "c00142"}, {"$set": {"tags": ["a", "b", "c"]}}, session=s)
    check_consistent(conn, db, "cust", "outside writes")


def applier_write_commands(admin_db):
    cmds = admin_db.command({"recentCommands": 1, "clear": True})["commands"]
    return [c for c in cmds if c.get("appName") == APPLIER and c.get("command") in ("insert", "update", "delete")
            and c.get("collection") not in ("idxtable.positions", "idxtable.sync")]


def fdw_writes_nothing(client, conn, db):
    admin_db = client.admin
    if not sync(conn, db, "cust"):
        check(False, "FDW writes: synced before")
        return
    try:
        applier_write_commands(admin_db)
    except Exception as e:   # not the test server
        print("skip FDW writes count: %s" % e)
        return
    written_before = entries_written(conn)
    for i in range(400, 460):
        r = row(i)
        q(conn, "INSERT INTO cust VALUES (%s, %s, %s, %s, %s, %s)",
          (r["_id"], r["email"], r["town"], r["first_name"], r["tags"], r["n"]))
    q(conn, "UPDATE cust SET town = 'Lima', first_name = 'Fdw' WHERE n BETWEEN 400 AND 430")
    q(conn, "UPDATE cust SET tags = '{a,b}' WHERE n BETWEEN 431 AND 440")
    q(conn, "DELETE FROM cust WHERE n BETWEEN 441 AND 450")
    ok = sync(conn, db, "cust")
    writes = [c for c in applier_write_commands(admin_db)]
    # the markers of sync() are outside writes the applier must apply: one insert and one delete each
    # per index collection; nothing else
    extra = [c for c in writes if not c.get("filter") or "~marker" not in str(c)]
    check(ok and len(writes) <= 4 * len(INDEXES) * 2,
          "FDW writes: the applier wrote only the markers' entries (%d write commands, at most %d)"
          % (len(writes), 4 * len(INDEXES) * 2))
    bad = verify_clean(conn, "cust")
    check(not bad, "FDW writes: verify_index clean %s" % (bad or ""))
    written = entries_written(conn)
    # each marker: one entry written, then deleted, per index
    more = {k: written[k] - written_before.get(k, 0) for k in written}
    check(written and all(v <= 4 for v in more.values()),
          "FDW writes: idxtable.sync_status counts only the markers' entries as written %s" % more)
    return extra


def applier_reads(admin_db):
    """The applier's finds since the last call (of facts and of entries), with their filters."""
    cmds = admin_db.command({"recentCommands": 1, "clear": True})["commands"]
    return [c for c in cmds if c.get("appName") == APPLIER and c.get("command") == "find"
            and c.get("collection") not in ("idxtable.positions", "idxtable.sync")]


def reads_naming(reads, ids):
    return [c for c in reads if any(i in str(c.get("filter")) for i in ids)]


def wait_current(conn):
    """A routed query with index_consistency current: returns once the applier has applied everything
    acknowledged so far (its wait writes a heartbeat, not an entry)."""
    q(conn, "SET idxtable.enable_plain_scan = off")
    q(conn, "SET idxtable.index_consistency = current")
    rows = q(conn, "SELECT _id FROM cust WHERE town = 'Oslo'")
    q(conn, "RESET idxtable.enable_plain_scan")
    return rows


def fdw_insert(conn, i, town=None):
    r = row(i)
    q(conn, "INSERT INTO cust VALUES (%s, %s, %s, %s, %s, %s)",
      (r["_id"], r["email"], town or r["town"], r["first_name"], r["tags"], r["n"]))


def transaction_events_carry_lsid(client, db):
    """The server's change events of a transaction carry its lsid and txnNumber (pymongo's watch())."""
    with db.watch([{"$match": {"ns.coll": "cs_probe"}}], max_await_time_ms=200) as stream:
        with client.start_session() as s:
            with s.start_transaction():
                db.cs_probe.insert_one({"x": 1}, session=s)
        change = stream.try_next()
        for _ in range(50):
            if change is not None:
                break
            change = stream.try_next()
    db.cs_probe.drop()
    return change is not None and "lsid" in change and "txnNumber" in change


def fdw_transactions_read_nothing(client, conn, db):
    """Writes through the FDW in transaction mode carry a marker: the applier reads neither their facts
    nor their entries, while an outside write of the same period is applied; a transaction that also
    writes the collection through a foreign table without the index tables is applied."""
    admin_db = client.admin
    check(transaction_events_carry_lsid(client, db),
          "markers: the server's transaction events carry lsid and txnNumber (pymongo watch())")
    check(sync(conn, db, "cust"), "markers: synced before")
    fdw_insert(conn, 500)       # its session's first commit since the applier's last writes
    wait_current(conn)
    applier_reads(admin_db)
    fdw_ids = ["c%05d" % i for i in range(510, 521)]
    for i in range(510, 518):
        fdw_insert(conn, i)
    q(conn, "UPDATE cust SET town = 'Lima', first_name = 'Mk' WHERE n BETWEEN 510 AND 513")
    q(conn, "UPDATE cust SET tags = '{c,d}' WHERE n = 514")
    q(conn, "DELETE FROM cust WHERE n IN (515, 516)")
    q(conn, "BEGIN")
    fdw_insert(conn, 520)
    q(conn, "UPDATE cust SET email = 'Mk517@Example.com' WHERE n = 517")
    q(conn, "COMMIT")
    db.cust.insert_one(row(530) | {"town": "Bern"})
    wait_current(conn)
    reads = applier_reads(admin_db)
    check(not reads_naming(reads, fdw_ids),
          "markers: the applier read no facts or entries of FDW writes in transaction mode (%d of %d reads)"
          % (len(reads_naming(reads, fdw_ids)), len(reads)))
    check(reads_naming(reads, ["c00530"]) != [] and
          q(conn, "SELECT _id FROM cust WHERE lower(email) = 'user00530@example.com'") == [("c00530",)],
          "markers: an outside write of the same period is applied")

    # the first write of a new backend: its new session learns a cluster time before its transaction
    fresh = pg(conn.info.dbname)
    fdw_insert(fresh, 531)
    fresh.close()
    wait_current(conn)
    reads = applier_reads(admin_db)
    check(not reads_naming(reads, ["c00531"]),
          "markers: the first write of a new session is not read back either (%d of %d reads)"
          % (len(reads_naming(reads, ["c00531"])), len(reads)))

    # a transaction of more facts than a batch of events: its marker comes in a later batch
    fdw_insert(conn, 590)
    wait_current(conn)
    applier_reads(admin_db)
    q(conn, "INSERT INTO cust SELECT 'c' || lpad(i::text, 5, '0'), 'Big' || i || '@Example.com', 'Rome', 'Big', "
            "'{b}', i FROM generate_series(600, 3099) i")
    wait_current(conn)
    reads = applier_reads(admin_db)
    big = ["c%05d" % i for i in range(600, 3100)]
    check(not reads_naming(reads, big) and q(conn, "SELECT count(*) FROM cust WHERE first_name = 'Big'") == [(2500,)],
          "markers: the applier read none of a transaction of 2,500 facts (%d of %d reads)"
          % (len(reads_naming(reads, big)), len(reads)))
    q(conn, "DELETE FROM cust WHERE first_name = 'Big'")

    # a transaction that also writes through a table without the index tables: no marker counts
    q(conn, "CREATE FOREIGN TABLE cust_bare (_id text, email text, town text, first_name text, tags text[], "
            "n int) SERVER mongo OPTIONS (collection 'cust')")
    fdw_insert(conn, 540)
    wait_current(conn)
    applier_reads(admin_db)
    q(conn, "BEGIN")
    q(conn, "UPDATE cust SET first_name = 'Mix' WHERE n = 540")
    q(conn, "UPDATE cust_bare SET town = 'Kiev' WHERE n = 540")
    q(conn, "COMMIT")
    wait_current(conn)
    reads = applier_reads(admin_db)
    q(conn, "SET idxtable.enable_plain_scan = off")
    found = q(conn, "SELECT _id, first_name FROM cust WHERE town = 'Kiev' AND n = 540")
    q(conn, "RESET idxtable.enable_plain_scan")
    check(reads_naming(reads, ["c00540"]) != [] and found == [("c00540", "Mix")],
          "markers: a transaction also writing through a table without the index tables is applied %s" % found)
    q(conn, "DROP FOREIGN TABLE cust_bare")
    bad = verify_clean(conn, "cust")
    check(not bad, "markers: verify_index clean %s" % (bad or ""))


def snapshot_write_conflict(client, conn, db):
    """A foreign write in transaction mode to a document another client changed after the MongoDB
    transaction's first command: WriteConflict (112, as mongod refuses a write against the transaction's
    snapshot) is SQLSTATE 40001, the transaction can only roll back, nothing of it is left, and a retry
    succeeds; the index tables stay exact."""
    check(sync(conn, db, "cust"), "snapshot conflict: synced before")
    before = q(conn, "SELECT _id, email, town, first_name FROM cust WHERE n IN (10, 11) ORDER BY n")
    q(conn, "BEGIN")
    q(conn, "UPDATE cust SET first_name = 'Snap', email = 'Snap10@Example.com' WHERE n = 10")
    db.cust.update_one({"_id": "c00011"}, {"$set": {"email": "Out11@Example.com", "town": "Bern"}})
    code = None
    try:
        q(conn, "UPDATE cust SET town = 'Lima', email = 'Snap11@Example.com' WHERE n = 11")
    except psycopg2.Error as e:
        code = e.pgcode
    q(conn, "ROLLBACK")
    check(code == "40001", "snapshot conflict: a write to a document changed outside after the "
                           "transaction's start is SQLSTATE 40001 (got %s)" % code)
    after = q(conn, "SELECT _id, email, town, first_name FROM cust WHERE n IN (10, 11) ORDER BY n")
    check(after[0] == before[0] and after[1][1:3] == ("Out11@Example.com", "Bern"),
          "snapshot conflict: nothing of the transaction is left, the outside write stays %s" % after)
    check_consistent(conn, db, "cust", "snapshot conflict")
    q(conn, "BEGIN")
    q(conn, "UPDATE cust SET first_name = 'Snap', email = 'Snap10@Example.com' WHERE n = 10")
    q(conn, "UPDATE cust SET town = 'Lima', email = 'Snap11@Example.com' WHERE n = 11")
    q(conn, "COMMIT")
    q(conn, "SET idxtable.enable_plain_scan = off")
    found = q(conn, "SELECT _id FROM cust WHERE lower(email) IN ('snap10@example.com', 'snap11@example.com', "
                    "'out11@example.com') ORDER BY _id")
    q(conn, "RESET idxtable.enable_plain_scan")
    check(found == [("c00010",), ("c00011",)], "snapshot conflict: the retried transaction commits %s" % found)
    check_consistent(conn, db, "cust", "snapshot conflict, retried")


def fdw_ordered_reads_entries_only(client, conn, db):
    """Inserts and deletes through the FDW in ordered mode: the applier takes the facts from their events
    (an insert's document, a delete's absence) and reads only their entries (an updated fact, c00713,
    may be read: its event holds only the change)."""
    admin_db = client.admin
    q(conn, "ALTER FOREIGN TABLE cust OPTIONS (ADD consistency 'ordered')")
    try:
        fdw_insert(conn, 700)
        wait_current(conn)
        applier_reads(admin_db)
        ids = ["c%05d" % i for i in range(710, 716)]
        for i in range(710, 716):
            fdw_insert(conn, i)
        q(conn, "DELETE FROM cust WHERE n IN (714, 715)")
        q(conn, "UPDATE cust SET town = 'Kiev' WHERE n = 713")
        wait_current(conn)
        reads = reads_naming(applier_reads(admin_db), ids)
        others = [i for i in ids if i != "c00713"]
        fact_reads = [c for c in reads if c.get("collection") == "cust" and
                      any(i in str(c.get("filter")) for i in others)]
        check(reads and not fact_reads,
              "ordered writes: the applier read the entries of the facts inserted and deleted and none of "
              "those facts (%d fact reads naming them, %d reads in all)" % (len(fact_reads), len(reads)))
    finally:
        q(conn, "ALTER FOREIGN TABLE cust OPTIONS (DROP consistency)")
    bad = verify_clean(conn, "cust")
    check(not bad, "ordered writes: verify_index clean %s" % (bad or ""))


def updates_of_other_fields_read_nothing(client, conn, db):
    """An update event whose updateDescription names none of an index table's fields (keys and included
    columns) needs no read for that index: outside updates of `n` and of a field the table does not map,
    and an ordered-mode FDW update of `n`, are not read back; an update of `town` is applied to the town
    index and not read for the email index; an update of a tag is applied; verify_index stays clean."""
    admin_db = client.admin
    fdw_insert(conn, 760)
    wait_current(conn)
    applier_reads(admin_db)
    others = ["c%05d" % i for i in (3, 4, 5, 6)]
    db.cust.update_one({"_id": "c00003"}, {"$set": {"n": 9003}})
    db.cust.update_one({"_id": "c00004"}, {"$set": {"extra": {"deep": [1, 2]}}})
    db.cust.update_one({"_id": "c00004"}, {"$unset": {"extra": 1}})
    db.cust.update_one({"_id": "c00005"}, {"$inc": {"n": 1}})
    q(conn, "ALTER FOREIGN TABLE cust OPTIONS (ADD consistency 'ordered')")
    try:
        q(conn, "UPDATE cust SET n = n + 1 WHERE _id = 'c00006'")
    finally:
        q(conn, "ALTER FOREIGN TABLE cust OPTIONS (DROP consistency)")
    db.cust.update_one({"_id": "c00007"}, {"$set": {"town": "Bern", "n": 7007}})
    db.cust.update_one({"_id": "c00008"}, {"$push": {"tags": "e"}})
    wait_current(conn)
    reads = applier_reads(admin_db)
    check(not reads_naming(reads, others),
          "other fields: updates of fields no index table uses are not read back (%d of %d reads)"
          % (len(reads_naming(reads, others)), len(reads)))
    email_coll = [c for c in index_collections(conn, "cust") if "email" in c]
    town_reads = reads_naming(reads, ["c00007"])
    check(town_reads and not [c for c in town_reads if c.get("collection") in email_coll],
          "other fields: an update of town is read for the town index only (%s)"
          % [c.get("collection") for c in town_reads])
    q(conn, "SET idxtable.enable_plain_scan = off")
    found = q(conn, "SELECT _id FROM cust WHERE town = 'Bern' AND _id = 'c00007'")
    tagged = q(conn, "SELECT _id FROM cust WHERE tags @> '{e}' AND _id = 'c00008'")
    q(conn, "RESET idxtable.enable_plain_scan")
    check(found == [("c00007",)] and tagged == [("c00008",)],
          "other fields: updates of indexed fields are applied %s %s" % (found, tagged))
    bad = verify_clean(conn, "cust")
    check(not bad, "other fields: verify_index clean %s" % (bad or ""))


def fact_reads_per_id(admin_db, ids):
    """How many of the applier's reads of the facts since the last call name each of ids."""
    fact_reads = [c for c in applier_reads(admin_db) if c.get("collection") == "cust"]
    return {i: len(reads_naming(fact_reads, [i])) for i in ids}


def one_facts_read(client, conn, db):
    """The facts an event does not show (an update's document) are read once per batch for all the
    index tables that need them, not once per index table.  An ordered-mode UPDATE through the FDW of the
    email, the town and the tags of six customers (it wrote their entries, so nothing differs) names each
    of them in exactly one read of the facts (three before, one per index table).  The same change made
    outside is repaired directly: each index table's entries read once, then each fact once (six reads
    of facts and two of each index table's entries when every index table checked and confirmed).  Every
    index table then has the new values (routed queries, verify_index)."""
    admin_db = client.admin
    ids = ["c%05d" % i for i in range(20, 26)]
    wait_current(conn)
    applier_reads(admin_db)
    q(conn, "ALTER FOREIGN TABLE cust OPTIONS (ADD consistency 'ordered')")
    try:
        q(conn, "UPDATE cust SET email = 'Ordered' || _id || '@Example.com', town = 'Rome', "
                "tags = '{a,c}' WHERE _id = ANY (%s)", (ids,))
    finally:
        q(conn, "ALTER FOREIGN TABLE cust OPTIONS (DROP consistency)")
    wait_current(conn)
    times = fact_reads_per_id(admin_db, ids)
    check(all(n == 1 for n in times.values()),
          "one read of the facts: an ordered UPDATE of fields of all three index tables reads each fact "
          "once %s" % times)
    for i in ids:
        db.cust.update_one({"_id": i}, {"$set": {"email": "Moved%s@Example.com" % i, "town": "Lima",
                                                 "tags": ["b", "d"]}})
    wait_current(conn)
    reads = applier_reads(admin_db)
    times = {i: len(reads_naming([c for c in reads if c.get("collection") == "cust"], [i])) for i in ids}
    by_fact = [r for r in reads if "id" in (r.get("filter") or {})]  # entries by {id: {$in: [...]}}
    entry_reads = {c: max(len(reads_naming([r for r in by_fact if r.get("collection") == c], [i])) for i in ids)
                   for c in index_collections(conn, "cust")}
    check(all(n == 1 for n in times.values()) and all(n == 1 for n in entry_reads.values()),
          "one read of the facts: the same update made outside (no event shows the facts) is repaired "
          "directly, reading each index table's entries once and then each fact once %s %s"
          % (times, entry_reads))
    q(conn, "SET idxtable.enable_plain_scan = off")
    by_email = q(conn, "SELECT _id FROM cust WHERE lower(email) = lower(%s)", ("Moved%s@Example.com" % ids[0],))
    by_town = q(conn, "SELECT _id FROM cust WHERE town = 'Lima' AND _id = ANY (%s) ORDER BY _id", (ids,))
    by_tags = q(conn, "SELECT _id FROM cust WHERE tags @> '{b,d}' AND _id = ANY (%s) ORDER BY _id", (ids,))
    q(conn, "RESET idxtable.enable_plain_scan")
    check(by_email == [(ids[0],)] and by_town == [(i,) for i in ids] and by_tags == [(i,) for i in ids],
          "one read of the facts: every index table has the new values %s %s %s"
          % (by_email, len(by_town), len(by_tags)))
    bad = verify_clean(conn, "cust")
    check(not bad, "one read of the facts: verify_index clean %s" % (bad or ""))

def no_ping_per_batch(client, conn, db):
    """The applier learns the time after its writes (which a transaction's marker is compared with)
    from the operationTime of their replies, not from a ping after each batch: five batches of outside
    changes, each applied before the next is written, have the applier write entries and send no
    ping (markers after such batches: fdw_transactions_read_nothing)."""
    admin_db = client.admin
    wait_current(conn)
    admin_db.command({"recentCommands": 1, "clear": True})
    for k in range(5):
        db.cust.update_one({"_id": "c%05d" % (150 + k)}, {"$set": {"town": TOWNS[k], "email":
                                                                  "Batch%d@Example.com" % k}})
        wait_current(conn)
    cmds = [c for c in admin_db.command({"recentCommands": 1, "clear": True})["commands"]
            if c.get("appName") == APPLIER]
    writes = [c for c in cmds if c.get("command") in ("insert", "update", "delete", "bulkWrite")
              and c.get("collection") not in ("idxtable.positions", "idxtable.sync")]
    pings = [c for c in cmds if c.get("command") == "ping"]
    check(len(writes) >= 5 and not pings,
          "no ping per batch: %d entry writes in 5 batches, %d pings" % (len(writes), len(pings)))


def set_batch_delay(conn, ms):
    q(conn, "ALTER SYSTEM SET idxtable.applier_batch_delay = %d" % ms if ms is not None
      else "ALTER SYSTEM RESET idxtable.applier_batch_delay")
    q(conn, "SELECT pg_reload_conf()")
    time.sleep(0.5)


def batch_delay(client, conn, db):
    """idxtable.applier_batch_delay: a run of small outside writes is applied in a few batches, and a
    query that waits for the applier ends the delay at once."""
    admin_db = client.admin
    set_batch_delay(conn, 200)
    try:
        wait_current(conn)
        applier_reads(admin_db)
        ids = ["c%05d" % i for i in range(800, 840)]
        t0 = time.time()
        for i in range(800, 840):
            db.cust.insert_one(row(i) | {"town": "Bern"})
            time.sleep(0.01)
        elapsed = time.time() - t0
        wait_current(conn)
        reads = reads_naming(applier_reads(admin_db), ids)
        # per index and batch: its entries, then (they are missing) the entries and facts again
        most = int((elapsed / 0.2 + 3) * 3 * len(INDEXES))
        check(len(reads) <= most,
              "batch delay: 40 single inserts over %.2f s applied with %d reads (at most %d: three per "
              "index and batch of 200 ms; one batch per insert would take up to %d)"
              % (elapsed, len(reads), most, 40 * 3 * len(INDEXES)))
        set_batch_delay(conn, 10000)
        wait_current(conn)
        db.cust.insert_one(row(850) | {"town": "Bern"})
        t0 = time.time()
        q(conn, "SET idxtable.enable_plain_scan = off")
        q(conn, "SET idxtable.index_consistency = current")
        found = q(conn, "SELECT _id FROM cust WHERE lower(email) = 'user00850@example.com'")
        waited = time.time() - t0
        q(conn, "RESET idxtable.enable_plain_scan")
        check(found == [("c00850",)] and waited < 5,
              "batch delay 10 s: a query waiting for the applier finds an outside insert after %.2f s %s"
              % (waited, found))
    finally:
        set_batch_delay(conn, None)


def entries_written(conn):
    return dict(q(conn, "SELECT name, entries_written FROM idxtable.sync_status "
                        "WHERE name LIKE 'cust%' AND entries_written IS NOT NULL"))


def load(db, table, first, count, stop):
    coll = db[table]
    rng = random.Random(first)
    for i in range(first, first + count):
        if stop.is_set():
            break
        k = rng.random()
        if k < 0.5:
            coll.insert_one(row(i, rng))
        elif k < 0.8:
            coll.update_one({"_id": "c%05d" % rng.randrange(0, 300)}, {"$set": {"town": rng.choice(TOWNS)}})
        else:
            coll.delete_one({"_id": "c%05d" % rng.randrange(0, 300)})


def kill_applier(client, conn, db):
    pid = wait_applier(conn)
    check(pid is not None, "kill: an applier runs")
    if pid is None:
        return
    stop = threading.Event()
    t = threading.Thread(target=load, args=(db, "cust", 1000, 1500, stop))
    t.start()
    time.sleep(0.5)
    q(conn, "SELECT pg_terminate_backend(%s)", (pid,))
    t0 = time.time()
    while pid in applier_pids(conn) and time.time() - t0 < 5:
        time.sleep(0.01)
    gone = time.time() - t0
    check(gone < 1.0, "kill: the applier exits within 1 s of SIGTERM (%.2f s)" % gone)
    new = wait_applier(conn, timeout=30, other_than=(pid,))
    check(new is not None, "kill: the applier was started again (%.1f s)" % (time.time() - t0))
    t.join()
    check_consistent(conn, db, "cust", "kill during a load")


def restart_server(client, conn, db):
    envdir = os.environ.get("IDXTABLE_ENV_DIR", "/tmp/idxtable_fdw_env")
    os.environ["IDXTABLE_ENV_DIR"] = envdir
    if not os.path.exists(os.path.join(envdir, "mongo.dbpath")):
        print("skip server restart: test/env was not started with IDXTABLE_MONGO_DURABLE=1")
        return
    db.cust.insert_many([row(i) for i in range(5000, 5050)])
    pglog = os.path.join(os.environ["IDXTABLE_ENV_DIR"], "pg", "server.log")
    log_from = os.path.getsize(pglog)
    subprocess.run([os.path.join(HERE, "env"), "restart-mongo"], check=True, stdout=subprocess.DEVNULL)
    client2 = mongo_client.connect()
    db2 = client2[DATABASE]
    time.sleep(1)   # the applier fails on the lost connection and is started again
    check(wait_applier(conn, timeout=90) is not None, "server restart: an applier runs again")
    db2.cust.insert_many([row(i) for i in range(5050, 5100)])
    db2.cust.update_many({"n": {"$gte": 5000, "$lt": 5020}}, {"$set": {"town": "Rome"}})
    check_consistent(conn, db2, "cust", "server restart")
    states = q(conn, "SELECT DISTINCT state FROM idxtable.index_defs WHERE tbl = 'cust'::regclass")
    check(states == [("valid",)], "server restart: the index tables are valid again %s" % states)
    with open(pglog, errors="replace") as f:
        f.seek(log_from)
        after = f.read()
    check("resumes database" in after and 'rebuilding stale index "cust' not in after,
          "server restart: the applier resumed from its position, without a rebuild")
    return client2, db2


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def small_history(conn):
    port = free_port()
    log = open(os.path.join(os.environ.get("IDXTABLE_ENV_DIR", "/tmp"), "applier_small.log"), "w")
    server = subprocess.Popen([sys.executable, os.path.join(HERE, "server", "mongo_test_server.py"),
                               "--port", str(port), "--change-history", "50"],
                              stdout=log, stderr=subprocess.STDOUT)
    try:
        import pymongo
        uri = "mongodb://127.0.0.1:%d/?replicaSet=rs0" % port
        deadline = time.time() + 20
        while True:
            try:
                small = pymongo.MongoClient(uri, serverSelectionTimeoutMS=500)
                small.admin.command("ping")
                break
            except Exception:
                if time.time() > deadline:
                    raise
                time.sleep(0.2)
        db = small[DATABASE]
        pg_fixture.create_server(conn, DATABASE, name="small", uri=uri, credentials=False)
        # (taken first: the new applier may start before create_table returns)
        known = tuple(applier_pids(conn))
        create_table(conn, "hist", "small", INDEXES[1:2])
        # (its start goes through the launcher and a database worker: slow under load)
        pid = wait_applier(conn, timeout=90, other_than=known)
        ok = pid is not None and sync(conn, db, "hist", timeout=90)
        check(ok, "small history: an applier follows the second server (applier %s, synced %s)"
              % (pid, ok))
        # stop it, write more than the history holds, let it come back
        q(conn, "SELECT pg_terminate_backend(%s)", (pid,))
        db.hist.insert_many([row(i) for i in range(0, 200)])
        db.hist.update_many({"n": {"$lt": 50}}, {"$set": {"town": "Kiev"}})
        wait_applier(conn, timeout=30, other_than=(pid,) + known)
        states = []
        deadline = time.time() + 60
        while time.time() < deadline:
            s = q(conn, "SELECT state FROM idxtable.index_defs WHERE tbl = 'hist'::regclass")[0][0]
            if not states or states[-1] != s:
                states.append(s)
            if s == "valid" and "stale" in states:
                break
            time.sleep(0.05)
        stale_logged = "stale" in states or stale_in_log()
        check(stale_logged, "small history: 286 made the index stale (states seen %s)" % states)
        check(states[-1] == "valid", "small history: rebuilt and valid again")
        check_consistent(conn, db, "hist", "small history")
        small.close()
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(10)
        log.close()


def stale_in_log():
    path = os.path.join(os.environ.get("IDXTABLE_ENV_DIR", ""), "pg", "server.log")
    try:
        with open(path) as f:
            return "index \"hist_town\" is now stale" in f.read()
    except OSError:
        return False


def drop_collection(client, conn, db):
    q(conn, "CREATE FOREIGN TABLE gone (_id text, town text) SERVER mongo OPTIONS (collection 'gone')")
    q(conn, "INSERT INTO gone VALUES ('g1', 'Oslo')")
    q(conn, "SELECT idxtable.create_index('gone', '{town}', name => 'gone_town')")
    db.gone.insert_one({"_id": "g2", "town": "Rome"})
    deadline = time.time() + 20
    while time.time() < deadline and not db[index_collections(conn, "gone")[0]].find_one({"id": "g2"}):
        time.sleep(0.05)
    check(db[index_collections(conn, "gone")[0]].find_one({"id": "g2"}) is not None,
          "a new index table is followed at once (its catalog change wakes the applier)")
    db.gone.drop()
    state = None
    deadline = time.time() + 20
    while time.time() < deadline:
        state = q(conn, "SELECT state FROM idxtable.index_defs WHERE name = 'gone_town'")[0][0]
        if state == "failed":
            break
        time.sleep(0.05)
    check(state == "failed", "drop: the index of a dropped fact collection is failed (%s)" % state)
    q(conn, "SELECT idxtable.drop_index('gone_town')")


def status_of(conn, table):
    return {r[0]: r[1:] for r in q(conn, "SELECT name, events_applied, entries_written, applied_through "
                                         "FROM idxtable.sync_status WHERE name LIKE %s "
                                         "AND applied_through IS NOT NULL", (table + "_%",))}


def counters_kept(client, conn, db):
    """A create_index/drop_index of another index on the server reloads the applier's catalog: the
    other indexes' counters and applied_through never go back."""
    db.cust.insert_many([row(i) for i in range(6000, 6020)])
    sync(conn, db, "cust")
    before = status_of(conn, "cust")
    q(conn, "SELECT idxtable.create_index('cust', '{n}', name => 'cust_n')")
    db.cust.insert_one(row(6020))
    sync(conn, db, "cust")
    after = status_of(conn, "cust")
    q(conn, "SELECT idxtable.drop_index('cust_n')")
    back = [(n, before[n], after.get(n)) for n in before
            if after.get(n) is None or any(a < b for a, b in zip(after[n], before[n]))]
    check(before and not back,
          "reload: create_index of another index keeps the counters and applied_through %s" % back)


def recreated_server(client, conn, db):
    """A server dropped and created again under the same name starts fresh (the position key holds
    the server's OID), it does not resume the old server's position."""
    pglog = os.path.join(os.environ.get("IDXTABLE_ENV_DIR", ""), "pg", "server.log")
    pg_fixture.create_server(conn, DATABASE, name="again")
    pg_fixture.create_foreign_table(conn, "again_t", "_id text, town text", server="again")
    q(conn, "SELECT idxtable.create_index('again_t', '{town}', name => 'again_town')")
    db.again_t.insert_one({"_id": "a1", "town": "Oslo"})
    coll = index_collections(conn, "again_t")[0]
    deadline = time.time() + 20
    while time.time() < deadline and not db[coll].find_one({"id": "a1"}):
        time.sleep(0.05)
    time.sleep(1.5)     # a stored position
    oid = q(conn, "SELECT oid FROM pg_foreign_server WHERE srvname = 'again'")[0][0]
    stored = [d["_id"] for d in db["idxtable.positions"].find({}) if "/again@%d/" % oid in d["_id"]]
    check(len(stored) == 1, "re-created server: the position key names the server and its OID %s" % stored)
    q(conn, "DROP SERVER again CASCADE")
    db.again_t.insert_one({"_id": "a2", "town": "Rome"})
    log_from = os.path.getsize(pglog) if os.path.exists(pglog) else 0
    pg_fixture.create_server(conn, DATABASE, name="again")
    pg_fixture.create_foreign_table(conn, "again_t", "_id text, town text", server="again")
    q(conn, "SELECT idxtable.create_index('again_t', '{town}', name => 'again_town')")
    line = None
    deadline = time.time() + 30
    while time.time() < deadline and line is None:
        with open(pglog, errors="replace") as f:
            f.seek(log_from)
            for ln in f:
                if 'for server "again"' in ln and "database" in ln:
                    line = ln.strip()
        time.sleep(0.2)
    check(line is not None and "starts database" in line,
          "re-created server: its applier starts at its own sync_from, not the old position (%s)" % line)
    q(conn, "DROP SERVER again CASCADE")


def measure(client, conn, db):
    results = {}
    for n_indexes in (1, 3):
        table = "bench%d" % n_indexes
        q(conn, "DROP FOREIGN TABLE IF EXISTS %s" % table)
        db[table].drop()
        create_table(conn, table, "mongo", INDEXES[:n_indexes] if n_indexes == 3 else INDEXES[1:2])
        sync(conn, db, table)
        n = 3000
        docs = [row(i) for i in range(n)]
        for d in docs:
            d["email"] = "B%d-%s" % (n_indexes, d["email"])
        t0 = time.time()
        db[table].insert_many(docs)
        ok = sync(conn, db, table, timeout=300)
        elapsed = time.time() - t0
        results[n_indexes] = n / elapsed if ok else 0
        print("measure: %d events applied with %d index table(s) in %.2f s: %.0f events/s"
              % (n, n_indexes, elapsed, results[n_indexes]))
        bad = verify_clean(conn, table)
        check(ok and not bad, "measure with %d index table(s): all applied, verify clean" % n_indexes)
    return results


def main():
    client, conn = setup()
    db = client[DATABASE]
    pid = wait_applier(conn)
    check(pid is not None, "an applier runs for the table's server")
    outside_writes(client, conn, db)
    fdw_writes_nothing(client, conn, db)
    fdw_transactions_read_nothing(client, conn, db)
    snapshot_write_conflict(client, conn, db)
    fdw_ordered_reads_entries_only(client, conn, db)
    updates_of_other_fields_read_nothing(client, conn, db)
    one_facts_read(client, conn, db)
    no_ping_per_batch(client, conn, db)
    batch_delay(client, conn, db)
    kill_applier(client, conn, db)
    restarted = restart_server(client, conn, db)
    if restarted:
        client, db = restarted
    drop_collection(client, conn, db)
    counters_kept(client, conn, db)
    recreated_server(client, conn, db)
    small_history(conn)
    if "--measure" in sys.argv or os.environ.get("APPLIER_MEASURE"):
        measure(client, conn, db)
    print(RESULTS.summary("applier"))
    return 1 if RESULTS.failed else 0


if __name__ == "__main__":
    sys.exit(main())
