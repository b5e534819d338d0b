"""Tests of the test server's sharded cluster (idxmongo/cluster.py, router*.py, routing.py): routing and
targeting, migrations, per-router clocks, merged change streams, cross-shard transactions, shard-key
changes, appendOplogNote. Registered into test_server.py's list (run them with
`/usr/bin/python3 test/server/test_server.py cluster`); each starts a cluster of its own, with pymongo as
the independent client."""

import threading
import time

import pymongo
import pymongo.errors

from bson.max_key import MaxKey
from bson.min_key import MinKey
from bson.timestamp import Timestamp


TESTS = []
USER, PASSWORD = "clusteradmin", "cluster-secret"


def test(fn):
    """Register a test (each starts a cluster of its own)."""
    TESTS.append((fn, True))
    return fn


def check(condition, message="check failed"):
    """Assert that keeps working under python -O."""
    if not condition:
        raise AssertionError(message)


def cluster(env, name, shards=2, routers=2, noop_secs=10.0, auth=False, balancer_secs=0):
    """A cluster and a client of every router (pymongo spreads its commands over them); its balancer
    stopped unless `balancer_secs` gives its round interval."""
    extra = ["--shards", str(shards), "--routers", str(routers), "--periodic-noop-secs", str(noop_secs),
             "--balancer-interval-secs", str(balancer_secs)]
    server = env.start(name, USER if auth else None, PASSWORD if auth else None, extra=extra)
    return server, router_client(env, server, None, auth)


def router_client(env, server, index=None, auth=False):
    """A client of router `index` only (None: of every router)."""
    ports = server.ports if index is None else [server.ports[index]]
    credentials = "%s:%s@" % (USER, PASSWORD) if auth else ""
    return env.new_client("mongodb://%s%s/" % (credentials, ",".join("127.0.0.1:%d" % p for p in ports)))


def fresh_routers(env, server):
    """Make every router forget its cached routing (flushRouterConfig), so that a test whose setup split
    and moved chunks through whichever router pymongo picked does not meet a stale router in a
    transaction next (the router does not retry StaleConfig there, as mongos does not)."""
    for index in range(len(server.ports)):
        router_client(env, server, index).admin.command("flushRouterConfig")


def shard_stats(client):
    """{shard name: (documents examined, find/query count, inserts)} so far."""
    shards = client.admin.command("clusterShardStats")["shards"]
    return {name: (s["metrics"]["queryExecutor"]["scannedObjects"], s["opcounters"]["query"],
                   s["opcounters"]["insert"]) for name, s in shards.items()}


def reached(client, fn):
    """The shards whose query count moved while fn() ran."""
    before = shard_stats(client)
    fn()
    after = shard_stats(client)
    return sorted(name for name in after if after[name][1] != before[name][1])


def ran_on(client, name, fn):
    """The shards that received a command `name` while fn() ran (their recentCommands)."""
    shards = sorted(s["_id"] for s in client.admin.command("listShards")["shards"])
    for shard in shards:
        client.admin.command({"runOnShard": shard, "db": "admin", "command": {"recentCommands": 1, "clear": True}})
    fn()
    return [shard for shard in shards if client.admin.command(
        {"runOnShard": shard, "db": "admin", "command": {"recentCommands": 1, "clear": True, "command": name}}
    )["commands"]]


def next_event(stream, seconds):
    """(the next event, seconds waited) of a change stream, or (None, seconds)."""
    started = time.monotonic()
    while time.monotonic() - started < seconds:
        event = stream.try_next()
        if event is not None:
            return event, time.monotonic() - started
    return None, time.monotonic() - started


