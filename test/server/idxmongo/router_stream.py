"""Change streams through a router, merged as mongos merges its shards' streams
(s/query/exec/async_results_merger.cpp, `_readySortedTailable`; /work/shared/notes/cluster-facts.md):

- the router opens the stream on every shard, all from the same point: the client's resume token's time
  (inclusive), its startAtOperationTime, or just after the router's own cluster time;
- each shard's stream promises, with its postBatchResumeToken, that it has returned every event that sorts
  at or before that token; the router releases a buffered event only once every shard's promise has
  reached it, in token order (time, then the event's place in its transaction, then its identity), so an
  idle shard holds every other shard's events back until its own clock moves: by a write, or by its
  periodic no-op (`--periodic-noop-secs`);
- the router's postBatchResumeToken is the smallest promise of its shards (or its last event, when the
  batch stopped before it): a high-water mark at time T promises only the events before T, since another
  shard may still have one at T (changelog.hwm_key sorts before every event at T);
- resuming after an event token skips every event at or before it on every shard.

The router polls its shards' cursors (getMore with maxTimeMS 0) every POLL_SECONDS while a getMore waits.
"""

import time

from bson.int64 import Int64
from bson.timestamp import Timestamp

from . import router_crud
from .changelog import HWM, decode_token, hwm_key, key_time, token
from .changestream import DEFAULT_AWAIT_MS, is_change_stream
from .errors import MongoError

POLL_SECONDS = 0.01


def merge_key(token_doc):
    """The position of a resume token in the merged order: a high-water mark's time and type, or an
    event's time, transaction index, identity and fragment number (without the run id)."""
    raw = bytes.fromhex(token_doc["_data"])
    if len(raw) == 14 and raw[9] == HWM:
        return raw[:10]
    return raw[:19] + raw[23:]


class ShardStream:
    """One shard's cursor of a merged stream."""

    def __init__(self, index, cursor_id, ns):
        self.index = index
        self.cursor_id = cursor_id
        self.ns = ns
        self.buffer = []  # (merge key, event) not released yet
        self.promise = None  # (merge key, token document) of its latest postBatchResumeToken

    def take(self, cursor_doc, field, skip_to):
        """Buffer a batch's events (those after the resume point) and note its promise."""
        for event in cursor_doc.get(field) or []:
            key = merge_key(event["_id"])
            if skip_to is None or key > skip_to:
                self.buffer.append((key, event))
        pbrt = cursor_doc.get("postBatchResumeToken")
        if pbrt is not None:
            self.promise = (merge_key(pbrt), dict(pbrt))
        self.cursor_id = cursor_doc.get("id") or 0


