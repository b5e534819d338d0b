#!/usr/bin/python3
"""The applier leaves the FDW's own transactions out of its change stream
while that is safe (fdw/applier/applier_exclude.c), and takes them again when
it is not.

Needs idxtable_fdw in shared_preload_libraries (test/env start does it).  A
table "sx" with a unique index table on lower(email) and one on town, and a
second foreign table "sx_bare" over the same collection without any:

1. armed: after a few writes through the FDW, idxtable.sync_status shows
   skips_fdw_transactions for both index tables;
2. while armed, FDW transactions (INSERT, UPDATE, DELETE) bring the
   applier no event (events_applied does not move), and an INSERT of a
   unique key right after a large INSERT waits little for the applier;
   the applier writes no heartbeat of its own for those statements' waits,
   each of which wrote its own wake-up (counted with the test server's
   recentCommands; not on mongod);
3. an outside write while armed is applied (a routed read with "current"
   finds it at once) and the stream arms again afterwards;
4. a write through sx_bare (which maintains no index table) while armed
   is applied to sx's index tables (a routed read of the new town finds
   it);
5. a transaction that is open while the applier writes to an index table
   (an outside write of another document) keeps the stream unarmed until
   it has ended and the stream has passed it;
6. at the end verify_index finds nothing wrong in either index table;
7. while armed, a query whose wake-up write is refused (as for a user
   mapping that may not write idxtable.sync) waits for one of the
   applier's long getMores at most once: the applier then keeps its
   getMores short, and the next queries' waits are short;
8. in ordered mode (whose events keep the stream taking everything), a
   write of a unique key with "current" also writes its own wake-up, and
   the applier writes no heartbeat of its own for it; two backends write
   their wake-ups to a document each (heartbeat:wake:<backend id>);
9. sessions that write through sx_bare (a doubt: sx's index tables are
   not maintained by those writes) and exit right after their commit,
   while the stream leaves their transactions out: an INSERT, a
   transaction of an INSERT and a DELETE, and an INSERT of a unique key
   that sx then tries to INSERT again (23505).  The routed reads find the
   rows at once, and verify_index finds nothing missing.

Environment as for test/differential.py.  The last line is
"sync_exclude: N passed, M failed".
"""
import json
import os
import re
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures"))
from results import Results  # noqa: E402  (test/fixtures)
import mongo_client  # noqa: E402
import pg_fixture  # noqa: E402  (test/fixtures)
from routed_reads import wait_for  # noqa: E402

DATABASE = "idxtable_sync_exclude"
INDEXES = ["sx_email", "sx_town"]
ROWS = 300


def q(conn, sql, params=None):
    with conn.cursor() as cur:
        cur.execute(sql, params)
        return cur.fetchall() if cur.description else None


def setup():
    """A fresh PostgreSQL and MongoDB database, the two tables, rows and index tables."""
    mongo_client.connect().drop_database(DATABASE)
    conn = pg_fixture.setup_database(DATABASE)
    pg_fixture.create_foreign_table(conn, "sx", "_id int, email text, town text")
    pg_fixture.create_foreign_table(conn, "sx_bare", "_id int, email text, town text", collection="sx")
    q(conn, "INSERT INTO sx SELECT i, 'p' || i || '@example.com', 'Town' || (i %% 20) "
            "FROM generate_series(1, %s) i", (ROWS,))
    q(conn, "SELECT idxtable.create_index('sx', '{lower(email)}', is_unique => true, name => 'sx_email')")
    q(conn, "SELECT idxtable.create_index('sx', '{town}', name => 'sx_town')")
    q(conn, "ANALYZE sx")
    q(conn, "SET idxtable.index_consistency = 'current'")
    q(conn, "SET idxtable.enable_plain_scan = off")
    return conn


def status(conn):
    """{index: (skips_fdw_transactions, events_applied, lag is not null)}."""
    return {r[0]: (r[1], r[2], r[3]) for r in
            q(conn, "SELECT name, coalesce(skips_fdw_transactions, false), events_applied, lag IS NOT NULL "
                    "FROM idxtable.sync_status WHERE name = ANY (%s)", (INDEXES,))}


def armed(conn):
    st = status(conn)
    return len(st) == len(INDEXES) and all(v[0] for v in st.values())


def events_applied(conn):
    return sum(v[1] or 0 for v in status(conn).values())


