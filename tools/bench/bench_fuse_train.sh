#!/usr/bin/env bash
# Fused vs sequential PPO training stage on 2 ranks (one per core): the same
# PPO run twice with actor_train and critic_train pipelined over both ranks
# (pp 2, M micro-batches per mini-batch for each model): once sequential
# (the actor's 1F1B, then the critic's, -fuse_train 0) and once fused
# (-fuse_train 1: the critic's pipeline reversed, both models' tasks
# interleaved by the schedule searched from the measured forward times).
# Prints the training stage's time per iteration (median over iterations
# 2..N: the first fused iteration runs its first mini-batch in the
# sequential order to measure), the measured speed-up, and the schedule's
# predicted makespan against the sequential one (the search's cost model).
# The load average is printed: on a shared machine the times are noisy, the
# ratio of the two runs less so (they run one after the other).
#   tools/bench/bench_fuse_train.sh   (env: M, ITERS, EMBD, LAYERS, BIN, MPIEXEC)
set -u
cd "$(dirname "$0")/../.."
BIN=${BIN:-bin}; PYTHON=${PYTHON:-/usr/bin/python3}; MPIEXEC=${MPIEXEC:-mpiexec}; MPIEXEC_FLAGS=${MPIEXEC_FLAGS--bind-to none}
M=${M:-4}; ITERS=${ITERS:-5}; EMBD=${EMBD:-64}; LAYERS=${LAYERS:-8}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
run1() { OMP_NUM_THREADS=1 $MPIEXEC $MPIEXEC_FLAGS -n 1 "$BIN/rlfuse" "$@" </dev/null; }
Q="-policy_n_layer $LAYERS -policy_n_head 4 -policy_n_embd $EMBD -policy_vocab_size 20 -policy_n_positions 32 -seed 3"
echo "# bench_fuse_train: 2 ranks, pp 2, $M micro-batches per model, n_layer $LAYERS n_embd $EMBD, $ITERS iterations; load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
run1 -mode sft $Q -sft_steps 2 -sft_batch 16 -output_dir $tmp/sft >$tmp/sft.log 2>&1 || { echo "SFT failed: $(tail -2 $tmp/sft.log)" >&2; exit 1; }
run1 -mode rm -seed 3 -rm_sft_checkpoint $tmp/sft/final.h5 -rm_pairs 16 -rm_eval_pairs 8 -rm_steps 2 -rm_batch 16 -gen_max_new_tokens 8 \
  -output_dir $tmp/rm >$tmp/rm.log 2>&1 || { echo "RM failed: $(tail -2 $tmp/rm.log)" >&2; exit 1; }
P="-mode ppo -actor_checkpoint $tmp/sft/final.h5 -reward_checkpoint $tmp/rm/final.h5 -ppo_iterations $ITERS -rollout_batch 32 -ppo_minibatches 1
   -gen_max_new_tokens 8 -gen_slots 32 -ppo_eval_prompts 0 -seed 3 -actor_train_pp 2 -actor_train_mbs $M -critic_train_mbs $M"
for mode in seq fused; do
  extra="-critic_train_ranks 0-1 -critic_train_pp 2"; [ $mode = fused ] && extra="-fuse_train 1"
  if ! OMP_NUM_THREADS=1 $MPIEXEC $MPIEXEC_FLAGS -n 2 "$BIN/rlfuse" $P $extra -output_dir $tmp/$mode </dev/null >$tmp/$mode.log 2>&1; then
    echo "bench_fuse_train: the $mode run failed: $(tail -2 $tmp/$mode.log)" >&2; exit 1
  fi
done
"$PYTHON" - $tmp/seq/run.h5 $tmp/fused/run.h5 <<'PY'
import sys, h5py, numpy as np
s, f = h5py.File(sys.argv[1], "r"), h5py.File(sys.argv[2], "r")
ts = s["timing/actor_train_max"][()] + s["timing/critic_train_max"][()]
tf = f["timing/fused_train_max"][()]
a = f["summary"].attrs
seq, fus = np.median(ts[1:]), np.median(tf[1:])
print(f"| training stage per iteration, sequential | fused | measured speed-up | forward f0 / f1 (ms) | predicted per mini-batch: sequential / fused (ms) | predicted speed-up | lower bound (ms) |")
print("|---|---|---|---|---|---|---|")
print(f"| {1e3 * seq:.1f} ms | {1e3 * fus:.1f} ms | {seq / fus:.3f}x | {1e3 * a['fuse_f0']:.2f} / {1e3 * a['fuse_f1']:.2f} | {1e3 * a['fuse_sequential']:.1f} / {1e3 * a['fuse_predicted']:.1f} | {a['fuse_sequential'] / a['fuse_predicted']:.3f}x | {1e3 * a['fuse_lower_bound']:.1f} |")
print(f"# per iteration (s): sequential {np.round(ts, 3).tolist()}, fused {np.round(tf, 3).tolist()}")
PY
echo "# load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
