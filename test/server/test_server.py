#!/usr/bin/python3
"""Tests of the MongoDB test server, driven by pymongo (and libmongoc through c_smoke.c when gcc is there).

Run: /usr/bin/python3 test/server/test_server.py [NAME_SUBSTRING...]
Starts its own server instances on free ports; exits non-zero on any failure and ends with a line
`server: N passed, M failed`. With MONGO_URI set, the tests that need no fresh instance of this server
run against that server instead.
"""

import os
import random
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import traceback

import bson
import pymongo
from bson.binary import Binary, UuidRepresentation
from bson.codec_options import CodecOptions
from bson.decimal128 import Decimal128
from bson.int64 import Int64
from bson.max_key import MaxKey
from bson.min_key import MinKey
from bson.objectid import ObjectId
from bson.regex import Regex
from pymongo.errors import AutoReconnect, BulkWriteError, DuplicateKeyError, OperationFailure, WriteError

HERE = os.path.dirname(os.path.abspath(__file__))
SERVER_SCRIPT = os.path.join(HERE, "mongo_test_server.py")
PYTHON = "/usr/bin/python3"
USER, PASSWORD = "tester", "s3cret"
BIG = 100000
CODEC = CodecOptions(document_class=dict, tz_aware=False, uuid_representation=UuidRepresentation.UNSPECIFIED)

TESTS = []


def test(own=False):
    """Register a test; `own` tests need a fresh instance of this server (skipped with MONGO_URI)."""
    def register(fn):
        TESTS.append((fn, own))
        return fn
    return register


def check(condition, message="check failed"):
    """Assert that keeps working under python -O."""
    if not condition:
        raise AssertionError(message)


def expect_error(code, fn, *args, **kwargs):
    """Run fn and require a pymongo error carrying `code`; returns the exception."""
    try:
        fn(*args, **kwargs)
    except (OperationFailure, WriteError, DuplicateKeyError) as exc:
        check(exc.code == code, "expected code %s, got %s: %s" % (code, exc.code, exc))
        return exc
    raise AssertionError("expected error code %s, got success" % code)


class ServerProcess:
    """A server subprocess on a free port (--port 0 + --port-file), or on `port`; journaled with `dbpath`."""

    def __init__(self, tmpdir, name, user=None, password=None, dbpath=None, port=0):
        self.port_file = os.path.join(tmpdir, name + ".port")
        self.log = os.path.join(tmpdir, name + ".log")
        if os.path.exists(self.port_file):
            os.remove(self.port_file)
        args = [PYTHON, SERVER_SCRIPT, "--host", "127.0.0.1", "--port", str(port), "--port-file", self.port_file,
                "--log", self.log]
        if user:
            args += ["--user", user, "--password", password]
        if dbpath:
            args += ["--dbpath", dbpath]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.time() + 15
        while not os.path.exists(self.port_file):
            if self.proc.poll() is not None or time.time() > deadline:
                raise RuntimeError("server did not start: %s" % self.proc.stderr.read().decode())
            time.sleep(0.05)
        with open(self.port_file) as f:
            self.port = int(f.read())

    def uri(self, credentials="", options=""):
        """A replica-set URI for this server."""
        return "mongodb://%s127.0.0.1:%d/?replicaSet=rs0%s" % (credentials, self.port, options)

    def stop(self):
        """SIGTERM; returns the exit code (0 = clean shutdown)."""
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return -9

    def kill(self):
        """SIGKILL, as a crash would; returns once the process is gone."""
        self.proc.kill()
        return self.proc.wait(10)


class Env:
    """Shared fixtures: the main server and client, an authenticated server, a 100k-document collection."""

    def __init__(self, tmpdir):
        self.tmpdir = tmpdir
        self.external = os.environ.get("MONGO_URI")
        self.servers = []
        self.main = None
        if not self.external:
            self.main = self.start("main")
        self.uri = self.external or self.main.uri()
        self.client = self.new_client()
        self.client2 = self.new_client()
        self._auth = None
        self._big = None

    def start(self, name, user=None, password=None, dbpath=None, port=0):
        """Start another server instance."""
        server = ServerProcess(self.tmpdir, name, user, password, dbpath, port)
        self.servers.append(server)
        return server

    def restart(self, server, name):
        """Start `server` again on its port with its --dbpath (after it was killed or exited)."""
        self.servers.remove(server)
        dbpath = server.proc.args[server.proc.args.index("--dbpath") + 1]
        return self.start(name, dbpath=dbpath, port=server.port)

    def new_client(self, uri=None, **kwargs):
        """A pymongo client with the test codec options."""
        return pymongo.MongoClient(uri or self.uri, serverSelectionTimeoutMS=5000,
                                   uuidRepresentation="unspecified", **kwargs)

    @property
    def auth(self):
        """The server started with --user/--password (started on first use)."""
        if self._auth is None:
            self._auth = self.start("auth", USER, PASSWORD)
        return self._auth

    def big(self):
        """Collection perf.big with BIG documents {_id, k (indexed), u (unindexed), g: _id % 100}."""
        if self._big is None:
            coll = self.client.perf.big
            coll.drop()
            started = time.time()
            coll.insert_many([{"_id": i, "k": i, "u": i, "g": i % 100, "s": "item%06d" % i} for i in range(BIG)])
            self.insert_seconds = time.time() - started
            coll.create_index("k")
            coll.create_index("g")
            self._big = coll
        return self._big

    def counters(self):
        """(keys examined, documents examined) so far on the main server."""
        metrics = self.client.admin.command("serverStatus")["metrics"]["queryExecutor"]
        return metrics["scanned"], metrics["scannedObjects"]

    def examined(self, fn):
        """Keys and documents examined while running fn()."""
        keys, docs = self.counters()
        fn()
        keys2, docs2 = self.counters()
        return keys2 - keys, docs2 - docs

    def close(self):
        """Stop every server; returns the exit codes."""
        return [s.stop() for s in self.servers]


def fresh(env, name):
    """An empty collection of database `t`."""
    coll = env.client.t[name]
    coll.drop()
    return coll


