/* search: one chain of simulated annealing over plans (chains.c runs
 * several and keeps the best). The state is a whole plan; a move changes
 * one thing (a call's mesh with a fresh strategy for it, a call's strategy
 * on its mesh, or one setting). A worse plan is accepted with probability
 * exp(-(new - old) / T), in floating point seconds, with T cooling
 * geometrically from t_start to t_end times the start plan's time over the
 * iteration cap. (ReaLHF's public search divided integers here, so any plan
 * less than 100 s worse was always accepted: a random walk.) Plans that
 * plan_check refuses, and infeasible plans once a feasible one is held, are
 * rejected. The best plan seen is kept; search_polish then flips settings
 * around it with search_tune. */
#include "search_impl.h"
#include "sys.h"

#include <math.h>
#include <string.h>

#define SEARCH_STREAM                                                                                                  \
  0x5EA2C4u /* the annealing's draws: (seed, SEARCH_STREAM, iteration, 2 * chain key (+1: acceptance)) */

void search_options_default(SearchOptions *o)
{
  o->seed     = 1;
  o->max_iter = 20000;
  o->time_s   = 0;
  o->t_start  = 0.3;
  o->t_end    = 1e-4;
  o->chains   = 2;
}

double search_cost(const CostEstimate *est)
{
  double mem = 0;
  if (est->feasible) return est->iter_s;
  /* infeasible: worse than any feasible plan, and the less memory every
   * call needs the better (the sum, not the largest: a move that shrinks
   * one call while another stays the fullest must still count, or the
   * tuning of a plan where nothing fits never gets anywhere) */
  for (int c = 0; c < MFC_COUNT; c++) mem += est->mem_call[c];
  return 1e6 + (mem > 0 ? mem : est->mem_max) / 1e9;
}

/* -fuse_train switched on: actor_train becomes a pure pipeline over its
 * mesh (what fusion needs); switched off: critic_train takes actor_train's
 * mesh and strategy. Without this the flip alone would almost always be
 * refused or far uphill, and the fused and unfused regions of the space
 * would hardly connect. */
static void search_fuse_train_layout(SearchSpace sp, Plan *plan)
{
  PlanCall  *a = &plan->call[MFC_ACTOR_TRAIN];
  SearchMesh m = {a->ranks[0], a->nranks};

  if (!plan->fuse_train) {
    plan->call[MFC_CRITIC_TRAIN] = *a;
    return;
  }
  for (int s = 0; s < sp->nstrat[MFC_ACTOR_TRAIN][m.n]; s++) {
    const SearchStrat *st = &sp->strat[MFC_ACTOR_TRAIN][m.n][s];

    if (st->pp == m.n && (st->mbs == a->mbs || !a->mbs)) {
      search_put(plan, MFC_ACTOR_TRAIN, &m, st);
      return;
    }
  }
}

/* -fuse_gen_inf stream or migrate switched on. The inference layouts stay
 * when they can fuse as placed (replicas of any size; calls that share a
 * rank of a replica of several ranks have one layout; with migrate, such
 * a replica wholly inside or wholly outside generation). Otherwise the
 * inference calls become one-rank replicas (tp 1, pp 1) on their meshes;
 * without this, the flip would only pass the checks where all already
 * were. Generation keeps its layout: the long tail moves between replicas
 * of any tp and pp. Migrate's R_t is auto: the cost model
 * simulates the candidates as the run does and takes the best. */
static void search_stream_layout(SearchSpace sp, Plan *plan)
{
  const MFCId inf[3] = {MFC_REF_INF, MFC_REW_INF, MFC_CRITIC_INF};

  if (plan->fuse == FUSE_NONE) return;
  if (plan->fuse == FUSE_MIGRATE) plan->migrate_at = -1;
  if (plan_stream_conflict(plan, &sp->needs, NULL, NULL) < 0 &&
      (plan->fuse == FUSE_STREAM || plan_migrate_split(plan, &sp->needs, NULL, NULL, NULL) < 0))
    return;
  for (int k = 0; k < 3; k++) {
    PlanCall  *c = &plan->call[inf[k]];
    SearchMesh m = {c->ranks[0], c->nranks};

    if (!sp->needs.cfg[inf[k]] || c->ranks[m.n - 1] != m.lo + m.n - 1) continue;
    for (int s = 0; s < sp->nstrat[inf[k]][m.n]; s++) {
      const SearchStrat *t = &sp->strat[inf[k]][m.n][s];

      if (t->tp == 1 && t->pp == 1) {
        search_put(plan, inf[k], &m, t);
        break;
      }
    }
  }
}

