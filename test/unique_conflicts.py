#!/usr/bin/python3
"""Unique keys written outside PostgreSQL, through the change-stream applier.

Against the running test/env (PostgreSQL started with
shared_preload_libraries=idxtable_fdw, so an applier follows the tables):
a pymongo client writes straight into MongoDB, and

- a document with a unique key another fact holds is a conflict: the
  applier records it in idxtable.conflicts (index, key, both _ids),
  idxtable.sync_status and verify_index count it, and a routed query finds
  both facts of the key, as a plain scan does;
- a write through the FDW of a key that a document written outside holds
  (its claim brought in by the applier) fails with 23505 and the usual
  DETAIL, in transaction and in ordered mode;
- when the holder loses the key outside, the fact that waited for it takes
  the claim (FDW writes of the key still fail), and the conflict's row
  goes; a fact in conflict deleted outside takes its row with it;
- the same when the holder's claim is gone before the applier sees the
  change: the holder deleted or given another key through the FDW (whose
  transaction deletes the claim itself), and an applier that fails after
  deleting the claim and before the waiting fact took it (a failCommand on
  its next insert; it is restarted and applies the batch again).  Without
  the conflict's row to lead it from the holder to the waiting fact, that
  fact kept its conflict entry and never got the claim: verify_index found
  missing 1, stale 1, and an FDW INSERT of the key succeeded;
- an UPDATE of a column the unique index table includes fails with 23505
  for the fact in conflict (its entry of the key is written again), not for
  the holder;
- at the end verify_index finds nothing, conflicts included.

Environment as exported by eval "$(test/env start)".  Bounded: each wait
for the applier at most 20 s; about ten seconds in all.  The last line is
"unique_conflicts: N passed, M failed".
"""
import os
import sys
import threading
import time

import psycopg2
from bson.son import SON

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures"))
from results import Results  # noqa: E402  (test/fixtures)
import mongo_client  # noqa: E402  (test/fixtures)
import pg_fixture  # noqa: E402  (test/fixtures)

DBNAME = "idxtable_uconf"       # both the PostgreSQL and the MongoDB database
RES = Results()


connect = pg_fixture.connect
rows = pg_fixture.execute


