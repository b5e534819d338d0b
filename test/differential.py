#!/usr/bin/python3
"""Differential test of idxtable_fdw: a foreign table against a local heap table.

The same ~2000 random rows are stored twice: as BSON documents in MongoDB
(read through the foreign table ``ft``) and as the values the FDW should
read from them in a local table ``lt``.  Hundreds of random WHERE clauses,
and prepared statements run with changing parameters, are then executed on
both; every result must be identical, row for row and bit for bit.  The FDW
pushes what it can to MongoDB and evaluates the rest locally, so any
difference is a bug in the pushdown (or in the conversion of values).

The documents mix BSON types on purpose (an int column holds int32, int64
and integral doubles; a text column sometimes holds an ObjectId), fields are
sometimes missing, sometimes null and sometimes the deprecated undefined
(which MongoDB 8.0's {f: null} no longer matches), and the literals come mostly from the
values actually stored, so that equalities and boundaries hit.

Tables tk_str, tk_oid and tk_mix (test/differential_textkeys.py) have a text
_id of strings, of ObjectIds and of both, under COLLATE "C": ORDER BY,
LIMIT, OFFSET and keyset ranges on them run on both sides too.

Environment (as exported by ``eval "$(test/env start)"``): PGHOST, PGPORT,
PGDATABASE, PGUSER for a superuser connection; MONGO_URI, MONGO_USER,
MONGO_PASSWORD for MongoDB (see fixtures/mongo_client.py).  DIFF_SEED fixes
the random seed; it is printed first so that a failing run can be repeated.

The script creates (after dropping) the PostgreSQL database and the MongoDB
database ``idxtable_differential`` and leaves both in place afterwards.  Its
last line is ``differential: N passed, M failed``; the exit status is
non-zero if anything failed.  ``--dry-run`` only generates: it prints a few
documents, clauses and prepared cases, and touches no server.
"""
import argparse
import datetime
import decimal
import math
import os
import random
import re
import sys
import time
import uuid
from dataclasses import dataclass, field

import psycopg2
import psycopg2.extras
import bson
from bson.decimal128 import Decimal128
from bson.int64 import Int64
from bson.binary import UuidRepresentation
from bson.codec_options import CodecOptions
from bson.objectid import ObjectId
from bson.raw_bson import RawBSONDocument

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures"))
import mongo_client  # noqa: E402  (test/fixtures)
import pg_fixture  # noqa: E402
from results import Results  # noqa: E402  (test/fixtures)
import differential_textkeys  # noqa: E402  (test/)

DATABASE = "idxtable_differential"
COLLECTION = "facts"
UTC = datetime.timezone.utc
MAX_DETAILED_FAILURES = 20
MIN_PUSHDOWN_RATIO = 0.30
# index tables on the foreign table (keys, included columns); the clauses
# the planner routes through them are also run with routing off
INDEX_TABLES = [(["i4"], []), (["t", "i8"], []), (["lower(t)"], []),
                (["ts"], ["b"]), (["u"], []), (["vc"], ["i4", "d"]), (["b", "d"], []), (["pv"], []),
                (["ti"], ["i4"]), (["b", "ti"], [])]
# the run fails unless at least this many clauses (of the default 400; in
# proportion for fewer or more) went through an index table
MIN_ROUTED = 12
EXECUTIONS_PER_PREPARED = 7

# Integer arithmetic that overflows on some stored values (int4 steps near
# the int4 limits, i8 near the int8 limits), each as a whole WHERE clause:
# alone (or in an OR, evaluated in its written order) it is evaluated on the
# same rows by both plans (the foreign scan's pushed superset lets every
# overflowing document through to the local recheck), so both raise 22003
# or both return the same rows.  Inside a conjunction it would not be
# deterministic (see ClauseGenerator.cross_column).
OVERFLOW_CLAUSES = ["i4 + 1 < i8", "NOT (i8 - i4 >= 0)", "id + i4 > 0", "i4 - id + 3 = i8",
                    "i4 - 1 >= id", "(i8 + 1 > i4) OR (i4 = 0)", "(i4 = 7) OR NOT (i4 + i4 < id)"]

INT2_RANGE = (-2 ** 15, 2 ** 15 - 1)
INT4_RANGE = (-2 ** 31, 2 ** 31 - 1)
INT8_RANGE = (-2 ** 63, 2 ** 63 - 1)
INT_TYPE_RANGE = {"smallint": INT2_RANGE, "integer": INT4_RANGE, "bigint": INT8_RANGE}


# --------------------------------------------------------------------------
# The table
# --------------------------------------------------------------------------

@dataclass(frozen=True)
class Column:
    """One column of both tables: SQL name and type, BSON field, value kind.

    ``kind`` groups the columns by how values are generated, stored and
    written as literals: int, float, text, bool, ts, date, uuid, numeric.
    ``int_range`` is the column type's range for integer columns.
    """
    name: str
    sqltype: str
    field: str
    kind: str
    int_range: tuple = None


COLUMNS = [
    Column("id", "integer", "_id", "int", INT4_RANGE),
    Column("i4", "integer", "i4", "int", INT4_RANGE),
    Column("i8", "bigint", "i8", "int", INT8_RANGE),
    Column("f8", "double precision", "f8", "float"),
    Column("t", "text", "t", "text"),
    # a dotted path, so that pushdown into embedded documents is exercised too
    Column("vc", "varchar(20)", "meta.vc", "text"),
    # an ICU collation: its index tables hold sort keys, and serve ranges
    # and order under it (the local table has the same collation)
    Column("ti", 'text COLLATE "en-x-icu"', "ti", "text"),
    Column("b", "boolean", "b", "bool"),
    Column("ts", "timestamptz", "ts", "ts"),
    Column("d", "date", "d", "date"),
    Column("u", "uuid", "u", "uuid"),
    Column("n", "numeric", "n", "numeric"),
]
COLUMN = {c.name: c for c in COLUMNS}
# An array column on a dotted path through an array of documents ("parts"
# is sometimes an array of documents, scalars among them, sometimes a
# document): it reads the values of all elements that are documents, an
# array value spliced in.  Not in COLUMNS (the clause generators treat it
# apart); every result compares it, and a multi-valued index table holds it.
PARTS_COLUMN = "pv"
PARTS_FIELD = "parts.v"
SELECT_LIST = ", ".join([c.name for c in COLUMNS] + [PARTS_COLUMN])

# The SQL type of a literal of each kind, when written with a cast.
KIND_TYPE = {"int": "integer", "float": "float8", "text": "text", "bool": "boolean",
             "ts": "timestamptz", "date": "date", "uuid": "uuid", "numeric": "numeric"}


# --------------------------------------------------------------------------
# Value pools: the stored values are drawn from these (plus random ones),
# and so are most literals, so that comparisons hit stored values.
# --------------------------------------------------------------------------

INT4_POOL = [0, 1, -1, 2, 7, 42, -42, 100, 1000, -1000, 32767, -32768, 65536,
             123456, 2147483647, -2147483648, 2147483646]
INT8_POOL = [0, 1, -1, 5, 42, 3000000000, -3000000000, 2 ** 31, -2 ** 31 - 1,
             2 ** 53, 2 ** 53 + 1, -2 ** 53 - 1, 2 ** 60, 2 ** 62 + 2 ** 10,
             1234567890123, 9223372036854775807, -9223372036854775808]
F8_POOL = [0.0, -0.0, 1.0, -1.0, 1.5, -2.25, 0.1, 0.30000000000000004, 3.0,
           123456.789, 1e300, -1e300, 5e-324, 2.5e-308, 1e16,
           9007199254740994.0, math.inf, -math.inf, math.nan]
TEXT_POOL = ["", "a", "A", "ab", "aB", "abc", "b", "B", "z", "zzz", "é", "e", "E",
             "ß", "ss", "SS", "日本", "日本語", "Ω", " a", "a ", "a%b", "a_c", "o'neil",
             "5f43a1b2c3d4e5f607182930", "5F43A1B2C3D4E5F607182930", "~"]
# mixed cases, accents and punctuation, which ICU orders unlike bytes
TI_POOL = ["", "a", "A", "ab", "aB", "a b", "a-b", "b", "B", "z", "Zoo", "zebra", "é", "e", "E",
           "eclair", "Eclair", "éclair", "Éclair", "cote", "côte", "coté", "côté", "ß", "ss",
           "straße", "strasse", "äpfel", "apfel", "Apfel", "日本", "Ω", "1", "10", "9", "~"]
VC_POOL = ["", "x", "X", "xy", "abc", "ABC", "é", "naïve", "日本", "zz top",
           "abcdefghijklmnopqrst", "日本日本日本日本日本日本日本日本日本日本"]
OBJECT_IDS = [ObjectId("5f43a1b2c3d4e5f607182930"), ObjectId("000000000000000000000000"),
              ObjectId("ffffffffffffffffffffffff"), ObjectId("65a0b1c2d3e4f50617283940")]
TS_POOL = [datetime.datetime(1970, 1, 1), datetime.datetime(1969, 12, 31, 23, 59, 59, 999000),
           datetime.datetime(2000, 1, 1), datetime.datetime(2021, 1, 1),
           datetime.datetime(2021, 1, 1, 0, 0, 0, 1000), datetime.datetime(1900, 1, 1),
           datetime.datetime(2038, 1, 19, 3, 14, 7, 999000),
           datetime.datetime(2100, 12, 31, 23, 59, 59, 999000), datetime.datetime(1, 1, 1)]
DATE_POOL = [datetime.date(1970, 1, 1), datetime.date(1969, 12, 31), datetime.date(2000, 2, 29),
             datetime.date(2021, 1, 1), datetime.date(1, 1, 1), datetime.date(9999, 12, 31)]
UUID_POOL = [uuid.UUID(s) for s in (
    "00000000-0000-0000-0000-000000000000", "ffffffff-ffff-ffff-ffff-ffffffffffff",
    "7fffffff-ffff-ffff-ffff-ffffffffffff", "80000000-0000-0000-0000-000000000000",
    "6f1b7c9a-3e0f-4b8e-9a57-1c2d3e4f5a6b", "6f1b7c9a-3e0f-4b8e-9a57-1c2d3e4f5a6c",
    "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11")]
# Doubles in the numeric column read as their shortest round-trip decimal
# (Python's repr), e.g. 0.30000000000000004, not 0.3.
NUMERIC_DOUBLES = [2.5, -0.75, 1234.5625, 1e6, 0.5, -3.0, 0.0, 0.1, 0.30000000000000004, 1e-07, 1e22]
NUMERIC_DECIMALS = ["1.10", "-0.000001", "12345678901234567890.123456789", "1.5E+3", "0",
                    "-0", "9999999999999999999999999999999999", "2.5", "1234.5625", "1E-20",
                    "Infinity", "-Infinity"]


class Undefined:
    """The deprecated BSON undefined (pymongo writes none): reads as NULL, and
    MongoDB 8.0's {f: null} no longer matches it (the test server's neither)."""

    def __repr__(self):
        return "undefined"


UNDEFINED = Undefined()
STANDARD_UUIDS = CodecOptions(uuid_representation=UuidRepresentation.STANDARD)


def encode_document(doc):
    """A document for insert_many: as it is, or raw BSON with its undefined
    top-level fields appended as BSON undefined."""
    undefined = [k for k, v in doc.items() if v is UNDEFINED]
    if not undefined:
        return doc
    raw = bson.encode({k: v for k, v in doc.items() if v is not UNDEFINED}, codec_options=STANDARD_UUIDS)[:-1]
    raw += b"".join(b"\x06" + k.encode() + b"\x00" for k in undefined) + b"\x00"
    return RawBSONDocument(len(raw).to_bytes(4, "little") + raw[4:])


def fits(value, bounds):
    """Is the integer ``value`` within the inclusive ``bounds`` (lo, hi)?"""
    return bounds[0] <= value <= bounds[1]


