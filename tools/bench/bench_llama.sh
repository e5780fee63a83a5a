#!/usr/bin/env bash
# The LLaMA family on this CPU at SmolLM2-135M's shape (`make bench`,
# docs/benchmarks.md "The LLaMA family on CPU"), each pair side by side in
# one run, at 1 thread and at every core:
#  - training and forward tokens/s: tools/bench_model -size smollm2 against
#    PyTorch's transformers LlamaForCausalLM (tools/bench/bench_torch_llama.py),
#    B 4 x T 128, float32;
#  - decode tokens/s: tools/bench_decode -size smollm2 (random weights of the
#    shape, plain sampling) at 1 and 16 concurrent sequences against
#    llama.cpp on the real SmolLM2 weights in F32 (tools/bench/bench_llamacpp.sh;
#    its binaries come from tools/bench/llamacpp_build.sh), with the memory-
#    bandwidth roofline of batch 1 (every weight read once per token, the
#    bandwidth a STREAM triad measures).
# Skips a baseline (saying so) when transformers or llama.cpp is missing.
# Prints machine-readable lines; compare ratios only from one run on an idle
# machine.
set -u
cd "$(dirname "$0")/../.."
BIN=${BIN:-bin}; PYTHON=${PYTHON:-/usr/bin/python3}
HF_PY="${RLFUSE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/rlfuse}/python"
echo "# bench_llama: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'), $(date -u +%Y-%m-%dT%H:%MZ), load $(cut -d' ' -f1-3 /proc/loadavg)"
have_hf=0; PYTHONPATH="$HF_PY" "$PYTHON" -c "import torch, transformers" 2>/dev/null && have_hf=1
[ $have_hf = 1 ] || echo "# transformers not importable from $HF_PY (make deps): the PyTorch baseline is skipped"
# PyTorch links the same OpenBLAS: it runs with the kernels rlfuse selected
# (src/sys/blascore.c; on a CPU OpenBLAS does not recognise they differ from
# the default, whose line follows as well)
core=$(OMP_NUM_THREADS=1 "$BIN/bench_model" -size 1M -B 1 -T 8 -iters 1 -warmup 0 | sed -n 's/^# bench_model openblas_core=//p')
for threads in 1 $(nproc); do
  OMP_NUM_THREADS=$threads OPENBLAS_NUM_THREADS=$threads "$BIN/bench_model" -size smollm2 -B 4 -T 128 -iters 3 -warmup 1 | grep -v '^#'
  [ $have_hf = 1 ] || continue
  OMP_NUM_THREADS=$threads OPENBLAS_CORETYPE=$core PYTHONPATH="$HF_PY" "$PYTHON" tools/bench/bench_torch_llama.py --threads $threads --B 4 --T 128 --iters 3 --warmup 1 2>/dev/null | sed "s/\$/ openblas_core=$core/"
  OMP_NUM_THREADS=$threads PYTHONPATH="$HF_PY" "$PYTHON" tools/bench/bench_torch_llama.py --threads $threads --B 4 --T 128 --iters 3 --warmup 1 2>/dev/null | sed 's/$/ openblas_core=default/'
done
for threads in 1 $(nproc); do
  for conc in 1 16; do
    OMP_NUM_THREADS=$threads "$BIN/bench_decode" -size smollm2 -concurrency $conc -prompt 8 -max_new 64 -iters 3 -warmup 1 -full_length false -measure_bw
  done
done
LLAMACPP_THREADS="1 $(nproc)" bash tools/bench/bench_llamacpp.sh || echo "# llama.cpp baseline skipped (tools/bench/llamacpp_build.sh builds it)"
