#!/usr/bin/python3
"""A hostile or broken MongoDB server on the loopback, for test/hostile.py.

    hostile_server.py [--lifetime SECONDS] MODE [MODE ...]

Listens on one port of 127.0.0.1 per MODE and prints "MODE PORT" for each
(then a line "ready").  Every mode but blackhole and silent_hello answers
the handshake (the legacy OP_QUERY isMaster, or an OP_MSG hello) and "ping"
like a standalone mongod; the other commands (find, aggregate, ...) get:

    short_section     an OP_MSG whose body section is \\x10\\x00\\x00\\x00garbage-garbage
                      followed by the real body (libmongoc 1.23 crashes)
    corrupt_doc       a well-framed find reply whose document holds a string
                      element longer than the document
    corrupt_strend    a well-framed find reply whose document's last field, the
                      string the FDW reads, claims one byte more than it has: its
                      end is then the document's trailing NUL
    corrupt_strzero   the same string claiming 0 bytes
                      (in corrupt_doc, corrupt_nested, corrupt_strend and
                      corrupt_strzero a count gets a good reply, {n: 1}: the count
                      an unanalyzed table's scan runs first would otherwise get the
                      corrupt reply, checked whole, and the scan's own check of the
                      find's documents would never be reached)
    corrupt_batch     a well-framed find reply whose firstBatch array holds an
                      element of an unknown type before the documents
    corrupt_nested    a well-framed find reply whose document, after the fields
                      the FDW reads, holds an embedded document whose last byte
                      is not its trailing NUL (the scan's conversion checks it)
    compressed        an OP_COMPRESSED reply (opcode 2012)
    bad_compression   (the handshake itself) "compression": [1]
    blackhole         connections are never accepted nor answered
    silent_hello      accepted, the handshake is never answered
    silent            the handshake and ping are answered, nothing else
    ok                a find returns one document {_id: 1, k: "x"}
    fuzz              a find reply of a few documents with 1 to 4 random bytes
                      changed (the message length stays right), seeded by
                      --seed and the request count
    fuzz_hello        the same for the handshake reply (a replica set
                      member's, with hosts, tags, setName ...); finds are
                      answered normally

Pure Python sockets; pymongo's bson only encodes documents.  Exits after
--lifetime seconds (default 300) so that it can never outlive its test.
"""
import argparse
import datetime
import random
import socket
import struct
import sys
import threading
import time

import bson
from bson.son import SON

OP_REPLY = 1
OP_QUERY = 2004
OP_COMPRESSED = 2012
OP_MSG = 2013

HELLO = SON([("ismaster", True), ("helloOk", True), ("maxBsonObjectSize", 16777216),
             ("maxMessageSizeBytes", 48000000), ("maxWriteBatchSize", 100000),
             ("localTime", datetime.datetime.utcnow()),
             ("logicalSessionTimeoutMinutes", 30), ("connectionId", 1),
             ("minWireVersion", 0), ("maxWireVersion", 13), ("readOnly", False),
             ("ok", 1.0)])
HANDSHAKE = {"ismaster", "isMaster", "hello"}
# modes whose corrupt document is for the scan's find itself (the scan
# checks it in its row conversion's walk): other commands get good replies
DOCUMENT_MODES = {"corrupt_doc", "corrupt_nested", "corrupt_strend", "corrupt_strzero"}
HARMLESS = {"ping", "endSessions", "killCursors", "buildInfo", "buildinfo",
            "getLastError", "saslStart"}


def header(length, request_id, response_to, opcode):
    """A message header."""
    return struct.pack("<iiii", length, request_id, response_to, opcode)


def op_msg(response_to, body_bytes):
    """An OP_MSG reply with one body section of raw bytes."""
    payload = struct.pack("<I", 0) + b"\x00" + body_bytes
    return header(16 + len(payload), 1, response_to, OP_MSG) + payload


def op_reply(response_to, doc_bytes):
    """An OP_REPLY with one document."""
    payload = struct.pack("<iqii", 8, 0, 0, 1) + doc_bytes
    return header(16 + len(payload), 1, response_to, OP_REPLY) + payload


def hello_doc(mode):
    """The handshake reply of a mode."""
    doc = SON(HELLO)
    if mode == "bad_compression":
        doc["compression"] = [1]
    return bson.BSON.encode(doc)


