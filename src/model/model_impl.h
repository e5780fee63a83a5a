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
  float *att;                       /* [B,NH,T,T] softmax probabilities */
  float *res2;                      /* [N,C] residual after attention */
  float *ln2, *ln2_mean, *ln2_rstd; /* [N,C], [N], [N] */
  float *fch, *fch_gelu;            /* [N,F] (LLaMA: gate|up [N,2F]), its activation [N,F] */
  float *res3;                      /* [N,C] residual after the MLP (layer output) */
} GPTLayerActs;

/* Activations of gpt_forward, kept for the backward, plus the backward's
 * scratch. Everything lives in one float slab and one int slab that grow
 * when a larger shape arrives; pointers are re-carved for each (B,T) so the
 * per-layer stride is always the current N = B*T. */
typedef struct {
  size_t cap_f, cap_i;  /* slab capacities (elements) */
  float *slab_f;
  int   *slab_i;
} GPTSlab;

struct GPTActs {
  int B, T, N; /* shape of the last gpt_forward (0 before the first) */
  /* pipeline sends from this slot's buffers (output forward, input gradient
   * backward), finished before the slot's buffers are reused */
  MPI_Request send_fwd, send_bwd;

  GPTSlab train;
  int    *tok, *pos, *target;     /* device [N] */
  float  *encoded;                /* [N,C] input of layer 0 */
  float  *layer_base;             /* start of the per-layer block (L copies) */
  size_t  layer_stride;           /* floats per layer */
  float  *lnf, *lnf_mean, *lnf_rstd;
  float  *head_out;               /* logits [N,V] (LM) or values [N] (scalar) */
  float  *lse, *logprob;          /* [N], LM head */
  float  *entropy;                /* [N], LM head: gpt_logprobs_dist's entropies */
  float  *proj;                   /* [N,C] c_proj output before the residual add */
  float  *dres;                   /* [N,C] gradient of the residual stream (accumulates) */
  float  *dA, *dB;                /* [N,4C] gradient scratch, reused inside each layer */
  float  *dhead;                  /* [N] d loss / d logprob or d value */
  float  *dlogits;                /* [N,V], LM head */
  PetscBool have_lse;             /* gpt_logprobs ran after the last forward */

  /* The sampling distribution of the last gpt_logprobs(_dist), which the
   * backward must differentiate. mask_off lives in the int slab ([N+1], LM
   * head); mask_ids has its own buffer because its length is not a function
   * of the shape, grown to mask_cap ints and kept across shapes. */
  float     inv_temp;
  PetscBool have_mask; /* FALSE: every row allows the whole vocabulary */
  int      *mask_off, *mask_ids;
  size_t    mask_cap;

  /* Buffers of gpt_forward_cached, separate so decoding between a forward
   * and its backward cannot clobber what the backward needs. */
  GPTSlab cached;
  int     cached_N;
  int    *c_tok, *c_pos, *c_slot;
  float  *c_x, *c_ln, *c_mean, *c_rstd, *c_qkv, *c_atty, *c_proj, *c_fch, *c_fch_gelu, *c_out;
};

/* Widths of a shard's buffers: C the residual stream, Ca the attention
 * (query) width (n_head * head_dim / tp), Ckv the key/value width (n_kv_head/tp heads, or
 * one replicated head when tp exceeds n_kv_head), F the
 * MLP width (GPT-2 4C/tp, LLaMA n_ffn/tp), V the vocabulary rows (V/tp), NH
 * and NKV the local heads, L the local layers starting at global layer l0. */
typedef struct {
  size_t C, Ca, Ckv, F, V, NH, NKV, L, l0;
  PetscBool lm, llama, qk_norm;
} GPTDims;
static inline GPTDims gpt_dims(const GPTConfig *cfg, const GPTShard *sh)
{
  int     tp = sh ? sh->tp : 1;
  size_t  hd = (size_t)gpt_head_dim(cfg);
  size_t  nkv = (size_t)gpt_kv_heads_local(cfg, tp);
  GPTDims d  = {(size_t)cfg->n_embd, (size_t)(gpt_q_width(cfg) / tp), hd * nkv, (size_t)gpt_n_ffn(cfg) / (size_t)tp,
                (size_t)(cfg->vocab_size / tp), (size_t)(cfg->n_head / tp), nkv,
                (size_t)(sh ? sh->l1 - sh->l0 : cfg->n_layer), (size_t)(sh ? sh->l0 : 0), cfg->head == GPT_HEAD_LM ? PETSC_TRUE : PETSC_FALSE, gpt_is_llama(cfg),
                gpt_is_llama(cfg) && cfg->qk_norm ? PETSC_TRUE : PETSC_FALSE};
  return d;
}
/* Width of a row of q|k|v, of the MLP's first product (LLaMA: gate|up), and
 * of the largest gradient scratch row. */
