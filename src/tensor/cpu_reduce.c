/* cpu backend: the two-level column sum shared by every reduction over token
 * rows (LayerNorm dw/db, matmul dbias). Rows are summed in fixed blocks of
 * CPU_ROW_BLOCK; the block partials are then added in block order, in double.
 * Neither level depends on the thread count, so the bits never do either. */
#include "cpu_ops.h"

#define RED_CHUNK 64 /* columns per task in the second level */

void cpu_partials_reduce(float *dst, const float *part, int nblk, int C)
{
  int nchunk = (C + RED_CHUNK - 1) / RED_CHUNK;

#pragma omp parallel for schedule(static) if ((size_t)nblk * C > CPU_OMP_MIN)
  for (int k = 0; k < nchunk; k++) {
    int    c0 = k * RED_CHUNK, w = c0 + RED_CHUNK < C ? RED_CHUNK : C - c0;
    double acc[RED_CHUNK];

    for (int j = 0; j < w; j++) acc[j] = dst[c0 + j];
    for (int b = 0; b < nblk; b++) {
      const float *restrict p = part + (size_t)b * C + c0;
      for (int j = 0; j < w; j++) acc[j] += p[j];
    }
    for (int j = 0; j < w; j++) dst[c0 + j] = (float)acc[j];
  }
}

PetscErrorCode cpu_colsum_accumulate(float *dst, const float *src, int N, int C)
{
  int    nblk = (N + CPU_ROW_BLOCK - 1) / CPU_ROW_BLOCK;
  float *part;

  PetscFunctionBegin;
  if (N <= 0) PetscFunctionReturn(PETSC_SUCCESS);
  PetscCall(PetscMalloc1((size_t)nblk * C, &part));
#pragma omp parallel for schedule(static) if ((size_t)N * C > CPU_OMP_MIN)
  for (int b = 0; b < nblk; b++) {
    int n0 = b * CPU_ROW_BLOCK, n1 = n0 + CPU_ROW_BLOCK < N ? n0 + CPU_ROW_BLOCK : N;
    float *restrict p = part + (size_t)b * C;
    for (int c = 0; c < C; c++) p[c] = 0.0f;
    for (int n = n0; n < n1; n++) {
      const float *restrict s = src + (size_t)n * C;
      for (int c = 0; c < C; c++) p[c] += s[c];
    }
  }
  cpu_partials_reduce(dst, part, nblk, C);
  PetscCall(PetscFree(part));
  PetscFunctionReturn(PETSC_SUCCESS);
}
