/* cost/call.c: the cost of one call under its layout: a stage pass with its
 * tensor-parallel all-reduces and pipeline sends, a pipelined pass of
 * micro-batches, inference over the rollout, training (1F1B pipeline, the
 * data-parallel gradient all-reduce, the AdamW step, every mini-batch of
 * every epoch) and the fused actor-critic training stage. */
#include "cost_impl.h"
#include "actorcritic.h"
#include <math.h>
#include <string.h>

const CostShape *cost_call_shape(const CostWork *w, MFCId c)
{
  switch (c) {
  case MFC_ACTOR_GEN:
  case MFC_ACTOR_TRAIN: return &w->actor;
  case MFC_REF_INF: return &w->ref;
  case MFC_REW_INF: return &w->reward;
  case MFC_CRITIC_INF:
  case MFC_CRITIC_TRAIN: return &w->critic;
  default: return NULL;
  }
}

PetscBool cost_call_used(const CostWork *w, MFCId c)
{
  if (c == MFC_SFT_TRAIN || c == MFC_RM_TRAIN) return PETSC_FALSE;
  if ((c == MFC_CRITIC_INF || c == MFC_CRITIC_TRAIN) && w->critic_free) return PETSC_FALSE;
  if (c == MFC_REW_INF && w->reward_free) return PETSC_FALSE;
  return PETSC_TRUE;
}

PetscBool cost_ranks_internode(const CostPrims *p, const int *ranks, int n)
{
  for (int i = 1; i < n; i++)
    if (ranks[i] / p->ranks_per_node != ranks[0] / p->ranks_per_node) return PETSC_TRUE;
  return PETSC_FALSE;
}

/* Mesh order is tp fastest: a tp group is tp consecutive mesh ranks; a dp
 * group the ranks of one (stage, t), stride tp. */
void cost_layout(const CostPrims *p, const PlanCall *c, CostLayout *L)
{
  *L = (CostLayout){
    c->dp, c->tp, c->pp, c->mbs, PETSC_FALSE, PETSC_FALSE, cost_ranks_internode(p, c->ranks, c->nranks)
  };
  if (!L->mesh_inter) return;
  for (int g = 0; g < c->nranks; g += c->tp)
    if (cost_ranks_internode(p, c->ranks + g, c->tp)) L->tp_inter = PETSC_TRUE;
  for (int s = 0; s < c->pp; s++)
    for (int t = 0; t < c->tp; t++)
      for (int d = 1; d < c->dp; d++)
        if (c->ranks[(s * c->dp + d) * c->tp + t] / p->ranks_per_node !=
            c->ranks[s * c->dp * c->tp + t] / p->ranks_per_node)
          L->dp_inter = PETSC_TRUE;
}

double cost_stage_time(const CostPrims *p, const CostShape *m, CostPhase ph, const CostLayout *L, double rows,
                       double len)
{
  int    tp = L->tp, pp = L->pp, probe[3] = {0, PetscMin(1, pp - 1), pp - 1}, nprobe = m->gated ? 3 : pp;
  double tokens = ph == COST_DECODE ? rows : rows * len, act = tokens * m->n_embd * p->bytes_per_param;
  double block  = p->compute(p->ctx, m, COST_PART_BLOCK, ph, tp, rows, len);
  double ar = 0, send = 0, worst = 0;

  if (rows <= 0) return 0;
  /* Megatron's tensor parallelism: one all-reduce of the activations after
   * attention and one after the MLP, forward and backward alike */
  if (tp > 1) ar = 2 * p->coll(p->ctx, COST_ALLREDUCE, tp, L->tp_inter, act);
  if (pp > 1) send = p->coll(p->ctx, COST_P2P, 2, L->mesh_inter, act);
  /* LLaMA's even split: stage 1 has the most layers of the middle stages;
   * GPT-2's split by parameters: every stage */
  for (int k = 0; k < nprobe; k++) {
    int    s = m->gated ? probe[k] : k;
    double t = cost_stage_layers(m, pp, s) * (block + ar);
    if (s == 0) t += p->compute(p->ctx, m, COST_PART_EMBED, ph, tp, rows, len);
    if (s == pp - 1) t += p->compute(p->ctx, m, COST_PART_HEAD, ph, tp, rows, len);
    else t += send;
    worst = PetscMax(worst, t);
  }
  return worst;
}

void cost_micro(const CostWork *w, int mbs, int rows, int *size, int *count)
{
  int own = w->batch / PetscMax(1, w->minibatches) / PetscMax(1, w->micro);
  *size   = PetscMax(1, mbs > 0 ? (rows + mbs - 1) / mbs : own);
  *count  = PetscMax(1, (rows + *size - 1) / *size);
}

