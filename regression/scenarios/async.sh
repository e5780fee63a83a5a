# Asynchronous RL (-async_staleness, docs/async.md) on micro models: a run
# repeats bit for bit, the same weights on 2 and 4 ranks with generation on
# ranks of its own as on 1 rank, rollouts.h5's versions and behaviour weights
# recomputed in numpy (decoupled PPO's mask over the cap), a restart from a
# checkpoint holding generated batches bit-identical to the unbroken run,
# partial rollouts (-async_partial: token versions recorded, the same on 1
# and 2 ranks, a restart with samples in flight bit-identical, a run killed
# at a random point resumed on the same and another layout), and bad
# values refused with one line.
#
# The checks in detail: asynchronous RL (`-async_staleness`, docs/async.md) on micro models: K
# = 1 on one rank repeats bit for bit and differs from K = 0, the plan line says it changes
# the algorithm and not the time; rollouts.h5's versions (iteration i's rows drawn by version
# max(0, i-1)) and every token's behaviour weight recomputed in numpy (decoupled: masked over
# the cap; tis with cap 1.05: truncated, some tokens over it); the staleness metrics in
# run.h5; K = 1 on 2 ranks and GRPO with K = 2 on 4 ranks disaggregated end with 1 rank's
# weights; a K = 2 run stopped after iteration 2 (its checkpoint holding batches 2 and 3) and
# restarted ends bit for bit as the unbroken run; a synchronous run's final checkpoint
# continued with K = 1 (its first batch generated at the restart); `-mode plan` at staleness 3
# on 8 H100s prints the synchronous plan's time and the plans at stalenesses 1 and 2, each
# gain the quotient of the times printed; a restart with another staleness (refused before
# anything is written: the run's directory unchanged), a negative staleness, a cap below 1 and
# streaming fusion refused with one line; partial rollouts (`-async_partial 4` of 12 tokens):
# a run repeats bit for bit and differs from whole samples, rollouts.h5's token versions
# (non-decreasing along a row, up to the generating iteration, some rows spanning two; a row's
# version its oldest token's) and every token's behaviour weight from its own log-probability,
# the same weights on 2 ranks disaggregated as on 1, a GRPO run with K = 2 stopped after
# iteration 2 with samples half drawn in its checkpoint's pool restarts bit-identical (the
# check fails when the pool is not read back); with allowed sets (top-k 6, top-p 0.9,
# min_new_tokens 4): the checkpoint's pool and generated batches hold a set of 1 to 6 ids at
# every response position, the drawn token in it, EOS in none of the first 4 (rows spanning
# two versions among them), a restart with samples and sets in flight bit-identical, 4 ranks
# disaggregated (two generation replicas gathering their sets) ending with 1 rank's weights,
# and a restart without the sampling options refused; a 2-rank disaggregated run with partial
# rollouts (PPO with a critic, K = 2, a checkpoint every iteration) killed with SIGKILL on its
# generation rank 0-20 ms after a random checkpoint (2 to 9 of 24) appears, resumed with
# `-restart latest` from the newest one (samples in flight in it), ends bit for bit as the
# unbroken 2-rank run when resumed on 2 ranks, and with the 1-rank run's weights when resumed
# on 1; partial rollouts without staleness, at the token limit, or a restart with another
# budget refused with one line. About 30 s
. regression/lib.sh
plan 33
d="$RLFUSE_TMP/async"; mkdir -p $d
rl_micro_fixture $d
R="-options_file regression/decks/rlhf_tiny.deck -actor_checkpoint $d/sft/final.h5 -reward_checkpoint $d/rm/final.h5 -ppo_iterations 4 -ppo_eval_prompts 8 -dump_rollouts"
bits() { "$PYTHON" regression/ref/ckpt_diff.py $1/final.h5 $2/final.h5 >$d/bits.txt 2>&1 && ! grep -v 'max relative difference 0 ' $d/bits.txt | grep -q .; }
differ() { ! "$PYTHON" regression/ref/ckpt_diff.py $1/final.h5 $2/final.h5 >/dev/null 2>&1; }
restarted_same() { grep -q '2 generated batches from' $d/r.log && bits $d/u $d/r; }

