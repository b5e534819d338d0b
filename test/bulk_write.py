#!/usr/bin/python3
"""Writes through MongoDB 8.0's bulkWrite command (one round trip per batch).

Against a running test/env whose test server was started with
IDXTABLE_MONGO_BULKWRITE=1 (--bulk-write: bulkWrite served, wire version 25),
in both consistency modes, transaction and ordered:

- an INSERT batch into a table with three index tables (one unique) takes as
  many round trips as one into a table without index tables, and sends one
  ordered bulkWrite whose ops are the entries first, then the facts (the
  test server's recentCommands shows the ops in order);
- a unique violation of an index table inside a bulkWrite is 23505 with the
  usual DETAIL, a duplicate _id 23505 on "_id_", and nothing of the failed
  statement remains (facts, entries: verify_index finds nothing);
- an orphaned claim (its fact lost the key) is taken over in ordered mode;
- UPDATE and DELETE batches keep the index tables exact;
- a unique violation in a later statement of a transaction is 23505 with
  the DETAIL too (the failed op of the cursor, as mongod 8.0 returns it);
- a rolled-back transaction leaves nothing;
- SET idxtable.enable_bulk_write = off writes one bulk per collection again.

Environment as exported by eval "$(test/env start)".  A few seconds.  The
last line is "bulk_write: N passed, M failed".
"""
import os
import sys

import psycopg2

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures"))
from results import Results  # noqa: E402  (test/fixtures)
import mongo_client  # noqa: E402  (test/fixtures)
import pg_fixture  # noqa: E402  (test/fixtures)

DBNAME = "idxtable_bulkw"       # both the PostgreSQL and the MongoDB database
RES = Results()
INDEXES = ("acct_name", "acct_town", "acct_tags")


rows = pg_fixture.execute


def setup():
    """A database with the extension, a server and two tables in each mode: one with three index tables
    (unique lower(name), town including n, tags), one without."""
    client = mongo_client.connect()
    client.drop_database(DBNAME)
    conn = pg_fixture.setup_database(DBNAME)
    for mode in ("transaction", "ordered"):
        for name in ("acct_" + mode, "plain_" + mode):
            pg_fixture.create_foreign_table(conn, name, "_id int, name text, town text, tags text[], n int",
                                            options=[("consistency", mode), ("batch_size", "50")])
        for idx, spec, extra in (("name", "{lower(name)}", ", is_unique => true"),
                                 ("town", "{town}", ", include => '{n}'"), ("tags", "{tags}", "")):
            rows(conn, "SELECT idxtable.create_index('acct_%s', '%s'%s, name => 'acct_%s_%s')"
                 % (mode, spec, extra, mode, idx))
    return conn, client


def explain_round_trips(conn, sql):
    """The Round Trips EXPLAIN ANALYZE reports for the write."""
    plan = "\n".join(r[0] for r in rows(conn, "EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) " + sql))
    for line in plan.splitlines():
        if "Round Trips:" in line:
            return int(line.split(":")[1])
    return None


def recent(client):
    return client.admin.command({"recentCommands": 1, "clear": True})["commands"]


def values(start, count, town="Bern"):
    return ", ".join("(%d, 'n%d', '%s', '{t%d,u%d}', %d)" % (i, i, town, i % 3, i, i)
                     for i in range(start, start + count))


def verify(conn, mode):
    """verify_index of the three index tables: all (missing, orphan, stale, unconvertible, conflicts) 0."""
    return [rows(conn, "SELECT missing, orphan, stale, unconvertible, conflicts FROM idxtable.verify_index(%s)",
                 ("acct_%s_%s" % (mode, idx),))[0] for idx in ("name", "town", "tags")]


def clean(conn, mode):
    return all(v == (0, 0, 0, 0, 0) for v in verify(conn, mode))


def fails(conn, sql, code, detail=None):
    try:
        rows(conn, sql)
    except psycopg2.Error as exc:
        return exc.pgcode == code and (detail is None or exc.diag.message_detail == detail)
    return False


def count(conn, table):
    return rows(conn, "SELECT count(*) FROM %s" % table)[0][0]


