"""Handshake, server information, namespace and index management, sessions, transactions, auth and
failpoint commands."""

import datetime
import os
import time

from bson.int64 import Int64

from . import authz_cmds, changestream
from .authz import CLUSTER, db_resource, ns_resource
from . import collation as collations
from . import limits
from .changelog import wall_now
from .cmd_crud import collection_stats
from .errors import MongoError, bad_value
from .matcher import compile_filter
from .mockops import plain
from .txn import no_such_transaction

GENERIC_FIELDS = {"lsid", "txnNumber", "autocommit", "startTransaction", "writeConcern", "readConcern", "comment",
                  "maxTimeMS", "apiVersion", "apiStrict", "apiDeprecationErrors"}
INDEX_OPTIONS = ("unique", "sparse", "partialFilterExpression", "expireAfterSeconds", "collation", "hidden")


def cmd_hello(ctx):
    """hello / isMaster: a replica-set primary of a one-member set `rs0` (no topologyVersion, so clients
    do not start awaitable hellos)."""
    server = ctx.server
    cmd = ctx.cmd
    client = cmd.get("client")
    if isinstance(client, dict):
        ctx.conn.app_name = (client.get("application") or {}).get("name")
    reply = {"helloOk": True}
    reply.update(server.repl.hello_fields(ctx.conn.member))
    reply.update({
        "maxBsonObjectSize": 16777216, "maxMessageSizeBytes": 48000000, "maxWriteBatchSize": 100000,
        "localTime": datetime.datetime.utcnow(), "logicalSessionTimeoutMinutes": 30,
        "connectionId": ctx.conn.id, "minWireVersion": 0, "maxWireVersion": server.max_wire_version, "readOnly": False,
    })
    mech_user = cmd.get("saslSupportedMechs")
    if server.auth is not None and isinstance(mech_user, str):
        mechs = server.auth.mechanisms_for(mech_user)
        if mechs:
            reply["saslSupportedMechs"] = mechs
    reply["ok"] = 1.0
    return reply


def cmd_repl_set_get_status(ctx):
    """replSetGetStatus (admin): the members, their states and optimes, the majority commit point."""
    _admin_only(ctx, "replSetGetStatus")
    return ctx.server.repl.status(ctx.conn.member)


def cmd_repl_set_step_down(ctx):
    """replSetStepDown (admin): the primary becomes a secondary (see repl.ReplicaSet.step_down)."""
    _admin_only(ctx, "replSetStepDown")
    ctx.server.repl.step_down(ctx.conn.member, ctx.cmd)
    return {"ok": 1.0}


def cmd_repl_set_step_up(ctx):
    """replSetStepUp (admin): this secondary calls an election (see repl.ReplicaSet.step_up)."""
    _admin_only(ctx, "replSetStepUp")
    ctx.server.repl.step_up(ctx.conn.member)
    return {"ok": 1.0}


def cmd_set_replication_lag(ctx):
    """setReplicationLag (admin; a test-server command): how far the majority commit point trails the
    last write (majorityLagMs), how far a member replicates behind (member, lagMs), or that it stopped
    replicating (member, paused: true), and the election timeout (electionTimeoutMs). Answers as
    replSetGetStatus."""
    _admin_only(ctx, "setReplicationLag")
    ctx.server.repl.set_lag(ctx.cmd)
    return ctx.server.repl.status(ctx.conn.member)


def _admin_only(ctx, name):
    """Replication commands run on admin only (Unauthorized, 13, elsewhere, as mongod)."""
    if ctx.db != "admin":
        raise MongoError(13, "%s may only be run against the admin database." % name)


def cmd_ping(ctx):
    """ping."""
    return {"ok": 1.0}


def version_string(server):
    """The version the server announces (--server-version): "6.0.0" by default."""
    return "%d.%d.0" % server.version


