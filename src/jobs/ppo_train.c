/* PPO training over one rollout: the batch is shuffled (keyed by seed,
 * iteration and epoch), split into mini-batches (one optimizer step each) and
 * those into micro-batches whose gradients accumulate. Losses are token
 * means over the whole mini-batch (each token weighs 1/ntokens of its
 * mini-batch), so the micro-batch count changes nothing but memory. */
#include "ppo_impl.h"
#include "schedule.h"
#include <math.h>

#define PPO_SHUFFLE_STREAM 0x50504F00u /* "PPO" */

typedef struct {
  const PPOOptions *o;
  Rollout          *r;
  PackBuf          *pb;
  const int        *rows;  /* this replica's sequences of the mini-batch */
  int               nrows, size; /* its count, and sequences per micro-batch */
  float             w;     /* 1 / response tokens of the whole mini-batch */
  double            kl_coef;
  double            acc[4]; /* on the last stage: loss, clip fraction, entropy, KL loss */
  int               last_fwd; /* micro-batch of the last forward (the last stage's backward uses its rows) */
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

static void micro_rows(const MiniBatch *mb, int k, const int **idx, int *nb)
{
  *idx = mb->rows + (size_t)k * mb->size;
  *nb  = PetscMin(mb->size, mb->nrows - k * mb->size);
}

/* Forward of micro-batch k (log-probabilities for the LM head, values for
 * the scalar head); true on the last stage, which then computes the loss. */
static PetscErrorCode micro_forward(MiniBatch *mb, GPT *g, int k, const int **idx, int *nb, int *Tf, PetscBool *last)
{
  PetscFunctionBegin;
  micro_rows(mb, k, idx, nb);
  PetscCall(PetscLogEventBegin(sys_log.forward, 0, 0, 0, 0));
  if (g->cfg.head == GPT_HEAD_LM) PetscCall(rollout_forward_logprobs(g, mb->r, *idx, *nb, (float)(1.0 / mb->o->gen.temperature), mb->pb, Tf));
  else PetscCall(rollout_forward_values(g, mb->r, *idx, *nb, PETSC_FALSE, mb->pb, Tf));
  PetscCall(PetscLogEventEnd(sys_log.forward, 0, 0, 0, 0));
  mb->last_fwd = k;
  *last        = gpt_last_stage(g);
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

  PetscFunctionBegin;
  PetscCall(micro_forward(mb, actor, k, &idx, &nb, &Tf, &last));
  if (!last) PetscFunctionReturn(PETSC_SUCCESS);
  for (int i = 0; i < nb; i++) {
    double cf;
    size_t off = (size_t)idx[i] * T;

    align_row(r, pb, idx[i], pb->ent, i, Tf, mb->w);
    for (size_t t = 0; t < T; t++) mb->acc[2] += (double)pb->w[t] * pb->al[t];
    align_row(r, pb, idx[i], pb->lp, i, Tf, mb->w);
    mb->acc[0] += rl_policy_loss(T, pb->al, r->gen.logprobs + off, r->adv + off, pb->w, mb->o->clip, pb->dal, &cf);
    mb->acc[1] += cf;
    if (mb->o->algo == ALGO_GRPO) mb->acc[3] += rl_kl_loss(T, pb->al, r->ref + off, pb->w, mb->kl_coef, pb->dal);
    unalign_row(r, pb, idx[i], i, Tf);
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

  PetscFunctionBegin;
  PetscCall(micro_forward(mb, critic, k, &idx, &nb, &Tf, &last));
  if (!last) PetscFunctionReturn(PETSC_SUCCESS);
  for (int i = 0; i < nb; i++) {
    double cf;
    size_t off = (size_t)idx[i] * T;

    align_row(r, pb, idx[i], pb->val, i, Tf, mb->w);
    mb->acc[0] += rl_value_loss(T, pb->al, r->values + off, r->ret + off, pb->w, mb->o->value_clip, pb->dal, &cf);
    mb->acc[1] += cf;
    unalign_row(r, pb, idx[i], i, Tf);
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* The last stage runs each backward right after its forward (1F1B has no
 * warm-up there), so the pack buffer still holds that micro-batch. */
static PetscErrorCode model_backward(void *ctx, GPT *gpt, int k)
{
  MiniBatch *mb   = (MiniBatch *)ctx;
  PetscBool  last = gpt_last_stage(gpt);

  PetscFunctionBegin;
  PetscCheck(!last || mb->last_fwd == k, PETSC_COMM_SELF, PETSC_ERR_PLIB, "PPO training: the last stage's backward of micro-batch %d does not follow its forward", k);
  PetscCall(PetscLogEventBegin(sys_log.backward, 0, 0, 0, 0));
  if (gpt->cfg.head == GPT_HEAD_LM) PetscCall(gpt_backward_logprob(gpt, last ? mb->pb->target : NULL, last ? mb->pb->grad : NULL));
  else PetscCall(gpt_backward_values(gpt, last ? mb->pb->grad : NULL));
  PetscCall(PetscLogEventEnd(sys_log.backward, 0, 0, 0, 0));
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

/* Epochs x mini-batches of optimizer steps on one model; out gets the sums
 * over steps of the loss, clip fraction, entropy, KL loss and gradient norm
 * (the same on every rank of the mesh). */
static PetscErrorCode train_model(GPT *g, const PPOOptions *o, const AdamWConfig *opt, const char *what, int mbs, Rollout *r, PackBuf *pb, uint64_t seed, int iteration, double kl_coef, double out[5])
{
  const Mesh *mesh = g->mesh;
  int        *perm, nmb = r->B / (int)o->minibatches, share = nmb / mesh->dp, count, nslots;
  SchedTask  *tasks;
  MiniBatch   mb = {o, r, pb, NULL, share, 0, 0.0f, kl_coef, {0, 0, 0, 0}, -1};
  SchedFn     fwd = g->cfg.head == GPT_HEAD_LM ? actor_forward : critic_forward;

  PetscFunctionBegin;
  mb.size = mbs > 0 ? (share + mbs - 1) / mbs : PetscMax(1, nmb / (int)o->microbatches);
  count   = (share + mb.size - 1) / mb.size;
  PetscCall(PetscMalloc2(r->B, &perm, 2 * count, &tasks));
  PetscCall(sched_1f1b(mesh->pp, mesh->p, count, tasks, &nslots));
  for (int e = 0; e < (int)o->epochs; e++) {
    rng_shuffle(perm, r->B, seed, PPO_SHUFFLE_STREAM, (int64_t)iteration * o->epochs + e);
    for (int k = 0; k < (int)o->minibatches; k++) {
      const int *all = perm + (size_t)k * nmb;
      int        ntok = 0;
      double     v[4];
      double     gn = 0;

      for (int i = 0; i < nmb; i++) ntok += r->len[all[i]];
      mb.rows = all + (size_t)mesh->d * share;
      mb.w    = ntok > 0 ? 1.0f / (float)ntok : 0.0f;
      PetscCall(PetscArrayzero(mb.acc, 4));
      PetscCall(gpt_zero_grad(g));
      PetscCall(sched_run(g, tasks, 2 * count, nslots, fwd, model_backward, &mb));
      for (int j = 0; j < 4; j++) v[j] = exec_is_head(mesh) ? mb.acc[j] : 0.0;
      PetscCall(comm_allreduce_sum_double(&mesh->all, v, 4));
      PetscCall(guarded_step(g, opt, what, v[0] + v[3], iteration, e, k, &gn));
      for (int j = 0; j < 4; j++) out[j] += v[j];
      out[4] += gn;
    }
  }
  PetscCall(PetscFree2(perm, tasks));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode ppo_train_actor(GPT *actor, const PPOOptions *o, int mbs, Rollout *r, PackBuf *pb, uint64_t seed, int iteration, double kl_coef, PPOTrainStats *s)
{
  double out[5] = {0, 0, 0, 0, 0};

  PetscFunctionBegin;
  PetscCall(train_model(actor, o, &o->actor_opt, "actor", mbs, r, pb, seed, iteration, kl_coef, out));
  s->actor_loss = out[0];
  s->clipfrac   = out[1];
  s->entropy    = out[2];
  s->kl_loss    = out[3];
  s->grad_actor = out[4];
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode ppo_train_critic(GPT *critic, const PPOOptions *o, int mbs, Rollout *r, PackBuf *pb, uint64_t seed, int iteration, PPOTrainStats *s)
{
  double out[5] = {0, 0, 0, 0, 0};

  PetscFunctionBegin;
  PetscCall(train_model(critic, o, &o->critic_opt, "critic", mbs, r, pb, seed, iteration, 0.0, out));
  s->critic_loss = out[0];
  s->vclipfrac   = out[1];
  s->grad_critic = out[4];
  PetscFunctionReturn(PETSC_SUCCESS);
}
