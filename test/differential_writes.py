#!/usr/bin/python3
"""Differential test of idxtable_fdw's writes: a foreign table against a local heap table.

For each consistency mode ('transaction', then 'ordered') the same random
INSERT (single and multi-row VALUES, INSERT ... SELECT from VALUES and from
the table itself), COPY FROM STDIN, UPDATE and DELETE (by _id, by predicates
on the indexed columns, joined to VALUES, some with RETURNING) run on

- ``fw``: a foreign table with four index tables: unique {lower(name)},
  {town} INCLUDE {n}, multi-valued {tags} and the composite {town, n};
- ``lw``: a local table with the same columns, PRIMARY KEY (_id), a unique
  index on lower(name) and ordinary indexes.

Every statement must give the same outcome on both: the same row count and
RETURNING rows, or the same SQLSTATE (23505 for a duplicate _id or name;
constraint names and messages differ and are ignored).  A statement that
fails must leave nothing of itself: after every failure the full contents of
both tables are compared and verify_index of every index must be clean (drift
it finds is reported, then fixed with repair_index, so that each statement's
drift is reported once).  In transaction mode some batches also run
multi-statement transactions (BEGIN ... COMMIT or ROLLBACK, with reads and
verify_index inside); ordered mode runs every statement by itself, since its
writes are final by design.  The value pools are small, so that unique
collisions and index hits are frequent.

Some writes carry what MongoDB cannot store (rare, see BAD_SHARE): a jsonb
value with an object key that is empty, starts with "$" or contains "." (at
any depth), or a row whose document exceeds 16 MiB.  The local table would
take them, so the test knows the rule: such a write must fail on the
foreign table with SQLSTATE 22023 (a key) or 54000 (the size) if it writes
any row at all, and leave nothing of itself; it is not run on the local
table (in a transaction, the local side is aborted alongside).

With --sharded, fw's collection is flagged as sharded on {flag: 1} (on a
sharded cluster, true on another shard than false and null, and a unique
index table on _id, which mongod checks per shard only)
(mongos's shardCollection, which the test server emulates: findAndModify
and single-document writes must then hold the shard key) and fw has the
option shard_key 'flag'.  In transaction mode flag is assigned as any column
(mongos moves a document whose shard key changes inside a transaction; the
test server checks the rules); in ordered mode idxtable_fdw refuses that, so
flag is never assigned there.

After each batch, random queries through the indexes run on fw with
``idxtable.enable_plain_scan = off`` and on lw: the results must be identical
(the share that EXPLAIN shows routed through an index table is checked too);
now and then the full contents are compared, and every 10 batches and at the
end of each mode ``verify_index`` of every index must report missing =
orphan = stale = 0.  When the tables have drifted apart (a discrepancy
already reported), lw is reset to fw's contents, so that one bug is reported
once and the run goes on.

With --consistency eventual (or --mode eventual; not run by default) fw
has consistency 'eventual': its writes write the facts only and the
change-stream applier maintains the index tables, so it needs idxtable_fdw
in shared_preload_libraries.  A unique index table is refused there (that
is checked: 0A000), so fw_name is not unique and neither is lw's index on
lower(name).  Routed reads wait for the applier by
``idxtable.index_consistency = current`` (with a sync_wait_timeout of 30 s);
verify_index runs only once every index table has applied_through past the
time it is called (idxtable.sync_status), so that it checks the applier's
work rather than its lag.  Without the setting (an applier but no waiting
reads) the routed reads, and the writes' scans, do not go through index
tables until the applier has caught up.

Environment as for test/differential.py (PGHOST..., MONGO_URI, MONGO_USER,
MONGO_PASSWORD).  DIFFW_SEED fixes the random seed; it is printed first.  The
PostgreSQL and MongoDB databases ``idxtable_diffwrites`` are dropped and
created, and left in place.  The last line is
``differential writes: N passed, M failed``; the exit status is non-zero if
anything failed.
"""
import argparse
import io
import json
import os
import random
import sys
import time
from dataclasses import dataclass

import psycopg2
import psycopg2.extras
from bson.binary import Binary

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures"))
import mongo_client  # noqa: E402  (test/fixtures)
import pg_fixture  # noqa: E402  (test/fixtures)
from results import Results  # noqa: E402  (test/fixtures)

DATABASE = "idxtable_diffwrites"
MODES = ("transaction", "ordered")
ALL_MODES = MODES + ("eventual",)   # eventual only when asked for (it needs the applier)
# how long the applier may take to catch up before a check (eventual)
CATCHUP_TIMEOUT = 60.0
COLUMNS = ["_id", "name", "town", "tags", "n", "flag", "j"]
COLUMN_TYPES = {"_id": "text", "name": "text", "town": "text", "tags": "text[]",
                "n": "integer", "flag": "boolean", "j": "jsonb"}
# (name, keys, include, unique)
INDEXES = [("fw_name", "{lower(name)}", "{}", True),
           ("fw_town", "{town}", "{n}", False),
           ("fw_tags", "{tags}", "{}", False),
           ("fw_town_n", "{town,n}", "{}", False)]
# small batches and fetches, so that statements span several of them
TABLE_OPTIONS = "batch_size '3', fetch_size '7', fetch_batch_size '5'"
# --sharded: the shard key of fw's collection (not assigned in ordered mode)
SHARD_KEY = "flag"

MAX_DETAILED_FAILURES = 25
VERIFY_EVERY = 10
# at least this share of the queries after the batches must go through an index table
MIN_ROUTED_SHARE = 0.5

# --------------------------------------------------------------------------
# Value pools
# --------------------------------------------------------------------------

OID_LOWER = "5f43a1b2c3d4e5f607182930"   # written as an ObjectId
OID_UPPER = "5F43A1B2C3D4E5F607182930"   # not lowercase hex: a string
IDS = ["r%02d" % i for i in range(60)] + [OID_LOWER, OID_UPPER]
# facts written into MongoDB directly with these _ids as strings: they read
# like ObjectIds, so UPDATE and DELETE must use the _id as stored.  (An
# INSERT of the same text writes an ObjectId, another fact: they are not
# taken as duplicate _ids.)
SEEDED_HEX_IDS = ["5f43a1b2c3d4e5f6071829%02x" % i for i in range(0x31, 0x37)]
# the tables of the _id types a column value cannot write back exactly:
# (foreign, local, _id type, seeded facts' _id as stored, as read)
ID_TYPE_FACTS = 10
ID_TYPE_STATEMENTS = 14
_SYLLABLES = ["an", "bo", "ci", "de", "ev", "fa", "gu", "ha", "iv", "jo", "ki", "le"]
NAME_BASES = sorted({a + b for a in _SYLLABLES for b in _SYLLABLES[:8]}) + ["émile", "zoë", "o'neil"]
TOWNS = ["Oslo", "Rome", "Lima", "Kiev", "Bern"]
TAGS = ["a", "b", "c", "d", "e"]
TARGET_ROWS = (15, 40)


