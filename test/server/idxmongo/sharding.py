"""mongos's rules for writes to a sharded collection, on a collection flagged as sharded.

The server keeps every collection whole, as one shard would: `shardCollection` (run on `admin`, as on mongos)
only records the collection's shard key, in `config.collections` as mongos's config server does and on the
collection itself.  What it emulates is mongos's targeting of writes that address one document, as
MongoDB 6.0 refuses them (src/mongo/s/chunk_manager_targeter.cpp and
src/mongo/s/commands/cluster_find_and_modify_cmd.cpp; 7.1 and later run them through a two-phase protocol
instead):

- findAndModify whose query lacks an equality on every shard key field: ShardKeyNotFound (61);
- update with `multi: false` whose filter holds neither the full shard key nor an equality on `_id`:
  InvalidOptions (72); with `upsert: true` the full shard key is needed: ShardKeyNotFound (61);
- delete with `limit: 1` whose filter holds neither: ShardKeyNotFound (61).

And mongod 6.0's rules for an update that changes a document's shard key value
(src/mongo/db/exec/update_stage.cpp): the filter must hold the full shard key (31025), the update must not
be `multi` (InvalidOptions 72), and it must run in a transaction or as a retryable write (a `txnNumber`;
IllegalOperation 20).  The document is not moved anywhere, there being one shard.

Multi-document updates and deletes, inserts and reads are not restricted, as on mongos.
"""

import datetime

from bson.objectid import ObjectId

from . import journal
from .bsonkeys import REGEX, leaf_values, sort_key
from .errors import MongoError

CONFIG_DB = "config"
CONFIG_COLLECTIONS = "collections"


def _parse_key(key):
    """Check a shard key pattern: a non-empty document of fields with 1 or "hashed" (at most one)."""
    if not isinstance(key, dict) or not key:
        raise MongoError(2, "The shard key pattern must be a non-empty object")
    hashed = 0
    for path, kind in key.items():
        if not path or path.startswith("$") or any(not part for part in path.split(".")):
            raise MongoError(2, "Invalid shard key field name: %r" % path)
        if kind == "hashed":
            hashed += 1
        elif isinstance(kind, bool) or kind != 1:
            raise MongoError(2, "Shard key fields must be ascending (1) or \"hashed\": %r" % (kind,))
    if hashed > 1:
        raise MongoError(2, "A shard key may have at most one hashed field")
    return dict(key)


def _split_namespace(ns):
    """("db", "coll") of a `db.coll` string."""
    if not isinstance(ns, str) or "." not in ns or ns.startswith(".") or ns.endswith("."):
        raise MongoError(73, "Invalid namespace specified '%s'" % (ns,))
    db, name = ns.split(".", 1)
    return db, name


def _remember(ctx, ns, coll, key, unique):
    """The collection's entry in config.collections (not journaled, as the flag is not)."""
    config, _ = ctx.store.ensure(CONFIG_DB, CONFIG_COLLECTIONS)
    entry = {"_id": ns, "lastmodEpoch": ObjectId(), "lastmod": datetime.datetime.utcnow(),
             "uuid": coll.uuid, "key": dict(key), "unique": bool(unique), "noBalance": False}
    idk = sort_key(ns)
    if idk in config.docs:
        config.delete(idk)
    config.insert(entry)


def cmd_shard_collection(ctx):
    """shardCollection: flag a collection (created if missing) as sharded on `key`."""
    if ctx.db != "admin":
        raise MongoError(13, "shardCollection may only be run against the admin database.")
    ns = ctx.cmd[ctx.name]
    db, name = _split_namespace(ns)
    key = _parse_key(ctx.cmd.get("key"))
    coll = ctx.store.get(db, name)
    if coll is not None and getattr(coll, "shard_key", None) is not None:
        if list(coll.shard_key.items()) != list(key.items()):
            raise MongoError(23, "sharding already enabled for collection %s with options %s"
                             % (ns, {"key": coll.shard_key}))
        return {"collectionsharded": ns, "ok": 1.0}
    if coll is None:
        coll, created = ctx.store.ensure(db, name)
        if created:
            ctx.record_change(journal.create_op, coll)
    coll.shard_key = key
    _remember(ctx, ns, coll, key, ctx.cmd.get("unique"))
    return {"collectionsharded": ns, "ok": 1.0}


def cmd_enable_sharding(ctx):
    """enableSharding: accepted (mongos 6.0 no longer needs it before shardCollection)."""
    if ctx.db != "admin":
        raise MongoError(13, "enableSharding may only be run against the admin database.")
    if not isinstance(ctx.cmd[ctx.name], str) or not ctx.cmd[ctx.name]:
        raise MongoError(73, "Invalid database name")
    return {"ok": 1.0}


def forget(store, db, name=None):
    """Remove the config.collections entries of a dropped collection (or of every collection of a dropped
    database), as dropping a sharded collection through mongos does."""
    config = store.get(CONFIG_DB, CONFIG_COLLECTIONS)
    if config is None or db == CONFIG_DB:
        return
    for idk, doc in list(config.docs.items()):
        ns = doc.get("_id")
        if isinstance(ns, str) and (ns == "%s.%s" % (db, name) if name is not None
                                    else ns.startswith(db + ".")):
            config.delete(idk)


