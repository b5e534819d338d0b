"""mongod's `failCommand` and `onPrimaryTransactionalWrite` failpoints, as its configureFailPoint test
command implements them.

Modes: "alwaysOn", "off", {times: N} (fire N times then turn off), {skip: N} (let N matching commands
through, then fire every time). Data: failCommands, errorCode, closeConnection, errorLabels, appName,
blockConnection/blockTimeMS, writeConcernError (the command runs, and its reply carries this document as
its writeConcernError, with errorLabels if given, as mongod's failCommand does when there is no errorCode).
The handshake and configureFailPoint itself are never failed. errorLabels, when given (even empty), are the
error's labels: the server adds none of its own (mongod's errorLabelsOverride).

Test-server extensions (mongod has no such field or mode):
- `killServer: "before"` makes the server process exit at once (os._exit, status KILL_EXIT_STATUS) when
  the failpoint fires, before executing the command and without replying, as if mongod were killed with
  SIGKILL at that moment; `killServer: "after"` executes the command, journals its effects (with
  --dbpath), then exits without sending the reply. Restart the server with the same --dbpath to get its
  data back.
- `closeConnection: "after"` executes the command, journals its effects, then closes the connection
  without replying; the server stays up. (`closeConnection: true` closes it without executing the
  command, as in mongod.)
- mode `{skip: N, times: M}`: let N matching commands through, then fire M times (mongod takes `times`
  and ignores `skip`).
Both "after" forms combine with the modes and with failCommands and appName like the other data;
blockConnection still delays the command first, while errorCode is ignored (and closeConnection, for
killServer).

`onPrimaryTransactionalWrite` (mongod's own, transaction_participant.cpp, _registerUpdateCacheOnCommit) is
evaluated inside the storage transaction of each write a session records: every oplog entry of a
retryable write (one per statement that wrote; one for all the documents an insert command inserts
together) and the commit of a transaction that wrote. Data: `closeConnection` (default true) ends the
client's connection, while the command goes on and its reply is never sent; `failBeforeCommitExceptionCode`
throws that error there, so the write is rolled back and not recorded. Modes as for failCommand; it has
no failCommands or appName filter. See context.Context.on_primary_write for where it fires here.

`failGetMoreAfterCursorCheckout` (mongod's own, commands/getmore_cmd.cpp) fails a getMore after it found
its cursor, with `errorCode` (InternalError, 1, if absent), an optional `appName` filter; the failed getMore
closes the cursor, and on a change stream a resumable code gets ResumableChangeStreamError.
"""

import threading

from .errors import MongoError

NEVER_FAILED = {"hello", "isMaster", "ismaster", "configureFailPoint"}
KILL_MOMENTS = ("before", "after")
KILL_EXIT_STATUS = 137  # what a shell reports for a process killed by SIGKILL


class FailCommand:
    """What a triggered failpoint asks the dispatcher to do."""

    def __init__(self, data):
        close = data.get("closeConnection")
        self.close_after = close == "after"  # test-server extension: execute, then close
        self.close_connection = bool(close) and not self.close_after
        self.block_seconds = (data.get("blockTimeMS", 0) / 1000.0) if data.get("blockConnection") else 0.0
        self.error_code = data.get("errorCode")
        self.labels = list(data.get("errorLabels") or [])
        self.labels_given = "errorLabels" in data  # given labels replace mongod's own (even when empty)
        self.kill = data.get("killServer")  # None, "before" or "after" (test-server extension)
        self.write_concern_error = data.get("writeConcernError")

    def error(self):
        """The error reply MongoError, or None when the failpoint only blocks."""
        if self.error_code is None:
            return None
        error = MongoError(int(self.error_code), "Failing command via 'failCommand' failpoint", labels=self.labels)
        error.fixed_labels = self.labels_given
        return error

    def add_write_concern_error(self, reply):
        """Put the configured writeConcernError (and errorLabels) into the reply of the executed command."""
        if self.write_concern_error is None or reply.get("ok") != 1.0:
            return
        reply["writeConcernError"] = dict(self.write_concern_error)
        if self.labels:
            reply["errorLabels"] = list(self.labels)


class OnPrimaryWrite:
    """What a triggered onPrimaryTransactionalWrite asks the write to do."""

    def __init__(self, data):
        self.close_connection = bool(data.get("closeConnection", True))
        self.error_code = data.get("failBeforeCommitExceptionCode")


