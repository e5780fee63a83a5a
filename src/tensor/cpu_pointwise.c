/* cpu backend: the element-wise ops (embedding lookup and its scatter, GELU,
 * residual add, axpy, scale). They are memory bound, so each is one pass,
 * threaded only when the array is large enough to pay for the fork. */
#include "cpu_ops.h"
#include <math.h>

/* Channels per task in the encoder scatter: 16 floats is one cache line, so
 * two threads never write the same line of dwte/dwpe. */
#define ENC_CHUNK 16

PetscErrorCode cpu_encoder_forward(float *out, const int *tok, const int *pos, const float *wte, const float *wpe,
                                   int N, int C, int v0, int Vl)
{
  PetscFunctionBegin;
#pragma omp parallel for schedule(static) if ((size_t)N * C > CPU_OMP_MIN)
  for (int n = 0; n < N; n++) {
    PetscBool             in = tok[n] >= v0 && tok[n] < v0 + Vl ? PETSC_TRUE : PETSC_FALSE;
    const float *restrict te = in ? wte + (size_t)(tok[n] - v0) * C : NULL;
    const float *restrict pe = wpe ? wpe + (size_t)pos[n] * C : NULL;
    float *restrict       o  = out + (size_t)n * C;
    for (int c = 0; c < C; c++) o[c] = (te ? te[c] : 0.0f) + (pe ? pe[c] : 0.0f);
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Rows with the same token add into the same row of dwte, so threads split
 * the channels, not the rows: each element is summed by one thread in row
 * order, which is race free and gives the same bits for any thread count. */
static void encoder_scatter(float *dtab, const float *dout, const int *idx, int N, int C, int v0, int Vl)
{
  int nchunk = (C + ENC_CHUNK - 1) / ENC_CHUNK;

#pragma omp parallel for schedule(static) if ((size_t)N * C > CPU_OMP_MIN)
  for (int k = 0; k < nchunk; k++) {
    int c0 = k * ENC_CHUNK, c1 = c0 + ENC_CHUNK < C ? c0 + ENC_CHUNK : C;
    for (int n = 0; n < N; n++) {
      if (idx[n] < v0 || idx[n] >= v0 + Vl) continue;
      float *restrict       d = dtab + (size_t)(idx[n] - v0) * C;
      const float *restrict g = dout + (size_t)n * C;
      for (int c = c0; c < c1; c++) d[c] += g[c];
    }
  }
}

PetscErrorCode cpu_encoder_backward(float *dwte, float *dwpe, const float *dout, const int *tok, const int *pos, int N,
                                    int C, int v0, int Vl)
{
  PetscFunctionBegin;
  if (dwte) encoder_scatter(dwte, dout, tok, N, C, v0, Vl);
  if (dwpe) encoder_scatter(dwpe, dout, pos, N, C, 0, INT32_MAX);
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* out may alias inp (and a residual's out may alias a or b): the loops are
 * element-wise, so `omp simd` is still correct and no restrict is promised. */

/* GPT-2's gelu_new: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), with
 * tanh(u) = 1 - 2/(exp(2u) + 1) so that the loop vectorises (cpu_expf). */
#define GELU_K 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_A 0.044715f

static inline float gelu_tanh(float x)
{
  float u = GELU_K * (x + GELU_A * x * x * x);
  return 1.0f - 2.0f / (cpu_expf(2.0f * u) + 1.0f);
}

PetscErrorCode cpu_gelu_forward(float *out, const float *inp, size_t n)
{
  PetscFunctionBegin;
#pragma omp parallel for simd schedule(static) if (n > CPU_OMP_MIN)
  for (size_t i = 0; i < n; i++) {
    float x = inp[i];
    out[i]  = 0.5f * x * (1.0f + gelu_tanh(x));
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode cpu_gelu_backward(float *restrict dinp, const float *restrict inp, const float *restrict dout, size_t n)
{
  PetscFunctionBegin;
#pragma omp parallel for simd schedule(static) if (n > CPU_OMP_MIN)
  for (size_t i = 0; i < n; i++) {
    float x    = inp[i];
    float th   = gelu_tanh(x);
    float sech = 1.0f - th * th;
    float grad = 0.5f * (1.0f + th) + 0.5f * x * sech * GELU_K * (1.0f + 3.0f * GELU_A * x * x);
    dinp[i] += dout[i] * grad;
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode cpu_residual_forward(float *out, const float *a, const float *b, size_t n)
{
  PetscFunctionBegin;
#pragma omp parallel for simd schedule(static) if (n > CPU_OMP_MIN)
  for (size_t i = 0; i < n; i++) out[i] = a[i] + b[i];
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode cpu_axpy(float *restrict y, float alpha, const float *restrict x, size_t n)
{
  PetscFunctionBegin;
#pragma omp parallel for simd schedule(static) if (n > CPU_OMP_MIN)
  for (size_t i = 0; i < n; i++) y[i] += alpha * x[i];
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode cpu_scale(float *x, float alpha, size_t n)
{
  PetscFunctionBegin;
#pragma omp parallel for simd schedule(static) if (n > CPU_OMP_MIN)
  for (size_t i = 0; i < n; i++) x[i] *= alpha;
  PetscFunctionReturn(PETSC_SUCCESS);
}