def exactly_double(value):
    """Can the integer ``value`` be stored as a BSON double without change?"""
    return fits(value, INT8_RANGE) and float(value) == value


# --------------------------------------------------------------------------
# Documents
# --------------------------------------------------------------------------

class DocumentGenerator:
    """Random BSON documents whose field types vary the way real data does."""

    def __init__(self, rng):
        self.rng = rng

    def documents(self, count):
        """``count`` documents with unique integer ``_id`` values."""
        ids = self.rng.sample(range(-1000, 10 * count), count)
        return [self.document(i) for i in ids]

    def document(self, key):
        """One document; every field but _id may be missing or null."""
        rng = self.rng
        doc = {"_id": self.integer_bson(key)}
        for column in COLUMNS[1:]:
            roll = rng.random()
            if roll < 0.08:
                continue                                  # missing
            value = None if roll < 0.15 else self.bson_value(column)
            if value is None and roll < 0.11 and "." not in column.field:
                value = UNDEFINED                         # reads as NULL too
            if column.field == "meta.vc":
                self.put_meta(doc, value)
            else:
                doc[column.field] = value
        self.put_parts(doc)
        return doc

    def put_parts(self, doc):
        """``parts``: missing, null, a document with an array ``v`` (or none), or
        an array of documents with or without ``v`` (a value, null or an array)
        and of scalars."""
        rng = self.rng
        roll = rng.random()
        if roll < 0.1:
            return
        if roll < 0.15:
            doc["parts"] = None
        elif roll < 0.25:
            doc["parts"] = {"v": rng.sample(VC_POOL, rng.randint(0, 2))} if rng.random() < 0.7 else {}
        else:
            doc["parts"] = [self.part() for _ in range(rng.randint(0, 4))]

    def part(self):
        """One element of a ``parts`` array."""
        rng = self.rng
        roll = rng.random()
        if roll < 0.5:
            return {"v": rng.choice(VC_POOL), "w": rng.randint(0, 3)}
        if roll < 0.6:
            return {"v": None}
        if roll < 0.75:
            return {"v": rng.sample(VC_POOL, rng.randint(0, 2))}
        if roll < 0.85:
            return {"w": 1}
        return rng.choice([5, "scalar", None])

    def put_meta(self, doc, value):
        """Store vc under meta.vc; a null vc is sometimes a null, empty or
        scalar ``meta`` instead (MongoDB, like the FDW, finds no meta.vc there)."""
        roll = self.rng.random()
        if value is None and roll < 0.25:
            doc["meta"] = None
        elif value is None and roll < 0.5:
            doc["meta"] = {}
        elif value is None and roll < 0.65:
            doc["meta"] = self.rng.choice([7, "scalar"])
        else:
            doc["meta"] = {"vc": value, "other": self.rng.randint(0, 9)}

    def bson_value(self, column):
        """A random non-null BSON value for ``column``."""
        rng = self.rng
        kind = column.kind
        if kind == "int":
            if column.name == "i4":
                value = rng.choice(INT4_POOL) if rng.random() < 0.3 else rng.randint(-1000, 1000)
            else:
                value = rng.choice(INT8_POOL) if rng.random() < 0.5 else rng.randint(-10 ** 12, 10 ** 12)
            return self.integer_bson(value)
        if kind == "float":
            value = rng.choice(F8_POOL) if rng.random() < 0.5 else round(rng.uniform(-1e4, 1e4), 3)
            return self.float_bson(value)
        if kind == "text":
            if column.name == "t" and rng.random() < 0.06:
                return rng.choice(OBJECT_IDS)
            return rng.choice(text_pool(column))
        if kind == "bool":
            return rng.random() < 0.5
        if kind == "ts":
            return rng.choice(TS_POOL) if rng.random() < 0.3 else random_timestamp(rng)
        if kind == "date":
            day = rng.choice(DATE_POOL) if rng.random() < 0.3 else random_date(rng)
            return datetime.datetime(day.year, day.month, day.day)
        if kind == "uuid":
            return rng.choice(UUID_POOL)
        return self.numeric_bson()

    def integer_bson(self, value):
        """An integer as int32, int64 or an integral double, chosen at random."""
        roll = self.rng.random()
        if roll < 0.2 and exactly_double(value):
            return float(value)
        if roll < 0.5 or not fits(value, INT4_RANGE):
            return Int64(value)
        return value

    def float_bson(self, value):
        """A double, or (when integral and exact) sometimes an int32 or int64."""
        integral = math.isfinite(value) and value == int(value)
        roll = self.rng.random()
        if integral and roll < 0.1 and fits(int(value), INT4_RANGE):
            return int(value)
        if integral and roll < 0.2 and fits(int(value), INT8_RANGE):
            return Int64(int(value))
        return value

    def numeric_bson(self):
        """A value for the numeric column: int32, int64, double or decimal128."""
        rng = self.rng
        roll = rng.random()
        if roll < 0.2:
            return rng.randint(-1000, 1000)
        if roll < 0.35:
            return Int64(rng.choice([2 ** 40, -2 ** 50, 9223372036854775807, 7]))
        if roll < 0.55:
            return rng.choice(NUMERIC_DOUBLES)
        if roll < 0.8:
            return Decimal128(rng.choice(NUMERIC_DECIMALS))
        return Decimal128("%d.%02d" % (rng.randint(-500, 500), rng.randint(0, 99)))


def random_timestamp(rng):
    """A naive UTC datetime between 1950 and 2050 with millisecond precision."""
    start = datetime.datetime(1950, 1, 1)
    return start + datetime.timedelta(milliseconds=rng.randrange(100 * 365 * 86400 * 1000))


def random_date(rng):
    """A date between 1990 and 2030."""
    return datetime.date(1990, 1, 1) + datetime.timedelta(days=rng.randrange(40 * 365))


def text_pool(column):
    """The text values of ``column``."""
    return {"t": TEXT_POOL, "ti": TI_POOL}.get(column.name, VC_POOL)


def field_value(doc, path):
    """The value at a dotted ``path`` of ``doc``; None if missing, null or
    undefined."""
    value = doc
    for part in path.split("."):
        if not isinstance(value, dict):
            return None
        value = value.get(part)
    return None if value is UNDEFINED else value


def sql_value(column, value):
    """What the FDW must read for the BSON ``value`` in ``column``.

    This is the type mapping of the FDW's documentation: ObjectIds read as
    lowercase hex, integers and integral doubles as Python ints, dates as
    UTC, decimal128 through its decimal string, doubles in the numeric
    column through their shortest round-trip decimal.
    """
    if value is None:
        return None
    kind = column.kind
    if kind == "int":
        return int(value)
    if kind == "float":
        return float(value)
    if kind == "text":
        return str(value)
    if kind == "ts":
        return value.replace(tzinfo=UTC)
    if kind == "date":
        return value.date()
    if kind == "numeric":
        if isinstance(value, Decimal128):
            return value.to_decimal()
        return decimal.Decimal(repr(value) if isinstance(value, float) else int(value))
    return value


def parts_value(doc):
    """What the array column on ``parts.v`` must read: through an array, the
    ``v`` of every element that is a document having one (an array's
    elements spliced in); under a document, its ``v`` array; else NULL."""
    parts = doc.get("parts")
    if isinstance(parts, dict):
        return parts.get("v")
    if not isinstance(parts, list):
        return None
    out = []
    for element in parts:
        if isinstance(element, dict) and "v" in element:
            value = element["v"]
            out.extend(value if isinstance(value, list) else [value])
    return out


def expected_row(doc):
    """The row the foreign table must return for ``doc``, column by column."""
    return tuple(sql_value(c, field_value(doc, c.field)) for c in COLUMNS) + (parts_value(doc),)


# --------------------------------------------------------------------------
# SQL literals
# --------------------------------------------------------------------------

def text_form(value):
    """The PostgreSQL input text of a Python value (floats exactly)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        if math.isinf(value):
            return "Infinity" if value > 0 else "-Infinity"
        return repr(value)
    if isinstance(value, datetime.datetime):
        return value.isoformat(sep=" ")
    return str(value)


def quote(text):
    """A standard SQL string literal."""
    return "'" + text.replace("'", "''") + "'"


def typed(value, sqltype):
    """``value`` as a literal of ``sqltype``; None becomes a typed NULL."""
    if value is None:
        return "NULL::" + sqltype
    return quote(text_form(value)) + "::" + sqltype


def array_literal(values, sqltype, rng):
    """An array of ``sqltype`` holding ``values``, as ARRAY[...] or '{...}'."""
    if rng.random() < 0.5:
        elements = ", ".join("NULL" if v is None else quote(text_form(v)) for v in values)
        return "ARRAY[%s]::%s[]" % (elements, sqltype)
    elements = ",".join("NULL" if v is None else
                        '"' + text_form(v).replace("\\", "\\\\").replace('"', '\\"') + '"'
                        for v in values)
    return quote("{" + elements + "}") + "::" + sqltype + "[]"


def bare_number(value):
    """An unadorned numeric literal, parenthesized when negative."""
    text = text_form(value)
    return "(%s)" % text if text.startswith("-") else text


# --------------------------------------------------------------------------
# Literal values
# --------------------------------------------------------------------------

class LiteralValues:
    """Values for literals and parameters, mostly ones that are stored.

    Half the time a value actually stored in the column is taken, else a
    pool value, sometimes moved by a minimal step of its type (one, a
    millisecond, a microsecond, the next double), so that boundaries and
    sub-millisecond timestamps are covered.
    """

    def __init__(self, rng, rows):
        self.rng = rng
        self.stored = {c.name: [r[i] for r in rows if r[i] is not None]
                       for i, c in enumerate(COLUMNS)}

    def value(self, column):
        """A non-null value suitable for comparing with ``column``."""
        rng = self.rng
        roll = rng.random()
        if roll < 0.5 and self.stored[column.name]:
            return rng.choice(self.stored[column.name])
        base = self.pool_value(column)
        return base if roll < 0.8 else self.nudge(column.kind, base)

    def pool_value(self, column):
        """A value from the generation pool of ``column``'s kind."""
        rng = self.rng
        kind = column.kind
        if kind == "int":
            return rng.choice(INT4_POOL if column.name != "i8" else INT8_POOL)
        if kind == "float":
            return rng.choice(F8_POOL)
        if kind == "text":
            if column.name == "t" and rng.random() < 0.1:
                return str(rng.choice(OBJECT_IDS))
            return rng.choice(text_pool(column))
        if kind == "bool":
            return rng.random() < 0.5
        if kind == "ts":
            return rng.choice(TS_POOL).replace(tzinfo=UTC)
        if kind == "date":
            return rng.choice(DATE_POOL)
        if kind == "uuid":
            return rng.choice(UUID_POOL)
        return sql_value(column, rng.choice(NUMERIC_DOUBLES + [Decimal128(s) for s in NUMERIC_DECIMALS]))

    def nudge(self, kind, value):
        """``value`` moved by a minimal step of its kind."""
        rng = self.rng
        if kind == "int":
            return value + rng.choice([-1, 1])
        if kind == "float":
            return math.nextafter(value, rng.choice([-math.inf, math.inf]))
        if kind == "text":
            return value + rng.choice(["a", "\u00e9", "\x7f", " "])
        if kind == "ts":
            try:
                return value + rng.choice([datetime.timedelta(milliseconds=1), datetime.timedelta(microseconds=1),
                                           datetime.timedelta(microseconds=-500), datetime.timedelta(microseconds=500)])
            except OverflowError:
                return value
        if kind == "date":
            try:
                return value + datetime.timedelta(days=rng.choice([-1, 1]))
            except OverflowError:
                return value
        if kind == "numeric" and value.is_finite():
            return value + decimal.Decimal("0.001")
        return value


# --------------------------------------------------------------------------
# WHERE clauses
# --------------------------------------------------------------------------

