"""The change-event history change streams read: mongod's oplog, as far as change streams see it.

Every change to the store (context.py) becomes an entry here when its command ends (a transaction's
writes when it commits, all at the commit's cluster time, numbered by txnOpIndex); a statement rolled back
(onPrimaryTransactionalWrite) or an aborted transaction leaves none. Entries are kept in cluster-time
order, at most `limit` of them (--change-history); older ones are forgotten, and a resume point before
the oldest kept one fails with ChangeStreamHistoryLost (286), as a resume past the oplog's start does on
mongod. With --dbpath the history is journaled with the data and replayed at start (histjournal.py), and
the run id in tokens is the directory's, so tokens and times of an earlier run resume as on mongod, whose
oplog survives a restart. Without --dbpath the history starts empty at every start of the server, so a
resume token of an earlier run (its run id differs) is history lost, never a silent skip.

A periodic no-op entry (mongod's periodicNoopIntervalSecs, repl/noop_writer.cpp: written when nothing was
written for that long) lets an idle stream's postBatchResumeToken advance.

Resume tokens ({_data: uppercase hex}) sort in stream order as strings:
  82 | clusterTime t (4 bytes) i (4) | type (00 high-water mark, 80 event) | txnOpIndex (4) |
  fromInvalidate (1) | event identity (4: crc32 of operationType and documentKey) | run id (4) |
  [fragment (2): the fragment number of a split event's fragment, $changeStreamSplitLargeEvent]
A high-water mark at time T sorts before every event at T; an invalidate sorts right after its cause;
the fragments of a split event sort after its own token, in order.
An entry's position (its key) is the token up to fromInvalidate, unique since every change outside a
transaction has its own cluster time; the identity is computed only when a token is made or checked,
so recording costs little.
The layout is this server's own (clients must treat tokens as opaque; change-streams spec).
"""

import bisect
import datetime
import os
import struct
import threading
import time
import zlib

from bson.timestamp import Timestamp

from . import rawbson
from .errors import MongoError

DEFAULT_LIMIT = 500000
HWM, EVENT = 0x00, 0x80
RUN_ID = struct.unpack(">I", os.urandom(4))[0]  # this process's; with --dbpath the directory's


def set_run_id(run_id):
    """With --dbpath the run id is the directory's (histjournal.py), so tokens of earlier runs stay valid."""
    global RUN_ID
    RUN_ID = run_id


def history_lost(what):
    """ChangeStreamHistoryLost (286), non-resumable."""
    return MongoError(286, "Resume of change stream was not possible, as the resume point may no longer be in "
                      "the oplog (%s)." % what, labels=["NonResumableChangeStreamError"])


def event_key(ts, op_index=0, invalidate=False):
    """The position of an event: its token without the identity and the run id."""
    return struct.pack(">BIIBIB", 0x82, ts.time, ts.inc, EVENT, op_index, 1 if invalidate else 0)


def hwm_key(ts):
    """The ordering key of a high-water mark at `ts` (before every event at `ts`)."""
    return struct.pack(">BIIB", 0x82, ts.time, ts.inc, HWM)


def token(key, identity=None, fragment=None):
    """The resume token document of a position (an event's: with its identity; a fragment's of a split
    event: with its number too)."""
    tail = struct.pack(">I", identity) if identity is not None else b""
    tail += struct.pack(">I", RUN_ID)
    if fragment is not None:
        tail += struct.pack(">H", fragment)
    return {"_data": (key + tail).hex().upper()}


def decode_token(doc):
    """(key, is_hwm, is_invalidate, same_run, identity) of a resume token; InvalidResumeToken (260) when
    malformed. A fragment's token gives its event's (token_fragment gives the fragment number)."""
    raw = _token_bytes(doc)
    if len(raw) == 14 and raw[0] == 0x82 and raw[9] == HWM:
        return raw[:10], True, False, struct.unpack(">I", raw[10:])[0] == RUN_ID, None
    if len(raw) in (23, 25) and raw[0] == 0x82 and raw[9] == EVENT:
        run, identity = struct.unpack(">I", raw[19:23])[0], struct.unpack(">I", raw[15:19])[0]
        return raw[:15], False, raw[14] == 1, run == RUN_ID, identity
    raise MongoError(260, "Bad resume token: unknown format")


def token_fragment(doc):
    """The fragment number of a split event's fragment token (0 for the first), else None (a token
    decode_token accepted)."""
    raw = _token_bytes(doc)
    return struct.unpack(">H", raw[23:])[0] if len(raw) == 25 else None


def _token_bytes(doc):
    """The bytes of a token's _data; 260 when it has none."""
    data = doc.get("_data") if isinstance(doc, dict) else None
    try:
        return bytes.fromhex(data)
    except (TypeError, ValueError):
        raise MongoError(260, "Bad resume token: _data of missing or of wrong type") from None


def key_time(key):
    """The cluster time of a key."""
    t, i = struct.unpack(">II", key[1:9])
    return Timestamp(t, i)


