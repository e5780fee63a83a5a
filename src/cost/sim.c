/* cost/sim.c: the simulator. Several iterations of the PPO (or GRPO) graph
 * as the executor runs it (src/ppo/graph.c, src/exec/graph.c): the
 * weight syncs, the generation, the inference calls, the training calls.
 * The executor runs the graph level by level (a level's nodes need only
 * earlier levels' outputs) and shares every node's outputs with every rank
 * after each level, and an iteration after the previous one has ended; in
 * a level, each rank runs its nodes in turn. So a node starts when the
 * earlier levels have ended and every rank of its meshes is free: nodes on
 * overlapping meshes run one after another, on disjoint meshes at the same
 * time. Every node of every iteration is one row per rank in the timeline. */
#include "cost_impl.h"
#include <math.h>
#include <string.h>

enum { N_ASYNC, N_CSYNC, N_GEN, N_REF, N_REW, N_CINF, N_PROX, N_ATRAIN, N_CTRAIN, N_NODES };
static const char *const node_names[N_NODES] = { "actor_sync",     "critic_sync",      "generation",
                                                 "ref_inference",  "reward_inference", "critic_inference",
                                                 "prox_inference", "actor_train",      "critic_train" };

typedef struct {
  PetscBool      used;
  double         dur;
  unsigned char *on;      /* [world]: the node runs on this rank */
  double        *busy;    /* [world] or NULL: per-rank time inside the node (streaming) */
  int            dep[6], ndep;
  int            level;   /* the executor's level: 0 without inputs made in the iteration, else 1 + its inputs' */
  PetscBool
      late; /* its share waits until the iteration's end: later levels do not wait for it (asynchronous generation) */
  const char    *name;
} SimNode;

static void mark(SimNode *nd, const PlanCall *c)
{
  for (int i = 0; i < c->nranks; i++) nd->on[c->ranks[i]] = 1;
}

/* A reallocation's time: the busiest receiver's bytes, or the senders'
 * share if larger, over the link it crosses, in -plan_bucket_mb messages.
 * Through the host (p->sync_host): each message is copied from the device to
 * the host, sent over MPI and copied to the device, one after another (the
 * transfer plan's host buffers are packed, sent and unpacked in turn), so
 * the bytes cross the host link twice, and inside a node the MPI copy
 * between host buffers is taken at the host link's bandwidth too (between
 * nodes: the network's point-to-point time). */
