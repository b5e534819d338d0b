"""Adapters around mongomock for update operators, projections and aggregation stages.

mongomock's update and projection code lives in methods of its Collection. We keep one private scratch
collection and, for each document to update, load a copy of that single document into it and let
mongomock run its update on it. The real store never reaches mongomock, so its whole-collection copies
and scans never happen; the results are then written back through our own indexed storage.
"""

import copy
import threading
from collections import OrderedDict

import mongomock
from mongomock import aggregate as mm_aggregate
from mongomock import collection as mm_collection
from mongomock.filtering import filter_applies
from bson.int64 import Int64
from bson.objectid import ObjectId

from . import group
from .bsonkeys import sort_documents
from .errors import MongoError, bad_value, from_mongomock
from .matcher import compile_filter

_SCRATCH = mongomock.MongoClient()["scratch"]["scratch"]
# _run_update fills and empties the scratch collection: the shards of a cluster, one process, run their
# commands on threads of their own at once (a single server's store lock serializes its own)
_SCRATCH_LOCK = threading.Lock()


def plain(value):
    """Deep-convert OrderedDicts (which mongomock produces) into plain dicts, keeping field order."""
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value


def id_first(doc):
    """The document with `_id` as its first field, as MongoDB stores it."""
    if next(iter(doc), None) == "_id":
        return doc
    out = {"_id": doc["_id"]}
    out.update((k, v) for k, v in doc.items() if k != "_id")
    return out


UPDATE_OPERATORS = {"$set", "$unset", "$inc", "$min", "$max", "$rename", "$setOnInsert", "$currentDate", "$push",
                    "$pull", "$pullAll", "$addToSet", "$pop"}
MISSING_UPDATE_OPERATORS = {"$mul", "$bit"}  # valid in MongoDB, absent from mongomock


def is_operator_update(update):
    """True for `{$set: ...}`-style updates, False for replacement documents; mixed forms and unknown
    operators are rejected (FailedToParse, as mongod)."""
    keys = list(update)
    dollar = [k.startswith("$") for k in keys]
    if not any(dollar):
        return False
    for key in keys:
        if key in MISSING_UPDATE_OPERATORS:
            raise MongoError(115, "update operator %s is not supported by the test server" % key)
        if key not in UPDATE_OPERATORS:
            raise MongoError(9, "Unknown modifier: %s. Expected a valid update modifier or pipeline-style update "
                                "specified as an array" % key)
    return True


def _run_update(existing, spec, update, upsert):
    """Run mongomock's update on a scratch collection holding only `existing` (or nothing, for upserts).

    mongomock selects the document with `spec` again (it needs the query for positional `$` operators). Where
    the server's matcher and mongomock's disagree (null on a dotted path, see matcher.py), the document is
    selected by `_id` instead, so the update is not silently skipped."""
    with _SCRATCH_LOCK:
        _SCRATCH._store._documents.clear()
        if existing is not None:
            _SCRATCH._store["doc"] = copy.deepcopy(existing)
        try:
            if existing is not None and not filter_applies(spec, existing):
                spec = {"_id": existing["_id"]}
            _SCRATCH._update(spec, update, upsert=upsert, multi=False)
            docs = list(_SCRATCH._store.documents)
        except Exception as exc:  # mongomock reports bad updates with assorted exception types
            raise from_mongomock(exc) from exc
        finally:
            _SCRATCH._store._documents.clear()
    return id_first(plain(docs[0]))


def _container_of(doc, path):
    """The dict or list holding the last component of a dotted path, and that component; (None, None)
    when the path does not lead to a container."""
    parts = path.split(".")
    node = doc
    for part in parts[:-1]:
        if isinstance(node, dict):
            node = node.get(part)
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return None, None
    last = parts[-1]
    if isinstance(node, list):
        return (node, int(last)) if last.isdigit() and int(last) < len(node) else (None, None)
    return (node, last) if isinstance(node, dict) and last in node else (None, None)