class Json:
    """A jsonb value (its Python form), quoted as JSON text."""

    def __init__(self, value):
        self.value = value

    def text(self):
        return json.dumps(self.value)


class Raw(str):
    """An SQL expression written as it is (not in COPY)."""


# jsonb values: these MongoDB stores exactly (no top-level JSON null: it
# reads back as SQL NULL; no floats)
GOOD_J = [{"a": 1}, {"k": [1, {"x": "y"}]}, "text", [1, 2], {"a$": "$v", "b": {"c": None}}, {},
          {"é": ["ü", True]}]
# object keys MongoDB cannot store: 22023
BAD_KEY_J = [{"": 1}, {"$x": 1}, {"a.b": 1}, {"a": {"": 2}}, [1, {"$gt": 0}], {"ok": [{"x.y": 1}]},
             {"$where": "1"}, {"a": {"b": {".": 3}}}]
# a row over MongoDB's 16 MiB: 54000
OVERSIZE_J = Raw("jsonb_build_object('big', repeat('x', 17000000))")
# share of the writes that carry one of these, and of those the oversize ones
BAD_SHARE = 0.06
OVERSIZE_SHARE = 0.2
SQLSTATE_BAD_KEY = "22023"
SQLSTATE_TOO_LARGE = "54000"


def case_variant(rng, base):
    return rng.choice([base, base.capitalize(), base.upper()])


def quote(value):
    """An SQL literal of a Python value (text, int, bool, list of text, None)."""
    if value is None:
        return "NULL"
    if isinstance(value, Raw):
        return str(value)
    if isinstance(value, Json):
        return quote(value.text())
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, list):
        return quote(array_text(value))
    return "'" + value.replace("'", "''") + "'"


def typed(value, column):
    """A literal with a cast, for VALUES lists whose types are not inferred."""
    return "%s::%s" % (quote(value), COLUMN_TYPES[column])


def array_text(values):
    return "{" + ",".join("NULL" if v is None else '"%s"' % v for v in values) + "}"


def copy_field(value):
    if value is None:
        return "\\N"
    if isinstance(value, Json):
        value = value.text()
    if isinstance(value, bool):
        return "t" if value else "f"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, list):
        return array_text(value)
    return value.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n")


# --------------------------------------------------------------------------
# Statements
# --------------------------------------------------------------------------

@dataclass
class Statement:
    """One statement, ``{t}`` standing for the table; COPY data, or a query."""
    sql: str
    copy: str = None
    query: bool = False      # rows in order (ORDER BY), compared as they come
    foreign_only: bool = False
    expect: str = None       # SQLSTATE the foreign table must fail with (not run locally)
    guard: str = None        # ... if this count query on the local table is > 0
    def text(self, table):
        return self.sql.replace("{t}", table)

    def show(self):
        out = self.sql.replace("{t}", "<t>")
        if self.copy is not None:
            out += "\n    " + self.copy.rstrip("\n").replace("\n", "\n    ")
        return out