def test_round_trips(conn, client, mode):
    """INSERT with three index tables: no more round trips than without; one ordered bulkWrite, entries
    first."""
    # once per backend and database, transaction mode creates the applier's marker collection first
    rows(conn, "INSERT INTO acct_%s VALUES %s" % (mode, values(990, 1)))
    rows(conn, "DELETE FROM acct_%s WHERE _id = 990" % mode)
    with_idx = explain_round_trips(conn, "INSERT INTO acct_%s VALUES %s" % (mode, values(1, 40)))
    without = explain_round_trips(conn, "INSERT INTO plain_%s VALUES %s" % (mode, values(1, 40)))
    RES.check(with_idx is not None and with_idx <= without,
              "%s: INSERT of 40 rows with 3 index tables %s round trips, without %s" % (mode, with_idx, without))
    recent(client)
    rows(conn, "INSERT INTO acct_%s VALUES %s" % (mode, values(100, 3)))
    cmds = [c for c in recent(client) if c["command"] == "bulkWrite"]
    RES.check(len(cmds) == 1, "%s: one bulkWrite for the batch: %r" % (mode, [c["command"] for c in cmds]))
    if cmds:
        ops = cmds[0]["ops"]
        facts = [i for i, (kind, ns) in enumerate(ops) if ns == "%s.acct_%s" % (DBNAME, mode)]
        RES.check(cmds[0]["ordered"] is True and len(facts) == 3 and facts == list(range(len(ops) - 3, len(ops)))
                  and all(kind == "insert" for kind, _ in (ops[i] for i in facts)),
                  "%s: ordered, the facts last, after the entries: %r" % (mode, ops))
        RES.check(len(ops) == 3 + 3 * 4, "%s: 3 facts and 12 entries (name, town, two tags): %r" % (mode, ops))
    rows(conn, "SET idxtable.enable_bulk_write = off")
    rows(conn, "INSERT INTO acct_%s VALUES %s" % (mode, values(110, 3)))
    rows(conn, "RESET idxtable.enable_bulk_write")
    names = [c["command"] for c in recent(client)]
    RES.check("bulkWrite" not in names and names.count("insert") + names.count("update") >= 4,
              "%s: idxtable.enable_bulk_write = off writes one bulk per collection: %r" % (mode, names))
    RES.check(clean(conn, mode), "%s: index tables exact after the inserts: %r" % (mode, verify(conn, mode)))


def test_unique_violation(conn, client, mode):
    """A unique key another fact holds, inside a batch: 23505 with the DETAIL, nothing of it remains."""
    before = count(conn, "acct_" + mode)
    RES.check(fails(conn, "INSERT INTO acct_%s VALUES %s, (500, 'N7', 'Oslo', '{x}', 0), %s"
                    % (mode, values(200, 5), values(300, 5)), "23505", "Key (lower(name))=(n7) already exists."),
              "%s: a unique violation in a bulkWrite is 23505 with its DETAIL" % mode)
    RES.check(count(conn, "acct_" + mode) == before, "%s: none of the batch's facts remain" % mode)
    RES.check(clean(conn, mode), "%s: nor any entry: %r" % (mode, verify(conn, mode)))
    RES.check(fails(conn, "INSERT INTO acct_%s VALUES %s, (7, 'zz', 'Oslo', '{x}', 0)" % (mode, values(600, 4)),
                    "23505"), "%s: a duplicate _id in a bulkWrite is 23505" % mode)
    RES.check(count(conn, "acct_" + mode) == before and clean(conn, mode),
              "%s: nothing of the failed statement remains: %r" % (mode, verify(conn, mode)))


def test_orphan_claim(conn, client, mode):
    """Ordered mode: a claim whose fact lost the key (written outside, old) is taken over in the bulk."""
    if mode != "ordered":
        return
    coll = client[DBNAME]["acct_ordered_name"]
    claim = coll.find_one({"_id": {"k0": "n8"}})
    client[DBNAME]["acct_ordered"].update_one({"_id": 8}, {"$set": {"name": "gone8"}})
    if claim is not None:
        coll.update_one({"_id": claim["_id"]}, {"$unset": {"t": ""}})  # old: no claim time
    rows(conn, "INSERT INTO acct_ordered VALUES %s, (700, 'N8', 'Oslo', '{x}', 0)" % values(710, 3))
    RES.check(rows(conn, "SELECT _id FROM acct_ordered WHERE lower(name) = 'n8'") == [(700,)],
              "ordered: the orphaned claim was taken over")
    rows(conn, "UPDATE acct_ordered SET name = 'n8b' WHERE _id = 8")
    RES.check(clean(conn, mode) or verify(conn, mode)[0][1] <= 1,
              "ordered: index tables after the takeover: %r" % (verify(conn, mode),))


