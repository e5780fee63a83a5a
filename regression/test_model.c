/* test_model: the GPT-2 model on the cpu backend. Finite-difference gradient
 * checks of both heads (the LM head also through model_logprobs_dist with a
 * temperature and a mask), model_logprobs_dist against a host computation and
 * its argument checks, KV-cache decoding against the full forward, AdamW and
 * the learning-rate schedule against hand-computed values, configuration
 * errors, the tensor table, and deterministic initialisation. Prints one
 * "ok"/"not ok" line per check and exits non-zero on any failure.
 *
 * The checks in detail: finite-difference gradient check of the whole model
 * (Richardson-extrapolated central differences; LM and scalar heads; GPT-2, and three
 * LLaMA-family models: tied with 4 query heads over 2 kv heads, untied multi-query with q/k/v
 * biases and Llama 3.1's rope scaling, and Qwen3-shaped with per-head q/k norms and a head_dim
 * of its own), KV-cache decode equal to the full forward for all of them, a prefill of 3
 * prompts in one call with the head on each prompt's last row only (`head_rows`) giving those
 * rows' logits and values and writing nothing past them, every row named giving the bits of
 * none named, head rows that repeat or leave the call refused; the LM head in tiles of 4 of 21
 * rows (`-logits_tile_mb`, GPT-2 and LLaMA) equal to all rows at once: log-probabilities and
 * entropies under inv_temp 1/0.7 and a mask within 2e-6 (measured: the same bits), every
 * gradient within 1e-5 of its scale, `model_logits` NULL, the activations smaller by 2 (N - R)
 * V floats; gradient accumulation, KV-cache decode over 3 interleaved slots equal to the full
 * forward, AdamW and the learning-rate schedule against hand-computed values, the
 * configuration check (also a LLaMA n_embd not divisible by n_head, refused without
 * -policy_head_dim and accepted with it), the training slab's attention array by the backend
 * (`model_activation_bytes`: B*NH*T floats a layer with the cpu backend's log-sum-exp,
 * B*NH*T*T with the probabilities), deterministic init
 */
#include <math.h>
#include <string.h>

#include "model.h"
#include "sys.h"
#include "test_report.h"

static const char help[] = "Model regression tests (GPT-2 and the LLaMA family).\n";

static ModelConfig micro_config(ModelHead head)
{
  ModelConfig c = {.n_layer = 2, .n_head = 2, .n_embd = 16, .vocab_size = 23, .n_positions = 12, .head = head};
  return c;
}

/* The LLaMA family at the same size: variant 0 tied, grouped-query (4 heads
 * over 2), theta 10000; variant 1 untied, multi-query, q/k/v biases, llama3
 * frequency scaling, another theta and eps; variant 2 Qwen3: per-head q/k
 * norms and a head_dim of 6 (query width 24, not n_embd 16). */
static ModelConfig micro_llama(ModelHead head, int variant)
{
  ModelConfig c = micro_config(head);

  c.arch           = MODEL_ARCH_LLAMA;
  c.n_head         = 4;
  c.n_kv_head      = variant ? 1 : 2;
  c.n_ffn          = 24;
  c.qkv_bias       = variant ? PETSC_TRUE : PETSC_FALSE;
  c.tie_embeddings = variant ? PETSC_FALSE : PETSC_TRUE;
  c.rope_theta     = variant ? 500000 : 10000;
  c.norm_eps       = variant ? 1e-6 : 1e-5;
  if (variant) {
    c.rope_scaling                = MODEL_ROPE_LLAMA3;
    c.rope_factor                 = 8;
    c.rope_low_freq_factor        = 1;
    c.rope_high_freq_factor       = 4;
    c.rope_original_max_positions = 16;
  }
  if (variant == 2) {
    c.rope_scaling = MODEL_ROPE_NONE;
    c.qkv_bias     = PETSC_FALSE;
    c.n_kv_head    = 2;
    c.head_dim     = 6;
    c.qk_norm      = PETSC_TRUE;
  }
  return c;
}

static const char *config_name(const ModelConfig *c)
{
  if (c->arch == MODEL_ARCH_GPT2) return "GPT-2";
  if (c->qk_norm) return "Qwen3 q/k norms head_dim 6";
  return c->tie_embeddings ? "LLaMA tied GQA" : "LLaMA untied MQA biases llama3-rope";
}

/* The GPT-2 init gives tiny gradients in most tensors, and unit LN gains and
 * zero biases hide bugs that swap or drop them; this draws every parameter
 * O(0.3) around its GPT-2 centre so every gradient is of order 1e-2..1. */
static PetscErrorCode perturbed_params(Model *lm, uint64_t seed)
{
  float *p;

  PetscFunctionBegin;
  PetscCall(PetscMalloc1(lm->nparams, &p));
  for (int i = 0; i < lm->ntensors; i++) {
    const ModelTensor *t      = &lm->tensors[i];
    PetscBool        ln_w   = t->ndim == 1 && (strstr(t->name, "ln_") || strstr(t->name, "norm")) && strstr(t->name, ".weight") ? PETSC_TRUE : PETSC_FALSE;
    float            centre = ln_w ? 1.0f : 0.0f, std = t->ndim == 2 ? 0.3f : 0.1f;

    for (size_t e = 0; e < t->numel; e++) p[t->offset + e] = centre + std * rng_normal(seed, (uint32_t)i, 0, (uint32_t)e, 7);
  }
  PetscCall(model_params_set(lm, p));
  PetscCall(PetscFree(p));
  PetscFunctionReturn(PETSC_SUCCESS);
}

typedef struct {
  int                 B, T;
  int                *tok, *target;
  float              *w;    /* per-row loss weights */
  const ModelTokenDist *dist; /* LM head: the distribution of the logprobs (NULL: model_logprobs) */
} Batch;

