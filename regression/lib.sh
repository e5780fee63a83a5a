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