def raw_roundtrip(port, message):
    """Send raw bytes and read one reply message (header, body)."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(message)
        header = _recv(sock, 16)
        length = struct.unpack("<i", header[:4])[0]
        return struct.unpack("<iiii", header), _recv(sock, length - 16)


def _recv(sock, n):
    """Read exactly n bytes."""
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("closed")
        data += chunk
    return data


def op_msg(doc, request_id=1, flags=0, sequences=(), checksum=False):
    """Build an OP_MSG message (sequence documents may be given already encoded, as bytes)."""
    body = struct.pack("<I", flags | (1 if checksum else 0)) + b"\x00" + bson.encode(doc)
    for ident, docs in sequences:
        payload = ident.encode() + b"\x00" + b"".join(d if isinstance(d, bytes) else bson.encode(d) for d in docs)
        body += b"\x01" + struct.pack("<i", len(payload) + 4) + payload
    if checksum:
        body += b"\x00\x00\x00\x00"  # the server skips the CRC
    return struct.pack("<iiii", 16 + len(body), request_id, 0, 2013) + body


# ---------------------------------------------------------------------------------------------- handshake

@test()
def test_hello_reply(env):
    reply = env.client.admin.command("hello")
    check(reply["setName"] == "rs0" and reply["isWritablePrimary"] is True and reply["secondary"] is False)
    check(reply["maxWireVersion"] >= 7 and reply["logicalSessionTimeoutMinutes"] == 30)
    check("topologyVersion" not in reply, "no topologyVersion expected")
    if env.main:
        host = "127.0.0.1:%d" % env.main.port
        check(reply["hosts"] == [host] and reply["primary"] == host and reply["me"] == host)


@test(own=True)
def test_legacy_op_query_is_master(env):
    query = bson.encode({"isMaster": 1, "helloOk": True})
    body = struct.pack("<i", 0) + b"admin.$cmd\x00" + struct.pack("<ii", 0, -1) + query
    header, reply = raw_roundtrip(env.main.port, struct.pack("<iiii", 16 + len(body), 7, 0, 2004) + body)
    check(header[2] == 7 and header[3] == 1, "OP_REPLY answering request 7 expected")
    flags, cursor_id, start, count = struct.unpack("<iqii", reply[:20])
    doc = bson.decode(reply[20:])
    check(count == 1 and doc["ismaster"] is True and doc["setName"] == "rs0")


@test(own=True)
def test_op_msg_sequences_checksum_and_more_to_come(env):
    fresh(env, "wire")
    msg = op_msg({"insert": "wire", "$db": "t", "writeConcern": {"w": 0}}, flags=2,
                 sequences=[("documents", [{"_id": 1}, {"_id": 2}])])
    with socket.create_connection(("127.0.0.1", env.main.port), timeout=5) as sock:
        sock.sendall(msg)  # moreToCome: no reply
        sock.sendall(op_msg({"count": "wire", "$db": "t"}, request_id=9, checksum=True))
        header = _recv(sock, 16)
        length, _, response_to, opcode = struct.unpack("<iiii", header)
        body = _recv(sock, length - 16)
    check(response_to == 9 and opcode == 2013)
    check(bson.decode(body[5:])["n"] == 2)


@test()
def test_unknown_command(env):
    exc = expect_error(59, env.client.t.command, "noSuchCommandAtAll")
    check(exc.details["codeName"] == "CommandNotFound")


@test()
def test_build_info_and_server_status(env):
    check(env.client.admin.command("buildInfo")["version"].startswith(("6.", "7.", "8.")))
    status = env.client.admin.command("serverStatus")
    check(isinstance(status["metrics"]["queryExecutor"]["scanned"], Int64))
    check(isinstance(status["metrics"]["queryExecutor"]["scannedObjects"], Int64))
    check("opcounters" in status and status["connections"]["current"] >= 1)


# ---------------------------------------------------------------------------------------------- CRUD

@test()
def test_bson_types_round_trip(env):
    coll = fresh(env, "types").with_options(codec_options=CODEC)
    doc = {"_id": 1, "i32": 7, "i64": Int64(7), "dbl": 7.5, "dec": Decimal128("1.10"),
           "uuid": Binary(b"0123456789abcdef", 4), "bin": Binary(b"\x01\x02", 0x80), "oid": ObjectId(),
           "date": __import__("datetime").datetime(2024, 2, 29, 12, 30, 15, 123000), "min": MinKey(), "max": MaxKey(),
           "re": Regex("^ab", "i"), "nested": {"z": 1, "a": 2}, "arr": [1, "x", None]}
    coll.insert_one(doc)
    raw = coll.with_options(codec_options=CodecOptions(document_class=bson.raw_bson.RawBSONDocument)).find_one()
    back = bson.decode(raw.raw, codec_options=CODEC)
    check(list(back) == list(doc), "field order kept")
    check(type(back["i32"]) is int and type(back["i64"]) is Int64, "int32 and Int64 stay distinct")
    check(back["uuid"].subtype == 4 and back["bin"].subtype == 0x80 and back["dec"] == Decimal128("1.10"))
    check(back["date"] == doc["date"] and back["re"].pattern == "^ab" and list(back["nested"]) == ["z", "a"])
    check(isinstance(back["min"], MinKey) and isinstance(back["max"], MaxKey))


@test(own=True)
def test_dates_beyond_year_9999(env):
    fresh(env, "far_dates")
    element = b"\x09when\x00" + struct.pack("<q", 9000000000000000)  # year ~287000: no Python datetime
    doc = b"\x10_id\x00" + struct.pack("<i", 1) + element
    doc = struct.pack("<i", len(doc) + 5) + doc + b"\x00"
    insert = op_msg({"insert": "far_dates", "$db": "t"}, sequences=[("documents", [doc])])
    _, reply = raw_roundtrip(env.main.port, insert)
    check(bson.decode(reply[5:])["n"] == 1)
    _, reply = raw_roundtrip(env.main.port, op_msg({"find": "far_dates", "$db": "t", "filter": {"_id": 1}}))
    check(element in reply, "the date comes back as the same BSON date")


def _undefined_doc(doc_id, body):
    """A raw document {_id: doc_id, ...body} (body: raw BSON elements)."""
    body = b"\x10_id\x00" + struct.pack("<i", doc_id) + body
    return bson.raw_bson.RawBSONDocument(struct.pack("<i", len(body) + 5) + body + b"\x00")


@test()
def test_undefined_stored_and_matched_as_mongod_8(env):
    coll = fresh(env, "undef")
    nested = b"\x06h\x00"
    nested = struct.pack("<i", len(nested) + 5) + nested + b"\x00"
    date = b"\x09d\x00" + struct.pack("<q", 6)  # other types are walked past (a 0x06 byte in a value)
    coll.insert_many([_undefined_doc(1, date + b"\x06f\x00"), _undefined_doc(2, b"\x0af\x00" + date),
                      _undefined_doc(3, b"\x05b\x00" + struct.pack("<i", 1) + b"\x00\x06"),
                      _undefined_doc(4, b"\x03g\x00" + nested)])
    raw = coll.with_options(codec_options=RAW).find_one({"_id": 1})
    check(b"\x06f\x00" in raw.raw, "undefined comes back as undefined, not null")
    raw = coll.with_options(codec_options=RAW).find_one({"_id": 4})
    check(b"\x06h\x00" in raw.raw, "also inside an embedded document")

    def ids(filt):
        return sorted(d["_id"] for d in coll.find(filt))
    check(ids({"f": None}) == [2, 3, 4], "8.0: {f: null} does not match undefined")
    check(ids({"f": {"$in": [None]}}) == [2, 3, 4] and ids({"f": {"$eq": None}}) == [2, 3, 4])
    check(ids({"f": {"$ne": None}}) == [1] and ids({"f": {"$nin": [None]}}) == [1], "8.0: $ne null matches it")
    check(ids({"f": {"$type": "undefined"}}) == [1], "$type undefined")
    check(ids({"f": {"$ne": None, "$not": {"$type": "undefined"}}}) == [], "$not $type undefined")
    check(ids({"f": {"$lt": "x"}}) == [] and ids({"f": {"$gt": None}}) == [], "no comparison matches undefined")
    check(ids({"g.h": None}) == [1, 2, 3], "8.0 also on a dotted path")
    check(ids({"g.h": {"$type": "undefined"}}) == [4])
    coll.update_one({"_id": 1}, {"$set": {"x": 1}})
    raw = coll.with_options(codec_options=RAW).find_one({"_id": 1})
    check(b"\x06f\x00" in raw.raw, "an update keeps the other fields' undefined")


@test()
def test_insert_assigns_object_id_first(env):
    coll = fresh(env, "ids")
    coll.insert_one({"a": 1})
    coll.insert_one({"b": 2, "_id": "second"})
    docs = list(coll.find())
    check(isinstance(docs[0]["_id"], ObjectId) and list(docs[0]) == ["_id", "a"])
    check(list(docs[1]) == ["_id", "b"])


@test()
def test_cursor_get_more_across_batches(env):
    coll = fresh(env, "batches")
    coll.insert_many([{"_id": i, "pad": "x" * 100} for i in range(250)])
    reply = env.client.t.command("find", "batches", batchSize=7, sort={"_id": 1})
    check(len(reply["cursor"]["firstBatch"]) == 7 and reply["cursor"]["id"] != 0)
    seen = [d["_id"] for d in coll.find().sort("_id", 1).batch_size(13)]
    check(seen == list(range(250)))
    default = env.client.t.command("find", "batches")
    check(len(default["cursor"]["firstBatch"]) == 101, "default first batch is 101 documents")


@test()
def test_get_more_from_another_connection(env):
    coll = fresh(env, "shared_cursor")
    coll.insert_many([{"_id": i} for i in range(10)])
    first = env.client.t.command("find", "shared_cursor", batchSize=3)
    cursor_id = first["cursor"]["id"]
    more = env.client2.t.command("getMore", cursor_id, collection="shared_cursor")
    check([d["_id"] for d in more["cursor"]["nextBatch"]] == list(range(3, 10)) and more["cursor"]["id"] == 0)


@test()
def test_kill_cursors(env):
    coll = fresh(env, "killed")
    coll.insert_many([{"_id": i} for i in range(10)])
    cursor_id = env.client.t.command("find", "killed", batchSize=2)["cursor"]["id"]
    reply = env.client.t.command("killCursors", "killed", cursors=[cursor_id])
    check(reply["cursorsKilled"] == [cursor_id])
    expect_error(43, env.client.t.command, "getMore", cursor_id, collection="killed")


@test()
def test_sort_skip_limit(env):
    coll = fresh(env, "ssl")
    coll.insert_many([{"_id": i, "g": i % 3, "v": -i} for i in range(20)])
    got = [d["_id"] for d in coll.find({"g": 1}).sort([("v", 1)]).skip(2).limit(3)]
    check(got == [13, 10, 7], got)
    got = [d["_id"] for d in coll.find().sort([("g", -1), ("_id", 1)]).limit(4)]
    check(got == [2, 5, 8, 11], got)
    reply = env.client.t.command("find", "ssl", limit=5, batchSize=2)
    check(len(reply["cursor"]["firstBatch"]) == 2)
    check(len(list(coll.find().limit(-4))) == 4)


@test()
def test_projection(env):
    coll = fresh(env, "proj")
    coll.insert_one({"_id": 1, "a": 1, "b": {"c": 2, "d": 3}, "e": [{"f": 1, "g": 2}, {"f": 3, "g": 4}]})
    check(coll.find_one({}, {"a": 1}) == {"_id": 1, "a": 1})
    check(coll.find_one({}, {"b.c": 1, "_id": 0}) == {"b": {"c": 2}})
    check(coll.find_one({}, {"b": 0, "e": 0}) == {"_id": 1, "a": 1})
    check(coll.find_one({}, {"e.f": 1}) == {"_id": 1, "e": [{"f": 1}, {"f": 3}]})
    check(list(coll.find_one({}, {"a": 1, "_id": 1})) == ["_id", "a"], "_id first")


@test()
def test_projection_through_arrays_with_scalars(env):
    coll = fresh(env, "proj_arrays")
    coll.insert_one({"_id": 1, "m": [{"v": 1, "w": 2}, 5, {"w": 3}, [{"v": 4, "w": 5}]], "s": 7})
    check(coll.find_one({}, {"m.v": 1}) == {"_id": 1, "m": [{"v": 1}, {}, [{"v": 4}]]},
          "an inclusion drops the scalar elements")
    check(coll.find_one({}, {"m.v": 0, "s": 0}) == {"_id": 1, "m": [{"w": 2}, 5, {"w": 3}, [{"w": 5}]]},
          "an exclusion keeps them")
    check(coll.find_one({}, {"s.x": 1}) == {"_id": 1}, "a scalar under an included path is dropped")


@test()
def test_dotted_paths_and_arrays(env):
    coll = fresh(env, "dotted")
    coll.insert_many([{"_id": 1, "a": {"b": 5}}, {"_id": 2, "a": [{"b": 6}, {"b": 7}]}, {"_id": 3, "t": [1, 2, 3]},
                      {"_id": 4}])
    check([d["_id"] for d in coll.find({"a.b": 7})] == [2])
    check([d["_id"] for d in coll.find({"t": 2})] == [3])
    check([d["_id"] for d in coll.find({"a.b": {"$gte": 5}}).sort("_id", 1)] == [1, 2])
    check([d["_id"] for d in coll.find({"a": None})] == [3, 4])


@test()
def test_sort_follows_bson_type_order(env):
    coll = fresh(env, "order")
    values = [MaxKey(), True, "b", {"x": 1}, 2.5, None, MinKey(), ObjectId(), [0], Int64(1), "a", Binary(b"z", 0)]
    coll.insert_many([{"_id": i, "v": v} for i, v in enumerate(values)])
    order = [d["_id"] for d in coll.find().sort("v", 1)]
    check(order == [6, 5, 8, 9, 4, 10, 2, 3, 11, 7, 1, 0], order)


@test()
def test_update_operators(env):
    coll = fresh(env, "upd")
    coll.insert_many([{"_id": 1, "n": 1, "tags": ["a"], "x": 1}, {"_id": 2, "n": 2, "tags": [], "x": 1}])
    res = coll.update_one({"_id": 1}, {"$set": {"s": "v"}, "$unset": {"x": ""}, "$inc": {"n": 5},
                                       "$push": {"tags": "b"}, "$addToSet": {"set": 1}})
    check(res.matched_count == 1 and res.modified_count == 1)
    check(coll.find_one({"_id": 1}) == {"_id": 1, "n": 6, "tags": ["a", "b"], "s": "v", "set": [1]})
    coll.update_one({"_id": 1}, {"$pull": {"tags": "a"}})
    check(coll.find_one({"_id": 1})["tags"] == ["b"])
    res = coll.update_many({}, {"$set": {"x": 9}})
    check(res.matched_count == 2 and res.modified_count == 2)
    res = coll.update_many({}, {"$set": {"x": 9}})
    check(res.matched_count == 2 and res.modified_count == 0, "unchanged documents are not modified")
    coll.insert_one({"_id": 3, "big": Int64(5), "small": 5})
    coll.update_one({"_id": 3}, {"$inc": {"big": 1, "small": 1}})
    doc = coll.find_one({"_id": 3})
    check(type(doc["big"]) is Int64 and type(doc["small"]) is int, "$inc keeps int64 and int32 apart")


@test()
def test_upserts_and_replacement(env):
    coll = fresh(env, "ups")
    res = coll.update_one({"k": "a"}, {"$set": {"v": 1}, "$setOnInsert": {"created": True}}, upsert=True)
    check(res.upserted_id is not None and res.matched_count == 0)
    doc = coll.find_one({"k": "a"})
    check(doc["created"] is True and list(doc)[0] == "_id")
    res = coll.update_one({"_id": {"$eq": 7}}, {"$set": {"v": 7}}, upsert=True)
    check(res.upserted_id == 7, res.upserted_id)
    res = coll.update_one({"k": "a"}, {"$set": {"v": 2}, "$setOnInsert": {"created": False}}, upsert=True)
    check(res.upserted_id is None and coll.find_one({"k": "a"})["created"] is True)
    coll.replace_one({"_id": 10}, {"whole": "doc"}, upsert=True)
    check(coll.find_one({"_id": 10}) == {"_id": 10, "whole": "doc"})
    coll.replace_one({"_id": 10}, {"other": 1})
    check(coll.find_one({"_id": 10}) == {"_id": 10, "other": 1})


@test()
def test_id_is_immutable(env):
    coll = fresh(env, "immut")
    coll.insert_one({"_id": 1})
    expect_error(66, coll.update_one, {"_id": 1}, {"$set": {"_id": 2}})
    expect_error(66, coll.replace_one, {"_id": 1}, {"_id": 3, "a": 1})


@test()
def test_delete(env):
    coll = fresh(env, "del")
    coll.insert_many([{"_id": i, "g": i % 2} for i in range(10)])
    check(coll.delete_one({"g": 1}).deleted_count == 1)
    check(coll.delete_many({"g": 1}).deleted_count == 4)
    check(coll.count_documents({}) == 5)


@test()
def test_find_and_modify(env):
    coll = fresh(env, "fam")
    coll.insert_many([{"_id": i, "q": i} for i in range(5)])
    before = coll.find_one_and_update({"q": {"$gte": 2}}, {"$inc": {"q": 10}}, sort=[("q", -1)])
    check(before == {"_id": 4, "q": 4})
    after = coll.find_one_and_update({"_id": 3}, {"$inc": {"q": 10}}, return_document=True, projection={"_id": 0})
    check(after == {"q": 13})
    check(coll.find_one_and_delete({"_id": 0}) == {"_id": 0, "q": 0} and coll.count_documents({}) == 4)
    up = coll.find_one_and_update({"_id": 99}, {"$set": {"q": 1}}, upsert=True, return_document=True)
    check(up == {"_id": 99, "q": 1})
    raw = env.client.t.command("findAndModify", "fam", query={"_id": 98}, update={"$set": {"q": 2}}, upsert=True)
    check(raw["lastErrorObject"]["upserted"] == 98 and raw["lastErrorObject"]["updatedExisting"] is False)
    check(raw["value"] is None)


@test()
def test_count_and_distinct(env):
    coll = fresh(env, "cnt")
    coll.insert_many([{"_id": i, "g": i % 4, "t": [i % 2, 7]} for i in range(40)])
    check(env.client.t.command("count", "cnt", query={"g": 1})["n"] == 10)
    check(env.client.t.command("count", "cnt", query={"g": 1}, skip=3, limit=5)["n"] == 5)
    check(env.client.t.command("count", "missing_coll")["n"] == 0)
    check(coll.distinct("g") == [0, 1, 2, 3] and coll.distinct("t") == [0, 1, 7])
    check(coll.distinct("g", {"g": {"$gt": 1}}) == [2, 3])


@test()
def test_duplicate_key_write_error(env):
    coll = fresh(env, "dup")
    coll.create_index([("k", 1)], unique=True, name="k_unique")
    coll.insert_one({"_id": 1, "k": "v"})
    exc = expect_error(11000, coll.insert_one, {"_id": 2, "k": "v"})
    check(exc.details["errmsg"] == 'E11000 duplicate key error collection: t.dup index: k_unique dup key: { k: "v" }',
          exc.details["errmsg"])
    check(exc.details["keyPattern"] == {"k": 1} and exc.details["keyValue"] == {"k": "v"})
    coll.insert_one({"_id": 3, "k": "w"})
    expect_error(11000, coll.update_one, {"_id": 3}, {"$set": {"k": "v"}})
    check(coll.find_one({"_id": 3})["k"] == "w", "failed update leaves the document alone")


@test()
def test_ordered_and_unordered_inserts(env):
    coll = fresh(env, "ordered")
    try:
        coll.insert_many([{"_id": 1}, {"_id": 1}, {"_id": 2}], ordered=True)
        raise AssertionError("expected BulkWriteError")
    except BulkWriteError as exc:
        check(exc.details["nInserted"] == 1 and exc.details["writeErrors"][0]["index"] == 1)
    check(coll.count_documents({}) == 1)
    coll = fresh(env, "unordered")
    try:
        coll.insert_many([{"_id": 1}, {"_id": 1}, {"_id": 2}, {"_id": 2}, {"_id": 3}], ordered=False)
        raise AssertionError("expected BulkWriteError")
    except BulkWriteError as exc:
        check(exc.details["nInserted"] == 3 and [e["index"] for e in exc.details["writeErrors"]] == [1, 3])
    check(coll.count_documents({}) == 3)


@test()
def test_unique_compound_index_treats_missing_as_null(env):
    coll = fresh(env, "ucomp")
    coll.create_index([("a", 1), ("b", 1)], unique=True)
    coll.insert_one({"_id": 1, "a": 1})
    exc = expect_error(11000, coll.insert_one, {"_id": 2, "a": 1, "b": None})
    check(exc.details["keyValue"] == {"a": 1, "b": None})
    coll.insert_one({"_id": 3, "a": 1, "b": 2})
    expect_error(11000, env.client.t.ucomp.create_index, [("x", 1)], unique=True)  # x missing everywhere


@test()
def test_index_management(env):
    coll = fresh(env, "idx")
    coll.insert_one({"_id": 1, "a": 1, "b": 1})
    check(coll.create_index([("a", 1), ("b", -1)], name="ab") == "ab")
    reply = env.client.t.command("createIndexes", "idx", indexes=[{"key": {"a": 1, "b": -1}, "name": "ab"}])
    check(reply["numIndexesBefore"] == reply["numIndexesAfter"] == 2, "same spec twice is fine")
    expect_error(85, env.client.t.command, "createIndexes", "idx", indexes=[{"key": {"a": 1, "b": -1}, "name": "x"}])
    expect_error(86, env.client.t.command, "createIndexes", "idx", indexes=[{"key": {"b": 1}, "name": "ab"}])
    expect_error(85, env.client.t.command, "createIndexes", "idx",
                 indexes=[{"key": {"a": 1, "b": -1}, "name": "ab", "unique": True}])
    names = [i["name"] for i in coll.list_indexes()]
    check(names == ["_id_", "ab"], names)
    expect_error(27, env.client.t.command, "dropIndexes", "idx", index="nope")
    expect_error(72, env.client.t.command, "dropIndexes", "idx", index="_id_")
    coll.drop_index("ab")
    coll.create_index("a")
    coll.create_index("b")
    env.client.t.command("dropIndexes", "idx", index="*")
    check([i["name"] for i in coll.list_indexes()] == ["_id_"])
    expect_error(26, env.client.t.command, "listIndexes", "no_such_collection")


@test()
def test_namespaces(env):
    db = env.client.ns_test
    env.client.drop_database("ns_test")
    db.create_collection("alpha")
    expect_error(48, db.command, "create", "alpha")
    db.beta.insert_one({"x": 1})  # implicit creation
    check(sorted(db.list_collection_names()) == ["alpha", "beta"])
    infos = list(db.list_collections(filter={"name": "beta"}))
    check(len(infos) == 1 and infos[0]["name"] == "beta")
    check("ns_test" in env.client.list_database_names())
    expect_error(26, db.command, "drop", "gamma")
    db.drop_collection("alpha")
    check(db.list_collection_names() == ["beta"])
    env.client.drop_database("ns_test")
    check("ns_test" not in env.client.list_database_names())


@test()
def test_aggregate_basic_stages(env):
    coll = fresh(env, "agg")
    coll.insert_many([{"_id": i, "g": i % 3, "v": i} for i in range(12)])
    out = list(coll.aggregate([{"$match": {"v": {"$gte": 3}}}, {"$sort": {"v": -1}}, {"$skip": 1}, {"$limit": 3},
                               {"$project": {"v": 1, "_id": 0}}, {"$addFields": {"w": {"$multiply": ["$v", 2]}}},
                               {"$set": {"z": 1}}]))
    check(out == [{"v": 10, "w": 20, "z": 1}, {"v": 9, "w": 18, "z": 1}, {"v": 8, "w": 16, "z": 1}], out)
    check(list(coll.aggregate([{"$match": {"g": 0}}, {"$count": "n"}])) == [{"n": 4}])


@test()
def test_aggregate_group_unwind_lookup(env):
    orders, items = fresh(env, "orders"), fresh(env, "items")
    items.insert_many([{"_id": "a", "price": 2}, {"_id": "b", "price": 5}])
    orders.insert_many([{"_id": 1, "item": "a", "tags": ["x", "y"]}, {"_id": 2, "item": "b", "tags": ["x"]},
                        {"_id": 3, "item": "a", "tags": []}])
    groups = list(orders.aggregate([{"$group": {"_id": "$item", "n": {"$sum": 1}}}, {"$sort": {"_id": 1}}]))
    check(groups == [{"_id": "a", "n": 2}, {"_id": "b", "n": 1}], groups)
    tags = list(orders.aggregate([{"$unwind": "$tags"}, {"$group": {"_id": "$tags", "n": {"$sum": 1}}},
                                  {"$sort": {"_id": 1}}]))
    check(tags == [{"_id": "x", "n": 2}, {"_id": "y", "n": 1}], tags)
    joined = list(orders.aggregate([{"$match": {"_id": 2}}, {"$lookup": {"from": "items", "localField": "item",
                                                                      "foreignField": "_id", "as": "it"}},
                                    {"$replaceRoot": {"newRoot": {"$arrayElemAt": ["$it", 0]}}}]))
    check(joined == [{"_id": "b", "price": 5}], joined)
    check(len(list(orders.aggregate([{"$sample": {"size": 2}}]))) == 2)
    reply = env.client.t.command("aggregate", "orders", pipeline=[], cursor={"batchSize": 1})
    check(len(reply["cursor"]["firstBatch"]) == 1 and reply["cursor"]["id"] != 0)


@test()
def test_planner_never_changes_results(env):
    rng = random.Random(7)
    pool = [None, 0, 1, 2, 2.0, Int64(3), 3.5, -1, "a", "b", "ab", {"x": 1}, [1, 2], [], [2, "a"], [[1]]]
    scalars = [v for v in pool if not isinstance(v, list)]
    coll = fresh(env, "plan_fuzz")
    docs = []
    for i in range(400):
        doc = {"_id": i}
        if rng.random() < 0.8:
            doc["a"] = rng.choice(pool)
        if rng.random() < 0.8:
            doc["b"] = rng.choice(scalars)  # a compound index cannot hold two arrays (CannotIndexParallelArrays)
        if rng.random() < 0.6:
            doc["s"] = rng.choice([{"t": rng.choice(pool)}, [{"t": rng.choice(pool)}, {"t": 5}], rng.choice(pool)])
        docs.append(doc)
    coll.insert_many(docs)
    coll.create_index("a")
    coll.create_index([("a", 1), ("b", -1)])
    coll.create_index("s.t")

    def condition():
        value = rng.choice(scalars)
        kind = rng.choice(["eq", "$in", "$gt", "$gte", "$lt", "$lte", "range", "$ne"])
        if kind == "eq":
            return value
        if kind == "$in":
            return {"$in": rng.sample(scalars, 3)}
        if kind == "range":
            return {"$gt": rng.choice([0, 1, "a"]), "$lt": rng.choice([3, "b", 10])}
        return {kind: value}

    for _ in range(250):
        filt = {f: condition() for f in rng.sample(["a", "b", "s.t", "_id"], rng.randint(1, 3))}
        if rng.random() < 0.2:
            filt = {"$or": [filt, {"a": condition()}]}
        indexed = sorted(d["_id"] for d in coll.find(filt))
        scanned = sorted(d["_id"] for d in coll.find(filt).hint([("$natural", 1)]))
        check(indexed == scanned, "filter %s: %s via indexes, %s via a collection scan" % (filt, indexed, scanned))


NULL_PATH_DOCS = [{"_id": 1}, {"_id": 2, "a": None}, {"_id": 3, "a": 7}, {"_id": 4, "a": "x"}, {"_id": 5, "a": {}},
                  {"_id": 6, "a": {"b": None}}, {"_id": 7, "a": {"b": 1}}, {"_id": 8, "a": {"b": 2}},
                  {"_id": 9, "a": [{"b": 1}, 5]}, {"_id": 10, "a": [{}]}]
NULL_PATH_HITS = [1, 2, 3, 4, 5, 6, 10]  # a.b resolves to no value or to null
NULL_PATH_CASES = [
    ({"a.b": None}, NULL_PATH_HITS),
    ({"a.b": {"$eq": None}}, NULL_PATH_HITS),
    ({"a.b": {"$in": [None]}}, NULL_PATH_HITS),
    ({"a.b": {"$in": [None, 1]}}, sorted(NULL_PATH_HITS + [7, 9])),
    ({"a.b": {"$ne": None}}, [7, 8, 9]),
    ({"a.b": {"$nin": [None]}}, [7, 8, 9]),
    ({"a.b": {"$nin": [None, 1]}}, [8]),
    ({"a.b": {"$not": {"$eq": None}}}, [7, 8, 9]),
    ({"a.b": {"$ne": None, "$gt": 1}}, [8]),
    ({"$or": [{"a.b": None}, {"_id": 8}]}, sorted(NULL_PATH_HITS + [8])),
    ({"$and": [{"a.b": {"$in": [None, 2]}}, {"_id": {"$gte": 3}}]}, [3, 4, 5, 6, 8, 10]),
    ({"$nor": [{"a.b": None}]}, [7, 8, 9]),
]


def _null_path_results(coll, filt, hint=None):
    """_ids matched by find (optionally hinted), count and a $match after an unrelated stage."""
    cursor = coll.find(filt).sort("_id", 1)
    found = [d["_id"] for d in (cursor.hint(hint) if hint else cursor)]
    check(coll.count_documents(filt) == len(found), "count of %s" % filt)
    late = [d["_id"] for d in coll.aggregate([{"$addFields": {"z": 1}}, {"$match": filt}, {"$sort": {"_id": 1}}])]
    check(late == found, "filter %s: $match after $addFields %s, find %s" % (filt, late, found))
    return found


@test()
def test_null_on_dotted_paths(env):
    coll = fresh(env, "null_paths")
    coll.insert_many(NULL_PATH_DOCS)
    for filt, expected in NULL_PATH_CASES:
        got = _null_path_results(coll, filt)
        check(got == expected, "no index, filter %s: %s, expected %s" % (filt, got, expected))
    coll.create_index("a.b", name="ab")
    plan = env.client.t.command("explain", {"find": "null_paths", "filter": {"a.b": None}})
    check(plan["queryPlanner"]["winningPlan"]["inputStage"]["indexName"] == "ab", plan["queryPlanner"])
    for filt, expected in NULL_PATH_CASES:
        for hint in (None, "ab", [("$natural", 1)]):
            if hint == "ab" and "a.b" not in filt:
                continue
            got = _null_path_results(coll, filt, hint)
            check(got == expected, "index, hint %s, filter %s: %s, expected %s" % (hint, filt, got, expected))
    res = coll.update_many({"a.b": None}, {"$set": {"hit": True}})
    check(res.matched_count == res.modified_count == len(NULL_PATH_HITS), res.raw_result)
    check(sorted(d["_id"] for d in coll.find({"hit": True})) == NULL_PATH_HITS)
    check(coll.delete_many({"a.b": {"$ne": None}}).deleted_count == 3)
    check(coll.count_documents({}) == len(NULL_PATH_HITS))


@test()
def test_collation_simple_is_accepted(env):
    coll = fresh(env, "coll_simple")
    coll.insert_many([{"_id": 1, "s": "B"}, {"_id": 2, "s": "a"}])
    simple = {"locale": "simple"}
    check([d["_id"] for d in coll.find({"s": {"$gt": "A"}}, collation=simple).sort("s", 1)] == [1, 2])
    out = list(coll.aggregate([{"$sort": {"s": 1}}], collation=simple))
    check([d["_id"] for d in out] == [1, 2], out)


@test(own=True)
def test_collation_other_locales_are_refused(env):
    coll = fresh(env, "coll_locale")
    coll.insert_one({"_id": 1, "s": "a"})
    exc = expect_error(2, lambda: list(coll.find({}, collation={"locale": "en", "strength": 2})))
    check('collation locale "en" not supported by the test server' in str(exc), str(exc))
    exc = expect_error(2, lambda: list(coll.aggregate([{"$match": {}}], collation={"locale": "fr"})))
    check('collation locale "fr" not supported by the test server' in str(exc), str(exc))
    expect_error(2, env.client.t.command, "find", "coll_locale", collation={})


# ---------------------------------------------------------------------------------------------- transactions

@test()
def test_transaction_commit(env):
    coll = fresh(env, "txc")
    coll.insert_one({"_id": 0})
    with env.client.start_session() as session:
        session.start_transaction()
        coll.insert_one({"_id": 1}, session=session)
        coll.update_one({"_id": 0}, {"$set": {"x": 1}}, session=session)
        session.commit_transaction()
    check(sorted(d["_id"] for d in env.client2.t.txc.find()) == [0, 1])
    check(env.client2.t.txc.find_one({"_id": 0}) == {"_id": 0, "x": 1})


@test()
def test_transaction_abort_leaves_nothing(env):
    coll = fresh(env, "txa")
    coll.create_index("u", unique=True)
    coll.insert_many([{"_id": i, "u": i} for i in range(5)])
    before = list(coll.find())
    with env.client.start_session() as session:
        session.start_transaction()
        coll.insert_one({"_id": 10, "u": 10}, session=session)
        coll.update_one({"_id": 1}, {"$set": {"u": 100}}, session=session)
        coll.update_one({"_id": 3}, {"$set": {"u": 1}}, session=session)  # takes the key _id 1 gave up
        coll.delete_one({"_id": 2}, session=session)
        session.abort_transaction()
    check(list(coll.find()) == before, "documents, values and natural order restored")
    check([d["_id"] for d in coll.find({"u": {"$gte": 0}}).sort("u", 1)] == [0, 1, 2, 3, 4], "index restored")
    check("txa_new" not in env.client.t.list_collection_names())


@test()
def test_transaction_isolation(env):
    coll = fresh(env, "txi")
    coll.insert_many([{"_id": 1, "v": 1}, {"_id": 2, "v": 2}])
    other = env.client2.t.txi
    with env.client.start_session() as session:
        session.start_transaction()
        coll.insert_one({"_id": 3, "v": 3}, session=session)
        coll.update_one({"_id": 1}, {"$set": {"v": 10}}, session=session)
        coll.delete_one({"_id": 2}, session=session)
        mine = {d["_id"]: d["v"] for d in coll.find({}, session=session)}
        check(mine == {1: 10, 3: 3}, mine)
        theirs = {d["_id"]: d["v"] for d in other.find()}
        check(theirs == {1: 1, 2: 2}, theirs)
        check(other.find_one({"v": 1}) == {"_id": 1, "v": 1} and other.count_documents({"v": 10}) == 0)
        exc = expect_error(112, other.update_one, {"_id": 1}, {"$set": {"v": 5}})
        check(exc.code == 112)
        session.commit_transaction()
    check({d["_id"]: d["v"] for d in other.find()} == {1: 10, 3: 3})


@test()
def test_transaction_commit_after_abort_and_repeated_commit(env):
    coll = fresh(env, "txs")
    with env.client.start_session() as session:
        session.start_transaction()
        coll.insert_one({"_id": 1}, session=session)
        session.commit_transaction()
        session.commit_transaction()  # retrying a successful commit is fine
        session.start_transaction()
        coll.insert_one({"_id": 2}, session=session)
        session.abort_transaction()
        lsid, number = session.session_id, session._server_session.transaction_id
    exc = expect_error(251, env.client.admin.command, "commitTransaction", lsid=lsid, txnNumber=number,
                       autocommit=False)
    check("TransientTransactionError" in exc.details.get("errorLabels", []))
    check(sorted(d["_id"] for d in coll.find()) == [1])


@test()
def test_error_in_transaction_aborts_it(env):
    coll = fresh(env, "txe")
    coll.insert_one({"_id": 1})
    with env.client.start_session() as session:
        session.start_transaction()
        coll.insert_one({"_id": 2}, session=session)
        expect_error(11000, coll.insert_one, {"_id": 1}, session=session)
        exc = expect_error(251, session.commit_transaction)
        check(exc.code == 251)
    check(sorted(d["_id"] for d in coll.find()) == [1])


@test()
def test_second_transaction_waits_then_write_conflict(env):
    coll = fresh(env, "txw")
    first = env.client.start_session()
    first.start_transaction()
    coll.insert_one({"_id": 1}, session=first)
    second = env.client2.start_session()
    second.start_transaction()
    started = time.time()
    exc = expect_error(112, env.client2.t.txw.insert_one, {"_id": 2}, session=second)
    check(4 <= time.time() - started < 10 and "TransientTransactionError" in exc.details.get("errorLabels", []))
    first.commit_transaction()
    second.end_session()
    first.end_session()
    check([d["_id"] for d in coll.find()] == [1])


@test()
def test_retryable_writes_are_not_transactions(env):
    coll = env.new_client(retryWrites=True).t.retry
    coll.drop()
    coll.insert_one({"_id": 1})
    coll.update_one({"_id": 1}, {"$set": {"a": 1}})
    check(env.client2.t.retry.find_one() == {"_id": 1, "a": 1})


# ---------------------------------------------------------------------------------------------- failpoints

def fail_point(env, mode, **data):
    """configureFailPoint failCommand."""
    env.client.admin.command("configureFailPoint", "failCommand", mode=mode, data=data)


@test()
def test_fail_command_error_code_times(env):
    coll = fresh(env, "fp")
    fail_point(env, {"times": 2}, failCommands=["insert"], errorCode=72, errorLabels=["SomeLabel"])
    client = env.new_client(retryWrites=False)
    for _ in range(2):
        exc = expect_error(72, client.t.fp.insert_one, {"x": 1})
        check(exc.details["errmsg"] == "Failing command via 'failCommand' failpoint")
        check(exc.details["errorLabels"] == ["SomeLabel"])
    client.t.fp.insert_one({"x": 1})
    check(coll.count_documents({}) == 1, "failed inserts applied nothing")


@test()
def test_fail_command_close_connection(env):
    coll = fresh(env, "fpc")
    fail_point(env, {"times": 1}, failCommands=["insert"], closeConnection=True)
    client = env.new_client(retryWrites=False)
    try:
        client.t.fpc.insert_one({"_id": 1})
        raise AssertionError("expected a network error")
    except AutoReconnect:
        pass
    check(coll.count_documents({}) == 0)
    client.t.fpc.insert_one({"_id": 1})
    check(coll.count_documents({}) == 1)


@test()
def test_fail_command_skip_and_off(env):
    fresh(env, "fps")
    fail_point(env, {"skip": 2}, failCommands=["find"], errorCode=2)
    env.client.t.fps.find_one()
    env.client.t.fps.find_one()
    expect_error(2, env.client.t.fps.find_one)
    expect_error(2, env.client.t.fps.find_one)
    fail_point(env, "off")
    env.client.t.fps.find_one()


@test()
def test_fail_command_block_connection(env):
    fresh(env, "fpb")
    fail_point(env, {"times": 1}, failCommands=["find"], blockConnection=True, blockTimeMS=300)
    started = time.time()
    check(env.client.t.fpb.find_one() is None)
    check(time.time() - started >= 0.3, "the find waited for blockTimeMS, then ran")


@test()
def test_fail_command_app_name(env):
    fresh(env, "fpa")
    fail_point(env, "alwaysOn", failCommands=["count"], errorCode=8, appName="victim")
    victim = env.new_client(appname="victim")
    try:
        expect_error(8, victim.t.command, "count", "fpa")
        check(env.client.t.command("count", "fpa")["n"] == 0, "other applications unaffected")
    finally:
        fail_point(env, "off")


# ---------------------------------------------------------------------------------------------- durability

RAW = CodecOptions(document_class=bson.raw_bson.RawBSONDocument)


def far_date_doc(doc_id, millis):
    """A raw document {_id, when} whose BSON date has no Python datetime (beyond year 9999)."""
    body = b"\x10_id\x00" + struct.pack("<i", doc_id) + b"\x09when\x00" + struct.pack("<q", millis)
    return bson.raw_bson.RawBSONDocument(struct.pack("<i", len(body) + 5) + body + b"\x00")


def state_of(client):
    """Everything a restart must keep: per collection its options, uuid, indexes and raw documents in
    natural order."""
    state = {}
    for db_name in client.list_database_names():
        db = client.get_database(db_name, codec_options=RAW)
        for info in client[db_name].list_collections():
            name = info["name"]
            docs = [d.raw for d in db[name].find()]
            indexes = [bson.encode(i) for i in client[db_name][name].list_indexes()]
            state[(db_name, name)] = (info["options"], info["info"]["uuid"], indexes, docs)
    return state


def journaled_server(env, name):
    """A server with --dbpath in a new directory, and a client of it."""
    server = env.start(name, dbpath=os.path.join(env.tmpdir, name + ".db"))
    return server, env.new_client(server.uri(), retryWrites=False)


def kill_and_restart(env, server, name):
    """kill -9 the server, start it again on its port and --dbpath; the new server and a client."""
    check(server.kill() == -signal.SIGKILL)
    server = env.restart(server, name)
    return server, env.new_client(server.uri(), retryWrites=False)


@test(own=True)
def test_dbpath_data_survives_kill(env):
    server, client = journaled_server(env, "durable")
    a, b = client.t.a.with_options(codec_options=CODEC), client.t.b
    a.insert_many([{"_id": i, "k": i, "s": "v%d" % i, "arr": [i, i + 1]} for i in range(50)])
    a.create_index("k", unique=True)
    a.create_index([("s", 1), ("arr", -1)], name="s_arr")
    a.update_many({"_id": {"$lt": 10}}, {"$inc": {"k": 1000}})
    a.replace_one({"_id": 20}, {"k": -20, "note": "replaced"})
    a.delete_many({"_id": {"$gte": 40}})
    a.find_one_and_update({"_id": 30}, {"$set": {"s": "fm"}})
    a.insert_one(far_date_doc(100, 9000000000000000))
    a.update_one({"_id": 100}, {"$set": {"k": 100}})
    a.insert_one({"_id": 101, "k": 101, "i64": Int64(7), "dec": Decimal128("1.10"), "bin": Binary(b"\x01", 0x80),
                  "uuid": Binary(b"0123456789abcdef", 4), "re": Regex("^x", "i"), "min": MinKey(), "max": MaxKey(),
                  "date": __import__("datetime").datetime(2024, 2, 29, 12, 30, 15, 123000), "nested": {"z": 1}})
    client.t.create_collection("capped_opts", validator={"x": {"$exists": True}})
    b.insert_many([{"_id": "x%d" % i, "g": i % 3} for i in range(10)])
    b.create_index([("g", 1)], name="g_sparse", sparse=True)
    b.drop_index("g_sparse")
    b.create_index("g")
    client.t.gone.insert_one({"_id": 1})
    client.t.gone.create_index("z")
    client.t.gone.drop()
    client.scratch.c.insert_one({"_id": 1})
    client.drop_database("scratch")
    with client.start_session() as session:
        with session.start_transaction():
            a.insert_one({"_id": 200, "k": 200}, session=session)
            a.update_one({"_id": 21}, {"$set": {"txn": True}}, session=session)
            a.delete_one({"_id": 22}, session=session)
            client.t.txn_new.insert_one({"_id": 1}, session=session)
    with client.start_session() as session:
        session.start_transaction()
        a.insert_one({"_id": 300, "k": 300}, session=session)
        a.delete_one({"_id": 23}, session=session)
        client.t.aborted_new.insert_one({"_id": 1}, session=session)
        client.t.aborted_idx.create_index("q", session=session)  # not undone by abort (nor by the journal)
        session.abort_transaction()
    before = state_of(client)
    check(("t", "gone") not in before and ("t", "aborted_new") not in before and ("t", "txn_new") in before)
    check(len(before[("t", "aborted_idx")][2]) == 2)
    check(not any(db == "scratch" for db, _ in before))
    open_session = client.start_session()
    open_session.start_transaction()
    a.insert_one({"_id": 400, "k": 400}, session=open_session)
    a.update_one({"_id": 24}, {"$set": {"open": True}}, session=open_session)
    client.t.open_new.insert_one({"_id": 1}, session=open_session)
    server, client = kill_and_restart(env, server, "durable2")
    after = state_of(client)
    check(("t", "open_new") not in after, "a collection created by the open transaction is gone")
    check(after == before, "the data after restart is the data acknowledged before the kill")
    a = client.t.a
    check(a.find_one({"_id": 400}) is None and "open" not in a.find_one({"_id": 24}), "open transaction lost")
    check(a.find_one({"_id": 200})["k"] == 200 and a.find_one({"_id": 22}) is None, "commit kept as a unit")
    expect_error(11000, a.insert_one, {"_id": 500, "k": 200})  # the unique index is rebuilt
    a.insert_one({"_id": 501, "k": 501})
    client.t.gone.insert_one({"_id": 2})
    before = state_of(client)
    server, client = kill_and_restart(env, server, "durable3")
    check(state_of(client) == before, "writes after a replay are journaled too")
    check(client.t.gone.count_documents({}) == 1, "the dropped collection was not resurrected")
    env.servers.remove(server)
    check(server.stop() == 0)


@test(own=True)
def test_dbpath_checkpoint_and_second_server_refused(env):
    server, client = journaled_server(env, "ckpt")
    coll = client.t.many
    coll.insert_many([{"_id": i, "n": 0} for i in range(600)])
    coll.update_many({}, {"$inc": {"n": 1}})
    coll.update_many({}, {"$inc": {"n": 1}})
    coll.delete_many({"_id": {"$gte": 300}})
    before = state_of(client)
    journal = os.path.join(env.tmpdir, "ckpt.db", "journal.bson")
    size = os.path.getsize(journal)
    other = subprocess.run([PYTHON, SERVER_SCRIPT, "--port", "0", "--dbpath", os.path.dirname(journal)],
                           stderr=subprocess.PIPE, timeout=15)
    check(other.returncode != 0 and b"in use" in other.stderr, "a second server on the same --dbpath refused")
    server, client = kill_and_restart(env, server, "ckpt2")
    check(os.path.getsize(journal) < size / 3, "the journal was rewritten as a checkpoint")
    check(state_of(client) == before)
    client.t.many.insert_one({"_id": 1000, "n": 5})
    before = state_of(client)
    server, client = kill_and_restart(env, server, "ckpt3")
    check(state_of(client) == before)
    env.servers.remove(server)
    check(server.stop() == 0)


@test(own=True)
def test_dbpath_truncated_journal_tail_ignored(env):
    server, client = journaled_server(env, "trunc")
    client.t.a.insert_one({"_id": 1})
    client.t.a.insert_one({"_id": 2})
    journal = os.path.join(env.tmpdir, "trunc.db", "journal.bson")
    good = os.path.getsize(journal)
    client.t.a.insert_one({"_id": 3, "pad": "x" * 100})
    check(server.kill() == -signal.SIGKILL)
    with open(journal, "r+b") as f:  # the last record cut short, as by a kill in the middle of writing it
        f.truncate(os.path.getsize(journal) - 20)
    server = env.restart(server, "trunc2")
    client = env.new_client(server.uri())
    check([d["_id"] for d in client.t.a.find()] == [1, 2], "the cut-short record is ignored")
    check(os.path.getsize(journal) == good, "and cut off the file")
    client.t.a.insert_one({"_id": 4})
    check(server.kill() == -signal.SIGKILL)
    with open(journal, "ab") as f:  # a length prefix promising more than there is
        f.write(struct.pack("<i", 1000) + b"\x02")
    server = env.restart(server, "trunc3")
    client = env.new_client(server.uri())
    check([d["_id"] for d in client.t.a.find()] == [1, 2, 4], "records after the replay are kept")
    env.servers.remove(server)
    check(server.stop() == 0)


def expect_network_error(fn, *args, **kwargs):
    """Run fn and require a network error (the server went away without replying)."""
    try:
        fn(*args, **kwargs)
    except AutoReconnect:
        return
    raise AssertionError("expected a network error, got success")


def arm_kill(client, moment, command, mode=None, **data):
    """failCommand with the test server's killServer extension."""
    client.admin.command("configureFailPoint", "failCommand", mode=mode or {"times": 1},
                         data=dict(failCommands=[command], killServer=moment, **data))


