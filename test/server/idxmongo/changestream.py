"""Change streams: `aggregate` with `$changeStream` and its tailable, awaitData cursors, as mongod 6.0-8.0
runs them (pipeline/document_source_change_stream*.cpp, commands/getmore_cmd.cpp; see
/work/shared/notes/change-streams-facts.md and test/server/README.md, "Change streams").

Events are read from the server's history (changelog.py). A stream has a position (the key of the last
entry it scanned) and a postBatchResumeToken; the initial aggregate never waits, a getMore waits up to its
maxTimeMS (default 1 s) for an event without holding the store lock.
"""

import copy
import struct
import threading
import time
import zlib

from bson.int64 import Int64
from bson.raw_bson import RawBSONDocument
from bson.timestamp import Timestamp

from . import changelog, changesplit, rawbson
from .bsonkeys import sort_key
from .changelog import DOC_OPS, Entry, decode_token, hwm_key, key_time, token, token_fragment, wall_date
from .codec import encode
from .cursors import DEFAULT_FIRST_BATCH, MAX_BATCH_BYTES
from .errors import MongoError, bad_value, from_mongomock
from .matcher import compile_filter
from .mockops import run_stages
from .retry import RETRIABLE_CODES

OPTIONS = {"resumeAfter", "startAfter", "startAtOperationTime", "fullDocument", "fullDocumentBeforeChange",
           "allChangesForCluster", "showExpandedEvents", "showMigrationEvents", "showSystemEvents"}
# Stages allowed after $changeStream (docs/change_streams.md of mongod); other known ones: 20.
ALLOWED_STAGES = {"$addFields", "$match", "$project", "$replaceRoot", "$replaceWith", "$redact", "$set",
                  "$unset", "$changeStreamSplitLargeEvent"}
KNOWN_STAGES = ALLOWED_STAGES | {
    "$bucket", "$bucketAuto", "$collStats", "$count", "$densify", "$facet", "$fill", "$geoNear",
    "$graphLookup", "$group", "$indexStats", "$limit", "$lookup", "$merge", "$out", "$sample", "$search",
    "$setWindowFields", "$skip", "$sort", "$sortByCount", "$unionWith", "$unwind", "$documents",
    "$changeStream", "$currentOp", "$listSessions", "$planCacheStats"}
# Codes mongod labels ResumableChangeStreamError on a change stream's aggregate or getMore
# (error_labels.cpp: retriable, network and retargeting errors, RetryChangeStream 234,
# FailedToSatisfyReadPreference 133).
RESUMABLE_CODES = RETRIABLE_CODES | {63, 133, 150, 234, 13388}
DEFAULT_AWAIT_MS = 1000
SCAN_CHUNK = 1000
INTERNAL_DBS = {"admin", "config", "local"}
NO_OP = "noop"
EXACT_TYPES = {str, int, bool, type(None), Int64}
DOUBLE = struct.Struct("<d")


def is_change_stream(cmd):
    """True for an aggregate whose first stage is $changeStream."""
    pipeline = cmd.get("pipeline")
    return (isinstance(pipeline, list) and pipeline and isinstance(pipeline[0], dict)
            and "$changeStream" in pipeline[0])


class StreamCursor:
    """One open change stream: what it watches, where it is, its pipeline after $changeStream."""

    is_stream = True

    def __init__(self, ns, db, coll, spec, stages, position, start_token, session):
        self.id = 0
        self.ns = ns
        self.db = db  # None: the whole cluster
        self.coll = coll  # None: a database or cluster stream
        self.full_document = spec.get("fullDocument", "default")
        self.before_change = spec.get("fullDocumentBeforeChange", "off")
        self.stages = stages
        self.match_only = all(isinstance(st, dict) and list(st) == ["$match"] for st in stages)
        self.match = None  # the compiled $match stages (match_only)
        self.early = None  # whether they refer to _EARLY_FIELDS only
        self.early_lsid = self.early_number = False  # whether they refer to lsid, to txnNumber
        self.early_seen = {}  # (op, db, coll, to, session) -> whether _filtered_early drops it
        self.lsid_key = (None, None)  # the last transaction's lsid object and its key in early_seen
        self.verdicts = {}  # (op, db, coll) -> whether _returns keeps an entry outside a transaction
        self.position = position  # key of the last entry scanned (or the start position)
        self.pbrt = start_token
        self.last_returned = None  # key of the last event returned
        self.session = session  # the lsid id bytes of the aggregate, or None
        self.split = False  # $changeStreamSplitLargeEvent (changesplit.py)
        self.resume_fragment = None  # (event key, fragment number) of a resume after a fragment
        self.pending = []  # (key, token, BSON) of fragments not returned yet
        self.invalidated = False
        self.memo = {"lsid": (None, b"")}  # rawbson.document's: the last lsid's element
        self.lock = threading.Lock()
        self.last_used = time.monotonic()
        self.member = 0  # the replica-set member it was opened on (repl.py: what it has applied)


# --- recording (called by context.py for every change) -------------------------------------------------