mpirun 1 $R -async_staleness 1 -output_dir $d/k1 >$d/k1.log 2>&1 || not_ok "K=1 on 1 rank: $(tail -1 $d/k1.log)"
check "K=1 on shared ranks: the plan line says it changes the algorithm, not the time; progress lines show the iteration's wall time, the staleness and the ETA" \
  bash -c "grep -q 'changes the algorithm, not the time' $d/k1.log && [ \$(grep -cE '^iter .*train [0-9.]+ of [0-9.]+ s \| stale .*ETA' $d/k1.log) -eq 4 ]"
mpirun 1 $R -async_staleness 1 -output_dir $d/k1b >$d/k1b.log 2>&1
check "K=1 repeats bit for bit (weights, moments; ckpt_diff max 0)" bits $d/k1 $d/k1b
mpirun 1 $R -output_dir $d/k0 >$d/k0.log 2>&1
check "K=1 differs from K=0 (the comparison can fail)" differ $d/k0 $d/k1
"$PYTHON" - $d/k1 5.0 <<'PY' && ok "rollouts.h5 (K=1): iteration i's rows drawn by version max(0, i-1); behaviour weights exp(prox - behaviour) on response tokens, 0 above the cap 5; run.h5 staleness metrics" || not_ok "K=1 rollouts.h5 or run.h5 metrics"
import sys, h5py, numpy as np
d, cap = sys.argv[1], float(sys.argv[2])
with h5py.File(d + "/rollouts.h5", "r") as f:
    for i in range(4):
        it = f[f"iter_{i}"]
        v = it["versions"][()]
        assert (v == max(0, i - 1)).all(), (i, v)
        lp, px, w = (it[k][()].astype(np.float64) for k in ("logprobs", "prox_logprobs", "behaviour_weights"))
        P, L = it["prompt_lengths"][()], it["response_lengths"][()]
        for b in range(len(P)):
            s, e = P[b], P[b] + L[b]
            rho = np.exp(px[b, s:e] - lp[b, s:e])
            want = np.where(rho > cap, 0.0, rho)
            assert np.abs(w[b, s:e] - want).max() <= 1e-6 * (1 + want.max()), (i, b)
            assert (w[b, :s] == 0).all() and (w[b, e:] == 0).all()
        if i == 0:  # nothing trained yet: the proximal policy is the behaviour one but for the last bits
            assert np.abs(w[w > 0] - 1).max() < 1e-4
with h5py.File(d + "/run.h5", "r") as f:
    m = f["metrics"]
    st = m["async_staleness_mean"][()]
    assert list(st) == [0, 1, 1, 1], st
    assert (m["async_stale_token_frac"][()][1:] == 1).all() and m["async_stale_token_frac"][0] == 0
    assert (m["async_is_mean"][()] > 0.5).all() and (m["async_is_max"][()] >= 1 - 1e-4).all()
PY

# generation on ranks of its own: the same weights as on 1 rank
mpirun 2 $R -async_staleness 1 -placement disaggregate -output_dir $d/k1d2 >$d/k1d2.log 2>&1 || not_ok "K=1 on 2 ranks: $(tail -1 $d/k1d2.log)"
check "K=1 on 2 ranks disaggregated: the plan line names the overlap; final weights as on 1 rank" \
  bash -c "grep -q 'overlaps training (ranks 0-0)' $d/k1d2.log && \"$PYTHON\" regression/ref/ckpt_diff.py $d/k1/final.h5 $d/k1d2/final.h5 >$d/diff_d2.txt"
