#!/usr/bin/python3
"""MongoDB's limits through idxtable_fdw, against a test server of its own.

Starts test/server/mongo_test_server.py with a short transaction lifetime
(--txn-lifetime 3) and a small transaction size limit (--txn-size-limit),
and checks, in the PostgreSQL of test/env (PGHOST...):

- a transaction that outlives the server's lifetime fails with 54000 and a
  hint to write in smaller transactions or in ordered mode, not 40001
  "retry" (on a later statement and on COMMIT); ordered mode loads the same
  rows with the same pauses;
- a transaction too large for the server fails the same way; ordered mode
  loads it;
- a writeConcernError (failCommand) on an INSERT, UPDATE and DELETE in
  ordered mode is 40003 and the statement's write is undone;
- a writeConcernError on commitTransaction is retried (and then succeeds),
  or, if it stays or cannot be satisfied (UnsatisfiableWriteConcern), the
  COMMIT fails with 08007 and says the outcome is unknown;
- namespaces over 255 bytes and $in filters and bulks past 16 MB are kept
  from the server (the test server refuses what mongod refuses).

The last line is "limits: N passed, M failed".
"""
import os
import subprocess
import sys
import tempfile
import time

import psycopg2
import pymongo

HERE = os.path.dirname(os.path.abspath(__file__))
SERVER = os.path.join(HERE, "server", "mongo_test_server.py")
DATABASE = "idxtable_limits"
LIFETIME = 3
SIZE_LIMIT = 400000
HINT_WORDS = ("smaller transactions", "consistency to 'ordered'")


class Results:
    """Pass/fail tally."""

    def __init__(self):
        self.passed = 0
        self.failed = 0

    def check(self, ok, what):
        if ok:
            self.passed += 1
        else:
            self.failed += 1
            print("FAIL " + what)
        sys.stdout.flush()


