#!/usr/bin/python3
"""Sharded index collections (fdw/index/index_shard.c) on a sharded cluster.

Needs the test server's cluster of two shards behind mongos routers (test/env with
IDXTABLE_MONGO_SHARDS=2 IDXTABLE_MONGO_ROUTERS=2; test/run starts one).  A foreign table "f" over a
collection sharded on a hashed _id, with index tables on k (ranged, the default) and s (hashed,
unique), and tables over unsharded collections:

1. create_index's choice: the default is 'ranged' for a sharded collection and 'none' for an
   unsharded one, which can still be asked for 'ranged'; idxtable.indexes shows it; config.collections has the index collections with the
   keys {"_id.k0": 1} and {"_id.k0": "hashed"}; create_index_concurrently shards too, rebuild_index
   works; a bad value is 22023; a MongoDB user without enableSharding gets 42501 naming it when
   it asks for sharding, and an unsharded index collection with a WARNING by default;
2. where entries go: a hashed index spreads its entries over both shards at once; a ranged one after
   a split at the median and a moveChunk of the upper chunk (the test does both); the share of index
   writes on the busiest shard for 1,000 inserts (ranged, hashed, unsharded) is printed;
3. targeting, counted by the find commands each shard ran on the index collection (the shards'
   recentCommands): a point lookup reaches 1 shard, an IN of keys on both shards 2, a range (and its
   count, and an ORDER BY ... LIMIT) inside one chunk of a ranged index 1 and one across the split 2;
3b. EXPLAIN (ANALYZE) names those shards (mongos's explain of each request): a point lookup one, an
   IN of keys on both shards both, a range the shards of its chunks, the same the shards' logs saw;
   the fact fetches and a plain scan of an unsharded collection (the primary shard) name theirs, plain
   scans and pushed-down aggregates of a sharded collection one shard when targeted by the shard key and
   every shard when not, an aggregate of an unsharded collection the primary shard; a failed explain
   leaves its requests "not explained" and fails no query;
4. a unique index table (hashed, and ranged after a split) refuses a duplicate of a key whose entry
   is on either shard (23505), in consistency modes transaction and ordered; a unique index table
   on _id (mongod checks _id per shard only) refuses two rows of one _id in one INSERT batch whose
   shard keys put them on two shards, and leaves no fact of them;
5. a differential run: random INSERTs, UPDATEs and DELETEs through the FDW, the same on a local heap
   table, and routed reads (=, IN, ranges, ORDER BY ... LIMIT) compared, while another session moves
   a chunk of the ranged index collection between the shards (during the reads: the test server's
   shards do not check shard versions, so a write must not race a move); an outside insert is
   indexed by the applier, and an outside update and delete followed (entries deleted and written on
   the shards of their keys); verify_index is clean at the end, and repair_index restores an entry
   deleted behind the FDW's back.

The last line is "index_sharded: N passed, M failed".
"""
import os
import random
import sys
import threading
import time

import psycopg2
import pymongo

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures"))
from results import Results  # noqa: E402  (test/fixtures)
import mongo_client  # noqa: E402
import pg_fixture  # noqa: E402  (test/fixtures)
from routed_reads import q, verify_clean, wait_for  # noqa: E402

DATABASE = "idxtable_ixsh"
SHARDS = ("shard0", "shard1")
ROUTED = ("SET idxtable.enable_plain_scan = off", "SET idxtable.index_consistency = 'any'")


def sqlstate(conn, sql, params=None):
    """The SQLSTATE a statement fails with (None if it succeeds) and its message."""
    try:
        q(conn, sql, params)
        return None, ""
    except psycopg2.Error as exc:
        return exc.pgcode, str(exc)


def ns(index):
    """The index collection of index table f.<index>."""
    return "idxtable.%s" % index


def on_shard(mongo, shard, command, db=DATABASE):
    """A command run on one shard alone."""
    return mongo.admin.command({"runOnShard": shard, "db": db, "command": command})


def clear_logs(mongo):
    """Empty the shards' command logs."""
    for shard in SHARDS:
        on_shard(mongo, shard, {"recentCommands": 1, "clear": True}, db="admin")


def finds_on(mongo, collection):
    """The shards that read `collection` (find, count, aggregate) since the last clear_logs()."""
    reached = []
    for shard in SHARDS:
        cmds = on_shard(mongo, shard, {"recentCommands": 1, "clear": True}, db="admin")["commands"]
        if any(c["command"] in ("find", "count", "aggregate") and c["collection"] == collection for c in cmds):
            reached.append(shard)
    return reached


def reached(mongo, conn, collection, sql, params=None):
    """(rows, shards whose copy of `collection` a routed statement read)."""
    clear_logs(mongo)
    rows = q(conn, sql, params)
    return rows, finds_on(mongo, collection)


