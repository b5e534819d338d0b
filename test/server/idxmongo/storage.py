"""Document storage with ordered indexes.

Each collection keeps its documents in a dict keyed by the MongoDB sort key of `_id` (insertion order is the
natural order), plus one `Index` per declared index, the `_id_` index included. An index is a SortedList of
`(key_tuple, id_key)` pairs where `key_tuple` holds one MongoDB sort key per indexed field; an array value
gives one entry per element (multikey), a missing field indexes as null. Stored documents are never mutated
in place: every write replaces the dict, so cursors and before-images can keep references safely.
"""

import uuid

from bson.binary import Binary
from sortedcontainers import SortedList

from .bsonkeys import ABOVE_ALL, MISSING, format_document, leaf_values, sort_key
from .collation import fold
from .errors import MongoError
from .matcher import compile_filter

ID_INDEX_SPEC = {"v": 2, "key": {"_id": 1}, "name": "_id_"}


class DuplicateKey(MongoError):
    """E11000 with MongoDB's message, keyPattern and keyValue; remembers which document holds the key."""

    def __init__(self, coll, index, raw_values, holder_idk):
        key_value = {path: (None if v is MISSING else v) for path, v in zip(index.paths, raw_values)}
        msg = "E11000 duplicate key error collection: %s index: %s dup key: %s" % (
            coll.ns, index.name, format_document(key_value))
        super().__init__(11000, msg, extra={"keyPattern": dict(index.spec["key"]), "keyValue": key_value})
        self.holder_idk = holder_idk


class Index:
    """One ordered index (possibly compound, unique, sparse or partial) over a collection."""

    def __init__(self, spec):
        self.spec = spec
        self.name = spec["name"]
        self.paths = list(spec["key"])
        self.directions = [-1 if d < 0 else 1 for d in spec["key"].values()]
        self.is_id = self.name == "_id_"
        self.unique = self.is_id or bool(spec.get("unique"))
        self.sparse = bool(spec.get("sparse"))
        self.partial = spec.get("partialFilterExpression")
        self.partial_match = compile_filter(self.partial) if self.partial is not None else None
        self.collation = spec.get("collation")  # None: simple; keys of strings are folded under en/2
        self.entries = SortedList()
        self.multikey = False

    @property
    def serves_queries(self):
        """Sparse and partial indexes do not hold every document, so the planner leaves them alone."""
        return not (self.sparse or self.partial)

    def keys_of(self, doc, idk=None):
        """Map of key tuple -> raw field values for `doc` (empty when sparse/partial exclude it); `idk`, the
        sort key of its `_id` if the caller has it, spares the `_id` index computing it again.

        Raises CannotIndexParallelArrays (171) when two indexed fields are arrays, as MongoDB does.
        """
        if self.is_id:
            return {(idk if idk is not None and not self.collation else self._key(doc["_id"]),): (doc["_id"],)}
        if self.partial_match is not None and not self.partial_match(doc):
            return {}
        per_field = []
        array_fields = []
        present = False
        for path in self.paths:
            values, multikey = leaf_values(doc, path)
            if multikey:
                array_fields.append(path)
            if multikey or values[0] is not MISSING:
                present = True
            per_field.append(values)
        if self.sparse and not present:
            return {}
        if len(array_fields) > 1:
            raise MongoError(171, "cannot index parallel arrays [%s] [%s]" % (array_fields[1], array_fields[0]))
        if array_fields:
            self.multikey = True
        keys = {(): ()}
        for values in per_field:
            keys = {kt + (self._key(v),): raw + (v,) for kt, raw in keys.items() for v in values}
        return keys

    def _key(self, value):
        """The sort key of one indexed value under the index's collation."""
        return sort_key(fold(value) if self.collation else value)

    def holder_of(self, key_tuple, exclude_idk):
        """The id key of a document other than `exclude_idk` holding `key_tuple`, or None."""
        for _, idk in self.entries.irange((key_tuple,), (key_tuple, ABOVE_ALL)):
            if idk != exclude_idk:
                return idk
        return None

    def add(self, idk, keys):
        """Insert the entries of one document."""
        for kt in keys:
            self.entries.add((kt, idk))

    def remove(self, idk, keys):
        """Remove the entries of one document."""
        for kt in keys:
            self.entries.discard((kt, idk))


