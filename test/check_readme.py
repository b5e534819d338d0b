#!/usr/bin/python3
"""Does README.md document what the code defines, and nothing else?

Reads the sources, not a running server, so it needs no environment:

- options: every (option, where) that fdw/core/option.c accepts (server, user
  mapping, table, column) and every IMPORT FOREIGN SCHEMA option that
  fdw/import.c reads is a row of the README's options table
  ("| where | option | meaning |") with that "where", and every option in
  that table is accepted by the code there.  A cell that says "in the
  `uri`" names a URI parameter, not an option, and is left out; text in
  parentheses (defaults, "required") is not an option name.
- settings: every GUC that fdw/ defines (DefineCustom*Variable) is a row
  of the settings table ("| setting | default | who sets it | meaning |"),
  with its default and who may set it (PGC_USERSET "any user", PGC_SIGHUP
  "postgresql.conf (reload)", ...), and every setting in that table is
  defined.
- sources: every .c file under fdw/ is named in the sources list of "How
  it works" (from "- **Sources**" to the next heading), and every .c file
  named there exists.
- file headers (what the README's "Licence" says): every C source and
  header of the project and the extension's SQL scripts open with a header
  block holding the copyright line, the licence note and IDENTIFICATION
  with the file's path; no header under fdw/ includes postgres.h, and every
  .c file under fdw/ includes it first (PostgreSQL's rule).

- reference (docs/reference.md): every function and procedure users call,
  every view and table of the extension's script (with its columns, in
  order) and every SQLSTATE that fdw/ raises (errcode() of its ereports,
  its error mapping's codes and its own, read through PostgreSQL's
  errcodes.h) is a row of its table there, and every row is one of them.

Prints a FAIL line per mismatch; the last line is
"readme: N passed, M failed".
"""
import glob
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures"))
from results import Results  # noqa: E402  (test/fixtures)

RESULTS = Results()
check = RESULTS.check

TOP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CATALOGS = {
    "ForeignServerRelationId": "server",
    "UserMappingRelationId": "user mapping",
    "ForeignTableRelationId": "table",
    "AttributeRelationId": "column",
}

CONTEXTS = {
    "PGC_USERSET": "any user",
    "PGC_SUSET": "superuser",
    "PGC_SIGHUP": "`postgresql.conf` (reload)",
    "PGC_POSTMASTER": "`postgresql.conf` (restart)",
    "PGC_BACKEND": "at connection start",
}



def read(path):
    with open(os.path.join(TOP, path), encoding="utf-8") as f:
        return f.read()


def strip_comments(c):
    """C source without its comments (string literals kept)."""
    return re.sub(r"/\*.*?\*/", " ", c, flags=re.S)


def code_options():
    """{(name, where)} of the options the FDW accepts."""
    src = strip_comments(read("fdw/core/option.c"))
    table = re.search(r"valid_options\[\]\s*=\s*\{(.*?)\};", src, re.S)
    if not table:
        raise SystemExit("check_readme: no valid_options[] in fdw/core/option.c")
    opts = set()
    for name, catalog in re.findall(r'\{\s*"([^"]+)"\s*,\s*(\w+)\s*\}', table.group(1)):
        if catalog not in CATALOGS:
            raise SystemExit("check_readme: unknown catalog %s in fdw/core/option.c" % catalog)
        opts.add((name, CATALOGS[catalog]))
    imp = strip_comments(read("fdw/import.c"))
    for name in re.findall(r'strcmp\(\s*def->defname\s*,\s*"([^"]+)"\s*\)', imp):
        opts.add((name, "IMPORT FOREIGN SCHEMA"))
    return opts


def split_args(text):
    """Top-level comma-separated arguments of a C call's argument text."""
    args, depth, cur, i = [], 0, [], 0
    while i < len(text):
        ch = text[i]
        if ch == '"':
            j = i + 1
            while text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            cur.append(text[i:j + 1])
            i = j + 1
            continue
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        if ch == "," and depth == 0:
            args.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
        i += 1
    args.append("".join(cur).strip())
    return args


def call_args(src, start):
    """The arguments of the call whose "(" is at src[start]."""
    depth, i = 0, start
    while True:
        ch = src[i]
        if ch == '"':
            i += 1
            while src[i] != '"':
                i += 2 if src[i] == "\\" else 1
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth == 0:
                return split_args(src[start + 1:i])
        i += 1


