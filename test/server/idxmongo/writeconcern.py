"""Write concerns the replica set cannot satisfy, reported as mongod reports them.

The set `rs0` has `--members` members (one by default), so a numeric `w` above their number can never be
satisfied and a tag
name other than "majority" names no mode of its configuration. mongod applies the write and then answers
with a `writeConcernError` (the command itself succeeds): UnsatisfiableWriteConcern (100) "Not enough
data-bearing nodes" and UnknownReplWriteConcern (79) from the replication coordinator's check of a write
concern against the replica set configuration (src/mongo/db/repl/replication_coordinator_impl.cpp,
checkIfWriteConcernCanBeSatisfied). Every other write concern is satisfied when the write's optime reaches enough members (repl.py; at once
with one member and no majority lag).
"""

from .errors import code_name

# Commands that take a write concern and wait for it.
WRITE_CONCERN_COMMANDS = {"bulkWrite", "insert", "update", "delete", "findAndModify", "findandmodify", "commitTransaction",
                          "abortTransaction", "create", "drop", "dropDatabase", "createIndexes", "dropIndexes",
                          "deleteIndexes"}


def unsatisfiable(write_concern, members=1):
    """The (code, errmsg) of the writeConcernError for `write_concern`, or None when it is satisfied."""
    if not isinstance(write_concern, dict):
        return None
    w = write_concern.get("w")
    if isinstance(w, (int, float)) and not isinstance(w, bool) and w > members:
        return 100, "Not enough data-bearing nodes"
    if isinstance(w, str) and w != "majority":
        return 79, "No write concern mode named '%s' found in replica set configuration" % w
    return None


def add_write_concern_error(name, cmd, reply, members=1):
    """Add mongod's writeConcernError to the successful reply of a command whose write concern cannot be met."""
    if name not in WRITE_CONCERN_COMMANDS or reply.get("ok") != 1.0 or "writeConcernError" in reply:
        return
    problem = unsatisfiable(cmd.get("writeConcern"), members)
    if problem is not None:
        code, errmsg = problem
        reply["writeConcernError"] = {"code": code, "codeName": code_name(code), "errmsg": errmsg,
                                      "errInfo": {"writeConcern": dict(cmd["writeConcern"])}}
