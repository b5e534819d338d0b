#!/usr/bin/python3
"""Differential test of index tables written behind the FDW's back.

A customers collection (seeded with --documents documents) has three index
tables: customers_email {lower(email)} unique, customers_town {town}
INCLUDE {first_name}, and customers_tags, multi-valued {tags}.  Outside
writers (threads with their own pymongo clients, test/fixtures/
outside_writers.py) insert, update keys and included fields, change array
elements, unset, replace, delete, commit small transactions and write
duplicate emails straight into MongoDB, while

- pairs of queries run: the main thread holds the writers (no write in
  flight, none starts: a threading.Event gate), runs a random query through
  the index tables (idxtable.enable_plain_scan = off) and then the same
  query with routing off (idxtable.enable_index_routing = off), and lets
  the writers go again.  With idxtable.index_consistency = current (the
  default, checked) the two must return the same rows.  After a tenth of
  the pairs, in the same pause, an INSERT through the FDW of an email a
  document holds (another case of it; often the email written last, which
  the applier may not have applied yet) must fail with 23505 (or IX001
  outside phase 1), and is deleted again if it did not;
- a reader thread runs random routed queries while the writers write: every
  row it gets must satisfy the query's condition (no stale entry may
  return a fact that no longer matches);
- in every phase but the first, two more threads write through the FDW,
  through the writers' gate (test/fixtures/other_sessions.py): sessions
  that exit right after their commit (through customers, through
  customers_bare or through the second role's table, the last two raising
  a "doubt": an INSERT, a BEGIN/INSERT/DELETE/COMMIT, or an INSERT of a
  unique email that an INSERT through customers must then refuse with
  23505), each followed by a routed query of its rows by their emails that
  must equal the unrouted one; and a second role (SECOND_ROLE, with USAGE
  on the server, its own user mapping as the MongoDB user
  SECOND_MONGO_USER, readWrite on the database, where the server lets us
  create it) writing INSERTs, UPDATEs, DELETEs and transactions through
  its own foreign table over the collection without index tables
  (bob.customers).  Some of the email queries ask for their emails.

This runs in phases of --seconds each:

0. FDW writes: the outside writers are held for stretches (and write no
   duplicate emails in this phase), in which random writes through the FDW
   (INSERT, UPDATE, DELETE, in transaction mode) run between the pairs
   until the applier leaves the FDW's own transactions out of its stream
   (a check: in at least one stretch it did; at most ARMED_WAIT seconds),
   and ARMED_AFTER seconds more, with writes through a second foreign table
   over the collection without index tables, which must make it take them
   again.  Each stretch opens two sessions that write once at its start
   (registered before the stream leaves their transactions out): one
   through customers, one through customers_bare or the second role's
   table; once the stream leaves the FDW's transactions out, each in turn,
   after LEAVE_IDLE idle seconds, writes once more and exits right after
   its commit, and its rows must be found at once by a routed query (and a
   unique email it wrote refused); in at least one stretch a session with
   a doubt must have exited so (item 1 of issue 26);
1. steady: the applier runs (at least MIN_ROUTED_SHARE of the pairs must go
   through an index table, or the test proves nothing); an outside write to
   another collection of the database, orders, every ORDERS_EVERY seconds,
   whose table has one index table, orders_town; after half of the phase,
   writers and reader held, one more, and once its entry is written, at
   once, the drop_index of orders_town (the applier's position is then
   likely that write's event, which its stream no longer sees: item 4 of
   issue 26); the writers go on; customers' index tables must stay valid
   (polled until the phase ends), the server log must show no rebuild and
   no lost history, and that the stream watches fewer collections;
1b. ordered FDW writes: the table in consistency 'ordered', random writes
   through the FDW run between the pairs while the outside writers write,
   among them new emails for customers the outside writers write too (the
   applier may repair such a customer between the FDW's claim of its new
   email and its fact, and must leave that claim to the write in flight);
   no write may fail, but for a 23505 of a write of outside customers (one
   may share its email with another: an outside duplicate);
2. failpoints: MongoDB's failCommand (or failGetMoreAfterCursorCheckout)
   on for FAULT_WINDOW seconds every --fault-every seconds (or after the
   next pair when no applier ran or no command met it), with appName
   "idxtable_fdw applier", so that only the appliers' own commands fail
   (errors, closed connections, delays);
3. applier killed: pg_terminate_backend of the process whose backend_type
   is "idxtable_fdw applier" every --kill-every seconds; its database
   worker starts it again;
4. server restarted: test/env restart-mongo (kill -9 and restart, with
   the data: needs IDXTABLE_MONGO_DURABLE=1 at test/env start; the test
   server keeps its change-stream history in its journal, as mongod keeps
   its oplog, so the applier resumes from its stored position).

With --replica-set (a test server of three members: test/env with
IDXTABLE_MONGO_MEMBERS=3) two other phases run instead, described in
test/fixtures/replica_set_phases.py: 5. secondaries lag (under
secondaryPreferred; strict) and 6. stepdown (replSetStepDown while the
applier's finds are held); not the killed and restarted ones.

After phase 1 (or 5), --any-pairs pairs run with idxtable.index_consistency = any,
for information only (how many differ without the wait).

In phases 2-4 and 6 a routed query may fail with SQLSTATE IX001 (the index is not
current within idxtable.sync_wait_timeout) while the applier restarts: such
errors are counted and reported, never a wrong row; in phases 0, 1, 1b and 5 an IX001 is a
failure.  Any other error is a failure, but for those of the exiting
sessions and the second role in phases 2-4 (a write, or a check that finds
no applier or no server: IX001, SQLSTATE class 08), which are counted.

At the end the writers stop, a marker write (to another collection) gives
the cluster time T that every write precedes, and idxtable.sync_status must
show every index valid and applied through T within CATCH_UP_SECONDS.  Then
verify_index of every index must find nothing missing, orphaned, stale or
unconvertible; the unique-key conflicts it counts (column "conflicts") must
be the documents that share a lower(email) with another one in MongoDB
(each group of k counts k - 1), every such document but one per email must
be in idxtable.conflicts, and idxtable.sync_status must show as many
conflicts as idxtable.conflicts holds facts (a fact once, however many
holders its rows name, as verify_index counts); the duplicates the writers wrote
are reported beside.  Every row the exiting sessions and the second role
left must be found by a routed query by its email as by the unrouted one,
and be what they wrote (where none of their writes failed).  The log says
what they did per phase (sessions exited, after a doubt, while armed,
rows; the second role's statements and rows) and the drop's time.  A
routed query that differs is shown with the index's sync_status, the
entries of the differing facts and the claim of their email, read while
the writers are still held.  --no-duplicates
leaves the duplicate emails out.

Environment as for test/differential.py (PGHOST..., MONGO_URI, MONGO_USER,
MONGO_PASSWORD, IDXTABLE_ENV_DIR for restart-mongo).  DIFFO_SEED fixes the
seed (printed first; the writers' threads interleave as they will, so a run
repeats its choices, not its timing).  The PostgreSQL and MongoDB databases
idxtable_diffoutside are dropped and created, and left in place, and so
are the role regress_diffo_bob and the MongoDB user diffo_bob.  The last
line is "differential outside: N passed, M failed".
"""
import argparse
import collections
import contextlib
import os
import random
import re
import subprocess
import sys
import threading
import time

import psycopg2
import pymongo.errors
from bson import json_util
from bson.objectid import ObjectId
from bson.son import SON

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "fixtures"))
import mongo_client  # noqa: E402  (test/fixtures)
import pg_fixture  # noqa: E402  (test/fixtures)
from results import Results  # noqa: E402  (test/fixtures)
import outside_writers  # noqa: E402
import other_sessions  # noqa: E402
import replica_set_phases  # noqa: E402
from replica_set_phases import LAGGING, STEPDOWN, RS_PHASES  # noqa: E402  (--replica-set)
from outside_writers import TAGS, TOWNS  # noqa: E402

DATABASE = "idxtable_diffoutside"
COLLECTION = "customers"
# (name, keys, include, unique)
INDEXES = [("customers_email", "{lower(email)}", "{}", True),
           ("customers_town", "{town}", "{first_name}", False),
           ("customers_tags", "{tags}", "{}", False)]
UNIQUE_INDEX = "customers_email"
# after the writes, a routed query through each index (see Run.barrier)
BARRIERS = {"customers_email": "SELECT count(*) FROM customers WHERE lower(email) = 'nobody@example.org'",
            "customers_town": "SELECT count(*) FROM customers WHERE town = 'Oslo'",
            "customers_tags": "SELECT count(*) FROM customers WHERE 'vip' = ANY (tags)"}
# (in this order: the launcher restarts an applier that failed within 60 s
# of its start after 1 s, 2 s, 4 s, ...: the failpoints come first, while
# the delays are short)
ARMED, STEADY, ORDERED, FAILPOINTS, KILLED, RESTARTED = (
    "fdw writes", "steady", "ordered fdw writes", "failpoints", "applier killed", "server restarted")
