#!/usr/bin/env python3
"""Two PPO output directories hold the same run: rollouts.h5 (tokens and
other integers exact, floats within 1e-4 of each array's scale; the
engine's per-step timeline is skipped, it depends on the replica) and the
run.h5 metrics (within 1e-4 relative, 1e-5 absolute; tokens_per_s skipped).
The layout scenarios use it to compare a run against the one-rank run.
  tools/run_diff.py DIR_A DIR_B   (exit status 1 and the first difference)"""
import sys, h5py, numpy as np

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
with h5py.File(a + "/run.h5", "r") as fa, h5py.File(b + "/run.h5", "r") as fb:
    for k in fa["metrics"]:
        if k in ("tokens_per_s",):
            continue
        x, y = fa["metrics"][k][()], fb["metrics"][k][()]
        assert np.allclose(x, y, rtol=1e-4, atol=1e-5, equal_nan=True), (k, x, y)