def wait_for(predicate, timeout=20):
    """Poll predicate() every 0.1 s until it is true or timeout s pass."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() >= deadline:
            return value
        time.sleep(0.1)


def setup():
    """A database with the extension, a server, a mapping and a table with
    two unique index tables; returns (connection, pymongo collection)."""
    client = mongo_client.connect()
    client.drop_database(DBNAME)
    # The applier starts at create_index's cluster time, a ping's
    # operationTime: on an idle server, that of the last write, here the
    # dropDatabase, whose invalidate would stop the stream (error 260, an
    # applier issue reported to the lead).  A write elsewhere moves it on.
    client[DBNAME + "_tick"]["tick"].insert_one({})
    conn = pg_fixture.setup_database(DBNAME)
    pg_fixture.create_foreign_table(conn, "people", "_id text, email text, codes text[], n int")
    rows(conn, "SELECT idxtable.create_index('people', '{lower(email)}', include => '{n}',"
               " is_unique => true, name => 'people_email')")
    rows(conn, "SELECT idxtable.create_index('people', '{codes}', is_unique => true,"
               " name => 'people_codes')")
    rows(conn, "INSERT INTO people VALUES ('1', 'ann@x.org', '{a1,a2}', 1)")
    coll = mongo_client.database(client, DBNAME)["people"]
    return conn, coll


def conflicts(conn):
    return rows(conn, "SELECT index_name, key, fact_id, holder_id FROM idxtable.conflicts"
                      " ORDER BY 1, 3, 4")


def fails_23505(conn, sql, key):
    """Does sql fail with 23505 and the DETAIL naming key?"""
    try:
        rows(conn, sql)
    except psycopg2.Error as exc:
        detail = exc.diag.message_detail or ""
        return exc.pgcode == "23505" and detail == "Key %s already exists." % key
    return False


def verify(conn, name):
    return rows(conn, "SELECT missing, orphan, stale, unconvertible, conflicts"
                      " FROM idxtable.verify_index(%s)", (name,))[0]


def routed(conn, sql):
    """sql routed through the index tables, and the same with routing off."""
    rows(conn, "SET idxtable.enable_plain_scan = off")
    through = rows(conn, sql)
    rows(conn, "RESET idxtable.enable_plain_scan")
    rows(conn, "SET idxtable.enable_index_routing = off")
    plain = rows(conn, sql)
    rows(conn, "RESET idxtable.enable_index_routing")
    return through, plain


def test_conflicts(conn, coll):
    """Duplicates written outside are recorded, counted and readable."""
    coll.insert_one({"_id": "2", "email": "ANN@x.org", "codes": ["b1"], "n": 2})
    coll.insert_one({"_id": "3", "email": "cid@x.org", "codes": ["a2", "c1"], "n": 3})
    coll.insert_one({"_id": "4", "email": "dee@x.org", "codes": ["d1"], "n": 4})
    want = [("people_codes", "(codes)=(a2)", '"3"', '"1"'),
            ("people_email", "(lower(email))=(ann@x.org)", '"2"', '"1"')]
    got = wait_for(lambda: conflicts(conn) == want and conflicts(conn))
    RES.check(got == want, "the applier records both conflicts: %r" % (conflicts(conn),))
    status = rows(conn, "SELECT name, conflicts FROM idxtable.sync_status ORDER BY 1")
    RES.check(status == [("people_codes", 1), ("people_email", 1)],
              "sync_status counts them: %r" % (status,))
    for name in ("people_email", "people_codes"):
        v = verify(conn, name)
        RES.check(v == (0, 0, 0, 0, 1), "verify_index(%s) = %r" % (name, v))
    through, plain = routed(conn, "SELECT _id FROM people WHERE lower(email) = 'ann@x.org'"
                                  " ORDER BY _id")
    RES.check(through == plain == [("1",), ("2",)],
              "a routed query finds both facts of a key: %r, plain %r" % (through, plain))
    # n is included in people_email: an UPDATE of it writes the fact's entry of the key again
    RES.check(fails_23505(conn, "UPDATE people SET n = 20 WHERE _id = '2'", "(lower(email))=(ann@x.org)"),
              "an UPDATE of an included column of the fact in conflict fails with 23505")
    rows(conn, "UPDATE people SET n = 1 WHERE _id = '1'")
    RES.check(rows(conn, "SELECT _id, n FROM people WHERE _id IN ('1', '2') ORDER BY 1") == [("1", 1), ("2", 2)],
              "the holder's UPDATE of it succeeds; nothing of the failed one remains")
    through, plain = routed(conn, "SELECT _id FROM people WHERE 'a2' = ANY (codes) ORDER BY _id")
    RES.check(through == plain == [("1",), ("3",)],
              "the same for a multi-valued key: %r, plain %r" % (through, plain))


def test_fdw_writes(conn):
    """Keys held by facts written outside refuse FDW writes in both modes."""
    for mode in ("transaction", "ordered"):
        rows(conn, "ALTER FOREIGN TABLE people OPTIONS (ADD consistency '%s')" % mode)
        RES.check(fails_23505(conn, "INSERT INTO people VALUES ('5', 'Dee@x.org', NULL, 5)",
                              "(lower(email))=(dee@x.org)"),
                  "%s: INSERT of a key a fact written outside holds fails with 23505" % mode)
        RES.check(fails_23505(conn, "UPDATE people SET codes = '{c1}' WHERE _id = '1'",
                              "(codes)=(c1)"),
                  "%s: UPDATE to such a key fails with 23505" % mode)
        rows(conn, "ALTER FOREIGN TABLE people OPTIONS (DROP consistency)")
    n = rows(conn, "SELECT count(*) FROM people WHERE _id = '5'")[0][0]
    RES.check(n == 0, "nothing of the failed writes remains")


def test_resolved(conn, coll):
    """The holder loses the key: the waiting fact takes the claim."""
    coll.update_one({"_id": "1"}, {"$set": {"email": "amy@x.org"}})
    want = [("people_codes", "(codes)=(a2)", '"3"', '"1"')]
    got = wait_for(lambda: conflicts(conn) == want and conflicts(conn))
    RES.check(got == want, "the resolved conflict's row goes: %r" % (conflicts(conn),))
    v = verify(conn, "people_email")
    RES.check(v == (0, 0, 0, 0, 0), "the waiting fact holds the key: verify_index = %r" % (v,))
    RES.check(fails_23505(conn, "INSERT INTO people VALUES ('6', 'ann@X.org', NULL, 6)",
                          "(lower(email))=(ann@x.org)"),
              "an FDW write of the key it took fails with 23505")
    coll.delete_one({"_id": "3"})
    gone = wait_for(lambda: conflicts(conn) == [])
    RES.check(gone, "a fact in conflict deleted outside takes its row: %r"
              % (conflicts(conn),))
    for name in ("people_email", "people_codes"):
        v = verify(conn, name)
        RES.check(v == (0, 0, 0, 0, 0), "at the end verify_index(%s) = %r" % (name, v))
    status = rows(conn, "SELECT name, conflicts, last_error FROM idxtable.sync_status ORDER BY 1")
    RES.check(status == [("people_codes", 0, None), ("people_email", 0, None)],
              "sync_status: %r" % (status,))


def position_past(coll, optime):
    """Has the applier stored a position at or after optime?"""
    positions = coll.database["idxtable.positions"]
    return any(p.get("clusterTime") is not None and p["clusterTime"] >= optime
               for p in positions.find())


def applier_fails_next_insert(coll):
    """failCommand: the applier's next insert (its claim of a key) fails."""
    coll.database.client.admin.command(SON([
        ("configureFailPoint", "failCommand"), ("mode", {"times": 1}),
        ("data", {"failCommands": ["insert"], "errorCode": 2, "appName": "idxtable_fdw applier"})]))


