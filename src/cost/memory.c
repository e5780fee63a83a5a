/* cost/memory.c: the peak memory of every rank over one iteration. What
 * stays on a rank: the training state of the actor and critic (weights,
 * gradients, the fp32 master copy when weights are 16-bit, the AdamW
 * moments; master and moments split over dp with ZeRO-1), the frozen
 * reference and reward weights (on the host between calls with
 * -plan_offload when their mesh shares ranks with another call), and the
 * actor_gen / critic_inf copies when their mesh is apart from training (a
 * copy that shares ranks is dropped after its call). What a call adds while
 * it runs: generation its KV cache, training its activations (1F1B keeps up
 * to pp micro-batches in flight on the first stage), inference one
 * micro-batch's activations and logits. A plan whose peak exceeds the
 * device is infeasible, and `why` says which call on which rank. */
#include "cost_impl.h"

/* The rank's stage in the call's layout and whether it is in it. */
static PetscBool call_stage(const PlanCall *c, int r, int *s)
{
  for (int i = 0; i < c->nranks; i++)
    if (c->ranks[i] == r) {
      *s = i / (c->dp * c->tp);
      return PETSC_TRUE;
    }
  return PETSC_FALSE;
}

double cost_weight_bytes(const CostPrims *p, const CostShape *m, const PlanCall *c)
{
  double x = 0;
  for (int s = 0; s < c->pp; s++) x = PetscMax(x, cost_stage_params(m, c->tp, c->pp, s));
  return x * p->bytes_per_param;
}

