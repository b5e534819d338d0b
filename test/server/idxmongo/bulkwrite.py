"""mongod 8.0's `bulkWrite` admin command (wire version 25), served only with --bulk-write.

One command writes to several namespaces (src/mongo/db/commands/bulk_write.cpp, bulk_write.idl):

    {bulkWrite: 1, ops: [{insert: <nsInfo index>, document: {...}},
                         {update: <i>, filter, updateMods, upsert, multi, collation, arrayFilters, hint},
                         {delete: <i>, filter, multi, collation, hint}],
     nsInfo: [{ns: "db.coll"}], ordered: true, errorsOnly: false, bypassDocumentValidation, comment, let,
     cursor: {batchSize}, writeConcern, lsid, txnNumber, ...}

It runs against the admin database only. The reply is ok:1 with the counts nErrors, nInserted, nMatched,
nModified, nUpserted, nDeleted and a cursor (ns "admin.$cmd.bulkWrite") of per-op results {ok, idx, n,
nModified, upserted: {_id}} (errorsOnly: only the failed ones, {ok: 0, idx, code, errmsg, ...}). Ordered
ops stop at the first error; unordered ones go on. Inside a transaction the first error ends the command
and aborts the transaction; a transient error (WriteConflict...) is the command's error instead. A
retryable write (txnNumber without autocommit) numbers its statements by op index (`stmtIds[i]`, or
`stmtId + i`; both given is InvalidOptions 72, a `stmtIds` of another length than `ops` InvalidLength 16:
bulk_write_common.cpp, validateRequest); an op an earlier attempt executed is not executed again and
counts as mongod rebuilds it (an insert or delete n 1, an update n 1 and nModified 1), and the reply lists
its id in `retriedStmtIds`. A multi-document update or delete in a retryable bulkWrite is that op's error
InvalidOptions (72) "Cannot use retryable writes with multi=true" (handleUpdateOp, handleDeleteOp). Inside a
transaction a non-transient error of an op (a duplicate key: E11000) is that op's error in the cursor and
aborts the transaction, a transient one is the command's error (write_ops_exec.cpp, handleError). The
whole reply is in the first batch (the test server never opens a cursor for it), as mongod does for
replies that fit.
"""

from .errors import INTERRUPTION_CODES, MongoError
from .txnrules import is_transient

COMMAND_FIELDS = {"bulkWrite", "ops", "nsInfo", "ordered", "errorsOnly", "bypassDocumentValidation", "comment",
                  "let", "cursor", "writeConcern", "lsid", "txnNumber", "autocommit", "startTransaction",
                  "$db", "$clusterTime", "$readPreference", "readConcern", "maxTimeMS", "stmtId", "stmtIds",
                  "apiVersion", "apiStrict", "apiDeprecationErrors"}
OP_FIELDS = {
    "insert": {"insert", "document"},
    "update": {"update", "filter", "updateMods", "upsert", "multi", "collation", "arrayFilters", "hint",
               "sort", "upsertSupplied", "constants"},
    "delete": {"delete", "filter", "multi", "collation", "hint"},
}
NS_FIELDS = {"ns", "collectionUUID", "encryptionInformation", "isTimeseriesNamespace"}


def _unknown(where, field):
    """IDL's error for a field a struct does not know (40415)."""
    return MongoError(40415, "BSON field '%s.%s' is an unknown field." % (where, field))