def routed_ids(conn, where, params=None):
    plan = "\n".join(r[0] for r in q(conn, "EXPLAIN (COSTS OFF) SELECT _id FROM sx WHERE " + where, params))
    ids = sorted(r[0] for r in q(conn, "SELECT _id FROM sx WHERE " + where, params))
    return "Index Table" in plan, ids


def arming(res, conn):
    """1. the stream arms after FDW writes."""
    res.check(wait_for(lambda: len(status(conn)) == 2 and all(v[2] for v in status(conn).values()), 60),
              "index tables not streaming: %r" % status(conn))
    for i in range(3):
        q(conn, "UPDATE sx SET town = 'Warm' || %s WHERE _id = %s", (i, i + 1))
    start = time.time()
    ok = wait_for(lambda: armed(conn), 15)
    res.check(ok, "the stream did not leave the FDW's transactions out within 15 s: %r" % status(conn))
    print("armed %.1f s after the last FDW write" % (time.time() - start))
    return ok


def applier_heartbeats(admin):
    """The applier's writes to idxtable.sync of this database since the last call (the test
    server's recentCommands, which it empties), or None on a server without that command."""
    try:
        commands = admin.command("recentCommands", clear=True)["commands"]
    except Exception:  # mongod: no such command
        return None
    return sum(1 for c in commands if c["command"] == "update" and c["db"] == DATABASE
               and c.get("collection") == "idxtable.sync" and "applier" in (c["appName"] or ""))


def quiet_while_armed(res, conn, admin):
    """2. FDW transactions bring the applier no event while armed."""
    before = events_applied(conn)
    applier_heartbeats(admin)
    q(conn, "INSERT INTO sx SELECT i, 'n' || i || '@example.com', 'New' || (i %% 7) "
            "FROM generate_series(1001, %s) i", (1400,))
    start = time.perf_counter()
    q(conn, "INSERT INTO sx VALUES (1401, 'n1401@example.com', 'New0')")
    unique_ms = (time.perf_counter() - start) * 1000.0
    q(conn, "UPDATE sx SET town = 'Moved' WHERE _id BETWEEN 1001 AND 1100")
    q(conn, "DELETE FROM sx WHERE _id BETWEEN 1301 AND 1350")
    with conn.cursor() as cur:
        cur.execute("BEGIN")
        cur.execute("UPDATE sx SET email = 'x' || _id || '@example.com' WHERE _id BETWEEN 1201 AND 1210")
        cur.execute("COMMIT")
    for i in range(5):  # statements that each wait for the applier (a unique key, "current")
        q(conn, "INSERT INTO sx VALUES (%s, %s, 'New1')", (1410 + i, "n%d@example.com" % (1410 + i)))
    heartbeats = applier_heartbeats(admin)
    time.sleep(1.0)
    after = events_applied(conn)
    if heartbeats is not None:
        res.check(heartbeats == 0, "the armed applier wrote %d heartbeats of its own for statements "
                  "that had written their wake-ups" % heartbeats)
    res.check(armed(conn), "the stream stopped leaving FDW transactions out: %r" % status(conn))
    res.check(after == before, "FDW transactions reached the armed applier: events_applied %d -> %d"
              % (before, after))
    print("while armed: events_applied %d -> %d after 4 FDW statements of 400/100/50/10 rows; "
          "an INSERT of a unique key after the 400-row INSERT took %.1f ms" % (before, after, unique_ms))
    res.check(routed_ids(conn, "town = 'Moved'") == (True, list(range(1001, 1101))),
              "the index table of town after the armed UPDATE: %r" % (routed_ids(conn, "town = 'Moved'"),))


def outside_write(res, conn, coll):
    """3. an outside write while armed is applied, and the stream arms again."""
    coll.insert_one({"_id": 5000, "email": "Outside@Example.com", "town": "Outer"})
    res.check(routed_ids(conn, "lower(email) = 'outside@example.com'") == (True, [5000]),
              "an outside insert while armed, read at once through lower(email): %r"
              % (routed_ids(conn, "lower(email) = 'outside@example.com'"),))
    res.check(routed_ids(conn, "town = 'Outer'") == (True, [5000]),
              "an outside insert while armed, read at once through town: %r"
              % (routed_ids(conn, "town = 'Outer'"),))
    ok = wait_for(lambda: armed(conn), 15)
    res.check(ok, "the stream did not arm again after the outside write: %r" % status(conn))


