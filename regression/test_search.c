/* test_search: the plan search (src/search) against an exhaustive
 * enumeration. The objective here is a toy cost model written in this file
 * (calls cost work / parallelism with tp and pp overheads and pipeline
 * bubbles, overlapping meshes run one after another and disjoint ones side
 * by side, a reallocation when generation and training differ, a memory
 * limit per rank, and the two fusions), so the search is tested on its own,
 * independent of src/cost. On spaces small enough to enumerate (2 and 4
 * ranks) the annealing must find the enumerated optimum from each preset;
 * a seed gives the same plan twice; infeasible plans are never returned;
 * the time budget stops the search; tuning a preset never makes it worse.
 * Prints "ok - name" / "not ok - name: detail" and the tally (test_report.h).
 *
 * The checks in detail: the plan search (src/search) against an exhaustive enumeration of
 * spaces small enough to enumerate, with a toy objective written in the test: 2 ranks, four
 * calls, offload, ZeRO-1 and both fusions (6000 plans); 4 ranks, two calls, micro-batches and
 * a memory limit (4096 plans): the annealing from each preset alone ends at the enumerated
 * optimum; a seed gives the same plan twice; from a preset over the memory limit the search
 * ends feasible and refuses infeasible plans; tuning makes the preset fit; a tuning past its
 * deadline tries no strategy; a time budget stops it; an objective that fails inside a chain
 * comes back as that error with its message (and, in the sanitized build, nothing leaks).
 * Accepting every move, or running no iterations, fails it. Twelve short searches (5 to 40
 * iterations, 1 to 3 chains) of the fusion space: with the fusion states never worse than
 * without (the earlier single chain was worse in 2 of the 12), some plans from the chains with
 * fusion, and 3 chains per group give the same plan on 1 thread as on 2
 */
#include "search.h"
#include "test_report.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <string.h>

/* ---- the toy objective ------------------------------------------------------ */
typedef struct {
  double work[MFC_COUNT];   /* seconds on one rank */
  double params[MFC_COUNT]; /* memory of the call's model on one rank, GB */
  double mem_cap;           /* GB per rank */
  long   calls;
  long   fail_at;           /* > 0: the objective fails on this call */
} Toy;

static PetscBool toy_train(MFCId c) { return c == MFC_ACTOR_TRAIN || c == MFC_CRITIC_TRAIN ? PETSC_TRUE : PETSC_FALSE; }

static double toy_call(const Toy *t, const Plan *p, MFCId c)
{
  const PlanCall *k = &p->call[c];
  double          m = k->mbs ? k->mbs : 1;

  return t->work[c] / (k->dp * pow(k->tp, 0.8) * pow(k->pp, 0.9)) * (1 + (k->pp - 1) / m) + 0.02 * m + (k->tp > 1 ? 0.05 : 0);
}

/* Calls of one stage: those sharing ranks add up, groups on disjoint ranks
 * overlap (a greedy grouping, enough for a toy). */
static double toy_stage(const Plan *p, const double *t, const MFCId *c, int n)
{
  double group[MFC_COUNT] = {0}, worst = 0;
  int    of[MFC_COUNT];

  for (int i = 0; i < n; i++) {
    of[i] = i;
    for (int j = 0; j < i; j++)
      if (plan_overlap(p, c[i], c[j])) of[i] = of[j];
    group[of[i]] += t[c[i]];
  }
  for (int i = 0; i < n; i++) worst = PetscMax(worst, group[i]);
  return worst;
}

