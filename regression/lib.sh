# Helpers shared by the scenario scripts (sourced, not run). The line format
# is the suite's (regression/run_tests.sh counts it):
#   1..N                  the plan: N checks will report (plan N, once)
#   ok - what             a check that passed
#   not ok - what: why    a check that failed
#   skip - what: why      a check that could not run here (never a pass)
# A scenario whose run ends with fewer (or more) results than its plan fails,
# so a check that vanishes (a Python block that raised, awk given no input)
# cannot leave the suite green.
fails=0
plan()   { echo "1..$1"; }
ok()     { echo "ok - $*"; }
not_ok() { echo "not ok - $*"; fails=$((fails + 1)); }
skip()   { echo "skip - $*"; }
check()  { local what=$1; shift; if "$@"; then ok "$what"; else not_ok "$what"; fi; }
# within WHAT VALUE LO HI: ok when VALUE is a number with LO <= VALUE <= HI;
# an empty or non-numeric VALUE (the line it came from is missing) fails
within() {
  if [[ $2 =~ ^[-+]?[0-9]*\.?[0-9]+([eE][-+]?[0-9]+)?$ ]] && awk -v v="$2" -v lo="$3" -v hi="$4" 'BEGIN { exit !(v + 0 >= lo + 0 && v + 0 <= hi + 0) }'
  then ok "$1"; else not_ok "$1: measured '$2', allowed [$3, $4]"; fi
}
# py WHAT ARGS... <<'PY': a Python block that prints its own ok/not ok lines;
# an exception (or any non-zero exit) is one more failure
py() { local what=$1; shift; "$PYTHON" - "$@" || not_ok "$what: the Python block stopped with an error (traceback above)"; }
rlfuse() { "$MPIEXEC" $MPIEXEC_FLAGS -n 1 "$BIN/rlfuse" "$@"; }
finish() { exit $((fails > 0)); }

# expect_error WHAT PATTERN ARGS...: rlfuse ARGS must exit non-zero with
# exactly one line "rlfuse: error: ...PATTERN" and leave $keep (a directory of
# an earlier run, if set) byte-identical with no new files.
expect_error() {
  local what=$1 pat=$2; shift 2
  local err rc before=""; err=$(mktemp "$RLFUSE_TMP/err.XXXXXX")
  [ -n "${keep:-}" ] && before=$(cd "$keep" && ls && md5sum *)
  rlfuse "$@" >/dev/null 2>$err; rc=$?
  local lines; lines=$(grep -c . $err)
  if [ $rc -eq 0 ]; then not_ok "$what: exit status 0"; return; fi
  if [ "$lines" -ne 1 ] || ! grep -q -- "^rlfuse: error: .*$pat" $err; then not_ok "$what: expected one line matching '$pat', got: $(head -3 $err | cut -c1-300)"; return; fi
  if [ -n "${keep:-}" ] && [ "$(cd "$keep" && ls && md5sum *)" != "$before" ]; then not_ok "$what: earlier output changed"; return; fi
  ok "$what ($(cut -c1-110 $err))"
}

# Two runs' rollouts.h5 and run.h5 metrics are the same (regression/ref/run_diff.py):
# same_run_dirs DIR_A DIR_B.
same_run_dirs() { "$PYTHON" regression/ref/run_diff.py "$1" "$2"; }

# N ranks of rlfuse, one OpenMP thread each (several ranks on few cores):
# mpirun N ARGS... (a scenario may define its own after this file)
mpirun() { local n=$1; shift; "$MPIEXEC" $MPIEXEC_FLAGS -n $n env OMP_NUM_THREADS=1 "$BIN/rlfuse" "$@"; }

# The RL scenarios' micro fixture in DIR (async, rloo, objectives): 30 SFT
# steps of regression/decks/tiny.deck (DIR/sft) and a reward model after 6
# steps on 48 pairs (DIR/rm), for regression/decks/rlhf_tiny.deck.
rl_micro_fixture() { # DIR
  local d=$1
  rlfuse -options_file regression/decks/tiny.deck -output_dir $d/sft -sft_steps 30 -task_len_max 8 -task_demo_noise 0.2 >$d/sft.log 2>&1 || not_ok "SFT fixture: $(tail -1 $d/sft.log)"
  rlfuse -mode rm -rm_sft_checkpoint $d/sft/final.h5 -output_dir $d/rm -rm_pairs 48 -rm_eval_pairs 16 -rm_steps 6 -rm_batch 8 \
    -gen_max_new_tokens 12 -gen_slots 8 -task_len_max 8 -task_demo_noise 0.2 -seed 7 >$d/rm.log 2>&1 || not_ok "RM fixture: $(tail -1 $d/rm.log)"
}

