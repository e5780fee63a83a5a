/* Decode throughput benchmark of the generation engine (`make bench`,
 * tools/bench/bench_gpu.sh): tokens/s of gen_generate at a given number of
 * concurrent samples, for the model shapes of bench_model plus the
 * quickstart deck's, on the cpu backend or a GPU (-device cuda). All samples
 * start together (slots = concurrency = requests) and run the full length
 * (min_new_tokens = max_new_tokens), so every engine step after the first
 * advances exactly `concurrency` samples by one token; the first step is
 * the prefill of every prompt and is reported on its own.
 *
 *   bin/bench_decode -size 1M|10M|qs|124M|smollm2|qwen05|qwen15|all [-concurrency 0|N] [-prompt 8] [-max_new 64] [-iters 3] [-warmup 1]
 *                    [-device cpu|cuda] [-precision fp32|bf16] [-hbm_gbs X] [-measure_bw] [-full_length true|false]
 *                    [-logprob_gap true] [-batch_invariant true]
 *
 * -concurrency 0 runs 1, 8 and 64. Prints one machine-readable line per
 * (size, concurrency): decode_tok_per_s = tokens of the steps after the
 * prefill over their wall time; tok_per_s = all response tokens over the
 * whole gen_generate call, prefill included; step_ms = a decode step;
 * fwd_ms = the forward alone on the same rows, as the engine runs it, so step_ms - fwd_ms
 * is the engine's own cost; prefill_ms = the first step. Medians over the
 * iterations (step_ms: over the steps, then the iterations).
 *
 * -hbm_gbs (the device's memory bandwidth, GB/s) adds the memory-bandwidth
 * roofline: a decode step must read every weight and the cached keys and
 * values its samples attend to (decode_bytes), so it cannot run faster than
 * bytes / bandwidth, and roofline_tok_per_s = concurrency * bandwidth /
 * bytes. roofline_frac is decode_tok_per_s over that; fwd_roofline_frac the
 * same for fwd_ms, the forward alone as the engine runs it.
 * -full_length false lets samples stop at EOS and records no allowed sets
 * (min_new_tokens 0: nothing restricts the sampling; with it, each token's
 * set, every id but EOS, is one entry).
 * -logprob_gap adds logprob_gap_max and logprob_gap_mean: how far the
 * log-probabilities recorded at generation are from the training forward's
 * for the same tokens (logprob_gap). -batch_invariant runs generation's
 * -gen_batch_invariant (the cached forward's matmuls row-wise; the cpu
 * backend's). */
#include "gen.h"
#include "sys.h"
#include "bench_sizes.h"
#include <math.h>
#include <omp.h>
#include <stdlib.h>

typedef struct {
  const char *name;
  ModelConfig cfg;
  PetscBool   in_all; /* run by -size all */
} BenchSize;

/* 1M, 10M and 124M (GPT-2 small, the GPU benchmarks' shape; not in -size
 * all, the CPU sizes) as in bench_model; "qs" is input/quickstart.deck's
 * shape with n_positions raised to 128 so that prompt + 64 new tokens fit
 * (the position table's size does not change the work per token);
 * "smollm2", "qwen05" and "qwen15" are SmolLM2-135M's, Qwen2.5-0.5B's and
 * Qwen2.5-1.5B's LLaMA shapes (tools/bench/bench_sizes.h; not in -size all). */
#define BENCH_GPT2(L, H, C, V, P) {.n_layer = L, .n_head = H, .n_embd = C, .vocab_size = V, .n_positions = P, .head = MODEL_HEAD_LM}
static const BenchSize sizes[] = {
  {"qs", BENCH_GPT2(2, 4, 128, 20, 128), PETSC_TRUE},
  {"1M", BENCH_GPT2(4, 4, 128, 512, 128), PETSC_TRUE},
  {"10M", BENCH_GPT2(6, 6, 384, 512, 256), PETSC_TRUE},
  {"124M", BENCH_GPT2(12, 12, 768, 50257, 1024), PETSC_FALSE},
  {"smollm2", BENCH_SMOLLM2, PETSC_FALSE},
  {"qwen05", BENCH_QWEN05, PETSC_FALSE},
  {"qwen15", BENCH_QWEN15, PETSC_FALSE},
};

