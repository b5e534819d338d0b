"""Query planning and execution over the indexed store, with MongoDB's examined-keys/documents counters.

The planner only narrows the candidate set: it reads equality, `$in`, range, `$type` and `$ne` conditions of
the filter's top-level conjunction (including `$and`) on the leading fields of an index, scans those index
intervals, then applies the whole filter to every fetched document with the matcher (matcher.py:
mongomock's, with MongoDB's null semantics on dotted paths). Any subset of a conjunction selects a superset
of the matches, so results never depend on the plan, only the counters do.
"""

import bisect
import itertools
import re

from bson.max_key import MaxKey
from bson.min_key import MinKey
from bson.regex import Regex

from .bsonkeys import ABOVE_ALL, BELOW_ALL, MISSING, TYPE_BRACKETS, sort_documents, sort_key
from .collation import fold, fold_filter
from .errors import MongoError
from .matcher import compile_filter

MAX_POINT_COMBINATIONS = 10000
_NOT_RANGE_VALUES = (type(None), MinKey, MaxKey, list, Regex, re.Pattern, type(MISSING))


class ScanStats:
    """Keys and documents examined by one query (MongoDB's keysExamined / docsExamined)."""

    def __init__(self):
        self.keys = 0
        self.docs = 0


class ResultProgress:
    """Where a query's examined counters stood as it matched each of its results, so that a cursor can count
    them batch by batch as mongod does: mongod runs a query lazily, and each batch examines only the keys and
    documents it needs (the whole result is still computed at once here, against one view of the store).

    `marks[i]` is (keys, docs) examined up to and including result i, or None when the plan blocks (an
    in-memory sort reads everything before it returns its first result, as mongod's SORT stage does);
    `keys` and `docs` are the totals of the whole query."""

    def __init__(self):
        self.marks = None
        self.keys = 0
        self.docs = 0


class Plan:
    """A chosen access path: an index with key intervals, a union of such ($or), or a collection scan."""

    def __init__(self, kind, index=None, intervals=(), ordered=False, reverse=False, branches=()):
        self.kind = kind  # "IXSCAN", "OR" or "COLLSCAN"
        self.index = index
        self.intervals = list(intervals)
        self.ordered = ordered
        self.reverse = reverse
        self.branches = list(branches)

    def describe(self):
        """A small explain-style description of the plan."""
        if self.kind == "IXSCAN":
            return {"stage": "FETCH", "inputStage": {"stage": "IXSCAN", "indexName": self.index.name,
                                                     "keyPattern": dict(self.index.spec["key"]),
                                                     "isMultiKey": self.index.multikey,
                                                     "direction": "backward" if self.reverse else "forward"}}
        if self.kind == "OR":
            return {"stage": "OR", "inputStages": [b.describe() for b in self.branches]}
        return {"stage": "COLLSCAN", "direction": "backward" if self.reverse else "forward"}


def _is_operator_doc(value):
    """True for `{$gt: ...}`-style condition documents (as opposed to a literal embedded document)."""
    return isinstance(value, dict) and bool(value) and next(iter(value)).startswith("$")


def _conditions(filt, out=None):
    """Collect the per-path conditions of the filter's top-level conjunction (descending into `$and`)."""
    out = {} if out is None else out
    for key, value in filt.items():
        if key == "$and" and isinstance(value, list):
            for sub in value:
                if isinstance(sub, dict):
                    _conditions(sub, out)
        elif not key.startswith("$"):
            out.setdefault(key, []).append(value)
    return out


def _point_key(value):
    """Sort key of an equality value usable for an index lookup, or None (regexes, arrays)."""
    if isinstance(value, (list, Regex, re.Pattern)):
        return None
    return sort_key(value)


def _range_interval(ops, multikey):
    """Interval (lo, lo_incl, hi, hi_incl) from $gt/$gte/$lt/$lte, each bound limited to its type bracket.

    On a multikey index MongoDB cannot intersect a lower and an upper bound (different array elements may
    satisfy each), so only the lower one is used there.
    """
    lower = upper = None
    for op, incl in (("$gt", False), ("$gte", True)):
        if op in ops and not isinstance(ops[op], _NOT_RANGE_VALUES):
            lower = (sort_key(ops[op]), incl)
    for op, incl in (("$lt", False), ("$lte", True)):
        if op in ops and not isinstance(ops[op], _NOT_RANGE_VALUES):
            upper = (sort_key(ops[op]), incl)
    if lower and upper and (multikey or lower[0][0] != upper[0][0]):
        upper = None
    if lower is None and upper is None:
        return None
    if lower is None:
        lower = ((upper[0][0],), True)
    if upper is None:
        upper = ((lower[0][0] + 1,), False)
    return (lower[0], lower[1], upper[0], upper[1])