@test(own=True)
def test_kill_server_before_and_after_insert(env):
    server, client = journaled_server(env, "killins")
    client.t.k.insert_one({"_id": 0})
    expect_error(2, client.admin.command, "configureFailPoint", "failCommand", mode="alwaysOn",
                 data={"failCommands": ["insert"], "killServer": "sometimes"})
    arm_kill(client, "before", "insert")
    expect_network_error(client.t.k.insert_one, {"_id": 1})
    check(server.proc.wait(10) == 137, "the server exited at once")
    server = env.restart(server, "killins2")
    client = env.new_client(server.uri(), retryWrites=False)
    check([d["_id"] for d in client.t.k.find()] == [0], "killServer before: the insert was not applied")
    arm_kill(client, "after", "insert", errorCode=2)
    expect_network_error(client.t.k.insert_many, [{"_id": 1}, {"_id": 2}])
    check(server.proc.wait(10) == 137)
    server = env.restart(server, "killins3")
    client = env.new_client(server.uri(), retryWrites=False)
    check([d["_id"] for d in client.t.k.find()] == [0, 1, 2], "killServer after: the insert was applied")
    env.servers.remove(server)
    check(server.stop() == 0)


@test(own=True)
def test_kill_server_before_and_after_update(env):
    server, client = journaled_server(env, "killupd")
    client.t.u.insert_many([{"_id": i, "n": 0} for i in range(3)])
    victim = env.new_client(server.uri(), retryWrites=False, appname="victim")
    arm_kill(client, "before", "update", mode={"skip": 1}, appName="victim")
    client.t.u.update_one({"_id": 0}, {"$inc": {"n": 1}})  # another application: not counted, not killed
    victim.t.u.update_one({"_id": 1}, {"$inc": {"n": 1}})  # skipped
    expect_network_error(victim.t.u.update_one, {"_id": 2}, {"$inc": {"n": 1}})
    check(server.proc.wait(10) == 137)
    server = env.restart(server, "killupd2")
    client = env.new_client(server.uri(), retryWrites=False)
    check([d["n"] for d in client.t.u.find()] == [1, 1, 0], "killServer before: the update was not applied")
    arm_kill(client, "after", "update", mode="alwaysOn")
    expect_network_error(client.t.u.update_many, {}, {"$inc": {"n": 10}})
    check(server.proc.wait(10) == 137)
    server = env.restart(server, "killupd3")
    client = env.new_client(server.uri(), retryWrites=False)
    check([d["n"] for d in client.t.u.find()] == [11, 11, 10], "killServer after: the update was applied")
    # the driver retries a commit once: a short server selection timeout makes that fail fast
    quick = pymongo.MongoClient(server.uri(), serverSelectionTimeoutMS=200, retryWrites=False)
    with quick.start_session() as session:
        session.start_transaction()
        quick.t.u.insert_one({"_id": 9}, session=session)
        arm_kill(client, "after", "commitTransaction")
        expect_network_error(session.commit_transaction)
    check(server.proc.wait(10) == 137)
    server = env.restart(server, "killupd4")
    client = env.new_client(server.uri(), retryWrites=False)
    check(client.t.u.find_one({"_id": 9}) == {"_id": 9}, "killServer after commitTransaction: committed")
    env.servers.remove(server)
    check(server.stop() == 0)