static PetscErrorCode toy_objective(void *ctx, const Plan *p, CostEstimate *est)
{
  Toy        *t = (Toy *)ctx;
  const MFCId inf[2] = {MFC_REF_INF, MFC_CRITIC_INF}, train[2] = {MFC_ACTOR_TRAIN, MFC_CRITIC_TRAIN};
  double      inf_s, train_s, mem[PLAN_MAX_RANKS] = {0};
  int         ninf = 0, ntrain = 0;
  MFCId       ic[2], tc[2];

  long        call;

  PetscFunctionBegin;
#pragma omp atomic capture
  call = ++t->calls; /* the chains run on several threads */
  PetscCheck(!t->fail_at || call != t->fail_at, PETSC_COMM_SELF, PETSC_ERR_LIB, "toy objective: failed on call %ld", call);
  est->feasible = PETSC_TRUE;
  for (int c = 0; c < MFC_COUNT; c++) {
    const PlanCall *k = &p->call[c];
    double          w;

    if (!t->work[c]) continue;
    est->call_s[c] = toy_call(t, p, (MFCId)c);
    /* weights sharded by tp x pp; training adds optimizer state (ZeRO-1: / dp);
     * offload keeps frozen inference weights off the device */
    w = t->params[c] / (k->tp * k->pp);
    if (toy_train((MFCId)c)) w += 2 * w / (p->zero1 ? k->dp : 1);
    else if (p->offload && c != MFC_ACTOR_GEN) w *= 0.25;
    for (int i = 0; i < k->nranks; i++) mem[k->ranks[i]] += w;
  }
  for (int k = 0; k < 2; k++) {
    if (t->work[inf[k]]) ic[ninf++] = inf[k];
    if (t->work[train[k]]) tc[ntrain++] = train[k];
  }
  inf_s   = toy_stage(p, est->call_s, ic, ninf);
  train_s = p->fuse_train ? 1.1 * PetscMax(est->call_s[MFC_ACTOR_TRAIN], est->call_s[MFC_CRITIC_TRAIN]) : toy_stage(p, est->call_s, tc, ntrain);
  est->iter_s = p->fuse == FUSE_STREAM ? PetscMax(est->call_s[MFC_ACTOR_GEN], 0.6 * est->call_s[MFC_ACTOR_GEN] + inf_s) : est->call_s[MFC_ACTOR_GEN] + inf_s;
  /* the actor's weights move between layouts unless both calls share one */
  {
    const PlanCall *g = &p->call[MFC_ACTOR_GEN], *a = &p->call[MFC_ACTOR_TRAIN];
    est->realloc_s = g->nranks == a->nranks && g->ranks[0] == a->ranks[0] && g->tp == a->tp && g->pp == a->pp ? 0 : 0.15;
  }
  est->iter_s += train_s + est->realloc_s + (p->offload ? 0.1 : 0);
  for (int r = 0; r < p->world; r++) est->mem_max = PetscMax(est->mem_max, mem[r] * 1e9);
  if (est->mem_max > t->mem_cap * 1e9) {
    est->feasible = PETSC_FALSE;
    PetscCall(PetscSNPrintf(est->why, sizeof est->why, "a rank needs %.1f GB", est->mem_max / 1e9));
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* ---- helpers -------------------------------------------------------------------- */
static PetscBool same_plan(const Plan *a, const Plan *b)
{
  if (a->offload != b->offload || a->zero1 != b->zero1 || a->fuse != b->fuse || a->fuse_train != b->fuse_train) return PETSC_FALSE;
  for (int c = 0; c < MFC_COUNT; c++) {
    const PlanCall *x = &a->call[c], *y = &b->call[c];
    if (x->nranks != y->nranks || x->dp != y->dp || x->tp != y->tp || x->pp != y->pp || x->mbs != y->mbs || memcmp(x->ranks, y->ranks, sizeof(int) * (size_t)x->nranks)) return PETSC_FALSE;
  }
  return PETSC_TRUE;
}

static PetscErrorCode presets(int world, Plan p[3])
{
  PetscFunctionBegin;
  for (int k = 0; k < 3; k++) PetscCall(plan_preset(world, (Placement)k, 0, &p[k]));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* One setting: enumerate, then anneal from each preset alone. */
static PetscErrorCode check_space(const char *what, SearchSpace sp, Toy *toy, int world, double limit)
{
  SearchResult  ex, an, again;
  SearchOptions o;
  Plan          start[3];
  char          name[256], detail[512];

  PetscFunctionBegin;
  PetscCall(presets(world, start));
  PetscCall(search_enumerate(sp, toy_objective, toy, &start[0], limit, &ex));
  snprintf(name, sizeof name, "%s: enumeration visits all %g plans and finds a feasible optimum", what, search_space_size(sp));
  snprintf(detail, sizeof detail, "visited %ld, optimum %g s feasible %d", ex.iters, ex.est.iter_s, (int)ex.est.feasible);
  test_report((PetscBool)(ex.iters == (long)search_space_size(sp) && ex.est.feasible), name, "%s", detail);
  search_options_default(&o);
  for (int k = 0; k < 3; k++) {
    o.seed = 7 + (uint64_t)k;
    PetscCall(search_anneal(sp, toy_objective, toy, &start[k], 1, &o, &an));
    snprintf(name, sizeof name, "%s: annealing from the %s preset finds the optimum %.6f s", what, PlacementNames[k], ex.est.iter_s);
    snprintf(detail, sizeof detail, "found %.6f s after %ld iterations (%ld accepted, %ld refused by plan_check)", an.est.iter_s, an.iters, an.accepted, an.refused_check);
    test_report((PetscBool)(an.est.feasible && fabs(an.est.iter_s - ex.est.iter_s) <= 1e-12 * ex.est.iter_s), name, "%s", detail);
  }
  PetscCall(search_anneal(sp, toy_objective, toy, start, 3, &o, &an));
  PetscCall(search_anneal(sp, toy_objective, toy, start, 3, &o, &again));
  snprintf(name, sizeof name, "%s: a seed gives the same plan twice", what);
  test_report((PetscBool)(same_plan(&an.plan, &again.plan) && an.est.iter_s == again.est.iter_s && an.accepted == again.accepted), name, "two runs with one seed differ");
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* The space of spec with and without the fusion states, searched with the
 * same short iteration caps and seeds: the search with them is never
 * worse; and a seed gives the same plan on 1 thread as on 2 (with 3
 * chains per group, so the threads finish chains out of order). */
static PetscErrorCode check_never_worse(SearchSpaceSpec spec, Toy *toy)
{
  SearchSpace   with, without;
  SearchOptions o;
  SearchResult  a, b, one;
  Plan          start[3];
  int           worse = 0, fused = 0, same = 1, nthr = omp_get_max_threads();
  char          detail[256];

  PetscFunctionBegin;
  PetscCall(presets(spec.world, start));
  PetscCall(search_space_create(&spec, &with));
  spec.fusion = PETSC_FALSE;
  PetscCall(search_space_create(&spec, &without));
  search_options_default(&o);
  for (int k = 0; k < 12; k++) {
    o.seed     = 100 + (uint64_t)k;
    o.max_iter = 5L << (k % 4); /* 5 .. 40: short searches, where density matters most */
    o.chains   = 1 + k % 3;
    PetscCall(search_anneal(with, toy_objective, toy, start, 3, &o, &a));
    PetscCall(search_anneal(without, toy_objective, toy, start, 3, &o, &b));
    if (search_cost(&a.est) > search_cost(&b.est)) worse++;
    if (a.fused_group) fused++;
    if (k % 3 == 2) { /* 3 chains: again on one thread */
      omp_set_num_threads(1);
      PetscCall(search_anneal(with, toy_objective, toy, start, 3, &o, &one));
      omp_set_num_threads(nthr);
      if (!same_plan(&a.plan, &one.plan) || a.est.iter_s != one.est.iter_s || a.iters != one.iters || a.accepted != one.accepted) same = 0;
    }
  }
  snprintf(detail, sizeof detail, "%d of 12 searches with the fusion states worse than without", worse);
  test_report((PetscBool)(worse == 0), "with 5 to 40 iterations and 1 to 3 chains, the search with the fusion states is never worse than without", "%s", detail);
  snprintf(detail, sizeof detail, "%d of 12 plans came from the chains with the fusion states", fused);
  test_report((PetscBool)(fused > 0), "some of those plans come from the chains that search the fusion states (the toy rewards -fuse_train)", "%s", detail);
  snprintf(detail, sizeof detail, "on %d threads and on 1", nthr);
  if (a.threads < 2) test_skip("3 chains per group give the same plan on 1 thread as on several", "the chains ran on one thread (OMP_NUM_THREADS=1, or a PETSc with debugging)");
  else test_report((PetscBool)same, "3 chains per group give the same plan, estimate and counts on 1 thread as on several", "%s: differ", detail);
  PetscCall(search_space_destroy(&with));
  PetscCall(search_space_destroy(&without));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode run(void)
{
  ModelConfig     cfg = {.n_layer = 4, .n_head = 4, .n_embd = 64, .vocab_size = 64, .n_positions = 64, .head = MODEL_HEAD_LM};
  PlanNeeds       needs;
  SearchSpaceSpec spec;
  SearchSpace     sp;
  Toy             toy;

  PetscFunctionBegin;
  /* 2 ranks, four calls (generation, reference, actor and critic training),
   * every setting searched including both fusions */
  PetscCall(PetscMemzero(&needs, sizeof needs));
  PetscCall(PetscMemzero(&toy, sizeof toy));
  needs.cfg[MFC_ACTOR_GEN] = needs.cfg[MFC_REF_INF] = needs.cfg[MFC_ACTOR_TRAIN] = needs.cfg[MFC_CRITIC_TRAIN] = &cfg;
  needs.batch[MFC_ACTOR_GEN] = needs.batch[MFC_REF_INF] = 8;
  needs.batch[MFC_ACTOR_TRAIN] = needs.batch[MFC_CRITIC_TRAIN] = 4;
  toy.work[MFC_ACTOR_GEN] = 4, toy.work[MFC_REF_INF] = 1, toy.work[MFC_ACTOR_TRAIN] = 3, toy.work[MFC_CRITIC_TRAIN] = 2;
  toy.params[MFC_ACTOR_GEN] = toy.params[MFC_REF_INF] = toy.params[MFC_ACTOR_TRAIN] = toy.params[MFC_CRITIC_TRAIN] = 1;
  toy.mem_cap = 6;
  spec = (SearchSpaceSpec){2, 2, &needs, 1, PETSC_TRUE, PETSC_TRUE};
  PetscCall(search_space_create(&spec, &sp));
  PetscCall(check_space("2 ranks, 4 calls, fusion", sp, &toy, 2, 1e6));
  PetscCall(search_space_destroy(&sp));
  PetscCall(check_never_worse(spec, &toy));

  /* 4 ranks, generation and training only, micro-batches and settings, and
   * a memory limit that makes the unsharded layouts infeasible */
  PetscCall(PetscMemzero(&needs, sizeof needs));
  PetscCall(PetscMemzero(&toy, sizeof toy));
  needs.cfg[MFC_ACTOR_GEN] = needs.cfg[MFC_ACTOR_TRAIN] = &cfg;
  needs.batch[MFC_ACTOR_GEN] = 8, needs.batch[MFC_ACTOR_TRAIN] = 8;
  toy.work[MFC_ACTOR_GEN] = 6, toy.work[MFC_ACTOR_TRAIN] = 5;
  toy.params[MFC_ACTOR_GEN] = toy.params[MFC_ACTOR_TRAIN] = 2;
  toy.mem_cap = 5;
  spec = (SearchSpaceSpec){4, 4, &needs, 2, PETSC_TRUE, PETSC_FALSE};
  PetscCall(search_space_create(&spec, &sp));
  PetscCall(check_space("4 ranks, 2 calls, memory limit", sp, &toy, 4, 1e6));
  {
    Plan          start;
    CostEstimate  est;
    PetscBool     ok;
    SearchResult  res;
    SearchOptions o;
    char          detail[256];

    /* the colocated preset (dp 4, weights and optimizer unsharded: 2 + 6 GB
     * on every rank) does not fit: the search starts infeasible and must end
     * feasible; tuning alone finds a fitting strategy on the same meshes */
    PetscCall(plan_preset(4, PLACEMENT_COLOCATE, 0, &start));
    PetscCall(search_evaluate(sp, toy_objective, &toy, &start, &ok, &est));
    test_report((PetscBool)(ok && !est.feasible), "4 ranks: the colocated preset is over the memory limit", "it fits; the test lost its point");
    search_options_default(&o);
    PetscCall(search_anneal(sp, toy_objective, &toy, &start, 1, &o, &res));
    snprintf(detail, sizeof detail, "best plan feasible %d, %ld infeasible candidates refused", (int)res.est.feasible, res.refused_infeasible);
    test_report((PetscBool)(res.est.feasible && res.refused_infeasible > 0), "4 ranks: from an infeasible start the search returns a feasible plan and refuses infeasible ones after", "%s", detail);
    { /* a tuning whose deadline has passed tries no strategy: the preset
       * stays over the limit (the budget's end of the presets' tuning, the
       * polish and the fused plan's tuning) */
      Plan late = start;
      PetscCall(search_tune_until(sp, toy_objective, &toy, 0, &late, &est));
      test_report((PetscBool)(!est.feasible && late.call[MFC_ACTOR_TRAIN].dp == start.call[MFC_ACTOR_TRAIN].dp), "4 ranks: a tuning past its deadline stops before its first strategy", "it tuned: feasible %d", (int)est.feasible);
    }
    PetscCall(search_tune(sp, toy_objective, &toy, &start, &est));
    test_report(est.feasible, "4 ranks: tuning the colocated preset's strategies makes it fit", "still infeasible");
    { /* an infeasible plan's cost: above every feasible one, and lower when
       * any call needs less, even one that is not the fullest */
      CostEstimate a, b, fit;
      PetscCall(PetscMemzero(&a, sizeof a));
      a.mem_call[MFC_ACTOR_TRAIN] = 90e9, a.mem_call[MFC_REF_INF] = 50e9, a.mem_max = 90e9;
      b = a, b.mem_call[MFC_REF_INF] = 40e9;
      PetscCall(PetscMemzero(&fit, sizeof fit));
      fit.feasible = PETSC_TRUE, fit.iter_s = 1e5;
      test_report((PetscBool)(search_cost(&b) < search_cost(&a) && search_cost(&fit) < search_cost(&b)), "an infeasible plan costs more than any feasible one, and less when a call that is not the fullest shrinks", "not ordered");
    }
    o.time_s   = 1e-9;
    o.max_iter = 1000000000L;
    PetscCall(search_anneal(sp, toy_objective, &toy, &start, 1, &o, &res));
    snprintf(detail, sizeof detail, "timed out %d after %ld iterations", (int)res.timed_out, res.iters);
    test_report((PetscBool)(res.timed_out && res.iters < 1000), "a time budget stops the search", "%s", detail);
    { /* an objective that fails inside a chain (on a thread of its own when
       * there are 2): the search returns the error with the objective's
       * message, raised again on the calling thread, and frees what it
       * holds (the sanitizer build checks that) */
      PetscErrorCode ierr;
      char           msg[TEST_MESSAGE_MAX] = "";

      search_options_default(&o);
      o.chains     = 2;
      toy.calls    = 0;
      toy.fail_at  = 40;
      PetscCall(PetscPushErrorHandler(test_capture_error, msg));
      ierr = search_anneal(sp, toy_objective, &toy, &start, 1, &o, &res);
      PetscCall(PetscPopErrorHandler());
      toy.fail_at = 0;
      test_report((PetscBool)(ierr == PETSC_ERR_LIB && strstr(msg, "toy objective: failed on call 40")), "an error in a chain's thread comes back with its message", "error %d, message \"%s\"", (int)ierr, msg);
    }
  }
  PetscCall(search_space_destroy(&sp));
  PetscFunctionReturn(PETSC_SUCCESS);
}

int main(int argc, char **argv)
{
  PetscCall(PetscInitialize(&argc, &argv, NULL, NULL));
  PetscCall(run());
  PetscCall(PetscFinalize());
  return test_tally();
}
