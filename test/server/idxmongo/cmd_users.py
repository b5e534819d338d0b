"""User and role management commands (createUser ... revokePrivilegesFromRole, usersInfo, rolesInfo) and
connectionStatus, on the users and roles of authz.Users, with mongod's replies and error codes
(src/mongo/db/commands/user_management_commands.cpp, connection_status.cpp). Their privileges are checked
by authz_cmds before they run. Without --user (no authentication) they are refused."""

import base64

from .auth import HASHES, credentials_for
from .authz import builtin_privileges, parse_privileges
from .errors import MongoError

ROLE_FIELDS = ("role", "db")


def _users(ctx):
    """The server's users (authentication must be on)."""
    if ctx.server.auth is None:
        raise MongoError(2, "user management needs the server to run with --user (authentication)")
    return ctx.server.users


def _role_names(ctx, roles, field="roles"):
    """A roles argument as [{role, db}] (a string names a role of the command's database); RoleNotFound
    (31) for a role that does not exist."""
    if not isinstance(roles, list):
        raise MongoError(2, "\"%s\" must be an array" % field)
    out = []
    for item in roles:
        if isinstance(item, str):
            role = {"role": item, "db": ctx.db}
        elif isinstance(item, dict) and isinstance(item.get("role"), str) and isinstance(item.get("db"), str):
            role = {"role": item["role"], "db": item["db"]}
        else:
            raise MongoError(2, "Role names must be either strings or objects with role and db fields")
        if not ctx.server.users.role_exists(role["role"], role["db"]):
            raise MongoError(31, "Could not find role: %s@%s" % (role["role"], role["db"]))
        if role not in out:
            out.append(role)
    return out


def _mechanisms(cmd):
    """The mechanisms createUser/updateUser asks for (both by default)."""
    mechanisms = cmd.get("mechanisms")
    if mechanisms is None:
        return None
    if not isinstance(mechanisms, list) or not mechanisms or any(m not in HASHES for m in mechanisms):
        raise MongoError(2, "mechanisms field must be a non-empty subset of SCRAM-SHA-1 and SCRAM-SHA-256")
    return mechanisms


def _user_doc(ctx, name):
    """The document of user name@<command db>, or UserNotFound (11)."""
    doc = ctx.server.users.users.get("%s.%s" % (ctx.db, name))
    if doc is None:
        raise MongoError(11, "Could not find user \"%s\" for db \"%s\"" % (name, ctx.db))
    return doc


def cmd_create_user(ctx):
    """createUser: {createUser: name, pwd, roles, customData?, mechanisms?}."""
    users = _users(ctx)
    cmd = ctx.cmd
    name = cmd.get("createUser")
    if not isinstance(name, str) or not name:
        raise MongoError(2, "User name must be a non-empty string")
    if not isinstance(cmd.get("pwd"), str) or not cmd["pwd"]:
        raise MongoError(2, "Must provide a 'pwd' field for all user documents, except those with '$external' "
                            "as the user's source db")
    if "roles" not in cmd:
        raise MongoError(40414, "BSON field 'createUser.roles' is missing but a required field")
    roles = _role_names(ctx, cmd["roles"])
    if "%s.%s" % (ctx.db, name) in users.users:
        raise MongoError(51003, "User \"%s@%s\" already exists" % (name, ctx.db))
    users.add_user(ctx.db, name, credentials_for(name, cmd["pwd"], _mechanisms(cmd)), roles, cmd.get("customData"))
    return {"ok": 1.0}


def cmd_update_user(ctx):
    """updateUser: a new password, roles (replacing the old ones) or customData."""
    _users(ctx)
    cmd = ctx.cmd
    doc = _user_doc(ctx, cmd.get("updateUser"))
    if not any(k in cmd for k in ("pwd", "roles", "customData", "mechanisms")):
        raise MongoError(2, "Must specify at least one field to update in updateUser")
    if "roles" in cmd:
        doc["roles"] = _role_names(ctx, cmd["roles"])
    if "pwd" in cmd:
        doc["_credentials"] = credentials_for(doc["user"], cmd["pwd"], _mechanisms(cmd))
    if "customData" in cmd:
        doc["customData"] = cmd["customData"]
    return {"ok": 1.0}


def cmd_drop_user(ctx):
    """dropUser."""
    users = _users(ctx)
    doc = _user_doc(ctx, ctx.cmd.get("dropUser"))
    del users.users[doc["_id"]]
    return {"ok": 1.0}


