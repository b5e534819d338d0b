"""Query filter matching: mongomock's matcher, with MongoDB's null semantics on dotted paths.

MongoDB treats a dotted path that does not resolve to a value as missing, and missing equals null: `{"a.b":
null}` matches documents whose `a` is missing, null, a scalar or a document without `b`, and `{"a.b": {$ne:
null}}` matches none of them. mongomock resolves `a.b` under a null or scalar `a` to no value at all, so it
gets both wrong there. `compile_filter` evaluates those comparisons itself (equality to null, `$in`/`$nin`
lists holding null, `$ne: null`, and `$not` over any of them, on dotted paths, also inside `$and`/`$or`/`$nor`)
and hands every other condition to mongomock's `filter_applies` unchanged.

Through arrays the rule is MongoDB's: an array met in the middle of the path is searched element by element,
documents only (other elements are skipped), and an array at the end of the path equals null if one of its
elements is null. A numeric path component meeting an array is left to mongomock.

`undefined` (codec.UNDEFINED) is matched as by mongod 8.0 (release notes, "Compatibility Changes in MongoDB
8.0"): `{f: null}`, `$eq: null` and `$in: [null]` do not match it, `$ne: null` and `$nin: [null]` do, and
`{f: {$type: "undefined"}}` matches it; no comparison operator ($lt, ...) matches it (type bracketing).
mongomock gets the first ones right by itself (UNDEFINED is not None) and is taught the last two here.

NaN is matched as by mongod (src/mongo/db/matcher/expression_leaf.cpp, ComparisonMatchExpression): equal to NaN
(double or decimal) and to nothing else, so `{f: NaN}`, `$eq`, `$lte`, `$gte` with NaN and `$in` lists holding
NaN match NaN values, and `$ne`/`$nin` exclude them; `$lt`/`$gt` never match NaN. mongomock uses Python's
`nan != nan`; the conditions with a NaN operand are evaluated here, on every path.

`$expr` (at the top or inside `$and`/`$or`/`$nor`) is evaluated by expr.py, not by mongomock.
"""

import math

from bson.objectid import ObjectId
from mongomock import filtering as _mm_filtering
from mongomock.filtering import filter_applies

from bson.decimal128 import Decimal128

from .bsonkeys import leaf_values
from .codec import UNDEFINED
from . import expr as _expr

_LOGICAL = ("$and", "$or", "$nor")


def _teach_mongomock_undefined():
    """Make mongomock's `$type: "undefined"` match UNDEFINED and its comparisons see it as a type of its own
    (mongod's canonical type 0), so that `{f: {$lt: x}}` is false for it instead of an error."""
    _mm_filtering.TYPE_MAP["undefined"] = lambda v: v is UNDEFINED
    compare_type = _mm_filtering._get_compare_type

    def get_compare_type(val):
        return 0 if val is UNDEFINED else compare_type(val)
    _mm_filtering._get_compare_type = get_compare_type


_teach_mongomock_undefined()


def _teach_mongomock_type_lists():
    """Give mongomock's `$type` what mongod's has: a list of types (any of them matches), and the types
    mongomock leaves unimplemented that the test server stores distinctly (null, regex, timestamp,
    javascript, minKey, maxKey; dbPointer reads as a DBRef document, symbol as a string, so neither is
    ever matched by its own name)."""
    from bson.code import Code
    from bson.max_key import MaxKey
    from bson.min_key import MinKey
    from bson.regex import Regex
    from bson.timestamp import Timestamp
    import re

    types = _mm_filtering.TYPE_MAP
    types["null"] = lambda v: v is None
    types["regex"] = lambda v: isinstance(v, (Regex, re.Pattern))
    types["timestamp"] = lambda v: isinstance(v, Timestamp)
    types["javascript"] = lambda v: isinstance(v, Code) and v.scope is None
    types["javascriptWithScope"] = lambda v: isinstance(v, Code) and v.scope is not None
    types["minKey"] = lambda v: isinstance(v, MinKey)
    types["maxKey"] = lambda v: isinstance(v, MaxKey)
    types["dbPointer"] = lambda v: False
    types["symbol"] = lambda v: False
    single = _mm_filtering._filterer_inst._operator_map["$type"]

    def type_op(doc_val, search_val):
        if isinstance(search_val, list):
            return any(single(doc_val, one) for one in search_val)
        return single(doc_val, search_val)
    _mm_filtering._filterer_inst._operator_map["$type"] = type_op


_teach_mongomock_type_lists()

def _is_operator_doc(cond):
    """True for `{$op: ...}` condition documents (mongomock's rule: every key is an operator)."""
    return isinstance(cond, dict) and bool(cond) and all(k.startswith("$") for k in cond)


