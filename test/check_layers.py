#!/usr/bin/env python3
"""
The source layout is one-directional: fdw/core (MongoDB access, values,
options, MongoDB transactions) uses nothing above it; fdw/index (index
tables) uses core; fdw/sync (the change-stream workers) uses index and core;
fdw/ itself (the FDW callbacks, planner paths, scans, writes and the
transaction coordinator) uses all of them.

Checked twice: every #include of one of our headers names a layer at or
below the including file's, and, where the objects are built, no object
refers to a symbol defined in a layer above its own (nm).  The one
exception is the module's identity: any layer may ask idxtable_fdw.c
whether a foreign-data wrapper's handler is ours (MODULE_IDENTITY,
declared in fdw/module.h).
Ends with "layers: N passed, M failed".
"""
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures"))
from results import Results  # noqa: E402  (test/fixtures)

RESULTS = Results()
check = RESULTS.check

TOP = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
FDW = os.path.join(TOP, "fdw")
RANK = {"core": 0, "index": 1, "sync": 2, "": 3}
NAMES = {"core": "fdw/core", "index": "fdw/index", "sync": "fdw/sync", "": "fdw"}
# symbols of idxtable_fdw.c every layer may use (see the docstring)
MODULE_IDENTITY = {"idx_fdw_is_ours"}
# the header that declares it, the one of fdw/ any layer may include
MODULE_HEADER = "module.h"


def layer_of(path):
    rel = os.path.relpath(path, FDW)
    first = rel.split(os.sep)[0]
    return first if first in RANK and os.sep in rel else ""


def sources(ext):
    for d, _, files in os.walk(FDW):
        for f in sorted(files):
            if f.endswith(ext):
                yield os.path.join(d, f)


def headers():
    return {os.path.relpath(p, FDW): p for p in sources(".h")}


def check_includes():
    known = headers()
    for path in list(sources(".c")) + list(sources(".h")):
        mine = layer_of(path)
        bad = []
        for inc in re.findall(r'^#include "([^"]+)"', open(path).read(), re.M):
            if inc in known:
                theirs = layer_of(known[inc])
            elif os.path.basename(inc) in {os.path.basename(k) for k in known} \
                    and "/" not in inc:
                bad.append(inc + " (name it with its folder)")
                continue
            else:
                continue		# PostgreSQL's or libmongoc's
            if RANK[theirs] > RANK[mine] and inc != MODULE_HEADER:
                bad.append("%s (%s)" % (inc, NAMES[theirs]))
        check(not bad, "%s (%s) includes %s" % (os.path.relpath(path, TOP), NAMES[mine],
                                                 ", ".join(bad)))


def nm(obj):
    out = subprocess.run(["nm", obj], capture_output=True, text=True, check=True).stdout
    defined, used = set(), set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[1] in "TDBRC":
            defined.add(parts[2])
        elif len(parts) == 2 and parts[0] == "U":
            used.add(parts[1])
    return defined, used


def check_symbols():
    objs = list(sources(".o"))
    if not objs:
        print("(objects not built: the symbol check is skipped)")
        return
    owner = {}
    uses = {}
    for o in objs:
        defined, used = nm(o)
        for s in defined:
            owner[s] = o
        uses[o] = used
    for o, used in sorted(uses.items()):
        mine = layer_of(o)
        bad = sorted(s for s in used if s in owner and s not in MODULE_IDENTITY
                     and RANK[layer_of(owner[s])] > RANK[mine])
        check(not bad, "%s (%s) uses %s" % (
            os.path.relpath(o, TOP), NAMES[mine],
            ", ".join("%s of %s" % (s, os.path.relpath(owner[s], TOP)) for s in bad)))


def main():
    check_includes()
    check_symbols()
    print(RESULTS.summary("layers"))
    return 1 if RESULTS.failed else 0


if __name__ == "__main__":
    sys.exit(main())
