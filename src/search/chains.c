/* search: the annealing as independent chains in two groups. Group 0
 * searches the space without its fusion states (-fuse_gen_inf, -fuse_train
 * left as the start plans have them); group 1, present when the space has
 * fusion states, searches the whole space. Each group runs o->chains chains,
 * keyed (group, chain) so that a chain's draws never depend on the other
 * chains or on the threads; each group's best plan is polished, and the
 * better group's plan wins (group 0 on a tie). Group 0 is exactly the
 * search of the space built without the fusion states, so with an
 * iteration cap searching more states never returns a worse plan: a
 * larger space searched less densely can only add candidates. */
#include "search_impl.h"
#include "sys.h"

#include <math.h>
#include <omp.h>

#define SEARCH_GROUP_KEYS 1024 /* chain keys: group * SEARCH_GROUP_KEYS + chain */
/* Of a time budget, the chains take this share; the polishes may use the
 * rest (their tunings stop between two estimates once the budget is
 * spent: search_tune_until). */
#define SEARCH_ANNEAL_SHARE 0.75

typedef struct {
  struct SearchSpace_ view; /* the group's space, with the chain's own cache */
  SearchResult        res;
  PetscErrorCode      ierr;
} SearchChainRun;

static PetscBool search_fusion_setting(SearchSetting k)
{
  return k == SEARCH_SET_FUSE || k == SEARCH_SET_FUSE_TRAIN ? PETSC_TRUE : PETSC_FALSE;
}

/* The space of group g: group 0 without the fusion settings. */
static void search_group_view(SearchSpace sp, int g, struct SearchSpace_ *v)
{
  *v       = *sp;
  v->cache = NULL;
  if (g) return;
  v->nset        = 0;
  v->spec.fusion = PETSC_FALSE;
  for (int k = 0; k < sp->nset; k++)
    if (!search_fusion_setting(sp->set[k])) v->set[v->nset++] = sp->set[k];
}

static PetscBool search_space_has_fusion(SearchSpace sp)
{
  for (int k = 0; k < sp->nset; k++)
    if (search_fusion_setting(sp->set[k])) return PETSC_TRUE;
  return PETSC_FALSE;
}

/* PETSc's allocator and call stack are shared by the whole process; they
 * tolerate threads only in an optimized build without -malloc_debug (the
 * build rlfuse makes). Otherwise the chains run one after the other. */
static int search_threads(int nchains)
{
  PetscBool basic = PETSC_FALSE, each = PETSC_FALSE, nan = PETSC_FALSE;
  int       n     = omp_get_max_threads();

#if defined(PETSC_USE_DEBUG) && !defined(PETSC_HAVE_THREADSAFETY)
  n = 1;
#endif
  if (PetscMallocGetDebug(&basic, &each, &nan) || basic || each) n = 1;
  return PetscMax(1, PetscMin(n, nchains));
}

/* The start plans that pass plan_check, best first (stable), and their
 * estimates. */
