#!/usr/bin/python3
"""ORDER BY a text key of an index table with a LIMIT reads about as much as it returns, in byte order.

Under a C-like collation (C, POSIX, C.<encoding>) the entries of a text key
are in the column's order (MongoDB compares strings as bytes), so that

- ORDER BY key LIMIT k, with or without OFFSET or a range on the key,
  examines at most 2(k + offset) + 2 index keys and 2(k + offset) + 2
  documents in MongoDB (serverStatus metrics.queryExecutor.scanned and
  scannedObjects): the lookup's entries and the facts fetched by _id;
- ORDER BY key, _id LIMIT k on a key whose values are nearly unique does the
  same (each group of equal keys is read whole, one entry beyond it);
- WHERE key = v ORDER BY _id LIMIT k reads the group's entries and fetches
  only the k facts;
- the rows are those PostgreSQL's byte order gives, with string and
  ObjectId _ids mixed (an ObjectId reads as its 24 hex digits) and NULL keys
  last;
- a group of equal keys that most rows share (5,000 of 6,500 in one town,
  1,000 with no town) is read in _id order by the server, not whole:
  ORDER BY town, _id LIMIT k OFFSET o (the town's group or the NULL group
  first) and WHERE town = v ORDER BY _id examine at most 2(k + o) + 12 index
  entries (3(k + o) + 12 when the ids are strings and ObjectIds, one find
  each) and fetch k + o facts, for string, mixed and integer _ids; past
  such a group, in every NULL order and direction of the town, the rows
  are PostgreSQL's.

Environment as for test/differential.py (PGHOST..., MONGO_URI, MONGO_USER,
MONGO_PASSWORD).  The PostgreSQL and MongoDB databases ``idxtable_order``
are dropped and created, and left in place.  The last line is
``index order examined: N passed, M failed``.
"""
import os
import random
import sys

from bson.objectid import ObjectId

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures"))
from results import Results  # noqa: E402  (test/fixtures)
import mongo_client  # noqa: E402  (test/fixtures)
import pg_fixture  # noqa: E402  (test/fixtures)

DATABASE = "idxtable_order"
N = 2000
TOWNS = 40


def make_documents():
    """N facts: string and ObjectId _ids, nearly unique names (some NULL or missing), towns with ties."""
    rng = random.Random(29)
    docs = []
    for i in range(N):
        _id = ObjectId("%024x" % rng.getrandbits(96)) if i % 2 else "s%05d" % rng.randrange(10 ** 5)
        doc = {"_id": _id, "n": i}
        r = rng.random()
        if r < 0.05:
            doc["name"] = None
        elif r > 0.08:
            # ties now and then, cases and non-ASCII letters around the ASCII ones
            doc["name"] = rng.choice(["name", "Name", "näme", "NAME"]) + "%04d" % rng.randrange(5000)
        if rng.random() > 0.05:
            doc["town"] = "T%02d" % rng.randrange(TOWNS)
        docs.append(doc)
    unique = {}
    for d in docs:
        unique.setdefault(d["_id"], d)
    return list(unique.values())


def text(value):
    """A value as the text column reads it: an ObjectId as its hex digits."""
    return str(value) if isinstance(value, ObjectId) else value


def byte_order(rows, keys):
    """Rows sorted as PostgreSQL sorts them under COLLATE "C": bytes, NULLs last."""
    def key(row):
        return tuple((row[k] is None, (row[k] or "").encode()) for k in keys)
    return sorted(rows, key=key)


def scanned(client):
    metrics = client.admin.command("serverStatus")["metrics"]["queryExecutor"]
    return metrics["scanned"], metrics["scannedObjects"]


def query(conn, client, sql):
    """Rows of a query and the index keys and documents MongoDB examined for it."""
    k0, d0 = scanned(client)
    with conn.cursor() as cur:
        cur.execute(sql)
        rows = cur.fetchall()
    k1, d1 = scanned(client)
    return rows, k1 - k0, d1 - d0


BIG = 5000
NULLS = 1000
SMALL = 500


def skewed_documents(kind):
    """BIG facts in town "Redmond", NULLS without a town, SMALL in other towns; _ids strings, strings and
    ObjectIds, or integers, in no order."""
    rng = random.Random(2926)
    ids = set()
    while len(ids) < BIG + NULLS + SMALL:
        if kind == "int" or (kind == "mixed" and len(ids) % 3 == 0):
            ids.add(rng.randrange(-10 ** 9, 10 ** 9) if kind == "int" else ObjectId("%024x" % rng.getrandbits(96)))
        else:
            ids.add("r%07d" % rng.randrange(10 ** 7))
    docs = []
    for i, _id in enumerate(sorted(ids, key=lambda v: rng.random())):
        doc = {"_id": _id, "n": i}
        if i < BIG:
            doc["town"] = "Redmond"
        elif i >= BIG + NULLS:
            doc["town"] = "T%d" % rng.randrange(5)
        docs.append(doc)
    return docs