/* A setting flipped, with the layout it needs. */
static void search_flip_layout(SearchSpace sp, Plan *plan, SearchSetting k)
{
  search_flip(plan, k);
  if (k == SEARCH_SET_FUSE_TRAIN) search_fuse_train_layout(sp, plan);
  if (k == SEARCH_SET_FUSE) search_stream_layout(sp, plan);
}

/* Draws move `it` of the chain keyed `key` into cand (a copy of the
 * current plan); false: the move is void (a mesh the call has no strategy
 * for). */
static PetscBool search_move(SearchSpace sp, uint64_t seed, uint32_t key, long it, Plan *cand)
{
  uint32_t r[4];
  int      kind;
  MFCId    c;

  for (int l = 0; l < 4; l++) r[l] = rng_u32(seed, SEARCH_STREAM, (uint32_t)it, 2 * key, (uint32_t)l);
  kind = (int)(r[0] % 10);
  if (kind >= 8 && sp->nset) {
    search_flip_layout(sp, cand, sp->set[r[2] % (uint32_t)sp->nset]);
  } else {
    const SearchMesh *m;
    SearchMesh        here;
    int               ns;

    c = sp->call[r[1] % (uint32_t)sp->ncall];
    if (search_derived(cand, c)) c = MFC_ACTOR_TRAIN;
    if (kind < 4) m = &sp->mesh[r[2] % (uint32_t)sp->nmesh];
    else { /* a strategy on the call's own (contiguous) mesh */
      here = (SearchMesh){cand->call[c].ranks[0], cand->call[c].nranks};
      m    = &here;
    }
    ns = sp->nstrat[c][m->n];
    if (!ns) return PETSC_FALSE;
    search_put(cand, c, m, &sp->strat[c][m->n][r[3] % (uint32_t)ns]);
  }
  search_derive(sp, cand);
  return PETSC_TRUE;
}

/* The end of the search: one setting moved to each of its other states
 * (-fuse_gen_inf from none to stream and to migrate), or two settings
 * flipped together, each followed by search_tune, for as long as that
 * improves the plan. Settings
 * interact through memory (ZeRO-1 may be what lets offloading stop) and
 * through the layouts they need (-fuse_train a pipeline), so a single flip
 * at a low temperature is often refused where the pair with retuned
 * strategies is better. Pairs are tried on small jobs only (up to 8 ranks):
 * each costs a tuning, hundreds of estimates on a large job. */
/* The best fused plan seen is kept in seen: a feasible one before any
 * infeasible one (whose estimate says why it does not fit). */
static void search_seen_fused(SearchResult *seen, const Plan *plan, const CostEstimate *est)
{
  if (!seen || (plan->fuse == FUSE_NONE && !plan->fuse_train) || !isfinite(search_cost(est)))
    return; /* (infinite: no strategy passes the checks) */
  if (seen->has_fused && search_cost(est) >= search_cost(&seen->fused_est)) return;
  seen->has_fused = PETSC_TRUE;
  seen->fused     = *plan;
  seen->fused_est = *est;
}

