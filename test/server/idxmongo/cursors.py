"""Server-side cursors over materialised results, and batch building.

A query materialises its result list once; a cursor keeps that list and a position, and every batch is
sliced from it. Cursors belong to the server (libmongoc may send getMore on another pooled connection).
Batches are encoded to BSON once, as RawBSONDocuments, and capped at 16 MB like mongod's.

The examined counters follow mongod's lazy execution: when the plan streams (query.ResultProgress has
marks), a batch counts the keys and documents examined up to its last document (or up to the document left
for the next batch by the byte cap, which mongod has already fetched), the batch that exhausts the cursor
counts the rest, and a cursor killed, timed out or closed after a single batch never counts what it did not
return. A blocking plan's counters were all counted by the command that ran the query.
"""

import random
import threading
import time

from bson.int64 import Int64
from bson.raw_bson import RawBSONDocument

from . import rawbson
from .codec import encode
from .errors import MongoError

DEFAULT_FIRST_BATCH = 101
MAX_BATCH_BYTES = 16 * 1024 * 1024
IDLE_TIMEOUT_SECONDS = 600


def _encode_document(doc):
    """codec.encode(doc) for a result document. A dict whose `_id` is first (as every stored document's
    is) or absent is written by rawbson, whose bytes are then the same (bson.encode moves only the top
    level's `_id` first; rawbson writes the fields in their order, as codec.encode's own fallback does)
    in fewer steps than pymongo's C encoder takes for the small documents of a batch."""
    if type(doc) is dict and (not doc or next(iter(doc)) == "_id" or "_id" not in doc):
        return rawbson.document(doc)
    return encode(doc)


class Cursor:
    """Results of one query still to be returned."""

    def __init__(self, cursor_id, ns, docs, transform, progress=None):
        self.id = cursor_id
        self.ns = ns
        self.docs = docs
        self.pos = 0
        self.transform = transform
        self.last_used = time.monotonic()
        self.progress = progress  # a streaming plan's query.ResultProgress, else None
        self.counted = (0, 0)  # keys and documents examined counted so far
        self.member = 0  # the replica-set member it lives on (repl.py)

    def count_batch(self, stats, stashed):
        """Add to `stats` what producing the batch just taken examined: up to its last document, or up to
        the one after it when the byte cap `stashed` that one, or everything once the cursor is exhausted."""
        progress = self.progress
        if progress is None:
            return
        if self.pos >= len(self.docs):
            upto = (progress.keys, progress.docs)
        else:
            last = self.pos if stashed else self.pos - 1
            upto = progress.marks[last] if last >= 0 else (0, 0)
        stats.keys += upto[0] - self.counted[0]
        stats.docs += upto[1] - self.counted[1]
        self.counted = upto


class CursorRegistry:
    """All open cursors of the server, by id."""

    def __init__(self):
        self.lock = threading.Lock()
        self.cursors = {}

    def _encode_batch(self, cursor, max_docs, stats):
        """Take up to `max_docs` (None: no count limit) documents from the cursor, within the byte cap, and
        count in `stats` what producing them examined."""
        batch = []
        size = 0
        docs = cursor.docs
        stashed = False
        while cursor.pos < len(docs) and (max_docs is None or len(batch) < max_docs):
            doc = docs[cursor.pos]
            if cursor.transform is not None:
                doc = cursor.transform(doc)
            raw = _encode_document(doc)
            if batch and size + len(raw) > MAX_BATCH_BYTES:
                stashed = True
                break
            batch.append(RawBSONDocument(raw))
            size += len(raw)
            cursor.pos += 1
        if stats is not None:
            cursor.count_batch(stats, stashed)
        return batch

    def first_batch(self, ns, docs, batch_size=None, single_batch=False, transform=None, progress=None,
                    stats=None):
        """The `cursor` sub-document of a find/aggregate/list reply; registers a cursor if results remain.

        `transform` (e.g. a projection) is applied to each document as it is sent. With the `progress` of a
        streaming plan, the query's counters already in `stats` (the command's) are taken back and counted
        batch by batch instead.
        """
        if progress is None or progress.marks is None or stats is None:
            progress = None
        else:
            stats.keys -= progress.keys
            stats.docs -= progress.docs
        cursor = Cursor(0, ns, docs, transform, progress)
        max_docs = DEFAULT_FIRST_BATCH if batch_size is None else batch_size
        batch = self._encode_batch(cursor, max_docs, stats)
        if cursor.pos < len(docs) and not single_batch:
            with self.lock:
                cursor.id = self._new_id()
                self.cursors[cursor.id] = cursor
        return {"id": Int64(cursor.id), "ns": ns, "firstBatch": batch}

    def _new_id(self):
        """A fresh positive 63-bit cursor id."""
        while True:
            cursor_id = random.randint(1, 2 ** 63 - 1)
            if cursor_id not in self.cursors:
                return cursor_id

    def get_more(self, cursor_id, ns, batch_size=None, stats=None):
        """The `cursor` sub-document of a getMore reply; the cursor is closed once exhausted. What the batch
        examined is counted in `stats` (the getMore's)."""
        with self.lock:
            cursor = self.cursors.get(cursor_id)
        if cursor is None or cursor.ns != ns:
            raise MongoError(43, "cursor id %d not found" % cursor_id)
        batch = self._encode_batch(cursor, batch_size or None, stats)
        cursor.last_used = time.monotonic()
        if cursor.pos >= len(cursor.docs):
            with self.lock:
                self.cursors.pop(cursor_id, None)
            cursor_id = 0
        return {"id": Int64(cursor_id), "ns": ns, "nextBatch": batch}

    def kill(self, cursor_ids):
        """Close cursors; returns (killed, not found) id lists."""
        killed, missing = [], []
        with self.lock:
            for cursor_id in cursor_ids:
                (killed if self.cursors.pop(int(cursor_id), None) else missing).append(Int64(cursor_id))
        return killed, missing

    def reap(self):
        """Close cursors idle for longer than mongod's default cursor timeout."""
        limit = time.monotonic() - IDLE_TIMEOUT_SECONDS
        with self.lock:
            for cursor_id in [i for i, c in self.cursors.items() if c.last_used < limit]:
                del self.cursors[cursor_id]

    def count(self):
        """Number of open cursors."""
        with self.lock:
            return len(self.cursors)