# the end line: the iterations' wall time and their stages added, each the
# sum of the progress lines' (which round to 0.01 s), and their quotient,
# which the end line computes before rounding: it lies between the quotients
# of the rounded times' bounds (at 0.05 s and 0.06 s, anywhere in 1.0-1.44)
gained() {
  awk '/^iter / { n++; for (i = 1; i <= NF; i++) { if ($i == "gen") w += $(i + 1) + $(i + 3) + $(i + 5); if ($i == "of") t += $(i + 1) } }
       /^ppo: asynchronous \(staleness 1\): 4 iterations in / { T = $8; W = $(NF - 2); Q = substr($NF, 2) + 0; f = 1 }
       END { e = 0.006 * n + 0.01; exit !(f && n == 4 && T - t < e && t - T < e && W - w < 3 * e && w - W < 3 * e && W > 0 && T > 0.005 &&
                                         Q >= (W - 0.005) / (T + 0.005) - 0.006 && Q <= (W + 0.005) / (T - 0.005) + 0.006) }' $1
}
check "K=1 on 2 ranks disaggregated ends with the iterations' time, their stages one after another and the quotient (the progress lines' sums)" \
  gained $d/k1d2.log
mpirun 1 $R -async_staleness 2 -algo grpo -rollout_group 4 -output_dir $d/g2 >$d/g2.log 2>&1 || not_ok "GRPO K=2 on 1 rank: $(tail -1 $d/g2.log)"
mpirun 4 $R -async_staleness 2 -algo grpo -rollout_group 4 -placement disaggregate -output_dir $d/g2d4 >$d/g2d4.log 2>&1 || not_ok "GRPO K=2 on 4 ranks: $(tail -1 $d/g2d4.log)"
check "GRPO K=2 on 4 ranks disaggregated (2 training, 2 generation replicas): final weights as on 1 rank" "$PYTHON" regression/ref/ckpt_diff.py $d/g2/final.h5 $d/g2d4/final.h5
mpirun 1 $R -async_staleness 1 -async_correction tis -async_is_cap 1.05 -output_dir $d/tis >$d/tis.log 2>&1 || not_ok "tis: $(tail -1 $d/tis.log)"
"$PYTHON" - $d/tis 1.05 <<'PY' && ok "-async_correction tis: the weights truncated at -async_is_cap 1.05, the capped share in run.h5" || not_ok "tis weights"
import sys, h5py, numpy as np
d, cap = sys.argv[1], float(sys.argv[2])
with h5py.File(d + "/rollouts.h5", "r") as f:
    seen = 0
    for i in range(1, 4):
        it = f[f"iter_{i}"]
        lp, px, w = (it[k][()].astype(np.float64) for k in ("logprobs", "prox_logprobs", "behaviour_weights"))
        P, L = it["prompt_lengths"][()], it["response_lengths"][()]
        for b in range(len(P)):
            s, e = P[b], P[b] + L[b]
            rho = np.exp(px[b, s:e] - lp[b, s:e])
            assert np.abs(w[b, s:e] - np.minimum(rho, cap)).max() <= 1e-6 * (1 + cap), (i, b)
            seen += int((rho > cap).sum())
    assert seen > 0, "no token over the cap: the test cannot tell truncation from nothing"
with h5py.File(d + "/run.h5", "r") as f:
    assert f["metrics"]["async_is_capped_frac"][()][1:].max() > 0
PY

