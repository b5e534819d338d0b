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

Two of the config server's test-only fail points, which MongoDB's own sharding tests set to make
migrations frequent, are emulated (set with configureFailPoint on any router, since this cluster has
no config server of its own to send them to; `--balancer-random-migrations` sets the first at start):
- balancerShouldReturnRandomMigrations (s/balancer/balancer_policy.cpp): instead of balancing, each
  round chooses for each collection a random donor among the shards that own chunks of it and are not
  yet in a migration of this round, a random recipient among the other free shards, and a random chunk
  of the donor; the two shards then take no other migration in that round;
- overrideBalanceRoundInterval {data: {intervalMs}} (s/balancer/balancer.cpp): the time between two
  rounds, instead of the interval the cluster started with.
"""

import logging
import random
import threading
import time

from bson.int64 import Int64

from .errors import MongoError

LOG = logging.getLogger("idxmongo")
DEFAULT_INTERVAL = 10.0
RANDOM_MIGRATIONS_FAIL_POINT = "balancerShouldReturnRandomMigrations"
ROUND_INTERVAL_FAIL_POINT = "overrideBalanceRoundInterval"
FAIL_POINTS = (RANDOM_MIGRATIONS_FAIL_POINT, ROUND_INTERVAL_FAIL_POINT)


def threshold(chunks):
    """The migration threshold for a collection of this many chunks (5.0/6.0's chunk-count rule)."""
    if chunks < 20:
        return 2
    if chunks < 80:
        return 4
    return 8


class Balancer:
    """The balancer of a cluster: its mode, its round counter and its thread."""

    def __init__(self, cluster, interval=DEFAULT_INTERVAL, random_migrations=False):
        self.cluster = cluster
        self.interval = interval if interval > 0 else DEFAULT_INTERVAL
        self.interval_override = None  # overrideBalanceRoundInterval, in seconds
        self.random_migrations = random_migrations  # balancerShouldReturnRandomMigrations
        self.rng = random.Random()
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

    def configure_fail_point(self, cmd):
        """configureFailPoint of one of the config server's balancer fail points (FAIL_POINTS; mode
        "alwaysOn" or "off"; overrideBalanceRoundInterval takes data {intervalMs})."""
        name, mode = cmd.get("configureFailPoint"), cmd.get("mode")
        if mode not in ("alwaysOn", "off"):
            raise MongoError(2, "mode must be alwaysOn or off for %s" % name)
        on = mode == "alwaysOn"
        if name == RANDOM_MIGRATIONS_FAIL_POINT:
            self.random_migrations = on
        else:
            interval = (cmd.get("data") or {}).get("intervalMs") if on else None
            if on and (isinstance(interval, bool) or not isinstance(interval, (int, float)) or interval <= 0):
                raise MongoError(2, "%s needs data {intervalMs: a positive number}" % name)
            self.interval_override = interval / 1000.0 if on else None
        self.wake.set()
        return {"count": 0, "ok": 1.0}

    def run(self, stop_event):
        """The balancer's thread: a round every interval while enabled, until the cluster stops."""
        while not stop_event.is_set():
            self.wake.wait(self.interval if self.interval_override is None else self.interval_override)
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
            if self.random_migrations:
                self.rng.shuffle(entries)  # every collection gets its turn at the free shards
            for entry in entries:
                if not self.enabled:
                    break
                self._balance(entry, busy)
            self.rounds += 1
        finally:
            self.in_round = False

    def _choose(self, entry, busy):
        """(chunk, recipient) of the migration a round makes of a collection, or None: by the chunk-count
        threshold, or at random under balancerShouldReturnRandomMigrations."""
        free = [index for index in range(len(self.cluster.shards)) if index not in busy]
        if len(free) < 2:
            return None
        if self.random_migrations:
            donors = sorted({c.shard for c in entry.chunks if c.shard in free})
            if not donors:
                return None
            donor = self.rng.choice(donors)
            recipient = self.rng.choice([index for index in free if index != donor])
            return self.rng.choice([c for c in entry.chunks if c.shard == donor]), recipient
        counts = {index: 0 for index in free}
        for chunk in entry.chunks:
            if chunk.shard in counts:
                counts[chunk.shard] += 1
        donor = max(counts, key=lambda i: (counts[i], -i))
        recipient = min(counts, key=lambda i: (counts[i], i))
        if counts[donor] - counts[recipient] < threshold(len(entry.chunks)):
            return None
        return next(c for c in entry.chunks if c.shard == donor), recipient

    def _balance(self, entry, busy):
        """Make the migration _choose() picks for a collection, if any."""
        from .router_admin import move_chunk
        cluster = self.cluster
        with cluster.config_lock:
            if cluster.routing.collections.get(entry.ns) is not entry:
                return  # dropped meanwhile
            choice = self._choose(entry, busy)
            if choice is None:
                return
            chunk, recipient = choice
            donor = chunk.shard
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
