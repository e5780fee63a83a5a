/* cost/gen.c: generation under continuous batching over the workload's
 * response lengths, sample by sample (each dp replica decodes its rows; a
 * finished sample leaves the batch, so the batch shrinks; a pipeline with
 * fewer micro-batches in flight than stages waits for its bubbles), and
 * streaming of finished samples into the inference ranks
 * (-fuse_gen_inf stream), dealt to the replicas as the executor deals
 * them. */
#include "cost_impl.h"
#include "exec.h"
#include "genfuse.h"
#include <string.h>

/* Decode steps between two points where the batch changes are costed at
 * the middle of their context, at most this many at a time. */
#define GEN_SEGMENT 32

double cost_response_len(const CostWork *w, int row)
{
  int l = w->nlen ? w->len[row % w->nlen] : w->max_new;
  return PetscMax(1, PetscMin(l, w->max_new));
}

double cost_prompt_len(const CostWork *w, int row)
{
  return w->plen && w->nlen ? w->plen[row % w->nlen] : w->prompt_len;
}

double cost_seq_len(const CostWork *w, int row)
{
  return cost_prompt_len(w, row) + cost_response_len(w, row);
}

/* Continuous batching as the engine does it: at most `S` samples decode
 * together, a finished sample's slot takes the next queued prompt
 * (prefilled at once), the prompts in queue order. Between two finishes
 * every step decodes the same samples, so those steps are costed together
 * at their mean context (the attention's work is linear in the context
 * summed over the rows). */
