"""What mongod allows in and around multi-document transactions: the session options of a command
(lsid, txnNumber, autocommit, startTransaction), the commands and aggregation stages allowed inside a
transaction, the read and write concerns a statement of a transaction may carry, and the error labels
mongod adds to a failed statement.

Sources (mongodb/mongo, 6.0 to 8.0; the rules are the same in these versions unless noted):
- db/logical_session_id_helpers.cpp initializeOperationSessionInfo: the session option combinations (72).
- db/transaction_validation.cpp validateSessionOptions: txnNumber without autocommit only on retryable
  writes (50768); what may not start a transaction (263); writeConcern inside a transaction (72).
- db/commands.cpp CommandHelpers::canUseTransactions and the commands whose allowedInTransactions() is
  true: the allow-list below; `count` has its own message; the local and config databases are refused.
- db/service_entry_point_common.cpp _extractReadConcern / _initiateCommand: the readConcern levels a
  transaction may start with, and "Only the first command in a transaction may specify a readConcern".
  These checks run before the session is checked out, so a refused statement does not abort the
  transaction (jstests/core/txns/commands_not_allowed_in_txn.js, no_read_or_write_concerns_inside_txn.js).
- db/error_labels.cpp isTransientTransactionError: the TransientTransactionError codes.
- db/read_concern_mongod.cpp: afterClusterTime/atClusterTime must not be ahead of the cluster time.
"""

from bson.timestamp import Timestamp

from .errors import MongoError

# The commands whose allowedInTransactions() is true on mongod (bulkWrite: 8.0, served with --bulk-write).
ALLOWED_IN_TRANSACTION = {"abortTransaction", "aggregate", "bulkWrite", "commitTransaction", "create", "createIndexes",
                          "delete", "distinct", "find", "findAndModify", "findandmodify", "getMore", "insert",
                          "killCursors", "update"}
RETRYABLE_WRITE_COMMANDS = {"bulkWrite", "insert", "update", "delete", "findAndModify", "findandmodify"}
COMMIT_OR_ABORT = {"commitTransaction", "abortTransaction"}
READ_CONCERN_LEVELS_IN_TRANSACTION = {"local", "majority", "snapshot"}
# Aggregation stages refused inside a transaction (OperationNotSupportedInTransaction).
WRITING_STAGES = {"$out", "$merge"}
STAGES_NOT_IN_TRANSACTION = {"$collStats", "$currentOp", "$indexStats", "$listSessions", "$listLocalSessions",
                             "$planCacheStats", "$changeStream"}
COUNT_MESSAGE = ("Cannot run 'count' in a multi-document transaction. Please see "
                 "http://dochub.mongodb.org/core/transaction-count for a recommended alternative.")

# ErrorCodes categories used by isTransientTransactionError (src/mongo/base/error_codes.yml).
TRANSIENT_CODES = {112, 24, 267}  # WriteConflict, LockTimeout, PreparedTransactionInProgress
SNAPSHOT_ERRORS = {239, 246}  # SnapshotTooOld, SnapshotUnavailable
NEED_RETARGETTING = {63, 150, 13388}  # StaleShardVersion, StaleEpoch, StaleConfig
RETRIABLE_ERRORS = {6, 7, 89, 91, 134, 189, 262, 9001, 10107, 11600, 11602, 13435, 13436}
NO_SUCH_TRANSACTION = 251


def invalid(msg):
    """InvalidOptions (72)."""
    return MongoError(72, msg)


def not_in_transaction(msg):
    """OperationNotSupportedInTransaction (263)."""
    return MongoError(263, msg)


def check_session_options(cmd):
    """Refuse the combinations of lsid, txnNumber, autocommit and startTransaction mongod refuses when it
    reads them (before the failCommand failpoint); returns True when the command runs inside a
    multi-document transaction (autocommit: false)."""
    has_lsid = isinstance(cmd.get("lsid"), dict) and "id" in cmd["lsid"]
    number = cmd.get("txnNumber")
    autocommit = cmd.get("autocommit")
    start = cmd.get("startTransaction")
    if number is not None and not has_lsid:
        raise invalid("Transaction number requires a session ID to also be specified")
    if number is not None and (isinstance(number, bool) or not isinstance(number, int) or number < 0):
        raise invalid("Transaction number cannot be negative")
    if number is None and autocommit is not None:
        raise invalid("'autocommit' field requires a transaction number to also be specified")
    if autocommit is not None and autocommit is not False:
        raise invalid("Specifying autocommit=true is not allowed.")
    if autocommit is None and start is not None:
        raise invalid("'startTransaction' field requires 'autocommit' field to also be specified")
    if start is not None and start is not True:
        raise invalid("Specifying startTransaction=false is not allowed.")
    return autocommit is False


