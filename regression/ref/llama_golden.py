"""llama_golden: writes the golden tensors of the LLaMA family (arch "llama":
Llama, Mistral, Qwen2) that the C model is checked against, computed by
Hugging Face transformers itself (4.40.2, float32, eager attention).

Usage: PYTHONPATH=~/.cache/rlfuse/python /usr/bin/python3 regression/ref/llama_golden.py OUTDIR
       (normally via `make golden`, regression/ref/golden.sh; LLAMA_GOLDEN_ONLY="qwen3.h5 ..." makes only those files)

Writes, in the format of regression/ref/golden.py's files but without the AdamW part:

  llama_tied.h5    /policy  LlamaForCausalLM, 4 heads over 2 kv heads, tied head, rope_theta 1e4, eps 1e-6
  llama_untied.h5  /policy  LlamaForCausalLM, 4 heads over 1 kv head (multi-query), lm_head, rope_theta 5e5, eps 1e-5
  mistral.h5       /policy  MistralForCausalLM, 4 over 2, lm_head, sliding_window null
  qwen2.h5         /policy  Qwen2ForCausalLM, 4 over 2, q/k/v biases, tied head, rope_theta 1e6
  llama_scalar.h5  /reward  LlamaModel + score Linear(C, 1, bias=False) on every token's final hidden state
                            (LlamaForSequenceClassification's score, per token)
  llama3_rope.h5   /policy  LlamaForCausalLM, 2 heads (head size 16) over 1, tied, rope_scaling "llama3"
                            (factor 8, low 1, high 4, original 32: one frequency kept, one blended, six
                            divided). transformers 4.40 predates llama3 scaling, so each layer's
                            rotary_emb.inv_freq is set to what transformers >= 4.43 computes
                            (_compute_llama3_parameters, float32); the rest is transformers' own.
  qwen3.h5         /policy  Qwen3ForCausalLM's computation: 4 heads of head_dim 12 (query width 48,
                            not n_embd 32) over 2, per-head q/k RMSNorm, untied, rope_theta 1e6.
                            transformers 4.40 predates Qwen3 (4.51), so its golden tensors are the
                            independent reference below in float32 (model_class says so), its
                            configuration is a Qwen3 config.json read by tools/hf_llama.py, and
                            its weights are drawn by the same rules in parameter order.

All: n_layer 2, n_embd 32, n_ffn 48, vocab 61, max_position_embeddings 32,
B 3, T 16. Each file is a valid rlfuse checkpoint group /<role> (arch llama,
docs/formats.md) of random weights (matmul weights N(0, 0.15^2), embeddings
and heads N(0, 0.2^2), RMSNorm weights uniform in [0.5, 1.5], q/k/v biases
N(0, 0.1^2)) plus /golden:

  attrs   format="rlfuse-golden", version=1, torch_version, transformers_version,
          made_by, model_class, role, head, B, T, seed, fp64_vs_fp32_maxrel (and
          one per quantity: _output, _loss, _grads), fp32_independent_vs_transformers_maxrel
          (and per quantity)
  tokens int32 [B,T], targets int32 [B,T] (next tokens; the last one random)
  logits float32 [B,T,V] (lm)  |  values, value_targets float32 [B,T] (scalar)
  loss   float32 scalar: lm mean_n -logp(target_n); scalar mean_n (v_n - y_n)^2
  grads/<name>  d loss / d param (a tied embedding: embedding + head)

The float64 repeat. transformers computes RMSNorm, the rotary angles and
the attention softmax in float32 even in a float64 model, so the float64
reference here is an independent functional implementation of the same
model (reference() below: every operation in the parameters' dtype, the
rotary frequencies from theta in float64). It is run in float64 from the
same weights: max|x32 - x64| / max|x64| per tensor (the worst per quantity)
is printed and stored, as the basis for the C test's tolerances. It is run
in float32 too and must agree with transformers to 1e-4 (asserted; measured
~1e-6): that is the fp32_independent_vs_transformers_* number, the size of
the difference between two float32 codes.
"""
import json
import math
import os
import sys

import h5py
import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))  # hf_llama, a user tool
import golden  # noqa: E402  (made_by)
import hf_llama as llama  # noqa: E402