def entries_per_shard(mongo, collection):
    """{shard: number of documents of `collection` it holds}."""
    return {shard: on_shard(mongo, shard, {"count": collection}).get("n", 0) for shard in SHARDS}


def busiest_share(counts):
    """The share of entries on the busiest shard (0..1)."""
    total = sum(counts.values())
    return max(counts.values()) / total if total else 0.0


def shard_of_entry(mongo, collection, key):
    """The shard holding an entry of `key` (k0), or None."""
    for shard in SHARDS:
        reply = on_shard(mongo, shard, {"find": collection, "filter": {"_id.k0": key}, "limit": 1})
        if reply["cursor"]["firstBatch"]:
            return shard
    return None


def split_and_move(mongo, collection, middle, to="shard1"):
    """Split a ranged index collection at k0 = middle and move the upper chunk to `to`."""
    full = "%s.%s" % (DATABASE, collection)
    mongo.admin.command({"split": full, "middle": {"_id.k0": middle}})
    mongo.admin.command({"moveChunk": full, "find": {"_id": {"k0": middle}}, "to": to})
    mongo_client.flush_routers(mongo)


def setup(mongo):
    """The database, the sharded fact collection f and the foreign tables."""
    mongo.drop_database(DATABASE)
    for command in ("dropUser", "dropRole"):
        try:
            mongo.admin.command(command, "ixsh_rw" if command == "dropUser" else "ixsh_note")
        except pymongo.errors.OperationFailure:
            pass  # none yet
    mongo.admin.command({"shardCollection": "%s.f" % DATABASE, "key": {"_id": "hashed"}})
    for name in ("wr", "wh", "wn", "u"):
        mongo.admin.command({"shardCollection": "%s.%s" % (DATABASE, name), "key": {"_id": "hashed"}})
    conn = pg_fixture.setup_database(DATABASE)
    for sql in ROUTED:
        q(conn, sql)
    pg_fixture.create_foreign_table(conn, "f", "_id int, k int, s text", options=[("shard_key", "_id")])
    for name in ("wr", "wh", "wn"):
        pg_fixture.create_foreign_table(conn, name, "_id int, k int", options=[("shard_key", "_id")])
    pg_fixture.create_foreign_table(conn, "u", "_id int, s text", options=[("shard_key", "_id")])
    pg_fixture.create_foreign_table(conn, "plain", "_id int, k int")
    return conn