def _keep_int64(old, new, increments):
    """Give `$inc` results MongoDB's type: an Int64 operand keeps the sum an Int64 (Python's int
    arithmetic would turn it into a plain int, which BSON stores as int32 when it fits)."""
    for path, step in increments.items():
        container, key = _container_of(new, path)
        if container is None or type(container[key]) is not int:
            continue
        before, before_key = _container_of(old, path)
        was_int64 = before is not None and isinstance(before[before_key], Int64)
        if was_int64 or isinstance(step, Int64):
            container[key] = Int64(container[key])


# values a `$set` writes as they are: immutable, no document or array (nothing mongomock would convert)
_PLAIN_SCALARS = (str, int, float, type(None), ObjectId)


def _set_in_place(doc, update):
    """The updated copy of `doc` for the commonest update, a `$set` of top-level fields that `doc` already
    has to scalar values, without mongomock (its run costs a deep copy of the document and a scan of a
    scratch collection): each value is replaced where it stands, as mongod and mongomock do. None for any
    other update (a new field, whose place mongod 5.0 and later choose by name, a dotted or `$` path,
    `_id`, a document, array, date or other value), which goes to mongomock."""
    if len(update) != 1 or not isinstance(update.get("$set"), dict) or not update["$set"]:
        return None
    fields = update["$set"]
    for key, value in fields.items():
        if (not isinstance(key, str) or key not in doc or key == "_id" or "." in key or key.startswith("$")
                or not isinstance(value, _PLAIN_SCALARS)):
            return None
    new = dict(doc)
    new.update(fields)
    return new


def apply_update(doc, spec, update):
    """The updated copy of `doc` under update `update` (operators or replacement); `spec` is the query,
    which positional `$` operators need."""
    if not is_operator_update(update):
        if "_id" in update and update["_id"] != doc["_id"]:
            raise MongoError(66, "After applying the update, the (immutable) field '_id' was found to have "
                                 "been altered to _id: %r" % (update["_id"],))
        new = {"_id": doc["_id"]}
        new.update((k, v) for k, v in update.items() if k != "_id")
        return new
    new = _set_in_place(doc, update)
    if new is not None:
        return new
    new = _run_update(doc, spec, update, upsert=False)
    if isinstance(update.get("$inc"), dict):
        _keep_int64(doc, new, update["$inc"])
    return new


def upsert_document(spec, update):
    """The document an upsert inserts when nothing matched `spec` (with `_id` first, an ObjectId if none)."""
    if not is_operator_update(update):
        new = {"_id": update["_id"] if "_id" in update else _spec_id(spec)}
        new.update((k, v) for k, v in update.items() if k != "_id")
        return new
    doc = _run_update(None, spec, update, upsert=True)
    if isinstance(doc.get("_id"), dict) and any(k.startswith("$") for k in doc["_id"]):
        doc["_id"] = _spec_id(spec)
    return doc


def _spec_id(spec):
    """The `_id` an upsert takes from an equality (plain or `$eq`) on `_id` in its query, else an ObjectId."""
    value = spec.get("_id")
    if isinstance(value, dict) and any(k.startswith("$") for k in value):
        value = value.get("$eq")
    return ObjectId() if value is None else value


def _project_value(val, spec, is_include, container):
    """A value under a sub-projection: documents are projected, arrays element by element (also nested
    arrays); anything else is dropped by an inclusion and kept by an exclusion (None: dropped), as mongod
    projects {"a.b": 1} over a: [{b: 1, c: 2}, 5, [{b: 3}]] to a: [{b: 1}, [{b: 3}]]."""
    if isinstance(val, dict):
        return _project_by_spec(val, spec, is_include, container)
    if isinstance(val, (list, tuple)):
        out = [_project_value(v, spec, is_include, container) for v in val]
        return [v for v in out if v is not _DROPPED]
    return _DROPPED if is_include else val


_DROPPED = object()

# Set while a projection's result is only encoded and dropped (a find's cursor): its values are then
# shared with the stored document instead of deep-copied, which was most of a find's cost here.
_SHARING = threading.local()


