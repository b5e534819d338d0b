#!/usr/bin/python3
"""MongoDB's driver specification tests for transactions, retryable writes and change streams, run against
the test server.

Run: /usr/bin/python3 test/server/spec_runner.py [--dir DIR] [--uri URI] [--timeout S] [-v]
     [--no-change-streams] [SUBSTRING...]

The test files (JSON) come from test/server/get_spec_tests (Debian's source of mongo-c-driver 1.23.1; see
test/server/README.md, "Specification tests"): transactions (legacy and unified format), the convenient
transactions API (with_transaction), retryable writes, change streams (unified format), and the unified
format's proof-of-concept files for these. Legacy files are converted to the unified format (spec_match.py)
and everything runs through one interpreter of the unified test format, up to schema version 1.7 (what
these files use of it), with pymongo as the driver.
Without --uri a fresh test server is started on a free port. SUBSTRING selects tests whose
"file: description" contains it. Prints one line per test, the skips grouped by reason, and ends with
`spec: N passed, M failed, K skipped`; exits non-zero on any failure.
"""

import argparse
import copy
import glob
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback

import pymongo
from bson import json_util
from bson.binary import UuidRepresentation
from bson.codec_options import CodecOptions
from bson.int64 import Int64
from pymongo import client_session, common, monitoring
from pymongo.change_stream import ChangeStream, ClusterChangeStream, CollectionChangeStream, DatabaseChangeStream
from pymongo.client_session import TransactionOptions
from pymongo.errors import BulkWriteError, OperationFailure, PyMongoError
from pymongo.operations import DeleteMany, DeleteOne, InsertOne, ReplaceOne, UpdateMany, UpdateOne
from pymongo.read_concern import ReadConcern
from pymongo.read_preferences import ReadPreference
from pymongo.write_concern import WriteConcern

from spec_match import MatchError, from_legacy, match, match_root_documents

HERE = os.path.dirname(os.path.abspath(__file__))
SERVER_SCRIPT = os.path.join(HERE, "mongo_test_server.py")
DEFAULT_DIR = os.path.join(HERE, "spec-tests")
SCHEMA_MAX = (1, 7)
CODEC = CodecOptions(document_class=dict, uuid_representation=UuidRepresentation.UNSPECIFIED)
FILES = ["transactions/legacy/*.json", "transactions/unified/*.json", "with_transaction/*.json",
         "retryable_writes/*.json", "unified/poc-transactions*.json", "unified/poc-retryable-writes.json",
         "change_streams/unified/*.json", "unified/poc-change-streams.json"]
SPEC_STAMP = "mongo-c-driver-1.23.1-2.stamp"  # written by get_spec_tests: its version and revision
CHANGE_STREAM_FILES = ("change_streams/", "unified/poc-change-streams.json")
# The change-streams files run unless --no-change-streams is given (for a server without change streams).
CHANGE_STREAMS_DEFAULT = True
CHANGE_STREAMS_OFF = "change streams: not run (--no-change-streams)"
# How long iterateUntilDocumentOrError waits for a change (each getMore waits up to the server's 1 s).
ITERATE_LIMIT = 10.0
SENSITIVE = {"authenticate", "saslstart", "saslcontinue", "getnonce", "createuser", "updateuser",
             "copydbgetnonce", "copydbsaslstart", "copydb", "hello", "ismaster"}
ITERABLE_RESULTS = {"find", "aggregate"}  # results whose documents are matched as root-level ones
TXN_STATES = {1: "none", 2: "starting", 3: "in_progress", 4: "committed", 5: "committed", 6: "aborted"}
# codeName of server errors that pymongo reports without one (write errors carry only the code)
CODE_NAMES = {11000: "DuplicateKey", 112: "WriteConflict", 251: "NoSuchTransaction", 256: "TransactionCommitted",
              263: "OperationNotSupportedInTransaction", 50: "MaxTimeMSExpired", 24: "LockTimeout",
              64: "WriteConcernFailed", 79: "UnknownReplWriteConcern", 100: "UnsatisfiableWriteConcern"}


# withTransaction retries for 120 s (the convenient API's limit); no test here depends on that limit,
# and a test that fails by retrying should not take two minutes.
client_session._WITH_TRANSACTION_RETRY_TIME_LIMIT = 10
# After a network error pymongo waits minHeartbeatFrequencyMS (500 ms) before it selects the server again;
# the unified format lets a runner lower it for tests that configure failpoints.
common.MIN_HEARTBEAT_INTERVAL = 0.02


class Skip(Exception):
    """A test or file this runner or the test server cannot run; the message is the reason."""


def _uses(test, word):
    """Whether `word` occurs in the test's JSON."""
    return word in json_util.dumps(test)


# Tests that fail on the test server because of a difference documented in test/server/README.md
# ("Known differences from mongod"); reported as skips with the reason, not run.
KNOWN_DIFFERENCES = {
    "unified/poc-retryable-writes.json: InsertOne fails after multiple retryable writeConcernErrors":
        "driver limitation: pymongo 3.11 does not copy a reply's errorLabels into a WriteConcernError, so it "
        "neither retries nor reports the RetryableWriteError label the server sends (seen with a command listener)",
    "change_streams/unified/change-streams.json: Test that comment is set on getMore":
        "driver limitation: pymongo 3.11 sends a change stream's comment on the aggregate only, not on its "
        "getMores (pymongo/message.py _gen_get_more_command has no comment)",
    "change_streams/unified/change-streams.json: Test array truncation":
        "documented difference: pipeline updates are a gap of mongomock's update operators (code 115), and "
        "this test truncates the array with one",
    "change_streams/unified/change-streams.json: Test new structure in ns document MUST NOT err":
        "documented difference: aggregation stages are mongomock's, and its $project makes a computed dotted "
        "path ('ns.viewOn') a field with a dot in its name instead of a subdocument",
}

