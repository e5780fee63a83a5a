#!/usr/bin/env python3
"""hf_export: one role of an rlfuse checkpoint as a Hugging Face directory
(config.json + model.safetensors) that transformers loads with
from_pretrained. GPT-2 (no arch attribute, or arch "gpt2"): GPT2LMHeadModel
for an LM head (policy, actor, reference), GPT2ForSequenceClassification with
one label for a scalar head (reward, critic). arch "llama":
LlamaForCausalLM / LlamaForSequenceClassification, or Qwen2's when the model
has q/k/v biases (Llama's attention_bias would bias o_proj too), or Qwen3's
when it has per-head q/k norms (qk_norm, with its own head_dim);
--model-type mistral writes Mistral's classes (no sliding window) instead.

Usage: tools/py tools/hf_export.py CKPT.h5 ROLE OUT_DIR [--eos ID] [--model-type llama|mistral|qwen2|qwen3]

ROLE names the model: policy.h5 and an SFT final.h5 hold /policy, a PPO or
GRPO final.h5 /actor (and /critic), a reward model's /reward. When the file
has no ROLE but exactly one model with ROLE's head (LM or scalar), that one
is exported, and a line says so (policy.h5 actor exports /policy).

--eos ID writes eos_token_id (GPT-2: bos_token_id too; the built-in task's
EOS is 3) so that transformers' generate stops where rlfuse's generation
does; without it, the /tokenizer group's eos_id where the checkpoint has one.
With /tokenizer (an LM role), tokenizer.json, tokenizer_config.json and
generation_config.json are written too (tools/hf_tokenizer.py), so that
AutoTokenizer and pipeline("text-generation") load the directory. Tensors are copied bit for bit, so Hugging Face -> hf_import ->
hf_export gives back the same tensors (and the same /tokenizer); optimizer state is left out. Errors
are one line "hf_export: error: ..." with exit status 1; each file is written
to a temporary and renamed. Needs numpy and h5py only.
"""
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_gpt2 as hf  # noqa: E402
import hf_llama as llama  # noqa: E402
import hf_tokenizer  # noqa: E402

TOOL = "hf_export"


