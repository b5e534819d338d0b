"""Matching rules of MongoDB's unified test format, and the conversion of the older (legacy) transactions,
convenient-transactions and retryable-writes test formats into it, for spec_runner.py.

The rules follow mongodb/specifications source/unified-test-format ("Evaluating Matches"): numbers compare
by value, root-level documents may have extra fields and nested ones may not, and the special operators
$$exists, $$type, $$unsetOrMatches, $$sessionLsid, $$matchesEntity, $$matchesHexBytes, $$lte and
$$matchAsDocument/$$matchAsRoot. The legacy formats are described in the README of each specification's
test directory (transactions/tests/legacy, retryable-writes/tests/legacy): their placeholders (null for
"absent", "session0" for an lsid, 42 for an afterClusterTime or recoveryToken) become those operators.
"""

import copy
import datetime
import re

from bson.binary import Binary
from bson.code import Code
from bson.decimal128 import Decimal128
from bson.int64 import Int64
from bson.max_key import MaxKey
from bson.min_key import MinKey
from bson.objectid import ObjectId
from bson.regex import Regex
from bson.timestamp import Timestamp


class MatchError(AssertionError):
    """An expected value that the actual value does not match; the message names the path."""


def _is_number(value):
    return isinstance(value, (int, float, Int64)) and not isinstance(value, bool)


TYPE_CHECKS = {
    "double": lambda v: isinstance(v, float),
    "string": lambda v: isinstance(v, str),
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "binData": lambda v: isinstance(v, (Binary, bytes)),
    "objectId": lambda v: isinstance(v, ObjectId),
    "bool": lambda v: isinstance(v, bool),
    "date": lambda v: isinstance(v, datetime.datetime),
    "null": lambda v: v is None,
    "regex": lambda v: isinstance(v, (Regex, re.Pattern)),
    "dbPointer": lambda v: type(v).__name__ == "DBPointer",
    "javascript": lambda v: isinstance(v, Code) and v.scope is None,
    "javascriptWithScope": lambda v: isinstance(v, Code) and v.scope is not None,
    "int": lambda v: isinstance(v, int) and not isinstance(v, (bool, Int64)),
    "timestamp": lambda v: isinstance(v, Timestamp),
    "long": lambda v: isinstance(v, Int64),
    "decimal": lambda v: isinstance(v, Decimal128),
    "minKey": lambda v: isinstance(v, MinKey),
    "maxKey": lambda v: isinstance(v, MaxKey),
    "number": lambda v: _is_number(v) or isinstance(v, Decimal128),
}


def _special(expected):
    """The $$operator name when `expected` is a one-key document {$$op: ...}, else None."""
    if isinstance(expected, dict) and len(expected) == 1:
        key = next(iter(expected))
        if key.startswith("$$"):
            return key
    return None


def match(expected, actual, entities, root=True, path="$"):
    """Raise MatchError unless `actual` matches `expected` (root: extra fields allowed at this level)."""
    op = _special(expected)
    if op is not None:
        return _match_operator(op, expected[op], actual, entities, root, path)
    if isinstance(expected, dict):
        if not isinstance(actual, dict):
            raise MatchError("%s: expected a document, got %r" % (path, actual))
        for key, value in expected.items():
            sub = "%s.%s" % (path, key)
            op = _special(value)
            if op == "$$exists":
                if (key in actual) != bool(value[op]):
                    raise MatchError("%s: expected %s" % (sub, "present" if value[op] else "absent"))
                continue
            if op == "$$unsetOrMatches" and key not in actual:
                continue
            if key not in actual:
                raise MatchError("%s: missing (expected %r)" % (sub, value))
            match(value, actual[key], entities, False, sub)
        if not root:
            extra = [k for k in actual if k not in expected]
            if extra:
                raise MatchError("%s: unexpected fields %s in a nested document" % (path, extra))
        return None
    if isinstance(expected, list):
        if not isinstance(actual, list) or len(actual) != len(expected):
            raise MatchError("%s: expected %r, got %r" % (path, expected, actual))
        for i, (e, a) in enumerate(zip(expected, actual)):
            match(e, a, entities, False, "%s[%d]" % (path, i))
        return None
    if _is_number(expected) and _is_number(actual):
        if float(expected) != float(actual):
            raise MatchError("%s: expected %r, got %r" % (path, expected, actual))
        return None
    if type(expected) is not type(actual) and not (isinstance(expected, bytes) and isinstance(actual, bytes)):
        raise MatchError("%s: expected %r (%s), got %r (%s)" % (path, expected, type(expected).__name__,
                                                                 actual, type(actual).__name__))
    if expected != actual:
        raise MatchError("%s: expected %r, got %r" % (path, expected, actual))
    return None