def doc_entry(op, coll, doc_id, doc=None, desc=None, pre=None, post=None):
    """An entry for a change to one document (`doc`: the new document of an insert or replace); with the
    collection's changeStreamPreAndPostImages enabled, the document before (`pre`) and, for an update,
    after (`post`) the change, as mongod then records them."""
    entry = Entry(op, coll.db, coll.name, doc_id, doc, desc)
    if (coll.options.get("changeStreamPreAndPostImages") or {}).get("enabled"):
        entry.pre, entry.post = pre, post
    return entry


def update_entry(coll, old, new, replacement):
    """The entry of an update: `replace` for a replacement, else `update` with the difference of the two
    documents as updateDescription (mongod derives it from the update's oplog delta; the client sees the
    same fields, see README)."""
    if replacement:
        return doc_entry("replace", coll, new["_id"], doc=new, pre=old)
    updated, removed, truncated = {}, [], []
    _diff(old, new, "", updated, removed, truncated)
    return doc_entry("update", coll, new["_id"], desc={
        "updatedFields": updated, "removedFields": removed, "truncatedArrays": truncated}, pre=old, post=new)


def _diff(old, new, prefix, updated, removed, truncated):
    """Dotted paths of what changed from `old` to `new` (documents)."""
    for name, value in new.items():
        path = prefix + name
        if name not in old:
            updated[path] = value
        elif not _same(old[name], value):
            _diff_value(old[name], value, path, updated, removed, truncated)
    removed.extend(prefix + name for name in old if name not in new)


def _diff_value(old, new, path, updated, removed, truncated):
    """The change of one field: into sub-documents and arrays element by element, else the new value."""
    if isinstance(old, dict) and isinstance(new, dict) and list(old)[:1] == list(new)[:1] and old and new:
        _diff(old, new, path + ".", updated, removed, truncated)
    elif isinstance(old, list) and isinstance(new, list) and old and new:
        if len(new) < len(old):
            truncated.append({"field": path, "newSize": len(new)})
        for i, value in enumerate(new):
            if i >= len(old) or not _same(old[i], value):
                updated["%s.%d" % (path, i)] = value
    else:
        updated[path] = new


def _same(a, b):
    """BSON equality (types and field order matter); strings, integers, booleans and null compare as
    values, doubles bit for bit (-0.0 and NaNs), other types by their encoding (the journal's replay
    computes every update's description here, so the common types must be cheap)."""
    if type(a) is not type(b):
        return False
    if type(a) in EXACT_TYPES:
        return a == b
    if type(a) is float:
        return DOUBLE.pack(a) == DOUBLE.pack(b)
    return encode({"v": a}) == encode({"v": b})


def drop_entry(db, name):
    """A drop of a collection."""
    return Entry("drop", db, name)


def rename_entry(db, name, to_db, to_name):
    """A rename of a collection."""
    return Entry("rename", db, name, to={"db": to_db, "coll": to_name})


def drop_database_entry(db):
    """A drop of a database (after one drop entry per collection)."""
    return Entry("dropDatabase", db, None)


def stamp_commit(entries, ts, wall, txn_number, lsid):
    """A transaction's entries at its commit: all at the commit's time, numbered by txnOpIndex, with the
    transaction's txnNumber and lsid (document_source_change_stream_unwind_transaction.cpp)."""
    for index, entry in enumerate(entries):
        entry.txn = (Int64(txn_number), lsid)
        entry.stamp(ts, wall, index)
    return entries


def noop_entry():
    """mongod's periodic no-op: moves idle streams' postBatchResumeToken, never an event."""
    return Entry(NO_OP, None, None)


# --- opening --------------------------------------------------------------------------------------------

def _parse_spec(spec):
    """Validate the $changeStream stage's options (an IDL struct on mongod: unknown fields are refused)."""
    if not isinstance(spec, dict):
        raise MongoError(50808, "$changeStream stage expects a document as argument")
    for field in spec:
        if field not in OPTIONS:
            raise MongoError(40415, "BSON field '$changeStream.%s' is an unknown field." % field)
    if "resumeAfter" in spec and "startAfter" in spec:
        raise MongoError(50865, "Do not specify both 'resumeAfter' and 'startAfter' in a $changeStream stage")
    if ("resumeAfter" in spec or "startAfter" in spec) and "startAtOperationTime" in spec:
        raise MongoError(40674, "Only one type of resume option is allowed, but multiple were found.")
    mode = spec.get("fullDocument", "default")
    if mode not in ("default", "updateLookup", "whenAvailable", "required"):
        raise MongoError(2, "'%s' is not a valid value for $changeStream.fullDocument" % (mode,))
    before = spec.get("fullDocumentBeforeChange", "off")
    if before not in ("off", "whenAvailable", "required"):
        raise MongoError(2, "'%s' is not a valid value for $changeStream.fullDocumentBeforeChange" % (before,))


def _check_namespace(ctx, cluster):
    """Which streams mongod allows where (document_source_change_stream.cpp, assertValidNamespace)."""
    name = ctx.cmd.get("aggregate")
    if cluster and (ctx.db != "admin" or name != 1):
        raise MongoError(72, "A $changeStream with 'allChangesForCluster:true' may only be opened on the "
                         "'admin' database, and with no collection name")
    if not cluster and (ctx.db in INTERNAL_DBS or (isinstance(name, str) and name.startswith("system."))):
        raise MongoError(73, "$changeStream may not be opened on the internal %s.%s namespace"
                         % (ctx.db, name if isinstance(name, str) else "$cmd.aggregate"))
    if not isinstance(name, str) and name != 1:
        raise MongoError(73, "Invalid collection name for a $changeStream aggregate")


