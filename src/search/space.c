/* search: the plan space. Meshes are contiguous rank ranges, as ReaLHF's
 * device meshes are: inside one node a range of 1, 2, 4 ... ranks aligned to
 * its size, across nodes whole nodes aligned to the range's size (so tensor
 * parallelism, which all-reduces every layer, never leaves a node unless
 * asked to), and always the whole job. A call's strategies on a mesh of n
 * ranks are every dp x tp x pp = n the model admits, each with micro-batch
 * counts 1, 2, 4 ... up to max_mbs that divide its share of the batch. */
#include "search_impl.h"

#include <string.h>

static PetscBool search_mesh_ok(int world, int rpn, int lo, int n)
{
  if (n == world) return lo == 0 ? PETSC_TRUE : PETSC_FALSE;
  if (lo % n) return PETSC_FALSE;
  if (n < rpn) return rpn % n == 0 ? PETSC_TRUE : PETSC_FALSE;
  return n % rpn == 0 ? PETSC_TRUE : PETSC_FALSE;
}

static PetscErrorCode search_meshes(SearchSpace sp)
{
  int world = sp->spec.world, rpn = sp->spec.ranks_per_node, k = 0;

  PetscFunctionBegin;
  for (int pass = 0; pass < 2; pass++) { /* count, then fill */
    k = 0;
    for (int n = 1; n <= world; n++)
      for (int lo = 0; lo + n <= world; lo++)
        if (search_mesh_ok(world, rpn, lo, n)) {
          if (pass) sp->mesh[k] = (SearchMesh){lo, n};
          k++;
        }
    if (!pass) PetscCall(PetscMalloc1(k, &sp->mesh));
  }
  sp->nmesh = k;
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* The strategies of call c on n ranks (none: the call cannot use such a mesh). */
static PetscErrorCode search_strategies(SearchSpace sp, MFCId c, int n)
{
  const ModelConfig *cfg = sp->needs.cfg[c];
  int              batch = sp->needs.batch[c], k = 0;

  PetscFunctionBegin;
  for (int pass = 0; pass < 2; pass++) {
    k = 0;
    for (int tp = 1; tp <= n && tp <= sp->spec.ranks_per_node; tp++) {
      if (n % tp || !model_tp_divides(cfg, tp)) continue;
      for (int pp = 1; pp <= n / tp && pp <= cfg->n_layer; pp++) {
        int dp = n / tp / pp;

        if ((n / tp) % pp) continue;
        for (int mbs = 1; mbs <= sp->spec.max_mbs; mbs *= 2) {
          if (batch % (dp * mbs)) continue;
          if (pass) sp->strat[c][n][k] = (SearchStrat){dp, tp, pp, mbs};
          k++;
        }
      }
    }
    if (!pass && k) PetscCall(PetscMalloc1(k, &sp->strat[c][n]));
  }
  sp->nstrat[c][n] = k;
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode search_space_create(const SearchSpaceSpec *spec, SearchSpace *out)
{
  SearchSpace sp;

  PetscFunctionBegin;
  PetscCheck(spec->world >= 1 && spec->world <= PLAN_MAX_RANKS, PETSC_COMM_SELF, PETSC_ERR_ARG_OUTOFRANGE,
             "-plan_ranks %d: a plan is for 1 to %d ranks", spec->world, PLAN_MAX_RANKS);
  PetscCheck(spec->ranks_per_node >= 1, PETSC_COMM_SELF, PETSC_ERR_ARG_OUTOFRANGE,
             "plan search: %d ranks per node (the primitives' ranks_per_node) must be at least 1",
             spec->ranks_per_node);
  PetscCheck(spec->max_mbs >= 1, PETSC_COMM_SELF, PETSC_ERR_ARG_OUTOFRANGE, "-plan_max_mbs %d must be at least 1",
             spec->max_mbs);
  PetscCall(PetscNew(&sp));
  sp->spec       = *spec;
  sp->needs      = *spec->needs;
  sp->spec.needs = &sp->needs;
  PetscCall(search_meshes(sp));
  for (int c = 0; c < MFC_COUNT; c++) {
    if (!sp->needs.cfg[c]) continue;
    sp->call[sp->ncall++] = (MFCId)c;
    PetscCall(PetscCalloc1(spec->world + 1, &sp->nstrat[c]));
    PetscCall(PetscCalloc1(spec->world + 1, &sp->strat[c]));
    for (int m = 0; m < sp->nmesh; m++) /* meshes come in ascending size */
      if (!m || sp->mesh[m].n != sp->mesh[m - 1].n) PetscCall(search_strategies(sp, (MFCId)c, sp->mesh[m].n));
  }
  if (spec->settings) {
    sp->set[sp->nset++] = SEARCH_SET_OFFLOAD;
    sp->set[sp->nset++] = SEARCH_SET_ZERO1;
  }
  if (spec->fusion && sp->needs.cfg[MFC_ACTOR_GEN] && sp->needs.cfg[MFC_REF_INF]) sp->set[sp->nset++] = SEARCH_SET_FUSE;
  if (spec->fusion && sp->needs.cfg[MFC_ACTOR_TRAIN] && sp->needs.cfg[MFC_CRITIC_TRAIN])
    sp->set[sp->nset++] = SEARCH_SET_FUSE_TRAIN;
  *out = sp;
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode search_space_destroy(SearchSpace *psp)
{
  SearchSpace sp = *psp;

  PetscFunctionBegin;
  if (!sp) PetscFunctionReturn(PETSC_SUCCESS);
  for (int c = 0; c < MFC_COUNT; c++) {
    if (!sp->strat[c]) continue;
    for (int n = 0; n <= sp->spec.world; n++) PetscCall(PetscFree(sp->strat[c][n]));
    PetscCall(PetscFree(sp->strat[c]));
    PetscCall(PetscFree(sp->nstrat[c]));
  }
  PetscCall(PetscFree(sp->mesh));
  PetscCall(search_cache_destroy(&sp->cache));
  PetscCall(PetscFree(sp));
  *psp = NULL;
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* The calls' placements times the settings' combinations; with -fuse_train
 * searched, half of those combinations place critic_train by actor_train. */
static double search_placements(SearchSpace sp, PetscBool skip_critic)
{
  double size = 1;

  for (int i = 0; i < sp->ncall; i++) {
    double n = 0;

    if (skip_critic && sp->call[i] == MFC_CRITIC_TRAIN) continue;
    for (int m = 0; m < sp->nmesh; m++) n += sp->nstrat[sp->call[i]][sp->mesh[m].n];
    size *= n;
  }
  return size;
}

double search_space_size(SearchSpace sp)
{
  double others = 1;
  int    fused  = 0;

  for (int k = 0; k < sp->nset; k++) {
    if (sp->set[k] == SEARCH_SET_FUSE_TRAIN) fused = 1;
    else others *= search_states(sp->set[k]);
  }
  return others * (search_placements(sp, PETSC_FALSE) + (fused ? search_placements(sp, PETSC_TRUE) : 0));
}

/* ---- plan edits ------------------------------------------------------------ */
static PetscBool search_inference(MFCId c)
{
  return c == MFC_REF_INF || c == MFC_REW_INF || c == MFC_CRITIC_INF ? PETSC_TRUE : PETSC_FALSE;
}

void search_put(Plan *plan, MFCId c, const SearchMesh *m, const SearchStrat *s)
{
  PlanCall *call = &plan->call[c];

  call->nranks = m->n;
  for (int i = 0; i < m->n; i++) call->ranks[i] = m->lo + i;
  call->dp  = s->dp;
  call->tp  = s->tp;
  call->pp  = s->pp;
  call->mbs = s->mbs;
  /* fused, an inference replica of several ranks streams as one, so the
   * inference calls sharing its ranks must share its layout (the plan
   * check's rule): they follow this one, keeping their micro-batches */
  if (plan->fuse == FUSE_NONE || !search_inference(c)) return;
  for (int k = MFC_REF_INF; k <= MFC_CRITIC_INF; k++) {
    PlanCall *o = &plan->call[k];

    if (k == (int)c || !search_inference((MFCId)k) || !o->nranks || plan_shared_rank(o, call) < 0 ||
        (o->tp * o->pp == 1 && call->tp * call->pp == 1))
      continue;
    o->nranks = call->nranks;
    for (int i = 0; i < call->nranks; i++) o->ranks[i] = call->ranks[i];
    o->dp = call->dp, o->tp = call->tp, o->pp = call->pp;
  }
}

void search_flip(Plan *plan, SearchSetting k)
{
  switch (k) {
  case SEARCH_SET_OFFLOAD: plan->offload = !plan->offload; break;
  case SEARCH_SET_ZERO1: plan->zero1 = !plan->zero1; break;
  case SEARCH_SET_FUSE: plan->fuse = (FuseMode)((plan->fuse + 1) % 3); break; /* none -> stream -> migrate -> none */
  case SEARCH_SET_FUSE_TRAIN: plan->fuse_train = !plan->fuse_train; break;
  }
}

PetscBool search_derived(const Plan *plan, MFCId c)
{
  return c == MFC_CRITIC_TRAIN && plan->fuse_train ? PETSC_TRUE : PETSC_FALSE;
}

void search_derive(SearchSpace sp, Plan *plan)
{
  const PlanCall *a = &plan->call[MFC_ACTOR_TRAIN];
  PlanCall       *c = &plan->call[MFC_CRITIC_TRAIN];
  int             k = 0;

  /* the critic with the actor's stage count, one copy, stages reversed (as
   * -fuse_train derives it); a non-pipeline actor is left to plan_check */
  if (plan->fuse_train && a->pp == a->nranks) {
    c->nranks = a->nranks;
    c->dp = c->tp = 1;
    c->pp = a->pp;
    for (int t = 0; t < a->pp; t++) c->ranks[t] = a->ranks[a->pp - 1 - t];
    if (!c->mbs) c->mbs = a->mbs;
  }
  for (int i = 0; i < plan->nconc; i++) {
    int x = plan->conc[i][0], y = plan->conc[i][1];

    if (sp->needs.cfg[x] && sp->needs.cfg[y] && plan_overlap(plan, (MFCId)x, (MFCId)y)) continue;
    plan->conc[k][0] = x;
    plan->conc[k][1] = y;
    k++;
  }
  plan->nconc = k;
}