# restart with generated batches in flight
mpirun 1 $R -async_staleness 2 -ppo_iterations 5 -checkpoint_every 2 -output_dir $d/u >$d/u.log 2>&1 || not_ok "K=2 unbroken: $(tail -1 $d/u.log)"
check "the checkpoint after iteration 2 holds batches 2 and 3 (generated, not yet trained on)" bash -c "h5ls $d/u/ckpt_000002.h5/async | grep -q batch_2 && h5ls $d/u/ckpt_000002.h5/async | grep -q batch_3"
mpirun 1 $R -async_staleness 2 -ppo_iterations 5 -restart $d/u/ckpt_000002.h5 -output_dir $d/r >$d/r.log 2>&1 || not_ok "K=2 restart: $(tail -1 $d/r.log)"
check "K=2 restarted at iteration 2: the final weights are the unbroken run's bit for bit" restarted_same
keep=$d/u expect_error "a restart with another -async_staleness, into the run's directory: nothing there changed" "was written with -async_staleness 2" $R -ppo_iterations 5 -restart $d/u/ckpt_000002.h5 -async_staleness 0 -output_dir $d/u
mpirun 1 $R -ppo_iterations 6 -restart $d/k0/final.h5 -async_staleness 1 -output_dir $d/k0on >$d/k0on.log 2>&1 || not_ok "a synchronous checkpoint restarted with K=1: $(tail -1 $d/k0on.log)"
check "a synchronous run's checkpoint goes on asynchronously: the first batch generated at the restart, 2 iterations" bash -c "grep -q 'the first 1 batches generated' $d/k0on.log && [ \$(grep -c '^iter ' $d/k0on.log) -eq 2 ]"
rlfuse $R -async_staleness 3 -mode plan -plan_ranks 8 -cost_hardware input/hardware/h100_sxm.deck -plan_iterations 100 >$d/plan.log 2>&1 || not_ok "-mode plan at staleness 3: $(tail -1 $d/plan.log)"
"$PYTHON" - $d/plan.log <<'PY' && ok "-mode plan at staleness 3: the synchronous plan and stalenesses 1 and 2 searched too, each gain their quotient" || not_ok "-mode plan at staleness 3: the async report (see $d/plan.log)"
import re, sys
t = open(sys.argv[1]).read()
m = re.search(r"asynchronous \(staleness 3\): ([0-9.e+-]+) s per iteration; the best synchronous plan searched \(same budget\): ([0-9.e+-]+) s per iteration, so ([0-9.]+)x", t)
rows = re.findall(r"^  staleness (\d): ([0-9.e+-]+) s per iteration, ([0-9.]+)x from asynchrony \(generation on ranks [0-9,-]+, actor training on [0-9,-]+\)", t, re.M)
assert m and [r[0] for r in rows] == ["1", "2"], (m, rows)
a, s, g = map(float, m.groups())
assert abs(s / a - g) < 0.006 and g > 1, (a, s, g)
for k, x, gk in rows:
    assert abs(s / float(x) - float(gk)) < 0.006, (k, x, gk)
PY
# partial rollouts: at most 4 new tokens per sample and iteration, the rest with newer weights
mpirun 1 $R -async_staleness 1 -async_partial 4 -output_dir $d/p1 >$d/p1.log 2>&1 || not_ok "partial K=1 on 1 rank: $(tail -1 $d/p1.log)"
mpirun 1 $R -async_staleness 1 -async_partial 4 -output_dir $d/p1b >$d/p1b.log 2>&1
check "partial rollouts (K=1, -async_partial 4) repeat bit for bit" bits $d/p1 $d/p1b
check "partial rollouts differ from whole samples (the comparison can fail)" differ $d/k1 $d/p1
"$PYTHON" - $d/p1 5.0 <<'PY' && ok "partial rollouts' rollouts.h5: each token's version recorded (non-decreasing along a row, up to the generating iteration; rows spanning versions), a row's version its oldest token's, behaviour weights per token from each token's own log-probability; run.h5's resumed share" || not_ok "partial rollouts' rollouts.h5 or run.h5 (see $d/p1)"
import sys, h5py, numpy as np
d, cap = sys.argv[1], float(sys.argv[2])
spanning = 0
with h5py.File(d + "/rollouts.h5", "r") as f:
    for i in range(4):
        it = f[f"iter_{i}"]
        tv, v = it["token_versions"][()], it["versions"][()]
        lp, px, w = (it[k][()].astype(np.float64) for k in ("logprobs", "prox_logprobs", "behaviour_weights"))
        P, L = it["prompt_lengths"][()], it["response_lengths"][()]
        for b in range(len(P)):
            s, e = P[b], P[b] + L[b]
            t = tv[b, s:e]
            assert L[b] >= 1 and (np.diff(t) >= 0).all() and t.max() <= max(0, i - 1) and t.min() == v[b], (i, b, t, v[b])
            spanning += int(t.min() != t.max())
            rho = np.exp(px[b, s:e] - lp[b, s:e])
            assert np.abs(w[b, s:e] - np.where(rho > cap, 0.0, rho)).max() <= 1e-6 * (1 + rho.max()), (i, b)
