"""MongoDB wire protocol framing: OP_QUERY/OP_REPLY (handshake) and OP_MSG.

Messages start with a 16-byte header (length, requestID, responseTo, opCode, little endian). OP_MSG
carries flag bits, a kind-0 body section and kind-1 document sequences (`documents`, `updates`,
`deletes`), which are merged into the command as arrays.
"""

import contextlib
import itertools
import logging
import struct
import traceback

from .codec import decode, decode_all, encode
from .errors import CloseConnection, MongoError
from .limits import MAX_INTERNAL_SIZE, MAX_MESSAGE_SIZE

OP_REPLY = 1
OP_QUERY = 2004
OP_MSG = 2013

CHECKSUM_PRESENT = 1
MORE_TO_COME = 2

_HEADER = struct.Struct("<iiii")
_request_ids = itertools.count(1)
LOG = logging.getLogger("idxmongo")


class ProtocolError(Exception):
    """A message the server cannot parse; the connection is closed."""


class Request:
    """One decoded client request."""

    def __init__(self, request_id, opcode, db, command, more_to_come=False):
        self.request_id = request_id
        self.opcode = opcode
        self.db = db
        self.command = command
        self.more_to_come = more_to_come
        self.oversize = None  # size of a BSON object over mongod's limit in the message, if any
        self.sequences = ()  # fields that came as OP_MSG document sequences (not in mongod's request body)


def _recv_exact(sock, n):
    """Read exactly n bytes, or return None at end of stream."""
    chunks = []
    while n:
        chunk = sock.recv(min(n, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def read_request(sock):
    """Read and decode the next request from `sock`; None when the client closed the connection."""
    header = _recv_exact(sock, 16)
    if header is None:
        return None
    length, request_id, _, opcode = _HEADER.unpack(header)
    if length < 16 or length > MAX_MESSAGE_SIZE:  # mongod closes the connection too
        raise ProtocolError("bad message length %d" % length)
    body = _recv_exact(sock, length - 16)
    if body is None:
        return None
    if opcode == OP_MSG:
        return _parse_msg(request_id, body)
    if opcode == OP_QUERY:
        return _parse_query(request_id, body)
    raise ProtocolError("unsupported opcode %d" % opcode)


def _cstring(data, pos):
    """Decode a NUL-terminated string at `pos`; returns (string, next position)."""
    end = data.index(b"\x00", pos)
    return data[pos:end].decode("utf-8"), end + 1


def _parse_query(request_id, body):
    """OP_QUERY against `db.$cmd`: the command document (unwrapping `$query` if present)."""
    pos = 4
    full_name, pos = _cstring(body, pos)
    pos += 8  # numberToSkip, numberToReturn
    size = struct.unpack_from("<i", body, pos)[0]
    query = decode(body[pos:pos + size])
    if "$query" in query:
        query = query["$query"]
    db = full_name.split(".", 1)[0]
    return Request(request_id, OP_QUERY, db, query)


def _parse_msg(request_id, body):
    """OP_MSG: body section plus document sequences merged in as arrays."""
    flags = struct.unpack_from("<I", body, 0)[0]
    end = len(body) - 4 if flags & CHECKSUM_PRESENT else len(body)
    pos = 4
    command = None
    sequences = []
    oversize = None
    while pos < end:
        kind = body[pos]
        pos += 1
        size = struct.unpack_from("<i", body, pos)[0]
        if kind == 0:
            command = decode(body[pos:pos + size])
            oversize = size if size > MAX_INTERNAL_SIZE else oversize
        elif kind == 1:
            ident, docs_start = _cstring(body, pos + 4)
            oversize = _oversize_document(body, docs_start, pos + size) or oversize
            docs = decode_all(body[docs_start:pos + size])
            sequences.append((ident, docs))
        else:
            raise ProtocolError("unknown OP_MSG section kind %d" % kind)
        pos += size
    if command is None:
        raise ProtocolError("OP_MSG without a body section")
    for ident, docs in sequences:
        command.setdefault(ident, []).extend(docs)
    request = Request(request_id, OP_MSG, command.get("$db", "admin"), command, bool(flags & MORE_TO_COME))
    request.oversize = oversize
    request.sequences = tuple(ident for ident, _ in sequences)
    return request


def _oversize_document(body, pos, end):
    """The size of the first document of a sequence over mongod's BSON limit, or None."""
    while pos + 4 <= end:
        size = struct.unpack_from("<i", body, pos)[0]
        if size > MAX_INTERNAL_SIZE:
            return size
        pos += max(size, 5)
    return None


def encode_reply(request, reply):
    """The bytes answering `request` with the reply document (OP_REPLY for OP_QUERY, else OP_MSG)."""
    doc = encode(reply)
    if request.opcode == OP_QUERY:
        payload = struct.pack("<iqii", 0, 0, 0, 1) + doc
        opcode = OP_REPLY
    else:
        payload = struct.pack("<IB", 0, 0) + doc
        opcode = OP_MSG
    return _HEADER.pack(16 + len(payload), next(_request_ids), request.request_id, opcode) + payload


def encode_reply_or_error(request, reply):
    """encode_reply, or an error reply when the reply cannot be encoded (a document bson refuses)."""
    try:
        return encode_reply(request, reply)
    except Exception as exc:
        LOG.debug("cannot encode reply: %s", exc)
        return encode_reply(request, MongoError(1, "cannot encode reply: %s" % exc).to_reply())


def serve_requests(sock, dispatch, label):
    """Answer the requests read from `sock` with `dispatch(request)`'s reply documents until the client
    leaves, `dispatch` raises CloseConnection (a failpoint) or the connection breaks, then close `sock`.
    Any other error of `dispatch` (an undecodable message) drops this connection only, logged as
    `label`'s (e.g. "connection 7")."""
    try:
        while True:
            request = read_request(sock)
            if request is None:
                break
            reply = dispatch(request)
            if not request.more_to_come:
                sock.sendall(encode_reply_or_error(request, reply))
    except CloseConnection:
        pass
    except (OSError, ProtocolError) as exc:
        LOG.debug("%s closed: %s", label, exc)
    except Exception:
        LOG.debug("%s failed: %s", label, traceback.format_exc())
    finally:
        with contextlib.suppress(OSError):
            sock.close()