def _value_copy(val):
    """`val` for a projection's result: a deep copy, unless the caller only encodes the result."""
    return val if getattr(_SHARING, "active", False) else copy.deepcopy(val)


def _project_by_spec(doc, spec, is_include, container):
    """mongomock's projection of one document, with array elements that are not documents handled as
    mongod does (mongomock 4.1 fails on them with AttributeError)."""
    if "$" in spec:
        return _mm_project_by_spec(doc, spec, is_include, container)
    out = container()
    for key, val in doc.items():
        sub = spec.get(key, _DROPPED)
        if isinstance(sub, dict):
            if isinstance(val, (dict, list, tuple)):
                out[key] = _project_value(val, sub, is_include, container)
            elif not is_include:
                out[key] = _value_copy(val)
        elif (is_include and sub is not _DROPPED) or (not is_include and sub is _DROPPED):
            out[key] = _value_copy(val)
    return out


_mm_project_by_spec = mm_collection._project_by_spec
mm_collection._project_by_spec = _project_by_spec

_mm_combine_projection_spec = mm_collection._combine_projection_spec
_COMBINED = {}


def _combine_projection_spec(fields):
    """mongomock's nesting of a projection's dotted paths, kept per projection: a find's cursor projects
    every document with the same one (the nested spec is only read)."""
    key = tuple(fields.items())
    try:
        return _COMBINED[key]
    except KeyError:
        pass
    except TypeError:  # unhashable values: not kept
        return _mm_combine_projection_spec(fields)
    combined = _mm_combine_projection_spec(fields)
    if len(_COMBINED) >= 256:
        _COMBINED.clear()
    _COMBINED[key] = combined
    return combined


mm_collection._combine_projection_spec = _combine_projection_spec


_INCLUSIONS = {}


def _inclusion_tree(projection):
    """(tree, with _id) of a projection that only includes fields (values 1/true, `_id` also 0), the tree
    {name: True or a tree of the path's rest}; kept per projection. None for any other projection
    (operators, expressions, exclusions, a path beside its prefix), which mongomock's projection serves."""
    try:
        key = tuple(projection.items())
        return _INCLUSIONS[key]
    except KeyError:
        pass
    except TypeError:  # unhashable values: not a plain inclusion
        return None
    parsed = _parse_inclusion(key)
    if len(_INCLUSIONS) >= 256:
        _INCLUSIONS.clear()
    _INCLUSIONS[key] = parsed
    return parsed


def _parse_inclusion(items):
    """The tree of _inclusion_tree, built from the projection's (name, value) pairs."""
    tree = {}
    with_id = True
    for name, value in items:
        if type(value) not in (int, bool, float) or value != value or not isinstance(name, str):
            return None
        if name == "_id":
            with_id = bool(value)
            continue
        parts = name.split(".")
        if not value or any(not part or part.startswith("$") for part in parts):
            return None
        node = tree
        for part in parts[:-1]:
            node = node.setdefault(part, {})
            if node is True:
                return None
        if parts[-1] in node:
            return None
        node[parts[-1]] = True
    return (tree, with_id) if tree and "_id" not in tree else None


_NOT_PLAIN = object()


def _include_tree(doc, tree):
    """`doc` projected on an inclusion tree, values shared, in the document's order; _NOT_PLAIN where a
    path goes through an array (mongomock's projection then serves the document)."""
    out = {}
    for name, value in doc.items():
        sub = tree.get(name)
        if sub is None:
            continue
        if sub is True:
            out[name] = value
        elif isinstance(value, dict):
            inner = _include_tree(value, sub)
            if inner is _NOT_PLAIN:
                return _NOT_PLAIN
            out[name] = inner
        elif isinstance(value, (list, tuple)) or hasattr(value, "keys"):
            return _NOT_PLAIN
    return out


def _include_fields(doc, tree, with_id):
    """An inclusion projection of `doc` sharing its values (for a result only encoded): `_id` first
    unless excluded, then the included fields in the document's order, as mongod returns them; None
    where mongomock's projection must serve it."""
    out = _include_tree(doc, tree)
    if out is _NOT_PLAIN:
        return None
    if with_id and "_id" in doc:
        out.pop("_id", None)
        return {"_id": doc["_id"], **out}
    return out


