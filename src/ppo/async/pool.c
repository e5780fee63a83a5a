/* Partial rollouts (-async_partial S, docs/async.md): a sample still running
 * when its iteration's token budget ends goes on in the next iteration's
 * generation with the newer weights, so a batch no longer waits for its
 * longest response. The pool (AsyncPool, async.h) holds the samples in
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
#include "async.h"
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
  PetscCall(PetscCalloc5(cap, &p->ppos, cap, &p->pidx, cap, &p->answer, cap, &p->meta, (size_t)cap * PPO_ANSWER_LEN,
                         &p->abuf));
  PetscCall(PetscCalloc2(cap, &p->req, cap, &p->row));
  if (gen_masked(&o->gen))
    PetscCall(PetscCalloc4((size_t)cap * T, &p->mcnt, cap, &p->mids, cap, &p->mlen, cap, &p->mroom));
  PetscCall(gen_batch_create(cap, T, gen_masked(&o->gen), &p->res));
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
  if (p->mcnt)
    for (int i = 0; i < p->cap; i++) PetscCall(PetscFree(p->mids[i]));
  PetscCall(PetscFree4(p->mcnt, p->mids, p->mlen, p->mroom));
  PetscCall(gen_batch_destroy(&p->res));
  PetscCall(PetscMemzero(p, sizeof *p));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Room for n more ids in row i's allowed sets. */