def _check_command(ctx):
    """The command's own fields, as bulk_write.idl parses them."""
    cmd = ctx.cmd
    if ctx.db != "admin":
        raise MongoError(13, "bulkWrite may only be run against the admin database.")
    for field in cmd:
        if field not in COMMAND_FIELDS:
            raise _unknown("bulkWrite", field)
    for field in ("ops", "nsInfo"):
        if field not in cmd:
            raise MongoError(40414, "BSON field 'bulkWrite.%s' is missing but a required field" % field)
        if not isinstance(cmd[field], list):
            raise MongoError(14, "BSON field 'bulkWrite.%s' is the wrong type '%s', expected type 'array'"
                             % (field, type(cmd[field]).__name__))
    if not cmd["ops"]:
        raise MongoError(2, "Write commands must have at least one write operation")  # BadValue
    if not cmd["nsInfo"]:
        raise MongoError(2, "nsInfo field must be a non-empty array")
    for field in ("ordered", "errorsOnly", "bypassDocumentValidation"):
        if field in cmd and not isinstance(cmd[field], bool):
            raise MongoError(14, "BSON field 'bulkWrite.%s' is the wrong type, expected type 'bool'" % field)
    if "stmtId" in cmd and "stmtIds" in cmd:
        raise MongoError(72, "May not specify both stmtId and stmtIds in bulkWrite command.")
    if isinstance(cmd.get("stmtIds"), list) and len(cmd["stmtIds"]) != len(cmd["ops"]):
        raise MongoError(16, "Number of statement ids must match the number of batch entries. Got %d statement "
                             "ids but %d operations." % (len(cmd["stmtIds"]), len(cmd["ops"])))


def _namespaces(ctx):
    """The (db, collection) of each nsInfo entry."""
    result = []
    for entry in ctx.cmd["nsInfo"]:
        if not isinstance(entry, dict) or not isinstance(entry.get("ns"), str):
            raise MongoError(40414, "BSON field 'bulkWrite.nsInfo.ns' is missing but a required field")
        for field in entry:
            if field not in NS_FIELDS:
                raise _unknown("bulkWrite.nsInfo", field)
        db, dot, coll = entry["ns"].partition(".")
        if not dot or not db or not coll:
            raise MongoError(73, "Invalid namespace specified '%s'" % entry["ns"])
        result.append((db, coll))
    return result


def _parse_op(op, nns):
    """(kind, nsInfo index) of one op, its fields checked as the IDL checks them."""
    if not isinstance(op, dict):
        raise MongoError(14, "BSON field 'bulkWrite.ops' has an element of the wrong type")
    kinds = [kind for kind in OP_FIELDS if kind in op]
    if len(kinds) != 1:
        raise MongoError(2, "BulkWrite ops entry must contain exactly one of insert, update or delete")
    kind = kinds[0]
    for field in op:
        if field not in OP_FIELDS[kind]:
            raise _unknown("bulkWrite.ops", field)
    index = op[kind]
    if isinstance(index, bool) or not isinstance(index, int):
        raise MongoError(14, "BSON field 'bulkWrite.ops.%s' is the wrong type, expected type 'int'" % kind)
    if index < 0 or index >= nns:
        raise MongoError(2, "BulkWrite ops entry %s field's index %d is out of range of nsInfo" % (kind, index))
    required = {"insert": ("document",), "update": ("filter", "updateMods"), "delete": ("filter",)}[kind]
    for field in required:
        if not isinstance(op.get(field), dict) and not (field == "updateMods" and isinstance(op.get(field), list)):
            raise MongoError(40414, "BSON field 'bulkWrite.ops.%s' is missing but a required field" % field)
    return kind, index


def _refuse_multi_retry(ctx, multi):
    """A multi-document op cannot be part of a retryable bulkWrite (InvalidOptions, bulkWrite's text)."""
    if multi and ctx.retry is not None:
        raise MongoError(72, "Cannot use retryable writes with multi=true")


def _run_insert(ctx, coll_name, index, op):
    """One insert op."""
    from .cmd_crud import prepare_insert
    ctx.server.counters["insert"] += 1
    if ctx.previous_outcome(index) is not None:
        return {"ok": 1.0, "idx": index, "n": 1}
    doc = prepare_insert(op["document"])
    ctx.statement(lambda: ctx.insert_doc(ctx.ensure_coll(coll_name), doc))
    ctx.record_outcome(index, {"n": 1})
    return {"ok": 1.0, "idx": index, "n": 1}


