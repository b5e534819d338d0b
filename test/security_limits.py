#!/usr/bin/python3
"""What one role can do to others: limits no role can exhaust for others.

An unprivileged role (regress_seclim_mallory: USAGE on the foreign server,
CREATE on a schema, nothing else) against another role's index tables
(regress_seclim_alice):

1. the per-role limit (idxtable.max_index_tables_per_role, lowered to 5
   here with ALTER SYSTEM and a reload): mallory's sixth index table fails
   at create_index with 53400 naming the setting, on any of her tables;
   a superuser's table is exempt; alice can still create a unique index
   table, write through it and read through it (routed, `current`) with
   no IX001;
2. temporary foreign tables: create_index on one is refused (0A000), so
   no definition outlives mallory's session;
3. drops that concern no applier: 2,000 create/drop cycles of a temporary
   foreign table (without index tables), and mallory's create_index and
   drop_index of her own index tables, make alice's applier neither
   reload nor reopen its stream (its "resumes database" / "starts
   database" lines in the server log are counted); the status entries of
   mallory's 20 index tables created and dropped are freed;
4. the applier's bookkeeping: 40 sessions of alice, each a new connection
   writing one row in transaction mode, leave at most a few transaction
   markers ("fdw:" documents) in <database>.idxtable.sync, not one per
   session;
5. the cluster's total: a superuser (exempt from the per-role limit)
   creates index tables until create_index fails with 53400 at the
   appliers' 1,024 status entries (counting those of other databases);
   then alice's create_index fails the same way, her existing unique index
   table still takes writes, and no applier logs an index table left
   without a status entry.

Needs the library preloaded (test/env does it) and the server log in
$IDXTABLE_ENV_DIR/pg/server.log.  Changes idxtable.max_index_tables_per_role
with ALTER SYSTEM and resets it at the end.  About 30 s.  The last line is
"security_limits: N passed, M failed".
"""
import os
import re
import sys
import time

import psycopg2

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures"))
from results import Results  # noqa: E402  (test/fixtures)
import mongo_client  # noqa: E402  (test/fixtures)
import pg_fixture  # noqa: E402  (test/fixtures)

RES = Results()
DATABASE = "idxtable_seclimits"
MALLORY = "regress_seclim_mallory"
ALICE = "regress_seclim_alice"
LIMIT = 5
TEMP_CYCLES = 2000
SESSIONS = 40
DDL_CYCLES = 20
TOTAL = 1024  # the appliers' status entries (IDX_SYNC_MAX_INDEXES)
REOPEN = re.compile(r"applier for server \"mongo\" (resumes|starts) database")


def connect(role=None, autocommit=True):
    settings = ["SET statement_timeout = '30s'"] + (["SET ROLE %s" % role] if role else [])
    return pg_fixture.connect(DATABASE, settings=settings, autocommit=autocommit)


def run(conn, sql, args=None):
    return pg_fixture.execute(conn, sql, args)


def error_of(conn, sql):
    """(SQLSTATE, message) of the error sql raises, or None."""
    try:
        run(conn, sql)
    except psycopg2.Error as exc:
        return exc.pgcode, str(exc.diag.message_primary or exc)
    return None


def set_limit(value):
    """ALTER SYSTEM idxtable.max_index_tables_per_role (None: RESET) and
    reload; wait until new sessions see it."""
    admin = pg_fixture.connect()
    try:
        if value is None:
            run(admin, "ALTER SYSTEM RESET idxtable.max_index_tables_per_role")
        else:
            run(admin, "ALTER SYSTEM SET idxtable.max_index_tables_per_role = %d" % value)
        run(admin, "SELECT pg_reload_conf()")
    except psycopg2.Error as exc:
        print("(could not set idxtable.max_index_tables_per_role: %s)" % str(exc).strip())
        return False
    finally:
        admin.close()
    want = str(value if value is not None else 100)
    for _ in range(50):
        conn = connect()
        seen = run(conn, "SHOW idxtable.max_index_tables_per_role")[0][0]
        conn.close()
        if seen == want:
            return True
        time.sleep(0.1)
    return False


def server_log_path():
    return os.path.join(os.environ.get("IDXTABLE_ENV_DIR", ""), "pg", "server.log")