FORMAT, VERSION = "rlfuse-golden", 1
B, T = 3, 16
SIZES = dict(vocab_size=61, hidden_size=32, intermediate_size=48, num_hidden_layers=2, max_position_embeddings=32)
LLAMA3 = dict(factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0, original_max_position_embeddings=32)
# (file, family, role, head, seed, config.json settings); llama3 marks the llama3_rope case
CASES = (
    ("llama_tied.h5", "llama", "policy", "lm", 101,
     dict(num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True, rope_theta=10000.0, rms_norm_eps=1e-6)),
    ("llama_untied.h5", "llama", "policy", "lm", 102,
     dict(num_attention_heads=4, num_key_value_heads=1, tie_word_embeddings=False, rope_theta=500000.0, rms_norm_eps=1e-5)),
    ("mistral.h5", "mistral", "policy", "lm", 103,
     dict(num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=False, rope_theta=10000.0, rms_norm_eps=1e-6,
          sliding_window=None)),
    ("qwen2.h5", "qwen2", "policy", "lm", 104,
     dict(num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True, rope_theta=1000000.0, rms_norm_eps=1e-6,
          use_sliding_window=False, sliding_window=None)),
    ("llama_scalar.h5", "llama", "reward", "scalar", 105,
     dict(num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=False, rope_theta=10000.0, rms_norm_eps=1e-6)),
    ("llama3_rope.h5", "llama", "policy", "lm", 106,
     dict(num_attention_heads=2, num_key_value_heads=1, tie_word_embeddings=True, rope_theta=10000.0, rms_norm_eps=1e-5,
          llama3=True)),
    ("qwen3.h5", "qwen3", "policy", "lm", 107,
     dict(num_attention_heads=4, num_key_value_heads=2, head_dim=12, tie_word_embeddings=False, rope_theta=1000000.0,
          rms_norm_eps=1e-6, use_sliding_window=False, sliding_window=None, attention_bias=False)),
)
# families transformers 4.40 does not have: their golden tensors are the independent reference's
REFERENCE_ONLY = ("qwen3",)
INDEPENDENT_TOL = 1e-4  # the float32 reference against transformers, relative to each tensor's scale


def made_by():
    return golden.made_by("regression/ref/llama_golden.py")