PHASES = [ARMED, STEADY, ORDERED, FAILPOINTS, KILLED, RESTARTED]
ALL_PHASES = PHASES + RS_PHASES           # --replica-set: RS_PHASES, not NOT_IN_A_REPLICA_SET
NOT_IN_A_REPLICA_SET = (KILLED, RESTARTED)
NOT_ON_A_CLUSTER = (RESTARTED,)          # --cluster: the test server's cluster cannot restart
# the ordered-FDW-writes phase: seconds between two writes through the FDW
ORDERED_EVERY = 0.05
# the FDW-writes phase: the outside writers are held for a stretch until the
# applier leaves the FDW's own transactions out (at most ARMED_WAIT seconds,
# longer than its quiet second), and for ARMED_AFTER seconds more, in which
# writes through customers_bare take them back; then let go for a moment
ARMED_WAIT = 8.0
ARMED_AFTER = 2.0
ARMED_GAP = 0.4
APPLIER = "idxtable_fdw applier"          # its backend_type and its MongoDB appName
# phases in which an IX001 or any other error is a failure
STRICT_PHASES = (ARMED, STEADY, ORDERED, LAGGING)
# the second role: its own foreign table over the collection, without index
# tables, and its own user mapping (as MongoDB user SECOND_MONGO_USER if the
# server lets us create it)
SECOND_ROLE = "regress_diffo_bob"
SECOND_TABLE = "bob.customers"
SECOND_MONGO_USER = "diffo_bob"
SECOND_ROLE_RATE = 4.0
# another table over another collection of the MongoDB database, with one
# index table, dropped in the steady phase (after half of it, see
# Run.drop_orders_index); before that an outside write to it every
# ORDERS_EVERY s
ORDERS, ORDERS_INDEX = "orders", "orders_town"
ORDERS_EVERY = 0.5
# share of the email queries that ask for an email the exiting sessions or
# the second role wrote
OTHER_EMAIL_SHARE = 0.15
# in each stretch of the FDW-writes phase, once the stream leaves the FDW's
# transactions out: the idle seconds before each exiting session's last
# write (the applier's getMore may then be a long one), and after its exit
# before its rows are read
LEAVE_IDLE = 1.2
LEAVE_SETTLE = 0.2
NOT_CURRENT = "IX001"
UNIQUE_VIOLATION = "23505"
MIN_ROUTED_SHARE = 0.5
# an applier that failed less than 60 s after its start is started again
# after 1 s, 2 s, 4 s, ... up to 60 s (launcher.c): after the phases the next
# restart may be 30 s away
CATCH_UP_SECONDS = 70
APPLIER_BACK_SECONDS = 30
# share of the pairs followed by an INSERT through the FDW of an email a
# document holds
FDW_INSERT_SHARE = 0.1
MAX_DETAILED_FAILURES = 20
# failpoints for the applier's commands, (failpoint, data): each is on for
# FAULT_WINDOW seconds while the writers write (other appliers of the
# cluster share the appName; a window, unlike {times: 1}, reaches ours too)
FAULTS = [
    ("failCommand", {"failCommands": ["getMore"], "errorCode": 91}),          # ShutdownInProgress
    ("failCommand", {"failCommands": ["getMore"], "closeConnection": True}),
    ("failCommand", {"failCommands": ["aggregate"], "errorCode": 11600}),     # InterruptedAtShutdown
    ("failCommand", {"failCommands": ["find"], "errorCode": 6}),              # HostUnreachable
    ("failCommand", {"failCommands": ["find"], "closeConnection": True}),
    ("failCommand", {"failCommands": ["insert", "update", "delete"], "errorCode": 91}),
    ("failCommand", {"failCommands": ["insert", "update", "delete"], "closeConnection": True}),
    ("failCommand", {"failCommands": ["update"], "errorCode": 2}),            # BadValue
    ("failCommand", {"failCommands": ["getMore", "find"], "blockConnection": True, "blockTimeMS": 400}),
    ("failGetMoreAfterCursorCheckout", {"errorCode": 91}),
]
FAULT_WINDOW = 0.5
# mongod's failpoints that a mongos does not have (--cluster sets failpoints on the routers)
NOT_ON_A_ROUTER = ("failGetMoreAfterCursorCheckout",)


# --------------------------------------------------------------------------
# Reporting
# --------------------------------------------------------------------------

class Report(Results):
    """The shared tally (the threads share it too); a failure prints with
    where it happened and the seed, its first 12 detail lines while
    failures are few."""

    def __init__(self, seed, details=MAX_DETAILED_FAILURES):
        super().__init__(detailed=details)
        self.seed = seed

    def check(self, ok, where, what, lines=()):
        return super().check(ok, "[%s] (DIFFO_SEED=%d) %s" % (where, self.seed, what),
                             list(lines)[:12], brief="[%s] %s" % (where, what))


def first_line(exc):
    text = (getattr(exc, "pgerror", None) or str(exc)).strip()
    return text.splitlines()[0] if text else type(exc).__name__


# --------------------------------------------------------------------------
# Queries
# --------------------------------------------------------------------------

class Query:
    """A query with its parameters, and how to check one of its rows."""

    def __init__(self, kind, sql, params, row_ok=None):
        self.kind = kind
        self.sql = sql
        self.params = params
        self.row_ok = row_ok          # row -> bool, or None (aggregates)

    def show(self):
        return "%s  %r" % (self.sql, self.params)


def lower(text):
    """PostgreSQL's lower() of the ASCII emails the writers write."""
    return None if text is None else text.lower()


class QueryGenerator:
    """Random queries that the index tables serve; values from what the
    writers wrote lately, so that they hit."""

    def __init__(self, rng, pool, other=None):
        self.rng = rng
        self.pool = pool
        self.other = other          # other_sessions.EmailList: emails of the other sessions

    def email(self):
        if self.other is not None and self.rng.random() < OTHER_EMAIL_SHARE:
            email = self.other.pick(self.rng)
            if email is not None:
                return lower(email)
        email = self.pool.recent_email(self.rng)
        if email is None or self.rng.random() < 0.05:
            return "nobody%d@example.org" % self.rng.randrange(1000)
        return lower(email)

    def make(self):
        rng = self.rng
        kind = rng.choice(["email", "email", "emails", "town", "towns", "covering", "count",
                           "town_null", "tag", "tags", "tag_town"])
        if kind == "email":
            v = self.email()
            return Query(kind, "SELECT _id, first_name, email, town, tags FROM customers "
                               "WHERE lower(email) = %s ORDER BY _id", (v,),
                         lambda r, v=v: lower(r[2]) == v)
        if kind == "emails":
            vs = [self.email() for _ in range(rng.randint(2, 4))]
            return Query(kind, "SELECT _id, email, town FROM customers WHERE lower(email) = ANY (%s) "
                               "ORDER BY _id", (vs,), lambda r, vs=vs: lower(r[1]) in vs)
        if kind == "town":
            v = rng.choice(TOWNS)
            return Query(kind, "SELECT _id, first_name, town, email FROM customers WHERE town = %s ORDER BY _id",
                         (v,), lambda r, v=v: r[2] == v)
        if kind == "towns":
            vs = rng.sample(TOWNS, 2)
            return Query(kind, "SELECT _id, town FROM customers WHERE town IN (%s, %s) ORDER BY _id",
                         tuple(vs), lambda r, vs=vs: r[1] in vs)
        if kind == "covering":
            v = rng.choice(TOWNS)
            return Query(kind, "SELECT town, first_name FROM customers WHERE town = %s ORDER BY first_name",
                         (v,), lambda r, v=v: r[0] == v)
        if kind == "count":
            return Query(kind, "SELECT count(*), count(first_name) FROM customers WHERE town = %s",
                         (rng.choice(TOWNS),))
        if kind == "town_null":
            return Query(kind, "SELECT _id, town FROM customers WHERE town IS NULL ORDER BY _id", (),
                         lambda r: r[1] is None)
        if kind == "tag":
            v = rng.choice(TAGS)
            return Query(kind, "SELECT _id, tags FROM customers WHERE %s = ANY (tags) ORDER BY _id", (v,),
                         lambda r, v=v: r[1] is not None and v in r[1])
        if kind == "tags":
            vs = rng.sample(TAGS, 2)
            return Query(kind, "SELECT _id, tags FROM customers WHERE tags && %s::text[] ORDER BY _id", (vs,),
                         lambda r, vs=vs: r[1] is not None and bool(set(r[1]) & set(vs)))
        v, t = rng.choice(TAGS), rng.choice(TOWNS)
        return Query(kind, "SELECT _id, tags, town FROM customers WHERE %s = ANY (tags) AND town = %s "
                           "ORDER BY _id", (v, t),
                     lambda r, v=v, t=t: r[1] is not None and v in r[1] and r[2] == t)


class Outcome:
    def __init__(self, rows=None, sqlstate=None, error=None):
        self.rows = rows
        self.sqlstate = sqlstate
        self.error = error

    def failed(self):
        return self.sqlstate is not None

    def show(self, limit=4):
        if self.failed():
            return "ERROR %s: %s" % (self.sqlstate, self.error)
        text = "%d rows" % len(self.rows)
        if self.rows:
            text += ": " + ", ".join(repr(r) for r in self.rows[:limit]) + (", ..." if len(self.rows) > limit else "")
        return text


