#!/usr/bin/env python3
"""hf_import: a Hugging Face GPT-2, Llama, Mistral, Qwen2 or Qwen3 directory
(config.json + model.safetensors, or the shards of a
model.safetensors.index.json, as save_pretrained writes them) into an rlfuse
checkpoint holding one role.

Usage: tools/py tools/hf_import.py HF_DIR OUT.h5 ROLE

ROLE policy, actor or reference takes a GPT2LMHeadModel (head tied to the
token embedding), LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM or
Qwen3ForCausalLM (tied or untied head); reward or critic a *ForSequenceClassification of the
same families with one label. config.json's model_type picks the family
(tools/hf_gpt2.py, tools/hf_llama.py). Tensors are copied bit for bit (F16
and BF16 widened to float32, exactly). What rlfuse cannot compute exactly
(another architecture, GPT-2 with an untied head, another activation or
normalisation epsilon, a sliding window, rope scaling other than llama3, a
mixture of experts, extra tensors, ...) is refused with one line
"hf_import: error: ..." naming the config.json key or tensor, and exit
status 1; OUT.h5 is written to a temporary and renamed, so nothing is left on
failure. For an LM role, a byte-level BPE tokenizer.json (with
tokenizer_config.json and generation_config.json: chat template, special
tokens, stop tokens) becomes the /tokenizer group (tools/hf_tokenizer.py;
docs/formats.md); without one the weights import alone, with one line
"hf_import: warning: ...". Needs numpy and h5py, and the tokenizers package
for a tokenizer.json. docs/huggingface.md says how to go on from the file.
"""
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_gpt2 as hf  # noqa: E402
import hf_llama as llama  # noqa: E402
import hf_tokenizer  # noqa: E402

TOOL = "hf_import"
BUFFERS = (".attn.bias", ".attn.masked_bias")  # causal-mask buffers older transformers saved: not parameters


def read_config(d):
    cpath = os.path.join(d, "config.json")
    if not os.path.isdir(d):
        raise hf.HFError(f"{d}: not a directory")
    if not os.path.isfile(cpath):
        raise hf.HFError(f"{cpath}: missing (a save_pretrained directory has config.json)")
    try:
        with open(cpath) as f:
            c = json.load(f)
    except ValueError as e:
        raise hf.HFError(f"{cpath}: not JSON ({e})")
    if not isinstance(c, dict):
        raise hf.HFError(f"{cpath}: not a JSON object")
    return c, cpath


def read_tensors(d):
    """({name: float32 array}, the file to name in errors): model.safetensors, or the shards its index lists."""
    wpath, ipath = os.path.join(d, "model.safetensors"), os.path.join(d, "model.safetensors.index.json")
    if os.path.isfile(wpath):
        return hf.read_safetensors(wpath), wpath
    if not os.path.isfile(ipath):
        other = os.path.exists(os.path.join(d, "pytorch_model.bin"))
        raise hf.HFError(f"{wpath}: missing" + (" (pytorch_model.bin found: save with save_pretrained(dir, safe_serialization=True))" if other else ""))
    try:
        with open(ipath) as f:
            wmap = json.load(f)["weight_map"]
        assert isinstance(wmap, dict) and all(isinstance(v, str) for v in wmap.values())
    except (ValueError, KeyError, TypeError, AssertionError):
        raise hf.HFError(f"{ipath}: not a safetensors index (a JSON object with a weight_map of tensor -> file)")
    t = {}
    for shard in sorted(set(wmap.values())):
        spath = os.path.join(d, shard)
        if os.path.basename(shard) != shard or not os.path.isfile(spath):
            raise hf.HFError(f"{ipath}: shard {shard} is missing from {d}")
        for k, x in hf.read_safetensors(spath).items():
            if k in t:
                raise hf.HFError(f"{spath}: tensor {k} is in another shard too")
            if wmap.get(k, shard) != shard:
                raise hf.HFError(f"{spath}: tensor {k} is listed in {wmap[k]} by {ipath}")
            t[k] = x
    missing = sorted(set(wmap) - set(t))
    if missing:
        raise hf.HFError(f"{ipath}: tensor {missing[0]} is not in its shard {wmap[missing[0]]}")
    return t, ipath


def check_tensors(t, keys, shape, wpath, what):
    extra = sorted(set(t) - set(keys))
    if extra:
        raise hf.HFError(f"{wpath}: tensor {extra[0]} is not part of {what}")
    for k in keys:
        if k not in t:
            raise hf.HFError(f"{wpath}: tensor {k} missing")
        if t[k].shape != shape(k):
            raise hf.HFError(f"{wpath}: tensor {k} has shape {list(t[k].shape)}, expected {list(shape(k))} from config.json")
    return {k: t[k] for k in keys}


def same_bits(a, b):
    return a is not None and b is not None and a.shape == b.shape and np.array_equal(a.view(np.uint32), b.view(np.uint32))


