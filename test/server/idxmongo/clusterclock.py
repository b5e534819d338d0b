"""The cluster clock a replica-set member gossips: `$clusterTime` and `operationTime` in every reply.

mongod keeps one logical clock per cluster (db/logical_clock.cpp, vector_clock in 5.0+). Every write takes
a new, larger Timestamp; a reply carries the clock's current value as `$clusterTime` (signed with a key;
this server signs nothing: hash of 20 zero bytes, keyId 0, as mongod does without keys) and, as
`operationTime`, the time of the command's last write (or the current time for reads). A `$clusterTime`
a client sends back advances the clock if it is ahead, as mongod does with a valid signature.
"""

import threading
import time

from bson.binary import Binary
from bson.int64 import Int64
from bson.timestamp import Timestamp

ZERO_SIGNATURE = {"hash": Binary(b"\x00" * 20, 0), "keyId": Int64(0)}


class ClusterClock:
    """A monotonic Timestamp(seconds, increment) clock."""

    def __init__(self):
        self.lock = threading.Lock()
        self.last = Timestamp(int(time.time()), 1)

    def tick(self):
        """A new time, larger than every earlier one (for a write)."""
        with self.lock:
            now = int(time.time())
            if now > self.last.time:
                self.last = Timestamp(now, 1)
            else:
                self.last = Timestamp(self.last.time, self.last.inc + 1)
            return self.last

    def restore(self, journaled):
        """After a restart with --dbpath: never hand out a time at or before the latest one journaled (the
        wall clock can be behind it, or in the same second), as mongod's clock starts from its oplog."""
        with self.lock:
            if journaled > self.last:
                self.last = journaled

    def current(self):
        """The latest time handed out."""
        with self.lock:
            return self.last

    def advance(self, gossiped):
        """Take a client's `$clusterTime` document into account (ignored if malformed)."""
        value = gossiped.get("clusterTime") if isinstance(gossiped, dict) else None
        if not isinstance(value, Timestamp):
            return
        with self.lock:
            if value > self.last:
                self.last = value

    def stamp(self, reply, op_time):
        """Add `$clusterTime` and `operationTime` to a reply."""
        current = self.current()
        reply["$clusterTime"] = {"clusterTime": current, "signature": dict(ZERO_SIGNATURE)}
        reply["operationTime"] = op_time or current
