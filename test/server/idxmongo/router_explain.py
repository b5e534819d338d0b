"""explain through a router, as mongos answers it: the command is targeted by the rules the command itself
follows (router_crud.py: the routing table's `target` of the find's filter, the count's or distinct's query,
the aggregate's leading `$match` stages as router_crud.shards_part finds them; the primary shard for an
unsharded collection), each targeted shard explains its part, and the router puts the shards' answers
together in mongos's shapes (s/commands/cluster_explain.cpp, pipeline/sharded_agg_helpers.cpp). The
routing is the router's cache, as for the command itself, and each shard's part carries the shard version
in its explained command (shard_version.attach): a shard whose chunks moved refuses it (StaleConfig), the
router refreshes and explains again (at most MAX_STALE_RETRIES times, as the command's reads are retried).
An aggregate with `explain: true` (the option's old form) of a sharded collection is answered as the
explain command with verbosity queryPlanner, as mongos answers it.

- find, count, distinct: `queryPlanner.winningPlan` is a mongos stage, SINGLE_SHARD for one shard, else
  SHARD_MERGE_SORT for a sorted find and SHARD_MERGE otherwise, whose `shards` array holds per shard its
  `shardName`, `connectionString`, `serverInfo` and the shard's own queryPlanner fields; with verbosity
  executionStats or allPlansExecution (the default) `executionStats.executionStages` is the same stage
  with the totals and per shard (`shards`) the shard's `executionStats`. Also for an unsharded collection
  (one shard: its primary).
- aggregate of a sharded collection: `splitPipeline` null when one shard runs it all, else `mergeType`
  "mongos" and `splitPipeline` {shardsPart, mergerPart} (the router runs everything after the leading
  `$match` stages); `shards` a document keyed by shard name, each with `host` and the shard's explain
  (`queryPlanner` alone when its part is only `$match`, else `stages` starting with a `$cursor`).
- aggregate of an unsharded collection: passed to the primary shard, its explain returned as it is (naming
  no shard), as mongos passes it through.

A shard explains a distinct's or an aggregate's part as a find of the same filter (the test server's mongod
explains only find and count). Other explains (of writes) go on as before (router_crud.forward).
"""

import time

from . import cmd_admin
from .errors import MongoError
from .router_crud import MAX_STALE_RETRIES, _checked, _session_fields, forward, shards_part
from .shard_version import STALE_CONFIG

READS = ("find", "count", "distinct", "aggregate")
VERBOSITIES = ("queryPlanner", "executionStats", "allPlansExecution")


def cmd_explain(router, conn, db, cmd):
    """explain: of a read, targeted and merged as mongos does; of anything else, sent on as before."""
    inner = cmd.get("explain")
    if not isinstance(inner, dict) or not inner:
        raise MongoError(2, "explain command requires a nested object")
    kind = next(iter(inner))
    if kind not in READS or not isinstance(inner[kind], str):
        return forward(router, conn, db, "explain", cmd)
    verbosity = cmd.get("verbosity", "allPlansExecution")
    if verbosity not in VERBOSITIES:
        raise MongoError(2, "verbosity string must be one of {'queryPlanner', 'executionStats', "
                            "'allPlansExecution'}")
    attempts = 0
    while True:
        entry = router.cache.target(conn, db, inner[kind])
        try:
            if kind == "aggregate":
                return _aggregate(router, conn, db, cmd, inner, entry, verbosity)
            return _read(router, conn, db, cmd, kind, inner, entry, verbosity)
        except MongoError as exc:  # a shard refused a stale version: the cache is refreshed (router.send)
            if exc.code != STALE_CONFIG or attempts >= MAX_STALE_RETRIES:
                raise
            attempts += 1


def aggregate_explain_option(router, conn, db, cmd):
    """aggregate {explain: true} of a sharded collection (router_crud sends it here): the explain command
    of the aggregate without the option, verbosity queryPlanner."""
    inner = {k: v for k, v in cmd.items()
             if k not in ("explain", "lsid", "txnNumber", "autocommit") and not k.startswith("$")}
    return cmd_explain(router, conn, db, dict({"explain": inner, "verbosity": "queryPlanner"},
                                              **_session_fields(cmd)))


def _pipeline(inner):
    """An aggregate's pipeline (a list)."""
    pipeline = inner.get("pipeline")
    return list(pipeline) if isinstance(pipeline, list) else []


def _filter(kind, inner):
    """The filter a read is targeted by: the same as the command's own (router_crud.py)."""
    if kind == "aggregate":
        return shards_part(_pipeline(inner))[1]
    filt = inner.get("filter" if kind == "find" else "query")
    return filt if isinstance(filt, dict) else {}


def _targets(entry, filt):
    """The shards a read reaches: the routing table's targeting, or the primary shard when unsharded."""
    return [0] if entry is None else entry.target(filt)


def _shard_part(kind, inner, filt):
    """What a shard explains of the read: a find or count as the router sends it to the shard (limit +
    skip, no skip), a find of the filter for a distinct or an aggregate."""
    if kind in ("find", "count"):
        part = {k: v for k, v in inner.items() if k not in ("skip", "limit")}
        limit = abs(int(inner.get("limit") or 0))
        if limit:
            part["limit"] = limit + int(inner.get("skip") or 0)
        return part
    part = {"find": inner[kind], "filter": filt}
    if "collation" in inner:
        part["collation"] = inner["collation"]
    return part


