/* PPO training over one rollout: the batch is shuffled (keyed by seed,
 * iteration and epoch), split into mini-batches (one optimizer step each) and
 * those into micro-batches whose gradients accumulate. Losses are weighed
 * over the whole mini-batch (the critic's and the statistics' a token mean,
 * each token 1/ntokens of its mini-batch; the policy loss's as -ppo_loss_agg
 * says, from the mini-batch's counts), so the micro-batch count and the
 * layout change nothing but memory. */
#include "ppo_impl.h"
#include <math.h>

#define PPO_SHUFFLE_STREAM 0x50504F00u /* "PPO" */

/* What a mini-batch's forwards sum on the last stage (the critic: its loss
 * and value-clip fraction only); the trainer sums them over the mesh as one
 * array. */
typedef union {
  struct {
    double loss, clipfrac, entropy, kl_loss;
  } s;
  double v[4];
} MiniSums;

/* A model's sums over an iteration's optimizer steps. */
typedef struct {
  double loss, clipfrac, entropy, kl_loss, grad_norm;
} ModelSums;

typedef struct {
  const PPOOptions *o;
  Rollout          *r;
  PackBuf          *pb;      /* packing scratch, used within one forward */
  const int        *rows;    /* this replica's sequences of the mini-batch */
  MicroSplit        split;   /* rows [split.b0, b1) of the mini-batch's permutation */
  int               ntok, nseq; /* response (model) tokens and sequences of the whole mini-batch */
  double            kl_coef;
  MiniSums          sum;     /* on the last stage */
  /* Per micro-batch, kept from its forward to its backward (any schedule):
   * LM targets and d loss / d output in forward-row layout, micro-batch k's
   * at (its first row - split.b0) * r->T. */
  int              *target;
  float            *grad;
} MiniBatch;

static float token_mean(const MiniBatch *mb)
{
  return (float)rl_token_weight(RL_AGG_TOKEN_MEAN, mb->ntok, mb->nseq, 0, 0);
}

/* Aligned view of forward rows for sequence idx (row i of the forward):
 * pb->al[t] = rows[i*Tf + t-1] on the model's response positions, 0
 * elsewhere; pb->w the token weights (0 on an environment's tokens: not
 * actions, so neither the losses nor the statistics see them). */
static void align_row(const Rollout *r, PackBuf *pb, int idx, const float *rows, int i, int Tf, float w)
{
  int P = r->start[idx], end = P + r->len[idx];
  for (int t = 0; t < r->T; t++) {
    PetscBool in = (PetscBool)(t >= P && t < end && rollout_is_model(r, idx, t));
    pb->al[t]    = in ? rows[i * Tf + t - 1] : 0.0f;
    pb->w[t]     = in ? w : 0.0f;
    pb->dal[t]   = 0.0f;
  }
}

/* The gradient on aligned positions back to forward rows. */
static void unalign_row(const Rollout *r, const PackBuf *pb, int idx, int i, int Tf, float *grad)
{
  int P = r->start[idx], end = P + r->len[idx];
  for (int s = 0; s < Tf; s++) grad[i * Tf + s] = 0.0f;
  for (int t = P; t < end; t++) grad[i * Tf + t - 1] = pb->dal[t];
}

/* Micro-batch k: its sequences and where its own state starts. */
static size_t micro_rows(const MiniBatch *mb, int k, const int **idx, int *nb)
{
  int r0;
  trainer_micro(&mb->split, k, &r0, nb);
  *idx = mb->rows + r0;
  return (size_t)(r0 - mb->split.b0) * mb->r->T;
}

/* Forward of micro-batch k (log-probabilities for the LM head, values for
 * the scalar head); true on the last stage, which then computes the loss. */
