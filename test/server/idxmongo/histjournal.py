"""The change-stream history in the journal (--dbpath): mongod's oplog survives a restart, so ours does too.

Each journal record (journal.py) also carries what the history needs of its changes, so that resume tokens
and startAtOperationTime of an earlier run still work after a kill and restart:

    ts    the cluster time when the record was written: the clock restarts at or after the latest one
    ev    the record's history entries, packed (EV_FORMAT each: cluster time, txnOpIndex, wall clock,
          kind), in history order
    x     for the entries that are not changes to a document (drop, rename, dropDatabase, no-op), in order:
          {db, coll, to}
    txn   [txnNumber, lsid] of a committed transaction's entries

An entry for a document (insert, update, replace, delete) is not written again: it is rebuilt at replay
from the op it belongs to (every such change is one element of an insert, replace or delete op, in the
same order as the entries), against the store as it then is, exactly as the server built it live
(changestream.doc_entry, update_entry: updateDescription and pre- and post-images from the documents
before and after). So a bulk write costs a few packed bytes per document more, not a second encoding.

    meta  {runId, horizon}: the run id every token of this directory carries (changelog.RUN_ID, kept across
          restarts so earlier tokens stay valid) and the history's horizon (nothing at or before it is
          known); written when a directory is first used, and first in a checkpoint
    hist  whole entries (entry_doc), for a checkpoint (whose ops no longer hold the changes)

The history replayed is bounded by --change-history like the live one (the oldest entries forgotten, the
horizon moved past them), and a checkpoint writes only what is kept, so the journal stays bounded.
"""

import os
import struct
import sys

from bson.binary import Binary
from bson.int64 import Int64
from bson.timestamp import Timestamp

from . import changelog, changestream
from .changelog import DOC_OPS, Entry, hwm_key
from .journal import BATCHED

EV_FORMAT = struct.Struct(">IIIdB")
KINDS = ["insert", "update", "replace", "delete", "drop", "rename", "dropDatabase", changestream.NO_OP]
KIND_CODE = {name: code for code, name in enumerate(KINDS)}
# Which journal op holds each kind of document entry.
OP_OF_KIND = {"insert": "insert", "update": "replace", "replace": "replace", "delete": "delete"}
CHECKPOINT_CHUNK = 1000


def record_fields(ops, entries):
    """The history fields of a journal record holding `ops` and the history `entries` they made."""
    fields = {}
    packed, inline = [], []
    for entry in entries:
        packed.append(EV_FORMAT.pack(entry.ts.time, entry.ts.inc, struct.unpack_from(">I", entry.key, 10)[0],
                                     entry.wall, KIND_CODE[entry.op]))
        if entry.op not in DOC_OPS:
            inline.append(_names(entry))
    if sum(len(op[BATCHED[op["op"]]]) for op in ops if op["op"] in BATCHED) != len(entries) - len(inline):
        # not one entry per document changed (which would be a bug): keep the entries whole
        fields["hist"] = [entry_doc(entry) for entry in entries]
    else:
        fields["ev"] = Binary(b"".join(packed))
        if inline:
            fields["x"] = inline
    if entries[0].txn is not None:
        fields["txn"] = list(entries[0].txn)
    return fields


def _names(entry):
    """What an entry that is not a document's change names."""
    doc = {}
    if entry.db is not None:
        doc["db"] = entry.db
    if entry.coll is not None:
        doc["coll"] = entry.coll
    if entry.to is not None:
        doc["to"] = entry.to
    return doc


def entry_doc(entry):
    """A whole entry as a document (checkpoints)."""
    doc = {"k": Binary(entry.key), "w": entry.wall, "op": entry.op}
    doc.update(_names(entry))
    if entry.op in DOC_OPS:
        doc["id"] = entry.doc_id
    for field in ("doc", "desc", "pre", "post"):
        if getattr(entry, field) is not None:
            doc[field] = getattr(entry, field)
    if entry.txn is not None:
        doc["txn"] = list(entry.txn)
    return doc


def entry_from_doc(doc):
    """The entry a document of entry_doc describes."""
    entry = Entry(doc["op"], doc.get("db"), doc.get("coll"), doc.get("id"), doc.get("doc"), doc.get("desc"),
                  doc.get("to"))
    entry.pre, entry.post = doc.get("pre"), doc.get("post")
    if "txn" in doc:
        entry.txn = (Int64(doc["txn"][0]), doc["txn"][1])
    key = bytes(doc["k"])
    entry.key, entry.ts, entry.wall = key, changelog.key_time(key), doc["w"]
    return entry


