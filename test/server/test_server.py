#!/usr/bin/python3
"""Tests of the MongoDB test server, driven by pymongo (and libmongoc through c_smoke.c when gcc is there).

Run: /usr/bin/python3 test/server/test_server.py [--part=K/N] [NAME_SUBSTRING...]
(--part=K/N runs every Nth test from the Kth, so that N processes share the suite; test/run runs two.)
Starts its own server instances on free ports; exits non-zero on any failure and ends with a line
`server: N passed, M failed`. With MONGO_URI set, the tests that need no fresh instance of this server
run against that server instead.
"""

import datetime
import glob
import math
import os
import random
import re
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
import uuid

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
from bson.son import SON
from bson.timestamp import Timestamp
from pymongo.errors import (AutoReconnect, BulkWriteError, DuplicateKeyError, OperationFailure, WriteConcernError,
                            WriteError)

import test_cluster
import test_replset

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

    def __init__(self, tmpdir, name, user=None, password=None, dbpath=None, port=0, extra=()):
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
        args += list(extra)
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.time() + 15
        while not os.path.exists(self.port_file):
            if self.proc.poll() is not None or time.time() > deadline:
                raise RuntimeError("server did not start: %s" % self.proc.stderr.read().decode())
            time.sleep(0.05)
        with open(self.port_file) as f:
            self.ports = [int(line) for line in f.read().split()]  # one per member (--members)
        self.port = self.ports[0]

    def uri(self, credentials="", options=""):
        """A replica-set URI for this server."""
        return "mongodb://%s127.0.0.1:%d/?replicaSet=rs0%s" % (credentials, self.port, options)

    def stop(self):
        """SIGTERM; returns the exit code (0 = clean shutdown).  Up to 30 s: a busy machine (the suite runs
        parts side by side) slowed the shutdown of the server holding 100,000 documents past 10 s."""
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return -9

    def kill(self):
        """SIGKILL, as a crash would; returns once the process is gone."""
        self.proc.kill()
        return self.proc.wait(10)