@test
def test_cluster_topology_and_hashed_routing(env):
    """hello answers as mongos; a hashed collection spreads its documents over both shards; an equality on
    the shard key reaches one shard, an $in the shards of its values, other filters both; counts,
    distinct, sort with limit and aggregates merge the shards' answers as one collection's; $collStats
    gives one document per shard owning chunks, collStats their sums."""
    server, client = cluster(env, "cl_hashed")
    direct = router_client(env, server, 0)
    hello = direct.admin.command("hello")
    check(hello.get("msg") == "isdbgrid" and "setName" not in hello, "a router answers as mongos: %s" % hello)
    check(client.is_mongos, "pymongo sees mongos")
    client.admin.command("shardCollection", "t.h", key={"_id": "hashed"})
    client.t.h.insert_many([{"_id": i, "g": i % 5} for i in range(200)])
    chunks = list(client.config.chunks.find({"ns": "t.h"}))
    check(sorted({c["shard"] for c in chunks}) == ["shard0", "shard1"], "chunks on both shards")
    check(client.t.h.count_documents({}) == 200, "count over both shards")
    check(sorted(client.t.h.distinct("g")) == [0, 1, 2, 3, 4], "distinct merged")
    check([d["_id"] for d in client.t.h.find({}, sort=[("_id", -1)], limit=3)] == [199, 198, 197],
          "sort and limit merged")
    groups = {d["_id"]: d["n"] for d in client.t.h.aggregate([{"$group": {"_id": "$g", "n": {"$sum": 1}}}])}
    check(groups == {g: 40 for g in range(5)}, "a $group over both shards: %s" % groups)
    one = reached(client, lambda: list(client.t.h.find({"_id": 7})))
    check(len(one) == 1, "an equality on the shard key reaches one shard: %s" % one)
    both = reached(client, lambda: list(client.t.h.find({"g": 1})))
    check(both == ["shard0", "shard1"], "a filter without the shard key reaches both: %s" % both)
    owners = {c["shard"] for c in chunks}
    check(len(owners) == 2, "two owners")
    # $collStats: one document per shard owning chunks, naming it (mongos); collStats adds them up
    stats = list(client.t.h.aggregate([{"$collStats": {"storageStats": {}}}]))
    check(sorted(d.get("shard") for d in stats) == ["shard0", "shard1"], "one $collStats per shard: %s" % stats)
    check(sum(d["storageStats"]["count"] for d in stats) == 200, "the shards' counts add up: %s" % stats)
    whole = client.t.command("collStats", "h")
    check(whole["count"] == 200 and whole["size"] == sum(d["storageStats"]["size"] for d in stats) and
          whole["avgObjSize"] == whole["size"] // 200, "collStats through mongos: %s" % whole)
    client.t.u.insert_many([{"_id": i} for i in range(3)])
    stats = list(client.t.u.aggregate([{"$collStats": {"storageStats": {}, "count": {}}}]))
    check(len(stats) == 1 and stats[0].get("shard") == "shard0" and stats[0]["count"] == 3 and
          stats[0]["storageStats"]["count"] == 3, "$collStats of an unsharded collection: %s" % stats)


@test
def test_cluster_ranged_split_move_and_per_shard_ids(env):
    """A ranged key starts on the primary shard; split and moveChunk move the documents of a chunk (no
    change event); a range targets the shards of its chunks; `_id` is unique per shard only."""
    server, client = cluster(env, "cl_ranged")
    coll = client.t.r
    client.admin.command("shardCollection", "t.r", key={"k": 1})
    coll.insert_many([{"_id": i, "k": i} for i in range(100)])
    with client.t.watch() as stream:
        client.admin.command("split", "t.r", middle={"k": 50})
        client.admin.command("moveChunk", "t.r", find={"k": 70}, to="shard1")
        coll.insert_one({"_id": "after", "k": 10})
        event, _ = next_event(stream, 15)
        check(event is not None and event["documentKey"]["_id"] == "after",
              "a migration writes no change event: %s" % (event,))
    stats = client.admin.command("clusterShardStats")["shards"]
    check(stats["shard1"]["opcounters"]["insert"] == 0, "migrated documents are not inserts")
    high = reached(client, lambda: list(coll.find({"k": {"$gte": 60}})))
    check(high == ["shard1"], "a range targets the chunk's shard: %s" % high)
    check(coll.count_documents({"k": {"$gte": 50}}) == 50, "the moved documents are found")
    coll.insert_one({"_id": "twin", "k": 1})
    coll.insert_one({"_id": "twin", "k": 99})
    check(coll.count_documents({"_id": "twin"}) == 2, "_id is unique per shard only, as on mongod")
    client.t.full.insert_many([{"_id": i} for i in range(50)])
    client.admin.command("shardCollection", "t.full", key={"_id": "hashed"})
    stats = client.admin.command("clusterShardStats")["shards"]
    spread = {name: client.admin.command({"runOnShard": name, "db": "t", "command": {"count": "full"}})["n"]
              for name in stats}
    check(sum(spread.values()) == 50 and all(spread.values()),
          "a hashed key spreads an existing collection's documents over the shards: %s" % spread)


@test
def test_cluster_dotted_key_inside_id(env):
    """A shard key field inside _id ({"_id.k0": 1}, as index collections use): split's `middle` names it by
    its dotted path; an upsert whose filter is an equality on the whole _id holds the shard key (mongos's
    findEqualityElement); a retryable replacement reaches its document; a find run while a chunk moves
    sees every document."""
    server, client = cluster(env, "cl_dotted")
    coll = client.t.d
    client.admin.command("shardCollection", "t.d", key={"_id.k0": 1})
    coll.insert_many([{"_id": {"k0": i, "id": i}, "n": 0} for i in range(100)])
    client.admin.command("split", "t.d", middle={"_id.k0": 50})
    chunks = list(client.config.chunks.find({"ns": "t.d"}, {"min": 1, "_id": 0}))
    check(sorted(str(c["min"]) for c in chunks) == sorted([str({"_id.k0": 50}), str({"_id.k0": MinKey()})]),
          "split at the dotted middle: %s" % chunks)
    client.admin.command("moveChunk", "t.d", find={"_id.k0": 70}, to="shard1")
    high = reached(client, lambda: list(coll.find({"_id.k0": {"$gte": 60}})))
    check(high == ["shard1"], "the upper chunk moved: %s" % high)
    result = coll.replace_one({"_id": {"k0": 150, "id": 1}}, {"_id": {"k0": 150, "id": 1}, "n": 1}, upsert=True)
    check(result.upserted_id == {"k0": 150, "id": 1}, "an upsert by the whole _id: %s" % result.raw_result)
    result = coll.replace_one({"_id": {"k0": 7, "id": 7}}, {"_id": {"k0": 7, "id": 7}, "n": 2})
    check(result.modified_count == 1, "a retryable replacement: %s" % result.raw_result)
    done = []

    def move():
        for to in ["shard0", "shard1"] * 10:
            client.admin.command("moveChunk", "t.d", find={"_id.k0": 70}, to=to)
        done.append(True)

    mover = threading.Thread(target=move)
    mover.start()
    counts = set()
    while not done:
        counts.add(len(list(coll.find({"_id.k0": {"$gte": 0}}))))
    mover.join()
    check(counts == {101}, "finds during moves saw every document: %s" % sorted(counts))


@test
def test_cluster_router_clocks_gossip(env):
    """Each router has a clock of its own: a ping through router 1 can answer with a time before a write
    acknowledged through router 0; appendOplogNote reaches every shard and answers with the latest time."""
    server, _ = cluster(env, "cl_clock")
    first, second = router_client(env, server, 0), router_client(env, server, 1)
    second.admin.command("ping")
    time.sleep(1.1)
    session = first.start_session()
    first.t.c.insert_one({"_id": 1}, session=session)
    written = session.operation_time
    pinged = second.admin.command("ping")["operationTime"]
    check(pinged < written, "router 1's clock did not learn router 0's write: %s >= %s" % (pinged, written))
    note = second.admin.command("appendOplogNote", data={"t": 1})
    check(sorted(note["raw"]) == ["shard0", "shard1"], "appendOplogNote on every shard: %s" % note)
    check(note["operationTime"] > written, "its time is past the write's on the shard that had it")
    at = Timestamp(note["operationTime"].time + 5, 1)
    for shard in ("shard0", "shard1"):
        first.admin.command("setShardClock", shard, time=at)
    times = [via.admin.command({"runOnShard": shard, "command": {"appendOplogNote": 1, "data": {}}})["operationTime"]
             for via, shard in ((first, "shard0"), (second, "shard1"))]
    check(times == [Timestamp(at.time, 2)] * 2, "two shards write at one cluster time: %s" % times)


@test
def test_cluster_merged_change_stream(env):
    """A database stream through a router releases an event only when every shard has passed it: with one
    shard idle (no periodic no-op here), not at all, until an appendOplogNote moves every shard on; with
    the periodic no-op, by the idle shard's next one; events of both shards come in time order; resuming
    after an event returns the ones after it from both shards."""
    server, client = cluster(env, "cl_stream", noop_secs=1000.0)
    client.admin.command("shardCollection", "t.s", key={"_id": "hashed"})
    coll = client.t.s
    shard_of = {}
    for i in range(40):
        coll.insert_one({"_id": i})
    for doc_id in range(40):
        before = shard_stats(client)
        list(coll.find({"_id": doc_id}))
        after = shard_stats(client)
        shard_of[doc_id] = next(n for n in after if after[n][1] != before[n][1])
    on0 = [i for i in range(40) if shard_of[i] == "shard0"]
    on1 = [i for i in range(40) if shard_of[i] == "shard1"]
    with client.t.watch(max_await_time_ms=200) as stream:
        client.admin.command("appendOplogNote", data={"start": 1})  # both shards past the stream's start
        with client.t.watch(max_await_time_ms=200) as held:
            client.admin.command("appendOplogNote", data={"start": 1})
            coll.update_one({"_id": on0[0]}, {"$set": {"x": 1}})
            event, waited = next_event(held, 1.5)
            check(event is None, "the idle shard did not hold the event back: %s" % (event,))
            client.admin.command("appendOplogNote", data={"release": 1})
            event, waited = next_event(held, 3)
            check(event is not None and event["documentKey"]["_id"] == on0[0],
                  "appendOplogNote released the held event: %s" % (event,))
        coll.update_one({"_id": on0[1]}, {"$set": {"x": 1}})
        coll.update_one({"_id": on1[0]}, {"$set": {"x": 1}})
        client.admin.command("appendOplogNote", data={"wake": 1})
        got = []
        while len(got) < 3:
            event, _ = next_event(stream, 3)
            check(event is not None, "events after the note: %s" % got)
            got.append(event)
        times = [e["clusterTime"] for e in got]
        check(times == sorted(times), "events in time order: %s" % times)
        resume = got[1]["_id"]
    with client.t.watch(resume_after=resume, max_await_time_ms=200) as again:
        event, _ = next_event(again, 4)
        check(event is not None and event["_id"] == got[2]["_id"], "resumed after the second event")
    _, noop_client = cluster(env, "cl_stream_noop", noop_secs=1.0)
    with noop_client.t.watch(max_await_time_ms=200) as stream:
        time.sleep(2.5)  # both shards past the stream's start by their no-ops
        noop_client.t.s.insert_one({"_id": "by-noop"})
        event, _ = next_event(stream, 5)
        check(event is not None and event["documentKey"]["_id"] == "by-noop",
              "the idle shard's periodic no-op released the event: %s" % (event,))


@test
def test_cluster_transactions_and_shard_key_changes(env):
    """A transaction reaching both shards commits both parts; a shard-key change moves the document by a
    delete and an insert in one transaction whose events come in either order over repeated runs; without
    a transaction or retryable write it is refused (20)."""
    server, client = cluster(env, "cl_txn", noop_secs=0.5)
    client.admin.command("shardCollection", "t.k", key={"region": 1})
    client.admin.command("split", "t.k", middle={"region": "m"})
    client.admin.command("moveChunk", "t.k", find={"region": "z"}, to="shard1")
    fresh_routers(env, server)
    coll = client.t.k
    with client.start_session() as session:
        with session.start_transaction():
            coll.insert_one({"_id": "a1", "region": "a"}, session=session)
            coll.insert_one({"_id": "z1", "region": "z"}, session=session)
    check(coll.count_documents({}) == 2, "both parts committed")
    stats = client.admin.command("clusterShardStats")["shards"]
    check(all(s["transactions"]["totalCommitted"] >= 1 for s in stats.values()), "a part on each shard")
    orders = set()
    with client.t.watch(max_await_time_ms=100) as stream:
        for n in range(12):
            doc_id = "m%d" % n
            coll.insert_one({"_id": doc_id, "region": "b"})
            with client.start_session() as session:
                with session.start_transaction():
                    coll.update_one({"_id": doc_id, "region": "b"}, {"$set": {"region": "y"}}, session=session)
            kinds = []
            while len(kinds) < 3:
                event, _ = next_event(stream, 5)
                check(event is not None, "the move's events")
                kinds.append(event["operationType"])
            check(kinds[0] == "insert" and sorted(kinds[1:]) == ["delete", "insert"], "events %s" % kinds)
            orders.add(tuple(kinds[1:]))
            check(coll.find_one({"_id": doc_id})["region"] == "y", "moved")
    check(len(orders) == 2, "the delete and the insert came in both orders over 12 moves: %s" % orders)
    reply = router_client(env, server, 0).t.command(
        {"update": "k", "updates": [{"q": {"_id": "a1", "region": "a"}, "u": {"$set": {"region": "x"}}}]})
    errors = reply.get("writeErrors") or [{}]
    check(errors[0].get("code") == 20, "a shard-key change outside a transaction is IllegalOperation: %s" % reply)


@test
def test_cluster_cross_shard_commit_seen_whole(env):
    """A cross-shard transaction's parts become visible together, as prepare makes them on mongod: a
    reader through the other router that sees the part on one shard committed never then reads the other
    shard's part as it was before (its writes of both parts are in either commit order)."""
    server, client = cluster(env, "cl_whole")
    client.admin.command("shardCollection", "t.w", key={"region": 1})
    client.admin.command("split", "t.w", middle={"region": "m"})
    client.admin.command("moveChunk", "t.w", find={"region": "z"}, to="shard1")
    fresh_routers(env, server)
    writer = router_client(env, server, 0).t.w
    reader = router_client(env, server, 1).t.w
    writer.insert_many([{"_id": "a", "region": "a", "v": 0}, {"_id": "z", "region": "z", "v": 0}])
    torn = []
    stop = threading.Event()

    def read():
        while not stop.is_set():
            for first, second in (("a", "z"), ("z", "a")):
                one = reader.find_one({"_id": first, "region": first})["v"]
                other = reader.find_one({"_id": second, "region": second})["v"]
                if other < one:
                    torn.append((first, one, second, other))

    thread = threading.Thread(target=read)
    thread.start()
    try:
        with writer.database.client.start_session() as session:
            for n in range(1, 151):
                with session.start_transaction():
                    writer.update_one({"_id": "a", "region": "a"}, {"$set": {"v": n}}, session=session)
                    writer.update_one({"_id": "z", "region": "z"}, {"$set": {"v": n}}, session=session)
    finally:
        stop.set()
        thread.join()
    check(not torn, "a part read committed, then the other read as before: %s" % torn[:5])
    check(reader.find_one({"_id": "z", "region": "z"})["v"] == 150, "every commit applied")


@test
def test_cluster_find_and_modify_moves_document(env):
    """A findAndModify that changes the shard key to another shard's chunk moves the document (a delete
    and an insert), in the client's transaction or in one of the router's for a retryable write, and
    answers with the document before (or, `new`, after) it; without either it is refused (20). The
    document is never left on its old shard with a key of the other's chunk."""
    server, client = cluster(env, "cl_fam")
    client.admin.command("shardCollection", "t.f", key={"flag": 1})
    client.admin.command("split", "t.f", middle={"flag": True})
    client.admin.command("moveChunk", "t.f", find={"flag": True}, to="shard1")
    fresh_routers(env, server)
    coll = client.t.f
    coll.insert_one({"_id": "r", "flag": False, "n": 1})

    def on_shard(name):
        return [(d["_id"], d["flag"], d["n"]) for d in client.admin.command(
            {"runOnShard": name, "db": "t", "command": {"find": "f", "filter": {}}})["cursor"]["firstBatch"]]

    with client.start_session() as session:
        with session.start_transaction():
            before = coll.find_one_and_update({"_id": "r", "flag": False}, {"$set": {"flag": True}},
                                              projection={"n": 1}, session=session)
            check(before == {"_id": "r", "n": 1}, "the document before, projected: %s" % before)
            again = coll.find_one_and_update({"_id": "r", "flag": True}, {"$set": {"n": 2}}, session=session)
            check(again is not None and again["n"] == 1, "the moved document, by its new key: %s" % again)
    check(on_shard("shard0") == [] and on_shard("shard1") == [("r", True, 2)],
          "moved to shard1: %s, %s" % (on_shard("shard0"), on_shard("shard1")))
    after = coll.find_one_and_update({"_id": "r", "flag": True}, {"$set": {"flag": False, "n": 3}},
                                     return_document=True)
    check(after == {"_id": "r", "flag": False, "n": 3}, "a retryable write's move, `new`: %s" % after)
    check(on_shard("shard0") == [("r", False, 3)] and on_shard("shard1") == [],
          "moved back: %s, %s" % (on_shard("shard0"), on_shard("shard1")))
    plain = env.new_client("mongodb://127.0.0.1:%d/?retryWrites=false" % server.ports[0])
    try:
        plain.t.f.find_one_and_update({"_id": "r", "flag": False}, {"$set": {"flag": True}})
        check(False, "a move outside a transaction or retryable write is refused")
    except pymongo.errors.OperationFailure as exc:
        check(exc.code == 20, "IllegalOperation: %s" % exc)
    check(on_shard("shard0") == [("r", False, 3)], "left as it was")


def explained_shards(reply):
    """The shards a router's explain names: queryPlanner.winningPlan.shards[].shardName (find, count,
    distinct) or the keys of `shards` (aggregate), as the FDW reads them."""
    planner = reply.get("queryPlanner")
    if planner is not None and "shards" in planner.get("winningPlan", {}):
        return sorted(s["shardName"] for s in planner["winningPlan"]["shards"])
    return sorted(reply.get("shards") or {})


@test
def test_cluster_explain_names_targeted_shards(env):
    """explain through a router targets as the command does and names exactly those shards, in mongos's
    shapes: a point on the ranged key one shard (SINGLE_SHARD), an $in over keys of both shards both
    (SHARD_MERGE), a range the shards of its chunks, a filter without the key every shard; count,
    distinct and aggregate alike; executionStats per shard only when asked, and queryPlanner examines
    nothing; an unsharded collection's find names the primary shard, its aggregate is the shard's own."""
    server, client = cluster(env, "cl_explain")
    coll = client.t.e
    client.admin.command("shardCollection", "t.e", key={"k": 1})
    coll.insert_many([{"_id": i, "k": i, "g": i % 3} for i in range(100)])
    client.admin.command("split", "t.e", middle={"k": 50})
    client.admin.command("moveChunk", "t.e", find={"k": 70}, to="shard1")
    t = client.t

    def explain(inner, verbosity="queryPlanner"):
        return t.command("explain", inner, verbosity=verbosity)

    point = explain({"find": "e", "filter": {"k": 70}})
    check(explained_shards(point) == ["shard1"], "a point names its chunk's shard: %s" % point)
    check(point["queryPlanner"]["winningPlan"]["stage"] == "SINGLE_SHARD", "SINGLE_SHARD: %s" % point)
    check(point["queryPlanner"]["winningPlan"]["shards"][0]["winningPlan"]["stage"] in ("FETCH", "COLLSCAN"),
          "each shard's own plan: %s" % point)
    check("executionStats" not in point, "queryPlanner has no executionStats: %s" % point)
    one = point["queryPlanner"]["winningPlan"]["shards"][0]
    check(point["queryPlanner"]["mongosPlannerVersion"] == 1
          and one["connectionString"].startswith("shard1/") and "host" in one["serverInfo"]
          and one["namespace"] == "t.e" and one["indexFilterSet"] is False and one["parsedQuery"] == {"k": 70}
          and one["rejectedPlans"] == [], "each shard's entry, as mongos's: %s" % one)
    both = explain({"find": "e", "filter": {"k": {"$in": [3, 80]}}})
    check(explained_shards(both) == ["shard0", "shard1"], "an $in over both shards names both: %s" % both)
    check(both["queryPlanner"]["winningPlan"]["stage"] == "SHARD_MERGE", "SHARD_MERGE: %s" % both)
    low = explain({"find": "e", "filter": {"k": {"$gte": 10, "$lt": 40}}})
    check(explained_shards(low) == ["shard0"], "a range names the shards of its chunks: %s" % low)
    span = explain({"find": "e", "filter": {"k": {"$gte": 40, "$lt": 60}}, "sort": {"k": 1}})
    check(explained_shards(span) == ["shard0", "shard1"]
          and span["queryPlanner"]["winningPlan"]["stage"] == "SHARD_MERGE_SORT",
          "a range over both chunks, sorted: %s" % span)
    broadcast = explain({"find": "e", "filter": {"g": 1}})
    check(explained_shards(broadcast) == ["shard0", "shard1"], "no shard key: every shard: %s" % broadcast)
    check(explained_shards(explain({"count": "e", "query": {"k": 5}})) == ["shard0"], "count targeted")
    check(explained_shards(explain({"distinct": "e", "key": "g", "query": {"k": {"$in": [60, 90]}}}))
          == ["shard1"], "distinct targeted")
    agg = explain({"aggregate": "e", "pipeline": [{"$match": {"k": 80}}, {"$group": {"_id": "$g"}}],
                   "cursor": {}})
    check(explained_shards(agg) == ["shard1"] and agg.get("splitPipeline", "absent") is None,
          "an aggregate on one shard: not split, that shard named: %s" % agg)
    agg = explain({"aggregate": "e", "pipeline": [{"$match": {"g": 1}}, {"$group": {"_id": "$g"}}],
                   "cursor": {}})
    check(explained_shards(agg) == ["shard0", "shard1"] and agg.get("mergeType") == "mongos"
          and "shardsPart" in agg["splitPipeline"], "an aggregate over both shards is split: %s" % agg)
    # the old form, aggregate {explain: true}: mongos answers it as the explain command (queryPlanner)
    old_form = t.command("aggregate", "e", pipeline=[{"$match": {"k": {"$in": [3, 80]}}}], explain=True)
    check(explained_shards(old_form) == ["shard0", "shard1"] and "splitPipeline" in old_form,
          "aggregate {explain: true} of a sharded collection names its shards: %s" % old_form)
    one_form = t.command("aggregate", "e", pipeline=[{"$match": {"k": 3}}, {"$count": "n"}], explain=True)
    check(explained_shards(one_form) == ["shard0"] and one_form["splitPipeline"] is None,
          "aggregate {explain: true} targeted to one shard: %s" % one_form)

    # the targeting is the command's own: the shards an explain names are those the find, count, distinct
    # or aggregate reaches
    for filt in ({"k": 70}, {"k": {"$in": [3, 80]}}, {"k": {"$gte": 10, "$lt": 40}}, {"g": 1}):
        ran = reached(client, lambda: list(coll.find(filt)))
        named = explained_shards(explain({"find": "e", "filter": filt}))
        check(ran == named, "explain names the shards the find reaches for %s: %s, %s" % (filt, named, ran))
        ran = ran_on(client, "aggregate", lambda: coll.count_documents(filt))
        named = explained_shards(explain({"aggregate": "e", "pipeline": [{"$match": filt}, {"$group": {
            "_id": 1, "n": {"$sum": 1}}}], "cursor": {}}))
        check(ran == named, "explain names the shards the aggregate reaches for %s: %s, %s" % (filt, named, ran))
        ran = ran_on(client, "count", lambda: t.command("count", "e", query=filt))
        named = explained_shards(explain({"count": "e", "query": filt}))
        check(ran == named, "explain names the shards the count reaches for %s: %s, %s" % (filt, named, ran))

    # queryPlanner runs nothing; executionStats reports per shard what each examined
    before = shard_stats(client)
    explain({"find": "e", "filter": {"g": 1}})
    after = shard_stats(client)
    check(all(after[s][0] == before[s][0] for s in after), "queryPlanner examines no document")
    stats = explain({"find": "e", "filter": {"g": 1}}, "executionStats")["executionStats"]
    per = {s["shardName"]: s["totalDocsExamined"] for s in stats["executionStages"]["shards"]}
    check(per == {"shard0": 50, "shard1": 50} and stats["totalDocsExamined"] == 100
          and stats["nReturned"] == 33, "executionStats per shard: %s" % stats)
    check(sum(s["nReturned"] for s in stats["executionStages"]["shards"]) == 33
          and all("totalKeysExamined" in s for s in stats["executionStages"]["shards"])
          and stats["executionStages"]["stage"] == "SHARD_MERGE", "per shard nReturned and keys: %s" % stats)
    point = explain({"find": "e", "filter": {"k": 70}}, "executionStats")["executionStats"]
    check([(s["shardName"], s["nReturned"]) for s in point["executionStages"]["shards"]] == [("shard1", 1)]
          and point["executionStages"]["stage"] == "SINGLE_SHARD", "a point's executionStats: %s" % point)

    # a stale router: its explain carries the shard version of its cache, the shard refuses it, the
    # router refreshes and names the chunk's new shard (as the find itself is retried)
    r0, r1 = router_client(env, server, 0), router_client(env, server, 1)
    for r in (r0, r1):
        check(explained_shards(r.t.command("explain", {"find": "e", "filter": {"k": 80}},
                                           verbosity="queryPlanner")) == ["shard1"], "both routers cached")
    r0.admin.command("moveChunk", "t.e", find={"k": 70}, to="shard0")
    before = stale_counts(client)
    moved = r1.t.command("explain", {"find": "e", "filter": {"k": 80}}, verbosity="queryPlanner")
    after = stale_counts(client)
    check(explained_shards(moved) == ["shard0"], "a stale router's explain names the new shard: %s" % moved)
    check(after["shard1"] == before["shard1"] + 1, "the old owner refused the stale explain: %s -> %s"
          % (before, after))
    r0.admin.command("moveChunk", "t.e", find={"k": 70}, to="shard1")
    moved = r1.t.command("explain", {"aggregate": "e", "pipeline": [{"$match": {"k": 80}}], "cursor": {}},
                         verbosity="queryPlanner")
    check(explained_shards(moved) == ["shard1"], "and a stale aggregate's explain: %s" % moved)

    # an unsharded collection: find names the primary shard; an aggregate is passed through unnamed
    t.plain.insert_many([{"_id": i} for i in range(5)])
    check(explained_shards(explain({"find": "plain", "filter": {"_id": 1}})) == ["shard0"],
          "an unsharded find names the primary shard")
    passed = explain({"aggregate": "plain", "pipeline": [{"$match": {"_id": 1}}], "cursor": {}})
    check("shards" not in passed and "queryPlanner" in passed,
          "an unsharded aggregate's explain is the primary shard's own: %s" % passed)


@test
def test_cluster_shard_key_change_with_update_options(env):
    """A shard-key change is computed as the shard would compute it (mongos has the shard run the update
    and answer WouldChangeOwningShard): the update's collation picks the document, the new document
    keeps `_id` (66 for a change, also in a replacement) and an update the shard refuses (arrayFilters,
    which the test server does not run) gets the error it gets on an unsharded collection; the document
    is never left on a shard whose chunks do not hold its key."""
    server, client = cluster(env, "cl_opts")
    client.admin.command("shardCollection", "t.o", key={"k": 1})
    client.admin.command("split", "t.o", middle={"k": 10})
    client.admin.command("moveChunk", "t.o", find={"k": 10}, to="shard1")
    fresh_routers(env, server)
    coll = client.t.o
    coll.insert_one({"_id": "a", "k": 1, "name": "abc", "tags": ["x", "y"]})
    en2 = {"locale": "en", "strength": 2}

    def on_shard(name):
        return [(d["_id"], d["k"]) for d in client.admin.command(
            {"runOnShard": name, "db": "t", "command": {"find": "o", "filter": {}}})["cursor"]["firstBatch"]]

    with client.start_session() as session:
        with session.start_transaction():
            result = coll.update_one({"k": 1, "name": "ABC"}, {"$set": {"k": 20}}, collation=en2, session=session)
    check(result.matched_count == 1, "matched under the collation: %s" % result.raw_result)
    check(on_shard("shard0") == [] and on_shard("shard1") == [("a", 20)],
          "moved to shard1 (collation): %s, %s" % (on_shard("shard0"), on_shard("shard1")))
    before = coll.find_one_and_update({"k": 20, "name": "ABC"}, {"$set": {"k": 2}}, collation=en2)
    check(before is not None and before["k"] == 20, "findAndModify under the collation: %s" % before)
    check(on_shard("shard0") == [("a", 2)] and on_shard("shard1") == [],
          "moved back (findAndModify, collation): %s, %s" % (on_shard("shard0"), on_shard("shard1")))

    def write_error(fn):
        try:
            fn()
        except pymongo.errors.WriteError as exc:
            return exc.code
        except pymongo.errors.OperationFailure as exc:
            return exc.code
        return None

    client.t.plain.insert_one({"_id": "a", "k": 2, "tags": ["x", "y"]})
    array_update = {"$set": {"k": 20, "tags.$[t]": "z"}}
    unsharded = write_error(lambda: client.t.plain.update_one({"_id": "a", "k": 2}, array_update,
                                                              array_filters=[{"t": "x"}]))
    check(unsharded is not None, "arrayFilters on an unsharded collection")
    code = write_error(lambda: coll.update_one({"_id": "a", "k": 2}, array_update, array_filters=[{"t": "x"}]))
    check(code == unsharded, "arrayFilters in a shard-key change: %s, as unsharded: %s" % (code, unsharded))
    code = write_error(lambda: coll.find_one_and_update({"_id": "a", "k": 2}, array_update,
                                                        array_filters=[{"t": "x"}]))
    check(code == unsharded, "arrayFilters in a findAndModify's shard-key change: %s" % code)
    code = write_error(lambda: coll.update_one({"_id": "a", "k": 2}, {"$set": {"k": 20, "_id": "b"}}))
    check(code == 66, "an _id change with the shard key's is ImmutableField: %s" % code)
    code = write_error(lambda: coll.replace_one({"_id": "a", "k": 2}, {"_id": "b", "k": 20}))
    check(code == 66, "a replacement with another _id is ImmutableField: %s" % code)
    check(on_shard("shard0") == [("a", 2)] and on_shard("shard1") == [],
          "left as it was: %s, %s" % (on_shard("shard0"), on_shard("shard1")))
    check(coll.find_one({"_id": "a"})["tags"] == ["x", "y"], "tags unchanged")


def shard_docs(client, coll, shard):
    """The documents of `t.<coll>` stored on one shard (runOnShard: the shard's own data)."""
    reply = client.admin.command({"runOnShard": shard, "db": "t",
                                  "command": {"find": coll, "filter": {}, "batchSize": 1000000}})
    return reply["cursor"]["firstBatch"]


def stale_counts(client):
    """{shard: StaleConfig answers so far} and {router host: stale errors its cache met} (serverStatus)."""
    status = client.admin.command("clusterShardStats")["shards"]
    return {name: s["shardingStatistics"]["countStaleConfigErrors"] for name, s in status.items()}


def check_placement(client, coll, expected):
    """Every document of `t.<coll>` is on the shard owning its chunk (config.chunks), on one shard only,
    and the documents are exactly `expected` ({_id: document})."""
    chunks = list(client.config.chunks.find({"ns": "t." + coll}))
    seen = {}
    for shard in ("shard0", "shard1"):
        for doc in shard_docs(client, coll, shard):
            check(doc["_id"] not in seen, "document %r on %s and %s" % (doc["_id"], seen.get(doc["_id"]), shard))
            seen[doc["_id"]] = shard
            owner = [c["shard"] for c in chunks if _in_chunk(doc["k"], c)]
            check(owner == [shard], "document %r on %s outside its chunk's shard %s" % (doc["_id"], shard, owner))
    check(set(seen) == set(expected), "documents lost %s, extra %s" % (
        sorted(set(expected) - set(seen))[:10], sorted(set(seen) - set(expected))[:10]))
    for shard in ("shard0", "shard1"):
        for doc in shard_docs(client, coll, shard):
            check(doc == expected[doc["_id"]], "document %r is %r, expected %r" % (doc["_id"], doc, expected[doc["_id"]]))
    check(client.t[coll].count_documents({}) == len(expected), "the router counts every document")


def _in_chunk(value, chunk):
    """Whether a ranged key value (an int) lies in a chunk's [min, max)."""
    low, high = chunk["min"]["k"], chunk["max"]["k"]
    return (isinstance(low, MinKey) or low <= value) and (isinstance(high, MaxKey) or value < high)


@test
def test_cluster_stale_router_refused_and_retried(env):
    """Each router caches the routing table: after a chunk moves through router 0, router 1's writes and
    reads carry its old shard version; the shard refuses them with StaleConfig (13388, errInfo), router
    1 refreshes and retries, and the client sees plain success with every document where its chunk is."""
    server, client = cluster(env, "cl_stale")
    r0, r1 = router_client(env, server, 0), router_client(env, server, 1)
    r0.admin.command("shardCollection", "t.s", key={"k": 1})
    r1.t.s.insert_many([{"_id": i, "k": i, "n": 0} for i in range(100)])  # router 1 learns: one chunk on shard0
    check(r1.t.s.count_documents({"k": {"$gte": 50}}) == 50, "router 1 reads")
    r0.admin.command("split", "t.s", middle={"k": 50})
    r0.admin.command("moveChunk", "t.s", find={"k": 70}, to="shard1")
    before = stale_counts(client)
    r1.t.s.insert_one({"_id": "late", "k": 80, "n": 0})
    after = stale_counts(client)
    check(after["shard0"] == before["shard0"] + 1, "shard0 refused router 1's stale insert: %s -> %s" % (before, after))
    check([d["_id"] for d in shard_docs(client, "s", "shard1") if d["_id"] == "late"] == ["late"],
          "the insert landed on the chunk's new shard")
    status = r1.admin.command("serverStatus")["shardingStatistics"]["catalogCache"]
    check(status["countStaleConfigErrors"] >= 1, "router 1 met StaleConfig: %s" % status)
    # the shard's answer to a stale version, as a client of the shard would see it
    try:
        client.admin.command({"runOnShard": "shard0", "db": "t", "command": {
            "find": "s", "filter": {}, "shardVersion": {"e": client.config.collections.find_one({"_id": "t.s"})[
                "lastmodEpoch"], "t": Timestamp(0, 0), "v": Timestamp(1, 0)}}})
        reply = {}
    except pymongo.errors.OperationFailure as exc:
        reply = exc.details
    check(reply.get("code") == 13388 and reply["errInfo"]["ns"] == "t.s" and reply["errInfo"]["shardId"] == "shard0"
          and reply["errInfo"]["vWanted"]["v"].time == 2, "StaleConfig with errInfo: %s" % reply)
    r0.admin.command("moveChunk", "t.s", find={"k": 70}, to="shard0")  # router 1 is stale again
    check(r1.t.s.count_documents({"k": {"$gte": 50}}) == 51, "a stale count is retried")
    r0.admin.command("moveChunk", "t.s", find={"k": 70}, to="shard1")
    check(sorted(d["k"] for d in r1.t.s.find({"k": {"$gte": 95}})) == [95, 96, 97, 98, 99], "a stale find retried")
    r0.admin.command("moveChunk", "t.s", find={"k": 70}, to="shard0")
    check(r1.t.s.update_one({"k": 80, "_id": "late"}, {"$inc": {"n": 1}}).modified_count == 1, "a stale update retried")
    r0.admin.command("moveChunk", "t.s", find={"k": 70}, to="shard1")
    check(r1.t.s.delete_many({"k": {"$gte": 90}}).deleted_count == 10, "a stale delete retried")
    r0.admin.command("moveChunk", "t.s", find={"k": 70}, to="shard0")
    r1.t.s.insert_many([{"_id": "a%d" % i, "k": 10 * i, "n": 0} for i in range(10)], ordered=False)
    expected = {i: {"_id": i, "k": i, "n": 0} for i in range(90)}
    expected["late"] = {"_id": "late", "k": 80, "n": 1}
    expected.update({"a%d" % i: {"_id": "a%d" % i, "k": 10 * i, "n": 0} for i in range(10)})
    check_placement(client, "s", expected)
    # a collection sharded through router 0 after router 1 saw it unsharded
    r1.t.u.insert_one({"_id": 0, "k": 0, "n": 0})
    r0.admin.command("shardCollection", "t.u", key={"k": 1})
    r0.admin.command("split", "t.u", middle={"k": 50})
    r0.admin.command("moveChunk", "t.u", find={"k": 50}, to="shard1")
    r1.t.u.insert_one({"_id": 1, "k": 60, "n": 0})
    check_placement(client, "u", {0: {"_id": 0, "k": 0, "n": 0}, 1: {"_id": 1, "k": 60, "n": 0}})


@test
def test_cluster_stale_statement_retargets_later_ones(env):
    """An update or delete command of several statements through a stale router: the first statement
    meets StaleConfig and is retried with the refreshed routing, and so are the later ones targeted (the
    versions the router attaches are the refreshed routing's: statements targeted with the old chunks
    would pass the shard's check and miss a moved document, or upsert one onto a shard that no longer
    owns its chunk)."""
    server, client = cluster(env, "cl_stalestmt")
    r0, r1 = router_client(env, server, 0), router_client(env, server, 1)
    r0.admin.command("shardCollection", "t.m", key={"k": 1})
    r1.t.m.insert_many([{"_id": i, "k": i, "n": 0} for i in range(100)])  # router 1 learns: one chunk on shard0
    r0.admin.command("split", "t.m", middle={"k": 50})
    r0.admin.command("moveChunk", "t.m", find={"k": 10}, to="shard1")  # router 1 is stale
    reply = r1.t.m.bulk_write([pymongo.UpdateOne({"k": 70}, {"$inc": {"n": 1}}),
                               pymongo.UpdateOne({"k": 10}, {"$inc": {"n": 1}}),
                               pymongo.UpdateOne({"_id": "u", "k": 20}, {"$set": {"n": 5}}, upsert=True)])
    check((reply.matched_count, reply.modified_count, reply.upserted_count) == (2, 2, 1),
          "every statement of a stale update reached its chunk's shard: %r" % reply.bulk_api_result)
    r0.admin.command("moveChunk", "t.m", find={"k": 10}, to="shard0")  # router 1 is stale again
    reply = r1.t.m.bulk_write([pymongo.DeleteOne({"k": 60}), pymongo.DeleteOne({"k": 11})])
    check(reply.deleted_count == 2, "every statement of a stale delete reached its chunk's shard: %r"
          % reply.bulk_api_result)
    expected = {i: {"_id": i, "k": i, "n": 1 if i in (10, 70) else 0} for i in range(100) if i not in (11, 60)}
    expected["u"] = {"_id": "u", "k": 20, "n": 5}
    check_placement(client, "m", expected)


@test
def test_cluster_writes_race_moves(env):
    """Writes through two routers racing moveChunk and the balancer's moves lose and duplicate nothing:
    inserts, $inc updates and deletes by shard key, each acknowledged one counted, end with every
    document on the shard owning its chunk, once, with the increments acknowledged."""
    server, client = cluster(env, "cl_race", balancer_secs=0.2)
    r0, r1 = router_client(env, server, 0), router_client(env, server, 1)
    r0.admin.command("balancerStop")
    r0.admin.command("shardCollection", "t.w", key={"k": 1})
    for cut in range(100, 800, 100):
        r0.admin.command("split", "t.w", middle={"k": cut})
    r0.admin.command("balancerStart")  # 8 chunks on shard0: the balancer starts moving them
    stop = time.monotonic() + 3.0
    expected = {}
    errors = []
    lock = threading.Lock()

    def writer(via, parity):
        try:
            i = 0
            while time.monotonic() < stop:
                k = (i * 2 + parity) % 800
                key = "%d-%d" % (parity, i)
                via.t.w.insert_one({"_id": key, "k": k, "n": 0})
                with lock:
                    expected[key] = {"_id": key, "k": k, "n": 0}
                if i % 3 == 0:
                    via.t.w.update_one({"k": k, "_id": key}, {"$inc": {"n": 1}})
                    with lock:
                        expected[key]["n"] += 1
                if i % 7 == 0:
                    via.t.w.delete_one({"k": k, "_id": key})
                    with lock:
                        del expected[key]
                i += 1
        except Exception as exc:  # reported below
            errors.append(exc)

    def mover():
        try:
            n = 0
            while time.monotonic() < stop:
                r0.admin.command("moveChunk", "t.w", find={"k": (n * 300) % 800}, to=["shard0", "shard1"][n % 2])
                n += 1
        except Exception as exc:
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(r0, 0)), threading.Thread(target=writer, args=(r1, 1)),
               threading.Thread(target=mover)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    r0.admin.command("balancerStop")
    check(not errors, "writes and moves succeeded: %s" % errors[:3])
    check(len(expected) > 50, "enough writes raced the moves: %d" % len(expected))
    stale = stale_counts(client)
    check(sum(stale.values()) > 0, "some writes met a moved chunk: %s" % stale)
    check_placement(client, "w", expected)


