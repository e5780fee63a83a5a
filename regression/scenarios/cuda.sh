# The CUDA backend end to end: SFT, reward modelling, PPO and GRPO on
# -device cuda end as on -device cpu (and SFT of a LLaMA model on sequences
# of 303 tokens, the tiled attention's three query blocks) (every checkpoint tensor within 1e-3 of
# its scale, regression/ref/ckpt_diff.py; run.h5 metrics within 1e-3 relative;
# rollout tokens identical), a cuda run repeated gives the same bits, and
# bf16 runs finish with finite losses close to fp32's; PPO on 2 ranks sharing
# the GPU (tp 2, and disaggregated: NCCL cannot run there, so device buffers
# go through the host) ends as on 1 rank.
#
# Why 1e-3: test_cuda finds each op within ~1e-7..1e-6 of the cpu op (sums
# in another order); 40 AdamW steps and 3 PPO iterations amplify that about
# as a change of layout does, where scenarios/layouts.sh sees at most ~5e-6.
# 1e-3 leaves a wide margin, while a wrong op moves the weights by the
# size of their updates (lr 2e-3 x 40 steps: ~1e-1 of their scale).
#
# Without a GPU (bin/test_cuda -probe says why) only the checks that need
# none run: -precision bf16 with -device cpu, and -device cuda without a
# device, each one line before any output; the rest is one skip line
# (a failure with RLFUSE_REQUIRE_CUDA=1), and the tools that carry a build
# to a GPU machine are checked as far as they run here. Plan: 7 checks
# without a GPU, 12 with one.
#
# The checks in detail: the CUDA backend end to end: SFT (40 steps, quickstart model size), a
# reward model (pairs generated on the device) PPO (3 iterations, `-dump_rollouts`), GRPO (the
# same with groups of 4, no critic) and SFT of a LLaMA model (4 query heads over 2 kv heads)
# on 8 sequences of 303 tokens (the tiled attention's three query blocks) with `-device cuda
# -precision fp32` against `-device cpu` from the same checkpoints: every checkpoint tensor
# within 1e-3 of its scale (`regression/ref/ckpt_diff.py`), run.h5 metrics within 1e-3 relative
# (`regression/same_metrics.py`), rollout tokens identical; a cuda SFT run twice bit-identical
# (`h5diff`); PPO on 2 ranks sharing the one GPU (tp 2, and disaggregated) as on 1 rank, at
# the same tolerance (skipped on a machine of several GPUs); bf16 SFT with finite, falling
# losses whose last-10-step mean is within 10% of fp32's, bf16 PPO with finite metrics; an SFT
# batch whose activations (290 GiB) exceed the GPU's free memory refused with one line naming
# `-sft_batch` and the device memory, before anything is written. On any machine: `-device cpu
# -precision bf16` and `-device cuda` without a device each one line naming the option, before
# any output (and `bench_attention -device cuda` one error line, a non-zero exit); without a
# GPU also `tools/gpu_bundle.sh` (a bundle made, test_nccl run on 2 ranks through its mpiexec
# and wrappers, `rlfuse -help` through them) and `tools/gpu_checklist.sh` (one line, exit 0).
# The rest skips without a GPU
. regression/lib.sh
d="$RLFUSE_TMP/cuda"; mkdir -p $d

# one "rlfuse: error:" line matching $2, a non-zero exit and no output directory
one_line_error() {
  local what=$1 pat=$2 out=$d/bad_$RANDOM err rc; shift 2
  err=$(rlfuse -options_file regression/decks/tiny.deck -output_dir $out "$@" 2>&1 >/dev/null); rc=$?
  if [ $rc -eq 0 ]; then not_ok "$what: exit status 0"
  elif [ "$(printf '%s\n' "$err" | grep -c .)" -ne 1 ] || ! printf '%s' "$err" | grep -q "^rlfuse: error: .*$pat"; then
    not_ok "$what: expected one line matching '$pat', got: $(printf '%s' "$err" | head -3)"
  elif [ -e $out ]; then not_ok "$what: the output directory was created"
  else ok "$what ($(printf '%s' "$err" | cut -c1-110))"; fi
}
one_line_error "-device cpu -precision bf16 is refused" "-precision" -device cpu -precision bf16

