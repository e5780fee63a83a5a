# Helpers shared by the scenario scripts (sourced, not run).
# Each check prints "ok - what" or "not ok - what: why".
fails=0
ok()     { echo "ok - $*"; }
not_ok() { echo "not ok - $*"; fails=$((fails + 1)); }
check()  { local what=$1; shift; if "$@"; then ok "$what"; else not_ok "$what"; fi; }
rlfuse() { "$MPIEXEC" $MPIEXEC_FLAGS -n 1 "$BIN/rlfuse" "$@"; }
finish() { exit $((fails > 0)); }

# Two runs' rollouts.h5 (tokens exact, floats within 1e-4 of each array's scale)
# and run.h5 metrics (1e-4 relative) are the same: same_run_dirs DIR_A DIR_B.
same_run_dirs() {
  "$PYTHON" - "$1" "$2" <<'PY'
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
PY
}
