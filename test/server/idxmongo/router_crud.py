"""Commands a router sends to shards: unsharded collections go to the primary shard unchanged (cursors
handed out under router ids); sharded collections to the shards the routing table targets, their
replies merged as mongos merges them (s/commands/cluster_*_cmd.cpp, s/write_ops/batch_write_exec.cpp):

- insert: each document to the shard owning its key, in runs per shard (an ordered batch stops at the
  first error); write errors keep their index in the client's batch;
- update and delete: a statement with the full shard key (or `_id` for one document) to its shard, others
  to every targeted shard (a one-document statement to each in turn until one matches); an update (or a
  findAndModify) that moves a document to another shard's chunk becomes a delete and an insert in one
  transaction, committed on the two shards in either order (router_txn.move_document), as mongos's
  document_shard_key_update_util.cpp does;
- find: every targeted shard runs the filter (with limit + skip, without skip), the router sorts, skips,
  limits and projects; count and distinct merge the shards' answers; aggregate runs the leading `$match`
  stages on the shards and the rest of the pipeline on the router.

The router reads every targeted shard's results before its first batch (mongos streams them); so a
client that stops reading early still had every targeted shard examine what the filter matched.

Targets come from the router's cached routing information, and each command carries the shard version
it assumes (shard_version.py). A shard's StaleConfig refreshes the cache; the router then retries, as
mongos does (s/write_ops/batch_write_exec.cpp, s/commands/strategy.cpp; at most 10 times,
kMaxNumStaleVersionRetries): a read whole; a write only for its statements (or an insert's documents)
not yet applied, a multi-document statement on every shard it now targets (mongos re-sends it, so
such a statement can apply twice where a shard ran it before the retry), and the command's later
statements with the refreshed routing too (whose versions they carry); in a transaction only its
first statement and only under mongos's test-only fail point (router_txn.retry_first_statement),
otherwise the transaction is aborted.
"""

import copy

from bson.int64 import Int64
from bson.raw_bson import RawBSONDocument

from . import codec, router_admin, router_txn
from .bsonkeys import sort_documents, sort_key
from .errors import MongoError
from .cmd_crud import check_update_statement, updated_document
from .mockops import is_operator_update, project, run_stages
from .routing import MISSING, path_value
from .shard_version import STALE_CONFIG

MAX_STALE_RETRIES = 10
# commands retried whole after StaleConfig outside a transaction: they change nothing, or one document
# at most once (findAndModify tries shards in turn, each refusing before it runs)
RETRIED_WHOLE = {"find", "aggregate", "count", "distinct", "findAndModify", "collStats", "explain"}

DRAIN_BATCH = 1000000
SHARDED_DDL = {"createIndexes", "dropIndexes", "collMod"}
NAMESPACE_COMMANDS = {"find", "aggregate", "count", "distinct", "insert", "update", "delete", "findAndModify",
                      "createIndexes", "dropIndexes", "collMod", "drop", "collStats", "listIndexes", "create",
                      "explain", "dataSize", "validate"}


class MergedCursor:
    """Documents the router merged, served batch by batch."""

    def __init__(self, ns, docs):
        self.ns = ns
        self.docs = docs
        self.pos = 0

    def batch(self, size):
        """The next documents (`size` None: 101)."""
        size = 101 if size is None else size
        out = self.docs[self.pos:self.pos + size] if size else self.docs[self.pos:]
        self.pos += len(out)
        return out

    def get_more(self, router, conn, db, cmd):
        """getMore: the next batch; id 0 once exhausted."""
        batch = self.batch(int(cmd.get("batchSize") or 0))
        cursor_id = self.id
        if self.pos >= len(self.docs):
            router.forget(self.id)
            cursor_id = 0
        return {"cursor": {"nextBatch": batch, "id": Int64(cursor_id), "ns": self.ns}, "ok": 1.0}

    def close(self, router, conn):
        """Nothing held on shards."""


def _first_reply(router, ns, docs, batch_size, single=False):
    """The first batch of merged documents (a router cursor if more remain)."""
    cursor = MergedCursor(ns, docs)
    batch = cursor.batch(batch_size)
    cursor_id = 0
    if cursor.pos < len(docs) and not single:
        cursor_id = router.register(cursor)
    return {"cursor": {"firstBatch": batch, "id": Int64(cursor_id), "ns": ns}, "ok": 1.0}