COMPARISONS = ["=", "<>", "<", "<=", ">", ">="]
COMMUTED = {"=": "=", "<>": "<>", "<": ">", "<=": ">=", ">": "<", ">=": "<="}
TEXT_COLLATIONS = ['"C"', '"C"', '"POSIX"', '"en-x-icu"', None, None, None]


class ClauseGenerator:
    """Random WHERE clauses over the table's columns, up to depth 3.

    Leaves are chosen so that most of them can be pushed down (comparisons
    with constants of the column's type, IN lists, = ANY / <> ALL, IS NULL,
    boolean columns, float ranges with NaN among the values and literals,
    comparisons of two integer columns) and some cannot (functions, LIKE,
    comparisons across type families, text ranges outside "C",
    sub-millisecond timestamps, ...),
    so that both the remote filter and the local recheck are exercised and
    mixed inside AND / OR / NOT.
    """

    def __init__(self, rng, values):
        self.rng = rng
        self.values = values
        self.leaves = [(30, self.comparison), (8, self.in_list), (7, self.array_op),
                       (8, self.null_test), (7, self.boolean), (5, self.text_function),
                       (3, self.cross_column), (4, self.local_expression), (5, self.id_lookup),
                       (4, self.parts_condition)]

    def clause(self, depth=None):
        """A random clause; ``depth`` bounds the nesting of AND / OR / NOT."""
        rng = self.rng
        if depth is None:
            depth = rng.randint(0, 3)
        if depth == 0 or rng.random() < 0.35:
            return self.leaf()
        roll = rng.random()
        if roll < 0.2:
            return "NOT (%s)" % self.clause(depth - 1)
        operator = " AND " if roll < 0.6 else " OR "
        return operator.join("(%s)" % self.clause(depth - 1) for _ in range(rng.choice([2, 2, 3])))

    def keyed_clause(self):
        """An equality on a column that has an index table, often ANDed with
        a random clause: the shape the planner routes through an index."""
        column = self.rng.choice([c for c in COLUMNS if c.name in ("i4", "t", "u", "vc")])
        value = self.values.pool_value(column)
        if value is None:
            value = self.values.value(column)
        key = "%s = %s" % (column.name, self.literal(column, value))
        if self.rng.random() < 0.6:
            return "(%s) AND (%s)" % (key, self.clause(1))
        return key

    def leaf(self):
        """One leaf condition, of a weighted random shape."""
        make = self.rng.choices([m for _, m in self.leaves], weights=[w for w, _ in self.leaves])[0]
        return make()

    def column(self, kinds=None):
        """A random column, optionally restricted to some kinds."""
        return self.rng.choice([c for c in COLUMNS if kinds is None or c.kind in kinds])

    def literal(self, column, value=None):
        """A literal for comparing with ``column``, in a random spelling.

        Spellings include typed casts, untyped strings (which take the
        column's type), bare numbers, and other types on purpose: integer
        literals of other widths (still pushable), ``::timestamp`` or
        ``::date`` against a timestamptz (evaluated locally).
        """
        rng = self.rng
        if value is None:
            value = self.values.value(column)
        kind = column.kind
        if kind == "int":
            return self.int_literal(column, value)
        if kind == "float":
            return self.float_literal(value)
        if kind == "text":
            return rng.choice([quote(value), quote(value), typed(value, "text"), typed(value, "varchar")])
        if kind == "bool":
            return text_form(value)
        if kind == "ts":
            return rng.choice([typed(value, "timestamptz"), quote(text_form(value)),
                               typed(value.astimezone(UTC).replace(tzinfo=None), "timestamp"),
                               typed(value.date(), "date")] + [typed(value, "timestamptz")] * 2)
        if kind == "date":
            return rng.choice([typed(value, "date"), typed(value, "date"), quote(text_form(value)),
                               typed(datetime.datetime(value.year, value.month, value.day), "timestamp")])
        if kind == "uuid":
            return rng.choice([typed(value, "uuid"), quote(text_form(value))])
        return rng.choice([typed(value, "numeric"), typed(value, "numeric"),
                           bare_number(value) if value.is_finite() else typed(value, "numeric")])

    def int_literal(self, column, value):
        """An integer literal: bare, or cast to any integer type it fits."""
        choices = [bare_number(value)]
        if fits(value, INT8_RANGE):
            choices.append("%s::bigint" % bare_number(value))
        if fits(value, INT4_RANGE):
            choices.append("%s::integer" % bare_number(value))
        if fits(value, INT2_RANGE):
            choices.append("%s::smallint" % bare_number(value))
        if fits(value, column.int_range):
            choices.append(quote(str(value)))
        return self.rng.choice(choices)

    def float_literal(self, value):
        """A float literal: float8 cast, untyped string, bare number or real."""
        choices = [typed(value, "float8"), typed(value, "float8"), quote(text_form(value))]
        if math.isfinite(value) and not (value == 0 and math.copysign(1, value) < 0):
            choices.append(bare_number(value))
        if value == 0 or math.isinf(value) or 1e-30 < abs(value) < 1e30:
            choices.append(typed(value, "real"))
        return self.rng.choice(choices)

    def collate(self, column, text):
        """``text`` (a text column or literal), sometimes with a COLLATE clause."""
        collation = self.rng.choice(TEXT_COLLATIONS) if column.kind == "text" else None
        return "%s COLLATE %s" % (text, collation) if collation else text

    def comparison(self):
        """column op literal, or literal op column (the commuted form)."""
        rng = self.rng
        column = self.column()
        op = rng.choice(COMPARISONS)
        literal = self.literal(column)
        if column.kind == "text" and rng.random() < 0.5:
            left, right = self.collate(column, column.name), literal
        else:
            left, right = column.name, self.collate(column, literal)
        if rng.random() < 0.2:
            return "%s %s %s" % (right, COMMUTED[op], left)
        return "%s %s %s" % (left, op, right)

    def list_values(self, column):
        """1 to 4 values for an IN list or array, sometimes with a NULL."""
        values = [self.values.value(column) for _ in range(self.rng.randint(1, 4))]
        if self.rng.random() < 0.2:
            values.insert(self.rng.randrange(len(values) + 1), None)
        return values

    def in_list(self):
        """column [NOT] IN (literals...), literals spelled one way."""
        rng = self.rng
        column = self.column()
        cast = self.list_type(column)
        values = [v for v in self.list_values(column) if v is None or cast not in INT_TYPE_RANGE
                  or fits(v, INT_TYPE_RANGE[cast])] or [0]
        items = ", ".join("NULL" if v is None else typed(v, cast) if cast else self.literal(column, v)
                          for v in values)
        return "%s %sIN (%s)" % (self.collate(column, column.name), "NOT " if rng.random() < 0.35 else "", items)

    def list_type(self, column):
        """The element type for a list over ``column`` (None: spell freely).

        Integers may use a wider type; other kinds use their own type so
        that the list's common type is the column's.
        """
        if column.kind == "int":
            return self.rng.choice(["bigint", None] + (["integer"] if column.int_range == INT4_RANGE else []))
        if column.kind == "text":
            return None
        return KIND_TYPE[column.kind] if column.kind != "float" else "float8"

    def array_op(self):
        """column = ANY(array) or column <> ALL(array), arrays possibly empty."""
        rng = self.rng
        column = self.column()
        values = self.list_values(column) if rng.random() < 0.9 else []
        if column.kind == "int":
            sqltype = "bigint" if column.name == "i8" or rng.random() < 0.3 else "integer"
            values = [v for v in values if v is None or fits(v, INT_TYPE_RANGE[sqltype])]
        else:
            sqltype = "float8" if column.kind == "float" else KIND_TYPE[column.kind]
        op = "= ANY" if rng.random() < 0.6 else "<> ALL"
        return "%s %s(%s)" % (self.collate(column, column.name), op, array_literal(values, sqltype, rng))

    def null_test(self):
        """column IS [NOT] NULL, occasionally on a row of two columns."""
        rng = self.rng
        test = rng.choice(["IS NULL", "IS NOT NULL"])
        if rng.random() < 0.1:
            return "(%s, %s) %s" % (self.column().name, self.column().name, test)
        return "%s %s" % (self.column().name, test)

    def parts_condition(self):
        """A condition on the array column read through an array (an index
        table serves "= ANY"; the rest is evaluated locally)."""
        rng = self.rng
        value = quote(rng.choice(VC_POOL))
        return rng.choice(["%s = ANY (pv)" % value, "%s = ANY (pv)" % value, "pv IS NULL",
                           "pv = '{}'", "cardinality(pv) > 1", "pv @> ARRAY[%s]" % value,
                           "NOT (%s = ANY (pv))" % value])

    def boolean(self):
        """The boolean column in its many spellings."""
        return self.rng.choice(["b", "NOT b", "b = true", "b = false", "b <> true", "b IS TRUE",
                                "b IS NOT TRUE", "b IS FALSE", "b IS UNKNOWN", "b < true", "b >= false",
                                "b > false", "b IN (true, NULL)", "b = NULL", "b IS NOT DISTINCT FROM false"])

    def text_function(self):
        """Text conditions that are evaluated locally (functions, LIKE, regex)."""
        rng = self.rng
        column = self.column(["text"])
        value = self.values.value(column)
        prefix = value[:1]
        return rng.choice([
            "lower(%s) = %s" % (column.name, quote(value.lower())),
            "upper(%s) = %s" % (column.name, quote(value.upper())),
            "%s LIKE %s" % (column.name, quote(prefix.replace("%", "\\%").replace("_", "\\_") + "%")),
            "%s ILIKE %s" % (column.name, quote("%" + prefix.replace("%", "\\%").replace("_", "\\_"))),
            "%s NOT LIKE %s" % (column.name, quote("%b")),
            "length(%s) > %d" % (column.name, rng.randint(0, 3)),
            "%s ~ %s" % (column.name, quote("^[a-f0-9]+$")),
            "%s COLLATE \"C\" BETWEEN %s AND %s" % (column.name, quote(value), quote(value + "~")),
        ])

    def cross_column(self):
        """Comparisons between two columns: pushed as an $expr within a type
        family (integers; a float with itself), integer arithmetic as a
        superset rechecked locally, else evaluated locally.

        The arithmetic here cannot overflow on any stored value (a bigint
        constant first makes the int4 steps bigint ones, and i8 is never an
        operand): PostgreSQL evaluates a WHERE's conjuncts in an order that
        differs between the two plans, so an overflow error inside a clause
        would or would not be raised depending on the plan.  Overflowing
        arithmetic is compared as whole clauses (OVERFLOW_CLAUSES)."""
        return self.rng.choice(["i4 < i8", "i4 = id", "id > i8", "i8 >= id", "NOT (i4 <= i8)", "i4 <> i8",
                                "f8 >= f8", "NOT (f8 < f8)", "i4 + 1::bigint < i8", "NOT (i8 >= 0::bigint + i4)",
                                "0::bigint + id + i4 > 0", "3::bigint + i4 - id = i8", "t = vc",
                                "t COLLATE \"C\" > vc",
                                "f8 > i4", "ts::date = d", "n = i4", "n < f8", "d > ts"])

    def local_expression(self):
        """Other shapes: IS DISTINCT FROM, coalesce, modulo, BETWEEN."""
        rng = self.rng
        column = self.column(["int", "float", "ts", "date", "uuid", "text"])
        low, high = sorted([self.values.value(column), self.values.value(column)],
                           key=lambda v: (str(type(v)), v))
        return rng.choice([
            "%s IS DISTINCT FROM %s" % (column.name, self.literal(column)),
            "%s IS NOT DISTINCT FROM %s" % (column.name, self.literal(column)),
            "%s BETWEEN %s AND %s" % (column.name, self.literal(column, low), self.literal(column, high)),
            "%s NOT BETWEEN %s AND %s" % (column.name, self.literal(column, low), self.literal(column, high)),
            "coalesce(i4, 0) = 0",
            "i4 %% 7 = %d" % rng.randint(-6, 6),
            "i8 / 2 > %d" % rng.randint(-10, 10),
        ])

    def id_lookup(self):
        """Conditions on the _id column, which the FDW serves by key lookup."""
        rng = self.rng
        column = COLUMN["id"]
        values = [v for v in (self.values.value(column) for _ in range(5)) if fits(v, INT4_RANGE)]
        values = values[:rng.randint(1, len(values))] or [0]
        return rng.choice([
            "id = %s" % self.int_literal(column, values[0]),
            "id IN (%s)" % ", ".join(str(v) for v in values),
            "id = ANY(%s)" % array_literal(values, "integer", rng),
            "id >= %d AND id < %d" % (values[0], values[0] + rng.randint(1, 50)),
            "id <> %d" % values[0],
        ])


