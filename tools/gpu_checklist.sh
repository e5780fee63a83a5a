#!/usr/bin/env bash
# The GPU checklist (docs/benchmarks.md, "GPU checklist") in one command, on a
# machine with an NVIDIA GPU:
#   suite     the suite's CUDA items with RLFUSE_REQUIRE_CUDA=1, so that none
#             may skip: test_cuda_gen (the engine's resident steps and graphs), test_cuda (every op, the sampler included, against the cpu backend, fp32 and
#             bf16), test_golden on cuda (the model against PyTorch's tensors,
#             fp32 and bf16), test_nccl on 2 ranks, scenarios/cuda.sh (SFT,
#             RM and PPO on cuda against cpu, and on 2 ranks sharing the GPU)
#   sanitize  compute-sanitizer memcheck over test_cuda and test_golden, and
#             racecheck over test_golden fp32 (where the runtime allows it)
#   bench     tools/bench/bench_gpu.sh (its parts: BENCH_PARTS, default all)
#   targets   tools/bench/gpu_targets.sh: the GPU targets (decode at SmolLM2's and
#             Qwen2.5-0.5B's and 1.5B's shapes, a GRPO step at the first two),
#             each beside its baseline (transformers' generate, TRL's
#             GRPOTrainer), one `summary target=...` line each; not in the
#             default set (about TARGET_BUDGET seconds, 300)
#   profile   bench_decode's steps (PROFILE_SIZES, default smollm2 qwen05;
#             bf16; PROFILE_CONC sequences, default 1 and 64) under nsys (the
#             kernels' summed time and count, the API calls) or, without it,
#             ncu (PROFILE_LAUNCHES kernels after PROFILE_SKIP, each one's
#             time, with the caches flushed before each unless PROFILE_CACHE
#             is none); profile.log; not in the default set
#
#   bash tools/gpu_checklist.sh [suite] [sanitize] [bench] [targets] [profile]   (none named: the first three)
#
# With BUNDLE=DIR (made here by tools/gpu_bundle.sh DIR) the programs and
# libraries come from the bundle; else from BIN (bin) of a build. Each part
# logs to OUT_DIR (suite.log, sanitize.log, bench_gpu.log; default a new
# /tmp/gpu_checklist.*; targets.log); SANITIZE_TIMEOUT (seconds for each sanitizer run,
# 240) and STEP_TIMEOUT (bench_gpu.sh's, 300) bound the slow parts. Exits 1
# if any part failed. SUITE_ITEMS narrows the suite part (run_tests.sh's
# names; default every CUDA item above). Without a GPU it prints one line and exits 0.
set -u
cd "$(dirname "$0")/.." || exit 2
if ! nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
  echo "# gpu_checklist: no NVIDIA GPU here (nvidia-smi lists none); nothing run"
  exit 0
fi
parts=${*:-suite sanitize bench}
for p in $parts; do
  case $p in suite | sanitize | bench | targets | profile) ;; *) echo "gpu_checklist: error: unknown part '$p' (choose suite, sanitize, bench, targets, profile)" >&2; exit 2 ;; esac
done
has() { case " $parts " in *" $1 "*) return 0 ;; esac; return 1; }
PYTHON=${PYTHON:-$(for py in python3 /usr/bin/python3; do "$py" -c 'import h5py, numpy' 2>/dev/null && { command -v "$py"; break; }; done)}
export PYTHON
if [ -n "${BUNDLE:-}" ]; then
  . tools/gpu_bundle.sh
  gpu_bundle_use "$BUNDLE" || exit 2
  trap gpu_bundle_cleanup EXIT
fi
export BIN=${BIN:-bin}
OUT_DIR=${OUT_DIR:-$(mktemp -d /tmp/gpu_checklist.XXXXXX)}
mkdir -p "$OUT_DIR"
fail=0
echo "# gpu_checklist $(date -u +%Y-%m-%dT%H:%M:%SZ) rlfuse ${RLFUSE_REVISION:-$(git rev-parse --short=12 HEAD 2>/dev/null)}: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | head -n 1); BIN=$BIN; PYTHON=$PYTHON; logs in $OUT_DIR"

if has suite; then
  # shellcheck disable=SC2086
  RLFUSE_REQUIRE_CUDA=1 OMP_NUM_THREADS=${OMP_NUM_THREADS:-4} regression/run_tests.sh ${SUITE_ITEMS:-test_cuda test_cuda_gen 'test_golden*' 'test_nccl*' cuda} 2>&1 | tee "$OUT_DIR/suite.log"
  [ "${PIPESTATUS[0]}" = 0 ] || fail=1
fi

