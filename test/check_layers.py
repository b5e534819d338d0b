#!/usr/bin/env python3
"""
The source layout is one-directional: fdw/core (MongoDB access, values,
options, MongoDB transactions) uses nothing above it; fdw/index (index
tables) uses core; fdw/sync (the backends' side of the change-stream
applier: the shared memory both sides use, the waits of routed reads and
unique writes, transaction markers, the hooks that wake the workers, the
views) uses index and core; fdw/applier (the worker processes: launcher,
database workers, appliers and their change streams) uses sync, index and
core; fdw/ itself (the FDW callbacks, planner paths, scans, writes and the
transaction coordinator) uses core, index and sync.

Checked twice: every #include of one of our headers names a layer at or
below the including file's, and, where the objects are built, no object
refers to a symbol defined in a layer above its own (nm).  The one
exception is the module's identity: any layer may ask idxtable_fdw.c
whether a foreign-data wrapper's handler is ours (MODULE_IDENTITY,
declared in fdw/module.h).  And though fdw/applier is below fdw/, the FDW
proper needs nothing of it but what idxtable_fdw.c's _PG_init calls at
load time: the definition of the workers' settings and the registration
of the launcher (APPLIER_ENTRY, declared in fdw/applier/launcher.h, the
one applier header fdw/ may include).  The launcher starts the database
workers, and those the appliers, by the names of their entry points, so
nothing else links the two.

Within a layer too, no file reaches itself through others: the objects'
references (nm) form no loop, direct or round a ring (check_loops), so
every file has a place below the files that use it.  An object whose
source is gone (a stale build) is left out.
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
RANK = {"core": 0, "index": 1, "sync": 2, "applier": 3, "": 4}
NAMES = {"core": "fdw/core", "index": "fdw/index", "sync": "fdw/sync",
         "applier": "fdw/applier", "": "fdw"}
# symbols of idxtable_fdw.c every layer may use (see the docstring)
MODULE_IDENTITY = {"idx_fdw_is_ours"}
# the header that declares it, the one of fdw/ any layer may include
MODULE_HEADER = "module.h"
# what fdw/ may use of fdw/applier, and only from this file (see the docstring)
APPLIER_ENTRY = {"idx_applier_define_gucs", "idx_applier_register_launcher"}
APPLIER_HEADER = os.path.join("applier", "launcher.h")
APPLIER_USER = "idxtable_fdw.c"


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
            elif mine == "" and theirs == "applier" and not (
                    inc == APPLIER_HEADER.replace(os.sep, "/")
                    and os.path.basename(path) == APPLIER_USER):
                bad.append("%s (%s: fdw/ may include only %s, in %s)" % (
                    inc, NAMES[theirs], APPLIER_HEADER, APPLIER_USER))
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


def applier_use_allowed(obj, mine, sym, theirs):
    """May object "obj" of layer "mine" use "sym", defined in object "theirs"?
    Only the APPLIER_ENTRY exception limits fdw/'s use of a lower layer."""
    if mine != "" or layer_of(theirs) != "applier":
        return True
    return sym in APPLIER_ENTRY and os.path.basename(obj) == \
        APPLIER_USER.replace(".c", ".o")


def check_symbols():
    objs = [o for o in sources(".o") if os.path.exists(o[:-2] + ".c")]
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
                     and (RANK[layer_of(owner[s])] > RANK[mine]
                          or not applier_use_allowed(o, mine, s, owner[s])))
        check(not bad, "%s (%s) uses %s" % (
            os.path.relpath(o, TOP), NAMES[mine],
            ", ".join("%s of %s" % (s, os.path.relpath(owner[s], TOP)) for s in bad)))
    check_loops(owner, uses)


def strongly_connected(edges):
    """The groups of more than one node that reach each other (Tarjan)."""
    index, low, stack, on_stack, groups = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return groups


def check_loops(owner, uses):
    """No file uses, directly or round a ring of others, a symbol of its own:
    each object's place in the order of the layers is then fixed by what it
    uses, inside its layer too (the module's identity aside)."""
    edges = {o: {owner[s] for s in used if s in owner and s not in MODULE_IDENTITY} - {o}
             for o, used in uses.items()}
    in_loop = {}
    for group in strongly_connected(edges):
        for o in group:
            in_loop[o] = group
    for o in sorted(uses):
        group = in_loop.get(o, [])
        check(not group, "%s is in no loop of files%s" % (
            os.path.relpath(o, TOP),
            "" if not group else " (it reaches itself through: %s)" % ", ".join(
                os.path.relpath(g, FDW)[:-2] for g in group if g != o)))


def main():
    check_includes()
    check_symbols()
    print(RESULTS.summary("layers"))
    return 1 if RESULTS.failed else 0


if __name__ == "__main__":
    sys.exit(main())