def cmd_build_info(ctx):
    """buildInfo: a MongoDB 6.0.0 server (or the --server-version)."""
    major, minor = ctx.server.version
    return {"version": version_string(ctx.server), "gitVersion": "idxmongo-test-server",
            "versionArray": [major, minor, 0, 0],
            "bits": 64, "debug": False, "maxBsonObjectSize": 16777216, "storageEngines": ["wiredTiger"],
            "javascriptEngine": "none", "ok": 1.0}


def cmd_server_status(ctx):
    """serverStatus: connections, opcounters and the query executor's examined counters."""
    server = ctx.server
    counters = server.counters
    uptime = time.time() - server.started
    return {
        "host": "%s:%d" % (server.host, server.port), "version": version_string(server), "process": "mongod",
        "pid": Int64(os.getpid()), "uptime": float(int(uptime)), "uptimeMillis": Int64(int(uptime * 1000)),
        "localTime": datetime.datetime.utcnow(),
        "connections": {"current": server.connections_current(), "available": 1000,
                        "totalCreated": server.connections_total(), "active": 1},
        "opcounters": {k: Int64(counters[k]) for k in ("insert", "query", "update", "delete", "getmore", "command")},
        "metrics": {
            "queryExecutor": {k: Int64(counters[k]) for k in ("scanned", "scannedObjects")},
            "document": {k: Int64(counters[k]) for k in ("returned", "inserted", "updated", "deleted")},
            "cursor": {"open": {"total": Int64(server.cursors.count())}},
        },
        "transactions": {k: Int64(counters[k]) for k in ("totalStarted", "totalCommitted", "totalAborted")},
        "ok": 1.0,
    }


def _wait_for_transaction_locks(ctx, names):
    """DDL outside a transaction waits, as its exclusive lock request does on mongod, while an open
    transaction of another session holds the collections `names` (the whole database when None): until
    it commits, aborts or expires; maxTimeMS bounds the wait (MaxTimeMSExpired, 50). The store lock is
    released while waiting, so other connections (and the transaction's own statements, which mongod
    grants on the locks the transaction already holds) go on."""
    ctx.server.txns.wait_for_locks(ctx.txn, ctx.db, names, ctx.deadline())
    ctx.server.repl.check_interrupted(ctx.conn.member)


def _txn_may_create(ctx, what):
    """Explicit creation of a collection or an index in a transaction needs readConcern level local
    (InvalidOptions, 72: jstests/core/txns/create_collection_and_index_read_concern... on mongod 4.4+;
    the message is the test server's)."""
    if ctx.txn is not None and ctx.txn.read_level != "local":
        raise MongoError(72, "Cannot create %s in a multi-document transaction with readConcern level '%s': "
                             "only 'local' is allowed" % (what, ctx.txn.read_level))


def cmd_list_databases(ctx):
    """listDatabases."""
    store = ctx.store
    databases = []
    # without listDatabases on the cluster, only the databases the user has privileges on (mongod 4.0.5+)
    see_all = ctx.server.auth is None or ctx.cmd.get("authorizedDatabases") is False or \
        ctx.server.users.authorized(ctx.conn.user, CLUSTER, {"listDatabases"})
    for name in sorted(store.dbs):
        if not see_all and not authz_cmds.may_see(ctx.server, ctx.conn, db_resource(name)):
            continue
        colls = store.dbs[name]
        empty = not any(c.docs for c in colls.values())
        databases.append({"name": name, "sizeOnDisk": Int64(sum(len(c.docs) for c in colls.values()) * 100 + 4096),
                          "empty": empty})
    if ctx.cmd.get("nameOnly"):
        databases = [{"name": d["name"]} for d in databases]
    return {"databases": databases, "totalSize": Int64(sum(d.get("sizeOnDisk", 0) for d in databases)),
            "ok": 1.0}


