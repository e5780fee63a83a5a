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
# Production code only: src/ and cuda/ hold no function that only the tests
# call and no reference (the tests' references live in regression/, the
# benchmarks in tools/bench/), and `make all` builds no benchmark. Reads only
# the sources (and `make -n`); ROOT (default .) is the tree checked.
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
# Production code only: a function defined in src/ or cuda/ that only the tests call (ALLOWED
# lists the library's test-facing entry points, each with why), a function or file named like a
# reference (ref_*, *_ref, *_reference, attention_probs*), or a bench_* program among `make
# all`'s fails; each fails on a tree with one planted. No file of src/ but src/sys/mpiwait.c makes a
# blocking MPI call (MPI_Allreduce, MPI_Bcast, MPI_Wait, ...): they go through its sys_mpi_* forms,
# whose waits yield the core on an oversubscribed node (a call on MPI_COMM_SELF waits for no other rank).
. regression/lib.sh
plan 12
fails=0
"$PYTHON" - "${ROOT:-.}" <<'PY' || fails=$((fails + 1))
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

blocking = re.compile(r"\bMPI_(Allreduce|Bcast|Barrier|Allgatherv?|Gatherv?|Reduce|Alltoallv?|Recv|Probe|Waitall|Wait|Sendrecv|Scatterv?)\(")
bad = [f"{rel(p)}:{i + 1}:{m.group(0)[:-1]}" for p in sorted(srcs) if rel(p) != "src/sys/mpiwait.c"
       for i, l in enumerate(code(text(p)).splitlines()) for m in [blocking.search(l)] if m and "MPI_COMM_SELF" not in l]
chk("no blocking MPI call outside src/sys/mpiwait.c (waits yield on an oversubscribed node: sys_mpi_*)", bad)

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
    src_text = text(p)
    for m in call.finditer(src_text):  # a call may span lines: its arguments run to the ';'
        i = src_text.count("\n", 0, m.start())
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

# Production code only. A function defined in src/ or cuda/ that nothing
# there calls but a test program does (a benchmark is a caller: it measures
# the library) is a test's reference or switch kept in the library. The
# library's entry points the tests call directly instead of through the run
# (accessors, one-call wrappers of production code, the planner's
# exhaustive search) are listed in ALLOWED with why; a new one must move to
# regression/ or join the list with its reason.
ALLOWED = {
    "philox4x32_10": "the Philox block's known-answer test (test_sys); production draws through rng_*",
    "cost_memory_ranks": "the per-rank memory peaks, of which cost_estimate keeps the largest",
    "cost_shape_params": "a shape's parameter count, checked against published ones",
    "model_find_tensor": "a tensor by name, for tests that read one tensor",
    "model_logits": "accessor of the last forward's logits",
    "model_values": "accessor of the last forward's values (the run copies them with model_values_get)",
    "model_shard_insert": "the inverse of model_shard_extract",
    "dmodel_gather": "a placed model gathered onto rank 0",
    "reward_extract_answer": "the answer the rule rewards compare, tested alone",
    "rl_rm_loss": "rl_rm_loss_part over a whole batch",
    "sched_check": "the validity of a pipeline schedule's task list",
    "search_enumerate": "the exhaustive search that the annealer is checked against (test_search)",
    "search_tune": "search_tune_until without a deadline",
}
def files(d, exts):
    out = []
    for dd, _, fs in os.walk(os.path.join(root, d)):
        out += [os.path.join(dd, f) for f in fs if f.endswith(exts)]
    return sorted(out)
lib = files("src", (".c", ".h")) + files("cuda", (".cu", ".cuh"))
# a definition: a line that starts with its type and name, the parameters
# (over as many lines as they take), then the body's brace
fn_def = re.compile(r'^(?:extern[ \t]+""[ \t]+)?(?!static\b|typedef\b|return\b|else\b)[A-Za-z_][\w \t*]*?\b([A-Za-z_]\w*)\s*\([^;{]*\)\s*\{', re.M)
lib_defs, libcode = {}, {p: code(text(p)) for p in lib}
for p, t in libcode.items():
    for m in fn_def.finditer(t):
        if m.group(1) not in ("if", "for", "while", "switch"):
            lib_defs.setdefault(m.group(1), f"{rel(p)}:{t.count(chr(10), 0, m.start()) + 1}")
def count(paths):
    c = {}
    for p in paths:
        for w in re.findall(r"\b[A-Za-z_]\w*\b", libcode.get(p) or code(text(p))):
            c[w] = c.get(w, 0) + 1
    return c
in_lib, in_tests, in_bench = count(lib), count(files("regression", (".c", ".h", ".cu"))), count(files("tools", (".c", ".h", ".cu")))
def test_only(n): return n in lib_defs and n != "main" and in_lib.get(n, 0) <= 1 and in_tests.get(n, 0) > 0 and not in_bench.get(n, 0)
bad = [f"{n}({lib_defs[n]})" for n in sorted(lib_defs) if test_only(n) and n not in ALLOWED]
bad += [f"{n}(listed, but no longer test-only)" for n in sorted(ALLOWED) if not test_only(n)]
chk("production code only: no function in src/ or cuda/ that only the tests call (ALLOWED lists the library's test-facing entry points)", bad)
ref = re.compile(r"(^ref_|_ref$|_reference$|^reference_|attention_probs)")
bad = [f"{n}({w})" for n, w in sorted(lib_defs.items()) if ref.search(n)]
bad += [rel(p) for p in lib if re.match(r"(ref|reference)_", os.path.basename(p))]
chk("no reference in src/ or cuda/ (no function or file named ref_*, *_ref, *_reference, attention_probs*: they live in regression/)", bad)
raise SystemExit(fails > 0)
PY
# `make all` builds bin/rlfuse and the tests, no benchmark (make bench does)
allbins=$(make -C "${ROOT:-.}" -n -B all BUILD=/nonexistent/build BIN=/nonexistent/bin 2>/dev/null | grep -o -- '-o /nonexistent/bin/[A-Za-z0-9_]*' | sed 's|.*/||' | sort -u)
check "make all builds no benchmark program ($(echo $allbins | wc -w) programs: $(echo $allbins | tr ' ' '\n' | grep -c '^test_') tests and $(echo $allbins | tr ' ' '\n' | grep -vc '^test_') other)" \
  bash -c '[ -n "$1" ] && printf "%s\n" $1 | grep -qx rlfuse && ! printf "%s\n" $1 | grep -q "^bench"' _ "$allbins"
finish
