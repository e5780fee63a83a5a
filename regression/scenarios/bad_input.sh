# Bad input: each case must stop with exactly one line "rlfuse: error: ..."
# naming the culprit, exit non-zero, and leave the files of an earlier run in
# the same output directory untouched (no new files either).
#
# The checks in detail: missing deck, unknown option (a one-letter typo and a swapped pair
# each named with the nearest option this run reads: "did you mean -sft_steps?"), option of
# another mode, non-numeric values, n_embd not divisible by n_head, unknown or unavailable
# mode, missing/truncated/corrupt checkpoint, wrong tensor shape, configuration mismatch,
# score input longer than n_positions, a task that does not fit the context, a prompt file for
# `-mode generate` with a larger vocabulary than the model's, a boolean option (`-dry_run`,
# `-grpo_scale_std`) given a non-boolean, `-ppo_dynamic_sampling` past int positions and
# `-ppo_dynamic_rounds` past memory (each named), SFT data whose rows have no response tokens
# (the file named), `-plan_chains 0`, `-reward_command_timeout 0` and a `-reward_length_start`
# past `-gen_max_new_tokens` (checked by src/plan and src/reward, which own them): each gives
# exactly one `rlfuse: error:` line naming the culprit, a non-zero exit, and leaves an earlier
# run's files byte-identical with no new files; and `-help` prints rlfuse's options first,
# each with its default and a given value where it differs, PETSc's generic ones after them.
# Messages that name what the user gave: `-async_partial_extra 2147483647`
# with its range; `-help -async_staleness -1` prints the help; under `-mode plan`
# `-async_staleness -1` and `-ppo_minibatches 0` by those names (not -cost_*); a 2-rank plan
# file on 1 rank by the file and both rank counts; a deck's misspelled option with its deck
# line and did-you-mean, and one in `-mode plan` refused at all; `-dry_run` of a GRPO run
# prints its estimated host memory per rank; a reward-command answer line over 1 MiB gives
# rlfuse's one line, naming -reward_command and the limit, and nothing of the killed program
# after it (the limit in docs/rewards.md); NaN behaviour log-probabilities in a restarted
# checkpoint's /async batch are named at the batch (iteration, sample, token, file), not as a
# NaN loss later
. regression/lib.sh
plan 53
d="$RLFUSE_TMP/bad"; deck=regression/decks/tiny.deck; mkdir -p $d
rlfuse -options_file $deck -output_dir $d/good >$d/good.log 2>&1 || not_ok "reference run"
ck=$d/good/final.h5

# Prepared bad files: truncated and corrupt checkpoints, a checkpoint with a
# wrong tensor shape, and a token file longer than the model's context.
head -c $(( $(stat -c %s $ck) / 2 )) $ck >$d/truncated.h5
echo "not an HDF5 file" >$d/text.h5
cp $ck $d/badshape.h5
"$PYTHON" - $d/badshape.h5 <<'PY'
import sys, h5py, numpy as np
with h5py.File(sys.argv[1], "r+") as f:
    del f["/policy/params/transformer.h.1.mlp.c_fc.weight"]
    f["/policy/params/transformer.h.1.mlp.c_fc.weight"] = np.zeros((32, 64), np.float32)
PY
rlfuse -mode data -data_output $d/long.h5 -data_count 4 -task_len_min 20 -task_len_max 20 >/dev/null 2>&1 || not_ok "make long data"

