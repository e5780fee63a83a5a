/* shard.c: the named tensor table (Hugging Face GPT-2 or LLaMA state-dict
 * names and shapes) of the whole model or of one rank's shard under tensor and
 * pipeline parallelism, the stage split, and copies between the full
 * (logical) layout and a shard's. Checkpoints always hold the full layout. */
#include <string.h>

#include "model_impl.h"

/* ---- stages ----------------------------------------------------------------- */

static double layer_params(const ModelConfig *c)
{
  const ModelArchRow *a = model_arch(c);
  double C = c->n_embd, Q = model_q_width(c), kv = (double)model_head_dim(c) * model_n_kv_head(c), F = model_n_ffn(c);
  double norms = (a->norm == MODEL_NORM_LAYER ? 4 : 2) * C;
  double bias  = a->linear_bias ? Q + 2 * kv + C + F + C : c->qkv_bias ? Q + 2 * kv : 0;

  /* sums of integers below 2^53: exact in any order */
  return 2 * C * Q + 2 * C * kv + (a->mlp == MODEL_MLP_SWIGLU ? 3 : 2) * C * F + norms + bias +
         (c->qk_norm ? 2.0 * model_head_dim(c) : 0);
}
static double first_extra(const ModelConfig *c)
{
  return (double)(c->vocab_size + (model_arch(c)->pos == MODEL_POS_LEARNED ? c->n_positions : 0)) * c->n_embd;
}
static double last_extra(const ModelConfig *c)
{
  return (model_arch(c)->norm == MODEL_NORM_LAYER ? 2.0 : 1.0) * c->n_embd +
         (c->head == MODEL_HEAD_LM ? (double)c->vocab_size * c->n_embd : c->n_embd);
}

/* Weight of a stage holding layers [a, b) of L. */
static double stage_weight(const ModelConfig *c, int pp, int p, int a, int b)
{
  return (b - a) * layer_params(c) + (p == 0 ? first_extra(c) : 0) + (p == pp - 1 ? last_extra(c) : 0);
}

/* Linear partition minimising the heaviest stage (dynamic programme over
 * stage count and layers; L and pp are small). Ties keep the earlier cut. */
void model_stage_layers(const ModelConfig *cfg, int pp, int p, int *l0, int *l1)
{
  int     L = cfg->n_layer, cut[64 + 1];
  double  best[64 + 1][256 + 1];
  int     arg[64 + 1][256 + 1];

  if (pp <= 1 || pp > L || pp > 64 || L > 256) { /* no split, or beyond the table: even split */
    *l0 = (int)((long)L * p / PetscMax(pp, 1));
    *l1 = (int)((long)L * (p + 1) / PetscMax(pp, 1));
    return;
  }
  /* best[k][i]: lightest heaviest stage for the first i layers in stages 0..k-1 */
  for (int i = 0; i <= L; i++) best[1][i] = i >= 1 ? stage_weight(cfg, pp, 0, 0, i) : 1e300, arg[1][i] = 0;
  for (int k = 2; k <= pp; k++)
    for (int i = 0; i <= L; i++) {
      best[k][i] = 1e300;
      arg[k][i]  = 0;
      for (int j = k - 1; j < i; j++) {
        double w = PetscMax(best[k - 1][j], stage_weight(cfg, pp, k - 1, j, i));
        if (w < best[k][i]) best[k][i] = w, arg[k][i] = j;
      }
    }
  cut[pp] = L;
  for (int k = pp; k >= 1; k--) cut[k - 1] = arg[k][cut[k]];
  *l0 = cut[p];
  *l1 = cut[p + 1];
}

void model_shard_of_mesh(const ModelConfig *cfg, const Mesh *mesh, ModelShard *sh)
{
  sh->tp = mesh ? mesh->tp : 1;
  sh->t  = mesh ? mesh->t : 0;
  sh->pp = mesh ? mesh->pp : 1;
  sh->p  = mesh ? mesh->p : 0;
  model_stage_layers(cfg, sh->pp, sh->p, &sh->l0, &sh->l1);
}

