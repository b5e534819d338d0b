"""Authorization as mongod does it: users and roles, the privileges of built-in and user-defined roles, and
the privileges each command of this server requires (checked before it runs; error 13 Unauthorized).

A privilege is a resource and a set of actions (mongod's src/mongo/db/auth/privilege.h). Resources:
`{db: D, collection: C}` (one collection), `{db: D, collection: ""}` (every normal collection of D, and
the database itself), `{db: "", collection: C}` (C in every database), `{db: "", collection: ""}` (every
normal resource), `{cluster: true}` and `{anyResource: true}`. A collection whose name starts with
`system.` is matched only by its exact namespace, by `{db: "", collection: C}` and by anyResource, as
mongod's AuthorizationSessionImpl builds its resource search list. The roles of the built-in list are
mongod 6.0's (src/mongo/db/auth/builtin_roles.cpp), with the actions this server has commands for; `root`
(and `__system`) hold every action on anyResource here (see README: differences).

Users are kept in memory per database, keyed as mongod's admin.system.users keys them (`<db>.<user>`);
the user given on the command line is `admin.<user>` with the role root. Role and user changes apply to
every connection at its next command, as mongod's user cache invalidation does on a single node.
"""

import datetime
import uuid

from bson.binary import Binary
from bson.int64 import Int64
from bson.objectid import ObjectId
from bson.timestamp import Timestamp

from .errors import MongoError

READ = {"changeStream", "collStats", "dbHash", "dbStats", "find", "killCursors", "listCollections",
        "listIndexes"}
READ_WRITE = READ | {"convertToCapped", "createCollection", "createIndex", "dropCollection", "dropIndex",
                     "insert", "remove", "renameCollectionSameDB", "update"}
DB_ADMIN = {"bypassDocumentValidation", "collMod", "collStats", "compact", "convertToCapped", "createCollection",
            "createIndex", "dbStats", "dropCollection", "dropDatabase", "dropIndex", "enableProfiler",
            "listCollections", "listIndexes", "planCacheIndexFilter", "planCacheRead", "planCacheWrite",
            "reIndex", "renameCollectionSameDB", "storageDetails", "validate"}
USER_ADMIN = {"changeCustomData", "changePassword", "createRole", "createUser", "dropRole", "dropUser",
              "grantRole", "revokeRole", "setAuthenticationRestriction", "viewRole", "viewUser"}
CLUSTER_MONITOR = {"checkFreeMonitoringStatus", "connPoolStats", "getCmdLineOpts", "getDefaultRWConcern",
                   "getLog", "getParameter", "getShardMap", "hostInfo", "inprog", "listDatabases",
                   "listSessions", "listShards", "netstat", "replSetGetConfig", "replSetGetStatus",
                   "serverStatus", "top"}
CLUSTER_MONITOR_ANY_DB = {"collStats", "dbHash", "dbStats", "indexStats", "getShardVersion", "useUUID"}
OTHER_ACTIONS = {"changeOwnPassword", "changeOwnCustomData", "killAnyCursor", "killAnySession",
                 "configureFailPoint", "enableSharding", "killCursors", "anyAction", "internal",
                 "replSetStateChange", "appendOplogNote", "splitChunk", "moveChunk", "flushRouterConfig"}
ACTIONS = READ | READ_WRITE | DB_ADMIN | USER_ADMIN | CLUSTER_MONITOR | CLUSTER_MONITOR_ANY_DB | OTHER_ACTIONS

CLUSTER = ("cluster",)
ANY = ("any",)

# Roles defined on every database, and those defined on admin only (mongod's builtin_roles.cpp)
DB_ROLES = ("read", "readWrite", "dbAdmin", "dbOwner", "userAdmin", "enableSharding")
ADMIN_ROLES = ("clusterMonitor", "readAnyDatabase", "readWriteAnyDatabase", "dbAdminAnyDatabase",
               "userAdminAnyDatabase", "root", "__system")


def db_resource(db):
    """The resource of a whole database ({db: D, collection: ""})."""
    return ("ns", db, "")


def ns_resource(db, coll):
    """The resource of one collection."""
    return ("ns", db, coll)