# Skips by what a test needs, checked before it runs: (predicate over the test document, reason).
SKIP_RULES = [
    (lambda t: _uses(t, "read preference in a transaction must be primary"),
     "expects the driver to refuse a secondary read preference in a transaction: pymongo 3.11 selects a "
     "secondary first, and a one-member replica set has none"),
]
# Rules that apply only to a server without a secondary (the test server's replica set has one member):
# today, all of them.
NO_SECONDARY_RULES = SKIP_RULES[:]


class Listener(monitoring.CommandListener):
    """Command monitoring for one client entity: the started/succeeded/failed events, in order."""

    def __init__(self, ignore=()):
        self.events = []
        self.ignore = {name.lower() for name in ignore} | {"configurefailpoint"} | SENSITIVE
        self.lock = threading.Lock()

    def _add(self, kind, event, body):
        if event.command_name.lower() in self.ignore:
            return
        with self.lock:
            self.events.append((kind, event, body))

    def started(self, event):
        self._add("commandStartedEvent", event, {"command": event.command, "commandName": event.command_name,
                                                  "databaseName": event.database_name})

    def succeeded(self, event):
        self._add("commandSucceededEvent", event, {"reply": event.reply, "commandName": event.command_name})

    def failed(self, event):
        self._add("commandFailedEvent", event, {"commandName": event.command_name})


class Entities:
    """The entity map of one test: clients, databases, collections, sessions, saved results."""

    def __init__(self, uri):
        self.uri = uri
        self.map = {}
        self.listeners = {}
        self.lsids = {}

    def get(self, name):
        """The entity `name`; an unknown one fails the test."""
        if name not in self.map:
            raise MatchError("no entity %r" % name)
        return self.map[name]

    def lsid(self, name):
        """The lsid of session `name` (kept after the session ended)."""
        return self.lsids[name]

    def create(self, specs):
        """createEntities."""
        for spec in specs:
            (kind, body), = spec.items()
            getattr(self, "_create_" + kind, self._unsupported)(kind, body)

    def _unsupported(self, kind, body):
        """An entity type this runner does not create (bucket, stream, ...)."""
        raise Skip("entity type %s is not supported by this runner" % kind)

    def _create_client(self, kind, body):
        """A pymongo client with uriOptions, monitoring the commands named by observeEvents."""
        opts = dict(body.get("uriOptions") or {})
        for key in ("serverApi", "storeEventsAsEntities", "observeLogMessages", "observeSensitiveCommands"):
            if key in body:
                raise Skip("client option %s is not supported by this runner" % key)
        listener = Listener(body.get("ignoreCommandMonitoringEvents") or ())
        listener.observe = set(body.get("observeEvents") or ())
        opts.setdefault("socketTimeoutMS", 30000)  # no operation waits for ever
        client = pymongo.MongoClient(self.uri, event_listeners=[listener], uuidRepresentation="unspecified",
                                     serverSelectionTimeoutMS=5000, **opts)
        self.map[body["id"]] = client
        self.listeners[body["id"]] = listener

    def _create_database(self, kind, body):
        """A database of a client entity, with its read/write concern and read preference."""
        client = self.get(body["client"])
        self.map[body["id"]] = client.get_database(body["databaseName"], codec_options=CODEC,
                                                   **rw_options(body.get("databaseOptions")))

    def _create_collection(self, kind, body):
        """A collection of a database entity, with its read/write concern and read preference."""
        db = self.get(body["database"])
        self.map[body["id"]] = db.get_collection(body["collectionName"], codec_options=CODEC,
                                                 **rw_options(body.get("collectionOptions")))

    def _create_session(self, kind, body):
        """A session with causalConsistency and defaultTransactionOptions; its lsid is kept for matching."""
        client = self.get(body["client"])
        opts = dict(body.get("sessionOptions") or {})
        kwargs = {}
        if "causalConsistency" in opts:
            kwargs["causal_consistency"] = opts.pop("causalConsistency")
        if "defaultTransactionOptions" in opts:
            kwargs["default_transaction_options"] = TransactionOptions(
                **txn_options(opts.pop("defaultTransactionOptions")))
        if opts:
            raise Skip("session options %s are not supported by this runner" % sorted(opts))
        session = client.start_session(**kwargs)
        self.map[body["id"]] = session
        self.lsids[body["id"]] = session.session_id

    def close(self):
        """Close change streams, end sessions and close clients."""
        for value in self.map.values():
            if isinstance(value, ChangeStream):
                try:
                    value.close()
                except PyMongoError:
                    pass
        for value in self.map.values():
            if isinstance(value, pymongo.client_session.ClientSession):
                value.end_session()
        for value in self.map.values():
            if isinstance(value, pymongo.MongoClient):
                value.close()


def rw_options(opts):
    """readConcern / writeConcern / readPreference options as pymongo keyword arguments."""
    out = {}
    for key, value in (opts or {}).items():
        if key == "readConcern":
            out["read_concern"] = ReadConcern(**value)
        elif key == "writeConcern":
            out["write_concern"] = write_concern(value)
        elif key == "readPreference":
            out["read_preference"] = read_preference(value)
        else:
            raise Skip("option %s is not supported by this runner" % key)
    return out


def write_concern(doc):
    """A writeConcern document as pymongo's WriteConcern."""
    doc = dict(doc)
    if "wtimeoutMS" in doc:
        doc["wtimeout"] = doc.pop("wtimeoutMS")
    return WriteConcern(**doc)


def read_preference(doc):
    """A readPreference document as pymongo's read preference."""
    mode = doc["mode"].lower()  # the legacy files capitalise it
    name = {"primary": "PRIMARY", "primarypreferred": "PRIMARY_PREFERRED", "secondary": "SECONDARY",
            "secondarypreferred": "SECONDARY_PREFERRED", "nearest": "NEAREST"}[mode]
    return getattr(ReadPreference, name)


def txn_options(opts):
    """startTransaction / withTransaction / defaultTransactionOptions options as pymongo arguments."""
    out = {}
    for key, value in (opts or {}).items():
        if key == "maxCommitTimeMS":
            out["max_commit_time_ms"] = value
        else:
            out.update(rw_options({key: value}))
    return out


