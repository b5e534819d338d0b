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
- at the end verify_index finds nothing, conflicts included.

Environment as exported by eval "$(test/env start)".  Bounded: each wait
for the applier at most 20 s; about ten seconds in all.  The last line is
"unique_conflicts: N passed, M failed".
"""
import os
import sys
import time

import psycopg2

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


def main():
    conn, coll = setup()
    try:
        test_conflicts(conn, coll)
        test_fdw_writes(conn)
        test_resolved(conn, coll)
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
