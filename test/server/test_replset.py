"""Tests of the test server's replica set (idxmongo/repl.py): the majority commit point, secondaries,
stepdown and failover, rollback. Registered into test_server.py's list (run them with
`/usr/bin/python3 test/server/test_server.py replset`); each starts servers of its own."""

import socket
import struct
import threading
import time

import bson
from pymongo.errors import OperationFailure, WriteConcernError
from pymongo.read_concern import ReadConcern
from pymongo.read_preferences import ReadPreference
from pymongo.write_concern import WriteConcern

TESTS = []


def test(fn):
    """Register a test (each needs fresh servers of its own)."""
    TESTS.append((fn, True))
    return fn


def check(condition, message="check failed"):
    """Assert that keeps working under python -O."""
    if not condition:
        raise AssertionError(message)


def expect_code(code, fn, *args, **kwargs):
    """Run fn and require a pymongo error carrying `code`; returns the exception."""
    try:
        fn(*args, **kwargs)
    except OperationFailure as exc:
        check(exc.code == code, "expected code %s, got %s: %s" % (code, exc.code, exc))
        return exc
    raise AssertionError("expected error code %s, got success" % code)


def timed(fn, *args, **kwargs):
    """(result, seconds) of fn(*args, **kwargs)."""
    started = time.monotonic()
    result = fn(*args, **kwargs)
    return result, time.monotonic() - started


def status(client):
    """replSetGetStatus."""
    return client.admin.command("replSetGetStatus")


def committed(client):
    """The majority commit point replSetGetStatus reports."""
    return status(client)["optimes"]["lastCommittedOpTime"]["ts"]


def lagged_server(env, name, majority_lag_ms):
    """A one-member server whose majority commit point trails by `majority_lag_ms`, and a client."""
    server = env.start(name, extra=["--majority-lag-ms", str(majority_lag_ms)])
    return server, env.new_client(server.uri())


# --- stage 1: the majority commit point ---------------------------------------------------------------

@test
def test_replset_majority_lag_write_concern(env):
    """With --majority-lag-ms 600, w:1 returns at once, w:"majority" (and no write concern, mongod 5.0's
    implicit default) after the commit point passed the write; wtimeout gives writeConcernError 64;
    replSetGetStatus and hello show the commit point behind the last write; setReplicationLag turns the
    lag off and on at run time."""
    _, client = lagged_server(env, "majlag", 600)
    coll = client.t.wc
    w1 = coll.with_options(write_concern=WriteConcern(w=1))
    majority = coll.with_options(write_concern=WriteConcern(w="majority"))
    _, seconds = timed(w1.insert_one, {"_id": 1})
    check(seconds < 0.4, "w:1 took %.2f s" % seconds)
    st = status(client)
    check(st["optimes"]["lastCommittedOpTime"]["ts"] < st["optimes"]["appliedOpTime"]["ts"],
          "commit point %s not behind the write %s" % (st["optimes"]["lastCommittedOpTime"],
                                                     st["optimes"]["appliedOpTime"]))
    hello = client.admin.command("hello")
    check(hello["lastWrite"]["majorityOpTime"]["ts"] < hello["lastWrite"]["opTime"]["ts"], hello["lastWrite"])
    _, seconds = timed(majority.insert_one, {"_id": 2})
    check(0.55 <= seconds < 3, "w:majority took %.2f s" % seconds)
    _, seconds = timed(coll.insert_one, {"_id": 3})
    check(0.55 <= seconds < 3, "the implicit default write concern took %.2f s" % seconds)
    try:
        coll.with_options(write_concern=WriteConcern(w="majority", wtimeout=100)).insert_one({"_id": 4})
        raise AssertionError("no writeConcernError")
    except WriteConcernError as exc:
        check(exc.code == 64 and exc.details["errInfo"]["wtimeout"] is True, exc.details)
    check(coll.count_documents({"_id": 4}) == 1, "the write that timed out was applied")
    reply = client.t.command({"insert": "wc", "documents": [{"_id": 5}], "writeConcern": {"w": 3}})
    check(reply["writeConcernError"]["code"] == 100, reply)  # one member: w above it is unsatisfiable
    client.admin.command({"setReplicationLag": 1, "majorityLagMs": 0})
    _, seconds = timed(majority.insert_one, {"_id": 6})
    check(seconds < 0.4, "without the lag w:majority took %.2f s" % seconds)
    check(committed(client) == status(client)["optimes"]["appliedOpTime"]["ts"])
    client.admin.command({"setReplicationLag": 1, "majorityLagMs": 500})
    _, seconds = timed(majority.insert_one, {"_id": 7})
    check(seconds >= 0.45, "with the lag on again w:majority took %.2f s" % seconds)
    expect_code(13, client.t.command, "setReplicationLag", 1)