def builtin_privileges(role, db):
    """[(resource, actions)] of built-in role `role` on `db`, or None if it is not one there."""
    any_normal = ("ns", "", "")
    if role in DB_ROLES:
        here = db_resource(db)
        return {"read": [(here, READ)],
                "readWrite": [(here, READ_WRITE)],
                "dbAdmin": [(here, DB_ADMIN), (ns_resource(db, "system.profile"), READ)],
                "dbOwner": [(here, READ_WRITE | DB_ADMIN | USER_ADMIN), (ns_resource(db, "system.profile"), READ)],
                "userAdmin": [(here, USER_ADMIN)],
                "enableSharding": [(here, {"enableSharding"})]}[role]
    if db != "admin" or role not in ADMIN_ROLES:
        return None
    if role == "clusterMonitor":
        return [(CLUSTER, CLUSTER_MONITOR), (any_normal, CLUSTER_MONITOR_ANY_DB)]
    if role == "readAnyDatabase":
        return [(any_normal, READ), (CLUSTER, {"listDatabases"})]
    if role == "readWriteAnyDatabase":
        return [(any_normal, READ_WRITE), (CLUSTER, {"listDatabases"})]
    if role == "dbAdminAnyDatabase":
        return [(any_normal, DB_ADMIN), (CLUSTER, {"listDatabases"})]
    if role == "userAdminAnyDatabase":
        return [(any_normal, USER_ADMIN), (CLUSTER, {"listDatabases", "viewUser", "viewRole"})]
    return [(ANY, ACTIONS)]  # root, __system


def parse_resource(doc, role_db=None):
    """A privilege's resource document as a resource tuple (BadValue for a malformed one). With
    `role_db` (a role of a database other than admin) it must target that database only."""
    if not isinstance(doc, dict):
        raise MongoError(2, "resource must be an object")
    if doc.get("cluster") is True and len(doc) == 1:
        resource = CLUSTER
    elif doc.get("anyResource") is True and len(doc) == 1:
        resource = ANY
    elif set(doc) == {"db", "collection"} and isinstance(doc["db"], str) and isinstance(doc["collection"], str):
        resource = ("ns", doc["db"], doc["collection"])
    else:
        raise MongoError(2, "resource must have exactly the fields db and collection, or cluster: true, or "
                            "anyResource: true")
    if role_db is not None and role_db != "admin" and (resource[0] != "ns" or resource[1] != role_db):
        raise MongoError(49, "Roles on the '%s' database cannot be granted privileges that target other "
                             "databases or the cluster" % role_db)
    return resource


def resource_doc(resource):
    """A resource tuple as the document mongod shows."""
    if resource == CLUSTER:
        return {"cluster": True}
    if resource == ANY:
        return {"anyResource": True}
    return {"db": resource[1], "collection": resource[2]}


def parse_privileges(docs, role_db):
    """The `privileges` argument of createRole and its kin: [(resource, set of actions)]."""
    if not isinstance(docs, list):
        raise MongoError(2, "privileges must be an array")
    out = []
    for doc in docs:
        if not isinstance(doc, dict) or set(doc) != {"resource", "actions"} or not isinstance(doc["actions"], list):
            raise MongoError(2, "A privilege must have exactly the fields resource and actions")
        for action in doc["actions"]:
            if action not in ACTIONS:
                raise MongoError(2, "Unrecognized action privilege string: %s" % action)
        out.append((parse_resource(doc["resource"], role_db), set(doc["actions"])))
    return out


def _matches(granted, target):
    """Does a privilege on resource `granted` cover resource `target`?"""
    if granted == ANY or granted == target:
        return True
    if target == CLUSTER or granted == CLUSTER:
        return False
    _, db, coll = target
    _, gdb, gcoll = granted
    if coll == "":  # a database resource
        return gcoll == "" and gdb in ("", db)
    if coll.startswith("system."):
        return gdb == "" and gcoll == coll
    return (gdb in ("", db)) and (gcoll in ("", coll))