def check_choices(res, mongo, conn):
    """1: the default, the catalog, config.collections, refusals."""
    q(conn, "INSERT INTO f SELECT i, i % 100, 's' || i FROM generate_series(0, 199) i")
    q(conn, "INSERT INTO plain VALUES (1, 1)")
    q(conn, "SELECT idxtable.create_index('f', '{k}', name => 'f_k')")
    q(conn, "SELECT idxtable.create_index('f', '{s}', is_unique => true, name => 'f_s', sharding => 'hashed')")
    q(conn, "SELECT idxtable.create_index('plain', '{k}', name => 'plain_k')")
    q(conn, "SELECT idxtable.create_index('plain', '{k}', name => 'plain_r', sharding => 'ranged')")
    shown = dict(q(conn, "SELECT name, sharding FROM idxtable.indexes"))
    res.check(shown == {"f_k": "ranged", "f_s": "hashed", "plain_k": "none", "plain_r": "ranged"},
              "sharding in idxtable.indexes: %r" % shown)
    keys = {d["_id"]: d["key"] for d in mongo.config.collections.find({"_id": {"$regex": "^%s\\.idxtable" % DATABASE}})}
    res.check(keys == {"%s.%s" % (DATABASE, ns("f.f_k")): {"_id.k0": 1},
                       "%s.%s" % (DATABASE, ns("f.f_s")): {"_id.k0": "hashed"},
                       "%s.%s" % (DATABASE, ns("plain.plain_r")): {"_id.k0": 1}},
              "config.collections of the index collections: %r" % keys)
    # create_index_concurrently and rebuild_index on a sharded index collection
    q(conn, "CALL idxtable.create_index_concurrently('f', '{k, s}', name => 'f_ks', sharding => 'hashed')")
    shown = q(conn, "SELECT sharding, state FROM idxtable.indexes WHERE name = 'f_ks'")
    key = (mongo.config.collections.find_one({"_id": "%s.%s" % (DATABASE, ns("f.f_ks"))}) or {}).get("key")
    res.check(shown == [("hashed", "valid")] and key == {"_id.k0": "hashed"},
              "create_index_concurrently, hashed: %r %r" % (shown, key))
    res.check(q(conn, "SELECT idxtable.rebuild_index('f_ks')") == [(200,)], "rebuild_index of f_ks")
    verify_clean(res, conn, "f_ks", "after rebuild_index")
    q(conn, "SELECT idxtable.drop_index('f_ks')")
    code, _ = sqlstate(conn, "SELECT idxtable.create_index('f', '{s}', name => 'f_bad', sharding => 'striped')")
    res.check(code == "22023", "sharding => 'striped': %s" % code)
    # a MongoDB user with readWrite (and appendOplogNote, which index tables need through mongos)
    # may not shard: 42501 naming enableSharding
    mongo.admin.command({"createRole": "ixsh_note", "roles": [],
                         "privileges": [{"resource": {"cluster": True}, "actions": ["appendOplogNote"]}]})
    mongo.admin.command({"createUser": "ixsh_rw", "pwd": "pw", "roles": [{"role": "readWrite", "db": DATABASE},
                                                                         {"role": "ixsh_note", "db": "admin"}]})
    q(conn, "CREATE SERVER weak FOREIGN DATA WRAPPER idxtable_fdw OPTIONS (uri %s, database %s)",
      (os.environ["MONGO_URI"], DATABASE))
    q(conn, "CREATE USER MAPPING FOR CURRENT_USER SERVER weak OPTIONS (username 'ixsh_rw', password 'pw')")
    pg_fixture.create_foreign_table(conn, "fw", "_id int, k int", server="weak", collection="f",
                                    options=[("shard_key", "_id")])
    code, msg = sqlstate(conn, "SELECT idxtable.create_index('fw', '{k}', name => 'fw_k', sharding => 'ranged')")
    res.check(code == "42501" and "enableSharding" in msg, "a user without enableSharding: %s %s" % (code, msg))
    del conn.notices[:]
    code, msg = sqlstate(conn, "SELECT idxtable.create_index('fw', '{k}', name => 'fw_k')")
    warned = [n for n in conn.notices if "is not sharded" in n]
    shown = q(conn, "SELECT sharding FROM idxtable.indexes WHERE name = 'fw_k'")
    res.check(code is None and warned and shown == [("none",)],
              "the same user, the default: unsharded with a WARNING: %s %s %r %r" % (code, msg, conn.notices, shown))
    q(conn, "SELECT idxtable.drop_index('fw_k')")
    code, msg = sqlstate(conn, "SELECT idxtable.create_index('fw', '{k}', name => 'fw_k', sharding => 'none')")
    res.check(code is None, "the same user, sharding => 'none': %s %s" % (code, msg))


def check_spread(res, mongo, conn):
    """2: where 1,000 inserts put their entries: ranged (split at the median, upper chunk moved),
    hashed, unsharded (one table each)."""
    for table, sharding in (("wr", "ranged"), ("wh", "hashed"), ("wn", "none")):
        q(conn, "SELECT idxtable.create_index(%s, '{k}', name => %s, sharding => %s)",
          (table, table + "_k", sharding))
    split_and_move(mongo, ns("wr.wr_k"), 500)
    shares = {}
    for table in ("wr", "wh", "wn"):
        q(conn, "INSERT INTO %s SELECT i, (i * 7919) %% 1000 FROM generate_series(1, 1000) i" % table)
        counts = entries_per_shard(mongo, ns("%s.%s_k" % (table, table)))
        shares[table] = busiest_share(counts)
        print("1,000 inserts, index %s_k: entries per shard %r, busiest shard %.1f%%"
              % (table, counts, 100 * shares[table]))
        res.check(sum(counts.values()) == 1000, "%s_k holds 1000 entries: %r" % (table, counts))
    res.check(shares["wr"] <= 0.55 and shares["wh"] <= 0.6, "entries spread over both shards: %r" % shares)
    res.check(shares["wn"] == 1.0, "an unsharded index collection is on one shard: %r" % shares)
    counts = entries_per_shard(mongo, ns("f.f_s"))
    res.check(all(counts.values()), "hashed f_s has entries on both shards at once: %r" % counts)