def _check_stages(stages):
    """Only the stages mongod allows after $changeStream."""
    for stage in stages:
        if not isinstance(stage, dict) or len(stage) != 1:
            raise MongoError(40323, "A pipeline stage specification object must contain exactly one field.")
        op = next(iter(stage))
        if op not in KNOWN_STAGES:
            raise MongoError(40324, "Unrecognized pipeline stage name: '%s'" % op)
        if op not in ALLOWED_STAGES:
            raise MongoError(20, "%s is not permitted in a $changeStream pipeline" % op)


def _start(log, spec, clock):
    """(position, start token, the token's event entry or None, fragment number or None) of a new
    stream: after a token, at a time (inclusive) or after now. After a split event's fragment the
    position is just before the event, whose later fragments the stream returns first."""
    given = spec.get("startAfter", spec.get("resumeAfter"))
    if given is not None:
        key, is_hwm, is_invalidate, same_run, identity = decode_token(given)
        fragment = token_fragment(given)
        if is_invalidate and "resumeAfter" in spec:
            raise MongoError(260, "Attempting to resume a change stream using 'resumeAfter' is not allowed "
                             "from an invalidate notification.")
        if not same_run:
            raise changelog.history_lost("the resume token is from an earlier run of the server")
        with log.cond:
            log.check_start(key, is_hwm)
            cause = log.find(key[:14] + b"\x00") if not is_hwm else None
            if not is_hwm and (cause is None or cause.identity() != identity):
                raise _token_not_found(given)
        if fragment is not None:
            return key[:14], dict(given), cause, fragment
        return key, dict(given), None if is_invalidate else cause, None
    at = spec.get("startAtOperationTime")
    if at is not None:
        if not isinstance(at, Timestamp):
            raise MongoError(14, "startAtOperationTime must be a timestamp")
        key = hwm_key(at)
        with log.cond:
            log.check_start(key, True)
        return key, token(key), None, None
    now = clock.current()
    key = hwm_key(Timestamp(now.time, now.inc + 1))
    return key, token(key), None, None


def _token_not_found(given):
    """ChangeStreamFatalError (280): the stream cannot find the event of its resume token."""
    return MongoError(280, "cannot resume stream; the resume token was not found. %s" % given,
                      labels=["NonResumableChangeStreamError"])


def open_stream(ctx):
    """aggregate with $changeStream: check it, position the stream, reply with the first batch (never
    waiting) and register the cursor."""
    cmd = ctx.cmd
    pipeline = cmd["pipeline"]
    spec = pipeline[0]["$changeStream"]
    _parse_spec(spec)
    cluster = bool(spec.get("allChangesForCluster"))
    _check_namespace(ctx, cluster)
    stages = pipeline[1:]
    _check_stages(stages)
    split = changesplit.check_stage(stages, ctx.server.version)
    if split:
        stages = stages[:-1]  # done by _collect: changesplit.pieces
    name = cmd["aggregate"]
    ns = "%s.%s" % (ctx.db, name if isinstance(name, str) else "$cmd.aggregate")
    position, start_token, cause, fragment = _start(ctx.server.changelog, spec, ctx.server.clock)
    lsid = cmd.get("lsid")
    session = bytes(lsid["id"]) if isinstance(lsid, dict) and "id" in lsid else None
    cursor = StreamCursor(ns, None if cluster else ctx.db, name if isinstance(name, str) else None, spec,
                          stages, position, start_token, session)
    cursor.split = split
    cursor.member = ctx.conn.member.index
    if fragment is not None:
        if not split:
            raise MongoError(280, "Resuming after a fragment of a split event needs a "
                             "$changeStreamSplitLargeEvent stage in the pipeline",
                             labels=["NonResumableChangeStreamError"])
        cursor.resume_fragment = (cause.key, fragment)
    if cause is not None and _scan_drops(cursor, cause):
        raise _token_not_found(start_token)
    batch_size = (cmd.get("cursor") or {}).get("batchSize")
    if batch_size is not None and (isinstance(batch_size, bool) or not isinstance(batch_size, (int, float))
                                   or batch_size < 0):
        raise MongoError(2, "BatchSize value must be non-negative, but received: %s" % (batch_size,))
    batch = _collect(ctx.server, cursor, DEFAULT_FIRST_BATCH if batch_size is None else int(batch_size))
    if not cursor.invalidated:
        registry = ctx.server.cursors
        with registry.lock:
            cursor.id = registry._new_id()
            registry.cursors[cursor.id] = cursor
    return {"cursor": _cursor_doc(cursor, "firstBatch", batch), "ok": 1.0}


def _cursor_doc(cursor, field, batch):
    """The reply's cursor in mongod's field order (query/cursor_response.cpp)."""
    return {field: batch, "postBatchResumeToken": cursor.pbrt, "id": Int64(cursor.id), "ns": cursor.ns}


# --- reading --------------------------------------------------------------------------------------------