assert spanning > 0, "no row spans two versions: nothing went on across iterations"
with h5py.File(d + "/run.h5", "r") as f:
    m = f["metrics"]
    assert m["async_resumed_frac"][()].max() > 0 and (m["async_pool_rows"][()] > 0).all()
PY
mpirun 2 $R -async_staleness 1 -async_partial 4 -placement disaggregate -output_dir $d/p1d2 >$d/p1d2.log 2>&1 || not_ok "partial K=1 on 2 ranks: $(tail -1 $d/p1d2.log)"
check "partial rollouts on 2 ranks disaggregated: final weights as on 1 rank" "$PYTHON" regression/ref/ckpt_diff.py $d/p1/final.h5 $d/p1d2/final.h5
P="-async_staleness 2 -async_partial 3 -algo grpo -rollout_group 4 -ppo_iterations 5"
mpirun 1 $R $P -checkpoint_every 2 -output_dir $d/pu >$d/pu.log 2>&1 || not_ok "partial GRPO K=2 unbroken: $(tail -1 $d/pu.log)"
mpirun 1 $R $P -restart $d/pu/ckpt_000002.h5 -output_dir $d/pr >$d/pr.log 2>&1 || not_ok "partial GRPO K=2 restart: $(tail -1 $d/pr.log)"
mpirun 4 $R $P -placement disaggregate -output_dir $d/pd4 >$d/pd4.log 2>&1 || not_ok "partial GRPO K=2 on 4 ranks: $(tail -1 $d/pd4.log)"
check "partial GRPO K=2 on 4 ranks disaggregated (2 generation replicas gather the call's samples and take the batch with the reference's and reward model's calls): final weights as on 1 rank" "$PYTHON" regression/ref/ckpt_diff.py $d/pu/final.h5 $d/pd4/final.h5
mpirun 1 $R -async_staleness 1 -async_partial 2 -gen_max_new_tokens 4 -ppo_iterations 2 -output_dir $d/pshort >$d/pshort.log 2>&1
check "partial rollouts with rows shorter than a whole demonstration (-gen_max_new_tokens 4 after 8-symbol prompts): the run ends" \
  grep -q '^ppo: wrote final.h5' $d/pshort.log
partial_restarted_same() { in_flight $d/pu/ckpt_000002.h5 && bits $d/pu $d/pr; }
in_flight() { "$PYTHON" -c "import h5py,sys; p=h5py.File(sys.argv[1])['async/pool']; L,e=p['response_lengths'][()],p['ended'][()]; sys.exit(0 if ((L>0)&(e==0)).any() else 1)" $1; }
check "partial GRPO K=2 restarted at iteration 2 with samples in flight (checkpoint /async/pool: some begun, not ended): the unbroken run's weights bit for bit" \
  partial_restarted_same
