/* cost/migrate.c: -fuse_gen_inf migrate as the executor runs it
 * (src/ppo/rollout_genfuse.c, src/genfuse/migrate.c, docs/fusion.md), sample by
 * sample. With R_t > 0 and more than one generation replica the replicas
 * step in lockstep (the executor's count is an allreduce before every
 * step, so a step ends when the slowest replica's does) until at most
 * R_t * B samples are unfinished or a replica has none left; then the
 * unfinished samples move by the executor's own plan (genfuse_migrate_plan:
 * the same destinations, the same samples), their states and KV-cache
 * shards costed as point-to-point messages, and the destinations decode the
 * tail alone. Inference: rows bound for generation ranks wait until the
 * migration (or their sender's end of generation), the finished rows of
 * decoding ranks are dealt to the freed ranks (genfuse_reroute), and each rank
 * works through its rows from when it stops generating, in -fuse_tokens
 * micro-batches (cost_stream_rank). R_t 0 (or one replica): no count and
 * no migration, co-located streaming. */
#include "cost_impl.h"
#include "genfuse.h"
#include <math.h>

typedef struct {
  const CostPrims *p;
  const CostWork  *w;
  const Plan      *plan;
  CostLayout       L;
  int              B, dp, S;
  CostRep         *rep;
  double          *fin, *stop;   /* [B] finish times; [dp] when each replica's ranks stop generating */
  int             *idx, *kvl, *from, *to; /* [B] the migration's unfinished samples */
  unsigned char   *dest;         /* [dp] */
  int              n, m;         /* unfinished at the migration; destination replicas */
} MigSim;

/* The generation replica whose rows [B*d/dp, B*(d+1)/dp) hold row b. */
static int origin(int B, int dp, int b)
{
  int d = 0;
  while (d + 1 < dp && B * (d + 1) / dp <= b) d++;
  return d;
}

/* A message of `bytes` between two replicas' ranks, in -plan_bucket_mb
 * pieces (as the reallocation's buckets). */
static double msg_time(const MigSim *s, int a, int b, double bytes)
{
  const PlanCall *c = &s->plan->call[MFC_ACTOR_GEN];
  int             n = c->tp * c->pp, ranks[2 * PLAN_MAX_RANKS], k = 0;
  double          bucket = PetscMax(1.0, s->plan->bucket_mb) * 1048576.0;
  PetscBool       inter;

  if (bytes <= 0) return 0;
  for (int i = 0; i < c->nranks; i++) /* mesh index (p*dp + d)*tp + t */
    if ((i / c->tp) % c->dp == a || (i / c->tp) % c->dp == b) ranks[k++] = c->ranks[i];
  inter = cost_ranks_internode(s->p, ranks, PetscMin(k, 2 * n));
  return s->p->coll(s->p->ctx, COST_P2P, 2, inter, bytes) +
         (ceil(bytes / bucket) - 1) * s->p->coll(s->p->ctx, COST_P2P, 2, inter, 0);
}

/* The unfinished samples move by the executor's plan at time t; returns the
 * migration's time (the busiest rank: a source sends to its destinations,
 * a destination receives source by source). */
