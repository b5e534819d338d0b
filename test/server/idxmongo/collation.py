"""Collations: `simple` (binary) and one ICU collation the tests need, `{locale: "en", strength: 2}`.

MongoDB compares strings under a collation. This server knows two: `simple`, the binary comparison, and
English at strength 2 (case-insensitive, accent-sensitive), which it emulates by comparing Unicode case
folds (`str.casefold`), the same thing for the text tests use. Any other collation is refused with BadValue
rather than silently compared by bytes.

A collection created with a `collation` keeps it as its default: its indexes, `_id_` included, are built
under it unless they name another, and a query without a collation uses it. As on mongod, an index can serve
a query only if both use the same collation (this server does not make mongod's exception for bounds that
hold no strings), so a `simple` query on a collection with a case-insensitive default scans the collection.
"""

import re

from bson.regex import Regex

from .errors import MongoError

# mongod's fully specified form of {locale: "en", strength: 2}, as listCollections and listIndexes show it
EN_STRENGTH_2 = {"locale": "en", "caseLevel": False, "caseFirst": "off", "strength": 2,
                 "numericOrdering": False, "alternate": "non-ignorable", "maxVariable": "punct",
                 "normalization": False, "backwards": False, "version": "57.1"}
SIMPLE = "simple"
_DEFAULTS = dict(EN_STRENGTH_2, strength=3)


def parse(spec):
    """A command's or collection's `collation`: None if absent, SIMPLE, or the canonical dict of en/2.

    BadValue (2) for any other locale or option; 14 if it is not a document."""
    if spec is None:
        return None
    if not isinstance(spec, dict):
        raise MongoError(14, "collation must be an object")
    locale = spec.get("locale")
    if locale == "simple" and len(spec) == 1:
        return SIMPLE
    full = dict(_DEFAULTS)
    full.update(spec)
    if locale == "en" and full == EN_STRENGTH_2:
        return dict(EN_STRENGTH_2)
    raise MongoError(2, "collation %s not supported by the test server (only {locale: \"simple\"} and "
                        "{locale: \"en\", strength: 2})" % _describe(spec))


def _describe(spec):
    """A short text for an error message: {locale: "fr", strength: 1}."""
    return "{%s}" % ", ".join('%s: "%s"' % (k, v) if isinstance(v, str) else "%s: %s" % (k, v)
                              for k, v in spec.items())


def effective(spec, coll):
    """The collation a command runs under: its own (SIMPLE -> None), else the collection's default."""
    parsed = parse(spec)
    if parsed is None:
        return default_of(coll)
    return None if parsed == SIMPLE else parsed


def default_of(coll):
    """A collection's default collation (None: simple)."""
    if coll is None:
        return None
    return coll.options.get("collation")


def fold(value):
    """`value` with every string (inside documents and arrays too) case-folded: equal folds compare equal
    under en/2."""
    if isinstance(value, str):
        return value.casefold()
    if isinstance(value, dict):
        return {k: fold(v) for k, v in value.items()}
    if isinstance(value, list):
        return [fold(v) for v in value]
    return value


def fold_filter(filt):
    """A filter with the strings it compares folded (not its field names).

    Regular expressions ignore collations on mongod: they would have to run on the unfolded strings, which
    this emulation does not keep, so a filter with one is refused (115) under en/2."""
    if _has_regex(filt):
        raise MongoError(115, "regular expressions under a non-simple collation are not supported by the "
                              "test server")
    return _fold_operands(filt)


def _fold_operands(value):
    """Fold the values a filter compares; `$type` names stay as they are, and so does `$expr` (its strings
    are field paths; string comparisons inside `$expr` are not emulated under a collation)."""
    if isinstance(value, dict):
        return {k: v if k in ("$type", "$expr") else _fold_operands(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_fold_operands(v) for v in value]
    return fold(value)


def _has_regex(value):
    """Does a filter hold a `$regex` operator or a regular expression value?"""
    if isinstance(value, dict):
        return "$regex" in value or any(_has_regex(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_regex(v) for v in value)
    return isinstance(value, (Regex, re.Pattern))