static PetscErrorCode pool_mask_room(AsyncPool *p, int i, size_t n)
{
  PetscFunctionBegin;
  if (p->mlen[i] + n > p->mroom[i]) {
    p->mroom[i] = 2 * (p->mlen[i] + n) + 64;
    PetscCall(PetscRealloc(p->mroom[i] * sizeof(int), &p->mids[i]));
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Row i's allowed sets at positions [t0, t1) appended from batch row k of
 * g (positions after the row's own: its ids stay in position order). */
static PetscErrorCode pool_mask_append(AsyncPool *p, int i, const GenBatch *g, int k, int t0, int t1)
{
  size_t T = (size_t)p->T, b = (size_t)k * g->Tmax, n = (size_t)(g->mask_off[b + t1] - g->mask_off[b + t0]);

  PetscFunctionBegin;
  PetscCall(pool_mask_room(p, i, n));
  PetscCall(PetscArraycpy(p->mids[i] + p->mlen[i], g->mask_ids + g->mask_off[b + t0], n));
  for (int t = t0; t < t1; t++) p->mcnt[i * T + t] = g->mask_off[b + t + 1] - g->mask_off[b + t];
  p->mlen[i] += n;
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Pool row `from` copied to row `to`. */
static PetscErrorCode pool_copy(AsyncPool *p, int from, int to)
{
  size_t T = (size_t)p->T;

  PetscFunctionBegin;
  if (from == to) PetscFunctionReturn(PETSC_SUCCESS);
  if (p->mcnt) {
    memmove(p->mcnt + to * T, p->mcnt + from * T, T * sizeof(int));
    p->mlen[to] = 0;
    PetscCall(pool_mask_room(p, to, p->mlen[from]));
    PetscCall(PetscArraycpy(p->mids[to], p->mids[from], p->mlen[from]));
    p->mlen[to] = p->mlen[from];
  }
  memmove(p->tokens + to * T, p->tokens + from * T, T * sizeof(int));
  memmove(p->tver + to * T, p->tver + from * T, T * sizeof(int));
  memmove(p->logprobs + to * T, p->logprobs + from * T, T * sizeof(float));
  p->prompt_len[to] = p->prompt_len[from], p->len[to] = p->len[from], p->eos[to] = p->eos[from],
  p->done[to] = p->done[from];
  p->ppos[to] = p->ppos[from], p->pidx[to] = p->pidx[from], p->meta[to] = p->meta[from];
  p->answer[to] = async_keep_answer(p->answer[from], p->abuf, (size_t)p->cap * PPO_ANSWER_LEN,
                                    p->abuf + (size_t)to * PPO_ANSWER_LEN);
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Sets pool row i to the prompt at stream position pos (nothing drawn yet).
 * The source writes a whole demonstration (ps->room tokens, prompt and
 * answer), which may be longer than a row: it goes to a scratch row and
 * the prompt alone is copied. */
static PetscErrorCode pool_set_prompt(AsyncPool *p, PromptSource *ps, const PPOOptions *o, int i, int64_t pos)
{
  size_t         T = (size_t)p->T;
  int            len, *row;
  PetscErrorCode ierr;

  PetscFunctionBegin;
  PetscCall(PetscArrayzero(p->tokens + i * T, T));
  PetscCall(PetscArrayzero(p->tver + i * T, T));
  PetscCall(PetscArrayzero(p->logprobs + i * T, T));
  if (p->mcnt) {
    PetscCall(PetscArrayzero(p->mcnt + i * T, T));
    p->mlen[i] = 0;
  }
  PetscCall(PetscMalloc1(ps->room + 1, &row));
  ierr = prompts_at(ps, o, pos, row, &len, p->abuf + (size_t)i * PPO_ANSWER_LEN, &p->answer[i], &p->meta[i],
                    &p->pidx[i]);
  if (!ierr && len <= p->T) ierr = PetscArraycpy(p->tokens + i * T, row, len);
  PetscCall(PetscFree(row));
  PetscCall(ierr);
  PetscCheck(len <= p->T, PETSC_COMM_SELF, PETSC_ERR_PLIB, "partial rollouts: a prompt of %d tokens in %d positions",
             len, p->T);
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
    for (int j = 1; j < p->G; j++) PetscCall(pool_copy(p, p->n, p->n + j)); /* the group's samples share the prompt */
    p->n += p->G;
    (*data_pos)++;
  }
  pool_requests(p);
  r->async.batch      = batch;
  r->dyn.rounds = 1;
  r->off.on = r->scored = PETSC_FALSE;
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
    p->req[p->nreq]   = (GenRequest){ (int)((p->ppos[i] * p->G + i % p->G) & 0x7fffffff), p->tokens + (size_t)i * p->T,
                                      p->prompt_len[i] + p->len[i], p->len[i], p->S };
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

/* Step 2's allowed sets after step 1's: out's row at2[j] gets more's row j
 * at its positions (after the row's own), and out's offsets are rebuilt in
 * (row, position) order. */
static PetscErrorCode splice_masks(GenBatch *out, const GenBatch *more, const int *at2, int n2)
{
  size_t T = (size_t)out->Tmax, n = (size_t)out->n * T, cur = 0,
         total = (size_t)out->mask_off[n] + (size_t)more->mask_off[(size_t)n2 * T];
  int   *from, *off, *ids;

  PetscFunctionBegin;
  PetscCheck(total <= (size_t)PETSC_MAX_INT, PETSC_COMM_SELF, PETSC_ERR_SUP,
             "partial rollouts: more than %d allowed-set ids overflow GenBatch.mask_off", PETSC_MAX_INT);
  PetscCall(PetscMalloc3(out->n + 1, &from, n + 1, &off, total + 1, &ids));
  for (int k = 0; k < out->n; k++) from[k] = -1;
  for (int j = 0; j < n2; j++) from[at2[j]] = j;
  for (int k = 0; k < out->n; k++)
    for (size_t t = 0; t < T; t++) {
      size_t a = k * T + t, o0 = (size_t)out->mask_off[a], o1 = (size_t)out->mask_off[a + 1];
      off[a] = (int)cur;
      PetscCall(PetscArraycpy(ids + cur, out->mask_ids + o0, o1 - o0));
      cur += o1 - o0;
      if (from[k] >= 0) { /* more's positions are past the row's own, where out's sets are empty */
        size_t m = (size_t)from[k] * T + t, m0 = (size_t)more->mask_off[m], m1 = (size_t)more->mask_off[m + 1];
        PetscCall(PetscArraycpy(ids + cur, more->mask_ids + m0, m1 - m0));
        cur += m1 - m0;
      }
    }
  off[n] = (int)cur;
  PetscCall(PetscArraycpy(out->mask_off, off, n + 1));
  if (cur > out->mask_cap) {
    out->mask_cap = cur;
    PetscCall(PetscRealloc(out->mask_cap * sizeof(int), &out->mask_ids));
  }
  PetscCall(PetscArraycpy(out->mask_ids, ids, cur));
  PetscCall(PetscFree3(from, off, ids));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode async_pool_generate(AsyncPool *p, DModel *policy, const PPOOptions *o, int max_prompt, uint64_t seed,
                                   uint32_t key, GenPart *part)
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
  if (part->own) PetscCall(gen_batch_create(part->b1 - part->b0, T, gen_masked(&o->gen), &part->b));
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
  PetscCallMPI(sys_mpi_allreduce(MPI_IN_PLACE, ended, p->nreq, MPI_INT, MPI_MAX, m->all.mpi));
  PetscCall(pool_force(p, (int)(o->rollout_batch / p->G), ended, force));
  for (int i = part->b0; i < part->b1; i++) {
    int k = i - part->b0;
    if (!force[i]) continue;
    req2[n2]  = (GenRequest){ p->req[i].id, out->tokens + (size_t)k * T, out->prompt_len[k] + out->response_len[k],
                              p->req[i].resumed + out->response_len[k], 0 };
    at2[n2++] = k;
  }
  if (n2) {
    PetscCall(gen_batch_create(n2, T, gen_masked(&o->gen), &more));
    PetscCall(gen_generate(eng, seed, key, n2, req2, &more, NULL, NULL));
    if (out->mask_off) PetscCall(splice_masks(out, &more, at2, n2));
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

/* Pool row i's allowed sets into batch row b of g, rows taken in order
 * (*nid: the ids of rows 0..b-1). */
static PetscErrorCode take_masks(const AsyncPool *p, int i, GenBatch *g, int b, size_t *nid)
{
  size_t T = (size_t)p->T, at = 0;

  PetscFunctionBegin;
  PetscCheck(*nid + p->mlen[i] <= (size_t)PETSC_MAX_INT, PETSC_COMM_SELF, PETSC_ERR_SUP,
             "partial rollouts: more than %d allowed-set ids overflow GenBatch.mask_off", PETSC_MAX_INT);
  if (*nid + p->mlen[i] > g->mask_cap) {
    g->mask_cap = 2 * (*nid + p->mlen[i]) + 1024;
    PetscCall(PetscRealloc(g->mask_cap * sizeof(int), &g->mask_ids));
  }
  PetscCall(PetscArraycpy(g->mask_ids + *nid, p->mids[i], p->mlen[i]));
  for (size_t t = 0; t < T; t++) {
    g->mask_off[b * T + t] = (int)(*nid + at);
    at += (size_t)p->mcnt[i * T + t];
  }
  *nid += p->mlen[i];
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* The call's results (p->res, every request's) merged into the pool, then
 * the batch taken out into its slot. */
static PetscErrorCode pool_merge_take(AsyncQueue *q, const PPOOptions *o, int version, Rollout *slot)
{
  AsyncPool *p = &q->pool;
  GenBatch  *g = &p->res, *sg = &slot->gen;
  size_t     T = (size_t)p->T;
  int groups = (int)(o->rollout_batch / p->G), taken = 0, kept = 0, s = (int)(slot->async.batch % q->n), B = slot->Bcap;
  char      *sabuf = q->abuf + (size_t)s * B * PPO_ANSWER_LEN;
  size_t     nid   = 0; /* allowed-set ids of the batch's rows so far */

  PetscFunctionBegin;
  PetscCheck(!p->mcnt == !sg->mask_off, PETSC_COMM_SELF, PETSC_ERR_PLIB,
             "partial rollouts: the pool %s allowed sets and the batch %s", p->mcnt ? "keeps" : "keeps no",
             sg->mask_off ? "has room for them" : "none");
  p->made = 0;
  for (int k = 0; k < p->nreq; k++) { /* each request's new tokens after the row's draws so far */
    int i = p->row[k], P = g->prompt_len[k], L = g->response_len[k];
    PetscCheck(P == p->prompt_len[i] + p->len[i] && P + L <= p->T, PETSC_COMM_SELF, PETSC_ERR_PLIB,
               "partial rollouts: request %d of row %d came back at position %d with %d tokens", k, i, P, L);
    PetscCall(PetscArraycpy(p->tokens + i * T + P, g->tokens + k * T + P, L));
    PetscCall(PetscArraycpy(p->logprobs + i * T + P, g->logprobs + k * T + P, L));
    for (int t = P; t < P + L; t++) p->tver[i * T + t] = version;
    if (p->mcnt) PetscCall(pool_mask_append(p, i, g, k, P, P + L));
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
        PetscCall(PetscArraycpy(slot->async.tver + b * T, p->tver + i * T, T));
        for (int t = P; t < P + p->len[i]; t++) vmin = PetscMin(vmin, p->tver[i * T + t]);
        sg->prompt_len[b] = P, sg->response_len[b] = p->len[i], sg->eos[b] = p->eos[i];
        if (p->mcnt) PetscCall(take_masks(p, i, sg, b, &nid));
        slot->async.version[b] = vmin, slot->async.ppos[b] = p->ppos[i], slot->pidx[b] = p->pidx[i],
        slot->meta[b]   = p->meta[i];
        slot->answer[b] = async_keep_answer(p->answer[i], p->abuf, (size_t)p->cap * PPO_ANSWER_LEN,
                                            sabuf + (size_t)b * PPO_ANSWER_LEN);
      } else PetscCall(pool_copy(p, i, kept++));
    }
    if (all && taken < groups) taken++;
  }
  PetscCheck(taken == groups, PETSC_COMM_SELF, PETSC_ERR_PLIB, "partial rollouts: %d groups ended of the %d of a batch",
             taken, groups);
  if (p->mcnt) sg->mask_off[(size_t)taken * p->G * T] = (int)nid; /* the end of the batch's last row */
  p->n           = kept;
  slot->B        = sg->n = slot->Bcap;
  sg->new_tokens = p->made;
  PetscCall(rollout_finish_gen(slot));
  q->ready[s] = PETSC_TRUE;
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* The call's allowed sets from every replica (rows dsp[d] .. dsp[d] +
 * cnt[d] of replica d, rank d of the generation mesh) into g: the counts
 * per position, then the ids. A replica that generated straight into g
 * (part->own false) reads its own rows there. */
static PetscErrorCode gather_masks(const Mesh *m, const GenPart *part, const int *cnt, const int *dsp, GenBatch *g)
{
  const GenBatch *src = part->own ? &part->b : g;
  size_t          T = (size_t)g->Tmax, r0 = part->own ? 0 : (size_t)part->b0, nloc = (size_t)(part->b1 - part->b0),
         n           = (size_t)g->n * T;
  size_t          i0 = (size_t)src->mask_off[r0 * T], nli = (size_t)src->mask_off[(r0 + nloc) * T] - i0;
  int            *lc, *li, *ccnt, *cdsp, *icnt, *idsp;

  PetscFunctionBegin;
  PetscCall(PetscMalloc2(nloc * T + 1, &lc, nli + 1, &li));
  for (size_t k = 0; k < nloc * T; k++) lc[k] = src->mask_off[r0 * T + k + 1] - src->mask_off[r0 * T + k];
  PetscCall(PetscArraycpy(li, src->mask_ids + i0, nli));
  PetscCall(PetscMalloc4(m->dp, &ccnt, m->dp, &cdsp, m->dp, &icnt, m->dp, &idsp));
  for (int d = 0; d < m->dp; d++) ccnt[d] = cnt[d] * (int)T, cdsp[d] = dsp[d] * (int)T;
  PetscCallMPI(sys_mpi_allgatherv(lc, (int)(nloc * T), MPI_INT, g->mask_off + 1, ccnt, cdsp, MPI_INT, m->all.mpi));
  g->mask_off[0] = 0;
  for (size_t k = 0; k < n; k++) g->mask_off[k + 1] += g->mask_off[k];
  for (int d = 0; d < m->dp; d++) {
    idsp[d] = g->mask_off[(size_t)dsp[d] * T];
    icnt[d] = g->mask_off[(size_t)(dsp[d] + cnt[d]) * T] - idsp[d];
  }
  if ((size_t)g->mask_off[n] > g->mask_cap) {
    g->mask_cap = (size_t)g->mask_off[n] + 1;
    PetscCall(PetscRealloc(g->mask_cap * sizeof(int), &g->mask_ids));
  }
  PetscCallMPI(sys_mpi_allgatherv(li, (int)nli, MPI_INT, g->mask_ids, icnt, idsp, MPI_INT, m->all.mpi));
  PetscCall(PetscFree4(ccnt, cdsp, icnt, idsp));
  PetscCall(PetscFree2(lc, li));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode async_pool_take_early(AsyncQueue *q, const Mesh *m, const PPOOptions *o, GenPart *part, int version,
                                     Rollout *slot)
{
  AsyncPool *p = &q->pool;
  GenBatch  *g = &p->res;
  int        T = p->T, *cnt, *dsp;

  PetscFunctionBegin;
  PetscCheck(m->tp == 1 && m->pp == 1, PETSC_COMM_SELF, PETSC_ERR_PLIB,
             "partial rollouts: the batch taken with the generation needs one rank a replica");
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
  if (g->mask_off) PetscCall(gather_masks(m, part, cnt, dsp, g)); /* before the rows' counts become elements' below */
  if (m->dp > 1) {
    PetscCallMPI(sys_mpi_allgatherv(MPI_IN_PLACE, 0, MPI_INT, g->prompt_len, cnt, dsp, MPI_INT, m->all.mpi));
    PetscCallMPI(sys_mpi_allgatherv(MPI_IN_PLACE, 0, MPI_INT, g->response_len, cnt, dsp, MPI_INT, m->all.mpi));
    PetscCallMPI(sys_mpi_allgatherv(MPI_IN_PLACE, 0, MPI_INT, g->eos, cnt, dsp, MPI_INT, m->all.mpi));
    for (int d = 0; d < m->dp; d++) cnt[d] *= T, dsp[d] *= T;
    PetscCallMPI(sys_mpi_allgatherv(MPI_IN_PLACE, 0, MPI_INT, g->tokens, cnt, dsp, MPI_INT, m->all.mpi));
    PetscCallMPI(sys_mpi_allgatherv(MPI_IN_PLACE, 0, MPI_FLOAT, g->logprobs, cnt, dsp, MPI_FLOAT, m->all.mpi));
  }
  PetscCall(PetscFree2(cnt, dsp));
  PetscCall(pool_merge_take(q, o, version, slot));
  p->taken = PETSC_TRUE;
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode async_pool_share(AsyncQueue *q, const Mesh *m, const PPOOptions *o, GenPart *part, int version,
                                Rollout *slot)
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
  char      *abuf = r ? q->abuf + (size_t)(r->async.batch % q->n) * r->Bcap * PPO_ANSWER_LEN : p->abuf;

  PetscFunctionBegin;
  PetscCall(PetscMalloc1(ps->room + 1, &row));
  for (int i = 0; i < n; i++) {
    int64_t      pos = r ? r->async.ppos[i] : p->ppos[i];
    const char **a = r ? &r->answer[i] : &p->answer[i], **meta = r ? &r->meta[i] : &p->meta[i];
    int64_t     *pidx = r ? &r->pidx[i] : &p->pidx[i];
    PetscCall(prompts_at(ps, o, pos, row, &len, abuf + (size_t)i * PPO_ANSWER_LEN, a, meta, pidx));
  }
  PetscCall(PetscFree(row));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode async_pool_masks_pack(const AsyncPool *p, int **ids, size_t *total)
{
  size_t at = 0;

  PetscFunctionBegin;
  *total = 0;
  for (int i = 0; i < p->n; i++) *total += p->mlen[i];
  PetscCall(PetscMalloc1(*total + 1, ids));
  (*ids)[*total] = 0; /* written as the one id of an empty list */
  for (int i = 0; i < p->n; i++) {
    PetscCall(PetscArraycpy(*ids + at, p->mids[i], p->mlen[i]));
    at += p->mlen[i];
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode async_pool_masks_unpack(AsyncPool *p, const int *ids, size_t total)
{
  size_t T = (size_t)p->T, at = 0;

  PetscFunctionBegin;
  for (int i = 0; i < p->n; i++) {
    size_t len = 0;
    for (size_t t = 0; t < T; t++) {
      PetscCheck(p->mcnt[i * T + t] >= 0, PETSC_COMM_SELF, PETSC_ERR_FILE_UNEXPECTED,
                 "partial rollouts: allowed-set count %d at row %d position %zu is negative", p->mcnt[i * T + t], i, t);
      len += (size_t)p->mcnt[i * T + t];
    }
    PetscCheck(at + len <= total, PETSC_COMM_SELF, PETSC_ERR_FILE_UNEXPECTED,
               "partial rollouts: the allowed-set counts need more than the %zu ids held", total);
    p->mlen[i] = 0;
    PetscCall(pool_mask_room(p, i, len));
    PetscCall(PetscArraycpy(p->mids[i], ids + at, len));
    p->mlen[i] = len;
    at += len;
  }
  PetscCheck(at == total, PETSC_COMM_SELF, PETSC_ERR_FILE_UNEXPECTED,
             "partial rollouts: %zu allowed-set ids held, the counts name %zu", total, at);
  PetscFunctionReturn(PETSC_SUCCESS);
}
