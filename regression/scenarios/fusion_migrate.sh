# Migration of the long tail (-fuse_gen_inf migrate, docs/fusion.md): the
# unfinished samples move with their KV caches onto fewer generation
# replicas, whose freed ranks run inference. Rollouts, metrics and weights
# must be those of the unfused run on one rank (tokens exact, floats within
# 1e-4, as in layouts.sh) on 1, 2 and 4 ranks (4 oversubscribed), for R_t 0,
# 0.2, 1 (at once, onto one replica), a forced migration onto one replica,
# allowed sets (top-k), R_t auto, tp-sharded and pipelined generation
# replicas, tp-2 inference replicas, and across a restart; runs that are meant
# to migrate must have moved samples, and a freed rank must start inference
# while the tail still decodes. Bad fusion options: one line, no work.
#
# The checks in detail: migration of the long tail (`-fuse_gen_inf migrate`, docs/fusion.md)
# against an unfused run on 1 rank as in layouts.sh (tokens exact, floats, metrics and every
# checkpoint tensor within 1e-4): 1 rank; 2 ranks co-located at R_t 0, 0.2 and 1 onto one
# replica (everything at once); 4 ranks at R_t 0.5 and 0.3 forced onto one replica (running
# samples move with their caches), with top-k 8 (allowed sets move), with generation on 0-1
# and inference on 2-3, with tp 2 generation replicas (cache shards move shard to shard), and
# with pp 2 replicas of a two-layer model, also with top-k (shards move stage to stage), with
# tp-2 inference replicas run by the freed ranks (co-located), and with a tp-2 inference
# replica apart from generation; R_t auto (0.2 first, then the simulation's choice, recorded
# and printed); runs meant to migrate must have moved samples and bytes; the freed rank stops
# generating at the migration and runs inference; a restart on 2 ranks from a 4-rank migrated
# checkpoint; two bad settings (R_t -0.1, a tp-2 inference replica half inside generation)
# each one line before any work. About 30 s on 2 cores (4-rank runs oversubscribed); skipping
# the cache copy (`model_kv_put`) fails six items
. regression/lib.sh
plan 19
d="$RLFUSE_TMP/fusion_migrate"; mkdir -p $d
fusion_fixture $d
mpirun 1 $P -output_dir $d/one >$d/one.log 2>&1 || not_ok "PPO on 1 rank"
mpirun 1 $P -gen_top_k 8 -output_dir $d/one_k >$d/one_k.log 2>&1 || not_ok "PPO on 1 rank, top-k"

