"""The privileges each command of this server requires, as mongod 6.0's commands check them
(doCheckAuthorization / addRequiredPrivileges of each command; aggregation stages' requiredPrivileges), and
the owner checks of cursors (getMore, killCursors).

`required(...)` gives a list of requirements, each a list of alternatives [(resource, actions)], one of
which must be held entirely: `create` takes createCollection or insert; every other requirement has one
alternative. Commands absent from REQUIRED_BY and from NO_PRIVILEGES are refused to everyone but root.
"""

from .authz import ANY, CLUSTER, db_resource, ns_resource, unauthorized
from .errors import MongoError

# Commands that need no privilege (authentication is still checked where mongod requires it)
NO_PRIVILEGES = {"hello", "isMaster", "ismaster", "ping", "buildInfo", "buildinfo", "saslStart", "saslContinue",
                 "logout", "getLastError", "getlasterror", "whatsmyuri", "endSessions", "commitTransaction",
                 "abortTransaction", "connectionStatus", "getMore"}


def _ns(db, cmd, name):
    """The collection resource named by the command's first field (the database's for a non-string)."""
    coll = cmd.get(name)
    return ns_resource(db, coll) if isinstance(coll, str) else db_resource(db)


def _bypass(cmd, actions):
    """mongod adds bypassDocumentValidation when the command asks for it."""
    return actions | {"bypassDocumentValidation"} if cmd.get("bypassDocumentValidation") else actions


def _update_actions(cmd):
    """update needs insert as well for an upsert."""
    statements = cmd.get("updates") or []
    upsert = any(isinstance(s, dict) and s.get("upsert") for s in statements)
    return _bypass(cmd, {"update", "insert"} if upsert else {"update"})


def _find_and_modify_actions(cmd):
    """findAndModify: find plus remove, or update (and insert for an upsert)."""
    if cmd.get("remove"):
        return {"find", "remove"}
    return _bypass(cmd, {"find", "update", "insert"} if cmd.get("upsert") else {"find", "update"})


def _pipeline_requirements(db, coll, pipeline):
    """The privileges of an aggregation on db.coll (None: `aggregate: 1`): each stage's, mongod's
    LiteParsedDocumentSource::requiredPrivileges."""
    out = []
    stages = pipeline if isinstance(pipeline, list) else []
    first = next(iter(stages[0]), None) if stages and isinstance(stages[0], dict) else None
    if first == "$changeStream":
        spec = stages[0]["$changeStream"] if isinstance(stages[0]["$changeStream"], dict) else {}
        if coll is None and db == "admin" and spec.get("allChangesForCluster"):
            target = ("ns", "", "")
        elif coll is None:
            target = db_resource(db)
        else:
            target = ns_resource(db, coll)
        out.append((target, {"changeStream", "find"}))
    elif first == "$collStats" and coll is not None:
        out.append((ns_resource(db, coll), {"collStats"}))
    elif coll is not None:
        out.append((ns_resource(db, coll), {"find"}))
    for stage in stages:
        if not isinstance(stage, dict) or not stage:
            continue
        name, spec = next(iter(stage.items()))
        if name in ("$lookup", "$graphLookup") and isinstance(spec, dict):
            if isinstance(spec.get("from"), str):
                out.append((ns_resource(db, spec["from"]), {"find"}))
            if isinstance(spec.get("pipeline"), list):
                out.extend(_pipeline_requirements(db, spec.get("from"), spec["pipeline"])[1:]
                           if isinstance(spec.get("from"), str) else [])
        elif name == "$unionWith":
            target = spec if isinstance(spec, str) else (spec or {}).get("coll")
            if isinstance(target, str):
                out.extend(_pipeline_requirements(db, target, (spec or {}).get("pipeline", [])
                                                  if isinstance(spec, dict) else []))
        elif name == "$facet" and isinstance(spec, dict):
            for sub in spec.values():
                out.extend(_pipeline_requirements(db, None, sub))
        elif name == "$out":
            target = spec if isinstance(spec, str) else (spec or {}).get("coll")
            target_db = (spec or {}).get("db", db) if isinstance(spec, dict) else db
            if isinstance(target, str):
                out.append((ns_resource(target_db, target), {"insert", "remove"}))
        elif name == "$merge":
            into = spec if isinstance(spec, str) else (spec or {}).get("into")
            if isinstance(into, dict):
                out.append((ns_resource(into.get("db", db), into.get("coll")), {"insert", "update"}))
            elif isinstance(into, str):
                out.append((ns_resource(db, into), {"insert", "update"}))
    return out