if [ ! -x "$BIN/test_cuda" ]; then not_ok "$BIN/test_cuda was not built (the GPU probe)"; finish; fi
probe=$("$BIN/test_cuda" -probe 2>&1)
if ! printf '%s\n' "$probe" | grep -q '^# cuda: '; then
  why=$(printf '%s\n' "$probe" | sed -n 's/^# skip: //p' | head -1)
  [ -n "$why" ] || why="bin/test_cuda -probe answered: $(printf '%s' "$probe" | head -1)"
  plan 7
  one_line_error "-device cuda without a usable device is refused" "-device cuda" -device cuda
  # a tool's main lets PETSc start MPI: its error exit must not finalize MPI twice (an MPICH complaint after the error line)
  check "a benchmark asked for -device cuda without a device: one error line and a non-zero exit" \
    bash -c 'out=$("$1" -device cuda 2>&1) && exit 1; [ "$(printf "%s\n" "$out" | grep -c .)" = 1 ] && printf "%s" "$out" | grep -q "^rlfuse: error: -device cuda"' _ "$BIN/bench_attention"
  # what carries a build to a GPU machine (docs/benchmarks.md, "GPU checklist"), as far as it runs here
  if ldd "$BIN/rlfuse" 2>/dev/null | grep -q libcudart; then
    # packed fast (XZ_OPT=-0: 55 MB where the default's is 35, 2026-11-28), so with a bound of its own
    if XZ_OPT=-0 BUNDLE_MAX_MB=100 bash tools/gpu_bundle.sh $d/bundle >$d/bundle.log 2>&1; then ok "tools/gpu_bundle.sh packs the programs, mpiexec, h5diff and libraries ($(tail -1 $d/bundle.log | sed 's/^# gpu_bundle: [^:]*: //'))"
    else not_ok "tools/gpu_bundle.sh failed: $(tail -2 $d/bundle.log)"; fi
    bash -c '. tools/gpu_bundle.sh && gpu_bundle_use "$1" && "$MPIEXEC" -n 2 "$BIN/test_nccl" && "$BIN/rlfuse" -help | grep -c "Decks are PETSc options files"; gpu_bundle_cleanup' _ $d/bundle >$d/bundle_use.log 2>&1
    check "a bundle's programs run from its wrappers: test_nccl on 2 ranks through the bundle's mpiexec, and rlfuse -help" \
      bash -c "grep -q '^0 passed, 0 failed, 1 skipped' $d/bundle_use.log && [ \"\$(tail -1 $d/bundle_use.log)\" = 1 ]"
  else
    skip "tools/gpu_bundle.sh: built without CUDA (it carries CUDA builds only)"
    skip "a bundle's programs: built without CUDA"
  fi
  check "tools/gpu_checklist.sh without a GPU: one line, exit 0" bash -c '[ "$(bash tools/gpu_checklist.sh 2>&1 | grep -c .)" = 1 ]'
  if [ "${RLFUSE_REQUIRE_CUDA:-0}" = 1 ]; then not_ok "cuda scenario: no usable CUDA device but RLFUSE_REQUIRE_CUDA=1 ($why)"
  else skip "cuda scenario: no CUDA device ($why)"; fi
  finish
fi
plan 12
echo "$probe"
# 290 GiB of activations (tiny.deck's model, 2,000,000 x 27 tokens): more than any GPU holds, under 1 GB of host memory
one_line_error "an SFT batch beyond the GPU's free memory is refused before anything is written" "-sft_batch 2000000 needs at least .* of device memory" -device cuda -sft_batch 2000000

M="-policy_n_layer 2 -policy_n_head 4 -policy_n_embd 128 -policy_vocab_size 20 -policy_n_positions 32 -task_demo_noise 0.25 -seed 5"
SFT="-mode sft $M -sft_steps 40 -sft_batch 32 -policy_lr 2e-3 -sft_eval_every 10"
RM="-mode rm -task_demo_noise 0.25 -seed 5 -rm_sft_checkpoint $d/sft_cpu/final.h5 -rm_pairs 64 -rm_eval_pairs 16 -rm_steps 10 -rm_batch 16 -reward_lr 1e-3 -gen_max_new_tokens 16"
PPO="-mode ppo -actor_checkpoint $d/sft_cpu/final.h5 -reward_checkpoint $d/rm_cpu/final.h5 -ppo_iterations 3 -rollout_batch 32 -ppo_minibatches 2 -ppo_eval_every 0
     -ppo_microbatches 2 -gen_max_new_tokens 16 -gen_slots 16 -ppo_eval_prompts 16 -actor_lr 1e-4 -critic_lr 3e-4 -seed 5 -dump_rollouts"
