# Helpers shared by the scenario scripts (sourced, not run).
# Each check prints "ok - what" or "not ok - what: why".
fails=0
ok()     { echo "ok - $*"; }
not_ok() { echo "not ok - $*"; fails=$((fails + 1)); }
check()  { local what=$1; shift; if "$@"; then ok "$what"; else not_ok "$what"; fi; }
rlfuse() { "$MPIEXEC" $MPIEXEC_FLAGS -n 1 "$BIN/rlfuse" "$@"; }
finish() { exit $((fails > 0)); }
