/* genfuse: -fuse_migrate_at auto (inc/genfuse.h, docs/fusion.md). R_t from a
 * simulation of the fused stage over the previous iteration's lengths with
 * its measured decode-step and inference costs: continuous batching on each
 * replica in lockstep (the migration's count makes the replicas step
 * together), the migration planned by genfuse_migrate_plan itself (so the
 * model moves what the run would) and the inference rows rerouted as the
 * run reroutes them (genfuse_reroute), then each inference rank working
 * through its rows in finish order from when it stops generating. What it leaves
 * out (the migration's and the streaming's own time, step times that
 * change with the number of active samples) is small at this scale and
 * the same for every candidate. */
#include "genfuse.h"
#include "exec.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

static const double candidates[] = {0, 0.05, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5};

typedef struct {
  int           *rep, *left, *done, *running, *queued, *order;
  double        *fin, *stop;
  int           *q, *qn; /* per replica queue [dp][B] and its length (consumed from qh) */
  int           *qh;
} SimState;

static const double *sort_key;
static int by_finish(const void *a, const void *b)
{
  double x = sort_key[*(const int *)a], y = sort_key[*(const int *)b];
  return x < y ? -1 : x > y ? 1 : *(const int *)a - *(const int *)b;
}

/* Moves the unfinished samples as the run would; returns PETSC_TRUE when
 * a plan could be made. */
static PetscBool sim_migrate(const GenFuseSim *s, SimState *st, unsigned char *freed)
{
  int           n = 0, B = s->B, m, *idx, *kvl, *rep, *to;
  unsigned char *dest;
  GenFuseMigIn     in;

  idx = malloc(sizeof(int) * (size_t)(4 * B + 1));
  dest = malloc((size_t)s->dp + 1);
  if (!idx || !dest) return PETSC_FALSE;
  kvl = idx + B, rep = kvl + B, to = rep + B;
  for (int b = 0; b < B; b++)
    if (!st->done[b])
      idx[n] = b, rep[n] = st->rep[b],
      kvl[n] = st->running[b] ? s->len[b] - s->rlen[b] + (s->rlen[b] - st->left[b]) : 0, n++;
  in = (GenFuseMigIn){s->dp, s->slots, 0, n, rep, idx, kvl};
  if (genfuse_migrate_plan(&in, &m, dest, to)) {
    free(idx), free(dest);
    return PETSC_FALSE;
  }
  for (int d = 0; d < s->dp; d++) freed[d] = !dest[d];
  /* rebuild the queues: the running keep running (they have slots), the
   * waiting join their destination's queue in order */
  for (int d = 0; d < s->dp; d++) st->qn[d] = st->qh[d] = 0;
  for (int i = 0; i < n; i++) {
    int b = idx[i];
    st->rep[b] = to[i];
    if (!st->running[b]) st->q[(size_t)to[i] * B + st->qn[to[i]]++] = b;
  }
  free(idx), free(dest);
  return PETSC_TRUE;
}

