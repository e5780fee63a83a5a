"""hf_gpt2: what tools/hf_import.py and tools/hf_export.py share: the
safetensors file format (read and written here with numpy alone, so the tools
need neither torch nor transformers), the rlfuse checkpoint layout of one
role (docs/formats.md) and the checks that a Hugging Face GPT-2 configuration
is one rlfuse computes exactly (docs/huggingface.md).
"""
import json
import os
import struct
import sys

import numpy as np

LM_ROLES = ("policy", "actor", "reference")
SCALAR_ROLES = ("reward", "critic")
ARCH = {"lm": "GPT2LMHeadModel", "scalar": "GPT2ForSequenceClassification"}
# GELU with the tanh approximation under both of the names transformers gives it
GELU_TANH = ("gelu_new", "gelu_pytorch_tanh")
DTYPES = {"F32": np.dtype("<f4"), "F16": np.dtype("<f2"), "BF16": None}


class HFError(Exception):
    """A one-line reason the conversion cannot be done."""


def fail(tool, msg):
    print(f"{tool}: error: {msg}", file=sys.stderr)
    sys.exit(1)


def head_of_role(role):
    if role in LM_ROLES:
        return "lm"
    if role in SCALAR_ROLES:
        return "scalar"
    raise HFError(f"role '{role}' is not one of {', '.join(LM_ROLES + SCALAR_ROLES)}")


def param_keys(n_layer, head):
    """The tensor names of one model, in rlfuse's parameter order (docs/formats.md)."""
    keys = ["transformer.wte.weight", "transformer.wpe.weight"]
    for l in range(n_layer):
        p = f"transformer.h.{l}."
        keys += [p + k for k in ("ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias", "attn.c_proj.weight",
                                 "attn.c_proj.bias", "ln_2.weight", "ln_2.bias", "mlp.c_fc.weight", "mlp.c_fc.bias",
                                 "mlp.c_proj.weight", "mlp.c_proj.bias")]
    keys += ["transformer.ln_f.weight", "transformer.ln_f.bias"]
    if head == "scalar":
        keys.append("score.weight")
    return keys


def param_shape(key, cfg):
    C, V, P = cfg["n_embd"], cfg["vocab_size"], cfg["n_positions"]
    tail = key.split(".", 3)[-1] if key.startswith("transformer.h.") else key
    return {"transformer.wte.weight": (V, C), "transformer.wpe.weight": (P, C), "attn.c_attn.weight": (C, 3 * C),
            "attn.c_attn.bias": (3 * C,), "attn.c_proj.weight": (C, C), "mlp.c_fc.weight": (C, 4 * C),
            "mlp.c_fc.bias": (4 * C,), "mlp.c_proj.weight": (4 * C, C), "score.weight": (1, C)}.get(tail, (C,))


# ---- safetensors ------------------------------------------------------------
def read_safetensors(path):
    """{name: float32 array} of a safetensors file (F32, F16 and BF16 tensors, all exactly representable in float32)."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise HFError(f"{path}: {e.strerror}")
    if len(raw) < 8:
        raise HFError(f"{path}: not a safetensors file (shorter than its 8-byte header length)")
    n = struct.unpack("<Q", raw[:8])[0]
    try:
        header = json.loads(raw[8:8 + n])
    except ValueError:
        raise HFError(f"{path}: not a safetensors file (its header is not JSON)")
    data = memoryview(raw)[8 + n:]
    out = {}
    for name, h in header.items():
        if name == "__metadata__":
            continue
        dt, shape, (b, e) = h["dtype"], tuple(h["shape"]), h["data_offsets"]
        if dt not in DTYPES:
            raise HFError(f"{path}: tensor {name} has dtype {dt}; rlfuse reads F32, F16 and BF16 (as float32)")
        if e > len(data):
            raise HFError(f"{path}: tensor {name} ends at byte {e} past the file's end (truncated file)")
        if dt == "BF16":  # the top half of a float32
            x = (np.frombuffer(data[b:e], "<u2").astype(np.uint32) << 16).view(np.float32)
        else:
            x = np.frombuffer(data[b:e], DTYPES[dt]).astype(np.float32)
        out[name] = x.reshape(shape)
    return out


def write_safetensors(path, tensors):
    """Writes {name: float32 array} as safetensors (F32), as transformers' save_pretrained does (format pt)."""
    header, off = {"__metadata__": {"format": "pt"}}, 0
    for name, x in tensors.items():
        header[name] = {"dtype": "F32", "shape": list(x.shape), "data_offsets": [off, off + x.nbytes]}
        off += x.nbytes
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)  # the data starts 8-byte aligned
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for x in tensors.values():
            f.write(np.ascontiguousarray(x, dtype="<f4").tobytes())
    os.replace(tmp, path)