class Generator:
    """Random statements over small pools; ``state`` is the local table's
    current (_id, name) pairs, so that collisions and hits are frequent."""

    def __init__(self, rng):
        self.rng = rng
        self.ids = []
        self.names = []
        self.frozen = set()     # columns never assigned (a shard key)

    def observe(self, rows):
        self.ids = [r[0] for r in rows]
        self.names = [r[1] for r in rows if r[1] is not None]

    # ---- values

    def new_id(self, taken):
        rng = self.rng
        dups = [i for i in self.ids if i not in SEEDED_HEX_IDS]
        if dups and rng.random() < 0.12:
            return rng.choice(dups)                     # duplicate _id
        if taken and rng.random() < 0.05:
            return rng.choice(sorted(taken))            # duplicate within the statement
        free = [i for i in IDS if i not in self.ids and i not in taken]
        return rng.choice(free or IDS)

    def name(self, taken_names=()):
        rng = self.rng
        r = rng.random()
        if r < 0.12:
            return None
        if r < 0.25 and (self.names or taken_names):
            # an existing name, maybe in another case: lower() collides
            return case_variant(rng, rng.choice(list(self.names) + list(taken_names)).lower())
        return case_variant(rng, rng.choice(NAME_BASES))

    def town(self):
        return None if self.rng.random() < 0.12 else self.rng.choice(TOWNS)

    def tags(self):
        rng = self.rng
        r = rng.random()
        if r < 0.1:
            return None
        if r < 0.17:
            return []
        out = rng.sample(TAGS, rng.randint(1, 3))
        if rng.random() < 0.1:
            out.append(out[0])                          # a repeated element
        if rng.random() < 0.07:
            out.insert(rng.randint(0, len(out)), None)  # a NULL element
        return out

    def n(self):
        return None if self.rng.random() < 0.1 else self.rng.randint(0, 20)

    def flag(self):
        return self.rng.choice([True, False, None])

    def j(self):
        return None if self.rng.random() < 0.3 else Json(self.rng.choice(GOOD_J))

    def bad_j(self, oversize_ok=True):
        """A jsonb value MongoDB cannot store, and the SQLSTATE it gives."""
        if oversize_ok and self.rng.random() < OVERSIZE_SHARE:
            return OVERSIZE_J, SQLSTATE_TOO_LARGE
        return Json(self.rng.choice(BAD_KEY_J)), SQLSTATE_BAD_KEY

    def row(self, taken, taken_names):
        rid = self.new_id(taken)
        name = self.name(taken_names)
        taken.add(rid)
        if name is not None:
            taken_names.append(name)
        return [rid, name, self.town(), self.tags(), self.n(), self.flag(), self.j()]

    def rows(self, count):
        taken, taken_names = set(), []
        return [self.row(taken, taken_names) for _ in range(count)]

    def existing_id(self):
        if self.ids and self.rng.random() < 0.85:
            return self.rng.choice(self.ids)
        return self.rng.choice(IDS)

    def existing_name(self):
        if self.names and self.rng.random() < 0.8:
            return self.rng.choice(self.names).lower()
        return self.rng.choice(NAME_BASES)

    # ---- clauses

    def predicate(self):
        """A WHERE clause on the indexed (and some other) columns."""
        rng = self.rng
        kind = rng.choice(["id", "ids", "town", "town_null", "name", "names", "tag", "n",
                           "town_n", "flag", "or", "tags_null", "name_null"])
        if kind == "id":
            return "_id = %s" % quote(self.existing_id())
        if kind == "ids":
            return "_id IN (%s)" % ", ".join(quote(self.existing_id()) for _ in range(rng.randint(2, 4)))
        if kind == "town":
            return "town = %s" % quote(rng.choice(TOWNS))
        if kind == "town_null":
            return "town IS NULL"
        if kind == "name":
            return "lower(name) = %s" % quote(self.existing_name())
        if kind == "names":
            return "lower(name) IN (%s)" % ", ".join(quote(self.existing_name()) for _ in range(rng.randint(2, 3)))
        if kind == "tag":
            return "%s = ANY (tags)" % quote(rng.choice(TAGS))
        if kind == "n":
            return "n < %d" % rng.randint(0, 8)
        if kind == "town_n":
            return "town = %s AND n %s %d" % (quote(rng.choice(TOWNS)), rng.choice([">", "<=", "="]),
                                              rng.randint(0, 20))
        if kind == "flag":
            return rng.choice(["flag", "NOT flag", "flag IS NULL"]) + " AND town = %s" % quote(rng.choice(TOWNS))
        if kind == "or":
            return "(%s = ANY (tags) OR town = %s)" % (quote(rng.choice(TAGS)), quote(rng.choice(TOWNS)))
        if kind == "tags_null":
            return "tags IS NULL"
        return "name IS NULL AND n > %d" % rng.randint(0, 15)

    def assignments(self):
        rng = self.rng
        out = []
        assignable = [c for c in ["name", "town", "tags", "n", "flag", "j"] if c not in self.frozen]
        for col in rng.sample(assignable, rng.choice([1, 1, 2, 2, 3])):
            if col == "name":
                r = rng.random()
                if r < 0.15:
                    out.append("name = upper(name)")       # the same lower() key
                elif r < 0.25:
                    out.append("name = NULL")
                else:
                    out.append("name = %s" % quote(case_variant(rng, self.existing_name())
                                                     if rng.random() < 0.4 else
                                                     case_variant(rng, rng.choice(NAME_BASES))))
            elif col == "town":
                out.append("town = %s" % quote(self.town()))
            elif col == "tags":
                out.append(rng.choice(["tags = %s" % quote(self.tags()),
                                       "tags = array_append(tags, %s)" % quote(rng.choice(TAGS)),
                                       "tags = array_remove(tags, %s)" % quote(rng.choice(TAGS)),
                                       "tags = NULL"]))
            elif col == "n":
                out.append(rng.choice(["n = %s" % quote(self.n()), "n = n + 1", "n = NULL"]))
            elif col == "j":
                out.append(rng.choice(["j = %s" % quote(self.j()),
                                       "j = jsonb_build_object('n', n, 't', town)"]))
            else:
                out.append(rng.choice(["flag = %s" % quote(self.flag()), "flag = NOT flag"]))
        return ", ".join(out)

    def returning(self, always=False):
        if not always and self.rng.random() < 0.6:
            return ""
        return " RETURNING " + self.rng.choice(["*", "_id", "_id, lower(name), n", "_id, tags, flag"])

    # ---- writes

    def insert_values(self):
        rows = self.rows(self.rng.choice([1, 1, 2, 3, 4, 5]))
        return Statement("INSERT INTO {t} VALUES %s%s" % (
            ", ".join("(%s)" % ", ".join(quote(v) for v in row) for row in rows), self.returning()))

    def insert_columns(self):
        """A column list without some columns (they become NULL)."""
        cols = ["_id"] + self.rng.sample(COLUMNS[1:], self.rng.randint(1, 4))
        rows = self.rows(self.rng.randint(1, 3))
        return Statement("INSERT INTO {t} (%s) VALUES %s%s" % (
            ", ".join(cols),
            ", ".join("(%s)" % ", ".join(quote(row[COLUMNS.index(c)]) for c in cols) for row in rows),
            self.returning()))

    def insert_select_values(self):
        rows = self.rows(self.rng.randint(2, 6))
        where = self.rng.choice(["", " WHERE v.n IS NULL OR v.n > %d" % self.rng.randint(0, 15)])
        return Statement("INSERT INTO {t} SELECT * FROM (VALUES %s) AS v(%s)%s%s" % (
            ", ".join("(%s)" % ", ".join(typed(v, c) for v, c in zip(row, COLUMNS)) for row in rows),
            ", ".join(COLUMNS), where, self.returning()))

    def insert_select_self(self):
        """Copies of some rows under new _ids (suffix) and names (suffix or NULL)."""
        suffix = self.rng.choice(["x", "y"])
        name = self.rng.choice(["name || '%s'" % suffix, "NULL"])
        return Statement("INSERT INTO {t} SELECT _id || '%s', %s, town, tags, n, flag, j FROM {t} WHERE %s%s" % (
            suffix, name, self.predicate(), self.returning()))

    def copy(self):
        rows = self.rows(self.rng.randint(1, 5))
        data = "".join("\t".join(copy_field(v) for v in row) + "\n" for row in rows)
        return Statement("COPY {t} FROM STDIN", copy=data)

    def update(self):
        return Statement("UPDATE {t} SET %s WHERE %s%s" % (self.assignments(), self.predicate(), self.returning()))

    def update_join(self):
        rng = self.rng
        ids = []
        for _ in range(rng.randint(1, 4)):
            i = self.existing_id()
            if i not in ids:
                ids.append(i)
        values = ", ".join("(%s, %s, %s)" % (typed(i, "_id"), typed(self.n(), "n"), typed(self.town(), "town"))
                           for i in ids)
        return Statement("UPDATE {t} AS x SET n = v.vn, town = v.vtown FROM (VALUES %s) AS v(id, vn, vtown) "
                         "WHERE x._id = v.id%s" % (values, self.returning().replace("*", "x.*")))

    def delete(self):
        return Statement("DELETE FROM {t} WHERE %s%s" % (self.predicate(), self.returning()))

    def delete_join(self):
        ids = ", ".join("(%s)" % quote(self.existing_id()) for _ in range(self.rng.randint(1, 3)))
        return Statement("DELETE FROM {t} AS x USING (VALUES %s) AS v(id) WHERE x._id = v.id" % ids)

    def bad_insert(self):
        """An INSERT (VALUES, SELECT from VALUES, COPY) of fresh rows, one of
        them with a value MongoDB cannot store: nothing else can fail."""
        rng = self.rng
        rows = []
        for _ in range(rng.randint(1, 5)):
            self.bad_serial = getattr(self, "bad_serial", 0) + 1
            rows.append(["bad%05d" % self.bad_serial, None, self.town(), self.tags(), self.n(),
                         self.flag(), self.j()])
        kind = rng.choice(["values", "select", "copy"])
        value, sqlstate = self.bad_j(oversize_ok=kind != "copy")
        rows[rng.randrange(len(rows))][-1] = value
        if kind == "copy":
            data = "".join("\t".join(copy_field(v) for v in row) + "\n" for row in rows)
            return Statement("COPY {t} FROM STDIN", copy=data, expect=sqlstate)
        if kind == "select":
            return Statement("INSERT INTO {t} SELECT * FROM (VALUES %s) AS v(%s)%s" % (
                ", ".join("(%s)" % ", ".join(typed(v, c) for v, c in zip(row, COLUMNS)) for row in rows),
                ", ".join(COLUMNS), self.returning()), expect=sqlstate)
        return Statement("INSERT INTO {t} VALUES %s%s" % (
            ", ".join("(%s)" % ", ".join(quote(v) for v in row) for row in rows), self.returning()),
            expect=sqlstate)

    def bad_update(self):
        """An UPDATE assigning a value MongoDB cannot store (and maybe n):
        it fails if it matches any row."""
        value, sqlstate = self.bad_j()
        predicate = self.predicate()
        extra = self.rng.choice(["", ", n = n + 1"])
        return Statement("UPDATE {t} SET j = %s%s WHERE %s%s" % (quote(value), extra, predicate,
                                                               self.returning()),
                         expect=sqlstate, guard="SELECT count(*) FROM {t} WHERE %s" % predicate)

    def write(self):
        """A random write, biased towards keeping the table at TARGET_ROWS;
        now and then one that carries what MongoDB cannot store."""
        if self.rng.random() < BAD_SHARE:
            return self.rng.choice([self.bad_insert, self.bad_update])()
        size = len(self.ids)
        grow, shrink = 1.0, 1.0
        if size < TARGET_ROWS[0]:
            grow, shrink = 3.0, 0.3
        elif size > TARGET_ROWS[1]:
            grow, shrink = 0.3, 3.0
        kinds = [(self.insert_values, 3 * grow), (self.insert_columns, 1 * grow),
                 (self.insert_select_values, 1.5 * grow), (self.insert_select_self, 0.7 * grow),
                 (self.copy, 1.5 * grow), (self.update, 5), (self.update_join, 1),
                 (self.delete, 2 * shrink), (self.delete_join, 1 * shrink)]
        make = self.rng.choices([k for k, _ in kinds], weights=[w for _, w in kinds])[0]
        return make()

    # ---- reads

    def query(self):
        """A query through an index, rows in a fixed order."""
        rng = self.rng
        kind = rng.choice(["town", "towns", "town_null", "name", "names", "tag", "tags",
                           "town_n", "town_n_range", "covering", "count"])
        if kind == "town":
            where = "town = %s" % quote(rng.choice(TOWNS))
        elif kind == "towns":
            where = "town IN (%s)" % ", ".join(quote(t) for t in rng.sample(TOWNS, 2))
        elif kind == "town_null":
            where = "town IS NULL"
        elif kind == "name":
            where = "lower(name) = %s" % quote(self.existing_name())
        elif kind == "names":
            where = "lower(name) IN (%s)" % ", ".join(quote(self.existing_name()) for _ in range(rng.randint(2, 4)))
        elif kind == "tag":
            where = "%s = ANY (tags)" % quote(rng.choice(TAGS))
        elif kind == "tags":
            where = "tags && ARRAY[%s]" % ", ".join(quote(t) for t in rng.sample(TAGS, 2))
        elif kind == "town_n":
            where = "town = %s AND n > %d" % (quote(rng.choice(TOWNS)), rng.randint(0, 20))
        elif kind == "town_n_range":
            lo = rng.randint(0, 15)
            where = "town = %s AND n BETWEEN %d AND %d" % (quote(rng.choice(TOWNS)), lo, lo + rng.randint(0, 6))
        elif kind == "covering":
            return Statement("SELECT town, n FROM {t} WHERE town = %s ORDER BY n, town" % quote(rng.choice(TOWNS)),
                             query=True)
        else:
            return Statement("SELECT count(*), count(n), sum(n) FROM {t} WHERE %s = ANY (tags)"
                             % quote(rng.choice(TAGS)), query=True)
        return Statement("SELECT * FROM {t} WHERE %s ORDER BY _id" % where, query=True)