def _rename_ok(users, user, cmd):
    """renameCollection within a database, as rename_collection_common.cpp checks it."""
    source, target = cmd.get("renameCollection"), cmd.get("to")
    if not isinstance(source, str) or not isinstance(target, str):
        return True  # the command refuses it itself
    (sdb, _, scoll), (tdb, _, tcoll) = source.partition("."), target.partition(".")
    drop_target = bool(cmd.get("dropTarget"))
    if sdb == tdb and not scoll.startswith("system.") and not tcoll.startswith("system."):
        can_rename = users.authorized(user, db_resource(sdb), {"renameCollectionSameDB"})
        can_drop = not drop_target or users.authorized(user, ns_resource(tdb, tcoll), {"dropCollection"})
        read_src = users.authorized(user, ns_resource(sdb, scoll), {"find"})
        read_dst = users.authorized(user, ns_resource(tdb, tcoll), {"find"})
        if can_rename and can_drop and (read_src or not read_dst):
            return True
    if not users.authorized(user, ns_resource(sdb, scoll), {"find", "dropCollection"}):
        return False
    dest = {"insert", "createIndex"} | ({"dropCollection"} if drop_target else set())
    return users.authorized(user, ns_resource(tdb, tcoll), dest)


def _role_db_requirements(db, roles, action):
    """grantRole/revokeRole on the database of each role named in `roles`."""
    out = []
    for role in roles if isinstance(roles, list) else []:
        role_db = role.get("db", db) if isinstance(role, dict) else db
        out.append((db_resource(role_db), {action}))
    return out


def _bulk_write_requirements(cmd):
    """bulkWrite: each op's action on its namespace."""
    out = []
    ns_info = cmd.get("nsInfo") if isinstance(cmd.get("nsInfo"), list) else []
    for op in cmd.get("ops") or []:
        if not isinstance(op, dict):
            continue
        for kind, action in (("insert", "insert"), ("update", "update"), ("delete", "remove")):
            index = op.get(kind)
            if isinstance(index, int) and 0 <= index < len(ns_info) and isinstance(ns_info[index], dict):
                db, _, coll = str(ns_info[index].get("ns", "")).partition(".")
                actions = {action, "insert"} if kind == "update" and op.get("upsert") else {action}
                out.append((ns_resource(db, coll), _bypass(cmd, actions)))
    return out


