"""`$expr` in query filters: the aggregation expressions the FDW sends, evaluated as mongod does.

mongomock's `$expr` raises KeyError on a missing field, compares with Python's `==` (NaN unequal to itself) and
accepts nonsense, so the matcher hands `$expr` here. Supported: field paths (`"$a"`, `"$a.b"` through embedded
documents; a missing field is "missing"), literals, `$literal`, `$and`, `$or`, `$not` (`$and`/`$or` stop at the
first operand that decides, as mongod's do), the comparisons `$eq`, `$ne`, `$lt`, `$lte`, `$gt`, `$gte`, and
`$add`/`$subtract` of numbers (null or missing gives null; integers exact, widened to double beyond int64 as
mongod does; any other operand, dates included, is refused with 16554/16556, stricter than mongod). Comparisons use BSON order (bsonkeys.sort_key: numbers of every type by value,
NaN equal to NaN and below every other number, as mongod's Value::compare), with missing equal to undefined
and below null (canonical type 0 for both). Any other
operator is refused with mongod's InvalidPipelineOperator (168), so that the FDW can rely on nothing more.
"""

import decimal

from bson.decimal128 import Decimal128

from .bsonkeys import NUMBER, UNDEFINED_KEY, sort_key
from .codec import UNDEFINED
from .errors import MongoError

_COMPARISONS = {
    "$eq": lambda c: c == 0, "$ne": lambda c: c != 0, "$lt": lambda c: c < 0,
    "$lte": lambda c: c <= 0, "$gt": lambda c: c > 0, "$gte": lambda c: c >= 0,
}


class _Missing:
    """The value of a field path that does not exist."""


MISSING_VALUE = _Missing()
_MISSING_KEY = UNDEFINED_KEY  # mongod's canonical type 0 for both: equal to each other, below null


def _field(doc, path):
    """The value of a field path in a document, or MISSING_VALUE."""
    value = doc
    for part in path.split("."):
        if not isinstance(value, dict) or part not in value:
            return MISSING_VALUE
        value = value[part]
    return value


def _key(value):
    return _MISSING_KEY if value is MISSING_VALUE else sort_key(value)


def _compare(a, b):
    ka, kb = _key(a), _key(b)
    return (ka > kb) - (ka < kb)


def _truthy(value):
    """Aggregation truthiness: false, null, missing, undefined and zero are false, NaN is true."""
    if value is MISSING_VALUE or value is None or value is False or value is UNDEFINED:
        return False
    key = sort_key(value)
    return not (key[0] == NUMBER and len(key) == 3 and key[2] == 0)


def _number(value, op):
    """A numeric operand of $add/$subtract as a Python number (None for null/missing)."""
    if value is None or value is MISSING_VALUE or value is UNDEFINED:
        return None
    if isinstance(value, Decimal128):
        return value.to_decimal()
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return value
    raise MongoError(16554 if op == "$add" else 16556,
                     "%s only supports numeric types in this test server, not %s" % (op, type(value).__name__))


def _arithmetic(op, args, doc):
    """$add (any number of operands) or $subtract (two)."""
    if not isinstance(args, list) or (op == "$subtract" and len(args) != 2):
        raise MongoError(16020, "Expression %s takes exactly 2 arguments." % op)
    values = [_number(evaluate(a, doc), op) for a in args]
    if any(v is None for v in values):
        return None
    if any(isinstance(v, decimal.Decimal) for v in values):
        values = [decimal.Decimal(repr(v)) if isinstance(v, float) else decimal.Decimal(v) for v in values]
    result = values[0] - values[1] if op == "$subtract" else sum(values[1:], values[0])
    if isinstance(result, int) and not -2 ** 63 <= result < 2 ** 63:
        return float(result)
    return result


def evaluate(expr, doc):
    """The value of aggregation expression `expr` on `doc`."""
    if isinstance(expr, str):
        if expr.startswith("$$"):
            raise MongoError(17276, "Use of undefined variable: %s" % expr[2:])
        return _field(doc, expr[1:]) if expr.startswith("$") else expr
    if isinstance(expr, list):
        return [evaluate(e, doc) for e in expr]
    if not isinstance(expr, dict) or not expr or not next(iter(expr)).startswith("$"):
        if isinstance(expr, dict):
            return {k: evaluate(v, doc) for k, v in expr.items()}
        return expr
    if len(expr) != 1:
        raise MongoError(15983, "an expression specification must contain exactly one field")
    op, args = next(iter(expr.items()))
    if op == "$literal":
        return args
    if op in _COMPARISONS:
        if not isinstance(args, list) or len(args) != 2:
            raise MongoError(16020, "Expression %s takes exactly 2 arguments." % op)
        return _COMPARISONS[op](_compare(evaluate(args[0], doc), evaluate(args[1], doc)))
    if op in ("$and", "$or"):
        args = args if isinstance(args, list) else [args]
        values = (_truthy(evaluate(a, doc)) for a in args)
        return all(values) if op == "$and" else any(values)
    if op in ("$add", "$subtract"):
        return _arithmetic(op, args, doc)
    if op == "$not":
        args = args if isinstance(args, list) else [args]
        if len(args) != 1:
            raise MongoError(16020, "Expression $not takes exactly 1 arguments.")
        return not _truthy(evaluate(args[0], doc))
    raise MongoError(168, "Unrecognized expression '%s'" % op)


def predicate(expr):
    """A `doc -> bool` for `{$expr: expr}`."""
    return lambda doc: isinstance(doc, dict) and _truthy(evaluate(expr, doc))
