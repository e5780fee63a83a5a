/* kvcache.c: incremental forward for generation. Rows of one call may belong
 * to different slots at different positions (prefill of one prompt, or one
 * decode step across many slots, in any order), so the generation engine can
 * batch continuously and hand a slot's cache elsewhere. */
#include "model_impl.h"

PetscErrorCode model_kv_create(const Model *lm, int nslot, int Tmax, ModelKVCache **kv)
{
  ModelKVCache *c;
  size_t      n;

  PetscFunctionBegin;
  PetscCheck(nslot > 0 && Tmax > 0, PETSC_COMM_SELF, PETSC_ERR_ARG_OUTOFRANGE,
             "model_kv_create: nslot %d and Tmax %d must be positive", nslot, Tmax);
  PetscCheck(Tmax <= lm->cfg.n_positions, PETSC_COMM_SELF, PETSC_ERR_ARG_OUTOFRANGE,
             "model_kv_create: Tmax %d exceeds the model's n_positions %d", Tmax, lm->cfg.n_positions);
  PetscCall(PetscNew(&c));
  c->nslot   = nslot;
  c->Tmax    = Tmax;
  c->n_layer = lm->sh.l1 - lm->sh.l0; /* this stage's layers, this rank's heads */
  c->n_embd  = lm->Ckvl; /* this rank's key/value heads */
  n          = (size_t)c->n_layer * nslot * Tmax * c->n_embd;
  PetscCall(lm->be->alloc(n * sizeof(float), (void **)&c->k));
  PetscCall(lm->be->alloc(n * sizeof(float), (void **)&c->v));
  *kv = c;
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode model_kv_destroy(const Model *lm, ModelKVCache **kv)
{
  PetscFunctionBegin;
  if (!*kv) PetscFunctionReturn(PETSC_SUCCESS);
  PetscCall(model_graphs_destroy(lm, *kv));
  if ((*kv)->k) PetscCall(lm->be->free((*kv)->k));
  if ((*kv)->v) PetscCall(lm->be->free((*kv)->v));
  PetscCall(PetscFree(*kv));
  PetscFunctionReturn(PETSC_SUCCESS);
}

size_t model_kv_floats(const ModelKVCache *kv, int npos)
{
  return 2 * (size_t)kv->n_layer * (size_t)npos * (size_t)kv->n_embd;
}

/* Slot s's positions are contiguous in each layer: [l][s][0..Tmax)[C]. */
static PetscErrorCode kv_copy(const Model *lm, const ModelKVCache *kv, int slot, int npos, float *host,
                              PetscBool to_host)
{
  size_t per_layer = (size_t)kv->nslot * kv->Tmax * kv->n_embd, run = (size_t)npos * kv->n_embd,
         at = (size_t)slot * kv->Tmax * kv->n_embd;

  PetscFunctionBegin;
  PetscCheck(slot >= 0 && slot < kv->nslot && npos >= 0 && npos <= kv->Tmax, PETSC_COMM_SELF, PETSC_ERR_ARG_OUTOFRANGE,
             "model_kv: slot %d, %d positions outside the cache's %d slots of %d", slot, npos, kv->nslot, kv->Tmax);
  if (!npos) PetscFunctionReturn(PETSC_SUCCESS);
  for (int kind = 0; kind < 2; kind++)
    for (int l = 0; l < kv->n_layer; l++) {
      float *dev = (kind ? kv->v : kv->k) + l * per_layer + at, *h = host + ((size_t)kind * kv->n_layer + l) * run;
      if (to_host) PetscCall(lm->be->to_host(h, dev, run * sizeof(float)));
      else PetscCall(lm->be->from_host(dev, h, run * sizeof(float)));
    }
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode model_kv_get(const Model *lm, const ModelKVCache *kv, int slot, int npos, float *buf)
{
  PetscFunctionBegin;
  PetscCall(kv_copy(lm, kv, slot, npos, buf, PETSC_TRUE));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode model_kv_put(const Model *lm, ModelKVCache *kv, int slot, int npos, const float *buf)
{
  PetscFunctionBegin;
  PetscCall(kv_copy(lm, kv, slot, npos, (float *)buf, PETSC_FALSE));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode model_kv_copy_slot(const Model *lm, ModelKVCache *kv, int from, int to, int npos)
{
  size_t per_layer = (size_t)kv->nslot * kv->Tmax * kv->n_embd, run = (size_t)npos * kv->n_embd;

  PetscFunctionBegin;
  PetscCheck(from >= 0 && from < kv->nslot && to >= 0 && to < kv->nslot && npos >= 0 && npos <= kv->Tmax,
             PETSC_COMM_SELF, PETSC_ERR_ARG_OUTOFRANGE,
             "model_kv_copy_slot: slots %d and %d, %d positions outside the cache's %d slots of %d", from, to, npos,
             kv->nslot, kv->Tmax);
  if (!npos || from == to) PetscFunctionReturn(PETSC_SUCCESS);
  for (int l = 0; l < kv->n_layer; l++) {
    size_t a = l * per_layer + (size_t)from * kv->Tmax * kv->n_embd,
           b = l * per_layer + (size_t)to * kv->Tmax * kv->n_embd;
    PetscCall(lm->be->copy(kv->k + b, kv->k + a, run * sizeof(float)));
    PetscCall(lm->be->copy(kv->v + b, kv->v + a, run * sizeof(float)));
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Host-side guards: the ops index wte, wpe and the cache with these values. */
PetscErrorCode model_cached_check_rows(const Model *lm, const ModelKVCache *kv, const int *tok, const int *slot,
                                       const int *pos, int N)
{
  int V = lm->cfg.vocab_size;

  PetscFunctionBegin;
  PetscCheck(kv->n_layer == lm->sh.l1 - lm->sh.l0 && kv->n_embd == lm->Ckvl, PETSC_COMM_SELF, PETSC_ERR_ARG_INCOMP,
             "model_forward_cached: the KV cache was made for another model shape");
  for (int r = 0; r < N; r++) {
    PetscCheck(tok[r] >= 0 && tok[r] < V, PETSC_COMM_SELF, PETSC_ERR_ARG_OUTOFRANGE,
               "model_forward_cached: token %d at row %d is outside [0,%d)", tok[r], r, V);
    PetscCheck(slot[r] >= 0 && slot[r] < kv->nslot, PETSC_COMM_SELF, PETSC_ERR_ARG_OUTOFRANGE,
               "model_forward_cached: slot %d at row %d is outside [0,%d)", slot[r], r, kv->nslot);
    PetscCheck(pos[r] >= 0 && pos[r] < lm->cfg.n_positions && pos[r] < kv->Tmax, PETSC_COMM_SELF,
               PETSC_ERR_ARG_OUTOFRANGE,
               "model_forward_cached: position %d at row %d is outside [0,%d) (n_positions %d, cache Tmax %d)", pos[r],
               r, PetscMin(lm->cfg.n_positions, kv->Tmax), lm->cfg.n_positions, kv->Tmax);
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscBool model_cached_fused(const Model *lm, int n)
{
  return (PetscBool)(lm->be->matmul_fused && n <= lm->be->fused_rows && lm->sh.tp == 1 && !lm->cached_rows);
}

/* The cached block with the backend's fused matmuls: RMSNorm folded into
 * the matmul it feeds (LayerNorm runs as it is), the residual adds into the
 * output projections, SwiGLU into the down projection's input: five
 * kernels fewer a layer of the LLaMA family, two of GPT-2, the same bits. */
static PetscErrorCode cached_block_fused(Model *lm, ModelKVCache *kv, int l, const ModelLayerParams *p, float *x, int n,
                                         const int *slot, const int *pos)
{
  const Backend *be = lm->be;
  ModelActs     *a  = lm->acts;
  int            C = lm->cfg.n_embd, F = lm->Fl, W = lm->Cl + 2 * lm->Ckvl;
  size_t         per_layer = (size_t)kv->nslot * kv->Tmax * kv->n_embd;
  PetscBool      ow = model_weights_out_in(&lm->cfg), gated = model_arch(&lm->cfg)->mlp == MODEL_MLP_SWIGLU,
            rms    = model_arch(&lm->cfg)->norm == MODEL_NORM_RMS;
  MatmulFusion in1 = { .norm_w = rms ? p->ln1_w : NULL, .norm_eps = (float)lm->cfg.norm_eps }, in2 = in1,
               add    = { .add = PETSC_TRUE };
  MatmulFusion   down = {.gated = gated, .add = PETSC_TRUE};

  PetscFunctionBegin;
  in2.norm_w = rms ? p->ln2_w : NULL;
  if (!rms) PetscCall(model_norm_forward(lm, a->c_ln, a->c_mean, a->c_rstd, x, p->ln1_w, p->ln1_b, n));
  PetscCall(be->matmul_fused(a->c_qkv, rms ? x : a->c_ln, p->qkv_w, p->qkv_b, n, C, W, ow, &in1));
  PetscCall(model_qkv_heads(lm, p, a->c_qkv, NULL, NULL, pos, n));
  PetscCall(be->attention_cached(a->c_atty, kv->k + (l - lm->sh.l0) * per_layer, kv->v + (l - lm->sh.l0) * per_layer,
                                 a->c_qkv, slot, pos, n, kv->Tmax, lm->Cl, lm->NHl, lm->NKVl));
  PetscCall(be->matmul_fused(x, a->c_atty, p->o_w, p->o_b, n, lm->Cl, C, ow, &add));
  if (!rms) PetscCall(model_norm_forward(lm, a->c_ln, a->c_mean, a->c_rstd, x, p->ln2_w, p->ln2_b, n));
  PetscCall(be->matmul_fused(a->c_fch, rms ? x : a->c_ln, p->fc_w, p->fc_b, n, C, gated ? 2 * F : F, ow, &in2));
  if (!gated) PetscCall(be->gelu_forward(a->c_fch_gelu, a->c_fch, (size_t)n * F));
  PetscCall(be->matmul_fused(x, gated ? a->c_fch : a->c_fch_gelu, p->down_w, p->down_b, n, F, C, ow, &down));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Rows [r0, r0+n) of the call through layer l (global index) of this
 * shard; slot and pos are those rows' (this backend's memory). */
PetscErrorCode model_cached_block(Model *lm, ModelKVCache *kv, int l, int r0, int n, const int *slot, const int *pos)
{
  const Backend *be = lm->be;
  ModelActs     *a  = lm->acts;
  int            C = lm->cfg.n_embd;
  size_t         NC = (size_t)n * C, per_layer = (size_t)kv->nslot * kv->Tmax * kv->n_embd;
  float         *x = a->c_x + (size_t)r0 * C;
  ModelLayerParams p;

  PetscFunctionBegin;
  model_layer_params(lm, lm->params, l, &p);
  if (model_cached_fused(lm, n)) {
    PetscCall(cached_block_fused(lm, kv, l, &p, x, n, slot, pos));
    PetscFunctionReturn(PETSC_SUCCESS);
  }
  PetscCall(model_norm_forward(lm, a->c_ln, a->c_mean, a->c_rstd, x, p.ln1_w, p.ln1_b, n));
  PetscCall(model_qkv_forward(lm, &p, a->c_qkv, NULL, NULL, a->c_ln, pos, n));
  PetscCall(be->attention_cached(a->c_atty, kv->k + (l - lm->sh.l0) * per_layer, kv->v + (l - lm->sh.l0) * per_layer,
                                 a->c_qkv, slot, pos, n, kv->Tmax, lm->Cl, lm->NHl, lm->NKVl));
  PetscCall(model_attn_proj_forward(lm, &p, a->c_proj, a->c_atty, n));
  PetscCall(be->axpy(x, 1.0f, a->c_proj, NC));
  PetscCall(model_mlp_forward(lm, &p, x, a->c_ln, a->c_mean, a->c_rstd, a->c_fch, a->c_fch_gelu, a->c_proj, n));
  PetscCall(be->axpy(x, 1.0f, a->c_proj, NC));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Rows can travel through the pipeline in chunks (micro-batches) when no
 * chunk needs keys a later chunk writes: each slot's rows ascend by position. */
static int cached_chunks(const Model *lm, const int *slot, const int *pos, int N)
{
  int nchunk = PetscMin(lm->sh.pp, N);

  for (int r = 1; r < N && nchunk > 1; r++)
    for (int q = 0; q < r; q++)
      if (slot[q] == slot[r] && pos[q] >= pos[r]) return 1;
  return nchunk;
}

/* head_rows (host, M of N rows, ascending; NULL: every row) is a valid
 * choice of the rows whose head output a caller reads. */
PetscErrorCode model_cached_check_head_rows(const int *head_rows, int M, int N)
{
  PetscFunctionBegin;
  if (!head_rows) PetscFunctionReturn(PETSC_SUCCESS);
  PetscCheck(M > 0 && M <= N, PETSC_COMM_SELF, PETSC_ERR_ARG_OUTOFRANGE,
             "model_forward_cached: %d head rows of %d rows", M, N);
  for (int m = 0; m < M; m++)
    PetscCheck(head_rows[m] >= (m ? head_rows[m - 1] + 1 : 0) && head_rows[m] < N, PETSC_COMM_SELF,
               PETSC_ERR_ARG_OUTOFRANGE, "model_forward_cached: head row %d is %d: head rows must ascend within [0,%d)",
               m, head_rows[m], N);
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* out [M,C] = rows rows[0..M) of x [.,C] (rows ascending, host), one copy
 * per run of consecutive rows. */
PetscErrorCode model_gather_rows(const Model *lm, float *out, const float *x, const int *rows, int M)
{
  size_t C = (size_t)lm->cfg.n_embd;

  PetscFunctionBegin;
  for (int m = 0, run; m < M; m += run) {
    for (run = 1; m + run < M && rows[m + run] == rows[m] + run; run++) continue;
    PetscCall(lm->be->copy(out + (size_t)m * C, x + (size_t)rows[m] * C, (size_t)run * C * sizeof(float)));
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* The head's output of rows [r0, r0+n) of the call on the last stage, or
 * with head_rows of the rows head_rows[m0..m1) (those of the chunk), to
 * host rows m0.. of out (m0 = r0 without head_rows): the vocabulary shards
 * are gathered over the tp group. */
static PetscErrorCode cached_head(Model *lm, const int *head_rows, int r0, int n, int m0, int m1, float *out)
{
  const ModelConfig *cfg = &lm->cfg;
  ModelActs       *a   = lm->acts;
  int              C = cfg->n_embd, Vl = lm->Vl, tp = lm->sh.tp, V = cfg->vocab_size;
  float           *x = a->c_x + (size_t)r0 * C, *loc, *all;

  PetscFunctionBegin;
  if (head_rows) {
    PetscCall(model_gather_rows(lm, a->c_sel, a->c_x, head_rows + m0, m1 - m0));
    x = a->c_sel;
    n = m1 - m0;
  }
  if (!n) PetscFunctionReturn(PETSC_SUCCESS); /* every tp rank has the same rows: none joins the gather */
  PetscCall(model_final_norm(lm, a->c_ln, a->c_mean, a->c_rstd, x, n));
  PetscCall(model_head_forward(lm, a->c_out, a->c_ln, n));
  if (cfg->head == MODEL_HEAD_SCALAR || tp == 1) {
    PetscCall(lm->be->to_host(out + (size_t)m0 * (cfg->head == MODEL_HEAD_LM ? V : 1), a->c_out,
                              (size_t)n * (cfg->head == MODEL_HEAD_LM ? V : 1) * sizeof(float)));
    PetscFunctionReturn(PETSC_SUCCESS);
  }
  PetscCall(PetscMalloc2((size_t)n * Vl, &loc, (size_t)n * V, &all));
  PetscCall(lm->be->to_host(loc, a->c_out, (size_t)n * Vl * sizeof(float)));
  PetscCall(comm_allgather_host(&lm->mesh->tp_comm, loc, all, (size_t)n * Vl * sizeof(float)));
  for (int t = 0; t < tp; t++) /* [tp][n][Vl] -> [n][V] */
    for (int r = 0; r < n; r++)
      PetscCall(PetscArraycpy(out + (size_t)(m0 + r) * V + (size_t)t * Vl, all + ((size_t)t * n + r) * Vl, Vl));
  PetscCall(PetscFree2(loc, all));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode model_forward_cached(Model *lm, ModelKVCache *kv, const int *tok, const int *slot, const int *pos, int N,
                                    const int *head_rows, int M, float *out)
{
  const ModelConfig *cfg = &lm->cfg;
  const Backend   *be  = lm->be;
  ModelActs       *a   = lm->acts;
  int              C   = cfg->n_embd, nchunk, m1 = 0;
  size_t           nout;
  MPI_Request     *req;

  PetscFunctionBegin;
  PetscCheck(N > 0, PETSC_COMM_SELF, PETSC_ERR_ARG_OUTOFRANGE, "model_forward_cached: N %d must be positive", N);
  PetscCall(model_cached_check_rows(lm, kv, tok, slot, pos, N));
  PetscCall(model_cached_check_head_rows(head_rows, M, N));
  if (!head_rows || M == N) head_rows = NULL, M = N; /* M ascending rows of N: every row */
  nout = cfg->head == MODEL_HEAD_LM ? (size_t)M * cfg->vocab_size : (size_t)M;
  PetscCall(model_acts_cached_resize(lm, N, M));
  PetscCall(be->from_host(a->c_tok, tok, (size_t)N * sizeof(int)));
  PetscCall(be->from_host(a->c_slot, slot, (size_t)N * sizeof(int)));
  PetscCall(be->from_host(a->c_pos, pos, (size_t)N * sizeof(int)));
  nchunk = cached_chunks(lm, slot, pos, N);
  PetscCall(PetscMalloc1(nchunk, &req));
  lm->in_cached = PETSC_TRUE; /* model_matmul: generation's matmuls */
  /* chunk k flows stage to stage while stage p works on chunk k+1; every
   * chunk has its own rows of c_x, so a send's buffer is never reused */
  for (int k = 0; k < nchunk; k++) {
    int r0 = (int)((long)N * k / nchunk), n = (int)((long)N * (k + 1) / nchunk) - r0, m0 = m1;
    req[k] = MPI_REQUEST_NULL;
    if (head_rows)
      while (m1 < M && head_rows[m1] < r0 + n) m1++;
    else m0 = r0, m1 = r0 + n;
    if (model_first_stage(lm)) PetscCall(model_embed(lm, a->c_x + (size_t)r0 * C, a->c_tok + r0, a->c_pos + r0, n));
    else PetscCall(model_pp_recv(lm, a->c_x + (size_t)r0 * C, (size_t)n * C, MODEL_TAG_CACHED, lm->sh.p - 1));
    for (int l = lm->sh.l0; l < lm->sh.l1; l++)
      PetscCall(model_cached_block(lm, kv, l, r0, n, a->c_slot + r0, a->c_pos + r0));
    if (!model_last_stage(lm))
      PetscCall(model_pp_send(lm, a->c_x + (size_t)r0 * C, (size_t)n * C, MODEL_TAG_CACHED, lm->sh.p + 1, &req[k]));
    else PetscCall(cached_head(lm, head_rows, r0, n, m0, m1, out));
  }
  for (int k = 0; k < nchunk; k++) PetscCall(comm_wait(&req[k]));
  lm->in_cached = PETSC_FALSE;
  PetscCall(PetscFree(req));
  /* every stage of the pipeline samples the same tokens from the same logits */
  if (lm->sh.pp > 1)
    PetscCall(comm_bcast_host(&lm->mesh->pp_comm, out, nout * sizeof(float), lm->sh.pp - 1)); /* out is host memory */
  PetscFunctionReturn(PETSC_SUCCESS);
}
