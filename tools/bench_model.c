/* CPU throughput benchmark of the GPT model (`make bench`): forward and
 * training (forward + backward + AdamW) tokens/s and GFLOP/s for named model
 * sizes. tools/bench_torch.py measures PyTorch on the same shapes with the
 * same FLOP formula, so the two are comparable line by line.
 *
 *   bin/bench_model -size 1M|10M [-B 8] [-T 128] [-iters 10] [-warmup 3]
 *
 * FLOPs per token are gpt_flops_per_token (src/model/adamw.c, the PaLM
 * convention): forward 2*P_mm + 4*n_layer*T*C, training 3x forward. */
#include "model.h"
#include "sys.h"
#include <omp.h>
#include <stdlib.h>

typedef struct {
  const char *name;
  GPTConfig   cfg;
} BenchSize;

static const BenchSize sizes[] = {
  {"1M", {4, 4, 128, 512, 128, GPT_HEAD_LM}},
  {"10M", {6, 6, 384, 512, 256, GPT_HEAD_LM}},
};

static int cmp_double(const void *a, const void *b)
{
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Median seconds of one forward (train = FALSE) or training step. */
static PetscErrorCode bench_time(GPT *gpt, const int *tok, const int *tgt, float *lp, float *dlp, int B, int T, PetscBool train, int warmup, int iters, double *median)
{
  AdamWConfig opt = {1e-4, 1.0, 0.9, 0.95, 1e-8, 0.1, 1.0, 0, 0};
  double     *t;
  PetscReal   lr, gn;

  PetscFunctionBegin;
  PetscCall(PetscMalloc1(iters, &t));
  for (int i = -warmup; i < iters; i++) {
    double t0 = sys_wtime();
    PetscCall(gpt_forward(gpt, tok, B, T));
    PetscCall(gpt_logprobs(gpt, tgt, lp));
    if (train) {
      PetscCall(gpt_zero_grad(gpt));
      PetscCall(gpt_backward_logprob(gpt, tgt, dlp));
      PetscCall(gpt_adamw_step(gpt, &opt, &lr, &gn));
    }
    PetscCall(gpt->be->sync());
    if (i >= 0) t[i] = sys_wtime() - t0;
  }
  qsort(t, (size_t)iters, sizeof *t, cmp_double);
  *median = t[iters / 2];
  PetscCall(PetscFree(t));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode bench_size(const BenchSize *s, PetscInt B, PetscInt T, PetscInt warmup, PetscInt iters)
{
  GPT   *gpt;
  int   *tok, *tgt;
  float *lp, *dlp;
  int    N = (int)(B * T);

  PetscFunctionBegin;
  PetscCheck(T <= s->cfg.n_positions, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE, "-T %" PetscInt_FMT " exceeds n_positions %d of size %s", T, s->cfg.n_positions, s->name);
  PetscCall(gpt_create(&s->cfg, backend_cpu(), &gpt));
  PetscCall(gpt_init_random(gpt, 1));
  PetscCall(gpt_optim_init(gpt));
  PetscCall(PetscMalloc4(N, &tok, N, &tgt, N, &lp, N, &dlp));
  for (int n = 0; n < N; n++) {
    tok[n] = (int)(rng_u32(5, 0, (uint32_t)n, 0, 0) % (uint32_t)s->cfg.vocab_size);
    tgt[n] = (int)(rng_u32(5, 1, (uint32_t)n, 0, 0) % (uint32_t)s->cfg.vocab_size);
    dlp[n] = -1.0f / (float)N;
  }
  for (int train = 0; train < 2; train++) {
    double sec = 0, flops = gpt_flops_per_token(&s->cfg, (int)T, (PetscBool)train) * N;
    PetscCall(bench_time(gpt, tok, tgt, lp, dlp, (int)B, (int)T, (PetscBool)train, (int)warmup, (int)iters, &sec));
    PetscCall(PetscPrintf(PETSC_COMM_WORLD, "rlfuse size=%s params=%zu mode=%s B=%" PetscInt_FMT " T=%" PetscInt_FMT " threads=%d tok_per_s=%.0f gflops=%.2f ms=%.2f\n", s->name, gpt->nparams, train ? "train" : "fwd", B, T, omp_get_max_threads(), N / sec, flops / sec * 1e-9, sec * 1e3));
  }
  PetscCall(PetscFree4(tok, tgt, lp, dlp));
  PetscCall(gpt_destroy(&gpt));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode bench_main(void)
{
  char     size[16] = "all";
  PetscInt B = 8, T = 128, iters = 10, warmup = 3;

  PetscFunctionBegin;
  PetscOptionsBegin(PETSC_COMM_WORLD, NULL, "Model benchmark", NULL);
  RfOptString("-size", "Model size: 1M, 10M or all", size, sizeof size);
  RfOptInt("-B", "Sequences per step", 8, &B);
  RfOptInt("-T", "Tokens per sequence", 128, &T);
  RfOptInt("-iters", "Timed iterations (the median is reported)", 10, &iters);
  RfOptInt("-warmup", "Untimed iterations first", 3, &warmup);
  PetscOptionsEnd();
  PetscCall(sys_options_check_unused());
  PetscCheck(B > 0 && T > 0 && iters > 0 && warmup >= 0, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE, "-B, -T and -iters must be positive");
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    PetscBool all, match;
    PetscCall(PetscStrcmp(size, "all", &all));
    PetscCall(PetscStrcmp(size, sizes[i].name, &match));
    if (all || match) PetscCall(bench_size(&sizes[i], B, T, warmup, iters));
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

int main(int argc, char **argv)
{
  PetscErrorCode ierr;

  ierr = PetscInitialize(&argc, &argv, NULL, "rlfuse model benchmark\n");
  if (ierr) return 1;
  ierr = sys_error_handler_install();
  if (!ierr) ierr = bench_main();
  if (ierr) sys_error_exit(ierr);
  return PetscFinalize() ? 1 : 0;
}
