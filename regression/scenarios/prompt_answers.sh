# Prompt files with reference answers (RL with verifiable rewards):
# tools/tokenizer.py prompts keeps each JSONL line's "answer" and "metadata"
# as /answer_bytes + /answer_offsets and /metadata_bytes + /metadata_offsets
# (docs/formats.md, "Token datasets"), refuses a file where some lines have
# an answer and others not (one line naming the first without, no output),
# and tools/rg_prompts.py writes GSM8K-style problems with answers from
# reasoning-gym. The tokenizer is a tiny byte-level one made here (special
# tokens, 256 byte tokens, two merges, SmolLM2's chat template) in a
# checkpoint holding only /tokenizer and the policy's vocab_size and
# n_positions, so nothing needs the SmolLM2 model. The built-in arithmetic
# task's questions as text (-mode data -data_text) go through it with
# --suffix. tokenizer.py --tokenizer-json encodes as the checkpoint's own
# BPE. The reasoning-gym checks skip, saying so, when make deps has not
# installed it. About 20 s.
#
# The checks in detail: prompt files with reference answers from `tools/tokenizer.py prompts`
# (answers and metadata round trip; a line without an answer, and other bad values, refused
# with one line naming the line and no file), `-mode data -data_text` (the arithmetic task's
# questions as JSON lines equal to the HDF5 rows' text; refused for the sort task), `--suffix`
# (the same tokens as the suffix written into each prompt, a messages line's last user
# message), and `tools/rg_prompts.py` (reasoning-gym problems with answers, two seeds
# disjoint, `--exclude`, difficulty options, through `tokenizer.py prompts`); `tokenizer.py
# --tokenizer-json` encoding as the checkpoint's own BPE, and a file tokenizers cannot read
# refused in one line; the reasoning-gym checks skip when it is not installed
. regression/lib.sh
N=17; plan $N
d="$RLFUSE_TMP/prompt_answers"; mkdir -p $d
tk() { "$PYTHON" tools/tokenizer.py "$@"; }
C=$d/tok.h5

"$PYTHON" - $C <<'PY' 2>$d/ckpt.err || not_ok "make the tiny tokenizer checkpoint: $(tail -1 $d/ckpt.err)"
import sys, h5py, numpy as np
sys.path.insert(0, "tools")
from tokenizer import SMOLLM2_TEMPLATE
toks = [b"<|endoftext|>", b"<|im_start|>", b"<|im_end|>"] + [bytes([b]) for b in range(256)] + [b" t", b"he"]
off = np.zeros(len(toks) + 1, np.int64); off[1:] = np.cumsum([len(t) for t in toks])
with h5py.File(sys.argv[1], "w") as f:
    g = f.create_group("tokenizer")
    g["token_bytes"] = np.frombuffer(b"".join(toks), np.uint8)
    g["token_offsets"] = off
    g["token_type"] = np.array([3] * 3 + [1] * (len(toks) - 3), np.int32)
    g["merges"] = np.array(["Ġ t", "h e"], dtype=h5py.string_dtype())
    g.attrs.update({"model": "gpt2", "pre": "smollm", "chat_template": SMOLLM2_TEMPLATE,
                    "bos_id": np.int32(1), "eos_id": np.int32(2), "add_bos": np.int32(0)})
    f.create_group("policy").attrs.update({"vocab_size": np.int32(len(toks)), "n_positions": np.int32(512)})
PY

