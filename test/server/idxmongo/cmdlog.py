"""A ring of the commands the server received, for tests: `recentCommands` (a test-server-only admin command).

Each record says what a driver sent that a test may need to assert on: the command's name, database and
target collection, its `$readPreference` (None when the driver sent none, which mongod reads as primary), its
`collation`, `filter` and `limit` (for find), an aggregate's `stages` (the name of each stage), a bulkWrite's
`ordered` and `ops` ([kind, namespace]), whether it ran in a transaction, and the client's appName.
"""

import collections
import threading

RING_SIZE = 2000
# Not recorded: the handshake, the monitors' heartbeats and the log's own reads.
SKIPPED = {"hello", "isMaster", "ismaster", "recentCommands", "commandCpu", "saslStart", "saslContinue", "endSessions"}


def _bulk_write_ops(cmd):
    """[kind, "db.coll"] of each op of a bulkWrite command (None where it is malformed)."""
    ns = [entry.get("ns") if isinstance(entry, dict) else None for entry in cmd.get("nsInfo") or []]
    out = []
    for op in cmd.get("ops") or []:
        kind = next((k for k in ("insert", "update", "delete") if isinstance(op, dict) and k in op), None)
        index = op.get(kind) if kind else None
        out.append([kind, ns[index] if isinstance(index, int) and 0 <= index < len(ns) else None])
    return out


class CommandLog:
    """The last RING_SIZE commands (thread-safe)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.ring = collections.deque(maxlen=RING_SIZE)

    def record(self, conn, db, name, cmd):
        """Remember one command (before it runs)."""
        if name in SKIPPED:
            return
        target = cmd.get(name)
        entry = {"command": name, "db": db,
                 "collection": target if isinstance(target, str) else None,
                 "readPreference": cmd.get("$readPreference"),
                 "inTransaction": "txnNumber" in cmd and cmd.get("autocommit") is False,
                 "appName": conn.app_name}
        for field in ("filter", "collation", "limit"):
            if field in cmd:
                entry[field] = cmd[field]
        if name == "aggregate" and isinstance(cmd.get("pipeline"), list):
            entry["stages"] = [next(iter(stage), None) if isinstance(stage, dict) else None
                               for stage in cmd["pipeline"]]
        if name == "bulkWrite":  # its ops as [kind, namespace], in order, and whether they are ordered
            entry["ordered"] = cmd.get("ordered", True)
            entry["ops"] = _bulk_write_ops(cmd)
        with self.lock:
            self.ring.append(entry)

    def take(self, clear):
        """The records, oldest first; with `clear` the ring is emptied."""
        with self.lock:
            out = list(self.ring)
            if clear:
                self.ring.clear()
        return out


class CommandCpu:
    """Server CPU time (the serving thread's, time.thread_time) spent in commands, by client appName
    and command name: what each client costs this single-process server (benchmarks read it)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.totals = collections.defaultdict(lambda: [0, 0.0])

    def add(self, app_name, name, seconds):
        """Count one command of `app_name` that took `seconds` of this thread's CPU."""
        with self.lock:
            total = self.totals[(app_name or "", name)]
            total[0] += 1
            total[1] += seconds

    def take(self, clear):
        """[{appName, command, count, cpu_ms}]; with `clear` the totals start again."""
        with self.lock:
            out = [{"appName": app, "command": name, "count": n, "cpu_ms": s * 1000.0}
                   for (app, name), (n, s) in sorted(self.totals.items())]
            if clear:
                self.totals.clear()
        return out


def cmd_command_cpu(ctx):
    """commandCpu (test server only): {commandCpu: 1, clear: bool} -> {commands: [...]}, the server CPU
    each client's commands took (CommandCpu)."""
    return {"commands": ctx.server.cmdcpu.take(bool(ctx.cmd.get("clear"))), "ok": 1.0}


def cmd_recent_commands(ctx):
    """recentCommands (test server only): {recentCommands: 1, clear: bool, command: name} -> {commands: [...]}
    (with `command`, only the records of commands of that name)."""
    records = ctx.server.cmdlog.take(bool(ctx.cmd.get("clear")))
    name = ctx.cmd.get("command")
    if isinstance(name, str):
        records = [record for record in records if record["command"] == name]
    return {"commands": records, "ok": 1.0}
