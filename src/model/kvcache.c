/* kvcache.c: incremental forward for generation. Rows of one call may belong
 * to different slots at different positions (prefill of one prompt, or one
 * decode step across many slots, in any order), so the generation engine can
 * batch continuously and hand a slot's cache elsewhere. */
#include "model_impl.h"

PetscErrorCode gpt_kv_create(const GPT *gpt, int nslot, int Tmax, GPTKVCache **kv)
{
  GPTKVCache *c;
  size_t      n;

  PetscFunctionBegin;
  PetscCheck(nslot > 0 && Tmax > 0, PETSC_COMM_SELF, PETSC_ERR_ARG_OUTOFRANGE, "gpt_kv_create: nslot %d and Tmax %d must be positive", nslot, Tmax);
  PetscCheck(Tmax <= gpt->cfg.n_positions, PETSC_COMM_SELF, PETSC_ERR_ARG_OUTOFRANGE, "gpt_kv_create: Tmax %d exceeds the model's n_positions %d", Tmax,
             gpt->cfg.n_positions);
  PetscCall(PetscNew(&c));
  c->nslot   = nslot;
  c->Tmax    = Tmax;
  c->n_layer = gpt->cfg.n_layer;
  c->n_embd  = gpt->cfg.n_embd;
  n          = (size_t)c->n_layer * nslot * Tmax * c->n_embd;
  PetscCall(gpt->be->alloc(n * sizeof(float), (void **)&c->k));
  PetscCall(gpt->be->alloc(n * sizeof(float), (void **)&c->v));
  *kv = c;
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode gpt_kv_destroy(const GPT *gpt, GPTKVCache **kv)
{
  PetscFunctionBegin;
  if (!*kv) PetscFunctionReturn(PETSC_SUCCESS);
  if ((*kv)->k) PetscCall(gpt->be->free((*kv)->k));
  if ((*kv)->v) PetscCall(gpt->be->free((*kv)->v));
  PetscCall(PetscFree(*kv));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Host-side guards: the ops index wte, wpe and the cache with these values. */
static PetscErrorCode check_rows(const GPT *gpt, const GPTKVCache *kv, const int *tok, const int *slot, const int *pos, int N)
{
  int V = gpt->cfg.vocab_size;

  PetscFunctionBegin;
  PetscCheck(kv->n_layer == gpt->cfg.n_layer && kv->n_embd == gpt->cfg.n_embd, PETSC_COMM_SELF, PETSC_ERR_ARG_INCOMP,
             "gpt_forward_cached: the KV cache was made for another model shape");
  for (int r = 0; r < N; r++) {
    PetscCheck(tok[r] >= 0 && tok[r] < V, PETSC_COMM_SELF, PETSC_ERR_ARG_OUTOFRANGE, "gpt_forward_cached: token %d at row %d is outside [0,%d)", tok[r], r, V);
    PetscCheck(slot[r] >= 0 && slot[r] < kv->nslot, PETSC_COMM_SELF, PETSC_ERR_ARG_OUTOFRANGE, "gpt_forward_cached: slot %d at row %d is outside [0,%d)", slot[r], r,
               kv->nslot);
    PetscCheck(pos[r] >= 0 && pos[r] < gpt->cfg.n_positions && pos[r] < kv->Tmax, PETSC_COMM_SELF, PETSC_ERR_ARG_OUTOFRANGE,
               "gpt_forward_cached: position %d at row %d is outside [0,%d) (n_positions %d, cache Tmax %d)", pos[r], r, PetscMin(gpt->cfg.n_positions, kv->Tmax),
               gpt->cfg.n_positions, kv->Tmax);
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode cached_block(GPT *gpt, GPTKVCache *kv, int l, int N)
{
  const Backend *be = gpt->be;
  GPTActs       *a  = gpt->acts;
  int            C  = gpt->cfg.n_embd;
  size_t         NC = (size_t)N * C, per_layer = (size_t)kv->nslot * kv->Tmax * C;
  GPTLayerParams p;

  PetscFunctionBegin;
  gpt_layer_params(gpt, gpt->params, l, &p);
  PetscCall(be->layernorm_forward(a->c_ln, a->c_mean, a->c_rstd, a->c_x, p.ln1_w, p.ln1_b, N, C));
  PetscCall(be->matmul_forward(a->c_qkv, a->c_ln, p.attn_w, p.attn_b, N, C, 3 * C, PETSC_FALSE));
  PetscCall(be->attention_cached(a->c_atty, kv->k + l * per_layer, kv->v + l * per_layer, a->c_qkv, a->c_slot, a->c_pos, N, kv->Tmax, C, gpt->cfg.n_head));
  PetscCall(be->matmul_forward(a->c_proj, a->c_atty, p.proj_w, p.proj_b, N, C, C, PETSC_FALSE));
  PetscCall(be->axpy(a->c_x, 1.0f, a->c_proj, NC));
  PetscCall(gpt_mlp_forward(be, &p, a->c_x, a->c_ln, a->c_mean, a->c_rstd, a->c_fch, a->c_fch_gelu, a->c_proj, N, C));
  PetscCall(be->axpy(a->c_x, 1.0f, a->c_proj, NC));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode gpt_forward_cached(GPT *gpt, GPTKVCache *kv, const int *tok, const int *slot, const int *pos, int N, float *out)
{
  const GPTConfig *cfg = &gpt->cfg;
  const Backend   *be  = gpt->be;
  GPTActs         *a   = gpt->acts;
  int              C   = cfg->n_embd;
  size_t           nout = cfg->head == GPT_HEAD_LM ? (size_t)N * cfg->vocab_size : (size_t)N;

  PetscFunctionBegin;
  PetscCheck(N > 0, PETSC_COMM_SELF, PETSC_ERR_ARG_OUTOFRANGE, "gpt_forward_cached: N %d must be positive", N);
  PetscCall(check_rows(gpt, kv, tok, slot, pos, N));
  PetscCall(gpt_acts_cached_resize(gpt, N));
  PetscCall(be->from_host(a->c_tok, tok, (size_t)N * sizeof(int)));
  PetscCall(be->from_host(a->c_slot, slot, (size_t)N * sizeof(int)));
  PetscCall(be->from_host(a->c_pos, pos, (size_t)N * sizeof(int)));
  PetscCall(be->encoder_forward(a->c_x, a->c_tok, a->c_pos, gpt_view(gpt, gpt->params, GPT_T_WTE), gpt_view(gpt, gpt->params, GPT_T_WPE), N, C));
  for (int l = 0; l < cfg->n_layer; l++) PetscCall(cached_block(gpt, kv, l, N));
  PetscCall(be->layernorm_forward(a->c_ln, a->c_mean, a->c_rstd, a->c_x, gpt_view(gpt, gpt->params, gpt_tidx_lnf_w(cfg)),
                                  gpt_view(gpt, gpt->params, gpt_tidx_lnf_b(cfg)), N, C));
  PetscCall(gpt_head_forward(gpt, a->c_out, a->c_ln, N));
  PetscCall(be->to_host(out, a->c_out, nout * sizeof(float)));
  PetscFunctionReturn(PETSC_SUCCESS);
}
