/* Partial rollouts (-async_partial S, docs/async.md): a sample still running
 * when its iteration's token budget ends goes on in the next iteration's
 * generation with the newer weights, so a batch no longer waits for its
 * longest response. The pool (AsyncPool, ppo_impl.h) holds the samples in
 * flight, whole groups in prompt order; each call
 *
 *   1. draws at most S new tokens for every sample not yet ended (the
 *      weights of the call's iteration; each token records that version and
 *      its behaviour log-probability),
 *   2. if fewer than a batch's groups have all their samples ended, runs the
 *      oldest unfinished groups to their end (same weights), so that
 *   3. the batch is always the oldest ended groups, rollout_batch rows.
 *
 * Which samples end in step 1 depends on their tokens only, never on the
 * layout or on timing, and a sample's draws are keyed by its number in the
 * run (prompt position x group + member) and the call's batch index, so
 * runs repeat bit for bit and match across layouts within the tolerances. */
#include "ppo_impl.h"
#include <string.h>

static void pool_requests(AsyncPool *p);

PetscErrorCode async_pool_create(const PPOOptions *o, int T, AsyncPool *p)
{
  int cap = ppo_partial_rows(o);

  PetscFunctionBegin;
  PetscCall(PetscMemzero(p, sizeof *p));
  p->S = (int)o->async_partial, p->G = ppo_group_size(o), p->T = T, p->cap = cap;
  PetscCall(PetscCalloc3((size_t)cap * T, &p->tokens, (size_t)cap * T, &p->tver, (size_t)cap * T, &p->logprobs));
  PetscCall(PetscCalloc4(cap, &p->prompt_len, cap, &p->len, cap, &p->eos, cap, &p->done));
  PetscCall(PetscCalloc5(cap, &p->ppos, cap, &p->pidx, cap, &p->answer, cap, &p->meta, (size_t)cap * PPO_ANSWER_LEN, &p->abuf));
  PetscCall(PetscCalloc2(cap, &p->req, cap, &p->row));
  PetscCall(gen_batch_create(cap, T, PETSC_FALSE, &p->res));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode async_pool_destroy(AsyncPool *p)
{
  PetscFunctionBegin;
  if (!p->cap) PetscFunctionReturn(PETSC_SUCCESS);
  PetscCall(PetscFree3(p->tokens, p->tver, p->logprobs));
  PetscCall(PetscFree4(p->prompt_len, p->len, p->eos, p->done));
  PetscCall(PetscFree5(p->ppos, p->pidx, p->answer, p->meta, p->abuf));
  PetscCall(PetscFree2(p->req, p->row));
  PetscCall(gen_batch_destroy(&p->res));
  PetscCall(PetscMemzero(p, sizeof *p));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Pool row `from` copied to row `to`. */
static void pool_copy(AsyncPool *p, int from, int to)
{
  size_t T = (size_t)p->T;

  if (from == to) return;
  memmove(p->tokens + to * T, p->tokens + from * T, T * sizeof(int));
  memmove(p->tver + to * T, p->tver + from * T, T * sizeof(int));
  memmove(p->logprobs + to * T, p->logprobs + from * T, T * sizeof(float));
  p->prompt_len[to] = p->prompt_len[from], p->len[to] = p->len[from], p->eos[to] = p->eos[from], p->done[to] = p->done[from];
  p->ppos[to] = p->ppos[from], p->pidx[to] = p->pidx[from], p->meta[to] = p->meta[from];
  p->answer[to] = async_keep_answer(p->answer[from], p->abuf, (size_t)p->cap * PPO_ANSWER_LEN, p->abuf + (size_t)to * PPO_ANSWER_LEN);
}

/* Sets pool row i to the prompt at stream position pos (nothing drawn yet). */
static PetscErrorCode pool_set_prompt(AsyncPool *p, PromptSource *ps, const PPOOptions *o, int i, int64_t pos)
{
  size_t T = (size_t)p->T;
  int    len;

  PetscFunctionBegin;
  PetscCheck(ps->room <= p->T, PETSC_COMM_SELF, PETSC_ERR_PLIB, "partial rollouts: prompt room %d exceeds %d positions", ps->room, p->T);
  PetscCall(PetscArrayzero(p->tokens + i * T, T));
  PetscCall(PetscArrayzero(p->tver + i * T, T));
  PetscCall(PetscArrayzero(p->logprobs + i * T, T));
  PetscCall(prompts_at(ps, o, pos, p->tokens + i * T, &len, p->abuf + (size_t)i * PPO_ANSWER_LEN, &p->answer[i], &p->meta[i], &p->pidx[i]));
  p->prompt_len[i] = len, p->len[i] = p->eos[i] = p->done[i] = 0, p->ppos[i] = pos;
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode async_pool_admit(AsyncQueue *q, PromptSource *ps, const PPOOptions *o, int64_t batch, PetscInt *data_pos)
{
  AsyncPool *p = &q->pool;
  Rollout   *r = async_slot(q, batch);

  PetscFunctionBegin;
  while (p->n + p->G <= p->cap) {
    PetscCall(pool_set_prompt(p, ps, o, p->n, *data_pos));
    for (int j = 1; j < p->G; j++) pool_copy(p, p->n, p->n + j); /* the group's samples share the prompt */
    p->n += p->G;
    (*data_pos)++;
  }
  pool_requests(p);
  r->batch      = batch;
  r->dyn_rounds = 1;
  r->off_policy = r->frozen_done = PETSC_FALSE;
  q->ready[batch % q->n] = PETSC_FALSE;
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* The call's requests: every row not ended, going on from its response so
 * far, at most S new tokens; sample id: its number in the run. */
static void pool_requests(AsyncPool *p)
{
  p->nreq = 0;
  for (int i = 0; i < p->n; i++) {
    if (p->done[i]) continue;
    p->req[p->nreq] = (GenRequest){(int)((p->ppos[i] * p->G + i % p->G) & 0x7fffffff), p->tokens + (size_t)i * p->T, p->prompt_len[i] + p->len[i], p->len[i], p->S};
    p->row[p->nreq++] = i;
  }
}

/* Which requests run to their end in step 2 (force[i]), given which ended in
 * step 1 (ended[i]): the oldest groups not ended, as many as the batch
 * lacks. The same on every rank that knows ended[]. */
static PetscErrorCode pool_force(const AsyncPool *p, int groups, const int *ended, int *force)
{
  int *ridx, have = 0, lack;

  PetscFunctionBegin;
  PetscCall(PetscMalloc1(p->n + 1, &ridx));
  for (int i = 0; i < p->n; i++) ridx[i] = -1;
  for (int k = 0; k < p->nreq; k++) ridx[p->row[k]] = k, force[k] = 0;
  for (int g = 0; g < p->n; g += p->G) {
    PetscBool all = PETSC_TRUE;
    for (int i = g; i < g + p->G; i++)
      if (!p->done[i] && !ended[ridx[i]]) all = PETSC_FALSE;
    have += all;
  }
  lack = groups - have;
  for (int g = 0; g < p->n && lack > 0; g += p->G) {
    PetscBool all = PETSC_TRUE;
    for (int i = g; i < g + p->G; i++)
      if (!p->done[i] && !ended[ridx[i]]) all = PETSC_FALSE;
    if (all) continue;
    for (int i = g; i < g + p->G; i++)
      if (ridx[i] >= 0 && !ended[ridx[i]]) force[ridx[i]] = 1;
    lack--;
  }
  PetscCall(PetscFree(ridx));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode async_pool_generate(AsyncPool *p, DModel *policy, const PPOOptions *o, int max_prompt, uint64_t seed, uint32_t key, GenPart *part)
{
  const Mesh *m = policy->mesh;
  const int   T = p->T, maxnew = (int)o->gen.max_new_tokens;
  GenEngine  *eng = NULL;
  GenBatch   *out, more;
  GenRequest *req2;
  int        *ended, *force, n2 = 0, *at2;

  PetscFunctionBegin;
  if (!dmodel_member(policy)) PetscFunctionReturn(PETSC_SUCCESS);
  p->res.n = p->nreq;
  exec_rows(p->nreq, m->dp, m->d, &part->b0, &part->b1);
  part->own = (PetscBool)(part->b0 > 0 || part->b1 < p->nreq);
  if (part->own) PetscCall(gen_batch_create(part->b1 - part->b0, T, PETSC_FALSE, &part->b));
  out = part->own ? &part->b : &p->res;
  if (part->b1 > part->b0) {
    PetscCall(gen_engine_create(policy->lm, &o->gen, max_prompt, &eng));
    PetscCall(gen_generate(eng, seed, key, part->b1 - part->b0, p->req + part->b0, out, NULL, NULL));
  }
  /* step 2: which requests ended, from every replica; the oldest groups the batch lacks to their end */
  PetscCall(PetscCalloc4(p->nreq + 1, &ended, p->nreq + 1, &force, p->nreq + 1, &req2, p->nreq + 1, &at2));
  for (int i = part->b0; i < part->b1; i++) {
    int k    = i - part->b0;
    ended[i] = out->eos[k] || p->req[i].resumed + out->response_len[k] == maxnew;
  }
  PetscCallMPI(MPI_Allreduce(MPI_IN_PLACE, ended, p->nreq, MPI_INT, MPI_MAX, m->all.mpi));
  PetscCall(pool_force(p, (int)(o->rollout_batch / p->G), ended, force));
  for (int i = part->b0; i < part->b1; i++) {
    int k = i - part->b0;
    if (!force[i]) continue;
    req2[n2]  = (GenRequest){p->req[i].id, out->tokens + (size_t)k * T, out->prompt_len[k] + out->response_len[k], p->req[i].resumed + out->response_len[k], 0};
    at2[n2++] = k;
  }
  if (n2) {
    PetscCall(gen_batch_create(n2, T, PETSC_FALSE, &more));
    PetscCall(gen_generate(eng, seed, key, n2, req2, &more, NULL, NULL));
    for (int j = 0; j < n2; j++) { /* appended to the row's draws of step 1 */
      int    k = at2[j], P = more.prompt_len[j], L = more.response_len[j];
      size_t src = (size_t)j * T + P, dst = (size_t)k * T + P;
      PetscCall(PetscArraycpy(out->tokens + dst, more.tokens + src, L));
      PetscCall(PetscArraycpy(out->logprobs + dst, more.logprobs + src, L));
      out->response_len[k] += L;
      out->eos[k] = more.eos[j];
    }
    out->new_tokens += more.new_tokens;
    out->seconds += more.seconds;
    PetscCall(gen_batch_destroy(&more));
  }
  PetscCall(gen_engine_destroy(&eng));
  PetscCall(PetscFree4(ended, force, req2, at2));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* The call's results (p->res, every request's) merged into the pool, then
 * the batch taken out into its slot. */
static PetscErrorCode pool_merge_take(AsyncQueue *q, const PPOOptions *o, int version, Rollout *slot)
{
  AsyncPool *p = &q->pool;
  GenBatch  *g = &p->res, *sg = &slot->gen;
  size_t     T = (size_t)p->T;
  int        groups = (int)(o->rollout_batch / p->G), taken = 0, kept = 0, s = (int)(slot->batch % q->n), B = slot->Bcap;
  char      *sabuf = q->abuf + (size_t)s * B * PPO_ANSWER_LEN;

  PetscFunctionBegin;
  p->made = 0;
  for (int k = 0; k < p->nreq; k++) { /* each request's new tokens after the row's draws so far */
    int i = p->row[k], P = g->prompt_len[k], L = g->response_len[k];
    PetscCheck(P == p->prompt_len[i] + p->len[i] && P + L <= p->T, PETSC_COMM_SELF, PETSC_ERR_PLIB, "partial rollouts: request %d of row %d came back at position %d with %d tokens", k, i, P, L);
    PetscCall(PetscArraycpy(p->tokens + i * T + P, g->tokens + k * T + P, L));
    PetscCall(PetscArraycpy(p->logprobs + i * T + P, g->logprobs + k * T + P, L));
    for (int t = P; t < P + L; t++) p->tver[i * T + t] = version;
    p->len[i] += L;
    p->eos[i]  = g->eos[k];
    p->done[i] = (PetscBool)(p->eos[i] || p->len[i] == o->gen.max_new_tokens);
    p->made += L;
  }
  /* the batch: the oldest groups whose samples have all ended */
  for (int g0 = 0; g0 < p->n; g0 += p->G) {
    PetscBool all = PETSC_TRUE;
    for (int i = g0; i < g0 + p->G; i++) all = (PetscBool)(all && p->done[i]);
    for (int i = g0; i < g0 + p->G; i++) {
      if (all && taken < groups) {
        int b = taken * p->G + (i - g0), P = p->prompt_len[i], vmin = version;
        PetscCall(PetscArraycpy(sg->tokens + b * T, p->tokens + i * T, T));
        PetscCall(PetscArraycpy(sg->logprobs + b * T, p->logprobs + i * T, T));
        PetscCall(PetscArraycpy(slot->tver + b * T, p->tver + i * T, T));
        for (int t = P; t < P + p->len[i]; t++) vmin = PetscMin(vmin, p->tver[i * T + t]);
        sg->prompt_len[b] = P, sg->response_len[b] = p->len[i], sg->eos[b] = p->eos[i];
        slot->version[b] = vmin, slot->ppos[b] = p->ppos[i], slot->pidx[b] = p->pidx[i], slot->meta[b] = p->meta[i];
        slot->answer[b]  = async_keep_answer(p->answer[i], p->abuf, (size_t)p->cap * PPO_ANSWER_LEN, sabuf + (size_t)b * PPO_ANSWER_LEN);
      } else pool_copy(p, i, kept++);
    }
    if (all && taken < groups) taken++;
  }
  PetscCheck(taken == groups, PETSC_COMM_SELF, PETSC_ERR_PLIB, "partial rollouts: %d groups ended of the %d of a batch", taken, groups);
  p->n           = kept;
  slot->B        = sg->n = slot->Bcap;
  sg->new_tokens = p->made;
  PetscCall(rollout_finish_gen(slot));
  q->ready[s] = PETSC_TRUE;
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode async_pool_take_early(AsyncQueue *q, const Mesh *m, const PPOOptions *o, GenPart *part, int version, Rollout *slot)
{
  AsyncPool *p = &q->pool;
  GenBatch  *g = &p->res;
  int        T = p->T, *cnt, *dsp;

  PetscFunctionBegin;
  PetscCheck(m->tp == 1 && m->pp == 1, PETSC_COMM_SELF, PETSC_ERR_PLIB, "partial rollouts: the batch taken with the generation needs one rank a replica");
  if (part->own) { /* my replica's rows into their place, then every replica's from its rank */
    size_t at = (size_t)part->b0 * T;
    PetscCall(PetscArraycpy(g->tokens + at, part->b.tokens, (size_t)part->b.n * T));
    PetscCall(PetscArraycpy(g->logprobs + at, part->b.logprobs, (size_t)part->b.n * T));
    PetscCall(PetscArraycpy(g->prompt_len + part->b0, part->b.prompt_len, part->b.n));
    PetscCall(PetscArraycpy(g->response_len + part->b0, part->b.response_len, part->b.n));
    PetscCall(PetscArraycpy(g->eos + part->b0, part->b.eos, part->b.n));
  }
  PetscCall(PetscMalloc2(m->dp, &cnt, m->dp, &dsp));
  for (int d = 0; d < m->dp; d++) {
    int b0, b1;
    exec_rows(p->nreq, m->dp, d, &b0, &b1);
    cnt[d] = b1 - b0, dsp[d] = b0;
  }
  if (m->dp > 1) {
    PetscCallMPI(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_INT, g->prompt_len, cnt, dsp, MPI_INT, m->all.mpi));
    PetscCallMPI(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_INT, g->response_len, cnt, dsp, MPI_INT, m->all.mpi));
    PetscCallMPI(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_INT, g->eos, cnt, dsp, MPI_INT, m->all.mpi));
    for (int d = 0; d < m->dp; d++) cnt[d] *= T, dsp[d] *= T;
    PetscCallMPI(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_INT, g->tokens, cnt, dsp, MPI_INT, m->all.mpi));
    PetscCallMPI(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_FLOAT, g->logprobs, cnt, dsp, MPI_FLOAT, m->all.mpi));
  }
  PetscCall(PetscFree2(cnt, dsp));
  PetscCall(pool_merge_take(q, o, version, slot));
  p->taken = PETSC_TRUE;
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode async_pool_share(AsyncQueue *q, const Mesh *m, const PPOOptions *o, GenPart *part, int version, Rollout *slot)
{
  AsyncPool *p = &q->pool;

  PetscFunctionBegin;
  p->res.n = p->nreq;
  if (p->nreq) PetscCall(rollout_share_genbatch(m, part, &p->res));
  if (p->taken) p->taken = PETSC_FALSE; /* this rank took the batch with the generation */
  else PetscCall(pool_merge_take(q, o, version, slot));
  { /* the engine steps of the call that made the batch (replica 0's), for the rollout record */
    GenBatch *g = &p->res, *sg = &slot->gen;
    int       n = p->nreq ? g->nsteps : 0;
    if (n > sg->steps_cap) {
      PetscCall(PetscFree2(sg->step_seconds, sg->step_active));
      PetscCall(PetscMalloc2(n, &sg->step_seconds, n, &sg->step_active));
      sg->steps_cap = n;
    }
    if (n) PetscCall(PetscArraycpy(sg->step_seconds, g->step_seconds, n));
    if (n) PetscCall(PetscArraycpy(sg->step_active, g->step_active, n));
    sg->nsteps = n;
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode async_pool_prompts(AsyncQueue *q, PromptSource *ps, const PPOOptions *o, Rollout *r)
{
  AsyncPool *p = &q->pool;
  int       *row, len, n = r ? r->Bcap : p->n;
  char      *abuf = r ? q->abuf + (size_t)(r->batch % q->n) * r->Bcap * PPO_ANSWER_LEN : p->abuf;

  PetscFunctionBegin;
  PetscCall(PetscMalloc1(ps->room + 1, &row));
  for (int i = 0; i < n; i++) {
    int64_t      pos = r ? r->ppos[i] : p->ppos[i];
    const char **a = r ? &r->answer[i] : &p->answer[i], **meta = r ? &r->meta[i] : &p->meta[i];
    int64_t     *pidx = r ? &r->pidx[i] : &p->pidx[i];
    PetscCall(prompts_at(ps, o, pos, row, &len, abuf + (size_t)i * PPO_ANSWER_LEN, a, meta, pidx));
  }
  PetscCall(PetscFree(row));
  PetscFunctionReturn(PETSC_SUCCESS);
}
