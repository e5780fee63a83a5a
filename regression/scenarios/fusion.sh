# Fusion of generation and inference, and the timeline that shows it: a
# small PPO deck on 2 ranks (oversubscribed on small machines, one thread
# each) writes /timeline to run.h5 (every rank, every iteration, each call's
# start <= end) and tools/plot_timeline.py draws it. Streaming into
# inference replicas of one rank, and of several (tp 2, pp 2, two tp-2
# replicas per call), ends as the unfused run on one rank.
#
# The checks in detail: the timeline and streaming (docs/fusion.md): `/timeline` in run.h5 on
# 2 ranks (every rank and iteration, start <= end, a rank's calls not overlapping) and
# `tools/plot_timeline.py` drawing it with idle fractions; `-fuse_gen_inf stream` on 2 ranks
# (generation on 0, inference on 1), on 4 ranks (2 generation replicas, ref and reward on one
# rank each, 2 critic replicas) with allowed sets (top-k 8), for GRPO (no critic) on 2 ranks,
# with `-fuse_hold` (then no inference micro-batch starts before generation ends), and into
# inference replicas of several ranks (tp 2 on 4 ranks, two tp-2 replicas of every inference
# call on 5 ranks, pp 2 of a two-layer model on 4 ranks), each against an unfused run on 1
# rank as in layouts.sh (tokens exact, floats, metrics and every checkpoint tensor within
# 1e-4); inference micro-batches starting before generation ends; a restart on 2 ranks from a
# 4-rank streamed checkpoint; six bad fusion settings (R_t outside [0,1] or not a number,
# stream on a plan whose inference shares ranks with generation, a tp-2 replica's rank shared
# with a call of another layout, more migration targets than replicas, a zero token budget)
# each one line before any work. About 50 s on 2 cores (4-rank runs oversubscribed);
# `-placement disaggregate -fuse_gen_inf stream` (inference moved to the idle training half)
# against the unfused run
. regression/lib.sh
plan 21
d="$RLFUSE_TMP/fusion"; mkdir -p $d
fusion_fixture $d

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

# Streaming: finished samples go from the generation ranks to the inference
# ranks while decoding goes on. The rollouts, metrics and weights must be
# those of one rank (tokens exact, floats within 1e-4, as in layouts.sh), on
# 2 and 4 ranks, with allowed sets (top-k), and across a restart.
same_run() { same_run_dirs $d/$1 $d/$2; }
same_as() {
  local what=$1 ref=$2 out=$3
  if "$PYTHON" regression/ref/ckpt_diff.py $d/$ref/final.h5 $d/$out/final.h5 >$d/diff_$out.txt 2>&1 && same_run $ref $out >$d/run_$out.txt 2>&1; then ok "$what: rollouts, metrics and weights as unfused on 1 rank"
  else not_ok "$what: differs from unfused on 1 rank"; cat $d/diff_$out.txt $d/run_$out.txt | grep -v PASS | tail -3 | sed 's/^/# /'; fi
}
stream() {
  local what=$1 n=$2 ref=$3 out=$4; shift 4
  if mpirun $n $P -fuse_gen_inf stream -fuse_tokens 40 -output_dir $d/$out "$@" >$d/$out.log 2>&1; then same_as "$what" $ref $out
  else not_ok "$what: run failed"; tail -3 $d/$out.log | sed 's/^/# /'; fi
}
mpirun 1 $P -output_dir $d/one >$d/one.log 2>&1 || not_ok "PPO on 1 rank"
mpirun 1 $P -gen_top_k 8 -output_dir $d/one_k >$d/one_k.log 2>&1 || not_ok "PPO on 1 rank, top-k"
mpirun 1 $P -algo grpo -rollout_group 4 -output_dir $d/one_g >$d/one_g.log 2>&1 || not_ok "GRPO on 1 rank"
S2="-actor_gen_ranks 0 -ref_inf_ranks 1 -rew_inf_ranks 1 -critic_inf_ranks 1"
S4="-actor_gen_ranks 0-1 -ref_inf_ranks 2 -rew_inf_ranks 3 -critic_inf_ranks 2-3"
stream "stream, 2 ranks (generation on 0, inference on 1)" 2 one st2 $S2
stream "stream, 4 ranks (2 generation replicas; ref, reward, 2 critic replicas)" 4 one st4 $S4
stream "stream with allowed sets (top-k 8), 4 ranks" 4 one_k st4k $S4 -gen_top_k 8
stream "stream, GRPO (no critic) on 2 ranks" 2 one_g st_grpo $S2 -algo grpo -rollout_group 4
stream "stream with -placement disaggregate (inference on the idle training half), 2 ranks" 2 one st_dis -placement disaggregate
stream "stream held until generation ends (-fuse_hold), 2 ranks" 2 one held $S2 -fuse_hold
# replicas of several ranks: the head receives, cuts the micro-batches and
# hands each to the replica's other ranks
stream "stream into tp-2 inference replicas (ref and critic on ranks 2-3, tp 2; reward on 1), 4 ranks" 4 one st_tp \
  -actor_gen_ranks 0 -ref_inf_ranks 2-3 -ref_inf_tp 2 -critic_inf_ranks 2-3 -critic_inf_tp 2 -rew_inf_ranks 1
stream "stream into two tp-2 replicas of every inference call (ranks 1-4), 5 ranks" 5 one st_tp2 -actor_gen_ranks 0 -actor_train_ranks 0-3 -critic_train_ranks 0-3 \
  -ref_inf_ranks 1-4 -ref_inf_tp 2 -critic_inf_ranks 1-4 -critic_inf_tp 2 -rew_inf_ranks 1-4 -rew_inf_tp 2