def _error(reply):
    """A shard's error reply as an exception (its code, message and labels)."""
    exc = MongoError(reply.get("code", 1), reply.get("errmsg", "shard error"),
                     labels=list(reply.get("errorLabels") or []))
    exc.fixed_labels = True
    for key in ("codeName", "writeConcernError"):
        if key in reply:
            exc.extra[key] = reply[key]
    return exc


def _stale(reply):
    """Whether a shard's reply is StaleConfig."""
    return reply.get("ok") != 1.0 and reply.get("code") == STALE_CONFIG


def _retry_locally(cmd, attempts):
    """Whether a write retries its refused part itself: outside a transaction, below the limit."""
    return cmd.get("autocommit") is not False and attempts < MAX_STALE_RETRIES


def _current(router, conn, db, coll, reply=None):
    """The refreshed routing entry of a sharded collection still being written; the shard's StaleConfig
    (or one of the router's own) when it is no longer sharded."""
    entry = router.cache.target(conn, db, coll)
    if entry is None:
        raise _error(reply) if reply is not None else MongoError(STALE_CONFIG, "%s.%s is no longer sharded"
                                                                  % (db, coll))
    return entry


def _checked(reply):
    """A shard's reply, raising its error."""
    if reply.get("ok") != 1.0:
        raise _error(reply)
    return reply


def drain(router, conn, index, db, cmd):
    """All documents of a find or aggregate run on shard `index`."""
    reply = _checked(router.send(conn, index, db, cmd))
    cursor = reply["cursor"]
    docs = list(cursor.get("firstBatch") or [])
    while cursor.get("id"):
        reply = _checked(router.send(conn, index, db, {"getMore": cursor["id"], "collection": cursor["ns"].split(
            ".", 1)[1], **_session_fields(cmd)}))
        cursor = reply["cursor"]
        docs.extend(cursor.get("nextBatch") or [])
    # (the shard's batches are RawBSONDocuments, cursors.py: decoded whole, so that the router's sort,
    # stages and updates reach into sub-documents, as `_id.k0` of an index collection)
    return [codec.decode(d.raw) if isinstance(d, RawBSONDocument) else dict(d) for d in docs]


def _statements(cmd, sent, positions):
    """A retryable write's part for one shard numbers its statements as the client's batch does (mongos
    sends `stmtIds`), so a shard's records of two parts never collide."""
    if cmd.get("txnNumber") is None or cmd.get("autocommit") is False:
        return sent
    given = cmd.get("stmtIds")
    first = cmd.get("stmtId", 0)
    sent.pop("stmtId", None)
    sent["stmtIds"] = [given[i] if isinstance(given, list) else first + i for i in positions]
    return sent


def _session_fields(cmd):
    """The session and transaction fields a follow-up command of `cmd` carries."""
    return {k: cmd[k] for k in ("lsid", "txnNumber", "autocommit") if k in cmd}


def forward(router, conn, db, name, cmd):
    """A command the router has no handler of its own for: config reads, sharded collections, or the
    primary shard. StaleConfig from a shard: retried (see the module's docstring)."""
    if db == "config" and name == "find":
        return router_admin.config_find(router, conn, cmd)
    if db == "config" and name == "update" and cmd.get("update") == "collections":
        return router_admin.config_update_collections(router, cmd)
    router_txn.note_statement(router, cmd)
    attempts = 0
    while True:
        try:
            return _forward(router, conn, db, name, cmd)
        except MongoError as exc:
            if exc.code != STALE_CONFIG or attempts >= MAX_STALE_RETRIES:
                raise
            if cmd.get("autocommit") is False:
                if not router_txn.retry_first_statement(router, conn, db, cmd):
                    raise
            elif name not in RETRIED_WHOLE and not getattr(exc, "whole_refused", False):
                raise
            attempts += 1


def _namespace_of(name, cmd):
    """The collection a command names."""
    coll = cmd.get(name)
    if name == "explain" and isinstance(coll, dict):
        coll = next(iter(coll.values()), None)
    return coll