_MISSING = object()


def _is_operator_doc(value):
    """Is `value` a document of query operators ({$gt: ..})?"""
    return isinstance(value, dict) and bool(value) and next(iter(value)).startswith("$")


def _equality(value):
    """(True, v) if a filter value is an equality usable for targeting, else (False, None): a plain value or
    {$eq: v}, not an array, a regular expression or a document of other operators."""
    if _is_operator_doc(value):
        if len(value) != 1 or "$eq" not in value:
            return False, None
        value = value["$eq"]
    if isinstance(value, list) or sort_key(value)[0] == REGEX or _is_operator_doc(value):
        return False, None
    return True, value


def _has_equality(query, path):
    """Does the filter hold an equality on `path`, at its top level or inside a top-level $and, or an
    equality on an enclosing path whose document holds the field (mongos's findEqualityElement in
    s/shard_key_pattern_query_util.cpp: {_id: {k0: 1, id: 2}} holds the shard key field "_id.k0")?"""
    if not isinstance(query, dict):
        return False
    if path in query and _equality(query[path])[0]:
        return True
    parts = path.split(".")
    for cut in range(1, len(parts)):
        head = ".".join(parts[:cut])
        found, value = _equality(query[head]) if head in query else (False, None)
        for part in parts[cut:] if found else ():
            value = value.get(part, _MISSING) if isinstance(value, dict) else _MISSING
        if found and value is not _MISSING and _equality(value)[0]:
            return True
    clauses = query.get("$and")
    return isinstance(clauses, list) and any(_has_equality(c, path) for c in clauses)


def shard_key_of(coll):
    """The shard key pattern of a collection flagged as sharded, or None."""
    return getattr(coll, "shard_key", None) if coll is not None else None


def _has_full_shard_key(query, key):
    """Does the filter hold an equality on every field of the shard key pattern?"""
    return all(_has_equality(query, path) for path in key)


def _pattern(key):
    """A shard key pattern as mongos prints it in its messages."""
    return "{ %s }" % ", ".join("%s: %s" % (p, '"hashed"' if k == "hashed" else 1) for p, k in key.items())


def check_find_and_modify(coll, query):
    """mongos 6.0/7.0: a findAndModify on a sharded collection must hold the full shard key."""
    key = shard_key_of(coll)
    if key is not None and not _has_full_shard_key(query or {}, key):
        raise MongoError(61, "Query for sharded findAndModify must contain the shard key")


def check_update(coll, stmt):
    """mongos 6.0: a {multi: false} update must hold the full shard key or an equality on _id; an upsert
    the full shard key."""
    key = shard_key_of(coll)
    if key is None or stmt.get("multi"):
        return
    query = stmt.get("q") or {}
    if _has_full_shard_key(query, key):
        return
    if stmt.get("upsert"):
        raise MongoError(61, "Failed to target upsert by query :: could not extract exact shard key")
    if not _has_equality(query, "_id"):
        raise MongoError(72, "A {multi:false} update on a sharded collection must contain an exact match on "
                             "_id (and have the collection default collation) or target a single shard (and "
                             "have the simple collation), but this update targeted more than one shard. "
                             "Shard key pattern: %s" % _pattern(key))


def check_delete(coll, stmt):
    """mongos 6.0: a {limit: 1} delete must hold the full shard key or an equality on _id."""
    key = shard_key_of(coll)
    if key is None or not stmt.get("limit"):
        return
    query = stmt.get("q") or {}
    if not _has_full_shard_key(query, key) and not _has_equality(query, "_id"):
        raise MongoError(61, "A single delete on a sharded collection must contain an exact match on _id (and "
                             "have the collection default collation) or contain the shard key (and have the "
                             "simple collation). Shard key pattern: %s" % _pattern(key))


def _key_values(doc, key):
    """The values of a document's shard key fields, comparable (a missing field is null)."""
    return [[sort_key(v) for v in leaf_values(doc, path)[0]] for path in key]


def check_shard_key_change(ctx, coll, query, old, new, multi):
    """mongod 6.0: an update that changes a shard key value needs the full shard key in its filter, no
    `multi`, and a transaction or a retryable write."""
    key = shard_key_of(coll)
    if key is None or _key_values(old, key) == _key_values(new, key):
        return
    if not _has_full_shard_key(query or {}, key):
        raise MongoError(31025, "Shard key update is not allowed without specifying the full shard key in the query")
    if multi:
        raise MongoError(72, "Multi-update operations are not allowed when updating the shard key field.")
    if ctx.txn is None and ctx.cmd.get("txnNumber") is None:
        raise MongoError(20, "Must run update to shard key field in a multi-statement transaction or with "
                             "retryWrites: true.")


COMMANDS = {
    "shardCollection": cmd_shard_collection,
    "shardcollection": cmd_shard_collection,
    "enableSharding": cmd_enable_sharding,
    "enablesharding": cmd_enable_sharding,
}
