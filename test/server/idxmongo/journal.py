"""Durability with --dbpath: a journal of every change to the store, replayed at start.

The journal is `DIR/journal.bson`, a sequence of BSON records `{ops: [op, ...]}`, one per command that
changed something and one per committed transaction, holding its writes (and the collections and indexes
it created) as a unit. Each record is written and flushed before the command's reply is sent, so an
acknowledged write survives the process being killed (kill -9, or the failCommand `killServer` extension);
there is no fsync, so a machine crash may lose it. An aborted transaction writes nothing, and an open one
is lost with the process, as with a restart of mongod.

The ops, with their `db` and `coll`:

    {op: "create", uuid, options}    a collection (explicit or implicit)
    {op: "insert", docs}             new documents
    {op: "replace", docs}            the new versions of the documents with these `_id`s
    {op: "delete", ids}              the documents with these `_id`s are gone
    {op: "createIndex", spec}        an index, built over the documents then present
    {op: "dropIndex", name}
    {op: "drop"}                     the collection
    {op: "dropDatabase"}             (no `coll`)
    {op: "session", lsid, txnNumber, stmts: [[stmtId, outcome], ...]}
                                     statements a retryable write recorded (retry.py; mongod's
                                     config.transactions), in the record of the write itself

Consecutive inserts (replacements, deletions) in one collection share one op, which halves the cost of
journaling a bulk write (pymongo's `bson` here is the pure-Python one).

Records also carry the change-stream history (fields `ts`, `ev`, `x`, `txn`, `meta`, `hist`; see
histjournal.py), so that resume tokens survive a restart as they do with mongod's oplog; a checkpoint keeps
the history's last --change-history entries, so the journal stays bounded.

At start the records are replayed into the empty store (and the history). A last record cut short (a kill
in the middle of writing it) is ignored and cut off the file. When the journal holds many more changes than
the data and the history it describes, it is rewritten as one record per collection and the history kept
(a checkpoint), so restarts stay fast. A lock on `DIR/mongod.lock` keeps a second server off the same
directory.

Replay gives the same documents, indexes, options and collection uuids. Natural order can differ in one
respect: documents a transaction inserted come back after those other sessions inserted while it was open
(its writes are replayed at its commit).
"""

import fcntl
import os
import struct
import sys

from bson.binary import Binary
from bson.errors import InvalidBSON
from bson.int64 import Int64

from .bsonkeys import sort_key
from .codec import decode, encode
from .errors import MongoError

JOURNAL_FILE = "journal.bson"
LOCK_FILE = "mongod.lock"
# Checkpoint at start when the journal holds more than this many changes per live object (document,
# collection, index or change-stream history entry) ...
CHECKPOINT_RATIO = 2
# ... and at least this many changes in all.
CHECKPOINT_MIN_CHANGES = 1000


def create_op(coll):
    """A collection was created (with its uuid and options)."""
    return {"op": "create", "db": coll.db, "coll": coll.name, "uuid": coll.uuid, "options": coll.options}


def insert_op(coll, docs):
    """Documents were inserted."""
    return {"op": "insert", "db": coll.db, "coll": coll.name, "docs": docs}


def replace_op(coll, docs):
    """The documents with these documents' `_id`s were replaced by them."""
    return {"op": "replace", "db": coll.db, "coll": coll.name, "docs": docs}


def delete_op(coll, ids):
    """The documents with these `_id`s were deleted."""
    return {"op": "delete", "db": coll.db, "coll": coll.name, "ids": ids}


def create_index_op(coll, spec):
    """An index was built."""
    return {"op": "createIndex", "db": coll.db, "coll": coll.name, "spec": spec}


def drop_index_op(coll, name):
    """An index was dropped."""
    return {"op": "dropIndex", "db": coll.db, "coll": coll.name, "name": name}


def drop_op(coll):
    """A collection was dropped."""
    return {"op": "drop", "db": coll.db, "coll": coll.name}


def session_op(session_key, number, stmts):
    """Statements of a retryable write (with --dbpath; db and coll name mongod's collection for them)."""
    return {"op": "session", "db": "config", "coll": "transactions", "lsid": Binary(session_key, 4),
            "txnNumber": Int64(number), "stmts": [[stmt_id, outcome] for stmt_id, outcome in stmts]}


def options_op(coll):
    """A collection's options were changed (collMod)."""
    return {"op": "options", "db": coll.db, "coll": coll.name, "options": coll.options}


def rename_op(db, old, new):
    """A collection was renamed (within its database)."""
    return {"op": "rename", "db": db, "coll": old, "to": new}


