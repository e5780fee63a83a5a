/* test_cuda_gen: the generation engine's resident steps on the cuda backend
 * (skips without a CUDA device, saying so). For a GPT-2-shaped and a
 * LLaMA-shaped model (GQA 7:1, 7 query heads: not a power of two), in fp32
 * and bf16:
 *   - replayed graphs give exactly the bits of the same steps run op by op
 *     (GenConfig.eager), with plain sampling, top-k/top-p and min_new_tokens;
 *   - after the weights change in place (an AdamW step through the backend,
 *     and new values copied in, as a reallocation does), a replayed graph
 *     gives the new weights' results: those of a fresh engine, and not the
 *     old ones;
 *   - the tokens match the cpu engine's on the same weights (fp32; the
 *     log-probabilities within 2e-4, a differently ordered fp32 sum).
 * One sequence alone against the same among others is the batch-invariance
 * check of test_gen (cpu); on cuda the padded buckets make steps of
 * different row counts run different GEMMs, so that check is not made
 * here (docs/design.md, "Generation").
 *
 * The checks in detail: the generation engine on the cuda backend, for a GPT-2-shaped and a
 * LLaMA-shaped model (7 query heads over 1 kv head), in fp32 and bf16: steps replayed from
 * recorded graphs give exactly the bits of the same steps run op by op (`GenConfig.eager`) with
 * plain sampling, top-k/top-p with min_new_tokens, and full-length samples on 3 slots; one
 * engine reused gives the same bits; after an AdamW step through the backend and after new
 * weights are copied in, the engine's replayed graphs give a fresh eager engine's bits and not
 * the old ones (the kept bf16 weight copies refreshed); in fp32 the tokens equal the cpu
 * engine's and the log-probabilities are within 2e-4. Skips without a GPU
 */
#include <string.h>

#include "gen.h"
#include "sys.h"
#include "test_report.h"

static const char help[] = "Generation on the cuda backend: graphs against eager steps, weight updates under graphs, cuda against cpu.\n";

#define NREQ 11
#define MAXP 9

typedef struct {
  const char *name;
  ModelConfig cfg;
} Shape;

static const Shape shapes[] = {
  {"gpt2", {.n_layer = 2, .n_head = 4, .n_embd = 64, .vocab_size = 97, .n_positions = 64, .head = MODEL_HEAD_LM}},
  {"llama gqa 7:1",
   {.n_layer = 2, .n_head = 7, .n_embd = 112, .vocab_size = 151, .n_positions = 64, .head = MODEL_HEAD_LM, .arch = MODEL_ARCH_LLAMA, .n_kv_head = 1, .n_ffn = 96,
    .tie_embeddings = PETSC_TRUE, .rope_theta = 10000, .norm_eps = 1e-5}},
};

typedef struct {
  int        prompts[NREQ][MAXP];
  GenRequest req[NREQ];
} Requests;

static void requests_make(const ModelConfig *cfg, Requests *r)
{
  const int len[NREQ] = {5, 1, 9, 3, 7, 2, 8, 4, 6, 1, 9};

  for (int i = 0; i < NREQ; i++) {
    for (int t = 0; t < len[i]; t++) r->prompts[i][t] = (int)(rng_u32(17, (uint32_t)i, 0, (uint32_t)t, 0) % (uint32_t)cfg->vocab_size);
    r->req[i] = (GenRequest){.id = 40 + 3 * i, .prompt = r->prompts[i], .prompt_len = len[i]};
  }
}

/* Weights O(0.3) around the usual centres, so the distributions are far
 * from uniform; seed picks the draw. */