# ---------------------------------------------------------------------------------------------- auth

@test(own=True)
def test_scram_sha_256(env):
    client = env.new_client(env.auth.uri("%s:%s@" % (USER, PASSWORD), "&authSource=admin&authMechanism=SCRAM-SHA-256"))
    client.t.a.insert_one({"x": 1})
    check(client.t.a.count_documents({}) == 1)


@test(own=True)
def test_scram_sha_1(env):
    client = env.new_client(env.auth.uri("%s:%s@" % (USER, PASSWORD), "&authSource=admin&authMechanism=SCRAM-SHA-1"))
    check(client.t.command("ping")["ok"] == 1)
    check(client.t.a.estimated_document_count() >= 0)


@test(own=True)
def test_wrong_password(env):
    client = env.new_client(env.auth.uri("%s:nope@" % USER, "&authSource=admin&authMechanism=SCRAM-SHA-256"))
    exc = expect_error(18, client.t.command, "ping")
    check(exc.details["codeName"] == "AuthenticationFailed")


@test(own=True)
def test_unauthenticated_commands(env):
    client = env.new_client(env.auth.uri())
    check(client.admin.command("ping")["ok"] == 1, "ping needs no authentication")
    check(client.admin.command("hello")["setName"] == "rs0")
    exc = expect_error(13, client.t.a.find_one)
    check(exc.details["codeName"] == "Unauthorized")
    reply = client.admin.command("hello", saslSupportedMechs="admin.%s" % USER)
    check(reply["saslSupportedMechs"] == ["SCRAM-SHA-256", "SCRAM-SHA-1"])


