# -mode plan and -placement auto: the plan search (src/search) on the
# quickstart model with the analytic H100 primitives. The search prints the
# table of estimates and writes a plan file with its estimate; a seed gives
# the same plan twice; the file runs with -plan_file on 2 ranks and the run
# records the same /plan, estimates included, next to its measured /timing;
# -placement auto searches at the start of a PPO run and runs the result;
# plan files that do not fit the job (more ranks) or the model (tp not
# dividing the heads) and bad -mode plan options stop with one line.
# A deck naming checkpoints plans their models, not the -policy_ defaults;
# without -cost_hardware or -cost_profile the search profiles this machine
# once into the profile cache (-cost_profile_cache) and reuses it after.
# At paper scale (the analytic H100, LLaMA-2 7B pairs on 16 GPUs and LLaMA
# 33B pairs on 256) the search with the fusion states is never worse than
# the one without at the same iteration cap, and its plan does not depend
# on the thread count (iteration caps, no time budget: -plan_time 0).
#
# The checks in detail: `-mode plan` on the quickstart model with the H100 description: the
# table of presets, tuned presets and the searched plan; the plan file with its estimate
# (h5py) and the simulated timeline; one seed gives the same plan file; the file runs with
# `-plan_file` on 2 ranks and run.h5 records the same `/plan`, estimates included, beside
# `/timing`; `-placement auto` searches at start and runs the plan; a plan file for 4 ranks
# run on 2, and one whose tp does not divide the heads, each stop with one line; `-mode plan`
# without `-plan_ranks` or without primitives, one line each; at paper scale (H100
# description, LLaMA-2 7B pair on 16 GPUs with two seeds, LLaMA 33B pair on 256 with
# long-tailed generation; 1500 iterations per chain) the search with the fusion states no
# worse than without, and 4 chains giving the same plan file on 1 thread as on 2
. regression/lib.sh
plan 21
d="$RLFUSE_TMP/plan_search"; mkdir -p $d
Q="-policy_n_layer 2 -policy_n_head 4 -policy_n_embd 128 -policy_vocab_size 20 -policy_n_positions 32 -task_demo_noise 0.25 -seed 5"
W="-rollout_batch 32 -ppo_minibatches 2 -gen_max_new_tokens 16"
S="-mode plan $Q $W -plan_ranks 2 -cost_hardware input/hardware/h100_sxm.deck -plan_iterations 400"
rlfuse $S -plan_output $d/p.h5 -plan_timeline $d/tl.h5 >$d/plan.log 2>&1 || not_ok "-mode plan: $(tail -3 $d/plan.log)"
check "-mode plan prints the presets, tuned presets and the searched plan with its estimate" \
  bash -c "grep -q '^  colocate, tuned ' $d/plan.log && grep -q '^  searched  ' $d/plan.log && grep -q '^estimated .* s per iteration' $d/plan.log && grep -q '^plan: search from preset' $d/plan.log"
check "the searched plan's estimate is no worse than any tuned preset's (the annealing starts from the best of them)" \
  awk '/^  (colocate|interleave|disaggregate), tuned / && $3 + 0 > 0 { if (best == "" || $3 < best) best = $3 } /^  searched / { s = $2 } END { exit !(s != "" && best != "" && s <= best) }' $d/plan.log
