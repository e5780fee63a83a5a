#!/usr/bin/env bash
# The paper-scale plan-search study (docs/planning.md, docs/benchmarks.md):
# -mode plan with the analytic H100 primitives on the actor/critic pairs and
# GPU counts of ReaLHF (LLaMA-2 7B..70B actors with a 7B critic, 16..128
# GPUs) and RLHFuse (LLaMA 13B/33B/65B pairs, 256 GPUs, long-tailed
# generation up to 2048 tokens), each searched with and without the fusion
# settings. Prints a Markdown table: seconds per iteration of the best preset
# as given (inf.: none fits), the co-located preset tuned call by call (the
# co-located baseline), the best tuned preset (the heuristic plans), the
# searched plans, the best plan with fusion the search saw (tuned; "none":
# no fused plan fits), the fusion gain over the searched unfused plan and
# over RLHFuse's own baseline (every call on all GPUs, one after another:
# the co-located preset tuned), the searched plan with asynchronous RL
# (-cost_staleness 1, docs/async.md) and its gain over the better of the
# synchronous searches, the same with partial rollouts (-cost_partial
# PARTIAL, default 256 tokens per sample and iteration) and its gain, the
# searched unfused plan's weight syncs per
# iteration device to device (NCCL) and through host memory (MPI, what
# -device cuda does today), and the searches' wall time.
# Usage: tools/bench/bench_search.sh [OUTDIR]
#   PLAN_TIME (default 60) is each search's budget in seconds (0: none);
#   PLAN_ITERS (default 0: none) caps each annealing chain's iterations,
#   which makes the plans reproducible and the comparison of the searches
#   with and without the fusion states one at equal iterations;
#   BIN, MPIEXEC as for the suite. Only settings matching $ONLY run (a grep
#   pattern on the setting's name, e.g. ONLY=7b).
set -eu
cd "$(dirname "$0")/../.."
BIN=${BIN:-bin} PLAN_TIME=${PLAN_TIME:-60} PLAN_ITERS=${PLAN_ITERS:-0} ONLY=${ONLY:-.} PARTIAL=${PARTIAL:-256}
out=${1:-$(mktemp -d "${TMPDIR:-/tmp}/bench_search.XXXXXX")}
mkdir -p "$out"
hw=input/hardware/h100_sxm.deck
# name | gpus | actor | critic | prompt | max_new | lengths | more options
# (with 2048-token tails only micro-batches of a row or two fit: up to 32)
settings=(
  "realhf-7b+7b|16|llama2-7b|llama2-7b|128|256|fixed:256"
  "realhf-13b+7b|32|llama2-13b|llama2-7b|128|256|fixed:256"
  "realhf-34b+7b|64|codellama-34b|llama2-7b|128|256|fixed:256"
  "realhf-70b+7b|128|llama2-70b|llama2-7b|128|256|fixed:256"
  "rlhfuse-13b|256|llama-13b|llama-13b|512|2048|lognormal:256:2048|-plan_max_mbs 32"
  "rlhfuse-33b|256|llama-33b|llama-33b|512|2048|lognormal:256:2048|-plan_max_mbs 32"
  "rlhfuse-65b|256|llama-65b|llama-65b|512|2048|lognormal:256:2048|-plan_max_mbs 32"
)
# the row's seconds per iteration, or "inf." when infeasible
row() { awk -v k="$2" '$0 ~ "^  "k" " { x = $0; sub("^  "k" +", "", x); split(x, f, " "); print (f[1] == "infeasible:" || f[1] == "refused") ? "inf." : f[1]; exit }' "$1"; }
best() { printf '%s\n' "$@" | grep -v inf. | sort -g | head -1; }
echo "| setting | GPUs | presets as given (best) | co-located, tuned | best tuned preset | searched, no fusion | searched, fusion | best fused plan seen | searched vs co-located | vs tuned preset | fusion gain | fusion vs co-located | searched, asynchronous (K=1) | async gain | searched, K=1 + partial rollouts | its gain | weight syncs s, NCCL / host | search s (no fusion / fusion / async / partial) |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
for s in "${settings[@]}"; do
  IFS='|' read -r name gpus actor critic prompt maxnew lengths more <<<"$s"
  echo "$name" | grep -q -- "$ONLY" || continue
  for fz in 0 1 async partial; do
    case $fz in
      async) opt="-plan_search_fusion 0 -cost_staleness 1" ;;
      partial) opt="-plan_search_fusion 0 -cost_staleness 1 -cost_partial $PARTIAL" ;;
      *) opt="-plan_search_fusion $fz" ;;
    esac
    "$BIN/rlfuse" -mode plan -plan_ranks "$gpus" -cost_hardware $hw -cost_actor_shape "$actor" -cost_critic_shape "$critic" \
      -cost_batch 512 -cost_prompt_len "$prompt" -cost_max_new "$maxnew" -cost_lengths "$lengths" -cost_minibatches 4 -cost_iterations 2 -cost_slots 0 \
      -plan_time "$PLAN_TIME" -plan_iterations "$PLAN_ITERS" $opt -seed 1 ${more:-} -plan_output "$out/$name.fuse$fz.h5" >"$out/$name.fuse$fz.log" 2>&1 ||
      { echo "$name: -mode plan failed, see $out/$name.fuse$fz.log" >&2; exit 1; }
  done
  l0=$out/$name.fuse0.log l1=$out/$name.fuse1.log la=$out/$name.fuseasync.log
  co=$(row $l0 'colocate, tuned')
  bp=$(best "$(row $l0 colocate)" "$(row $l0 interleave)" "$(row $l0 disaggregate)")
  bt=$(best "$(row $l0 'colocate, tuned')" "$(row $l0 'interleave, tuned')" "$(row $l0 'disaggregate, tuned')")
  s0=$(row $l0 searched) s1=$(row $l1 searched) bf=$(row $l1 'best fused seen, tuned')
  t0=$(sed -n 's/^search: .*, \([0-9.]*\) s in all.*/\1/p' $l0) t1=$(sed -n 's/^search: .*, \([0-9.]*\) s in all.*/\1/p' $l1)
  sa=$(row $la searched) ta=$(sed -n 's/^search: .*, \([0-9.]*\) s in all.*/\1/p' $la | head -1)
  lp=$out/$name.fusepartial.log
  sp=$(row $lp searched) tp=$(sed -n 's/^search: .*, \([0-9.]*\) s in all.*/\1/p' $lp | head -1)
  ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "" || b == "" || a == "inf." || b == "inf.") print "-"; else printf "%.2fx", a / b }'; }
  sbest=$(best "$s0" "$s1")
  sync=$(sed -n 's/^weight syncs of this plan: \([0-9.e+-]*\) s per iteration device to device (NCCL), \([0-9.e+-]*\) s through host.*/\1 \/ \2/p' $l0)
  echo "| $name | $gpus | ${bp:-inf.} | ${co:-inf.} | ${bt:-inf.} | $s0 | $s1 | ${bf:-none} | $(ratio "$co" "$sbest") | $(ratio "$bt" "$sbest") | $(ratio "$s0" "$s1") | $(ratio "$co" "$s1") | ${sa:-inf.} | $(ratio "$sbest" "$sa") | ${sp:-inf.} | $(ratio "$sbest" "$sp") | ${sync:-none} | $t0 / $t1 / $ta / $tp |"
done
echo "(logs and plan files in $out)"