# SFT of a LLaMA-family model (4 query heads over 2 kv heads) on sequences of up to 303 tokens: three query blocks of the tiled attention
LONG="-mode sft -policy_arch llama -policy_n_layer 2 -policy_n_head 4 -policy_n_kv_head 2 -policy_n_ffn 256 -policy_n_embd 128 -policy_vocab_size 20
     -policy_n_positions 320 -policy_rope_theta 10000 -policy_norm_eps 1e-6 -task_len_max 150 -task_demo_noise 0.25 -seed 5 -sft_steps 10 -sft_batch 8 -policy_lr 2e-3"

# run NAME ARGS...: one job into $d/NAME; a failure is reported with its last lines
run() {
  local name=$1; shift
  if rlfuse "$@" -output_dir $d/$name >$d/$name.log 2>&1; then return 0; fi
  not_ok "$name: the run failed"; tail -3 $d/$name.log | sed 's/^/# /'; return 1
}

# same A B TOL: checkpoints (ckpt_diff), run.h5 metrics and, where both
# have them, rollouts: tokens and lengths identical, floats within TOL of
# each array's scale, metrics within TOL relative (timings never compared)
same() {
  local a=$1 b=$2 tol=$3
  "$PYTHON" regression/ref/ckpt_diff.py --tol $tol $d/$a/final.h5 $d/$b/final.h5 >$d/diff_$b.txt 2>&1 || return 1
  # eval_gold: the PPO deck asks for no held-out evaluation (-ppo_eval_every 0)
  "$PYTHON" regression/same_metrics.py $d/$a/run.h5 $d/$b/run.h5 $tol $(awk -v t=$tol 'BEGIN { print t * 1e-2 }') eval_gold >>$d/diff_$b.txt 2>&1 || return 1
  "$PYTHON" - $d/$a $d/$b $tol >>$d/diff_$b.txt 2>&1 <<'PY'
import os, sys, h5py, numpy as np
a, b, tol = sys.argv[1], sys.argv[2], float(sys.argv[3])
if os.path.exists(a + "/rollouts.h5"):
    with h5py.File(a + "/rollouts.h5", "r") as fa, h5py.File(b + "/rollouts.h5", "r") as fb:
        assert sorted(fa) == sorted(fb), (list(fa), list(fb))
        for it in fa:
            for k in fa[it]:
                if k.startswith("gen_step"):
                    continue  # the engine's timeline
                x, y = fa[it][k][()], fb[it][k][()]
                if x.dtype.kind in "iu":
                    assert np.array_equal(x, y), (it, k)
                else:
                    assert np.abs(x - y).max() <= tol * (np.abs(x).max() + 1e-6), (it, k)
PY
}
worst() { grep -o 'max relative difference [^ ]*' $d/diff_$1.txt | sort -k4 -g | tail -1; }
compare() {
  local what=$1 a=$2 b=$3 tol=1e-3
  if same $a $b $tol; then ok "$what ($(worst $b))"
  else not_ok "$what: differ beyond $tol"; grep -v '^PASS' $d/diff_$b.txt | tail -4 | sed 's/^/# /'; fi
}

# fixtures on the cpu, which every device then starts from
run sft_cpu $SFT -device cpu && run rm_cpu $RM -device cpu && run ppo_cpu $PPO -device cpu || finish

if run sft_cuda $SFT -device cuda -precision fp32; then
  compare "SFT (40 steps): -device cuda fp32 ends as -device cpu (weights, moments, losses)" sft_cpu sft_cuda
  if run sft_cuda2 $SFT -device cuda; then
    check "SFT on cuda twice: the same bits (weights, moments, losses; h5diff without tolerance)" \
      bash -c "h5diff -q $d/sft_cuda/final.h5 $d/sft_cuda2/final.h5 /policy /policy && h5diff -q $d/sft_cuda/run.h5 $d/sft_cuda2/run.h5 /metrics/loss /metrics/loss"
  fi