def cmd_create(ctx):
    """create: an explicit collection (NamespaceExists if it is there)."""
    name = ctx.cmd["create"]
    _txn_may_create(ctx, "a collection")
    if ctx.coll(name) is not None:
        raise MongoError(48, "Collection %s.%s already exists." % (ctx.db, name))
    options = {k: v for k, v in ctx.cmd.items()
               if k != "create" and not k.startswith("$") and k not in GENERIC_FIELDS}
    if "collation" in options:
        collation = collations.parse(options.pop("collation"))
        if collation != collations.SIMPLE:
            options["collation"] = collation  # mongod stores and shows the fully specified form
    ctx.ensure_coll(name, options)
    return {"ok": 1.0}


def cmd_drop(ctx):
    """drop: a collection and its indexes (NamespaceNotFound if missing, as mongod 6.0)."""
    name = ctx.cmd["drop"]
    _wait_for_transaction_locks(ctx, [name])
    coll = ctx.coll(name)
    if coll is None:
        raise MongoError(26, "ns not found")
    ctx.drop_coll(coll)
    return {"nIndexesWas": len(coll.indexes), "ns": coll.ns, "ok": 1.0}


def cmd_coll_mod(ctx):
    """collMod: only changeStreamPreAndPostImages ({enabled: bool}) is supported here."""
    name = ctx.cmd.get("collMod")
    if not isinstance(name, str):
        raise MongoError(73, "collMod needs a collection name")
    changes = {k: v for k, v in ctx.cmd.items() if k != "collMod" and not k.startswith("$")
               and k not in GENERIC_FIELDS}
    if set(changes) - {"changeStreamPreAndPostImages"}:
        raise MongoError(115, "collMod of %s is not supported by the test server" % ", ".join(sorted(changes)))
    images = changes.get("changeStreamPreAndPostImages")
    if images is not None and (not isinstance(images, dict) or set(images) != {"enabled"}
                               or not isinstance(images["enabled"], bool)):
        raise MongoError(40414, "changeStreamPreAndPostImages must be {enabled: <bool>}")
    _wait_for_transaction_locks(ctx, [name])
    coll = ctx.coll(name)
    if coll is None:
        raise MongoError(26, "ns does not exist")
    options = dict(coll.options)
    if images is not None:
        options["changeStreamPreAndPostImages"] = {"enabled": images["enabled"]}
        if not images["enabled"]:
            del options["changeStreamPreAndPostImages"]
    ctx.set_options(coll, options)
    return {"ok": 1.0}


def cmd_rename_collection(ctx):
    """renameCollection (on admin) within a database; across databases is not supported here."""
    if ctx.db != "admin":
        raise MongoError(13, "renameCollection may only be run against the admin database.")
    source, target = ctx.cmd.get("renameCollection"), ctx.cmd.get("to")
    if not isinstance(source, str) or not isinstance(target, str):
        raise MongoError(14, "renameCollection and to must be strings")
    (db, _, name), (to_db, _, to_name) = source.partition("."), target.partition(".")
    if not name or not to_name:
        raise MongoError(73, "Invalid namespace specified '%s'" % (source if not name else target))
    if db != to_db:
        raise MongoError(115, "renameCollection across databases is not supported by the test server")
    if name == to_name:
        raise MongoError(20, "Can't rename a collection to itself")
    limits.check_namespace(to_db, to_name)
    ctx.server.txns.wait_for_locks(ctx.txn, db, [name, to_name], ctx.deadline())
    coll = ctx.server.store.get(db, name)
    if coll is None:
        raise MongoError(26, "Source collection %s does not exist" % source)
    existing = ctx.server.store.get(to_db, to_name)
    if existing is not None and not ctx.cmd.get("dropTarget"):
        raise MongoError(48, "target namespace exists")
    ctx.rename_coll(coll, to_name, existing)
    return {"ok": 1.0}


def cmd_drop_database(ctx):
    """dropDatabase."""
    _wait_for_transaction_locks(ctx, None)
    ctx.drop_db()
    return {"dropped": ctx.db, "ok": 1.0}


