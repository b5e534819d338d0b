"""The replica set this server emulates: its members, their optimes, the majority commit point.

One process holds one store: the primary's data, every write applied at once. What a replica set adds is
when the other members have a write: each write's optime (its cluster time) is noted with the moment it
was made (`note_optime`), and a member that replicates with a lag of L ms has applied every write made
up to L ms ago (its `applied` optime, which never goes back). mongod's majority commit point is the
newest optime a majority of the members has applied (the (n//2+1)-th newest applied optime); with
`--majority-lag-ms M` (or the `setReplicationLag` command) it trails the last write by at least M ms,
as a set whose secondaries replicate slowly, even with one member.

What depends on those optimes:
- a write concern `w: "majority"` (the implicit default of mongod 5.0+ when the client names none) or
  a numeric `w` waits until the write's optime is majority committed (or applied by `w` members), at
  most `wtimeout` ms (writeConcernError 64 WriteConcernFailed; 189 PrimarySteppedDown if the member
  stops being primary meanwhile), after the command released the store lock (`wait_write_concern`);
- change streams return the events up to the majority commit point only (on a secondary, up to what it
  has applied too), since mongod's change streams read majority-committed oplog entries
  (`stream_limit`);
- reads with readConcern "majority" (or "snapshot" outside a transaction) see the data as of the majority
  commit point, reads on a secondary as of its applied optime (`read_point`): the documents changed
  after that optime are read as they were before (their images from the change history, which keeps the
  document before each change while the set is versioned, see `Entry.prior`), through the overlay
  the queries already apply for other sessions' uncommitted writes;
- `afterClusterTime` waits until the optime read at has reached it (`wait_read_concern`).

With one member and no majority lag (the default) nothing is versioned: every write is majority committed
at once, reads see the current data, and none of this costs anything.
"""

import bisect
import datetime
import threading
import time

from bson.int64 import Int64
from bson.objectid import ObjectId
from bson.timestamp import Timestamp

from .bsonkeys import sort_key
from .changelog import NO_PRIOR, hwm_key
from .errors import MongoError, code_name

SET_NAME = "rs0"
ZERO = Timestamp(0, 0)
POLL_SECONDS = 0.005
# Commands mongod runs on any member (AllowedOnSecondary::kAlways) and those a read preference other
# than primary lets run on a secondary (kOptIn); every other command needs the primary (kNever).
ANYWHERE = {"hello", "isMaster", "ismaster", "ping", "buildInfo", "buildinfo", "serverStatus", "getMore",
            "killCursors", "saslStart", "saslContinue", "logout", "configureFailPoint", "getLastError",
            "getlasterror", "whatsmyuri", "endSessions", "killAllSessions", "connectionStatus",
            "getParameter", "recentCommands", "commandCpu", "replSetGetStatus", "replSetStepDown",
            "replSetStepUp", "replSetFreeze", "setReplicationLag"}
OPT_IN = {"find", "aggregate", "count", "distinct", "listCollections", "listIndexes", "collStats", "dbStats",
          "explain", "listDatabases", "usersInfo", "rolesInfo"}
WRITING_STAGES = {"$out", "$merge"}


class Member:
    """One member: where it listens, its state, how far behind the primary it replicates."""

    def __init__(self, index, host, port):
        self.index = index
        self.host = host
        self.port = port
        self.lag_ms = 0.0  # as a secondary: it has applied the writes made up to lag_ms ago
        self.paused_at = None  # replication stopped: applied no further than this optime
        self.floor = ZERO  # applied optimes never go back
        self.stepdown_until = 0.0  # time.monotonic() before which it may not be elected (replSetStepDown)

    @property
    def name(self):
        """host:port, as members name each other in hello and replSetGetStatus."""
        return "%s:%d" % (self.host, self.port)