class Session:
    """One PostgreSQL connection (autocommit) with its settings."""

    def __init__(self, settings=()):
        self.settings = list(settings)
        self.conn = None
        self.connect()

    def connect(self):
        self.conn = pg_fixture.connect(DATABASE, options="-c statement_timeout=30s")
        for setting in self.settings:
            self.execute(setting)

    def execute(self, sql, params=()):
        if self.conn.closed:
            self.connect()
        with self.conn.cursor() as cur:
            cur.execute(sql, params)
            return [tuple(r) for r in cur.fetchall()] if cur.description else None

    def run(self, sql, params=()):
        """Rows or the error (the connection is re-made if it was lost)."""
        try:
            return Outcome(rows=self.execute(sql, params))
        except psycopg2.Error as exc:
            if exc.pgcode is None:
                self.conn.close()
            return Outcome(sqlstate=exc.pgcode or "connection", error=first_line(exc))

    def dict_rows(self, sql, params=()):
        if self.conn.closed:
            self.connect()
        with self.conn.cursor() as cur:
            cur.execute(sql, params)
            names = [d[0] for d in cur.description]
            return [dict(zip(names, r)) for r in cur.fetchall()]

    def close(self):
        self.conn.close()


ROUTED_SETTINGS = ["SET idxtable.enable_plain_scan = off"]
PLAIN_SETTINGS = ["SET idxtable.enable_index_routing = off"]


def routed_index(session, query):
    """The index table EXPLAIN shows the query going through, or None."""
    try:
        plan = session.execute("EXPLAIN (COSTS OFF) " + query.sql, query.params)
    except psycopg2.Error as exc:
        return "EXPLAIN failed: %s" % first_line(exc)
    for (line,) in plan:
        m = re.search(r"Index Table: (\S+)", line)
        if m:
            return m.group(1)
    return None


def row_diff(routed, plain, limit=4):
    """How two results differ (as multisets; then in order)."""
    r, p = collections.Counter(routed), collections.Counter(plain)
    only_routed, only_plain = list((r - p).elements()), list((p - r).elements())
    lines = ["routed: %d rows, unrouted: %d rows" % (len(routed), len(plain))]
    lines += ["only routed:   %r" % (row,) for row in only_routed[:limit]]
    lines += ["only unrouted: %r" % (row,) for row in only_plain[:limit]]
    if len(only_routed) + len(only_plain) > 2 * limit:
        lines.append("... (%d only routed, %d only unrouted)" % (len(only_routed), len(only_plain)))
    if not only_routed and not only_plain:
        lines.append("(the same rows in another order)")
    return lines


def hashable(rows):
    return [tuple(tuple(v) if isinstance(v, list) else v for v in row) for row in rows]


class OutcomeRun:
    """A Session as test/fixtures/other_sessions.py runs statements: (rows, sqlstate, error)."""

    def __init__(self, session):
        self.session = session

    def run(self, sql, params=()):
        out = self.session.run(sql, params)
        return out.rows, out.sqlstate, out.error


class StateWatcher(threading.Thread):
    """Polls the states of index tables (idxtable.index_defs) until stopped: {name: states seen}."""

    def __init__(self, names):
        super().__init__(name="state watcher", daemon=True)
        self.names = names
        self.states = {name: set() for name in names}
        self.polls = 0
        self.error = None
        self.stopped = threading.Event()

    def stop(self):
        self.stopped.set()
        self.join(30)

    def run(self):
        try:
            session = Session()
            while not self.stopped.is_set():
                for name, state in session.execute("SELECT name, state FROM idxtable.index_defs "
                                                   "WHERE name = ANY (%s)", (self.names,)):
                    self.states[name].add(state)
                self.polls += 1
                self.stopped.wait(0.05)
            session.close()
        except Exception as exc:  # reported by the test
            self.error = "%s: %s" % (type(exc).__name__, exc)


def server_log():
    return os.path.join(os.environ.get("IDXTABLE_ENV_DIR", "/tmp/idxtable_fdw_env"), "pg", "server.log")


def log_size():
    try:
        return os.path.getsize(server_log())
    except OSError:
        return None


def log_since(offset):
    """PostgreSQL's server log from offset on, or None if it cannot be read."""
    if offset is None:
        return None
    try:
        with open(server_log(), errors="replace") as f:
            f.seek(offset)
            return f.read()
    except OSError:
        return None


# --------------------------------------------------------------------------
# The concurrent reader
# --------------------------------------------------------------------------

class Reader(threading.Thread):
    """Routed queries while the writers write: every row must satisfy the
    query's condition."""

    def __init__(self, seed, pool, report, other=None):
        super().__init__(name="reader", daemon=True)
        self.gen = QueryGenerator(random.Random("%s/reader" % seed), pool, other)
        self.report = report
        self.gate = outside_writers.Gate()
        self.stopped = threading.Event()
        self.phase = STEADY
        self.stats = collections.defaultdict(collections.Counter)    # phase -> counters
        self.failure = None

    def stop(self):
        self.stopped.set()
        self.join(60)

    def run(self):
        try:
            session = Session(ROUTED_SETTINGS)
            while not self.stopped.is_set():
                if not self.gate.enter():
                    continue
                try:
                    self.one(session)
                finally:
                    self.gate.leave()
                self.stopped.wait(0.03)
            session.close()
        except Exception as exc:  # reported by the test
            self.failure = "%s: %s" % (type(exc).__name__, exc)

    def one(self, session):
        query = self.gen.make()
        phase = self.phase
        stats = self.stats[phase]
        out = session.run(query.sql, query.params)
        stats["queries"] += 1
        if out.failed():
            if out.sqlstate == NOT_CURRENT and phase not in STRICT_PHASES:
                stats["IX001"] += 1
                return
            stats["errors"] += 1
            self.report.check(False, "%s: reader" % phase, "a routed query failed during writes",
                              ["sql: " + query.show(), out.show()])
            return
        stats["rows"] += len(out.rows)
        if query.row_ok is None:
            return
        bad = [r for r in out.rows if not query.row_ok(r)]
        if bad:
            stats["wrong"] += 1
            self.report.check(False, "%s: reader" % phase,
                              "a routed query returned %d rows that do not satisfy its condition" % len(bad),
                              ["sql: " + query.show()] + ["row: %r" % (r,) for r in bad[:5]])


# --------------------------------------------------------------------------
# The run
# --------------------------------------------------------------------------

