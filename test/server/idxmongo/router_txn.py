"""Transactions through a router, as mongos runs them (s/transaction_router.cpp,
s/commands/cluster_commit_transaction_cmd.cpp):

- the first statement a shard sees of a transaction starts it there (`startTransaction` and the
  transaction's read concern added), so each shard a transaction reaches is a participant;
- commitTransaction with one participant is that shard's commit; with several, the router commits them
  one after the other, each with the cluster time the router had when the commit began, so a shard
  whose clock had not passed it commits at the same time as another and one whose clock had commits
  later: each participant's part has its own commit time, in either order (mongod's two-phase commit
  gives every participant the coordinator's commit timestamp, the largest prepare timestamp; the events
  of a cross-shard transaction can therefore share times with other shards' events or not);
- abortTransaction reaches every participant;
- every statement carries the transaction's placementConflictTime (mongod 8.0's, in its shardVersion:
  the time the transaction began on the router), so that a shard joining later refuses it when the
  collection's placement there changed since (shard_version.check);
- StaleConfig (shard_version.py) on a statement: the router aborts the transaction on every
  participant and the client gets the error with TransientTransactionError (its commit then gets
  NoSuchTransaction), as mongos's TransactionRouter does (canContinueOnStaleShardOrDbError is false
  unless the test-only fail point enableStaleVersionAndSnapshotRetriesWithinTransactions is on;
  implicitlyAbortTransaction). With that fail point on (router_admin.cmd_configure_fail_point), on the
  transaction's first statement the participants it reached are aborted and forgotten, and the
  statement runs again (each shard starts the transaction again at the same txnNumber).

- two-phase commit's visibility: mongod's participants are prepared before any commits, and a read or
  write of a prepared document waits for the decision (a prepare conflict), so no client sees one
  participant's part committed and then another's not yet; the router holds every participant's store
  lock (in shard order, as migrations take them) while it commits them one after the other, up to 2 ms
  apart (the coordinator's round trips), which no reader or writer can see between.

Not emulated: the prepare itself. A participant whose commit fails after another's succeeded leaves the
other's committed (mongod's coordinator would have aborted before any commit).
"""

import contextlib
import os
import random
import time

from bson.binary import Binary
from bson.int64 import Int64

from .errors import TRANSIENT, MongoError
from .shard_version import PLACEMENT_CONFLICT_TIME, VERSIONED

class RouterTransaction:
    """One transaction of a session through this router: its participants and read concern."""

    def __init__(self, read_concern):
        self.read_concern = read_concern
        self.participants = []
        self.statements = 0  # statements the router has run of it (forward's)
        self.aborted = False  # aborted by the router after a statement's StaleConfig
        self.began = time.monotonic()  # its placementConflictTime (shard_version.check)


def _key(cmd):
    """(session id bytes, txnNumber) of a transaction statement, or None."""
    lsid = cmd.get("lsid")
    if cmd.get("autocommit") is not False or not isinstance(lsid, dict) or "id" not in lsid:
        return None
    return bytes(lsid["id"]), int(cmd.get("txnNumber") or 0)


def shape(router, index, cmd):
    """The statement as sent to shard `index`: it starts the transaction there if the shard is not a
    participant yet."""
    key = _key(cmd)
    name = next(iter(cmd), "")
    if key is None or name in ("commitTransaction", "abortTransaction"):
        return cmd
    with router.txns_lock:
        txn = _transaction(router, key, cmd)
        joining = index not in txn.participants
        if joining:
            txn.participants.append(index)
    sent = dict(cmd)
    if name in VERSIONED:
        sent[PLACEMENT_CONFLICT_TIME] = txn.began
    if joining:
        sent["startTransaction"] = True
        if txn.read_concern is not None:
            sent["readConcern"] = txn.read_concern
    else:
        sent.pop("startTransaction", None)
        sent.pop("readConcern", None)
    return sent


def _transaction(router, key, cmd):
    """The router's record of a transaction (made at its first statement; txns_lock held)."""
    txn = router.txns.get(key)
    if txn is None:
        txn = RouterTransaction(cmd.get("readConcern"))
        router.txns[key] = txn
        for old in [k for k in router.txns if k[0] == key[0] and k[1] < key[1]]:
            del router.txns[old]
    return txn


def note_statement(router, cmd):
    """Count a statement of a transaction (forward's), for retry_first_statement."""
    key = _key(cmd)
    if key is None:
        return
    with router.txns_lock:
        txn = _transaction(router, key, cmd)
        if txn.aborted:
            raise MongoError(251, "Transaction %s has been aborted." % key[1], labels=[TRANSIENT])
        txn.statements += 1


def _abort_participants(router, conn, db, cmd, participants):
    """abortTransaction on each participant (errors ignored: a shard may have aborted already)."""
    abort = {"abortTransaction": 1, **{k: cmd[k] for k in ("lsid", "txnNumber", "autocommit") if k in cmd}}
    for index in participants:
        router.send(conn, index, "admin", abort)