def _forward(router, conn, db, name, cmd):
    """One attempt of forward()."""
    coll = _namespace_of(name, cmd)
    entry = router.cache.target(conn, db, coll) if name in NAMESPACE_COMMANDS else None
    if entry is not None:
        handler = SHARDED.get(name)
        if handler is not None:
            return handler(router, conn, db, cmd, entry)
        if name in SHARDED_DDL:
            return _broadcast(router, conn, db, cmd, entry)
        if name == "drop":
            reply = _broadcast(router, conn, db, cmd, entry, every=True)
            router_admin.forget_sharded(router, db, coll)
            return reply
        index = entry.owners()[0]
        return router.forwarded_cursor(conn, index, _unless_stale(router.strip(router.send(conn, index, db, cmd))))
    if name == "dropDatabase":
        reply = _broadcast(router, conn, db, cmd, None, every=True)
        router_admin.forget_sharded(router, db, None)
        return reply
    if name == "renameCollection":
        return _rename(router, conn, db, cmd)
    return router.forwarded_cursor(conn, 0, _unless_stale(router.strip(router.send(conn, 0, db, cmd))))


def _unless_stale(reply):
    """A shard's reply, StaleConfig raised (forward retries it: the shard refused the whole command)."""
    if _stale(reply):
        exc = _error(reply)
        exc.whole_refused = True
        raise exc
    return reply


def _broadcast(router, conn, db, cmd, entry, every=False):
    """A command on every shard (owning a chunk, or every one); the primary shard's reply, or the first
    error."""
    if entry is not None and not every:  # DDL is not versioned here: the latest owners
        entry = router.cache.refresh(entry.ns) or entry
    shards = range(len(router.cluster.shards)) if every or entry is None else entry.owners()
    first = None
    for index in shards:
        reply = router.send(conn, index, db, cmd)
        if reply.get("ok") != 1.0 and not (every and reply.get("code") == 26):
            return router.strip(reply)
        first = first or reply
    return router.strip(first)


def _rename(router, conn, db, cmd):
    """renameCollection: of a sharded collection on every shard, its routing entry renamed."""
    source = cmd.get("renameCollection")
    src_db, _, src_coll = source.partition(".") if isinstance(source, str) else ("", "", "")
    entry = router.cache.refresh(source) if isinstance(source, str) else None
    if entry is None:
        return router.strip(router.send(conn, 0, db, cmd))
    reply = _broadcast(router, conn, db, cmd, entry, every=True)
    if reply.get("ok") == 1.0:
        router_admin.rename_sharded(router, source, cmd.get("to"))
    return reply


# --- reads ---------------------------------------------------------------------------------------------

def _find(router, conn, db, cmd, entry):
    """find on a sharded collection."""
    filt = cmd.get("filter") or {}
    sort = cmd.get("sort") or {}
    skip = int(cmd.get("skip") or 0)
    limit = int(cmd.get("limit") or 0)
    sent = {k: v for k, v in cmd.items() if k not in ("skip", "limit", "batchSize", "singleBatch", "projection")}
    if limit:
        sent["limit"] = limit + skip
    sent["batchSize"] = DRAIN_BATCH
    docs = []
    for index in entry.target(filt):  # a shard's StaleConfig raises: forward runs the find again
        docs.extend(drain(router, conn, index, db, sent))
    if sort:
        sort_documents(docs, list(sort.items()))
    docs = docs[skip:]
    if limit:
        docs = docs[:limit]
    if cmd.get("projection"):
        docs = [project(d, cmd["projection"]) for d in docs]
    return _first_reply(router, "%s.%s" % (db, cmd["find"]), docs, cmd.get("batchSize"),
                        bool(cmd.get("singleBatch")))


def _count(router, conn, db, cmd, entry):
    """count: the shards' counts added, then skip and limit."""
    sent = {k: v for k, v in cmd.items() if k not in ("skip", "limit")}
    total = 0
    for index in entry.target(cmd.get("query") or {}):
        total += _checked(router.send(conn, index, db, sent)).get("n", 0)
    skip = int(cmd.get("skip") or 0)
    limit = abs(int(cmd.get("limit") or 0))
    total = max(0, total - skip)
    return {"n": min(total, limit) if limit else total, "ok": 1.0}


def _distinct(router, conn, db, cmd, entry):
    """distinct: the union of the shards' values."""
    seen = {}
    for index in entry.target(cmd.get("query") or {}):
        for value in _checked(router.send(conn, index, db, cmd)).get("values", []):
            seen.setdefault(sort_key(value), value)
    return {"values": [seen[k] for k in sorted(seen)], "ok": 1.0}