@test
def test_cluster_transaction_meets_moved_chunk(env):
    """In a transaction, a statement whose chunk moved meanwhile aborts the transaction with StaleConfig
    and TransientTransactionError (its commit: NoSuchTransaction, nothing of it committed), even the
    first one, as a production mongos does, and so does a shard that joins the transaction after a
    migration reached it (mongod 8.0's placementConflictTime); under the test-only fail point
    enableStaleVersionAndSnapshotRetriesWithinTransactions a first statement is retried by the router,
    and the transaction commits; flushRouterConfig refreshes a router."""
    server, client = cluster(env, "cl_txnstale")
    r0, r1 = router_client(env, server, 0), router_client(env, server, 1)
    r0.admin.command("shardCollection", "t.x", key={"k": 1})
    r0.admin.command("split", "t.x", middle={"k": 50})
    r1.t.x.insert_many([{"_id": i, "k": i} for i in (10, 60)])  # router 1 learns: both chunks on shard0
    r1.t.other.insert_one({"_id": "seed"})
    with r1.start_session() as session:
        session.start_transaction()
        r1.t.other.insert_one({"_id": "in-txn"}, session=session)
        r0.admin.command("moveChunk", "t.x", find={"k": 60}, to="shard1")
        try:
            r1.t.x.insert_one({"_id": 80, "k": 80}, session=session)
            raise AssertionError("a later statement meeting a moved chunk must fail")
        except pymongo.errors.OperationFailure as exc:
            check(exc.code == 13388 and exc.has_error_label("TransientTransactionError"),
                  "StaleConfig with TransientTransactionError: %s %s" % (exc.code, exc.details))
        try:
            session.commit_transaction()
            raise AssertionError("the aborted transaction must not commit")
        except pymongo.errors.OperationFailure as exc:
            check(exc.code == 251, "commit: NoSuchTransaction: %s" % exc.details)
    check(client.t.other.count_documents({"_id": "in-txn"}) == 0, "nothing of the aborted transaction is left")
    check(client.t.x.count_documents({"k": 80}) == 0, "the refused statement left nothing")
    r0.admin.command("moveChunk", "t.x", find={"k": 60}, to="shard0")  # router 1 is stale again
    with r1.start_session() as session:
        session.start_transaction()
        try:
            r1.t.x.insert_one({"_id": 81, "k": 81}, session=session)
            raise AssertionError("a first statement meeting a moved chunk fails too (no fail point)")
        except pymongo.errors.OperationFailure as exc:
            check(exc.code == 13388 and exc.has_error_label("TransientTransactionError"),
                  "the first statement: StaleConfig, TransientTransactionError: %s" % exc.details)
        session.abort_transaction()
    # a shard that joins a transaction after a migration reached it: the placement changed after the
    # transaction began (mongod 8.0's placementConflictTime), even through a fresh router
    with r1.start_session() as session:
        session.start_transaction()
        r1.t.other.insert_one({"_id": "joins-later"}, session=session)  # shard0 only
        r0.admin.command("moveChunk", "t.x", find={"k": 60}, to="shard1")
        r1.admin.command("flushRouterConfig")  # router 1 is not stale
        try:
            r1.t.x.insert_one({"_id": 84, "k": 84}, session=session)  # shard1 joins now
            raise AssertionError("a shard joining after a migration reached it must refuse the statement")
        except pymongo.errors.OperationFailure as exc:
            check(exc.code == 13388 and exc.has_error_label("TransientTransactionError"),
                  "placement changed since the transaction began: %s" % exc.details)
    check(client.t.other.count_documents({"_id": "joins-later"}) == 0, "nothing of it is left")
    r1.admin.command("flushRouterConfig")
    with r1.start_session() as session:
        session.start_transaction()
        r1.t.x.insert_one({"_id": 83, "k": 83}, session=session)  # a flushed router is not stale
        session.commit_transaction()
    r1.t.x.delete_one({"k": 83, "_id": 83})
    r0.admin.command("moveChunk", "t.x", find={"k": 60}, to="shard0")  # router 1 is stale again
    r1.admin.command("configureFailPoint", "enableStaleVersionAndSnapshotRetriesWithinTransactions",
                     mode="alwaysOn")
    with r1.start_session() as session:
        session.start_transaction()
        r1.t.x.insert_one({"_id": 81, "k": 81}, session=session)  # the first statement: retried
        r1.t.x.insert_one({"_id": 82, "k": 82}, session=session)
        session.commit_transaction()
    check(sorted(d["_id"] for d in shard_docs(client, "x", "shard0")) == [10, 60, 81, 82],
          "the retried first statement committed on the chunk's shard")
    check(shard_docs(client, "x", "shard1") == [], "nothing on the chunk's old shard")


