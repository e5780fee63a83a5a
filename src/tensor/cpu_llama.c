/* cpu backend: the LLaMA family's own ops. RMSNorm (dw reduced over rows in
 * fixed blocks, as LayerNorm's, so it is independent of the thread count),
 * rotary position embeddings in place on the query and key heads, and the
 * SwiGLU gate. */
/* SwiGLU's cpu_expf loops vectorize only without GCC's -ftrapping-math
 * (cpu_attention.c says why; the same bits in vector lanes as scalar, no
 * contraction under -std=c11): at 16 decode rows of SmolLM2 its scalar
 * loop was 5% of the step. Before any include, as there. */
#if defined(__GNUC__) && !defined(__clang__)
  #pragma GCC optimize("no-trapping-math")
#endif
#include "cpu_ops.h"
#include <math.h>
#include <string.h>

PetscErrorCode cpu_rmsnorm_forward(float *out, float *rstd, const float *inp, const float *w, int N, int C, float eps)
{
  PetscFunctionBegin;
#pragma omp parallel for schedule(static) if ((size_t)N * C > CPU_OMP_MIN)
  for (int n = 0; n < N; n++) {
    const float *restrict x = inp + (size_t)n * C;
    float *restrict       o = out + (size_t)n * C;
    float                 ss = 0.0f, s;

#pragma omp simd reduction(+ : ss)
    for (int c = 0; c < C; c++) ss += x[c] * x[c];
    s = 1.0f / sqrtf(ss / C + eps);
    for (int c = 0; c < C; c++) o[c] = (x[c] * s) * w[c];
    if (rstd) rstd[n] = s;
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* y = x r w with r = (mean x^2 + eps)^-1/2:
 *   dx_c = r (w_c g_c - x_c r^2 (1/C) sum_j w_j g_j x_j),  dw_c = sum_n g_c x_c r. */
PetscErrorCode cpu_rmsnorm_backward(float *dinp, float *dw, const float *dout, const float *inp, const float *w,
                                    const float *rstd, int N, int C)
{
  int    nblk = (N + CPU_ROW_BLOCK - 1) / CPU_ROW_BLOCK;
  float *part; /* [nblk][C] block partials of dw */

  PetscFunctionBegin;
  if (N <= 0) PetscFunctionReturn(PETSC_SUCCESS);
  PetscCall(PetscMalloc1((size_t)nblk * C, &part));
#pragma omp parallel for schedule(static) if ((size_t)N * C > CPU_OMP_MIN)
  for (int blk = 0; blk < nblk; blk++) {
    int n0 = blk * CPU_ROW_BLOCK, n1 = n0 + CPU_ROW_BLOCK < N ? n0 + CPU_ROW_BLOCK : N;
    float *restrict pw = part + (size_t)blk * C;

    for (int c = 0; c < C; c++) pw[c] = 0.0f;
    for (int n = n0; n < n1; n++) {
      const float *restrict x  = inp + (size_t)n * C;
      const float *restrict g  = dout + (size_t)n * C;
      float *restrict       dx = dinp + (size_t)n * C;
      float                 r = rstd[n], dot = 0.0f, k;

#pragma omp simd reduction(+ : dot)
      for (int c = 0; c < C; c++) dot += w[c] * g[c] * x[c];
      k = r * r * dot / C;
      for (int c = 0; c < C; c++) {
        dx[c] += r * (w[c] * g[c] - x[c] * k);
        pw[c] += g[c] * x[c] * r;
      }
    }
  }
  if (dw) cpu_partials_reduce(dw, part, nblk, C);
  PetscCall(PetscFree(part));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* The angle is the float product pos * inv_freq[i], as Hugging Face forms
 * it; cos and sin are taken in double and rounded once. */
PetscErrorCode cpu_rope(float *qkv, const int *pos, const float *inv_freq, int N, int NH, int NKV, int hd, int inverse)
{
  int    half = hd / 2, nrot = NH + NKV;
  size_t W    = (size_t)(NH + 2 * NKV) * hd;

  PetscFunctionBegin;
  PetscCheck(hd > 0 && hd % 2 == 0, PETSC_COMM_SELF, PETSC_ERR_ARG_SIZ, "rope: head size %d is not even", hd);
#pragma omp parallel for schedule(static) if ((size_t)N * W > CPU_OMP_MIN)
  for (int n = 0; n < N; n++) {
    float *restrict row = qkv + (size_t)n * W;

    for (int i = 0; i < half; i++) {
      float ang = (float)pos[n] * inv_freq[i];
      float c = (float)cos((double)ang), s = (float)sin((double)ang);

      if (inverse) s = -s;
      for (int h = 0; h < nrot; h++) { /* q heads, then k heads: contiguous */
        float *x = row + (size_t)h * hd, a = x[i], b = x[i + half];
        x[i]        = a * c - b * s;
        x[i + half] = b * c + a * s;
      }
    }
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Qwen3's per-head RMSNorm: head h of row n (q heads, then k heads,
 * contiguous at the start of the row) is normed alone, with RMSNorm's float
 * order (sum of squares, then (x*s)*w). */
PetscErrorCode cpu_qk_norm_forward(float *qkv, float *in, float *rstd, const float *wq, const float *wk, int N, int NH,
                                   int NKV, int hd, float eps)
{
  int    nh = NH + NKV;
  size_t W  = (size_t)(NH + 2 * NKV) * hd;

  PetscFunctionBegin;
#pragma omp parallel for schedule(static) if ((size_t)N * W > CPU_OMP_MIN)
  for (int n = 0; n < N; n++)
    for (int h = 0; h < nh; h++) {
      float *restrict       x = qkv + (size_t)n * W + (size_t)h * hd;
      const float *restrict w = h < NH ? wq : wk;
      float                 ss = 0.0f, s;

#pragma omp simd reduction(+ : ss)
      for (int c = 0; c < hd; c++) ss += x[c] * x[c];
      s = 1.0f / sqrtf(ss / hd + eps);
      if (in) {
        memcpy(in + ((size_t)n * nh + h) * hd, x, (size_t)hd * sizeof(float));
        rstd[(size_t)n * nh + h] = s;
      }
      for (int c = 0; c < hd; c++) x[c] = (x[c] * s) * w[c];
    }
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* RMSNorm's backward per head, in place on dqkv's q and k heads; the weight
 * gradients from row-block partials ([nblk][hd] for q, then for k) added in
 * block order (cpu_partials_reduce), whatever the thread count. */
PetscErrorCode cpu_qk_norm_backward(float *dqkv, float *dwq, float *dwk, const float *in, const float *rstd,
                                    const float *wq, const float *wk, int N, int NH, int NKV, int hd)
{
  int    nh = NH + NKV, nblk = (N + CPU_ROW_BLOCK - 1) / CPU_ROW_BLOCK;
  size_t W  = (size_t)(NH + 2 * NKV) * hd;
  float *part; /* [2][nblk][hd] */

  PetscFunctionBegin;
  if (N <= 0) PetscFunctionReturn(PETSC_SUCCESS);
  PetscCall(PetscMalloc1((size_t)2 * nblk * hd, &part));
#pragma omp parallel for schedule(static) if ((size_t)N * W > CPU_OMP_MIN)
  for (int blk = 0; blk < nblk; blk++) {
    int n0 = blk * CPU_ROW_BLOCK, n1 = n0 + CPU_ROW_BLOCK < N ? n0 + CPU_ROW_BLOCK : N;

    for (int c = 0; c < hd; c++) part[(size_t)blk * hd + c] = part[((size_t)nblk + blk) * hd + c] = 0.0f;
    for (int n = n0; n < n1; n++)
      for (int h = 0; h < nh; h++) {
        float *restrict       g  = dqkv + (size_t)n * W + (size_t)h * hd;
        const float *restrict x  = in + ((size_t)n * nh + h) * hd, *restrict w = h < NH ? wq : wk;
        float *restrict       pw = part + ((size_t)(h < NH ? 0 : nblk) + blk) * hd;
        float                 r = rstd[(size_t)n * nh + h], dot = 0.0f, k;

#pragma omp simd reduction(+ : dot)
        for (int c = 0; c < hd; c++) dot += w[c] * g[c] * x[c];
        k = r * r * dot / hd;
        for (int c = 0; c < hd; c++) {
          float gc = g[c];
          pw[c] += gc * x[c] * r;
          g[c] = r * (w[c] * gc - x[c] * k);
        }
      }
  }
  if (dwq) cpu_partials_reduce(dwq, part, nblk, hd);
  if (dwk) cpu_partials_reduce(dwk, part + (size_t)nblk * hd, nblk, hd);
  PetscCall(PetscFree(part));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static inline float sigmoidf_(float x) { return 1.0f / (1.0f + cpu_expf(-x)); }

PetscErrorCode cpu_swiglu_forward(float *out, const float *gu, int N, int F)
{
  PetscFunctionBegin;
#pragma omp parallel for schedule(static) if ((size_t)N * F > CPU_OMP_MIN)
  for (int n = 0; n < N; n++) {
    const float *restrict g = gu + (size_t)n * 2 * F, *restrict u = g + F;
    float *restrict       o = out + (size_t)n * F;
    for (int j = 0; j < F; j++) o[j] = g[j] * sigmoidf_(g[j]) * u[j];
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* d silu(g)/dg = s (1 + g (1 - s)), s = sigmoid(g). */
PetscErrorCode cpu_swiglu_backward(float *dgu, const float *gu, const float *dout, int N, int F)
{
  PetscFunctionBegin;
#pragma omp parallel for schedule(static) if ((size_t)N * F > CPU_OMP_MIN)
  for (int n = 0; n < N; n++) {
    const float *restrict g = gu + (size_t)n * 2 * F, *restrict u = g + F, *restrict d = dout + (size_t)n * F;
    float *restrict       dg = dgu + (size_t)n * 2 * F, *restrict du = dg + F;
    for (int j = 0; j < F; j++) {
      float s = sigmoidf_(g[j]);
      dg[j] += d[j] * u[j] * s * (1.0f + g[j] * (1.0f - s));
      du[j] += d[j] * g[j] * s;
    }
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}
