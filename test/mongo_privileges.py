#!/usr/bin/python3
"""The privileges the MongoDB user of a user mapping needs for index tables, tried as a user would.

Against the running test/env (PostgreSQL with idxtable_fdw preloaded; MongoDB with authentication, as
the test server with --user, which checks privileges as mongod does):

1. As the admin user, a role with only collection-scoped find, insert, update and remove on the fact
   collection (and on the collections idxtable_fdw keeps in the database) and a user with it; a user
   mapping of the current role with that user. The foreign table reads and writes; create_index is
   refused with 42501, and the message names the collection, the database, the missing actions
   (changeStream and find on the whole database) and, in the HINT, the role to grant.  Planning
   the never-analyzed table takes its size from the count, $collStats being refused.
2. With find, changeStream and the other actions on the whole database granted (a role of its own),
   create_index of a unique index table and of another works; routed reads with "current" run.
3. changeStream revoked from that role: within seconds idxtable.sync_status shows last_error saying
   so for both index tables; a query is no longer routed through them; a unique-key INSERT fails
   with IX001 at once (not after idxtable.sync_wait_timeout, 5 s), its DETAIL giving the reason; an
   outside write made meanwhile is not lost; the server log has the refusal once over 8 s of retries
   (the applier does not restart in a loop: its pid stays).
4. changeStream granted back: within 15 s both index tables are current again (routed, no
   last_error), the routed read finds the outside write made while they were not current, and
   verify_index is clean.

Skipped (passing) when the MongoDB under test does not authenticate.  Bounded: about half a
minute.  The last line is "mongo_privileges: N passed, M failed".
"""
import os
import sys
import time

import psycopg2

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures"))
from results import Results  # noqa: E402  (test/fixtures)
import mongo_client  # noqa: E402  (test/fixtures)
import pg_fixture  # noqa: E402  (test/fixtures)

DATABASE = "idxtable_privs"
COLLECTION = "pv"
USER, PASSWORD = "idxtable_pv_user", "pv-secret-1"
INDEXES = ["pv_email", "pv_town"]
REFUSAL = 'may not follow the change stream of database "%s"' % DATABASE
RES = Results()
check = RES.check


def q(conn, sql, args=None):
    """Rows of one statement."""
    return pg_fixture.execute(conn, sql, args)


def server_log():
    """The PostgreSQL server log of test/env, or None."""
    path = os.path.join(os.environ.get("IDXTABLE_ENV_DIR", ""), "pg", "server.log")
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return None


def routed(conn, sql):
    """Is the query planned through an index table (plain scans a last resort)?"""
    q(conn, "SET idxtable.enable_plain_scan = off")
    try:
        plan = "\n".join(r[0] for r in q(conn, "EXPLAIN (COSTS OFF) " + sql))
    finally:
        q(conn, "RESET idxtable.enable_plain_scan")
    return "Index Table" in plan


def status(conn):
    """{name: (lag is not null, last_error)} of our index tables."""
    return {r[0]: (r[1], r[2]) for r in
            q(conn, "SELECT name, lag IS NOT NULL, last_error FROM idxtable.sync_status WHERE name = ANY (%s)",
              (INDEXES,))}


def wait_for(predicate, timeout):
    """Poll predicate() every 0.2 s until it is true or timeout s pass; its last value."""
    deadline = time.time() + timeout
    value = predicate()
    while not value and time.time() < deadline:
        time.sleep(0.2)
        value = predicate()
    return value


def applier_pid(conn):
    """The pid of our applier (idxtable.appliers), or None."""
    rows = q(conn, "SELECT pid FROM idxtable.appliers WHERE server = 'mongo'")
    return rows[0][0] if rows else None


