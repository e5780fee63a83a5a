# Helpers shared by the scenario scripts (sourced, not run). The line format
# is the suite's (regression/run_tests.sh counts it):
#   1..N                  the plan: N checks will report (plan N, once)
#   ok - what             a check that passed
#   not ok - what: why    a check that failed
#   skip - what: why      a check that could not run here (never a pass)
# A scenario whose run ends with fewer (or more) results than its plan fails,
# so a check that vanishes (a Python block that raised, awk given no input)
# cannot leave the suite green.
fails=0
plan()   { echo "1..$1"; }
ok()     { echo "ok - $*"; }
not_ok() { echo "not ok - $*"; fails=$((fails + 1)); }
skip()   { echo "skip - $*"; }
check()  { local what=$1; shift; if "$@"; then ok "$what"; else not_ok "$what"; fi; }
# within WHAT VALUE LO HI: ok when VALUE is a number with LO <= VALUE <= HI;
# an empty or non-numeric VALUE (the line it came from is missing) fails
within() {
  if [[ $2 =~ ^[-+]?[0-9]*\.?[0-9]+([eE][-+]?[0-9]+)?$ ]] && awk -v v="$2" -v lo="$3" -v hi="$4" 'BEGIN { exit !(v + 0 >= lo + 0 && v + 0 <= hi + 0) }'
  then ok "$1"; else not_ok "$1: measured '$2', allowed [$3, $4]"; fi
}
# py WHAT ARGS... <<'PY': a Python block that prints its own ok/not ok lines;
# an exception (or any non-zero exit) is one more failure
py() { local what=$1; shift; "$PYTHON" - "$@" || not_ok "$what: the Python block stopped with an error (traceback above)"; }
rlfuse() { "$MPIEXEC" $MPIEXEC_FLAGS -n 1 "$BIN/rlfuse" "$@"; }
finish() { exit $((fails > 0)); }

# expect_error WHAT PATTERN ARGS...: rlfuse ARGS must exit non-zero with
# exactly one line "rlfuse: error: ...PATTERN" and leave $keep (a directory of
# an earlier run, if set) byte-identical with no new files.
expect_error() {
  local what=$1 pat=$2; shift 2
  local err rc before=""; err=$(mktemp "$RLFUSE_TMP/err.XXXXXX")
  [ -n "${keep:-}" ] && before=$(cd "$keep" && ls && md5sum *)
  rlfuse "$@" >/dev/null 2>$err; rc=$?
  local lines; lines=$(grep -c . $err)
  if [ $rc -eq 0 ]; then not_ok "$what: exit status 0"; return; fi
  if [ "$lines" -ne 1 ] || ! grep -q -- "^rlfuse: error: .*$pat" $err; then not_ok "$what: expected one line matching '$pat', got: $(head -3 $err | cut -c1-300)"; return; fi
  if [ -n "${keep:-}" ] && [ "$(cd "$keep" && ls && md5sum *)" != "$before" ]; then not_ok "$what: earlier output changed"; return; fi
  ok "$what ($(cut -c1-110 $err))"
}

# Two runs' rollouts.h5 (tokens exact, floats within 1e-4 of each array's scale)
# and run.h5 metrics (regression/same_metrics.py: 1e-4 relative, NaN only
# where A has NaN; eval_gold may be unmeasured, as in decks without
# -ppo_eval_every) are the same: same_run_dirs DIR_A DIR_B.
same_run_dirs() {
  "$PYTHON" - "$1" "$2" <<'PY' || return 1
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
PY
  "$PYTHON" regression/same_metrics.py "$1/run.h5" "$2/run.h5" 1e-4 1e-5 eval_gold
}
