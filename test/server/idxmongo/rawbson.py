"""A BSON encoder for change events, byte for byte what codec.encode writes for the same values.

pymongo 3.11's C encoder costs about 6 µs per call even for {"_id": 5} (it checks every value against
its type registry and the Mapping ABC), and a change event is several small documents around the
changed one: encoding events was most of what a change stream's getMore cost this server. This
encoder writes the common types with struct and hands anything else (Decimal128, Regex, Code, bytes,
SON, OutOfRangeDate inside a list...) to codec.encode, value by value. Like bson.encode for a nested
document it never moves `_id` first, so callers encode an event as a nested document (as
changestream.py did with encode({"e": doc})), keeping mongod's field order.
"""

import datetime
import struct

from bson.binary import Binary
from bson.int64 import Int64
from bson.objectid import ObjectId
from bson.raw_bson import RawBSONDocument
from bson.timestamp import Timestamp

from .codec import OutOfRangeDate, encode

_INT32 = struct.Struct("<i")
_INT64 = struct.Struct("<q")
_DOUBLE = struct.Struct("<d")
_TIMESTAMP = struct.Struct("<II")
_EPOCH = datetime.datetime(1970, 1, 1)
_MS = datetime.timedelta(milliseconds=1)


def document(doc, memo=None):
    """The BSON of a dict (keys in their order, `_id` not moved). `memo` (kept by the caller) maps
    field names to (value, element) of the last value written under that name: an element is reused
    when the value is that same object (the memo keeps it alive, so its identity cannot be reused), as
    a transaction's lsid recurs in each of its change events. Strings, integers and sub-documents, most
    of what a stored document holds, are written in the loop itself; every other type by its writer."""
    parts = []
    append = parts.append
    extend = parts.extend
    for key, value in doc.items():
        if memo is not None and key in memo:
            last, element = memo[key]
            if last is not value:
                element = _element(key, value)
                memo[key] = (value, element)
            append(element)
            continue
        name = _NAMES.get(key)
        if name is None:
            name = _name(key)
            if name is None:  # not a string, or holding a NUL: as bson writes (or refuses) it
                append(_fallback(key, value))
                continue
        kind = type(value)
        if kind is str:
            try:
                data = value.encode("utf-8")
            except UnicodeEncodeError:  # a lone surrogate: bson refuses it, and so does the fallback
                append(_fallback(key, value))
                continue
            extend((b"\x02", name, _INT32.pack(len(data) + 1), data, b"\x00"))
        elif kind is int and -2147483648 <= value <= 2147483647:
            extend((b"\x10", name, _INT32.pack(value)))
        elif kind is dict:
            extend((b"\x03", name, document(value)))
        else:
            writer = _WRITERS.get(kind)
            append(_fallback(key, value) if writer is None else writer(key, value))
    body = b"".join(parts)
    return _INT32.pack(len(body) + 5) + body + b"\x00"


# The element names of a document's fields (the name's UTF-8 and its NUL), as they recur from one
# document to the next; past NAMES_MAX names the cache starts again.
_NAMES = {}
NAMES_MAX = 10000


def _name(key):
    """The element name of a field (cached), or None for a key that is not a string or holds a NUL
    (bson then refuses it, or writes what it makes of it)."""
    if type(key) is not str or "\x00" in key:
        return None
    name = key.encode() + b"\x00"  # a lone surrogate raises here, as in the writers
    if len(_NAMES) >= NAMES_MAX:
        _NAMES.clear()
    _NAMES[key] = name
    return name


def element(key, value):
    """One element, as document() writes it in a document."""
    return _element(key, value)


def _element(key, value):
    """One element, written here for the common types, by codec.encode otherwise."""
    writer = _WRITERS.get(type(value))
    if writer is None or type(key) is not str or "\x00" in key:
        return _fallback(key, value)
    return writer(key, value)


def _str(key, value):
    try:
        data = value.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: bson refuses it, and so does the fallback
        return _fallback(key, value)
    return b"\x02" + key.encode() + b"\x00" + _INT32.pack(len(data) + 1) + data + b"\x00"


def _fallback(key, value):
    """codec.encode's element for a value this module does not write (it raises as bson does)."""
    return encode({key: value})[4:-1]


def _int(key, value):
    if -2147483648 <= value <= 2147483647:
        return b"\x10" + key.encode() + b"\x00" + _INT32.pack(value)
    if -9223372036854775808 <= value <= 9223372036854775807:
        return b"\x12" + key.encode() + b"\x00" + _INT64.pack(value)
    return _fallback(key, value)  # OverflowError, as bson raises it


def _int64(key, value):
    return b"\x12" + key.encode() + b"\x00" + _INT64.pack(value)


def _bool(key, value):
    return b"\x08" + key.encode() + (b"\x00\x01" if value else b"\x00\x00")


def _float(key, value):
    return b"\x01" + key.encode() + b"\x00" + _DOUBLE.pack(value)


def _none(key, value):
    return b"\x0a" + key.encode() + b"\x00"


def _timestamp(key, value):
    return b"\x11" + key.encode() + b"\x00" + _TIMESTAMP.pack(value.inc, value.time)


def _datetime(key, value):
    if value.tzinfo is not None:
        return _fallback(key, value)
    return b"\x09" + key.encode() + b"\x00" + _INT64.pack((value - _EPOCH) // _MS)


def _out_of_range_date(key, value):
    return b"\x09" + key.encode() + b"\x00" + _INT64.pack(value.millis)


def _binary(key, value):
    if value.subtype == 2:  # the old binary subtype carries a second length
        return _fallback(key, value)
    return b"\x05" + key.encode() + b"\x00" + _INT32.pack(len(value)) + bytes((value.subtype,)) + bytes(value)


def _object_id(key, value):
    return b"\x07" + key.encode() + b"\x00" + value.binary


def _dict(key, value):
    return b"\x03" + key.encode() + b"\x00" + document(value)


def _raw(key, value):
    return b"\x03" + key.encode() + b"\x00" + value.raw


def _array(key, value):
    body = b"".join([_element(str(i), item) for i, item in enumerate(value)])
    return b"\x04" + key.encode() + b"\x00" + _INT32.pack(len(body) + 5) + body + b"\x00"


_WRITERS = {str: _str, int: _int, Int64: _int64, bool: _bool, float: _float, type(None): _none, Timestamp: _timestamp,
            datetime.datetime: _datetime, OutOfRangeDate: _out_of_range_date, Binary: _binary,
            ObjectId: _object_id, dict: _dict, RawBSONDocument: _raw, list: _array, tuple: _array}
