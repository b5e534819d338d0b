"""The config server's balancer (cluster.py runs it on a thread of its own), and the router commands
that control it: balancerStart, balancerStop, balancerStatus (what mongosh's sh.startBalancer(),
sh.stopBalancer() and sh.isBalancerRunning() send), and the `config.settings` document
{_id: "balancer", mode, stopped} that sh.getBalancerState() reads.

A round every `--balancer-interval-secs` seconds (mongod's balancer sleeps 10 s between rounds when it
has nothing to do). In each round, for each sharded collection not marked noBalance, the balancer
counts the chunks each shard owns; when the most loaded shard has at least the migration threshold
more chunks than the least loaded one, it moves one chunk (the lowest-ranged one of the most loaded
shard) to the least loaded one. The threshold is the chunk-count rule MongoDB documents for 5.0 and
6.0 before 6.0.3 ("Migration Thresholds"): 2 for fewer than 20 chunks, 4 for 20 to 79, 8 for 80 or
more. (6.0.3 and later balance by data size, a difference of three times the range size, 384 MB by
default, which a test's data never reaches; they also merge chunks. Not emulated.) A shard takes part
in at most one migration per round, as on mongod. A move is a migration like moveChunk's
(router_admin.move_chunk): it waits for transactions holding the collection, blocks the two shards'
commands while it commits, makes stale routers retry (shard_version.py) and writes no change event.
A move that fails (LockBusy: transactions held the collection) is left for a later round.

With `--balancer-interval-secs 0` the balancer starts stopped (as after balancerStop); balancerStart
then runs rounds every 10 s.
"""

import logging
import threading
import time

from bson.int64 import Int64

from .errors import MongoError

LOG = logging.getLogger("idxmongo")
DEFAULT_INTERVAL = 10.0


def threshold(chunks):
    """The migration threshold for a collection of this many chunks (5.0/6.0's chunk-count rule)."""
    if chunks < 20:
        return 2
    if chunks < 80:
        return 4
    return 8


class Balancer:
    """The balancer of a cluster: its mode, its round counter and its thread."""

    def __init__(self, cluster, interval=DEFAULT_INTERVAL):
        self.cluster = cluster
        self.interval = interval if interval > 0 else DEFAULT_INTERVAL
        self.enabled = interval > 0
        self.settings_written = interval <= 0  # config.settings holds a document once the mode was set
        self.rounds = 0
        self.in_round = False
        self.moves = 0
        self.wake = threading.Event()

    def settings_doc(self):
        """config.settings {_id: "balancer"}, as balancerStart/balancerStop write it (none before)."""
        if not self.settings_written:
            return []
        return [{"_id": "balancer", "mode": "full" if self.enabled else "off", "stopped": not self.enabled}]

    def set_enabled(self, enabled):
        """balancerStart / balancerStop."""
        self.enabled = enabled
        self.settings_written = True
        self.wake.set()

    def run(self, stop_event):
        """The balancer's thread: a round every interval while enabled, until the cluster stops."""
        while not stop_event.is_set():
            self.wake.wait(self.interval)
            self.wake.clear()
            if stop_event.is_set():
                break
            if self.enabled:
                self.round()

    def round(self):
        """One balancing round: at most one migration per shard."""
        self.in_round = True
        try:
            busy = set()
            routing = self.cluster.routing
            with routing.lock:
                entries = [e for e in routing.collections.values() if not e.no_balance]
            for entry in entries:
                if not self.enabled:
                    break
                self._balance(entry, busy)
            self.rounds += 1
        finally:
            self.in_round = False

    def _balance(self, entry, busy):
        """Move one chunk of a collection if its imbalance reaches the threshold."""
        from .router_admin import move_chunk
        cluster = self.cluster
        with cluster.config_lock:
            if cluster.routing.collections.get(entry.ns) is not entry:
                return  # dropped meanwhile
            counts = {index: 0 for index in range(len(cluster.shards)) if index not in busy}
            for chunk in entry.chunks:
                if chunk.shard in counts:
                    counts[chunk.shard] += 1
            if len(counts) < 2:
                return
            donor = max(counts, key=lambda i: (counts[i], -i))
            recipient = min(counts, key=lambda i: (counts[i], i))
            if counts[donor] - counts[recipient] < threshold(len(entry.chunks)):
                return
            chunk = next(c for c in entry.chunks if c.shard == donor)
            try:
                move_chunk(cluster, entry, chunk, recipient)
            except MongoError as exc:
                LOG.debug("balancer: moving a chunk of %s failed: %s", entry.ns, exc.errmsg)
                return
            self.moves += 1
            busy.update((donor, recipient))
            LOG.debug("balancer: moved a chunk of %s from shard%d to shard%d", entry.ns, donor, recipient)


def _admin_only(db, name):
    """Unauthorized (13) outside admin, as mongos answers."""
    if db != "admin":
        raise MongoError(13, "%s may only be run against the admin database." % name)


def cmd_balancer_start(router, conn, db, cmd):
    """balancerStart (sh.startBalancer)."""
    _admin_only(db, "balancerStart")
    router.cluster.balancer.set_enabled(True)
    return {"ok": 1.0}


def cmd_balancer_stop(router, conn, db, cmd):
    """balancerStop (sh.stopBalancer): no new round starts; it returns once a round in progress ended,
    as mongod's waits for the balancer to stop."""
    _admin_only(db, "balancerStop")
    balancer = router.cluster.balancer
    balancer.set_enabled(False)
    deadline = time.monotonic() + 60
    while balancer.in_round and time.monotonic() < deadline:
        time.sleep(0.01)
    return {"ok": 1.0}


def cmd_balancer_status(router, conn, db, cmd):
    """balancerStatus (sh.isBalancerRunning)."""
    _admin_only(db, "balancerStatus")
    balancer = router.cluster.balancer
    return {"mode": "full" if balancer.enabled else "off", "inBalancerRound": balancer.in_round,
            "numBalancerRounds": Int64(balancer.rounds), "ok": 1.0}


COMMANDS = {"balancerStart": cmd_balancer_start, "balancerStop": cmd_balancer_stop,
            "balancerStatus": cmd_balancer_status}