# 1. answers: strings and numbers (a number as its JSON text), non-ASCII kept; the tokens as without them
cat >$d/ans.jsonl <<'EOF'
{"prompt": "What is 3 + 4? Give the final answer as a number.", "answer": 7}
{"prompt": "Half of 7?", "answer": 3.5}
{"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "The capital of France?"}], "answer": "Paris"}

{"prompt": "Write 1/2 as a decimal.", "answer": "0.5", "note": "other keys are ignored"}
{"prompt": "Naïve café: the second word?", "answer": "café"}
{"prompt": "A big number.", "answer": -1.25e3}
EOF
sed 's/, "answer": [^,}]*//' $d/ans.jsonl >$d/plain.jsonl
tk $C prompts $d/ans.jsonl $d/ans.h5 >$d/ans.log 2>&1 || not_ok "tokenizer.py prompts with answers: $(tail -1 $d/ans.log)"
tk $C prompts $d/plain.jsonl $d/plain.h5 >$d/plain.log 2>&1 || not_ok "tokenizer.py prompts without answers: $(tail -1 $d/plain.log)"
py "answers" $d <<'PY'
import sys, h5py, numpy as np
d = sys.argv[1]
want = ["7", "3.5", "Paris", "0.5", "café", "-1.25e3"]
with h5py.File(f"{d}/ans.h5") as f, h5py.File(f"{d}/plain.h5") as p:
    b, off = f["answer_bytes"], f["answer_offsets"]
    got = [b[()].tobytes()[off[i]:off[i + 1]].decode("utf-8") for i in range(len(off) - 1)]
    good = (b.dtype == np.uint8 and b.ndim == 1 and off.dtype == np.int64 and off.shape == (7,) and off[0] == 0
            and off[-1] == b.shape[0] and got == want and "metadata_bytes" not in f and "metadata_offsets" not in f
            and np.array_equal(f["tokens"][()], p["tokens"][()]) and np.array_equal(f["lengths"][()], p["lengths"][()])
            and "answer_bytes" not in p and "answer_offsets" not in p)
print(("ok - " if good else "not ok - ") + f"tokenizer.py prompts: 6 JSONL lines with answers (a blank one skipped) -> /answer_bytes uint8 "
      f"[{b.shape[0]}] and /answer_offsets int64 [7] holding exactly {got} (7 -> '7', 3.5 -> '3.5', -1.25e3 as written); "
      f"/tokens and /lengths as the same lines without answers; no /metadata_* and, without answers, no /answer_*")
PY

# 2. a missing answer on line 3: one line naming it, exit 1, nothing written; 3. other bad answers and metadata
printf '%s\n' '{"prompt": "1 + 1?", "answer": "2"}' '{"prompt": "2 + 2?", "answer": 4}' '{"prompt": "3 + 3?"}' \
  '{"prompt": "4 + 4?", "answer": "8"}' >$d/missing.jsonl
refusal() {  # FILE PATTERN: tokenizer.py prompts must exit 1 with one line matching PATTERN and leave no file
  local out rc; out=$(tk $C prompts $1 $d/refused.h5 2>&1); rc=$?
  [ $rc -eq 1 ] && [ "$(echo "$out" | wc -l)" -eq 1 ] && [ ! -e $d/refused.h5 ] && ! ls $d/refused.h5.tmp.* >/dev/null 2>&1 &&
    echo "$out" | grep -q "^tokenizer: error: $2" && echo "${out#*error: $d/}"
}
m=$(refusal $d/missing.jsonl ".*missing.jsonl:3: no \"answer\"") &&
  ok "a JSONL whose line 3 has no answer (lines 1, 2 and 4 have): exit 1, one line naming line 3, no output file ('$m')" ||
  not_ok "missing answer on line 3: $(tk $C prompts $d/missing.jsonl $d/refused.h5 2>&1 | head -2); files left: $(cd $d && echo refused.h5*)"
i=0; msgs=""; bad=""
for x in '{"prompt": "x", "answer": true}|"answer" must be a string or a number, got true' \
         '{"prompt": "x", "answer": null}|got null' '{"prompt": "x", "answer": [1]}|got an array' \
         '{"prompt": "x", "answer": NaN}|finite number, got NaN' '{"prompt": "x", "answer": "  "}|empty "answer"' \
         '{"prompt": "x", "metadata": {"a": Infinity}}|"metadata" holds NaN or Infinity'; do
  i=$((i + 1)); printf '{"prompt": "fine", "answer": "1"}\n%s\n' "${x%%|*}" >$d/bad$i.jsonl
  [ $i = 6 ] && printf '{"prompt": "fine"}\n%s\n' "${x%%|*}" >$d/bad$i.jsonl
  m=$(refusal $d/bad$i.jsonl ".*bad$i.jsonl:2: .*${x#*|}") && msgs="$msgs; ${m#*: }" || bad="$bad ${x%%|*}"
done
[ -z "$bad" ] && ok "refused in one line naming line 2, nothing written: an answer true, null, a list, NaN, blank; metadata with Infinity (${msgs#; })" ||
  not_ok "bad answers not refused as expected:$bad"

# 4. metadata round trip: compact JSON text per row, empty where a line has none
cat >$d/meta.jsonl <<'EOF'
{"prompt": "One?", "answer": "1", "metadata": {"task": "count", "level": 2, "tags": ["a", "ü"], "w": 0.25, "x": null}}
{"prompt": "Two?", "answer": "2"}
{"prompt": "Three?", "answer": "3", "metadata": "just a string"}
{"prompt": "Four?", "answer": "4", "metadata": [1, {"b": false}]}
EOF
tk $C prompts $d/meta.jsonl $d/meta.h5 >$d/meta.log 2>&1 || not_ok "tokenizer.py prompts with metadata: $(tail -1 $d/meta.log)"
py "metadata" $d <<'PY'
import sys, json, h5py, numpy as np
d = sys.argv[1]
lines = [json.loads(l) for l in open(f"{d}/meta.jsonl") if l.strip()]
with h5py.File(f"{d}/meta.h5") as f:
    b, off = f["metadata_bytes"][()].tobytes(), f["metadata_offsets"][()]
    text = [b[off[i]:off[i + 1]].decode("utf-8") for i in range(len(off) - 1)]
    good = (f["metadata_bytes"].dtype == np.uint8 and off.dtype == np.int64 and off.shape == (5,) and off[-1] == len(b)
            and text[1] == "" and all(json.loads(t) == x["metadata"] for t, x in zip(text, lines) if "metadata" in x)
            and text[0] == json.dumps(lines[0]["metadata"], separators=(",", ":"), ensure_ascii=False)
            and f["answer_bytes"][()].tobytes() == b"1234")
print(("ok - " if good else "not ok - ") + f"metadata round trip: /metadata_bytes + /metadata_offsets [5] hold each line's value as compact JSON "
      f"(an object with non-ASCII, a string, a list) that json.loads gives back, an empty text for the line without: {text[:2]}")
PY

# 5. responses still works on a generation file, and passes answers and metadata through where it holds them
py "responses" $C $d <<'PY'
import sys, json, subprocess, h5py, numpy as np
c, d = sys.argv[1:3]
with h5py.File(f"{d}/meta.h5") as f:
    P, L, texts = f["tokens"][()], f["lengths"][()], {k: f[k][()] for k in f if k.startswith(("answer_", "metadata_"))}
B, R = len(L), 3
out = {}
for with_texts in (False, True):
    g = f"{d}/gen{int(with_texts)}.h5"
    with h5py.File(g, "w") as f:
        t = np.zeros((B, P.shape[1] + R), np.int32); t[:, :P.shape[1]] = P
        for b in range(B):
            t[b, L[b]:L[b] + R] = [3 + ord("o"), 3 + ord("k"), 2]  # "ok" then <|im_end|>
        f["tokens"], f["lengths"], f["prompt_lengths"] = t, L + R, L
        f["response_lengths"], f["stopped"] = np.full(B, R, np.int32), np.ones(B, np.int8)
        f["logprobs"] = np.full(t.shape, -0.25, np.float32)
        for k, v in (texts.items() if with_texts else ()):
            f[k] = v
    r = subprocess.run([sys.executable, "tools/tokenizer.py", c, "responses", g, f"{g}.jsonl"], capture_output=True, text=True)
    out[with_texts] = [json.loads(l) for l in open(f"{g}.jsonl")] if r.returncode == 0 else r.stderr.strip()
keys = {"prompt", "response", "stopped", "response_tokens", "logprob"}
plain, rich = out[False], out[True]
good = (isinstance(plain, list) and isinstance(rich, list) and len(plain) == len(rich) == 4
        and all(set(x) == keys and x["response"] == "ok" and x["stopped"] and x["logprob"] == -0.75 for x in plain)
        and [x["answer"] for x in rich] == ["1", "2", "3", "4"] and "metadata" not in rich[1]
        and rich[0]["metadata"]["tags"] == ["a", "ü"] and rich[2]["metadata"] == "just a string")
print(("ok - " if good else "not ok - ") + "tokenizer.py responses: a generation file -> JSONL with the same keys as before "
      f"({', '.join(sorted(keys))}); one holding /answer_* and /metadata_* adds each row's answer and parsed metadata"
      + ("" if good else f": {str(plain)[:200]} | {str(rich)[:200]}"))
PY

# 6-7. the arithmetic task's questions as text: -data_text's lines are the HDF5 rows' characters
rlfuse -mode data -task arith -arith_words -arith_ops +-* -data_split eval -data_count 50 -data_output $d/words.h5 \
  -data_text $d/words.jsonl >$d/words.log 2>&1 || not_ok "-mode data -data_text: $(tail -1 $d/words.log)"
py "-data_text" $d <<'PY'
import sys, json, h5py
d = sys.argv[1]
V = [""] * 4 + list("0123456789+-*=?., ") + [chr(c) for c in range(97, 123)]
lines = [json.loads(l) for l in open(f"{d}/words.jsonl")]
with h5py.File(f"{d}/words.h5") as f:
    t, P, L = f["tokens"][()], f["prompt_lengths"][()], f["lengths"][()]
    rows = [("".join(V[i] for i in t[b, 1:P[b] - 1]), "".join(V[i] for i in t[b, P[b]:L[b] - 1])) for b in range(len(L))]
meta = {"task": "arith", "split": "eval", "arith_seed": 2024, "ops": "+-*", "max_operand": 20, "words": True}
good = (len(lines) == len(rows) == 50 and [(x["prompt"], x["answer"]) for x in lines] == rows
        and all(x["metadata"] == {**meta, "index": i} for i, x in enumerate(lines)) and all(" how many" in q for q, _ in rows))
print(("ok - " if good else "not ok - ") + f"-mode data -data_text: 50 JSON lines whose prompt and answer are the HDF5 rows' question and "
      f"demonstration as text, metadata split/index/options, e.g. {lines[0]['prompt']!r} -> {lines[0]['answer']!r}")
PY
# -data_text alone: the same lines, and no HDF5 file of the task's token ids
rlfuse -mode data -task arith -arith_words -arith_ops +-* -data_split eval -data_count 50 -data_text $d/words_only.jsonl -output_dir $d/only \
  >$d/words_only.log 2>&1 || not_ok "-mode data with -data_text alone: $(tail -1 $d/words_only.log)"
cmp -s $d/words.jsonl $d/words_only.jsonl && [ -z "$(ls $d/only 2>/dev/null | grep '\.h5$' | grep -v run.h5)" ] && grep -q "only the questions and answers of 50 eval samples" $d/words_only.log &&
  ok "-data_text without -data_output: the same 50 lines, no token file" || not_ok "-data_text alone: $(cat $d/words_only.log)"
expect_error "-mode data with neither output" "-mode data needs -data_output FILE .* or -data_text FILE" -mode data -task arith -data_count 2 -output_dir $d/neither
out=$("$MPIEXEC" $MPIEXEC_FLAGS -n 1 "$BIN/rlfuse" -mode data -data_output $d/sort.h5 -data_text $d/sort.jsonl 2>&1); rc=$?
[ $rc -ne 0 ] && [ "$(echo "$out" | wc -l)" -eq 1 ] && echo "$out" | grep -q "^rlfuse: error: -data_text $d/sort.jsonl: the sort task's prompts are not text" &&
  [ ! -e $d/sort.h5 ] && [ ! -e $d/sort.jsonl ] && ok "-data_text with the sort task: one line, exit $rc, nothing written" ||
  not_ok "-data_text with the sort task: exit $rc, $out"

# 8. --suffix: the same tokens as the suffix written into each prompt (a {"messages"} line: its last user message)
S="Answer with just the number."
"$PYTHON" - $d "$S" <<'PY'
import sys, json
d, s = sys.argv[1:3]
lines = [json.loads(l) for l in open(f"{d}/words.jsonl")][:5]
lines.append({"messages": [{"role": "user", "content": "Hi."}, {"role": "assistant", "content": "Hello."}, {"role": "user", "content": "2 + 2?"}], "answer": "4"})
with open(f"{d}/sfx.jsonl", "w") as a, open(f"{d}/sfx_in.jsonl", "w") as b:
    for x in lines:
        a.write(json.dumps(x) + "\n")
        if "prompt" in x:
            x = {**x, "prompt": x["prompt"] + " " + s}
        else:
            x = {**x, "messages": x["messages"][:2] + [{"role": "user", "content": "2 + 2? " + s}]}
        b.write(json.dumps(x) + "\n")
PY
tk $C prompts $d/sfx.jsonl $d/sfx.h5 --suffix "$S" >$d/sfx.log 2>&1 && tk $C prompts $d/sfx_in.jsonl $d/sfx_in.h5 >>$d/sfx.log 2>&1 ||
  not_ok "tokenizer.py prompts --suffix: $(tail -1 $d/sfx.log)"
py "--suffix" $d <<'PY'
import sys, h5py, numpy as np
d = sys.argv[1]
with h5py.File(f"{d}/sfx.h5") as a, h5py.File(f"{d}/sfx_in.h5") as b, h5py.File(f"{d}/words.h5") as w:
    good = all(np.array_equal(a[k][()], b[k][()]) for k in ("tokens", "lengths", "answer_bytes", "answer_offsets")) and a["tokens"].shape[0] == 6
print(("ok - " if good else "not ok - ") + "tokenizer.py prompts --suffix TEXT: the same tokens and answers as the prompts with ' TEXT' "
      "written in (a messages line: its last user message)")
PY

# 9-13. tools/rg_prompts.py (reasoning-gym)
rg() { "$PYTHON" tools/rg_prompts.py "$@"; }
if ! rg --list >$d/rg_list.txt 2>$d/rg_list.err; then
  why="reasoning-gym is not installed in ${RLFUSE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/rlfuse}/python (make deps installs it)"
  for w in "N lines with answers" "two seeds differ" "--exclude gives a disjoint held-out set" "basic_arithmetic with difficulty options" \
           "output through tokenizer.py prompts"; do skip "rg_prompts.py $w: $why"; done; finish
fi
rg $d/rg1.jsonl --n 40 --seed 1 >$d/rg1.log 2>&1 || not_ok "rg_prompts.py --seed 1: $(tail -1 $d/rg1.log)"
rg $d/rg2.jsonl --n 40 --seed 2 >$d/rg2.log 2>&1 || not_ok "rg_prompts.py --seed 2: $(tail -1 $d/rg2.log)"
py "rg_prompts" $d <<'PY'
import sys, json
d = sys.argv[1]
a, b = ([json.loads(l) for l in open(f"{d}/rg{s}.jsonl")] for s in (1, 2))
good = (len(a) == len(b) == 40 and all(isinstance(x["prompt"], str) and x["prompt"].strip() and isinstance(x["answer"], str)
                                        and x["answer"].strip() and x["metadata"]["task"] == "gsm_symbolic"
                                        and x["metadata"]["source"] == "reasoning-gym" for x in a + b)
        and len({x["prompt"] for x in a}) == 40 and all(float(x["answer"]) == x["metadata"]["rg"]["answer_value"] for x in a))
print(("ok - " if good else "not ok - ") + f"rg_prompts.py --n 40: 40 lines of distinct gsm_symbolic problems, each with its answer "
      f"(= reasoning-gym's answer_value) and metadata task/source, e.g. {a[0]['answer']!r} for {a[0]['prompt'][:70]!r}...")
pa, pb = {x["prompt"] for x in a}, {x["prompt"] for x in b}
print(("ok - " if not pa & pb else "not ok - ") + f"rg_prompts.py --seed 1 and --seed 2: different problems ({len(pa & pb)} of 40 shared)")
PY
o="--task basic_arithmetic --n 40 --digits 1-1 --terms 2-2"
rg $d/tr.jsonl $o --seed 1 >$d/tr.log 2>&1 && rg $d/ho.jsonl $o --seed 2 --exclude $d/tr.jsonl >$d/ho.log 2>&1 &&
  rg $d/ho_any.jsonl $o --seed 2 >$d/ho_any.log 2>&1 || not_ok "rg_prompts.py basic_arithmetic: $(tail -1 $d/tr.log $d/ho.log $d/ho_any.log)"
py "rg_prompts --exclude" $d <<'PY'
import sys, json
d = sys.argv[1]
tr, ho, any_ = ([json.loads(l) for l in open(f"{d}/{n}.jsonl")] for n in ("tr", "ho", "ho_any"))
p = lambda rs: {x["prompt"] for x in rs}  # noqa: E731
good = len(tr) == len(ho) == 40 and not p(tr) & p(ho) and len(p(ho)) == 40
print(("ok - " if good else "not ok - ") + f"rg_prompts.py --exclude train.jsonl: a held-out set of 40 sharing no problem with the training set "
      f"(two single-digit terms, where seed 2 alone shares {len(p(tr) & p(any_))})")
ok = all(x["prompt"].startswith("Calculate ") and x["metadata"]["rg"]["num_terms"] == 2 and x["metadata"]["rg"]["num_digits"] == 1
         and x["metadata"]["config"] == {"min_digits": 1, "max_digits": 1, "min_terms": 2, "max_terms": 2}
         and str(eval(x["metadata"]["rg"]["expression"].replace("/", "//"))) == x["answer"] for x in tr)
print(("ok - " if ok else "not ok - ") + f"rg_prompts.py --task basic_arithmetic --digits 1-1 --terms 2-2: 2 terms of 1 digit, "
      f"answers = the expression's value, e.g. {tr[0]['prompt']!r} -> {tr[0]['answer']!r}")
PY
rg $d/rgs.jsonl --n 5 --seed 7 --suffix "Give the final answer as a number." >$d/rgs.log 2>&1 || not_ok "rg_prompts.py --suffix: $(tail -1 $d/rgs.log)"
tk $C prompts $d/rgs.jsonl $d/rgs.h5 >$d/rgs_tk.log 2>&1 || not_ok "tokenizer.py prompts on rg_prompts.py's output: $(tail -1 $d/rgs_tk.log)"
py "rg_prompts -> prompts" $d <<'PY'
import sys, json, h5py
d = sys.argv[1]
lines = [json.loads(l) for l in open(f"{d}/rgs.jsonl")]
with h5py.File(f"{d}/rgs.h5") as f:
    ab, ao = f["answer_bytes"][()].tobytes(), f["answer_offsets"][()]
    mb, mo = f["metadata_bytes"][()].tobytes(), f["metadata_offsets"][()]
    n = f["tokens"].shape[0]
good = (n == 5 and [ab[ao[i]:ao[i + 1]].decode() for i in range(n)] == [x["answer"] for x in lines]
        and [json.loads(mb[mo[i]:mo[i + 1]]) for i in range(n)] == [x["metadata"] for x in lines]
        and all(x["prompt"].endswith(" Give the final answer as a number.") for x in lines))
print(("ok - " if good else "not ok - ") + "rg_prompts.py --suffix ... -> tokenizer.py prompts: 5 rows whose /answer_* and /metadata_* "
      "are the JSONL's answers and metadata")
PY

# tools/tokenizer.py --tokenizer-json: a model's own tokenizer.json (here the one tokenizers builds from the
# checkpoint, saved) encodes as the checkpoint does; a file tokenizers cannot read is refused in one line
"$PYTHON" -c 'import sys; sys.path.insert(0, "tools"); from tokenizer import Tokenizer; Tokenizer.from_checkpoint(sys.argv[1]).hf_tokenizer().save(sys.argv[2])' \
  $C $d/tokenizer.json 2>$d/tj.err || not_ok "save a tokenizer.json: $(tail -1 $d/tj.err)"
text="the heat <|im_end|> 123 he"
a=$(tk $C encode "$text" 2>&1); b=$(tk $C --tokenizer-json $d/tokenizer.json encode "$text" 2>&1)
check "tokenizer.py --tokenizer-json FILE encode: the ids of the checkpoint's own BPE ($b)" test -n "$a" -a "$a" = "$b"
echo '{"not": "a tokenizer"}' >$d/bad_tokenizer.json
out=$(tk $C --tokenizer-json $d/bad_tokenizer.json encode "$text" 2>&1); rc=$?
check "tokenizer.py --tokenizer-json with a file tokenizers cannot read: exit 1, one line naming it ($out)" \
  bash -c "[ $rc -eq 1 ] && [ \$(echo \"\$1\" | wc -l) -eq 1 ] && echo \"\$1\" | grep -q '^tokenizer: error: .*bad_tokenizer.json: not a tokenizer.json'" _ "$out"
finish
