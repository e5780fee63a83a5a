/* optimize.c: the fused schedule optimizer (ac_optimize), in five steps.
 * 1. Decoder (decode.c): a schedule is decoded from one priority key per
 *    task by list scheduling.
 * 2. Justification (decode.c): forward-backward improvement of a decode.
 * 3. Calibration: the keys are each model's own 1F1B start times, the
 *    critic's stretched and shifted against the actor's (per copy), forwards
 *    shifted against backwards; a grid then coordinate descent over those few
 *    parameters (and alpha), stopping at the lower bound. The plain keys
 *    (no stretch, no shift) give the "greedy" start that is reported.
 * 4. Annealing from the calibrated keys: swaps of the keys of two tasks
 *    that run next to each other on a rank, or one key moved, until the
 *    lower bound; then, at the best makespan, toward lower peak memory.
 * 5. Memory: bisection on a memory cap at the best makespan.
 * Chains are independent, drawing from the counter-based RNG keyed by
 * (seed, chain, step); the best is picked by (makespan, memory, chain), and
 * parallel loops use fixed blocks, so the result does not depend on the
 * thread count. */
#include "ac_impl.h"
#include <math.h>
#include <omp.h>
#include <string.h>
#include <time.h>

/* Start keys: each task's start time in its own model's 1F1B pipeline. */
static PetscErrorCode start_keys(const ACInst *in, double *key)
{
  PetscFunctionBegin;
  PetscCall(ac_1f1b_start(in, AC_ACTOR, key));
  PetscCall(ac_1f1b_start(in, AC_CRITIC, key));
  PetscFunctionReturn(PETSC_SUCCESS);
}

typedef struct {
  ACDecoder d;
  double *key, *best_key, *prev_key;
  int    *cur_ids, *best_ids;
  double  mk, pk, best_mk, best_pk;
  int     steps;
} Chain;

/* uniform in [0,1) from the draw keyed by (seed, chain, step, lane) */
static inline double chain_u(uint64_t seed, int c, int step, int lane)
{
  return rng_uniform(seed, 0x46555345u, (uint32_t)c, (uint32_t)step, (uint32_t)lane);
}

static inline int better(double mk, double pk, double bmk, double bpk) { return mk < bmk || (mk == bmk && pk < bpk); }

/* One chain: anneal the keys toward the lower bound lb (stop there), then
 * spend up to iters/4 more proposals lowering the peak memory at that
 * makespan. Proposals: swap the keys of two tasks that run next to each
 * other on a rank (the order's adjacent swap), or move one key by up to the
 * length of a few tasks. */