# --------------------------------------------------------------------------
# Running and comparing
# --------------------------------------------------------------------------

@dataclass
class Outcome:
    rowcount: int = None
    rows: list = None
    sqlstate: str = None
    error: str = None

    def failed(self):
        return self.sqlstate is not None or self.error is not None

    def show(self, limit=6):
        if self.failed():
            first = (self.error or "").splitlines()[0] if self.error else ""
            if first.startswith("ERROR:"):
                first = first[len("ERROR:"):].strip()
            return "ERROR %s: %s" % (self.sqlstate, first)
        text = "%d rows" % self.rowcount
        if self.rows:
            text += ": " + ", ".join(repr(r) for r in self.rows[:limit])
            if len(self.rows) > limit:
                text += ", ... (%d more)" % (len(self.rows) - limit)
        return text


def sort_key(row):
    return repr(row)


class Side:
    """One connection and the table it writes (fw or lw)."""

    def __init__(self, table):
        self.table = table
        self.conn = None
        self.connect()

    def connect(self):
        self.conn = pg_fixture.connect(DATABASE, options="-c statement_timeout=30s")
        self.conn.set_client_encoding("UTF8")

    def run(self, statement):
        sql = statement.text(self.table)
        try:
            if self.conn.closed:
                self.connect()
            with self.conn.cursor() as cur:
                if statement.copy is not None:
                    cur.copy_expert(sql, io.StringIO(statement.copy))
                else:
                    cur.execute(sql)
                rows = None
                if cur.description:
                    rows = [tuple(r) for r in cur.fetchall()]
                    if not statement.query:
                        rows.sort(key=sort_key)
                return Outcome(rowcount=cur.rowcount, rows=rows)
        except psycopg2.Error as exc:
            if exc.pgcode is None:     # connection lost
                self.conn.close()
            return Outcome(sqlstate=exc.pgcode or "connection", error=(exc.pgerror or str(exc)).strip())

    def execute(self, sql):
        """Run ``sql`` and return its rows (raises on error)."""
        if self.conn.closed:
            self.connect()
        with self.conn.cursor() as cur:
            cur.execute(sql.replace("{t}", self.table))
            return [tuple(r) for r in cur.fetchall()] if cur.description else None


