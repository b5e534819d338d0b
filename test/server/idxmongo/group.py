"""The $group stage with mongod's semantics for the accumulators $sum, $min and $max.

mongomock's $group differs from mongod where the FDW's pushed aggregates depend on it (see README.md,
"$group"): its $sum adds booleans as numbers and gives Python ints past int64, its $toDecimal fails on null,
its $addToSet drops 0 and "", and it groups and compares with Python's rules. Here, after mongod
(src/mongo/db/pipeline/accumulator_sum.cpp, accumulator_min_max.cpp, expression.cpp):

- the group key is the evaluated `_id` expression, a missing value being null; keys are equal when
  MongoDB's comparison finds them equal (1, 1.0 and NumberLong(1) are one group);
- `$sum` adds numbers only (other values, booleans included, are ignored); the result is an int32 while
  every input is an int32 and the sum fits, else a long while it fits, else a double; any double makes it a
  double, any Decimal128 a Decimal128 (34 significant digits); over no numbers it is 0;
- `$min` and `$max` ignore null, missing and undefined, compare in BSON order, and give null over none;
- no input documents give no groups, also for `_id: null`.

Expressions inside are evaluated here for field paths, `$ifNull`, `$cond`, `$eq`, `$toDecimal`, `$convert` to
decimal and long, `$type`, `$toString` of an ObjectId, `$and`, `$ne`, `$in` and `$trunc` (mongod's rules: a missing value compares below null, `$toDecimal` of null or missing is null, onNull and
onError); any other operator is
mongomock's. A $group using another accumulator runs entirely in mongomock.
"""

import datetime
import decimal
import math

from bson.decimal128 import Decimal128, create_decimal128_context
from bson.int64 import Int64
from bson.objectid import ObjectId
from mongomock import aggregate as mm_aggregate

from .bsonkeys import MISSING, sort_key
from .codec import UNDEFINED, date_millis
from .errors import MongoError

ACCUMULATORS = {"$sum", "$min", "$max"}
INT32_MIN, INT32_MAX = -2 ** 31, 2 ** 31 - 1
INT64_MIN, INT64_MAX = -2 ** 63, 2 ** 63 - 1
_MISSING_KEY = (-2,)  # a missing value compares below null (and equal to nothing else) in expressions


def handles(spec):
    """True if every accumulator of this $group is one implemented here."""
    if not isinstance(spec, dict) or "_id" not in spec:
        return False
    for field, acc in spec.items():
        if field == "_id":
            continue
        if not isinstance(acc, dict) or len(acc) != 1 or next(iter(acc)) not in ACCUMULATORS:
            return False
    return True


def _nullish(value):
    return value is None or value is MISSING or value is UNDEFINED


def _key(value):
    return _MISSING_KEY if value is MISSING else sort_key(value)


def _field(doc, path):
    value = doc
    for part in path.split("."):
        if not isinstance(value, dict) or part not in value:
            return MISSING
        value = value[part]
    return value


def _truthy(value):
    if _nullish(value) or value is False:
        return False
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return value != 0
    if isinstance(value, Decimal128):
        return value.to_decimal() != 0
    return True


def _to_decimal(value):
    """$toDecimal (src/mongo/db/exec/document_value/value.cpp conversions): null stays null."""
    if _nullish(value):
        return None
    if isinstance(value, bool):
        return Decimal128("1" if value else "0")
    if isinstance(value, int):
        return Decimal128(str(int(value)))
    if isinstance(value, float):
        return Decimal128(create_decimal128_context().create_decimal(repr(value)))
    if isinstance(value, Decimal128):
        return value
    if isinstance(value, str):
        try:
            return Decimal128(value)
        except (decimal.InvalidOperation, ValueError):
            raise MongoError(241, "Failed to parse number '%s' in $convert with no onError value" % value)
    if isinstance(value, datetime.datetime):
        return Decimal128(str(date_millis(value)))
    raise MongoError(241, "Unsupported conversion to decimal in $convert with no onError value")


