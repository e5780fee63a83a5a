/* backward.c: gradients of the last gpt_forward, from d loss / d logprob (LM
 * head) or d loss / d value (scalar head), accumulated into gpt->grads.
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

PetscErrorCode gpt_norm_backward(const GPT *gpt, float *dx, float *dw, float *db, const float *dout, const float *x, const float *w, const float *mean, const float *rstd, int N)
{
  PetscFunctionBegin;
  if (gpt_is_llama(&gpt->cfg)) PetscCall(gpt->be->rmsnorm_backward(dx, dw, dout, x, w, rstd, N, gpt->cfg.n_embd));
  else PetscCall(gpt->be->layernorm_backward(dx, dw, db, dout, x, w, mean, rstd, N, gpt->cfg.n_embd));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* MLP half: residual3 = residual2 + mlp(norm_2(residual2)); dres is d residual3 on
 * entry and d residual2 on exit. */
static PetscErrorCode mlp_backward(GPT *gpt, const GPTLayerActs *la, const GPTLayerParams *p, const GPTLayerParams *g)
{
  const Backend *be = gpt->be;
  GPTActs       *a  = gpt->acts;
  int            N = a->N, C = gpt->cfg.n_embd, F = gpt->Fl;
  size_t         NC = (size_t)N * C, NF = (size_t)N * F;

  PetscFunctionBegin;
  /* row-parallel c_proj (down): its input gradient is local; column-parallel
   * c_fc (gate|up): its input gradient is a partial sum over the tp group */
  PetscCall(scratch(be, a->dA, NF)); /* d fch_gelu */
  if (gpt_is_llama(&gpt->cfg)) {
    PetscCall(be->matmul_backward(a->dA, g->down_w, NULL, a->dres, la->fch_gelu, p->down_w, N, F, C, PETSC_TRUE));
    PetscCall(scratch(be, a->dB, 2 * NF)); /* d gate|up */
    PetscCall(be->swiglu_backward(a->dB, la->fch, a->dA, N, F));
    PetscCall(scratch(be, a->dA, NC)); /* d ln2 */
    PetscCall(be->matmul_backward(a->dA, g->gate_up_w, NULL, a->dB, la->ln2, p->gate_up_w, N, C, 2 * F, PETSC_TRUE));
  } else {
    PetscCall(be->matmul_backward(a->dA, g->fcproj_w, g->fcproj_b, a->dres, la->fch_gelu, p->fcproj_w, N, F, C, PETSC_FALSE));
    PetscCall(scratch(be, a->dB, NF)); /* d fch */
    PetscCall(be->gelu_backward(a->dB, la->fch, a->dA, NF));
    PetscCall(scratch(be, a->dA, NC)); /* d ln2 */
    PetscCall(be->matmul_backward(a->dA, g->fc_w, g->fc_b, a->dB, la->ln2, p->fc_w, N, C, F, PETSC_FALSE));
  }
  PetscCall(gpt_tp_sum(gpt, a->dA, NC));
  PetscCall(gpt_norm_backward(gpt, a->dres, g->ln2_w, g->ln2_b, a->dA, la->res2, p->ln2_w, la->ln2_mean, la->ln2_rstd, N));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Attention half: residual2 = x + attn(norm_1(x)); dres is d residual2 on entry
 * and d x on exit. LLaMA's rotary embedding is a rotation: its gradient is
 * the inverse rotation of d q|k; Qwen3's per-head norms come before it. */
static PetscErrorCode attn_backward(GPT *gpt, const GPTLayerActs *la, const GPTLayerParams *p, const GPTLayerParams *g, const float *x)
{
  const Backend *be = gpt->be;
  GPTActs       *a  = gpt->acts;
  int            N = a->N, C = gpt->cfg.n_embd, Ca = gpt->Cl, W = gpt->Cl + 2 * gpt->Ckvl;
  size_t         NC = (size_t)N * C, NA = (size_t)N * Ca;
  PetscBool      llama = gpt_is_llama(&gpt->cfg);

  PetscFunctionBegin;
  PetscCall(scratch(be, a->dA, NA)); /* d atty */
  if (llama) PetscCall(be->matmul_backward(a->dA, g->o_w, NULL, a->dres, la->atty, p->o_w, N, Ca, C, PETSC_TRUE));
  else PetscCall(be->matmul_backward(a->dA, g->proj_w, g->proj_b, a->dres, la->atty, p->proj_w, N, Ca, C, PETSC_FALSE));
  PetscCall(scratch(be, a->dB, (size_t)N * W)); /* d qkv */
  PetscCall(be->attention_backward(a->dB, a->dA, la->qkv, la->att, a->B, a->T, Ca, gpt->NHl, gpt->NKVl));
  PetscCall(scratch(be, a->dA, NC)); /* d ln1 */
  if (llama) {
    PetscCall(be->rope(a->dB, a->pos, gpt->inv_freq, N, gpt->NHl, gpt->NKVl, gpt_head_dim(&gpt->cfg), 1));
    if (gpt->cfg.qk_norm) PetscCall(be->qk_norm_backward(a->dB, g->q_norm_w, g->k_norm_w, la->qk_in, la->qk_rstd, p->q_norm_w, p->k_norm_w, N, gpt->NHl, gpt->NKVl, gpt_head_dim(&gpt->cfg)));
    PetscCall(be->matmul_backward(a->dA, g->qkv_w, g->qkv_b, a->dB, la->ln1, p->qkv_w, N, C, W, PETSC_TRUE));
  } else PetscCall(be->matmul_backward(a->dA, g->attn_w, g->attn_b, a->dB, la->ln1, p->attn_w, N, C, W, PETSC_FALSE));
  PetscCall(gpt_tp_sum(gpt, a->dA, NC));
  PetscCall(gpt_norm_backward(gpt, a->dres, g->ln1_w, g->ln1_b, a->dA, x, p->ln1_w, la->ln1_mean, la->ln1_rstd, N));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode block_backward(GPT *gpt, int l)
{
  GPTLayerActs   la;
  GPTLayerParams p, g;

  PetscFunctionBegin;
  gpt_acts_layer(gpt, l, &la);
  gpt_layer_params(gpt, gpt->params, l, &p);
  gpt_layer_params(gpt, gpt->grads, l, &g);
  PetscCall(mlp_backward(gpt, &la, &p, &g));
  PetscCall(attn_backward(gpt, &la, &p, &g, gpt_layer_input(gpt, l)));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* From d lnf_out (in dA, [N,C]) on the last stage, or the gradient the next
 * stage sends, down through this stage's layers; then to the embeddings on
 * the first stage or to the previous stage. */
static PetscErrorCode trunk_backward(GPT *gpt)
{
  const GPTConfig *cfg = &gpt->cfg;
  const Backend   *be  = gpt->be;
  GPTActs         *a   = gpt->acts;
  int              N = a->N, C = cfg->n_embd, l1 = gpt->sh.l1;

  PetscFunctionBegin;
  if (gpt_last_stage(gpt)) {
    PetscCall(scratch(be, a->dres, (size_t)N * C));
    int b = gpt_tidx_lnf_b(cfg);
    PetscCall(gpt_norm_backward(gpt, a->dres, gpt_view(gpt, gpt->grads, gpt_tidx_lnf_w(cfg)), b >= 0 ? gpt_view(gpt, gpt->grads, b) : NULL, a->dA,
                                gpt_layer_input(gpt, l1), gpt_view(gpt, gpt->params, gpt_tidx_lnf_w(cfg)), a->lnf_mean, a->lnf_rstd, N));
  } else PetscCall(gpt_pp_recv(gpt, a->dres, (size_t)N * C, GPT_TAG_BWD, gpt->sh.p + 1));
  for (int l = l1 - 1; l >= gpt->sh.l0; l--) PetscCall(block_backward(gpt, l));
  if (!gpt_first_stage(gpt)) PetscCall(gpt_pp_send(gpt, a->dres, (size_t)N * C, GPT_TAG_BWD, gpt->sh.p - 1, &a->send_bwd));
  else
    PetscCall(be->encoder_backward(gpt_view(gpt, gpt->grads, GPT_T_WTE), gpt_is_llama(cfg) ? NULL : gpt_view(gpt, gpt->grads, GPT_T_WPE), a->dres, a->tok, a->pos, N, C,
                                   gpt->v0, gpt->Vl));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* A stage before the last: its backward starts from the next stage's gradient. */
static PetscErrorCode check_backward_ready(GPT *gpt, GPTHead head, const char *fn)
{
  PetscFunctionBegin;
  PetscCheck(gpt->cfg.head == head, PETSC_COMM_SELF, PETSC_ERR_ARG_WRONG, "%s needs the %s head; this model has the %s head", fn, GPTHeadNames[head], GPTHeadNames[gpt->cfg.head]);
  PetscCheck(gpt->acts->N > 0, PETSC_COMM_SELF, PETSC_ERR_ORDER, "%s: call gpt_forward first", fn);
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode gpt_zero_grad(GPT *gpt)
{
  PetscFunctionBegin;
  PetscCall(gpt->be->zero(gpt->grads, gpt->nparams * sizeof(float)));
  gpt->grads_synced = PETSC_FALSE;
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode gpt_backward_logprob(GPT *gpt, const int *target, const float *dlogprob)
{
  const GPTConfig *cfg = &gpt->cfg;
  const Backend   *be  = gpt->be;
  GPTActs         *a   = gpt->acts;
  int              N, C = cfg->n_embd, V = cfg->vocab_size;

  PetscFunctionBegin;
  if (!gpt_last_stage(gpt)) {
    PetscCall(check_backward_ready(gpt, GPT_HEAD_LM, "gpt_backward_logprob"));
    PetscCall(trunk_backward(gpt));
    PetscFunctionReturn(PETSC_SUCCESS);
  }
  PetscCall(gpt_check_forward_done(gpt, GPT_HEAD_LM, "gpt_backward_logprob"));
  PetscCheck(a->have_lse, PETSC_COMM_SELF, PETSC_ERR_ORDER, "gpt_backward_logprob: call gpt_logprobs or gpt_logprobs_dist after gpt_forward first");
  N = a->N;
  PetscCall(gpt_targets_upload(gpt, target));
  PetscCall(be->from_host(a->dhead, dlogprob, (size_t)N * sizeof(float)));
  /* the distribution of the last gpt_logprobs(_dist): the one the logprobs were taken under */
  if (gpt->sh.tp > 1)
    PetscCall(be->logprob_backward_shard(a->dlogits, a->head_out, a->lse, a->target, a->dhead, a->inv_temp, a->have_mask ? a->mask_off : NULL, a->mask_ids, N, gpt->Vl,
                                         gpt->v0));
  else PetscCall(be->logprob_backward(a->dlogits, a->head_out, a->lse, a->target, a->dhead, a->inv_temp, a->have_mask ? a->mask_off : NULL, a->mask_ids, N, V));
  PetscCall(scratch(be, a->dA, (size_t)N * C)); /* d lnf_out: a partial sum over the vocabulary shards */
  PetscCall(be->matmul_backward(a->dA, gpt_view(gpt, gpt->grads, gpt_tidx_lm_head(cfg)), NULL, a->dlogits, a->lnf, gpt_view(gpt, gpt->params, gpt_tidx_lm_head(cfg)), N,
                                C, gpt->Vl, PETSC_TRUE));
  PetscCall(gpt_tp_sum(gpt, a->dA, (size_t)N * C));
  PetscCall(trunk_backward(gpt));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode gpt_backward_values(GPT *gpt, const float *dvalues)
{
  const GPTConfig *cfg = &gpt->cfg;
  const Backend   *be  = gpt->be;
  GPTActs         *a   = gpt->acts;
  int              N, C = cfg->n_embd, s = gpt_tidx_score(cfg);

  PetscFunctionBegin;
  if (!gpt_last_stage(gpt)) {
    PetscCall(check_backward_ready(gpt, GPT_HEAD_SCALAR, "gpt_backward_values"));
    PetscCall(trunk_backward(gpt));
    PetscFunctionReturn(PETSC_SUCCESS);
  }
  PetscCall(gpt_check_forward_done(gpt, GPT_HEAD_SCALAR, "gpt_backward_values"));
  N = a->N;
  PetscCall(be->from_host(a->dhead, dvalues, (size_t)N * sizeof(float)));
  PetscCall(scratch(be, a->dA, (size_t)N * C)); /* d lnf_out */
  PetscCall(be->matmul_backward(a->dA, gpt_view(gpt, gpt->grads, s), NULL, a->dhead, a->lnf, gpt_view(gpt, gpt->params, s), N, C, 1, PETSC_TRUE));
  PetscCall(trunk_backward(gpt));
  PetscFunctionReturn(PETSC_SUCCESS);
}
