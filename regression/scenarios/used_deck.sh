# <output_dir>/used.deck repeats the run: a micro pipeline (SFT, RM, PPO),
# given options from a deck and from the command line (one with its default
# value, a bare flag), is rerun from its used.deck alone into another
# directory, and every checkpoint tensor and every metric of every stage must
# be bit-identical. An SFT run from a -plan_file, where merely giving
# -placement would be an error, must repeat too. The pipeline run also checks
# the checkpoint intervals: -<stage>_checkpoint_every for one stage,
# -checkpoint_every for the stages without their own.
#
# The checks in detail: `used.deck` repeats a run: a micro pipeline given options in a deck
# and on the command line (one with its default value, a bare flag) rerun from its used.deck
# alone: every tensor of the three final.h5 and rollouts.h5 and every metric of the three
# run.h5 bit-identical (timings aside), every option of run.h5 `/parameters` in used.deck with
# the same value; a `-plan_file` run (where giving `-placement` is an error) repeats too;
# another seed differs; a dry run and a failing deck write none
. regression/lib.sh
plan 28
d="$RLFUSE_TMP/used_deck"; mkdir -p $d
cat >$d/pipeline.deck <<'EOF'
-mode pipeline
-policy_n_layer 2
-policy_n_head 2
-policy_n_embd 32
-policy_vocab_size 20
-policy_n_positions 32
-policy_lr 3e-3
-policy_warmup 2
-sft_steps 8
-sft_batch 8
-task_len_max 8
-rm_pairs 32
-rm_eval_pairs 16
-rm_steps 4
-rm_batch 8
-reward_lr 1e-3
-ppo_iterations 2
-rollout_batch 16
-ppo_minibatches 2
-ppo_eval_prompts 16
-gen_max_new_tokens 12
-gen_slots 8
EOF
rlfuse -options_file $d/pipeline.deck -output_dir $d/a -seed 11 -sft_eval_batches 2 -dump_rollouts -actor_lr 1e-3 \
  -checkpoint_every 4 -rm_checkpoint_every 0 -ppo_checkpoint_every 1 >$d/a.log 2>&1 || { not_ok "pipeline run"; tail -3 $d/a.log; }
check "the pipeline wrote used.deck once, in its -output_dir" bash -c "[ -f $d/a/used.deck ] && [ ! -e $d/a/sft/used.deck ] && [ ! -e $d/a/ppo/used.deck ]"
ckpts() { (cd $d/a/$1 && echo $(ls ckpt_*.h5 2>/dev/null)); }
check "SFT checkpoints every 4 steps (-checkpoint_every 4): $(ckpts sft)" test "$(ckpts sft)" = "ckpt_000004.h5 ckpt_000008.h5"
check "RM writes none (-rm_checkpoint_every 0 overrides it): $(ckpts rm)" test -z "$(ckpts rm)"
check "PPO checkpoints every iteration (-ppo_checkpoint_every 1): $(ckpts ppo)" test "$(ckpts ppo)" = "ckpt_000001.h5 ckpt_000002.h5"
check "no temporary file is left" bash -c "[ \$(ls $d/a | grep -c tmp) -eq 0 ]"
rlfuse -options_file $d/a/used.deck -output_dir $d/b >$d/b.log 2>&1 || { not_ok "rerun from used.deck"; tail -3 $d/b.log; }

# every option in run.h5 /parameters is in used.deck (as a line or, where it
# must not be given, a comment), and the rerun used the same values
"$PYTHON" - $d/a $d/b <<'PY'
import sys, re, h5py, numpy as np
a, b = sys.argv[1:3]
bad = 0
def chk(name, cond):
    global bad
    bad += not cond
    print(("ok - " if cond else "not ok - ") + name)
# timings (tokens_per_s, gen_step_seconds) differ from run to run; rows
# without a value hold NaN
timing = lambda k: k.endswith("per_s") or k.endswith("seconds")
same = lambda x, y: x.shape == y.shape and np.array_equal(x, y, equal_nan=x.dtype.kind == "f")
deck = open(a + "/used.deck").read()
named = set(re.findall(r"^#? ?-(\w+)", deck, re.M))
for stage in ["sft", "rm", "ppo"]:
    with h5py.File(f"{a}/{stage}/run.h5") as fa, h5py.File(f"{b}/{stage}/run.h5") as fb:
        pa, pb = fa["/parameters"].attrs, fb["/parameters"].attrs
        keys = [k for k in pa if not k.startswith("_")]
        chk(f"{stage}: used.deck names every option of run.h5 /parameters", set(keys) <= named)
        chk(f"{stage}: the rerun used the same value of every option but -output_dir",
            sorted(keys) == sorted(k for k in pb if not k.startswith("_")) and all(pa[k] == pb[k] for k in keys if k != "output_dir"))
        ma, mb = fa["/metrics"], fb["/metrics"]
        cols = [k for k in ma if not timing(k)]
        chk(f"{stage}: every metric of run.h5 is bit-identical ({len(cols)} columns besides timings)", sorted(ma) == sorted(mb) and all(same(ma[k][()], mb[k][()]) for k in cols))
