# The documents say what the code does: the repository cites nothing outside
# itself (no SYSTEM.md, no issue numbers), relative links resolve, the
# README's quickstart has the deck's PPO iteration count, and its example
# commands name files the pipeline writes, with a role those files hold.
. regression/lib.sh
plan 4
"$PYTHON" - <<'PY'
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
raise SystemExit(fails > 0)
PY
