# Kills at random points of a PPO run that checkpoints and evaluates every
# iteration (so run.h5 and evals.h5 grow all the time): after each SIGKILL
# run.h5 and evals.h5 open and hold every row and evaluation up to the last
# checkpoint, readable; -restart latest then continues the same record, and
# after the last resume the whole record equals an uninterrupted run's (every
# metric bit for bit but tokens_per_s and acts_grown_bytes, which are
# timings; the timing columns by name and length; evals.h5's groups). The
# kill points are a fixed list drawn from a seeded generator: after the
# progress line of an iteration (1 to N - 9 of N = 40), a delay of 0 to
# 0.15 s (an iteration of this micro model takes about 30 ms on an idle
# core, so the kill lands a few iterations later, anywhere in one). On the
# code before records were committed by renames a kill damaged run.h5 in
# about 1 of 24 trials (so a pass there is luck, not proof), but its
# restarted run always began a new run.h5 (the earlier rows in run.1.h5):
# the last check fails on it.
. regression/lib.sh
plan 8
d="$RLFUSE_TMP/kill_record"; mkdir -p $d; N=40
rlfuse -options_file regression/decks/tiny.deck -output_dir $d/sft >$d/sft.log 2>&1 || not_ok "SFT fixture: $(tail -1 $d/sft.log)"
rlfuse -mode rm -rm_sft_checkpoint $d/sft/final.h5 -output_dir $d/rm -rm_pairs 48 -rm_eval_pairs 16 -rm_steps 4 -rm_batch 8 \
  -gen_max_new_tokens 12 -gen_slots 8 -task_len_max 8 -seed 7 >$d/rm.log 2>&1 || not_ok "RM fixture: $(tail -1 $d/rm.log)"
ppo="-options_file regression/decks/rlhf_tiny.deck -actor_checkpoint $d/sft/final.h5 -reward_checkpoint $d/rm/final.h5
     -ppo_iterations $N -checkpoint_every 1 -ppo_eval_every 1"