def load_gpt2(c, cpath, d, head):
    cfg = hf.check_config(c, head, cpath)
    raw, wpath = read_tensors(d)
    t = {}
    for k, x in raw.items():
        if k.endswith(BUFFERS):
            continue
        # the original GPT-2 files name the transformer's tensors without the "transformer." prefix
        t[k if k.startswith(("transformer.", "lm_head.", "score.")) else "transformer." + k] = x
    if "lm_head.weight" in t:
        if head != "lm" or not same_bits(t["lm_head.weight"], t.get("transformer.wte.weight")):
            raise hf.HFError(f"{wpath}: lm_head.weight differs from transformer.wte.weight (an untied head; rlfuse ties GPT-2's LM head to the token embedding)")
        del t["lm_head.weight"]
    keys = hf.param_keys(cfg["n_layer"], head)
    return cfg, check_tensors(t, keys, lambda k: hf.param_shape(k, cfg), wpath, f"a GPT-2 {hf.ARCH[head]} of {cfg['n_layer']} layers")


def load_llama(c, cpath, d, head):
    cfg = llama.check_config(c, head, cpath)
    raw, wpath = read_tensors(d)
    t = {k: x for k, x in raw.items() if not k.endswith(llama.BUFFERS)}
    if head == "lm" and cfg["tie_embeddings"] and "lm_head.weight" in t:
        if not same_bits(t["lm_head.weight"], t.get("model.embed_tokens.weight")):
            raise hf.HFError(f"{wpath}: lm_head.weight differs from model.embed_tokens.weight although config.json's tie_word_embeddings is true")
        del t["lm_head.weight"]
    keys = llama.param_keys(cfg, head)
    what = f"a {llama.arch_name(c['model_type'], head)} of {cfg['n_layer']} layers" + (" with a tied head" if head == "lm" and cfg["tie_embeddings"] else "")
    return cfg, check_tensors(t, keys, lambda k: llama.param_shape(k, cfg), wpath, what)


def load_hf(d, head):
    """(checkpoint attributes, {name: float32 array}, what it was) of a save_pretrained directory."""
    c, cpath = read_config(d)
    mt = c.get("model_type")
    if mt == "gpt2":
        return (*load_gpt2(c, cpath, d, head), hf.ARCH[head])
    if llama.is_llama_family(mt):
        return (*load_llama(c, cpath, d, head), f"{llama.arch_name(mt, head)} as arch llama")
    raise hf.HFError(f"{cpath}: model_type '{mt}' is not one rlfuse runs (gpt2, {', '.join(llama.FAMILIES)})")


def attr_value(v):
    """The HDF5 attribute of a configuration value: int32, float64 or a UTF-8 string (as the C writer's)."""
    if isinstance(v, str):
        return v
    if isinstance(v, float):
        return np.float64(v)
    return np.int32(v)


def write_ckpt(path, role, head, cfg, params, source, tool=TOOL, extra=None):
    """One role's checkpoint at path (written to a temporary and renamed); extra(f), if given,
    adds groups (gguf_import.py's /tokenizer) before the rename."""
    import h5py

    tmp = f"{path}.tmp.{os.getpid()}"
    try:
        with h5py.File(tmp, "w") as f:
            g = f.create_group(role)
            for k, v in cfg.items():
                g.attrs[k] = attr_value(v)
            g.attrs["head"] = head
            p = g.create_group("params")
            for k, x in params.items():
                p.create_dataset(k, data=np.ascontiguousarray(x, np.float32))
            s = f.create_group("state")
            for k in ("iteration", "data_pos", "seed"):
                s.attrs[k] = np.int64(0)
            s.attrs["rlfuse_version"] = tool
            s.attrs["git_revision"] = "none"
            s.attrs["source"] = os.path.abspath(source)
            if extra:
                extra(f)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def import_from_cache(name):
    from gguf_import import import_from_cache as imp  # the cache folder make deps fills (tokenizers)
    return imp(name)


def main():
    if len(sys.argv) != 4:
        hf.fail(TOOL, "usage: hf_import.py HF_DIR OUT.h5 ROLE")
    d, out, role = sys.argv[1:4]
    try:
        head = hf.head_of_role(role)
        cfg, params, kind = load_hf(d, head)
        tok, why = hf_tokenizer.import_tokenizer(d, cfg["vocab_size"], read_config(d)[0], import_from_cache) if head == "lm" else (None, None)
        if why:
            print(f"{TOOL}: warning: {why}", file=sys.stderr)
        write_ckpt(out, role, head, cfg, params, d, extra=(lambda f: hf_tokenizer.write_group(f, *tok)) if tok else None)
    except hf.HFError as e:
        hf.fail(TOOL, str(e))
    except OSError as e:
        hf.fail(TOOL, f"{e.filename or out}: {e.strerror}")
    n = sum(x.size for x in params.values())
    # the stop tokens besides EOS, as rlfuse's "generation stops at EOS E and stop tokens S" line counts them
    stops = [str(x) for x in tok[0]["stop_ids"] if x != tok[1]["eos_id"]] if tok else []
    t = f"; tokenizer {tok[1]['pre']}, EOS {tok[1]['eos_id']}, stop tokens {','.join(stops) or 'none'}" if tok else ""
    print(f"{TOOL}: {d} -> {out} /{role} ({kind}, {cfg['n_layer']} layers x {cfg['n_embd']}, vocabulary {cfg['vocab_size']}, {n} parameters{t})")


if __name__ == "__main__":
    main()
