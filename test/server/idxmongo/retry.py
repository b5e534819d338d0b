"""Retryable writes, as mongod keeps them in config.transactions, and the RetryableWriteError label.

A write command (insert, update, delete, findAndModify) that carries `lsid` and `txnNumber` but no
`autocommit` is a retryable write. Each session has one active txnNumber; a command with a higher one
starts a new retryable write and forgets the statements of the previous one (mongod's
TransactionParticipant::beginOrContinue, transaction_participant.cpp), a lower one is refused with
TransactionTooOld (225), and the number of a multi-document transaction cannot be reused for a retryable
write (IncompleteTransactionHistory, 217) nor the other way round.

Statements are numbered as mongod numbers them (write_ops_exec.cpp, getStmtIdForWriteOp): `stmtIds[i]`
when the command gives the array, else `stmtId + i` (`stmtId` defaulting to 0), so a driver, which sends
neither, gets the statements' positions; findAndModify is statement `stmtId` (0). mongod records a
statement when it writes an oplog entry, so only statements that changed something are remembered: an
insert, an update that modified or upserted a document, a delete that removed one, a findAndModify that
did any of these. A statement already recorded for the session's current txnNumber is not executed again:
it counts as mongod reconstructs it from the oplog (write_ops_retryability.cpp: n 1 for an insert or a
delete, n 1 and nModified 1 for an update, n 1 with the upserted `_id` for an upsert; findAndModify
returns the recorded pre- or post-image, without applying `fields`, and refuses a retry that asks for the
other image or another kind of write), and its id is listed in the reply's `retriedStmtIds`
(findAndModify: `retriedStmtId`). Statements not recorded (never reached, failed, or matching nothing)
run again. Multi-document updates and deletes cannot be retryable writes (InvalidOptions, 72, as a write
error).

With --dbpath, the statements a command recorded are journaled in the same record as its writes (as
mongod writes config.transactions in the write's storage transaction), so a retry after a restart is
still recognised; without it the history is lost with the process. endSessions forgets the sessions'
histories (mongod's go when the sessions expire).

Error labels (error_labels.cpp, ErrorLabelBuilder::isRetryableWriteError): an error reply to a retryable
write, or to commitTransaction/abortTransaction, whose code or writeConcernError code is in mongod's
RetriableError category gets the RetryableWriteError label, unless it is a TransientTransactionError, and
unless a failCommand failpoint gave the labels itself (errorLabels, even empty, replaces them).
"""

import threading

from .errors import TRANSIENT, MongoError
from .journal import session_op

RETRYABLE_WRITE_COMMANDS = {"bulkWrite", "insert", "update", "delete", "findAndModify", "findandmodify"}
COMMIT_OR_ABORT = {"commitTransaction", "abortTransaction"}
RETRYABLE_WRITE_ERROR = "RetryableWriteError"
# mongod 6.0's RetriableError category (src/mongo/base/error_codes.yml): HostUnreachable, HostNotFound,
# NetworkTimeout, ShutdownInProgress, ReadConcernMajorityNotAvailableYet, PrimarySteppedDown,
# ExceededTimeLimit, SocketException, NotWritablePrimary, InterruptedAtShutdown,
# InterruptedDueToReplStateChange, NotPrimaryNoSecondaryOk, NotPrimaryOrSecondary,
# BackupCursorOpenConflictWithCheckpoint.
RETRIABLE_CODES = frozenset({6, 7, 89, 91, 134, 189, 262, 9001, 10107, 11600, 11602, 13435, 13436, 50915})


def is_retryable_write(name, cmd):
    """A write command with a txnNumber and no autocommit: a retryable write."""
    return name in RETRYABLE_WRITE_COMMANDS and "txnNumber" in cmd and "autocommit" not in cmd


class History:
    """One session's record (mongod's config.transactions entry): its active txnNumber and, while that
    number belongs to a retryable write, the outcome of each statement executed under it."""

    def __init__(self, key, number, statements=None):
        self.key = key
        self.number = number
        self.statements = dict(statements or {})
        self.times = {}  # stmt id -> optime of the write that recorded it (a replica set's rollback)


