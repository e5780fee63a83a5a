/* forward.c: the full forward (GPT-2 or LLaMA) over B sequences of length T (training,
 * scoring), keeping every activation the backward needs, the two output heads,
 * and the log-probabilities of given targets. */
#include "model_impl.h"
#include <math.h>

/* Host-side guard: an out-of-range token would make the encoder read outside wte. */
static PetscErrorCode check_tokens(const ModelConfig *cfg, const int *tok, int N)
{
  PetscFunctionBegin;
  for (int n = 0; n < N; n++)
    PetscCheck(tok[n] >= 0 && tok[n] < cfg->vocab_size, PETSC_COMM_SELF, PETSC_ERR_ARG_OUTOFRANGE,
               "token %d at row %d is outside the vocabulary [0,%d)", tok[n], n, cfg->vocab_size);
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Positions 0..T-1 in every row, copied to the device. */
static PetscErrorCode upload_positions(Model *lm, int B, int T)
{
  int *pos;

  PetscFunctionBegin;
  PetscCall(PetscMalloc1((size_t)B * T, &pos));
  for (int b = 0; b < B; b++)
    for (int t = 0; t < T; t++) pos[b * T + t] = t;
  PetscCall(lm->be->from_host(lm->acts->pos, pos, (size_t)B * T * sizeof(int)));
  PetscCall(PetscFree(pos));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode model_norm_forward(const Model *lm, float *out, float *mean, float *rstd, const float *x, const float *w,
                                  const float *b, int N)
{
  PetscFunctionBegin;
  if (model_arch(&lm->cfg)->norm == MODEL_NORM_RMS)
    PetscCall(lm->be->rmsnorm_forward(out, rstd, x, w, N, lm->cfg.n_embd, (float)lm->cfg.norm_eps));
  else PetscCall(lm->be->layernorm_forward(out, mean, rstd, x, w, b, N, lm->cfg.n_embd));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* proj = c_proj(gelu(c_fc(ln_2(x)))), or for LLaMA down(silu(gate(x')) *
 * up(x')) with x' = RMSNorm(x); ln/mean/rstd/fch/fch_gelu are kept. The
 * cached forward shares this half of the block. Under tensor parallelism
 * c_fc (gate, up) is column-parallel (this rank's F columns) and c_proj
 * (down) row-parallel: partial sums, added over the tp group. */
PetscErrorCode model_mlp_forward(const Model *lm, const ModelLayerParams *p, const float *x, float *ln, float *mean,
                                 float *rstd, float *fch, float *fch_gelu, float *proj, int N)
{
  const Backend *be = lm->be;
  int            C = lm->cfg.n_embd, F = lm->Fl;
  PetscBool      gated = model_arch(&lm->cfg)->mlp == MODEL_MLP_SWIGLU, ow = model_weights_out_in(&lm->cfg);

  PetscFunctionBegin;
  PetscCall(model_norm_forward(lm, ln, mean, rstd, x, p->ln2_w, p->ln2_b, N));
  PetscCall(model_matmul(lm, fch, ln, p->fc_w, p->fc_b, N, C, gated ? 2 * F : F, ow));
  if (gated) PetscCall(be->swiglu_forward(fch_gelu, fch, N, F));
  else PetscCall(be->gelu_forward(fch_gelu, fch, (size_t)N * F));
  PetscCall(model_matmul(lm, proj, fch_gelu, p->down_w, model_row_bias(lm, p->down_b), N, F, C, ow));
  PetscCall(model_tp_sum(lm, proj, (size_t)N * C));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode model_qkv_forward(const Model *lm, const ModelLayerParams *p, float *qkv, float *qk_in, float *qk_rstd,
                                 const float *ln, const int *pos, int N)
{
  int C = lm->cfg.n_embd, W = lm->Cl + 2 * lm->Ckvl;

  PetscFunctionBegin;
  PetscCall(model_matmul(lm, qkv, ln, p->qkv_w, p->qkv_b, N, C, W, model_weights_out_in(&lm->cfg)));
  PetscCall(model_qkv_heads(lm, p, qkv, qk_in, qk_rstd, pos, N));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode model_qkv_heads(const Model *lm, const ModelLayerParams *p, float *qkv, float *qk_in, float *qk_rstd,
                               const int *pos, int N)
{
  const Backend *be = lm->be;
  int            hd = model_head_dim(&lm->cfg);

  PetscFunctionBegin;
  if (p->q_norm_w)
    PetscCall(be->qk_norm_forward(qkv, qk_in, qk_rstd, p->q_norm_w, p->k_norm_w, N, lm->NHl, lm->NKVl, hd,
                                  (float)lm->cfg.norm_eps));
  if (model_arch(&lm->cfg)->pos == MODEL_POS_ROTARY)
    PetscCall(be->rope(qkv, pos, lm->inv_freq, N, lm->NHl, lm->NKVl, hd, 0));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode model_attn_proj_forward(const Model *lm, const ModelLayerParams *p, float *proj, const float *atty,
                                       int N)
{
  int C = lm->cfg.n_embd, Ca = lm->Cl;

  PetscFunctionBegin;
  PetscCall(model_matmul(lm, proj, atty, p->o_w, model_row_bias(lm, p->o_b), N, Ca, C, model_weights_out_in(&lm->cfg)));
  PetscCall(model_tp_sum(lm, proj, (size_t)N * C));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Attention: c_attn (q, k, v) column-parallel (this rank's heads of q, k
 * and v), attention over the local heads, c_proj (o) row-parallel. */
static PetscErrorCode block_forward(Model *lm, int l, const float *x)
{
  const Backend *be = lm->be;
  ModelActs     *a  = lm->acts;
  int            N = a->N, C = lm->cfg.n_embd;
  ModelLayerActs la;
  ModelLayerParams p;

  PetscFunctionBegin;
  model_acts_layer(lm, l, &la);
  model_layer_params(lm, lm->params, l, &p);
  PetscCall(model_norm_forward(lm, la.ln1, la.ln1_mean, la.ln1_rstd, x, p.ln1_w, p.ln1_b, N));
  PetscCall(model_qkv_forward(lm, &p, la.qkv, la.qk_in, la.qk_rstd, la.ln1, a->pos, N));
  PetscCall(be->attention_forward(la.atty, la.att, la.qkv, a->B, a->T, lm->Cl, lm->NHl, lm->NKVl));
  PetscCall(model_attn_proj_forward(lm, &p, a->proj, la.atty, N));
  PetscCall(be->residual_forward(la.res2, x, a->proj, (size_t)N * C));
  PetscCall(model_mlp_forward(lm, &p, la.res2, la.ln2, la.ln2_mean, la.ln2_rstd, la.fch, la.fch_gelu, a->proj, N));
  PetscCall(be->residual_forward(la.res3, la.res2, a->proj, (size_t)N * C));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* The residual stream entering layer l of the shard (l == l1: leaving the
 * stage, entering ln_f on the last one). The first layer's input is the
 * embedding, or what the previous stage sent. */
const float *model_layer_input(const Model *lm, int l)
{
  ModelLayerActs la;

  if (l == lm->sh.l0) return lm->acts->encoded;
  model_acts_layer(lm, l - 1, &la);
  return la.res3;
}

/* logits = x . wte^T (tied LM head; this rank's Vl vocabulary columns; an
 * untied LLaMA head's lm_head the same way) or values = x . score^T (scalar
 * head, replicated). */
PetscErrorCode model_head_forward(const Model *lm, float *out, const float *x, int N)
{
  const ModelConfig *cfg = &lm->cfg;

  PetscFunctionBegin;
  if (cfg->head == MODEL_HEAD_LM) {
    PetscCall(model_matmul(lm, out, x, model_view(lm, lm->params, model_tidx_lm_head(cfg)), NULL, N, cfg->n_embd,
                           lm->Vl, PETSC_TRUE));
  } else {
    PetscCall(model_matmul(lm, out, x, model_view(lm, lm->params, model_tidx_score(cfg)), NULL, N, cfg->n_embd, 1,
                           PETSC_TRUE));
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* The final norm before the head (ln_f, LLaMA's model.norm). */
PetscErrorCode model_final_norm(const Model *lm, float *out, float *mean, float *rstd, const float *x, int N)
{
  const ModelConfig *cfg = &lm->cfg;
  int              b   = model_tidx_lnf_b(cfg);

  PetscFunctionBegin;
  PetscCall(model_norm_forward(lm, out, mean, rstd, x, model_view(lm, lm->params, model_tidx_lnf_w(cfg)),
                               b >= 0 ? model_view(lm, lm->params, b) : NULL, N));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Vocabulary-parallel embedding: each tp rank adds the rows of its
 * vocabulary shard (tp rank 0 also GPT-2's positions), summed over the group. */
PetscErrorCode model_embed(const Model *lm, float *out, const int *tok, const int *pos, int N)
{
  const float *wpe = model_arch(&lm->cfg)->pos == MODEL_POS_ROTARY
                         ? NULL
                         : model_row_bias(lm, model_view(lm, lm->params, MODEL_T_WPE));

  PetscFunctionBegin;
  PetscCall(lm->be->encoder_forward(out, tok, pos, model_view(lm, lm->params, MODEL_T_WTE), wpe, N, lm->cfg.n_embd,
                                    lm->v0, lm->Vl));
  PetscCall(model_tp_sum(lm, out, (size_t)N * lm->cfg.n_embd));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode model_forward(Model *lm, const int *tok, int B, int T)
{
  const ModelConfig *cfg = &lm->cfg;
  const Backend   *be  = lm->be;
  ModelActs       *a;
  int              N = B * T, C = cfg->n_embd, l1 = lm->sh.l1;

  PetscFunctionBegin;
  PetscCheck(B > 0 && T > 0, PETSC_COMM_SELF, PETSC_ERR_ARG_OUTOFRANGE, "model_forward: B %d and T %d must be positive",
             B, T);
  PetscCheck(T <= cfg->n_positions, PETSC_COMM_SELF, PETSC_ERR_ARG_OUTOFRANGE,
             "model_forward: sequence length %d exceeds n_positions %d", T, cfg->n_positions);
  PetscCall(check_tokens(cfg, tok, N));
  PetscCall(model_acts_train_resize(lm, B, T));
  a = lm->acts;
  PetscCall(be->from_host(a->tok, tok, (size_t)N * sizeof(int)));
  PetscCall(upload_positions(lm, B, T));
  if (model_first_stage(lm)) PetscCall(model_embed(lm, a->encoded, a->tok, a->pos, N));
  else PetscCall(model_pp_recv(lm, a->encoded, (size_t)N * C, MODEL_TAG_FWD, lm->sh.p - 1));
  for (int l = lm->sh.l0; l < l1; l++) PetscCall(block_forward(lm, l, model_layer_input(lm, l)));
  if (!model_last_stage(lm)) {
    PetscCall(model_pp_send(lm, model_layer_input(lm, l1), (size_t)N * C, MODEL_TAG_FWD, lm->sh.p + 1, &a->send_fwd));
    PetscFunctionReturn(PETSC_SUCCESS);
  }
  PetscCall(model_final_norm(lm, a->lnf, a->lnf_mean, a->lnf_rstd, model_layer_input(lm, l1), N));
  if (cfg->head == MODEL_HEAD_SCALAR || a->tile == N)
    PetscCall(model_head_forward(lm, a->head_out, a->lnf, N)); /* else tile by tile, when asked */
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode model_head_tile(Model *lm, int r0, int n, const float **logits)
{
  ModelActs *a = lm->acts;

  PetscFunctionBegin;
  PetscCheck(r0 >= 0 && n > 0 && n <= a->tile && r0 + n <= a->N, PETSC_COMM_SELF, PETSC_ERR_PLIB,
             "model_head_tile: rows [%d,%d) of %d in tiles of %d", r0, r0 + n, a->N, a->tile);
  if (a->tile == a->N) *logits = a->head_out + (size_t)r0 * lm->Vl;
  else {
    PetscCall(model_head_forward(lm, a->head_out, a->lnf + (size_t)r0 * lm->cfg.n_embd, n));
    *logits = a->head_out;
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

const float *model_logits(const Model *lm)
{
  return lm->cfg.head == MODEL_HEAD_LM && lm->acts->tile == lm->acts->N ? lm->acts->head_out : NULL;
}

const float *model_values(const Model *lm) { return lm->cfg.head == MODEL_HEAD_SCALAR ? lm->acts->head_out : NULL; }

PetscErrorCode model_check_forward_done(const Model *lm, ModelHead head, const char *fn)
{
  PetscFunctionBegin;
  PetscCheck(model_last_stage(lm), PETSC_COMM_SELF, PETSC_ERR_ARG_WRONG,
             "%s: only the last pipeline stage has the head's output", fn);
  PetscCheck(lm->cfg.head == head, PETSC_COMM_SELF, PETSC_ERR_ARG_WRONG,
             "%s needs the %s head; this model has the %s head", fn, ModelHeadNames[head],
             ModelHeadNames[lm->cfg.head]);
  PetscCheck(lm->acts->N > 0, PETSC_COMM_SELF, PETSC_ERR_ORDER, "%s: call model_forward first", fn);
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Targets to the device; negative ones mean "no target", larger than V is an error. */
PetscErrorCode model_targets_upload(Model *lm, const int *target)
{
  int N = lm->acts->N;

  PetscFunctionBegin;
  for (int n = 0; n < N; n++)
    PetscCheck(target[n] < lm->cfg.vocab_size, PETSC_COMM_SELF, PETSC_ERR_ARG_OUTOFRANGE,
               "target %d at row %d is outside the vocabulary [0,%d)", target[n], n, lm->cfg.vocab_size);
  PetscCall(lm->be->from_host(lm->acts->target, target, (size_t)N * sizeof(int)));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Row by row: ids in the vocabulary, no id twice in a row (it would count a
 * token twice in the normaliser), the target among them. seen[v] holds 1 +
 * the last row that allowed v, so one zeroed array serves every row. A
 * range of one negative id is every id but one (tensor.h): its e must be in
 * the vocabulary and the target another id. */
static PetscErrorCode mask_rows_check(const int *off, const int *ids, const int *target, int N, int V, int *seen)
{
  PetscFunctionBegin;
  for (int n = 0; n < N; n++) {
    PetscBool has_target = off[n + 1] == off[n] ? PETSC_TRUE : PETSC_FALSE; /* an empty range allows everything */

    PetscCheck(off[n + 1] >= off[n], PETSC_COMM_SELF, PETSC_ERR_ARG_WRONG,
               "model_logprobs_dist: mask_off decreases at row %d (%d > %d)", n, off[n], off[n + 1]);
    if (off[n + 1] == off[n] + 1 && ids[off[n]] < 0) {
      long long e = -(long long)ids[off[n]] - 1;
      PetscCheck(e < V, PETSC_COMM_SELF, PETSC_ERR_ARG_OUTOFRANGE,
                 "model_logprobs_dist: row %d allows every token but %lld, outside the vocabulary [0,%d)", n, e, V);
      PetscCheck(target[n] != e, PETSC_COMM_SELF, PETSC_ERR_ARG_OUTOFRANGE,
                 "model_logprobs_dist: row %d has target %d outside its allowed set", n, target[n]);
      continue;
    }
    for (int k = off[n]; k < off[n + 1]; k++) {
      PetscCheck(ids[k] >= 0 && ids[k] < V, PETSC_COMM_SELF, PETSC_ERR_ARG_OUTOFRANGE,
                 "model_logprobs_dist: row %d allows token %d outside the vocabulary [0,%d)", n, ids[k], V);
      PetscCheck(seen[ids[k]] != n + 1, PETSC_COMM_SELF, PETSC_ERR_ARG_WRONG,
                 "model_logprobs_dist: row %d allows token %d twice", n, ids[k]);
      seen[ids[k]] = n + 1;
      if (ids[k] == target[n]) has_target = PETSC_TRUE;
    }
    PetscCheck(target[n] < 0 || has_target, PETSC_COMM_SELF, PETSC_ERR_ARG_OUTOFRANGE,
               "model_logprobs_dist: row %d has target %d outside its allowed set", n, target[n]);
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Host checks of a sampling distribution before anything reaches the device,
 * whose kernels cannot report errors. */
static PetscErrorCode dist_check(const Model *lm, const int *target, const ModelTokenDist *dist)
{
  const int     *off = dist->mask_off;
  int            N = lm->acts->N, V = lm->cfg.vocab_size, *seen;
  PetscErrorCode ierr;

  PetscFunctionBegin;
  PetscCheck(dist->inv_temp > 0 && isfinite(dist->inv_temp), PETSC_COMM_SELF, PETSC_ERR_ARG_OUTOFRANGE,
             "model_logprobs_dist: inv_temp must be positive and finite, not %g", (double)dist->inv_temp);
  if (!off) PetscFunctionReturn(PETSC_SUCCESS);
  PetscCheck(off[0] == 0, PETSC_COMM_SELF, PETSC_ERR_ARG_WRONG, "model_logprobs_dist: mask_off[0] is %d, not 0",
             off[0]);
  PetscCheck(off[N] <= 0 || dist->mask_ids, PETSC_COMM_SELF, PETSC_ERR_ARG_NULL,
             "model_logprobs_dist: mask_ids is NULL but mask_off[%d] is %d", N, off[N]);
  PetscCall(PetscCalloc1(V, &seen));
  ierr = mask_rows_check(off, dist->mask_ids, target, N, V,
                         seen); /* freed before the error goes up: callers may recover */
  PetscCall(PetscFree(seen));
  PetscCall(ierr);
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Keeps the distribution (device copies of the mask) for the backward. */
static PetscErrorCode dist_upload(Model *lm, const int *target, const ModelTokenDist *dist)
{
  ModelActs *a = lm->acts;
  int      N = a->N;

  PetscFunctionBegin;
  a->inv_temp  = dist ? dist->inv_temp : 1.0f;
  a->have_mask = PETSC_FALSE;
  if (!dist) PetscFunctionReturn(PETSC_SUCCESS);
  PetscCall(dist_check(lm, target, dist));
  if (!dist->mask_off || dist->mask_off[N] == 0) PetscFunctionReturn(PETSC_SUCCESS); /* all rows unmasked */
  PetscCall(model_acts_mask_reserve(lm, (size_t)dist->mask_off[N]));
  PetscCall(lm->be->from_host(a->mask_off, dist->mask_off, (size_t)(N + 1) * sizeof(int)));
  PetscCall(lm->be->from_host(a->mask_ids, dist->mask_ids, (size_t)dist->mask_off[N] * sizeof(int)));
  a->have_mask = PETSC_TRUE;
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode model_logprobs_dist(Model *lm, const int *target, const ModelTokenDist *dist, float *logprob,
                                   float *entropy)
{
  ModelActs *a = lm->acts;

  PetscFunctionBegin;
  PetscCall(model_check_forward_done(lm, MODEL_HEAD_LM, "model_logprobs_dist"));
  a->have_lse = PETSC_FALSE; /* a call that fails half-way must not leave a backward to a stale distribution */
  PetscCall(model_targets_upload(lm, target));
  PetscCall(dist_upload(lm, target, dist));
  if (lm->sh.tp > 1) PetscCall(model_logprobs_tp(lm, logprob, entropy));
  else {
    for (int r0 = 0; r0 < a->N; r0 += a->tile) {
      int          n = PetscMin(a->tile, a->N - r0);
      const float *logits;
      PetscCall(model_head_tile(lm, r0, n, &logits));
      PetscCall(lm->be->logprob_forward(a->logprob + r0, a->lse + r0, entropy ? a->entropy + r0 : NULL, logits,
                                        a->target + r0, a->inv_temp, a->have_mask ? a->mask_off + r0 : NULL,
                                        a->mask_ids, n, lm->cfg.vocab_size));
    }
    PetscCall(lm->be->to_host(logprob, a->logprob, (size_t)a->N * sizeof(float)));
    if (entropy) PetscCall(lm->be->to_host(entropy, a->entropy, (size_t)a->N * sizeof(float)));
  }
  a->have_lse = PETSC_TRUE;
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode model_logprobs(Model *lm, const int *target, float *logprob)
{
  PetscFunctionBegin;
  PetscCall(model_logprobs_dist(lm, target, NULL, logprob, NULL));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode model_values_get(Model *lm, float *values)
{
  PetscFunctionBegin;
  PetscCall(model_check_forward_done(lm, MODEL_HEAD_SCALAR, "model_values_get"));
  PetscCall(lm->be->to_host(values, lm->acts->head_out, (size_t)lm->acts->N * sizeof(float)));
  PetscFunctionReturn(PETSC_SUCCESS);
}
