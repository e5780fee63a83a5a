/* PPO training over one rollout: the batch is shuffled (keyed by seed,
 * iteration and epoch), split into mini-batches (one optimizer step each) and
 * those into micro-batches whose gradients accumulate. Losses are token
 * means over the whole mini-batch (each token weighs 1/ntokens of its
 * mini-batch), so the micro-batch count changes nothing but memory. */
#include "ppo_impl.h"
#include <math.h>

#define PPO_SHUFFLE_STREAM 0x50504F00u /* "PPO" */

typedef struct {
  const PPOOptions *o;
  Rollout          *r;
  PackBuf          *pb;      /* packing scratch, used within one forward */
  const int        *rows;    /* this replica's sequences of the mini-batch */
  MicroSplit        split;   /* rows [split.b0, b1) of the mini-batch's permutation */
  float             w;       /* 1 / response tokens of the whole mini-batch */
  double            kl_coef;
  double            acc[4];  /* on the last stage: loss, clip fraction, entropy, KL loss */
  /* Per micro-batch, kept from its forward to its backward (any schedule):
   * LM targets and d loss / d output in forward-row layout, micro-batch k's
   * at (its first row - split.b0) * r->T. */
  int              *target;
  float            *grad;
} MiniBatch;

/* Aligned view of forward rows for sequence idx (row i of the forward):
 * pb->al[t] = rows[i*Tf + t-1] on response positions, 0 elsewhere; pb->w
 * the token weights. */
