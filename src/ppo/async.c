/* Asynchronous RL (-async_staleness K > 0, docs/async.md): the queue of
 * generated batches, the behaviour importance weights of the off-policy
 * correction and the staleness metrics. Which weights generate which batch
 * is fixed by the deck (batch b by the weights after iteration b - K), never
 * by timing, so a run repeats bit for bit; the iteration graph that
 * overlaps the generation of batch i + K with the training on batch i is
 * ppo_iteration_async (src/ppo/ppo_graph.c). */
#include "ppo_impl.h"
#include <math.h>
#include <string.h>

PetscErrorCode async_create(const PPOOptions *o, int B, int T, PetscBool masked, AsyncQueue *q)
{
  PetscFunctionBegin;
  PetscCall(PetscMemzero(q, sizeof *q));
  q->K = (int)o->async_staleness;
  q->n = q->K + 1;
  PetscCall(PetscCalloc3(q->n, &q->slot, q->n, &q->ready, q->n, &q->data_pos));
  PetscCall(PetscCalloc4((size_t)q->n * B, &q->answer, (size_t)q->n * B, &q->meta, (size_t)q->n * B, &q->pidx, (size_t)q->n * B * PPO_ANSWER_LEN, &q->abuf));
  for (int s = 0; s < q->n; s++) {
    Rollout *r = &q->slot[s];
    PetscCall(rollout_create(B, T, masked, r));
    PetscCall(PetscCalloc1(B, &r->version));
    PetscCall(PetscCalloc2((size_t)B * T, &r->prox, (size_t)B * T, &r->isw));
    r->answer = q->answer + (size_t)s * B;
    r->meta   = q->meta + (size_t)s * B;
    r->pidx   = q->pidx + (size_t)s * B;
    r->batch  = -1;
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode async_destroy(AsyncQueue *q)
{
  PetscFunctionBegin;
  for (int s = 0; s < q->n; s++) {
    PetscCall(PetscFree(q->slot[s].version));
    PetscCall(PetscFree2(q->slot[s].prox, q->slot[s].isw));
    PetscCall(rollout_destroy(&q->slot[s]));
  }
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
    const char *a = ps->answer[b];
    /* the built-in task's answers live in the prompt source's buffer, which
     * the next batch overwrites: a copy; a file's stay where they are */
    if (a && a >= ps->abuf && a < ps->abuf + (size_t)B * PPO_ANSWER_LEN) {
      PetscCall(PetscStrncpy(mine + (size_t)b * PPO_ANSWER_LEN, a, PPO_ANSWER_LEN));
      a = mine + (size_t)b * PPO_ANSWER_LEN;
    }
    r->answer[b] = a;
    r->meta[b]   = ps->meta[b];
    r->pidx[b]   = ps->pidx[b];
  }
  r->batch       = batch;
  r->dyn_rounds  = 1;
  r->off_policy  = PETSC_FALSE;
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
    for (int t = 0; t < r->T; t++) w[t] = t >= r->start[b] && t < r->start[b] + r->len[b] ? 1.0f : 0.0f;
    rl_behaviour_weights((size_t)r->T, r->prox + off, r->gen.logprobs + off, w, o->async_is_cap, o->async_correction == ASYNC_TIS ? RL_IS_TRUNCATE : RL_IS_MASK, r->isw + off, &q->is);
  }
  PetscCall(PetscFree(w));
  r->off_policy = PETSC_TRUE;
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode async_record(RunRecord *rec, const AsyncQueue *q, const Rollout *r, int64_t iteration, double gen_s, double train_s, double iter_s, char *line, size_t len)
{
  double lag = 0, lag_max = 0, toks = 0, old = 0;

  PetscFunctionBegin;
  for (int b = 0; b < r->B; b++) {
    double d = (double)(iteration - r->version[b]);
    lag += d;
    lag_max = PetscMax(lag_max, d);
    toks += r->len[b];
    if (d > 0) old += r->len[b];
  }
  lag /= r->B;
  PetscCall(record_metric(rec, "async_staleness_mean", lag));
  PetscCall(record_metric(rec, "async_staleness_max", lag_max));
  PetscCall(record_metric(rec, "async_stale_token_frac", toks > 0 ? old / toks : 0));
  PetscCall(record_metric(rec, "async_is_mean", q->is.n > 0 ? q->is.sum / q->is.n : NAN));
  PetscCall(record_metric(rec, "async_is_max", q->is.n > 0 ? q->is.max : NAN));
  PetscCall(record_metric(rec, "async_is_capped_frac", q->is.n > 0 ? q->is.capped / q->is.n : NAN));
  PetscCall(record_metric(rec, "async_gen_busy", iter_s > 0 ? gen_s / iter_s : 0));
  PetscCall(record_metric(rec, "async_train_busy", iter_s > 0 ? train_s / iter_s : 0));
  if (q->is.n > 0) PetscCall(PetscSNPrintf(line, len, " | stale %.1f w %.2f/%.1f", lag, q->is.sum / q->is.n, q->is.max));
  else PetscCall(PetscSNPrintf(line, len, " | stale %.1f", lag));
  PetscFunctionReturn(PETSC_SUCCESS);
}
