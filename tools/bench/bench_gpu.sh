#!/usr/bin/env bash
# The GPU measurements in one command, on a machine with an NVIDIA GPU
# (docs/benchmarks.md, "GPU: how to measure"):
#   model       GPT-2 124M training and forward tokens/s and MFU, random init,
#               B 8 x T 1024, -precision bf16 and fp32 (bin/bench_model)
#   torch       PyTorch eager on the same shape and GPU (tools/bench/bench_torch.py:
#               the reference model, plus SDPA attention; TORCH_COMPILE=1 adds torch.compile)
#   decode      decode tokens/s at 1, 8 and 64 concurrent samples against the
#               memory-bandwidth roofline (bin/bench_decode)
#   quickstart  input/quickstart.deck's wall time with -device cuda and -device cpu
# then one `summary` line per target. Every result is a machine-readable
# line of key=value fields; lines starting with '#' are comments.
#
#   bash tools/bench/bench_gpu.sh [model] [torch] [decode] [quickstart]    (none named: all four)
#
# Without a GPU it prints one line saying so and exits 0. Variables: BIN (bin),
# PYTHON (default: the first of python3, /usr/bin/python3 whose torch sees
# the GPU), OMP_NUM_THREADS (default: all cores), OUT_DIR (bench_gpu.log, the
# quickstart logs, and the quickstart runs' outputs under runs/; default a
# new temporary directory), STEP_TIMEOUT (seconds for each program run,
# 300), PEAK_BF16_TFLOPS,
# PEAK_FP32_TFLOPS, HBM_GBS (override the datasheet figures assumed from
# the GPU's name), TORCH_COMPILE (1: also torch.compile, bf16; minutes),
# BUNDLE (a directory made by tools/gpu_bundle.sh, for a machine that cannot
# build rlfuse: run its programs with its libraries).
set -u
cd "$(dirname "$0")/../.." || exit 2
BIN=${BIN:-bin}
PROGS="bench_model bench_decode rlfuse"
cores=$(getconf _NPROCESSORS_ONLN) # nproc would answer OMP_NUM_THREADS

gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1)
if [ -z "$gpu" ]; then
  echo "# bench_gpu: no NVIDIA GPU here (nvidia-smi lists none); nothing measured"
  exit 0
fi

parts=${*:-model torch decode quickstart}
for p in $parts; do
  case $p in model | torch | decode | quickstart) ;; *) echo "bench_gpu: error: unknown part '$p' (choose model, torch, decode, quickstart)" >&2; exit 2 ;; esac
done
if [ -n "${BUNDLE:-}" ]; then
  . tools/gpu_bundle.sh
  gpu_bundle_use "$BUNDLE" || exit 2
  trap gpu_bundle_cleanup EXIT
fi
for prog in $PROGS; do
  [ -x "$BIN/$prog" ] || { echo "bench_gpu: error: $BIN/$prog not found; build first (make BIN=$BIN all bench-build, with nvcc on the PATH) or pass BUNDLE" >&2; exit 2; }
  missing=$(ldd "$BIN/$prog" 2>&1 | grep 'not found' | awk '{ print $1 }' | tr '\n' ' ')
  [ -z "$missing" ] || { echo "bench_gpu: error: $BIN/$prog cannot load: $missing(LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-})" >&2; exit 2; }
done
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$cores}
STEP_TIMEOUT=${STEP_TIMEOUT:-300}
OUT_DIR=${OUT_DIR:-$(mktemp -d /tmp/bench_gpu.XXXXXX)}
mkdir -p "$OUT_DIR"
LOG=$OUT_DIR/bench_gpu.log
: >"$LOG"
fail=0

# Datasheet peaks (dense, no sparsity) and HBM bandwidth by board; the
# NVIDIA H100 and H200 datasheets. fp32 is the non-tensor-core rate: rlfuse's
# fp32 matmuls are true fp32 (no TF32), and so are PyTorch's here.
case "$gpu" in
  *H200*NVL*) board="H200 NVL"; bf16=835.5; fp32=60; hbm=4800 ;;
  *H200*) board="H200 SXM"; bf16=989.4; fp32=66.9; hbm=4800 ;;
  *H100*NVL*) board="H100 NVL"; bf16=835.5; fp32=60; hbm=3900 ;;
  *H100*PCIe*) board="H100 PCIe"; bf16=756.5; fp32=51.2; hbm=2000 ;;
  *H100*) board="H100 SXM"; bf16=989.4; fp32=66.9; hbm=3350 ;;
  *) board="unknown"; bf16=0; fp32=0; hbm=0 ;;