@test(own=True)
def test_libmongoc_smoke(env):
    if not shutil.which("gcc") or subprocess.call(["pkg-config", "--exists", "libmongoc-1.0"]) != 0:
        print("    (gcc or libmongoc missing: C smoke test not built)")
        return
    binary = os.path.join(env.tmpdir, "c_smoke")
    flags = subprocess.check_output(["pkg-config", "--cflags", "--libs", "libmongoc-1.0"]).decode().split()
    subprocess.check_call(["gcc", "-Wall", "-Werror", "-o", binary, os.path.join(HERE, "c_smoke.c")] + flags)
    uri = env.auth.uri("%s:%s@" % (USER, PASSWORD), "&authSource=admin")
    out = subprocess.run([binary, uri], capture_output=True, text=True, timeout=60)
    check(out.returncode == 0 and "c_smoke: ok" in out.stdout, out.stdout + out.stderr)


# ---------------------------------------------------------------------------------------------- counters

@test(own=True)
def test_counters_id_lookup_examines_one(env):
    coll = env.big()
    keys, docs = env.examined(lambda: coll.find_one({"_id": 4242}))
    check((keys, docs) == (1, 1), (keys, docs))
    keys, docs = env.examined(lambda: coll.find_one({"_id": -1}))
    check((keys, docs) == (0, 0), (keys, docs))


