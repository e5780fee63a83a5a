# Malformed inputs beyond bad_input.sh, one case per class of defect: HDF5
# attributes of the wrong shape or range in checkpoints and data files, a
# checkpoint architecture the options would refuse, integer options past what
# they are stored in, non-finite reals, over-long paths, outputs that are not
# regular files or that name an input, and malformed decks. Each must give
# exactly one "rlfuse: error:" line naming the culprit, a non-zero exit, and
# leave an earlier run's files byte-identical.
#
# The checks in detail: one case per class of malformed input: array-valued attributes in a
# checkpoint (`n_layer`, `/state` `iteration`, `kl_coef`, a string array `head`) and a data
# file (`vocab_size`), a checkpoint with `n_head` 0 or `n_embd` not divisible by `n_head`,
# `/state` `iteration` 2^40 or a negative `data_pos`, a non-finite `kl_coef`; integer options
# past 32 bits (`-sft_steps`, `-seed` 4294967297), `n_embd` whose 4x overflows int, non-finite
# reals (`inf`, `nan`, `-plan_bucket_mb inf`), an `-output_dir` longer than a path;
# `-score_output` equal to `-score_input`, `-plan_output` equal to `-cost_profile` through a
# linked directory, `-plan_timeline` equal to `-plan_output`, `-data_text` equal to
# `-data_output` (the file-option table, both options named), a negative AdamW second moment
# in a restart file (file, tensor and element named), `-mode generate` on a reward model's
# role (naming the file and `-generate_role`), an output that is a directory or a pipe (the
# pipe stays a pipe); an input that is a file the run writes into its output directory (the
# run's own policy.h5 as `-actor_checkpoint`, final.h5 through a link as `-init_checkpoint`), a
# policy.h5 that is a directory (refused before training, final.h5 untouched), the reference's
# file replaced by a directory or a symlink loop before a restart, `-reference_checkpoint` a
# directory and `-actor_checkpoint` missing (each message names its option); a checkpoint's
# asynchronous queue edited with h5py (the last generated batch or one before another missing,
# batch versions 99 and -1, a pool token version 1000, a response length 10000, a prompt
# position -5, a NaN log-probability) and a restart with another `-rollout_batch` (named, with
# and without partial rollouts), each refused before anything is written, naming the field; out of memory under `ulimit -v` (the message names the function and the
# bytes; skipped under the sanitizers); eight malformed decks (a garbage line, a BOM, binary
# bytes, a directory, a 200 kB line, extra values, a deck including itself, two including each
# other). Each: one `rlfuse: error:` line naming the culprit, a non-zero exit, an earlier
# run's files byte-identical; and that every option of `-help` whose name says it holds a file
# is a row of src/io/files.c's table of file options
. regression/lib.sh
plan 58
d="$RLFUSE_TMP/badfiles"; deck=regression/decks/tiny.deck; mkdir -p $d
rlfuse -options_file $deck -output_dir $d/good -sft_steps 2 >$d/good.log 2>&1 || not_ok "reference run"
rlfuse -mode data -data_output $d/data.h5 -data_count 4 -task_len_min 4 -task_len_max 4 >/dev/null 2>&1 || not_ok "make data"
ck=$d/good/final.h5
keep=$d/good
ln -sfn $d/good $d/lnk; mkdir -p $d/adir