class ReplicaSet:
    """The members, the primary, the election term and the optime log of one server process."""

    def __init__(self, server, host, ports, majority_lag_ms=0.0, secondary_lag_ms=0.0,
                 election_timeout_ms=10000.0):
        self.server = server
        self.members = [Member(i, host, port) for i, port in enumerate(ports)]
        for member in self.members[1:]:
            member.lag_ms = float(secondary_lag_ms)
        self.primary = self.members[0]
        self.term = 1
        self.majority_lag_ms = float(majority_lag_ms)
        self.election_timeout_ms = float(election_timeout_ms)
        self.election_at = None  # time.monotonic() of the next election while there is no primary
        self.lock = threading.RLock()
        self.monos = []  # time.monotonic() of each optime noted while versioned ...
        self.times = []  # ... and the optime (parallel lists, for bisect)
        self.last_optime = server.clock.current()
        self.majority_floor = self.last_optime
        self.versioned = False
        self.rollbacks = 0  # how many rollbacks happened (replSetGetStatus)
        self._update_versioned()

    # --- configuration ------------------------------------------------------------------------------

    @property
    def multi(self):
        """More than one member."""
        return len(self.members) > 1

    def _update_versioned(self):
        """Keep optimes (and the document before each change) once the set can lag at all: several
        members, or a majority lag. Once on, it stays on (changes made before have no prior image, so
        the floors start here)."""
        if self.versioned or not (self.multi or self.majority_lag_ms > 0):
            return
        with self.lock:
            self.versioned = True
            self.majority_floor = self.last_optime
            for member in self.members:
                member.floor = self.last_optime

    def member_at(self, port):
        """The member listening on `port`."""
        for member in self.members:
            if member.port == port:
                return member
        return self.members[0]

    # --- optimes ------------------------------------------------------------------------------------

    def note_optime(self, ts):
        """A write (or no-op) was made at optime `ts` (store lock held, so optimes come in order)."""
        if ts is None or ts <= self.last_optime:
            return
        with self.lock:
            self.last_optime = ts
            if not self.versioned:
                return
            now = time.monotonic()
            self.monos.append(now)
            self.times.append(ts)
            self._trim(now)

    def _trim(self, now):
        """Forget optimes no lag reaches back to any more (keeping the newest one before that)."""
        if len(self.monos) < 4096:
            return
        longest = max([self.majority_lag_ms] + [m.lag_ms for m in self.members]) / 1000.0
        cut = bisect.bisect_right(self.monos, now - longest - 1.0) - 1
        if cut > 0 and self.paused_floor() is None:
            del self.monos[:cut]
            del self.times[:cut]

    def paused_floor(self):
        """The oldest optime a paused member stays at (the log is kept past it), or None."""
        paused = [m.paused_at for m in self.members if m.paused_at is not None]
        return min(paused) if paused else None

    def _point(self, lag_ms, now):
        """The newest optime noted at least lag_ms ago, or None."""
        if lag_ms <= 0:
            return self.last_optime
        i = bisect.bisect_right(self.monos, now - lag_ms / 1000.0)
        return self.times[i - 1] if i else None

    def applied(self, member, now=None):
        """The newest optime `member` has applied (the primary: every write)."""
        if member is self.primary or not self.versioned:
            return self.last_optime
        with self.lock:
            point = self._point(member.lag_ms, now or time.monotonic())
            if point is not None and member.paused_at is not None:
                point = min(point, member.paused_at)
            if point is not None and point > member.floor:
                member.floor = point
            return member.floor

    def majority_point(self):
        """The majority commit point: the newest optime a majority of the members has applied, at most
        the last write made majority_lag_ms ago; it never goes back."""
        if not self.versioned:
            return self.last_optime
        with self.lock:
            now = time.monotonic()
            applied = sorted((self.applied(m, now) for m in self.members), reverse=True)
            point = applied[len(applied) // 2]
            if self.majority_lag_ms > 0:
                lagged = self._point(self.majority_lag_ms, now)
                point = min(point, lagged) if lagged is not None else ZERO
            if point > self.majority_floor:
                self.majority_floor = min(point, self.last_optime)
            return self.majority_floor

    # --- which member may run what --------------------------------------------------------------------

    def check_command(self, member, name, cmd, in_txn):
        """Refuse on a member that is not primary what mongod refuses there (service_entry_point_common.cpp):
        a command that needs the primary (writes, DDL, any statement of a transaction) with
        NotWritablePrimary (10107), a read without a read preference that lets it run on a secondary with
        NotPrimaryNoSecondaryOk (13435)."""
        if member is self.primary or name in ANYWHERE:
            return
        writes = name == "aggregate" and any(isinstance(stage, dict) and set(stage) & WRITING_STAGES
                                             for stage in cmd.get("pipeline") or [])
        if in_txn or name not in OPT_IN or writes:
            raise MongoError(10107, "not primary")
        preference = cmd.get("$readPreference")
        mode = preference.get("mode") if isinstance(preference, dict) else None
        if mode not in ("primaryPreferred", "secondary", "secondaryPreferred", "nearest"):
            raise MongoError(13435, "not primary and secondaryOk=false")

    def check_get_more(self, member, cursors, cmd):
        """A cursor lives on the member that opened it: a getMore on another one finds no such cursor
        (CursorNotFound, 43), as on separate mongods."""
        if not self.multi:
            return
        cursor_id = cmd.get("getMore")
        cursor = cursors.cursors.get(int(cursor_id)) if isinstance(cursor_id, int) else None
        if cursor is not None and getattr(cursor, "member", 0) != member.index:
            raise MongoError(43, "cursor id %d not found" % cursor_id)

    def note_cursor(self, member, cursors, reply):
        """Remember which member a command's new cursor lives on."""
        cursor_doc = reply.get("cursor") if self.multi else None
        cursor_id = cursor_doc.get("id") if isinstance(cursor_doc, dict) else None
        if cursor_id:
            cursor = cursors.cursors.get(int(cursor_id))
            if cursor is not None:
                cursor.member = member.index

    def check_interrupted(self, member):
        """After a wait inside a command (for a transaction, a lock): if the member stopped being primary
        meanwhile, the operation is killed, as mongod's stepdown kills the operations that write
        (InterruptedDueToReplStateChange, 11602)."""
        if member is not self.primary:
            raise MongoError(11602, "operation was interrupted because the member's replica set state "
                             "changed")

    # --- stepdown, elections, rollback ------------------------------------------------------------------

    def step_down(self, member, cmd):
        """replSetStepDown on `member` (store lock held, so writes wait meanwhile, as behind mongod's RSTL):
        wait up to secondaryCatchUpPeriodSecs (10, 0 with force) for an electable secondary that has
        applied every write; then step down (open transactions aborted, waiting write concerns answered
        PrimarySteppedDown) and, if one caught up, elect it at once (the stepped-down primary nominates
        it); with force and none caught up, step down anyway and hold an election after
        electionTimeoutMillis. The stepped-down member may not be elected for replSetStepDown seconds.
        Without force and no secondary caught up: ExceededTimeLimit (262)."""
        if member is not self.primary:
            raise MongoError(10107, "not primary")
        force = bool(cmd.get("force"))
        secs = cmd.get("replSetStepDown")
        secs = 60.0 if isinstance(secs, bool) or not isinstance(secs, (int, float)) else float(secs)
        catch_up = _number(cmd.get("secondaryCatchUpPeriodSecs", 0 if force else 10), "secondaryCatchUpPeriodSecs")
        if secs < catch_up:
            raise MongoError(2, "stepdown period must be longer than secondaryCatchUpPeriodSecs")
        deadline = time.monotonic() + catch_up
        while True:
            caught = [m for m in self._electable(time.monotonic()) if self.applied(m) >= self.last_optime]
            if caught or time.monotonic() >= deadline:
                break
            time.sleep(POLL_SECONDS)
        if not caught and not force:
            raise MongoError(262, "No electable secondaries caught up as of %s. Please use the replSetStepDown "
                             "command with the argument {force: true} to force node to step down."
                             % datetime.datetime.utcnow().isoformat())
        with self.lock:
            member.floor = self.last_optime  # it has every write it made
            member.stepdown_until = time.monotonic() + secs
            self.primary = None
            self.server.txns.abort_open()
            if caught:
                self._elect(caught[0])
            else:
                self._schedule_election()

    def step_up(self, member):
        """replSetStepUp on `member` (store lock held): it stands for election at once; it wins with the
        votes of a majority of the members (itself included), each of which votes for it unless it has
        applied a newer optime than the candidate. The old primary then steps down, and the writes the
        new primary lacks are rolled back (see _elect). A lost election: CommandFailed (125)."""
        if member is self.primary:
            return
        now = time.monotonic()
        if member.stepdown_until > now:
            raise MongoError(125, "Election failed: the member stepped down and may not be elected yet.")
        with self.lock:
            point = self.applied(member, now)
            votes = sum(1 for m in self.members if m is member or self.applied(m, now) <= point)
            if votes <= len(self.members) // 2:
                raise MongoError(125, "Election failed: %d of %d votes (the other members have applied newer "
                                 "optimes)." % (votes, len(self.members)))
            self._elect(member)

    def _electable(self, now):
        """The secondaries that may be elected now, most up to date first."""
        members = [m for m in self.members if m is not self.primary and m.stepdown_until <= now]
        return sorted(members, key=lambda m: self.applied(m, now), reverse=True)

    def _schedule_election(self):
        """Hold an election electionTimeoutMillis from now (a thread; the set has no primary until)."""
        self.election_at = time.monotonic() + self.election_timeout_ms / 1000.0
        threading.Thread(target=self._elector, name="election", daemon=True).start()

    def _elector(self):
        """Wait for the election's time, then elect the most up-to-date electable member that wins the
        votes of a majority, trying again until one does (or a primary came by replSetStepUp)."""
        while not self.server.stop_event.wait(0.02):
            if self.primary is not None:
                return
            if time.monotonic() < (self.election_at or 0):
                continue
            with self.server.lock:
                now = time.monotonic()
                for candidate in self._electable(now):
                    point = self.applied(candidate, now)
                    votes = sum(1 for m in self.members if m is candidate or self.applied(m, now) <= point)
                    if votes > len(self.members) // 2:
                        with self.lock:
                            self._elect(candidate)
                        return

    def _elect(self, member):
        """`member` becomes primary in a new term (store lock and self.lock held). The writes it has not
        applied (after its applied optime, so never majority committed) are rolled back; an old primary
        still in office steps down and its open transactions are aborted."""
        now = time.monotonic()
        point = self.applied(member, now)
        old = self.primary
        if old is not None:
            old.floor = self.last_optime
            self.primary = None
            self.server.txns.abort_open()
        if point < self.last_optime:
            self._rollback(point, now)
        self.term += 1
        self.primary = member
        member.paused_at = None
        self.election_at = None

    def _rollback(self, point, now):
        """Undo every write after optime `point` (store lock held), as mongod's rollback does on the
        members that had them: the documents are put back as they were (from the change history's prior
        images), the history entries are removed (no change stream ever returns them), the retryable-write
        statements and transaction commits they recorded are forgotten, and the cursors of the members
        that had applied them are killed (a getMore then gets CursorNotFound, which drivers resume from).
        DDL after `point` (collections and indexes created or dropped, renames) is not undone."""
        log = self.server.changelog
        bound = hwm_key(Timestamp(point.time, point.inc + 1))
        with log.cond:
            start = bisect.bisect_left(log.keys, bound)
            undone = log.entries[start:]
            del log.keys[start:]
            del log.entries[start:]
        images = {}
        for entry in undone:
            if entry.prior is not NO_PRIOR:
                images.setdefault((entry.db, entry.coll), {}).setdefault(sort_key(entry.doc_id), entry.prior)
        for (db, name), docs in images.items():
            coll = self.server.store.get(db, name)
            if coll is None:
                continue
            record_ids = {}
            for idk, before in docs.items():
                if before is not None and idk not in coll.docs:
                    record_ids[idk] = coll.next_record_id
                    coll.next_record_id += 1
            coll.restore(docs, record_ids)
        self.server.retryable.rollback(point)
        self.server.txns.rollback(point)
        ahead = {m.index for m in self.members if self.applied(m, now) > point}
        cursors = self.server.cursors
        with cursors.lock:
            for cursor_id in [i for i, c in cursors.cursors.items() if getattr(c, "member", 0) in ahead]:
                del cursors.cursors[cursor_id]
        cut = bisect.bisect_right(self.times, point)
        del self.monos[cut:]
        del self.times[cut:]
        self.last_optime = point
        self.majority_floor = min(self.majority_floor, point)
        for m in self.members:
            m.floor = min(m.floor, point)
            if m.paused_at is not None:
                m.paused_at = min(m.paused_at, point)
        self.rollbacks += 1

    # --- reads --------------------------------------------------------------------------------------

    def read_point(self, member, cmd):
        """The optime a read outside a transaction sees the data at, or None for the current data."""
        if not self.versioned:
            return None
        level = _read_level(cmd)
        point = None if member is self.primary else self.applied(member)
        if level in ("majority", "snapshot"):
            majority = self.majority_point()
            point = majority if point is None else min(point, majority)
        if point is None or point >= self.last_optime:
            return None
        return point

    def stream_limit(self, member_index):
        """The newest optime a change stream opened on member `member_index` may return events of (its
        majority-committed entries that member has applied), or None when every entry may be returned."""
        if not self.versioned:
            return None
        member = self.members[member_index]
        point = self.majority_point()
        if member is not self.primary:
            point = min(point, self.applied(member))
        return point

    def wait_read_concern(self, member, cmd, deadline):
        """readConcern afterClusterTime: wait until the optime the read sees has reached it, as a mongod
        secondary (or a majority read) waits for its applied (or committed) optime; MaxTimeMSExpired (50)
        at the command's deadline."""
        if not self.versioned:
            return
        concern = cmd.get("readConcern")
        target = concern.get("afterClusterTime") if isinstance(concern, dict) else None
        if not isinstance(target, Timestamp):
            return
        majority = _read_level(cmd) in ("majority", "snapshot")
        while True:
            seen = self.applied(member)
            if majority:
                seen = min(seen, self.majority_point())
            if seen >= target:
                return
            if deadline is not None and time.monotonic() >= deadline:
                raise MongoError(50, "operation exceeded time limit")
            time.sleep(POLL_SECONDS)

    def images_after(self, coll, point):
        """{id key: the document before its first change after `point`, None if it did not exist} for
        the collection: what a read as of `point` sees instead of the current documents."""
        log = self.server.changelog
        bound = hwm_key(Timestamp(point.time, point.inc + 1))
        images = {}
        with log.cond:
            start = bisect.bisect_left(log.keys, bound)
            for entry in log.entries[start:]:
                if entry.db != coll.db or entry.coll != coll.name or entry.prior is NO_PRIOR:
                    continue
                images.setdefault(sort_key(entry.doc_id), entry.prior)
        return images

    # --- writes -------------------------------------------------------------------------------------

    def wait_write_concern(self, member, op_time, write_concern):
        """Wait until the write at `op_time` satisfies `write_concern` ({w: "majority"} when the client
        gave none, mongod 5.0's implicit default); the writeConcernError document when it cannot, else
        None."""
        if not self.versioned:
            return None
        w = write_concern.get("w", "majority") if isinstance(write_concern, dict) else "majority"
        if isinstance(w, bool) or not (w == "majority" or (isinstance(w, (int, float)) and w > 1)):
            return None
        if isinstance(w, (int, float)) and w > len(self.members):
            return None  # writeconcern.py reports it (100)
        wtimeout = write_concern.get("wtimeout", 0) if isinstance(write_concern, dict) else 0
        deadline = None
        if isinstance(wtimeout, (int, float)) and not isinstance(wtimeout, bool) and wtimeout > 0:
            deadline = time.monotonic() + wtimeout / 1000.0
        term = self.term
        target = op_time or self.last_optime
        while True:
            if self.primary is not member or self.term != term:
                return _wce(189, "Primary stepped down while waiting for replication", write_concern)
            if w == "majority":
                done = self.majority_point() >= target
            else:
                now = time.monotonic()
                done = sum(1 for m in self.members if self.applied(m, now) >= target) >= w
            if done:
                return None
            if deadline is not None and time.monotonic() >= deadline:
                return _wce(64, "waiting for replication timed out", write_concern, {"wtimeout": True})
            time.sleep(POLL_SECONDS)

    # --- what the members say about the set ------------------------------------------------------------

    def election_id(self):
        """The primary's electionId: its term, as mongod 3.2+ builds it."""
        return ObjectId("7fffffff%016x" % self.term)

    def op_time(self, ts):
        """An optime document {ts, t}."""
        return {"ts": ts, "t": Int64(self.term)}

    def hello_fields(self, member):
        """The replica-set fields of hello on `member`."""
        is_primary = member is self.primary
        fields = {"ismaster": is_primary, "isWritablePrimary": is_primary, "secondary": not is_primary,
                  "setName": SET_NAME, "setVersion": 1, "hosts": [m.name for m in self.members],
                  "me": member.name}
        if self.primary is not None:
            fields["primary"] = self.primary.name
        if is_primary:
            fields["electionId"] = self.election_id()
        applied, majority = self.applied(member), self.majority_point()
        fields["lastWrite"] = {"opTime": self.op_time(applied), "lastWriteDate": _date(applied),
                               "majorityOpTime": self.op_time(majority), "majorityWriteDate": _date(majority)}
        return fields

    def status(self, member):
        """replSetGetStatus on `member`."""
        now = time.monotonic()
        majority = self.majority_point()
        members = []
        for m in self.members:
            applied = self.applied(m, now)
            state = 1 if m is self.primary else 2
            entry = {"_id": m.index, "name": m.name, "health": 1.0, "state": state,
                     "stateStr": "PRIMARY" if state == 1 else "SECONDARY",
                     "optime": self.op_time(applied), "optimeDate": _date(applied),
                     "optimeDurable": self.op_time(applied), "optimeDurableDate": _date(applied),
                     "lagMs": m.lag_ms, "paused": m.paused_at is not None}
            if m is member:
                entry["self"] = True
            members.append(entry)
        applied = self.applied(member, now)
        return {"set": SET_NAME, "date": datetime.datetime.utcnow(), "myState": 1 if member is self.primary else 2,
                "term": Int64(self.term), "majorityLagMs": self.majority_lag_ms,
                "rollbacks": self.rollbacks,
                "optimes": {"lastCommittedOpTime": self.op_time(majority),
                            "readConcernMajorityOpTime": self.op_time(majority),
                            "appliedOpTime": self.op_time(applied), "durableOpTime": self.op_time(applied),
                            "lastCommittedWallTime": _date(majority)},
                "members": members, "ok": 1.0}

    def set_lag(self, cmd):
        """setReplicationLag (a test-server command): majorityLagMs; member with lagMs and/or paused."""
        with self.lock:
            if "majorityLagMs" in cmd:
                self.majority_lag_ms = _number(cmd["majorityLagMs"], "majorityLagMs")
            if "member" in cmd:
                index = cmd["member"]
                if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < len(self.members):
                    raise MongoError(2, "member must be the _id of a member (0 to %d)" % (len(self.members) - 1))
                member = self.members[index]
                if "lagMs" in cmd:
                    member.lag_ms = _number(cmd["lagMs"], "lagMs")
                if "paused" in cmd:
                    if not isinstance(cmd["paused"], bool):
                        raise MongoError(14, "paused must be a boolean")
                    member.paused_at = self.applied(member) if cmd["paused"] else None
            if "electionTimeoutMs" in cmd:
                self.election_timeout_ms = _number(cmd["electionTimeoutMs"], "electionTimeoutMs")
            self._update_versioned()


def _number(value, field):
    """A non-negative number of a command field (BadValue otherwise)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise MongoError(2, "%s must be a non-negative number" % field)
    return float(value)


def _read_level(cmd):
    """The readConcern level of a command ("local" when none)."""
    concern = cmd.get("readConcern")
    level = concern.get("level") if isinstance(concern, dict) else None
    return level if isinstance(level, str) else "local"


def _date(ts):
    """The wall-clock date of an optime (its seconds)."""
    return datetime.datetime(1970, 1, 1) + datetime.timedelta(seconds=ts.time)


def _wce(code, errmsg, write_concern, info=None):
    """A writeConcernError document."""
    err_info = dict(info or {})
    err_info["writeConcern"] = dict(write_concern) if isinstance(write_concern, dict) else {"w": "majority"}
    return {"code": code, "codeName": code_name(code), "errmsg": errmsg, "errInfo": err_info}
