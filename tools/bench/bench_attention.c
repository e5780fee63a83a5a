/* Training attention alone: the tiled pair of the ops table (the
 * log-sum-exp, no T x T array) against the former pair that saves the
 * probabilities [B,NH,T,T] (the tests' reference,
 * regression/ref_attention.c, on the cpu; -device cuda measures the tiled
 * pair alone), alternated in one
 * process on the same inputs, so machine load hits both alike
 * (docs/benchmarks.md, "Tiled attention on the CPU"; tools/bench/gpu_targets.sh
 * runs it on a GPU).
 *
 *   bin/bench_attention [-B 1] [-T 1024] [-n_head 9] [-n_kv_head 3] [-head_dim 64] [-iters 5]
 *                       [-device cpu|cuda] [-precision fp32|bf16] [-tiled_only]
 *
 * Defaults: SmolLM2-135M's attention (9 query heads over 3 kv heads of 64).
 * Prints, per variant, the median forward and backward milliseconds over
 * the iterations (on cuda each call is followed by a device sync inside
 * its time), the forward and backward's TFLOP/s at the causal count
 * (4 B NH T^2 hd / 2 forward, 2.5 times that backward) and the bytes the
 * variant saves for the backward. -tiled_only skips the probabilities, whose
 * [B,NH,T,T] array may not fit. */
#include "../../regression/ref.h"
#include "sys.h"
#include "tensor.h"
#include <omp.h>
#include <stdlib.h>

