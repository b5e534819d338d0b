"""Multi-document transactions: one at a time, applied in place with an undo log.

The first command of a transaction takes the server-wide transaction slot (waiting up to
TXN_WAIT_SECONDS, else WriteConflict with TransientTransactionError). Its writes go straight to the
shared store; the first time it touches a document the before-image (None for an insert) is recorded.
Other sessions read before-images for touched documents (the "overlay"), so they never see uncommitted
data, and their writes to touched documents or to unique keys the before-images hold fail with
WriteConflict. Commit forgets the images; abort restores them. A transaction open longer than its
lifetime (MongoDB's transactionLifetimeLimitSeconds, 60 by default), counted from its start, is aborted by
the reaper; its later commands get NoSuchTransaction (251, TransientTransactionError), as on mongod.

A transaction holds the namespaces it read or wrote, as mongod's transaction holds intent locks on them
until it ends: DDL on such a collection (or its database) from another session waits, with the store lock
released, until the transaction commits, aborts or expires (see wait_for_locks).

A collection the transaction creates (`create`, `createIndexes` or a write that creates it implicitly) is
its own until commit, as mongod 4.4+ keeps it as an uncommitted catalog entry: the transaction sees it (and
the indexes it builds on it), every other session sees no such collection. Commit publishes it; abort
discards it with its documents and indexes. Another session may meanwhile create a collection of the same
name (create takes no exclusive lock on mongod); the transaction's commit then fails with WriteConflict and
aborts it (jstests/core/txns/create_collection_parallel.js, create_indexes_parallel.js).

A transaction's snapshot is taken at its first command, as mongod opens its storage snapshot at the
transaction's first operation. Another session may still change documents the transaction has not touched;
each such change is noted in the open transaction (`changed`, with the document's image before it). When
the transaction then writes one of those documents (insert, update, replace, delete, findAndModify, an
insert of an `_id` inserted or deleted since), or a unique key such a change took or gave up, it gets
WriteConflict (112, TransientTransactionError) and is aborted, as mongod's first writer wins against a
transaction's snapshot (jstests/core/txns/write_conflicts_with_non_txns.js). Its reads see the latest
committed data as of the snapshot: the documents so changed are read as they were before (the same overlay
of before-images that hides an open transaction's writes from the others).

With a journal (--dbpath), the transaction's changes (its collection and index creations included) are kept
aside and journaled as one record at commit; an abort journals nothing.
"""

import threading
import time

from .errors import TRANSIENT, MongoError, write_conflict
from .storage import Collection

TXN_WAIT_SECONDS = 5.0


def no_such_transaction(number):
    """NoSuchTransaction (251) with the TransientTransactionError label, as mongod sends it."""
    return MongoError(251, "Transaction with { txnNumber: %s } has been aborted." % number, labels=[TRANSIENT])


class Transaction:
    """One session's transaction: its number, state and before-images per namespace."""

    def __init__(self, session_key, number, read_level="local"):
        self.session_key = session_key
        self.number = number
        self.read_level = read_level  # the readConcern level of the first statement
        self.namespaces = set()  # (db, coll) the transaction read or wrote: its "intent locks"
        self.state = "active"
        self.images = {}  # (db, coll) -> {id key: before-image or None}
        self.record_ids = {}  # (db, coll) -> {id key: record id of a document the transaction deleted}
        self.pending = {}  # (db, coll) -> Collection the transaction created: its own until commit
        self.changes = []  # journal ops (with --dbpath), written at commit
        self.events = []  # change-stream entries, published at commit (changelog.py)
        self.changed = {}  # (db, coll) -> {id key: image before the first change other sessions made to
        # it after this transaction's snapshot (None for an insert)}
        self.last_used = time.monotonic()
        self.started = time.monotonic()  # the lifetime counts from here, as mongod's does

    def create(self, db, name, options=None):
        """A new collection of the transaction's own, invisible to other sessions until commit."""
        coll = self.pending[(db, name)] = Collection(db, name, options)
        self.namespaces.add((db, name))  # mongod's create holds an intent lock on the collection
        return coll

    def owns(self, coll):
        """True for a collection the transaction created (and has not committed)."""
        return self.pending.get((coll.db, coll.name)) is coll

    def record(self, coll, idk, before):
        """Remember the before-image of a document the first time the transaction writes it (none in a
        collection of its own: nobody else sees it, and an abort discards it whole)."""
        self.namespaces.add((coll.db, coll.name))
        if not self.owns(coll):
            self.images.setdefault((coll.db, coll.name), {}).setdefault(idk, before)

    def holds(self, db, names):
        """True if the transaction holds a lock on one of the collections `names` of `db` (on any of
        its collections when `names` is None: a database-wide request, as dropDatabase makes)."""
        return any(d == db and (names is None or n in names) for d, n in self.namespaces)

    def record_delete(self, coll, idk, record_id):
        """Remember where a deleted document stood in natural order, to put it back there on abort."""
        if not self.owns(coll):
            self.record_ids.setdefault((coll.db, coll.name), {}).setdefault(idk, record_id)