P1=$P
mkdir -p $d/l2 && fusion_fixture $d/l2 2 # pipelines need two layers
mpirun 1 $P -output_dir $d/one_l2 >$d/one_l2.log 2>&1 || not_ok "PPO on 1 rank, two layers"
stream "stream into pp-2 inference replicas (ref and critic on ranks 1-2, pp 2; reward on 3), 4 ranks, two layers" 4 one_l2 st_pp \
  -actor_gen_ranks 0 -ref_inf_ranks 1-2 -ref_inf_pp 2 -critic_inf_ranks 1-2 -critic_inf_pp 2 -rew_inf_ranks 3
P=$P1
check "-fuse_hold: no inference micro-batch starts before generation ends" "$PYTHON" -c "
import h5py, numpy as np
t = h5py.File('$d/held/run.h5', 'r')['timeline']; calls = str(t.attrs['calls']).split()
r, s, c, a, b = (t[k][()] for k in ('rank', 'step', 'call', 'start', 'end'))
g, q = calls.index('generation'), calls.index('ref_inference')
for k in set(s):
    assert a[(s == k) & (c == q)].min() >= b[(s == k) & (c == g)].max() - 0.05, k  # clocks of two ranks: 50 ms slack
"
check "stream: /plan stores the mode; one message per sample recorded; several inference micro-batches per iteration" "$PYTHON" -c "
import h5py, numpy as np
f = h5py.File('$d/st2/run.h5', 'r'); assert f['plan'].attrs['fuse_gen_inf'] == 1 and f['plan'].attrs['fuse_tokens'] == 40
m = f['metrics']; assert (m['stream_messages'][()] == 16).all() and (m['stream_bytes'][()] > 16 * 20 * 4).all(), 'one message per sample'
assert (f['timing/stream_send_max'][()] > 0).all()
t = f['timeline']; calls = str(t.attrs['calls']).split()
r, s, c, a, b = (t[k][()] for k in ('rank', 'step', 'call', 'start', 'end'))
g, q = calls.index('generation'), calls.index('ref_inference')
assert ((c == q) & (r == 1)).sum() > len(set(s)), 'one micro-batch per iteration: nothing streamed'
"
mpirun 4 $P $S4 -fuse_gen_inf stream -ppo_iterations 1 -checkpoint_every 1 -output_dir $d/rs1 >$d/rs1.log 2>&1 || not_ok "stream, first iteration"
if mpirun 2 $P $S2 -fuse_gen_inf stream -restart $d/rs1/final.h5 -output_dir $d/rs2 >$d/rs2.log 2>&1 && "$PYTHON" regression/ref/ckpt_diff.py $d/one/final.h5 $d/rs2/final.h5 >$d/diff_rs2.txt 2>&1
then ok "stream: a restart on 2 ranks from iteration 1 written on 4 ends with the weights of 1 rank"
else not_ok "stream: restart"; grep -v PASS $d/diff_rs2.txt $d/rs2.log | tail -3 | sed 's/^/# /'; fi
# The fusion options are printed with the plan, stored in /plan; bad values and
# plans a mode cannot run stop with one line before any work (no run.h5).
SPLIT="-actor_gen_ranks 0 -ref_inf_ranks 1 -rew_inf_ranks 1 -critic_inf_ranks 1"
bad() {
  local what=$1 pat=$2 n=${N:-2}; shift 2
  local out=$d/bad_$RANDOM
  if mpirun $n $P -output_dir $out "$@" >$out.log 2>&1; then not_ok "$what: exit status 0"; return; fi
  if [ "$(grep -c '^rlfuse: error:' $out.log)" = 1 ] && grep -q "^rlfuse: error: .*$pat" $out.log && [ ! -e $out/run.h5 ]; then ok "$what: one line, no work"
  else not_ok "$what: expected one line matching '$pat' and no run.h5, got: $(grep error $out.log | head -2)"; fi
}
bad "-fuse_migrate_at 1.5" "-fuse_migrate_at 1.5 is out of range (expected a fraction in \[0,1\] or auto" -fuse_migrate_at 1.5 -fuse_gen_inf migrate
bad "-fuse_migrate_at x" "-fuse_migrate_at x: expected" -fuse_migrate_at x
bad "stream on a colocated plan, naming what works" "ref_inf shares rank 0 with actor_gen, .*use -placement disaggregate" -fuse_gen_inf stream
N=4 bad "stream: a rank of a tp-2 replica shared with another layout" "ref_inf and critic_inf share rank 2 but not their layout" -fuse_gen_inf stream -actor_gen_ranks 0 -ref_inf_ranks 2-3 -ref_inf_tp 2 -rew_inf_ranks 1 -critic_inf_ranks 2-3
bad "migration onto more replicas than exist" "-fuse_migrate_replicas 3 exceeds the 2 replicas" -fuse_gen_inf migrate -fuse_migrate_replicas 3
bad "-fuse_tokens 0" "-fuse_tokens 0 is out of range (expected a whole number in \[1, 1073741824\])" -fuse_tokens 0
mpirun 2 $P $SPLIT -fuse_gen_inf stream -fuse_tokens 64 -fuse_migrate_at auto -output_dir $d/plan -dry_run >$d/plan.log 2>&1 || not_ok "dry run with -fuse_gen_inf stream"
check "the fusion mode is printed with the plan" grep -q "fusion of generation and inference: stream, micro-batches of 64 tokens" $d/plan.log
finish
