#!/usr/bin/env python3
"""plot_run: post-processing of a run record (run.h5): one subplot per metric
(/metrics/<name> against /metrics/step) and one with the per-step stage times
(/timing/<stage>_max, the slowest rank, against /timing/step).

Usage: /usr/bin/python3 tools/plot_run.py RUN.h5 OUT.png

Steps where a metric was not recorded (NaN) are left out of its line. Needs
numpy, h5py and matplotlib (Agg backend, no display).
"""
import math
import os
import sys

import h5py
import numpy as np

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def columns(f, group, suffix=""):
    """(step array, {name: values}) of a record group; names end with suffix."""
    if group not in f or "step" not in f[group]:
        return None, {}
    g = f[group]
    step = np.asarray(g["step"][()], dtype=np.float64)
    out = {}
    for name, d in g.items():
        if name == "step" or not isinstance(d, h5py.Dataset) or not name.endswith(suffix):
            continue
        v = np.asarray(d[()], dtype=np.float64).reshape(-1)
        n = min(len(v), len(step))
        out[name[: len(name) - len(suffix)] if suffix else name] = v[:n]
    return step, out


def label_of(f, path):
    rev = f.attrs.get("git_revision", "")
    rev = rev.decode() if isinstance(rev, bytes) else str(rev)
    return os.path.basename(path) + (f" (git {rev})" if rev else "")


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: plot_run.py RUN.h5 OUT.png")
    path, out = sys.argv[1], sys.argv[2]
    with h5py.File(path, "r") as f:
        mstep, metrics = columns(f, "metrics")
        tstep, stages = columns(f, "timing", "_max")
        title = label_of(f, path)
    npanel = len(metrics) + (1 if stages else 0)
    if npanel == 0:
        sys.exit(f"plot_run: {path} has no /metrics/<name> or /timing/<stage>_max columns")

    ncol = min(3, npanel)
    nrow = math.ceil(npanel / ncol)
    fig, axes = plt.subplots(nrow, ncol, figsize=(4.5 * ncol, 3.2 * nrow), squeeze=False)
    axes = axes.ravel()
    k = 0
    for name in sorted(metrics):
        v = metrics[name]
        s = mstep[: len(v)]
        ok = np.isfinite(v)
        ax = axes[k]
        ax.plot(s[ok], v[ok], marker="." if ok.sum() < 50 else None, lw=1)
        ax.set_title(name, fontsize=10)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        k += 1
    if stages:
        ax = axes[k]
        for name in sorted(stages):
            v = stages[name]
            ok = np.isfinite(v) & (v > 0)  # 0: stage not run that step
            ax.plot(tstep[: len(v)][ok], v[ok], lw=1, label=name)
        ax.set_title("stage time, max over ranks", fontsize=10)
        ax.set_xlabel("step")
        ax.set_ylabel("seconds")
        if any((np.isfinite(v) & (v > 0)).any() for v in stages.values()):
            ax.set_yscale("log")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
        k += 1
    for ax in axes[k:]:
        ax.set_visible(False)
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    print(f"plot_run: wrote {out} ({len(metrics)} metrics, {len(stages)} stages)")


if __name__ == "__main__":
    main()