def tensors(path):
    out = {}
    with h5py.File(path) as f:
        f.visititems(lambda n, o: out.__setitem__(n, o[()]) if isinstance(o, h5py.Dataset) else None)
    return out
for name in ["sft/final.h5", "rm/final.h5", "ppo/final.h5", "ppo/rollouts.h5"]:
    ta, tb = tensors(f"{a}/{name}"), tensors(f"{b}/{name}")
    keys = [k for k in ta if not timing(k)]
    chk(f"{name}: every tensor bit-identical ({len(keys)} datasets besides timings)", len(keys) > 0 and ta.keys() == tb.keys() and all(same(ta[k], tb[k]) for k in keys))
sys.exit(bad > 0)
PY
[ $? -eq 0 ] || fails=$((fails + 1))
check "the deck's header says how to repeat the run" grep -q "^#   mpiexec -n 1 bin/rlfuse -options_file $d/a/used.deck" $d/a/used.deck
check "the flag given bare is written with its value" grep -qx -- "-dump_rollouts true" $d/a/used.deck
check "an option given with its default value is among the given ones" bash -c "sed -n '/^# given/,/^# defaults/p' $d/a/used.deck | grep -qx -- '-sft_eval_batches 2'"

# the comparison can fail: the same deck with another seed differs
rlfuse -options_file $d/a/used.deck -output_dir $d/c -seed 12 >$d/c.log 2>&1 || not_ok "rerun with another seed"
check "another seed gives other weights (the comparison can fail)" bash -c "! h5diff -q $d/a/ppo/final.h5 $d/c/ppo/final.h5 /actor /actor"

# a run from a plan file: -placement is left out of used.deck (giving it
# next to -plan_file is an error), so the rerun works and matches
rlfuse -options_file regression/decks/tiny.deck -output_dir $d/p1 >$d/p1.log 2>&1 || not_ok "SFT run for the plan file"
rlfuse -options_file regression/decks/tiny.deck -output_dir $d/p2 -plan_file $d/p1/run.h5 >$d/p2.log 2>&1 || not_ok "SFT run from -plan_file"
rlfuse -options_file $d/p2/used.deck -output_dir $d/p3 >$d/p3.log 2>&1 || { not_ok "rerun of a -plan_file run from its used.deck"; tail -2 $d/p3.log; }
check "a -plan_file run repeats bit-identically from used.deck" h5diff -q $d/p2/final.h5 $d/p3/final.h5 /policy /policy
check "-placement, not given, is a comment there" grep -q "^# -placement colocate" $d/p2/used.deck

# a dry run and a bad deck write no used.deck
rlfuse -options_file regression/decks/tiny.deck -output_dir $d/dry -dry_run >/dev/null 2>&1
rlfuse -options_file regression/decks/tiny.deck -output_dir $d/bad -sft_batch 0 >/dev/null 2>&1
check "a dry run and a failing deck write no used.deck" bash -c "[ ! -e $d/dry ] && [ ! -e $d/bad ]"
# a later run in the same directory, even one that fails after it started,
# keeps the earlier used.deck as used.1.deck (as run.h5 becomes run.1.h5);
# a run refused before it starts touches nothing there
rlfuse -options_file regression/decks/tiny.deck -output_dir $d/k >$d/k1.log 2>&1 || not_ok "first run into k"
cp $d/k/used.deck $d/k.first.deck
rlfuse -options_file regression/decks/tiny.deck -output_dir $d/k -policy_lr 1e30 -policy_warmup 0 >$d/k2.log 2>&1 && not_ok "a run with -policy_lr 1e30 should fail (NaN loss)"
check "a later, failing run keeps the earlier used.deck as used.1.deck and writes its own" \
  bash -c "cmp -s $d/k.first.deck $d/k/used.1.deck && grep -qF -- '-policy_lr 1e+30' $d/k/used.deck && [ -f $d/k/run.1.h5 ]"
keep=$d/k expect_error "a run refused before it starts leaves the directory as it was" "-sft_stepz" -options_file regression/decks/tiny.deck -output_dir $d/k -sft_stepz 3
# used.deck that cannot be written (a directory holds its name): one line, no temporary left
mkdir -p $d/blocked/used.deck
rlfuse -options_file regression/decks/tiny.deck -output_dir $d/blocked >$d/blocked.log 2>&1 && not_ok "a run that cannot write used.deck should fail"
check "an unwritable used.deck is one error line naming it, and no temporary is left" \
  bash -c "[ \$(grep -c '^rlfuse: error: used.deck: cannot rename .*used.deck' $d/blocked.log) -eq 1 ] && [ \$(ls $d/blocked | wc -l) -eq 1 ]"
finish
