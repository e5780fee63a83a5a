/* Decode throughput benchmark of the generation engine (`make bench`):
 * tokens/s of gen_generate at a given number of concurrent samples, for the
 * model shapes of bench_model plus the quickstart deck's. All samples start
 * together (slots = concurrency = requests) and run the full length
 * (min_new_tokens = max_new_tokens), so every engine step after the first
 * advances exactly `concurrency` samples by one token; the first step is
 * the prefill of every prompt and is reported on its own.
 *
 *   bin/bench_decode -size 1M|10M|qs|all [-concurrency 0|N] [-prompt 8] [-max_new 64] [-iters 3] [-warmup 1]
 *
 * -concurrency 0 runs 1, 8 and 64. Prints one machine-readable line per
 * (size, concurrency): decode_tok_per_s = tokens of the steps after the
 * prefill over their wall time; tok_per_s = all response tokens over the
 * whole gen_generate call, prefill included; step_ms = a decode step;
 * fwd_ms = gpt_forward_cached alone on the same rows, so step_ms - fwd_ms
 * is the engine's own cost; prefill_ms = the first step. Medians over the
 * iterations (step_ms: over the steps, then the iterations). */
#include "gen.h"
#include "sys.h"
#include <omp.h>
#include <stdlib.h>

typedef struct {
  const char *name;
  GPTConfig   cfg;
} BenchSize;

/* 1M and 10M as in bench_model; "qs" is input/quickstart.deck's shape with
 * n_positions raised to 128 so that prompt + 64 new tokens fit (the position
 * table's size does not change the work per token). */
static const BenchSize sizes[] = {
  {"qs", {2, 4, 128, 20, 128, GPT_HEAD_LM}},
  {"1M", {4, 4, 128, 512, 128, GPT_HEAD_LM}},
  {"10M", {6, 6, 384, 512, 256, GPT_HEAD_LM}},
};

typedef struct {
  double decode_tps, total_tps, step_ms, prefill_ms;
} DecodeTiming;

