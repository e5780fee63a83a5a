#!/usr/bin/env python3
"""report: a one-page picture and a short text summary of one or more run
records (run.h5), overlaid for comparison, from the run records alone.

Usage: tools/py tools/report.py RUN.h5 [RUN2.h5 ...] -o report.png

Panels: learning curves (loss, gold score, reward-model score, KL, entropy,
response length, and for an asynchronous run its staleness and the
fractions of each iteration that generation and training were busy:
whichever the runs recorded; the held-out accuracy, reward and pass@k
start at step 0 with /summary's initial_* value and end with its final_*
one), per-stage times per step (the slowest rank), the mean time of each
stage per run, stacked, with the measured wall time of an iteration drawn
across the bar (stages that ran at the same time, as an asynchronous run's
generation and training do, stack above it: the part above is the
overlap), and the histogram of the response lengths of the last recorded
PPO/GRPO/RLOO iteration (/responses).
The summary of an asynchronous run (-async_staleness > 0) ends with what a
synchronous iteration would have cost (the stages' mean times added, as
they run one after another without it) against the measured wall time per
iteration, and their quotient, the speed-up.
The text summary goes to stdout and to report.txt beside the picture (the
same name with .txt); it lists the held-out evaluations of evals.h5 beside
each record (iteration, accuracy or gold score, mean reward, mean response
length). A file that is not a run record is one line
"report: error: ..." and exit status 1, with nothing written. Needs numpy,
h5py and matplotlib (Agg backend, no display).
"""
import argparse
import math
import os
import sys

import numpy as np

# The learning curves in the order they are drawn: (title, metric names, the first present is used).
CURVES = [
    ("loss", ["loss", "actor_loss"]),
    ("held-out loss", ["eval_loss"]),
    ("gold (judge score, or accuracy)", ["gold"]),  # the title says which when every run agrees (title())
    ("held-out gold (or accuracy)", ["eval_gold"]),
    ("held-out pass@k", ["eval_pass_k"]),
    ("reward (mean)", ["reward"]),
    ("held-out reward", ["eval_reward"]),
    ("reward-model score", ["rm_score"]),
    ("pairwise accuracy (held-out)", ["eval_accuracy"]),
    ("KL to the reference (nats/response)", ["kl"]),
    ("entropy (nats/token)", ["entropy"]),
    ("response length (mean)", ["response_len_mean"]),
    ("critic loss", ["critic_loss"]),
    ("staleness (iterations, mean)", ["async_staleness_mean"]),  # asynchronous runs (-async_staleness > 0)
    ("generation busy (fraction of the iteration)", ["async_gen_busy"]),
    ("training busy (fraction of the iteration)", ["async_train_busy"]),
]
# Held-out curves whose first and last points are in /summary: the policy
# before training (step 0) and after it (the last step).
ENDS = {"eval_gold": ("initial_gold", "final_gold"), "eval_reward": ("initial_reward", "final_reward"),
        "eval_pass_k": ("initial_pass_k", "final_pass_k")}
# Stage columns that are sums of others, left out of the stacked per-run bars.
TOTALS = {"iteration"}


PROG = "report"  # the name errors give (tools/plot_run.py loads with this module)


def fail(msg):
    print(f"{PROG}: error: {msg}", file=sys.stderr)
    sys.exit(1)


def text(v):
    return v.decode() if isinstance(v, bytes) else str(v)


def load(path):
    """Everything the report draws from one run record, as plain arrays."""
    import h5py

    if not os.path.isfile(path):
        fail(f"{path}: no such file")
    try:
        f = h5py.File(path, "r")
    except OSError as e:
        fail(f"{path}: not an HDF5 file ({str(e).splitlines()[0]})")
    with f:
        for need in ("code", "metrics/step", "timing/step"):
            if need not in f:
                fail(f"{path}: not an rlfuse run record (no /{need})")
        run = {"path": path, "code": {k: text(v) for k, v in f["code"].attrs.items()}}
        run["step"] = f["metrics/step"][()].astype(np.float64)
        run["metrics"] = {k: d[()].astype(np.float64) for k, d in f["metrics"].items() if k != "step"}
        run["tstep"] = f["timing/step"][()].astype(np.float64)
        run["stages"] = {k[:-4]: d[()].astype(np.float64) for k, d in f["timing"].items() if k.endswith("_max")}
        run["summary"] = {k: float(v) for k, v in f["summary"].attrs.items()} if "summary" in f else {}
        for old in ("sft_gold", "sft_reward", "sft_pass_k"):  # records written before the rename to initial_*
            if old in run["summary"]:
                run["summary"].setdefault("initial" + old[3:], run["summary"].pop(old))
        run["lengths"] = f["responses/lengths"][()] if "responses/lengths" in f else None
        run["lengths_iter"] = int(f["responses"].attrs.get("iteration", 0)) if "responses" in f else 0
        params = f["parameters"].attrs if "parameters" in f else {}
        k = text(params.get("async_staleness", "0"))
        run["staleness"] = int(k) if k.isdigit() else 0
        run["max_new"] = int(text(params["gen_max_new_tokens"])) if "gen_max_new_tokens" in params else None
        run["rollout_batch"] = int(text(params["rollout_batch"])) if "rollout_batch" in params and text(params["rollout_batch"]).isdigit() else 0
        # what gold is (the datasets keep their names): the judge's score on the
        # built-in sort task's prompts, else the accuracy against reference answers
        p = {k: text(params[k]) for k in ("task", "ppo_prompts", "ppo_eval_file") if k in params}
        sort = p.get("task") == "sort" and p.get("ppo_prompts", "builtin") == "builtin"
        run["gold_name"] = "gold score" if sort else "accuracy"
        run["eval_gold_name"] = "gold score" if sort and not p.get("ppo_eval_file") else "accuracy"
    run["evals"] = load_evals(os.path.join(os.path.dirname(path), "evals.h5"))
    return run


