"""Per-command context: who runs the command (session, transaction) and the visibility-aware read/write
helpers that every command uses, so transaction isolation, counters and the journal (--dbpath) are applied
in one place: every change to the store goes through a method here."""

import collections
import time
import uuid

from bson.objectid import ObjectId

from . import collation as collations
from . import changestream, journal, limits, sharding
from .bsonkeys import REGEX, sort_key
from .changelog import wall_now
from .errors import MongoError
from .query import ScanStats, execute
from .storage import DuplicateKey
from .txn import Busy


class Context:
    """One command being executed."""

    def __init__(self, server, conn, db, name, cmd, txn=None):
        self.server = server
        self.conn = conn
        self.db = db
        self.name = name
        self.cmd = cmd
        self.txn = txn
        self.stats = ScanStats()
        self.changes = []  # journal ops of this command outside a transaction, written before the reply
        self.retry = None  # a retryable write's StatementLog (retry.py)
        self.unit = None  # the before-images of the current statement of a retryable write (StatementUnit)
        self.close_connection = False  # onPrimaryTransactionalWrite ended the connection: send no reply
        self.events = []  # change-stream entries of this command outside a transaction, published at its end
        self.read_at = None  # a replica set's read as of an optime (repl.read_point), None: current data

    def previous_outcome(self, index):
        """What an earlier attempt of this retryable write recorded for statement `index` (it is then not
        executed again), or None. Otherwise the statement starts here: its writes can be rolled back."""
        if self.retry is None:
            return None
        outcome = self.retry.previous(index)
        if outcome is None:
            self.begin_statement()
        return outcome

    def begin_statement(self):
        """Start a retryable write's statement (or an insert's batch): remember its before-images, so that
        onPrimaryTransactionalWrite's failBeforeCommitExceptionCode can roll it back, as the exception
        aborts mongod's WriteUnitOfWork."""
        if self.retry is not None:
            self.unit = StatementUnit(self.changes)
            self.unit.events_mark = len(self.events)

    def record_outcome(self, index, outcome, fire=True):
        """Remember what statement `index` of a retryable write wrote (nothing outside one); mongod then
        evaluates onPrimaryTransactionalWrite (fire=False: an insert batch evaluates it once for all)."""
        if self.retry is not None:
            self.retry.record(index, outcome, self.conn.op_time)
            if fire:
                self.on_primary_write([index])

    def on_primary_write(self, indexes):
        """mongod's onPrimaryTransactionalWrite failpoint, evaluated where a retryable write's statements
        (`indexes`) are recorded or a transaction commits (transaction_participant.cpp,
        _registerUpdateCacheOnCommit, called for each oplog entry that updates config.transactions):
        closeConnection (default true) ends the connection while the command goes on, so its reply is
        never sent; failBeforeCommitExceptionCode rolls the statements back, forgets them and raises that
        error (a write error of the statement, or the command's error)."""
        fired = self.server.failpoints.on_primary_write()
        if fired is None:
            return
        if fired.close_connection:
            self.close_connection = True
        if fired.error_code is None:
            return
        if self.retry is not None:
            self.rollback_statement()
            self.retry.forget(indexes)
        raise MongoError(int(fired.error_code), "Failing write for %s:%s due to failpoint. The write must "
                         "not be reflected." % (self._session_text(), self.cmd.get("txnNumber")))

    def _session_text(self):
        """The command's lsid as mongod prints it in the failpoint's message."""
        session_id = (self.cmd.get("lsid") or {}).get("id")
        try:
            return "{ id: UUID(\"%s\") }" % uuid.UUID(bytes=bytes(session_id))
        except (TypeError, ValueError):
            return "{ id: %r }" % (session_id,)

    def rollback_statement(self):
        """Undo the current statement's writes (mongod's aborted WriteUnitOfWork): restore its
        before-images and take its changes out of the command's journal ops (a collection it created
        stays, as mongod creates it in a unit of work of its own)."""
        unit, self.unit = self.unit, None
        if unit is None:
            return
        for (db, name), images in unit.images.items():
            coll = self.server.store.get(db, name)
            if coll is not None:
                coll.restore(images, unit.record_ids.get((db, name), {}))
        del self.events[unit.events_mark:]
        count, last_length = unit.changes_mark
        tail = self.changes[count:]
        del self.changes[count:]
        if last_length is not None:
            last = self.changes[-1]
            del last[journal.BATCHED[last["op"]]][last_length:]
        for op in tail:
            if op["op"] == "create":
                journal.add_op(self.changes, op)

    def refuse_multi_retry(self, multi, what):
        """A statement touching several documents cannot be a retryable write (InvalidOptions)."""
        if multi and self.retry is not None:
            raise MongoError(72, "Cannot use (or request) retryable writes with %s" % what)

    @property
    def store(self):
        """The server's document store."""
        return self.server.store

    def coll(self, name):
        """The collection `name` of the command's database as the command sees it: one its transaction
        created (visible to that transaction alone until commit), else the committed one, or None."""
        if self.txn is not None:
            own = self.txn.pending.get((self.db, name))
            if own is not None:
                return own
        return self.server.store.get(self.db, name)

    def deadline(self):
        """The command's maxTimeMS as a time.monotonic() deadline, or None."""
        max_time = self.cmd.get("maxTimeMS")
        if isinstance(max_time, (int, float)) and not isinstance(max_time, bool) and max_time > 0:
            return time.monotonic() + max_time / 1000.0
        return None

    def statement(self, run):
        """Run one write statement (`run()`, which returns its result). Outside a transaction, a document
        or unique key that an open transaction wrote makes it wait until that transaction commits or aborts
        and then run again, as mongod's writeConflictRetry retries a write that is not in a transaction
        until the conflict is gone (bounded by maxTimeMS, and by the transaction's lifetime, at which the
        reaper aborts it). `run` must leave out what an earlier attempt already wrote (a multi-document
        update remembers the documents it updated, as mongod's update stage does)."""
        while True:
            try:
                return run()
            except Busy as busy:
                if self.txn is not None:
                    raise
                self.server.txns.wait_for_end(busy.holder, self.deadline())
                self.server.repl.check_interrupted(self.conn.member)

    def wait_for_write_lock(self, name):
        """Before a write command outside a transaction: queue behind a DDL waiting for the collection."""
        if self.txn is None:
            self.server.txns.wait_behind_ddl(self.db, name, self.deadline())

    def note_write(self):
        """Advance the cluster clock for a change: the reply's operationTime is the last change's time."""
        self.conn.op_time = self.server.clock.tick()

    def record_change(self, make_op, *args):
        """Record a change for the journal (only with --dbpath): with this command's changes, or with its
        transaction's, which are journaled at commit. Every change to the store passes here."""
        self.note_write()
        if self.server.journal is None:
            return
        journal.add_op(self.txn.changes if self.txn is not None else self.changes, make_op(*args))

    def record_session(self, make_op, *args):
        """Journal a retryable write's statements with the command's changes (with --dbpath), without a
        cluster time of their own: mongod writes config.transactions in the write's storage transaction,
        so the reply's operationTime is the write's, the time of its change event."""
        if self.server.journal is not None:
            journal.add_op(self.txn.changes if self.txn is not None else self.changes, make_op(*args))

    def record_event(self, entry, prior=None):
        """Record a change-stream entry for the change just recorded (changelog.py): published when the
        command ends, or kept with the transaction until its commit (then at the commit's time). While
        the replica set is versioned (repl.py) the entry keeps `prior`, the document before the change."""
        if self.server.repl.versioned and entry.op in changestream.DOC_OPS:
            entry.prior = prior
        if self.txn is not None:
            self.txn.events.append(entry)
            return
        entry.stamp(self.conn.op_time, wall_now())
        self.events.append(entry)

    def ensure_coll(self, name, options=None):
        """The collection, created if missing (explicitly or implicitly): in a transaction, as the
        transaction's own until it commits."""
        if "$" in name or not name:
            raise MongoError(73, "Invalid collection name: %s" % name)
        coll = self.coll(name)
        if coll is not None:
            return coll
        limits.check_namespace(self.db, name)
        if self.txn is not None:
            coll = self.txn.create(self.db, name, options)
        else:
            coll, _ = self.server.store.ensure(self.db, name, options)
        self.record_change(journal.create_op, coll)
        return coll

    def add_index(self, coll, spec):
        """Build an index."""
        coll.add_index(spec)
        self.record_change(journal.create_index_op, coll, spec)

    def drop_index(self, coll, name):
        """Drop an index."""
        del coll.indexes[name]
        self.record_change(journal.drop_index_op, coll, name)

    def drop_coll(self, coll):
        """Drop a collection."""
        self.server.store.drop(coll.db, coll.name)
        sharding.forget(self.server.store, coll.db, coll.name)
        self.record_change(journal.drop_op, coll)
        self.record_event(changestream.drop_entry(coll.db, coll.name))

    def set_options(self, coll, options):
        """Change a collection's options (collMod)."""
        coll.options = options
        self.record_change(journal.options_op, coll)

    def rename_coll(self, coll, to_name, target):
        """Rename a collection within its database, dropping `target` (the collection of that name) first;
        change streams see a rename (renameCollection with dropTarget)."""
        if target is not None:
            self.drop_coll(target)
        old_name = coll.name
        self.server.store.drop(coll.db, old_name)
        sharding.forget(self.server.store, coll.db, old_name)
        coll.name = to_name
        self.server.store.add(coll)
        self.record_change(journal.rename_op, coll.db, old_name, to_name)
        self.record_event(changestream.rename_entry(coll.db, old_name, coll.db, to_name))

    def drop_db(self):
        """Drop the command's database: change streams see a drop of each collection, then dropDatabase."""
        for name in list(self.server.store.collections(self.db)):
            self.note_write()
            self.record_event(changestream.drop_entry(self.db, name))
        self.server.store.drop_db(self.db)
        sharding.forget(self.server.store, self.db)
        self.record_change(journal.drop_database_op, self.db)
        self.record_event(changestream.drop_database_entry(self.db))

    def overlay(self, coll):
        """Before-images this command must read instead of another transaction's uncommitted writes, and,
        for a read as of an optime (a secondary's, a majority read), instead of the changes made after it."""
        images = self.server.txns.overlay(self.txn, coll)
        if self.read_at is None or self.txn is not None:
            return images
        past = self.server.repl.images_after(coll, self.read_at)
        if not past:
            return images
        return past if not images else collections.ChainMap(past, images)

    def query(self, coll, filt, sort=None, skip=0, limit=0, plan=None, hint=None, collation=None, progress=None):
        """Matching documents as this command may see them (empty for a missing collection), under the
        `collation` given (a command's or statement's `collation` field), else the collection's default;
        `progress` (query.ResultProgress) learns where the counters stood at each result."""
        if coll is None:
            return []
        if not isinstance(filt or {}, dict):
            raise MongoError(2, "filter must be an object")
        if self.txn is not None:
            self.txn.namespaces.add((coll.db, coll.name))  # a read takes an intent lock too
        return execute(coll, filt, sort, skip, limit, self.overlay(coll), self.stats, plan, hint,
                       collations.effective(collation, coll), progress)

    def insert_doc(self, coll, doc):
        """Insert with transaction bookkeeping; WriteConflict (or Busy outside a transaction) instead of
        E11000 when the key belongs to a document another open transaction wrote."""
        idk = sort_key(doc["_id"])
        txns = self.server.txns
        txns.check_write(self.txn, coll, idk, doc)
        limits.check_written(self, doc, self.name == "insert")
        try:
            coll.insert(doc, idk)
        except DuplicateKey as exc:
            conflict = txns.duplicate_conflict(self.txn, coll, exc.holder_idk)
            if conflict is not None:
                raise conflict from exc
            raise
        txns.note_write(self.txn, coll, idk, None)
        if self.txn is not None:
            self.txn.record(coll, idk, None)
        if self.unit is not None:
            self.unit.record(coll, idk, None)
        self.record_change(journal.insert_op, coll, [doc])
        self.record_event(changestream.doc_entry("insert", coll, doc["_id"], doc))
        self.server.counters["inserted"] += 1

    def replace_doc(self, coll, old, new, replacement=False):
        """Replace a document with transaction bookkeeping and conflict checks (`replacement`: by a
        replacement document, a `replace` event for change streams, else an `update`)."""
        idk = sort_key(old["_id"])
        txns = self.server.txns
        txns.check_write(self.txn, coll, idk, new)
        limits.check_written(self, new, False)
        try:
            coll.replace(idk, new)
        except DuplicateKey as exc:
            conflict = txns.duplicate_conflict(self.txn, coll, exc.holder_idk)
            if conflict is not None:
                raise conflict from exc
            raise
        txns.note_write(self.txn, coll, idk, old)
        if self.txn is not None:
            self.txn.record(coll, idk, old)
        if self.unit is not None:
            self.unit.record(coll, idk, old)
        self.record_change(journal.replace_op, coll, [new])
        self.record_event(changestream.update_entry(coll, old, new, replacement), old)
        self.server.counters["updated"] += 1

    def delete_doc(self, coll, old):
        """Delete a document with transaction bookkeeping and conflict checks."""
        idk = sort_key(old["_id"])
        txns = self.server.txns
        txns.check_write(self.txn, coll, idk, None)
        record_id = coll.record_ids[idk]
        coll.delete(idk)
        txns.note_write(self.txn, coll, idk, old)
        if self.txn is not None:
            self.txn.record(coll, idk, old)
            self.txn.record_delete(coll, idk, record_id)
        if self.unit is not None:
            self.unit.record(coll, idk, old, record_id)
        self.record_change(journal.delete_op, coll, [old["_id"]])
        self.record_event(changestream.doc_entry("delete", coll, old["_id"], pre=old), old)
        self.server.counters["deleted"] += 1


