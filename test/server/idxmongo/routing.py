"""The routing table of a cluster (cluster.py), as mongos reads it from the config server: which
collections are sharded, on what key, and which shard owns each chunk of the key's range.

A chunk is a range [min, max) of shard key values, compared in MongoDB's order (bsonkeys.sort_key), a
hashed field by its hash. `shardCollection` on a ranged key starts with one chunk on the primary shard; on
a hashed key with two chunks per shard, spread over the whole range of hashes (mongod's default for an
empty collection). `split` divides a chunk, `moveChunk` gives one to another shard (router.py moves its
documents, with no change event, as migrations are hidden from change streams).

Targeting follows mongos (s/chunk_manager_targeter.cpp, s/shard_key_pattern.cpp): a filter with an
equality (or `$in`) on every shard key field reaches the shards owning those values; a range on a ranged
key's first field the shards of the chunks it overlaps; anything else every shard owning a chunk.

The hash of a value is not mongod's (md5 of the value as mongod's BSONElementHasher feeds it); it
is an md5 of the value's BSON with numbers as 64-bit integers, so 1, 1.0 and Int64(1) hash alike, as
on mongod. Clients never compute it.
"""

import bisect
import copy
import datetime
import hashlib
import math
import struct
import threading
import time
import uuid

import bson
from bson.binary import Binary
from bson.int64 import Int64
from bson.max_key import MaxKey
from bson.min_key import MinKey
from bson.objectid import ObjectId
from bson.timestamp import Timestamp

from .bsonkeys import MISSING, REGEX, sort_key
from .errors import MongoError

INT64_MIN, INT64_MAX = -(2 ** 63), 2 ** 63 - 1
CHUNKS_PER_SHARD = 2


def hashed(value):
    """The hash of one shard key value (an Int64), equal for equal numbers of any type."""
    if isinstance(value, bool):
        pass
    elif isinstance(value, (int, float)):
        value = Int64(int(value)) if isinstance(value, int) or math.isfinite(value) else value
    elif value is MISSING:
        value = None
    digest = hashlib.md5(bson.encode({"": value})).digest()
    return Int64(struct.unpack("<q", digest[:8])[0])


def _parse_key(key):
    """A shard key pattern: fields with 1 or "hashed" (at most one); BadValue (2) otherwise."""
    if not isinstance(key, dict) or not key:
        raise MongoError(2, "The shard key pattern must be a non-empty object")
    hashed_fields = [f for f, kind in key.items() if kind == "hashed"]
    for path, kind in key.items():
        if not path or path.startswith("$") or any(not part for part in path.split(".")):
            raise MongoError(2, "Invalid shard key field name: %r" % path)
        if kind != "hashed" and (isinstance(kind, bool) or kind != 1):
            raise MongoError(2, "Shard key fields must be ascending (1) or \"hashed\": %r" % (kind,))
    if len(hashed_fields) > 1:
        raise MongoError(2, "A shard key may have at most one hashed field")
    return dict(key), (hashed_fields[0] if hashed_fields else None)


def path_value(doc, path):
    """The value at a dotted path of a document (MISSING when absent); BadValue for an array, which a
    shard key may not hold."""
    value = doc
    for part in path.split("."):
        if not isinstance(value, dict) or part not in value:
            return MISSING
        value = value[part]
    if isinstance(value, list):
        raise MongoError(2, "Shard key cannot contain an array, found one at %s" % path)
    return value


class Chunk:
    """[min, max) of shard key values (as bound tuples of sort keys) and the shard that owns it."""

    def __init__(self, low, high, shard, low_doc, high_doc, version=(1, 0)):
        self.low = low
        self.high = high
        self.shard = shard
        self.low_doc = low_doc
        self.high_doc = high_doc
        self.version = version  # (major, minor): mongod's chunk version (shard_version.py)
        self.id = ObjectId()


