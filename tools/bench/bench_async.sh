#!/usr/bin/env bash
# Asynchronous RL on the long-tailed workload (input/longtail.deck,
# docs/async.md): PPO on 2 ranks (one per core, one thread each) with the
# disaggregated preset (training on rank 0; generation and the inference
# calls on rank 1), synchronous (-async_staleness 0) and with staleness 1,
# run in turn ROUNDS times each so that a busy machine slows them alike.
# Per variant: the mean time per iteration over the iterations after the
# first (run.h5 /timing/iteration_max), the generation's and the
# training's busy fractions, and the cost model's estimate of the same
# iterations (a profile of this machine measured here; each iteration
# estimated from its own rollout, -cost_lengths rollouts:FILE:iter_K, as
# tools/bench/bench_plan.sh does). Prints
#   async K<k> iter_s <measured> estimated <s> error <%> gen_busy <f> train_busy <f> trained_len <mean response tokens trained>
#   async ratio K1/K0 <x> (estimated <x>)
#   async ratio K1p/K0 <x> (estimated <x>)
#   async bound K1/K0 >= <x>: ...
# The bound is the synchronous run's share of its iteration spent in the
# two trainings (both on the training rank in this plan, so no order of the
# calls makes an iteration of the same training shorter; docs/async.md).
# The policy and reward model come from FIXTURE (a directory with
# sft/final.h5 and rm/final.h5, e.g. tools/bench/bench_fusion.sh's), made here
# when absent (the deck's pipeline with one PPO iteration: about 4 minutes
# on 2 idle cores).
#   tools/bench/bench_async.sh [FIXTURE]       (ITERS, default 6; ROUNDS, default 2)
set -u
cd "$(dirname "$0")/../.."
BIN=${BIN:-bin}; PYTHON=${PYTHON:-/usr/bin/python3}
MPIEXEC=${MPIEXEC:-mpiexec}; MPIEXEC_FLAGS=${MPIEXEC_FLAGS--bind-to none}
ROUNDS=${ROUNDS:-2}; ITERS=${ITERS:-6}; PARTIAL=${PARTIAL:-32}
d=$(mktemp -d "${TMPDIR:-/tmp}/rlfuse-bench-async.XXXXXX"); [ -n "${KEEP:-}" ] || trap 'rm -rf "$d"' EXIT
fx=${1:-$d/fixture}
run() { local n=$1; shift; "$MPIEXEC" $MPIEXEC_FLAGS -n $n env OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 "$BIN/rlfuse" "$@"; }
if [ ! -f "$fx/sft/final.h5" ] || [ ! -f "$fx/rm/final.h5" ]; then
  echo "# making the fixture in $fx (input/longtail.deck's pipeline, one PPO iteration)"
  run 1 -options_file input/longtail.deck -ppo_iterations 1 -output_dir "$fx" >"$d/fixture.log" 2>&1 || { tail -3 "$d/fixture.log"; exit 1; }
fi
echo "# machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'), $(date -u '+%Y-%m-%d %H:%M') UTC, load:$(uptime | sed 's/.*load average://')"
echo "# rlfuse $(git rev-parse --short HEAD 2>/dev/null), ROUNDS=$ROUNDS ITERS=$ITERS PARTIAL=$PARTIAL, 2 ranks ($MPIEXEC_FLAGS), -placement disaggregate"
DECK=$(grep -E '^-(seed|task_|gen_|ppo_|rollout_|actor_lr|critic_lr)' input/longtail.deck | tr '\n' ' ')
P="$DECK -mode ppo -actor_checkpoint $fx/sft/final.h5 -reward_checkpoint $fx/rm/final.h5 -ppo_iterations $ITERS -ppo_eval_prompts 0 -placement disaggregate"
run 2 $P -mode profile -profile_output $d/prof.h5 >$d/profile.log 2>&1 || { echo "# profile failed: $(tail -1 $d/profile.log)"; exit 1; }
for r in $(seq $ROUNDS); do
  for k in 0 1 1p; do
    a="-async_staleness ${k%p}"; [ "$k" = 1p ] && a="$a -async_partial $PARTIAL"
    run 2 $P $a -dump_rollouts -output_dir $d/k$k.$r >$d/k$k.$r.log 2>&1 || { echo "# K=$k failed: $(tail -1 $d/k$k.$r.log)"; exit 1; }
  done
done
for k in 0 1 1p; do
  : >$d/k$k.est
  a="-async_staleness ${k%p}"; [ "$k" = 1p ] && a="$a -async_partial $PARTIAL"
  for ((i = 1; i < ITERS; i++)); do
    echo "rollout iter_$i" >>$d/k$k.est
    run 1 $P $a -mode profile -profile_file $d/prof.h5 -profile_ranks 2 -cost_lengths rollouts:$d/k$k.1/rollouts.h5:iter_$i >>$d/k$k.est 2>&1 || { echo "# estimate failed: $(tail -1 $d/k$k.est)"; exit 1; }
  done
done
"$PYTHON" - $d $ROUNDS <<'PY'
import sys, re, h5py, numpy as np
d, rounds = sys.argv[1], int(sys.argv[2])
meas, est, train = {}, {}, {}
for k in (0, 1, "1p"):
    it, gb, tb, tr = [], [], [], []
    for r in range(1, rounds + 1):
        with h5py.File(f"{d}/k{k}.{r}/run.h5", "r") as f:
            t, m = f["timing"], f["metrics"]
            it += list(t["iteration_max"][1:])
            tr += list(t["actor_train_max"][1:] + t["critic_train_max"][1:])
            if k: gb += list(m["async_gen_busy"][1:]); tb += list(m["async_train_busy"][1:])
    meas[k], train[k] = float(np.mean(it)), float(np.mean(tr))
    busy = f" gen_busy {np.mean(gb):.2f} train_busy {np.mean(tb):.2f}" if k else ""
    with h5py.File(f"{d}/k{k}.1/rollouts.h5", "r") as f:  # what the iterations trained on (partial rollouts defer long samples at first)
        busy += " trained_len {:.1f}".format(np.mean([f[g]["response_lengths"][()].mean() for g in f if g != "iter_0"]))
    e = [float(x) for x in re.findall(r"estimate: iteration (\S+) s", open(f"{d}/k{k}.est").read())]
    est[k] = float(np.mean(e))
    print(f"async K{k} iter_s {meas[k]:.3f} estimated {est[k]:.3f} error {100 * (est[k] / meas[k] - 1):+.1f}%{busy} (iterations 2-{len(it) // rounds + 1}, {rounds} runs)")
print(f"async ratio K1/K0 {meas[1] / meas[0]:.2f} (estimated {est[1] / est[0]:.2f})")
print(f"async ratio K1p/K0 {meas['1p'] / meas[0]:.2f} (estimated {est['1p'] / est[0]:.2f})")
print(f"async bound K1/K0 >= {train[0] / meas[0]:.2f}: the synchronous iteration's two trainings ({train[0]:.3f} of {meas[0]:.3f} s), which no order shortens;"
      f" the asynchronous runs' trainings took {train[1]:.3f} (K1) and {train['1p']:.3f} s (K1p), {train[1] / train[0]:.2f}x and {train['1p'] / train[0]:.2f}x the synchronous one's")
PY
echo "# load while measuring: $(cut -d' ' -f1-3 /proc/loadavg) (1, 5, 15 min) on $(nproc) cores"
