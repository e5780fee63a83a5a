/* dist.c: what a model shard needs from its mesh. The tensor-parallel sum,
 * the pipeline's point-to-point (tagged by model, micro-batch and
 * direction), the vocabulary-parallel log-probabilities,
 * and the gradient synchronisation before an optimizer step: data-parallel
 * all-reduce in buckets and the tied embedding's two copies (first and last
 * stage). Every function is a no-op for a model without a mesh. */
#include <math.h>

#include "model_impl.h"

PetscErrorCode model_tp_sum(const Model *lm, float *x, size_t n)
{
  PetscFunctionBegin;
  if (lm->mesh && lm->sh.tp > 1) PetscCall(comm_allreduce_sum(&lm->mesh->tp_comm, x, n));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* The largest tag MPI allows (at least 32767 by the standard). */
static int model_tag_ub(void)
{
  static int ub = 0;
  if (!ub) {
    int *v, flag = 0;
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &v, &flag);
    ub = flag ? *v : 32767;
  }
  return ub;
}

static inline int model_tag(const Model *lm, int dir)
{
  return MODEL_TAG_BASE + (lm->msg_mb * MODEL_MSG_MODELS + lm->msg_model) * 3 + dir;
}

PetscErrorCode model_msg_ids(Model *lm, int model, int mb)
{
  PetscFunctionBegin;
  PetscCheck(model >= 0 && model < MODEL_MSG_MODELS, PETSC_COMM_SELF, PETSC_ERR_ARG_OUTOFRANGE,
             "model_msg_ids: model id %d, expected 0..%d", model, MODEL_MSG_MODELS - 1);
  PetscCheck(mb >= 0 && (MODEL_TAG_BASE + 2 + ((double)mb * MODEL_MSG_MODELS + model) * 3) <= model_tag_ub(),
             PETSC_COMM_SELF, PETSC_ERR_ARG_OUTOFRANGE,
             "model_msg_ids: micro-batch %d: its pipeline messages' MPI tags would pass MPI_TAG_UB %d (at most %d "
             "micro-batches per step)",
             mb, model_tag_ub(), (model_tag_ub() - MODEL_TAG_BASE - 2) / (3 * MODEL_MSG_MODELS));
  lm->msg_model = model;
  lm->msg_mb    = mb;
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode model_pp_send(const Model *lm, const float *x, size_t n, int dir, int to_stage, MPI_Request *req)
{
  PetscFunctionBegin;
  /* a copy is sent, so no later task of this stage waits for the peer to
   * take it (fused schedules interleave two pipelines running opposite
   * ways: two such waits could wait for each other); *req stays done */
  PetscCall(comm_wait(req));
  PetscCall(comm_isend_copy(&lm->mesh->pp_comm, x, n * sizeof(float), to_stage, model_tag(lm, dir)));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode model_pp_recv(const Model *lm, float *x, size_t n, int dir, int from_stage)
{
  PetscFunctionBegin;
  PetscCall(comm_recv(&lm->mesh->pp_comm, x, n * sizeof(float), from_stage, model_tag(lm, dir)));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Combines the shards' statistics of one row (tensor.h, logprob_stats) in
 * tp order: lse = M + log S with S = sum_t s_t exp(m_t - M), and the entropy
 * log S - W/S with W the shards' sum exp(y-M)(y-M). Shards without allowed
 * tokens (s_t = 0) are skipped. */
static void combine_row(const double *st, int tp, int n, double *lse, double *ent, double *y)
{
  double M = -INFINITY, S = 0, W = 0, Y = 0;

  for (int t = 0; t < tp; t++) {
    const double *r = st + ((size_t)t * n) * 4;
    if (r[1] > 0) M = PetscMax(M, r[0]);
    Y += r[3];
  }
  for (int t = 0; t < tp; t++) {
    const double *r = st + ((size_t)t * n) * 4;
    double        e;
    if (r[1] <= 0) continue;
    e = exp(r[0] - M);
    S += r[1] * e;
    W += e * (r[2] + r[1] * (r[0] - M));
  }
  *lse = M + log(S);
  *ent = log(S) - W / S;
  *y   = Y;
}

PetscErrorCode model_logprobs_tp(Model *lm, float *logprob, float *entropy)
{
  ModelActs *a = lm->acts;
  int      N = a->N, tp = lm->sh.tp;
  double  *dev, *mine;
  float   *lse;
  int     *target;

  PetscFunctionBegin;
  if ((size_t)4 * N * (tp + 1) > lm->stats_cap) {
    PetscCall(PetscFree(lm->stats_host));
    lm->stats_cap = (size_t)4 * N * (tp + 1);
    PetscCall(PetscMalloc1(lm->stats_cap, &lm->stats_host));
  }
  mine = lm->stats_host + (size_t)4 * N * tp;
  PetscCall(lm->be->alloc((size_t)4 * N * sizeof(double), (void **)&dev));
  for (int r0 = 0; r0 < N; r0 += a->tile) {
    int          n = PetscMin(a->tile, N - r0);
    const float *logits;
    PetscCall(model_head_tile(lm, r0, n, &logits));
    PetscCall(lm->be->logprob_stats(dev + (size_t)4 * r0, logits, a->target + r0, a->inv_temp,
                                    a->have_mask ? a->mask_off + r0 : NULL, a->mask_ids, n, lm->Vl, lm->v0));
  }
  PetscCall(lm->be->to_host(mine, dev, (size_t)4 * N * sizeof(double)));
  PetscCall(lm->be->free(dev));
  PetscCall(comm_allgather_host(&lm->mesh->tp_comm, mine, lm->stats_host, (size_t)4 * N * sizeof(double)));
  PetscCall(PetscMalloc2(N, &lse, N, &target));
  PetscCall(lm->be->to_host(target, a->target, (size_t)N * sizeof(int)));
  for (int n = 0; n < N; n++) {
    double l, e, y;
    combine_row(lm->stats_host + (size_t)4 * n, tp, N, &l, &e, &y);
    lse[n]     = (float)l;
    logprob[n] = target[n] >= 0 ? (float)(y - l) : 0.0f;
    if (entropy) entropy[n] = target[n] >= 0 ? (float)e : 0.0f;
  }
  PetscCall(lm->be->from_host(a->lse, lse, (size_t)N * sizeof(float)));
  PetscCall(PetscFree2(lse, target));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* ---- before an optimizer step ---------------------------------------------- */

/* Data-parallel replicas add their gradients (bucket by bucket), the two
 * copies of the tied wte add theirs, the tp ranks sharing a replicated k/v
 * head add theirs (each holds the part its own query heads gave), and the
 * tp ranks add their parts of Qwen3's q and k norm weights (replicated,
 * each rank's gradient from its own heads), so every copy stays identical. */
PetscErrorCode model_grads_sync(Model *lm)
{
  const Mesh *m = lm->mesh;
  size_t      bucket = PetscMax(lm->dist.bucket_bytes / sizeof(float), (size_t)1);

  PetscFunctionBegin;
  if (!m || lm->grads_synced) PetscFunctionReturn(PETSC_SUCCESS);
  lm->grads_synced = PETSC_TRUE;
  if (m->dp > 1)
    for (size_t off = 0; off < lm->nparams; off += bucket)
      PetscCall(comm_allreduce_sum(&m->dp_comm, lm->grads + off, PetscMin(bucket, lm->nparams - off)));
  if (m->pp > 1 && lm->cfg.head == MODEL_HEAD_LM && !model_untied_head(&lm->cfg) &&
      m->embed_comm.mpi != MPI_COMM_NULL) {
    const ModelTensor *t = &lm->tensors[MODEL_T_WTE];
    PetscCall(comm_allreduce_sum(&m->embed_comm, lm->grads + t->offset, t->numel));
  }
  if (lm->cfg.qk_norm && m->tp > 1)
    for (int l = lm->sh.l0; l < lm->sh.l1; l++) {
      const ModelTensor *qn = &lm->tensors[model_tidx_layer(&lm->cfg, l, LL_T_QN)],
                        *kn = &lm->tensors[model_tidx_layer(&lm->cfg, l, LL_T_KN)];
      PetscCall(comm_allreduce_sum(&m->tp_comm, lm->grads + qn->offset,
                                   qn->numel)); /* q_norm then k_norm: neighbours, but kept apart */
      PetscCall(comm_allreduce_sum(&m->tp_comm, lm->grads + kn->offset, kn->numel));
    }
  if (model_kv_rep(&lm->cfg, m->tp) > 1) {
    const Comm *block;
    PetscCall(mesh_tp_block(m, model_kv_rep(&lm->cfg, m->tp), &block));
    for (int i = 0; i < lm->ntensors;) { /* k|v (and their biases) are neighbours: one call per run of them */
      size_t off = lm->tensors[i].offset, n = 0;
      while (i < lm->ntensors && lm->tensors[i].kv_heads && lm->tensors[i].numel && lm->tensors[i].offset == off + n)
        n += lm->tensors[i++].numel;
      if (n) PetscCall(comm_allreduce_sum(block, lm->grads + off, n));
      else i++;
    }
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Sum of squares of the gradients this rank counts (tensor.norm), added over
 * the mesh; every dp replica holds the same gradients after model_grads_sync,
 * so the mesh's sum counts each dp times. */
PetscErrorCode model_grad_sumsq(const Model *lm, double *ss)
{
  PetscBool all = PETSC_TRUE;

  PetscFunctionBegin;
  for (int i = 0; i < lm->ntensors; i++)
    if (lm->tensors[i].numel && !lm->tensors[i].norm) all = PETSC_FALSE;
  if (all) PetscCall(lm->be->sumsq(ss, lm->grads, lm->nparams)); /* one rank's whole model: one sum, as always */
  else {
    *ss = 0;
    for (int i = 0; i < lm->ntensors; i++) {
      double s;
      if (!lm->tensors[i].numel || !lm->tensors[i].norm) continue;
      PetscCall(lm->be->sumsq(&s, lm->grads + lm->tensors[i].offset, lm->tensors[i].numel));
      *ss += s;
    }
  }
  if (lm->mesh && lm->mesh->nranks > 1) {
    PetscCall(comm_allreduce_sum_double(&lm->mesh->all, ss, 1));
    *ss /= lm->mesh->dp;
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* ---- ZeRO-1 ------------------------------------------------------------------ */

PetscErrorCode model_set_zero1(Model *lm, PetscBool on)
{
  PetscFunctionBegin;
  PetscCheck(!lm->m && !lm->v, PETSC_COMM_SELF, PETSC_ERR_ORDER,
             "model_set_zero1: set before the optimizer state exists");
  lm->dist.zero1 = on && lm->mesh && lm->mesh->dp > 1 ? PETSC_TRUE : PETSC_FALSE;
  lm->own0       = 0;
  lm->own1       = lm->nparams;
  if (lm->dist.zero1) comm_own_range(lm->nparams, lm->mesh->d, lm->mesh->dp, &lm->own0, &lm->own1);
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* The whole shard's moments from the dp replicas' ranges (host, collective over dp). */
PetscErrorCode model_optim_gather(const Model *lm, const float *mine, float *full)
{
  PetscFunctionBegin;
  PetscCall(PetscArraycpy(full + lm->own0, mine, lm->own1 - lm->own0));
  if (lm->dist.zero1) PetscCall(comm_allgather_ranges_host(&lm->mesh->dp_comm, full, lm->nparams));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* After each replica updated its range of the parameters, all get all of them. */
PetscErrorCode model_params_share(Model *lm)
{
  PetscFunctionBegin;
  if (lm->dist.zero1) PetscCall(comm_allgather_ranges(&lm->mesh->dp_comm, lm->params, lm->nparams));
  PetscFunctionReturn(PETSC_SUCCESS);
}