# killed at a random point: a 2-rank disaggregated run with partial rollouts
# (PPO with a critic, K=2, a checkpoint every iteration) loses its
# generation rank to SIGKILL 0-20 ms after its checkpoint k appears (k
# random in 2..9 of 24: anywhere in an iteration, or inside the next write);
# resumed from its newest checkpoint (-restart latest) on the same 2 ranks
# it ends bit-identical to the unbroken run, and on 1 rank as the 1-rank run
PK="-async_staleness 2 -async_partial 3 -ppo_iterations 24 -checkpoint_every 1"
mpirun 2 $R $PK -placement disaggregate -output_dir $d/ku2 >$d/ku2.log 2>&1 || not_ok "partial K=2 unbroken on 2 ranks: $(tail -1 $d/ku2.log)"
mpirun 1 $R $PK -output_dir $d/ku1 >$d/ku1.log 2>&1 || not_ok "partial K=2 unbroken on 1 rank: $(tail -1 $d/ku1.log)"
kill_async() { # DIR K: prints what the kill hit
  mpirun 2 $R $PK -placement disaggregate -output_dir $1 >$1.log 2>&1 &
  local pid=$!
  "$PYTHON" - $1 $2 "$BIN/rlfuse" <<'PY'
import os, random, signal, subprocess, sys, time
d, k, exe = sys.argv[1], int(sys.argv[2]), sys.argv[3]
t0, f = time.time(), os.path.join(d, "ckpt_%06d.h5" % k)
while not os.path.exists(f) and time.time() - t0 < 60: time.sleep(0.001)
time.sleep(random.uniform(0, 0.02))
ps = subprocess.run(["pgrep", "-f", "^%s .*-output_dir %s( |$)" % (exe, d)], capture_output=True, text=True).stdout.split()
if ps: os.kill(int(ps[-1]), signal.SIGKILL)
print("killed after checkpoint %d" % k if ps else "ended before the kill")
PY
  wait $pid 2>/dev/null
}
resumed_same() { # N DIR FROM: samples were in flight in FROM; the weights as the unbroken run's on N ranks
  in_flight "$3" || return 1
  if [ $1 = 2 ]; then bits $d/ku2 $2; else "$PYTHON" regression/ref/ckpt_diff.py $d/ku1/final.h5 $2/final.h5 >$d/diff_kill1.txt; fi
}
for n in 2 1; do
  k=$((2 + RANDOM % 8)) dir=$d/kill$n
  hit=$(kill_async $dir $k)
  if [ -e $dir/final.h5 ]; then not_ok "partial K=2 killed at random on 2 ranks: the run ended before the kill ($hit)"; continue; fi
  mpirun $n $R $PK $([ $n = 2 ] && echo -placement disaggregate) -restart latest -output_dir $dir >$dir.resume.log 2>&1 || not_ok "resume on $n rank(s): $(tail -1 $dir.resume.log)"
  from=$(sed -n 's/.*generated batches from \(.*\)$/\1/p' $dir.resume.log)
  check "partial K=2 on 2 ranks $hit, resumed on $n rank(s) from $(basename "$from") with samples in flight: $([ $n = 2 ] && echo "the unbroken run's weights bit for bit" || echo "the 1-rank run's weights")" \
    resumed_same $n $dir "$from"
done
keep=$d/pu expect_error "a restart with another -async_partial, into the run's directory: nothing there changed" "restart it with the same -async_partial" $R -async_staleness 2 -async_partial 5 -algo grpo -rollout_group 4 -ppo_iterations 5 -restart $d/pu/ckpt_000002.h5 -output_dir $d/pu
expect_error "-async_partial without -async_staleness" "-async_partial 4 needs -async_staleness >= 1" $R -async_partial 4 -output_dir $d/bad5
# partial rollouts with allowed sets (top-k, top-p, min_new_tokens): a sample's sets go on with it across iterations
PM="$P -gen_top_k 6 -gen_top_p 0.9 -gen_min_new_tokens 4"
mpirun 1 $R $PM -checkpoint_every 2 -output_dir $d/mu >$d/mu.log 2>&1 || not_ok "masked partial GRPO K=2 unbroken: $(tail -1 $d/mu.log)"
"$PYTHON" - $d/mu/ckpt_000002.h5 6 4 3 <<'PY' && ok "masked partial rollouts' checkpoint: every response position of the pool's rows (mask_counts, ids in row order) and of the generated batches (mask_off, mask_ids) has its allowed set, 1 to 6 ids holding the drawn token, EOS nowhere among the first 4 (those of earlier iterations included); prompt positions and past the end none; rows whose tokens span two weights versions among them" || not_ok "masked partial rollouts' allowed sets in $d/mu/ckpt_000002.h5"
import sys, h5py, numpy as np
path, k, mn, eos = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
spanning = 0
def row_sets(tok, P, L, sets, ver):
    global spanning
    for t in range(len(tok)):
        s = sets[t]
        if P <= t < P + L:
            assert 1 <= len(s) <= k and tok[t] in s, (t, tok[t], s)
            assert t - P >= mn or eos not in s, (t, s)  # EOS banned before min_new_tokens
        else:
            assert len(s) == 0, (t, s)
    if ver is not None and L > 0:
        spanning += int(ver[P:P + L].min() != ver[P:P + L].max())
