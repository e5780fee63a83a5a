/* cpu backend: GPT-2 LayerNorm (eps 1e-5, biased variance). Forward and
 * dinp are per row; dw and db are reduced over rows in fixed blocks
 * (cpu_reduce.c) so that they are independent of the thread count. */
#include "cpu_ops.h"
#include <math.h>

#define LN_EPS 1e-5f

PetscErrorCode cpu_layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *w,
                                     const float *b, int N, int C)
{
  PetscFunctionBegin;
#pragma omp parallel for schedule(static) if ((size_t)N * C > CPU_OMP_MIN)
  for (int n = 0; n < N; n++) {
    const float *restrict x = inp + (size_t)n * C;
    float *restrict       o = out + (size_t)n * C;
    float                 m = 0.0f, v = 0.0f, s;

    /* two passes: the one-pass E[x^2]-E[x]^2 cancels badly in float */
#pragma omp simd reduction(+ : m)
    for (int c = 0; c < C; c++) m += x[c];
    m /= C;
#pragma omp simd reduction(+ : v)
    for (int c = 0; c < C; c++) v += (x[c] - m) * (x[c] - m);
    v /= C;
    s = 1.0f / sqrtf(v + LN_EPS);
    for (int c = 0; c < C; c++) o[c] = (x[c] - m) * s * w[c] + b[c];
    if (mean) mean[n] = m;
    if (rstd) rstd[n] = s;
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode cpu_layernorm_backward(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                                      const float *w, const float *mean, const float *rstd, int N, int C)
{
  int    nblk = (N + CPU_ROW_BLOCK - 1) / CPU_ROW_BLOCK;
  float *part; /* [2][nblk][C]: block partials of dw, then of db */

  PetscFunctionBegin;
  if (N <= 0) PetscFunctionReturn(PETSC_SUCCESS);
  PetscCall(PetscMalloc1((size_t)nblk * 2 * C, &part));
#pragma omp parallel for schedule(static) if ((size_t)N * C > CPU_OMP_MIN)
  for (int blk = 0; blk < nblk; blk++) {
    int n0 = blk * CPU_ROW_BLOCK, n1 = n0 + CPU_ROW_BLOCK < N ? n0 + CPU_ROW_BLOCK : N;
    float *restrict pw = part + (size_t)blk * C;
    float *restrict pb = part + (size_t)(nblk + blk) * C;

    for (int c = 0; c < C; c++) pw[c] = pb[c] = 0.0f;
    for (int n = n0; n < n1; n++) {
      const float *restrict x  = inp + (size_t)n * C;
      const float *restrict g  = dout + (size_t)n * C;
      float *restrict       dx = dinp + (size_t)n * C;
      float                 m = mean[n], s = rstd[n], gm = 0.0f, gnm = 0.0f;

#pragma omp simd reduction(+ : gm, gnm)
      for (int c = 0; c < C; c++) {
        float dnorm = w[c] * g[c];
        gm += dnorm;
        gnm += dnorm * (x[c] - m) * s;
      }
      gm /= C;
      gnm /= C;
      for (int c = 0; c < C; c++) {
        float norm = (x[c] - m) * s;
        dx[c] += (w[c] * g[c] - gm - norm * gnm) * s;
        pw[c] += norm * g[c];
        pb[c] += g[c];
      }
    }
  }
  if (dw) cpu_partials_reduce(dw, part, nblk, C);
  if (db) cpu_partials_reduce(db, part + (size_t)nblk * C, nblk, C);
  PetscCall(PetscFree(part));
  PetscFunctionReturn(PETSC_SUCCESS);
}