# --------------------------------------------------------------------------
# Prepared statements
# --------------------------------------------------------------------------

@dataclass
class Parameter:
    """A parameter of a prepared statement: its SQL type and how to fill it."""
    sqltype: str
    column: Column
    is_array: bool = False


@dataclass
class PreparedCase:
    """A parameterized WHERE clause and the argument lists to execute it with."""
    clause: str
    params: list
    executions: list = field(default_factory=list)

    def declaration(self):
        """The parenthesized type list of PREPARE."""
        return "(%s)" % ", ".join(p.sqltype + ("[]" if p.is_array else "") for p in self.params)


class PreparedGenerator:
    """Random parameterized clauses, and random arguments (NULL included)."""

    def __init__(self, rng, values):
        self.rng = rng
        self.values = values
        self.clauses = ClauseGenerator(rng, values)

    def case(self):
        """A prepared case with EXECUTIONS_PER_PREPARED argument lists."""
        params = []
        clause = self.clause(params, self.rng.randint(0, 2))
        if not params:
            clause = "(%s) AND %s" % (clause, self.parameter_leaf(params))
        case = PreparedCase(clause, params)
        for run in range(EXECUTIONS_PER_PREPARED):
            null_chance = 0.5 if run == EXECUTIONS_PER_PREPARED - 1 else 0.1
            case.executions.append([self.argument(p, null_chance) for p in params])
        return case

    def clause(self, params, depth):
        """A clause tree whose leaves mostly compare columns with parameters."""
        rng = self.rng
        if depth == 0 or rng.random() < 0.3:
            return self.parameter_leaf(params) if rng.random() < 0.85 else self.clauses.leaf()
        if rng.random() < 0.2:
            return "NOT (%s)" % self.clause(params, depth - 1)
        operator = " AND " if rng.random() < 0.5 else " OR "
        return operator.join("(%s)" % self.clause(params, depth - 1) for _ in range(2))

    def parameter(self, params, column, sqltype, is_array=False):
        """Declare a new parameter and return its placeholder."""
        params.append(Parameter(sqltype, column, is_array))
        return "$%d" % len(params)

    def parameter_type(self, column):
        """The declared type of a parameter compared with ``column``."""
        if column.kind == "int":
            return self.rng.choice(["integer", "bigint", "smallint"] if column.name != "i8" else ["bigint", "integer"])
        return KIND_TYPE[column.kind]

    def parameter_leaf(self, params):
        """column op $n, column = ANY($n), or the optional-filter idiom."""
        rng = self.rng
        column = rng.choice(COLUMNS)
        sqltype = self.parameter_type(column)
        roll = rng.random()
        if roll < 0.2:
            placeholder = self.parameter(params, column, sqltype, is_array=True)
            op = "= ANY" if rng.random() < 0.6 else "<> ALL"
            return "%s %s(%s)" % (column.name, op, placeholder)
        placeholder = self.parameter(params, column, sqltype)
        op = rng.choice(COMPARISONS)
        if roll < 0.3:
            return "(%s IS NULL OR %s %s %s)" % (placeholder, column.name, op, placeholder)
        if column.kind == "text" and rng.random() < 0.4:
            return '%s %s %s COLLATE "C"' % (column.name, op, placeholder)
        return "%s %s %s" % (column.name, op, placeholder)

    def argument(self, param, null_chance):
        """An argument of EXECUTE for ``param``: a typed literal or NULL."""
        rng = self.rng
        if rng.random() < null_chance:
            return "NULL::%s%s" % (param.sqltype, "[]" if param.is_array else "")
        if param.is_array:
            values = [self.fitting_value(param) if rng.random() < 0.9 else None for _ in range(rng.randint(0, 4))]
            return array_literal(values, param.sqltype, rng) if values else "'{}'::%s[]" % param.sqltype
        return typed(self.fitting_value(param), param.sqltype)

    def fitting_value(self, param):
        """A value for the parameter's column that fits the parameter's type."""
        bounds = INT_TYPE_RANGE.get(param.sqltype)
        while True:
            value = self.values.value(param.column)
            if bounds is None or fits(value, bounds):
                return value


# --------------------------------------------------------------------------
# Loading
# --------------------------------------------------------------------------

def load_mongo(docs):
    """Recreate the MongoDB database and insert the documents in one batch.

    A few secondary indexes are created too, so that a server which plans
    queries with indexes is exercised on the same filters.
    """
    client = mongo_client.connect()
    client.drop_database(DATABASE)
    collection = mongo_client.database(client, DATABASE)[COLLECTION]
    collection.insert_many([encode_document(d) for d in docs])
    for key in ("i4", "t", "ts", "meta.vc"):
        collection.create_index(key)
    stored = collection.count_documents({})
    client.close()
    if stored != len(docs):
        raise RuntimeError("MongoDB holds %d documents, expected %d" % (stored, len(docs)))


def connect_postgres(dbname):
    """A psycopg2 connection in autocommit mode, session time zone UTC."""
    psycopg2.extras.register_uuid()
    conn = pg_fixture.connect(dbname, options="-c TimeZone=UTC -c statement_timeout=30s")
    conn.set_client_encoding("UTF8")
    return conn


def create_database():
    """Recreate the PostgreSQL test database with the C.UTF-8 collation."""
    pg_fixture.recreate_database(DATABASE, options=pg_fixture.UTF8_C)


def create_tables(conn, rows):
    """Create the extension, server, user mapping, foreign and local tables.

    The local table gets the expected rows (inserted as their exact text
    input forms, so that -0.0 and large integers survive) and a few btree
    indexes; both tables are analyzed.
    """
    definitions = ",\n  ".join(
        ["%s %s%s" % (c.name, c.sqltype, "" if c.field == c.name else " OPTIONS (field %s)" % quote(c.field))
         for c in COLUMNS] + ["%s text[] OPTIONS (field %s)" % (PARTS_COLUMN, quote(PARTS_FIELD))])
    with conn.cursor() as cur:
        pg_fixture.create_extension(conn)
        # a fetch size below the row count keeps multi-batch cursors in play
        pg_fixture.create_server(conn, DATABASE, options=[("fetch_size", "500")])
        pg_fixture.create_foreign_table(conn, "ft", "\n  %s\n" % definitions, collection=COLLECTION)
        cur.execute("CREATE TABLE lt (\n  %s\n)" % ",\n  ".join(
            ["%s %s%s" % (c.name, c.sqltype, " PRIMARY KEY" if c.name == "id" else "") for c in COLUMNS]
            + ["%s text[]" % PARTS_COLUMN]))
        template = "(%s)" % ", ".join(["%%s::%s" % c.sqltype for c in COLUMNS] + ["%s::text[]"])
        psycopg2.extras.execute_values(cur, "INSERT INTO lt VALUES %s",
                       [[v if isinstance(v, list) or v is None else text_form(v) for v in row]
                        for row in rows],
                       template=template, page_size=500)
        for name in ("i4", "t", "ts"):
            cur.execute("CREATE INDEX ON lt (%s)" % name)
        # the same secondary keys as index tables on the foreign table
        for keys, include in INDEX_TABLES:
            cur.execute("SELECT idxtable.create_index('ft', %s, %s)", (keys, include))
        cur.execute("ANALYZE lt")
        cur.execute("ANALYZE ft")


# --------------------------------------------------------------------------
# Running and comparing
# --------------------------------------------------------------------------

@dataclass
class Outcome:
    """The result of one query: rows, or the error it raised."""
    rows: list = None
    error: str = None
    sqlstate: str = None


class Session:
    """The connection the cases run on, reopened if it is lost.

    A backend that crashes in the FDW fails the case that crashed it; the
    cases after it run on a new connection.
    """

    def __init__(self, dbname):
        self.dbname = dbname
        self.conn = connect_postgres(dbname)

    def run(self, sql):
        """Run ``sql`` and return its rows, or the error (never raising)."""
        try:
            if self.conn.closed:
                self.conn = connect_postgres(self.dbname)
            with self.conn.cursor() as cur:
                cur.execute(sql)
                return Outcome(rows=cur.fetchall() if cur.description else [])
        except psycopg2.Error as exc:
            return Outcome(error=(exc.pgerror or str(exc)).strip(), sqlstate=exc.pgcode)

    def close(self):
        """Close the connection."""
        self.conn.close()


def comparable(value):
    """A form of a column value in which equality is exact identity.

    Floats compare by their repr, which tells -0.0 from 0.0; numerics by
    value (1.10 and 1.1 are equal in any WHERE clause); the rest as is.
    """
    if isinstance(value, float):
        return ("float", repr(value))
    return value


def comparable_rows(rows):
    """``rows`` with every value made comparable."""
    return [tuple(comparable(v) for v in row) for row in rows]


def show_row(row):
    """A row as ``(name=value, ...)`` for failure reports."""
    return "(" + ", ".join("%s=%r" % (c.name, v) for c, v in zip(COLUMNS, row)) + ")"


def row_differences(foreign_rows, local_rows, limit=5):
    """Lines describing how two row lists (sorted by id) differ."""
    foreign = {row[0]: row for row in foreign_rows}
    local = {row[0]: row for row in local_rows}
    lines = ["foreign: %d rows, local: %d rows" % (len(foreign_rows), len(local_rows))]
    for key in sorted(set(foreign) | set(local)):
        f, l = foreign.get(key), local.get(key)
        if f is not None and l is not None and comparable_rows([f]) == comparable_rows([l]):
            continue
        if len(lines) > limit:
            lines.append("...")
            break
        if f is None:
            lines.append("only local:   " + show_row(l))
        elif l is None:
            lines.append("only foreign: " + show_row(f))
        else:
            lines.append("differs: foreign " + show_row(f))
            lines.append("         local   " + show_row(l))
    if len(lines) == 1 and len(foreign_rows) == len(local_rows):
        lines.append("same rows in a different order")
    return lines


def compare(foreign, local):
    """None if two outcomes agree, else lines describing the difference.

    Both failing with the same SQLSTATE counts as agreement, unless the
    error is a syntax or semantic one (class 42): that is a bug of this
    test's SQL generation and must not pass unnoticed.
    """
    if foreign.error or local.error:
        if foreign.sqlstate == local.sqlstate and not (local.sqlstate or "").startswith("42"):
            return None
        return ["foreign: " + (foreign.error or "%d rows" % len(foreign.rows)),
                "local:   " + (local.error or "%d rows" % len(local.rows))]
    if comparable_rows(foreign.rows) == comparable_rows(local.rows):
        return None
    return row_differences(foreign.rows, local.rows)


def remote_filter(session, sql):
    """The 'MongoDB Filter' EXPLAIN VERBOSE shows for ``sql`` (None if none),
    and whether the scan was routed through an index table."""
    outcome = session.run("EXPLAIN (VERBOSE, COSTS OFF) " + sql)
    if outcome.error:
        return None, False
    found, routed = None, False
    for (line,) in outcome.rows:
        match = re.search(r"MongoDB Filter: (.*)$", line)
        if match and found is None:
            found = match.group(1).strip()
        routed |= "Index Table:" in line
    return found, routed


