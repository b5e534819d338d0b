"""Shard versions, as mongos and mongod check them (s/catalog_cache.cpp, s/chunk_version.h,
db/s/collection_sharding_runtime.cpp, db/s/operation_sharding_state.cpp, s/stale_exception.h).

- The config server's routing table (routing.py, `cluster.routing`) is the truth. Every chunk has a
  version (major, minor) within the collection's epoch: a split bumps the minor of the two halves, a
  migration's commit gives the chunk the next major and bumps one chunk the donor keeps to it too, so the
  versions of both shards change.
- Each router caches the routing information of a namespace the first time it needs it (a copy of the
  collection's chunks, or "unsharded") and keeps it until a shard tells it that it is stale
  (RouterCache). The shards a command reaches and the documents an insert sends where come from that
  cache, never from the config server directly.
- Every versioned command (find, aggregate, count, distinct, insert, update, delete, findAndModify, and
  the explained command of an explain of one) the router sends a shard carries `shardVersion`: the highest version of the chunks the cached routing says
  the shard owns ({e: epoch, t: timestamp, v: Timestamp(major, minor)}), or UNSHARDED (zero epoch and
  version) for a collection the cache holds as unsharded.
- Each shard knows its own filtering metadata for each sharded collection: the epoch and its version
  (`shard.filtering`), set by shardCollection, split, a migration's commit (under both shards' store
  locks, together with the documents' move), drop and rename. A command whose shardVersion differs in
  epoch or major version from the shard's own (a migration moved a chunk to or from it, the collection
  was dropped, sharded or renamed) is refused with StaleConfig (13388) before it runs, with `errInfo`
  {ns, vReceived, vWanted, shardId}, as mongod does; differing minors (splits) are accepted. A migration's
  commit holds both shards' store locks, so a command that arrives meanwhile waits (mongod's critical
  section) and then meets the new version: StaleConfig.
- A statement of a transaction on a collection whose placement on that shard changed after the
  transaction began (on the shard, or on the router: every statement carries the router's
  placementConflictTime, as mongod 8.0's routers send it, so a shard that joins the transaction after
  a migration reached it refuses it too) is refused with StaleConfig too (mongod checks the placement
  at the transaction's snapshot or placementConflictTime; 8.0 answers MigrationConflict), with the
  TransientTransactionError label, and the shard's part aborted.
- On StaleConfig the router refreshes its cache for the namespace and retries (router_crud.py): reads
  and writes outside transactions transparently (a write only for its statements not yet applied). In a
  transaction it does not retry (s/transaction_router.cpp, canContinueOnStaleShardOrDbError: retries
  happen only under the test-only fail point enableStaleVersionAndSnapshotRetriesWithinTransactions,
  off in a production mongos): the router aborts the transaction on every participant and the error
  reaches the client with TransientTransactionError. With that fail point set on a router
  (configureFailPoint, "alwaysOn"), the transaction's first statement is retried (its participants so
  far aborted, each restarted at the same txnNumber, as a shard allows). `flushRouterConfig` makes a
  router forget its cache.

Not emulated: database versions (every database lives on the primary shard and never moves: there is no
movePrimary), the shard's own refresh from the config server (the shard's metadata is set when the
config changes, so it is never behind), placement history for snapshot reads at a cluster time.
"""

import threading
import time

from bson.objectid import ObjectId
from bson.timestamp import Timestamp

from .errors import MongoError

STALE_CONFIG = 13388
PLACEMENT_CONFLICT_TIME = "placementConflictTime"  # the router's time.monotonic() when a transaction began
UNSHARDED_EPOCH = ObjectId("000000000000000000000000")
VERSIONED = {"find", "aggregate", "count", "distinct", "insert", "update", "delete", "findAndModify"}
SYSTEM_DBS = {"admin", "config", "local"}


def encode(epoch, timestamp, version):
    """A ChunkVersion as the wire carries it."""
    return {"e": epoch, "t": timestamp, "v": Timestamp(version[0], version[1])}