static void chain_run(Chain *ch, const ACOptimizeOpts *opt, int c, double lb)
{
  const ACGraph *g = ch->d.g;
  const ACInst  *in = ch->d.in;
  int              n = g->n, N = g->N, phase2 = 0, left = opt->iters;
  double fmin = PetscMin(in->f[0], in->f[1]), munit = PetscMax(PetscMax(in->mem[0], in->mem[1]), 1e-300), T0 = 1.0,
         T1 = 0.02, T = T0;

  ch->mk = ac_dec_run(&ch->d, ch->key);
  ch->pk = ac_dec_peak(&ch->d);
  memcpy(ch->cur_ids, ch->d.ids, (size_t)N * sizeof *(ch->cur_ids));
  memcpy(ch->best_ids, ch->d.ids, (size_t)N * sizeof *(ch->best_ids));
  memcpy(ch->best_key, ch->key, (size_t)N * sizeof *(ch->best_key));
  ch->best_mk = ch->mk;
  ch->best_pk = ch->pk;
  for (ch->steps = 0; left > 0; ch->steps++, left--) {
    int    kind = chain_u(opt->seed, c, ch->steps, 0) < 0.5, a, b = -1;
    double old_a = 0, old_b = 0, mk, pk = 0, delta;

    if (!phase2 && ch->best_mk <= lb * (1 + 1e-12)) {
      if (in->mem[0] == 0 && in->mem[1] == 0) break;
      phase2 = 1;
      left   = PetscMin(left, opt->iters / 4);
      T0 = T = 0.5;
    }
    T = T0 * pow(T1 / T0, (double)ch->steps / opt->iters);
    if (kind) { /* adjacent swap in the current order */
      int j = (int)(chain_u(opt->seed, c, ch->steps, 1) * (N - 1));
      if (j % n == n - 1) j--;
      a = ch->cur_ids[j];
      b = ch->cur_ids[j + 1];
      old_a = ch->key[a], old_b = ch->key[b];
      ch->key[a] = old_b, ch->key[b] = old_a;
      if (old_a == old_b) ch->key[b] -= 1e-9 * fmin;
    } else {
      a = (int)(chain_u(opt->seed, c, ch->steps, 1) * N);
      old_a = ch->key[a];
      ch->key[a] += (2 * chain_u(opt->seed, c, ch->steps, 2) - 1) * 4 * g->dur[a];
    }
    if (!phase2) memcpy(ch->prev_key, ch->key, (size_t)N * sizeof *ch->key);
    mk = ac_dec_run(&ch->d, ch->key);
    if (!phase2) mk = ac_dec_justify(&ch->d, ch->key, mk); /* may rewrite all keys */
    if (!isinf(mk)) pk = ac_dec_peak(&ch->d);
    if (phase2) delta = mk > ch->best_mk ? INFINITY : (pk - ch->pk) / munit;
    else delta = (mk - ch->mk) / fmin + 1e-3 * (pk - ch->pk) / munit;
    if (!isinf(mk) && (delta <= 0 || chain_u(opt->seed, c, ch->steps, 3) < exp(-delta / T))) {
      ch->mk = mk;
      ch->pk = pk;
      memcpy(ch->cur_ids, ch->d.ids, (size_t)N * sizeof *(ch->cur_ids));
      if (better(mk, pk, ch->best_mk, ch->best_pk)) {
        ch->best_mk = mk;
        ch->best_pk = pk;
        memcpy(ch->best_ids, ch->d.ids, (size_t)N * sizeof *(ch->best_ids));
        memcpy(ch->best_key, ch->key, (size_t)N * sizeof *(ch->best_key));
      }
    } else if (!phase2) memcpy(ch->key, ch->prev_key, (size_t)N * sizeof *ch->key);
    else {
      ch->key[a] = old_a;
      if (b >= 0) ch->key[b] = old_b;
    }
  }
}

/* Parametric keys: the two models' 1F1B timelines interleave well when the
 * critic's is stretched to the actor's length (norm) times sigma = th[0]
 * and each critic copy c shifted by th[4+c]; th[1] and th[2] move the
 * actor's and the critic's forwards against their backwards; th[3] is the
 * decoder's alpha. */
static void param_keys(const ACInst *in, const ACGraph *g, const double *base, double norm, const double *th,
                       double *key)
{
  for (int i = 0; i < g->N; i++) {
    ACTask t = ac_task_of(in, i % g->n);
    if (t.model == AC_ACTOR) key[i] = base[i] + (t.kind == AC_F ? th[1] : 0);
    else key[i] = th[0] * norm * base[i] + th[4 + (i / g->n) / in->pp[1]] + (t.kind == AC_F ? th[2] : 0);
  }
}

static void param_eval(ACDecoder *d, const double *base, double norm, const double *th, double *key, double *mk,
                       double *pk)
{
  const ACGraph *g = d->g;
  param_keys(d->in, g, base, norm, th, key);
  d->alpha = PetscMin(1, PetscMax(0, th[3]));
  *mk      = ac_dec_justify(d, key, ac_dec_run(d, key));
  *pk = isinf(*mk) ? 0 : ac_dec_peak(d);
}

#define AC_BLOCK  16
#define AC_NALPHA 3
#define AC_NSIGMA 9
#define AC_NDELTA 33
/* A grid over sigma and one shift for all copies, then coordinate descent
 * over all parameters (each round tries every parameter up and down, in
 * parallel, and keeps the best; steps halve when nothing improves). Picks
 * the keys that start the annealing. */