def _server_error_code(exc):
    """(code, codeName) of a pymongo exception (of the first write error of a bulk)."""
    details = getattr(exc, "details", None) or {}
    code = getattr(exc, "code", None)
    if isinstance(exc, BulkWriteError) and details.get("writeErrors"):
        first = details["writeErrors"][0]
        code = first.get("code")
        details = first
    name = details.get("codeName") or CODE_NAMES.get(code)
    return code, name


def check_error(expected, exc):
    """expectError against the exception raised (or None when the operation succeeded)."""
    if exc is None:
        raise MatchError("expected an error %r, the operation succeeded" % expected)
    is_client = not isinstance(exc, OperationFailure)  # network errors count as client errors
    code, name = _server_error_code(exc)
    if "isClientError" in expected and expected["isClientError"] != is_client:
        raise MatchError("isClientError %s expected, got %r" % (expected["isClientError"], exc))
    if "errorContains" in expected and expected["errorContains"].lower() not in str(exc).lower():
        raise MatchError("error %r does not contain %r" % (str(exc), expected["errorContains"]))
    if "errorCode" in expected and expected["errorCode"] != code:
        raise MatchError("error code %s expected, got %s (%s)" % (expected["errorCode"], code, exc))
    if "errorCodeName" in expected and expected["errorCodeName"] != name:
        raise MatchError("codeName %s expected, got %s (%s)" % (expected["errorCodeName"], name, exc))
    for label in expected.get("errorLabelsContain") or []:
        if not (isinstance(exc, PyMongoError) and exc.has_error_label(label)):
            raise MatchError("error label %s expected on %r" % (label, exc))
    for label in expected.get("errorLabelsOmit") or []:
        if isinstance(exc, PyMongoError) and exc.has_error_label(label):
            raise MatchError("error label %s not expected on %r" % (label, exc))
    if "expectResult" in expected:
        details = getattr(exc, "details", None) or {}
        match(expected["expectResult"], bulk_result_doc(details), None)


def bulk_result_doc(details):
    """A BulkWriteError's partial result in the CRUD spec's names."""
    return {"insertedCount": details.get("nInserted"), "matchedCount": details.get("nMatched"),
            "modifiedCount": details.get("nModified"), "deletedCount": details.get("nRemoved"),
            "upsertedCount": details.get("nUpserted")}