def show_default(kind, boot, flags, src):
    """A GUC's boot value as SHOW prints it."""
    if kind == "Bool":
        return {"true": "on", "false": "off"}.get(boot, boot)
    if kind == "Enum":
        m = re.search(r'\{\s*"([^"]+)"\s*,\s*' + re.escape(boot) + r"\s*,\s*false\s*\}", src)
        return m.group(1) if m else boot
    if kind == "Int":
        n = int(boot)
        if "GUC_UNIT_MS" in flags:
            for unit, size in (("d", 86400000), ("h", 3600000), ("min", 60000), ("s", 1000)):
                if n and n % size == 0:
                    return "%d%s" % (n // size, unit)
            return "%dms" % n
        if "GUC_UNIT_S" in flags:
            for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
                if n and n % size == 0:
                    return "%d%s" % (n // size, unit)
            return "%ds" % n
        return str(n)
    return boot.strip('"')


def code_gucs():
    """{name: (default as SHOW prints it, who sets it)} of the GUCs fdw/ defines."""
    gucs = {}
    files = glob.glob(os.path.join(TOP, "fdw", "**", "*.c"), recursive=True)
    for path in sorted(files):
        with open(path, encoding="utf-8") as f:
            src = strip_comments(f.read())
        for m in re.finditer(r"DefineCustom(Bool|Int|Real|String|Enum)Variable\s*\(", src):
            kind = m.group(1)
            args = call_args(src, m.end() - 1)
            name = args[0].strip('"')
            boot = args[4]
            ctx_at = {"Bool": 5, "String": 5, "Int": 7, "Real": 7, "Enum": 6}[kind]
            context, flags = args[ctx_at], args[ctx_at + 1]
            gucs[name] = (show_default(kind, boot, flags, src),
                          CONTEXTS.get(context, context))
    return gucs


def table_rows(readme, header):
    """The cells of each row of the README table that starts with "header"."""
    lines = readme.split("\n")
    try:
        at = lines.index(header)
    except ValueError:
        return None
    rows = []
    for line in lines[at + 2:]:
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in line.strip().strip("|").split(" | ")])
    return rows


def without_parens(text):
    """text with every parenthesized part removed (nested ones too)."""
    prev = None
    while prev != text:
        prev = text
        text = re.sub(r"\([^()]*\)", "", text)
    return text


def readme_options(readme):
    rows = table_rows(readme, "| where | option | meaning |")
    if rows is None:
        raise SystemExit("check_readme: README.md has no options table")
    opts = set()
    for cells in rows:
        where, names = cells[0], cells[1]
        if "in the `uri`" in names:
            continue
        for w in where.split(", "):
            for name in re.findall(r"`([^`]+)`", without_parens(names)):
                opts.add((name, w))
    return opts


def readme_gucs(readme):
    rows = table_rows(readme, "| setting | default | who sets it | meaning |")
    if rows is None:
        raise SystemExit("check_readme: README.md has no settings table")
    gucs = {}
    for cells in rows:
        names = re.findall(r"`([^`]+)`", cells[0])
        default = cells[1].strip("`")
        for name in names:
            gucs[name] = (default, cells[2])
    return gucs


def readme_sources(readme):
    start = readme.find("- **Sources**")
    if start < 0:
        raise SystemExit("check_readme: README.md has no sources list")
    end = readme.find("\n#", start)
    return set(re.findall(r"`([A-Za-z0-9_]+\.c)`", readme[start:end]))


# Functions of the extension's script that are not called by users: the
# FDW's handler and validator, the catalog's trigger and event trigger.
NOT_CALLED = {"idxtable_fdw_handler", "idxtable_fdw_validator", "index_defs_changed", "drop_table_indexes"}


def script_sql():
    """The extension's SQL script(s), comments removed."""
    text = "\n".join(read(os.path.basename(p)) for p in sorted(glob.glob(os.path.join(TOP, "idxtable_fdw--*.sql"))))
    return re.sub(r"--[^\n]*", "", text)


def script_routines(sql):
    """Names (without schema) of the functions and procedures users call."""
    names = re.findall(r"CREATE (?:OR REPLACE )?(?:FUNCTION|PROCEDURE) (?:idxtable\.)?(\w+)\(", sql)
    return {n for n in names if n not in NOT_CALLED}