esac
source=datasheet
[ -z "${PEAK_BF16_TFLOPS:-}${PEAK_FP32_TFLOPS:-}${HBM_GBS:-}" ] || source=datasheet+environment
bf16=${PEAK_BF16_TFLOPS:-$bf16}; fp32=${PEAK_FP32_TFLOPS:-$fp32}; hbm=${HBM_GBS:-$hbm}

say() { echo "$*" | tee -a "$LOG"; }
# runs a command, its output to the terminal and the log; a failure is
# recorded and the remaining parts still run
step() {
  timeout "$STEP_TIMEOUT" "$@" 2>&1 | tee -a "$LOG"
  local rc=${PIPESTATUS[0]}
  [ "$rc" != 124 ] || say "# bench_gpu: timed out after $STEP_TIMEOUT s (STEP_TIMEOUT)"
  [ "$rc" = 0 ] || { say "# bench_gpu: FAILED (exit $rc): $*"; fail=1; }
}
field() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" | head -n 1; } # field NAME < line
field_na() { local v; v=$(field "$1"); echo "${v:-NA}"; }

say "# bench_gpu $(date -u +%Y-%m-%dT%H:%M:%SZ) rlfuse ${RLFUSE_REVISION:-$(git rev-parse --short=12 HEAD 2>/dev/null)$(git diff --quiet HEAD 2>/dev/null || echo -dirty)}"
say "# $(nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv,noheader 2>/dev/null | head -n 1)"
say "# host: $cores cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'); OMP_NUM_THREADS=$OMP_NUM_THREADS; logs in $OUT_DIR"
say "gpu name=\"$gpu\" assumed=\"$board\" peak_bf16_tflops=$bf16 peak_fp32_tflops=$fp32 hbm_gbs=$hbm source=$source"
[ "$board" != unknown ] || say "# unknown board: no MFU or roofline unless PEAK_BF16_TFLOPS, PEAK_FP32_TFLOPS and HBM_GBS are set"

has() { case " $parts " in *" $1 "*) return 0 ;; esac; return 1; }

if has model; then
  for prec in bf16 fp32; do
    peak=$bf16; [ $prec = fp32 ] && peak=$fp32
    step "$BIN/bench_model" -device cuda -precision $prec -size 124M -B 8 -T 1024 -iters 10 -warmup 3 -peak_tflops "$peak"
  done
fi

if has torch; then
  PY=
  for py in ${PYTHON:-} python3 /usr/bin/python3; do
    if "$py" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then PY=$py; break; fi
  done
  if [ -z "$PY" ]; then
    say "# no Python whose torch sees the GPU (tried ${PYTHON:-} python3 /usr/bin/python3): PyTorch not measured"
  else
    for prec in bf16 fp32; do
      peak=$bf16; [ $prec = fp32 ] && peak=$fp32
      extra=; [ "${TORCH_COMPILE:-0}" = 1 ] && [ $prec = bf16 ] && extra=--compile
      step "$PY" tools/bench/bench_torch.py --device cuda --dtype $prec --sizes 124M --B 8 --T 1024 --threads "$OMP_NUM_THREADS" \
        --warmup 3 --iters 10 --peak_tflops "$peak" --sdpa $extra
    done
  fi
fi

if has decode; then
  # fp32 and bf16 as the CPU table measures (every sample runs 64 tokens),
  # then fp32 with plain sampling (no allowed sets recorded on the host)
  step "$BIN/bench_decode" -device cuda -precision fp32 -size 124M -concurrency 0 -prompt 8 -max_new 64 -iters 3 -warmup 1 -hbm_gbs "$hbm"
  step "$BIN/bench_decode" -device cuda -precision bf16 -size 124M -concurrency 0 -prompt 8 -max_new 64 -iters 3 -warmup 1 -hbm_gbs "$hbm"
  step "$BIN/bench_decode" -device cuda -precision fp32 -size 124M -concurrency 0 -prompt 8 -max_new 64 -iters 3 -warmup 1 -hbm_gbs "$hbm" -full_length false
fi