py "plan file" $d/p.h5 $d/tl.h5 <<'PY'
import sys, h5py
p = h5py.File(sys.argv[1], "r")["plan"]
calls = [c for c in p if c != "concurrent"]
ok = p.attrs["world"] == 2 and p.attrs["est_iter_s"] > 0 and len(calls) == 6 and all("est_s" in p[c].attrs for c in calls)
print(("ok" if ok else "not ok") + " - the plan file holds /plan for 2 ranks, its estimate and every call's estimated time")
t = h5py.File(sys.argv[2], "r")
print(("ok" if "timeline" in t else "not ok") + " - -plan_timeline writes the simulated /timeline")
PY
rlfuse $S -plan_output $d/p2.h5 >/dev/null 2>&1
same_plan() { "$PYTHON" - "$1" "$2" <<'PY'
import sys, h5py, numpy as np
a, b = (h5py.File(f, "r")["plan"] for f in sys.argv[1:3])
same = dict(a.attrs) == dict(b.attrs) and set(a) == set(b)
same = same and all(np.array_equal(a[c][()], b[c][()]) if c == "concurrent" else (np.array_equal(a[c]["ranks"][()], b[c]["ranks"][()]) and dict(a[c].attrs) == dict(b[c].attrs)) for c in a)
sys.exit(0 if same else 1)
PY
}
check "the same seed gives the same plan" same_plan $d/p.h5 $d/p2.h5

# paper scale: with and without the fusion states, one iteration cap
H100="-mode plan -cost_hardware input/hardware/h100_sxm.deck -cost_batch 512 -cost_minibatches 4 -cost_iterations 2 -cost_slots 0 -plan_iterations 1500 -plan_time 0 -plan_max_mbs 32"
R7="$H100 -plan_ranks 16 -cost_actor_shape llama2-7b -cost_critic_shape llama2-7b -cost_prompt_len 128 -cost_max_new 256 -cost_lengths fixed:256"
R33="$H100 -plan_ranks 256 -cost_actor_shape llama-33b -cost_critic_shape llama-33b -cost_prompt_len 512 -cost_max_new 2048 -cost_lengths lognormal:256:2048"
searched() { awk '/^  searched / { print $2 }' "$1"; }
never_worse() { # NAME WHAT ARGS...: searched with the fusion states <= without
  local name=$1 what=$2 f0 f1; shift 2
  if rlfuse "$@" -plan_search_fusion 0 >$d/$name.f0.log 2>&1 && rlfuse "$@" -plan_search_fusion 1 >$d/$name.f1.log 2>&1; then
    f0=$(searched $d/$name.f0.log) f1=$(searched $d/$name.f1.log)
    if awk -v a="$f1" -v b="$f0" 'BEGIN { exit !(a != "" && b != "" && a + 0 <= b + 0) }'; then ok "$what ($f1 s against $f0 s)"
    else not_ok "$what: $f1 s against $f0 s"; fi
  else not_ok "$what: -mode plan failed: $(tail -2 $d/$name.f*.log)"; fi
}
for seed in 1 2; do
  never_worse r7s$seed "16 GPUs, LLaMA-2 7B pair, seed $seed: the search with the fusion states is no worse than without" $R7 -seed $seed
done
never_worse r33 "256 GPUs, LLaMA 33B pair, long tail: the search with the fusion states is no worse than without" $R33 -seed 1
threads_same() {
  "$MPIEXEC" $MPIEXEC_FLAGS -n 1 env OMP_NUM_THREADS=1 "$BIN/rlfuse" $R7 -seed 3 -plan_output $d/t1.h5 >$d/t1.log 2>&1 &&
    "$MPIEXEC" $MPIEXEC_FLAGS -n 1 env OMP_NUM_THREADS=2 "$BIN/rlfuse" $R7 -seed 3 -plan_output $d/t2.h5 >$d/t2.log 2>&1 &&
    grep -q '^search: 4 chains on 1 thread,' $d/t1.log && grep -q '^search: 4 chains on 2 threads,' $d/t2.log && same_plan $d/t1.h5 $d/t2.h5
}
check "the search's 4 chains give the same plan on 1 thread as on 2" threads_same

# fixtures: a few SFT and RM steps, enough for PPO to run
rlfuse -mode sft $Q -sft_steps 5 -sft_batch 16 -output_dir $d/sft >$d/sft.log 2>&1 || not_ok "SFT fixture"
rlfuse -mode rm -task_demo_noise 0.25 -seed 5 -rm_sft_checkpoint $d/sft/final.h5 -rm_pairs 32 -rm_eval_pairs 16 -rm_steps 3 -rm_batch 16 \
  -gen_max_new_tokens 16 -output_dir $d/rm >$d/rm.log 2>&1 || not_ok "RM fixture"
