# Distributed execution: one PPO deck at the quickstart model size
# (3 iterations) on different execution plans must end with the same
# weights, optimizer state, rollouts and metrics as one rank, within a
# relative tolerance of 1e-4 per checkpoint tensor (regression/ref/ckpt_diff.py); a
# checkpoint written on 4 ranks restarts on 1 and on 2 ranks; bad plans stop
# with one line naming the call and the option. Multi-rank runs are
# oversubscribed on small machines, one thread per rank.
#
# The checks in detail: the distributed executor: one PPO deck at the quickstart model size (3
# iterations, 32 responses, `-dump_rollouts`) on 4 ranks colocated tp2 x dp2, interleaved,
# disaggregated (one tp-2 generation replica), 2 ranks with pp 2 (1F1B over 4 and 2
# micro-batches), 2 ranks mixing layouts (train tp 2, generate dp 2: reallocation every
# iteration) and 4 ranks interleaved with ZeRO-1 and offload, each against 1 rank: every
# checkpoint tensor (weights and AdamW moments of all four models, `regression/ref/ckpt_diff.py`)
# within 1e-4 of its scale, rollout tokens and lengths identical and their floats within 1e-4,
# every metric within 1e-4 relative (`regression/same_metrics.py`: NaN only on the rows where
# 1 rank has NaN, and a metric NaN on every row fails unless the deck does not measure it);
# the plan printed and in run.h5 with the reallocation bytes; a 4-rank checkpoint restarted on
# 1 and on 2 ranks ends as the 4-rank run; another seed does differ; five bad plans (ranks
# outside the job, tp not dividing n_head, pp over n_layer, dp not dividing the mini-batch,
# concurrent calls sharing a rank) each one line before any output. About 30 s on 2 cores (the
# 4-rank runs oversubscribed, one thread each); the worst difference seen is about 5e-6
. regression/lib.sh
plan 16
d="$RLFUSE_TMP/layouts"; mkdir -p $d
Q="-policy_n_layer 2 -policy_n_head 4 -policy_n_embd 128 -policy_vocab_size 20 -policy_n_positions 32 -task_demo_noise 0.25 -seed 5"
rlfuse -mode sft $Q -sft_steps 40 -sft_batch 32 -policy_lr 2e-3 -output_dir $d/sft >$d/sft.log 2>&1 || not_ok "SFT fixture"
rlfuse -mode rm -task_demo_noise 0.25 -seed 5 -rm_sft_checkpoint $d/sft/final.h5 -rm_pairs 64 -rm_eval_pairs 16 -rm_steps 10 -rm_batch 16 \
  -reward_lr 1e-3 -gen_max_new_tokens 16 -output_dir $d/rm >$d/rm.log 2>&1 || not_ok "RM fixture"
P="-mode ppo -actor_checkpoint $d/sft/final.h5 -reward_checkpoint $d/rm/final.h5 -ppo_iterations 3 -rollout_batch 32 -ppo_minibatches 2
   -ppo_eval_every 0 -ppo_microbatches 2 -gen_max_new_tokens 16 -gen_slots 16 -ppo_eval_prompts 16 -actor_lr 1e-4 -critic_lr 3e-4 -seed 5 -dump_rollouts"

