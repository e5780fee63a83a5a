#!/usr/bin/env python3
"""plot_schedule: draws a fused actor-critic schedule file (-mode schedule,
docs/formats.md "Schedule file") as a timeline: one row per rank, actor
tasks in blue and critic tasks in orange, forwards light and backwards dark,
each box labelled with its micro-batch.

Usage: tools/py tools/plot_schedule.py SCHEDULE.h5 OUT.png

The timings come from replaying the file here (a rank runs its list in
order; a task starts when its rank is free and its dependency is done), an
independent check of the C replay: the script fails if its makespan differs
from the file's makespan attribute. Needs numpy, h5py and matplotlib (Agg).
"""
import sys

import h5py

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

COLOURS = {(0, 0): "#9ecae1", (0, 1): "#2171b5", (1, 0): "#fdbe85", (1, 1): "#d94701"}
NAMES = {(0, 0): "actor forward", (0, 1): "actor backward", (1, 0): "critic forward", (1, 1): "critic backward"}


def rank_of(model, stage, copy, pp1):
    """Rank of a stage: the actor's stage s on rank s, critic copy c's stage t on c*pp1 + pp1-1-t."""
    return stage if model == 0 else copy * pp1 + pp1 - 1 - stage


def replay(lists, pp0, pp1, f):
    """Start and finish of every (rank, row); raises on a deadlock."""
    finish = {}  # (model, kind, mb, rank) -> finish time
    times = [[None] * len(lst) for lst in lists]
    pos, free = [0] * pp0, [0.0] * pp0
    progress = True
    while progress:
        progress = False
        for r in range(pp0):
            while pos[r] < len(lists[r]):
                model, kind, mb = (int(v) for v in lists[r][pos[r]])
                stage = r if model == 0 else pp1 - 1 - r % pp1
                copy = 0 if model == 0 else r // pp1
                pp = pp0 if model == 0 else pp1
                deps = []
                if kind == 0 and stage > 0:
                    deps.append((model, 0, mb, rank_of(model, stage - 1, copy, pp1)))
                if kind == 1:
                    deps.append((model, 0, mb, r))
                    if stage < pp - 1:
                        deps.append((model, 1, mb, rank_of(model, stage + 1, copy, pp1)))
                if any(d not in finish for d in deps):
                    break
                start = max([free[r]] + [finish[d] for d in deps])
                end = start + (1 if kind == 0 else 2) * f[model]
                finish[(model, kind, mb, r)] = end
                times[r][pos[r]] = (start, end)
                free[r] = end
                pos[r] += 1
                progress = True
    if any(pos[r] < len(lists[r]) for r in range(pp0)):
        raise SystemExit("plot_schedule: the schedule deadlocks")
    return times


def main():
    if len(sys.argv) != 3:
        raise SystemExit("usage: plot_schedule.py SCHEDULE.h5 OUT.png")
    path, out = sys.argv[1], sys.argv[2]
    with h5py.File(path, "r") as h:
        a = h.attrs
        pp0, pp1 = int(a["pp0"]), int(a["pp1"])
        f = (float(a["f0"]), float(a["f1"]))
        lists = [h[f"node_{r}/tasks"][()] for r in range(pp0)]
        want, lb, seq = float(a["makespan"]), float(a["lower_bound"]), float(a["sequential_makespan"])
    times = replay(lists, pp0, pp1, f)
    makespan = max(t[1] for row in times for t in row)
    if abs(makespan - want) > 1e-9 * max(1.0, want):
        raise SystemExit(f"plot_schedule: replay gives makespan {makespan:g}, the file says {want:g}")
    fig, ax = plt.subplots(figsize=(min(24, 4 + makespan / 25), 0.45 * pp0 + 1.5))
    label = len(lists[0]) <= 160  # micro-batch numbers only where they fit
    for r in range(pp0):
        for (model, kind, mb), (t0, t1) in zip(lists[r], times[r]):
            ax.barh(r, t1 - t0, left=t0, height=0.8, color=COLOURS[(int(model), int(kind))], edgecolor="white", linewidth=0.4)
            if label:
                ax.text((t0 + t1) / 2, r, str(int(mb)), ha="center", va="center", fontsize=5)
    ax.set_yticks(range(pp0))
    ax.set_yticklabels([f"rank {r}" for r in range(pp0)])
    ax.invert_yaxis()
    ax.set_xlim(0, makespan)
    ax.set_xlabel("time")
    ax.set_title(f"{path.split('/')[-1]}: makespan {makespan:g}, lower bound {lb:g}, sequential 1F1B {seq:g}")
    ax.legend(handles=[Patch(color=COLOURS[k], label=NAMES[k]) for k in sorted(COLOURS)], loc="upper center", bbox_to_anchor=(0.5, -0.12 if pp0 > 4 else -0.25), ncol=4, fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=150)
    print(f"plot_schedule: {out} (makespan {makespan:g} checked against the file)")


if __name__ == "__main__":
    main()
