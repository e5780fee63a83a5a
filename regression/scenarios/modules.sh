# The module boundaries docs/design.md states: HDF5 is src/io's (no other
# module includes inc/internal/h5util.h or names an HDF5 call, type or
# constant), each option prefix has one owner that reads it (-plan_ and -fuse_
# in src/plan, -cost_ in src/cost, -reward_ in src/reward; the others receive
# the values), and each file option has one owner: the module that reads it
# declares it (IoFileOption rows), and src/io names no option of another
# module; src/io has one API (inc/io.h): its private header declares no twin
# of an io.h call. src/ppo is in layers: no two of its files call each other,
# directly or through others (a call circle), and none holds mutable state
# at file scope (asynchronous RL's queue reaches checkpoints as an argument).
# Reads only the sources; ROOT (default .) is the tree checked.
#
# The checks in detail: the module boundaries of docs/design.md, read from the sources: no
# file outside `src/io` includes `internal/h5util.h` or `hdf5.h`, or names an HDF5 call, type
# or constant (`H5*`, `h5u_*`, `hid_t`, `hsize_t`), and every option read with a literal name
# (the `PetscOptionsBegin` block's prefix in front) under `-plan_`, `-cost_` or `-reward_` is
# read in src/plan, src/cost or src/reward. Before the owners moved it found 20 such reads in
# src/search and src/ppo. About 1 s
# src/ppo: its files as a call graph (a file calls another when it names a function the other
# defines, outside comments and strings) has no circle (Tarjan's components), and no file of
# src/ppo has a non-const variable at file scope.
. regression/lib.sh
plan 8
"$PYTHON" - "${ROOT:-.}" <<'PY'
import glob, os, re, sys
root = sys.argv[1]
fails = 0
def chk(name, bad):
    global fails
    fails += bool(bad)
    print(("not ok - " if bad else "ok - ") + name + (f": {len(bad)} places: " + " ".join(bad[:8]) if bad else ""))

srcs = []
for d, _, fs in os.walk(os.path.join(root, "src")):
    srcs += [os.path.join(d, f) for f in fs if f.endswith((".c", ".h"))]
def rel(p): return os.path.relpath(p, root)
def text(p):
    with open(p, encoding="utf-8") as fh:
        return fh.read()
def code(t):  # comments and string literals blanked, lines kept
    t = re.sub(r"/\*.*?\*/", lambda m: re.sub(r"[^\n]", " ", m.group(0)), t, flags=re.S)
    t = re.sub(r"//[^\n]*", "", t)
    return re.sub(r'"(\\.|[^"\\\n])*"', '""', t)
outside = [p for p in sorted(srcs) if not rel(p).startswith("src/io/")]

bad = [f"{rel(p)}:{i + 1}" for p in outside for i, l in enumerate(text(p).splitlines()) if re.search(r'#\s*include\s*[<"](internal/h5util\.h|hdf5\.h)', l)]
chk("no file outside src/io includes internal/h5util.h or hdf5.h", bad)

hdf = re.compile(r"\b(H5[A-Z]\w*|h5u_\w+|hid_t|hsize_t|hssize_t|herr_t)\b")
bad = [f"{rel(p)}:{i + 1}:{m.group(1)}" for p in outside for i, l in enumerate(code(text(p)).splitlines()) for m in [hdf.search(l)] if m]
chk("no file outside src/io names an HDF5 function, type or constant (H5*, h5u_*, hid_t, hsize_t)", bad)

# every option read with a literal name, its block's prefix in front
owner = {"plan_": "src/plan/", "fuse_": "src/plan/", "cost_": "src/cost/", "reward_": "src/reward/"}
def module(p): return "/".join(rel(p).split("/")[:2])
readers = {}  # option name (no dash) -> the modules (src/<dir>) that read it
call = re.compile(r'\b(PetscOptionsBegin|PetscOptionsEnd|RfOpt(?!Call)\w*|PetscOptions(?:HasName|Get\w+)|sys_option_given)\s*\(([^;]*)')
bad = []
for p in srcs:
    prefix = None
    for i, l in enumerate(text(p).splitlines()):
        for m in call.finditer(l):
            fn, args = m.group(1), m.group(2)
            lits = re.findall(r'"((?:\\.|[^"\\])*)"', args)
            if fn == "PetscOptionsBegin":
                a = [x.strip() for x in args.split(",")]
                prefix = lits[0] if len(a) > 1 and a[1].startswith('"') else ("" if len(a) > 1 and a[1] == "NULL" else None)
                continue
            if fn == "PetscOptionsEnd":
                prefix = None
                continue
            if fn.startswith("RfOpt"):
                name = (prefix or "") + lits[0].lstrip("-") if lits and prefix is not None else None
            elif fn == "sys_option_given":
                name = lits[0] + (lits[1].lstrip("-") if len(lits) > 1 else "") if lits else None
            else:
                name = lits[0].lstrip("-") if lits and lits[0].startswith("-") else None
            if name:
                readers.setdefault(name, set()).add(module(p))
            for pre, home in owner.items():
                if name and name.startswith(pre) and not rel(p).startswith(home):
                    bad.append(f"{rel(p)}:{i + 1}:-{name}")
