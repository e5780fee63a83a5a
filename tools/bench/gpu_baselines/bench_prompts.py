#!/usr/bin/env python3
"""Writes the prompt file of input/bench/grpo.deck (docs/formats.md, "Token datasets"): N rows of
T token ids drawn uniformly from [4, V) with a fixed seed (ids 0-3 left out: the special tokens of
the shapes' tokenizers, and the deck's EOS, 3), every row all prompt.

  python3 bench_prompts.py OUT.h5 V [N (64)] [T (64)]"""
import sys
import h5py
import numpy as np

if len(sys.argv) < 3:
    sys.exit(__doc__)
out, V = sys.argv[1], int(sys.argv[2])
N = int(sys.argv[3]) if len(sys.argv) > 3 else 64
T = int(sys.argv[4]) if len(sys.argv) > 4 else 64
if V <= 4 or N < 1 or T < 1:
    sys.exit(f"bench_prompts: error: V {V} must exceed 4, N {N} and T {T} be positive")
rng = np.random.default_rng(36)
with h5py.File(out, "w") as f:
    f["tokens"] = rng.integers(4, V, (N, T)).astype(np.int32)
    f["lengths"] = np.full(N, T, np.int32)
    f.attrs["vocab_size"] = np.int32(V)
    f.attrs["task"] = "bench"
print(f"{out}: {N} prompts of {T} tokens at vocabulary {V}")
