"""MongoDB error codes and the exception the command layer turns into `ok: 0` replies."""

CODE_NAMES = {
    1: "InternalError",
    2: "BadValue",
    9: "FailedToParse",
    11: "UserNotFound",
    13: "Unauthorized",
    14: "TypeMismatch",
    18: "AuthenticationFailed",
    20: "IllegalOperation",
    24: "LockTimeout",
    26: "NamespaceNotFound",
    27: "IndexNotFound",
    40: "ConflictingUpdateOperators",
    43: "CursorNotFound",
    48: "NamespaceExists",
    50: "MaxTimeMSExpired",
    53: "InvalidIdField",
    59: "CommandNotFound",
    66: "ImmutableField",
    67: "CannotCreateIndex",
    72: "InvalidOptions",
    73: "InvalidNamespace",
    85: "IndexOptionsConflict",
    86: "IndexKeySpecsConflict",
    91: "ShutdownInProgress",
    112: "WriteConflict",
    115: "CommandNotSupported",
    171: "CannotIndexParallelArrays",
    225: "TransactionTooOld",
    246: "SnapshotUnavailable",
    251: "NoSuchTransaction",
    256: "TransactionCommitted",
    263: "OperationNotSupportedInTransaction",
    47: "NoMatchingDocument",
    260: "InvalidResumeToken",
    280: "ChangeStreamFatalError",
    286: "ChangeStreamHistoryLost",
    11000: "DuplicateKey",
    50768: "NotARetryableWriteCommand",
}
# Names of the codes failCommand is given by the driver specification tests (src/mongo/base/error_codes.yml),
# so that an injected error reports mongod's codeName rather than a generic one.
CODE_NAMES.update({
    6: "HostUnreachable", 7: "HostNotFound", 24: "LockTimeout", 50: "MaxTimeMSExpired", 79: "UnknownReplWriteConcern",
    100: "UnsatisfiableWriteConcern",
    51: "ManualInterventionRequired", 89: "NetworkTimeout", 91: "ShutdownInProgress", 189: "PrimarySteppedDown",
    246: "SnapshotUnavailable", 262: "ExceededTimeLimit", 267: "PreparedTransactionInProgress",
    13388: "StaleConfig", 46: "LockBusy",
    9001: "SocketException", 10107: "NotWritablePrimary", 11600: "InterruptedAtShutdown", 11601: "Interrupted",
    11602: "InterruptedDueToReplStateChange", 13435: "NotPrimaryNoSecondaryOk", 13436: "NotPrimaryOrSecondary",
})

TRANSIENT = "TransientTransactionError"


def code_name(code):
    """Return MongoDB's codeName for `code` (generic name for codes we do not list)."""
    return CODE_NAMES.get(code, "Location%d" % code)


class MongoError(Exception):
    """A command failure carrying MongoDB's code, message, error labels and extra reply fields."""

    def __init__(self, code, errmsg, labels=None, extra=None):
        super().__init__(errmsg)
        self.code = code
        self.errmsg = errmsg
        self.labels = list(labels or [])
        self.extra = dict(extra or {})
        self.fixed_labels = False  # labels given by a failpoint: the server adds none (retry.py)

    def to_reply(self):
        """The `ok: 0` reply document for this error."""
        reply = {"ok": 0.0, "errmsg": self.errmsg, "code": self.code, "codeName": code_name(self.code)}
        reply.update(self.extra)
        if self.labels:
            reply["errorLabels"] = self.labels
        return reply

    def to_write_error(self, index):
        """The `writeErrors` entry for this error at statement `index`. An interruption (MaxTimeMSExpired
        while a write waits, ...) fails the whole command instead, as in mongod's write_ops_exec.cpp
        handleError: it is raised again."""
        if self.code in INTERRUPTION_CODES:
            raise self
        entry = {"index": index, "code": self.code, "errmsg": self.errmsg}
        entry.update(self.extra)
        return entry


# ErrorCodes of mongod's Interruption category that this server raises or passes on (error_codes.yml):
# InterruptedAtShutdown, Interrupted, InterruptedDueToReplStateChange, ExceededTimeLimit, MaxTimeMSExpired.
INTERRUPTION_CODES = {11600, 11601, 11602, 262, 50}


class CloseConnection(Exception):
    """Raised to drop the client connection without replying (failCommand closeConnection)."""


def bad_value(msg):
    """Shortcut for a BadValue (2) error."""
    return MongoError(2, msg)


def write_conflict(in_txn):
    """WriteConflict (112); inside a transaction it carries TransientTransactionError as MongoDB does."""
    return MongoError(
        112,
        "WriteConflict error: this operation conflicted with another operation. Please retry your operation "
        "or multi-document transaction.",
        labels=[TRANSIENT] if in_txn else None,
    )


def from_mongomock(exc):
    """Translate an exception raised inside mongomock into a MongoError.

    mongomock raises pymongo's OperationFailure/WriteError (sometimes without a code), ValueError for malformed
    specifications and NotImplementedError for features it lacks; all become ok:0 replies instead of crashing
    the connection.
    """
    if isinstance(exc, MongoError):
        return exc
    msg = str(exc)
    if isinstance(exc, NotImplementedError):
        return MongoError(115, "not supported by the test server: " + msg)
    code = getattr(exc, "code", None)
    if "_id" in msg and ("immutable" in msg or "cannot be changed" in msg):
        code = 66
    return MongoError(code if isinstance(code, int) and code else 2, msg)
