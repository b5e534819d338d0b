#!/usr/bin/python3
"""The applier follows changes of its connection's catalog entries.

A foreign table "ac" with an index table on k, followed by the applier.

1. ALTER SERVER ... OPTIONS (SET uri ...) to a second test server holding
   a copy of the database (its facts, index collections and the applier's
   stored position, copied as a dump would: a position stored through
   another server's options is not resumed from, the index table is
   rebuilt as after a lost history): outside inserts on the new
   server are then found by routed reads with index_consistency = current,
   and no read returns anything else meanwhile (before: the applier went
   on following the old server, whose heartbeats made the waits end, and
   routed reads missed the rows); verify_index is clean.
2. ALTER USER MAPPING to a wrong password: the applier stops following
   the index table (sync_status: not streaming, last_error says why)
   instead of applying on with the connection it had; the right password
   again: it follows the index table again, and an outside insert made
   meanwhile is found by a routed read.
3. DROP USER MAPPING of the table's owner: the same, the error naming the
   missing user mapping; CREATE USER MAPPING again: it follows again.

Environment as for test/differential.py.  The last line is
"applier_catalog: N passed, M failed".
"""
import os
import subprocess
import sys
import tempfile
import time


sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures"))
from results import Results  # noqa: E402  (test/fixtures)
import mongo_client  # noqa: E402
import pg_fixture  # noqa: E402  (test/fixtures)
from routed_reads import q, read, read_until_found, streaming, verify_clean, wait_for  # noqa: E402

DATABASE = "idxtable_applier_catalog"
SERVER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "server", "mongo_test_server.py")




def start_server(tmpdir):
    """A second test server with the same user as the first; returns (process, port)."""
    port_file = os.path.join(tmpdir, "second.port")
    args = ["/usr/bin/python3", SERVER, "--host", "127.0.0.1", "--port", "0", "--port-file", port_file]
    if os.environ.get("MONGO_USER"):
        args += ["--user", os.environ["MONGO_USER"], "--password", os.environ.get("MONGO_PASSWORD", "")]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 15
    while not os.path.exists(port_file) or not open(port_file).read().strip():
        if proc.poll() is not None or time.time() > deadline:
            raise RuntimeError("the second test server did not start")
        time.sleep(0.05)
    with open(port_file) as f:
        return proc, int(f.read())


def client_for(port):
    import pymongo
    kwargs = {"serverSelectionTimeoutMS": 10000}
    if os.environ.get("MONGO_USER"):
        kwargs.update(username=os.environ["MONGO_USER"], password=os.environ.get("MONGO_PASSWORD", ""),
                      authSource="admin")
    return pymongo.MongoClient("mongodb://127.0.0.1:%d/?replicaSet=rs0" % port, **kwargs)


def copy_database(src, dst):
    """Every collection of src into dst (as mongodump/mongorestore would)."""
    for name in src.list_collection_names():
        if name.startswith("system."):
            continue
        docs = list(src[name].find())
        if docs:
            dst[name].insert_many(docs)


def status(conn):
    row = q(conn, "SELECT coalesce(applied_through IS NOT NULL AND last_error IS NULL, false), last_error "
                  "FROM idxtable.sync_status WHERE name = 'ac_k'")
    return row[0] if row else (False, None)




def server_change(res, conn, tmpdir):
    """1. the server's uri changes to a copy of the database on another server."""
    proc, port = start_server(tmpdir)
    try:
        second = client_for(port)
        first = mongo_client.connect()[DATABASE]
        res.check(wait_for(lambda: first["idxtable.positions"].count_documents({}) > 0, 20),
                  "the applier stored no position to copy")
        copy_database(first, second[DATABASE])
        q(conn, "ALTER SERVER mongo OPTIONS (SET uri %s)", ("mongodb://127.0.0.1:%d/?replicaSet=rs0" % port,))
        second[DATABASE]["ac"].insert_many([{"_id": 6, "k": "new"}, {"_id": 7, "k": "new"}])
        read_until_found(res, conn, "ac", "new", [6, 7], "after the uri changed to another server")
        second[DATABASE]["ac"].insert_one({"_id": 8, "k": "newer"})
        got = read(conn, "ac", "newer")
        res.check(got == (True, [8]), "an outside insert on the new server, read at once: %r" % (got,))
        verify_clean(res, conn, "ac_k", "after the uri changed")
        q(conn, "ALTER SERVER mongo OPTIONS (SET uri %s)", (os.environ["MONGO_URI"],))
        read_until_found(res, conn, "ac", "k3", [3], "back on the first server")
    finally:
        proc.terminate()
        proc.wait()


def credentials_change(res, conn, coll):
    """2. and 3. the owner's user mapping changes or goes."""
    if not os.environ.get("MONGO_USER"):
        print("skip credentials: the MongoDB under test has no user")
        return
    password = os.environ.get("MONGO_PASSWORD", "")
    q(conn, "ALTER USER MAPPING FOR CURRENT_USER SERVER mongo OPTIONS (SET password 'wrong')")
    stopped = wait_for(lambda: not streaming(conn, "ac_k"), 15)
    res.check(stopped, "the applier went on with the old password: %r" % (status(conn),))
    coll.insert_one({"_id": 9, "k": "meanwhile"})
    wait_for(lambda: status(conn)[1], 15)
    err = status(conn)[1] or ""
    res.check("could not connect" in err, "last_error after a wrong password: %r" % err)
    q(conn, "ALTER USER MAPPING FOR CURRENT_USER SERVER mongo OPTIONS (SET password %s)", (password,))
    read_until_found(res, conn, "ac", "meanwhile", [9], "the right password again")

    q(conn, "DROP USER MAPPING FOR CURRENT_USER SERVER mongo")
    stopped = wait_for(lambda: not streaming(conn, "ac_k"), 15)
    res.check(stopped, "the applier went on after DROP USER MAPPING: %r" % (status(conn),))
    wait_for(lambda: status(conn)[1], 15)
    err = status(conn)[1] or ""
    res.check("user mapping" in err.lower(), "last_error after DROP USER MAPPING: %r" % err)
    coll.insert_one({"_id": 10, "k": "unmapped"})
    pg_fixture.create_user_mapping(conn, "mongo")
    read_until_found(res, conn, "ac", "unmapped", [10], "a user mapping again")
    verify_clean(res, conn, "ac_k", "after the user mapping changes")


def main():
    res = Results()
    start = time.time()
    mongo_client.connect().drop_database(DATABASE)
    conn = pg_fixture.setup_database(DATABASE)
    pg_fixture.create_foreign_table(conn, "ac", "_id int, k text")
    q(conn, "INSERT INTO ac SELECT i, 'k' || i FROM generate_series(1, 5) i")
    q(conn, "SELECT idxtable.create_index('ac', '{k}', name => 'ac_k')")
    q(conn, "ANALYZE ac")
    q(conn, "SET idxtable.index_consistency = 'current'")
    q(conn, "SET idxtable.enable_plain_scan = off")
    coll = mongo_client.connect()[DATABASE]["ac"]
    if res.check(wait_for(lambda: streaming(conn, "ac_k"), 60), "the applier does not follow ac_k"):
        with tempfile.TemporaryDirectory() as tmpdir:
            server_change(res, conn, tmpdir)
        credentials_change(res, conn, coll)
    conn.close()
    print("elapsed %.1fs" % (time.time() - start))
    print(res.summary("applier_catalog"))
    sys.exit(1 if res.failed else 0)


if __name__ == "__main__":
    main()
