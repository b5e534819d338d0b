"""MongoDB's BSON comparison order as Python sort keys, and dotted-path value extraction.

`sort_key(value)` maps any decoded BSON value to a tuple whose Python ordering is MongoDB's ordering:
MinKey < undefined < null < numbers < strings < documents < arrays < binData < ObjectId < bool < date < timestamp
< regex < code < MaxKey. Numbers of every type compare by value, so 1, 1.0 and Int64(1) give equal (and
equally hashing) keys, which is what `_id` uniqueness and index lookups need.
"""

import datetime
import decimal
import math
import uuid

from bson.binary import Binary
from bson.code import Code
from bson.dbref import DBRef
from bson.decimal128 import Decimal128
from bson.max_key import MaxKey
from bson.min_key import MinKey
from bson.objectid import ObjectId
from bson.raw_bson import RawBSONDocument
from bson.regex import Regex
from bson.timestamp import Timestamp

from .codec import UNDEFINED, OutOfRangeDate, date_millis

MINKEY, NULL, NUMBER, STRING, DOCUMENT, ARRAY, BINARY, OBJECTID, BOOL, DATE, TIMESTAMP, REGEX, CODE = range(13)
MAXKEY = 100

# the type bracket of each `$type` name ("array" has none: an index holds an array's elements)
TYPE_BRACKETS = {
    "minKey": MINKEY, "undefined": MINKEY, "null": NULL, "double": NUMBER, "int": NUMBER, "long": NUMBER,
    "decimal": NUMBER, "number": NUMBER, "string": STRING, "symbol": STRING, "object": DOCUMENT,
    "binData": BINARY, "objectId": OBJECTID, "bool": BOOL, "date": DATE, "timestamp": TIMESTAMP,
    "regex": REGEX, "dbPointer": DOCUMENT, "javascript": CODE, "javascriptWithScope": CODE, "maxKey": MAXKEY,
}
NULL_KEY = (NULL, 1)
UNDEFINED_KEY = (MINKEY, 1)  # mongod's canonical type 0: after MinKey, before null, equal to nothing else
EMPTY_ARRAY_SORT_KEY = (NULL, 0)  # MongoDB sorts [] before null
BELOW_ALL = (-1,)
ABOVE_ALL = (1000,)


class _Missing:
    """Marker for a path that does not exist in a document (indexed and compared as null)."""

    def __repr__(self):
        return "MISSING"


MISSING = _Missing()


def _number_key(value):
    """Key of a numeric value: NaN sorts before every other number, as in MongoDB."""
    if isinstance(value, Decimal128):
        value = value.to_decimal()
        if value.is_nan():
            return (NUMBER, 0)
        return (NUMBER, 1, value)
    if isinstance(value, float) and math.isnan(value):
        return (NUMBER, 0)
    return (NUMBER, 1, value)


def _regex_flags(flags):
    """Regex flags as a sorted letter string (bson stores them as an int bit mask)."""
    if isinstance(flags, str):
        return "".join(sorted(flags))
    letters = {2: "i", 4: "l", 8: "m", 16: "s", 32: "u", 64: "x"}
    return "".join(sorted(letter for bit, letter in letters.items() if flags & bit))


def sort_key(value):
    """The MongoDB-order sort key of one BSON value (a whole array compares element by element)."""
    if value is None or value is MISSING:
        return NULL_KEY
    if value is UNDEFINED:
        return UNDEFINED_KEY
    if isinstance(value, bool):
        return (BOOL, value)
    if isinstance(value, (int, float, Decimal128)):
        return _number_key(value)
    if isinstance(value, Code):
        return (CODE, str(value))
    if isinstance(value, str):
        return (STRING, value)
    if isinstance(value, (dict, RawBSONDocument)):  # (a shard's reply, through a router, holds raw ones)
        parts = []
        for k, v in value.items():
            vk = sort_key(v)
            parts.append((vk[0], k, vk))
        return (DOCUMENT, tuple(parts))
    if isinstance(value, (list, tuple)):
        return (ARRAY, tuple(sort_key(v) for v in value))
    if isinstance(value, ObjectId):
        return (OBJECTID, value.binary)
    if isinstance(value, Binary):
        return (BINARY, len(value), value.subtype, bytes(value))
    if isinstance(value, bytes):
        return (BINARY, len(value), 0, value)
    if isinstance(value, uuid.UUID):
        return (BINARY, 16, 4, value.bytes)
    if isinstance(value, (datetime.datetime, OutOfRangeDate)):
        return (DATE, date_millis(value))
    if isinstance(value, Timestamp):
        return (TIMESTAMP, value.time, value.inc)
    if isinstance(value, Regex):
        return (REGEX, value.pattern, _regex_flags(value.flags))
    if hasattr(value, "pattern") and hasattr(value, "flags"):  # compiled re.Pattern
        return (REGEX, value.pattern, "")
    if isinstance(value, MinKey):
        return (MINKEY,)
    if isinstance(value, MaxKey):
        return (MAXKEY,)
    if isinstance(value, DBRef):
        return sort_key(value.as_doc())
    if isinstance(value, decimal.Decimal):
        return _number_key(value)
    raise TypeError("cannot order value of type %s" % type(value).__name__)