@test(own=True)
def test_counters_indexed_field(env):
    coll = env.big()
    keys, docs = env.examined(lambda: list(coll.find({"g": 7})))
    check((keys, docs) == (BIG // 100, BIG // 100), (keys, docs))
    keys, docs = env.examined(lambda: list(coll.find({"k": {"$in": [5, 6, 7000]}})))
    check((keys, docs) == (3, 3), (keys, docs))
    keys, docs = env.examined(lambda: list(coll.find({"k": {"$gte": 10, "$lt": 20}, "u": {"$ne": 12}})))
    check((keys, docs) == (10, 10), (keys, docs))
    keys, docs = env.examined(lambda: list(coll.find({"$and": [{"g": 3}, {"k": 1003}]})))
    check((keys, docs) == (1, 1), (keys, docs))
    found = []
    keys, docs = env.examined(lambda: found.extend(coll.find({"$or": [{"_id": 3}, {"k": {"$in": [4, 5]}}]})))
    check(len(found) == 3 and (keys, docs) == (3, 3), (keys, docs))
    keys, docs = env.examined(lambda: list(coll.find({"u": 5, "k": None})))
    check((keys, docs) == (0, 0), "null equality served by the index: %s" % ((keys, docs),))


@test(own=True)
def test_counters_unindexed_field_scans_everything(env):
    coll = env.big()
    found = []
    keys, docs = env.examined(lambda: found.extend(coll.find({"u": 77})))
    check(len(found) == 1 and (keys, docs) == (0, BIG), (keys, docs))


@test(own=True)
def test_counters_sort_by_index_with_limit(env):
    coll = env.big()
    found = []
    keys, docs = env.examined(lambda: found.extend(coll.find().sort("k", -1).limit(5)))
    check([d["k"] for d in found] == [BIG - 1 - i for i in range(5)] and (keys, docs) == (5, 5), (keys, docs))
    keys, docs = env.examined(lambda: list(coll.find({"u": 5}).hint("g_1")))
    check((keys, docs) == (BIG, BIG), "a hinted index with no usable bounds is scanned whole")
    expect_error(2, lambda: list(coll.find({"u": 5}).hint("no_such_index")))
    plan = env.client.perf.command("explain", {"find": "big", "filter": {"k": 5}})
    check(plan["queryPlanner"]["winningPlan"]["inputStage"]["indexName"] == "k_1")
    check(plan["executionStats"]["totalKeysExamined"] == 1)


@test(own=True)
def test_performance_100k(env):
    coll = env.big()
    started = time.time()
    for i in range(200):
        coll.find_one({"_id": i * 431})
    lookup_ms = (time.time() - started) / 200 * 1000
    started = time.time()
    n = sum(1 for _ in coll.find())
    scan_rate = n / (time.time() - started)
    print("    insert %d docs: %.2f s; _id lookup: %.2f ms; full scan: %.0f docs/s"
          % (BIG, env.insert_seconds, lookup_ms, scan_rate))
    check(n == BIG and env.insert_seconds < 20 and lookup_ms < 20 and scan_rate > 10000)


@test()
def test_concurrent_clients(env):
    coll = fresh(env, "conc")
    errors = []

    def worker(base):
        try:
            client = env.new_client()
            for i in range(50):
                client.t.conc.insert_one({"_id": base + i})
                client.t.conc.find_one({"_id": base + i})
        except Exception as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(n * 1000,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    check(not errors, errors)
    check(coll.count_documents({}) == 400)


@test(own=True)
def test_sigterm_exits_cleanly(env):
    server = env.start("shortlived")
    client = env.new_client(server.uri())
    client.t.x.insert_one({"_id": 1})
    env.servers.remove(server)
    check(server.stop() == 0, "exit code 0 after SIGTERM")


def main():
    """Run the selected tests and print the summary line."""
    selected = sys.argv[1:]
    tmpdir = tempfile.mkdtemp(prefix="mongo_test_server.")
    started = time.time()
    passed = failed = skipped = 0
    try:
        env = Env(tmpdir)
    except Exception:  # no server, no tests: still end with the summary line
        print("FAIL starting the server\n%s" % traceback.format_exc())
        print("server: 0 passed, 1 failed")
        return 1
    try:
        for fn, own in TESTS:
            if selected and not any(s in fn.__name__ for s in selected):
                continue
            if own and env.external:
                skipped += 1
                continue
            t0 = time.time()
            try:
                fn(env)
                passed += 1
                print("ok   %-55s %6.2fs" % (fn.__name__, time.time() - t0))
            except Exception:
                failed += 1
                print("FAIL %s\n%s" % (fn.__name__, traceback.format_exc()))
            sys.stdout.flush()
    finally:
        codes = env.close()
        shutil.rmtree(tmpdir, ignore_errors=True)
    if any(code != 0 for code in codes):
        failed += 1
        print("FAIL server shutdown exit codes %s" % codes)
    print("total time %.1f s" % (time.time() - started))
    print("server: %d passed, %d failed%s" % (passed, failed, ", %d skipped" % skipped if skipped else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