def drop_database_op(db):
    """A database was dropped."""
    return {"op": "dropDatabase", "db": db}


# The list each batched op carries.
BATCHED = {"insert": "docs", "replace": "docs", "delete": "ids"}


def add_op(ops, op):
    """Append `op` to a list of ops, merged into the last one when both are the same batched kind of change
    to the same collection."""
    field = BATCHED.get(op["op"])
    last = ops[-1] if ops else None
    if (field is not None and last is not None and last["op"] == op["op"] and last["coll"] == op["coll"]
            and last["db"] == op["db"]):
        last[field].extend(op[field])
    else:
        ops.append(op)


def checkpoint_ops(coll):
    """Ops that rebuild a collection: create, its secondary indexes, its documents in natural order."""
    ops = [create_op(coll)]
    ops.extend(create_index_op(coll, index.spec) for index in coll.indexes.values() if not index.is_id)
    if coll.docs:
        ops.append(insert_op(coll, list(coll.docs.values())))
    return ops


# ---------------------------------------------------------------------------------------------- replay

def _replay_create(store, op):
    """A collection, with its original uuid and options."""
    coll, _ = store.ensure(op["db"], op["coll"])
    coll.uuid = op["uuid"]
    coll.options = dict(op["options"])


def _replay_insert(store, op, history=None):
    """Insert (the collection is created implicitly, as the live insert may have done); `history`
    (histjournal.py) rebuilds the change-stream entry of each document."""
    coll, _ = store.ensure(op["db"], op["coll"])
    for doc in op["docs"]:
        coll.insert(doc)
    if history is not None:
        history.inserted(coll, op["docs"])


def _existing(store, op):
    """The collection an op applies to; KeyError when it is missing."""
    coll = store.get(op["db"], op["coll"])
    if coll is None:
        raise KeyError("no collection %s.%s" % (op["db"], op["coll"]))
    return coll


def _replay_replace(store, op, history=None):
    """Replace documents by `_id` (`history`: as for _replay_insert, with the documents replaced)."""
    coll = _existing(store, op)
    olds = []
    for doc in op["docs"]:
        key = sort_key(doc["_id"])
        if history is not None:
            olds.append(coll.docs.get(key))
        coll.replace(key, doc)
    if history is not None:
        history.replaced(coll, olds, op["docs"])


def _replay_delete(store, op, history=None):
    """Delete documents by `_id` (`history`: as for _replay_insert, with the documents deleted)."""
    coll = _existing(store, op)
    olds = []
    for doc_id in op["ids"]:
        key = sort_key(doc_id)
        if history is not None:
            olds.append(coll.docs.get(key))
        coll.delete(key)
    if history is not None:
        history.deleted(coll, olds)


def _replay_create_index(store, op):
    """Build an index (the collection is created implicitly, as createIndexes does)."""
    coll, _ = store.ensure(op["db"], op["coll"])
    coll.add_index(op["spec"])


def _replay_drop_index(store, op):
    """Drop an index."""
    del _existing(store, op).indexes[op["name"]]


def _replay_drop(store, op):
    """Drop a collection."""
    store.drop(op["db"], op["coll"])


def _replay_options(store, op):
    """Set a collection's options."""
    _existing(store, op).options = dict(op["options"])


def _replay_rename(store, op):
    """Rename a collection."""
    coll = store.drop(op["db"], op["coll"])
    coll.name = op["to"]
    store.add(coll)


def _replay_drop_database(store, op):
    """Drop a database."""
    store.drop_db(op["db"])


REPLAY = {
    "create": _replay_create,
    "insert": _replay_insert,
    "replace": _replay_replace,
    "delete": _replay_delete,
    "createIndex": _replay_create_index,
    "dropIndex": _replay_drop_index,
    "drop": _replay_drop,
    "dropDatabase": _replay_drop_database,
    "rename": _replay_rename,
    "options": _replay_options,
}


def apply_op(store, op, history=None):
    """Apply one journaled op to the store (a document op telling `history` its changes, if given);
    returns an error message instead of raising."""
    try:
        if history is not None and op["op"] in BATCHED:
            REPLAY[op["op"]](store, op, history)
        else:
            REPLAY[op["op"]](store, op)
    except (MongoError, KeyError) as exc:
        return "journal: cannot replay %s on %s.%s: %s" % (op.get("op"), op.get("db"), op.get("coll"), exc)
    return None