def _watches(cursor, entry):
    """True if the entry belongs to the stream's namespace."""
    if entry.op == NO_OP:
        return False
    if cursor.coll is not None:
        return entry.db == cursor.db and entry.coll == cursor.coll
    if entry.coll is not None and entry.coll.startswith("system."):
        return False
    if cursor.db is None:
        return entry.db not in INTERNAL_DBS
    return entry.db == cursor.db


def _invalidates(cursor, entry):
    """Drop or rename of a collection stream's collection, dropDatabase for a database stream."""
    if cursor.coll is not None:
        return entry.op in ("drop", "rename")
    return cursor.db is not None and entry.op == "dropDatabase"


def _event(server, cursor, entry):
    """The event document of an entry, in mongod's field order (change_stream_event_transform.cpp)."""
    doc = {}
    if entry.txn is not None:
        doc["txnNumber"], doc["lsid"] = entry.txn
    if entry.to is not None:
        doc["to"] = entry.to
    doc["_id"] = token(entry.key, entry.identity())
    doc["operationType"] = entry.op
    doc["clusterTime"] = entry.ts
    doc["wallTime"] = wall_date(entry.wall)
    if entry.doc is not None:
        doc["fullDocument"] = entry.doc
    elif entry.op == "update" and cursor.full_document == "updateLookup":
        doc["fullDocument"] = _lookup(server, entry)
    elif entry.op == "update" and cursor.full_document != "default":
        doc["fullDocument"] = _image(entry, entry.post, cursor.full_document, "post")
    doc["ns"] = {"db": entry.db, "coll": entry.coll} if entry.coll is not None else {"db": entry.db}
    if entry.op in DOC_OPS:
        doc["documentKey"] = {"_id": entry.doc_id}
    if entry.desc is not None:
        doc["updateDescription"] = entry.desc
    if cursor.before_change != "off" and entry.op in ("update", "replace", "delete"):
        doc["fullDocumentBeforeChange"] = _image(entry, entry.pre, cursor.before_change, "pre")
    return doc


# Element headers of an event's fields (type byte, name, NUL), and what does not change in a resume
# token's element when its `_data` has the 46 hex digits of an event's (changelog.token)
_TOKEN_HEAD = b"\x03_id\x00" + struct.pack("<i", 4 + 7 + 4 + 47 + 1) + b"\x02_data\x00" + struct.pack("<i", 47)
_CLUSTER_TIME = b"\x11clusterTime\x00"
_WALL_TIME = b"\x09wallTime\x00"
_NS = b"\x03ns\x00"
_FULL_DOCUMENT = b"\x03fullDocument\x00"
_OP_TYPES = {}  # operationType -> its element (the operation types are few)
_DOCUMENT_KEY = b"\x03documentKey\x00"
_TOKEN_FIELDS = struct.Struct(">II")
_INT32 = struct.Struct("<i")
_INT_KEY_HEAD = _INT32.pack(14) + b"\x10_id\x00"  # a document {_id: <int32>} up to the value
_TIMESTAMP = struct.Struct("<II")
_INT64 = struct.Struct("<q")
_MIN_MS, _MAX_MS = -62135596800000, 253402300799999  # the dates wall_date can make
_NS_BSON = {}  # (db, coll) -> the BSON of an event's ns, as names recur; cleared past NS_BSON_MAX
NS_BSON_MAX = 10000


def _event_bson(server, cursor, entry):
    """(resume token, BSON) of the event of an entry that no stage changes: byte for byte
    rawbson.document(_event(server, cursor, entry), cursor.memo), with the same errors, written from
    the entry without building the event's dictionary first; the token's element, the ns and the
    fixed element names are written or looked up once, and the document key is encoded once for both
    the event and its identity. None for an entry whose wall time wall_date cannot make a date of (the
    caller builds the event, which raises as before)."""
    millis = int(entry.wall * 1000)
    if not _MIN_MS <= millis <= _MAX_MS:
        return None
    op = entry.op
    parts = []
    if entry.txn is not None:
        number, lsid = entry.txn
        parts.append(rawbson.element("txnNumber", number))
        last, element = cursor.memo["lsid"]
        if last is not lsid:
            element = rawbson.element("lsid", lsid)
            cursor.memo["lsid"] = (lsid, element)
        parts.append(element)
    if entry.to is not None:
        parts.append(rawbson.element("to", entry.to))
    doc_id = entry.doc_id
    if op not in DOC_OPS:
        key_bson = b""
    elif type(doc_id) is int and -2147483648 <= doc_id <= 2147483647:
        key_bson = _INT_KEY_HEAD + _INT32.pack(doc_id) + b"\x00"  # {_id: <int32>}, as rawbson writes it
    else:
        key_bson = rawbson.document({"_id": doc_id})
    data = (entry.key + _TOKEN_FIELDS.pack(zlib.crc32(op.encode() + key_bson), changelog.RUN_ID)).hex().upper()
    if len(data) == 46:
        parts.append(_TOKEN_HEAD + data.encode() + b"\x00\x00")
    else:
        parts.append(rawbson.element("_id", {"_data": data}))
    op_type = _OP_TYPES.get(op)
    if op_type is None:
        op_type = _OP_TYPES[op] = rawbson.element("operationType", op)
    parts.append(op_type)
    parts.append(_CLUSTER_TIME + _TIMESTAMP.pack(entry.ts.inc, entry.ts.time))
    parts.append(_WALL_TIME + _INT64.pack(millis))
    if type(entry.doc) is dict:
        parts.append(_FULL_DOCUMENT + rawbson.document(entry.doc))
    elif entry.doc is not None:
        parts.append(rawbson.element("fullDocument", entry.doc))
    elif op == "update" and cursor.full_document == "updateLookup":
        parts.append(rawbson.element("fullDocument", _lookup(server, entry)))
    elif op == "update" and cursor.full_document != "default":
        parts.append(rawbson.element("fullDocument", _image(entry, entry.post, cursor.full_document, "post")))
    ns = _NS_BSON.get((entry.db, entry.coll))
    if ns is None:
        ns = rawbson.document({"db": entry.db, "coll": entry.coll} if entry.coll is not None else {"db": entry.db})
        if len(_NS_BSON) >= NS_BSON_MAX:
            _NS_BSON.clear()
        _NS_BSON[(entry.db, entry.coll)] = ns
    parts.append(_NS + ns)
    if op in DOC_OPS:
        parts.append(_DOCUMENT_KEY + key_bson)
    if entry.desc is not None:
        parts.append(rawbson.element("updateDescription", entry.desc))
    if cursor.before_change != "off" and op in ("update", "replace", "delete"):
        parts.append(rawbson.element("fullDocumentBeforeChange",
                                     _image(entry, entry.pre, cursor.before_change, "pre")))
    body = b"".join(parts)
    return {"_data": data}, struct.pack("<i", len(body) + 5) + body + b"\x00"