class TransactionManager:
    """The transaction slot, each session's latest transaction, and visibility rules for the others."""

    def __init__(self, store, store_lock, lifetime):
        self.store = store
        self.store_lock = store_lock
        self.lifetime = lifetime
        self.cond = threading.Condition()
        self.released = threading.Condition(store_lock)  # notified (store lock held) when a transaction ends
        self.pending = {}  # (db, coll or None) -> number of DDL commands waiting for an exclusive lock on it
        self.active = None
        self.sessions = {}

    def start(self, session_key, number, read_level="local"):
        """Begin a transaction (call without the store lock): wait for the slot, aborting an expired holder
        or this session's own older transaction."""
        current = self.sessions.get(session_key)
        if current is not None and current.number > number:
            raise MongoError(225, "txnNumber %s is less than last txnNumber %s seen in session"
                             % (number, current.number))
        if current is not None and current.number == number:
            raise MongoError(251, "Transaction %s has already been started" % number, labels=[TRANSIENT])
        deadline = time.monotonic() + TXN_WAIT_SECONDS
        txn = Transaction(session_key, number, read_level)
        while True:
            with self.cond:
                holder = self.active
                if holder is None:
                    self.active = txn
                    self.sessions[session_key] = txn
                    return txn
                stale = holder.session_key == session_key or self._expired(holder)
                if not stale:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        raise write_conflict(in_txn=True)
                    self.cond.wait(min(remaining, 0.5))
                    continue
            with self.store_lock:
                if holder.state == "active":
                    self.abort(holder)

    def _expired(self, txn):
        """Open for longer than the transaction lifetime, counted from its start whether it is busy or idle
        (mongod's transactionLifetimeLimitSeconds)."""
        return time.monotonic() - txn.started > self.lifetime

    def lookup(self, session_key, number):
        """The session's transaction with this number, still active; NoSuchTransaction/TransactionCommitted
        otherwise."""
        txn = self.sessions.get(session_key)
        if txn is None or txn.number != number or txn.state == "aborted":
            raise no_such_transaction(number)
        if txn.state == "committed":
            raise MongoError(256, "Transaction %s has been committed." % number)
        txn.last_used = time.monotonic()
        return txn

    def find(self, session_key, number):
        """The session's transaction with this number in any state, or None."""
        txn = self.sessions.get(session_key)
        return txn if txn is not None and txn.number == number else None

    def _release(self, txn):
        """Free the slot held by `txn` (store lock held) and wake the DDL waiting for its locks."""
        with self.cond:
            if self.active is txn:
                self.active = None
            self.cond.notify_all()
        self.released.notify_all()

    def wait_for_locks(self, waiter_txn, db, names, deadline):
        """Wait (store lock held, released while waiting) until no open transaction of another session
        holds a lock on the collections `names` of `db` (the whole database when None), as mongod's
        exclusive DDL lock request waits for the transaction's intent locks: until it commits, aborts or
        is aborted at the end of its lifetime by the reaper. MaxTimeMSExpired (50) at `deadline`
        (time.monotonic(), None for no limit). While it waits, the request is pending: see wait_behind_ddl."""
        keys = [(db, name) for name in names] if names is not None else [(db, None)]
        for key in keys:
            self.pending[key] = self.pending.get(key, 0) + 1
        try:
            self._wait_until(lambda: self._unlocked(waiter_txn, db, names), deadline)
        finally:
            for key in keys:
                self.pending[key] -= 1
                if not self.pending[key]:
                    del self.pending[key]
            self.released.notify_all()  # the queued writers run once this DDL's command has released the lock

    def _unlocked(self, waiter_txn, db, names):
        """No open transaction but the waiter's own holds the collections `names` of `db`."""
        holder = self.active
        return holder is None or holder is waiter_txn or holder.state != "active" or not holder.holds(db, names)

    def wait_behind_ddl(self, db, name, deadline):
        """A write outside a transaction waits (store lock held, released while waiting) while a DDL
        command waits for an exclusive lock on the collection or its database: mongod queues a new intent
        lock request behind an exclusive one, so the write runs after the DDL. Reads do not wait (they
        take no collection lock on 5.0+), nor do a transaction's statements (granted on its own locks)."""
        self._wait_until(lambda: (db, name) not in self.pending and (db, None) not in self.pending, deadline)

    def _wait_until(self, ready, deadline):
        """Wait on `released` until ready(); MaxTimeMSExpired (50) at `deadline` (None: no limit)."""
        while not ready():
            timeout = 1.0
            if deadline is not None:
                timeout = min(timeout, deadline - time.monotonic())
                if timeout <= 0:
                    raise MongoError(50, "operation exceeded time limit")
            self.released.wait(timeout)

    def commit(self, txn):
        """Make the transaction's writes permanent (store lock held): the collections it created published,
        its journal ops (with --dbpath) returned, for commitTransaction to journal as one record with the
        transaction's change-stream entries before its reply. If another session created a collection of
        the same name meanwhile, the transaction is aborted and the commit fails with WriteConflict (112),
        as on mongod."""
        if any(self.store.get(db, name) is not None for db, name in txn.pending):
            self.abort(txn)
            raise write_conflict(in_txn=True)
        for coll in txn.pending.values():
            self.store.add(coll)
        txn.pending = {}
        changes, txn.changes = txn.changes, []
        txn.state = "committed"
        txn.images = {}
        txn.record_ids = {}
        self._release(txn)
        return changes

    def abort(self, txn):
        """Undo the transaction's writes from its before-images and discard the collections it created,
        with their indexes (store lock held). Nothing is journaled."""
        for (db, name), images in txn.images.items():
            coll = self.store.get(db, name)
            if coll is not None:
                coll.restore(images, txn.record_ids.get((db, name), {}))
        txn.pending = {}
        txn.state = "aborted"
        txn.images = {}
        txn.record_ids = {}
        txn.changes = []
        self._release(txn)

    def end_sessions(self, session_keys):
        """Abort the open transactions of ended sessions and forget those sessions (store lock held)."""
        for key in session_keys:
            txn = self.sessions.pop(key, None)
            if txn is not None and txn.state == "active":
                self.abort(txn)

    def abort_all(self):
        """Abort every open transaction (killAllSessions; store lock held)."""
        self.end_sessions(list(self.sessions))

    def reap(self):
        """Abort the active transaction if it has been open past its lifetime (store lock held)."""
        holder = self.active
        if holder is not None and holder.state == "active" and self._expired(holder):
            self.abort(holder)

    def overlay(self, reader_txn, coll):
        """Before-images a reader must see instead of the stored documents: outside the open transaction,
        those of its uncommitted writes; in it, those of other sessions' changes after its snapshot."""
        if reader_txn is not None:
            return reader_txn.changed.get((coll.db, coll.name)) or None
        holder = self.active
        if holder is None or holder is reader_txn:
            return None
        return holder.images.get((coll.db, coll.name)) or None

    def check_write(self, writer_txn, coll, idk, new_doc):
        """Refuse (WriteConflict) a write by someone other than the open transaction to a document it
        touched, or one that would take a unique key held by one of its before-images; and, the same way,
        a write by the transaction to a document another session changed after its snapshot, or of a
        unique key such a change gave up (the caller's error aborts the transaction)."""
        images = self.overlay(writer_txn, coll)
        if not images:
            return
        if idk in images:
            raise write_conflict(in_txn=writer_txn is not None)
        if new_doc is None:
            return
        for index in coll.indexes.values():
            if not index.unique:
                continue
            new_keys = set(index.keys_of(new_doc))
            for other_idk, before in images.items():
                if before is not None and other_idk != idk and new_keys & set(index.keys_of(before)):
                    raise write_conflict(in_txn=writer_txn is not None)

    def note_write(self, writer_txn, coll, idk, before):
        """A document was written (inserted, changed or deleted; `before` is its image before, None for an
        insert) by someone other than the open transaction, so after that transaction's snapshot: the
        transaction may no longer write it, nor a unique key it held."""
        holder = self.active
        if holder is not None and holder is not writer_txn and holder.state == "active":
            holder.changed.setdefault((coll.db, coll.name), {}).setdefault(idk, before)

    def holder_conflict(self, writer_txn, coll, holder_idk):
        """True when a duplicate key is held by a document of another open transaction, or one another
        session wrote after the writer's snapshot (so the error is WriteConflict, as in MongoDB, rather
        than DuplicateKey)."""
        images = self.overlay(writer_txn, coll)
        return bool(images) and holder_idk in images
