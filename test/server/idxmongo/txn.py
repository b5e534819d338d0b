"""Multi-document transactions: side by side under snapshot isolation, applied in place with undo logs.

Any number of sessions may have a transaction open at once, as on mongod. A transaction's writes go
straight to the shared store; the first time it touches a document the before-image (None for an insert)
is recorded. Since a document written by one open transaction can be written by no one else until that
transaction ends (see below), each document has at most one open writer. Other sessions read
before-images for documents open transactions touched (the "overlay"), so they never see uncommitted
data. Commit forgets the images; abort restores them. A transaction open longer than its lifetime
(MongoDB's transactionLifetimeLimitSeconds, 60 by default), counted from its start, is aborted by the
reaper; its later commands get NoSuchTransaction (251, TransientTransactionError), as on mongod.

Snapshots and write conflicts (mongod's WiredTiger, "first updater wins",
jstests/core/txns/transactions_write_conflicts.js, write_conflicts_with_non_txns.js): a transaction's
snapshot is taken at its first command, as mongod opens its storage snapshot at the transaction's first
operation. A change committed after that (a write outside a transaction, or another transaction's commit)
is noted in the open transaction (`changed`, with the document's image before the first such change), so
that its reads see the document as it was at the snapshot (inserted ones not at all, deleted ones still
there), as they see the images of other transactions still open. A write of the transaction to a
document another open transaction wrote, or to one changed after its snapshot (insert, update, replace,
delete, findAndModify; an insert of such an `_id`), or of a unique key such a write took or gave up,
fails at once with WriteConflict (112, TransientTransactionError) and the transaction is aborted. A write
outside a transaction to a document (or unique key) an open transaction wrote waits until that
transaction commits or aborts, then runs (mongod's writeConflictRetry retries it until the conflict is
gone): check_write raises Busy, and Context.statement waits and runs the statement again.

A transaction holds the namespaces it read or wrote, as mongod's transaction holds intent locks on them
until it ends: DDL on such a collection (or its database) from another session waits, with the store lock
released, until the transaction commits, aborts or expires (see wait_for_locks).

A collection the transaction creates (`create`, `createIndexes` or a write that creates it implicitly) is
its own until commit, as mongod 4.4+ keeps it as an uncommitted catalog entry: the transaction sees it (and
the indexes it builds on it), every other session sees no such collection. Commit publishes it; abort
discards it with its documents and indexes. Another session (or transaction) may meanwhile create a
collection of the same name (create takes no exclusive lock on mongod); the later commit then fails with
WriteConflict and aborts its transaction (jstests/core/txns/create_collection_parallel.js,
create_indexes_parallel.js).

With a journal (--dbpath), the transaction's changes (its collection and index creations included) are kept
aside and journaled as one record at commit; an abort journals nothing.
"""

import collections
import threading
import time

from .errors import TRANSIENT, MongoError, write_conflict
from .storage import Collection


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
        self.changed = {}  # (db, coll) -> {id key: image before the first change committed by others after
        # this transaction's snapshot (None for an insert)}
        self.last_used = time.monotonic()
        self.started = time.monotonic()  # the lifetime counts from here, as mongod's does
        self.commit_time = None  # the commit's optime

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


class Busy(MongoError):
    """A write outside a transaction met a document (or unique key) that the open transaction `holder`
    wrote: the statement waits for it to end and runs again (Context.statement). Left uncaught, it is a
    WriteConflict without labels."""

    def __init__(self, holder):
        conflict = write_conflict(in_txn=False)
        super().__init__(conflict.code, conflict.errmsg)
        self.holder = holder