# mk NAME PYTHON: a copy of the checkpoint (or data file, SRC=...) edited by h5py code on f
mk() {
  cp "${SRC:-$ck}" $d/$1.h5
  "$PYTHON" -c "import sys, h5py, numpy as np
with h5py.File(sys.argv[1], 'r+') as f:
    $2" $d/$1.h5 || not_ok "prepare $1"
}
mk n_layer_array   "f['policy'].attrs['n_layer'] = np.array([2, 2, 2, 2], np.int32)"
mk iter_array      "f['state'].attrs['iteration'] = np.arange(1000, dtype=np.int64)"
mk kl_array        "f['state'].attrs['kl_coef'] = np.ones(64)"
mk head_array      "f['policy'].attrs['head'] = np.array([b'lm', b'scalar'])"
mk n_head_zero     "f['policy'].attrs['n_head'] = np.int32(0)"
mk n_head_3        "f['policy'].attrs['n_head'] = np.int32(3)"
mk iter_huge       "f['state'].attrs['iteration'] = np.int64(2**40)"
mk pos_negative    "f['state'].attrs['data_pos'] = np.int64(-5)"
mk kl_inf          "f['state'].attrs['kl_coef'] = np.inf"
SRC=$d/data.h5 mk vocab_array "f.attrs['vocab_size'] = np.array([20, 20])"
mk n_layer_cut     "f['policy'].attrs['n_layer'] = np.int32(1)"
mk nan_weight      "d = f['/policy/params/transformer.h.1.mlp.c_fc.weight']; a = d[...]; a[3, 5] = np.nan; d[...] = a"
mk neg_v           "d = f['/policy/optim/v/transformer.h.1.mlp.c_fc.weight']; a = d[...]; a[2, 7] = -1e-3; d[...] = a"