def read_role(path, role):
    import h5py

    if not os.path.isfile(path):
        raise hf.HFError(f"{path}: no such file")
    try:
        f = h5py.File(path, "r")
    except OSError:
        raise hf.HFError(f"{path}: not an HDF5 file")
    with f:
        if role not in f or "params" not in f[role]:
            have = [k for k in f if k in hf.LM_ROLES + hf.SCALAR_ROLES]
            # policy.h5 holds /policy and a PPO checkpoint /actor: the one model of the role's head is what was meant
            same = [k for k in have if hf.head_of_role(k) == hf.head_of_role(role) and "params" in f[k]]
            if role + "_source" not in f and len(same) == 1:
                print(f"{TOOL}: {path} holds no /{role}: exporting its one {hf.head_of_role(role).replace('lm', 'LM')} model, /{same[0]}")
                role = same[0]
        if role not in f or "params" not in f[role]:
            if role + "_source" in f:  # a PPO checkpoint records the unchanged input file of its reference instead of copying it
                src = f[role + "_source"].attrs
                raise hf.HFError(f"{path}: /{role} is not copied into this checkpoint: it is /{text(src['role'])} of {text(src['abspath'])} (export that)")
            raise hf.HFError(f"{path}: no /{role} model (the file holds: {', '.join(have) or 'none'})")
        g = f[role]
        head = text(g.attrs["head"])
        if head != hf.head_of_role(role):
            raise hf.HFError(f"{path}: /{role} has a '{head}' head, expected '{hf.head_of_role(role)}' for role {role}")
        arch = text(g.attrs.get("arch", "gpt2"))
        if arch not in ("gpt2", "llama"):
            raise hf.HFError(f"{path}: /{role} has arch '{arch}', not gpt2 or llama")
        need = [(k, int) for k in ("n_layer", "n_head", "n_embd", "vocab_size", "n_positions")]
        if arch == "llama":
            need += [(k, int) for k in ("n_kv_head", "n_ffn", "qkv_bias", "tie_embeddings", "rope_original_max_positions")]
            need += [(k, float) for k in ("rope_theta", "norm_eps", "rope_factor", "rope_low_freq_factor", "rope_high_freq_factor")]
            need += [("rope_scaling", text)]
        cfg = {"arch": arch}
        for k, conv in need:
            if k not in g.attrs:
                raise hf.HFError(f"{path}: /{role} has no attribute {k} (arch {arch})")
            cfg[k] = conv(g.attrs[k])
        if arch == "llama":  # Qwen3's two, absent from files written before them
            cfg["head_dim"] = int(g.attrs.get("head_dim", cfg["n_embd"] // cfg["n_head"]))
            cfg["qk_norm"] = int(g.attrs.get("qk_norm", 0))
        if arch == "llama" and cfg["rope_scaling"] not in ("none", "llama3"):
            raise hf.HFError(f"{path}: /{role} has rope_scaling '{cfg['rope_scaling']}', not none or llama3")
        keys = hf.param_keys(cfg["n_layer"], head) if arch == "gpt2" else llama.param_keys(cfg, head)
        shape = (lambda k: hf.param_shape(k, cfg)) if arch == "gpt2" else (lambda k: llama.param_shape(k, cfg))
        params = {}
        for k in keys:
            if k not in g["params"]:
                raise hf.HFError(f"{path}: /{role}/params/{k} missing")
            x = g["params"][k][()]
            if x.dtype != np.float32 or x.shape != shape(k):
                raise hf.HFError(f"{path}: /{role}/params/{k} is {x.dtype} {list(x.shape)}, expected float32 {list(shape(k))}")
            params[k] = x
    return role, head, cfg, params


def text(v):
    return v.decode() if isinstance(v, bytes) else str(v)


def main():
    args = sys.argv[1:]
    eos = model_type = None
    if "--model-type" in args:
        i = args.index("--model-type")
        if i + 1 >= len(args):
            hf.fail(TOOL, "--model-type: expected llama, mistral, qwen2 or qwen3")
        model_type = args[i + 1]
        del args[i:i + 2]
    if "--eos" in args:
        i = args.index("--eos")
        try:
            eos = int(args[i + 1])
        except (IndexError, ValueError):
            hf.fail(TOOL, f"--eos {' '.join(args[i + 1:i + 2])}: expected a token id")
        del args[i:i + 2]
    if len(args) != 3:
        hf.fail(TOOL, "usage: hf_export.py CKPT.h5 ROLE OUT_DIR [--eos ID] [--model-type llama|mistral|qwen2|qwen3]")
    ckpt, role, out = args
    try:
        head = hf.head_of_role(role)
        role, head, cfg, params = read_role(ckpt, role)
        tok = hf_tokenizer.read_group(ckpt) if head == "lm" else None
        files = hf_tokenizer.export_files(*tok, cfg["n_positions"], f"{ckpt} /tokenizer") if tok else {}
        if eos is None and tok and int(tok[1].get("eos_id", -1)) >= 0:
            eos = int(tok[1]["eos_id"])
        if eos is not None and not 0 <= eos < cfg["vocab_size"]:
            raise hf.HFError(f"--eos {eos} is outside the vocabulary [0, {cfg['vocab_size']})")
        if cfg["arch"] == "gpt2":
            if model_type not in (None, "gpt2"):
                raise hf.HFError(f"--model-type {model_type}: /{role} is a GPT-2 model")
            config, arch = hf.make_config({k: v for k, v in cfg.items() if k != "arch"}, head, eos), hf.ARCH[head]
        else:
            mt = llama.model_type_for(cfg, model_type)
            config, arch = llama.make_config(cfg, head, mt, eos), llama.arch_name(mt, head)
        os.makedirs(out, exist_ok=True)
        hf.write_safetensors(os.path.join(out, "model.safetensors"), params)
        files["config.json"] = config
        for name, obj in files.items():
            tmp = os.path.join(out, f"{name}.tmp.{os.getpid()}")
            with open(tmp, "w", encoding="utf-8") as f:
                json.dump(obj, f, indent=2, ensure_ascii=False)
            os.replace(tmp, os.path.join(out, name))
    except hf.HFError as e:
        hf.fail(TOOL, str(e))
    except OSError as e:
        hf.fail(TOOL, f"{out}: {e.strerror}")
    t = f"; tokenizer, EOS {eos}" if tok else ""
    print(f"{TOOL}: {ckpt} /{role} -> {out} ({arch}, {cfg['n_layer']} layers x {cfg['n_embd']}, vocabulary {cfg['vocab_size']}{t})")
    if arch.startswith("Qwen3"):  # the class came with transformers 4.51; make deps installs 4.40.2 (torch 1.13)
        print(f"{TOOL}: note: {arch} needs transformers 4.51 or newer to load; the 4.40.2 that make deps installs "
              "(tools/py) has no Qwen3 classes")


if __name__ == "__main__":
    main()