def read_records(data):
    """The complete records at the start of `data` and the length they take; a short or undecodable
    record ends the list (the tail of a write cut short by a kill)."""
    records = []
    pos = 0
    while pos + 4 <= len(data):
        size = struct.unpack_from("<i", data, pos)[0]
        if size < 5 or pos + size > len(data) or data[pos + size - 1] != 0:
            break
        try:
            records.append(decode(data[pos:pos + size]))
        except (InvalidBSON, ValueError, IndexError, struct.error):
            break
        pos += size
    return records, pos


def live_objects(store):
    """Documents, collections and indexes in the store (what a checkpoint would write)."""
    return sum(len(coll.docs) + len(coll.indexes) for colls in store.dbs.values() for coll in colls.values())


def op_size(op):
    """How many changes an op stands for (the documents of a batched op)."""
    field = BATCHED.get(op["op"])
    return len(op[field]) if field else 1


class Journal:
    """The journal of one --dbpath directory, open for appending once `load` has replayed it."""

    def __init__(self, dbpath):
        os.makedirs(dbpath, exist_ok=True)
        self.dbpath = dbpath
        self.path = os.path.join(dbpath, JOURNAL_FILE)
        self.lock_file = self._lock(os.path.join(dbpath, LOCK_FILE))
        self.file = None
        self.sessions = {}  # session key -> [txnNumber, {stmtId: outcome}], replayed for retry.py
        self.history = None  # the change-stream history (histjournal.DurableHistory), journaled too

    @staticmethod
    def _lock(path):
        """Hold an exclusive lock on the directory for the life of the process (released at exit)."""
        f = open(path, "a")
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            f.close()
            raise RuntimeError("%s is in use by another server" % os.path.dirname(path)) from exc
        return f

    def load(self, store, history=None):
        """Replay the journal into `store` (and the change-stream `history`, histjournal.DurableHistory),
        drop a cut-short tail, checkpoint if worthwhile, open for appending. Replay problems (which would
        be bugs) are reported on stderr; returns the number of changes replayed."""
        data = b""
        if os.path.exists(self.path):
            with open(self.path, "rb") as f:
                data = f.read()
        records, good = read_records(data)
        self.history = history
        n_changes = sum(self._replay_record(store, record) for record in records)
        kept = history.finish() if history is not None else 0
        if n_changes > max(CHECKPOINT_MIN_CHANGES, CHECKPOINT_RATIO * (live_objects(store) + kept)):
            self._checkpoint(store)
        elif good < len(data):
            os.truncate(self.path, good)
        self.file = open(self.path, "ab")
        if history is not None and history.needs_meta():
            self._append(history.meta_record())
        return n_changes

    def _replay_record(self, store, record):
        """Replay one record; the number of changes it held."""
        hooks = self.history.begin(record) if self.history is not None else False
        n_changes = 0
        for op in record["ops"]:
            n_changes += op_size(op)
            if op["op"] == "session":
                self._replay_session(op)
                continue
            problem = apply_op(store, op, self.history if hooks else None)
            if problem:
                print(problem, file=sys.stderr)
        if self.history is not None:
            n_changes += self.history.end()
        return n_changes

    def _replay_session(self, op):
        """A retryable write's statements: a newer txnNumber replaces the session's history."""
        key = bytes(op["lsid"])
        history = self.sessions.get(key)
        if history is None or history[0] < op["txnNumber"]:
            history = self.sessions[key] = [int(op["txnNumber"]), {}]
        if history[0] == op["txnNumber"]:
            history[1].update((stmt_id, outcome) for stmt_id, outcome in op["stmts"])

    def _checkpoint(self, store):
        """Rewrite the journal as one record per collection, one for the sessions' retryable writes and
        the change-stream history kept (atomically: a kill leaves the old one)."""
        tmp = self.path + ".tmp"
        with open(tmp, "wb") as f:
            for colls in store.dbs.values():
                for coll in colls.values():
                    f.write(encode({"ops": checkpoint_ops(coll)}))
            if self.sessions:
                f.write(encode({"ops": [session_op(key, number, stmts.items())
                                        for key, (number, stmts) in self.sessions.items()]}))
            if self.history is not None:
                for record in self.history.checkpoint_records():
                    f.write(encode(record))
        os.replace(tmp, self.path)

    def write(self, ops, entries=(), ts=None):
        """Append one record (with its change-stream history `entries` and the cluster time `ts`, when
        the history is journaled) and flush it to the operating system (which keeps it if the process
        dies)."""
        record = {"ops": ops}
        if self.history is not None:
            record["ts"] = ts
            if entries:
                record.update(self.history.record_fields(ops, entries))
        self._append(record)

    def _append(self, record):
        """Write and flush one record."""
        self.file.write(encode(record))
        self.file.flush()