def load_evals(path):
    """The held-out evaluations in evals.h5 beside the record (src/ppo/eval.c), in the
    order they ran: (name, iteration, gold, reward, mean response length, samples);
    iteration 0 is the reference (the policy before training), None -mode eval's."""
    import h5py

    if not os.path.isfile(path):
        return []
    out = []
    try:
        with h5py.File(path, "r") as f:
            for name, g in f.items():
                if not isinstance(g, h5py.Group):
                    continue
                it = int(name[5:]) if name.startswith("iter_") and name[5:].isdigit() else 0 if name == "reference" else None
                L = g["response_lengths"][()] if "response_lengths" in g else np.zeros(0)
                out.append((name, it, float(g.attrs.get("gold", np.nan)), float(g.attrs.get("reward", np.nan)),
                            float(L.mean()) if len(L) else np.nan, len(L)))
    except OSError as e:
        fail(f"{path}: not an HDF5 file ({str(e).splitlines()[0]})")
    return sorted(out, key=lambda e: (e[1] is None, e[1] if e[1] is not None else 0))


def labels(runs):
    """Short distinct names: the run's directory (and file) relative to what the paths share."""
    paths = [os.path.abspath(r["path"]) for r in runs]
    if len(paths) == 1:
        return [os.path.join(os.path.basename(os.path.dirname(paths[0])), os.path.basename(paths[0]))]
    common = os.path.commonpath([os.path.dirname(p) for p in paths])
    out = [os.path.relpath(p, common) for p in paths]
    return [o if o.count(os.sep) else os.path.join(os.path.basename(common), o) for o in out]


# The metrics and /summary values that hold gold, by which name says what they are.
GOLD_KEYS = {"gold": "gold_name", "eval_gold": "eval_gold_name", "initial_gold": "eval_gold_name", "final_gold": "eval_gold_name"}
# A critic's columns: all zero in a critic-free run (GRPO, RLOO, REINFORCE++), which a critic never gives.
CRITIC_KEYS = {"critic_loss", "value_clip_frac", "critic_grad_norm"}


def named(run, key):
    """The metric's name, with what gold is for the keys that hold it: "eval_gold (accuracy)"."""
    return f"{key} ({run[GOLD_KEYS[key]]})" if key in GOLD_KEYS else key


