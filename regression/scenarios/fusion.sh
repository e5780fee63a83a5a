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
finish