static inline size_t gpt_dims_qkv(const GPTDims *d) { return d->Ca + 2 * d->Ckv; }
static inline size_t gpt_dims_fc(const GPTDims *d) { return d->llama ? 2 * d->F : d->F; }
static inline size_t gpt_dims_scratch(const GPTDims *d)
{
  size_t w = 4 * d->C;
  w = PetscMax(w, d->Ca);
  w = PetscMax(w, gpt_dims_fc(d));
  w = PetscMax(w, gpt_dims_qkv(d));
  return w;
}

/* acts.c */
PetscErrorCode gpt_acts_create(GPTActs **acts);
PetscErrorCode gpt_acts_destroy(const Backend *be, GPTActs **acts);
PetscErrorCode gpt_acts_train_resize(GPT *gpt, int B, int T);
PetscErrorCode gpt_acts_cached_resize(GPT *gpt, int N);
PetscErrorCode gpt_acts_mask_reserve(GPT *gpt, size_t n);
void           gpt_acts_layer(const GPT *gpt, int l, GPTLayerActs *la);
/* Floats and ints gpt_forward + backward need for (B,T); used for -dry_run. */
void           gpt_acts_train_size(const GPTConfig *cfg, const GPTShard *sh, int B, int T, size_t *nf, size_t *ni);

/* params.c: a view of tensor `i` in a flat buffer (params, grads, m, v). */
static inline float *gpt_view(const GPT *gpt, float *flat, int i) { return flat + gpt->tensors[i].offset; }

/* Indices of the per-layer tensors inside the table, in HF order (GPT-2). */
enum {
  GPT_T_LN1_W, GPT_T_LN1_B, GPT_T_ATTN_W, GPT_T_ATTN_B, GPT_T_PROJ_W, GPT_T_PROJ_B,
  GPT_T_LN2_W, GPT_T_LN2_B, GPT_T_FC_W, GPT_T_FC_B, GPT_T_FCPROJ_W, GPT_T_FCPROJ_B,
  GPT_T_PER_LAYER
};
/* The LLaMA family's: q, k and v (and their biases), gate and up are
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
static inline int ll_slot(const GPTConfig *c, int which) { return which >= LL_T_QN && !c->qkv_bias ? which - 3 : which; }
#define GPT_T_WPE 1 /* GPT-2 only */
static inline int gpt_per_layer(const GPTConfig *c) { return gpt_is_llama(c) ? LL_T_PER_LAYER + (c->qkv_bias ? 3 : 0) + (c->qk_norm ? 2 : 0) : GPT_T_PER_LAYER; }
static inline int gpt_layer_base(const GPTConfig *c) { return gpt_is_llama(c) ? 1 : 2; }
static inline int gpt_tidx_layer(const GPTConfig *c, int l, int which) { return gpt_layer_base(c) + l * gpt_per_layer(c) + (gpt_is_llama(c) ? ll_slot(c, which) : which); }
static inline int gpt_tidx_lnf_w(const GPTConfig *c) { return gpt_layer_base(c) + c->n_layer * gpt_per_layer(c); }
/* GPT-2's ln_f bias (-1 for LLaMA: RMSNorm has none) */
static inline int gpt_tidx_lnf_b(const GPTConfig *c) { return gpt_is_llama(c) ? -1 : gpt_tidx_lnf_w(c) + 1; }
/* the tensor after the final norm: the scalar head's score, or an untied LM head */
static inline int gpt_tidx_score(const GPTConfig *c) { return gpt_tidx_lnf_w(c) + (gpt_is_llama(c) ? 1 : 2); }
static inline int gpt_tidx_lm_head(const GPTConfig *c) { return gpt_untied_head(c) ? gpt_tidx_score(c) : GPT_T_WTE; }

/* Parameter (or gradient) pointers of one layer. GPT-2 fills the first
 * twelve; LLaMA ln1_w, ln2_w and the rest (qkv_b NULL without biases). */
typedef struct {
  float *ln1_w, *ln1_b, *attn_w, *attn_b, *proj_w, *proj_b;
  float *ln2_w, *ln2_b, *fc_w, *fc_b, *fcproj_w, *fcproj_b;
  float *qkv_w, *qkv_b, *o_w, *gate_up_w, *down_w; /* LLaMA: [q|k|v] and [gate|up] start at q and gate */
  float *q_norm_w, *k_norm_w;                      /* Qwen3's per-head norms [hd] (NULL without) */
} GPTLayerParams;

