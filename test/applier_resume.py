#!/usr/bin/python3
"""The applier's stream after its filter shrank, and change events over 16 MB (fdw/applier/applier_stream.c,
change_stream.c).

Run inside ``eval "$(test/env start)"`` (PostgreSQL with idxtable_fdw in shared_preload_libraries).

1. Resuming after the stream's filter shrank.  Two foreign tables over collections ``ra`` and ``rb`` of one
   MongoDB database (one stream watches both), each with an index table (``rb``'s unique).  Three times:
   an outside write to ``ra`` is applied, then ``drop_index`` of ``ra``'s last index table, while ``rb``
   is written outside before and after.  The applier reopens its stream without ``ra``; its stored token
   is then ``ra``'s event, which a stream without ``ra`` does not see (mongod 5.1+ and the test server fail
   such a resume with 280).  Checked: ``rb``'s index table is never stale and never rebuilt (its states
   polled, the server log), a unique-key INSERT through the FDW right after the drop succeeds, every
   ``rb`` write is in its index table, ``verify_index`` is clean and routed results equal unrouted ones.
   Without the fix each drop made ``rb``'s index stale and rebuilt it.
2. Events over 16 MB.  Two test servers of its own, one announcing mongod 6.0 and one 7.0
   (``--server-version``), each with a foreign table ``big`` (collection ``big``) and a table ``other`` in
   another MongoDB database of the same server (another stream of the same applier), each with an index
   table on ``town``.  An outside insert of a document with a 5 MB ``_id`` and 6.5 MB of other data: its
   insert event holds the ``_id`` in ``documentKey`` and in ``fullDocument`` (16.9 MB), over the limit (the
   applier's stream asks for no pre- or post-images, so a large ``_id`` is what makes an event of a fact it
   can index larger than its document; each index entry holds the ``_id`` three times). On
   6.0 the getMore fails with BSONObjectTooLarge (10334); the applier reads that batch again without the
   documents and applies it; on 7.0 the stream splits the event (``$changeStreamSplitLargeEvent``) and the
   applier puts its fragments together.  Checked on both: the same applier process throughout (no restart
   loop), the large fact and the writes after it (in ``big`` and in the other database) are in the index
   tables, the index tables stay valid with no last_error, ``verify_index`` is clean and the routed query
   finds the large fact; the applier's aggregates had the split stage on 7.0 only, and a slim ``$project``
   on 6.0 only (the test server's recentCommands).  Without the fix the applier failed on that event,
   restarted and failed again, and nothing after it was applied.

The last line is ``applier_resume: N passed, M failed``.
"""
import os
import signal
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "fixtures"))
import mongo_client  # noqa: E402
import pg_fixture  # noqa: E402  (test/fixtures)
from results import Results  # noqa: E402  (test/fixtures)

DATABASE = "idxtable_applier_resume"
APPLIER = "idxtable_fdw applier"
RES = Results()
q = pg_fixture.execute
LOG = os.path.join(os.environ.get("IDXTABLE_ENV_DIR", "/tmp/idxtable_fdw_env"), "pg", "server.log")


def log_size():
    try:
        return os.path.getsize(LOG)
    except OSError:
        return 0


def log_since(offset):
    try:
        with open(LOG, errors="replace") as f:
            f.seek(offset)
            return f.read()
    except OSError:
        return ""


def applier_pids(conn):
    return sorted(r[0] for r in q(conn, "SELECT pid FROM pg_stat_activity WHERE backend_type = %s "
                                        "AND datname = current_database()", (APPLIER,)))


def index_collection(conn, name):
    return q(conn, "SELECT collection FROM idxtable.index_defs WHERE name = %s", (name,))[0][0]