def test_update_delete(conn, client, mode):
    """UPDATE and DELETE batches keep the index tables exact; a unique violation in one is 23505."""
    rows(conn, "UPDATE acct_%s SET town = 'Basel', tags = '{v}' WHERE _id BETWEEN 1 AND 30" % mode)
    rows(conn, "DELETE FROM acct_%s WHERE _id BETWEEN 31 AND 35" % mode)
    RES.check(rows(conn, "SELECT count(*) FROM acct_%s WHERE town = 'Basel'" % mode)[0][0] == 30,
              "%s: the updated rows" % mode)
    RES.check(clean(conn, mode), "%s: index tables exact after UPDATE/DELETE: %r" % (mode, verify(conn, mode)))
    before = rows(conn, "SELECT * FROM acct_%s ORDER BY _id" % mode)
    RES.check(fails(conn, "UPDATE acct_%s SET name = 'n2' WHERE _id IN (3, 4)" % mode, "23505",
                    "Key (lower(name))=(n2) already exists."), "%s: a unique violation of an UPDATE" % mode)
    RES.check(rows(conn, "SELECT * FROM acct_%s ORDER BY _id" % mode) == before and clean(conn, mode),
              "%s: the failed UPDATE left nothing" % mode)


def test_unique_violation_in_transaction(conn, client):
    """Transaction mode, a later statement of a transaction: mongod 8.0 returns a duplicate key inside a
    transaction's bulkWrite as the failed op in the cursor (write_ops_exec.cpp, handleError), which the FDW
    reads for the DETAIL; the transaction is aborted and nothing of it remains."""
    before = rows(conn, "SELECT * FROM acct_transaction ORDER BY _id")
    conn.autocommit = False
    rows(conn, "INSERT INTO acct_transaction VALUES %s" % values(950, 5))
    recent(client)
    failed = fails(conn, "INSERT INTO acct_transaction VALUES %s, (960, 'N7', 'Oslo', '{x}', 0)" % values(970, 3),
                   "23505", "Key (lower(name))=(n7) already exists.")
    cmds = [c["command"] for c in recent(client)]
    conn.rollback()
    conn.autocommit = True
    RES.check(failed and "bulkWrite" in cmds,
              "transaction: a duplicate key in a later statement's bulkWrite is 23505 with its DETAIL: %r" % cmds)
    RES.check(rows(conn, "SELECT * FROM acct_transaction ORDER BY _id") == before and clean(conn, "transaction"),
              "transaction: nothing of the aborted transaction remains: %r" % (verify(conn, "transaction"),))


def test_rollback(conn, client):
    """Transaction mode: a rolled-back transaction's bulkWrites leave nothing."""
    before = rows(conn, "SELECT * FROM acct_transaction ORDER BY _id")
    conn.autocommit = False
    rows(conn, "INSERT INTO acct_transaction VALUES %s" % values(900, 20))
    rows(conn, "UPDATE acct_transaction SET town = 'Chur' WHERE _id < 10")
    rows(conn, "DELETE FROM acct_transaction WHERE _id BETWEEN 10 AND 20")
    conn.rollback()
    conn.autocommit = True
    RES.check(rows(conn, "SELECT * FROM acct_transaction ORDER BY _id") == before and clean(conn, "transaction"),
              "transaction: ROLLBACK left nothing: %r" % (verify(conn, "transaction"),))


def main():
    conn, client = setup()
    hello = client.admin.command("hello")
    if hello.get("maxWireVersion", 0) < 25:
        print("FAIL the server does not announce bulkWrite (start the env with IDXTABLE_MONGO_BULKWRITE=1)")
        print("bulk_write: 0 passed, 1 failed")
        return 1
    for mode in ("transaction", "ordered"):
        test_round_trips(conn, client, mode)
        test_unique_violation(conn, client, mode)
        test_orphan_claim(conn, client, mode)
        test_update_delete(conn, client, mode)
    test_unique_violation_in_transaction(conn, client)
    test_rollback(conn, client)
    print(RES.summary("bulk_write"))
    return 1 if RES.failed else 0


if __name__ == "__main__":
    sys.exit(main())
