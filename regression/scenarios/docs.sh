# The documents say what the code does: the repository cites nothing outside
# itself (no SYSTEM.md, no issue numbers), relative links resolve, the
# README's quickstart has the deck's PPO iteration count and model size
# (-dry_run), and its example commands name files the pipeline writes, with
# a role those files hold.
# The lists in the documents stay true to the code: every repository path
# they name exists, the README links every docs/*.md, every -option they
# name is one rlfuse (or a test or tool) reads, every snake_case name in
# backticks occurs in the code, every -mode and -algo is documented and
# every documented one exists, every architecture and imported family is in
# docs/models.md's table, every HDF5 attribute the code writes is in
# docs/formats.md, docs/design.md's Layout has every directory of src/, and
# docs/testing.md has a row for each test program, scenario and deck case.
# The documents stay short and current: the README has at most 150 lines,
# no commit hash appears in the README or docs/*.md, no heading there carries
# a date (dated history goes to CHANGELOG.md), and every line of src/ and
# cuda/ has at most 120 characters.
#
# The checks in detail: the documents against the code: no file cites a document outside the
# repository or an issue-tracker number, relative links in the markdown files resolve, the
# README's quickstart iteration count and model size (`-dry_run`'s parameter count) are the
# deck's, and its example commands name files the pipeline writes with roles those files hold;
# the README links every docs/*.md; in README.md and docs/*.md every repository path named
# exists (`bin/NAME` a program built from regression/ or tools/), every `-option` is in
# `rlfuse -help` or a test program's, tool's or the hardware deck's, every snake_case name in
# backticks, called, or with a module's prefix occurs in the code (benchmarks.md and
# background.md, which name other programs', are left out of this one), every `-mode` and
# `-algo` choice but the default is shown as `-mode X` and every one shown exists, every
# `-policy_arch` choice is a row of docs/models.md's table and each row one, every family
# tools/hf_llama.py imports is in its models column and, with its `model_type`, its
# `*ForCausalLM` class and hf_export's `--model-type`, in docs/huggingface.md, and every GGUF
# architecture tools/gguf_import.py reads is in docs/models.md, every HDF5 attribute the code
# writes by name is in docs/formats.md, docs/design.md's Layout has a line for every directory
# of src/ (and inc/, cuda/, input/, regression/, tools/), and this table has a row for every
# test program, scenario and deck case and none for another. Each fails when a document is
# broken the matching way (tried)
. regression/lib.sh
plan 18
help="$RLFUSE_TMP/docs_help.txt"
rlfuse -help >"$help" 2>&1 || not_ok "rlfuse -help exits 0"
dry="$RLFUSE_TMP/docs_dry.txt"
rlfuse -options_file input/quickstart.deck -dry_run -output_dir "$RLFUSE_TMP/docs_dry" >"$dry" 2>&1 || not_ok "the quickstart deck's -dry_run exits 0"
"$PYTHON" - "$help" "$dry" <<'PY'
import ast, collections, glob, sys
import os, re, subprocess
fails = 0
def chk(name, cond, why=""):
    global fails
    fails += not cond
    print(("ok - " if cond else "not ok - ") + name + ("" if cond or not why else ": " + why))

try:
    files = subprocess.run(["git", "ls-files"], capture_output=True, text=True, check=True).stdout.split()
except (OSError, subprocess.CalledProcessError):  # not a git checkout
    files = [os.path.join(r, f)[2:] for r, _, fs in os.walk(".") for f in fs if not r.startswith(("./.git", "./build", "./bin"))]
text = {}
for f in files:
    try:
        with open(f, encoding="utf-8") as fh:
            text[f] = fh.read()
    except (UnicodeDecodeError, IsADirectoryError, FileNotFoundError):
        pass  # binary (golden tensors)
cites = [f"{f}:{i + 1}" for f, t in text.items() if f != "regression/scenarios/docs.sh"
         for i, line in enumerate(t.splitlines()) if re.search(r"SYSTEM\.md|\bissues? #?[0-9]", line)]
chk("no file cites SYSTEM.md or an issue number", not cites, " ".join(cites[:5]))

broken = []
for f in [f for f in text if f.endswith(".md")]:
    for target in re.findall(r"\]\(([^)#\s]+)[^)]*\)", text[f]):
        if "://" not in target and not os.path.exists(os.path.join(os.path.dirname(f), target)):
            broken.append(f"{f} -> {target}")
