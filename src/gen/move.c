/* gen/move.c: an unfinished sample's state out of one engine and into
 * another of the same layout (migration of the long tail, docs/fusion.md).
 * A state is a run of 4-byte words:
 *   request, response tokens so far L, running (0/1), allowed-set ids n,
 *   tokens [L], log-probabilities [L] (float bits), allowed-set counts [L],
 *   ids [n], and when running the cache shard of positions 0..P+L-2
 *   (model_kv_get's layout, float bits).
 * A running sample always has L >= 1 here: the engine steps right after it
 * admits, and the hook that moves samples runs between steps. */
#include "gen_impl.h"
#include <string.h>

enum { W_REQ, W_LEN, W_RUN, W_NIDS, W_HEAD };

static int slot_of(const GenEngine *e, int idx)
{
  for (int s = 0; s < e->nslot; s++)
    if (e->slot_req[s] == idx) return s;
  return -1;
}

int gen_engine_unfinished(const GenEngine *e, const GenBatch *b, int *idx, int *kvlen)
{
  int n = 0;
  for (int s = 0; s < e->nslot; s++)
    if (e->slot_req[s] >= 0) {
      int i = e->slot_req[s];
      idx[n]     = i;
      kvlen[n++] = b->prompt_len[i] + b->response_len[i] - 1;
    }
  for (int j = e->qhead; j < e->qn; j++) idx[n] = e->queue[j], kvlen[n++] = 0;
  return n;
}

static size_t state_nids(const GenEngine *e, const GenBatch *b, int idx)
{
  size_t n = 0, base = (size_t)idx * b->Tmax;
  if (!b->mask_off) return 0;
  for (int t = b->prompt_len[idx]; t < b->prompt_len[idx] + b->response_len[idx]; t++) n += (size_t)e->mcount[base + t];
  return n;
}

size_t gen_engine_state_words(const GenEngine *e, const GenBatch *b, int idx)
{
  int    L = b->response_len[idx], s = slot_of(e, idx);
  size_t w = W_HEAD + 3 * (size_t)L + state_nids(e, b, idx);
  if (s >= 0) w += model_kv_floats(e->kv, b->prompt_len[idx] + L - 1);
  return w;
}

PetscErrorCode gen_engine_take(GenEngine *e, const GenBatch *b, int idx, int *w)
{
  int    s = slot_of(e, idx), P = b->prompt_len[idx], L = b->response_len[idx];
  size_t base = (size_t)idx * b->Tmax, nids = state_nids(e, b, idx), at;
  int   *cnt = w + W_HEAD + 2 * L, *ids = cnt + L;

  PetscFunctionBegin;
  w[W_REQ] = idx, w[W_LEN] = L, w[W_RUN] = s >= 0, w[W_NIDS] = (int)nids;
  memcpy(w + W_HEAD, b->tokens + base + P, (size_t)L * sizeof(int));
  memcpy(w + W_HEAD + L, b->logprobs + base + P, (size_t)L * sizeof(float));
  at = 0;
  for (int t = 0; t < L; t++) {
    cnt[t] = b->mask_off ? e->mcount[base + P + t] : 0;
    if (cnt[t]) memcpy(ids + at, e->pool + e->mstart[base + P + t], (size_t)cnt[t] * sizeof(int));
    at += (size_t)cnt[t];
  }
  if (s >= 0) {
    PetscCall(model_kv_get(e->lm, e->kv, s, P + L - 1, (float *)(ids + nids)));
    e->slot_req[s] = -1;
  } else { /* out of the queue, the order of the rest kept */
    int j = e->qhead, k;
    while (j < e->qn && e->queue[j] != idx) j++;
    PetscCheck(j < e->qn, PETSC_COMM_SELF, PETSC_ERR_ARG_WRONG,
               "gen_engine_take: request %d is neither running nor waiting in this engine", idx);
    for (k = j; k + 1 < e->qn; k++) e->queue[k] = e->queue[k + 1];
    e->qn--;
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode gen_engine_give(GenEngine *e, GenBatch *b, const int *w, size_t *words)
{
  int        idx = w[W_REQ], L = w[W_LEN], P, s = -1;
  size_t     base, nids = (size_t)w[W_NIDS];
  const int *cnt = w + W_HEAD + 2 * L, *ids = cnt + L;

  PetscFunctionBegin;
  PetscCheck(idx >= 0 && idx < b->n && L >= 0 && L <= (int)e->cfg.max_new_tokens, PETSC_COMM_SELF, PETSC_ERR_PLIB,
             "gen_engine_give: malformed state (request %d, %d tokens)", idx, L);
  P    = b->prompt_len[idx];
  base = (size_t)idx * b->Tmax;
  memcpy(b->tokens + base + P, w + W_HEAD, (size_t)L * sizeof(int));
  memcpy(b->logprobs + base + P, w + W_HEAD + L, (size_t)L * sizeof(float));
  memset(b->src + base + P, GEN_SRC_MODEL, (size_t)L);
  b->response_len[idx] = L;
  b->eos[idx]          = 0;
  if (b->mask_off)
    for (int t = 0, at = 0; t < L; at += cnt[t], t++) PetscCall(gen_mask_record(e, base + P + t, ids + at, cnt[t]));
  *words = W_HEAD + 3 * (size_t)L + nids;
  if (w[W_RUN]) {
    for (s = 0; s < e->nslot && e->slot_req[s] >= 0; s++);
    PetscCheck(s < e->nslot && L >= 1, PETSC_COMM_SELF, PETSC_ERR_PLIB,
               "gen_engine_give: no free slot for running request %d (%d slots)", idx, e->nslot);
    PetscCall(model_kv_put(e->lm, e->kv, s, P + L - 1, (const float *)(ids + nids)));
    e->slot_req[s]   = idx;
    e->slot_fresh[s] = 0;
    e->slot_kv[s]    = P + L - 1;
    e->slot_seg[s]   = P;
    e->slot_wait[s]  = -1;
    *words += model_kv_floats(e->kv, P + L - 1);
  } else {
    PetscCheck(e->qn < e->qcap, PETSC_COMM_SELF, PETSC_ERR_PLIB, "gen_engine_give: the queue is full");
    e->queue[e->qn++] = idx;
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}