with h5py.File(path, "r") as f:
    pool = f["async/pool"]
    n = int(pool.attrs["rows"])
    assert n > 0 and "mask_counts" in pool
    cnt, ids = pool["mask_counts"][()], pool["mask_ids"][()]
    at = 0
    for i in range(n):
        sets = []
        for t in range(cnt.shape[1]):
            sets.append(list(ids[at:at + cnt[i, t]])); at += cnt[i, t]
        row_sets(pool["tokens"][i], pool["prompt_lengths"][i], pool["response_lengths"][i], sets, pool["token_versions"][i])
    assert at == cnt.sum() and (len(ids) == max(1, at))
    batches = [g for g in f["async"] if g.startswith("batch_")]
    assert batches
    for g in batches:
        b = f["async"][g]
        off, mids, T = b["mask_off"][()], b["mask_ids"][()], b["tokens"].shape[1]
        for r in range(b["tokens"].shape[0]):
            sets = [list(mids[off[r * T + t]:off[r * T + t + 1]]) for t in range(T)]
            row_sets(b["tokens"][r], b["prompt_lengths"][r], b["response_lengths"][r], sets, b["token_versions"][r])
assert spanning > 0, "no row spans two versions: nothing went on across iterations"
PY
mpirun 1 $R $PM -restart $d/mu/ckpt_000002.h5 -output_dir $d/mr >$d/mr.log 2>&1 || not_ok "masked partial GRPO K=2 restart: $(tail -1 $d/mr.log)"
masked_restarted_same() { in_flight $d/mu/ckpt_000002.h5 && bits $d/mu $d/mr; }
check "masked partial GRPO K=2 restarted at iteration 2 with samples and their allowed sets in flight: the unbroken run's weights bit for bit" masked_restarted_same
mpirun 4 $R $PM -placement disaggregate -output_dir $d/md4 >$d/md4.log 2>&1 || not_ok "masked partial GRPO K=2 on 4 ranks: $(tail -1 $d/md4.log)"
check "masked partial GRPO K=2 on 4 ranks disaggregated (2 generation replicas gather their allowed sets): final weights as on 1 rank" "$PYTHON" regression/ref/ckpt_diff.py $d/mu/final.h5 $d/md4/final.h5
check "masked partial rollouts differ from unmasked ones (the comparison can fail)" differ $d/pu $d/mu
expect_error "a masked pool restarted without its sampling options" "restart it with the sampling options it was written with" $R $P -restart $d/mu/ckpt_000002.h5 -output_dir $d/bad6
expect_error "-async_partial at -gen_max_new_tokens" "-async_partial 12 must be below -gen_max_new_tokens 12" $R -async_staleness 1 -async_partial 12 -output_dir $d/bad7
expect_error "-async_staleness -1" "-async_staleness -1 must be in \[0, 64\]" $R -async_staleness -1 -output_dir $d/bad2
expect_error "-async_is_cap 0.5" "-async_is_cap 0.5 must be 0 (no cap) or at least 1" $R -async_staleness 1 -async_is_cap 0.5 -output_dir $d/bad3
expect_error "-async_staleness with -fuse_gen_inf stream" "-async_staleness 1 with -fuse_gen_inf stream" $R -async_staleness 1 -fuse_gen_inf stream -output_dir $d/bad4
finish