class Sharded:
    """A sharded collection: its key and its chunks, ordered by range."""

    def __init__(self, ns, key, unique, shards):
        self.ns = ns
        self.key, self.hashed_field = _parse_key(key)
        self.fields = list(self.key)
        self.unique = bool(unique)
        self.uuid = Binary(uuid.uuid4().bytes, 4)
        self.epoch = ObjectId()
        self.created = datetime.datetime.utcnow()
        self.timestamp = Timestamp(int(time.time()), 1)
        self.no_balance = False
        self.chunks = []
        if self.hashed_field is None:
            self.chunks.append(self._chunk(None, None, 0))
        else:
            count = CHUNKS_PER_SHARD * shards
            step = (INT64_MAX - INT64_MIN) // count
            cuts = [INT64_MIN + step * i for i in range(1, count)]
            bounds = [None] + cuts + [None]
            for i in range(count):
                self.chunks.append(self._chunk(bounds[i], bounds[i + 1], i // CHUNKS_PER_SHARD))
        for i, chunk in enumerate(self.chunks):
            chunk.version = (1, i)

    def _bound(self, value, edge):
        """(bound tuple, bound document) of a split point on the first field (None: MinKey or MaxKey), the
        other fields at MinKey, as mongod's split points are completed."""
        doc = {}
        for i, field in enumerate(self.fields):
            if i == 0 and value is not None:
                doc[field] = Int64(value) if field == self.hashed_field else value
            else:
                doc[field] = MinKey() if (i > 0 or edge == "low") else MaxKey()
        return tuple(sort_key(v) for v in doc.values()), doc

    def _chunk(self, low, high, shard):
        """A chunk between two split points of the first field."""
        low_key, low_doc = self._bound(low, "low")
        high_key, high_doc = self._bound(high, "high")
        return Chunk(low_key, high_key, shard, low_doc, high_doc)

    def key_values(self, doc):
        """The shard key values of a document (hashed field hashed); MISSING fields count as null."""
        out = []
        for field in self.fields:
            value = path_value(doc, field)
            out.append(hashed(value) if field == self.hashed_field else (None if value is MISSING else value))
        return out

    def point(self, values):
        """The bound tuple of a full shard key value."""
        return tuple(sort_key(v) for v in values)

    def chunk_of(self, point):
        """The chunk holding a point."""
        lows = [c.low for c in self.chunks]
        return self.chunks[max(0, bisect.bisect_right(lows, point) - 1)]

    def shard_of(self, doc):
        """The index of the shard that owns a document."""
        return self.chunk_of(self.point(self.key_values(doc))).shard

    def owners(self):
        """The shards owning at least one chunk, in order."""
        return sorted({c.shard for c in self.chunks})

    def split(self, values):
        """Split the chunk holding a full shard key value there (a no-op at a chunk's bound)."""
        point = self.point(values)
        chunk = self.chunk_of(point)
        if point == chunk.low:
            return
        doc = dict(zip(self.fields, values))
        index = self.chunks.index(chunk)
        major, minor = self.version()
        upper = Chunk(point, chunk.high, chunk.shard, doc, chunk.high_doc, (major, minor + 2))
        chunk.high, chunk.high_doc = point, doc
        chunk.version = (major, minor + 1)
        self.chunks.insert(index + 1, upper)

    def version(self):
        """The collection version: the highest of its chunks' versions."""
        return max(c.version for c in self.chunks)

    def shard_version(self, shard):
        """A shard's version of the collection: the highest version of the chunks it owns, (0, 0) when it
        owns none (mongod's ChunkVersion; its epoch and timestamp are the collection's)."""
        return max((c.version for c in self.chunks if c.shard == shard), default=(0, 0))

    def give(self, chunk, to):
        """Record a migration's commit as the config server does: the chunk gets the next major version,
        and one chunk the donor keeps gets it too (minor 1), so both shards' versions change."""
        donor = chunk.shard
        major = self.version()[0] + 1
        chunk.shard = to
        chunk.version = (major, 0)
        kept = [c for c in self.chunks if c.shard == donor]
        if kept:
            kept[0].version = (major, 1)

    def snapshot(self):
        """A copy of the routing information (what a router caches): its chunks copied."""
        out = copy.copy(self)
        out.chunks = [copy.copy(c) for c in self.chunks]
        return out

    def target(self, filt):
        """The shards a filter must reach (sorted indexes)."""
        points = self._points(filt if isinstance(filt, dict) else {})
        if points is not None:
            return sorted({self.chunk_of(self.point(p)).shard for p in points})
        if self.hashed_field != self.fields[0]:
            span = _range(filt if isinstance(filt, dict) else {}, self.fields[0])
            if span is not None:
                return sorted({c.shard for c in self.chunks if _overlaps(c, span)})
        return self.owners()

    def _points(self, filt):
        """The full shard key values a filter allows (each field's equalities combined), or None when
        some field has no equality."""
        choices = []
        for field in self.fields:
            values = _equalities(filt, field)
            if values is None or len(values) > 1000:
                return None
            choices.append([hashed(v) if field == self.hashed_field else v for v in values])
        points = [[]]
        for values in choices:
            points = [p + [v] for p in points for v in values]
            if len(points) > 10000:
                return None
        return points

    def config_doc(self):
        """Its config.collections document."""
        return {"_id": self.ns, "lastmodEpoch": self.epoch, "lastmod": self.created, "timestamp": self.timestamp,
                "uuid": self.uuid, "key": dict(self.key), "unique": self.unique, "noBalance": self.no_balance}

    def chunk_docs(self, shard_names):
        """Its config.chunks documents."""
        return [{"_id": c.id, "uuid": self.uuid, "ns": self.ns, "min": dict(c.low_doc), "max": dict(c.high_doc),
                 "shard": shard_names[c.shard], "lastmod": Timestamp(*c.version)} for c in self.chunks]


def _is_operators(value):
    """Is a filter value a document of query operators?"""
    return isinstance(value, dict) and bool(value) and next(iter(value)).startswith("$")


def _plain(value):
    """Whether a value can be an equality's operand for targeting (no array, regex or operators)."""
    return not isinstance(value, list) and sort_key(value)[0] != REGEX and not _is_operators(value)


def _equalities(filt, path):
    """The values a filter allows at `path` by equality or $in (None: not restricted to a list), looked
    for at the top level, inside a top-level $and, and inside an equality on an enclosing path."""
    if path in filt:
        value = filt[path]
        if _is_operators(value):
            if set(value) == {"$eq"} and _plain(value["$eq"]):
                return [value["$eq"]]
            if set(value) == {"$in"} and isinstance(value["$in"], list) and all(_plain(v) for v in value["$in"]):
                return list(value["$in"])
            return None
        return [value] if _plain(value) else None
    head, _, rest = path.partition(".")
    if rest and head in filt and isinstance(filt[head], dict) and not _is_operators(filt[head]):
        inner = path_value(filt[head], rest)
        return [None if inner is MISSING else inner]
    for clause in filt.get("$and") or []:
        if isinstance(clause, dict):
            found = _equalities(clause, path)
            if found is not None:
                return found
    return None


def _range(filt, path):
    """(low, high) sort-key bounds (None: unbounded) of a range on `path` at the top level, or None."""
    value = filt.get(path)
    if not _is_operators(value):
        return None
    low = high = None
    for op, operand in value.items():
        if not _plain(operand):
            return None
        if op in ("$gt", "$gte"):
            low = sort_key(operand)
        elif op in ("$lt", "$lte"):
            high = sort_key(operand)
        else:
            return None
    return low, high


def _overlaps(chunk, span):
    """Whether a chunk's first-field range overlaps a range (inclusive bounds, to be safe)."""
    low, high = span
    if high is not None and chunk.low[0] > high:
        return False
    if low is not None and chunk.high[0] < low:
        return False
    return True


class RoutingTable:
    """The sharded collections of the cluster by namespace, shared by its routers."""

    def __init__(self, cluster):
        self.cluster = cluster
        self.lock = threading.RLock()
        self.collections = {}

    def get(self, db, coll):
        """The Sharded collection `db.coll`, or None when it is not sharded."""
        if not isinstance(coll, str):
            return None
        return self.collections.get("%s.%s" % (db, coll))

    def add(self, ns, key, unique):
        """Shard a collection (a new routing entry)."""
        with self.lock:
            entry = Sharded(ns, key, unique, len(self.cluster.shards))
            self.collections[ns] = entry
            return entry

    def forget(self, db, coll=None):
        """Drop the entries of a dropped collection or database."""
        with self.lock:
            for ns in list(self.collections):
                if (coll is not None and ns == "%s.%s" % (db, coll)) or (coll is None and ns.startswith(db + ".")):
                    del self.collections[ns]

    def rename(self, old_ns, new_ns):
        """A renamed sharded collection (mongos 5.0+ renames sharded collections)."""
        with self.lock:
            entry = self.collections.pop(old_ns, None)
            if entry is not None:
                entry.ns = new_ns
                self.collections[new_ns] = entry