static PetscErrorCode search_polish_in(SearchSpace sp, SearchObjective f, void *ctx, PetscBool pairs, double deadline,
                                       Plan *plan, CostEstimate *est, SearchResult *seen, Plan *cand)
{
  CostEstimate e;
  PetscBool    better = PETSC_TRUE;

  PetscFunctionBegin;
  PetscCall(search_tune_until(sp, f, ctx, deadline, plan, est));
  while (better && sys_wtime() < deadline) {
    better = PETSC_FALSE;
    for (int i = 0; i < sp->nset && !better; i++)
      for (int st = 1; st < search_states(sp->set[i]) && !better; st++) /* every other state of the setting */
        for (int j = i; j < (pairs && st == 1 ? sp->nset : i + 1) && !better && sys_wtime() < deadline; j++) {
          *cand = *plan;
          for (int k = 0; k < st; k++) search_flip_layout(sp, cand, sp->set[i]);
          if (j != i) search_flip_layout(sp, cand, sp->set[j]);
          PetscCall(search_tune_until(sp, f, ctx, deadline, cand, &e));
          search_seen_fused(seen, cand, &e);
          if (search_cost(&e) < search_cost(est)) *plan = *cand, *est = e, better = PETSC_TRUE;
        }
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode search_polish(SearchSpace sp, SearchObjective f, void *ctx, PetscBool pairs, double deadline, Plan *plan,
                             CostEstimate *est, SearchResult *seen)
{
  Plan          *cand;
  PetscErrorCode ierr;

  PetscFunctionBegin;
  PetscCall(PetscMalloc1(1, &cand));
  ierr = search_polish_in(sp, f, ctx, pairs, deadline, plan, est, seen, cand);
  PetscCall(PetscFree(cand));
  PetscCall(ierr);
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* The chain's loop, in the caller's two plans (freed on every path). */
static PetscErrorCode search_chain_in(SearchSpace sp, SearchObjective f, void *ctx, const Plan *start,
                                      const CostEstimate *start_est, const SearchOptions *o, uint32_t key,
                                      double budget_s, SearchResult *res, Plan *cur, Plan *cand)
{
  CostEstimate cur_est = *start_est, est;
  double       t0 = sys_wtime(), cur_cost, best_cost, scale, T, progress;

  PetscFunctionBegin;
  PetscCall(PetscMemzero(res, sizeof *res));
  *cur     = *start;
  cur_cost = best_cost = search_cost(&cur_est);
  res->plan = *cur;
  res->est  = cur_est;
  /* an infeasible start has no time to scale by: one second */
  scale = cur_est.feasible ? cur_est.iter_s : 1.0;
  for (long it = 0; !o->max_iter || it < o->max_iter; it++) {
    PetscBool ok;
    double    cost, d;

    if (budget_s > 0 && !(it % 16) && sys_wtime() - t0 > budget_s) {
      res->timed_out = PETSC_TRUE;
      break;
    }
    res->iters++;
    /* the schedule's progress: over the iteration cap (reproducible), or
     * without a cap over the time budget (depends on the machine's speed) */
    progress = o->max_iter > 0 ? (double)it / (double)o->max_iter : (sys_wtime() - t0) / budget_s;
    T = scale * o->t_start * pow(o->t_end / o->t_start, PetscMin(progress, 1.0));
    *cand = *cur;
    if (!search_move(sp, o->seed, key, it, cand)) continue;
    PetscCall(search_evaluate(sp, f, ctx, cand, &ok, &est));
    if (!ok) {
      res->refused_check++;
      continue;
    }
    search_seen_fused(res, cand, &est); /* accepted or not */
    if (!est.feasible && cur_est.feasible) {
      res->refused_infeasible++;
      continue;
    }
    cost = search_cost(&est);
    d    = cost - cur_cost;
    if (d > 0 && (double)rng_uniform(o->seed, SEARCH_STREAM, (uint32_t)it, 2 * key + 1, 0) >= exp(-d / T)) continue;
    res->accepted++;
    *cur = *cand, cur_est = est, cur_cost = cost;
    if (cost < best_cost) {
      res->improved++;
      best_cost = cost;
      res->plan = *cand;
      res->est  = est;
    }
  }
  res->seconds = sys_wtime() - t0;
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode search_chain(SearchSpace sp, SearchObjective f, void *ctx, const Plan *start,
                            const CostEstimate *start_est, const SearchOptions *o, uint32_t key, double budget_s,
                            SearchResult *res)
{
  Plan          *buf;
  PetscErrorCode ierr;

  PetscFunctionBegin;
  PetscCall(PetscMalloc1(2, &buf)); /* (plans are large for a thread's stack) */
  ierr = search_chain_in(sp, f, ctx, start, start_est, o, key, budget_s, res, &buf[0], &buf[1]);
  PetscCall(PetscFree(buf));
  PetscCall(ierr);
  PetscFunctionReturn(PETSC_SUCCESS);
}
