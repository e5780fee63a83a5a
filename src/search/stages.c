/* search: the training calls of the stages before PPO (sft_train of SFT,
 * rm_train of reward modelling). A pipeline runs its stages one after
 * another and never beside PPO's calls, so each is placed on its own: every
 * strategy on every mesh size, the fastest step that fits kept (ties: the
 * first, so the placement is deterministic). Meshes of one size are alike
 * for a call alone (the machine's nodes are alike), so each size is tried
 * once, from rank 0. The settings are the plan's, shared with PPO's calls:
 * the placement is made for ZeRO-1 off and on, and the plan's state picks
 * one (search_stages_apply). */
#include "search_impl.h"
#include "internal/h5util.h"

#include <math.h>

typedef struct {
  const CostPrims      *prims;
  const CostTrainStage *st;
  MFCId                 id;
} SearchStageCtx;

static PetscErrorCode search_stage_objective(void *vctx, const Plan *plan, CostEstimate *est)
{
  SearchStageCtx *ctx = (SearchStageCtx *)vctx;

  PetscFunctionBegin;
  PetscCall(cost_train_stage(ctx->prims, ctx->st, ctx->id, &plan->call[ctx->id], plan->world, plan->zero1, est));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* One stage for one ZeRO-1 state: the best call into *best (feasible if any
 * layout fits, else the one closest to fitting); stops between two mesh
 * sizes after deadline once a layout passed the checks. */
static PetscErrorCode search_stage_one(SearchSpace sp, SearchStageCtx *ctx, PetscBool zero1, double deadline, PlanCall *best, CostEstimate *best_est, PetscBool *found)
{
  Plan        *plan;
  CostEstimate e;
  PetscBool    ok;
  MFCId        id = ctx->id;

  PetscFunctionBegin;
  *found = PETSC_FALSE;
  PetscCall(PetscMalloc1(1, &plan));
  PetscCall(plan_preset(sp->spec.world, PLACEMENT_COLOCATE, 0, plan)); /* the settings' defaults, which plan_check accepts */
  for (int c = 0; c < MFC_COUNT; c++)
    if (c != (int)id) plan->call[c].nranks = 0;
  plan->nconc = 0;
  plan->zero1 = zero1;
  for (int m = 0; m < sp->nmesh; m++) {
    int n = sp->mesh[m].n;

    if (sp->mesh[m].lo) continue;
    if (*found && isfinite(deadline) && sys_wtime() > deadline) break;
    for (int s = 0; s < sp->nstrat[id][n]; s++) {
      search_put(plan, id, &sp->mesh[m], &sp->strat[id][n][s]);
      PetscCall(search_evaluate(sp, search_stage_objective, ctx, plan, &ok, &e));
      if (!ok) continue;
      if (!*found || search_cost(&e) < search_cost(best_est)) {
        *best     = plan->call[id];
        *best_est = e;
        *found    = PETSC_TRUE;
      }
    }
  }
  PetscCall(PetscFree(plan));
  PetscFunctionReturn(PETSC_SUCCESS);
}

typedef struct {
  const CostPrims       *p;
  const CostJob         *job;
  const SearchSpaceSpec *spec;
  double                 deadline;
  SearchStages          *out;
} SearchStagesTask;

static PetscErrorCode search_stages_rank0(void *vctx)
{
  SearchStagesTask      *t    = (SearchStagesTask *)vctx;
  const CostPrims       *p    = t->p;
  const CostJob         *job  = t->job;
  const SearchSpaceSpec *spec = t->spec;
  SearchStages          *out  = t->out;
  double                 deadline = t->deadline;

  PetscFunctionBegin;
  for (int k = 0; k < 2; k++) {
    const CostTrainStage *st = &job->stage[k];
    MFCId                 id = k ? MFC_RM_TRAIN : MFC_SFT_TRAIN;
    SearchStageCtx        ctx = {p, st, id};
    SearchSpaceSpec       one = *spec;
    PlanNeeds             needs;
    SearchSpace           sp;

    if (!st->used) continue;
    PetscCall(PetscMemzero(&needs, sizeof needs));
    needs.cfg[id]   = &st->cfg;
    needs.batch[id] = st->batch;
    one.needs       = &needs;
    one.settings = one.fusion = PETSC_FALSE;
    if (p->ranks_per_node > 0) one.ranks_per_node = p->ranks_per_node;
    PetscCall(search_space_create(&one, &sp));
    for (int z = 0; z < 2; z++) {
      PetscCall(search_stage_one(sp, &ctx, (PetscBool)z, deadline, &out->call[k][z], &out->est[k][z], &out->found[k][z]));
      PetscCheck(out->found[k][z], PETSC_COMM_SELF, PETSC_ERR_ARG_INCOMP, "plan search: no layout of %s on %d ranks passes the plan checks (its batch of %d %s must divide over the replicas' micro-batches)", mfc_names[id], spec->world, st->batch, k ? "pairs" : "sequences");
    }
    PetscCall(search_space_destroy(&sp));
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* On rank 0 (a deadline could stop ranks at different meshes), then broadcast. */
PetscErrorCode search_stages_place(MPI_Comm comm, const CostPrims *p, const CostJob *job, const SearchSpaceSpec *spec, double deadline, SearchStages *out)
{
  SearchStagesTask t = {p, job, spec, deadline, out};

  PetscFunctionBegin;
  PetscCall(PetscMemzero(out, sizeof *out));
  PetscCall(h5u_rank0(comm, search_stages_rank0, &t));
  PetscCallMPI(MPI_Bcast(out, (int)sizeof *out, MPI_BYTE, 0, comm));
  PetscFunctionReturn(PETSC_SUCCESS);
}

void search_stages_apply(const CostJob *job, const SearchStages *s, Plan *plan)
{
  for (int k = 0; k < 2; k++) {
    MFCId id = k ? MFC_RM_TRAIN : MFC_SFT_TRAIN;
    int   z  = plan->zero1 ? 1 : 0;

    if (!job->stage[k].used) continue;
    plan->call[id]       = s->call[k][z];
    plan->est_call_s[id] = s->est[k][z].feasible ? s->est[k][z].iter_s : 0;
  }
}
