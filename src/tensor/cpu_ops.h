/* Private to the cpu backend: the kernels that fill the ops table, and two
 * helpers that several kernel files share (a vectorisable exp and the fixed
 * block size that keeps reductions independent of the thread count). */
#ifndef RLFUSE_CPU_OPS_H
#define RLFUSE_CPU_OPS_H

#include "sys.h"
#include "tensor.h"
#include <stdint.h>
#include <cblas.h>
#include <string.h>
#ifdef _OPENMP
  #include <omp.h>
#endif

static inline int cpu_max_threads(void)
{
#ifdef _OPENMP
  return omp_get_max_threads();
#else
  return 1;
#endif
}

static inline int cpu_thread_num(void)
{
#ifdef _OPENMP
  return omp_get_thread_num();
#else
  return 0;
#endif
}

/* Rows per partial sum in every reduction over token rows. A partial never
 * spans a block boundary and partials are added in block order, so the
 * result depends on N only, never on how OpenMP shares the blocks out. */
#define CPU_ROW_BLOCK 64

/* Below this many elements a pointwise op is not worth waking the team for. */
#define CPU_OMP_MIN 32768

/* exp(x) in plain float arithmetic (Cephes expf: Cody-Waite reduction, degree
 * 5 polynomial, about 1 ulp). glibc's expf is not vectorised without
 * -ffast-math, which softmax, GELU and the log-softmax over the vocabulary
 * cannot afford; this one is, and every lane (vector or scalar tail) gives
 * the same bits, which keeps the KV-cache path equal to the full forward.
 * Inputs are clamped to the normal range; exp(-87.3) stands in for 0, NaN
 * gives NaN. */
static inline float cpu_expf(float x)
{
  const float big = 12582912.0f; /* 1.5*2^23: adding it rounds to an integer */
  float       n, r, p, s;
  int32_t     bits;

  const float in = x;

  /* NaN would reach the float-to-int conversion below (undefined); it is
   * reduced as 0 and returned as itself, so a diverged run still sees NaN */
  x = x != x ? 0.0f : x;
  x = x < -87.3f ? -87.3f : x;
  x = x > 88.3f ? 88.3f : x;
  n = (x * 1.44269504088896341f + big) - big;
  r = x - n * 0.693359375f;
  r = r + n * 2.12194440e-4f;
  p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  bits = ((int32_t)n + 127) << 23;
  memcpy(&s, &bits, sizeof s);
  return in != in ? in : p * s;
}

/* dst[c] += sum over row blocks of part[blk][c], blocks in order, in double. */
void cpu_partials_reduce(float *dst, const float *part, int nblk, int C);
/* dst[c] += sum_n src[n*C + c], deterministic (row blocks, then cpu_partials_reduce). */
PetscErrorCode cpu_colsum_accumulate(float *dst, const float *src, int N, int C);

PetscErrorCode cpu_alloc(size_t bytes, void **ptr);
PetscErrorCode cpu_free(void *ptr);
PetscErrorCode cpu_grow(void **ptr, size_t bytes);
PetscErrorCode cpu_memcpy(void *dst, const void *src, size_t bytes);
PetscErrorCode cpu_zero(void *ptr, size_t bytes);
PetscErrorCode cpu_sync(void);

PetscErrorCode cpu_encoder_forward(float *out, const int *tok, const int *pos, const float *wte, const float *wpe,
                                   int N, int C, int v0, int Vl);
PetscErrorCode cpu_encoder_backward(float *dwte, float *dwpe, const float *dout, const int *tok, const int *pos, int N,
                                    int C, int v0, int Vl);

PetscErrorCode cpu_layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *w,
                                     const float *b, int N, int C);
PetscErrorCode cpu_layernorm_backward(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                                      const float *w, const float *mean, const float *rstd, int N, int C);

/* Longest K sum handed to one sgemm call: below OpenBLAS's GEMM_Q (320 on
 * this machine's kernel), so OpenBLAS never re-splits it and the bits do not
 * depend on its thread count (checked by test_ops). */
