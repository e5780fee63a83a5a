# The learning regression: the quickstart pipeline shortened to 100 PPO
# iterations must raise the held-out gold score (same prompts and draws for
# the SFT and the PPO policy) while the KL to the reference stays bounded;
# then RLOO from the same SFT and reward models must do the same.
# Tolerance from seeds 1234 and 99 (docs/testing.md): measured gains were
# well above the 0.05 asked here.
. regression/lib.sh
d="$RLFUSE_TMP/learn"; mkdir -p $d
rlfuse -options_file regression/decks/learn.deck -output_dir $d/run >$d.log 2>&1 || { not_ok "learning run"; tail -3 $d.log; }
line=$(grep "gold score  SFT policy" $d.log)
kl=$(grep "KL(policy || reference)" $d.log | awk '{print $4}')
echo "# $line; KL $kl"
gain=$(echo "$line" | sed 's/.*gain //')
check "PPO raises the held-out gold score by at least 0.05 (measured $gain)" awk -v g="$gain" 'BEGIN { exit !(g >= 0.05) }'
check "the KL to the reference stays below 5 nats per response (measured $kl)" awk -v k="$kl" 'BEGIN { exit !(k > 0 && k < 5) }'
check "the reward model beats chance clearly on held-out pairs" bash -c "grep 'rm: held-out pairwise accuracy' $d.log | awk '{ exit !(\$5 >= 0.70) }'"
# RLOO from the same SFT and reward checkpoints, with the deck's PPO settings
# (groups of 4 samples per prompt, 32 prompts per iteration)
rlfuse -mode ppo -algo rloo -grpo_group 4 -actor_checkpoint $d/run/sft/final.h5 -reward_checkpoint $d/run/rm/final.h5 -seed 1234 \
  -task_demo_noise 0.25 -ppo_iterations 100 -rollout_batch 128 -ppo_minibatches 4 -ppo_kl_coef 0.05 -actor_lr 1e-4 \
  -gen_max_new_tokens 16 -gen_slots 64 -ppo_eval_every 0 -output_dir $d/rloo >$d.rloo.log 2>&1 || { not_ok "RLOO run"; tail -3 $d.rloo.log; }
line=$(grep "^rloo: held-out gold score" $d.rloo.log)
read -r g0 g1 kl < <(echo "$line" | sed -E 's/.*score ([-0-9.]+) \(SFT policy\) -> ([-0-9.]+) .*reference ([-0-9.]+) nats.*/\1 \2 \3/')
echo "# $line"
check "RLOO raises the held-out gold score by at least 0.05 (measured $g0 -> $g1)" awk -v a="$g0" -v b="$g1" 'BEGIN { exit !(b - a >= 0.05) }'
check "RLOO's KL to the reference stays below 5 nats per response (measured $kl)" awk -v k="$kl" 'BEGIN { exit !(k > 0 && k < 5) }'
finish