def cmd_list_collections(ctx):
    """listCollections: a cursor of collection descriptions, optionally filtered."""
    infos = []
    match = compile_filter(ctx.cmd.get("filter") or {})
    # authorizedCollections without listCollections: the collections the user has a privilege on
    only_authorized = ctx.cmd.get("authorizedCollections") and ctx.server.auth is not None and \
        not ctx.server.users.authorized(ctx.conn.user, db_resource(ctx.db), {"listCollections"})
    for name, coll in sorted(ctx.store.collections(ctx.db).items()):
        if only_authorized and not authz_cmds.may_see(ctx.server, ctx.conn, ns_resource(ctx.db, name)):
            continue
        info = {"name": name, "type": "collection", "options": dict(coll.options),
                "info": {"readOnly": False, "uuid": coll.uuid}, "idIndex": dict(coll.indexes["_id_"].spec)}
        if match(info):
            infos.append({"name": name, "type": "collection"} if ctx.cmd.get("nameOnly") else info)
    batch = (ctx.cmd.get("cursor") or {}).get("batchSize")
    return {"cursor": ctx.server.cursors.first_batch("%s.$cmd.listCollections" % ctx.db, infos, batch),
            "ok": 1.0}


def _index_spec(raw):
    """Validate and normalise one createIndexes entry into the document listIndexes will show."""
    if not isinstance(raw, dict) or not isinstance(raw.get("key"), dict) or not raw["key"]:
        raise MongoError(9, "Index specification must have a non-empty 'key' object")
    for path, direction in raw["key"].items():
        if isinstance(direction, str):
            raise MongoError(67, "'%s' indexes are not supported by the test server" % direction)
        if isinstance(direction, bool) or not isinstance(direction, (int, float)) or direction == 0:
            raise MongoError(67, "Values in the index key pattern can't be 0 or non-numbers: %s" % path)
    name = raw.get("name") or "_".join("%s_%s" % (p, d) for p, d in raw["key"].items())
    spec = {"v": 2, "key": dict(raw["key"]), "name": name}
    for option in INDEX_OPTIONS:
        if option in raw and raw[option] not in (False, None):
            spec[option] = raw[option]
    return spec


def _index_collation(spec, coll):
    """An index takes its own collation (`simple`: none), else the collection's default, as on mongod."""
    if "collation" in spec:
        collation = collations.parse(spec.pop("collation"))
    else:
        collation = collations.default_of(coll)
    if collation and collation != collations.SIMPLE:
        spec["collation"] = collation
    return spec


def _options_of(spec):
    """The parts of an index spec that must match for two specs to be "the same index"."""
    key = tuple((p, 1 if d > 0 else -1) for p, d in spec["key"].items())
    return key, tuple((o, repr(spec.get(o))) for o in INDEX_OPTIONS)


def _existing_equivalent(coll, spec):
    """True if `spec` already exists; raises 85/86 if it conflicts with an existing index."""
    key, options = _options_of(spec)
    for index in coll.indexes.values():
        other_key, other_options = _options_of(index.spec)
        if index.name == spec["name"]:
            if other_key != key:
                raise MongoError(86, "An existing index has the same name as the requested index. Requested "
                                     "index: %s, existing index: %s" % (spec, index.spec))
            if other_options != options:
                raise MongoError(85, "An existing index has the same name as the requested index but different "
                                     "options. Requested index: %s, existing index: %s" % (spec, index.spec))
            return True
        if other_key == key and (other_options == options or index.is_id):
            raise MongoError(85, "Index already exists with a different name: %s" % index.name)
    return False