# The fusion scenarios' fixture in DIR: a one-layer policy after 20 SFT steps
# and a reward model after 4 RM steps (DIR/sft, DIR/rm), and in P the PPO
# options both scenarios run (2 iterations, 16 rollouts, rollouts dumped).
fusion_fixture() { # DIR [N_LAYER (default 1)]
  local d=$1
  local q="-policy_n_layer ${2:-1} -policy_n_head 2 -policy_n_embd 32 -policy_vocab_size 20 -policy_n_positions 32 -task_demo_noise 0.25 -seed 5"
  rlfuse -mode sft $q -sft_steps 20 -sft_batch 16 -policy_lr 2e-3 -output_dir $d/sft >$d/sft.log 2>&1 || not_ok "SFT fixture"
  rlfuse -mode rm -task_demo_noise 0.25 -seed 5 -rm_sft_checkpoint $d/sft/final.h5 -rm_pairs 32 -rm_eval_pairs 8 -rm_steps 4 -rm_batch 8 \
    -reward_lr 1e-3 -gen_max_new_tokens 16 -output_dir $d/rm >$d/rm.log 2>&1 || not_ok "RM fixture"
  P="-mode ppo -actor_checkpoint $d/sft/final.h5 -reward_checkpoint $d/rm/final.h5 -ppo_iterations 2 -rollout_batch 16 -ppo_minibatches 2
     -ppo_microbatches 2 -gen_max_new_tokens 16 -gen_slots 8 -ppo_eval_prompts 8 -seed 5 -dump_rollouts"
}

# Training-layout comparisons (train_layouts.sh, llama.sh), in the caller's
# $d with its mpirun N ARGS...: same_as_one_rank WHAT REF OUT [METRICS]: the
# final.h5 of $d/OUT as $d/REF's (regression/ref/ckpt_diff.py: moments within 1e-4 of
# each tensor's scale, weights within 1e-3; docs/testing.md says why) and,
# unless METRICS is 0, the run.h5 metrics within 1e-4 (regression/same_metrics.py).
same_as_one_rank() {
  local what=$1 ref=$2 out=$3 metrics=${4:-1}
  if "$PYTHON" regression/ref/ckpt_diff.py --params-tol 1e-3 $d/$ref/final.h5 $d/$out/final.h5 >$d/diff_$out.txt 2>&1 &&
     { [ "$metrics" = 0 ] || "$PYTHON" regression/same_metrics.py $d/$ref/run.h5 $d/$out/run.h5 1e-4 1e-5 >$d/metrics_$out.txt 2>&1; }
  then ok "$what: weights, moments$([ "$metrics" = 0 ] || echo " and metrics") as on 1 rank ($(grep -o 'max relative difference [^ ]*' $d/diff_$out.txt | sort -k4 -g | tail -1))"
  else not_ok "$what: differs from 1 rank"; cat $d/diff_$out.txt $d/metrics_$out.txt 2>/dev/null | grep -v PASS | tail -3 | sed 's/^/# /'; fi
}
# run_layout WHAT DECK REF N OUT [OPTIONS...]: DECK on N ranks into $d/OUT,
# then same_as_one_rank WHAT REF OUT (without metrics for a restart, whose
# run.h5 holds only its own steps: OUT named *restart*)
run_layout() {
  local what=$1 deck=$2 ref=$3 n=$4 out=$5; shift 5
  if mpirun $n $deck -output_dir $d/$out "$@" >$d/$out.log 2>&1; then same_as_one_rank "$what" $ref $out $([[ $out == *restart* ]] && echo 0 || echo 1)
  else not_ok "$what: run failed"; tail -3 $d/$out.log | sed 's/^/# /'; fi
}