def is_pushed(filter_json):
    """Did the scan send a non-empty filter to MongoDB?"""
    return filter_json is not None and re.sub(r"\s", "", filter_json) != "{}"


class Report(Results):
    """The shared tally of cases; a failure prints with the seed (in detail
    for the first ones, then its first problem and foreign outcome)."""

    def __init__(self, seed):
        super().__init__(detailed=MAX_DETAILED_FAILURES)
        self.seed = seed

    def result(self, name, problem):
        """Record a case: ``problem`` is None or a list of lines."""
        if problem is None:
            self.check(True, name)
            return
        outcome = next((line for line in problem if line.startswith("foreign")), "")
        self.check(False, "%s (DIFF_SEED=%d)" % (name, self.seed), problem,
                   brief="%s (DIFF_SEED=%d): %s -- %s" % (name, self.seed, problem[0],
                                                         (outcome.splitlines() or [""])[0]))


def select_sql(table, clause):
    """The query every case runs: all columns of ``table`` under ``clause``."""
    return "SELECT %s FROM %s WHERE %s ORDER BY id" % (SELECT_LIST, table, clause)


def run_clause_case(session, number, clause, report):
    """Compare one WHERE clause on both tables, with index routing on (the
    planner's choice) and off; return whether it pushed and whether it was
    routed through an index table."""
    filter_json, routed = remote_filter(session, select_sql("ft", clause))
    local = session.run(select_sql("lt", clause))
    problem = compare(session.run(select_sql("ft", clause)), local)
    if not problem and routed:
        session.run("SET idxtable.enable_index_routing = off")
        problem = compare(session.run(select_sql("ft", clause)), local)
        session.run("RESET idxtable.enable_index_routing")
        if problem:
            problem = ["(with index routing off)"] + problem
    if problem:
        problem = ["WHERE " + clause, "MongoDB Filter: %s" % filter_json,
                   "routed through an index table: %s" % routed] + problem
    report.result("clause %d" % number, problem)
    return is_pushed(filter_json), routed


def collated_order_cases(rng, count=24):
    """Queries ordered by the ICU-collated column ``ti``, most with a range or
    an equality under its collation: the index tables on ``ti`` and on
    ``(b, ti)`` hold sort keys and can give that order."""
    cases = []
    for _ in range(count):
        low, high = sorted(rng.sample(TI_POOL, 2))
        clause = rng.choice([
            "true",
            "ti > %s" % quote(low),
            "ti >= %s AND ti < %s" % (quote(low), quote(high)),
            "ti <= %s" % quote(high),
            "ti BETWEEN %s AND %s" % (quote(low), quote(high)),
            "b = %s" % rng.choice(["true", "false"]),
            "b = true AND ti > %s" % quote(low),
            "ti IN (%s, %s)" % (quote(low), quote(high)),
            "ti = %s" % quote(low),
        ])
        limit = rng.choice(["", "", " LIMIT 5", " LIMIT 40"])
        cases.append("SELECT ti FROM %%s WHERE %s ORDER BY ti%s" % (clause, limit))
    return cases


def run_collated_order_case(session, number, query, report):
    """One query ordered by ``ti`` on both tables, the foreign one with plain
    scans as a last resort: the values must come in the same order.  Returns
    whether the index gave the order."""
    session.run("SET idxtable.enable_plain_scan = off")
    plan = session.run("EXPLAIN " + query % "ft")
    foreign = session.run(query % "ft")
    session.run("RESET idxtable.enable_plain_scan")
    local = session.run(query % "lt")
    ordered = bool(plan.rows) and any("Index Order:" in r[0] for r in plan.rows)
    problem = None
    if foreign.error or local.error:
        problem = compare(foreign, local)
    elif [r[0] for r in foreign.rows] != [r[0] for r in local.rows]:
        problem = ["foreign: %r" % [r[0] for r in foreign.rows][:12],
                   "local:   %r" % [r[0] for r in local.rows][:12]]
    if problem:
        problem = [query % "ft", "index order: %s" % ordered] + problem
    report.result("collated order %d" % number, problem)
    return ordered


def run_prepared_case(session, number, case, report, plan_counts):
    """Prepare one parameterized query on both tables and execute it repeatedly.

    Even-numbered cases run with plan_cache_mode auto (PostgreSQL moves to a
    generic plan after five custom ones, if it finds it no costlier), odd
    ones with force_generic_plan, so the parameters of a generic plan are
    certainly resolved at execution time.  Generic and custom plan counts
    are added to ``plan_counts``.
    """
    mode = "auto" if number % 2 == 0 else "force_generic_plan"
    problem = None
    session.run("SET plan_cache_mode = " + mode)
    for name, table in (("qf", "ft"), ("ql", "lt")):
        outcome = session.run("PREPARE %s%s AS %s" % (name, case.declaration(), select_sql(table, case.clause)))
        if outcome.error:
            problem = (problem or []) + ["PREPARE on %s failed: %s" % (table, outcome.error)]
    for args in case.executions if problem is None else []:
        arglist = "(%s)" % ", ".join(args)
        difference = compare(session.run("EXECUTE qf" + arglist), session.run("EXECUTE ql" + arglist))
        if difference:
            problem = ["EXECUTE" + arglist] + difference
            break
    plans = session.run("SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE name = 'qf'")
    for generic, custom in plans.rows or []:
        plan_counts[0] += generic
        plan_counts[1] += custom
    session.run("DEALLOCATE ALL")
    session.run("RESET plan_cache_mode")
    if problem:
        problem = ["PREPARE q%s AS ... WHERE %s" % (case.declaration(), case.clause),
                   "plan_cache_mode = " + mode] + problem
    report.result("prepared %d" % number, problem)


# --------------------------------------------------------------------------
# Aggregates: the same groupings on both tables (pushed as an aggregate
# pipeline where exact, local otherwise), over the clauses above, empty sets
# included; int4/int8 sums past their type, NaN in f8, NULL groups
# --------------------------------------------------------------------------

AGGREGATES = ["count(*)", "count(i4)", "count(t)", "sum(i4)", "sum(i8)", "avg(i4)", "avg(i8)",
              "min(i4)", "max(i8)", "min(ts)", "max(d)", "min(t COLLATE \"C\")", "max(vc COLLATE \"C\")",
              "max(f8) + 0", "min(t)", "count(DISTINCT i4)", "sum(n)"]
GROUP_KEYS = ["t", "vc", "i4", "d", "ts", "b"]
# count(DISTINCT) of these (with count(*) beside): pushed for integers,
# timestamps and text under deterministic collations; floats (-0 and 0, NaN)
# and dates stay local
DISTINCT_ARGS = ["i4", "i8", "t", "vc", "ts", "ti", 't COLLATE "C"', 't COLLATE "en-x-icu"', "f8", "d", "b"]
MIN_AGG_PUSHED = 0.1


def distinct_aggregates(rng):
    """One to three aggregates with a count(DISTINCT) of one column."""
    arg = rng.choice(DISTINCT_ARGS)
    aggs = ["count(DISTINCT %s)" % arg]
    if rng.random() < 0.5:
        aggs.append("count(*)")
    if rng.random() < 0.2:
        aggs.append("count(DISTINCT %s)" % (arg if rng.random() < 0.7 else rng.choice(DISTINCT_ARGS)))
    rng.shuffle(aggs)
    return aggs


# ORDER BY [LIMIT/OFFSET] over a grouping: keys MongoDB sorts as PostgreSQL
# (pushed as $sort/$skip/$limit) and a few it does not
ORDERED_GROUP_KEYS = ["i4", "i8", "d", "ts"]
ORDERED_AGGREGATES = ["count(*)", "count(i4)", "sum(i4)", "sum(i8)", "min(i4)", "max(i8)", "min(ts)",
                      "count(DISTINCT i4)"]


def ordered_aggregate_case(rng, clauses):
    """A grouped query ordered on some of its outputs, then on every group key
    (a total order: the rows must then come in the same order on both tables),
    often under a LIMIT and OFFSET; NULL groups and sums over no values sort
    as NULLs."""
    keys = rng.sample(ORDERED_GROUP_KEYS + (["t"] if rng.random() < 0.15 else []), rng.choice([1, 1, 2]))
    if rng.random() < 0.4:
        aggs = ["count(DISTINCT i4)"] + (["count(*)"] if rng.random() < 0.5 else [])
    else:
        aggs = rng.sample(ORDERED_AGGREGATES[:7], rng.randint(1, 3))
    outputs = keys + aggs
    order = []
    for expr in rng.sample(outputs, rng.randint(1, min(2, len(outputs)))):
        order.append("%s%s%s" % (expr, rng.choice(["", " ASC", " DESC"]),
                                 rng.choice(["", "", " NULLS FIRST", " NULLS LAST"])))
    order += [k for k in keys if not any(o.split()[0] == k for o in order)]
    roll = rng.random()
    where = "false" if roll < 0.08 else "true" if roll < 0.6 else clauses.clause(depth=1)
    sql = "SELECT %s FROM {table} WHERE %s GROUP BY %s ORDER BY %s" % (
        ", ".join(outputs), where, ", ".join(keys), ", ".join(order))
    if rng.random() < 0.8:
        sql += " LIMIT %d" % rng.choice([1, 3, 5, 20, 1000])
    if rng.random() < 0.3:
        sql += " OFFSET %d" % rng.choice([1, 2, 10])
    return sql


def limited_aggregate_case(rng, clauses):
    """A grouped query under a LIMIT (and an OFFSET now and then) without
    ORDER BY (pushed as $skip/$limit after the $group): any groups are a right
    answer, so run_aggregate_case compares how many and that each is a group
    of the whole result."""
    keys = rng.sample(GROUP_KEYS, rng.choice([1, 1, 2]))
    aggs = rng.sample(AGGREGATES[:13], rng.randint(1, 3))
    roll = rng.random()
    where = "false" if roll < 0.08 else "true" if roll < 0.6 else clauses.clause(depth=1)
    sql = "SELECT %s FROM {table} WHERE %s GROUP BY %s LIMIT %d" % (
        ", ".join(keys + aggs), where, ", ".join(keys), rng.choice([1, 3, 5, 20, 1000]))
    if rng.random() < 0.4:
        sql += " OFFSET %d" % rng.choice([1, 2, 10])
    return sql


LIMIT_TAIL = re.compile(r" LIMIT \d+( OFFSET \d+)?$")


def limited_problem(session, sql, foreign, local):
    """What is wrong with the rows of a limited unordered grouping, or None:
    as many rows as the local table's, each one of its groups (the whole
    grouping, without the LIMIT)."""
    whole = session.run(LIMIT_TAIL.sub("", sql).replace("{table}", "lt"))
    if whole.error:
        return ["the whole local grouping failed: %s" % whole.error]
    groups = aggregate_rows(whole.rows)
    got = aggregate_rows(foreign.rows)
    if len(got) != len(local.rows):
        return ["foreign: %d rows, local: %d" % (len(got), len(local.rows))]
    strays = [row for row in got if row not in groups]
    if strays or len(set(map(repr, got))) != len(got):
        return ["foreign rows that are not distinct groups of the whole result: %r" % (strays[:6] or got[:6])]
    return None