class StatementUnit:
    """The before-images of the documents one statement of a retryable write changed (None for an
    inserted one), and the record ids of those it deleted, to roll the statement back."""

    def __init__(self, changes):
        self.images = {}  # (db, coll) -> {id key: before-image or None}
        self.record_ids = {}  # (db, coll) -> {id key: record id of a deleted document}
        last = changes[-1] if changes else None
        field = journal.BATCHED.get(last["op"]) if last is not None else None
        # where the command's journal ops stood: their number, and the length of the last one's list (the
        # statement's changes may be merged into it)
        self.changes_mark = (len(changes), len(last[field]) if field is not None else None)

    def record(self, coll, idk, before, record_id=None):
        """Remember a document's state before the statement first changed it."""
        key = (coll.db, coll.name)
        self.images.setdefault(key, {}).setdefault(idk, before)
        if record_id is not None:
            self.record_ids.setdefault(key, {}).setdefault(idk, record_id)


def prepare_insert(doc):
    """A document ready to store: `_id` first (a new ObjectId if absent), `_id` type checked."""
    if not isinstance(doc, dict):
        raise MongoError(2, "document to insert must be an object")
    if "_id" not in doc:
        out = {"_id": ObjectId()}
        out.update(doc)
        return out
    value = doc["_id"]
    if isinstance(value, list):
        raise MongoError(53, "The '_id' value cannot be of type array")
    if not isinstance(value, (str, int, dict, ObjectId)) and sort_key(value)[0] == REGEX:
        raise MongoError(53, "can't use a regex for _id")
    if next(iter(doc)) != "_id":
        out = {"_id": value}
        out.update((k, v) for k, v in doc.items() if k != "_id")
        return out
    return doc