def print_server_tracebacks(tmpdir, since):
    """After a failed test: the servers' own tracebacks (a command that failed on an unexpected exception,
    which its client sees only as an error message) from the logs written since the test began."""
    shown = 0
    for path in sorted(glob.glob(os.path.join(tmpdir, "*.log"))):
        if os.path.getmtime(path) < since:
            continue
        with open(path, errors="replace") as f:
            lines = f.read().split("\n")
        for i, line in enumerate(lines):
            if "failed: Traceback" in line and shown < 3:
                shown += 1
                print("-- %s:\n%s" % (os.path.basename(path), "\n".join(lines[i:i + 30])))


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

    def start(self, name, user=None, password=None, dbpath=None, port=0, extra=()):
        """Start another server instance (`extra`: more command-line options)."""
        server = ServerProcess(self.tmpdir, name, user, password, dbpath, port, extra)
        self.servers.append(server)
        return server

    def restart(self, server, name):
        """Start `server` again on its port with its --dbpath and other options (after it was killed or
        exited)."""
        self.servers.remove(server)
        at = server.proc.args.index("--dbpath")
        return self.start(name, dbpath=server.proc.args[at + 1], port=server.port, extra=server.proc.args[at + 2:])

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

    def work_seconds(self):
        """A clock of the work done: the CPU seconds of the main server and of this client, so that a busy
        machine (the test suite runs parts side by side) does not slow it; wall time for an external
        server."""
        if self.main is None:
            return time.time()
        with open("/proc/%d/stat" % self.main.proc.pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK") + time.process_time()

    def big(self):
        """Collection perf.big with BIG documents {_id, k (indexed), u (unindexed), g: _id % 100}."""
        if self._big is None:
            coll = self.client.perf.big
            coll.drop()
            started = self.work_seconds()
            coll.insert_many([{"_id": i, "k": i, "u": i, "g": i % 100, "s": "item%06d" % i} for i in range(BIG)])
            self.insert_seconds = self.work_seconds() - started
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
def test_group_accumulators_as_mongod(env):
    """$group's $sum, $min, $max and the expressions the FDW pushes follow mongod, not mongomock (README.md)."""
    from bson.decimal128 import Decimal128
    from bson.int64 import Int64
    coll = fresh(env, "grp")
    coll.insert_many([{"_id": 1, "g": 1, "v": 5}, {"_id": 2, "g": 1.0, "v": None}, {"_id": 3, "v": True},
                      {"_id": 4, "g": None, "v": Int64(2 ** 62)}, {"_id": 5, "g": None, "v": Int64(2 ** 62)},
                      {"_id": 6, "g": 2, "v": 0}, {"_id": 7, "g": 2, "v": ""}])
    counted = {"$sum": {"$cond": [{"$eq": [{"$ifNull": ["$v", None]}, None]}, 0, 1]}}
    out = list(coll.aggregate([{"$match": {"_id": {"$ne": 7}}},
                               {"$group": {"_id": {"g": {"$ifNull": ["$g", None]}}, "n": {"$sum": 1},
                                           "s": {"$sum": "$v"}, "d": {"$sum": {"$toDecimal": "$v"}},
                                           "c": counted, "lo": {"$min": "$v"}, "hi": {"$max": "$v"}}},
                               {"$sort": {"_id.g": 1}}]))
    # 1 and 1.0 are one group; null and missing another; booleans are no numbers to $sum; a long sum past
    # int64 becomes a double, a Decimal128 sum stays exact; $toDecimal(null) is null; $min/$max skip null
    check(out[0] == {"_id": {"g": None}, "n": 3, "s": float(2 ** 63), "d": Decimal128(str(2 ** 63 + 1)),
                     "c": 3, "lo": Int64(2 ** 62), "hi": True}, out[0])
    check(out[1] == {"_id": {"g": 1}, "n": 2, "s": 5, "d": Decimal128("5"), "c": 1, "lo": 5, "hi": 5}, out[1])
    check(out[2]["s"] == 0 and out[2]["lo"] == 0 and out[2]["hi"] == 0 and out[2]["c"] == 1, out[2])
    check(isinstance(out[2]["s"], int) and not isinstance(out[2]["s"], Int64), out[2])
    check(len(out) == 3, out)
    # no documents: no group, even for _id null
    check(list(coll.aggregate([{"$match": {"_id": 0}}, {"$group": {"_id": None, "n": {"$sum": 1}}}])) == [])
    # only nulls: $sum 0, $min null
    none = list(coll.aggregate([{"$match": {"_id": 2}}, {"$group": {"_id": None, "s": {"$sum": "$v"},
                                                                    "m": {"$min": "$v"}}}]))
    check(none == [{"_id": None, "s": 0, "m": None}], none)
    # int32 sums past int32 are longs
    coll.insert_many([{"_id": 10, "g": 9, "v": 2 ** 31 - 1}, {"_id": 11, "g": 9, "v": 2 ** 31 - 1}])
    big = list(coll.aggregate([{"$match": {"g": 9}}, {"$group": {"_id": None, "s": {"$sum": "$v"}}}]))
    check(big == [{"_id": None, "s": 2 ** 32 - 2}] and isinstance(big[0]["s"], Int64), big)
    # $convert's onError and onNull
    conv = {"$convert": {"input": "$v", "to": "decimal", "onError": Decimal128("-1"), "onNull": Decimal128("7")}}
    got = list(coll.aggregate([{"$match": {"_id": {"$in": [2, 3, 7]}}}, {"$group": {"_id": None, "d": {"$sum": conv}}}]))
    check(got == [{"_id": None, "d": Decimal128("7")}], got)  # 7 (null) + 1 (true) - 1 ("" fails)
    # an ObjectId as its hex string groups with that string ($type, $toString)
    from bson.objectid import ObjectId
    oid = ObjectId("5f43a1b2c3d4e5f607182930")
    coll.insert_many([{"_id": 20, "g": 7, "t": oid}, {"_id": 21, "g": 7, "t": str(oid)}, {"_id": 22, "g": 7}])
    as_text = {"$cond": [{"$eq": [{"$type": "$t"}, "objectId"]}, {"$toString": "$t"}, "$t"]}
    by_text = list(coll.aggregate([{"$match": {"g": 7}}, {"$group": {"_id": {"k": {"$ifNull": [as_text, None]}},
                                                                      "n": {"$sum": 1}}}, {"$sort": {"n": -1}}]))
    check(by_text == [{"_id": {"k": str(oid)}, "n": 2}, {"_id": {"k": None}, "n": 1}], by_text)
    # a sum of integral doubles past 2^53 through $convert to long is exact; $type names them
    coll.insert_many([{"_id": 30, "g": 6, "v": float(2 ** 62 + 2 ** 10)}, {"_id": 31, "g": 6, "v": 1.5}])
    exact = {"$convert": {"input": {"$cond": [{"$eq": [{"$type": "$v"}, "double"]},
                                              {"$convert": {"input": "$v", "to": "long", "onError": None}}, "$v"]},
                          "to": "decimal"}}
    frac = {"$cond": [{"$and": [{"$in": [{"$type": "$v"}, ["double", "decimal"]]}, {"$ne": ["$v", {"$trunc": "$v"}]}]},
                      1, 0]}
    got = list(coll.aggregate([{"$match": {"g": 6}}, {"$group": {"_id": None, "s": {"$sum": exact},
                                                                 "f": {"$sum": frac}}}]))
    check(got == [{"_id": None, "s": Decimal128(str(2 ** 62 + 2 ** 10 + 1)), "f": 1}], got)
    # a string is no decimal: ConversionFailure, as mongod
    expect_error(241, lambda: list(coll.aggregate([{"$match": {"_id": 7}},
                                                   {"$group": {"_id": None, "d": {"$sum": {"$toDecimal": "$v"}}}}])))


@test()
def test_set_window_fields_whole_partition(env):
    """$setWindowFields without partitionBy/sortBy gives every document the $min/$max/$sum of all, as mongod;
    other forms are refused (README.md)."""
    coll = fresh(env, "win")
    coll.insert_many([{"_id": 1, "g": 1, "v": 5}, {"_id": 2, "g": 1, "v": None}, {"_id": 3, "g": 2, "v": 2.5},
                      {"_id": 4, "g": 3}])
    out = list(coll.aggregate([{"$group": {"_id": {"g": "$g"}, "lo": {"$min": "$v"}, "n": {"$sum": 1}}},
                               {"$setWindowFields": {"output": {"lo": {"$min": "$lo"}, "hi": {"$max": "$_id.g"},
                                                                "t": {"$sum": "$n"}}}},
                               {"$sort": {"_id.g": -1}}, {"$limit": 2}]))
    check(out == [{"_id": {"g": 3}, "lo": 2.5, "n": 1, "hi": 3, "t": 4},
                  {"_id": {"g": 2}, "lo": 2.5, "n": 1, "hi": 3, "t": 4}], out)
    check(list(coll.aggregate([{"$match": {"_id": 0}},
                               {"$setWindowFields": {"output": {"t": {"$sum": 1}}}}])) == [])
    expect_error(115, lambda: list(coll.aggregate([{"$setWindowFields": {"sortBy": {"v": 1},
                                                                         "output": {"r": {"$rank": {}}}}}])))


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


IN_FAST_VALUES = [1, 2, 2.0, 2.5, Int64(3), True, False, 0, -0.0, "a", "A", "", None, float("nan"),
                  Decimal128("2"), Decimal128("NaN"), [1, "a"], {"x": 1}, [[1]], [None], 2 ** 53 + 1,
                  float(2 ** 53)]


@test()
def test_in_lists_match_as_equalities(env):
    """The matcher looks `$in` lists up in a set (matcher._in_set): every `{f: {$in: L}}` and `{$or:
    [{f: {$in: L}}, ...]}` finds what the same equalities joined by $or find, on top-level and dotted
    paths, through arrays and across numeric types, bools, NaN and Decimal128."""
    coll = fresh(env, "in_fast")
    rnd = random.Random(7)
    docs = []
    for i in range(300):
        v = rnd.choice(IN_FAST_VALUES)
        shape = i % 4
        doc = {"_id": i, "f": v} if shape == 0 else \
            {"_id": i, "a": {"b": v}} if shape == 1 else \
            {"_id": i, "a": [{"b": v}, {"b": rnd.choice(IN_FAST_VALUES)}]} if shape == 2 else \
            {"_id": i, "f": [v, rnd.choice(IN_FAST_VALUES)], "a": 5}
        docs.append(doc)
    coll.insert_many(docs)
    keyable = [v for v in IN_FAST_VALUES if v is not None and not isinstance(v, (list, dict))
               and v == v and not isinstance(v, Decimal128)]
    for _ in range(60):
        path = rnd.choice(["f", "a.b"])
        values = rnd.sample(keyable, rnd.randint(1, 4))
        got = sorted(d["_id"] for d in coll.find({path: {"$in": values}}))
        want = sorted(d["_id"] for d in coll.find({"$or": [{path: {"$eq": v}} for v in values]}))
        check(got == want, "%s $in %s: %s, as equalities %s" % (path, values, got, want))
        both = {"$or": [{"f": {"$in": values}}, {"a.b": {"$in": values}}]}
        got = sorted(d["_id"] for d in coll.find(both))
        want = sorted(d["_id"] for d in coll.find({"$or": [{p: {"$eq": v}} for p in ("f", "a.b")
                                                           for v in values]}))
        check(got == want, "$or of $in %s: %s, as equalities %s" % (values, got, want))


@test(own=True)
def test_recent_commands_record_read_preference(env):
    client = env.new_client(env.uri + "&readPreference=secondaryPreferred", appname="rp-test")
    coll = client.t.recent
    coll.drop()
    coll.insert_one({"_id": 1})
    env.client.admin.command("recentCommands", clear=True)
    list(coll.find({"_id": 1}))
    list(coll.with_options(read_preference=pymongo.ReadPreference.PRIMARY).find({"_id": 1}, limit=1))
    got = [c for c in env.client.admin.command("recentCommands")["commands"] if c["appName"] == "rp-test"]
    finds = [c for c in got if c["command"] == "find"]
    check(len(finds) == 2, got)
    check(finds[0]["readPreference"] == {"mode": "secondaryPreferred"}, finds[0])
    check(finds[0]["db"] == "t" and finds[0]["collection"] == "recent" and finds[0]["filter"] == {"_id": 1})
    check(finds[1]["readPreference"] in (None, {"mode": "primary"}) and finds[1]["limit"] == 1, finds[1])
    check(not finds[0]["inTransaction"])
    check(env.client.admin.command("recentCommands", clear=True)["commands"], "clear returns the records")
    check(env.client.admin.command("recentCommands")["commands"] == [], "the ring is empty after clear")
    client.close()


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
    exc = expect_error(2, lambda: list(coll.find({}, collation={"locale": "en", "strength": 1})))
    check('collation {locale: "en", strength: 1} not supported by the test server' in str(exc), str(exc))
    exc = expect_error(2, lambda: list(coll.aggregate([{"$match": {}}], collation={"locale": "fr"})))
    check('collation {locale: "fr"} not supported by the test server' in str(exc), str(exc))
    expect_error(2, env.client.t.command, "find", "coll_locale", collation={})
    expect_error(2, coll.update_one, {"_id": 1}, {"$set": {"x": 1}}, collation={"locale": "de"})
    env.client.t.drop_collection("coll_locale_create")
    expect_error(2, env.client.t.command, "create", "coll_locale_create", collation={"locale": "fr"})
    check("coll_locale_create" not in env.client.t.list_collection_names())


CI = {"locale": "en", "strength": 2}


def ci_collection(env, name):
    """A collection of database `t` created with the case-insensitive default collation."""
    env.client.t.drop_collection(name)
    env.client.t.command("create", name, collation=CI)
    return env.client.t[name]


@test(own=True)
def test_collation_default_is_stored_and_inherited(env):
    coll = ci_collection(env, "coll_ci_opts")
    info = next(env.client.t.list_collections(filter={"name": "coll_ci_opts"}))
    full = info["options"]["collation"]
    check(full["locale"] == "en" and full["strength"] == 2 and full["caseLevel"] is False, info)
    check(info["idIndex"]["collation"] == full, info)
    coll.create_index("a")
    coll.create_index("b", collation={"locale": "simple"})
    indexes = {i["name"]: i for i in coll.list_indexes()}
    check(indexes["_id_"]["collation"] == full and indexes["a_1"]["collation"] == full, indexes)
    check("collation" not in indexes["b_1"], indexes["b_1"])
    # the fully specified form is accepted back as a query's collation
    coll.insert_one({"_id": "x"})
    check([d["_id"] for d in coll.find({"_id": "X"}, collation=full)] == ["x"])
    env.client.t.drop_collection("coll_simple_opts")
    env.client.t.command("create", "coll_simple_opts", collation={"locale": "simple"})
    info = next(env.client.t.list_collections(filter={"name": "coll_simple_opts"}))
    check("collation" not in info["options"] and "collation" not in info["idIndex"], info)


@test(own=True)
def test_collation_case_insensitive_matching(env):
    coll = ci_collection(env, "coll_ci_match")
    coll.insert_many([{"_id": "abc", "s": "Straße", "n": 1}, {"_id": 2, "s": "b", "t": ["X", "y"]}])
    check([d["_id"] for d in coll.find({"_id": "ABC"})] == ["abc"])
    check([d["_id"] for d in coll.find({"_id": {"$in": ["aBc", 7]}})] == ["abc"])
    check([d["_id"] for d in coll.find({"s": "STRASSE"})] == ["abc"], "case folds compare equal")
    check([d["_id"] for d in coll.find({"t": "x"})] == [2])
    check([d["_id"] for d in coll.find({"s": {"$type": "string"}, "_id": {"$type": "int"}})] == [2])
    check([d["_id"] for d in coll.find({"s": {"$gt": "A"}, "n": 1})] == ["abc"])
    check(list(coll.find({"_id": "ABC"}, collation={"locale": "simple"})) == [], "simple is binary")
    check([d["_id"] for d in coll.find({"_id": "abc"}, collation={"locale": "simple"})] == ["abc"])
    check([d["_id"] for d in coll.find({"_id": {"$regex": "^ABC$"}}, collation={"locale": "simple"})] == [])
    expect_error(115, lambda: list(coll.find({"_id": {"$regex": "^abc$"}})))
    expect_error(115, lambda: list(coll.find({"$or": [{"s": re.compile("x")}]})))
    # _id is unique under the collection's collation, as on mongod
    expect_error(11000, coll.insert_one, {"_id": "ABC"})
    check(coll.update_one({"_id": "ABC"}, {"$set": {"u": 1}}).modified_count == 1)
    check(coll.update_one({"_id": "ABC"}, {"$set": {"u": 2}},
                          collation={"locale": "simple"}).matched_count == 0)
    check(coll.find_one_and_update({"_id": "aBC"}, {"$set": {"u": 3}})["_id"] == "abc")
    check(coll.count_documents({"_id": "ABC"}) == 1)
    check(coll.delete_one({"_id": "ABC"}, collation={"locale": "simple"}).deleted_count == 0)
    check(coll.delete_one({"_id": "ABC"}).deleted_count == 1)
    plain = fresh(env, "coll_plain_ids")
    plain.insert_many([{"_id": "abc"}, {"_id": "ABC"}])
    check(len(list(plain.find({"_id": "abc"}, collation=CI))) == 2, "a query collation on a plain collection")


@test(own=True)
def test_collation_index_serves_only_its_collation(env):
    coll = ci_collection(env, "coll_ci_index")
    coll.insert_many([{"_id": "k%03d" % i, "v": "V%d" % (i % 10)} for i in range(200)])
    coll.create_index("v")
    simple = {"locale": "simple"}
    got = []
    keys, docs = env.examined(lambda: got.extend(coll.find({"_id": "K007"})))
    check([d["_id"] for d in got] == ["k007"] and (keys, docs) == (1, 1), (got, keys, docs))
    keys, docs = env.examined(lambda: list(coll.find({"_id": "k007"}, collation=simple)))
    check(keys == 0 and docs == 200, "a simple query cannot use the case-insensitive _id index: %s" % docs)
    keys, docs = env.examined(lambda: list(coll.find({"v": "v3"})))
    check(keys == 20 and docs == 20, (keys, docs))
    keys, docs = env.examined(lambda: list(coll.find({"v": "V3"}, collation=simple)))
    check(docs == 200, docs)
    explained = env.client.t.command("explain", {"find": "coll_ci_index", "filter": {"_id": "K1"}})
    check(explained["queryPlanner"]["winningPlan"]["inputStage"]["indexName"] == "_id_", explained)
    explained = env.client.t.command("explain", {"find": "coll_ci_index", "filter": {"_id": "k1"},
                                                 "collation": simple})
    check(explained["queryPlanner"]["winningPlan"]["stage"] == "COLLSCAN", explained)
    plain = fresh(env, "coll_plain_index")
    plain.insert_many([{"_id": i} for i in range(50)])
    keys, docs = env.examined(lambda: list(plain.find({"_id": 7}, collation=CI)))
    check(docs == 50, "a case-insensitive query cannot use a simple index: %s" % docs)


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
        started = time.time()  # a write outside the transaction waits for it (here until maxTimeMS)
        expect_error(50, other.database.command, "update", "txi", updates=[{"q": {"_id": 1}, "u": {"v": 5}}],
                     maxTimeMS=300)
        check(0.25 < time.time() - started < 3, "waited %.2f s" % (time.time() - started))
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


def two_transactions(env):
    """Two sessions of two clients, each with a transaction started (pymongo sends nothing yet)."""
    first, second = env.client.start_session(), env.client2.start_session()
    first.start_transaction()
    second.start_transaction()
    return first, second


def expect_conflict(fn, *args, **kwargs):
    """WriteConflict (112) with TransientTransactionError, at once."""
    started = time.time()
    exc = expect_error(112, fn, *args, **kwargs)
    check("TransientTransactionError" in exc.details.get("errorLabels", []), exc.details)
    check(time.time() - started < 1.0, "the conflict took %.2f s" % (time.time() - started))


@test()
def test_concurrent_transactions_side_by_side(env):
    """Transactions of two sessions that write different documents are open at once, neither waits,
    and they commit in any order; each sees its own writes and not the other's."""
    coll = fresh(env, "txw")
    coll.insert_many([{"_id": i, "v": i} for i in range(1, 5)])
    mine, theirs = coll, env.client2.t.txw
    first, second = two_transactions(env)
    started = time.time()
    mine.insert_one({"_id": 10}, session=first)
    theirs.insert_one({"_id": 20}, session=second)
    mine.update_one({"_id": 1}, {"$set": {"v": 100}}, session=first)
    theirs.update_one({"_id": 2}, {"$set": {"v": 200}}, session=second)
    mine.delete_one({"_id": 3}, session=first)
    theirs.delete_one({"_id": 4}, session=second)
    check(sorted((d["_id"], d.get("v")) for d in mine.find({}, session=first)) ==
          [(1, 100), (2, 2), (4, 4), (10, None)], "the first sees its writes only")
    check(sorted((d["_id"], d.get("v")) for d in theirs.find({}, session=second)) ==
          [(1, 1), (2, 200), (3, 3), (20, None)], "the second sees its writes only")
    check(sorted(d["_id"] for d in env.client2.t.txw.find()) == [1, 2, 3, 4], "outside: neither")
    second.commit_transaction()  # the later one commits first
    check(sorted(d["_id"] for d in mine.find({}, session=first)) == [1, 2, 4, 10], "first's snapshot stays")
    first.commit_transaction()
    check(time.time() - started < 2, "nothing waited: %.2f s" % (time.time() - started))
    check(sorted((d["_id"], d.get("v")) for d in coll.find()) == [(1, 100), (2, 200), (10, None), (20, None)])
    first.end_session()
    second.end_session()


def conflict_case(env, name, setup, first_op, second_op, expected):
    """The first writer of two open transactions wins (jstests/core/txns/transactions_write_conflicts.js):
    the second's write gets WriteConflict at once and aborts it (its commit: NoSuchTransaction, its
    earlier write gone); the first commits. `expected`: the documents after."""
    coll = fresh(env, name)
    coll.database.create_collection(name)  # (two transactions creating it: the second commit would fail)
    if setup:
        coll.insert_many(setup)
    mine, theirs = coll, env.client2.t[name]
    first, second = two_transactions(env)
    theirs.insert_one({"_id": "second's own"}, session=second)
    first_op(mine, first)
    expect_conflict(second_op, theirs, second)
    exc = expect_error(251, second.commit_transaction)
    check("TransientTransactionError" in exc.details.get("errorLabels", []))
    first.commit_transaction()
    docs = sorted(coll.find(), key=lambda d: str(d["_id"]))
    check(docs == expected, "%s: %s" % (name, docs))
    first.end_session()
    second.end_session()


@test()
def test_concurrent_transactions_write_conflicts(env):
    one = [{"_id": 1, "v": 1}]
    conflict_case(env, "wcu", one, lambda c, s: c.update_one({"_id": 1}, {"$set": {"v": 10}}, session=s),
                  lambda c, s: c.update_one({"_id": 1}, {"$set": {"v": 20}}, session=s), [{"_id": 1, "v": 10}])
    conflict_case(env, "wcd", one, lambda c, s: c.update_one({"_id": 1}, {"$set": {"v": 10}}, session=s),
                  lambda c, s: c.delete_one({"_id": 1}, session=s), [{"_id": 1, "v": 10}])
    conflict_case(env, "wcx", one, lambda c, s: c.delete_one({"_id": 1}, session=s),
                  lambda c, s: c.find_one_and_update({"_id": 1}, {"$set": {"v": 2}}, session=s), [])
    # inserts of one _id: the second gets WriteConflict (not DuplicateKey), as on mongod
    conflict_case(env, "wci", None, lambda c, s: c.insert_one({"_id": 5, "by": 1}, session=s),
                  lambda c, s: c.insert_one({"_id": 5, "by": 2}, session=s), [{"_id": 5, "by": 1}])
    conflict_case(env, "wcp", None, lambda c, s: c.update_one({"_id": 5}, {"$set": {"by": 1}}, upsert=True,
                                                              session=s),
                  lambda c, s: c.update_one({"_id": 5}, {"$set": {"by": 2}}, upsert=True, session=s),
                  [{"_id": 5, "by": 1}])
    # a multi-document write meets the other's document after writing some of its own
    four = [{"_id": i} for i in range(1, 5)]
    conflict_case(env, "wcm", four, lambda c, s: c.update_many({"_id": {"$lte": 3}}, {"$set": {"a": 1}}, session=s),
                  lambda c, s: c.delete_many({"_id": {"$gte": 2}}, session=s),
                  [{"_id": 1, "a": 1}, {"_id": 2, "a": 1}, {"_id": 3, "a": 1}, {"_id": 4}])

    def unique(c):
        c.create_index("u", unique=True)
    # a unique key the other took, or gave up
    coll = fresh(env, "wck")
    unique(coll)
    coll.insert_one({"_id": 1, "u": 1})
    first, second = two_transactions(env)
    coll.insert_one({"_id": 2, "u": 7}, session=first)
    expect_conflict(env.client2.t.wck.insert_one, {"_id": 3, "u": 7}, session=second)
    first.abort_transaction()
    first, second = two_transactions(env)
    coll.delete_one({"_id": 1}, session=first)
    expect_conflict(env.client2.t.wck.insert_one, {"_id": 3, "u": 1}, session=second)
    first.abort_transaction()
    check(list(coll.find()) == [{"_id": 1, "u": 1}], "both aborted: nothing changed")
    # a transaction whose snapshot is older than the other's commit (T2StartsSecondAndWins)
    coll = fresh(env, "wcs")
    coll.insert_one({"_id": 1, "v": 1})
    first, second = two_transactions(env)
    check(coll.find_one({"_id": 1}, session=first) == {"_id": 1, "v": 1})  # the first's snapshot
    env.client2.t.wcs.update_one({"_id": 1}, {"$set": {"v": 2}}, session=second)
    second.commit_transaction()
    check(coll.find_one({"_id": 1}, session=first) == {"_id": 1, "v": 1}, "it reads its snapshot")
    expect_conflict(coll.update_one, {"_id": 1}, {"$set": {"v": 3}}, session=first)
    expect_error(251, first.commit_transaction)
    check(coll.find_one({"_id": 1}) == {"_id": 1, "v": 2})
    # two transactions that create one collection: the second commit fails (create_collection_parallel.js)
    fresh(env, "wcc")
    first, second = two_transactions(env)
    env.client.t.wcc.insert_one({"_id": 1}, session=first)
    env.client2.t.wcc.insert_one({"_id": 2}, session=second)
    second.commit_transaction()
    expect_error(112, first.commit_transaction)
    check(list(env.client.t.wcc.find()) == [{"_id": 2}])
    # an aborted writer leaves no conflict behind
    first, second = two_transactions(env)
    env.client2.t.wcs.update_one({"_id": 1}, {"$set": {"v": 5}}, session=second)
    second.abort_transaction()
    coll.update_one({"_id": 1}, {"$set": {"v": 6}}, session=first)
    first.commit_transaction()
    check(coll.find_one({"_id": 1}) == {"_id": 1, "v": 6})


@test()
def test_concurrent_transactions_snapshot_reads(env):
    """A transaction reads its snapshot, taken at its first command: neither another transaction's writes
    (open or committed after it) nor writes outside transactions since, through any access path."""
    coll = fresh(env, "txr")
    coll.create_index("k")
    coll.insert_many([{"_id": i, "k": i} for i in range(1, 6)])
    first, second = two_transactions(env)
    theirs = env.client2.t.txr
    theirs.update_one({"_id": 1}, {"$set": {"k": 10}}, session=second)  # open, uncommitted
    theirs.delete_one({"_id": 2}, session=second)
    theirs.insert_one({"_id": 6, "k": 3}, session=second)
    view = lambda: [(d["_id"], d["k"]) for d in coll.find({"k": {"$lte": 10}}, session=first).sort("k", 1)]  # noqa: E731
    snapshot = [(1, 1), (2, 2), (3, 3), (4, 4), (5, 5)]
    check(view() == snapshot, view())
    second.commit_transaction()
    env.client2.t.txr.update_one({"_id": 3}, {"$set": {"k": 0}})  # outside a transaction, after the snapshot
    env.client2.t.txr.insert_one({"_id": 7, "k": 7})
    check(view() == snapshot, "committed later: not seen %s" % view())
    check(coll.count_documents({}, session=first) == 5)
    check(coll.find_one({"k": 10}, session=first) is None and coll.find_one({"_id": 2}, session=first) is not None)
    coll.update_one({"_id": 4}, {"$set": {"k": 40}}, session=first)  # its own write it sees
    check(coll.find_one({"_id": 4}, session=first)["k"] == 40)
    first.commit_transaction()
    check(sorted((d["_id"], d["k"]) for d in coll.find()) == [(1, 10), (3, 0), (4, 40), (5, 5), (6, 3), (7, 7)])
    first.end_session()
    second.end_session()


def in_thread(fn):
    """Run fn() in a thread; returns (thread, outcome) where outcome gets "result" or "error" and "at"."""
    outcome = {}

    def run():
        try:
            outcome["result"] = fn()
        except Exception as exc:  # noqa: BLE001 (checked by the caller)
            outcome["error"] = exc
        outcome["at"] = time.time()
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, outcome


@test()
def test_write_outside_transaction_waits_for_it(env):
    """A write outside a transaction to a document (or unique key) an open transaction wrote waits until
    the transaction commits or aborts, then runs (mongod retries it on the write conflict)."""
    coll = fresh(env, "txb")
    coll.create_index("u", unique=True)
    coll.insert_many([{"_id": i, "v": 0, "u": i} for i in range(1, 6)])
    other = env.new_client(retryWrites=False).t.txb
    for end in ("commit", "abort"):
        coll.update_many({}, {"$set": {"v": 0}})
        session = env.client.start_session()
        session.start_transaction()
        coll.update_one({"_id": 3}, {"$inc": {"v": 10}}, session=session)
        single, single_out = in_thread(lambda: other.update_one({"_id": 3}, {"$inc": {"v": 1}}).modified_count)
        multi, multi_out = in_thread(lambda: other.update_many({}, {"$inc": {"v": 100}}).modified_count)
        time.sleep(0.6)
        check(single.is_alive() and multi.is_alive(), "%s: the writes wait %s %s" % (end, single_out, multi_out))
        check(coll.find_one({"_id": 1})["v"] in (0, 100), "the multi-update went as far as the held document")
        ended = time.time()
        getattr(session, end + "_transaction")()
        single.join(5)
        multi.join(5)
        check(single_out.get("result") == 1 and multi_out.get("result") == 5, (end, single_out, multi_out))
        check(single_out["at"] - ended < 2 and multi_out["at"] - ended < 2, "they run as soon as it ends")
        got = {d["_id"]: d["v"] for d in coll.find()}
        check(got == {1: 100, 2: 100, 3: (10 if end == "commit" else 0) + 1 + 100, 4: 100, 5: 100},
              "%s: each document updated once by the update_many, and after the transaction: %s" % (end, got))
        session.end_session()
    # a unique key the transaction took: after its commit the outside insert is a duplicate, after an abort
    # it goes in
    for end, code in (("commit", 11000), ("abort", None)):
        session = env.client.start_session()
        session.start_transaction()
        coll.insert_one({"_id": 50, "u": 50}, session=session)
        inserter, out = in_thread(lambda: other.insert_one({"_id": 51, "u": 50}))
        time.sleep(0.4)
        check(inserter.is_alive(), "the insert waits")
        getattr(session, end + "_transaction")()
        inserter.join(5)
        if code is None:
            check("error" not in out and coll.find_one({"_id": 51}) is not None, out)
            coll.delete_one({"_id": 51})
        else:
            check(getattr(out.get("error"), "code", None) == code, out)
            coll.delete_one({"_id": 50})
        session.end_session()
    # the wait ends at the transaction's end of life: the reaper aborts it
    server = env.start("txb_life", extra=["--txn-lifetime", "1"])
    client = env.new_client(server.uri(), retryWrites=False)
    client.t.b.insert_one({"_id": 1, "v": 0})
    session = client.start_session()
    session.start_transaction()
    client.t.b.update_one({"_id": 1}, {"$set": {"v": 1}}, session=session)
    started = time.time()
    client.t.b.update_one({"_id": 1}, {"$inc": {"v": 5}})
    check(0.5 < time.time() - started < 4, "waited %.2f s" % (time.time() - started))
    check(client.t.b.find_one({"_id": 1})["v"] == 5, "the expired transaction was aborted")
    expect_error(251, session.commit_transaction)
    env.servers.remove(server)
    check(server.stop() == 0)


@test()
def test_concurrent_transactions_commit_order(env):
    """Change streams and the journal see each transaction whole at its commit, in commit order, whatever
    the order the transactions started or wrote in."""
    coll = fresh(env, "txo")
    coll.database.create_collection("txo")
    with coll.watch(max_await_time_ms=200) as stream:
        first, second = two_transactions(env)
        coll.insert_one({"_id": "a1"}, session=first)
        env.client2.t.txo.insert_one({"_id": "b1"}, session=second)
        coll.insert_one({"_id": "a2"}, session=first)
        env.client2.t.txo.insert_one({"_id": "b2"}, session=second)
        check(stream.try_next() is None, "nothing before a commit")
        second.commit_transaction()
        first.commit_transaction()
        events = drain(stream, 4)
    ids = [e["documentKey"]["_id"] for e in events]
    check(ids == ["b1", "b2", "a1", "a2"], "commit order: %s" % ids)
    times = [e["clusterTime"] for e in events]
    check(times[0] == times[1] < times[2] == times[3], times)
    check(events[0]["lsid"] == events[1]["lsid"] != events[2]["lsid"], "each with its session")
    first.end_session()
    second.end_session()


@test(own=True)
def test_dbpath_concurrent_transactions(env):
    """With --dbpath, each committed transaction is one record at its commit, an aborted one nothing, and
    a restart replays the store as it was."""
    server, client = journaled_server(env, "txcc")
    other = env.new_client(server.uri(), retryWrites=False)
    client.t.c.insert_many([{"_id": i, "v": 0} for i in range(4)])
    first, second, third = client.start_session(), other.start_session(), other.start_session()
    for session in (first, second, third):
        session.start_transaction()
    client.t.c.update_one({"_id": 0}, {"$set": {"v": 1}}, session=first)
    other.t.c.update_one({"_id": 1}, {"$set": {"v": 2}}, session=second)
    other.t.c.insert_one({"_id": 9}, session=third)
    client.t.c.insert_one({"_id": 5}, session=first)
    other.t.c.delete_one({"_id": 2}, session=second)
    journal = os.path.join(env.tmpdir, "txcc.db", "journal.bson")
    with open(journal, "rb") as f:
        count = len(bson.decode_all(f.read()))
    second.commit_transaction()
    third.abort_transaction()
    first.commit_transaction()
    with open(journal, "rb") as f:
        records = bson.decode_all(f.read())[count:]
    check([[op["op"] for op in r["ops"]] for r in records] == [["replace", "delete"], ["replace", "insert"]],
          records)
    before = state_of(client)
    server, client = kill_and_restart(env, server, "txcc2")
    check(state_of(client) == before, "the replay gives the same store")
    check(sorted((d["_id"], d.get("v")) for d in client.t.c.find()) == [(0, 1), (1, 2), (3, 0), (5, None)])
    env.servers.remove(server)
    check(server.stop() == 0)


def snapshot_conflict(env, name, outside, inside, setup=None):
    """Start a transaction (its first command takes the snapshot), let another client run `outside`, then
    the transaction `inside`: require WriteConflict with TransientTransactionError, the transaction aborted
    (its commit gets NoSuchTransaction) and its earlier write gone. Returns the collection."""
    coll = fresh(env, name)
    coll.insert_many([{"_id": i, "v": i} for i in range(1, 4)])
    if setup is not None:
        setup(coll)
    other = env.client2.t[name]
    with env.client.start_session() as session:
        session.start_transaction()
        coll.insert_one({"_id": 100}, session=session)  # the first command: the snapshot
        outside(other)
        exc = expect_error(112, inside, coll, session)
        check("TransientTransactionError" in exc.details.get("errorLabels", []), "%s: %s" % (name, exc.details))
        expect_error(251, session.commit_transaction)
    check(coll.find_one({"_id": 100}) is None, "%s: the aborted transaction's insert is gone" % name)
    return coll


@test()
def test_transaction_write_conflict_after_snapshot(env):
    # a document another client changed after the transaction's first command (mongod: first writer wins)
    coll = snapshot_conflict(env, "tsu", lambda o: o.update_one({"_id": 1}, {"$set": {"v": 10}}),
                             lambda c, s: c.update_one({"_id": 1}, {"$inc": {"v": 1}}, session=s))
    check(coll.find_one({"_id": 1}) == {"_id": 1, "v": 10}, "the outside write stays")
    snapshot_conflict(env, "tsr", lambda o: o.update_one({"_id": 1}, {"$set": {"v": 10}}),
                      lambda c, s: c.replace_one({"_id": 1}, {"w": 1}, session=s))
    snapshot_conflict(env, "tsd", lambda o: o.update_one({"_id": 1}, {"$set": {"v": 10}}),
                      lambda c, s: c.delete_one({"_id": 1}, session=s))
    snapshot_conflict(env, "tsm", lambda o: o.update_one({"_id": 1}, {"$set": {"v": 10}}),
                      lambda c, s: c.delete_many({"v": {"$gte": 0}}, session=s))
    snapshot_conflict(env, "tsf", lambda o: o.replace_one({"_id": 2}, {"v": 20}),
                      lambda c, s: c.find_one_and_update({"_id": 2}, {"$set": {"v": 0}}, session=s))
    snapshot_conflict(env, "tsx", lambda o: o.delete_one({"_id": 2}),
                      lambda c, s: c.find_one_and_delete({"v": 2}, session=s))
    # an insert of an _id inserted, or deleted, by another client since the snapshot
    snapshot_conflict(env, "tsi", lambda o: o.insert_one({"_id": 7}),
                      lambda c, s: c.insert_one({"_id": 7}, session=s))
    snapshot_conflict(env, "tse", lambda o: o.delete_one({"_id": 3}),
                      lambda c, s: c.insert_one({"_id": 3}, session=s))
    snapshot_conflict(env, "tsp", lambda o: o.delete_one({"_id": 3}),
                      lambda c, s: c.update_one({"_id": 3}, {"$set": {"v": 1}}, upsert=True, session=s))
    # a unique key another client took, or gave up, since the snapshot
    unique = lambda c: c.create_index("v", unique=True)  # noqa: E731
    snapshot_conflict(env, "tsk", lambda o: o.insert_one({"_id": 8, "v": 8}),
                      lambda c, s: c.insert_one({"_id": 9, "v": 8}, session=s), unique)
    snapshot_conflict(env, "tsg", lambda o: o.update_one({"_id": 1}, {"$set": {"v": 11}}),
                      lambda c, s: c.insert_one({"_id": 9, "v": 1}, session=s), unique)
    # no conflict: a change before the transaction's first command, or to a document it does not write
    coll = fresh(env, "tsn")
    coll.insert_many([{"_id": 1, "v": 1}, {"_id": 2, "v": 2}])
    with env.client.start_session() as session:
        session.start_transaction()  # pymongo sends nothing yet: the snapshot is not taken
        env.client2.t.tsn.update_one({"_id": 1}, {"$set": {"v": 10}})
        coll.update_one({"_id": 1}, {"$inc": {"v": 1}}, session=session)
        env.client2.t.tsn.update_one({"_id": 2}, {"$set": {"v": 20}})
        check(coll.find_one({"_id": 2}, session=session)["v"] == 2, "the transaction reads its snapshot")
        check(coll.count_documents({"v": 20}, session=session) == 0)
        session.commit_transaction()
    check(list(coll.find().sort("_id", 1)) == [{"_id": 1, "v": 11}, {"_id": 2, "v": 20}])
    # the next transaction has a snapshot of its own
    with env.client.start_session() as session:
        session.start_transaction()
        coll.update_one({"_id": 2}, {"$inc": {"v": 1}}, session=session)
        session.commit_transaction()
    check(coll.find_one({"_id": 2})["v"] == 21)


@test()
def test_retryable_writes_are_not_transactions(env):
    coll = env.new_client(retryWrites=True).t.retry
    coll.drop()
    coll.insert_one({"_id": 1})
    coll.update_one({"_id": 1}, {"$set": {"a": 1}})
    check(env.client2.t.retry.find_one() == {"_id": 1, "a": 1})


def retryable(client, session, name, coll, number, check=True, **fields):
    """Run a write command as a retryable write: the session's lsid, txnNumber `number`, no autocommit
    (with check=False the reply is returned whatever it says). Give each test its own client: pymongo
    reuses the lsids of ended sessions."""
    cmd = SON([(name, coll)])
    cmd.update(fields)
    cmd["txnNumber"] = Int64(number)
    return client.t.command(cmd, session=session, check=check)


@test()
def test_retryable_insert_not_executed_twice(env):
    coll = fresh(env, "rwi")
    client = env.new_client()
    with client.start_session() as s:
        first = retryable(client, s, "insert", "rwi", 1, documents=[{"_id": 1}, {"_id": 2}])
        check(first["n"] == 2 and "retriedStmtIds" not in first, first)
        again = retryable(client, s, "insert", "rwi", 1, documents=[{"_id": 1}, {"_id": 2}])
        check(again["n"] == 2 and again["retriedStmtIds"] == [0, 1] and "writeErrors" not in again,
              "a retried insert is not executed again (no E11000): %r" % again)
        # a partly executed ordered batch: statement 0 ran, 1 failed, 2 was never reached
        coll.insert_one({"_id": 11})
        part = retryable(client, s, "insert", "rwi", 2, documents=[{"_id": 10}, {"_id": 11}, {"_id": 12}])
        check(part["n"] == 1 and part["writeErrors"][0]["index"] == 1, part)
        coll.delete_one({"_id": 11})
        rest = retryable(client, s, "insert", "rwi", 2, documents=[{"_id": 10}, {"_id": 11}, {"_id": 12}])
        check(rest["n"] == 3 and rest["retriedStmtIds"] == [0] and "writeErrors" not in rest, rest)
        # explicit statement ids: the driver sends none, mongod numbers from stmtId or takes stmtIds
        retryable(client, s, "insert", "rwi", 3, documents=[{"_id": 20}, {"_id": 21}], stmtIds=[5, 6])
        mixed = retryable(client, s, "insert", "rwi", 3, documents=[{"_id": 21}, {"_id": 22}], stmtIds=[6, 7])
        check(mixed["n"] == 2 and mixed["retriedStmtIds"] == [6], mixed)
        based = retryable(client, s, "insert", "rwi", 3, documents=[{"_id": 23}, {"_id": 24}], stmtId=7)
        check(based["n"] == 2 and based["retriedStmtIds"] == [7], "stmtId 7 + 0 ran before: %r" % based)
    check(sorted(d["_id"] for d in coll.find()) == [1, 2, 10, 11, 12, 20, 21, 22, 24])


@test()
def test_retryable_update_and_delete(env):
    coll = fresh(env, "rwu")
    coll.insert_many([{"_id": i, "n": 0} for i in range(4)])
    client = env.new_client()
    with client.start_session() as s:
        updates = [{"q": {"_id": 0}, "u": {"$inc": {"n": 1}}}, {"q": {"_id": 9}, "u": {"$inc": {"n": 1}}},
                   {"q": {"_id": 7}, "u": {"$set": {"n": 7}}, "upsert": True}]
        first = retryable(client, s, "update", "rwu", 1, updates=updates)
        check((first["n"], first["nModified"], first["upserted"]) == (2, 1, [{"index": 2, "_id": 7}]), first)
        again = retryable(client, s, "update", "rwu", 1, updates=updates)
        # statement 1 matched nothing: not recorded (no oplog entry on mongod), so it runs again
        check((again["n"], again["nModified"], again["upserted"], again["retriedStmtIds"])
              == (2, 1, [{"index": 2, "_id": 7}], [0, 2]), again)
        check(coll.find_one({"_id": 0})["n"] == 1 and coll.count_documents({"_id": 7}) == 1)
        multi = retryable(client, s, "update", "rwu", 2, updates=[{"q": {}, "u": {"$inc": {"n": 1}}, "multi": True}])
        check(multi["n"] == 0 and multi["writeErrors"][0]["code"] == 72, multi)
        deleted = retryable(client, s, "delete", "rwu", 3, deletes=[{"q": {"_id": 1}, "limit": 1}])
        coll.insert_one({"_id": 1, "n": "back"})
        again = retryable(client, s, "delete", "rwu", 3, deletes=[{"q": {"_id": 1}, "limit": 1}])
        check(deleted["n"] == 1 and again["n"] == 1 and again["retriedStmtIds"] == [0], again)
        check(coll.find_one({"_id": 1}) == {"_id": 1, "n": "back"}, "the retried delete did not run again")
        many = retryable(client, s, "delete", "rwu", 4, deletes=[{"q": {}, "limit": 0}])
        check(many["n"] == 0 and many["writeErrors"][0]["code"] == 72 and coll.count_documents({}) == 5, many)


@test()
def test_retryable_find_and_modify_returns_recorded_image(env):
    coll = fresh(env, "rwf")
    coll.insert_many([{"_id": 1, "n": 0, "x": "a"}, {"_id": 2, "n": 0}])
    client = env.new_client()
    with client.start_session() as s:
        fam = dict(query={"_id": 1}, update={"$inc": {"n": 1}}, fields={"n": 1})
        first = retryable(client, s, "findAndModify", "rwf", 1, new=True, **fam)
        check(first["value"] == {"_id": 1, "n": 1} and "retriedStmtId" not in first, first)
        again = retryable(client, s, "findAndModify", "rwf", 1, new=True, **fam)
        # mongod returns the recorded post-image as stored (write_ops_retryability.cpp: no projection)
        check(again["value"] == {"_id": 1, "n": 1, "x": "a"} and again["retriedStmtId"] == 0, again)
        check(again["lastErrorObject"] == {"n": 1, "updatedExisting": True}, again)
        check(coll.find_one({"_id": 1})["n"] == 1, "executed once")
        expect_error(40612, retryable, client, s, "findAndModify", "rwf", 1, new=False, **fam)
        expect_error(40609, retryable, client, s, "findAndModify", "rwf", 1, query={"_id": 1}, remove=True)
        removed = retryable(client, s, "findAndModify", "rwf", 2, query={"_id": 2}, remove=True)
        coll.insert_one({"_id": 2, "n": "back"})
        again = retryable(client, s, "findAndModify", "rwf", 2, query={"_id": 2}, remove=True)
        check(removed["value"] == again["value"] == {"_id": 2, "n": 0} and again["retriedStmtId"] == 0, again)
        check(coll.find_one({"_id": 2}) == {"_id": 2, "n": "back"})
        up = dict(query={"_id": 3}, update={"$set": {"n": 3}}, upsert=True, new=True)
        first = retryable(client, s, "findAndModify", "rwf", 3, **up)
        coll.delete_one({"_id": 3})
        again = retryable(client, s, "findAndModify", "rwf", 3, **up)
        check(first["value"] == again["value"] == {"_id": 3, "n": 3}, again)
        check(again["lastErrorObject"] == {"n": 1, "updatedExisting": False, "upserted": 3}, again)
        check(coll.count_documents({"_id": 3}) == 0, "the retried upsert did not insert again")


@test()
def test_retryable_write_newer_txn_number(env):
    coll = fresh(env, "rwn")
    client = env.new_client()
    with client.start_session() as s:
        retryable(client, s, "insert", "rwn", 5, documents=[{"_id": 1}])
        retryable(client, s, "insert", "rwn", 6, documents=[{"_id": 2}])
        exc = expect_error(225, retryable, client, s, "insert", "rwn", 5, documents=[{"_id": 1}])
        check(exc.details["codeName"] == "TransactionTooOld")
        # txnNumber 6 is a retryable write: no transaction can start at it or below it
        txn = SON([("insert", "rwn"), ("documents", [{"_id": 3}]), ("txnNumber", Int64(6)),
                   ("startTransaction", True), ("autocommit", False)])
        expect_error(117, client.t.command, txn, session=s)
        txn["txnNumber"] = Int64(4)
        expect_error(225, client.t.command, txn, session=s)
        txn["txnNumber"] = Int64(7)
        client.t.command(txn, session=s)
        client.admin.command(SON([("commitTransaction", 1), ("txnNumber", Int64(7)), ("autocommit", False)]),
                                 session=s)
        exc = expect_error(217, retryable, client, s, "insert", "rwn", 7, documents=[{"_id": 4}])
        expect_error(225, retryable, client, s, "insert", "rwn", 6, documents=[{"_id": 2}])
        again = retryable(client, s, "insert", "rwn", 8, documents=[{"_id": 2}])
        check(again["writeErrors"][0]["code"] == 11000, "a new txnNumber forgets the old statements")
    check(sorted(d["_id"] for d in coll.find()) == [1, 2, 3])


@test()
def test_fail_command_close_connection_after(env):
    coll = fresh(env, "fca")
    expect_error(2, env.client.admin.command, "configureFailPoint", "failCommand", mode={"times": 1},
                 data={"failCommands": ["insert"], "closeConnection": "later"})
    fail_point(env, {"times": 1}, failCommands=["insert"], closeConnection="after", appName="fca")
    client = env.new_client(retryWrites=False, appname="fca")
    try:
        client.t.fca.insert_one({"_id": 1})
        raise AssertionError("expected a network error")
    except AutoReconnect:
        pass
    check(coll.count_documents({}) == 1, "closeConnection after: the insert was executed")
    # the driver retries the write once after the network error; the retry is recognised
    fail_point(env, {"times": 1}, failCommands=["insert", "update", "findAndModify", "delete"],
               closeConnection="after", appName="fca")
    client = env.new_client(retryWrites=True, appname="fca")
    client.t.fca.insert_many([{"_id": 2}, {"_id": 3}])
    for op in (lambda: client.t.fca.update_one({"_id": 2}, {"$inc": {"n": 1}}),
               lambda: client.t.fca.find_one_and_update({"_id": 3}, {"$inc": {"n": 1}}),
               lambda: client.t.fca.delete_one({"_id": 1})):
        fail_point(env, {"times": 1}, failCommands=["update", "findAndModify", "delete"],
                   closeConnection="after", appName="fca")
        op()
    check(sorted((d["_id"], d.get("n")) for d in coll.find()) == [(2, 1), (3, 1)])
    # {skip, times}: the third matching command, once
    fail_point(env, {"skip": 2, "times": 1}, failCommands=["find"], errorCode=2, appName="fca")
    client.t.fca.find_one()
    client.t.fca.find_one()
    expect_error(2, client.t.fca.find_one)
    client.t.fca.find_one()
    fail_point(env, "off")


@test()
def test_retryable_write_error_label(env):
    fresh(env, "rwl")
    client = env.new_client()
    with client.start_session() as s:
        for number, (code, labels) in enumerate([(91, None), (11600, None), (10107, None), (11000, None),
                                                 (189, [])]):
            data = dict(failCommands=["insert"], errorCode=code)
            if labels is not None:
                data["errorLabels"] = labels
            fail_point(env, {"times": 1}, **data)
            reply = retryable(client, s, "insert", "rwl", 10 + number, check=False, documents=[{"x": 1}])
            want = ["RetryableWriteError"] if code in (91, 11600, 10107) and labels is None else []
            check(reply["code"] == code and reply.get("errorLabels", []) == want, "%s: %r" % (code, reply))
        fail_point(env, {"times": 1}, failCommands=["insert"], errorCode=91)
        reply = client.t.command(SON([("insert", "rwl"), ("documents", [{"x": 1}])]), session=s, check=False)
        check(reply["code"] == 91 and "errorLabels" not in reply, "not a retryable write: no label")
        s.start_transaction()
        client.t.rwl.insert_one({"x": 2}, session=s)
        fail_point(env, {"times": 1}, failCommands=["commitTransaction"], errorCode=189)
        commit = SON([("commitTransaction", 1), ("txnNumber", s._server_session.transaction_id),
                      ("autocommit", False)])
        reply = client.admin.command(commit, session=s, check=False)
        check(reply["code"] == 189 and reply.get("errorLabels") == ["RetryableWriteError"], reply)
        s.commit_transaction()
    sys.path.insert(0, HERE)
    from idxmongo.retry import add_error_labels  # writeConcernError: the label rule itself
    wce = {"n": 1, "writeConcernError": {"code": 91, "errmsg": "shutdown"}, "ok": 1.0}
    check(add_error_labels("update", {"txnNumber": 1}, dict(wce)).get("errorLabels") == ["RetryableWriteError"])
    check("errorLabels" not in add_error_labels("update", {"txnNumber": 1, "autocommit": False}, dict(wce)))
    check("errorLabels" not in add_error_labels("update", {"txnNumber": 1},
                                                {"n": 1, "writeConcernError": {"code": 64}, "ok": 1.0}))


# ---------------------------------------------------------------------------------------------- limits

@test(own=True)
def test_transaction_lifetime_counts_from_start(env):
    server = env.start("lifetime", extra=["--txn-lifetime", "2"])
    client = env.new_client(server.uri())
    coll = client.t.life
    check(client.admin.command("getParameter", 1, transactionLifetimeLimitSeconds=1)
          ["transactionLifetimeLimitSeconds"] == 2)
    with client.start_session() as session:
        session.start_transaction()
        started = time.time()
        exc = None
        for i in range(40):  # never idle for long: a busy transaction expires all the same
            try:
                coll.insert_one({"_id": i}, session=session)
            except OperationFailure as error:
                exc = error
                break
            time.sleep(0.25)
        check(exc is not None and exc.code == 251, "a busy transaction outlived its lifetime: %s" % exc)
        check(2 <= time.time() - started < 5, "aborted after the lifetime from its start")
        check("TransientTransactionError" in exc.details.get("errorLabels", []))
        expect_error(251, session.commit_transaction)
    check(coll.count_documents({}) == 0, "the expired transaction's writes were rolled back")
    server.stop()
    env.servers.remove(server)


@test(own=True)
def test_transaction_size_limit(env):
    server = env.start("txnsize", extra=["--txn-size-limit", "100000"])
    client = env.new_client(server.uri())
    coll = client.t.size
    coll.insert_many([{"_id": i, "pad": "x" * 4000} for i in range(50)])  # no limit outside transactions
    with client.start_session() as session:
        session.start_transaction()
        coll.insert_many([{"_id": 100 + i, "pad": "y" * 4000} for i in range(20)], session=session)
        try:
            coll.insert_many([{"_id": 200 + i, "pad": "z" * 4000} for i in range(10)], session=session)
            raise AssertionError("expected TransactionTooLargeForCache")
        except BulkWriteError as exc:
            # not a transient error, so mongod reports it as a write error and aborts the transaction
            check([e["code"] for e in exc.details["writeErrors"]] == [388], exc)
            check("TransientTransactionError" not in exc.details.get("errorLabels", []),
                  "not transient: retrying the same transaction hits the same limit")
        expect_error(251, session.commit_transaction)
    check(coll.count_documents({}) == 50, "the transaction was aborted")
    server.stop()
    env.servers.remove(server)


@test(own=True)
def test_documents_over_16_mib_refused(env):
    coll = fresh(env, "big16")
    big = "x" * (16 * 1024 * 1024 + 10)
    header, body = raw_roundtrip(env.main.port, op_msg(
        {"insert": "big16", "$db": "t"}, sequences=[("documents", [{"_id": 1, "a": big}])]))
    reply = bson.decode(body[5:])
    check(reply["ok"] == 1.0 and reply["n"] == 0 and reply["writeErrors"][0]["code"] == 2, reply)
    check("object to insert too large" in reply["writeErrors"][0]["errmsg"])
    header, body = raw_roundtrip(env.main.port, op_msg(
        {"insert": "big16", "$db": "t"}, sequences=[("documents", [{"_id": 2, "a": big + "y" * 20000}])]))
    reply = bson.decode(body[5:])
    check(reply["ok"] == 0.0 and reply["code"] == 10334, reply)
    coll.insert_one({"_id": 3, "a": "x" * (10 * 1024 * 1024)})
    exc = expect_error(17419, coll.update_one, {"_id": 3}, {"$set": {"b": "y" * (7 * 1024 * 1024)}})
    check("Resulting document after update is larger than 16777216" in str(exc))
    expect_error(17419, coll.find_one_and_update, {"_id": 3}, {"$set": {"b": "y" * (7 * 1024 * 1024)}})
    check(coll.find_one({"_id": 3}, {"b": 1}) == {"_id": 3} and coll.count_documents({}) == 1)
    coll.drop()


@test(own=True)
def test_messages_over_48_mb_close_the_connection(env):
    with socket.create_connection(("127.0.0.1", env.main.port), timeout=5) as sock:
        sock.sendall(struct.pack("<iiii", 48000001, 1, 0, 2013))
        check(sock.recv(16) == b"", "mongod closes the connection without a reply")
    env.client.admin.command("ping")


@test()
def test_namespace_limit_255_bytes(env):
    db = env.client.t
    longest = "n" * (255 - len("t."))
    db.drop_collection(longest)
    db.create_collection(longest)
    db[longest].insert_one({"_id": 1})
    exc = expect_error(73, db.create_collection, longest + "n")
    check("Fully qualified namespace is too long" in str(exc))
    expect_error(73, db[longest + "n"].insert_one, {"_id": 1})
    expect_error(73, db[longest + "n"].create_index, "a")
    check(longest + "n" not in db.list_collection_names())
    db.drop_collection(longest)


@test()
def test_fail_command_write_concern_error(env):
    coll = fresh(env, "fpwce")
    wce = {"code": 64, "codeName": "WriteConcernFailed", "errmsg": "waiting for replication timed out",
           "errInfo": {"wtimeout": True}}
    fail_point(env, {"times": 1}, failCommands=["insert"], writeConcernError=wce)
    client = env.new_client(retryWrites=False)
    try:
        client.t.fpwce.insert_one({"_id": 1})
        raise AssertionError("expected a WriteConcernError")
    except WriteConcernError as exc:
        check(exc.code == 64 and exc.details["errInfo"] == {"wtimeout": True}, exc.details)
    check(coll.count_documents({}) == 1, "the command was executed")
    fail_point(env, {"times": 2}, failCommands=["commitTransaction"], writeConcernError=wce)
    with client.start_session() as session:
        session.start_transaction()
        client.t.fpwce.insert_one({"_id": 2}, session=session)
        reply = client.admin.command("commitTransaction", session=session)
        check(reply["ok"] == 1.0 and reply["writeConcernError"]["code"] == 64, reply)
    check(coll.count_documents({}) == 2, "the transaction was committed")
    fail_point(env, "off")


# ---------------------------------------------------------------------------------------------- transaction rules

class RawSession:
    """One connection sending commands exactly as written, with a session id of its own."""

    def __init__(self, env):
        self.sock = socket.create_connection(("127.0.0.1", env.main.port), timeout=30)
        self.lsid = {"id": Binary(os.urandom(16), 4)}
        self.number = 0
        self.request_id = 100

    def run(self, db, doc, **fields):
        """Send `doc` (plus `fields`) to `db`; the reply document."""
        self.request_id += 1
        body = dict(doc)
        body.update(fields)
        body["$db"] = db
        self.sock.sendall(op_msg(body, request_id=self.request_id))
        header = _recv(self.sock, 16)
        length = struct.unpack("<i", header[:4])[0]
        return bson.decode(_recv(self.sock, length - 16)[5:], codec_options=CODEC)

    def txn(self, db, doc, start=False, **fields):
        """A statement of the session's current transaction (a new one with start=True)."""
        if start:
            self.number += 1
        extra = {"lsid": self.lsid, "txnNumber": Int64(self.number), "autocommit": False}
        if start:
            extra["startTransaction"] = True
        extra.update(fields)
        return self.run(db, doc, **extra)

    def commit(self, **fields):
        """commitTransaction of the current transaction."""
        return self.txn("admin", {"commitTransaction": 1}, **fields)

    def close(self):
        """Close the connection."""
        self.sock.close()


def refused(reply, code, message=None):
    """Require an ok:0 reply with `code` (and `message` in errmsg)."""
    check(reply.get("ok") == 0 and reply.get("code") == code, "expected code %s: %s" % (code, reply))
    check(message is None or message in reply["errmsg"], "expected %r in %s" % (message, reply["errmsg"]))


def succeeded(reply):
    """Require an ok:1 reply without write errors."""
    check(reply.get("ok") == 1 and not reply.get("writeErrors"), "expected success: %s" % reply)
    return reply


def labels_of(reply):
    """The error labels of a reply."""
    return reply.get("errorLabels", [])


@test(own=True)
def test_txn_commands_outside_the_allow_list_are_refused(env):
    coll = fresh(env, "txal")
    coll.insert_one({"_id": 0})
    coll.create_index("a")
    raw = RawSession(env)
    succeeded(raw.txn("t", {"insert": "txal", "documents": [{"_id": 1}]}, start=True))
    refused(raw.txn("t", {"count": "txal"}), 263, "Cannot run 'count' in a multi-document transaction")
    for db, doc in [("t", {"listCollections": 1}), ("t", {"listIndexes": "txal"}), ("t", {"drop": "txal"}),
                    ("t", {"dropDatabase": 1}), ("t", {"dropIndexes": "txal", "index": "a_1"}),
                    ("t", {"collStats": "txal"}), ("t", {"dbStats": 1}), ("t", {"explain": {"find": "txal"}}),
                    ("admin", {"ping": 1}), ("admin", {"serverStatus": 1}), ("admin", {"buildInfo": 1})]:
        reply = raw.txn(db, doc)
        refused(reply, 263, "Cannot run '%s' in a multi-document transaction." % next(iter(doc)))
        check(not labels_of(reply), reply)
    refused(raw.txn("local", {"find": "x"}), 263, "'local' database")
    refused(raw.txn("config", {"find": "x"}), 263, "config database")
    check(succeeded(raw.txn("t", {"distinct": "txal", "key": "_id"}))["values"] == [0, 1])
    succeeded(raw.commit())  # a refused command neither aborted the transaction ...
    check(sorted(d["_id"] for d in coll.find()) == [0, 1] and "a_1" in coll.index_information())
    refused(raw.txn("t", {"count": "txal"}, start=True), 263)
    refused(raw.commit(), 251)  # ... nor started one
    refused(raw.txn("t", {"killCursors": "txal", "cursors": []}, start=True), 263, "first operation")
    refused(raw.txn("admin", {"commitTransaction": 1}, start=True), 263, "Cannot start a transaction with a commit")
    for stage in ({"$out": "txal_out"}, {"$merge": {"into": "txal_out"}}, {"$collStats": {"count": {}}}):
        succeeded(raw.txn("t", {"insert": "txal", "documents": [{"_id": 2}]}, start=True))
        refused(raw.txn("t", {"aggregate": "txal", "pipeline": [stage], "cursor": {}}), 263)
        refused(raw.commit(), 251)  # a refused stage aborts the transaction, as mongod's pipeline parser
    check(sorted(d["_id"] for d in coll.find()) == [0, 1])
    raw.close()


@test()
def test_coll_stats_as_mongod(env):
    """$collStats and collStats answer as mongod: storageStats.count, size (the documents' BSON) and
    avgObjSize (size // count, not scaled, missing when empty); `count: {}` the count; sizes divided by
    `scale`; a collection that does not exist is NamespaceNotFound; the stage is only valid first,
    takes only its own options, each an object (the collStats action: test_privileges_collection_scoped_role)."""
    coll = fresh(env, "cst")
    docs = [{"_id": i, "s": "x" * (i * 10)} for i in range(4)]
    coll.insert_many(docs)
    size = sum(len(bson.encode(d)) for d in docs)
    (doc,) = list(coll.aggregate([{"$collStats": {"storageStats": {}, "count": {}}}]))
    st = doc["storageStats"]
    check(doc["ns"] == "t.cst" and doc["count"] == 4 and "host" in doc and "localTime" in doc, doc)
    check(st["count"] == 4 and st["size"] == size and st["avgObjSize"] == size // 4, st)
    (doc,) = list(coll.aggregate([{"$collStats": {"storageStats": {"scale": 2}}}]))
    check(doc["storageStats"]["size"] == size // 2 and doc["storageStats"]["avgObjSize"] == size // 4 and
          "count" not in doc, doc)
    cmd = env.client.t.command("collStats", "cst")
    check(cmd["count"] == 4 and cmd["size"] == size and cmd["avgObjSize"] == size // 4, cmd)
    empty = fresh(env, "cst_empty")
    empty.insert_one({"_id": 1})
    empty.delete_one({"_id": 1})
    (doc,) = list(empty.aggregate([{"$collStats": {"storageStats": {}}}]))
    check(doc["storageStats"]["count"] == 0 and "avgObjSize" not in doc["storageStats"], doc)
    none = fresh(env, "cst_none")
    expect_error(26, lambda: list(none.aggregate([{"$collStats": {"storageStats": {}}}])))
    expect_error(26, lambda: list(none.aggregate([{"$collStats": {"count": {}}}])))
    check(len(list(none.aggregate([{"$collStats": {}}]))) == 1, "no statistics asked: one document")
    expect_error(40602, lambda: list(coll.aggregate([{"$match": {}}, {"$collStats": {"count": {}}}])))
    expect_error(40415, lambda: list(coll.aggregate([{"$collStats": {"sizes": {}}}])))
    expect_error(14, lambda: list(coll.aggregate([{"$collStats": {"count": 1}}])))


@test(own=True)
def test_txn_read_and_write_concern_rules(env):
    coll = fresh(env, "txrc")
    raw = RawSession(env)
    succeeded(raw.txn("t", {"insert": "txrc", "documents": [{"_id": 0}]}, start=True,
                      readConcern={"level": "snapshot"}))
    for level in ("snapshot", "majority", "local"):
        reply = raw.txn("t", {"insert": "txrc", "documents": [{"_id": 1}]}, readConcern={"level": level})
        refused(reply, 72, "Only the first command in a transaction may specify a readConcern")
    for wc in ({"w": 1}, {"w": "majority"}):
        reply = raw.txn("t", {"insert": "txrc", "documents": [{"_id": 2}]}, writeConcern=wc)
        refused(reply, 72, "writeConcern is not allowed within a multi-statement transaction")
    refused(raw.txn("t", {"find": "txrc"}, readConcern={"level": "local"}), 72)
    succeeded(raw.commit(writeConcern={"w": "majority"}))  # the refusals did not abort the transaction
    check([d["_id"] for d in coll.find()] == [0])
    for level in ("available", "linearizable"):
        reply = raw.txn("t", {"insert": "txrc", "documents": [{"_id": 3}]}, start=True,
                        readConcern={"level": level})
        refused(reply, 72, "The readConcern level must be either 'local' (default), 'majority' or 'snapshot'")
        refused(raw.commit(), 251)
    refused(raw.txn("t", {"insert": "txrc", "documents": [{"_id": 4}]}, start=True, writeConcern={"w": 1}), 72)
    refused(raw.commit(), 251)
    refused(raw.txn("t", {"find": "txrc"}, start=True, readConcern={"afterOpTime": {"ts": Timestamp(1, 1)}}), 72)
    now = raw.run("admin", {"ping": 1})["operationTime"]
    succeeded(raw.txn("t", {"insert": "txrc", "documents": [{"_id": 5}]}, start=True,
                      readConcern={"level": "snapshot", "afterClusterTime": now}))
    succeeded(raw.commit())
    check(sorted(d["_id"] for d in coll.find()) == [0, 5])
    raw.close()


@test(own=True)
def test_txn_session_option_rules(env):
    fresh(env, "txso")
    raw = RawSession(env)
    find = {"find": "txso"}
    refused(raw.run("t", find, lsid=raw.lsid, txnNumber=Int64(1), autocommit=True), 72,
            "Specifying autocommit=true is not allowed.")
    refused(raw.run("t", find, lsid=raw.lsid, autocommit=False), 72,
            "'autocommit' field requires a transaction number to also be specified")
    refused(raw.run("t", find, lsid=raw.lsid, txnNumber=Int64(1), startTransaction=True), 72,
            "'startTransaction' field requires 'autocommit' field to also be specified")
    refused(raw.run("t", find, lsid=raw.lsid, txnNumber=Int64(1), autocommit=False, startTransaction=False), 72,
            "Specifying startTransaction=false is not allowed.")
    refused(raw.run("t", find, txnNumber=Int64(1)), 72, "Transaction number requires a session ID")
    refused(raw.run("t", find, lsid=raw.lsid, txnNumber=Int64(1)), 50768, "find is not a retryable write command")
    succeeded(raw.run("t", {"insert": "txso", "documents": [{"_id": 1}]}, lsid=raw.lsid, txnNumber=Int64(1)))
    raw.close()


@test(own=True)
def test_txn_create_and_create_indexes_rules(env):
    coll = fresh(env, "txci")
    coll.insert_one({"_id": 0})
    coll.create_index("a")
    env.client.t.txci_new.drop()
    raw = RawSession(env)
    succeeded(raw.txn("t", {"find": "txci"}, start=True))
    succeeded(raw.txn("t", {"createIndexes": "txci", "indexes": [{"key": {"a": 1}, "name": "a_1"}]}))
    refused(raw.txn("t", {"createIndexes": "txci", "indexes": [{"key": {"b": 1}, "name": "b_1"}]}), 263,
            "Cannot create new indexes on existing collection t.txci in a multi-document transaction.")
    refused(raw.commit(), 251)
    succeeded(raw.txn("t", {"create": "txci_new"}, start=True))
    succeeded(raw.txn("t", {"createIndexes": "txci_new", "indexes": [{"key": {"b": 1}, "name": "b_1"}]}))
    succeeded(raw.txn("t", {"insert": "txci_new", "documents": [{"_id": 1, "b": 1}]}))
    refused(raw.txn("t", {"createIndexes": "txci_new", "indexes": [{"key": {"c": 1}, "name": "c_1"}]}), 263,
            "non-empty collection")
    refused(raw.commit(), 251)
    check("txci_new" not in env.client.t.list_collection_names())
    succeeded(raw.txn("t", {"createIndexes": "txci_new", "indexes": [{"key": {"b": 1}, "name": "b_1"}]},
                      start=True))
    succeeded(raw.commit())
    check("b_1" in env.client.t.txci_new.index_information())
    env.client.t.txci_new.drop()
    succeeded(raw.txn("t", {"find": "txci"}, start=True, readConcern={"level": "snapshot"}))
    refused(raw.txn("t", {"create": "txci_new"}), 72)
    succeeded(raw.txn("t", {"find": "txci"}, start=True, readConcern={"level": "majority"}))
    refused(raw.txn("t", {"createIndexes": "txci_new", "indexes": [{"key": {"b": 1}, "name": "b_1"}]}), 72)
    raw.close()


@test(own=True)
def test_txn_created_collections_invisible_until_commit(env):
    client, other = env.client, env.new_client()
    client.drop_database("t_ddl")
    db, odb = client.t_ddl, other.t_ddl
    with client.start_session() as session:
        session.start_transaction()
        db.command("create", "explicit", session=session)
        db.explicit.create_index("a", session=session)
        db.explicit.insert_one({"_id": 1, "a": 1}, session=session)
        db.implicit.insert_one({"_id": 2}, session=session)
        db.command("createIndexes", "by_index", indexes=[{"key": {"b": 1}, "name": "b_1"}], session=session)
        check(db.explicit.find_one({"a": 1}, session=session) == {"_id": 1, "a": 1}, "the transaction sees it")
        check("t_ddl" not in other.list_database_names() and odb.list_collection_names() == [],
              "other sessions see neither the collections nor their database")
        for name in ("explicit", "implicit", "by_index"):
            check(odb[name].index_information() == {} and odb[name].find_one() is None, name)
            check(odb[name].count_documents({}) == 0 and odb.command("count", name)["n"] == 0, name)
            expect_error(26, odb.command, "listIndexes", name)
            expect_error(26, odb.command, "collStats", name)
            expect_error(26, odb.command, "dropIndexes", name, index="*")  # at once: none for this session
        check(odb.explicit.update_many({}, {"$set": {"x": 1}}).matched_count == 0)
        check(odb.explicit.delete_many({}).deleted_count == 0)
        drop = run_in_thread(lambda: odb.command("drop", "implicit"))  # an exclusive lock: it waits
        time.sleep(0.4)
        check("seconds" not in drop, "drop waits for the transaction that created the collection")
        session.commit_transaction()
        drop["thread"].join(10)
    check("error" not in drop and drop["seconds"] >= 0.4, "the drop ran after the commit: %s" % drop)
    check(sorted(odb.list_collection_names()) == ["by_index", "explicit"])
    check(sorted(odb.explicit.index_information()) == ["_id_", "a_1"] and list(odb.explicit.find()) == [{"_id": 1, "a": 1}])
    check(sorted(odb.by_index.index_information()) == ["_id_", "b_1"])
    with client.start_session() as session:
        session.start_transaction()
        db.command("create", "aborted", session=session)
        db.aborted.create_index("c", session=session)
        db.aborted.insert_one({"_id": 1}, session=session)
        db.aborted_idx.create_index("d", session=session)
        session.abort_transaction()
    check(sorted(odb.list_collection_names()) == ["by_index", "explicit"], "an abort discards them")
    odb.aborted.insert_one({"_id": 5})
    check(sorted(odb.aborted.index_information()) == ["_id_"] and list(odb.aborted.find()) == [{"_id": 5}],
          "with their indexes and documents")
    client.drop_database("t_ddl")


@test(own=True)
def test_txn_created_collection_conflicts_with_another_sessions_creation(env):
    client, other = env.client, env.new_client()
    for how in ("create", "insert", "createIndexes"):
        fresh(env, "txcc")
        with client.start_session() as session:
            session.start_transaction()
            client.t.command("create", "txcc", session=session)
            client.t.txcc.create_index("a", session=session)
            client.t.txcc.insert_one({"_id": 1}, session=session)
            started = time.time()
            if how == "create":  # no wait, no NamespaceExists: mongod's create takes no exclusive lock
                other.t.command("create", "txcc")  # and does not see the uncommitted collection
            elif how == "createIndexes":  # nor does createIndexes when it creates the collection
                other.t.command("createIndexes", "txcc", indexes=[{"key": {"z": 1}, "name": "z_1"}])
            other.t.txcc.insert_one({"_id": 2})  # (creating the collection, for "insert")
            check(time.time() - started < 0.5, "%s: the other session does not wait" % how)
            check(client.t.txcc.find_one({}, session=session) == {"_id": 1}, "the transaction sees its own")
            exc = expect_error(112, session.commit_transaction)
            check(exc.has_error_label("TransientTransactionError"), exc.details)
        check(list(other.t.txcc.find()) == [{"_id": 2}], "%s: the other session's collection stays" % how)
        check("a_1" not in other.t.txcc.index_information(), "without the transaction's index")
    raw = RawSession(env)
    succeeded(raw.txn("t", {"insert": "txcc_raw", "documents": [{"_id": 1}]}, start=True))
    other.t.txcc_raw.insert_one({"_id": 2})
    refused(raw.commit(), 112)
    refused(raw.commit(), 251)  # the failed commit aborted the transaction
    check(list(other.t.txcc_raw.find()) == [{"_id": 2}])
    other.t.txcc_raw.drop()
    raw.close()


@test(own=True)
def test_txn_write_errors_are_write_errors_and_abort(env):
    coll = fresh(env, "txwe")
    coll.create_index("u", unique=True, name="u_unique")
    coll.insert_many([{"_id": 1, "u": 1}, {"_id": 2, "u": 2}])
    raw = RawSession(env)
    succeeded(raw.txn("t", {"insert": "txwe", "documents": [{"_id": 3, "u": 3}]}, start=True))
    reply = raw.txn("t", {"insert": "txwe", "documents": [{"_id": 4, "u": 4}, {"_id": 5, "u": 1},
                                                          {"_id": 6, "u": 2}], "ordered": False})
    check(reply["ok"] == 1 and len(reply["writeErrors"]) == 1, reply)  # unordered, yet the batch stopped
    error = reply["writeErrors"][0]
    check(error["index"] == 1 and error["code"] == 11000 and "u_unique" in error["errmsg"], error)
    check(error["keyPattern"] == {"u": 1} and error["keyValue"] == {"u": 1}, error)
    check("errorLabels" not in reply)
    later = raw.txn("t", {"find": "txwe"})
    refused(later, 251)
    check(labels_of(later) == ["TransientTransactionError"], later)
    commit = raw.commit()
    refused(commit, 251)
    check(labels_of(commit) == ["TransientTransactionError"], commit)
    check(sorted(d["_id"] for d in coll.find()) == [1, 2], "the transaction was aborted")
    succeeded(raw.txn("t", {"find": "txwe"}, start=True))
    reply = raw.txn("t", {"update": "txwe", "updates": [{"q": {"_id": 2}, "u": {"$set": {"u": 1}}}]})
    check(reply["ok"] == 1 and reply["writeErrors"][0]["code"] == 11000 and reply["writeErrors"][0]["index"] == 0)
    refused(raw.commit(), 251)
    succeeded(raw.txn("t", {"find": "txwe"}, start=True))
    refused(raw.txn("t", {"findAndModify": "txwe", "query": {"_id": 2}, "update": {"$set": {"u": 1}}}), 11000)
    refused(raw.commit(), 251)
    with env.client.start_session() as session:  # pymongo sees a write error, as on mongod
        session.start_transaction()
        exc = expect_error(11000, coll.insert_one, {"_id": 7, "u": 1}, session=session)
        check(isinstance(exc, WriteError) or isinstance(exc, BulkWriteError) or exc.code == 11000)
        expect_error(251, session.commit_transaction)
    raw.close()


@test(own=True)
def test_txn_error_labels(env):
    coll = fresh(env, "txlb")
    raw = RawSession(env)
    cases = [(112, {}, True), (24, {}, True), (246, {}, True), (11000, {}, False), (50, {}, False),
             (112, {"errorLabels": []}, False), (112, {"errorLabels": ["Other"]}, False)]
    for code, data, transient in cases:
        fail_point(env, {"times": 1}, failCommands=["insert"], errorCode=code, **data)
        reply = raw.txn("t", {"insert": "txlb", "documents": [{"x": 1}]}, start=True)
        refused(reply, code)
        check(("TransientTransactionError" in labels_of(reply)) == transient, (code, data, reply))
        check(labels_of(reply) == data.get("errorLabels", labels_of(reply)), reply)
        raw.txn("admin", {"abortTransaction": 1})
    fail_point(env, {"times": 1}, failCommands=["insert"], errorCode=112)
    reply = raw.run("t", {"insert": "txlb", "documents": [{"x": 1}]})  # not a transaction: no label
    refused(reply, 112)
    check(not labels_of(reply), reply)
    succeeded(raw.txn("t", {"insert": "txlb", "documents": [{"x": 2}]}, start=True))
    for code, transient in ((251, True), (50, False), (91, False)):
        fail_point(env, {"times": 1}, failCommands=["commitTransaction"], errorCode=code)
        reply = raw.commit()
        refused(reply, code)
        check(("TransientTransactionError" in labels_of(reply)) == transient, reply)
        check("UnknownTransactionCommitResult" not in labels_of(reply), "the driver's label, not mongod's")
    succeeded(raw.commit())
    fail_point(env, {"times": 1}, failCommands=["commitTransaction"], errorCode=50)
    with env.client.start_session() as session:  # the driver adds UnknownTransactionCommitResult itself
        session.start_transaction()
        coll.insert_one({"x": 3}, session=session)
        exc = expect_error(50, session.commit_transaction)
        check(exc.has_error_label("UnknownTransactionCommitResult"), exc.details)
        session.commit_transaction()
    check(coll.count_documents({}) == 2)
    raw.close()


def run_in_thread(fn):
    """Start fn in a thread; returns a dict that gets `result`/`error` and `seconds` when it ends."""
    out = {}

    def body():
        started = time.time()
        try:
            out["result"] = fn()
        except Exception as exc:  # reported by the caller
            out["error"] = exc
        out["seconds"] = time.time() - started
    thread = threading.Thread(target=body, daemon=True)
    thread.start()
    out["thread"] = thread
    return out


@test(own=True)
def test_ddl_waits_for_transaction_locks(env):
    coll = fresh(env, "txdl")
    coll.create_index("a")
    coll.insert_one({"_id": 0})
    fresh(env, "txdl_other").insert_one({"_id": 0})
    other = env.new_client()
    with env.client.start_session() as session:
        session.start_transaction()
        coll.insert_one({"_id": 1}, session=session)
        drop = run_in_thread(lambda: other.t.command("dropIndexes", "txdl", index="a_1"))
        time.sleep(0.5)
        check("seconds" not in drop, "dropIndexes waits for the transaction")
        started = time.time()
        check(other.t.txdl_other.find_one({"_id": 0}) == {"_id": 0} and time.time() - started < 0.5,
              "other connections are not blocked")
        exc = expect_error(50, other.t.command, "dropIndexes", "txdl", index="a_1", maxTimeMS=300)
        check(exc.details["codeName"] == "MaxTimeMSExpired")
        coll.insert_one({"_id": 2}, session=session)  # the transaction's own statements go on
        started = time.time()
        other.t.command("createIndexes", "txdl", indexes=[{"key": {"a": 1}, "name": "a_1"}])
        check(time.time() - started < 0.5, "a createIndexes of existing indexes does not wait")
        session.commit_transaction()
        drop["thread"].join(10)
    check("error" not in drop and drop["seconds"] >= 0.5, drop)
    check(sorted(coll.index_information()) == ["_id_"] and sorted(d["_id"] for d in coll.find()) == [0, 1, 2])
    for ddl in (lambda: other.t.command("drop", "txdl"), lambda: other.drop_database("t_dl"),
                lambda: other.t.command("createIndexes", "txdl", indexes=[{"key": {"b": 1}, "name": "b_1"}])):
        env.client.t_dl.c.replace_one({"_id": 0}, {"_id": 0}, upsert=True)
        coll.replace_one({"_id": 9}, {"_id": 9}, upsert=True)
        with env.client.start_session() as session:
            session.start_transaction()
            env.client.t_dl.c.find_one({}, session=session)  # a read takes the lock too
            coll.find_one({}, session=session)
            waiting = run_in_thread(ddl)
            time.sleep(0.4)
            check("seconds" not in waiting, "the DDL waits")
            session.abort_transaction()
            waiting["thread"].join(10)
        check("error" not in waiting and waiting["seconds"] >= 0.4, waiting)
    check("b_1" in coll.index_information(), "the last DDL, createIndexes, ran after the abort")
    third = env.new_client()
    with env.client.start_session() as session:  # writes of other sessions queue behind the waiting drop
        session.start_transaction()
        coll.insert_one({"_id": 10}, session=session)
        drop = run_in_thread(lambda: other.t.command("drop", "txdl"))
        time.sleep(0.3)
        write = run_in_thread(lambda: third.t.txdl.insert_one({"_id": 50}))
        time.sleep(0.3)
        check("seconds" not in write, "the write waits behind the drop")
        check(third.t.txdl.find_one({"_id": 9}) == {"_id": 9}, "reads do not wait")
        exc = expect_error(50, third.t.command, "delete", "txdl", deletes=[{"q": {}, "limit": 0}], maxTimeMS=200)
        check(exc.details["codeName"] == "MaxTimeMSExpired")
        coll.insert_one({"_id": 11}, session=session)
        session.commit_transaction()
        drop["thread"].join(10)
        write["thread"].join(10)
    check("error" not in drop and "error" not in write, (drop, write))
    check(list(coll.find()) == [{"_id": 50}], "the drop ran first, then the write created the collection anew")


@test(own=True)
def test_ddl_waits_until_transaction_expires(env):
    port_file = os.path.join(env.tmpdir, "ddl_expiry.port")
    proc = subprocess.Popen([PYTHON, SERVER_SCRIPT, "--host", "127.0.0.1", "--port", "0", "--port-file", port_file,
                             "--txn-lifetime", "2"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 15
        while not os.path.exists(port_file) and time.time() < deadline:
            time.sleep(0.05)
        with open(port_file) as f:
            client = env.new_client("mongodb://127.0.0.1:%d/?replicaSet=rs0" % int(f.read()))
        coll = client.t.expiring
        coll.insert_one({"_id": 0})
        session = client.start_session()
        session.start_transaction()
        coll.insert_one({"_id": 1}, session=session)
        started = time.time()
        client.t.command("create", "created_meanwhile")  # create takes no exclusive lock: no wait
        check(time.time() - started < 0.5, "create does not wait")
        client.t.command("drop", "expiring")  # waits until the idle transaction is aborted (2 s)
        waited = time.time() - started
        check(2 <= waited < 6, "the drop waited %.1f s" % waited)
        exc = expect_error(251, session.commit_transaction)
        check(exc.has_error_label("TransientTransactionError"))
        check("expiring" not in client.t.list_collection_names())
        session.end_session()
        client.close()
    finally:
        proc.terminate()
        proc.wait(10)


@test(own=True)
def test_cluster_time_and_operation_time(env):
    fresh(env, "ctime")
    raw = RawSession(env)
    ping = raw.run("admin", {"ping": 1})
    cluster = ping["$clusterTime"]
    check(isinstance(cluster["clusterTime"], Timestamp) and isinstance(ping["operationTime"], Timestamp), ping)
    check(cluster["signature"] == {"hash": b"\x00" * 20, "keyId": 0}, cluster)  # subtype 0 decodes as bytes
    first = raw.run("t", {"insert": "ctime", "documents": [{"_id": 1}]})
    second = raw.run("t", {"insert": "ctime", "documents": [{"_id": 2}]})
    check(ping["operationTime"] <= first["operationTime"] < second["operationTime"], (first, second))
    check(second["$clusterTime"]["clusterTime"] == second["operationTime"])
    read = raw.run("t", {"find": "ctime"})
    check(read["operationTime"] >= second["operationTime"])
    error = raw.run("t", {"drop": "no_such_collection_here"})
    refused(error, 26)
    check(isinstance(error["operationTime"], Timestamp) and "$clusterTime" in error)
    ahead = Timestamp(second["operationTime"].time + 100, 1)
    raw.run("admin", {"ping": 1, "$clusterTime": {"clusterTime": ahead, "signature": cluster["signature"]}})
    check(raw.run("admin", {"ping": 1})["$clusterTime"]["clusterTime"] >= ahead, "gossip advances the clock")
    found = raw.run("t", {"find": "ctime", "readConcern": {"afterClusterTime": second["operationTime"]}})
    check(len(succeeded(found)["cursor"]["firstBatch"]) == 2)
    future = Timestamp(ahead.time + 100, 1)
    refused(raw.run("t", {"find": "ctime", "readConcern": {"afterClusterTime": future}}), 72,
            "readConcern afterClusterTime value must not be greater than the current clusterTime")
    gossiped = {"clusterTime": future, "signature": cluster["signature"]}  # unless gossiped with it
    succeeded(raw.run("t", {"find": "ctime", "readConcern": {"afterClusterTime": future},
                            "$clusterTime": gossiped}))
    with env.client.start_session() as session:  # pymongo gossips and keeps the times
        env.client.t.ctime.insert_one({"_id": 3}, session=session)
        check(session.cluster_time is not None and session.operation_time is not None)
        check(env.client.t.ctime.find_one({"_id": 3}, session=session) == {"_id": 3})
    raw.close()


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


def journaled_server(env, name, extra=()):
    """A server with --dbpath in a new directory, and a client of it."""
    server = env.start(name, dbpath=os.path.join(env.tmpdir, name + ".db"), extra=extra)
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
        client.t.aborted_idx.create_index("q", session=session)  # the collection and index are undone too
        session.abort_transaction()
    before = state_of(client)
    check(("t", "gone") not in before and ("t", "aborted_new") not in before and ("t", "txn_new") in before)
    check(("t", "aborted_idx") not in before)
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
    server, client = journaled_server(env, "ckpt", extra=["--change-history", "100"])
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
def test_dbpath_collections_created_in_transactions(env):
    server, client = journaled_server(env, "txddl", extra=["--change-history", "100"])
    other = env.new_client(server.uri(), retryWrites=False)
    with client.start_session() as session:
        session.start_transaction()
        client.t.made.create_index("k", unique=True, session=session)
        client.t.made.insert_many([{"_id": i, "k": i} for i in range(600)], session=session)
        session.commit_transaction()
    journal = os.path.join(env.tmpdir, "txddl.db", "journal.bson")
    with open(journal, "rb") as f:
        records = bson.decode_all(f.read())
    made = [(op["op"], op["coll"]) for op in records[-1]["ops"]]
    check(made == [("create", "made"), ("createIndex", "made"), ("insert", "made")],
          "the creations are in the transaction's commit record: %s" % made)
    with client.start_session() as session:  # a commit refused because another session created it meanwhile
        session.start_transaction()
        client.t.lost.create_index("q", session=session)
        client.t.lost.insert_one({"_id": 1}, session=session)
        other.t.lost.insert_one({"_id": 2})
        expect_error(112, session.commit_transaction)
    with client.start_session() as session:
        session.start_transaction()
        client.t.gone.create_index("z", session=session)
        session.abort_transaction()
    with open(journal, "rb") as f:
        check(not any(op["coll"] == "gone" for record in bson.decode_all(f.read()) for op in record["ops"]
                      if "coll" in op), "an abort journals nothing")
    client.t.made.update_many({}, {"$inc": {"n": 1}})
    client.t.made.update_many({}, {"$inc": {"n": 1}})
    before = state_of(client)
    check(("t", "gone") not in before and before[("t", "lost")][3] == [bson.encode({"_id": 2})])
    size = os.path.getsize(journal)
    server, client = kill_and_restart(env, server, "txddl2")
    check(os.path.getsize(journal) < size / 2, "the journal was rewritten as a checkpoint")
    check(state_of(client) == before, "a replay keeps what the transactions created, and only that")
    expect_error(11000, client.t.made.insert_one, {"_id": 1000, "k": 5})
    server, client = kill_and_restart(env, server, "txddl3")
    check(state_of(client) == before, "and so does a replay of the checkpoint")
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


@test(own=True)
def test_retryable_write_history_survives_kill(env):
    server, client = journaled_server(env, "killretry", extra=["--change-history", "100"])
    with client.start_session() as s:
        lsid = s.session_id
        retryable(client, s, "update", "kr", 1, updates=[{"q": {"_id": 1}, "u": {"$set": {"a": 1}}, "upsert": True}])
        arm_kill(client, "after", "insert")
        expect_network_error(retryable, client, s, "insert", "kr", 2, documents=[{"_id": 2}, {"_id": 3}])
    check(server.proc.wait(10) == 137)
    server = env.restart(server, "killretry2")
    client = env.new_client(server.uri(), retryWrites=False)
    with client.start_session() as s:
        s._server_session.session_id = lsid  # the driver's retry after the restart: the same session
        again = retryable(client, s, "insert", "kr", 2, documents=[{"_id": 2}, {"_id": 3}])
        check(again["n"] == 2 and again["retriedStmtIds"] == [0, 1] and "writeErrors" not in again,
              "a retry after a restart is recognised (mongod's config.transactions): %r" % again)
        expect_error(225, retryable, client, s, "update", "kr", 1,
                     updates=[{"q": {"_id": 1}, "u": {"$set": {"a": 1}}, "upsert": True}])
    for i in range(1200):  # enough changes for a checkpoint at the next start, which keeps the history
        client.t.kr.update_one({"_id": 1}, {"$set": {"a": i}})
    server, client = kill_and_restart(env, server, "killretry3")
    check(os.path.getsize(os.path.join(env.tmpdir, "killretry.db", "journal.bson")) < 20000, "checkpointed")
    server, client = kill_and_restart(env, server, "killretry4")
    with client.start_session() as s:
        s._server_session.session_id = lsid
        again = retryable(client, s, "insert", "kr", 2, documents=[{"_id": 2}, {"_id": 3}])
        check(again["n"] == 2 and again["retriedStmtIds"] == [0, 1], "kept by the checkpoint: %r" % again)
    check(sorted(d["_id"] for d in client.t.kr.find()) == [1, 2, 3])
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


def _user_client(env, user, password, db="admin"):
    """A client of the authenticated server logged in as user@db."""
    return env.new_client(env.auth.uri("%s:%s@" % (user, password), "&authSource=%s" % db))


@test(own=True)
def test_privileges_collection_scoped_role(env):
    admin = _user_client(env, USER, PASSWORD)
    admin.priv.c.insert_many([{"_id": 1}, {"_id": 2}])
    admin.priv.other.insert_one({"_id": 1})
    admin.priv.command("createRole", "onlyC", privileges=[
        {"resource": {"db": "priv", "collection": "c"},
         "actions": ["find", "insert", "update", "remove", "changeStream"]}], roles=[])
    admin.priv.command("createUser", "cuser", pwd="pw1", roles=["onlyC"])
    client = _user_client(env, "cuser", "pw1", "priv")
    check(len(list(client.priv.c.find())) == 2, "find on its own collection")
    client.priv.c.insert_one({"_id": 3})
    exc = expect_error(13, client.priv.other.find_one)
    check(exc.details["codeName"] == "Unauthorized", exc.details)
    check(exc.details["errmsg"].startswith('not authorized on priv to execute command { find: "other", filter: {}'),
          exc.details["errmsg"])
    check(', $db: "priv"' in exc.details["errmsg"] and exc.details["errmsg"].endswith(" }"), exc.details["errmsg"])
    exc = expect_error(13, client.priv.other.insert_one, {"_id": 9})
    check("documents" not in exc.details["errmsg"], "a document sequence is not part of the message")
    expect_error(13, client.priv.c.drop)
    expect_error(13, client.priv.c.create_index, "k")
    # $collStats and collStats need the collStats action; count needs find only
    expect_error(13, lambda: list(client.priv.c.aggregate([{"$collStats": {"storageStats": {}}}])))
    expect_error(13, client.priv.command, "collStats", "c")
    check(client.priv.command("count", "c")["n"] == 3, "count with find alone")
    # a database-wide change stream needs find and changeStream on {db: "priv", collection: ""}
    exc = expect_error(13, client.priv.watch)
    check(exc.details["errmsg"].startswith("not authorized on priv to execute command { aggregate: 1, pipeline: "
                                           "[ { $changeStream: {} } ]"), exc.details["errmsg"])
    with client.priv.c.watch(max_await_time_ms=100) as stream:
        admin.priv.c.insert_one({"_id": 4})
        change = stream.try_next() or stream.try_next()
        check(change is not None and change["documentKey"] == {"_id": 4}, change)
        # revoking changeStream ends the open stream's next getMore with 13
        admin.priv.command("revokePrivilegesFromRole", "onlyC", privileges=[
            {"resource": {"db": "priv", "collection": "c"}, "actions": ["changeStream"]}])
        try:
            stream.try_next()
            raise AssertionError("getMore after the revoke succeeded")
        except OperationFailure as exc2:
            check(exc2.code == 13 and "not authorized for getMore with cursor id" in str(exc2), exc2.details)
    expect_error(13, client.priv.c.watch)
    admin.priv.command("grantPrivilegesToRole", "onlyC", privileges=[
        {"resource": {"db": "priv", "collection": "c"}, "actions": ["changeStream"]}])
    client.priv.c.watch().close()
    # cursors belong to their user
    reply = admin.priv.command("find", "c", batchSize=1)
    exc = expect_error(13, client.priv.command, "getMore", reply["cursor"]["id"], collection="c")
    check("was not created by the authenticated user" in exc.details["errmsg"], exc.details)
    expect_error(13, client.priv.command, "killCursors", "c", cursors=[reply["cursor"]["id"]])
    names = client.priv.list_collection_names(authorizedCollections=True, nameOnly=True)
    check(names == ["c"], names)
    expect_error(13, client.priv.command, "listCollections")
    check([d["name"] for d in client.list_databases()] == ["priv"], "listDatabases shows its database only")


@test(own=True)
def test_privileges_builtin_roles(env):
    admin = _user_client(env, USER, PASSWORD)
    admin.rw.command("createUser", "rwuser", pwd="pw2", roles=["readWrite"])
    admin.rw.command("createUser", "ruser", pwd="pw3", roles=[{"role": "read", "db": "rw"}])
    admin.admin.command("createUser", "mon", pwd="pw4", roles=["clusterMonitor"])
    admin.admin.command("createUser", "anyrw", pwd="pw5", roles=["readWriteAnyDatabase"])
    admin.rw.command("createUser", "owner", pwd="pw6", roles=["dbOwner"])
    rw = _user_client(env, "rwuser", "pw2", "rw")
    rw.rw.x.insert_one({"_id": 1})
    rw.rw.x.update_one({"_id": 1}, {"$set": {"a": 1}})
    rw.rw.x.create_index("a")
    rw.rw.watch().close()  # read/readWrite hold changeStream on the whole database
    expect_error(13, rw.other.x.find_one)
    expect_error(13, rw.rw.command, "dropDatabase")
    expect_error(13, rw.rw.command, "createUser", "x", pwd="x", roles=[])
    reader = _user_client(env, "ruser", "pw3", "rw")
    check(reader.rw.x.find_one() == {"_id": 1, "a": 1})
    expect_error(13, reader.rw.x.insert_one, {"_id": 2})
    expect_error(13, reader.admin.command, "serverStatus")
    mon = _user_client(env, "mon", "pw4")
    check(mon.admin.command("serverStatus")["ok"] == 1)
    check(mon.rw.command("dbStats")["ok"] == 1)
    expect_error(13, mon.rw.x.find_one)
    anyrw = _user_client(env, "anyrw", "pw5")
    anyrw.elsewhere.y.insert_one({"_id": 1})
    expect_error(13, anyrw.elsewhere.command, "dropDatabase")
    owner = _user_client(env, "owner", "pw6", "rw")
    owner.rw.command("createUser", "made", pwd="pw7", roles=["read"])
    owner.rw.command("dropDatabase")
    expect_error(13, owner.other.x.find_one)


@test(own=True)
def test_privileges_users_info_and_connection_status(env):
    admin = _user_client(env, USER, PASSWORD)
    admin.ui.command("createRole", "findC", privileges=[
        {"resource": {"db": "ui", "collection": "c"}, "actions": ["find"]}], roles=["read"])
    admin.ui.command("createUser", "u1", pwd="pw", roles=["findC"], customData={"k": 1})
    info = admin.ui.command("usersInfo", "u1")["users"]
    check(len(info) == 1, info)
    user = info[0]
    check(list(user) == ["_id", "userId", "user", "db", "customData", "roles", "mechanisms"], list(user))
    check(user["_id"] == "ui.u1" and user["user"] == "u1" and user["db"] == "ui", user)
    check(isinstance(user["userId"], uuid.UUID) or (isinstance(user["userId"], Binary)
                                                    and user["userId"].subtype == 4), user["userId"])
    check(user["roles"] == [{"role": "findC", "db": "ui"}], user["roles"])
    check(user["mechanisms"] == ["SCRAM-SHA-1", "SCRAM-SHA-256"], user["mechanisms"])
    full = admin.ui.command("usersInfo", {"user": "u1", "db": "ui"}, showPrivileges=True)["users"][0]
    check(full["inheritedRoles"] == [{"role": "findC", "db": "ui"}, {"role": "read", "db": "ui"}],
          full["inheritedRoles"])
    resources = [p["resource"] for p in full["inheritedPrivileges"]]
    check({"db": "ui", "collection": "c"} in resources and {"db": "ui", "collection": ""} in resources, resources)
    check(admin.ui.command("usersInfo", 1)["users"][0]["_id"] == "ui.u1")
    check(admin.ui.command("usersInfo", "nobody")["users"] == [])
    client = _user_client(env, "u1", "pw", "ui")
    status = client.admin.command("connectionStatus", showPrivileges=True)["authInfo"]
    check(status["authenticatedUsers"] == [{"user": "u1", "db": "ui"}], status)
    check(status["authenticatedUserRoles"] == [{"role": "findC", "db": "ui"}, {"role": "read", "db": "ui"}],
          status)
    privs = {(p["resource"].get("db"), p["resource"].get("collection")): p["actions"]
             for p in status["authenticatedUserPrivileges"]}
    check("changeStream" in privs[("ui", "")] and privs[("ui", "c")] == ["find"], privs)
    check(client.ui.command("usersInfo", "u1")["users"][0]["user"] == "u1", "a user may see itself")
    expect_error(13, client.ui.command, "usersInfo", 1)
    roles = admin.ui.command("rolesInfo", "findC", showPrivileges=True)["roles"][0]
    check(roles["role"] == "findC" and roles["isBuiltin"] is False and roles["roles"] == [{"role": "read",
                                                                                        "db": "ui"}], roles)
    check(roles["privileges"] == [{"resource": {"db": "ui", "collection": "c"}, "actions": ["find"]}], roles)
    anonymous = env.new_client(env.auth.uri())
    check(anonymous.admin.command("connectionStatus")["authInfo"]["authenticatedUsers"] == [])
    # errors as mongod gives them
    expect_error(51003, admin.ui.command, "createUser", "u1", pwd="x", roles=[])
    expect_error(31, admin.ui.command, "createUser", "u2", pwd="x", roles=["noSuchRole"])
    expect_error(11, admin.ui.command, "dropUser", "nobody")
    expect_error(51002, admin.ui.command, "createRole", "findC", privileges=[], roles=[])
    expect_error(49, admin.ui.command, "createRole", "elsewhere", roles=[], privileges=[
        {"resource": {"db": "other", "collection": ""}, "actions": ["find"]}])
    expect_error(2, admin.ui.command, "createRole", "bad", roles=[], privileges=[
        {"resource": {"db": "ui", "collection": ""}, "actions": ["fly"]}])
    admin.ui.command("revokeRolesFromUser", "u1", roles=["findC"])
    expect_error(13, client.ui.c.find_one)
    admin.ui.command("grantRolesToUser", "u1", roles=["read"])
    client.ui.c.find_one()
    admin.ui.command("updateUser", "u1", pwd="new")
    expect_error(18, _user_client(env, "u1", "pw", "ui").ui.command, "ping")
    check(_user_client(env, "u1", "new", "ui").ui.c.find_one() is None)
    admin.ui.command("dropRole", "findC")
    admin.ui.command("dropUser", "u1")
    check(admin.ui.command("usersInfo", 1)["users"] == [])


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
def test_counters_range_bounds_intersected(env):
    """Several bounds on one field use one index interval, in one condition document or across an $and
    (mongod intersects the bounds of a conjunction); explain shows the index and the keys examined."""
    coll = env.big()
    for filt in ({"k": {"$gte": 10, "$lte": 19}},
                 {"$and": [{"k": {"$gte": 10}}, {"k": {"$lte": 19}}]},
                 {"$and": [{"k": {"$gt": 5, "$lte": 19}}, {"k": {"$gte": 10, "$lt": 40}}]}):
        found = []
        keys, docs = env.examined(lambda: found.extend(coll.find(filt)))
        check(sorted(d["k"] for d in found) == list(range(10, 20)) and (keys, docs) == (10, 10),
              (filt, keys, docs))
        plan = env.client.perf.command("explain", {"find": "big", "filter": filt})
        check(plan["queryPlanner"]["winningPlan"]["inputStage"]["indexName"] == "k_1", plan)
        check(plan["executionStats"]["totalKeysExamined"] == 10, plan["executionStats"])
    keys, docs = env.examined(lambda: list(coll.find({"$and": [{"k": {"$gt": 30}}, {"k": {"$lt": 20}}]})))
    check((keys, docs) == (0, 0), "disjoint bounds examine nothing: %s" % ((keys, docs),))


@test(own=True)
def test_counters_ne_null_bounds(env):
    """{$ne: null} on an index that is not multikey has mongod's bounds [MinKey, null) U (null, MaxKey]: a
    sorted find under a limit examines no null or missing key (undefined, below null, is in the bounds and
    matches); on a multikey index there are no bounds, and the null keys are examined."""
    coll = fresh(env, "ne_null_bounds")
    coll.insert_many([{"_id": i} if i % 2 else {"_id": i, "a": None} for i in range(1000)] +
                     [{"_id": 1000 + i, "a": i} for i in range(20)] + [_undefined_doc(2000, b"\x06a\x00")])
    coll.create_index("a")
    for direction, expected in ((1, [2000, 1000, 1001, 1002, 1003]), (-1, [1019, 1018, 1017, 1016, 1015])):
        found = []
        keys, docs = env.examined(lambda: found.extend(coll.find({"a": {"$ne": None}}).sort("a", direction)
                                                       .limit(5)))
        check([d["_id"] for d in found] == expected and (keys, docs) == (5, 5), (direction, found, keys, docs))
    found = []
    keys, docs = env.examined(lambda: found.extend(coll.find({"a": {"$ne": None}})))
    check(len(found) == 21 and (keys, docs) == (21, 21), (len(found), keys, docs))
    keys, docs = env.examined(lambda: list(coll.find({"a": {"$ne": None, "$gte": 15}})))
    check((keys, docs) == (5, 5), "a range with it: its own bounds (%d, %d)" % (keys, docs))
    coll.insert_one({"_id": 3000, "a": [1, 2]})
    found = []
    keys, docs = env.examined(lambda: found.extend(coll.find({"a": {"$ne": None}}).sort("a", 1).limit(5)))
    check(len(found) == 5 and docs > 1000, "multikey: no bounds (%d, %d)" % (keys, docs))


@test()
def test_type_lists_and_bounds(env):
    """$type takes a list (any of its types matches) and the types mongomock leaves out; on an indexed
    field it is one interval per type bracket, intersected with a range on the field (mongod's index
    bounds builder), so an empty bracket examines nothing and a range and a bracket of another type
    nothing either."""
    from bson.min_key import MinKey
    from bson.regex import Regex
    from bson.timestamp import Timestamp
    coll = fresh(env, "typelists")
    oids = [ObjectId("%024x" % i) for i in range(1, 6)]
    coll.insert_many([{"_id": "s%d" % i} for i in range(20)] + [{"_id": o} for o in oids]
                     + [{"_id": 7}, {"_id": 2.5}, {"_id": Timestamp(1, 1)}, {"_id": MinKey()},
                        {"_id": datetime.datetime(2020, 1, 1)}, {"_id": {"a": 1}}])
    coll.insert_one({"_id": "r", "f": Regex("^a")})
    coll.insert_one({"_id": "n", "f": None})
    found = []
    keys, docs = env.examined(lambda: found.extend(d["_id"] for d in coll.find(
        {"_id": {"$type": ["double", "int", "timestamp", "minKey"]}})))
    check(len(found) == 4 and docs == 4 and keys == 4, (found, keys, docs))
    keys, docs = env.examined(lambda: list(coll.find({"_id": {"$type": ["binData", "bool", "maxKey"]}})))
    check((keys, docs) == (0, 0), "empty brackets examine nothing: %s" % ((keys, docs),))
    keys, docs = env.examined(lambda: list(coll.find({"$and": [{"_id": {"$gt": "s5"}},
                                                              {"_id": {"$type": ["int", "date"]}}]})))
    check((keys, docs) == (0, 0), "a string range and other brackets examine nothing: %s" % ((keys, docs),))
    found = []
    keys, docs = env.examined(lambda: found.extend(d["_id"] for d in coll.find(
        {"$and": [{"_id": {"$gt": oids[1]}}, {"_id": {"$type": "objectId"}}]})))
    check(found == oids[2:] and (keys, docs) == (3, 3), (found, keys, docs))
    check([d["_id"] for d in coll.find({"f": {"$type": "regex"}})] == ["r"], "regex")
    check([d["_id"] for d in coll.find({"f": {"$type": ["null", "regex"]}})] == ["r", "n"], "null, regex")


@test()
def test_counters_ne_bounds(env):
    """`{$ne: v}` alone on a field scans the index on both sides of v, as mongod's bounds builder does
    ([MinKey, null) and (null, MaxKey] for null, test_counters_ne_null_bounds): a sorted, limited find
    skips the nulls that sort first; a range on another indexed field is still preferred."""
    coll = fresh(env, "ne_bounds")
    coll.insert_many([{"_id": i, "a": None if i < 60 else i, "b": i} for i in range(100)])
    coll.create_index("a", name="a_1")
    coll.create_index("b", name="b_1")
    found = []
    keys, docs = env.examined(lambda: found.extend(coll.find({"a": {"$ne": None}}).sort("a", 1).limit(3)))
    check([d["a"] for d in found] == [60, 61, 62] and keys <= 4 and docs <= 3, (found, keys, docs))
    keys, docs = env.examined(lambda: found.extend(coll.find({"a": {"$ne": 70}})))
    check((keys, docs) == (99, 99), "both sides of 70: %s" % ((keys, docs),))
    keys, docs = env.examined(lambda: list(coll.find({"a": {"$ne": None}, "b": {"$gte": 90}})))
    check((keys, docs) == (10, 10), "the range on b wins: %s" % ((keys, docs),))


NAN = float("nan")
NAN_DOCS = [{"_id": 1, "f": NAN}, {"_id": 2, "f": 1.5}, {"_id": 3, "f": -math.inf}, {"_id": 4, "f": None},
            {"_id": 5}, {"_id": 6, "f": math.inf}, {"_id": 7, "f": [2.5, NAN]}]
NAN_CASES = [
    ({"f": NAN}, [1, 7]), ({"f": {"$eq": NAN}}, [1, 7]), ({"f": {"$gte": NAN}}, [1, 7]),
    ({"f": {"$lte": NAN}}, [1, 7]), ({"f": {"$gt": NAN}}, []), ({"f": {"$lt": NAN}}, []),
    ({"f": {"$ne": NAN}}, [2, 3, 4, 5, 6]), ({"f": {"$in": [NAN, 1.5]}}, [1, 2, 7]),
    ({"f": {"$nin": [NAN, None]}}, [2, 3, 6]), ({"f": {"$gt": 0}}, [2, 6, 7]), ({"f": {"$lt": 2}}, [2, 3]),
    ({"f": {"$gte": -math.inf}}, [2, 3, 6, 7]), ({"f": {"$not": {"$eq": NAN}}}, [2, 3, 4, 5, 6]),
    ({"$or": [{"f": {"$gt": 2}}, {"f": {"$eq": NAN}}]}, [1, 6, 7]),
]


@test()
def test_nan_comparisons(env):
    """NaN equals NaN and nothing else; $lt/$gt never match it, $lte/$gte only against NaN (mongod's
    ComparisonMatchExpression); with and without an index on the field."""
    coll = fresh(env, "nan_cmp")
    coll.insert_many(NAN_DOCS)
    for hint in (None, "f_1"):
        if hint:
            coll.create_index("f", name="f_1")
        for filt, expected in NAN_CASES:
            cursor = coll.find(filt).sort("_id", 1)
            got = [d["_id"] for d in (cursor.hint(hint) if hint else cursor)]
            check(got == expected, "hint %s, filter %s: %s, expected %s" % (hint, filt, got, expected))


SORT_NUMBER_DOCS = [{"_id": 1, "f": 1.5}, {"_id": 2, "f": NAN}, {"_id": 3, "f": -0.0}, {"_id": 4, "f": 0},
                    {"_id": 5, "f": float("inf")}, {"_id": 6, "f": float("-inf")}, {"_id": 7, "f": None},
                    {"_id": 8}, {"_id": 9, "f": Decimal128("NaN")}, {"_id": 10, "f": Int64(2 ** 53)},
                    {"_id": 11, "f": float(2 ** 53 - 1)}, {"_id": 12, "f": Decimal128("-Infinity")},
                    {"_id": 13, "f": Decimal128("1.25")}, {"_id": 14, "f": 2 ** 53 + 1}]
# mongod's ascending order (src/mongo/bson/bsonelement.cpp, compareElementValues; the documented
# comparison order): undefined, then null and missing alike, then NaN (double or decimal) below every
# number, numbers by exact value across int32/int64/double/decimal128 (-0 equal to 0)
SORT_NUMBER_GROUPS = [{15}, {7, 8}, {2, 9}, {6, 12}, {3, 4}, {13}, {1}, {11}, {10}, {14}, {5}]


def _grouped(ids, groups):
    """Whether `ids` runs through `groups` in order, each group's members in any order."""
    at = 0
    for group in groups:
        if set(ids[at:at + len(group)]) != group:
            return False
        at += len(group)
    return at == len(ids)


@test()
def test_sort_numbers_nan_and_nulls(env):
    """Sorts place undefined, null/missing, NaN and numbers as mongod, ascending and descending, with and
    without an index on the field; the FDW's parts of a float sort ($nin: [null, NaN], {f: NaN}) split
    them without overlap."""
    coll = fresh(env, "sort_num")
    coll.insert_many(SORT_NUMBER_DOCS + [_undefined_doc(15, b"\x06f\x00")])
    for hint in (None, "f_1"):
        if hint:
            coll.create_index("f", name="f_1")
        for direction in (1, -1):
            cursor = coll.find().sort("f", direction)
            got = [d["_id"] for d in (cursor.hint(hint) if hint else cursor)]
            groups = SORT_NUMBER_GROUPS if direction == 1 else SORT_NUMBER_GROUPS[::-1]
            check(_grouped(got, groups), "hint %s, direction %d: %s" % (hint, direction, got))
        cursor = coll.find({"f": {"$nin": [None, NAN], "$not": {"$type": "undefined"}}}).sort("f", 1)
        got = [d["_id"] for d in (cursor.hint(hint) if hint else cursor)]
        check(_grouped(got, SORT_NUMBER_GROUPS[3:]), "hint %s, numbers: %s" % (hint, got))
        got = sorted(d["_id"] for d in coll.find({"f": NAN}))
        check(got == [2, 9], "hint %s, NaNs: %s" % (hint, got))


EXPR_DOCS = [{"_id": 1, "a": 1, "b": 2}, {"_id": 2, "a": Int64(3), "b": 2.0}, {"_id": 3, "a": None, "b": 2},
             {"_id": 4, "b": 2}, {"_id": 5, "a": Int64(5), "b": 5.0}, {"_id": 6, "a": NAN, "b": 1.0},
             {"_id": 7, "a": NAN, "b": NAN}, {"_id": 8, "a": 2 ** 53 + 1, "b": float(2 ** 53)}]
EXPR_CASES = [
    ({"$lt": ["$a", "$b"]}, [1, 3, 4, 6]),  # null, missing and NaN sort below numbers
    ({"$gt": ["$a", "$b"]}, [2, 8]),  # int64 against double: exact
    ({"$eq": ["$a", "$b"]}, [5, 7]), ({"$ne": ["$a", "$b"]}, [1, 2, 3, 4, 6, 8]),
    ({"$lte": ["$a", None]}, [3, 4]), ({"$eq": ["$a", NAN]}, [6, 7]),
    ({"$and": [{"$ne": ["$a", NAN]}, {"$or": [{"$eq": ["$b", NAN]}, {"$lt": ["$a", "$b"]}]}]}, [1, 3, 4]),
    ({"$not": [{"$gte": ["$a", "$b"]}]}, [1, 3, 4, 6]), ({"$eq": ["$c.d", "$e"]}, [1, 2, 3, 4, 5, 6, 7, 8]),
]


@test()
def test_expr_comparisons(env):
    """$expr compares in BSON order: numbers by value (int64 against double exactly), NaN equal to NaN and
    below every number, null and missing below both; with a query operator next to it."""
    coll = fresh(env, "expr_cmp")
    coll.insert_many(EXPR_DOCS)
    for expr, expected in EXPR_CASES:
        got = sorted(d["_id"] for d in coll.find({"$expr": expr}))
        check(got == expected, "$expr %s: %s, expected %s" % (expr, got, expected))
    got = sorted(d["_id"] for d in coll.find({"a": {"$ne": None, "$not": {"$type": "undefined"}},
                                              "$expr": {"$lt": ["$a", "$b"]}}))
    check(got == [1, 6], got)
    check(coll.count_documents({"$or": [{"_id": 1}, {"$expr": {"$gt": ["$a", "$b"]}}]}) == 3)
    # arithmetic: null or missing gives null, integers exact, int64 overflow widens to double; $or stops at
    # its first true operand, so the $add after it never sees the string
    coll.insert_many([{"_id": 20, "a": Int64(2 ** 63 - 1), "b": 1}, {"_id": 21, "a": "s", "b": 1},
                      {"_id": 22, "a": 2 ** 31 - 1, "b": 2 ** 31}])
    for expr, expected in [
            ({"$eq": [{"$add": ["$a", 1]}, "$b"]}, [1, 7, 22]),
            ({"$lt": [{"$subtract": ["$b", "$a"]}, 0]}, [2, 3, 4, 6, 7, 20]),
            ({"$gt": [{"$add": ["$a", "$b"]}, 2 ** 63 - 1]}, [20]),
            ({"$or": [{"$eq": [{"$type": "$a"}, "x"]}, {"$gt": [{"$add": ["$a", 1]}, 0]}]}, None)]:
        if expected is None:
            expect_error(168, lambda: list(coll.find({"$expr": expr})))
            continue
        got = sorted(d["_id"] for d in coll.find({"_id": {"$ne": 21}, "$expr": expr}))
        check(got == expected, "$expr %s: %s, expected %s" % (expr, got, expected))
    got = sorted(d["_id"] for d in coll.find({"$expr": {"$or": [{"$gt": ["$a", 10 ** 6]},
                                                                {"$gt": [{"$add": ["$a", 1]}, 2]}]}}))
    check(got == [2, 5, 8, 20, 21, 22], got)


@test(own=True)
def test_expr_refuses_what_it_does_not_emulate(env):
    coll = fresh(env, "expr_refuse")
    coll.insert_one({"_id": 1, "a": 1})
    expect_error(168, lambda: list(coll.find({"$expr": {"$multiply": ["$a", 2]}})))
    expect_error(16554, lambda: list(coll.find({"$expr": {"$add": ["$_id", "$a", "x"]}})))


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


def _get_more(db, coll, cursor_id, batch_size=None):
    """One getMore of a command cursor; returns its `cursor` sub-document."""
    cmd = SON([("getMore", Int64(cursor_id)), ("collection", coll)])
    if batch_size is not None:
        cmd["batchSize"] = batch_size
    return db.command(cmd)["cursor"]


@test(own=True)
def test_counters_follow_the_batches(env):
    """As mongod runs a query lazily, a streaming plan (index order, or no sort) counts the keys and
    documents each batch needed: the first batch up to its last document, a getMore likewise, the batch
    that exhausts the cursor the rest; a killed cursor or a single batch nothing more. A blocking sort
    counts everything with the first batch, as mongod's SORT stage reads all before returning."""
    env.big()
    perf = env.client.perf
    ordered = {"find": "big", "filter": {"k": {"$gte": 0}}, "sort": {"k": 1}, "batchSize": 10}
    replies = []
    keys, docs = env.examined(lambda: replies.append(perf.command(SON(ordered))["cursor"]))
    first = replies[-1]
    check([d["k"] for d in first["firstBatch"]] == list(range(10)) and first["id"] != 0, first["id"])
    check((keys, docs) == (10, 10), "first batch of 10: %s" % ((keys, docs),))
    keys, docs = env.examined(lambda: replies.append(_get_more(perf, "big", first["id"], 25)))
    check([d["k"] for d in replies[-1]["nextBatch"]] == list(range(10, 35)), "the next 25")
    check((keys, docs) == (25, 25), "getMore of 25: %s" % ((keys, docs),))
    keys, docs = env.examined(lambda: replies.append(_get_more(perf, "big", first["id"])))
    check(len(replies[-1]["nextBatch"]) == BIG - 35 and replies[-1]["id"] == 0, "the rest, exhausted")
    check((keys, docs) == (BIG - 35, BIG - 35), "exhausting getMore: %s" % ((keys, docs),))
    # a residual filter: the batch counts the keys and documents it rejected on its way too
    keys, docs = env.examined(lambda: replies.append(perf.command(
        "find", "big", filter={"g": 7, "u": {"$gte": 500}}, batchSize=10)["cursor"]))
    check([d["_id"] for d in replies[-1]["firstBatch"]] == [507 + 100 * i for i in range(10)], "g = 7 from 507")
    check((keys, docs) == (15, 15), "5 rejected, then 10: %s" % ((keys, docs),))
    perf.command("killCursors", "big", cursors=[replies[-1]["id"]])
    # a killed cursor counts nothing more, and cannot be read on
    keys, docs = env.examined(lambda: replies.append(perf.command(SON(ordered))["cursor"]))
    check((keys, docs) == (10, 10), (keys, docs))
    keys, docs = env.examined(lambda: perf.command("killCursors", "big", cursors=[replies[-1]["id"]]))
    check((keys, docs) == (0, 0), "killCursors: %s" % ((keys, docs),))
    expect_error(43, _get_more, perf, "big", replies[-1]["id"])
    keys, docs = env.examined(lambda: replies.append(perf.command(SON(ordered, singleBatch=True))["cursor"]))
    check((keys, docs) == (10, 10) and replies[-1]["id"] == 0, "a single batch: %s" % ((keys, docs),))
    # a blocking sort (no index gives it) counts everything at the first batch, nothing at a getMore
    keys, docs = env.examined(lambda: replies.append(perf.command(
        "find", "big", filter={"u": {"$gte": 0}}, sort={"u": -1}, batchSize=10)["cursor"]))
    check([d["u"] for d in replies[-1]["firstBatch"]] == [BIG - 1 - i for i in range(10)], "sorted by u")
    check((keys, docs) == (0, BIG), "blocking sort: %s" % ((keys, docs),))
    keys, docs = env.examined(lambda: _get_more(perf, "big", replies[-1]["id"], 10))
    check((keys, docs) == (0, 0), "getMore after a blocking sort: %s" % ((keys, docs),))
    perf.command("killCursors", "big", cursors=[replies[-1]["id"]])
    # explain reports a full run
    plan = perf.command("explain", SON(ordered))
    check(plan["executionStats"]["totalKeysExamined"] == BIG, plan["executionStats"])
    # an aggregate of $match and $sort only streams as a find; one that groups reads everything at once
    agg = {"aggregate": "big", "pipeline": [{"$match": {"k": {"$gte": 0}}}, {"$sort": {"k": 1}}],
           "cursor": {"batchSize": 10}}
    keys, docs = env.examined(lambda: replies.append(perf.command(SON(agg))["cursor"]))
    check((keys, docs) == (10, 10), "aggregate $match, $sort: %s" % ((keys, docs),))
    keys, docs = env.examined(lambda: _get_more(perf, "big", replies[-1]["id"], 10))
    check((keys, docs) == (10, 10), "its getMore: %s" % ((keys, docs),))
    perf.command("killCursors", "big", cursors=[replies[-1]["id"]])
    agg["pipeline"] = [agg["pipeline"][0], {"$group": {"_id": "$g", "n": {"$sum": 1}}}]
    keys, docs = env.examined(lambda: replies.append(perf.command(SON(agg))["cursor"]))
    check(len(replies[-1]["firstBatch"]) == 10 and (keys, docs) == (BIG, BIG),
          "aggregate with $group: %s" % ((keys, docs),))
    perf.command("killCursors", "big", cursors=[replies[-1]["id"]])


@test(own=True)
def test_counters_batch_left_by_the_byte_cap(env):
    """When the 16 MB cap leaves a document for the next batch, mongod has already fetched it (and stashes
    it): the first batch counts it, the next batch starts after it."""
    coll = fresh(env, "capped_batch")
    coll.insert_many([{"_id": i, "s": "x" * 1000000} for i in range(20)])
    db = env.client.t
    replies = []
    keys, docs = env.examined(lambda: replies.append(db.command("find", "capped_batch", sort={"_id": 1})["cursor"]))
    n = len(replies[-1]["firstBatch"])
    check(n == 16 and replies[-1]["id"] != 0, "16 documents of 1 MB fill the first batch: %d" % n)
    check((keys, docs) == (n + 1, n + 1), "the first batch and the one stashed: %s" % ((keys, docs),))
    keys, docs = env.examined(lambda: replies.append(_get_more(db, "capped_batch", replies[-1]["id"], 2)))
    check((keys, docs) == (1, 1), "a getMore of 2 after the stashed one: %s" % ((keys, docs),))
    db.command("killCursors", "capped_batch", cursors=[replies[-1]["id"]])


@test(own=True)
def test_counters_count_reads_keys_only(env):
    """A count whose filter one index expresses exactly examines keys only (mongod's COUNT_SCAN)."""
    coll = env.big()
    perf = env.client.perf
    n = []
    keys, docs = env.examined(lambda: n.append(perf.command("count", "big", query={"g": 7})["n"]))
    check(n == [BIG // 100] and (keys, docs) == (BIG // 100, 0), (n, keys, docs))
    n.clear()
    keys, docs = env.examined(lambda: n.append(perf.command("count", "big", query={"k": {"$gte": 10, "$lt": 20}})["n"]))
    check(n == [10] and (keys, docs) == (10, 0), (n, keys, docs))
    n.clear()
    keys, docs = env.examined(lambda: n.append(perf.command("count", "big", query={"g": {"$in": [3, 4]}})["n"]))
    check(n == [2 * BIG // 100] and (keys, docs) == (2 * BIG // 100, 0), (n, keys, docs))
    n.clear()
    keys, docs = env.examined(lambda: n.append(perf.command("count", "big", query={"g": {"$eq": 5}}, skip=995)["n"]))
    check(n == [5] and docs == 0, (n, keys, docs))
    # a predicate the index does not express needs the documents
    n.clear()
    keys, docs = env.examined(lambda: n.append(perf.command("count", "big", query={"g": 7, "u": {"$lt": 1000}})["n"]))
    check(n == [10] and (keys, docs) == (BIG // 100, BIG // 100), (n, keys, docs))
    n.clear()
    keys, docs = env.examined(lambda: n.append(perf.command("count", "big", query={"g": None})["n"]))
    check(n == [0] and (keys, docs) == (0, 0), (n, keys, docs))
    plan = perf.command("explain", {"count": "big", "query": {"g": 7}})
    check(plan["queryPlanner"]["winningPlan"] == {
        "stage": "COUNT", "inputStage": {"stage": "COUNT_SCAN", "indexName": "g_1", "keyPattern": {"g": 1},
                                         "isMultiKey": False}}, plan["queryPlanner"])
    check(plan["executionStats"]["totalKeysExamined"] == BIG // 100)
    check(plan["executionStats"]["totalDocsExamined"] == 0)
    plan = perf.command("explain", {"count": "big", "query": {"g": {"$in": [1, 2]}}})
    check(plan["queryPlanner"]["winningPlan"]["inputStage"]["stage"] == "IXSCAN")
    check(plan["executionStats"]["totalDocsExamined"] == 0)
    plan = perf.command("explain", {"count": "big", "query": {"g": 7, "u": 7}})
    check(plan["executionStats"]["totalDocsExamined"] == BIG // 100, plan["executionStats"])


@test()
def test_count_multikey_and_collation_read_documents(env):
    """Counts on a multikey index, or under a collation the index lacks, examine the documents."""
    coll = fresh(env, "cnt")
    coll.insert_many([{"_id": 1, "a": [1, 2]}, {"_id": 2, "a": 1}, {"_id": 3, "a": "x"}, {"_id": 4, "a": "X"}])
    coll.create_index("a")
    check(env.client.t.command("count", "cnt", query={"a": 1})["n"] == 2)
    check(env.client.t.command("count", "cnt", query={"a": "x"},
                               collation={"locale": "en", "strength": 2})["n"] == 2)
    plan = env.client.t.command("explain", {"count": "cnt", "query": {"a": 1}})
    check(plan["executionStats"]["totalDocsExamined"] > 0, plan)


@test(own=True)
def test_performance_100k(env):
    coll = env.big()
    started = env.work_seconds()
    for i in range(200):
        coll.find_one({"_id": i * 431})
    lookup_ms = (env.work_seconds() - started) / 200 * 1000
    started = env.work_seconds()
    n = sum(1 for _ in coll.find())
    scan_rate = n / max(env.work_seconds() - started, 1e-3)
    print("    CPU of server and client: insert %d docs: %.2f s; _id lookup: %.2f ms; full scan: %.0f docs/s"
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


def sharded(env, name, key):
    """A fresh collection t.<name> flagged as sharded on `key` (mongos's admin command)."""
    coll = fresh(env, name)
    env.client.admin.command("shardCollection", "t." + name, key=key)
    return coll


@test()
def test_shard_collection_flags_and_lists(env):
    coll = sharded(env, "shd_flag", {"region": 1, "n": 1})
    entry = env.client.config.collections.find_one({"_id": "t.shd_flag"})
    check(entry is not None and list(entry["key"].items()) == [("region", 1), ("n", 1)], str(entry))
    check(entry["unique"] is False)
    again = env.client.admin.command("shardCollection", "t.shd_flag", key={"region": 1, "n": 1})
    check(again["collectionsharded"] == "t.shd_flag")
    expect_error(23, env.client.admin.command, "shardCollection", "t.shd_flag", key={"n": 1})
    expect_error(13, env.client.t.command, "shardCollection", "t.shd_flag", key={"n": 1})
    expect_error(2, env.client.admin.command, "shardCollection", "t.shd_bad", key={"a": -1})
    expect_error(2, env.client.admin.command, "shardCollection", "t.shd_bad", key={})
    expect_error(73, env.client.admin.command, "shardCollection", "nodot", key={"a": 1})
    check(env.client.admin.command("enableSharding", "t")["ok"] == 1.0)
    coll.drop()
    check(env.client.config.collections.find_one({"_id": "t.shd_flag"}) is None, "drop forgets the key")
    coll.insert_one({"_id": 1})
    check(coll.find_one_and_delete({"_id": 1}) == {"_id": 1}, "a re-created collection is not sharded")


@test()
def test_sharded_find_and_modify_needs_the_shard_key(env):
    coll = sharded(env, "shd_fam", {"region": 1, "n": 1})
    coll.insert_many([{"_id": i, "region": "eu" if i % 2 else "us", "n": i, "v": 0} for i in range(6)])
    exc = expect_error(61, coll.find_one_and_update, {"_id": 1}, {"$set": {"v": 1}})
    check("must contain the shard key" in str(exc), str(exc))
    expect_error(61, coll.find_one_and_delete, {"_id": 1, "region": "eu"})
    expect_error(61, coll.find_one_and_update, {"_id": 1, "region": "eu", "n": {"$gte": 1}}, {"$set": {"v": 1}})
    expect_error(61, coll.find_one_and_update, {"_id": 1, "region": {"$in": ["eu"]}, "n": 1}, {"$set": {"v": 1}})
    before = coll.find_one_and_update({"_id": 1, "region": "eu", "n": 1}, {"$set": {"v": 1}})
    check(before == {"_id": 1, "region": "eu", "n": 1, "v": 0}, str(before))
    before = coll.find_one_and_update({"$and": [{"region": "us"}, {"n": {"$eq": 2}}]}, {"$set": {"v": 2}})
    check(before["_id"] == 2)
    check(coll.find_one_and_delete({"_id": 3, "region": "eu", "n": 3})["_id"] == 3)
    check(coll.count_documents({}) == 5 and coll.count_documents({"v": {"$gt": 0}}) == 2)
    plain = fresh(env, "shd_plain")
    plain.insert_one({"_id": 1, "region": "eu"})
    check(plain.find_one_and_delete({"_id": 1})["_id"] == 1, "an unsharded collection takes any filter")


@test()
def test_sharded_single_writes_need_the_shard_key_or_id(env):
    coll = sharded(env, "shd_one", {"region": 1, "n": 1})
    coll.insert_many([{"_id": i, "region": "eu" if i % 2 else "us", "n": i, "v": 0} for i in range(6)])
    check(coll.update_one({"_id": 1}, {"$set": {"v": 1}}).matched_count == 1, "exact _id")
    check(coll.update_one({"region": "us", "n": 2}, {"$set": {"v": 2}}).matched_count == 1, "full shard key")
    exc = expect_error(72, coll.update_one, {"region": "us"}, {"$set": {"v": 3}})
    check("{multi:false}" in str(exc), str(exc))
    expect_error(72, coll.update_one, {"_id": {"$in": [4]}}, {"$set": {"v": 3}})
    expect_error(61, coll.update_one, {"_id": 40}, {"$set": {"v": 3}}, upsert=True)
    check(coll.update_one({"_id": 40, "region": "eu", "n": 40}, {"$set": {"v": 3}}, upsert=True).upserted_id == 40)
    check(coll.update_many({"region": "us"}, {"$set": {"v": 9}}).matched_count == 3, "multi is not restricted")
    exc = expect_error(61, coll.delete_one, {"v": 9})
    check("single delete" in str(exc), str(exc))
    check(coll.delete_one({"_id": 0}).deleted_count == 1, "exact _id")
    check(coll.delete_one({"region": "us", "n": 2, "v": 9}).deleted_count == 1, "full shard key")
    check(coll.delete_many({"v": 9}).deleted_count == 1, "multi is not restricted")
    bulk = coll.bulk_write([pymongo.UpdateOne({"_id": 1, "region": "eu", "n": 1}, {"$set": {"v": 5}}),
                            pymongo.DeleteOne({"_id": 5})])
    check(bulk.modified_count == 1 and bulk.deleted_count == 1)
    check(sorted(d["_id"] for d in coll.find()) == [1, 3, 40])


@test()
def test_sharded_shard_key_change_rules(env):
    coll = sharded(env, "shd_change", {"region": 1, "n": 1})
    coll.insert_many([{"_id": i, "region": "eu", "n": i, "v": 0} for i in range(4)])
    plain = env.new_client(retryWrites=False).t.shd_change
    exc = expect_error(20, plain.update_one, {"_id": 1, "region": "eu", "n": 1}, {"$set": {"region": "us"}})
    check("retryWrites" in str(exc), str(exc))
    expect_error(20, plain.find_one_and_update, {"_id": 1, "region": "eu", "n": 1}, {"$set": {"n": 10}})
    expect_error(31025, coll.update_one, {"_id": 1}, {"$set": {"region": "us"}})
    expect_error(72, coll.update_many, {"region": "eu", "n": 0}, {"$set": {"region": "us"}})
    check(plain.update_one({"_id": 1}, {"$set": {"v": 1, "region": "eu"}}).modified_count == 1,
          "an update that keeps the shard key values is not restricted")
    check(coll.update_one({"_id": 2, "region": "eu", "n": 2}, {"$set": {"region": "us"}}).modified_count == 1,
          "a retryable write may change the shard key")
    plain_client = plain.database.client
    with plain_client.start_session() as session:
        with session.start_transaction():
            before = plain.find_one_and_update(
                {"_id": 3, "region": "eu", "n": 3}, {"$set": {"n": 30}}, session=session)
            check(before["n"] == 3)
    check(sorted((d["_id"], d["region"], d["n"]) for d in coll.find())
          == [(0, "eu", 0), (1, "eu", 1), (2, "us", 2), (3, "eu", 30)])
    plain_client.close()


@test(own=True)
def test_sigterm_exits_cleanly(env):
    server = env.start("shortlived")
    client = env.new_client(server.uri())
    client.t.x.insert_one({"_id": 1})
    env.servers.remove(server)
    check(server.stop() == 0, "exit code 0 after SIGTERM")


@test()
def test_fail_command_code_names(env):
    """An error injected by failCommand carries mongod's codeName for the codes the driver specification
    tests inject (src/mongo/base/error_codes.yml)."""
    fresh(env, "fpn")
    client = env.new_client(retryWrites=False)
    for code, name in ((11601, "Interrupted"), (24, "LockTimeout"), (50, "MaxTimeMSExpired"),
                       (267, "PreparedTransactionInProgress"), (246, "SnapshotUnavailable")):
        fail_point(env, {"times": 1}, failCommands=["insert"], errorCode=code)
        exc = expect_error(code, client.t.fpn.insert_one, {"x": 1})
        check(exc.details["codeName"] == name, exc.details)


# ---------------------------------------------------------------------------------- onPrimaryTransactionalWrite

def on_primary(env, mode, **data):
    """configureFailPoint onPrimaryTransactionalWrite (mongod's own); returns how often it fired under the
    previous configuration."""
    return env.client.admin.command("configureFailPoint", "onPrimaryTransactionalWrite", mode=mode,
                                    data=data)["count"]


@test()
def test_on_primary_write_configure(env):
    """The failpoint is accepted with mongod's data and refuses other types; only retryable writes fire it."""
    coll = fresh(env, "opc")
    try:
        expect_error(14, on_primary, env, "alwaysOn", closeConnection="after")
        expect_error(14, on_primary, env, "alwaysOn", failBeforeCommitExceptionCode="1")
        expect_error(2, env.client.admin.command, "configureFailPoint", "noSuchFailPoint", mode="alwaysOn")
        on_primary(env, "alwaysOn", failBeforeCommitExceptionCode=1)
        plain = env.new_client(retryWrites=False).t.opc  # no txnNumber: not a retryable write
        plain.insert_many([{"_id": 1}, {"_id": 2}])
        plain.update_one({"_id": 1}, {"$set": {"a": 1}})
        plain.delete_one({"_id": 2})
        check(on_primary(env, "off") == 0, "writes without txnNumber do not evaluate the failpoint")
        check(list(coll.find()) == [{"_id": 1, "a": 1}])
    finally:
        on_primary(env, "off")


@test()
def test_on_primary_write_close_connection(env):
    """closeConnection (the default): the write is committed and recorded, the connection is closed without
    a reply; the retry is recognised. An insert command's documents are committed together: one firing."""
    coll = fresh(env, "opw")
    client = env.new_client(retryWrites=False)
    try:
        with client.start_session() as s:
            on_primary(env, {"times": 1})
            docs = [{"_id": 1}, {"_id": 2}, {"_id": 3}]
            expect_network_error(retryable, client, s, "insert", "opw", 1, documents=docs)
            check(sorted(d["_id"] for d in coll.find()) == [1, 2, 3], "the insert was committed")
            again = retryable(client, s, "insert", "opw", 1, documents=docs)
            check(again["n"] == 3 and again["retriedStmtIds"] == [0, 1, 2], again)
            check(on_primary(env, {"times": 1}) == 1, "one firing for the three documents")
            updates = [{"q": {"_id": 1}, "u": {"$inc": {"n": 1}}}, {"q": {"_id": 2}, "u": {"$inc": {"n": 1}}}]
            expect_network_error(retryable, client, s, "update", "opw", 2, updates=updates)
            again = retryable(client, s, "update", "opw", 2, updates=updates)
            check(again["nModified"] == 2 and again["retriedStmtIds"] == [0, 1], again)
            check(on_primary(env, "off") == 1)
        # the driver's own retry, for every kind of retryable write
        client = env.new_client(retryWrites=True)
        for op in (lambda: client.t.opw.insert_many([{"_id": 4}, {"_id": 5}]),
                   lambda: client.t.opw.update_one({"_id": 4}, {"$inc": {"n": 1}}),
                   lambda: client.t.opw.find_one_and_update({"_id": 5}, {"$inc": {"n": 1}}),
                   lambda: client.t.opw.delete_one({"_id": 3})):
            on_primary(env, {"times": 1})
            op()
            check(on_primary(env, "off") == 1, "fired once")
    finally:
        on_primary(env, "off")
    check(sorted((d["_id"], d.get("n")) for d in coll.find()) == [(1, 1), (2, 1), (4, 1), (5, 1)])


@test()
def test_on_primary_write_fail_before_commit(env):
    """failBeforeCommitExceptionCode: the statement is rolled back and not recorded; it fails with that
    code (a write error at its index, or findAndModify's command error) and a retry executes it."""
    coll = fresh(env, "opf")
    coll.insert_many([{"_id": 0, "x": 0}, {"_id": 1, "x": 1}])
    client = env.new_client(retryWrites=False)
    try:
        with client.start_session() as s:
            # mongod's jstests/replsets/retryable_writes_failover.js-style check: the second statement fails
            on_primary(env, {"skip": 1}, closeConnection=False, failBeforeCommitExceptionCode=1)
            updates = [{"q": {"_id": 0}, "u": {"$inc": {"y": 1}}}, {"q": {"_id": 1}, "u": {"$inc": {"y": 1}}},
                       {"q": {"_id": 2}, "u": {"$set": {"y": 1}}, "upsert": True}]
            res = retryable(client, s, "update", "opf", 1, updates=updates)
            check(res["nModified"] == 1 and [(e["index"], e["code"]) for e in res["writeErrors"]] == [(1, 1)], res)
            check("Failing write for" in res["writeErrors"][0]["errmsg"], res)
            on_primary(env, "off")
            res = retryable(client, s, "update", "opf", 1, updates=updates)
            check(res["n"] == 3 and res["retriedStmtIds"] == [0] and res["upserted"] == [{"index": 2, "_id": 2}],
                  res)
            check([d.get("y") for d in coll.find()] == [1, 1, 1], "each statement applied once")
            # an upsert and a delete rolled back
            on_primary(env, "alwaysOn", closeConnection=False, failBeforeCommitExceptionCode=1)
            res = retryable(client, s, "update", "opf", 2,
                            updates=[{"q": {"_id": 3}, "u": {"$set": {"y": 3}}, "upsert": True}])
            check(res["n"] == 0 and "upserted" not in res and res["writeErrors"][0]["code"] == 1, res)
            res = retryable(client, s, "delete", "opf", 3, deletes=[{"q": {"_id": 0}, "limit": 1}])
            check(res["n"] == 0 and res["writeErrors"][0]["code"] == 1, res)
            expect_error(1, retryable, client, s, "findAndModify", "opf", 4, query={"_id": 1},
                         update={"$inc": {"y": 1}})
            # an insert batch: committed together fails, then one at a time: the first fails (ordered)
            res = retryable(client, s, "insert", "opf", 5, documents=[{"_id": 5}, {"_id": 6}])
            check(res["n"] == 0 and [e["index"] for e in res["writeErrors"]] == [0], res)
            res = retryable(client, s, "insert", "opf", 6, documents=[{"_id": 5}, {"_id": 6}], ordered=False)
            check(res["n"] == 0 and [e["index"] for e in res["writeErrors"]] == [0, 1], res)
            check(on_primary(env, "off") == 8, "fired for each write: 1 + 1 + 1 + (1 + 1) + (1 + 2)")
            check(sorted((d["_id"], d.get("y")) for d in coll.find()) == [(0, 1), (1, 1), (2, 1)],
                  "nothing the failing statements wrote remains")
            # after {times: 1} on the batch, its documents go in one at a time without firing
            on_primary(env, {"times": 1}, closeConnection=False, failBeforeCommitExceptionCode=1)
            res = retryable(client, s, "insert", "opf", 7, documents=[{"_id": 5}, {"_id": 6}])
            check(res["n"] == 2 and "writeErrors" not in res, res)
            again = retryable(client, s, "insert", "opf", 7, documents=[{"_id": 5}, {"_id": 6}])
            check(again["retriedStmtIds"] == [0, 1], "recorded one at a time: %r" % again)
            # a duplicate key in the batch: rolled back (no firing), then one at a time, each firing
            on_primary(env, "alwaysOn", closeConnection=False)
            res = retryable(client, s, "insert", "opf", 8, documents=[{"_id": 10}, {"_id": 5}, {"_id": 11}],
                            ordered=False)
            check(res["n"] == 2 and [(e["index"], e["code"]) for e in res["writeErrors"]] == [(1, 11000)], res)
            check(on_primary(env, "off") == 2, "fired for documents 0 and 2")
    finally:
        on_primary(env, "off")


@test()
def test_on_primary_write_transaction_commit(env):
    """In a transaction the failpoint is evaluated once, at the commit of a transaction that wrote."""
    coll = fresh(env, "opt")
    client = env.new_client(retryWrites=False)
    try:
        on_primary(env, "alwaysOn", closeConnection=False, failBeforeCommitExceptionCode=1)
        with client.start_session() as s:
            s.start_transaction()
            client.t.opt.insert_one({"_id": 1}, session=s)
            client.t.opt.insert_one({"_id": 2}, session=s)
            expect_error(1, s.commit_transaction)
        check(on_primary(env, "off") == 1, "not fired by the transaction's statements")
        check(coll.count_documents({}) == 0, "the failed commit aborted the transaction")
        with client.start_session() as s:  # a read-only transaction writes no oplog entry: no firing
            on_primary(env, "alwaysOn", failBeforeCommitExceptionCode=1)
            s.start_transaction()
            client.t.opt.find_one({}, session=s)
            s.commit_transaction()
            check(on_primary(env, {"times": 1}) == 0)
            s.start_transaction()
            client.t.opt.insert_one({"_id": 3}, session=s)
            s.commit_transaction()  # the connection closes after the commit; the driver's retry succeeds
        check(on_primary(env, "off") == 1)
    finally:
        on_primary(env, "off")
    check([d["_id"] for d in coll.find()] == [3])


@test(own=True)
def test_on_primary_write_rollback_journaled(env):
    """A statement rolled back by failBeforeCommitExceptionCode stays rolled back after a restart."""
    server, client = journaled_server(env, "oprj")
    client.t.r.insert_many([{"_id": 1, "n": 0}, {"_id": 2, "n": 0}])
    client.admin.command("configureFailPoint", "onPrimaryTransactionalWrite", mode={"skip": 1},
                         data={"closeConnection": False, "failBeforeCommitExceptionCode": 1})
    with client.start_session() as s:
        res = retryable(client, s, "update", "r", 1, updates=[{"q": {"_id": 1}, "u": {"$inc": {"n": 1}}},
                                                              {"q": {"_id": 2}, "u": {"$inc": {"n": 1}}}])
        check(res["nModified"] == 1, res)
        res = retryable(client, s, "delete", "r", 2, deletes=[{"q": {"_id": 1}, "limit": 1}])
        check(res["n"] == 0, res)
    server, client = kill_and_restart(env, server, "oprj2")
    check(list(client.t.r.find()) == [{"_id": 1, "n": 1}, {"_id": 2, "n": 0}], list(client.t.r.find()))
    env.servers.remove(server)
    check(server.stop() == 0)


@test()
def test_unsatisfiable_write_concern(env):
    """A one-member replica set cannot satisfy w > 1 or an unknown tag: mongod applies the write and replies
    with a writeConcernError (100 UnsatisfiableWriteConcern / 79 UnknownReplWriteConcern)."""
    from pymongo.errors import WriteConcernError
    from pymongo.write_concern import WriteConcern
    coll = fresh(env, "wcu")
    for w, code in ((2, 100), ("dc1", 79)):
        try:
            coll.with_options(write_concern=WriteConcern(w=w)).insert_one({"w": str(w)})
            raise AssertionError("expected a writeConcernError for w=%r" % (w,))
        except WriteConcernError as exc:
            check(exc.code == code and exc.details["codeName"] in ("UnsatisfiableWriteConcern",
                                                                   "UnknownReplWriteConcern"), exc.details)
    check(coll.count_documents({}) == 2, "the writes were applied")
    coll.with_options(write_concern=WriteConcern(w=1)).insert_one({"w": "1"})
    coll.with_options(write_concern=WriteConcern(w="majority")).insert_one({"w": "majority"})
    reply = env.client.t.command({"insert": "wcu", "documents": [{"w": 3}], "writeConcern": {"w": 3}})
    check(reply["writeConcernError"]["code"] == 100 and reply["n"] == 1, reply)
    with env.client.start_session() as session:
        session.start_transaction(write_concern=WriteConcern(w=3))
        coll.insert_one({"w": "txn"}, session=session)
        try:
            session.commit_transaction()
            raise AssertionError("expected a writeConcernError on commit")
        except WriteConcernError as exc:
            check(exc.code == 100, exc.details)
    check(coll.count_documents({"w": "txn"}) == 1, "the transaction committed")


# --- change streams (idxmongo/changestream.py, changelog.py) ---------------------------------------------

def drain(stream, n, timeout=5.0):
    """The next `n` events of a pymongo change stream (fails if they do not come within `timeout`)."""
    events = []
    deadline = time.time() + timeout
    while len(events) < n:
        check(time.time() < deadline, "only %d of %d events came: %s" % (len(events), n, events))
        event = stream.try_next()
        if event is not None:
            events.append(event)
    return events


@test()
def test_change_stream_crud_events(env):
    """insert, update (updateDescription from the documents), replace and delete events, in mongod's field
    order; a write that changes nothing has none; a multi-document write has one per document."""
    coll = fresh(env, "cs_crud")
    coll.insert_one({"_id": 0})
    with coll.watch(max_await_time_ms=200) as stream:
        coll.insert_one({"_id": 1, "a": 1, "arr": [1, 2, 3], "sub": {"x": 1, "y": 2}})
        coll.update_one({"_id": 1}, {"$set": {"a": 2, "sub.x": 5, "n": None}, "$unset": {"sub.y": 1},
                                     "$push": {"arr": 4}})
        coll.update_one({"_id": 1}, {"$set": {"a": 2}})  # changes nothing: no event
        coll.update_one({"_id": 1}, {"$pop": {"arr": 1}})
        coll.replace_one({"_id": 1}, {"b": 1})
        coll.delete_one({"_id": 1})
        coll.insert_many([{"_id": i} for i in range(10, 13)])
        coll.delete_many({"_id": {"$gte": 10}})
        events = drain(stream, 11)
        extra = stream.try_next()
        check(extra is None, "no more events: %s" % (extra,))
    ins, upd, pop, rep, dele = events[:5]
    check(list(ins) == ["_id", "operationType", "clusterTime", "wallTime", "fullDocument", "ns", "documentKey"],
          list(ins))
    check(ins["operationType"] == "insert" and ins["fullDocument"]["arr"] == [1, 2, 3], ins)
    check(ins["ns"] == {"db": "t", "coll": "cs_crud"} and ins["documentKey"] == {"_id": 1}, ins)
    check(isinstance(ins["clusterTime"], Timestamp) and set(ins["_id"]) == {"_data"}, ins)
    check(re.fullmatch("[0-9A-F]+", ins["_id"]["_data"]), ins["_id"])
    check(list(upd) == ["_id", "operationType", "clusterTime", "wallTime", "ns", "documentKey",
                        "updateDescription"], list(upd))
    check(upd["updateDescription"] == {"updatedFields": {"a": 2, "arr.3": 4, "sub.x": 5, "n": None},
                                       "removedFields": ["sub.y"], "truncatedArrays": []}, upd)
    check(pop["updateDescription"] == {"updatedFields": {}, "removedFields": [],
                                       "truncatedArrays": [{"field": "arr", "newSize": 3}]}, pop)
    check(rep["operationType"] == "replace" and rep["fullDocument"] == {"_id": 1, "b": 1}
          and "updateDescription" not in rep, rep)
    check(dele["operationType"] == "delete" and "fullDocument" not in dele and dele["documentKey"] == {"_id": 1},
          dele)
    check([e["operationType"] for e in events[5:]] == ["insert"] * 3 + ["delete"] * 3, events[5:])
    times = [e["clusterTime"] for e in events]
    check(times == sorted(times) and len(set(times)) == len(times), times)


@test()
def test_change_event_encoder_writes_what_codec_writes(env):
    """rawbson.py (the change events' encoder) writes byte for byte what codec.encode writes for a nested
    document, for every BSON type the server holds, and raises where it raises."""
    sys.path.insert(0, HERE)
    from bson.code import Code
    from bson.dbref import DBRef
    from bson.raw_bson import RawBSONDocument
    from idxmongo import codec, rawbson
    utc = datetime.timezone.utc
    values = [0, 1, -1, 2 ** 31 - 1, -2 ** 31, 2 ** 31, -2 ** 31 - 1, 2 ** 63 - 1, -2 ** 63, Int64(5), True, False,
              0.0, -0.0, 1.5, float("nan"), float("inf"), None, "", "text", "\u00e9\u4e2d\U0001f600",
              Timestamp(0, 0), Timestamp(2 ** 32 - 1, 7), datetime.datetime(1970, 1, 1),
              datetime.datetime(1969, 12, 31, 23, 59, 59, 999999), datetime.datetime(9999, 12, 31, 23, 59, 59, 999000),
              datetime.datetime(2020, 5, 6, 7, 8, 9, 123456, tzinfo=utc), codec.OutOfRangeDate(-2 ** 62),
              codec.UNDEFINED, Binary(b"ab", 0), Binary(b"", 2), Binary(b"x" * 16, 3), Binary(b"y" * 16, 4),
              Binary(b"z", 128), b"bytes", ObjectId(), Decimal128("1.5"), Regex("a.c", "i"), Code("x"),
              Code("y", {"s": 1}), MinKey(), MaxKey(), DBRef("c", 1), SON([("b", 1), ("a", 2)]),
              RawBSONDocument(bson.encode({"r": [1, "s"]})), [], [1, [2, [3, {"d": [None]}]]], (1, "t"),
              {"_id": 1, "a": {"_id": 2}}, {}, {"k\u00e9y": 1}]
    doc = {"e%d" % i: v for i, v in enumerate(values)}
    doc["all"] = list(values)
    doc["nested"] = {"lsid": {"id": Binary(b"u" * 16, 4)}, "deep": [{"x": values}]}
    for name, value in list(doc.items()) + [("whole", doc)]:
        check(rawbson.document({name: value}) == codec.encode({"e": {name: value}})[7:-1], (name, value))
    memo = {"lsid": (None, b"")}  # a stream's: one lsid's element reused while the same object recurs
    first, second = {"id": Binary(b"1" * 16, 4)}, {"id": Binary(b"2" * 16, 4)}
    for lsid in (first, first, second, first):
        event = {"txnNumber": Int64(1), "lsid": lsid, "_id": {"_data": "82"}, "fullDocument": doc}
        check(rawbson.document(event, memo) == codec.encode({"e": event})[7:-1], lsid)
    for bad in (2 ** 64, "\ud800", {1: 2}, {"a\x00b": 1}, object()):
        errors = []
        for encoder in (lambda d: rawbson.document(d), lambda d: codec.encode({"e": d})):
            try:
                encoder({"v": bad})
                errors.append(None)
            except Exception as exc:  # whatever bson raises, both raise it
                errors.append(type(exc))
        check(errors[0] == errors[1], (bad, errors))


@test()
def test_change_stream_waiter_sleeps_through_other_writes(env):
    """A waiting getMore (changelog.ChangeLog.wait) is woken by an entry it may return, not by the
    others, unless a twentieth of the history was written meanwhile."""
    sys.path.insert(0, HERE)
    from idxmongo.changelog import ChangeLog, Entry
    log = ChangeLog(Timestamp(1, 0), limit=100)
    seq = [0]

    def publish(coll, n=1):
        entries = []
        for _ in range(n):
            seq[0] += 1
            entry = Entry("insert", "t", coll, seq[0], {"_id": seq[0]})
            entry.stamp(Timestamp(10 + seq[0], 0), 0.0)
            entries.append(entry)
        log.publish(entries, 0.0)

    def waits(write):
        """How long a waiter for collection "a" slept while `write` ran (5 s at most)."""
        out = {}

        def waiter():
            start = time.monotonic()
            with log.cond:
                log.wait(lambda entry: entry.coll == "a", 5.0)
            out["slept"] = time.monotonic() - start
        thread = threading.Thread(target=waiter)
        thread.start()
        while not log.waiters:
            time.sleep(0.01)
        write()
        thread.join()
        return out["slept"]

    def others_then_a():
        publish("b", 4)  # under 100 / 20
        time.sleep(0.5)
        publish("a")
    check(0.4 < waits(others_then_a) < 4, "woken by its entry, not by the others")
    check(waits(lambda: publish("b", 5)) < 4, "woken after a twentieth of the history")
    check(not log.waiters)


@test()
def test_change_stream_starts_after_now_and_initial_aggregate_never_waits(env):
    """A stream without a start option sees nothing written before it opened; the aggregate answers at once
    with an empty first batch and a postBatchResumeToken; getMore keeps a non-zero cursor id."""
    coll = fresh(env, "cs_start")
    coll.insert_one({"_id": 1})
    started = time.time()
    reply = env.client.t.command("aggregate", "cs_start", pipeline=[{"$changeStream": {}}], cursor={})
    check(time.time() - started < 0.5, "the aggregate waited")
    cursor = reply["cursor"]
    check(cursor["firstBatch"] == [] and "postBatchResumeToken" in cursor and cursor["id"] != 0, cursor)
    check(list(cursor) == ["firstBatch", "postBatchResumeToken", "id", "ns"], list(cursor))
    more = env.client.t.command("getMore", cursor["id"], collection="cs_start", maxTimeMS=100)
    check(more["cursor"]["nextBatch"] == [] and more["cursor"]["id"] == cursor["id"], more)
    check(more["cursor"]["postBatchResumeToken"]["_data"] >= cursor["postBatchResumeToken"]["_data"], more)
    coll.insert_one({"_id": 2})
    more = env.client.t.command("getMore", cursor["id"], collection="cs_start", maxTimeMS=1000)
    batch = more["cursor"]["nextBatch"]
    check([e["documentKey"] for e in batch] == [{"_id": 2}], batch)
    check(more["cursor"]["postBatchResumeToken"] == batch[-1]["_id"], more)
    env.client.t.command("killCursors", "cs_start", cursors=[cursor["id"]])
    coll.insert_many([{"_id": i} for i in range(3, 6)])
    cursor = env.client.t.command("aggregate", "cs_start", pipeline=[{"$changeStream": {
        "startAfter": batch[-1]["_id"]}}], cursor={"batchSize": 2})["cursor"]
    check(len(cursor["firstBatch"]) == 2 and cursor["postBatchResumeToken"] == cursor["firstBatch"][-1]["_id"],
          "a batch cut short by batchSize ends with the PBRT of its last event: %s" % cursor)
    env.client.t.command("killCursors", "cs_start", cursors=[cursor["id"]])


@test()
def test_change_stream_await_data_timing(env):
    """getMore waits up to maxTimeMS (default 1 s) for an event, returns as soon as one is written, and
    does not block other connections meanwhile."""
    coll = fresh(env, "cs_wait")
    db = env.client.t
    cursor = db.command("aggregate", "cs_wait", pipeline=[{"$changeStream": {}}], cursor={})["cursor"]
    started = time.time()
    more = db.command("getMore", cursor["id"], collection="cs_wait", maxTimeMS=700)
    waited = time.time() - started
    check(more["cursor"]["nextBatch"] == [] and 0.65 <= waited < 1.5, waited)
    started = time.time()
    more = db.command("getMore", cursor["id"], collection="cs_wait")
    waited = time.time() - started
    check(0.95 <= waited < 2.0, "default maxTimeMS is 1 s: waited %.2f" % waited)
    timer = threading.Timer(0.3, lambda: env.client2.t.cs_wait.insert_one({"_id": 1}))
    timer.start()
    reads = []
    reader = threading.Thread(target=lambda: reads.append((env.client2.t.cs_wait.find_one({"_id": 9}),
                                                           time.time())))
    started = time.time()
    reader.start()
    more = db.command("getMore", cursor["id"], collection="cs_wait", maxTimeMS=5000)
    waited = time.time() - started
    timer.join()
    reader.join()
    check([e["documentKey"] for e in more["cursor"]["nextBatch"]] == [{"_id": 1}], more)
    check(0.25 <= waited < 1.5, "returned %.2f s after the getMore began" % waited)
    check(reads and reads[0][1] - started < 0.25, "another connection was blocked by the waiting getMore")
    db.command("killCursors", "cs_wait", cursors=[cursor["id"]])


@test()
def test_change_stream_resume_tokens_ordered_and_resume(env):
    """Resume tokens sort as strings in stream order; resumeAfter and startAfter give the events after the
    token, startAtOperationTime those at and after the time (inclusive)."""
    coll = fresh(env, "cs_resume")
    with coll.watch(max_await_time_ms=200) as stream:
        coll.insert_many([{"_id": i} for i in range(6)])
        events = drain(stream, 6)
    tokens = [e["_id"]["_data"] for e in events]
    check(tokens == sorted(tokens) and len(set(tokens)) == 6, tokens)
    with coll.watch(resume_after=events[2]["_id"], max_await_time_ms=200) as stream:
        check([e["documentKey"]["_id"] for e in drain(stream, 3)] == [3, 4, 5], "resumeAfter")
        check(stream.try_next() is None)
    with coll.watch(start_after=events[4]["_id"], max_await_time_ms=200) as stream:
        check([e["documentKey"]["_id"] for e in drain(stream, 1)] == [5], "startAfter")
    with coll.watch(start_at_operation_time=events[1]["clusterTime"], max_await_time_ms=200) as stream:
        check([e["documentKey"]["_id"] for e in drain(stream, 5)] == [1, 2, 3, 4, 5], "startAtOperationTime")


def raw_stream(db, pipeline, session=None, **spec):
    """The first reply of a database stream (aggregate: 1) with `spec` and the stages `pipeline`."""
    return db.command("aggregate", 1, pipeline=[{"$changeStream": spec}] + pipeline, cursor={},
                      session=session, codec_options=CODEC)["cursor"]


@test()
def test_change_stream_resume_after_an_event_its_match_leaves_out(env):
    """A resume (resumeAfter or startAfter) after the token of an event that the new stream's $match leaves
    out on a field mongod 5.1+ evaluates on the oplog (ns, operationType, documentKey, lsid...) fails with
    ChangeStreamFatalError 280, labelled NonResumableChangeStreamError, as mongod's scan passes the token's
    position without finding its event; so does a collection stream resumed after another collection's
    event. The same token resumes a stream that keeps its event, and a high-water mark resumes whatever the
    $match (PeerDB-io/peerdb issue 3246)."""
    db = env.client.get_database("t", codec_options=CODEC)
    a, b = fresh(env, "cs_shrink_a"), fresh(env, "cs_shrink_b")
    both = [{"$match": {"ns.coll": {"$in": [a.name, b.name]}}}]
    start = raw_stream(db, both)
    a.insert_one({"_id": 1})
    b.insert_one({"_id": 2})
    with env.client.start_session() as session:
        with session.start_transaction():
            b.insert_one({"_id": 3}, session=session)
        sess = session.session_id["id"]
    events = lsid_events(db, None, start["id"])
    check([e["documentKey"]["_id"] for e in events] == [1, 2, 3], events)
    tok_a, tok_b, tok_txn = (e["_id"] for e in events)
    only_b = [{"$match": {"ns.coll": {"$in": [b.name]}}}]
    for how in ("resumeAfter", "startAfter"):
        exc = expect_error(280, raw_stream, db, only_b, **{how: tok_a})
        check("NonResumableChangeStreamError" in (exc.details.get("errorLabels") or []), exc.details)
        check("the resume token was not found" in str(exc), str(exc))
    kept = raw_stream(db, only_b, resumeAfter=tok_b)
    check([e["documentKey"]["_id"] for e in kept["firstBatch"]] == [3], kept)
    check([e["documentKey"]["_id"] for e in raw_stream(db, both, resumeAfter=tok_a)["firstBatch"]] == [2, 3])
    # the fields mongod rewrites into its oplog scan
    expect_error(280, raw_stream, db, [{"$match": {"operationType": "delete"}}], resumeAfter=tok_b)
    expect_error(280, raw_stream, db, [{"$match": {"documentKey._id": {"$ne": 2}}}], resumeAfter=tok_b)
    expect_error(280, raw_stream, db, [{"$match": {"lsid.id": {"$nin": [sess]}}}], resumeAfter=tok_txn)
    expect_error(280, raw_stream, db, [{"$match": {"$or": [{"ns.coll": a.name}, {"operationType": "drop"}]}}],
                 resumeAfter=tok_b)
    check(len(raw_stream(db, [{"$match": {"lsid.id": {"$nin": [sess]}}}], resumeAfter=tok_a)["firstBatch"]) == 1)
    check(raw_stream(db, [{"$match": {"lsid.id": {"$in": [sess]}}}], resumeAfter=tok_txn)["firstBatch"] == [])
    # a predicate on a field the scan cannot see is left to the events: no 280 for it
    raw_stream(db, [{"$match": {"$or": [{"ns.coll": a.name}, {"fullDocument.x": 1}]}}], resumeAfter=tok_b)
    expect_error(280, lambda: a.watch(resume_after=tok_b).try_next())
    # a high-water mark: resumes after the shrink
    idle = raw_stream(db, [{"$match": {"ns.coll": a.name}}], resumeAfter=tok_a)
    hwm = db.command("getMore", idle["id"], collection="$cmd.aggregate", maxTimeMS=200,
                     codec_options=CODEC)["cursor"]["postBatchResumeToken"]
    check(hwm != tok_a, "an empty getMore moved the postBatchResumeToken past the last event")
    a.insert_one({"_id": 4})
    b.insert_one({"_id": 5})
    after = [e["documentKey"]["_id"] for e in raw_stream(db, only_b, resumeAfter=hwm)["firstBatch"]]
    check(after[-1:] == [5] and 4 not in after, after)


@test()
def test_retryable_write_operation_time_is_its_events_cluster_time(env):
    """A retryable write's reply has the operationTime of its change event's clusterTime (mongod writes
    config.transactions in the write's own storage transaction), so that a stream started at that time
    (startAtOperationTime, inclusive) has the write."""
    coll = fresh(env, "cs_retry_time")
    with env.client.start_session() as session:
        for write in (lambda: coll.insert_one({"_id": 1, "v": 0}, session=session),
                      lambda: coll.update_one({"_id": 1}, {"$set": {"v": 1}}, session=session),
                      lambda: coll.find_one_and_update({"_id": 1}, {"$set": {"v": 2}}, session=session),
                      lambda: coll.delete_one({"_id": 1}, session=session)):
            write()
            at = session.operation_time
            with coll.watch(start_at_operation_time=at, max_await_time_ms=200) as stream:
                first = drain(stream, 1)[0]
            check(first["clusterTime"] == at, (first, at))


def split_server(env, version):
    """A fresh server announcing mongod `version`, its client, and a collection with pre- and post-images
    holding a document of 9 MB."""
    server = env.start("split%s" % version.replace(".", ""), extra=["--server-version", version])
    client = env.new_client(server.uri())
    db = client.get_database("t", codec_options=CODEC)
    db.create_collection("big", changeStreamPreAndPostImages={"enabled": True})
    db.big.insert_one({"_id": 1, "a": "x" * (9 << 20)})
    return server, client, db


def large_update(db):
    """An update whose event with both images is over 16 MB (each document 9 MB) and a small one after it."""
    db.big.update_one({"_id": 1}, {"$set": {"a": "y" * (9 << 20)}})
    db.big.insert_one({"_id": 2})


IMAGES = {"fullDocument": "required", "fullDocumentBeforeChange": "required"}


@test(own=True)
def test_change_stream_event_over_16mb_fails_on_6_0(env):
    """On a server announcing 6.0 (the default) an event over 16 MB fails the getMore with BSONObjectTooLarge
    (10334), without the ResumableChangeStreamError label, and the cursor is gone; $changeStreamSplitLargeEvent
    is an unknown stage there (40324); the same event without the images is returned."""
    server, client, db = split_server(env, "6.0")
    try:
        check(client.admin.command("buildInfo")["version"] == "6.0.0")
        check(client.admin.command("hello")["maxWireVersion"] == 17)
        expect_error(40324, raw_stream, db, [{"$changeStreamSplitLargeEvent": {}}])
        start = raw_stream(db, [], **IMAGES)
        plain = raw_stream(db, [])
        large_update(db)
        exc = expect_error(10334, db.command, "getMore", start["id"], collection="$cmd.aggregate",
                           maxTimeMS=500)
        check("is invalid. Size must be between 0 and 16793600(16MB)" in str(exc)
              and not exc.details.get("errorLabels"), exc.details)
        expect_error(43, db.command, "getMore", start["id"], collection="$cmd.aggregate", maxTimeMS=100)
        got = lsid_events(db, None, plain["id"])
        check([e["operationType"] for e in got] == ["update", "insert"], [e["operationType"] for e in got])
    finally:
        client.close()
        server.stop()


@test(own=True)
def test_change_stream_split_large_event_on_7_0(env):
    """On a server announcing 7.0, $changeStreamSplitLargeEvent (the last stage, an empty spec) returns an
    event over 16 MB as fragments with splitEvent {fragment, of} and a resume token each, fields placed by
    size as mongod does; together they hold the event; a resume after a fragment returns the fragments
    after it, then the next event; mongod's refusals of the stage elsewhere."""
    server, client, db = split_server(env, "7.0")
    try:
        check(client.admin.command("buildInfo")["versionArray"][:2] == [7, 0])
        check(client.admin.command("hello")["maxWireVersion"] == 21)
        split = [{"$changeStreamSplitLargeEvent": {}}]
        expect_error(7182800, raw_stream, db, [{"$changeStreamSplitLargeEvent": {"x": 1}}])
        expect_error(7182802, raw_stream, db, split + [{"$match": {}}])
        start = raw_stream(db, split, **IMAGES)
        whole = raw_stream(db, [])
        large_update(db)
        got = lsid_events(db, None, start["id"], max_time_ms=500)
        frags = got[:-1]
        check([f["splitEvent"] for f in frags] == [{"fragment": i + 1, "of": 3} for i in range(3)],
              [f.get("splitEvent") for f in got])
        check(got[-1]["operationType"] == "insert" and "splitEvent" not in got[-1], got[-1].get("operationType"))
        sizes = [len(bson.encode(f)) for f in frags]
        check(all(size <= 16793600 - 8192 for size in sizes), sizes)
        check(frags[0]["operationType"] == "update" and frags[0]["ns"] == {"db": "t", "coll": "big"}
              and frags[0]["documentKey"] == {"_id": 1}, list(frags[0]))
        merged = {}
        for f in frags:
            merged.update({k: v for k, v in f.items() if k not in ("_id", "splitEvent")})
        check(merged["fullDocument"]["a"][0] == "y" and merged["fullDocumentBeforeChange"]["a"][0] == "x"
              and merged["updateDescription"]["updatedFields"]["a"][0] == "y", list(merged))
        tokens = [f["_id"]["_data"] for f in got]
        check(tokens == sorted(tokens) and len(set(tokens)) == 4, tokens)
        resumed = raw_stream(db, split, resumeAfter=frags[0]["_id"], **IMAGES)
        again = resumed["firstBatch"] + lsid_events(db, None, resumed["id"], max_time_ms=500)
        check([f.get("splitEvent") for f in again] == [{"fragment": 2, "of": 3}, {"fragment": 3, "of": 3}, None],
              [f.get("splitEvent") for f in again])
        last = raw_stream(db, split, resumeAfter=frags[2]["_id"], **IMAGES)
        check([e["documentKey"]["_id"] for e in last["firstBatch"]] == [2], last["firstBatch"][:1])
        expect_error(280, raw_stream, db, [], resumeAfter=frags[0]["_id"], **IMAGES)
        plain = lsid_events(db, None, whole["id"])
        check([e["operationType"] for e in plain] == ["update", "insert"], "small events are not split")
    finally:
        client.close()
        server.stop()


@test()
def test_change_stream_transaction_events_at_commit(env):
    """A transaction's writes appear at its commit, all with the commit's clusterTime, with txnNumber and
    lsid first, tokens ordered by txnOpIndex; an aborted transaction produces nothing."""
    coll = fresh(env, "cs_txn")
    other = fresh(env, "cs_txn_other")
    coll.insert_one({"_id": 0, "v": 0})
    with coll.watch(max_await_time_ms=200) as stream:
        with env.client.start_session() as session:
            session.start_transaction()
            coll.insert_one({"_id": 1}, session=session)
            other.insert_one({"_id": 1}, session=session)
            coll.update_one({"_id": 0}, {"$set": {"v": 1}}, session=session)
            coll.delete_one({"_id": 1}, session=session)
            check(stream.try_next() is None, "an event before the commit")
            session.commit_transaction()
            events = drain(stream, 3)
            session.start_transaction()
            coll.insert_one({"_id": 2}, session=session)
            session.abort_transaction()
        coll.insert_one({"_id": 3})
        after = drain(stream, 1)
    check([e["operationType"] for e in events] == ["insert", "update", "delete"], events)
    check(len({e["clusterTime"] for e in events}) == 1, [e["clusterTime"] for e in events])
    for event in events:
        check(list(event)[:3] == ["txnNumber", "lsid", "_id"] and isinstance(event["txnNumber"], Int64), event)
    tokens = [e["_id"]["_data"] for e in events]
    check(tokens == sorted(tokens) and len(set(tokens)) == 3, tokens)
    check(after[0]["documentKey"] == {"_id": 3} and "txnNumber" not in after[0], after)


def lsid_stream(db, session, colls, extra):
    """A database stream (aggregate: 1, as the applier opens it) of `colls` whose $match also holds
    `extra`, opened in `session`; returns its cursor id."""
    match = {"$or": [{"ns.coll": {"$in": colls}}, {"to.coll": {"$in": colls}}]}
    match.update(extra)
    return db.command("aggregate", 1, pipeline=[{"$changeStream": {}}, {"$match": match}], cursor={},
                      session=session, codec_options=CODEC)["cursor"]["id"]


def lsid_events(db, session, cursor_id, max_time_ms=300):
    """Every event a stream of lsid_stream returns until a getMore comes back empty."""
    events = []
    while True:
        batch = db.command("getMore", cursor_id, collection="$cmd.aggregate", maxTimeMS=max_time_ms,
                           session=session, codec_options=CODEC)["cursor"]["nextBatch"]
        if not batch:
            return events
        events.extend(batch)


def txn_writes(session, colls, ids):
    """A transaction in `session` inserting `ids` into every collection of `colls`, not committed."""
    session.start_transaction()
    for coll in colls:
        coll.insert_many([{"_id": i} for i in ids], session=session)


@test()
def test_change_stream_lsid_match_leaves_out_a_session(env):
    """A $match on lsid.id $nin [A] (ANDed with the namespaces, as the applier's) leaves out every event of
    a transaction in session A, whatever collections it wrote, and keeps session B's transactions and the
    writes outside transactions (whose events carry no lsid); lsid.id $in [A] gives exactly A's events,
    and txnNumber narrows them to one transaction (the verdict of one transaction is not reused for the
    next one of the session)."""
    db = env.client.t
    facts, index, other = fresh(env, "cs_ls_facts"), fresh(env, "cs_ls_index"), fresh(env, "cs_ls_other")
    names = [facts.name, index.name]
    with env.client.start_session() as a, env.client.start_session() as b, \
            env.client.start_session() as watcher:
        sess_a, sess_b = a.session_id["id"], b.session_id["id"]
        check(sess_a.subtype == 4, sess_a)
        left_out = lsid_stream(db, watcher, names, {"lsid.id": {"$nin": [sess_a]}})
        only_a = lsid_stream(db, watcher, names, {"lsid.id": {"$in": [sess_a]}})
        txn_writes(a, [facts, index, other], range(3))
        a.commit_transaction()
        txn_writes(b, [facts, index], range(10, 12))
        b.commit_transaction()
        facts.insert_one({"_id": 20})
        txn_writes(a, [index, facts], range(30, 32))
        a.commit_transaction()
        kept = lsid_events(db, watcher, left_out)
        got_a = lsid_events(db, watcher, only_a)
        start = got_a[0]["clusterTime"]
        numbers = sorted({e["txnNumber"] for e in got_a})
        check(len(numbers) == 2, numbers)
        one_txn = db.command("aggregate", 1, pipeline=[
            {"$changeStream": {"startAtOperationTime": start}},
            {"$match": {"ns.coll": {"$in": names}, "lsid.id": sess_a, "txnNumber": numbers[1]}}],
            cursor={}, session=watcher, codec_options=CODEC)["cursor"]
        second = one_txn["firstBatch"] + lsid_events(db, watcher, one_txn["id"])
        for cursor_id in (left_out, only_a, one_txn["id"]):
            db.command("killCursors", "$cmd.aggregate", cursors=[cursor_id], session=watcher)
    keys = [(e["ns"]["coll"], e["documentKey"]["_id"]) for e in kept]
    check(keys == [(facts.name, 10), (facts.name, 11), (index.name, 10), (index.name, 11), (facts.name, 20)],
          keys)
    check(all(e["lsid"]["id"] == sess_b for e in kept[:4]) and "lsid" not in kept[4], kept)
    keys = [(e["ns"]["coll"], e["documentKey"]["_id"]) for e in got_a]
    check(keys == [(facts.name, i) for i in range(3)] + [(index.name, i) for i in range(3)]
          + [(index.name, i) for i in (30, 31)] + [(facts.name, i) for i in (30, 31)], keys)
    check(all(e["lsid"]["id"] == sess_a for e in got_a), got_a)
    check([(e["ns"]["coll"], e["documentKey"]["_id"]) for e in second]
          == [(index.name, 30), (index.name, 31), (facts.name, 30), (facts.name, 31)], second)


@test()
def test_change_stream_lsid_match_does_not_wake_a_waiting_get_more(env):
    """A getMore waiting on a stream whose $match leaves session A out is not woken by A's commit: it
    returns empty after its maxTimeMS (2 s), or with B's events as soon as B commits meanwhile."""
    db = env.client.t
    facts = fresh(env, "cs_ls_wait")
    with env.client.start_session() as a, env.client.start_session() as b, \
            env.client.start_session() as watcher:
        cursor_id = lsid_stream(db, watcher, [facts.name], {"lsid.id": {"$nin": [a.session_id["id"]]}})
        txn_writes(a, [facts], range(300))
        timer = threading.Timer(0.3, a.commit_transaction)
        started = time.time()
        timer.start()
        more = db.command("getMore", cursor_id, collection="$cmd.aggregate", maxTimeMS=2000, session=watcher,
                          codec_options=CODEC)
        waited = time.time() - started
        timer.join()
        check(more["cursor"]["nextBatch"] == [] and 1.9 <= waited < 3.5,
              "woken by A's commit: %.2f s, %s" % (waited, more["cursor"]["nextBatch"][:1]))
        check(facts.count_documents({}) == 300, "A committed")
        txn_writes(a, [facts], range(300, 600))

        def in_b():  # after A's commit: this server runs one transaction at a time
            txn_writes(b, [facts], [1000])
            b.commit_transaction()
        timers = [threading.Timer(0.3, a.commit_transaction), threading.Timer(0.8, in_b)]
        started = time.time()
        for timer in timers:
            timer.start()
        more = db.command("getMore", cursor_id, collection="$cmd.aggregate", maxTimeMS=2000, session=watcher,
                          codec_options=CODEC)
        waited = time.time() - started
        for timer in timers:
            timer.join()
        batch = more["cursor"]["nextBatch"]
        check([e["documentKey"]["_id"] for e in batch] == [1000], batch)
        check(0.75 <= waited < 1.8, "returned %.2f s after the getMore began (B committed at 0.8 s)" % waited)
        db.command("killCursors", "$cmd.aggregate", cursors=[cursor_id], session=watcher)


@test()
def test_change_stream_lsid_filter_builds_no_event(env):
    """In the server's own code: a stream whose $match leaves five sessions out scans their 3,000-entry
    transactions without building one event, and none of their entries would wake a waiting getMore; the
    sixth session's events are all built and returned; the verdicts the stream caches stay bounded
    (EARLY_SEEN_MAX) over many sessions."""
    sys.path.insert(0, HERE)
    from idxmongo import changestream
    from idxmongo.changelog import ChangeLog, Entry
    log = ChangeLog(Timestamp(1, 0))
    sessions = [{"id": Binary(bytes([n]) * 16, 4)} for n in range(6)]
    for n, lsid in enumerate(sessions):
        entries = [Entry("insert", "t", "facts" if i % 3 else "facts.idx", i, {"_id": i}) for i in range(3000)]
        log.publish(changestream.stamp_commit(entries, Timestamp(10 + n, 1), 0.0, 1, lsid), 0.0)

    class Repl:  # a one-member set: every entry majority committed
        @staticmethod
        def stream_limit(member):
            return None

    class Server:
        changelog = log
        repl = Repl
    start = changestream.hwm_key(Timestamp(2, 0))
    stage = {"$match": {"ns.coll": {"$in": ["facts", "facts.idx"]},
                        "lsid.id": {"$nin": [s["id"] for s in sessions[:5]]}}}
    cursor = changestream.StreamCursor("t.$cmd.aggregate", "t", None, {}, [stage], start,
                                       changestream.token(start), None)
    built = []
    event, event_bson = changestream._event, changestream._event_bson  # the two ways an event is made
    limit = changestream.EARLY_SEEN_MAX
    changestream._event = lambda *args: built.append(1) or event(*args)
    changestream._event_bson = lambda *args: built.append(1) or event_bson(*args)
    changestream.EARLY_SEEN_MAX = 3
    try:
        batch = changestream._collect(Server, cursor, None)
    finally:
        changestream._event, changestream._event_bson = event, event_bson
        changestream.EARLY_SEEN_MAX = limit
    check(len(batch) == 3000 and len(built) == 3000, "events built: %d, returned: %d" % (len(built), len(batch)))
    check({bson.decode(e.raw, CODEC)["lsid"]["id"] for e in batch} == {sessions[5]["id"]})
    check(cursor.position == log.keys[-1] and len(cursor.early_seen) <= 3, cursor.early_seen)
    wakes = [changestream._may_return(cursor, entry) for entry in log.entries]  # what wakes a waiting getMore
    check(not any(wakes[:-3000]) and all(wakes[-3000:]), "woken by the sessions left out")


@test()
def test_change_stream_event_bson_as_built(env):
    """In the server's own code: an event written straight from its history entry (changestream._event_bson,
    for streams whose stages cannot change it) has exactly the bytes and the resume token of the event built
    as a document and encoded (_event, rawbson.document): every kind of entry, in and out of transactions,
    with pre- and post-images in each fullDocument mode, values of many BSON types and names; an entry
    whose wall time makes no date is left to the document path, which raises as before. Through the
    wire, a stream with a $match on operationType returns such events in mongod's field order."""
    sys.path.insert(0, HERE)
    from idxmongo import changestream, rawbson
    from idxmongo.changelog import Entry
    from idxmongo.codec import OutOfRangeDate
    from bson.raw_bson import RawBSONDocument
    odd = {"_id": ObjectId(), "s": "é\u2603", "big": 2 ** 40, "i64": Int64(3), "neg": -(2 ** 31) - 1, "f": -0.0,
           "nan": float("nan"), "b": True, "n": None, "d": datetime.datetime(2020, 1, 2, 3, 4, 5, 6000),
           "far": OutOfRangeDate(-(2 ** 62)), "dec": Decimal128("1.5"), "re": Regex("a.b", "im"),
           "bin": Binary(b"\x00\x01", 0), "uuid": Binary(bytes(16), 4), "old": Binary(b"xy", 2),
           "ts": Timestamp(5, 6), "min": MinKey(), "max": MaxKey(), "arr": [1, "x", [2.5, {"a": None}], ()],
           "sub": {"$odd.name": {"": 1}}, "ünï": SON([("z", 1), ("a", 2)]),
           "raw": RawBSONDocument(bson.encode({"r": 1}))}
    lsid = {"id": Binary(bytes(range(16)), 4), "uid": Binary(b"u" * 32, 0)}
    entries = []
    for doc_id in (7, -2 ** 31, 2 ** 31 - 1, 2 ** 31, "k", ObjectId(), {"a": 1, "b": [1, 2]}, 2.5, Int64(2 ** 40)):
        entries += [Entry("insert", "db", "c", doc_id, dict(odd, _id=doc_id)),
                    Entry("replace", "db", "c", doc_id, {"_id": doc_id, "v": 1}),
                    Entry("update", "db", "c", doc_id, desc={"updatedFields": {"a.0": odd, "x": 1},
                                                               "removedFields": ["y"], "truncatedArrays": []}),
                    Entry("delete", "db", "c", doc_id)]
    entries += [Entry("drop", "db", "c"), Entry("rename", "db", "c", to={"db": "db", "coll": "d"}),
                Entry("dropDatabase", "db", None)]
    for n, entry in enumerate(entries):
        entry.stamp(Timestamp(1700000000 + n, n + 1), 1700000000.123 + n * 7.0009, n % 3)
        if n % 2:
            entry.pre, entry.post = {"_id": 1, "pre": n}, {"_id": 1, "post": n}
    in_txn = [Entry("insert", "db", "c", i, {"_id": i}) for i in range(3)]
    for entry in changestream.stamp_commit(in_txn, Timestamp(1800000000, 1), 1800000000.5, 4, lsid):
        entries.append(entry)
    entries.append(changestream.stamp_commit([Entry("delete", "db", "c", 9)], Timestamp(1800000001, 1),
                                             1800000001.0, 5, dict(lsid))[0])
    specs = [{}, {"fullDocument": "whenAvailable", "fullDocumentBeforeChange": "whenAvailable"},
             {"fullDocument": "required", "fullDocumentBeforeChange": "required"}]
    compared = 0
    for spec in specs:
        direct = changestream.StreamCursor("db.$cmd.aggregate", "db", None, spec, [], None, None, None)
        built = changestream.StreamCursor("db.$cmd.aggregate", "db", None, spec, [], None, None, None)
        for entry in entries:
            try:
                doc = changestream._event(None, built, entry)
                expected = (doc["_id"], rawbson.document(doc, built.memo))
            except Exception as exc:  # noqa: BLE001 (a required image missing: the same error both ways)
                expected = (type(exc), str(exc))
            try:
                got = changestream._event_bson(None, direct, entry)
            except Exception as exc:  # noqa: BLE001
                got = (type(exc), str(exc))
            check(got == expected, "%s %s: %r != %r" % (spec, entry.op, got, expected))
            compared += 1
    check(compared == 3 * len(entries), compared)
    late = Entry("insert", "db", "c", 1, {"_id": 1})
    late.stamp(Timestamp(1, 1), 1e13)
    check(changestream._event_bson(None, direct, late) is None, "a wall time past year 9999 goes the document way")
    db = env.client.t
    coll = fresh(env, "cs_bson")
    pipeline = [{"$changeStream": {}}, {"$match": {"operationType": "insert"}}]
    cursor = db.command("aggregate", "cs_bson", pipeline=pipeline, cursor={})["cursor"]
    coll.insert_many([{k: v for k, v in dict(odd, _id=i).items() if k not in ("far", "sub")} for i in range(3)])
    batch = db.command("getMore", cursor["id"], collection="cs_bson", maxTimeMS=1000)["cursor"]["nextBatch"]
    check([e["fullDocument"]["_id"] for e in batch] == [0, 1, 2], batch)
    check(list(batch[0]) == ["_id", "operationType", "clusterTime", "wallTime", "fullDocument", "ns", "documentKey"],
          batch[0])


@test()
def test_index_seek_as_irange(env):
    """In the server's own code: query._seek (a point interval's entries, from one seek) yields what
    SortedList.irange yields for the same bounds, over compound keys with duplicates, prefixes, and
    bounds before, inside and past the entries, across the list's sublists."""
    sys.path.insert(0, HERE)
    from sortedcontainers import SortedList
    from idxmongo import query
    from idxmongo.bsonkeys import sort_key
    rng = random.Random(11)
    for size in (0, 1, 5, 3000):
        entries = SortedList()
        entries._reset(16)  # small sublists, so that scans cross them
        for n in range(size):
            entries.add(((sort_key(rng.randrange(40)), sort_key(rng.choice("abc"))), sort_key(n)))
        for value in list(range(-1, 42)) + ["x"]:
            for point in ((sort_key(value),), (sort_key(value), sort_key("b"))):
                first, end = query._interval_bounds((point, True, point, True))
                got = list(query._seek(entries, first, end))
                check(got == list(entries.irange(first, end, (True, False))), (size, point))


@test()
def test_change_stream_invalidate_on_drop_and_rename(env):
    """drop and renameCollection of a collection stream's collection: the event, then invalidate (only _id,
    operationType, clusterTime, wallTime) and cursor id 0 with the invalidate token as PBRT; startAfter
    accepts that token (resumeAfter gives 260) and the stream sees the next collection of the name."""
    db = env.client.t
    coll = fresh(env, "cs_inv")
    coll.insert_one({"_id": 0})
    cursor = db.command("aggregate", "cs_inv", pipeline=[{"$changeStream": {}}], cursor={})["cursor"]
    coll.drop()
    reply = db.command("getMore", cursor["id"], collection="cs_inv", maxTimeMS=1000)["cursor"]
    batch = reply["nextBatch"]
    check([e["operationType"] for e in batch] == ["drop", "invalidate"], batch)
    check(list(batch[1]) == ["_id", "operationType", "clusterTime", "wallTime"], batch[1])
    check(batch[0]["ns"] == {"db": "t", "coll": "cs_inv"} and batch[1]["_id"]["_data"] > batch[0]["_id"]["_data"],
          batch)
    check(reply["id"] == 0 and reply["postBatchResumeToken"] == batch[1]["_id"], reply)
    expect_error(43, db.command, "getMore", cursor["id"], collection="cs_inv")
    expect_error(260, lambda: coll.watch(resume_after=batch[1]["_id"]))
    with coll.watch(start_after=batch[1]["_id"], max_await_time_ms=200) as stream:
        coll.insert_one({"_id": 1})
        check([e["documentKey"] for e in drain(stream, 1)] == [{"_id": 1}], "startAfter an invalidate")
    with coll.watch(max_await_time_ms=200) as stream:
        env.client.admin.command("renameCollection", "t.cs_inv", to="t.cs_inv2")
        events = drain(stream, 2)
        check(not stream.alive, "the stream is closed after invalidate")
    check(list(events[0])[0] == "to" and events[0]["to"] == {"db": "t", "coll": "cs_inv2"}, events[0])
    check([e["operationType"] for e in events] == ["rename", "invalidate"], events)
    check(env.client.t.cs_inv2.find_one() == {"_id": 1} and "cs_inv" not in db.list_collection_names(), "renamed")
    env.client.t.cs_inv3.insert_one({"_id": 3})
    expect_error(48, env.client.admin.command, "renameCollection", "t.cs_inv2", to="t.cs_inv3")
    expect_error(13, env.client.t.command, "renameCollection", "t.cs_inv2", to="t.cs_inv3")
    env.client.admin.command("renameCollection", "t.cs_inv2", to="t.cs_inv3", dropTarget=True)
    check(list(env.client.t.cs_inv3.find()) == [{"_id": 1}], "dropTarget")
    env.client.t.cs_inv3.drop()


@test()
def test_change_stream_database_and_cluster_level(env):
    """A database stream (aggregate: 1, ns db.$cmd.aggregate) sees every collection of its database but
    system.*, drops and renames without invalidating, and is invalidated by dropDatabase after one drop per
    collection; a cluster stream on admin (allChangesForCluster) sees every database and never invalidates."""
    client = env.client
    client.drop_database("csdb")
    cdb = client.csdb
    cdb.a.insert_one({"_id": 0})
    cluster = client.watch(max_await_time_ms=200)
    with cdb.watch(max_await_time_ms=200) as stream:
        cdb.a.insert_one({"_id": 1})
        cdb.b.insert_one({"_id": 2})
        client.t.other_db.insert_one({"_id": 3})
        cdb.b.drop()
        client.drop_database("csdb")
        events = drain(stream, 6)
        check(not stream.alive, "dropDatabase invalidates a database stream")
    kinds = [(e["operationType"], e.get("ns")) for e in events]
    check(kinds == [("insert", {"db": "csdb", "coll": "a"}), ("insert", {"db": "csdb", "coll": "b"}),
                    ("drop", {"db": "csdb", "coll": "b"}), ("drop", {"db": "csdb", "coll": "a"}),
                    ("dropDatabase", {"db": "csdb"}), ("invalidate", None)], kinds)
    seen = [(e["operationType"], e["ns"].get("coll")) for e in drain(cluster, 6)]
    check(("insert", "other_db") in seen and seen[-1] == ("dropDatabase", None), seen)
    client.t.other_db.insert_one({"_id": 4})
    check(drain(cluster, 1)[0]["documentKey"] == {"_id": 4}, "the cluster stream goes on")
    cluster.close()
    reply = cdb.command("aggregate", 1, pipeline=[{"$changeStream": {}}], cursor={})["cursor"]
    check(reply["ns"] == "csdb.$cmd.aggregate", reply)
    cdb.command("killCursors", "$cmd.aggregate", cursors=[reply["id"]])
    client.t.other_db.drop()


@test()
def test_change_stream_legality_errors(env):
    """mongod's codes for streams it refuses (document_source_change_stream.cpp, pipeline.cpp)."""
    db, admin = env.client.t, env.client.admin
    fresh(env, "cs_legal")
    token = None
    with db.cs_legal.watch(max_await_time_ms=100) as stream:
        db.cs_legal.insert_one({"_id": 1})
        token = drain(stream, 1)[0]["_id"]

    def agg(database, target, spec, *stages):
        return database.command("aggregate", target, pipeline=[{"$changeStream": spec}] + list(stages), cursor={})
    expect_error(72, agg, db, 1, {"allChangesForCluster": True})
    expect_error(72, agg, admin, "x", {"allChangesForCluster": True})
    expect_error(73, agg, admin, 1, {})
    expect_error(73, agg, env.client.local, "x", {})
    expect_error(73, agg, db, "system.views", {})
    expect_error(50865, agg, db, "cs_legal", {"resumeAfter": token, "startAfter": token})
    expect_error(40674, agg, db, "cs_legal", {"resumeAfter": token, "startAtOperationTime": Timestamp(1, 1)})
    expect_error(40415, agg, db, "cs_legal", {"bogus": 1})
    expect_error(260, agg, db, "cs_legal", {"resumeAfter": {"_data": "zz"}})
    expect_error(40324, agg, db, "cs_legal", {}, {"$bogus": {}})
    expect_error(20, agg, db, "cs_legal", {}, {"$group": {"_id": None}})
    exc = expect_error(280, agg, db, "cs_legal", {"startAtOperationTime": Timestamp(int(time.time()) - 1, 0)},
                       {"$project": {"_id": 0}})
    check("NonResumableChangeStreamError" in (exc.details.get("errorLabels") or []), exc.details)
    with db.cs_legal.watch([{"$match": {"operationType": "insert"}}, {"$project": {"fullDocument": 0}}],
                           max_await_time_ms=200) as stream:
        db.cs_legal.delete_one({"_id": 1})
        db.cs_legal.insert_one({"_id": 2, "x": 1})
        event = drain(stream, 1)[0]
        check(event["operationType"] == "insert" and "fullDocument" not in event, event)
    with env.client.start_session() as session:
        session.start_transaction()
        expect_error(263, lambda: list(db.cs_legal.watch(session=session)))
        session.abort_transaction()


@test()
def test_change_stream_resume_token_not_found_280(env):
    """A resume token whose event is not at its position in the history fails with 280."""
    coll = fresh(env, "cs_280")
    with coll.watch(max_await_time_ms=100) as stream:
        coll.insert_one({"_id": 1})
        data = drain(stream, 1)[0]["_id"]["_data"]
    forged = data[:-16] + ("0" if data[-16] != "0" else "1") + data[-15:]  # another event identity
    expect_error(280, lambda: coll.watch(resume_after={"_data": forged}))


@test()
def test_change_stream_update_lookup(env):
    """fullDocument: updateLookup adds the current document to update events (null once deleted)."""
    coll = fresh(env, "cs_lookup")
    coll.insert_one({"_id": 1, "v": 0})
    with coll.watch(full_document="updateLookup", max_await_time_ms=200) as stream:
        coll.update_one({"_id": 1}, {"$set": {"v": 1}})
        first = drain(stream, 1)[0]
        check(first["fullDocument"] == {"_id": 1, "v": 1}, first)
        check(list(first).index("fullDocument") < list(first).index("ns"), list(first))
        coll.update_one({"_id": 1}, {"$set": {"v": 2}})
        coll.update_one({"_id": 1}, {"$set": {"v": 3}})
        coll.delete_one({"_id": 1})
        events = drain(stream, 3)
    check([e.get("fullDocument", "absent") for e in events] == [None, None, "absent"], events)
    with coll.watch(max_await_time_ms=200) as stream:
        coll.insert_one({"_id": 2})
        coll.update_one({"_id": 2}, {"$set": {"v": 1}})
        events = drain(stream, 2)
    check("fullDocument" not in events[1], "no fullDocument on updates by default")


@test(own=True)
def test_change_stream_history_lost_286(env):
    """With --change-history N the oldest events are forgotten: resuming before them, or a stream that
    fell behind, fails with ChangeStreamHistoryLost (286, NonResumableChangeStreamError); with --dbpath the
    bound holds across a restart (a recent token resumes, an old one is still 286)."""
    dbpath = os.path.join(env.tmpdir, "cs286")
    server = env.start("cs286", dbpath=dbpath, extra=["--change-history", "10"])
    client = env.new_client(server.uri())
    coll = client.t.h
    with coll.watch(max_await_time_ms=100) as stream:
        coll.insert_one({"_id": 0})
        first = drain(stream, 1)[0]["_id"]
    cursor = client.t.command("aggregate", "h", pipeline=[{"$changeStream": {}}], cursor={})["cursor"]
    coll.insert_many([{"_id": i} for i in range(1, 40)])
    exc = expect_error(286, client.t.command, "getMore", cursor["id"], collection="h")
    check("NonResumableChangeStreamError" in exc.details.get("errorLabels", []), exc.details)
    expect_error(286, lambda: coll.watch(resume_after=first))
    expect_error(286, lambda: coll.watch(start_at_operation_time=Timestamp(int(time.time()) - 3600, 1)))
    with coll.watch(max_await_time_ms=100) as stream:
        coll.insert_one({"_id": 100})
        recent = drain(stream, 1)[0]["_id"]
    with coll.watch(resume_after=recent, max_await_time_ms=100) as stream:
        check(stream.try_next() is None, "a recent token still resumes")
    client.t.r1.insert_one({"_id": 1})
    client.t.command("collMod", "r1", changeStreamPreAndPostImages={"enabled": True})
    client.admin.command("renameCollection", "t.r1", to="t.r2")
    client.close()
    server.kill()
    server = env.restart(server, "cs286b")
    client = env.new_client(server.uri())
    check(client.t.h.count_documents({}) == 41, "the data survived")
    infos = {c["name"]: c for c in client.t.list_collections()}
    check("r1" not in infos and infos["r2"]["options"] == {"changeStreamPreAndPostImages": {"enabled": True}}
          and client.t.r2.find_one() == {"_id": 1}, "renameCollection and collMod are journaled: %s" % infos)
    expect_error(286, lambda: client.t.h.watch(resume_after=first))
    with client.t.h.watch(resume_after=recent, max_await_time_ms=100) as stream:
        check(stream.try_next() is None, "a recent token resumes after the restart")
    client.t.h.insert_many([{"_id": i} for i in range(200, 230)])
    expect_error(286, lambda: client.t.h.watch(resume_after=recent))
    client.close()
    env.servers.remove(server)
    check(server.stop() == 0)


def read_stream(stream, quiet=0.3):
    """Every event a pymongo change stream gives until none comes for `quiet` seconds."""
    events = []
    while True:
        event = stream.try_next()
        if event is None:
            time.sleep(quiet)
            event = stream.try_next()
            if event is None:
                return events
        events.append(event)


@test(own=True)
def test_change_stream_history_survives_kill_with_dbpath(env):
    """With --dbpath the history is journaled with the data, as mongod's oplog: after kill -9 and a restart
    a resume token of the earlier run gives exactly the events after it (the same events, tokens and
    times as before the kill), then the writes after the restart; so does startAtOperationTime and an
    idle stream's postBatchResumeToken; the cluster time goes on after the latest journaled time."""
    server, client = journaled_server(env, "cshist")
    db = client.get_database("t", codec_options=CODEC)
    coll, other = db.a, db.b
    db.create_collection("img", changeStreamPreAndPostImages={"enabled": True})
    coll.insert_many([{"_id": i, "v": i, "arr": [i, i]} for i in range(5)])
    with db.watch(max_await_time_ms=100) as stream:
        coll.insert_one({"_id": 10})
        first = drain(stream, 1)[0]
        token = first["_id"]
        coll.update_many({"_id": {"$lt": 3}}, {"$set": {"v": -1}, "$pop": {"arr": 1}})
        coll.replace_one({"_id": 3}, {"r": 1})
        coll.delete_one({"_id": 4})
        with client.start_session() as session:
            with session.start_transaction():
                coll.insert_one({"_id": 20}, session=session)
                other.insert_one({"_id": 1}, session=session)
                coll.update_one({"_id": 20}, {"$set": {"t": 1}}, session=session)
        db.img.insert_one({"_id": 1, "x": 1})
        db.img.update_one({"_id": 1}, {"$set": {"x": 2}})
        db.img.delete_one({"_id": 1})
        other.rename("c")
        client.scratch.d.insert_one({"_id": 1})
        client.drop_database("scratch")
        before = read_stream(stream)
    check([e["operationType"] for e in before] == ["update"] * 3 + ["replace", "delete"] + ["insert", "insert",
          "update"] + ["insert", "update", "delete", "rename"], [e["operationType"] for e in before])
    with db.watch(max_await_time_ms=100) as stream:
        check(stream.try_next() is None)
        idle_token = stream.resume_token
    last_time = db.command("ping")["operationTime"]
    server, client = kill_and_restart(env, server, "cshist2")
    db = client.get_database("t", codec_options=CODEC)
    check(db.command("ping")["operationTime"] >= last_time, "the cluster time does not go back")
    db.a.insert_one({"_id": 30})
    with db.watch(resume_after=token, max_await_time_ms=100) as stream:
        after = read_stream(stream)
    check(after[:-1] == before, "the same events after the restart:\n%s\n%s" % (before, after[:-1]))
    check(after[-1]["operationType"] == "insert" and after[-1]["documentKey"] == {"_id": 30}, after[-1])
    check(after[-1]["clusterTime"] > last_time, after[-1])
    check([e.get("fullDocument", "-") for e in after if e["ns"].get("coll") == "img"]
          == [{"_id": 1, "x": 1}, "-", "-"], "events of a collection with pre- and post-images")
    with db.watch(start_at_operation_time=before[0]["clusterTime"], max_await_time_ms=100) as stream:
        check(read_stream(stream) == after, "startAtOperationTime of the earlier run")
    with db.watch(start_after=idle_token, max_await_time_ms=100) as stream:
        check([e["documentKey"] for e in read_stream(stream)] == [{"_id": 30}], "an idle stream's token")
    # (a stream of "img" cannot resume after the token of an event of "a": 280, as on mongod)
    after_token = Timestamp(first["clusterTime"].time, first["clusterTime"].inc + 1)
    images = db.command("aggregate", "img", cursor={}, pipeline=[{"$changeStream": {
        "startAtOperationTime": after_token, "fullDocument": "required",
        "fullDocumentBeforeChange": "whenAvailable"}}])
    check([(e.get("fullDocument"), e.get("fullDocumentBeforeChange")) for e in images["cursor"]["firstBatch"]]
          == [({"_id": 1, "x": 1}, None), ({"_id": 1, "x": 2}, {"_id": 1, "x": 1}), (None, {"_id": 1, "x": 2})],
          "pre- and post-images are journaled: %s" % images)
    server, client = kill_and_restart(env, server, "cshist3")
    with client.get_database("t", codec_options=CODEC).watch(resume_after=token, max_await_time_ms=100) as stream:
        check(read_stream(stream) == after, "and again after a second restart")
    env.servers.remove(server)
    check(server.stop() == 0)


@test(own=True)
def test_change_stream_history_bounded_across_restarts(env):
    """The journaled history keeps --change-history's bound: a checkpoint at start keeps only the last
    entries, so the journal does not grow with the history, and the horizon stays where it was."""
    server, client = journaled_server(env, "csbound", extra=["--change-history", "50"])
    coll = client.t.n
    coll.insert_one({"_id": 0, "n": 0})
    with coll.watch(max_await_time_ms=100) as stream:
        coll.update_one({"_id": 0}, {"$inc": {"n": 1}})
        old = drain(stream, 1)[0]["_id"]
    journal = os.path.join(env.tmpdir, "csbound.db", "journal.bson")
    sizes = []
    for round_ in range(3):
        for _ in range(1500):
            coll.update_one({"_id": 0}, {"$inc": {"n": 1}})
        with coll.watch(max_await_time_ms=100) as stream:
            coll.update_one({"_id": 0}, {"$inc": {"n": 1}})
            recent = drain(stream, 1)[0]["_id"]
        server, client = kill_and_restart(env, server, "csbound%d" % round_)
        coll = client.t.n
        sizes.append(os.path.getsize(journal))
        check(coll.find_one()["n"] == 1 + 1501 * (round_ + 1), coll.find_one())
        with coll.watch(resume_after=recent, max_await_time_ms=100) as stream:
            check(stream.try_next() is None, "the last token resumes")
        expect_error(286, lambda: coll.watch(resume_after=old))
    check(max(sizes) < 20000 and sizes[2] < sizes[0] * 1.5, "the journal stays small: %s" % sizes)
    env.servers.remove(server)
    check(server.stop() == 0)


@test(own=True)
def test_change_stream_history_lost_at_restart_without_dbpath(env):
    """Without --dbpath the history lives in memory: after a restart a token of the earlier run fails with
    ChangeStreamHistoryLost (286), never skipping silently."""
    server = env.start("csmem")
    client = env.new_client(server.uri())
    with client.t.m.watch(max_await_time_ms=100) as stream:
        client.t.m.insert_one({"_id": 1})
        token = drain(stream, 1)[0]["_id"]
    started = client.t.command("ping")["operationTime"]
    client.close()
    check(server.kill() == -signal.SIGKILL)
    time.sleep(1.1)  # a new in-memory server knows no earlier time: its clock starts at its wall-clock second
    env.servers.remove(server)
    server = env.start("csmem2", port=server.port)
    client = env.new_client(server.uri())
    client.t.m.insert_one({"_id": 2})
    expect_error(286, lambda: client.t.m.watch(resume_after=token))
    expect_error(286, lambda: client.t.m.watch(start_at_operation_time=started))
    client.close()
    env.servers.remove(server)
    check(server.stop() == 0)


@test(own=True)
def test_change_stream_idle_postbatchresumetoken_advances(env):
    """On an idle server the periodic no-op (--periodic-noop-secs) moves an empty batch's PBRT on."""
    server = env.start("csnoop", extra=["--periodic-noop-secs", "0.5"])
    client = env.new_client(server.uri())
    db = client.t
    cursor = db.command("aggregate", "idle", pipeline=[{"$changeStream": {}}], cursor={})["cursor"]
    first = cursor["postBatchResumeToken"]["_data"]
    reply = db.command("getMore", cursor["id"], collection="idle", maxTimeMS=1500)["cursor"]
    check(reply["nextBatch"] == [] and reply["id"] == cursor["id"], reply)
    check(reply["postBatchResumeToken"]["_data"] > first, (first, reply))
    mark = db.command("insert", "other", documents=[{"_id": 1}])["operationTime"]  # a write elsewhere too
    reply = db.command("getMore", cursor["id"], collection="idle", maxTimeMS=200)["cursor"]
    check(reply["postBatchResumeToken"]["_data"][:18] >= "82%08X%08X" % (mark.time, mark.inc), (mark, reply))
    client.close()
    env.servers.remove(server)
    check(server.stop() == 0)


@test()
def test_change_stream_get_more_session_and_labels(env):
    """getMore from another session than the aggregate's fails (50738); resumable errors of a stream's
    aggregate carry ResumableChangeStreamError, those failCommand injects into its getMore do not (mongod
    knows the getMore's cursor only after the failpoint; see failGetMoreAfterCursorCheckout)."""
    db = env.client.t
    fresh(env, "cs_lsid")
    with env.client.start_session() as s1, env.client.start_session() as s2:
        cursor = db.command("aggregate", "cs_lsid", pipeline=[{"$changeStream": {}}], cursor={},
                            session=s1)["cursor"]
        expect_error(50738, db.command, "getMore", cursor["id"], collection="cs_lsid", maxTimeMS=10,
                     session=s2)
        expect_error(50738, db.command, "getMore", cursor["id"], collection="cs_lsid", maxTimeMS=10)
        fail_point(env, {"times": 1}, failCommands=["getMore"], errorCode=6)
        try:
            exc = expect_error(6, db.command, "getMore", cursor["id"], collection="cs_lsid", session=s1)
        finally:
            fail_point(env, "off")
        check(not exc.details.get("errorLabels"), "failCommand fires before the cursor is known: %s"
              % exc.details)
        fail_point(env, {"times": 1}, failCommands=["aggregate"], errorCode=6)
        try:
            exc = expect_error(6, db.command, "aggregate", "cs_lsid", pipeline=[{"$changeStream": {}}], cursor={})
        finally:
            fail_point(env, "off")
        check(exc.details.get("errorLabels") == ["ResumableChangeStreamError"], exc.details)
        fail_point(env, {"times": 1}, failCommands=["aggregate"], errorCode=72)
        try:
            exc = expect_error(72, db.command, "aggregate", "cs_lsid", pipeline=[{"$changeStream": {}}], cursor={})
        finally:
            fail_point(env, "off")
        check(not exc.details.get("errorLabels"), exc.details)
        db.command("killCursors", "cs_lsid", cursors=[cursor["id"]], session=s1)


@test()
def test_change_stream_resumes_after_connection_kill(env):
    """pymongo's watch() resumes after the connection is closed under a getMore (with the cached token):
    every event arrives once, in order."""
    coll = fresh(env, "cs_kill")
    client = env.new_client(appname="cs_kill")
    with client.t.cs_kill.watch(max_await_time_ms=200) as stream:
        coll.insert_many([{"_id": i} for i in range(3)])
        got = drain(stream, 2)
        fail_point(env, {"times": 1}, failCommands=["getMore"], closeConnection=True, appName="cs_kill")
        coll.insert_many([{"_id": i} for i in range(3, 6)])
        got += drain(stream, 4)
        check(stream.try_next() is None)
    fail_point(env, "off")
    check([e["documentKey"]["_id"] for e in got] == list(range(6)), got)
    aggregates = [c for c in env.client.admin.command("recentCommands")["commands"]
                  if c["appName"] == "cs_kill" and c["command"] == "aggregate"]
    check(len(aggregates) == 2, "the stream was resumed once: %s" % aggregates)
    client.close()


@test()
def test_change_stream_fail_get_more_after_cursor_checkout(env):
    """mongod's failGetMoreAfterCursorCheckout: the getMore fails with errorCode, the cursor is closed, and
    on a change stream a resumable code carries ResumableChangeStreamError, so watch() resumes."""
    coll = fresh(env, "cs_checkout")
    client = env.new_client(appname="cs_checkout")
    with client.t.cs_checkout.watch(max_await_time_ms=200) as stream:
        coll.insert_one({"_id": 1})
        got = drain(stream, 1)
        env.client.admin.command("configureFailPoint", "failGetMoreAfterCursorCheckout", mode={"times": 1},
                                 data={"errorCode": 6, "appName": "cs_checkout"})
        coll.insert_one({"_id": 2})
        got += drain(stream, 1)
    check([e["documentKey"]["_id"] for e in got] == [1, 2], got)
    db = env.client.t
    cursor = db.command("aggregate", "cs_checkout", pipeline=[{"$changeStream": {}}], cursor={})["cursor"]
    env.client.admin.command("configureFailPoint", "failGetMoreAfterCursorCheckout", mode={"times": 1},
                             data={"errorCode": 6})
    exc = expect_error(6, db.command, "getMore", cursor["id"], collection="cs_checkout")
    check(exc.details.get("errorLabels") == ["ResumableChangeStreamError"], exc.details)
    expect_error(43, db.command, "getMore", cursor["id"], collection="cs_checkout")
    find = db.command("find", "cs_checkout", batchSize=1)["cursor"]
    env.client.admin.command("configureFailPoint", "failGetMoreAfterCursorCheckout", mode={"times": 1})
    exc = expect_error(1, db.command, "getMore", find["id"], collection="cs_checkout")
    check(not exc.details.get("errorLabels"), exc.details)
    client.close()


@test()
def test_change_stream_pre_and_post_images(env):
    """collMod changeStreamPreAndPostImages: writes record their images, and fullDocument whenAvailable or
    required (updates) and fullDocumentBeforeChange (updates, replaces, deletes) return them; without
    images whenAvailable gives null and required fails with NoMatchingDocument (47). (pymongo 3.11's watch()
    has no fullDocumentBeforeChange: raw commands.)"""
    coll = fresh(env, "cs_images")
    db = env.client.t

    def open_stream(**spec):
        return db.command("aggregate", "cs_images", pipeline=[{"$changeStream": spec}], cursor={})["cursor"]["id"]

    def next_batch(cursor_id):
        return db.command("getMore", cursor_id, collection="cs_images", maxTimeMS=500)["cursor"]["nextBatch"]
    coll.insert_one({"_id": 1, "v": 0})
    db.command("collMod", "cs_images", changeStreamPreAndPostImages={"enabled": True})
    info = db.command("listCollections", filter={"name": "cs_images"})["cursor"]["firstBatch"][0]
    check(info["options"].get("changeStreamPreAndPostImages") == {"enabled": True}, info)
    cursor_id = open_stream(fullDocument="required", fullDocumentBeforeChange="required")
    coll.update_one({"_id": 1}, {"$set": {"v": 1}})
    coll.update_one({"_id": 1}, {"$set": {"v": 2}})  # the post-image is the document of that moment
    coll.replace_one({"_id": 1}, {"w": 1})
    coll.delete_one({"_id": 1})
    events = next_batch(cursor_id)
    check([(e.get("fullDocument"), e["fullDocumentBeforeChange"]) for e in events] ==
          [({"_id": 1, "v": 1}, {"_id": 1, "v": 0}), ({"_id": 1, "v": 2}, {"_id": 1, "v": 1}),
           ({"_id": 1, "w": 1}, {"_id": 1, "v": 2}), (None, {"_id": 1, "w": 1})], events)
    db.command("collMod", "cs_images", changeStreamPreAndPostImages={"enabled": False})
    coll.insert_one({"_id": 2})
    cursor_id = open_stream(fullDocument="whenAvailable", fullDocumentBeforeChange="whenAvailable")
    coll.update_one({"_id": 2}, {"$set": {"v": 1}})
    event = next_batch(cursor_id)[0]
    check(event["fullDocument"] is None and event["fullDocumentBeforeChange"] is None, event)
    with coll.watch(full_document="required", max_await_time_ms=200) as stream:
        coll.update_one({"_id": 2}, {"$set": {"v": 2}})
        expect_error(47, drain, stream, 1)
    expect_error(26, db.command, "collMod", "cs_no_such", changeStreamPreAndPostImages={"enabled": True})
    expect_error(115, db.command, "collMod", "cs_images", validator={})

def _bulk_write_server(env):
    """A client of a server started with --bulk-write (started on first use)."""
    if getattr(env, "_bulk_client", None) is None:
        server = env.start("bulkwrite", extra=("--bulk-write",))
        env._bulk_client = env.new_client(server.uri())
    return env._bulk_client


def bulk_write(client, ops, ns, session=None, **fields):
    """Run bulkWrite on admin with nsInfo `ns` (a list of "db.coll"); returns the reply."""
    cmd = SON([("bulkWrite", 1), ("ops", ops), ("nsInfo", [{"ns": n} for n in ns])])
    cmd.update(fields)
    return client.admin.command(cmd, session=session)


@test(own=True)
def test_bulk_write_only_with_the_flag(env):
    check(env.client.admin.command("hello")["maxWireVersion"] == 17)
    expect_error(59, bulk_write, env.client, [{"insert": 0, "document": {"_id": 1}}], ["t.bw0"])
    client = _bulk_write_server(env)
    check(client.admin.command("hello")["maxWireVersion"] == 25)


@test(own=True)
def test_bulk_write_several_namespaces(env):
    client = _bulk_write_server(env)
    for name in ("bwa", "bwb"):
        client.t[name].drop()
    client.t.bwb.insert_one({"_id": 5, "v": 0})
    reply = bulk_write(client, [
        {"insert": 0, "document": {"_id": 1, "x": 1}},
        {"insert": 1, "document": {"_id": 2}},
        {"update": 1, "filter": {"_id": 5}, "updateMods": {"$set": {"v": 1}}},
        {"update": 0, "filter": {"_id": 9}, "updateMods": {"_id": 9, "r": 1}, "upsert": True},
        {"delete": 1, "filter": {"_id": 2}},
    ], ["t.bwa", "t.bwb"])
    check(reply["nErrors"] == 0 and reply["nInserted"] == 2 and reply["nMatched"] == 1, reply)
    check(reply["nModified"] == 1 and reply["nUpserted"] == 1 and reply["nDeleted"] == 1, reply)
    batch = reply["cursor"]["firstBatch"]
    check([r["idx"] for r in batch] == [0, 1, 2, 3, 4] and reply["cursor"]["id"] == 0, batch)
    check(batch[3]["upserted"] == {"_id": 9}, batch)
    check(sorted(d["_id"] for d in client.t.bwa.find()) == [1, 9])
    check(list(client.t.bwb.find()) == [{"_id": 5, "v": 1}])


@test(own=True)
def test_bulk_write_is_strict(env):
    client = _bulk_write_server(env)
    ins = [{"insert": 0, "document": {"_id": 1}}]
    expect_error(13, lambda: client.t.command(SON([("bulkWrite", 1), ("ops", ins), ("nsInfo", [{"ns": "t.x"}])])))
    expect_error(40415, bulk_write, client, ins, ["t.bwz"], bogus=1)
    expect_error(40415, bulk_write, client, [{"insert": 0, "document": {}, "upsert": True}], ["t.bwz"])
    expect_error(2, bulk_write, client, [{"insert": 1, "document": {}}], ["t.bwz"])
    expect_error(2, bulk_write, client, [], ["t.bwz"])
    expect_error(2, bulk_write, client, [{"insert": 0, "delete": 0, "document": {}}], ["t.bwz"])
    expect_error(40414, bulk_write, client, [{"update": 0, "filter": {}}], ["t.bwz"])
    expect_error(73, bulk_write, client, ins, ["nodot"])
    # an op refused while parsing fails the command before any op runs
    client.t.bwz.drop()
    expect_error(40414, bulk_write, client, ins + [{"delete": 0}], ["t.bwz"])
    check(client.t.bwz.count_documents({}) == 0)


@test(own=True)
def test_bulk_write_ordered_stops_at_first_error(env):
    client = _bulk_write_server(env)
    coll = client.t.bwo
    coll.drop()
    coll.create_index("u", unique=True)
    coll.insert_one({"_id": 0, "u": 7})
    ops = [{"insert": 0, "document": {"_id": 1, "u": 1}}, {"insert": 0, "document": {"_id": 2, "u": 7}},
           {"insert": 0, "document": {"_id": 3, "u": 3}}]
    reply = bulk_write(client, ops, ["t.bwo"], errorsOnly=True)
    check(reply["nErrors"] == 1 and reply["nInserted"] == 1, reply)
    err = reply["cursor"]["firstBatch"]
    check(len(err) == 1 and err[0]["ok"] == 0 and err[0]["idx"] == 1 and err[0]["code"] == 11000, err)
    check(err[0]["keyValue"] == {"u": 7}, err)
    check(sorted(d["_id"] for d in coll.find()) == [0, 1])
    ops[0]["document"] = {"_id": 11, "u": 11}
    reply = bulk_write(client, ops, ["t.bwo"], ordered=False)
    check(reply["nErrors"] == 1 and reply["nInserted"] == 2, reply)
    check([r["ok"] for r in reply["cursor"]["firstBatch"]] == [1, 0, 1], reply)
    check(sorted(d["_id"] for d in coll.find()) == [0, 1, 3, 11])


@test(own=True)
def test_bulk_write_in_transaction(env):
    client = _bulk_write_server(env)
    for name in ("bwt", "bwu"):
        client.t[name].drop()
        client.t.create_collection(name)
    client.t.bwu.create_index("k", unique=True)
    client.t.bwu.insert_one({"_id": 0, "k": 1})
    with client.start_session() as session:
        session.start_transaction()
        reply = bulk_write(client, [{"insert": 0, "document": {"_id": 1}},
                                    {"insert": 1, "document": {"_id": 2, "k": 2}}], ["t.bwt", "t.bwu"],
                           session=session)
        check(reply["nInserted"] == 2)
        check(client.t.bwt.count_documents({}) == 0, "not visible outside before commit")
        session.commit_transaction()
    check(client.t.bwt.count_documents({}) == 1 and client.t.bwu.count_documents({}) == 2)
    with client.start_session() as session:
        session.start_transaction()
        reply = bulk_write(client, [{"insert": 0, "document": {"_id": 3}},
                                    {"insert": 1, "document": {"_id": 4, "k": 1}},
                                    {"insert": 0, "document": {"_id": 5}}], ["t.bwt", "t.bwu"],
                           session=session, ordered=False, errorsOnly=True)
        err = reply["cursor"]["firstBatch"]
        check(reply["nErrors"] == 1 and len(err) == 1 and err[0]["idx"] == 1 and err[0]["code"] == 11000, reply)
        expect_error(251, session.commit_transaction)
    check(sorted(d["_id"] for d in client.t.bwt.find()) == [1], "the aborted transaction left nothing")


@test(own=True)
def test_bulk_write_retryable(env):
    client = _bulk_write_server(env)
    client.t.bwr.drop()
    # a client of its own, whose implicit session (the command's lsid) no transaction used before
    client = env.new_client(client.address and "mongodb://%s:%d/?replicaSet=rs0" % client.address)
    ops = [{"insert": 0, "document": {"_id": 1}}, {"update": 0, "filter": {"_id": 1},
                                                    "updateMods": {"$inc": {"n": 1}}}]
    session = client.start_session()
    first = bulk_write(client, ops, ["t.bwr"], session=session, txnNumber=Int64(1))
    again = bulk_write(client, ops, ["t.bwr"], session=session, txnNumber=Int64(1))
    check(first["nInserted"] == 1 and again["nInserted"] == 1, (first, again))
    check(again.get("retriedStmtIds") == [0, 1], again)
    check(list(client.t.bwr.find()) == [{"_id": 1, "n": 1}], "the retry wrote nothing again")
    reply = bulk_write(client, [{"delete": 0, "filter": {}, "multi": True}], ["t.bwr"], session=session,
                       txnNumber=Int64(2), errorsOnly=True)
    session.end_session()
    check(reply["nErrors"] == 1 and reply["cursor"]["firstBatch"][0]["code"] == 72, reply)


@test(own=True)
def test_bulk_write_retry_after_lost_reply(env):
    """A retryable bulkWrite whose reply was lost (closeConnection "after"), sent again with the same
    txnNumber: its ops are not executed again; a retry completes what an ordered attempt left undone; mongod's
    refusals (stmtId with stmtIds, stmtIds of another length, multi, multi's text)."""
    server_client = _bulk_write_server(env)
    server_client.t.bwl.drop()
    server_client.t.bwl.create_index("k", unique=True)
    client = env.new_client("mongodb://%s:%d/?replicaSet=rs0&retryWrites=false" % server_client.address,
                            appname="bwlost")
    session = client.start_session()
    ops = [{"insert": 0, "document": {"_id": 1, "k": 1}},
           {"update": 0, "filter": {"_id": 1}, "updateMods": {"$inc": {"n": 1}}},
           {"delete": 0, "filter": {"_id": 9}, "multi": False}]
    server_client.t.bwl.insert_one({"_id": 9})
    server_client.admin.command(SON([("configureFailPoint", "failCommand"), ("mode", {"times": 1}),
                                     ("data", {"failCommands": ["bulkWrite"], "appName": "bwlost",
                                               "closeConnection": "after"})]))
    try:
        bulk_write(client, ops, ["t.bwl"], session=session, txnNumber=Int64(1), errorsOnly=True)
        check(False, "the reply should have been lost")
    except pymongo.errors.AutoReconnect:
        pass
    again = bulk_write(client, ops, ["t.bwl"], session=session, txnNumber=Int64(1), errorsOnly=True)
    check(again["nErrors"] == 0 and again["nInserted"] == 1 and again["nMatched"] == 1
          and again["nDeleted"] == 1 and again.get("retriedStmtIds") == [0, 1, 2], again)
    check(list(server_client.t.bwl.find()) == [{"_id": 1, "k": 1, "n": 1}], "written once")
    # an ordered attempt stops at a duplicate key; once it is gone, the retry runs only what was left
    server_client.t.bwl.insert_one({"_id": 5, "k": 3})
    ops = [{"insert": 0, "document": {"_id": 2, "k": 2}}, {"insert": 0, "document": {"_id": 3, "k": 3}},
           {"update": 0, "filter": {"_id": 2}, "updateMods": {"$inc": {"n": 1}}}]
    first = bulk_write(client, ops, ["t.bwl"], session=session, txnNumber=Int64(2), errorsOnly=True)
    check(first["nErrors"] == 1 and first["cursor"]["firstBatch"][0]["idx"] == 1
          and first["cursor"]["firstBatch"][0]["code"] == 11000, first)
    server_client.t.bwl.delete_one({"_id": 5})
    second = bulk_write(client, ops, ["t.bwl"], session=session, txnNumber=Int64(2), errorsOnly=True)
    check(second["nErrors"] == 0 and second.get("retriedStmtIds") == [0], second)
    check(server_client.t.bwl.find_one({"_id": 2}) == {"_id": 2, "k": 2, "n": 1}
          and server_client.t.bwl.count_documents({"_id": 3}) == 1, "the rest ran once")
    ins = [{"insert": 0, "document": {"_id": 20}}]
    expect_error(72, bulk_write, client, ins, ["t.bwl"], session=session, txnNumber=Int64(3), stmtId=0,
                 stmtIds=[0])
    expect_error(16, bulk_write, client, ins, ["t.bwl"], session=session, txnNumber=Int64(3), stmtIds=[0, 1])
    reply = bulk_write(client, [{"update": 0, "filter": {}, "updateMods": {"$set": {"m": 1}}, "multi": True}],
                       ["t.bwl"], session=session, txnNumber=Int64(4), errorsOnly=True)
    err = reply["cursor"]["firstBatch"][0]
    check(err["code"] == 72 and err["errmsg"] == "Cannot use retryable writes with multi=true", reply)
    check(server_client.t.bwl.count_documents({"m": 1}) == 0, "the multi update did not run")
    session.end_session()



# the replica set's tests (majority commit point, secondaries, failover, rollback) live in their own file
TESTS.extend(test_replset.TESTS)
TESTS.extend(test_cluster.TESTS)


def main():
    """Run the selected tests and print the summary line."""
    selected = sys.argv[1:]
    part, parts = 0, 1
    if selected and selected[0].startswith("--part="):
        # --part=K/N: every Nth test from the Kth (1-based), so that N processes share the tests
        part, parts = (int(x) for x in selected.pop(0)[len("--part="):].split("/"))
        part -= 1
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
        for number, (fn, own) in enumerate(TESTS):
            if number % parts != part:
                continue
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
                print_server_tracebacks(tmpdir, t0)
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