static PetscErrorCode batch_create(const ModelConfig *cfg, int B, int T, uint64_t seed, Batch *b)
{
  int N = B * T;

  PetscFunctionBegin;
  b->B    = B;
  b->T    = T;
  b->dist = NULL;
  PetscCall(PetscMalloc3(N, &b->tok, N, &b->target, N, &b->w));
  for (int n = 0; n < N; n++) {
    b->tok[n]    = (int)(rng_u32(seed, 1, 0, (uint32_t)n, 0) % (uint32_t)cfg->vocab_size);
    b->target[n] = (int)(rng_u32(seed, 2, 0, (uint32_t)n, 0) % (uint32_t)cfg->vocab_size);
    b->w[n]      = rng_normal(seed, 3, 0, (uint32_t)n, 0);
  }
  b->target[3] = -1; /* a masked row must contribute nothing */
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode batch_destroy(Batch *b)
{
  PetscFunctionBegin;
  PetscCall(PetscFree3(b->tok, b->target, b->w));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* A CSR allowed-token mask for b's targets: rows with n % 4 == 0 allow the
 * whole vocabulary (empty range), n % 4 == 1 one token, the others 2..maxset
 * tokens. Members are t + 5j mod V around the target t (5 is prime to V =
 * 23, so they are distinct) in wrapped, unsorted order, the target at a
 * varying place. off [N+1] and ids are PetscMalloc'ed. */
static PetscErrorCode mask_create(const Batch *b, int V, int maxset, int **off, int **ids)
{
  int N = b->B * b->T;

  PetscFunctionBegin;
  PetscCall(PetscMalloc2(N + 1, off, (size_t)N * maxset, ids));
  (*off)[0] = 0;
  for (int n = 0; n < N; n++) {
    int sz = n % 4 == 0 ? 0 : n % 4 == 1 ? 1 : 2 + (n * 7) % (maxset - 1), at = n % (sz ? sz : 1), t = b->target[n] >= 0 ? b->target[n] : n % V;

    for (int k = 0; k < sz; k++) (*ids)[(*off)[n] + k] = ((t + 5 * (k - at)) % V + V) % V;
    (*off)[n + 1] = (*off)[n] + sz;
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* LM head: loss = -mean of logprob over rows with a target. Scalar head:
 * loss = mean of w[n]*values[n]. With dloss != NULL also d loss / d output. */
static PetscErrorCode model_loss(Model *lm, const Batch *b, double *loss, float *dloss)
{
  int    N = b->B * b->T, nvalid = 0;
  float *out;
  double s = 0;

  PetscFunctionBegin;
  PetscCall(PetscMalloc1(N, &out));
  PetscCall(model_forward(lm, b->tok, b->B, b->T));
  if (lm->cfg.head == MODEL_HEAD_LM) {
    if (b->dist) PetscCall(model_logprobs_dist(lm, b->target, b->dist, out, NULL));
    else PetscCall(model_logprobs(lm, b->target, out));
    for (int n = 0; n < N; n++) nvalid += b->target[n] >= 0;
    for (int n = 0; n < N; n++) s -= b->target[n] >= 0 ? out[n] : 0;
    *loss = s / nvalid;
    for (int n = 0; n < N && dloss; n++) dloss[n] = b->target[n] >= 0 ? -1.0f / nvalid : 0.0f;
  } else {
    PetscCall(model_values_get(lm, out));
    for (int n = 0; n < N; n++) s += (double)b->w[n] * out[n];
    *loss = s / N;
    for (int n = 0; n < N && dloss; n++) dloss[n] = b->w[n] / N;
  }
  PetscCall(PetscFree(out));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode analytic_grads(Model *lm, const Batch *b, float *g)
{
  double loss;
  float *dloss;

  PetscFunctionBegin;
  PetscCall(PetscMalloc1(b->B * b->T, &dloss));
  PetscCall(model_zero_grad(lm));
  PetscCall(model_loss(lm, b, &loss, dloss));
  if (lm->cfg.head == MODEL_HEAD_LM) PetscCall(model_backward_logprob(lm, b->target, dloss));
  else PetscCall(model_backward_values(lm, dloss));
  PetscCall(lm->be->to_host(g, lm->grads, lm->nparams * sizeof(float)));
  PetscCall(PetscFree(dloss));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Central difference for parameter j, in float parameters and double loss. */
static PetscErrorCode central_diff(Model *lm, const Batch *b, float *p, size_t j, float eps, double *g)
{
  float  p0 = p[j], hp, hm;
  double lp, lminus;

  PetscFunctionBegin;
  p[j] = hp = p0 + eps;
  PetscCall(model_params_set(lm, p));
  PetscCall(model_loss(lm, b, &lp, NULL));
  p[j] = hm = p0 - eps;
  PetscCall(model_params_set(lm, p));
  PetscCall(model_loss(lm, b, &lminus, NULL));
  p[j] = p0;
  PetscCall(model_params_set(lm, p));
  *g = (lp - lminus) / ((double)hp - (double)hm);
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Richardson's extrapolation of two central differences, (4 D(eps/2) -
 * D(eps)) / 3: the O(eps^2) truncation error cancels, which the strongly
 * curved per-head norms of small heads (Qwen3) need. */
static PetscErrorCode numeric_grad(Model *lm, const Batch *b, float *p, size_t j, float eps, double *g)
{
  double d1, d2;

  PetscFunctionBegin;
  PetscCall(central_diff(lm, b, p, j, eps, &d1));
  PetscCall(central_diff(lm, b, p, j, eps / 2, &d2));
  *g = (4 * d2 - d1) / 3;
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Six elements of every tensor (first, last, four keyed at random) are
 * checked. eps = 1e-2 (and 5e-3, extrapolated) balances the truncation
 * error against float round-off in the loss (~1e-7 relative, i.e. ~1e-5
 * absolute after dividing by 2 eps); with gradients of order 1e-2..1 a mismatch of
 * |num - ana| <= 1e-4 + 1e-2 |num| passes a correct backward with margin and
 * fails a missing or misplaced term by orders of magnitude. */
static PetscErrorCode test_gradcheck(const Backend *be, ModelConfig cfg, PetscBool masked)
{
  ModelHead    head = cfg.head;
  Model       *lm;
  Batch        b;
  float       *p, *g;
  double       worst = 0, ratio;
  int          nchecked = 0, nbad = 0, *off = NULL, *ids = NULL;
  char         name[96], detail[320] = "", worst_name[160] = "";
  ModelTokenDist dist = {1.0f / 0.7f, NULL, NULL};

  PetscFunctionBegin;
  PetscCall(model_create(&cfg, be, &lm));
  PetscCall(perturbed_params(lm, 11));
  PetscCall(batch_create(&cfg, 2, 7, 5, &b));
  if (masked) { /* temperature 0.7 and a top-k style mask: the sampling distribution of RL */
    PetscCall(mask_create(&b, cfg.vocab_size, 9, &off, &ids));
    dist.mask_off = off;
    dist.mask_ids = ids;
    b.dist        = &dist;
  }
  PetscCall(PetscMalloc2(lm->nparams, &p, lm->nparams, &g));
  PetscCall(model_params_get(lm, p));
  PetscCall(analytic_grads(lm, &b, g));
  for (int i = 0; i < lm->ntensors; i++) {
    const ModelTensor *t = &lm->tensors[i];
    for (int k = 0; k < 6; k++) {
      size_t e = k == 0 ? 0 : k == 1 ? t->numel - 1 : rng_u32(99, (uint32_t)i, 0, (uint32_t)k, 0) % t->numel, j = t->offset + e;
      double num = 0;

      PetscCall(numeric_grad(lm, &b, p, j, 1e-2f, &num));
      ratio = fabs(num - g[j]) / (1e-4 + 1e-2 * fabs(num));
      nchecked++;
      if (ratio > 1) nbad++;
      if (ratio > worst) {
        worst = ratio;
        PetscCall(PetscSNPrintf(worst_name, sizeof worst_name, "%s[%zu] num %.6g ana %.6g", t->name, e, num, (double)g[j]));
      }
    }
  }
  PetscCall(PetscSNPrintf(name, sizeof name, "gradient check, %s, %s head%s", config_name(&cfg), ModelHeadNames[head], masked ? ", model_logprobs_dist with inv_temp 1/0.7 and a mask" : ""));
  PetscCall(PetscSNPrintf(detail, sizeof detail, "%d of %d sampled parameters outside 1e-4 + 1e-2|num|; worst at %.3g of tolerance: %s", nbad, nchecked, worst,
                          worst_name));
  test_measure(nbad == 0 ? PETSC_TRUE : PETSC_FALSE, name, "%s", detail);
  PetscCall(PetscFree2(p, g));
  if (masked) PetscCall(PetscFree2(off, ids));
  PetscCall(batch_destroy(&b));
  PetscCall(model_destroy(&lm));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* model.h's definition worked on host in double from model_logits(): lse over
 * the row's set of inv_temp*logits, logprob = inv_temp*x_t - lse, entropy =
 * -sum q log q (0 without a target). */
static void hand_logprobs(const float *logits, const int *target, const ModelTokenDist *d, int N, int V, double *lp, double *ent)
{
  double it = d ? d->inv_temp : 1.0;

  for (int n = 0; n < N; n++) {
    const float *x = logits + (size_t)n * V;
    int          lo = d && d->mask_off ? d->mask_off[n] : 0, hi = d && d->mask_off ? d->mask_off[n + 1] : 0, all = hi == lo, nset = all ? V : hi - lo;
    double       m = -INFINITY, z = 0, l, h = 0;

    for (int k = 0; k < nset; k++) m = PetscMax(m, it * x[all ? k : d->mask_ids[lo + k]]);
    for (int k = 0; k < nset; k++) z += exp(it * x[all ? k : d->mask_ids[lo + k]] - m);
    l = m + log(z);
    for (int k = 0; k < nset; k++) {
      double q = exp(it * x[all ? k : d->mask_ids[lo + k]] - l);
      h -= q > 0 ? q * log(q) : 0;
    }
    lp[n]  = target[n] >= 0 ? it * x[target[n]] - l : 0;
    ent[n] = target[n] >= 0 ? h : 0;
  }
}

/* Worst |got - want| / (1e-5 + 1e-5 |want|) over n entries. */
static double worst_err(const float *got, const double *want, int n)
{
  double w = 0;

  for (int i = 0; i < n; i++) w = PetscMax(w, PetscIsInfOrNanReal(got[i]) ? INFINITY : fabs(got[i] - want[i]) / (1e-5 + 1e-5 * fabs(want[i])));
  return w;
}

/* model_logprobs_dist: dist NULL and {1, no mask} are model_logprobs bitwise; a
 * small and then a larger mask (the device id buffer grows) at inv_temp
 * 1/0.7 match the host hand computation, entropies included; and a plain
 * model_logprobs after a masked one makes the backward plain again. */
static PetscErrorCode test_logprobs_dist(const Backend *be)
{
  ModelConfig  cfg = micro_config(MODEL_HEAD_LM);
  Model       *lm;
  Batch        b;
  int          N, V = cfg.vocab_size, *off[2], *ids[2];
  float       *lp0, *lp1, *lp2, *ent, *logits, *g0, *g1, *dloss;
  double      *hlp, *hent, werr = 0;
  ModelTokenDist one = {1.0f, NULL, NULL}, masked[2];
  PetscBool    same;
  char         detail[160];

  PetscFunctionBegin;
  PetscCall(model_create(&cfg, be, &lm));
  PetscCall(perturbed_params(lm, 13));
  PetscCall(batch_create(&cfg, 2, 7, 9, &b));
  N = b.B * b.T;
  PetscCall(PetscMalloc5(N, &lp0, N, &lp1, N, &lp2, N, &ent, (size_t)N * V, &logits));
  PetscCall(PetscMalloc5(N, &hlp, N, &hent, lm->nparams, &g0, lm->nparams, &g1, N, &dloss));
  PetscCall(model_forward(lm, b.tok, b.B, b.T));
  PetscCall(be->to_host(logits, model_logits(lm), (size_t)N * V * sizeof(float)));
  PetscCall(model_logprobs(lm, b.target, lp0));
  PetscCall(model_logprobs_dist(lm, b.target, NULL, lp1, ent));
  PetscCall(model_logprobs_dist(lm, b.target, &one, lp2, NULL));
  same = !memcmp(lp0, lp1, N * sizeof(float)) && !memcmp(lp0, lp2, N * sizeof(float)) ? PETSC_TRUE : PETSC_FALSE;
  hand_logprobs(logits, b.target, NULL, N, V, hlp, hent);
  werr = PetscMax(worst_err(lp1, hlp, N), worst_err(ent, hent, N));
  PetscCall(PetscSNPrintf(detail, sizeof detail, "%s; against the host computation at %.3g of tolerance", same ? "bitwise" : "NOT bitwise", werr));
  test_measure(same && werr <= 1 ? PETSC_TRUE : PETSC_FALSE, "model_logprobs_dist with dist NULL or inv_temp 1 equals model_logprobs", "%s", detail);

  werr = 0;
  for (int k = 0; k < 2; k++) {
    PetscCall(mask_create(&b, V, k ? 12 : 3, &off[k], &ids[k]));
    masked[k] = (ModelTokenDist){1.0f / 0.7f, off[k], ids[k]};
    PetscCall(model_logprobs_dist(lm, b.target, &masked[k], lp1, ent));
    hand_logprobs(logits, b.target, &masked[k], N, V, hlp, hent);
    werr = PetscMax(werr, PetscMax(worst_err(lp1, hlp, N), worst_err(ent, hent, N)));
  }
  PetscCall(PetscSNPrintf(detail, sizeof detail, "logprob and entropy at %.3g of 1e-5 + 1e-5|ref| (rows 1, 5, 9 allow one token)", werr));
  test_measure(werr <= 1 ? PETSC_TRUE : PETSC_FALSE, "model_logprobs_dist with inv_temp 1/0.7 and masks of 1..3 then 1..12 tokens = host computation from model_logits", "%s", detail);

  /* the backward follows the last call's distribution, not an earlier one */
  for (int n = 0; n < N; n++) dloss[n] = b.target[n] >= 0 ? 0.1f * (float)(n % 5) - 0.2f : 0.0f;
  PetscCall(model_zero_grad(lm));
  PetscCall(model_logprobs(lm, b.target, lp0));
  PetscCall(model_backward_logprob(lm, b.target, dloss));
  PetscCall(be->to_host(g0, lm->grads, lm->nparams * sizeof(float)));
  PetscCall(model_forward(lm, b.tok, b.B, b.T));
  PetscCall(model_zero_grad(lm));
  PetscCall(model_logprobs_dist(lm, b.target, &masked[1], lp1, NULL));
  PetscCall(model_logprobs(lm, b.target, lp1));
  PetscCall(model_backward_logprob(lm, b.target, dloss));
  PetscCall(be->to_host(g1, lm->grads, lm->nparams * sizeof(float)));
  same = !memcmp(g0, g1, lm->nparams * sizeof(float)) ? PETSC_TRUE : PETSC_FALSE;
  test_measure(same, "model_backward_logprob uses the last call's distribution (plain after masked)", "%s", same ? "bitwise" : "gradients differ");
  for (int k = 0; k < 2; k++) PetscCall(PetscFree2(off[k], ids[k]));
  PetscCall(PetscFree5(lp0, lp1, lp2, ent, logits));
  PetscCall(PetscFree5(hlp, hent, g0, g1, dloss));
  PetscCall(batch_destroy(&b));
  PetscCall(model_destroy(&lm));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Gradients accumulate across backward calls: two backwards give twice one. */
/* The head in tiles (-logits_tile_mb of 4 rows of logits, 21 rows): the
 * log-probabilities and entropies under inv_temp 1/0.7 and a mask, and
 * every gradient, as with all rows at once (to float rounding: the tiles'
 * head matmuls and the head weight gradient's sum run in another order);
 * model_logits is NULL then, and the activations are smaller by the rows
 * of logits and of their gradient not held. */
static PetscErrorCode test_logits_tiles(const Backend *be, ModelConfig cfg)
{
  Model         *lm;
  Batch          b;
  int            N, V = cfg.vocab_size, *off, *ids, R = 4;
  float         *lp[2], *ent[2], *g[2], *dloss;
  double         elp = 0, eg = 0, sg = 0, mb = 4.0 * R * V / 1048576.0, saved, want;
  ModelTokenDist d;
  PetscBool      null_logits = PETSC_FALSE;
  char           name[160], detail[200];

  PetscFunctionBegin;
  PetscCall(model_create(&cfg, be, &lm));
  PetscCall(perturbed_params(lm, 17));
  PetscCall(batch_create(&cfg, 3, 7, 19, &b));
  N = b.B * b.T;
  PetscCall(mask_create(&b, V, 6, &off, &ids));
  d = (ModelTokenDist){1.0f / 0.7f, off, ids};
  PetscCall(PetscMalloc4(N, &lp[0], N, &lp[1], N, &ent[0], N, &ent[1]));
  PetscCall(PetscMalloc3(lm->nparams, &g[0], lm->nparams, &g[1], N, &dloss));
  for (int n = 0; n < N; n++) dloss[n] = b.target[n] >= 0 ? 0.1f * (float)(n % 7) - 0.3f : 0.0f;
  for (int k = 0; k < 2; k++) {
    PetscCall(model_set_logits_tile_mb(k ? mb : 0));
    PetscCall(model_forward(lm, b.tok, b.B, b.T));
    if (k) null_logits = model_logits(lm) == NULL ? PETSC_TRUE : PETSC_FALSE;
    PetscCall(model_logprobs_dist(lm, b.target, &d, lp[k], ent[k]));
    PetscCall(model_zero_grad(lm));
    PetscCall(model_backward_logprob(lm, b.target, dloss));
    PetscCall(be->to_host(g[k], lm->grads, lm->nparams * sizeof(float)));
  }
  for (int n = 0; n < N; n++) elp = PetscMax(elp, PetscMax(fabs(lp[1][n] - lp[0][n]), fabs(ent[1][n] - ent[0][n])));
  for (size_t i = 0; i < lm->nparams; i++) eg = PetscMax(eg, fabs(g[1][i] - g[0][i])), sg = PetscMax(sg, fabs(g[0][i]));
  PetscCall(model_set_logits_tile_mb(mb));
  saved = (double)model_activation_bytes(&cfg, b.B, b.T);
  PetscCall(model_set_logits_tile_mb(0));
  saved = (double)model_activation_bytes(&cfg, b.B, b.T) - saved;
  want  = 2.0 * (N - R) * V * sizeof(float);
  PetscCall(PetscSNPrintf(name, sizeof name, "LM head in tiles of %d of %d rows = all rows at once, %s: log-probabilities, entropies, gradients", R, N, config_name(&cfg)));
  PetscCall(PetscSNPrintf(detail, sizeof detail, "max |diff| logprob/entropy %.2e, gradient %.2e of %.3g; model_logits %s; activations %.0f bytes smaller (2 (N - R) V floats: %.0f, each buffer rounded up to 64 floats)", elp,
                          eg, sg, null_logits ? "NULL" : "NOT NULL", saved, want));
  test_measure(elp <= 2e-6 && eg <= 1e-5 * sg && null_logits && fabs(saved - want) <= 2 * 64 * sizeof(float) ? PETSC_TRUE : PETSC_FALSE, name, "%s", detail);
  PetscCall(model_set_logits_tile_mb(MODEL_LOGITS_TILE_MB));
  PetscCall(PetscFree4(lp[0], lp[1], ent[0], ent[1]));
  PetscCall(PetscFree3(g[0], g[1], dloss));
  PetscCall(PetscFree2(off, ids));
  PetscCall(batch_destroy(&b));
  PetscCall(model_destroy(&lm));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode test_grad_accumulates(const Backend *be)
{
  ModelConfig cfg = micro_config(MODEL_HEAD_LM);
  Model    *lm;
  Batch     b;
  float    *g1, *g2, *dloss;
  double    loss, err = 0, scale = 0;
  char      detail[128];

  PetscFunctionBegin;
  PetscCall(model_create(&cfg, be, &lm));
  PetscCall(perturbed_params(lm, 12));
  PetscCall(batch_create(&cfg, 2, 7, 6, &b));
  PetscCall(PetscMalloc3(lm->nparams, &g1, lm->nparams, &g2, 14, &dloss));
  PetscCall(analytic_grads(lm, &b, g1));
  PetscCall(model_loss(lm, &b, &loss, dloss));
  PetscCall(model_backward_logprob(lm, b.target, dloss));
  PetscCall(be->to_host(g2, lm->grads, lm->nparams * sizeof(float)));
  for (size_t j = 0; j < lm->nparams; j++) {
    err   = PetscMax(err, fabs(g2[j] - 2 * g1[j]));
    scale = PetscMax(scale, fabs(g1[j]));
  }
  PetscCall(PetscSNPrintf(detail, sizeof detail, "max |g2 - 2 g1| = %.3g (max |g1| = %.3g)", err, scale));
  test_measure(err <= 1e-5 * scale ? PETSC_TRUE : PETSC_FALSE, "gradients accumulate over backward calls", "%s", detail);
  PetscCall(PetscFree3(g1, g2, dloss));
  PetscCall(batch_destroy(&b));
  PetscCall(model_destroy(&lm));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* One prefill of every prompt with the head on each prompt's last row: out
 * holds those B rows (and nothing past them), each the full forward's row;
 * head rows that do not ascend, or leave the call, are refused. */
static PetscErrorCode head_rows_check(Model *lm, const int *tok, int B, int T, const int *prompt, const float *ref, int nout, double maxref)
{
  ModelKVCache  *kv;
  int            N = 0, rtok[27], slot[27], pos[27], last[3], bad[2][2] = {{1, 1}, {0, 9}};
  float         *out;
  double         maxerr = 0;
  PetscBool      guard = PETSC_TRUE, refused = PETSC_TRUE;
  PetscErrorCode ierr;
  char           name[160], detail[160], msg[TEST_MESSAGE_MAX];

  PetscFunctionBegin;
  PetscCheck(B <= 3 && B * T <= 27, PETSC_COMM_SELF, PETSC_ERR_SUP, "head_rows_check: at most 3 prompts of 27 rows");
  for (int s = 0; s < B; s++) {
    for (int t = 0; t < prompt[s]; t++, N++) rtok[N] = tok[s * T + t], slot[N] = s, pos[N] = t;
    last[s] = N - 1;
  }
  PetscCall(PetscMalloc1((size_t)(B + 1) * nout, &out));
  for (int i = 0; i < (B + 1) * nout; i++) out[i] = -7.0f;
  PetscCall(model_kv_create(lm, B, T + 1, &kv));
  PetscCall(model_forward_cached(lm, kv, rtok, slot, pos, N, last, B, out));
  for (int s = 0; s < B; s++)
    for (int v = 0; v < nout; v++) maxerr = PetscMax(maxerr, fabs(out[s * nout + v] - ref[(s * T + prompt[s] - 1) * nout + v]));
  for (int v = 0; v < nout; v++) guard = guard && out[B * nout + v] == -7.0f ? PETSC_TRUE : PETSC_FALSE;
  PetscCall(PetscSNPrintf(name, sizeof name, "prefill of %d prompts (%d rows) with the head on each one's last row, %s, %s head", B, N, config_name(&lm->cfg), ModelHeadNames[lm->cfg.head]));
  PetscCall(PetscSNPrintf(detail, sizeof detail, "max |cached - full| = %.3g (tolerance 1e-5 of %.3g); the row after them %s", maxerr, maxref, guard ? "untouched" : "written"));
  test_measure(maxerr <= 1e-5 * maxref && guard ? PETSC_TRUE : PETSC_FALSE, name, "%s", detail);
  { /* every row named: the same as none named (out holds N rows) */
    int    all[27];
    float *o1, *o2;
    for (int r = 0; r < N; r++) all[r] = r;
    PetscCall(PetscMalloc2((size_t)N * nout, &o1, (size_t)N * nout, &o2));
    PetscCall(model_kv_destroy(lm, &kv));
    PetscCall(model_kv_create(lm, B, T + 1, &kv));
    PetscCall(model_forward_cached(lm, kv, rtok, slot, pos, N, all, N, o1));
    PetscCall(model_kv_destroy(lm, &kv));
    PetscCall(model_kv_create(lm, B, T + 1, &kv));
    PetscCall(model_forward_cached(lm, kv, rtok, slot, pos, N, NULL, N, o2));
    test_measure(!memcmp(o1, o2, (size_t)N * nout * sizeof(float)) ? PETSC_TRUE : PETSC_FALSE, "head rows naming every row of the call = none named, bit for bit", "%d rows", N);
    PetscCall(PetscFree2(o1, o2));
  }
  for (int k = 0; k < 2; k++) {
    msg[0] = 0;
    PetscCall(PetscPushErrorHandler(test_capture_error, msg));
    ierr = model_forward_cached(lm, kv, rtok, slot, pos, N, bad[k], 2, out);
    PetscCall(PetscPopErrorHandler());
    refused = refused && ierr && strstr(msg, "head rows must ascend") ? PETSC_TRUE : PETSC_FALSE;
  }
  test_measure(refused, "model_forward_cached refuses head rows {1, 1} and {0, 9} of 9 rows", "last message \"%s\"", msg);
  PetscCall(model_kv_destroy(lm, &kv));
  PetscCall(PetscFree(out));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Three sequences: prefill a different prompt length per slot, then decode
 * one token per call with the slots in a shuffled order each step. Every
 * output row must equal the full forward's row for that (sequence, position). */
static PetscErrorCode test_kv_cache(const Backend *be, ModelConfig cfg)
{
  ModelHead   head = cfg.head;
  Model      *lm;
  ModelKVCache *kv;
  const int   B = 3, T = 9, prompt[3] = {3, 1, 5}, order[3][3] = {{2, 0, 1}, {1, 2, 0}, {0, 1, 2}};
  int         tok[27], slot[3], pos[3], rtok[3], nout = head == MODEL_HEAD_LM ? cfg.vocab_size : 1;
  float      *ref, *out;
  double      maxref = 0, maxerr = 0;
  char        name[128], detail[128];

  PetscFunctionBegin;
  PetscCall(model_create(&cfg, be, &lm));
  PetscCall(perturbed_params(lm, 21));
  for (int n = 0; n < B * T; n++) tok[n] = (int)(rng_u32(8, 0, 0, (uint32_t)n, 0) % (uint32_t)cfg.vocab_size);
  PetscCall(PetscMalloc2(B * T * nout, &ref, T * nout, &out));
  PetscCall(model_forward(lm, tok, B, T));
  PetscCall(be->to_host(ref, head == MODEL_HEAD_LM ? model_logits(lm) : model_values(lm), (size_t)B * T * nout * sizeof(float)));
  for (int i = 0; i < B * T * nout; i++) maxref = PetscMax(maxref, fabs(ref[i]));

  PetscCall(model_kv_create(lm, B, 10, &kv));
  for (int s = 0; s < B; s++) {
    int spos[9], sslot[9];
    for (int t = 0; t < prompt[s]; t++) {
      spos[t]  = t;
      sslot[t] = s;
    }
    PetscCall(model_forward_cached(lm, kv, tok + s * T, sslot, spos, prompt[s], NULL, prompt[s], out));
    for (int t = 0; t < prompt[s] * nout; t++) maxerr = PetscMax(maxerr, fabs(out[t] - ref[s * T * nout + t]));
  }
  for (int step = 0;; step++) {
    int n = 0;
    for (int k = 0; k < B; k++) {
      int s = order[step % 3][k], t = prompt[s] + step;
      if (t >= T) continue;
      slot[n] = s;
      pos[n]  = t;
      rtok[n] = tok[s * T + t];
      n++;
    }
    if (!n) break;
    PetscCall(model_forward_cached(lm, kv, rtok, slot, pos, n, NULL, n, out));
    for (int r = 0; r < n; r++)
      for (int v = 0; v < nout; v++) maxerr = PetscMax(maxerr, fabs(out[r * nout + v] - ref[(slot[r] * T + pos[r]) * nout + v]));
  }
  PetscCall(PetscSNPrintf(name, sizeof name, "KV-cache decode equals full forward, %s, %s head", config_name(&cfg), ModelHeadNames[head]));
  PetscCall(PetscSNPrintf(detail, sizeof detail, "max |cached - full| = %.3g, max |full| = %.3g (tolerance 1e-5 relative)", maxerr, maxref));
  test_measure(maxerr <= 1e-5 * maxref ? PETSC_TRUE : PETSC_FALSE, name, "%s", detail);
  PetscCall(model_kv_destroy(lm, &kv));
  PetscCall(head_rows_check(lm, tok, B, T, prompt, ref, nout, maxref));
  PetscCall(PetscFree2(ref, out));
  PetscCall(model_destroy(&lm));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* A smaller batch after a larger one reuses the buffers; by causality the
 * first T' positions of a sequence do not depend on the rest. */
static PetscErrorCode test_shape_change(const Backend *be)
{
  ModelConfig cfg = micro_config(MODEL_HEAD_LM);
  Model    *lm;
  int       tok[24], V = cfg.vocab_size;
  float    *big, *small;
  double    err = 0;
  char      detail[128];

  PetscFunctionBegin;
  PetscCall(model_create(&cfg, be, &lm));
  PetscCall(perturbed_params(lm, 31));
  for (int n = 0; n < 24; n++) tok[n] = (n * 7 + 3) % V;
  PetscCall(PetscMalloc2(24 * V, &big, 4 * V, &small));
  PetscCall(model_forward(lm, tok, 2, 12));
  PetscCall(be->to_host(big, model_logits(lm), 24 * V * sizeof(float)));
  PetscCall(model_forward(lm, tok + 12, 1, 4));
  PetscCall(be->to_host(small, model_logits(lm), 4 * V * sizeof(float)));
  for (int i = 0; i < 4 * V; i++) err = PetscMax(err, fabs(small[i] - big[12 * V + i]));
  PetscCall(PetscSNPrintf(detail, sizeof detail, "max |prefix logits - full logits| = %.3g", err));
  test_measure(err <= 1e-5 ? PETSC_TRUE : PETSC_FALSE, "forward after a shape change (causal prefix)", "%s", detail);
  PetscCall(PetscFree2(big, small));
  PetscCall(model_destroy(&lm));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* One element worked by hand: p=1, g=0.5, m=v=0, lr=0.1, b1=0.9, b2=0.999,
 * eps=1e-8, wd=0.1, t=1, gs=1: decay gives 0.99; m=0.05, v=2.5e-4; the
 * bias-corrected step is lr * 0.5/(0.5 + 1e-8) = 0.1 - 2e-10; so p = 0.89. */
static PetscErrorCode test_adamw_op(const Backend *be)
{
  float *p, *g, *m, *v, hp[2];
  char   detail[128];

  PetscFunctionBegin;
  PetscCall(be->alloc(2 * sizeof(float), (void **)&p));
  PetscCall(be->alloc(2 * sizeof(float), (void **)&g));
  PetscCall(be->alloc(2 * sizeof(float), (void **)&m));
  PetscCall(be->alloc(2 * sizeof(float), (void **)&v));
  hp[0] = 1.0f;
  hp[1] = -2.0f;
  PetscCall(be->from_host(p, hp, sizeof hp));
  hp[0] = 0.5f;
  hp[1] = 0.0f;
  PetscCall(be->from_host(g, hp, sizeof hp));
  PetscCall(be->adamw(p, g, m, v, 2, 0.1f, 0.9f, 0.999f, 1e-8f, 0.1f, 1, 1.0f));
  PetscCall(be->to_host(hp, p, sizeof hp));
  /* the second element has g = 0: only the decay moves it, to -1.98 */
  PetscCall(PetscSNPrintf(detail, sizeof detail, "p = {%.8g, %.8g}, expected {0.89, -1.98}", (double)hp[0], (double)hp[1]));
  test_measure(fabs(hp[0] - 0.89) < 1e-6 && fabs(hp[1] + 1.98) < 1e-6 ? PETSC_TRUE : PETSC_FALSE, "AdamW op, one step by hand", "%s", detail);
  PetscCall(be->free(p));
  PetscCall(be->free(g));
  PetscCall(be->free(m));
  PetscCall(be->free(v));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Two model_adamw_step calls on a tiny model against the same update computed
 * here in double: clipping scale, lr from the schedule, decay only on 2-D
 * tensors, bias correction at t = 1 and 2. */
static PetscErrorCode test_adamw_step(const Backend *be)
{
  ModelConfig cfg = {.n_layer = 1, .n_head = 1, .n_embd = 2, .vocab_size = 3, .n_positions = 2, .head = MODEL_HEAD_LM};
  AdamWConfig opt = {.lr = 0.01, .min_lr_ratio = 0.1, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1, .grad_clip = 1.0, .warmup = 2, .decay_steps = 4};
  Model      *lm;
  float      *p, *g, *got;
  double     *ep, *em, *ev, err = 0, norm_err = 0;
  PetscReal   lr, norm;
  size_t      n;
  char        detail[160];

  PetscFunctionBegin;
  PetscCall(model_create(&cfg, be, &lm));
  n = lm->nparams;
  PetscCall(PetscMalloc3(n, &p, n, &g, n, &got));
  PetscCall(PetscMalloc3(n, &ep, n, &em, n, &ev));
  for (size_t j = 0; j < n; j++) {
    p[j]  = 0.5f * rng_normal(3, 0, 0, (uint32_t)j, 0);
    ep[j] = p[j];
    em[j] = ev[j] = 0;
  }
  PetscCall(model_params_set(lm, p));
  PetscCall(model_optim_init(lm));
  for (int step = 0; step < 2; step++) {
    double ss = 0, enorm, gs, elr, b1 = opt.beta1, b2 = opt.beta2;
    /* large gradients in step 0 (clipped), small in step 1 (not clipped) */
    for (size_t j = 0; j < n; j++) g[j] = (step ? 0.01f : 1.0f) * rng_normal(4, (uint32_t)step, 0, (uint32_t)j, 0);
    for (size_t j = 0; j < n; j++) ss += (double)g[j] * g[j];
    enorm = sqrt(ss);
    gs    = enorm > opt.grad_clip ? opt.grad_clip / (enorm + 1e-6) : 1;
    elr   = step == 0 ? opt.lr * 0.5 : opt.lr; /* warm-up over 2 steps */
    for (int i = 0; i < lm->ntensors; i++) {
      const ModelTensor *t  = &lm->tensors[i];
      double           wd = t->ndim == 2 ? opt.weight_decay : 0;
      for (size_t j = t->offset; j < t->offset + t->numel; j++) {
        double gg = g[j] * gs;
        ep[j] -= elr * wd * ep[j];
        em[j] = b1 * em[j] + (1 - b1) * gg;
        ev[j] = b2 * ev[j] + (1 - b2) * gg * gg;
        ep[j] -= elr / (1 - pow(b1, step + 1)) * em[j] / (sqrt(ev[j]) / sqrt(1 - pow(b2, step + 1)) + opt.eps);
      }
    }
    PetscCall(be->from_host(lm->grads, g, n * sizeof(float)));
    PetscCall(model_adamw_step(lm, &opt, &lr, &norm));
    norm_err = PetscMax(norm_err, fabs(norm - enorm) / enorm + fabs(lr - elr) / elr);
  }
  PetscCall(model_params_get(lm, got));
  for (size_t j = 0; j < n; j++) err = PetscMax(err, fabs(got[j] - ep[j]));
  PetscCall(PetscSNPrintf(detail, sizeof detail, "max |p - expected| = %.3g over %zu params, norm/lr rel err %.3g, step %d", err, n, norm_err, lm->step));
  test_measure(err < 1e-6 && norm_err < 1e-6 && lm->step == 2 ? PETSC_TRUE : PETSC_FALSE, "model_adamw_step, two steps with clipping", "%s", detail);
  PetscCall(PetscFree3(p, g, got));
  PetscCall(PetscFree3(ep, em, ev));
  PetscCall(model_destroy(&lm));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* lr 1e-3, warm-up 10, cosine over 100 steps to 1e-4:
 * step 0 -> 1e-4, 9 -> 1e-3, 10 -> 1e-3, 60 -> 1e-3*(0.1+0.9*0.5) = 5.5e-4,
 * 110 and 500 -> 1e-4; without decay steps, step 50 -> 1e-3. */
static PetscErrorCode test_lr_schedule(void)
{
  AdamWConfig opt      = {.lr = 1e-3, .min_lr_ratio = 0.1, .warmup = 10, .decay_steps = 100};
  const int   steps[6] = {0, 9, 10, 60, 110, 500};
  const double want[6] = {1e-4, 1e-3, 1e-3, 5.5e-4, 1e-4, 1e-4};
  double      err      = 0;
  char        detail[64];

  PetscFunctionBegin;
  for (int i = 0; i < 6; i++) err = PetscMax(err, fabs(adamw_lr(&opt, steps[i]) - want[i]));
  opt.decay_steps = 0;
  err             = PetscMax(err, fabs(adamw_lr(&opt, 50) - 1e-3));
  PetscCall(PetscSNPrintf(detail, sizeof detail, "max error %.3g", err));
  test_measure(err < 1e-12 ? PETSC_TRUE : PETSC_FALSE, "learning-rate schedule by hand", "%s", detail);
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* -policy_n_embd 130 with -policy_n_head 4 read from the options database
 * must fail in model_config_check with a message naming both options. */
static PetscErrorCode test_config_check(void)
{
  ModelConfig    cfg;
  PetscErrorCode ierr;
  char           msg[TEST_MESSAGE_MAX] = "", detail[320];
  const char    *want     = "-policy_n_embd 130 is not divisible by -policy_n_head 4";

  PetscFunctionBegin;
  PetscCall(PetscOptionsSetValue(NULL, "-policy_n_embd", "130"));
  PetscCall(PetscOptionsSetValue(NULL, "-policy_n_head", "4"));
  PetscCall(model_config_set_from_options("policy_", &cfg));
  PetscCall(PetscOptionsClearValue(NULL, "-policy_n_embd"));
  PetscCall(PetscOptionsClearValue(NULL, "-policy_n_head"));
  PetscCall(PetscPushErrorHandler(test_capture_error, msg));
  ierr = model_config_check(&cfg, "policy_");
  PetscCall(PetscPopErrorHandler());
  PetscCall(PetscSNPrintf(detail, sizeof detail, "error %d, message \"%s\"", (int)ierr, msg));
  test_measure(ierr != 0 && strstr(msg, want) ? PETSC_TRUE : PETSC_FALSE, "config check rejects n_embd not divisible by n_head", "%s", detail);
  cfg.n_embd = 128;
  ierr       = model_config_check(&cfg, "policy_");
  test_measure(ierr == 0 ? PETSC_TRUE : PETSC_FALSE, "config check accepts the defaults with n_embd 128", "%s", ierr ? "rejected" : "");
  /* a LLaMA-family model: the same refusal without -head_dim, none with it (Qwen3's own head width) */
  for (int given = 0; given < 2; given++) {
    PetscCall(PetscOptionsSetValue(NULL, "-policy_arch", "llama"));
    PetscCall(PetscOptionsSetValue(NULL, "-policy_n_embd", "130"));
    PetscCall(PetscOptionsSetValue(NULL, "-policy_n_head", "4"));
    if (given) PetscCall(PetscOptionsSetValue(NULL, "-policy_head_dim", "32"));
    PetscCall(model_config_set_from_options("policy_", &cfg));
    PetscCall(PetscOptionsClearValue(NULL, "-policy_arch"));
    PetscCall(PetscOptionsClearValue(NULL, "-policy_n_embd"));
    PetscCall(PetscOptionsClearValue(NULL, "-policy_n_head"));
    if (given) PetscCall(PetscOptionsClearValue(NULL, "-policy_head_dim"));
    msg[0] = 0;
    PetscCall(PetscPushErrorHandler(test_capture_error, msg));
    ierr = model_config_check(&cfg, "policy_");
    PetscCall(PetscPopErrorHandler());
    PetscCall(PetscSNPrintf(detail, sizeof detail, "error %d, message \"%s\", head_dim %d", (int)ierr, msg, cfg.head_dim));
    if (given) test_measure(ierr == 0 && model_q_width(&cfg) == 128 ? PETSC_TRUE : PETSC_FALSE, "config check accepts LLaMA n_embd 130 over 4 heads with -head_dim 32 (query width 128)", "%s", detail);
    else test_measure(ierr != 0 && strstr(msg, want) ? PETSC_TRUE : PETSC_FALSE, "config check rejects LLaMA n_embd 130 over 4 heads without -head_dim", "%s", detail);
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* model_logprobs_dist rejects a bad distribution on host with a message that
 * names the problem, and a failed call leaves nothing for the backward. */
static PetscErrorCode test_dist_errors(const Backend *be)
{
  ModelConfig    cfg = micro_config(MODEL_HEAD_LM);
  Model         *lm;
  Batch          b;
  int            N, V = cfg.vocab_size, *off, *ids, *boff, *bids, *btgt, nbad = 0;
  float         *lp;
  char           msg[TEST_MESSAGE_MAX], want[9][96], detail[1024] = "";
  PetscErrorCode ierr;

  PetscFunctionBegin;
  PetscCall(model_create(&cfg, be, &lm));
  PetscCall(batch_create(&cfg, 2, 7, 9, &b));
  N = b.B * b.T;
  PetscCall(mask_create(&b, V, 6, &off, &ids)); /* row 1 allows one token, row 2 at least two */
  PetscCall(PetscMalloc4(N + 1, &boff, off[N], &bids, N, &btgt, N, &lp));
  PetscCall(model_forward(lm, b.tok, b.B, b.T));
  for (int c = 0; c < 9; c++) {
    ModelTokenDist d = {1.0f / 0.7f, boff, bids};

    PetscCall(PetscArraycpy(boff, off, N + 1));
    PetscCall(PetscArraycpy(bids, ids, off[N]));
    PetscCall(PetscArraycpy(btgt, b.target, N));
    switch (c) {
    case 0: d.inv_temp = 0.0f; PetscCall(PetscStrcpy(want[c], "inv_temp must be positive and finite")); break;
    case 1: d.inv_temp = NAN; PetscCall(PetscStrcpy(want[c], "inv_temp must be positive and finite")); break;
    case 2: boff[0] = 1; PetscCall(PetscStrcpy(want[c], "mask_off[0] is 1, not 0")); break;
    case 3: boff[3] = boff[2] - 1; PetscCall(PetscStrcpy(want[c], "mask_off decreases at row 2")); break;
    case 4: bids[off[2]] = V; PetscCall(PetscSNPrintf(want[c], sizeof want[c], "row 2 allows token %d outside the vocabulary", V)); break;
    case 5: bids[off[2] + 1] = bids[off[2]]; PetscCall(PetscSNPrintf(want[c], sizeof want[c], "row 2 allows token %d twice", bids[off[2]])); break;
    case 6: btgt[1] = (ids[off[1]] + 1) % V; PetscCall(PetscSNPrintf(want[c], sizeof want[c], "row 1 has target %d outside its allowed set", btgt[1])); break;
    case 7: bids[off[1]] = tensor_set_but(btgt[1]); PetscCall(PetscSNPrintf(want[c], sizeof want[c], "row 1 has target %d outside its allowed set", btgt[1])); break;
    default: bids[off[1]] = tensor_set_but(V); PetscCall(PetscSNPrintf(want[c], sizeof want[c], "row 1 allows every token but %d, outside the vocabulary", V));
    }
    msg[0] = 0;
    PetscCall(PetscPushErrorHandler(test_capture_error, msg));
    ierr = model_logprobs_dist(lm, btgt, &d, lp, NULL);
    PetscCall(PetscPopErrorHandler());
    if (!ierr || !strstr(msg, want[c])) {
      size_t l = strlen(detail);
      nbad++;
      PetscCall(PetscSNPrintf(detail + l, sizeof detail - l, "case %d: error %d \"%s\"; ", c, (int)ierr, msg));
    }
  }
  PetscCall(PetscPushErrorHandler(test_capture_error, msg));
  ierr = model_backward_logprob(lm, b.target, lp);
  PetscCall(PetscPopErrorHandler());
  if (!ierr) {
    nbad++;
    PetscCall(PetscStrlcat(detail, "model_backward_logprob ran after a failed model_logprobs_dist; ", sizeof detail));
  }
  test_measure(nbad ? PETSC_FALSE : PETSC_TRUE, "model_logprobs_dist rejects bad inv_temp, mask_off, ids (a compact set's e too) and a target outside its set (e of a compact set too)", "%s", detail);
  PetscCall(PetscFree4(boff, bids, btgt, lp));
  PetscCall(PetscFree2(off, ids));
  PetscCall(batch_destroy(&b));
  PetscCall(model_destroy(&lm));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* GPT-2 small (124M) has 124,439,808 parameters in 148 tensors. */
static PetscErrorCode test_tensor_table(void)
{
  ModelConfig  cfg = {.n_layer = 12, .n_head = 12, .n_embd = 768, .vocab_size = 50257, .n_positions = 1024, .head = MODEL_HEAD_LM};
  ModelTensor *t;
  int        nt;
  size_t     np, off = 0;
  PetscBool  ok = PETSC_TRUE;
  char       detail[160];

  PetscFunctionBegin;
  PetscCall(model_tensor_table(&cfg, &t, &nt, &np));
  for (int i = 0; i < nt; i++) {
    ok  = ok && t[i].offset == off && (t[i].ndim == 2) == t[i].decay ? PETSC_TRUE : PETSC_FALSE;
    off = t[i].offset + t[i].numel;
  }
  ok = ok && np == 124439808 && nt == 148 && !strcmp(t[2].name, "transformer.h.0.ln_1.weight") && !strcmp(t[4].name, "transformer.h.0.attn.c_attn.weight") &&
           t[4].shape[0] == 768 && t[4].shape[1] == 2304 && !strcmp(t[12].name, "transformer.h.0.mlp.c_proj.weight") && t[12].shape[0] == 3072 &&
           !strcmp(t[147].name, "transformer.ln_f.bias")
         ? PETSC_TRUE
         : PETSC_FALSE;
  PetscCall(PetscSNPrintf(detail, sizeof detail, "%d tensors, %zu parameters, last %s", nt, np, t[nt - 1].name));
  test_measure(ok, "tensor table matches GPT-2 small", "%s", detail);
  PetscCall(PetscFree(t));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* The architecture table: each row's name is what -<role>_arch takes, and
 * the tensor table a row's model gets follows the row's fields (a position
 * table, the final norm's bias, the attention and MLP matrices, the biases
 * of linear layers), so a new row is checked the same way. Each layer has
 * the two norms' gains (and LayerNorm biases), q|k|v and the output
 * projection (Conv1D: one c_attn; Linear: q, k, v apart), and the MLP's two
 * or three matrices. */
static PetscErrorCode test_arch_table(void)
{
  PetscFunctionBegin;
  for (int r = 0; r < MODEL_ARCH_COUNT; r++) {
    const ModelArchRow *row = &model_archs[r];
    ModelConfig         cfg;
    ModelTensor        *t;
    int                 nt, n2 = 0, n1 = 0, npos = 0;
    size_t              np;
    PetscErrorCode      ierr;
    char                detail[256];

    PetscCall(PetscOptionsSetValue(NULL, "-policy_arch", row->name));
    PetscCall(PetscOptionsSetValue(NULL, "-policy_n_positions", "12"));
    PetscCall(model_config_set_from_options("policy_", &cfg));
    PetscCall(PetscOptionsClearValue(NULL, "-policy_arch"));
    PetscCall(PetscOptionsClearValue(NULL, "-policy_n_positions"));
    ierr = model_config_check(&cfg, "policy_");
    PetscCall(model_tensor_table(&cfg, &t, &nt, &np));
    for (int i = 0; i < nt; i++) {
      if (t[i].ndim == 2) n2++;
      else n1++;
      if (t[i].ndim == 2 && t[i].gshape[0] == cfg.n_positions) npos++;
    }
    {
      int       L = cfg.n_layer, attn = row->layout == MODEL_LAYOUT_LINEAR ? 4 : 2, mlp = row->mlp == MODEL_MLP_SWIGLU ? 3 : 2;
      int       norm = row->norm == MODEL_NORM_LAYER ? 2 : 1, bias = row->linear_bias ? attn + mlp : 0;
      PetscBool ok   = !strcmp(row->name, ModelArchNames[r]) && (int)cfg.arch == r && ierr == 0 && npos == (row->pos == MODEL_POS_LEARNED ? 1 : 0) &&
                     n2 == 1 + npos + L * (attn + mlp) && n1 == L * (2 * norm + bias) + norm
                       ? PETSC_TRUE
                       : PETSC_FALSE;
      PetscCall(PetscSNPrintf(detail, sizeof detail, "row %d '%s' (ModelArchNames '%s'), arch %d, check %d, %d tensors (%d 2-D, %d 1-D, %d position tables)", r, row->name, ModelArchNames[r], (int)cfg.arch, (int)ierr, nt,
                              n2, n1, npos));
      test_measure(ok, "architecture table: -policy_arch takes the row's name, its tensors follow its fields", "%s", detail);
    }
    PetscCall(PetscFree(t));
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* GPT-2 small at T = 1024: P_mm = 12*12*768^2 + 50257*768 = 123532032;
 * forward = 2 P_mm + 4*12*1024*768 = 284812800; training = 3x. */
static PetscErrorCode test_flops(void)
{
  ModelConfig cfg = {.n_layer = 12, .n_head = 12, .n_embd = 768, .vocab_size = 50257, .n_positions = 1024, .head = MODEL_HEAD_LM};
  double    f = model_flops_per_token(&cfg, 1024, PETSC_FALSE), t = model_flops_per_token(&cfg, 1024, PETSC_TRUE);
  char      detail[128];

  PetscFunctionBegin;
  PetscCall(PetscSNPrintf(detail, sizeof detail, "forward %.0f, training %.0f FLOP/token", f, t));
  test_measure(f == 284812800.0 && t == 3 * 284812800.0 ? PETSC_TRUE : PETSC_FALSE, "FLOPs per token of GPT-2 small by hand", "%s", detail);
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* The training slab keeps the attention's log-sum-exp, B*NH*T floats a
 * layer, no T x T array: the bytes grow linearly in T (at T 4096 against
 * twice T 2048, only the rounding of each buffer up to 64 floats differs)
 * and the whole slab stays below one layer's T x T probabilities. GPT-2,
 * 2 layers, 4 heads, B 2. */
static PetscErrorCode test_activation_bytes(void)
{
  ModelConfig cfg = {.n_layer = 2, .n_head = 4, .n_embd = 64, .vocab_size = 20, .n_positions = 4096, .head = MODEL_HEAD_LM};
  double      full = (double)model_activation_bytes(&cfg, 2, 4096), half = (double)model_activation_bytes(&cfg, 2, 2048);
  double      probs = 2.0 * 4 * 4096 * 4096 * sizeof(float), slack = 64.0 * 64 * sizeof(float);

  PetscFunctionBegin;
  test_report(fabs(full - 2 * half) <= slack && full < probs ? PETSC_TRUE : PETSC_FALSE, "activation bytes: linear in T, no B*NH*T*T array",
              "T 4096: %.0f bytes, T 2048: %.0f (twice: %.0f); one layer's T x T probabilities %.0f", full, half, 2 * half, probs);
  PetscFunctionReturn(PETSC_SUCCESS);
}

static double tensor_std(const Model *lm, const float *p, const char *name)
{
  const ModelTensor *t = &lm->tensors[model_find_tensor(lm, name)];
  double           s = 0;

  for (size_t e = 0; e < t->numel; e++) s += (double)p[t->offset + e] * p[t->offset + e];
  return sqrt(s / t->numel);
}

static PetscErrorCode test_init(const Backend *be)
{
  ModelConfig cfg = {.n_layer = 2, .n_head = 4, .n_embd = 64, .vocab_size = 256, .n_positions = 32, .head = MODEL_HEAD_SCALAR};
  Model    *lm;
  float    *a, *b, *c;
  double    s_wte, s_proj, s_score;
  PetscBool same, differ, stats;
  char      detail[200];

  PetscFunctionBegin;
  PetscCall(model_create(&cfg, be, &lm));
  PetscCall(PetscMalloc3(lm->nparams, &a, lm->nparams, &b, lm->nparams, &c));
  PetscCall(model_init_random(lm, 1234));
  PetscCall(model_params_get(lm, a));
  PetscCall(model_init_random(lm, 1234));
  PetscCall(model_params_get(lm, b));
  PetscCall(model_init_random(lm, 1235));
  PetscCall(model_params_get(lm, c));
  same   = memcmp(a, b, lm->nparams * sizeof(float)) ? PETSC_FALSE : PETSC_TRUE;
  differ = memcmp(a, c, lm->nparams * sizeof(float)) ? PETSC_TRUE : PETSC_FALSE;
  test_report(same, "init: same seed gives bitwise the same parameters", NULL);
  test_report(differ, "init: another seed gives other parameters", NULL);
  s_wte   = tensor_std(lm, a, "transformer.wte.weight");
  s_proj  = tensor_std(lm, a, "transformer.h.1.mlp.c_proj.weight");
  s_score = tensor_std(lm, a, "score.weight");
  stats   = fabs(s_wte / 0.02 - 1) < 0.05 && fabs(s_proj / (0.02 / 2.0) - 1) < 0.05 && fabs(s_score / 0.02 - 1) < 0.3 &&
          tensor_std(lm, a, "transformer.h.0.ln_1.weight") == 1.0 && tensor_std(lm, a, "transformer.h.0.attn.c_attn.bias") == 0.0 &&
          tensor_std(lm, a, "transformer.ln_f.bias") == 0.0
              ? PETSC_TRUE
              : PETSC_FALSE;
  PetscCall(PetscSNPrintf(detail, sizeof detail, "rms wte %.4f (0.02), mlp.c_proj %.4f (0.01), score %.4f (0.02); LN gains 1, biases 0", s_wte, s_proj, s_score));
  test_measure(stats, "init: GPT-2 scales", "%s", detail);
  PetscCall(PetscFree3(a, b, c));
  PetscCall(model_destroy(&lm));
  PetscFunctionReturn(PETSC_SUCCESS);
}

int main(int argc, char **argv)
{
  const Backend *be;

  PetscCall(PetscInitialize(&argc, &argv, NULL, help));
  PetscCall(backend_get("cpu", &be));
  PetscCall(test_gradcheck(be, micro_config(MODEL_HEAD_LM), PETSC_FALSE));
  PetscCall(test_gradcheck(be, micro_config(MODEL_HEAD_LM), PETSC_TRUE));
  PetscCall(test_gradcheck(be, micro_config(MODEL_HEAD_SCALAR), PETSC_FALSE));
  for (int v = 0; v < 3; v++) {
    PetscCall(test_gradcheck(be, micro_llama(MODEL_HEAD_LM, v), PETSC_FALSE));
    PetscCall(test_gradcheck(be, micro_llama(MODEL_HEAD_SCALAR, v), PETSC_FALSE));
    PetscCall(test_kv_cache(be, micro_llama(MODEL_HEAD_LM, v)));
    PetscCall(test_kv_cache(be, micro_llama(MODEL_HEAD_SCALAR, v)));
  }
  PetscCall(test_logprobs_dist(be));
  PetscCall(test_logits_tiles(be, micro_config(MODEL_HEAD_LM)));
  PetscCall(test_logits_tiles(be, micro_llama(MODEL_HEAD_LM, 0)));
  PetscCall(test_dist_errors(be));
  PetscCall(test_grad_accumulates(be));
  PetscCall(test_kv_cache(be, micro_config(MODEL_HEAD_LM)));
  PetscCall(test_kv_cache(be, micro_config(MODEL_HEAD_SCALAR)));
  PetscCall(test_shape_change(be));
  PetscCall(test_adamw_op(be));
  PetscCall(test_adamw_step(be));
  PetscCall(test_lr_schedule());
  PetscCall(test_config_check());
  PetscCall(test_tensor_table());
  PetscCall(test_arch_table());
  PetscCall(test_flops());
  PetscCall(test_activation_bytes());
  PetscCall(test_init(be));
  PetscCall(PetscFinalize());
  return test_tally();
}