static PetscErrorCode micro_forward(MiniBatch *mb, Model *g, int k, const int **idx, int *nb, int *Tf, PetscBool *last,
                                    size_t *own)
{
  PetscFunctionBegin;
  *own = micro_rows(mb, k, idx, nb);
  PetscCall(PetscLogEventBegin(sys_log.forward, 0, 0, 0, 0));
  if (g->cfg.head == MODEL_HEAD_LM)
    PetscCall(rollout_forward_logprobs(g, mb->r, *idx, *nb, (float)(1.0 / mb->o->gen.temperature), mb->pb, Tf));
  else PetscCall(rollout_forward_values(g, mb->r, *idx, *nb, PETSC_FALSE, mb->pb, Tf));
  PetscCall(PetscLogEventEnd(sys_log.forward, 0, 0, 0, 0));
  *last = model_last_stage(g);
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode actor_forward(void *ctx, Model *actor, int k)
{
  MiniBatch     *mb = (MiniBatch *)ctx;
  const Rollout *r  = mb->r;
  PackBuf       *pb = mb->pb;
  size_t         T  = (size_t)r->T;
  const int     *idx;
  int            nb, Tf;
  PetscBool      last;
  float         *grad;
  size_t         own;

  PetscFunctionBegin;
  PetscCall(micro_forward(mb, actor, k, &idx, &nb, &Tf, &last, &own));
  if (!last) PetscFunctionReturn(PETSC_SUCCESS);
  grad = mb->grad + own;
  PetscCall(PetscArraycpy(mb->target + own, pb->target, (size_t)nb * Tf));
  for (int i = 0; i < nb; i++) {
    double cf;
    size_t off = (size_t)idx[i] * T;
    int    len = rollout_model_len(r, idx[i]);
    float  wt = token_mean(mb), wa = (float)rl_token_weight((RLLossAgg)mb->o->loss_agg, mb->ntok, mb->nseq, len,
                                                            (int)mb->o->gen.max_new_tokens);

    align_row(r, pb, idx[i], pb->ent, i, Tf, wt);
    for (size_t t = 0; t < T; t++) mb->sum.s.entropy += (double)pb->w[t] * pb->al[t];
    align_row(r, pb, idx[i], pb->lp, i, Tf, wa);
    /* asynchronous runs' decoupled objective: the ratio to the proximal policy, times the behaviour weight */
    const float *old = r->off.on ? r->off.prox + off : r->gen.logprobs + off;
    const float *isw = r->off.on ? r->off.isw + off : NULL;
    if (mb->o->objective == PPO_OBJ_CISPO)
      mb->sum.s.loss += rl_policy_loss_cispo(T, pb->al, old, r->adv + off, pb->w, isw, mb->o->clip_low,
                                             mb->o->clip_high, pb->dal, &cf);
    else if (mb->o->objective == PPO_OBJ_GSPO) /* synchronous only (options.c) */
      mb->sum.s.loss += rl_policy_loss_gspo(T, pb->al, old, r->adv + off, pb->w, mb->o->clip_low, mb->o->clip_high,
                                            pb->dal, &cf);
    else if (isw)
      mb->sum.s.loss += rl_policy_loss_is(T, pb->al, old, r->adv + off, pb->w, isw, mb->o->clip_low, mb->o->clip_high,
                                          pb->dal, &cf);
    else
      mb->sum.s.loss += rl_policy_loss(T, pb->al, old, r->adv + off, pb->w, mb->o->clip_low, mb->o->clip_high, pb->dal,
                                       &cf);
    mb->sum.s.clipfrac += wa > 0 ? cf / wa * wt : 0; /* the clipped tokens' share of the mini-batch's tokens */
    if (ppo_kl_as_loss(mb->o))
      mb->sum.s.kl_loss += rl_kl_loss(T, pb->al, r->ref + off, pb->w, mb->kl_coef, (RLKLEstimator)mb->o->kl_estimator,
                                      pb->dal);
    unalign_row(r, pb, idx[i], i, Tf, grad);
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode critic_forward(void *ctx, Model *critic, int k)
{
  MiniBatch     *mb = (MiniBatch *)ctx;
  const Rollout *r  = mb->r;
  PackBuf       *pb = mb->pb;
  size_t         T  = (size_t)r->T;
  const int     *idx;
  int            nb, Tf;
  PetscBool      last;
  float         *grad;
  size_t         own;

  PetscFunctionBegin;
  PetscCall(micro_forward(mb, critic, k, &idx, &nb, &Tf, &last, &own));
  if (!last) PetscFunctionReturn(PETSC_SUCCESS);
  grad = mb->grad + own;
  for (int i = 0; i < nb; i++) {
    double cf;
    size_t off = (size_t)idx[i] * T;

    align_row(r, pb, idx[i], pb->val, i, Tf, token_mean(mb));
    mb->sum.s.loss += rl_value_loss(T, pb->al, r->values + off, r->ret + off, pb->w, mb->o->value_clip, pb->dal, &cf);
    mb->sum.s.clipfrac += cf;
    unalign_row(r, pb, idx[i], i, Tf, grad);
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* On the last stage the loss gradient and targets are micro-batch k's own
 * (see MiniBatch), so any schedule works. */
static PetscErrorCode model_backward(void *ctx, Model *lm, int k)
{
  MiniBatch *mb   = (MiniBatch *)ctx;
  PetscBool  last = model_last_stage(lm);
  const int *idx;
  int        nb;
  size_t     own = micro_rows(mb, k, &idx, &nb);

  PetscFunctionBegin;
  PetscCall(PetscLogEventBegin(sys_log.backward, 0, 0, 0, 0));
  if (lm->cfg.head == MODEL_HEAD_LM)
    PetscCall(model_backward_logprob(lm, last ? mb->target + own : NULL, last ? mb->grad + own : NULL));
  else PetscCall(model_backward_values(lm, last ? mb->grad + own : NULL));
  PetscCall(PetscLogEventEnd(sys_log.backward, 0, 0, 0, 0));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Epochs x mini-batches of optimizer steps on one model, or on the actor
 * and the critic fused (fz non-NULL; tr[1], opt[1] the critic): every
 * mini-batch is one pass (trainer_pass, or ppo_fused_train_pass for both) and one
 * trainer_step per model, as SFT and RM. out[x] gets model x's sums over
 * steps (the same on every rank of the mesh). Only the members of the meshes call this.
 * Both models see the same shuffle and mini-batches as when unfused. */
static PetscErrorCode train_models(PPOFusedTrain *fz, Trainer *tr[2], const PPOOptions *o, const AdamWConfig *opt[2],
                                   const char *what[2], Rollout *r, PackBuf *pb, uint64_t seed, int iteration,
                                   double kl_coef, ModelSums out[2])
{
  int       *perm, nmb = r->B / (int)o->minibatches, nm = fz ? 2 : 1;
  MiniBatch  mb[2];
  TrainWork  w[2];
  const MicroSplit *sp[2] = {&mb[0].split, &mb[1].split};
  const TrainWork  *wp[2] = {&w[0], &w[1]};
  char       at[96];

  PetscFunctionBegin;
  PetscCall(PetscMalloc1(r->B, &perm));
  for (int x = 0; x < nm; x++) {
    mb[x] = (MiniBatch){o, r, pb, NULL, {0, 0, 1, 0}, 0, 0, kl_coef, {{0, 0, 0, 0}}, NULL, NULL};
    w[x]  = (TrainWork){ tr[x]->dm->cfg.head == MODEL_HEAD_LM ? actor_forward : critic_forward, model_backward, &mb[x],
                        mb[x].sum.v, 4 };
    trainer_split(tr[x], nmb, PetscMax(1, nmb / (int)o->microbatches), &mb[x].split);
    PetscCall(PetscMalloc2((size_t)nmb * r->T, &mb[x].target, (size_t)nmb * r->T, &mb[x].grad));
  }
  for (int e = 0; e < (int)o->epochs; e++) {
    rng_shuffle(perm, r->B, seed, PPO_SHUFFLE_STREAM, (int64_t)iteration * o->epochs + e);
    for (int k = 0; k < (int)o->minibatches; k++) {
      const int *all = perm + (size_t)k * nmb;
      int        ntok = 0;
      PetscReal  lr, gn;

      for (int i = 0; i < nmb; i++) ntok += rollout_model_len(r, all[i]);
      for (int x = 0; x < nm; x++) {
        mb[x].rows = all;
        mb[x].ntok = ntok;
        mb[x].nseq = nmb;
        PetscCall(PetscArrayzero(mb[x].sum.v, 4));
      }
      if (fz) PetscCall(ppo_fused_train_pass(fz, tr, sp, wp));
      else PetscCall(trainer_pass(tr[0], &mb[0].split, &w[0]));
      PetscCall(PetscSNPrintf(at, sizeof at, "iteration %d (epoch %d, mini-batch %d)", iteration + 1, e, k));
      for (int x = 0; x < nm; x++) {
        const MiniSums *q = &mb[x].sum;
        PetscCall(trainer_step(tr[x], opt[x], what[x], at, q->s.loss + q->s.kl_loss, &lr, &gn));
        out[x].loss += q->s.loss, out[x].clipfrac += q->s.clipfrac, out[x].entropy += q->s.entropy,
            out[x].kl_loss += q->s.kl_loss;
        out[x].grad_norm += gn;
      }
    }
  }
  PetscCall(PetscFree(perm));
  for (int x = 0; x < nm; x++) PetscCall(PetscFree2(mb[x].target, mb[x].grad));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static void actor_stats(const ModelSums *out, PPOTrainStats *s)
{
  s->actor_loss = out->loss;
  s->clipfrac   = out->clipfrac;
  s->entropy    = out->entropy;
  s->kl_loss    = out->kl_loss;
  s->grad_actor = out->grad_norm;
}

static void critic_stats(const ModelSums *out, PPOTrainStats *s)
{
  s->critic_loss = out->loss;
  s->vclipfrac   = out->clipfrac;
  s->grad_critic = out->grad_norm;
}

PetscErrorCode ppo_train_actor(Trainer *actor, const PPOOptions *o, Rollout *r, PackBuf *pb, uint64_t seed,
                               int iteration, double kl_coef, PPOTrainStats *s)
{
  ModelSums          out[2]  = {{0}};
  Trainer           *tr[2]     = {actor, NULL};
  const AdamWConfig *opt[2]    = {&o->actor_opt, NULL};
  const char        *what[2]   = {"PPO actor", NULL};

  PetscFunctionBegin;
  PetscCall(train_models(NULL, tr, o, opt, what, r, pb, seed, iteration, kl_coef, out));
  actor_stats(&out[0], s);
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode ppo_train_critic(Trainer *critic, const PPOOptions *o, Rollout *r, PackBuf *pb, uint64_t seed,
                                int iteration, PPOTrainStats *s)
{
  ModelSums          out[2]  = {{0}};
  Trainer           *tr[2]     = {critic, NULL};
  const AdamWConfig *opt[2]    = {&o->critic_opt, NULL};
  const char        *what[2]   = {"PPO critic", NULL};

  PetscFunctionBegin;
  PetscCall(train_models(NULL, tr, o, opt, what, r, pb, seed, iteration, 0.0, out));
  critic_stats(&out[0], s);
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode ppo_train_fused(PPOFusedTrain *fz, Trainer *actor, Trainer *critic, const PPOOptions *o, Rollout *r,
                               PackBuf *pb, uint64_t seed, int iteration, double kl_coef, PPOTrainStats *s)
{
  ModelSums          out[2]  = {{0}};
  Trainer           *tr[2]     = {actor, critic};
  const AdamWConfig *opt[2]    = {&o->actor_opt, &o->critic_opt};
  const char        *what[2]   = {"PPO actor", "PPO critic"};

  PetscFunctionBegin;
  PetscCall(train_models(fz, tr, o, opt, what, r, pb, seed, iteration, kl_coef, out));
  actor_stats(&out[0], s);
  critic_stats(&out[1], s);
  PetscFunctionReturn(PETSC_SUCCESS);
}