# expect NAME PATTERN ARGS...: one error line matching PATTERN, non-zero exit, earlier files intact
keep=$d/good
expect() { local what=$1 pat=$2; shift 2; expect_error "$what" "$pat" "$@" -output_dir $d/good/out; }
expect "missing deck"               "input/nope.deck"              -options_file input/nope.deck
expect "unknown option"             "-sft_stepz"                   -options_file $deck -sft_stepz 10
expect "unknown option one letter off: did you mean" "-sft_stepz (did you mean -sft_steps?)" -options_file $deck -sft_stepz 10
expect "unknown option with a swapped pair: did you mean" "-policy_n_layre (did you mean -policy_n_layer?)" -options_file $deck -policy_n_layre 2
rlfuse -help -ppo_iterations 5 >$d/help.txt 2>&1 || not_ok "-help exits 0"
check "-help: rlfuse's options come first (-mode, with its default), PETSc's after them" bash -c "[ \"\$(grep -m1 '^ *-[a-z]' $d/help.txt)\" = \"\$(grep -m1 '^  -mode <sft>: Job to run' $d/help.txt)\" ] && [ \$(grep -n -m1 'Options for all PETSc programs' $d/help.txt | cut -d: -f1) -gt \$(grep -n -m1 -- '-ppo_iterations <' $d/help.txt | cut -d: -f1) ]"
check "-help gives each option's default, and the value given where it differs" bash -c "grep -q -- '^  -ppo_iterations <100> (now 5): ' $d/help.txt && grep -q -- '^  -gen_temperature <1>: ' $d/help.txt"
expect "non-numeric value"          "-sft_steps.*'ten'"            -options_file $deck -sft_steps ten
expect "non-numeric real"           "-policy_lr.*'fast'"           -options_file $deck -policy_lr fast
expect "n_embd not divisible"       "-policy_n_embd 33.*-policy_n_head" -options_file $deck -policy_n_embd 33
expect "unknown mode"               "-mode"                        -options_file $deck -mode dance
expect "mode not yet available"     "-mode plan"                   -options_file $deck -mode plan
expect "empty -mode (not the default)" "option -mode: the value is empty" -options_file $deck -mode ''
expect "empty -precision"           "option -precision: the value is empty" -options_file $deck -precision ''
expect "negative -logits_tile_mb"   "-logits_tile_mb -1. must be 0 (no tiles)" -options_file $deck -logits_tile_mb -1
expect_error "--help (two dashes): named, nothing run" "command line: --help: rlfuse's options take one dash (-help)" -options_file $deck --help -output_dir $d/good
expect_error "an option with an en dash (as a web page writes it): named, not dropped" "command line: '–async_staleness' starts with a typographic dash" -options_file $deck –async_staleness 2 -output_dir $d/good
expect_error "a stray word on the command line" "command line: 'extra' is no option and follows none" -options_file $deck -sft_steps 2 extra -output_dir $d/good
expect_error "a renamed option (-grpo_group) names its new name" "unknown option -grpo_group (did you mean -rollout_group?)" -mode ppo -grpo_group 4 -output_dir $d/good
check "an error PETSc raises (a bad -algo) ends without PETSc's build path" bash -c \
  "\"$MPIEXEC\" $MPIEXEC_FLAGS -n 1 \"$BIN/rlfuse\" -mode ppo -algo nosuch -output_dir $d/good 2>&1 >/dev/null | grep -q '^rlfuse: error: Unknown option nosuch for -algo' &&
   ! \"$MPIEXEC\" $MPIEXEC_FLAGS -n 1 \"$BIN/rlfuse\" -mode ppo -algo nosuch -output_dir $d/good 2>&1 | grep -qi 'petsc.*\.c:'"
expect_error "empty -output_dir"    "option -output_dir: the value is empty" -options_file $deck -output_dir ''
RLFUSE_WAIT_POLICY=sometimes expect_error "an unknown RLFUSE_WAIT_POLICY: the variable and its values named, nothing run" \
  "environment variable RLFUSE_WAIT_POLICY=sometimes: give yield, poll or auto" -options_file $deck -output_dir $d/good
