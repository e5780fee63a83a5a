# -mode plan for a deck of -mode pipeline, sft or rm: the plan
# is for the job the deck names (the -mode that -mode plan overrides), so it
# holds every call that job runs: the pipeline's sft_train and rm_train,
# each placed alone, beside PPO's searched calls, or an SFT or RM deck's one
# call. The quickstart deck's plan then runs the whole pipeline on 2 ranks
# with -plan_file (before, its SFT stage refused the file: "lacks
# /plan/sft_train"), and each stage records the file's layout of its call;
# -placement auto in an SFT run places its call as -mode plan does.
# Sizes are the quickstart's shrunk by options so that it runs in seconds.
#
# The checks in detail: `-mode plan` on the job the deck names (the `-mode` it overrides),
# shrunk by options: the quickstart deck's plan places `sft_train` and `rm_train` alone beside
# PPO's searched calls, with their estimates, the file holds every call of the pipeline, and
# the deck runs it with `-plan_file` on 2 ranks, each stage's run.h5 recording the file's
# layout of its call; an SFT deck's plan holds `sft_train` alone (the same twice) and runs on
# 2 ranks, an RM deck's `rm_train` alone and runs; `-plan_timeline` for an SFT deck, one line
. regression/lib.sh
plan 9
d="$RLFUSE_TMP/plan_stages"; mkdir -p $d
H="-mode plan -plan_ranks 2 -cost_hardware input/hardware/h100_sxm.deck -plan_iterations 200"
SHORT="-sft_steps 4 -sft_batch 8 -rm_pairs 16 -rm_eval_pairs 8 -rm_steps 2 -rm_batch 8 -rm_eval_every 1 -ppo_iterations 1 -rollout_batch 8 -ppo_minibatches 2 -gen_slots 8 -ppo_eval_every 0 -ppo_eval_prompts 8"
QS="-options_file input/quickstart.deck $SHORT"

rlfuse $QS $H -plan_output $d/p.h5 >$d/plan.log 2>&1 || not_ok "-mode plan on the quickstart deck: $(tail -3 $d/plan.log)"
check "the quickstart deck's plan places sft_train and rm_train alone, beside PPO's searched calls, with their estimates" \
  bash -c "grep -q '^sft_train placed alone: estimated .* s per step, .* s for its 4 steps' $d/plan.log && grep -q '^rm_train placed alone: estimated .* s for its 2 steps' $d/plan.log && grep -q '^  searched  ' $d/plan.log && grep -q '^  sft_train ' $d/plan.log && grep -q '^  rm_train ' $d/plan.log"
# has_calls FILE CALL...: /plan holds exactly these calls, each with an estimate
has_calls() { "$PYTHON" - "$@" <<'PY'
import sys, h5py
p = h5py.File(sys.argv[1], "r")["plan"]
want = sorted(sys.argv[2:])
sys.exit(not (sorted(k for k in p if isinstance(p[k], h5py.Group)) == want and all(p[k].attrs["est_s"] > 0 for k in want) and p.attrs["est_iter_s"] > 0))
PY
}
check "the plan file holds every call of the pipeline, each with its estimate" has_calls $d/p.h5 actor_gen ref_inf rew_inf critic_inf actor_train critic_train sft_train rm_train
# same_call A.h5 B.h5 CALL: the call's layout is the same in both files
same_call() { "$PYTHON" - "$@" <<'PY'
import sys, h5py
a, b = (h5py.File(f, "r")["plan/" + sys.argv[3]] for f in sys.argv[1:3])
sys.exit(not (list(a["ranks"][()]) == list(b["ranks"][()]) and all(a.attrs[k] == b.attrs[k] for k in ("dp", "tp", "pp", "mbs"))))
PY
}
if mpirun 2 $QS -plan_file $d/p.h5 -output_dir $d/run >$d/run.log 2>&1; then
  stages_ran() { same_call $d/p.h5 $d/run/sft/run.h5 sft_train && same_call $d/p.h5 $d/run/rm/run.h5 rm_train && same_call $d/p.h5 $d/run/ppo/run.h5 actor_train && grep -q '^pipeline summary' $d/run.log; }
  check "the quickstart deck runs its plan file on 2 ranks, every stage on the file's layout" stages_ran
else not_ok "the quickstart deck runs its plan file on 2 ranks: $(tail -3 $d/run.log)"; fi

# an SFT deck and an RM deck: their one call
printf '%s\n' "-mode sft" "-policy_n_layer 2" "-policy_n_head 4" "-policy_n_embd 128" "-policy_vocab_size 20" "-policy_n_positions 32" "-sft_steps 3" "-sft_batch 8" "-seed 5" >$d/sft.deck
rlfuse -options_file $d/sft.deck $H -plan_output $d/ps.h5 >$d/ps.log 2>&1 || not_ok "-mode plan on an SFT deck: $(tail -3 $d/ps.log)"
check "an SFT deck's plan holds sft_train alone" has_calls $d/ps.h5 sft_train
rlfuse -options_file $d/sft.deck $H -plan_output $d/ps2.h5 >/dev/null 2>&1
check "the placement is deterministic: a second search writes the same call" same_call $d/ps.h5 $d/ps2.h5 sft_train
if mpirun 2 -options_file $d/sft.deck -plan_file $d/ps.h5 -output_dir $d/sft >$d/sft.log 2>&1; then
  check "the SFT deck runs its plan file on 2 ranks" same_call $d/ps.h5 $d/sft/run.h5 sft_train
else not_ok "the SFT deck runs its plan file on 2 ranks: $(tail -3 $d/sft.log)"; fi
printf '%s\n' "-mode rm" "-rm_sft_checkpoint $d/sft/final.h5" "-rm_pairs 16" "-rm_eval_pairs 8" "-rm_steps 2" "-rm_batch 8" "-gen_max_new_tokens 16" "-seed 5" >$d/rm.deck
rlfuse -options_file $d/rm.deck $H -plan_output $d/pr.h5 >$d/pr.log 2>&1 || not_ok "-mode plan on an RM deck: $(tail -3 $d/pr.log)"
if has_calls $d/pr.h5 rm_train && mpirun 2 -options_file $d/rm.deck -plan_file $d/pr.h5 -output_dir $d/rm >$d/rm.log 2>&1; then
  check "an RM deck's plan holds rm_train alone and runs on 2 ranks" same_call $d/pr.h5 $d/rm/run.h5 rm_train
else not_ok "an RM deck's plan holds rm_train alone and runs on 2 ranks: $(tail -3 $d/rm.log)"; fi
# -placement auto places an SFT run's call as -mode plan does (ZeRO-1 as given: off)
rlfuse -options_file $d/sft.deck $H -plan_search_settings 0 -plan_output $d/ps0.h5 >/dev/null 2>&1
if mpirun 2 -options_file $d/sft.deck -placement auto -cost_hardware input/hardware/h100_sxm.deck -output_dir $d/sftauto >$d/sftauto.log 2>&1; then
  auto_placed() { grep -q '^-placement auto: placing sft_train' $d/sftauto.log && grep -q '^plan: search of sft_train' $d/sftauto.log && same_call $d/ps0.h5 $d/sftauto/run.h5 sft_train; }
  check "-placement auto in an SFT run places sft_train as -mode plan does" auto_placed
else not_ok "-placement auto in an SFT run: $(tail -3 $d/sftauto.log)"; fi
expect_error "-plan_timeline for an SFT deck, which has no PPO iteration" "-plan_timeline .*-mode sft deck has none" -options_file $d/sft.deck $H -plan_timeline $d/tl.h5
finish
