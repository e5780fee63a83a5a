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
# stopped DIR LOG PATTERN SIG WHO ARGS...: starts the run in a process group
# of its own and sends SIG once LOG shows PATTERN to the whole group (WHO
# group: a terminal's Ctrl-C) or to the ranks alone (WHO ranks: what a batch
# system's SIGTERM reaches). Each rank's exit status is kept in DIR.status:
# MPICH's mpiexec, signalled itself, may lose them and end with status 0.
stopped() {
  local dir=$1 log=$2 pat=$3 sig=$4 who=$5; shift 5
  rm -f $dir.status
  setsid "$MPIEXEC" $MPIEXEC_FLAGS -n 2 bash -c '"$0" "$@"; echo $? >>'"$dir.status" "$BIN/rlfuse" "$@" -output_dir $dir >$log 2>&1 &
  local pid=$! n=0
  until grep -q "$pat" $log 2>/dev/null || [ $n -ge 3000 ] || ! kill -0 $pid 2>/dev/null; do sleep 0.02; n=$((n + 1)); done
  if [ "$who" = group ]; then kill -"$sig" -- -$pid 2>/dev/null
  else for p in $(pgrep -f -- "-output_dir $dir"); do [ "$(cat /proc/$p/comm 2>/dev/null)" = rlfuse ] && kill -"$sig" $p; done; fi
  n=0 # a run that does not stop within 2 minutes is killed (and its checks fail), never left running
  while kill -0 $pid 2>/dev/null && [ $n -lt 6000 ]; do sleep 0.02; n=$((n + 1)); done
  if kill -0 $pid 2>/dev/null; then kill -9 -- -$pid; pkill -9 -f -- "-output_dir $dir"; fi
  wait $pid
}
# SFT, 2 ranks: a long run stopped by SIGTERM after step 3 or so, then an
# uninterrupted run to 3 steps past that and the stopped one resumed to there
# (the learning-rate schedule does not depend on -sft_steps: -policy_decay_steps)
sft="-options_file $deck -policy_decay_steps 300"
stopped $d/sft_stop $d/sft_stop.log "^step     3/" TERM ranks $sft -sft_steps 1000000
rc=$(sort -u $d/sft_stop.status 2>/dev/null | tr '\n' ' ' | sed 's/ $//')
n=$(sed -n 's/.*sft stopped by SIGTERM after step \([0-9]*\):.*/\1/p' $d/sft_stop.log); n=${n:-0}
line=$(grep -c "sft stopped by SIGTERM after step $n: checkpoint $d/sft_stop/ckpt_0*$n.h5 written; to go on, run the same command with -restart latest" $d/sft_stop.log)
check "SFT on SIGTERM: every rank's status 143, one line naming the checkpoint and -restart latest, the checkpoint there, no final.h5 (status $rc, step $n)" \
  bash -c "[ '$rc' = 143 ] && [ \$(wc -l <$d/sft_stop.status) -eq 2 ] && [ $line -eq 1 ] && [ -f $d/sft_stop/ckpt_$(printf %06d $n).h5 ] && [ ! -f $d/sft_stop/final.h5 ]"
np2 $sft -sft_steps $((n + 3)) -output_dir $d/sft_full >$d/sft_full.log 2>&1 || not_ok "uninterrupted SFT: $(tail -1 $d/sft_full.log)"
np2 $sft -sft_steps $((n + 3)) -output_dir $d/sft_stop -restart latest >$d/sft_resume.log 2>&1 || not_ok "SFT resume: $(tail -1 $d/sft_resume.log)"
check "SFT resumed with -restart latest ends bit-identical to the uninterrupted run" h5diff -q $d/sft_full/final.h5 $d/sft_stop/final.h5 /policy /policy
# PPO, 2 ranks: SIGINT (Ctrl-C) after iteration 1 or so, then the same way
rlfuse -mode rm -rm_sft_checkpoint $d/sft_full/final.h5 -output_dir $d/rm -rm_pairs 48 -rm_eval_pairs 16 -rm_steps 4 -rm_batch 8 \
  -gen_max_new_tokens 12 -gen_slots 8 -task_len_max 8 -seed 7 >$d/rm.log 2>&1 || not_ok "RM fixture: $(tail -1 $d/rm.log)"
ppo="-options_file regression/decks/rlhf_tiny.deck -actor_checkpoint $d/sft_full/final.h5 -reward_checkpoint $d/rm/final.h5"
stopped $d/ppo_stop $d/ppo_stop.log "^iter    1/" INT group $ppo -ppo_iterations 1000000
rc=$(sort -u $d/ppo_stop.status 2>/dev/null | tr '\n' ' ' | sed 's/ $//')
n=$(sed -n 's/.*ppo stopped by SIGINT after iteration \([0-9]*\):.*/\1/p' $d/ppo_stop.log); n=${n:-0}
line=$(grep -c "ppo stopped by SIGINT after iteration $n: checkpoint $d/ppo_stop/ckpt_0*$n.h5 written; to go on" $d/ppo_stop.log)
check "PPO on SIGINT: every rank's status 130, one line, the checkpoint there, no final.h5 (status $rc, iteration $n)" \
  bash -c "[ '$rc' = 130 ] && [ \$(wc -l <$d/ppo_stop.status) -eq 2 ] && [ $line -eq 1 ] && [ -f $d/ppo_stop/ckpt_$(printf %06d $n).h5 ] && [ ! -f $d/ppo_stop/final.h5 ]"
check "PPO's run.h5 of the stopped run is readable, a row per iteration done" "$PYTHON" -c "
import h5py, sys
r = h5py.File('$d/ppo_stop/run.h5', 'r'); sys.exit(0 if $n > 0 and len(r['metrics/reward']) == $n else 1)"
np2 $ppo -ppo_iterations $((n + 2)) -output_dir $d/ppo_full >$d/ppo_full.log 2>&1 || not_ok "uninterrupted PPO: $(tail -1 $d/ppo_full.log)"
np2 $ppo -ppo_iterations $((n + 2)) -output_dir $d/ppo_stop -restart latest >$d/ppo_resume.log 2>&1 || not_ok "PPO resume: $(tail -1 $d/ppo_resume.log)"
check "PPO resumed with -restart latest ends bit-identical to the uninterrupted run (actor and critic)" \
  bash -c "h5diff -q $d/ppo_full/final.h5 $d/ppo_stop/final.h5 /actor /actor && h5diff -q $d/ppo_full/final.h5 $d/ppo_stop/final.h5 /critic /critic"
# -checkpoint_minutes: a checkpoint after each step that ends that long after the last one
rlfuse -options_file $deck -checkpoint_minutes 0.00001 -output_dir $d/minutes >$d/minutes.log 2>&1 || not_ok "SFT with -checkpoint_minutes: $(tail -1 $d/minutes.log)"
check "-checkpoint_minutes 0.00001 (under a millisecond): a checkpoint after each of the 8 steps" bash -c "[ \$(ls $d/minutes/ckpt_0000*.h5 | wc -l) -eq 8 ]"
expect_error "-checkpoint_minutes -1 refused" "-checkpoint_minutes -1.* must be >= 0" -options_file $deck -checkpoint_minutes -1 -output_dir $d/bad
finish
