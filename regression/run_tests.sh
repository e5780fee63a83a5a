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
export HDF5_USE_FILE_LOCKING=FALSE
export RLFUSE_TMP; RLFUSE_TMP=$(mktemp -d "${TMPDIR:-/tmp}/rlfuse-test.XXXXXX")
# RLFUSE_KEEP=1: a failing suite keeps its files (each item's full log in .items/)
trap 'if [ "${RLFUSE_KEEP:-}" = 1 ] && [ "$failed" -gt 0 ]; then echo "# files kept in $RLFUSE_TMP"; else rm -rf "$RLFUSE_TMP"; fi' EXIT

passed=0; failed=0; skipped=0; failed_items=(); t_all=$(date +%s); patterns=("$@")
[ "${REPLACE:-}" = 1 ] && [ $# -eq 0 ] && patterns=('case *')
# TEST_JOBS items run at once (default: one per core, at most 8), each in a
# lane of its own; an item's lines are printed whole when it ends.
jobs=${TEST_JOBS:-$(nproc 2>/dev/null || echo 1)}
[[ $jobs =~ ^[1-9][0-9]*$ ]] || { echo "TEST_JOBS=$jobs: give a positive number of items to run at once" >&2; exit 2; }
[ "${TEST_JOBS:-}" ] || [ "$jobs" -le 8 ] || jobs=8
# the items that take longest start first (on the Zen 3 VM's 2 lanes: learn
# 512 s, doc_commands 303 s, the others 100 s or less), so that the last lane
# to end does not end long after the others
first=(learn doc_commands smollm2 rlvr plan_search hf_llama fusion_migrate cuda layouts)

# run_item NAME COMMAND...: runs one item, writes its result lines, counts
# them and checks them against the item's plan or tally; its last line is
# "RESULT passed failed skipped why", which the suite adds up.
run_item() {
  local name=$1; shift
  # in a folder of its own: scenarios write into $RLFUSE_TMP and must not meet it
  local log="$RLFUSE_TMP/.items/$(slug "$name").log" t0=$(date +%s) rc
  echo "=== $name"
  "$@" >"$log" 2>&1 </dev/null; rc=$?
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
  echo "  ($p passed, $f failed, $s skipped, $(( $(date +%s) - t0 )) s)"
  echo "RESULT $p $f $s $why"
}
slug() { echo "$1" | tr '/ ()' '____'; }
wanted() {
  [ ${#patterns[@]} -eq 0 ] && return 0
  local p; for p in "${patterns[@]}"; do [[ $1 == $p ]] && return 0; done; return 1
}
not_built() { echo "=== $1"; echo "  not ok - $BIN/$1 was not built"; failed=$((failed + 1)); failed_items+=("$1"); }

# queue NAME COMMAND...: an item to run, if its name is wanted
names=(); cmds=()
queue() {
  wanted "$1" || return 0
  local q; printf -v q '%q ' "${@:2}"; names+=("$1"); cmds+=("$q")
}
# test_cuda and the cuda modes of test_golden skip, saying so, without a GPU
for t in test_sys test_ops test_model test_io test_golden test_gen test_episodes test_rlmath test_ppo_mask test_reward test_reward_command test_env test_arith test_plan test_fuse test_search test_profile test_cuda test_cuda_gen; do
  [ -x "$BIN/$t" ] || { wanted $t && not_built $t; continue; }
  if [ "$t" = test_golden ]; then
    queue "$t" "$BIN/$t" regression/golden
    queue "$t (cuda fp32)" "$BIN/$t" regression/golden cuda fp32
    queue "$t (cuda bf16)" "$BIN/$t" regression/golden cuda bf16
  else queue "$t" "$BIN/$t"; fi
done
# the MPI unit tests, on 4 ranks (oversubscribed on small machines: one thread each)
for t in test_dist test_realloc test_sched test_exec test_cost test_ckpt test_nccl; do
  if [ -x "$BIN/$t" ]; then queue "$t (4 ranks)" $MPIEXEC $MPIEXEC_FLAGS -n 4 env OMP_NUM_THREADS=1 "$BIN/$t"
  elif wanted "$t (4 ranks)"; then not_built $t; fi
done
for s in regression/scenarios/*.sh; do
  queue "$(basename "$s" .sh)" bash "$s"
done
for c in regression/cases/*/; do
  queue "case $(basename "$c")" bash regression/run_case.sh "$c"
done

# as many lanes as items at most; an item's threads: 2 when the items run
# one at a time, else the cores a lane has (at least 1): OpenMP threads that
# outnumber the cores wait for each other at every barrier (a lane's run
# slowed 2.4-5x, not 2x). Lanes share the cores, so a rank waiting for MPI
# yields its core (src/sys/mpiwait.c).
[ "$jobs" -le ${#names[@]} ] || jobs=$((${#names[@]} > 0 ? ${#names[@]} : 1))
cores=$(nproc 2>/dev/null || echo 1)
[ "$jobs" -gt 1 ] && threads=$((cores / jobs > 1 ? cores / jobs : 1)) || threads=2
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-$threads}"
[ "$jobs" -gt 1 ] && export RLFUSE_WAIT_POLICY=${RLFUSE_WAIT_POLICY:-yield}

# the order they start in: the long ones first, then as listed above
order=()
for f in "${first[@]}"; do for i in "${!names[@]}"; do [ "${names[$i]}" = "$f" ] && order+=("$i"); done; done
for i in "${!names[@]}"; do [[ " ${first[*]} " == *" ${names[$i]} "* ]] || order+=("$i"); done

mkdir -p "$RLFUSE_TMP/.items"
declare -A running=() # pid -> item index
# collect PID: prints an ended item's lines and adds up its result
collect() {
  local i=${running[$1]} out r p f s why
  unset "running[$1]"
  out="$RLFUSE_TMP/.items/$(slug "${names[$i]}").out"
  r=$(grep '^RESULT ' "$out" | tail -1)
  grep -v '^RESULT ' "$out"
  if [ -z "$r" ]; then
    echo "  not ok - ${names[$i]}: the suite lost its result"; failed=$((failed + 1)); failed_items+=("${names[$i]}: lost"); return
  fi
  read -r _ p f s why <<<"$r"
  passed=$((passed + p)); failed=$((failed + f)); skipped=$((skipped + s))
  [ "$f" -eq 0 ] || failed_items+=("${names[$i]}: $why")
}
# reap: collects every item that has ended, after waiting for one when
# $1 items or more still run (bash's wait -n misses a job that ended before it
# is called, so the lanes are polled)
reap() {
  local pid ended
  while :; do
    ended=0
    for pid in "${!running[@]}"; do kill -0 "$pid" 2>/dev/null || { wait "$pid"; collect "$pid"; ended=1; }; done
    [ "$ended" = 1 ] || [ ${#running[@]} -lt "$1" ] && return
    sleep 0.2
  done
}
for i in "${order[@]}"; do
  reap "$jobs"
  eval "run_item \"\${names[$i]}\" ${cmds[$i]}" >"$RLFUSE_TMP/.items/$(slug "${names[$i]}").out" 2>&1 &
  running[$!]=$i
done
while [ ${#running[@]} -gt 0 ]; do reap 1; done

echo "suite time $(( $(date +%s) - t_all )) s"
echo "$passed passed, $failed failed, $skipped skipped"
# the last lines are what a CI log's tail shows: name what failed there
[ "$failed" -eq 0 ] || { echo "failed items:"; printf '  %s\n' "${failed_items[@]}"; }
[ "$failed" -eq 0 ]
