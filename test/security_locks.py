#!/usr/bin/python3
"""Privileges before locks: the index functions of a role that may not run
them neither wait for nor block a lock on the table.

A table's owner works on it from two sessions; a role without privileges on
it (regress_seclocks_other) calls idxtable.create_index, drop_index,
verify_index, repair_index and rebuild_index meanwhile:

- while the owner holds ACCESS EXCLUSIVE on the table, each call fails with
  42501 at once (well within the 3 s statement_timeout the caller runs
  under; waiting for the lock first would end in 57014 instead);
- while the owner reads (ACCESS SHARE) or writes (ROW EXCLUSIVE) in one
  session, the call fails with 42501 at once, and the owner's second
  session, started while the call is under way, gets the same lock at once
  (a queued ACCESS EXCLUSIVE or SHARE request would make it wait behind);
- with SELECT granted, verify_index is allowed and does wait for the
  owner's ACCESS EXCLUSIVE lock, as it should (statement_timeout, 57014).

Both roles use SET ROLE in sessions of the connecting superuser.
Environment as for test/faults.py (PGHOST..., MONGO_URI...).  Bounded by
the statement_timeouts: well under a minute.  The last line is
"security_locks: N passed, M failed".
"""
import os
import sys
import threading
import time

import psycopg2

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures"))
from results import Results  # noqa: E402  (test/fixtures)
import pg_fixture  # noqa: E402  (test/fixtures)

DATABASE = "idxtable_seclocks"
OWNER = "regress_seclocks_owner"
OTHER = "regress_seclocks_other"
TIMEOUT_MS = 3000
PROMPT_S = 1.0  # "at once": well below TIMEOUT_MS
CALLS = {
    "create_index": "SELECT idxtable.create_index('lt', '{k}', name => 'lt_other')",
    "drop_index": "SELECT idxtable.drop_index('lt_k_idx')",
    "verify_index": "SELECT * FROM idxtable.verify_index('lt_k_idx')",
    "repair_index": "SELECT * FROM idxtable.repair_index('lt_k_idx')",
    "rebuild_index": "SELECT idxtable.rebuild_index('lt_k_idx')",
}


def connect(role=None, autocommit=True):
    settings = ["SET statement_timeout = %d" % TIMEOUT_MS] + (["SET ROLE %s" % role] if role else [])
    return pg_fixture.connect(DATABASE, settings=settings, autocommit=autocommit)


def admin_run(statements):
    pg_fixture.connect(settings=statements).close()


def setup():
    """Database, roles, server, user mappings, the owner's table and index."""
    admin_run(["DROP DATABASE IF EXISTS %s WITH (FORCE)" % DATABASE,
               "DROP ROLE IF EXISTS %s" % OWNER,
               "DROP ROLE IF EXISTS %s" % OTHER,
               "CREATE ROLE %s" % OWNER,
               "CREATE ROLE %s" % OTHER])
    conn = pg_fixture.setup_database(DATABASE, roles=(OWNER, OTHER))
    with conn.cursor() as cur:
        cur.execute("GRANT CREATE ON SCHEMA public TO %s" % OWNER)
        cur.execute("GRANT USAGE ON FOREIGN SERVER mongo TO %s, %s" % (OWNER, OTHER))
    conn.close()
    owner = connect(OWNER)
    pg_fixture.create_foreign_table(owner, "lt", "_id text, k text")
    with owner.cursor() as cur:
        cur.execute("DELETE FROM lt")
        cur.execute("INSERT INTO lt (k) VALUES ('a'), ('b'), ('c')")
        cur.execute("SELECT idxtable.create_index('lt', '{k}')")
    owner.close()


def teardown():
    owner = connect(OWNER)
    with owner.cursor() as cur:
        cur.execute("SELECT idxtable.drop_index(name) FROM idxtable.index_defs")
        cur.execute("DELETE FROM lt")
    owner.close()
    admin_run(["DROP DATABASE IF EXISTS %s WITH (FORCE)" % DATABASE,
               "DROP ROLE IF EXISTS %s" % OWNER,
               "DROP ROLE IF EXISTS %s" % OTHER])


def timed(conn, sql):
    """Run sql; return (SQLSTATE or None, seconds)."""
    start = time.monotonic()
    state = None
    try:
        with conn.cursor() as cur:
            cur.execute(sql)
            if cur.description is not None:
                cur.fetchall()
    except psycopg2.Error as e:
        state = e.pgcode
    return state, time.monotonic() - start


# statements that take a lock mode on lt (LOCK TABLE refuses foreign tables)
TAKES = {
    "ACCESS EXCLUSIVE": "ALTER FOREIGN TABLE lt OPTIONS (SET collection 'lt')",
    "ACCESS SHARE": "SELECT count(*) FROM lt",
    "ROW EXCLUSIVE": "DELETE FROM lt WHERE false",
}