def wait_entry(db, coll, fact_id, timeout=60):
    """Wait until the index collection `coll` has an entry of fact `fact_id`."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if db[coll].find_one({"id": fact_id}, {"_id": 1}) is not None:
            return True
        time.sleep(0.05)
    return False


def verify_clean(conn, name):
    return q(conn, "SELECT missing, orphan, stale FROM idxtable.verify_index(%s)", (name,))[0] == (0, 0, 0)


def routed_equals_unrouted(conn, sql):
    q(conn, "SET idxtable.enable_plain_scan = off")
    plan = "\n".join(r[0] for r in q(conn, "EXPLAIN " + sql))
    routed = q(conn, sql)
    q(conn, "RESET idxtable.enable_plain_scan")
    q(conn, "SET idxtable.enable_index_routing = off")
    plain = q(conn, sql)
    q(conn, "RESET idxtable.enable_index_routing")
    return routed == plain and "Index Table" in plan, routed, plain


# --------------------------------------------------------------------------
# 1. Resuming after the stream's filter shrank
# --------------------------------------------------------------------------

def shrink(conn, client):
    db = client[DATABASE]
    for coll in ("ra", "rb"):
        pg_fixture.create_foreign_table(conn, coll, "_id text, k text, town text", drop=True)
    q(conn, "SELECT idxtable.create_index('rb', '{k}', is_unique => true, name => 'rb_k')")
    rb_coll = index_collection(conn, "rb_k")
    states, stop = [], threading.Event()

    def watch_state():
        with pg_fixture.connect(DATABASE) as watcher:
            while not stop.is_set():
                states.append(q(watcher, "SELECT state FROM idxtable.index_defs WHERE name = 'rb_k'")[0][0])
                time.sleep(0.02)

    poller = threading.Thread(target=watch_state)
    poller.start()
    offset = log_size()
    n = 0
    inserted_ok = []
    try:
        for round_ in range(3):
            q(conn, "SELECT idxtable.create_index('ra', '{town}', name => 'ra_town')")
            ra_coll = index_collection(conn, "ra_town")
            for _ in range(5):
                n += 1
                db.rb.insert_one({"_id": "b%d" % n, "k": "k%d" % n, "town": "Oslo"})
            RES.check(wait_entry(db, rb_coll, "b%d" % n), "shrink %d: rb's writes applied" % round_)
            db.ra.insert_one({"_id": "a%d" % round_, "town": "Rome"})
            RES.check(wait_entry(db, ra_coll, "a%d" % round_), "shrink %d: ra's write applied" % round_)
            # at once, before anything else moves the stream's token past ra's event
            q(conn, "SELECT idxtable.drop_index('ra_town')")
            try:
                q(conn, "INSERT INTO rb VALUES (%s, %s, 'Lima')", ("f%d" % round_, "fk%d" % round_))
                inserted_ok.append(True)
            except Exception as exc:  # noqa: BLE001 (IX001 while the index is rebuilt)
                inserted_ok.append(str(exc).strip())
            for _ in range(5):
                n += 1
                db.rb.insert_one({"_id": "b%d" % n, "k": "k%d" % n, "town": "Bern"})
            RES.check(wait_entry(db, rb_coll, "b%d" % n), "shrink %d: rb's writes after the drop applied" % round_)
            time.sleep(0.5)
    finally:
        stop.set()
        poller.join()
    log = log_since(offset)
    RES.check(set(states) == {"valid"}, "shrink: rb's index table stayed valid (states seen %s)" % sorted(set(states)))
    RES.check('rebuilding stale index "rb_k"' not in log and "cannot resume" not in log,
              "shrink: no lost history, no rebuild of rb_k (server log)")
    RES.check(all(ok is True for ok in inserted_ok), "shrink: unique-key INSERTs through the FDW after each drop "
              "succeeded %s" % inserted_ok)
    RES.check("watches fewer collections" in log, "shrink: the applier said it resumes from the position's time")
    RES.check(verify_clean(conn, "rb_k"), "shrink: verify_index('rb_k') clean")
    ok, routed, plain = routed_equals_unrouted(conn, "SELECT _id FROM rb WHERE k IN ('k1', 'k7', 'k30', 'fk2') "
                                                   "ORDER BY _id")
    RES.check(ok and len(routed) == 4, "shrink: routed results equal unrouted ones %s %s" % (routed, plain))


# --------------------------------------------------------------------------
# 2. Events over 16 MB
# --------------------------------------------------------------------------

def applier_stages(client, clear=False):
    """The stages of the applier's aggregates the test server received (recentCommands)."""
    return [c.get("stages") or [] for c in client.admin.command({"recentCommands": 1, "clear": clear,
                                                                "command": "aggregate"})["commands"]
            if c.get("appName") == APPLIER and c.get("stages", [None])[0] == "$changeStream"]


def start_server(version):
    port_file = os.path.join(os.environ.get("IDXTABLE_ENV_DIR", "/tmp"), "resume_%s.port" % version)
    if os.path.exists(port_file):
        os.remove(port_file)
    log = open(os.path.join(os.environ.get("IDXTABLE_ENV_DIR", "/tmp"), "resume_%s.log" % version), "w")
    proc = subprocess.Popen([sys.executable, os.path.join(HERE, "server", "mongo_test_server.py"),
                             "--port", "0", "--port-file", port_file, "--server-version", version],
                            stdout=log, stderr=subprocess.STDOUT)
    deadline = time.time() + 20
    while not os.path.exists(port_file) or not open(port_file).read().strip():
        if proc.poll() is not None or time.time() > deadline:
            raise RuntimeError("the %s test server did not start" % version)
        time.sleep(0.05)
    return proc, "mongodb://127.0.0.1:%s/?replicaSet=rs0" % open(port_file).read().strip()