def shards_part(pipeline):
    """(the number of leading stages the shards run, the filter the aggregate is targeted by): the
    leading `$match` stages (their filters under `$and`), or a leading `$collStats` on every shard owning
    chunks. The explain of an aggregate targets by the same (router_explain.py)."""
    head = 0
    while head < len(pipeline) and isinstance(pipeline[head], dict) and list(pipeline[head]) == ["$match"]:
        head += 1
    if head == 0 and pipeline and isinstance(pipeline[0], dict) and "$collStats" in pipeline[0]:
        head = 1  # one document from every shard owning chunks (each names its shard), as mongos
    filt = {"$and": [s["$match"] for s in pipeline[:head]]} if head and "$match" in pipeline[0] else {}
    return head, filt


def _aggregate(router, conn, db, cmd, entry):
    """aggregate: the leading $match stages on the targeted shards, the rest on the router."""
    pipeline = list(cmd.get("pipeline") or [])
    if cmd.get("explain"):  # the old form of an explain: answered as the explain command's
        from . import router_explain
        return router_explain.aggregate_explain_option(router, conn, db, cmd)
    head, filt = shards_part(pipeline)
    sent = dict(cmd)
    sent["pipeline"] = pipeline[:head]
    sent["cursor"] = {"batchSize": DRAIN_BATCH}
    docs = []
    for index in entry.target(filt):
        docs.extend(drain(router, conn, index, db, sent))
    docs = run_stages(docs, pipeline[head:], None)
    return _first_reply(router, "%s.%s" % (db, cmd["aggregate"]), docs, (cmd.get("cursor") or {}).get("batchSize"))


def _coll_stats(router, conn, db, cmd, entry):
    """collStats: the shards' counts and sizes added."""
    out = None
    for index in entry.owners():
        reply = _checked(router.strip(router.send(conn, index, db, cmd)))
        if out is None:
            out = dict(reply)
            continue
        for key in ("count", "size", "storageSize", "totalIndexSize", "totalSize"):
            if isinstance(reply.get(key), (int, float)):
                out[key] = out.get(key, 0) + reply[key]
    if out.get("count"):
        out["avgObjSize"] = out.get("size", 0) // out["count"]
    out["sharded"] = True
    return out


# --- writes --------------------------------------------------------------------------------------------

def _merge_write(total, reply, offset_of):
    """Add a shard's write reply to the client's: counts, upserts and write errors with the client's
    indexes; a command error raises."""
    if reply.get("ok") != 1.0:
        raise _error(reply)
    total["n"] += reply.get("n", 0)
    if "nModified" in reply:
        total["nModified"] = total.get("nModified", 0) + reply["nModified"]
    for doc in reply.get("upserted") or []:
        doc = dict(doc)
        doc["index"] = offset_of(doc["index"])
        total.setdefault("upserted", []).append(doc)
    for error in reply.get("writeErrors") or []:
        error = dict(error)
        error["index"] = offset_of(error["index"])
        total.setdefault("writeErrors", []).append(error)
    if "writeConcernError" in reply:
        total["writeConcernError"] = reply["writeConcernError"]
    return bool(reply.get("writeErrors"))


def _finish_write(total):
    """The merged reply, write errors in batch order."""
    if "writeErrors" in total:
        total["writeErrors"].sort(key=lambda e: e["index"])
    if "upserted" in total:
        total["upserted"].sort(key=lambda e: e["index"])
    total["ok"] = 1.0
    return total


def _runs(entry, docs, positions, ordered):
    """[(shard, [positions])]: runs of consecutive documents per owning shard (ordered), or each shard's
    documents (unordered)."""
    runs = []
    for i in positions:
        shard = entry.shard_of(docs[i])
        if runs and runs[-1][0] == shard and ordered:
            runs[-1][1].append(i)
        else:
            runs.append((shard, [i]))
    if not ordered:
        grouped = {}
        for shard, idx in runs:
            grouped.setdefault(shard, []).extend(idx)
        runs = list(grouped.items())
    return runs


def _insert(router, conn, db, cmd, entry):
    """insert: runs of consecutive documents per owning shard; the documents of a run a shard refused
    as stale (and, ordered, every later one) are targeted again with the refreshed routing."""
    docs = list(cmd.get("documents") or [])
    ordered = cmd.get("ordered", True)
    total = {"n": 0}
    pending = list(range(len(docs)))
    attempts = 0
    while pending:
        retry = []
        runs = _runs(entry, docs, pending, ordered)
        for position, (shard, idx) in enumerate(runs):
            sent = dict(cmd)
            sent["documents"] = [docs[i] for i in idx]
            _statements(cmd, sent, idx)
            reply = router.send(conn, shard, db, sent)
            if _stale(reply) and _retry_locally(cmd, attempts):
                retry.extend(idx)
                if ordered:
                    retry.extend(i for _, later in runs[position + 1:] for i in later)
                    break
                continue
            failed = _merge_write(total, reply, lambda k, idx=idx: idx[k])
            if failed and ordered:
                retry = []
                break
        pending = sorted(retry)
        if pending:
            attempts += 1
            entry = _current(router, conn, db, cmd["insert"])
    return _finish_write(total)