static PetscErrorCode migrate(MigSim *s, double *t_mig, CostEstimate *est)
{
  const PlanCall  *c  = &s->plan->call[MFC_ACTOR_GEN];
  const CostShape *m  = &s->w->actor;
  int              dp = s->dp, nr = c->tp * c->pp, moved = 0;
  /* one position of the cache on the rank holding the largest stage's
   * shard (keys and values), and on all ranks of a replica together */
  double kv_rank = 2.0 * cost_stage_layers(m, c->pp, 0) * cost_kv_width(m) / cost_kv_ranks(m, c->tp) *
                   s->p->bytes_per_param;
  double kv_all  = 2.0 * m->n_layer * cost_kv_width(m) * s->p->bytes_per_param;
  double *pair, *send, *recv, total = 0, T = 0;
  GenFuseMigIn in;

  PetscFunctionBegin;
  s->n = 0;
  for (int d = 0; d < dp; d++) { /* the heads' lists: running, then waiting */
    CostRep *r = &s->rep[d];
    for (int i = 0; i < r->na; i++)
      s->idx[s->n] = r->row[i], s->from[s->n] = d, s->kvl[s->n++] = (int)cost_prompt_len(s->w, r->row[i]) + r->done[i];
    for (int j = r->qh; j < r->qn; j++) s->idx[s->n] = r->queue[j], s->from[s->n] = d, s->kvl[s->n++] = 0;
  }
  in = (GenFuseMigIn){dp, s->S, s->plan->migrate_to, s->n, s->from, s->idx, s->kvl};
  PetscCall(genfuse_migrate_plan(&in, &s->m, s->dest, s->to));
  PetscCall(PetscCalloc3(dp * dp, &pair, dp, &send, dp, &recv));
  /* a state: 4 words of header, then tokens, log-probabilities and
   * allowed-set counts so far (L = 1 + decoded: the prefill gave the
   * first), and a running sample's cache of positions 0 .. P+L-2 */
  for (int i = 0; i < s->n; i++) {
    double words, kvpos;
    if (s->to[i] == s->from[i]) continue;
    words = 4 + (s->kvl[i] ? 3.0 * (s->kvl[i] - cost_prompt_len(s->w, s->idx[i]) + 1) : 0);
    kvpos = s->kvl[i];
    pair[s->from[i] * dp + s->to[i]] += 4 * words + kvpos * kv_rank;
    total += nr * 4 * words + kvpos * kv_all;
    moved++;
  }
  for (int a = 0; a < dp; a++)
    for (int b = 0; b < dp; b++) {
      double x = msg_time(s, a, b, pair[a * dp + b]);
      send[a] += x, recv[b] += x;
    }
  for (int d = 0; d < dp; d++) T = PetscMax(T, PetscMax(send[d], recv[d]));
  PetscCall(PetscFree3(pair, send, recv));
  /* the states move: sources keep what stays, destinations take the
   * arrivals source by source (running into free slots, waiting at the
   * end of their queue) */
  for (int d = 0; d < dp; d++) {
    CostRep *r = &s->rep[d];
    int      q = 0;
    for (int i = 0; i < r->na;) {
      int j, row = r->row[i];
      for (j = 0; j < s->n && s->idx[j] != row; j++) {}
      if (s->to[j] != d)
        r->row[i] = r->row[r->na - 1], r->rem[i] = r->rem[r->na - 1], r->done[i] = r->done[r->na - 1], r->na--;
      else i++;
    }
    for (int j = r->qh; j < r->qn; j++) {
      int i;
      for (i = 0; i < s->n && s->idx[i] != r->queue[j]; i++) {}
      if (s->to[i] == d) r->queue[q++] = r->queue[j];
    }
    r->qh = 0, r->qn = q;
  }
  for (int i = 0; i < s->n; i++) {
    CostRep *r = &s->rep[s->to[i]];
    if (s->to[i] == s->from[i]) continue;
    if (s->kvl[i]) {
      int done = s->kvl[i] - (int)cost_prompt_len(s->w, s->idx[i]);
      r->row[r->na] = s->idx[i], r->done[r->na] = done,
      r->rem[r->na++] = (int)cost_response_len(s->w, s->idx[i]) - 1 - done;
    } else r->queue[r->qn++] = s->idx[i];
  }
  est->migrate_s       = T;
  est->migrate_bytes   = total;
  est->migrate_samples = moved;
  est->migrate_replicas = s->m;
  *t_mig = T;
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* The fused stage at R_t rt: each rank's end (end[rank]) and the last
 * sample's finish (*gen_t). */
static PetscErrorCode stage(MigSim *s, double rt, double *end, double *gen_t, CostEstimate *est)
{
  static const MFCId inf[3] = {MFC_REF_INF, MFC_REW_INF, MFC_CRITIC_INF};
  const CostWork    *w = s->w;
  const Plan        *plan = s->plan;
  const CostShape   *am = &w->actor;
  int                B = s->B, dp = s->dp, world = plan->world, *q_rep, *orig;
  PetscBool          lockstep = rt > 0 && dp > 1, migrated = PETSC_FALSE;
  double             t = 0, t_mig = 0, *arrive, *t0q;
  unsigned char     *need, *member, *keep, *freed;
  CostLayout         Li[3];
  CostArrival       *arr;

  PetscFunctionBegin;
  est->migrate_at = rt, est->migrate_t = -1, est->migrate_s = est->migrate_bytes = 0, est->migrate_samples = 0,
  est->migrate_replicas = dp;
  for (int d = 0; d < dp; d++) {
    CostRep *r = &s->rep[d];
    r->na = r->qh = r->qn = 0;
    for (int b = B * d / dp; b < B * (d + 1) / dp; b++) r->queue[r->qn++] = b;
  }
  while (lockstep) {
    int    U = 0, idle = 0, seg = 0;
    double dt = 0, x[PLAN_MAX_RANKS];
    for (int d = 0; d < dp; d++) {
      int left = s->rep[d].na + s->rep[d].qn - s->rep[d].qh;
      U += left, idle |= left == 0;
    }
    if (!U) break;
    if (U <= rt * B || idle) { /* as genfuse_migrate_step */
      PetscCall(migrate(s, &t_mig, est));
      est->migrate_t = t, migrated = PETSC_TRUE;
      break;
    }
    for (int d = 0; d < dp; d++) {
      int g;
      x[d] = cost_rep_fill(s->p, w, &s->L, am, &s->rep[d], t, s->fin);
      if ((g = cost_rep_seg(&s->rep[d])) && (!seg || g < seg)) seg = g;
    }
    for (int d = 0; d < dp; d++) {
      x[d] += cost_rep_decode(s->p, w, &s->L, am, &s->rep[d], seg);
      cost_rep_advance(&s->rep[d], seg, t + x[d], s->fin);
      dt = PetscMax(dt, x[d]);
    }
    t += dt;
  }
  /* after the migration (or without the count) each replica goes on alone */
  *gen_t = 0;
  for (int d = 0; d < dp; d++) {
    double e = cost_rep_run(s->p, w, &s->L, am, &s->rep[d], migrated ? t + t_mig : t, s->fin);
    if (migrated) s->stop[d] = s->dest[d] ? e : t + t_mig;
    else s->stop[d] = lockstep ? t : e;
    *gen_t = PetscMax(*gen_t, s->stop[d]);
  }
  for (int b = 0; b < B; b++) *gen_t = PetscMax(*gen_t, s->fin[b]);

  /* the inference rows: by default each replica's own; after the migration
   * the finished rows of decoding ranks go to the freed ranks */
  PetscCall(PetscCalloc4(3 * (size_t)world * B, &need, 3 * world, &member, B, &keep, dp, &freed));
  PetscCall(PetscMalloc5(world, &q_rep, B, &arrive, B, &arr, world, &t0q, B, &orig));
  for (int b = 0; b < B; b++) orig[b] = origin(B, dp, b);
  for (int q = 0; q < world; q++) q_rep[q] = cost_replica_of(&plan->call[MFC_ACTOR_GEN], q);
  for (int k = 0; k < 3; k++) {
    const PlanCall *c = &plan->call[inf[k]];
    cost_layout(s->p, c, &Li[k]);
    if (!cost_call_used(w, inf[k])) continue;
    for (int d = 0; d < c->dp; d++) { /* a replica's rows go to its head, as in the run */
      int q = cost_replica_head(c, d);
      member[k * world + q] = 1;
      for (int b = B * d / c->dp; b < B * (d + 1) / c->dp; b++) need[((size_t)k * world + q) * B + b] = 1;
    }
  }
  if (migrated) {
    for (int d = 0; d < dp; d++) freed[d] = !s->dest[d];
    for (int i = 0; i < s->n; i++) keep[s->idx[i]] = 1;
    genfuse_reroute(3, world, B, q_rep, freed, member, keep, need);
  }
  /* a replica of several ranks starts when all its ranks have stopped
   * generating (its head hands each micro-batch to the others) */
  for (int q = 0; q < world; q++) t0q[q] = q_rep[q] >= 0 ? s->stop[q_rep[q]] : 0;
  for (int k = 0; k < 3; k++) cost_replica_spread(&plan->call[inf[k]], cost_call_used(w, inf[k]), t0q, PETSC_TRUE);
  for (int q = 0; q < world; q++) {
    const unsigned char *nk[3] = { need + (size_t)q * B, need + ((size_t)world + q) * B,
                                   need + (2 * (size_t)world + q) * B };
    double               t0    = t0q[q];
    if (!member[q] && !member[world + q] &&
        !member[2 * world + q]) { /* no replica's head: no rows (genfuse_reroute deals to members only) */
      end[q] = q_rep[q] >= 0 ? s->stop[q_rep[q]] : -1;
      continue;
    }
    for (int b = 0; b < B; b++) {
      /* rows for a generation rank wait in their sender until the
       * migration, or without one until the sender stops generating */
      arrive[b] = s->fin[b];
      if (q_rep[q] >= 0) arrive[b] = PetscMax(arrive[b], migrated ? t + t_mig : s->stop[orig[b]]);
    }
    end[q] = cost_stream_rank(s->p, w, plan, Li, nk, arrive, t0, arr);
    if (end[q] < 0 && q_rep[q] >= 0) end[q] = s->stop[q_rep[q]];
  }
  /* the other ranks of a replica are busy until its head is done */
  for (int k = 0; k < 3; k++) cost_replica_spread(&plan->call[inf[k]], cost_call_used(w, inf[k]), end, PETSC_FALSE);
  PetscCall(PetscFree4(need, member, keep, freed));
  PetscCall(PetscFree5(q_rep, arrive, arr, t0q, orig));
  PetscFunctionReturn(PETSC_SUCCESS);
}

typedef struct {
  MigSim       *s;
  double       *end;
  CostEstimate *est;
} MigPick;

/* genfuse_rt_pick's stage: the last rank's end at R_t rt */
static PetscErrorCode pick_stage(void *ctx, double rt, double *seconds)
{
  MigPick *m = ctx;
  double   g;

  PetscFunctionBegin;
  PetscCall(stage(m->s, rt, m->end, &g, m->est));
  *seconds = 0;
  for (int q = 0; q < m->s->plan->world; q++) *seconds = PetscMax(*seconds, m->end[q]);
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode cost_migrate(const CostPrims *p, const CostWork *w, const Plan *plan, double *end, double *gen_t,
                            CostEstimate *est)
{
  const PlanCall *c = &plan->call[MFC_ACTOR_GEN];
  MigSim          s;
  double          rt = plan->migrate_at;

  PetscFunctionBegin;
  s.p = p, s.w = w, s.plan = plan, s.B = w->batch, s.dp = c->dp;
  s.S = w->gen_slots > 0 ? w->gen_slots : (s.B + s.dp - 1) / s.dp;
  cost_layout(p, c, &s.L);
  PetscCall(PetscMalloc1(s.dp, &s.rep));
  for (int d = 0; d < s.dp; d++) PetscCall(cost_rep_init(&s.rep[d], s.S, c->mbs, s.B, s.B));
  PetscCall(
      PetscMalloc7(s.B, &s.fin, s.dp, &s.stop, s.B, &s.idx, s.B, &s.kvl, s.B, &s.from, s.B, &s.to, s.dp, &s.dest));
  if (rt < 0) { /* auto: what the run picks, on this model of the stage */
    MigPick m = {&s, end, est};
    PetscCall(genfuse_rt_pick(pick_stage, &m, &rt, NULL));
  }
  PetscCall(stage(&s, rt, end, gen_t, est));
  for (int d = 0; d < s.dp; d++) PetscCall(cost_rep_free(&s.rep[d]));
  PetscCall(PetscFree(s.rep));
  PetscCall(PetscFree7(s.fin, s.stop, s.idx, s.kvl, s.from, s.to, s.dest));
  PetscFunctionReturn(PETSC_SUCCESS);
}
