"""Read and write commands: find, getMore, killCursors, insert, update, delete, findAndModify, count,
distinct, aggregate, explain."""

import copy
import datetime

from . import changestream
from . import collation as collations
from .bsonkeys import leaf_values, MISSING, sort_key
from .codec import encode
from .context import prepare_insert
from .errors import MongoError, bad_value
from .mockops import LookupDatabase, apply_update, is_operator_update, project, run_stages, upsert_document
from .query import ResultProgress, choose_plan, covered_count
from .sharding import check_delete, check_find_and_modify, check_shard_key_change, check_update
from .retry import find_and_modify_retry
from .txnrules import check_pipeline


def _name_arg(ctx):
    """The collection named by the command's first field."""
    name = ctx.cmd[ctx.name]
    if not isinstance(name, str):
        raise MongoError(73, "collection name has invalid type %s" % type(name).__name__)
    return name


def _int_arg(cmd, field, default=0):
    """An integer option (int, Int64 or integral double)."""
    value = cmd.get(field, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or int(value) != value:
        raise MongoError(14, "'%s' must be a number" % field)
    return int(value)


def sort_spec(spec):
    """A sort document as a list of (path, direction) with direction 1 or -1."""
    if not spec:
        return []
    if not isinstance(spec, dict):
        raise bad_value("sort must be an object")
    out = []
    for path, direction in spec.items():
        if isinstance(direction, dict):
            raise MongoError(115, "$meta sorts are not supported by the test server")
        if isinstance(direction, bool) or direction not in (1, -1):
            raise bad_value("$sort key ordering must be 1 (for ascending) or -1 (for descending)")
        out.append((path, int(direction)))
    return out


def _check_collation(cmd):
    """Refuse a collation this server cannot compare by (collation.py) before anything runs."""
    collations.parse(cmd.get("collation"))


def _projection(spec):
    """A projection, or None for none (an empty projection means the whole document)."""
    if spec is not None and not isinstance(spec, dict):
        raise bad_value("projection must be an object")
    return spec or None


def _batch_size(value):
    """A cursor batchSize (None if not given)."""
    if value is None:
        return None
    if value < 0:
        raise bad_value("BatchSize value must be non-negative, but received: %d" % value)
    return int(value)


def cmd_find(ctx):
    """find: query through the planner, reply with the first batch of a server-side cursor."""
    cmd = ctx.cmd
    name = _name_arg(ctx)
    filt = cmd.get("filter") or {}
    _check_collation(cmd)
    projection = _projection(cmd.get("projection"))
    skip = _int_arg(cmd, "skip")
    limit = _int_arg(cmd, "limit")
    if skip < 0:
        raise bad_value("skip value must be non-negative")
    single = bool(cmd.get("singleBatch"))
    if limit < 0:
        limit, single = -limit, True
    progress = ResultProgress()
    docs = ctx.query(ctx.coll(name), filt, sort_spec(cmd.get("sort")), skip, limit, hint=cmd.get("hint"),
                     collation=cmd.get("collation"), progress=progress)
    if projection and docs:
        project(docs[0], projection)  # reject a bad projection now rather than mid-cursor
    ctx.server.counters["query"] += 1
    # (the cursor encodes each projected document as it sends it)
    transform = (lambda d: project(d, projection, shared=True)) if projection else None
    cursor = ctx.server.cursors.first_batch("%s.%s" % (ctx.db, name), docs, _batch_size(cmd.get("batchSize")),
                                            single, transform, progress, ctx.stats)
    ctx.server.counters["returned"] += len(cursor["firstBatch"])
    return {"cursor": cursor, "ok": 1.0}


def cmd_get_more(ctx):
    """getMore: the next batch of a cursor (any connection may ask)."""
    cmd = ctx.cmd
    cursor_id = cmd["getMore"]
    if not isinstance(cursor_id, int):
        raise MongoError(14, "getMore id must be a long")
    ns = "%s.%s" % (ctx.db, cmd.get("collection"))
    ctx.server.counters["getmore"] += 1
    stream = ctx.server.cursors.cursors.get(int(cursor_id))
    if stream is not None and stream.ns == ns:
        _fail_after_checkout(ctx, stream)
    if getattr(stream, "is_stream", False):
        reply = changestream.get_more(ctx, stream, ns)
        ctx.server.counters["returned"] += len(reply["cursor"]["nextBatch"])
        return reply
    cursor = ctx.server.cursors.get_more(int(cursor_id), ns, _batch_size(cmd.get("batchSize")), ctx.stats)
    ctx.server.counters["returned"] += len(cursor["nextBatch"])
    return {"cursor": cursor, "ok": 1.0}


def _fail_after_checkout(ctx, cursor):
    """mongod's failGetMoreAfterCursorCheckout: the getMore fails and its cursor is closed."""
    code = ctx.server.failpoints.get_more_checkout(ctx.conn.app_name)
    if code is None:
        return
    ctx.server.cursors.kill([cursor.id])
    resumable = getattr(cursor, "is_stream", False) and code in changestream.RESUMABLE_CODES
    raise MongoError(code, "Hit the 'failGetMoreAfterCursorCheckout' failpoint",
                     labels=["ResumableChangeStreamError"] if resumable else None)


def cmd_kill_cursors(ctx):
    """killCursors."""
    killed, missing = ctx.server.cursors.kill(ctx.cmd.get("cursors") or [])
    return {"cursorsKilled": killed, "cursorsNotFound": missing, "cursorsAlive": [], "cursorsUnknown": [],
            "ok": 1.0}


def _write_reply(n, errors, **extra):
    """Reply of a write command."""
    reply = {"n": n}
    reply.update(extra)
    if errors:
        reply["writeErrors"] = errors
    reply["ok"] = 1.0
    return reply


def cmd_insert(ctx):
    """insert: ordered writes stop at the first error, unordered ones go on."""
    cmd = ctx.cmd
    docs = cmd.get("documents") or []
    ordered = cmd.get("ordered", True)
    name = _name_arg(ctx)
    ctx.wait_for_write_lock(name)
    coll = ctx.ensure_coll(name)
    n = 0
    errors = []
    batch_end, together = 0, False  # mongod's current batch (see _insert_together)
    for i, doc in enumerate(docs):
        ctx.server.counters["insert"] += 1
        if together and i < batch_end:  # inserted with the batch an earlier document began
            n += 1
            continue
        if ctx.previous_outcome(i) is not None:
            n += 1
            continue
        if i >= batch_end:
            batch_end, together = _insert_together(ctx, coll, docs, i)
            if together:
                n += 1
                continue
        try:
            prepared = prepare_insert(doc)
            ctx.statement(lambda: ctx.insert_doc(ctx.ensure_coll(name), prepared))
            ctx.record_outcome(i, {"n": 1})
            n += 1
        except MongoError as exc:
            errors.append(exc.to_write_error(i))
            if ordered or ctx.txn is not None:  # in a transaction the first error ends the batch
                break
    return _write_reply(n, errors)


# mongod's batches of an insert command (write_ops_exec.cpp, performInserts): internalInsertMaxBatchSize
# documents, or until they reach insertVectorMaxBytes.
INSERT_BATCH_DOCS = 64
INSERT_BATCH_BYTES = 256 * 1024


def _insert_batch(ctx, docs, start):
    """The documents from `start` that mongod inserts together: up to a document already executed by an
    earlier attempt or one that cannot be inserted as it is, within mongod's batch limits."""
    batch = []
    size = 0
    for i in range(start, len(docs)):
        if ctx.retry.executed(i) or len(batch) >= INSERT_BATCH_DOCS or size >= INSERT_BATCH_BYTES:
            break
        try:
            doc = prepare_insert(docs[i])
        except MongoError:
            break
        batch.append(doc)
        size += len(encode(doc))
    return batch


def _insert_together(ctx, coll, docs, start):
    """For a retryable write while onPrimaryTransactionalWrite is on: insert the batch that begins at
    `start` as mongod does first, in one storage transaction that records all its statements and
    evaluates the failpoint once (write_ops_exec.cpp, insertBatchAndHandleErrors). If any document fails,
    or the failpoint throws, the whole batch is rolled back and mongod inserts the documents one at a
    time. Returns the index after the batch and whether it was inserted together. (With the failpoint
    off, both ways give the same result, so the test server always inserts one at a time then.)"""
    if ctx.retry is None or ctx.txn is not None or not ctx.server.failpoints.on_primary_write_enabled():
        return start, False
    batch = _insert_batch(ctx, docs, start)
    if len(batch) < 2:
        return start, False
    indexes = range(start, start + len(batch))
    try:
        for i, doc in zip(indexes, batch):
            ctx.insert_doc(coll, doc)
            ctx.record_outcome(i, {"n": 1}, fire=False)
        ctx.on_primary_write(list(indexes))
    except MongoError:
        ctx.rollback_statement()
        ctx.retry.forget(indexes)
        ctx.begin_statement()  # the first document, one at a time
        return start + len(batch), False
    return start + len(batch), True


def _same_document(a, b):
    """Byte-for-byte equality (types and field order matter, unlike Python's ==)."""
    return encode(a) == encode(b)


def updated_document(doc, spec, update):
    """Apply an update to one document, enforcing `_id` immutability."""
    new = apply_update(doc, spec, update)
    if sort_key(new.get("_id")) != sort_key(doc["_id"]):
        raise MongoError(66, "Performing an update on the path '_id' would modify the immutable field '_id'")
    return new


def check_update_statement(stmt):
    """Validate one update statement's form."""
    update = stmt.get("u")
    if isinstance(update, list):
        raise MongoError(115, "pipeline-style updates are not supported by the test server")
    if not isinstance(update, dict):
        raise MongoError(9, "Update argument must be either an object or an array")
    if stmt.get("arrayFilters"):
        raise MongoError(115, "arrayFilters are not supported by the test server")
    if stmt.get("multi") and not is_operator_update(update):
        raise MongoError(9, "multi update is not supported for replacement-style update")


def _apply_statement(ctx, name, index, stmt, upserted):
    """Run one update statement; returns (matched, modified). Outside a transaction it waits for a
    transaction that wrote a document it must write and then goes on (Context.statement), leaving alone
    the documents it already updated, as mongod's update stage remembers them."""
    check_update_statement(stmt)
    done = {}  # id key -> whether the statement modified the document
    return ctx.statement(lambda: _update_documents(ctx, name, index, stmt, upserted, done))


def _update_documents(ctx, name, index, stmt, upserted, done):
    """The documents of an update statement, but those in `done`: updated, or the upsert inserted."""
    spec = stmt.get("q") or {}
    update = stmt["u"]
    coll = ctx.coll(name)
    check_update(coll, stmt)
    docs = ctx.query(coll, spec, limit=0 if stmt.get("multi") else 1, collation=stmt.get("collation"))
    for doc in docs:
        idk = sort_key(doc["_id"])
        if idk in done:
            continue
        new = updated_document(doc, spec, update)
        check_shard_key_change(ctx, coll, spec, doc, new, stmt.get("multi"))
        changed = not _same_document(doc, new)
        if changed:
            ctx.replace_doc(coll, doc, new, not is_operator_update(update))
        done[idk] = changed
    if done or not stmt.get("upsert"):
        return len(done), sum(done.values())
    new = prepare_insert(upsert_document(spec, update))
    ctx.insert_doc(ctx.ensure_coll(name), new)
    upserted.append({"index": index, "_id": new["_id"]})
    return 1, 0


def _record_update(ctx, index, changed, upserted):
    """Remember an update statement of a retryable write that wrote (mongod records the statements that
    have an oplog entry; a retry counts an update as n 1, nModified 1)."""
    if upserted and upserted[-1]["index"] == index:
        try:
            ctx.record_outcome(index, {"n": 1, "nModified": 0, "upserted": upserted[-1]["_id"]})
        except MongoError:  # onPrimaryTransactionalWrite rolled the upsert back
            upserted.pop()
            raise
    elif changed:
        ctx.record_outcome(index, {"n": 1, "nModified": 1})


def cmd_update(ctx):
    """update: operator or replacement updates, multi, upsert."""
    cmd = ctx.cmd
    name = _name_arg(ctx)
    ordered = cmd.get("ordered", True)
    ctx.wait_for_write_lock(name)
    n = modified = 0
    errors = []
    upserted = []
    for i, stmt in enumerate(cmd.get("updates") or []):
        ctx.server.counters["update"] += 1
        prior = ctx.previous_outcome(i)
        if prior is not None:
            n, modified = n + prior["n"], modified + prior["nModified"]
            if "upserted" in prior:
                upserted.append({"index": i, "_id": prior["upserted"]})
            continue
        try:
            ctx.refuse_multi_retry(stmt.get("multi"), "multi=true")
            matched, changed = _apply_statement(ctx, name, i, stmt, upserted)
            _record_update(ctx, i, changed, upserted)
            n += matched
            modified += changed
        except MongoError as exc:
            errors.append(exc.to_write_error(i))
            if ordered or ctx.txn is not None:  # in a transaction the first error ends the batch
                break
    extra = {"nModified": modified}
    if upserted:
        extra["upserted"] = upserted
    return _write_reply(n, errors, **extra)


def delete_statement(ctx, name, index, stmt):
    """Delete the documents of one statement (all matches with limit 0, else one); returns how many.
    Outside a transaction it waits for a transaction that wrote one of them and then goes on
    (Context.statement); those it deleted before are gone."""
    deleted = [0]

    def run():
        coll = ctx.coll(name)
        for doc in ctx.query(coll, stmt.get("q") or {}, limit=1 if stmt.get("limit") else 0,
                             collation=stmt.get("collation")):
            ctx.delete_doc(coll, doc)
            ctx.record_outcome(index, {"n": 1})
            deleted[0] += 1

    ctx.statement(run)
    return deleted[0]


def cmd_delete(ctx):
    """delete: each statement removes all matches (limit 0) or one (limit 1)."""
    cmd = ctx.cmd
    ctx.wait_for_write_lock(_name_arg(ctx))
    coll = ctx.coll(_name_arg(ctx))
    ordered = cmd.get("ordered", True)
    n = 0
    errors = []
    for i, stmt in enumerate(cmd.get("deletes") or []):
        ctx.server.counters["delete"] += 1
        if ctx.previous_outcome(i) is not None:
            n += 1
            continue
        try:
            check_delete(coll, stmt)
            ctx.refuse_multi_retry(not stmt.get("limit"), "limit=0")
            n += delete_statement(ctx, _name_arg(ctx), i, stmt)
        except MongoError as exc:
            errors.append(exc.to_write_error(i))
            if ordered or ctx.txn is not None:  # in a transaction the first error ends the batch
                break
    return _write_reply(n, errors)


def cmd_find_and_modify(ctx):
    """findAndModify: update or remove the first match in sort order, returning the old or new document."""
    cmd = ctx.cmd
    name = _name_arg(ctx)
    spec = cmd.get("query") or {}
    update = cmd.get("update")
    remove = bool(cmd.get("remove"))
    fields = _projection(cmd.get("fields"))
    if remove and update is not None:
        raise MongoError(9, "Cannot specify both an update and remove=true")
    if not remove and update is None:
        raise MongoError(9, "Either an update or remove=true must be specified")
    prior = ctx.previous_outcome(0)
    if prior is not None:
        return find_and_modify_retry(prior, cmd)
    ctx.wait_for_write_lock(name)
    return ctx.statement(lambda: _find_and_modify(ctx, name, spec, update, remove, fields))


def _find_and_modify(ctx, name, spec, update, remove, fields):
    """findAndModify's write, run by Context.statement (again after a wait for a transaction that wrote
    the document it found)."""
    cmd = ctx.cmd
    coll = ctx.coll(name)
    check_find_and_modify(coll, spec)
    docs = ctx.query(coll, spec, sort_spec(cmd.get("sort")), limit=1, collation=cmd.get("collation"))
    if remove:
        ctx.server.counters["delete"] += 1
        if docs:
            ctx.delete_doc(coll, docs[0])
            ctx.record_outcome(0, {"kind": "delete", "image": docs[0]})
        value = project(docs[0], fields) if docs else None
        return {"lastErrorObject": {"n": len(docs)}, "value": value, "ok": 1.0}
    check_update_statement({"u": update, "arrayFilters": cmd.get("arrayFilters")})
    ctx.server.counters["update"] += 1
    if docs:
        new = updated_document(docs[0], spec, update)
        value = new if cmd.get("new") else docs[0]
        check_shard_key_change(ctx, coll, spec, docs[0], new, False)
        if not _same_document(docs[0], new):
            ctx.replace_doc(coll, docs[0], new, not is_operator_update(update))
            ctx.record_outcome(0, {"kind": "update", "image": value, "new": bool(cmd.get("new"))})
        leo = {"n": 1, "updatedExisting": True}
    elif cmd.get("upsert"):
        new = prepare_insert(upsert_document(spec, update))
        ctx.insert_doc(ctx.ensure_coll(name), new)
        ctx.record_outcome(0, {"kind": "insert", "image": new})
        value = new if cmd.get("new") else None
        leo = {"n": 1, "updatedExisting": False, "upserted": new["_id"]}
    else:
        value = None
        leo = {"n": 0, "updatedExisting": False}
    return {"lastErrorObject": leo, "value": project(value, fields) if value is not None else None, "ok": 1.0}


def cmd_count(ctx):
    """count: number of matches with optional skip/limit."""
    cmd = ctx.cmd
    coll = ctx.coll(_name_arg(ctx))
    skip = _int_arg(cmd, "skip")
    limit = abs(_int_arg(cmd, "limit"))
    if coll is None:
        return {"n": 0, "ok": 1.0}
    filt = cmd.get("query") or {}
    if not filt and not ctx.overlay(coll) and not cmd.get("hint"):
        n = max(0, len(coll.docs) - skip)
        return {"n": min(n, limit) if limit else n, "ok": 1.0}
    if not ctx.overlay(coll) and not cmd.get("hint") and isinstance(filt, dict):
        # keys only, as mongod's COUNT_SCAN, where an index expresses the filter exactly
        n = covered_count(coll, filt, collations.effective(cmd.get("collation"), coll), ctx.stats)
        if n is not None:
            n = max(0, n - skip)
            return {"n": min(n, limit) if limit else n, "ok": 1.0}
    return {"n": len(ctx.query(coll, filt, skip=skip, limit=limit, hint=cmd.get("hint"),
                                collation=cmd.get("collation"))), "ok": 1.0}


def cmd_distinct(ctx):
    """distinct: the distinct values of a path (array elements count separately), in BSON order."""
    cmd = ctx.cmd
    key = cmd.get("key")
    if not isinstance(key, str):
        raise MongoError(14, "'key' must be a string")
    values = {}
    for doc in ctx.query(ctx.coll(_name_arg(ctx)), cmd.get("query") or {}, collation=cmd.get("collation")):
        found, _ = leaf_values(doc, key)
        for value in found:
            if value is not MISSING:
                values.setdefault(sort_key(value), value)
    return {"values": [values[k] for k in sorted(values)], "ok": 1.0}


# Stages that never modify their input documents, so they may run on the stored documents themselves.
READ_ONLY_STAGES = {"$group", "$setWindowFields", "$count", "$sort", "$skip", "$limit", "$sample", "$match", "$sortByCount"}


def _pushdown(pipeline):
    """Split leading $match/$sort/$skip/$limit stages (run by the planner) from the rest of a pipeline."""
    parts = {"$match": {}, "$sort": [], "$skip": 0, "$limit": 0}
    i = 0
    for op in ("$match", "$sort", "$skip", "$limit"):
        if i < len(pipeline) and isinstance(pipeline[i], dict) and list(pipeline[i]) == [op]:
            value = pipeline[i][op]
            parts[op] = sort_spec(value) if op == "$sort" else value
            i += 1
    if not isinstance(parts["$match"], dict):
        raise bad_value("the match filter must be an expression in an object")
    return parts, pipeline[i:]


COLL_STATS_OPTIONS = {"latencyStats", "storageStats", "count", "queryExecStats"}


def _coll_stats_stage(ctx, coll, options):
    """The document of a leading $collStats stage, as mongod's DocumentSourceCollStats: ns, host,
    localTime, the shard on a shard server, then what the options ask (count: the number of
    documents; storageStats: collection_stats, sizes divided by its `scale`).  Options are objects;
    count and storageStats of a collection that does not exist fail with NamespaceNotFound."""
    if not isinstance(options, dict):
        raise MongoError(5447000, "$collStats must take a nested object but found: %r" % (options,))
    for key, value in options.items():
        if key not in COLL_STATS_OPTIONS:
            raise MongoError(40415, "BSON field '$collStats.%s' is an unknown field." % key)
        if not isinstance(value, dict):
            raise MongoError(14, "BSON field '$collStats.%s' is the wrong type '%s', expected type "
                                 "'object'" % (key, type(value).__name__))
    name = coll.name if coll else ctx.cmd["aggregate"]
    out = {"ns": "%s.%s" % (ctx.db, name)}
    if getattr(ctx.server, "shard_name", None):
        out["shard"] = ctx.server.shard_name
    out["host"] = "%s:%d" % (ctx.server.host, ctx.server.port or 0)
    out["localTime"] = datetime.datetime.now(datetime.timezone.utc).replace(tzinfo=None)
    for key in ("storageStats", "count"):
        if key in options and coll is None:
            raise MongoError(26, "Unable to retrieve %s in $collStats stage :: caused by :: Collection "
                                 "[%s.%s] not found." % (key, ctx.db, name))
    if "storageStats" in options:
        stats = collection_stats(coll, options["storageStats"].get("scale", 1))
        del stats["ns"]  # the stage's document names it, not its storageStats
        out["storageStats"] = stats
    if "count" in options:
        out["count"] = len(coll.docs)
    return [out]


def collection_stats(coll, scale=1):
    """Size statistics of a collection computed from the encoded documents, as mongod's
    appendCollectionStorageStats: sizes divided by `scale` (a positive integer; avgObjSize is not
    scaled, and is there only when there are documents)."""
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or scale < 1:
        raise MongoError(2, "scale has to be >= 1")
    scale = int(scale)
    size = sum(len(encode(d)) for d in coll.docs.values())
    n = len(coll.docs)
    out = {"ns": coll.ns, "size": size // scale, "count": n}
    if n:
        out["avgObjSize"] = size // n
    out.update({"storageSize": size // scale, "nindexes": len(coll.indexes),
                "totalIndexSize": sum(len(i.entries) * 16 for i in coll.indexes.values()) // scale,
                "indexSizes": {name: len(i.entries) * 16 // scale for name, i in coll.indexes.items()},
                "scaleFactor": scale})
    return out


def cmd_aggregate(ctx):
    """aggregate: leading $match/$sort/$skip/$limit through the planner, other stages through mongomock."""
    cmd = ctx.cmd
    if changestream.is_change_stream(cmd) and "cursor" in cmd and not cmd.get("explain") and ctx.txn is None:
        return changestream.open_stream(ctx)
    name = cmd.get("aggregate")
    if not isinstance(name, str):
        raise MongoError(115, "collection-less aggregations are not supported by the test server")
    pipeline = cmd.get("pipeline")
    if not isinstance(pipeline, list):
        raise MongoError(14, "'pipeline' option must be specified as an array")
    if "cursor" not in cmd and not cmd.get("explain"):
        raise MongoError(9, "The 'cursor' option is required, except for aggregate with the explain argument")
    if cmd.get("explain"):
        raise MongoError(115, "aggregate explain is not supported by the test server")
    _check_collation(cmd)
    if ctx.txn is not None:
        check_pipeline(pipeline)
    coll = ctx.coll(name)
    progress = None
    if any(isinstance(stage, dict) and "$collStats" in stage for stage in pipeline[1:]):
        raise MongoError(40602, "$collStats is only valid as the first stage in a pipeline")
    if pipeline and isinstance(pipeline[0], dict) and "$collStats" in pipeline[0]:
        docs, rest = _coll_stats_stage(ctx, coll, pipeline[0]["$collStats"]), pipeline[1:]
    else:
        parts, rest = _pushdown(pipeline)
        # only $match/$sort/$skip/$limit: mongod answers from the query layer alone, batch by batch as a find
        progress = None if rest else ResultProgress()
        docs = ctx.query(coll, parts["$match"], parts["$sort"], parts["$skip"], parts["$limit"],
                         hint=cmd.get("hint"), collation=cmd.get("collation"), progress=progress)
    if rest:
        lookup_db = LookupDatabase(lambda other, filt: ctx.query(ctx.coll(other), filt))
        if not all(next(iter(stage), None) in READ_ONLY_STAGES for stage in rest if isinstance(stage, dict)):
            docs = copy.deepcopy(docs)  # mongomock stages may modify their input documents in place
        docs = run_stages(docs, rest, lookup_db)
    batch_size = _batch_size((cmd.get("cursor") or {}).get("batchSize"))
    return {"cursor": ctx.server.cursors.first_batch("%s.%s" % (ctx.db, name), docs, batch_size,
                                                     progress=progress, stats=ctx.stats), "ok": 1.0}


def cmd_explain(ctx):
    """explain of find or count: the plan the planner picks and, unless the verbosity is "queryPlanner"
    (which, as on mongod, runs nothing and examines nothing), what executing it examined."""
    inner = ctx.cmd.get("explain")
    planner_only = ctx.cmd.get("verbosity") == "queryPlanner"
    if not isinstance(inner, dict) or not inner:
        raise bad_value("explain command requires a nested object")
    kind = next(iter(inner))
    if kind not in ("find", "count"):
        raise MongoError(115, "explain of %s is not supported by the test server" % kind)
    coll = ctx.coll(inner[kind])
    filt = inner.get("filter" if kind == "find" else "query") or {}
    sort = sort_spec(inner.get("sort")) if kind == "find" else []
    keys_before, docs_before = ctx.stats.keys, ctx.stats.docs
    docs = []
    plan_doc = {"stage": "EOF"}
    counted = None
    if kind == "count" and coll is not None and not ctx.overlay(coll) and not inner.get("hint"):
        counted = _explain_covered_count(ctx, coll, filt, inner, None if planner_only else ctx.stats)
    if counted is not None:
        plan_doc = counted
    elif coll is not None:
        collation = collations.effective(inner.get("collation"), coll)
        plan = choose_plan(coll, collations.fold_filter(filt) if collation else filt, sort, inner.get("hint"),
                           collation)
        plan_doc = plan.describe()
        if not planner_only:
            docs = ctx.query(coll, filt, sort, _int_arg(inner, "skip"), abs(_int_arg(inner, "limit")), plan,
                             collation=inner.get("collation"))
    ns = "%s.%s" % (ctx.db, inner[kind])
    reply = {"queryPlanner": {"namespace": ns, "indexFilterSet": False, "parsedQuery": filt, "winningPlan": plan_doc,
                              "rejectedPlans": []}}
    if not planner_only:
        reply["executionStats"] = {"executionSuccess": True, "nReturned": len(docs),
                                   "totalKeysExamined": ctx.stats.keys - keys_before,
                                   "totalDocsExamined": ctx.stats.docs - docs_before}
    reply["ok"] = 1.0
    return reply


def _explain_covered_count(ctx, coll, filt, inner, stats):
    """The plan of a count answered from index keys (COUNT over COUNT_SCAN for one interval, else over an
    IXSCAN without FETCH), counting the keys it examines; None if the documents are needed."""
    collation = collations.effective(inner.get("collation"), coll)
    if not isinstance(filt, dict) or covered_count(coll, filt, collation, stats) is None:
        return None
    plan = choose_plan(coll, filt, [])
    stage = "COUNT_SCAN" if len(plan.intervals) == 1 else "IXSCAN"
    return {"stage": "COUNT", "inputStage": {"stage": stage, "indexName": plan.index.name,
                                             "keyPattern": dict(plan.index.spec["key"]), "isMultiKey": False}}


COMMANDS = {
    "find": cmd_find,
    "getMore": cmd_get_more,
    "killCursors": cmd_kill_cursors,
    "insert": cmd_insert,
    "update": cmd_update,
    "delete": cmd_delete,
    "findAndModify": cmd_find_and_modify,
    "findandmodify": cmd_find_and_modify,
    "count": cmd_count,
    "distinct": cmd_distinct,
    "aggregate": cmd_aggregate,
    "explain": cmd_explain,
}