class Runner:
    """One test file: requirements, initial data, and its tests through the unified interpreter."""

    def __init__(self, uri, internal, deadline):
        self.uri = uri
        self.internal = internal
        self.deadline = deadline
        self.failpoints = []
        self.version, self.topology = self.describe_server()
        self.server_wce = self.probe_write_concern_error()
        self.probed = {}  # lazily probed server features: failpoints, pre-images

    def probe_write_concern_error(self):
        """Whether the server's failCommand injects `writeConcernError`: without it, a test that expects a
        write concern error after the write would pass without testing anything, so it is skipped."""
        db = self.internal.get_database("spec_runner_probe")
        self.internal.admin.command({"configureFailPoint": "failCommand", "mode": {"times": 1},
                                     "data": {"failCommands": ["insert"],
                                              "writeConcernError": {"code": 91, "errmsg": "probe"}}})
        try:
            reply = db.command({"insert": "probe", "documents": [{"_id": 1}]})
            return "writeConcernError" in reply
        except OperationFailure as exc:
            return "writeConcernError" in (exc.details or {}) or exc.code == 91
        finally:
            self.internal.admin.command({"configureFailPoint": "failCommand", "mode": "off"})
            self.internal.drop_database("spec_runner_probe")

    def has_failpoint(self, name):
        """Whether configureFailPoint knows the failpoint `name` (probed once, by turning it off)."""
        key = "failpoint " + name
        if key not in self.probed:
            try:
                self.internal.admin.command({"configureFailPoint": name, "mode": "off"})
                self.probed[key] = True
            except OperationFailure:
                self.probed[key] = False
        return self.probed[key]

    def has_pre_images(self):
        """Whether collMod accepts changeStreamPreAndPostImages (probed once on a scratch collection)."""
        if "pre-images" not in self.probed:
            db = self.internal.get_database("spec_runner_probe")
            self.internal.drop_database(db.name)
            try:
                db.command({"create": "probe"})
                db.command({"collMod": "probe", "changeStreamPreAndPostImages": {"enabled": True}})
                self.probed["pre-images"] = True
            except OperationFailure:
                self.probed["pre-images"] = False
            finally:
                self.internal.drop_database("spec_runner_probe")
        return self.probed["pre-images"]

    def feature_reason(self, test):
        """Why a test cannot run on this server (a failpoint or pre-images it lacks, probed), or None."""
        for name in sorted(set(re.findall(r'"configureFailPoint": "([^"]+)"', json_util.dumps(test)))):
            if name != "failCommand" and not self.has_failpoint(name):
                return "needs mongod's failpoint %s, which this server does not have (probed)" % name
        if _uses(test, '"changeStreamPreAndPostImages"') and not self.has_pre_images():
            return ("needs change-stream pre- and post-images (collMod changeStreamPreAndPostImages, "
                    "fullDocumentBeforeChange), which this server does not emulate (probed)")
        return None

    # -- requirements ---------------------------------------------------------------------------------
    def describe_server(self):
        """(version tuple, topology) of the server, from buildInfo and hello; the test server says 6.0.0
        and a one-member replica set (idxmongo/cmd_admin.py)."""
        version = tuple(self.internal.admin.command("buildInfo")["versionArray"][:3])
        hello = self.internal.admin.command("isMaster")
        self.no_secondary = len(hello.get("hosts") or []) < 2
        if hello.get("msg") == "isdbgrid":
            topology = "sharded"
        elif hello.get("setName"):
            topology = "replicaset"
        else:
            topology = "single"
        return version, topology

    def requirement_reason(self, reqs):
        """None when one of the runOnRequirements is met, else the reason for skipping."""
        if not reqs:
            return None
        reasons = []
        for req in reqs:
            reason = self._one_requirement(req)
            if reason is None:
                return None
            reasons.append(reason)
        return reasons[0]

    def _one_requirement(self, req):
        version = lambda s: tuple(int(x) for x in s.split("."))  # noqa: E731
        if "minServerVersion" in req and self.version < version(req["minServerVersion"]):
            return "needs MongoDB >= %s" % req["minServerVersion"]
        if "maxServerVersion" in req and self.version[:len(version(req["maxServerVersion"]))] > \
                version(req["maxServerVersion"]):
            return "needs MongoDB <= %s (the server is %s)" % (req["maxServerVersion"],
                                                               ".".join(map(str, self.version)))
        if "topologies" in req and self.topology not in req["topologies"]:
            return "needs a %s topology (the server is %s)" % ("/".join(req["topologies"]), self.topology)
        if req.get("serverless") == "require":
            return "needs serverless"
        if req.get("auth") is True:
            return "needs authentication"
        if "serverParameters" in req:
            return "needs server parameters %s" % sorted(req["serverParameters"])
        if req.get("csfle"):
            return "needs client-side encryption"
        return None

    # -- setup ----------------------------------------------------------------------------------------
    def kill_all_sessions(self):
        """Abort the transactions a previous test left open (a failpoint can make its abort fail)."""
        try:
            self.internal.admin.command({"killAllSessions": []})
        except OperationFailure:
            pass

    def load_initial_data(self, initial):
        """initialData: drop each collection, create it, insert its documents (majority write concern)."""
        for coll in initial or []:
            db = self.internal.get_database(coll["databaseName"], write_concern=WriteConcern(w="majority"),
                                            codec_options=CODEC)
            db.drop_collection(coll["collectionName"])
            db.create_collection(coll["collectionName"])
            if coll["documents"]:
                db[coll["collectionName"]].insert_many(coll["documents"])

    def configure_failpoint(self, client, failpoint):
        """Set a failpoint through `client`, remembered so that it is turned off after the test."""
        client.admin.command(failpoint)
        self.failpoints.append((client, failpoint["configureFailPoint"]))

    def disable_failpoints(self):
        for client, name in self.failpoints:
            try:
                client.admin.command({"configureFailPoint": name, "mode": "off"})
            except PyMongoError:
                pass
        self.failpoints = []

    # -- one test -------------------------------------------------------------------------------------
    def run_test(self, doc, test):
        """Run one test; raises Skip, MatchError, or anything unexpected."""
        for rule, reason in SKIP_RULES:
            if rule(test) and (self.no_secondary or (rule, reason) not in NO_SECONDARY_RULES):
                raise Skip(reason)
        if not self.server_wce and _uses(test, '"writeConcernError"'):
            raise Skip("needs failCommand's writeConcernError, which this server does not inject (probed at start)")
        if "skipReason" in test:
            raise Skip("the test file says: " + test["skipReason"])
        reason = self.requirement_reason(test.get("runOnRequirements")) or self.feature_reason(test)
        if reason:
            raise Skip(reason)
        self.kill_all_sessions()
        self.load_initial_data(doc.get("initialData"))
        entities = Entities(self.uri)
        try:
            entities.create(doc.get("createEntities") or [])
            entities.create(test.get("entities") or [])
            if "failPoint" in test:  # legacy: set through a client whose events are not observed
                self.configure_failpoint(self.internal, test["failPoint"])
            for op in test.get("operations") or []:
                if time.time() > self.deadline:
                    raise MatchError("the runner's time limit ran out")
                self.run_operation(entities, op)
            if doc.get("legacyEntities"):  # legacy: sessions end before the events are compared
                for name in ("session0", "session1"):
                    entities.get(name).end_session()
            self.check_events(entities, test.get("expectEvents"))
        finally:
            self.disable_failpoints()
            entities.close()
        self.check_outcome(test.get("outcome"))

    def run_operation(self, entities, op, propagate=False):
        """Execute one operation and check expectError / expectResult; saveResultAsEntity. With
        `propagate` (inside a withTransaction callback) an error is raised again once checked."""
        result, exc = None, None
        try:
            result = self.execute(entities, op)
        except (MatchError, Skip):
            raise
        except (PyMongoError, ValueError, TypeError) as err:
            exc = err
        ignore = op.get("ignoreResultAndError")
        if "expectError" in op and not ignore:
            check_error(op["expectError"], exc)
        elif exc is not None and not ignore and not propagate:
            raise MatchError("%s raised %r" % (op["name"], exc))
        if exc is not None:
            if propagate:
                raise exc
            return
        if "expectResult" in op and not ignore and op["name"] in ITERABLE_RESULTS:
            match_root_documents(op["expectResult"], result, entities, path=op["name"])
        elif "expectResult" in op and not ignore:
            match(op["expectResult"], result, entities, root=True, path=op["name"])
        if "saveResultAsEntity" in op:
            entities.map[op["saveResultAsEntity"]] = result

    def execute(self, entities, op):
        """Dispatch by the object's kind (testRunner, client, database, collection, session)."""
        name, obj = op["name"], op["object"]
        args = dict(op.get("arguments") or {})
        if obj == "testRunner":
            return getattr(self, "tr_" + name, self._no_op)(entities, name, args)
        target = entities.get(obj)
        if "session" in args:
            args["session"] = entities.get(args["session"])
        if isinstance(target, pymongo.client_session.ClientSession):
            return session_op(self, entities, target, name, args)
        if isinstance(target, pymongo.collection.Collection):
            if "collectionOptions" in op:
                target = target.with_options(**rw_options(op["collectionOptions"]))
            return collection_op(target, name, args)
        if isinstance(target, pymongo.database.Database):
            if "databaseOptions" in op:
                target = target.client.get_database(target.name, codec_options=CODEC,
                                                    **rw_options(op["databaseOptions"]))
            return database_op(target, name, args)
        if isinstance(target, pymongo.MongoClient) and name == "createChangeStream":
            return create_change_stream(target, args)
        if isinstance(target, ChangeStream):
            return change_stream_op(target, name, args)
        raise Skip("operation %s on %s is not supported by this runner" % (name, type(target).__name__))

    def _no_op(self, entities, name, args):
        raise Skip("test runner operation %s is not supported by this runner" % name)

    # -- special test operations ----------------------------------------------------------------------
    def tr_failPoint(self, entities, name, args):
        self.configure_failpoint(entities.get(args["client"]), args["failPoint"])

    def tr_targetedFailPoint(self, entities, name, args):
        session = entities.get(args["session"])
        self.configure_failpoint(session.client, args["failPoint"])

    def tr_assertSessionTransactionState(self, entities, name, args):
        session = entities.get(args["session"])
        state = TXN_STATES[session._transaction.state]
        if state != args["state"]:
            raise MatchError("session %s is in state %s, expected %s" % (args["session"], state, args["state"]))

    def tr_assertSessionPinned(self, entities, name, args):
        if entities.get(args["session"])._pinned_address is None:
            raise MatchError("session %s is not pinned" % args["session"])

    def tr_assertSessionUnpinned(self, entities, name, args):
        if entities.get(args["session"])._pinned_address is not None:
            raise MatchError("session %s is pinned" % args["session"])

    def _names(self, args):
        return (args.get("databaseName") or args.get("database"),
                args.get("collectionName") or args.get("collection"))

    def tr_assertCollectionExists(self, entities, name, args, exists=True):
        db, coll = self._names(args)
        if (coll in self.internal[db].list_collection_names()) != exists:
            raise MatchError("collection %s.%s %s" % (db, coll, "missing" if exists else "exists"))

    def tr_assertCollectionNotExists(self, entities, name, args):
        self.tr_assertCollectionExists(entities, name, args, exists=False)

    def tr_assertIndexExists(self, entities, name, args, exists=True):
        db, coll = self._names(args)
        index = args.get("indexName") or args.get("index")
        names = [ix["name"] for ix in self.internal[db][coll].list_indexes()]
        if (index in names) != exists:
            raise MatchError("index %s on %s.%s %s" % (index, db, coll, "missing" if exists else "exists"))

    def tr_assertIndexNotExists(self, entities, name, args):
        self.tr_assertIndexExists(entities, name, args, exists=False)

    def _last_two_lsids(self, entities, client):
        events = [e for k, e, _ in entities.listeners[client].events if k == "commandStartedEvent"]
        if len(events) < 2:
            raise MatchError("fewer than two commands observed")
        return events[-2].command["lsid"], events[-1].command["lsid"]

    def tr_assertSameLsidOnLastTwoCommands(self, entities, name, args):
        a, b = self._last_two_lsids(entities, args["client"])
        if a != b:
            raise MatchError("the last two commands have different lsids")

    def tr_assertDifferentLsidOnLastTwoCommands(self, entities, name, args):
        a, b = self._last_two_lsids(entities, args["client"])
        if a == b:
            raise MatchError("the last two commands have the same lsid")

    # -- assertions after the operations --------------------------------------------------------------
    def check_events(self, entities, expected):
        """expectEvents: each client's observed events, in order, against the expected list."""
        for entry in expected or []:
            kind_filter = entry.get("eventType", "command")
            if kind_filter != "command":
                raise Skip("eventType %s is not supported by this runner" % kind_filter)
            listener = entities.listeners[entry["client"]]
            observed = [(k, body) for k, _, body in listener.events if k in listener.observe]
            want = entry["events"]
            if entry.get("ignoreExtraEvents"):
                observed = observed[:len(want)]
            if len(observed) != len(want):
                raise MatchError("client %s: %d events expected, %d observed: %s" % (
                    entry["client"], len(want), len(observed), [b["commandName"] for _, b in observed]))
            for i, (exp, (kind, body)) in enumerate(zip(want, observed)):
                (exp_kind, exp_body), = exp.items()
                if exp_kind != kind:
                    raise MatchError("event %d: %s expected, %s observed" % (i, exp_kind, kind))
                for key, value in exp_body.items():
                    if key not in body:
                        raise Skip("event field %s is not supported by this runner" % key)
                    match(value, body[key], entities, root=True, path="events[%d].%s" % (i, key))

    def check_outcome(self, outcome):
        """outcome: each collection holds exactly these documents (read at primary, local, sorted by _id)."""
        for coll in outcome or []:
            c = self.internal.get_database(coll["databaseName"], codec_options=CODEC,
                                           read_concern=ReadConcern("local"),
                                           read_preference=ReadPreference.PRIMARY)[coll["collectionName"]]
            actual = list(c.find({}, sort=[("_id", 1)]))
            match(coll["documents"], actual, None, root=False, path="outcome %s" % coll["collectionName"])