def hold(lockmode):
    """An owner's session in a transaction holding lockmode on lt."""
    conn = connect(OWNER, autocommit=False)
    with conn.cursor() as cur:
        cur.execute(TAKES[lockmode])
        cur.execute("SELECT mode FROM pg_locks WHERE relation = 'lt'::regclass "
                    "AND pid = pg_backend_pid() AND granted")
        modes = [r[0] for r in cur.fetchall()]
    if lockmode.title().replace(" ", "") + "Lock" not in modes:
        raise RuntimeError("%s did not take %s on lt: %r" % (TAKES[lockmode], lockmode, modes))
    return conn


def refused_at_once(res, other, name, sql, situation):
    state, secs = timed(other, sql)
    res.check(state == "42501" and secs < PROMPT_S,
              "%s while the owner %s: SQLSTATE %s after %.2f s, want 42501 at once"
              % (name, situation, state, secs))
    return secs


def under_exclusive_lock(res, other):
    """The owner holds ACCESS EXCLUSIVE: every call is refused at once."""
    holder = hold("ACCESS EXCLUSIVE")
    worst = 0
    for name, sql in CALLS.items():
        worst = max(worst, refused_at_once(res, other, name, sql,
                                           "holds ACCESS EXCLUSIVE"))
    holder.rollback()
    holder.close()
    print("refused under the owner's ACCESS EXCLUSIVE lock: slowest %.3f s" % worst)


def owner_not_blocked(res, other, name, sql, lockmode, situation):
    """The owner holds lockmode in one session; the other role's call runs
    in a thread; the owner's second session takes lockmode meanwhile."""
    holder = hold(lockmode)
    outcome = {}

    def call():
        outcome["other"] = timed(other, sql)

    thread = threading.Thread(target=call)
    thread.start()
    time.sleep(0.2)  # the call is under way (or done)
    second = connect(OWNER, autocommit=False)
    state, secs = timed(second, TAKES[lockmode])
    second.rollback()
    second.close()
    thread.join(TIMEOUT_MS / 1000.0 + 5)
    holder.rollback()
    holder.close()
    ostate, osecs = outcome.get("other", ("hung", 99))
    res.check(ostate == "42501" and osecs < PROMPT_S,
              "%s while the owner %s: SQLSTATE %s after %.2f s, want 42501 at once"
              % (name, situation, ostate, osecs))
    res.check(state is None and secs < PROMPT_S,
              "the owner's second session, during %s of another role: %s after %.2f s"
              % (name, state or "no error", secs))
    return max(osecs, secs)


def while_owner_works(res, other):
    worst = owner_not_blocked(res, other, "drop_index", CALLS["drop_index"],
                              "ACCESS SHARE", "reads")
    for name in ("create_index", "verify_index", "repair_index", "rebuild_index"):
        worst = max(worst, owner_not_blocked(res, other, name, CALLS[name],
                                             "ROW EXCLUSIVE", "writes"))
    print("while the owner reads or writes: slowest refusal or owner lock %.3f s" % worst)


def privileged_caller_waits(res, other):
    """With SELECT, verify_index is allowed, so it does wait for the lock."""
    owner = connect(OWNER)
    with owner.cursor() as cur:
        cur.execute("GRANT SELECT ON lt TO %s" % OTHER)
    holder = hold("ACCESS EXCLUSIVE")
    state, secs = timed(other, CALLS["verify_index"])
    holder.rollback()
    holder.close()
    res.check(state == "57014",
              "verify_index with SELECT under the owner's ACCESS EXCLUSIVE lock: %s, "
              "want 57014 (it waits)" % state)
    state, secs = timed(other, CALLS["verify_index"])
    res.check(state is None, "verify_index with SELECT, lock free: %s" % state)
    with owner.cursor() as cur:
        cur.execute("REVOKE SELECT ON lt FROM %s" % OTHER)
    owner.close()


def main():
    res = Results()
    start = time.time()
    setup()
    other = connect(OTHER)
    try:
        under_exclusive_lock(res, other)
        while_owner_works(res, other)
        privileged_caller_waits(res, other)
        # the owner's indexes are untouched
        with other.cursor() as cur:
            cur.execute("SELECT name, state FROM idxtable.index_defs ORDER BY name")
            rows = cur.fetchall()
        res.check(rows == [("lt_k_idx", "valid")], "the owner's indexes: %r" % rows)
    finally:
        other.close()
        teardown()
    print("elapsed %.1fs" % (time.time() - start))
    print(res.summary("security_locks"))
    sys.exit(1 if res.failed else 0)


if __name__ == "__main__":
    main()
