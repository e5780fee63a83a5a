#!/usr/bin/env python3
"""same_metrics: two runs of one deck (other layouts, devices) must record the
same /metrics in run.h5. Used by the layout and device scenarios.

Usage: same_metrics.py A/run.h5 B/run.h5 RTOL ATOL [UNMEASURED,...]

Every metric of A (tokens_per_s, a timing, and acts_grown_bytes, which
depends on the layout, excepted) must be in B with the
same shape, NaN exactly where A has NaN (rows where it was not measured),
and within |b - a| <= ATOL + RTOL |a| elsewhere. A metric that is NaN on
every row measures nothing and fails, unless it is named in UNMEASURED (what
the deck may not measure at all, e.g. eval_gold without -ppo_eval_every; a
named metric that holds numbers is compared like any other).
Prints one "# worst" line; exit status 1 with the reason on any failure.
"""
import sys

import h5py
import numpy as np


def main(a_path, b_path, rtol, atol, unmeasured=""):
    rtol, atol, unmeasured = float(rtol), float(atol), set(filter(None, unmeasured.split(",")))
    bad, worst = [], (0.0, "-")
    with h5py.File(a_path, "r") as fa, h5py.File(b_path, "r") as fb:
        ma, mb = fa["metrics"], fb["metrics"]
        for name in sorted(ma):
            if name in ("tokens_per_s", "acts_grown_bytes"):
                continue
            if name not in mb:
                bad.append(f"{name}: missing in {b_path}")
                continue
            x, y = ma[name][()].astype(np.float64), mb[name][()].astype(np.float64)
            if x.shape != y.shape:
                bad.append(f"{name}: shape {y.shape}, expected {x.shape}")
                continue
            nx, ny = np.isnan(x), np.isnan(y)
            if nx.all() and name not in unmeasured:
                bad.append(f"{name}: NaN on every row (measures nothing)")
                continue
            if (nx != ny).any():
                i = int(np.argmax(nx != ny))
                bad.append(f"{name}: NaN against a number at row {i} ({x[i]} vs {y[i]})")
                continue
            d = np.abs(x[~nx] - y[~nx])
            lim = atol + rtol * np.abs(x[~nx])
            if d.size and (d > lim).any():
                i = int(np.argmax(d - lim))
                bad.append(f"{name}: {y[~nx][i]} vs {x[~nx][i]} (|diff| {d[i]:.3g} > {lim[i]:.3g})")
            if d.size:
                rel = float((d / np.maximum(np.abs(x[~nx]), atol / max(rtol, 1e-300))).max())
                if rel > worst[0]:
                    worst = (rel, name)
    print(f"# worst metric: {worst[1]} (relative {worst[0]:.2e})")
    for b in bad:
        print(f"# metric {b}")
    return 1 if bad else 0


if __name__ == "__main__":
    if len(sys.argv) not in (5, 6):
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        sys.exit(2)
    sys.exit(main(*sys.argv[1:]))