rlfuse $ppo -output_dir $d/full >$d/full.log 2>&1 || not_ok "uninterrupted run: $(tail -1 $d/full.log)"
# killed AT DELAY LOG: the run (resumed when a checkpoint is there) in a process group of its own, SIGKILLed
# DELAY seconds after its progress line of iteration AT or later (or at once when it ended)
killed() {
  local at=$1 delay=$2 log=$3 n=0
  setsid "$MPIEXEC" $MPIEXEC_FLAGS -n 1 "$BIN/rlfuse" $ppo -output_dir $d/k -restart latest >$log 2>&1 &
  local pid=$!
  until awk -v k=$at '/^iter +[0-9]+\// { split($2, a, "/"); if (a[1] + 0 >= k) f = 1 } END { exit !f }' $log 2>/dev/null ||
    ! kill -0 $pid 2>/dev/null || [ $n -ge 6000 ]; do sleep 0.01; n=$((n + 1)); done
  sleep $delay
  kill -9 -- -$pid 2>/dev/null
  wait $pid 2>/dev/null
}
# whole DIR: run.h5 and evals.h5 open, every row and evaluation up to the newest checkpoint there, all readable
whole() {
  "$PYTHON" - "$1" <<'PY'
import glob, os, re, sys
import h5py
d = sys.argv[1]
ck = max([int(re.search(r"ckpt_(\d+)\.h5$", p).group(1)) for p in glob.glob(d + "/ckpt_*.h5")] + [0])
try:
    with h5py.File(d + "/run.h5", "r") as f:
        steps = list(f["metrics/step"][()])
        cols = [f[g][k][()] for g in ("metrics", "timing") for k in f[g]]
        assert steps == list(range(1, len(steps) + 1)) and len(steps) >= ck, f"rows {steps}, checkpoint {ck}"
        assert all(len(c) == len(steps) for c in cols), "columns of other lengths"
    with h5py.File(d + "/evals.h5", "r") as f:
        for g in ["reference"] + [f"iter_{j}" for j in range(1, ck + 1)]:
            for k in f[g]:
                f[g][k][()]
except Exception as e:
    print(f"checkpoint {ck}: {type(e).__name__}: {e}")
    sys.exit(1)
print(f"checkpoint {ck}, {len(steps)} rows")
PY
}
# the kill points: (iteration, delay in s) from a seeded generator, the iterations rising
read -r -a points <<<"$("$PYTHON" -c "
import random; r = random.Random(52)
print(' '.join(f'{k}:{r.uniform(0, 0.15):.2f}' for k in sorted(r.sample(range(1, $N - 8), 5))))")"
ok_kills=0; said=""
for p in "${points[@]}"; do
  killed ${p%:*} ${p#*:} $d/kill_${p%:*}.log
  if out=$(whole $d/k); then ok_kills=$((ok_kills + 1)); said="$said; $p $out"; else said="$said; $p NOT WHOLE: $out"; fi
done
check "after each of the ${#points[@]} kills (iteration:delay$said) run.h5 and evals.h5 are readable with every row up to the newest checkpoint" \
  [ $ok_kills -eq ${#points[@]} ]
ended=$(grep -l '^ppo: held-out' $d/kill_*.log 2>/dev/null | wc -l)
check "the kills hit runs under way ($ended of ${#points[@]} had ended first)" [ "$ended" -le 2 ]
rlfuse $ppo -output_dir $d/k -restart latest >$d/resume.log 2>&1 || not_ok "the last resume: $(tail -1 $d/resume.log)"
check "the last resume ends bit-identical to the uninterrupted run (actor)" h5diff -q $d/full/final.h5 $d/k/final.h5 /actor /actor
check "no run.<k>.h5 or evals.<k>.h5 beside the record, no temporary left" \
  bash -c "! ls $d/k | grep -qE '^(run|evals)\.[0-9]+\.h5$|\.tmp\.'"
# a restart into a directory holding another run's shorter record: that record does not reach the
# checkpoint's step, so it is kept as run.1.h5 and the new record begins after the checkpoint
rlfuse $ppo -ppo_iterations 2 -output_dir $d/other >$d/other.log 2>&1 || not_ok "the other run: $(tail -1 $d/other.log)"
rlfuse $ppo -ppo_iterations 6 -restart $d/full/ckpt_000005.h5 -output_dir $d/other >$d/other2.log 2>&1 ||
  not_ok "the restart into the other run's directory: $(tail -1 $d/other2.log)"
other_kept() {
  "$PYTHON" - $d/other <<'PY'
import sys, h5py
d = sys.argv[1]
a, b = (list(h5py.File(f"{d}/{f}")["metrics/step"][()]) for f in ("run.1.h5", "run.h5"))
e1, e = (sorted(h5py.File(f"{d}/{f}")) for f in ("evals.1.h5", "evals.h5"))
sys.exit(0 if (a, b) == ([1, 2], [6]) and "iter_2" in e1 and "iter_6" in e and "iter_2" not in e else 1)
PY
}
check "a restart into another run's directory whose record stops short of the checkpoint keeps that record as run.1.h5 and its evaluations as evals.1.h5" \
  other_kept
py "records compared" $d/full $d/k <<'PY'
import sys
import h5py
import numpy as np
a, b = sys.argv[1], sys.argv[2]
def same(x, y):
    return x.shape == y.shape and x.dtype == y.dtype and x.tobytes() == y.tobytes()
with h5py.File(a + "/run.h5", "r") as fa, h5py.File(b + "/run.h5", "r") as fb:
    skip = ("tokens_per_s", "acts_grown_bytes")
    ma, mb = fa["metrics"], fb["metrics"]
    bad = [k for k in sorted(set(ma) | set(mb)) if k not in skip and (k not in ma or k not in mb or not same(ma[k][()], mb[k][()]))]
    print(("not ok" if bad else "ok") + f" - run.h5's metrics: every row of the uninterrupted run, bit for bit ({len(ma['step'])} rows"
          + (f"; differ: {bad[:5]}, steps {list(mb['step'][()])}" if bad else "") + ")")
    ta, tb = fa["timing"], fb["timing"]
    # a checkpoint's time is in the next row, which the checkpoint a run resumed from never reaches
    shapes = lambda t: {k: t[k].shape for k in t if not k.startswith("checkpoint_")}
    print(("ok" if shapes(ta) == shapes(tb) and same(ta["step"][()], tb["step"][()]) else "not ok")
          + " - run.h5's timing: the same columns (but the checkpoints'), rows and steps (values are times)")
with h5py.File(a + "/evals.h5", "r") as fa, h5py.File(b + "/evals.h5", "r") as fb:
    bad = [g for g in sorted(set(fa) | set(fb)) if g not in fa or g not in fb or sorted(fa[g]) != sorted(fb[g])
           or any(not same(fa[g][k][()], fb[g][k][()]) for k in fa[g])
           or {k: np.asarray(v).tobytes() for k, v in fa[g].attrs.items()} != {k: np.asarray(v).tobytes() for k, v in fb[g].attrs.items()}]
    print(("not ok" if bad else "ok") + f" - evals.h5: the same {len(fa)} evaluations, bit for bit" + (f" (differ: {bad})" if bad else ""))
PY
finish