def project(doc, projection, shared=False):
    """Apply a find projection (inclusion or exclusion, dotted paths, $slice/$elemMatch) with `_id` first.

    With `shared`, the result may share values with `doc`: for a caller that encodes it at once and never
    changes it."""
    if not projection:
        return doc
    if shared:
        inclusion = _inclusion_tree(projection)
        if inclusion is not None:
            out = _include_fields(doc, *inclusion)
            if out is not None:
                return out
    _SHARING.active = shared
    try:
        out = _SCRATCH._copy_only_fields(doc, dict(projection), dict)
    except Exception as exc:  # malformed projections
        raise from_mongomock(exc) from exc
    finally:
        _SHARING.active = False
    return id_first(out) if "_id" in out else out


class LookupDatabase:
    """What mongomock's $lookup/$graphLookup need from a database: `get_collection(name).find(filter)`,
    answered by our own indexed query path through `find_fn(name, filter)`."""

    def __init__(self, find_fn):
        self._find_fn = find_fn

    def get_collection(self, name):
        """A minimal collection object whose find goes through the server's query engine."""
        return _LookupCollection(self._find_fn, name)


class _LookupCollection:
    """Collection facade for $lookup."""

    def __init__(self, find_fn, name):
        self._find_fn = find_fn
        self._name = name

    def find(self, filt):
        """Deep copies of the matching documents (later stages may modify them)."""
        return copy.deepcopy(self._find_fn(self._name, filt))


def _rewrite_stage(op, options):
    """Express stages mongomock lacks with ones it has: $unset, $replaceWith, $sortByCount."""
    if op == "$unset":
        fields = [options] if isinstance(options, str) else list(options)
        return [{"$project": {f: 0 for f in fields}}]
    if op == "$replaceWith":
        return [{"$replaceRoot": {"newRoot": options}}]
    if op == "$sortByCount":
        return [{"$group": {"_id": options, "count": {"$sum": 1}}}, {"$sort": {"count": -1}}]
    return [{op: options}]


def _match_stage(docs, filt):
    """A $match stage with the server's matcher (the one find uses)."""
    if not isinstance(filt, dict):
        raise bad_value("the match filter must be an expression in an object")
    try:
        match = compile_filter(filt)
        return [d for d in docs if match(d)]
    except Exception as exc:  # malformed filters, reported by mongomock with assorted exception types
        raise from_mongomock(exc) from exc


def run_stages(docs, stages, database):
    """Run aggregation stages over `docs` (private copies, unless every stage is read-only): $sort with
    MongoDB ordering, $match with the server's matcher, everything else with mongomock; $group results get `_id`
    first, as in MongoDB."""
    for stage in stages:
        if not isinstance(stage, dict) or len(stage) != 1:
            raise bad_value("A pipeline stage specification object must contain exactly one field.")
        (op, options), = stage.items()
        if op == "$out" or op == "$merge":
            raise MongoError(115, "%s is not supported by the test server" % op)
        for sub_op, sub_options in (next(iter(s.items())) for s in _rewrite_stage(op, options)):
            if sub_op == "$sort":
                docs = list(docs)
                sort_documents(docs, list(sub_options.items()))
                continue
            if sub_op == "$match":
                docs = _match_stage(docs, sub_options)
                continue
            if sub_op == "$setWindowFields":
                docs = group.window(docs, sub_options)
                continue
            if sub_op == "$group" and group.handles(sub_options):
                docs = group.run(docs, sub_options)
                continue
            try:
                docs = list(mm_aggregate.process_pipeline(docs, database, [{sub_op: sub_options}], None))
            except Exception as exc:  # mongomock reports bad stages with assorted exception types
                raise from_mongomock(exc) from exc
            if sub_op == "$group":
                docs = [id_first(d) for d in docs]
    return [plain(d) if isinstance(d, OrderedDict) else d for d in docs]