def log_size():
    try:
        return os.path.getsize(server_log_path())
    except OSError:
        return None


def log_since(offset):
    with open(server_log_path(), errors="replace") as f:
        f.seek(offset)
        return f.read()


def setup():
    admin = pg_fixture.connect()
    run(admin, "DROP DATABASE IF EXISTS %s WITH (FORCE)" % DATABASE)
    for role in (MALLORY, ALICE):
        run(admin, "DROP ROLE IF EXISTS %s" % role)
        run(admin, "CREATE ROLE %s" % role)
    admin.close()
    conn = pg_fixture.setup_database(DATABASE, roles=("CURRENT_USER", MALLORY, ALICE))
    run(conn, "CREATE SCHEMA m AUTHORIZATION %s" % MALLORY)
    run(conn, "CREATE SCHEMA a AUTHORIZATION %s" % ALICE)
    run(conn, "GRANT USAGE ON FOREIGN SERVER mongo TO %s, %s" % (MALLORY, ALICE))
    conn.close()
    client = mongo_client.connect()
    client.drop_database(DATABASE)
    client.close()


def wait_applier(owner, timeout=20):
    """The pid of owner's running applier, or None."""
    conn = connect()
    try:
        deadline = time.time() + timeout
        while time.time() < deadline:
            rows = run(conn, "SELECT pid FROM idxtable.appliers WHERE owner = %s AND state = 'running'",
                       (owner,))
            if rows and rows[0][0]:
                return rows[0][0]
            time.sleep(0.2)
        return None
    finally:
        conn.close()


def part_limit():
    """1. the per-role limit, and another role's unique index table."""
    RES.check(set_limit(LIMIT), "idxtable.max_index_tables_per_role = %d after a reload" % LIMIT)
    mallory = connect(MALLORY)
    pg_fixture.create_foreign_table(mallory, "m.t1", "_id text, k text, c1 text, c2 text, c3 text, "
                                    "c4 text, c5 text, c6 text", collection="m_t1")
    pg_fixture.create_foreign_table(mallory, "m.t2", "_id text, k text", collection="m_t2")
    run(mallory, "INSERT INTO m.t1 (_id, k) VALUES ('1', 'a')")
    created = 0
    err = None
    for i in range(1, 7):
        err = error_of(mallory, "SELECT idxtable.create_index('m.t1', '{c%d}')" % i)
        if err is not None:
            break
        created += 1
    RES.check(created == LIMIT, "mallory created %d index tables before the limit, not %d" % (created, LIMIT))
    RES.check(err is not None and err[0] == "53400" and "idxtable.max_index_tables_per_role" in err[1],
              "the next create_index fails with 53400 naming the setting: %r" % (err,))
    err = error_of(mallory, "SELECT idxtable.create_index('m.t2', '{k}')")
    RES.check(err is not None and err[0] == "53400",
              "the limit is the role's, not the table's: another table of hers fails too: %r" % (err,))
    err = error_of(mallory, "CALL idxtable.create_index_concurrently('m.t2', '{k}')")
    RES.check(err is not None and err[0] == "53400",
              "create_index_concurrently is limited too: %r" % (err,))
    rows = run(mallory, "SELECT count(*) FROM idxtable.index_defs d JOIN pg_class c ON c.oid = d.tbl "
                        "WHERE c.relowner = %s::regrole", (MALLORY,))
    RES.check(rows[0][0] == LIMIT, "mallory has %d definitions, no half-created one: %r" % (LIMIT, rows))
    mallory.close()

    # a superuser's table is exempt
    admin = connect()
    pg_fixture.create_foreign_table(admin, "public.su", "_id text, " + ", ".join("c%d text" % i for i in range(8)),
                                    collection="su")
    ok = all(error_of(admin, "SELECT idxtable.create_index('public.su', '{c%d}')" % i) is None
             for i in range(LIMIT + 2))
    RES.check(ok, "a superuser's table has more than %d index tables" % LIMIT)
    run(admin, "DROP FOREIGN TABLE public.su")
    admin.close()

    # alice: a unique index table, written and read through at once
    alice = connect(ALICE)
    pg_fixture.create_foreign_table(alice, "a.people", "_id text, email text", collection="a_people")
    run(alice, "INSERT INTO a.people VALUES ('1', 'ann@x.org')")
    err = error_of(alice, "SELECT idxtable.create_index('a.people', '{email}', is_unique => true, "
                          "name => 'people_email')")
    RES.check(err is None, "alice creates her unique index table: %r" % (err,))
    RES.check(wait_applier(ALICE) is not None, "alice's applier runs")
    err = error_of(alice, "INSERT INTO a.people VALUES ('2', 'bob@x.org')")
    RES.check(err is None, "alice's INSERT of a unique key succeeds (no IX001): %r" % (err,))
    err = error_of(alice, "INSERT INTO a.people VALUES ('3', 'bob@x.org')")
    RES.check(err is not None and err[0] == "23505", "her duplicate fails with 23505: %r" % (err,))
    run(alice, "SET idxtable.enable_plain_scan = off")
    try:
        rows = run(alice, "SELECT _id FROM a.people WHERE email = 'bob@x.org'")
        RES.check(rows == [("2",)], "alice's routed read (current) finds the row: %r" % rows)
    except psycopg2.Error as exc:
        RES.check(False, "alice's routed read fails: %s %s" % (exc.pgcode, str(exc).strip()))
    rows = run(alice, "SELECT applied_through IS NOT NULL FROM idxtable.sync_status WHERE name = 'people_email'")
    RES.check(rows == [(True,)], "her index table has a status (it is maintained): %r" % rows)
    alice.close()