def _image(entry, image, mode, kind):
    """A recorded pre- or post-image (whenAvailable: null without one; required: NoMatchingDocument, 47)."""
    if image is None and mode == "required":
        raise MongoError(47, "Change stream was configured to require a %s-image for all update, delete and "
                         "replace events, but the %s-image was not found for event: %s"
                         % (kind, kind, token(entry.key, entry.identity())))
    return image


def _lookup(server, entry):
    """updateLookup: the document as it is now (committed), or None."""
    with server.lock:
        coll = server.store.get(entry.db, entry.coll)
        if coll is None:
            return None
        idk = sort_key(entry.doc_id)
        images = server.txns.overlay(None, coll)
        if images and idk in images:
            return images[idk]
        return coll.docs.get(idk)


def _invalidate_event(entry):
    """The invalidate event following the entry that caused it (check_invalidate.cpp)."""
    key = entry.key[:14] + b"\x01"
    return key, {"_id": token(key, entry.identity()), "operationType": "invalidate", "clusterTime": entry.ts,
                 "wallTime": wall_date(entry.wall)}


def _compiled_matches(stages):
    """One predicate for a pipeline of $match stages (errors as run_stages reports them)."""
    tests = []
    for stage in stages:
        filt = stage["$match"]
        if not isinstance(filt, dict):
            raise bad_value("the match filter must be an expression in an object")
        tests.append(compile_filter(filt))

    def match(doc):
        try:
            return all(t(doc) for t in tests)
        except Exception as exc:  # malformed filters, reported by mongomock with assorted exception types
            raise from_mongomock(exc) from exc
    return match


# The fields of an event that _filtered_early can give without building it (lsid and txnNumber: those
# of a transaction's event, which mongod renames into its oplog scan, renameRegistry in
# change_stream_rewrite_helpers.cpp)
_EARLY_FIELDS = frozenset(("operationType", "ns", "to", "lsid", "txnNumber"))
# Past this many keys early_seen starts again (a stream filtering on lsid sees a key per session)
EARLY_SEEN_MAX = 10000


def _filter_fields(filt, out):
    """The top-level fields a filter refers to (None in `out` for what cannot be told)."""
    if not isinstance(filt, dict):
        out.add(None)
        return out
    for key, value in filt.items():
        if key in ("$and", "$or", "$nor") and isinstance(value, list):
            for sub in value:
                _filter_fields(sub, out)
        elif key.startswith("$"):
            out.add(None)  # $expr, $where, $text...: anything
        else:
            out.add(key.split(".", 1)[0])
    return out


def _filtered_early(cursor, entry):
    """Whether the stream's $match stages drop this entry's event for sure, told from its
    operationType, namespaces and, for a transaction's entry, its txnNumber and lsid alone when they
    refer to nothing else (as mongod rewrites a change stream's $match on those fields into a filter
    of the oplog scan, before any event is built: change_stream_filter_helpers.cpp,
    change_stream_rewrite_helpers.cpp). So a transaction whose session the $match leaves out costs a
    dictionary lookup per entry, builds no event and wakes no waiting getMore. An entry that also
    invalidates the stream is never dropped here."""
    if not cursor.match_only or _invalidates(cursor, entry):
        return False
    if cursor.early is None:
        _plan_early(cursor)
    if not cursor.early:
        return False
    to = entry.to
    seen = (entry.op, entry.db, entry.coll, None if to is None else tuple(sorted(to.items())),
            _session_key(cursor, entry))
    dropped = cursor.early_seen.get(seen)
    if dropped is None:
        probe = {"operationType": entry.op,
                 "ns": {"db": entry.db, "coll": entry.coll} if entry.coll is not None else {"db": entry.db}}
        if to is not None:
            probe["to"] = to
        if entry.txn is not None:
            probe["txnNumber"], probe["lsid"] = entry.txn  # as _event puts them
        if len(cursor.early_seen) >= EARLY_SEEN_MAX:
            cursor.early_seen.clear()
        dropped = cursor.early_seen[seen] = not cursor.match(probe)
    return dropped