double genfuse_sim_stage(const GenFuseSim *s, double rt)
{
  int            B = s->B, dp = s->dp, unfinished = B, migrated = 0, *busy;
  double         t = 0, t_mig = -1, end = 0, stage;
  SimState       st;
  unsigned char *freed, *need;

  if (B <= 0) return 0;
  st.rep = calloc((size_t)B * 5 + (size_t)dp * ((size_t)B + 3) + 1, sizeof(int));
  st.fin = calloc((size_t)B + dp + 1, sizeof(double));
  freed  = calloc((size_t)dp + 1, 1);
  need   = malloc((size_t)s->nq * B + 1);
  if (!st.rep || !st.fin || !freed || !need) return INFINITY;
  memcpy(need, s->need, (size_t)s->nq * B);
  st.left = st.rep + B, st.done = st.left + B, st.running = st.done + B, st.order = st.running + B;
  st.q = st.order + B, st.qn = st.q + (size_t)dp * B, st.qh = st.qn + dp, busy = st.qh + dp;
  st.stop = st.fin + B;
  for (int d = 0; d < dp; d++) {
    int b0, b1;
    exec_rows(B, dp, d, &b0, &b1);
    for (int b = b0; b < b1; b++) st.rep[b] = d, st.q[(size_t)d * B + st.qn[d]++] = b;
  }
  for (int b = 0; b < B; b++) st.left[b] = PetscMax(1, s->rlen[b]);
  while (unfinished > 0) {
    int idle = 0;
    for (int d = 0; d < dp; d++) busy[d] = 0;
    for (int b = 0; b < B; b++) busy[st.rep[b]] += !st.done[b];
    for (int d = 0; d < dp; d++) idle |= busy[d] == 0;
    if (!migrated && rt > 0 && (unfinished <= rt * B || idle) && dp > 1) { /* as genfuse_migrate_step */
      if (!sim_migrate(s, &st, freed)) break;
      migrated = 1, t_mig = t;
    }
    for (int d = 0; d < dp; d++) busy[d] = 0;
    for (int b = 0; b < B; b++) busy[st.rep[b]] += st.running[b];
    for (int d = 0; d < dp; d++) /* admission */
      while (busy[d] < s->slots && st.qh[d] < st.qn[d]) st.running[st.q[(size_t)d * B + st.qh[d]++]] = 1, busy[d]++;
    t += s->step_s;
    for (int b = 0; b < B; b++)
      if (st.running[b] && --st.left[b] == 0) st.running[b] = 0, st.done[b] = 1, st.fin[b] = t, unfinished--;
  }
  end = t;
  /* when each replica's ranks stop generating: a freed replica at the
   * migration; otherwise at its last sample, but while the count still runs
   * (a threshold above 0 not yet reached) an idle replica keeps joining it */
  for (int d = 0; d < dp; d++) {
    double last = 0;
    for (int b = 0; b < B; b++)
      if (st.rep[b] == d && st.fin[b] > last) last = st.fin[b];
    if (migrated && freed[d]) st.stop[d] = t_mig;
    else if (rt > 0 && dp > 1) st.stop[d] = PetscMax(last, migrated ? t_mig : end);
    else st.stop[d] = last;
  }
  if (migrated) { /* the rows the run reroutes: finished ones of decoding ranks to freed ranks */
    unsigned char *member = calloc((size_t)s->nq + 1, 1), *keep = calloc((size_t)B + 1, 1);
    if (!member || !keep) return INFINITY;
    for (int q = 0; q < s->nq; q++)
      for (int b = 0; b < B; b++) member[q] |= s->need[(size_t)q * B + b];
    for (int b = 0; b < B; b++) keep[b] = st.fin[b] > t_mig;
    genfuse_reroute(1, s->nq, B, s->q_rep, freed, member, keep, need);
    free(member), free(keep);
  }
  for (int b = 0; b < B; b++) st.order[b] = b;
  sort_key = st.fin;
  qsort(st.order, (size_t)B, sizeof(int), by_finish);
  stage = end;
  for (int q = 0; q < s->nq; q++) {
    double at = s->q_rep[q] >= 0 ? st.stop[s->q_rep[q]] : 0;
    for (int r = 0; s->head_of && r < s->nq; r++) /* the replica waits for its last rank */
      if (s->head_of[r] == q && s->q_rep[r] >= 0) at = PetscMax(at, st.stop[s->q_rep[r]]);
    for (int j = 0; j < B; j++) {
      int b = st.order[j];
      if (!need[(size_t)q * B + b]) continue;
      at = PetscMax(at, st.fin[b]) + s->tok_s * s->len[b];
    }
    stage = PetscMax(stage, at);
  }
  free(st.rep), free(st.fin), free(freed), free(need);
  return stage;
}

PetscErrorCode genfuse_rt_pick(GenFuseStageFn stage, void *ctx, double *rt, double *pred)
{
  double bt = INFINITY;

  PetscFunctionBegin;
  *rt = 0;
  for (size_t k = 0; k < sizeof candidates / sizeof candidates[0]; k++) {
    double v;
    PetscCall(stage(ctx, candidates[k], &v));
    if (v < bt * (1 - 1e-9)) bt = v, *rt = candidates[k];
  }
  if (pred) *pred = bt;
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode sim_stage(void *ctx, double rt, double *seconds)
{
  *seconds = genfuse_sim_stage((const GenFuseSim *)ctx, rt);
  return PETSC_SUCCESS;
}

double genfuse_sim_pick(const GenFuseSim *s, double *pred)
{
  double rt = 0;

  /* sim_stage cannot fail, so neither can the pick */
  (void)genfuse_rt_pick(sim_stage, (void *)s, &rt, pred);
  return rt;
}