class FailPointState:
    """One failpoint's mode, data and counters."""

    def __init__(self):
        self.mode = "off"
        self.remaining = 0
        self.skipping = 0  # {skip, times}: matching evaluations still to let through before `times` counts
        self.data = {}
        self.entered = 0

    def set(self, mode, data):
        """Set the mode and data (failpoint lock held); returns how often it fired under the previous
        configuration (configureFailPoint's `count`)."""
        previous = self.entered
        self.skipping = 0
        if mode in ("alwaysOn", "off"):
            self.mode, self.remaining = mode, 0
        elif isinstance(mode, dict) and "times" in mode:
            self.mode, self.remaining = "times", int(mode["times"])
            self.skipping = max(0, int(mode.get("skip", 0)))
        elif isinstance(mode, dict) and "skip" in mode:
            self.mode, self.remaining = "skip", int(mode["skip"])
        else:
            raise MongoError(2, "mode must be 'alwaysOn', 'off', {times: N} or {skip: N}")
        if self.mode == "times" and self.remaining <= 0:
            self.mode = "off"
        self.data = data
        self.entered = 0
        return previous

    def fires(self):
        """Evaluate the failpoint once (failpoint lock held): True when it fires now."""
        if self.mode == "off":
            return False
        if self.skipping > 0:
            self.skipping -= 1
            return False
        if self.mode == "skip" and self.remaining > 0:
            self.remaining -= 1
            return False
        if self.mode == "times":
            self.remaining -= 1
            if self.remaining <= 0:
                self.mode = "off"
        self.entered += 1
        return True


def _check_fail_command_data(data):
    """Refuse the test-server extensions' unknown values."""
    if data.get("killServer") not in (None,) + KILL_MOMENTS:
        raise MongoError(2, "killServer must be \"before\" or \"after\"")
    if isinstance(data.get("closeConnection"), str) and data["closeConnection"] != "after":
        raise MongoError(2, "closeConnection must be a boolean or \"after\"")


def _check_on_primary_data(data):
    """closeConnection is a boolean, failBeforeCommitExceptionCode a number (mongod reads them with
    Bool() and Number(), which assert on other types)."""
    if not isinstance(data.get("closeConnection", True), bool):
        raise MongoError(14, "onPrimaryTransactionalWrite: closeConnection must be a boolean")
    code = data.get("failBeforeCommitExceptionCode")
    if code is not None and (isinstance(code, bool) or not isinstance(code, (int, float))):
        raise MongoError(14, "onPrimaryTransactionalWrite: failBeforeCommitExceptionCode must be a number")


def _check_get_more_data(data):
    """errorCode is a number (mongod reads it with safeNumberLong)."""
    code = data.get("errorCode")
    if code is not None and (isinstance(code, bool) or not isinstance(code, (int, float))):
        raise MongoError(14, "failGetMoreAfterCursorCheckout: errorCode must be a number")


DATA_CHECKS = {"failCommand": _check_fail_command_data, "onPrimaryTransactionalWrite": _check_on_primary_data,
               "failGetMoreAfterCursorCheckout": _check_get_more_data}


class FailPoints:
    """Server-wide failpoint state: failCommand and onPrimaryTransactionalWrite."""

    def __init__(self):
        self.lock = threading.Lock()
        self.points = {name: FailPointState() for name in DATA_CHECKS}

    def configure(self, cmd):
        """configureFailPoint: set mode and data; returns the reply."""
        name = cmd.get("configureFailPoint")
        if name not in self.points:
            raise MongoError(2, "Unknown fail point: %s (the test server supports %s)"
                             % (name, " and ".join(sorted(self.points))))
        data = dict(cmd.get("data") or {})
        DATA_CHECKS[name](data)
        with self.lock:
            previous = self.points[name].set(cmd.get("mode"), data)
        return {"count": previous, "ok": 1.0}

    def check(self, command_name, app_name):
        """The FailCommand to apply to this command, or None."""
        if command_name in NEVER_FAILED:
            return None
        with self.lock:
            point = self.points["failCommand"]
            if point.mode == "off" or command_name not in (point.data.get("failCommands") or []):
                return None
            if "appName" in point.data and point.data["appName"] != app_name:
                return None
            return FailCommand(point.data) if point.fires() else None

    def on_primary_write(self):
        """Evaluate onPrimaryTransactionalWrite for one recorded write: an OnPrimaryWrite, or None."""
        with self.lock:
            point = self.points["onPrimaryTransactionalWrite"]
            return OnPrimaryWrite(point.data) if point.fires() else None

    def get_more_checkout(self, app_name):
        """Evaluate failGetMoreAfterCursorCheckout for a getMore that found its cursor: the error code to
        fail it with, or None."""
        with self.lock:
            point = self.points["failGetMoreAfterCursorCheckout"]
            if point.mode == "off" or ("appName" in point.data and point.data["appName"] != app_name):
                return None
            return int(point.data.get("errorCode", 1)) if point.fires() else None

    def on_primary_write_enabled(self):
        """Whether onPrimaryTransactionalWrite is configured (not off)."""
        with self.lock:
            return self.points["onPrimaryTransactionalWrite"].mode != "off"
