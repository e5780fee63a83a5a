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
  PackBuf          *pb;
  const int        *mb;    /* the mini-batch's sequence indices */
  int               nmb, nmicro;
  float             w;     /* 1 / response tokens of the mini-batch */
  double            kl_coef;
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
static void unalign_row(const Rollout *r, PackBuf *pb, int idx, int i, int Tf)
{
  int P = r->start[idx], end = P + r->len[idx];
  for (int s = 0; s < Tf; s++) pb->grad[i * Tf + s] = 0.0f;
  for (int t = P; t < end; t++) pb->grad[i * Tf + t - 1] = pb->dal[t];
}

static PetscErrorCode actor_minibatch(GPT *actor, const MiniBatch *mb, double *loss, double *clip, double *ent, double *kll)
{
  const Rollout *r  = mb->r;
  PackBuf       *pb = mb->pb;
  size_t         T  = (size_t)r->T;

  PetscFunctionBegin;
  *loss = *clip = *ent = *kll = 0;
  PetscCall(gpt_zero_grad(actor));
  for (int m0 = 0; m0 < mb->nmb; m0 += mb->nmicro) {
    const int *idx = mb->mb + m0;
    int        nb  = PetscMin(mb->nmicro, mb->nmb - m0), Tf;

    PetscCall(PetscLogEventBegin(sys_log.forward, 0, 0, 0, 0));
    PetscCall(rollout_forward_logprobs(actor, r, idx, nb, (float)(1.0 / mb->o->gen.temperature), pb, &Tf));
    PetscCall(PetscLogEventEnd(sys_log.forward, 0, 0, 0, 0));
    for (int i = 0; i < nb; i++) {
      double cf;
      size_t off = (size_t)idx[i] * T;

      align_row(r, pb, idx[i], pb->ent, i, Tf, mb->w);
      for (size_t t = 0; t < T; t++) *ent += (double)pb->w[t] * pb->al[t];
      align_row(r, pb, idx[i], pb->lp, i, Tf, mb->w);
      *loss += rl_policy_loss(T, pb->al, r->gen.logprobs + off, r->adv + off, pb->w, mb->o->clip, pb->dal, &cf);
      *clip += cf;
      if (mb->o->algo == ALGO_GRPO) *kll += rl_kl_loss(T, pb->al, r->ref + off, pb->w, mb->kl_coef, pb->dal);
      unalign_row(r, pb, idx[i], i, Tf);
    }
    PetscCall(PetscLogEventBegin(sys_log.backward, 0, 0, 0, 0));
    PetscCall(gpt_backward_logprob(actor, pb->target, pb->grad));
    PetscCall(PetscLogEventEnd(sys_log.backward, 0, 0, 0, 0));
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode critic_minibatch(GPT *critic, const MiniBatch *mb, double *loss, double *clip)
{
  const Rollout *r  = mb->r;
  PackBuf       *pb = mb->pb;
  size_t         T  = (size_t)r->T;

  PetscFunctionBegin;
  *loss = *clip = 0;
  PetscCall(gpt_zero_grad(critic));
  for (int m0 = 0; m0 < mb->nmb; m0 += mb->nmicro) {
    const int *idx = mb->mb + m0;
    int        nb  = PetscMin(mb->nmicro, mb->nmb - m0), Tf;

    PetscCall(PetscLogEventBegin(sys_log.forward, 0, 0, 0, 0));
    PetscCall(rollout_forward_values(critic, r, idx, nb, PETSC_FALSE, pb, &Tf));
    PetscCall(PetscLogEventEnd(sys_log.forward, 0, 0, 0, 0));
    for (int i = 0; i < nb; i++) {
      double cf;
      size_t off = (size_t)idx[i] * T;

      align_row(r, pb, idx[i], pb->val, i, Tf, mb->w);
      *loss += rl_value_loss(T, pb->al, r->values + off, r->ret + off, pb->w, mb->o->value_clip, pb->dal, &cf);
      *clip += cf;
      unalign_row(r, pb, idx[i], i, Tf);
    }
    PetscCall(PetscLogEventBegin(sys_log.backward, 0, 0, 0, 0));
    PetscCall(gpt_backward_values(critic, pb->grad));
    PetscCall(PetscLogEventEnd(sys_log.backward, 0, 0, 0, 0));
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* An optimizer step, refused (with the last checkpoint left as it is) when
 * the loss or the gradient is not finite. */
static PetscErrorCode guarded_step(GPT *gpt, const AdamWConfig *opt, const char *what, double loss, int iteration, int epoch, int k, double *gnorm)
{
  PetscReal lr, g;

  PetscFunctionBegin;
  PetscCheck(isfinite(loss), PETSC_COMM_WORLD, PETSC_ERR_FP, "PPO %s loss is %g at iteration %d (epoch %d, mini-batch %d); stopping, the last checkpoint is intact", what, loss, iteration + 1, epoch, k);
  PetscCall(PetscLogEventBegin(sys_log.optimizer, 0, 0, 0, 0));
  PetscCall(gpt_adamw_step(gpt, opt, &lr, &g));
  PetscCall(PetscLogEventEnd(sys_log.optimizer, 0, 0, 0, 0));
  PetscCheck(isfinite(g), PETSC_COMM_WORLD, PETSC_ERR_FP, "PPO %s gradient norm is %g at iteration %d (epoch %d, mini-batch %d); stopping, the last checkpoint is intact", what, (double)g, iteration + 1, epoch, k);
  *gnorm = g;
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode ppo_train(PPOModels *m, const PPOOptions *o, Rollout *r, PackBuf *pb, uint64_t seed, int iteration, double kl_coef, PPOTrainStats *s)
{
  int      *perm, nmb = r->B / (int)o->minibatches;
  MiniBatch mb = {o, r, pb, NULL, nmb, nmb / (int)o->microbatches, 0.0f, kl_coef};

  PetscFunctionBegin;
  PetscCall(PetscMemzero(s, sizeof *s));
  PetscCall(PetscMalloc1(r->B, &perm));
  for (int e = 0; e < (int)o->epochs; e++) {
    rl_shuffle(perm, r->B, seed, PPO_SHUFFLE_STREAM, (int64_t)iteration * o->epochs + e);
    for (int k = 0; k < (int)o->minibatches; k++) {
      double t0 = sys_wtime(), t1, loss, clip, ent, kll, g;
      int    ntok = 0;

      mb.mb = perm + (size_t)k * nmb;
      for (int i = 0; i < nmb; i++) ntok += r->len[mb.mb[i]];
      mb.w = ntok > 0 ? 1.0f / (float)ntok : 0.0f;
      PetscCall(actor_minibatch(m->actor, &mb, &loss, &clip, &ent, &kll));
      PetscCall(guarded_step(m->actor, &o->actor_opt, "actor", loss + kll, iteration, e, k, &g));
      s->actor_loss += loss;
      s->kl_loss += kll;
      s->clipfrac += clip;
      s->entropy += ent;
      s->grad_actor += g;
      t1 = sys_wtime();
      s->t_actor += t1 - t0;
      if (m->critic) {
        PetscCall(critic_minibatch(m->critic, &mb, &loss, &clip));
        PetscCall(guarded_step(m->critic, &o->critic_opt, "critic", loss, iteration, e, k, &g));
        s->critic_loss += loss;
        s->vclipfrac += clip;
        s->grad_critic += g;
        s->t_critic += sys_wtime() - t1;
      }
      s->steps++;
    }
  }
  PetscCall(PetscFree(perm));
  PetscFunctionReturn(PETSC_SUCCESS);
}