UNSHARDED = encode(UNSHARDED_EPOCH, Timestamp(0, 0), (0, 0))


def _decode(doc):
    """(epoch, (major, minor)) of a wire ChunkVersion; BadValue (2) if it is not one."""
    if not isinstance(doc, dict) or not isinstance(doc.get("v"), Timestamp):
        raise MongoError(2, "shardVersion must be a document {e, t, v}")
    return doc.get("e"), (doc["v"].time, doc["v"].inc)


class ShardMetadata:
    """What a shard knows of a sharded collection: epoch, timestamp, its own version, and when its
    placement on this shard last changed (time.monotonic())."""

    def __init__(self, epoch, timestamp, version, changed):
        self.epoch = epoch
        self.timestamp = timestamp
        self.version = version
        self.changed = changed


def publish(cluster, entry, indexes=None, moved=False):
    """Set the filtering metadata of shards `indexes` (every shard when None) from the config server's
    entry of a sharded collection (caller holds those shards' store locks when documents move with it).
    `moved`: the placement changed on those shards (a migration), which transactions begun before must
    not see."""
    now = time.monotonic()
    for index in range(len(cluster.shards)) if indexes is None else indexes:
        shard = cluster.shards[index]
        old = shard.filtering.get(entry.ns)
        changed = now if moved or old is None or old.epoch != entry.epoch else old.changed
        shard.filtering[entry.ns] = ShardMetadata(entry.epoch, entry.timestamp, entry.shard_version(index), changed)


def unpublish(cluster, ns):
    """A dropped (or renamed away) sharded collection: no shard has metadata of it any more."""
    for shard in cluster.shards:
        shard.filtering.pop(ns, None)


def _stale(shard, ns, received, wanted, why):
    """StaleConfig (13388) as a shard answers it."""
    return MongoError(STALE_CONFIG, "%s for %s on %s" % (why, ns, shard.shard_name),
                      extra={"errInfo": {"ns": ns, "vReceived": received, "vWanted": wanted,
                                         "shardId": shard.shard_name}})


def _explained(name, cmd):
    """(name, command) of the command an explain explains; of any other command, themselves."""
    inner = cmd.get("explain") if name == "explain" else None
    if isinstance(inner, dict) and inner:
        return next(iter(inner)), inner
    return name, cmd


def carries_version(name, cmd):
    """Whether a command (or the command an explain explains) carries a shardVersion to check."""
    return "shardVersion" in _explained(name, cmd)[1]


def check(shard, db, name, cmd, txn):
    """On a shard, before a versioned command runs (store lock held): refuse it with StaleConfig when its
    shardVersion is not the shard's own, or when it is a transaction's statement and the collection's
    placement here changed after the transaction began: on this shard, or on the router
    (placementConflictTime, for a shard that joins the transaction after a migration reached it). An
    explain is checked by the version its explained command carries, as mongos sends it."""
    name, cmd = _explained(name, cmd)
    received = cmd.get("shardVersion")
    coll = cmd.get(name)
    if received is None or not isinstance(coll, str) or getattr(shard, "filtering", None) is None:
        return
    ns = "%s.%s" % (db, coll)
    meta = shard.filtering.get(ns)
    wanted = encode(meta.epoch, meta.timestamp, meta.version) if meta is not None else UNSHARDED
    epoch, version = _decode(received)
    if epoch != (meta.epoch if meta is not None else UNSHARDED_EPOCH) or \
            version[0] != (meta.version[0] if meta is not None else 0):
        shard.counters["countStaleConfigErrors"] += 1
        raise _stale(shard, ns, received, wanted, "shard version not ok: the router's routing information is stale")
    if txn is None or meta is None:
        return
    began = txn.started
    conflict = cmd.get(PLACEMENT_CONFLICT_TIME)
    if isinstance(conflict, float) and conflict < began:
        began = conflict
    if meta.changed > began:
        shard.counters["countStaleConfigErrors"] += 1
        raise _stale(shard, ns, received, wanted, "the collection's placement changed after the transaction "
                                                  "began")