def check_targeting(res, mongo, conn):
    """3: shards reached by lookups on the ranged wr_k (split at 500) and the hashed wh_k."""
    coll = ns("wr.wr_k")
    checks = [("k = 7", 1, ["shard0"], "point lookup"),
              ("k = 700", 1, ["shard1"], "point lookup above the split"),
              ("k IN (3, 4, 5)", 3, ["shard0"], "IN of 3 keys in one chunk"),
              ("k IN (3, 703)", 2, list(SHARDS), "IN of 2 keys across the split"),
              ("k >= 600 AND k < 650", 50, ["shard1"], "range inside a chunk"),
              ("k >= 450 AND k < 550", 100, list(SHARDS), "range across the split"),
              ("k >= 600 ORDER BY k LIMIT 5", 5, ["shard1"], "ORDER BY ... LIMIT above the split")]
    rows, shards = reached(mongo, conn, coll, "SELECT count(*) FROM wr WHERE k >= 600 AND k < 700")
    res.check(rows == [(100,)] and shards == ["shard1"], "ranged count of a range: %r %r" % (rows, shards))
    for cond, count, want, what in checks:
        rows, shards = reached(mongo, conn, coll, "SELECT _id FROM wr WHERE " + cond)
        res.check(len(rows) == count and shards == want,
                  "ranged %s (%s): %d rows, shards %r" % (what, cond, len(rows), shards))
        print("ranged wr_k, %s: %d shard(s)" % (what, len(shards)))
    on = {}
    for key in range(50):
        on.setdefault(shard_of_entry(mongo, ns("wh.wh_k"), key), key)
    res.check(set(on) == set(SHARDS), "hashed wh_k has keys on both shards: %r" % on)
    coll = ns("wh.wh_k")
    checks = [("k = %d" % on["shard1"], 1, ["shard1"], "point lookup"),
              ("k IN (%d, %d)" % (on["shard0"], on["shard1"]), 2, list(SHARDS), "IN of keys on both shards"),
              ("k >= 10 AND k < 20", 10, list(SHARDS), "range (every shard)")]
    for cond, count, want, what in checks:
        rows, shards = reached(mongo, conn, coll, "SELECT _id FROM wh WHERE " + cond)
        res.check(len(rows) == count and shards == want,
                  "hashed %s (%s): %d rows, shards %r" % (what, cond, len(rows), shards))
        print("hashed wh_k, %s: %d shard(s)" % (what, len(shards)))
    rng = random.Random(7)
    for k in (1, 2, 4, 8):
        total = 0
        for _ in range(5):
            keys = rng.sample(range(1000), k)
            rows, shards = reached(mongo, conn, coll, "SELECT _id FROM wh WHERE k = ANY(%s)", (keys,))
            res.check(len(rows) == k, "hashed IN of %d keys: %d rows" % (k, len(rows)))
            total += len(shards)
        print("hashed wh_k, IN of %d random keys: %.1f shards on average (5 lists)" % (k, total / 5.0))


def explain_shards(conn, sql, params=None):
    """EXPLAIN (ANALYZE, FORMAT JSON) of a query's foreign scan: ({property: {shard: requests}} of its
    "Index Collection Shards" and "Collection Shards", the scan's plan node)."""
    todo = [q(conn, "EXPLAIN (ANALYZE, FORMAT JSON) " + sql, params)[0][0][0]["Plan"]]
    while todo[0].get("Node Type") != "Foreign Scan":
        todo = todo[0].get("Plans", []) + todo[1:]
    plan = todo[0]
    shown = {}
    for prop in ("Index Collection Shards", "Collection Shards"):
        if prop in plan:
            shown[prop] = {s["Shard Name"]: s["Requests"] for s in plan[prop]}
    return shown, plan