def identity_of(op, doc_key):
    """A short hash naming the event (its operation type and document key), kept in its token."""
    return zlib.crc32(op.encode() + (rawbson.document(doc_key) if doc_key is not None else b""))


def wall_now():
    """The wall clock (seconds since the epoch), turned into a BSON date when an event is built."""
    return time.time()


def wall_date(seconds):
    """A wall clock reading as a BSON date (UTC, naive, milliseconds)."""
    return datetime.datetime(1970, 1, 1) + datetime.timedelta(milliseconds=int(seconds * 1000))


class Entry:
    """One recorded change: the changed document's `_id`, the new document (insert, replace) or the
    updateDescription (update), the target of a rename; kept as references, built into events on reading."""

    __slots__ = ("key", "ts", "wall", "op", "db", "coll", "doc_id", "doc", "desc", "to", "txn", "pre", "post",
                 "prior")

    def __init__(self, op, db, coll, doc_id=None, doc=None, desc=None, to=None):
        self.op = op
        self.db = db
        self.coll = coll
        self.doc_id = doc_id
        self.doc = doc
        self.desc = desc
        self.to = to
        self.txn = None  # (txnNumber, lsid) of a transaction's event
        self.pre = self.post = None  # pre- and post-images (changeStreamPreAndPostImages)
        # the document before the change (None: it did not exist), kept while the replica set is
        # versioned (repl.py: reads as of an optime, rollback)
        self.prior = NO_PRIOR
        self.key = self.ts = self.wall = None

    def stamp(self, ts, wall, op_index=0):
        """Give the entry its place in the history."""
        self.ts = ts
        self.wall = wall
        self.key = event_key(ts, op_index)

    def identity(self):
        """The event's identity, as its token carries it."""
        return identity_of(self.op, {"_id": self.doc_id} if self.op in DOC_OPS else None)


DOC_OPS = {"insert", "update", "replace", "delete"}
NO_PRIOR = object()  # Entry.prior of a change made while the replica set was not versioned


class _Waiter:
    """A getMore waiting for entries: woken by one it may return (`relevant`), by a trim of the history,
    or after `every` others (so that its position never falls far behind while it sleeps)."""

    def __init__(self, relevant, lock, every):
        self.relevant = relevant
        self.cond = threading.Condition(lock)
        self.every = every
        self.others = 0
        self.woken = False

    def offer(self, entries, trimmed):
        """Published entries (cond held): wake the getMore if it may want them."""
        if self.woken:
            return
        if not trimmed:
            for entry in entries:
                if self._relevant(entry):
                    break
                self.others += 1
            else:
                if self.others < self.every:
                    return
        self.woken = True
        self.cond.notify()

    def _relevant(self, entry):
        try:
            return self.relevant(entry)
        except Exception:  # noqa: BLE001 (a filter that fails: the getMore reports it)
            return True


class ChangeLog:
    """The bounded, ordered history of one server, and the condition getMores wait on."""

    def __init__(self, start_time, limit=DEFAULT_LIMIT):
        self.lock = threading.RLock()
        self.cond = threading.Condition(self.lock)
        self.waiters = []  # _Waiter of the getMores waiting for entries
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
            trimmed = excess > max(1, self.limit // 10)
            if trimmed:  # forget in chunks: amortised O(1) per entry
                self.horizon = self.keys[excess - 1]
                del self.keys[:excess]
                del self.entries[:excess]
            self.last_write = now
            for waiter in self.waiters:
                waiter.offer(entries, trimmed)

    def wait(self, relevant, timeout):
        """Wait (cond held) up to `timeout` s until an entry for which `relevant(entry)` is true is
        published (or the history is trimmed, or a twentieth of it was published meanwhile). A getMore
        woken by every write of the database would use more of this server's one core than the events
        it returns cost, as a stream of one collection of a busy database does; it sleeps through the
        others instead, and scans them when it wakes."""
        waiter = _Waiter(relevant, self.lock, max(1, self.limit // 20))
        self.waiters.append(waiter)
        try:
            waiter.cond.wait(timeout)
        finally:
            self.waiters.remove(waiter)

    def check_start(self, key, is_hwm):
        """Raise 286 when the history no longer reaches back to a start position (cond held)."""
        if key < self.horizon or (not is_hwm and key <= self.horizon):
            raise history_lost("the history holds changes after %s only" % key_time(self.horizon))

    def find(self, key):
        """The entry at exactly this position, or None (cond held)."""
        i = bisect.bisect_left(self.keys, key)
        return self.entries[i] if i < len(self.keys) and self.keys[i] == key else None

    def after(self, key, max_entries, bound=None):
        """Up to `max_entries` entries after position `key` (cond held), before position `bound` if given
        (a replica set's majority commit point, repl.py); 286 if the history moved past it."""
        if key < self.horizon:
            raise history_lost("the stream's position %s is no longer in the history" % key_time(key))
        i = bisect.bisect_right(self.keys, key)
        end = i + max_entries
        if bound is not None:
            end = min(end, bisect.bisect_left(self.keys, bound, i))
        return self.entries[i:end]
