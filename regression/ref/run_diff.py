#!/usr/bin/env python3
"""Two PPO output directories hold the same run: rollouts.h5 (tokens and
other integers exact, floats within 1e-4 of each array's scale; the
engine's per-step timeline is skipped, it depends on the replica) and the
run.h5 metrics (regression/same_metrics.py: within 1e-4 relative, 1e-5
absolute, NaN only where A has NaN; eval_gold may be unmeasured, as in decks
without -ppo_eval_every). The layout and fusion scenarios use it to compare
a run against the one-rank run.
  regression/ref/run_diff.py DIR_A DIR_B   (exit status 1 and the first difference)"""
import os
import sys

import h5py
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import same_metrics  # noqa: E402

a, b = sys.argv[1], sys.argv[2]
with h5py.File(a + "/rollouts.h5", "r") as fa, h5py.File(b + "/rollouts.h5", "r") as fb:
    assert sorted(fa) == sorted(fb), (list(fa), list(fb))
    for it in fa:
        for k in fa[it]:
            if k.startswith("gen_step"):
                continue  # the engine's timeline depends on the replica
            x, y = fa[it][k][()], fb[it][k][()]
            if x.dtype.kind == "i":
                assert np.array_equal(x, y), (it, k)
            else:
                assert np.abs(x - y).max() <= 1e-4 * (np.abs(x).max() + 1e-6), (it, k)
sys.exit(same_metrics.main(a + "/run.h5", b + "/run.h5", 1e-4, 1e-5, "eval_gold"))