# -- operations on entities ---------------------------------------------------------------------------------
def session_op(runner, entities, session, name, args):
    """startTransaction, commitTransaction, abortTransaction, withTransaction, endSession."""
    args.pop("session", None)
    args.update(args.pop("options", None) or {})  # legacy: {options: {readConcern, ...}}
    if name == "startTransaction":
        return session.start_transaction(**txn_options(args))
    if name == "commitTransaction":
        return session.commit_transaction()
    if name == "abortTransaction":
        return session.abort_transaction()
    if name == "endSession":
        return session.end_session()
    if name == "withTransaction":
        callback_ops = args.pop("callback")

        def callback(_session):
            for op in callback_ops:
                runner.run_operation(entities, op, propagate=True)
        return session.with_transaction(callback, **txn_options(args))
    raise Skip("session operation %s is not supported by this runner" % name)


def _request(model):
    """A bulkWrite request of the CRUD spec as a pymongo write model."""
    if "name" in model:  # legacy format: {name, arguments}
        kind, a = model["name"], model["arguments"]
    else:
        (kind, a), = model.items()
    if kind == "insertOne":
        return InsertOne(a["document"])
    if kind in ("updateOne", "updateMany"):
        cls = UpdateOne if kind == "updateOne" else UpdateMany
        return cls(a["filter"], a["update"], upsert=a.get("upsert", False), array_filters=a.get("arrayFilters"),
                   hint=a.get("hint"), collation=a.get("collation"))
    if kind == "replaceOne":
        return ReplaceOne(a["filter"], a["replacement"], upsert=a.get("upsert", False), hint=a.get("hint"),
                          collation=a.get("collation"))
    if kind in ("deleteOne", "deleteMany"):
        cls = DeleteOne if kind == "deleteOne" else DeleteMany
        return cls(a["filter"], hint=a.get("hint"), collation=a.get("collation"))
    raise Skip("bulkWrite request %s is not supported by this runner" % kind)