class Collection:
    """A collection: documents by id key, its indexes, its options."""

    def __init__(self, db, name, options=None):
        self.db = db
        self.name = name
        self.options = dict(options or {})
        self.uuid = Binary(uuid.uuid4().bytes, 4)
        self.docs = {}
        self.record_ids = {}  # id key -> insertion sequence number (MongoDB's RecordId: natural order)
        self.next_record_id = 1
        id_spec = dict(ID_INDEX_SPEC)
        if self.options.get("collation"):
            id_spec["collation"] = self.options["collation"]
        self.indexes = {"_id_": Index(id_spec)}

    @property
    def ns(self):
        """The namespace string `db.collection`."""
        return "%s.%s" % (self.db, self.name)

    def index_keys(self, doc, idk=None):
        """Key map of `doc` for every index, by index name (`idk`: the sort key of its `_id`, if known)."""
        return {name: index.keys_of(doc, idk) for name, index in self.indexes.items()}

    def check_unique(self, idk, keys):
        """Raise DuplicateKey if another document holds one of `keys` in a unique index."""
        for name, index in self.indexes.items():
            if not index.unique:
                continue
            for kt, raw in keys[name].items():
                holder = index.holder_of(kt, idk)
                if holder is not None:
                    raise DuplicateKey(self, index, raw, holder)

    def insert(self, doc, idk=None):
        """Add a new document (which must carry `_id`); returns its id key (`idk`, if the caller has it)."""
        if idk is None:
            idk = sort_key(doc["_id"])
        keys = self.index_keys(doc, idk)
        if idk in self.docs:
            raise DuplicateKey(self, self.indexes["_id_"], (doc["_id"],), idk)
        self.check_unique(idk, keys)
        self.docs[idk] = doc
        self.record_ids[idk] = self.next_record_id
        self.next_record_id += 1
        for name, index in self.indexes.items():
            index.add(idk, keys[name])
        return idk

    def replace(self, idk, new_doc):
        """Replace the document stored under `idk`, keeping its place in natural order."""
        old_doc = self.docs[idk]
        old_keys = self.index_keys(old_doc, idk)
        new_keys = self.index_keys(new_doc, idk)
        self.check_unique(idk, new_keys)
        for name, index in self.indexes.items():
            if old_keys[name] != new_keys[name]:
                index.remove(idk, old_keys[name])
                index.add(idk, new_keys[name])
        self.docs[idk] = new_doc

    def delete(self, idk):
        """Remove the document stored under `idk`; returns it."""
        doc = self.docs.pop(idk)
        self.record_ids.pop(idk)
        for name, keys in self.index_keys(doc, idk).items():
            self.indexes[name].remove(idk, keys)
        return doc

    def restore(self, images, record_ids):
        """Put back before-images ({id key: document or None}) after a transaction abort.

        All touched documents leave the indexes first, so restoring never trips over keys the transaction
        moved between documents. Deleted documents get their old record ids (`record_ids`) back, so the
        natural order is what it was before the transaction.
        """
        for idk in images:
            current = self.docs.get(idk)
            if current is not None:
                for name, keys in self.index_keys(current).items():
                    self.indexes[name].remove(idk, keys)
        reorder = False
        for idk, before in images.items():
            if before is None:
                self.docs.pop(idk, None)
                self.record_ids.pop(idk, None)
                continue
            if idk in record_ids:  # deleted (perhaps re-inserted) by the transaction
                self.record_ids[idk] = record_ids[idk]
                reorder = True
            self.docs[idk] = before
            for name, keys in self.index_keys(before).items():
                self.indexes[name].add(idk, keys)
        if reorder:
            self.docs = dict(sorted(self.docs.items(), key=lambda item: self.record_ids[item[0]]))

    def add_index(self, spec):
        """Build a new index from the current documents; unique violations abort the build with 11000."""
        index = Index(spec)
        for idk, doc in self.docs.items():
            keys = index.keys_of(doc)
            if index.unique:
                for kt, raw in keys.items():
                    holder = index.holder_of(kt, idk)
                    if holder is not None:
                        raise DuplicateKey(self, index, raw, holder)
            index.add(idk, keys)
        self.indexes[index.name] = index
        return index


class Store:
    """All databases: {db name: {collection name: Collection}}."""

    def __init__(self):
        self.dbs = {}

    def get(self, db, name):
        """The collection or None."""
        return self.dbs.get(db, {}).get(name)

    def ensure(self, db, name, options=None):
        """The collection, created (implicitly, as MongoDB does on first write) if needed: (coll, created)."""
        colls = self.dbs.setdefault(db, {})
        if name in colls:
            return colls[name], False
        coll = colls[name] = Collection(db, name, options)
        return coll, True

    def add(self, coll):
        """Put in a collection built elsewhere (one a transaction created, at its commit)."""
        self.dbs.setdefault(coll.db, {})[coll.name] = coll

    def drop(self, db, name):
        """Remove a collection; returns it or None."""
        colls = self.dbs.get(db, {})
        coll = colls.pop(name, None)
        if not colls:
            self.dbs.pop(db, None)
        return coll

    def drop_db(self, db):
        """Remove a database."""
        self.dbs.pop(db, None)

    def collections(self, db):
        """The collections of a database, by name."""
        return self.dbs.get(db, {})