same_as() {
  local what=$1 ref=$2 out=$3
  if "$PYTHON" regression/ref/ckpt_diff.py $d/$ref/final.h5 $d/$out/final.h5 >$d/diff_$out.txt 2>&1 && same_run_dirs $d/$ref $d/$out >$d/run_$out.txt 2>&1; then ok "$what: rollouts, metrics and weights as unfused on 1 rank"
  else not_ok "$what: differs from unfused on 1 rank"; cat $d/diff_$out.txt $d/run_$out.txt | grep -v PASS | tail -3 | sed 's/^/# /'; fi
}
# migrate WHAT N REF OUT MOVED [options]: MOVED 1 when samples must have moved
migrate() {
  local what=$1 n=$2 ref=$3 out=$4 moved=$5; shift 5
  if ! mpirun $n $P -fuse_gen_inf migrate -fuse_tokens 40 -output_dir $d/$out "$@" >$d/$out.log 2>&1; then not_ok "$what: run failed"; tail -3 $d/$out.log | sed 's/^/# /'; return; fi
  if [ $moved = 1 ] && ! "$PYTHON" -c "
import h5py; m = h5py.File('$d/$out/run.h5', 'r')['metrics']; assert m['migrate_samples'][()].sum() > 0" 2>/dev/null; then
    not_ok "$what: nothing migrated"; return; fi
  same_as "$what" $ref $out
}
migrate "migrate on 1 rank (one replica: nothing to move)" 1 one m1 0 -fuse_migrate_at 0.2
migrate "migrate, 2 ranks co-located, R_t 0 (never)" 2 one m2_0 0 -fuse_migrate_at 0
migrate "migrate, 2 ranks co-located, R_t 0.2" 2 one m2_02 0 -fuse_migrate_at 0.2
migrate "migrate, 2 ranks, R_t 1 onto one replica (everything at once)" 2 one m2_1 1 -fuse_migrate_at 1 -fuse_migrate_replicas 1
migrate "migrate, 4 ranks, R_t 0.5 forced onto one replica, running samples with their caches" 4 one m4 1 -fuse_migrate_at 0.5 -fuse_migrate_replicas 1
migrate "migrate with allowed sets (top-k 8), 4 ranks, R_t 0.3" 4 one_k m4k 1 -fuse_migrate_at 0.3 -gen_top_k 8 -fuse_migrate_replicas 1
migrate "migrate, 4 ranks, generation on 0-1 and inference on 2-3, R_t 0.3" 4 one m4s 1 -fuse_migrate_at 0.3 -actor_gen_ranks 0-1 -ref_inf_ranks 2 -rew_inf_ranks 3 -critic_inf_ranks 2-3
migrate "migrate, R_t auto, 2 ranks" 2 one m2a 0 -fuse_migrate_at auto -ppo_iterations 2
migrate "migrate, 4 ranks, tp-sharded generation (tp 2, 2 replicas), R_t 0.5 onto one replica: cache shards move shard to shard" 4 one m4tp 1 -fuse_migrate_at 0.5 -fuse_migrate_replicas 1 -actor_gen_tp 2 -actor_gen_dp 2
# inference replicas of several ranks: the freed ranks run tp-2 replicas
# (co-located), or the samples stream to a tp-2 replica apart
migrate "migrate, 4 ranks co-located, tp-2 inference replicas run by the freed ranks, R_t 0.5 onto one replica" 4 one m4itp 1 -fuse_migrate_at 0.5 -fuse_migrate_replicas 1 -ref_inf_tp 2 -critic_inf_tp 2 -rew_inf_tp 2
migrate "migrate, 4 ranks, generation on 0-1 and a tp-2 inference replica on 2-3, R_t 0.3" 4 one m4stp 1 -fuse_migrate_at 0.3 -actor_gen_ranks 0-1 -ref_inf_ranks 2-3 -ref_inf_tp 2 -rew_inf_ranks 2-3 -rew_inf_tp 2 -critic_inf_ranks 2-3 -critic_inf_tp 2
# pipelined generation replicas (a two-layer model): each stage's cache
# shard moves to the same stage of the destination
P1=$P
mkdir -p $d/l2 && fusion_fixture $d/l2 2
mpirun 1 $P -output_dir $d/one_l2 >$d/one_l2.log 2>&1 || not_ok "PPO on 1 rank, two layers"
mpirun 1 $P -gen_top_k 8 -output_dir $d/one_l2k >$d/one_l2k.log 2>&1 || not_ok "PPO on 1 rank, two layers, top-k"
migrate "migrate, 4 ranks, pipelined generation (pp 2, 2 replicas), R_t 0.5 onto one replica: cache shards move stage to stage" 4 one_l2 m4pp 1 -fuse_migrate_at 0.5 -fuse_migrate_replicas 1 -actor_gen_pp 2 -actor_gen_dp 2
migrate "migrate, 4 ranks, pipelined generation with allowed sets (top-k 8), R_t 0.3" 4 one_l2k m4ppk 1 -fuse_migrate_at 0.3 -fuse_migrate_replicas 1 -actor_gen_pp 2 -actor_gen_dp 2 -gen_top_k 8
P=$P1

check "migrate: caches moved (bytes), /plan stores the mode, one destination replica" "$PYTHON" -c "
import h5py, numpy as np
f = h5py.File('$d/m4/run.h5', 'r'); assert f['plan'].attrs['fuse_gen_inf'] == 2
m = f['metrics']; assert (m['migrate_samples'][()] > 0).all() and (m['migrate_bytes'][()] > m['migrate_samples'][()] * 4 * 32 * 2).all(), 'no cache moved'
assert (m['migrate_at'][()] == 0.5).all() and (m['migrate_replicas'][()] == 1).all()
t = f['timeline']; calls = str(t.attrs['calls']).split()
r, s, c = (t[k][()] for k in ('rank', 'step', 'call'))
g = calls.index('generation')
for k in set(s):  # the destination decodes again after the migration: two generation rows
    assert [(r[(s == k) & (c == g)] == x).sum() for x in range(4)].count(2) == 1, k