static inline void gpt_layer_params(const GPT *gpt, float *flat, int l, GPTLayerParams *p)
{
  const GPTConfig *c = &gpt->cfg;

  memset(p, 0, sizeof *p);
  if (gpt_is_llama(c)) {
    p->ln1_w     = gpt_view(gpt, flat, gpt_tidx_layer(c, l, LL_T_LN1));
    p->qkv_w     = gpt_view(gpt, flat, gpt_tidx_layer(c, l, LL_T_Q));
    p->qkv_b     = c->qkv_bias ? gpt_view(gpt, flat, gpt_tidx_layer(c, l, LL_T_QB)) : NULL;
    p->q_norm_w  = c->qk_norm ? gpt_view(gpt, flat, gpt_tidx_layer(c, l, LL_T_QN)) : NULL;
    p->k_norm_w  = c->qk_norm ? gpt_view(gpt, flat, gpt_tidx_layer(c, l, LL_T_KN)) : NULL;
    p->o_w       = gpt_view(gpt, flat, gpt_tidx_layer(c, l, LL_T_O));
    p->ln2_w     = gpt_view(gpt, flat, gpt_tidx_layer(c, l, LL_T_LN2));
    p->gate_up_w = gpt_view(gpt, flat, gpt_tidx_layer(c, l, LL_T_GATE));
    p->down_w    = gpt_view(gpt, flat, gpt_tidx_layer(c, l, LL_T_DOWN));
    return;
  }
  float **f[GPT_T_PER_LAYER] = {&p->ln1_w, &p->ln1_b, &p->attn_w, &p->attn_b, &p->proj_w, &p->proj_b,
                                &p->ln2_w, &p->ln2_b, &p->fc_w,   &p->fc_b,   &p->fcproj_w, &p->fcproj_b};
  for (int k = 0; k < GPT_T_PER_LAYER; k++) *f[k] = gpt_view(gpt, flat, gpt_tidx_layer(c, l, k));
}

/* The input norm of a block half: GPT-2 LayerNorm (w, b; mean and rstd
 * kept) or RMSNorm (w; rstd kept). */
PetscErrorCode gpt_norm_forward(const GPT *gpt, float *out, float *mean, float *rstd, const float *x, const float *w, const float *b, int N);
PetscErrorCode gpt_norm_backward(const GPT *gpt, float *dx, float *dw, float *db, const float *dout, const float *x, const float *w, const float *mean, const float *rstd, int N);

/* dist.c: the collectives of a shard (no-ops on one rank). */
PetscErrorCode gpt_tp_sum(const GPT *gpt, float *x, size_t n);      /* all-reduce over the tp group */
/* Stage-to-stage messages. dir is one of the directions below; the MPI tag
 * is GPT_TAG_BASE + (mb * GPT_MSG_MODELS + model) * 3 + dir for the
 * shard's current (model, micro-batch) (gpt_msg_ids), so the messages of
 * two models on the same ranks, and of micro-batches run in any order,
 * pair up whatever order the stages run them in. */
PetscErrorCode gpt_pp_send(const GPT *gpt, const float *x, size_t n, int dir, int to_stage, MPI_Request *req);
PetscErrorCode gpt_pp_recv(const GPT *gpt, float *x, size_t n, int dir, int from_stage);
#define GPT_TAG_BASE   101
#define GPT_TAG_FWD    0
#define GPT_TAG_BWD    1
#define GPT_TAG_CACHED 2
/* Bias of a row-parallel layer: added by tp rank 0 only, before the sum. */
static inline const float *gpt_row_bias(const GPT *gpt, const float *b) { return gpt->sh.t == 0 ? b : NULL; }

/* forward.c */
PetscErrorCode gpt_mlp_forward(const GPT *gpt, const GPTLayerParams *p, const float *x, float *ln, float *mean, float *rstd, float *fch, float *fch_gelu,
                               float *proj, int N);
/* q|k|v of the normed input ln [N,C] (LLaMA: rotated at positions pos;
 * with qk_norm each q and k head normed first, its input and 1/rms kept in
 * qk_in, qk_rstd when they are not NULL). */
PetscErrorCode gpt_qkv_forward(const GPT *gpt, const GPTLayerParams *p, float *qkv, float *qk_in, float *qk_rstd, const float *ln, const int *pos, int N);
/* The attention output projection, summed over the tp group: proj [N,C]. */
PetscErrorCode gpt_attn_proj_forward(const GPT *gpt, const GPTLayerParams *p, float *proj, const float *atty, int N);
PetscErrorCode gpt_head_forward(const GPT *gpt, float *out, const float *x, int N);
PetscErrorCode gpt_final_norm(const GPT *gpt, float *out, float *mean, float *rstd, const float *x, int N);
PetscErrorCode gpt_embed(const GPT *gpt, float *out, const int *tok, const int *pos, int N);
/* dist.c: vocabulary-parallel log-probabilities of the last forward (tp > 1):
 * logprob, entropy (may be NULL) to host, the global lse kept for backward. */
PetscErrorCode gpt_logprobs_tp(GPT *gpt, float *logprob, float *entropy);
PetscErrorCode gpt_grad_sumsq(const GPT *gpt, double *ss);
PetscErrorCode gpt_optim_gather(const GPT *gpt, const float *mine, float *full);
PetscErrorCode gpt_params_share(GPT *gpt);
const float   *gpt_layer_input(const GPT *gpt, int l);
PetscErrorCode gpt_check_forward_done(const GPT *gpt, GPTHead head, const char *fn);
PetscErrorCode gpt_targets_upload(GPT *gpt, const int *target);

#endif
