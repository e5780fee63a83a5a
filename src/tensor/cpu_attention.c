/* cpu backend: causal self-attention, the training forward/backward and the
 * KV-cache path used by generation.
 *
 * Training forward and backward (the log-sum-exp of each row: no T x T array). Per-row
 * dot products over a head dimension of 32-64 reach only 15-25 GFLOP/s, so
 * each (b,h) pair is done as a few sgemm calls on the head's strided q, k, v
 * (OpenBLAS, single-threaded, one pair or query block per OpenMP thread, as
 * in cpu_matmul.c). Queries go in blocks of ATT_QBLOCK rows, and a block only
 * multiplies the keys it can see (0..t1), which skips most of the masked
 * upper triangle. A block's scores are a panel of ATT_QBLOCK x T floats in
 * the thread's scratch (linear in T: at T = 4096 one MiB a thread; the
 * backward's two panels stack the blocks of a kv head's G query heads, 2G
 * MiB), so its softmax is exact in one pass, with the former attention's
 * bits, and needs no online rescaling; the forward keeps only the
 * log-sum-exp of each row, and the backward recomputes the block's
 * probabilities from it (one more sgemm per block), adding the block's dK
 * and dV into the keys it saw. Every sgemm's
 * shape depends on T and the block only, and sums longer than CPU_KBLOCK are
 * cut into fixed blocks added in order (see cpu_matmul.c: OpenBLAS's own K
 * split is not fixed), so the bits do not depend on the thread count.
 *
 * The row kernels (softmax over fixed lanes) are in cpu_attention_rows.h,
 * shared with the tests' T x T reference (regression/ref_attention.c).
 *
 * KV-cache path. One query row at a time, with its keys transposed in a
 * per-thread scratch (once per key/value head, for all the query heads that
 * share it) so the vector lanes run over key positions and each
 * lane sums its dot product serially in d: no horizontal reductions, and the
 * same bits whatever the vector width or alignment. With AVX-512 the keys
 * move in 16 x 16 blocks transposed in registers, and heads of 64 or 128
 * sum their values in registers: the same bits in half the time (perf,
 * SmolLM2's shape, 16 sequences on one Zen 4 thread: 8.8% of the step's
 * samples before, 4.4% after; docs/benchmarks.md). Its sgemm-free
 * arithmetic agrees with the training forward to rounding, not bit for
 * bit. */
/* GCC keeps a loop of cpu_expf scalar under its default -ftrapping-math
 * (the clamps are ordered compares, which may trap on NaN, so it does not
 * if-convert them); nothing here runs with FP traps enabled, and without
 * them the same arithmetic runs in vector lanes with the same bits (no
 * contraction under -std=c11; all 2^32 float inputs checked). Vectorized,
 * the tiled backward runs about a fifth faster at T = 1024. Before any
 * include: the option must also hold where cpu_expf is defined, or GCC
 * does not vectorize. */
#if defined(__GNUC__) && !defined(__clang__)
  #pragma GCC optimize("no-trapping-math")
#endif
#include "cpu_attention_rows.h"
#include "cpu_ops.h"
#include <cblas.h>
#include <math.h>
#if defined(__AVX512F__)
  #include <immintrin.h>
#endif


static inline int att_ld(int T) { return (T + ATT_LANES - 1) / ATT_LANES * ATT_LANES; }

/* s[j] = sum_d a[d] * BT[d*ld + j] for j < L. Whole blocks of ATT_LANES
 * columns are computed (ld >= att_ld(L) columns exist, finite), and only
 * j < L stored. */
static inline void att_dots(float *restrict s, const float *restrict a, const float *restrict BT, int ld, int L, int hs)
{
  for (int j0 = 0; j0 < L; j0 += ATT_LANES) {
    float acc[ATT_LANES] = {0};
    int   w              = L - j0 < ATT_LANES ? L - j0 : ATT_LANES;

    for (int d = 0; d < hs; d++) {
      const float *restrict b  = BT + (size_t)d * ld + j0;
      float                 ad = a[d];
      for (int j = 0; j < ATT_LANES; j++) acc[j] += ad * b[j];
    }
    for (int j = 0; j < w; j++) s[j0 + j] = acc[j];
  }
}

