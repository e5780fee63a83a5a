#!/usr/bin/env bash
# The regression suite (`make test`). Runs the unit-test programs, the
# scenario scripts and the deck regressions; each prints "ok - ..." or
# "not ok - ..." lines. Ends with "N passed, N failed" and exits non-zero on
# any failure. REPLACE=1 regenerates the stored deck results instead of
# comparing against them.
set -u
cd "$(dirname "$0")/.."
export BIN="${BIN:-bin}" PYTHON="${PYTHON:-/usr/bin/python3}" MPIEXEC="${MPIEXEC:-mpiexec}" MPIEXEC_FLAGS="${MPIEXEC_FLAGS--bind-to none}"
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-2}" HDF5_USE_FILE_LOCKING=FALSE
export RLFUSE_TMP; RLFUSE_TMP=$(mktemp -d "${TMPDIR:-/tmp}/rlfuse-test.XXXXXX")
trap 'rm -rf "$RLFUSE_TMP"' EXIT

passed=0; failed=0; t_all=$(date +%s)

# Runs one item, echoes its output, counts its ok/not ok lines. An item that
# exits non-zero without reporting a failure counts as one failure.
run_item() {
  local name=$1; shift
  local log="$RLFUSE_TMP/$(echo "$name" | tr '/ ' '__').log" t0=$(date +%s) rc
  echo "=== $name"
  "$@" >"$log" 2>&1; rc=$?
  grep -E '^(ok|not ok|HINT|#)' "$log" | sed 's/^/  /'
  local p f; p=$(grep -c '^ok - ' "$log"); f=$(grep -c '^not ok - ' "$log")
  if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
    f=1; echo "  not ok - $name exited with status $rc:"; tail -15 "$log" | sed 's/^/    /'
  fi
  passed=$((passed + p)); failed=$((failed + f))
  echo "  ($p passed, $f failed, $(( $(date +%s) - t0 )) s)"
}

# test_cuda and the cuda modes of test_golden skip, saying so, without a GPU
for t in test_sys test_ops test_model test_io test_golden test_gen test_rlmath test_plan test_fuse test_cuda; do
  [ -x "$BIN/$t" ] || { echo "=== $t"; echo "  not ok - $BIN/$t was not built"; failed=$((failed + 1)); continue; }
  if [ "$t" = test_golden ]; then
    run_item "$t" "$BIN/$t" regression/golden
    run_item "$t (cuda fp32)" "$BIN/$t" regression/golden cuda fp32
    run_item "$t (cuda bf16)" "$BIN/$t" regression/golden cuda bf16
  else run_item "$t" "$BIN/$t"; fi
done
# the MPI unit tests, on 4 ranks (oversubscribed on small machines: one thread each)
for t in test_dist test_realloc test_sched test_exec test_nccl; do
  if [ -x "$BIN/$t" ]; then run_item "$t (4 ranks)" $MPIEXEC $MPIEXEC_FLAGS -n 4 env OMP_NUM_THREADS=1 "$BIN/$t"
  else echo "=== $t"; echo "  not ok - $BIN/$t was not built"; failed=$((failed + 1)); fi
done
for s in regression/scenarios/*.sh; do
  run_item "$(basename "$s" .sh)" bash "$s"
done
for c in regression/cases/*/; do
  run_item "case $(basename "$c")" bash regression/run_case.sh "$c"
done

echo "suite time $(( $(date +%s) - t_all )) s"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