def find_reply(namespace):
    """A good find reply document, as SON."""
    return SON([("cursor", SON([("firstBatch", [SON([("_id", 1), ("k", "x")])]),
                                ("id", 0), ("ns", namespace)])), ("ok", 1.0)])


def corrupt_doc(namespace):
    """A find reply whose document's string "x" claims 200 bytes."""
    raw = bytearray(bson.BSON.encode(find_reply(namespace)))
    at = raw.index(b"\x02k\x00") + 3
    raw[at:at + 4] = struct.pack("<i", 200)
    return bytes(raw)


def corrupt_string_length(namespace, length):
    """A find reply whose document's string "x" (its last field) claims length bytes."""
    raw = bytearray(bson.BSON.encode(find_reply(namespace)))
    at = raw.index(b"\x02k\x00") + 3
    raw[at:at + 4] = struct.pack("<i", length)
    return bytes(raw)


def corrupt_nested(namespace):
    """A find reply whose document ends with {n: {a: 1}}, n's trailing NUL 0x01."""
    reply = find_reply(namespace)
    reply["cursor"]["firstBatch"][0]["n"] = SON([("a", 1)])
    raw = bytearray(bson.BSON.encode(reply))
    at = raw.index(b"\x03n\x00") + 3
    size = struct.unpack("<i", raw[at:at + 4])[0]
    raw[at + size - 1] = 1
    return bytes(raw)


def corrupt_batch(namespace):
    """A find reply whose firstBatch starts with an element of type 0x7e."""
    raw = bytearray(bson.BSON.encode(find_reply(namespace)))
    at = raw.index(b"\x03" + b"0\x00")
    raw[at] = 0x7E
    return bytes(raw)


SEED = [0]
FUZZ_COUNT = [0]


def fuzz_reply(request_id, namespace):
    """A good find reply with a few random bytes changed after the header."""
    FUZZ_COUNT[0] += 1
    rng = random.Random(SEED[0] * 1000003 + FUZZ_COUNT[0])
    docs = [SON([("_id", i), ("k", "v%d" % i), ("n", i * 1.5), ("a", [i, "x", None]),
                 ("d", SON([("e", True)]))]) for i in range(3)]
    body = SON([("cursor", SON([("firstBatch", docs), ("id", 0), ("ns", namespace)])),
                ("ok", 1.0)])
    raw = bytearray(op_msg(request_id, bson.BSON.encode(body)))
    for _ in range(rng.randint(1, 4)):
        raw[rng.randrange(16, len(raw))] = rng.choice([0, 1, 2, 3, 4, 0x7F, 0xFF,
                                                      rng.randrange(256)])
    return bytes(raw)


def damage(raw, rng):
    """Change 1 to 4 random bytes after the header."""
    raw = bytearray(raw)
    for _ in range(rng.randint(1, 4)):
        raw[rng.randrange(16, len(raw))] = rng.choice([0, 1, 2, 3, 4, 0x7F, 0xFF,
                                                      rng.randrange(256)])
    return bytes(raw)


def fuzz_hello(request_id, opcode):
    """A replica set member's handshake reply, damaged."""
    FUZZ_COUNT[0] += 1
    rng = random.Random(SEED[0] * 1000003 + FUZZ_COUNT[0])
    doc = SON(HELLO)
    doc.update([("hosts", ["127.0.0.1:1", "127.0.0.1:2"]), ("passives", ["127.0.0.1:3"]),
                ("setName", "rs0"), ("setVersion", 1), ("secondary", False),
                ("primary", "127.0.0.1:1"), ("me", "127.0.0.1:1"),
                ("tags", SON([("dc", "east")])), ("compression", ["zlib"]),
                ("lastWrite", SON([("lastWriteDate", datetime.datetime(2020, 1, 1))]))])
    raw = bson.BSON.encode(doc)
    reply = op_reply(request_id, raw) if opcode == OP_QUERY else op_msg(request_id, raw)
    return damage(reply, rng)