# one quickstart run: its own wall time, and the stage times and results
# that the pipeline's summary prints
quickstart() {
  local dev=$1 dir=$OUT_DIR/runs/quickstart_$1 qlog=$OUT_DIR/quickstart_$1.log t0 t1 rc
  rm -rf "$dir"
  t0=$(date +%s.%N)
  timeout "$STEP_TIMEOUT" "$BIN/rlfuse" -options_file input/quickstart.deck -device "$dev" -output_dir "$dir" >"$qlog" 2>&1
  rc=$?
  t1=$(date +%s.%N)
  if [ $rc != 0 ]; then
    [ "$rc" != 124 ] || say "# bench_gpu: timed out after $STEP_TIMEOUT s (STEP_TIMEOUT)"
    say "# bench_gpu: FAILED (exit $rc): quickstart -device $dev; last lines of $qlog:"
    tail -n 5 "$qlog" | sed 's/^/#   /' | tee -a "$LOG"
    fail=1
    return
  fi
  local wall gold
  wall=$(grep 'wall time' "$qlog" | tail -n 1)
  gold=$(grep 'gold score' "$qlog" | tail -n 1)
  say "quickstart device=$dev threads=$OMP_NUM_THREADS wall_s=$(echo "$t0 $t1" | awk '{printf "%.1f", $2 - $1}')" \
    "sft_s=$(echo "$wall" | sed -n 's/.*SFT \([0-9.]*\) s.*/\1/p') rm_s=$(echo "$wall" | sed -n 's/.*RM \([0-9.]*\) s.*/\1/p')" \
    "ppo_s=$(echo "$wall" | sed -n 's/.*PPO \([0-9.]*\) s.*/\1/p') total_s=$(echo "$wall" | sed -n 's/.*total \([0-9.]*\) s.*/\1/p')" \
    "gold_sft=$(echo "$gold" | sed -n 's/.*SFT policy \([-0-9.]*\).*/\1/p') gold_ppo=$(echo "$gold" | sed -n 's/.*PPO policy \([-0-9.]*\).*/\1/p')"
}
if has quickstart; then
  quickstart cuda
  quickstart cpu
fi

# The GPU targets (docs/benchmarks.md), from the lines above (NA where a part did not run).
get() { grep -E "$1" "$LOG" | grep -v '^#' | head -n 1 | field "$2"; }
ratio() { awk -v a="${1:-}" -v b="${2:-}" 'BEGIN { if (a == "" || b == "" || b + 0 == 0) print "NA"; else printf "%.3f", a / b }'; }
atleast() { awk -v a="${1:-}" -v t="$2" 'BEGIN { if (a == "" || a == "NA") print "NA"; else print (a + 0 >= t ? "yes" : "no") }'; }
tr=$(get '^rlfuse size=124M .*mode=train .*precision=bf16' tok_per_s)
mfu=$(get '^rlfuse size=124M .*mode=train .*precision=bf16' mfu)
te=$(get '^torch size=124M .*mode=train .*precision=bf16 .*impl=eager' tok_per_s)
ts=$(get '^torch size=124M .*mode=train .*precision=bf16 .*impl=sdpa' tok_per_s)
say "summary train size=124M precision=bf16 rlfuse_tok_per_s=${tr:-NA} mfu=${mfu:-NA} mfu_target=0.40 mfu_met=$(atleast "$mfu" 0.40)" \
  "torch_eager_tok_per_s=${te:-NA} vs_torch_eager=$(ratio "$tr" "$te") faster_than_eager=$(atleast "$(ratio "$tr" "$te")" 1)" \
  "torch_sdpa_tok_per_s=${ts:-NA} vs_torch_sdpa=$(ratio "$tr" "$ts")"
for c in 1 64; do # the fp32 run in the CPU table's setting (every sample runs 64 tokens)
  line=$(grep -E "^rlfuse-decode size=124M .* conc=$c .*precision=fp32" "$LOG" | grep -v full_length= | head -n 1)
  rf=$(echo "$line" | field roofline_frac)
  say "summary decode size=124M conc=$c precision=fp32 decode_tok_per_s=$(echo "$line" | field_na decode_tok_per_s)" \
    "roofline_tok_per_s=$(echo "$line" | field_na roofline_tok_per_s) roofline_frac=${rf:-NA}" \
    "fwd_roofline_frac=$(echo "$line" | field_na fwd_roofline_frac)$([ $c = 1 ] && echo " target=0.60 met=$(atleast "$rf" 0.60)")"
done
qg=$(get '^quickstart device=cuda' wall_s); qc=$(get '^quickstart device=cpu' wall_s)
say "summary quickstart cuda_wall_s=${qg:-NA} cpu_wall_s=${qc:-NA} cpu_over_cuda=$(ratio "$qc" "$qg")"
[ $fail = 0 ] || say "# bench_gpu: some steps FAILED (see above)"
exit $fail
