/* cpu backend: the linear layers, through OpenBLAS sgemm.
 *
 * Threading. Debian's libopenblas0 resolves to the *pthread* build
 * (/etc/alternatives/libopenblas.so.0 -> openblas-pthread/, priority 100; the
 * openmp build is a separate package, not installed here). So OpenBLAS runs
 * its own pool of OPENBLAS_NUM_THREADS (default: all cores) beside the OpenMP
 * team. The two never run at once because sgemm is only called here, outside
 * any parallel region; called from inside one, every OpenMP thread would
 * start a full OpenBLAS pool and the machine would be oversubscribed n^2.
 * Both pools spin briefly after their work before sleeping; on a loaded
 * node set OMP_WAIT_POLICY=passive or OPENBLAS_NUM_THREADS to share cores.
 *
 * sgemm splits M and N across threads, never the K sum, so dinp and dW are
 * independent of the thread count; dbias is our own blocked column sum. */
#include "cpu_ops.h"
#include <cblas.h>

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
  if (transposed) cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, OC, C, 1.0f, inp, C, w, C, beta, out, OC);
  else cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, OC, C, 1.0f, inp, C, w, OC, beta, out, OC);
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode cpu_matmul_backward(float *dinp, float *dw, float *dbias, const float *dout, const float *inp, const float *w, int N, int C, int OC, PetscBool transposed)
{
  PetscFunctionBegin;
  if (N <= 0 || OC <= 0) PetscFunctionReturn(PETSC_SUCCESS);
  if (dinp) {
    if (transposed) cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, C, OC, 1.0f, dout, OC, w, C, 1.0f, dinp, C);
    else cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, C, OC, 1.0f, dout, OC, w, OC, 1.0f, dinp, C);
  }
  if (dw) {
    if (transposed) cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OC, C, N, 1.0f, dout, OC, inp, C, 1.0f, dw, C);
    else cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, C, OC, N, 1.0f, inp, C, dout, OC, 1.0f, dw, OC);
  }
  if (dbias) PetscCall(cpu_colsum_accumulate(dbias, dout, N, OC));
  PetscFunctionReturn(PETSC_SUCCESS);
}
