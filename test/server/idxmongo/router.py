"""A mongos router of a cluster (cluster.py): its connections, its clock, its cursors and how it sends a
command to shards.

What runs on the router itself: hello (a mongos's: `msg: "isdbgrid"`, no replica set), ping, buildInfo,
authentication (the SCRAM conversation is held with the primary shard, which has the users), privileges
(checked as the primary shard would, before anything is sent), failCommand (`configureFailPoint` on a
router sets the router's, as on mongos), getMore and killCursors of its own cursors, the sharding
commands (router_admin.py), change streams (router_stream.py), transactions (router_txn.py) and the
explain of reads (router_explain.py).
Everything else is sent to shards (router_crud.py): to the primary shard for an unsharded collection, to
the targeted shards for a sharded one.

Every command a router sends a shard carries the router's `$clusterTime`, and the shard's reply moves the
router's clock; so shards and routers learn each other's times only through the commands between them.
"""

import contextlib
import datetime
import logging
import os
import random
import socket
import threading
import time

from bson.int64 import Int64

from . import authz_cmds, cmd_admin, limits
from .clusterclock import ZERO_SIGNATURE, ClusterClock
from .errors import CloseConnection, MongoError
from .failpoints import FailPoints
from .retry import add_error_labels
from .shard_version import RouterCache, attach, stale_namespace
from .wire import OP_MSG, Request, serve_requests

LOG = logging.getLogger("idxmongo")

LOCAL_COMMANDS = {"hello", "isMaster", "ismaster", "ping", "buildInfo", "buildinfo", "whatsmyuri",
                  "configureFailPoint", "logout", "getLastError", "getlasterror"}


class RouterConnection:
    """A client's connection to a router, and its connections (links) to each shard."""

    def __init__(self, router, sock, conn_id, peer):
        self.router = router
        self.sock = sock
        self.id = conn_id
        self.peer = peer
        self.app_name = None
        self.op_time = None  # the latest operationTime of the shards the current command reached
        self.targeting = {}  # ns -> the routing entry the current command was targeted with
        self.links = {}

    def link(self, index):
        """The router's connection to shard `index` on behalf of this client (made on first use)."""
        link = self.links.get(index)
        if link is None:
            from .server import Connection
            shard = self.router.cluster.shards[index]
            with shard.conns_lock:
                shard.total_conns += 1
                link = Connection(None, shard.total_conns, self.peer, shard.repl.members[0])
            self.links[index] = link
        link.app_name = self.app_name
        return link

    @property
    def user(self):
        """The authenticated user (held by the link to the primary shard, where the users are)."""
        link = self.links.get(0)
        return link.user if link is not None else None


class ForwardedCursor:
    """A cursor of one shard, handed to the client under the router's id."""

    def __init__(self, shard, shard_id, ns):
        self.shard = shard
        self.shard_id = shard_id
        self.ns = ns
        self.last_used = time.monotonic()