def _update_result(res):
    """An UpdateResult in the CRUD specification's names."""
    out = {"matchedCount": res.matched_count, "modifiedCount": res.modified_count,
           "upsertedCount": 0 if res.upserted_id is None else 1}
    if res.upserted_id is not None:
        out["upsertedId"] = res.upserted_id
    return out


def _find_kwargs(args):
    """find / findOneAndX arguments in pymongo's names."""
    out = {}
    names = {"filter": "filter", "projection": "projection", "skip": "skip", "limit": "limit",
             "batchSize": "batch_size", "upsert": "upsert", "arrayFilters": "array_filters", "hint": "hint",
             "session": "session", "collation": "collation", "maxTimeMS": "max_time_ms", "comment": "comment",
             "update": "update", "replacement": "replacement", "allowDiskUse": "allow_disk_use"}
    for key, value in args.items():
        if key == "sort":
            out["sort"] = list(value.items())
        elif key == "returnDocument":
            out["return_document"] = value == "After"
        elif key in names:
            out[names[key]] = value
        else:
            raise Skip("argument %s is not supported by this runner" % key)
    return out


def collection_op(coll, name, args):
    """The CRUD operations the transactions and retryable-writes tests use, with their spec results."""
    session = args.get("session")
    args.update(args.pop("options", None) or {})  # legacy: insertMany/bulkWrite {options: {ordered}}
    if name == "insertOne":
        return {"insertedId": coll.insert_one(args["document"], session=session).inserted_id}
    if name == "insertMany":
        res = coll.insert_many(args["documents"], ordered=args.get("ordered", True), session=session)
        return {"insertedIds": {str(i): v for i, v in enumerate(res.inserted_ids)}}
    if name in ("updateOne", "updateMany", "replaceOne"):
        kw = _find_kwargs(args)
        fn = {"updateOne": coll.update_one, "updateMany": coll.update_many, "replaceOne": coll.replace_one}[name]
        second = kw.pop("replacement" if name == "replaceOne" else "update")
        return _update_result(fn(kw.pop("filter"), second, **kw))
    if name in ("deleteOne", "deleteMany"):
        kw = _find_kwargs(args)
        fn = coll.delete_one if name == "deleteOne" else coll.delete_many
        return {"deletedCount": fn(kw.pop("filter"), **kw).deleted_count}
    if name in ("findOneAndUpdate", "findOneAndReplace", "findOneAndDelete"):
        kw = _find_kwargs(args)
        if name == "findOneAndDelete":
            return coll.find_one_and_delete(kw.pop("filter"), **kw)
        if name == "findOneAndUpdate":
            return coll.find_one_and_update(kw.pop("filter"), kw.pop("update"), **kw)
        return coll.find_one_and_replace(kw.pop("filter"), kw.pop("replacement"), **kw)
    if name == "bulkWrite":
        return _bulk_write(coll, args, session)
    if name == "find":
        kw = _find_kwargs(args)
        return list(coll.find(kw.pop("filter", {}), **kw))
    if name == "aggregate":
        kw = {k: args[k] for k in ("batchSize", "maxTimeMS", "allowDiskUse") if k in args}
        return list(coll.aggregate(args["pipeline"], session=session, **kw))
    if name == "countDocuments":
        return coll.count_documents(args.get("filter", {}), session=session)
    if name == "count":
        return coll.count(args.get("filter", {}), session=session)
    if name == "distinct":
        return coll.distinct(args["fieldName"], args.get("filter"), session=session)
    if name == "createIndex":
        return coll.create_index(list(args["keys"].items()), name=args.get("name"), session=session)
    if name == "createChangeStream":
        return create_change_stream(coll, args)
    if name == "rename":
        kw = {"dropTarget": args["dropTarget"]} if "dropTarget" in args else {}
        coll.rename(args["to"], session=session, **kw)
        return None
    raise Skip("collection operation %s is not supported by this runner" % name)


def _bulk_write(coll, args, session):
    """bulkWrite and its BulkWriteResult in the CRUD specification's names (insertedIds from the requests)."""
    requests = [_request(r) for r in args["requests"]]
    res = coll.bulk_write(requests, ordered=args.get("ordered", True), session=session)
    inserted = {str(i): r._doc["_id"] for i, r in enumerate(requests) if isinstance(r, InsertOne)}
    return {"insertedCount": res.inserted_count, "matchedCount": res.matched_count,
            "modifiedCount": res.modified_count, "deletedCount": res.deleted_count,
            "upsertedCount": res.upserted_count, "insertedIds": inserted,
            "upsertedIds": {str(i): v for i, v in (res.upserted_ids or {}).items()}}


def database_op(db, name, args):
    """runCommand, createCollection, dropCollection, listCollections and friends."""
    session = args.get("session")
    if name == "runCommand":
        kwargs = {}
        if "readPreference" in args:
            kwargs["read_preference"] = read_preference(args["readPreference"])
        return db.command(args["command"], session=session, codec_options=CODEC, **kwargs)
    if name == "createCollection":
        db.create_collection(args["collection"], session=session)
        return None
    if name == "dropCollection":
        db.drop_collection(args["collection"], session=session)
        return None
    if name == "listCollectionNames":
        return db.list_collection_names(session=session)
    if name == "createChangeStream":
        return create_change_stream(db, args)
    raise Skip("database operation %s is not supported by this runner" % name)


