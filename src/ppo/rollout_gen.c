/* Generation as a model function call: each dp replica of the generating
 * placement decodes its rows of the rollout (sample ids stay the row
 * numbers, so every draw is the one a single rank makes), then the replica
 * heads hand their rows, allowed sets included, to every rank. */
#include "base.h"
#include <string.h>

PetscErrorCode rollout_finish_gen(Rollout *r)
{
  PetscFunctionBegin;
  for (int b = 0; b < r->B; b++) {
    r->start[b] = r->gen.prompt_len[b];
    r->len[b]   = r->gen.response_len[b];
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode rollout_generate_part(DModel *policy, const GenConfig *gen, int max_prompt, uint64_t seed,
                                     uint32_t iteration, const GenRequest *req, Rollout *r, GenPart *part)
{
  PetscFunctionBegin;
  PetscCall(rollout_generate_part_cb(policy, gen, max_prompt, seed, iteration, req, r, part, NULL, NULL));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode rollout_generate_part_cb(DModel *policy, const GenConfig *gen, int max_prompt, uint64_t seed,
                                        uint32_t iteration, const GenRequest *req, Rollout *r, GenPart *part,
                                        GenFinishFn fn, void *ctx)
{
  const Mesh *m = policy->mesh;
  GenEngine  *eng;
  GenRun      run = {NULL, 0, fn, ctx, NULL, NULL, NULL};
  GenConfig   g   = r->envs ? ppo_episodes_gen(r->envs, gen) : *gen;

  PetscFunctionBegin;
  r->episodes = (PetscBool)(r->envs != NULL);
  if (!dmodel_member(policy)) PetscFunctionReturn(PETSC_SUCCESS);
  exec_rows(r->B, m->dp, m->d, &part->b0, &part->b1);
  part->own = (PetscBool)(part->b0 > 0 || part->b1 < r->B);
  if (part->own) PetscCall(gen_batch_create(part->b1 - part->b0, r->T, gen_masked(gen), &part->b));
  if (r->envs) /* each replica's rows talk to its environment, through the replica's head */
    PetscCall(ppo_episodes_begin(r->envs, m, seed, iteration, req + part->b0, r, part->b0, part->b1 - part->b0,
                                 &run.episode));
  PetscCall(gen_engine_create(policy->lm, &g, max_prompt, &eng));
  PetscCall(gen_generate_run(eng, seed, iteration, part->b1 - part->b0, req + part->b0,
                             part->own ? &part->b : &r->gen, &run));
  PetscCall(gen_engine_destroy(&eng));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* A replica's rows into the rollout's batch (heads only). */
static void part_copy_rows(const GenPart *part, GenBatch *g, int *count)
{
  const GenBatch *p = &part->b;
  size_t          T = (size_t)g->Tmax, at = (size_t)part->b0 * T;

  for (int i = 0; i < p->n; i++) {
    int b = part->b0 + i;
    g->prompt_len[b]   = p->prompt_len[i];
    g->response_len[b] = p->response_len[i];
    g->eos[b]          = p->eos[i];
    g->turns[b]        = p->turns[i];
    g->obs_cut[b]      = p->obs_cut[i];
  }
  memcpy(g->tokens + at, p->tokens, (size_t)p->n * T * sizeof(int));
  memcpy(g->src + at, p->src, (size_t)p->n * T);
  memcpy(g->logprobs + at, p->logprobs, (size_t)p->n * T * sizeof(float));
  if (p->mask_off && count)
    for (size_t k = 0; k < (size_t)p->n * T; k++) count[at + k] = p->mask_off[k + 1] - p->mask_off[k];
}

void rollout_part_local(const GenPart *part, Rollout *r)
{
  if (part->own) part_copy_rows(part, &r->gen, NULL);
  for (int b = part->b0; b < part->b1; b++) {
    r->start[b] = r->gen.prompt_len[b];
    r->len[b]   = r->gen.response_len[b];
  }
}

/* The allowed sets: per-position counts first, then the ids, packed by row. */
static PetscErrorCode share_masks(const Mesh *m, const GenPart *part, PetscBool head, int *count, GenBatch *g)
{
  size_t T = (size_t)g->Tmax, n = (size_t)g->n * T;
  int   *rows;

  PetscFunctionBegin;
  if (head && !part->own) /* the whole batch is this replica's: counts from its own offsets */
    for (size_t k = 0; k < n; k++) count[k] = g->mask_off[k + 1] - g->mask_off[k];
  PetscCall(exec_share_rows(m, g->n, T, MPI_INT, count));
  if (!(head && !part->own)) {
    g->mask_off[0] = 0;
    for (size_t k = 0; k < n; k++) g->mask_off[k + 1] = g->mask_off[k] + count[k];
  }
  if ((size_t)g->mask_off[n] > g->mask_cap) {
    g->mask_cap = (size_t)g->mask_off[n] + 1;
    PetscCall(PetscRealloc(g->mask_cap * sizeof(int), &g->mask_ids));
  }
  if (head && part->own)
    PetscCall(PetscArraycpy(g->mask_ids + g->mask_off[(size_t)part->b0 * T], part->b.mask_ids,
                            (size_t)part->b.mask_off[(size_t)part->b.n * T]));
  PetscCall(PetscMalloc1(g->n + 1, &rows));
  for (int b = 0; b < g->n; b++) rows[b] = g->mask_off[(size_t)(b + 1) * T] - g->mask_off[(size_t)b * T];
  PetscCall(exec_share_packed(m, g->n, rows, MPI_INT, g->mask_ids));
  PetscCall(PetscFree(rows));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* The engine's step timeline of replica 0, for the rollout record. */
static PetscErrorCode share_steps(const Mesh *m, GenBatch *g, const GenPart *part, PetscBool head)
{
  const GenBatch *src = (head && part->own) ? &part->b : g;
  int             root = exec_head(m, 0), me, n = src->nsteps;

  PetscFunctionBegin;
  PetscCallMPI(MPI_Comm_rank(MPI_COMM_WORLD, &me));
  PetscCallMPI(sys_mpi_bcast(&n, 1, MPI_INT, root, MPI_COMM_WORLD));
  if (n > g->steps_cap) {
    PetscCall(PetscFree2(g->step_seconds, g->step_active));
    g->steps_cap = n;
    PetscCall(PetscMalloc2(n, &g->step_seconds, n, &g->step_active));
  }
  if (me == root && src != g) {
    PetscCall(PetscArraycpy(g->step_seconds, src->step_seconds, n));
    PetscCall(PetscArraycpy(g->step_active, src->step_active, n));
  }
  g->nsteps = n;
  PetscCallMPI(sys_mpi_bcast(g->step_seconds, n, MPI_DOUBLE, root, MPI_COMM_WORLD));
  PetscCallMPI(sys_mpi_bcast(g->step_active, n, MPI_INT, root, MPI_COMM_WORLD));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode rollout_share_genbatch(const Mesh *m, GenPart *part, GenBatch *g)
{
  PetscBool head = exec_is_head(m);
  size_t    T    = (size_t)g->Tmax;
  int       B    = g->n, *count = NULL;

  PetscFunctionBegin;
  if (g->mask_off) PetscCall(PetscCalloc1((size_t)B * T + 1, &count));
  if (head && part->own) part_copy_rows(part, g, count);
  PetscCall(exec_share_rows(m, B, T, MPI_INT, g->tokens));
  PetscCall(exec_share_rows(m, B, T, MPI_FLOAT, g->logprobs));
  PetscCall(exec_share_rows(m, B, 1, MPI_INT, g->prompt_len));
  PetscCall(exec_share_rows(m, B, 1, MPI_INT, g->response_len));
  PetscCall(exec_share_rows(m, B, 1, MPI_INT, g->eos));
  PetscCall(exec_share_rows(m, B, T, MPI_UNSIGNED_CHAR, g->src)); /* who produced each token (episodes) */
  PetscCall(exec_share_rows(m, B, 1, MPI_INT, g->turns));
  PetscCall(exec_share_rows(m, B, 1, MPI_INT, g->obs_cut));
  if (g->mask_off) PetscCall(share_masks(m, part, head, count, g));
  PetscCall(share_steps(m, g, part, head));
  g->new_tokens = 0;
  for (int b = 0; b < B; b++) g->new_tokens += g->response_len[b];
  PetscCall(PetscFree(count));
  if (part->own) PetscCall(gen_batch_destroy(&part->b));
  part->own = PETSC_FALSE;
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode rollout_share_gen(const Mesh *m, GenPart *part, Rollout *r)
{
  PetscFunctionBegin;
  PetscCheck(r->gen.n == r->B && r->gen.Tmax == r->T, PETSC_COMM_SELF, PETSC_ERR_PLIB,
             "rollout_share_gen: the batch holds %d rows of %d, the rollout %d of %d", r->gen.n, r->gen.Tmax, r->B,
             r->T);
  PetscCall(rollout_share_genbatch(m, part, &r->gen));
  if (r->envs) PetscCall(ppo_episodes_share(m, r)); /* their environment's rewards, calls, time */
  r->episodes = (PetscBool)(r->envs != NULL);
  PetscCall(rollout_finish_gen(r));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Allowed-set ids of the rows each rank owns, in row order, to every rank. */
static PetscErrorCode share_masks_owned(const GenBatch *p, const int *owner, int me, GenBatch *g)
{
  size_t T = (size_t)g->Tmax, n = (size_t)g->n * T, mine = 0;
  int    world, *cnt, *displ, *mybuf, *all, tot = 0;

  PetscFunctionBegin;
  PetscCallMPI(MPI_Comm_size(MPI_COMM_WORLD, &world));
  PetscCall(PetscCalloc2(world, &cnt, world + 1, &displ));
  for (int b = 0; b < g->n; b++)
    for (size_t t = 0; t < T; t++)
      g->mask_off[(size_t)b * T + t + 1] = owner[b] == me
                                               ? p->mask_off[(size_t)b * T + t + 1] - p->mask_off[(size_t)b * T + t]
                                               : 0;
  PetscCallMPI(sys_mpi_allreduce(MPI_IN_PLACE, g->mask_off + 1, (int)n, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
  g->mask_off[0] = 0;
  for (size_t k = 0; k < n; k++) g->mask_off[k + 1] += g->mask_off[k];
  for (int b = 0; b < g->n; b++) cnt[owner[b]] += g->mask_off[(size_t)(b + 1) * T] - g->mask_off[(size_t)b * T];
  for (int q = 0; q < world; q++) displ[q] = tot, tot += cnt[q];
  if ((size_t)tot + 1 > g->mask_cap) {
    g->mask_cap = (size_t)tot + 1;
    PetscCall(PetscRealloc(g->mask_cap * sizeof(int), &g->mask_ids));
  }
  PetscCall(PetscMalloc2((size_t)cnt[me] + 1, &mybuf, (size_t)tot + 1, &all));
  for (int b = 0; b < g->n; b++)
    if (owner[b] == me) {
      size_t k0 = (size_t)p->mask_off[(size_t)b * T], k1 = (size_t)p->mask_off[(size_t)(b + 1) * T];
      PetscCall(PetscArraycpy(mybuf + mine, p->mask_ids + k0, k1 - k0));
      mine += k1 - k0;
    }
  PetscCallMPI(sys_mpi_allgatherv(mybuf, cnt[me], MPI_INT, all, cnt, displ, MPI_INT, MPI_COMM_WORLD));
  for (int b = 0; b < g->n; b++) { /* rank q's block holds its rows in row order */
    size_t len = (size_t)(g->mask_off[(size_t)(b + 1) * T] - g->mask_off[(size_t)b * T]);
    PetscCall(PetscArraycpy(g->mask_ids + g->mask_off[(size_t)b * T], all + displ[owner[b]], len));
    displ[owner[b]] += (int)len;
  }
  PetscCall(PetscFree2(mybuf, all));
  PetscCall(PetscFree2(cnt, displ));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode rollout_share_gen_owned(const Mesh *m, GenPart *part, Rollout *r)
{
  GenBatch *g = &r->gen, *p = &part->b;
  size_t    T = (size_t)r->T;
  int       me, *owner;

  PetscFunctionBegin;
  PetscCallMPI(MPI_Comm_rank(MPI_COMM_WORLD, &me));
  PetscCall(PetscMalloc1(r->B, &owner));
  for (int b = 0; b < r->B; b++) owner[b] = part->owner ? part->owner[b] : -1;
  PetscCallMPI(sys_mpi_allreduce(MPI_IN_PLACE, owner, r->B, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
  for (int b = 0; b < r->B; b++)
    PetscCheck(owner[b] >= 0, PETSC_COMM_SELF, PETSC_ERR_PLIB, "rollout_share_gen_owned: no replica finished row %d",
               b);
  /* every row is the sum of its owner's copy and zeros elsewhere: exact */
  PetscCall(PetscArrayzero(g->tokens, (size_t)r->B * T));
  PetscCall(PetscArrayzero(g->logprobs, (size_t)r->B * T));
  for (int b = 0; b < r->B; b++) {
    g->prompt_len[b] = g->response_len[b] = g->eos[b] = 0;
    if (owner[b] != me) continue;
    PetscCall(PetscArraycpy(g->tokens + b * T, p->tokens + b * T, T));
    PetscCall(PetscArraycpy(g->logprobs + b * T, p->logprobs + b * T, T));
    g->prompt_len[b] = p->prompt_len[b], g->response_len[b] = p->response_len[b], g->eos[b] = p->eos[b];
  }
  PetscCallMPI(sys_mpi_allreduce(MPI_IN_PLACE, g->tokens, (int)(r->B * T), MPI_INT, MPI_SUM, MPI_COMM_WORLD));
  PetscCallMPI(sys_mpi_allreduce(MPI_IN_PLACE, g->logprobs, (int)(r->B * T), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD));
  PetscCallMPI(sys_mpi_allreduce(MPI_IN_PLACE, g->prompt_len, r->B, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
  PetscCallMPI(sys_mpi_allreduce(MPI_IN_PLACE, g->response_len, r->B, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
  PetscCallMPI(sys_mpi_allreduce(MPI_IN_PLACE, g->eos, r->B, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
  if (g->mask_off) PetscCall(share_masks_owned(p, owner, me, g));
  PetscCall(share_steps(m, g, part, exec_is_head(m)));
  g->new_tokens = 0;
  for (int b = 0; b < r->B; b++) g->new_tokens += g->response_len[b];
  PetscCall(PetscFree(owner));
  if (part->own) PetscCall(gen_batch_destroy(&part->b));
  PetscCall(PetscFree(part->owner));
  part->own = PETSC_FALSE;
  PetscCall(rollout_finish_gen(r));
  PetscFunctionReturn(PETSC_SUCCESS);
}