@test
def test_replset_default_is_majority_committed_at_once(env):
    """The default server (one member, no lag): w:"majority" does not wait, the commit point is the
    last write, hello names one member."""
    client = env.client
    coll = client.t.wc_default.with_options(write_concern=WriteConcern(w="majority"))
    _, seconds = timed(coll.insert_one, {"x": 1})
    check(seconds < 0.3, "w:majority took %.2f s" % seconds)
    st = status(client)
    check(st["optimes"]["lastCommittedOpTime"] == st["optimes"]["appliedOpTime"], st["optimes"])
    check(st["myState"] == 1 and len(st["members"]) == 1 and st["members"][0]["stateStr"] == "PRIMARY")
    hello = client.admin.command("hello")
    check(hello["isWritablePrimary"] and hello["hosts"] == [hello["me"]] and hello["primary"] == hello["me"])


@test
def test_replset_majority_lag_change_streams_and_reads(env):
    """A change stream returns an event only once the commit point passed it, and its
    postBatchResumeToken never runs ahead of the commit point; readConcern "majority" reads see the
    documents as of the commit point (inserted ones not yet, updated and deleted ones as they were)."""
    # a lag far longer than the commands below take on a loaded machine (700 ms was not, in CI)
    _, client = lagged_server(env, "majlag_cs", 3000)
    db = client.t
    w1 = db.rc.with_options(write_concern=WriteConcern(w=1))
    db.rc.insert_many([{"_id": 1, "v": "old"}, {"_id": 2, "v": "gone"}])  # majority: waits
    stream = db.command({"aggregate": "rc", "pipeline": [{"$changeStream": {}}], "cursor": {}})
    cursor_id = stream["cursor"]["id"]
    w1.insert_one({"_id": 3, "v": "new"})
    inserted_at = status(client)["optimes"]["appliedOpTime"]["ts"]
    w1.update_one({"_id": 1}, {"$set": {"v": "changed"}})
    w1.delete_one({"_id": 2})
    majority = db.rc.with_options(read_concern=ReadConcern("majority"))
    seen = {d["_id"]: d["v"] for d in majority.find()}
    check(seen == {1: "old", 2: "gone"}, "majority read: %s" % seen)
    check(majority.count_documents({}) == 2 and majority.count_documents({"v": "changed"}) == 0)
    check({d["_id"]: d["v"] for d in db.rc.find()} == {1: "changed", 3: "new"}, "local read")
    more = db.command({"getMore": cursor_id, "collection": "rc", "maxTimeMS": 100})
    check(more["cursor"]["nextBatch"] == [], "events before the commit point passed: %s" % more)
    token = more["cursor"]["postBatchResumeToken"]["_data"]
    check(token < _position_hex(inserted_at), "postBatchResumeToken %s past the uncommitted insert" % token)
    events = []
    deadline = time.monotonic() + 10
    while len(events) < 3 and time.monotonic() < deadline:
        more = db.command({"getMore": cursor_id, "collection": "rc", "maxTimeMS": 500})
        events += more["cursor"]["nextBatch"]
    check([e["operationType"] for e in events] == ["insert", "update", "delete"], events)
    seen = {d["_id"]: d["v"] for d in majority.find()}
    check(seen == {1: "changed", 3: "new"}, "majority read after the lag: %s" % seen)


def _position_hex(ts):
    """The hex every token at `ts` or later starts with or sorts after (changelog.py's layout)."""
    return "82%08X%08X" % (ts.time, ts.inc)


# --- stage 2: secondaries -----------------------------------------------------------------------------

def replica_set(env, name, members=3, extra=()):
    """A server of `members` members and a client that discovered the set from a seed list of them."""
    server = env.start(name, extra=["--members", str(members)] + list(extra))
    return server, env.new_client(seed_uri(server))


def seed_uri(server, options=""):
    """A replica-set URI listing every member."""
    return "mongodb://%s/?replicaSet=rs0%s" % (",".join("127.0.0.1:%d" % p for p in server.ports), options)


def direct(env, port):
    """A client of one member only."""
    return env.new_client("mongodb://127.0.0.1:%d/?directConnection=true" % port)