expect() { local what=$1 pat=$2; shift 2; expect_error "$what" "$pat" "$@" -output_dir $d/good; }
expect "array attribute n_layer"        "n_layer has shape \[4\], expected a single value" -options_file $deck -init_checkpoint $d/n_layer_array.h5
expect "array attribute /state iteration" "iteration has shape \[1000\]"    -options_file $deck -restart $d/iter_array.h5
expect "array attribute kl_coef"        "kl_coef has shape \[64\]"          -options_file $deck -restart $d/kl_array.h5
expect "string array attribute head"    "head has shape \[2\]"              -options_file $deck -init_checkpoint $d/head_array.h5
expect "checkpoint n_head 0"            "head_zero.h5 /policy: n_head 0 must be positive" -options_file $deck -init_checkpoint $d/n_head_zero.h5
expect "checkpoint n_embd % n_head"     "n_head_3.h5 /policy: n_embd 32 is not divisible by n_head 3" -options_file $deck -init_checkpoint $d/n_head_3.h5
expect "checkpoint iteration 2^40"      "iteration = 1099511627776 is out of range" -options_file $deck -restart $d/iter_huge.h5
expect "checkpoint data_pos negative"   "data_pos = -5 is out of range"     -options_file $deck -restart $d/pos_negative.h5
expect "checkpoint kl_coef inf"         "kl_coef = inf is not a finite number" -options_file $deck -restart $d/kl_inf.h5
expect "attributes n_layer 1, tensors of 2 layers" "n_layer_cut.h5: /policy/params/transformer.h.1.* is not a tensor of the architecture its attributes give (n_layer 1" -options_file $deck -restart $d/n_layer_cut.h5 -policy_n_layer 1
expect "a NaN weight in a checkpoint"   "nan_weight.h5: /policy/params/transformer.h.1.mlp.c_fc.weight holds NaN at \[3, 5\]" -options_file $deck -init_checkpoint $d/nan_weight.h5
expect "a negative AdamW second moment" "neg_v.h5: /policy/optim/v/transformer.h.1.mlp.c_fc.weight holds -0.001 at \[2, 7\].*second moments must be >= 0" -options_file $deck -restart $d/neg_v.h5
expect "data file vocab_size array"     "vocab_size has shape \[2\]"        -mode score -score_checkpoint $ck -score_input $d/vocab_array.h5 -score_output $d/s.h5
expect "integer option past 32 bits"    "-sft_steps: 4294967297 is out of range" -options_file $deck -sft_steps 4294967297
expect "seed past 32 bits"              "-seed: 4294967297 is out of range" -options_file $deck -seed 4294967297
expect "infinite real option"           "-policy_lr: 'inf' is not a finite number" -options_file $deck -policy_lr inf
expect "NaN real option"                "-policy_lr: 'nan' is not a finite number" -options_file $deck -policy_lr nan
expect "n_embd whose 4x overflows int"  "-policy_n_embd 2147483646 is too large" -options_file $deck -policy_n_embd 2147483646 -policy_n_head 2 -dry_run
expect "plan size past size_t"         "-plan_bucket_mb 1e+300 is out of range (expected a positive number up to 1.09951e+12)" -options_file $deck -plan_bucket_mb 1e300
expect "infinite plan size"             "-plan_bucket_mb: 'inf' is not a finite number" -options_file $deck -plan_bucket_mb inf
# the PPO restart of the issue: /reference says 1 layer, its tensors hold 2
# (before, the reference was cut to 1 layer and written so to final.h5); the
# checkpoint records the reference's file instead of a copy, so the copy is
# made here from the actor, as a checkpoint written before that holds it
ppo="-mode ppo -seed 7 -rollout_batch 8 -ppo_minibatches 2 -gen_max_new_tokens 8 -ppo_eval_prompts 8"
rlfuse -mode rm -seed 7 -rm_sft_checkpoint $ck -rm_pairs 16 -rm_eval_pairs 8 -rm_steps 1 -rm_batch 8 -gen_max_new_tokens 8 -output_dir $d/rm >$d/rm.log 2>&1 || not_ok "RM fixture"
rlfuse $ppo -actor_checkpoint $ck -reward_checkpoint $d/rm/final.h5 -ppo_iterations 1 -output_dir $d/ppo >$d/ppo.log 2>&1 || not_ok "PPO fixture"
SRC=$d/ppo/final.h5 mk ref_cut "f.copy('actor', 'reference'); del f['reference/optim'], f['reference_source']; f['reference'].attrs['n_layer'] = np.int32(1)"
keep=$d/ppo expect_error "PPO restart: /reference attributes n_layer 1, tensors of 2 layers" "ref_cut.h5: /reference/params/transformer.h.1.* is not a tensor of the architecture its attributes give (n_layer 1" $ppo -ppo_iterations 2 -restart $d/ref_cut.h5 -output_dir $d/ppo
# the run's own outputs as its inputs (the output directory's files are rows
# of the file check): the run's policy.h5 as -actor_checkpoint (before: read,
# then overwritten, and it was the reference), final.h5 through a linked directory
keep=$d/ppo expect_error "-actor_checkpoint the run's own policy.h5" "-actor_checkpoint $d/ppo/policy.h5 is the policy.h5 this run writes into -output_dir $d/ppo" $ppo -actor_checkpoint $d/ppo/policy.h5 -reward_checkpoint $d/rm/final.h5 -ppo_iterations 1 -output_dir $d/ppo
keep=$d/good expect_error "-init_checkpoint the run's own final.h5 through a link" "-init_checkpoint $d/lnk/final.h5 is the final.h5 this run writes into -output_dir $d/good" -options_file $deck -init_checkpoint $d/lnk/final.h5 -output_dir $d/good
# an output of the directory that is a directory: refused before training (before: after it, final.h5 replaced)
mkdir -p $d/pdir/policy.h5; cp $d/ppo/final.h5 $d/pdir/
keep=$d/pdir expect_error "policy.h5 a directory, before any work" "-output_dir $d/pdir: policy.h5 exists and is not a regular file (a directory)" $ppo -actor_checkpoint $ck -reward_checkpoint $d/rm/final.h5 -ppo_iterations 1 -output_dir $d/pdir
# the reference's file replaced by a directory or a symlink loop before a
# restart, or given so, or missing: each named with its option (before: "reading failed", "missing", "cannot resolve")
cp $ck $d/refsrc.h5
rlfuse $ppo -actor_checkpoint $d/refsrc.h5 -reward_checkpoint $d/rm/final.h5 -ppo_iterations 1 -output_dir $d/ppo6 >$d/ppo6.log 2>&1 || not_ok "PPO fixture (reference in a file of its own)"
mv $d/refsrc.h5 $d/refsrc.bak; mkdir $d/refsrc.h5
keep=$d/ppo6 expect_error "restart: the reference's file now a directory" "-restart: checkpoint $d/ppo6/final.h5 holds no reference: it was read from .*/refsrc.h5, which is a directory" $ppo -actor_checkpoint $d/refsrc.bak -reward_checkpoint $d/rm/final.h5 -ppo_iterations 2 -restart $d/ppo6/final.h5 -output_dir $d/ppo6
rmdir $d/refsrc.h5; ln -s $d/refsrc.h5 $d/refsrc.h5
keep=$d/ppo6 expect_error "restart: the reference's file now a symlink loop" "-restart: checkpoint $d/ppo6/final.h5 holds no reference: it was read from .*/refsrc.h5, which is a symlink loop" $ppo -actor_checkpoint $d/refsrc.bak -reward_checkpoint $d/rm/final.h5 -ppo_iterations 2 -restart $d/ppo6/final.h5 -output_dir $d/ppo6
keep=$d/ppo expect_error "-reference_checkpoint a directory" "-reference_checkpoint $d/adir is a directory" $ppo -actor_checkpoint $ck -reference_checkpoint $d/adir -reward_checkpoint $d/rm/final.h5 -ppo_iterations 1 -output_dir $d/ppo
expect "-actor_checkpoint missing"      "-actor_checkpoint $d/nope/a.h5 is missing" $ppo -actor_checkpoint $d/nope/a.h5 -reward_checkpoint $d/rm/final.h5 -ppo_iterations 1
# a checkpoint's asynchronous queue (/async) edited: every field is checked
# against what the run can hold before anything is written (before: a missing
# batch was generated anew, versions 99 or -1 gave staleness -96 or 4 > K, a
# pool's token version 1000 or response length 10000 went into every later
# checkpoint, a prompt position -5 was refused only when final.h5 was
# written, naming that file, and another -rollout_batch named other options)
A="-mode ppo -seed 7 -ppo_minibatches 2 -gen_max_new_tokens 12 -task_len_max 8 -ppo_eval_prompts 8 -actor_checkpoint $ck -reward_checkpoint $d/rm/final.h5 -async_staleness 2 -ppo_iterations 3 -checkpoint_every 1"
P="-async_partial 3 -algo grpo -rollout_group 4"
rlfuse $A -rollout_batch 8 -output_dir $d/aq >$d/aq.log 2>&1 || not_ok "async fixture"
rlfuse $A -rollout_batch 8 $P -output_dir $d/ap >$d/ap.log 2>&1 || not_ok "async partial fixture"
set_at() { echo "d = f['$1']; a = d[...]; a[$2] = $3; d[...] = a"; }
SRC=$d/aq/ckpt_000001.h5 mk a_last  "del f['async/batch_2']"
SRC=$d/aq/ckpt_000001.h5 mk a_v99   "$(set_at async/batch_2/versions 3 99)"
SRC=$d/aq/ckpt_000001.h5 mk a_vneg  "$(set_at async/batch_1/versions 0 -1)"
SRC=$d/ap/ckpt_000001.h5 mk a_first "del f['async/batch_1']"
SRC=$d/ap/ckpt_000001.h5 mk a_tver  "$(set_at async/pool/token_versions '1, 9' 1000)"
SRC=$d/ap/ckpt_000001.h5 mk a_len   "$(set_at async/pool/response_lengths 2 10000)"
SRC=$d/ap/ckpt_000001.h5 mk a_ppos  "$(set_at async/pool/prompt_positions 0 -5)"
SRC=$d/ap/ckpt_000001.h5 mk a_lp    "$(set_at async/batch_2/logprobs '0, 8' np.nan)"
ra() { local what=$1 pat=$2 dir=$3; shift 3; keep=$d/$dir expect_error "$what" "$pat" $A "$@" -output_dir $d/$dir; }
ra "async: the last generated batch missing" "a_last.h5: /async/batch_1 data_pos = 8, expected 16 .*a batch is missing" aq -rollout_batch 8 -restart $d/a_last.h5
ra "async: a batch version 99"    "a_v99.h5: /async/batch_2/versions\[3\] = 99 is outside \[0, 1\]" aq -rollout_batch 8 -restart $d/a_v99.h5
ra "async: a batch version -1"    "a_vneg.h5: /async/batch_1/versions\[0\] = -1 is outside \[0, 1\]" aq -rollout_batch 8 -restart $d/a_vneg.h5
ra "async: another -rollout_batch names it" "ckpt_000001.h5 holds generated batches of 8 rows (/async/batch_1): restart it with -rollout_batch 8 (not 16)" aq -restart $d/aq/ckpt_000001.h5 -rollout_batch 16
ra "async: a batch missing before another" "a_first.h5: /async holds batch_2 but not batch_1 before it" ap -rollout_batch 8 $P -restart $d/a_first.h5
ra "async: a pool token version 1000" "a_tver.h5: /async/pool/token_versions\[1, 9\] = 1000 is outside \[0, 1\]" ap -rollout_batch 8 $P -restart $d/a_tver.h5
ra "async: a pool response length 10000" "a_len.h5: /async/pool/response_lengths\[2\] = 10000 is outside \[0, 12\]" ap -rollout_batch 8 $P -restart $d/a_len.h5
ra "async: a pool prompt position -5" "a_ppos.h5: /async/pool/prompt_positions\[0\] = -5 is outside \[0, " ap -rollout_batch 8 $P -restart $d/a_ppos.h5
ra "async: a NaN behaviour log-probability" "a_lp.h5: /async/batch_2/logprobs\[0, 8\] = nan is not a log-probability" ap -rollout_batch 8 $P -restart $d/a_lp.h5
ra "async, partial: another -rollout_batch names it" "ckpt_000001.h5 holds generated batches of 8 rows (/async/batch_1): restart it with -rollout_batch 8 (not 16)" ap $P -restart $d/ap/ckpt_000001.h5 -rollout_batch 16
expect "generate from a reward model"   "-generate_checkpoint $d/rm/final.h5: -generate_role reward has a scalar head" -mode generate -generate_checkpoint $d/rm/final.h5 -generate_role reward -generate_input $d/data.h5 -generate_output $d/good/g.h5
long=$d/$(printf 'x%.0s' $(seq 4100))
keep= expect_error "output_dir longer than a path" "-output_dir: value of 4[0-9]* characters is longer than the 4095 allowed" -options_file $deck -output_dir $long
expect "score output = score input"     "-score_output $d/data.h5 is also an input" -mode score -score_checkpoint $ck -score_input $d/data.h5 -score_output $d/data.h5
# every file option in its module's table (IoFileOption), compared by what the paths
# resolve to: an output that is an input or another output is refused before
# any work (before, each overwrote the other and the run said it succeeded)
expect "plan output = cost profile, through a link" "-plan_output $d/lnk/final.h5 is also an input of this run (-cost_profile $ck)" -mode plan -plan_ranks 2 -cost_profile $ck -plan_output $d/lnk/final.h5
expect "plan timeline = plan output"   "-plan_output $d/good/p.h5 is also the output of -plan_timeline ($d/good/./p.h5)" -mode plan -plan_ranks 2 -cost_hardware input/hardware/h100_sxm.deck -plan_output $d/good/p.h5 -plan_timeline $d/good/./p.h5
expect "data text = data output"       "-data_output $d/good/t.h5 is also the output of -data_text" -mode data -task arith -data_count 2 -data_output $d/good/t.h5 -data_text $d/good/t.h5
mkfifo $d/fifo
expect "data output a directory"        "-data_output $d/adir.*not a regular file" -mode data -data_output $d/adir -data_count 2
expect "data output a pipe"             "-data_output $d/fifo.*not a regular file" -mode data -data_output $d/fifo -data_count 2
check "  ... and the pipe is still a pipe" test -p $d/fifo