def partial_write(res, conn):
    """4. a write through a table without the index tables, while armed."""
    res.check(wait_for(lambda: armed(conn), 15), "not armed before the write through sx_bare")
    q(conn, "UPDATE sx_bare SET town = 'Bare' WHERE _id IN (7, 8, 9)")
    q(conn, "INSERT INTO sx_bare VALUES (6000, 'bare@example.com', 'Bare')")
    res.check(routed_ids(conn, "town = 'Bare'") == (True, [7, 8, 9, 6000]),
              "writes through sx_bare while armed, read through town: %r" % (routed_ids(conn, "town = 'Bare'"),))
    res.check(routed_ids(conn, "lower(email) = 'bare@example.com'") == (True, [6000]),
              "an insert through sx_bare while armed, read through lower(email): %r"
              % (routed_ids(conn, "lower(email) = 'bare@example.com'"),))


def open_transaction_across_repair(res, conn, coll):
    """5. a transaction open while the applier writes keeps the stream unarmed until it has passed."""
    res.check(wait_for(lambda: armed(conn), 15), "not armed before the open transaction")
    other = pg_fixture.connect(DATABASE, autocommit=False)
    with other.cursor() as cur:
        cur.execute("UPDATE sx SET town = 'Held' WHERE _id = 20")  # starts the MongoDB transaction
    coll.update_one({"_id": 21}, {"$set": {"town": "Pushed"}})  # the applier writes entries for it
    res.check(routed_ids(conn, "town = 'Pushed'") == (True, [21]), "the outside update, read through town")
    time.sleep(2.5)  # longer than the applier's quiet second
    res.check(not armed(conn), "armed while a transaction that began before the applier's write is open: %r"
              % status(conn))
    other.commit()
    other.close()
    res.check(routed_ids(conn, "town = 'Held'") == (True, [20]), "the held transaction's update, read through town")
    res.check(wait_for(lambda: armed(conn), 15), "not armed again after the open transaction ended: %r"
              % status(conn))


def sync_wait_ms(conn, sql):
    """The Sync Wait that EXPLAIN ANALYZE shows for a routed scan."""
    plan = q(conn, "EXPLAIN (ANALYZE, FORMAT JSON) " + sql)[0][0]
    if isinstance(plan, str):
        plan = json.loads(plan)
    return plan[0]["Plan"].get("Sync Wait")


def refused_wake_up(res, conn, mdb):
    """7. refused wake-ups keep the armed applier's getMores short."""
    admin, other = mdb.client.admin, mdb["sx_elsewhere"]
    res.check(wait_for(lambda: armed(conn), 15), "not armed before the refused wake-ups")
    time.sleep(2.5)  # no request for longer than the applier stays awake: its getMores are long
    admin.command("configureFailPoint", "failCommand", mode="alwaysOn",
                  data={"failCommands": ["update"], "errorCode": 13, "appName": "idxtable_fdw"})
    waits = []
    try:
        for i in range(10):
            other.insert_one({"_id": i})  # moves the cluster time, but is no event of the stream
            waits.append(sync_wait_ms(conn, "SELECT _id FROM sx WHERE lower(email) = 'p42@example.com'"))
            time.sleep(0.3)  # an applier idle again by then would be in a long getMore
    finally:
        admin.command("configureFailPoint", "failCommand", mode="off")
    if not res.check(all(w is not None for w in waits), "Sync Wait missing: %r" % waits):
        return
    later = statistics.median(waits[2:])
    # an applier that kept polling every 500 ms would make these waits about 300 ms
    res.check(later < 100, "waits after refused wake-ups (ms): %r" % waits)
    print("refused wake-ups while armed: Sync Wait %s ms (median after the second %.1f ms)"
          % (", ".join("%.0f" % w for w in waits), later))


def wake_ups(mdb):
    """{_id: n} of the backends' wake-up documents in idxtable.sync."""
    return {d["_id"]: d.get("n") for d in mdb["idxtable.sync"].find({"_id": {"$regex": "^heartbeat:wake"}})}