class StatementLog:
    """The statements of one retryable write command: their ids, what earlier attempts recorded for
    them, and which of them this attempt did not execute again."""

    def __init__(self, history, cmd, name):
        self.history = history
        self.name = name
        self.stmt_ids = cmd.get("stmtIds")
        self.first = cmd.get("stmtId", 0)
        self.new = []  # (stmt id, outcome) this attempt recorded, for the journal
        if self.stmt_ids is not None and not isinstance(self.stmt_ids, list):
            raise MongoError(14, "stmtIds must be an array")
        if isinstance(self.first, bool) or not isinstance(self.first, int):
            raise MongoError(14, "stmtId must be an integer")
        self.retried = []

    def stmt_id(self, index):
        """The statement id of the command's statement `index`."""
        if self.stmt_ids is not None:
            if index >= len(self.stmt_ids):
                raise MongoError(2, "the number of stmtIds must match the number of statements")
            return int(self.stmt_ids[index])
        return self.first + index

    def previous(self, index):
        """The outcome recorded for statement `index` by an earlier attempt, or None; a recorded one is
        listed as retried."""
        stmt_id = self.stmt_id(index)
        outcome = self.history.statements.get(stmt_id)
        if outcome is not None:
            self.retried.append(stmt_id)
        return outcome

    def record(self, index, outcome, op_time=None):
        """Remember what statement `index` wrote (at optime `op_time`)."""
        stmt_id = self.stmt_id(index)
        self.history.statements[stmt_id] = outcome
        self.history.times[stmt_id] = op_time
        self.new.append((stmt_id, outcome))

    def executed(self, index):
        """Whether an earlier attempt recorded statement `index` (without listing it as retried)."""
        return self.stmt_id(index) in self.history.statements

    def forget(self, indexes):
        """Forget statements this attempt recorded and then rolled back (onPrimaryTransactionalWrite's
        failBeforeCommitExceptionCode: mongod's in-memory record is updated only on commit)."""
        stmt_ids = {self.stmt_id(index) for index in indexes}
        for stmt_id in stmt_ids:
            self.history.statements.pop(stmt_id, None)
        self.new = [(stmt_id, outcome) for stmt_id, outcome in self.new if stmt_id not in stmt_ids]

    def journal(self, ctx):
        """Journal the statements this attempt recorded with the command's changes (with --dbpath)."""
        if self.new:
            ctx.record_session(session_op, self.history.key, self.history.number, self.new)
            self.new = []

    def annotate(self, reply):
        """Add the ids of the statements not executed again to a successful reply."""
        if not self.retried or reply.get("ok") != 1.0:
            return reply
        if self.name in ("findAndModify", "findandmodify"):
            reply["retriedStmtId"] = self.retried[0]
        else:
            reply["retriedStmtIds"] = list(self.retried)
        return reply