def required(db, name, cmd):
    """[(resource, actions)] that `name` needs on `db` (all of them), or None for commands decided
    elsewhere (NO_PRIVILEGES, create, renameCollection, listCollections, listDatabases, killCursors,
    usersInfo, rolesInfo, updateUser)."""
    simple = {
        "find": {"find"}, "count": {"find"}, "distinct": {"find"},
        "insert": _bypass(cmd, {"insert"}), "delete": {"remove"},
        "drop": {"dropCollection"}, "collMod": {"collMod"}, "listIndexes": {"listIndexes"},
        "createIndexes": {"createIndex"}, "dropIndexes": {"dropIndex"}, "deleteIndexes": {"dropIndex"},
        "collStats": {"collStats"}, "shardCollection": {"enableSharding"}, "shardcollection": {"enableSharding"},
    }
    if name in simple:
        if name in ("shardCollection", "shardcollection"):
            target_db, _, coll = str(cmd.get(name, "")).partition(".")
            return [(ns_resource(target_db, coll), simple[name])]
        return [(_ns(db, cmd, name), simple[name])]
    if name == "update":
        return [(_ns(db, cmd, name), _update_actions(cmd))]
    if name in ("findAndModify", "findandmodify"):
        return [(_ns(db, cmd, name), _find_and_modify_actions(cmd))]
    if name == "aggregate":
        coll = cmd.get("aggregate") if isinstance(cmd.get("aggregate"), str) else None
        return _pipeline_requirements(db, coll, cmd.get("pipeline"))
    if name == "explain":
        inner = cmd.get("explain")
        if not isinstance(inner, dict) or not inner:
            return []
        inner_name = next(iter(inner))
        return required(db, inner_name, inner) or []
    cluster = {"serverStatus": {"serverStatus"}, "getParameter": {"getParameter"},
               "killAllSessions": {"killAnySession"}, "configureFailPoint": {"configureFailPoint"},
               "recentCommands": {"inprog"}, "commandCpu": {"inprog"}, "clusterShardStats": {"inprog"},
               "appendOplogNote": {"appendOplogNote"}, "runOnShard": {"configureFailPoint"},
               "setShardClock": {"configureFailPoint"},
               "replSetGetStatus": {"replSetGetStatus"}, "listShards": {"listShards"},
               "split": {"splitChunk"}, "moveChunk": {"moveChunk"}, "flushRouterConfig": {"flushRouterConfig"},
               "replSetStepDown": {"replSetStateChange"}, "replSetStepUp": {"replSetStateChange"},
               "replSetFreeze": {"replSetStateChange"}, "setReplicationLag": {"configureFailPoint"}}
    if name in cluster:
        return [(CLUSTER, cluster[name])]
    if name in ("balancerStart", "balancerStop", "balancerStatus"):  # mongos: on config.settings
        return [(ns_resource("config", "settings"), {"find" if name == "balancerStatus" else "update"})]
    database = {"dbStats": {"dbStats"}, "dropDatabase": {"dropDatabase"}, "enableSharding": {"enableSharding"},
                "enablesharding": {"enableSharding"}, "createUser": {"createUser"}, "dropUser": {"dropUser"},
                "createRole": {"createRole"}, "dropRole": {"dropRole"}}
    if name in database:
        out = [(db_resource(db), database[name])]
        if name in ("createUser", "createRole"):
            out.extend(_role_db_requirements(db, cmd.get("roles"), "grantRole"))
        return out
    if name in ("updateRole", "grantPrivilegesToRole", "grantRolesToRole"):
        return [(db_resource(db), {"grantRole"})] + _role_db_requirements(db, cmd.get("roles"), "grantRole")
    if name in ("revokePrivilegesFromRole", "revokeRolesFromRole"):
        return [(db_resource(db), {"revokeRole"})] + _role_db_requirements(db, cmd.get("roles"), "revokeRole")
    if name == "grantRolesToUser":
        return _role_db_requirements(db, cmd.get("roles"), "grantRole")
    if name == "revokeRolesFromUser":
        return _role_db_requirements(db, cmd.get("roles"), "revokeRole")
    if name == "bulkWrite":
        return _bulk_write_requirements(cmd)
    return None


def _own_user(user, db, cmd, field):
    """Does command field `field` name only the authenticated user itself (usersInfo on oneself)?"""
    target = cmd.get(field)
    if isinstance(target, str):
        return user == "%s.%s" % (db, target)
    if isinstance(target, dict) and set(target) == {"user", "db"}:
        return user == "%s.%s" % (target["db"], target["user"])
    return False


def _special_ok(server, user, db, name, cmd):
    """The commands whose check is not a fixed list of privileges; True if allowed."""
    users = server.users
    if name == "create":
        target = _ns(db, cmd, name)
        return users.authorized(user, target, {"createCollection"}) or users.authorized(user, target, {"insert"})
    if name == "renameCollection":
        return _rename_ok(users, user, cmd)
    if name == "listCollections":
        if cmd.get("authorizedCollections") and cmd.get("nameOnly") and users.any_privilege_in_db(user, db):
            return True
        return users.authorized(user, db_resource(db), {"listCollections"})
    if name == "listDatabases":
        return cmd.get("authorizedDatabases", True) is not False or \
            users.authorized(user, CLUSTER, {"listDatabases"})
    if name == "killCursors":
        return _kill_cursors_ok(server, user, db, cmd)
    if name == "usersInfo":
        if _own_user(user, db, cmd, "usersInfo"):
            return True
        target = CLUSTER if isinstance(cmd.get("usersInfo"), dict) and cmd["usersInfo"].get("forAllDBs") \
            else db_resource(db)
        return users.authorized(user, target, {"viewUser"})
    if name == "rolesInfo":
        return users.authorized(user, db_resource(db), {"viewRole"}) or _own_roles(users, user, db, cmd)
    if name == "updateUser":
        own = user == "%s.%s" % (db, cmd.get("updateUser"))
        needs = set()
        if "pwd" in cmd:
            needs.add("changeOwnPassword" if own else "changePassword")
        if "customData" in cmd:
            needs.add("changeOwnCustomData" if own else "changeCustomData")
        if not users.authorized(user, db_resource(db), needs) and not (
                own and users.authorized(user, db_resource(db),
                                         {{"changeOwnPassword": "changePassword",
                                           "changeOwnCustomData": "changeCustomData"}.get(a, a) for a in needs})):
            return False
        if "roles" in cmd:
            return all(users.authorized(user, r, a) for r, a in
                       _role_db_requirements(db, cmd.get("roles"), "grantRole")
                       + _role_db_requirements(db, cmd.get("roles"), "revokeRole"))
        return True
    return False