def summary_text(runs, names):
    lines = []
    for run, name in zip(runs, names):
        c = run["code"]
        n = len(run["step"])
        lines.append(f"{name}: mode {c.get('mode', '?')}, {n} steps, {c.get('ranks', '?')} ranks x {c.get('threads', '?')} threads, git {c.get('git_revision', '?')}")
        for title, keys in CURVES:
            key = next((k for k in keys if k in run["metrics"]), None)
            if key is None:
                continue
            v = run["metrics"][key]
            ok = np.isfinite(v)
            if key in CRITIC_KEYS and not (v[ok] != 0).any():
                continue  # the algorithm has no critic
            if ok.any():
                lines.append(f"  {named(run, key):<20s} first {v[ok][0]:10.4g}  last {v[ok][-1]:10.4g}  min {v[ok].min():10.4g}  max {v[ok].max():10.4g}")
        st = {s: v for s, v in run["stages"].items() if s not in TOTALS and np.isfinite(v).any()}
        total = sum(np.nansum(v) for v in st.values())
        if n and total > 0:
            parts = sorted(st.items(), key=lambda kv: -np.nansum(kv[1]))
            lines.append("  time per step " + ", ".join(f"{s} {np.nansum(v) / n:.3g} s ({100 * np.nansum(v) / total:.0f}%)" for s, v in parts if np.nansum(v) > 0))
            wall, work = wall_and_work(run)
            if wall > 0:
                lines.append(f"  wall time per step {wall:.3g} s, the stages' times added {work:.3g} s"
                             + (f": {work - wall:.3g} s of stages overlapped" if work > wall
                                else f": {wall - work:.3g} s in no stage (waiting, transfers)" if wall > work else ""))
            if run["staleness"] > 0 and wall > 0:
                lines.append(f"  asynchronous (staleness {run['staleness']}): a synchronous iteration would take {work:.3g} s (the stages one "
                             f"after another), measured {wall:.3g} s per iteration: speed-up {work / wall:.2f}x")
        if run["lengths"] is not None:
            L = run["lengths"]
            lines.append(f"  response lengths (iteration {run['lengths_iter']}): mean {L.mean():.2f}, median {np.median(L):.0f}, max {L.max()}, {len(L)} responses")
        for name, it, gold, reward, length, n in run["evals"]:
            at = "-mode eval" if it is None else "before training" if name == "reference" else f"iteration {it}"
            score = f"{run['eval_gold_name']} {gold:.4f}, " if np.isfinite(gold) else ""
            lines.append(f"  evals.h5 /{name} ({at}): {score}reward {reward:+.4f}, response length {length:.2f} (mean, EOS included), {n} responses")
        for k, v in sorted(run["summary"].items()):
            lines.append(f"  summary {named(run, k)} = {v:.6g}")
    return "\n".join(lines) + "\n"


def wall_and_work(run):
    """(measured wall seconds per step, the stages' seconds per step added): what overlapped is their difference."""
    n = max(len(run["tstep"]), 1)
    wall = float(np.nansum(run["stages"]["iteration"])) / n if "iteration" in run["stages"] else 0.0
    work = sum(float(np.nansum(v)) for s, v in run["stages"].items() if s not in TOTALS) / n
    return wall, work


def curve(run, key):
    """(steps, values) of a metric, finite points only, with the held-out curves' ends from /summary."""
    v = run["metrics"].get(key)
    s = run["step"][: len(v)] if v is not None else np.zeros(0)
    ok = np.isfinite(v) if v is not None else np.zeros(0, bool)
    s, v = s[ok], v[ok] if v is not None else np.zeros(0)
    a, b = (run["summary"].get(x, np.nan) for x in ENDS.get(key, ("", "")))
    if np.isfinite(a):
        s, v = np.concatenate([[0.0], s]), np.concatenate([[a], v])
    if np.isfinite(b) and len(run["step"]):
        s, v = np.concatenate([s, [run["step"][-1]]]), np.concatenate([v, [b]])
    return s, v


def title_of(runs, title, keys):
    """A gold panel's title: "accuracy" or "gold score" when every run's gold is that."""
    if keys[0] not in GOLD_KEYS:
        return title
    kinds = {r[GOLD_KEYS[keys[0]]] for r in runs}
    if len(kinds) > 1:
        return title
    return ("held-out " if keys[0] == "eval_gold" else "") + kinds.pop()