def part_temp():
    """2. no index tables on temporary foreign tables."""
    mallory = connect(MALLORY)
    pg_fixture.create_foreign_table(mallory, "pg_temp.tmp", "_id text, k text", collection="m_tmp")
    err = error_of(mallory, "SELECT idxtable.create_index('pg_temp.tmp', '{k}', name => 'm_tmp_k')")
    RES.check(err is not None and err[0] == "0A000", "create_index on a temporary table: 0A000: %r" % (err,))
    mallory.close()
    conn = connect()
    rows = run(conn, "SELECT count(*) FROM idxtable.index_defs WHERE name = 'm_tmp_k'")
    RES.check(rows == [(0,)], "no definition of the temporary table outlives the session: %r" % rows)
    conn.close()


def part_drops():
    """3. others' drops do not reopen alice's stream."""
    pid = wait_applier(ALICE)
    if not RES.check(pid is not None, "alice's applier runs before the drops"):
        return
    time.sleep(1.0)
    start = log_size()
    if not RES.check(start is not None, "the server log is readable at %s" % server_log_path()):
        return
    mallory = connect(MALLORY)
    began = time.time()
    for _ in range(TEMP_CYCLES):
        run(mallory, "CREATE FOREIGN TABLE pg_temp.churn (_id text, k text) SERVER mongo "
                     "OPTIONS (collection 'm_churn')")
        run(mallory, "DROP FOREIGN TABLE pg_temp.churn")
    elapsed = time.time() - began
    # and her own index DDL on the same server (her applier, not alice's):
    # index tables created and dropped, whose status entries must go back
    run(mallory, "SELECT idxtable.drop_index('t1_c1_idx')")
    for i in range(DDL_CYCLES):
        run(mallory, "SELECT idxtable.create_index('m.t1', '{c6}', name => 'm_t1_c6')")
        time.sleep(0.1)
        run(mallory, "SELECT idxtable.drop_index('m_t1_c6')")
    mallory.close()
    time.sleep(2.0)
    conn = connect()
    stale = run(conn, "SELECT count(*) FROM idxtable.sync_status() s WHERE NOT EXISTS "
                      "(SELECT 1 FROM idxtable.index_defs d WHERE d.definition_id = s.definition_id)")[0][0]
    conn.close()
    RES.check(stale == 0, "the status entries of dropped index tables are freed (%d create/drop cycles): "
                          "%d left" % (DDL_CYCLES, stale))
    lines = [l for l in log_since(start).splitlines() if "[%d]" % pid in l and REOPEN.search(l)]
    RES.check(not lines, "alice's applier did not reload or reopen for %d temporary tables' create/drop "
                         "(%.1f s) and mallory's index DDL: %d reopen lines, e.g. %r"
              % (TEMP_CYCLES, elapsed, len(lines), lines[:2]))
    RES.check(wait_applier(ALICE, 1) == pid, "alice's applier is the same process")

    # her own index DDL still reaches her applier
    start = log_size()
    alice = connect(ALICE)
    run(alice, "SELECT idxtable.create_index('a.people', '{email}', name => 'people_email2')")
    alice.close()
    deadline = time.time() + 10
    seen = False
    while time.time() < deadline and not seen:
        seen = any("[%d]" % pid in l and REOPEN.search(l) for l in log_since(start).splitlines())
        time.sleep(0.2)
    RES.check(seen, "alice's own create_index makes her applier reopen its stream")