def failpoint_off(coll):
    """Turn failCommand off; how often it fired."""
    reply = coll.database.client.admin.command(SON([("configureFailPoint", "failCommand"),
                                                    ("mode", "off")]))
    return int(reply.get("count", 0))


def conflict_of(conn, coll, holder, fact, email):
    """fact (written outside) takes the email that holder has: wait for its row."""
    coll.insert_one({"_id": fact, "email": email.upper(), "n": int(fact)})
    want = [("people_email", "(lower(email))=(%s)" % email, '"%s"' % fact, '"%s"' % holder)]
    got = wait_for(lambda: conflicts(conn) == want and conflicts(conn))
    RES.check(got == want, "conflict of %s with holder %s recorded: %r" % (fact, holder, conflicts(conn)))


def holder_gone_checks(conn, what, email, fact):
    """After the holder lost the key: the waiting fact holds it."""
    gone = wait_for(lambda: conflicts(conn) == [])
    RES.check(gone, "%s: the waiting fact's row goes: %r" % (what, conflicts(conn)))
    v = verify(conn, "people_email")
    RES.check(v == (0, 0, 0, 0, 0), "%s: the waiting fact holds the key: verify_index = %r" % (what, v))
    through, plain = routed(conn, "SELECT _id FROM people WHERE lower(email) = '%s'" % email)
    RES.check(through == plain == [(fact,)], "%s: routed %r, plain %r" % (what, through, plain))
    RES.check(fails_23505(conn, "INSERT INTO people VALUES ('99', '%s', NULL, 99)" % email,
                          "(lower(email))=(%s)" % email),
              "%s: an FDW write of the key fails with 23505" % what)


def test_holder_gone(conn, coll):
    """The holder's claim is gone before the applier applies the change."""
    rows(conn, "INSERT INTO people VALUES ('7', 'eve@x.org', NULL, 7)")
    conflict_of(conn, coll, "7", "8", "eve@x.org")
    rows(conn, "DELETE FROM people WHERE _id = '7'")
    holder_gone_checks(conn, "holder deleted through the FDW", "eve@x.org", "8")

    rows(conn, "INSERT INTO people VALUES ('9', 'fay@x.org', NULL, 9)")
    conflict_of(conn, coll, "9", "10", "fay@x.org")
    rows(conn, "UPDATE people SET email = 'gus@x.org' WHERE _id = '9'")
    holder_gone_checks(conn, "holder given another key through the FDW", "fay@x.org", "10")

    coll.insert_one({"_id": "11", "email": "hal@x.org", "n": 11})
    session = coll.database.client.start_session()
    with session:
        coll.insert_one({"_id": "12", "email": "HAL@x.org", "n": 12}, session=session)
        optime = session.operation_time
    want = [("people_email", "(lower(email))=(hal@x.org)", '"12"', '"11"')]
    got = wait_for(lambda: conflicts(conn) == want and conflicts(conn))
    RES.check(got == want, "conflict of 12 with holder 11 recorded: %r" % (conflicts(conn),))
    # a restart must not read the conflict's event again (it would repair 12 itself)
    RES.check(wait_for(lambda: position_past(coll, optime)), "the applier stored its position past it")
    applier_fails_next_insert(coll)
    try:
        coll.delete_one({"_id": "11"})
        holder_gone_checks(conn, "applier failed between the claim's delete and its hand-over",
                           "hal@x.org", "12")
    finally:
        fired = failpoint_off(coll)
    RES.check(fired == 1, "the applier's insert failed once (failCommand fired %d times)" % fired)