static PetscErrorCode search_order_starts(SearchSpace sp, SearchObjective f, void *ctx, const Plan *start, int nstart,
                                          Plan *plan, CostEstimate *est, int *order, int *nok)
{
  PetscFunctionBegin;
  *nok = 0;
  for (int i = 0; i < nstart; i++) {
    PetscBool ok;
    int       j;

    plan[i] = start[i];
    search_derive(sp, &plan[i]);
    PetscCall(search_evaluate(sp, f, ctx, &plan[i], &ok, &est[i]));
    if (!ok) continue;
    for (j = *nok; j > 0 && search_cost(&est[i]) < search_cost(&est[order[j - 1]]); j--) order[j] = order[j - 1];
    order[j] = i;
    (*nok)++;
  }
  PetscCheck(*nok > 0, PETSC_COMM_SELF, PETSC_ERR_ARG_INCOMP,
             "plan search: none of the %d start plans (%s ...) passes the plan checks for this job", nstart,
             nstart ? start[0].source : "none");
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode search_chain_run(SearchSpace sp, SearchObjective f, void *ctx, const Plan *start,
                                       const CostEstimate *est, const SearchOptions *o, uint32_t key, double budget_s,
                                       SearchChainRun *r)
{
  PetscFunctionBegin;
  PetscCall(search_cache_clone(sp, &r->view.cache));
  PetscCall(search_chain(&r->view, f, ctx, start, est, o, key, budget_s, &r->res));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* After an error on a chain's thread: every chain's cache and the arrays
 * freed, then the error raised again on this thread with the code of the
 * first failed chain (in chain order) and the message of the first error
 * raised (in time; the two differ only when several chains fail). */
static PetscErrorCode search_chains_fail(SearchChainRun *run, int n, Plan *splan, CostEstimate *sest, int *order,
                                         PetscErrorCode ierr, const char *message)
{
  PetscFunctionBegin;
  for (int i = 0; i < n; i++) PetscCall(search_cache_destroy(&run[i].view.cache));
  PetscCall(PetscFree4(splan, sest, order, run));
  SETERRQ(PETSC_COMM_SELF, ierr, "%s", message[0] ? message : "plan search: a chain failed (no message)");
}

/* The first error of the chains (0: none). */
static PetscErrorCode search_chains_error(const SearchChainRun *run, const int *which, int n)
{
  for (int i = 0; i < n; i++)
    if (run[which ? which[i] : i].ierr) return run[which ? which[i] : i].ierr;
  return 0;
}

PetscErrorCode search_anneal(SearchSpace sp, SearchObjective f, void *ctx, const Plan *start, int nstart,
                             const SearchOptions *o, SearchResult *res)
{
  SearchChainRun *run;
  Plan           *splan;
  CostEstimate   *sest;
  int            *order, nok, ngroup, n, nthr, best[2] = {-1, -1}, win;
  double          t0 = sys_wtime(), budget = 0;
  PetscErrorCode  ierr;
  const char     *message;

  PetscFunctionBegin;
  PetscCheck(o->max_iter > 0 || o->time_s > 0, PETSC_COMM_SELF, PETSC_ERR_ARG_WRONG,
             "plan search: give -plan_iterations or -plan_time (neither would never stop)");
  PetscCheck(o->max_iter >= 0 && o->t_start > 0 && o->t_end > 0 && o->t_end <= o->t_start, PETSC_COMM_SELF,
             PETSC_ERR_ARG_OUTOFRANGE,
             "plan search: -plan_iterations %ld must be >= 0 and the temperatures 0 < end %g <= start %g", o->max_iter,
             o->t_end, o->t_start);
  PetscCheck(o->chains >= 1 && o->chains <= SEARCH_GROUP_KEYS, PETSC_COMM_SELF, PETSC_ERR_ARG_OUTOFRANGE,
             "plan search: -plan_chains %d must be in 1..%d", o->chains, SEARCH_GROUP_KEYS);
  PetscCall(PetscMemzero(res, sizeof *res));
  PetscCall(PetscCalloc4(nstart, &splan, nstart, &sest, nstart, &order, 2 * o->chains, &run));
  ierr = search_order_starts(sp, f, ctx, start, nstart, splan, sest, order, &nok);
  if (ierr) {
    PetscCall(PetscFree4(splan, sest, order, run));
    PetscCall(ierr);
  }
  ngroup = search_space_has_fusion(sp) ? 2 : 1;
  n      = ngroup * o->chains;
  nthr   = search_threads(n);
  /* the chains run in waves of nthr; each gets its wave's share */
  if (o->time_s > 0) budget = SEARCH_ANNEAL_SHARE * o->time_s / (double)((n + nthr - 1) / nthr);
  /* chain i: group i % ngroup (the groups alternate, so that under a time
   * budget both progress), chain i / ngroup in it */
  PetscCall(search_catch_begin());
#pragma omp parallel for schedule(dynamic, 1) num_threads(nthr)
  for (int i = 0; i < n; i++) {
    int g = i % ngroup, c = i / ngroup, s = order[c % nok];

    search_group_view(sp, g, &run[i].view);
    run[i].ierr = search_chain_run(sp, f, ctx, &splan[s], &sest[s], o, (uint32_t)(g * SEARCH_GROUP_KEYS + c), budget,
                                   &run[i]);
    run[i].res.start = s;
  }
  PetscCall(search_catch_end(&message));
  if ((ierr = search_chains_error(run, NULL, n)))
    PetscCall(search_chains_fail(run, n, splan, sest, order, ierr, message));
  for (int i = 0; i < n; i++) { /* each group's best chain, the first on ties */
    int g = i % ngroup;

    if (best[g] < 0 || search_cost(&run[i].res.est) < search_cost(&run[best[g]].res.est)) best[g] = i;
    res->iters += run[i].res.iters, res->accepted += run[i].res.accepted, res->improved += run[i].res.improved;
    res->refused_check += run[i].res.refused_check, res->refused_infeasible += run[i].res.refused_infeasible;
    res->timed_out = (PetscBool)(res->timed_out || run[i].res.timed_out);
  }
  for (int i = 0; i < n; i++) /* only the two polished chains keep their caches */
    if (i != best[0] && (ngroup < 2 || i != best[1])) {
      search_cache_count(sp, run[i].view.cache);
      PetscCall(search_cache_destroy(&run[i].view.cache));
    }
  /* pairs of flips only where the space is small: each costs a tuning */
  PetscCall(search_catch_begin());
#pragma omp parallel for schedule(static, 1) num_threads(PetscMin(nthr, ngroup))
  for (int g = 0; g < ngroup; g++) {
    SearchChainRun *r = &run[best[g]];

    r->ierr = search_polish(&r->view, f, ctx, sp->spec.world <= 8 ? PETSC_TRUE : PETSC_FALSE,
                            o->time_s > 0 ? t0 + o->time_s : INFINITY, &r->res.plan, &r->res.est, &r->res);
  }
  PetscCall(search_catch_end(&message));
  if ((ierr = search_chains_error(run, best, ngroup)))
    PetscCall(search_chains_fail(run, n, splan, sest, order, ierr, message));
  /* the best fused plan any chain or polish saw, tuned within the budget
   * (reported beside the winner; the polish's are tuned already) */
  for (int i = 0; i < n; i++)
    if (run[i].res.has_fused &&
        (!res->has_fused || search_cost(&run[i].res.fused_est) < search_cost(&res->fused_est))) {
      res->has_fused = PETSC_TRUE;
      res->fused     = run[i].res.fused;
      res->fused_est = run[i].res.fused_est;
    }
  if (res->has_fused && (o->time_s <= 0 || sys_wtime() < t0 + o->time_s)) {
    CostEstimate tuned;
    Plan         t = res->fused;

    PetscCall(search_tune_until(sp, f, ctx, o->time_s > 0 ? t0 + o->time_s : INFINITY, &t, &tuned));
    if (search_cost(&tuned) < search_cost(&res->fused_est)) res->fused = t, res->fused_est = tuned;
  }
  win = ngroup > 1 && search_cost(&run[best[1]].res.est) < search_cost(&run[best[0]].res.est) ? best[1] : best[0];
  res->plan        = run[win].res.plan;
  res->est         = run[win].res.est;
  res->start       = run[win].res.start;
  res->chains      = n;
  res->chain       = win / ngroup;
  res->fused_group = (PetscBool)(win % ngroup == 1);
  res->threads     = nthr;
  PetscCall(PetscSNPrintf(res->plan.source, sizeof res->plan.source, "search from %s", start[res->start].source));
  for (int g = 0; g < ngroup; g++) {
    search_cache_count(sp, run[best[g]].view.cache);
    PetscCall(search_cache_destroy(&run[best[g]].view.cache));
  }
  res->seconds = sys_wtime() - t0;
  PetscCall(PetscFree4(splan, sest, order, run));
  PetscFunctionReturn(PETSC_SUCCESS);
}
