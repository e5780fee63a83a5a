#!/usr/bin/env bash
# `make bench`: CPU throughput of rlfuse's GPT against PyTorch on the same
# shapes, thread counts and machine, then the generation engine's decode
# throughput (tools/bench/bench_decode.c), reallocation, placements, the fused
# schedule optimizer (tools/bench/bench_schedule.sh) and the fused PPO training stage
# on 2 ranks (tools/bench/bench_fuse_train.sh), and the LLaMA family at SmolLM2-135M's
# shape against PyTorch and llama.cpp (tools/bench/bench_llama.sh). Prints machine-readable lines; the
# results are kept in docs/benchmarks.md.
set -u
cd "$(dirname "$0")/../.."
BIN=${BIN:-bin}; PYTHON=${PYTHON:-/usr/bin/python3}
echo "# machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'), $(date -u +%Y-%m-%d)"
echo "# rlfuse $(git rev-parse --short HEAD 2>/dev/null)"
have_torch=0; "$PYTHON" -c "import torch" 2>/dev/null && have_torch=1
for threads in 1 $(nproc); do
  for size in 1M:128 10M:256; do
    s=${size%%:*}; T=${size##*:}
    OMP_NUM_THREADS=$threads OPENBLAS_NUM_THREADS=$threads "$BIN/bench_model" -size $s -B 8 -T $T -iters 10
    if [ $have_torch = 1 ]; then
      OMP_NUM_THREADS=$threads "$PYTHON" tools/bench/bench_torch.py --sizes $s --B 8 --T $T --threads $threads --iters 10
    fi
  done
done
[ $have_torch = 1 ] || echo "# PyTorch not found (apt-get install python3-torch) - only rlfuse measured"
# decode throughput of the generation engine: 1, 8 and 64 concurrent samples
for threads in 1 $(nproc); do
  OMP_NUM_THREADS=$threads OPENBLAS_NUM_THREADS=$threads "$BIN/bench_decode" -size all -prompt 8 -max_new 64 -iters 3
done
# parameter reallocation: time against bytes moved for layout pairs (2 ranks,
# one per core; 4 ranks adds the 4-rank pairs, oversubscribed on 2 cores)
MPIEXEC=${MPIEXEC:-mpiexec}; MPIEXEC_FLAGS=${MPIEXEC_FLAGS--bind-to none}
for np in 2 4; do
  $MPIEXEC $MPIEXEC_FLAGS -n $np env OMP_NUM_THREADS=1 "$BIN/bench_realloc" -iters 5
done
bash tools/bench/bench_placement.sh
bash tools/bench/bench_schedule.sh
bash tools/bench/bench_fusion.sh
bash tools/bench/bench_fuse_train.sh
bash tools/bench/bench_llama.sh
