/* model_impl.h: what the files of src/model share and nobody else sees: the
 * activation buffers and the helpers that size and carve them. */
#ifndef RLFUSE_MODEL_IMPL_H
#define RLFUSE_MODEL_IMPL_H

#include "model.h"
#include "sys.h"
#include <string.h>

/* Per-layer views into the training activations (layer l of the last forward). */
typedef struct {
  float *ln1, *ln1_mean, *ln1_rstd; /* [N,C], [N], [N] */
  float *qkv;                       /* [N,Ca+2Ckv] (LLaMA: after the rotary embedding) */
  float *qk_in, *qk_rstd;           /* q|k before the per-head norm [N,Ca+Ckv], its 1/rms [N,NH+NKV] (qk_norm only) */
  float *atty;                      /* [N,C] attention output before c_proj */
  float *att;                       /* what attention_backward needs: the log-sum-exp [B,NH,T] */
  float *res2;                      /* [N,C] residual after attention */
  float *ln2, *ln2_mean, *ln2_rstd; /* [N,C], [N], [N] */
  float *fch, *fch_gelu;            /* [N,F] (LLaMA: gate|up [N,2F]), its activation [N,F] */
  float *res3;                      /* [N,C] residual after the MLP (layer output) */
} ModelLayerActs;

/* Activations of model_forward, kept for the backward, plus the backward's
 * scratch. Everything lives in one float slab and one int slab that grow
 * when a larger shape arrives; pointers are re-carved for each (B,T) so the
 * per-layer stride is always the current N = B*T. */
typedef struct {
  size_t cap_f, cap_i;  /* slab capacities (elements) */
  float *slab_f;
  int   *slab_i;
} ModelSlab;

struct ModelActs {
  int B, T, N; /* shape of the last model_forward (0 before the first) */
  /* pipeline sends from this slot's buffers (output forward, input gradient
   * backward), finished before the slot's buffers are reused */
  MPI_Request send_fwd, send_bwd;

  ModelSlab train;
  int    *tok, *pos, *target;     /* device [N] */
  float  *encoded;                /* [N,C] input of layer 0 */
  float  *layer_base;             /* start of the per-layer block (L copies) */
  size_t  layer_stride;           /* floats per layer */
  float  *lnf, *lnf_mean, *lnf_rstd;
  float  *head_out;               /* logits [tile,V] (LM) or values [N] (scalar) */
  int tile; /* LM head: rows of logits held at once, min(N, model_logits_tile_rows); tile < N: the head runs tile by
               tile */
  float  *lse, *logprob;          /* [N], LM head */
  float  *entropy;                /* [N], LM head: model_logprobs_dist's entropies */
  float  *proj;                   /* [N,C] c_proj output before the residual add */
  float  *dres;                   /* [N,C] gradient of the residual stream (accumulates) */
  float  *dA, *dB;                /* [N,4C] gradient scratch, reused inside each layer */
  float  *dhead;                  /* [N] d loss / d logprob or d value */
  float  *dlogits;                /* [tile,V], LM head */
  PetscBool have_lse;             /* model_logprobs ran after the last forward */

  /* The sampling distribution of the last model_logprobs(_dist), which the
   * backward must differentiate. mask_off lives in the int slab ([N+1], LM
   * head); mask_ids has its own buffer because its length is not a function
   * of the shape, grown to mask_cap ints and kept across shapes. */
  float     inv_temp;
  PetscBool have_mask; /* FALSE: every row allows the whole vocabulary */
  int      *mask_off, *mask_ids;
  size_t    mask_cap;

  /* Buffers of model_forward_cached, separate so decoding between a forward
   * and its backward cannot clobber what the backward needs. */
  ModelSlab cached;
  int     cached_N, cached_M; /* rows of the call, and of them the rows the head runs on */
  int    *c_tok, *c_pos, *c_slot;
  float  *c_x, *c_ln, *c_mean, *c_rstd, *c_qkv, *c_atty, *c_proj, *c_fch, *c_fch_gelu, *c_sel, *c_out;
};

/* Widths of a shard's buffers: C the residual stream, Ca the attention
 * (query) width (n_head * head_dim / tp), Ckv the key/value width (n_kv_head/tp heads, or
 * one replicated head when tp exceeds n_kv_head), F the
 * MLP width (GPT-2 4C/tp, LLaMA n_ffn/tp), V the vocabulary rows (V/tp), NH
 * and NKV the local heads, L the local layers starting at global layer l0. */