def check_in_transaction(name, db, cmd, in_txn):
    """The checks mongod makes after the failCommand failpoint and before it checks out the session: a
    txnNumber without autocommit only on a retryable write; in a transaction, the command must be allowed
    in transactions, on an allowed database, with no writeConcern (except on commit/abort) and a
    readConcern only on the first statement, at a level a transaction supports. A refusal here neither
    starts nor aborts the transaction."""
    if not in_txn:
        if cmd.get("txnNumber") is not None and name not in RETRYABLE_WRITE_COMMANDS:
            raise MongoError(50768, "txnNumber may only be provided for multi-document transactions and "
                                    "retryable write commands. autocommit:false was not provided, and %s is "
                                    "not a retryable write command." % name)
        return
    start = cmd.get("startTransaction") is True
    if name == "count":
        raise not_in_transaction(COUNT_MESSAGE)
    if name not in ALLOWED_IN_TRANSACTION:
        raise not_in_transaction("Cannot run '%s' in a multi-document transaction." % name)
    if start and name == "killCursors":
        raise not_in_transaction("Cannot run killCursors as the first operation in a multi-document transaction.")
    if start and name in COMMIT_OR_ABORT:
        raise not_in_transaction("Cannot start a transaction with %s"
                                 % ("a commit" if name == "commitTransaction" else "an abort"))
    if db == "local":
        raise not_in_transaction("Cannot run command against the 'local' database in a transaction.")
    if db == "config":
        raise not_in_transaction("Cannot run command against the config database in a transaction.")
    _check_read_concern(cmd.get("readConcern"), start)
    if cmd.get("writeConcern") not in (None, {}) and name not in COMMIT_OR_ABORT:
        raise invalid("writeConcern is not allowed within a multi-statement transaction")


def _check_read_concern(read_concern, start):
    """A readConcern only on the first statement; level local (the default), majority or snapshot;
    afterClusterTime accepted (this server never lags: nothing to wait for), afterOpTime refused."""
    if read_concern in (None, {}):
        return
    if not isinstance(read_concern, dict):
        raise MongoError(14, "readConcern must be an object")
    if not start:
        raise invalid("Only the first command in a transaction may specify a readConcern")
    if read_concern.get("level", "local") not in READ_CONCERN_LEVELS_IN_TRANSACTION:
        raise invalid("The readConcern level must be either 'local' (default), 'majority' or 'snapshot' in "
                      "order to run in a transaction")
    if "afterOpTime" in read_concern:
        raise invalid("The readConcern cannot specify 'afterOpTime' in a transaction")


def check_cluster_time(read_concern, current):
    """A readConcern afterClusterTime/atClusterTime later than the cluster clock (`current`, after the
    command's own gossiped $clusterTime) is refused, as db/read_concern_mongod.cpp does; an earlier one
    needs no wait here (this one-member set has applied every write)."""
    if not isinstance(read_concern, dict):
        return
    for name in ("afterClusterTime", "atClusterTime"):
        target = read_concern.get(name)
        if isinstance(target, Timestamp) and target > current:
            raise invalid("readConcern %s value must not be greater than the current clusterTime. Requested "
                          "clusterTime: Timestamp(%d, %d); current clusterTime: Timestamp(%d, %d)"
                          % (name, target.time, target.inc, current.time, current.inc))


def check_pipeline(pipeline):
    """Aggregation stages mongod refuses inside a transaction (raised while the statement runs, so the
    transaction is aborted, as mongod's pipeline parsing does)."""
    for stage in pipeline:
        name = next(iter(stage), None) if isinstance(stage, dict) else None
        if name in WRITING_STAGES:
            raise not_in_transaction("%s cannot be used in a transaction" % name)
        if name in STAGES_NOT_IN_TRANSACTION:
            raise not_in_transaction("Operation not permitted in transaction :: caused by :: Stage not "
                                     "supported inside of a multi-document transaction: %s" % name)


def is_transient(code, commit_or_abort, has_wc_error=False):
    """mongod's isTransientTransactionError: whether a failed statement of a transaction carries the
    TransientTransactionError label."""
    if code in TRANSIENT_CODES or code in SNAPSHOT_ERRORS or code in NEED_RETARGETTING:
        return True
    if commit_or_abort:
        return code == NO_SUCH_TRANSACTION and not has_wc_error
    return code in RETRIABLE_ERRORS or code == NO_SUCH_TRANSACTION