def as_jsonb(value):
    """A jsonb column value as read, for psycopg2 to write back."""
    return None if value is None else psycopg2.extras.Json(value)


def show_verify(row):
    if isinstance(row, tuple):
        return "checked %d, missing %d, orphan %d, stale %d" % row
    return row


def agree(foreign, local):
    """Do two outcomes agree?  Both failing with one SQLSTATE does, unless it
    is a syntax or semantic error (class 42): a bug of this test."""
    if foreign.failed() or local.failed():
        return foreign.sqlstate == local.sqlstate and not (local.sqlstate or "").startswith("42")
    return foreign.rowcount == local.rowcount and foreign.rows == local.rows


class Report(Results):
    """The shared tally; a failure prints with where it happened and the
    seed, its first 14 detail lines while failures are few."""

    def __init__(self, seed, details=MAX_DETAILED_FAILURES):
        super().__init__(detailed=details)
        self.seed = seed

    def check(self, ok, where, what, lines=()):
        return super().check(ok, "[%s] (DIFFW_SEED=%d) %s" % (where, self.seed, what),
                             list(lines)[:14], brief="[%s] %s" % (where, what))


def content_lines(foreign_rows, local_rows, limit=8):
    """How two full table contents (sorted by _id) differ."""
    f = {r[0]: r for r in foreign_rows}
    l = {r[0]: r for r in local_rows}
    lines = ["foreign: %d rows, local: %d rows" % (len(foreign_rows), len(local_rows))]
    for key in sorted(set(f) | set(l)):
        if f.get(key) == l.get(key):
            continue
        if len(lines) > limit:
            lines.append("...")
            break
        if key not in l:
            lines.append("only foreign: %r" % (f[key],))
        elif key not in f:
            lines.append("only local:   %r" % (l[key],))
        else:
            lines.append("differs: foreign %r" % (f[key],))
            lines.append("         local   %r" % (l[key],))
    return lines