def _grant_or_revoke_user_roles(ctx, grant):
    """grantRolesToUser / revokeRolesFromUser."""
    _users(ctx)
    doc = _user_doc(ctx, ctx.cmd.get(ctx.name))
    roles = _role_names(ctx, ctx.cmd.get("roles"))
    if grant:
        doc["roles"] += [r for r in roles if r not in doc["roles"]]
    else:
        doc["roles"] = [r for r in doc["roles"] if r not in roles]
    return {"ok": 1.0}


def cmd_grant_roles_to_user(ctx):
    """grantRolesToUser."""
    return _grant_or_revoke_user_roles(ctx, True)


def cmd_revoke_roles_from_user(ctx):
    """revokeRolesFromUser."""
    return _grant_or_revoke_user_roles(ctx, False)


def _user_targets(ctx, arg):
    """The user keys a usersInfo argument names (1: every user of the database)."""
    users = ctx.server.users.users
    if isinstance(arg, dict) and arg.get("forAllDBs") is True:
        return sorted(users)
    if isinstance(arg, (int, float)) and not isinstance(arg, bool) and arg == 1:
        return sorted(k for k, d in users.items() if d["db"] == ctx.db)
    items = arg if isinstance(arg, list) else [arg]
    keys = []
    for item in items:
        if isinstance(item, str):
            keys.append("%s.%s" % (ctx.db, item))
        elif isinstance(item, dict) and isinstance(item.get("user"), str) and isinstance(item.get("db"), str):
            keys.append("%s.%s" % (item["db"], item["user"]))
        else:
            raise MongoError(2, "User name must be either a string or an object with user and db fields")
    return [k for k in keys if k in users]


def _credentials_doc(doc):
    """showCredentials: the stored SCRAM material, as mongod shows it."""
    out = {}
    for mechanism, cred in sorted(doc["_credentials"].items()):
        out[mechanism] = {"iterationCount": cred.iterations, "salt": base64.b64encode(cred.salt).decode(),
                          "storedKey": base64.b64encode(cred.stored_key).decode(),
                          "serverKey": base64.b64encode(cred.server_key).decode()}
    return out


def cmd_users_info(ctx):
    """usersInfo: {usersInfo: 1 | name | {user, db} | [...] | {forAllDBs: true}, showCredentials,
    showPrivileges}."""
    users = _users(ctx)
    out = []
    for key in _user_targets(ctx, ctx.cmd.get("usersInfo")):
        doc = users.users[key]
        info = {"_id": doc["_id"], "userId": doc["userId"], "user": doc["user"], "db": doc["db"]}
        if "customData" in doc:
            info["customData"] = doc["customData"]
        info["roles"] = [dict(r) for r in doc["roles"]]
        if ctx.cmd.get("showCredentials"):
            info["credentials"] = _credentials_doc(doc)
        if ctx.cmd.get("showPrivileges"):
            roles = users.user_roles(key)
            info["inheritedRoles"] = [{"role": r, "db": d} for r, d in users.role_closure(roles)]
            info["inheritedPrivileges"] = users.merged_privileges(users.privileges(key))
        info["mechanisms"] = sorted(doc["_credentials"])
        out.append(info)
    return {"users": out, "ok": 1.0}


def _role_key(ctx, name):
    """The key of user-defined role name@<command db>."""
    return "%s.%s" % (ctx.db, name)


def _role_doc(ctx, name):
    """A user-defined role of the command's database (31 if missing; 49 for a built-in one)."""
    if isinstance(name, str) and builtin_privileges(name, ctx.db) is not None:
        raise MongoError(49, "Cannot modify built-in role: %s@%s" % (name, ctx.db))
    doc = ctx.server.users.roles.get(_role_key(ctx, name))
    if doc is None:
        raise MongoError(31, "Role %s@%s not found" % (name, ctx.db))
    return doc


def _set_privileges(doc, parsed, raw):
    """Store a role's privileges, parsed and as given."""
    doc["_parsed"] = parsed
    doc["privileges"] = raw


def _check_no_cycle(ctx, doc):
    """A role may not inherit itself (InvalidRoleModification)."""
    own = (doc["role"], doc["db"])
    for inherited in ctx.server.users.role_closure([(r["role"], r["db"]) for r in doc["roles"]]):
        if inherited == own:
            raise MongoError(49, "Granting roles to %s@%s would introduce a cycle in the role graph"
                             % own)


