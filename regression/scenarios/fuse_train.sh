# Fused actor-critic training (-fuse_train 1): the actor and critic train on
# the same ranks, the critic's pipeline reversed, their micro-batches
# interleaved by a fused schedule searched from measured forward times (or
# read from -fuse_train_schedule). A fused run must end with the same
# weights, optimizer state, rollouts and metrics as an unfused one-rank run
# (within the layout tests' tolerances); impossible combinations stop with
# one line naming the option. Multi-rank runs are oversubscribed on small
# machines (correctness only), one thread per rank.
#
# The checks in detail: fused actor-critic training (`-fuse_train 1`) against the unfused
# one-rank run of the same PPO deck (4 layers x 32, 2 iterations of 16 responses, 2
# mini-batches, `-dump_rollouts`): 2 ranks with pp 2 each way (4 actor and 2 critic
# micro-batches, schedule searched from the measured forward times), 4 ranks with pp 4 each
# way running a schedule file from `-mode schedule` (`-fuse_train_schedule`), 4 ranks with
# actor pp 4 and the critic pp 2 replicated twice; each with every checkpoint tensor
# (`regression/ref/ckpt_diff.py`), the rollouts and the metrics within the layout tests' tolerances;
# the plan line, `/plan` (`fuse_train`, the critic's reversed and replicated rank lists) and
# the recorded prediction (lower bound <= predicted <= sequential); eight bad combinations
# (GRPO, no pipeline, tp 2, critic pp not dividing, critic ranks given, a schedule file
# without `-fuse_train`, of another instance, missing) each one line naming the option. The
# multi-rank runs are oversubscribed: correctness only. 37 s in `make test` on the loaded
# 2-core machine; breaking the fusion (the critic's gradients not zeroed before a fused pass)
# fails it (actor and critic checkpoints differ, rollouts differ from iteration 2)
. regression/lib.sh
plan 15
d="$RLFUSE_TMP/fuse_train"; mkdir -p $d
Q="-policy_n_layer 4 -policy_n_head 2 -policy_n_embd 32 -policy_vocab_size 20 -policy_n_positions 32 -task_demo_noise 0.25 -seed 7"
rlfuse -mode sft $Q -sft_steps 10 -sft_batch 16 -policy_lr 2e-3 -output_dir $d/sft >$d/sft.log 2>&1 || not_ok "SFT fixture"
rlfuse -mode rm -task_demo_noise 0.25 -seed 7 -rm_sft_checkpoint $d/sft/final.h5 -rm_pairs 32 -rm_eval_pairs 8 -rm_steps 4 -rm_batch 16 \
  -reward_lr 1e-3 -gen_max_new_tokens 8 -output_dir $d/rm >$d/rm.log 2>&1 || not_ok "RM fixture"
# -mode rm takes the SFT model's vocabulary from its checkpoint, and the errors say so (not -policy_vocab_size)
R="-mode rm -rm_sft_checkpoint $d/sft/final.h5 -rm_pairs 32 -rm_eval_pairs 8 -rm_steps 4 -rm_batch 16 -gen_max_new_tokens 8 -output_dir $d/rm_bad"
expect_error "RM: -gen_top_k past the SFT checkpoint's vocabulary names the checkpoint" "gen_top_k 21 must be in \[0, vocab_size 20 of the SFT checkpoint" $R -gen_top_k 21
expect_error "RM: -gen_eos outside the SFT checkpoint's vocabulary names the checkpoint" "gen_eos 20 is not a token of vocab_size 20 of the SFT checkpoint" $R -gen_eos 20
P="-mode ppo -actor_checkpoint $d/sft/final.h5 -reward_checkpoint $d/rm/final.h5 -ppo_iterations 2 -rollout_batch 16 -ppo_minibatches 2
   -ppo_microbatches 2 -gen_max_new_tokens 8 -gen_slots 16 -ppo_eval_prompts 8 -actor_lr 1e-4 -critic_lr 3e-4 -seed 7 -dump_rollouts"