class RetryableWrites:
    """The sessions' histories, and the txnNumber rules shared with transactions."""

    def __init__(self, txns, journaled=None):
        self.txns = txns
        self.lock = threading.Lock()
        self.histories = {key: History(key, number, stmts) for key, (number, stmts) in (journaled or {}).items()}

    def begin(self, ctx):
        """The StatementLog of a retryable write command (store lock held), or None for other commands.
        A newer txnNumber starts a new history (and aborts an older transaction of the session still
        open, as mongod does); an older one is TransactionTooOld."""
        if ctx.txn is not None or not is_retryable_write(ctx.name, ctx.cmd):
            return None
        lsid = ctx.cmd.get("lsid")
        number = ctx.cmd["txnNumber"]
        if not isinstance(lsid, dict) or "id" not in lsid:
            raise MongoError(72, "Transaction number requires a session ID to also be specified")
        if isinstance(number, bool) or not isinstance(number, int):
            raise MongoError(14, "txnNumber must be a long")
        key = bytes(lsid["id"])
        txn = self.txns.sessions.get(key)
        with self.lock:
            history = self.histories.get(key)
            active = max(history.number if history else -1, txn.number if txn else -1)
            if number < active:
                raise MongoError(225, "Retryable write with txnNumber %d is prohibited on session because a "
                                      "newer %s with txnNumber %d has already started on this session."
                                 % (number, "transaction" if txn and txn.number == active else "retryable write",
                                    active))
            if txn is not None and txn.number == number:
                raise MongoError(217, "Cannot retry a retryable write that has been converted into a "
                                      "transaction")
            if history is None or history.number < number:
                history = self.histories[key] = History(key, number)
        if txn is not None and txn.state == "active":
            self.txns.abort(txn)
        return StatementLog(history, ctx.cmd, ctx.name)

    def check_transaction(self, session_key, number, start):
        """Before a transaction command: refuse a txnNumber below the session's retryable write
        (TransactionTooOld) or equal to it (a replica set cannot start a transaction at the active
        number: ConflictingOperationInProgress; continuing one there is NoSuchTransaction); a higher
        number ends the retryable write's history."""
        with self.lock:
            history = self.histories.get(session_key)
            if history is None:
                return
            if number < history.number:
                raise MongoError(225, "Cannot start transaction %d on session because a newer retryable "
                                      "write with txnNumber %d has already started on this session."
                                 % (number, history.number))
            if number == history.number:
                if start:
                    raise MongoError(117, "Only servers in a sharded cluster can start a new transaction at "
                                          "the active transaction number")
                raise MongoError(251, "Given transaction number %d does not match any in-progress "
                                      "transactions." % number, labels=[TRANSIENT])
            del self.histories[session_key]

    def rollback(self, point):
        """A replica set rolled back the writes after optime `point`: the statements they recorded are
        forgotten with them (mongod rolls config.transactions back with the oplog), so a retry runs
        them again."""
        with self.lock:
            for history in self.histories.values():
                for stmt_id, at in list(history.times.items()):
                    if at is not None and at > point:
                        history.statements.pop(stmt_id, None)
                        del history.times[stmt_id]

    def end_sessions(self, session_keys):
        """Forget the histories of ended sessions."""
        with self.lock:
            for key in session_keys:
                self.histories.pop(key, None)


def find_and_modify_retry(outcome, cmd):
    """The reply to a findAndModify whose write an earlier attempt made, from what it recorded (mongod's
    parseOplogEntryForFindAndModify); a retry that asks for another kind of write or another image is
    refused with mongod's codes."""
    kind = outcome["kind"]
    remove = bool(cmd.get("remove"))
    new = bool(cmd.get("new"))
    if kind == "delete" and not remove:
        raise MongoError(40606, "findAndModify retry request is not compatible with previous write in the "
                                "transaction of type: d")
    if kind == "insert" and not cmd.get("upsert"):
        raise MongoError(40608, "findAndModify retry request is not compatible with previous write in the "
                                "transaction of type: i")
    if kind == "update" and remove:
        raise MongoError(40609, "findAndModify retry request is not compatible with previous write in the "
                                "transaction of type: u")
    if kind == "update" and new != outcome["new"]:
        raise MongoError(40611 if new else 40612,
                         "findAndModify retry request wants the document %s update returned, but only %s "
                         "update document is stored" % (("after", "before") if new else ("before", "after")))
    if kind == "delete":
        return {"lastErrorObject": {"n": 1}, "value": outcome["image"], "ok": 1.0}
    if kind == "update":
        return {"lastErrorObject": {"n": 1, "updatedExisting": True}, "value": outcome["image"], "ok": 1.0}
    doc = outcome["image"]
    return {"lastErrorObject": {"n": 1, "updatedExisting": False, "upserted": doc["_id"]},
            "value": doc if new else None, "ok": 1.0}


def add_error_labels(name, cmd, reply):
    """Add RetryableWriteError to an error reply (or a reply with a writeConcernError) of a retryable
    write or of commitTransaction/abortTransaction, when its code is retriable."""
    retryable = is_retryable_write(name, cmd)
    commit_or_abort = name in COMMIT_OR_ABORT and "txnNumber" in cmd
    if not (retryable or commit_or_abort):
        return reply
    labels = reply.get("errorLabels") or []
    if TRANSIENT in labels or RETRYABLE_WRITE_ERROR in labels:
        return reply
    code = reply.get("code") if reply.get("ok") != 1.0 else None
    wce = reply.get("writeConcernError")
    wc_code = wce.get("code") if isinstance(wce, dict) else None
    if code in RETRIABLE_CODES or wc_code in RETRIABLE_CODES:
        reply["errorLabels"] = list(labels) + [RETRYABLE_WRITE_ERROR]
    return reply
