/* estimate.c: -mode profile -profile_file P.h5: the cost model's estimate
 * of the deck's plan (placement and per-call options, fusion settings, the
 * PPO workload) from a measured profile instead of a hardware description,
 * printed as one line per call, so that a measured run of the same deck can
 * be set beside it (tools/bench/bench_plan.sh). Measures nothing. */
#include "profile_impl.h"
#include "plan.h"

/* the run record's /timing stage of each call (src/jobs) */
static const char *const stage_of[MFC_COUNT] = { "generation",  "ref_inference", "reward_inference", "critic_inference",
                                                 "actor_train", "critic_train",  "sft_train",        "rm_train" };

PetscErrorCode profile_estimate(const RunCtx *run, const char *file, int world, const CostDeck *deck)
{
  CostPrims    p;
  CostWork     w;
  Plan         plan;
  CostEstimate est;

  PetscFunctionBegin;
  PetscCall(cost_work_from_options(deck, &w));
  PetscCall(cost_prims_profile_for(file, &w, &p));
  PetscCall(PetscMemzero(&plan, sizeof plan));
  PetscCall(plan_from_options(world, &plan));
  PetscCall(cost_estimate(&p, &w, &plan, &est));
  PetscCall(PetscPrintf(PETSC_COMM_WORLD, "estimate: %s on %d ranks from %s, models from %s\n", plan.source, world,
                        p.source, deck->shapes_from));
  if (!est.feasible) PetscCall(PetscPrintf(PETSC_COMM_WORLD, "estimate: infeasible: %s\n", est.why));
  PetscCall(
      PetscPrintf(PETSC_COMM_WORLD,
                  "estimate: iteration %.6g s (reallocation and weight sync %.6g s, peak memory per rank %.4g MB)\n",
                  est.iter_s, est.realloc_s, est.mem_max / 1e6));
  for (int c = 0; c < MFC_COUNT; c++)
    if (est.call_s[c] > 0)
      PetscCall(PetscPrintf(PETSC_COMM_WORLD, "estimate: call %s %.6g s (run.h5 /timing/%s)\n", mfc_names[c],
                            est.call_s[c], stage_of[c]));
  PetscCall(cost_work_free(&w));
  PetscCall(cost_prims_destroy(&p));
  (void)run;
  PetscFunctionReturn(PETSC_SUCCESS);
}
