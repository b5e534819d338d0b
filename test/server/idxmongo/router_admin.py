"""A router's own commands: hello, ping, buildInfo, serverStatus, failpoints, cursors (getMore and
killCursors), sessions, and the sharding commands mongos runs with its config server: enableSharding,
shardCollection, split, moveChunk, listShards, and reads of the `config` database (shards, databases,
collections, chunks), which mongos sends to the config server.

A migration (moveChunk, or the balancer's, balancer.py) first waits until no open transaction on the
donor or the recipient holds the collection (mongod's migration takes collection locks that wait for the
transactions' intent locks; LockBusy (46) after 10 s), then, with both shards' store locks held (mongod's
critical section: commands on either shard wait), copies the chunk's documents to the new owner, deletes
them from the old one, commits the new chunk versions on the config server and sets both shards'
filtering metadata (shard_version.py): a command that waited, or any later one routed with the old
versions, is refused with StaleConfig and retried by its router. Neither shard writes a change-stream
event, as mongod marks migrations' oplog entries `fromMigrate` and change streams hide them; no write or
read sees a document twice or nowhere. Config changes (shardCollection, split, migrations, drops)
run one at a time (`cluster.config_lock`, as the config server serialises them).
"""

import contextlib
import time

import datetime

from bson.int64 import Int64
from bson.objectid import ObjectId
from bson.timestamp import Timestamp

from . import cmd_admin, shard_version
from .balancer import FAIL_POINTS as BALANCER_FAIL_POINTS
from .bsonkeys import sort_key
from .errors import MongoError
from .matcher import compile_filter
from .routing import MISSING, hashed, path_value


def _admin_only(db, name):
    """Unauthorized (13) outside admin, as mongos answers."""
    if db != "admin":
        raise MongoError(13, "%s may only be run against the admin database." % name)


def cmd_hello(router, conn, db, cmd):
    """hello / isMaster."""
    return router.hello(conn, cmd)


def cmd_ping(router, conn, db, cmd):
    """ping: answered by the router alone, with its own clock (strategy.cpp)."""
    return {"ok": 1.0}


def cmd_build_info(router, conn, db, cmd):
    """buildInfo of the cluster's version."""
    major, minor = router.cluster.primary.version
    return {"version": cmd_admin.version_string(router.cluster.primary), "gitVersion": "idxmongo-test-server",
            "versionArray": [major, minor, 0, 0], "bits": 64, "debug": False, "maxBsonObjectSize": 16777216,
            "ok": 1.0}


def cmd_whats_my_uri(router, conn, db, cmd):
    """whatsmyuri."""
    return {"you": "%s:%d" % conn.peer[:2], "ok": 1.0}


def cmd_server_status(router, conn, db, cmd):
    """serverStatus (router.py)."""
    return router.server_status()


STALE_RETRIES_FAIL_POINT = "enableStaleVersionAndSnapshotRetriesWithinTransactions"


def cmd_configure_fail_point(router, conn, db, cmd):
    """configureFailPoint: the router's own failCommand, mongos's test-only fail point
    enableStaleVersionAndSnapshotRetriesWithinTransactions (mode "alwaysOn" / "off"), under which a
    transaction's first statement is retried after StaleConfig (router_txn.retry_first_statement), or
    one of the config server's balancer fail points (balancer.py)."""
    _admin_only(db, "configureFailPoint")
    if cmd.get("configureFailPoint") == STALE_RETRIES_FAIL_POINT:
        mode = cmd.get("mode")
        if mode not in ("alwaysOn", "off"):
            raise MongoError(2, "mode must be alwaysOn or off for %s" % STALE_RETRIES_FAIL_POINT)
        router.stale_retries_in_transactions = mode == "alwaysOn"
        return {"count": 0, "ok": 1.0}
    if cmd.get("configureFailPoint") in BALANCER_FAIL_POINTS:
        return router.cluster.balancer.configure_fail_point(cmd)
    return router.failpoints.configure(cmd)


def cmd_flush_router_config(router, conn, db, cmd):
    """flushRouterConfig: the router forgets its cached routing information (of one namespace or
    database when given, else all), and reads it again from the config server at next use."""
    _admin_only(db, "flushRouterConfig")
    what = cmd.get("flushRouterConfig")
    if isinstance(what, str) and what:
        if "." in what:
            router.cache.forget(what)
        else:
            router.cache.refresh_db(what)
    else:
        router.cache.forget_all()
    return {"flushed": True, "ok": 1.0}


