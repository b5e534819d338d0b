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
  from the server (the test server refuses what mongod refuses);
- an UPDATE that makes a stored document pass 16 MiB is refused by the
  server and reported as 54000, the document unchanged.

The last line is "limits: N passed, M failed".
"""
import os
import shutil
import subprocess
import sys
import tempfile
import time

import psycopg2
import pymongo

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures"))
from results import Results  # noqa: E402  (test/fixtures)
import pg_fixture  # noqa: E402  (test/fixtures)

HERE = os.path.dirname(os.path.abspath(__file__))
SERVER = os.path.join(HERE, "server", "mongo_test_server.py")
DATABASE = "idxtable_limits"
LIFETIME = 3
SIZE_LIMIT = 400000
HINT_WORDS = ("smaller transactions", "consistency to 'ordered'")
URI = None


def start_server(tmpdir, name, options):
    """A test server with these options; returns (process, port)."""
    port_file = os.path.join(tmpdir, name + ".port")
    proc = subprocess.Popen(["/usr/bin/python3", SERVER, "--host", "127.0.0.1", "--port", "0",
                             "--port-file", port_file] + options,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 15
    while not os.path.exists(port_file):
        if proc.poll() is not None or time.time() > deadline:
            raise RuntimeError("the test server did not start")
        time.sleep(0.05)
    with open(port_file) as f:
        return proc, int(f.read())


def setup_database(uri, plain_uri):
    """The database with the extension, server "lim" for the test server with short limits and "plain"
    for one with mongod's defaults."""
    conn = pg_fixture.setup_database(DATABASE, server="lim", uri=uri, credentials=False)
    pg_fixture.create_server(conn, DATABASE, name="plain", uri=plain_uri, credentials=False)
    return conn


def table(conn, name, mode, extra=(), server="lim"):
    """A fresh foreign table (_id text, v text, n int) in consistency `mode`."""
    pg_fixture.create_foreign_table(conn, name, "_id text, v text, n int", server=server,
                                    options=[("consistency", mode)] + list(extra), drop=True)


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


def test_document_grows_too_large(r, conn, db):
    """An UPDATE whose $set fits but makes the stored document pass 16 MiB: the server refuses it (17419),
    54000, in both modes, and the document is unchanged."""
    for mode in ("transaction", "ordered"):
        name = "grow_" + mode
        table(conn, name, mode, server="plain")
        err = run(conn, ["INSERT INTO %s VALUES ('1', repeat('a', 10000000), 1)" % name])
        r.check(err is None, "a 10 MB row: %s" % describe(err))
        with conn.cursor() as cur:
            cur.execute("ALTER FOREIGN TABLE %s ADD COLUMN w text" % name)
        err = run(conn, ["UPDATE %s SET w = repeat('b', 7000000), n = 2 WHERE _id = '1'" % name])
        r.check(err is not None and err.pgcode == "54000", "%s: a document grown past 16 MiB: want 54000, got %s"
                % (mode, describe(err)))
        doc = db[name].find_one({"_id": "1"}, {"n": 1, "w": 1})
        r.check(doc == {"_id": "1", "n": 1}, "%s: the document was changed: %s" % (mode, doc))


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


def test_namespace(r, conn, db):
    """"<database>.<collection>" over 255 bytes: 42622 naming both, for tables and index collections."""
    longdb = "d" * 63
    with conn.cursor() as cur:
        cur.execute("DROP SERVER IF EXISTS lim_long CASCADE")
        pg_fixture.create_server(conn, longdb, name="lim_long", uri=URI, credentials=False)
        cur.execute("CREATE FOREIGN TABLE ns_long (_id text, k int) SERVER lim_long "
                    "OPTIONS (collection '%s')" % ("c" * 195))
        cur.execute("CREATE FOREIGN TABLE ns_ok (_id text, k int) SERVER lim_long "
                    "OPTIONS (collection '%s', consistency 'ordered')" % ("c" * 150))
    for sql in ["SELECT * FROM ns_long", "INSERT INTO ns_long VALUES ('1', 1)"]:
        err = run(conn, [sql])
        r.check(err is not None and err.pgcode == "42622" and "ns_long" in err.diag.message_primary
                and longdb in (err.diag.message_detail or "") and "c" * 195 in (err.diag.message_detail or ""),
                "%s: want 42622 naming database and collection, got %s" % (sql, describe(err)))
    err = run(conn, ["INSERT INTO ns_ok VALUES ('1', 1)",
                     "SELECT idxtable.create_index('ns_ok', '{k}', name => '%s')" % ("i" * 35)])
    r.check(err is not None and err.pgcode == "42622" and longdb in err.diag.message_primary
            and "too long" in err.diag.message_primary,
            "index collection namespace: want 42622, got %s" % describe(err))
    err = run(conn, ["SELECT idxtable.create_index('ns_ok', '{k}', name => '%s')" % ("i" * 20)])
    r.check(err is None, "a namespace of 244 bytes is fine: %s" % describe(err))