"
check "migrate at once onto one replica: the freed rank stops generating at the migration and runs inference on its rows" "$PYTHON" -c "
import h5py, numpy as np
t = h5py.File('$d/m2_1/run.h5', 'r')['timeline']; calls = str(t.attrs['calls']).split()
r, s, c, a, b = (t[k][()] for k in ('rank', 'step', 'call', 'start', 'end'))
g, q, mi = calls.index('generation'), calls.index('ref_inference'), calls.index('migration')
for k in set(s):
    dest = [x for x in (0, 1) if ((s == k) & (c == g) & (r == x)).sum() == 2]
    assert len(dest) == 1, (k, dest)
    f = 1 - dest[0]
    assert b[(s == k) & (c == g) & (r == f)].max() <= a[(s == k) & (c == mi) & (r == f)].min() + 1e-9, k
    assert ((s == k) & (c == q) & (r == f)).sum() >= 2, ('no inference on the freed rank', k)
"
check "R_t auto: the first iteration at 0.2, then the simulation's choice (in the candidates), recorded and printed" "$PYTHON" -c "
import h5py, re
m = h5py.File('$d/m2a/run.h5', 'r')['metrics']; at = m['migrate_at'][()]; p = m['migrate_predicted'][()]
assert at[0] == 0.2 and p[0] == -1 and p[1] > 0 and at[1] in (0, .05, .1, .15, .2, .3, .4, .5), (at, p)
log = open('$d/m2a.log').read(); assert len(re.findall(r'fusion: R_t [0-9.]+ \(auto', log)) == 2, log
"
mpirun 4 $P -fuse_gen_inf migrate -fuse_migrate_at 0.5 -fuse_migrate_replicas 1 -ppo_iterations 1 -checkpoint_every 1 -output_dir $d/rs1 >$d/rs1.log 2>&1 || not_ok "migrate, first iteration"
if mpirun 2 $P -fuse_gen_inf migrate -fuse_migrate_at 1 -fuse_migrate_replicas 1 -restart $d/rs1/final.h5 -output_dir $d/rs2 >$d/rs2.log 2>&1 && "$PYTHON" regression/ref/ckpt_diff.py $d/one/final.h5 $d/rs2/final.h5 >$d/diff_rs2.txt 2>&1
then ok "migrate: a restart on 2 ranks from iteration 1 written on 4 ends with the weights of 1 rank"
else not_ok "migrate: restart"; grep -v PASS $d/diff_rs2.txt $d/rs2.log | tail -3 | sed 's/^/# /'; fi

bad() {
  local what=$1 pat=$2 n=${N:-2}; shift 2
  local out=$d/bad_$RANDOM
  if mpirun $n $P -output_dir $out "$@" >$out.log 2>&1; then not_ok "$what: exit status 0"; return; fi
  if [ "$(grep -c '^rlfuse: error:' $out.log)" = 1 ] && grep -q "^rlfuse: error: .*$pat" $out.log && [ ! -e $out/run.h5 ]; then ok "$what: one line, no work"
  else not_ok "$what: expected one line matching '$pat' and no run.h5, got: $(grep error $out.log | head -2)"; fi
}
bad "-fuse_migrate_at -0.1" "-fuse_migrate_at -0.1 is out of range (expected a fraction in \[0,1\]" -fuse_gen_inf migrate -fuse_migrate_at -0.1
N=4 bad "migrate with a tp-2 inference replica half inside generation" "replica 0 of ref_inf has rank 1 in actor_gen and rank 2 outside it" -fuse_gen_inf migrate -actor_gen_ranks 0-1 -ref_inf_ranks 1-2 -ref_inf_tp 2 -rew_inf_ranks 3 -critic_inf_ranks 3
finish