def check_explain(res, mongo, conn):
    """3b: EXPLAIN ANALYZE names the shards a scan's requests reached (mongos's explain of each): on the
    ranged wr_k (split at 500, upper chunk on shard1) a point lookup one shard, an IN of keys on both
    shards both, a range the shards of its chunks, the same shards the shards' own logs saw; the facts'
    fetches by _id on the hashed f name theirs; a plain scan of an unsharded collection names the primary
    shard; TEXT and YAML show the same; EXPLAIN without ANALYZE shows none."""
    coll = ns("wr.wr_k")
    for cond, want in (("k = 7", {"shard0": 1}), ("k = 700", {"shard1": 1}),
                       ("k IN (3, 703)", {"shard0": 1, "shard1": 1}),
                       ("k >= 600 AND k < 650", {"shard1": 1}),
                       ("k >= 450 AND k < 550", {"shard0": 1, "shard1": 1})):
        sql = "SELECT _id, k FROM wr WHERE " + cond
        clear_logs(mongo)
        shown, plan = explain_shards(conn, sql)
        logged = finds_on(mongo, coll)
        index = shown.get("Index Collection Shards")
        res.check(index == want and sorted(index) == logged,
                  "EXPLAIN ANALYZE of %s names the index collection's shards %r (want %r, the shards ran %r)"
                  % (cond, index, want, logged))
        facts = shown.get("Collection Shards") or {}
        res.check(facts and set(facts) <= set(SHARDS) and plan.get("Facts Fetched", 0) > 0,
                  "and the facts' fetches theirs: %r" % shown)
        print("EXPLAIN ANALYZE, ranged wr_k, %s: %r" % (cond, shown))
        res.check(plan.get("Round Trips") == 2, "the explains are not Round Trips: %r" % plan.get("Round Trips"))
    # a parameterized lookup per outer row: requests counted per shard, a command sent twice once explained
    q(conn, "SET enable_hashjoin = off")
    q(conn, "SET enable_mergejoin = off")
    clear_logs(mongo)
    try:
        shown, plan = explain_shards(conn, "SELECT wr._id FROM (VALUES (3), (4), (703), (3)) v(k) "
                                           "JOIN wr ON wr.k = v.k")
    finally:
        q(conn, "RESET enable_hashjoin")
        q(conn, "RESET enable_mergejoin")
    res.check(shown.get("Index Collection Shards") == {"shard0": 3, "shard1": 1} and plan.get("Actual Loops") == 4,
              "a lookup per outer row, counted per shard: %r (%s loops)" % (shown, plan.get("Actual Loops")))
    res.check(sum(shown.get("Collection Shards", {}).values()) == 4, "4 fact fetches: %r" % shown)
    # 3 distinct lookups and 3 distinct fetches (k = 3 twice), each on one shard: 6 explains, not 8
    explains = sum(1 for shard in SHARDS
                   for c in on_shard(mongo, shard, {"recentCommands": 1, "clear": True}, db="admin")["commands"]
                   if c["command"] == "explain")
    res.check(explains == 6, "each distinct command explained once: %d explains on the shards" % explains)
    text = "\n".join(r[0] for r in q(conn, "EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) "
                                           "SELECT _id FROM wr WHERE k IN (3, 703)"))
    res.check("Index Collection Shards: shard0 (1 request), shard1 (1 request)" in text
              and "Collection Shards: " in text, "the text format: %s" % text)
    yaml = q(conn, "EXPLAIN (ANALYZE, FORMAT YAML) SELECT _id FROM wr WHERE k = 700")[0][0]
    res.check("Index Collection Shards: " in yaml and "- Shard Name: \"shard1\"" in yaml, "the YAML format: %s" % yaml)
    plain = "\n".join(r[0] for r in q(conn, "EXPLAIN SELECT _id FROM wr WHERE k = 7"))
    res.check("Shards" not in plain, "EXPLAIN without ANALYZE shows no shards: %s" % plain)
    # a plain scan of an unsharded collection: its find goes to the primary shard
    shown, _ = explain_shards(conn, "SELECT * FROM plain")
    res.check(shown == {"Collection Shards": {"shard0": 1}}, "a plain scan of an unsharded collection: %r" % shown)
    check_explain_plain(res, mongo, conn)
    # a failed explain fails no query and names no shard: its requests are "not explained"
    routers = mongo_client.each_router(mongo)
    for router in routers:
        router.admin.command({"configureFailPoint": "failCommand", "mode": "alwaysOn",
                              "data": {"failCommands": ["explain"], "errorCode": 2}})
    try:
        rows = q(conn, "EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) SELECT _id FROM wr WHERE k = 7")
    finally:
        for router in routers:
            router.admin.command({"configureFailPoint": "failCommand", "mode": "off"})
    text = "\n".join(r[0] for r in rows)
    res.check("Index Collection Shards: 1 request not explained" in text
              and "Collection Shards: 1 request not explained" in text
              and "Shard Explain Error: Failing command via 'failCommand' failpoint" in text and "shard0" not in text,
              "a failed explain: the query runs, no shard named: %s" % text)
    # a routed count on the ranged index (a count command) names the shard of its range
    shown, _ = explain_shards(conn, "SELECT count(*) FROM wr WHERE k >= 600 AND k < 700")
    res.check(shown.get("Index Collection Shards") == {"shard1": 1}, "a count of a range: %r" % shown)


def shard_of_fact(mongo, collection, _id):
    """The shard holding the document of `_id` in `collection`, or None."""
    for shard in SHARDS:
        if on_shard(mongo, shard, {"find": collection, "filter": {"_id": _id}, "limit": 1})["cursor"]["firstBatch"]:
            return shard
    return None


