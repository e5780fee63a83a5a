#!/usr/bin/env python3
"""hf_tokenize: text into an rlfuse token dataset (docs/formats.md) with a
Hugging Face tokenizer (the `tokenizers` library and the tokenizer.json of a
model directory), so that a model imported with tools/hf_import.py can be
trained on the user's data.

Usage: tools/py tools/hf_tokenize.py \
           TOKENIZER_DIR IN.jsonl OUT.h5 [--eos ID] [--vocab-size V]

Each line of IN.jsonl is a JSON object:
  {"prompt": ...}                              prompts (-ppo_prompts): whole rows
  {"prompt": ..., "response": ...}             demonstrations (-sft_data, -ppo_prompts)
  {"prompt": ..., "chosen": ..., "rejected": ...}  preference pairs (-rm_data):
                                               rows 2i (chosen) and 2i+1 (rejected)
--eos ID appends the end-of-sequence token to every response (GPT-2's is
50256; rlfuse's generation stops at -gen_eos). --vocab-size is the model's
vocabulary (config.json's vocab_size, which may exceed the tokenizer's); by
default the tokenizer's. Errors are one line "hf_tokenize: error: ..." and
exit status 1; OUT.h5 is written to a temporary and renamed.
"""
import json
import os
import sys

import numpy as np

TOOL = "hf_tokenize"


def fail(msg):
    print(f"{TOOL}: error: {msg}", file=sys.stderr)
    sys.exit(1)


def main():
    args = sys.argv[1:]
    opt = {"--eos": None, "--vocab-size": None}
    for k in opt:
        if k in args:
            i = args.index(k)
            try:
                opt[k] = int(args[i + 1])
            except (IndexError, ValueError):
                fail(f"{k} needs an integer")
            del args[i:i + 2]
    if len(args) != 3:
        fail("usage: hf_tokenize.py TOKENIZER_DIR IN.jsonl OUT.h5 [--eos ID] [--vocab-size V]")
    tdir, src, out = args
    try:
        from tokenizers import Tokenizer
    except ImportError:
        fail("the tokenizers library is missing (make deps installs it into ~/.cache/rlfuse/python; tools/py runs this tool with it)")
    tjson = os.path.join(tdir, "tokenizer.json")
    if not os.path.isfile(tjson):
        fail(f"{tjson}: missing (a tokenizer directory saved by transformers or tokenizers has tokenizer.json)")
    tk = Tokenizer.from_file(tjson)
    V = opt["--vocab-size"] or tk.get_vocab_size()
    eos = [] if opt["--eos"] is None else [opt["--eos"]]
    enc = lambda s: tk.encode(s, add_special_tokens=False).ids  # noqa: E731

    rows, plen, kind = [], [], None
    try:
        lines = open(src).read().splitlines()
    except OSError as e:
        fail(f"{src}: {e.strerror}")
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            r = json.loads(line)
            p = enc(r["prompt"])
        except (ValueError, KeyError, TypeError):
            fail(f"{src}:{n}: not a JSON object with a \"prompt\" string")
        k = "pairs" if "chosen" in r else "demos" if "response" in r else "prompts"
        if kind not in (None, k):
            fail(f"{src}:{n}: a line of {k} among {kind}; one file holds one kind")
        kind = k
        resp = [r["chosen"], r["rejected"]] if k == "pairs" else [r["response"]] if k == "demos" else [None]
        for x in resp:
            rows.append(p + (enc(x) + eos if x is not None else []))
            plen.append(len(p))
    if not rows:
        fail(f"{src}: no lines")
    T = max(len(r) for r in rows)
    tokens = np.zeros((len(rows), T), np.int32)
    for i, r in enumerate(rows):
        if not r:
            fail(f"{src}: row {i} is empty")
        tokens[i, :len(r)] = r
    if tokens.max() >= V:
        fail(f"token id {tokens.max()} is outside the vocabulary [0, {V}) (--vocab-size)")
    import h5py

    tmp = f"{out}.tmp.{os.getpid()}"
    with h5py.File(tmp, "w") as f:
        f["tokens"] = tokens
        f["lengths"] = np.array([len(r) for r in rows], np.int32)
        if kind != "prompts":
            f["prompt_lengths"] = np.array(plen, np.int32)
        f.attrs["vocab_size"] = np.int32(V)
        f.attrs["task"] = f"text ({os.path.basename(src)}, tokenizer {os.path.abspath(tdir)})"
    os.replace(tmp, out)
    print(f"{TOOL}: {src} -> {out}: {len(rows)} rows of {kind}, longest {T} tokens, vocabulary {V}")


if __name__ == "__main__":
    main()