class Run:
    """One mode's run: tables, batches, checks."""

    def __init__(self, mode, rng, report, args):
        self.mode = mode
        self.rng = rng
        self.report = report
        self.args = args
        self.gen = Generator(rng)
        if args.sharded and mode in ("ordered", "eventual"):
            self.gen.frozen = {SHARD_KEY}   # refused outside a transaction (0A000)
        self.fw = Side("fw")
        self.lw = Side("lw")
        self.stats = {"statements": 0, "errors": 0, "queries": 0, "routed": 0, "transactions": 0,
                      "explained": 0, "resyncs": 0, "refused": 0, "passed": 0, "failed": 0}
        self.where = ""
        self.plain_scan = "on"
        self.eventual = mode == "eventual"
        self.spread = False             # --sharded on a cluster: fw's documents on two shards
        self.waiting_reads = False      # eventual: idxtable.index_consistency exists

    # ---- setup

    def create_tables(self):
        client = mongo_client.connect()
        client[DATABASE].drop_collection("fw")
        for name, _, _, _ in INDEXES:
            client[DATABASE].drop_collection("idxtable.fw.%s" % name)
        options = TABLE_OPTIONS
        if self.args.sharded:
            client.admin.command("shardCollection", "%s.fw" % DATABASE, key={SHARD_KEY: 1})
            self.spread = client.is_mongos
            if client.is_mongos:
                # on a cluster: true on another shard than false and null, so that a change of flag moves
                # the document between shards (a delete and an insert in one transaction)
                shards = [s["_id"] for s in client.admin.command("listShards")["shards"]]
                client.admin.command("split", "%s.fw" % DATABASE, middle={SHARD_KEY: True})
                client.admin.command("moveChunk", "%s.fw" % DATABASE, find={SHARD_KEY: True}, to=shards[-1])
                mongo_client.flush_routers(client)  # (mongos retries no StaleConfig in a transaction)
            options += ", shard_key '%s'" % SHARD_KEY
        client.close()
        cols = ", ".join("%s %s" % (c, COLUMN_TYPES[c]) for c in COLUMNS)
        for sql in ["DROP FOREIGN TABLE IF EXISTS fw", "DROP TABLE IF EXISTS lw",
                    "CREATE FOREIGN TABLE fw (%s) SERVER mongo OPTIONS (collection 'fw', consistency '%s', %s)"
                    % (cols, self.mode, options),
                    "CREATE TABLE lw (%s, PRIMARY KEY (_id))" % cols,
                    "CREATE UNIQUE INDEX lw_name ON lw (lower(name))",
                    "CREATE INDEX lw_town ON lw (town) INCLUDE (n)",
                    "CREATE INDEX lw_tags ON lw USING gin (tags)",
                    "CREATE INDEX lw_town_n ON lw (town, n)"]:
            self.lw.execute(sql)
        self.seed_hex_ids()
        if self.eventual:
            # refused on an eventual table; then the same index without unique
            refused = self.lw.run(Statement("SELECT idxtable.create_index('fw', '%s', is_unique => true, "
                                            "name => 'fw_unique')" % INDEXES[0][1]))
            self.check(refused.sqlstate == "0A000", "a unique index table on an eventual table: "
                       "expected SQLSTATE 0A000, got %s" % refused.show())
            self.lw.execute("DROP INDEX lw_name")
            self.lw.execute("CREATE INDEX lw_name ON lw (lower(name))")
        for name, keys, include, unique in INDEXES:
            self.lw.execute("SELECT idxtable.create_index('fw', '%s', include => '%s', is_unique => %s, "
                            "name => '%s')" % (keys, include, "true" if unique and not self.eventual
                                               else "false", name))
        if self.args.sharded and self.spread and not self.eventual:
            # mongod checks _id per shard only: fw's _id stays unique across its two shards through a
            # unique index table on it, as the README advises where _id is not the shard key
            self.lw.execute("SELECT idxtable.create_index('fw', '{_id}', is_unique => true, name => 'fw_id')")

    def seed_hex_ids(self):
        """Facts whose _id is a string of 24 hex digits, written by another
        client (before the index builds, which index them)."""
        rng = self.rng
        docs, rows = [], []
        for number, rid in enumerate(SEEDED_HEX_IDS):
            row = [rid, "seed%d" % number, self.gen.town(), rng.sample(TAGS, 2), self.gen.n(), self.gen.flag(),
                   {"a": number}]
            rows.append(row)
            docs.append(dict(zip(COLUMNS, row)))
        client = mongo_client.connect()
        client[DATABASE]["fw"].insert_many(docs)
        client.close()
        with self.lw.conn.cursor() as cur:
            psycopg2.extras.execute_values(cur, "INSERT INTO lw VALUES %s",
                                           [r[:-1] + [as_jsonb(r[-1])] for r in rows])

    # ---- _id types

    def id_type_tables(self):
        """(foreign, local, _id type, documents, local rows) for a jsonb _id whose
        keys jsonb reorders and a bytea _id of binary subtype 3."""
        jdocs = [{"_id": {"b": i, "a": "k%d" % i}, "n": i % 4} for i in range(ID_TYPE_FACTS)]
        jrows = [(psycopg2.extras.Json({"b": i, "a": "k%d" % i}), i % 4) for i in range(ID_TYPE_FACTS)]
        bdocs = [{"_id": Binary(bytes([i]) * 16, 3), "n": i % 4} for i in range(ID_TYPE_FACTS)]
        brows = [(psycopg2.Binary(bytes([i]) * 16), i % 4) for i in range(ID_TYPE_FACTS)]
        return [("fj", "lj", "jsonb", jdocs, jrows), ("fb", "lb", "bytea", bdocs, brows)]

    def id_type_statement(self):
        rng = self.rng
        n = rng.randint(0, 5)
        return Statement(rng.choice([
            "UPDATE {t} SET n = n + 4 WHERE n = %d" % n,
            "UPDATE {t} SET n = n + 1 WHERE n < %d RETURNING _id::text, n" % n,
            "UPDATE {t} SET n = n * 2 WHERE n > %d AND n < %d" % (n, n + 3),
            "DELETE FROM {t} WHERE n = %d" % n,
            "DELETE FROM {t} WHERE n > %d RETURNING _id::text, n" % (n + 4),
            "UPDATE {t} SET n = n - 1 WHERE _id IN (SELECT _id FROM {t} WHERE n = %d)" % n]))

    def id_types(self):
        """UPDATE and DELETE on facts whose _id the column cannot write back
        exactly (written into MongoDB directly): the same outcomes and
        contents as a local table."""
        client = mongo_client.connect()
        for foreign, local, idtype, docs, rows in self.id_type_tables():
            self.where = "_id %s" % idtype
            client[DATABASE].drop_collection(foreign)
            client[DATABASE][foreign].insert_many(docs)
            fside, lside = Side(foreign), Side(local)
            for sql in ["DROP FOREIGN TABLE IF EXISTS %s" % foreign, "DROP TABLE IF EXISTS %s" % local,
                        "CREATE FOREIGN TABLE %s (_id %s, n int) SERVER mongo OPTIONS (collection '%s', "
                        "consistency '%s', %s)" % (foreign, idtype, foreign, self.mode, TABLE_OPTIONS),
                        "CREATE TABLE %s (_id %s PRIMARY KEY, n int)" % (local, idtype)]:
                lside.execute(sql)
            with lside.conn.cursor() as cur:
                psycopg2.extras.execute_values(cur, "INSERT INTO %s VALUES %%s" % local, rows)
            for _ in range(ID_TYPE_STATEMENTS):
                statement = self.id_type_statement()
                foreign_out, local_out = fside.run(statement), lside.run(statement)
                self.check(agree(foreign_out, local_out), "outcomes differ", [
                    "sql: " + statement.show(), "foreign: " + foreign_out.show(),
                    "local:   " + local_out.show()])
                contents = [side.execute("SELECT _id::text, n FROM {t} ORDER BY _id, n") for side in (fside, lside)]
                self.check(contents[0] == contents[1], "table contents differ",
                           ["sql: " + statement.show()] + content_lines(contents[0], contents[1]))
            fside.conn.close()
            lside.conn.close()
        client.close()

    # ---- checks

    def check(self, ok, what, lines=()):
        self.stats["passed" if ok else "failed"] += 1
        self.report.check(ok, "%s %s" % (self.mode, self.where), what, lines)

    def compare_statement(self, statement):
        foreign = self.fw.run(statement)
        local = self.lw.run(statement)
        ok = agree(foreign, local)
        self.check(ok, "outcomes differ", [
            "sql: " + statement.show(), "foreign: " + foreign.show(), "local:   " + local.show()])
        return foreign, local, ok

    def contents(self):
        return (self.fw.execute("SELECT * FROM {t} ORDER BY _id"),
                self.lw.execute("SELECT * FROM {t} ORDER BY _id"))

    def compare_contents(self, why, statement=None):
        """Full contents equal?  If not: report, then reset lw to fw."""
        try:
            foreign, local = self.contents()
        except psycopg2.Error as exc:
            self.check(False, "%s: reading the contents failed: %s" % (why, str(exc).strip()))
            return False
        ok = foreign == local
        lines = (["sql: " + statement.show()] if statement else []) + content_lines(foreign, local)
        self.check(ok, "%s: table contents differ" % why, lines)
        if not ok:
            self.resync(foreign)
        return ok

    def resync(self, foreign_rows):
        """Make lw hold fw's rows again (after a reported discrepancy)."""
        self.stats["resyncs"] += 1
        try:
            with self.lw.conn.cursor() as cur:
                cur.execute("BEGIN")
                cur.execute("TRUNCATE lw")
                if foreign_rows:
                    psycopg2.extras.execute_values(cur, "INSERT INTO lw VALUES %s",
                                                   [list(r[:-1]) + [as_jsonb(r[-1])] for r in foreign_rows])
                cur.execute("COMMIT")
        except psycopg2.Error as exc:
            self.lw.execute("ROLLBACK")
            self.check(False, "fw's rows do not fit lw's constraints (%s): %s"
                       % (exc.pgcode, (exc.pgerror or str(exc)).strip().splitlines()[0]))

    def refresh_state(self):
        self.gen.observe(self.lw.execute("SELECT _id, name FROM {t} ORDER BY _id"))

    def setup_eventual(self):
        """Eventual mode: routed reads wait for the applier where they can; is there an applier?"""
        self.fw.execute("SELECT count(*) FROM {t}")     # loads the library and its settings
        self.waiting_reads = self.fw.execute(
            "SELECT current_setting('idxtable.index_consistency', true) IS NOT NULL")[0][0]
        if self.waiting_reads:
            self.fw.execute("SET idxtable.index_consistency = current")
            self.fw.execute("SET idxtable.sync_wait_timeout = 30000")
        have = self.fw.execute("SELECT to_regclass('idxtable.sync_status') IS NOT NULL")[0][0]
        self.check(have, "mode eventual needs the applier (idxtable.sync_status; "
                   "shared_preload_libraries = idxtable_fdw)")
        return have

    def wait_applied(self, why):
        """Eventual mode: wait until the applier has applied everything
        written so far: a routed read through each index table with
        index_consistency current (which waits for that), or without that
        setting until every index table has applied_through past now (one
        check if it does not get there in time)."""
        if not self.eventual:
            return
        if self.waiting_reads:
            try:
                self.fw.execute("SET idxtable.enable_plain_scan = off")
                for where in ("lower(name) = 'nobody'", "town = 'Nowhere'", "'nothing' = ANY (tags)",
                              "town = 'Nowhere' AND n = -1"):
                    self.fw.execute("SELECT count(*) FROM {t} WHERE " + where)
            except psycopg2.Error as exc:
                self.check(False, "%s: waiting for the applier failed: %s"
                           % (why, str(exc).strip().splitlines()[0]))
            self.fw.execute("SET idxtable.enable_plain_scan = %s" % self.plain_scan)
            return
        since = self.fw.execute("SELECT clock_timestamp()")[0][0]
        names = [name for name, _, _, _ in INDEXES]
        deadline = time.monotonic() + CATCHUP_TIMEOUT
        while True:
            row = self.fw.execute("SELECT count(*) FILTER (WHERE applied_through >= '%s'), "
                                  "string_agg(name || ': ' || coalesce(state, '?') || ' ' || "
                                  "coalesce(applied_through::text, 'never') || "
                                  "coalesce(' ' || last_error, ''), '; ') "
                                  "FROM idxtable.sync_status WHERE name = ANY('{%s}')"
                                  % (since, ",".join(names)))[0]
            if row[0] == len(names):
                return
            if time.monotonic() > deadline:
                self.check(False, "%s: the applier did not catch up within %.0f s: %s"
                           % (why, CATCHUP_TIMEOUT, row[1]))
                return
            time.sleep(0.05)

    def verify_results(self):
        """{index: (checked, missing, orphan, stale) or the error}."""
        self.wait_applied("before verify_index")
        out = {}
        for name, _, _, _ in INDEXES:
            try:
                out[name] = tuple(self.fw.execute("SELECT checked, missing, orphan, stale "
                                                  "FROM idxtable.verify_index('%s')" % name)[0])
            except psycopg2.Error as exc:
                out[name] = "ERROR %s: %s" % (exc.pgcode, str(exc).strip().splitlines()[0])
        return out

    def verify(self, why):
        """One check per index."""
        for name, row in self.verify_results().items():
            self.check(isinstance(row, tuple) and row[1:] == (0, 0, 0),
                       "%s: verify_index(%s) = %s" % (why, name, show_verify(row)))

    def verify_after(self, why, statement):
        """One check for all indexes; drift found is repaired (and reported
        once), so that later checks see only later drift."""
        results = self.verify_results()
        bad = {n: r for n, r in results.items() if not (isinstance(r, tuple) and r[1:] == (0, 0, 0))}
        self.check(not bad, "%s: verify_index found drift: %s"
                   % (why, ", ".join("%s %s" % (n, show_verify(r)) for n, r in bad.items())),
                   ["sql: " + statement.show()])
        for name in bad:
            try:
                self.fw.execute("SELECT * FROM idxtable.repair_index('%s')" % name)
            except psycopg2.Error as exc:
                self.check(False, "repair_index(%s) failed: %s" % (name, str(exc).strip().splitlines()[0]))

    # ---- batches

    def expected_sqlstate(self, statement):
        """The SQLSTATE the foreign table must fail with, or None if the
        statement is an ordinary one (or a refused UPDATE that matches
        nothing)."""
        if statement.expect is None:
            return None
        if statement.guard and self.lw.execute(statement.guard)[0][0] == 0:
            return None
        return statement.expect

    def refused(self, statement, expected):
        """Run a write MongoDB cannot store on the foreign table only: it
        must fail with ``expected``."""
        self.stats["refused"] += 1
        foreign = self.fw.run(statement)
        self.check(foreign.sqlstate == expected,
                   "a write MongoDB cannot store: expected SQLSTATE %s from the foreign table" % expected,
                   ["sql: " + statement.show()[:300], "foreign: " + foreign.show()[:300]])
        return foreign

    def single(self, statement):
        """One autocommit statement on both tables."""
        self.stats["statements"] += 1
        expected = self.expected_sqlstate(statement)
        if expected is not None:
            self.refused(statement, expected)
            # nothing of it remains
            self.compare_contents("after a refused write", statement)
            self.verify_after("after a refused write", statement)
            self.refresh_state()
            return
        foreign, local, ok = self.compare_statement(statement)
        if local.failed():
            self.stats["errors"] += 1
        if foreign.failed() or local.failed() or not ok:
            # a failed statement leaves nothing of itself (and a mismatch is
            # followed by a resync)
            why = "after a failed statement" if ok else "after differing outcomes"
            self.compare_contents(why, statement)
            self.verify_after(why, statement)
        self.refresh_state()

    def transaction(self):
        """BEGIN; a few writes, reads and a verify_index; COMMIT or ROLLBACK.
        The transaction's scans and reads go through index tables."""
        self.stats["transactions"] += 1
        end = "COMMIT" if self.rng.random() < 0.7 else "ROLLBACK"
        statements = [Statement("BEGIN")]
        for _ in range(self.rng.randint(2, 5)):
            statements.append(self.gen.query() if self.rng.random() < 0.25 else self.gen.write())
        statements.append(Statement(end))
        self.fw.execute("SET idxtable.enable_plain_scan = off")
        log = []
        aborted = False
        for number, statement in enumerate(statements):
            expected = None if aborted else self.expected_sqlstate(statement)
            if expected is not None:
                foreign = self.refused(statement, expected)
                # the local transaction fails alongside
                local = self.lw.run(Statement("SELECT 1 / 0"))
            else:
                foreign, local, ok = self.compare_statement(statement)
            log.append("%s -> fw %s / lw %s" % (statement.show(), foreign.show(2), local.show(2)))
            if 0 < number < len(statements) - 1:
                self.stats["queries" if statement.query else "statements"] += 1
            if local.failed() or foreign.failed():
                if not aborted and number > 0:
                    self.stats["errors"] += 1
                aborted = True
            if not aborted and 0 < number < len(statements) - 1:
                # the local table's rows as the transaction sees them
                self.refresh_state()
            if not aborted and number == len(statements) - 2 and self.rng.random() < 0.3:
                # verify_index inside the transaction sees its writes
                name = self.rng.choice(INDEXES)[0]
                try:
                    row = tuple(self.fw.execute("SELECT missing, orphan, stale FROM idxtable.verify_index('%s')"
                                                % name)[0])
                except psycopg2.Error as exc:
                    row = str(exc).strip()
                    aborted = True
                self.check(row == (0, 0, 0), "verify_index(%s) inside a transaction: (missing, orphan, stale) = %s"
                           % (name, row), log)
        self.fw.execute("SET idxtable.enable_plain_scan = %s" % self.plain_scan)
        why = "after %s (transaction of %d statements)" % (end, len(statements) - 2)
        self.compare_contents(why, Statement("\n    ".join(log)))
        if aborted or end == "ROLLBACK":
            self.verify_after(why, Statement("\n    ".join(log)))
        self.refresh_state()

    def queries(self, count):
        if self.eventual and not self.waiting_reads:
            self.wait_applied("before the routed queries")
        self.fw.execute("SET idxtable.enable_plain_scan = off")
        for _ in range(count):
            statement = self.gen.query()
            self.stats["queries"] += 1
            self.stats["explained"] += 1
            plan = self.fw.execute("EXPLAIN (COSTS OFF) " + statement.text("fw"))
            if any("Index Table:" in line for (line,) in plan):
                self.stats["routed"] += 1
            self.compare_statement(statement)
        self.fw.execute("RESET idxtable.enable_plain_scan")

    def batch(self, number):
        self.where = "batch %d" % number
        # the writes' scans go through index tables in some batches
        self.plain_scan = "off" if self.rng.random() < 0.4 else "on"
        if self.eventual and not self.waiting_reads:
            self.plain_scan = "on"      # they would not see the applier's lag
        self.fw.execute("SET idxtable.enable_plain_scan = %s" % self.plain_scan)
        for s in range(self.args.statements):
            self.where = "batch %d statement %d" % (number, s)
            if self.mode == "transaction" and self.rng.random() < 0.08:
                self.transaction()
            else:
                self.single(self.gen.write())
        self.fw.execute("RESET idxtable.enable_plain_scan")
        self.where = "batch %d queries" % number
        self.queries(self.args.queries)
        if self.rng.random() < 0.3:
            self.compare_contents("contents after the batch")
        if (number + 1) % VERIFY_EVERY == 0:
            self.verify("after batch %d" % number)

    def run(self):
        started = time.monotonic()
        self.where = "setup"
        self.create_tables()
        if self.eventual and not self.setup_eventual():
            return
        self.id_types()
        self.where = "setup"
        self.refresh_state()
        for number in range(self.args.batches):
            self.batch(number)
        self.where = "end"
        self.compare_contents("final contents")
        self.verify("at the end")
        share = self.stats["routed"] / max(1, self.stats["explained"])
        self.check(share >= MIN_ROUTED_SHARE,
                   "only %.0f%% of the queries went through an index table" % (100 * share))
        rows = self.fw.execute("SELECT count(*) FROM {t}")[0][0]
        s = self.stats
        print("%s: %d statements (%d failed on both, %d refused as MongoDB cannot store them), "
              "%d transactions, %d queries (%d routed), "
              "%d rows at the end, %d resyncs, %.1fs: %d passed, %d failed"
              % (self.mode, s["statements"], s["errors"], s["refused"], s["transactions"], s["queries"],
                 s["routed"], rows, s["resyncs"], time.monotonic() - started, s["passed"], s["failed"]))
        sys.stdout.flush()
        self.fw.conn.close()
        self.lw.conn.close()


