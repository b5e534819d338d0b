#!/usr/bin/python3
"""The change-stream applier's processes: launcher, database workers, appliers.

Against the running test/env (PostgreSQL started with
shared_preload_libraries=idxtable_fdw):

- the launcher, a database worker for a database with index tables and an
  applier there show in pg_stat_activity, each with a backend_type and an
  application_name naming idxtable_fdw, and say so in the server log;
- idxtable.launcher_naptime is a SIGHUP setting (ALTER SYSTEM + reload);
- pg_terminate_backend(applier): a new applier process within a few
  seconds, counted in idxtable.appliers.restarts and logged;
- pg_terminate_backend(database worker): its applier leaves with it, and
  both are started again;
- drop_index of the last index table: the applier goes away;
- DROP EXTENSION: the database worker and the applier go away;
- a database without the extension gets no applier and keeps no worker;
- ALTER DATABASE RENAME and a plain DROP DATABASE of a database with
  workers succeed (the workers leave at once; these commands wait only 5 s
  for other sessions).

Then a second PostgreSQL (its own IDXTABLE_ENV_DIR, the same MongoDB) is
started with IDXTABLE_NO_PRELOAD=1: no idxtable_fdw process, create_index
warns with a HINT, idxtable.sync_status shows the index unmaintained and
idxtable.appliers is empty.

Environment as exported by eval "$(test/env start)" (PGHOST, PGPORT,
MONGO_URI, MONGO_USER, MONGO_PASSWORD, IDXTABLE_ENV_DIR).  Bounded: about
half a minute.  The last line is "sync_workers: N passed, M failed".
"""
import os
import re
import subprocess
import sys
import tempfile
import time

import psycopg2

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures"))
from results import Results  # noqa: E402  (test/fixtures)
import mongo_client  # noqa: E402  (test/fixtures)
import pg_fixture  # noqa: E402  (test/fixtures)

HERE = os.path.dirname(os.path.abspath(__file__))
DATABASE = "idxtable_syncw"
PLAIN = "idxtable_syncw_plain"
COLLECTION = "syncw_facts"
LAUNCHER = "idxtable_fdw launcher"
DBWORKER = "idxtable_fdw database worker"
APPLIER = "idxtable_fdw applier"
RES = Results()


connect = pg_fixture.connect


def query(sql, args=None, dbname=None, **kw):
    conn = connect(dbname, **kw)
    try:
        with conn.cursor() as cur:
            cur.execute(sql, args)
            return cur.fetchall() if cur.description else None
    finally:
        conn.close()


def workers(backend_type, datname=None, **kw):
    """[(pid, application_name, datname)] of our processes of that type."""
    sql = ("SELECT pid, application_name, datname FROM pg_stat_activity"
           " WHERE backend_type = %s")
    args = [backend_type]
    if datname is not None:
        sql += " AND datname = %s"
        args.append(datname)
    return query(sql, args, **kw)


