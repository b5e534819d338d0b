#!/usr/bin/python3
"""idxtable_fdw against hostile, broken and silent MongoDB servers.

Starts test/hostile_server.py (one loopback port per mode) and, in database
idxtable_hostile, one foreign server per mode.  For every malformed mode
(short_section, corrupt_doc, corrupt_strend, corrupt_strzero, corrupt_batch,
corrupt_nested, compressed, bad_compression) a
query is an ERROR 08P01 naming the server, twice in a row (the broken
client was discarded and a new one connected), and the same session then
reads the real test server.  Mode fuzz answers 300 finds with randomly
damaged replies, fuzz_hello 300 handshakes (HOSTILE_SEED, default 1, seeds
them): each query returns rows or is an ERROR, never a lost connection.  For every silent mode (blackhole: never
accepted; silent_hello: the handshake never answered; silent: answers the
handshake, never a command):

- statement_timeout = '1s' ends the query with 57014 within 1.5 s;
- pg_cancel_backend() from another session ends it with 57014 within 0.5 s;
- pg_terminate_backend() ends the session within 1 s;
- after the timeout and the cancel, the same session reads the real server.

Mode tampered_entry writes, with pymongo, an entry without an _id document
into the index collection of a unique index table on the real server:
verify_index and repair_index are each an ERROR XX001 (data corrupted)
naming the index, with a hint; once the document is deleted, repair_index
runs again.

After every case a session opened at the start still answers and
pg_postmaster_start_time() is unchanged: no backend crashed.

Environment as for test/differential.py (PGHOST..., MONGO_URI,
MONGO_USER, MONGO_PASSWORD).  The last line is "hostile: N passed, M
failed".
"""
import os
import subprocess
import sys
import threading
import time

import psycopg2

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "fixtures"))
import mongo_client  # noqa: E402  (test/fixtures)
import pg_fixture  # noqa: E402  (test/fixtures)
from results import Results  # noqa: E402  (test/fixtures)

DATABASE = "idxtable_hostile"
MALFORMED = ["short_section", "corrupt_doc", "corrupt_strend", "corrupt_strzero",
             "corrupt_batch", "corrupt_nested", "compressed", "bad_compression"]
SILENT = ["blackhole", "silent_hello", "silent"]
FUZZ = ["fuzz", "fuzz_hello"]
TAMPERED = ["tampered_entry"]
FUZZ_QUERIES = 300

RESULTS = Results()


def check(ok, what):
    """Count one assertion (printed when it failed)."""
    return RESULTS.check(ok, what)


def connect():
    """A session on the test database, autocommit (waiting up to 20 s for
    the cluster to come back if a crash made it restart)."""
    deadline = time.monotonic() + 20
    while True:
        try:
            conn = psycopg2.connect(dbname=DATABASE)
            break
        except psycopg2.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
    conn.autocommit = True
    return conn


def setup(ports):
    """Create the database, the real server and one server per mode."""
    # password_required 'false' (this test runs as a superuser), since a
    # hostile server has no credentials to check
    no_password = [("password_required", "false")]
    conn = pg_fixture.setup_database(DATABASE, mapping_options=no_password)
    pg_fixture.create_foreign_table(conn, "real_t", "_id int, k text", collection="hostile_real")
    for mode, port in ports.items():
        pg_fixture.create_server(conn, "hostile", name="h_" + mode, uri="mongodb://127.0.0.1:%d/" % port,
                                 credentials=False, mapping_options=no_password)
        pg_fixture.create_foreign_table(conn, "h_%s_t" % mode, "_id int, k text", server="h_" + mode,
                                        collection="c")
    pg_fixture.execute(conn, "DELETE FROM real_t")
    pg_fixture.execute(conn, "INSERT INTO real_t VALUES (1, 'real')")
    conn.close()


def run(conn, sql):
    """(SQLSTATE or None, message, elapsed seconds) of a statement."""
    start = time.monotonic()
    try:
        with conn.cursor() as cur:
            cur.execute(sql)
            if cur.description:
                cur.fetchall()
        return None, "", time.monotonic() - start
    except psycopg2.Error as e:
        return e.pgcode, str(e).strip(), time.monotonic() - start


