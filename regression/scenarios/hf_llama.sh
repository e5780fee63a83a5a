# Hugging Face Llama, Mistral, Qwen2 and Qwen3 in and out (tools/hf_import.py,
# tools/hf_export.py, tools/hf_llama.py), against transformers itself
# (installed by make deps into the cache folder, put on PYTHONPATH here, as in
# hf.sh: missing is a failure, not a skip). No rlfuse run: random
# transformers models (tied and untied heads, grouped-query and multi-query
# attention, Qwen2's q/k/v biases, *ForSequenceClassification for the reward
# role) imported and exported again give the same safetensors bits, the same
# from_pretrained state and the same logits; a sharded save, F16 and BF16
# files and a llama3 rope_scaling import exactly; the golden checkpoints of
# regression/ref/llama_golden.py exported and loaded by from_pretrained give back the
# golden outputs; the Qwen3 golden (transformers 4.40 has no Qwen3) exports
# as a Qwen3 config.json and imports back bit for bit; what rlfuse cannot
# compute is refused in one line naming the config.json key.
#
# The checks in detail: Hugging Face Llama, Mistral and Qwen2 directories (random tiny models
# saved with `save_pretrained`, sharded and not) imported and exported bit-exact both ways;
# each configuration rlfuse cannot compute (rope scaling other than llama3, a sliding window
# shorter than the context, a mixture of experts, another activation, `attention_bias`,
# `mlp_bias`, another head size, another model type) and each tensor error refused with one
# line naming the key; the tokenizer: Llama and Qwen2 directories with a `tokenizer.json`
# trained by `tokenizers` (byte-level BPE, `<|im_start|>`/`<|im_end|>`, a ChatML template, EOS
# `<|im_end|>`, generation_config's eos [2, 0]) import with `/tokenizer` holding every token's
# bytes, the special ids, `stop_ids`, the template and the original tokenizer.json (the Qwen2
# one with Qwen2's own regex pre-tokenizer, which `tools/tokenizer.py encode` reproduces
# through that kept file: the original's ids for 3 texts, without `--tokenizer-json`); `-mode
# generate` and a 1-iteration GRPO with the numeric rule from each of a Llama, a Mistral and a
# Qwen2 folder with such a tokenizer take EOS 2 and stop token 0 from it and print so, as
# hf_import printed them (used.deck gives them), a Qwen3 export notes the transformers it needs, a deck's `-gen_eos` wins; exported, `AutoTokenizer` encodes texts
# and the chat template to the original's ids, `pipeline("text-generation")` runs,
# `generate(do_sample=False)` continues the prompts exactly as `-gen_greedy` (a response
# stopping at `<|im_end|>`), and importing the export gives the same `/tokenizer`; a directory
# without `tokenizer.json` imports with one warning line; an `eos_token` that is no token and
# an unreadable `tokenizer.json` are refused in one line (these items skip when tokenizers,
# transformers or jinja2 are missing). About 40 s
. regression/lib.sh
plan 51
d="$RLFUSE_TMP/hf_llama"; mkdir -p $d
HF_PY="${RLFUSE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/rlfuse}/python"
hfpy() { PYTHONPATH="$HF_PY${PYTHONPATH:+:$PYTHONPATH}" TRANSFORMERS_OFFLINE=1 HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1 "$PYTHON" "$@"; }
# make deps installs transformers; a missing one is a failure, not a skip
if ! hfpy -c 'import torch, transformers' 2>$d/import.err; then
  not_ok "transformers is not importable from $HF_PY (run make deps): $(tail -1 $d/import.err)"; finish
fi

# 1. random transformers models (weights perturbed by N(0, 0.3^2): RMSNorm weights away from 1, biases from 0)
hfpy - $d <<'PY' 2>$d/make.err || not_ok "make the transformers models: $(tail -1 $d/make.err)"
import sys, torch
from transformers import (LlamaConfig, LlamaForCausalLM, LlamaForSequenceClassification, MistralConfig, MistralForCausalLM,
                          Qwen2Config, Qwen2ForCausalLM, Qwen2ForSequenceClassification)
d = sys.argv[1]; torch.manual_seed(7)
kw = dict(vocab_size=40, hidden_size=32, intermediate_size=40, num_hidden_layers=2, num_attention_heads=4, max_position_embeddings=32)
models = {
    "llama": LlamaForCausalLM(LlamaConfig(num_key_value_heads=2, tie_word_embeddings=True, rms_norm_eps=1e-6, **kw)),
    "llama_mqa": LlamaForCausalLM(LlamaConfig(num_key_value_heads=1, tie_word_embeddings=False, rope_theta=500000.0, rms_norm_eps=1e-5, **kw)),
    "mistral": MistralForCausalLM(MistralConfig(num_key_value_heads=2, sliding_window=None, **kw)),
    "qwen2": Qwen2ForCausalLM(Qwen2Config(num_key_value_heads=2, tie_word_embeddings=True, rope_theta=1e6, **kw)),
    "qwen2_untied": Qwen2ForCausalLM(Qwen2Config(num_key_value_heads=4, tie_word_embeddings=False, **kw)),
    "llama_rm": LlamaForSequenceClassification(LlamaConfig(num_labels=1, num_key_value_heads=2, **kw)),
    "qwen2_rm": Qwen2ForSequenceClassification(Qwen2Config(num_labels=1, num_key_value_heads=2, **kw)),
}
for name, m in models.items():
    with torch.no_grad():
        for p in m.parameters():
            p.add_(0.3 * torch.randn_like(p))
    m.save_pretrained(f"{d}/{name}")