def split_top(text):
    """text split at its top-level commas (not inside parentheses)."""
    parts, depth, cur = [], 0, ""
    for ch in text:
        depth += ch == "("
        depth -= ch == ")"
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    return parts + [cur]


def select_list(sql, at):
    """The select list that starts at sql[at:], up to its FROM at the top
    level (a FROM inside parentheses belongs to a subquery)."""
    depth = 0
    for i in range(at, len(sql)):
        depth += sql[i] == "("
        depth -= sql[i] == ")"
        if depth == 0 and re.match(r"\sFROM\s", sql[i:i + 6]):
            return sql[at:i]
    return sql[at:]


def script_relations(sql):
    """{schema-qualified name: [columns]} of the views and tables of the script."""
    rels = {}
    for name, body in re.findall(r"CREATE TABLE (idxtable\.\w+) \((.*?)\n\);", sql, re.S):
        cols = [p.split()[0] for p in split_top(body) if p.split()]
        rels[name] = [c for c in cols if c.upper() not in ("PRIMARY", "UNIQUE", "CHECK", "FOREIGN")]
    for m in re.finditer(r"CREATE VIEW (idxtable\.\w+) AS\s+SELECT ", sql):
        cols = []
        for part in split_top(select_list(sql, m.end())):
            words = re.findall(r'"?[\w.]+"?', part.strip())
            cols.append(words[-1].strip('"').split(".")[-1])
        rels[m.group(1)] = cols
    return rels


SQLSTATE_DEFINE = r"#define (ERRCODE_\w+)\s+MAKE_SQLSTATE\('(.)',\s*'(.)',\s*'(.)',\s*'(.)',\s*'(.)'\)"


def code_sqlstates():
    """The SQLSTATEs fdw/ raises: the errcode() of its ereports and what its
    error mapping returns (ERRCODE_ macros), and codes of its own."""
    header = os.path.join(subprocess.run(["pg_config", "--includedir-server"], capture_output=True,
                                         text=True).stdout.strip(), "utils", "errcodes.h")
    codes = {}
    for path in [header] + glob.glob(os.path.join(TOP, "fdw", "**", "*.h"), recursive=True):
        for m in re.findall(SQLSTATE_DEFINE, read_abs(path)):
            codes[m[0]] = "".join(m[1:])
    used = set()
    for path in glob.glob(os.path.join(TOP, "fdw", "**", "*.[ch]"), recursive=True):
        text = strip_comments(read_abs(path))
        for line in text.split("\n"):
            if "ERRCODE_TO_CATEGORY" in line:
                continue  # a comparison with a class, not a code raised
            used.update(n for n in re.findall(r"\b(ERRCODE_\w+)\b", line) if not n.startswith("ERRCODE_TO_"))
    missing = sorted(n for n in used if n not in codes)
    return {codes[n] for n in used if n in codes}, missing