def wait_for(predicate, timeout):
    """Poll predicate() every 0.1 s until it is true or timeout s pass."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() >= deadline:
            return value
        time.sleep(0.1)


def drop_mongo_database():
    """The MongoDB database of the tests, with index collections left by a
    dropped PostgreSQL database (their ownership markers name it)."""
    client = mongo_client.connect()
    client.drop_database(DATABASE)
    client.close()


def setup_database(dbname, **kw):
    """A database with the extension, a server, a mapping and a table."""
    drop_mongo_database()
    conn = pg_fixture.setup_database(dbname, DATABASE, connect_kwargs=kw)
    pg_fixture.create_foreign_table(conn, "facts", "_id int, k text", collection=COLLECTION)
    with conn.cursor() as cur:
        cur.execute("DELETE FROM facts")
        cur.execute("INSERT INTO facts SELECT g, 'k' || g FROM generate_series(1, 20) g")
    conn.close()


def server_log():
    path = os.path.join(os.environ.get("IDXTABLE_ENV_DIR", ""), "pg", "server.log")
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return None


def check_names(rows, backend_type, what):
    RES.check(bool(rows) and all(r[1] == backend_type for r in rows),
              "%s: application_name is %r: %r" % (what, backend_type, rows))


def test_processes():
    """Launcher, database worker and applier appear, named after idxtable_fdw."""
    launcher = wait_for(lambda: workers(LAUNCHER), 15)
    RES.check(len(launcher) == 1, "one launcher runs: %r" % launcher)
    check_names(launcher, LAUNCHER, "launcher")
    RES.check(launcher and launcher[0][2] is None, "the launcher is connected to no database")

    setup_database(DATABASE)
    query("SELECT idxtable.create_index('facts', '{k}', name => 'facts_k')", dbname=DATABASE)
    rows = query("SELECT state FROM idxtable.appliers", dbname=DATABASE)
    RES.check(rows and rows[0][0] in ("starting", "running"),
              "right after create_index's commit an applier is expected: %r" % rows)
    dbw = wait_for(lambda: workers(DBWORKER, DATABASE), 10)
    RES.check(len(dbw) == 1, "a database worker for the database within 10 s: %r" % dbw)
    check_names(dbw, DBWORKER, "database worker")
    app = wait_for(lambda: workers(APPLIER, DATABASE), 10)
    RES.check(len(app) == 1, "an applier in the database within 10 s: %r" % app)
    check_names(app, APPLIER, "applier")
    return app[0][0] if app else None


def test_restart(pid):
    """pg_terminate_backend(applier): a new applier within 5 s."""
    if pid is None:
        RES.check(False, "no applier to terminate")
        return
    query("SELECT pg_terminate_backend(%s)", [pid])
    new = wait_for(lambda: [r for r in workers(APPLIER, DATABASE) if r[0] != pid], 5)
    RES.check(len(new) == 1, "a new applier within 5 s of pg_terminate_backend: %r" % new)
    rows = query("SELECT restarts, pid FROM idxtable.appliers", dbname=DATABASE)
    RES.check(rows and rows[0][0] >= 1 and (not new or rows[0][1] in (new[0][0], None)),
              "idxtable.appliers counts the restart and shows the new pid: %r" % rows)


def test_log():
    log = server_log()
    if log is None:
        print("(server log not readable: log lines not checked)")
        return
    for pattern in [r"LOG:  idxtable_fdw launcher started",
                    r'LOG:  idxtable_fdw database worker started for database "%s"' % DATABASE,
                    r'LOG:  idxtable_fdw applier for foreign server "mongo" started',
                    r'LOG:  idxtable_fdw applier for foreign server "mongo" restarted after a failure \(attempt 1\)']:
        RES.check(re.search(pattern, log), "server log has %r" % pattern)


def test_naptime():
    """A SIGHUP setting: ALTER SYSTEM and a reload change it."""
    query("ALTER SYSTEM SET idxtable.launcher_naptime = 1")
    query("SELECT pg_reload_conf()")
    value = wait_for(lambda: query("SHOW idxtable.launcher_naptime")[0][0] == "1s", 5)
    RES.check(value, "idxtable.launcher_naptime reloads to 1s")


def test_dbworker_restart():
    """pg_terminate_backend(database worker): its applier goes with it, and
    the launcher starts both again (naptime 1 s)."""
    old_dbw = [r[0] for r in workers(DBWORKER, DATABASE)]
    old_app = [r[0] for r in workers(APPLIER, DATABASE)]
    if not old_dbw or not old_app:
        RES.check(False, "a database worker and an applier run: %r %r" % (old_dbw, old_app))
        return
    query("SELECT pg_terminate_backend(%s)", [old_dbw[0]])
    RES.check(wait_for(lambda: old_app[0] not in [r[0] for r in workers(APPLIER, DATABASE)], 5),
              "the applier leaves with its database worker")
    new_dbw = wait_for(lambda: [r for r in workers(DBWORKER, DATABASE) if r[0] != old_dbw[0]], 5)
    RES.check(len(new_dbw) == 1, "a new database worker within 5 s: %r" % new_dbw)
    new_app = wait_for(lambda: [r for r in workers(APPLIER, DATABASE) if r[0] != old_app[0]], 5)
    RES.check(len(new_app) == 1, "and a new applier: %r" % new_app)


def test_drop_index():
    """Without index tables left the applier goes away; the worker stays."""
    query("SELECT idxtable.drop_index('facts_k')", dbname=DATABASE)
    gone = wait_for(lambda: not workers(APPLIER, DATABASE), 5)
    RES.check(gone, "the applier exits within 5 s of drop_index of the last index")
    RES.check(wait_for(lambda: not query("SELECT 1 FROM idxtable.appliers", dbname=DATABASE), 5),
              "idxtable.appliers is empty after drop_index")
    RES.check(len(workers(DBWORKER, DATABASE)) == 1, "the database worker stays")
    log = server_log()
    if log is not None:
        RES.check('applier for foreign server "mongo" stops: no index table is left' in log,
                  "the stop is logged")


def test_drop_extension():
    """DROP EXTENSION: the database's worker and applier go away."""
    query("SELECT idxtable.create_index('facts', '{k}', name => 'facts_k')", dbname=DATABASE)
    RES.check(wait_for(lambda: workers(APPLIER, DATABASE), 10), "the applier is back")
    query("DROP EXTENSION idxtable_fdw CASCADE", dbname=DATABASE)
    gone = wait_for(lambda: not workers(APPLIER, DATABASE) and not workers(DBWORKER, DATABASE), 5)
    RES.check(gone, "no idxtable_fdw process in the database within 5 s of DROP EXTENSION: %r"
              % (workers(APPLIER, DATABASE) + workers(DBWORKER, DATABASE)))


def test_plain_database():
    """A database without the extension: no applier, no worker kept (naptime 1 s)."""
    query("DROP DATABASE IF EXISTS %s" % PLAIN)
    query("CREATE DATABASE %s" % PLAIN)
    seen = 0
    deadline = time.monotonic() + 3.5
    appliers = []
    while time.monotonic() < deadline:
        seen += 1 if workers(DBWORKER, PLAIN) else 0
        appliers += workers(APPLIER, PLAIN)
        time.sleep(0.05)
    RES.check(not appliers, "no applier in a database without the extension")
    RES.check(seen <= 3, "no lasting database worker there (seen in %d samples)" % seen)
    query("DROP DATABASE %s" % PLAIN)


