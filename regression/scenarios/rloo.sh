# RLOO (-algo rloo) on micro models: the checkpoint has no critic, the run
# record's mode, the rollout record's arithmetic recomputed in numpy (per-token
# KL penalty plus the score as rewards, each sample's advantage its return
# minus the mean return of the other k-1 samples of its prompt), the same run
# on 2 ranks (tp 2, and a mixed layout that reallocates every iteration) as on
# 1 rank, and -rollout_batch not divisible into groups of k refused.
#
# The checks in detail: `-algo rloo` on micro models (3 iterations, groups of 4): no critic in
# the checkpoint, mode `rloo` in run.h5, `rollouts.h5` recomputed in numpy (rewards =
# per-token KL penalty + clipped score, each advantage the return minus the mean return of the
# other 3 samples of its prompt on every response token, groups summing to 0, values and
# returns 0); the same run on 2 ranks with tp 2 and with a mixed layout (train tp 2, generate
# dp 2) against 1 rank (weights, moments within 1e-4, rollout tokens identical, floats and
# metrics within 1e-4; measured ~5e-7); another seed differs; a batch not divisible into
# groups one line. About 20 s
. regression/lib.sh
plan 7
d="$RLFUSE_TMP/rloo"; mkdir -p $d
rl_micro_fixture $d
R="-options_file regression/decks/rlhf_tiny.deck -actor_checkpoint $d/sft/final.h5 -reward_checkpoint $d/rm/final.h5 -algo rloo -rollout_group 4 -ppo_iterations 3 -dump_rollouts"

mpirun 1 $R -output_dir $d/one >$d/one.log 2>&1 || not_ok "RLOO on 1 rank: $(tail -1 $d/one.log)"
check "rloo: progress lines and summary" bash -c "[ \$(grep -c '^iter ' $d/one.log) -eq 3 ] && grep -q '^rloo: held-out gold score' $d/one.log"
check "the checkpoint holds actor, reward and the reference's source (/reference_source), and no critic; run.h5 says mode rloo" bash -c \
  "for g in actor reference_source reward; do h5ls $d/one/final.h5/\$g >/dev/null || exit 1; done; ! h5ls $d/one/final.h5/critic >/dev/null 2>&1 && h5dump -a /code/mode $d/one/run.h5 | grep -q '\"rloo\"'"
"$PYTHON" - $d/one <<'PY' && ok "rollouts.h5: rewards (KL penalty + score), leave-one-out advantages over groups of 4, zero values and returns, recomputed in numpy" || not_ok "rollouts.h5 RLOO arithmetic"
import sys, h5py, numpy as np
with h5py.File(sys.argv[1] + "/rollouts.h5", "r") as f:
    assert sorted(f) == ["iter_0", "iter_1", "iter_2"], list(f)
    for it in f.values():
        beta = float(it.attrs["kl_coef"])
        tok, P, R = it["tokens"][()], it["prompt_lengths"][()], it["response_lengths"][()]
        lp, ref, r, A = (it[k][()].astype(np.float64) for k in ("logprobs", "ref_logprobs", "rewards", "advantages"))
        sc, eos = it["scores"][()], it["eos"][()]
        B, T = tok.shape; k = 4
        final = np.where(eos == 1, np.clip(sc, -5, 5), -1.0)   # -ppo_reward_clip 5, -ppo_truncation_penalty -1 (defaults)
        want_r = np.zeros((B, T)); ret = np.zeros(B)
        for b in range(B):
            s, e = P[b], P[b] + R[b]
            want_r[b, s:e] = -beta * (lp[b, s:e] - ref[b, s:e]); want_r[b, e - 1] += final[b]
            ret[b] = want_r[b, s:e].sum()
        assert np.abs(r - want_r).max() <= 1e-5 * (1 + np.abs(want_r).max()), np.abs(r - want_r).max()
        for g in range(0, B, k):   # a group's k samples share their prompt
            assert (P[g:g + k] == P[g]).all() and (tok[g:g + k, :P[g]] == tok[g, :P[g]]).all(), g
        for b in range(B):
            g = b - b % k
            others = (ret[g:g + k].sum() - ret[b]) / (k - 1)
            s, e = P[b], P[b] + R[b]
            assert abs(A[b, s] - (ret[b] - others)) <= 1e-5 * (1 + abs(ret[b])), (b, A[b, s], ret[b] - others)
            assert (A[b, s:e] == A[b, s]).all() and (A[b, :s] == 0).all() and (A[b, e:] == 0).all()
        for g in range(0, B, k):
            assert abs(sum(A[b, P[b]] for b in range(g, g + k))) <= 1e-4, "leave-one-out advantages of a group sum to 0"
        assert (it["values"][()] == 0).all() and (it["returns"][()] == 0).all()
