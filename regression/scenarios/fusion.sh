# Fusion of generation and inference, and the timeline that shows it: a
# small PPO deck on 2 ranks (oversubscribed on small machines, one thread
# each) writes /timeline to run.h5 (every rank, every iteration, each call's
# start <= end) and tools/plot_timeline.py draws it.
. regression/lib.sh
d="$RLFUSE_TMP/fusion"; mkdir -p $d
mpirun() { local n=$1; shift; "$MPIEXEC" $MPIEXEC_FLAGS -n $n env OMP_NUM_THREADS=1 "$BIN/rlfuse" "$@"; }
Q="-policy_n_layer 1 -policy_n_head 2 -policy_n_embd 32 -policy_vocab_size 20 -policy_n_positions 32 -task_demo_noise 0.25 -seed 5"
rlfuse -mode sft $Q -sft_steps 20 -sft_batch 16 -policy_lr 2e-3 -output_dir $d/sft >$d/sft.log 2>&1 || not_ok "SFT fixture"
rlfuse -mode rm -task_demo_noise 0.25 -seed 5 -rm_sft_checkpoint $d/sft/final.h5 -rm_pairs 32 -rm_eval_pairs 8 -rm_steps 4 -rm_batch 8 \
  -reward_lr 1e-3 -gen_max_new_tokens 16 -output_dir $d/rm >$d/rm.log 2>&1 || not_ok "RM fixture"
P="-mode ppo -actor_checkpoint $d/sft/final.h5 -reward_checkpoint $d/rm/final.h5 -ppo_iterations 2 -rollout_batch 16 -ppo_minibatches 2
   -ppo_microbatches 2 -gen_max_new_tokens 16 -gen_slots 8 -ppo_eval_prompts 8 -seed 5 -dump_rollouts"

mpirun 2 $P -placement disaggregate -gen_replicas 1 -output_dir $d/dis >$d/dis.log 2>&1 || not_ok "PPO on 2 ranks disaggregated"
check "run.h5 /timeline: every rank and iteration, each call's start <= end, generation and training named" "$PYTHON" -c "
import h5py, numpy as np
t = h5py.File('$d/dis/run.h5', 'r')['timeline']
calls = str(t.attrs['calls']).split()
r, s, c, a, b = (t[k][()] for k in ('rank', 'step', 'call', 'start', 'end'))
assert set(r) == {0, 1} and set(s) == {1, 2}, (set(r), set(s))
assert (a <= b).all() and (a >= 0).all() and (c < len(calls)).all()
for name in ('generation', 'ref_inference', 'actor_train'):
    assert name in calls, (name, calls)
for k in (1, 2):  # each rank's calls of a step do not overlap (one call at a time)
    for q in (0, 1):
        m = (r == q) & (s == k); o = np.argsort(a[m])
        assert (a[m][o][1:] >= b[m][o][:-1] - 1e-9).all(), (k, q)
"
check "tools/plot_timeline.py draws it and prints each rank's idle fraction" bash -c "
  '$PYTHON' tools/plot_timeline.py $d/dis/run.h5 $d/tl.png --steps 2:3 >$d/tl.txt && test -s $d/tl.png &&
  [ \$(grep -c ' idle 0\.[0-9]* window' $d/tl.txt) = 2 ]"

# Fusion options: printed with the plan, stored in /plan; bad values and
# plans a mode cannot run stop with one line before any work (no run.h5).
SPLIT="-actor_gen_ranks 0 -ref_inf_ranks 1 -rew_inf_ranks 1 -critic_inf_ranks 1"
bad() {
  local what=$1 pat=$2 n=${N:-2}; shift 2
  local out=$d/bad_$RANDOM
  if mpirun $n $P -output_dir $out "$@" >$out.log 2>&1; then not_ok "$what: exit status 0"; return; fi
  if [ "$(grep -c '^rlfuse: error:' $out.log)" = 1 ] && grep -q "^rlfuse: error: .*$pat" $out.log && [ ! -e $out/run.h5 ]; then ok "$what: one line, no work"
  else not_ok "$what: expected one line matching '$pat' and no run.h5, got: $(grep error $out.log | head -2)"; fi
}
bad "-fuse_migrate_at 1.5" "-fuse_migrate_at 1.5 is outside \[0,1\]" -fuse_migrate_at 1.5 -fuse_gen_inf migrate
bad "-fuse_migrate_at x" "-fuse_migrate_at x: expected" -fuse_migrate_at x
bad "stream on a colocated plan" "ref_inf shares rank 0 with actor_gen" -fuse_gen_inf stream
N=4 bad "stream with tp-sharded inference" "-ref_inf_tp 2 .* must be 1" -fuse_gen_inf stream -actor_gen_ranks 0 -ref_inf_ranks 2-3 -ref_inf_tp 2 -rew_inf_ranks 1 -critic_inf_ranks 1
bad "migration onto more replicas than exist" "-fuse_migrate_replicas 3 exceeds the 2 replicas" -fuse_gen_inf migrate -fuse_migrate_replicas 3
bad "-fuse_tokens 0" "-fuse_tokens 0 must be at least 1" -fuse_tokens 0
mpirun 2 $P $SPLIT -fuse_gen_inf stream -fuse_tokens 64 -fuse_migrate_at auto -output_dir $d/plan -dry_run >$d/plan.log 2>&1 || not_ok "dry run with -fuse_gen_inf stream"
check "the fusion mode is printed with the plan" grep -q "fusion of generation and inference: stream, micro-batches of 64 tokens" $d/plan.log
finish