chk("each option prefix is read by its owner only (-plan_ and -fuse_ src/plan, -cost_ src/cost, -reward_ src/reward)", sorted(bad))

# a file option's row (IoFileOption: {"-name", IO_FILE_...}) sits in the module that reads the option
row = re.compile(r'\{\s*"-([a-z0-9_]+)"\s*,\s*IO_FILE_(?:IN|OUT)\b')
bad = [f"{rel(p)}:{i + 1}:-{m.group(1)} (read in {' '.join(sorted(readers.get(m.group(1), ()))) or 'no module'})"
       for p in srcs for i, l in enumerate(text(p).splitlines()) for m in row.finditer(l)
       if module(p) not in readers.get(m.group(1), ())]
chk("each file option is declared (IoFileOption row) by the module that reads it", bad)

# src/io names no option that another module reads: no literal "-name" of one
lit = re.compile(r'"-([a-z][a-z0-9_]*)"')
bad = [f"{rel(p)}:{i + 1}:-{m.group(1)}" for p in srcs if rel(p).startswith("src/io/")
       for i, l in enumerate(re.sub(r"/\*.*?\*/", lambda m: re.sub(r"[^\n]", " ", m.group(0)), text(p), flags=re.S).splitlines())
       for m in lit.finditer(l) if any(w != "src/io" for w in readers.get(m.group(1), ()))]
chk("src/io names no option of another module (each module declares its own file options)", bad)

# one API: no function of inc/internal/*.h is an io.h call again, or h5u_X beside io.h's io_X
decl = re.compile(r"^[A-Za-z_][\w \t\*]*?\b([a-z]\w*)\s*\(", re.M)
def declared(p): return set(decl.findall(code(text(p))))
public = declared(os.path.join(root, "inc/io.h"))
bad = [f"{rel(h)}:{f}" for h in sorted(glob.glob(os.path.join(root, "inc/internal/*.h"))) for f in sorted(declared(h))
       if f in public or (f.startswith("h5u_") and "io_" + f[4:] in public)]
chk("src/io has one API: inc/internal declares no twin of an inc/io.h call (h5u_X beside io_X)", bad)

# src/ppo's files as a call graph: a file calls another when it names a
# function the other defines (not static), outside comments and strings
ppo = sorted(p for p in srcs if rel(p).startswith("src/ppo/") and p.endswith(".c"))
defn = {}
for p in ppo:
    for m in re.finditer(r"^(?!static\b)[A-Za-z_][\w \*]*?\b(\w+)\s*\([^;{]*\)\s*\{", code(text(p)), re.M):
        defn[m.group(1)] = p
calls = {p: set() for p in ppo}
for p in ppo:
    body = code(text(p))
    for f, q in defn.items():
        if q != p and re.search(r"\b" + f + r"\s*\(", body):
            calls[p].add(q)
index, low, stack, on, sccs, n = {}, {}, [], set(), [], [0]
def visit(v):  # Tarjan's strongly connected components
    index[v] = low[v] = n[0]; n[0] += 1; stack.append(v); on.add(v)
    for w in calls[v]:
        if w not in index:
            visit(w); low[v] = min(low[v], low[w])
        elif w in on:
            low[v] = min(low[v], index[w])
    if low[v] == index[v]:
        comp = []
        while True:
            w = stack.pop(); on.discard(w); comp.append(w)
            if w == v: break
        if len(comp) > 1: sccs.append(" <-> ".join(sorted(rel(c) for c in comp)))
for v in ppo:
    if v not in index: visit(v)
chk(f"no call circle among src/ppo's {len(ppo)} files (each calls only files below it)", sccs)

state = re.compile(r"^static\s+(?!const\b)(?!inline\b)[\w \*]+?\b\w+\s*(\[[^]]*\])?\s*(=[^;]*)?;", re.M)
bad = [f"{rel(p)}:{code(text(p))[:m.start()].count(chr(10)) + 1}" for p in ppo + sorted(p for p in srcs if rel(p).startswith("src/ppo/") and p.endswith(".h")) for m in state.finditer(code(text(p)))]
chk("no mutable state at file scope in src/ppo (a run's data goes by argument)", bad)
raise SystemExit(fails > 0)
PY
