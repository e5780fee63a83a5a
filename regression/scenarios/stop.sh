# Ctrl-C and a batch system's SIGTERM: rlfuse under mpiexec on 2 ranks gets
# the signal in its whole process group (as a terminal's Ctrl-C and Slurm's
# scancel deliver it) in the middle of a run; it must finish the step or
# iteration, write a checkpoint of it, say in one line how to go on and end
# with status 128 + signal; -restart latest then ends bit-identical to the
# run that was never stopped. SFT on SIGTERM, PPO on SIGINT. And the
# checkpoints by wall time (-checkpoint_minutes, on by default).
. regression/lib.sh
plan 7
d="$RLFUSE_TMP/stop"; mkdir -p $d; deck=regression/decks/tiny.deck
np2() { "$MPIEXEC" $MPIEXEC_FLAGS -n 2 "$BIN/rlfuse" "$@"; }
# stopped DIR LOG PATTERN SIG ARGS...: starts the run in a process group of
# its own, sends SIG to the group once LOG shows PATTERN, returns its status
stopped() {
  local dir=$1 log=$2 pat=$3 sig=$4; shift 4
  setsid bash -c "exec \"$MPIEXEC\" $MPIEXEC_FLAGS -n 2 \"$BIN/rlfuse\" $* -output_dir $dir" >$log 2>&1 &
  local pid=$! n=0
  until grep -q "$pat" $log 2>/dev/null || [ $n -ge 3000 ] || ! kill -0 $pid 2>/dev/null; do sleep 0.02; n=$((n + 1)); done
  kill -"$sig" -- -$pid 2>/dev/null
  wait $pid
}
# SFT, 2 ranks: the uninterrupted run, then one stopped by SIGTERM after step 3
sft="-options_file $deck -sft_steps 40 -policy_decay_steps 40"
np2 $sft -output_dir $d/sft_full >$d/sft_full.log 2>&1 || not_ok "uninterrupted SFT: $(tail -1 $d/sft_full.log)"
stopped $d/sft_stop $d/sft_stop.log "^step     3/" TERM $sft; rc=$?
line=$(grep -c "sft stopped by SIGTERM after step [0-9]*: checkpoint $d/sft_stop/ckpt_0000[0-9][0-9].h5 written; to go on, run the same command with -restart latest" $d/sft_stop.log)
check "SFT on SIGTERM: status 143, one line naming the checkpoint and -restart latest, the checkpoint there, no final.h5 (status $rc)" \
  bash -c "[ $rc -eq 143 ] && [ $line -eq 1 ] && ls $d/sft_stop/ckpt_0000*.h5 >/dev/null && [ ! -f $d/sft_stop/final.h5 ]"
np2 $sft -output_dir $d/sft_stop -restart latest >$d/sft_resume.log 2>&1 || not_ok "SFT resume: $(tail -1 $d/sft_resume.log)"
check "SFT resumed with -restart latest ends bit-identical to the uninterrupted run" h5diff -q $d/sft_full/final.h5 $d/sft_stop/final.h5 /policy /policy
# PPO, 2 ranks: SIGINT (Ctrl-C) after iteration 1
rlfuse -mode rm -rm_sft_checkpoint $d/sft_full/final.h5 -output_dir $d/rm -rm_pairs 48 -rm_eval_pairs 16 -rm_steps 4 -rm_batch 8 \
  -gen_max_new_tokens 12 -gen_slots 8 -task_len_max 8 -seed 7 >$d/rm.log 2>&1 || not_ok "RM fixture: $(tail -1 $d/rm.log)"
ppo="-options_file regression/decks/rlhf_tiny.deck -actor_checkpoint $d/sft_full/final.h5 -reward_checkpoint $d/rm/final.h5 -ppo_iterations 30"
np2 $ppo -output_dir $d/ppo_full >$d/ppo_full.log 2>&1 || not_ok "uninterrupted PPO: $(tail -1 $d/ppo_full.log)"
stopped $d/ppo_stop $d/ppo_stop.log "^iter    1/" INT $ppo; rc=$?
line=$(grep -c "ppo stopped by SIGINT after iteration [0-9]*: checkpoint $d/ppo_stop/ckpt_0000[0-9][0-9].h5 written; to go on" $d/ppo_stop.log)
check "PPO on SIGINT: status 130, one line, the checkpoint there, no final.h5 (status $rc)" \
  bash -c "[ $rc -eq 130 ] && [ $line -eq 1 ] && ls $d/ppo_stop/ckpt_0000*.h5 >/dev/null && [ ! -f $d/ppo_stop/final.h5 ]"
check "PPO's run.h5 of the stopped run is readable, a row per iteration done" "$PYTHON" -c "
import h5py, glob, sys, re
n = int(re.search(r'after iteration (\d+)', open('$d/ppo_stop.log').read()).group(1))
r = h5py.File('$d/ppo_stop/run.h5', 'r'); sys.exit(0 if len(r['metrics/reward']) == n else 1)"
np2 $ppo -output_dir $d/ppo_stop -restart latest >$d/ppo_resume.log 2>&1 || not_ok "PPO resume: $(tail -1 $d/ppo_resume.log)"
check "PPO resumed with -restart latest ends bit-identical to the uninterrupted run (actor and critic)" \
  bash -c "h5diff -q $d/ppo_full/final.h5 $d/ppo_stop/final.h5 /actor /actor && h5diff -q $d/ppo_full/final.h5 $d/ppo_stop/final.h5 /critic /critic"
# -checkpoint_minutes: a checkpoint after each step that ends that long after the last one
rlfuse -options_file $deck -checkpoint_minutes 0.00001 -output_dir $d/minutes >$d/minutes.log 2>&1 || not_ok "SFT with -checkpoint_minutes: $(tail -1 $d/minutes.log)"
check "-checkpoint_minutes 0.00001 (under a millisecond): a checkpoint after each of the 8 steps" bash -c "[ \$(ls $d/minutes/ckpt_0000*.h5 | wc -l) -eq 8 ]"
expect_error "-checkpoint_minutes -1 refused" "-checkpoint_minutes -1.* must be >= 0" -options_file $deck -checkpoint_minutes -1 -output_dir $d/bad
finish
