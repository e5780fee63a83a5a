/* dist.c: what a model shard needs from its mesh. The tensor-parallel sum,
 * the pipeline's point-to-point (tagged by model, micro-batch and
 * direction), the vocabulary-parallel log-probabilities,
 * and the gradient synchronisation before an optimizer step: data-parallel
 * all-reduce in buckets and the tied embedding's two copies (first and last
 * stage). Every function is a no-op for a model without a mesh. */
#include <math.h>

#include "model_impl.h"

PetscErrorCode gpt_tp_sum(const GPT *gpt, float *x, size_t n)
{
  PetscFunctionBegin;
  if (gpt->mesh && gpt->sh.tp > 1) PetscCall(comm_allreduce_sum(&gpt->mesh->tp_comm, x, n));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* The largest tag MPI allows (at least 32767 by the standard). */
static int gpt_tag_ub(void)
{
  static int ub = 0;
  if (!ub) {
    int *v, flag = 0;
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &v, &flag);
    ub = flag ? *v : 32767;
  }
  return ub;
}

static inline int gpt_tag(const GPT *gpt, int dir) { return GPT_TAG_BASE + (gpt->msg_mb * GPT_MSG_MODELS + gpt->msg_model) * 3 + dir; }

PetscErrorCode gpt_msg_ids(GPT *gpt, int model, int mb)
{
  PetscFunctionBegin;
  PetscCheck(model >= 0 && model < GPT_MSG_MODELS, PETSC_COMM_SELF, PETSC_ERR_ARG_OUTOFRANGE, "gpt_msg_ids: model id %d, expected 0..%d", model, GPT_MSG_MODELS - 1);
  PetscCheck(mb >= 0 && (GPT_TAG_BASE + 2 + ((double)mb * GPT_MSG_MODELS + model) * 3) <= gpt_tag_ub(), PETSC_COMM_SELF, PETSC_ERR_ARG_OUTOFRANGE,
             "gpt_msg_ids: micro-batch %d: its pipeline messages' MPI tags would pass MPI_TAG_UB %d (at most %d micro-batches per step)", mb, gpt_tag_ub(),
             (gpt_tag_ub() - GPT_TAG_BASE - 2) / (3 * GPT_MSG_MODELS));
  gpt->msg_model = model;
  gpt->msg_mb    = mb;
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode gpt_pp_send(const GPT *gpt, const float *x, size_t n, int dir, int to_stage, MPI_Request *req)
{
  PetscFunctionBegin;
  /* a copy is sent, so no later task of this stage waits for the peer to
   * take it (fused schedules interleave two pipelines running opposite
   * ways: two such waits could wait for each other); *req stays done */
  PetscCall(comm_wait(req));
  PetscCall(comm_isend_copy(&gpt->mesh->pp_comm, x, n * sizeof(float), to_stage, gpt_tag(gpt, dir)));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode gpt_pp_recv(const GPT *gpt, float *x, size_t n, int dir, int from_stage)
{
  PetscFunctionBegin;
  PetscCall(comm_recv(&gpt->mesh->pp_comm, x, n * sizeof(float), from_stage, gpt_tag(gpt, dir)));
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

PetscErrorCode gpt_logprobs_tp(GPT *gpt, float *logprob, float *entropy)
{
  GPTActs *a = gpt->acts;
  int      N = a->N, tp = gpt->sh.tp;
  double  *dev, *mine;
  float   *lse;
  int     *target;

  PetscFunctionBegin;
  if ((size_t)4 * N * (tp + 1) > gpt->stats_cap) {
    PetscCall(PetscFree(gpt->stats_host));
    gpt->stats_cap = (size_t)4 * N * (tp + 1);
    PetscCall(PetscMalloc1(gpt->stats_cap, &gpt->stats_host));
  }
  mine = gpt->stats_host + (size_t)4 * N * tp;
  PetscCall(gpt->be->alloc((size_t)4 * N * sizeof(double), (void **)&dev));
  PetscCall(gpt->be->logprob_stats(dev, a->head_out, a->target, a->inv_temp, a->have_mask ? a->mask_off : NULL, a->mask_ids, N, gpt->Vl, gpt->v0));
  PetscCall(gpt->be->to_host(mine, dev, (size_t)4 * N * sizeof(double)));
  PetscCall(gpt->be->free(dev));
  PetscCall(comm_allgather_host(&gpt->mesh->tp_comm, mine, gpt->stats_host, (size_t)4 * N * sizeof(double)));
  PetscCall(PetscMalloc2(N, &lse, N, &target));
  PetscCall(gpt->be->to_host(target, a->target, (size_t)N * sizeof(int)));
  for (int n = 0; n < N; n++) {
    double l, e, y;
    combine_row(gpt->stats_host + (size_t)4 * n, tp, N, &l, &e, &y);
    lse[n]     = (float)l;
    logprob[n] = target[n] >= 0 ? (float)(y - l) : 0.0f;
    if (entropy) entropy[n] = target[n] >= 0 ? (float)e : 0.0f;
  }
  PetscCall(gpt->be->from_host(a->lse, lse, (size_t)N * sizeof(float)));
  PetscCall(PetscFree2(lse, target));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* ---- before an optimizer step ---------------------------------------------- */

/* Data-parallel replicas add their gradients (bucket by bucket), the two
 * copies of the tied wte add theirs, the tp ranks sharing a replicated k/v
 * head add theirs (each holds the part its own query heads gave), and the
 * tp ranks add their parts of Qwen3's q and k norm weights (replicated,
 * each rank's gradient from its own heads), so every copy stays identical. */
PetscErrorCode gpt_grads_sync(GPT *gpt)
{
  const Mesh *m = gpt->mesh;
  size_t      bucket = PetscMax(gpt->dist.bucket_bytes / sizeof(float), (size_t)1);

  PetscFunctionBegin;
  if (!m || gpt->grads_synced) PetscFunctionReturn(PETSC_SUCCESS);
  gpt->grads_synced = PETSC_TRUE;
  if (m->dp > 1)
    for (size_t off = 0; off < gpt->nparams; off += bucket) PetscCall(comm_allreduce_sum(&m->dp_comm, gpt->grads + off, PetscMin(bucket, gpt->nparams - off)));
  if (m->pp > 1 && gpt->cfg.head == GPT_HEAD_LM && !gpt_untied_head(&gpt->cfg) && m->embed_comm.mpi != MPI_COMM_NULL) {
    const GPTTensor *t = &gpt->tensors[GPT_T_WTE];
    PetscCall(comm_allreduce_sum(&m->embed_comm, gpt->grads + t->offset, t->numel));
  }
  if (gpt->cfg.qk_norm && m->tp > 1)
    for (int l = gpt->sh.l0; l < gpt->sh.l1; l++) {
      const GPTTensor *qn = &gpt->tensors[gpt_tidx_layer(&gpt->cfg, l, LL_T_QN)], *kn = &gpt->tensors[gpt_tidx_layer(&gpt->cfg, l, LL_T_KN)];
      PetscCall(comm_allreduce_sum(&m->tp_comm, gpt->grads + qn->offset, qn->numel)); /* q_norm then k_norm: neighbours, but kept apart */
      PetscCall(comm_allreduce_sum(&m->tp_comm, gpt->grads + kn->offset, kn->numel));
    }
  if (gpt_kv_rep(&gpt->cfg, m->tp) > 1) {
    const Comm *block;
    PetscCall(mesh_tp_block(m, gpt_kv_rep(&gpt->cfg, m->tp), &block));
    for (int i = 0; i < gpt->ntensors;) { /* k|v (and their biases) are neighbours: one call per run of them */
      size_t off = gpt->tensors[i].offset, n = 0;
      while (i < gpt->ntensors && gpt->tensors[i].kv_heads && gpt->tensors[i].numel && gpt->tensors[i].offset == off + n) n += gpt->tensors[i++].numel;
      if (n) PetscCall(comm_allreduce_sum(block, gpt->grads + off, n));
      else i++;
    }
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Sum of squares of the gradients this rank counts (tensor.norm), added over
 * the mesh; every dp replica holds the same gradients after gpt_grads_sync,
 * so the mesh's sum counts each dp times. */
PetscErrorCode gpt_grad_sumsq(const GPT *gpt, double *ss)
{
  PetscBool all = PETSC_TRUE;

  PetscFunctionBegin;
  for (int i = 0; i < gpt->ntensors; i++)
    if (gpt->tensors[i].numel && !gpt->tensors[i].norm) all = PETSC_FALSE;
  if (all) PetscCall(gpt->be->sumsq(ss, gpt->grads, gpt->nparams)); /* one rank's whole model: one sum, as always */
  else {
    *ss = 0;
    for (int i = 0; i < gpt->ntensors; i++) {
      double s;
      if (!gpt->tensors[i].numel || !gpt->tensors[i].norm) continue;
      PetscCall(gpt->be->sumsq(&s, gpt->grads + gpt->tensors[i].offset, gpt->tensors[i].numel));
      *ss += s;
    }
  }
  if (gpt->mesh && gpt->mesh->nranks > 1) {
    PetscCall(comm_allreduce_sum_double(&gpt->mesh->all, ss, 1));
    *ss /= gpt->mesh->dp;
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* ---- ZeRO-1 ------------------------------------------------------------------ */

PetscErrorCode gpt_set_zero1(GPT *gpt, PetscBool on)
{
  PetscFunctionBegin;
  PetscCheck(!gpt->m && !gpt->v, PETSC_COMM_SELF, PETSC_ERR_ORDER, "gpt_set_zero1: set before the optimizer state exists");
  gpt->dist.zero1 = on && gpt->mesh && gpt->mesh->dp > 1 ? PETSC_TRUE : PETSC_FALSE;
  gpt->own0       = 0;
  gpt->own1       = gpt->nparams;
  if (gpt->dist.zero1) comm_own_range(gpt->nparams, gpt->mesh->d, gpt->mesh->dp, &gpt->own0, &gpt->own1);
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* The whole shard's moments from the dp replicas' ranges (host, collective over dp). */
PetscErrorCode gpt_optim_gather(const GPT *gpt, const float *mine, float *full)
{
  PetscFunctionBegin;
  PetscCall(PetscArraycpy(full + gpt->own0, mine, gpt->own1 - gpt->own0));
  if (gpt->dist.zero1) PetscCall(comm_allgather_ranges_host(&gpt->mesh->dp_comm, full, gpt->nparams));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* After each replica updated its range of the parameters, all get all of them. */
PetscErrorCode gpt_params_share(GPT *gpt)
{
  PetscFunctionBegin;
  if (gpt->dist.zero1) PetscCall(comm_allgather_ranges(&gpt->mesh->dp_comm, gpt->params, gpt->nparams));
  PetscFunctionReturn(PETSC_SUCCESS);
}