def cmd_get_last_error(router, conn, db, cmd):
    """getLastError: nothing to report."""
    return {"err": None, "n": 0, "connectionId": conn.id, "ok": 1.0}


def cmd_end_sessions(router, conn, db, cmd):
    """endSessions: sent on to every shard (their transactions of those sessions end)."""
    for index in range(len(router.cluster.shards)):
        router.send(conn, index, db, cmd)
    return {"ok": 1.0}


def cmd_append_oplog_note(router, conn, db, cmd):
    """appendOplogNote: a no-op on every shard (s/commands/cluster_append_oplog_note_cmd.cpp), each at
    a time after the router's clock; the reply's operationTime is the latest of them."""
    _admin_only(db, "appendOplogNote")
    raw = {}
    for index, shard in enumerate(router.cluster.shards):
        reply = router.send(conn, index, db, cmd)
        if reply.get("ok") != 1.0:
            return router.strip(reply)
        raw[shard.shard_name] = router.strip(reply)
    return {"raw": raw, "ok": 1.0}


def cmd_get_more(router, conn, db, cmd):
    """getMore of a router cursor: each kind of cursor serves its own."""
    cursor_id = cmd.get("getMore")
    if isinstance(cursor_id, bool) or not isinstance(cursor_id, int):
        raise MongoError(14, "getMore cursor id must be a 64-bit integer")
    cursor = router.lookup(cursor_id)
    ns = "%s.%s" % (db, cmd.get("collection"))
    if cursor.ns is not None and cursor.ns != ns:
        raise MongoError(43, "cursor id %d not found" % cursor_id)
    if hasattr(cursor, "get_more"):
        return cursor.get_more(router, conn, db, cmd)
    sent = dict(cmd)
    sent["getMore"] = Int64(cursor.shard_id)
    reply = router.strip(router.send(conn, cursor.shard, db, sent))
    got = reply.get("cursor")
    if reply.get("ok") != 1.0 or not isinstance(got, dict) or not got.get("id"):
        router.forget(cursor_id)
    if isinstance(got, dict):
        got = dict(got)
        got["id"] = Int64(cursor_id if got.get("id") else 0)
        reply["cursor"] = got
    return reply


def cmd_kill_cursors(router, conn, db, cmd):
    """killCursors of router cursors (and of the shards' cursors behind them)."""
    killed, missing = [], []
    for cursor_id in cmd.get("cursors") or []:
        cursor = router.forget(cursor_id)
        if cursor is None:
            missing.append(Int64(cursor_id))
            continue
        killed.append(Int64(cursor_id))
        if hasattr(cursor, "close"):
            cursor.close(router, conn)
        else:
            router.send(conn, cursor.shard, db, {"killCursors": cmd["killCursors"],
                                                   "cursors": [Int64(cursor.shard_id)]})
    return {"cursorsKilled": killed, "cursorsNotFound": missing, "cursorsAlive": [], "cursorsUnknown": [],
            "ok": 1.0}


def cmd_enable_sharding(router, conn, db, cmd):
    """enableSharding: accepted (6.0 no longer needs it)."""
    _admin_only(db, "enableSharding")
    return {"ok": 1.0}


def cmd_shard_collection(router, conn, db, cmd):
    """shardCollection: a routing entry, the collection (and its shard key index) on every shard, each
    shard told the key so it applies mongod's rules for shard key changes (sharding.py)."""
    _admin_only(db, "shardCollection")
    ns = cmd.get("shardCollection")
    if not isinstance(ns, str) or "." not in ns:
        raise MongoError(73, "Invalid namespace specified '%s'" % (ns,))
    target_db, name = ns.split(".", 1)
    if target_db in ("admin", "config", "local"):
        raise MongoError(20, "can't shard %s collections" % target_db)
    routing = router.cluster.routing
    existing = routing.get(target_db, name)
    if existing is not None:
        if list(existing.key.items()) != list(dict(cmd.get("key") or {}).items()):
            raise MongoError(23, "sharding already enabled for collection %s with options %s"
                             % (ns, {"key": existing.key}))
        return {"collectionsharded": ns, "ok": 1.0}
    with router.cluster.config_lock:
        return _shard_collection(router, conn, ns, target_db, name, cmd)