def _own_roles(users, user, db, cmd):
    """rolesInfo of roles the user holds (directly or inherited) needs no viewRole."""
    held = set(users.role_closure(users.user_roles(user)))
    wanted = cmd.get("rolesInfo")
    names = wanted if isinstance(wanted, list) else [wanted]
    for item in names:
        if isinstance(item, str):
            role = (item, db)
        elif isinstance(item, dict) and isinstance(item.get("role"), str):
            role = (item["role"], item.get("db", db))
        else:
            return False
        if role not in held:
            return False
    return True


def _kill_cursors_ok(server, user, db, cmd):
    """killCursors: each existing cursor is the user's own, or the user has killAnyCursor on its
    namespace (AuthorizationSessionImpl::checkAuthForKillCursors); unknown ids are left to the command."""
    for cursor_id in cmd.get("cursors") or []:
        cursor = server.cursors.cursors.get(int(cursor_id)) if isinstance(cursor_id, int) else None
        if cursor is None:
            continue
        owner = getattr(cursor, "owner", None)
        if owner is not None and owner != user:
            _, _, coll = cursor.ns.partition(".")
            if not server.users.authorized(user, ns_resource(db, coll), {"killAnyCursor"}):
                return False
    return True


def check(server, conn, db, name, cmd, sequences=()):
    """Raise Unauthorized (13) unless the connection's user may run the command; returns the privileges
    it needed ([(resource, actions)]) for a cursor it opens (getMore checks them again)."""
    user = conn.user
    if name in NO_PRIVILEGES:
        return []
    needs = required(db, name, cmd)
    if needs is None:
        if not _special_ok(server, user, db, name, cmd):
            raise unauthorized(db, name, cmd, sequences)
        return []
    for resource, actions in needs:
        if not server.users.authorized(user, resource, actions):
            raise unauthorized(db, name, cmd, sequences)
    return needs


def check_get_more(server, conn, cmd):
    """getMore: the cursor must be the user's own ("was not created by the authenticated user"), and the
    user must still hold the privileges of the command that opened it (getmore_cmd.cpp
    validateAuthorization); an unknown cursor is left to the command (43)."""
    cursor_id = cmd.get("getMore")
    cursor = server.cursors.cursors.get(int(cursor_id)) if isinstance(cursor_id, int) else None
    if cursor is None:
        return
    owner = getattr(cursor, "owner", None)
    if owner is not None and owner != conn.user:
        raise MongoError(13, "cursor id %d was not created by the authenticated user" % cursor_id)
    for resource, actions in getattr(cursor, "privileges", None) or []:
        if not server.users.authorized(conn.user, resource, actions):
            raise MongoError(13, "not authorized for getMore with cursor id %d" % cursor_id)


def note_cursor(server, conn, reply, needs):
    """Remember who opened the cursor of a reply, and with what privileges."""
    cursor_doc = reply.get("cursor") if isinstance(reply, dict) else None
    if not isinstance(cursor_doc, dict) or not cursor_doc.get("id"):
        return
    cursor = server.cursors.cursors.get(int(cursor_doc["id"]))
    if cursor is not None and getattr(cursor, "owner", None) is None:
        cursor.owner = conn.user
        cursor.privileges = needs


def may_see(server, conn, resource):
    """For listCollections/listDatabases filtering: any action on the resource?"""
    if server.auth is None or conn.user is None:
        return True
    if resource[0] == "ns" and resource[2] == "":
        return server.users.any_privilege_in_db(conn.user, resource[1])
    return server.users.any_privilege_on(conn.user, resource[1], resource[2])


__all__ = ["check", "check_get_more", "note_cursor", "may_see", "ANY"]