def raw_command(port, doc):
    """One OP_MSG command sent as is (no $readPreference unless `doc` has one); the reply document."""
    body = struct.pack("<I", 0) + b"\x00" + bson.encode(doc)
    message = struct.pack("<iiii", 16 + len(body), 1, 0, 2013) + body
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(message)
        data = b""
        while len(data) < 16 or len(data) < struct.unpack("<i", data[:4])[0]:
            chunk = sock.recv(65536)
            if not chunk:
                raise ConnectionError("closed")
            data += chunk
    return bson.decode(data[21:])


@test
def test_replset_members_and_secondary_reads(env):
    """--members 3: each port answers hello as its member (primary or secondary, hosts, setName, me,
    primary), pymongo discovers the set from the seed list; a secondary (--secondary-lag-ms 800) reads
    the data as of 800 ms ago, and with afterClusterTime (a causally consistent session) it waits until
    it has caught up; writes and transactions on a secondary fail with NotWritablePrimary (10107), reads
    without a secondary read preference with NotPrimaryNoSecondaryOk (13435); a cursor lives on its
    member; setReplicationLag changes one member's lag or pauses it (w:3 then times out)."""
    server, client = replica_set(env, "rs3", extra=["--secondary-lag-ms", "800"])
    names = ["127.0.0.1:%d" % p for p in server.ports]
    for i, port in enumerate(server.ports):
        hello = raw_command(port, {"hello": 1, "$db": "admin"})
        check(hello["hosts"] == names and hello["me"] == names[i] and hello["primary"] == names[0]
              and hello["setName"] == "rs0", hello)
        check(hello["isWritablePrimary"] == (i == 0) and hello["secondary"] == (i != 0), hello)
        check(("electionId" in hello) == (i == 0), hello)
    # (pymongo monitors each member on a thread of its own: on a busy machine neither the primary nor
    # a secondary may be found yet)
    deadline = time.time() + 10
    while client.primary is None and time.time() < deadline:
        time.sleep(0.05)
    check(client.primary == ("127.0.0.1", server.ports[0]), client.primary)
    while len(client.secondaries) < 2 and time.time() < deadline:
        time.sleep(0.05)
    check(len(client.secondaries) == 2, client.secondaries)
    coll = client.t.sec.with_options(write_concern=WriteConcern(w=1))
    secondary = coll.with_options(read_preference=ReadPreference.SECONDARY)
    coll.insert_one({"_id": 1, "v": "old"})
    time.sleep(1.0)
    coll.update_one({"_id": 1}, {"$set": {"v": "new"}})
    coll.insert_one({"_id": 2})
    check(secondary.find_one({"_id": 1})["v"] == "old" and secondary.find_one({"_id": 2}) is None,
          "the secondary saw a write made less than its lag ago")
    check(secondary.count_documents({}) == 1)
    check(coll.find_one({"_id": 1})["v"] == "new", "the primary reads the current data")
    with client.start_session(causal_consistency=True) as session:
        coll.insert_one({"_id": 3}, session=session)
        found, seconds = timed(secondary.find_one, {"_id": 3}, session=session)
        check(found == {"_id": 3} and 0.5 <= seconds < 3, "afterClusterTime: %s after %.2f s" % (found, seconds))
    time.sleep(0.9)
    check(secondary.find_one({"_id": 1})["v"] == "new", "the secondary caught up")
    sec_port = server.ports[1]
    reply = raw_command(sec_port, {"insert": "sec", "documents": [{"_id": 9}], "$db": "t"})
    check(reply["ok"] == 0 and reply["code"] == 10107 and reply["errmsg"] == "not primary", reply)
    reply = raw_command(sec_port, {"find": "sec", "$db": "t"})
    check(reply["ok"] == 0 and reply["code"] == 13435, reply)
    reply = raw_command(sec_port, {"find": "sec", "$db": "t", "$readPreference": {"mode": "secondary"}})
    check(reply["ok"] == 1 and len(reply["cursor"]["firstBatch"]) == 3, reply)
    reply = raw_command(sec_port, {"find": "sec", "$db": "t", "$readPreference": {"mode": "secondary"},
                                   "lsid": {"id": bson.Binary(b"1" * 16, 4)}, "txnNumber": bson.Int64(1),
                                   "autocommit": False, "startTransaction": True})
    check(reply["ok"] == 0 and reply["code"] == 10107, reply)
    sec = direct(env, sec_port)
    cursor = sec.t.command({"find": "sec", "batchSize": 1}, read_preference=ReadPreference.SECONDARY)["cursor"]
    expect_code(43, client.t.command, {"getMore": cursor["id"], "collection": "sec"})
    more = sec.t.command({"getMore": cursor["id"], "collection": "sec"}, read_preference=ReadPreference.SECONDARY)
    check(len(more["cursor"]["nextBatch"]) == 2, more)
    client.admin.command({"setReplicationLag": 1, "member": 1, "lagMs": 0})
    client.admin.command({"setReplicationLag": 1, "member": 2, "paused": True})
    _, seconds = timed(coll.with_options(write_concern=WriteConcern(w=2)).insert_one, {"_id": 4})
    check(seconds < 0.5, "w:2 with a secondary without lag took %.2f s" % seconds)
    try:
        coll.with_options(write_concern=WriteConcern(w=3, wtimeout=300)).insert_one({"_id": 5})
        raise AssertionError("w:3 with a paused member succeeded")
    except WriteConcernError as exc:
        check(exc.code == 64, exc.details)
    st = status(client)
    check([m["stateStr"] for m in st["members"]] == ["PRIMARY", "SECONDARY", "SECONDARY"], st["members"])
    check(st["members"][2]["optime"]["ts"] < st["members"][1]["optime"]["ts"], st["members"])


