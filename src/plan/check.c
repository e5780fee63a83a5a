/* plan: every check of a plan before any compute. The checks are a pure
 * function of the plan and the run's needs, so every rank reaches the same
 * verdict without communicating, and errors are raised on PETSC_COMM_WORLD
 * (reported once). Each names the option that would fix it. */
#include "plan_impl.h"

/* Same model in two calls: its weights move from one layout to the other
 * every iteration (parameter reallocation, src/realloc), which needs tp
 * sizes that divide each other. The reference shares the actor's shape but
 * is a different model, so it is no pair. */
static const struct {
  MFCId       a, b;
  const char *model;
} plan_realloc_pairs[] = {
  {MFC_ACTOR_TRAIN,  MFC_ACTOR_GEN,  "actor" },
  {MFC_CRITIC_TRAIN, MFC_CRITIC_INF, "critic"},
};

static PetscBool plan_training(MFCId c)
{
  return c == MFC_ACTOR_TRAIN || c == MFC_CRITIC_TRAIN || c == MFC_SFT_TRAIN || c == MFC_RM_TRAIN ? PETSC_TRUE
                                                                                                  : PETSC_FALSE;
}

/* The largest rank outside the job is the one named: for 0-7 on 4 ranks,
 * "rank 7" says more than "rank 4". */