class Run(replica_set_phases.ReplicaSetPhases):
    # for ReplicaSetPhases
    database, collection, applier_app, session = DATABASE, COLLECTION, APPLIER, Session

    def __init__(self, seed, args, report):
        self.seed = seed
        self.args = args
        self.report = report
        self.rng = random.Random("%s/main" % seed)
        self.pool = None
        self.gate = outside_writers.Gate()
        self.writers = []
        self.reader = None
        self.routed = None
        self.plain = None
        self.admin = None
        self.phase = "setup"
        self.stats = collections.defaultdict(collections.Counter)
        self.fdw_serial = 0
        self.fdw_rows = []                  # _ids of the customers the FDW inserted (FDW-writes phase)
        self.mongo = mongo_client.connect()
        self.other_emails = other_sessions.EmailList()
        self.exiting = None                 # other_sessions.ExitingSessions
        self.second = None                  # other_sessions.SecondRole
        self.leavers = []                   # the exiting sessions of the FDW-writes phase's stretches
        self.second_mongo_user = None
        self.orders_rng = random.Random("%s/orders" % seed)
        self.orders_serial = 0
        self.drop = None                    # what the drop_index of ORDERS_INDEX did
        self.phase_started = time.monotonic()

    def check(self, ok, what, lines=()):
        return self.report.check(ok, self.phase, what, lines)

    # ---- setup

    def setup(self):
        # (the previous run's appliers end before the MongoDB database is dropped: see the fixture)
        pg_fixture.recreate_databases(DATABASE, self.mongo, options=pg_fixture.UTF8_C)
        self.admin = Session()
        preload = self.admin.execute("SHOW shared_preload_libraries")[0][0]
        self.check("idxtable_fdw" in [p.strip() for p in preload.split(",")],
                   "idxtable_fdw is not in shared_preload_libraries (%r): no applier can run" % preload)
        pg_fixture.create_extension(self.admin.conn)
        pg_fixture.create_server(self.admin.conn, DATABASE, uri=self.server_uri(os.environ["MONGO_URI"]))
        columns = "_id text, first_name text, last_name text, email text, town text, tags text[], n integer"
        if self.args.cluster:
            # a collection spread over every shard by a hashed _id (the applier's stream then merges
            # every shard's); the FDW names the shard key for its one-document writes
            self.mongo.admin.command("shardCollection", "%s.%s" % (DATABASE, COLLECTION), key={"_id": "hashed"})
        pg_fixture.create_foreign_table(self.admin.conn, "customers", columns, collection=COLLECTION,
                                        options={"shard_key": "_id"} if self.args.cluster else ())
        self.setup_replica_set(os.environ["MONGO_URI"], columns)
        # the same collection without index tables (the FDW-writes phase writes through it too)
        pg_fixture.create_foreign_table(self.admin.conn, "customers_bare", "_id text, first_name text, "
                                        "email text, town text, tags text[], n integer", collection=COLLECTION)
        self.setup_second_role()
        self.setup_orders()
        self.pool = outside_writers.CustomerPool(random.Random("%s/seed" % self.seed), self.args.documents)
        mongo_client.database(self.mongo, DATABASE)[COLLECTION].insert_many(self.pool.seed_documents())
        for name, keys, include, unique in INDEXES:
            self.admin.conn.notices.clear()
            self.admin.execute("SELECT idxtable.create_index('customers', %s, include => %s, is_unique => %s, "
                               "name => %s)", (keys, include, unique, name))
            warned = [n.strip() for n in self.admin.conn.notices if "not maintained" in n]
            self.check(not warned, "create_index(%s) warned that it is not maintained" % name, warned)
        value = self.admin.execute("SHOW idxtable.index_consistency") if self.has_setting() else None
        self.check(value == [("current",)], "idxtable.index_consistency is %r by default, not 'current'"
                   % (value[0][0] if value else "not defined"))
        self.routed = Session(ROUTED_SETTINGS)
        self.plain = Session(self.plain_settings(PLAIN_SETTINGS))
        self.wait_streaming("setup", names=[i[0] for i in INDEXES] + [ORDERS_INDEX])

    def setup_second_role(self):
        """SECOND_ROLE: USAGE on the server, a user mapping of its own (as the MongoDB user
        SECOND_MONGO_USER, readWrite on the database, where the server lets us create it; else with
        the test's credentials) and its own foreign table over the collection, without index tables."""
        cluster = pg_fixture.connect()
        try:
            pg_fixture.execute(cluster, "DROP ROLE IF EXISTS %s" % SECOND_ROLE)
            pg_fixture.execute(cluster, "CREATE ROLE %s LOGIN" % SECOND_ROLE)
        finally:
            cluster.close()
        self.admin.execute("GRANT USAGE ON FOREIGN SERVER mongo TO %s" % SECOND_ROLE)
        self.admin.execute("CREATE SCHEMA bob AUTHORIZATION %s" % SECOND_ROLE)
        db = mongo_client.database(self.mongo, DATABASE)
        password = "diffo-%d" % random.Random("%s/password" % self.seed).randrange(10 ** 9)
        try:
            with contextlib.suppress(pymongo.errors.OperationFailure):
                db.command("dropUser", SECOND_MONGO_USER)
            db.command("createUser", SECOND_MONGO_USER, pwd=password, roles=["readWrite"])
            options = [("username", SECOND_MONGO_USER), ("password", password), ("auth_source", DATABASE)]
            self.second_mongo_user = "%s (readWrite on %s)" % (SECOND_MONGO_USER, DATABASE)
        except pymongo.errors.OperationFailure as exc:
            options = pg_fixture.mongo_credentials()
            self.second_mongo_user = "the test's own (createUser failed: %s)" % first_line(exc)
        pg_fixture.create_user_mapping(self.admin.conn, "mongo", SECOND_ROLE, credentials=False, options=options)
        bob = pg_fixture.connect(DATABASE, user=SECOND_ROLE)
        try:
            pg_fixture.create_foreign_table(bob, SECOND_TABLE, "_id text, first_name text, email text, town text, "
                                            "tags text[], n integer", collection=COLLECTION)
        finally:
            bob.close()

    def setup_orders(self):
        """ORDERS: another collection of the database (the applier's stream watches both), with one
        index table, ORDERS_INDEX, dropped in the steady phase."""
        pg_fixture.create_foreign_table(self.admin.conn, ORDERS, "_id text, town text, total integer")
        mongo_client.database(self.mongo, DATABASE)[ORDERS].insert_many(
            [{"_id": "o%d" % i, "town": self.orders_rng.choice(TOWNS), "total": i} for i in range(300)])
        self.admin.execute("SELECT idxtable.create_index(%s, '{town}', name => %s)", (ORDERS, ORDERS_INDEX))

    def has_setting(self):
        return bool(self.admin.execute("SELECT 1 FROM pg_settings WHERE name = 'idxtable.index_consistency'"))

    def sync_status(self):
        """{index: row of idxtable.sync_status}, or the error text."""
        try:
            rows = self.admin.dict_rows("SELECT *, extract(epoch FROM applied_through) AS applied_epoch "
                                        "FROM idxtable.sync_status")
        except psycopg2.Error as exc:
            return "idxtable.sync_status: %s" % first_line(exc)
        return {r["name"]: r for r in rows}

    def wait_streaming(self, why, through=None, seconds=APPLIER_BACK_SECONDS, names=None):
        """Wait until every index (of names, default the customers') is valid with an
        applied_through (>= the epoch `through`); one check.  Returns the last sync_status."""
        names = names or [i[0] for i in INDEXES]
        deadline = time.monotonic() + seconds
        started = time.monotonic()
        while True:
            status = self.sync_status()
            ok = isinstance(status, dict) and all(
                name in status and status[name]["state"] == "valid"
                and status[name]["applied_epoch"] is not None
                and (through is None or float(status[name]["applied_epoch"]) >= through)
                for name in names)
            if ok or time.monotonic() > deadline or isinstance(status, str):
                break
            time.sleep(0.25)
        self.stats["catch up"][why] = time.monotonic() - started
        self.check(ok, "%s: idxtable.sync_status did not show every index valid and applied%s within %d s"
                   % (why, " through the last write" if through is not None else "", seconds),
                   [status] if isinstance(status, str) else
                   ["%s: %s" % (name, {k: status.get(name, {}).get(k) for k in
                                       ("state", "applied_through", "lag", "last_error")})
                    for name in names])
        return status

    # ---- pairs

    def pair(self, held=False):
        """A routed query and the same unrouted, with the writers held (by the caller if held)."""
        query = self.queries.make()
        stats = self.stats[self.phase]
        with (contextlib.nullcontext() if held else self.gate.paused()):
            index = routed_index(self.routed, query)
            routed = self.routed.run(query.sql, query.params)
            plain = self.plain.run(query.sql, query.params)
            diagnosis = []
            if index and not routed.failed() and not plain.failed() and routed.rows != plain.rows:
                diagnosis = self.diagnose(index, query, routed.rows, plain.rows)
            fdw_insert = None
            if self.rng.random() < FDW_INSERT_SHARE:
                fdw_insert = self.insert_duplicate(self.held_email(query, plain))
        stats["pairs"] += 1
        if index:
            stats["routed"] += 1
        lines = ["sql: " + query.show(), "plan: %s" % (("Index Table: " + index) if index else "not routed")]
        if plain.failed():
            self.check(False, "the unrouted query failed", lines + ["unrouted: " + plain.show()])
        elif not index and self.args.replica_set:
            # its plain scan reads as the URI says (secondaryPreferred): it may be stale by design
            stats["not routed (not compared)"] += 1
        elif routed.failed():
            if routed.sqlstate == NOT_CURRENT and self.phase not in STRICT_PHASES:
                stats["IX001"] += 1
            else:
                stats["errors"] += 1
                self.check(False, "the routed query failed", lines + ["routed: " + routed.show()])
        else:
            ok = routed.rows == plain.rows
            if not ok:
                stats["mismatches"] += 1
                if self.conflict_only(query, routed.rows, plain.rows):
                    stats["conflict mismatches"] += 1
                    lines.append("(the missing rows share their lower(email) with another fact: "
                                 "an outside duplicate of a unique key)")
            self.check(ok, "routed != unrouted",
                       lines + row_diff(hashable(routed.rows), hashable(plain.rows)) + diagnosis)
        if fdw_insert is not None and fdw_insert[0] is not None:
            self.check_insert(*fdw_insert)

    def diagnose(self, index, query, routed, plain, limit=3):
        """What the index and its applier said when a routed query differed
        (read while the writers are still held)."""
        status = self.sync_status()
        row = status.get(index, {}) if isinstance(status, dict) else {}
        lines = ["sync_status(%s): %s" % (index, {k: row.get(k) for k in
                                                  ("state", "applied_through", "lag", "last_error")})]
        if query.kind in ("covering", "count"):
            return lines
        r, p = collections.Counter(hashable(routed)), collections.Counter(hashable(plain))
        entries = mongo_client.database(self.mongo, DATABASE)["idxtable.%s.%s" % (COLLECTION, index)]
        for fact in list(((r - p) + (p - r)).elements())[:limit]:
            _id = ObjectId(fact[0]) if re.fullmatch(r"[0-9a-f]{24}", fact[0]) else fact[0]
            found = [{k: e.get(k) for k in ("_id", "v")} for e in entries.find({"id": _id})]
            lines.append("entries of %s: %s" % (fact[0], found or "none"))
            if index == UNIQUE_INDEX and query.kind in ("email", "emails"):
                key = lower(fact[2] if query.kind == "email" else fact[1])
                claim = entries.find_one({"_id": {"k0": key}})
                holder = claim and self.mongo[DATABASE][COLLECTION].find_one({"_id": claim.get("id")})
                lines.append("claim of %r: %s (holder now: %s)" % (
                    key, claim and claim.get("id"), holder and {k: holder.get(k) for k in ("_id", "email")}))
        return lines

    def conflict_only(self, query, routed, plain):
        """Do the rows differ only by facts whose email another returned fact
        shares (the unique index can hold one of them)?"""
        if query.kind not in ("email", "emails"):
            return False
        at = 2 if query.kind == "email" else 1
        keys = collections.Counter(lower(r[at]) for r in plain)
        r, p = collections.Counter(hashable(routed)), collections.Counter(hashable(plain))
        return all(keys[lower(row[at])] > 1 for row in ((r - p) + (p - r)).elements())

    def held_email(self, query, plain):
        """An email a document holds now (writers held): the one written
        last (maybe not applied yet), or one the email query found."""
        if query.kind == "email" and not plain.failed() and plain.rows and self.rng.random() < 0.5:
            return plain.rows[0][2]
        email = self.pool.latest_email()
        if email is None:
            return None
        held = self.plain.run("SELECT count(*) FROM customers WHERE lower(email) = lower(%s)", (email,))
        return email if not held.failed() and held.rows[0][0] > 0 else None

    def insert_duplicate(self, email):
        """INSERT through the FDW of an email an outside fact holds (another
        case of it): must fail with 23505 (or IX001 while the applier is
        away, outside the steady phase)."""
        if email is None:
            return None, None, None
        self.fdw_serial += 1
        _id = "fdw-%d" % self.fdw_serial
        out = self.routed.run("INSERT INTO customers (_id, first_name, email, town) VALUES (%s, 'Fdw', %s, 'Oslo')",
                              (_id, email.swapcase()))
        why = []
        if not out.failed():
            status = self.sync_status()
            row = status.get(UNIQUE_INDEX, {}) if isinstance(status, dict) else {}
            why.append("sync_status(%s): %s" % (UNIQUE_INDEX, {k: row.get(k) for k in
                                                              ("state", "applied_through", "last_error")}))
            appliers = self.admin.run("SELECT state, pid, restarts FROM idxtable.appliers")
            why.append("idxtable.appliers (state, pid, restarts): %s" % appliers.show())
            # take it back, so that the writers' world stays theirs
            self.routed.run("DELETE FROM customers WHERE _id = %s", (_id,))
        return email, out, why

    def check_insert(self, email, out, why):
        stats = self.stats[self.phase]
        stats["fdw inserts"] += 1
        if out.sqlstate == NOT_CURRENT and self.phase not in STRICT_PHASES:
            stats["IX001"] += 1
            return
        self.check(out.sqlstate == UNIQUE_VIOLATION,
                   "an INSERT through the FDW of an email an outside document holds did not fail with 23505",
                   ["email: %r (inserted in another case)" % email,
                    "outcome: " + (out.show() if out.failed() else "inserted")] + why)

    # ---- disruptions

    def applier_pids(self):
        return [r[0] for r in self.admin.execute(
            "SELECT pid FROM pg_stat_activity WHERE backend_type = %s AND datname = %s", (APPLIER, DATABASE))]

    def kill_applier(self):
        pids = self.applier_pids()
        for pid in pids:
            self.admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        self.stats[self.phase]["kills"] += len(pids)
        if not pids:
            self.stats[self.phase]["kills missed (no applier)"] += 1
        return bool(pids)

    def restart_server(self):
        """test/env restart-mongo, with the reader held (the writers go on and
        meet the restart)."""
        with self.reader.gate.paused():
            started = time.monotonic()
            done = subprocess.run([os.path.join(HERE, "env"), "restart-mongo"], capture_output=True, text=True,
                                  timeout=120)
            self.stats[self.phase]["restart seconds"] += round(time.monotonic() - started, 1)
        self.stats[self.phase]["restarts"] += 1
        self.check(done.returncode == 0, "test/env restart-mongo failed", done.stderr.strip().splitlines()[-5:])

    def arm_fault(self):
        """A new failpoint for the applier's commands, if an applier runs
        (one that waits for its restart would not meet it)."""
        pids = self.applier_pids()
        self.pids_seen.update(pids)
        if not pids:
            self.stats[self.phase]["faults skipped (no applier)"] += 1
            return False
        name, data = self.rng.choice(FAULTS if not self.args.cluster else
                                     [f for f in FAULTS if f[0] not in NOT_ON_A_ROUTER])
        data = dict(data, appName=APPLIER)
        for client in self.fault_clients():
            client.admin.command(SON([("configureFailPoint", name), ("mode", "alwaysOn"), ("data", data)]))
        self.stats[self.phase]["faults armed"] += 1
        try:
            time.sleep(FAULT_WINDOW)
        finally:
            fired = self.disarm_faults()
        return fired > 0

    def disarm_faults(self):
        """Turn both failpoints off; how often they fired (counted)."""
        fired = 0
        for client in self.fault_clients():
            for name in ("failCommand", "failGetMoreAfterCursorCheckout"):
                if self.args.cluster and name in NOT_ON_A_ROUTER:
                    continue
                reply = client.admin.command(SON([("configureFailPoint", name), ("mode", "off")]))
                fired += int(reply.get("count", 0))
        self.stats[self.phase]["faults fired"] += fired
        return fired

    def fault_clients(self):
        """The clients whose server the failpoints are set on: the one server, or with --cluster each
        router (a mongos has failpoints of its own, and libmongoc spreads the applier's commands over
        the routers of its URI)."""
        if not self.args.cluster:
            return [self.mongo]
        if not hasattr(self, "router_clients"):
            self.router_clients = mongo_client.each_router(self.mongo)
        return self.router_clients

    def durable_test_server(self):
        """None if restart-mongo can run, else why not."""
        state = os.environ.get("IDXTABLE_ENV_DIR", "/tmp/idxtable_fdw_env")
        if not os.path.exists(os.path.join(state, "mongo.pid")):
            return "no test server of test/env (MONGO_URI given)"
        if not os.path.exists(os.path.join(state, "mongo.dbpath")):
            return "test/env was started without IDXTABLE_MONGO_DURABLE=1"
        return None

    # ---- phases

    def set_phase(self, phase):
        """The phase, for the threads too; the exiting sessions and the second role write in every
        phase but the FDW-writes one (whose stretches they would keep unarmed: it runs exiting
        sessions of its own)."""
        self.phase = phase
        self.phase_started = time.monotonic()
        for thread in (self.reader, self.exiting, self.second):
            if thread is not None:
                thread.phase = phase
        for thread in (self.exiting, self.second):
            if thread is not None:
                (thread.active.clear if phase == ARMED else thread.active.set)()

    def run_phase(self, phase, disrupt=None, every=None):
        self.set_phase(phase)
        started = time.monotonic()
        end = started + self.args.seconds
        next_disruption = started + (every / 2 if every else 0)
        while time.monotonic() < end:
            time.sleep(self.rng.uniform(0.01, 0.1))      # the writers write
            if disrupt and time.monotonic() >= next_disruption:
                # one that did not take (no applier, a failpoint no command
                # met) is tried again after the next pair
                if disrupt() is not False:
                    next_disruption = time.monotonic() + every
            self.pair()
        stats = self.stats[phase]
        stats["seconds"] = round(time.monotonic() - started, 1)
        if phase in (STEADY, LAGGING):
            share = stats["routed"] / max(1, stats["pairs"])
            self.check(share >= MIN_ROUTED_SHARE, "only %d of %d pairs went through an index table"
                       % (stats["routed"], stats["pairs"]))
            self.any_pairs(self.args.any_pairs)

    def any_pairs(self, count):
        """For information, what the pairs would see without the wait: the
        same pairs with idxtable.index_consistency = any (the routed query
        may miss the writes the applier has not applied yet: no check)."""
        try:
            self.routed.execute("SET idxtable.index_consistency = 'any'")
        except psycopg2.Error:
            return
        stats = self.stats["any"]
        for _ in range(count):
            time.sleep(self.rng.uniform(0.01, 0.1))
            query = self.queries.make()
            with self.gate.paused():
                index = routed_index(self.routed, query)
                routed = self.routed.run(query.sql, query.params)
                plain = self.plain.run(query.sql, query.params)
            stats["pairs"] += 1
            stats["routed"] += bool(index)
            stats["differ"] += not routed.failed() and not plain.failed() and routed.rows != plain.rows
        self.routed.execute("RESET idxtable.index_consistency")

    def fdw_write(self, bare=True, emails=False):
        """One random write through the FDW (in the table's consistency mode): INSERT of new
        customers, UPDATE or DELETE of customers it inserted, an UPDATE of outside customers by town,
        a write through customers_bare, which maintains no index table, or (emails) two new emails
        for one customer it inserted, back to back, or a new email for a customer the outside writers
        write too."""
        stats = self.stats[self.phase]
        # writes through customers_bare are rare: each takes the FDW's transactions back into the
        # applier's stream for a second or more
        kind = self.rng.choices(["insert", "update", "update_town", "delete", "bare", "emails"],
                                [3, 3, 2, 2, 1 if bare else 0, 3 if emails else 0])[0]
        mine = self.fdw_rows
        if kind == "insert" or not mine:
            rows = []
            for _ in range(self.rng.randint(1, 20)):
                self.fdw_serial += 1
                rows.append(("fdwa-%d" % self.fdw_serial, "Fdw%d" % self.fdw_serial,
                             "Fdw.Writer%d@Example.org" % self.fdw_serial, self.rng.choice(TOWNS),
                             self.rng.sample(TAGS, self.rng.randint(0, 2)), self.fdw_serial))
            out = self.routed.run("INSERT INTO customers (_id, first_name, email, town, tags, n) VALUES "
                                  + ", ".join(["(%s, %s, %s, %s, %s::text[], %s)"] * len(rows)),
                                  tuple(v for r in rows for v in r))
            if not out.failed():
                mine.extend(r[0] for r in rows)
            kind = "insert"
        elif kind == "update":
            ids = self.rng.sample(mine, min(len(mine), self.rng.randint(1, 10)))
            out = self.routed.run("UPDATE customers SET town = %s, tags = %s, first_name = first_name || 'u' "
                                  "WHERE _id = ANY (%s)", (self.rng.choice(TOWNS),
                                                           self.rng.sample(TAGS, self.rng.randint(0, 3)), ids))
        elif kind == "update_town":
            out = self.routed.run("UPDATE customers SET first_name = 'Fdw ' || coalesce(first_name, '') "
                                  "WHERE town = %s AND n %% 7 = %s", (self.rng.choice(TOWNS), self.rng.randrange(7)))
        elif kind == "emails" and self.rng.random() < 0.5:
            _id = self.rng.choice(mine)
            for _ in range(2):
                self.fdw_serial += 1
                out = self.routed.run("UPDATE customers SET email = %s WHERE _id = %s",
                                      ("Fdw.Writer%d@Example.org" % self.fdw_serial, _id))
                if out.failed():
                    break
        elif kind == "emails":
            # a customer the outside writers write too, found by its email
            kind = "outside email"
            self.fdw_serial += 1
            out = self.routed.run("UPDATE customers SET email = %s WHERE lower(email) = %s",
                                  ("Fdw.Writer%d@Example.org" % self.fdw_serial,
                                   lower(self.pool.pick_email(self.rng))))
        elif kind == "delete":
            ids = self.rng.sample(mine, min(len(mine), self.rng.randint(1, 5)))
            out = self.routed.run("DELETE FROM customers WHERE _id = ANY (%s)", (ids,))
            if not out.failed():
                for _id in ids:
                    mine.remove(_id)
        else:
            ids = self.rng.sample(mine, min(len(mine), self.rng.randint(1, 5)))
            out = self.routed.run("UPDATE customers_bare SET town = %s, tags = %s WHERE _id = ANY (%s)",
                                  (self.rng.choice(TOWNS), self.rng.sample(TAGS, self.rng.randint(0, 2)), ids))
        stats["fdw writes"] += 1
        if (out.sqlstate == UNIQUE_VIOLATION and kind in ("update_town", "outside email")
                and self.phase == ORDERED):
            # a customer the outside writers write may share its email with another (an outside
            # duplicate): writing its entries refuses the key the other holds, or the UPDATE gives
            # both the same new email
            stats["fdw writes refused (23505: outside customers sharing an email)"] += 1
            return
        if out.failed():
            stats["fdw write errors"] += 1
            self.check(False, "a write through the FDW failed", ["%s: %s" % (kind, out.show())])

    def skips_fdw(self):
        """Does the applier leave the FDW's own transactions out now (every index table)?"""
        out = self.admin.run("SELECT coalesce(bool_and(skips_fdw_transactions), false) FROM idxtable.sync_status")
        return not out.failed() and bool(out.rows[0][0])

    def phase_armed(self):
        """FDW writes: the outside writers are held for stretches in which random writes through the
        FDW run between pairs, until the applier's stream leaves the FDW's own transactions out (at
        most ARMED_WAIT s) and ARMED_AFTER s more, in which writes through customers_bare must make
        it take them again, as the outside writes after each stretch must; no duplicate emails are
        written, as a unique key conflict would keep the stream from it."""
        self.set_phase(ARMED)
        started = time.monotonic()
        end = started + self.args.seconds
        stats = self.stats[ARMED]
        while time.monotonic() < end:
            time.sleep(ARMED_GAP)               # the writers write
            with self.gate.paused():
                stretch_end = time.monotonic() + ARMED_WAIT
                armed_seen = False
                leavers = self.warm_leavers()
                try:
                    while time.monotonic() < stretch_end:
                        # writes through customers_bare only once it is on: they must turn it off
                        self.fdw_write(bare=armed_seen)
                        self.pair(held=True)
                        if not armed_seen and self.skips_fdw():
                            armed_seen = True
                            self.leave_armed(leavers)
                            stretch_end = time.monotonic() + ARMED_AFTER
                finally:
                    for leaver in leavers:
                        if leaver not in self.leavers:
                            leaver.abandon()
                            stats["sessions closed unarmed (never armed in the stretch)"] += 1
                stats["stretches"] += 1
                stats["stretches with the FDW's transactions left out"] += armed_seen
        for writer in self.writers:
            writer.write_duplicates = self.args.duplicates
        stats["seconds"] = round(time.monotonic() - started, 1)
        self.check(stats["stretches with the FDW's transactions left out"] > 0,
                   "in no stretch of FDW writes did the applier leave the FDW's own transactions out "
                   "(%d stretches)" % stats["stretches"])
        self.check(stats["sessions exited while armed"] > 0
                   and stats["sessions exited after a doubt while armed"] > 0,
                   "no session exited right after its commit while the applier left the FDW's transactions out "
                   "(%d exited, %d after a doubt)" % (stats["sessions exited while armed"],
                                                      stats["sessions exited after a doubt while armed"]))

    def warm_leavers(self):
        """At the start of a stretch (writers held): two sessions that write once now, so that they are
        registered before the stream arms and it leaves their transactions out: one through customers
        (no doubt), one through customers_bare or the second role's table (a doubt)."""
        leavers = []
        for kind in ("customers", self.rng.choice(["customers_bare", "second role"])):
            serial = len(self.leavers) + len(leavers) + 1
            leaver = other_sessions.Leaver(DATABASE, kind, self.rng.choice(other_sessions.Leaver.SHAPES), serial,
                                           self.rng, SECOND_ROLE, SECOND_TABLE)
            leaver.open()
            leaver.warm()
            self.check(leaver.error is None, "the first write of a session that is to exit failed (%s): %s"
                       % (kind, leaver.error))
            leavers.append(leaver)
        return leavers

    def leave_armed(self, leavers):
        """While the stream leaves the FDW's transactions out (writers held): each session, after an idle
        moment, writes once more and exits right after its commit; its rows must then be found, routed
        at once (with current: the applier must have seen the doubt of a session that is gone), and a
        unique email it wrote must be refused to an INSERT through customers."""
        stats = self.stats[ARMED]
        checks = other_sessions.LeaverChecks(OutcomeRun(self.routed), OutcomeRun(self.plain))
        for leaver in leavers:
            time.sleep(LEAVE_IDLE)
            armed = self.skips_fdw()
            leaver.finish()
            self.leavers.append(leaver)
            for email in leaver.emails:
                self.other_emails.add(email)
            other_sessions.account(leaver, stats)
            stats["sessions exited while armed"] += armed
            stats["sessions exited after a doubt while armed"] += armed and leaver.doubt
            self.check(leaver.error is None, "the last write of a session that exits after it failed (%s, %s): %s"
                       % (leaver.kind, leaver.shape, leaver.error))
            time.sleep(LEAVE_SETTLE)
            checks.unique(leaver, self.check, False, stats)
            checks.rows(leaver, self.check, False, stats)

    # ---- the drop_index of another table's last index table

    def orders_step(self):
        """Steady phase: an outside write to ORDERS, and after half of the phase the drop."""
        if self.drop is not None:
            return True
        if time.monotonic() - self.phase_started >= self.args.seconds / 2:
            self.drop_orders_index()
            return True
        self.orders_serial += 1
        with contextlib.suppress(pymongo.errors.PyMongoError):
            mongo_client.database(self.mongo, DATABASE)[ORDERS].insert_one(
                {"_id": "w%d" % self.orders_serial, "town": self.orders_rng.choice(TOWNS), "total": 1})
        return True

    def drop_orders_index(self):
        """drop_index of ORDERS' only index table.  First, writers held, a routed read through
        ORDERS_INDEX compared with the unrouted one.  Then, writers and reader held, an outside write
        to ORDERS, applied (its entry polled in MongoDB: a routed read would write a wake-up after
        it), and at once the drop (timed): the applier's stored position is then likely that write's
        event, which its stream no longer sees once it watches customers only (item 4 of issue 26:
        mongod 5.1+ and the test server refuse a resume after it with 280).  The writers and the
        reader go on right after the drop.  A watcher polls the states of customers' index tables
        until the phase ends."""
        sql = "SELECT _id, town FROM orders WHERE town = %s ORDER BY _id"
        town = self.orders_rng.choice(TOWNS)
        with self.gate.paused():
            index = routed_index(self.routed, Query("orders", sql, (town,)))
            routed = self.routed.run(sql, (town,))
            plain = self.plain.run(sql, (town,))
        self.check(index == ORDERS_INDEX and not routed.failed() and routed.rows == plain.rows,
                   "before its drop, a routed read through %s: %s, routed %s, unrouted %s"
                   % (ORDERS_INDEX, index, routed.show(), plain.show()))
        entries = self.admin.execute("SELECT collection FROM idxtable.index_defs WHERE name = %s", (ORDERS_INDEX,))
        db = mongo_client.database(self.mongo, DATABASE)
        self.drop = {"watcher": StateWatcher([i[0] for i in INDEXES]), "log": log_size(),
                     "at": round(time.monotonic() - self.phase_started, 1)}
        self.drop["watcher"].start()
        # the reader held too: its routed reads would write wake-ups after the write
        with self.gate.paused(), self.reader.gate.paused():
            self.orders_serial += 1
            _id = "w%d" % self.orders_serial
            db[ORDERS].insert_one({"_id": _id, "town": town, "total": 2})
            deadline = time.monotonic() + APPLIER_BACK_SECONDS
            while db[entries[0][0]].find_one({"id": _id}, {"_id": 1}) is None and time.monotonic() < deadline:
                time.sleep(0.02)
            self.drop["applied"] = round(APPLIER_BACK_SECONDS - (deadline - time.monotonic()), 2)
            started = time.monotonic()
            out = self.admin.run("SELECT idxtable.drop_index(%s)", (ORDERS_INDEX,))
            self.drop["seconds"] = round(time.monotonic() - started, 2)
        self.check(not out.failed(), "drop_index(%s) failed: %s" % (ORDERS_INDEX, out.show()))

    def check_drop(self):
        """After the steady phase: the drop ran, customers' index tables stayed valid (never stale, not
        rebuilt, no lost history: the server log), the applier said its stream watches fewer
        collections, and the definition is gone."""
        if not self.check(self.drop is not None,
                          "the drop_index of %s did not run in the steady phase" % ORDERS_INDEX):
            return
        watcher = self.drop["watcher"]
        watcher.stop()
        self.drop["polls"] = watcher.polls
        self.check(watcher.polls > 0 and all(states == {"valid"} for states in watcher.states.values())
                   and watcher.error is None,
                   "customers' index tables did not stay valid after the drop_index of %s: states seen %s%s"
                   % (ORDERS_INDEX, {k: sorted(v) for k, v in watcher.states.items()},
                      ", " + watcher.error if watcher.error else ""))
        gone = self.admin.run("SELECT count(*) FROM idxtable.index_defs WHERE name = %s", (ORDERS_INDEX,))
        self.check(not gone.failed() and gone.rows[0][0] == 0,
                   "%s is still defined: %s" % (ORDERS_INDEX, gone.show()))
        log = log_since(self.drop["log"])
        if log is None:
            self.drop["server log"] = "not readable (%s)" % server_log()
            return
        rebuilt = re.findall(r'rebuilding stale index "customers_\w+"|cannot resume', log)
        fewer = "watches fewer collections" in log
        self.drop["server log"] = "%s, %s" % ("rebuilds or lost history: %s" % rebuilt if rebuilt
                                              else "no rebuild, no lost history",
                                              "the stream watches fewer collections" if fewer else
                                              "no line about fewer collections")
        self.check(not rebuilt, "after the drop_index of %s the server log says %s" % (ORDERS_INDEX, rebuilt))
        self.check(fewer, "after the drop_index of %s the applier did not log that its stream watches fewer "
                   "collections (%s)" % (ORDERS_INDEX, server_log()))

    def phase_ordered(self):
        """Ordered FDW writes beside the outside writers (see the module's docstring).  The mode is
        the server's option: an ALTER FOREIGN TABLE would wait for a routed query that waits for the
        applier, whose lock on the table would queue behind the ALTER's (an IX001 after
        idxtable.sync_wait_timeout; README, "Reads when other applications write to MongoDB")."""
        self.admin.execute("ALTER SERVER mongo OPTIONS (ADD consistency 'ordered')")
        try:
            self.run_phase(ORDERED, lambda: self.fdw_write(bare=False, emails=True), ORDERED_EVERY)
        finally:
            self.admin.execute("ALTER SERVER mongo OPTIONS (DROP consistency)")
        self.check(self.stats[ORDERED]["fdw writes"] > 0, "no write through the FDW ran")

    def phase_killed(self):
        self.run_phase(KILLED, self.kill_applier, self.args.kill_every)
        self.check(self.stats[self.phase]["kills"] > 0, "no applier process to kill (backend_type %r)" % APPLIER)
        # that it comes back is checked at the end (sync_status)

    def phase_restarted(self):
        why_not = self.durable_test_server()
        if why_not and "MONGO_URI" in why_not:
            print("%s: skipped (%s)" % (RESTARTED, why_not))
            return
        self.phase = RESTARTED
        if not self.check(why_not is None, "cannot restart the test server: %s" % why_not):
            return
        every = max(1.0, self.args.seconds / max(1, self.args.restarts))
        self.run_phase(RESTARTED, self.restart_server, every)

    def phase_failpoints(self):
        self.phase = FAILPOINTS
        try:
            self.disarm_faults()
        except pymongo.errors.OperationFailure as exc:
            # a mongod without enableTestCommands
            print("%s: skipped (configureFailPoint: %s)" % (FAILPOINTS, exc))
            return
        self.pids_seen = set()
        try:
            self.run_phase(FAILPOINTS, self.arm_fault, self.args.fault_every)
        finally:
            self.disarm_faults()
        self.pids_seen.update(self.applier_pids())
        self.stats[self.phase]["applier processes seen"] = len(self.pids_seen)
        self.check(self.stats[self.phase]["faults fired"] > 0,
                   "no failpoint fired: no command with appName %r reached MongoDB" % APPLIER)

    # ---- the end

    def final(self):
        self.phase = "end"
        with self.mongo.start_session() as session:
            mongo_client.database(self.mongo, DATABASE)["marker"].insert_one({"at": time.time()}, session=session)
            through = session.operation_time
        status = self.wait_streaming("after the writes", through.time if through else None, CATCH_UP_SECONDS)
        if isinstance(status, dict):
            for name, _, _, _ in INDEXES:
                row = status.get(name, {})
                self.stats["end"]["lag " + name] = str(row.get("lag"))
                self.stats["end"]["events " + name] = row.get("events_applied")
                self.stats["end"]["entries " + name] = row.get("entries_written")
                self.stats["end"]["conflicts " + name] = row.get("conflicts")
        self.barrier()
        expected, groups = self.expected_conflicts()
        for name, _, _, _ in INDEXES:
            try:
                row = self.admin.dict_rows("SELECT * FROM idxtable.verify_index(%s)", (name,))[0]
            except psycopg2.Error as exc:
                self.check(False, "verify_index(%s) failed: %s" % (name, first_line(exc)))
                continue
            drift = {k: row.get(k) for k in ("missing", "orphan", "stale", "unconvertible")}
            self.check(all(v == 0 for v in drift.values()), "verify_index(%s) is not clean: %s" % (name, row))
            want = expected if name == UNIQUE_INDEX else 0
            self.check(row.get("conflicts") == want, "verify_index(%s) counts %s conflicts, MongoDB holds %d "
                       "documents that share a unique key with another" % (name, row.get("conflicts"), want))
            self.stats["end"]["verify " + name] = " ".join("%s=%s" % kv for kv in row.items())
        self.check_conflicts_table(groups)
        self.check_other_rows()

    def check_other_rows(self):
        """Every row the exiting sessions and the second role left: a routed query by their emails
        returns what the unrouted one does, and that is what they wrote (where none of their writes
        failed)."""
        leavers = self.leavers + self.exiting.all_leavers
        certain = [e for leaver in leavers if leaver.error is None for e in leaver.emails]
        want = sorted(i for leaver in leavers if leaver.error is None for i in leaver.rows)
        if not self.second.uncertain:
            certain += self.second.emails
            want = sorted(want + list(self.second.rows))
        every = [e.lower() for leaver in leavers for e in leaver.emails] + [e.lower() for e in self.second.emails]
        routed = self.routed.run(other_sessions.ROWS_BY_EMAIL, (every,))
        plain = self.plain.run(other_sessions.ROWS_BY_EMAIL, (every,))
        found = self.plain.run(other_sessions.ROWS_BY_EMAIL, ([e.lower() for e in certain],))
        self.stats["end"]["rows of the exiting sessions and the second role"] = "%s routed, %s unrouted" % (
            len(routed.rows) if routed.rows is not None else routed.show(),
            len(plain.rows) if plain.rows is not None else plain.show())
        self.check(not routed.failed() and not plain.failed() and routed.rows == plain.rows,
                   "routed != unrouted for the rows of the exiting sessions and the second role",
                   ["routed: " + routed.show(), "unrouted: " + plain.show()]
                   + (row_diff(routed.rows, plain.rows)
                      if routed.rows is not None and plain.rows is not None else []))
        got = sorted(r[0] for r in found.rows or [])
        self.check(not found.failed() and got == want,
                   "the collection does not hold what the exiting sessions and the second role wrote",
                   ["only written: %s" % sorted(set(want) - set(got))[:10],
                    "only found: %s" % sorted(set(got) - set(want))[:10]])

    def barrier(self):
        """A routed query through each index: with current it waits for the
        cluster time of a ping, after every write (sync_status's
        applied_through has whole seconds only)."""
        for name, sql in BARRIERS.items():
            index = routed_index(self.routed, Query("barrier", sql, ()))
            out = self.routed.run(sql)
            self.check(index == name and not out.failed(),
                       "the routed query through %s after the writes: %s, %s"
                       % (name, "Index Table: %s" % index if index else "not routed", out.show()))

    def expected_conflicts(self):
        """(documents beyond the first of each lower(email), the groups of
        _ids sharing one) in MongoDB now."""
        groups = collections.defaultdict(list)
        for doc in mongo_client.database(self.mongo, DATABASE)[COLLECTION].find({}, {"email": 1}):
            if isinstance(doc.get("email"), str):
                groups[lower(doc["email"])].append(str(doc["_id"]))
        groups = {k: v for k, v in groups.items() if len(v) > 1}
        self.stats["end"]["duplicated emails"] = len(groups)
        return sum(len(v) - 1 for v in groups.values()), groups

    def check_conflicts_table(self, groups):
        """Each document of a duplicated email but one is in idxtable.conflicts."""
        try:
            rows = self.admin.execute("SELECT fact_id, holder_id FROM idxtable.conflicts WHERE index_name = %s",
                                      (UNIQUE_INDEX,))
        except psycopg2.Error as exc:
            self.check(False, "idxtable.conflicts: %s" % first_line(exc))
            return
        self.stats["end"]["idxtable.conflicts rows"] = len(rows)
        recorded = {str(json_util.loads(r[0])) for r in rows}
        unrecorded = {k: v for k, v in groups.items() if len([i for i in v if i not in recorded]) > 1}
        self.check(not unrecorded, "%d duplicated emails have more than one document not in idxtable.conflicts"
                   % len(unrecorded), ["%s: %s" % kv for kv in list(unrecorded.items())[:5]])
        status = self.sync_status()
        if isinstance(status, dict):
            for name, _, _, _ in INDEXES:
                shown = status.get(name, {}).get("conflicts")
                want = len({r[0] for r in rows}) if name == UNIQUE_INDEX else 0
                self.check(shown == want, "idxtable.sync_status shows %s conflicts for %s, idxtable.conflicts "
                           "holds %d facts" % (shown, name, want))

    # ---- all of it

    def run(self):
        started = time.monotonic()
        wanted = self.wanted_phases(self.args.phase or PHASES, NOT_IN_A_REPLICA_SET)
        if self.args.cluster:
            for phase in [p for p in wanted if p in NOT_ON_A_CLUSTER]:
                print("%s: skipped (--cluster)" % phase)
            wanted = [p for p in wanted if p not in NOT_ON_A_CLUSTER]
        self.setup()
        self.queries = QueryGenerator(self.rng, self.pool)
        self.writers = [outside_writers.Writer(n, self.seed, self.pool, self.gate, DATABASE, COLLECTION,
                                               rate=self.args.rate / self.args.writers,
                                               # none from the start when the FDW-writes phase runs
                                               duplicates=self.args.duplicates and ARMED not in wanted)
                        for n in range(self.args.writers)]
        self.reader = Reader(self.seed, self.pool, self.report, self.other_emails)
        self.exiting = other_sessions.ExitingSessions(self.seed, DATABASE, self.gate, self.report.check,
                                                      self.other_emails, STRICT_PHASES, SECOND_ROLE, SECOND_TABLE,
                                                      ROUTED_SETTINGS, self.plain_settings(PLAIN_SETTINGS))
        self.second = other_sessions.SecondRole(self.seed, DATABASE, SECOND_ROLE, SECOND_TABLE, self.gate,
                                                self.report.check, self.other_emails, STRICT_PHASES,
                                                rate=SECOND_ROLE_RATE)
        self.adapt_actors()
        actors = [self.exiting, self.second]
        for thread in self.writers + [self.reader] + actors:
            thread.start()
        try:
            if ARMED in wanted:
                self.phase_armed()
            if STEADY in wanted:
                try:
                    self.run_phase(STEADY, self.orders_step, ORDERS_EVERY)
                finally:
                    self.check_drop()
            if ORDERED in wanted:
                self.phase_ordered()
            if FAILPOINTS in wanted:
                self.phase_failpoints()
            if KILLED in wanted:
                self.phase_killed()
            if RESTARTED in wanted:
                self.phase_restarted()
            if LAGGING in wanted:
                self.phase_lagging()
            if STEPDOWN in wanted:
                self.phase_stepdown()
        finally:
            for thread in self.writers + actors:
                thread.stop()
            self.reader.stop()
        self.phase = "threads"
        for thread in self.writers + [self.reader] + actors:
            self.check(thread.failure is None, "%s died: %s" % (thread.name, thread.failure))
        self.final()
        self.reset_replication()
        self.summary(time.monotonic() - started)

    def summary_others(self):
        """What the exiting sessions, the second role and the drop did."""
        shown = ["sessions exited", "sessions exited after a doubt", "sessions exited after a transaction",
                 "sessions exited while armed", "sessions exited after a doubt while armed", "rows left",
                 "checks", "checks routed", "checks with wrong rows", "checks IX001 or no connection",
                 "checks not routed (not compared)",
                 "unique checks", "unique checks refused (23505)", "unique checks failed (40001)",
                 "sessions closed unarmed (never armed in the stretch)"]
        for phase in ALL_PHASES:
            s = collections.Counter(self.exiting.stats.get(phase, {}))
            if phase == ARMED:
                s.update(self.stats[ARMED])
            if s["sessions exited"] or s["sessions closed unarmed (never armed in the stretch)"]:
                extra = [k for k in s if k.startswith("sessions with a failed write")]
                print("%s: exiting sessions: %s" % (phase, ", ".join("%s %d" % (k, s[k]) for k in shown + extra
                                                                     if k in s)))
        print("second role %s (MongoDB user %s) through %s: %s" % (
            SECOND_ROLE, self.second_mongo_user, SECOND_TABLE,
            "; ".join("%s: %s" % (phase, ", ".join("%s %d" % kv for kv in sorted(self.second.stats[phase].items())))
                      for phase in ALL_PHASES if phase in self.second.stats) or "no writes"))
        if self.drop is not None:
            print("drop_index(%s) at %s s of the steady phase (its last write applied in %s s): %s s; customers' "
                  "index tables: %s (%d polls); server log: %s"
                  % (ORDERS_INDEX, self.drop["at"], self.drop.get("applied"), self.drop.get("seconds"),
                                      {k: sorted(v) for k, v in self.drop["watcher"].states.items()},
                                      self.drop.get("polls", 0), self.drop.get("server log")))

    def summary(self, elapsed):
        ops, errors, duplicates = outside_writers.totals(self.writers)
        print("writers: %d operations (%s), %d duplicate emails written, errors: %s"
              % (sum(ops.values()), ", ".join("%s %d" % kv for kv in sorted(ops.items())), duplicates,
                 dict(errors) or "none"))
        disruptions = ["kills", "kills missed (no applier)", "restarts", "restart seconds", "faults armed",
                       "faults fired", "faults skipped (no applier)", "applier processes seen", "fdw writes",
                       "fdw write errors", "stretches", "stretches with the FDW's transactions left out"
                       ] + replica_set_phases.STATS
        for phase in ALL_PHASES:
            if phase in self.stats:
                s, r = self.stats[phase], self.reader.stats[phase]
                extra = ", ".join("%s %s" % (k, s[k]) for k in disruptions if k in s)
                print("%s: %d pairs (%d routed): %d routed != unrouted (%d at an outside duplicate of a unique "
                      "key), %d IX001, %d errors; %d INSERTs of held emails; reader: %d queries, %d IX001, "
                      "%d errors, %d with wrong rows; %s%s s"
                      % (phase, s["pairs"], s["routed"], s["mismatches"], s["conflict mismatches"], s["IX001"],
                         s["errors"], s["fdw inserts"], r["queries"], r["IX001"], r["errors"], r["wrong"],
                         extra + "; " if extra else "", s["seconds"]))
        self.summary_others()
        if "any" in self.stats:
            s = self.stats["any"]
            print("with idxtable.index_consistency = 'any' (information, no check): %d pairs (%d routed), "
                  "%d differ" % (s["pairs"], s["routed"], s["differ"]))
        for key, value in self.stats["end"].items():
            print("end: %s: %s" % (key, value))
        for key, value in self.stats["catch up"].items():
            print("catch up (%s): %.1f s" % (key, value))
        print("elapsed %.1f s" % elapsed)


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--documents", type=int, default=1500, help="customers seeded before the index builds")
    parser.add_argument("--seconds", type=float, default=10, help="length of each phase")
    parser.add_argument("--writers", type=int, default=3, help="outside writer threads")
    parser.add_argument("--rate", type=float, default=120, help="outside writes per second, all writers")
    parser.add_argument("--kill-every", type=float, default=5, help="seconds between applier kills")
    parser.add_argument("--restarts", type=int, default=1, help="test server restarts in its phase")
    parser.add_argument("--fault-every", type=float, default=3, help="seconds between failpoints")
    parser.add_argument("--any-pairs", type=int, default=20,
                        help="pairs run with index_consistency 'any' after the steady phase (information)")
    parser.add_argument("--no-duplicates", dest="duplicates", action="store_false",
                        help="the writers never write an email another document has")
    parser.add_argument("--phase", choices=ALL_PHASES, action="append", help="only this phase (repeatable)")
    replica_set_phases.add_arguments(parser, NOT_IN_A_REPLICA_SET)
    parser.add_argument("--cluster", action="store_true",
                        help="against a sharded cluster (test/env with IDXTABLE_MONGO_SHARDS): the customers "
                             "collection sharded on a hashed _id; the phases but for %s" % ", ".join(NOT_ON_A_CLUSTER))
    parser.add_argument("--details", type=int, default=MAX_DETAILED_FAILURES,
                        help="failures reported in detail (the rest in one line each)")
    return parser.parse_args()


def main():
    args = parse_args()
    seed = int(os.environ.get("DIFFO_SEED") or random.SystemRandom().randrange(2 ** 32))
    print("differential outside: seed %d (repeat with DIFFO_SEED=%d)" % (seed, seed), flush=True)
    report = Report(seed, args.details)
    try:
        Run(seed, args, report).run()
    except Exception as exc:  # a broken run is one failure more, and the tally still prints
        report.check(False, "run", "aborted: %s: %s" % (type(exc).__name__, exc))
    print(report.summary("differential outside"))
    return 1 if report.failed else 0


if __name__ == "__main__":
    sys.exit(main())
