# The driver: -help documents every module's options, -dry_run writes
# nothing, the run record holds provenance, parameters, timings and metrics,
# the SFT loss falls, -log_view reports the phases, and an earlier run record
# is kept rather than overwritten; an option given twice with different
# values is reported, one line naming the value used and where each came from.
#
# The checks in detail: `-help` covers every module, `-dry_run` writes nothing, progress
# lines, `-log_view` events, run.h5 contents, the SFT loss falls, an earlier run.h5 is kept,
# SFT from a dataset file, docs/options.md is current; an option given more than once with
# different values (command line, an included deck, its includer) is one `rlfuse: note:` line
# naming the value used and where each came from, options given twice alike stay silent, a
# deck's `-mode` that beats the command line's is reported
. regression/lib.sh
plan 15
d="$RLFUSE_TMP/driver"; deck=regression/decks/tiny.deck; mkdir -p $d
rlfuse -help >$d/help.txt 2>&1
check "-help lists the options of every module" bash -c "grep -q -- -policy_n_layer $d/help.txt && grep -q -- -sft_steps $d/help.txt && grep -q -- -score_input $d/help.txt && grep -q -- -data_count $d/help.txt && grep -q -- -task_symbols $d/help.txt && grep -q -- -checkpoint_every $d/help.txt"
rlfuse -options_file $deck -dry_run -output_dir $d/dry >$d/dry.txt 2>&1
check "-dry_run reports memory and writes nothing" bash -c "grep -q 'dry run: policy' $d/dry.txt && [ ! -e $d/dry ]"
rlfuse -options_file $deck -output_dir $d/run -log_view >$d/run.txt 2>&1 || not_ok "tiny run"
check "one progress line per step" bash -c "[ \$(grep -c '^step ' $d/run.txt) -eq 8 ]"
check "-log_view shows the SFT stage and its events" bash -c "grep -q 'SFT' $d/run.txt && grep -q '^Forward' $d/run.txt && grep -q '^Backward' $d/run.txt && grep -q '^Optimizer' $d/run.txt"
py "run.h5 contents" $d/run/run.h5 <<'PY'
import sys, h5py, numpy as np
with h5py.File(sys.argv[1]) as f:
    code, par = f["/code"].attrs, f["/parameters"].attrs
    def chk(name, cond): print(("ok - " if cond else "not ok - ") + name)
    chk("run.h5 /code has provenance", all(k in code for k in ["rlfuse_version", "git_revision", "compiler", "mpi", "hdf5", "petsc", "blas", "cuda", "ranks", "threads", "seed"]))
    chk("run.h5 /parameters has given and default options", par.get("policy_n_embd") in (b"32", "32") and par.get("policy_beta1") is not None)
    loss = f["/metrics/loss"][...]
    chk("run.h5 /metrics has one row per step", len(loss) == 8 and len(f["/metrics/step"]) == 8)
    chk("run.h5 /timing has max and min over ranks", all(k in f["/timing"] for k in ["forward_max", "forward_min", "backward_max", "optimizer_max"]))
    chk(f"the SFT loss falls ({loss[0]:.3f} -> {loss[-1]:.3f})", loss[-1] < 0.95 * loss[0])
PY
rlfuse -options_file $deck -output_dir $d/run -sft_steps 2 >/dev/null 2>&1 || not_ok "second run"
check "an earlier run record is kept as run.1.h5" bash -c "[ -f $d/run/run.1.h5 ] && [ \$(h5dump -H -d /metrics/loss $d/run/run.1.h5 | grep -c '( 8 )') -ge 1 ]"
rlfuse -mode data -data_output $d/data.h5 -data_count 50 >/dev/null 2>&1 || not_ok "data mode"
rlfuse -options_file $deck -output_dir $d/fromfile -sft_data $d/data.h5 -sft_steps 3 >$d/ff.txt 2>&1
check "SFT trains from a dataset file written by -mode data" grep -q "^step     3/3" $d/ff.txt
printf -- '-options_file %s\n-sft_steps 3\n-seed 7\n' $deck >$d/twice.deck
rlfuse -sft_steps 5 -options_file $d/twice.deck -seed 7 -sft_steps 2 -dry_run -output_dir $d/twice >$d/twice.txt 2>&1
check "an option set four times (command line, an included deck, its includer) is one line: the value used, then the others with their decks and lines" grep -qxF "rlfuse: note: -sft_steps is given more than once: '2' (command line) is used, the last; overridden: '5' (command line), '8' (deck $deck line 11), '3' (deck $d/twice.deck line 2)" $d/twice.txt
check "an option set twice to the same value, and one set once, are silent" bash -c "[ \$(grep -c '^rlfuse: note:' $d/twice.txt) -eq 1 ]"
rlfuse -mode score -options_file $deck -dry_run -output_dir $d/twice2 >$d/mode.txt 2>&1
check "a deck's -mode that beats the command line's is reported" grep -qF "rlfuse: note: -mode is given more than once: 'sft' (deck $deck line" $d/mode.txt
check "docs/options.md is current (tools/options_doc.sh)" bash -c "tools/options_doc.sh $BIN | diff -q - docs/options.md"
finish