#if defined(__AVX512F__)
/* o[0..16*NB) = sum_j p[j] * v_j in j order, the sums held in NB registers
 * (the compiler kept them in memory, a load and a store per product): the
 * same roundings, a product then a sum, as att_row's loop. */
static inline __attribute__((always_inline)) void att_pv_regs(float *restrict o, const float *restrict p, int L,
                                                              const float *restrict v, size_t ldv, const int NB)
{
  __m512 acc[8];

  for (int b = 0; b < NB; b++) acc[b] = _mm512_setzero_ps();
  for (int j = 0; j < L; j++) {
    __m512 pj = _mm512_set1_ps(p[j]);
    for (int b = 0; b < NB; b++)
      acc[b] = _mm512_add_ps(acc[b], _mm512_mul_ps(pj, _mm512_loadu_ps(v + (size_t)j * ldv + 16 * b)));
  }
  for (int b = 0; b < NB; b++) _mm512_storeu_ps(o + 16 * b, acc[b]);
}

/* dst[c * ldd + i] = src[i * lds + c] for i < 16, c < 16, with rows i >= w
 * of src read as zeros: a 16 x 16 block transposed in registers (pairs of
 * rows interleaved, then pairs of pairs, then the 128-bit quarters). */
static inline void att_transpose16(float *restrict dst, size_t ldd, const float *restrict src, size_t lds, int w)
{
  __m512 r[16], t[16];

  for (int i = 0; i < 16; i++) r[i] = i < w ? _mm512_loadu_ps(src + (size_t)i * lds) : _mm512_setzero_ps();
  for (int i = 0; i < 8; i++) {
    t[2 * i]     = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int g = 0; g < 4; g++) { /* r[4g + k]: rows 4g..4g+3 at column 4L + k of each quarter L */
    __m512d a = _mm512_castps_pd(t[4 * g]), b = _mm512_castps_pd(t[4 * g + 1]), c = _mm512_castps_pd(t[4 * g + 2]),
            d    = _mm512_castps_pd(t[4 * g + 3]);
    r[4 * g]     = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
    r[4 * g + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
    r[4 * g + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
    r[4 * g + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
  }
  for (int k = 0; k < 4; k++) {
    __m512 a = _mm512_shuffle_f32x4(r[k], r[4 + k], 0x88), b = _mm512_shuffle_f32x4(r[k], r[4 + k], 0xdd);
    __m512 c = _mm512_shuffle_f32x4(r[8 + k], r[12 + k], 0x88), d = _mm512_shuffle_f32x4(r[8 + k], r[12 + k], 0xdd);
    _mm512_storeu_ps(dst + (size_t)k * ldd, _mm512_shuffle_f32x4(a, c, 0x88));
    _mm512_storeu_ps(dst + (size_t)(4 + k) * ldd, _mm512_shuffle_f32x4(b, d, 0x88));
    _mm512_storeu_ps(dst + (size_t)(8 + k) * ldd, _mm512_shuffle_f32x4(a, c, 0xdd));
    _mm512_storeu_ps(dst + (size_t)(12 + k) * ldd, _mm512_shuffle_f32x4(b, d, 0xdd));
  }
}
#endif

/* One query row of one head: p[0..L) = softmax(scale * q.k_j), o = sum_j p_j v_j.
 * KT is the head's keys transposed ([hs][ld]); v rows are ldv apart. */
static inline void att_row(float *restrict o, float *restrict p, const float *restrict q, const float *restrict KT,
                           int ld, int L, const float *restrict v, size_t ldv, int hs, float scale)
{
  float m = -INFINITY, inv;

  att_dots(p, q, KT, ld, L, hs);
  for (int j = 0; j < L; j++) {
    p[j] *= scale;
    m = p[j] > m ? p[j] : m;
  }
  for (int j = 0; j < L; j++) p[j] = cpu_expf(p[j] - m);
  inv = 1.0f / att_lane_sum(p, NULL, L);
  for (int j = 0; j < L; j++) p[j] *= inv;
#if defined(__AVX512F__)
  if (hs == 64) { /* SmolLM2's, GPT-2's and Qwen2.5-0.5B's heads */
    att_pv_regs(o, p, L, v, ldv, 4);
    return;
  }
  if (hs == 128) {
    att_pv_regs(o, p, L, v, ldv, 8);
    return;
  }
#endif
  for (int d = 0; d < hs; d++) o[d] = 0.0f;
  for (int j = 0; j < L; j++) {
    const float *restrict vj = v + (size_t)j * ldv;
    float                 pj = p[j];
    for (int d = 0; d < hs; d++) o[d] += pj * vj[d];
  }
}

/* p[j] = exp(p[j] - l) and d[j] = p[j] (d[j] - D) scale, j < n: a row of
 * the backward's P and dS from the scores and dP. */
static void att_ds_row(float *restrict p, float *restrict d, int n, float l, float D, float scale)
{
  for (int j = 0; j < n; j++) {
    p[j] = cpu_expf(p[j] - l);
    d[j] = p[j] * (d[j] - D) * scale;
  }
}

/* Query heads NH over NKV key/value heads: NKV divides NH, hd = C/NH (C
 * the query width, which Qwen3's head_dim makes other than the residual's). */
static PetscErrorCode att_check_heads(int C, int NH, int NKV)
{
  PetscFunctionBegin;
  PetscCheck(NH > 0 && C % NH == 0, PETSC_COMM_SELF, PETSC_ERR_ARG_SIZ,
             "attention: query width %d is not a multiple of n_head %d", C, NH);
  PetscCheck(NKV > 0 && NH % NKV == 0, PETSC_COMM_SELF, PETSC_ERR_ARG_SIZ,
             "attention: n_kv_head %d does not divide n_head %d", NKV, NH);
  PetscFunctionReturn(PETSC_SUCCESS);
}


/* Per (b, h, query block t0..t1), one thread: S = scale * Q K^T over keys
 * 0..t1 in the thread's panel, softmax row by row (the reference's
 * arithmetic, so out has its bits), lse [B,NH,T] the rows' log-sum-exp
 * (natural log, of the scaled scores: P_tj = exp(S_tj - lse_t)), then
 * O = P V. lse may be NULL (a forward that no backward follows). */
PetscErrorCode cpu_attention_forward(float *out, float *lse, const float *qkv, int B, int T, int C, int NH, int NKV)
{
  int hs = NH > 0 ? C / NH : 0, nqb = (T + ATT_QBLOCK - 1) / ATT_QBLOCK, Ckv = NKV > 0 && NH > 0 ? C / NH * NKV : 0,
      C3 = C + 2 * Ckv, grp = NKV > 0 ? NH / NKV : 1;
  float  scale = 1.0f / sqrtf((float)hs), *scratch;
  size_t per   = (size_t)(T < ATT_QBLOCK ? T : ATT_QBLOCK) * T;

  PetscFunctionBegin;
  PetscCall(att_check_heads(C, NH, NKV));
  if (B <= 0 || T <= 0) PetscFunctionReturn(PETSC_SUCCESS);
  PetscCall(PetscMalloc1(per * cpu_max_threads(), &scratch));
#pragma omp parallel for collapse(3) schedule(dynamic)
  for (int b = 0; b < B; b++)
    for (int h = 0; h < NH; h++)
      for (int qb = 0; qb < nqb; qb++) {
        const float *q = qkv + (size_t)b * T * C3 + (size_t)h * hs,
                    *k = qkv + (size_t)b * T * C3 + C + (size_t)(h / grp) * hs, *v = k + Ckv;
        int          t0 = qb * ATT_QBLOCK, t1 = t0 + ATT_QBLOCK < T ? t0 + ATT_QBLOCK : T;
        float       *S = scratch + per * cpu_thread_num(), *L = lse ? lse + ((size_t)b * NH + h) * T : NULL;

        cpu_sgemm_kblocked(CblasNoTrans, CblasTrans, t1 - t0, t1, hs, scale, q + (size_t)t0 * C3, C3, k, C3, 0.0f, S,
                           T);
        for (int t = t0; t < t1; t++) {
          float *p = S + (size_t)(t - t0) * T, l = att_softmax_row(p, t);
          for (int j = t + 1; j < t1; j++) p[j] = 0.0f;
          if (L) L[t] = l;
        }
        cpu_sgemm_kblocked(CblasNoTrans, CblasNoTrans, t1 - t0, hs, t1, 1.0f, S, T, v, C3, 0.0f,
                           out + ((size_t)b * T + t0) * C + (size_t)h * hs, C);
      }
  PetscCall(PetscFree(scratch));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Per (b, kv head), one thread, for each query block t0..t1 in order, the
 * rows of the kv head's G query heads stacked (head by head, copies of
 * their q and dO rows), in two panels of the thread's scratch:
 * P = exp(scale * Q K^T - lse) recomputed over keys 0..t1, dP = dO V^T,
 * dS = P*(dP - D)*scale with D_t = dO_t . O_t (= sum_j P_tj dP_tj), zeros
 * above the diagonal; then each head's dQ += dS K, and dK[0..t1) += dS^T Q,
 * dV[0..t1) += P^T dO over the stacked rows, straight into dqkv. Stacking
 * makes each product one call over the group (its K and V packed once); a
 * key's sum runs over the query blocks in order, on one thread. */
PetscErrorCode cpu_attention_backward(float *dqkv, const float *dout, const float *qkv, const float *out,
                                      const float *lse, int B, int T, int C, int NH, int NKV)
{
  int hs = NH > 0 ? C / NH : 0, nqb = (T + ATT_QBLOCK - 1) / ATT_QBLOCK, Ckv = NKV > 0 && NH > 0 ? C / NH * NKV : 0,
      C3 = C + 2 * Ckv, G = NKV > 0 ? NH / NKV : 1;
  size_t rows = (size_t)G * (T < ATT_QBLOCK ? T : ATT_QBLOCK), per = 2 * rows * T + 2 * rows * hs;
  float  scale = 1.0f / sqrtf((float)hs), *scratch;

  PetscFunctionBegin;
  PetscCall(att_check_heads(C, NH, NKV));
  if (B <= 0 || T <= 0) PetscFunctionReturn(PETSC_SUCCESS);
  PetscCheck(out && lse, PETSC_COMM_SELF, PETSC_ERR_ARG_NULL,
             "attention_backward: needs the forward's output and log-sum-exp (a forward called with att NULL saved "
             "none)");
  PetscCall(PetscMalloc1(per * cpu_max_threads(), &scratch));
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; b++)
    for (int kh = 0; kh < NKV; kh++) {
      const float *k = qkv + (size_t)b * T * C3 + C + (size_t)kh * hs, *v = k + Ckv;
      float       *dk = dqkv + (size_t)b * T * C3 + C + (size_t)kh * hs, *dv = dk + Ckv;
      float       *P = scratch + per * cpu_thread_num(), *dS = P + rows * T, *Qs = dS + rows * T, *Gs = Qs + rows * hs;

      for (int qb = 0; qb < nqb; qb++) {
        int t0 = qb * ATT_QBLOCK, t1 = t0 + ATT_QBLOCK < T ? t0 + ATT_QBLOCK : T, n = t1 - t0, m = G * n;

        for (int hh = 0; hh < G; hh++) {
          const float *q = qkv + (size_t)b * T * C3 + (size_t)(kh * G + hh) * hs,
                      *g = dout + (size_t)b * T * C + (size_t)(kh * G + hh) * hs;
          for (int t = t0; t < t1; t++) {
            memcpy(Qs + ((size_t)hh * n + t - t0) * hs, q + (size_t)t * C3, (size_t)hs * sizeof(float));
            memcpy(Gs + ((size_t)hh * n + t - t0) * hs, g + (size_t)t * C, (size_t)hs * sizeof(float));
          }
        }
        cpu_sgemm_kblocked(CblasNoTrans, CblasTrans, m, t1, hs, scale, Qs, hs, k, C3, 0.0f, P, T);
        cpu_sgemm_kblocked(CblasNoTrans, CblasTrans, m, t1, hs, 1.0f, Gs, hs, v, C3, 0.0f, dS, T);
        for (int hh = 0; hh < G; hh++) {
          int          h = kh * G + hh;
          const float *L = lse + ((size_t)b * NH + h) * T, *o = out + (size_t)b * T * C + (size_t)h * hs;
          float       *dq = dqkv + (size_t)b * T * C3 + (size_t)h * hs;

          for (int t = t0; t < t1; t++) {
            size_t r = (size_t)hh * n + t - t0;
            float *restrict p = P + r * T, *restrict d = dS + r * T;
            float           D = att_lane_sum(Gs + r * hs, o + (size_t)t * C, hs);

            att_ds_row(p, d, t + 1, L[t], D, scale);
            for (int j = t + 1; j < t1; j++) p[j] = d[j] = 0.0f;
          }
          cpu_sgemm_kblocked(CblasNoTrans, CblasNoTrans, n, hs, t1, 1.0f, dS + (size_t)hh * n * T, T, k, C3, 1.0f,
                             dq + (size_t)t0 * C3, C3);
        }
        cpu_sgemm_kblocked(CblasTrans, CblasNoTrans, t1, hs, m, 1.0f, dS, T, Qs, hs, 1.0f, dk, C3);
        cpu_sgemm_kblocked(CblasTrans, CblasNoTrans, t1, hs, m, 1.0f, P, T, Gs, hs, 1.0f, dv, C3);
      }
    }
  PetscCall(PetscFree(scratch));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* KT[d * ld + j] = k[j * ldk + d] for keys j < L, by blocks of ATT_LANES
 * keys so that KT's rows are written in runs (copied key by key, a key's
 * hs values land ld apart: a cache line touched per value). With AVX-512
 * and hs divisible by 16 the blocks are transposed in registers. The last
 * block's columns past L become zeros (finite, and never stored by
 * att_dots), so the scratch needs no zeroing before. */
static inline void att_keys_transposed(float *restrict KT, int ld, const float *restrict k, size_t ldk, int L, int hs)
{
  for (int j0 = 0; j0 < L; j0 += ATT_LANES) {
    int w = L - j0 < ATT_LANES ? L - j0 : ATT_LANES;
#if defined(__AVX512F__)
    if (hs % 16 == 0) {
      for (int d0 = 0; d0 < hs; d0 += 16)
        att_transpose16(KT + (size_t)d0 * ld + j0, (size_t)ld, k + (size_t)j0 * ldk + d0, ldk, w);
      continue;
    }
#endif
    for (int d = 0; d < hs; d++) {
      for (int j = 0; j < w; j++) KT[(size_t)d * ld + j0 + j] = k[(size_t)(j0 + j) * ldk + d];
      for (int j = w; j < ATT_LANES; j++) KT[(size_t)d * ld + j0 + j] = 0.0f;
    }
  }
}

/* Query heads [h0, h1) of row r, which all read kv head kh: its keys (of
 * cache slot sl, positions 0..p) transposed into the thread's scratch
 * once, then att_row for each. */
static inline void att_cached_heads(float *out, float *scratch, const float *kcache, const float *vcache,
                                    const float *qkv, int sl, int p, int r, int kh, int h0, int h1, int Tmax, int C,
                                    int hs, int Ckv, int ld, float scale)
{
  float       *KT = scratch, *prow = KT + (size_t)hs * ld;
  size_t       s0 = (size_t)sl * Tmax * Ckv + (size_t)kh * hs, C3 = (size_t)C + 2 * (size_t)Ckv;
  const float *kb = kcache + s0;
  int          L  = p + 1;

  att_keys_transposed(KT, ld, kb, (size_t)Ckv, L, hs);
  for (int h = h0; h < h1; h++)
    att_row(out + (size_t)r * C + (size_t)h * hs, prow, qkv + r * C3 + (size_t)h * hs, KT, ld, L, vcache + s0, Ckv, hs,
            scale);
}

PetscErrorCode cpu_attention_cached(float *out, float *kcache, float *vcache, const float *qkv, const int *slot,
                                    const int *pos, int N, int Tmax, int C, int NH, int NKV)
{
  int hs = NH > 0 ? C / NH : 0, ld = att_ld(Tmax), Ckv = NKV > 0 && NH > 0 ? C / NH * NKV : 0,
      grp    = NKV > 0 ? NH / NKV : 1;
  size_t per = (size_t)hs * ld + ld, C3 = (size_t)C + 2 * (size_t)Ckv;
  float  scale = 1.0f / sqrtf((float)hs), *scratch;

  PetscFunctionBegin;
  PetscCall(att_check_heads(C, NH, NKV));
  for (int r = 0; r < N; r++)
    PetscCheck(slot[r] >= 0 && pos[r] >= 0 && pos[r] < Tmax, PETSC_COMM_SELF, PETSC_ERR_ARG_OUTOFRANGE,
               "attention_cached: row %d has slot %d position %d, outside the cache (Tmax %d)", r, slot[r], pos[r],
               Tmax);
  if (N <= 0) PetscFunctionReturn(PETSC_SUCCESS);
  /* every row's k,v must be in the cache before any row reads it: a prefill
   * row attends to the rows before it in the same call */
#pragma omp parallel for schedule(static) if ((size_t)N * C > CPU_OMP_MIN)
  for (int r = 0; r < N; r++) {
    size_t at = ((size_t)slot[r] * Tmax + pos[r]) * Ckv;
    memcpy(kcache + at, qkv + r * C3 + C, (size_t)Ckv * sizeof(float));
    memcpy(vcache + at, qkv + r * C3 + C + Ckv, (size_t)Ckv * sizeof(float));
  }
  PetscCall(
      PetscMalloc1(per * cpu_max_threads(), &scratch)); /* att_keys_transposed writes every column att_dots reads */
  /* one (row, kv head) per step: its keys transposed once for the grp
   * query heads that read them; with fewer such steps than two per thread
   * (one sequence over few kv heads), one (row, query head) per step, each
   * transposing its own copy (the same bits: att_row is the same) */
  if ((size_t)N * NKV < (size_t)2 * cpu_max_threads() && grp > 1) {
#pragma omp parallel for collapse(2) schedule(dynamic)
    for (int r = 0; r < N; r++)
      for (int h = 0; h < NH; h++)
        att_cached_heads(out, scratch + per * cpu_thread_num(), kcache, vcache, qkv, slot[r], pos[r], r, h / grp, h,
                         h + 1, Tmax, C, hs, Ckv, ld, scale);
  } else {
#pragma omp parallel for collapse(2) schedule(dynamic)
    for (int r = 0; r < N; r++)
      for (int kh = 0; kh < NKV; kh++)
        att_cached_heads(out, scratch + per * cpu_thread_num(), kcache, vcache, qkv, slot[r], pos[r], r, kh, kh * grp,
                         (kh + 1) * grp, Tmax, C, hs, Ckv, ld, scale);
  }
  PetscCall(PetscFree(scratch));
  PetscFunctionReturn(PETSC_SUCCESS);
}