models["llama_mqa"].save_pretrained(f"{d}/sharded", max_shard_size="40KB")
models["llama"].to(torch.bfloat16).save_pretrained(f"{d}/bf16")
models["llama"].to(torch.float16).save_pretrained(f"{d}/f16")
PY

# 2. round trips: transformers dir -> rlfuse -> dir, for each family and head
rt="llama:policy: llama_mqa:policy: mistral:policy:mistral qwen2:policy: qwen2_untied:policy: llama_rm:reward: qwen2_rm:reward:"
for m in $rt; do
  IFS=: read -r k role mt <<<"$m"
  "$PYTHON" tools/hf_import.py $d/$k $d/$k.h5 $role >$d/imp_$k.log 2>&1 || not_ok "hf_import $k: $(tail -1 $d/imp_$k.log)"
  "$PYTHON" tools/hf_export.py $d/$k.h5 $role $d/rt_$k ${mt:+--model-type $mt} >$d/exp_$k.log 2>&1 || not_ok "hf_export $k: $(tail -1 $d/exp_$k.log)"
done
hfpy - $d "$rt" <<'PY'
import sys, json, h5py, numpy as np, torch, transformers
from safetensors.numpy import load_file
d, rt = sys.argv[1], [m.split(":") for m in sys.argv[2].split()]
torch.manual_seed(0); tok = torch.randint(0, 40, (2, 12))
KEYS = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
        "max_position_embeddings", "rms_norm_eps", "rope_theta", "rope_scaling", "tie_word_embeddings", "hidden_act")
for k, role, _ in rt:
    why, c = [], json.load(open(f"{d}/{k}/config.json"))
    try:
        a, b = load_file(f"{d}/{k}/model.safetensors"), load_file(f"{d}/rt_{k}/model.safetensors")
        if sorted(a) != sorted(b): why.append(f"tensor names differ: {sorted(set(a) ^ set(b))}")
        why += [f"{n} differs" for n in a if n in b and not (a[n].dtype == b[n].dtype and (a[n].view('u4') == b[n].view('u4')).all())]
        with h5py.File(f"{d}/{k}.h5") as f:
            g = f[role]; at = dict(g.attrs)
            want = dict(arch="llama", n_layer=2, n_head=4, n_embd=32, vocab_size=40, n_positions=32, n_kv_head=c["num_key_value_heads"],
                        n_ffn=40, qkv_bias=int(c["model_type"] == "qwen2"), tie_embeddings=int(c["tie_word_embeddings"]),
                        rope_theta=c["rope_theta"], norm_eps=c["rms_norm_eps"], rope_scaling="none",
                        head="lm" if role == "policy" else "scalar")
            why += [f"attribute {n} = {at.get(n)!r}, expected {v!r}" for n, v in want.items() if at.get(n) != v]
            why += [f"/{role}/params/{n} is not the file's" for n in a if n in g["params"] and not (g["params"][n][()].view('u4') == a[n].view('u4')).all()]
        cls = getattr(transformers, c["architectures"][0])
        ma, mb = cls.from_pretrained(f"{d}/{k}").eval(), cls.from_pretrained(f"{d}/rt_{k}").eval()
        if type(mb) is not type(ma): why.append(f"exported as {type(mb).__name__}")
        ca, cb = ma.config.to_dict(), mb.config.to_dict()
        why += [f"config {n}: {ca.get(n)!r} -> {cb.get(n)!r}" for n in KEYS if ca.get(n) != cb.get(n)]
        sa, sb = ma.state_dict(), mb.state_dict()
        why += [f"state {n} differs" for n in sa if n not in sb or not torch.equal(sa[n], sb[n])]
        with torch.no_grad():
            fa = ma.model(tok).last_hidden_state if role == "reward" else ma(tok).logits
            fb = mb.model(tok).last_hidden_state if role == "reward" else mb(tok).logits
        if not torch.equal(fa, fb): why.append(f"outputs differ by {(fa - fb).abs().max().item():.2e}")
    except Exception as e:
        why.append(f"{type(e).__name__}: {e}")
    what = f"round trip {k} ({c['architectures'][0]}, {c['num_key_value_heads']} kv heads, {'tied' if c['tie_word_embeddings'] else 'untied'}) -> /{role} -> Hugging Face: safetensors bits, checkpoint attributes, from_pretrained state and outputs identical"
    print(("ok - " if not why else "not ok - ") + what + ("" if not why else ": " + "; ".join(why[:3])))
PY