def _changes_shard_key(entry, update):
    """Whether an update (operators or replacement) may change a shard key field."""
    if isinstance(update, list):
        return True
    if not is_operator_update(update):
        return True
    for fields in update.values():
        if isinstance(fields, dict):
            for path in fields:
                for key in entry.fields:
                    if path == key or key.startswith(path + ".") or path.startswith(key + "."):
                        return True
    return False


def _moves(router, conn, db, cmd, entry, index, coll, query, update, options, sort=None):
    """The (document, new document, new shard) of a one-document update (an update statement or a
    findAndModify, whose update options `options` holds: `collation`, `arrayFilters`) that moves it to
    another shard's chunk, or None. mongos lets the shard run the update, which answers
    WouldChangeOwningShard with the document before and after; here the router finds the document and
    computes the new one as the shard would (its collation, its checks of the update, `_id`
    immutability). An update the shard refuses (arrayFilters and pipelines, which the test server does
    not run; an `_id` change, 66) is not a move: it goes to the shard, which refuses it with its own
    error."""
    if not _changes_shard_key(entry, update):
        return None
    try:
        check_update_statement({"u": update, "arrayFilters": options.get("arrayFilters")})
    except MongoError:
        return None
    # (the find joins a transaction; a retryable write's txnNumber is not for a find: 50768 on a shard)
    session = _session_fields(cmd) if cmd.get("autocommit") is False else \
        {k: cmd[k] for k in ("lsid",) if k in cmd}
    find = {"find": coll, "filter": query or {}, "limit": 1, "batchSize": DRAIN_BATCH, **session}
    if sort:
        find["sort"] = sort
    if options.get("collation") is not None:
        find["collation"] = options["collation"]
    found = drain(router, conn, index, db, find)
    if not found:
        return None
    old = found[0]
    try:
        new = updated_document(copy.deepcopy(old), query or {}, update)
    except MongoError:
        return None
    to = entry.shard_of(new)
    return (old, new, to) if to != index else None


def _update_one_statement(router, conn, db, cmd, entry, stmt, position):
    """One update statement on its shards: (reply of the shard that ran it)."""
    targets = entry.target(stmt.get("q") or {})
    sent = dict(cmd)
    sent["updates"] = [stmt]
    _statements(cmd, sent, [position])
    if stmt.get("multi") or len(targets) == 1:
        if len(targets) == 1 and not stmt.get("multi"):
            moved = _moves(router, conn, db, cmd, entry, targets[0], cmd["update"], stmt.get("q"), stmt.get("u"),
                           stmt)
            if moved is not None:
                from . import router_txn
                return router_txn.move_document(router, conn, db, cmd, entry, targets[0], moved, cmd["update"])
        replies = [router.send(conn, index, db, sent) for index in targets]
        return _sum(replies)
    reply = None
    for index in targets:
        reply = router.send(conn, index, db, sent)
        if reply.get("ok") != 1.0 or reply.get("n") or reply.get("writeErrors"):
            return reply
    return reply


def _sum(replies):
    """Replies of one statement run on several shards, added."""
    out = {"n": 0, "nModified": 0, "ok": 1.0}
    for reply in replies:
        if reply.get("ok") != 1.0 or reply.get("writeErrors"):
            return reply
        out["n"] += reply.get("n", 0)
        out["nModified"] += reply.get("nModified", 0)
        if reply.get("upserted"):
            out["upserted"] = reply["upserted"]
        if "writeConcernError" in reply:
            out["writeConcernError"] = reply["writeConcernError"]
    return out


def _statement_retried(router, conn, db, cmd, entry, run):
    """run(entry) of one write statement, run again with the refreshed routing while a shard refuses it
    as stale (outside a transaction; raised there, for forward): (reply, the routing entry it ran with).
    The command's later statements must be targeted with that entry: the versions the router attaches
    are the refreshed entry's (shard_version.attach), and a statement targeted with the old chunks but
    sent with the new versions would pass the shard's check and write where its chunk no longer is."""
    attempts = 0
    while True:
        try:
            reply = run(entry)
        except MongoError as exc:
            if exc.code != STALE_CONFIG or not _retry_locally(cmd, attempts):
                raise
            reply = exc.to_reply()
        if not _stale(reply):
            return reply, entry
        if not _retry_locally(cmd, attempts):
            raise _error(reply)
        attempts += 1
        entry = _current(router, conn, db, next(iter(cmd.values())), reply)


