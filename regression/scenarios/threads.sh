# Results do not depend on the OpenMP thread count: the quickstart pipeline
# (SFT, reward model, PPO at the deck's model size, shortened) on 1 and on 2
# threads gives bit-identical checkpoints (weights, AdamW moments and state of
# every model), PPO's policy.h5, evals.h5 and rollouts, and run records whose
# metrics are the same bits (timings and tokens/s excepted). Once with the
# BLAS kernels rlfuse picks here and once with OpenBLAS's Haswell kernels
# (what AVX2 machines and AMD's Zen get), whose bits depend the most on how a
# product is cut (src/tensor/cpu_matmul.c): one tile per thread made 1 and 2
# threads differ from the first SFT step on.
. regression/lib.sh
plan 13
d="$RLFUSE_TMP/threads"; mkdir -p $d
SHORT="-sft_steps 6 -sft_batch 16 -policy_warmup 2 -policy_decay_steps 6 -rm_pairs 64 -rm_eval_pairs 16 -rm_steps 4 -rm_batch 16
  -rm_eval_every 2 -reward_warmup 2 -ppo_iterations 2 -rollout_batch 16 -ppo_minibatches 2 -gen_slots 16 -ppo_eval_every 2
  -ppo_eval_prompts 16 -ppo_checkpoint_every 0 -dump_rollouts"
# pipeline OUT THREADS [env...]: the shortened quickstart pipeline into $d/OUT
pipeline() {
  local out=$1 t=$2; shift 2
  env "$@" OMP_NUM_THREADS=$t "$MPIEXEC" $MPIEXEC_FLAGS -n 1 "$BIN/rlfuse" -options_file input/quickstart.deck $SHORT \
    -output_dir $d/$out >$d/$out.log 2>&1 || { not_ok "the pipeline on $t threads ($out): $(tail -1 $d/$out.log)"; return 1; }
}
# same_bits WHAT A B FILE...: each FILE of run A and of run B holds the same
# bits: every dataset and attribute, but in a run record (run.h5) only what
# the run computed (/metrics but tokens_per_s, /responses, /summary), and
# in rollouts.h5 not the engine's timeline (gen_step_*: seconds)
same_bits() {
  local what=$1 a=$2 b=$3; shift 3
  "$PYTHON" - $d/$a $d/$b "$@" <<'PY' && ok "$what" || not_ok "$what"
import sys, h5py, numpy as np
a, b, files = sys.argv[1], sys.argv[2], sys.argv[3:]
bad = []
def same(x, y):
    x, y = np.asarray(x), np.asarray(y)
    return x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes()
for name in files:
    with h5py.File(f"{a}/{name}", "r") as fa, h5py.File(f"{b}/{name}", "r") as fb:
        record = name.endswith("run.h5")
        keep = lambda p: (not record or (p.split("/")[0] in ("metrics", "responses", "summary") and p != "metrics/tokens_per_s")) and "/gen_step" not in p
        seen = []
        fa.visititems(lambda p, o: seen.append(p) if keep(p) else None)
        if record:
            seen.append("summary")
        for p in [""] + seen:
            oa, ob = (fa[p], fb[p]) if p else (fa, fb)
            if p and p not in fb:
                bad.append(f"{name}:/{p} missing in {b}")
                continue
            if isinstance(oa, h5py.Dataset) and not same(oa[()], ob[()]):
                bad.append(f"{name}:/{p}")
            if (not record or p == "summary") and (sorted(oa.attrs) != sorted(ob.attrs) or not all(same(oa.attrs[k], ob.attrs[k]) for k in oa.attrs)):
                bad.append(f"{name}:/{p} (attributes)")
        if not seen:
            bad.append(f"{name}: nothing to compare")
for x in bad[:5]:
    print("# differs:", x)
sys.exit(1 if bad else 0)
PY
}
# code OUT ATTR: the run record's /code attribute ATTR (threads, blas_core)
code() { "$PYTHON" -c "import sys, h5py; v = h5py.File(sys.argv[1], 'r')['code'].attrs[sys.argv[2]]; print(v.decode() if isinstance(v, bytes) else v)" $d/$1/sft/run.h5 $2; }
compare() { # TAG WHAT: runs TAG_1 and TAG_2
  local t=$1 why=$2
  if [ "$(code ${t}_1 threads)" = 1 ] && [ "$(code ${t}_2 threads)" = 2 ]; then ok "$why: the runs record 1 and 2 threads"
  else not_ok "$why: the runs record $(code ${t}_1 threads) and $(code ${t}_2 threads) threads, not 1 and 2"; fi
  same_bits "$why: SFT checkpoint (weights, moments, state) the same bits on 1 and 2 threads" ${t}_1 ${t}_2 sft/final.h5
  same_bits "$why: reward model checkpoint the same bits on 1 and 2 threads" ${t}_1 ${t}_2 rm/final.h5
  same_bits "$why: PPO checkpoint (actor, critic, reward, state) and policy.h5 the same bits on 1 and 2 threads" ${t}_1 ${t}_2 ppo/final.h5 ppo/policy.h5
  same_bits "$why: PPO rollouts (tokens, log-probabilities, values, rewards) and evals.h5 the same bits on 1 and 2 threads" ${t}_1 ${t}_2 ppo/rollouts.h5 ppo/evals.h5
  same_bits "$why: run records' metrics the same bits on 1 and 2 threads (SFT, RM, PPO)" ${t}_1 ${t}_2 sft/run.h5 rm/run.h5 ppo/run.h5
}

pipeline own_1 1 && pipeline own_2 2
compare own "the BLAS kernels picked here ($(code own_1 blas_core))"
if grep -qw avx2 /proc/cpuinfo && grep -qw fma /proc/cpuinfo; then
  pipeline haswell_1 1 OPENBLAS_CORETYPE=Haswell && pipeline haswell_2 2 OPENBLAS_CORETYPE=Haswell
  compare haswell "OpenBLAS's Haswell kernels"
else
  for i in 1 2 3 4 5 6; do skip "OpenBLAS's Haswell kernels: this CPU has no AVX2 and FMA"; done
fi
# the comparison can fail: one bit of one AdamW moment flipped
mkdir -p $d/flip && cp -r $d/own_1/sft $d/flip/
"$PYTHON" - $d/flip/sft/final.h5 <<'PY' || not_ok "flipping a bit in a copy"
import sys, h5py, numpy as np
with h5py.File(sys.argv[1], "a") as f:
    ds = f["policy/optim/v/transformer.h.1.mlp.c_proj.weight"]
    x = ds[()]
    x.view(np.uint32).flat[7] ^= 1
    ds[...] = x
PY
(same_bits "(expected to differ)" own_1 flip sft/final.h5) >$d/flip.txt # a subshell: its not ok is not this run's failure
check "the comparison sees one flipped bit in an AdamW moment" grep -q '^not ok' $d/flip.txt
finish