if has sanitize; then
  : >"$OUT_DIR/sanitize.log"
  # sanitize TOOL PROGRAM ARGS...: one program under one tool, its output to
  # sanitize.log and one ok/not ok line to both; a reported error, a failing
  # check or a timeout fails the part
  sanitize() {
    local tool=$1 out rc line; shift
    out=$(timeout "${SANITIZE_TIMEOUT:-240}" compute-sanitizer --tool "$tool" --error-exitcode 86 "$@" 2>&1); rc=$?
    printf '%s\n' "$out" >>"$OUT_DIR/sanitize.log"
    if [ $rc = 0 ]; then line="ok - compute-sanitizer $tool ${*##*/}: $(printf '%s\n' "$out" | grep -m1 -E 'ERROR SUMMARY|RACECHECK SUMMARY' | sed 's/^=* *//')"
    else
      line="not ok - compute-sanitizer $tool ${*##*/}: exit $rc$([ $rc = 124 ] && echo " (timed out)"); $(printf '%s\n' "$out" | grep -m1 -E 'ERROR SUMMARY|Invalid|Race|not ok' | cut -c1-200)"
      fail=1
    fi
    echo "$line" | tee -a "$OUT_DIR/sanitize.log"
  }
  if ! command -v compute-sanitizer >/dev/null; then
    echo "not ok - compute-sanitizer not on the PATH: sanitize not run" | tee -a "$OUT_DIR/sanitize.log"
    fail=1
  else
    sanitize memcheck "$BIN/test_golden" regression/golden cuda fp32
    sanitize memcheck "$BIN/test_golden" regression/golden cuda bf16
    sanitize racecheck "$BIN/test_golden" regression/golden cuda fp32
    sanitize memcheck "$BIN/test_cuda"
    sanitize memcheck "$BIN/test_cuda_gen"
  fi
fi

if has bench; then
  # shellcheck disable=SC2086
  OUT_DIR=$OUT_DIR BUNDLE= bash tools/bench/bench_gpu.sh ${BENCH_PARTS:-} || fail=1
fi

if has targets; then
  tdata=${TARGET_DATA:-${BUNDLE:+$BUNDLE/targets}} # the bundle's data; its programs are on the PATH already
  OUT_DIR=$OUT_DIR BUNDLE='' TARGET_DATA=$tdata bash tools/bench/gpu_targets.sh || fail=1
fi
if has profile; then
  : >"$OUT_DIR/profile.log"
  nsys=$(command -v nsys || ls /usr/local/cuda*/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys 2>/dev/null | head -n 1)
  ncu=$(command -v ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -n 1)
  for s in ${PROFILE_SIZES:-smollm2 qwen05}; do
    for c in ${PROFILE_CONC:-1 64}; do
      rep=$OUT_DIR/prof_${s}_$c
      run=("$BIN/bench_decode" -device cuda -precision bf16 -size "$s" -concurrency "$c" -prompt 8 -max_new "${PROFILE_STEPS:-16}" -iters 1 -warmup 0)
      echo "## profile size=$s conc=$c bf16 (${PROFILE_STEPS:-16} new tokens: prefill, capture, replays)" | tee -a "$OUT_DIR/profile.log"
      if [ -n "$nsys" ]; then # graphs traced node by node, so that each kernel of a replayed step is counted
        timeout 120 "$nsys" profile --trace=cuda --cuda-graph-trace=node --force-overwrite=true -o "$rep" "${run[@]}" >>"$OUT_DIR/profile.log" 2>&1 &&
          for r in cuda_gpu_kern_sum cuda_api_sum; do "$nsys" stats --report $r --format csv "$rep.nsys-rep" 2>&1 | head -n 30; done | tee -a "$OUT_DIR/profile.log"
      elif [ -n "$ncu" ]; then # each kernel of PROFILE_LAUNCHES after the first PROFILE_SKIP, its time at the board's own clocks
        timeout 180 "$ncu" --graph-profiling node --clock-control none --cache-control "${PROFILE_CACHE:-all}" --metrics gpu__time_duration.sum \
          --launch-skip "${PROFILE_SKIP:-2000}" --launch-count "${PROFILE_LAUNCHES:-600}" --print-summary per-kernel --csv "${run[@]}" 2>&1 |
          grep -v '^==PROF==' | tee -a "$OUT_DIR/profile.log" | tail -n 40
      else
        echo "not ok - neither nsys nor ncu found: profile not run" | tee -a "$OUT_DIR/profile.log"; fail=1; break 2
      fi
      rm -f "$rep".*
    done
  done
fi
echo "# gpu_checklist: $([ $fail = 0 ] && echo 'every part passed' || echo 'some part FAILED') (logs in $OUT_DIR)"
exit $fail