def match_root_documents(expected, actual, entities, path="$"):
    """An iterable result (find, aggregate): same length, each document matched as a root-level one."""
    if not isinstance(expected, list) or not isinstance(actual, list) or len(expected) != len(actual):
        raise MatchError("%s: expected %r, got %r" % (path, expected, actual))
    for i, (e, a) in enumerate(zip(expected, actual)):
        match(e, a, entities, True, "%s[%d]" % (path, i))


def _match_operator(op, arg, actual, entities, root, path):
    """The special operators of the unified format's matching rules."""
    if op == "$$unsetOrMatches":
        return match(arg, actual, entities, root, path)
    if op == "$$exists":
        if not arg:
            raise MatchError("%s: expected absent" % path)
        return None
    if op == "$$type":
        names = arg if isinstance(arg, list) else [arg]
        if not any(TYPE_CHECKS[name](actual) for name in names):
            raise MatchError("%s: %r is not of type %s" % (path, actual, names))
        return None
    if op == "$$sessionLsid":
        return match(entities.lsid(arg), actual, entities, False, path)
    if op == "$$matchesEntity":
        return match(entities.get(arg), actual, entities, root, path)
    if op == "$$matchesHexBytes":
        if bytes(actual) != bytes.fromhex(arg):
            raise MatchError("%s: expected bytes %s" % (path, arg))
        return None
    if op == "$$lte":
        if not (_is_number(actual) and actual <= arg):
            raise MatchError("%s: expected <= %r, got %r" % (path, arg, actual))
        return None
    raise MatchError("%s: operator %s is not supported by this runner" % (path, op))


# ---------------------------------------------------------------------------------------------------------
# Legacy formats -> unified format

LEGACY_DEFAULT_DB, LEGACY_DEFAULT_COLL = "retryable-writes-tests", "coll"


def _legacy_command(value, key=None):
    """A legacy expected command value with its placeholders turned into unified operators."""
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if v is None:
                out[k] = {"$$exists": False}
            elif k == "lsid" and isinstance(v, str):
                out[k] = {"$$sessionLsid": v}
            elif k in ("afterClusterTime", "recoveryToken") and v == 42:
                out[k] = {"$$exists": True}
            elif k == "updates" and isinstance(v, list):
                out[k] = [_legacy_update_statement(u) for u in v]
            elif k == "getMore" and v in (42, Int64(42)):
                out[k] = {"$$type": ["int", "long"]}
            else:
                out[k] = _legacy_command(v, k)
        return out
    if isinstance(value, list):
        return [_legacy_command(v) for v in value]
    return value


def _legacy_update_statement(stmt):
    """An expected update statement; a driver may send multi/upsert at their defaults (false), as the
    specifications' own conversion of these files to the unified format allows."""
    out = _legacy_command(stmt)
    for key in ("multi", "upsert"):
        out.setdefault(key, {"$$unsetOrMatches": False})
    return out


def _legacy_error(result, op_error):
    """The unified expectError for a legacy operation whose `result` names an error, or None."""
    keys = ("errorContains", "errorCodeName", "errorLabelsContain", "errorLabelsOmit")
    if isinstance(result, dict) and any(k in result for k in keys):
        return {k: result[k] for k in keys if k in result}
    if op_error:
        return {"isError": True}
    return None