@test
def test_cluster_balancer(env):
    """balancerStatus, balancerStop and balancerStart (sh.isBalancerRunning, sh.stopBalancer,
    sh.startBalancer) and config.settings {_id: "balancer"} (sh.getBalancerState); a stopped balancer
    moves nothing; a running one evens the chunks out (the 5.0/6.0 chunk-count threshold) without a
    change event, every document kept; --balancer-interval-secs 0 starts it stopped."""
    server, client = cluster(env, "cl_balancer", noop_secs=0.5, balancer_secs=0.2)
    status = client.admin.command("balancerStatus")
    check(status["mode"] == "full" and status["inBalancerRound"] in (True, False), "running: %s" % status)
    check(client.config.settings.find_one({"_id": "balancer"}) is None, "no settings before a start or stop")
    client.admin.command("balancerStop")
    check(client.admin.command("balancerStatus")["mode"] == "off", "stopped")
    settings = client.config.settings.find_one({"_id": "balancer"})
    check(settings is not None and settings.get("stopped") is True and settings.get("mode") == "off",
          "sh.getBalancerState reads stopped: %s" % settings)
    client.admin.command("shardCollection", "t.b", key={"k": 1})
    client.t.b.insert_many([{"_id": i, "k": i} for i in range(600)])
    for cut in range(100, 600, 100):
        client.admin.command("split", "t.b", middle={"k": cut})
    rounds = client.admin.command("balancerStatus")["numBalancerRounds"]
    time.sleep(0.6)
    shards = [c["shard"] for c in client.config.chunks.find({"ns": "t.b"})]
    check(shards == ["shard0"] * 6, "a stopped balancer moves nothing: %s" % shards)
    check(client.admin.command("balancerStatus")["numBalancerRounds"] == rounds, "no rounds while stopped")
    with client.t.watch() as stream:
        client.admin.command("balancerStart")
        check(client.config.settings.find_one({"_id": "balancer"})["stopped"] is False, "started")
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            shards = [c["shard"] for c in client.config.chunks.find({"ns": "t.b"})]
            if shards.count("shard1") == 3:
                break
            time.sleep(0.05)
        check(sorted(shards) == ["shard0"] * 3 + ["shard1"] * 3, "the balancer evened the chunks: %s" % shards)
        time.sleep(0.6)
        shards = [c["shard"] for c in client.config.chunks.find({"ns": "t.b"})]
        check(sorted(shards) == ["shard0"] * 3 + ["shard1"] * 3, "and stops moving when balanced: %s" % shards)
        client.t.b.insert_one({"_id": "after", "k": 1})
        event, _ = next_event(stream, 15)
        check(event is not None and event["documentKey"]["_id"] == "after", "the moves wrote no event: %s" % event)
    check(client.admin.command("balancerStatus")["numBalancerRounds"] > rounds, "rounds counted")
    counts = [len(shard_docs(client, "b", s)) for s in ("shard0", "shard1")]
    check(counts == [300, 301] or sorted(counts) == [300, 301], "documents moved with their chunks: %s" % counts)
    check(client.t.b.count_documents({}) == 601, "every document kept")
    stopped, stopped_client = cluster(env, "cl_balancer_off", routers=1, balancer_secs=0)
    check(stopped_client.admin.command("balancerStatus")["mode"] == "off", "interval 0: stopped at start")