# 3. a sharded save, F16 and BF16 files, llama3 rope scaling
"$PYTHON" tools/hf_import.py $d/sharded $d/sharded.h5 policy >$d/imp_sh.log 2>&1 || not_ok "hf_import sharded: $(tail -1 $d/imp_sh.log)"
"$PYTHON" tools/hf_import.py $d/bf16 $d/bf16.h5 policy >$d/imp_bf.log 2>&1 || not_ok "hf_import bf16: $(tail -1 $d/imp_bf.log)"
"$PYTHON" tools/hf_import.py $d/f16 $d/f16.h5 policy >$d/imp_f16.log 2>&1 || not_ok "hf_import f16: $(tail -1 $d/imp_f16.log)"
rm -rf $d/l3; cp -r $d/llama $d/l3
"$PYTHON" - $d/l3/config.json <<'PY'
import sys, json
p = sys.argv[1]; c = json.load(open(p))
c["rope_scaling"] = {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 16, "rope_type": "llama3"}
json.dump(c, open(p, "w"))
PY
"$PYTHON" tools/hf_import.py $d/l3 $d/l3.h5 policy >$d/imp_l3.log 2>&1 || not_ok "hf_import llama3: $(tail -1 $d/imp_l3.log)"
"$PYTHON" tools/hf_export.py $d/l3.h5 policy $d/rt_l3 >$d/exp_l3.log 2>&1 || not_ok "hf_export llama3: $(tail -1 $d/exp_l3.log)"
hfpy - $d <<'PY'
import sys, json, h5py, numpy as np
from safetensors.torch import load_file
d = sys.argv[1]
def params(p, role="policy"):
    with h5py.File(p) as f: return {k: v[()] for k, v in f[role]["params"].items()}
def same(a, b): return sorted(a) == sorted(b) and all(a[k].dtype == b[k].dtype and (a[k].view("u4") == b[k].view("u4")).all() for k in a)
idx = json.load(open(f"{d}/sharded/model.safetensors.index.json"))["weight_map"]
n = len(set(idx.values()))
print(("ok - " if n >= 2 and same(params(f"{d}/sharded.h5"), params(f"{d}/llama_mqa.h5")) else "not ok - ")
      + f"a sharded save (model.safetensors.index.json, {n} shards) imports to the same parameters as the single file")
why = []
for dt in ("bf16", "f16"):
    src = {k: v.float().numpy() for k, v in load_file(f"{d}/{dt}/model.safetensors").items()}
    h = json.loads(open(f"{d}/{dt}/model.safetensors", "rb").read()[8:][:int.from_bytes(open(f"{d}/{dt}/model.safetensors", "rb").read(8), "little")])
    kinds = {v["dtype"] for k, v in h.items() if k != "__metadata__"}
    if kinds != {dt.upper()}: why.append(f"{dt} file holds {kinds}")
    if not same(params(f"{d}/{dt}.h5"), src): why.append(f"{dt} params are not the widened values")
print(("ok - " if not why else "not ok - ") + "F16 and BF16 safetensors import widened exactly to float32 (torch's .float() of each tensor)" + ("" if not why else ": " + "; ".join(why)))
with h5py.File(f"{d}/l3.h5") as f: a = dict(f["policy"].attrs)
got = (a["rope_scaling"], a["rope_factor"], a["rope_low_freq_factor"], a["rope_high_freq_factor"], a["rope_original_max_positions"])
src, back = json.load(open(f"{d}/l3/config.json"))["rope_scaling"], json.load(open(f"{d}/rt_l3/config.json"))["rope_scaling"]
print(("ok - " if got == ("llama3", 8.0, 1.0, 4.0, 16) and back == src and same(params(f"{d}/l3.h5"), params(f"{d}/llama.h5")) else "not ok - ")
      + f"rope_scaling llama3 imports as attributes {got} and exports back as the same config.json entry" + ("" if back == src else f" (got {back})"))
PY

# 4. the golden checkpoints (regression/ref/llama_golden.py, computed by transformers): exported, from_pretrained gives the golden outputs
for g in llama_tied llama_untied mistral qwen2 llama_scalar; do
  role=policy; mt=; [ $g = llama_scalar ] && role=reward; [ $g = mistral ] && mt=mistral
  "$PYTHON" tools/hf_export.py regression/golden/$g.h5 $role $d/golden_$g ${mt:+--model-type $mt} >$d/exp_g.log 2>&1 || not_ok "hf_export golden $g: $(tail -1 $d/exp_g.log)"
done
hfpy - $d <<'PY'
import sys, json, h5py, numpy as np, torch, transformers
d = sys.argv[1]
for g in ("llama_tied", "llama_untied", "mistral", "qwen2", "llama_scalar"):
    try:
        with h5py.File(f"regression/golden/{g}.h5") as f:
            gd = f["golden"]; tok = torch.from_numpy(gd["tokens"][()].astype(np.int64))
            lm = "logits" in gd; ref = gd["logits" if lm else "values"][()]
        c = json.load(open(f"{d}/golden_{g}/config.json"))
        m = getattr(transformers, c["architectures"][0]).from_pretrained(f"{d}/golden_{g}", attn_implementation="eager").eval()
        with torch.no_grad():
            out = m(tok).logits if lm else m.score(m.model(tok).last_hidden_state).squeeze(-1)
        err = float(np.abs(out.numpy() - ref).max() / np.abs(ref).max())
        print(("ok - " if err <= 1e-6 else "not ok - ") + f"golden {g}.h5 exported as {c['architectures'][0]}: from_pretrained gives the golden {'logits' if lm else 'values'} (max relative difference {err:.1e})")
    except Exception as e:
        print(f"not ok - golden {g}.h5 through hf_export and from_pretrained: {type(e).__name__}: {e}")
