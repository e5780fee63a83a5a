/* cost/gen.c: generation under continuous batching over the workload's
 * response lengths, sample by sample (each dp replica decodes its rows; a
 * finished sample leaves the batch, so the batch shrinks; a pipeline with
 * fewer micro-batches in flight than stages waits for its bubbles), and
 * streaming of finished samples into the inference ranks
 * (-fuse_gen_inf stream). */
#include "cost_impl.h"

/* Decode steps between two points where the batch changes are costed at
 * the middle of their context, at most this many at a time. */
#define GEN_SEGMENT 32

static double response_len(const CostWork *w, int row)
{
  int l = w->nlen ? w->len[row % w->nlen] : w->max_new;
  return PetscMax(1, PetscMin(l, w->max_new));
}

/* One replica's rows [r0, r1): the time its generation ends; fin[row] (if
 * fin) the time each of its samples finishes. Continuous batching as the
 * engine does it: at most `slots` samples decode together, a finished
 * sample's slot takes the next prompt (prefilled at once), the prompts in
 * row order. Between two finishes every step decodes the same samples, so
 * those steps are costed together at their mean context (the attention's
 * work is linear in the context summed over the rows). */
static PetscErrorCode gen_replica(const CostPrims *p, const CostWork *w, const CostLayout *c, const CostShape *m, int r0, int r1, double *end, double *fin)
{
  int     n = r1 - r0, S = w->gen_slots > 0 ? PetscMin(w->gen_slots, n) : n, mb = PetscMax(1, PetscMin(c->mbs, S)), next = r0, na = 0;
  int    *row, *rem, *done;
  double  t = 0;

  PetscFunctionBegin;
  PetscCall(PetscMalloc3(S, &row, S, &rem, S, &done));
  while (na > 0 || next < r1) {
    int    seg = GEN_SEGMENT, inflight;
    double ctx    = 0;
    /* fill the free slots; the new prompts' prefill gives their first
     * token, and samples of one token end there (their slots refill) */
    for (;;) {
      int refill = 0;
      while (na < S && next < r1) row[na] = next, rem[na] = (int)response_len(w, next) - 1, done[na++] = 0, next++, refill++;
      if (!refill) break;
      t += (PetscMin(mb, refill) + c->pp - 1) * cost_stage_time(p, m, COST_PREFILL, c, (double)refill / PetscMin(mb, refill), w->prompt_len);
      for (int i = 0; i < na;)
        if (rem[i] == 0) {
          if (fin) fin[row[i]] = t;
          row[i] = row[na - 1], rem[i] = rem[na - 1], done[i] = done[na - 1], na--;
        } else i++;
    }
    if (!na) {
      if (next >= r1) break;
      continue;
    }
    for (int i = 0; i < na; i++) seg = PetscMin(seg, rem[i]), ctx += done[i];
    ctx      = w->prompt_len + 1 + ctx / na + 0.5 * (seg - 1);
    inflight = PetscMin(mb, na);
    t += seg * PetscMax(inflight, c->pp) * cost_stage_time(p, m, COST_DECODE, c, (double)na / inflight, ctx);
    for (int i = 0; i < na;) {
      rem[i] -= seg, done[i] += seg;
      if (rem[i] == 0) {
        if (fin) fin[row[i]] = t;
        row[i] = row[na - 1], rem[i] = rem[na - 1], done[i] = done[na - 1], na--;
      } else i++;
    }
    if (!na && next >= r1) break;
  }
  *end = t;
  PetscCall(PetscFree3(row, rem, done));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode cost_generation(const CostPrims *p, const CostWork *w, const PlanCall *c, const CostShape *m, double *t, double *fin)
{
  CostLayout L;

  PetscFunctionBegin;
  cost_layout(p, c, &L);
  *t = 0;
  for (int d = 0; d < c->dp; d++) {
    double end = 0;
    PetscCall(gen_replica(p, w, &L, m, w->batch * d / c->dp, w->batch * (d + 1) / c->dp, &end, fin));
    *t = PetscMax(*t, end);
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

typedef struct {
  double t;
  int    row;
} Arrival;

static int arr_cmp(const void *a, const void *b)
{
  const Arrival *x = a, *y = b;
  if (x->t != y->t) return x->t < y->t ? -1 : 1;
  return x->row - y->row;
}

/* Which replica of call c world rank r is in (-1: none). */
static int replica_of(const PlanCall *c, int r)
{
  for (int i = 0; i < c->nranks; i++)
    if (c->ranks[i] == r) return (i / c->tp) % c->dp;
  return -1;
}

PetscErrorCode cost_stream(const CostPrims *p, const CostWork *w, const Plan *plan, const double *fin, double *end, int world)
{
  static const MFCId inf[3] = {MFC_REF_INF, MFC_REW_INF, MFC_CRITIC_INF};
  int                B      = w->batch;
  Arrival           *arr;
  CostLayout         L[3];
  int               *need; /* need[k*B + row]: inference call k wants the row on this rank */

  PetscFunctionBegin;
  PetscCall(PetscMalloc2(B, &arr, 3 * B, &need));
  for (int k = 0; k < 3; k++) cost_layout(p, &plan->call[inf[k]], &L[k]);
  for (int r = 0; r < world; r++) {
    int    n = 0, first = 0, tokens = 0;
    double t = 0;
    end[r]   = -1;
    for (int k = 0; k < 3; k++) {
      const PlanCall *c = &plan->call[inf[k]];
      int             d = cost_call_used(w, inf[k]) ? replica_of(c, r) : -1;
      for (int b = 0; b < B; b++) need[k * B + b] = d >= 0 && b >= B * d / c->dp && b < B * (d + 1) / c->dp;
    }
    for (int b = 0; b < B; b++)
      if (need[b] || need[B + b] || need[2 * B + b]) arr[n++] = (Arrival){fin[b], b};
    if (!n) continue;
    qsort(arr, (size_t)n, sizeof *arr, arr_cmp);
    /* micro-batches cut when the arrived, unprocessed samples hold
     * fuse_tokens tokens, the rest at the end; each served call runs on
     * its rows of the micro-batch, padded to their longest */
    for (int i = 0; i < n; i++) {
      tokens += w->prompt_len + (int)response_len(w, arr[i].row);
      if (tokens < plan->fuse_tokens && i < n - 1) continue;
      t = PetscMax(t, arr[i].t);
      for (int k = 0; k < 3; k++) {
        int rows = 0, top = 0;
        for (int j = first; j <= i; j++)
          if (need[k * B + arr[j].row]) rows++, top = PetscMax(top, (int)response_len(w, arr[j].row));
        if (rows) t += cost_stage_time(p, cost_call_shape(w, inf[k]), COST_FWD, &L[k], rows, w->prompt_len + top);
      }
      first  = i + 1;
      tokens = 0;
    }
    end[r] = t;
  }
  PetscCall(PetscFree2(arr, need));
  PetscFunctionReturn(PETSC_SUCCESS);
}
