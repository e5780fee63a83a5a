/* Training attention alone on the cpu backend: the tiled pair of the ops
 * table (attention_lse, no T x T array) against the former pair that saves
 * the probabilities [B,NH,T,T] (backend_cpu_attention_probs_*), alternated
 * in one process on the same inputs, so machine load hits both alike
 * (docs/benchmarks.md, "Tiled attention on the CPU").
 *
 *   bin/bench_attention [-B 1] [-T 1024] [-n_head 9] [-n_kv_head 3] [-head_dim 64] [-iters 5]
 *
 * Defaults: SmolLM2-135M's attention (9 query heads over 3 kv heads of 64).
 * Prints, per variant, the median forward and backward milliseconds over
 * the iterations and the bytes the variant saves for the backward. */
#include "sys.h"
#include "tensor.h"
#include <omp.h>
#include <stdlib.h>

static int cmp_double(const void *a, const void *b)
{
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static PetscErrorCode bench_main(void)
{
  const Backend *be = backend_cpu();
  PetscInt       B = 1, T = 1024, NH = 9, NKV = 3, hd = 64, iters = 5;
  float         *qkv, *out, *g, *dq, *saved;
  double        *tm[2][2];
  size_t         C, C3, nq, no, na;
  PetscBool      help;

  PetscFunctionBegin;
  PetscOptionsBegin(PETSC_COMM_WORLD, NULL, "Attention benchmark", NULL);
  RfOptInt("-B", "Sequences", 1, &B);
  RfOptInt("-T", "Tokens per sequence", 1024, &T);
  RfOptInt("-n_head", "Query heads", 9, &NH);
  RfOptInt("-n_kv_head", "Key/value heads (dividing -n_head)", 3, &NKV);
  RfOptInt("-head_dim", "Head size", 64, &hd);
  RfOptInt("-iters", "Timed rounds (the median is reported), after one untimed", 5, &iters);
  PetscOptionsEnd();
  PetscCall(PetscOptionsHasHelp(NULL, &help));
  if (help) PetscFunctionReturn(PETSC_SUCCESS);
  PetscCall(sys_options_check_unused());
  PetscCheck(B > 0 && T > 0 && NH > 0 && NKV > 0 && NH % NKV == 0 && hd > 0 && iters > 0, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE, "-B, -T, -n_head, -head_dim and -iters must be positive and -n_kv_head divide -n_head");
  C = (size_t)NH * hd, C3 = C + 2 * (size_t)NKV * hd, nq = (size_t)B * T * C3, no = (size_t)B * T * C, na = (size_t)B * NH * T * T;
  PetscCall(PetscMalloc5(nq, &qkv, no, &out, no, &g, nq, &dq, na, &saved));
  for (size_t i = 0; i < nq; i++) qkv[i] = (float)(rng_u32(7, 0, (uint32_t)i, 0, 0) % 2001) / 1000.0f - 1.0f;
  for (size_t i = 0; i < no; i++) g[i] = (float)(rng_u32(7, 1, (uint32_t)i, 0, 0) % 2001) / 1000.0f - 1.0f;
  for (int v = 0; v < 2; v++)
    for (int p = 0; p < 2; p++) PetscCall(PetscMalloc1(iters, &tm[v][p]));
  for (int it = -1; it < iters; it++) /* one untimed round: first touch of the probabilities */
    for (int v = 0; v < 2; v++) {
      double t0, t1, t2;
      PetscCall(PetscMemzero(dq, nq * sizeof(float)));
      t0 = omp_get_wtime();
      if (v) PetscCall(be->attention_forward(out, saved, qkv, (int)B, (int)T, (int)C, (int)NH, (int)NKV));
      else PetscCall(backend_cpu_attention_probs_forward(out, saved, qkv, (int)B, (int)T, (int)C, (int)NH, (int)NKV));
      t1 = omp_get_wtime();
      if (v) PetscCall(be->attention_backward(dq, g, qkv, out, saved, (int)B, (int)T, (int)C, (int)NH, (int)NKV));
      else PetscCall(backend_cpu_attention_probs_backward(dq, g, qkv, out, saved, (int)B, (int)T, (int)C, (int)NH, (int)NKV));
      t2 = omp_get_wtime();
      if (it >= 0) tm[v][0][it] = t1 - t0, tm[v][1][it] = t2 - t1;
    }
  for (int v = 0; v < 2; v++) {
    qsort(tm[v][0], (size_t)iters, sizeof(double), cmp_double);
    qsort(tm[v][1], (size_t)iters, sizeof(double), cmp_double);
    PetscCall(PetscPrintf(PETSC_COMM_WORLD, "attention %s B=%d T=%d heads=%d/%d hd=%d threads=%d fwd_ms=%.2f bwd_ms=%.2f saved_bytes=%.0f\n", v ? "tiled" : "probs", (int)B, (int)T, (int)NH, (int)NKV, (int)hd,
                          omp_get_max_threads(), 1e3 * tm[v][0][iters / 2], 1e3 * tm[v][1][iters / 2], (double)sizeof(float) * tensor_attention_saved(v, (size_t)B, (size_t)NH, (size_t)T)));
  }
  for (int v = 0; v < 2; v++)
    for (int p = 0; p < 2; p++) PetscCall(PetscFree(tm[v][p]));
  PetscCall(PetscFree5(qkv, out, g, dq, saved));
  PetscFunctionReturn(PETSC_SUCCESS);
}

int main(int argc, char **argv)
{
  PetscErrorCode ierr;

  sys_blas_core_select(argv);
  ierr = PetscInitialize(&argc, &argv, NULL, "rlfuse attention benchmark\n");
  if (ierr) return 1;
  ierr = sys_error_handler_install();
  if (!ierr) ierr = bench_main();
  if (ierr) sys_error_exit(ierr);
  return PetscFinalize() ? 1 : 0;
}