def collection_major(client, ns):
    """The highest major chunk version of a sharded collection (config.chunks lastmod): 1 plus the
    migrations committed since it was sharded (each gives its chunk the next major)."""
    return max(c["lastmod"].time for c in client.config.chunks.find({"ns": ns}))


@test
def test_cluster_random_migrations_race_writers(env):
    """The balancer under the config server's test-only fail points balancerShouldReturnRandomMigrations
    and overrideBalanceRoundInterval (20 ms rounds), set through a router: a random chunk of a ranged and
    of a hashed collection moves every round while two routers insert, $inc, delete and read back, and
    transactions move amounts between documents. Every acknowledged write is there once, on its chunk's
    shard; a document written through one router is read at once through the other (stale reads are
    refused and retried, never short of a moved chunk); the transactions that met a moved chunk failed
    with TransientTransactionError and, retried, left the total unchanged; the fail points turn off."""
    server, client = cluster(env, "cl_random", balancer_secs=0)
    r0, r1 = router_client(env, server, 0), router_client(env, server, 1)
    try:
        r1.admin.command("configureFailPoint", "balancerShouldReturnRandomMigrations", mode="sometimes")
        raise AssertionError("a mode other than alwaysOn or off is refused")
    except pymongo.errors.OperationFailure as exc:
        check(exc.code == 2, "BadValue: %s" % exc.details)
    r0.admin.command("shardCollection", "t.rr", key={"k": 1})
    for cut in range(100, 800, 100):
        r0.admin.command("split", "t.rr", middle={"k": cut})
    r0.admin.command("shardCollection", "t.rh", key={"k": "hashed"})
    r0.admin.command("shardCollection", "t.acct", key={"_id": "hashed"})
    r0.t.acct.insert_many([{"_id": i, "n": 100} for i in range(8)])
    r0.admin.command("shardCollection", "t.still", key={"k": 1})
    r0.admin.command("split", "t.still", middle={"k": 0})
    # sh.disableBalancing("t.still"): the balancer leaves it alone
    reply = r0.config.collections.update_one({"_id": "t.still"}, {"$set": {"noBalance": True}})
    check(reply.matched_count == 1, "noBalance set: %r" % reply.raw_result)
    check(r1.config.collections.find_one({"_id": "t.still"})["noBalance"] is True, "config.collections shows it")
    try:
        r0.config.collections.update_one({"_id": "t.still"}, {"$set": {"key": {"j": 1}}})
        raise AssertionError("only noBalance may be changed in config.collections")
    except pymongo.errors.OperationFailure as exc:
        check(exc.code == 20, "IllegalOperation: %s" % exc.details)
    r1.admin.command("configureFailPoint", "balancerShouldReturnRandomMigrations", mode="alwaysOn")
    r1.admin.command("configureFailPoint", "overrideBalanceRoundInterval", mode="alwaysOn",
                     data={"intervalMs": 20})
    majors = {ns: collection_major(client, ns) for ns in ("t.rr", "t.rh", "t.acct", "t.still")}
    stale_before = sum(stale_counts(client).values())
    r0.admin.command("balancerStart")
    stop = time.monotonic() + 3.0
    expected = {"rr": {}, "rh": {}}
    errors, missed = [], []
    txns = {"committed": 0, "transient": 0}
    lock = threading.Lock()

    def writer(via, other, parity):
        try:
            i = 0
            while time.monotonic() < stop:
                name = ("rr", "rh")[i % 2]
                k = (i * 2 + parity) % 800
                key = "%d-%d" % (parity, i)
                via.t[name].insert_one({"_id": key, "k": k, "n": 0})
                with lock:
                    expected[name][key] = {"_id": key, "k": k, "n": 0}
                if other.t[name].find_one({"k": k, "_id": key}) is None:
                    missed.append((name, key))
                if i % 3 == 0:
                    other.t[name].update_one({"k": k, "_id": key}, {"$inc": {"n": 1}})
                    with lock:
                        expected[name][key]["n"] += 1
                if i % 7 == 0:
                    via.t[name].delete_one({"k": k, "_id": key})
                    with lock:
                        del expected[name][key]
                i += 1
        except Exception as exc:  # reported below
            errors.append(exc)

    def transfers(via):
        try:
            i = 0
            while time.monotonic() < stop:
                a, b = i % 8, (i * 3 + 1) % 8
                with via.start_session() as session:
                    while True:
                        session.start_transaction()
                        try:
                            via.t.acct.update_one({"_id": a}, {"$inc": {"n": -1}}, session=session)
                            via.t.acct.update_one({"_id": b}, {"$inc": {"n": 1}}, session=session)
                            session.commit_transaction()
                            break
                        except pymongo.errors.OperationFailure as exc:
                            if not exc.has_error_label("TransientTransactionError"):
                                raise
                            if session.in_transaction:
                                session.abort_transaction()
                            with lock:
                                txns["transient"] += 1
                with lock:
                    txns["committed"] += 1
                i += 1
        except Exception as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(r0, r1, 0)), threading.Thread(target=writer, args=(r1, r0, 1)),
               threading.Thread(target=transfers, args=(r1,))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    r0.admin.command("balancerStop")
    r1.admin.command("configureFailPoint", "balancerShouldReturnRandomMigrations", mode="off")
    r1.admin.command("configureFailPoint", "overrideBalanceRoundInterval", mode="off")
    check(not errors, "writes, reads and transactions succeeded: %s" % errors[:3])
    check(not missed, "a write acknowledged through one router was read at once through the other: %s" % missed[:5])
    moves = {ns: collection_major(client, ns) - majors[ns] for ns in majors}
    check(moves.pop("t.still") == 0, "no migration of a collection marked noBalance")
    check(all(n >= 3 for n in moves.values()), "random migrations of every other collection: %s" % moves)
    stale = sum(stale_counts(client).values()) - stale_before
    check(stale > 0, "some operations met a moved chunk: %d" % stale)
    check(len(expected["rr"]) > 50 and len(expected["rh"]) > 50, "enough writes raced the moves: %d, %d"
          % (len(expected["rr"]), len(expected["rh"])))
    check_placement(client, "rr", expected["rr"])
    for name in ("rh",):
        seen = [d for s in ("shard0", "shard1") for d in shard_docs(client, name, s)]
        check(sorted(d["_id"] for d in seen) == sorted(expected[name]), "every hashed document once")
        check(all(d == expected[name][d["_id"]] for d in seen), "with its increments")
    total = sum(d["n"] for d in client.t.acct.find())
    check(txns["transient"] > 0, "some transactions met a moved chunk: %s" % txns)
    check(total == 800 and txns["committed"] > 10, "transactions kept the total: %d after %d transfers (%d "
          "transient errors)" % (total, txns["committed"], txns["transient"]))
    rounds = client.admin.command("balancerStatus")["numBalancerRounds"]
    time.sleep(0.3)
    check(client.admin.command("balancerStatus")["numBalancerRounds"] == rounds, "stopped")
    print("    random migrations: %s, %d StaleConfig refusals, %d transfers, %d transient transaction errors"
          % (moves, stale, txns["committed"], txns["transient"]))