same_run() { same_run_dirs $d/$1 $d/$2; }
fused() {
  local what=$1 n=$2 out=$3; shift 3
  if ! mpirun $n $P -output_dir $d/$out -fuse_train 1 "$@" >$d/$out.log 2>&1; then not_ok "$what: run failed"; tail -3 $d/$out.log | sed 's/^/# /'; return; fi
  if "$PYTHON" regression/ref/ckpt_diff.py $d/one/final.h5 $d/$out/final.h5 >$d/diff_$out.txt 2>&1 && same_run one $out >$d/run_$out.txt 2>&1; then
    ok "$what: weights, moments, rollouts and metrics as unfused on 1 rank ($(grep -o 'max relative difference [^ ]*' $d/diff_$out.txt | sort -k4 -g | tail -1))"
  else not_ok "$what: differs from 1 rank"; cat $d/diff_$out.txt $d/run_$out.txt | grep -v PASS | tail -3 | sed 's/^/# /'; fi
}
mpirun 1 $P -output_dir $d/one >$d/one.log 2>&1 || not_ok "PPO on 1 rank"
fused "2 ranks, pp 2 each way (4 actor, 2 critic micro-batches)" 2 pp2 -actor_train_pp 2 -actor_train_mbs 4 -critic_train_mbs 2
check "the fused plan is printed, stored in /plan, and the searched schedule's prediction printed and recorded" eval \
  "grep -q 'fused training: actor_train and critic_train' $d/pp2.log && grep -q 'searched schedule predicts' $d/pp2.log && \"$PYTHON\" -c \"
import h5py; f = h5py.File('$d/pp2/run.h5', 'r'); p = f['plan']
assert p.attrs['fuse_train'] == 1 and list(p['critic_train/ranks'][()]) == [1, 0], list(p['critic_train/ranks'][()])
s = f['summary'].attrs; assert 0 < s['fuse_predicted'] <= s['fuse_sequential'] and s['fuse_lower_bound'] <= s['fuse_predicted'], dict(s)
\""
rlfuse -mode schedule -sched_pp0 4 -sched_pp1 4 -sched_m0 4 -sched_m1 4 -sched_f0 1 -sched_f1 0.5 -sched_output $d/sched4.h5 >$d/sched4.log 2>&1 || not_ok "schedule file for pp 4"
fused "4 ranks, pp 4 each way, the schedule from -fuse_train_schedule" 4 pp4 -actor_train_pp 4 -actor_train_mbs 4 -critic_train_mbs 4 -fuse_train_schedule $d/sched4.h5
fused "4 ranks, actor pp 4, critic pp 2 replicated twice (searched schedule)" 4 rep -actor_train_pp 4 -actor_train_mbs 4 -critic_train_pp 2 -critic_train_mbs 2
check "the replicated critic's mesh: copy c stage t on actor stage 2c+1-t" "$PYTHON" -c "
import h5py; f = h5py.File('$d/rep/run.h5', 'r'); c = f['plan/critic_train']
assert list(c['ranks'][()]) == [1, 3, 0, 2] and c.attrs['dp'] == 2 and c.attrs['pp'] == 2, (list(c['ranks'][()]), dict(c.attrs))"

# bad combinations: one line naming the option, before any work
bad() {
  local what=$1 want=$2 n=$3; shift 3
  if mpirun $n $P -output_dir $d/bad -dry_run "$@" >$d/bad.log 2>&1; then not_ok "$what: accepted"; return; fi
  if grep -q -- "$want" $d/bad.log; then ok "$what: refused ($(grep -o 'rlfuse: error: .*' $d/bad.log | head -1 | cut -c1-110))"; else not_ok "$what: no '$want' in the error"; grep error $d/bad.log | head -2 | sed 's/^/# /'; fi
}
bad "GRPO (no critic)"                  "the run trains no critic"              2 -fuse_train 1 -actor_train_pp 2 -algo grpo
bad "actor_train without pipeline"      "-actor_train_pp 1 must be at least 2" 2 -fuse_train 1
bad "actor_train with tp 2"             "-actor_train_tp is 2"               4 -fuse_train 1 -actor_train_pp 2 -actor_train_tp 2 -actor_train_dp 1
bad "critic pp not dividing actor pp"   "-critic_train_pp 3 must divide -actor_train_pp 4" 4 -fuse_train 1 -actor_train_pp 4 -critic_train_pp 3
bad "critic ranks given"                "drop -critic_train_ranks"           2 -fuse_train 1 -actor_train_pp 2 -critic_train_ranks 0-1
bad "schedule file without -fuse_train" "needs -fuse_train 1"                2 -fuse_train_schedule $d/sched4.h5
bad "schedule file of another instance" "sched4.h5"                          2 -fuse_train 1 -actor_train_pp 2 -fuse_train_schedule $d/sched4.h5
bad "missing schedule file"             "nothere.h5"                         2 -fuse_train 1 -actor_train_pp 2 -fuse_train_schedule $d/nothere.h5
finish