def ordered(rows, desc, nulls_first):
    """Rows (_id, town) in PostgreSQL's order of town (a direction and a NULL order, C collation), then _id
    ASC (integers, or text as bytes)."""
    def key(row):
        _id = row[0] if isinstance(row[0], int) else row[0].encode()
        return _id
    rows = sorted(rows, key=key)
    present = sorted((r for r in rows if r[1] is not None), key=lambda r: r[1].encode(), reverse=desc)
    nulls = [r for r in rows if r[1] is None]
    return nulls + present if nulls_first else present + nulls


def facts_fetched(conn, sql):
    """Facts Fetched of a query's foreign scan (EXPLAIN ANALYZE)."""
    with conn.cursor() as cur:
        cur.execute("EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF, FORMAT JSON) " + sql)
        plan = cur.fetchone()[0][0]["Plan"]
    while "Facts Fetched" not in plan:
        plan = plan["Plans"][0]
    return plan["Facts Fetched"], plan.get("Groups Read in _id Order", 0)


def big_group(res, client, conn, kind):
    """ORDER BY town, _id through the town index table when one town holds most rows (see the docstring)."""
    name = "skew_" + kind
    docs = skewed_documents(kind)
    client[DATABASE][name].insert_many(docs)
    idtype = "bigint" if kind == "int" else 'text COLLATE "C"'
    pg_fixture.create_foreign_table(conn, name, '_id %s, town text COLLATE "C", n int' % idtype, server="m")
    with conn.cursor() as cur:
        cur.execute("SELECT idxtable.create_index('%s', '{town}')" % name)
        cur.execute("ANALYZE " + name)
    rows = [(text(d["_id"]), d.get("town")) for d in docs]
    per_entry = 3 if kind == "mixed" else 2
    cases = [("ORDER BY town, _id", False, False, 10, 0),
             ("ORDER BY town, _id", False, False, 1, 0),
             ("ORDER BY town, _id", False, False, 50, 20),
             ("ORDER BY town NULLS FIRST, _id", False, True, 10, 0),
             ("ORDER BY town DESC, _id", True, True, 10, 0),
             ("ORDER BY town NULLS FIRST, _id", False, True, 10, NULLS - 5),
             ("ORDER BY town DESC, _id", True, True, 10, NULLS - 5),
             ("ORDER BY town DESC NULLS LAST, _id", True, False, 10, SMALL - 5),
             ("ORDER BY town DESC NULLS LAST, _id", True, False, 20, SMALL + BIG - 5)]
    for order, desc, nulls_first, k, offset in cases:
        sql = "SELECT _id, town FROM %s %s LIMIT %d OFFSET %d" % (name, order, k, offset)
        got, keys, _ = query(conn, client, sql)
        want = ordered(rows, desc, nulls_first)[offset:offset + k]
        res.check(got == want, "%s: %s, expected %s" % (sql, got[:5], want[:5]))
        if offset > 100:
            continue            # past a group read apart: the rows alone (the batches grow past k + offset)
        facts, apart = facts_fetched(conn, sql)
        res.check(facts == k + offset, "%s: %d facts fetched, expected %d" % (sql, facts, k + offset))
        entries = keys - facts
        bound = per_entry * (k + offset) + 12
        res.check(entries <= bound and apart == 1,
                  "%s: examined %d entries (bound %d), %d groups in _id order" % (sql, entries, bound, apart))
        print("  %s: %d entries examined (bound %d), %d facts" % (sql, entries, bound, facts))
    sql = "SELECT _id, n FROM %s WHERE town = 'Redmond' ORDER BY _id LIMIT 10" % name
    got, keys, _ = query(conn, client, sql)
    want = [r[0] for r in ordered([r for r in rows if r[1] == "Redmond"], False, False)][:10]
    res.check([g[0] for g in got] == want, "%s: %s, expected %s" % (sql, got, want))
    facts, apart = facts_fetched(conn, sql)
    bound = per_entry * 10 + 12
    res.check(facts == 10 and keys - facts <= bound,
              "%s: examined %d entries (bound %d), %d facts" % (sql, keys - facts, bound, facts))
    print("  %s: %d entries examined (bound %d), %d facts" % (sql, keys - facts, bound, facts))