PY

# 4b. Qwen3, which transformers 4.40 predates: the golden exported as a Qwen3 directory and imported back
"$PYTHON" tools/hf_export.py regression/golden/qwen3.h5 policy $d/qwen3 >$d/exp_q3.log 2>&1 || not_ok "hf_export golden qwen3: $(tail -1 $d/exp_q3.log)"
"$PYTHON" tools/hf_import.py $d/qwen3 $d/qwen3.h5 policy >$d/imp_q3.log 2>&1 || not_ok "hf_import qwen3: $(tail -1 $d/imp_q3.log)"
check "hf_export of a Qwen3 says that the transformers make deps installs cannot load it ($(tail -1 $d/exp_q3.log))" \
  grep -q '^hf_export: note: Qwen3ForCausalLM needs transformers 4.51 or newer to load; the 4.40.2 that make deps installs' $d/exp_q3.log
hfpy - $d <<'PY'
import sys, json, h5py, numpy as np
from safetensors.numpy import load_file
d, why = sys.argv[1], []
c = json.load(open(f"{d}/qwen3/config.json")); t = load_file(f"{d}/qwen3/model.safetensors")
want = dict(model_type="qwen3", architectures=["Qwen3ForCausalLM"], head_dim=12, hidden_size=32, num_attention_heads=4, num_key_value_heads=2,
            attention_bias=False, tie_word_embeddings=False, rope_theta=1e6)
why += [f"config {k} = {c.get(k)!r}" for k, v in want.items() if c.get(k) != v]
with h5py.File("regression/golden/qwen3.h5") as f, h5py.File(f"{d}/qwen3.h5") as g:
    a, b = f["policy"]["params"], g["policy"]["params"]
    why += [f"{k} differs" for k in a if k not in b or not np.array_equal(a[k][()].view(np.uint32), b[k][()].view(np.uint32))]
    why += [f"{k} not exported as it is" for k in a if k not in t or not np.array_equal(a[k][()].view(np.uint32), t[k].view(np.uint32))]
    at = dict(g["policy"].attrs)
    why += [f"attribute {k} = {at.get(k)!r}" for k, v in dict(head_dim=12, qk_norm=1, qkv_bias=0, n_embd=32).items() if at.get(k) != v]
ok = not why and t["model.layers.1.self_attn.q_proj.weight"].shape == (48, 32) and t["model.layers.0.self_attn.q_norm.weight"].shape == (12,)
print(("ok - " if ok else "not ok - ") + "golden qwen3.h5 -> Qwen3ForCausalLM directory (head_dim 12: q_proj [48, 32], q_norm/k_norm [12]) -> rlfuse: "
      "the same tensors bit for bit, attributes head_dim 12 and qk_norm 1" + ("" if ok else ": " + "; ".join(why[:3])))
PY