chk("every relative link in the markdown files resolves", not broken, " ".join(broken[:5]))

readme, deck = text["README.md"], text["input/quickstart.deck"]
iters = re.search(r"^-ppo_iterations\s+(\d+)", deck, re.M).group(1)
said = re.findall(r"(\d+)\s+PPO\s+iterations", readme)
chk(f"the README's quickstart runs the deck's {iters} PPO iterations (README says {said})", said and all(n == iters for n in said))
m = re.search(r"policy (\d+) parameters", open(sys.argv[2], errors="replace").read())
size = f"{int(m.group(1)) / 1e6:.2f}M" if m else "(no -dry_run line)"
said = re.findall(r"(\d+\.\d+M)-parameter", readme)
chk(f"the README's quickstart model has the deck's {size} parameters (-dry_run; README says {said})", said and all(n == size for n in said))

# what -mode pipeline writes under -output_dir, and the roles of each stage's checkpoints (docs/formats.md)
roles = {"sft": {"policy"}, "rm": {"reward"}, "ppo": {"actor", "critic", "reference", "reward"}}
bad = []
for path in re.findall(r"out/quickstart/[\w./{},*-]+", readme):
    path = path.rstrip(".,")
    if not re.fullmatch(r"out/quickstart/((\{sft,rm,ppo\}|sft|rm|ppo)/((final|run|ckpt_\d+)\.h5)?|used\.deck)", path):
        bad.append(path)
for line in readme.splitlines():
    m = re.search(r"-score_checkpoint out/quickstart/(\w+)/final\.h5", line)
    if m:
        role = (re.search(r"-score_role (\w+)", line) or re.search("(policy)", "policy")).group(1)
        if role not in roles.get(m.group(1), set()):
            bad.append(f"-score_role {role} on {m.group(1)}/final.h5")
chk("the README names only files the quickstart pipeline writes, with roles they hold", not bad, " ".join(bad))

docs = ["README.md"] + sorted(f for f in text if f.startswith("docs/") and f.endswith(".md"))
def alts(p):  # src/{a,b}.c -> src/a.c, src/b.c
    m = re.search(r"\{([^{}]*)\}", p)
    return [q for a in m.group(1).split(",") for q in alts(p[:m.start()] + a + p[m.end():])] if m else [p]
def built(q):  # bin/NAME: a program the GNUmakefile builds from these sources
    name = q.split("/")[1]
    return name == "rlfuse" or any(glob.glob(f"{d}/{name}.c") for d in ("regression", "tools/bench"))
# $CUDA_HOME/bin/nvcc, not a file of the repository
FOREIGN_PATHS = {"bin/nvcc"}
bad = []
for f in docs:
    for p in re.findall(r"(?<![\w/.$-])((?:src|inc|cuda|tools|regression|input|docs|bin|\.ci)/[\w./*{},+-]*[\w*}/])", text[f]):
        if p in FOREIGN_PATHS or (re.search(r"[A-Z]{2,}", p) and not os.path.exists(p)):
            continue  # regression/scenarios/NAME.sh: a placeholder
        for q in alts(p):
            found = built(q) if q.startswith("bin/") else glob.glob(q) or any(g.startswith(q.rstrip("/") + "/") for g in files)
            if not found:
                bad.append(f"{f}: {q}")
chk("every repository path the documents name exists", not bad, " ".join(bad[:8]))
bad = [f for f in docs[1:] if f"]({f})" not in readme]
chk("the README's documentation list links every docs/*.md", not bad, " ".join(bad))

helptext = open(sys.argv[1], errors="replace").read()
opt = r"(?<![\w/.<>-])-([a-z][a-z0-9_]*[a-z0-9_])(?![\w-])"
known = set(re.findall(opt, helptext))
for f in files:  # the flags of the test programs and tools, and the hardware deck's -hw_* (its own database)
    if f in text and f.startswith(("regression/", "tools/", "src/")) and f.endswith(".c"):
        known |= {n for n in re.findall(r"[\"' ]-([a-z][a-z0-9_]*)\b", text[f]) if not f.startswith("src/") or n.startswith("hw_")}
# flags of other programs, placeholders and formulas the documents quote
FOREIGN_OPTS = {"march", "fno", "fsanitize", "lopenblas", "gencode", "npp", "ntg", "npl",
                "name", "new", "old", "log", "dirty", "kl_coef", "only"}