def cmd_create_role(ctx):
    """createRole: {createRole: name, privileges, roles}."""
    users = _users(ctx)
    cmd = ctx.cmd
    name = cmd.get("createRole")
    if not isinstance(name, str) or not name:
        raise MongoError(2, "Role name must be a non-empty string")
    if builtin_privileges(name, ctx.db) is not None:
        raise MongoError(2, "Cannot create roles with the same name as a built-in role")
    if _role_key(ctx, name) in users.roles:
        raise MongoError(51002, "Role \"%s@%s\" already exists" % (name, ctx.db))
    for field in ("privileges", "roles"):
        if field not in cmd:
            raise MongoError(40414, "BSON field 'createRole.%s' is missing but a required field" % field)
    parsed = parse_privileges(cmd["privileges"], ctx.db)
    doc = {"_id": _role_key(ctx, name), "role": name, "db": ctx.db, "roles": _role_names(ctx, cmd["roles"])}
    _set_privileges(doc, parsed, [dict(p) for p in cmd["privileges"]])
    _check_no_cycle(ctx, doc)
    users.roles[doc["_id"]] = doc
    return {"ok": 1.0}


def cmd_update_role(ctx):
    """updateRole: replaces privileges and/or roles."""
    _users(ctx)
    cmd = ctx.cmd
    doc = _role_doc(ctx, cmd.get("updateRole"))
    if "privileges" not in cmd and "roles" not in cmd:
        raise MongoError(2, "Must specify at least one field to update in updateRole")
    new = dict(doc)
    if "privileges" in cmd:
        _set_privileges(new, parse_privileges(cmd["privileges"], ctx.db), [dict(p) for p in cmd["privileges"]])
    if "roles" in cmd:
        new["roles"] = _role_names(ctx, cmd["roles"])
    _check_no_cycle(ctx, new)
    doc.update(new)
    return {"ok": 1.0}


def cmd_drop_role(ctx):
    """dropRole (users and roles that held it lose it, as on mongod)."""
    users = _users(ctx)
    doc = _role_doc(ctx, ctx.cmd.get("dropRole"))
    del users.roles[doc["_id"]]
    gone = {"role": doc["role"], "db": doc["db"]}
    for holder in list(users.users.values()) + list(users.roles.values()):
        holder["roles"] = [r for r in holder["roles"] if r != gone]
    return {"ok": 1.0}


def _privilege_key(raw):
    """A privilege document's resource as a comparable key."""
    return repr(sorted(raw["resource"].items()))


def cmd_grant_privileges_to_role(ctx):
    """grantPrivilegesToRole: actions are added to the role's privilege on the same resource."""
    _users(ctx)
    doc = _role_doc(ctx, ctx.cmd.get("grantPrivilegesToRole"))
    parse_privileges(ctx.cmd.get("privileges"), ctx.db)
    raw = [dict(p) for p in doc["privileges"]]
    for priv in ctx.cmd["privileges"]:
        for existing in raw:
            if _privilege_key(existing) == _privilege_key(priv):
                existing["actions"] = sorted(set(existing["actions"]) | set(priv["actions"]))
                break
        else:
            raw.append({"resource": dict(priv["resource"]), "actions": sorted(set(priv["actions"]))})
    _set_privileges(doc, parse_privileges(raw, ctx.db), raw)
    return {"ok": 1.0}


def cmd_revoke_privileges_from_role(ctx):
    """revokePrivilegesFromRole: the actions are removed from the role's privilege on the same resource."""
    _users(ctx)
    doc = _role_doc(ctx, ctx.cmd.get("revokePrivilegesFromRole"))
    parse_privileges(ctx.cmd.get("privileges"), ctx.db)
    raw = []
    for existing in doc["privileges"]:
        actions = set(existing["actions"])
        for priv in ctx.cmd["privileges"]:
            if _privilege_key(existing) == _privilege_key(priv):
                actions -= set(priv["actions"])
        if actions:
            raw.append({"resource": dict(existing["resource"]), "actions": sorted(actions)})
    _set_privileges(doc, parse_privileges(raw, ctx.db), raw)
    return {"ok": 1.0}


