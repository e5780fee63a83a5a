/* Asynchronous RL's queue of generated batches (async.h), the behaviour
 * importance weights of the off-policy correction and the staleness
 * metrics. */
#include "async.h"
#include <math.h>
#include <string.h>

PetscErrorCode async_create(const PPOOptions *o, int B, int T, PetscBool masked, AsyncQueue *q)
{
  PetscFunctionBegin;
  PetscCall(PetscMemzero(q, sizeof *q));
  q->K = (int)o->async_staleness;
  q->n = q->K + 1;
  PetscCall(PetscCalloc3(q->n, &q->slot, q->n, &q->ready, q->n, &q->data_pos));
  PetscCall(PetscCalloc4((size_t)q->n * B, &q->answer, (size_t)q->n * B, &q->meta, (size_t)q->n * B, &q->pidx,
                         (size_t)q->n * B * PPO_ANSWER_LEN, &q->abuf));
  for (int s = 0; s < q->n; s++) {
    Rollout *r = &q->slot[s];
    PetscCall(rollout_create(B, T, masked, r));
    PetscCall(PetscCalloc1(B, &r->async.version));
    PetscCall(PetscCalloc2((size_t)B * T, &r->off.prox, (size_t)B * T, &r->off.isw));
    if (o->async_partial) PetscCall(PetscCalloc2((size_t)B * T, &r->async.tver, B, &r->async.ppos));
    r->answer = q->answer + (size_t)s * B;
    r->meta   = q->meta + (size_t)s * B;
    r->pidx   = q->pidx + (size_t)s * B;
    r->async.batch  = -1;
  }
  q->partial = (PetscBool)(o->async_partial > 0);
  if (q->partial) PetscCall(async_pool_create(o, T, &q->pool));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode async_destroy(AsyncQueue *q)
{
  PetscFunctionBegin;
  for (int s = 0; s < q->n; s++) {
    PetscCall(PetscFree(q->slot[s].async.version));
    PetscCall(PetscFree2(q->slot[s].off.prox, q->slot[s].off.isw));
    PetscCall(PetscFree2(q->slot[s].async.tver, q->slot[s].async.ppos));
    PetscCall(rollout_destroy(&q->slot[s]));
  }
  PetscCall(async_pool_destroy(&q->pool));
  PetscCall(PetscFree3(q->slot, q->ready, q->data_pos));
  PetscCall(PetscFree4(q->answer, q->meta, q->pidx, q->abuf));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode async_keep_prompts(AsyncQueue *q, const PromptSource *ps, int64_t batch, int64_t pos)
{
  int      s = (int)(batch % q->n), B = q->slot[s].Bcap;
  Rollout *r = &q->slot[s];
  char    *mine = q->abuf + (size_t)s * B * PPO_ANSWER_LEN;

  PetscFunctionBegin;
  for (int b = 0; b < B; b++) {
    r->answer[b] = async_keep_answer(ps->answer[b], ps->abuf, (size_t)B * PPO_ANSWER_LEN,
                                     mine + (size_t)b * PPO_ANSWER_LEN);
    r->meta[b]   = ps->meta[b];
    r->pidx[b]   = ps->pidx[b];
  }
  r->async.batch       = batch;
  r->dyn.rounds  = 1;
  r->off.on  = r->scored = PETSC_FALSE;
  q->data_pos[s] = pos;
  q->ready[s]    = PETSC_FALSE;
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode async_weights(AsyncQueue *q, const PPOOptions *o, Rollout *r)
{
  float *w;

  PetscFunctionBegin;
  q->is = (RLISStats){0, 0, 0, 0};
  if (o->async_correction == ASYNC_NONE) PetscFunctionReturn(PETSC_SUCCESS);
  PetscCall(PetscMalloc1(r->T, &w));
  for (int b = 0; b < r->B; b++) {
    size_t off = (size_t)b * r->T;
    for (int t = 0; t < r->T; t++) /* the model's response tokens: an environment's have no behaviour policy */
      w[t] = t >= r->start[b] && t < r->start[b] + r->len[b] && rollout_is_model(r, b, t) ? 1.0f : 0.0f;
    rl_behaviour_weights((size_t)r->T, r->off.prox + off, r->gen.logprobs + off, w, o->async_is_cap,
                         o->async_correction == ASYNC_TIS ? RL_IS_TRUNCATE : RL_IS_MASK, r->off.isw + off, &q->is);
  }
  PetscCall(PetscFree(w));
  r->off.on = PETSC_TRUE;
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode async_record(RunRecord *rec, const AsyncQueue *q, const Rollout *r, int64_t iteration, double gen_s,
                            double train_s, double iter_s, char *line, size_t len)
{
  double lag = 0, lag_max = 0, toks = 0, old = 0, spans = 0;

  PetscFunctionBegin;
  for (int b = 0; b < r->B;
       b++) { /* a row's version: that of its oldest token (partial rollouts: rows may span several) */
    double d = (double)(iteration - r->async.version[b]);
    lag += d;
    lag_max = PetscMax(lag_max, d);
    toks += rollout_model_len(r, b); /* the stale-token fraction counts the model's tokens */
    if (r->async.tver) {
      const int *v = r->async.tver + (size_t)b * r->T;
      for (int t = r->start[b]; t < r->start[b] + r->len[b]; t++) old += v[t] < iteration && rollout_is_model(r, b, t);
      spans += r->len[b] > 0 && v[r->start[b]] != v[r->start[b] + r->len[b] - 1];
    } else if (d > 0) old += rollout_model_len(r, b);
  }
  lag /= r->B;
  if (q->partial) { /* the batch's rows that went on across iterations; the pool's samples in flight */
    PetscCall(record_metric(rec, "async_resumed_frac", spans / r->B));
    PetscCall(record_metric(rec, "async_pool_rows", (double)q->pool.n));
  }
  PetscCall(record_metric(rec, "async_staleness_mean", lag));
  PetscCall(record_metric(rec, "async_staleness_max", lag_max));
  PetscCall(record_metric(rec, "async_stale_token_frac", toks > 0 ? old / toks : 0));
  PetscCall(record_metric(rec, "async_is_mean", q->is.n > 0 ? q->is.sum / q->is.n : NAN));
  PetscCall(record_metric(rec, "async_is_max", q->is.n > 0 ? q->is.max : NAN));
  PetscCall(record_metric(rec, "async_is_capped_frac", q->is.n > 0 ? q->is.capped / q->is.n : NAN));
  PetscCall(record_metric(rec, "async_gen_busy", iter_s > 0 ? gen_s / iter_s : 0));
  PetscCall(record_metric(rec, "async_train_busy", iter_s > 0 ? train_s / iter_s : 0));
  if (q->is.n > 0)
    PetscCall(PetscSNPrintf(line, len, " | stale %.1f w %.2f/%.1f", lag, q->is.sum / q->is.n, q->is.max));
  else PetscCall(PetscSNPrintf(line, len, " | stale %.1f", lag));
  PetscFunctionReturn(PETSC_SUCCESS);
}