expect "a batch larger than memory"  "-sft_batch 100000000 needs at least .* per rank .* more than the .* available" -options_file $deck -sft_batch 100000000
expect "a rollout batch larger than memory" "-rollout_batch 60000000 needs at least .* per rank for its rollout" -options_file $deck -mode pipeline -gen_max_new_tokens 16 -rollout_batch 60000000 -ppo_minibatches 4
expect "a rollout batch past int positions" "-rollout_batch 2147483644 x .* positions" -options_file $deck -mode pipeline -gen_max_new_tokens 16 -rollout_batch 2147483644 -ppo_minibatches 4
expect "option of another mode"     "-score_batch"                 -options_file $deck -score_batch 4
expect "missing checkpoint"         "nope.h5"                      -options_file $deck -restart $d/nope.h5
expect "truncated checkpoint"       "truncated.h5"                 -options_file $deck -restart $d/truncated.h5
expect "corrupt checkpoint"         "text.h5"                      -options_file $deck -init_checkpoint $d/text.h5
expect "wrong tensor shape"         "c_fc.weight.*shape"           -options_file $deck -init_checkpoint $d/badshape.h5
expect "config mismatch"            "n_embd"                       -options_file $deck -init_checkpoint $ck -policy_n_embd 64
expect "score input too long"       "long.h5.*n_positions"         -mode score -score_checkpoint $ck -score_input $d/long.h5 -score_output $d/good/s.h5
expect "task does not fit context"  "-task_len_max.*n_positions"   -options_file $deck -task_len_max 20
expect "sequence shorter than data"  "-sft_seq_len 10"              -options_file $deck -sft_seq_len 10
# each named by its option or file (before: accepted, a bare
# allocation failure, the wrong option, PETSc's message without the option)
rlfuse -mode data -data_output $d/short.h5 -data_count 4 >/dev/null 2>&1 || not_ok "make short data"
"$PYTHON" - $d/short.h5 $d/bigvocab.h5 $d/noresp.h5 <<'PY' || not_ok "prepare the bad prompt files"
import sys, shutil, h5py, numpy as np
shutil.copy(sys.argv[1], sys.argv[2]); shutil.copy(sys.argv[1], sys.argv[3])
with h5py.File(sys.argv[2], "r+") as f: f.attrs["vocab_size"] = np.int32(1000)
with h5py.File(sys.argv[3], "r+") as f: f["prompt_lengths"][...] = f["lengths"][()]
PY
G="-mode ppo -algo grpo -actor_checkpoint $ck -reward_fn length -rollout_batch 8 -rollout_group 4 -ppo_minibatches 2 -gen_max_new_tokens 8"
expect "generate: prompts of a larger vocabulary" "-generate_input $d/bigvocab.h5 has vocabulary 1000, larger than the model's 20" -mode generate -generate_checkpoint $ck -generate_input $d/bigvocab.h5 -generate_output $d/good/g.h5 -gen_max_new_tokens 4
expect "a boolean option given a non-boolean" "option -dry_run: 'yes-please' is not a boolean" -options_file $deck -dry_run yes-please
expect "  ... a prefixed one"           "option -grpo_scale_std: 'maybe' is not a boolean" $G -grpo_scale_std maybe
expect "dynamic sampling past int positions" "-rollout_batch 8 x -ppo_dynamic_sampling 2147483647 x .* positions" $G -ppo_dynamic_sampling 2147483647
expect "dynamic rounds past memory"     "-ppo_dynamic_rounds 2147483647 keeps .* of reference answers" $G -ppo_dynamic_sampling 2 -ppo_dynamic_rounds 2147483647
expect "SFT rows without response tokens" "-sft_data $d/noresp.h5: none of its 4 rows has response tokens" -options_file $deck -sft_data $d/noresp.h5
# options read by their owner module (src/plan, src/reward) and checked there
expect "-plan_chains out of range"  "-plan_chains 0 must be in 1..1024" -options_file $deck -mode plan -plan_ranks 2 -plan_chains 0
expect "-reward_command_timeout 0"  "-reward_command_timeout 0.* must be positive" -options_file $deck -mode pipeline -gen_max_new_tokens 16 -reward_command_timeout 0
expect "-reward_length_start past the responses" "-reward_length_start 17 must be in \\[0, -gen_max_new_tokens 16\\]" -options_file $deck -mode pipeline -gen_max_new_tokens 16 -reward_length_start 17
# each message names the option, file or value the user gave (not an internal one)
expect "-async_partial_extra past int rows: named with its range" "-async_partial_extra 2147483647 must be in \\[1, [0-9]*\\]" $G -async_staleness 1 -async_partial 2 -async_partial_extra 2147483647
rlfuse -help -async_staleness -1 >$d/help_bad.txt 2>&1; rc=$?
check "-help with a bad -async_staleness prints the help (exit 0), naming no -cost_ option" bash -c \
  "[ $rc -eq 0 ] && grep -q -- '^  -async_staleness <0> (now -1): ' $d/help_bad.txt && ! grep -q 'error.*-cost_staleness' $d/help_bad.txt"
expect "-mode plan: a bad -async_staleness is named as given" "-async_staleness -1 must be >= 0" -mode plan -plan_ranks 2 -async_staleness -1
expect "-mode plan: -ppo_minibatches 0 is named as given" "-ppo_minibatches 0 must be positive and divide -rollout_batch 64" -mode plan -plan_ranks 2 -ppo_minibatches 0
rlfuse -options_file regression/decks/rlhf_tiny.deck -mode plan -plan_ranks 2 -plan_output $d/p2.h5 -cost_hardware input/hardware/h100_sxm.deck \
  -plan_iterations 50 >$d/p2.log 2>&1 || not_ok "a 2-rank plan file: $(tail -1 $d/p2.log)"