# 5. what rlfuse cannot compute: one line naming the key, exit 1, no output file
bad() {  # what, role, source dir, edit (python on config c and tensors t), expected message part
  local what=$1 role=$2 src=$3 edit=$4 want=$5 o=$d/bad.h5
  rm -rf $d/badhf; cp -r $d/$src $d/badhf
  hfpy - $d/badhf "$edit" <<'PY' || { not_ok "$what: could not make the input"; return; }
import sys, json
from safetensors.numpy import load_file, save_file
p = sys.argv[1]; c = json.load(open(f"{p}/config.json")); t = load_file(f"{p}/model.safetensors")
exec(sys.argv[2])
json.dump(c, open(f"{p}/config.json", "w")); save_file(t, f"{p}/model.safetensors", metadata={"format": "pt"})
PY
  "$PYTHON" tools/hf_import.py $d/badhf $o $role >$d/bad.out 2>&1; local rc=$?
  if [ $rc -eq 1 ] && [ "$(wc -l <$d/bad.out)" -eq 1 ] && grep -q -- "^hf_import: error: .*$want" $d/bad.out && [ ! -e $o ] && ! ls $d/bad.h5.tmp.* >/dev/null 2>&1; then
    ok "$what refused: $(cat $d/bad.out)"
  else not_ok "$what: rc $rc, $(head -2 $d/bad.out)"; fi
}
L=model.layers.0.self_attn
bad "linear rope scaling" policy llama 'c["rope_scaling"] = {"type": "linear", "factor": 2.0}' "rope_scaling = "
bad "a Mistral sliding window below the context" policy mistral 'c["sliding_window"] = 16' "sliding_window = 16"
bad "a mixture of experts (num_local_experts)" policy llama 'c["num_local_experts"] = 8' "num_local_experts = 8"
bad "a mixture of experts (num_experts)" policy qwen2 'c["num_experts"] = 4' "num_experts = 4"
bad "another activation" policy llama 'c["hidden_act"] = "gelu"' "hidden_act = \"gelu\""
bad "attention_bias on Llama" policy llama "c['attention_bias'] = True; t['$L.o_proj.bias'] = t['$L.q_proj.weight'][:, 0].copy()" "attention_bias = true"
bad "a head_dim other than hidden_size / num_attention_heads" policy llama 'c["head_dim"] = 16' "head_dim = 16"
bad "Qwen2 with use_sliding_window" policy qwen2 'c["use_sliding_window"] = True; c["sliding_window"] = 16' "use_sliding_window = true"
bad "MLP biases" policy llama 'c["mlp_bias"] = True' "mlp_bias = true"
bad "Qwen3 with sliding-window layers" policy qwen3 'c["layer_types"] = ["sliding_attention", "full_attention"]' "layer_types holds"
bad "attention_bias on Qwen3" policy qwen3 'c["attention_bias"] = True' "attention_bias = true"
bad "another model_type" policy mistral 'c["model_type"] = "mixtral"; c["architectures"] = ["MixtralForCausalLM"]' "model_type 'mixtral'"
bad "a tensor rlfuse has no place for" policy llama_mqa "t['$L.o_proj.bias'] = t['$L.q_proj.weight'][:, 0].copy()" "$L.o_proj.bias is not part of"
bad "an lm_head differing from the tied embedding" policy llama 't["lm_head.weight"] = t["model.embed_tokens.weight"] + 1' "lm_head.weight differs"
bad "an untied head without lm_head.weight" policy llama_mqa 'del t["lm_head.weight"]' "tensor lm_head.weight missing"
rm -rf $d/mw; cp -r $d/mistral $d/mw
"$PYTHON" -c "import json; p = '$d/mw/config.json'; c = json.load(open(p)); c['sliding_window'] = 32; json.dump(c, open(p, 'w'))"
"$PYTHON" tools/hf_import.py $d/mw $d/mw.h5 policy >$d/mw.log 2>&1
check "a Mistral sliding window as long as max_position_embeddings (32) changes nothing and is accepted ($(cat $d/mw.log))" test -s $d/mw.h5
"$PYTHON" tools/hf_export.py $d/llama.h5 policy $d/badexp --model-type qwen2 >$d/bad.out 2>&1; rc=$?
check "hf_export as Qwen2 of a model without q/k/v biases: one line, exit 1 ($(cat $d/bad.out))" bash -c "[ $rc -eq 1 ] && [ \"\$(wc -l <$d/bad.out)\" -eq 1 ] && grep -q '^hf_export: error: --model-type qwen2' $d/bad.out && [ ! -e $d/badexp ]"
"$PYTHON" - $d <<'PY'
import sys, h5py, shutil
d = sys.argv[1]; shutil.copy(f"{d}/qwen3.h5", f"{d}/hd_only.h5")
with h5py.File(f"{d}/hd_only.h5", "r+") as f:  # its own head_dim without the q/k norms: no Hugging Face family
    g = f["policy"]; g.attrs["qk_norm"] = 0
    for k in [k for k in g["params"] if "_norm." in k and "self_attn" in k]: del g["params"][k]
PY
"$PYTHON" tools/hf_export.py $d/hd_only.h5 policy $d/badexp >$d/bad.out 2>&1; rc=$?
check "hf_export of a head_dim other than hidden_size / heads without q/k norms: one line, exit 1 ($(cat $d/bad.out))" bash -c "[ $rc -eq 1 ] && [ \"\$(wc -l <$d/bad.out)\" -eq 1 ] && grep -q 'head_dim 12 x 4 heads is not hidden_size 32' $d/bad.out && [ ! -e $d/badexp ]"
"$PYTHON" tools/hf_export.py $d/qwen3.h5 policy $d/badexp --model-type llama >$d/bad.out 2>&1; rc=$?
check "hf_export as Llama of a model with q/k norms: one line, exit 1 ($(cat $d/bad.out))" bash -c "[ $rc -eq 1 ] && [ \"\$(wc -l <$d/bad.out)\" -eq 1 ] && grep -q '^hf_export: error: --model-type llama' $d/bad.out && [ ! -e $d/badexp ]"
# 6. the tokenizer: Llama and Qwen2 directories with a tokenizer.json made by tokenizers (a byte-level BPE trained on a few
# sentences, <|im_start|>/<|im_end|> special tokens, a ChatML template, EOS <|im_end|> 2, generation_config's eos [2, 0];
# the Qwen2 one with Qwen2's own pre-tokenizer, a regex split tools/tokenizer.py encodes only through the kept tokenizer.json)
# -> hf_import's /tokenizer -> -mode generate stops at the tokenizer's EOS -> hf_export -> AutoTokenizer, pipeline and generate agree
tokenizer_items=13
if ! hfpy -c 'import tokenizers, transformers, jinja2' 2>$d/tok_import.err; then
  for i in $(seq $tokenizer_items); do skip "tokenizer items: tokenizers/transformers/jinja2 missing ($(tail -1 $d/tok_import.err))"; done