# -- change streams ---------------------------------------------------------------------------------------
class _StreamOptions:
    """Options of createChangeStream that pymongo 3.11's watch() does not take, added where the change-streams
    specification puts them: `comment` on the aggregate command, fullDocumentBeforeChange and
    showExpandedEvents in the $changeStream stage (also when the stream resumes)."""
    stage_extra = {}
    command_extra = {}

    def _change_stream_options(self):
        options = super()._change_stream_options()
        options.update(self.stage_extra)
        return options

    def _command_options(self):
        options = super()._command_options()
        options.update(self.command_extra)
        return options


WATCH_ARGS = {"fullDocument": "full_document", "resumeAfter": "resume_after", "startAfter": "start_after",
              "startAtOperationTime": "start_at_operation_time", "maxAwaitTimeMS": "max_await_time_ms",
              "batchSize": "batch_size", "collation": "collation"}


def create_change_stream(target, args):
    """createChangeStream on a client, database or collection: pymongo's change stream of that kind."""
    kw = {name: None for name in WATCH_ARGS.values()}
    kw["session"] = args.pop("session", None)
    kw["pipeline"] = args.pop("pipeline", None) or []
    stage = {k: args.pop(k) for k in ("fullDocumentBeforeChange", "showExpandedEvents") if k in args}
    command = {k: args.pop(k) for k in ("comment",) if k in args}
    for key in list(args):
        if key not in WATCH_ARGS:
            raise Skip("createChangeStream argument %s is not supported by this runner" % key)
        kw[WATCH_ARGS[key]] = args.pop(key)
    if isinstance(target, pymongo.MongoClient):
        base, target = ClusterChangeStream, target.admin
    elif isinstance(target, pymongo.database.Database):
        base = DatabaseChangeStream
    else:
        base = CollectionChangeStream
    cls = type("Spec" + base.__name__, (_StreamOptions, base), {"stage_extra": stage, "command_extra": command})
    return cls(target, kw["pipeline"], kw["full_document"], kw["resume_after"], kw["max_await_time_ms"],
               kw["batch_size"], kw["collation"], kw["start_at_operation_time"], kw["session"], kw["start_after"])


def change_stream_op(stream, name, args):
    """iterateUntilDocumentOrError (a getMore at a time, up to ITERATE_LIMIT s), iterateOnce (at most one
    getMore; no change is a null result), close."""
    if name == "iterateUntilDocumentOrError":
        limit = time.time() + ITERATE_LIMIT
        while True:
            change = stream.try_next()
            if change is not None:
                return change
            if not stream.alive:
                raise MatchError("the change stream was closed before a change arrived")
            if time.time() > limit:
                raise MatchError("no change arrived within %d s" % ITERATE_LIMIT)
    if name == "iterateOnce":
        return stream.try_next()
    if name == "close":
        stream.close()
        return None
    raise Skip("change stream operation %s is not supported by this runner" % name)


# -- files, server, main -------------------------------------------------------------------------------
def load_file(path):
    """A test file as a unified document (legacy files converted); raises Skip for newer schemas."""
    with open(path) as f:
        doc = json_util.loads(f.read())
    if "schemaVersion" not in doc:
        return from_legacy(doc)
    version = tuple(int(x) for x in doc["schemaVersion"].split(".")[:2])
    if version > SCHEMA_MAX:
        raise Skip("schema version %s (this runner supports up to %d.%d)" % ((doc["schemaVersion"],) + SCHEMA_MAX))
    return doc