def hostile_reply(mode, request_id, namespace):
    """The reply of a mode to a command other than the handshake."""
    if mode == "fuzz":
        return fuzz_reply(request_id, namespace)
    if mode == "short_section":
        return op_msg(request_id, b"\x10\x00\x00\x00garbage-garbage"
                      + bson.BSON.encode(find_reply(namespace)))
    if mode == "corrupt_doc":
        return op_msg(request_id, corrupt_doc(namespace))
    if mode == "corrupt_batch":
        return op_msg(request_id, corrupt_batch(namespace))
    if mode == "corrupt_nested":
        return op_msg(request_id, corrupt_nested(namespace))
    if mode == "corrupt_strend":
        # "x", its NUL and the document's trailing NUL: 3 bytes, 1 more than its 2
        return op_msg(request_id, corrupt_string_length(namespace, 3))
    if mode == "corrupt_strzero":
        return op_msg(request_id, corrupt_string_length(namespace, 0))
    if mode == "compressed":
        inner = struct.pack("<I", 0) + b"\x00" + bson.BSON.encode(find_reply(namespace))
        payload = struct.pack("<iib", OP_MSG, 4, 0) + inner
        return header(16 + len(payload), 1, request_id, OP_COMPRESSED) + payload
    if mode == "silent":
        return None
    return op_msg(request_id, bson.BSON.encode(find_reply(namespace)))


def read_exact(conn, n):
    """n bytes, or None at EOF."""
    data = b""
    while len(data) < n:
        chunk = conn.recv(n - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def parse_request(message, opcode):
    """(command name, namespace) of a request."""
    if opcode == OP_QUERY:
        body = message[20:]
        end = body.index(b"\x00")
        rest = body[end + 9:]
        length = struct.unpack("<i", rest[:4])[0]
        doc = bson.BSON(rest[:length]).decode()
    else:
        rest = message[21:]
        length = struct.unpack("<i", rest[:4])[0]
        doc = bson.BSON(rest[:length]).decode()
    name = next(iter(doc))
    namespace = "%s.%s" % (doc.get("$db", "admin"), doc[name])
    return name, namespace


def serve(conn, mode):
    """Answer one connection until EOF."""
    try:
        while True:
            head = read_exact(conn, 16)
            if head is None:
                return
            length, request_id, _, opcode = struct.unpack("<iiii", head)
            message = head + (read_exact(conn, length - 16) or b"")
            name, namespace = parse_request(message, opcode)
            if mode == "silent_hello":
                time.sleep(3600)
            if name in HANDSHAKE and mode == "fuzz_hello":
                reply = fuzz_hello(request_id, opcode)
            elif name in HANDSHAKE:
                if opcode == OP_QUERY:
                    reply = op_reply(request_id, hello_doc(mode))
                else:
                    reply = op_msg(request_id, hello_doc(mode))
            elif name in HARMLESS:
                reply = op_msg(request_id, bson.BSON.encode(SON([("ok", 1.0)])))
            elif mode == "fuzz_hello":
                reply = op_msg(request_id, bson.BSON.encode(find_reply(namespace)))
            elif name == "count" and mode in DOCUMENT_MODES:
                # the scan's count of the collection comes first: answered,
                # so that the corrupt document reaches the scan's find
                reply = op_msg(request_id, bson.BSON.encode(SON([("n", 1), ("ok", 1.0)])))
            else:
                reply = hostile_reply(mode, request_id, namespace)
            if reply is None:
                time.sleep(3600)
            conn.sendall(reply)
    except Exception:  # noqa: BLE001 - a request we cannot parse ends the connection
        return
    finally:
        conn.close()


def listen(mode):
    """Listen for a mode; returns the port."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    if mode != "blackhole":
        def accept_loop():
            while True:
                conn, _ = sock.accept()
                threading.Thread(target=serve, args=(conn, mode), daemon=True).start()
        threading.Thread(target=accept_loop, daemon=True).start()
    return sock


def main():
    """Listen for every mode given, print the ports, live --lifetime s."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--lifetime", type=float, default=300)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("modes", nargs="+")
    args = parser.parse_args()
    SEED[0] = args.seed
    socks = []
    for mode in args.modes:
        sock = listen(mode)
        socks.append(sock)
        print(mode, sock.getsockname()[1])
    print("ready")
    sys.stdout.flush()
    time.sleep(args.lifetime)


if __name__ == "__main__":
    main()