def check_explain_plain(res, mongo, conn):
    """3b: plain scans and pushed-down aggregates of wr (sharded on a hashed _id) name the shards their
    find or aggregate reached: targeted by the shard key one (the shard holding the document), an IN of
    _ids on both shards both, a filter without the shard key every shard; an aggregate of an unsharded
    collection (passed whole to the primary shard by mongos) the primary shard; each the shards whose
    logs saw the scan's find or aggregate."""
    ids = {}
    for _id in range(1, 200):
        ids.setdefault(shard_of_fact(mongo, "wr", _id), _id)
        if set(SHARDS) <= set(ids):
            break
    if not res.check(set(SHARDS) <= set(ids), "documents of wr on both shards: %r" % ids):
        return
    one, other = ids["shard0"], ids["shard1"]
    q(conn, "SET idxtable.enable_plain_scan = on")
    try:
        for sql, want, what in (
                ("SELECT * FROM wr WHERE _id = %d" % one, {"shard0": 1}, "a plain scan by the shard key"),
                ("SELECT * FROM wr WHERE _id = %d" % other, {"shard1": 1}, "a plain scan by the shard key"),
                ("SELECT * FROM wr WHERE _id IN (%d, %d)" % (one, other), {"shard0": 1, "shard1": 1},
                 "a plain scan of an IN of shard keys on both shards"),
                ("SELECT * FROM wr WHERE _id < 10", {"shard0": 1, "shard1": 1},
                 "a plain scan of a range of a hashed shard key (every shard)"),
                ("SELECT * FROM wr", {"shard0": 1, "shard1": 1}, "an untargeted plain scan (every shard)"),
                ("SELECT count(*), max(k) FROM wr WHERE _id = %d" % other, {"shard1": 1},
                 "a pushed-down aggregate targeted by the shard key"),
                ("SELECT count(*), max(k) FROM wr", {"shard0": 1, "shard1": 1},
                 "an untargeted pushed-down aggregate (every shard)"),
                ("SELECT count(*) FROM plain", {"shard0": 1},
                 "a pushed-down aggregate of an unsharded collection (the primary shard)")):
            clear_logs(mongo)
            shown, plan = explain_shards(conn, sql)
            logged = finds_on(mongo, "plain" if "FROM plain" in sql else "wr")
            res.check(shown == {"Collection Shards": want} and "Shard Explain Error" not in plan
                      and sorted(want) == logged,
                      "EXPLAIN ANALYZE of %s: %r (want %r, the shards ran %r)" % (what, shown, want, logged))
            print("EXPLAIN ANALYZE, %s: %r" % (sql, shown))
        plain = "\n".join(r[0] for r in q(conn, "EXPLAIN SELECT count(*), max(k) FROM wr"))
        res.check("Shards" not in plain, "EXPLAIN without ANALYZE of an aggregate shows no shards: %s" % plain)
    finally:
        q(conn, "SET idxtable.enable_plain_scan = off")


def check_unique(res, mongo, conn):
    """4: duplicates of keys whose entries are on either shard are refused, hashed and ranged."""
    q(conn, "INSERT INTO u SELECT i, 'u' || lpad(i::text, 3, '0') FROM generate_series(0, 99) i")
    q(conn, "SELECT idxtable.create_index('u', '{s}', is_unique => true, name => 'u_r')")
    split_and_move(mongo, ns("u.u_r"), "u050")
    for index, sharding, table in (("u_r", "ranged", "u"), ("f_s", "hashed", "f")):
        values = ["u%03d" % i for i in range(100)] if table == "u" else ["s%d" % i for i in range(200)]
        on = {}
        for value in values:
            on.setdefault(shard_of_entry(mongo, ns("%s.%s" % (table, index)), value), value)
            if set(on) == set(SHARDS):
                break
        res.check(set(on) == set(SHARDS), "%s: keys on both shards %r" % (index, on))
        insert = ("INSERT INTO u (_id, s) VALUES (%s, %s)" if table == "u"
                  else "INSERT INTO f (_id, k, s) VALUES (%s, 1, %s)")
        for mode in ("transaction", "ordered"):
            q(conn, "ALTER FOREIGN TABLE %s OPTIONS (%s consistency %%s)"
              % (table, "ADD" if mode == "transaction" else "SET"), (mode,))
            for shard in SHARDS:
                code, _ = sqlstate(conn, insert, (5000, on.get(shard)))
                res.check(code == "23505", "%s (%s, %s): a duplicate of %r (entry on %s): %s"
                          % (index, sharding, mode, on.get(shard), shard, code))
        q(conn, "ALTER FOREIGN TABLE %s OPTIONS (DROP consistency)" % table)
    q(conn, "INSERT INTO u VALUES (5001, 'u500'), (5002, 'u001x')")
    verify_clean(res, conn, "u_r", "after the refused duplicates")


