"""The `failCommand` failpoint, as mongod's configureFailPoint test command implements it.

Modes: "alwaysOn", "off", {times: N} (fire N times then turn off), {skip: N} (let N matching commands
through, then fire every time). Data: failCommands, errorCode, closeConnection, errorLabels, appName,
blockConnection/blockTimeMS. The handshake and configureFailPoint itself are never failed.

Test-server extension (mongod has no such field): `killServer: "before"` makes the server process exit at
once (os._exit, status KILL_EXIT_STATUS) when the failpoint fires, before executing the command and without
replying, as if mongod were killed with SIGKILL at that moment; `killServer: "after"` executes the command,
journals its effects (with --dbpath), then exits without sending the reply. It combines with the modes and
with failCommands and appName like the other data; blockConnection still delays the command first, while
errorCode and closeConnection are ignored. Restart the server with the same --dbpath to get its data back.
"""

import threading

from .errors import MongoError

NEVER_FAILED = {"hello", "isMaster", "ismaster", "configureFailPoint"}
KILL_MOMENTS = ("before", "after")
KILL_EXIT_STATUS = 137  # what a shell reports for a process killed by SIGKILL


class FailCommand:
    """What a triggered failpoint asks the dispatcher to do."""

    def __init__(self, data):
        self.close_connection = bool(data.get("closeConnection"))
        self.block_seconds = (data.get("blockTimeMS", 0) / 1000.0) if data.get("blockConnection") else 0.0
        self.error_code = data.get("errorCode")
        self.labels = list(data.get("errorLabels") or [])
        self.labels_given = "errorLabels" in data  # given labels replace mongod's own (even when empty)
        self.kill = data.get("killServer")  # None, "before" or "after" (test-server extension)

    def error(self):
        """The error reply MongoError, or None when the failpoint only blocks."""
        if self.error_code is None:
            return None
        error = MongoError(int(self.error_code), "Failing command via 'failCommand' failpoint", labels=self.labels)
        error.fixed_labels = self.labels_given
        return error


class FailPoints:
    """Server-wide failpoint state."""

    def __init__(self):
        self.lock = threading.Lock()
        self.mode = "off"
        self.remaining = 0
        self.data = {}
        self.entered = 0

    def configure(self, cmd):
        """configureFailPoint: set mode and data; returns the reply."""
        name = cmd.get("configureFailPoint")
        if name != "failCommand":
            raise MongoError(2, "Unknown fail point: %s (the test server supports failCommand)" % name)
        mode = cmd.get("mode")
        data = dict(cmd.get("data") or {})
        if data.get("killServer") not in (None,) + KILL_MOMENTS:
            raise MongoError(2, "killServer must be \"before\" or \"after\"")
        with self.lock:
            previous = self.entered
            if mode in ("alwaysOn", "off"):
                self.mode, self.remaining = mode, 0
            elif isinstance(mode, dict) and "times" in mode:
                self.mode, self.remaining = "times", int(mode["times"])
            elif isinstance(mode, dict) and "skip" in mode:
                self.mode, self.remaining = "skip", int(mode["skip"])
            else:
                raise MongoError(2, "mode must be 'alwaysOn', 'off', {times: N} or {skip: N}")
            if self.mode == "times" and self.remaining <= 0:
                self.mode = "off"
            self.data = data
            self.entered = 0
        return {"count": previous, "ok": 1.0}

    def check(self, command_name, app_name):
        """The FailCommand to apply to this command, or None."""
        if command_name in NEVER_FAILED:
            return None
        with self.lock:
            if self.mode == "off" or command_name not in (self.data.get("failCommands") or []):
                return None
            if "appName" in self.data and self.data["appName"] != app_name:
                return None
            if self.mode == "skip" and self.remaining > 0:
                self.remaining -= 1
                return None
            if self.mode == "times":
                self.remaining -= 1
                if self.remaining <= 0:
                    self.mode = "off"
            self.entered += 1
            return FailCommand(self.data)
