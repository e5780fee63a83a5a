#!/usr/bin/env python3
"""plot_timeline: the timeline of a run record (run.h5 /timeline, written by
every rank: one row per call it ran, with its start and end) as a Gantt
chart: one row per rank, one bar per call, coloured by call, and each rank's
idle fraction (the share of the plotted window in which it ran no call).

Usage: tools/py tools/plot_timeline.py RUN.h5 OUT.png [--steps A:B] [--calls a,b,...]

--steps picks the steps (iterations) to draw, A inclusive, B exclusive
(default: all); --calls keeps only the named calls (e.g. the generation and
inference stage: generation,ref_inference,reward_inference,critic_inference). The idle fractions are also printed, one line per rank, so
scripts can read them. Several records can be drawn side by side (one panel
each, same time scale) by giving more RUN.h5 files before OUT.png.
Needs numpy, h5py and matplotlib (Agg backend, no display).
"""
import sys

import h5py
import numpy as np

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def read(path, steps, only=None):
    """(calls, rank, call, start, end) of the chosen steps, times from the
    window's start."""
    with h5py.File(path, "r") as f:
        if "timeline" not in f:
            sys.exit(f"plot_timeline: {path} has no /timeline (a run before the timeline was recorded?)")
        g = f["timeline"]
        calls = str(g.attrs["calls"]).split()
        cols = {k: g[k][()] for k in ("rank", "step", "call", "start", "end")}
    keep = np.ones(len(cols["step"]), dtype=bool)
    if steps is not None:
        keep = (cols["step"] >= steps[0]) & (cols["step"] < steps[1])
    if only is not None:
        keep &= np.isin(np.array([calls[c] for c in cols["call"]]), only)
    if not keep.any():
        sys.exit(f"plot_timeline: {path}: no timeline rows in the chosen steps")
    t0 = cols["start"][keep].min()
    return calls, cols["rank"][keep], cols["call"][keep], cols["start"][keep] - t0, cols["end"][keep] - t0


def busy(intervals):
    """Length of the union of [a, b) intervals."""
    total, last = 0.0, -np.inf
    for a, b in sorted(intervals):
        a = max(a, last)
        if b > a:
            total += b - a
            last = b
    return total


def idle_fractions(rank, start, end):
    """Per rank: 1 - busy / window, the window being the whole chart."""
    window = end.max() - start.min()
    return {int(r): 1.0 - busy(list(zip(start[rank == r], end[rank == r]))) / window for r in np.unique(rank)}


def main(argv):
    steps, only = None, None
    if "--calls" in argv:
        i = argv.index("--calls")
        if i + 1 >= len(argv):
            sys.exit("plot_timeline: --calls wants names separated by commas")
        only = argv[i + 1].split(",")
        del argv[i : i + 2]
    if "--steps" in argv:
        i = argv.index("--steps")
        try:
            a, b = argv[i + 1].split(":")
            steps = (int(a), int(b))
        except (IndexError, ValueError):
            sys.exit("plot_timeline: --steps wants A:B, e.g. --steps 1:3")
        del argv[i : i + 2]
    if len(argv) < 3:
        sys.exit(__doc__.strip().split("\n\n")[1])
    runs, out = argv[1:-1], argv[-1]
    data = [read(p, steps, only) for p in runs]
    names = []
    for calls, _, call, _, _ in data:
        for c in np.unique(call):
            if calls[c] not in names:
                names.append(calls[c])
    cmap = plt.get_cmap("tab20")
    colour = {n: cmap(i % 20) for i, n in enumerate(names)}
    tmax = max(d[4].max() for d in data)
    nranks = [int(d[1].max()) + 1 for d in data]
    fig, axes = plt.subplots(len(data), 1, figsize=(12, 1.2 + 0.5 * sum(nranks) + 0.6 * len(data)), squeeze=False)
    for ax, path, (calls, rank, call, start, end), nr in zip(axes[:, 0], runs, data, nranks):
        idle = idle_fractions(rank, start, end)
        for r, s, e, c in zip(rank, start, end, call):
            ax.barh(r, e - s, left=s, height=0.8, color=colour[calls[c]], edgecolor="none")
        ax.set_yticks(range(nr))
        ax.set_yticklabels([f"rank {r}  idle {idle.get(r, 1.0):.0%}" for r in range(nr)])
        ax.invert_yaxis()
        ax.set_xlim(0, tmax * 1.01)
        ax.set_title(f"{path}  (window {end.max():.3f} s)", fontsize=9)
        for r in range(nr):
            print(f"{path} rank {r} idle {idle.get(r, 1.0):.4f} window {end.max():.4f}")
    axes[-1, 0].set_xlabel("seconds")
    handles = [plt.Rectangle((0, 0), 1, 1, color=colour[n]) for n in names]
    fig.legend(handles, names, loc="upper center", ncol=min(6, len(names)), fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.5 / fig.get_size_inches()[1]))
    fig.savefig(out, dpi=110)


if __name__ == "__main__":
    main(sys.argv)