static PetscErrorCode params_host(const Model *lm, uint64_t seed, float **out)
{
  float *p;

  PetscFunctionBegin;
  PetscCall(PetscMalloc1(lm->nparams, &p));
  for (int i = 0; i < lm->ntensors; i++) {
    const ModelTensor *t    = &lm->tensors[i];
    PetscBool          norm = t->ndim == 1 && strstr(t->name, ".weight") ? PETSC_TRUE : PETSC_FALSE;
    for (size_t e = 0; e < t->numel; e++) p[t->offset + e] = (norm ? 1.0f : 0.0f) + (t->ndim == 2 ? 0.3f : 0.1f) * rng_normal(seed, (uint32_t)i, 0, (uint32_t)e, 7);
  }
  *out = p;
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode generate(Model *lm, const GenConfig *cfg, const Requests *r, GenBatch *b)
{
  GenEngine *e;

  PetscFunctionBegin;
  PetscCall(gen_batch_create(NREQ, MAXP + (int)cfg->max_new_tokens, gen_masked(cfg), b));
  PetscCall(gen_engine_create(lm, cfg, MAXP, &e));
  PetscCall(gen_generate(e, 99, 3, NREQ, r->req, b, NULL, NULL));
  PetscCall(gen_engine_destroy(&e));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Tokens, lengths and allowed sets equal; log-probabilities within tol (0: the same bits). */
static PetscBool same(const GenBatch *a, const GenBatch *b, double tol, char *why, size_t len)
{
  double worst = 0;

  for (int i = 0; i < a->n; i++) {
    size_t r = (size_t)i * a->Tmax;
    if (a->response_len[i] != b->response_len[i] || memcmp(a->tokens + r, b->tokens + r, (size_t)a->Tmax * sizeof(int)))
      return snprintf(why, len, "sample %d: tokens differ (lengths %d and %d)", i, a->response_len[i], b->response_len[i]), PETSC_FALSE;
    for (int t = 0; t < a->Tmax; t++) {
      double d = fabs((double)a->logprobs[r + t] - (double)b->logprobs[r + t]);
      worst    = d > worst ? d : worst;
      if (tol == 0 && memcmp(&a->logprobs[r + t], &b->logprobs[r + t], sizeof(float)))
        return snprintf(why, len, "sample %d position %d: log-probabilities %.9g and %.9g", i, t, (double)a->logprobs[r + t], (double)b->logprobs[r + t]), PETSC_FALSE;
    }
    if (a->mask_off && b->mask_off)
      for (int t = 0; t < a->Tmax; t++) {
        int na = a->mask_off[r + t + 1] - a->mask_off[r + t], nb = b->mask_off[r + t + 1] - b->mask_off[r + t];
        if (na != nb || (na && memcmp(a->mask_ids + a->mask_off[r + t], b->mask_ids + b->mask_off[r + t], (size_t)na * sizeof(int))))
          return snprintf(why, len, "sample %d position %d: allowed sets differ (%d and %d ids)", i, t, na, nb), PETSC_FALSE;
      }
  }
  if (worst > tol) return snprintf(why, len, "log-probabilities differ by %.3g > %.3g", worst, tol), PETSC_FALSE;
  snprintf(why, len, "largest log-probability difference %.3g", worst);
  return PETSC_TRUE;
}

typedef struct {
  const char *name;
  GenConfig   cfg;
} Setting;

static PetscErrorCode check_shape(const Backend *gpu, const Shape *sh, PetscBool bf16)
{
  const char *prec = bf16 ? "bf16" : "fp32";
  Setting     set[3];
  Model      *lm, *cpu = NULL;
  Requests    r;
  float      *p0, *p1, *g;
  char        why[256];

  PetscFunctionBegin;
  set[0] = (Setting){"plain", {.temperature = 1.0, .top_p = 1.0, .max_new_tokens = 12, .slots = 4, .kv_mb = 64, .eos = 2}};
  set[1] = (Setting){"top-k 5, top-p 0.9, min_new_tokens 4", {.temperature = 0.8, .top_k = 5, .top_p = 0.9, .max_new_tokens = 12, .min_new_tokens = 4, .slots = 6, .kv_mb = 64, .eos = 2}};
  set[2] = (Setting){"3 slots, full length", {.temperature = 1.2, .top_p = 1.0, .max_new_tokens = 16, .min_new_tokens = 16, .slots = 3, .kv_mb = 64, .eos = 2}};
  requests_make(&sh->cfg, &r);
  PetscCall(backend_cuda_set_precision(bf16));
  PetscCall(model_create(&sh->cfg, gpu, &lm));
  PetscCall(params_host(lm, 5, &p0));
  PetscCall(params_host(lm, 6, &p1));
  PetscCall(model_params_set(lm, p0));
  for (int k = 0; k < 3; k++) {
    GenConfig eager = set[k].cfg;
    GenBatch  a, b;
    eager.eager = PETSC_TRUE;
    PetscCall(generate(lm, &set[k].cfg, &r, &a));
    PetscCall(generate(lm, &eager, &r, &b));
    test_report(same(&a, &b, 0, why, sizeof why), "graphs", "%s %s, %s: replayed graphs against eager steps: %s", sh->name, prec, set[k].name, why);
    if (!bf16) {
      GenBatch c;
      if (!cpu) {
        PetscCall(model_create(&sh->cfg, backend_cpu(), &cpu));
        PetscCall(model_params_set(cpu, p0));
      }
      PetscCall(generate(cpu, &set[k].cfg, &r, &c));
      test_report(same(&a, &c, 2e-4, why, sizeof why), "cuda vs cpu", "%s fp32, %s: tokens equal to the cpu engine's: %s", sh->name, set[k].name, why);
      PetscCall(gen_batch_destroy(&c));
    }
    PetscCall(gen_batch_destroy(&a));
    PetscCall(gen_batch_destroy(&b));
  }

  /* weights changed under one engine whose graphs are recorded */
  {
    GenConfig  cfg = set[0].cfg;
    GenEngine *e;
    GenBatch   before, after, fresh;
    float     *m, *v;

    PetscCall(gen_engine_create(lm, &cfg, MAXP, &e));
    PetscCall(gen_batch_create(NREQ, MAXP + (int)cfg.max_new_tokens, PETSC_FALSE, &before));
    PetscCall(gen_batch_create(NREQ, MAXP + (int)cfg.max_new_tokens, PETSC_FALSE, &after));
    PetscCall(gen_generate(e, 99, 3, NREQ, r.req, &before, NULL, NULL));
    PetscCall(gen_generate(e, 99, 3, NREQ, r.req, &after, NULL, NULL)); /* every bucket recorded by now */
    test_report(same(&before, &after, 0, why, sizeof why), "graphs", "%s %s: a reused engine repeats its results: %s", sh->name, prec, why);

    /* an optimizer step through the backend (AdamW on the weights) */
    PetscCall(gpu->alloc(lm->nparams * sizeof(float), (void **)&g));
    PetscCall(gpu->alloc(lm->nparams * sizeof(float), (void **)&m));
    PetscCall(gpu->alloc(lm->nparams * sizeof(float), (void **)&v));
    PetscCall(gpu->from_host(g, p1, lm->nparams * sizeof(float)));
    PetscCall(gpu->adamw(lm->params, g, m, v, lm->nparams, 0.05f, 0.9f, 0.999f, 1e-8f, 0.0f, 1, 1.0f));
    PetscCall(gen_generate(e, 99, 3, NREQ, r.req, &after, NULL, NULL));
    PetscCall(generate(lm, &(GenConfig){.temperature = 1.0, .top_p = 1.0, .max_new_tokens = 12, .slots = 4, .kv_mb = 64, .eos = 2, .eager = PETSC_TRUE}, &r, &fresh));
    test_report(same(&after, &fresh, 0, why, sizeof why), "graphs", "%s %s: after an AdamW step, replayed graphs equal a fresh eager engine: %s", sh->name, prec, why);
    test_report(!same(&after, &before, 0, why, sizeof why), "graphs", "%s %s: after an AdamW step the results changed (%s)", sh->name, prec, why);
    PetscCall(gen_batch_destroy(&fresh));

    /* new values copied in place (what a reallocation into the buffer does) */
    PetscCall(model_params_set(lm, p1));
    PetscCall(gen_generate(e, 99, 3, NREQ, r.req, &after, NULL, NULL));
    PetscCall(generate(lm, &(GenConfig){.temperature = 1.0, .top_p = 1.0, .max_new_tokens = 12, .slots = 4, .kv_mb = 64, .eos = 2, .eager = PETSC_TRUE}, &r, &fresh));
    test_report(same(&after, &fresh, 0, why, sizeof why), "graphs", "%s %s: after new weights are copied in, replayed graphs equal a fresh eager engine: %s", sh->name, prec, why);
    PetscCall(gen_batch_destroy(&fresh));
    PetscCall(gpu->free(g));
    PetscCall(gpu->free(m));
    PetscCall(gpu->free(v));
    PetscCall(gen_engine_destroy(&e));
    PetscCall(gen_batch_destroy(&before));
    PetscCall(gen_batch_destroy(&after));
  }
  PetscCall(PetscFree(p0));
  PetscCall(PetscFree(p1));
  PetscCall(model_destroy(&lm));
  if (cpu) PetscCall(model_destroy(&cpu));
  PetscCall(backend_cuda_set_precision(PETSC_FALSE));
  PetscFunctionReturn(PETSC_SUCCESS);
}

int main(int argc, char **argv)
{
  PetscBool      have = PETSC_FALSE;
  const char    *req  = getenv("RLFUSE_REQUIRE_CUDA");
  char           why[512];
  PetscErrorCode ierr;

  ierr = PetscInitialize(&argc, &argv, NULL, help);
  if (ierr) return 1;
  ierr = sys_error_handler_install();
  if (!ierr) ierr = backend_cuda_available(why, sizeof why, &have);
  if (ierr) sys_error_exit(ierr);
  if (!have) {
    if (req && !strcmp(req, "1")) test_report(PETSC_FALSE, "cuda", "no usable CUDA device but RLFUSE_REQUIRE_CUDA=1 (%s)", why);
    else {
      char nodev[600];
      snprintf(nodev, sizeof nodev, "no CUDA device (%s)", why);
      test_skip("cuda generation", nodev);
    }
  } else {
    const Backend *gpu;
    printf("# %s\n", why);
    ierr = backend_get("cuda", &gpu);
    for (size_t s = 0; !ierr && s < sizeof shapes / sizeof shapes[0]; s++)
      for (int bf = 0; !ierr && bf < 2; bf++) ierr = check_shape(gpu, &shapes[s], (PetscBool)bf);
    if (ierr) {
      test_report(PETSC_FALSE, "cuda generation", "stopped by an error (the 'rlfuse: error' line names it)");
      test_tally();
      sys_error_exit(ierr);
    }
  }
  test_tally();
  ierr = PetscFinalize();
  return test_state.fail || ierr ? 1 : 0;
}
