"""hf_llama: the LLaMA family's part of tools/hf_import.py and tools/hf_export.py
(hf_gpt2.py holds GPT-2's and the safetensors format): which Hugging Face
configurations of LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM and
Qwen3ForCausalLM (and their *ForSequenceClassification with one label, for
the scalar roles)
rlfuse computes exactly, their checkpoint attributes and tensors (arch
"llama" in docs/formats.md), and the config.json written back.

What rlfuse computes: RMSNorm, rotary positions (rotate-half, optional
"llama3" frequency scaling), grouped-query causal attention without a sliding
window, q/k/v biases (Qwen2) and nothing else biased, Qwen3's per-head q/k
RMSNorm and its own head_dim, a SwiGLU MLP (silu), an LM head tied to the
token embedding or its own lm_head. Everything else is
refused with a one-line HFError naming the config.json key.
"""
import json
import math

from hf_gpt2 import HFError

FAMILIES = {"llama": "Llama", "mistral": "Mistral", "qwen2": "Qwen2", "qwen3": "Qwen3"}
CLASS_SUFFIX = {"lm": "ForCausalLM", "scalar": "ForSequenceClassification"}
# transformers 4.40's class defaults for the keys a hand-written config.json may leave out
# (save_pretrained writes them all): num_key_value_heads None means num_attention_heads
DEFAULTS = {
    "llama": dict(num_key_value_heads=None, max_position_embeddings=2048, sliding_window=None),
    "mistral": dict(num_key_value_heads=8, max_position_embeddings=4096 * 32, sliding_window=4096),
    "qwen2": dict(num_key_value_heads=32, max_position_embeddings=32768, sliding_window=4096),
    # Qwen3Config's (transformers >= 4.51): head_dim 128 unless given
    "qwen3": dict(num_key_value_heads=8, max_position_embeddings=32768, sliding_window=4096, head_dim=128),
}
ROPE_KEYS = ("rope_factor", "rope_low_freq_factor", "rope_high_freq_factor", "rope_original_max_positions")
LLAMA3_KEYS = (("factor", "rope_factor"), ("low_freq_factor", "rope_low_freq_factor"),
               ("high_freq_factor", "rope_high_freq_factor"), ("original_max_position_embeddings", "rope_original_max_positions"))
# transformers' activation names for x * sigmoid(x)
SILU = ("silu", "swish")
MOE_KEYS = ("num_local_experts", "num_experts", "n_routed_experts", "moe_intermediate_size")
# non-persistent buffers that older conversions saved with the weights: not parameters
BUFFERS = (".rotary_emb.inv_freq",)


def arch_name(model_type, head):
    return FAMILIES[model_type] + CLASS_SUFFIX[head]


def is_llama_family(model_type):
    return model_type in FAMILIES


def _pos_int(c, k, where, default=None):
    v = c.get(k, default)
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise HFError(f"{where}: {k} = {json.dumps(v)}, expected a positive integer")
    return v


def _pos_num(v, name, where):
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
        raise HFError(f"{where}: {name} = {json.dumps(v)}, expected a positive number")
    return float(v)