def _type_name(value):
    """$type's name of a value ("missing" for a missing field)."""
    if value is MISSING:
        return "missing"
    if value is None:
        return "null"
    if value is UNDEFINED:
        return "undefined"
    for kind, name in ((bool, "bool"), (Int64, "long"), (int, "int"), (float, "double"), (Decimal128, "decimal"),
                       (str, "string"), (ObjectId, "objectId"), (dict, "object"), (list, "array"),
                       (datetime.datetime, "date")):
        if isinstance(value, kind):
            if kind is int and not INT32_MIN <= value <= INT32_MAX:
                return "long"
            return name
    return "other"  # a name none of the FDW's expressions asks for


def _trunc(value):
    """$trunc of a number, keeping its type (null for null or missing)."""
    if _nullish(value):
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float, Decimal128)):
        raise MongoError(28765, "$trunc only supports numeric types")
    if isinstance(value, float):
        return float(math.trunc(value)) if math.isfinite(value) else value
    if isinstance(value, Decimal128):
        d = value.to_decimal()
        return Decimal128(d.to_integral_value(rounding=decimal.ROUND_DOWN)) if d.is_finite() else value
    return value


def _convert_long(args, doc):
    """$convert to long: doubles and decimals truncated, out of range or NaN an error (onError)."""
    value = evaluate(args.get("input"), doc)
    if _nullish(value):
        return evaluate(args["onNull"], doc) if "onNull" in args else None
    try:
        if isinstance(value, bool):
            return Int64(int(value))
        if isinstance(value, (int, float, Decimal128)):
            number = value.to_decimal() if isinstance(value, Decimal128) else value
            if isinstance(number, float) and not math.isfinite(number) or \
                    isinstance(number, decimal.Decimal) and not number.is_finite():
                raise MongoError(241, "Attempt to convert NaN or infinity to long")
            result = int(number)
            if not INT64_MIN <= result <= INT64_MAX:
                raise MongoError(241, "Conversion would overflow target type in $convert")
            return Int64(result)
        raise MongoError(241, "Unsupported conversion to long in $convert")
    except MongoError:
        if "onError" in args:
            return evaluate(args["onError"], doc)
        raise


def _convert_decimal(args, doc):
    """$convert to decimal: onNull for null or missing input (else null), onError for a failed conversion."""
    value = evaluate(args.get("input"), doc)
    if _nullish(value):
        return evaluate(args["onNull"], doc) if "onNull" in args else None
    try:
        return _to_decimal(value)
    except MongoError:
        if "onError" in args:
            return evaluate(args["onError"], doc)
        raise


def evaluate(expr, doc):
    """An aggregation expression's value for `doc` (MISSING for a missing field)."""
    if isinstance(expr, str) and expr.startswith("$") and not expr.startswith("$$"):
        return _field(doc, expr[1:])
    if isinstance(expr, list):
        return [evaluate(e, doc) for e in expr]
    if not isinstance(expr, dict):
        return expr
    if len(expr) == 1 and next(iter(expr)).startswith("$"):
        (op, args), = expr.items()
        if op == "$ifNull":
            first = evaluate(args[0], doc)
            return evaluate(args[1], doc) if _nullish(first) else first
        if op == "$cond":
            if isinstance(args, dict):
                args = [args["if"], args["then"], args["else"]]
            return evaluate(args[1] if _truthy(evaluate(args[0], doc)) else args[2], doc)
        if op == "$eq":
            return _key(evaluate(args[0], doc)) == _key(evaluate(args[1], doc))
        if op == "$toDecimal":
            return _to_decimal(evaluate(args, doc))
        if op == "$convert" and isinstance(args, dict) and args.get("to") in ("decimal", 19):
            return _convert_decimal(args, doc)
        if op == "$literal":
            return args
        if op == "$and":
            return all(_truthy(evaluate(a, doc)) for a in args)
        if op == "$ne":
            return _key(evaluate(args[0], doc)) != _key(evaluate(args[1], doc))
        if op == "$in":
            array = evaluate(args[1], doc)
            if not isinstance(array, list):
                raise MongoError(40081, "$in requires an array as a second argument")
            return _key(evaluate(args[0], doc)) in [_key(v) for v in array]
        if op == "$trunc" and not (isinstance(args, list) and len(args) > 1):
            return _trunc(evaluate(args[0] if isinstance(args, list) else args, doc))
        if op == "$convert" and isinstance(args, dict) and args.get("to") in ("long", 18):
            return _convert_long(args, doc)
        if op == "$type" and isinstance(args, str):
            return _type_name(evaluate(args, doc))
        if op == "$toString" and isinstance(evaluate(args, doc), ObjectId):
            return str(evaluate(args, doc))
        try:
            return mm_aggregate._parse_expression(expr, doc)
        except KeyError:
            return MISSING
    out = {}
    for k, v in expr.items():
        value = evaluate(v, doc)
        if value is not MISSING:  # a document expression leaves missing fields out
            out[k] = value
    return out