PetscErrorCode cost_rep_init(CostRep *r, int S, int mb, int cap, int qcap)
{
  PetscFunctionBegin;
  PetscCall(PetscMemzero(r, sizeof *r));
  r->S = S, r->mb = PetscMax(1, PetscMin(mb, S));
  PetscCall(PetscMalloc4(cap, &r->row, cap, &r->rem, cap, &r->done, qcap, &r->queue));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode cost_rep_free(CostRep *r)
{
  PetscFunctionBegin;
  PetscCall(PetscFree4(r->row, r->rem, r->done, r->queue));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static double rep_response(const CostWork *w, const CostRep *r, int b)
{
  return r->draw ? r->draw[b] : cost_response_len(w, b);
}
static double rep_prompt(const CostWork *w, const CostRep *r, int b)
{
  return r->plen ? r->plen[b] : cost_prompt_len(w, b);
}

static void rep_drop(CostRep *r, int i)
{
  r->na--;
  r->row[i] = r->row[r->na], r->rem[i] = r->rem[r->na], r->done[i] = r->done[r->na];
}

double cost_rep_fill(const CostPrims *p, const CostWork *w, const CostLayout *c, const CostShape *m, CostRep *r,
                     double t, double *fin)
{
  double x = 0;
  /* the new prompts' prefill gives their first token, and samples of one
   * token end there (their slots refill) */
  for (;;) {
    int    refill = 0;
    double plen   = 0;
    while (r->na < r->S && r->qh < r->qn) {
      int b = r->queue[r->qh++];
      r->row[r->na] = b, r->rem[r->na] = (int)rep_response(w, r, b) - 1, r->done[r->na++] = 0, refill++;
      plen += rep_prompt(w, r, b);
    }
    if (!refill) break;
    /* the engine packs the new prompts' tokens into one forward: costed as
     * prompts of their mean length */
    x += (PetscMin(r->mb, refill) + c->pp - 1) *
         cost_stage_time(p, m, COST_PREFILL, c, (double)refill / PetscMin(r->mb, refill), plen / refill);
    for (int i = 0; i < r->na;)
      if (r->rem[i] == 0) {
        if (fin) fin[r->row[i]] = t + x;
        rep_drop(r, i);
      } else i++;
  }
  return x;
}

int cost_rep_seg(const CostRep *r)
{
  int seg = GEN_SEGMENT;
  if (!r->na) return 0;
  for (int i = 0; i < r->na; i++) seg = PetscMin(seg, r->rem[i]);
  return seg;
}

double cost_rep_decode(const CostPrims *p, const CostWork *w, const CostLayout *c, const CostShape *m, const CostRep *r,
                       int seg)
{
  double ctx = 0;
  int    inflight;
  if (!r->na || seg <= 0) return 0;
  for (int i = 0; i < r->na; i++) ctx += rep_prompt(w, r, r->row[i]) + r->done[i];
  ctx      = 1 + ctx / r->na + 0.5 * (seg - 1);
  inflight = PetscMin(r->mb, r->na);
  return seg * PetscMax(inflight, c->pp) * cost_stage_time(p, m, COST_DECODE, c, (double)r->na / inflight, ctx);
}

void cost_rep_advance(CostRep *r, int seg, double t, double *fin)
{
  for (int i = 0; i < r->na;) {
    r->rem[i] -= seg, r->done[i] += seg;
    if (r->rem[i] <= 0) {
      if (fin) fin[r->row[i]] = t;
      rep_drop(r, i);
    } else i++;
  }
}

double cost_rep_run(const CostPrims *p, const CostWork *w, const CostLayout *c, const CostShape *m, CostRep *r,
                    double t, double *fin)
{
  for (;;) {
    int    seg;
    double dt;
    t += cost_rep_fill(p, w, c, m, r, t, fin);
    if (!(seg = cost_rep_seg(r))) break;
    dt = cost_rep_decode(p, w, c, m, r, seg);
    t += dt, r->decode_s += dt, r->steps += seg;
    cost_rep_advance(r, seg, t, fin);
  }
  return t;
}

/* Multi-turn episodes (docs/environments.md): a sample pauses at each of
 * its env_answers turn ends, and the engine prefills the answer env_lag
 * steps later, waiting when it has not come. The samples of a wave (the S
 * a replica decodes together) are taken to reach their turns' ends
 * together, as samples that start together do; the replica's environment
 * computes env_procs answers at once (0: all), so a wave's answers to one
 * turn take ceil(S / env_procs) x env_s, and each turn adds what that
 * exceeds env_lag decode steps of the replica's mean step: waves x answers
 * x max(0, ceil(S / env_procs) x env_s - env_lag x step). The answers'
 * tokens are costed as the lengths count them (a rollouts.h5 response holds
 * them). */
double cost_env_wait(const CostWork *w, int n, int S, double decode_s, long steps)
{
  double step = steps > 0 ? decode_s / (double)steps : 0, turn;
  if (w->env_answers <= 0 || w->env_s <= 0 || n <= 0 || S <= 0) return 0;
  turn = (w->env_procs > 0 ? (double)((S + w->env_procs - 1) / w->env_procs) : 1.0) * w->env_s;
  return (double)((n + S - 1) / S) * w->env_answers * PetscMax(0.0, turn - w->env_lag * step);
}

/* One replica's rows [r0, r1) from time 0: the time its generation ends;
 * fin[row] (if fin) the time each of its samples finishes (episodes' waits
 * for the environment added at the end). */
static PetscErrorCode gen_replica(const CostPrims *p, const CostWork *w, const CostLayout *c, const CostShape *m,
                                  int r0, int r1, double *end, double *fin)
{
  int     n = r1 - r0;
  double  t, wait;
  CostRep r;

  PetscFunctionBegin;
  PetscCall(
      cost_rep_init(&r, w->gen_slots > 0 ? PetscMin(w->gen_slots, n) : n, c->mbs, PetscMax(n, 1), PetscMax(n, 1)));
  for (int b = r0; b < r1; b++) r.queue[r.qn++] = b;
  t    = cost_rep_run(p, w, c, m, &r, 0, fin);
  wait = cost_env_wait(w, n, r.S, r.decode_s, r.steps);
  if (fin && wait > 0)
    for (int b = r0; b < r1; b++) fin[b] += wait;
  *end = t + wait;
  PetscCall(cost_rep_free(&r));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Partial rollouts (-async_partial, src/ppo/async/pool.c): the pool of
 * batch + partial_extra samples simulated call after call from empty, the
 * samples' lengths taken in turn from the workload's; each call draws at
 * most S tokens for every sample not ended (a sample that goes on prefills
 * its prompt and the tokens drawn before), then, if fewer than a batch have
 * ended, the oldest unfinished to their end; the batch is the oldest ended.
 * Each replica decodes its contiguous share of the call's samples. The
 * time: the mean call once the pool is in its steady state (the calls after
 * the first ceil(max_new / S) + 1), which the batch's training, costed
 * from the workload's lengths, matches. With groups (GRPO) a group ends, is
 * run to its end and leaves whole. */
/* What a partial rollouts' generation time depends on: the search asks
 * for the same layouts again and again, and each simulation runs a dozen
 * calls of the whole pool, so the last answers are kept (per thread: the
 * annealing chains run on threads of their own). The primitives are keyed
 * by address: their costs must not change while they live. */
typedef struct {
  const CostPrims *p;
  const CostShape *m;
  CostLayout       L;
  int              batch, extra, S, max_new, slots, prompt_len, nlen, group;
  uint64_t         lens; /* a hash of the workload's lengths */
} PartialKey;
#define PARTIAL_MEMO 32
static _Thread_local struct {
  PartialKey key;
  double     t;
  PetscBool  used;
} partial_memo[PARTIAL_MEMO];
static _Thread_local int partial_next;

static void partial_key(const CostPrims *p, const CostWork *w, const CostLayout *L, const CostShape *m, PartialKey *k)
{
  uint64_t h = 1469598103934665603ull;
  memset(k, 0, sizeof *k); /* padding too: keys are compared with memcmp */
  k->p = p, k->m = m, k->L = *L, k->batch = w->batch, k->extra = w->partial_extra, k->S = w->partial,
  k->max_new = w->max_new, k->slots = w->gen_slots, k->prompt_len = w->prompt_len, k->nlen = w->nlen,
  k->group = w->group;
  for (int i = 0; i < w->nlen; i++)
    h = (h ^ (uint64_t)w->len[i] ^ ((uint64_t)(w->plen ? w->plen[i] : 0) << 32)) * 1099511628211ull;
  k->lens = h;
}

/* Whether every sample of the group at g ends with this call's draws
 * (draw NULL: has ended). */
static PetscBool group_ends(const int *len, const int *done, const int *draw, int g, int G)
{
  for (int i = g; i < g + G; i++)
    if (done[i] + (draw ? draw[i] : 0) < len[i]) return PETSC_FALSE;
  return PETSC_TRUE;
}

static PetscErrorCode gen_partial(const CostPrims *p, const CostWork *w, const PlanCall *c, const CostLayout *L,
                                  const CostShape *m, double *t)
{
  int G = PetscMax(1, w->group), cap = w->batch + w->partial_extra, n = 0, next = 0,
      warm = (w->max_new + w->partial - 1) / w->partial + 1, calls = warm + 8;
  int    *len, *done, *ended, *draw, *rows;
  double *plen, sum = 0;

  PartialKey key;

  PetscFunctionBegin;
  partial_key(p, w, L, m, &key);
  for (int i = 0; i < PARTIAL_MEMO; i++)
    if (partial_memo[i].used && !memcmp(&partial_memo[i].key, &key, sizeof key)) {
      *t = partial_memo[i].t;
      PetscFunctionReturn(PETSC_SUCCESS);
    }
  PetscCall(PetscMalloc4(cap, &len, cap, &done, cap, &ended, cap, &draw));
  PetscCall(PetscMalloc2(cap, &plen, cap, &rows));
  for (int call = 0; call < calls; call++) {
    int    nreq = 0, have = 0, kept = 0, taken = 0;
    double tc = 0;
    for (; n < cap; n++, next++)
      len[n] = (int)cost_response_len(w, next), plen[n] = cost_prompt_len(w, next), done[n] = 0, ended[n] = 0;
    for (int i = 0; i < n; i++) draw[i] = ended[i] ? 0 : PetscMin(w->partial, len[i] - done[i]); /* this call's draws */
    for (int g = 0; g < n; g += G) have += group_ends(len, done, draw, g, G);
    for (int g = 0; g < n && have < w->batch / G; g += G) /* the oldest unfinished groups to their end */
      if (!group_ends(len, done, draw, g, G)) {
        for (int i = g; i < g + G; i++) draw[i] = len[i] - done[i];
        have++;
      }
    for (int i = 0; i < n; i++)
      if (draw[i]) rows[nreq++] = i;
    for (int d = 0; d < c->dp; d++) {
      int     r0 = nreq * d / c->dp, r1 = nreq * (d + 1) / c->dp, dr[PetscMax(1, r1 - r0)];
      double  pl[PetscMax(1, r1 - r0)];
      CostRep r;
      PetscCall(cost_rep_init(&r,
                              w->gen_slots > 0 ? PetscMin(w->gen_slots, PetscMax(1, r1 - r0)) : PetscMax(1, r1 - r0),
                              L->mbs, PetscMax(1, r1 - r0), PetscMax(1, r1 - r0)));
      for (int k = r0; k < r1; k++)
        dr[k - r0] = draw[rows[k]], pl[k - r0] = plen[rows[k]] + done[rows[k]], r.queue[r.qn++] = k - r0;
      r.draw = dr, r.plen = pl;
      double  end = cost_rep_run(p, w, L, m, &r, 0, NULL); /* not inside PetscMax: it would run twice */
      tc = PetscMax(tc, end);
      PetscCall(cost_rep_free(&r));
    }
    for (int i = 0; i < n; i++) done[i] += draw[i], ended[i] = done[i] == len[i];
    for (int g = 0; g < n; g += G) { /* the batch leaves: the oldest ended groups */
      PetscBool all = group_ends(len, done, NULL, g, G);
      if (all && taken < w->batch / G) taken++;
      else
        for (int i = g; i < g + G; i++)
          len[kept] = len[i], plen[kept] = plen[i], done[kept] = done[i], ended[kept++] = ended[i];
    }
    n = kept;
    if (call >= warm) sum += tc;
  }
  *t = sum / (calls - warm);
  partial_memo[partial_next].key  = key;
  partial_memo[partial_next].t    = *t;
  partial_memo[partial_next].used = PETSC_TRUE;
  partial_next                    = (partial_next + 1) % PARTIAL_MEMO;
  PetscCall(PetscFree4(len, done, ended, draw));
  PetscCall(PetscFree2(plen, rows));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode cost_generation(const CostPrims *p, const CostWork *w, const PlanCall *c, const CostShape *m, double *t,
                               double *fin)
{
  CostLayout L;

  PetscFunctionBegin;
  cost_layout(p, c, &L);
  if (w->partial > 0 && w->staleness > 0) {
    PetscCall(gen_partial(p, w, c, &L, m, t));
    PetscFunctionReturn(PETSC_SUCCESS);
  }
  *t = 0;
  for (int d = 0; d < c->dp; d++) {
    double end = 0;
    PetscCall(gen_replica(p, w, &L, m, w->batch * d / c->dp, w->batch * (d + 1) / c->dp, &end, fin));
    *t = PetscMax(*t, end);
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

static int arr_cmp(const void *a, const void *b)
{
  const CostArrival *x = a, *y = b;
  if (x->t != y->t) return x->t < y->t ? -1 : 1;
  return x->row - y->row;
}

int cost_replica_head(const PlanCall *c, int d) { return c->ranks[((c->pp - 1) * c->dp + d) * c->tp]; }

void cost_replica_spread(const PlanCall *c, PetscBool used, double *x, PetscBool to_head)
{
  if (!used || c->tp * c->pp == 1) return;
  for (int d = 0; d < c->dp; d++) {
    int h = cost_replica_head(c, d);
    for (int p = 0; p < c->pp; p++)
      for (int t = 0; t < c->tp; t++) {
        int q = c->ranks[(p * c->dp + d) * c->tp + t];
        if (to_head) x[h] = PetscMax(x[h], x[q]);
        else x[q] = PetscMax(x[q], x[h]);
      }
  }
}

int cost_replica_of(const PlanCall *c, int r)
{
  for (int i = 0; i < c->nranks; i++)
    if (c->ranks[i] == r) return (i / c->tp) % c->dp;
  return -1;
}

/* The head of an inference replica of several ranks hands each
 * micro-batch (arrivals first..last) to the others: one broadcast of the
 * packed samples over the replica, 4 bytes per token and log-probability
 * and 7 words of header each (the allowed sets of a restricted
 * distribution are not counted). Internode: the replica's tp group when it
 * is not pipelined, else the whole mesh's. */
static double stream_bcast(const CostPrims *p, const CostWork *w, const CostLayout *L,
                           const unsigned char *const need[3], const CostArrival *arr, int first, int last)
{
  for (int k = 0; k < 3; k++) { /* a call this rank serves on such a replica (its calls share the layout) */
    double bytes = 0;
    int    serves = 0;
    if (L[k].tp * L[k].pp == 1) continue;
    for (int j = first; j <= last; j++) serves |= need[k][arr[j].row];
    if (!serves) continue;
    for (int j = first; j <= last; j++)
      if (need[0][arr[j].row] || need[1][arr[j].row] || need[2][arr[j].row])
        bytes += 4 * (7 + 2 * cost_seq_len(w, arr[j].row));
    return p->coll(p->ctx, COST_BCAST, L[k].tp * L[k].pp, L[k].pp > 1 ? L[k].mesh_inter : L[k].tp_inter, bytes);
  }
  return 0;
}

double cost_stream_rank(const CostPrims *p, const CostWork *w, const Plan *plan, const CostLayout *L,
                        const unsigned char *const need[3], const double *arrive, double t0, CostArrival *arr)
{
  static const MFCId inf[3] = {MFC_REF_INF, MFC_REW_INF, MFC_CRITIC_INF};
  int                B      = w->batch, n = 0, first = 0, tokens = 0;
  double             t      = t0;

  for (int b = 0; b < B; b++)
    if (need[0][b] || need[1][b] || need[2][b]) arr[n++] = (CostArrival){arrive[b], b};
  if (!n) return -1;
  qsort(arr, (size_t)n, sizeof *arr, arr_cmp);
  /* micro-batches cut when the arrived, unprocessed samples hold
   * fuse_tokens tokens, the rest at the end; each served call runs on
   * its rows of the micro-batch, padded to their longest. Every rank of a
   * replica of several ranks has its replica's rows, and the same times. */
  for (int i = 0; i < n; i++) {
    tokens += (int)cost_seq_len(w, arr[i].row);
    if (tokens < plan->fuse_tokens && i < n - 1) continue;
    t = PetscMax(t, arr[i].t);
    t += stream_bcast(p, w, L, need, arr, first, i);
    for (int k = 0; k < 3; k++) {
      int rows = 0, top = 0;
      for (int j = first; j <= i; j++)
        if (need[k][arr[j].row]) rows++, top = PetscMax(top, (int)cost_seq_len(w, arr[j].row));
      if (rows) { /* one micro-batch through the replica's stages in turn (the head hands it out; the next waits for it)
                   */
        double st = cost_stage_time(p, cost_call_shape(w, inf[k]), COST_FWD, &L[k], rows, top);
        t += cost_pipeline(&st, 1, L[k].pp);
      }
    }
    first  = i + 1;
    tokens = 0;
  }
  return t;
}

/* The executor's deal (src/genfuse/deal.c): each generation replica deals
 * its rows, in finish order (ties: row order; the run's are in the engine's
 * slot order), to the replica of each
 * inference call with the least work it dealt so far. dealt[k*B + b]: call
 * k's replica of row b (-1: the call is not made). */
static PetscErrorCode stream_deal(const CostWork *w, const Plan *plan, const double *fin, CostArrival *arr, int *dealt)
{
  static const MFCId inf[3] = {MFC_REF_INF, MFC_REW_INF, MFC_CRITIC_INF};
  const PlanCall    *g      = &plan->call[MFC_ACTOR_GEN];
  int                B      = w->batch;
  double            *load;

  PetscFunctionBegin;
  PetscCall(PetscMalloc1(3 * PLAN_MAX_RANKS, &load));
  for (int i = 0; i < 3 * B; i++) dealt[i] = -1;
  for (int s = 0; s < g->dp; s++) {
    int b0, b1, n = 0;

    exec_rows(B, g->dp, s, &b0, &b1);
    for (int b = b0; b < b1; b++) arr[n++] = (CostArrival){fin[b], b};
    qsort(arr, (size_t)n, sizeof *arr, arr_cmp);
    PetscCall(PetscArrayzero(load, 3 * PLAN_MAX_RANKS));
    for (int k = 0; k < 3; k++) {
      const PlanCall *c = &plan->call[inf[k]];
      if (!cost_call_used(w, inf[k])) continue;
      for (int i = 0; i < n; i++)
        dealt[k * B + arr[i].row] = genfuse_deal(c->dp, load + k * PLAN_MAX_RANKS, s,
                                                 genfuse_deal_cost((int)cost_seq_len(w, arr[i].row),
                                                                   cost_call_shape(w, inf[k])->n_embd));
    }
  }
  PetscCall(PetscFree(load));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode cost_stream(const CostPrims *p, const CostWork *w, const Plan *plan, const double *fin, double *end,
                           int world)
{
  static const MFCId inf[3] = {MFC_REF_INF, MFC_REW_INF, MFC_CRITIC_INF};
  int                B      = w->batch, *dealt;
  CostArrival       *arr;
  CostLayout         L[3];
  unsigned char     *need; /* need[k*B + row]: inference call k wants the row on this rank */

  PetscFunctionBegin;
  PetscCall(PetscMalloc3(B, &arr, 3 * B, &need, 3 * B, &dealt));
  for (int k = 0; k < 3; k++) cost_layout(p, &plan->call[inf[k]], &L[k]);
  PetscCall(stream_deal(w, plan, fin, arr, dealt));
  /* each replica once, on its head (its other ranks have its rows and
   * times: the calls on a replica of several ranks share its layout) */
  for (int r = 0; r < world; r++) {
    const unsigned char *nk[3] = {need, need + B, need + 2 * B};
    int                  d[3], any = 0, head = 1;
    for (int k = 0; k < 3; k++) {
      const PlanCall *c = &plan->call[inf[k]];
      d[k] = cost_call_used(w, inf[k]) ? cost_replica_of(c, r) : -1;
      any |= d[k] >= 0;
      if (d[k] >= 0 && cost_replica_head(c, d[k]) != r) head = 0;
    }
    end[r] = -1;
    if (!any || !head) continue;
    for (int k = 0; k < 3; k++)
      for (int b = 0; b < B; b++) need[k * B + b] = d[k] >= 0 && dealt[k * B + b] == d[k];
    end[r] = cost_stream_rank(p, w, plan, L, nk, fin, 0, arr);
  }
  for (int k = 0; k < 3; k++) cost_replica_spread(&plan->call[inf[k]], cost_call_used(w, inf[k]), end, PETSC_FALSE);
  PetscCall(PetscFree3(arr, need, dealt));
  PetscFunctionReturn(PETSC_SUCCESS);
}