bad = []
for f in docs:
    given = re.findall(r"\(`-(\w+_)` prefix\)", text[f])  # "Options (`-plan_` prefix): `-ranks`, ..."
    for n in re.findall(opt, text[f]):
        ok = n in known or n in FOREIGN_OPTS or any(p + n in known for p in given) or (n.endswith("_") and any(k.startswith(n) for k in known))
        if not ok:
            bad.append(f"{f}: -{n}")
chk("every -option the documents name is read by rlfuse, a test program or a tool", not bad, " ".join(sorted(set(bad))[:8]))

words = set()
for f in files:
    if f in text and (f.startswith(("src/", "inc/", "cuda/", "regression/", "tools/", "input/", ".ci/")) or f == "GNUmakefile"):
        words |= set(re.findall(r"\w+", text[f]))
words |= {os.path.basename(f) for f in glob.glob("regression/cases/*")}
# module prefixes: the first word of the functions the headers declare (3 or more), and the test programs'
heads = collections.Counter(re.findall(r"\b([a-z][a-z0-9]*)_\w+ *\(", "".join(text[f] for f in files if f.startswith("inc/") and f in text)))
prefixes = "|".join(sorted({p for p, n in heads.items() if n >= 3} | {"cpu", "cuda", "test"}))
FOREIGN_NAMES = {"max_num_gen_batches"}  # verl's DAPO setting, named for comparison
bad = []
for f in docs:
    if f in ("docs/benchmarks.md", "docs/background.md"):
        continue  # other programs' kernels, counters and settings
    for a, b in re.findall(r"`([a-z][a-z0-9]*_[a-z0-9_]*[a-z0-9])(?:\(\))?`|\b([a-z][a-z0-9]*_[a-z0-9_]*[a-z0-9])\(", text[f]):
        if (a or b) not in words and (a or b) not in FOREIGN_NAMES:
            bad.append(f"{f}: {a or b}")
    for n in re.findall(r"(?<![\w./-])((?:%s)_[a-z0-9_]*[a-z0-9])\b(?![./-])" % prefixes, text[f]):
        if n not in words:
            bad.append(f"{f}: {n}")
chk("every snake_case name in backticks (or called, or with a module's prefix) in the documents occurs in the code", not bad, " ".join(sorted(set(bad))[:8]))

def choices(o):
    m = re.search(r"^  " + o + r" <(\S+)>.*\(one of: (.*?)\)$", helptext, re.M)
    return (m.group(1), m.group(2).split()) if m else (None, [])
hand = "\n".join(text[f] for f in docs if f != "docs/options.md")  # options.md is -help itself
bad = []
for o in ("-mode", "-algo"):
    default, cs = choices(o)
    if not cs:
        bad.append(f"no choices of {o} in rlfuse -help")
    bad += [f"{o} {c} undocumented" for c in cs if c != default and not re.search(o + r"`?\s+`?" + re.escape(c) + r"\b", hand)]
    bad += [f"{o} {c} documented, not in the code" for c in set(re.findall(o + r"\s+`?([a-z_]+)", hand)) if cs and c not in cs]
chk("every -mode and -algo is documented, and every documented one exists", not bad, " ".join(bad[:8]))

table = [l for l in text["docs/models.md"].splitlines() if re.match(r"\| `\w+`", l)]
rows = {re.match(r"\| `(\w+)`", l).group(1): l for l in table}
default, archs = choices("-policy_arch")
src = text["tools/hf_llama.py"]
model_types = ast.literal_eval(re.search(r"^FAMILIES = (\{.*?\})", src, re.M | re.S).group(1))
families = model_types.values()
ggufs = ast.literal_eval(re.search(r"^ARCHS = (\(.*?\))", text["tools/gguf_import.py"], re.M).group(1))
bad = [] if archs else ["no choices of -policy_arch in rlfuse -help"]
bad += [f"-policy_arch {a} not in the table" for a in archs if a not in rows]
bad += [f"table row {r} is no -policy_arch" for r in rows if archs and r not in archs]
bad += [f"{n} (tools/hf_llama.py) not in the table's models" for n in families if not any(re.search(r"\b" + n + r"\b", l.split("|")[2]) for l in table)]
bad += [f"GGUF {g} (tools/gguf_import.py) not in docs/models.md" for g in ggufs if not re.search(r"\b" + g + r"\b", text["docs/models.md"])]
hf = text["docs/huggingface.md"]
bad += [f"model_type {t} not in docs/huggingface.md" for t in model_types if f"`{t}`" not in hf]
bad += [f"{n}ForCausalLM not in docs/huggingface.md" for n in families if f"`{n}ForCausalLM`" not in hf]
bad += [f"--model-type {t} (tools/hf_export.py) not in docs/huggingface.md" for t in model_types if not re.search(r"--model-type [\w|]*\b" + t + r"\b", hf)]
chk("every architecture (-policy_arch) and imported family is in docs/models.md's table and docs/huggingface.md", not bad, "; ".join(bad[:8]))