PetscErrorCode cost_overlaps(const CostWork *w, const Plan *plan, PetscBool ov[MFC_COUNT][MFC_COUNT],
                             PetscBool shared[MFC_COUNT])
{
  int *who; /* who[r]: bit c set when call c runs on rank r */

  PetscFunctionBegin;
  PetscCall(PetscCalloc1(plan->world, &who));
  for (int c = 0; c < MFC_COUNT; c++)
    if (cost_call_used(w, (MFCId)c))
      for (int i = 0; i < plan->call[c].nranks; i++) who[plan->call[c].ranks[i]] |= 1 << c;
  for (int a = 0; a < MFC_COUNT; a++) {
    shared[a] = PETSC_FALSE;
    for (int b = 0; b < MFC_COUNT; b++) ov[a][b] = PETSC_FALSE;
  }
  for (int r = 0; r < plan->world; r++)
    for (int a = 0; a < MFC_COUNT; a++)
      for (int b = 0; b < MFC_COUNT; b++)
        if ((who[r] >> a & 1) && (who[r] >> b & 1))
          ov[a][b] = PETSC_TRUE, shared[a] = shared[a] || a != b ? PETSC_TRUE : PETSC_FALSE;
  PetscCall(PetscFree(who));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* A separate copy: the call's layout is not its training layout. */
static PetscBool is_copy(const Plan *plan, MFCId c, MFCId train)
{
  const PlanCall *a = &plan->call[c], *b = &plan->call[train];
  if (a->nranks != b->nranks || a->dp != b->dp || a->tp != b->tp || a->pp != b->pp) return PETSC_TRUE;
  for (int i = 0; i < a->nranks; i++)
    if (a->ranks[i] != b->ranks[i]) return PETSC_TRUE;
  return PETSC_FALSE;
}

/* Training state per parameter held: weights and gradients, fp32 master
 * (16-bit weights only) and two fp32 moments. */
static double train_state(const CostPrims *p, double n, int dp, PetscBool zero1)
{
  double opt = (p->bytes_per_param < 4 ? 4 : 0) + 8;
  return n * (2 * p->bytes_per_param + opt / (zero1 ? dp : 1));
}

/* Training activations per layer and token of a micro-batch padded to T:
 * Megatron's count (Korthikanti et al. 2022) in 16-bit, h (10 + 24/tp) +
 * 5 heads T / tp bytes, scaled to the element size. The 5 heads T are the
 * attention's T x T arrays (scores, probabilities, dropout mask); both
 * backends' attention keeps only each row's log-sum-exp, 4 bytes per head
 * instead. */
static double train_act(const CostPrims *p, const CostShape *m, const PlanCall *c)
{
  double bp = p->bytes_per_param, att = 4.0 * m->n_head / c->tp;
  return m->n_embd * (10 + 24.0 / c->tp) * bp / 2 + att;
}

/* Rows of a forward's n whose LM-head logits are held at once. */
static double head_rows(const CostShape *m, double n)
{
  return m->value_head ? n : PetscMin(n, (double)model_logits_tile_rows(m->vocab_size));
}

/* What the call adds on a rank of stage s while it runs (weights that are
 * not resident are added by the caller). T, big: a training call's padded
 * micro-batch lengths, typical and the one holding the mini-batch's
 * longest sequence (cost_memory computes them once per call). */
static double call_transient(const CostPrims *p, const CostWork *w, const Plan *plan, MFCId id, int s, double T,
                             double big)
{
  const PlanCall  *c  = &plan->call[id];
  const CostShape *m  = cost_call_shape(w, id);
  double bp = p->bytes_per_param, h = m->n_embd, L = cost_stage_layers(m, c->pp, s), len = w->prompt_len + w->max_new;
  double           logits = m->value_head ? 1 : (double)m->vocab_size / c->tp;
  double           x = 0;

  if (id == MFC_ACTOR_GEN) {
    /* the KV cache of the replica's slots (all its rows without a slot
     * limit) at full length */
    double rows = (double)w->batch / c->dp, kv = 2.0 * cost_kv_width(m) / cost_kv_ranks(m, c->tp);
    if (w->gen_slots > 0) rows = PetscMin(rows, w->gen_slots);
    x = rows * len * kv * L * bp + rows * logits * 4;
  } else if (id == MFC_ACTOR_TRAIN || id == MFC_CRITIC_TRAIN) {
    /* the logits and their gradient in fp32 on the last stage (rows of at
     * most a tile of -logits_tile_mb) */
    int    share = w->batch / PetscMax(1, w->minibatches) / c->dp, size, count, fly;
    double rows;
    cost_micro(w, c->mbs, share, &size, &count);
    rows = (double)share / count;
    fly  = PetscMin(c->pp - s, count);
    /* 1F1B keeps fly micro-batches' activations on stage s: the long one and fly - 1 others */
    x    = rows * L * (big * train_act(p, m, c) + (fly - 1) * T * train_act(p, m, c));
    if (s == c->pp - 1) x += head_rows(m, rows * big) * logits * 8;
  } else {
    int size, count;
    cost_micro(w, c->mbs, w->batch / c->dp, &size, &count);
    x = size * len * 4 * h * bp + (s == c->pp - 1 ? head_rows(m, size * len) * logits * 4 : 0);
  }
  return x;
}

PetscErrorCode cost_memory(const CostPrims *p, const CostWork *w, const Plan *plan, CostEstimate *est, double *peak)
{
  int       world = plan->world, s;
  double   *resident, worst_over = 0;
  PetscBool ov[MFC_COUNT][MFC_COUNT], shared[MFC_COUNT], keep[MFC_COUNT], weights_in[MFC_COUNT];

  PetscFunctionBegin;
  PetscCall(cost_overlaps(w, plan, ov, shared));
  /* which models stay on their ranks, which come and go with their call */
  for (int c = 0; c < MFC_COUNT; c++) {
    PetscBool acopy = is_copy(plan, MFC_ACTOR_GEN, MFC_ACTOR_TRAIN),
              ccopy = is_copy(plan, MFC_CRITIC_INF, MFC_CRITIC_TRAIN);
    keep[c] = weights_in[c] = PETSC_FALSE;
    if (c == MFC_ACTOR_GEN) keep[c] = acopy && !ov[c][MFC_ACTOR_TRAIN], weights_in[c] = acopy && ov[c][MFC_ACTOR_TRAIN];
    else if (c == MFC_CRITIC_INF)
      keep[c] = ccopy && !ov[c][MFC_CRITIC_TRAIN], weights_in[c] = ccopy && ov[c][MFC_CRITIC_TRAIN];
    else if (c == MFC_REF_INF || c == MFC_REW_INF) keep[c] = !(plan->offload && shared[c]), weights_in[c] = !keep[c];
  }
  PetscCall(PetscCalloc1(world, &resident));
  if (peak)
    for (int r = 0; r < world; r++) peak[r] = 0;
  est->feasible = PETSC_TRUE;
  est->why[0]   = 0;
  est->mem_max  = 0;
  for (int c = 0; c < MFC_COUNT; c++) est->mem_call[c] = 0;
  /* what stays */
  for (int r = 0; r < world; r++) {
    if (call_stage(&plan->call[MFC_ACTOR_TRAIN], r, &s))
      resident[r] += train_state(p,
                                 cost_stage_params(&w->actor, plan->call[MFC_ACTOR_TRAIN].tp,
                                                   plan->call[MFC_ACTOR_TRAIN].pp, s),
                                 plan->call[MFC_ACTOR_TRAIN].dp, plan->zero1);
    if (cost_call_used(w, MFC_CRITIC_TRAIN) && call_stage(&plan->call[MFC_CRITIC_TRAIN], r, &s))
      resident[r] += train_state(p,
                                 cost_stage_params(&w->critic, plan->call[MFC_CRITIC_TRAIN].tp,
                                                   plan->call[MFC_CRITIC_TRAIN].pp, s),
                                 plan->call[MFC_CRITIC_TRAIN].dp, plan->zero1);
    for (int c = 0; c < MFC_COUNT; c++) {
      const PlanCall *pc = &plan->call[c];
      if (!cost_call_used(w, (MFCId)c) || !keep[c] || !call_stage(pc, r, &s)) continue;
      resident[r] += cost_stage_params(cost_call_shape(w, (MFCId)c), pc->tp, pc->pp, s) * p->bytes_per_param;
    }
  }
  /* each call's peak on each of its ranks */
  for (int c = 0; c < MFC_COUNT; c++) {
    const PlanCall *pc = &plan->call[c];
    double          T = 0, big = 0;
    if (!cost_call_used(w, (MFCId)c)) continue;
    if (c == MFC_ACTOR_TRAIN || c == MFC_CRITIC_TRAIN) {
      /* padded lengths (once per call, not per rank): the micro-batch
       * holding the mini-batch's longest sequence (on the replica every
       * other waits for), the others typical */
      int mini = w->batch / PetscMax(1, w->minibatches), size, count;
      cost_micro(w, pc->mbs, mini / pc->dp, &size, &count);
      T   = cost_expected_max(w, (double)(mini / pc->dp) / count);
      big = cost_expected_max(w, (double)mini);
    }
    for (int i = 0; i < pc->nranks; i++) {
      int    r = pc->ranks[i];
      double x;
      s = i / (pc->dp * pc->tp);
      x = resident[r] + call_transient(p, w, plan, (MFCId)c, s, T, big);
      /* the call's own weights when they are not among the resident ones */
      if (weights_in[c]) x += cost_stage_params(cost_call_shape(w, (MFCId)c), pc->tp, pc->pp, s) * p->bytes_per_param;
      est->mem_call[c] = PetscMax(est->mem_call[c], x);
      if (peak) peak[r] = PetscMax(peak[r], x);
      est->mem_max     = PetscMax(est->mem_max, x);
      if (x > p->mem_per_rank && x - p->mem_per_rank > worst_over) {
        worst_over    = x - p->mem_per_rank;
        est->feasible = PETSC_FALSE;
        PetscCall(PetscSNPrintf(est->why, sizeof est->why, "%s on rank %d needs %.1f GB, the device has %.1f GB",
                                mfc_names[c], r, x / 1e9, p->mem_per_rank / 1e9));
      }
    }
  }
  PetscCall(PetscFree(resident));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode cost_memory_ranks(const CostPrims *p, const CostWork *w, const Plan *plan, double *peak)
{
  CostEstimate est;

  PetscFunctionBegin;
  PetscCall(cost_memory(p, w, plan, &est, peak));
  PetscFunctionReturn(PETSC_SUCCESS);
}