static const char *const device_names[]    = {"cpu", "cuda", "Device", "DEVICE_", NULL};
static const char *const precision_names[] = {"fp32", "bf16", "Precision", "PRECISION_", NULL};

typedef struct {
  const Backend *be;
  PetscInt       device, precision; /* indices into device_names, precision_names */
  PetscReal      hbm_gbs;           /* device memory bandwidth, GB/s (0: no roofline) */
  PetscBool      full_length;       /* every sample runs max_new tokens (no EOS) */
  PetscBool      eager;             /* the engine's GenConfig.eager: no recorded graphs */
  PetscBool      logprob_gap;       /* recompute the last generation's log-probabilities by the training forward */
  PetscBool      batch_invariant;   /* GenConfig.batch_invariant (-gen_batch_invariant) */
} BenchRun;

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

/* Bytes a decode step reads from device memory, for the roofline: every
 * weight once, at the 4 bytes the model stores it in, or at 2 under
 * -precision bf16 (the bf16 roofline: the matmuls read the kept bf16
 * copies; the norms' and biases' few fp32 values, and the cached keys and
 * values, which rlfuse keeps in fp32, are counted at 2 too), except wpe, of which a step reads
 * one row per sample (the LLaMA family has none); plus the keys and values
 * each sample attends to (fp32 cache, n_kv_head heads wide), averaged over
 * the decode steps: step s = 1 .. max_new-1 of a sample with a P-token
 * prompt attends to P + s positions, P + max_new/2 on average. Activations
 * and logits are left out (under 3% at 124M x 64). */
static void decode_bytes(const Model *lm, PetscBool bf16, int conc, int P, int max_new, double *weights, double *kv)
{
  const ModelConfig *c = &lm->cfg;

  *weights = (bf16 ? 2.0 : 4.0) * ((double)lm->nparams - (model_arch(c)->pos == MODEL_POS_LEARNED ? (double)c->n_positions * c->n_embd : 0.0));
  *kv      = (bf16 ? 2.0 : 4.0) * 2.0 * c->n_layer * ((double)model_head_dim(c) * model_n_kv_head(c)) * (double)conc * (P + max_new / 2.0);
}

/* This machine's memory bandwidth for the CPU roofline: the best of five
 * STREAM triads a = b + s c over 3 x 256 MiB on the OpenMP threads, counting
 * 3 arrays moved (write-allocate traffic not counted, as STREAM does). */
static double triad_gbs(void)
{
  size_t n = (size_t)64 << 20;
  float *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b), *c = malloc(n * sizeof *c);
  double best = 0;

  if (!a || !b || !c) {
    free(a), free(b), free(c);
    return 0;
  }
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; i++) a[i] = 0, b[i] = 1, c[i] = 2;
  for (int rep = 0; rep < 5; rep++) {
    double t0 = sys_wtime();
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) a[i] = b[i] + 0.5f * c[i];
    best = PetscMax(best, 3.0 * n * sizeof(float) / (sys_wtime() - t0) * 1e-9);
  }
  free(a), free(b), free(c);
  return best;
}

/* Fields after the cpu line's (whose format docs and tools parse, so it
 * stays as it was): device and precision off the cpu, full_length=0 when
 * samples may stop early, the roofline when -hbm_gbs is given. */