def aggregate_cases(rng, clauses, count):
    """``count`` aggregate queries over table ``{table}``: one to four
    aggregates, no to two GROUP BY keys, sometimes HAVING, a WHERE clause
    ("false" for an empty set now and then)."""
    cases = []
    for number in range(count):
        if number % 8 == 7:
            # one case in eight of a shape always pushed (integer aggregates,
            # no WHERE clause, an integer key or none), so that the coverage
            # minimum (MIN_AGG_PUSHED) holds for every seed of a short run
            keys = rng.choice([[], ["i4"]])
            aggs = rng.sample(["count(*)", "count(i4)", "sum(i4)", "min(i4)", "max(i8)"], rng.randint(1, 3))
            sql = "SELECT %s FROM {table} WHERE true" % ", ".join(keys + aggs)
            cases.append(sql + (" GROUP BY i4" if keys else ""))
            continue
        roll = rng.random()
        if roll < 0.25:
            cases.append(ordered_aggregate_case(rng, clauses))
            continue
        if roll < 0.35:
            cases.append(limited_aggregate_case(rng, clauses))
            continue
        keys = rng.sample(GROUP_KEYS, rng.choice([0, 0, 1, 1, 1, 2]))
        if rng.random() < 0.25:
            aggs = distinct_aggregates(rng)
        else:
            aggs = rng.sample(AGGREGATES[:13] if rng.random() < 0.8 else AGGREGATES, rng.randint(1, 4))
        roll = rng.random()
        where = "false" if roll < 0.1 else "true" if roll < 0.5 else clauses.clause(depth=1)
        sql = "SELECT %s FROM {table} WHERE %s" % (", ".join(keys + aggs), where)
        if keys:
            sql += " GROUP BY " + ", ".join(keys)
        if rng.random() < 0.2:
            sql += " HAVING count(*) > %d" % rng.choice([0, 1, 3])
        cases.append(sql)
    return cases


# GROUP BY one key of an index table with count(*) only, the WHERE clause on
# the same index table's keys: the shape a count per key from the index
# entries answers (route_agg.c), where each fact has one entry ({table}'s
# index tables: INDEX_TABLES).  t holds ObjectIds beside strings, one the
# hex text of an ObjectId, and NULL, missing and undefined, which must be
# one group each way.  Literals {column} are drawn per case.
INDEX_GROUPINGS = [
    ("t", ["true", "t = {t}", "t > {t}", "t < {t}", "t IN ({t}, {t})", "t IS NULL"]),
    ("i8", ["t = {t}", "t IS NULL", "t IN ({t}, {t})"]),
    ("i4", ["true", "i4 > {i4}", "i4 IS NULL"]),
    ("vc", ["true", "vc = {vc}"]),
    ("u", ["true"]),
    ("b", ["true", "b", "NOT b"]),
    ("ti", ["true", "b = {b}", "ti < {ti}"]),
]
# the run fails unless at least this share of them is answered from an index table
MIN_INDEX_GROUPED = 0.5


def index_grouping_cases(rng, clauses, count):
    """``count`` queries of INDEX_GROUPINGS' shape over table ``{table}``,
    now and then with a constant or a second count(*) beside the count."""
    cases = []
    for _ in range(count):
        key, conditions = rng.choice(INDEX_GROUPINGS)

        def literal(match):
            column = COLUMN[match.group(1)]
            value = clauses.values.pool_value(column) if rng.random() < 0.5 else clauses.values.value(column)
            return clauses.literal(column, value)
        where = re.sub(r"\{(\w+)\}", literal, rng.choice(conditions))
        extra = rng.choice(["", "", ", 'k' AS c", ", count(*) AS again"])
        cases.append("SELECT %s, count(*)%s FROM {table} WHERE %s GROUP BY %s" % (key, extra, where, key))
    return cases


def aggregate_rows(rows):
    """Rows made comparable: floats by repr, numerics by value (0 and 0.0 are
    equal, as in comparable()), a numeric NaN equal to itself."""
    return [tuple(("NaN",) if isinstance(v, decimal.Decimal) and v.is_nan() else comparable(v) for v in row)
            for row in rows]


def sorted_outcome(outcome):
    """Rows in a fixed order (a grouping returns its groups in any order)."""
    if outcome.rows is not None:
        outcome.rows = sorted(outcome.rows, key=lambda row: repr(comparable_rows([row])))
    return outcome


def run_aggregate_case(session, number, sql, report, index_counts=None):
    """Compare one aggregate query on both tables; True if it was pushed (as
    an aggregate pipeline, or into ``index_counts`` a list, as a count per
    key from an index table)."""
    plan = session.run("EXPLAIN (VERBOSE, COSTS OFF) " + sql.replace("{table}", "ft"))
    pushed = any("aggregate pipeline" in line for (line,) in plan.rows or [])
    if index_counts is not None:
        pushed = any("(count per key)" in line for (line,) in plan.rows or [])
        index_counts.append(pushed)
    limited = " LIMIT " in sql and " ORDER BY " not in sql
    if " ORDER BY " in sql:
        pushed = pushed and any("$sort" in line for (line,) in plan.rows or [])
    if limited:
        pushed = pushed and any("$limit" in line for (line,) in plan.rows or [])
    foreign = session.run(sql.replace("{table}", "ft"))
    local = session.run(sql.replace("{table}", "lt"))
    if " ORDER BY " not in sql:  # ordered cases sort on every group key too
        foreign, local = sorted_outcome(foreign), sorted_outcome(local)
    problem = None
    if foreign.error or local.error:
        problem = compare(foreign, local)
    elif limited:
        problem = limited_problem(session, sql, foreign, local)
    elif aggregate_rows(foreign.rows) != aggregate_rows(local.rows):
        problem = ["foreign: %r" % foreign.rows[:6], "local:   %r" % local.rows[:6]]
    if problem:
        problem = [sql.replace("{table}", "ft"), "pushed: %s" % pushed] + problem
    report.result(("index grouping %d" if index_counts is not None else "aggregate %d") % number, problem)
    return pushed


# --------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------

# Columns an ORDER BY may sort on in the order family: the kinds MongoDB sorts
# as PostgreSQL does (pushed), f8 (pushed as a first key, its NaNs read
# apart), and text and a dotted path (kept local).
ORDER_COLUMNS = ["id", "i4", "i8", "f8", "b", "ts", "d", "u", "t", "vc"]
ORDER_CASES = 60
MIN_ORDER_PUSHED = 15
# float sorts: f8 first, LIMIT/OFFSET around the parts (numbers, NaN, NULL)
FLOAT_ORDER_CASES = 24
MIN_FLOAT_ORDER_PUSHED = 8


def order_output(key):
    """The output of a sort key: the column, f8 + 0 for f8 (-0 and 0 are
    equal, so either may come first, and print alike after adding 0)."""
    column = key.split()[0]
    return "f8 + 0" if column == "f8" else column


def order_case(rng, clauses):
    """A random query of the ORDER BY/LIMIT/OFFSET family: its sort keys are
    its output (rows equal on them may come in any order), or without ORDER BY
    only the number of rows is compared."""
    keys = []
    for column in rng.sample(ORDER_COLUMNS, rng.choice([1, 1, 2])):
        keys.append("%s%s%s" % (column, rng.choice(["", " ASC", " DESC"]),
                                rng.choice(["", "", " NULLS FIRST", " NULLS LAST"])))
    where = " WHERE " + clauses.clause(depth=1) if rng.random() < 0.3 else ""
    limit = ""
    if rng.random() < 0.8:
        limit += " LIMIT %d" % rng.choice([0, 1, 3, 10, 50, 500, 5000])
    if rng.random() < 0.4:
        limit += " OFFSET %d" % rng.choice([1, 5, 100, 3999, 5000])
    if rng.random() < 0.2:
        return "SELECT count(*) FROM (SELECT id FROM {table}%s%s) s" % (where, limit or " LIMIT 7")
    outputs = ", ".join(order_output(k) for k in keys)
    return "SELECT %s FROM {table}%s ORDER BY %s%s" % (outputs, where, ", ".join(keys), limit)


def float_part_sizes(rows):
    """How many rows have f8 a number, NaN, NULL (the parts of a float sort)."""
    index = [c.name for c in COLUMNS].index("f8")
    values = [row[index] for row in rows]
    nulls = sum(v is None for v in values)
    nans = sum(v is not None and math.isnan(v) for v in values)
    return len(values) - nulls - nans, nans, nulls


def float_order_cases(rng, clauses, rows, count):
    """ORDER BY f8 queries (a second key sometimes, pushed or not) whose
    OFFSET and LIMIT start or end around the boundaries between the parts
    of the sort, in either direction."""
    numbers, nans, nulls = float_part_sizes(rows)
    boundaries = [0, nulls, numbers, nans, nulls + nans, numbers + nans, len(rows)]
    cases = []
    for _ in range(count):
        keys = ["f8%s%s" % (rng.choice(["", " DESC"]),
                            rng.choice(["", "", " NULLS FIRST", " NULLS LAST"]))]
        if rng.random() < 0.4:
            keys.append(rng.choice(["i4 NULLS FIRST", "i4 DESC NULLS LAST", "id", "ts DESC NULLS LAST", "i8"]))
        where = " WHERE " + clauses.clause(depth=1) if rng.random() < 0.2 else ""
        offset = max(0, rng.choice(boundaries) + rng.randint(-3, 3))
        limit = " LIMIT %d" % rng.choice([1, 3, 5, 10, 40]) if rng.random() < 0.9 else ""
        if offset or rng.random() < 0.3:
            limit += " OFFSET %d" % offset
        outputs = ", ".join(order_output(k) for k in keys)
        cases.append("SELECT %s FROM {table}%s ORDER BY %s%s" % (outputs, where, ", ".join(keys), limit))
    return cases


def run_order_case(session, number, query, report):
    """Compare one ORDER BY/LIMIT/OFFSET query on both tables; return whether
    the foreign one pushed a sort or a limit to MongoDB (2: a sort of a
    float first key, its NaNs read apart)."""
    plan = session.run("EXPLAIN (VERBOSE) " + query.replace("{table}", "ft"))
    pushed = any("MongoDB Sort" in line or "MongoDB Limit" in line or "MongoDB Skip" in line
                 for (line,) in plan.rows or [])
    if any("MongoDB Sort NaNs" in line for (line,) in plan.rows or []):
        pushed = 2
    foreign = session.run(query.replace("{table}", "ft"))
    local = session.run(query.replace("{table}", "lt"))
    problem = None
    if foreign.error or local.error:
        problem = compare(foreign, local)
    elif comparable_rows(foreign.rows) != comparable_rows(local.rows):
        problem = ["foreign: %d rows, local: %d rows" % (len(foreign.rows), len(local.rows))]
        problem += ["first difference at row %d: foreign %r local %r" % (i, f, l)
                    for i, (f, l) in enumerate(zip(foreign.rows, local.rows)) if f != l][:1]
    if problem:
        problem = [query.replace("{table}", "ft"), "pushed: %s" % pushed] + problem
    report.result("order %d" % number, problem)
    return pushed


# Index-table order and NULLs: queries ordered by index keys holding NULL
# entries (missing, null and undefined fields), with every NULLS FIRST/LAST,
# under LIMIT/OFFSET (around where the NULLs start or end), and IS NULL /
# IS NULL OR conditions on the keys; run with plain scans a last resort, so
# that the index tables serve whatever they can.  (column, equality prefix
# on the index table's leading key, or None)
NULL_ORDER_KEYS = [("i4", None), ("ts", None), ("u", None), ("d", "b"), ("i8", "t")]
NULL_ORDER_CASES = 48
MIN_NULL_ORDERED = 20
NULL_ROUTING_CASES = 40
MIN_NULL_ROUTED = 15
# the ORDER BY keys of the (b, d) index table, both ways
NULL_ORDER_PAIRS = ["b%s, d%s" % (x, y) for x in ("", " DESC", " NULLS FIRST", " DESC NULLS LAST")
                    for y in ("", " NULLS FIRST", " DESC", " DESC NULLS LAST")]