def test_large_in_lists(r, conn, db):  # db: on the server "plain"
    """_ids of 20 KB with fetch_batch_size and batch_size at 100,000: every $in and bulk stays under 16 MB."""
    rows = 1100
    big_id = "repeat('x', 20000) || lpad(g::text, 5, '0')"
    table(conn, "wide", "ordered", [("fetch_batch_size", "100000"), ("batch_size", "100000")], server="plain")
    err = run(conn, ["SELECT idxtable.create_index('wide', '{n}', name => 'wide_n')",
                     "INSERT INTO wide SELECT %s, 'v', g %% 10 FROM generate_series(1, %d) g" % (big_id, rows)])
    r.check(err is None, "loading 22 MB of _ids: %s" % describe(err))
    err = run(conn, ["INSERT INTO wide SELECT %s, 'v', 0 FROM generate_series(%d, %d) g"
                     % (big_id, rows - 2, rows + 1100)])
    r.check(err is not None and err.pgcode == "23505", "a duplicate in a 22 MB batch: %s" % describe(err))
    r.check(db.wide.count_documents({}) == rows, "the failed batch was removed again: %d"
            % db.wide.count_documents({}))
    with conn.cursor() as cur:
        cur.execute("SET idxtable.enable_plain_scan = off")
        try:
            cur.execute("SELECT count(*), min(length(_id)) FROM wide WHERE n >= 0")
            got = cur.fetchone()
            r.check(got == (rows, 20005), "index scan fetching 22 MB of _ids: %s" % (got,))
        except psycopg2.Error as exc:
            r.check(False, "index scan fetching 22 MB of _ids: %s" % describe(exc))
            cur.execute("ROLLBACK")
        cur.execute("RESET idxtable.enable_plain_scan")
    err = run(conn, ["SELECT * FROM idxtable.verify_index('wide_n')"])
    r.check(err is None, "verify_index over 20 KB keys: %s" % describe(err))
    with conn.cursor() as cur:
        cur.execute("ALTER FOREIGN TABLE wide OPTIONS (SET consistency 'transaction')")
    err = run(conn, ["UPDATE wide SET n = n + 100"])
    r.check(err is None and db.wide.count_documents({"n": {"$gte": 100}}) == rows,
            "UPDATE in batches of 22 MB of _ids: %s" % describe(err))
    err = run(conn, ["DELETE FROM wide WHERE v = 'v'"])
    r.check(err is None and db.wide.count_documents({}) == 0, "DELETE in batches: %s" % describe(err))


def main():
    r = Results()
    tmpdir = tempfile.mkdtemp(prefix="idxtable_limits.")
    proc, port = start_server(tmpdir, "lim", ["--txn-lifetime", str(LIFETIME), "--txn-size-limit", str(SIZE_LIMIT)])
    plain_proc, plain_port = start_server(tmpdir, "plain", [])
    uri = "mongodb://127.0.0.1:%d/?replicaSet=rs0" % port
    plain_uri = "mongodb://127.0.0.1:%d/?replicaSet=rs0" % plain_port
    global URI
    URI = uri
    client = pymongo.MongoClient(uri, serverSelectionTimeoutMS=10000)
    db = client[DATABASE]
    plain_db = pymongo.MongoClient(plain_uri, serverSelectionTimeoutMS=10000)[DATABASE]
    try:
        conn = setup_database(uri, plain_uri)
        selected = sys.argv[1:]
        for fn, args in [(test_lifetime, (r, conn, db)), (test_size, (r, conn, db)),
                         (test_write_concern_writes, (r, conn, db, client)),
                         (test_write_concern_commit, (r, conn, db, client)),
                         (test_namespace, (r, conn, db)), (test_large_in_lists, (r, conn, plain_db)),
                         (test_document_grows_too_large, (r, conn, plain_db))]:
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
        for p in (proc, plain_proc):
            p.terminate()
            p.wait(10)
        shutil.rmtree(tmpdir, ignore_errors=True)
    print(r.summary("limits"))
    return 1 if r.failed else 0


if __name__ == "__main__":
    sys.exit(main())