static int cmp_double(const void *a, const void *b)
{
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static const char *const device_names[]    = {"cpu", "cuda", "Device", "DEVICE_", NULL};
static const char *const precision_names[] = {"fp32", "bf16", "Precision", "PRECISION_", NULL};

/* One variant's forward or backward (v 1: the ops table's tiled pair;
 * 0: the cpu's T x T reference), then a device sync. */
static PetscErrorCode run_pass(const Backend *be, int v, int backward, float *out, float *saved, const float *qkv, const float *g, float *dq, int B, int T, int C,
                               int NH, int NKV)
{
  PetscFunctionBegin;
  if (!backward) {
    if (v) PetscCall(be->attention_forward(out, saved, qkv, B, T, C, NH, NKV));
    else PetscCall(ref_attention_probs_forward(out, saved, qkv, B, T, C, NH, NKV));
  } else {
    if (v) PetscCall(be->attention_backward(dq, g, qkv, out, saved, B, T, C, NH, NKV));
    else PetscCall(ref_attention_probs_backward(dq, g, qkv, out, saved, B, T, C, NH, NKV));
  }
  if (be->sync) PetscCall(be->sync());
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode bench_main(void)
{
  const Backend *be;
  PetscInt       B = 1, T = 1024, NH = 9, NKV = 3, hd = 64, iters = 5, device = 0, precision = 0;
  PetscBool      help, tiled_only = PETSC_FALSE, cuda;
  float         *h_qkv, *h_g, *qkv, *out, *g, *dq, *saved;
  double        *tm[2][2], fl;
  size_t         C, C3, nq, no, na;
  int            v0;

  PetscFunctionBegin;
  PetscOptionsBegin(PETSC_COMM_WORLD, NULL, "Attention benchmark", NULL);
  RfOptInt("-B", "Sequences", 1, &B);
  RfOptInt("-T", "Tokens per sequence", 1024, &T);
  RfOptInt("-n_head", "Query heads", 9, &NH);
  RfOptInt("-n_kv_head", "Key/value heads (dividing -n_head)", 3, &NKV);
  RfOptInt("-head_dim", "Head size", 64, &hd);
  RfOptInt("-iters", "Timed rounds (the median is reported), after one untimed", 5, &iters);
  RfOptEnum("-device", "Backend to measure: cpu or cuda", device_names, 2, &device);
  RfOptEnum("-precision", "fp32, or bf16 (cuda only)", precision_names, 2, &precision);
  RfOptBool("-tiled_only", "Only the tiled pair (the probabilities' [B,NH,T,T] array may not fit)", PETSC_FALSE, &tiled_only);
  PetscOptionsEnd();
  PetscCall(PetscOptionsHasHelp(NULL, &help));
  if (help) PetscFunctionReturn(PETSC_SUCCESS);
  PetscCall(sys_options_check_unused());
  PetscCheck(B > 0 && T > 0 && NH > 0 && NKV > 0 && NH % NKV == 0 && hd > 0 && iters > 0, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE, "-B, -T, -n_head, -head_dim and -iters must be positive and -n_kv_head divide -n_head");
  PetscCall(backend_setup(device_names[device], precision == 1 ? PETSC_TRUE : PETSC_FALSE, &be));
  cuda = device == 1 ? PETSC_TRUE : PETSC_FALSE;
  v0   = tiled_only || cuda ? 1 : 0; /* the T x T reference is the cpu's only */
  C = (size_t)NH * hd, C3 = C + 2 * (size_t)NKV * hd, nq = (size_t)B * T * C3, no = (size_t)B * T * C;
  na = v0 ? tensor_attention_saved((size_t)B, (size_t)NH, (size_t)T) : (size_t)B * NH * T * T;
  PetscCall(PetscMalloc2(nq, &h_qkv, no, &h_g));
  for (size_t i = 0; i < nq; i++) h_qkv[i] = (float)(rng_u32(7, 0, (uint32_t)i, 0, 0) % 2001) / 1000.0f - 1.0f;
  for (size_t i = 0; i < no; i++) h_g[i] = (float)(rng_u32(7, 1, (uint32_t)i, 0, 0) % 2001) / 1000.0f - 1.0f;
  PetscCall(be->alloc(nq * sizeof(float), (void **)&qkv));
  PetscCall(be->alloc(no * sizeof(float), (void **)&out));
  PetscCall(be->alloc(no * sizeof(float), (void **)&g));
  PetscCall(be->alloc(nq * sizeof(float), (void **)&dq));
  PetscCall(be->alloc(na * sizeof(float), (void **)&saved));
  PetscCall(be->from_host(qkv, h_qkv, nq * sizeof(float)));
  PetscCall(be->from_host(g, h_g, no * sizeof(float)));
  for (int v = 0; v < 2; v++)
    for (int p = 0; p < 2; p++) PetscCall(PetscMalloc1(iters, &tm[v][p]));
  for (int it = -1; it < iters; it++) /* one untimed round: first touch of the probabilities, cuBLAS's set-up */
    for (int v = v0; v < 2; v++) {
      double t0, t1, t2;
      PetscCall(be->zero(dq, nq * sizeof(float)));
      if (be->sync) PetscCall(be->sync());
      t0 = omp_get_wtime();
      PetscCall(run_pass(be, v, 0, out, saved, qkv, g, dq, (int)B, (int)T, (int)C, (int)NH, (int)NKV));
      t1 = omp_get_wtime();
      PetscCall(run_pass(be, v, 1, out, saved, qkv, g, dq, (int)B, (int)T, (int)C, (int)NH, (int)NKV));
      t2 = omp_get_wtime();
      if (it >= 0) tm[v][0][it] = t1 - t0, tm[v][1][it] = t2 - t1;
    }
  fl = 4.0 * (double)B * NH * (double)T * T * hd / 2; /* causal forward: QK^T and PV over the lower triangle */
  for (int v = v0; v < 2; v++) {
    double f, b;
    qsort(tm[v][0], (size_t)iters, sizeof(double), cmp_double);
    qsort(tm[v][1], (size_t)iters, sizeof(double), cmp_double);
    f = tm[v][0][iters / 2], b = tm[v][1][iters / 2];
    PetscCall(PetscPrintf(PETSC_COMM_WORLD, "attention %s device=%s precision=%s B=%d T=%d heads=%d/%d hd=%d threads=%d fwd_ms=%.3f bwd_ms=%.3f fwd_tflops=%.2f bwd_tflops=%.2f saved_bytes=%.0f\n",
                          v ? "tiled" : "probs", device_names[device], precision_names[precision], (int)B, (int)T, (int)NH, (int)NKV, (int)hd, omp_get_max_threads(), 1e3 * f, 1e3 * b,
                          fl / f / 1e12, 2.5 * fl / b / 1e12, (double)sizeof(float) * (v ? tensor_attention_saved((size_t)B, (size_t)NH, (size_t)T) : (double)B * NH * T * T)));
  }
  for (int v = 0; v < 2; v++)
    for (int p = 0; p < 2; p++) PetscCall(PetscFree(tm[v][p]));
  PetscCall(be->free(qkv));
  PetscCall(be->free(out));
  PetscCall(be->free(g));
  PetscCall(be->free(dq));
  PetscCall(be->free(saved));
  PetscCall(PetscFree2(h_qkv, h_g));
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