fi
if run rm_cuda $RM -device cuda; then compare "reward model (pairs generated on the device, 10 steps): cuda fp32 as cpu" rm_cpu rm_cuda; fi
if run ppo_cuda $PPO -device cuda; then compare "PPO (3 iterations, 4 models, generation with the KV cache): cuda fp32 as cpu, rollouts included" ppo_cpu ppo_cuda; fi
if run grpo_cpu $PPO -algo grpo -rollout_group 4 -device cpu && run grpo_cuda $PPO -algo grpo -rollout_group 4 -device cuda; then
  compare "GRPO (3 iterations, groups of 4, no critic): cuda fp32 as cpu, rollouts included" grpo_cpu grpo_cuda
fi
if run long_cpu $LONG -device cpu && run long_cuda $LONG -device cuda; then
  compare "SFT of a LLaMA model (GQA 4:2) on sequences of up to 303 tokens (the tiled attention's three query blocks): cuda fp32 as cpu" long_cpu long_cuda
fi
# 2 ranks on the one GPU (on a machine of several GPUs they get one each,
# and NCCL: test_nccl checks that path)
shared() {
  local what=$1 name=$2; shift 2
  if "$MPIEXEC" $MPIEXEC_FLAGS -n 2 env OMP_NUM_THREADS=1 "$BIN/rlfuse" $PPO -device cuda -output_dir $d/$name "$@" >$d/$name.log 2>&1; then
    compare "$what ($(grep -c '^# comm: ranks share a GPU' $d/$name.log) note that ranks share a GPU)" ppo_cuda $name
  else not_ok "$what: the run failed"; tail -3 $d/$name.log | sed 's/^/# /'; fi
}
if [ "$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')" = 1 ]; then
  shared "PPO on 2 ranks sharing the GPU, tp 2: as on 1 rank" shared_tp2 -actor_gen_tp 2 -ref_inf_tp 2 -rew_inf_tp 2 -critic_inf_tp 2 -actor_train_tp 2 -critic_train_tp 2
  shared "PPO on 2 ranks sharing the GPU, disaggregated: as on 1 rank" shared_disagg -placement disaggregate
else
  why="this machine has $(nvidia-smi -L 2>/dev/null | grep -c '^GPU ') GPUs, so the ranks would not share one"
  skip "PPO on 2 ranks sharing the GPU, tp 2: $why"
  skip "PPO on 2 ranks sharing the GPU, disaggregated: $why"
fi

# bf16: finite, falling, and near fp32 (the mean SFT loss of the last 10
# steps within 10% of the cpu run's: bf16 rounding changes the trajectory,
# not the learning)
if run sft_bf16 $SFT -device cuda -precision bf16; then
  check "SFT in bf16: finite losses that fall, the last 10 steps' mean within 10% of fp32's" "$PYTHON" -c "
import h5py, numpy as np
b = h5py.File('$d/sft_bf16/run.h5', 'r')['metrics/loss'][()]
f = h5py.File('$d/sft_cpu/run.h5', 'r')['metrics/loss'][()]
assert np.isfinite(b).all() and len(b) == 40, b
assert b[-10:].mean() < b[0], (b[0], b[-10:])
assert abs(b[-10:].mean() - f[-10:].mean()) <= 0.1 * f[-10:].mean(), (b[-10:].mean(), f[-10:].mean())"
fi
if run ppo_bf16 $PPO -device cuda -precision bf16; then
  check "PPO in bf16: the 3 iterations' metrics finite wherever the cpu run's are" "$PYTHON" -c "
import h5py, numpy as np
b, f = h5py.File('$d/ppo_bf16/run.h5', 'r')['metrics'], h5py.File('$d/ppo_cpu/run.h5', 'r')['metrics']
bad = [k for k in f if k not in b or b[k].shape != f[k].shape or (np.isfinite(f[k][()]) & ~np.isfinite(b[k][()])).any()]
assert not bad and len(b['actor_loss'][()]) == 3, bad"
fi
finish
