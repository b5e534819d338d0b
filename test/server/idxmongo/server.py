"""The TCP server: connections, command dispatch (auth, failpoints, transactions, locking, journal), logging."""

import collections
import contextlib
import logging
import os
import select
import socket
import threading
import time
import traceback

from . import authz_cmds, bulkwrite, cmd_admin, cmd_crud, cmd_users, limits, shard_version, sharding, txnrules
from .cmdlog import CommandCpu, CommandLog, cmd_command_cpu, cmd_recent_commands
from .auth import Authenticator
from .authz import Users
from . import changestream
from .changelog import DEFAULT_LIMIT, ChangeLog
from .changelog import wall_now as changelog_wall
from .clusterclock import ClusterClock
from .context import Context
from .cursors import CursorRegistry
from .errors import TRANSIENT, CloseConnection, MongoError, from_mongomock
from .failpoints import KILL_EXIT_STATUS, FailPoints
from .histjournal import DurableHistory
from .journal import Journal
from .repl import ReplicaSet
from .retry import RetryableWrites, add_error_labels
from .storage import Store
from .txn import TransactionManager
from .wire import serve_requests
from .writeconcern import WRITE_CONCERN_COMMANDS, add_write_concern_error

LOG = logging.getLogger("idxmongo")

# Commands that never touch the document store run without the store lock.
UNLOCKED_COMMANDS = {"getMore", "killCursors", "hello", "isMaster", "ismaster", "ping", "buildInfo", "buildinfo",
                     "saslStart", "saslContinue", "configureFailPoint", "logout", "getLastError", "getlasterror",
                     "whatsmyuri"}
# Commands with their own opcounter; all others count under opcounters.command.
OPCOUNTED_COMMANDS = {"find", "getMore", "insert", "update", "delete"}
REAP_INTERVAL_SECONDS = 1.0


# maxWireVersion of each mongod version the server can announce (mongo/db/wire_version.h)
WIRE_VERSIONS = {"6.0": 17, "7.0": 21, "8.0": 25}


class Connection:
    """One client connection and its per-connection state (authentication, SASL, appName)."""

    def __init__(self, sock, conn_id, peer, member):
        self.sock = sock
        self.member = member  # the replica-set member (repl.Member) whose port the client connected to
        self.id = conn_id
        self.peer = peer
        self.user = None
        self.sasl = None
        self.app_name = None
        self.op_time = None  # cluster time of the current command's last write