def reads_real(conn, what):
    """The session still reads the real test server."""
    state, msg, _ = run(conn, "SELECT k FROM real_t")
    check(state is None, "%s: the session reads the real server afterwards (%s %s)"
          % (what, state, msg))


class Witness:
    """A session opened at the start, and the postmaster's start time."""

    def __init__(self):
        self.conn = connect()
        self.start = self.query("SELECT pg_postmaster_start_time()")

    def query(self, sql):
        with self.conn.cursor() as cur:
            cur.execute(sql)
            return cur.fetchone()[0]

    def check(self, what):
        """No backend crashed."""
        try:
            alive = self.query("SELECT 1") == 1
            same = self.query("SELECT pg_postmaster_start_time()") == self.start
        except psycopg2.Error:
            alive = same = False
        check(alive and same, "%s: no crash (other session alive, postmaster not restarted)" % what)


def malformed(mode, witness):
    """A malformed reply is 08P01, twice, and the session goes on."""
    conn = connect()
    for attempt in (1, 2):
        state, msg, _ = run(conn, "SELECT * FROM h_%s_t" % mode)
        check(state == "08P01" and ("h_%s" % mode) in msg,
              "%s: attempt %d is 08P01 naming the server (got %s: %s)"
              % (mode, attempt, state, msg))
    reads_real(conn, mode)
    conn.close()
    witness.check(mode)


def fuzz(mode, witness):
    """Randomly damaged replies: each query returns rows or is an ERROR
    with a SQLSTATE, the backend never crashes, the session goes on."""
    conn = connect()
    outcomes = {}
    for _ in range(FUZZ_QUERIES):
        state, msg, _ = run(conn, "SELECT * FROM h_%s_t" % mode)
        key = state or ("rows" if not msg else "lost: " + msg.splitlines()[0])
        outcomes[key] = outcomes.get(key, 0) + 1
        if key.startswith("lost"):
            break
    print("  %s outcomes:" % mode, ", ".join("%s %d" % kv for kv in sorted(outcomes.items())))
    lost = [k for k in outcomes if k.startswith("lost")]
    check(not lost and sum(outcomes.values()) == FUZZ_QUERIES,
          "%s: %d damaged replies, each rows or an ERROR (%s)" % (mode, FUZZ_QUERIES, lost))
    check(outcomes.get("08P01", 0) > 0, "%s: some damaged replies are 08P01" % mode)
    if not lost:
        reads_real(conn, mode)
    conn.close()
    witness.check(mode)


def tampered_entry(mode, witness):
    """An index entry without an _id document, written around the FDW:
    verify_index and repair_index are XX001 naming the index; without it,
    repair_index runs again."""
    conn = connect()
    pg_fixture.create_foreign_table(conn, "tampered_t", "_id int, k text", collection="hostile_tampered",
                                    drop=True)
    pg_fixture.execute(conn, "DELETE FROM tampered_t")
    pg_fixture.execute(conn, "INSERT INTO tampered_t SELECT g, 'k' || g FROM generate_series(1, 5) g")
    pg_fixture.execute(conn, "SELECT idxtable.create_index('tampered_t', '{k}', is_unique => true)")
    name, collection = pg_fixture.execute(
        conn, "SELECT name, collection FROM idxtable.index_defs WHERE tbl = 'tampered_t'::regclass")[0]
    client = mongo_client.connect()
    index = client[DATABASE][collection]
    index.insert_one({"_id": "tampered", "id": 3})
    for function in ("verify_index", "repair_index"):
        state, msg, _ = run(conn, "SELECT * FROM idxtable.%s('%s')" % (function, name))
        check(state == "XX001" and ('index "%s"' % name) in msg and "no _id document" in msg
              and "HINT" in msg,
              "%s: %s of an entry without an _id document is XX001 naming the index (got %s: %s)"
              % (mode, function, state, msg))
    index.delete_one({"_id": "tampered"})
    state, msg, _ = run(conn, "SELECT * FROM idxtable.repair_index('%s')" % name)
    check(state is None, "%s: repair_index runs once the document is gone (got %s: %s)" % (mode, state, msg))
    run(conn, "SELECT idxtable.drop_index('%s')" % name)
    client.close()
    reads_real(conn, mode)
    conn.close()
    witness.check(mode)