# --- stages 3 and 4: stepdown, failover, rollback ---------------------------------------------------------

LSID = {"id": bson.Binary(b"retry-session-01", 4)}


def retryable_insert(port, doc, txn_number):
    """A retryable write sent as is: insert of `doc` with the test session and `txn_number`."""
    return raw_command(port, {"insert": "fo", "documents": [doc], "$db": "t", "lsid": LSID,
                              "txnNumber": bson.Int64(txn_number), "writeConcern": {"w": 1}})


def hello_of(port):
    """hello on one member."""
    return raw_command(port, {"hello": 1, "$db": "admin"})


def wait_for(predicate, seconds=10, what="condition"):
    """Poll until predicate() is true."""
    deadline = time.monotonic() + seconds
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting for %s" % what)
        time.sleep(0.05)


@test
def test_replset_step_down_and_failover(env):
    """replSetStepDown: the old primary becomes a secondary (hello, writes NotWritablePrimary 10107 with
    the RetryableWriteError label), the caught-up secondary is elected at once in a higher term
    (electionId), pymongo finds it and writes there; a retryable write made on the old primary and
    retried on the new one is recognised (retriedStmtIds); a change stream resumes on the new primary
    from its token; without force and no secondary caught up the stepdown fails with 262; a forced
    stepdown answers a waiting w:"majority" write PrimarySteppedDown (189) and elects after
    --election-timeout-ms the most up-to-date member out of its stepdown period."""
    server, client = replica_set(env, "rs3fo", extra=["--election-timeout-ms", "300"])
    p0, p1, p2 = server.ports
    coll = client.t.fo
    coll.insert_one({"_id": 1})
    stream = coll.watch()
    check(retryable_insert(p0, {"_id": "r"}, 1)["n"] == 1)
    first = stream.next()
    check(first["operationType"] == "insert", first)
    token = stream.resume_token
    term = status(client)["term"]
    client.admin.command("replSetStepDown", 60)
    old, new = hello_of(p0), hello_of(p1)
    check(old["secondary"] and not old["isWritablePrimary"] and old["primary"] == "127.0.0.1:%d" % p1, old)
    check(new["isWritablePrimary"] and new["electionId"] > bson.ObjectId("7fffffff0000000000000001"), new)
    reply = raw_command(p0, {"insert": "fo", "documents": [{"_id": 9}], "$db": "t", "lsid": LSID,
                             "txnNumber": bson.Int64(2)})
    check(reply["code"] == 10107 and "RetryableWriteError" in reply["errorLabels"], reply)
    retried = retryable_insert(p1, {"_id": "r"}, 1)
    check(retried["n"] == 1 and retried.get("retriedStmtIds") == [0], retried)
    check(coll.count_documents({"_id": "r"}) == 1)
    coll.insert_one({"_id": 2})  # pymongo rediscovers the primary
    check(client.primary == ("127.0.0.1", p1), client.primary)
    check(status(client)["term"] > term)
    resumed = client.t.fo.watch(resume_after=token)
    event = resumed.next()
    check(event["documentKey"] == {"_id": 2}, event)
    # no caught-up secondary: 262 without force
    client.admin.command({"setReplicationLag": 1, "member": 0, "paused": True})
    client.admin.command({"setReplicationLag": 1, "member": 2, "paused": True})
    coll.with_options(write_concern=WriteConcern(w=1)).insert_one({"_id": 3})
    expect_code(262, client.admin.command, {"replSetStepDown": 60, "secondaryCatchUpPeriodSecs": 0.2})
    # a w:majority write waiting when a forced stepdown comes: 189
    result = {}

    def waiting_write():
        result["reply"] = raw_command(p1, {"insert": "fo", "documents": [{"_id": 4}], "$db": "t",
                                           "writeConcern": {"w": "majority"}})
    thread = threading.Thread(target=waiting_write)
    thread.start()
    time.sleep(0.3)
    check(thread.is_alive(), "the w:majority write did not wait")
    raw_command(p1, {"replSetStepDown": 60, "force": True, "$db": "admin"})
    thread.join(5)
    check(result["reply"]["writeConcernError"]["code"] == 189, result["reply"])
    check(all(not hello_of(p)["isWritablePrimary"] for p in server.ports), "a primary before the election")
    wait_for(lambda: hello_of(p0).get("primary") is not None, what="the election")
    # member 0 is in its stepdown period: member 2, which stopped replicating before _id 3, is elected
    # with member 0's vote, and the writes it lacks are rolled back
    check(hello_of(p0)["primary"] == "127.0.0.1:%d" % p2, hello_of(p0))
    left = sorted(d["_id"] for d in direct(env, p2).t.fo.find({"_id": {"$in": [3, 4]}}))
    check(left == [], "writes the new primary lacked survived: %s" % left)


