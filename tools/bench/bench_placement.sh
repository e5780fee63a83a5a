#!/usr/bin/env bash
# Iteration and per-stage times of PPO under each placement preset on 2 ranks
# (one per core, one thread each), for the quickstart model and a larger
# one, against 1 rank. The policy and reward model are short SFT/RM runs made
# here (their quality does not matter for timing). Prints one line per run:
#   placement <model> <layout> iter_s <mean> gen <s> ref <s> rew <s> critic_inf <s> actor_train <s> critic_train <s> sync <s> sync_MiB <MiB>
# (means over the iterations after the first), and for the larger model one
# line per SFT layout of the sft_train call:
#   sft <layout> step_s <mean> forward <s> backward <s> optimizer <s>
# Part of `make bench`.
set -u
cd "$(dirname "$0")/../.."
BIN=${BIN:-bin}; PYTHON=${PYTHON:-/usr/bin/python3}
MPIEXEC=${MPIEXEC:-mpiexec}; MPIEXEC_FLAGS=${MPIEXEC_FLAGS--bind-to none}
d=$(mktemp -d "${TMPDIR:-/tmp}/rlfuse-bench-placement.XXXXXX"); trap 'rm -rf "$d"' EXIT
ITERS=${ITERS:-4}
run() { local n=$1; shift; "$MPIEXEC" $MPIEXEC_FLAGS -n $n env OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 "$BIN/rlfuse" "$@"; }
report() {
  "$PYTHON" - "$1" "$2" "$3" <<'PY'
import sys, h5py, numpy as np
path, model, layout = sys.argv[1:]
t = h5py.File(path + "/run.h5", "r")["timing"]
m = h5py.File(path + "/run.h5", "r")["metrics"]
g = lambda k: float(np.mean(t[k + "_max"][1:])) if k + "_max" in t else 0.0
mib = float(m["actor_sync_bytes"][0]) / 2**20 if "actor_sync_bytes" in m else 0.0
print(f"placement {model} {layout} iter_s {g('iteration'):.3f} gen {g('generation'):.3f} ref {g('ref_inference'):.3f} rew {g('reward_inference'):.3f} "
      f"critic_inf {g('critic_inference'):.3f} actor_train {g('actor_train'):.3f} critic_train {g('critic_train'):.3f} sync {g('actor_sync'):.3f} sync_MiB {mib:.1f}")
PY
}
for model in quickstart:2:4:128 larger:4:8:384; do
  IFS=: read -r name L H C <<<"$model"
  arch="-policy_n_layer $L -policy_n_head $H -policy_n_embd $C -policy_vocab_size 20 -policy_n_positions 32 -seed 3"
  run 1 -mode sft $arch -sft_steps 20 -sft_batch 16 -output_dir $d/$name/sft >/dev/null 2>&1 || { echo "# SFT fixture failed"; exit 1; }
  run 1 -mode rm -seed 3 -rm_sft_checkpoint $d/$name/sft/final.h5 -rm_pairs 32 -rm_eval_pairs 8 -rm_steps 4 -rm_batch 8 -gen_max_new_tokens 16 -output_dir $d/$name/rm >/dev/null 2>&1 || { echo "# RM fixture failed"; exit 1; }
  P="-mode ppo -actor_checkpoint $d/$name/sft/final.h5 -reward_checkpoint $d/$name/rm/final.h5 -ppo_iterations $ITERS -rollout_batch 128
     -ppo_minibatches 4 -gen_max_new_tokens 16 -gen_slots 64 -ppo_eval_prompts 0 -seed 3"
  run 1 $P -output_dir $d/$name/one >/dev/null 2>&1 && report $d/$name/one $name 1-rank
  for placement in colocate interleave disaggregate; do
    run 2 $P -placement $placement -output_dir $d/$name/$placement >/dev/null 2>&1 && report $d/$name/$placement $name $placement
  done
  run 2 $P -actor_train_tp 2 -actor_train_dp 1 -critic_train_tp 2 -critic_train_dp 1 -output_dir $d/$name/mixed >/dev/null 2>&1 && report $d/$name/mixed $name train-tp2/gen-dp2
done
# SFT on its sft_train call: 1 rank against dp 2, tp 2 and pp 2 (4 micro-batches)
sft_report() {
  "$PYTHON" - "$1" "$2" <<'PY'
import sys, h5py, numpy as np
path, layout = sys.argv[1:]
t = h5py.File(path + "/run.h5", "r")["timing"]
g = lambda k: float(np.mean(t[k + "_max"][2:]))
print(f"sft {layout} step_s {g('data') + g('forward') + g('backward') + g('optimizer'):.3f} forward {g('forward'):.3f} backward {g('backward'):.3f} optimizer {g('optimizer'):.3f}")
PY
}
S="-mode sft -policy_n_layer 4 -policy_n_head 8 -policy_n_embd 384 -policy_vocab_size 20 -policy_n_positions 32 -seed 3 -sft_steps 10 -sft_batch 64"
run 1 $S -output_dir $d/sft/one >/dev/null 2>&1 && sft_report $d/sft/one 1-rank
run 2 $S -output_dir $d/sft/dp2 >/dev/null 2>&1 && sft_report $d/sft/dp2 dp2
run 2 $S -sft_train_tp 2 -output_dir $d/sft/tp2 >/dev/null 2>&1 && sft_report $d/sft/tp2 tp2
run 2 $S -sft_train_pp 2 -sft_train_mbs 4 -output_dir $d/sft/pp2 >/dev/null 2>&1 && sft_report $d/sft/pp2 pp2-mbs4