typedef struct {
  size_t C, Ca, Ckv, F, V, NH, NKV, L, l0;
  PetscBool lm, gated, qk_norm; /* LM head; SwiGLU (gate|up); per-head q/k norms */
} ModelDims;
static inline ModelDims model_dims(const ModelConfig *cfg, const ModelShard *sh)
{
  int     tp = sh ? sh->tp : 1;
  size_t  hd = (size_t)model_head_dim(cfg);
  size_t  nkv = (size_t)model_kv_heads_local(cfg, tp);
  ModelDims d   = { (size_t)cfg->n_embd,
                    (size_t)(model_q_width(cfg) / tp),
                    hd * nkv,
                    (size_t)model_n_ffn(cfg) / (size_t)tp,
                    (size_t)(cfg->vocab_size / tp),
                    (size_t)(cfg->n_head / tp),
                    nkv,
                    (size_t)(sh ? sh->l1 - sh->l0 : cfg->n_layer),
                    (size_t)(sh ? sh->l0 : 0),
                  cfg->head == MODEL_HEAD_LM ? PETSC_TRUE : PETSC_FALSE,
                  model_arch(cfg)->mlp == MODEL_MLP_SWIGLU ? PETSC_TRUE : PETSC_FALSE,
                  model_arch(cfg)->qk_norm && cfg->qk_norm ? PETSC_TRUE : PETSC_FALSE };
  return d;
}
/* Width of a row of q|k|v, of the MLP's first product (LLaMA: gate|up), and
 * of the largest gradient scratch row. */
static inline size_t model_dims_qkv(const ModelDims *d) { return d->Ca + 2 * d->Ckv; }
static inline size_t model_dims_fc(const ModelDims *d) { return d->gated ? 2 * d->F : d->F; }
static inline size_t model_dims_scratch(const ModelDims *d)
{
  size_t w = 4 * d->C;
  w = PetscMax(w, d->Ca);
  w = PetscMax(w, model_dims_fc(d));
  w = PetscMax(w, model_dims_qkv(d));
  return w;
}

/* acts.c */
PetscErrorCode model_acts_create(ModelActs **acts);
PetscErrorCode model_acts_destroy(const Backend *be, ModelActs **acts);
PetscErrorCode model_acts_train_resize(Model *lm, int B, int T);
PetscErrorCode model_acts_cached_resize(Model *lm, int N, int M);
PetscErrorCode model_acts_mask_reserve(Model *lm, size_t n);
void           model_acts_layer(const Model *lm, int l, ModelLayerActs *la);
/* Floats and ints model_forward + backward need for (B,T); used for -dry_run. */
void           model_acts_train_size(const ModelConfig *cfg, const ModelShard *sh, int B, int T, size_t *nf,
                                     size_t *ni);

/* params.c: a view of tensor `i` in a flat buffer (params, grads, m, v). */
static inline float *model_view(const Model *lm, float *flat, int i) { return flat + lm->tensors[i].offset; }

/* Indices of the per-layer tensors inside the table, in HF order (the Conv1D
 * layout, GPT-2). */
enum {
  MODEL_T_LN1_W, MODEL_T_LN1_B, MODEL_T_ATTN_W, MODEL_T_ATTN_B, MODEL_T_PROJ_W, MODEL_T_PROJ_B,
  MODEL_T_LN2_W, MODEL_T_LN2_B, MODEL_T_FC_W, MODEL_T_FC_B, MODEL_T_FCPROJ_W, MODEL_T_FCPROJ_B,
  MODEL_T_PER_LAYER
};
/* The Linear layout's (the LLaMA family): q, k and v (and their biases), gate and up are
 * neighbours in the flat buffer, in this order, so one matmul with the
 * first one's pointer computes q|k|v (gate|up) from the concatenated
 * [out, in] weights, on any shard (each holds its rows of all three). */
enum {
  LL_T_LN1, LL_T_Q, LL_T_K, LL_T_V, LL_T_O, LL_T_LN2, LL_T_GATE, LL_T_UP, LL_T_DOWN,
  LL_T_PER_LAYER, /* without biases */
  LL_T_QB = LL_T_PER_LAYER, LL_T_KB, LL_T_VB,
  LL_T_QN, LL_T_KN, /* q and k norms (Qwen3): after the biases, or in their places without them */
  LL_T_PER_LAYER_MAX
};
/* The slot of an optional per-layer tensor in a layer's run of them: the
 * norms move up by three without biases. */
