# The learning regression: the quickstart pipeline shortened to 100 PPO
# iterations must raise the held-out gold score (same prompts and draws for
# the SFT and the PPO policy) while the KL to the reference stays bounded,
# and its reward model must order held-out pairs well. The bounds come from
# the spread over several seeds (docs/testing.md, "The learning bounds").
# A number missing from the log (a stage that printed nothing) fails.
. regression/lib.sh
plan 3
# From the seeds measured (docs/testing.md): gains 0.113-0.132, mean - 3 sd =
# 0.094; RM accuracy 0.754-0.78, mean - 3 sd = 0.724. A run that learns half
# as well (gain 0.06, accuracy 0.63) fails both.
gain_min=0.09 rm_min=0.72
d="$RLFUSE_TMP/learn"; mkdir -p $d
rlfuse -options_file regression/decks/learn.deck -output_dir $d/run >$d.log 2>&1 || { not_ok "learning run"; tail -3 $d.log; }
gain=$(sed -n 's/^ *gold score  SFT policy .* gain \([-+0-9.]*\)$/\1/p' $d.log)
kl=$(sed -n 's/^ *KL(policy || reference) \([-0-9.]*\) nats.*/\1/p' $d.log)
acc=$(sed -n 's/^rm: held-out pairwise accuracy \([0-9.]*\) .*/\1/p' $d.log)
echo "# $(grep 'gold score  SFT policy' $d.log); KL $kl; RM accuracy $acc"
within "PPO raises the held-out gold score by at least $gain_min (measured $gain)" "$gain" $gain_min 1
within "the KL to the reference stays within (0, 5] nats per response (measured $kl)" "$kl" 1e-6 5
within "the reward model reaches $rm_min held-out pairwise accuracy (measured $acc)" "$acc" $rm_min 1
finish