class Server:
    """A MongoDB-wire-compatible server over an in-memory indexed store, journaled to `dbpath` if given."""

    def __init__(self, host="127.0.0.1", port=0, user=None, password=None, txn_lifetime=60.0, dbpath=None,
                 change_history=None, bulk_write=False, version="6.0", members=1, majority_lag_ms=0.0,
                 secondary_lag_ms=0.0, election_timeout_ms=10000.0):
        self.host = host
        self.port = port
        if members > 1 and dbpath:
            raise RuntimeError("--members above 1 cannot be combined with --dbpath (rollback is not journaled)")
        self.lock = threading.RLock()
        self.store = Store()
        self.clock = ClusterClock()
        # change streams' history (changelog.py), kept to the last `change_history` entries
        self.changelog = ChangeLog(self.clock.current(), change_history or DEFAULT_LIMIT)
        self.journal = None
        if dbpath:
            self.journal = Journal(dbpath)
            self.journal.load(self.store, DurableHistory(self.changelog, self.clock))
        self.txns = TransactionManager(self.store, self.lock, txn_lifetime)
        self.retryable = RetryableWrites(self.txns, self.journal.sessions if self.journal else None)
        self.cursors = CursorRegistry()
        self.noop_interval = 10.0  # --periodic-noop-secs: mongod's periodicNoopIntervalSecs
        self.failpoints = FailPoints()
        self.users = Users()  # users and roles (authz.py); checked only with --user
        self.auth = Authenticator(self.users, user, password) if user else None
        self.counters = collections.Counter()
        self.commands = dict(cmd_crud.COMMANDS)
        self.commands.update(cmd_admin.COMMANDS)
        self.commands.update(sharding.COMMANDS)
        self.commands.update(limits.COMMANDS)
        self.commands.update(cmd_users.COMMANDS)
        self.txn_size_limit = None  # --txn-size-limit: bytes a transaction may write (limits.py)
        self.commands["recentCommands"] = cmd_recent_commands
        self.commands["commandCpu"] = cmd_command_cpu
        # the mongod version announced (--server-version: buildInfo, serverStatus, hello's
        # maxWireVersion) and what depends on it: mongod 7.0's $changeStreamSplitLargeEvent
        # (changesplit.py); mongod 8.0's bulkWrite only when asked (--bulk-write, which announces 8.0)
        if version not in WIRE_VERSIONS:
            raise RuntimeError("unknown server version %s (known: %s)" % (version, ", ".join(sorted(WIRE_VERSIONS))))
        if bulk_write and version < "8.0":
            version = "8.0"
        self.version = tuple(int(part) for part in version.split("."))
        self.max_wire_version = WIRE_VERSIONS[version]
        if bulk_write:
            self.commands.update(bulkwrite.COMMANDS)
        self.cmdlog = CommandLog()
        self.cmdcpu = CommandCpu()
        self.started = time.time()
        self.profiler = None  # profiling.Profiler (IDXMONGO_PROFILE), set by mongo_test_server.py
        self.stop_event = threading.Event()
        self.conns_lock = threading.Lock()
        self.conns = {}
        self.total_conns = 0
        self.listeners = []
        # the replica set (repl.py): one member per port, member 0 on `port` and primary at start
        self.repl = ReplicaSet(self, host, [port] * max(1, members), majority_lag_ms, secondary_lag_ms,
                               election_timeout_ms)

    def listen(self):
        """Bind and listen, one socket per member (on `port`, then the next ports; with port 0 the OS picks
        each), so `self.port` and the members' ports then hold them."""
        for member in self.repl.members:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((self.host, self.port + member.index if self.port else 0))
            sock.listen(128)
            member.port = sock.getsockname()[1]
            self.listeners.append(sock)
        self.port = self.repl.members[0].port

    def serve_forever(self):
        """Accept connections (one thread each) until `stop_event` is set, then close everything."""
        reaper = threading.Thread(target=self._reap_loop, name="reaper", daemon=True)
        reaper.start()
        try:
            while not self.stop_event.is_set():
                ready, _, _ = select.select(self.listeners, [], [], 0.2)
                for listener in ready:
                    try:
                        sock, peer = listener.accept()
                    except OSError:
                        continue
                    sock.settimeout(None)
                    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                    with self.conns_lock:
                        self.total_conns += 1
                        conn = Connection(sock, self.total_conns, peer,
                                          self.repl.member_at(listener.getsockname()[1]))
                        self.conns[conn.id] = conn
                    threading.Thread(target=self._serve_connection, args=(conn,), daemon=True).start()
        finally:
            for listener in self.listeners:
                listener.close()
            with self.conns_lock:
                for conn in list(self.conns.values()):
                    with contextlib.suppress(OSError):
                        conn.sock.shutdown(socket.SHUT_RDWR)

    def connections_current(self):
        """Number of open client connections."""
        with self.conns_lock:
            return len(self.conns)

    def connections_total(self):
        """Number of connections accepted since start."""
        with self.conns_lock:
            return self.total_conns

    def _reap_loop(self):
        """Abort transactions idle past their lifetime and close idle cursors, once a second."""
        while not self.stop_event.wait(min(REAP_INTERVAL_SECONDS, self.noop_interval / 2)):
            with self.lock:
                self.txns.reap()
                self._periodic_noop()
            self.cursors.reap()

    def _periodic_noop(self):
        """mongod's periodic no-op oplog entry (repl/noop_writer.cpp): when nothing was written for
        --periodic-noop-secs, an entry no stream returns, so idle streams' postBatchResumeToken moves on
        (store lock held, so it is ordered with the writes)."""
        now = time.monotonic()
        if now - self.changelog.last_write < self.noop_interval:
            return
        entry = changestream.noop_entry()
        entry.stamp(self.clock.tick(), changelog_wall())
        if self.journal is not None:
            self.journal.write([], [entry], entry.ts)
        self.changelog.publish([entry], now)
        self.repl.note_optime(entry.ts)

    def _serve_connection(self, conn):
        """Read requests and answer them until the client leaves (or a failpoint closes the socket)."""
        serve_requests(conn.sock, lambda request: self.dispatch(conn, request), "connection %d" % conn.id)
        with self.conns_lock:
            self.conns.pop(conn.id, None)

    def dispatch(self, conn, request):
        """Run one command and return its reply document (raises CloseConnection for failpoints)."""
        if self.profiler is not None:
            self.profiler.before_request()
        cmd = request.command
        name = next(iter(cmd), "")
        started = time.monotonic()
        cpu_started = time.thread_time()
        error = None
        conn.op_time = None
        self.clock.advance(cmd.get("$clusterTime"))
        self.cmdlog.record(conn, request.db, name, cmd)
        try:
            if request.oversize:
                raise limits.too_large_in_message(request.oversize)
            reply = self._dispatch(conn, request.db, name, cmd, request.sequences)
            self._wait_write_concern(conn, name, cmd, reply)
            add_write_concern_error(name, cmd, reply, len(self.repl.members))
            reply = add_error_labels(name, cmd, reply)
        except MongoError as exc:
            reply = self._labelled(exc, name, cmd).to_reply()
            if not exc.fixed_labels:
                add_error_labels(name, cmd, reply)
                changestream.add_labels(name, cmd, reply)
        self.clock.stamp(reply, conn.op_time)
        self.cmdcpu.add(conn.app_name, name, time.thread_time() - cpu_started)
        if reply.get("ok") != 1.0:
            error = "%s %s" % (reply.get("code"), reply.get("errmsg"))
        elif reply.get("writeErrors"):
            error = "writeErrors %s" % [e["code"] for e in reply["writeErrors"]]
        LOG.debug("cmd=%s db=%s conn=%d ms=%.2f%s%s", name, request.db, conn.id,
                  (time.monotonic() - started) * 1000, " error=%s" % error if error else "",
                  " readPreference=%s" % cmd["$readPreference"].get("mode")
                  if isinstance(cmd.get("$readPreference"), dict) else "")
        return reply

    def _wait_write_concern(self, conn, name, cmd, reply):
        """Wait (store lock released) until the command's writes satisfy its write concern on this
        replica set (repl.py); a writeConcernError in the reply when they do not in time."""
        if name not in WRITE_CONCERN_COMMANDS or reply.get("ok") != 1.0 or "writeConcernError" in reply:
            return
        if cmd.get("autocommit") is False and name not in cmd_admin.TXN_CONTROL_COMMANDS:
            return
        error = self.repl.wait_write_concern(conn.member, conn.op_time, cmd.get("writeConcern"))
        if error is not None:
            reply["writeConcernError"] = error

    @staticmethod
    def _labelled(exc, name, cmd):
        """The error with mongod's TransientTransactionError label decided as db/error_labels.cpp does:
        only on a statement of a transaction (txnNumber and autocommit present), by error code. Labels a
        failCommand failpoint gave replace the computed ones, as on mongod."""
        if getattr(exc, "fixed_labels", False):
            return exc
        labels = [label for label in exc.labels if label != TRANSIENT]
        in_txn = cmd.get("txnNumber") is not None and cmd.get("autocommit") is not None
        has_wc_error = "writeConcernError" in exc.extra
        if in_txn and txnrules.is_transient(exc.code, name in txnrules.COMMIT_OR_ABORT, has_wc_error):
            labels.insert(0, TRANSIENT)
        exc.labels = labels
        return exc

    def _dispatch(self, conn, db, name, cmd, sequences=()):
        """Command lookup, authentication and privileges, session options, failpoint, transaction rules
        and binding, execution."""
        handler = self.commands.get(name)
        if handler is None:
            raise MongoError(59, "no such command: '%s'" % name)
        needs = []
        if self.auth is not None:
            if conn.user is None and name not in cmd_admin.NO_AUTH_COMMANDS:
                raise MongoError(13, "command %s requires authentication" % name)
            if name == "getMore":
                authz_cmds.check_get_more(self, conn, cmd)
            elif conn.user is not None:
                needs = authz_cmds.check(self, conn, db, name, cmd, sequences)
        in_txn = txnrules.check_session_options(cmd)
        self.repl.check_command(conn.member, name, cmd, in_txn)
        failure = self.failpoints.check(name, conn.app_name)
        if failure is not None:
            self._fail_before(failure, name)
        txnrules.check_in_transaction(name, db, cmd, in_txn)
        txnrules.check_cluster_time(cmd.get("readConcern"), self.clock.current())
        if name not in OPCOUNTED_COMMANDS:
            self.counters["command"] += 1
        ctx = Context(self, conn, db, name, cmd, self._transaction_for(name, cmd))
        if ctx.txn is None and name not in UNLOCKED_COMMANDS:
            self.repl.wait_read_concern(conn.member, cmd, ctx.deadline())
            ctx.read_at = self.repl.read_point(conn.member, cmd)
        lock = contextlib.nullcontext() if name in UNLOCKED_COMMANDS else self.lock
        with lock:
            if lock is self.lock:  # a stepdown while the command waited for the lock
                self.repl.check_command(conn.member, name, cmd, in_txn)
            try:
                if shard_version.carries_version(name, cmd):
                    self._check_shard_version(ctx)
                ctx.retry = self.retryable.begin(ctx)
                if name == "getMore":
                    self.repl.check_get_more(conn.member, self.cursors, cmd)
                reply = self._execute(ctx, handler)
                self.repl.note_cursor(conn.member, self.cursors, reply)
                if self.auth is not None:
                    authz_cmds.note_cursor(self, conn, reply, needs)
                if failure is not None:
                    failure.add_write_concern_error(reply)
                return ctx.retry.annotate(reply) if ctx.retry is not None else reply
            finally:
                if ctx.retry is not None:
                    ctx.retry.journal(ctx)
                if self.journal is not None and (ctx.changes or ctx.events):
                    self.journal.write(ctx.changes, ctx.events, self.clock.current())
                if ctx.events:
                    self.changelog.publish(ctx.events, time.monotonic())
                self.repl.note_optime(conn.op_time)
                if failure is not None and failure.kill == "after":
                    self._kill(name, failure.kill)
                if (failure is not None and failure.close_after) or ctx.close_connection:
                    raise CloseConnection()  # ctx.close_connection: onPrimaryTransactionalWrite

    def _check_shard_version(self, ctx):
        """A shard of a cluster refuses a command routed with a stale shardVersion (shard_version.py);
        its transaction, if any, is aborted, as any failed statement's is."""
        try:
            shard_version.check(self, ctx.db, ctx.name, ctx.cmd, ctx.txn)
        except MongoError:
            self._abort_on_error(ctx)
            raise

    def _fail_before(self, failure, name):
        """Apply a triggered failCommand before the command runs: block, then exit the process
        (killServer "before"), close the connection or raise the error. With killServer "after" or
        closeConnection "after" the command runs (errorCode is ignored) and _dispatch acts afterwards."""
        if failure.block_seconds:
            time.sleep(failure.block_seconds)
        if failure.kill == "before":
            self._kill(name, failure.kill)
        if failure.kill is not None or failure.close_after:
            return
        if failure.close_connection:
            raise CloseConnection()
        error = failure.error()
        if error is not None:
            raise error

    @staticmethod
    def _kill(name, moment):
        """failCommand killServer: end the process at once, like SIGKILL (no reply, no cleanup; the journal
        already holds every acknowledged change)."""
        LOG.debug("failCommand killServer %s %s: exiting", moment, name)
        for handler in LOG.handlers:  # the log, unlike the process, ends in order
            handler.close()
        os._exit(KILL_EXIT_STATUS)

    def _transaction_for(self, name, cmd):
        """The transaction a command belongs to (starting it if asked), or None for ordinary commands.

        Retryable writes carry txnNumber without `autocommit`: those are not transactions.
        """
        if cmd.get("autocommit", True) is not False or name in cmd_admin.TXN_CONTROL_COMMANDS:
            return None
        session_key = bytes(cmd["lsid"]["id"])  # check_session_options made sure of lsid and txnNumber
        number = cmd["txnNumber"]
        self.retryable.check_transaction(session_key, number, bool(cmd.get("startTransaction")))
        if cmd.get("startTransaction"):
            txn = self.txns.start(session_key, number, (cmd.get("readConcern") or {}).get("level", "local"))
            self.counters["totalStarted"] += 1
            return txn
        return self.txns.lookup(session_key, number)

    def _execute(self, ctx, handler):
        """Run the handler. Inside a transaction any error aborts it; a write error is returned as mongod's
        write_ops_exec.cpp handleError does: a transient one (WriteConflict...) as a command error, any
        other as the only entry of `writeErrors` in an ok:1 reply (the batch stops there, ordered or not)."""
        try:
            reply = handler(ctx)
        except MongoError:
            self._abort_on_error(ctx)
            raise
        except Exception as exc:  # mongomock failures and anything unexpected become ok:0 replies
            LOG.debug("command %s failed: %s", ctx.name, traceback.format_exc())
            self._abort_on_error(ctx)
            raise from_mongomock(exc) from exc
        finally:
            self.counters["scanned"] += ctx.stats.keys
            self.counters["scannedObjects"] += ctx.stats.docs
        if reply.get("writeErrors") and ctx.txn is not None:
            self._abort_on_error(ctx)
            first = dict(reply["writeErrors"][0])
            if txnrules.is_transient(first["code"], False):
                first.pop("index", None)
                code, errmsg = first.pop("code"), first.pop("errmsg")
                raise MongoError(code, errmsg, extra=first)
            reply["writeErrors"] = [first]
        return reply

    def abort_on_error(self, ctx):
        """Abort the command's transaction after a failure (for handlers that report errors themselves)."""
        self._abort_on_error(ctx)

    def _abort_on_error(self, ctx):
        """Abort the command's transaction after a failure."""
        if ctx.txn is not None and ctx.txn.state == "active":
            with self.lock:
                self.txns.abort(ctx.txn)
            self.counters["totalAborted"] += 1

    def stop(self):
        """Ask serve_forever to return."""
        self.stop_event.set()