def part_markers():
    """4. transaction markers are bounded, not one per session."""
    conn = connect(ALICE)
    pg_fixture.create_foreign_table(conn, "a.notes", "_id text, k text", collection="a_notes",
                                    options=[("consistency", "transaction")])
    run(conn, "SELECT idxtable.create_index('a.notes', '{k}')")
    conn.close()
    client = mongo_client.connect()
    sync = mongo_client.database(client, DATABASE)["idxtable.sync"]
    before = sync.count_documents({"_id": {"$regex": "^fdw:"}})
    for i in range(SESSIONS):
        conn = connect(ALICE)
        run(conn, "INSERT INTO a.notes VALUES (%s, %s)", ("n%d" % i, "k%d" % i))
        conn.close()
    after = sync.count_documents({"_id": {"$regex": "^fdw:"}})
    written = sync.count_documents({"_id": {"$regex": "^fdw:"}, "maintained.c": "a_notes"})
    client.close()
    RES.check(written >= 1, "the sessions wrote markers of a_notes (%d markers before, %d after)"
              % (before, after))
    RES.check(after <= 5, "%d sessions, each a new connection, leave %d markers in idxtable.sync (at most 5)"
              % (SESSIONS, after))


def part_total():
    """5. the appliers' status entries of the cluster, checked at create_index."""
    start = log_size()
    admin = connect()
    pg_fixture.create_foreign_table(admin, "public.bulk", "_id text, k text", collection="bulk")
    run(admin, "INSERT INTO public.bulk VALUES ('1', 'a')")
    created = 0
    err = None
    began = time.time()
    for i in range(TOTAL + 100):
        err = error_of(admin, "SELECT idxtable.create_index('public.bulk', '{k}', name => 'bulk_%d')" % i)
        if err is not None:
            break
        created += 1
    elapsed = time.time() - began
    RES.check(err is not None and err[0] == "53400" and "%d index tables" % TOTAL in err[1],
              "a superuser's create_index fails with 53400 once the appliers' %d status entries are taken "
              "(after %d index tables, %.1f s): %r" % (TOTAL, created, elapsed, err))
    alice = connect(ALICE)
    err = error_of(alice, "SELECT idxtable.create_index('a.people', '{_id}', name => 'people_id')")
    RES.check(err is not None and err[0] == "53400", "then alice's create_index fails with 53400 too: %r" % (err,))
    err = error_of(alice, "INSERT INTO a.people VALUES ('9', 'zoe@x.org')")
    RES.check(err is None, "alice's existing unique index table still takes writes: %r" % (err,))
    alice.close()
    run(admin, "DROP FOREIGN TABLE public.bulk")
    admin.close()
    time.sleep(1.0)
    warned = [l for l in log_since(start).splitlines() if "is not maintained because" in l]
    RES.check(not warned, "no applier found an index table without a status entry: %r" % warned[:2])


def teardown():
    set_limit(None)
    pg_fixture.recreate_database(DATABASE, create=False)
    admin = pg_fixture.connect()
    for role in (MALLORY, ALICE):
        run(admin, "DROP ROLE IF EXISTS %s" % role)
    admin.close()
    client = mongo_client.connect()
    client.drop_database(DATABASE)
    client.close()


def main():
    setup()
    try:
        part_limit()
        part_temp()
        part_drops()
        part_markers()
        part_total()
    finally:
        teardown()
    print(RES.summary("security_limits"))
    return 0 if RES.failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