# --------------------------------------------------------------------------
# Setup and main
# --------------------------------------------------------------------------

def setup_database():
    """Recreate the PostgreSQL database (extension, server, user mapping) and
    drop the MongoDB database."""
    client = mongo_client.connect()
    client.drop_database(DATABASE)
    client.close()
    pg_fixture.setup_database(DATABASE, db_options=pg_fixture.UTF8_C).close()


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batches", type=int, default=40)
    parser.add_argument("--statements", type=int, default=8, help="statements per batch")
    parser.add_argument("--queries", type=int, default=6, help="queries after each batch")
    parser.add_argument("--mode", "--consistency", dest="mode", choices=ALL_MODES, action="append",
                        help="only this consistency mode (repeatable; default %s)" % " and ".join(MODES))
    parser.add_argument("--sharded", action="store_true",
                        help="fw's collection sharded on {%s: 1}, with the option shard_key" % SHARD_KEY)
    parser.add_argument("--details", type=int, default=MAX_DETAILED_FAILURES,
                        help="failures reported in detail (the rest in one line each)")
    return parser.parse_args()


def main():
    args = parse_args()
    seed = int(os.environ.get("DIFFW_SEED") or random.SystemRandom().randrange(2 ** 32))
    print("differential writes: seed %d (repeat with DIFFW_SEED=%d)" % (seed, seed), flush=True)
    report = Report(seed, args.details)
    started = time.monotonic()
    try:
        setup_database()
    except Exception as exc:  # any setup failure is one failed check
        report.check(False, "setup", "%s: %s" % (type(exc).__name__, exc))
        print(report.summary("differential writes"))
        return 1
    for number, mode in enumerate(args.mode or MODES):
        # each mode has its own random stream, so that a mode run alone
        # (--mode) repeats what it did in the full run
        rng = random.Random("%d/%s" % (seed, mode))
        try:
            Run(mode, rng, report, args).run()
        except Exception as exc:  # a broken run is a failure, the next mode still runs
            report.check(False, mode, "run aborted: %s: %s" % (type(exc).__name__, exc))
    print("elapsed %.1fs" % (time.monotonic() - started))
    print(report.summary("differential writes"))
    return 1 if report.failed else 0


if __name__ == "__main__":
    sys.exit(main())