def cmd_create_indexes(ctx):
    """createIndexes: build each new index (same spec twice is a no-op; conflicts give 85/86)."""
    name = ctx.cmd["createIndexes"]
    raw_specs = ctx.cmd.get("indexes")
    if not isinstance(raw_specs, list) or not raw_specs:
        raise bad_value("Must specify at least one index to create")
    specs = [_index_spec(raw) for raw in raw_specs]
    existing = ctx.coll(name)
    if ctx.txn is None and existing is not None and not _all_exist(existing, specs):
        # A no-op createIndexes takes no strong lock, nor does one that creates its collection: mongod
        # builds on a new collection under intent locks (create_indexes_cmd.cpp
        # runCreateIndexesOnNewCollection), also when a transaction created one of that name, unseen.
        _wait_for_transaction_locks(ctx, [name])
    created = ctx.coll(name) is None
    if ctx.txn is not None and not created:
        _check_index_build_in_transaction(ctx, ctx.coll(name), specs)
    if ctx.txn is not None and created:
        _txn_may_create(ctx, "an index")
    coll = ctx.ensure_coll(name)
    before = len(coll.indexes)
    specs = [_index_collation(spec, coll) for spec in specs]
    for spec in specs:
        if not _existing_equivalent(coll, spec):
            ctx.add_index(coll, spec)
    reply = {"numIndexesBefore": before, "numIndexesAfter": len(coll.indexes),
             "createdCollectionAutomatically": created}
    if before == len(coll.indexes):
        reply["note"] = "all indexes already exist"
    reply["ok"] = 1.0
    return reply


def _all_exist(coll, specs):
    """True if the collection exists and has every index of `specs` (85/86 on a conflicting one)."""
    return coll is not None and all(_existing_equivalent(coll, spec) for spec in specs)


def _check_index_build_in_transaction(ctx, coll, specs):
    """mongod builds indexes in a transaction only on a collection the transaction created and that is
    still empty (create_indexes_cmd.cpp); requesting indexes that all exist already is fine."""
    new = [spec for spec in specs if not _existing_equivalent(coll, spec)]
    if not new:
        return
    if not ctx.txn.owns(coll):
        raise MongoError(263, "Cannot create new indexes on existing collection %s in a multi-document "
                              "transaction." % coll.ns)
    _txn_may_create(ctx, "an index")
    if coll.docs:
        raise MongoError(263, "Cannot create new indexes on non-empty collection %s in a multi-document "
                              "transaction." % coll.ns)


def cmd_list_indexes(ctx):
    """listIndexes: a cursor of index specs, `_id_` first."""
    name = ctx.cmd["listIndexes"]
    coll = ctx.coll(name)
    if coll is None:
        raise MongoError(26, "ns does not exist: %s.%s" % (ctx.db, name))
    specs = [plain(index.spec) for index in coll.indexes.values()]
    batch = (ctx.cmd.get("cursor") or {}).get("batchSize")
    return {"cursor": ctx.server.cursors.first_batch(coll.ns, specs, batch), "ok": 1.0}


def _indexes_to_drop(coll, target):
    """Names of the indexes a dropIndexes `index` argument designates."""
    if target == "*":
        return [n for n in coll.indexes if n != "_id_"]
    if isinstance(target, dict):
        names = [i.name for i in coll.indexes.values() if i.spec["key"] == target]
        if not names:
            raise MongoError(27, "can't find index with key: %s" % (target,))
        return names[:1]
    names = target if isinstance(target, list) else [target]
    for name in names:
        if name == "_id_":
            raise MongoError(72, "cannot drop _id index")
        if name not in coll.indexes:
            raise MongoError(27, "index not found with name [%s]" % name)
    return names


def cmd_drop_indexes(ctx):
    """dropIndexes (by name, names, key pattern or "*")."""
    name = ctx.cmd.get(ctx.name)
    # mongod looks the collection up under an intent lock first (drop_indexes.cpp): a missing one, or one
    # an open transaction created (unseen by others), fails at once; an existing one waits for the locks.
    if ctx.coll(name) is not None:
        _wait_for_transaction_locks(ctx, [name])
    coll = ctx.coll(name)
    if coll is None:
        raise MongoError(26, "ns not found %s.%s" % (ctx.db, name))
    was = len(coll.indexes)
    for index_name in _indexes_to_drop(coll, ctx.cmd.get("index")):
        if index_name == "_id_":
            raise MongoError(72, "cannot drop _id index")
        ctx.drop_index(coll, index_name)
    return {"nIndexesWas": was, "ok": 1.0}