# out of memory: the message says where and how many bytes (virtual memory
# limited to 1.5 GiB, a model whose parameters need 1.1 GiB and gradients as
# much again); ASan reserves terabytes of address space, so not under it
if [ -n "${RLFUSE_SANITIZE:-}" ]; then skip "out of memory: the sanitizer build cannot run under ulimit -v"
else
  eval "$(declare -f rlfuse | sed '1s/^rlfuse/rlfuse_unlimited/')"
  rlfuse() { ( ulimit -v 1500000; rlfuse_unlimited "$@" ); }
  expect "out of memory"                "out of memory in model_create.*bytes (1.1 GiB) could not be allocated" -options_file $deck -policy_n_embd 1024 -policy_n_head 16 -policy_n_layer 24 -sft_steps 1
  eval "$(declare -f rlfuse_unlimited | sed '1s/^rlfuse_unlimited/rlfuse/')"
fi

# decks: each malformed the way PETSc would answer with a traceback
printf -- '-mode sft\ngarbage line\n' >$d/garbage.deck
printf '\xef\xbb\xbf-mode sft\n' >$d/bom.deck
printf -- '-mode sft\n-sft_steps 2\x00\x01\n' >$d/binary.deck
"$PYTHON" -c "print('-sft_steps ' + '1' * 200000)" >$d/longline.deck
printf -- '-mode sft -sft_steps 2\n' >$d/extra.deck
printf -- '-mode sft\n-sft_data %s/data#1.h5\n-sft_steps 2 # a comment\n' $d >$d/hash.deck
printf -- '-options_file %s\n' $d/self.deck >$d/self.deck
printf -- '-options_file %s\n' $d/b.deck >$d/a.deck; printf -- '-options_file %s\n' $d/a.deck >$d/b.deck
expect "deck: a garbage line"           "garbage.deck line 2: 'garbage' is not an option" -options_file $d/garbage.deck
expect "deck: UTF-8 byte-order mark"    "bom.deck starts with a UTF-8 byte-order mark" -options_file $d/bom.deck
expect "deck: binary bytes"             "binary.deck line 2: binary byte 0x00"  -options_file $d/binary.deck
expect "deck: a directory"              "-options_file $d: is a directory"      -options_file $d
expect "deck: a 200 kB line"            "longline.deck line 1: 2000[0-9]* characters" -options_file $d/longline.deck
expect "deck: extra values on a line"   "extra.deck line 1: extra value '-sft_steps'" -options_file $d/extra.deck
expect "deck: '#' inside a value"      "hash.deck line 2: '#' inside a value" -options_file $d/hash.deck
expect "deck: includes itself"          "self.deck includes itself"             -options_file $d/self.deck
expect "deck: two decks include each other" "a.deck includes itself through .*b.deck" -options_file $d/a.deck
# The tables of file options (one per module, IoFileOption) are complete: every
# option of -help whose name says it holds a file is a row, so its role is checked with
# the others (-ppo_eval_prompts is a count, -train_schedule a schedule's name).
named=$(rlfuse -help 2>&1 | sed -nE '/^  -[a-z0-9_]+ <(true|false)>/d; s/^  (-[a-z0-9_]+) <.*/\1/p' | sort -u | grep -E '(_checkpoint|_file|_output|_input|_data|_prompts|_timeline|_profile|_hardware|_schedule|_text|_lengths|^-restart)$' | grep -vxE -e '-ppo_eval_prompts' -e '-train_schedule')
rows=$(grep -rhoE '^ *\{"-[a-z0-9_]+", IO_FILE_' src | grep -oE -- '-[a-z0-9_]+' | sort -u)
missing=$(comm -23 <(echo "$named") <(echo "$rows") | tr '\n' ' ')
check "every file option of -help is a row of its module's file options (missing: ${missing:-none})" test -z "$missing" -a -n "$named"
finish