def _grant_or_revoke_role_roles(ctx, grant):
    """grantRolesToRole / revokeRolesFromRole."""
    _users(ctx)
    doc = _role_doc(ctx, ctx.cmd.get(ctx.name))
    roles = _role_names(ctx, ctx.cmd.get("roles"))
    new = dict(doc)
    new["roles"] = doc["roles"] + [r for r in roles if r not in doc["roles"]] if grant else \
        [r for r in doc["roles"] if r not in roles]
    _check_no_cycle(ctx, new)
    doc["roles"] = new["roles"]
    return {"ok": 1.0}


def cmd_grant_roles_to_role(ctx):
    """grantRolesToRole."""
    return _grant_or_revoke_role_roles(ctx, True)


def cmd_revoke_roles_from_role(ctx):
    """revokeRolesFromRole."""
    return _grant_or_revoke_role_roles(ctx, False)


def _role_info(users, role, db, show_privileges):
    """One entry of rolesInfo."""
    doc = users.roles.get("%s.%s" % (db, role))
    builtin = doc is None
    direct = [] if builtin else [(r["role"], r["db"]) for r in doc["roles"]]
    info = {"_id": "%s.%s" % (db, role), "role": role, "db": db}
    if show_privileges:
        info["privileges"] = users.merged_privileges(builtin_privileges(role, db) if builtin else doc["_parsed"])
    info["roles"] = [{"role": r, "db": d} for r, d in direct]
    info["inheritedRoles"] = [{"role": r, "db": d} for r, d in users.role_closure(direct)]
    if show_privileges:
        info["inheritedPrivileges"] = users.merged_privileges(users.role_privileges([(role, db)]))
    info["isBuiltin"] = builtin
    return info


def cmd_roles_info(ctx):
    """rolesInfo: {rolesInfo: 1 | name | {role, db} | [...], showPrivileges, showBuiltinRoles}."""
    users = _users(ctx)
    arg = ctx.cmd.get("rolesInfo")
    show = bool(ctx.cmd.get("showPrivileges"))
    if isinstance(arg, (int, float)) and not isinstance(arg, bool) and arg == 1:
        names = sorted((d["role"], d["db"]) for d in users.roles.values() if d["db"] == ctx.db)
        if ctx.cmd.get("showBuiltinRoles"):
            from .authz import ADMIN_ROLES, DB_ROLES
            names += [(r, ctx.db) for r in DB_ROLES + (ADMIN_ROLES if ctx.db == "admin" else ())]
    else:
        names = []
        for item in arg if isinstance(arg, list) else [arg]:
            if isinstance(item, str):
                names.append((item, ctx.db))
            elif isinstance(item, dict) and isinstance(item.get("role"), str):
                names.append((item["role"], item.get("db", ctx.db)))
            else:
                raise MongoError(2, "Role names must be either strings or objects with role and db fields")
        names = [n for n in names if users.role_exists(*n)]
    return {"roles": [_role_info(users, r, d, show) for r, d in names], "ok": 1.0}


def cmd_connection_status(ctx):
    """connectionStatus: the connection's users and roles, and with showPrivileges everything they may do
    (merged by resource)."""
    server = ctx.server
    user = ctx.conn.user
    info = {"authenticatedUsers": [], "authenticatedUserRoles": []}
    if server.auth is not None and user is not None and user in server.users.users:
        doc = server.users.users[user]
        info["authenticatedUsers"] = [{"user": doc["user"], "db": doc["db"]}]
        info["authenticatedUserRoles"] = [{"role": r, "db": d}
                                          for r, d in server.users.role_closure(server.users.user_roles(user))]
    if ctx.cmd.get("showPrivileges"):
        info["authenticatedUserPrivileges"] = server.users.merged_privileges(server.users.privileges(user)) \
            if info["authenticatedUsers"] else []
    return {"authInfo": info, "ok": 1.0}


COMMANDS = {
    "createUser": cmd_create_user,
    "updateUser": cmd_update_user,
    "dropUser": cmd_drop_user,
    "usersInfo": cmd_users_info,
    "grantRolesToUser": cmd_grant_roles_to_user,
    "revokeRolesFromUser": cmd_revoke_roles_from_user,
    "createRole": cmd_create_role,
    "updateRole": cmd_update_role,
    "dropRole": cmd_drop_role,
    "rolesInfo": cmd_roles_info,
    "grantPrivilegesToRole": cmd_grant_privileges_to_role,
    "revokePrivilegesFromRole": cmd_revoke_privileges_from_role,
    "grantRolesToRole": cmd_grant_roles_to_role,
    "revokeRolesFromRole": cmd_revoke_roles_from_role,
    "connectionStatus": cmd_connection_status,
}
