# The policy losses of -ppo_objective on micro models (the arithmetic of
# each is checked by hand in test_rlmath): GRPO with cispo and with gspo,
# each on 2 ranks (tp 2 training and a dp 2 generation) as on 1 rank; each
# differs from PPO's clip on the same rollouts (the loss is used); gspo's
# default clip range is the paper's (3e-4, 4e-4: used.deck), and its narrow
# clip leaves sequences out of the gradient (clip_frac > 0 in run.h5); gspo
# refused in one line with a per-token estimator (-algo ppo, reinforce_pp)
# and with -async_staleness.
#
# The checks in detail: `-algo grpo -ppo_objective cispo` and `gspo` (3 iterations, groups of
# 4, 2 epochs so the second pass is off-policy) on 1 rank, then on 2 ranks with tp 2 training
# and dp 2 generation: weights and moments within the layout tolerance of 1 rank, metrics
# within 1e-4 (`same_as_one_rank`); each objective's final weights differ from `-ppo_objective
# clip`'s from the same checkpoints; `used.deck` of the gspo run records `-ppo_clip 0.0003`
# and `-ppo_clip_high 0.0004`; gspo's clip fraction is above 0 in some iteration;
# `-ppo_objective gspo` with `-algo ppo`, with `-algo reinforce_pp` and with
# `-async_staleness 1` each one line naming the option. About 20 s
. regression/lib.sh
plan 10
d="$RLFUSE_TMP/objectives"; mkdir -p $d
rl_micro_fixture $d
G="-options_file regression/decks/rlhf_tiny.deck -actor_checkpoint $d/sft/final.h5 -reward_checkpoint $d/rm/final.h5 -algo grpo -rollout_group 4 -ppo_iterations 3 -ppo_epochs 2"

mpirun 1 $G -ppo_objective clip -output_dir $d/clip >$d/clip.log 2>&1 || not_ok "GRPO with -ppo_objective clip: $(tail -1 $d/clip.log)"
for obj in cispo gspo; do
  if mpirun 1 $G -ppo_objective $obj -output_dir $d/$obj >$d/$obj.log 2>&1; then
    check "$obj: its final weights differ from the clip objective's (the loss is used)" bash -c \
      "! \"$PYTHON\" regression/ref/ckpt_diff.py $d/clip/final.h5 $d/$obj/final.h5 >/dev/null 2>&1"
    run_layout "$obj on 2 ranks (tp 2 training, dp 2 generation)" "$G -ppo_objective $obj" $obj 2 ${obj}_2 \
      -actor_train_tp 2 -actor_train_dp 1 -actor_gen_dp 2
  else not_ok "GRPO with -ppo_objective $obj: $(tail -1 $d/$obj.log)"; not_ok "$obj on 2 ranks: not run"; fi
done
check "gspo's default clip range is the paper's: used.deck has -ppo_clip 0.0003, -ppo_clip_high 0.0004" bash -c \
  "grep -q '^-ppo_clip 0.0003\$' $d/gspo/used.deck && grep -q '^-ppo_clip_high 0.0004\$' $d/gspo/used.deck"
"$PYTHON" - $d/gspo/run.h5 <<'PY' && ok "gspo's narrow clip leaves sequences out of the gradient (clip_frac > 0 in run.h5)" || not_ok "gspo clipfrac"
import sys, h5py, numpy as np
with h5py.File(sys.argv[1], "r") as f:
    c = f["metrics/clip_frac"][()]
print("# gspo clipfrac by iteration:", " ".join(f"{x:.3f}" for x in c))
assert np.isfinite(c).all() and c.max() > 0, c
PY
expect_error "-ppo_objective gspo with -algo ppo (GAE: one advantage per token)" "-ppo_objective gspo needs one advantage per sequence" \
  $G -algo ppo -ppo_objective gspo -output_dir $d/bad1
expect_error "-ppo_objective gspo with -algo reinforce_pp (returns per token)" "-ppo_objective gspo needs one advantage per sequence" \
  $G -algo reinforce_pp -ppo_objective gspo -output_dir $d/bad2
expect_error "-ppo_objective gspo with -async_staleness 1" "-ppo_objective gspo with -async_staleness 1" \
  $G -ppo_objective gspo -async_staleness 1 -output_dir $d/bad3
check "nothing written by the refused runs" bash -c "[ ! -e $d/bad1 ] && [ ! -e $d/bad2 ] && [ ! -e $d/bad3 ]"
finish