def setup(admin):
    """The MongoDB role and user with collection-scoped rights only, and the PostgreSQL side."""
    db = admin[DATABASE]
    admin.drop_database(DATABASE)
    for name in (USER,):
        if db.command("usersInfo", name)["users"]:
            db.command("dropUser", name)
    for role in ("pv_collections", "pv_database"):
        if db.command("rolesInfo", role)["roles"]:
            db.command("dropRole", role)
    scoped = ["find", "insert", "update", "remove", "createCollection", "createIndex", "dropCollection"]
    colls = [COLLECTION, "idxtable.owners", "idxtable.sync", "idxtable.positions"] + \
        ["idxtable.%s.%s" % (COLLECTION, i) for i in INDEXES]
    db.command("createRole", "pv_collections", roles=[], privileges=[
        {"resource": {"db": DATABASE, "collection": c}, "actions": scoped} for c in colls])
    db.command("createUser", USER, pwd=PASSWORD, roles=["pv_collections"])
    db[COLLECTION].insert_many([{"_id": i, "email": "u%d@example.com" % i, "town": "T%d" % (i % 5)}
                                for i in range(1, 51)])
    conn = pg_fixture.setup_database(DATABASE, credentials=False,
                                     mapping_options=[("username", USER), ("password", PASSWORD),
                                                      ("auth_source", DATABASE)])
    pg_fixture.create_foreign_table(conn, COLLECTION, "_id int, email text, town text")
    return conn


def test_refused(conn):
    """1: the table works, create_index is refused with a clear 42501."""
    check(q(conn, "SELECT count(*) FROM pv")[0][0] == 50, "the collection-scoped user reads the table")
    q(conn, "INSERT INTO pv VALUES (51, 'u51@example.com', 'T1')")
    try:
        q(conn, "SELECT idxtable.create_index('pv', '{email}', is_unique => true, name => 'pv_email')")
        check(False, "create_index refused without changeStream on the database")
        return
    except psycopg2.Error as exc:
        diag = exc.diag
        check(exc.pgcode == "42501", "create_index refused with 42501 (got %s: %s)" % (exc.pgcode, exc))
        msg = diag.message_primary or ""
        check('collection "pv"' in msg and 'database "%s"' % DATABASE in msg and 'server "mongo"' in msg,
              "the message names server, collection and database: %s" % msg)
        detail = diag.message_detail or ""
        check("changeStream" in detail and "find" in detail and "whole database" in detail,
              "the DETAIL names the missing actions on the database: %s" % detail)
        hint = diag.message_hint or ""
        check("readWrite" in hint and "changeStream" in hint, "the HINT says what to grant: %s" % hint)
    check(q(conn, "SELECT count(*) FROM idxtable.index_defs")[0][0] == 0, "no definition is left")
    # planning a never-analyzed table in a new session asks $collStats, which needs the collStats
    # action this user lacks: the count gives the size instead, and planning does not fail
    other = pg_fixture.connect(DATABASE)
    try:
        plan = q(other, "EXPLAIN SELECT * FROM pv")[0][0]
    finally:
        other.close()
    check("rows=51 " in plan, "planned from the count without collStats: %s" % plan)


def test_allowed(admin, conn):
    """2: with the database's actions granted, create_index works and reads route."""
    admin[DATABASE].command("createRole", "pv_database", roles=[], privileges=[
        {"resource": {"db": DATABASE, "collection": ""}, "actions": ["find", "changeStream"]}])
    admin[DATABASE].command("grantRolesToUser", USER, roles=["pv_database"])
    q(conn, "SELECT idxtable.create_index('pv', '{email}', is_unique => true, name => 'pv_email')")
    q(conn, "SELECT idxtable.create_index('pv', '{town}', name => 'pv_town')")
    current = wait_for(lambda: all(s[0] and s[1] is None for s in status(conn).values())
                       and len(status(conn)) == 2, 15)
    check(current, "both index tables are followed: %s" % status(conn))
    check(routed(conn, "SELECT _id FROM pv WHERE town = 'T2'"), "a read routes through pv_town")
    check(len(q(conn, "SELECT _id FROM pv WHERE town = 'T2'")) == 10, "the routed read finds the rows")


