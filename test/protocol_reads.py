#!/usr/bin/python3
"""The index-table protocol's own reads go to the primary, whatever the URI's readPreference.

A foreign server whose URI asks for readPreference=secondaryPreferred runs
reads of every kind; the test server's `recentCommands` (a test-server-only
command, see test/server/README.md) returns each command with the
$readPreference libmongoc sent.  libmongoc 1.23 sends none for primary to a
replica-set member, which the server reads as primary.

- user-visible reads (a plain SELECT, a SELECT routed through an index
  table) carry secondaryPreferred;
- reads that decide a write carry primary: the ownership markers, claims of
  a unique index, verify_index and repair_index, index builds, the scan of an
  UPDATE/DELETE or SELECT ... FOR UPDATE, the fact fetch of an ordered-mode
  undo;
- a transaction that wrote can still read (its reads must be primary:
  libmongoc refuses others, "Read preference in a transaction must be
  primary").

Environment as for test/differential.py (PGHOST..., MONGO_URI, MONGO_USER,
MONGO_PASSWORD), with the project's test server (the test is skipped, and
says so, against another MongoDB).  The PostgreSQL and MongoDB databases
``idxtable_protoreads`` are dropped and created, and left in place.  The last
line is ``protocol reads: N passed, M failed``.
"""
import os
import sys

import psycopg2
import pymongo.errors

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures"))
from results import Results  # noqa: E402  (test/fixtures)
import mongo_client  # noqa: E402  (test/fixtures)
import pg_fixture  # noqa: E402  (test/fixtures)

DATABASE = "idxtable_protoreads"
PROTOCOL_PREFIX = "idxtable."          # index collections and the owners registry
READS = ("find", "aggregate", "count", "distinct", "listCollections")


def setup(mongo):
    mongo.drop_database(DATABASE)
    uri = os.environ["MONGO_URI"]
    uri += ("&" if "?" in uri else "?") + "readPreference=secondaryPreferred"
    conn = pg_fixture.setup_database(DATABASE, server="m", uri=uri)
    pg_fixture.create_foreign_table(conn, "t", "_id text, name text, town text, n int", server="m")
    pg_fixture.create_foreign_table(conn, "o", "_id text, name text, n int", server="m",
                                    options=[("consistency", "ordered")])
    with conn.cursor() as cur:
        cur.execute("INSERT INTO t SELECT 'k' || i, 'name' || i, 'town' || (i % 5), i "
                    "FROM generate_series(1, 40) i")
        cur.execute("INSERT INTO o SELECT 'k' || i, 'name' || i, i FROM generate_series(1, 10) i")
    return conn


def commands(mongo):
    """The commands since the last call (the log is cleared)."""
    return mongo.admin.command("recentCommands", clear=True)["commands"]


def reads(cmds, collection=None):
    # Only the FDW backends' commands: the change-stream applier that follows
    # this server (appName "idxtable_fdw applier") reads and writes on its own.
    return [c for c in cmds if c["command"] in READS and c["db"] == DATABASE
            and c.get("appName") == "idxtable_fdw"
            and (collection is None or c["collection"] == collection)]


def mode(cmd):
    rp = cmd.get("readPreference")
    return rp.get("mode") if rp else "primary"


def run(res, conn, mongo, sql, params=None, expect_error=None):
    """Run a statement (its SQLSTATE must be `expect_error`); return the commands it sent."""
    commands(mongo)
    with conn.cursor() as cur:
        try:
            cur.execute(sql, params)
            if cur.description:
                cur.fetchall()
            err = None
        except psycopg2.Error as exc:
            err = exc.pgcode
    res.check(err == expect_error, "%s: SQLSTATE %s, expected %s" % (sql, err, expect_error))
    return commands(mongo)


def check_all_primary(res, cmds, what, at_least=1):
    rs = reads(cmds)
    res.check(len(rs) >= at_least, "%s: %d reads seen, expected at least %d" % (what, len(rs), at_least))
    bad = [(c["command"], c["collection"], mode(c)) for c in rs if mode(c) != "primary"]
    res.check(not bad, "%s: reads not sent to the primary: %s" % (what, bad))


