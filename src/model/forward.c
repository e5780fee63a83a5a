/* forward.c: the full forward (GPT-2 or LLaMA) over B sequences of length T (training,
 * scoring), keeping every activation the backward needs, the two output heads,
 * and the log-probabilities of given targets. */
#include "model_impl.h"
#include <math.h>

/* Host-side guard: an out-of-range token would make the encoder read outside wte. */
static PetscErrorCode check_tokens(const GPTConfig *cfg, const int *tok, int N)
{
  PetscFunctionBegin;
  for (int n = 0; n < N; n++)
    PetscCheck(tok[n] >= 0 && tok[n] < cfg->vocab_size, PETSC_COMM_SELF, PETSC_ERR_ARG_OUTOFRANGE, "token %d at row %d is outside the vocabulary [0,%d)", tok[n], n,
               cfg->vocab_size);
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Positions 0..T-1 in every row, copied to the device. */
static PetscErrorCode upload_positions(GPT *gpt, int B, int T)
{
  int *pos;

  PetscFunctionBegin;
  PetscCall(PetscMalloc1((size_t)B * T, &pos));
  for (int b = 0; b < B; b++)
    for (int t = 0; t < T; t++) pos[b * T + t] = t;
  PetscCall(gpt->be->from_host(gpt->acts->pos, pos, (size_t)B * T * sizeof(int)));
  PetscCall(PetscFree(pos));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode gpt_norm_forward(const GPT *gpt, float *out, float *mean, float *rstd, const float *x, const float *w, const float *b, int N)
{
  PetscFunctionBegin;
  if (gpt_is_llama(&gpt->cfg)) PetscCall(gpt->be->rmsnorm_forward(out, rstd, x, w, N, gpt->cfg.n_embd, (float)gpt->cfg.norm_eps));
  else PetscCall(gpt->be->layernorm_forward(out, mean, rstd, x, w, b, N, gpt->cfg.n_embd));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* proj = c_proj(gelu(c_fc(ln_2(x)))), or for LLaMA down(silu(gate(x')) *
 * up(x')) with x' = RMSNorm(x); ln/mean/rstd/fch/fch_gelu are kept. The
 * cached forward shares this half of the block. Under tensor parallelism
 * c_fc (gate, up) is column-parallel (this rank's F columns) and c_proj
 * (down) row-parallel: partial sums, added over the tp group. */
PetscErrorCode gpt_mlp_forward(const GPT *gpt, const GPTLayerParams *p, const float *x, float *ln, float *mean, float *rstd, float *fch, float *fch_gelu,
                               float *proj, int N)
{
  const Backend *be = gpt->be;
  int            C = gpt->cfg.n_embd, F = gpt->Fl;

  PetscFunctionBegin;
  PetscCall(gpt_norm_forward(gpt, ln, mean, rstd, x, p->ln2_w, p->ln2_b, N));
  if (gpt_is_llama(&gpt->cfg)) {
    PetscCall(be->matmul_forward(fch, ln, p->gate_up_w, NULL, N, C, 2 * F, PETSC_TRUE));
    PetscCall(be->swiglu_forward(fch_gelu, fch, N, F));
    PetscCall(be->matmul_forward(proj, fch_gelu, p->down_w, NULL, N, F, C, PETSC_TRUE));
  } else {
    PetscCall(be->matmul_forward(fch, ln, p->fc_w, p->fc_b, N, C, F, PETSC_FALSE));
    PetscCall(be->gelu_forward(fch_gelu, fch, (size_t)N * F));
    PetscCall(be->matmul_forward(proj, fch_gelu, p->fcproj_w, gpt_row_bias(gpt, p->fcproj_b), N, F, C, PETSC_FALSE));
  }
  PetscCall(gpt_tp_sum(gpt, proj, (size_t)N * C));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode gpt_qkv_forward(const GPT *gpt, const GPTLayerParams *p, float *qkv, float *qk_in, float *qk_rstd, const float *ln, const int *pos, int N)
{
  const Backend *be = gpt->be;
  int            C = gpt->cfg.n_embd, W = gpt->Cl + 2 * gpt->Ckvl, hd = gpt_head_dim(&gpt->cfg);

  PetscFunctionBegin;
  if (!gpt_is_llama(&gpt->cfg)) {
    PetscCall(be->matmul_forward(qkv, ln, p->attn_w, p->attn_b, N, C, W, PETSC_FALSE));
    PetscFunctionReturn(PETSC_SUCCESS);
  }
  PetscCall(be->matmul_forward(qkv, ln, p->qkv_w, p->qkv_b, N, C, W, PETSC_TRUE));
  if (gpt->cfg.qk_norm) PetscCall(be->qk_norm_forward(qkv, qk_in, qk_rstd, p->q_norm_w, p->k_norm_w, N, gpt->NHl, gpt->NKVl, hd, (float)gpt->cfg.norm_eps));
  PetscCall(be->rope(qkv, pos, gpt->inv_freq, N, gpt->NHl, gpt->NKVl, hd, 0));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode gpt_attn_proj_forward(const GPT *gpt, const GPTLayerParams *p, float *proj, const float *atty, int N)
{
  int C = gpt->cfg.n_embd, Ca = gpt->Cl;

  PetscFunctionBegin;
  if (gpt_is_llama(&gpt->cfg)) PetscCall(gpt->be->matmul_forward(proj, atty, p->o_w, NULL, N, Ca, C, PETSC_TRUE));
  else PetscCall(gpt->be->matmul_forward(proj, atty, p->proj_w, gpt_row_bias(gpt, p->proj_b), N, Ca, C, PETSC_FALSE));
  PetscCall(gpt_tp_sum(gpt, proj, (size_t)N * C));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Attention: c_attn (q, k, v) column-parallel (this rank's heads of q, k
 * and v), attention over the local heads, c_proj (o) row-parallel. */
static PetscErrorCode block_forward(GPT *gpt, int l, const float *x)
{
  const Backend *be = gpt->be;
  GPTActs       *a  = gpt->acts;
  int            N = a->N, C = gpt->cfg.n_embd;
  GPTLayerActs   la;
  GPTLayerParams p;

  PetscFunctionBegin;
  gpt_acts_layer(gpt, l, &la);
  gpt_layer_params(gpt, gpt->params, l, &p);
  PetscCall(gpt_norm_forward(gpt, la.ln1, la.ln1_mean, la.ln1_rstd, x, p.ln1_w, p.ln1_b, N));
  PetscCall(gpt_qkv_forward(gpt, &p, la.qkv, la.qk_in, la.qk_rstd, la.ln1, a->pos, N));
  PetscCall(be->attention_forward(la.atty, la.att, la.qkv, a->B, a->T, gpt->Cl, gpt->NHl, gpt->NKVl));
  PetscCall(gpt_attn_proj_forward(gpt, &p, a->proj, la.atty, N));
  PetscCall(be->residual_forward(la.res2, x, a->proj, (size_t)N * C));
  PetscCall(gpt_mlp_forward(gpt, &p, la.res2, la.ln2, la.ln2_mean, la.ln2_rstd, la.fch, la.fch_gelu, a->proj, N));
  PetscCall(be->residual_forward(la.res3, la.res2, a->proj, (size_t)N * C));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* The residual stream entering layer l of the shard (l == l1: leaving the
 * stage, entering ln_f on the last one). The first layer's input is the
 * embedding, or what the previous stage sent. */
const float *gpt_layer_input(const GPT *gpt, int l)
{
  GPTLayerActs la;

  if (l == gpt->sh.l0) return gpt->acts->encoded;
  gpt_acts_layer(gpt, l - 1, &la);
  return la.res3;
}

/* logits = x . wte^T (tied LM head; this rank's Vl vocabulary columns; an
 * untied LLaMA head's lm_head the same way) or values = x . score^T (scalar
 * head, replicated). */
PetscErrorCode gpt_head_forward(const GPT *gpt, float *out, const float *x, int N)
{
  const GPTConfig *cfg = &gpt->cfg;

  PetscFunctionBegin;
  if (cfg->head == GPT_HEAD_LM) {
    PetscCall(gpt->be->matmul_forward(out, x, gpt_view(gpt, gpt->params, gpt_tidx_lm_head(cfg)), NULL, N, cfg->n_embd, gpt->Vl, PETSC_TRUE));
  } else {
    PetscCall(gpt->be->matmul_forward(out, x, gpt_view(gpt, gpt->params, gpt_tidx_score(cfg)), NULL, N, cfg->n_embd, 1, PETSC_TRUE));
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* The final norm before the head (ln_f, LLaMA's model.norm). */
PetscErrorCode gpt_final_norm(const GPT *gpt, float *out, float *mean, float *rstd, const float *x, int N)
{
  const GPTConfig *cfg = &gpt->cfg;
  int              b   = gpt_tidx_lnf_b(cfg);

  PetscFunctionBegin;
  PetscCall(gpt_norm_forward(gpt, out, mean, rstd, x, gpt_view(gpt, gpt->params, gpt_tidx_lnf_w(cfg)), b >= 0 ? gpt_view(gpt, gpt->params, b) : NULL, N));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Vocabulary-parallel embedding: each tp rank adds the rows of its
 * vocabulary shard (tp rank 0 also GPT-2's positions), summed over the group. */
PetscErrorCode gpt_embed(const GPT *gpt, float *out, const int *tok, const int *pos, int N)
{
  const float *wpe = gpt_is_llama(&gpt->cfg) ? NULL : gpt_row_bias(gpt, gpt_view(gpt, gpt->params, GPT_T_WPE));

  PetscFunctionBegin;
  PetscCall(gpt->be->encoder_forward(out, tok, pos, gpt_view(gpt, gpt->params, GPT_T_WTE), wpe, N, gpt->cfg.n_embd, gpt->v0, gpt->Vl));
  PetscCall(gpt_tp_sum(gpt, out, (size_t)N * gpt->cfg.n_embd));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode gpt_forward(GPT *gpt, const int *tok, int B, int T)
{
  const GPTConfig *cfg = &gpt->cfg;
  const Backend   *be  = gpt->be;
  GPTActs         *a;
  int              N = B * T, C = cfg->n_embd, l1 = gpt->sh.l1;

  PetscFunctionBegin;
  PetscCheck(B > 0 && T > 0, PETSC_COMM_SELF, PETSC_ERR_ARG_OUTOFRANGE, "gpt_forward: B %d and T %d must be positive", B, T);
  PetscCheck(T <= cfg->n_positions, PETSC_COMM_SELF, PETSC_ERR_ARG_OUTOFRANGE, "gpt_forward: sequence length %d exceeds n_positions %d", T, cfg->n_positions);
  PetscCall(check_tokens(cfg, tok, N));
  PetscCall(gpt_acts_train_resize(gpt, B, T));
  a = gpt->acts;
  PetscCall(be->from_host(a->tok, tok, (size_t)N * sizeof(int)));
  PetscCall(upload_positions(gpt, B, T));
  if (gpt_first_stage(gpt)) PetscCall(gpt_embed(gpt, a->encoded, a->tok, a->pos, N));
  else PetscCall(gpt_pp_recv(gpt, a->encoded, (size_t)N * C, GPT_TAG_FWD, gpt->sh.p - 1));
  for (int l = gpt->sh.l0; l < l1; l++) PetscCall(block_forward(gpt, l, gpt_layer_input(gpt, l)));
  if (!gpt_last_stage(gpt)) {
    PetscCall(gpt_pp_send(gpt, gpt_layer_input(gpt, l1), (size_t)N * C, GPT_TAG_FWD, gpt->sh.p + 1, &a->send_fwd));
    PetscFunctionReturn(PETSC_SUCCESS);
  }
  PetscCall(gpt_final_norm(gpt, a->lnf, a->lnf_mean, a->lnf_rstd, gpt_layer_input(gpt, l1), N));
  PetscCall(gpt_head_forward(gpt, a->head_out, a->lnf, N));
  PetscFunctionReturn(PETSC_SUCCESS);
}

const float *gpt_logits(const GPT *gpt) { return gpt->cfg.head == GPT_HEAD_LM ? gpt->acts->head_out : NULL; }

const float *gpt_values(const GPT *gpt) { return gpt->cfg.head == GPT_HEAD_SCALAR ? gpt->acts->head_out : NULL; }

PetscErrorCode gpt_check_forward_done(const GPT *gpt, GPTHead head, const char *fn)
{
  PetscFunctionBegin;
  PetscCheck(gpt_last_stage(gpt), PETSC_COMM_SELF, PETSC_ERR_ARG_WRONG, "%s: only the last pipeline stage has the head's output", fn);
  PetscCheck(gpt->cfg.head == head, PETSC_COMM_SELF, PETSC_ERR_ARG_WRONG, "%s needs the %s head; this model has the %s head", fn, GPTHeadNames[head],
             GPTHeadNames[gpt->cfg.head]);
  PetscCheck(gpt->acts->N > 0, PETSC_COMM_SELF, PETSC_ERR_ORDER, "%s: call gpt_forward first", fn);
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Targets to the device; negative ones mean "no target", larger than V is an error. */
PetscErrorCode gpt_targets_upload(GPT *gpt, const int *target)
{
  int N = gpt->acts->N;

  PetscFunctionBegin;
  for (int n = 0; n < N; n++)
    PetscCheck(target[n] < gpt->cfg.vocab_size, PETSC_COMM_SELF, PETSC_ERR_ARG_OUTOFRANGE, "target %d at row %d is outside the vocabulary [0,%d)", target[n], n,
               gpt->cfg.vocab_size);
  PetscCall(gpt->be->from_host(gpt->acts->target, target, (size_t)N * sizeof(int)));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Row by row: ids in the vocabulary, no id twice in a row (it would count a
 * token twice in the normaliser), the target among them. seen[v] holds 1 +
 * the last row that allowed v, so one zeroed array serves every row. */
static PetscErrorCode mask_rows_check(const int *off, const int *ids, const int *target, int N, int V, int *seen)
{
  PetscFunctionBegin;
  for (int n = 0; n < N; n++) {
    PetscBool has_target = off[n + 1] == off[n] ? PETSC_TRUE : PETSC_FALSE; /* an empty range allows everything */

    PetscCheck(off[n + 1] >= off[n], PETSC_COMM_SELF, PETSC_ERR_ARG_WRONG, "gpt_logprobs_dist: mask_off decreases at row %d (%d > %d)", n, off[n], off[n + 1]);
    for (int k = off[n]; k < off[n + 1]; k++) {
      PetscCheck(ids[k] >= 0 && ids[k] < V, PETSC_COMM_SELF, PETSC_ERR_ARG_OUTOFRANGE, "gpt_logprobs_dist: row %d allows token %d outside the vocabulary [0,%d)", n,
                 ids[k], V);
      PetscCheck(seen[ids[k]] != n + 1, PETSC_COMM_SELF, PETSC_ERR_ARG_WRONG, "gpt_logprobs_dist: row %d allows token %d twice", n, ids[k]);
      seen[ids[k]] = n + 1;
      if (ids[k] == target[n]) has_target = PETSC_TRUE;
    }
    PetscCheck(target[n] < 0 || has_target, PETSC_COMM_SELF, PETSC_ERR_ARG_OUTOFRANGE, "gpt_logprobs_dist: row %d has target %d outside its allowed set", n,
               target[n]);
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Host checks of a sampling distribution before anything reaches the device,
 * whose kernels cannot report errors. */
static PetscErrorCode dist_check(const GPT *gpt, const int *target, const GPTTokenDist *dist)
{
  const int     *off = dist->mask_off;
  int            N = gpt->acts->N, V = gpt->cfg.vocab_size, *seen;
  PetscErrorCode ierr;

  PetscFunctionBegin;
  PetscCheck(dist->inv_temp > 0 && isfinite(dist->inv_temp), PETSC_COMM_SELF, PETSC_ERR_ARG_OUTOFRANGE, "gpt_logprobs_dist: inv_temp must be positive and finite, not %g",
             (double)dist->inv_temp);
  if (!off) PetscFunctionReturn(PETSC_SUCCESS);
  PetscCheck(off[0] == 0, PETSC_COMM_SELF, PETSC_ERR_ARG_WRONG, "gpt_logprobs_dist: mask_off[0] is %d, not 0", off[0]);
  PetscCheck(off[N] <= 0 || dist->mask_ids, PETSC_COMM_SELF, PETSC_ERR_ARG_NULL, "gpt_logprobs_dist: mask_ids is NULL but mask_off[%d] is %d", N, off[N]);
  PetscCall(PetscCalloc1(V, &seen));
  ierr = mask_rows_check(off, dist->mask_ids, target, N, V, seen); /* freed before the error goes up: callers may recover */
  PetscCall(PetscFree(seen));
  PetscCall(ierr);
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Keeps the distribution (device copies of the mask) for the backward. */
static PetscErrorCode dist_upload(GPT *gpt, const int *target, const GPTTokenDist *dist)
{
  GPTActs *a = gpt->acts;
  int      N = a->N;

  PetscFunctionBegin;
  a->inv_temp  = dist ? dist->inv_temp : 1.0f;
  a->have_mask = PETSC_FALSE;
  if (!dist) PetscFunctionReturn(PETSC_SUCCESS);
  PetscCall(dist_check(gpt, target, dist));
  if (!dist->mask_off || dist->mask_off[N] == 0) PetscFunctionReturn(PETSC_SUCCESS); /* all rows unmasked */
  PetscCall(gpt_acts_mask_reserve(gpt, (size_t)dist->mask_off[N]));
  PetscCall(gpt->be->from_host(a->mask_off, dist->mask_off, (size_t)(N + 1) * sizeof(int)));
  PetscCall(gpt->be->from_host(a->mask_ids, dist->mask_ids, (size_t)dist->mask_off[N] * sizeof(int)));
  a->have_mask = PETSC_TRUE;
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode gpt_logprobs_dist(GPT *gpt, const int *target, const GPTTokenDist *dist, float *logprob, float *entropy)
{
  GPTActs *a = gpt->acts;

  PetscFunctionBegin;
  PetscCall(gpt_check_forward_done(gpt, GPT_HEAD_LM, "gpt_logprobs_dist"));
  a->have_lse = PETSC_FALSE; /* a call that fails half-way must not leave a backward to a stale distribution */
  PetscCall(gpt_targets_upload(gpt, target));
  PetscCall(dist_upload(gpt, target, dist));
  if (gpt->sh.tp > 1) PetscCall(gpt_logprobs_tp(gpt, logprob, entropy));
  else {
    PetscCall(gpt->be->logprob_forward(a->logprob, a->lse, entropy ? a->entropy : NULL, a->head_out, a->target, a->inv_temp, a->have_mask ? a->mask_off : NULL,
                                       a->mask_ids, a->N, gpt->cfg.vocab_size));
    PetscCall(gpt->be->to_host(logprob, a->logprob, (size_t)a->N * sizeof(float)));
    if (entropy) PetscCall(gpt->be->to_host(entropy, a->entropy, (size_t)a->N * sizeof(float)));
  }
  a->have_lse = PETSC_TRUE;
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode gpt_logprobs(GPT *gpt, const int *target, float *logprob)
{
  PetscFunctionBegin;
  PetscCall(gpt_logprobs_dist(gpt, target, NULL, logprob, NULL));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode gpt_values_get(GPT *gpt, float *values)
{
  PetscFunctionBegin;
  PetscCall(gpt_check_forward_done(gpt, GPT_HEAD_SCALAR, "gpt_values_get"));
  PetscCall(gpt->be->to_host(values, gpt->acts->head_out, (size_t)gpt->acts->N * sizeof(float)));
  PetscFunctionReturn(PETSC_SUCCESS);
}
