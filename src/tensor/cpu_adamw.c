/* cpu backend: the optimizer's element-wise update and the squared norm
 * used for global-norm gradient clipping. */
#include "cpu_ops.h"
#include <math.h>

#define SUMSQ_BLOCK 8192 /* elements per partial: fixed, so the sum is thread-count independent */
#define SUMSQ_LANES 8

PetscErrorCode cpu_sumsq(double *out, const float *x, size_t n)
{
  size_t  nblk = (n + SUMSQ_BLOCK - 1) / SUMSQ_BLOCK;
  double *part, s = 0.0;

  PetscFunctionBegin;
  PetscCall(PetscMalloc1(nblk + 1, &part));
#pragma omp parallel for schedule(static) if (n > CPU_OMP_MIN)
  for (size_t b = 0; b < nblk; b++) {
    const float *restrict xb = x + b * SUMSQ_BLOCK;
    size_t                m  = n - b * SUMSQ_BLOCK < SUMSQ_BLOCK ? n - b * SUMSQ_BLOCK : SUMSQ_BLOCK, i0;
    double                lane[SUMSQ_LANES] = {0}, t = 0.0;

    for (i0 = 0; i0 + SUMSQ_LANES <= m; i0 += SUMSQ_LANES)
      for (int j = 0; j < SUMSQ_LANES; j++) lane[j] += (double)xb[i0 + j] * xb[i0 + j];
    for (int j = 0; i0 + j < m; j++) lane[j] += (double)xb[i0 + j] * xb[i0 + j];
    for (int j = 0; j < SUMSQ_LANES; j++) t += lane[j];
    part[b] = t;
  }
  for (size_t b = 0; b < nblk; b++) s += part[b];
  *out = s;
  PetscCall(PetscFree(part));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* The operation sequence of torch.optim.AdamW's single-tensor CPU path
 * (mul_, lerp_, mul_/addcmul_, sqrt/div/add_, addcdiv_) with its scalars
 * formed in double and used in float: algebraically the formula in tensor.h,
 * rounded the way PyTorch rounds it, so golden AdamW steps agree closely. */
PetscErrorCode cpu_adamw(float *restrict p, const float *restrict g, float *restrict m, float *restrict v, size_t n,
                         float lr, float b1, float b2, float eps, float wd, int t, float gs)
{
  double bc1   = 1.0 - pow((double)b1, t), bc2 = 1.0 - pow((double)b2, t);
  float  decay = (float)(1.0 - (double)lr * wd);
  float  w1    = (float)(1.0 - (double)b1), w2 = (float)(1.0 - (double)b2);
  float  step  = (float)((double)lr / bc1), bc2s = (float)sqrt(bc2);

  PetscFunctionBegin;
  PetscCheck(t >= 1, PETSC_COMM_SELF, PETSC_ERR_ARG_OUTOFRANGE, "adamw: step %d must be >= 1", t);
#pragma omp parallel for simd schedule(static) if (n > CPU_OMP_MIN)
  for (size_t i = 0; i < n; i++) {
    float gi = g[i] * gs, mi = m[i], denom;

    p[i] *= decay;
    mi    = w1 < 0.5f ? mi + w1 * (gi - mi) : gi - (gi - mi) * (1.0f - w1); /* lerp */
    v[i]  = v[i] * b2 + w2 * gi * gi;
    m[i]  = mi;
    denom = sqrtf(v[i]) / bc2s + eps;
    p[i] += -step * mi / denom;
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}