else
hfpy - $d <<'PY' 2>$d/tok_make.err || not_ok "make the tokenizer directories: $(tail -1 $d/tok_make.err)"
import sys, torch
sys.path.insert(0, "tools")
from hf_tokenizer import QWEN2_REGEX
from tokenizers import Tokenizer, Regex, models, trainers, pre_tokenizers, decoders
from transformers import LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM, Qwen2Config, Qwen2ForCausalLM, PreTrainedTokenizerFast, GenerationConfig
d = sys.argv[1]; torch.manual_seed(11)
tk = Tokenizer(models.BPE())
tk.pre_tokenizer, tk.decoder = pre_tokenizers.ByteLevel(add_prefix_space=False), decoders.ByteLevel()
text = ["the cat sat on the mat", "two plus three is five", "what is 12 plus 7? it is 19", "hello world, the answer is 42"] * 4
tk.train_from_iterator(text, trainers.BpeTrainer(vocab_size=300, special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
                                                 initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False))
tmpl = ("{% for m in messages %}{{'<|im_start|>' + m['role'] + '\n' + m['content'] + '<|im_end|>\n'}}{% endfor %}"
        "{% if add_generation_prompt %}{{'<|im_start|>assistant\n'}}{% endif %}")
kw = dict(vocab_size=tk.get_vocab_size() + 4, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
          num_key_value_heads=2, max_position_embeddings=64, bos_token_id=0, eos_token_id=2)
for name, m in (("llama_tok", LlamaForCausalLM(LlamaConfig(tie_word_embeddings=False, **kw))),
                ("mistral_tok", MistralForCausalLM(MistralConfig(tie_word_embeddings=False, sliding_window=None, **kw))),
                ("qwen2_tok", Qwen2ForCausalLM(Qwen2Config(tie_word_embeddings=True, **kw)))):
    with torch.no_grad():
        for p in m.parameters():
            p.add_(0.3 * torch.randn_like(p))
        m.lm_head.weight[2] *= 2  # <|im_end|> likelier: some greedy responses stop at it (one of the three for either model)
    m.save_pretrained(f"{d}/{name}")
    if name == "qwen2_tok":  # Qwen2's pre-tokenizer (each digit apart, its own pattern), not GPT-2's
        tk = Tokenizer.from_str(tk.to_str())
        tk.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(QWEN2_REGEX), behavior="isolated", invert=False),
                                                    pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    PreTrainedTokenizerFast(tokenizer_object=tk, bos_token="<|endoftext|>", eos_token="<|im_end|>", pad_token="<|endoftext|>",
                            chat_template=tmpl).save_pretrained(f"{d}/{name}")
    GenerationConfig(bos_token_id=0, eos_token_id=[2, 0], pad_token_id=0).save_pretrained(f"{d}/{name}")
PY
printf '%s\n' '{"prompt": "what is 12 plus 7?"}' '{"messages": [{"role": "user", "content": "the cat sat"}]}' '{"prompt": "hello world"}' >$d/tok_prompts.jsonl
for k in llama_tok mistral_tok qwen2_tok; do
  "$PYTHON" tools/hf_import.py $d/$k $d/$k.h5 policy >$d/imp_$k.log 2>&1 || not_ok "hf_import $k: $(tail -1 $d/imp_$k.log)"
  "$PYTHON" tools/tokenizer.py $d/$k.h5 prompts $d/tok_prompts.jsonl $d/${k}_p.h5 >$d/tp_$k.log 2>&1 || not_ok "tokenizer.py prompts $k: $(tail -1 $d/tp_$k.log)"
  rlfuse -mode generate -generate_checkpoint $d/$k.h5 -generate_input $d/${k}_p.h5 -generate_output $d/${k}_g.h5 -gen_greedy -gen_max_new_tokens 10 \
    -output_dir $d/gen_$k >$d/gen_$k.log 2>&1 || not_ok "generate $k: $(tail -1 $d/gen_$k.log)"
  "$PYTHON" tools/hf_export.py $d/$k.h5 policy $d/x_$k >$d/xp_$k.log 2>&1 || not_ok "hf_export $k: $(tail -1 $d/xp_$k.log)"
  "$PYTHON" tools/hf_import.py $d/x_$k $d/x_$k.h5 policy >$d/ximp_$k.log 2>&1 || not_ok "hf_import of the export of $k: $(tail -1 $d/ximp_$k.log)"
done
check "generate from the imported Qwen2 takes EOS and the stop tokens from its tokenizer and says so ($(grep '^generation stops' $d/gen_qwen2_tok.log)), as hf_import said ($(grep -o 'EOS [0-9]*, stop tokens [0-9,a-z]*' $d/imp_qwen2_tok.log))" \
  bash -c "grep -q \"^generation stops at EOS 2 and stop tokens 0 (from checkpoint $d/qwen2_tok.h5's /tokenizer)\" $d/gen_qwen2_tok.log && grep -q 'EOS 2, stop tokens 0)' $d/imp_qwen2_tok.log"
hfpy - $d <<'PY'
import sys, h5py, subprocess
from tokenizers import Tokenizer
d = sys.argv[1]
orig = Tokenizer.from_file(f"{d}/qwen2_tok/tokenizer.json")
texts = ["what is 12 plus 7? it is 19", "the cat's 300 mats\n\nsat", "<|im_start|>user\nhello world<|im_end|>\n"]
with h5py.File(f"{d}/qwen2_tok.h5") as f:
    pre, kept = f["tokenizer"].attrs["pre"], "hf_tokenizer_json" in f["tokenizer"]