def _legacy_operation(op):
    """One legacy operation as a unified one (object names become entity ids)."""
    obj = op.get("object", "collection")
    out = {"name": op["name"], "object": {"collection": "collection0", "database": "database0"}.get(obj, obj)}
    args = copy.deepcopy(op.get("arguments") or {})
    if op["name"] == "withTransaction":
        args["callback"] = [_legacy_operation(o) for o in args["callback"]["operations"]]
    if op["name"] == "runCommand" and "command_name" in op:
        args["commandName"] = op["command_name"]
    if obj == "testRunner" and op["name"] == "failPoint":
        args.setdefault("client", "client0")
    out["arguments"] = args
    for key in ("collectionOptions", "databaseOptions"):
        if key in op:
            out[key] = op[key]
    error = _legacy_error(op.get("result"), op.get("error"))
    if error is not None:
        out["expectError"] = error
    elif "result" in op:
        out["expectResult"] = op["result"]
    return out


def _legacy_outcome(outcome, db, coll):
    """Unified outcome collections from a legacy outcome."""
    if not outcome or "collection" not in outcome:
        return None
    return [{"collectionName": outcome["collection"].get("name", coll), "databaseName": db,
             "documents": outcome["collection"]["data"]}]


def _legacy_test(test, db, coll):
    """One legacy test as a unified test; entities are created per test (clientOptions differ)."""
    client = {"id": "client0", "observeEvents": ["commandStartedEvent"],
              "uriOptions": dict(test.get("clientOptions") or {}),
              "useMultipleMongoses": bool(test.get("useMultipleMongoses"))}
    entities = [{"client": client}, {"database": {"id": "database0", "client": "client0", "databaseName": db}},
                {"collection": {"id": "collection0", "database": "database0", "collectionName": coll}}]
    for name in ("session0", "session1"):
        opts = (test.get("sessionOptions") or {}).get(name)
        entities.append({"session": dict({"id": name, "client": "client0"},
                                         **({"sessionOptions": opts} if opts else {}))})
    out = {"description": test["description"], "entities": entities, "operations": []}
    if "skipReason" in test:
        out["skipReason"] = test["skipReason"]
    if "failPoint" in test:
        out["failPoint"] = test["failPoint"]
    if "operations" in test:
        out["operations"] = [_legacy_operation(op) for op in test["operations"]]
    else:  # retryable-writes format: one operation, its result and error in `outcome`
        op = dict(test["operation"], object="collection")
        outcome = test.get("outcome") or {}
        op["error"] = outcome.get("error")
        if "result" in outcome:
            op["result"] = outcome["result"]
        converted = _legacy_operation(op)
        if outcome.get("error") and isinstance(outcome.get("result"), dict):
            labels = {k: v for k, v in outcome["result"].items() if k.startswith("errorLabels")}
            converted["expectError"] = dict({"isError": True}, **labels)
            converted.pop("expectResult", None)
        out["operations"] = [converted]
    if "expectations" in test:
        events = [{"commandStartedEvent": {"command": _legacy_command(e["command_started_event"]["command"]),
                                           "commandName": e["command_started_event"]["command_name"],
                                           "databaseName": e["command_started_event"]["database_name"]}}
                  for e in test["expectations"]]
        out["expectEvents"] = [{"client": "client0", "events": events}]
    outcome = _legacy_outcome(test.get("outcome"), db, coll)
    if outcome:
        out["outcome"] = outcome
    return out


def from_legacy(doc):
    """A legacy test file (transactions, convenient transactions, retryable writes) as a unified one."""
    db = doc.get("database_name", LEGACY_DEFAULT_DB)
    coll = doc.get("collection_name", LEGACY_DEFAULT_COLL)
    run_on = []
    for req in doc.get("runOn") or [{}]:
        req = dict(req)
        if "topology" in req:
            req["topologies"] = req.pop("topology")
        run_on.append(req)
    return {"schemaVersion": "legacy", "runOnRequirements": run_on, "legacyEntities": True,
            "initialData": [{"collectionName": coll, "databaseName": db, "documents": doc.get("data") or []}],
            "tests": [_legacy_test(t, db, coll) for t in doc["tests"]]}