def is_nan(value):
    """Whether a value is a double or decimal NaN."""
    if isinstance(value, float):
        return math.isnan(value)
    return isinstance(value, Decimal128) and value.to_decimal().is_nan()


def _is_null_op(op, arg, dotted=True):
    """Whether one operator of a condition document compares with null (on a dotted path) or NaN in a way
    this module evaluates."""
    if op in ("$eq", "$ne"):
        return (dotted and arg is None) or is_nan(arg)
    if op in ("$gte", "$lte"):
        return is_nan(arg)
    if op in ("$in", "$nin"):
        return isinstance(arg, list) and any((dotted and v is None) or is_nan(v) for v in arg)
    if op == "$not":
        return _is_operator_doc(arg) and _is_null_condition(arg, dotted)
    return False


def _is_null_condition(cond, dotted=True):
    """Whether a condition on a path (literal or operator document) involves a null comparison (counted
    only on dotted paths) or a NaN comparison."""
    if cond is None:
        return dotted
    if is_nan(cond):
        return True
    return _is_operator_doc(cond) and any(_is_null_op(op, arg, dotted) for op, arg in cond.items())


def _is_filter_list(value):
    """A well-formed `$and`/`$or`/`$nor` operand (anything else is left to mongomock and its errors)."""
    return isinstance(value, list) and bool(value) and all(isinstance(sub, dict) for sub in value)


def has_null_path_conditions(filt):
    """Whether a filter holds a null comparison on a dotted path that mongomock would get wrong."""
    for key, value in filt.items():
        if key == "$expr":
            return True
        if key in _LOGICAL:
            if _is_filter_list(value) and any(has_null_path_conditions(sub) for sub in value):
                return True
        elif not key.startswith("$") and _is_null_condition(value, "." in key):
            return True
    return False


class _Undecided(Exception):
    """The path takes a turn (a numeric component on an array) that is left to mongomock."""


def _document_path_is_null(doc, parts):
    """MongoDB's `{path: null}` on a document: the path is missing somewhere it leads, or reaches null."""
    head, rest = parts[0], parts[1:]
    if head not in doc:
        return True
    value = doc[head]
    if not rest:
        return value is None or (isinstance(value, list) and any(e is None for e in value))
    if isinstance(value, dict):
        return _document_path_is_null(value, rest)
    if isinstance(value, list):
        if rest[0].isdigit():
            raise _Undecided()
        return any(_document_path_is_null(e, rest) for e in value if isinstance(e, dict))
    return True  # null or a scalar in the middle of the path: the rest of the path is missing


def _equals_null(path):
    """Predicate for `{path: null}`."""
    parts = path.split(".")
    fallback = {path: None}

    def test(doc):
        if not isinstance(doc, dict):
            return filter_applies(fallback, doc)
        try:
            return _document_path_is_null(doc, parts)
        except _Undecided:
            return filter_applies(fallback, doc)
    return test


def _equals_nan(path):
    """Predicate for `{path: NaN}`: a value the path reaches (array elements included) is NaN."""
    return lambda doc: isinstance(doc, dict) and any(is_nan(v) for v in leaf_values(doc, path)[0])


def _equals(path, value):
    """Predicate for `{path: value}` with null or NaN."""
    return _equals_nan(path) if is_nan(value) else _equals_null(path)


def _mongomock(filt):
    """Predicate running mongomock's matcher."""
    return lambda doc: filter_applies(filt, doc)


def _negate(test):
    return lambda doc: not test(doc)


def _all(tests):
    if len(tests) == 1:
        return tests[0]
    return lambda doc: all(t(doc) for t in tests)


def _any(tests):
    return lambda doc: any(t(doc) for t in tests)


def _in_with_null(path, values):
    """Predicate for `{path: {$in: values}}` where values hold null or NaN: equal to one of those, or to one
    of the others."""
    others = [v for v in values if v is not None and not is_nan(v)]
    tests = []
    if any(v is None for v in values):
        tests.append(_equals_null(path))
    if any(is_nan(v) for v in values):
        tests.append(_equals_nan(path))
    if others:
        tests.append(_mongomock({path: {"$in": others}}))
    return _any(tests)


def _condition_tests(path, cond):
    """Predicates whose conjunction is `{path: cond}` for a condition involving null on a dotted path.

    Each operator of a condition document is a predicate of its own in MongoDB, so the null comparisons are
    split off and the remaining operators stay together for mongomock ($regex with $options, for one)."""
    if cond is None or is_nan(cond):
        return [_equals(path, cond)]
    tests = []
    rest = {}
    for op, arg in cond.items():
        if not _is_null_op(op, arg):
            rest[op] = arg
        elif op in ("$eq", "$gte", "$lte"):
            tests.append(_equals(path, arg))
        elif op == "$ne":
            tests.append(_negate(_equals(path, arg)))
        elif op == "$in":
            tests.append(_in_with_null(path, arg))
        elif op == "$nin":
            tests.append(_negate(_in_with_null(path, arg)))
        else:  # $not over a condition document with a null comparison
            tests.append(_negate(_all(_condition_tests(path, arg))))
    if rest:
        tests.insert(0, _mongomock({path: rest}))
    return tests


