/* backward.c: gradients of the last gpt_forward, from d loss / d logprob (LM
 * head) or d loss / d value (scalar head), accumulated into gpt->grads.
 * Like llm.c, only the residual-stream gradient (dres) lives across layers;
 * two [N,4C] scratch buffers hold every other activation gradient in turn. */
#include "model_impl.h"

/* The backward ops accumulate into dinp, so a scratch buffer is cleared first. */
static PetscErrorCode scratch(const Backend *be, float *buf, size_t n)
{
  PetscFunctionBegin;
  PetscCall(be->zero(buf, n * sizeof(float)));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* MLP half: residual3 = residual2 + mlp(ln_2(residual2)); dres is d residual3 on
 * entry and d residual2 on exit. */
static PetscErrorCode mlp_backward(GPT *gpt, const GPTLayerActs *la, const GPTLayerParams *p, const GPTLayerParams *g)
{
  const Backend *be = gpt->be;
  GPTActs       *a  = gpt->acts;
  int            N = a->N, C = gpt->cfg.n_embd;
  size_t         NC = (size_t)N * C;

  PetscFunctionBegin;
  PetscCall(scratch(be, a->dA, 4 * NC)); /* d fch_gelu */
  PetscCall(be->matmul_backward(a->dA, g->fcproj_w, g->fcproj_b, a->dres, la->fch_gelu, p->fcproj_w, N, 4 * C, C, PETSC_FALSE));
  PetscCall(scratch(be, a->dB, 4 * NC)); /* d fch */
  PetscCall(be->gelu_backward(a->dB, la->fch, a->dA, 4 * NC));
  PetscCall(scratch(be, a->dA, NC)); /* d ln2 */
  PetscCall(be->matmul_backward(a->dA, g->fc_w, g->fc_b, a->dB, la->ln2, p->fc_w, N, C, 4 * C, PETSC_FALSE));
  PetscCall(be->layernorm_backward(a->dres, g->ln2_w, g->ln2_b, a->dA, la->res2, p->ln2_w, la->ln2_mean, la->ln2_rstd, N, C));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Attention half: residual2 = x + attn(ln_1(x)); dres is d residual2 on entry
 * and d x on exit. */
static PetscErrorCode attn_backward(GPT *gpt, const GPTLayerActs *la, const GPTLayerParams *p, const GPTLayerParams *g, const float *x)
{
  const Backend *be = gpt->be;
  GPTActs       *a  = gpt->acts;
  int            N = a->N, C = gpt->cfg.n_embd;
  size_t         NC = (size_t)N * C;

  PetscFunctionBegin;
  PetscCall(scratch(be, a->dA, NC)); /* d atty */
  PetscCall(be->matmul_backward(a->dA, g->proj_w, g->proj_b, a->dres, la->atty, p->proj_w, N, C, C, PETSC_FALSE));
  PetscCall(scratch(be, a->dB, 3 * NC)); /* d qkv */
  PetscCall(be->attention_backward(a->dB, a->dA, la->qkv, la->att, a->B, a->T, C, gpt->cfg.n_head));
  PetscCall(scratch(be, a->dA, NC)); /* d ln1 */
  PetscCall(be->matmul_backward(a->dA, g->attn_w, g->attn_b, a->dB, la->ln1, p->attn_w, N, C, 3 * C, PETSC_FALSE));
  PetscCall(be->layernorm_backward(a->dres, g->ln1_w, g->ln1_b, a->dA, x, p->ln1_w, la->ln1_mean, la->ln1_rstd, N, C));
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

/* From d lnf_out (in dA, [N,C]) down to the embeddings. */
static PetscErrorCode trunk_backward(GPT *gpt)
{
  const GPTConfig *cfg = &gpt->cfg;
  const Backend   *be  = gpt->be;
  GPTActs         *a   = gpt->acts;
  int              N = a->N, C = cfg->n_embd, L = cfg->n_layer;

  PetscFunctionBegin;
  PetscCall(scratch(be, a->dres, (size_t)N * C));
  PetscCall(be->layernorm_backward(a->dres, gpt_view(gpt, gpt->grads, gpt_tidx_lnf_w(cfg)), gpt_view(gpt, gpt->grads, gpt_tidx_lnf_b(cfg)), a->dA,
                                   gpt_layer_input(gpt, L), gpt_view(gpt, gpt->params, gpt_tidx_lnf_w(cfg)), a->lnf_mean, a->lnf_rstd, N, C));
  for (int l = L - 1; l >= 0; l--) PetscCall(block_backward(gpt, l));
  PetscCall(be->encoder_backward(gpt_view(gpt, gpt->grads, GPT_T_WTE), gpt_view(gpt, gpt->grads, GPT_T_WPE), a->dres, a->tok, a->pos, N, C));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode gpt_zero_grad(GPT *gpt)
{
  PetscFunctionBegin;
  PetscCall(gpt->be->zero(gpt->grads, gpt->nparams * sizeof(float)));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode gpt_backward_logprob(GPT *gpt, const int *target, const float *dlogprob)
{
  const GPTConfig *cfg = &gpt->cfg;
  const Backend   *be  = gpt->be;
  GPTActs         *a   = gpt->acts;
  int              N, C = cfg->n_embd, V = cfg->vocab_size;

  PetscFunctionBegin;
  PetscCall(gpt_check_forward_done(gpt, GPT_HEAD_LM, "gpt_backward_logprob"));
  PetscCheck(a->have_lse, PETSC_COMM_SELF, PETSC_ERR_ORDER, "gpt_backward_logprob: call gpt_logprobs or gpt_logprobs_dist after gpt_forward first");
  N = a->N;
  PetscCall(gpt_targets_upload(gpt, target));
  PetscCall(be->from_host(a->dhead, dlogprob, (size_t)N * sizeof(float)));
  /* the distribution of the last gpt_logprobs(_dist): the one the logprobs were taken under */
  PetscCall(be->logprob_backward(a->dlogits, a->head_out, a->lse, a->target, a->dhead, a->inv_temp, a->have_mask ? a->mask_off : NULL, a->mask_ids, N, V));
  PetscCall(scratch(be, a->dA, (size_t)N * C)); /* d lnf_out */
  PetscCall(be->matmul_backward(a->dA, gpt_view(gpt, gpt->grads, GPT_T_WTE), NULL, a->dlogits, a->lnf, gpt_view(gpt, gpt->params, GPT_T_WTE), N, C, V, PETSC_TRUE));
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
  PetscCall(gpt_check_forward_done(gpt, GPT_HEAD_SCALAR, "gpt_backward_values"));
  N = a->N;
  PetscCall(be->from_host(a->dhead, dvalues, (size_t)N * sizeof(float)));
  PetscCall(scratch(be, a->dA, (size_t)N * C)); /* d lnf_out */
  PetscCall(be->matmul_backward(a->dA, gpt_view(gpt, gpt->grads, s), NULL, a->dhead, a->lnf, gpt_view(gpt, gpt->params, s), N, C, 1, PETSC_TRUE));
  PetscCall(trunk_backward(gpt));
  PetscFunctionReturn(PETSC_SUCCESS);
}
