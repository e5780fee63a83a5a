/* DAPO's dynamic sampling (-ppo_dynamic_sampling F, -ppo_dynamic_rounds R):
 * each round generates F x -rollout_batch candidates (groups of k
 * consecutive rows) for prompts the earlier rounds did not use, computes
 * their rewards, and keeps the groups whose rewards are not all equal until
 * the batch has -rollout_batch / k of them; when the last round still leaves
 * it short, that round's first groups of equal rewards fill it. The kept
 * groups wait in a store of B rows between rounds and come back to rows
 * 0..B-1 of the rollout in the order they were kept (within a round: the
 * candidates' order, fill groups among them). Every rank makes the same
 * choices on its copy of the rollout, so the batch does not depend on the
 * layout. */
#include "base.h"
#include <string.h>

/* Row src of rollout s into row dst of rollout d (another one); the
 * allowed sets' ids go to d's ids from *nid on, which grow as needed. */
static PetscErrorCode row_copy(const Rollout *s, int src, Rollout *d, int dst, int *nid)
{
  const GenBatch *g = &s->gen;
  GenBatch       *h = &d->gen;
  size_t          T = (size_t)s->T;

  PetscFunctionBegin;
  if (g->mask_off) {
    int k0 = g->mask_off[(size_t)src * T], k1 = g->mask_off[(size_t)(src + 1) * T], base = *nid;
    if ((size_t)(base + k1 - k0) > h->mask_cap) {
      h->mask_cap = 2 * (size_t)(base + k1 - k0);
      PetscCall(PetscRealloc(h->mask_cap * sizeof(int), &h->mask_ids));
    }
    memcpy(h->mask_ids + base, g->mask_ids + k0, (size_t)(k1 - k0) * sizeof(int));
    for (size_t t = 0; t <= T; t++) h->mask_off[(size_t)dst * T + t] = g->mask_off[(size_t)src * T + t] - k0 + base;
    *nid = base + (k1 - k0);
  }
  memcpy(h->tokens + (size_t)dst * T, g->tokens + (size_t)src * T, T * sizeof(int));
  memcpy(h->logprobs + (size_t)dst * T, g->logprobs + (size_t)src * T, T * sizeof(float));
  if (g->src && h->src) memcpy(h->src + (size_t)dst * T, g->src + (size_t)src * T, T); /* episodes' sources */
  h->prompt_len[dst] = g->prompt_len[src], h->response_len[dst] = g->response_len[src], h->eos[dst] = g->eos[src];
  h->turns[dst] = g->turns[src], h->obs_cut[dst] = g->obs_cut[src];
  d->env.reward[dst] = s->env.reward[src], d->env.seconds[dst] = s->env.seconds[src];
  d->env.calls[dst]  = s->env.calls[src];
  memcpy(d->env.at + (size_t)dst * T, s->env.at + (size_t)src * T, T * sizeof(float));
  d->start[dst] = s->start[src], d->len[dst] = s->len[src];
  d->score[dst] = s->score[src], d->final[dst] = s->final[src], d->gold[dst] = s->gold[src],
  d->rule[dst] = s->rule[src];
  memcpy(d->parts + (size_t)dst * PPO_REWARD_PARTS, s->parts + (size_t)src * PPO_REWARD_PARTS,
         PPO_REWARD_PARTS * sizeof(float));
  if (d->answer) d->answer[dst] = s->answer ? s->answer[src] : NULL;
  if (d->meta) d->meta[dst] = s->meta ? s->meta[src] : NULL;
  if (d->pidx) d->pidx[dst] = s->pidx ? s->pidx[src] : -1;
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode dynamic_begin(const Rollout *r, int B, DynamicStore *ds)
{
  PetscFunctionBegin;
  PetscCall(PetscMemzero(ds, sizeof *ds));
  PetscCall(rollout_create(B, r->T, r->gen.mask_off ? PETSC_TRUE : PETSC_FALSE, &ds->r));
  ds->r.episodes = r->episodes;
  PetscCall(PetscCalloc3(B, &ds->r.answer, B, &ds->r.meta, B,
                         &ds->r.pidx)); /* the store's own: a rollout's are its caller's */
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode dynamic_take(DynamicStore *ds, Rollout *cand, int G, int k, PetscBool last)
{
  int  ncand = cand->B / k, need = G - ds->groups, take = 0;
  char pick[ncand > 0 ? ncand : 1];

  PetscFunctionBegin;
  ds->k = k;
  for (int q = 0; q < ncand; q++) {
    float lo = cand->final[q * k], hi = lo;
    for (int j = 1; j < k; j++) lo = PetscMin(lo, cand->final[q * k + j]), hi = PetscMax(hi, cand->final[q * k + j]);
    ds->kept += hi > lo;
    pick[q] = (char)(hi > lo && take < need);
    take += pick[q];
  }
  for (int q = 0; last && q < ncand && take < need;
       q++) /* the last round: its first groups of equal rewards fill the batch */
    if (!pick[q]) pick[q] = 1, take++, ds->filled++;
  for (int q = 0; q < ncand; q++) {
    if (!pick[q]) continue;
    for (int j = 0; j < k; j++) PetscCall(row_copy(cand, q * k + j, &ds->r, ds->groups * k + j, &ds->nid));
    ds->groups++;
  }
  ds->rounds++;
  ds->new_tokens += cand->gen.new_tokens;
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode dynamic_finish(DynamicStore *ds, Rollout *r, int B)
{
  int nid = 0;

  PetscFunctionBegin;
  PetscCheck(ds->groups * ds->k == B, PETSC_COMM_SELF, PETSC_ERR_PLIB,
             "dynamic sampling: %d groups of %d kept for a batch of %d", ds->groups, ds->k, B);
  for (int b = 0; b < B; b++) PetscCall(row_copy(&ds->r, b, r, b, &nid));
  if (r->gen.mask_off) r->gen.mask_off[(size_t)B * r->T] = nid;
  r->B = r->gen.n = B;
  r->gen.new_tokens = ds->new_tokens;
  r->dyn.kept = ds->kept, r->dyn.filled = ds->filled, r->dyn.rounds = ds->rounds;
  PetscCall(PetscFree3(ds->r.answer, ds->r.meta, ds->r.pidx));
  PetscCall(rollout_destroy(&ds->r));
  PetscFunctionReturn(PETSC_SUCCESS);
}
