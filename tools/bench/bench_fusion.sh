#!/usr/bin/env bash
# Fusion of generation and inference on the long-tailed workload
# (input/longtail.deck, docs/fusion.md): the generation+inference stage of a
# PPO iteration on 2 ranks (one per core, one thread each), unfused and
# streamed, with each rank's idle fraction in that stage and the limit (all
# inference hidden behind generation). The variants run in turn, ROUNDS
# times each, so a busy machine slows them alike; per variant the median
# over its iterations after the first is printed:
#   fusion <variant> geninf_s <s> ratio <unfused/this> limit_s <s> of_limit <this/limit> idle0 <f> idle1 <f> gen_s <s> inf_s <s> [stream_msgs <n> stream_KiB <KiB> stream_send_ms <ms>] [rt <R_t> migrated <n> mig_KiB <KiB> mig_ms <ms>]
# Variants: colocated (no fusion, generation dp 2 then inference dp 2 on both
# ranks), split (no fusion, generation on rank 0, inference on rank 1),
# held (split, samples streamed but inference held until generation ends:
# the token-budget micro-batches without the overlap), stream (split,
# streamed), migrate_<R> (the colocated plan with -fuse_gen_inf migrate at
# R_t R, for R in RTS, default 0 0.05 0.1 0.2 0.3 0.5; R_t 0 streams into
# the co-located inference without migrating), migrate_auto (R_t auto);
# for the migrate rows the limit is the larger of a rank's generation time
# and half the two ranks' work (generation and inference evenly spread). The policy and reward model come from FIXTURE
# (a directory with sft/final.h5 and rm/final.h5, e.g. the output of
# `bin/rlfuse -options_file input/longtail.deck`), made here when absent
# (the deck's pipeline with one PPO iteration: about 8 minutes on 2 idle
# cores).
#   tools/bench/bench_fusion.sh [FIXTURE]       (part of `make bench`)
set -u
cd "$(dirname "$0")/../.."
BIN=${BIN:-bin}; PYTHON=${PYTHON:-/usr/bin/python3}
MPIEXEC=${MPIEXEC:-mpiexec}; MPIEXEC_FLAGS=${MPIEXEC_FLAGS--bind-to core}
ROUNDS=${ROUNDS:-2}; ITERS=${ITERS:-3}; TOKENS=${TOKENS:-256}; RTS=${RTS:-0 0.05 0.1 0.2 0.3 0.5}
d=$(mktemp -d "${TMPDIR:-/tmp}/rlfuse-bench-fusion.XXXXXX"); trap 'rm -rf "$d"' EXIT
fx=${1:-$d/fixture}
run() { local n=$1; shift; "$MPIEXEC" $MPIEXEC_FLAGS -n $n env OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 "$BIN/rlfuse" "$@"; }
if [ ! -f "$fx/sft/final.h5" ] || [ ! -f "$fx/rm/final.h5" ]; then
  echo "# making the fixture in $fx (input/longtail.deck's pipeline, one PPO iteration)"
  run 1 -options_file input/longtail.deck -ppo_iterations 1 -output_dir "$fx" >"$d/fixture.log" 2>&1 || { tail -3 "$d/fixture.log"; exit 1; }
fi
# the deck's options that PPO reads (task, generation, PPO settings)
DECK=$(grep -E '^-(seed|task_|gen_|ppo_|rollout_|actor_lr|critic_lr)' input/longtail.deck | tr '\n' ' ')
echo "# machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'), $(date -u '+%Y-%m-%d %H:%M') UTC, load:$(uptime | sed 's/.*load average://')"
echo "# rlfuse $(git rev-parse --short HEAD 2>/dev/null), ROUNDS=$ROUNDS ITERS=$ITERS TOKENS=$TOKENS (-fuse_tokens), 2 ranks ($MPIEXEC_FLAGS)"
P="$DECK -mode ppo -actor_checkpoint $fx/sft/final.h5 -reward_checkpoint $fx/rm/final.h5 -ppo_iterations $ITERS -ppo_eval_prompts 0 -ppo_minibatches 1"
SPLIT="-actor_gen_ranks 0 -ref_inf_ranks 1 -rew_inf_ranks 1 -critic_inf_ranks 1"
declare -A args=([colocated]="" [split]="$SPLIT" [held]="$SPLIT -fuse_gen_inf stream -fuse_tokens $TOKENS -fuse_hold" [stream]="$SPLIT -fuse_gen_inf stream -fuse_tokens $TOKENS")
variants="colocated split held stream"
for rt in $RTS auto; do
  args[migrate_$rt]="-fuse_gen_inf migrate -fuse_migrate_at $rt -fuse_tokens $TOKENS"
  variants="$variants migrate_$rt"
