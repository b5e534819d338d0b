"""The change-event history change streams read: mongod's oplog, as far as change streams see it.

Every change to the store (context.py) becomes an entry here when its command ends (a transaction's
writes when it commits, all at the commit's cluster time, numbered by txnOpIndex); a statement rolled back
(onPrimaryTransactionalWrite) or an aborted transaction leaves none. Entries are kept in cluster-time
order, at most `limit` of them (--change-history); older ones are forgotten, and a resume point before
the oldest kept one fails with ChangeStreamHistoryLost (286), as a resume past the oplog's start does on
mongod. The history is not journaled: it starts empty at every start of the server, so a resume token of
an earlier run (its run id differs) is history lost too, never a silent skip.

A periodic no-op entry (mongod's periodicNoopIntervalSecs, repl/noop_writer.cpp: written when nothing was
written for that long) lets an idle stream's postBatchResumeToken advance.

Resume tokens ({_data: uppercase hex}) sort in stream order as strings:
  82 | clusterTime t (4 bytes) i (4) | type (00 high-water mark, 80 event) | txnOpIndex (4) |
  fromInvalidate (1) | event identity (4: crc32 of operationType and documentKey) | run id (4)
A high-water mark at time T sorts before every event at T; an invalidate sorts right after its cause.
The layout is this server's own (clients must treat tokens as opaque; change-streams spec).
"""

import bisect
import datetime
import os
import struct
import threading
import zlib

from bson.timestamp import Timestamp

from .codec import encode
from .errors import MongoError

DEFAULT_LIMIT = 1000000
HWM, EVENT = 0x00, 0x80
RUN_ID = struct.unpack(">I", os.urandom(4))[0]


def history_lost(what):
    """ChangeStreamHistoryLost (286), non-resumable."""
    return MongoError(286, "Resume of change stream was not possible, as the resume point may no longer be in "
                      "the oplog (%s)." % what, labels=["NonResumableChangeStreamError"])


def event_key(ts, op_index=0, identity=0, invalidate=False):
    """The ordering key of an event (the token without its run id)."""
    return struct.pack(">BIIBIBI", 0x82, ts.time, ts.inc, EVENT, op_index, 1 if invalidate else 0, identity)


def hwm_key(ts):
    """The ordering key of a high-water mark at `ts` (before every event at `ts`)."""
    return struct.pack(">BIIB", 0x82, ts.time, ts.inc, HWM)


def token(key):
    """The resume token document of a key."""
    return {"_data": (key + struct.pack(">I", RUN_ID)).hex().upper()}


def decode_token(doc):
    """(key, is_hwm, is_invalidate, same_run) of a resume token; InvalidResumeToken (260) when malformed."""
    data = doc.get("_data") if isinstance(doc, dict) else None
    try:
        raw = bytes.fromhex(data)
    except (TypeError, ValueError):
        raise MongoError(260, "Bad resume token: _data of missing or of wrong type") from None
    if len(raw) == 14 and raw[0] == 0x82 and raw[9] == HWM:
        return raw[:10], True, False, struct.unpack(">I", raw[10:])[0] == RUN_ID
    if len(raw) == 23 and raw[0] == 0x82 and raw[9] == EVENT:
        return raw[:19], False, raw[14] == 1, struct.unpack(">I", raw[19:])[0] == RUN_ID
    raise MongoError(260, "Bad resume token: unknown format")


def key_time(key):
    """The cluster time of a key."""
    t, i = struct.unpack(">II", key[1:9])
    return Timestamp(t, i)


def identity_of(op, doc_key):
    """A short hash naming the event (its operation type and document key), kept in its token."""
    return zlib.crc32(op.encode() + (encode(doc_key) if doc_key is not None else b""))


def wall_now():
    """The wall clock in milliseconds, as BSON dates carry it (UTC, naive)."""
    now = datetime.datetime.utcnow()
    return now.replace(microsecond=now.microsecond // 1000 * 1000)


class Entry:
    """One recorded change: `fields` hold the event's own fields (operationType, ns, documentKey, ...)."""

    __slots__ = ("key", "ts", "wall", "op", "db", "coll", "fields", "txn")

    def __init__(self, op, db, coll, fields, txn=None):
        self.op = op
        self.db = db
        self.coll = coll
        self.fields = fields
        self.txn = txn  # (txnNumber, lsid) of a transaction's event
        self.key = self.ts = self.wall = None

    def stamp(self, ts, wall, op_index=0):
        """Give the entry its place in the history."""
        self.ts = ts
        self.wall = wall
        self.key = event_key(ts, op_index, identity_of(self.op, self.fields.get("documentKey")))


class ChangeLog:
    """The bounded, ordered history of one server, and the condition getMores wait on."""

    def __init__(self, start_time, limit=DEFAULT_LIMIT):
        self.cond = threading.Condition()
        self.limit = max(1, int(limit))
        self.keys = []
        self.entries = []
        self.horizon = hwm_key(start_time)  # nothing at or before this position is known any more
        self.last_write = 0.0  # time.monotonic() of the last entry (for the periodic no-op)

    def publish(self, entries, now):
        """Append entries (already stamped, in order, later than every earlier one) and wake the waiters."""
        if not entries:
            return
        with self.cond:
            for entry in entries:
                self.keys.append(entry.key)
                self.entries.append(entry)
            excess = len(self.entries) - self.limit
            if excess > max(1, self.limit // 10):  # forget in chunks: amortised O(1) per entry
                self.horizon = self.keys[excess - 1]
                del self.keys[:excess]
                del self.entries[:excess]
            self.last_write = now
            self.cond.notify_all()

    def check_start(self, key, is_hwm):
        """Raise 286 when the history no longer reaches back to a start position (cond held)."""
        if key < self.horizon or (not is_hwm and key <= self.horizon):
            raise history_lost("the history holds changes after %s only" % key_time(self.horizon))

    def find(self, key):
        """True if an entry with exactly this key is in the history (cond held)."""
        i = bisect.bisect_left(self.keys, key)
        return i < len(self.keys) and self.keys[i] == key

    def after(self, key, max_entries):
        """Up to `max_entries` entries after position `key` (cond held); 286 if the history moved past it."""
        if key < self.horizon:
            raise history_lost("the stream's position %s is no longer in the history" % key_time(key))
        i = bisect.bisect_right(self.keys, key)
        return self.entries[i:i + max_entries]
