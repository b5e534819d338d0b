"""The text-key family of test/differential.py: ORDER BY, LIMIT, OFFSET and
keyset ranges on a text _id (and a text field) that holds strings, ObjectIds
or both, under COLLATE "C", on a foreign table against a local copy.

Keys are drawn to sit close to one another in byte order: hex strings that
share prefixes with ObjectIds, upper-case hex, hex one digit shorter or
longer than an ObjectId's 24, and other strings; range bounds are keys,
their prefixes, neighbours and strings of other alphabets.  A sort on the
key is pushed as two finds merged as bytes (fdw/order.h), so the cases check
the merge, the ObjectId bounds of text ranges (fdw/core/text_order.c), NULLs
of the field, OFFSET skipped locally and LIMIT on each find.
"""
import random

from bson.objectid import ObjectId

import mongo_client

TABLES = ("tk_str", "tk_oid", "tk_mix")
DOCS = 600
MIN_PUSHED = 0.6


def _hex(rng, length):
    return "".join(rng.choice("0123456789abcdef") for _ in range(length))


def _string_key(rng, oids):
    """A string near the ObjectIds' texts, or an unrelated one."""
    base = str(rng.choice(oids)) if oids and rng.random() < 0.6 else _hex(rng, 24)
    shape = rng.randrange(6)
    if shape == 0:
        return base[:rng.randint(0, 23)]
    if shape == 1:
        return base + rng.choice("0f~g")
    if shape == 2:
        return base.upper()
    if shape == 3:
        return base[:rng.randint(1, 22)] + rng.choice("gzG~-_é")
    if shape == 4:
        return "".join(rng.choice("abcxyzABC0189 é~") for _ in range(rng.randint(0, 8)))
    return _hex(rng, 24)


def keys(rng, kind):
    """About DOCS distinct _ids of ``kind``: strings, ObjectIds or both, no
    string reading as an ObjectId of the table (two rows of one key)."""
    oids = [ObjectId(_hex(rng, rng.choice([2, 6, 24])).ljust(24, rng.choice("0f"))) for _ in range(DOCS)]
    oids = list({str(o): o for o in oids}.values())
    strings = list({_string_key(rng, oids) for _ in range(DOCS)})
    if kind == "str":
        return strings
    if kind == "oid":
        return oids
    texts = {str(o) for o in oids[: DOCS // 2]}
    return oids[: DOCS // 2] + [s for s in strings[: DOCS // 2] if s not in texts]


def documents(rng, kind):
    """The documents of one table: _id, g (an int) and s (a string, an
    ObjectId, null or missing)."""
    docs = []
    ks = keys(rng, kind)
    for i, key in enumerate(ks):
        doc = {"_id": key, "g": rng.randrange(100)}
        r = rng.random()
        if r < 0.1:
            doc["s"] = None
        elif r < 0.8:
            doc["s"] = rng.choice(ks)
        docs.append(doc)
    return docs


def load(database, seed):
    """Create the three collections in MongoDB; return the keys' texts of each
    table (the bounds are drawn from them)."""
    rng = random.Random(seed)
    client = mongo_client.connect()
    db = mongo_client.database(client, database)
    texts = {}
    for table, kind in zip(TABLES, ("str", "oid", "mix")):
        docs = documents(rng, kind)
        db[table].drop()
        db[table].insert_many(docs)
        texts[table] = [str(d["_id"]) for d in docs]
    client.close()
    return texts


def create_tables(conn, pg_fixture):
    """The foreign tables (text under COLLATE "C") and their local copies."""
    with conn.cursor() as cur:
        for table in TABLES:
            pg_fixture.create_foreign_table(
                conn, table, 'id text OPTIONS (field \'_id\') COLLATE "C", g int, s text COLLATE "C"')
            cur.execute("CREATE TABLE %s_l AS SELECT * FROM %s" % (table, table))
            cur.execute("ANALYZE %s_l" % table)


def _bound(rng, texts):
    """A range bound: a key, a prefix of one, a neighbour, or another string."""
    text = rng.choice(texts)
    shape = rng.randrange(6)
    if shape == 0:
        return text
    if shape == 1:
        return text[:rng.randint(0, len(text))]
    if shape == 2:
        return text + rng.choice(["0", "g", "~", "\u00e9"])
    if shape == 3:
        return text.upper()
    if shape == 4:
        return rng.choice(["", "0", "5", "9", "a", "f", "g", "A", "~", "ffffffffffffffffffffffff", "\u00e9"])
    return _hex(rng, rng.randint(1, 26))


def _quote(text):
    return "'" + text.replace("'", "''") + "'"


def cases(seed, texts, count):
    """``count`` random queries; {t} stands for the table."""
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        table = rng.choice(TABLES)
        column = "id" if rng.random() < 0.75 else "s"
        low = _quote(_bound(rng, texts[table]))
        high = _quote(_bound(rng, texts[table]))
        where = rng.choice([
            "", "", "%s > %s" % (column, low), "%s >= %s" % (column, low), "%s < %s" % (column, low),
            "%s <= %s" % (column, low), "%s > %s AND %s < %s" % (column, low, column, high),
            "%s BETWEEN %s AND %s" % (column, low, high), "NOT (%s > %s)" % (column, low),
            "%s > %s OR g < 10" % (column, low), "g < 40", "g % 3 = 0", "%s IS NULL" % column,
            "id > %s AND s < %s" % (low, high)])
        order = "%s%s%s" % (column, rng.choice(["", " DESC"]),
                            rng.choice(["", "", " NULLS FIRST", " NULLS LAST"]))
        limit = " LIMIT %d" % rng.choice([0, 1, 3, 10, 50]) if rng.random() < 0.8 else ""
        if rng.random() < 0.35:
            limit += " OFFSET %d" % rng.choice([1, 2, 7, 40, 300])
        where = " WHERE " + where if where else ""
        if rng.random() < 0.1:
            out.append((table, "SELECT count(*) FROM (SELECT id FROM {t}%s%s) q" % (where, limit or " LIMIT 9")))
        else:
            out.append((table, "SELECT %s FROM {t}%s ORDER BY %s%s" % (column, where, order, limit)))
    return out


def run_case(session, number, case, report, compare):
    """One query on the foreign table and on its local copy: the same rows in
    the same order (the output is the sort key, so ties print alike).
    Returns whether the foreign scan pushed a merged text sort or a limit."""
    table, query = case
    foreign_sql = query.format(t=table)
    plan = session.run("EXPLAIN (VERBOSE) " + foreign_sql)
    lines = [line for (line,) in plan.rows or []]
    pushed = any("MongoDB Sort Merge" in line or "MongoDB Limit" in line for line in lines)
    foreign = session.run(foreign_sql)
    local = session.run(query.format(t=table + "_l"))
    problem = compare(foreign, local)
    if problem is None and not (foreign.error or local.error) and foreign.rows != local.rows:
        problem = ["foreign: %r" % foreign.rows[:8], "local:   %r" % local.rows[:8]]
    if problem:
        problem = [foreign_sql, "pushed: %s" % pushed] + problem
    report.result("text key %d" % number, problem)
    return pushed
