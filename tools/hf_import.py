#!/usr/bin/env python3
"""hf_import: a Hugging Face GPT-2 directory (config.json + model.safetensors,
as save_pretrained writes it) into an rlfuse checkpoint holding one role.

Usage: /usr/bin/python3 tools/hf_import.py HF_DIR OUT.h5 ROLE

ROLE policy, actor or reference takes a GPT2LMHeadModel (head tied to the
token embedding); reward or critic a GPT2ForSequenceClassification with one
label. Tensors are copied bit for bit (F16 and BF16 widened to float32,
exactly). What rlfuse cannot compute exactly (another architecture, an
untied head, another activation or LayerNorm epsilon, extra tensors) is
refused with one line "hf_import: error: ..." and exit status 1; OUT.h5 is
written to a temporary and renamed, so nothing is left on failure. Needs
numpy and h5py only. docs/huggingface.md says how to go on from the file.
"""
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_gpt2 as hf  # noqa: E402

TOOL = "hf_import"
BUFFERS = (".attn.bias", ".attn.masked_bias")  # causal-mask buffers older transformers saved: not parameters


def load_hf(d, head):
    cpath, wpath = os.path.join(d, "config.json"), os.path.join(d, "model.safetensors")
    if not os.path.isdir(d):
        raise hf.HFError(f"{d}: not a directory")
    if not os.path.isfile(cpath):
        raise hf.HFError(f"{cpath}: missing (a save_pretrained directory has config.json)")
    if not os.path.isfile(wpath):
        other = [n for n in ("model.safetensors.index.json", "pytorch_model.bin") if os.path.exists(os.path.join(d, n))]
        raise hf.HFError(f"{wpath}: missing" + (f" ({other[0]} found: save with save_pretrained(dir, safe_serialization=True, max_shard_size='100GB'))" if other else ""))
    try:
        with open(cpath) as f:
            c = json.load(f)
    except ValueError as e:
        raise hf.HFError(f"{cpath}: not JSON ({e})")
    cfg = hf.check_config(c, head, cpath)
    raw = hf.read_safetensors(wpath)
    t = {}
    for k, x in raw.items():
        if k.endswith(BUFFERS):
            continue
        # the original GPT-2 files name the transformer's tensors without the "transformer." prefix
        t[k if k.startswith(("transformer.", "lm_head.", "score.")) else "transformer." + k] = x
    keys = hf.param_keys(cfg["n_layer"], head)
    if "lm_head.weight" in t:
        if head != "lm" or not np.array_equal(t["lm_head.weight"].view(np.uint32), t.get("transformer.wte.weight", np.zeros(0)).view(np.uint32)):
            raise hf.HFError(f"{wpath}: lm_head.weight differs from transformer.wte.weight (an untied head; rlfuse ties the LM head to the token embedding)")
        del t["lm_head.weight"]
    extra = sorted(set(t) - set(keys))
    if extra:
        raise hf.HFError(f"{wpath}: tensor {extra[0]} is not part of a GPT-2 {hf.ARCH[head]} of {cfg['n_layer']} layers")
    for k in keys:
        if k not in t:
            raise hf.HFError(f"{wpath}: tensor {k} missing")
        if t[k].shape != hf.param_shape(k, cfg):
            raise hf.HFError(f"{wpath}: tensor {k} has shape {list(t[k].shape)}, expected {list(hf.param_shape(k, cfg))} from config.json")
    return cfg, {k: t[k] for k in keys}


def write_ckpt(path, role, head, cfg, params, source):
    import h5py

    tmp = f"{path}.tmp.{os.getpid()}"
    try:
        with h5py.File(tmp, "w") as f:
            g = f.create_group(role)
            for k, v in cfg.items():
                g.attrs[k] = np.int32(v)
            g.attrs["head"] = head
            p = g.create_group("params")
            for k, x in params.items():
                p.create_dataset(k, data=np.ascontiguousarray(x, np.float32))
            s = f.create_group("state")
            for k in ("iteration", "data_pos", "seed"):
                s.attrs[k] = np.int64(0)
            s.attrs["rlfuse_version"] = "hf_import"
            s.attrs["git_revision"] = "none"
            s.attrs["source"] = os.path.abspath(source)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def main():
    if len(sys.argv) != 4:
        hf.fail(TOOL, "usage: hf_import.py HF_DIR OUT.h5 ROLE")
    d, out, role = sys.argv[1:4]
    try:
        head = hf.head_of_role(role)
        cfg, params = load_hf(d, head)
        write_ckpt(out, role, head, cfg, params, d)
    except hf.HFError as e:
        hf.fail(TOOL, str(e))
    n = sum(x.size for x in params.values())
    print(f"{TOOL}: {d} -> {out} /{role} ({hf.ARCH[head]}, {cfg['n_layer']} layers x {cfg['n_embd']}, vocabulary {cfg['vocab_size']}, {n} parameters)")


if __name__ == "__main__":
    main()
