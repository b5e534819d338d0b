#!/usr/bin/python3
"""Change events and replies the applier cannot trust, from a tampering proxy.

A proxy on the loopback (in this process) passes the wire messages of
the MongoDB under test through, except that it damages, once per case, the
first change event of the collection "he" in a reply of the applier's
change stream (or that reply's postBatchResumeToken).  A foreign server
"hev" reaches the MongoDB through it (directConnection=true: the proxy is
the one member the client knows), with a foreign table "he" and an index
table on k that the applier follows through the proxy.

For every case, an outside client (pymongo, straight to the server) then
inserts a document, and:

- no read with idxtable.index_consistency = current returns a wrong
  result: each returns the new document (routed, or by a plain scan while
  the applier recovers: the index table is not current then) or fails,
  and within 60 s a routed one returns it;
- idxtable.sync_status.last_error named the refused reply meanwhile (the
  applier does not skip what it cannot read);
- verify_index finds nothing wrong at the end.

The cases: an event without documentKey, with an operationType that is no
string, with a namespace that is no document, with a clusterTime that is a
string, with a clusterTime in 2106 (then a second outside insert, read at
once, must be found too: applied_through must not have jumped ahead), and
a garbage postBatchResumeToken (then the applier is terminated, so that
its successor resumes from the stored position: that must not be the
garbage).

Environment as for test/differential.py (test/env start, with the library
preloaded).  The last line is "hostile_events: N passed, M failed".
"""
import os
import socket
import struct
import sys
import threading
import time
import urllib.parse

import bson
from bson.codec_options import CodecOptions
from bson.timestamp import Timestamp

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures"))
from results import Results  # noqa: E402  (test/fixtures)
import mongo_client  # noqa: E402
import pg_fixture  # noqa: E402  (test/fixtures)
from routed_reads import q, read, read_until_found, streaming, verify_clean, wait_for  # noqa: E402

DATABASE = "idxtable_hostile_events"
OP_MSG = 2013
CODEC = CodecOptions(tz_aware=True)
CASES = ["no_document_key", "int_operation_type", "string_ns", "string_cluster_time",
         "future_cluster_time", "garbage_pbrt"]


class Proxy:
    """A loopback proxy to (host, port) that damages one change-stream reply per arming."""

    def __init__(self, host, port):
        self.upstream = (host, port)
        self.mode = None
        self.done = threading.Event()
        self.lock = threading.Lock()
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self.accept, daemon=True).start()

    def arm(self, mode):
        """Damage the next reply that holds an event of "he" as mode says."""
        with self.lock:
            self.done.clear()
            self.mode = mode

    def accept(self):
        while True:
            client, _ = self.listener.accept()
            server = socket.create_connection(self.upstream)
            threading.Thread(target=self.pump, args=(client, server, False), daemon=True).start()
            threading.Thread(target=self.pump, args=(server, client, True), daemon=True).start()

    @staticmethod
    def read_message(sock):
        head = b""
        while len(head) < 16:
            chunk = sock.recv(16 - len(head))
            if not chunk:
                return None
            head += chunk
        length = struct.unpack("<i", head[:4])[0]
        body = b""
        while len(body) < length - 16:
            chunk = sock.recv(min(65536, length - 16 - len(body)))
            if not chunk:
                return None
            body += chunk
        return head + body

    def pump(self, src, dst, replies):
        try:
            while True:
                msg = self.read_message(src)
                if msg is None:
                    break
                if replies and self.mode is not None:
                    msg = self.maybe_tamper(msg)
                dst.sendall(msg)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.close()
                except OSError:
                    pass

    def maybe_tamper(self, msg):
        """An OP_MSG reply (one body section, no checksum) with a batch of events of "he"."""
        length, request_id, response_to, opcode = struct.unpack("<iiii", msg[:16])
        if opcode != OP_MSG:
            return msg
        flags = struct.unpack("<I", msg[16:20])[0]
        if flags & 1 or msg[20] != 0:
            return msg
        doc = bson.decode(msg[21:], CODEC)
        cursor = doc.get("cursor")
        if not isinstance(cursor, dict):
            return msg
        batch = cursor.get("firstBatch", cursor.get("nextBatch"))
        if not isinstance(batch, list):
            return msg
        for event in batch:
            if isinstance(event, dict) and isinstance(event.get("ns"), dict) \
                    and event["ns"].get("coll") == "he" and "operationType" in event:
                with self.lock:
                    if self.mode is None:
                        return msg
                    damage(self.mode, event, cursor)
                    self.mode = None
                    self.done.set()
                body = bson.encode(doc, codec_options=CODEC)
                out = struct.pack("<iiiiI", 21 + len(body), request_id, response_to, opcode, flags)
                return out + b"\x00" + body
        return msg


