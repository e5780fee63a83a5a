# A run stopped after step k and restarted ends with weights, optimizer state
# and step bit-identical to an uninterrupted run (h5diff with no tolerance).
. regression/lib.sh
plan 5
d="$RLFUSE_TMP/restart"; deck=regression/decks/tiny.deck
rlfuse -options_file $deck -output_dir $d/full -checkpoint_every 4 >$d.full.log 2>&1 || not_ok "uninterrupted run"
# (a) resume from the periodic checkpoint of the full run
rlfuse -options_file $deck -output_dir $d/resumed -restart $d/full/ckpt_000004.h5 >$d.a.log 2>&1 || not_ok "restart from ckpt_000004.h5"
check "restart from a periodic checkpoint is bit-identical" h5diff -q $d/full/final.h5 $d/resumed/final.h5 /policy /policy
# (b) a run that stopped at step 3, then continued to the end
rlfuse -options_file $deck -output_dir $d/stopped -sft_steps 3 >$d.b.log 2>&1 || not_ok "short run"
rlfuse -options_file $deck -output_dir $d/continued -restart $d/stopped/final.h5 >$d.c.log 2>&1 || not_ok "continue"
check "stop after step 3 and continue is bit-identical" h5diff -q $d/full/final.h5 $d/continued/final.h5 /policy /policy
check "state records the step and data position" bash -c "h5dump -a /state/iteration $d/continued/final.h5 | grep -q '(0): 8' && h5dump -a /state/data_pos $d/continued/final.h5 | grep -q '(0): 64'"
check "the resumed run starts at step 4" grep -q "from step 4" $d.a.log
# the comparison can fail: another seed gives other weights
rlfuse -options_file $deck -output_dir $d/seed8 -seed 8 >$d.d.log 2>&1 || not_ok "seed 8 run"
check "a different seed gives different weights (the comparison can fail)" bash -c "! h5diff -q $d/full/final.h5 $d/seed8/final.h5 /policy /policy"
finish