def _rope_scaling(c, where):
    """(rope_scaling, {rope_factor, ...}) of config.json's rope_scaling: null, "default" or "llama3"."""
    rs = c.get("rope_scaling")
    none = ("none", {k: 0.0 for k in ROPE_KEYS[:3]} | {"rope_original_max_positions": 0})
    if rs is None:
        return none
    kind = rs.get("rope_type", rs.get("type")) if isinstance(rs, dict) else None
    if kind == "default" and set(rs) <= {"rope_type", "type"}:  # newer transformers' spelling of no scaling
        return none
    if kind != "llama3":
        raise HFError(f'{where}: rope_scaling = {json.dumps(rs)}, rlfuse computes null or rope_type "llama3" '
                      "(linear, dynamic, yarn and longrope scalings are not implemented)")
    out = {}
    for hk, ck in LLAMA3_KEYS:
        if hk not in rs:
            raise HFError(f"{where}: rope_scaling.{hk} missing (llama3 scaling needs factor, low_freq_factor, "
                          "high_freq_factor and original_max_position_embeddings)")
        out[ck] = _pos_num(rs[hk], f"rope_scaling.{hk}", where)
    if out["rope_original_max_positions"] != int(out["rope_original_max_positions"]):
        raise HFError(f"{where}: rope_scaling.original_max_position_embeddings = {json.dumps(rs['original_max_position_embeddings'])}, "
                      "expected a positive integer")
    out["rope_original_max_positions"] = int(out["rope_original_max_positions"])
    if out["rope_high_freq_factor"] <= out["rope_low_freq_factor"]:
        raise HFError(f"{where}: rope_scaling.high_freq_factor {rs['high_freq_factor']} is not above low_freq_factor "
                      f"{rs['low_freq_factor']} (the llama3 blend divides by their difference)")
    extra = sorted(set(rs) - {"rope_type", "type"} - {hk for hk, _ in LLAMA3_KEYS})
    if extra:
        raise HFError(f"{where}: rope_scaling.{extra[0]} is not part of llama3 scaling; rlfuse would ignore it")
    return "llama3", out


def check_config(c, head, where):
    """The rlfuse attributes (docs/formats.md, arch llama) of a Llama, Mistral or Qwen2 config.json,
    or HFError naming the key rlfuse cannot compute."""
    mt = c.get("model_type")
    arch = c.get("architectures") or [arch_name(mt, head)]
    if arch != [arch_name(mt, head)]:
        raise HFError(f"{where}: architectures {arch}; a {head} role needs {arch_name(mt, head)}"
                      + (" (policy, actor, reference)" if head == "lm" else " with one label (reward, critic)"))
    if c.get("quantization_config") is not None:
        raise HFError(f"{where}: quantization_config is set (a quantized model); rlfuse reads F32, F16 and BF16 weights")
    for k in MOE_KEYS:
        if c.get(k) not in (None, 0):
            raise HFError(f"{where}: {k} = {json.dumps(c[k])}: a mixture of experts, which rlfuse does not run")
    d = DEFAULTS[mt]
    L = _pos_int(c, "num_hidden_layers", where)
    C = _pos_int(c, "hidden_size", where)
    H = _pos_int(c, "num_attention_heads", where)
    kv = c.get("num_key_value_heads", d["num_key_value_heads"])
    kv = H if kv is None else _pos_int({"num_key_value_heads": kv}, "num_key_value_heads", where)
    F = _pos_int(c, "intermediate_size", where)
    V = _pos_int(c, "vocab_size", where)
    P = _pos_int(c, "max_position_embeddings", where, d["max_position_embeddings"])
    if H % kv:
        raise HFError(f"{where}: num_key_value_heads {kv} does not divide num_attention_heads {H}")
    if mt == "qwen3":  # its own head width (the query width n_head x head_dim need not be hidden_size)
        hd = _pos_int(c, "head_dim", where, d["head_dim"])
    else:
        if C % H:
            raise HFError(f"{where}: hidden_size {C} is not divisible by num_attention_heads {H}")
        hd = C // H
        if c.get("head_dim") is not None and c["head_dim"] != hd:
            raise HFError(f"{where}: head_dim = {json.dumps(c['head_dim'])}, rlfuse needs hidden_size / num_attention_heads = {hd} "
                          "for this family (a head width of its own is Qwen3's, model_type qwen3)")
    if hd % 2:
        raise HFError(f"{where}: head size {hd} is odd; rotary embeddings rotate pairs")
    act = c.get("hidden_act", "silu")
    if act not in SILU:
        raise HFError(f'{where}: hidden_act = {json.dumps(act)}, rlfuse needs "silu" (the SwiGLU MLP)')
    if c.get("mlp_bias", False) is not False:
        raise HFError(f"{where}: mlp_bias = {json.dumps(c['mlp_bias'])}, rlfuse needs false (its MLP has no biases)")
    if mt != "qwen2" and c.get("attention_bias", False) is not False:
        raise HFError(f"{where}: attention_bias = {json.dumps(c['attention_bias'])}, rlfuse needs false "
                      "(it would bias o_proj too; q/k/v biases alone are Qwen2's, model_type qwen2)")
    if mt == "qwen3" and c.get("layer_types") is not None and any(t != "full_attention" for t in c["layer_types"]):
        raise HFError(f"{where}: layer_types holds {sorted(set(c['layer_types']) - {'full_attention'})}: rlfuse's attention "
                      "is full attention in every layer")
    prf = c.get("partial_rotary_factor")
    if prf is not None and prf != 1:
        raise HFError(f"{where}: partial_rotary_factor = {json.dumps(prf)}, rlfuse rotates the whole head (1.0)")
    sw = c.get("sliding_window", d["sliding_window"])
    if mt == "mistral" and sw is not None and sw < P:
        raise HFError(f"{where}: sliding_window = {json.dumps(sw)} is below max_position_embeddings {P}: rlfuse's attention "
                      "has no sliding window (null or at least max_position_embeddings needed)")
    if mt in ("qwen2", "qwen3") and c.get("use_sliding_window", False) is not False and sw is not None and sw < P:
        raise HFError(f"{where}: use_sliding_window = {json.dumps(c['use_sliding_window'])} with sliding_window {sw} below "
                      f"max_position_embeddings {P}: rlfuse's attention has no sliding window (false needed)")
    theta = _pos_num(c.get("rope_theta", 10000.0), "rope_theta", where)
    eps = _pos_num(c.get("rms_norm_eps", 1e-6), "rms_norm_eps", where)
    tie = c.get("tie_word_embeddings", False)
    if not isinstance(tie, bool):
        raise HFError(f"{where}: tie_word_embeddings = {json.dumps(tie)}, expected true or false")
    scaling, rope = _rope_scaling(c, where)
    if head == "scalar":
        nl = c.get("num_labels", len(c.get("id2label") or {"0": 0}))
        if nl != 1:
            raise HFError(f"{where}: {nl} labels; a reward or critic model has one (num_labels 1)")
    return {"arch": "llama", "n_layer": L, "n_head": H, "n_embd": C, "vocab_size": V, "n_positions": P,
            "n_kv_head": kv, "n_ffn": F, "qkv_bias": int(mt == "qwen2"), "tie_embeddings": int(tie),
            "rope_theta": theta, "norm_eps": eps, "head_dim": hd, "qk_norm": int(mt == "qwen3"), "rope_scaling": scaling, **rope}


