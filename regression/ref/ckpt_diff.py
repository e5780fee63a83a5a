#!/usr/bin/env python3
"""ckpt_diff: how far apart two rlfuse checkpoints are, tensor by tensor.

Usage: /usr/bin/python3 regression/ref/ckpt_diff.py A.h5 B.h5 [--tol T] [--params-tol P] [--roles actor,critic,...]

For every dataset under /<role>/params and /<role>/optim (every role both
files hold, or those named) it computes max|a - b| / max|a| (the scale of
the tensor, so elements near zero do not inflate it) and prints the worst
tensor of each role. Exits 1 when a tensor differs in shape, is missing from
B, or differs by more than T (default 1e-4); 0 otherwise. Needs numpy, h5py.

The key third of every attn.c_attn.bias has an exactly zero gradient (a
constant shift of all keys cancels in the softmax), so AdamW moves it by
rounding noise alone; those entries are compared by absolute difference
against T instead (docs/testing.md).

A moment (optim/m, optim/v) whose tensor is almost all zero gradient is
measured against 1e-4 of the largest value of that moment in the model
instead of its own maximum: e.g. a reward model's ln_f.bias, whose
Bradley-Terry gradient is exactly zero in exact arithmetic (the loss does not
change when every reward shifts by the same amount), holds moments of
rounding noise (1e-12) that would otherwise count as relative difference 1.

--params-tol P (default T) applies to /params only. AdamW's update is
g/(|g| + eps) per element, so a gradient element near eps (1e-8) whose
rounding differs between two layouts moves its weight differently by a
sizeable fraction of lr, although the moments (the gradients' record) agree
to T. Runs with large learning rates compare weights at a looser P.
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
    ap.add_argument("--params-tol", type=float, default=None)
    ap.add_argument("--roles", default="")
    args = ap.parse_args()
    bad = 0
    ptol = args.tol if args.params_tol is None else args.params_tol
    with h5py.File(args.a, "r") as fa, h5py.File(args.b, "r") as fb:
        roles = args.roles.split(",") if args.roles else [r for r in fa if r != "state" and r in fb]
        for role in roles:
            worst, where, excess = 0.0, "", 0.0
            kind_max = {}
            for name, da in tensors(fa[role]):
                kind = name.rsplit("/", 1)[0] if name.startswith("optim/") else None
                if kind and da.size:
                    kind_max[kind] = max(kind_max.get(kind, 0.0), float(np.abs(da[()]).max()))
            for name, da in tensors(fa[role]):
                tol = ptol if name.startswith("params/") else args.tol
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
                    if key > tol:
                        print(f"FAIL {role}/{name}: key bias moved by {key:.3g}")
                        bad += 1
                    x, y = np.r_[x[:C], x[2 * C:]], np.r_[y[:C], y[2 * C:]]
                scale = float(np.abs(x).max())
                if name.startswith("optim/"):
                    scale = max(scale, 1e-4 * kind_max.get(name.rsplit("/", 1)[0], 0.0))
                d = float(np.abs(x - y).max()) / (scale if scale > 0 else 1.0)
                if d > worst:
                    worst, where = d, name
                excess = max(excess, d / tol)
                if d > tol:
                    bad += 1
            print(f"{'PASS' if excess <= 1 else 'FAIL'} {role}: max relative difference {worst:.3g} ({where or '-'})")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