# The event fields whose predicates mongod 5.1+ rewrites into its oplog scan exactly for every event
# (change_stream_rewrite_helpers.cpp: renameRegistry and matchRewriteRegistry; fullDocument,
# fullDocumentBeforeChange and updateDescription are rewritten inexactly, for some events only, and are
# left to the events here)
_SCAN_FIELDS = frozenset(("operationType", "ns", "to", "lsid", "txnNumber", "documentKey", "clusterTime"))


def _scan_filter(filt, exact):
    """The part of a $match filter mongod evaluates on the oplog (rewriteMatchExpressionTree): a
    conjunction keeps the parts on _SCAN_FIELDS (all of them when `exact`), a disjunction only if every
    branch has one, a $nor only exact branches; None when nothing can be kept ({} keeps every event)."""
    if not isinstance(filt, dict):
        return None
    parts = []
    for key, value in filt.items():
        if key in ("$and", "$nor") and isinstance(value, list) and value:
            kept = [_scan_filter(sub, exact and key == "$and" or key == "$nor") for sub in value]
            rest = [k for k in kept if k or (k is not None and key == "$nor")]
            if None in kept and exact:
                part = None
            elif key == "$and":
                part = {"$and": rest} if rest else {}
            else:
                part = {"$nor": rest} if rest else {}
        elif key == "$or" and isinstance(value, list) and value:
            kept = [_scan_filter(sub, exact) for sub in value]
            part = None if None in kept else {"$or": kept}
        elif not key.startswith("$") and key.split(".", 1)[0] in _SCAN_FIELDS:
            part = {key: value}
        else:
            part = None  # $expr, $where, $comment... and fields the scan cannot see
        if part is None and exact:
            return None
        if part:
            parts.append(part)
    return {"$and": parts} if parts else {}


def _scan_drops(cursor, entry):
    """Whether mongod's oplog scan drops the entry before the stream looks for its resume token there:
    not in the stream's namespace, or left out by what the stream's leading $match stages say about the
    fields the scan sees (_scan_filter). A resume after such an event fails with 280 on mongod 5.1+
    (document_source_change_stream_ensure_resume_token_present.cpp: the scan passes its position without
    finding it), as PeerDB-io/peerdb issue 3246 shows."""
    if not _watches(cursor, entry):
        return True
    filters = []
    for stage in cursor.stages:
        if not isinstance(stage, dict) or list(stage) != ["$match"]:
            break
        kept = _scan_filter(stage["$match"], False)
        if kept:
            filters.append({"$match": kept})
    if not filters:
        return False
    probe = {"operationType": entry.op,
             "ns": {"db": entry.db, "coll": entry.coll} if entry.coll is not None else {"db": entry.db},
             "clusterTime": entry.ts}
    if entry.to is not None:
        probe["to"] = entry.to
    if entry.txn is not None:
        probe["txnNumber"], probe["lsid"] = entry.txn
    if entry.op in DOC_OPS:
        probe["documentKey"] = {"_id": entry.doc_id}
    return not _compiled_matches(filters)(probe)


def _plan_early(cursor):
    """Decide once per stream whether _filtered_early can judge its $match stages, and on which of a
    transaction's fields their verdict may depend."""
    fields = set()
    for stage in cursor.stages:
        _filter_fields(stage["$match"], fields)
    cursor.early = fields <= _EARLY_FIELDS
    cursor.early_lsid = "lsid" in fields
    cursor.early_number = "txnNumber" in fields
    if cursor.early and cursor.match is None:
        cursor.match = _compiled_matches(cursor.stages)


def _session_key(cursor, entry):
    """What of a transaction's (txnNumber, lsid) the stream's verdict on an entry may depend on: the
    lsid's encoding (its id, and whatever else the client's lsid holds) if the $match refers to lsid,
    the txnNumber if it refers to txnNumber; None when it refers to neither, or for an entry outside a
    transaction. The lsid is encoded once per transaction: its entries share one lsid object, and the
    stream keeps the last one alive, so its identity cannot be reused."""
    if entry.txn is None or not (cursor.early_lsid or cursor.early_number):
        return None
    number, lsid = entry.txn
    lsid_key = None
    if cursor.early_lsid:
        last, lsid_key = cursor.lsid_key
        if last is not lsid:
            lsid_key = rawbson.document({"lsid": lsid})
            cursor.lsid_key = (lsid, lsid_key)
    return lsid_key, int(number) if cursor.early_number else None


