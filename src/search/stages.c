/* search: the training calls of the stages before PPO (sft_train of SFT,
 * rm_train of reward modelling). A pipeline runs its stages one after
 * another and never beside PPO's calls, so each is placed on its own: every
 * strategy on every mesh size, the fastest step that fits kept (ties: the
 * first, so the placement is deterministic). Meshes of one size are alike
 * for a call alone (the machine's nodes are alike), so each size is tried
 * once, from rank 0. The settings are the plan's, shared with PPO's calls:
 * the placement is made for ZeRO-1 off and on, and the plan's state picks
 * one (search_stages_apply). Also the helpers -mode plan and -placement
 * auto share for them: a stage-only deck's workload, a pipeline's stages
 * on -cost_*_shape's models, and the lines printed for each. */
#include "search_impl.h"

#include <math.h>
#include <string.h>

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

/* The layouts of one stage's call on plan, every strategy on every mesh
 * size: the best into *best (feasible if any layout fits, else the one
 * closest to fitting). */
static PetscErrorCode search_stage_layouts(SearchSpace sp, SearchStageCtx *ctx, Plan *plan, PlanCall *best,
                                           CostEstimate *best_est, PetscBool *found)
{
  CostEstimate e;
  PetscBool    ok;
  MFCId        id = ctx->id;

  PetscFunctionBegin;
  for (int m = 0; m < sp->nmesh; m++) {
    int n = sp->mesh[m].n;

    if (sp->mesh[m].lo) continue;
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
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* One stage for one ZeRO-1 state. Not bounded by -plan_time: the
 * enumeration takes milliseconds, and a deadline would make the placement
 * depend on the machine's speed. */
static PetscErrorCode search_stage_one(SearchSpace sp, SearchStageCtx *ctx, PetscBool zero1, PlanCall *best,
                                       CostEstimate *best_est, PetscBool *found)
{
  Plan          *plan;
  PetscErrorCode ierr;

  PetscFunctionBegin;
  *found = PETSC_FALSE;
  PetscCall(PetscMalloc1(1, &plan));
  ierr = plan_preset(sp->spec.world, PLACEMENT_COLOCATE, 0,
                     plan); /* the settings' defaults, which plan_check accepts */
  if (!ierr) {
    for (int c = 0; c < MFC_COUNT; c++)
      if (c != (int)ctx->id) plan->call[c].nranks = 0;
    plan->nconc = 0;
    plan->zero1 = zero1;
    ierr        = search_stage_layouts(sp, ctx, plan, best, best_est, found);
  }
  PetscCall(PetscFree(plan));
  PetscCall(ierr);
  PetscFunctionReturn(PETSC_SUCCESS);
}

typedef struct {
  const CostPrims       *p;
  const CostJob         *job;
  const SearchSpaceSpec *spec;
  SearchStages          *out;
} SearchStagesTask;

static PetscErrorCode search_stages_rank0(void *vctx)
{
  SearchStagesTask      *t    = (SearchStagesTask *)vctx;
  const CostPrims       *p    = t->p;
  const CostJob         *job  = t->job;
  const SearchSpaceSpec *spec = t->spec;
  SearchStages          *out  = t->out;

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
    for (int z = 0; z < 2; z++)
      PetscCall(search_stage_one(sp, &ctx, (PetscBool)z, &out->call[k][z], &out->est[k][z], &out->found[k][z]));
    PetscCall(search_space_destroy(&sp));
    PetscCheck(out->found[k][0] && out->found[k][1], PETSC_COMM_SELF, PETSC_ERR_ARG_INCOMP,
               "plan search: no layout of %s on %d ranks passes the plan checks (its batch of %d %s must divide over "
               "the replicas' micro-batches)",
               mfc_names[id], spec->world, st->batch, k ? "pairs" : "sequences");
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* On rank 0, then broadcast (one result on every rank). */
PetscErrorCode search_stages_place(MPI_Comm comm, const CostPrims *p, const CostJob *job, const SearchSpaceSpec *spec,
                                   SearchStages *out)
{
  SearchStagesTask t = {p, job, spec, out};

  PetscFunctionBegin;
  PetscCall(PetscMemzero(out, sizeof *out));
  PetscCall(io_on_root(comm, search_stages_rank0, &t));
  PetscCallMPI(sys_mpi_bcast(out, (int)sizeof *out, MPI_BYTE, 0, comm));
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

/* A deck of -mode sft or rm has no PPO job: the primitives are for its
 * stage's model (a profile must hold it), in every role. */
void search_stages_deck(const RunCtx *run, const CostJob *job, CostDeck *deck)
{
  const CostTrainStage *st = job->stage[0].used ? &job->stage[0] : &job->stage[1];

  PetscMemzero(deck, sizeof *deck);
  deck->batch       = st->batch * st->rows;
  deck->max_new     = 1;
  deck->prompt_len  = PetscMax(1, st->len - 1);
  deck->minibatches = deck->micro = deck->epochs = 1;
  deck->seed        = (long long)run->seed;
  for (int k = 0; k < 4; k++) {
    deck->cfg[k]      = st->cfg;
    deck->cfg[k].head = k == 1 || k == 3 ? MODEL_HEAD_SCALAR : MODEL_HEAD_LM;
  }
  PetscSNPrintf(deck->shapes_from, sizeof deck->shapes_from, "the -mode %s deck's model", job->mode);
}

/* A pipeline's SFT trains the actor's model and its RM the reward model
 * PPO reads: with -cost_actor_shape or -cost_critic_shape, the workload's
 * shapes, not the deck's -policy_ model. */
void search_stages_shapes(const CostWork *w, CostJob *job)
{
  const CostShape *want[2] = {&w->actor, &w->reward};

  for (int k = 0; k < 2; k++) {
    CostShape m;

    if (!job->stage[k].used || (k && w->reward_free)) continue;
    cost_shape_from_model(&job->stage[k].cfg, &m);
    if (memcmp(&m, want[k], sizeof m)) cost_shape_to_model(want[k], &job->stage[k].cfg);
  }
}

/* The stages' placements for the plan's ZeRO-1 (without PPO's calls: the
 * faster state over all the stages' steps when settings are searched, else
 * off), one line each, and their calls added to needs. */
PetscErrorCode search_stages_finish(const RunCtx *run, const CostJob *job, const SearchStages *st,
                                    const SearchSpaceSpec *spec, PlanNeeds *needs, Plan *best)
{
  char mem[32];

  PetscFunctionBegin;
  if (!job->ppo) {
    double t[2] = {0, 0};

    for (int z = 0; z < 2; z++)
      for (int k = 0; k < 2; k++)
        if (job->stage[k].used) t[z] += st->est[k][z].feasible ? job->stage[k].steps * st->est[k][z].iter_s : INFINITY;
    best->zero1 = spec->settings && t[1] < t[0] ? PETSC_TRUE : PETSC_FALSE;
  }
  search_stages_apply(job, st, best);
  for (int k = 0; k < 2; k++) {
    MFCId               id = k ? MFC_RM_TRAIN : MFC_SFT_TRAIN;
    const CostEstimate *e  = &st->est[k][best->zero1 ? 1 : 0];

    if (!job->stage[k].used) continue;
    needs->cfg[id]   = &job->stage[k].cfg;
    needs->batch[id] = job->stage[k].batch;
    if (e->feasible)
      PetscCall(
          PetscPrintf(run->comm,
                      "%s placed alone: estimated %.4g s per step, %.4g s for its %d steps, %s peak memory per rank\n",
                      mfc_names[id], e->iter_s, e->iter_s * job->stage[k].steps, job->stage[k].steps,
                      sys_bytes_str(e->mem_max, mem, sizeof mem)));
    else PetscCall(PetscPrintf(run->comm, "%s placed alone: no layout fits; the closest: %s\n", mfc_names[id], e->why));
    if (!job->ppo && e->feasible) { /* the plan's estimate is then its stage's step */
      best->est_iter_s = PetscMax(best->est_iter_s, e->iter_s);
      best->est_mem    = PetscMax(best->est_mem, e->mem_max);
    }
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}