def test_revoked(admin, conn):
    """3: changeStream revoked: not current, said once, waits end at once."""
    log_before = server_log()
    pid = applier_pid(conn)
    admin[DATABASE].command("revokePrivilegesFromRole", "pv_database", privileges=[
        {"resource": {"db": DATABASE, "collection": ""}, "actions": ["changeStream"]}])
    admin[DATABASE][COLLECTION].insert_one({"_id": 900, "email": "outside@example.com", "town": "Outer"})
    shown = wait_for(lambda: all(s[1] and REFUSAL in s[1] for s in status(conn).values()), 15)
    check(shown, "sync_status shows the refusal for both index tables: %s" % status(conn))
    check(not routed(conn, "SELECT _id FROM pv WHERE town = 'Outer'"),
          "a query is not routed through an index table that is not current")
    check(q(conn, "SELECT _id FROM pv WHERE town = 'Outer'") == [(900,)], "the plain scan finds the row")
    started = time.time()
    try:
        q(conn, "INSERT INTO pv VALUES (901, 'new@example.com', 'T1')")
        check(False, "a unique-key INSERT fails while its index table is not current")
    except psycopg2.Error as exc:
        took = time.time() - started
        check(exc.pgcode == "IX001", "the INSERT fails with IX001 (got %s: %s)" % (exc.pgcode, exc))
        check(took < 2.0, "the INSERT fails at once, not after the 5 s wait (%.1f s)" % took)
        check(REFUSAL in (exc.diag.message_detail or ""), "its DETAIL gives the reason: %s"
              % exc.diag.message_detail)
    time.sleep(8)  # retries at 1, 2, 4, 8 s
    check(applier_pid(conn) == pid and pid is not None, "the applier did not restart (%s, %s)"
          % (pid, applier_pid(conn)))
    log = server_log()
    if log is None or log_before is None:
        print("(server log not readable: log lines not counted)")
        return
    lines = [line for line in log[len(log_before):].splitlines()
             if REFUSAL in line and "idxtable_fdw applier" in line]
    check(len(lines) == 1, "the refusal is logged once in 8 s (%d lines)" % len(lines))
    # this test's server only ("mongo"): appliers of other tests' servers may restart meanwhile
    restarts = [line for line in log[len(log_before):].splitlines()
                if "applier" in line and "restart" in line and 'server "mongo"' in line]
    check(not restarts, "no applier restart logged: %s" % restarts[:3])


def test_granted_back(admin, conn):
    """4: changeStream granted back: current again, nothing lost, verify_index clean."""
    admin[DATABASE].command("grantPrivilegesToRole", "pv_database", privileges=[
        {"resource": {"db": DATABASE, "collection": ""}, "actions": ["changeStream"]}])
    current = wait_for(lambda: all(s[0] and s[1] is None for s in status(conn).values()), 15)
    check(current, "both index tables are current again: %s" % status(conn))
    check(routed(conn, "SELECT _id FROM pv WHERE town = 'Outer'"), "reads route again")
    check(q(conn, "SELECT _id FROM pv WHERE town = 'Outer'") == [(900,)],
          "the routed read finds the outside write made while the index was not current")
    q(conn, "INSERT INTO pv VALUES (901, 'new@example.com', 'T1')")
    for name in INDEXES:
        bad = q(conn, "SELECT missing, orphan, stale FROM idxtable.verify_index(%s)", (name,))[0]
        check(bad == (0, 0, 0), "verify_index(%s) clean: %s" % (name, bad))
    log = server_log()
    if log is not None:
        check('follows database "%s" again' % DATABASE in log, "the recovery is logged")


def main():
    admin = mongo_client.connect()
    if not admin.admin.command("connectionStatus")["authInfo"]["authenticatedUsers"]:
        print("(the MongoDB under test does not authenticate: nothing to test)")
        print(RES.summary("mongo_privileges"))
        return 0
    conn = setup(admin)
    try:
        test_refused(conn)
        test_allowed(admin, conn)
        test_revoked(admin, conn)
        test_granted_back(admin, conn)
    finally:
        conn.close()
        pg_fixture.recreate_database(DATABASE, create=False)
        admin.drop_database(DATABASE)
        admin[DATABASE].command("dropUser", USER)
    print(RES.summary("mongo_privileges"))
    return 1 if RES.failed else 0


if __name__ == "__main__":
    sys.exit(main())