class Router:
    """One mongos."""

    def __init__(self, cluster, index, host):
        self.cluster = cluster
        self.index = index
        self.host = host
        self.port = 0
        self.clock = ClusterClock()
        self.failpoints = FailPoints()
        self.cursors = {}
        self.cursors_lock = threading.Lock()
        self.txns = {}  # (lsid bytes, txnNumber) -> router_txn.RouterTransaction
        self.txns_lock = threading.Lock()
        self.cache = RouterCache(cluster)  # the routing information this router has learnt
        self.stale_retries_in_transactions = False  # mongos's test-only fail point (router_admin.py)
        self.conns = {}
        self.conns_lock = threading.Lock()
        self.total_conns = 0
        self.started = time.time()
        from . import balancer, router_admin, router_crud, router_explain, router_stream, router_txn
        self.commands = dict(router_crud.COMMANDS)
        self.commands.update(balancer.COMMANDS)
        self.commands.update(router_admin.COMMANDS)
        self.commands.update(router_explain.COMMANDS)
        self.commands.update(router_stream.COMMANDS)
        self.commands.update(router_txn.COMMANDS)

    @property
    def name(self):
        """host:port."""
        return "%s:%d" % (self.host, self.port)

    # --- connections ------------------------------------------------------------------------------------

    def accept(self, sock, peer):
        """Serve a new client connection on a thread of its own."""
        sock.settimeout(None)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with self.conns_lock:
            self.total_conns += 1
            conn = RouterConnection(self, sock, self.total_conns, peer)
            self.conns[conn.id] = conn
        threading.Thread(target=self._serve_connection, args=(conn,), daemon=True).start()

    def close_all(self):
        """Shut every client connection down."""
        with self.conns_lock:
            for conn in list(self.conns.values()):
                with contextlib.suppress(OSError):
                    conn.sock.shutdown(socket.SHUT_RDWR)

    def _serve_connection(self, conn):
        """Read requests and answer them until the client leaves."""
        serve_requests(conn.sock, lambda request: self.dispatch(conn, request),
                       "router %d connection %d" % (self.index, conn.id))
        with self.conns_lock:
            self.conns.pop(conn.id, None)

    # --- commands ---------------------------------------------------------------------------------------

    def dispatch(self, conn, request):
        """Run one command; the reply carries the router's clock."""
        cmd = request.command
        name = next(iter(cmd), "")
        started = time.monotonic()
        conn.op_time = None
        conn.targeting = {}
        self.clock.advance(cmd.get("$clusterTime"))
        try:
            if request.oversize:
                raise limits.too_large_in_message(request.oversize)
            reply = self._dispatch(conn, request.db, name, cmd)
        except MongoError as exc:
            reply = exc.to_reply()
            if not exc.fixed_labels:
                add_error_labels(name, cmd, reply)
        reply.pop("$clusterTime", None)
        reply.pop("operationTime", None)
        self.clock.stamp(reply, conn.op_time)
        LOG.debug("router=%d cmd=%s db=%s conn=%d ms=%.2f%s", self.index, name, request.db, conn.id,
                  (time.monotonic() - started) * 1000,
                  "" if reply.get("ok") == 1.0 else " error=%s %s" % (reply.get("code"), reply.get("errmsg")))
        return reply

    def _dispatch(self, conn, db, name, cmd):
        """Authentication, privileges, failpoints, then the command's handler (local or sent on)."""
        primary = self.cluster.primary
        if name in ("saslStart", "saslContinue", "connectionStatus", "logout"):
            return self.strip(self.send(conn, 0, db, cmd))
        if primary.auth is not None and name not in cmd_admin.NO_AUTH_COMMANDS:
            if conn.user is None:
                raise MongoError(13, "command %s requires authentication" % name)
            if name not in ("getMore", "killCursors"):
                authz_cmds.check(primary, conn.link(0), db, name, cmd, ())
        if name != "configureFailPoint":
            failure = self.failpoints.check(name, conn.app_name)
            if failure is not None:
                self._fail_before(failure)
        handler = self.commands.get(name)
        if handler is not None:
            return handler(self, conn, db, cmd)
        from . import router_crud
        return router_crud.forward(self, conn, db, name, cmd)

    @staticmethod
    def _fail_before(failure):
        """A failCommand of the router: block, close the connection or fail the command."""
        if failure.block_seconds:
            time.sleep(failure.block_seconds)
        if failure.close_connection or failure.close_after:
            raise CloseConnection()
        error = failure.error()
        if error is not None:
            raise error

    def send(self, conn, index, db, cmd, cluster_time=None, versioned=True):
        """Run a command on shard `index` for this client, with the router's cluster time (or the one
        given); the shard's reply moves the router's clock and the command's operationTime. A statement
        of a transaction starts it on a shard it has not reached yet (router_txn.py). A versioned command
        carries the shardVersion of the router's cache; a StaleConfig reply refreshes the cache
        (shard_version.py), and the caller retries."""
        from . import router_txn
        shard = self.cluster.shards[index]
        sent = dict(router_txn.shape(self, index, attach(self, conn, index, db, cmd) if versioned else cmd))
        sent["$clusterTime"] = {"clusterTime": cluster_time or self.clock.current(),
                                "signature": dict(ZERO_SIGNATURE)}
        sent.pop("$readPreference", None)
        reply = shard.dispatch(conn.link(index), Request(0, OP_MSG, db, sent))
        self.clock.advance(reply.get("$clusterTime"))
        stale = stale_namespace(db, cmd, reply)
        if stale is not None:  # the shard says this router's routing information is stale
            self.cache.stale_errors += 1
            self.cache.refresh(stale)
        op_time = reply.get("operationTime")
        if op_time is not None and (conn.op_time is None or op_time > conn.op_time):
            conn.op_time = op_time
        return reply

    @staticmethod
    def strip(reply):
        """A shard's reply without its clock fields (the router puts its own)."""
        reply = dict(reply)
        reply.pop("$clusterTime", None)
        reply.pop("operationTime", None)
        return reply

    # --- cursors ----------------------------------------------------------------------------------------

    def register(self, cursor):
        """A router id for a cursor."""
        with self.cursors_lock:
            while True:
                cursor_id = random.randint(1, 2 ** 63 - 1)
                if cursor_id not in self.cursors:
                    break
            cursor.id = cursor_id
            cursor.last_used = time.monotonic()
            self.cursors[cursor_id] = cursor
        return cursor_id

    def lookup(self, cursor_id):
        """The cursor of an id; CursorNotFound (43) when there is none."""
        with self.cursors_lock:
            cursor = self.cursors.get(int(cursor_id))
        if cursor is None:
            raise MongoError(43, "cursor id %d not found" % cursor_id)
        cursor.last_used = time.monotonic()
        return cursor

    def forget(self, cursor_id):
        """Drop a cursor of the router's table (returns it, or None)."""
        with self.cursors_lock:
            return self.cursors.pop(int(cursor_id), None)

    def forwarded_cursor(self, conn, index, reply):
        """A shard's cursor reply with the shard's cursor id replaced by a router id."""
        cursor = reply.get("cursor") if isinstance(reply, dict) else None
        if not isinstance(cursor, dict) or not cursor.get("id"):
            return reply
        cursor = dict(cursor)
        cursor["id"] = Int64(self.register(ForwardedCursor(index, cursor["id"], cursor.get("ns"))))
        reply = dict(reply)
        reply["cursor"] = cursor
        return reply

    # --- what the router says about itself ---------------------------------------------------------------

    def hello(self, conn, cmd):
        """A mongos's hello."""
        client = cmd.get("client")
        if isinstance(client, dict):
            conn.app_name = (client.get("application") or {}).get("name")
        primary = self.cluster.primary
        reply = {"ismaster": True, "isWritablePrimary": True, "helloOk": True, "msg": "isdbgrid",
                 "maxBsonObjectSize": 16777216, "maxMessageSizeBytes": 48000000, "maxWriteBatchSize": 100000,
                 "localTime": datetime.datetime.utcnow(), "logicalSessionTimeoutMinutes": 30,
                 "connectionId": conn.id, "minWireVersion": 0, "maxWireVersion": primary.max_wire_version,
                 "readOnly": False}
        mech_user = cmd.get("saslSupportedMechs")
        if primary.auth is not None and isinstance(mech_user, str):
            mechs = primary.auth.mechanisms_for(mech_user)
            if mechs:
                reply["saslSupportedMechs"] = mechs
        reply["ok"] = 1.0
        return reply

    def server_status(self):
        """serverStatus of a mongos: its own connections and cursors; the shards' counters summed (a test
        server's convenience; mongos reports its own opcounters) and per shard under `shards`."""
        totals = {}
        per_shard = {}
        for shard in self.cluster.shards:
            counters = shard.counters
            per_shard[shard.shard_name] = {
                "opcounters": {k: Int64(counters[k]) for k in ("insert", "query", "update", "delete", "getmore",
                                                                "command")},
                "metrics": {"queryExecutor": {k: Int64(counters[k]) for k in ("scanned", "scannedObjects")}},
                "transactions": {k: Int64(counters[k]) for k in ("totalStarted", "totalCommitted",
                                                                  "totalAborted")},
                "shardingStatistics": {"countStaleConfigErrors": Int64(counters["countStaleConfigErrors"])},
            }
            for key, value in counters.items():
                totals[key] = totals.get(key, 0) + value
        uptime = time.time() - self.started
        with self.conns_lock:
            current = len(self.conns)
        return {
            "host": self.name, "version": cmd_admin.version_string(self.cluster.primary), "process": "mongos",
            "pid": Int64(os.getpid()), "uptime": float(int(uptime)), "uptimeMillis": Int64(int(uptime * 1000)),
            "localTime": datetime.datetime.utcnow(),
            "connections": {"current": current, "available": 1000, "totalCreated": self.total_conns, "active": 1},
            "opcounters": {k: Int64(totals.get(k, 0)) for k in ("insert", "query", "update", "delete", "getmore",
                                                                  "command")},
            "metrics": {"queryExecutor": {k: Int64(totals.get(k, 0)) for k in ("scanned", "scannedObjects")},
                        "cursor": {"open": {"total": Int64(len(self.cursors))}}},
            "transactions": {k: Int64(totals.get(k, 0)) for k in ("totalStarted", "totalCommitted",
                                                                   "totalAborted")},
            "shards": per_shard,
            "shardingStatistics": {"catalogCache": {
                "countFullRefreshesStarted": Int64(self.cache.refreshes),
                "countStaleConfigErrors": Int64(self.cache.stale_errors)}},
            "ok": 1.0,
        }