def _run_update(ctx, coll_name, index, op):
    """One update op, through the update command's statement."""
    from .cmd_crud import _apply_statement, _record_update
    ctx.server.counters["update"] += 1
    _refuse_multi_retry(ctx, op.get("multi", False))
    prior = ctx.previous_outcome(index)
    if prior is not None:
        result = {"ok": 1.0, "idx": index, "n": prior["n"], "nModified": prior["nModified"]}
        if "upserted" in prior:
            result["upserted"] = {"_id": prior["upserted"]}
        return result
    stmt = {"q": op["filter"], "u": op["updateMods"], "upsert": op.get("upsert", False),
            "multi": op.get("multi", False), "collation": op.get("collation"),
            "arrayFilters": op.get("arrayFilters")}
    upserted = []
    matched, changed = _apply_statement(ctx, coll_name, index, stmt, upserted)
    _record_update(ctx, index, changed, upserted)
    result = {"ok": 1.0, "idx": index, "n": matched, "nModified": changed}
    if upserted:
        result["upserted"] = {"_id": upserted[-1]["_id"]}
    return result


def _run_delete(ctx, coll_name, index, op):
    """One delete op: all matches (multi) or the first."""
    from .cmd_crud import check_delete, delete_statement
    ctx.server.counters["delete"] += 1
    multi = bool(op.get("multi", False))
    _refuse_multi_retry(ctx, multi)
    if ctx.previous_outcome(index) is not None:
        return {"ok": 1.0, "idx": index, "n": 1}
    coll = ctx.coll(coll_name)
    stmt = {"q": op["filter"], "limit": 0 if multi else 1, "collation": op.get("collation")}
    check_delete(coll, stmt)
    return {"ok": 1.0, "idx": index, "n": delete_statement(ctx, coll_name, index, stmt)}


RUNNERS = {"insert": _run_insert, "update": _run_update, "delete": _run_delete}
COUNTERS = {"insert": "nInserted", "delete": "nDeleted"}


def _count(totals, kind, result):
    """Add one successful op's result to the reply's counts."""
    if kind == "update":
        if "upserted" in result:
            totals["nUpserted"] += 1
        else:
            totals["nMatched"] += result["n"]
        totals["nModified"] += result["nModified"]
    else:
        totals[COUNTERS[kind]] += result["n"]


def _run_op(ctx, namespaces, index, op):
    """Run one op in its namespace (the context's database and command name switched for it)."""
    kind, ns_index = _parse_op(op, len(namespaces))
    db, coll_name = namespaces[ns_index]
    saved = ctx.db, ctx.name
    ctx.db, ctx.name = db, kind
    try:
        ctx.wait_for_write_lock(coll_name)
        return kind, RUNNERS[kind](ctx, coll_name, index, op)
    finally:
        ctx.db, ctx.name = saved


def cmd_bulk_write(ctx):
    """bulkWrite: the ops in order; ordered (default) stops at the first error, and so does any error in a
    transaction, which it aborts (a transient one is the command's error)."""
    _check_command(ctx)
    cmd = ctx.cmd
    namespaces = _namespaces(ctx)
    for op in cmd["ops"]:
        _parse_op(op, len(namespaces))  # the whole command is parsed before anything runs
    ordered = cmd.get("ordered", True)
    errors_only = cmd.get("errorsOnly", False)
    totals = {"nErrors": 0, "nInserted": 0, "nMatched": 0, "nModified": 0, "nUpserted": 0, "nDeleted": 0}
    results = []
    for index, op in enumerate(cmd["ops"]):
        try:
            kind, result = _run_op(ctx, namespaces, index, op)
        except MongoError as exc:
            if ctx.txn is not None:
                ctx.server.abort_on_error(ctx)
                if is_transient(exc.code, False):
                    raise
            if exc.code in INTERRUPTION_CODES:
                raise  # an interruption fails the whole command (bulk_write.cpp, as write_ops_exec.cpp)
            entry = {"ok": 0.0, "idx": index, "code": exc.code, "errmsg": exc.errmsg}
            entry.update(exc.extra)
            results.append(entry)
            totals["nErrors"] += 1
            if ordered or ctx.txn is not None:
                break
            continue
        _count(totals, kind, result)
        if not errors_only:
            results.append(result)
    reply = {"cursor": {"id": 0, "firstBatch": results, "ns": "admin.$cmd.bulkWrite"}}
    reply.update(totals)
    reply["ok"] = 1.0
    return reply


COMMANDS = {"bulkWrite": cmd_bulk_write}