def _explain_on(router, conn, db, cmd, index, part, verbosity):
    """A shard's explain of its part (its error raised)."""
    sent = {"explain": part, "verbosity": verbosity}
    sent.update(_session_fields(cmd))
    return _checked(router.strip(router.send(conn, index, db, sent)))


def _server_info(host, port, primary):
    """A serverInfo document."""
    version = cmd_admin.version_string(primary)
    return {"host": host, "port": port, "version": version}


def _shard_host(router, index):
    """host:port of a shard (in-process shards have no port of their own: 0)."""
    shard = router.cluster.shards[index]
    return "%s:%d" % (router.cluster.host, getattr(shard, "port", 0) or 0)


def _read(router, conn, db, cmd, kind, inner, entry, verbosity):
    """find, count or distinct: mongos's stage over the targeted shards' explains."""
    filt = _filter(kind, inner)
    part = _shard_part(kind, inner, filt)
    started = time.monotonic()
    replies = [(index, _explain_on(router, conn, db, cmd, index, part, verbosity))
               for index in _targets(entry, filt)]
    millis = int((time.monotonic() - started) * 1000)
    if len(replies) == 1:
        stage = "SINGLE_SHARD"
    elif kind == "find" and inner.get("sort"):
        stage = "SHARD_MERGE_SORT"
    else:
        stage = "SHARD_MERGE"
    planned = []
    for index, reply in replies:
        shard = router.cluster.shards[index]
        host = _shard_host(router, index)
        one = {"shardName": shard.shard_name, "connectionString": "%s/%s" % (shard.shard_name, host),
               "serverInfo": _server_info(router.cluster.host, getattr(shard, "port", 0) or 0,
                                          router.cluster.primary)}
        one.update(reply.get("queryPlanner") or {})
        planned.append(one)
    out = {"queryPlanner": {"mongosPlannerVersion": 1, "winningPlan": {"stage": stage, "shards": planned}}}
    if verbosity != "queryPlanner":
        per_shard = []
        totals = {"nReturned": 0, "totalKeysExamined": 0, "totalDocsExamined": 0}
        for index, reply in replies:
            stats = reply.get("executionStats") or {}
            one = {"shardName": router.cluster.shards[index].shard_name,
                   "executionSuccess": stats.get("executionSuccess", True),
                   "nReturned": stats.get("nReturned", 0), "executionTimeMillis": millis,
                   "totalKeysExamined": stats.get("totalKeysExamined", 0),
                   "totalDocsExamined": stats.get("totalDocsExamined", 0),
                   "executionStages": (reply.get("queryPlanner") or {}).get("winningPlan", {})}
            for key in totals:
                totals[key] += one[key]
            per_shard.append(one)
        out["executionStats"] = dict(totals, executionTimeMillis=millis, executionStages=dict(
            totals, stage=stage, executionTimeMillis=millis, totalChildMillis=millis, shards=per_shard))
    out["serverInfo"] = _server_info(router.host, router.port, router.cluster.primary)
    out["command"] = dict(inner, **{"$db": db})
    out["ok"] = 1.0
    return out


def _shard_aggregate(reply, stages_after):
    """A shard's explain of its part of a pipeline, from its explain of the leading `$match` as a find:
    the find's explain when that is the whole part, else `stages` starting with a `$cursor`."""
    cursor = {"queryPlanner": reply.get("queryPlanner") or {}}
    if "executionStats" in reply:
        cursor["executionStats"] = reply["executionStats"]
    if not stages_after:
        return dict(cursor, explainVersion="1")
    return {"explainVersion": "1", "stages": [{"$cursor": cursor}] + list(stages_after)}


def _aggregate(router, conn, db, cmd, inner, entry, verbosity):
    """aggregate: passed through to the primary shard when unsharded; else split as the router runs it,
    with each targeted shard's explain under its name."""
    pipeline = _pipeline(inner)
    head = shards_part(pipeline)[0]
    filt = _filter("aggregate", inner)
    part = _shard_part("aggregate", inner, filt)
    targets = _targets(entry, filt)
    if entry is None:
        reply = _explain_on(router, conn, db, cmd, targets[0], part, verbosity)
        out = _shard_aggregate(reply, pipeline[head:])
        out["serverInfo"] = _server_info(router.cluster.host, 0, router.cluster.primary)
        out["ok"] = 1.0
        return out
    split = len(targets) > 1
    shards = {}
    for index in targets:
        reply = _explain_on(router, conn, db, cmd, index, part, verbosity)
        shard_stages = pipeline[head:] if not split else []
        shard = dict(host=_shard_host(router, index), **_shard_aggregate(reply, shard_stages))
        shards[router.cluster.shards[index].shard_name] = shard
    out = {}
    if split:
        out["mergeType"] = "mongos"
        out["splitPipeline"] = {"shardsPart": pipeline[:head],
                                "mergerPart": [{"$mergeCursors": {"compareWholeSortKey": False,
                                                                  "tailableMode": "normal",
                                                                  "nss": "%s.%s" % (db, inner["aggregate"]),
                                                                  "allowPartialResults": False}}]
                                + pipeline[head:]}
    else:
        out["splitPipeline"] = None
    out["shards"] = shards
    out["serverInfo"] = _server_info(router.host, router.port, router.cluster.primary)
    out["ok"] = 1.0
    return out


COMMANDS = {"explain": cmd_explain}
