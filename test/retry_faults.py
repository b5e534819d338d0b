#!/usr/bin/python3
"""libmongoc's retry of a write whose reply was lost, through idxtable_fdw.

For every write of test/faults.py (INSERT, UPDATE of a key, of an included
column, of array elements, DELETE, a multi-statement transaction), in both
consistency modes, the k-th write command the FDW sends (insert, update,
delete, findAndModify, commitTransaction, bulkWrite; k = 0, 1, ... until none is
left) is executed by the server, which then closes the connection without
replying and stays up (the test server's failCommand extension
closeConnection "after", fired once).  libmongoc retries a retryable write
(and commitTransaction) once after a network error; the server recognises
the retry by its session, txnNumber and statement ids and does not execute
it again.  So:

- a retried command: the statement succeeds with exactly the row counts of
  a clean run, no false 23505, the facts are exactly the clean run's, and
  verify_index finds nothing wrong (nor the independent check of the
  entries);
- a command libmongoc does not retry (a write inside a MongoDB transaction,
  a multi-document delete): the statement fails with a connection error,
  not 23505, and the checks of test/faults.py after a failure hold.

Against a test server started with --bulk-write (IDXTABLE_MONGO_BULKWRITE=1)
the FDW writes batches with MongoDB 8.0's bulkWrite, which libmongoc does not
retry: outside a transaction the FDW sends it as a retryable write itself
(fdw/bulk_write.c), and its lost replies must be retried the same way.

The cases where a retried command was executed twice (a false 23505, or
facts or entries that differ from a clean run) are what this catches: on a
server that ignores txnNumber, a retried insert fails with E11000.

Needs the test server (its failCommand extension); against another MongoDB
it prints a skip line.  Environment as for test/faults.py.  The last line
is "retry_faults: N passed, M failed".
"""
import os
import sys
import time

import psycopg2
from bson.son import SON

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from faults import (WRITES, Results, check_after_failure, connect_pg, facts, mongo_client,  # noqa: E402
                    mongo_db, reset_table, restore, setup_database, snapshot, verify_all)

WRITE_COMMANDS = ["insert", "update", "delete", "findAndModify", "commitTransaction", "bulkWrite"]
MAX_STEPS = 40


def arm(client, k):
    """Close the connection after executing the FDW's k-th write command (once)."""
    client.admin.command(SON([("configureFailPoint", "failCommand"), ("mode", {"skip": k, "times": 1}),
                              ("data", {"failCommands": WRITE_COMMANDS, "appName": "idxtable_fdw",
                                        "closeConnection": "after"})]))


def disarm(client):
    """Turn the failpoint off; returns how many times it fired."""
    reply = client.admin.command(SON([("configureFailPoint", "failCommand"), ("mode", "off")]))
    return reply.get("count", 0)


def run_write(conn, statements, in_transaction):
    """Run the write; returns (error or None, the row count of each statement)."""
    counts = []
    try:
        with conn.cursor() as cur:
            if in_transaction:
                cur.execute("BEGIN")
            for sql in statements:
                cur.execute(sql)
                counts.append(cur.rowcount)
            if in_transaction:
                cur.execute("COMMIT")
        return None, counts
    except psycopg2.Error as e:
        try:
            with conn.cursor() as cur:
                cur.execute("ROLLBACK")
        except psycopg2.Error:
            pass
        return e, counts


def clean_verify(conn):
    """verify_index of every index and the independent check find nothing."""
    v = verify_all(conn)
    return all(x[1:] == (0, 0, 0) for x in v.values()), v


def check_retried(res, conn, db, label, after, counts, clean_counts):
    """The statement whose write command was retried succeeded exactly as a clean run."""
    res.check(counts == clean_counts, "%s: row counts %r, clean run %r" % (label, counts, clean_counts))
    now = facts(db)
    res.check(now == after, "%s: facts differ from a clean run: %r" % (label, now))
    ok, v = clean_verify(conn)
    res.check(ok, "%s: verify after a retried write: %r" % (label, v))


def one_write(res, conn, client, db, mode, name, statements):
    """Every step of one write in one mode; returns (steps, retried, failed)."""
    in_txn = len(statements) > 1
    reset_table(conn, mode)
    snap = snapshot(db)
    before = facts(db)
    err, clean_counts = run_write(conn, statements, in_txn)
    res.check(err is None, "%s/%s: clean run failed: %s" % (mode, name, err))
    after = facts(db)
    retried = failed = 0
    for k in range(MAX_STEPS):
        restore(db, snap)
        arm(client, k)
        err, counts = run_write(conn, statements, in_txn)
        fired = disarm(client)
        conn.close()
        conn = connect_pg()
        if not fired:
            res.check(err is None, "%s/%s step %d: no fault, yet: %s" % (mode, name, k, err))
            return conn, k, retried, failed
        label = "%s/%s/close after at step %d" % (mode, name, k)
        if err is None:
            retried += 1
            check_retried(res, conn, db, label, after, counts, clean_counts)
            continue
        failed += 1
        res.check(err.pgcode != "23505", "%s: a false unique violation: %s" % (label, err))
        check_after_failure(res, conn, db, label, mode, before, after)
    res.check(False, "%s/%s: more than %d write commands" % (mode, name, MAX_STEPS))
    return conn, MAX_STEPS, retried, failed


def test_server_in_use(client):
    """Does the MongoDB under test know the closeConnection "after" extension?"""
    try:
        client.admin.command(SON([("configureFailPoint", "failCommand"), ("mode", "off"),
                                  ("data", {"closeConnection": "not-a-moment"})]))
    except Exception:  # the test server refuses an unknown moment; mongod takes any value as true
        return True
    return False


def main():
    res = Results()
    client = mongo_client.connect()
    if not test_server_in_use(client):
        print("retry_faults: skipped (needs the test server's closeConnection \"after\")")
        print("retry_faults: 0 passed, 0 failed")
        return
    setup_database()
    started = time.time()
    conn = connect_pg()
    db = mongo_db()
    outcome = {}
    for mode in ("transaction", "ordered"):
        for name, statements in WRITES.items():
            t0 = time.time()
            conn, steps, retried, failed = one_write(res, conn, client, db, mode, name, statements)
            outcome[(mode, name)] = (retried, failed)
            print("%-12s %-16s %2d write commands: %2d retried and succeeded, %2d failed  %.1fs"
                  % (mode, name, steps, retried, failed, time.time() - t0))
            sys.stdout.flush()
    # libmongoc retries writes outside transactions (ordered mode sends only
    # retryable ones: single-document updates and deletes) and the commit of
    # a transaction, never a write inside one; the FDW sends again the first
    # command of a transaction (a lost reply is a TransientTransactionError:
    # the transaction is started again, the one that ran it is never
    # committed), which is a write where the statement begins with an INSERT
    # (its facts), and a read (not failed here) where it begins with a scan
    begins_with_write = {"insert", "transaction"}
    for name in WRITES:
        res.check(outcome[("ordered", name)][1] == 0 and outcome[("ordered", name)][0] > 0,
                  "ordered/%s: every closed write must be retried: %r" % (name, outcome[("ordered", name)]))
        expected = 2 if name in begins_with_write else 1
        res.check(outcome[("transaction", name)][0] == expected,
                  "transaction/%s: the commit%s retried, and it succeeds: %r"
                  % (name, " and the first write are" if expected == 2 else " only is",
                     outcome[("transaction", name)]))
    conn.close()
    print("elapsed %.1fs" % (time.time() - started))
    print(res.summary("retry_faults"))
    sys.exit(1 if res.failed else 0)


if __name__ == "__main__":
    main()