double cost_pipeline(const double *t, int n, int pp)
{
  double sum = 0, top = 0;
  for (int k = 0; k < n; k++) sum += t[k], top = PetscMax(top, t[k]);
  return sum + (pp - 1) * top;
}

static int dcmp(const void *a, const void *b)
{
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

double cost_expected_max(const CostWork *w, double r)
{
  int           n = w->nlen, k = (int)PetscMax(1, PetscMin(n, floor(r + 0.5)));
  double       *tmp = NULL, e = 0, z = 0, lw = 0, top;
  const double *s = w->seq_sorted;

  if (n <= 0) return w->prompt_len + w->max_new;
  if (!s) {
    if (PetscMalloc1(n, &tmp)) return w->prompt_len + w->max_new;
    for (int i = 0; i < n; i++) tmp[i] = cost_seq_len(w, i);
    qsort(tmp, (size_t)n, sizeof *tmp, dcmp);
    s = tmp;
  }
  /* P(the largest of k draws is the i-th smallest) = C(i-1, k-1) / C(n, k):
   * the weights from i = n down, each the next one times (i-k)/(i-1),
   * relative to the largest (1 at i = n), normalised by their sum */
  for (int i = n; i >= k; i--) {
    double x = exp(lw);
    e += s[i - 1] * x, z += x;
    if (i > k) lw += log((double)(i - k) / (i - 1));
  }
  top = e / z;
  PetscFree(tmp);
  return top;
}

double cost_inference(const CostPrims *p, const CostWork *w, const PlanCall *c, const CostShape *m)
{
  int        B = w->batch;
  double     worst = 0;
  CostLayout L;

  cost_layout(p, c, &L);

  for (int d = 0; d < c->dp; d++) {
    int    r0 = B * d / c->dp, r1 = B * (d + 1) / c->dp, size, count;
    double sum = 0, top_t = 0;
    /* micro-batches of consecutive rows, padded to their longest sequence;
     * pipelined as cost_pipeline does */
    cost_micro(w, c->mbs, r1 - r0, &size, &count);
    for (int k = 0; k < count; k++) {
      int    a = r0 + k * size, b = PetscMin(r1, a + size), top = 0;
      double t;
      for (int i = a; i < b; i++) top = PetscMax(top, (int)cost_seq_len(w, i));
      t = cost_stage_time(p, m, COST_FWD, &L, b - a, top);
      sum += t;
      top_t = PetscMax(top_t, t);
    }
    worst = PetscMax(worst, sum + (c->pp - 1) * top_t);
  }
  return worst;
}

/* The largest stage's parameters on one rank of the layout. */
static double max_stage_params(const CostShape *m, const PlanCall *c)
{
  double x = 0;
  for (int s = 0; s < c->pp; s++) x = PetscMax(x, cost_stage_params(m, c->tp, c->pp, s));
  return x;
}

/* The gradient all-reduce over the dp replicas and the AdamW step (over a
 * 1/dp share with ZeRO-1, whose reduce-scatter and all-gather move what one
 * all-reduce moves) of one optimizer step. */
static double update_time(const CostPrims *p, const CostShape *m, const PlanCall *c, const CostLayout *L,
                          PetscBool zero1)
{
  double n = max_stage_params(m, c);
  return p->coll(p->ctx, COST_ALLREDUCE, c->dp, L->dp_inter, n * p->bytes_per_param) +
         p->optimizer(p->ctx, zero1 ? n / c->dp : n);
}

/* One training micro-batch's rows, and the padded lengths of a replica's
 * micro-batches per mini-batch: count of them, the one holding the
 * mini-batch's longest sequence (*big: the expected longest of all its
 * rows) and the others (*len: the expected longest of a micro-batch's
 * rows). Every replica waits for the one with the longest sequence at the
 * gradient all-reduce, so that replica's micro-batches make the step. */
static void train_mb(const CostWork *w, const PlanCall *c, double *rows, double *len, double *big, int *count)
{
  int mini = w->batch / PetscMax(1, w->minibatches), share = mini / c->dp, size;
  cost_micro(w, c->mbs, share, &size, count);
  *rows = (double)share / *count;
  *len  = cost_expected_max(w, *rows);
  *big  = cost_expected_max(w, (double)mini);
}

/* Forward and backward of one micro-batch of rows x len. */
static double train_fb(const CostPrims *p, const CostShape *m, const CostLayout *L, double rows, double len)
{
  return cost_stage_time(p, m, COST_FWD, L, rows, len) + cost_stage_time(p, m, COST_BWD, L, rows, len);
}

double cost_training(const CostPrims *p, const CostWork *w, const Plan *plan, MFCId id, PetscBool zero1)
{
  const PlanCall  *c = &plan->call[id];
  const CostShape *m = cost_call_shape(w, id);
  double           rows, len, big, fb, fb_big, step;
  int              count;
  CostLayout       L;

  cost_layout(p, c, &L);
  train_mb(w, c, &rows, &len, &big, &count);
  fb     = train_fb(p, m, &L, rows, len);
  fb_big = train_fb(p, m, &L, rows, big);
  /* 1F1B: every stage runs its micro-batches, plus the fill and the drain
   * (pp - 1 times the longest) */
  step = (count - 1) * fb + fb_big + (c->pp - 1) * fb_big + update_time(p, m, c, &L, zero1);
  return (double)PetscMax(1, w->epochs) * PetscMax(1, w->minibatches) * step;
}

/* -fuse_train: the two pipelines on the same ranks, opposite ways; the
 * schedule search reaches the lower bound of the fused makespan on every
 * instance measured (docs/benchmarks.md), so the bound is the estimate. */
double cost_fused_training(const CostPrims *p, const CostWork *w, const Plan *plan)
{
  const PlanCall *a = &plan->call[MFC_ACTOR_TRAIN], *c = &plan->call[MFC_CRITIC_TRAIN];
  double          ra, la, ba, rc, lc, bc, step;
  ACInst        in;
  CostLayout      La, Lc;

  cost_layout(p, a, &La);
  cost_layout(p, c, &Lc);
  train_mb(w, a, &ra, &la, &ba, &in.m[0]);
  train_mb(w, c, &rc, &lc, &bc, &in.m[1]);
  in.pp[0]  = a->pp;
  in.pp[1]  = c->pp;
  /* the schedule model's micro-batches are equal and its backward is twice
   * its forward: f is a third of the mean forward and backward */
  in.f[0]   = ((in.m[0] - 1) * train_fb(p, &w->actor, &La, ra, la) + train_fb(p, &w->actor, &La, ra, ba)) / in.m[0] / 3;
  in.f[1] = ((in.m[1] - 1) * train_fb(p, &w->critic, &Lc, rc, lc) + train_fb(p, &w->critic, &Lc, rc, bc)) / in.m[1] / 3;
  in.mem[0] = in.mem[1] = 0;
  in.mem_cap = 0;
  step                  = ac_lower_bound(&in) + update_time(p, &w->actor, a, &La, plan->zero1) +
         update_time(p, &w->critic, c, &Lc, plan->zero1);
  return (double)PetscMax(1, w->epochs) * PetscMax(1, w->minibatches) * step;
}

/* A stage's training call is actor_train of a workload of one mini-batch
 * of fixed-length sequences (no response-length distribution: every row is
 * padded to len), on a plan that holds only that call, so the memory model
 * counts its training state and activations and nothing else. */
PetscErrorCode cost_train_stage(const CostPrims *p, const CostTrainStage *st, MFCId id, const PlanCall *c, int world,
                                PetscBool zero1, CostEstimate *est)
{
  CostWork w;
  Plan    *plan;
  char     why[sizeof est->why];

  PetscFunctionBegin;
  PetscCall(PetscMemzero(&w, sizeof w));
  PetscCall(PetscMemzero(est, sizeof *est));
  cost_shape_from_model(&st->cfg, &w.actor);
  w.critic_free = w.reward_free = PETSC_TRUE;
  w.batch       = st->batch * st->rows;
  w.prompt_len  = st->len; /* cost_expected_max: len for every row */
  w.minibatches = w.micro = w.epochs = w.iterations = 1;
  PetscCall(PetscCalloc1(1, &plan));
  plan->world                 = world;
  plan->zero1                 = zero1;
  plan->call[MFC_ACTOR_TRAIN] = *c;
  PetscCall(cost_memory(p, &w, plan, est, NULL));
  est->iter_s = est->call_s[id] = cost_training(p, &w, plan, MFC_ACTOR_TRAIN, zero1);
  est->mem_call[id] = est->mem_call[MFC_ACTOR_TRAIN];
  est->mem_call[MFC_ACTOR_TRAIN] = 0;
  if (!est->feasible) { /* the memory model names the call it costed */
    PetscCall(PetscStrncpy(why, est->why, sizeof why));
    if (!strncmp(why, "actor_train", 11))
      PetscCall(PetscSNPrintf(est->why, sizeof est->why, "%s%s", mfc_names[id], why + 11));
  }
  PetscCall(PetscFree(plan));
  PetscFunctionReturn(PETSC_SUCCESS);
}