def block_fdw_fact_write(coll, error_code=None, block_ms=3000):
    """failCommand: the FDW's next findAndModify (the fact step of an
    ordered UPDATE, after its claim of the new key) waits block_ms first,
    and then fails with error_code if given."""
    data = {"failCommands": ["findAndModify"], "blockConnection": True, "blockTimeMS": block_ms,
            "appName": "idxtable_fdw"}
    if error_code is not None:
        data["errorCode"] = error_code
    coll.database.client.admin.command(SON([
        ("configureFailPoint", "failCommand"), ("mode", {"times": 1}), ("data", data)]))


def update_in_thread(sql, outcome):
    """Run sql in a session of its own in a thread; outcome gets its SQLSTATE
    (None: it succeeded)."""
    def run():
        writer = connect(DBNAME)
        try:
            rows(writer, sql)
            outcome["sqlstate"] = None
        except psycopg2.Error as exc:
            outcome["sqlstate"] = exc.pgcode
        finally:
            writer.close()
    thread = threading.Thread(target=run)
    thread.start()
    return thread


def claim_in_flight_checks(conn, coll, what, fact, old_key, new_key, other):
    """While an ordered UPDATE of fact to new_key waits between its claim and
    its fact: the applier repairs the fact (an outside change of it) and
    keeps the claim, so that another FDW write of the key (an INSERT of
    _id other) fails with 23505."""
    index = coll.database["idxtable.people.people_email"]
    claimed = wait_for(lambda: index.find_one({"_id": {"k0": new_key}}), 5)
    RES.check(claimed is not None and claimed.get("id") == fact,
              "%s: the UPDATE claims the key before it writes the fact: %r" % (what, claimed))
    coll.update_one({"_id": fact}, {"$inc": {"n": 1}})
    # a routed query with current waits for the applier to apply that change
    through, plain = routed(conn, "SELECT _id, n FROM people WHERE lower(email) = '%s'" % old_key)
    RES.check(through == plain and len(through) == 1,
              "%s: the applier applied the outside change: %r, plain %r" % (what, through, plain))
    claim = index.find_one({"_id": {"k0": new_key}})
    RES.check(claim is not None and claim.get("id") == fact,
              "%s: the applier's repair of the fact keeps the claim of its write in flight: %r"
              % (what, claim))
    RES.check(fails_23505(conn, "INSERT INTO people VALUES ('%s', '%s', NULL, 0)" % (other, new_key),
                          "(lower(email))=(%s)" % new_key),
              "%s: another FDW write of the key fails with 23505 meanwhile" % what)