def _type_intervals(types):
    """The intervals of a `$type` (a name or a list of names): one whole type bracket per name, as mongod's
    index bounds builder makes for each type (two names of one bracket share it); None for an unknown
    name or "array" (mongod cannot bound arrays by their index keys, which are their elements)."""
    names = types if isinstance(types, list) else [types]
    brackets = set()
    for name in names:
        bracket = TYPE_BRACKETS.get(name)
        if bracket is None:
            return None
        brackets.add(bracket)
    return [((b,), True, (b + 1,), False) for b in sorted(brackets)]


def _ne_intervals(value):
    """The two intervals around one value that `{$ne: value}` scans, as mongod's index bounds builder makes
    them for a scalar: [MinKey, value) and (value, MaxKey], the complement of `{$eq: value}`'s point. For
    null that is [MinKey, null) and (null, MaxKey]: since 8.0 `{$eq: null}` is [null, null] alone, and
    undefined (below null) matches `$ne: null` (matcher.py), so it is in the bounds. On a multikey index an
    array holds the value and others, and an empty array is indexed below null: no bounds there."""
    key = sort_key(value)
    return [(BELOW_ALL, True, key, False), (key, False, ABOVE_ALL, False)]


def _condition_bounds(cond, multikey):
    """Bounds for one condition: ("points", [keys]), ("range", interval), ("ranges", [intervals]) (a
    `$type`), ("ne", [intervals]) (a `$ne` alone on a scalar, not on a multikey index, whose arrays may hold
    the value and others) or None if not indexable."""
    if not _is_operator_doc(cond):
        key = _point_key(cond)
        return None if key is None else ("points", [key])
    if "$eq" in cond:
        key = _point_key(cond["$eq"])
        if key is not None:
            return ("points", [key])
    if "$in" in cond and isinstance(cond["$in"], list):
        keys = [_point_key(v) for v in cond["$in"]]
        if all(k is not None for k in keys):
            return ("points", sorted(set(keys)))
    interval = _range_interval(cond, multikey)
    if interval is None and "$type" in cond:
        intervals = _type_intervals(cond["$type"])
        return None if intervals is None else ("ranges", intervals)
    if interval is None and set(cond) == {"$ne"} and not multikey and \
            not isinstance(cond["$ne"], _NOT_RANGE_VALUES[1:] + (dict,)):
        return ("ne", _ne_intervals(cond["$ne"]))
    return None if interval is None else ("range", interval)


def _intersect(a, b):
    """The intersection of two intervals (lo, lo_incl, hi, hi_incl); empty ones have lo above hi."""
    if a[0] != b[0]:
        lower = max((a[0], a[1]), (b[0], b[1]))
    else:
        lower = (a[0], a[1] and b[1])
    if a[2] != b[2]:
        upper = min((a[2], a[3]), (b[2], b[3]))
    else:
        upper = (a[2], a[3] and b[3])
    return (lower[0], lower[1], upper[0], upper[1])


def _is_empty(interval):
    """Whether an interval (lo, lo_incl, hi, hi_incl) holds no key."""
    return interval[0] > interval[2] or (interval[0] == interval[2] and not (interval[1] and interval[3]))


def _path_bounds(conds, multikey):
    """Best bounds among all conditions on one path: the fewest points, else the ranges intersected (as
    mongod's index bounds builder does for a conjunction; on a multikey index the first range only, since
    different array elements may satisfy each). Ranges come back as ("ranges", [intervals]), in key order:
    a `$type` gives one interval per type bracket, a `$ne` the two on either side of its value, and their
    intersection with a range keeps the non-empty ones; `$ne`s alone come back as ("ne", [intervals])."""
    found = [b for b in (_condition_bounds(c, multikey) for c in conds) if b is not None]
    points = [b for b in found if b[0] == "points"]
    if points:
        return min(points, key=lambda b: len(b[1]))
    if not found:
        return None
    kind = "ne" if all(b[0] == "ne" for b in found) else "ranges"
    found = [(b[1] if b[0] in ("ranges", "ne") else [b[1]]) for b in found]
    intervals = found[0]
    if not multikey:
        for other in found[1:]:
            intervals = [_intersect(a, b) for a in intervals for b in other]
            intervals = [i for i in intervals if not _is_empty(i)]
    return (kind, intervals)


