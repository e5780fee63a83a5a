# SFT and reward modelling on their plan calls: the same deck on
# 1 rank and on other layouts of sft_train / rm_train (dp, tp x dp, pp with
# micro-batches, ZeRO-1, a mesh that leaves rank 0 out) must end with the
# same AdamW moments within 1e-4 of each tensor's scale and the same weights
# within 1e-3 (regression/ref/ckpt_diff.py --params-tol: AdamW's g/(|g|+eps) turns the
# rounding of gradient elements near eps into weight differences of a
# fraction of lr, about 1.5e-4 here), and the same metrics. GPipe and 1F1B
# give bit-identical reward models. A 4-rank SFT checkpoint restarts on 1
# rank; bad plans stop with one line.
#
# The checks in detail: SFT and reward modelling on their plan calls: an SFT deck (quickstart
# model size, 12 steps of 16, held-out loss every 6) on 2 ranks dp 2, 4 ranks tp 2 x dp 2, 2
# ranks pp 2 (1F1B over 4 micro-batches), 4 ranks with ZeRO-1 and on ranks 1-2 of 3 (rank 0
# off the mesh), and an RM deck on 4 ranks tp 2 x dp 2 and 2 ranks pp 2, each against 1 rank
# (and GPipe bit-identical to 1F1B on 2 ranks pp 2 and on 1 rank with 4 micro-batches): AdamW
# moments within 1e-4 and weights within 1e-3 of each tensor's scale (`regression/ref/ckpt_diff.py
# --params-tol`; measured worst 1.5e-4, see below), every metric within 1e-4
# (`regression/same_metrics.py`, as in layouts.sh); the plan in run.h5; a 4-rank SFT
# checkpoint restarted on 1 rank ends as the 4-rank run (5.6e-7); bad plans (dp not dividing
# the batch, tp not dividing n_head) one line each. About 80 s on 2 cores
. regression/lib.sh
plan 13
d="$RLFUSE_TMP/train_layouts"; mkdir -p $d
Q="-policy_n_layer 2 -policy_n_head 4 -policy_n_embd 128 -policy_vocab_size 20 -policy_n_positions 32 -task_demo_noise 0.25 -seed 5"
S="-mode sft $Q -sft_steps 12 -sft_batch 16 -policy_lr 2e-3 -sft_eval_every 6 -checkpoint_every 6"
R="-mode rm -task_demo_noise 0.25 -seed 5 -rm_pairs 64 -rm_eval_pairs 20 -rm_steps 8 -rm_batch 16 -rm_eval_every 4
   -reward_lr 1e-3 -gen_max_new_tokens 16"


mpirun 1 $S -output_dir $d/sft1 >$d/sft1.log 2>&1 || not_ok "SFT on 1 rank"
run_layout "SFT on 2 ranks, dp 2"                         "$S" sft1 2 sft_dp
run_layout "SFT on 4 ranks, tp 2 x dp 2"                  "$S" sft1 4 sft_tp -sft_train_tp 2
run_layout "SFT on 2 ranks, pp 2 (1F1B over 4 micro-batches)" "$S" sft1 2 sft_pp -sft_train_pp 2 -sft_train_mbs 4
run_layout "SFT on 4 ranks, dp 4 with ZeRO-1"             "$S" sft1 4 sft_zero -plan_zero1
run_layout "SFT on ranks 1-2 of 3 (rank 0 off the mesh writes the checkpoints)" "$S" sft1 3 sft_off -sft_train_ranks 1-2
check "run.h5 holds the sft_train plan" "$PYTHON" -c "
import h5py; f = h5py.File('$d/sft_tp/run.h5', 'r')
assert f['plan'].attrs['world'] == 4 and f['plan/sft_train'].attrs['tp'] == 2 and 'actor_gen' not in f['plan']"
if mpirun 1 $S -output_dir $d/sft_from4 -restart $d/sft_tp/ckpt_000006.h5 >$d/sft_from4.log 2>&1 && grep -q "from step 6" $d/sft_from4.log &&
   "$PYTHON" regression/ref/ckpt_diff.py --params-tol 1e-3 $d/sft_tp/final.h5 $d/sft_from4/final.h5 >$d/diff_from4.txt 2>&1
then ok "a 4-rank SFT checkpoint restarts on 1 rank and ends as the 4-rank run ($(grep -o 'max relative difference [^ ]*' $d/diff_from4.txt))"
else not_ok "restart of a 4-rank SFT checkpoint on 1 rank"; tail -3 $d/sft_from4.log $d/diff_from4.txt 2>/dev/null | sed 's/^/# /'; fi

R="$R -rm_sft_checkpoint $d/sft1/final.h5"
mpirun 1 $R -output_dir $d/rm1 >$d/rm1.log 2>&1 || not_ok "RM on 1 rank"
run_layout "RM on 4 ranks, tp 2 x dp 2"                   "$R" rm1 4 rm_tp -rm_train_tp 2
run_layout "RM on 2 ranks, pp 2 (1F1B over 2 micro-batches)" "$R" rm1 2 rm_pp -rm_train_pp 2 -rm_train_mbs 2
# every micro-batch keeps its own loss gradient: GPipe gives 1F1B's weights bit for bit
mpirun 2 $R -rm_train_pp 2 -rm_train_mbs 2 -train_schedule gpipe -output_dir $d/rm_gpipe >$d/rm_gpipe.log 2>&1 || { not_ok "RM on 2 ranks, pp 2, GPipe"; tail -3 $d/rm_gpipe.log; }
check "RM on 2 ranks, pp 2: GPipe ends bit-identical to 1F1B" h5diff -q $d/rm_pp/final.h5 $d/rm_gpipe/final.h5 /reward /reward
mpirun 1 $R -rm_train_mbs 4 -output_dir $d/rm_mb4 >$d/rm_mb4.log 2>&1 || not_ok "RM on 1 rank, 4 micro-batches"
mpirun 1 $R -rm_train_mbs 4 -train_schedule gpipe -output_dir $d/rm_mb4_gpipe >$d/rm_mb4_gpipe.log 2>&1 || { not_ok "RM on 1 rank, 4 micro-batches, GPipe"; tail -3 $d/rm_mb4_gpipe.log; }
check "RM on 1 rank, 4 micro-batches: GPipe ends bit-identical to 1F1B" h5diff -q $d/rm_mb4/final.h5 $d/rm_mb4_gpipe/final.h5 /reward /reward

bad_plan() {
  local what=$1 pat=$2 n=$3; shift 3
  local out=$d/bad_$RANDOM err
  err=$(mpirun $n "$@" -output_dir $out 2>&1 >/dev/null); local rc=$?
  if [ $rc -eq 0 ]; then not_ok "$what: exit status 0"; return; fi
  if [ "$(printf '%s\n' "$err" | grep -c .)" -ne 1 ] || ! printf '%s' "$err" | grep -q "^rlfuse: error: .*$pat"; then not_ok "$what: expected one line matching '$pat', got: $(printf '%s' "$err" | head -3)"; return; fi
  if [ -e $out ]; then not_ok "$what: the output directory was created"; return; fi
  ok "$what ($(printf '%s' "$err" | cut -c1-110))"
}
bad_plan "SFT: dp not dividing the batch" "-sft_train_dp 3" 3 $S
bad_plan "RM: tp not dividing n_head"     "-rm_train_tp 3"  3 $R -rm_train_tp 3
finish