def mover(mongo, stop, moves, writing):
    """Move the chunk of f_k holding k0 = 50 between the shards until stopped, while the FDW reads (not
    while it writes: a router that met the move with its old shard version inside the FDW's
    transaction would abort it with TransientTransactionError, 40001, as mongos does; each move is
    followed by flushRouterConfig on every router, and the writes outside transactions that race moves
    are applier_cluster_moves.py's)."""
    full = "%s.%s" % (DATABASE, ns("f.f_k"))
    to = 1
    while not stop.is_set():
        with writing:
            mongo.admin.command({"moveChunk": full, "find": {"_id": {"k0": 50}}, "to": SHARDS[to]})
            mongo_client.flush_routers(mongo)
        moves.append(to)
        to = 1 - to
        time.sleep(0.05)


def compare(res, conn, local, sql, params, what, wrong):
    """A routed read of f and the same read of the local table give the same rows."""
    got = q(conn, sql % "f", params)
    want = q(local, sql % "f_local", params)
    if sorted(got) != sorted(want):
        wrong.append((what, sql, params, got[:5], want[:5]))


def check_differential(res, mongo, conn):
    """5: random writes through the FDW against a local heap table, reads compared, chunks moving."""
    mongo.admin.command({"split": "%s.%s" % (DATABASE, ns("f.f_k")), "middle": {"_id.k0": 50}})
    mongo_client.flush_routers(mongo)
    local = pg_fixture.connect(DATABASE)
    q(local, "CREATE TABLE f_local (_id int PRIMARY KEY, k int, s text UNIQUE)")
    q(local, "INSERT INTO f_local SELECT _id, k, s FROM f")
    plan = "\n".join(r[0] for r in q(conn, "EXPLAIN SELECT _id FROM f WHERE k = 1"))
    res.check("Index Table: f_k" in plan, "a routed plan on f_k: %s" % plan)
    stop, moves, writing = threading.Event(), [], threading.Lock()
    thread = threading.Thread(target=mover, args=(mongo_client.connect(), stop, moves, writing))
    thread.start()
    rng = random.Random(28)
    wrong, errors = [], []
    next_id = 1000
    try:
        for step in range(150):
            op = rng.random()
            writing.acquire()
            try:
                if op < 0.4:
                    row = (next_id, rng.randrange(100), "n%d" % next_id)
                    next_id += 1
                    q(conn, "INSERT INTO f VALUES (%s, %s, %s)", row)
                    q(local, "INSERT INTO f_local VALUES (%s, %s, %s)", row)
                elif op < 0.65:
                    k, newk = rng.randrange(100), rng.randrange(100)
                    q(conn, "UPDATE f SET k = %s WHERE k = %s", (newk, k))
                    q(local, "UPDATE f_local SET k = %s WHERE k = %s", (newk, k))
                elif op < 0.8:
                    k = rng.randrange(100)
                    q(conn, "DELETE FROM f WHERE k = %s", (k,))
                    q(local, "DELETE FROM f_local WHERE k = %s", (k,))
                else:
                    k = rng.randrange(100)
                    q(conn, "UPDATE f SET s = s || 'x' WHERE k = %s", (k,))
                    q(local, "UPDATE f_local SET s = s || 'x' WHERE k = %s", (k,))
            except psycopg2.Error as exc:
                errors.append((step, exc.pgcode, str(exc).splitlines()[0]))
            finally:
                writing.release()
            k = rng.randrange(100)
            compare(res, conn, local, "SELECT _id, k, s FROM %s WHERE k = %%s", (k,), "point", wrong)
            compare(res, conn, local, "SELECT _id, k FROM %s WHERE k IN (%%s, %%s, %%s)",
                    (k, (k + 37) % 100, (k + 71) % 100), "IN", wrong)
            compare(res, conn, local, "SELECT _id FROM %s WHERE k >= %%s AND k < %%s", (k, k + 15), "range", wrong)
            compare(res, conn, local, "SELECT k, _id FROM %s WHERE k > %%s ORDER BY k, _id LIMIT 7", (k,),
                    "order", wrong)
    finally:
        stop.set()
        thread.join()
    res.check(not errors, "writes failed: %r" % errors[:3])
    res.check(not wrong, "routed reads differ from the local table (%d): %r" % (len(wrong), wrong[:2]))
    res.check(len(moves) >= 5, "chunks of f_k moved during the run: %d" % len(moves))
    print("differential: 150 writes, 600 routed reads compared, %d moves of a chunk of f_k" % len(moves))
    # an outside insert, indexed by the applier
    mongo[DATABASE]["f"].insert_one({"_id": 9999, "k": 42, "s": "outside"})
    q(local, "INSERT INTO f_local VALUES (9999, 42, 'outside')")
    found = wait_for(lambda: [r[0] for r in q(conn, "SELECT _id FROM f WHERE s = 'outside'")] == [9999], 30)
    res.check(found, "the applier indexed an outside insert in the hashed f_s")
    # an outside update (a new key in f_k and f_s) and an outside delete: the applier deletes and writes
    # entries on the shards of their keys
    mongo[DATABASE]["f"].update_one({"_id": 9999}, {"$set": {"k": 77, "s": "outside2"}})
    gone, gone_k = q(conn, "SELECT _id, k FROM f ORDER BY _id LIMIT 1")[0]
    mongo[DATABASE]["f"].delete_one({"_id": gone})
    q(local, "UPDATE f_local SET k = 77, s = 'outside2' WHERE _id = 9999")
    q(local, "DELETE FROM f_local WHERE _id = %s", (gone,))
    found = wait_for(lambda: ([r[0] for r in q(conn, "SELECT _id FROM f WHERE s = 'outside2'")] == [9999]
                              and q(conn, "SELECT _id FROM f WHERE s = 'outside'") == []
                              and 9999 in [r[0] for r in q(conn, "SELECT _id FROM f WHERE k = 77")]
                              and gone not in [r[0] for r in q(conn, "SELECT _id FROM f WHERE k = %s",
                                                                (gone_k,))]), 30)
    res.check(found, "the applier followed an outside update and delete in f_k and f_s")
    for index in ("f_k", "f_s"):
        verify_clean(res, conn, index, "after the differential run")
    # repair_index of an entry deleted behind the FDW's back
    victim = q(conn, "SELECT _id, k FROM f ORDER BY _id LIMIT 1")[0]
    mongo[DATABASE][ns("f.f_k")].delete_one({"_id.k0": victim[1], "_id.id": victim[0]})
    row = q(conn, "SELECT missing FROM idxtable.verify_index('f_k')")[0]
    res.check(row == (1,), "verify_index finds the deleted entry missing: %r" % (row,))
    row = q(conn, "SELECT missing FROM idxtable.repair_index('f_k')")[0]
    res.check(row == (1,), "repair_index restores it: %r" % (row,))
    verify_clean(res, conn, "f_k", "after repair_index")
    local.close()