static int cmp_double(const void *a, const void *b)
{
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(double *x, int n)
{
  qsort(x, (size_t)n, sizeof *x, cmp_double);
  return x[n / 2];
}

/* The model alone: median ms of one gpt_forward_cached over conc rows (one
 * per slot) at the decode positions, so the engine's own cost (sampling,
 * bookkeeping) is the difference to the engine's step time. */
static PetscErrorCode forward_only_ms(GPT *gpt, int conc, int P, int max_new, double *ms)
{
  GPTKVCache *kv;
  int        *tok, *slot, *pos, N = conc * P;
  float      *out;
  double     *t;

  PetscFunctionBegin;
  PetscCall(gpt_kv_create(gpt, conc, P + max_new, &kv));
  PetscCall(PetscMalloc4(N, &tok, N, &slot, N, &pos, (size_t)N * gpt->cfg.vocab_size, &out));
  PetscCall(PetscMalloc1(max_new, &t));
  for (int r = 0; r < N; r++) {
    tok[r]  = (int)(rng_u32(8, (uint32_t)r, 0, 0, 0) % (uint32_t)gpt->cfg.vocab_size);
    slot[r] = r / P;
    pos[r]  = r % P;
  }
  PetscCall(gpt_forward_cached(gpt, kv, tok, slot, pos, N, out));
  for (int s = 0; s < max_new - 1; s++) {
    double t0 = sys_wtime();
    for (int r = 0; r < conc; r++) {
      slot[r] = r;
      pos[r]  = P + s;
    }
    PetscCall(gpt_forward_cached(gpt, kv, tok, slot, pos, conc, out));
    t[s] = sys_wtime() - t0;
  }
  *ms = max_new > 1 ? median(t, max_new - 1) * 1e3 : 0;
  PetscCall(PetscFree(t));
  PetscCall(PetscFree4(tok, slot, pos, out));
  PetscCall(gpt_kv_destroy(gpt, &kv));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* One gen_generate call; the timeline splits the prefill from decoding. */
static PetscErrorCode bench_once(GenEngine *eng, int iter, int n, const GenRequest *req, GenBatch *b, DecodeTiming *t)
{
  double dec_s = 0, *steps;
  long   dec_tok = 0;

  PetscFunctionBegin;
  PetscCall(gen_generate(eng, 1, (uint32_t)iter, n, req, b, NULL, NULL));
  PetscCall(PetscMalloc1(b->nsteps, &steps));
  for (int s = 1; s < b->nsteps; s++) {
    dec_s += b->step_seconds[s];
    dec_tok += b->step_active[s];
    steps[s - 1] = b->step_seconds[s];
  }
  t->decode_tps = dec_s > 0 ? dec_tok / dec_s : 0;
  t->total_tps  = b->new_tokens / b->seconds;
  t->step_ms    = b->nsteps > 1 ? median(steps, b->nsteps - 1) * 1e3 : 0;
  t->prefill_ms = b->step_seconds[0] * 1e3;
  PetscCall(PetscFree(steps));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode bench_conc(GPT *gpt, const BenchSize *s, int conc, int P, int max_new, int warmup, int iters)
{
  GenConfig     cfg = {.temperature = 1.0, .top_k = 0, .top_p = 1.0, .greedy = PETSC_FALSE, .eos = 3};
  GenEngine    *eng;
  GenBatch      b;
  GenRequest   *req;
  int          *prompts;
  double       *dec, *tot, *step, *pre, fwd_ms = 0;
  DecodeTiming  t = {0};

  PetscFunctionBegin;
  cfg.max_new_tokens = cfg.min_new_tokens = max_new;
  cfg.slots                               = conc;
  cfg.kv_mb                               = 1e6;
  PetscCall(gen_config_check(&cfg, &s->cfg, "", P));
  PetscCall(PetscMalloc2(conc, &req, (size_t)conc * P, &prompts));
  for (int i = 0; i < conc; i++) {
    for (int t0 = 0; t0 < P; t0++) prompts[i * P + t0] = (int)(rng_u32(7, (uint32_t)i, (uint32_t)t0, 0, 0) % (uint32_t)s->cfg.vocab_size);
    req[i] = (GenRequest){.id = i, .prompt = prompts + (size_t)i * P, .prompt_len = P};
  }
  PetscCall(gen_engine_create(gpt, &cfg, P, &eng));
  PetscCall(gen_batch_create(conc, P + max_new, gen_masked(&cfg), &b));
  PetscCall(PetscMalloc4(iters, &dec, iters, &tot, iters, &step, iters, &pre));
  for (int it = -warmup; it < iters; it++) {
    PetscCall(bench_once(eng, it + warmup, conc, req, &b, &t));
    if (it < 0) continue;
    dec[it]  = t.decode_tps;
    tot[it]  = t.total_tps;
    step[it] = t.step_ms;
    pre[it]  = t.prefill_ms;
  }
  PetscCall(forward_only_ms(gpt, conc, P, max_new, &fwd_ms));
  PetscCall(PetscPrintf(PETSC_COMM_WORLD,
                        "rlfuse-decode size=%s params=%zu conc=%d prompt=%d new=%d threads=%d decode_tok_per_s=%.0f tok_per_s=%.0f step_ms=%.3f fwd_ms=%.3f prefill_ms=%.3f\n",
                        s->name, gpt->nparams, conc, P, max_new, omp_get_max_threads(), median(dec, iters), median(tot, iters), median(step, iters), fwd_ms,
                        median(pre, iters)));
  PetscCall(PetscFree4(dec, tot, step, pre));
  PetscCall(gen_batch_destroy(&b));
  PetscCall(gen_engine_destroy(&eng));
  PetscCall(PetscFree2(req, prompts));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode bench_size(const BenchSize *s, PetscInt conc, PetscInt P, PetscInt max_new, PetscInt warmup, PetscInt iters)
{
  const int all[3] = {1, 8, 64};
  GPT      *gpt;

  PetscFunctionBegin;
  PetscCall(gpt_create(&s->cfg, backend_cpu(), &gpt));
  PetscCall(gpt_init_random(gpt, 1));
  if (conc > 0) PetscCall(bench_conc(gpt, s, (int)conc, (int)P, (int)max_new, (int)warmup, (int)iters));
  else
    for (int k = 0; k < 3; k++) PetscCall(bench_conc(gpt, s, all[k], (int)P, (int)max_new, (int)warmup, (int)iters));
  PetscCall(gpt_destroy(&gpt));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode bench_main(void)
{
  char     size[16] = "all";
  PetscInt conc = 0, P = 8, max_new = 64, iters = 3, warmup = 1;

  PetscFunctionBegin;
  PetscOptionsBegin(PETSC_COMM_WORLD, NULL, "Decode benchmark", NULL);
  RfOptString("-size", "Model size: qs, 1M, 10M or all", size, sizeof size);
  RfOptInt("-concurrency", "Concurrent samples (= slots = requests); 0 runs 1, 8 and 64", 0, &conc);
  RfOptInt("-prompt", "Prompt tokens per sample", 8, &P);
  RfOptInt("-max_new", "Response tokens per sample (every sample runs the full length)", 64, &max_new);
  RfOptInt("-iters", "Timed generations (the median is reported)", 3, &iters);
  RfOptInt("-warmup", "Untimed generations first", 1, &warmup);
  PetscOptionsEnd();
  PetscCall(sys_options_check_unused());
  PetscCheck(conc >= 0 && P > 0 && max_new > 0 && iters > 0 && warmup >= 0, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE,
             "-concurrency must be >= 0, -prompt, -max_new and -iters positive, -warmup >= 0");
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    PetscBool any, match;
    PetscCall(PetscStrcmp(size, "all", &any));
    PetscCall(PetscStrcmp(size, sizes[i].name, &match));
    if (any || match) PetscCall(bench_size(&sizes[i], conc, P, max_new, warmup, iters));
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

int main(int argc, char **argv)
{
  PetscErrorCode ierr;

  ierr = PetscInitialize(&argc, &argv, NULL, "rlfuse decode benchmark\n");
  if (ierr) return 1;
  ierr = sys_error_handler_install();
  if (!ierr) ierr = bench_main();
  if (ierr) sys_error_exit(ierr);
  return PetscFinalize() ? 1 : 0;
}