# the same run's rollouts and metrics (regression/lib.sh); the deck does not ask
# for held-out evaluations during the run (-ppo_eval_every 0), so the eval_*
# metrics hold only the last iteration's (the summary's) evaluation
same_run() { same_run_dirs $d/$1 $d/$2; }
same_weights() { "$PYTHON" regression/ref/ckpt_diff.py $d/$1/final.h5 $d/$2/final.h5 >$d/diff_$2.txt 2>&1; }
layout() {
  local what=$1 n=$2 out=$3; shift 3
  if ! mpirun $n $P -output_dir $d/$out "$@" >$d/$out.log 2>&1; then not_ok "$what: run failed"; tail -3 $d/$out.log | sed 's/^/# /'; return; fi
  if same_weights one $out && same_run one $out >$d/run_$out.txt 2>&1; then ok "$what: weights, moments, rollouts and metrics as on 1 rank ($(grep -o 'max relative difference [^ ]*' $d/diff_$out.txt | sort -k4 -g | tail -1))"
  else not_ok "$what: differs from 1 rank"; cat $d/diff_$out.txt $d/run_$out.txt | grep -v PASS | tail -3 | sed 's/^/# /'; fi
}
mpirun 1 $P -output_dir $d/one >$d/one.log 2>&1 || not_ok "PPO on 1 rank"
T2="-actor_gen_tp 2 -ref_inf_tp 2 -rew_inf_tp 2 -critic_inf_tp 2 -actor_train_tp 2 -critic_train_tp 2"
PP2="-actor_gen_pp 2 -ref_inf_pp 2 -rew_inf_pp 2 -critic_inf_pp 2 -actor_train_pp 2 -critic_train_pp 2 -actor_train_mbs 4 -critic_train_mbs 2 -ref_inf_mbs 4"
layout "4 ranks colocated, tp 2 x dp 2"                 4 colocate $T2
layout "4 ranks interleaved (ref and reward concurrently on halves)" 4 interleave -placement interleave
layout "4 ranks disaggregated (shadow generation replicas)" 4 disaggregate -placement disaggregate -gen_replicas 1
layout "2 ranks, pp 2 (1F1B over 4 and 2 micro-batches)" 2 pipeline $PP2
layout "2 ranks mixed: train tp 2, generate dp 2 (reallocation every iteration)" 2 mixed -actor_train_tp 2 -actor_train_dp 1 -actor_gen_dp 2
layout "4 ranks interleaved with ZeRO-1 and offloaded frozen models" 4 zero1 -placement interleave -plan_zero1 -plan_offload
check "the plan is printed at start" grep -q "^plan: preset disaggregate" $d/disaggregate.log
check "run.h5 holds /plan and the reallocation time and bytes" "$PYTHON" -c "
import h5py; f = h5py.File('$d/mixed/run.h5', 'r')
assert f['plan'].attrs['world'] == 2 and 'actor_gen' in f['plan']
assert f['metrics/actor_sync_bytes'][0] > 0 and 'actor_sync_max' in f['timing']"

# a 4-rank checkpoint continues on 1 rank and on 2 ranks
mpirun 4 $P -output_dir $d/four -placement interleave -checkpoint_every 2 >$d/four.log 2>&1 || not_ok "4-rank run with checkpoints"
for n in 1 2; do
  if mpirun $n $P -output_dir $d/from4_$n -restart $d/four/ckpt_000002.h5 >$d/from4_$n.log 2>&1 && same_weights four from4_$n && grep -q "from iteration 2" $d/from4_$n.log
  then ok "a checkpoint from 4 ranks restarts on $n rank(s) and ends as the 4-rank run ($(grep -o 'max relative difference [^ ]*' $d/diff_from4_$n.txt | sort -k4 -g | tail -1))"
  else not_ok "restart of a 4-rank checkpoint on $n rank(s)"; tail -3 $d/from4_$n.log $d/diff_from4_$n.txt | sed 's/^/# /'; fi
done
mpirun 1 $P -seed 6 -output_dir $d/seed6 >$d/seed6.log 2>&1 || not_ok "PPO with seed 6"
check "the comparison can fail (another seed gives other weights)" bash -c "! \"$PYTHON\" regression/ref/ckpt_diff.py $d/one/final.h5 $d/seed6/final.h5 >/dev/null"

# bad plans: one line naming the call and the option, before any work
bad_plan() {
  local what=$1 pat=$2; shift 2
  local out=$d/bad_$RANDOM err
  err=$(mpirun 4 $P -output_dir $out "$@" 2>&1 >/dev/null); local rc=$?
  if [ $rc -eq 0 ]; then not_ok "$what: exit status 0"; return; fi
  if [ "$(printf '%s\n' "$err" | grep -c .)" -ne 1 ] || ! printf '%s' "$err" | grep -q "^rlfuse: error: .*$pat"; then not_ok "$what: expected one line matching '$pat', got: $(printf '%s' "$err" | head -3)"; return; fi
  if [ -e $out ]; then not_ok "$what: the output directory was created"; return; fi
  ok "$what ($(printf '%s' "$err" | cut -c1-110))"
}
bad_plan "more ranks than the job"        "-actor_gen_ranks"  -actor_gen_ranks 0-5
bad_plan "tp not dividing n_head"         "-actor_train_tp 3" -actor_train_ranks 0-2 -actor_train_tp 3
bad_plan "pp above n_layer"               "-ref_inf_pp 4"     -ref_inf_pp 4
bad_plan "dp not dividing the mini-batch" "-critic_train_dp"  -critic_train_ranks 0-2 -critic_train_dp 3
bad_plan "concurrent calls on one rank"   "ref_inf"           -plan_concurrent ref_inf,rew_inf
finish