def retry_first_statement(router, conn, db, cmd):
    """After a statement met StaleConfig: True when it is the transaction's first and the router retries
    within transactions (the fail point; its participants are aborted and forgotten, the statement may
    run again); otherwise the router aborts the transaction on every participant and returns False (the
    error reaches the client, TransientTransactionError)."""
    key = _key(cmd)
    with router.txns_lock:
        txn = router.txns.get(key)
        if txn is None:
            return False
        participants, txn.participants = txn.participants, []
        first = txn.statements <= 1 and router.stale_retries_in_transactions
        txn.aborted = not first
        txn.began = time.monotonic()  # a retried first statement starts the transaction afresh
    _abort_participants(router, conn, db, cmd, participants)
    return first


def _participants(router, cmd):
    """The participants of the transaction a commit or abort names (forgotten by the router);
    NoSuchTransaction (251) when the router aborted it."""
    key = _key(cmd)
    with router.txns_lock:
        txn = router.txns.pop(key, None) if key is not None else None
    if txn is not None and txn.aborted:
        raise MongoError(251, "Transaction %s has been aborted." % key[1], labels=[TRANSIENT])
    return txn.participants if txn is not None else []


COMMIT_SPREAD_S = 0.002  # the most time between two participants' commits


def cmd_commit(router, conn, db, cmd):
    """commitTransaction: every participant's part, in random order, at the time the commit began, with
    every participant's store lock held when there are several (no one sees one part without the others,
    as prepare ensures)."""
    participants = _participants(router, cmd)
    if not participants:
        if cmd.get("autocommit") is False and cmd.get("txnNumber") is not None:
            return {"ok": 1.0}
        raise MongoError(251, "Transaction was not started")
    random.shuffle(participants)
    at = router.clock.current()
    with contextlib.ExitStack() as held:
        if len(participants) > 1:
            for index in sorted(participants):
                held.enter_context(router.cluster.shards[index].lock)
        return _commit_participants(router, conn, db, cmd, participants, at)


def _commit_participants(router, conn, db, cmd, participants, at):
    """Commit each participant in the order given, at time `at`; the first one refused aborts the rest."""
    result = None
    for position, index in enumerate(participants):
        reply = router.send(conn, index, db, cmd, cluster_time=at)
        if reply.get("ok") != 1.0 and position == 0:
            abort = {"abortTransaction": 1, **{k: cmd[k] for k in ("lsid", "txnNumber", "autocommit")}}
            for other in participants[1:]:
                router.send(conn, other, db, abort)
            return router.strip(reply)
        if result is None or (result.get("ok") == 1.0 and reply.get("ok") != 1.0):
            result = reply
        if position + 1 < len(participants):
            # (mongod's coordinator reaches its participants one network round trip apart)
            time.sleep(random.uniform(0, COMMIT_SPREAD_S))
    return router.strip(result)


def cmd_abort(router, conn, db, cmd):
    """abortTransaction: every participant's part."""
    participants = _participants(router, cmd)
    if not participants:
        raise MongoError(251, "Transaction was not started")
    result = None
    for index in participants:
        reply = router.send(conn, index, db, cmd)
        if result is None or (result.get("ok") == 1.0 and reply.get("ok") != 1.0):
            result = reply
    return router.strip(result)


def move_document(router, conn, db, cmd, entry, old_shard, moved, coll):
    """An update that moves a document to another shard's chunk: a delete on its shard and an insert on
    the new one, in the client's transaction, or else in a transaction of the router's own (mongos's
    internal transaction for a retryable write; without txnNumber mongod 6.0 refuses the change:
    IllegalOperation 20). The reply is the update's: n 1, nModified 1 (router_crud makes a findAndModify's
    of it)."""
    old, new, to = moved
    in_txn = cmd.get("autocommit") is False
    if not in_txn and cmd.get("txnNumber") is None:
        return {"ok": 1.0, "n": 0, "nModified": 0, "writeErrors": [{
            "index": 0, "code": 20, "errmsg": "Must run update to shard key field in a multi-statement "
                                             "transaction or with retryWrites: true."}]}
    if in_txn:
        session = {k: cmd[k] for k in ("lsid", "txnNumber", "autocommit")}
    else:
        session = {"lsid": {"id": Binary(os.urandom(16), 4)}, "txnNumber": Int64(1), "autocommit": False}
    steps = [(old_shard, {"delete": coll, "deletes": [{"q": {"_id": old["_id"], **_key_filter(entry, old)},
                                                       "limit": 1}], **session}),
             (to, {"insert": coll, "documents": [new], **session})]
    for index, sent in steps:
        reply = router.send(conn, index, db, sent)
        if reply.get("ok") != 1.0 or reply.get("writeErrors"):
            if not in_txn:
                cmd_abort(router, conn, db, {"abortTransaction": 1, **session})
            return reply
    if not in_txn:
        reply = cmd_commit(router, conn, "admin", {"commitTransaction": 1, **session})
        if reply.get("ok") != 1.0:
            return reply
    return {"ok": 1.0, "n": 1, "nModified": 1}


def _key_filter(entry, doc):
    """Equalities on a document's shard key fields (its old values), so the delete targets one shard."""
    from .routing import MISSING, path_value
    out = {}
    for field in entry.fields:
        if field == "_id":
            continue
        value = path_value(doc, field)
        out[field] = None if value is MISSING else value
    return out


COMMANDS = {"commitTransaction": cmd_commit, "abortTransaction": cmd_abort}