def cmd_coll_stats(ctx):
    """collStats: document count and sizes."""
    name = ctx.cmd["collStats"]
    coll = ctx.coll(name)
    if coll is None:
        raise MongoError(26, "Collection [%s.%s] not found." % (ctx.db, name))
    reply = collection_stats(coll, ctx.cmd.get("scale", 1))
    reply["ok"] = 1.0
    return reply


def cmd_db_stats(ctx):
    """dbStats."""
    colls = list(ctx.store.collections(ctx.db).values())
    stats = [collection_stats(c) for c in colls]
    objects = sum(s["count"] for s in stats)
    size = sum(s["size"] for s in stats)
    return {"db": ctx.db, "collections": len(colls), "views": 0, "objects": objects,
            "avgObjSize": size / objects if objects else 0, "dataSize": size, "storageSize": size,
            "indexes": sum(s["nindexes"] for s in stats), "indexSize": sum(s["totalIndexSize"] for s in stats),
            "ok": 1.0}


def _session_key(ctx):
    """The session id bytes of the command's lsid (required for transaction commands)."""
    lsid = ctx.cmd.get("lsid")
    if not isinstance(lsid, dict) or "id" not in lsid:
        raise MongoError(50768, "Transaction commands need a session (lsid)")
    return bytes(lsid["id"])


def _on_primary_commit(ctx, txn):
    """mongod evaluates onPrimaryTransactionalWrite once when a transaction that wrote commits (the commit's
    oplog entry updates config.transactions; op_observer_impl.cpp). With failBeforeCommitExceptionCode the
    commit fails and the transaction is aborted, as an error in commitTransaction aborts an unprepared
    transaction; closeConnection lets the commit happen and ends the connection without a reply."""
    if not (txn.images or txn.pending):
        return
    try:
        ctx.on_primary_write([])
    except MongoError:
        ctx.server.txns.abort(txn)
        ctx.server.counters["totalAborted"] += 1
        raise


def cmd_commit_transaction(ctx):
    """commitTransaction: commit; repeating it after success is fine, after abort it is NoSuchTransaction."""
    number = ctx.cmd.get("txnNumber")
    txn = ctx.server.txns.find(_session_key(ctx), number)
    if txn is None or txn.state == "aborted":
        raise no_such_transaction(number)
    if txn.state == "active":
        _on_primary_commit(ctx, txn)
        try:
            ctx.changes.extend(ctx.server.txns.commit(txn))  # journaled with the events, before the reply
        except MongoError:
            ctx.server.counters["totalAborted"] += 1
            raise
        ctx.server.counters["totalCommitted"] += 1
        ctx.note_write()
        txn.commit_time = ctx.conn.op_time  # a replica set's rollback undoes the commits after its point
        ctx.events.extend(changestream.stamp_commit(txn.events, ctx.conn.op_time, wall_now(), number,
                                                    ctx.cmd.get("lsid")))
        txn.events = []
    return {"ok": 1.0}


def cmd_abort_transaction(ctx):
    """abortTransaction: undo the transaction."""
    number = ctx.cmd.get("txnNumber")
    txn = ctx.server.txns.find(_session_key(ctx), number)
    if txn is None or txn.state == "aborted":
        raise no_such_transaction(number)
    if txn.state == "committed":
        raise MongoError(256, "Transaction %s has been committed." % number)
    ctx.server.txns.abort(txn)
    ctx.server.counters["totalAborted"] += 1
    return {"ok": 1.0}


def cmd_end_sessions(ctx):
    """endSessions: abort the sessions' open transactions, forget their retryable writes."""
    ids = ctx.cmd.get(ctx.name) or []
    keys = [bytes(s["id"]) for s in ids if isinstance(s, dict) and "id" in s]
    ctx.server.txns.end_sessions(keys)
    ctx.server.retryable.end_sessions(keys)
    return {"ok": 1.0}


def cmd_kill_all_sessions(ctx):
    """killAllSessions: abort every open transaction."""
    ctx.server.txns.abort_all()
    return {"ok": 1.0}