static PetscErrorCode report_tail(const BenchRun *r, const Model *lm, int conc, int P, int max_new, double decode_tps, double fwd_ms, char *buf, size_t len)
{
  char   part[192];
  double w, kv, roof;

  PetscFunctionBegin;
  buf[0] = 0;
  if (r->device != 0) PetscCall(PetscSNPrintf(buf, len, " device=%s precision=%s", device_names[r->device], precision_names[r->precision]));
  if (!r->full_length) PetscCall(PetscStrlcat(buf, " full_length=0", len));
  if (r->eager) PetscCall(PetscStrlcat(buf, " eager=1", len));
  if (r->hbm_gbs > 0) {
    decode_bytes(lm, (PetscBool)(r->precision == 1), conc, P, max_new, &w, &kv);
    roof = conc * r->hbm_gbs * 1e9 / (w + kv);
    PetscCall(PetscSNPrintf(part, sizeof part, " weight_mb=%.1f kv_mb=%.1f hbm_gbs=%.0f roofline_tok_per_s=%.0f roofline_frac=%.3f fwd_roofline_frac=%.3f", w * 1e-6, kv * 1e-6,
                            (double)r->hbm_gbs, roof, decode_tps / roof, fwd_ms > 0 ? conc / (fwd_ms * 1e-3) / roof : 0.0));
    PetscCall(PetscStrlcat(buf, part, len));
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* The model alone: median ms of one forward over conc rows (one per slot)
 * at the decode positions, as the engine runs it (model_forward_cached_resident
 * on one rank, recorded as a graph unless -eager: the rows go up, the logits
 * stay), so the engine's own cost (sampling, bookkeeping, the copies) is
 * the difference to the engine's step time. */
static PetscErrorCode forward_only_ms(const BenchRun *r, Model *lm, int conc, int P, int max_new, double *ms)
{
  const Backend *be = lm->be;
  ModelKVCache  *kv;
  int           *tok, *slot, *pos, *d = NULL, N = conc * P;
  float         *out;
  const float   *logits;
  double        *t;
  PetscBool      resident = model_cached_resident_ok(lm);

  PetscFunctionBegin;
  PetscCall(model_kv_create(lm, conc, P + max_new, &kv));
  PetscCall(PetscMalloc4(N, &tok, N, &slot, N, &pos, (size_t)N * lm->cfg.vocab_size, &out));
  PetscCall(PetscMalloc1(max_new, &t));
  if (resident) PetscCall(be->alloc(3 * (size_t)conc * sizeof(int), (void **)&d));
  for (int q = 0; q < N; q++) {
    tok[q]  = (int)(rng_u32(8, (uint32_t)q, 0, 0, 0) % (uint32_t)lm->cfg.vocab_size);
    slot[q] = q / P;
    pos[q]  = q % P;
  }
  PetscCall(model_forward_cached(lm, kv, tok, slot, pos, N, NULL, N, out));
  for (int s = 0; s < max_new - 1; s++) {
    double t0 = sys_wtime();
    for (int q = 0; q < conc; q++) {
      slot[q] = q;
      pos[q]  = P + s;
    }
    if (resident) {
      PetscCall(be->from_host(d, tok, (size_t)conc * sizeof(int)));
      PetscCall(be->from_host(d + conc, slot, (size_t)conc * sizeof(int)));
      PetscCall(be->from_host(d + 2 * conc, pos, (size_t)conc * sizeof(int)));
      PetscCall(model_forward_cached_resident(lm, kv, d, d + conc, d + 2 * conc, conc, NULL, conc, (PetscBool)!r->eager, &logits));
      PetscCall(be->sync());
    } else PetscCall(model_forward_cached(lm, kv, tok, slot, pos, conc, NULL, conc, out));
    t[s] = sys_wtime() - t0;
  }
  if (d) PetscCall(be->free(d));
  *ms = max_new > 1 ? median(t, max_new - 1) * 1e3 : 0;
  PetscCall(PetscFree(t));
  PetscCall(PetscFree4(tok, slot, pos, out));
  PetscCall(model_kv_destroy(lm, &kv));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* -logprob_gap: the generation-time log-probabilities of b's response
 * tokens against the training path's for the same tokens (model_forward over
 * the whole sequences, then model_logprobs_dist under the sampling
 * distribution, as the PPO rollout's old log-probabilities are computed:
 * src/ppo/rollout.c); forward row t predicts the token at t+1. Appends the
 * largest and the mean absolute difference over the response tokens. */
static PetscErrorCode logprob_gap(Model *lm, const GenBatch *b, const GenConfig *cfg, char *buf, size_t len)
{
  int           T = b->Tmax, N = b->n * T, *target, *off = NULL, *ids = NULL, ntgt = 0;
  float        *lp;
  double        gmax = 0, gsum = 0;
  ModelTokenDist dist = {(float)(1.0 / cfg->temperature), NULL, NULL};

  PetscFunctionBegin;
  PetscCall(PetscMalloc2(N, &target, N, &lp));
  for (int i = 0; i < b->n; i++)
    for (int r = 0; r < T; r++) {
      int t = r + 1;
      target[i * T + r] = t >= b->prompt_len[i] && t < b->prompt_len[i] + b->response_len[i] ? b->tokens[i * T + t] : -1;
    }
  if (b->mask_off) { /* the allowed set of position t+1 moves to row t */
    int run = 0;
    PetscCall(PetscMalloc2(N + 1, &off, b->mask_off[N] + 1, &ids));
    for (int i = 0; i < b->n; i++)
      for (int r = 0; r < T; r++) {
        size_t k = (size_t)i * T + r + 1;
        off[i * T + r] = run;
        for (int j = r + 1 < T ? b->mask_off[k] : 0; r + 1 < T && j < b->mask_off[k + 1]; j++) ids[run++] = b->mask_ids[j];
      }
    off[N]        = run;
    dist.mask_off = off;
    dist.mask_ids = ids;
  }
  PetscCall(model_forward(lm, b->tokens, b->n, T));
  PetscCall(model_logprobs_dist(lm, target, &dist, lp, NULL));
  for (int n = 0; n < N; n++)
    if (target[n] >= 0) {
      double d = fabs((double)lp[n] - b->logprobs[n + 1]);
      gmax = PetscMax(gmax, d);
      gsum += d;
      ntgt++;
    }
  PetscCall(PetscSNPrintf(buf, len, " logprob_gap_max=%.3g logprob_gap_mean=%.3g logprob_gap_tokens=%d", gmax, ntgt ? gsum / ntgt : 0.0, ntgt));
  if (off) PetscCall(PetscFree2(off, ids));
  PetscCall(PetscFree2(target, lp));
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

static PetscErrorCode bench_conc(const BenchRun *r, Model *lm, const BenchSize *s, int conc, int P, int max_new, int warmup, int iters)
{
  GenConfig     cfg = {.temperature = 1.0, .top_k = 0, .top_p = 1.0, .greedy = PETSC_FALSE, .eos = 3};
  GenEngine    *eng;
  GenBatch      b;
  GenRequest   *req;
  int          *prompts;
  double       *dec, *tot, *step, *pre, fwd_ms = 0;
  DecodeTiming  t = {0};
  char          tail[384], gap[128] = "";

  PetscFunctionBegin;
  cfg.max_new_tokens = max_new;
  cfg.min_new_tokens = r->full_length ? max_new : 0;
  cfg.slots          = conc;
  cfg.kv_mb          = 1e6;
  cfg.eager          = r->eager;
  cfg.batch_invariant = r->batch_invariant;
  PetscCall(gen_config_check(&cfg, &s->cfg, "", P));
  PetscCall(PetscMalloc2(conc, &req, (size_t)conc * P, &prompts));
  for (int i = 0; i < conc; i++) {
    for (int t0 = 0; t0 < P; t0++) prompts[i * P + t0] = (int)(rng_u32(7, (uint32_t)i, (uint32_t)t0, 0, 0) % (uint32_t)s->cfg.vocab_size);
    req[i] = (GenRequest){.id = i, .prompt = prompts + (size_t)i * P, .prompt_len = P};
  }
  PetscCall(gen_engine_create(lm, &cfg, P, &eng));
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
  if (r->logprob_gap) PetscCall(logprob_gap(lm, &b, &cfg, gap, sizeof gap));
  PetscCall(forward_only_ms(r, lm, conc, P, max_new, &fwd_ms));
  PetscCall(report_tail(r, lm, conc, P, max_new, median(dec, iters), fwd_ms, tail, sizeof tail));
  PetscCall(PetscPrintf(PETSC_COMM_WORLD,
                        "rlfuse-decode size=%s params=%zu conc=%d prompt=%d new=%d threads=%d decode_tok_per_s=%.0f tok_per_s=%.0f step_ms=%.3f fwd_ms=%.3f prefill_ms=%.3f%s%s\n",
                        s->name, lm->nparams, conc, P, max_new, omp_get_max_threads(), median(dec, iters), median(tot, iters), median(step, iters), fwd_ms,
                        median(pre, iters), tail, gap));
  PetscCall(PetscFree4(dec, tot, step, pre));
  PetscCall(gen_batch_destroy(&b));
  PetscCall(gen_engine_destroy(&eng));
  PetscCall(PetscFree2(req, prompts));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode bench_size(const BenchRun *r, const BenchSize *s, PetscInt conc, PetscInt P, PetscInt max_new, PetscInt warmup, PetscInt iters)
{
  const int all[3] = {1, 8, 64};
  Model    *lm;

  PetscFunctionBegin;
  PetscCall(model_create(&s->cfg, r->be, &lm));
  PetscCall(model_cached_batch_invariant(lm, r->batch_invariant)); /* forward_only_ms's forwards as the engine's */
  PetscCall(model_init_random(lm, 1));
  if (conc > 0) PetscCall(bench_conc(r, lm, s, (int)conc, (int)P, (int)max_new, (int)warmup, (int)iters));
  else
    for (int k = 0; k < 3; k++) PetscCall(bench_conc(r, lm, s, all[k], (int)P, (int)max_new, (int)warmup, (int)iters));
  PetscCall(model_destroy(&lm));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* The backend and arithmetic that -device and -precision name; on cuda a
 * comment line records the runtime, driver and device count. */
static PetscErrorCode bench_backend(BenchRun *r)
{
  char info[256];

  PetscFunctionBegin;
  PetscCheck(r->hbm_gbs >= 0, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE, "-hbm_gbs %.0f: must be >= 0 (0: no roofline)", (double)r->hbm_gbs);
  PetscCall(backend_setup(device_names[r->device], r->precision == 1 ? PETSC_TRUE : PETSC_FALSE, &r->be));
  if (r->device == 1) {
    PetscCall(backend_cuda_version(info, sizeof info));
    PetscCall(PetscPrintf(PETSC_COMM_WORLD, "# bench_decode device=cuda precision=%s hbm_gbs=%.0f cuda: %s\n", precision_names[r->precision], (double)r->hbm_gbs, info));
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode bench_main(void)
{
  char      size[16] = "all";
  PetscInt  conc = 0, P = 8, max_new = 64, iters = 3, warmup = 1;
  BenchRun  r    = {NULL, 0, 0, 0, PETSC_TRUE, PETSC_FALSE, PETSC_FALSE, PETSC_FALSE};
  int       nrun = 0;
  PetscBool help, measure = PETSC_FALSE;

  PetscFunctionBegin;
  PetscOptionsBegin(PETSC_COMM_WORLD, NULL, "Decode benchmark", NULL);
  RfOptString("-size", "Model size: qs, 1M, 10M, 124M (GPT-2 small), smollm2, qwen05, qwen15 (SmolLM2-135M's, Qwen2.5-0.5B's, 1.5B's LLaMA shapes) or all (= qs, 1M and 10M)", size, sizeof size);
  RfOptInt("-concurrency", "Concurrent samples (= slots = requests); 0 runs 1, 8 and 64", 0, &conc);
  RfOptInt("-prompt", "Prompt tokens per sample", 8, &P);
  RfOptInt("-max_new", "Response tokens per sample (with -full_length, every sample generates all of them)", 64, &max_new);
  RfOptInt("-iters", "Timed generations (the median is reported)", 3, &iters);
  RfOptInt("-warmup", "Untimed generations first", 1, &warmup);
  RfOptEnum("-device", "Backend to measure: cpu or cuda", device_names, 2, &r.device);
  RfOptEnum("-precision", "Matmul and activation arithmetic on -device cuda: fp32, or bf16 (fp32 master weights; the matmuls read bf16 copies kept between calls)", precision_names, 2, &r.precision);
  RfOptBool("-eager", "Run each decode step's operations one by one (GenConfig.eager): no recorded CUDA graphs, for comparison", PETSC_FALSE, &r.eager);
  RfOptReal("-hbm_gbs", "Device memory bandwidth in GB/s, for the roofline fields (0: none; tools/bench/bench_gpu.sh passes the datasheet's)", 0, &r.hbm_gbs);
  RfOptBool("-measure_bw", "On the cpu: measure this machine's memory bandwidth (STREAM triad on the OpenMP threads) and use it as -hbm_gbs", PETSC_FALSE, &measure);
  RfOptBool("-full_length", "Every sample runs -max_new tokens (EOS banned, so each token's allowed set is recorded); false: plain sampling, samples may stop at EOS",
            PETSC_TRUE, &r.full_length);
  RfOptBool("-logprob_gap", "After the timed generations, recompute the last one's log-probabilities with the training forward and print their largest and mean absolute difference (logprob_gap_max, logprob_gap_mean)",
            PETSC_FALSE, &r.logprob_gap);
  RfOptBool("-batch_invariant", "On the cpu: -gen_batch_invariant (the cached forward's matmuls take the row-wise kernels at every row count)", PETSC_FALSE, &r.batch_invariant);
  PetscOptionsEnd();
  PetscCall(PetscOptionsHasHelp(NULL, &help));
  if (help) PetscFunctionReturn(PETSC_SUCCESS); /* -help lists the options; measure nothing */
  PetscCall(sys_options_check_unused());
  PetscCheck(conc >= 0 && P > 0 && max_new > 0 && iters > 0 && warmup >= 0, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE,
             "-concurrency must be >= 0, -prompt, -max_new and -iters positive, -warmup >= 0");
  PetscCheck(!r.batch_invariant || r.device == 0, PETSC_COMM_WORLD, PETSC_ERR_ARG_INCOMP, "-batch_invariant true: the cpu backend's matmuls, not -device cuda's");
  PetscCall(bench_backend(&r));
  if (measure && r.device == 0) {
    r.hbm_gbs = triad_gbs();
    PetscCall(PetscPrintf(PETSC_COMM_WORLD, "# bench_decode memory bandwidth %.1f GB/s (STREAM triad, %d threads): the roofline below\n", (double)r.hbm_gbs, omp_get_max_threads()));
  }
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    PetscBool any, match;
    PetscCall(PetscStrcmp(size, "all", &any));
    PetscCall(PetscStrcmp(size, sizes[i].name, &match));
    if ((any && sizes[i].in_all) || match) PetscCall(bench_size(&r, &sizes[i], conc, P, max_new, warmup, iters));
    nrun += (any && sizes[i].in_all) || match;
  }
  PetscCheck(nrun > 0, PETSC_COMM_WORLD, PETSC_ERR_ARG_UNKNOWN_TYPE, "-size %s: unknown size (choose qs, 1M, 10M, 124M, smollm2, qwen05, qwen15 or all)", size);
  PetscFunctionReturn(PETSC_SUCCESS);
}

int main(int argc, char **argv)
{
  PetscErrorCode ierr;

  sys_blas_core_select(argv);
  ierr = PetscInitialize(&argc, &argv, NULL, "rlfuse decode benchmark\n");
  if (ierr) return 1;
  ierr = sys_error_handler_install();
  if (!ierr) ierr = bench_main();
  if (ierr) sys_error_exit(ierr);
  return PetscFinalize() ? 1 : 0;
}