why = [] if pre == "qwen2" and kept else [f"pre {pre!r}, hf_tokenizer_json kept: {kept}"]
for t in texts:
    got = subprocess.run([sys.executable, "tools/tokenizer.py", f"{d}/qwen2_tok.h5", "encode", t], capture_output=True, text=True)
    want = " ".join(map(str, orig.encode(t, add_special_tokens=False).ids))
    if got.returncode or got.stdout.strip() != want:
        why.append(f"{t!r}: {got.stdout.strip() or got.stderr.strip()}, tokenizers {want}")
print(("ok - " if not why else "not ok - ") + "tools/tokenizer.py encode on the imported Qwen2 (pre-tokenizer qwen2, no --tokenizer-json): the ids of its "
      f"original tokenizer.json, kept in /tokenizer/hf_tokenizer_json, for {len(texts)} texts" + ("" if not why else ": " + "; ".join(why[:2])))
PY
rlfuse -mode generate -generate_checkpoint $d/qwen2_tok.h5 -generate_input $d/qwen2_tok_p.h5 -generate_output $d/deck_g.h5 -gen_greedy -gen_max_new_tokens 4 \
  -gen_eos 5 -output_dir $d/gen_deck >$d/gen_deck.log 2>&1 || not_ok "generate -gen_eos 5: $(tail -1 $d/gen_deck.log)"
check "a deck's -gen_eos wins over the tokenizer's, and the line says so ($(grep '^generation stops' $d/gen_deck.log))" \
  grep -q "^generation stops at EOS 5 and stop tokens none (from the deck's -gen_eos/-gen_stop)" $d/gen_deck.log
printf '%s\n' '{"prompt": "what is 12 plus 7?", "answer": "19"}' '{"prompt": "two plus three", "answer": "5"}' >$d/tok_answers.jsonl
for k in llama_tok mistral_tok qwen2_tok; do  # each family's folder with its tokenizer, to GRPO with a rule reward
  "$PYTHON" tools/tokenizer.py $d/$k.h5 prompts $d/tok_answers.jsonl $d/${k}_answers.h5 >$d/ta_$k.log 2>&1 || not_ok "tokenizer.py prompts with answers ($k): $(tail -1 $d/ta_$k.log)"
  rlfuse -mode ppo -algo grpo -actor_checkpoint $d/$k.h5 -ppo_prompts $d/${k}_answers.h5 -reward_fn numeric -rollout_group 2 -rollout_batch 4 \
    -ppo_minibatches 1 -ppo_iterations 1 -gen_max_new_tokens 8 -output_dir $d/grpo_$k >$d/grpo_$k.log 2>&1 || not_ok "GRPO from the imported $k: $(tail -1 $d/grpo_$k.log)"
  check "GRPO (1 iteration, numeric reward) from the imported $k folder takes EOS 2 and stop token 0 from its tokenizer, and used.deck gives them ($(grep '^generation stops' $d/grpo_$k.log))" \
    bash -c "grep -q \"^generation stops at EOS 2 and stop tokens 0 (from checkpoint $d/$k.h5's /tokenizer)\" $d/grpo_$k.log && grep -q '^iter    1/1' $d/grpo_$k.log && grep -qx -- '-gen_eos 2' $d/grpo_$k/used.deck && grep -qx -- '-gen_stop 0' $d/grpo_$k/used.deck"
done
bad "an eos_token that is no token of tokenizer.json" policy llama_tok \
  'tc = json.load(open(f"{p}/tokenizer_config.json")); tc["eos_token"] = "<|nope|>"; json.dump(tc, open(f"{p}/tokenizer_config.json", "w"))' "eos_token '<|nope|>' is not a token of"
bad "a tokenizer.json tokenizers cannot read" policy llama_tok 'open(f"{p}/tokenizer.json", "w").write("{\"model\": 1}")' "tokenizer.json: not a tokenizer.json that tokenizers reads"
check "a directory without tokenizer.json imports its weights with one warning line ($(grep -c warning $d/imp_llama.log) in imp_llama.log)" \
  bash -c "[ \"\$(grep -c '^hf_import: warning: .*tokenizer.json missing: weights only' $d/imp_llama.log)\" = 1 ] && ! h5ls $d/llama.h5/tokenizer >/dev/null 2>&1"
hfpy - $d <<'PY'
import sys, json, h5py, numpy as np, torch
from transformers import AutoTokenizer, AutoModelForCausalLM, pipeline, logging
from transformers.models.gpt2.tokenization_gpt2 import bytes_to_unicode
logging.set_verbosity_error()
d = sys.argv[1]
TEXTS = ["what is 12 plus 7? it is 19", "the cat sat on the mat", "<|im_start|>user\nhello world<|im_end|>\n", "zebra quux!"]
MSGS = [{"role": "user", "content": "two plus three"}]

def group(p):
    with h5py.File(p) as f:
        g = f["tokenizer"]
        return {k: g[k][()] for k in g}, {k: g.attrs[k] for k in g.attrs}