def null_condition(clauses, column, kind):
    """An IS NULL or "IS NULL OR" condition on ``column`` (a range, an
    equality, or both bounds), or a range alone (kind "range")."""
    rng = clauses.rng
    col = next(c for c in COLUMNS if c.name == column)

    def lit():
        return clauses.literal(col, clauses.values.value(col))
    if kind == "is null":
        return "%s IS NULL" % column
    arm = rng.choice(["%s > %s", "%s <= %s", "%s = %s", "%s >= %s AND %s < %s"])
    arm = arm % ((column, lit()) if arm.count("%s") == 2 else (column, lit(), column, lit()))
    if kind == "range":
        return arm
    if rng.random() < 0.5:
        return "%s IS NULL OR (%s)" % (column, arm)
    return "(%s) OR %s IS NULL" % (arm, column)


def prefix_condition(clauses, prefix):
    """An equality on the leading key of the index table (b or t)."""
    col = next(c for c in COLUMNS if c.name == prefix)
    value = clauses.values.pool_value(col) if prefix == "b" else clauses.values.value(col)
    return "%s = %s" % (prefix, clauses.literal(col, value) if prefix == "t" else str(value).lower())


def null_order_cases(rng, clauses, rows, count):
    """Queries ordered by index keys with NULL entries, in every NULL order,
    under LIMIT and OFFSET, some with (IS NULL OR) conditions on the key,
    some with the _id (id) after the keys as their tie-break."""
    names = [c.name for c in COLUMNS]
    cases = []
    for number in range(count):
        column, prefix = NULL_ORDER_KEYS[number % len(NULL_ORDER_KEYS)]
        nulls = sum(r[names.index(column)] is None for r in rows)
        where = []
        if prefix:
            where.append(prefix_condition(clauses, prefix))
        roll = rng.random()
        if roll < 0.4:
            where.append("(%s)" % null_condition(clauses, column, rng.choice(["null or", "null or", "range"])))
        elif roll < 0.5:
            where.append("(%s)" % clauses.clause(depth=1))
        if column == "d" and not prefix_used(where) and rng.random() < 0.5:
            keys = rng.choice(NULL_ORDER_PAIRS)
            outputs = "b, d"
        else:
            keys = "%s%s%s" % (column, rng.choice(["", " ASC", " DESC"]),
                               rng.choice(["", " NULLS FIRST", " NULLS LAST"]))
            outputs = column
        if rng.random() < 0.3:
            # the _id as the tie-break: equal keys sorted by their fact's _id
            keys += ", id"
            outputs += ", id"
        limit = " LIMIT %d" % rng.choice([1, 3, 10, 50, 700]) if rng.random() < 0.85 else ""
        offset = rng.choice([0, 0, 1, 5, nulls, len(rows) - nulls]) + rng.randint(-2, 2)
        if offset > 0:
            limit += " OFFSET %d" % offset
        cases.append("SELECT %s FROM {table}%s ORDER BY %s%s" % (
            outputs, " WHERE " + " AND ".join(where) if where else "", keys, limit))
    return cases


def prefix_used(where):
    """Does the query have the equality on b (the (b, d) index's prefix)?"""
    return any(w.startswith("b = ") for w in where)


def null_routing_clauses(rng, clauses, count):
    """IS NULL and IS NULL OR conditions on index keys, alone, after an
    equality on the index table's leading key, or ANDed with a random clause."""
    result = []
    for number in range(count):
        column, prefix = NULL_ORDER_KEYS[number % len(NULL_ORDER_KEYS)]
        clause = null_condition(clauses, column, rng.choice(["is null", "null or", "null or"]))
        if prefix:
            clause = "%s AND (%s)" % (prefix_condition(clauses, prefix), clause)
        if rng.random() < 0.3:
            clause = "(%s) AND (%s)" % (clause, clauses.clause(depth=1))
        result.append(clause)
    return result


def plan_lines(session, sql):
    """The lines of EXPLAIN (VERBOSE) of ``sql`` with plain scans a last resort."""
    session.run("SET idxtable.enable_plain_scan = off")
    plan = session.run("EXPLAIN (VERBOSE) " + sql)
    return [line for (line,) in plan.rows or []]


def run_null_order_case(session, number, query, report):
    """One query of null_order_cases on both tables (plain scans a last
    resort on the foreign one); returns whether an index table gave the
    order.  Only the sort keys are output: rows equal on them may come in
    any order."""
    lines = plan_lines(session, query.replace("{table}", "ft"))
    foreign = session.run(query.replace("{table}", "ft"))
    session.run("RESET idxtable.enable_plain_scan")
    local = session.run(query.replace("{table}", "lt"))
    ordered = any("Index Order:" in line for line in lines)
    problem = None
    if foreign.error or local.error:
        problem = compare(foreign, local)
    elif comparable_rows(foreign.rows) != comparable_rows(local.rows):
        problem = ["foreign: %d rows, local: %d rows" % (len(foreign.rows), len(local.rows))]
        problem += ["first difference at row %d: foreign %r local %r" % (i, f, l)
                    for i, (f, l) in enumerate(zip(foreign.rows, local.rows)) if f != l][:1]
    if problem:
        problem = [query.replace("{table}", "ft"), "index order: %s" % ordered] + \
            [line for line in lines if "Index" in line] + problem
    report.result("null order %d" % number, problem)
    return ordered


def run_null_routing_case(session, number, clause, report):
    """One IS NULL (OR) clause on both tables, the foreign one with plain
    scans a last resort; returns whether an index table served the NULLs."""
    sql = select_sql("ft", clause)
    lines = plan_lines(session, sql)
    foreign = session.run(sql)
    session.run("RESET idxtable.enable_plain_scan")
    problem = compare(foreign, session.run(select_sql("lt", clause)))
    routed = any("Index Cond:" in line and "IS NULL" in line for line in lines)
    if problem:
        problem = ["WHERE " + clause, "routed: %s" % routed] + \
            [line for line in lines if "Index" in line] + problem
    report.result("null routing %d" % number, problem)
    return routed


# an "IS NULL OR" lookup whose range compares with a NULL parameter still
# reads the NULL entries (generic plans: the value is known at execution)
NULL_PARAMETER_CASES = [
    ("(integer)", "i4 IS NULL OR i4 > $1", ["NULL", "100", "-5000"]),
    ("(timestamptz)", "ts IS NULL OR ts <= $1", ["NULL", "'2001-02-03 04:05:06+00'"]),
    ("(integer, integer)", "i4 IS NULL OR (i4 >= $1 AND i4 < $2)", ["NULL, 10", "-10, NULL", "-300, 300"]),
    ("(text, bigint)", "t = $1 AND (i8 IS NULL OR i8 < $2)", ["NULL, 1", "'a', NULL", "'a', 0"]),
]


# parameterized scans: the finds opened again for each outer row (NULL too)
NULL_JOIN_CASES = [
    "SELECT o.x, t.id FROM (VALUES (NULL::int), (0), (900), (-2147483648)) o(x) "
    "JOIN {table} t ON (t.i4 IS NULL OR t.i4 > o.x) ORDER BY 1, 2",
    "SELECT o.x, t.id FROM (VALUES (NULL::timestamptz), ('2001-01-01+00'), ('1970-01-01+00')) o(x) "
    "JOIN {table} t ON (t.ts IS NULL OR t.ts <= o.x) ORDER BY 1, 2",
    "SELECT o.x, t.id, t.i4 FROM (VALUES (NULL::int), (5), (-5)) o(x) "
    "JOIN LATERAL (SELECT * FROM {table} WHERE i4 IS NULL OR i4 >= o.x ORDER BY i4 DESC NULLS LAST LIMIT 4) t "
    "ON true ORDER BY 1, 3, 2",
]


def run_null_join_cases(session, report):
    """NULL_JOIN_CASES on both tables, nested loops over the foreign one with
    plain scans a last resort; the lateral case's rows tie only on NULLs of
    i4 (its ids may differ among those), so only i4 is compared there."""
    routed = 0
    for number, query in enumerate(NULL_JOIN_CASES):
        for setting in ("enable_hashjoin", "enable_mergejoin", "idxtable.enable_plain_scan"):
            session.run("SET %s = off" % setting)
        plan = session.run("EXPLAIN " + query.replace("{table}", "ft"))
        foreign = session.run(query.replace("{table}", "ft"))
        for setting in ("enable_hashjoin", "enable_mergejoin", "idxtable.enable_plain_scan"):
            session.run("RESET %s" % setting)
        local = session.run(query.replace("{table}", "lt"))
        routed += any("Index Cond:" in line and "IS NULL" in line for (line,) in plan.rows or [])
        if "LATERAL" in query and foreign.rows and local.rows:
            foreign.rows = [(r[0], r[2]) for r in foreign.rows]
            local.rows = [(r[0], r[2]) for r in local.rows]
        problem = compare(foreign, local)
        if problem:
            problem = [query.replace("{table}", "ft")] + [line for (line,) in plan.rows or []] + problem
        report.result("null join %d" % number, problem)
    report.result("null join routing", None if routed == len(NULL_JOIN_CASES) else
                  ["only %d of %d joins went through an index table" % (routed, len(NULL_JOIN_CASES))])


def run_null_parameter_cases(session, report, cases=NULL_PARAMETER_CASES):
    """Generic plans of IS NULL OR clauses executed with NULL and other
    values, plain scans a last resort; each must equal the local table's."""
    for number, (declaration, clause, executions) in enumerate(cases):
        problem = None
        session.run("SET plan_cache_mode = force_generic_plan")
        session.run("SET idxtable.enable_plain_scan = off")
        for name, table in (("nf", "ft"), ("nl", "lt")):
            outcome = session.run("PREPARE %s%s AS %s" % (name, declaration, select_sql(table, clause)))
            if outcome.error:
                problem = (problem or []) + ["PREPARE on %s failed: %s" % (table, outcome.error)]
        plan = session.run("EXPLAIN EXECUTE nf(%s)" % executions[0])
        if problem is None and not any("IS NULL" in line for (line,) in plan.rows or []
                                       if "Index Cond:" in line):
            problem = ["not routed through an index table"] + [line for (line,) in plan.rows or []]
        for args in executions if problem is None else []:
            difference = compare(session.run("EXECUTE nf(%s)" % args), session.run("EXECUTE nl(%s)" % args))
            if difference:
                problem = ["EXECUTE (%s)" % args] + difference
                break
        session.run("DEALLOCATE ALL")
        session.run("RESET idxtable.enable_plain_scan")
        session.run("RESET plan_cache_mode")
        if problem:
            problem = ["PREPARE %s AS ... WHERE %s" % (declaration, clause)] + problem
        report.result("null parameter %d" % number, problem)


def run_null_cases(session, report, args, nulls, clock):
    """The index-table order and NULL families, with their coverage checks."""
    null_orders, null_clauses = nulls
    ordered = sum(run_null_order_case(session, number, query, report)
                  for number, query in enumerate(null_orders))
    clock.charge("null order")
    routed = sum(run_null_routing_case(session, number, clause, report)
                 for number, clause in enumerate(null_clauses))
    run_null_parameter_cases(session, report)
    run_null_join_cases(session, report)
    clock.charge("null routing")
    print("null order: %d of %d queries ordered by an index table with NULL entries; "
          "%d of %d IS NULL (OR) clauses routed through one" % (ordered, len(null_orders), routed, len(null_clauses)))
    want_ordered = MIN_NULL_ORDERED * args.null_orders // NULL_ORDER_CASES
    want_routed = MIN_NULL_ROUTED * args.null_orders // NULL_ORDER_CASES
    report.result("null order coverage", None if ordered >= want_ordered else
                  ["only %d queries were ordered by an index table, need %d" % (ordered, want_ordered)])
    report.result("null routing coverage", None if routed >= want_routed else
                  ["only %d IS NULL (OR) clauses were routed, need %d" % (routed, want_routed)])


