"""The applier's floor: a bare follower of a collection's change stream that does, per batch of
events, the least any applier must, so that the applier's rate can be compared with it on the same
server (applier.py runs it as a process of its own, as the applier is one).

Per getMore that brings events: one find of the facts the events name (their _ids, with the fields
the index tables need), one find per index collection of the entries those facts have (by fact _id),
and one unordered bulk write per index collection (the entries that should go deleted, the missing
ones upserted).  Its index collections are its own (floor_<collection>_<i>), built from the facts at
the start, one entry per fact each, a unique one with the key alone as _id, as the FDW's claims are.
They are shaped and indexed as the FDW's index collections are (the entry _id {k0, ..., id}, id, v
{i0, ...}; the indexes "lookup" on the key and "fact" on id), since every write to them costs the
server that.  Nothing else: no markers, no position stored, no conflict handling, no PostgreSQL.

    python3 floor.py [--c BINARY] DB COLLECTION INDEX [INDEX ...]
        INDEX: comma-separated fields, "u:" before them for a unique one on lower() of the first,
        optional "+field,..." for included fields, e.g. u:email  town,last_name  town+first_name
    stdout: "ready <cpu s>", then after each applied batch "<events> <monotonic> <cpu s> <commands> <getMores>"
    (running totals); it stops when stdin closes.
    --c BINARY: once the index collections are built, follow with floor.c compiled (the same work
    with libmongoc, as the applier does it: the follower's own CPU then hardly counts).
"""
import os
import sys
import threading
import time

import pymongo
from pymongo import DeleteOne, ReplaceOne

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures"))
import mongo_client  # noqa: E402

APP_NAME = "idxtable_bench floor"
BATCH = 1000            # as the applier's change stream (IDX_CS_BATCH_SIZE)
AWAIT_MS = 500


class Index:
    """One index collection of the floor and how its entries are computed from a fact."""

    def __init__(self, db, collection, n, spec):
        self.unique = spec.startswith("u:")
        spec = spec[2:] if self.unique else spec
        keys, _, include = spec.partition("+")
        self.keys = keys.split(",")
        self.include = include.split(",") if include else []
        self.coll = db["floor_%s_%d" % (collection, n)]

    def fields(self):
        """The fact fields the entries need."""
        return self.keys + self.include

    def entry(self, fact):
        """The entry of fact (a dict with _id), shaped as the FDW's: _id {k0, ..., id}, id, v."""
        if self.unique:
            v = fact.get(self.keys[0])
            eid = {"k0": v.lower() if isinstance(v, str) else v}
        else:
            eid = {"k%d" % i: fact.get(k) for i, k in enumerate(self.keys)}
            eid["id"] = fact["_id"]
        doc = {"_id": eid, "id": fact["_id"]}
        if self.include:
            doc["v"] = {"i%d" % i: fact.get(k) for i, k in enumerate(self.include)}
        return doc

    def build(self, facts):
        """Fill the collection from all facts (not timed), with the indexes of the FDW's index
        collections: "lookup" on the key, "fact" on the fact's _id."""
        self.coll.drop()
        self.coll.create_index([("_id.k%d" % i, 1) for i in range(len(self.keys))], name="lookup")
        self.coll.create_index("id", name="fact")
        docs = [self.entry(f) for f in facts]
        for i in range(0, len(docs), 1000):
            self.coll.insert_many(docs[i:i + 1000], ordered=False)

    def apply(self, ids, facts):
        """One find of the entries of ids, one bulk write of the differences; entries written."""
        have = {}
        for e in self.coll.find({"id": {"$in": ids}}, batch_size=len(ids) * 2 + 1):
            have[repr(e["_id"])] = e
        want = {}
        for f in facts:
            e = self.entry(f)
            want[repr(e["_id"])] = e
        ops = [DeleteOne({"_id": e["_id"], "id": e["id"]}) for k, e in have.items() if k not in want]
        ops += [ReplaceOne({"_id": e["_id"]}, e, upsert=True) for k, e in want.items()
                if have.get(k) != e]
        if ops:
            self.coll.bulk_write(ops, ordered=False)
        return len(ops)


class Follower:
    """The change stream of db.collection, read batch by batch with raw commands."""

    def __init__(self, client, db, collection, indexes):
        self.db = db
        self.collection = collection
        self.indexes = indexes
        self.session = client.start_session(causal_consistency=False)
        fields = sorted({f for ix in indexes for f in ix.fields()})
        self.projection = {f: 1 for f in fields}
        self.events = self.commands = self.get_mores = 0

    def open(self):
        """The aggregate that opens the stream (now)."""
        reply = self.db.command({"aggregate": self.collection,
                                 "pipeline": [{"$changeStream": {}}],
                                 "cursor": {"batchSize": BATCH}}, session=self.session)
        self.cursor_id = reply["cursor"]["id"]
        self.commands += 1
        return reply["cursor"]["firstBatch"]

    def get_more(self):
        """The next batch (empty after AWAIT_MS without events)."""
        reply = self.db.command({"getMore": self.cursor_id, "collection": self.collection,
                                 "batchSize": BATCH, "maxTimeMS": AWAIT_MS}, session=self.session)
        self.cursor_id = reply["cursor"]["id"]
        self.commands += 1
        self.get_mores += 1
        return reply["cursor"]["nextBatch"]

    def apply(self, batch):
        """The least an applier does for a batch."""
        ids, seen = [], set()
        for ev in batch:
            key = ev.get("documentKey", {}).get("_id")
            if key is not None and key not in seen:
                seen.add(key)
                ids.append(key)
        if ids:
            facts = list(self.db[self.collection].find({"_id": {"$in": ids}}, self.projection,
                                                       batch_size=len(ids) + 1))
            self.commands += 1
            for ix in self.indexes:
                writes = ix.apply(ids, facts)
                self.commands += 1 + (1 if writes else 0)
        self.events += len(batch)


def main():
    args = sys.argv[1:]
    binary = None
    if args[0] == "--c":
        binary, args = args[1], args[2:]
    db_name, collection, specs = args[0], args[1], args[2:]
    client = mongo_client.connect(appname=APP_NAME)
    db = mongo_client.database(client, db_name)
    indexes = [Index(db, collection, i, s) for i, s in enumerate(specs)]
    facts = list(db[collection].find({}, {f: 1 for ix in indexes for f in ix.fields()}))
    for ix in indexes:
        ix.build(facts)
    if binary:
        client.close()
        os.execv(binary, [binary, os.environ["MONGO_URI"], db_name, collection] + specs)
    follower = Follower(client, db, collection, indexes)
    batch = follower.open()
    stop = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
    print("ready %.4f" % time.process_time(), flush=True)
    while not stop.is_set():
        if batch:
            follower.apply(batch)
            print("%d %.6f %.4f %d %d" % (follower.events, time.monotonic(), time.process_time(),
                                          follower.commands, follower.get_mores), flush=True)
        batch = follower.get_more()
    client.close()


if __name__ == "__main__":
    main()