class TransactionManager:
    """The open transactions, each session's latest transaction, and visibility rules between them."""

    def __init__(self, store, store_lock, lifetime):
        self.store = store
        self.store_lock = store_lock
        self.lifetime = lifetime
        self.released = threading.Condition(store_lock)  # notified (store lock held) when a transaction ends
        self.pending = {}  # (db, coll or None) -> number of DDL commands waiting for an exclusive lock on it
        self.open = {}  # id(transaction) -> transaction, for every active one, in start order
        self.sessions = {}
        # a shard of a cluster lets a router start an aborted (never prepared) transaction again at the
        # same number: mongos retries a transaction's first statement after StaleConfig (shard_version.py)
        self.restart_aborted = False

    def start(self, session_key, number, read_level="local"):
        """Begin a transaction: its snapshot is the store as it is now. This session's own older
        transaction still open is aborted, as on mongod; other sessions' transactions go on."""
        with self.store_lock:
            current = self.sessions.get(session_key)
            if current is not None and current.number > number:
                raise MongoError(225, "txnNumber %s is less than last txnNumber %s seen in session"
                                 % (number, current.number))
            if current is not None and current.number == number and \
                    not (self.restart_aborted and current.state == "aborted"):
                raise MongoError(251, "Transaction %s has already been started" % number, labels=[TRANSIENT])
            if current is not None and current.state == "active":
                self.abort(current)
            txn = Transaction(session_key, number, read_level)
            self.open[id(txn)] = txn
            self.sessions[session_key] = txn
            return txn

    def _expired(self, txn):
        """Open for longer than the transaction lifetime, counted from its start whether it is busy or idle
        (mongod's transactionLifetimeLimitSeconds)."""
        return time.monotonic() - txn.started > self.lifetime

    def _others(self, txn):
        """The open transactions other than `txn` (None: all of them)."""
        return [other for other in self.open.values() if other is not txn]

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
        """Forget `txn` among the open transactions (store lock held) and wake the DDL and the writes
        waiting for it."""
        self.open.pop(id(txn), None)
        self.released.notify_all()

    def wait_for_locks(self, waiter_txn, db, names, deadline):
        """Wait (store lock held, released while waiting) until no open transaction of another session
        holds a lock on the collections `names` of `db` (the whole database when None), as mongod's
        exclusive DDL lock request waits for the transactions' intent locks: until they commit, abort or
        are aborted at the end of their lifetime by the reaper. MaxTimeMSExpired (50) at `deadline`
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
        return not any(txn.holds(db, names) for txn in self._others(waiter_txn))

    def wait_behind_ddl(self, db, name, deadline):
        """A write outside a transaction waits (store lock held, released while waiting) while a DDL
        command waits for an exclusive lock on the collection or its database: mongod queues a new intent
        lock request behind an exclusive one, so the write runs after the DDL. Reads do not wait (they
        take no collection lock on 5.0+), nor do a transaction's statements (granted on its own locks)."""
        self._wait_until(lambda: (db, name) not in self.pending and (db, None) not in self.pending, deadline)

    def wait_for_end(self, holder, deadline):
        """A write outside a transaction that met a document `holder` wrote waits (store lock held, released
        while waiting) until that transaction commits or aborts (at the latest when the reaper ends it at
        its lifetime), as mongod's writeConflictRetry retries the write until then. MaxTimeMSExpired (50)
        at `deadline`."""
        self._wait_until(lambda: holder.state != "active", deadline)

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
        transaction's change-stream entries before its reply. The other open transactions, whose snapshots
        are older, go on reading the documents as they were (their `changed`). If another session created
        a collection of the same name meanwhile, the transaction is aborted and the commit fails with
        WriteConflict (112), as on mongod."""
        if any(self.store.get(db, name) is not None for db, name in txn.pending):
            self.abort(txn)
            raise write_conflict(in_txn=True)
        for other in self._others(txn):
            for key, images in txn.images.items():
                seen = other.changed.setdefault(key, {})
                for idk, before in images.items():
                    seen.setdefault(idk, before)
            for key, coll in txn.pending.items():
                seen = other.changed.setdefault(key, {})
                for idk in coll.docs:
                    seen.setdefault(idk, None)
        for coll in txn.pending.values():
            self.store.add(coll)
        txn.pending = {}
        changes, txn.changes = txn.changes, []
        txn.state = "committed"
        txn.images = {}
        txn.record_ids = {}
        txn.changed = {}
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
        txn.changed = {}
        self._release(txn)

    def end_sessions(self, session_keys):
        """Abort the open transactions of ended sessions and forget those sessions (store lock held)."""
        for key in session_keys:
            txn = self.sessions.pop(key, None)
            if txn is not None and txn.state == "active":
                self.abort(txn)

    def abort_open(self):
        """Abort every open transaction (a replica-set state change; store lock held)."""
        for txn in list(self.open.values()):
            self.abort(txn)

    def rollback(self, point):
        """A replica set rolled back the writes after optime `point`: the transactions committed after it
        count as never committed (a retried commitTransaction gets NoSuchTransaction, as on mongod, whose
        rollback removes their config.transactions records)."""
        for txn in self.sessions.values():
            if txn.state == "committed" and txn.commit_time is not None and txn.commit_time > point:
                txn.state = "aborted"

    def abort_all(self):
        """Abort every open transaction (killAllSessions; store lock held)."""
        self.end_sessions(list(self.sessions))

    def reap(self):
        """Abort the transactions open past their lifetime (store lock held)."""
        for txn in list(self.open.values()):
            if self._expired(txn):
                self.abort(txn)

    def overlay(self, reader_txn, coll):
        """Before-images a reader must see instead of the stored documents ({id key: image, None for a
        document it must not see}), or None: outside a transaction, those of the open transactions'
        uncommitted writes; in one, also those of the changes committed after its snapshot, which come
        first."""
        key = (coll.db, coll.name)
        maps = []
        if reader_txn is not None:
            changed = reader_txn.changed.get(key)
            if changed:
                maps.append(changed)
        for txn in self.open.values():
            if txn is not reader_txn:
                images = txn.images.get(key)
                if images:
                    maps.append(images)
        if not maps:
            return None
        return maps[0] if len(maps) == 1 else collections.ChainMap(*maps)

    def _holder(self, writer_txn, coll, idk):
        """Who keeps `writer_txn` from writing the document `idk`: None when nobody; for a transaction,
        True when a change committed after its snapshot does, else the open transaction that wrote it."""
        key = (coll.db, coll.name)
        if writer_txn is not None and idk in writer_txn.changed.get(key, ()):
            return True
        for txn in self._others(writer_txn):
            if idk in txn.images.get(key, ()):
                return txn
        return None

    def _refuse(self, writer_txn, holder):
        """The error for a write that `holder` (see _holder) keeps from going on: WriteConflict in a
        transaction (the caller's error aborts it), Busy (wait, then run again) outside one."""
        if writer_txn is not None:
            return write_conflict(in_txn=True)
        return Busy(holder)

    def check_write(self, writer_txn, coll, idk, new_doc):
        """Refuse a write to a document another open transaction wrote (or, by a transaction, one changed
        after its snapshot), or one that would take a unique key such a before-image held: WriteConflict
        in a transaction, Busy outside one (see _refuse)."""
        holder = self._holder(writer_txn, coll, idk)
        if holder is not None:
            raise self._refuse(writer_txn, holder)
        if new_doc is None:
            return
        unique = [index for index in coll.indexes.values() if index.unique and not index.is_id]
        if not unique:
            return
        key = (coll.db, coll.name)
        sources = [(True, writer_txn.changed.get(key))] if writer_txn is not None else []
        sources += [(txn, txn.images.get(key)) for txn in self._others(writer_txn)]
        for source, images in sources:
            if not images:
                continue
            for index in unique:
                new_keys = set(index.keys_of(new_doc))
                if not new_keys:
                    continue
                for other_idk, before in images.items():
                    if before is not None and other_idk != idk and new_keys & set(index.keys_of(before)):
                        raise self._refuse(writer_txn, source)

    def note_write(self, writer_txn, coll, idk, before):
        """A document was written (inserted, changed or deleted; `before` is its image before, None for an
        insert) outside a transaction, so after the open transactions' snapshots: they no longer see it
        as it is now, nor may they write it or a unique key it held. (A transaction's writes are noted in
        the others at its commit.)"""
        if writer_txn is not None:
            return
        key = (coll.db, coll.name)
        for txn in self.open.values():
            txn.changed.setdefault(key, {}).setdefault(idk, before)

    def duplicate_conflict(self, writer_txn, coll, holder_idk):
        """When a write hits a duplicate key held by the document `holder_idk`: the error to raise instead
        of DuplicateKey if that document is one another open transaction wrote, or (for a transaction) one
        changed after its snapshot (WriteConflict, as in MongoDB, or Busy outside a transaction), else None."""
        holder = self._holder(writer_txn, coll, holder_idk)
        return None if holder is None else self._refuse(writer_txn, holder)
