#!/usr/bin/env python3
"""hf_export: one role of an rlfuse checkpoint as a Hugging Face GPT-2
directory (config.json + model.safetensors) that transformers loads with
from_pretrained: GPT2LMHeadModel for an LM head (policy, actor, reference),
GPT2ForSequenceClassification with one label for a scalar head (reward,
critic).

Usage: /usr/bin/python3 tools/hf_export.py CKPT.h5 ROLE OUT_DIR [--eos ID]

--eos ID writes eos_token_id/bos_token_id (the built-in task's EOS is 3) so
that transformers' generate stops where rlfuse's generation does. Tensors are
copied bit for bit; optimizer state is left out. Errors are one line
"hf_export: error: ..." with exit status 1; each file is written to a
temporary and renamed. Needs numpy and h5py only.
"""
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_gpt2 as hf  # noqa: E402

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
            raise hf.HFError(f"{path}: no /{role} model (the file holds: {', '.join(have) or 'none'})")
        g = f[role]
        head = g.attrs["head"]
        head = head.decode() if isinstance(head, bytes) else str(head)
        if head != hf.head_of_role(role):
            raise hf.HFError(f"{path}: /{role} has a '{head}' head, expected '{hf.head_of_role(role)}' for role {role}")
        cfg = {k: int(g.attrs[k]) for k in ("n_layer", "n_head", "n_embd", "vocab_size", "n_positions")}
        params = {}
        for k in hf.param_keys(cfg["n_layer"], head):
            if k not in g["params"]:
                raise hf.HFError(f"{path}: /{role}/params/{k} missing")
            x = g["params"][k][()]
            if x.dtype != np.float32 or x.shape != hf.param_shape(k, cfg):
                raise hf.HFError(f"{path}: /{role}/params/{k} is {x.dtype} {list(x.shape)}, expected float32 {list(hf.param_shape(k, cfg))}")
            params[k] = x
    return head, cfg, params


def main():
    args = sys.argv[1:]
    eos = None
    if "--eos" in args:
        i = args.index("--eos")
        try:
            eos = int(args[i + 1])
        except (IndexError, ValueError):
            hf.fail(TOOL, f"--eos {' '.join(args[i + 1:i + 2])}: expected a token id")
        del args[i:i + 2]
    if len(args) != 3:
        hf.fail(TOOL, "usage: hf_export.py CKPT.h5 ROLE OUT_DIR [--eos ID]")
    ckpt, role, out = args
    try:
        head = hf.head_of_role(role)
        head, cfg, params = read_role(ckpt, role)
        if eos is not None and not 0 <= eos < cfg["vocab_size"]:
            raise hf.HFError(f"--eos {eos} is outside the vocabulary [0, {cfg['vocab_size']})")
        os.makedirs(out, exist_ok=True)
        hf.write_safetensors(os.path.join(out, "model.safetensors"), params)
        tmp = os.path.join(out, f"config.json.tmp.{os.getpid()}")
        with open(tmp, "w") as f:
            json.dump(hf.make_config(cfg, head, eos), f, indent=2)
        os.replace(tmp, os.path.join(out, "config.json"))
    except hf.HFError as e:
        hf.fail(TOOL, str(e))
    except OSError as e:
        hf.fail(TOOL, f"{out}: {e.strerror}")
    print(f"{TOOL}: {ckpt} /{role} -> {out} ({hf.ARCH[head]}, {cfg['n_layer']} layers x {cfg['n_embd']}, vocabulary {cfg['vocab_size']})")


if __name__ == "__main__":
    main()