def bracket_of(value):
    """The canonical type bracket of a value (its sort key's first element)."""
    return sort_key(value)[0]


def path_values(value, parts):
    """Values reached by a dotted path (already split), expanding arrays along the way.

    Missing fields yield MISSING. An array met in the middle of the path is traversed element by element
    (and a numeric component may also address an element), like MongoDB's multikey key generation.
    Returns (values, crossed_array).
    """
    if not parts:
        return [value], False
    head, rest = parts[0], parts[1:]
    if isinstance(value, (dict, RawBSONDocument)):
        if head in value:
            return path_values(value[head], rest)
        return [MISSING], False
    if isinstance(value, list):
        out = []
        if head.isdigit() and int(head) < len(value):
            out.extend(path_values(value[int(head)], rest)[0])
        for element in value:
            if isinstance(element, (dict, RawBSONDocument)):
                out.extend(path_values(element, parts)[0])
        if not out:
            out.append(MISSING)
        return out, True
    return [MISSING], False


def leaf_values(doc, path):
    """All scalar values a dotted path stands for in `doc`, arrays at the leaf expanded.

    Returns (values, is_multikey). An empty leaf array gives MISSING (indexed as null), so that an index
    still holds one entry for the document.
    """
    values, multikey = path_values(doc, path.split("."))
    out = []
    for v in values:
        if isinstance(v, list):
            multikey = True
            out.extend(v if v else [MISSING])
        else:
            out.append(v)
    return out, multikey


def doc_sort_key(doc, path, descending):
    """Key that sorts documents on one field as MongoDB's sort does.

    For an array MongoDB uses its smallest element ascending and its largest descending; an empty array sorts
    before null.
    """
    values, _ = path_values(doc, path.split("."))
    keys = []
    for v in values:
        if isinstance(v, list) and not v:
            keys.append(EMPTY_ARRAY_SORT_KEY)
        elif isinstance(v, list):
            keys.extend(sort_key(e) for e in v)
        else:
            keys.append(sort_key(v))
    return max(keys) if descending else min(keys)


def sort_documents(docs, sort_spec):
    """Sort `docs` in place by a list of (path, direction) pairs with MongoDB semantics (stable)."""
    for path, direction in reversed(sort_spec):
        descending = direction < 0
        docs.sort(key=lambda d: doc_sort_key(d, path, descending), reverse=descending)


def format_value(value):
    """Render a value like mongod's error messages do (for duplicate-key messages)."""
    if value is None or value is MISSING:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return '"%s"' % value.replace("\\", "\\\\").replace('"', '\\"')
    if isinstance(value, ObjectId):
        return "ObjectId('%s')" % value
    if isinstance(value, dict):
        return format_document(value)
    if isinstance(value, list):
        return "[ %s ]" % ", ".join(format_value(v) for v in value) if value else "[]"
    if isinstance(value, (datetime.datetime, OutOfRangeDate)):
        return "new Date(%d)" % date_millis(value)
    return str(value)


def format_document(doc):
    """Render a document as `{ a: 1, b: "x" }`."""
    if not doc:
        return "{}"
    return "{ %s }" % ", ".join("%s: %s" % (k, format_value(v)) for k, v in doc.items())
