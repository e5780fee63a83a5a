#!/usr/bin/env python3
"""ckpt_diff: how far apart two rlfuse checkpoints are, tensor by tensor.

Usage: /usr/bin/python3 tools/ckpt_diff.py A.h5 B.h5 [--tol T] [--roles actor,critic,...]

For every dataset under /<role>/params and /<role>/optim (every role both
files hold, or those named) it computes max|a - b| / max|a| (the scale of
the tensor, so elements near zero do not inflate it) and prints the worst
tensor of each role. Exits 1 when a tensor differs in shape, is missing from
B, or differs by more than T (default 1e-4); 0 otherwise. Needs numpy, h5py.

The key third of every attn.c_attn.bias has an exactly zero gradient (a
constant shift of all keys cancels in the softmax), so AdamW moves it by
rounding noise alone; those entries are compared by absolute difference
against T instead (docs/testing.md).
"""
import argparse
import sys

import h5py
import numpy as np


def tensors(group, prefix=""):
    for k, v in group.items():
        if isinstance(v, h5py.Dataset):
            yield prefix + k, v
        else:
            yield from tensors(v, prefix + k + "/")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--tol", type=float, default=1e-4)
    ap.add_argument("--roles", default="")
    args = ap.parse_args()
    bad = 0
    with h5py.File(args.a, "r") as fa, h5py.File(args.b, "r") as fb:
        roles = args.roles.split(",") if args.roles else [r for r in fa if r != "state" and r in fb]
        for role in roles:
            worst, where = 0.0, ""
            for name, da in tensors(fa[role]):
                if name not in fb[role]:
                    print(f"FAIL {role}/{name}: missing from {args.b}")
                    bad += 1
                    continue
                x, y = da[()].astype(np.float64), fb[role][name][()].astype(np.float64)
                if x.shape != y.shape:
                    print(f"FAIL {role}/{name}: shape {x.shape} vs {y.shape}")
                    bad += 1
                    continue
                if x.size == 0:
                    continue
                if name.endswith("attn.c_attn.bias"):
                    C = x.shape[0] // 3
                    key = float(np.abs(x[C:2 * C] - y[C:2 * C]).max())
                    if key > args.tol:
                        print(f"FAIL {role}/{name}: key bias moved by {key:.3g}")
                        bad += 1
                    x, y = np.r_[x[:C], x[2 * C:]], np.r_[y[:C], y[2 * C:]]
                scale = float(np.abs(x).max())
                d = float(np.abs(x - y).max()) / (scale if scale > 0 else 1.0)
                if d > worst:
                    worst, where = d, name
                if d > args.tol:
                    bad += 1
            print(f"{'PASS' if worst <= args.tol else 'FAIL'} {role}: max relative difference {worst:.3g} ({where or '-'})")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