class MergedStream:
    """A change stream cursor of a router."""

    def __init__(self, ns, shards, pbrt, skip_to, session):
        self.id = 0
        self.ns = ns
        self.shards = shards
        self.pbrt = pbrt
        self.skip_to = skip_to
        self.session = session
        self.closed = False

    def _release(self, max_docs):
        """The events every shard has promised past, in order (up to max_docs), and the new token."""
        lowest = min(s.promise for s in self.shards)
        ready = sorted(((key, event) for s in self.shards for key, event in s.buffer if key <= lowest[0]),
                       key=lambda pair: pair[0])
        if max_docs:
            ready = ready[:max_docs]
        taken = {id(event) for _, event in ready}
        for s in self.shards:
            s.buffer = [pair for pair in s.buffer if id(pair[1]) not in taken]
        out = []
        for _, event in ready:
            out.append(event)
            if event.get("operationType") == "invalidate":
                self.closed = True
                break
        if out:
            self.pbrt = dict(out[-1]["_id"])
        if not self.closed and not any(key <= lowest[0] for s in self.shards for key, _ in s.buffer):
            if lowest[0] > merge_key(self.pbrt):
                self.pbrt = lowest[1]
        return out

    def _poll(self, router, conn, db, cmd):
        """One getMore (no wait) on every shard's cursor."""
        for s in self.shards:
            sent = {"getMore": Int64(s.cursor_id), "collection": s.ns.split(".", 1)[1], "maxTimeMS": 0}
            sent.update({k: cmd[k] for k in ("lsid",) if k in cmd})
            reply = router.send(conn, s.index, db, sent)
            if reply.get("ok") != 1.0:
                self.close(router, conn)
                router.forget(self.id)
                raise router_crud._error(reply)
            s.take(reply["cursor"], "nextBatch", self.skip_to)

    def get_more(self, router, conn, db, cmd):
        """getMore: wait up to maxTimeMS (1 s by default) for released events."""
        wait = cmd.get("maxTimeMS")
        deadline = time.monotonic() + (DEFAULT_AWAIT_MS if wait is None else wait) / 1000.0
        max_docs = int(cmd.get("batchSize") or 0)
        while True:
            self._poll(router, conn, db, cmd)
            batch = self._release(max_docs)
            if batch or self.closed or time.monotonic() >= deadline:
                break
            time.sleep(POLL_SECONDS)
        cursor_id = self.id
        if self.closed:
            self.close(router, conn)
            router.forget(self.id)
            cursor_id = 0
        return {"cursor": {"nextBatch": batch, "postBatchResumeToken": self.pbrt, "id": Int64(cursor_id),
                           "ns": self.ns}, "ok": 1.0}

    def close(self, router, conn):
        """Kill the shards' cursors."""
        db = self.ns.split(".", 1)[0]
        for s in self.shards:
            if s.cursor_id:
                router.send(conn, s.index, db, {"killCursors": s.ns.split(".", 1)[1],
                                                "cursors": [Int64(s.cursor_id)]})
                s.cursor_id = 0


def _start(router, spec):
    """(the shards' spec, the stream's first token, the resume point to skip to or None)."""
    spec = dict(spec)
    given = spec.pop("startAfter", None)
    given = spec.pop("resumeAfter", given)
    if given is not None:
        key, is_hwm, _, _, _ = decode_token(given)
        spec["startAtOperationTime"] = key_time(key)
        return spec, dict(given), merge_key(given)
    at = spec.get("startAtOperationTime")
    if not isinstance(at, Timestamp):
        now = router.clock.current()
        at = Timestamp(now.time, now.inc + 1)
        spec["startAtOperationTime"] = at
    return spec, token(hwm_key(at)), None


def cmd_aggregate(router, conn, db, cmd):
    """aggregate: a change stream merged from every shard, or router_crud's."""
    if not is_change_stream(cmd):
        return router_crud.forward(router, conn, db, "aggregate", cmd)
    pipeline = cmd["pipeline"]
    spec, first_token, skip_to = _start(router, pipeline[0]["$changeStream"])
    sent = dict(cmd)
    sent["pipeline"] = [{"$changeStream": spec}] + list(pipeline[1:])
    sent["cursor"] = {}
    shards = []
    for index in range(len(router.cluster.shards)):
        reply = router.send(conn, index, db, sent)
        if reply.get("ok") != 1.0:
            for opened in shards:
                router.send(conn, opened.index, db, {"killCursors": opened.ns.split(".", 1)[1],
                                                     "cursors": [Int64(opened.cursor_id)]})
            return router.strip(reply)
        stream = ShardStream(index, 0, reply["cursor"]["ns"])
        stream.take(reply["cursor"], "firstBatch", skip_to)
        shards.append(stream)
    lsid = cmd.get("lsid")
    merged = MergedStream(shards[0].ns, shards, first_token, skip_to, lsid)
    batch_size = (cmd.get("cursor") or {}).get("batchSize")
    batch = merged._release(int(batch_size) if batch_size else 0) if batch_size != 0 else []
    cursor_id = 0 if merged.closed else router.register(merged)
    if merged.closed:
        merged.close(router, conn)
    return {"cursor": {"firstBatch": batch, "postBatchResumeToken": merged.pbrt, "id": Int64(cursor_id),
                       "ns": merged.ns}, "ok": 1.0}


COMMANDS = {"aggregate": cmd_aggregate}
