#!/usr/bin/env bash
# The cost model against measured runs on 2 ranks (one per core, one thread
# each): for each deck (input/quickstart.deck, input/longtail.deck) a
# profile is measured here (-mode profile), then for each plan below the
# deck's pipeline runs (short SFT and RM, whose quality does not matter for
# timing, then PPO) and the PPO stage's measured time per iteration and per
# call (run.h5 /timing/<stage>_max) is set beside the estimate from the
# profile (-mode profile -profile_file, the same plan options), iteration
# by iteration: each iteration after the first is estimated with its own
# rollout's prompt and response lengths, row by row (-cost_lengths
# rollouts:FILE:iter_K), and the means over those iterations are compared.
# The last plan, "searched", is the one -mode plan finds for 2 ranks from
# the profile and the colocated run's rollouts (-plan_time $PLAN_TIME, 20 s).
# Prints one line per plan and call:
#   plan <deck> <name> <what> measured <s> estimated <s> error <%> iterations <n>
# and the same with "steady" over only the iterations in which no rank's
# activation buffers grew (run.h5 /metrics/acts_grown_bytes 0: the cost
# model estimates the steady state, not the first touch of new pages);
# a summary line per deck and overall (median and worst |error| of the
# time per iteration), and per deck the searched plan's measured time
# against the best measured preset. Usage: tools/bench/bench_plan.sh [deck ...]
# (default both); PLANS="name ..." runs only those plans, ITERS the PPO
# iterations (6);
# REUSE=DIR (a KEEP=1 run's folder) estimates again from its profiles and
# runs, measuring only what is missing.
set -u
cd "$(dirname "$0")/../.."
BIN=${BIN:-bin}; PYTHON=${PYTHON:-/usr/bin/python3}
MPIEXEC=${MPIEXEC:-mpiexec}; MPIEXEC_FLAGS=${MPIEXEC_FLAGS--bind-to none}
ITERS=${ITERS:-6}; PLAN_TIME=${PLAN_TIME:-20}
d=${REUSE:-$(mktemp -d "${TMPDIR:-/tmp}/rlfuse-bench-plan.XXXXXX")}; [ -n "${KEEP:-}${REUSE:-}" ] || trap 'rm -rf "$d"' EXIT
run() { local n=$1; shift; "$MPIEXEC" $MPIEXEC_FLAGS -n $n env OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 "$BIN/rlfuse" "$@"; }
decks=("$@"); [ ${#decks[@]} -gt 0 ] || decks=(quickstart longtail)

# name|plan options; every plan is valid on 2 ranks for both decks' models
plans=(
  "colocate|-placement colocate"
  "interleave|-placement interleave"
  "disaggregate|-placement disaggregate"
  "split|-placement disaggregate -actor_gen_ranks 0 -ref_inf_ranks 1 -rew_inf_ranks 1 -critic_inf_ranks 1"
  "split+stream|-placement disaggregate -actor_gen_ranks 0 -ref_inf_ranks 1 -rew_inf_ranks 1 -critic_inf_ranks 1 -fuse_gen_inf stream"
  "colocate+migrate|-placement colocate -fuse_gen_inf migrate -fuse_migrate_at 0.5 -fuse_migrate_replicas 1"
  "train-pp2+fuse_train|-placement colocate -fuse_train 1 -actor_train_pp 2 -actor_train_mbs 4 -critic_train_mbs 2"
  "colocate-tp2|-placement colocate -actor_gen_dp 1 -actor_gen_tp 2 -ref_inf_dp 1 -ref_inf_tp 2 -rew_inf_dp 1 -rew_inf_tp 2 -critic_inf_dp 1 -critic_inf_tp 2 -actor_train_dp 1 -actor_train_tp 2 -critic_train_dp 1 -critic_train_tp 2"
  "colocate-train-pp2|-placement colocate -actor_train_dp 1 -actor_train_pp 2 -actor_train_mbs 2 -critic_train_dp 1 -critic_train_pp 2 -critic_train_mbs 2"
  "colocate-mbs2|-placement colocate -actor_train_mbs 2 -critic_train_mbs 2 -ref_inf_mbs 2 -rew_inf_mbs 2 -critic_inf_mbs 2"
  "colocate-zero1|-placement colocate -plan_zero1 1"
  "mixed-gen-tp2-train-dp2|-placement colocate -actor_gen_dp 1 -actor_gen_tp 2 -ref_inf_dp 1 -ref_inf_tp 2"
  "searched|-plan_file PLANFILE"
)

all=$d/all.txt; : >"$all"
for deck in "${decks[@]}"; do
  D="-options_file input/$deck.deck -seed 1234"
  shape=$(grep -E '^-policy_(n_layer|n_head|n_embd|vocab_size|n_positions) ' input/$deck.deck | sed 's/^-policy_/-reward_/' | tr '\n' ' ')
  [ -n "${REUSE:-}" ] && [ -s $d/$deck.h5 ] || run 2 $D -mode profile -profile_output $d/$deck.h5 >$d/$deck.profile.log 2>&1 || { echo "# profile of $deck failed: $(tail -2 $d/$deck.profile.log)"; continue; }
  echo "# $deck: $(grep 'measured in' $d/$deck.profile.log)"
  for p in "${plans[@]}"; do
    name=${p%%|*}; opts=${p#*|}; o=$d/$deck.$name
    [ -z "${PLANS:-}" ] || [[ " $PLANS " == *" $name "* ]] || continue
    if [ "$name" = searched ]; then
      # the search, from this machine's profile and the colocated run's
      # rollouts (the same in every layout: draws are keyed by row)
      roll=$d/$deck.colocate/ppo/rollouts.h5
      [ -s "$roll" ] || { echo "# $deck searched: needs the colocate run's rollouts"; continue; }
      opts=${opts/PLANFILE/$d/$deck.plan.h5}
      [ -n "${REUSE:-}" ] && [ -s $d/$deck.plan.h5 ] || run 1 $D -mode plan -plan_ranks 2 -cost_profile $d/$deck.h5 $shape -cost_lengths rollouts:$roll -plan_time $PLAN_TIME -plan_output $d/$deck.plan.h5 >$d/$deck.plan.log 2>&1 ||
        { echo "# $deck: the search failed: $(tail -1 $d/$deck.plan.log)"; continue; }
      echo "# $deck searched: $(grep -m1 '^estimated' $d/$deck.plan.log)"
    fi
    if [ -n "${REUSE:-}" ] && [ -s $o/ppo/run.h5 ]; then :
    elif ! run 2 $D -sft_steps 10 -rm_steps 10 -rm_pairs 256 -rm_eval_pairs 32 -ppo_iterations $ITERS -ppo_eval_every 0 -ppo_checkpoint_every 0 -dump_rollouts $opts -output_dir $o >$o.log 2>&1; then
      echo "# $deck $name: the run failed: $(grep -m1 'error' $o.log)"; continue
    fi
    # every iteration after the first, from its own rollout
    : >$o.est
    for ((k = 1; k < ITERS; k++)); do
      echo "rollout iter_$k" >>$o.est
      run 1 $D -mode profile -profile_file $d/$deck.h5 -profile_ranks 2 $opts $shape -cost_lengths rollouts:$o/ppo/rollouts.h5:iter_$k >>$o.est 2>&1 || { echo "# $deck $name: the estimate failed: $(tail -1 $o.est)"; continue 2; }
    done
    "$PYTHON" - "$o/ppo/run.h5" "$o.est" "$deck" "$name" <<'PY' | tee -a "$all"
import sys, re, collections, h5py, numpy as np
run, est, deck, name = sys.argv[1:]
t = h5py.File(run, "r")["timing"]
e, k = collections.defaultdict(dict), None
for line in open(est):
    m = re.match(r"rollout iter_(\d+)", line)
    if m: k = int(m.group(1))
    m = re.match(r"estimate: iteration (\S+) s", line)
    if m: e["iteration"][k] = float(m.group(1))
    m = re.match(r"estimate: call \S+ (\S+) s \(run.h5 /timing/(\S+)\)", line)
    if m: e[m.group(2)][k] = float(m.group(1))
m = h5py.File(run, "r")["metrics"]
grown = m["acts_grown_bytes"][()] if "acts_grown_bytes" in m else None
for w in ["iteration", "generation", "ref_inference", "reward_inference", "critic_inference", "actor_train", "critic_train", "fused_train"]:
    if w + "_max" not in t or not e[w]: continue
    ks = sorted(e[w])  # rollouts iter_k are run.h5 step k+1 (row k)
    # all the iterations after the first, and the steady ones among them:
    # no activation buffer grew (no first touch of new pages on any rank)
    for tag, sel in (("plan", ks), ("steady", [k for k in ks if grown is not None and grown[k] == 0])):
        if not sel: continue
        meas = float(np.mean([t[w + "_max"][k] for k in sel]))
        est_ = float(np.mean([e[w][k] for k in sel]))
        if meas <= 0: continue
        print(f"{tag} {deck} {name} {w} measured {meas:.4f} estimated {est_:.4f} error {100 * (est_ / meas - 1):+.1f}% iterations {len(sel)}")
PY
  done
done
"$PYTHON" - "$all" <<'PY'
import sys, collections, numpy as np
lines = [l.split() for l in open(sys.argv[1])]
for tag in ("plan", "steady"):
    rows = [r for r in lines if r and r[0] == tag]
    by = collections.defaultdict(list)
    for r in rows:
        if r[3] == "iteration": by[r[1]].append(abs(float(r[9].rstrip("%"))))
    for deck, v in list(by.items()) + [("all", [x for v in by.values() for x in v])]:
        if v: print(f"summary {tag} {deck} plans {len(v)} median |error| {np.median(v):.1f}% worst {max(v):.1f}%")
    calls = [abs(float(r[9].rstrip("%"))) for r in rows if r[3] != "iteration"]
    if calls: print(f"summary {tag} per-call estimates {len(calls)} median |error| {np.median(calls):.1f}% worst {max(calls):.1f}%")
    for deck in by:
        it = {r[2]: float(r[5]) for r in rows if r[1] == deck and r[3] == "iteration"}
        pre = {n: it[n] for n in ("colocate", "interleave", "disaggregate") if n in it}
        if "searched" in it and pre:
            best = min(pre, key=pre.get)
            print(f"summary {tag} {deck} searched plan measured {it['searched']:.4f} s/iter, best preset measured {best} {pre[best]:.4f}: {pre[best] / it['searched']:.2f}x")
PY
echo "# load while measuring: $(cut -d' ' -f1-3 /proc/loadavg) (1, 5, 15 min) on $(nproc) cores"