PetscErrorCode model_shard_check(const ModelConfig *cfg, int tp, int pp, const char *what)
{
  PetscFunctionBegin;
  PetscCheck(tp >= 1 && cfg->n_head % tp == 0, PETSC_COMM_WORLD, PETSC_ERR_ARG_INCOMP,
             "%stp %d does not divide the model's n_head %d", what, tp, cfg->n_head);
  PetscCheck(cfg->vocab_size % tp == 0, PETSC_COMM_WORLD, PETSC_ERR_ARG_INCOMP,
             "%stp %d does not divide the model's vocab_size %d", what, tp, cfg->vocab_size);
  PetscCheck(model_n_kv_head(cfg) % tp == 0 || tp % model_n_kv_head(cfg) == 0, PETSC_COMM_WORLD, PETSC_ERR_ARG_INCOMP,
             "%stp %d neither divides the model's n_kv_head %d nor is a multiple of it", what, tp,
             model_n_kv_head(cfg));
  PetscCheck(model_n_ffn(cfg) % tp == 0, PETSC_COMM_WORLD, PETSC_ERR_ARG_INCOMP,
             "%stp %d does not divide the model's n_ffn %d", what, tp, model_n_ffn(cfg));
  PetscCheck(pp >= 1 && pp <= cfg->n_layer && pp <= 64, PETSC_COMM_WORLD, PETSC_ERR_ARG_INCOMP,
             "%spp %d must lie in [1, n_layer %d] (and at most 64)", what, pp, cfg->n_layer);
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* ---- the tensor table ------------------------------------------------------- */

typedef struct {
  ModelTensor    *t;
  int             n;
  size_t          off;
  const ModelShard *sh;
} Table;

/* Adds a tensor of full shape d0 x d1 (d1 0: 1-D) split along `split`
 * (-1: replicated) in `groups` blocks; held says whether this shard has it;
 * kv_heads caps the pieces of k and v (0: other tensors). */
static void table_add_kv(Table *tb, const char *name, int d0, int d1, int split, int groups, PetscBool held,
                         PetscBool norm, int kv_heads)
{
  ModelTensor *e  = &tb->t[tb->n++];
  int        tp = tb->sh ? tb->sh->tp : 1, t = tb->sh ? tb->sh->t : 0, rep;

  memset(e, 0, sizeof *e);
  memcpy(e->name, name, PetscMin(strlen(name), sizeof e->name - 1));
  e->ndim      = d1 > 0 ? 2 : 1;
  e->gshape[0] = d0;
  e->gshape[1] = d1 > 0 ? d1 : 0;
  e->split     = split;
  e->groups    = groups;
  e->kv_heads  = kv_heads;
  e->shape[0]  = d0;
  e->shape[1]  = e->gshape[1];
  rep          = model_tensor_rep(e, tp);
  if (split >= 0) e->shape[split] /= tp / rep;
  e->decay = e->ndim == 2 ? PETSC_TRUE : PETSC_FALSE;
  e->numel = held ? (size_t)e->shape[0] * (size_t)(e->ndim == 2 ? e->shape[1] : 1) : 0;
  /* one copy of each piece counts: tp rank 0 for a replicated tensor, the
   * first rank of each block for a replicated k or v piece */
  e->norm   = held && norm && (e->split >= 0 ? t % rep == 0 : t == 0) ? PETSC_TRUE : PETSC_FALSE;
  e->offset = tb->off;
  tb->off += e->numel;
}
static void table_add(Table *tb, const char *name, int d0, int d1, int split, int groups, PetscBool held,
                      PetscBool norm)
{
  table_add_kv(tb, name, d0, d1, split, groups, held, norm, 0);
}

static void table_add_conv1d_layer(Table *tb, int l, int C, PetscBool held)
{
  static const char *const suffix[MODEL_T_PER_LAYER] = { "ln_1.weight",      "ln_1.bias",          "attn.c_attn.weight",
                                                         "attn.c_attn.bias", "attn.c_proj.weight", "attn.c_proj.bias",
                                                         "ln_2.weight",      "ln_2.bias",          "mlp.c_fc.weight",
                                                         "mlp.c_fc.bias",    "mlp.c_proj.weight",  "mlp.c_proj.bias" };
  /* shapes in the Conv1D [in,out] layout (0 as second dim: 1-D), split dimension and groups */
  const int spec[MODEL_T_PER_LAYER][4] = { { C, 0, -1, 1 },    { C, 0, -1, 1 },    { C, 3 * C, 1, 3 },
                                           { 3 * C, 0, 0, 3 }, { C, C, 0, 1 },     { C, 0, -1, 1 },
                                           { C, 0, -1, 1 },    { C, 0, -1, 1 },    { C, 4 * C, 1, 1 },
                                           { 4 * C, 0, 0, 1 }, { 4 * C, C, 0, 1 }, { C, 0, -1, 1 } };
  char name[64];

  for (int k = 0; k < MODEL_T_PER_LAYER; k++) {
    snprintf(name, sizeof name, "transformer.h.%d.%s", l, suffix[k]);
    table_add(tb, name, spec[k][0], spec[k][1], spec[k][2], spec[k][3], held, PETSC_TRUE);
  }
}

/* The Linear layout's layer (the LLaMA family's) in the order of the LL_T_ indices: [out, in]
 * matrices; q, k, v, gate and up split by rows (column-parallel), o and
 * down by columns (row-parallel); the norms replicated; k and v (and their
 * biases) in at most n_kv_head pieces. Q is the query width n_head x
 * head_dim, C the residual stream's. */
static void table_add_linear_layer(Table *tb, const ModelConfig *cfg, int l, PetscBool held)
{
  int C = cfg->n_embd, Q = model_q_width(cfg), hd = model_head_dim(cfg), kv = hd * cfg->n_kv_head, F = cfg->n_ffn;
  const char *suffix[LL_T_PER_LAYER_MAX] = {
    "input_layernorm.weight",  "self_attn.q_proj.weight",         "self_attn.k_proj.weight", "self_attn.v_proj.weight",
    "self_attn.o_proj.weight", "post_attention_layernorm.weight", "mlp.gate_proj.weight",    "mlp.up_proj.weight",
    "mlp.down_proj.weight",    "self_attn.q_proj.bias",           "self_attn.k_proj.bias",   "self_attn.v_proj.bias",
    "self_attn.q_norm.weight", "self_attn.k_norm.weight"
  };
  const int   spec[LL_T_PER_LAYER_MAX][3] = { { C, 0, -1 }, { Q, C, 0 },  { kv, C, 0 },  { kv, C, 0 }, { C, Q, 1 },
                                              { C, 0, -1 }, { F, C, 0 },  { F, C, 0 },   { C, F, 1 },  { Q, 0, 0 },
                                              { kv, 0, 0 }, { kv, 0, 0 }, { hd, 0, -1 }, { hd, 0, -1 } };
  char        name[64];

  for (int k = 0; k < LL_T_PER_LAYER_MAX; k++) {
    PetscBool is_kv = k == LL_T_K || k == LL_T_V || k == LL_T_KB || k == LL_T_VB;
    if ((k >= LL_T_QB && k <= LL_T_VB && !cfg->qkv_bias) || (k >= LL_T_QN && !cfg->qk_norm)) continue;
    snprintf(name, sizeof name, "model.layers.%d.%s", l, suffix[k]);
    table_add_kv(tb, name, spec[k][0], spec[k][1], spec[k][2], 1, held, PETSC_TRUE, is_kv ? cfg->n_kv_head : 0);
  }
}

/* Per layout (ModelLayout order): the names outside the layers (NULL: one
 * the layout's families do not use), and the norm, MLP and linear-layer
 * biases its layers are built with (table_add_conv1d_layer,
 * table_add_linear_layer), which a row of that layout must have. */
typedef struct {
  const char *wte, *wpe, *lnf_w, *lnf_b;
  ModelNorm   norm;
  ModelMlp    mlp;
  PetscBool   linear_bias;
} TableNames;
static const TableNames table_names[] = {
  [MODEL_LAYOUT_CONV1D] = { "transformer.wte.weight", "transformer.wpe.weight", "transformer.ln_f.weight",
                            "transformer.ln_f.bias", MODEL_NORM_LAYER, MODEL_MLP_GELU, PETSC_TRUE },
  [MODEL_LAYOUT_LINEAR] = { "model.embed_tokens.weight", NULL, "model.norm.weight", NULL, MODEL_NORM_RMS,
                            MODEL_MLP_SWIGLU, PETSC_FALSE },
};

PetscErrorCode model_tensor_table_shard(const ModelConfig *cfg, const ModelShard *sh, ModelTensor **tensors,
                                        int *ntensors, size_t *nparams)
{
  const ModelArchRow *arch = model_arch(cfg);
  const TableNames  *nm = &table_names[arch->layout];
  int               C = cfg->n_embd, pp = sh ? sh->pp : 1;
  PetscBool         first = !sh || sh->p == 0, last = !sh || sh->p == pp - 1;
  PetscBool         tied = cfg->head == MODEL_HEAD_LM && !model_untied_head(cfg) ? PETSC_TRUE : PETSC_FALSE;
  Table             tb = {NULL, 0, 0, sh};

  PetscFunctionBegin;
  /* a row (src/model/arch.c) whose fields its layout does not build */
  PetscCheck((arch->pos != MODEL_POS_LEARNED || nm->wpe) && arch->norm == nm->norm && arch->mlp == nm->mlp &&
                 arch->linear_bias == nm->linear_bias,
             PETSC_COMM_SELF, PETSC_ERR_SUP,
             "arch %s: its tensor layout has no position table, or other norms, MLP or biases", arch->name);
  PetscCall(PetscMalloc1(4 + cfg->n_layer * LL_T_PER_LAYER_MAX + 1, &tb.t));
  /* the token embedding on the first stage; a tied LM head's copy on the
   * last, whose gradient the first stage's copy already counts in the norm */
  table_add(&tb, nm->wte, cfg->vocab_size, C, 0, 1, first || (last && tied), first);
  if (arch->pos == MODEL_POS_LEARNED) table_add(&tb, nm->wpe, cfg->n_positions, C, -1, 1, first, PETSC_TRUE);
  for (int l = 0; l < cfg->n_layer; l++) {
    PetscBool held = !sh || (l >= sh->l0 && l < sh->l1);
    if (arch->layout == MODEL_LAYOUT_LINEAR) table_add_linear_layer(&tb, cfg, l, held);
    else table_add_conv1d_layer(&tb, l, C, held);
  }
  table_add(&tb, nm->lnf_w, C, 0, -1, 1, last, PETSC_TRUE);
  if (arch->norm == MODEL_NORM_LAYER) table_add(&tb, nm->lnf_b, C, 0, -1, 1, last, PETSC_TRUE);
  if (model_untied_head(cfg)) table_add(&tb, "lm_head.weight", cfg->vocab_size, C, 0, 1, last, PETSC_TRUE);
  if (cfg->head == MODEL_HEAD_SCALAR) table_add(&tb, "score.weight", 1, C, -1, 1, last, PETSC_TRUE);
  *tensors  = tb.t;
  *ntensors = tb.n;
  *nparams  = tb.off;
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* ---- pieces ----------------------------------------------------------------- */

void model_tensor_piece(const ModelTensor *full, int q, int a, int g, int *lo, int *hi)
{
  int block = full->gshape[full->split < 0 ? 0 : full->split] / full->groups, piece = block / q;

  *lo = g * block + a * piece;
  *hi = *lo + piece;
}

void model_copy_span(const ModelTensor *full, int split, const float *src, int src_D, int src_lo, float *dst, int dst_D,
                     int dst_lo, int n)
{
  if (split == 0) { /* whole rows of the full row length */
    size_t cols = full->ndim == 2 ? (size_t)full->gshape[1] : 1;
    memcpy(dst + (size_t)dst_lo * cols, src + (size_t)src_lo * cols, (size_t)n * cols * sizeof(float));
    return;
  }
  for (int r = 0; r < full->gshape[0]; r++)
    memcpy(dst + (size_t)r * dst_D + dst_lo, src + (size_t)r * src_D + src_lo, (size_t)n * sizeof(float));
}

/* Shard <-> full for one tensor; to_full says the direction. */
static void shard_tensor_copy(const ModelTensor *f, const ModelTensor *s, int tp, int t, float *full, float *shard,
                              PetscBool to_full)
{
  int D, Dl, piece;

  if (s->numel == 0) return;
  if (s->split < 0) {
    if (to_full) memcpy(full + f->offset, shard + s->offset, f->numel * sizeof(float));
    else memcpy(shard + s->offset, full + f->offset, f->numel * sizeof(float));
    return;
  }
  D     = f->gshape[s->split];
  Dl    = D / model_tensor_pieces(s, tp);
  piece = Dl / f->groups;
  for (int g = 0; g < f->groups; g++) {
    int lo, hi;
    model_tensor_piece(f, model_tensor_pieces(s, tp), model_tensor_piece_of(s, tp, t), g, &lo, &hi);
    if (to_full) model_copy_span(f, s->split, shard + s->offset, Dl, g * piece, full + f->offset, D, lo, hi - lo);
    else model_copy_span(f, s->split, full + f->offset, D, lo, shard + s->offset, Dl, g * piece, hi - lo);
  }
}

static PetscErrorCode shard_copy(const ModelConfig *cfg, const ModelShard *sh, float *full, float *shard,
                                 PetscBool to_full)
{
  ModelTensor *ft, *st;
  int        nf, ns;
  size_t     np;

  PetscFunctionBegin;
  PetscCall(model_tensor_table_shard(cfg, NULL, &ft, &nf, &np));
  PetscCall(model_tensor_table_shard(cfg, sh, &st, &ns, &np));
  for (int i = 0; i < nf; i++) shard_tensor_copy(&ft[i], &st[i], sh ? sh->tp : 1, sh ? sh->t : 0, full, shard, to_full);
  PetscCall(PetscFree(ft));
  PetscCall(PetscFree(st));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode model_shard_extract(const ModelConfig *cfg, const ModelShard *sh, const float *full, float *shard)
{
  PetscFunctionBegin;
  PetscCall(shard_copy(cfg, sh, (float *)full, shard, PETSC_FALSE));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode model_shard_insert(const ModelConfig *cfg, const ModelShard *sh, const float *shard, float *full)
{
  PetscFunctionBegin;
  PetscCall(shard_copy(cfg, sh, full, (float *)shard, PETSC_TRUE));
  PetscFunctionReturn(PETSC_SUCCESS);
}
