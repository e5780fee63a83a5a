/* params.c: model configuration from options, the named tensor table over one
 * flat parameter buffer (Hugging Face GPT-2 state-dict order and shapes),
 * creation, random initialisation, and host copies of parameters and AdamW
 * moments (what checkpoints read and write). */
#include <math.h>
#include <string.h>

#include "model_impl.h"

const char *const ModelHeadNames[]        = {"lm", "scalar", "ModelHead", "MODEL_HEAD_", NULL};
const char *const ModelRopeScalingNames[] = {"none", "llama3", "ModelRopeScaling", "MODEL_ROPE_", NULL};

/* RfOptInt yields a PetscInt; the config stores int. */
#define RfOptIntAsInt(name, help, def, dst) \
  do {                                      \
    PetscInt t_;                            \
    RfOptInt(name, help, def, &t_);         \
    *(dst) = (int)t_;                       \
  } while (0)

/* The shape settings (the LLaMA family's), read only for a row with
 * settings (a GPT-2 deck that sets one is told the option is unused).
 * Defaults are Llama 2's. */
static PetscErrorCode settings_options(const char *prefix, ModelConfig *cfg)
{
  PetscInt  scaling = MODEL_ROPE_NONE;
  PetscReal theta = 10000, eps = 1e-5, factor = 8, lo = 1, hi = 4;

  PetscFunctionBegin;
  PetscOptionsBegin(PETSC_COMM_WORLD, prefix, "LLaMA-family model options", NULL);
  RfOptIntAsInt("-n_kv_head", "Key/value heads of grouped-query attention (dividing n_head; 0: n_head)", 0,
                &cfg->n_kv_head);
  RfOptIntAsInt("-n_ffn", "Width of the SwiGLU MLP, intermediate_size (0: 4 x n_embd)", 0, &cfg->n_ffn);
  RfOptBool("-qkv_bias", "The q, k and v projections have biases (Qwen2)", PETSC_FALSE, &cfg->qkv_bias);
  RfOptIntAsInt("-head_dim", "Width of an attention head (0: n_embd / n_head; Qwen3's differs)", 0, &cfg->head_dim);
  RfOptBool("-qk_norm", "RMSNorm over each query and key head before the rotation (Qwen3)", PETSC_FALSE, &cfg->qk_norm);
  RfOptBool("-tie_embeddings", "The LM head is the token embedding (false: its own lm_head weight)", PETSC_TRUE,
            &cfg->tie_embeddings);
  RfOptReal("-rope_theta", "Base of the rotary embedding's frequencies", theta, &theta);
  RfOptReal("-norm_eps", "Epsilon of RMSNorm", eps, &eps);
  RfOptEnum("-rope_scaling", "Rotary frequency scaling: none or llama3 (Llama 3.1+)", ModelRopeScalingNames, 2,
            &scaling);
  RfOptReal("-rope_factor", "llama3 scaling: factor", factor, &factor);
  RfOptReal("-rope_low_freq_factor", "llama3 scaling: low_freq_factor", lo, &lo);
  RfOptReal("-rope_high_freq_factor", "llama3 scaling: high_freq_factor", hi, &hi);
  RfOptIntAsInt("-rope_original_max_positions", "llama3 scaling: original_max_position_embeddings", 8192,
                &cfg->rope_original_max_positions);
  PetscOptionsEnd();
  if (cfg->n_kv_head == 0) cfg->n_kv_head = cfg->n_head;
  if (cfg->n_ffn == 0) cfg->n_ffn = 4 * cfg->n_embd;
  /* the default head width, where n_embd splits evenly (else the check
   * below says n_embd does not divide, and no head_dim is set) */
  if (cfg->head_dim == 0 && cfg->n_head > 0 && cfg->n_embd % cfg->n_head == 0)
    cfg->head_dim = cfg->n_embd / cfg->n_head;
  cfg->rope_theta            = theta;
  cfg->norm_eps              = eps;
  cfg->rope_scaling          = (ModelRopeScaling)scaling;
  cfg->rope_factor           = factor;
  cfg->rope_low_freq_factor  = lo;
  cfg->rope_high_freq_factor = hi;
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode model_config_set_from_options(const char *prefix, ModelConfig *cfg)
{
  PetscInt head = MODEL_HEAD_LM, arch = MODEL_ARCH_GPT2;
  char     arch_help[512] = "Architecture: ";

  PetscFunctionBegin;
  for (int k = 0; k < MODEL_ARCH_COUNT; k++) { /* the rows of the architecture table */
    size_t at = strlen(arch_help);
    PetscCall(PetscSNPrintf(arch_help + at, sizeof arch_help - at, "%s%s (%s)",
                            k == 0                      ? ""
                            : k == MODEL_ARCH_COUNT - 1 ? " or "
                                                        : ", ",
                            model_archs[k].name, model_archs[k].members));
  }
  PetscCall(PetscMemzero(cfg, sizeof *cfg));
  PetscOptionsBegin(PETSC_COMM_WORLD, prefix, "Model options", NULL);
  RfOptEnum("-arch", arch_help, ModelArchNames, MODEL_ARCH_COUNT, &arch);
  RfOptIntAsInt("-n_layer", "Number of transformer blocks", 2, &cfg->n_layer);
  RfOptIntAsInt("-n_head", "Number of attention heads (must divide n_embd)", 4, &cfg->n_head);
  RfOptIntAsInt("-n_embd", "Width of the residual stream (embedding size C)", 128, &cfg->n_embd);
  RfOptIntAsInt("-vocab_size", "Vocabulary size V (rows of the token embedding)", 64, &cfg->vocab_size);
  RfOptIntAsInt("-n_positions", "Maximum sequence length (GPT-2: rows of wpe)", 64, &cfg->n_positions);
  RfOptEnum("-head", "Output head: lm (logits) or scalar (one value per token, for critic/reward)", ModelHeadNames, 2,
            &head);
  PetscOptionsEnd();
  cfg->head = (ModelHead)head;
  cfg->arch = (ModelArch)arch;
  if (model_arch(cfg)->settings) PetscCall(settings_options(prefix, cfg));
  else {
    PetscBool help;
    PetscCall(PetscOptionsHasHelp(NULL, &help));
    if (help) { /* -help lists them for the other rows' decks too; nothing runs after -help */
      ModelConfig unused = *cfg;
      PetscCall(settings_options(prefix, &unused));
    }
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

static const char *const arch_options[] = { "arch",
                                            "n_layer",
                                            "n_head",
                                            "n_embd",
                                            "vocab_size",
                                            "n_positions",
                                            "head",
                                            "n_kv_head",
                                            "n_ffn",
                                            "qkv_bias",
                                            "tie_embeddings",
                                            "rope_theta",
                                            "norm_eps",
                                            "rope_scaling",
                                            "rope_factor",
                                            "rope_low_freq_factor",
                                            "rope_high_freq_factor",
                                            "rope_original_max_positions",
                                            "head_dim",
                                            "qk_norm" };
#define MODEL_ARCH_NOPTIONS ((int)(sizeof arch_options / sizeof arch_options[0]))

/* From the options recorded so far (model_config_set_from_options ran), so
 * that asking does not mark an option read: an option this architecture
 * does not read stays an unused-option error. */
PetscErrorCode model_config_options_given(const char *prefix, PetscBool *any)
{
  const SysParam *par;
  int             n;

  PetscFunctionBegin;
  *any = PETSC_FALSE;
  PetscCall(sys_params_get(&par, &n));
  for (int k = 0; k < n && !*any; k++)
    for (size_t i = 0; i < sizeof arch_options / sizeof arch_options[0] && !*any; i++) {
      char full[128];
      PetscCall(PetscSNPrintf(full, sizeof full, "%s%s", prefix ? prefix : "", arch_options[i]));
      if (par[k].set && !strcmp(par[k].name, full)) *any = PETSC_TRUE;
    }
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* The run record's values of the options: those of cfg, as if given (so a
 * used.deck repeats the run with them). */
PetscErrorCode model_config_record(const char *prefix, const ModelConfig *cfg)
{
  char v[MODEL_ARCH_NOPTIONS][32];

  PetscFunctionBegin;
  PetscCall(PetscSNPrintf(v[0], 32, "%s", ModelArchNames[cfg->arch]));
  PetscCall(PetscSNPrintf(v[1], 32, "%d", cfg->n_layer));
  PetscCall(PetscSNPrintf(v[2], 32, "%d", cfg->n_head));
  PetscCall(PetscSNPrintf(v[3], 32, "%d", cfg->n_embd));
  PetscCall(PetscSNPrintf(v[4], 32, "%d", cfg->vocab_size));
  PetscCall(PetscSNPrintf(v[5], 32, "%d", cfg->n_positions));
  PetscCall(PetscSNPrintf(v[6], 32, "%s", ModelHeadNames[cfg->head]));
  PetscCall(PetscSNPrintf(v[7], 32, "%d", cfg->n_kv_head));
  PetscCall(PetscSNPrintf(v[8], 32, "%d", cfg->n_ffn));
  PetscCall(PetscSNPrintf(v[9], 32, "%s", cfg->qkv_bias ? "true" : "false"));
  PetscCall(PetscSNPrintf(v[10], 32, "%s", cfg->tie_embeddings ? "true" : "false"));
  PetscCall(PetscSNPrintf(v[11], 32, "%.17g", cfg->rope_theta));
  PetscCall(PetscSNPrintf(v[12], 32, "%.17g", cfg->norm_eps));
  PetscCall(PetscSNPrintf(v[13], 32, "%s", ModelRopeScalingNames[cfg->rope_scaling]));
  PetscCall(PetscSNPrintf(v[14], 32, "%.17g", cfg->rope_factor));
  PetscCall(PetscSNPrintf(v[15], 32, "%.17g", cfg->rope_low_freq_factor));
  PetscCall(PetscSNPrintf(v[16], 32, "%.17g", cfg->rope_high_freq_factor));
  PetscCall(PetscSNPrintf(v[17], 32, "%d", cfg->rope_original_max_positions));
  PetscCall(PetscSNPrintf(v[18], 32, "%d", model_head_dim(cfg)));
  PetscCall(PetscSNPrintf(v[19], 32, "%s", cfg->qk_norm ? "true" : "false"));
  for (int i = 0; i < (model_arch(cfg)->settings ? MODEL_ARCH_NOPTIONS : 7); i++)
    PetscCall(sys_param_record(prefix, arch_options[i], v[i], PETSC_TRUE));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscBool model_config_equal(const ModelConfig *a, const ModelConfig *b)
{
  PetscBool same = a->n_layer == b->n_layer && a->n_head == b->n_head && a->n_embd == b->n_embd &&
                           a->vocab_size == b->vocab_size && a->n_positions == b->n_positions && a->head == b->head &&
                           a->arch == b->arch
                       ? PETSC_TRUE
                       : PETSC_FALSE;

  if (!same || !model_arch(a)->settings) return same;
  return a->n_kv_head == b->n_kv_head && a->n_ffn == b->n_ffn && a->qkv_bias == b->qkv_bias &&
                 a->tie_embeddings == b->tie_embeddings && model_head_dim(a) == model_head_dim(b) &&
                 a->qk_norm == b->qk_norm && a->rope_theta == b->rope_theta && a->norm_eps == b->norm_eps &&
                 a->rope_scaling == b->rope_scaling &&
                 (a->rope_scaling == MODEL_ROPE_NONE ||
                  (a->rope_factor == b->rope_factor && a->rope_low_freq_factor == b->rope_low_freq_factor &&
                   a->rope_high_freq_factor == b->rope_high_freq_factor &&
                   a->rope_original_max_positions == b->rope_original_max_positions))
             ? PETSC_TRUE
             : PETSC_FALSE;
}

PetscBool model_tensor_is_trunk(const char *name)
{
  return !strncmp(name, "transformer.", 12) || !strncmp(name, "model.", 6) ? PETSC_TRUE : PETSC_FALSE;
}

/* Hugging Face's: inv_freq[i] = 1 / theta^(2i/hd) in float; llama3 scaling
 * divides the low frequencies (wavelength above original/low_freq_factor)
 * by factor, keeps the high ones (below original/high_freq_factor) and
 * blends linearly in 1/wavelength between. */
void model_rope_inv_freq(const ModelConfig *cfg, float *inv_freq)
{
  int hd = model_head_dim(cfg);

  for (int i = 0; i < hd / 2; i++) {
    float  f = 1.0f / powf((float)cfg->rope_theta, (float)(2 * i) / (float)hd);
    double wl, lo_wl, hi_wl, smooth;

    if (cfg->rope_scaling == MODEL_ROPE_LLAMA3) {
      wl    = 2 * M_PI / f;
      lo_wl = cfg->rope_original_max_positions / cfg->rope_low_freq_factor;
      hi_wl = cfg->rope_original_max_positions / cfg->rope_high_freq_factor;
      if (wl > lo_wl) f = (float)(f / cfg->rope_factor);
      else if (wl >= hi_wl) {
        smooth = (cfg->rope_original_max_positions / wl - cfg->rope_low_freq_factor) /
                 (cfg->rope_high_freq_factor - cfg->rope_low_freq_factor);
        f      = (float)((1 - smooth) * f / cfg->rope_factor + smooth * f);
      }
    }
    inv_freq[i] = f;
  }
}

/* The checks on a configuration, wherever it comes from; names are printed
 * as <dash><p><name>: "-policy_n_head" for an option, "n_head" for a file's
 * attribute. */
static PetscErrorCode model_config_check_named(MPI_Comm comm, const ModelConfig *cfg, const char *dash, const char *p)
{
  PetscFunctionBegin;
  PetscCheck(cfg->arch >= 0 && cfg->arch < MODEL_ARCH_COUNT, comm, PETSC_ERR_ARG_WRONG,
             "%s%sarch %d is not a row of the architecture table", dash, p, (int)cfg->arch);
  PetscCheck(cfg->n_layer > 0, comm, PETSC_ERR_ARG_OUTOFRANGE, "%s%sn_layer %d must be positive", dash, p,
             cfg->n_layer);
  PetscCheck(cfg->n_head > 0, comm, PETSC_ERR_ARG_OUTOFRANGE, "%s%sn_head %d must be positive", dash, p, cfg->n_head);
  PetscCheck(cfg->n_embd > 0, comm, PETSC_ERR_ARG_OUTOFRANGE, "%s%sn_embd %d must be positive", dash, p, cfg->n_embd);
  PetscCheck(cfg->vocab_size > 0, comm, PETSC_ERR_ARG_OUTOFRANGE, "%s%svocab_size %d must be positive", dash, p,
             cfg->vocab_size);
  PetscCheck(cfg->n_positions >= 2, comm, PETSC_ERR_ARG_OUTOFRANGE, "%s%sn_positions %d must be at least 2", dash, p,
             cfg->n_positions);
  /* tensor extents are ints: the MLP's 4 x n_embd and the tensor count
   * must fit, or counts and shapes silently wrap */
  PetscCheck(cfg->n_embd <= INT32_MAX / 4, comm, PETSC_ERR_ARG_OUTOFRANGE,
             "%s%sn_embd %d is too large (4 x n_embd must fit a 32-bit int: at most %d)", dash, p, cfg->n_embd,
             INT32_MAX / 4);
  PetscCheck(cfg->n_layer <= (INT32_MAX - 8) / LL_T_PER_LAYER_MAX, comm, PETSC_ERR_ARG_OUTOFRANGE,
             "%s%sn_layer %d is too large (at most %d)", dash, p, cfg->n_layer, (INT32_MAX - 8) / LL_T_PER_LAYER_MAX);
  PetscCheck(cfg->n_embd % cfg->n_head == 0 || (model_arch(cfg)->settings && cfg->head_dim > 0), comm,
             PETSC_ERR_ARG_WRONG, "%s%sn_embd %d is not divisible by %s%sn_head %d (and no %s%shead_dim is set)", dash,
             p, cfg->n_embd, dash, p, cfg->n_head, dash, p);
  PetscCheck(cfg->head == MODEL_HEAD_LM || cfg->head == MODEL_HEAD_SCALAR, comm, PETSC_ERR_ARG_WRONG,
             "%s%shead must be lm or scalar", dash, p);
  if (!model_arch(cfg)->settings) PetscFunctionReturn(PETSC_SUCCESS);
  PetscCheck(!cfg->qk_norm || model_arch(cfg)->qk_norm, comm, PETSC_ERR_ARG_WRONG,
             "%s%sqk_norm: arch %s has no q/k norms", dash, p, model_arch(cfg)->name);
  PetscCheck(!cfg->qkv_bias || !model_arch(cfg)->linear_bias, comm, PETSC_ERR_ARG_WRONG,
             "%s%sqkv_bias: arch %s has biases on every linear layer already", dash, p, model_arch(cfg)->name);
  PetscCheck(cfg->n_kv_head > 0 && cfg->n_head % cfg->n_kv_head == 0, comm, PETSC_ERR_ARG_WRONG,
             "%s%sn_kv_head %d does not divide %s%sn_head %d", dash, p, cfg->n_kv_head, dash, p, cfg->n_head);
  PetscCheck(cfg->n_ffn > 0 && cfg->n_ffn <= INT32_MAX / 2, comm, PETSC_ERR_ARG_OUTOFRANGE,
             "%s%sn_ffn %d must lie in [1, %d]", dash, p, cfg->n_ffn, INT32_MAX / 2);
  PetscCheck(cfg->head_dim >= 0 && cfg->head_dim <= 4096, comm, PETSC_ERR_ARG_OUTOFRANGE,
             "%s%shead_dim %d must lie in [0, 4096] (0: n_embd / n_head)", dash, p, cfg->head_dim);
  PetscCheck(model_head_dim(cfg) % 2 == 0 && model_head_dim(cfg) > 0, comm, PETSC_ERR_ARG_WRONG,
             "%s%shead_dim %d: rotary embeddings need an even head size", dash, p, model_head_dim(cfg));
  PetscCheck((double)cfg->n_head * model_head_dim(cfg) <= INT32_MAX / 4, comm, PETSC_ERR_ARG_OUTOFRANGE,
             "%s%sn_head x head_dim is too large", dash, p);
  PetscCheck(cfg->rope_theta > 1 && isfinite(cfg->rope_theta), comm, PETSC_ERR_ARG_OUTOFRANGE,
             "%s%srope_theta %g must be finite and above 1", dash, p, cfg->rope_theta);
  PetscCheck(cfg->norm_eps > 0 && cfg->norm_eps < 1, comm, PETSC_ERR_ARG_OUTOFRANGE,
             "%s%snorm_eps %g must lie in (0, 1)", dash, p, cfg->norm_eps);
  PetscCheck(cfg->rope_scaling == MODEL_ROPE_NONE || cfg->rope_scaling == MODEL_ROPE_LLAMA3, comm, PETSC_ERR_ARG_WRONG,
             "%s%srope_scaling must be none or llama3", dash, p);
  if (cfg->rope_scaling == MODEL_ROPE_LLAMA3) {
    PetscCheck(cfg->rope_factor >= 1, comm, PETSC_ERR_ARG_OUTOFRANGE, "%s%srope_factor %g must be at least 1", dash, p,
               cfg->rope_factor);
    PetscCheck(cfg->rope_low_freq_factor > 0 && cfg->rope_high_freq_factor > cfg->rope_low_freq_factor, comm,
               PETSC_ERR_ARG_OUTOFRANGE, "%s%srope_high_freq_factor %g must exceed %s%srope_low_freq_factor %g > 0",
               dash, p, cfg->rope_high_freq_factor, dash, p, cfg->rope_low_freq_factor);
    PetscCheck(cfg->rope_original_max_positions > 0, comm, PETSC_ERR_ARG_OUTOFRANGE,
               "%s%srope_original_max_positions %d must be positive", dash, p, cfg->rope_original_max_positions);
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode model_config_check(const ModelConfig *cfg, const char *prefix)
{
  PetscFunctionBegin;
  PetscCall(model_config_check_named(PETSC_COMM_WORLD, cfg, "-", prefix ? prefix : ""));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode model_config_check_file(const ModelConfig *cfg)
{
  PetscFunctionBegin;
  PetscCall(model_config_check_named(PETSC_COMM_SELF, cfg, "", ""));
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
  PetscCheck(opt->lr >= 0 && opt->min_lr_ratio >= 0 && opt->eps > 0 && opt->weight_decay >= 0 && opt->grad_clip >= 0,
             PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE,
             "-%slr, min_lr_ratio, weight_decay and grad_clip must be >= 0 and -%seps > 0", prefix ? prefix : "",
             prefix ? prefix : "");
  PetscCheck(opt->beta1 >= 0 && opt->beta1 < 1 && opt->beta2 >= 0 && opt->beta2 < 1, PETSC_COMM_WORLD,
             PETSC_ERR_ARG_OUTOFRANGE, "-%sbeta1 %g and -%sbeta2 %g must lie in [0,1)", prefix ? prefix : "",
             (double)opt->beta1, prefix ? prefix : "", (double)opt->beta2);
  PetscCheck(opt->warmup >= 0 && opt->decay_steps >= 0, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE,
             "-%swarmup and -%sdecay_steps must be >= 0", prefix ? prefix : "", prefix ? prefix : "");
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode model_tensor_table(const ModelConfig *cfg, ModelTensor **tensors, int *ntensors, size_t *nparams)
{
  PetscFunctionBegin;
  PetscCall(model_tensor_table_shard(cfg, NULL, tensors, ntensors, nparams));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode model_create(const ModelConfig *cfg, const Backend *be, Model **lm)
{
  PetscFunctionBegin;
  PetscCall(model_create_on_mesh(cfg, be, NULL, lm));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode model_create_on_mesh(const ModelConfig *cfg, const Backend *be, const Mesh *mesh, Model **lm)
{
  Model *g;

  PetscFunctionBegin;
  PetscCheck(!mesh || mesh->me >= 0, PETSC_COMM_SELF, PETSC_ERR_ARG_WRONG,
             "model_create_on_mesh: this rank is not in the mesh");
  PetscCall(PetscNew(&g));
  g->cfg  = *cfg;
  g->be   = be;
  g->mesh = mesh;
  model_shard_of_mesh(cfg, mesh, &g->sh);
  g->Cl   = model_q_width(cfg) / g->sh.tp;
  g->NHl  = cfg->n_head / g->sh.tp;
  g->Vl   = cfg->vocab_size / g->sh.tp;
  g->v0   = g->Vl * g->sh.t;
  g->NKVl = model_kv_heads_local(cfg, g->sh.tp);
  g->Ckvl = g->NKVl * model_head_dim(cfg);
  g->Fl   = model_n_ffn(cfg) / g->sh.tp;
  if (model_arch(cfg)->pos == MODEL_POS_ROTARY) {
    int    half = model_head_dim(cfg) / 2;
    float *f;
    PetscCall(PetscMalloc1(half, &f));
    model_rope_inv_freq(cfg, f);
    PetscCall(be->alloc((size_t)half * sizeof(float), (void **)&g->inv_freq));
    PetscCall(be->from_host(g->inv_freq, f, (size_t)half * sizeof(float)));
    PetscCall(PetscFree(f));
  }
  /* the blocks sharing a replicated k/v head sum its gradient: their
   * communicator is made here, where the mesh's ranks all are */
  if (mesh && model_kv_rep(cfg, mesh->tp) > 1) {
    const Comm *block;
    PetscCall(mesh_tp_block(mesh, model_kv_rep(cfg, mesh->tp), &block));
  }
  g->dist = (ModelDistConfig){PETSC_FALSE, (size_t)16 << 20};
  PetscCall(model_tensor_table_shard(cfg, &g->sh, &g->tensors, &g->ntensors, &g->nparams));
  PetscCall(be->alloc(g->nparams * sizeof(float), (void **)&g->params));
  if (be->weights_hint) PetscCall(be->weights_hint(g->params, g->nparams * sizeof(float)));
  PetscCall(be->alloc(g->nparams * sizeof(float), (void **)&g->grads));
  PetscCall(model_acts_slots(g, 1));
  g->acts = g->slots[0];
  g->own0 = 0;
  g->own1 = g->nparams;
  *lm = g;
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode model_destroy(Model **lm)
{
  Model *g = *lm;

  PetscFunctionBegin;
  if (!g) PetscFunctionReturn(PETSC_SUCCESS);
  for (int k = 0; k < g->nslots; k++) PetscCall(model_acts_destroy(g->be, &g->slots[k]));
  PetscCall(PetscFree(g->slots));
  PetscCall(PetscFree(g->stats_host));
  if (g->params) PetscCall(g->be->free(g->params));
  if (g->grads) PetscCall(g->be->free(g->grads));
  if (g->m) PetscCall(g->be->free(g->m));
  if (g->v) PetscCall(g->be->free(g->v));
  if (g->inv_freq) PetscCall(g->be->free(g->inv_freq));
  PetscCall(PetscFree(g->tensors));
  PetscCall(PetscFree(*lm));
  PetscFunctionReturn(PETSC_SUCCESS);
}

int model_find_tensor(const Model *lm, const char *name)
{
  for (int i = 0; i < lm->ntensors; i++)
    if (!strcmp(lm->tensors[i].name, name)) return i;
  return -1;
}

/* ---- initialisation ----------------------------------------------------- */

static PetscBool name_ends_with(const char *s, const char *suffix)
{
  size_t ls = strlen(s), lx = strlen(suffix);
  return ls >= lx && !strcmp(s + ls - lx, suffix) ? PETSC_TRUE : PETSC_FALSE;
}

/* The std of a weight tensor, 0 for biases; norm gains are handled apart.
 * GPT-2 scales its residual projections by 1/sqrt(2 n_layer); the LLaMA
 * family (Hugging Face's init) uses 0.02 for every matrix. */
static float init_std(const ModelConfig *cfg, const ModelTensor *t)
{
  if (t->ndim == 1) return 0.0f;
  if (name_ends_with(t->name, "attn.c_proj.weight") || name_ends_with(t->name, "mlp.c_proj.weight"))
    return (float)(0.02 / sqrt(2.0 * cfg->n_layer));
  return 0.02f;
}

/* A norm's gain: GPT-2's ln_1, ln_2, ln_f weights; LLaMA's *layernorm and
 * norm weights, Qwen3's q_norm and k_norm. */
static PetscBool is_norm_gain(const ModelTensor *t)
{
  if (t->ndim != 1 || !name_ends_with(t->name, ".weight")) return PETSC_FALSE;
  return strstr(t->name, ".ln_") || name_ends_with(t->name, "layernorm.weight") ||
                 name_ends_with(t->name, "model.norm.weight") || name_ends_with(t->name, "_norm.weight")
             ? PETSC_TRUE
             : PETSC_FALSE;
}

/* Element e of tensor i is rng_normal(seed, i, e_hi, e_lo, 0): a pure function
 * of (seed, tensor index, element index), so any slicing of the buffer (tp,
 * pp) and any thread count give the same values. */
static void init_tensor(const ModelConfig *cfg, const ModelTensor *t, int i, uint64_t seed, float *host)
{
  float     std   = init_std(cfg, t);
  PetscBool is_ln = is_norm_gain(t);
  long long n     = (long long)t->numel;

  if (t->ndim == 1) {
    for (long long e = 0; e < n; e++) host[e] = is_ln ? 1.0f : 0.0f;
    return;
  }
#pragma omp parallel for schedule(static)
  for (long long e = 0; e < n; e++)
    host[e] = std * rng_normal(seed, (uint32_t)i, (uint32_t)((uint64_t)e >> 32), (uint32_t)e, 0);
}

/* A shard draws the whole model and keeps its pieces, so its values are
 * those of the single-rank model. */
PetscErrorCode model_init_random(Model *lm, uint64_t seed)
{
  ModelTensor *full;
  int        nfull;
  size_t     nparams;
  float     *host, *mine;

  PetscFunctionBegin;
  PetscCall(model_tensor_table(&lm->cfg, &full, &nfull, &nparams));
  PetscCall(PetscMalloc2(nparams, &host, lm->nparams, &mine));
  for (int i = 0; i < nfull; i++) init_tensor(&lm->cfg, &full[i], i, seed, host + full[i].offset);
  PetscCall(model_shard_extract(&lm->cfg, &lm->sh, host, mine));
  PetscCall(model_params_set(lm, mine));
  PetscCall(PetscFree2(host, mine));
  PetscCall(PetscFree(full));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* ---- host copies -------------------------------------------------------- */

PetscErrorCode model_params_get(const Model *lm, float *host)
{
  PetscFunctionBegin;
  PetscCall(lm->be->to_host(host, lm->params, lm->nparams * sizeof(float)));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode model_params_set(Model *lm, const float *host)
{
  PetscFunctionBegin;
  PetscCall(lm->be->from_host(lm->params, host, lm->nparams * sizeof(float)));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode model_optim_init(Model *lm)
{
  size_t bytes = (lm->own1 - lm->own0) * sizeof(float);

  PetscFunctionBegin;
  if (!lm->m) PetscCall(lm->be->alloc(bytes, (void **)&lm->m));
  if (!lm->v) PetscCall(lm->be->alloc(bytes, (void **)&lm->v));
  PetscCall(lm->be->zero(lm->m, bytes));
  PetscCall(lm->be->zero(lm->v, bytes));
  lm->step = 0;
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* The whole shard's moments; with ZeRO-1 gathered from the dp replicas
 * (collective over them). */
PetscErrorCode model_optim_get(const Model *lm, float *m_host, float *v_host)
{
  size_t n = lm->own1 - lm->own0;
  float *tmp;

  PetscFunctionBegin;
  PetscCheck(lm->m && lm->v, PETSC_COMM_SELF, PETSC_ERR_ORDER, "model_optim_get: call model_optim_init first");
  PetscCall(PetscMalloc1(n + 1, &tmp));
  PetscCall(lm->be->to_host(tmp, lm->m, n * sizeof(float)));
  PetscCall(model_optim_gather(lm, tmp, m_host));
  PetscCall(lm->be->to_host(tmp, lm->v, n * sizeof(float)));
  PetscCall(model_optim_gather(lm, tmp, v_host));
  PetscCall(PetscFree(tmp));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* m_host, v_host: the whole shard's moments; ZeRO-1 keeps its range. */
PetscErrorCode model_optim_set(Model *lm, const float *m_host, const float *v_host, int step)
{
  size_t bytes = (lm->own1 - lm->own0) * sizeof(float);

  PetscFunctionBegin;
  if (!lm->m || !lm->v) PetscCall(model_optim_init(lm));
  PetscCall(lm->be->from_host(lm->m, m_host + lm->own0, bytes));
  PetscCall(lm->be->from_host(lm->v, v_host + lm->own0, bytes));
  lm->step = step;
  PetscFunctionReturn(PETSC_SUCCESS);
}
