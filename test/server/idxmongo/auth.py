"""SCRAM-SHA-256 and SCRAM-SHA-1 server side (RFC 5802/7677 as MongoDB uses them via saslStart/saslContinue).

The users are those of authz.Users: the one given on the command line (`admin`, role root) and those
createUser made, each authenticating against its own database (the client's authSource). For SCRAM-SHA-1
MongoDB hashes the password as md5("user:mongo:password") hex before PBKDF2; SCRAM-SHA-256 uses the password
itself (SASLprep is the identity for the ASCII passwords tests use). Credentials are derived when the user
is created or its password changed. A connection's `user` is the user's key, `<db>.<user>`.
"""

import base64
import hashlib
import hmac
import os

from bson.binary import Binary

from .errors import MongoError

ITERATIONS = {"SCRAM-SHA-1": 10000, "SCRAM-SHA-256": 15000}
HASHES = {"SCRAM-SHA-1": "sha1", "SCRAM-SHA-256": "sha256"}


def auth_failed():
    """AuthenticationFailed (18) exactly as mongod words it."""
    return MongoError(18, "Authentication failed.")


class Credential:
    """Stored key material of one user for one mechanism."""

    def __init__(self, mechanism, user, password):
        self.hash_name = HASHES[mechanism]
        self.iterations = ITERATIONS[mechanism]
        self.salt = os.urandom(16 if mechanism == "SCRAM-SHA-1" else 28)
        secret = password
        if mechanism == "SCRAM-SHA-1":
            secret = hashlib.md5(("%s:mongo:%s" % (user, password)).encode()).hexdigest()
        salted = hashlib.pbkdf2_hmac(self.hash_name, secret.encode(), self.salt, self.iterations)
        client_key = self._hmac(salted, b"Client Key")
        self.stored_key = hashlib.new(self.hash_name, client_key).digest()
        self.server_key = self._hmac(salted, b"Server Key")

    def _hmac(self, key, msg):
        """HMAC with this mechanism's hash."""
        return hmac.new(key, msg, self.hash_name).digest()

    def verify(self, auth_message, proof):
        """Check a client proof; returns the server signature, or None if the proof is wrong."""
        signature = self._hmac(self.stored_key, auth_message)
        if len(proof) != len(signature):
            return None
        client_key = bytes(a ^ b for a, b in zip(proof, signature))
        if not hmac.compare_digest(hashlib.new(self.hash_name, client_key).digest(), self.stored_key):
            return None
        return self._hmac(self.server_key, auth_message)


def _parse_attrs(text):
    """Parse `a=x,b=y` SCRAM attributes into a dict."""
    attrs = {}
    for part in text.split(","):
        if len(part) >= 2 and part[1] == "=":
            attrs[part[0]] = part[2:]
    return attrs


def _unescape_user(name):
    """SCRAM user names escape ',' and '=' as =2C and =3D."""
    return name.replace("=2C", ",").replace("=3D", "=")


def credentials_for(user, password, mechanisms=None):
    """Credentials of a user for `mechanisms` (both by default), as createUser stores them."""
    return {m: Credential(m, user, password) for m in (mechanisms or HASHES)}


class Authenticator:
    """The SCRAM conversations of connections, against the users of `users` (authz.Users)."""

    def __init__(self, users, user, password):
        self.users = users
        self.user = "admin.%s" % user
        users.add_user("admin", user, credentials_for(user, password), [{"role": "root", "db": "admin"}])

    def mechanisms_for(self, db_user):
        """saslSupportedMechs answer for `db.user`, or None for an unknown user."""
        doc = self.users.users.get(db_user)
        return [m for m in ("SCRAM-SHA-256", "SCRAM-SHA-1") if m in doc["_credentials"]] if doc else None

    def start(self, conn, db, cmd):
        """saslStart: check the client-first message and answer with the server-first message."""
        mechanism = cmd.get("mechanism")
        if mechanism not in HASHES:
            raise MongoError(2, "Received authentication for mechanism %s which is not enabled" % mechanism)
        client_first = bytes(cmd.get("payload", b"")).decode("utf-8", "replace")
        parts = client_first.split(",", 2)
        if len(parts) < 3 or parts[0] not in ("n", "y"):
            raise auth_failed()
        bare = parts[2]
        attrs = _parse_attrs(bare)
        key = "%s.%s" % (db, _unescape_user(attrs.get("n", "")))
        doc = self.users.users.get(key)
        if doc is None or mechanism not in doc["_credentials"] or "r" not in attrs:
            raise auth_failed()
        cred = doc["_credentials"][mechanism]
        nonce = attrs["r"] + base64.b64encode(os.urandom(24)).decode()
        server_first = "r=%s,s=%s,i=%d" % (nonce, base64.b64encode(cred.salt).decode(), cred.iterations)
        options = cmd.get("options") or {}
        conn.sasl = {"cred": cred, "user": key, "bare": bare, "server_first": server_first, "nonce": nonce,
                     "skip_empty": bool(options.get("skipEmptyExchange")), "step": 1}
        return {"conversationId": 1, "done": False, "payload": Binary(server_first.encode()), "ok": 1.0}

    def proceed(self, conn, cmd):
        """saslContinue: verify the client proof (step 1) or finish the empty exchange (step 2)."""
        state = conn.sasl
        if state is None:
            raise MongoError(17, "No SASL session state found")
        if state["step"] == 2:
            conn.sasl = None
            conn.user = state["user"]
            return {"conversationId": 1, "done": True, "payload": Binary(b""), "ok": 1.0}
        client_final = bytes(cmd.get("payload", b"")).decode("utf-8", "replace")
        attrs = _parse_attrs(client_final)
        if attrs.get("r") != state["nonce"] or "p" not in attrs:
            conn.sasl = None
            raise auth_failed()
        without_proof = client_final[:client_final.rindex(",p=")]
        auth_message = ",".join([state["bare"], state["server_first"], without_proof]).encode()
        server_sig = state["cred"].verify(auth_message, base64.b64decode(attrs["p"]))
        if server_sig is None:
            conn.sasl = None
            raise auth_failed()
        payload = Binary(("v=" + base64.b64encode(server_sig).decode()).encode())
        if state["skip_empty"]:
            conn.sasl = None
            conn.user = state["user"]
            return {"conversationId": 1, "done": True, "payload": payload, "ok": 1.0}
        state["step"] = 2
        return {"conversationId": 1, "done": False, "payload": payload, "ok": 1.0}
