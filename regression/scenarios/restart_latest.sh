# -restart latest (what a requeued batch job runs): a fresh start when the
# output directory has no checkpoint; otherwise the checkpoint with the most
# steps, skipping a truncated one and a temporary left by a killed write,
# ending bit-identical to an uninterrupted run. SFT and PPO, and a first
# pipeline run (the Slurm template's) whose stages all start fresh, its PPO
# checkpoint holding the reference's weights (made by the run, not an input).
#
# The checks in detail: `-restart latest`: an empty `-output_dir` starts fresh (saying so) and
# ends as an uninterrupted run; with checkpoints 2, 4, 6 where 6 is truncated and a stale
# `.tmp.PID` lies beside them it picks 4 and ends bit-identical; after the end it picks
# final.h5; PPO resumes from its iteration-2 checkpoint bit-identical; a pipeline's first run
# (the Slurm template's deck) starts all three stages fresh, PPO's checks running before its
# checkpoints exist, and its PPO checkpoint holds `/reference` itself (the SFT stage made it:
# no `/reference_source`). About 10 s
. regression/lib.sh
plan 7
d="$RLFUSE_TMP/restart_latest"; mkdir -p $d; deck=regression/decks/tiny.deck
rlfuse -options_file $deck -output_dir $d/full -checkpoint_every 2 >$d/full.log 2>&1 || not_ok "uninterrupted SFT run"
rlfuse -options_file $deck -output_dir $d/fresh -restart latest >$d/fresh.log 2>&1 || not_ok "fresh start: $(tail -1 $d/fresh.log)"
check "no checkpoint in -output_dir: says so and starts fresh, ending as the uninterrupted run" \
  bash -c "grep -q 'restart latest: no complete checkpoint in $d/fresh, starting fresh' $d/fresh.log && h5diff -q $d/full/final.h5 $d/fresh/final.h5 /policy /policy"
# a run "preempted" after step 6: checkpoints 2, 4, 6; 6 truncated, a stale temporary beside it
mkdir -p $d/pre && cp $d/full/ckpt_00000[246].h5 $d/pre/
truncate -s 2000 $d/pre/ckpt_000006.h5; cp $d/full/final.h5 $d/pre/ckpt_000008.h5.tmp.4242
rlfuse -options_file $deck -output_dir $d/pre -restart latest >$d/pre.log 2>&1 || not_ok "resume: $(tail -1 $d/pre.log)"
check "picks ckpt_000004.h5 (6 is truncated, the temporary is ignored) and says so" grep -q "restart latest: $d/pre/ckpt_000004.h5 (step or iteration 4), unreadable checkpoints skipped" $d/pre.log
check "the resumed run starts at step 4 and ends bit-identical to the uninterrupted run" bash -c "grep -q 'from step 4' $d/pre.log && h5diff -q $d/full/final.h5 $d/pre/final.h5 /policy /policy"
rlfuse -options_file $deck -output_dir $d/pre -restart latest >$d/again.log 2>&1 || not_ok "run again after the end: $(tail -1 $d/again.log)"
check "after the end, latest is final.h5 (step 8) and the run does nothing more" bash -c "grep -q 'restart latest: $d/pre/final.h5 (step or iteration 8)' $d/again.log && h5diff -q $d/full/final.h5 $d/pre/final.h5 /policy /policy"
# PPO: the same through its own restart path
rlfuse -mode rm -rm_sft_checkpoint $d/full/final.h5 -output_dir $d/rm -rm_pairs 48 -rm_eval_pairs 16 -rm_steps 4 -rm_batch 8 \
  -gen_max_new_tokens 12 -gen_slots 8 -task_len_max 8 -seed 7 >$d/rm.log 2>&1 || not_ok "RM fixture: $(tail -1 $d/rm.log)"
ppo() { rlfuse -options_file regression/decks/rlhf_tiny.deck -actor_checkpoint $d/full/final.h5 -reward_checkpoint $d/rm/final.h5 -checkpoint_every 2 "$@"; }
ppo -output_dir $d/ppo_full >$d/ppo_full.log 2>&1 || not_ok "PPO run: $(tail -1 $d/ppo_full.log)"
mkdir -p $d/ppo_pre && cp $d/ppo_full/ckpt_000002.h5 $d/ppo_pre/
ppo -output_dir $d/ppo_pre -restart latest >$d/ppo_pre.log 2>&1 || not_ok "PPO resume: $(tail -1 $d/ppo_pre.log)"
check "PPO -restart latest resumes from iteration 2 and ends bit-identical (all four models)" bash -c "grep -q 'restart latest: $d/ppo_pre/ckpt_000002.h5' $d/ppo_pre.log && h5diff -q $d/ppo_full/final.h5 $d/ppo_pre/final.h5 /actor /actor && h5diff -q $d/ppo_full/final.h5 $d/ppo_pre/final.h5 /critic /critic"
# a pipeline's first run under -restart latest: every stage checked (PPO's
# before its checkpoints exist), then started fresh
rlfuse -options_file regression/decks/slurm.deck -sft_steps 20 -policy_decay_steps 20 -ppo_iterations 1 -restart latest -output_dir $d/pipe >$d/pipe.log 2>&1 || not_ok "pipeline: $(tail -1 $d/pipe.log)"
check "a pipeline's first run with -restart latest starts SFT, RM and PPO fresh" bash -c \
  "[ \$(grep -c 'restart latest: no complete checkpoint in .*, starting fresh' $d/pipe.log) -eq 3 ] && [ -f $d/pipe/ppo/final.h5 ]"
check "the pipeline's PPO checkpoint holds /reference (the SFT stage's output may be replaced by a rerun), no /reference_source" bash -c \
  "h5ls $d/pipe/ppo/final.h5/reference/params >/dev/null && ! h5ls $d/pipe/ppo/final.h5/reference_source >/dev/null 2>&1"
finish