class Users:
    """Users and user-defined roles of the server, and what each authenticated user may do."""

    def __init__(self):
        self.users = {}  # "<db>.<user>" -> user document (credentials under "_credentials")
        self.roles = {}  # "<db>.<role>" -> {"_id", "role", "db", "privileges": [...], "roles": [...]}

    # -------------------------------------------------------------------------------------- roles

    def role_exists(self, role, db):
        """Is role@db built in or defined?"""
        return builtin_privileges(role, db) is not None or "%s.%s" % (db, role) in self.roles

    def role_closure(self, roles):
        """Every role reachable from `roles` ([(role, db)]), themselves included, in order."""
        seen, order, todo = set(), [], list(roles)
        while todo:
            role = todo.pop(0)
            if role in seen:
                continue
            seen.add(role)
            order.append(role)
            doc = self.roles.get("%s.%s" % (role[1], role[0]))
            if doc is not None:
                todo.extend((r["role"], r["db"]) for r in doc["roles"])
        return order

    def role_privileges(self, roles):
        """[(resource, actions)] of the roles `roles` and those they inherit."""
        out = []
        for role, db in self.role_closure(roles):
            builtin = builtin_privileges(role, db)
            if builtin is not None:
                out.extend(builtin)
                continue
            doc = self.roles.get("%s.%s" % (db, role))
            if doc is not None:
                out.extend(doc["_parsed"])
        return out

    # -------------------------------------------------------------------------------------- users

    def add_user(self, db, name, credentials, roles, custom_data=None):
        """Define user name@db (its document as mongod keeps it in admin.system.users)."""
        doc = {"_id": "%s.%s" % (db, name), "userId": Binary(uuid.uuid4().bytes, 4), "user": name, "db": db,
               "roles": [dict(r) for r in roles], "_credentials": credentials}
        if custom_data is not None:
            doc["customData"] = custom_data
        self.users[doc["_id"]] = doc
        return doc

    def user_roles(self, user_key):
        """[(role, db)] granted to a user (none for an unknown user)."""
        doc = self.users.get(user_key)
        return [(r["role"], r["db"]) for r in doc["roles"]] if doc else []

    def privileges(self, user_key):
        """Everything the user may do: [(resource, actions)]."""
        return self.role_privileges(self.user_roles(user_key))

    def merged_privileges(self, privileges):
        """Privileges merged by resource, as connectionStatus and usersInfo show them."""
        merged = {}
        for resource, actions in privileges:
            merged.setdefault(resource, set()).update(actions)
        return [{"resource": resource_doc(r), "actions": sorted(a)} for r, a in sorted(merged.items(), key=repr)]

    def authorized(self, user_key, resource, actions):
        """May the user do every action of `actions` on `resource`?"""
        return not self.missing(user_key, resource, actions)

    def missing(self, user_key, resource, actions):
        """The actions of `actions` the user may not do on `resource` (sorted)."""
        privileges = self.privileges(user_key)
        left = set(actions)
        for granted, granted_actions in privileges:
            if left and _matches(granted, resource):
                left -= granted_actions
        return sorted(left)

    def any_privilege_in_db(self, user_key, db):
        """Has the user any privilege on a resource of database `db` (mongod's
        isAuthorizedForAnyActionOnAnyResourceInDB)?"""
        for granted, actions in self.privileges(user_key):
            if actions and (granted == ANY or (granted[0] == "ns" and granted[1] in ("", db))):
                return True
        return False

    def any_privilege_on(self, user_key, db, coll):
        """Has the user any action on collection db.coll?"""
        return any(actions and _matches(granted, ns_resource(db, coll))
                   for granted, actions in self.privileges(user_key))


# ---------------------------------------------------------------------------- the message of error 13

def _value_text(value):
    """A value as mongod's BSONObj::toString writes it (near enough for messages)."""
    if isinstance(value, dict) or hasattr(value, "items"):
        items = list(value.items())
        if not items:
            return "{}"
        return "{ %s }" % ", ".join("%s: %s" % (k, _value_text(v)) for k, v in items)
    if isinstance(value, (list, tuple)):
        return "[ %s ]" % ", ".join(_value_text(v) for v in value) if value else "[]"
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, str):
        return '"%s"' % value.replace('"', '\\"')
    if isinstance(value, Int64):
        return str(int(value))
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, ObjectId):
        return "ObjectId('%s')" % value
    if isinstance(value, Timestamp):
        return "Timestamp(%d, %d)" % (value.time, value.inc)
    if isinstance(value, bytes) and not isinstance(value, Binary):
        value = Binary(value, 0)
    if isinstance(value, uuid.UUID):
        return 'UUID("%s")' % value
    if isinstance(value, Binary):
        if value.subtype == 4 and len(value) == 16:
            h = bytes(value).hex()
            return 'UUID("%s-%s-%s-%s-%s")' % (h[:8], h[8:12], h[12:16], h[16:20], h[20:])
        return "BinData(%d, %s)" % (value.subtype, bytes(value).hex().upper())
    if isinstance(value, datetime.datetime):
        return "new Date(%d)" % int(value.replace(tzinfo=datetime.timezone.utc).timestamp() * 1000)
    return str(value)


def snip_for_logging(name, cmd):
    """The command as mongod's snipForLogging leaves it: passwords of user commands replaced by "xxx"."""
    if name in ("createUser", "updateUser") and "pwd" in cmd:
        cmd = dict(cmd)
        cmd["pwd"] = "xxx"
    return cmd


def unauthorized(db, name, cmd, sequences=()):
    """Unauthorized (13) as CommandInvocation::checkAuthorization words it: the request body (document
    sequences are not part of it) with `$db`."""
    body = {k: v for k, v in snip_for_logging(name, cmd).items() if k not in sequences}
    body.setdefault("$db", db)
    return MongoError(13, "not authorized on %s to execute command %s" % (db, _value_text(body)))
