/* cpu backend: the linear layers, through OpenBLAS sgemm.
 *
 * Threading. Debian's libopenblas0 resolves to the *pthread* build
 * (/etc/alternatives/libopenblas.so.0 -> openblas-pthread/, priority 100; the
 * openmp build is a separate package, not installed here). So OpenBLAS runs
 * its own pool of OPENBLAS_NUM_THREADS (default: all cores) beside the OpenMP
 * team. The two never run at once because sgemm is only called here, outside
 * any parallel region; called from inside one, every OpenMP thread would
 * start a full OpenBLAS pool and the machine would be oversubscribed n^2.
 * They still collide in time: after each parallel region libgomp's team
 * spins (OMP_WAIT_POLICY unset = spin a while, then sleep), and the sgemm
 * that follows finds its cores busy. Measured on 2 cores (B=8, T=256,
 * C=384): sgemm at 100-150 GFLOP/s with the default policy, ~205 with
 * OMP_WAIT_POLICY=passive, and the OpenMP kernels no slower. So launch with
 * OMP_WAIT_POLICY=passive (libgomp reads it at load; it cannot be set
 * from here), and OPENBLAS_NUM_THREADS = OMP_NUM_THREADS = cores per rank.
 *
 * Determinism. OpenBLAS 0.3.21 is deterministic for a fixed thread count,
 * but its single-threaded and threaded drivers cut the K sum into different
 * blocks once K exceeds its GEMM_Q (a few hundred), so the bits of a long
 * sum (dW's sum over N rows, most visibly) change with OPENBLAS_NUM_THREADS.
 * We therefore cut every K sum ourselves into blocks of MM_KBLOCK, which
 * OpenBLAS does not split further, and add the blocks in order into the
 * output (beta = 1). dbias is our own blocked column sum. */
#include "cpu_ops.h"
#include <cblas.h>

#define MM_KBLOCK 256 /* below GEMM_Q (320 measured for this machine's SkylakeX kernel); checked by test_ops */

/* Row-major C[M,N] = beta*C + op(A)[M,K] . op(B)[K,N], the K sum in fixed blocks. */
static void sgemm_kblocked(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int M, int N, int K, const float *A, int lda, const float *B, int ldb, float beta, float *Cm, int ldc)
{
  for (int k0 = 0; k0 < K; k0 += MM_KBLOCK) {
    int          kb = K - k0 < MM_KBLOCK ? K - k0 : MM_KBLOCK;
    const float *a  = ta == CblasNoTrans ? A + k0 : A + (size_t)k0 * lda;
    const float *b  = tb == CblasNoTrans ? B + (size_t)k0 * ldb : B + k0;
    cblas_sgemm(CblasRowMajor, ta, tb, M, N, kb, 1.0f, a, lda, b, ldb, k0 ? 1.0f : beta, Cm, ldc);
  }
  if (K <= 0 && beta == 0.0f)
    for (int m = 0; m < M; m++) memset(Cm + (size_t)m * ldc, 0, (size_t)N * sizeof(float));
}

PetscErrorCode cpu_matmul_forward(float *out, const float *inp, const float *w, const float *bias, int N, int C, int OC, PetscBool transposed)
{
  float beta = 0.0f;

  PetscFunctionBegin;
  if (N <= 0 || OC <= 0) PetscFunctionReturn(PETSC_SUCCESS);
  if (bias) {
    /* the bias enters as sgemm's C operand: one pass over out, not two */
#pragma omp parallel for schedule(static) if ((size_t)N * OC > CPU_OMP_MIN)
    for (int n = 0; n < N; n++) memcpy(out + (size_t)n * OC, bias, (size_t)OC * sizeof(float));
    beta = 1.0f;
  }
  if (transposed) sgemm_kblocked(CblasNoTrans, CblasTrans, N, OC, C, inp, C, w, C, beta, out, OC);
  else sgemm_kblocked(CblasNoTrans, CblasNoTrans, N, OC, C, inp, C, w, OC, beta, out, OC);
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode cpu_matmul_backward(float *dinp, float *dw, float *dbias, const float *dout, const float *inp, const float *w, int N, int C, int OC, PetscBool transposed)
{
  PetscFunctionBegin;
  if (N <= 0 || OC <= 0) PetscFunctionReturn(PETSC_SUCCESS);
  if (dinp) {
    if (transposed) sgemm_kblocked(CblasNoTrans, CblasNoTrans, N, C, OC, dout, OC, w, C, 1.0f, dinp, C);
    else sgemm_kblocked(CblasNoTrans, CblasTrans, N, C, OC, dout, OC, w, OC, 1.0f, dinp, C);
  }
  if (dw) {
    if (transposed) sgemm_kblocked(CblasTrans, CblasNoTrans, OC, C, N, dout, OC, inp, C, 1.0f, dw, C);
    else sgemm_kblocked(CblasTrans, CblasNoTrans, C, OC, N, inp, C, dout, OC, 1.0f, dw, OC);
  }
  if (dbias) PetscCall(cpu_colsum_accumulate(dbias, dout, N, OC));
  PetscFunctionReturn(PETSC_SUCCESS);
}
