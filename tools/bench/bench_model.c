/* Throughput benchmark of the Model model (`make bench`, tools/bench/bench_gpu.sh):
 * forward and training (forward + backward + AdamW) tokens/s and GFLOP/s
 * for named model sizes, on the cpu backend or on a GPU (-device cuda).
 * tools/bench/bench_torch.py measures PyTorch on the same shapes with the same
 * FLOP formula, so the two are comparable line by line.
 *
 *   bin/bench_model -size 1M|10M|124M|all [-B 8] [-T 128] [-iters 10] [-warmup 3]
 *                   [-device cpu|cuda] [-precision fp32|bf16] [-peak_tflops X]
 *
 * FLOPs per token are model_flops_per_token (src/model/adamw.c, the PaLM
 * convention): forward 2*P_mm + 4*n_layer*T*C, training 3x forward. MFU is
 * the achieved FLOP/s over -peak_tflops, the device's datasheet peak for the
 * precision (docs/benchmarks.md, "GPU: how to measure"); without it no MFU is
 * printed, since a wrong default peak would give a plausible wrong MFU. */
#include "model.h"
#include "sys.h"
#include "bench_sizes.h"

char *openblas_get_corename(void); /* OpenBLAS; not in every cblas.h */
#include <omp.h>
#include <stdlib.h>

typedef struct {
  const char *name;
  ModelConfig cfg;
  PetscBool   in_all; /* run by -size all */
} BenchSize;

/* "124M" is GPT-2 small, the GPU benchmarks' shape; a CPU training step of
 * it takes seconds, so -size all (what `make bench` means by the CPU sizes)
 * leaves it out, as it does "smollm2", "qwen05" and "qwen15", the LLaMA
 * shapes of tools/bench/bench_sizes.h (their position bound is raised to -T:
 * rotary positions have no table). */
#define BENCH_GPT2(L, H, C, V, P) {.n_layer = L, .n_head = H, .n_embd = C, .vocab_size = V, .n_positions = P, .head = MODEL_HEAD_LM}
static const BenchSize sizes[] = {
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
  PetscReal      peak_tflops;       /* 0: no MFU */
  PetscReal      tile_mb;           /* -logits_tile_mb */
  PetscBool      tile_set;          /* given: the activation bytes are reported */
} BenchRun;