expect "a 2-rank plan file on 1 rank: the file named, its ranks and the run's" "-plan_file $d/p2.h5: the plan was made for 2 ranks (its actor_gen runs on ranks 0-1) and this run has 1" -options_file regression/decks/rlhf_tiny.deck -plan_file $d/p2.h5
printf -- '-mode sft\n-sft_stepz 3\n' >$d/typo.deck
expect "a misspelled option in a deck: its file and line, and did you mean" "-sft_stepz at deck $d/typo.deck line 2 (did you mean -sft_steps?)" -options_file $d/typo.deck
expect "-mode plan refuses a misspelled option (it ran with it)" "unknown option -plan_rankz (did you mean -plan_ranks?)" -mode plan -plan_ranks 2 -plan_rankz 2 -cost_hardware input/hardware/h100_sxm.deck
# an arithmetic actor (text for the reward command, answers for -reward_fn numeric): a second
rlfuse -mode sft -task arith -arith_max_operand 9 -arith_ops +- -policy_n_layer 1 -policy_n_head 2 -policy_n_embd 32 -policy_vocab_size 48 \
  -policy_n_positions 16 -sft_steps 2 -sft_batch 8 -output_dir $d/arith >$d/arith.log 2>&1 || not_ok "arithmetic actor: $(tail -1 $d/arith.log)"
A="-mode ppo -algo grpo -task arith -arith_max_operand 9 -arith_ops +- -actor_checkpoint $d/arith/final.h5 -rollout_batch 8 -rollout_group 4
   -ppo_minibatches 2 -gen_max_new_tokens 6 -ppo_eval_prompts 0"
rlfuse $A -reward_fn numeric -dry_run >$d/dry.txt 2>&1
check "-dry_run of a GRPO run prints its estimated host memory per rank in one line" grep -q '^dry run: estimated host memory per rank [0-9.]* [KMG]*i*B ' $d/dry.txt
cat >$d/long_line.py <<'PY'
import sys
for line in sys.stdin:  # 2.5 MiB without a newline, in pieces, as a program printing a huge answer does
    for _ in range(40): sys.stdout.write("1" * 65536); sys.stdout.flush()
    print(1, flush=True)
PY
rlfuse $A -ppo_iterations 1 -reward_command "$PYTHON $d/long_line.py" -output_dir $d/longcmd >/dev/null 2>$d/longcmd.err; rc=$?
sleep 1 # what the killed program would print comes after rlfuse has ended
check "a reward-command line over 1 MiB: one line, the last, naming -reward_command and the limit; the limit documented" bash -c \
  "[ $rc -ne 0 ] && [ \$(grep -c . $d/longcmd.err) -eq 1 ] && grep -q 'printed a line longer than 1048576 bytes .*-reward_command .*1 MiB' $d/longcmd.err &&
   grep -q 'at most 1 MiB' docs/rewards.md"
rlfuse $A -reward_fn numeric -async_staleness 1 -ppo_iterations 2 -ppo_checkpoint_every 1 -output_dir $d/async1 >$d/async1.log 2>&1 || not_ok "async run: $(tail -1 $d/async1.log)"
"$PYTHON" - $d/async1/ckpt_000001.h5 $d/nanlp.h5 <<'PY' || not_ok "prepare the NaN log-probabilities"
import sys, shutil, h5py, numpy as np
shutil.copy(sys.argv[1], sys.argv[2])
with h5py.File(sys.argv[2], "r+") as f:
    g = f["/async/batch_1"]; lp = g["logprobs"][()]; lp[2, g["prompt_lengths"][2] + 1] = np.nan; g["logprobs"][...] = lp
PY
expect_error "a NaN behaviour log-probability in a checkpoint's /async batch: refused at the restart, naming the file and the field" \
  "\-restart $d/nanlp.h5: /async/batch_1/logprobs\[2, [0-9]*\] = nan is not a log-probability" \
  $A -reward_fn numeric -async_staleness 1 -ppo_iterations 2 -restart $d/nanlp.h5 -output_dir $d/nanrun
# a reference whose final layer norm overflows (finite weights, so the load
# accepts it): its log-probabilities are NaN, refused at the batch naming the
# iteration, sample, token and file, not as a NaN loss at the next step
"$PYTHON" - $d/arith/final.h5 $d/over.h5 <<'PY' || not_ok "prepare the overflowing reference"
import sys, shutil, h5py
shutil.copy(sys.argv[1], sys.argv[2])
with h5py.File(sys.argv[2], "r+") as f:
    p = f["policy/params"]
    b = p["transformer.ln_f.bias"][()]; b[:2] = 3e38; p["transformer.ln_f.bias"][...] = b
    p["transformer.ln_f.weight"][...] = 0
    e = p["transformer.wte.weight"][()]; e[:, :2] = 1; p["transformer.wte.weight"][...] = e
PY
expect_error "NaN reference log-probabilities: named at the batch (iteration, sample, token, file), not as a NaN loss" \
  "iteration 1: the reference log-probability of sample 0, response token 0 is NaN (the reference of $d/over.h5)" \
  $A -reward_fn numeric -ppo_iterations 2 -reference_checkpoint $d/over.h5 -output_dir $d/overrun
finish