def timeout_case(mode, witness, timings):
    """statement_timeout = 1s ends the wait."""
    conn = connect()
    run(conn, "SET statement_timeout = '1s'")
    state, msg, elapsed = run(conn, "SELECT * FROM h_%s_t" % mode)
    timings.append(("statement_timeout 1s, %s" % mode, elapsed))
    check(state == "57014" and elapsed < 1.5,
          "%s: statement_timeout ends the query within 1.5 s (got %s after %.2f s: %s)"
          % (mode, state, elapsed, msg))
    run(conn, "RESET statement_timeout")
    reads_real(conn, mode + " after the timeout")
    conn.close()
    witness.check(mode + " timeout")


def background_query(conn, mode, result):
    """Run the hostile query in a thread, recording outcome and end time."""
    state, msg, _ = run(conn, "SELECT * FROM h_%s_t" % mode)
    result.update(state=state, msg=msg, end=time.monotonic())


def signal_case(mode, witness, timings, function):
    """pg_cancel_backend / pg_terminate_backend from another session."""
    conn = connect()
    pid = conn.get_backend_pid()
    result = {}
    thread = threading.Thread(target=background_query, args=(conn, mode, result))
    thread.start()
    time.sleep(0.7)
    other = connect()
    sent = time.monotonic()
    with other.cursor() as cur:
        cur.execute("SELECT %s(%%s)" % function, (pid,))
    thread.join(10)
    done = "end" in result
    elapsed = result["end"] - sent if done else 99.0
    timings.append(("%s, %s" % (function, mode), elapsed))
    if function == "pg_cancel_backend":
        check(done and result["state"] == "57014" and elapsed < 0.5,
              "%s: pg_cancel_backend ends the query within 0.5 s (got %s after %.2f s: %s)"
              % (mode, result.get("state"), elapsed, result.get("msg")))
        reads_real(conn, mode + " after the cancel")
    else:
        gone = False
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline and not gone:
            with other.cursor() as cur:
                cur.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", (pid,))
                gone = cur.fetchone()[0] == 0
            time.sleep(0.05)
        check(done and elapsed < 1.0 and gone,
              "%s: pg_terminate_backend ends the session within 1 s (%.2f s, gone %s)"
              % (mode, elapsed, gone))
    other.close()
    try:
        conn.close()
    except psycopg2.Error:
        pass
    witness.check("%s %s" % (mode, function))


def start_stub():
    """Start the stub; returns (process, {mode: port})."""
    proc = subprocess.Popen([sys.executable, os.path.join(HERE, "hostile_server.py"),
                             "--lifetime", "240", "--seed", os.environ.get("HOSTILE_SEED", "1")]
                            + MALFORMED + FUZZ + SILENT,
                            stdout=subprocess.PIPE, text=True)
    ports = {}
    for line in proc.stdout:
        if line.strip() == "ready":
            break
        mode, port = line.split()
        ports[mode] = int(port)
    return proc, ports


def main():
    """Run every case (or those of the modes named as arguments); print
    the timings and the summary."""
    modes = sys.argv[1:] or MALFORMED + FUZZ + SILENT + TAMPERED
    proc, ports = start_stub()
    timings = []
    try:
        setup(ports)
        witness = Witness()
        cases = [(malformed, mode) for mode in MALFORMED if mode in modes]
        cases += [(fuzz, mode) for mode in FUZZ if mode in modes]
        cases += [(tampered_entry, mode) for mode in TAMPERED if mode in modes]
        for mode in SILENT:
            if mode in modes:
                cases += [(timeout_case, mode),
                          (lambda m, w, t: signal_case(m, w, t, "pg_cancel_backend"), mode),
                          (lambda m, w, t: signal_case(m, w, t, "pg_terminate_backend"), mode)]
        for case, mode in cases:
            try:
                if case in (malformed, fuzz, tampered_entry):
                    case(mode, witness)
                else:
                    case(mode, witness, timings)
            except psycopg2.Error as e:
                check(False, "%s: unexpected error %s" % (mode, str(e).strip()))
                witness = Witness()
    finally:
        proc.kill()
        proc.wait()
    for what, seconds in timings:
        print("  %-45s %.3f s" % (what, seconds))
    print(RESULTS.summary("hostile"))
    return 1 if RESULTS.failed else 0


if __name__ == "__main__":
    sys.exit(main())