static void align_row(const Rollout *r, PackBuf *pb, int idx, const float *rows, int i, int Tf, float w)
{
  int P = r->start[idx], end = P + r->len[idx];
  for (int t = 0; t < r->T; t++) {
    PetscBool in = (PetscBool)(t >= P && t < end);
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
static PetscErrorCode micro_forward(MiniBatch *mb, GPT *g, int k, const int **idx, int *nb, int *Tf, PetscBool *last)
{
  PetscFunctionBegin;
  (void)micro_rows(mb, k, idx, nb);
  PetscCall(PetscLogEventBegin(sys_log.forward, 0, 0, 0, 0));
  if (g->cfg.head == GPT_HEAD_LM) PetscCall(rollout_forward_logprobs(g, mb->r, *idx, *nb, (float)(1.0 / mb->o->gen.temperature), mb->pb, Tf));
  else PetscCall(rollout_forward_values(g, mb->r, *idx, *nb, PETSC_FALSE, mb->pb, Tf));
  PetscCall(PetscLogEventEnd(sys_log.forward, 0, 0, 0, 0));
  *last = gpt_last_stage(g);
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode actor_forward(void *ctx, GPT *actor, int k)
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
  PetscCall(micro_forward(mb, actor, k, &idx, &nb, &Tf, &last));
  if (!last) PetscFunctionReturn(PETSC_SUCCESS);
  own  = micro_rows(mb, k, &idx, &nb);
  grad = mb->grad + own;
  PetscCall(PetscArraycpy(mb->target + own, pb->target, (size_t)nb * Tf));
  for (int i = 0; i < nb; i++) {
    double cf;
    size_t off = (size_t)idx[i] * T;

    align_row(r, pb, idx[i], pb->ent, i, Tf, mb->w);
    for (size_t t = 0; t < T; t++) mb->acc[2] += (double)pb->w[t] * pb->al[t];
    align_row(r, pb, idx[i], pb->lp, i, Tf, mb->w);
    mb->acc[0] += rl_policy_loss(T, pb->al, r->gen.logprobs + off, r->adv + off, pb->w, mb->o->clip, pb->dal, &cf);
    mb->acc[1] += cf;
    if (mb->o->algo == ALGO_GRPO) mb->acc[3] += rl_kl_loss(T, pb->al, r->ref + off, pb->w, mb->kl_coef, pb->dal);
    unalign_row(r, pb, idx[i], i, Tf, grad);
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode critic_forward(void *ctx, GPT *critic, int k)
{
  MiniBatch     *mb = (MiniBatch *)ctx;
  const Rollout *r  = mb->r;
  PackBuf       *pb = mb->pb;
  size_t         T  = (size_t)r->T;
  const int     *idx;
  int            nb, Tf;
  PetscBool      last;
  float         *grad;

  PetscFunctionBegin;
  PetscCall(micro_forward(mb, critic, k, &idx, &nb, &Tf, &last));
  if (!last) PetscFunctionReturn(PETSC_SUCCESS);
  grad = mb->grad + micro_rows(mb, k, &idx, &nb);
  for (int i = 0; i < nb; i++) {
    double cf;
    size_t off = (size_t)idx[i] * T;

    align_row(r, pb, idx[i], pb->val, i, Tf, mb->w);
    mb->acc[0] += rl_value_loss(T, pb->al, r->values + off, r->ret + off, pb->w, mb->o->value_clip, pb->dal, &cf);
    mb->acc[1] += cf;
    unalign_row(r, pb, idx[i], i, Tf, grad);
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* On the last stage the loss gradient and targets are micro-batch k's own
 * (see MiniBatch), so any schedule works. */
static PetscErrorCode model_backward(void *ctx, GPT *gpt, int k)
{
  MiniBatch *mb   = (MiniBatch *)ctx;
  PetscBool  last = gpt_last_stage(gpt);
  const int *idx;
  int        nb;
  size_t     own = micro_rows(mb, k, &idx, &nb);

  PetscFunctionBegin;
  PetscCall(PetscLogEventBegin(sys_log.backward, 0, 0, 0, 0));
  if (gpt->cfg.head == GPT_HEAD_LM) PetscCall(gpt_backward_logprob(gpt, last ? mb->target + own : NULL, last ? mb->grad + own : NULL));
  else PetscCall(gpt_backward_values(gpt, last ? mb->grad + own : NULL));
  PetscCall(PetscLogEventEnd(sys_log.backward, 0, 0, 0, 0));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Epochs x mini-batches of optimizer steps on one model (trainer_pass and
 * trainer_step, as SFT and RM); out gets the sums over steps of the loss,
 * clip fraction, entropy, KL loss and gradient norm (the same on every rank
 * of the mesh). Only the members of the model's mesh call this. */
static PetscErrorCode train_model(Trainer *tr, const PPOOptions *o, const AdamWConfig *opt, const char *what, Rollout *r, PackBuf *pb, uint64_t seed, int iteration, double kl_coef, double out[5])
{
  int      *perm, nmb = r->B / (int)o->minibatches;
  MiniBatch mb  = {o, r, pb, NULL, {0, 0, 1, 0}, 0.0f, kl_coef, {0, 0, 0, 0}, NULL, NULL};
  TrainWork w   = {tr->dm->cfg.head == GPT_HEAD_LM ? actor_forward : critic_forward, model_backward, &mb, mb.acc, 4};
  char      at[96];

  PetscFunctionBegin;
  trainer_split(tr, nmb, PetscMax(1, nmb / (int)o->microbatches), &mb.split);
  PetscCall(PetscMalloc3(r->B, &perm, (size_t)nmb * r->T, &mb.target, (size_t)nmb * r->T, &mb.grad));
  for (int e = 0; e < (int)o->epochs; e++) {
    rng_shuffle(perm, r->B, seed, PPO_SHUFFLE_STREAM, (int64_t)iteration * o->epochs + e);
    for (int k = 0; k < (int)o->minibatches; k++) {
      const int *all = perm + (size_t)k * nmb;
      int        ntok = 0;
      PetscReal  lr, gn;

      for (int i = 0; i < nmb; i++) ntok += r->len[all[i]];
      mb.rows = all;
      mb.w    = ntok > 0 ? 1.0f / (float)ntok : 0.0f;
      PetscCall(PetscArrayzero(mb.acc, 4));
      PetscCall(trainer_pass(tr, &mb.split, &w));
      PetscCall(PetscSNPrintf(at, sizeof at, "iteration %d (epoch %d, mini-batch %d)", iteration + 1, e, k));
      PetscCall(trainer_step(tr, opt, what, at, mb.acc[0] + mb.acc[3], &lr, &gn));
      for (int j = 0; j < 4; j++) out[j] += mb.acc[j];
      out[4] += gn;
    }
  }
  PetscCall(PetscFree3(perm, mb.target, mb.grad));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode ppo_train_actor(Trainer *actor, const PPOOptions *o, Rollout *r, PackBuf *pb, uint64_t seed, int iteration, double kl_coef, PPOTrainStats *s)
{
  double out[5] = {0, 0, 0, 0, 0};

  PetscFunctionBegin;
  PetscCall(train_model(actor, o, &o->actor_opt, "PPO actor", r, pb, seed, iteration, kl_coef, out));
  s->actor_loss = out[0];
  s->clipfrac   = out[1];
  s->entropy    = out[2];
  s->kl_loss    = out[3];
  s->grad_actor = out[4];
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode ppo_train_critic(Trainer *critic, const PPOOptions *o, Rollout *r, PackBuf *pb, uint64_t seed, int iteration, PPOTrainStats *s)
{
  double out[5] = {0, 0, 0, 0, 0};

  PetscFunctionBegin;
  PetscCall(train_model(critic, o, &o->critic_opt, "PPO critic", r, pb, seed, iteration, 0.0, out));
  s->critic_loss = out[0];
  s->vclipfrac   = out[1];
  s->grad_critic = out[4];
  PetscFunctionReturn(PETSC_SUCCESS);
}