class DurableHistory:
    """The history of one --dbpath directory: rebuilt from the journal at start (Journal.load calls
    `begin`, the document hooks and `end` for each record), packed into each record written after."""

    def __init__(self, log, clock):
        self.log = log
        self.clock = clock
        self.meta_seen = False
        self.latest = None  # the latest cluster time journaled
        self.headers = []  # (ts, op index, wall, kind) of the record being replayed, and the next one's index
        self.next = 0
        self.made = []  # its entries, rebuilt
        self.inline = []  # the names of its entries that are not a document's change
        self.txn = None
        log.horizon = hwm_key(Timestamp(0, 0))  # until the journal's meta says otherwise

    # --- replay -------------------------------------------------------------------------------------

    def begin(self, record):
        """Start replaying a record; True when its document ops must report their changes (hooks)."""
        self._saw_time(record.get("ts"))
        meta = record.get("meta")
        if meta is not None:
            changelog.set_run_id(int(meta["runId"]))
            self.log.horizon = bytes(meta["horizon"])
            self.meta_seen = True
        self.made = [entry_from_doc(doc) for doc in record.get("hist", ())]
        txn = record.get("txn")
        self.txn = (Int64(txn[0]), txn[1]) if txn else None
        self.headers = [(Timestamp(t, i), index, wall, KINDS[kind])
                        for t, i, index, wall, kind in EV_FORMAT.iter_unpack(bytes(record.get("ev", b"")))]
        self.inline = list(record.get("x", ()))
        self.next = 0
        return bool(self.headers)

    def inserted(self, coll, docs):
        """An insert op was replayed."""
        if self._take("insert", len(docs)):
            self._place([changestream.doc_entry("insert", coll, doc["_id"], doc) for doc in docs])

    def replaced(self, coll, olds, news):
        """A replace op was replayed (`olds`: the documents before it): update or replace entries."""
        kinds = self._take("replace", len(news))
        if kinds:
            self._place([changestream.update_entry(coll, old, new, kind == "replace")
                         for kind, old, new in zip(kinds, olds, news)])

    def deleted(self, coll, olds):
        """A delete op was replayed (`olds`: the documents deleted)."""
        if self._take("delete", len(olds)):
            self._place([changestream.doc_entry("delete", coll, old["_id"], pre=old) for old in olds])

    def _take(self, op, count):
        """The kinds of the record's next `count` document entries, which `op` made (after the entries
        before them: drops, renames...); [] when the entries do not match the ops (a bug: reported, the
        record's remaining entries are left out of the history, the data is replayed all the same)."""
        self._inline_until_document()
        kinds = [header[3] for header in self.headers[self.next:self.next + count]]
        if len(kinds) == count and all(OP_OF_KIND.get(kind) == op for kind in kinds):
            return kinds
        print("journal: the history entries of a record do not match its %s op" % op, file=sys.stderr)
        del self.headers[self.next:]
        return []

    def _inline_until_document(self):
        """Rebuild the entries up to the next document entry (drops, renames, ...)."""
        while self.next < len(self.headers) and self.headers[self.next][3] not in DOC_OPS:
            names = self.inline.pop(0) if self.inline else {}
            kind = self.headers[self.next][3]
            self._place([Entry(kind, names.get("db"), names.get("coll"), to=names.get("to"))])

    def _place(self, entries):
        """Place rebuilt entries where the next headers say."""
        txn = self.txn
        for entry, (ts, index, wall, _) in zip(entries, self.headers[self.next:self.next + len(entries)]):
            entry.stamp(ts, wall, index)
            entry.txn = txn
        self.next += len(entries)
        self.made.extend(entries)

    def end(self):
        """Finish a record: its entries join the history (bounded by --change-history); returns how many
        changes it held besides its ops."""
        self._inline_until_document()
        if self.next < len(self.headers):
            print("journal: %d history entries without their document op" % (len(self.headers) - self.next),
                  file=sys.stderr)
        extra = sum(1 for entry in self.made if entry.op not in DOC_OPS) if self.headers else len(self.made)
        if self.made:
            self._saw_time(self.made[-1].ts)
            self.log.publish(self.made, 0.0)
        self.made, self.headers = [], []
        return extra

    def _saw_time(self, ts):
        """Note a journaled cluster time."""
        if isinstance(ts, Timestamp) and (self.latest is None or ts > self.latest):
            self.latest = ts

    def finish(self):
        """After the replay: the clock continues after the latest journaled time; without a meta record
        (a new directory, or a journal of a server without a durable history) a new run id and a horizon at
        the current time. Returns the number of entries kept."""
        if self.latest is not None:
            self.clock.restore(self.latest)
        if not self.meta_seen:
            changelog.set_run_id(struct.unpack(">I", os.urandom(4))[0])
            self.log.horizon = max(self.log.horizon, hwm_key(self.clock.current()))
        return len(self.log.entries)

    # --- writing ------------------------------------------------------------------------------------

    def meta_record(self):
        """The record naming the run id and the horizon."""
        return {"ops": [], "ts": self.clock.current(),
                "meta": {"runId": Int64(changelog.RUN_ID), "horizon": Binary(self.log.horizon)}}

    @staticmethod
    def record_fields(ops, entries):
        """The history fields of a record (record_fields)."""
        return record_fields(ops, entries)

    def needs_meta(self):
        """True when the journal has no meta record yet."""
        return not self.meta_seen

    def checkpoint_records(self):
        """The meta record and the kept history, whole, for a checkpoint."""
        self.meta_seen = True
        yield self.meta_record()
        entries = self.log.entries
        for start in range(0, len(entries), CHECKPOINT_CHUNK):
            yield {"ops": [], "hist": [entry_doc(entry) for entry in entries[start:start + CHECKPOINT_CHUNK]]}