def _index_intervals(index, conds):
    """(key intervals, per-field point lists, has range) for `index` from the conditions, or None if it
    cannot help.  "Has range" is 2 for a range, 1 for the two intervals of a `$ne` (which the planner
    ranks below a range: mongod's multi-planner finds them wider), else False.

    An empty `$in` gives no interval at all: nothing can match."""
    point_lists = []
    rng = None
    rank = False
    for path in index.paths:
        bounds = _path_bounds(conds.get(path, ()), index.multikey)
        if bounds is None:
            break
        if bounds[0] in ("ranges", "ne"):
            rng, rank = bounds[1], 1 if bounds[0] == "ne" else 2
            break
        combos = 1
        for keys in point_lists:
            combos *= len(keys)
        if combos * len(bounds[1]) > MAX_POINT_COMBINATIONS:
            break
        point_lists.append(bounds[1])
    if not point_lists and rng is None:
        return None
    intervals = []
    for prefix in itertools.product(*point_lists):
        if rng is None:
            intervals.append((prefix, True, prefix, True))
        else:
            for r in rng:
                intervals.append((prefix + (r[0],), r[1], prefix + (r[2],), r[3]))
    return intervals, point_lists, rank


def _provides_order(index, point_lists, sort):
    """Whether scanning `index` forward (False), backward (True) yields `sort`'s order; None if not."""
    if index.multikey:
        return None
    constant = {p for p, keys in zip(index.paths, point_lists) if len(keys) == 1}
    rest = [(p, d) for p, d in sort if p not in constant]
    if not rest:
        return False
    start = 0
    while start < len(index.paths) and index.paths[start] in constant:
        start += 1
    if [p for p, _ in rest] != index.paths[start:start + len(rest)]:
        return None
    directions = {d < 0 for _, d in rest}
    return directions.pop() if len(directions) == 1 else None


def _plan_for_conjunction(coll, filt, sort, collation=None):
    """Best single-index plan for a conjunction, or None when no index applies to it (an index whose
    collation differs from the query's never does)."""
    conds = _conditions(filt)
    best = None
    for index in coll.indexes.values():
        if not index.serves_queries or index.collation != collation:
            continue
        if best is not None and best[0][0] and not index.unique:
            continue  # a full point of a unique index (the _id of a point write) outranks any non-unique one
        found = _index_intervals(index, conds)
        if found is None:
            continue
        intervals, point_lists, has_range = found
        full_unique = index.unique and len(point_lists) == len(index.paths)
        reverse = _provides_order(index, point_lists, sort) if sort else False
        score = (full_unique, len(point_lists), has_range, reverse is not None, -len(index.paths))
        if best is None or score > best[0]:
            best = (score, Plan("IXSCAN", index, intervals, ordered=reverse is not None, reverse=bool(reverse)))
    return best[1] if best else None


def _plan_for_sort(coll, sort, collation=None):
    """A full scan of an index whose order gives `sort`, or None."""
    whole = [((BELOW_ALL,), True, (ABOVE_ALL,), False)]
    for index in coll.indexes.values():
        if index.serves_queries and index.collation == collation:
            reverse = _provides_order(index, [], sort)
            if reverse is not None:
                return Plan("IXSCAN", index, whole, ordered=True, reverse=reverse)
    return None


def _hinted_plan(coll, filt, sort, hint):
    """The plan a `hint` (index name, key pattern or {$natural: 1}) forces; BadValue for unknown indexes."""
    if isinstance(hint, dict) and list(hint) == ["$natural"]:
        return Plan("COLLSCAN", ordered=not sort, reverse=hint["$natural"] < 0)
    if isinstance(hint, str):
        index = coll.indexes.get(hint)
    else:
        wanted = [(p, 1 if d > 0 else -1) for p, d in dict(hint).items()]
        index = next((i for i in coll.indexes.values() if list(zip(i.paths, i.directions)) == wanted), None)
    if index is None:
        raise MongoError(2, "hint provided does not correspond to an existing index")
    found = _index_intervals(index, _conditions(filt))
    intervals, point_lists, _ = found if found else ([((BELOW_ALL,), True, (ABOVE_ALL,), False)], [], False)
    reverse = _provides_order(index, point_lists, sort) if sort else False
    return Plan("IXSCAN", index, intervals, ordered=reverse is not None, reverse=bool(reverse))