static PetscErrorCode sync_time(const CostPrims *p, const CostShape *m, const Plan *plan, const PlanCall *a,
                                const PlanCall *b, double *t)
{
  double    total, max_recv, bytes, bucket = PetscMax(1.0, plan->bucket_mb) * 1048576.0, msgs;
  int       ranks[2 * PLAN_MAX_RANKS], n = 0;
  PetscBool inter;

  PetscFunctionBegin;
  PetscCall(cost_realloc_bytes(m, p->bytes_per_param, a, b, &total, &max_recv));
  for (int i = 0; i < a->nranks; i++) ranks[n++] = a->ranks[i];
  for (int i = 0; i < b->nranks; i++) ranks[n++] = b->ranks[i];
  inter = cost_ranks_internode(p, ranks, n);
  bytes = PetscMax(max_recv, total / a->nranks);
  msgs  = ceil(bytes / bucket);
  *t    = 0;
  if (bytes <= 0) PetscFunctionReturn(PETSC_SUCCESS);
  if (!p->sync_host)
    *t = p->coll(p->ctx, COST_P2P, 2, inter, bytes) + (msgs - 1) * p->coll(p->ctx, COST_P2P, 2, inter, 0);
  else {
    double hop = p->host_bw > 0 ? bytes / p->host_bw : 0; /* one crossing of the host link */
    *t         = 2 * hop + (inter ? p->coll(p->ctx, COST_P2P, 2, PETSC_TRUE, bytes) +
                                (msgs - 1) * p->coll(p->ctx, COST_P2P, 2, PETSC_TRUE, 0)
                                  : hop + (msgs - 1) * p->coll(p->ctx, COST_P2P, 2, PETSC_FALSE, 0));
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

static void dep(SimNode *nd, int d) { nd->dep[nd->ndep++] = d; }

/* The nodes of one iteration and their durations. */
static PetscErrorCode build(const CostPrims *p, const CostWork *w, const Plan *plan, SimNode *nd, CostEstimate *est)
{
  PetscBool crit = !w->critic_free, acopy = !plan_same_layout(&plan->call[MFC_ACTOR_GEN], &plan->call[MFC_ACTOR_TRAIN]);
  PetscBool ccopy = crit && !plan_same_layout(&plan->call[MFC_CRITIC_INF], &plan->call[MFC_CRITIC_TRAIN]);
  PetscBool stream = plan->fuse != FUSE_NONE;

  PetscFunctionBegin;
  for (int k = 0; k < N_NODES; k++) nd[k].name = node_names[k];
  nd[N_ASYNC].used = acopy;
  nd[N_CSYNC].used = ccopy;
  nd[N_GEN].used = nd[N_REF].used = nd[N_ATRAIN].used = PETSC_TRUE;
  nd[N_REW].used = !w->reward_free;
  nd[N_CINF].used = nd[N_CTRAIN].used = crit;
  if (acopy) {
    mark(&nd[N_ASYNC], &plan->call[MFC_ACTOR_TRAIN]);
    mark(&nd[N_ASYNC], &plan->call[MFC_ACTOR_GEN]);
    PetscCall(
        sync_time(p, &w->actor, plan, &plan->call[MFC_ACTOR_TRAIN], &plan->call[MFC_ACTOR_GEN], &nd[N_ASYNC].dur));
    dep(&nd[N_GEN], N_ASYNC);
  }
  if (ccopy) {
    mark(&nd[N_CSYNC], &plan->call[MFC_CRITIC_TRAIN]);
    mark(&nd[N_CSYNC], &plan->call[MFC_CRITIC_INF]);
    PetscCall(
        sync_time(p, &w->critic, plan, &plan->call[MFC_CRITIC_TRAIN], &plan->call[MFC_CRITIC_INF], &nd[N_CSYNC].dur));
    dep(&nd[N_CINF], N_CSYNC);
  }
  est->sync_s[0] = nd[N_ASYNC].dur;
  est->sync_s[1] = nd[N_CSYNC].dur;
  est->realloc_s = nd[N_ASYNC].dur + nd[N_CSYNC].dur;

  mark(&nd[N_GEN], &plan->call[MFC_ACTOR_GEN]);
  if (stream) {
    /* generation and inference as one node; each inference rank works on
     * its micro-batches as the samples arrive (gen.c), with migrate from
     * when it stops generating (migrate.c) */
    double *fin, gen_t;
    PetscCall(PetscMalloc1(w->batch, &fin));
    PetscCall(PetscCalloc1(plan->world, &nd[N_GEN].busy));
    if (plan->fuse == FUSE_MIGRATE) PetscCall(cost_migrate(p, w, plan, nd[N_GEN].busy, &gen_t, est));
    else {
      PetscCall(cost_generation(p, w, &plan->call[MFC_ACTOR_GEN], &w->actor, &gen_t, fin));
      PetscCall(cost_stream(p, w, plan, fin, nd[N_GEN].busy, plan->world));
    }
    PetscCall(PetscFree(fin));
    est->call_s[MFC_ACTOR_GEN] = gen_t;
    nd[N_GEN].dur              = gen_t;
    for (int r = 0; r < plan->world; r++) {
      if (nd[N_GEN].busy[r] >= 0) nd[N_GEN].on[r] = 1, nd[N_GEN].dur = PetscMax(nd[N_GEN].dur, nd[N_GEN].busy[r]);
      else if (nd[N_GEN].on[r]) nd[N_GEN].busy[r] = gen_t;
    }
    if (ccopy) dep(&nd[N_GEN], N_CSYNC);
    nd[N_REF].used = nd[N_REW].used = nd[N_CINF].used = PETSC_FALSE;
    nd[N_GEN].name = "generation+inference";
    est->genfuse_s = nd[N_GEN].dur;
  } else {
    PetscCall(cost_generation(p, w, &plan->call[MFC_ACTOR_GEN], &w->actor, &nd[N_GEN].dur, NULL));
    est->call_s[MFC_ACTOR_GEN] = nd[N_GEN].dur;
  }

  est->offload_s = 0;
  for (int k = N_REF; k <= N_CINF; k++) {
    MFCId c = k == N_REF ? MFC_REF_INF : k == N_REW ? MFC_REW_INF : MFC_CRITIC_INF;
    if (!cost_call_used(w, c)) continue;
    if (!stream) {
      mark(&nd[k], &plan->call[c]);
      if (!w->staleness) dep(&nd[k], N_GEN); /* asynchronous: on a batch generated earlier */
      nd[k].dur = cost_inference(p, w, &plan->call[c], cost_call_shape(w, c));
      est->call_s[c] = nd[k].dur;
    }
    if (c != MFC_CRITIC_INF && plan->offload && p->host_bw > 0) {
      /* to the device before the call and back after it */
      PetscBool ov[MFC_COUNT][MFC_COUNT], shared[MFC_COUNT];
      PetscCall(cost_overlaps(w, plan, ov, shared));
      if (shared[c]) {
        double x = 2 * cost_weight_bytes(p, cost_call_shape(w, c), &plan->call[c]) / p->host_bw;
        est->offload_s += x;
        if (stream) nd[N_GEN].dur += x;
        else nd[k].dur += x, est->call_s[c] += x;
      }
    }
  }
  if (w->staleness) { /* the generation of a later batch, shared at the end; the proximal policy's forward on the
                         training mesh */
    const PlanCall *g = &plan->call[MFC_ACTOR_GEN];
    nd[N_GEN].late = PETSC_TRUE;
    /* the frozen models' calls with the generation when on its mesh, one rank a replica (src/ppo/graph.c) */
    if (g->tp == 1 && g->pp == 1 && plan_same_layout(&plan->call[MFC_REF_INF], g) &&
        (w->reward_free || plan_same_layout(&plan->call[MFC_REW_INF], g)))
      nd[N_REF].late = nd[N_REW].late = PETSC_TRUE;
    if (w->prox) {
      nd[N_PROX].used = PETSC_TRUE;
      mark(&nd[N_PROX], &plan->call[MFC_ACTOR_TRAIN]);
      nd[N_PROX].dur = cost_inference(p, w, &plan->call[MFC_ACTOR_TRAIN], &w->actor);
      if (ccopy) dep(&nd[N_PROX], N_CSYNC); /* the run puts it in the critic inference's level */
    }
  }
  mark(&nd[N_ATRAIN], &plan->call[MFC_ACTOR_TRAIN]);
  for (int k = N_GEN; k <= N_PROX; k++)
    if (nd[k].used && !nd[k].late) dep(&nd[N_ATRAIN], k);
  if (crit && plan->fuse_train) {
    mark(&nd[N_ATRAIN], &plan->call[MFC_CRITIC_TRAIN]);
    nd[N_ATRAIN].dur  = cost_fused_training(p, w, plan);
    nd[N_ATRAIN].name = "fused_train";
    nd[N_CTRAIN].used = PETSC_FALSE;
    est->call_s[MFC_ACTOR_TRAIN] = nd[N_ATRAIN].dur;
  } else {
    nd[N_ATRAIN].dur             = cost_training(p, w, plan, MFC_ACTOR_TRAIN, plan->zero1);
    est->call_s[MFC_ACTOR_TRAIN] = nd[N_ATRAIN].dur;
    if (crit) {
      mark(&nd[N_CTRAIN], &plan->call[MFC_CRITIC_TRAIN]);
      for (int k = N_GEN; k <= N_PROX; k++)
        if (nd[k].used && !nd[k].late) dep(&nd[N_CTRAIN], k);
      nd[N_CTRAIN].dur              = cost_training(p, w, plan, MFC_CRITIC_TRAIN, plan->zero1);
      est->call_s[MFC_CRITIC_TRAIN] = nd[N_CTRAIN].dur;
    }
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode tl_add(CostTimeline *tl, int rank, int iter, const char *name, double t0, double t1)
{
  int k;

  PetscFunctionBegin;
  for (k = 0; k < tl->nnames; k++)
    if (!strcmp(tl->names[k], name)) break;
  if (k == tl->nnames) {
    PetscCheck(tl->nnames < 16, PETSC_COMM_SELF, PETSC_ERR_PLIB, "cost timeline: too many call names");
    PetscCall(PetscStrncpy(tl->names[tl->nnames++], name, sizeof tl->names[0]));
  }
  if (tl->n == tl->cap) {
    tl->cap = tl->cap ? 2 * tl->cap : 256;
    PetscCall(PetscRealloc(tl->cap * sizeof(int), &tl->rank));
    PetscCall(PetscRealloc(tl->cap * sizeof(int), &tl->call));
    PetscCall(PetscRealloc(tl->cap * sizeof(long long), &tl->step));
    PetscCall(PetscRealloc(tl->cap * sizeof(double), &tl->start));
    PetscCall(PetscRealloc(tl->cap * sizeof(double), &tl->end));
  }
  tl->rank[tl->n]  = rank;
  tl->call[tl->n]  = k;
  tl->step[tl->n]  = iter;
  tl->start[tl->n] = t0;
  tl->end[tl->n++] = t1;
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode cost_simulate(const CostPrims *p, const CostWork *w, const Plan *plan, CostEstimate *est,
                             CostTimeline *tl)
{
  SimNode nd[N_NODES];
  int     world = plan->world, iters = PetscMax(1, w->iterations);
  double *free_at, end_cur[N_NODES], first_end = 0, last_end = 0, iter_start = 0;
  int     maxlevel = 0;

  PetscFunctionBegin;
  /* the model divides by these: a plan must have passed plan_check */
  PetscCheck(world >= 1 && world <= PLAN_MAX_RANKS && w->batch > 0 && w->max_new > 0 && w->minibatches > 0 &&
                 w->batch % w->minibatches == 0,
             PETSC_COMM_SELF, PETSC_ERR_ARG_WRONG,
             "cost_estimate: a workload of %d sequences in %d mini-batches on %d ranks cannot be costed", w->batch,
             w->minibatches, world);
  for (int c = 0; c < MFC_COUNT; c++) {
    const PlanCall *pc = &plan->call[c];
    PetscBool ok = pc->dp >= 1 && pc->tp >= 1 && pc->pp >= 1 && pc->nranks == pc->dp * pc->tp * pc->pp && pc->mbs >= 0
                       ? PETSC_TRUE
                       : PETSC_FALSE;
    for (int i = 0; ok && i < pc->nranks; i++)
      ok = pc->ranks[i] >= 0 && pc->ranks[i] < world ? PETSC_TRUE : PETSC_FALSE;
    PetscCheck(!cost_call_used(w, (MFCId)c) || ok, PETSC_COMM_SELF, PETSC_ERR_ARG_WRONG,
               "cost_estimate: %s's mesh (%d ranks, dp %d x tp %d x pp %d) does not fit a job of %d ranks: check the "
               "plan first (plan_check)",
               mfc_names[c], pc->nranks, pc->dp, pc->tp, pc->pp, world);
  }
  PetscCall(PetscMemzero(est, sizeof *est));
  PetscCall(PetscMemzero(nd, sizeof nd));
  for (int k = 0; k < N_NODES; k++) PetscCall(PetscCalloc1(world, &nd[k].on));
  PetscCall(PetscCalloc1(world, &free_at));
  PetscCall(cost_memory(p, w, plan, est, NULL));
  PetscCall(build(p, w, plan, nd, est));
  if (w->staleness && plan->fuse != FUSE_NONE && est->feasible) { /* as the run refuses it (src/ppo) */
    est->feasible = PETSC_FALSE;
    PetscCall(PetscSNPrintf(est->why, sizeof est->why,
                            "-fuse_gen_inf %s streams one batch into inference: not with -async_staleness %d",
                            FuseModeNames[plan->fuse], w->staleness));
  }
  if (w->episodes && plan->fuse == FUSE_MIGRATE && est->feasible) { /* as the run refuses it (src/ppo/options.c) */
    est->feasible = PETSC_FALSE;
    PetscCall(PetscSNPrintf(est->why, sizeof est->why, "%s",
                            "-fuse_gen_inf migrate: a migrated sample would leave its episode's environment behind "
                            "(-env)"));
  }
  /* nodes are listed after their inputs */
  for (int k = 0; k < N_NODES; k++) {
    nd[k].level = 0;
    for (int d = 0; d < nd[k].ndep; d++) nd[k].level = PetscMax(nd[k].level, nd[nd[k].dep[d]].level + 1);
  }
  for (int k = 0; k < N_NODES; k++) maxlevel = PetscMax(maxlevel, nd[k].used ? nd[k].level : 0);
  for (int k = 0; k < N_NODES;
       k++) /* as the executor runs a late node: in the last level, before the others (src/exec/graph.c) */
    if (nd[k].late) nd[k].level = maxlevel;
  for (int it = 0; it < iters; it++) {
    double iter_end = iter_start;
    for (int k = 0; k < N_NODES; k++) end_cur[k] = 0;
    /* level by level, as the executor runs them (asynchronous: the
     * inference on the earlier batch before the later batch's generation) */
    for (int lv = 0; lv <= maxlevel; lv++)
    for (int k = 0; k < N_NODES; k++) {
      double start = iter_start;
      if (!nd[k].used || nd[k].level != lv) continue;
      for (int j = 0; j < k; j++)
        if (nd[j].used && !nd[j].late && nd[j].level < nd[k].level) start = PetscMax(start, end_cur[j]);
      for (int r = 0; r < world; r++)
        if (nd[k].on[r]) start = PetscMax(start, free_at[r]);
      end_cur[k] = start + nd[k].dur;
      for (int r = 0; r < world; r++) {
        if (!nd[k].on[r]) continue;
        free_at[r] = end_cur[k];
        if (tl) {
          const char *name = nd[k].name;
          double      t1   = end_cur[k];
          if (nd[k].busy) { /* streaming: generation ranks and inference ranks apart */
            name = !plan_has_rank(plan, MFC_ACTOR_GEN, r) ? "streamed_inference"
                   : plan->fuse == FUSE_MIGRATE           ? "generation+inference"
                                                          : "generation";
            t1   = start + nd[k].busy[r];
          }
          PetscCall(tl_add(tl, r, it, name, start, t1));
        }
      }
      iter_end = PetscMax(iter_end, end_cur[k]);
    }
    iter_start = iter_end;
    if (it == 0) first_end = iter_end;
    last_end = iter_end;
  }
  est->iter_s = iters > 1 ? (last_end - first_end) / (iters - 1) : last_end;
  for (int k = 0; k < N_NODES; k++) {
    PetscCall(PetscFree(nd[k].on));
    PetscCall(PetscFree(nd[k].busy));
  }
  PetscCall(PetscFree(free_at));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode cost_estimate(const CostPrims *p, const CostWork *work, const Plan *plan, CostEstimate *est)
{
  PetscFunctionBegin;
  PetscCall(cost_simulate(p, work, plan, est, NULL));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode cost_timeline_free(CostTimeline *tl)
{
  PetscFunctionBegin;
  PetscCall(PetscFree(tl->rank));
  PetscCall(PetscFree(tl->call));
  PetscCall(PetscFree(tl->step));
  PetscCall(PetscFree(tl->start));
  PetscCall(PetscFree(tl->end));
  PetscCall(PetscMemzero(tl, sizeof *tl));
  PetscFunctionReturn(PETSC_SUCCESS);
}