class _BatchedFileHandler(logging.FileHandler):
    """A file handler that flushes every LOG_FLUSH_SECS, not after each record: a flush per command was
    about 5% of the server's CPU under the differential test. Records of a server killed with SIGKILL
    may be lost for the last interval; an exiting server flushes (logging's shutdown at exit)."""

    def flush(self):
        """Nothing per record; the flusher thread calls flush_now."""

    def flush_now(self):
        """Write what the stream buffered."""
        with self.lock:
            if self.stream is not None and not self.stream.closed:
                self.stream.flush()

    def close(self):
        """Flush, then close as FileHandler does."""
        self.flush_now()
        super().close()


LOG_FLUSH_SECS = 0.2


def _flush_log_forever(handler):
    """The log's flusher thread."""
    while True:
        time.sleep(LOG_FLUSH_SECS)
        handler.flush_now()


def configure_logging(path):
    """Debug-level command log to `path` (nothing is logged without it)."""
    LOG.setLevel(logging.DEBUG if path else logging.CRITICAL)
    if path:
        handler = _BatchedFileHandler(path)
        handler.setFormatter(logging.Formatter("%(asctime)s %(threadName)s %(message)s"))
        LOG.addHandler(handler)
        threading.Thread(target=_flush_log_forever, args=(handler,), name="log-flusher", daemon=True).start()
    LOG.propagate = False


def write_port_file(path, ports):
    """Write the port (of each member, one a line) atomically, so a reader never sees a partial file."""
    tmp = "%s.tmp.%d" % (path, os.getpid())
    with open(tmp, "w") as f:
        f.write("".join("%d\n" % port for port in ports))
    os.replace(tmp, path)
