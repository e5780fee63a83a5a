#!/usr/bin/env bash
# The fused actor-critic schedule optimizer (-mode schedule) on the 12 instances
# of the RLHFuse paper's public solver: for each, the lower bound, the
# published result, ours, the search time, the peak activation memory per
# rank against sequential 1F1B's (in micro-batches: -sched_mem0/1 are 1) and
# the speed-up over the sequential schedule (actor 1F1B, then critic 1F1B).
# Prints a markdown table (docs/benchmarks.md). THREADS (default: nproc)
# sets OMP_NUM_THREADS; the load average is printed since search time is
# wall-clock on a shared machine.
set -u
cd "$(dirname "$0")/../.."
BIN=${BIN:-bin}; PYTHON=${PYTHON:-/usr/bin/python3}; THREADS=${THREADS:-$(nproc)}
MPIEXEC=${MPIEXEC:-mpiexec}; MPIEXEC_FLAGS=${MPIEXEC_FLAGS--bind-to none}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
echo "# schedule search: $THREADS threads, load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "| pp0 | pp1 | m0 | m1 | f0 | f1 | lower bound | published | rlfuse | gap | search s (wall / CPU) | peak mem (1F1B) | speed-up vs sequential |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|"
fail=0
while read -r pp0 pp1 m0 m1 f0 f1 pub; do
  log=$tmp/$pp0-$pp1-$m0.log
  if ! OMP_NUM_THREADS=$THREADS $MPIEXEC $MPIEXEC_FLAGS -n 1 "$BIN/rlfuse" -mode schedule -sched_pp0 $pp0 -sched_pp1 $pp1 -sched_m0 $m0 -sched_m1 $m1 \
       -sched_f0 $f0 -sched_f1 $f1 -sched_output $tmp/s.h5 </dev/null >$log 2>&1; then
    echo "bench_schedule: ($pp0,$pp1,$m0,$m1,$f0,$f1) failed: $(tail -2 $log)" >&2; fail=1; continue
  fi
  secs=$(sed -n 's/.*search \([0-9.]*\) s (CPU \([0-9.]*\) s).*/\1 \/ \2/p' $log)
  "$PYTHON" - $tmp/s.h5 "$pp0 $pp1 $m0 $m1 $f0 $f1" $pub "$secs" <<'PY'
import sys, h5py
a = h5py.File(sys.argv[1], "r").attrs
mk, lb, seq = a["makespan"], a["lower_bound"], a["sequential_makespan"]
row = sys.argv[2].split() + [f"{lb:g}", sys.argv[3], f"{mk:g}", f"{100 * (mk / lb - 1):.2f}%", sys.argv[4],
      f"{max(a['peak_memory']):g} ({a['sequential_peak_memory']:g})", f"{seq / mk:.3f}x ({seq:g})"]
print("| " + " | ".join(row) + " |")
PY
done <<'EOF_INST'
8 4 32 16 5 4 708
8 4 16 8 5 4 372
8 4 8 4 5 4 225
8 8 32 32 5 2 702
8 8 16 16 5 2 366
8 8 8 8 5 2 225
16 8 64 32 2 2 618
16 8 32 16 2 2 330
16 8 16 8 2 2 186
16 16 64 64 2 1 613
16 16 32 32 2 1 318
16 16 16 16 2 1 186
EOF_INST
echo "# load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
exit $fail