def main():
    res = Results()
    client = mongo_client.connect()
    client.drop_database(DATABASE)
    docs = make_documents()
    client[DATABASE].facts.insert_many(docs)
    facts = [{"_id": text(d["_id"]), "name": d.get("name"), "town": d.get("town"), "n": d["n"]} for d in docs]

    conn = pg_fixture.setup_database(DATABASE, server="m")
    pg_fixture.create_foreign_table(conn, "facts", '_id text COLLATE "C", name text COLLATE "POSIX", '
                                    'town text COLLATE "C", n int', server="m")
    with conn.cursor() as cur:
        cur.execute("SELECT idxtable.create_index('facts', '{name}')")
        cur.execute("SELECT idxtable.create_index('facts', '{town}')")
        cur.execute("ANALYZE facts")
        cur.execute("SET idxtable.index_consistency = 'any'")
        cur.execute("SET idxtable.enable_plain_scan = off")
    # the first routed scan of a backend reads the index tables' ownership markers (index_owner.c)
    query(conn, client, "SELECT name FROM facts WHERE name = 'x'")

    by_name = byte_order(facts, ["name"])
    by_name_id = byte_order(facts, ["name", "_id"])
    by_town_id = byte_order(facts, ["town", "_id"])
    for k, offset in ((1, 0), (10, 0), (50, 0), (10, 20)):
        bound = 2 * (k + offset) + 2
        sql = "SELECT _id, name FROM facts ORDER BY name LIMIT %d OFFSET %d" % (k, offset)
        rows, keys, examined = query(conn, client, sql)
        want = [r["name"] for r in by_name[offset:offset + k]]
        res.check([r[1] for r in rows] == want, "%s: names %s, expected %s" % (sql, rows, want))
        res.check(keys <= bound and examined <= bound,
                  "%s: examined %d keys, %d documents (bound %d)" % (sql, keys, examined, bound))
        print("  %s: %d keys, %d documents examined (bound %d)" % (sql, keys, examined, bound))

        sql = "SELECT _id, name FROM facts ORDER BY name, _id LIMIT %d OFFSET %d" % (k, offset)
        rows, keys, examined = query(conn, client, sql)
        want = [(r["_id"], r["name"]) for r in by_name_id[offset:offset + k]]
        res.check(rows == want, "%s: %s, expected %s" % (sql, rows, want))
        res.check(keys <= bound + 2 and examined <= bound + 2,
                  "%s: examined %d keys, %d documents (bound %d)" % (sql, keys, examined, bound + 2))
        print("  %s: %d keys, %d documents examined (bound %d)" % (sql, keys, examined, bound + 2))

    # a range on the key
    sql = "SELECT name FROM facts WHERE name >= 'name2' AND name < 'näme' ORDER BY name LIMIT 10"
    rows, keys, examined = query(conn, client, sql)
    want = [r["name"] for r in by_name if r["name"] is not None and
            b"name2" <= r["name"].encode() < "näme".encode()][:10]
    res.check([r[0] for r in rows] == want, "%s: %s, expected %s" % (sql, rows, want))
    res.check(keys <= 22 and examined <= 22, "%s: examined %d keys, %d documents" % (sql, keys, examined))

    # the NULL keys come last, ordered by _id
    sql = "SELECT _id, name FROM facts ORDER BY name, _id LIMIT 5 OFFSET %d" % (len(facts) - 7)
    rows, _, _ = query(conn, client, sql)
    want = [(r["_id"], r["name"]) for r in by_name_id[len(facts) - 7:len(facts) - 2]]
    res.check(rows == want, "%s: %s, expected %s" % (sql, rows, want))

    # ties: every group read whole, sorted by _id as text in byte order
    for sql, lo in (("SELECT _id, town FROM facts ORDER BY town, _id LIMIT 30", 0),
                    ("SELECT _id, town FROM facts ORDER BY town, _id LIMIT 10 OFFSET 100", 100)):
        rows, _, _ = query(conn, client, sql)
        want = [(r["_id"], r["town"]) for r in by_town_id[lo:lo + len(rows)]]
        res.check(len(rows) > 0 and rows == want, "%s: %s, expected %s" % (sql, rows, want))
    group = [r for r in by_town_id if r["town"] == "T07"]
    sql = "SELECT _id, n FROM facts WHERE town = 'T07' ORDER BY _id LIMIT 7"
    rows, keys, examined = query(conn, client, sql)
    want = [(r["_id"], r["n"]) for r in group[:7]]
    res.check(rows == want, "%s: %s, expected %s" % (sql, rows, want))
    res.check(examined <= len(group) + 7 + 1,
              "%s: examined %d documents for a group of %d entries" % (sql, examined, len(group)))
    print("  ORDER BY _id in a group of %d entries: %d keys, %d documents examined"
          % (len(group), keys, examined))
    for kind in ("str", "mixed", "int"):
        big_group(res, client, conn, kind)
    conn.close()
    print(res.summary("index order examined"))
    return 1 if res.failed else 0


if __name__ == "__main__":
    sys.exit(main())