def _transformed(cursor, doc):
    """The event after the stream's own stages (None if filtered out); 280 if they changed its _id."""
    if not cursor.stages:
        return doc
    if cursor.match_only:
        # $match stages only read the event: no private copy, one compiled predicate per stream
        if cursor.match is None:
            cursor.match = _compiled_matches(cursor.stages)
        return doc if cursor.match(doc) else None
    out = run_stages([copy.deepcopy(doc)], cursor.stages, None)
    if not out:
        return None
    if out[0].get("_id") != doc["_id"]:
        raise MongoError(280, "Encountered an event whose _id field, which contains the resume token, was "
                         "modified by the pipeline. Modifying the _id field of an event makes it impossible "
                         "to resume the stream from that point. Only transformations that retain the "
                         "unmodified _id field are allowed.", labels=["NonResumableChangeStreamError"])
    return out[0]


def _collect(server, cursor, max_docs):
    """Scan the history after the stream's position for up to `max_docs` events (None: no count limit)
    within 16 MB; the postBatchResumeToken follows (plan_executor_pipeline.cpp)."""
    log = server.changelog
    batch, size = [], 0
    # no stages, or $match stages told from the fields _filtered_early gives (which kept the entry's
    # event already): an event that does not invalidate the stream is written straight from its entry
    direct = not cursor.stages or cursor.early
    size = _drain(cursor, batch, size, max_docs)
    bound = _bound(server, cursor)
    while not cursor.invalidated and not cursor.pending and (max_docs is None or len(batch) < max_docs):
        with log.cond:
            entries = log.after(cursor.position, SCAN_CHUNK, bound)
        if not entries:
            break
        for entry in entries:
            if max_docs is not None and len(batch) >= max_docs:
                break
            if _returns(cursor, entry):
                invalidates = _invalidates(cursor, entry)
                direct = direct or cursor.early  # _returns has planned the $match by now
                written = _event_bson(server, cursor, entry) if direct and not invalidates else None
                if written is not None:
                    tok, raw = written
                    if len(raw) > changesplit.MAX_EVENT_SIZE or cursor.resume_fragment is not None:
                        got = _split_entry(cursor, entry, [(entry.key, tok, raw)], batch, size, max_docs)
                        if got is None:
                            return batch
                        if got is not False:
                            size = got
                            continue
                    if batch and size + len(raw) > MAX_BATCH_BYTES:
                        return batch
                    batch.append(RawBSONDocument(raw))
                    size += len(raw)
                    cursor.last_returned = entry.key
                    cursor.pbrt = tok
                else:
                    docs = [(entry.key, _event(server, cursor, entry))]
                    if invalidates:
                        docs.append(_invalidate_event(entry))
                    kept = cursor.early and len(docs) == 1
                    out = [(key, doc["_id"], doc if kept else _transformed(cursor, doc)) for key, doc in docs]
                    out = [(key, tok, _encode_event(doc, cursor.memo)) for key, tok, doc in out
                           if doc is not None]
                    if any(len(raw) > changesplit.MAX_EVENT_SIZE for _, _, raw in out) \
                            or cursor.resume_fragment is not None:
                        got = _split_entry(cursor, entry, out, batch, size, max_docs)
                        if got is None:
                            return batch
                        if got is not False:
                            size = got
                            continue
                    if batch and size + sum(len(raw) for _, _, raw in out) > MAX_BATCH_BYTES:
                        return batch
                    for key, tok, raw in out:
                        batch.append(RawBSONDocument(raw))
                        size += len(raw)
                        cursor.last_returned = key
                        cursor.pbrt = tok
                    cursor.invalidated = len(docs) > 1
                    if cursor.invalidated:
                        cursor.pbrt = docs[1][1]["_id"]
            cursor.position = entry.key
            if cursor.invalidated:
                return batch
    mark = hwm_key(key_time(cursor.position))
    if cursor.last_returned is None or mark > cursor.last_returned:
        if mark > decode_token(cursor.pbrt)[0]:
            cursor.pbrt = token(mark)
    return batch


def _bound(server, cursor):
    """The position before which the stream may return events: the replica set's majority commit point,
    or what the stream's member has applied (repl.stream_limit); None when every entry may be returned."""
    limit = server.repl.stream_limit(cursor.member)
    return None if limit is None else hwm_key(Timestamp(limit.time, limit.inc + 1))


def _split_entry(cursor, entry, out, batch, size, max_docs):
    """An entry whose event is over the size limit, or the first of a stream resumed after a fragment:
    its event's fragments (changesplit.pieces) are returned from cursor.pending, the entry scanned.
    Returns the batch's new size, None when fragments are left for the next batch, False when the event
    is returned whole after all (the caller goes on with `out`, the entry not scanned yet)."""
    expanded, split = [], False
    for key, tok, raw in out:
        if key != entry.key:
            expanded.append((key, tok, raw))
            continue
        got, was_split = changesplit.pieces(cursor, entry, tok, raw)
        split = split or was_split
        expanded.extend((key, piece_tok, piece) for piece_tok, piece in got)
    if not split:
        return False
    cursor.pending = expanded
    cursor.position = entry.key
    size = _drain(cursor, batch, size, max_docs)
    return None if cursor.pending else size


def _drain(cursor, batch, size, max_docs):
    """Add the fragments left from a split event to the batch, as many as fit; the batch's new size."""
    while cursor.pending and (max_docs is None or len(batch) < max_docs):
        key, tok, raw = cursor.pending[0]
        if batch and size + len(raw) > MAX_BATCH_BYTES:
            break
        batch.append(RawBSONDocument(raw))
        size += len(raw)
        cursor.last_returned = key
        cursor.pbrt = tok
        del cursor.pending[0]
    return size