def large_events(conn, version):
    import pymongo
    name = "v" + version.replace(".", "")
    proc, uri = start_server(version)
    try:
        client = pymongo.MongoClient(uri, serverSelectionTimeoutMS=5000)
        db, other_db = client[DATABASE], client[DATABASE + "_b"]
        pg_fixture.create_server(conn, DATABASE, name=name, uri=uri, credentials=False)
        known = applier_pids(conn)
        pg_fixture.create_foreign_table(conn, "big_" + name, "_id text, town text", server=name,
                                        collection="big")
        pg_fixture.create_foreign_table(conn, "other_" + name, "_id text, town text", server=name,
                                        collection="other", options={"database": DATABASE + "_b"})
        db.big.insert_one({"_id": "s0", "town": "Oslo"})
        other_db.other.insert_one({"_id": "o0", "town": "Oslo"})
        for table in ("big_", "other_"):
            q(conn, "SELECT idxtable.create_index(%s, '{town}', name => %s)", (table + name, table + name + "_town"))
        big_coll, other_coll = (index_collection(conn, t + name + "_town") for t in ("big_", "other_"))
        deadline = time.time() + 90
        pids = []
        while time.time() < deadline and not pids:
            pids = [p for p in applier_pids(conn) if p not in known]
            time.sleep(0.2)
        db.big.insert_one({"_id": "s1", "town": "Rome"})
        RES.check(bool(pids) and wait_entry(db, big_coll, "s1", timeout=90),
                  "%s: an applier follows the server (%s)" % (version, pids))
        opened = applier_stages(client, clear=True)
        huge_id = "K" * (5 << 20)
        db.big.insert_one({"_id": huge_id, "town": "Huge", "pad": "p" * (13 << 19)})
        db.big.insert_one({"_id": "s2", "town": "Lima"})
        other_db.other.insert_one({"_id": "o1", "town": "Bern"})
        got = wait_entry(db, big_coll, "s2") and wait_entry(other_db, other_coll, "o1")
        RES.check(got, "%s: the writes after the large event are applied, in both databases" % version)
        RES.check(db[big_coll].count_documents({"id": huge_id}) == 1, "%s: the large fact has its entry" % version)
        RES.check([p for p in applier_pids(conn) if p not in known] == pids,
                  "%s: the same applier process throughout (no restart loop): %s" % (version, pids))
        rows = q(conn, "SELECT name, state, last_error FROM idxtable.sync_status WHERE name LIKE %s "
                       "ORDER BY name", ("%\\_" + name + "\\_%",))
        RES.check(len(rows) == 2 and all(r[1] == "valid" and not r[2] for r in rows),
                  "%s: the index tables are valid, without last_error: %s" % (version, rows))
        for table in ("big_", "other_"):
            RES.check(verify_clean(conn, table + name + "_town"), "%s: verify_index(%s_town) clean" % (version, table + name))
        q(conn, "SET idxtable.enable_plain_scan = off")
        found = q(conn, "SELECT length(_id) FROM big_%s WHERE town = 'Huge'" % name)
        q(conn, "RESET idxtable.enable_plain_scan")
        RES.check(found == [(len(huge_id),)], "%s: the routed query finds the large fact %s" % (version, found))
        stages = opened + applier_stages(client)
        split = any("$changeStreamSplitLargeEvent" in s for s in stages)
        slim = any("$project" in s for s in stages)
        if version == "7.0":
            RES.check(split and not slim, "7.0: the applier's stream splits large events %s" % stages)
        else:
            RES.check(slim and not split, "6.0: the applier read the batch again without documents %s" % stages)
        q(conn, "DROP SERVER %s CASCADE" % name)
        client.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)


def main():
    client = mongo_client.connect()
    client.drop_database(DATABASE)
    conn = pg_fixture.setup_database(DATABASE, db_options=pg_fixture.UTF8_C)
    shrink(conn, client)
    for version in ("6.0", "7.0"):
        try:
            large_events(conn, version)
        except Exception as exc:  # noqa: BLE001 (one failed check, and the next part runs)
            RES.check(False, "%s: %s" % (version, exc))
    print(RES.summary("applier_resume"))
    return 1 if RES.failed else 0


if __name__ == "__main__":
    sys.exit(main())