# ---- configuration ------------------------------------------------------------
def check_config(c, head, where):
    """The rlfuse model configuration of a Hugging Face GPT-2 config.json, or HFError naming what rlfuse cannot represent."""
    if c.get("model_type") != "gpt2":
        raise HFError(f"{where}: model_type '{c.get('model_type')}' is not gpt2 (tools/hf_llama.py takes llama, mistral, qwen2 and qwen3)")
    arch = c.get("architectures") or [ARCH[head]]
    if arch != [ARCH[head]]:
        raise HFError(f"{where}: architectures {arch}; a {head} role needs {ARCH[head]}"
                      + (" (policy, actor, reference)" if head == "lm" else " with one label (reward, critic)"))
    cfg = {}
    for k in ("n_layer", "n_head", "n_embd", "vocab_size", "n_positions"):
        if not isinstance(c.get(k), int) or c[k] < 1:
            raise HFError(f"{where}: {k} = {c.get(k)!r}, expected a positive integer")
        cfg[k] = c[k]
    if cfg["n_embd"] % cfg["n_head"]:
        raise HFError(f"{where}: n_embd {cfg['n_embd']} is not divisible by n_head {cfg['n_head']}")
    need = [("activation_function", c.get("activation_function", "gelu_new") in GELU_TANH, "gelu_new (GELU, tanh approximation)"),
            ("layer_norm_epsilon", c.get("layer_norm_epsilon", 1e-5) == 1e-5, "1e-05"),
            ("n_inner", c.get("n_inner") in (None, 4 * cfg["n_embd"]), f"null or {4 * cfg['n_embd']} (4 n_embd)"),
            ("scale_attn_weights", c.get("scale_attn_weights", True) is True, "true"),
            ("scale_attn_by_inverse_layer_idx", c.get("scale_attn_by_inverse_layer_idx", False) is False, "false"),
            ("add_cross_attention", c.get("add_cross_attention", False) is False, "false"),
            ("tie_word_embeddings", c.get("tie_word_embeddings", True) is True, "true (rlfuse's GPT-2 LM head is the token embedding: an untied GPT-2 head cannot be represented)")]
    for key, good, want in need:
        if not good:
            raise HFError(f"{where}: {key} = {json.dumps(c.get(key))}, rlfuse needs {want}")
    if head == "scalar":
        nl = c.get("num_labels", len(c.get("id2label") or {"0": 0}))
        if nl != 1:
            raise HFError(f"{where}: {nl} labels; a reward or critic model has one (num_labels 1)")
    return cfg


def make_config(cfg, head, eos=None):
    """config.json for transformers: GPT-2 with rlfuse's numerics; dropout 0 because rlfuse trains without it."""
    c = {"architectures": [ARCH[head]], "model_type": "gpt2", **cfg, "n_inner": None, "activation_function": "gelu_new",
         "layer_norm_epsilon": 1e-05, "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0, "scale_attn_weights": True,
         "scale_attn_by_inverse_layer_idx": False, "reorder_and_upcast_attn": False, "tie_word_embeddings": True,
         "use_cache": True, "torch_dtype": "float32"}
    if head == "scalar":
        c.update(num_labels=1, id2label={"0": "LABEL_0"}, label2id={"LABEL_0": 0})
    if eos is not None:
        c.update(eos_token_id=eos, bos_token_id=eos)
    return c
