/* decode.c: the optimizer's decoder. A schedule is decoded from one priority
 * key per task by list scheduling: the rank that can finish a ready task
 * earliest (time c) picks, among its ready tasks that could start before
 * s + alpha (c - s) (s: its earliest start), the one with the smallest key;
 * alpha 0 never idles a rank that has work, alpha 1 may wait for an urgent
 * input (Giffler-Thompson active schedules). A forward is ready only if its
 * activations fit under the memory cap. Justification (forward-backward
 * improvement) decodes the time-reversed graph with the tasks that finished
 * last first, then the forward graph with those that finished last in
 * reverse first, while that shortens the schedule. */
#include "ac_impl.h"
#include <math.h>
#include <string.h>
static PetscErrorCode dec_create_dir(const ACInst *in, const ACGraph *g, int rev, ACDecoder *d)
{
  int P = g->nranks;

  PetscFunctionBegin;
  d->in  = in;
  d->g   = g;
  d->rev = rev;
  d->bw  = NULL;
  d->kb  = NULL;
  if (!rev) {
    PetscCall(PetscNew(&d->bw));
    PetscCall(dec_create_dir(in, g, 1, d->bw));
    PetscCall(PetscMalloc1(g->N, &d->kb));
  }
  PetscCall(PetscMalloc5(g->N, &d->ndep, g->N, &d->ready, P, &d->cnt, g->N, &d->ids, P, &d->pos));
  PetscCall(PetscMalloc6(g->N, &d->rt, g->N, &d->fin, P, &d->free_at, P, &d->mem, P, &d->est, P, &d->ess));
  d->alpha = 1;
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode ac_dec_create(const ACInst *in, const ACGraph *g, ACDecoder *d) { return dec_create_dir(in, g, 0, d); }

PetscErrorCode ac_dec_destroy(ACDecoder *d)
{
  PetscFunctionBegin;
  if (d->bw) {
    PetscCall(ac_dec_destroy(d->bw));
    PetscCall(PetscFree(d->bw));
    PetscCall(PetscFree(d->kb));
  }

  PetscCall(PetscFree5(d->ndep, d->ready, d->cnt, d->ids, d->pos));
  PetscCall(PetscFree6(d->rt, d->fin, d->free_at, d->mem, d->est, d->ess));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static inline int dec_fits(const ACDecoder *d, int r, int id)
{
  ACTask t = ac_task_of(d->in, id % d->g->n);
  return t.kind == (d->rev ? AC_F : AC_B) || d->in->mem_cap <= 0 ||
         d->mem[r] + d->in->mem[t.model] <= d->in->mem_cap * (1 + 1e-12);
}

/* the earliest time rank r can finish one of its ready tasks (+inf: none) */
static void dec_est(ACDecoder *d, int r)
{
  int    n = d->g->n;
  double e = INFINITY, b = INFINITY;
  for (int j = 0; j < d->cnt[r]; j++) {
    int id = d->ready[r * n + j];
    if (dec_fits(d, r, id)) {
      e = PetscMin(e, PetscMax(d->rt[id], d->free_at[r]) + d->g->dur[id]);
      b = PetscMin(b, PetscMax(d->rt[id], d->free_at[r]));
    }
  }
  d->est[r] = e;
  d->ess[r] = b;
}

/* Decodes keys into d->ids (rank r's list at r*n); returns the makespan or
 * +inf when no rank can go on (only with a memory cap). */
double ac_dec_run(ACDecoder *d, const double *key)
{
  const ACGraph *g = d->g;
  const int       *dep = d->rev ? g->succ : g->dep, *succ = d->rev ? g->dep : g->succ;
  int              P = g->nranks, n = g->n;
  double           makespan = 0;

  for (int r = 0; r < P; r++) d->cnt[r] = d->pos[r] = 0, d->free_at[r] = d->mem[r] = 0;
  for (int i = 0; i < g->N; i++) {
    d->ndep[i] = (dep[2 * i] >= 0) + (dep[2 * i + 1] >= 0);
    d->rt[i]   = 0;
    if (!d->ndep[i]) d->ready[(i / n) * n + d->cnt[i / n]++] = i;
  }
  for (int r = 0; r < P; r++) dec_est(d, r);
  for (int step = 0; step < g->N; step++) {
    int    r = 0, best = -1, bj = -1;
    double t;
    for (int q = 1; q < P; q++)
      if (d->est[q] < d->est[r]) r = q;
    t = d->est[r];
    if (isinf(t)) return INFINITY;
    /* an active schedule: among the tasks that could start before the
     * earliest completion t on this rank, the smallest key (it may wait for
     * its input while a task of larger key could have run) */
    t = d->ess[r] + d->alpha * (t - d->ess[r]);
    for (int j = 0; j < d->cnt[r]; j++) {
      int    id = d->ready[r * n + j];
      double st = PetscMax(d->rt[id], d->free_at[r]);
      if ((st < t || st == d->ess[r]) && dec_fits(d, r, id) &&
          (best < 0 || key[id] < key[best] || (key[id] == key[best] && id < best)))
        best = id, bj = j;
    }
    t = PetscMax(d->rt[best], d->free_at[r]);
    d->ready[r * n + bj] = d->ready[r * n + --d->cnt[r]];
    d->fin[best] = d->free_at[r] = t + g->dur[best];
    makespan     = PetscMax(makespan, d->fin[best]);
    {
      ACTask tk = ac_task_of(d->in, best % n);
      d->mem[r] += (tk.kind == (d->rev ? AC_B : AC_F) ? 1 : -1) * d->in->mem[tk.model];
    }
    d->ids[r * n + d->pos[r]++] = best;
    for (int k = 0; k < 2; k++) {
      int s = succ[2 * best + k], q;
      if (s < 0) continue;
      d->rt[s] = PetscMax(d->rt[s], d->fin[best]);
      if (--d->ndep[s]) continue;
      q                              = s / n;
      d->ready[q * n + d->cnt[q]++] = s;
      if (q != r) dec_est(d, q);
    }
    dec_est(d, r);
  }
  return makespan;
}

/* Forward-backward improvement ("justification"): the reversed graph is
 * decoded with the tasks that finished last first, then the forward one
 * with the tasks that finished last in reverse first; repeated while the
 * makespan drops. Leaves d holding the best schedule and key the keys that
 * decode to it; returns its makespan. */
double ac_dec_justify(ACDecoder *d, double *key, double mk)
{
  const ACGraph *g = d->g;
  d->bw->alpha = d->alpha;
  for (int it = 0; it < 4 && !isinf(mk); it++) {
    double mk2;
    for (int i = 0; i < g->N; i++) d->kb[i] = -d->fin[i];
    if (isinf(ac_dec_run(d->bw, d->kb))) break;
    for (int i = 0; i < g->N; i++) d->kb[i] = -d->bw->fin[i];
    mk2 = ac_dec_run(d, d->kb);
    if (!(mk2 < mk)) {
      mk = ac_dec_run(d, key);
      break;
    }
    mk = mk2;
    memcpy(key, d->kb, (size_t)g->N * sizeof *key);
  }
  return mk;
}

double ac_dec_peak(const ACDecoder *d)
{
  double pk = 0;
  for (int r = 0; r < d->g->nranks; r++) pk = PetscMax(pk, ac_rank_peak(d->in, d->ids + r * d->g->n, d->g->n));
  return pk;
}