def _compile(filt):
    """Predicate for a filter that holds null comparisons on dotted paths."""
    tests = []
    rest = {}
    for key, value in filt.items():
        if key == "$expr":
            tests.append(_expr.predicate(value))
        elif key in _LOGICAL and _is_filter_list(value) and any(has_null_path_conditions(s) for s in value):
            subs = [compile_filter(sub) for sub in value]
            if key == "$and":
                tests.append(_all(subs))
            elif key == "$or":
                tests.append(_any(subs))
            else:
                tests.append(_negate(_any(subs)))
        elif not key.startswith("$") and _is_null_condition(value, "." in key):
            tests.extend(_condition_tests(key, value))
        else:
            rest[key] = value
    if rest:
        tests.insert(0, _mongomock(rest))  # first, so that mongomock still reports malformed filters
    return _all(tests)


_MISSING = object()


def _in_key(value):
    """A hashable key under which `value` equals exactly the values of the same key in MongoDB's
    simple-collation equality, or None for a value this is not sure of (numbers compare by value across
    int, Int64 and double as on mongod; NaN, Decimal128, dates and the rest: None; bool too, which
    mongomock takes as equal to 0 and 1, unlike mongod, and which is left to mongomock as before)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return ("n", value)
    if isinstance(value, float):
        return None if value != value else ("n", value)
    if isinstance(value, str):
        return ("s", value)
    if isinstance(value, ObjectId):
        return ("o", value)
    return None


def _path_value(doc, parts):
    """The value at a dotted path through documents only; _MISSING where the path ends (or a scalar
    stands in the middle of it), None where an array or a non-document is met (mongomock decides)."""
    value = doc
    for part in parts:
        if isinstance(value, list) or not isinstance(value, dict):
            return None if value is doc or isinstance(value, list) else _MISSING
        value = value.get(part, _MISSING)
        if value is _MISSING:
            return _MISSING
    return value


def _in_set(field, values):
    """Predicate for `{field: {$in: values}}` (values all with an _in_key) by set lookup instead of
    mongomock's scan of the list for every document (quadratic for the `$in` of hundreds of _ids that
    a batch reads). A path through an array, or a value without a key, goes to mongomock."""
    keys = {_in_key(v) for v in values}
    slow = _mongomock({field: {"$in": values}})
    parts = field.split(".")

    def test(doc):
        value = _path_value(doc, parts)
        if value is _MISSING:
            return False
        if value is None:
            return slow(doc)
        items = value if isinstance(value, list) else (value,)
        found = [_in_key(v) for v in items]
        if any(k is None for k in found):
            return slow(doc)
        return any(k in keys for k in found)
    return test


def _in_fast_path(filt):
    """Whether `filt` is `{field: {$in: [...]}}` with values _in_set can take (no numeric path part)."""
    if not isinstance(filt, dict) or len(filt) != 1:
        return False
    (field, cond), = filt.items()
    if (field.startswith("$") or any(p == "" or p.isdigit() for p in field.split("."))
            or not isinstance(cond, dict) or list(cond) != ["$in"]):
        return False
    values = cond["$in"]
    return isinstance(values, list) and len(values) > 0 and all(_in_key(v) is not None for v in values)


def _or_fast_path(filt):
    """Whether `filt` is `{$or: [...]}` of filters that all take _in_fast_path (a change stream's $match)."""
    if not isinstance(filt, dict) or list(filt) != ["$or"]:
        return False
    subs = filt["$or"]
    return isinstance(subs, list) and len(subs) > 0 and all(_in_fast_path(sub) for sub in subs)


def compile_filter(filt):
    """A predicate `doc -> bool` for a query filter, with MongoDB's null semantics on dotted paths.

    Filters without such comparisons go to mongomock's `filter_applies` as they are, except a single
    `$in` on a path, or an `$or` of those, which are looked up in sets (_in_set)."""
    if not filt:
        return lambda doc: True
    if _in_fast_path(filt):
        (field, cond), = filt.items()
        return _in_set(field, cond["$in"])
    if _or_fast_path(filt):
        return _any([_in_set(field, cond["$in"]) for sub in filt["$or"] for field, cond in sub.items()])
    if isinstance(filt, dict) and has_null_path_conditions(filt):
        return _compile(filt)
    return _mongomock(filt)


def matches(filt, doc):
    """Whether `doc` matches `filt` (see compile_filter; compile once to test many documents)."""
    return compile_filter(filt)(doc)