def test_claim_in_flight(conn, coll):
    """The applier never frees a key an ordered write in flight has claimed."""
    rows(conn, "ALTER FOREIGN TABLE people OPTIONS (ADD consistency 'ordered')")
    rows(conn, "INSERT INTO people VALUES ('20', 'ivy@x.org', NULL, 20)")
    outcome = {}
    block_fdw_fact_write(coll)
    try:
        thread = update_in_thread("UPDATE people SET email = 'jay@x.org' WHERE _id = '20'", outcome)
        claim_in_flight_checks(conn, coll, "a write that succeeds", "20", "ivy@x.org",
                               "jay@x.org", "30")
        RES.check(thread.is_alive(), "the UPDATE was still waiting for its fact's write")
        thread.join(15)
    finally:
        failpoint_off(coll)
    RES.check(outcome.get("sqlstate", "?") is None, "the UPDATE succeeded: %r" % (outcome,))
    through, plain = routed(conn, "SELECT _id FROM people WHERE lower(email) = 'jay@x.org'")
    RES.check(through == plain == [("20",)], "the key is the UPDATE's: routed %r, plain %r"
              % (through, plain))
    v = wait_for(lambda: verify(conn, "people_email") == (0, 0, 0, 0, 0) or None, 10)
    RES.check(v, "then verify_index is clean: %r" % (verify(conn, "people_email"),))

    # the write fails after its claim: once it is over, the applier removes it
    block_fdw_fact_write(coll, error_code=2)
    try:
        thread = update_in_thread("UPDATE people SET email = 'kim@x.org' WHERE _id = '20'", outcome)
        claim_in_flight_checks(conn, coll, "a write that fails", "20", "jay@x.org",
                               "kim@x.org", "31")
        thread.join(15)
    finally:
        failpoint_off(coll)
    RES.check(outcome.get("sqlstate") not in (None, "23505"), "the UPDATE failed: %r" % (outcome,))
    v = wait_for(lambda: verify(conn, "people_email") == (0, 0, 0, 0, 0) or None, 10)
    RES.check(v, "the applier removed the failed write's claim once it was over: verify_index %r"
              % (verify(conn, "people_email"),))

    # the same, with the applier killed while it waits for the write to end:
    # it stored no position past the outside change, so its successor
    # applies it again, and removes the claim then
    block_fdw_fact_write(coll, error_code=2, block_ms=4500)
    try:
        thread = update_in_thread("UPDATE people SET email = 'lee@x.org' WHERE _id = '20'", outcome)
        claim_in_flight_checks(conn, coll, "applier killed", "20", "jay@x.org", "lee@x.org", "32")
        # positions are stored at most a second apart while events come:
        # by now one past the change would be stored, but for the hold
        time.sleep(1.5)
        killed = rows(conn, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                            " WHERE backend_type = 'idxtable_fdw applier'"
                            " AND datname = current_database()")
        thread.join(15)
    finally:
        failpoint_off(coll)
    RES.check(killed == [(True,)], "applier killed: %r" % (killed,))
    RES.check(outcome.get("sqlstate") not in (None, "23505"), "the UPDATE failed: %r" % (outcome,))
    v = wait_for(lambda: verify(conn, "people_email") == (0, 0, 0, 0, 0) or None, 30)
    RES.check(v, "the applier started again removed the failed write's claim: verify_index %r"
              % (verify(conn, "people_email"),))
    try:
        rows(conn, "INSERT INTO people VALUES ('29', 'kim@x.org', NULL, 29)")
        holders = rows(conn, "SELECT _id FROM people WHERE lower(email) = 'kim@x.org'")
    except psycopg2.Error as exc:
        holders = exc.pgcode
    RES.check(holders == [("29",)], "and the key is free for another write: %r" % (holders,))
    rows(conn, "ALTER FOREIGN TABLE people OPTIONS (DROP consistency)")


def block_commands(coll, commands, app, block_ms, times):
    """failCommand: the next `times` of `commands` of the client named app
    wait block_ms first; returns how often the failpoint replaced fired."""
    reply = coll.database.client.admin.command(SON([
        ("configureFailPoint", "failCommand"), ("mode", {"times": times}),
        ("data", {"failCommands": commands, "blockConnection": True, "blockTimeMS": block_ms,
                  "appName": app})]))
    return int(reply.get("count", 0))


def set_batch_delay(conn, ms):
    """idxtable.applier_batch_delay for the applier (None: its default)."""
    rows(conn, "ALTER SYSTEM SET idxtable.applier_batch_delay = %d" % ms if ms is not None
         else "ALTER SYSTEM RESET idxtable.applier_batch_delay")
    rows(conn, "SELECT pg_reload_conf()")
    time.sleep(0.5)