def read_abs(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def check_reference():
    """docs/reference.md against the extension's script and fdw/'s error codes."""
    ref = read(os.path.join("docs", "reference.md"))
    sql = script_sql()

    rows = table_rows(ref, "| function or procedure | returns | what it does | who may call it |") or []
    doc = {re.match(r"`(\w+)", cells[0]).group(1) for cells in rows if re.match(r"`(\w+)", cells[0])}
    code = script_routines(sql)
    for name in sorted(code - doc):
        check(False, "function or procedure %s is not in docs/reference.md" % name)
    for name in sorted(doc - code):
        check(False, "docs/reference.md lists function %s, which the extension does not define" % name)
    check(bool(code & doc), "docs/reference.md lists the extension's functions")

    rows = table_rows(ref, "| view or table | columns | what a row is |") or []
    doc = {}
    for cells in rows:
        name = re.match(r"`([\w.]+)`", cells[0]).group(1)
        doc[name] = re.findall(r"`(\w+)`", cells[1])
    code = script_relations(sql)
    for name, cols in sorted(code.items()):
        if name not in doc:
            check(False, "view or table %s is not in docs/reference.md" % name)
            continue
        check(doc[name] == cols, "%s: docs/reference.md lists columns %s, the script defines %s"
              % (name, ", ".join(doc[name]), ", ".join(cols)))
    for name in sorted(set(doc) - set(code)):
        check(False, "docs/reference.md lists %s, which the extension does not define" % name)

    rows = table_rows(ref, "| SQLSTATE | condition name | raised when |") or []
    doc = {cells[0].strip("`") for cells in rows}
    code, unknown = code_sqlstates()
    for name in unknown:
        check(False, "fdw/ uses %s, which neither errcodes.h nor fdw/ defines" % name)
    for state in sorted(code - doc):
        check(False, "SQLSTATE %s, raised in fdw/, is not in docs/reference.md" % state)
    for state in sorted(doc - code):
        check(False, "docs/reference.md lists SQLSTATE %s, which fdw/ does not raise" % state)
    check(bool(code & doc), "docs/reference.md lists the SQLSTATEs of fdw/")


COPYRIGHT = "Copyright (c) 2026, idxtable_fdw developers"
LICENCE_NOTE = "Distributed under the PostgreSQL Licence; see the LICENSE file."


def check_file_headers():
    """Header blocks of the C files and SQL scripts, and postgres.h."""
    paths = sorted(glob.glob(os.path.join(TOP, "fdw", "**", "*.[ch]"), recursive=True)
                   + glob.glob(os.path.join(TOP, "test", "**", "*.c"), recursive=True)
                   + glob.glob(os.path.join(TOP, "idxtable_fdw--*.sql")))
    for path in paths:
        rel = os.path.relpath(path, TOP)
        with open(path, encoding="utf-8") as f:
            text = f.read()
        block = text[:text.find("*/") + 2] if text.startswith("/*") else ""
        check(block.startswith("/*-----") and "\n * %s\n" % os.path.basename(rel) in block
              and COPYRIGHT in block and LICENCE_NOTE in block
              and re.search(r"\n \* IDENTIFICATION\n \*\s+" + re.escape(rel) + "\n", block),
              "%s: its header block lacks the file name, the copyright line, the licence note "
              "or IDENTIFICATION %s" % (rel, rel))
        if not rel.startswith("fdw" + os.sep):
            continue
        includes = re.findall(r'^#include\s+[<"]([^>"]+)[>"]', text, re.M)
        if rel.endswith(".h"):
            check("postgres.h" not in includes, "%s includes postgres.h (only .c files may)" % rel)
        else:
            check(includes[:1] == ["postgres.h"], "%s does not include postgres.h first" % rel)


def documentation():
    """README.md and docs/*.md, one text: the tables and lists checked here
    may live in any of them (the options, settings and types in
    docs/reference.md, the sources list in docs/internals.md)."""
    paths = ["README.md"] + sorted(os.path.relpath(p, TOP) for p in glob.glob(os.path.join(TOP, "docs", "*.md")))
    return "\n".join(read(p) for p in paths)


def main():
    readme = documentation()

    code = code_options()
    doc = readme_options(readme)
    for name, where in sorted(code):
        check((name, where) in doc,
              "option %s (%s) is not in the README's options table" % (name, where))
    for name, where in sorted(doc - code):
        check(False, "the README's options table lists %s (%s), which the code does not accept there"
              % (name, where))

    code = code_gucs()
    doc = readme_gucs(readme)
    for name, (default, who) in sorted(code.items()):
        if name not in doc:
            check(False, "setting %s is not in the README's settings table" % name)
            continue
        check(doc[name][0] == default,
              "setting %s: the README says default %s, the code %s" % (name, doc[name][0], default))
        check(doc[name][1] == who,
              "setting %s: the README says it is set by %s, the code by %s" % (name, doc[name][1], who))
    for name in sorted(set(doc) - set(code)):
        check(False, "the README's settings table lists %s, which the code does not define" % name)

    files = glob.glob(os.path.join(TOP, "fdw", "**", "*.c"), recursive=True)
    code = {os.path.basename(p) for p in files}
    doc = readme_sources(readme)
    for name in sorted(code):
        check(name in doc, "fdw source %s is not in the README's sources list" % name)
    for name in sorted(doc - code):
        check(False, "the README's sources list names %s, which fdw/ does not have" % name)

    check_file_headers()
    check_reference()

    print(RESULTS.summary("readme"))
    return 1 if RESULTS.failed else 0


if __name__ == "__main__":
    sys.exit(main())