def test_drop_database():
    """A plain DROP DATABASE of a database with workers succeeds at once."""
    setup_database(DATABASE)
    query("SELECT idxtable.create_index('facts', '{k}', name => 'facts_k')", dbname=DATABASE)
    RES.check(wait_for(lambda: workers(APPLIER, DATABASE), 10), "the applier runs again")
    # ALTER DATABASE RENAME needs the database to itself too
    start = time.monotonic()
    try:
        query("ALTER DATABASE %s RENAME TO %s_r" % (DATABASE, DATABASE))
        query("ALTER DATABASE %s_r RENAME TO %s" % (DATABASE, DATABASE))
        ok = True
    except psycopg2.Error as e:
        ok = False
        print("ALTER DATABASE RENAME: %s" % e)
    RES.check(ok and time.monotonic() - start < 4.5,
              "ALTER DATABASE RENAME succeeds (%.1f s)" % (time.monotonic() - start))
    start = time.monotonic()
    try:
        query("DROP DATABASE %s" % DATABASE)
        ok = True
    except psycopg2.Error as e:
        ok = False
        print("DROP DATABASE: %s" % e)
    RES.check(ok and time.monotonic() - start < 4.5,
              "DROP DATABASE without FORCE succeeds (%.1f s)" % (time.monotonic() - start))
    RES.check(wait_for(lambda: not query(
        "SELECT 1 FROM pg_stat_activity WHERE backend_type IN (%s, %s) AND datname = %s",
        [DBWORKER, APPLIER, DATABASE]), 5), "no worker is left for the dropped database")
    RES.check(len(workers(LAUNCHER)) == 1, "the launcher still runs")


def test_no_preload():
    """A second cluster without shared_preload_libraries."""
    envdir = tempfile.mkdtemp(prefix="idxtable_syncw_")
    os.rmdir(envdir)
    env = dict(os.environ, IDXTABLE_ENV_DIR=envdir, IDXTABLE_NO_PRELOAD="1")
    out = subprocess.run([os.path.join(HERE, "env"), "start"], env=env,
                         capture_output=True, text=True, timeout=120)
    if out.returncode != 0:
        RES.check(False, "second cluster starts: %s" % out.stderr)
        return
    try:
        kw = {"host": os.path.join(envdir, "socket"),
              "port": int(open(os.path.join(envdir, "pg.port")).read())}
        RES.check(query("SHOW shared_preload_libraries", **kw)[0][0] == "",
                  "the second cluster runs without shared_preload_libraries")
        RES.check(not query("SELECT 1 FROM pg_stat_activity WHERE backend_type LIKE 'idxtable_fdw%%'", **kw),
                  "no idxtable_fdw process without preloading")
        setup_database(DATABASE, **kw)
        conn = connect(DATABASE, **kw)
        with conn.cursor() as cur:
            cur.execute("SELECT idxtable.create_index('facts', '{k}', name => 'facts_k')")
            notices = [n for n in conn.notices if "WARNING" in n]
            RES.check(any('index table "facts_k" is not maintained against writes made outside '
                          "this PostgreSQL" in n for n in notices),
                      "create_index warns: %r" % notices)
            RES.check(any("HINT:  Add idxtable_fdw to shared_preload_libraries" in n for n in notices),
                      "with the HINT: %r" % notices)
            cur.execute("SELECT name, state, applied_through, lag, last_error FROM idxtable.sync_status")
            rows = cur.fetchall()
            RES.check(rows == [("facts_k", "valid", None, None, None)],
                      "sync_status shows the index, unmaintained: %r" % rows)
            cur.execute("SELECT count(*) FROM idxtable.appliers")
            RES.check(cur.fetchone()[0] == 0, "idxtable.appliers is empty")
            cur.execute("SELECT idxtable.drop_index('facts_k')")
        conn.close()
        query("DROP DATABASE %s" % DATABASE, **kw)
    finally:
        subprocess.run([os.path.join(HERE, "env"), "stop"], env=env, timeout=60)


def main():
    try:
        pid = test_processes()
        test_restart(pid)
        test_log()
        test_naptime()
        test_dbworker_restart()
        test_drop_index()
        test_drop_extension()
        test_plain_database()
        test_drop_database()
    finally:
        query("ALTER SYSTEM RESET idxtable.launcher_naptime")
        query("SELECT pg_reload_conf()")
        query("DROP DATABASE IF EXISTS %s WITH (FORCE)" % DATABASE)
        query("DROP DATABASE IF EXISTS %s WITH (FORCE)" % PLAIN)
    test_no_preload()
    print(RES.summary("sync_workers"))
    sys.exit(1 if RES.failed else 0)


if __name__ == "__main__":
    main()