class Clock:
    """Where the run's time goes, per family of cases: wall seconds and the
    CPU seconds of the test server's process, of PostgreSQL (the postmaster
    and its backends) and of this script (read from /proc; zero where a
    process is not found, as with a given MONGO_URI)."""

    def __init__(self):
        env_dir = os.environ.get("IDXTABLE_ENV_DIR", "")
        self.pids = [self.read_pid(os.path.join(env_dir, "mongo.pid")),
                     self.read_pid(os.path.join(env_dir, "pg", "data", "postmaster.pid")), os.getpid()]
        self.totals = {}
        self.last = self.sample()

    @staticmethod
    def read_pid(path):
        """The first line of a pid file as a number, or None."""
        try:
            with open(path) as f:
                return int(f.readline())
        except (OSError, ValueError):
            return None

    @staticmethod
    def cpu(pid):
        """CPU seconds of a process and its waited-for children (0 if gone)."""
        try:
            with open("/proc/%d/stat" % pid) as f:
                fields = f.read().rsplit(")", 1)[1].split()
            return sum(int(v) for v in fields[11:15]) / os.sysconf("SC_CLK_TCK")
        except (OSError, TypeError, ValueError, IndexError):
            return 0.0

    def sample(self):
        """Now: wall time, then each process's CPU seconds (for the
        postmaster, its live backends' too)."""
        values = [time.monotonic()] + [self.cpu(pid) for pid in self.pids]
        try:
            with open("/proc/%d/task/%d/children" % (self.pids[1], self.pids[1])) as f:
                values[2] += sum(self.cpu(int(child)) for child in f.read().split())
        except (OSError, TypeError, ValueError):
            pass
        return values

    def charge(self, family):
        """Charge the time since the last charge to ``family``."""
        now = self.sample()
        total = self.totals.setdefault(family, [0.0] * len(now))
        for i, (a, b) in enumerate(zip(self.last, now)):
            total[i] += b - a
        self.last = now

    def print(self):
        """One line per family, the most wall time first."""
        for family, (wall, server, pg, me) in sorted(self.totals.items(), key=lambda kv: -kv[1][0]):
            print("time %6.1f s wall; CPU s: test server %6.1f, PostgreSQL %6.1f, this test %5.1f: %s"
                  % (wall, server, pg, me, family))


def parse_args():
    """Command line: sizes of the run, and --dry-run."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=4000, help="number of documents (default 4000)")
    parser.add_argument("--clauses", type=int, default=400, help="number of WHERE clauses (default 400)")
    parser.add_argument("--prepared", type=int, default=50, help="number of prepared statements (default 50)")
    parser.add_argument("--orders", type=int, default=ORDER_CASES,
                        help="number of ORDER BY/LIMIT/OFFSET queries (default %d)" % ORDER_CASES)
    parser.add_argument("--aggregates", type=int, default=80,
                        help="number of aggregate queries (default 80)")
    parser.add_argument("--null-orders", type=int, default=NULL_ORDER_CASES,
                        help="number of queries ordered by index keys with NULLs, and of IS NULL (OR) "
                        "clauses routed (default %d)" % NULL_ORDER_CASES)
    parser.add_argument("--index-groupings", type=int, default=30,
                        help="number of GROUP BY queries of an index table's key (default 30)")
    parser.add_argument("--text-keys", type=int, default=120,
                        help="number of queries on text keys of strings and ObjectIds (default 120)")
    parser.add_argument("--dry-run", action="store_true",
                        help="print sample documents, clauses and prepared cases; touch no server")
    return parser.parse_args()


def generate(seed, args):
    """Everything random, derived from ``seed`` alone: docs, rows, cases."""
    rng = random.Random(seed)
    docs = DocumentGenerator(rng).documents(args.docs)
    rows = sorted((expected_row(d) for d in docs), key=lambda r: r[0])
    values = LiteralValues(rng, rows)
    clauses = ClauseGenerator(rng, values)
    where = [clauses.clause() for _ in range(args.clauses)]
    # clauses of the shape index routing serves, so that it is exercised
    where += [clauses.keyed_clause() for _ in range(args.clauses // 8)]
    where += OVERFLOW_CLAUSES
    prepared_generator = PreparedGenerator(rng, values)
    prepared = [prepared_generator.case() for _ in range(args.prepared)]
    orders = [order_case(rng, clauses) for _ in range(args.orders)]
    aggregates = aggregate_cases(rng, clauses, args.aggregates)
    float_rng = random.Random(seed + 2)
    orders += float_order_cases(float_rng, ClauseGenerator(float_rng, values), rows,
                                FLOAT_ORDER_CASES * args.orders // ORDER_CASES)
    null_rng = random.Random(seed + 5)
    null_clauses = ClauseGenerator(null_rng, values)
    nulls = (null_order_cases(null_rng, null_clauses, rows, args.null_orders),
             null_routing_clauses(null_rng, null_clauses, NULL_ROUTING_CASES * args.null_orders // NULL_ORDER_CASES))
    index_rng = random.Random(seed + 3)
    groupings = index_grouping_cases(index_rng, ClauseGenerator(index_rng, values), args.index_groupings)
    return docs, rows, where, prepared, orders, aggregates, nulls, groupings


def dry_run(docs, rows, where, prepared, orders):
    """Show what would be run, without any server."""
    for doc, row in list(zip(docs, (expected_row(d) for d in docs)))[:3]:
        print("document %r\n  reads as %s" % (doc, show_row(row)))
    for clause in where[:10]:
        print("WHERE " + clause)
    for case in prepared[:3]:
        print("PREPARE q%s AS ... WHERE %s" % (case.declaration(), case.clause))
        for args in case.executions[:2]:
            print("  EXECUTE q(%s)" % ", ".join(args))
    for query in orders[:5]:
        print(query.replace("{table}", "ft"))


def main():
    """Generate, load, run every case, and print the summary line."""
    args = parse_args()
    seed = int(os.environ.get("DIFF_SEED") or random.SystemRandom().randrange(2 ** 32))
    print("differential: seed %d (repeat with DIFF_SEED=%d)" % (seed, seed), flush=True)
    docs, rows, where, prepared, orders, aggregates, nulls, groupings = generate(seed, args)
    if args.dry_run:
        dry_run(docs, rows, where, prepared, orders + nulls[0] + nulls[1])
        return 0

    report = Report(seed)
    started = time.monotonic()
    clock = Clock()
    try:
        load_mongo(docs)
        text_keys = differential_textkeys.load(DATABASE, seed + 3)
        create_database()
        session = Session(DATABASE)
        create_tables(session.conn, rows)
        differential_textkeys.create_tables(session.conn, pg_fixture)
    except Exception as exc:  # any setup failure is one failed case
        report.result("setup", ["%s: %s" % (type(exc).__name__, exc)])
        print(report.summary("differential"))
        return 1
    print("loaded %d documents in %.1fs" % (len(docs), time.monotonic() - started), flush=True)
    clock.charge("load")

    pushed = routed = 0
    for number, clause in enumerate(["true"] + where):
        was_pushed, was_routed = run_clause_case(session, number, clause, report)
        pushed += was_pushed
        routed += was_routed
    clock.charge("clauses")
    ratio = pushed / max(len(where), 1)
    print("pushdown: %d of %d clauses sent a filter to MongoDB (%.0f%%)"
          % (pushed, len(where), 100 * ratio))
    print("routing: %d of %d clauses went through an index table" % (routed, len(where)))
    want_routed = max(3, MIN_ROUTED * args.clauses // 400)  # (MIN_ROUTED is for the default 400)
    report.result("routing coverage", None if routed >= want_routed else
                  ["only %d clauses were routed through an index table, need %d"
                   % (routed, want_routed)])
    report.result("pushdown coverage", None if ratio >= MIN_PUSHDOWN_RATIO else
                  ["only %.0f%% of the clauses were pushed down, need %.0f%%"
                   % (100 * ratio, 100 * MIN_PUSHDOWN_RATIO)])

    index_ordered = 0
    phase_started = time.monotonic()
    for number, query in enumerate(collated_order_cases(random.Random(seed + 1))):
        index_ordered += run_collated_order_case(session, number, query, report)
    print("collated order: %d queries ordered by an index table (%.1fs)"
          % (index_ordered, time.monotonic() - phase_started))
    clock.charge("collated order")
    report.result("collated order coverage", None if index_ordered >= 6 else
                  ["only %d queries on ti were ordered by an index table, need 6" % index_ordered])

    plan_counts = [0, 0]
    for number, case in enumerate(prepared):
        run_prepared_case(session, number, case, report, plan_counts)
    clock.charge("prepared")
    print("prepared: %d generic and %d custom plan executions" % tuple(plan_counts))

    order_results = []
    for number, query in enumerate(orders):
        order_results.append(run_order_case(session, number, query, report))
        clock.charge("order" if number < args.orders else "float order")
    run_null_cases(session, report, args, nulls, clock)

    order_pushed = sum(1 for r in order_results if r)
    float_pushed = order_results.count(2)
    print("order: %d of %d ORDER BY/LIMIT/OFFSET queries pushed a sort, limit or skip, %d of them a float sort"
          % (order_pushed, len(orders), float_pushed))
    report.result("float order pushdown coverage",
                  None if float_pushed >= min(MIN_FLOAT_ORDER_PUSHED, args.orders) else
                  ["only %d float sorts were pushed, need %d" % (float_pushed, MIN_FLOAT_ORDER_PUSHED)])
    report.result("order pushdown coverage", None if order_pushed >= min(MIN_ORDER_PUSHED, len(orders)) else
                  ["only %d ORDER BY/LIMIT/OFFSET queries were pushed, need %d"
                   % (order_pushed, MIN_ORDER_PUSHED)])

    phase_started = time.monotonic()
    text_pushed = 0
    text_cases = differential_textkeys.cases(seed + 4, text_keys, args.text_keys)
    for number, case in enumerate(text_cases):
        text_pushed += differential_textkeys.run_case(session, number, case, report, compare)
    clock.charge("text keys")
    print("text keys: %d of %d queries on text keys of strings and ObjectIds pushed a merged sort or a limit "
          "(%.1fs)" % (text_pushed, len(text_cases), time.monotonic() - phase_started))
    report.result("text key pushdown coverage",
                  None if text_pushed >= differential_textkeys.MIN_PUSHED * len(text_cases) else
                  ["only %d of %d text key queries were pushed" % (text_pushed, len(text_cases))])

    agg_results = []
    for number, sql in enumerate(aggregates):
        agg_results.append((run_aggregate_case(session, number, sql, report), " ORDER BY " in sql))
        clock.charge("ordered aggregate" if " ORDER BY " in sql else "aggregate")
    agg_pushed = sum(pushed for pushed, _ in agg_results)
    limited = [" LIMIT " in sql and " ORDER BY " not in sql for sql in aggregates]
    print("aggregates: %d of %d pushed as an aggregate pipeline, %d of %d ordered ones with their $sort, "
          "%d of %d limited unordered ones with their $limit"
          % (agg_pushed, len(aggregates), sum(p for p, o in agg_results if o), sum(o for _, o in agg_results),
             sum(p for (p, _), lim in zip(agg_results, limited) if lim), sum(limited)))
    report.result("aggregate pushdown coverage",
                  None if agg_pushed >= MIN_AGG_PUSHED * len(aggregates) else
                  ["only %d of %d aggregate queries were pushed" % (agg_pushed, len(aggregates))])

    index_counts = []
    for number, sql in enumerate(groupings):
        run_aggregate_case(session, number, sql, report, index_counts)
        clock.charge("index grouping")
    print("index groupings: %d of %d counted per key from an index table"
          % (sum(index_counts), len(groupings)))
    report.result("index grouping coverage",
                  None if sum(index_counts) >= MIN_INDEX_GROUPED * len(groupings) else
                  ["only %d of %d GROUP BY queries of an index table's key were answered from it"
                   % (sum(index_counts), len(groupings))])
    session.close()
    clock.print()
    print("elapsed %.1fs" % (time.monotonic() - started))
    print(report.summary("differential"))
    return 1 if report.failed else 0


if __name__ == "__main__":
    sys.exit(main())