#define CPU_KBLOCK 256
void cpu_sgemm_kblocked(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int M, int N, int K, float alpha, const float *A,
                        int lda, const float *B, int ldb, float beta, float *Cm, int ldc);
void           cpu_blas_init(void);
PetscErrorCode cpu_matmul_forward(float *out, const float *inp, const float *w, const float *bias, int N, int C, int OC,
                                  PetscBool transposed);
PetscErrorCode cpu_matmul_forward_rows(float *out, const float *inp, const float *w, const float *bias, int N, int C,
                                       int OC, PetscBool transposed);
PetscErrorCode cpu_matmul_backward(float *dinp, float *dw, float *dbias, const float *dout, const float *inp,
                                   const float *w, int N, int C, int OC, PetscBool transposed);

PetscErrorCode cpu_attention_forward(float *out, float *lse, const float *qkv, int B, int T, int C, int NH, int NKV);
PetscErrorCode cpu_attention_backward(float *dqkv, const float *dout, const float *qkv, const float *out,
                                      const float *lse, int B, int T, int C, int NH, int NKV);
PetscErrorCode cpu_attention_cached(float *out, float *kcache, float *vcache, const float *qkv, const int *slot,
                                    const int *pos, int N, int Tmax, int C, int NH, int NKV);

PetscErrorCode cpu_rmsnorm_forward(float *out, float *rstd, const float *inp, const float *w, int N, int C, float eps);
PetscErrorCode cpu_rmsnorm_backward(float *dinp, float *dw, const float *dout, const float *inp, const float *w,
                                    const float *rstd, int N, int C);
PetscErrorCode cpu_rope(float *qkv, const int *pos, const float *inv_freq, int N, int NH, int NKV, int hd, int inverse);
PetscErrorCode cpu_qk_norm_forward(float *qkv, float *in, float *rstd, const float *wq, const float *wk, int N, int NH,
                                   int NKV, int hd, float eps);
PetscErrorCode cpu_qk_norm_backward(float *dqkv, float *dwq, float *dwk, const float *in, const float *rstd,
                                    const float *wq, const float *wk, int N, int NH, int NKV, int hd);
PetscErrorCode cpu_swiglu_forward(float *out, const float *gu, int N, int F);
PetscErrorCode cpu_swiglu_backward(float *dgu, const float *gu, const float *dout, int N, int F);

PetscErrorCode cpu_gelu_forward(float *out, const float *inp, size_t n);
PetscErrorCode cpu_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n);
PetscErrorCode cpu_residual_forward(float *out, const float *a, const float *b, size_t n);
PetscErrorCode cpu_axpy(float *y, float alpha, const float *x, size_t n);
PetscErrorCode cpu_scale(float *x, float alpha, size_t n);

PetscErrorCode cpu_logprob_forward(float *logprob, float *lse, float *entropy, const float *logits, const int *target,
                                   float inv_temp, const int *mask_off, const int *mask_ids, int N, int V);
PetscErrorCode cpu_logprob_backward(float *dlogits, const float *logits, const float *lse, const int *target,
                                    const float *dlogprob, float inv_temp, const int *mask_off, const int *mask_ids,
                                    int N, int V);
PetscErrorCode cpu_logprob_stats(double *stats, const float *logits, const int *target, float inv_temp,
                                 const int *mask_off, const int *mask_ids, int N, int Vl, int v0);
PetscErrorCode cpu_logprob_backward_shard(float *dlogits, const float *logits, const float *lse, const int *target,
                                          const float *dlogprob, float inv_temp, const int *mask_off,
                                          const int *mask_ids, int N, int Vl, int v0);

PetscErrorCode cpu_sample(int *token, float *logprob, int *nallowed, int *boundary, int *allowed, void *work,
                          const float *logits, const int *row, const int *sample_id, const int *position,
                          const int *ban_eos, const BackendSampleCfg *cfg, int N, int V);
size_t         cpu_sample_work(int N, int V);

PetscErrorCode cpu_sumsq(double *out, const float *x, size_t n);
PetscErrorCode cpu_adamw(float *p, const float *g, float *m, float *v, size_t n, float lr, float b1, float b2,
                         float eps, float wd, int t, float gs);

#endif
