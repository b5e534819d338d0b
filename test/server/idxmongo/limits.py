"""mongod's size limits and the transaction size limit, checked where mongod checks them.

- A message longer than maxMessageSizeBytes (48,000,000) closes the connection without a reply, as mongod's
  transport layer does ("recv(): message msgLen ... is invalid").
- A BSON document in a message (the command body or one document of a sequence) over
  BSONObjMaxInternalSize (16 MiB + 16 KiB) is refused with BSONObjectTooLarge (10334), as mongod's OP_MSG
  parser does.
- An inserted document over BSONObjMaxUserSize (16 MiB) is a write error BadValue (2) "object to insert too
  large" (mongod's fixDocumentForInsert); a document an update (or findAndModify, or an upsert) would make
  larger fails with 17419 "Resulting document after update is larger than 16777216" (update_stage.cpp in
  6.0/7.0; later versions send the same message with BSONObjectTooLarge 10334).
- A namespace `db.collection` over 255 bytes cannot be created: InvalidNamespace (73) "Fully qualified
  namespace is too long" (userAllowedWriteNS / createCollection).
- `--txn-size-limit BYTES` (test-server option): a transaction whose written documents add up to more than
  BYTES fails with TransactionTooLargeForCache (388), without the TransientTransactionError label, and is
  aborted, as mongod 6.2+ does when a transaction needs more of the WiredTiger cache than it can ever get
  (the limit stands in for transactionTooLargeForCacheThreshold, which depends on the cache size).
- `getParameter` answers transactionLifetimeLimitSeconds (the --txn-lifetime).
"""

from .codec import encode
from .errors import MongoError

MAX_USER_SIZE = 16 * 1024 * 1024
MAX_INTERNAL_SIZE = MAX_USER_SIZE + 16 * 1024
MAX_MESSAGE_SIZE = 48000000
MAX_NAMESPACE_BYTES = 255


def too_large_in_message(size):
    """The error mongod's parser gives for a BSON object of `size` bytes in a message."""
    return MongoError(10334, "BSONObj size: %d (0x%X) is invalid. Size must be between 0 and %d(16MB)"
                      % (size, size, MAX_INTERNAL_SIZE))


def check_namespace(db, name):
    """Refuse to create a collection whose namespace is over 255 bytes."""
    namespace = "%s.%s" % (db, name)
    if len(namespace.encode("utf-8")) > MAX_NAMESPACE_BYTES:
        raise MongoError(73, "Fully qualified namespace is too long. Namespace: %s Max: %d"
                         % (namespace, MAX_NAMESPACE_BYTES))


def check_written(ctx, doc, inserting):
    """Refuse a document over 16 MiB (as an insert or as the result of an update), and count the bytes a
    transaction writes against --txn-size-limit."""
    size = len(encode(doc))
    if size > MAX_USER_SIZE:
        if inserting:
            raise MongoError(2, "object to insert too large. size in bytes: %d, max size: %d"
                             % (size, MAX_USER_SIZE))
        raise MongoError(17419, "Resulting document after update is larger than %d" % MAX_USER_SIZE)
    limit = ctx.server.txn_size_limit
    if ctx.txn is None or not limit:
        return
    ctx.txn.written_bytes = getattr(ctx.txn, "written_bytes", 0) + size
    if ctx.txn.written_bytes > limit:
        raise MongoError(388, "Transaction is too large and will not fit in the storage engine cache")


def cmd_get_parameter(ctx):
    """getParameter: transactionLifetimeLimitSeconds (others are unknown: InvalidOptions, as mongod says
    for a parameter it does not have)."""
    reply = {}
    for name in ctx.cmd:
        if name in ("getParameter", "$db", "lsid", "$clusterTime", "$readPreference", "comment"):
            continue
        if name != "transactionLifetimeLimitSeconds":
            raise MongoError(72, "no option found to get")
        reply[name] = int(ctx.server.txns.lifetime)
    if not reply:
        raise MongoError(72, "no option found to get")
    reply["ok"] = 1.0
    return reply


COMMANDS = {"getParameter": cmd_get_parameter}