def check_unique_id(res, mongo, conn):
    """4b: a unique index table on _id (mongod checks _id per shard only) refuses two rows of one _id in
    one INSERT batch whose shard keys put them on two shards, in both modes, and leaves no fact of it."""
    mongo.admin.command({"shardCollection": "%s.d" % DATABASE, "key": {"g": 1}})
    mongo.admin.command({"split": "%s.d" % DATABASE, "middle": {"g": 1}})
    mongo.admin.command({"moveChunk": "%s.d" % DATABASE, "find": {"g": 1}, "to": "shard1"})
    mongo_client.flush_routers(mongo)
    pg_fixture.create_foreign_table(conn, "d", "_id int, g int", options=[("shard_key", "g")])
    q(conn, "SELECT idxtable.create_index('d', '{_id}', is_unique => true, name => 'd_id')")
    for number, mode in enumerate(("transaction", "ordered")):
        q(conn, "ALTER FOREIGN TABLE d OPTIONS (%s consistency %%s)" % ("SET" if number else "ADD"), (mode,))
        code, message = sqlstate(conn, "INSERT INTO d VALUES (%s, 0), (%s, 1)", (number, number))
        res.check(code == "23505" and "d_id" in message,
                  "%s: two rows of one _id on two shards in one batch: %s %s" % (mode, code, message.strip()))
        left = {shard: on_shard(mongo, shard, {"count": "d", "query": {"_id": number}})["n"] for shard in SHARDS}
        res.check(left == {"shard0": 0, "shard1": 0}, "%s: no fact of the refused _id left: %r" % (mode, left))
    q(conn, "ALTER FOREIGN TABLE d OPTIONS (DROP consistency)")
    verify_clean(res, conn, "d_id", "after the refused batches")


def main():
    res = Results()
    start = time.time()
    mongo = mongo_client.connect()
    if len(mongo.admin.command("listShards").get("shards", [])) < 2:
        print("index_sharded: needs a cluster of two shards (IDXTABLE_MONGO_SHARDS=2 IDXTABLE_MONGO_ROUTERS=2)")
        print("index_sharded: 0 passed, 1 failed")
        sys.exit(1)
    mongo_client.stop_balancer(mongo)  # the test places chunks itself and counts the shards reached
    conn = setup(mongo)
    check_choices(res, mongo, conn)
    check_spread(res, mongo, conn)
    check_targeting(res, mongo, conn)
    check_explain(res, mongo, conn)
    check_unique(res, mongo, conn)
    check_unique_id(res, mongo, conn)
    check_differential(res, mongo, conn)
    conn.close()
    print("elapsed %.1fs" % (time.time() - start))
    print(res.summary("index_sharded"))
    sys.exit(1 if res.failed else 0)


if __name__ == "__main__":
    main()