P="-mode ppo -actor_checkpoint $d/sft/final.h5 -reward_checkpoint $d/rm/final.h5 -ppo_iterations 1 $W -ppo_eval_every 0 -gen_slots 16 -ppo_eval_prompts 16 -seed 5"
if mpirun 2 $P -plan_file $d/p.h5 -output_dir $d/run >$d/run.log 2>&1; then
  check "the plan file runs with -plan_file on 2 ranks and the run records the same /plan, estimates included" same_plan $d/p.h5 $d/run/run.h5
  check "the run's measured times sit next to the estimate in run.h5 (/timing/iteration_max)" \
    "$PYTHON" -c "import h5py; f = h5py.File('$d/run/run.h5', 'r'); assert f['plan'].attrs['est_iter_s'] > 0 and f['timing/iteration_max'][0] > 0"
else not_ok "-plan_file run: $(tail -3 $d/run.log)"; not_ok "measured next to estimated: no run"; fi
if mpirun 2 $P -placement auto -cost_hardware input/hardware/h100_sxm.deck -plan_iterations 200 -output_dir $d/auto >$d/auto.log 2>&1; then
  check "-placement auto searches at start, runs the searched plan and records its estimate" \
    bash -c "grep -q '^-placement auto: searching' $d/auto.log && grep -q '^plan: search from preset' $d/auto.log && '$PYTHON' -c \"import h5py; assert h5py.File('$d/auto/run.h5', 'r')['plan'].attrs['est_iter_s'] > 0\""
else not_ok "-placement auto: $(tail -3 $d/auto.log)"; fi

# a deck naming checkpoints: the models are the checkpoints' (Q's shape),
# not the -policy_ defaults (n_embd 128, vocabulary 64, n_positions 64)
printf '%s\n' "-actor_checkpoint $d/sft/final.h5" "-reward_checkpoint $d/rm/final.h5" "-rollout_batch 32" "-ppo_minibatches 2" "-gen_max_new_tokens 16" "-seed 5" >$d/ck.deck
est() { "$PYTHON" -c "import h5py; print(h5py.File('$1', 'r')['plan'].attrs['est_iter_s'])" 2>/dev/null; }
H="-mode plan -plan_ranks 2 -cost_hardware input/hardware/h100_sxm.deck -plan_iterations 400"
rlfuse -options_file $d/ck.deck $H -plan_output $d/ck.h5 >$d/ck.log 2>&1 || not_ok "-mode plan on the checkpoint deck: $(tail -3 $d/ck.log)"
rlfuse $Q $W $H -plan_output $d/byhand.h5 >/dev/null 2>&1
ck_same() { [ -s $d/ck.h5 ] && [ "$(est $d/ck.h5)" = "$(est $d/byhand.h5)" ] && grep -q "for checkpoints $d/sft/final.h5 and $d/rm/final.h5" $d/ck.log; }
check "a deck naming checkpoints plans their models: the estimate equals the one with their shapes given as -policy_ options" ck_same
# no primitives given: this machine's profile for the job's 2 ranks,
# measured once into the cache, then reused by -mode plan and by
# -placement auto (the same host, backend, ranks, threads and model)
C="-mode plan $Q $W -plan_ranks 2 -plan_iterations 200 -cost_profile_cache $d/cache"
mpirun 2 $C -plan_output $d/c1.h5 >$d/c1.log 2>&1 || not_ok "-mode plan without primitives: $(tail -3 $d/c1.log)"
measured() { grep -q "^plan primitives: profile $d/cache/[0-9a-f]*\.h5, measured now on this job's 2 ranks" $d/c1.log && test -s $d/c1.h5; }
check "-mode plan without -cost_*: profiles this machine on the job's ranks into the cache and says which primitives it used" measured
mpirun 2 $C -plan_output $d/c2.h5 >$d/c2.log 2>&1 || not_ok "-mode plan from the cache: $(tail -3 $d/c2.log)"
reused() { grep -q "^plan primitives: profile $d/cache/[0-9a-f]*\.h5, reused from the cache" $d/c2.log && [ $(ls $d/cache | wc -l) = 1 ] && same_plan $d/c1.h5 $d/c2.h5; }
check "a second -mode plan reuses the cached profile (same file, same plan)" reused
py "cache key" $d/cache <<'PY'
import sys, os, glob, h5py
f = h5py.File(glob.glob(sys.argv[1] + "/*.h5")[0], "r")
k = f.attrs["cache_key"]; k = k.decode() if isinstance(k, bytes) else k
ok = "host " in k and "backend cpu" in k and "ranks 2" in k and "128x4x20x32" in k and f["model_0"].attrs["n_embd"] == 128
print(("ok" if ok else "not ok") + " - the cached profile stores its key (host, backend, ranks, the models' trunk) and holds the deck's model")
PY
auto_reused() { grep -q "^plan primitives: profile $d/cache/[0-9a-f]*\.h5, reused from the cache" $d/auto2.log && grep -q "for the models this run read" $d/auto2.log && grep -q "^plan: search from preset" $d/auto2.log; }
if mpirun 2 $P -placement auto -plan_iterations 100 -cost_profile_cache $d/cache -output_dir $d/auto2 >$d/auto2.log 2>&1; then
  check "-placement auto without -cost_*: takes this machine's profile from the cache and runs the searched plan" auto_reused
