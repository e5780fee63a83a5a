/* backward.c: gradients of the last model_forward, from d loss / d logprob (LM
 * head) or d loss / d value (scalar head), accumulated into lm->grads.
 * Like llm.c, only the residual-stream gradient (dres) lives across layers;
 * two scratch buffers (rows as wide as the widest activation) hold every
 * other activation gradient in turn. */
#include "model_impl.h"

/* The backward ops accumulate into dinp, so a scratch buffer is cleared first. */
static PetscErrorCode scratch(const Backend *be, float *buf, size_t n)
{
  PetscFunctionBegin;
  PetscCall(be->zero(buf, n * sizeof(float)));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode model_norm_backward(const Model *lm, float *dx, float *dw, float *db, const float *dout, const float *x,
                                   const float *w, const float *mean, const float *rstd, int N)
{
  PetscFunctionBegin;
  if (model_arch(&lm->cfg)->norm == MODEL_NORM_RMS)
    PetscCall(lm->be->rmsnorm_backward(dx, dw, dout, x, w, rstd, N, lm->cfg.n_embd));
  else PetscCall(lm->be->layernorm_backward(dx, dw, db, dout, x, w, mean, rstd, N, lm->cfg.n_embd));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* MLP half: residual3 = residual2 + mlp(norm_2(residual2)); dres is d residual3 on
 * entry and d residual2 on exit. */
static PetscErrorCode mlp_backward(Model *lm, const ModelLayerActs *la, const ModelLayerParams *p,
                                   const ModelLayerParams *g)
{
  const Backend *be = lm->be;
  ModelActs     *a  = lm->acts;
  int            N = a->N, C = lm->cfg.n_embd, F = lm->Fl;
  size_t         NC = (size_t)N * C, NF = (size_t)N * F;
  PetscBool      gated = model_arch(&lm->cfg)->mlp == MODEL_MLP_SWIGLU, ow = model_weights_out_in(&lm->cfg);
  int            W = gated ? 2 * F : F; /* c_fc's output: gate|up, or the GELU's input */

  PetscFunctionBegin;
  /* row-parallel c_proj (down): its input gradient is local; column-parallel
   * c_fc (gate|up): its input gradient is a partial sum over the tp group */
  PetscCall(scratch(be, a->dA, NF)); /* d fch_gelu */
  PetscCall(be->matmul_backward(a->dA, g->down_w, g->down_b, a->dres, la->fch_gelu, p->down_w, N, F, C, ow));
  PetscCall(scratch(be, a->dB, (size_t)N * W)); /* d fch */
  if (gated) PetscCall(be->swiglu_backward(a->dB, la->fch, a->dA, N, F));
  else PetscCall(be->gelu_backward(a->dB, la->fch, a->dA, NF));
  PetscCall(scratch(be, a->dA, NC)); /* d ln2 */
  PetscCall(be->matmul_backward(a->dA, g->fc_w, g->fc_b, a->dB, la->ln2, p->fc_w, N, C, W, ow));
  PetscCall(model_tp_sum(lm, a->dA, NC));
  PetscCall(
      model_norm_backward(lm, a->dres, g->ln2_w, g->ln2_b, a->dA, la->res2, p->ln2_w, la->ln2_mean, la->ln2_rstd, N));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Attention half: residual2 = x + attn(norm_1(x)); dres is d residual2 on entry
 * and d x on exit. LLaMA's rotary embedding is a rotation: its gradient is
 * the inverse rotation of d q|k; Qwen3's per-head norms come before it. */
static PetscErrorCode attn_backward(Model *lm, const ModelLayerActs *la, const ModelLayerParams *p,
                                    const ModelLayerParams *g, const float *x)
{
  const Backend *be = lm->be;
  ModelActs     *a  = lm->acts;
  int            N = a->N, C = lm->cfg.n_embd, Ca = lm->Cl, W = lm->Cl + 2 * lm->Ckvl;
  size_t         NC = (size_t)N * C, NA = (size_t)N * Ca;
  PetscBool      ow = model_weights_out_in(&lm->cfg);

  PetscFunctionBegin;
  PetscCall(scratch(be, a->dA, NA)); /* d atty */
  PetscCall(be->matmul_backward(a->dA, g->o_w, g->o_b, a->dres, la->atty, p->o_w, N, Ca, C, ow));
  PetscCall(scratch(be, a->dB, (size_t)N * W)); /* d qkv */
  PetscCall(be->attention_backward(a->dB, a->dA, la->qkv, la->atty, la->att, a->B, a->T, Ca, lm->NHl, lm->NKVl));
  PetscCall(scratch(be, a->dA, NC)); /* d ln1 */
  if (model_arch(&lm->cfg)->pos == MODEL_POS_ROTARY)
    PetscCall(be->rope(a->dB, a->pos, lm->inv_freq, N, lm->NHl, lm->NKVl, model_head_dim(&lm->cfg), 1));
  if (p->q_norm_w)
    PetscCall(be->qk_norm_backward(a->dB, g->q_norm_w, g->k_norm_w, la->qk_in, la->qk_rstd, p->q_norm_w, p->k_norm_w, N,
                                   lm->NHl, lm->NKVl, model_head_dim(&lm->cfg)));
  PetscCall(be->matmul_backward(a->dA, g->qkv_w, g->qkv_b, a->dB, la->ln1, p->qkv_w, N, C, W, ow));
  PetscCall(model_tp_sum(lm, a->dA, NC));
  PetscCall(model_norm_backward(lm, a->dres, g->ln1_w, g->ln1_b, a->dA, x, p->ln1_w, la->ln1_mean, la->ln1_rstd, N));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode block_backward(Model *lm, int l)
{
  ModelLayerActs la;
  ModelLayerParams p, g;

  PetscFunctionBegin;
  model_acts_layer(lm, l, &la);
  model_layer_params(lm, lm->params, l, &p);
  model_layer_params(lm, lm->grads, l, &g);
  PetscCall(mlp_backward(lm, &la, &p, &g));
  PetscCall(attn_backward(lm, &la, &p, &g, model_layer_input(lm, l)));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* From d lnf_out (in dA, [N,C]) on the last stage, or the gradient the next
 * stage sends, down through this stage's layers; then to the embeddings on
 * the first stage or to the previous stage. */
static PetscErrorCode trunk_backward(Model *lm)
{
  const ModelConfig *cfg = &lm->cfg;
  const Backend   *be  = lm->be;
  ModelActs       *a   = lm->acts;
  int              N = a->N, C = cfg->n_embd, l1 = lm->sh.l1;

  PetscFunctionBegin;
  if (model_last_stage(lm)) {
    PetscCall(scratch(be, a->dres, (size_t)N * C));
    int b = model_tidx_lnf_b(cfg);
    PetscCall(model_norm_backward(lm, a->dres, model_view(lm, lm->grads, model_tidx_lnf_w(cfg)),
                                  b >= 0 ? model_view(lm, lm->grads, b) : NULL, a->dA, model_layer_input(lm, l1),
                                  model_view(lm, lm->params, model_tidx_lnf_w(cfg)), a->lnf_mean, a->lnf_rstd, N));
  } else PetscCall(model_pp_recv(lm, a->dres, (size_t)N * C, MODEL_TAG_BWD, lm->sh.p + 1));
  for (int l = l1 - 1; l >= lm->sh.l0; l--) PetscCall(block_backward(lm, l));
  if (!model_first_stage(lm))
    PetscCall(model_pp_send(lm, a->dres, (size_t)N * C, MODEL_TAG_BWD, lm->sh.p - 1, &a->send_bwd));
  else
    PetscCall(
        be->encoder_backward(model_view(lm, lm->grads, MODEL_T_WTE),
                             model_arch(cfg)->pos == MODEL_POS_ROTARY ? NULL : model_view(lm, lm->grads, MODEL_T_WPE),
                             a->dres, a->tok, a->pos, N, C, lm->v0, lm->Vl));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* A stage before the last: its backward starts from the next stage's gradient. */
static PetscErrorCode check_backward_ready(Model *lm, ModelHead head, const char *fn)
{
  PetscFunctionBegin;
  PetscCheck(lm->cfg.head == head, PETSC_COMM_SELF, PETSC_ERR_ARG_WRONG,
             "%s needs the %s head; this model has the %s head", fn, ModelHeadNames[head],
             ModelHeadNames[lm->cfg.head]);
  PetscCheck(lm->acts->N > 0, PETSC_COMM_SELF, PETSC_ERR_ORDER, "%s: call model_forward first", fn);
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode model_zero_grad(Model *lm)
{
  PetscFunctionBegin;
  PetscCall(lm->be->zero(lm->grads, lm->nparams * sizeof(float)));
  lm->grads_synced = PETSC_FALSE;
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode model_backward_logprob(Model *lm, const int *target, const float *dlogprob)
{
  const ModelConfig *cfg = &lm->cfg;
  const Backend   *be  = lm->be;
  ModelActs       *a   = lm->acts;
  int              N, C = cfg->n_embd, V = cfg->vocab_size;

  PetscFunctionBegin;
  if (!model_last_stage(lm)) {
    PetscCall(check_backward_ready(lm, MODEL_HEAD_LM, "model_backward_logprob"));
    PetscCall(trunk_backward(lm));
    PetscFunctionReturn(PETSC_SUCCESS);
  }
  PetscCall(model_check_forward_done(lm, MODEL_HEAD_LM, "model_backward_logprob"));
  PetscCheck(a->have_lse, PETSC_COMM_SELF, PETSC_ERR_ORDER,
             "model_backward_logprob: call model_logprobs or model_logprobs_dist after model_forward first");
  N = a->N;
  PetscCall(model_targets_upload(lm, target));
  PetscCall(be->from_host(a->dhead, dlogprob, (size_t)N * sizeof(float)));
  PetscCall(scratch(be, a->dA, (size_t)N * C)); /* d lnf_out: a partial sum over the vocabulary shards */
  for (int r0 = 0; r0 < N; r0 += a->tile) { /* tiles: each one's logits computed again */
    int          n = PetscMin(a->tile, N - r0);
    const float *logits;
    const int   *off = a->have_mask ? a->mask_off + r0 : NULL;
    PetscCall(model_head_tile(lm, r0, n, &logits));
    /* the distribution of the last model_logprobs(_dist): the one the logprobs were taken under */
    if (lm->sh.tp > 1)
      PetscCall(be->logprob_backward_shard(a->dlogits, logits, a->lse + r0, a->target + r0, a->dhead + r0, a->inv_temp,
                                           off, a->mask_ids, n, lm->Vl, lm->v0));
    else
      PetscCall(be->logprob_backward(a->dlogits, logits, a->lse + r0, a->target + r0, a->dhead + r0, a->inv_temp, off,
                                     a->mask_ids, n, V));
    PetscCall(be->matmul_backward(a->dA + (size_t)r0 * C, model_view(lm, lm->grads, model_tidx_lm_head(cfg)), NULL,
                                  a->dlogits, a->lnf + (size_t)r0 * C,
                                  model_view(lm, lm->params, model_tidx_lm_head(cfg)), n, C, lm->Vl, PETSC_TRUE));
  }
  PetscCall(model_tp_sum(lm, a->dA, (size_t)N * C));
  PetscCall(trunk_backward(lm));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode model_backward_values(Model *lm, const float *dvalues)
{
  const ModelConfig *cfg = &lm->cfg;
  const Backend   *be  = lm->be;
  ModelActs       *a   = lm->acts;
  int              N, C = cfg->n_embd, s = model_tidx_score(cfg);

  PetscFunctionBegin;
  if (!model_last_stage(lm)) {
    PetscCall(check_backward_ready(lm, MODEL_HEAD_SCALAR, "model_backward_values"));
    PetscCall(trunk_backward(lm));
    PetscFunctionReturn(PETSC_SUCCESS);
  }
  PetscCall(model_check_forward_done(lm, MODEL_HEAD_SCALAR, "model_backward_values"));
  N = a->N;
  PetscCall(be->from_host(a->dhead, dvalues, (size_t)N * sizeof(float)));
  PetscCall(scratch(be, a->dA, (size_t)N * C)); /* d lnf_out */
  PetscCall(be->matmul_backward(a->dA, model_view(lm, lm->grads, s), NULL, a->dhead, a->lnf,
                                model_view(lm, lm->params, s), N, C, 1, PETSC_TRUE));
  PetscCall(trunk_backward(lm));
  PetscFunctionReturn(PETSC_SUCCESS);
}
