"""A sharded cluster in one process: N shards and R mongos routers (`--shards N --routers R`).

Each shard is a Server of its own (server.py) that listens nowhere: its own store, cluster clock, change
history, transactions, cursors and periodic no-op writer. The first shard is the primary shard of every
database and holds the users (with --user). Each router listens on a port of its own and does what mongos
does with a command (router.py): it checks authentication and privileges, targets the shards that own
the documents (routing.py), sends them the command with its own `$clusterTime` and merges their replies.
A router's clock moves only by gossip: the `$clusterTime` of its clients' requests and of its shards'
replies, as mongos's vector clock does; it answers with that clock, and with the latest `operationTime`
of the shards a command reached (or its own clock when it reached none, as mongos answers a `ping`).
"""

import contextlib
import select
import socket
import threading

from .balancer import Balancer
from .routing import RoutingTable
from .router import Router
from .server import Server


class Cluster:
    """The shards, the routing table they share (the config server's) and the routers."""

    def __init__(self, host="127.0.0.1", port=0, user=None, password=None, shards=2, routers=1,
                 version="6.0", txn_lifetime=60.0, change_history=None, balancer_interval=10.0,
                 random_migrations=False):
        if shards < 1 or routers < 1:
            raise RuntimeError("a cluster needs at least one shard and one router")
        self.host = host
        self.port = port
        self.shards = []
        for index in range(shards):
            shard = Server(host, 0, user if index == 0 else None, password if index == 0 else None,
                           txn_lifetime, None, change_history, False, version)
            shard.shard_name = "shard%d" % index
            shard.shard_index = index
            shard.filtering = {}  # ns -> shard_version.ShardMetadata of the sharded collections
            shard.txns.restart_aborted = True
            self.shards.append(shard)
        self.routing = RoutingTable(self)
        self.config_lock = threading.RLock()  # config changes one at a time (router_admin.py)
        self.balancer = Balancer(self, balancer_interval, random_migrations)
        self.routers = [Router(self, index, host) for index in range(routers)]
        self.stop_event = threading.Event()
        self.listeners = {}

    @property
    def primary(self):
        """The primary shard of every database."""
        return self.shards[0]

    def set_noop_interval(self, seconds):
        """mongod's periodicNoopIntervalSecs on every shard."""
        for shard in self.shards:
            shard.noop_interval = seconds

    def listen(self):
        """One listening socket per router (on `port`, `port`+1, ...; with port 0 the OS picks each)."""
        for router in self.routers:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((self.host, self.port + router.index if self.port else 0))
            sock.listen(128)
            router.port = sock.getsockname()[1]
            self.listeners[sock] = router

    def ports(self):
        """The routers' ports, in order."""
        return [router.port for router in self.routers]

    def serve_forever(self):
        """Run the shards' background work (transaction reaping, no-op writes, cursor timeouts) and accept
        connections on every router until stop() is called."""
        for shard in self.shards:
            threading.Thread(target=shard._reap_loop, name="reaper-%s" % shard.shard_name,
                             daemon=True).start()
        threading.Thread(target=self.balancer.run, args=(self.stop_event,), name="balancer", daemon=True).start()
        try:
            while not self.stop_event.is_set():
                ready, _, _ = select.select(list(self.listeners), [], [], 0.2)
                for listener in ready:
                    with contextlib.suppress(OSError):
                        sock, peer = listener.accept()
                        self.listeners[listener].accept(sock, peer)
        finally:
            for listener in self.listeners:
                listener.close()
            self.balancer.wake.set()
            for shard in self.shards:
                shard.stop_event.set()
            for router in self.routers:
                router.close_all()

    def stop(self):
        """Ask serve_forever to return."""
        self.stop_event.set()