def ordered_unique_writes(res, conn, mdb):
    """8. ordered writes of unique keys wake the applier themselves, each backend with a wake-up
    document of its own."""
    admin = mdb.client.admin
    other = pg_fixture.connect(DATABASE)
    q(other, "SET idxtable.index_consistency = 'current'")
    q(conn, "ALTER FOREIGN TABLE sx OPTIONS (ADD consistency 'ordered')")
    try:
        applier_heartbeats(admin)
        before = wake_ups(mdb)
        for i in range(5):
            q(conn if i % 2 == 0 else other, "INSERT INTO sx VALUES (%s, %s, 'Ordered')",
              (7000 + i, "o%d@example.com" % i))
            time.sleep(0.2)  # the applier's batch delay ends between the statements
        heartbeats = applier_heartbeats(admin)
        after = wake_ups(mdb)
    finally:
        q(conn, "ALTER FOREIGN TABLE sx OPTIONS (DROP consistency)")
        other.close()
    written = sorted(k for k, n in after.items() if n != before.get(k))
    res.check(len(written) == 2 and all(re.fullmatch(r"heartbeat:wake:[0-9]+", k) for k in written),
              "two backends' wake-ups went to a document each, heartbeat:wake:<backend id>: %r" % written)
    res.check(routed_ids(conn, "town = 'Ordered'") == (True, list(range(7000, 7005))),
              "ordered inserts, read through town: %r" % (routed_ids(conn, "town = 'Ordered'"),))
    if heartbeats is not None:
        res.check(heartbeats == 0, "the applier wrote %d heartbeats of its own for ordered writes of "
                  "unique keys that had written their wake-ups" % heartbeats)


def exit_after_commit(res, conn):
    """9. a session that exits right after committing a write that leaves work to the applier."""
    def session(statements):
        bare = pg_fixture.connect(DATABASE)
        warm = 8100 + len(statements) * 10 + (statements[-1][1] or (0,))[0] % 10
        q(bare, "INSERT INTO sx_bare VALUES (%s, %s, 'Warmup')", (warm, "w%d@example.com" % warm))
        # its session is registered now: wait until the stream leaves it out too
        res.check(wait_for(lambda: armed(conn), 15), "not armed before an exiting session's write")
        time.sleep(2.5)
        with bare.cursor() as cur:
            for sql, params in statements:
                cur.execute(sql, params)
        bare.close()  # the backend exits at once

    session([("INSERT INTO sx_bare VALUES (%s, %s, 'Race1')", (8001, "race1@example.com"))])
    res.check(routed_ids(conn, "town = 'Race1'") == (True, [8001]),
              "an INSERT of a session that exited right after it, read through town: %r"
              % (routed_ids(conn, "town = 'Race1'"),))
    session([("BEGIN", None),
             ("INSERT INTO sx_bare VALUES (%s, %s, 'Race2')", (8002, "race2@example.com")),
             ("DELETE FROM sx_bare WHERE _id = %s", (9,)),
             ("COMMIT", None)])
    res.check(routed_ids(conn, "town = 'Race2'") == (True, [8002]),
              "a transaction of a session that exited right after it, its INSERT read through town: %r"
              % (routed_ids(conn, "town = 'Race2'"),))
    res.check(routed_ids(conn, "town = 'Bare'") == (True, [7, 8, 6000]),
              "... its DELETE of 9 read through town: %r" % (routed_ids(conn, "town = 'Bare'"),))
    session([("INSERT INTO sx_bare VALUES (%s, %s, 'Race3')", (8003, "race3@example.com"))])
    try:
        q(conn, "INSERT INTO sx VALUES (8004, 'RACE3@example.com', 'Race3')")
        res.check(False, "an INSERT of a unique key that an exited session wrote just before exiting succeeded")
    except Exception as e:  # noqa: BLE001
        res.check(getattr(e, "pgcode", None) == "23505",
                  "an INSERT of a unique key an exited session wrote: %s %s" % (getattr(e, "pgcode", None), e))


def verify(res, conn):
    """6. nothing wrong in the index tables."""
    for name in INDEXES:
        row = q(conn, "SELECT * FROM idxtable.verify_index(%s)", (name,))[0]
        res.check(all(v == 0 for v in row[1:]), "verify_index(%s): %r" % (name, row))


def main():
    res = Results()
    start = time.time()
    conn = setup()
    coll = mongo_client.connect()[DATABASE]["sx"]
    if arming(res, conn):
        quiet_while_armed(res, conn, coll.database.client.admin)
        outside_write(res, conn, coll)
        partial_write(res, conn)
        open_transaction_across_repair(res, conn, coll)
        refused_wake_up(res, conn, coll.database)
        ordered_unique_writes(res, conn, coll.database)
        exit_after_commit(res, conn)
    verify(res, conn)
    conn.close()
    print("elapsed %.1fs" % (time.time() - start))
    print(res.summary("sync_exclude"))
    sys.exit(1 if res.failed else 0)


if __name__ == "__main__":
    main()
