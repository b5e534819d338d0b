"""Change events over the BSON size limit, and mongod 7.0's `$changeStreamSplitLargeEvent`.

mongod serializes each change event before it returns it; an event over BSONObjMaxInternalSize
(16 MiB + 16 KiB) fails the aggregate or getMore with BSONObjectTooLarge (10334), which is not a
resumable error: the stream cannot pass that event (an update's event with `fullDocument` and
`fullDocumentBeforeChange` of two documents of 9 MB each is one, while neither document is over the
limit). mongod 7.0 adds the stage `$changeStreamSplitLargeEvent` (document_source_change_stream_split_
large_event.cpp, change_stream_split_event_helpers.cpp): an event over kBSONObjMaxChangeEventSize
(BSONObjMaxInternalSize - 8 KiB) is returned as fragments, each `{_id: <the fragment's resume token>,
splitEvent: {fragment: i, of: n}, ...fields}`, the event's top-level fields but `_id` placed greedily
in ascending order of (BSON element size, name), as many as fit in a fragment of at most that size less
the token's. Each fragment has its own resume token, and a stream resumed after fragment k returns the
fragments after it, then the events after the event (a stream whose split differs fails with 280).
This server announces the stage from `--server-version 7.0` on; a 6.0 server does not know it (40324).
"""

import struct

from bson.raw_bson import RawBSONDocument

from . import rawbson
from .changelog import token
from .errors import MongoError

MAX_INTERNAL_SIZE = 16 * 1024 * 1024 + 16 * 1024
MAX_EVENT_SIZE = MAX_INTERNAL_SIZE - 8 * 1024  # kBSONObjMaxChangeEventSize
STAGE = "$changeStreamSplitLargeEvent"
_INT32 = struct.Struct("<i")


def check_stage(stages, version):
    """Refuse the stage as mongod does: unknown before 7.0 (40324); from 7.0 its spec must be an empty
    document (7182800) and it must be the last stage, once (7182802). Returns whether it is there."""
    where = [i for i, stage in enumerate(stages) if isinstance(stage, dict) and STAGE in stage]
    if not where:
        return False
    if version < (7, 0):
        raise MongoError(40324, "Unrecognized pipeline stage name: '%s'" % STAGE)
    for i in where:
        spec = stages[i][STAGE]
        if not isinstance(spec, dict) or spec:
            raise MongoError(7182800, "%s spec should be an empty object" % STAGE)
    if where != [len(stages) - 1]:
        raise MongoError(7182802, "%s must be the last stage in the pipeline" % STAGE)
    return True


def too_large(raw):
    """mongod's error for an event it cannot serialize (BSONObj's size check), non-resumable."""
    first = RawBSONDocument(raw).get("_id")
    return MongoError(10334, "BSONObj size: %d (0x%X) is invalid. Size must be between 0 and %d(16MB) "
                      "First element: _id: %s" % (len(raw), len(raw), MAX_INTERNAL_SIZE, first))


def _elements(raw):
    """The top-level elements of a BSON document: (name, element bytes), in order."""
    out = []
    pos, end = 4, len(raw) - 1
    while pos < end:
        start = pos
        kind = raw[pos]
        name_end = raw.index(b"\x00", pos + 1)
        name = raw[pos + 1:name_end].decode("utf-8")
        pos = name_end + 1 + _value_size(kind, raw, name_end + 1)
        out.append((name, raw[start:pos]))
    return out


# value sizes of the fixed-size BSON types
_FIXED = {0x01: 8, 0x07: 12, 0x08: 1, 0x09: 8, 0x0A: 0, 0x10: 4, 0x11: 8, 0x12: 8, 0x13: 16, 0x06: 0,
          0x7F: 0, 0xFF: 0}


def _value_size(kind, raw, at):
    """The byte size of the value of type `kind` at offset `at`."""
    if kind in _FIXED:
        return _FIXED[kind]
    length = _INT32.unpack_from(raw, at)[0]
    if kind in (0x02, 0x0D, 0x0E):  # string, code, symbol: length + bytes
        return 4 + length
    if kind == 0x05:  # binary: length, subtype, bytes
        return 5 + length
    if kind in (0x03, 0x04, 0x0F):  # document, array, code with scope: whole length
        return length
    if kind == 0x0B:  # regex: two C strings
        first = raw.index(b"\x00", at) + 1
        return raw.index(b"\x00", first) + 1 - at
    if kind == 0x0C:  # DBPointer: string and ObjectId
        return 4 + length + 12
    raise MongoError(1, "unknown BSON type 0x%02X in a change event" % kind)


def fragments(key, identity, raw, skip=None):
    """The (token, BSON) of the fragments of the event `raw` (at history position `key`, with this
    identity), as mongod's split stage makes them; `skip`: a resume after fragment `skip` (returns the
    fragments after it; 280 when the event is not split so far)."""
    fields = sorted(((len(element), name), element) for name, element in _elements(raw) if name != "_id")
    if not fields:
        raise MongoError(7182502, "Cannot split an empty event or an event containing solely '_id' field")
    token_size = len(rawbson.document(token(key, identity, 0)))
    limit = MAX_EVENT_SIZE - token_size
    groups = []
    i = 0
    while i < len(fields):
        tok = token(key, identity, len(groups))
        head = rawbson.element("_id", tok) + rawbson.element("splitEvent", {"fragment": len(groups) + 1, "of": 0})
        size = 5 + len(head)
        group = []
        while True:
            group.append(fields[i][1])
            size += fields[i][0][0]
            i += 1
            if i >= len(fields) or size + fields[i][0][0] > limit:
                break
        if size > limit:
            raise MongoError(7182500, "Splitting change event failed: fragment size %d is greater than "
                             "maximum allowed fragment size %d" % (size, limit))
        groups.append((tok, group))
    first = 0 if skip is None else skip + 1
    if skip is not None and skip >= len(groups):
        raise MongoError(280, "Attempted to resume from a split event, but the resumed stream produced a "
                         "different split. Ensure that the pipeline used to resume is the same as the "
                         "original", labels=["NonResumableChangeStreamError"])
    out = []
    for number, (tok, group) in enumerate(groups):
        if number < first:
            continue
        body = (rawbson.element("_id", tok)
                + rawbson.element("splitEvent", {"fragment": number + 1, "of": len(groups)}) + b"".join(group))
        out.append((tok, _INT32.pack(len(body) + 5) + body + b"\x00"))
    return out


def pieces(cursor, entry, tok, raw):
    """What the stream returns for the event of a history entry, and whether it was split: the event
    itself, or its fragments (a stream with the split stage, an event over MAX_EVENT_SIZE); 10334 for
    an event over the limit without the stage. A stream resumed after a fragment of this event returns
    the fragments after it."""
    skip = None
    if cursor.resume_fragment is not None and cursor.resume_fragment[0] == entry.key:
        skip = cursor.resume_fragment[1]
        cursor.resume_fragment = None
        if len(raw) <= MAX_EVENT_SIZE:
            raise MongoError(280, "Attempted to resume from a split event fragment, but the event in the "
                             "resumed stream was not large enough to be split",
                             labels=["NonResumableChangeStreamError"])
    if cursor.split and len(raw) > MAX_EVENT_SIZE:
        return fragments(entry.key, entry.identity(), raw, skip), True
    if len(raw) > MAX_INTERNAL_SIZE:
        raise too_large(raw)
    return [(tok, raw)], False