def choose_plan(coll, filt, sort, hint=None, collation=None):
    """Pick the access path for a query: the hinted one, else an index on the filter, a union for an
    indexable `$or`, an index giving the sort order, or a collection scan (`$natural` sorts always scan
    the collection). Only indexes of the query's `collation` (None: simple) are considered; the filter
    must already be folded for it."""
    if hint:
        return _hinted_plan(coll, filt, sort, hint)
    if sort and sort[0][0] == "$natural":
        return Plan("COLLSCAN", ordered=True, reverse=sort[0][1] < 0)
    plan = _plan_for_conjunction(coll, filt, sort, collation)
    if plan is not None:
        return plan
    branches = filt.get("$or")
    if isinstance(branches, list) and branches:
        plans = [_plan_for_conjunction(coll, b, None, collation) if isinstance(b, dict) else None
                 for b in branches]
        if all(p is not None for p in plans):
            return Plan("OR", branches=plans)
    if sort:
        plan = _plan_for_sort(coll, sort, collation)
        if plan is not None:
            return plan
    return Plan("COLLSCAN", ordered=not sort)


def _interval_positions(entries, interval):
    """Start and end positions in an index's SortedList for one key interval."""
    first, end = _interval_bounds(interval)
    start = entries.bisect_left(first)
    return start, max(start, entries.bisect_left(end))


def _interval_bounds(interval):
    """The entries of one key interval are those from the first bisection key to the second (excluded):
    the positions _interval_positions gives."""
    lo, lo_incl, hi, hi_incl = interval
    return (lo,) if lo_incl else (lo + (ABOVE_ALL,),), (hi + (ABOVE_ALL,),) if hi_incl else (hi,)


def _seek(entries, first, end):
    """The entries of a SortedList from `first` (included) to `end` (excluded), in order: one bisection
    into the list of sublists and one into a sublist to find the first, then the following entries
    while they are below `end`. For a point interval (an equality, an `$in` value), which holds few
    entries, that takes two bisections where irange takes four (sortedcontainers 2.4's `_maxes` and
    `_lists`: the list's maximum of each sublist, and the sublists)."""
    maxes = entries._maxes
    pos = bisect.bisect_left(maxes, first)
    if pos == len(maxes):
        return
    lists = entries._lists
    sub = lists[pos]
    idx = bisect.bisect_left(sub, first)
    while True:
        for i in range(idx, len(sub)):
            entry = sub[i]
            if not entry < end:
                return
            yield entry
        pos += 1
        if pos == len(lists):
            return
        sub, idx = lists[pos], 0


def _index_ids(plan, stats):
    """Yield the id keys an index plan reaches, counting every index entry examined. The entries of each
    interval are found by value (SortedList.irange), not by position: a position needs the list's index
    of positions, which every write to the index discards and the next positional lookup rebuilds over
    the whole index."""
    index = plan.index
    seen = set()
    intervals = reversed(plan.intervals) if plan.reverse else plan.intervals
    for interval in intervals:
        first, end = _interval_bounds(interval)
        point = not plan.reverse and interval[1] and interval[3] and interval[0] == interval[2]
        found = _seek(index.entries, first, end) if point else index.entries.irange(first, end, (True, False),
                                                                                    plan.reverse)
        for _, idk in found:
            stats.keys += 1
            if index.multikey:
                if idk in seen:
                    continue
                seen.add(idk)
            yield idk


def _candidate_ids(coll, plan, stats):
    """Id keys to fetch for a plan (collection scans yield every document in natural order)."""
    if plan.kind == "IXSCAN":
        return _index_ids(plan, stats)
    if plan.kind == "OR":
        return _union_ids(plan, stats)
    keys = list(coll.docs) if plan.reverse else coll.docs
    return reversed(keys) if plan.reverse else iter(keys)


def _union_ids(plan, stats):
    """Yield the id keys of every `$or` branch once."""
    seen = set()
    for branch in plan.branches:
        for idk in _index_ids(branch, stats):
            if idk not in seen:
                seen.add(idk)
                yield idk


