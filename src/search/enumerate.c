/* search: the exhaustive search (every plan of a small space, to check the
 * annealing against) and the call-by-call tuning that turns a preset into
 * the heuristic plan the search is compared with. */
#include "search_impl.h"

#include <math.h>

typedef struct {
  SearchSpace     sp;
  SearchObjective f;
  void           *ctx;
  Plan           *plan; /* the plan being built */
  SearchResult   *res;
  double          best;
} SearchEnum;

/* Keeps plan if it is better than the best so far (ties: the first). */
static PetscErrorCode search_enum_leaf(SearchEnum *e)
{
  CostEstimate est;
  PetscBool    ok;
  Plan        *p = e->plan;

  PetscFunctionBegin;
  search_derive(e->sp, p);
  e->res->iters++;
  PetscCall(search_evaluate(e->sp, e->f, e->ctx, p, &ok, &est));
  if (!ok) {
    e->res->refused_check++;
    PetscFunctionReturn(PETSC_SUCCESS);
  }
  if (!est.feasible) e->res->refused_infeasible++;
  if (est.feasible && search_cost(&est) < e->best) {
    e->best     = search_cost(&est);
    e->res->plan = *p;
    e->res->est  = est;
    e->res->improved++;
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode search_enum_calls(SearchEnum *e, int i)
{
  SearchSpace sp = e->sp;
  MFCId       c;

  PetscFunctionBegin;
  if (i == sp->ncall) PetscFunctionReturn(search_enum_leaf(e));
  c = sp->call[i];
  if (search_derived(e->plan, c)) PetscFunctionReturn(search_enum_calls(e, i + 1));
  for (int m = 0; m < sp->nmesh; m++) {
    int n = sp->mesh[m].n;

    for (int s = 0; s < sp->nstrat[c][n]; s++) {
      search_put(e->plan, c, &sp->mesh[m], &sp->strat[c][n][s]);
      PetscCall(search_enum_calls(e, i + 1));
    }
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Every combination of the settings searched, each over every placement. */
static PetscErrorCode search_enum_settings(SearchEnum *e, int k)
{
  PetscFunctionBegin;
  if (k >= e->sp->nset || k >= 4)
    PetscFunctionReturn(search_enum_calls(e, 0));             /* (4: the settings there are; tells the compiler too) */
  for (int st = 0; st < search_states(e->sp->set[k]); st++) { /* each state once, then back to the first */
    PetscCall(search_enum_settings(e, k + 1));
    search_flip(e->plan, e->sp->set[k]);
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode search_enumerate(SearchSpace sp, SearchObjective f, void *ctx, const Plan *base, double limit,
                                SearchResult *res)
{
  SearchEnum e = {sp, f, ctx, NULL, res, INFINITY};

  PetscFunctionBegin;
  PetscCheck(search_space_size(sp) <= limit, PETSC_COMM_SELF, PETSC_ERR_ARG_OUTOFRANGE,
             "plan enumeration: %g plans, more than the limit %g", search_space_size(sp), limit);
  PetscCall(PetscMemzero(res, sizeof *res));
  PetscCall(PetscMalloc1(1, &e.plan));
  *e.plan = *base;
  PetscCall(search_enum_settings(&e, 0));
  PetscCall(PetscFree(e.plan));
  PetscCheck(isfinite(e.best), PETSC_COMM_SELF, PETSC_ERR_ARG_INCOMP,
             "plan enumeration: none of the %ld plans is feasible", res->iters);
  PetscCall(PetscSNPrintf(res->plan.source, sizeof res->plan.source, "enumeration of %ld plans", res->iters));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Every call whose strategy is not valid on its mesh (a preset's dp over
 * all ranks not dividing the mini-batch) gets the first valid one, the
 * least model parallelism: tuning changes one call at a time and could not
 * repair two broken calls. */
static void search_valid_strategies(SearchSpace sp, Plan *plan)
{
  for (int i = 0; i < sp->ncall; i++) {
    MFCId       c = sp->call[i];
    PlanCall   *k = &plan->call[c];
    SearchMesh  m = {k->ranks[0], k->nranks};
    PetscBool   valid = PETSC_FALSE;

    if (search_derived(plan, c) || k->ranks[m.n - 1] != m.lo + m.n - 1 || !sp->nstrat[c][m.n]) continue;
    for (int s = 0; s < sp->nstrat[c][m.n] && !valid; s++) {
      const SearchStrat *t = &sp->strat[c][m.n][s];
      valid = t->dp == k->dp && t->tp == k->tp && t->pp == k->pp && (t->mbs == k->mbs || !k->mbs) ? PETSC_TRUE
                                                                                                  : PETSC_FALSE;
    }
    if (!valid) search_put(plan, c, &m, &sp->strat[c][m.n][0]);
  }
}

PetscErrorCode search_tune(SearchSpace sp, SearchObjective f, void *ctx, Plan *plan, CostEstimate *est)
{
  PetscFunctionBegin;
  PetscCall(search_tune_until(sp, f, ctx, INFINITY, plan, est));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* The tuning's sweeps, in the caller's candidate plan. */
static PetscErrorCode search_tune_in(SearchSpace sp, SearchObjective f, void *ctx, double deadline, Plan *plan,
                                     CostEstimate *est, Plan *cand)
{
  CostEstimate e;
  PetscBool    ok, cut = PETSC_FALSE;
  double       best;

  PetscFunctionBegin;
  search_valid_strategies(sp, plan);
  search_derive(sp, plan);
  PetscCall(search_evaluate(sp, f, ctx, plan, &ok, est));
  best = ok ? search_cost(est) : INFINITY;
  for (int sweep = 0; sweep < 2 && !cut; sweep++)
    for (int i = 0; i < sp->ncall && !cut; i++) {
      MFCId      c = sp->call[i];
      SearchMesh m = {plan->call[c].ranks[0], plan->call[c].nranks};

      /* a preset's mesh that is not a contiguous range keeps its strategy */
      if (search_derived(plan, c) || plan->call[c].ranks[m.n - 1] != m.lo + m.n - 1) continue;
      for (int s = 0; s < sp->nstrat[c][m.n]; s++) {
        if (isfinite(deadline) && sys_wtime() > deadline) {
          cut = PETSC_TRUE;
          break;
        }
        *cand = *plan;
        search_put(cand, c, &m, &sp->strat[c][m.n][s]);
        search_derive(sp, cand);
        PetscCall(search_evaluate(sp, f, ctx, cand, &ok, &e));
        if (ok && search_cost(&e) < best) best = search_cost(&e), *plan = *cand, *est = e;
      }
    }
  if (!isfinite(best)) { /* no plan passed the checks: infinitely bad */
    est->feasible = PETSC_FALSE;
    est->mem_max  = INFINITY;
    PetscCall(PetscSNPrintf(est->why, sizeof est->why,
                            cut ? "refused by the plan checks with the strategies tried within -plan_time"
                                : "refused by the plan checks, whatever the strategies"));
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode search_tune_until(SearchSpace sp, SearchObjective f, void *ctx, double deadline, Plan *plan,
                                 CostEstimate *est)
{
  Plan          *cand;
  PetscErrorCode ierr;

  PetscFunctionBegin;
  PetscCall(PetscMalloc1(1, &cand));
  ierr = search_tune_in(sp, f, ctx, deadline, plan, est, cand);
  PetscCall(PetscFree(cand));
  PetscCall(ierr);
  PetscFunctionReturn(PETSC_SUCCESS);
}