# ---- the rotary frequencies ---------------------------------------------------
def llama3_inv_freq_hf(hd, theta, s):
    """transformers >= 4.43's _compute_default_rope_parameters + _compute_llama3_parameters, in float32 as there."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, hd, 2, dtype=torch.int64).float() / hd))
    factor, lo, hi, old = s["factor"], s["low_freq_factor"], s["high_freq_factor"], s["original_max_position_embeddings"]
    low_freq_wavelen, high_freq_wavelen = old / lo, old / hi
    wavelen = 2 * math.pi / inv_freq
    inv_freq_llama = torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    smooth_factor = (old / wavelen - lo) / (hi - lo)
    smoothed_inv_freq = (1 - smooth_factor) * inv_freq_llama / factor + smooth_factor * inv_freq_llama
    is_medium_freq = ~(wavelen < high_freq_wavelen) * ~(wavelen > low_freq_wavelen)
    return torch.where(is_medium_freq, smoothed_inv_freq, inv_freq_llama)


def inv_freq_exact(hd, theta, s, dtype):
    """The same frequencies computed in dtype (float64 for the float64 reference)."""
    f = 1.0 / (torch.tensor(float(theta), dtype=torch.float64) ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd))
    if s is not None:
        wl = 2 * math.pi / f
        lo_wl, hi_wl = s["original_max_position_embeddings"] / s["low_freq_factor"], s["original_max_position_embeddings"] / s["high_freq_factor"]
        smooth = (s["original_max_position_embeddings"] / wl - s["low_freq_factor"]) / (s["high_freq_factor"] - s["low_freq_factor"])
        f = torch.where(wl > lo_wl, f / s["factor"], torch.where(wl < hi_wl, f, (1 - smooth) * f / s["factor"] + smooth * f))
    return f.to(dtype)


# ---- the independent reference ------------------------------------------------
def reference(p, cfg, head, tok, rope_scaling):
    """Logits [B,T,V] or values [B,T] of the parameter dict p (any dtype, all of it), computed in p's dtype."""
    dt = p["model.embed_tokens.weight"].dtype
    C, H, KV, eps = cfg["n_embd"], cfg["n_head"], cfg["n_kv_head"], cfg["norm_eps"]
    hd = llama.head_dim(cfg)
    Bn, Tn = tok.shape

    def rms(x, w):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w

    def lin(x, k, bias=False):
        y = x @ p[k + ".weight"].t()
        return y + p[k + ".bias"] if bias else y

    def rot(x):  # rotate-half: pairs (i, i + hd/2)
        return torch.cat([-x[..., hd // 2:], x[..., :hd // 2]], dim=-1)

    ang = torch.arange(Tn, dtype=dt)[:, None] * inv_freq_exact(hd, cfg["rope_theta"], rope_scaling, dt)[None, :]
    cos, sin = torch.cat([ang.cos()] * 2, -1), torch.cat([ang.sin()] * 2, -1)
    causal = torch.ones(Tn, Tn, dtype=torch.bool).tril()
    x = p["model.embed_tokens.weight"][tok]
    for l in range(cfg["n_layer"]):
        pre = f"model.layers.{l}."
        h = rms(x, p[pre + "input_layernorm.weight"])
        q = lin(h, pre + "self_attn.q_proj", cfg["qkv_bias"]).view(Bn, Tn, H, hd).transpose(1, 2)
        k = lin(h, pre + "self_attn.k_proj", cfg["qkv_bias"]).view(Bn, Tn, KV, hd).transpose(1, 2)
        v = lin(h, pre + "self_attn.v_proj", cfg["qkv_bias"]).view(Bn, Tn, KV, hd).transpose(1, 2)
        if cfg.get("qk_norm"):  # Qwen3: each head normed over its hd values, before the rotation
            q, k = rms(q, p[pre + "self_attn.q_norm.weight"]), rms(k, p[pre + "self_attn.k_norm.weight"])
        q, k = q * cos + rot(q) * sin, k * cos + rot(k) * sin
        k, v = k.repeat_interleave(H // KV, dim=1), v.repeat_interleave(H // KV, dim=1)  # query head j uses kv head j // (H/KV)
        att = (q @ k.transpose(-1, -2)) / math.sqrt(hd)
        att = torch.softmax(att.masked_fill(~causal, float("-inf")), dim=-1)
        x = x + lin((att @ v).transpose(1, 2).reshape(Bn, Tn, H * hd), pre + "self_attn.o_proj")
        h = rms(x, p[pre + "post_attention_layernorm.weight"])
        g = lin(h, pre + "mlp.gate_proj")
        x = x + lin(g * torch.sigmoid(g) * lin(h, pre + "mlp.up_proj"), pre + "mlp.down_proj")
    h = rms(x, p["model.norm.weight"])
    if head == "lm":
        return h @ p.get("lm_head.weight", p["model.embed_tokens.weight"]).t()
    return (h @ p["score.weight"].t()).squeeze(-1)


def loss_of(out, head, tgt, y):
    if head == "lm":
        return -torch.log_softmax(out, dim=-1).gather(-1, tgt.unsqueeze(-1)).squeeze(-1).mean()
    return ((out - y) ** 2).mean()


# ---- the transformers model ---------------------------------------------------
def build(family, head, seed, settings):
    import transformers

    s = dict(settings)
    use_llama3 = s.pop("llama3", False)
    cls_cfg = getattr(transformers, llama.FAMILIES[family] + "Config")
    kw = dict(SIZES, hidden_act="silu", attn_implementation="eager", **s)
    if head == "scalar":
        kw.update(num_labels=1)  # no pad_token_id: it would make the embedding's row a padding_idx (gradient zeroed)
    config = cls_cfg(**kw)
    torch.manual_seed(seed)
    model = getattr(transformers, llama.arch_name(family, head))(config).eval()
    assert model.config._attn_implementation == "eager", model.config._attn_implementation
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for k, p in model.named_parameters():
            p.copy_(draw_param(k, tuple(p.shape), gen))
    # the checkpoint attributes, read from the model's config.json as tools/hf_import.py reads them
    cfg = llama.check_config(json.loads(config.to_json_string()), head, "golden config")
    rope_scaling = None
    if use_llama3:
        rope_scaling = dict(LLAMA3)
        hd = cfg["n_embd"] // cfg["n_head"]
        f = llama3_inv_freq_hf(hd, cfg["rope_theta"], rope_scaling)
        for layer in model.model.layers:
            assert layer.self_attn.rotary_emb.inv_freq.shape == f.shape
            layer.self_attn.rotary_emb.inv_freq.copy_(f)
        cfg.update(rope_scaling="llama3", rope_factor=LLAMA3["factor"], rope_low_freq_factor=LLAMA3["low_freq_factor"],
                   rope_high_freq_factor=LLAMA3["high_freq_factor"], rope_original_max_positions=LLAMA3["original_max_position_embeddings"])
    names = [k for k, _ in model.named_parameters()]
    assert sorted(names) == sorted(llama.param_keys(cfg, head)), sorted(set(names) ^ set(llama.param_keys(cfg, head)))
    return model, cfg, rope_scaling


def draw_param(k, shape, gen):
    """One parameter's random values (the rules of the module docstring), from gen."""
    if k in ("model.embed_tokens.weight", "lm_head.weight", "score.weight"):
        return torch.randn(shape, generator=gen) * 0.2
    if len(shape) == 2:
        return torch.randn(shape, generator=gen) * 0.15
    if k.endswith("norm.weight"):
        return 0.5 + torch.rand(shape, generator=gen)
    if k.endswith("_proj.bias"):
        return torch.randn(shape, generator=gen) * 0.1
    raise AssertionError(f"unexpected parameter {k}")


def init_params(cfg, head, seed):
    """Random weights by build()'s rules, drawn in parameter order: for a family transformers 4.40 lacks."""
    gen = torch.Generator().manual_seed(seed)
    return {k: draw_param(k, llama.param_shape(k, cfg), gen) for k in llama.param_keys(cfg, head)}


def reference_config(family, head, settings):
    """The checkpoint attributes of a config.json of the family, as tools/hf_import.py reads it."""
    c = dict(SIZES, model_type=family, architectures=[llama.arch_name(family, head)], hidden_act="silu", **settings)
    return llama.check_config(c, head, "golden config")


def hf_forward(model, head, tok):
    if head == "lm":
        return model(tok).logits
    return model.score(model.model(tok).last_hidden_state).squeeze(-1)


def maxrel(a, ref):
    a, ref = np.asarray(a, np.float64), np.asarray(ref, np.float64)
    return float(np.abs(a - ref).max() / max(np.abs(ref).max(), 1e-30))


def run_reference(params, cfg, head, tok, tgt, y, rope_scaling, dtype):
    p = {k: v.detach().clone().to(dtype).requires_grad_(True) for k, v in params.items()}
    out = reference(p, cfg, head, tok, rope_scaling)
    loss = loss_of(out, head, tgt, y.to(dtype))
    loss.backward()
    return out.detach(), loss.detach(), {k: v.grad for k, v in p.items()}


def compare(a, b):
    out, loss, grads = a
    return {"output": maxrel(out, b[0]), "loss": maxrel(loss, b[1]), "grads": max(maxrel(grads[k], b[2][k]) for k in grads)}


def attr_value(v):
    return v if isinstance(v, str) else np.float64(v) if isinstance(v, float) else np.int32(v)


def make_case(outdir, fname, family, role, head, seed, settings):
    import transformers

    if family in REFERENCE_ONLY:
        model, cfg, rope_scaling = None, reference_config(family, head, settings), None
        params = init_params(cfg, head, seed)
        cls = f"{llama.arch_name(family, head)} (independent reference: transformers {transformers.__version__} predates it)"
    else:
        model, cfg, rope_scaling = build(family, head, seed, settings)
        params = {k: p.detach().clone() for k, p in model.named_parameters()}
        cls = model_class(model, head)
    gen = torch.Generator().manual_seed(seed + 1000)
    V = cfg["vocab_size"]
    tok = torch.randint(0, V, (B, T), generator=gen)
    tgt = torch.cat([tok[:, 1:], torch.randint(0, V, (B, 1), generator=gen)], dim=1)
    y = torch.randn(B, T, generator=gen)

    # the golden tensors: transformers in float32 (or the independent reference where it has no such model)
    r64 = run_reference(params, cfg, head, tok, tgt, y, rope_scaling, torch.float64)
    ind = run_reference(params, cfg, head, tok, tgt, y, rope_scaling, torch.float32)
    if model is None:
        r32 = ind
    else:
        model.zero_grad(set_to_none=True)
        out = hf_forward(model, head, tok)
        loss = loss_of(out, head, tgt, y)
        loss.backward()
        r32 = (out.detach(), loss.detach(), {k: p.grad.detach().clone() for k, p in model.named_parameters()})
    assert all(torch.isfinite(g).all() for g in r32[2].values())
    rel, rel_ind = compare(r32, r64), compare(ind, r32)
    assert max(rel_ind.values()) < INDEPENDENT_TOL, f"{fname}: the independent reference differs from transformers: {rel_ind}"
    assert max(rel.values()) < INDEPENDENT_TOL, f"{fname}: float32 transformers differs from the float64 reference: {rel}"

    path = os.path.join(outdir, fname)
    tmp = path + ".tmp"
    try:
        with h5py.File(tmp, "w") as f:
            g = f.create_group(role)
            for k, v in cfg.items():
                g.attrs[k] = attr_value(v)
            g.attrs["head"] = head
            pg = g.create_group("params")
            for k in llama.param_keys(cfg, head):
                pg.create_dataset(k, data=params[k].numpy().astype(np.float32))
            gd = f.create_group("golden")
            gd.attrs["format"] = FORMAT
            gd.attrs["version"] = np.int32(VERSION)
            gd.attrs["torch_version"] = str(torch.__version__)
            gd.attrs["transformers_version"] = str(transformers.__version__)
            gd.attrs["made_by"] = made_by()
            gd.attrs["model_class"] = cls
            gd.attrs["head"] = head
            gd.attrs["role"] = role
            gd.attrs["B"], gd.attrs["T"], gd.attrs["seed"] = np.int32(B), np.int32(T), np.int32(seed)
            gd.attrs["fp64_vs_fp32_maxrel"] = max(rel.values())
            for k, v in rel.items():
                gd.attrs["fp64_vs_fp32_maxrel_" + k] = v
            gd.attrs["fp32_independent_vs_transformers_maxrel"] = max(rel_ind.values())
            for k, v in rel_ind.items():
                gd.attrs["fp32_independent_vs_transformers_maxrel_" + k] = v
            gd.create_dataset("tokens", data=tok.numpy().astype(np.int32))
            gd.create_dataset("targets", data=tgt.numpy().astype(np.int32))
            if head == "lm":
                gd.create_dataset("logits", data=r32[0].numpy().astype(np.float32))
            else:
                gd.create_dataset("values", data=r32[0].numpy().astype(np.float32))
                gd.create_dataset("value_targets", data=y.numpy().astype(np.float32))
            gd.create_dataset("loss", data=np.float32(r32[1].item()))
            gg = gd.create_group("grads")
            for k in llama.param_keys(cfg, head):
                gg.create_dataset(k, data=r32[2][k].numpy().astype(np.float32))
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
    os.replace(tmp, path)
    worst = max(r32[2], key=lambda k: maxrel(r32[2][k], r64[2][k]))
    print(f"{path}: {os.path.getsize(path)} bytes, {cls}, loss {r32[1].item():.6f}")
    print("  fp64 vs fp32, max|x32-x64|/max|x64|: " + ", ".join(f"{k} {v:.2e}" for k, v in rel.items()) + f" (worst grad {worst})")
    print("  independent fp32 vs transformers fp32: " + ", ".join(f"{k} {v:.2e}" for k, v in rel_ind.items()))


def model_class(model, head):
    return type(model).__name__ if head == "lm" else type(model).__name__ + " trunk + score per token"


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__.split("\n\n")[1])
    try:
        import transformers  # noqa: F401
    except ImportError:
        sys.exit("llama_golden: error: transformers is not importable (make deps installs it into ~/.cache/rlfuse/python: put that on PYTHONPATH)")
    outdir = sys.argv[1]
    os.makedirs(outdir, exist_ok=True)
    torch.set_num_threads(1)  # deterministic reductions
    print(f"torch {torch.__version__}, transformers {transformers.__version__}; B={B} T={T} {SIZES}")
    only = os.environ.get("LLAMA_GOLDEN_ONLY", "").split()  # file names to make (default: all)
    for case in CASES:
        if not only or case[0] in only:
            make_case(outdir, *case)


if __name__ == "__main__":
    main()