def main():
    res = Results()
    mongo = mongo_client.connect()
    try:
        commands(mongo)
    except pymongo.errors.OperationFailure:
        print("protocol reads: skipped (the MongoDB under test has no recentCommands)")
        print("protocol reads: 0 passed, 0 failed")
        return 0
    conn = setup(mongo)

    # user-visible reads keep the URI's readPreference
    cmds = run(res, conn, mongo, "SELECT * FROM t")
    rs = reads(cmds, "t")
    res.check(rs and all(mode(c) == "secondaryPreferred" for c in rs),
              "plain SELECT: %s" % [mode(c) for c in rs])

    # index DDL: the build's read of all facts and the markers
    cmds = run(res, conn, mongo, "SELECT idxtable.create_index('t', '{name}', is_unique => true)")
    check_all_primary(res, cmds, "create_index", 2)
    cmds = run(res, conn, mongo, "SELECT idxtable.create_index('t', '{town}')")
    check_all_primary(res, cmds, "create_index town", 2)
    run(res, conn, mongo, "SELECT idxtable.create_index('o', '{name}', is_unique => true)")

    # a routed SELECT under "any" is user-visible too: the lookup and the fact fetch
    cmds = run(res, conn, mongo, "SET idxtable.enable_plain_scan = off")
    cmds = run(res, conn, mongo, "SET idxtable.index_consistency = 'any'")
    cmds = run(res, conn, mongo, "SELECT * FROM t WHERE town = 'town3'")
    rs = [c for c in reads(cmds) if c["collection"] not in ("idxtable.owners", None)]
    res.check(len(rs) >= 2 and all(mode(c) == "secondaryPreferred" for c in rs),
              "routed SELECT under any: %s" % [(c["collection"], mode(c)) for c in rs])
    # under "current" it waited for the applier, whose entries are on the primary: both go there
    cmds = run(res, conn, mongo, "SET idxtable.index_consistency = 'current'")
    cmds = run(res, conn, mongo, "SELECT * FROM t WHERE town = 'town3'")
    rs = [c for c in reads(cmds) if c["collection"] not in ("idxtable.owners", "idxtable.sync", None)]
    res.check(len(rs) >= 2 and all(mode(c) in ("primary", None) for c in rs),
              "routed SELECT under current: %s" % [(c["collection"], mode(c)) for c in rs])
    cmds = run(res, conn, mongo, "RESET idxtable.enable_plain_scan")

    # writes: claims of a unique index (a duplicate is refused), the scans of UPDATE and DELETE
    cmds = run(res, conn, mongo, "INSERT INTO t VALUES ('k100', 'name5', 'town1', 100)", expect_error="23505")
    # (in a MongoDB transaction the entry's insert itself fails on the unique index: no read needed)
    check_all_primary(res, cmds, "INSERT of a duplicate (transaction)", 0)
    cmds = run(res, conn, mongo, "INSERT INTO o VALUES ('k100', 'name5', 100)", expect_error="23505")
    check_all_primary(res, cmds, "INSERT of a duplicate (ordered: claims)")
    cmds = run(res, conn, mongo, "UPDATE t SET n = n + 1 WHERE _id = 'k7'")
    check_all_primary(res, cmds, "UPDATE by _id")
    run(res, conn, mongo, "SET idxtable.enable_plain_scan = off")
    cmds = run(res, conn, mongo, "UPDATE t SET n = n + 10 WHERE town = 'town2'")
    check_all_primary(res, cmds, "UPDATE routed by town", 2)
    run(res, conn, mongo, "RESET idxtable.enable_plain_scan")
    cmds = run(res, conn, mongo, "DELETE FROM t WHERE n = 3")
    check_all_primary(res, cmds, "DELETE")
    cmds = run(res, conn, mongo, "SELECT * FROM t WHERE n < 5 FOR UPDATE")
    check_all_primary(res, cmds, "SELECT FOR UPDATE")

    # an ordered-mode statement that fails half-way undoes its writes, reading the facts first
    cmds = run(res, conn, mongo, "UPDATE o SET name = CASE WHEN n = 9 THEN 'name1x' ELSE name || 'x' END",
               expect_error="23505")
    check_all_primary(res, cmds, "ordered UPDATE undone", 2)
    undo = [c for c in reads(cmds, "o") if "_id" in (c.get("filter") or {})]
    res.check(undo, "ordered UPDATE undone: no fact fetch by _id seen")

    # verify and repair
    for fn in ("verify_index", "repair_index"):
        cmds = run(res, conn, mongo, "SELECT * FROM idxtable.%s('t_name_idx')" % fn)
        check_all_primary(res, cmds, fn, 2)

    # a transaction that wrote reads on (on the primary, as transactions must)
    with conn.cursor() as cur:
        commands(mongo)
        try:
            cur.execute("BEGIN")
            cur.execute("INSERT INTO t VALUES ('k200', 'name200', 'town0', 200)")
            cur.execute("SELECT count(*) FROM t")
            count = cur.fetchone()[0]
            cur.execute("COMMIT")
            res.check(count == 40, "read in a transaction: count %s, expected 40" % count)
        except psycopg2.Error as exc:
            cur.execute("ROLLBACK")
            res.check(False, "read in a transaction that wrote: %s" % exc.pgerror)
        cmds = commands(mongo)
        check_all_primary(res, [c for c in cmds if c["inTransaction"]], "transaction")
    conn.close()
    print(res.summary("protocol reads"))
    return 1 if res.failed else 0


if __name__ == "__main__":
    sys.exit(main())