PY

# layout invariance: the same run on 2 ranks
same() {
  "$PYTHON" regression/ref/ckpt_diff.py $d/one/final.h5 $d/$1/final.h5 >$d/diff_$1.txt 2>&1 || return 1
  "$PYTHON" - $d/one $d/$1 <<'PY'
import sys, h5py, numpy as np
a, b = sys.argv[1:3]
with h5py.File(a + "/rollouts.h5", "r") as fa, h5py.File(b + "/rollouts.h5", "r") as fb:
    for it in fa:
        for k in ("tokens", "response_lengths"):
            assert np.array_equal(fa[it][k][()], fb[it][k][()]), (it, k)
        for k in ("logprobs", "ref_logprobs", "rewards", "advantages", "scores"):
            x, y = fa[it][k][()], fb[it][k][()]
            assert np.abs(x - y).max() <= 1e-4 * (np.abs(x).max() + 1e-6), (it, k, np.abs(x - y).max())
sys.path.insert(0, "regression")
import same_metrics  # the metrics as every layout test compares them
assert same_metrics.main(a + "/run.h5", b + "/run.h5", 1e-4, 1e-5, "eval_gold") == 0
PY
}
for lay in "tp2:-actor_gen_tp 2 -ref_inf_tp 2 -rew_inf_tp 2 -actor_train_tp 2" "mixed:-actor_train_tp 2 -actor_train_dp 1 -actor_gen_dp 2"; do
  name=${lay%%:*}; opts=${lay#*:}
  if mpirun 2 $R -output_dir $d/$name $opts >$d/$name.log 2>&1; then
    if same $name >$d/same_$name.txt 2>&1; then ok "2 ranks $name ($opts): weights, moments, rollouts and metrics as on 1 rank ($(grep -o 'max relative difference [^ ]*' $d/diff_$name.txt | sort -k4 -g | tail -1))"
    else not_ok "2 ranks $name differs from 1 rank"; cat $d/diff_$name.txt $d/same_$name.txt | grep -v PASS | tail -3 | sed 's/^/# /'; fi
  else not_ok "RLOO on 2 ranks $name: $(tail -1 $d/$name.log)"; fi
done
mpirun 1 $R -output_dir $d/seed8 -seed 8 >$d/seed8.log 2>&1
check "another seed differs (the comparison can fail)" bash -c "! \"$PYTHON\" regression/ref/ckpt_diff.py $d/one/final.h5 $d/seed8/final.h5 >/dev/null 2>&1"

rlfuse $R -rollout_batch 18 -ppo_minibatches 1 -ppo_microbatches 1 -output_dir $d/bad >$d/bad.log 2>&1; rc=$?
check "-rollout_batch 18 with -rollout_group 4 under -algo rloo: one line naming both, exit non-zero, nothing written" \
  bash -c "[ $rc -ne 0 ] && [ \$(grep -c 'rlfuse: error' $d/bad.log) -eq 1 ] && grep -q 'rlfuse: error: -rollout_batch 18 is not divisible into groups of -rollout_group 4' $d/bad.log && [ ! -e $d/bad ]"
finish