done
for k in $(seq $ROUNDS); do
  for v in $variants; do
    run 2 $P ${args[$v]} -output_dir $d/$v.$k >$d/$v.$k.log 2>&1 || { echo "# $v failed:"; tail -3 $d/$v.$k.log; exit 1; }
  done
done
"$PYTHON" - $d $ROUNDS $variants <<'PY'
import sys, h5py, numpy as np
d, rounds, variants = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
STAGE = {"generation", "ref_inference", "reward_inference", "critic_inference", "stream_drain", "migration"}
INF = {"ref_inference", "reward_inference", "critic_inference"}

def busy(iv):
    tot, last = 0.0, -np.inf
    for a, b in sorted(iv):
        a = max(a, last)
        if b > a: tot, last = tot + b - a, b
    return tot

rows = {}
for v in variants:
    per = []
    for k in range(1, rounds + 1):
        with h5py.File(f"{d}/{v}.{k}/run.h5", "r") as f:
            t = f["timeline"]; calls = str(t.attrs["calls"]).split()
            r, s, c, a, b = (t[x][()] for x in ("rank", "step", "call", "start", "end"))
            name = np.array([calls[i] for i in c])
            m = f["metrics"]
            for st in sorted(set(s))[1:]:  # the first iteration warms up
                sel = (s == st) & np.isin(name, list(STAGE))
                w0, w1 = a[sel].min(), b[sel].max()
                gen = [b[sel & (r == q) & (name == "generation")].sum() - a[sel & (r == q) & (name == "generation")].sum() for q in (0, 1)]
                inf = [(b - a)[sel & (r == q) & np.isin(name, list(INF))].sum() for q in (0, 1)]
                idle = [1 - busy(list(zip(a[sel & (r == q)], b[sel & (r == q)]))) / (w1 - w0) for q in (0, 1)]
                row = dict(geninf=w1 - w0, gen=max(gen), inf=sum(inf), idle0=idle[0], idle1=idle[1])
                # the limit: every inference hidden behind generation (or the reverse), the
                # work of each rank as measured in this run
                if v.startswith("migrate"):  # co-located and fused: the work spread evenly, never below a rank's decoding
                    row["limit"] = max(max(gen), (sum(gen) + sum(inf)) / 2)
                elif v == "colocated":
                    row["limit"] = max(gen[0] + inf[0], gen[1] + inf[1])
                else:
                    row["limit"] = max(max(gen), max(inf))
                if "stream_messages" in m:
                    i = list(f["metrics/step"][()]).index(st)
                    row.update(msgs=m["stream_messages"][i], kib=m["stream_bytes"][i] / 1024, send_ms=1e3 * f["timing/stream_send_max"][i])
                if "migrate_at" in m:
                    row.update(rt=m["migrate_at"][i], moved=m["migrate_samples"][i], mkib=m["migrate_bytes"][i] / 1024, mms=1e3 * f["timing/migrate_max"][i])
                per.append(row)
    rows[v] = {k: float(np.median([p[k] for p in per])) for k in per[0]}
base = rows["colocated"]["geninf"]
for v in variants:
    x = rows[v]
    extra = f" stream_msgs {x['msgs']:.0f} stream_KiB {x['kib']:.1f} stream_send_ms {x['send_ms']:.2f}" if "msgs" in x else ""
    if "rt" in x:
        extra += f" rt {x['rt']:.2f} migrated {x['moved']:.0f} mig_KiB {x['mkib']:.1f} mig_ms {x['mms']:.2f}"
    print(f"fusion {v} geninf_s {x['geninf']:.3f} ratio {base / x['geninf']:.2f} limit_s {x['limit']:.3f} of_limit {x['geninf'] / x['limit']:.2f} "
          f"idle0 {x['idle0']:.2f} idle1 {x['idle1']:.2f} gen_s {x['gen']:.3f} inf_s {x['inf']:.3f}{extra}")
print(f"# ratio: colocated (unfused) time over the variant's; split over stream {rows['split']['geninf'] / rows['stream']['geninf']:.2f}, held over stream (the overlap alone) {rows['held']['geninf'] / rows['stream']['geninf']:.2f}")
PY
echo "# load after:$(uptime | sed 's/.*load average://')"
