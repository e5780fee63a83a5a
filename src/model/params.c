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

/* The checks on a configuration, wherever it comes from; names are printed
 * as <dash><p><name>: "-policy_n_head" for an option, "n_head" for a file's
 * attribute. */
static PetscErrorCode gpt_config_check_named(MPI_Comm comm, const GPTConfig *cfg, const char *dash, const char *p)
{
  PetscFunctionBegin;
  PetscCheck(cfg->n_layer > 0, comm, PETSC_ERR_ARG_OUTOFRANGE, "%s%sn_layer %d must be positive", dash, p, cfg->n_layer);
  PetscCheck(cfg->n_head > 0, comm, PETSC_ERR_ARG_OUTOFRANGE, "%s%sn_head %d must be positive", dash, p, cfg->n_head);
  PetscCheck(cfg->n_embd > 0, comm, PETSC_ERR_ARG_OUTOFRANGE, "%s%sn_embd %d must be positive", dash, p, cfg->n_embd);
  PetscCheck(cfg->vocab_size > 0, comm, PETSC_ERR_ARG_OUTOFRANGE, "%s%svocab_size %d must be positive", dash, p, cfg->vocab_size);
  PetscCheck(cfg->n_positions >= 2, comm, PETSC_ERR_ARG_OUTOFRANGE, "%s%sn_positions %d must be at least 2", dash, p, cfg->n_positions);
  /* tensor extents are ints: the MLP's 4 x n_embd and the tensor count
   * must fit, or counts and shapes silently wrap */
  PetscCheck(cfg->n_embd <= INT32_MAX / 4, comm, PETSC_ERR_ARG_OUTOFRANGE, "%s%sn_embd %d is too large (4 x n_embd must fit a 32-bit int: at most %d)", dash, p, cfg->n_embd, INT32_MAX / 4);
  PetscCheck(cfg->n_layer <= (INT32_MAX - 8) / GPT_T_PER_LAYER, comm, PETSC_ERR_ARG_OUTOFRANGE, "%s%sn_layer %d is too large (at most %d)", dash, p, cfg->n_layer, (INT32_MAX - 8) / GPT_T_PER_LAYER);
  PetscCheck(cfg->n_embd % cfg->n_head == 0, comm, PETSC_ERR_ARG_WRONG, "%s%sn_embd %d is not divisible by %s%sn_head %d", dash, p, cfg->n_embd, dash, p, cfg->n_head);
  PetscCheck(cfg->head == GPT_HEAD_LM || cfg->head == GPT_HEAD_SCALAR, comm, PETSC_ERR_ARG_WRONG, "%s%shead must be lm or scalar", dash, p);
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode gpt_config_check(const GPTConfig *cfg, const char *prefix)
{
  PetscFunctionBegin;
  PetscCall(gpt_config_check_named(PETSC_COMM_WORLD, cfg, "-", prefix ? prefix : ""));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode gpt_config_check_file(const GPTConfig *cfg)
{
  PetscFunctionBegin;
  PetscCall(gpt_config_check_named(PETSC_COMM_SELF, cfg, "", ""));
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

PetscErrorCode gpt_tensor_table(const GPTConfig *cfg, GPTTensor **tensors, int *ntensors, size_t *nparams)
{
  PetscFunctionBegin;
  PetscCall(gpt_tensor_table_shard(cfg, NULL, tensors, ntensors, nparams));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode gpt_create(const GPTConfig *cfg, const Backend *be, GPT **gpt)
{
  PetscFunctionBegin;
  PetscCall(gpt_create_on_mesh(cfg, be, NULL, gpt));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode gpt_create_on_mesh(const GPTConfig *cfg, const Backend *be, const Mesh *mesh, GPT **gpt)
{
  GPT *g;

  PetscFunctionBegin;
  PetscCheck(!mesh || mesh->me >= 0, PETSC_COMM_SELF, PETSC_ERR_ARG_WRONG, "gpt_create_on_mesh: this rank is not in the mesh");
  PetscCall(PetscNew(&g));
  g->cfg  = *cfg;
  g->be   = be;
  g->mesh = mesh;
  gpt_shard_of_mesh(cfg, mesh, &g->sh);
  g->Cl   = cfg->n_embd / g->sh.tp;
  g->NHl  = cfg->n_head / g->sh.tp;
  g->Vl   = cfg->vocab_size / g->sh.tp;
  g->v0   = g->Vl * g->sh.t;
  g->dist = (GPTDistConfig){PETSC_FALSE, (size_t)16 << 20};
  PetscCall(gpt_tensor_table_shard(cfg, &g->sh, &g->tensors, &g->ntensors, &g->nparams));
  PetscCall(be->alloc(g->nparams * sizeof(float), (void **)&g->params));
  PetscCall(be->alloc(g->nparams * sizeof(float), (void **)&g->grads));
  PetscCall(gpt_acts_slots(g, 1));
  g->acts = g->slots[0];
  g->own0 = 0;
  g->own1 = g->nparams;
  *gpt = g;
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode gpt_destroy(GPT **gpt)
{
  GPT *g = *gpt;

  PetscFunctionBegin;
  if (!g) PetscFunctionReturn(PETSC_SUCCESS);
  for (int k = 0; k < g->nslots; k++) PetscCall(gpt_acts_destroy(g->be, &g->slots[k]));
  PetscCall(PetscFree(g->slots));
  PetscCall(PetscFree(g->stats_host));
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

/* A shard draws the whole model and keeps its pieces, so its values are
 * those of the single-rank model. */
PetscErrorCode gpt_init_random(GPT *gpt, uint64_t seed)
{
  GPTTensor *full;
  int        nfull;
  size_t     nparams;
  float     *host, *mine;

  PetscFunctionBegin;
  PetscCall(gpt_tensor_table(&gpt->cfg, &full, &nfull, &nparams));
  PetscCall(PetscMalloc2(nparams, &host, gpt->nparams, &mine));
  for (int i = 0; i < nfull; i++) init_tensor(&gpt->cfg, &full[i], i, seed, host + full[i].offset);
  PetscCall(gpt_shard_extract(&gpt->cfg, &gpt->sh, host, mine));
  PetscCall(gpt_params_set(gpt, mine));
  PetscCall(PetscFree2(host, mine));
  PetscCall(PetscFree(full));
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
  size_t bytes = (gpt->own1 - gpt->own0) * sizeof(float);

  PetscFunctionBegin;
  if (!gpt->m) PetscCall(gpt->be->alloc(bytes, (void **)&gpt->m));
  if (!gpt->v) PetscCall(gpt->be->alloc(bytes, (void **)&gpt->v));
  PetscCall(gpt->be->zero(gpt->m, bytes));
  PetscCall(gpt->be->zero(gpt->v, bytes));
  gpt->step = 0;
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* The whole shard's moments; with ZeRO-1 gathered from the dp replicas
 * (collective over them). */
PetscErrorCode gpt_optim_get(const GPT *gpt, float *m_host, float *v_host)
{
  size_t n = gpt->own1 - gpt->own0;
  float *tmp;

  PetscFunctionBegin;
  PetscCheck(gpt->m && gpt->v, PETSC_COMM_SELF, PETSC_ERR_ORDER, "gpt_optim_get: call gpt_optim_init first");
  PetscCall(PetscMalloc1(n + 1, &tmp));
  PetscCall(gpt->be->to_host(tmp, gpt->m, n * sizeof(float)));
  PetscCall(gpt_optim_gather(gpt, tmp, m_host));
  PetscCall(gpt->be->to_host(tmp, gpt->v, n * sizeof(float)));
  PetscCall(gpt_optim_gather(gpt, tmp, v_host));
  PetscCall(PetscFree(tmp));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* m_host, v_host: the whole shard's moments; ZeRO-1 keeps its range. */
PetscErrorCode gpt_optim_set(GPT *gpt, const float *m_host, const float *v_host, int step)
{
  size_t bytes = (gpt->own1 - gpt->own0) * sizeof(float);

  PetscFunctionBegin;
  if (!gpt->m || !gpt->v) PetscCall(gpt_optim_init(gpt));
  PetscCall(gpt->be->from_host(gpt->m, m_host + gpt->own0, bytes));
  PetscCall(gpt->be->from_host(gpt->v, v_host + gpt->own0, bytes));
  gpt->step = step;
  PetscFunctionReturn(PETSC_SUCCESS);
}