def param_keys(cfg, head):
    """The tensor names of one model in rlfuse's parameter order (src/model/shard.c)."""
    per = ["input_layernorm.weight", "self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
           "self_attn.o_proj.weight", "post_attention_layernorm.weight", "mlp.gate_proj.weight", "mlp.up_proj.weight",
           "mlp.down_proj.weight"]
    if cfg["qkv_bias"]:
        per += ["self_attn.q_proj.bias", "self_attn.k_proj.bias", "self_attn.v_proj.bias"]
    if cfg.get("qk_norm"):
        per += ["self_attn.q_norm.weight", "self_attn.k_norm.weight"]
    keys = ["model.embed_tokens.weight"]
    for l in range(cfg["n_layer"]):
        keys += [f"model.layers.{l}.{k}" for k in per]
    keys.append("model.norm.weight")
    if head == "lm" and not cfg["tie_embeddings"]:
        keys.append("lm_head.weight")
    if head == "scalar":
        keys.append("score.weight")
    return keys


def head_dim(cfg):
    """The width of one attention head (files written before the head_dim attribute: n_embd / n_head)."""
    return int(cfg.get("head_dim") or cfg["n_embd"] // cfg["n_head"])


def param_shape(key, cfg):
    C, V, F, hd = cfg["n_embd"], cfg["vocab_size"], cfg["n_ffn"], head_dim(cfg)
    Q, kv = hd * cfg["n_head"], hd * cfg["n_kv_head"]
    tail = key.split(".", 3)[-1] if key.startswith("model.layers.") else key
    return {"model.embed_tokens.weight": (V, C), "lm_head.weight": (V, C), "score.weight": (1, C),
            "self_attn.q_proj.weight": (Q, C), "self_attn.k_proj.weight": (kv, C), "self_attn.v_proj.weight": (kv, C),
            "self_attn.o_proj.weight": (C, Q), "self_attn.q_proj.bias": (Q,), "self_attn.k_proj.bias": (kv,),
            "self_attn.v_proj.bias": (kv,), "self_attn.q_norm.weight": (hd,), "self_attn.k_norm.weight": (hd,),
            "mlp.gate_proj.weight": (F, C), "mlp.up_proj.weight": (F, C), "mlp.down_proj.weight": (C, F)}.get(tail, (C,))


def model_type_for(cfg, want=None, where="--model-type"):
    """The Hugging Face family to export as: qwen3 for q/k norms, qwen2 for q/k/v biases, llama otherwise
    (mistral on request)."""
    qk = bool(cfg.get("qk_norm"))
    if qk and cfg["qkv_bias"]:
        raise HFError(f"{where}: q/k norms with q/k/v biases is no Hugging Face family (Qwen3 has no biases, Qwen2 no norms)")
    if want is None:
        want = "qwen3" if qk else "qwen2" if cfg["qkv_bias"] else "llama"
        where = f"{where} (default {want})"
    if want not in FAMILIES:
        raise HFError(f"{where} {want}: expected one of {', '.join(FAMILIES)}")
    if (want == "qwen3") != qk:
        raise HFError(f"{where} {want}: " + ("Qwen3 has q/k norms and this model has none" if want == "qwen3"
                                             else f"{FAMILIES[want]} has no q/k norms and this model has them (use qwen3)"))
    if want != "qwen3" and head_dim(cfg) * cfg["n_head"] != cfg["n_embd"]:
        raise HFError(f"{where} {want}: head_dim {head_dim(cfg)} x {cfg['n_head']} heads is not hidden_size {cfg['n_embd']} (only qwen3 allows that)")
    if (want == "qwen2") != bool(cfg["qkv_bias"]):
        raise HFError(f"{where} {want}: " + ("Qwen2 has q/k/v biases and this model has none" if want == "qwen2"
                                             else f"{FAMILIES[want]} has no q/k/v biases and this model has them (use qwen2)"))
    return want


def make_config(cfg, head, model_type, eos=None):
    """config.json for transformers with rlfuse's numerics (no dropout, no sliding window)."""
    c = {"architectures": [arch_name(model_type, head)], "model_type": model_type, "vocab_size": cfg["vocab_size"],
         "hidden_size": cfg["n_embd"], "intermediate_size": cfg["n_ffn"], "num_hidden_layers": cfg["n_layer"],
         "num_attention_heads": cfg["n_head"], "num_key_value_heads": cfg["n_kv_head"], "hidden_act": "silu",
         "max_position_embeddings": cfg["n_positions"], "rms_norm_eps": cfg["norm_eps"], "rope_theta": cfg["rope_theta"],
         "rope_scaling": None, "tie_word_embeddings": bool(cfg["tie_embeddings"]), "attention_dropout": 0.0,
         "initializer_range": 0.02, "use_cache": True, "torch_dtype": "float32", "bos_token_id": None, "eos_token_id": None}
    if cfg["rope_scaling"] == "llama3":
        c["rope_scaling"] = {"rope_type": "llama3", "factor": cfg["rope_factor"], "low_freq_factor": cfg["rope_low_freq_factor"],
                             "high_freq_factor": cfg["rope_high_freq_factor"],
                             "original_max_position_embeddings": cfg["rope_original_max_positions"]}
    if model_type == "llama":
        c.update(attention_bias=False, mlp_bias=False, pretraining_tp=1)
    elif model_type == "mistral":
        c["sliding_window"] = None
    else:
        c.update(use_sliding_window=False, sliding_window=None, max_window_layers=cfg["n_layer"])
    if model_type == "qwen3":
        c.update(head_dim=head_dim(cfg), attention_bias=False)
    if head == "scalar":
        c.update(num_labels=1, id2label={"0": "LABEL_0"}, label2id={"LABEL_0": 0})
    if eos is not None:
        c["eos_token_id"] = eos
    return c
