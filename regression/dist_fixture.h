/* dist_fixture.h: what the MPI model tests (test_dist, test_sched) share
 * beside test_report.h (results agreed over all ranks, printed by rank 0):
 * their world rank and size, a relative error, a random batch with masks, and the gather of a shard buffer into the
 * full layout. Included by one test program each. */
#ifndef RLFUSE_DIST_FIXTURE_H
#define RLFUSE_DIST_FIXTURE_H

#include <math.h>

#include "model.h"
#include "sys.h"

#include "test_report.h"

static int world_rank, world_size; /* set in main */

/* max |a-b| / (max |b| + tiny) over n */
static double rel_err(const float *a, const float *b, size_t n)
{
  double e = 0, s = 1e-30;
  for (size_t i = 0; i < n; i++) {
    e = PetscMax(e, fabs((double)a[i] - b[i]));
    s = PetscMax(s, fabs((double)b[i]));
  }
  return e / s;
}

typedef struct {
  int B, T, N;
  int *tok, *target, *mask_off, *mask_ids;
  float *dlp;
} Batch;

/* Random tokens; targets on most rows; a top-k-like mask of 1..V/2 ids on
 * every third row (always containing the target). */
static PetscErrorCode batch_create(const ModelConfig *c, int B, int T, uint32_t seed, Batch *b)
{
  int V = c->vocab_size, nid = 0;

  PetscFunctionBegin;
  b->B = B, b->T = T, b->N = B * T;
  PetscCall(PetscMalloc5(b->N, &b->tok, b->N, &b->target, b->N + 1, &b->mask_off, (size_t)b->N * V, &b->mask_ids, b->N, &b->dlp));
  for (int n = 0; n < b->N; n++) {
    b->tok[n]      = (int)(rng_uniform(seed, 1, 0, (uint32_t)n, 0) * V) % V;
    b->target[n]   = n % 5 == 4 ? -1 : (int)(rng_uniform(seed, 2, 0, (uint32_t)n, 0) * V) % V;
    b->dlp[n]      = rng_normal(seed, 3, 0, (uint32_t)n, 0);
    b->mask_off[n] = nid;
    if (n % 3 == 0 && b->target[n] >= 0) {
      int k = 1 + n % (V / 2);
      for (int j = 0; j < k; j++) b->mask_ids[nid++] = (b->target[n] + 5 * j) % V; /* 5 is prime to V = 24: no repeats */
    }
  }
  b->mask_off[b->N] = nid;
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode batch_destroy(Batch *b)
{
  PetscFunctionBegin;
  PetscCall(PetscFree5(b->tok, b->target, b->mask_off, b->mask_ids, b->dlp));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* The shard's buffer (params or grads) in the full layout, gathered to every
 * rank by summing each (p, t)'s pieces from dp replica 0 over the world. */
static PetscErrorCode gather_full(const Model *full, const Model *g, const Mesh *m, const float *flat, float *out)
{
  PetscFunctionBegin;
  PetscCall(PetscArrayzero(out, full->nparams));
  if (m->me >= 0 && m->d == 0) {
    ModelShard sh = g->sh;
    float   *tmp;
    PetscCall(PetscCalloc1(full->nparams, &tmp));
    PetscCall(model_shard_insert(&g->cfg, &sh, flat, tmp));
    /* replicated tensors are held by every tp rank and wte by two stages: count once */
    for (int i = 0; i < full->ntensors; i++) {
      PetscBool keep = g->tensors[i].numel && (g->tensors[i].split >= 0 || g->sh.t == 0) && !(i == 0 && g->sh.p > 0 && g->sh.pp > 1);
      if (!keep) PetscCall(PetscArrayzero(tmp + full->tensors[i].offset, full->tensors[i].numel));
    }
    PetscCall(PetscArraycpy(out, tmp, full->nparams));
    PetscCall(PetscFree(tmp));
  }
  PetscCallMPI(MPI_Allreduce(MPI_IN_PLACE, out, (int)full->nparams, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD));
  PetscFunctionReturn(PETSC_SUCCESS);
}


#endif