def _shard_collection(router, conn, ns, target_db, name, cmd):
    """shardCollection's work, config lock held."""
    routing = router.cluster.routing
    entry = routing.add(ns, cmd.get("key"), cmd.get("unique"))
    index_name = "_".join("%s_%s" % (f, entry.key[f]) for f in entry.fields)
    for index in range(len(router.cluster.shards)):
        router.send(conn, index, target_db, {"create": name}) if index else None
        reply = router.send(conn, index, "admin", {"shardCollection": ns, "key": entry.key,
                                                      "unique": entry.unique})
        if reply.get("ok") != 1.0:
            routing.forget(target_db, name)
            return router.strip(reply)
        if entry.fields != ["_id"]:
            router.send(conn, index, target_db, {"createIndexes": name, "indexes": [
                {"key": entry.key, "name": index_name, "unique": entry.unique and entry.hashed_field is None}]})
    with contextlib.ExitStack() as locks:  # the documents move and the shards learn the versions at once
        for shard in router.cluster.shards:
            locks.enter_context(shard.lock)
        for chunk in entry.chunks:
            if chunk.shard != 0:
                migrate(router.cluster, entry, chunk, 0, chunk.shard)
        shard_version.publish(router.cluster, entry)
    router.cache.refresh(ns)
    return {"collectionsharded": ns, "collectionUUID": entry.uuid, "ok": 1.0}


def _entry(router, cmd, name):
    """The routing entry a split or moveChunk names; NamespaceNotSharded (118) when none."""
    ns = cmd.get(name)
    target_db, _, coll = ns.partition(".") if isinstance(ns, str) else ("", "", "")
    entry = router.cluster.routing.get(target_db, coll)
    if entry is None:
        raise MongoError(118, "%s is not sharded" % (ns,))
    return entry


def _key_field(doc, field):
    """A shard key field's value in a shard key document (`middle`, `bounds`: its fields named by their
    dotted paths, as mongos writes them) or in a `find` query, which may also nest it ({a: {b: 1}})."""
    return doc[field] if field in doc else path_value(doc, field)


def cmd_split(router, conn, db, cmd):
    """split at `middle` (a full shard key value; a hashed field given by its hash)."""
    _admin_only(db, "split")
    entry = _entry(router, cmd, "split")
    middle = cmd.get("middle")
    if not isinstance(middle, dict):
        raise MongoError(2, "split: middle must be a document")
    values = [_key_field(middle, f) for f in entry.fields]
    if any(v is None or v is MISSING for v in values) or len(values) != len(entry.fields):
        raise MongoError(2, "split: middle must hold every shard key field")
    with router.cluster.config_lock:
        with router.cluster.routing.lock:
            owner = entry.chunk_of(entry.point(values)).shard
            entry.split(values)
        shard_version.publish(router.cluster, entry, [owner])
    router.cache.refresh(entry.ns)
    return {"ok": 1.0}


def cmd_move_chunk(router, conn, db, cmd):
    """moveChunk: the chunk holding `find` (a document, its hashed field unhashed) or starting at
    `bounds`[0] goes to shard `to`, its documents with it."""
    _admin_only(db, "moveChunk")
    entry = _entry(router, cmd, "moveChunk")
    names = [s.shard_name for s in router.cluster.shards]
    target = cmd.get("to")
    if target not in names:
        raise MongoError(70, "Shard %s not found" % (target,))
    if isinstance(cmd.get("bounds"), list) and cmd["bounds"]:
        point = entry.point([_key_field(cmd["bounds"][0], f) for f in entry.fields])
    elif isinstance(cmd.get("find"), dict):
        found = [_key_field(cmd["find"], f) for f in entry.fields]
        point = entry.point([hashed(v) if f == entry.hashed_field else (None if v is MISSING else v)
                             for f, v in zip(entry.fields, found)])
    else:
        raise MongoError(2, "moveChunk needs find or bounds")
    started = time.monotonic()
    with router.cluster.config_lock:
        chunk = entry.chunk_of(point)
        move_chunk(router.cluster, entry, chunk, names.index(target))
    router.cache.refresh(entry.ns)
    return {"millis": int((time.monotonic() - started) * 1000), "ok": 1.0}


MIGRATION_LOCK_WAIT = 10.0


def _transactions_hold(shard, entry):
    """Whether an open transaction on a shard holds the collection."""
    target_db, name = entry.ns.split(".", 1)
    return any(txn.holds(target_db, [name]) for txn in list(shard.txns.open.values()))


