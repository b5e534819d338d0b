"""The benchmark's output: a fixed-width table per data size, a summary, CSV."""
import csv
import math

RATIOS = (("docs_examined", "r_docs"), ("round_trips", "r_rt"),
          ("cpu_ms", "r_cpu"), ("wall_ms", "r_wall"))

# (heading, key, width, format)
COLUMNS = [
    ("scenario", "scenario", 22, "s"),
    ("path", "path", 5, "s"),
    ("rows", "rows", 8, "d"),
    ("rtrips", "round_trips", 6, "d"),
    ("entries", "entries_read", 8, "d"),
    ("facts", "facts_fetched", 8, "d"),
    ("fetched", "docs_fetched", 8, "d"),
    ("keys_ex", "keys_examined", 8, "d"),
    ("docs_ex", "docs_examined", 8, "d"),
    ("cpu_ms", "cpu_ms", 8, ".1f"),
    ("wall_ms", "wall_ms", 9, ".1f"),
    ("runs", "executions", 4, "d"),
    ("docs×", "r_docs", 8, ".3g"),
    ("rt×", "r_rt", 6, ".3g"),
    ("cpu×", "r_cpu", 7, ".3g"),
    ("wall×", "r_wall", 8, ".3g"),
    ("plan", "plan", 0, "s"),
]

CSV_FIELDS = ["size", "scenario", "path", "rows", "round_trips", "entries_read",
              "facts_fetched", "docs_fetched", "keys_examined", "docs_examined",
              "cpu_ms", "wall_ms", "executions", "r_docs", "r_rt", "r_cpu", "r_wall",
              "index_used", "plan", "sql"]


def ratio(a, b):
    """a / b, or None when either is unknown or b is 0 (1.0 when both are 0)."""
    if a is None or b is None:
        return None
    if b == 0:
        return 1.0 if a == 0 else None
    return a / b


def add_ratios(rows, ratios=RATIOS, num="index", den="plain"):
    """Put num/den ratios (index/plain by default) on each num row, from the den row
    of the same scenario."""
    by = {(r["scenario"], r["path"]): r for r in rows}
    for r in rows:
        for _, name in ratios:
            r.setdefault(name, None)
        if r["path"] != num:
            continue
        other = by.get((r["scenario"], den))
        if other is None:
            continue
        for key, name in ratios:
            r[name] = ratio(r.get(key), other.get(key))


def _cell(value, width, fmt):
    if value is None:
        text = ""
    elif fmt == "d":
        text = str(int(value))
    elif fmt == "s":
        text = str(value)
    else:
        text = format(value, fmt)
    if width == 0:
        return text
    if len(text) > width:
        text = text[:width - 1] + "…"
    return text.ljust(width) if fmt == "s" else text.rjust(width)


def table(rows, columns=COLUMNS, min_width=150):
    """The fixed-width table as a list of lines."""
    head = " ".join(_cell(h, w, "s") for h, _, w, _ in columns)
    lines = [head.rstrip(), "-" * max(len(head), min_width)]
    for r in rows:
        lines.append(" ".join(_cell(r.get(k), w, f) for _, k, w, f in columns).rstrip())
    return lines


def _geomean(values):
    values = [v for v in values if v is not None and v > 0]
    if not values:
        return None
    return math.exp(sum(math.log(v) for v in values) / len(values))


def summary(rows, skew_keys=("skew: Redmond", "skew: rare town")):
    """A few lines on the whole run of one size."""
    out = []
    idx = [r for r in rows if r["path"] == "index"]
    plain = {r["scenario"]: r for r in rows if r["path"] == "plain"}
    routed = [r for r in idx if r.get("index_used")]
    out.append("index tables used by %d of %d scenarios with routing on"
               % (len(routed), len(idx)))
    for key in skew_keys:
        r = next((x for x in idx if x["scenario"] == key), None)
        if r is not None:
            out.append("%-16s planner chose: %s (%s rows)" % (key + ":", r["plan"], r["rows"]))
    if routed:
        for label, name in (("wall", "r_wall"), ("cpu", "r_cpu"),
                            ("docs examined", "r_docs"), ("round trips", "r_rt")):
            g = _geomean(r.get(name) for r in routed)
            if g is not None:
                out.append("geometric mean index/plain %-13s over routed scenarios: %.3g" % (label, g))
        slower = [r["scenario"] for r in routed if (r.get("r_wall") or 0) > 1.0]
        if slower:
            out.append("routed but slower than plain (wall): " + ", ".join(slower))
    differ = [r["scenario"] for r in idx
              if r["scenario"] in plain and r["rows"] != plain[r["scenario"]]["rows"]]
    out.append("ROWS DIFFER between paths: " + ", ".join(differ) if differ
               else "rows returned: identical on both paths in every scenario")
    return out


def write_csv(path, size, rows, sql_by_key, fields=CSV_FIELDS):
    """The table's rows (all measured values, full precision) as CSV."""
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            rec = {k: ("" if r.get(k) is None else r.get(k)) for k in fields}
            rec["size"] = size
            rec["sql"] = sql_by_key.get(r["scenario"], "")
            for k in ("cpu_ms", "wall_ms", "r_docs", "r_keys", "r_rt", "r_cpu", "r_wall"):
                if r.get(k) is not None:
                    rec[k] = "%.4g" % r[k]
            w.writerow(rec)