def damage(mode, event, cursor):
    """Damage one event (or its reply's postBatchResumeToken) as mode says."""
    if mode == "no_document_key":
        del event["documentKey"]
    elif mode == "int_operation_type":
        event["operationType"] = 1
    elif mode == "string_ns":
        event["ns"] = "%s.he" % DATABASE
    elif mode == "string_cluster_time":
        event["clusterTime"] = str(event["clusterTime"])
    elif mode == "future_cluster_time":
        event["clusterTime"] = Timestamp(4290000000, 1)  # in 2105/2106
    elif mode == "garbage_pbrt":
        cursor["postBatchResumeToken"] = {"_data": "not a token"}




def setup(proxy):
    """The database, the server through the proxy, the table and its index table."""
    mongo_client.connect().drop_database(DATABASE)
    uri = "mongodb://127.0.0.1:%d/?directConnection=true" % proxy.port
    conn = pg_fixture.setup_database(DATABASE, server="hev", uri=uri)
    pg_fixture.create_foreign_table(conn, "he", "_id int, k text", server="hev")
    q(conn, "INSERT INTO he SELECT i, 'k' || i FROM generate_series(1, 50) i")
    q(conn, "SELECT idxtable.create_index('he', '{k}', name => 'he_k')")
    q(conn, "ANALYZE he")
    q(conn, "SET idxtable.index_consistency = 'current'")
    q(conn, "SET idxtable.enable_plain_scan = off")
    return conn






def last_errors(conn):
    row = q(conn, "SELECT last_error FROM idxtable.sync_status WHERE name = 'he_k'")
    return row[0][0] if row else None




def case(res, conn, proxy, coll, mode, n):
    """One damaged reply, then the checks of the file header."""
    seen = []
    proxy.arm(mode)
    coll.insert_one({"_id": 1000 + n, "k": "m_" + mode})
    res.check(proxy.done.wait(15), "%s: the proxy saw no change event of he to damage" % mode)
    deadline = time.time() + 15
    while time.time() < deadline and not seen:
        err = last_errors(conn)
        if err and "returned" in err:
            seen.append(err)
        time.sleep(0.05)
    res.check(bool(seen), "%s: sync_status.last_error never named the refused reply" % mode)
    if mode == "garbage_pbrt":
        time.sleep(2.5)  # a position would be stored by now
        q(conn, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE application_name = 'idxtable_fdw applier' AND datname = current_database()")
    errors = read_until_found(res, conn, "he", "m_" + mode, [1000 + n], mode)
    if mode == "future_cluster_time":
        coll.insert_one({"_id": 2000 + n, "k": "later_" + mode})
        got = read(conn, "he", "later_" + mode)
        res.check(got == (True, [2000 + n]),
                  "%s: an outside insert after the damaged event, read at once: %r" % (mode, got))
    print("%s: refused (%s); reads failed meanwhile with %s" % (mode, (seen or ["-"])[0][:90],
                                                                 sorted(errors) or "nothing"))


def main():
    res = Results()
    start = time.time()
    uri = urllib.parse.urlparse(os.environ["MONGO_URI"])
    proxy = Proxy(uri.hostname, uri.port)
    conn = setup(proxy)
    coll = mongo_client.connect()[DATABASE]["he"]
    if res.check(wait_for(lambda: streaming(conn, "he_k"), 60), "the applier does not follow he_k through the proxy"):
        for n, mode in enumerate(CASES):
            if len(sys.argv) > 1 and mode not in sys.argv[1:]:
                continue
            case(res, conn, proxy, coll, mode, n)
    verify_clean(res, conn, "he_k", "at the end")
    conn.close()
    print("elapsed %.1fs" % (time.time() - start))
    print(res.summary("hostile_events"))
    sys.exit(1 if res.failed else 0)




if __name__ == "__main__":
    main()