def move_chunk(cluster, entry, chunk, to):
    """Give a chunk to shard `to`, its documents with it (config lock held): once no open transaction on
    either shard holds the collection, with both shards' store locks held, the documents move, the
    config server commits the new chunk versions and both shards learn them."""
    if chunk.shard == to:
        return
    donor = chunk.shard
    first, second = sorted([cluster.shards[donor], cluster.shards[to]], key=lambda s: s.shard_index)
    deadline = time.monotonic() + MIGRATION_LOCK_WAIT
    while True:
        with first.lock, second.lock:
            if not (_transactions_hold(first, entry) or _transactions_hold(second, entry)):
                migrate(cluster, entry, chunk, donor, to)
                with cluster.routing.lock:
                    entry.give(chunk, to)
                shard_version.publish(cluster, entry, [donor, to], moved=True)
                return
        if time.monotonic() > deadline:
            raise MongoError(46, "Unable to acquire the collection locks of %s for a migration: open "
                                 "transactions hold it" % entry.ns)
        time.sleep(0.005)


def forget_sharded(router, db, coll):
    """A sharded collection (or every one of a database, coll None) was dropped: the config server
    forgets it, the shards their metadata, this router its cache."""
    routing = router.cluster.routing
    with router.cluster.config_lock:
        with routing.lock:
            gone = [ns for ns in routing.collections
                    if ns == "%s.%s" % (db, coll) or (coll is None and ns.startswith(db + "."))]
            routing.forget(db, coll)
        for ns in gone:
            shard_version.unpublish(router.cluster, ns)
    if coll is None:
        router.cache.refresh_db(db)
    else:
        router.cache.refresh("%s.%s" % (db, coll))


def rename_sharded(router, source, to):
    """A sharded collection renamed: a new epoch under its new name; the shards' metadata follows."""
    routing = router.cluster.routing
    with router.cluster.config_lock:
        with routing.lock:
            entry = routing.collections.get(source)
            routing.rename(source, to)
            if entry is not None:
                entry.epoch = ObjectId()
        shard_version.unpublish(router.cluster, source)
        if entry is not None:
            shard_version.publish(router.cluster, entry)
    router.cache.refresh(source)
    router.cache.refresh(to)


def migrate(cluster, entry, chunk, source_index, dest_index):
    """Move the documents of a chunk from one shard to another, with both shards' store locks held and
    no change event (a migration's oplog entries are `fromMigrate`, hidden from change streams); the
    destination gets the collection's indexes first."""
    source, dest = cluster.shards[source_index], cluster.shards[dest_index]
    first, second = sorted([source, dest], key=lambda s: s.shard_index)
    target_db, name = entry.ns.split(".", 1)
    with first.lock, second.lock:
        coll = source.store.get(target_db, name)
        if coll is None:
            return
        into, _ = dest.store.ensure(target_db, name)
        for index in coll.indexes.values():
            if index.name not in into.indexes:
                into.add_index(dict(index.spec))
        for idk, doc in list(coll.docs.items()):
            if entry.chunk_of(entry.point(entry.key_values(doc))) is chunk:
                into.insert(doc)
                coll.delete(idk)


def cmd_list_shards(router, conn, db, cmd):
    """listShards."""
    _admin_only(db, "listShards")
    return {"shards": _shard_docs(router), "ok": 1.0}


def _shard_docs(router):
    """config.shards."""
    return [{"_id": s.shard_name, "host": "%s/%s:%d" % (s.shard_name, router.host, 27018 + s.shard_index),
             "state": 1} for s in router.cluster.shards]


def _config_docs(router, coll):
    """The documents of a config collection, as the config server has them."""
    routing = router.cluster.routing
    names = [s.shard_name for s in router.cluster.shards]
    with routing.lock:
        entries = list(routing.collections.values())
        if coll == "shards":
            return _shard_docs(router)
        if coll == "collections":
            return [e.config_doc() for e in entries]
        if coll == "chunks":
            return [doc for e in entries for doc in e.chunk_docs(names)]
        if coll == "settings":
            return router.cluster.balancer.settings_doc()
        if coll == "databases":
            dbs = {e.ns.split(".", 1)[0] for e in entries}
            return [{"_id": d, "primary": names[0], "partitioned": True} for d in sorted(dbs)]
    return []


def config_find(router, conn, cmd):
    """find on the config database: its documents filtered, all in the first batch."""
    docs = _config_docs(router, cmd.get("find"))
    filt = cmd.get("filter") or {}
    match = compile_filter(filt)
    docs = [d for d in docs if match(d)]
    limit = cmd.get("limit") or 0
    if limit:
        docs = docs[:int(limit)]
    return {"cursor": {"firstBatch": docs, "id": Int64(0), "ns": "config.%s" % cmd.get("find")}, "ok": 1.0}