else not_ok "-placement auto without primitives: $(tail -3 $d/auto2.log)"; fi

# refused plan files: one line naming what does not fit
one_line() { # WHAT PATTERN NRANKS ARGS...: exits non-zero with one "rlfuse: error:" line matching
  local what=$1 pat=$2 n=$3; shift 3
  if mpirun $n "$@" >$d/err.out 2>$d/err.txt; then not_ok "$what: exit status 0"; return; fi
  if [ "$(grep -c . $d/err.txt)" -eq 1 ] && grep -q "^rlfuse: error: .*$pat" $d/err.txt; then ok "$what ($(cut -c1-100 $d/err.txt))"
  else not_ok "$what: $(head -3 $d/err.txt)"; fi
}
"$PYTHON" - $d/p.h5 $d/p4.h5 $d/tp3.h5 <<'PY'
import sys, shutil, h5py
def edit(dst, world, ranks, tp, dp):  # the searched plan with actor_gen moved
    shutil.copy(sys.argv[1], dst)
    with h5py.File(dst, "r+") as f:
        f["plan"].attrs["world"] = float(world)
        g = f["plan/actor_gen"]; del g["ranks"]; g["ranks"] = ranks
        g.attrs["tp"], g.attrs["dp"], g.attrs["pp"] = float(tp), float(dp), 1.0
edit(sys.argv[2], 4, [0, 1, 2, 3], 1, 4)  # a plan for 4 ranks
edit(sys.argv[3], 3, [0, 1, 2], 3, 1)     # tp 3 does not divide the 4 heads
PY
one_line "a plan file for 4 ranks is refused on 2, naming the file" "-plan_file .*p4.h5: the plan was made for 4 ranks (its actor_gen runs on ranks 0-3) and this run has 2" 2 $P -plan_file $d/p4.h5 -output_dir $d/bad4
one_line "a plan file whose tp does not divide the model's heads is refused" "actor_gen_tp 3 does not divide the model's n_head 4" 3 $P -plan_file $d/tp3.h5 -output_dir $d/badtp
expect_error "-mode plan without -plan_ranks" "-plan_ranks" -mode plan $Q $W -cost_hardware input/hardware/h100_sxm.deck
expect_error "-mode plan with both primitives" "-cost_hardware .* not both" -mode plan $Q $W -plan_ranks 2 -cost_hardware input/hardware/h100_sxm.deck -cost_profile $d/none.h5
finish