def start_server(tmpdir):
    """A fresh test server on a free port; returns (process, uri)."""
    port_file = os.path.join(tmpdir, "port")
    proc = subprocess.Popen(["/usr/bin/python3", SERVER_SCRIPT, "--host", "127.0.0.1", "--port", "0",
                             "--port-file", port_file, "--log", os.path.join(tmpdir, "server.log")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.time() + 15
    while not os.path.exists(port_file) or not open(port_file).read().strip():
        if proc.poll() is not None or time.time() > deadline:
            raise RuntimeError("the test server did not start: %s" % proc.stderr.read().decode())
        time.sleep(0.05)
    with open(port_file) as f:
        return proc, "mongodb://127.0.0.1:%d/?replicaSet=rs0" % int(f.read())


# Mutations of a passing test (transactions/legacy/delete.json "delete") that the runner must report as
# failures: each proves that one kind of assertion is really checked.
SELF_CHECKS = [
    ("a wrong expectResult", lambda t: t["operations"][1]["expectResult"].update(deletedCount=7)),
    ("a wrong command field", lambda t: t["expectEvents"][0]["events"][0]["commandStartedEvent"]["command"]
     .update(txnNumber=Int64(7))),
    ("a field that must be absent", lambda t: t["expectEvents"][0]["events"][1]["commandStartedEvent"]["command"]
     .update(lsid={"$$sessionLsid": "session1"})),
    ("a missing event", lambda t: t["expectEvents"][0]["events"].pop()),
    ("a wrong outcome", lambda t: t["outcome"][0]["documents"].append({"_id": 99})),
    ("an error that does not happen", lambda t: t["operations"][1].update(expectError={"isError": True})),
]
TXN_SELF_CHECK = ("transactions/legacy/delete.json", "delete", SELF_CHECKS)


def _swap_changes(test):
    ops = test["operations"]
    ops[5], ops[6] = ops[6], ops[5]


# The same for change streams (unless --no-change-streams): a passing test of each kind mutated.
CHANGE_STREAM_SELF_CHECKS = [
    ("change_streams/unified/change-streams.json", "Test insert, update, replace, and delete event types", [
        ("a wrong change", lambda t: t["operations"][6]["expectResult"]["updateDescription"]
         .update(updatedFields={"x": 3})),
        ("changes in the wrong order", _swap_changes),
        ("a wrong $changeStream stage", lambda t: t["expectEvents"][0]["events"][0]["commandStartedEvent"]
         ["command"]["pipeline"][0]["$changeStream"].update(fullDocument="updateLookup")),
    ]),
    ("change_streams/unified/change-streams-resume-allowlist.json",
     "change stream resumes after a network error", [
        ("a resume that does not happen", lambda t: t["operations"].pop(0)),
    ]),
]


# The unified format's matching rules on small cases: (expected, actual, whether they match).
MATCH_CASES = [
    ({"n": 1}, {"n": Int64(1), "extra": 2}, True),            # numbers by value; extra root fields
    ({"a": {"b": 1}}, {"a": {"b": 1, "c": 2}}, False),       # no extra fields in nested documents
    ({"a": {"$$exists": False}}, {"a": None}, False),
    ({"a": {"$$unsetOrMatches": 1}}, {}, True),
    ({"a": {"$$unsetOrMatches": 1}}, {"a": 2}, False),
    ({"a": {"$$type": ["int", "long"]}}, {"a": 1.5}, False),
    ([{"_id": 1}], [{"_id": 1}, {"_id": 2}], False),
    ({"s": "x"}, {"s": 1}, False),
    ({"a": {"$$unsetOrMatches": {"$$exists": True}}}, {}, True),   # change streams' resumeAfter
    ({"a": {"$$unsetOrMatches": {"$$exists": True}}}, {"a": {"_data": "82"}}, True),
    ({"c": {"$$type": ["int", "long"]}}, {"c": Int64(5)}, True),
]


def self_check(runner, opts):
    """Run the matching cases and the mutated tests; returns what the runner got wrong."""
    wrong = []
    for expected, actual, matches in MATCH_CASES:
        try:
            match(expected, actual, None)
            if not matches:
                wrong.append("a mismatch of %r and %r" % (expected, actual))
        except MatchError:
            if matches:
                wrong.append("a match of %r and %r" % (expected, actual))
    checks = [TXN_SELF_CHECK] + (CHANGE_STREAM_SELF_CHECKS if opts.change_streams else [])
    for path, description, mutations in checks:
        doc = load_file(os.path.join(opts.dir, path))
        base = next(t for t in doc["tests"] if t["description"] == description)
        for name, mutate in mutations:
            test = copy.deepcopy(base)
            mutate(test)
            try:
                runner.run_test(doc, test)
                wrong.append("a test with %s" % name)
            except MatchError:
                pass
    return wrong


def run_files(opts, uri, out):
    """Run every selected test; returns (passed, failed, skips {reason: [names]}, failures [names])."""
    internal = pymongo.MongoClient(uri, uuidRepresentation="unspecified", serverSelectionTimeoutMS=5000,
                                   socketTimeoutMS=30000)
    runner = Runner(uri, internal, time.time() + opts.timeout)
    passed, skips, failures = 0, {}, []
    for name in self_check(runner, opts):
        failures.append("runner self-check: %s was not detected" % name)
        out("FAIL runner self-check: %s was not detected" % name)
    paths = sorted(p for pattern in FILES for p in glob.glob(os.path.join(opts.dir, pattern)))
    for path in paths:
        rel = os.path.relpath(path, opts.dir)
        try:
            doc = load_file(path)
            tests = doc["tests"]
        except Skip as why:
            skips.setdefault(str(why), []).append(rel)
            continue
        file_reason = runner.requirement_reason(doc.get("runOnRequirements"))
        if not opts.change_streams and rel.startswith(CHANGE_STREAM_FILES):
            file_reason = CHANGE_STREAMS_OFF
        for test in tests:
            name = "%s: %s" % (rel, test["description"])
            if opts.select and not any(s in name for s in opts.select):
                continue
            t0 = time.time()
            try:
                if file_reason:
                    raise Skip(file_reason)
                if name in KNOWN_DIFFERENCES:
                    raise Skip(KNOWN_DIFFERENCES[name])
                runner.run_test(doc, test)
                passed += 1
                out("ok   %s (%.2fs)" % (name, time.time() - t0))
            except Skip as why:
                skips.setdefault(str(why), []).append(name)
                if opts.verbose:
                    out("skip %s: %s" % (name, why))
            except Exception as err:  # noqa: BLE001 - any error fails this test only
                failures.append(name)
                detail = traceback.format_exc() if opts.verbose or not isinstance(err, MatchError) else str(err)
                out("FAIL %s (%.2fs)\n     %s" % (name, time.time() - t0, detail.strip().replace("\n", "\n     ")))
    internal.close()
    return passed, skips, failures


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dir", default=os.environ.get("SPEC_TESTS_DIR", DEFAULT_DIR))
    parser.add_argument("--uri", help="run against this server instead of a fresh test server")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds for the whole run")
    parser.add_argument("-v", "--verbose", action="store_true")
    parser.add_argument("--change-streams", action=argparse.BooleanOptionalAction,
                        default=CHANGE_STREAMS_DEFAULT, help="run the change-streams tests (default: %s)"
                        % ("yes" if CHANGE_STREAMS_DEFAULT else "no"))
    parser.add_argument("select", nargs="*")
    opts = parser.parse_args()

    def out(line):
        print(line)
        sys.stdout.flush()
    if not os.path.isfile(os.path.join(opts.dir, SPEC_STAMP)):
        out("FAIL no specification tests (or an older selection of them) in %s: run test/server/get_spec_tests"
            % opts.dir)
        out("spec: 0 passed, 1 failed")
        return 1
    started = time.time()
    tmpdir = tempfile.mkdtemp(prefix="spec_runner.")
    proc = None
    try:
        uri = opts.uri
        if not uri:
            proc, uri = start_server(tmpdir)
        passed, skips, failures = run_files(opts, uri, out)
    finally:
        if proc is not None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(10)
    skipped = sum(len(v) for v in skips.values())
    out("\nskipped, by reason:")
    for reason, names in sorted(skips.items(), key=lambda kv: -len(kv[1])):
        out("  %3d  %s" % (len(names), reason))
    if failures:
        out("\nfailed:")
        for name in failures:
            out("  " + name)
    out("total time %.1f s" % (time.time() - started))
    out("spec: %d passed, %d failed, %d skipped" % (passed, len(failures), skipped))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