def start_server(tmpdir):
    """The test server with short limits; returns (process, port)."""
    port_file = os.path.join(tmpdir, "port")
    proc = subprocess.Popen(["/usr/bin/python3", SERVER, "--host", "127.0.0.1", "--port", "0",
                             "--port-file", port_file, "--txn-lifetime", str(LIFETIME),
                             "--txn-size-limit", str(SIZE_LIMIT)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 15
    while not os.path.exists(port_file):
        if proc.poll() is not None or time.time() > deadline:
            raise RuntimeError("the test server did not start")
        time.sleep(0.05)
    with open(port_file) as f:
        return proc, int(f.read())


def setup_database(uri):
    """The database with the extension and a server for the test server."""
    admin = psycopg2.connect(dbname=os.environ.get("PGDATABASE", "postgres"))
    admin.autocommit = True
    with admin.cursor() as cur:
        cur.execute("DROP DATABASE IF EXISTS %s WITH (FORCE)" % DATABASE)
        cur.execute("CREATE DATABASE %s" % DATABASE)
    admin.close()
    conn = psycopg2.connect(dbname=DATABASE)
    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute("CREATE EXTENSION idxtable_fdw")
        cur.execute("CREATE SERVER lim FOREIGN DATA WRAPPER idxtable_fdw OPTIONS (uri %s, database %s)",
                    (uri, DATABASE))
        cur.execute("CREATE USER MAPPING FOR CURRENT_USER SERVER lim")
    return conn


def table(conn, name, mode, extra=""):
    """A fresh foreign table (_id text, v text, n int) in consistency `mode`."""
    with conn.cursor() as cur:
        cur.execute("DROP FOREIGN TABLE IF EXISTS %s" % name)
        cur.execute("CREATE FOREIGN TABLE %s (_id text, v text, n int) SERVER lim "
                    "OPTIONS (collection '%s', consistency '%s'%s)" % (name, name, mode, extra))


def run(conn, statements):
    """Run statements; returns the psycopg2 error or None (the session is rolled back after an error)."""
    try:
        with conn.cursor() as cur:
            for sql in statements:
                cur.execute(sql)
        return None
    except psycopg2.Error as exc:
        with conn.cursor() as cur:
            cur.execute("ROLLBACK")
        return exc


def describe(exc):
    """SQLSTATE, message and hint of an error, for failure messages."""
    if exc is None:
        return "no error"
    return "%s %s HINT: %s" % (exc.pgcode, exc.diag.message_primary, exc.diag.message_hint)


def is_limit_error(exc):
    """54000 with the hint that says what to do."""
    return (exc is not None and exc.pgcode == "54000" and exc.diag.message_hint is not None
            and all(w in exc.diag.message_hint for w in HINT_WORDS))


def ids(db, coll):
    """The _ids in a collection, sorted."""
    return sorted(d["_id"] for d in db[coll].find({}, {"_id": 1}))


def test_lifetime(r, conn, db):
    """A transaction open past the lifetime: a later statement and COMMIT fail with 54000."""
    table(conn, "life", "transaction")
    err = run(conn, ["BEGIN", "INSERT INTO life VALUES ('1', 'a', 1)", "SELECT pg_sleep(%d)" % (LIFETIME + 2),
                     "INSERT INTO life VALUES ('2', 'b', 2)", "COMMIT"])
    r.check(is_limit_error(err), "lifetime, later statement: want 54000 with the hint, got %s" % describe(err))
    r.check(err is not None and "ran longer than the server allows" in err.diag.message_primary
            and "%d seconds after its start" % LIFETIME in (err.diag.message_detail or ""),
            "lifetime message and detail: %s / %s" % (describe(err), err and err.diag.message_detail))
    err = run(conn, ["BEGIN", "INSERT INTO life VALUES ('3', 'c', 3)", "SELECT pg_sleep(%d)" % (LIFETIME + 2),
                     "COMMIT"])
    r.check(is_limit_error(err), "lifetime, COMMIT: want 54000 with the hint, got %s" % describe(err))
    r.check(ids(db, "life") == [], "an expired transaction left %s" % ids(db, "life"))
    err = run(conn, ["BEGIN", "INSERT INTO life VALUES ('4', 'd', 4)", "SELECT pg_sleep(1)",
                     "INSERT INTO life VALUES ('5', 'e', 5)", "COMMIT"])
    r.check(err is None and ids(db, "life") == ["4", "5"], "a short transaction: %s" % describe(err))
    table(conn, "life_ordered", "ordered")
    err = run(conn, ["BEGIN", "INSERT INTO life_ordered VALUES ('1', 'a', 1)",
                     "SELECT pg_sleep(%d)" % (LIFETIME + 2), "INSERT INTO life_ordered VALUES ('2', 'b', 2)",
                     "COMMIT"])
    r.check(err is None and ids(db, "life_ordered") == ["1", "2"],
            "ordered mode needs no MongoDB transaction: %s" % describe(err))


def test_size(r, conn, db):
    """A transaction writing more than the server takes: 54000; ordered mode loads it."""
    load = "INSERT INTO %s SELECT g::text, repeat('x', 4000), g FROM generate_series(1, 200) g"
    table(conn, "big", "transaction")
    err = run(conn, [load % "big"])
    r.check(is_limit_error(err), "size: want 54000 with the hint, got %s" % describe(err))
    r.check(err is not None and "too large for the server" in err.diag.message_primary, describe(err))
    r.check(ids(db, "big") == [], "a too large transaction left rows")
    table(conn, "big_ordered", "ordered")
    err = run(conn, [load % "big_ordered"])
    r.check(err is None and len(ids(db, "big_ordered")) == 200, "ordered bulk load: %s" % describe(err))


def failpoint(client, commands, wce, times=1):
    """failCommand with a writeConcernError for the FDW's connections."""
    client.admin.command({"configureFailPoint": "failCommand", "mode": {"times": times},
                          "data": {"failCommands": commands, "appName": "idxtable_fdw",
                                   "writeConcernError": wce}})


def failpoint_off(client):
    client.admin.command({"configureFailPoint": "failCommand", "mode": "off"})


WCE_TIMEOUT = {"code": 64, "codeName": "WriteConcernFailed", "errmsg": "waiting for replication timed out",
               "errInfo": {"wtimeout": True}}
WCE_UNSATISFIABLE = {"code": 100, "codeName": "UnsatisfiableWriteConcern",
                     "errmsg": "Not enough data-bearing nodes"}


def test_write_concern_writes(r, conn, db, client):
    """Ordered mode: a writeConcernError fails the statement with 40003 and its write is undone."""
    table(conn, "wc", "ordered")
    run(conn, ["INSERT INTO wc VALUES ('1', 'a', 1), ('2', 'b', 2)"])
    cases = [
        ("insert", "INSERT INTO wc VALUES ('3', 'c', 3), ('4', 'd', 4)"),
        ("findAndModify", "UPDATE wc SET v = 'changed' WHERE _id = '1'"),
        ("findAndModify", "DELETE FROM wc WHERE _id = '2'"),
    ]
    before = sorted(db.wc.find(), key=lambda d: d["_id"])
    for command, sql in cases:
        failpoint(client, [command], WCE_TIMEOUT)
        err = run(conn, [sql])
        failpoint_off(client)
        after = sorted(db.wc.find(), key=lambda d: d["_id"])
        r.check(err is not None and err.pgcode == "40003" and "write concern" in err.diag.message_primary,
                "%s with a writeConcernError: want 40003, got %s" % (sql, describe(err)))
        r.check(after == before, "%s: the write was not undone: %s" % (sql, after))


def test_write_concern_commit(r, conn, db, client):
    """commitTransaction with a writeConcernError: retried, or 08007 when it stays."""
    table(conn, "wct", "transaction")
    failpoint(client, ["commitTransaction"], WCE_TIMEOUT, times=1)
    err = run(conn, ["BEGIN", "INSERT INTO wct VALUES ('1', 'a', 1)", "COMMIT"])
    r.check(err is None and ids(db, "wct") == ["1"], "one writeConcernError on commit is retried: %s"
            % describe(err))
    failpoint(client, ["commitTransaction"], WCE_TIMEOUT, times=10)
    err = run(conn, ["BEGIN", "INSERT INTO wct VALUES ('2', 'b', 2)", "COMMIT"])
    failpoint_off(client)
    r.check(err is not None and err.pgcode == "08007" and "could not confirm the commit" in err.diag.message_primary,
            "a writeConcernError that stays: want 08007, got %s" % describe(err))
    failpoint(client, ["commitTransaction"], WCE_UNSATISFIABLE, times=1)
    err = run(conn, ["BEGIN", "INSERT INTO wct VALUES ('3', 'c', 3)", "COMMIT"])
    failpoint_off(client)
    r.check(err is not None and err.pgcode == "08007" and "w option" in (err.diag.message_hint or ""),
            "UnsatisfiableWriteConcern is not retried: want 08007, got %s" % describe(err))
    r.check(run(conn, ["SELECT count(*) FROM wct"]) is None, "the session works afterwards")


def main():
    r = Results()
    tmpdir = tempfile.mkdtemp(prefix="idxtable_limits.")
    proc, port = start_server(tmpdir)
    uri = "mongodb://127.0.0.1:%d/?replicaSet=rs0" % port
    client = pymongo.MongoClient(uri, serverSelectionTimeoutMS=10000)
    db = client[DATABASE]
    try:
        conn = setup_database(uri)
        selected = sys.argv[1:]
        for fn, args in [(test_lifetime, (r, conn, db)), (test_size, (r, conn, db)),
                         (test_write_concern_writes, (r, conn, db, client)),
                         (test_write_concern_commit, (r, conn, db, client))]:
            if selected and not any(s in fn.__name__ for s in selected):
                continue
            started = time.time()
            try:
                fn(*args)
            except Exception as exc:  # a broken case counts as a failure, the others still run
                r.check(False, "%s raised %r" % (fn.__name__, exc))
            print("%-30s %.1fs" % (fn.__name__, time.time() - started))
        conn.close()
    finally:
        proc.terminate()
        proc.wait(10)
    print("limits: %d passed, %d failed" % (r.passed, r.failed))
    return 1 if r.failed else 0


if __name__ == "__main__":
    sys.exit(main())