def draw(runs, names, out):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    # a curve some run measured: finite and not all zero (a critic-free run's critic loss, say)
    curves = [(t, ks) for t, ks in CURVES if any(k in r["metrics"] and (curve(r, k)[1] != 0).any() for r in runs for k in ks)]
    stages = sorted({s for r in runs for s, v in r["stages"].items() if (v > 0).any()})
    has_len = any(r["lengths"] is not None for r in runs)
    npanel = len(curves) + len(runs) * bool(stages) + bool(stages) + has_len
    ncol = min(3, max(npanel, 1))
    nrow = math.ceil(npanel / ncol)
    fig, axes = plt.subplots(nrow, ncol, figsize=(4.6 * ncol, 3.3 * nrow), squeeze=False)
    axes = list(axes.ravel())
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    k = 0
    for title, keys in curves:
        ax = axes[k]; k += 1
        for i, r in enumerate(runs):
            key = next((x for x in keys if x in r["metrics"]), None)
            if key is None:
                continue
            s, v = curve(r, key)
            if not (v != 0).any():  # all zero: the run has no such model (GRPO/RLOO's critic)
                continue
            ax.plot(s, v, lw=1.2, color=colors[i % len(colors)], marker="." if len(v) < 40 else None, label=names[i])
        ax.set_title(title_of(runs, title, keys), fontsize=10); ax.set_xlabel("step"); ax.grid(alpha=0.3)
    if stages:
        smap = {s: plt.get_cmap("tab20")(j % 20) for j, s in enumerate(stages)}
        for i, r in enumerate(runs):
            ax = axes[k]; k += 1
            for s in stages:
                v = r["stages"].get(s)
                if v is None or not (v > 0).any():
                    continue
                ok = np.isfinite(v) & (v > 0)
                ax.plot(r["tstep"][: len(v)][ok], v[ok], lw=1, color=smap[s], label=s, ls="--" if s in TOTALS else "-")
            ax.set_yscale("log"); ax.set_title(f"stage seconds per step: {names[i]}", fontsize=9)
            ax.set_xlabel("step"); ax.grid(alpha=0.3); ax.legend(fontsize=6, ncol=2)
        ax = axes[k]; k += 1
        bottom = np.zeros(len(runs))
        for s in stages:
            if s in TOTALS:
                continue
            h = np.array([np.nansum(r["stages"].get(s, [0.0])) / max(len(r["tstep"]), 1) for r in runs])
            if (h > 0).any():
                ax.bar(range(len(runs)), h, bottom=bottom, color=smap[s], label=s)
                bottom += h
        for i, r in enumerate(runs):  # the measured iteration: what stacks above it overlapped
            wall, work = wall_and_work(r)
            if wall > 0:
                ax.hlines(wall, i - 0.45, i + 0.45, colors="black", lw=2, label="wall time" if i == 0 else None)
                over = f"\noverlap {work - wall:.3g} s" + (f", {work / wall:.2f}x" if r["staleness"] > 0 else "") if work > wall else ""
                ax.annotate(f"wall {wall:.3g} s{over}", (i, max(wall, work)), ha="center", va="bottom", fontsize=6)
        ax.set_xticks(range(len(runs)), names, fontsize=7, rotation=15)
        ax.set_ylabel("seconds per step"); ax.set_title("mean time per step by stage (black: wall time)", fontsize=10)
        top = max(max(wall_and_work(r)) for r in runs)
        if top > 0:
            ax.set_ylim(0, 1.8 * top)  # room for the legend above the bars and their labels
        ax.legend(fontsize=6, ncol=3, loc="upper center"); ax.grid(alpha=0.3, axis="y")
    if has_len:
        ax = axes[k]; k += 1
        top = max(int(r["lengths"].max()) for r in runs if r["lengths"] is not None)
        top = max(top, max((r["max_new"] or 0) for r in runs))
        bins = np.arange(0.5, top + 1.5, 1.0)
        for i, r in enumerate(runs):
            if r["lengths"] is not None:
                ax.hist(r["lengths"], bins=bins, histtype="step" if len(runs) > 1 else "stepfilled", lw=1.5,
                        color=colors[i % len(colors)], alpha=1.0 if len(runs) > 1 else 0.7, label=f"{names[i]} (iter {r['lengths_iter']})")
        ax.set_title("response lengths, last iteration", fontsize=10); ax.set_xlabel("tokens (with EOS)"); ax.set_ylabel("responses")
        ax.grid(alpha=0.3)
    for ax in axes[k:]:
        ax.set_visible(False)
    if len(runs) > 1 or has_len:
        handles, labs = axes[0].get_legend_handles_labels()
        if handles:
            fig.legend(handles, labs, loc="upper right", fontsize=8)
    fig.suptitle("rlfuse run report: " + ", ".join(names), fontsize=11)
    fig.tight_layout(rect=(0, 0, 1, 0.96))
    tmp = out + f".tmp.{os.getpid()}.png"
    fig.savefig(tmp, dpi=100)
    os.replace(tmp, out)


def main():
    ap = argparse.ArgumentParser(description="Plots and summarises rlfuse run records (run.h5).")
    ap.add_argument("runs", nargs="+", metavar="RUN.h5")
    ap.add_argument("-o", "--output", default="report.png", help="the picture (PNG); the summary goes beside it as .txt")
    a = ap.parse_args()
    if not a.output.endswith(".png"):
        fail(f"-o {a.output}: the picture must be a .png file")
    runs = [load(p) for p in a.runs]  # every file is checked before anything is written
    names = labels(runs)
    txt = summary_text(runs, names)
    draw(runs, names, a.output)
    txt_path = a.output[:-4] + ".txt"
    with open(txt_path + f".tmp.{os.getpid()}", "w") as f:
        f.write(txt)
    os.replace(txt_path + f".tmp.{os.getpid()}", txt_path)
    sys.stdout.write(txt)
    print(f"report: wrote {a.output} and {txt_path} ({len(runs)} run{'s' if len(runs) > 1 else ''})")


if __name__ == "__main__":
    main()
