/* params.c: model configuration from options, the named tensor table over one
 * flat parameter buffer (Hugging Face GPT-2 state-dict order and shapes),
 * creation, random initialisation, and host copies of parameters and AdamW
 * moments (what checkpoints read and write). */
#include <math.h>
#include <string.h>

#include "model_impl.h"

const char *const GPTHeadNames[] = {"lm", "scalar", "GPTHead", "GPT_HEAD_", NULL};

/* RfOptInt yields a PetscInt; the config stores int. */
#define RfOptIntAsInt(name, help, def, dst) \
  do {                                      \
    PetscInt t_;                            \
    RfOptInt(name, help, def, &t_);         \
    *(dst) = (int)t_;                       \
  } while (0)

PetscErrorCode gpt_config_set_from_options(const char *prefix, GPTConfig *cfg)
{
  PetscInt head = GPT_HEAD_LM;

  PetscFunctionBegin;
  PetscOptionsBegin(PETSC_COMM_WORLD, prefix, "GPT-2 model options", NULL);
  RfOptIntAsInt("-n_layer", "Number of transformer blocks", 2, &cfg->n_layer);
  RfOptIntAsInt("-n_head", "Number of attention heads (must divide n_embd)", 4, &cfg->n_head);
  RfOptIntAsInt("-n_embd", "Width of the residual stream (embedding size C)", 128, &cfg->n_embd);
  RfOptIntAsInt("-vocab_size", "Vocabulary size V (rows of wte)", 64, &cfg->vocab_size);
  RfOptIntAsInt("-n_positions", "Maximum sequence length (rows of wpe)", 64, &cfg->n_positions);
  RfOptEnum("-head", "Output head: lm (logits tied to wte) or scalar (one value per token, for critic/reward)", GPTHeadNames, 2, &head);
  PetscOptionsEnd();
  cfg->head = (GPTHead)head;
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode gpt_config_check(const GPTConfig *cfg, const char *prefix)
{
  const char *p = prefix ? prefix : "";

  PetscFunctionBegin;
  PetscCheck(cfg->n_layer > 0, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE, "-%sn_layer %d must be positive", p, cfg->n_layer);
  PetscCheck(cfg->n_head > 0, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE, "-%sn_head %d must be positive", p, cfg->n_head);
  PetscCheck(cfg->n_embd > 0, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE, "-%sn_embd %d must be positive", p, cfg->n_embd);
  PetscCheck(cfg->vocab_size > 0, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE, "-%svocab_size %d must be positive", p, cfg->vocab_size);
  PetscCheck(cfg->n_positions >= 2, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE, "-%sn_positions %d must be at least 2", p, cfg->n_positions);
  PetscCheck(cfg->n_embd % cfg->n_head == 0, PETSC_COMM_WORLD, PETSC_ERR_ARG_WRONG, "-%sn_embd %d is not divisible by -%sn_head %d", p, cfg->n_embd, p,
             cfg->n_head);
  PetscCheck(cfg->head == GPT_HEAD_LM || cfg->head == GPT_HEAD_SCALAR, PETSC_COMM_WORLD, PETSC_ERR_ARG_WRONG, "-%shead must be lm or scalar", p);
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode adamw_set_from_options(const char *prefix, AdamWConfig *opt)
{
  PetscFunctionBegin;
  PetscOptionsBegin(PETSC_COMM_WORLD, prefix, "AdamW optimizer options", NULL);
  RfOptReal("-lr", "Peak learning rate", 1e-3, &opt->lr);
  RfOptReal("-min_lr_ratio", "Final learning rate of the cosine decay, as a fraction of lr", 0.1, &opt->min_lr_ratio);
  RfOptInt("-warmup", "Optimizer steps of linear learning-rate warm-up", 10, &opt->warmup);
  RfOptInt("-decay_steps", "Steps of cosine decay after warm-up (0: constant lr after warm-up)", 0, &opt->decay_steps);
  RfOptReal("-beta1", "AdamW first-moment decay", 0.9, &opt->beta1);
  RfOptReal("-beta2", "AdamW second-moment decay", 0.95, &opt->beta2);
  RfOptReal("-eps", "AdamW denominator epsilon", 1e-8, &opt->eps);
  RfOptReal("-weight_decay", "Decoupled weight decay on 2-D tensors", 0.1, &opt->weight_decay);
  RfOptReal("-grad_clip", "Clip the global gradient norm to this value (0: no clipping)", 1.0, &opt->grad_clip);
  PetscOptionsEnd();
  PetscCheck(opt->lr >= 0 && opt->min_lr_ratio >= 0 && opt->eps > 0 && opt->weight_decay >= 0 && opt->grad_clip >= 0, PETSC_COMM_WORLD,
             PETSC_ERR_ARG_OUTOFRANGE, "-%slr, min_lr_ratio, weight_decay and grad_clip must be >= 0 and -%seps > 0", prefix ? prefix : "",
             prefix ? prefix : "");
  PetscCheck(opt->beta1 >= 0 && opt->beta1 < 1 && opt->beta2 >= 0 && opt->beta2 < 1, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE,
             "-%sbeta1 %g and -%sbeta2 %g must lie in [0,1)", prefix ? prefix : "", (double)opt->beta1, prefix ? prefix : "", (double)opt->beta2);
  PetscCheck(opt->warmup >= 0 && opt->decay_steps >= 0, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE, "-%swarmup and -%sdecay_steps must be >= 0",
             prefix ? prefix : "", prefix ? prefix : "");
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* ---- tensor table ------------------------------------------------------- */

static void table_add(GPTTensor *t, int *n, size_t *off, const char *name, int d0, int d1)
{
  GPTTensor *e = &t[(*n)++];

  memset(e, 0, sizeof *e);
  memcpy(e->name, name, PetscMin(strlen(name), sizeof e->name - 1));
  e->ndim     = d1 > 0 ? 2 : 1;
  e->shape[0] = d0;
  e->shape[1] = d1 > 0 ? d1 : 0;
  e->numel    = (size_t)d0 * (size_t)(d1 > 0 ? d1 : 1);
  e->offset   = *off;
  e->decay    = e->ndim == 2 ? PETSC_TRUE : PETSC_FALSE;
  *off += e->numel;
}

static void table_add_layer(GPTTensor *t, int *n, size_t *off, int l, int C)
{
  static const char *const suffix[GPT_T_PER_LAYER] = {"ln_1.weight",      "ln_1.bias",      "attn.c_attn.weight", "attn.c_attn.bias",
                                                      "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight",        "ln_2.bias",
                                                      "mlp.c_fc.weight",  "mlp.c_fc.bias",  "mlp.c_proj.weight",  "mlp.c_proj.bias"};
  /* shapes in the Conv1D [in,out] layout; 0 as second dim means 1-D */
  const int shape[GPT_T_PER_LAYER][2] = {{C, 0}, {C, 0}, {C, 3 * C}, {3 * C, 0}, {C, C},     {C, 0},
                                         {C, 0}, {C, 0}, {C, 4 * C}, {4 * C, 0}, {4 * C, C}, {C, 0}};
  char name[64];

  for (int k = 0; k < GPT_T_PER_LAYER; k++) {
    snprintf(name, sizeof name, "transformer.h.%d.%s", l, suffix[k]);
    table_add(t, n, off, name, shape[k][0], shape[k][1]);
  }
}

PetscErrorCode gpt_tensor_table(const GPTConfig *cfg, GPTTensor **tensors, int *ntensors, size_t *nparams)
{
  int        n = 0, cap = 4 + cfg->n_layer * GPT_T_PER_LAYER + 1, C = cfg->n_embd;
  size_t     off = 0;
  GPTTensor *t;

  PetscFunctionBegin;
  PetscCall(PetscMalloc1(cap, &t));
  table_add(t, &n, &off, "transformer.wte.weight", cfg->vocab_size, C);
  table_add(t, &n, &off, "transformer.wpe.weight", cfg->n_positions, C);
  for (int l = 0; l < cfg->n_layer; l++) table_add_layer(t, &n, &off, l, C);
  table_add(t, &n, &off, "transformer.ln_f.weight", C, 0);
  table_add(t, &n, &off, "transformer.ln_f.bias", C, 0);
  if (cfg->head == GPT_HEAD_SCALAR) table_add(t, &n, &off, "score.weight", 1, C);
  *tensors  = t;
  *ntensors = n;
  *nparams  = off;
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode gpt_create(const GPTConfig *cfg, const Backend *be, GPT **gpt)
{
  GPT *g;

  PetscFunctionBegin;
  PetscCall(PetscNew(&g));
  g->cfg = *cfg;
  g->be  = be;
  PetscCall(gpt_tensor_table(cfg, &g->tensors, &g->ntensors, &g->nparams));
  PetscCall(be->alloc(g->nparams * sizeof(float), (void **)&g->params));
  PetscCall(be->alloc(g->nparams * sizeof(float), (void **)&g->grads));
  PetscCall(gpt_acts_create(&g->acts));
  *gpt = g;
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode gpt_destroy(GPT **gpt)
{
  GPT *g = *gpt;

  PetscFunctionBegin;
  if (!g) PetscFunctionReturn(PETSC_SUCCESS);
  PetscCall(gpt_acts_destroy(g->be, &g->acts));
  if (g->params) PetscCall(g->be->free(g->params));
  if (g->grads) PetscCall(g->be->free(g->grads));
  if (g->m) PetscCall(g->be->free(g->m));
  if (g->v) PetscCall(g->be->free(g->v));
  PetscCall(PetscFree(g->tensors));
  PetscCall(PetscFree(*gpt));
  PetscFunctionReturn(PETSC_SUCCESS);
}

int gpt_find_tensor(const GPT *gpt, const char *name)
{
  for (int i = 0; i < gpt->ntensors; i++)
    if (!strcmp(gpt->tensors[i].name, name)) return i;
  return -1;
}

/* ---- initialisation ----------------------------------------------------- */

static PetscBool name_ends_with(const char *s, const char *suffix)
{
  size_t ls = strlen(s), lx = strlen(suffix);
  return ls >= lx && !strcmp(s + ls - lx, suffix) ? PETSC_TRUE : PETSC_FALSE;
}

/* The std of a weight tensor, 0 for biases; LayerNorm gains are handled apart. */
static float init_std(const GPTConfig *cfg, const GPTTensor *t)
{
  if (t->ndim == 1) return 0.0f;
  if (name_ends_with(t->name, "attn.c_proj.weight") || name_ends_with(t->name, "mlp.c_proj.weight"))
    return (float)(0.02 / sqrt(2.0 * cfg->n_layer));
  return 0.02f;
}

/* Element e of tensor i is rng_normal(seed, i, e_hi, e_lo, 0): a pure function
 * of (seed, tensor index, element index), so any slicing of the buffer (tp,
 * pp) and any thread count give the same values. */
static void init_tensor(const GPTConfig *cfg, const GPTTensor *t, int i, uint64_t seed, float *host)
{
  float    std   = init_std(cfg, t);
  PetscBool is_ln = (t->ndim == 1 && strstr(t->name, ".ln_") && name_ends_with(t->name, ".weight")) ? PETSC_TRUE : PETSC_FALSE;
  long long n     = (long long)t->numel;

  if (t->ndim == 1) {
    for (long long e = 0; e < n; e++) host[e] = is_ln ? 1.0f : 0.0f;
    return;
  }
#pragma omp parallel for schedule(static)
  for (long long e = 0; e < n; e++) host[e] = std * rng_normal(seed, (uint32_t)i, (uint32_t)((uint64_t)e >> 32), (uint32_t)e, 0);
}

PetscErrorCode gpt_init_random(GPT *gpt, uint64_t seed)
{
  float *host;

  PetscFunctionBegin;
  PetscCall(PetscMalloc1(gpt->nparams, &host));
  for (int i = 0; i < gpt->ntensors; i++) init_tensor(&gpt->cfg, &gpt->tensors[i], i, seed, host + gpt->tensors[i].offset);
  PetscCall(gpt_params_set(gpt, host));
  PetscCall(PetscFree(host));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* ---- host copies -------------------------------------------------------- */

PetscErrorCode gpt_params_get(const GPT *gpt, float *host)
{
  PetscFunctionBegin;
  PetscCall(gpt->be->to_host(host, gpt->params, gpt->nparams * sizeof(float)));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode gpt_params_set(GPT *gpt, const float *host)
{
  PetscFunctionBegin;
  PetscCall(gpt->be->from_host(gpt->params, host, gpt->nparams * sizeof(float)));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode gpt_optim_init(GPT *gpt)
{
  size_t bytes = gpt->nparams * sizeof(float);

  PetscFunctionBegin;
  if (!gpt->m) PetscCall(gpt->be->alloc(bytes, (void **)&gpt->m));
  if (!gpt->v) PetscCall(gpt->be->alloc(bytes, (void **)&gpt->v));
  PetscCall(gpt->be->zero(gpt->m, bytes));
  PetscCall(gpt->be->zero(gpt->v, bytes));
  gpt->step = 0;
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode gpt_optim_get(const GPT *gpt, float *m_host, float *v_host)
{
  size_t bytes = gpt->nparams * sizeof(float);

  PetscFunctionBegin;
  PetscCheck(gpt->m && gpt->v, PETSC_COMM_SELF, PETSC_ERR_ORDER, "gpt_optim_get: call gpt_optim_init first");
  PetscCall(gpt->be->to_host(m_host, gpt->m, bytes));
  PetscCall(gpt->be->to_host(v_host, gpt->v, bytes));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode gpt_optim_set(GPT *gpt, const float *m_host, const float *v_host, int step)
{
  size_t bytes = gpt->nparams * sizeof(float);

  PetscFunctionBegin;
  if (!gpt->m || !gpt->v) PetscCall(gpt_optim_init(gpt));
  PetscCall(gpt->be->from_host(gpt->m, m_host, bytes));
  PetscCall(gpt->be->from_host(gpt->v, v_host, bytes));
  gpt->step = step;
  PetscFunctionReturn(PETSC_SUCCESS);
}