@test
def test_replset_rollback_of_writes_not_majority_committed(env):
    """replSetStepUp on a secondary that stopped replicating: it wins (the other secondary has applied
    no more), the old primary steps down and the writes after the new primary's optime are rolled back:
    the documents are as before them, change streams never show them (a resume on the new primary
    returns the later writes only; the old primary's cursors are gone, 43), the retryable write they
    recorded runs again when retried, the transaction they committed is NoSuchTransaction on a retried
    commit; majority-committed writes stay."""
    server, client = replica_set(env, "rs3rb")
    p0, p1, p2 = server.ports
    coll = client.t.fo
    coll.insert_many([{"_id": 1, "v": 1}, {"_id": 2, "v": 2}])  # w:majority by default
    stream = raw_command(p0, {"aggregate": "fo", "pipeline": [{"$changeStream": {}}], "cursor": {},
                              "$db": "t"})["cursor"]
    for member in (1, 2):
        client.admin.command({"setReplicationLag": 1, "member": member, "paused": True})
    w1 = coll.with_options(write_concern=WriteConcern(w=1))
    w1.insert_one({"_id": 3})
    w1.update_one({"_id": 1}, {"$set": {"v": 10}})
    w1.delete_one({"_id": 2})
    check(retryable_insert(p0, {"_id": "r"}, 1)["n"] == 1)
    with client.start_session() as session:
        with session.start_transaction(write_concern=WriteConcern(w=1)):
            w1.insert_one({"_id": "t"}, session=session)
        txn_number = session._server_session.transaction_id
        lsid = session.session_id
    more = raw_command(p0, {"getMore": stream["id"], "collection": "fo", "maxTimeMS": 200, "$db": "t"})
    check(more["cursor"]["nextBatch"] == [], "events past the commit point: %s" % more)
    token = more["cursor"]["postBatchResumeToken"]
    check(raw_command(p1, {"replSetStepUp": 1, "$db": "admin"})["ok"] == 1)
    check(hello_of(p1)["isWritablePrimary"] and hello_of(p0)["secondary"])
    new = env.new_client("mongodb://127.0.0.1:%d/?directConnection=true" % p1)
    docs = {d["_id"]: d.get("v") for d in new.t.fo.find()}
    check(docs == {1: 1, 2: 2}, "after the rollback: %s" % docs)
    again = retryable_insert(p1, {"_id": "r"}, 1)
    check(again["n"] == 1 and "retriedStmtIds" not in again, again)
    commit = raw_command(p1, {"commitTransaction": 1, "$db": "admin", "lsid": lsid, "txnNumber": txn_number,
                              "autocommit": False})
    check(commit.get("code") == 251, commit)
    more = raw_command(p0, {"getMore": stream["id"], "collection": "fo", "$db": "t"})
    check(more.get("code") == 43, "the old primary's cursor: %s" % more)
    resumed = raw_command(p1, {"aggregate": "fo", "pipeline": [{"$changeStream": {"resumeAfter": token}}],
                               "cursor": {}, "$db": "t"})
    events = resumed["cursor"]["firstBatch"]
    check([(e["operationType"], e["documentKey"]["_id"]) for e in events] == [("insert", "r")], events)
    check(status(new)["rollbacks"] == 1)