def test_undo_entries_kept(conn, coll):
    """The applier never removes the entries that the undo of a failed
    ordered UPDATE gave back to a fact.  A two-row UPDATE gives both facts
    one new key and a new n: the first row writes its new entries (the
    key's claim, the n entry of a non-unique index table), writes its fact
    and deletes its old entries; the second row's claim is a duplicate, so
    the statement's undo writes the old entries again and the fact back.
    The applier, which read the first fact's entries before that delete and
    the fact after its write, found the old entries stale; its deletion of
    them as it had read them ({_id, id}) came after the undo had written
    them again, and took the undo's: the fact kept its key without a claim,
    and its n without an entry, until the applier applied the undo's change
    (test/differential_writes.py's ordered mode found missing 1 after such
    a statement, once in CI, under load; with the same seed after the
    'transaction' mode, stale 1 in an index table including n, the entry
    replaced by the applier with the new n).  Here the FDW's deletion of
    the old entries is held while the applier reads (it gets the first
    row's change after its batch delay, 1 s here), and the applier's
    deletions, and its next insert (the claim put back once it applies the
    undo), until the undo is over."""
    rows(conn, "ALTER FOREIGN TABLE people OPTIONS (ADD consistency 'ordered')")
    rows(conn, "SELECT idxtable.create_index('people', '{n}', name => 'people_n')")
    rows(conn, "INSERT INTO people VALUES ('60', 'mia@x.org', NULL, 60)")
    rows(conn, "INSERT INTO people VALUES ('61', 'ned@x.org', NULL, 61)")
    database = coll.database
    wanted = [("claim", database["idxtable.people.people_email"], {"_id": {"k0": "mia@x.org"}}),
              ("n entry", database["idxtable.people.people_n"], {"_id": {"k0": 60, "id": "60"}})]
    set_batch_delay(conn, 1000)
    outcome = {}
    lost = []
    try:
        # a routed query (current) waits until the applier has applied them
        routed(conn, "SELECT _id FROM people WHERE lower(email) = 'mia@x.org'")
        block_commands(coll, ["delete"], "idxtable_fdw", 2000, 1)
        thread = update_in_thread("UPDATE people SET email = 'oz@x.org', n = n + 1"
                                  " WHERE _id IN ('60', '61')", outcome)
        wrote = wait_for(lambda: (coll.find_one({"_id": "60"}) or {}).get("email") == "oz@x.org", 5)
        RES.check(wrote, "undo: the UPDATE wrote the first fact")
        time.sleep(0.05)        # its deletion of the old entries is held now
        fired = block_commands(coll, ["delete", "insert"], "idxtable_fdw applier", 2500, 3)
        RES.check(fired == 1, "undo: the UPDATE's deletion of the old entries was held (%d)" % fired)
        thread.join(15)
        RES.check(outcome.get("sqlstate") == "23505", "undo: the UPDATE failed with 23505: %r" % (outcome,))
        # while the applier's commands are held, and a while after
        deadline = time.monotonic() + 7
        while time.monotonic() < deadline and not lost:
            for what, index, key in wanted:
                entry = index.find_one(key)
                if entry is None or entry.get("id") != "60":
                    lost.append(what)
            time.sleep(0.02)
    finally:
        fired = failpoint_off(coll)
        set_batch_delay(conn, None)
    RES.check(fired >= 1, "undo: the applier's deletion of the entries it read was held (%d)" % fired)
    RES.check(not lost, "undo: the restored fact keeps its entries, lost: %r" % (lost,))
    for name in ("people_email", "people_n"):
        v = wait_for(lambda: verify(conn, name) == (0, 0, 0, 0, 0) or None, 10)
        RES.check(v, "undo: then verify_index(%s) is clean: %r" % (name, verify(conn, name)))
    rows(conn, "SELECT idxtable.drop_index('people_n')")
    rows(conn, "ALTER FOREIGN TABLE people OPTIONS (DROP consistency)")


def main():
    conn, coll = setup()
    try:
        test_conflicts(conn, coll)
        test_fdw_writes(conn)
        test_resolved(conn, coll)
        test_holder_gone(conn, coll)
        test_claim_in_flight(conn, coll)
        test_undo_entries_kept(conn, coll)
    finally:
        conn.close()
        admin = connect()
        rows(admin, "DROP DATABASE IF EXISTS %s WITH (FORCE)" % DBNAME)
        admin.close()
        coll.database.client.drop_database(DBNAME)
        coll.database.client.drop_database(DBNAME + "_tick")
    print(RES.summary("unique_conflicts"))
    return 1 if RES.failed else 0


if __name__ == "__main__":
    sys.exit(main())