static PetscErrorCode calibrate(const ACInst *in, const ACGraph *g, const double *base, double lb, int max_blocks,
                                int max_rounds, double *key, double *alpha, double *mk_out, double *pk_out)
{
  static const double sigma[AC_NSIGMA] = {0.5, 0.65, 0.8, 0.9, 1, 1.1, 1.25, 1.5, 2};
  int nt = omp_get_max_threads(), ncopy = in->pp[0] / in->pp[1], np = 4 + ncopy, NG = AC_NALPHA * AC_NSIGMA * AC_NDELTA,
      NM = 2 * np, win = 0;
  double              inf = INFINITY;
  ACDecoder            *dec;
  double             *mk, *pk, *keys, *th, *cand, *step, span0 = 0, span1 = 0, norm, bmk, bpk;

  PetscFunctionBegin;
  for (int i = 0; i < g->N; i++) {
    double e = base[i] + g->dur[i];
    if (ac_task_of(in, i % g->n).model == AC_ACTOR) span0 = PetscMax(span0, e);
    else span1 = PetscMax(span1, e);
  }
  norm = span0 / span1;
  PetscCall(PetscMalloc4(nt, &dec, PetscMax(NG, NM), &mk, PetscMax(NG, NM), &pk, (size_t)nt * g->N, &keys));
  PetscCall(PetscMalloc3(np, &th, (size_t)PetscMax(NG, NM) * np, &cand, np, &step));
  mk[0] = inf;
  for (int t = 0; t < nt; t++) PetscCall(ac_dec_create(in, g, &dec[t]));
  /* the grid, the likeliest points first (small shifts, sigma near 1),
   * in blocks of a fixed size so that stopping at the first block that
   * reaches the bound does not depend on the thread count */
  for (int k = 0; k < NG; k++) {
    static const int sorder[AC_NSIGMA] = {4, 5, 3, 6, 2, 7, 1, 8, 0};
    static const double alphas[AC_NALPHA] = {1, 0, 0.5};
    double *c = cand + (size_t)k * np;
    int     ia = k % AC_NALPHA, is = (k / AC_NALPHA) % AC_NSIGMA, j = k / (AC_NALPHA * AC_NSIGMA);
    int                 id = j % 2 ? (AC_NDELTA / 2) - (j + 1) / 2
                                   : (AC_NDELTA / 2) + j / 2; /* 0, -1, +1, -2, ... steps from the middle */
    c[0] = sigma[sorder[is]];
    c[1] = c[2] = 0;
    c[3] = alphas[ia];
    for (int q = 0; q < ncopy; q++) c[4 + q] = 0.5 * span0 * (2.0 * id / (AC_NDELTA - 1) - 1);
  }
  for (int k0 = 0; k0 < NG && k0 < max_blocks * AC_BLOCK && !(mk[win] <= lb * (1 + 1e-12)); k0 += AC_BLOCK) {
    int k1 = PetscMin(NG, k0 + AC_BLOCK);
    #pragma omp parallel for schedule(dynamic, 1)
    for (int k = k0; k < k1; k++) {
      int t = omp_get_thread_num();
      param_eval(&dec[t], base, norm, cand + (size_t)k * np, keys + (size_t)t * g->N, &mk[k], &pk[k]);
    }
    for (int k = k0; k < k1; k++)
      if (k == 0 || better(mk[k], pk[k], mk[win], pk[win])) win = k;
  }
  PetscCall(PetscArraycpy(th, cand + (size_t)win * np, np));
  bmk     = mk[win];
  bpk     = pk[win];
  step[0] = 0.05;
  step[1] = in->f[0];
  step[2] = in->f[1];
  step[3] = 0.25;
  for (int q = 0; q < ncopy; q++) step[4 + q] = span0 / (AC_NDELTA - 1);
  for (int round = 0; round < max_rounds && bmk > lb * (1 + 1e-12); round++) {
    int bestm = -1;
    for (int k = 0; k < NM; k++) {
      double *c = cand + (size_t)k * np;
      PetscCall(PetscArraycpy(c, th, np));
      c[k / 2] += (k % 2 ? -1 : 1) * step[k / 2];
    }
    #pragma omp parallel for schedule(dynamic, 1)
    for (int k = 0; k < NM; k++) {
      int t = omp_get_thread_num();
      param_eval(&dec[t], base, norm, cand + (size_t)k * np, keys + (size_t)t * g->N, &mk[k], &pk[k]);
    }
    for (int k = 0; k < NM; k++)
      if (better(mk[k], pk[k], bmk, bpk) && (bestm < 0 || better(mk[k], pk[k], mk[bestm], pk[bestm]))) bestm = k;
    if (bestm >= 0) {
      PetscCall(PetscArraycpy(th, cand + (size_t)bestm * np, np));
      bmk = mk[bestm];
      bpk = pk[bestm];
    } else {
      int tiny = 1;
      for (int q = 0; q < np; q++) step[q] /= 2;
      for (int q = 4; q < np; q++) tiny = tiny && step[q] < 0.1 * PetscMin(in->f[0], in->f[1]);
      if (tiny) break;
    }
  }
  param_eval(&dec[0], base, norm, th, key, &bmk, &bpk); /* key: the justified keys that decode to the winner */
  *alpha  = dec[0].alpha;
  *mk_out = bmk;
  *pk_out = bpk;
  for (int t = 0; t < nt; t++) PetscCall(ac_dec_destroy(&dec[t]));
  PetscCall(PetscFree4(dec, mk, pk, keys));
  PetscCall(PetscFree3(th, cand, step));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Lower peak memory at the best makespan: bisection on a memory cap that
 * the decoder enforces, between one micro-batch and the best schedule's
 * peak; each step recalibrates under the cap (the first 8 blocks of the
 * grid, 10 rounds of descent) and keeps the schedule if it still reaches
 * the makespan. The annealing's memory phase moves one key at
 * a time and rarely gets far; a cap changes every decision at once. */
static PetscErrorCode mem_bisect(const ACInst *in, const ACGraph *g, const double *base, int steps, Chain *best)
{
  double lo   = PetscMax(in->mem[0], in->mem[1]),
         unit = PetscMin(in->mem[0] > 0 ? in->mem[0] : in->mem[1], in->mem[1] > 0 ? in->mem[1] : in->mem[0]), *key;
  ACInst capped = *in;
  ACDecoder  d;

  PetscFunctionBegin;
  if (unit <= 0 || isinf(best->best_mk)) PetscFunctionReturn(PETSC_SUCCESS);
  PetscCall(PetscMalloc1(g->N, &key));
  PetscCall(ac_dec_create(&capped, g, &d));
  for (int k = 0; k < steps && best->best_pk - lo > 0.5 * unit; k++) {
    double alpha = 1, mk = INFINITY, pk = INFINITY;
    capped.mem_cap = 0.5 * (lo + best->best_pk);
    PetscCall(calibrate(&capped, g, base, best->best_mk, 8, 10, key, &alpha, &mk,
                        &pk)); /* a cheaper calibration: a cap that fails costs the whole budget */
    if (mk <= best->best_mk && pk < best->best_pk) {
      d.alpha = alpha;
      mk      = ac_dec_run(&d, key);
      PetscCheck(mk <= best->best_mk, PETSC_COMM_SELF, PETSC_ERR_PLIB,
                 "mem_bisect: the calibrated keys decode to makespan %g, not %g", mk, best->best_mk);
      memcpy(best->best_ids, d.ids, (size_t)g->N * sizeof *d.ids);
      best->best_pk = pk;
    } else lo = capped.mem_cap;
  }
  PetscCall(ac_dec_destroy(&d));
  PetscCall(PetscFree(key));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode ac_optimize(const ACInst *in, const ACOptimizeOpts *opt, ACSched *s, ACOptimizeInfo *info)
{
  ACGraph g;
  Chain    *ch;
  double   *key0, *base, t0 = omp_get_wtime(), alpha = 1;
  clock_t   c0 = clock();
  int       C = opt->chains, win = 0;

  PetscFunctionBegin;
  PetscCheck(C >= 1 && opt->iters >= 0, PETSC_COMM_SELF, PETSC_ERR_ARG_OUTOFRANGE,
             "ac_optimize: %d chains, %d iterations", C, opt->iters);
  PetscCall(ac_graph_build(in, &g));
  PetscCall(PetscMalloc2(g.N, &key0, g.N, &base));
  PetscCall(start_keys(in, base));
  PetscCall(PetscArraycpy(key0, base, g.N));
  info->lower_bound = ac_lower_bound(in);
  {
    ACDecoder d;
    PetscCall(ac_dec_create(in, &g, &d));
    info->greedy.makespan = ac_dec_run(&d, key0);
    info->greedy.deadlock = isinf(info->greedy.makespan);
    info->greedy.peak_mem = ac_dec_peak(&d);
    PetscCall(ac_dec_destroy(&d));
  }
  PetscCall(calibrate(in, &g, base, info->lower_bound, 1 << 20, 200, key0, &alpha, &info->calib.makespan,
                      &info->calib.peak_mem));
  PetscCall(PetscCalloc1(C, &ch));
  for (int c = 0; c < C; c++) {
    PetscCall(ac_dec_create(in, &g, &ch[c].d));
    ch[c].d.alpha = alpha;
    PetscCall(PetscMalloc5(g.N, &ch[c].key, g.N, &ch[c].best_key, g.N, &ch[c].prev_key, g.N, &ch[c].cur_ids, g.N,
                           &ch[c].best_ids));
    /* chain 0 starts from the plain keys (the greedy start), the others
     * from keys jittered by up to one task's length */
    for (int i = 0; i < g.N; i++) ch[c].key[i] = key0[i] + (c ? (2 * chain_u(opt->seed, c, -1, i) - 1) * g.dur[i] : 0);
  }
  #pragma omp parallel for schedule(dynamic, 1)
  for (int c = 0; c < C; c++) chain_run(&ch[c], opt, c, info->lower_bound);
  for (int c = 1; c < C; c++)
    if (better(ch[c].best_mk, ch[c].best_pk, ch[win].best_mk, ch[win].best_pk)) win = c;
  PetscCheck(!isinf(ch[win].best_mk), PETSC_COMM_SELF, PETSC_ERR_ARG_OUTOFRANGE,
             "ac_optimize: no schedule found within the memory cap %g (raise -sched_mem_cap)", in->mem_cap);
  PetscCall(mem_bisect(in, &g, base, opt->mem_steps, &ch[win]));
  PetscCall(ac_sched_alloc(in, s));
  for (int i = 0; i < g.N; i++) s->order[i] = ac_task_of(in, ch[win].best_ids[i] % g.n);
  info->best.makespan = ch[win].best_mk;
  info->best.peak_mem = ch[win].best_pk;
  info->best.deadlock = 0;
  info->chain         = win;
  info->iters_used    = 0;
  for (int c = 0; c < C; c++) info->iters_used += ch[c].steps;
  for (int c = 0; c < C; c++) {
    PetscCall(ac_dec_destroy(&ch[c].d));
    PetscCall(PetscFree5(ch[c].key, ch[c].best_key, ch[c].prev_key, ch[c].cur_ids, ch[c].best_ids));
  }
  PetscCall(PetscFree(ch));
  PetscCall(PetscFree2(key0, base));
  PetscCall(ac_graph_free(&g));
  info->seconds     = omp_get_wtime() - t0;
  info->cpu_seconds = (double)(clock() - c0) / CLOCKS_PER_SEC;
  PetscFunctionReturn(PETSC_SUCCESS);
}