def execute(coll, filt, sort=None, skip=0, limit=0, overlay=None, stats=None, plan=None, hint=None,
            collation=None, progress=None):
    """Documents of `coll` matching `filt`, sorted, skipped and limited, as seen by the caller.

    Under a `collation` (None: simple; else en/2, see collation.py) strings compare by their case folds.

    `overlay` ({id key: before-image or None}) hides another session's uncommitted writes: those documents
    are read in their before-image instead, and documents deleted by that transaction are still found.
    Counters go to `stats`, and where they stood at each result to `progress` (a ResultProgress) if given;
    `hint` forces an index. Stops early at skip+limit when the access path already gives the order.
    """
    stats = stats if stats is not None else ScanStats()
    filt = filt or {}
    sort = sort or []
    if collation:
        filt = fold_filter(filt)
    plan = plan or choose_plan(coll, filt, sort, hint, collation)
    match = compile_filter(filt)
    if collation:
        folded_match = match
        match = lambda doc: folded_match(fold(doc))  # noqa: E731
    ordered = plan.ordered and not overlay
    need = skip + limit if limit and ordered else None
    start = (stats.keys, stats.docs)
    marks = [] if progress is not None else None
    matches = []
    visited = set() if overlay else None
    docs = coll.docs
    for idk in _candidate_ids(coll, plan, stats):
        stats.docs += 1
        if overlay and idk in overlay:
            doc = overlay[idk]
            visited.add(idk)
        else:
            doc = docs.get(idk)
        if doc is not None and match(doc):
            matches.append(doc)
            if marks is not None:
                marks.append((stats.keys - start[0], stats.docs - start[1]))
            if need is not None and len(matches) >= need:
                break
    if overlay:
        _overlay_matches(overlay, visited, match, stats, start, matches, marks)
    blocking = bool(sort) and not ordered and sort[0][0] != "$natural"
    if blocking:
        sort_documents(matches, sort)
    if progress is not None:
        progress.keys, progress.docs = stats.keys - start[0], stats.docs - start[1]
        progress.marks = None if blocking else _window(marks, skip, limit)
    return _window(matches, skip, limit)


def _overlay_matches(overlay, visited, match, stats, start, matches, marks):
    """Add the matching before-images of documents an index or collection scan did not reach (documents
    another transaction deleted, or moved out of the scanned intervals), each counted as examined."""
    for idk, before in overlay.items():
        if idk not in visited and before is not None:
            stats.docs += 1
            if match(before):
                matches.append(before)
                if marks is not None:
                    marks.append((stats.keys - start[0], stats.docs - start[1]))


def _window(items, skip, limit):
    """The part of a list that `skip` and `limit` (0: none) leave."""
    return items[skip:skip + limit] if limit else items[skip:]


_RANGE_OPS = {"$gt", "$gte", "$lt", "$lte"}


def _exact_point(cond):
    """Whether a condition is an equality or `$in` whose index points select exactly its matches: no null
    (it matches missing fields, which needs the documents), no array, document, regex or NaN."""
    if _is_operator_doc(cond):
        if set(cond) == {"$eq"}:
            return _exact_point(cond["$eq"])
        if set(cond) == {"$in"} and isinstance(cond["$in"], list):
            return all(_exact_point(v) for v in cond["$in"])
        return False
    return not isinstance(cond, _NOT_RANGE_VALUES + (dict, float)) or (isinstance(cond, float) and cond == cond)


def _exact_range(cond):
    """Whether a condition is one range whose index interval is exactly its matches: only $gt/$gte/$lt/$lte,
    values of one type bracket (bounds of two brackets select nothing in mongod, but the interval here keeps
    only the lower one)."""
    if not _is_operator_doc(cond) or not set(cond) <= _RANGE_OPS:
        return False
    values = list(cond.values())
    if any(isinstance(v, _NOT_RANGE_VALUES + (dict,)) or v != v for v in values):
        return False
    return len({sort_key(v)[0] for v in values}) == 1


def covered_count(coll, filt, collation=None, stats=None):
    """The number of documents matching `filt` counted from index keys alone, as mongod's COUNT_SCAN (one
    interval) or COUNT over an IXSCAN without FETCH (several) do, or None when no index expresses the
    filter exactly (then the documents must be examined).

    As mongod (planner_analysis.cpp, turnIxscanIntoCount; get_executor.cpp, count with no residual
    predicate): the filter is a conjunction of conditions on a prefix of one index's fields, equalities
    or `$in` on the leading ones and at most one range after them, with no other predicate; the index is
    not multikey, serves the query's collation (simple here) and holds every document."""
    stats = stats if stats is not None else ScanStats()
    if collation or not filt or any(key.startswith("$") for key in filt):
        return None
    conds = _conditions(filt)
    if any(len(c) != 1 for c in conds.values()):
        return None
    plan = _plan_for_conjunction(coll, filt, [])
    if plan is None or plan.index.multikey or plan.index.collation is not None:
        return None
    found = _index_intervals(plan.index, conds)
    if found is None:
        return None
    intervals, point_lists, has_range = found
    used = plan.index.paths[:len(point_lists) + (1 if has_range else 0)]
    if set(used) != set(conds):
        return None
    for path in used[:len(point_lists)]:
        if not _exact_point(conds[path][0]):
            return None
    if has_range and not _exact_range(conds[used[-1]][0]):
        return None
    n = 0
    for interval in intervals:
        start, end = _interval_positions(plan.index.entries, interval)
        n += end - start
    stats.keys += n
    return n