def cmd_sasl_start(ctx):
    """saslStart (SCRAM first step)."""
    if ctx.server.auth is None:
        raise MongoError(2, "Authentication is not enabled on this server")
    return ctx.server.auth.start(ctx.conn, ctx.db, ctx.cmd)


def cmd_sasl_continue(ctx):
    """saslContinue (SCRAM proof, then the optional empty exchange)."""
    if ctx.server.auth is None:
        raise MongoError(2, "Authentication is not enabled on this server")
    return ctx.server.auth.proceed(ctx.conn, ctx.cmd)


def cmd_logout(ctx):
    """logout: forget the connection's authentication."""
    ctx.conn.user = None
    return {"ok": 1.0}


def cmd_append_oplog_note(ctx):
    """appendOplogNote (admin): a no-op oplog entry at a new cluster time, which no change stream returns
    but which moves every stream's postBatchResumeToken past it (db/commands/oplog_note.cpp); the reply's
    operationTime is its time."""
    _admin_only(ctx, "appendOplogNote")
    if not isinstance(ctx.cmd.get("data"), dict):
        raise MongoError(2, "appendOplogNote requires a 'data' field that is an object")
    ctx.note_write()
    entry = changestream.noop_entry()
    entry.stamp(ctx.conn.op_time, wall_now())
    ctx.events.append(entry)
    return {"ok": 1.0}


def cmd_configure_fail_point(ctx):
    """configureFailPoint (failCommand and onPrimaryTransactionalWrite)."""
    if ctx.db != "admin":
        raise MongoError(13, "configureFailPoint may only be run against the admin database.")
    return ctx.server.failpoints.configure(ctx.cmd)


def cmd_get_last_error(ctx):
    """getLastError: nothing to report (every write reports its own errors)."""
    return {"err": None, "n": 0, "connectionId": ctx.conn.id, "ok": 1.0}


def cmd_whats_my_uri(ctx):
    """whatsmyuri."""
    return {"you": "%s:%d" % ctx.conn.peer[:2], "ok": 1.0}


COMMANDS = {
    "hello": cmd_hello,
    "isMaster": cmd_hello,
    "ismaster": cmd_hello,
    "ping": cmd_ping,
    "buildInfo": cmd_build_info,
    "buildinfo": cmd_build_info,
    "serverStatus": cmd_server_status,
    "listDatabases": cmd_list_databases,
    "create": cmd_create,
    "drop": cmd_drop,
    "dropDatabase": cmd_drop_database,
    "renameCollection": cmd_rename_collection,
    "collMod": cmd_coll_mod,
    "listCollections": cmd_list_collections,
    "createIndexes": cmd_create_indexes,
    "listIndexes": cmd_list_indexes,
    "dropIndexes": cmd_drop_indexes,
    "deleteIndexes": cmd_drop_indexes,
    "collStats": cmd_coll_stats,
    "dbStats": cmd_db_stats,
    "commitTransaction": cmd_commit_transaction,
    "abortTransaction": cmd_abort_transaction,
    "endSessions": cmd_end_sessions,
    "killAllSessions": cmd_kill_all_sessions,
    "saslStart": cmd_sasl_start,
    "saslContinue": cmd_sasl_continue,
    "logout": cmd_logout,
    "configureFailPoint": cmd_configure_fail_point,
    "getLastError": cmd_get_last_error,
    "appendOplogNote": cmd_append_oplog_note,
    "getlasterror": cmd_get_last_error,
    "whatsmyuri": cmd_whats_my_uri,
    "replSetGetStatus": cmd_repl_set_get_status,
    "setReplicationLag": cmd_set_replication_lag,
    "replSetStepDown": cmd_repl_set_step_down,
    "replSetStepUp": cmd_repl_set_step_up,
}

NO_AUTH_COMMANDS = {"hello", "isMaster", "ismaster", "saslStart", "saslContinue", "ping", "buildInfo",
                    "buildinfo", "endSessions", "logout", "connectionStatus"}
TXN_CONTROL_COMMANDS = {"commitTransaction", "abortTransaction"}