@test
def test_cluster_merged_sort_into_subdocuments(env):
    """The router merges the shards' sorted results by a path into a sub-document (`_id.k0`, as index
    collections are read in key order) when the lower chunk lives on the later shard (the balancer or a
    moveChunk can put it there): the merged order is the key's, not the shards'."""
    server, client = cluster(env, "cl_subsort")
    coll = client.t.ss
    client.admin.command("shardCollection", "t.ss", key={"_id.k0": 1})
    coll.insert_many([{"_id": {"k0": i, "id": i}, "v": {"w": 100 - i}} for i in range(100)])
    client.admin.command("split", "t.ss", middle={"_id.k0": 50})
    client.admin.command("moveChunk", "t.ss", find={"_id": {"k0": 10}}, to="shard1")
    got = [d["_id"]["k0"] for d in coll.find({"_id.k0": {"$gt": 44}}).sort("_id.k0", 1).limit(7)]
    check(got == [45, 46, 47, 48, 49, 50, 51], "sorted by _id.k0 across the shards: %s" % got)
    got = [d["v"]["w"] for d in coll.find({}).sort("v.w", 1).limit(3)]
    check(got == [1, 2, 3], "sorted by v.w across the shards: %s" % got)
    got = [d["_id"] for d in coll.aggregate([{"$group": {"_id": "$_id.k0"}}, {"$sort": {"_id": -1}}, {"$limit": 2}])]
    check(got == [99, 98], "a $group on a sub-document's field after the shards' part: %s" % got)