static inline int ll_slot(const ModelConfig *c, int which)
{
  return which >= LL_T_QN && !c->qkv_bias ? which - 3 : which;
}
#define MODEL_T_WPE 1 /* the learned position table, after the token embedding */
static inline PetscBool model_linear_layout(const ModelConfig *c)
{
  return model_arch(c)->layout == MODEL_LAYOUT_LINEAR ? PETSC_TRUE : PETSC_FALSE;
}
static inline int model_per_layer(const ModelConfig *c)
{
  return model_linear_layout(c) ? LL_T_PER_LAYER + (c->qkv_bias ? 3 : 0) + (c->qk_norm ? 2 : 0) : MODEL_T_PER_LAYER;
}
static inline int model_layer_base(const ModelConfig *c)
{
  return model_arch(c)->pos == MODEL_POS_LEARNED ? MODEL_T_WPE + 1 : MODEL_T_WPE;
}
static inline int model_tidx_layer(const ModelConfig *c, int l, int which)
{
  return model_layer_base(c) + l * model_per_layer(c) + (model_linear_layout(c) ? ll_slot(c, which) : which);
}
static inline int model_tidx_lnf_w(const ModelConfig *c)
{
  return model_layer_base(c) + c->n_layer * model_per_layer(c);
}
/* the final LayerNorm's bias (-1: RMSNorm has none) */
static inline int model_tidx_lnf_b(const ModelConfig *c)
{
  return model_arch(c)->norm == MODEL_NORM_LAYER ? model_tidx_lnf_w(c) + 1 : -1;
}
/* the tensor after the final norm: the scalar head's score, or an untied LM head */
static inline int model_tidx_score(const ModelConfig *c)
{
  return model_tidx_lnf_w(c) + (model_arch(c)->norm == MODEL_NORM_LAYER ? 2 : 1);
}
static inline int model_tidx_lm_head(const ModelConfig *c)
{
  return model_untied_head(c) ? model_tidx_score(c) : MODEL_T_WTE;
}

/* Parameter (or gradient) pointers of one layer, the same for every layout:
 * a pointer is NULL where the row has no such tensor (biases, norm biases,
 * q/k norms), so the block's code passes them on without asking. */
typedef struct {
  float *ln1_w, *ln1_b, *ln2_w, *ln2_b; /* the two norms (biases: LayerNorm only) */
  float *qkv_w, *qkv_b, *o_w,
      *o_b; /* attention: q|k|v (fused c_attn, or q with k, v after it) and the output projection */
  float *fc_w, *fc_b, *down_w, *down_b; /* MLP: c_fc (SwiGLU: gate|up from gate) and c_proj (down) */
  float *q_norm_w, *k_norm_w;           /* Qwen3's per-head norms [hd] */
} ModelLayerParams;

static inline void model_layer_params(const Model *lm, float *flat, int l, ModelLayerParams *p)
{
  const ModelConfig *c = &lm->cfg;

  memset(p, 0, sizeof *p);
  if (model_linear_layout(c)) {
    p->ln1_w    = model_view(lm, flat, model_tidx_layer(c, l, LL_T_LN1));
    p->qkv_w    = model_view(lm, flat, model_tidx_layer(c, l, LL_T_Q));
    p->qkv_b    = c->qkv_bias ? model_view(lm, flat, model_tidx_layer(c, l, LL_T_QB)) : NULL;
    p->q_norm_w = c->qk_norm ? model_view(lm, flat, model_tidx_layer(c, l, LL_T_QN)) : NULL;
    p->k_norm_w = c->qk_norm ? model_view(lm, flat, model_tidx_layer(c, l, LL_T_KN)) : NULL;
    p->o_w      = model_view(lm, flat, model_tidx_layer(c, l, LL_T_O));
    p->ln2_w    = model_view(lm, flat, model_tidx_layer(c, l, LL_T_LN2));
    p->fc_w     = model_view(lm, flat, model_tidx_layer(c, l, LL_T_GATE));
    p->down_w   = model_view(lm, flat, model_tidx_layer(c, l, LL_T_DOWN));
    return;
  }
  float **f[MODEL_T_PER_LAYER] = {&p->ln1_w, &p->ln1_b, &p->qkv_w, &p->qkv_b, &p->o_w,  &p->o_b,
                                  &p->ln2_w, &p->ln2_b, &p->fc_w,  &p->fc_b,  &p->down_w, &p->down_b};
  for (int k = 0; k < MODEL_T_PER_LAYER; k++) *f[k] = model_view(lm, flat, model_tidx_layer(c, l, k));
}

/* The input norm of a block half: GPT-2 LayerNorm (w, b; mean and rstd
 * kept) or RMSNorm (w; rstd kept). */
PetscErrorCode model_norm_forward(const Model *lm, float *out, float *mean, float *rstd, const float *x, const float *w,
                                  const float *b, int N);
PetscErrorCode model_norm_backward(const Model *lm, float *dx, float *dw, float *db, const float *dout, const float *x,
                                   const float *w, const float *mean, const float *rstd, int N);

/* dist.c: the collectives of a shard (no-ops on one rank). */
PetscErrorCode model_tp_sum(const Model *lm, float *x, size_t n);      /* all-reduce over the tp group */
/* Stage-to-stage messages. dir is one of the directions below; the MPI tag
 * is MODEL_TAG_BASE + (mb * MODEL_MSG_MODELS + model) * 3 + dir for the
 * shard's current (model, micro-batch) (model_msg_ids), so the messages of
 * two models on the same ranks, and of micro-batches run in any order,
 * pair up whatever order the stages run them in. */