class RouterCache:
    """A router's cached routing information, namespace by namespace: a copy of the config server's entry
    (routing.Sharded), or None for an unsharded collection; learnt at first use, refreshed on
    StaleConfig."""

    def __init__(self, cluster):
        self.cluster = cluster
        self.lock = threading.Lock()
        self.entries = {}
        self.refreshes = 0
        self.stale_errors = 0

    def target(self, conn, db, coll):
        """get(), remembered as the entry the connection's current command is targeted with (the
        versions attach() sends)."""
        entry = self.get(db, coll)
        if isinstance(coll, str):
            conn.targeting["%s.%s" % (db, coll)] = entry
        return entry

    def get(self, db, coll):
        """The cached entry of `db.coll` (None: unsharded), loaded from the config server if unknown."""
        if not isinstance(coll, str):
            return None
        ns = "%s.%s" % (db, coll)
        with self.lock:
            if ns in self.entries:
                return self.entries[ns]
        return self.refresh(ns)

    def refresh(self, ns):
        """Read a namespace's routing information from the config server again."""
        routing = self.cluster.routing
        with routing.lock:
            entry = routing.collections.get(ns)
            snapshot = entry.snapshot() if entry is not None else None
        with self.lock:
            self.entries[ns] = snapshot
            self.refreshes += 1
        return snapshot

    def forget(self, ns):
        """Forget one cached namespace (read again at next use)."""
        with self.lock:
            self.entries.pop(ns, None)

    def forget_all(self):
        """Forget every cached namespace."""
        with self.lock:
            self.entries.clear()

    def refresh_db(self, db):
        """Forget every cached namespace of a database (the router dropped it)."""
        with self.lock:
            for ns in [n for n in self.entries if n.startswith(db + ".")]:
                del self.entries[ns]

    def version_for(self, db, coll, index, targeting=None):
        """The shardVersion the router attaches for shard `index`: of the entry the command was targeted
        with (`targeting`, ns -> entry, the connection's), else of the cache (loaded if needed)."""
        ns = "%s.%s" % (db, coll)
        entry = targeting[ns] if targeting is not None and ns in targeting else self.get(db, coll)
        if entry is None:
            return UNSHARDED
        return encode(entry.epoch, entry.timestamp, entry.shard_version(index))


def attach(router, conn, index, db, cmd):
    """The command as sent to shard `index`: a versioned command on a user collection carries the
    shardVersion of the routing entry it was targeted with (unless it already has one); an explain of one
    carries it in the explained command, as mongos sends it (cluster_explain.cpp wraps the versioned
    command)."""
    name = next(iter(cmd), "")
    if name == "explain" and isinstance(cmd.get("explain"), dict):
        inner = attach(router, conn, index, db, cmd["explain"])
        return cmd if inner is cmd["explain"] else dict(cmd, explain=inner)
    coll = cmd.get(name)
    if name not in VERSIONED or db in SYSTEM_DBS or not isinstance(coll, str) or "shardVersion" in cmd:
        return cmd
    pipeline = cmd.get("pipeline") if name == "aggregate" else None
    if isinstance(pipeline, list) and pipeline and isinstance(pipeline[0], dict) and "$changeStream" in pipeline[0]:
        return cmd  # mongos opens a change stream on every shard unversioned (ChunkVersion IGNORED)
    sent = dict(cmd)
    sent["shardVersion"] = router.cache.version_for(db, coll, index, getattr(conn, "targeting", None))
    return sent


def stale_namespace(db, cmd, reply):
    """The namespace a StaleConfig reply is about, or None when the reply is not StaleConfig."""
    if not isinstance(reply, dict) or reply.get("code") != STALE_CONFIG:
        return None
    info = reply.get("errInfo")
    if isinstance(info, dict) and isinstance(info.get("ns"), str):
        return info["ns"]
    name = next(iter(cmd), "")
    return "%s.%s" % (db, cmd.get(name))