# Past this many keys a stream's verdicts start again (a cluster stream sees a key per namespace)
VERDICTS_MAX = 10000


def _returns(cursor, entry):
    """Whether the stream may return an event for the entry: _watches and not _filtered_early. Outside
    a transaction and a rename, that depends on the entry's operationType and namespace alone, so it
    is decided once per stream for each of those (the entries of one collection's writes recur)."""
    if entry.txn is not None or entry.to is not None:
        return _watches(cursor, entry) and not _filtered_early(cursor, entry)
    seen = (entry.op, entry.db, entry.coll)
    verdict = cursor.verdicts.get(seen)
    if verdict is None:
        verdict = _watches(cursor, entry) and not _filtered_early(cursor, entry)
        if len(cursor.verdicts) >= VERDICTS_MAX:
            cursor.verdicts.clear()
        cursor.verdicts[seen] = verdict
    return verdict


def _encode_event(doc, memo):
    """BSON of an event keeping its field order (bson.encode moves a top-level `_id` first, but
    txnNumber, lsid and a rename's `to` come before it on mongod): rawbson's, several times faster than
    pymongo's C encoder for the small documents an event is made of; a transaction's lsid is encoded
    once for all its events (`memo`, the stream's)."""
    return rawbson.document(doc, memo)


def _check_session(cursor, cmd):
    """getMore must come from the aggregate's session (commands/getmore_cmd.cpp, validateLSID)."""
    lsid = cmd.get("lsid")
    session = bytes(lsid["id"]) if isinstance(lsid, dict) and "id" in lsid else None
    if cursor.session is None and session is not None:
        raise MongoError(50736, "Cannot run getMore on cursor %d, which was not created in a session, in "
                         "session %s" % (cursor.id, session.hex()))
    if cursor.session is not None and session is None:
        raise MongoError(50737, "Cannot run getMore on cursor %d, which was created in a session, without "
                         "an lsid" % cursor.id)
    if cursor.session != session:
        raise MongoError(50738, "Cannot run getMore on cursor %d, which was created in session %s, in "
                         "session %s" % (cursor.id, cursor.session.hex(), session.hex()))


def get_more(ctx, cursor, ns):
    """getMore of a change stream: wait up to maxTimeMS (default 1 s) for an event, store lock not held;
    an empty batch when none came; cursor id 0 after an invalidate. A failed getMore closes the cursor."""
    cmd = ctx.cmd
    if cursor.ns != ns:
        raise MongoError(43, "cursor id %d not found" % cursor.id)
    _check_session(cursor, cmd)
    batch_size = cmd.get("batchSize")
    if batch_size is not None and batch_size <= 0:
        raise MongoError(2, "Batch size for getMore must be positive, but received: %s" % batch_size)
    max_time = cmd.get("maxTimeMS")
    wait = DEFAULT_AWAIT_MS if max_time is None else max_time
    deadline = time.monotonic() + wait / 1000.0
    registry = ctx.server.cursors
    with cursor.lock:
        try:
            batch = _wait_and_collect(ctx.server, cursor, int(batch_size) if batch_size else None, deadline)
        except MongoError:
            registry.kill([cursor.id])
            raise
        cursor.last_used = time.monotonic()
        cursor_id = cursor.id
        if cursor.invalidated:
            registry.kill([cursor.id])
            cursor.id = 0
        reply = _cursor_doc(cursor, "nextBatch", batch)
        cursor.id = cursor_id
    return {"cursor": reply, "ok": 1.0}


def _may_return(cursor, entry):
    """Whether the stream may return an event for this entry (what wakes its waiting getMore)."""
    return _returns(cursor, entry)


def _wait_and_collect(server, cursor, batch_size, deadline):
    """Collect; while nothing came and time remains, wait for new history entries."""
    log = server.changelog
    while True:
        batch = _collect(server, cursor, batch_size)
        remaining = deadline - time.monotonic()
        if batch or cursor.invalidated or remaining <= 0:
            return batch
        with log.cond:
            waiting = not log.keys or log.keys[-1] <= cursor.position
            if waiting:
                log.wait(lambda entry: _may_return(cursor, entry), remaining)
        if not waiting:  # entries past the majority commit point: wait until it passes them
            time.sleep(min(remaining, 0.01))


def add_labels(name, cmd, reply):
    """ResumableChangeStreamError on a change stream's aggregate error whose code mongod deems resumable
    (error_labels.cpp, isResumableChangeStreamError, which parses the aggregate's pipeline). A getMore is
    known to be a change stream's only once it checked out its cursor (the originating command in CurOp),
    so a failCommand error on getMore has no label, and failGetMoreAfterCursorCheckout's has
    (cmd_crud._fail_after_checkout)."""
    code = reply.get("code")
    if reply.get("ok") == 1.0 or code not in RESUMABLE_CODES or reply.get("errorLabels"):
        return
    if name == "aggregate" and is_change_stream(cmd):
        reply["errorLabels"] = ["ResumableChangeStreamError"]
