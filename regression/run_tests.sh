#!/usr/bin/env bash
# The regression suite (`make test`): the unit-test programs, the scenario
# scripts and the deck regressions (cases/). Exits non-zero on any failure.
# REPLACE=1 regenerates the stored deck results (regression/cases/*) and runs
# nothing else (`make test REPLACE=1`, after a deliberate change of results).
# Arguments, if any, are shell patterns: only the items whose name matches one
# run (regression/run_tests.sh 'case *' restart).
#
# The line format every item prints (scenarios get it from regression/lib.sh):
#   1..N                  plan: N results will follow (a scenario declares it
#                         with `plan N` before its checks)
#   ok - what             passed
#   not ok - what: why    failed
#   skip - what: why      could not run here (no GPU, too few ranks); counted
#                         apart, never as a pass
#   # ...  HINT: ...      comments, echoed
# The C programs end with their own tally "P passed, F failed[, S skipped]"
# instead of a plan. An item fails when it exits non-zero, when it prints
# neither a plan nor a tally, or when the number of ok/not ok/skip lines
# differs from it (a check that vanished: a Python block that raised, a
# program that stopped early). The suite ends with exactly one line
# "N passed, N failed, N skipped".
set -u
cd "$(dirname "$0")/.."
export BIN="${BIN:-bin}" PYTHON="${PYTHON:-/usr/bin/python3}" MPIEXEC="${MPIEXEC:-mpiexec}" MPIEXEC_FLAGS="${MPIEXEC_FLAGS--bind-to none}"
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-2}" HDF5_USE_FILE_LOCKING=FALSE
export RLFUSE_TMP; RLFUSE_TMP=$(mktemp -d "${TMPDIR:-/tmp}/rlfuse-test.XXXXXX")
# RLFUSE_KEEP=1: a failing suite keeps its files (each item's full log in .items/)
trap 'if [ "${RLFUSE_KEEP:-}" = 1 ] && [ "$failed" -gt 0 ]; then echo "# files kept in $RLFUSE_TMP"; else rm -rf "$RLFUSE_TMP"; fi' EXIT

passed=0; failed=0; skipped=0; failed_items=(); t_all=$(date +%s); patterns=("$@")
[ "${REPLACE:-}" = 1 ] && [ $# -eq 0 ] && patterns=('case *')

# run_item NAME COMMAND...: runs one item, echoes its result lines, counts them
# and checks them against the item's plan or tally.
run_item() {
  local name=$1; shift
  wanted "$name" || return 0
  # in a folder of its own: scenarios write into $RLFUSE_TMP and must not meet it
  local log="$RLFUSE_TMP/.items/$(echo "$name" | tr '/ ()' '____').log" t0=$(date +%s) rc
  mkdir -p "$RLFUSE_TMP/.items"
  echo "=== $name"
  "$@" >"$log" 2>&1; rc=$?
  grep -E '^(ok|not ok|skip) - |^(HINT|#)' "$log" | sed 's/^/  /'
  local p f s want
  p=$(grep -c '^ok - ' "$log"); f=$(grep -c '^not ok - ' "$log"); s=$(grep -c '^skip - ' "$log")
  want=$(sed -n 's/^1\.\.\([0-9][0-9]*\)$/\1/p' "$log" | tail -1)
  [ -n "$want" ] || want=$(sed -nE 's/^([0-9]+) passed, ([0-9]+) failed(, ([0-9]+) skipped)?.*$/\1 \2 \4/p' "$log" | tail -1 | awk '{ print $1 + $2 + $3 }')
  local why; why=$(grep -m1 '^not ok - ' "$log" | cut -c10-200)
  if [ -z "$want" ]; then
    why=${why:-"printed no plan (1..N) and no tally (P passed, F failed), so vanished checks cannot be seen"}
    f=$((f + 1)); echo "  not ok - $name: printed no plan (1..N) and no tally (P passed, F failed), so vanished checks cannot be seen"
  elif [ $((p + f + s)) -ne "$want" ]; then
    why=${why:-"$((p + f + s)) results for $want planned"}
    echo "  not ok - $name: $((p + f + s)) results for $want planned (a check vanished, or the plan is out of date)"; f=$((f + 1))
  fi
  if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
    why="exited with status $rc: $(tail -1 "$log" | cut -c1-150)"
    f=1; echo "  not ok - $name exited with status $rc:"; tail -15 "$log" | sed 's/^/    /'
  fi
  passed=$((passed + p)); failed=$((failed + f)); skipped=$((skipped + s))
  [ "$f" -eq 0 ] || failed_items+=("$name: $why")
  echo "  ($p passed, $f failed, $s skipped, $(( $(date +%s) - t0 )) s)"
}
wanted() {
  [ ${#patterns[@]} -eq 0 ] && return 0
  local p; for p in "${patterns[@]}"; do [[ $1 == $p ]] && return 0; done; return 1
}
not_built() { echo "=== $1"; echo "  not ok - $BIN/$1 was not built"; failed=$((failed + 1)); failed_items+=("$1"); }

# test_cuda and the cuda modes of test_golden skip, saying so, without a GPU
for t in test_sys test_ops test_model test_io test_golden test_gen test_episodes test_rlmath test_ppo_mask test_reward test_reward_command test_env test_arith test_plan test_fuse test_search test_profile test_cuda test_cuda_gen; do
  [ -x "$BIN/$t" ] || { wanted $t && not_built $t; continue; }
  if [ "$t" = test_golden ]; then
    run_item "$t" "$BIN/$t" regression/golden
    run_item "$t (cuda fp32)" "$BIN/$t" regression/golden cuda fp32
    run_item "$t (cuda bf16)" "$BIN/$t" regression/golden cuda bf16
  else run_item "$t" "$BIN/$t"; fi
done
# the MPI unit tests, on 4 ranks (oversubscribed on small machines: one thread each)
for t in test_dist test_realloc test_sched test_exec test_cost test_ckpt test_nccl; do
  if [ -x "$BIN/$t" ]; then run_item "$t (4 ranks)" $MPIEXEC $MPIEXEC_FLAGS -n 4 env OMP_NUM_THREADS=1 "$BIN/$t"
  elif wanted "$t (4 ranks)"; then not_built $t; fi
done
for s in regression/scenarios/*.sh; do
  run_item "$(basename "$s" .sh)" bash "$s"
done
for c in regression/cases/*/; do
  run_item "case $(basename "$c")" bash regression/run_case.sh "$c"
done

echo "suite time $(( $(date +%s) - t_all )) s"
echo "$passed passed, $failed failed, $skipped skipped"
# the last lines are what a CI log's tail shows: name what failed there
[ "$failed" -eq 0 ] || { echo "failed items:"; printf '  %s\n' "${failed_items[@]}"; }
[ "$failed" -eq 0 ]