def _sum(values):
    numbers = [v for v in values if isinstance(v, (int, float, Decimal128)) and not isinstance(v, bool)]
    if any(isinstance(v, Decimal128) for v in numbers):
        ctx = create_decimal128_context()
        total = decimal.Decimal(0)
        for v in numbers:
            total = ctx.add(total, v.to_decimal() if isinstance(v, Decimal128) else
                            ctx.create_decimal(repr(v) if isinstance(v, float) else int(v)))
        return Decimal128(total)
    if any(isinstance(v, float) for v in numbers):
        return float(sum(numbers))  # mongod adds doubles with more care; equal for the FDW's uses
    total = sum(int(v) for v in numbers)
    if all(type(v) is int for v in numbers) and INT32_MIN <= total <= INT32_MAX:
        return total
    if INT64_MIN <= total <= INT64_MAX:
        return Int64(total)
    return float(total)


def _extreme(values, pick):
    present = [v for v in values if not _nullish(v)]
    if not present:
        return None
    return pick(present, key=sort_key)


def run(docs, spec):
    """The output documents of `{$group: spec}` over `docs`, `_id` first, in first-seen group order."""
    groups = {}
    for doc in docs:
        key_value = evaluate(spec["_id"], doc)
        if key_value is MISSING:
            key_value = None
        entry = groups.setdefault(sort_key(key_value), (key_value, {f: [] for f in spec if f != "_id"}))
        for field, acc in spec.items():
            if field != "_id":
                entry[1][field].append(evaluate(next(iter(acc.values())), doc))
    out = []
    for key_value, inputs in groups.values():
        result = {"_id": key_value}
        for field, acc in spec.items():
            if field == "_id":
                continue
            op = next(iter(acc))
            if op == "$sum":
                result[field] = _sum(inputs[field])
            else:
                result[field] = _extreme(inputs[field], min if op == "$min" else max)
        out.append(result)
    return out


def window(docs, spec):
    """`{$setWindowFields: spec}` over `docs` for the form the FDW sends: no partitionBy and no sortBy, each
    output field one `$sum`, `$min` or `$max` of an expression without a window, which mongod evaluates over
    all the documents (the default window of an unsorted partition) and sets on each of them."""
    if not isinstance(spec, dict) or not isinstance(spec.get("output"), dict):
        raise MongoError(40414, "BSON field '$setWindowFields.output' is missing but a required field")
    extra = set(spec) - {"output", "partitionBy", "sortBy"}
    if extra:
        raise MongoError(40415, "BSON field '$setWindowFields.%s' is an unknown field" % sorted(extra)[0])
    if "partitionBy" in spec or "sortBy" in spec:
        raise MongoError(115, "the test server's $setWindowFields has no partitionBy or sortBy")
    docs = list(docs)
    values = {}
    for field, acc in spec["output"].items():
        if not isinstance(acc, dict) or len(acc) != 1 or next(iter(acc)) not in ACCUMULATORS:
            raise MongoError(115, "the test server's $setWindowFields has only $sum, $min and $max, "
                             "without a window")
        (op, expr), = acc.items()
        inputs = [evaluate(expr, doc) for doc in docs]
        values[field] = _sum(inputs) if op == "$sum" else _extreme(inputs, min if op == "$min" else max)
    return [dict(doc, **values) for doc in docs]