# every HDF5 attribute the code writes by name is in docs/formats.md
attrs = {a for f in files if f.startswith("src/") and f.endswith(".c") and f in text
         for a in re.findall(r"attr_write_\w+\([^,()]*,\s*\"(\w+)\"", text[f])}
bad = sorted(a for a in attrs if not re.search(r"\b" + a + r"\b", text["docs/formats.md"]))
chk(f"every HDF5 attribute the code writes by name ({len(attrs)}) is in docs/formats.md", attrs and not bad, " ".join(bad[:8]))

layout = re.search(r"## Layout\n+```\n(.*?)```", text["docs/design.md"], re.S)
dirs = sorted({f.split("/")[0] + "/" for f in files if "/" in f and f.split("/")[0] in ("inc", "cuda", "input", "regression", "tools")} |
              {"/".join(f.split("/")[:2]) + "/" for f in files if f.startswith("src/") and f.count("/") == 2})
bad = [d for d in dirs if not layout or not re.search(r"^" + re.escape(d) + r"\s", layout.group(1), re.M)] if layout else ["no Layout block in docs/design.md"]
chk("docs/design.md's Layout has a line for every directory of src/ and the top-level folders", not bad, " ".join(bad[:8]))

tt = text["docs/testing.md"]
progs = {os.path.basename(f)[:-2] for f in files if re.fullmatch(r"regression/test_\w+\.c", f)}
scens = {os.path.basename(f) for f in files if re.fullmatch(r"regression/scenarios/\w+\.sh", f)}
cases = {f.split("/")[2] for f in files if f.startswith("regression/cases/") and f.count("/") >= 3}
bad = [f"bin/{p}" for p in sorted(progs) if not re.search(r"^\| `bin/" + p + r"[` ]", tt, re.M)]
bad += [f"scenarios/{c}" for c in sorted(scens) if f"| `scenarios/{c}` |" not in tt]
bad += [f"case {c}" for c in sorted(cases) if f"| `{c}` |" not in tt]
bad += [f"{n} (no such item)" for n in re.findall(r"^\| `(?:bin/(test_\w+)|scenarios/(\w+\.sh))", tt, re.M) for n in n if n and n not in progs | scens]
chk("docs/testing.md has a row for every test program, scenario and deck regression, and none for another", not bad, " ".join(bad[:8]))

n = len(readme.splitlines())
chk(f"the README has at most 150 lines ({n})", n <= 150)
# a commit hash: a word of 7-12 hex digits with a digit and a letter (CHANGELOG.md may name them)
sha = re.compile(r"(?<![\w./-])(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{7,12}(?![\w-])")
bad = [f"{f}:{i + 1}: {m}" for f in docs for i, line in enumerate(text[f].splitlines()) for m in sha.findall(line)]
chk("no commit hash in the README or docs/*.md (history goes to CHANGELOG.md)", not bad, " ".join(bad[:8]))
bad = [f"{f}:{i + 1}" for f in docs for i, line in enumerate(text[f].splitlines())
       if re.match(r"#+\s.*\b\d{4}-\d{2}-\d{2}\b", line)]
chk("no dated heading in the README or docs/*.md (dated entries go to CHANGELOG.md)", not bad, " ".join(bad[:8]))
bad = [f"{f}:{i + 1}" for f in sorted(text) if f.startswith(("src/", "cuda/"))
       for i, line in enumerate(text[f].splitlines()) if len(line) > 120]
chk(f"every line of src/ and cuda/ has at most 120 characters ({len(bad)} longer)", not bad, " ".join(bad[:8]))
raise SystemExit(fails > 0)
PY