def same_group(a, b):
    (da, aa), (db, ab) = a, b
    return sorted(da) == sorted(db) and all(np.array_equal(da[k], db[k]) for k in da) and sorted(aa) == sorted(ab) and all(np.array_equal(aa[k], ab[k]) for k in aa)

for k in ("llama_tok", "qwen2_tok"):
    why = []
    try:
        orig = AutoTokenizer.from_pretrained(f"{d}/{k}")
        ds, at = group(f"{d}/{k}.h5")
        tb, off, ty = ds["token_bytes"].tobytes(), ds["token_offsets"], ds["token_type"]
        u2b = {c: b for b, c in bytes_to_unicode().items()}
        for i in range(len(orig)):
            t = orig.convert_ids_to_tokens(i)
            want = t.encode() if i in orig.added_tokens_decoder else bytes(u2b[c] for c in t)
            if tb[off[i]:off[i + 1]] != want:
                why.append(f"token {i} is {tb[off[i]:off[i + 1]]!r}, tokenizer.json's {want!r}"); break
        got = dict(eos_id=int(at["eos_id"]), bos_id=int(at["bos_id"]), pad_id=int(at["pad_id"]), eot_id=int(at["eot_id"]), stop_ids=ds["stop_ids"].tolist(),
                   special=[i for i in range(len(ty)) if ty[i] == 3], template=at["chat_template"] == orig.chat_template, pre=at["pre"], V=len(off) - 1)
        want = dict(eos_id=2, bos_id=0, pad_id=0, eot_id=2, stop_ids=[2, 0], special=[0, 1, 2], template=True, pre="qwen2" if k == "qwen2_tok" else "gpt2", V=len(orig) + 4)
        why += [f"{n} {got[n]!r}, expected {v!r}" for n, v in want.items() if got[n] != v]
        print(("ok - " if not why else "not ok - ") + f"hf_import {k}: /tokenizer holds tokenizer.json's {len(orig)} tokens' bytes (4 padding rows empty), "
              "EOS/BOS/pad, the end-of-turn <|im_end|>, stop_ids [2, 0] and the chat template" + ("" if not why else ": " + "; ".join(why[:3])))
        why = []
        x = AutoTokenizer.from_pretrained(f"{d}/x_{k}")
        for t in TEXTS:
            if x(t)["input_ids"] != orig(t)["input_ids"]:
                why.append(f"{t!r} -> {x(t)['input_ids']}, the original {orig(t)['input_ids']}")
        if x.apply_chat_template(MSGS, add_generation_prompt=True) != orig.apply_chat_template(MSGS, add_generation_prompt=True):
            why.append("apply_chat_template differs")
        gc = json.load(open(f"{d}/x_{k}/generation_config.json"))
        if (x.eos_token, x.bos_token, x.pad_token, gc.get("eos_token_id")) != ("<|im_end|>", "<|endoftext|>", "<|endoftext|>", [2, 0]):
            why.append(f"special tokens {x.eos_token!r} {x.bos_token!r} {x.pad_token!r}, generation_config eos {gc.get('eos_token_id')}")
        if not same_group(group(f"{d}/{k}.h5"), group(f"{d}/x_{k}.h5")):
            why.append("hf_import of the export gives other /tokenizer tables")
        print(("ok - " if not why else "not ok - ") + f"hf_export {k}: AutoTokenizer encodes {len(TEXTS)} texts and the chat template to the original's ids, "
              "EOS <|im_end|> with generation_config eos [2, 0]; re-imported, the same /tokenizer" + ("" if not why else ": " + "; ".join(why[:3])))
        why = []
        m = AutoModelForCausalLM.from_pretrained(f"{d}/x_{k}").eval()
        with h5py.File(f"{d}/{k}_g.h5") as f:
            toks, pl, rl = f["tokens"][()], f["prompt_lengths"][()], f["response_lengths"][()]
        for b in range(len(pl)):
            with torch.no_grad():
                out = m.generate(torch.from_numpy(toks[b:b + 1, :pl[b]].astype(np.int64)), do_sample=False, max_new_tokens=10)[0, pl[b]:].tolist()
            if out != toks[b, pl[b]:pl[b] + rl[b]].tolist():
                why.append(f"prompt {b}: generate {out}, rlfuse {toks[b, pl[b]:pl[b] + rl[b]].tolist()}")
        stopped = int(sum(toks[b, pl[b] + rl[b] - 1] in (0, 2) for b in range(len(pl))))
        if not stopped:
            why.append("no response stopped at <|im_end|> 2 or <|endoftext|> 0")
        text = pipeline("text-generation", model=f"{d}/x_{k}")("the cat sat", max_new_tokens=4, do_sample=False)[0]["generated_text"]
        if not text.startswith("the cat sat"):
            why.append(f"pipeline gave {text!r}")
        print(("ok - " if not why else "not ok - ") + f"{k} exported: generate(do_sample=False) continues the {len(pl)} prompts as rlfuse's -gen_greedy "
              f"(stopping at the same stop tokens: {stopped} stopped); "
              "pipeline('text-generation') runs" + ("" if not why else ": " + "; ".join(why[:3])))
    except Exception as e:  # noqa: BLE001
        print(f"not ok - tokenizer round trip {k}: {type(e).__name__}: {e}")
PY
fi
finish
