"""BSON encoding/decoding with pymongo's C codec, plus a fallback for dates beyond Python's datetime and for
the deprecated `undefined`.

pymongo 3.11 cannot decode BSON dates before year 1 or after year 9999 (InvalidBSON), yet BSON allows any
int64 of milliseconds (PostgreSQL timestamps reach year 294276). When the fast decoder refuses a document,
it is decoded again element by element, turning such dates into `OutOfRangeDate`; the encoder writes them
back as BSON dates. It also decodes `undefined` (type 0x06) as None, so a document holding one is decoded
element by element too, into the `UNDEFINED` marker, which the encoder writes back as undefined: the server
stores undefined as mongod does, and the matcher (matcher.py) matches it as mongod 8.0 does. Only documents
holding such values take the slow path (a document is walked only if it holds a 0x06 byte at all).
"""

import datetime
import struct

import bson
from bson.binary import UuidRepresentation
from bson.codec_options import CodecOptions
from bson.errors import InvalidBSON, InvalidDocument

CODEC = CodecOptions(document_class=dict, tz_aware=False, uuid_representation=UuidRepresentation.UNSPECIFIED)
EPOCH = datetime.datetime(1970, 1, 1)
_MIN_MS = -62135596800000  # 0001-01-01
_MAX_MS = 253402300799999  # 9999-12-31 23:59:59.999


class OutOfRangeDate:
    """A BSON date (milliseconds since the epoch) that Python's datetime cannot hold."""

    def __init__(self, millis):
        self.millis = millis

    def __eq__(self, other):
        return isinstance(other, OutOfRangeDate) and other.millis == self.millis

    def __hash__(self):
        return hash(("OutOfRangeDate", self.millis))

    def __repr__(self):
        return "OutOfRangeDate(%d)" % self.millis


class Undefined:
    """The BSON `undefined` value (one instance, UNDEFINED; copies are the same object)."""

    def __repr__(self):
        return "UNDEFINED"

    def __copy__(self):
        return self

    def __deepcopy__(self, memo):
        return self

    def __reduce__(self):
        return "UNDEFINED"


UNDEFINED = Undefined()


def date_millis(value):
    """Milliseconds since the epoch of a datetime or OutOfRangeDate."""
    if isinstance(value, OutOfRangeDate):
        return value.millis
    if value.tzinfo is not None:
        value = value.astimezone(datetime.timezone.utc).replace(tzinfo=None)
    return (value - EPOCH) // datetime.timedelta(milliseconds=1)


def decode(data):
    """Decode one BSON document."""
    try:
        doc = bson.decode(data, codec_options=CODEC)
    except InvalidBSON:
        return _read_document(data, 0, False)
    if b"\x06" in data and _has_undefined(data, 0):
        return _read_document(data, 0, False)
    return doc


def decode_all(data):
    """Decode concatenated BSON documents (an OP_MSG document sequence)."""
    if b"\x06" not in data:
        try:
            return bson.decode_all(data, CODEC)
        except InvalidBSON:
            pass
    docs, pos = [], 0
    while pos < len(data):
        size = struct.unpack_from("<i", data, pos)[0]
        docs.append(decode(data[pos:pos + size]))
        pos += size
    return docs


def encode(doc):
    """Encode one document."""
    try:
        return bson.encode(doc, codec_options=CODEC)
    except InvalidDocument:
        return _write_document(doc)


def _string_length(data, pos):
    """Length of an int32-prefixed string element value."""
    return 4 + struct.unpack_from("<i", data, pos)[0]


def _cstring_length(data, pos):
    """Length of a NUL-terminated string including the NUL."""
    return data.index(b"\x00", pos) - pos + 1


_FIXED_LENGTHS = {0x01: 8, 0x06: 0, 0x07: 12, 0x08: 1, 0x0A: 0, 0x10: 4, 0x11: 8, 0x12: 8, 0x13: 16,
                  0x7F: 0, 0xFF: 0}


def _value_length(kind, data, pos):
    """Length of an element value of BSON type `kind` starting at `pos`."""
    if kind in _FIXED_LENGTHS:
        return _FIXED_LENGTHS[kind]
    if kind in (0x02, 0x0D, 0x0E):
        return _string_length(data, pos)
    if kind == 0x05:
        return 5 + struct.unpack_from("<i", data, pos)[0]
    if kind == 0x0B:
        first = _cstring_length(data, pos)
        return first + _cstring_length(data, pos + first)
    if kind == 0x0C:
        return _string_length(data, pos) + 12
    if kind == 0x0F:
        return struct.unpack_from("<i", data, pos)[0]
    raise InvalidBSON("unknown BSON type 0x%02x" % kind)


def _has_undefined(data, pos):
    """Whether the document (or array) at `pos` holds an undefined element, at any depth."""
    end = pos + struct.unpack_from("<i", data, pos)[0] - 1
    pos += 4
    while pos < end:
        kind = data[pos]
        value_pos = pos + 1 + _cstring_length(data, pos + 1)
        if kind == 0x06:
            return True
        if kind in (0x03, 0x04) and _has_undefined(data, value_pos):
            return True
        if kind in (0x03, 0x04):
            pos = value_pos + struct.unpack_from("<i", data, value_pos)[0]
        else:
            pos = value_pos + (8 if kind == 0x09 else _value_length(kind, data, value_pos))
    return False


def _read_document(data, pos, as_array):
    """Element-by-element decoding of the document (or array) at `pos`."""
    end = pos + struct.unpack_from("<i", data, pos)[0] - 1
    pos += 4
    out = {}
    while pos < end:
        kind = data[pos]
        name_len = _cstring_length(data, pos + 1)
        name = data[pos + 1:pos + name_len].decode("utf-8")
        value_pos = pos + 1 + name_len
        if kind in (0x03, 0x04):
            length = struct.unpack_from("<i", data, value_pos)[0]
            value = _read_document(data, value_pos, kind == 0x04)
        elif kind == 0x09:
            length = 8
            millis = struct.unpack_from("<q", data, value_pos)[0]
            in_range = _MIN_MS <= millis <= _MAX_MS
            value = EPOCH + datetime.timedelta(milliseconds=millis) if in_range else OutOfRangeDate(millis)
        elif kind == 0x06:
            length, value = 0, UNDEFINED
        else:
            length = _value_length(kind, data, value_pos)
            element = data[pos:value_pos + length]
            value = bson.decode(struct.pack("<i", len(element) + 5) + element + b"\x00", codec_options=CODEC)[name]
        out[name] = value
        pos = value_pos + length
    return list(out.values()) if as_array else out


def _write_element(name, value):
    """Encode one element, writing OutOfRangeDate values as BSON dates."""
    key = name.encode("utf-8") + b"\x00"
    if isinstance(value, OutOfRangeDate):
        return b"\x09" + key + struct.pack("<q", value.millis)
    if value is UNDEFINED:
        return b"\x06" + key
    if isinstance(value, dict):
        return b"\x03" + key + _write_document(value)
    if isinstance(value, (list, tuple)):
        return b"\x04" + key + _write_document({str(i): v for i, v in enumerate(value)})
    return bson.encode({name: value}, codec_options=CODEC)[4:-1]


def _write_document(doc):
    """Element-by-element encoding of a document."""
    body = b"".join(_write_element(k, v) for k, v in doc.items())
    return struct.pack("<i", len(body) + 5) + body + b"\x00"