def config_update_collections(router, cmd):
    """update on config.collections: only what mongosh's sh.disableBalancing(ns) and
    sh.enableBalancing(ns) write, {$set: {noBalance: bool}} (or $unset of it), to the documents the
    filter matches; the balancer then leaves those collections alone (balancer.py). Any other update of
    the config server's documents is refused with IllegalOperation (20): not emulated."""
    updates = cmd.get("updates")
    if not isinstance(updates, list) or not updates:
        raise MongoError(9, "update needs a non-empty array of updates")
    routing = router.cluster.routing
    matched = modified = 0
    for statement in updates:
        change = statement.get("u") if isinstance(statement, dict) else None
        value = None
        if isinstance(change, dict) and list(change) == ["$set"] and list(change["$set"]) == ["noBalance"] \
                and isinstance(change["$set"]["noBalance"], bool):
            value = change["$set"]["noBalance"]
        elif isinstance(change, dict) and list(change) == ["$unset"] and list(change["$unset"]) == ["noBalance"]:
            value = False
        if value is None or statement.get("upsert"):
            raise MongoError(20, "the test server changes nothing of config.collections but noBalance "
                                 "(sh.disableBalancing, sh.enableBalancing)")
        match = compile_filter(statement.get("q") or {})
        with router.cluster.config_lock, routing.lock:
            for entry in list(routing.collections.values()):
                if match(entry.config_doc()):
                    matched += 1
                    modified += entry.no_balance != value
                    entry.no_balance = value
                    if not statement.get("multi"):
                        break
    return {"n": matched, "nModified": modified, "ok": 1.0}


def cmd_cluster_shard_stats(router, conn, db, cmd):
    """A test-server command: per shard, its examined counters and operations (serverStatus's `shards`)."""
    return {"shards": router.server_status()["shards"], "ok": 1.0}


def _shard_index(router, name):
    """The index of a shard named in a test command; ShardNotFound (70) otherwise."""
    names = [s.shard_name for s in router.cluster.shards]
    if name not in names:
        raise MongoError(70, "Shard %s not found" % (name,))
    return names.index(name)


def cmd_run_on_shard(router, conn, db, cmd):
    """A test-server command: `{runOnShard: "<shard>", command: {...}, db: "<db>"}` (admin by default) runs
    the command on that shard alone, as a client connected to the shard's primary would (a failCommand
    there, a read of its own data); the reply is the shard's."""
    _admin_only(db, "runOnShard")
    index = _shard_index(router, cmd.get("runOnShard"))
    inner = cmd.get("command")
    if not isinstance(inner, dict) or not inner:
        raise MongoError(2, "runOnShard needs a command document")
    return router.strip(router.send(conn, index, cmd.get("db") or "admin", dict(inner), versioned=False))


def cmd_set_shard_clock(router, conn, db, cmd):
    """A test-server command: `{setShardClock: "<shard>", time: Timestamp}` moves that shard's cluster
    clock to the time (never back), so the shard's next write takes the next increment: tests make two
    shards write at the same cluster time, as independent clocks do."""
    _admin_only(db, "setShardClock")
    index = _shard_index(router, cmd.get("setShardClock"))
    at = cmd.get("time")
    if not isinstance(at, Timestamp):
        raise MongoError(14, "setShardClock needs a timestamp")
    router.cluster.shards[index].clock.advance({"clusterTime": at})
    return {"ok": 1.0}


COMMANDS = {
    "hello": cmd_hello, "isMaster": cmd_hello, "ismaster": cmd_hello, "ping": cmd_ping,
    "buildInfo": cmd_build_info, "buildinfo": cmd_build_info, "whatsmyuri": cmd_whats_my_uri,
    "serverStatus": cmd_server_status, "configureFailPoint": cmd_configure_fail_point,
    "getLastError": cmd_get_last_error, "getlasterror": cmd_get_last_error, "endSessions": cmd_end_sessions,
    "getMore": cmd_get_more, "killCursors": cmd_kill_cursors, "enableSharding": cmd_enable_sharding,
    "shardCollection": cmd_shard_collection, "split": cmd_split, "moveChunk": cmd_move_chunk,
    "listShards": cmd_list_shards, "appendOplogNote": cmd_append_oplog_note,
    "flushRouterConfig": cmd_flush_router_config,
    "runOnShard": cmd_run_on_shard, "setShardClock": cmd_set_shard_clock, "clusterShardStats": cmd_cluster_shard_stats,
}