static PetscErrorCode plan_check_ranks(const Plan *plan, MFCId c)
{
  const PlanCall *call = &plan->call[c];
  const char     *name = mfc_names[c];
  char            s[PLAN_RANKS_STR], seen[PLAN_MAX_RANKS] = {0};
  int             lo = 0, hi = 0;

  PetscFunctionBegin;
  plan_ranks_str(call, s, sizeof s);
  PetscCheck(call->nranks > 0, PETSC_COMM_WORLD, PETSC_ERR_ARG_WRONG, "-%s_ranks: the call has no ranks", name);
  for (int i = 0; i < call->nranks; i++) {
    lo = PetscMin(lo, call->ranks[i]);
    hi = PetscMax(hi, call->ranks[i]);
  }
  PetscCheck(lo >= 0, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE, "-%s_ranks %s: rank %d is negative", name, s, lo);
  PetscCheck(hi < plan->world, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE,
             "-%s_ranks %s: rank %d is outside the job's %d ranks", name, s, hi, plan->world);
  for (int i = 0; i < call->nranks; i++) {
    PetscCheck(!seen[call->ranks[i]], PETSC_COMM_WORLD, PETSC_ERR_ARG_WRONG, "-%s_ranks %s: rank %d appears twice",
               name, s, call->ranks[i]);
    seen[call->ranks[i]] = 1;
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode plan_check_grid(const PlanCall *call, const char *name)
{
  PetscFunctionBegin;
  PetscCheck(call->dp >= 1 && call->tp >= 1 && call->pp >= 1, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE,
             "-%s_dp %d, -%s_tp %d and -%s_pp %d must all be at least 1", name, call->dp, name, call->tp, name,
             call->pp);
  PetscCheck(call->mbs >= 0, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE, "-%s_mbs %d must be at least 0", name,
             call->mbs);
  PetscCheck(call->dp * call->tp * call->pp == call->nranks, PETSC_COMM_WORLD, PETSC_ERR_ARG_INCOMP,
             "-%s_dp %d x -%s_tp %d x -%s_pp %d = %d ranks, but -%s_ranks has %d", name, call->dp, name, call->tp, name,
             call->pp, call->dp * call->tp * call->pp, name, call->nranks);
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Megatron sharding cuts attention by heads and the embedding by vocabulary
 * rows; every pipeline stage needs at least one layer. */
static PetscErrorCode plan_check_model(const PlanCall *call, const char *name, const ModelConfig *cfg)
{
  PetscFunctionBegin;
  PetscCheck(cfg->n_head % call->tp == 0, PETSC_COMM_WORLD, PETSC_ERR_ARG_INCOMP,
             "-%s_tp %d does not divide the model's n_head %d", name, call->tp, cfg->n_head);
  PetscCheck(cfg->vocab_size % call->tp == 0, PETSC_COMM_WORLD, PETSC_ERR_ARG_INCOMP,
             "-%s_tp %d does not divide the model's vocab_size %d", name, call->tp, cfg->vocab_size);
  PetscCheck(model_n_kv_head(cfg) % call->tp == 0 || call->tp % model_n_kv_head(cfg) == 0, PETSC_COMM_WORLD,
             PETSC_ERR_ARG_INCOMP, "-%s_tp %d neither divides the model's n_kv_head %d nor is a multiple of it", name,
             call->tp, model_n_kv_head(cfg));
  PetscCheck(model_n_ffn(cfg) % call->tp == 0, PETSC_COMM_WORLD, PETSC_ERR_ARG_INCOMP,
             "-%s_tp %d does not divide the model's n_ffn %d", name, call->tp, model_n_ffn(cfg));
  PetscCheck(call->pp <= cfg->n_layer, PETSC_COMM_WORLD, PETSC_ERR_ARG_INCOMP,
             "-%s_pp %d exceeds the model's n_layer %d (every stage needs a layer)", name, call->pp, cfg->n_layer);
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode plan_check_batch(const PlanCall *call, MFCId c, int batch)
{
  const char *name = mfc_names[c],
             *what = c == MFC_SFT_TRAIN || c == MFC_RM_TRAIN ? "batch"
                     : plan_training(c)                      ? "mini-batch"
                                                             : "rollout batch",
             *unit = c == MFC_RM_TRAIN ? "pairs" : "sequences";

  PetscFunctionBegin;
  if (call->mbs > 0)
    PetscCheck(batch % (call->dp * call->mbs) == 0, PETSC_COMM_WORLD, PETSC_ERR_ARG_INCOMP,
               "-%s_dp %d x -%s_mbs %d = %d does not divide the %s of %d %s", name, call->dp, name, call->mbs,
               call->dp * call->mbs, what, batch, unit);
  else
    PetscCheck(batch % call->dp == 0, PETSC_COMM_WORLD, PETSC_ERR_ARG_INCOMP,
               "-%s_dp %d does not divide the %s of %d %s", name, call->dp, what, batch, unit);
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode plan_check_call(const Plan *plan, const PlanNeeds *needs, MFCId c)
{
  PetscFunctionBegin;
  PetscCall(plan_check_ranks(plan, c));
  PetscCall(plan_check_grid(&plan->call[c], mfc_names[c]));
  PetscCall(plan_check_model(&plan->call[c], mfc_names[c], needs->cfg[c]));
  PetscCall(plan_check_batch(&plan->call[c], c, needs->batch[c]));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode plan_check_concurrent(const Plan *plan, const PlanNeeds *needs)
{
  PetscFunctionBegin;
  for (int k = 0; k < plan->nconc; k++) {
    int a = plan->conc[k][0], b = plan->conc[k][1], r;

    PetscCheck(a >= 0 && a < MFC_COUNT && b >= 0 && b < MFC_COUNT, PETSC_COMM_WORLD, PETSC_ERR_ARG_WRONG,
               "plan: concurrent pair %d names call %d, %d (calls are 0..%d)", k, a, b, MFC_COUNT - 1);
    if (!needs->cfg[a] || !needs->cfg[b]) continue;
    r = plan_shared_rank(&plan->call[a], &plan->call[b]);
    PetscCheck(r < 0, PETSC_COMM_WORLD, PETSC_ERR_ARG_INCOMP, "-plan_concurrent %s,%s: both calls need rank %d",
               mfc_names[a], mfc_names[b], r);
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode plan_check_realloc(const Plan *plan, const PlanNeeds *needs)
{
  PetscFunctionBegin;
  for (size_t k = 0; k < sizeof plan_realloc_pairs / sizeof plan_realloc_pairs[0]; k++) {
    MFCId a = plan_realloc_pairs[k].a, b = plan_realloc_pairs[k].b;
    int   ta = plan->call[a].tp, tb = plan->call[b].tp;

    if (!needs->cfg[a] || !needs->cfg[b]) continue;
    PetscCheck(ta % tb == 0 || tb % ta == 0, PETSC_COMM_WORLD, PETSC_ERR_ARG_INCOMP,
               "-%s_tp %d and -%s_tp %d must divide each other (parameter reallocation of the %s)", mfc_names[a], ta,
               mfc_names[b], tb, plan_realloc_pairs[k].model);
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Only a call missing from a plan file has no ranks here (presets and
 * -<call>_ranks always give some). */
static PetscErrorCode plan_check_whole(const Plan *plan, const PlanNeeds *needs)
{
  char missing[256] = "";

  PetscFunctionBegin;
  for (int c = 0; c < MFC_COUNT; c++) {
    if (!needs->cfg[c] || plan->call[c].nranks) continue;
    if (missing[0]) PetscCall(PetscStrlcat(missing, ", ", sizeof missing));
    PetscCall(PetscStrlcat(missing, "/plan/", sizeof missing));
    PetscCall(PetscStrlcat(missing, mfc_names[c], sizeof missing));
  }
  PetscCheck(!missing[0], PETSC_COMM_WORLD, PETSC_ERR_FILE_UNEXPECTED,
             "plan (%s) lacks %s, which this run needs: a plan file must hold every call of the run (write it from a "
             "run of this mode, or give -<call>_ranks)",
             plan->source, missing);
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode plan_check(const Plan *plan, const PlanNeeds *needs)
{
  PetscFunctionBegin;
  PetscCall(plan_check_whole(plan, needs));
  PetscCheck(plan->world >= 1 && plan->world <= PLAN_MAX_RANKS, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE,
             "plan (%s) is for %d ranks; plans are for 1 to %d", plan->source, plan->world, PLAN_MAX_RANKS);
  /* a fused critic_train's mesh follows actor_train's: that first, then
   * the fusion's own errors, before the critic's grid checks */
  if (plan->fuse_train && needs->cfg[MFC_ACTOR_TRAIN]) PetscCall(plan_check_call(plan, needs, MFC_ACTOR_TRAIN));
  PetscCall(plan_fuse_train_check(plan, needs));
  for (int c = 0; c < MFC_COUNT; c++)
    if (needs->cfg[c]) PetscCall(plan_check_call(plan, needs, (MFCId)c));
  PetscCall(plan_check_concurrent(plan, needs));
  PetscCall(plan_check_realloc(plan, needs));
  PetscCall(plan_check_fusion(plan, needs));
  PetscFunctionReturn(PETSC_SUCCESS);
}