static int cmp_double(const void *a, const void *b)
{
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Median seconds of one forward (train = FALSE) or training step. */
static PetscErrorCode bench_time(Model *lm, const int *tok, const int *tgt, float *lp, float *dlp, int B, int T, PetscBool train, int warmup, int iters, double *median)
{
  AdamWConfig opt = {1e-4, 1.0, 0.9, 0.95, 1e-8, 0.1, 1.0, 0, 0};
  double     *t;
  PetscReal   lr, gn;

  PetscFunctionBegin;
  PetscCall(PetscMalloc1(iters, &t));
  for (int i = -warmup; i < iters; i++) {
    double t0 = sys_wtime();
    PetscCall(model_forward(lm, tok, B, T));
    PetscCall(model_logprobs(lm, tgt, lp));
    if (train) {
      PetscCall(model_zero_grad(lm));
      PetscCall(model_backward_logprob(lm, tgt, dlp));
      PetscCall(model_adamw_step(lm, &opt, &lr, &gn));
    }
    PetscCall(lm->be->sync());
    if (i >= 0) t[i] = sys_wtime() - t0;
  }
  qsort(t, (size_t)iters, sizeof *t, cmp_double);
  *median = t[iters / 2];
  PetscCall(PetscFree(t));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Fields after the cpu line's (whose format docs and tools parse, so it
 * stays as it was): device and precision off the cpu, MFU when a peak is given. */
static PetscErrorCode report_tail(const BenchRun *r, double flops_per_s, char *buf, size_t len)
{
  char part[64];

  PetscFunctionBegin;
  buf[0] = 0;
  if (r->device != 0) PetscCall(PetscSNPrintf(buf, len, " device=%s precision=%s", device_names[r->device], precision_names[r->precision]));
  if (r->tile_set) { /* training's slab: what -logits_tile_mb changes */
    snprintf(part, sizeof part, " logits_tile_mb=%g acts_mb=%.1f", (double)r->tile_mb, model_acts_grown_bytes() / 1048576.0); /* C's %g: 64, not PETSc's 64. */
    PetscCall(PetscStrlcat(buf, part, len));
  }
  if (r->peak_tflops > 0) {
    PetscCall(PetscSNPrintf(part, sizeof part, " mfu=%.4f", flops_per_s / (r->peak_tflops * 1e12)));
    PetscCall(PetscStrlcat(buf, part, len));
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode bench_size(const BenchRun *r, const BenchSize *s, PetscInt B, PetscInt T, PetscInt warmup, PetscInt iters)
{
  Model *lm;
  int   *tok, *tgt;
  float *lp, *dlp;
  int    N = (int)(B * T);
  char   tail[128], mem[96] = "";
  size_t used0 = 0, used1 = 0;

  ModelConfig cfg = s->cfg;

  PetscFunctionBegin;
  if (cfg.arch == MODEL_ARCH_LLAMA && T > cfg.n_positions) cfg.n_positions = (int)T;
  PetscCheck(T <= cfg.n_positions, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE, "-T %" PetscInt_FMT " exceeds n_positions %d of size %s", T, cfg.n_positions, s->name);
  if (r->device == 1) PetscCall(backend_cuda_mem_used(&used0));
  PetscCall(model_create(&cfg, r->be, &lm));
  PetscCall(model_init_random(lm, 1));
  PetscCall(model_optim_init(lm));
  PetscCall(PetscMalloc4(N, &tok, N, &tgt, N, &lp, N, &dlp));
  for (int n = 0; n < N; n++) {
    tok[n] = (int)(rng_u32(5, 0, (uint32_t)n, 0, 0) % (uint32_t)s->cfg.vocab_size);
    tgt[n] = (int)(rng_u32(5, 1, (uint32_t)n, 0, 0) % (uint32_t)s->cfg.vocab_size);
    dlp[n] = -1.0f / (float)N;
  }
  for (int train = 0; train < 2; train++) {
    double sec = 0, flops = model_flops_per_token(&cfg, (int)T, (PetscBool)train) * N;
    PetscCall(bench_time(lm, tok, tgt, lp, dlp, (int)B, (int)T, (PetscBool)train, (int)warmup, (int)iters, &sec));
    PetscCall(report_tail(r, flops / sec, tail, sizeof tail));
    if (r->device == 1 && train) { /* the device memory the model and its training took, beside SFT's memory check's estimate (model_training_bytes) */
      double w, a;
      PetscCall(model_training_bytes(&cfg, r->be, (int)B, (int)T, &w, &a));
      PetscCall(backend_cuda_mem_used(&used1));
      PetscCall(PetscSNPrintf(mem, sizeof mem, " dev_mb=%.0f est_mb=%.0f", (double)(used1 - used0) / 1048576.0, (w + a) / 1048576.0));
    }
    PetscCall(PetscPrintf(PETSC_COMM_WORLD, "rlfuse size=%s params=%zu mode=%s B=%" PetscInt_FMT " T=%" PetscInt_FMT " threads=%d tok_per_s=%.0f gflops=%.2f ms=%.2f%s%s\n", s->name, lm->nparams,
                          train ? "train" : "fwd", B, T, omp_get_max_threads(), N / sec, flops / sec * 1e-9, sec * 1e3, tail, train ? mem : ""));
  }
  PetscCall(PetscFree4(tok, tgt, lp, dlp));
  PetscCall(model_destroy(&lm));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* The backend and arithmetic that -device and -precision name; on cuda a
 * comment line records the runtime, driver and device. */
static PetscErrorCode bench_backend(BenchRun *r)
{
  char info[256];

  PetscFunctionBegin;
  PetscCheck(r->peak_tflops >= 0, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE, "-peak_tflops %.1f: must be >= 0 (0: no MFU)", (double)r->peak_tflops);
  PetscCall(backend_setup(device_names[r->device], r->precision == 1 ? PETSC_TRUE : PETSC_FALSE, &r->be));
  if (r->device == 1) {
    PetscCall(backend_cuda_version(info, sizeof info));
    PetscCall(PetscPrintf(PETSC_COMM_WORLD, "# bench_model device=cuda precision=%s peak_tflops=%.1f cuda: %s\n", precision_names[r->precision], (double)r->peak_tflops, info));
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode bench_main(void)
{
  char      size[16] = "all";
  PetscInt  B = 8, T = 128, iters = 10, warmup = 3;
  BenchRun  r    = {NULL, 0, 0, 0, MODEL_LOGITS_TILE_MB, PETSC_FALSE};
  int       nrun = 0;
  PetscBool help;

  PetscFunctionBegin;
  PetscOptionsBegin(PETSC_COMM_WORLD, NULL, "Model benchmark", NULL);
  RfOptString("-size", "Model size: 1M, 10M, 124M (GPT-2 small), smollm2, qwen05, qwen15 (SmolLM2-135M's, Qwen2.5-0.5B's, 1.5B's LLaMA shapes) or all (= 1M and 10M)", size, sizeof size);
  RfOptInt("-B", "Sequences per step", 8, &B);
  RfOptInt("-T", "Tokens per sequence", 128, &T);
  RfOptInt("-iters", "Timed iterations (the median is reported)", 10, &iters);
  RfOptInt("-warmup", "Untimed iterations first", 3, &warmup);
  RfOptEnum("-device", "Backend to measure: cpu or cuda", device_names, 2, &r.device);
  RfOptEnum("-precision", "Matmul and activation arithmetic on -device cuda: fp32, or bf16 (fp32 master weights and optimizer state)", precision_names, 2, &r.precision);
  RfOptReal("-peak_tflops", "Peak TFLOP/s of the device at -precision, for the MFU field (0: no MFU; tools/bench/bench_gpu.sh passes the datasheet's)", 0, &r.peak_tflops);
  RfOptReal("-logits_tile_mb", "rlfuse's -logits_tile_mb: MiB of LM-head logits held at once (0: all rows); given, each line reports it and the activation bytes so far (acts_mb)", MODEL_LOGITS_TILE_MB,
            &r.tile_mb);
  PetscOptionsEnd();
  PetscCall(PetscOptionsHasName(NULL, NULL, "-logits_tile_mb", &r.tile_set));
  PetscCall(model_set_logits_tile_mb((double)r.tile_mb));
  PetscCall(PetscOptionsHasHelp(NULL, &help));
  if (help) PetscFunctionReturn(PETSC_SUCCESS); /* -help lists the options; measure nothing */
  PetscCall(sys_options_check_unused());
  PetscCheck(B > 0 && T > 0 && iters > 0 && warmup >= 0, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE, "-B, -T and -iters must be positive");
  PetscCall(bench_backend(&r));
  PetscCall(PetscPrintf(PETSC_COMM_WORLD, "# bench_model openblas_core=%s\n", openblas_get_corename())); /* the kernels sys_blas_core_select left in place */
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    PetscBool all, match;
    PetscCall(PetscStrcmp(size, "all", &all));
    PetscCall(PetscStrcmp(size, sizes[i].name, &match));
    if ((all && sizes[i].in_all) || match) PetscCall(bench_size(&r, &sizes[i], B, T, warmup, iters));
    nrun += (all && sizes[i].in_all) || match;
  }
  PetscCheck(nrun > 0, PETSC_COMM_WORLD, PETSC_ERR_ARG_UNKNOWN_TYPE, "-size %s: unknown size (choose 1M, 10M, 124M, smollm2, qwen05, qwen15 or all)", size);
  PetscFunctionReturn(PETSC_SUCCESS);
}

int main(int argc, char **argv)
{
  PetscErrorCode ierr;

  sys_blas_core_select(argv);
  ierr = PetscInitialize(&argc, &argv, NULL, "rlfuse model benchmark\n");
  if (ierr) return 1;
  ierr = sys_error_handler_install();
  if (!ierr) ierr = bench_main();
  if (ierr) sys_error_exit(ierr);
  return PetscFinalize() ? 1 : 0;
}