PetscErrorCode model_pp_send(const Model *lm, const float *x, size_t n, int dir, int to_stage, MPI_Request *req);
PetscErrorCode model_pp_recv(const Model *lm, float *x, size_t n, int dir, int from_stage);
#define MODEL_TAG_BASE 101
#define MODEL_TAG_FWD  0
#define MODEL_TAG_BWD  1
#define MODEL_TAG_CACHED 2
/* Bias of a row-parallel layer: added by tp rank 0 only, before the sum. */
static inline const float *model_row_bias(const Model *lm, const float *b) { return lm->sh.t == 0 ? b : NULL; }

/* forward.c */
PetscErrorCode model_mlp_forward(const Model *lm, const ModelLayerParams *p, const float *x, float *ln, float *mean,
                                 float *rstd, float *fch, float *fch_gelu, float *proj, int N);
/* q|k|v of the normed input ln [N,C] (LLaMA: rotated at positions pos;
 * with qk_norm each q and k head normed first, its input and 1/rms kept in
 * qk_in, qk_rstd when they are not NULL). */
PetscErrorCode model_qkv_forward(const Model *lm, const ModelLayerParams *p, float *qkv, float *qk_in, float *qk_rstd,
                                 const float *ln, const int *pos, int N);
/* model_qkv_forward after its matmul: the per-head norms and the rotation of qkv */
PetscErrorCode model_qkv_heads(const Model *lm, const ModelLayerParams *p, float *qkv, float *qk_in, float *qk_rstd,
                               const int *pos, int N);
/* The attention output projection, summed over the tp group: proj [N,C]. */
PetscErrorCode model_attn_proj_forward(const Model *lm, const ModelLayerParams *p, float *proj, const float *atty,
                                       int N);
/* A forward matmul of the model: in a cached forward of a model set to
 * model_cached_batch_invariant, the backend's row-order one. */
static inline PetscErrorCode model_matmul(const Model *lm, float *out, const float *inp, const float *w,
                                          const float *bias, int N, int C, int OC, PetscBool transposed)
{
  if (lm->in_cached && lm->cached_rows) return lm->be->matmul_forward_rows(out, inp, w, bias, N, C, OC, transposed);
  return lm->be->matmul_forward(out, inp, w, bias, N, C, OC, transposed);
}

/* kvcache.c / decode.c: one layer of the cached forward on rows [r0,
 * r0+n) (slot and pos: those rows'); the recorded forwards of a cache. */
PetscErrorCode model_cached_block(Model *lm, ModelKVCache *kv, int l, int r0, int n, const int *slot, const int *pos);
/* Whether a cached forward of n rows takes the backend's fused matmuls
 * (Backend.matmul_fused): a backend that has them, few enough rows, one
 * tensor rank (a projection's partial sums need their all-reduce before the
 * residual add) and not -gen_batch_invariant's row-wise matmuls. */
PetscBool model_cached_fused(const Model *lm, int n);
/* The rows of a cached forward that the head runs on (see
 * model_forward_cached), checked; gathered into a compact buffer. */
PetscErrorCode model_cached_check_head_rows(const int *head_rows, int M, int N);
PetscErrorCode model_gather_rows(const Model *lm, float *out, const float *x, const int *rows, int M);
PetscErrorCode model_graphs_destroy(const Model *lm, ModelKVCache *kv);
PetscErrorCode model_head_forward(const Model *lm, float *out, const float *x, int N);
/* forward.c: the logits [n,Vl] of rows [r0, r0+n) of the last forward (the
 * LM head; n at most acts->tile): a view of the head's output, or, when the
 * head runs tile by tile, that tile computed now into it (valid until the
 * next tile). */
PetscErrorCode model_head_tile(Model *lm, int r0, int n, const float **logits);
PetscErrorCode model_final_norm(const Model *lm, float *out, float *mean, float *rstd, const float *x, int N);
PetscErrorCode model_embed(const Model *lm, float *out, const int *tok, const int *pos, int N);
/* dist.c: vocabulary-parallel log-probabilities of the last forward (tp > 1):
 * logprob, entropy (may be NULL) to host, the global lse kept for backward. */
PetscErrorCode model_logprobs_tp(Model *lm, float *logprob, float *entropy);
PetscErrorCode model_grad_sumsq(const Model *lm, double *ss);
PetscErrorCode model_optim_gather(const Model *lm, const float *mine, float *full);
PetscErrorCode model_params_share(Model *lm);
const float   *model_layer_input(const Model *lm, int l);
PetscErrorCode model_check_forward_done(const Model *lm, ModelHead head, const char *fn);
PetscErrorCode model_targets_upload(Model *lm, const int *target);

#endif