def _update(router, conn, db, cmd, entry):
    """update: statement by statement."""
    total = {"n": 0, "nModified": 0}
    for i, stmt in enumerate(cmd.get("updates") or []):
        reply, entry = _statement_retried(router, conn, db, cmd, entry, lambda e, stmt=stmt, i=i:
                                          _update_one_statement(router, conn, db, cmd, e, stmt, i))
        failed = _merge_write(total, reply, lambda k, i=i: i)
        if failed and cmd.get("ordered", True):
            break
    return _finish_write(total)


def _delete(router, conn, db, cmd, entry):
    """delete: statement by statement; a one-document delete on each targeted shard until one deletes."""
    total = {"n": 0}
    for i, stmt in enumerate(cmd.get("deletes") or []):
        reply, entry = _statement_retried(router, conn, db, cmd, entry, lambda e, stmt=stmt, i=i:
                                          _delete_one_statement(router, conn, db, cmd, e, stmt, i))
        failed = _merge_write(total, reply, lambda k, i=i: i)
        if failed and cmd.get("ordered", True):
            break
    return _finish_write(total)


def _delete_one_statement(router, conn, db, cmd, entry, stmt, position):
    """One delete statement on its shards; a one-document delete on each targeted shard until one
    deletes."""
    sent = dict(cmd)
    sent["deletes"] = [stmt]
    _statements(cmd, sent, [position])
    targets = entry.target(stmt.get("q") or {})
    if stmt.get("limit") == 1:
        reply = None
        for index in targets:
            reply = router.send(conn, index, db, sent)
            if reply.get("ok") != 1.0 or reply.get("n") or reply.get("writeErrors"):
                break
        return reply
    return _sum([router.send(conn, index, db, sent) for index in targets])


def _find_and_modify(router, conn, db, cmd, entry):
    """findAndModify on the shard its query targets (mongos 6.0 needs the full shard key: the shard
    refuses it otherwise, as sharding.py has it); a one-shard query's shards in turn otherwise. An update
    that moves the document to another shard's chunk is a delete and an insert, as for update (mongos's
    cluster_find_and_modify_cmd.cpp on the shard's WouldChangeOwningShard)."""
    targets = entry.target(cmd.get("query") or {})
    if len(targets) == 1 and not cmd.get("remove") and cmd.get("update") is not None:
        moved = _moves(router, conn, db, cmd, entry, targets[0], cmd["findAndModify"], cmd.get("query"),
                       cmd["update"], cmd, cmd.get("sort"))
        if moved is not None:
            from . import router_txn
            reply = router_txn.move_document(router, conn, db, cmd, entry, targets[0], moved, cmd["findAndModify"])
            return _moved_reply(router, cmd, moved, reply)
    reply = None
    for index in targets:
        reply = _unless_stale(router.strip(router.send(conn, index, db, cmd)))
        if reply.get("ok") != 1.0 or reply.get("value") is not None \
                or (reply.get("lastErrorObject") or {}).get("n"):
            return reply
    return reply


def _moved_reply(router, cmd, moved, reply):
    """findAndModify's reply to a move (router_txn.move_document's update reply): the document before or
    (`new`) after, projected; a write error as the command's error."""
    if reply.get("ok") != 1.0:
        return _unless_stale(router.strip(reply))
    if reply.get("writeErrors"):
        error = reply["writeErrors"][0]
        out = {"ok": 0.0, "code": error.get("code", 1), "errmsg": error.get("errmsg", "")}
        if "codeName" in error:
            out["codeName"] = error["codeName"]
        return out
    old, new, _ = moved
    value = new if cmd.get("new") else old
    if cmd.get("fields"):
        value = project(value, cmd["fields"])
    return {"lastErrorObject": {"n": 1, "updatedExisting": True}, "value": value, "ok": 1.0}


SHARDED = {"find": _find, "count": _count, "distinct": _distinct, "aggregate": _aggregate,
           "collStats": _coll_stats, "insert": _insert, "update": _update, "delete": _delete,
           "findAndModify": _find_and_modify}
COMMANDS = {}
