#!/usr/bin/env python3
"""plot_run: every metric a run computed, one panel each, from its run record
(run.h5; tools/report.py overlays runs and picks the main curves instead).

Usage: tools/py tools/plot_run.py RUN.h5 OUT.png

Drawn: each /metrics/<name> against the step that has a finite value and
is not the same at every step (a GRPO run's critic columns, a constant KL
coefficient: left out, and named on stdout), less a metric equal at every
step to one drawn among gold and the reward columns (a rule reward's
reward_numeric and reward are its gold, the accuracy: drawn once) and the engine's diagnostics (acts_grown_bytes,
the growth of the activation buffers), both named on stdout too; the held-out metrics
(eval_*) together in one panel, starting at step 0 with /summary's value
before training and ending with its final one, against the iteration and,
on the top axis, the samples trained on (iterations x -rollout_batch);
a run with an environment's episodes (docs/environments.md) in one panel
against the iteration: model turns and tool calls per episode
(episode_turns_mean, env_calls_mean) on the left axis, the share of
episodes with a call (env_call_frac, and the held-out eval_env_call_frac
where evaluated) on the right, those metrics not drawn again elsewhere;
the per-step stage times (/timing/<stage>_max, the slowest rank); and the
histogram of the last iteration's response lengths (/responses). Steps
where a metric was not recorded (NaN) are left out of its line. A file that
is not a run record is one line "plot_run: error: ..." and exit status 1.
Needs numpy, h5py and matplotlib (Agg backend, no display).
"""
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import report  # noqa: E402  (its loader and the held-out curves' ends)


# Metrics about the engine, not the learning: left out of the panels.
DIAGNOSTICS = ("acts_grown_bytes",)
# A run with an environment (docs/environments.md): drawn together in the episodes panel, counts on the left axis
# and shares of episodes on the right.
EPISODE_COUNTS = (("episode_turns_mean", "model turns per episode"), ("env_calls_mean", "tool calls per episode"))
EPISODE_SHARES = (("env_call_frac", "episodes with a call"), ("eval_env_call_frac", "held-out episodes with a call"))


def same_as(v, drawn):
    """The drawn metric whose values equal v at every step (NaN where v is NaN), or None."""
    return next((k for k, w in drawn.items() if len(w) == len(v) and np.array_equal(v, w, equal_nan=True)), None)


def kept(v):
    """Whether a metric says something: finite somewhere and not one value throughout."""
    ok = np.isfinite(v)
    return ok.any() and np.ptp(v[ok]) > 0


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: plot_run.py RUN.h5 OUT.png")
    path, out = sys.argv[1], sys.argv[2]
    report.PROG = "plot_run"
    run = report.load(path)
    episode = [(k, what) for k, what in EPISODE_COUNTS + EPISODE_SHARES if k in run["metrics"] and np.isfinite(report.curve(run, k)[1]).any()]
    if not any(k in dict(EPISODE_COUNTS) for k, _ in episode):
        episode = []  # no run with an environment: its metrics, if any, as any others
    in_episode = {k for k, _ in episode}
    held = sorted(k for k in run["metrics"] if k.startswith("eval_") and np.isfinite(report.curve(run, k)[1]).any() and k not in in_episode)
    varied = sorted(k for k in run["metrics"] if not k.startswith("eval_") and kept(run["metrics"][k]) and k not in DIAGNOSTICS
                    and k not in in_episode)
    # gold first: what a rule reward's columns repeat is drawn under its name
    drawn, dup = {}, {}
    for k in sorted(varied, key=lambda k: (k != "gold", k)):
        other = same_as(run["metrics"][k], drawn) if k.startswith("reward") else None  # others may agree by chance
        if other:
            dup[k] = other
        else:
            drawn[k] = run["metrics"][k]
    plain = sorted(drawn)
    diag = sorted(k for k in run["metrics"] if k in DIAGNOSTICS)
    left = sorted(k for k in run["metrics"] if k not in held and k not in varied and k not in diag and k not in in_episode)
    stages = {s: v for s, v in run["stages"].items() if (np.isfinite(v) & (v > 0)).any()}
    lengths = run["lengths"]
    npanel = len(plain) + bool(held) + bool(episode) + bool(stages) + (lengths is not None and len(lengths) > 0)
    if npanel == 0:
        print(f"plot_run: error: {path} has no metric with values, no stage times and no response lengths", file=sys.stderr)
        sys.exit(1)

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ncol = min(3, npanel)
    nrow = math.ceil(npanel / ncol)
    fig, axes = plt.subplots(nrow, ncol, figsize=(4.8 * ncol, 3.4 * nrow), squeeze=False, layout="constrained")
    axes = list(axes.ravel())
    k = 0
    if held:
        ax = axes[k]; k += 1
        for name in held:
            s, v = report.curve(run, name)
            ax.plot(s, v, marker="o", ms=3, lw=1.2, label=report.named(run, name))
        ax.set_title("held-out (step 0: before training)", fontsize=9)
        ax.set_xlabel("iteration", fontsize=8)
        ax.legend(fontsize=7)
        ax.grid(alpha=0.3)
        per = run["rollout_batch"]
        if per > 0:
            top = ax.secondary_xaxis("top", functions=(lambda x, p=per: x * p, lambda x, p=per: x / p))
            top.set_xlabel("samples trained on", fontsize=8)
    if episode:
        ax = axes[k]; k += 1
        right = ax.twinx()
        for name, what in episode:
            s, v = report.curve(run, name)
            share = name in dict(EPISODE_SHARES)
            (right if share else ax).plot(s, v, marker="o" if share else ".", ms=3, lw=1.2, ls="--" if share else "-",
                                          color=f"C{[n for n, _ in EPISODE_COUNTS + EPISODE_SHARES].index(name)}",
                                          label=f"{what} ({name})")
        ax.set_title("episodes: turns and tool calls per iteration", fontsize=9)
        ax.set_xlabel("iteration", fontsize=8)
        ax.set_ylabel("per episode (mean)", fontsize=8)
        right.set_ylabel("share of episodes", fontsize=8)
        right.set_ylim(-0.02, 1.02)
        ax.set_ylim(bottom=0)
        lines = ax.get_lines() + right.get_lines()
        ax.legend(lines, [line.get_label() for line in lines], fontsize=6)
        ax.grid(alpha=0.3)
    for name in plain:
        v = run["metrics"][name]
        s = run["step"][: len(v)]
        ok = np.isfinite(v)
        ax = axes[k]; k += 1
        ax.plot(s[ok], v[ok], marker="." if ok.sum() < 50 else None, lw=1)
        ax.set_title(report.named(run, name), fontsize=9)  # "gold (accuracy)": what gold is in this run
        ax.set_xlabel("step", fontsize=8)
        ax.grid(alpha=0.3)
    if stages:
        ax = axes[k]; k += 1
        for name in sorted(stages):
            v = stages[name]
            ok = np.isfinite(v) & (v > 0)  # 0: stage not run that step
            ax.plot(run["tstep"][: len(v)][ok], v[ok], lw=1, label=name)
        ax.set_title("stage time, max over ranks", fontsize=9)
        ax.set_xlabel("step", fontsize=8)
        ax.set_ylabel("seconds", fontsize=8)
        ax.set_yscale("log")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6, ncol=2)
    if lengths is not None and len(lengths) > 0:
        ax = axes[k]; k += 1
        hi = max(int(lengths.max()), run["max_new"] or 0)
        ax.hist(lengths, bins=np.arange(0, hi + 2) - 0.5 if hi <= 64 else 32)
        ax.set_title(f"response lengths, iteration {run['lengths_iter']} ({len(lengths)} responses)", fontsize=9)
        ax.set_xlabel("tokens", fontsize=8)
        ax.grid(alpha=0.3)
    for ax in axes[k:]:
        ax.set_visible(False)
    fig.suptitle(report.labels([run])[0] + (f" (git {run['code'].get('git_revision')})" if run["code"].get("git_revision") else ""), fontsize=10)
    fig.savefig(out, dpi=110)
    print(f"plot_run: wrote {out} ({len(plain)} metrics, {len(held)} held-out, {len(stages)} stages"
          f"{', the response lengths' if lengths is not None and len(lengths) else ''}"
          f"{', the episodes (' + ', '.join(k for k, _ in episode) + ')' if episode else ''})")
    if left:
        print("plot_run: left out (no value, or the same at every step): " + ", ".join(left))
    if dup:
        print("plot_run: left out (equal at every step to one drawn): " + ", ".join(f"{k} (= {v})" for k, v in sorted(dup.items())))
    if diag:
        print("plot_run: left out (the engine's diagnostics): " + ", ".join(diag))


if __name__ == "__main__":
    main()
