/* cpu backend: the linear layers, through OpenBLAS sgemm.
 *
 * Threading. Debian's libopenblas0 resolves to the *pthread* build, whose
 * own thread pool would run beside the OpenMP team: after each OpenMP region
 * libgomp's threads spin while the next sgemm needs the cores (measured on 2
 * cores, 10M model: 1.4x slower training than without the clash). So OpenBLAS
 * is kept single-threaded (cpu_blas_init) and each sgemm is cut into tiles
 * shared out among the OpenMP team: one pool, no oversubscription, whatever
 * OMP_WAIT_POLICY is. Tiles split rows or columns of the output, never the K
 * sum, and their widths depend on the shape alone (sgemm_tiled), so the bits
 * do not depend on the thread count.
 *
 * Determinism. OpenBLAS 0.3.21 is deterministic for a fixed thread count,
 * but its threaded driver does not reproduce the bits of its serial one: it
 * cuts the K sum into other blocks once K exceeds its GEMM_Q (a few hundred),
 * and with the Haswell kernels (OPENBLAS_CORETYPE=Haswell, set on some AMD
 * machines) even K = 64 differs (measured: 0.3.21, 1 vs 2 threads). Keeping
 * OpenBLAS at one thread (above) is what makes the bits independent of the
 * environment. We also cut every K sum ourselves into blocks of CPU_KBLOCK,
 * which OpenBLAS does not split further, and add the blocks in order into the
 * output (beta = 1). dbias is our own blocked column sum. */
#include "cpu_ops.h"
#include <cblas.h>
#include <math.h>
#include <omp.h>


/* Row-major C[M,N] = beta*C + alpha * op(A)[M,K] . op(B)[K,N], the K sum in
 * fixed blocks (see "Determinism" above). Also used by cpu_attention.c. */
void cpu_sgemm_kblocked(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int M, int N, int K, float alpha, const float *A,
                        int lda, const float *B, int ldb, float beta, float *Cm, int ldc)
{
  for (int k0 = 0; k0 < K; k0 += CPU_KBLOCK) {
    int          kb = K - k0 < CPU_KBLOCK ? K - k0 : CPU_KBLOCK;
    const float *a  = ta == CblasNoTrans ? A + k0 : A + (size_t)k0 * lda;
    const float *b  = tb == CblasNoTrans ? B + (size_t)k0 * ldb : B + k0;
    cblas_sgemm(CblasRowMajor, ta, tb, M, N, kb, alpha, a, lda, b, ldb, k0 ? 1.0f : beta, Cm, ldc);
  }
  if (K <= 0 && beta == 0.0f)
    for (int m = 0; m < M; m++) memset(Cm + (size_t)m * ldc, 0, (size_t)N * sizeof(float));
}

void openblas_set_num_threads(int);

void cpu_blas_init(void) { openblas_set_num_threads(1); }

/* The output's rows (or columns, when there are more of them) in tiles
 * whose widths are a function of the shape alone: OpenBLAS's bits for an
 * element depend on the call's extent and on the element's place in it
 * (measured, 0.3.21: Haswell/Zen kernels, slabs of ceil(M/nt) rows gave other
 * bits at 2 than at 1 thread in a third of the training's shapes), so one
 * tile per thread made the result depend on the thread count. Each call
 * packs the other operand again, so tiles are few and wide: a power of two
 * of them (whole for 2, 4, 8 threads), at most SGEMM_TILES, each at least
 * SGEMM_TILE_MIN wide, or two halves of 64 or more (so that 2 threads share
 * every product), a multiple of 16; OpenMP shares them out. At the
 * quickstart's shapes that is 2 tiles, the old cut on 2 threads (SFT step
 * 14-15 ms before and after on the 2-core test machine); a product needs
 * 16 x 256 rows or columns to use 16 threads. */
#define SGEMM_TILES    16
#define SGEMM_TILE_MIN 256
static void sgemm_tiled(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int M, int N, int K, const float *A, int lda,
                        const float *B, int ldb, float beta, float *Cm, int ldc)
{
  int by_rows = M >= N, extent = by_rows ? M : N, ntile = 1, per;

  while (2 * ntile <= SGEMM_TILES && 2 * ntile * SGEMM_TILE_MIN <= extent) ntile *= 2;
  if (ntile == 1 && extent >= 128) ntile = 2;
  per   = ((extent + ntile - 1) / ntile + 15) / 16 * 16;
  ntile = (extent + per - 1) / per;
#pragma omp parallel for schedule(static) if (ntile > 1 && (double)M * N * K > 1e6)
  for (int t = 0; t < ntile; t++) {
    int lo = t * per, hi = lo + per < extent ? lo + per : extent;
    if (by_rows) {
      const float *a = ta == CblasNoTrans ? A + (size_t)lo * lda : A + lo;
      cpu_sgemm_kblocked(ta, tb, hi - lo, N, K, 1.0f, a, lda, B, ldb, beta, Cm + (size_t)lo * ldc, ldc);
    } else {
      const float *b = tb == CblasNoTrans ? B + lo : B + (size_t)lo * ldb;
      cpu_sgemm_kblocked(ta, tb, M, hi - lo, K, 1.0f, A, lda, b, ldb, beta, Cm + lo, ldc);
    }
  }
}

/* A few rows (a decode step): sgemm packs the whole weight into panels on
 * every call, and at one row that copy, not the arithmetic, is the step
 * (perf at SmolLM2's shape: 43% of decode time in OpenBLAS's packing; at 16
 * rows still 70% of sgemm's time). Here every weight element is read once
 * from memory.
 *
 * The [OC,C] layout (nn.Linear's: the LLaMA family) takes up to SMALL_ROWS
 * rows: each output element is one dot product over C in GEMV_LANES fixed
 * partial sums, fused multiply-adds in c order, added in a fixed tree
 * (gemv_dot). Every row count up to SMALL_ROWS computes an element in that
 * same order, so a sequence's logits do not depend on how many others (up
 * to 31) share its decode step (nor on the thread count: one thread
 * computes an element); beyond SMALL_ROWS, sgemm (unless batch-invariant,
 * below: then these kernels at every row count). With AVX-512
 * the partial sums are one register, and a tile of SMALL_TILE input rows by
 * SMALL_TILE weight rows keeps its 16 partial-sum registers in registers
 * over the whole of C (a weight row is read from memory once, from L1 for
 * the other input rows); with AVX2 they are two registers and a tile is
 * AVX2_ROWS x AVX2_OUTS (measured on the 2-core AMD EPYC, one thread:
 * 1.7x faster at 1 row and 2.5x at 16 than the plain C, SmolLM2's
 * 576 -> 1536 layer); without either the same sums are formed with fmaf.
 * The [C,OC] layout (GPT-2's Conv1D) takes up to GEMV_ROWS rows, a sum over
 * c in order per output. */
#define GEMV_ROWS  4  /* [C,OC]: at most this many rows take the GEMV path */
#define SMALL_ROWS 32 /* [OC,C]: at most this many rows skip sgemm */
#define SMALL_TILE 4
#define GEMV_LANES 16

#if defined(__AVX512F__)
  #include <immintrin.h>

/* The fixed tree of gemv_dot over a register's 16 partial sums: lane j +
 * lane j+8, then +4, +2, +1. */
static inline float lanes_sum(__m512 v)
{
  __m256 h = _mm256_add_ps(_mm512_castps512_ps256(v),
                           _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1))); /* AVX512F only */
  __m128 q = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
  q        = _mm_add_ps(q, _mm_movehl_ps(q, q));
  q        = _mm_add_ss(q, _mm_shuffle_ps(q, q, 1));
  return _mm_cvtss_f32(q);
}

static inline float gemv_dot(const float *restrict a, const float *restrict b, int C)
{
  __m512 acc = _mm512_setzero_ps();
  int    c0;

  for (c0 = 0; c0 + GEMV_LANES <= C; c0 += GEMV_LANES)
    acc = _mm512_fmadd_ps(_mm512_loadu_ps(a + c0), _mm512_loadu_ps(b + c0), acc);
  if (c0 < C) {
    __mmask16 m = (__mmask16)((1u << (C - c0)) - 1);
    acc         = _mm512_mask3_fmadd_ps(_mm512_maskz_loadu_ps(m, a + c0), _mm512_maskz_loadu_ps(m, b + c0), acc, m);
  }
  return lanes_sum(acc);
}

/* out[n, o] for rows n0..n0+NR and weight rows o0..o0+no (no at most
 * SMALL_TILE), gemv_dot's sums with the tile's partial sums in registers.
 * NR is a constant at each call (small_tile), so the loops unroll and the
 * NR x SMALL_TILE sums stay in registers. */
static inline __attribute__((always_inline)) void small_tile_n(float *out, const float *inp, const float *w,
                                                               const float *bias, int n0, const int NR, int o0, int no,
                                                               int os, int C, int OC)
{
  __m512       acc[SMALL_TILE][SMALL_TILE];
  const float *x[SMALL_TILE], *wr[SMALL_TILE];
  int          c0;

  for (int j = 0; j < SMALL_TILE; j++)
    wr[j] = w + (size_t)(o0 + (j < no ? j : 0) * os) * C; /* past the end: the first again, unused */
  for (int i = 0; i < NR; i++) {
    x[i] = inp + (size_t)(n0 + i) * C;
    for (int j = 0; j < SMALL_TILE; j++) acc[i][j] = _mm512_setzero_ps();
  }
  for (c0 = 0; c0 + GEMV_LANES <= C; c0 += GEMV_LANES) {
    __m512 wv[SMALL_TILE];
    for (int j = 0; j < SMALL_TILE; j++) wv[j] = _mm512_loadu_ps(wr[j] + c0);
    for (int i = 0; i < NR; i++) {
      __m512 xv = _mm512_loadu_ps(x[i] + c0);
      for (int j = 0; j < SMALL_TILE; j++) acc[i][j] = _mm512_fmadd_ps(xv, wv[j], acc[i][j]);
    }
  }
  if (c0 < C) {
    __mmask16 m = (__mmask16)((1u << (C - c0)) - 1);
    __m512    wv[SMALL_TILE];
    for (int j = 0; j < SMALL_TILE; j++) wv[j] = _mm512_maskz_loadu_ps(m, wr[j] + c0);
    for (int i = 0; i < NR; i++) {
      __m512 xv = _mm512_maskz_loadu_ps(m, x[i] + c0);
      for (int j = 0; j < SMALL_TILE; j++) acc[i][j] = _mm512_mask3_fmadd_ps(xv, wv[j], acc[i][j], m);
    }
  }
  for (int i = 0; i < NR; i++)
    for (int j = 0; j < no; j++)
      out[(size_t)(n0 + i) * OC + o0 + j * os] = (bias ? bias[o0 + j * os] : 0.0f) + lanes_sum(acc[i][j]);
}

static inline void small_tile(float *out, const float *inp, const float *w, const float *bias, int n0, int nr, int o0,
                              int no, int os, int C, int OC)
{
  switch (nr) {
  case 1: small_tile_n(out, inp, w, bias, n0, 1, o0, no, os, C, OC); break;
  case 2: small_tile_n(out, inp, w, bias, n0, 2, o0, no, os, C, OC); break;
  case 3: small_tile_n(out, inp, w, bias, n0, 3, o0, no, os, C, OC); break;
  default: small_tile_n(out, inp, w, bias, n0, 4, o0, no, os, C, OC); break;
  }
}
  #define BIG_STEP SMALL_TILE
#elif defined(__AVX2__) && defined(__FMA__)
  #include <immintrin.h>

/* AVX2: gemv_dot's 16 partial sums are two registers (lanes 0-7, 8-15), so
 * a tile of AVX2_ROWS input rows by AVX2_OUTS weight rows keeps its 12
 * registers of sums in registers over the whole of C. A lane past C is left
 * as it was (blend), as the scalar loop leaves it. Same bits as the scalar
 * definition below (fused multiply-adds in c order per lane, the same tree). */
  #define AVX2_ROWS 3
  #define AVX2_OUTS 2
#define BIG_STEP                                                                                                       \
  12 /* input rows per small_tile call past SMALL_ROWS: four AVX2_ROWS pieces under one pair of weight rows */

static inline float lanes_sum2(__m256 lo, __m256 hi)
{
  __m256 h = _mm256_add_ps(lo, hi); /* lane j + lane j+8 */
  __m128 q = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
  q        = _mm_add_ps(q, _mm_movehl_ps(q, q));
  q        = _mm_add_ss(q, _mm_shuffle_ps(q, q, 1));
  return _mm_cvtss_f32(q);
}

static inline __attribute__((always_inline)) void avx2_tile_n(float *out, const float *inp, const float *w,
                                                              const float *bias, int n0, const int NR, int o0,
                                                              const int NO, int os, int C, int OC)
{
  __m256       lo[AVX2_ROWS][SMALL_TILE], hi[AVX2_ROWS][SMALL_TILE];
  const float *x[AVX2_ROWS], *wr[SMALL_TILE];
  int          c0;

  for (int j = 0; j < NO; j++) wr[j] = w + (size_t)(o0 + j * os) * C;
  for (int i = 0; i < NR; i++) {
    x[i] = inp + (size_t)(n0 + i) * C;
    for (int j = 0; j < NO; j++) lo[i][j] = hi[i][j] = _mm256_setzero_ps();
  }
  for (c0 = 0; c0 + 16 <= C; c0 += 16) {
    __m256 wl[SMALL_TILE], wh[SMALL_TILE];
    for (int j = 0; j < NO; j++) wl[j] = _mm256_loadu_ps(wr[j] + c0), wh[j] = _mm256_loadu_ps(wr[j] + c0 + 8);
    for (int i = 0; i < NR; i++) {
      __m256 xl = _mm256_loadu_ps(x[i] + c0), xh = _mm256_loadu_ps(x[i] + c0 + 8);
      for (int j = 0; j < NO; j++)
        lo[i][j] = _mm256_fmadd_ps(xl, wl[j], lo[i][j]), hi[i][j] = _mm256_fmadd_ps(xh, wh[j], hi[i][j]);
    }
  }
  if (c0 < C) {
    int    r  = C - c0;
    __m256i ml = _mm256_setr_epi32(0 < r ? -1 : 0, 1 < r ? -1 : 0, 2 < r ? -1 : 0, 3 < r ? -1 : 0, 4 < r ? -1 : 0,
                                   5 < r ? -1 : 0, 6 < r ? -1 : 0, 7 < r ? -1 : 0);
    __m256i mh = _mm256_setr_epi32(8 < r ? -1 : 0, 9 < r ? -1 : 0, 10 < r ? -1 : 0, 11 < r ? -1 : 0, 12 < r ? -1 : 0,
                                   13 < r ? -1 : 0, 14 < r ? -1 : 0, 15 < r ? -1 : 0);
    __m256 wl[SMALL_TILE], wh[SMALL_TILE];
    for (int j = 0; j < NO; j++)
      wl[j] = _mm256_maskload_ps(wr[j] + c0, ml), wh[j] = _mm256_maskload_ps(wr[j] + c0 + 8, mh);
    for (int i = 0; i < NR; i++) {
      __m256 xl = _mm256_maskload_ps(x[i] + c0, ml), xh = _mm256_maskload_ps(x[i] + c0 + 8, mh);
      for (int j = 0; j < NO; j++) {
        lo[i][j] = _mm256_blendv_ps(lo[i][j], _mm256_fmadd_ps(xl, wl[j], lo[i][j]), _mm256_castsi256_ps(ml));
        hi[i][j] = _mm256_blendv_ps(hi[i][j], _mm256_fmadd_ps(xh, wh[j], hi[i][j]), _mm256_castsi256_ps(mh));
      }
    }
  }
  for (int i = 0; i < NR; i++)
    for (int j = 0; j < NO; j++)
      out[(size_t)(n0 + i) * OC + o0 + j * os] = (bias ? bias[o0 + j * os] : 0.0f) + lanes_sum2(lo[i][j], hi[i][j]);
}

/* gemv_forward's SMALL_TILE x SMALL_TILE tile as AVX2_ROWS x AVX2_OUTS
 * pieces; one input row takes all the tile's weight rows in one piece (up
 * to SMALL_TILE streams from memory at once: see gemv_forward). */
static inline void small_tile(float *out, const float *inp, const float *w, const float *bias, int n0, int nr, int o0,
                              int no, int os, int C, int OC)
{
  if (nr == 1) {
    switch (no) {
    case 1: avx2_tile_n(out, inp, w, bias, n0, 1, o0, 1, os, C, OC); break;
    case 2: avx2_tile_n(out, inp, w, bias, n0, 1, o0, 2, os, C, OC); break;
    case 3: avx2_tile_n(out, inp, w, bias, n0, 1, o0, 3, os, C, OC); break;
    default: avx2_tile_n(out, inp, w, bias, n0, 1, o0, 4, os, C, OC); break;
    }
    return;
  }
  for (int j0 = 0; j0 < no; j0 += AVX2_OUTS)
    for (int i0 = 0; i0 < nr; i0 += AVX2_ROWS) {
      int a = nr - i0 < AVX2_ROWS ? nr - i0 : AVX2_ROWS, b = no - j0 < AVX2_OUTS ? no - j0 : AVX2_OUTS,
          oj = o0 + j0 * os;
      switch (a * 4 + b) {
      case 5: avx2_tile_n(out, inp, w, bias, n0 + i0, 1, oj, 1, os, C, OC); break;
      case 6: avx2_tile_n(out, inp, w, bias, n0 + i0, 1, oj, 2, os, C, OC); break;
      case 9: avx2_tile_n(out, inp, w, bias, n0 + i0, 2, oj, 1, os, C, OC); break;
      case 10: avx2_tile_n(out, inp, w, bias, n0 + i0, 2, oj, 2, os, C, OC); break;
      case 13: avx2_tile_n(out, inp, w, bias, n0 + i0, 3, oj, 1, os, C, OC); break;
      default: avx2_tile_n(out, inp, w, bias, n0 + i0, 3, oj, 2, os, C, OC); break;
      }
    }
}
#else
  #define BIG_STEP SMALL_TILE
static inline float gemv_dot(const float *restrict a, const float *restrict b, int C)
{
  float part[GEMV_LANES] = {0};
  int   c0;

  for (c0 = 0; c0 + GEMV_LANES <= C; c0 += GEMV_LANES)
    for (int j = 0; j < GEMV_LANES; j++) part[j] = fmaf(a[c0 + j], b[c0 + j], part[j]);
  for (int j = 0; c0 + j < C; j++) part[j] = fmaf(a[c0 + j], b[c0 + j], part[j]);
  for (int w = GEMV_LANES / 2; w > 0; w /= 2)
    for (int j = 0; j < w; j++) part[j] += part[j + w];
  return part[0];
}

static inline void small_tile(float *out, const float *inp, const float *w, const float *bias, int n0, int nr, int o0,
                              int no, int os, int C, int OC)
{
  for (int j = 0; j < no; j++)
    for (int i = 0; i < nr; i++)
      out[(size_t)(n0 + i) * OC + o0 + j * os] = (bias ? bias[o0 + j * os] : 0.0f) +
                                                 gemv_dot(inp + (size_t)(n0 + i) * C, w + (size_t)(o0 + j * os) * C, C);
}
#endif

static void gemv_forward(float *out, const float *inp, const float *w, const float *bias, int N, int C, int OC,
                         PetscBool transposed)
{
  if (transposed) { /* w [OC,C]: tiles of weight rows, each read once for all input rows */
    /* A tile's weight rows are o0, o0 + os, ... A decode step reads each
     * weight once and waits on memory (at one row wholly, at 16 still at the
     * first touch of each weight line), and one core reads far faster from
     * several distant places at once than from one place (the 2-core AMD
     * EPYC, one thread: 15 GB/s from one stream, 21-23 from four), so up to
     * SMALL_ROWS input rows a tile takes its SMALL_TILE rows from the
     * weight's SMALL_TILE parts (os = ceil(OC/SMALL_TILE)): SmolLM2's decode
     * on one thread 1.6x faster at one sequence, 1.15-1.5x at 4-16
     * (docs/benchmarks.md). Which products form an element, and in which
     * order, do not change: only the order in which elements are visited. */
    int spread = N <= SMALL_ROWS && OC >= SMALL_TILE * SMALL_TILE;
    int os = spread ? (OC + SMALL_TILE - 1) / SMALL_TILE : 1, ntile = (OC + SMALL_TILE - 1) / SMALL_TILE,
        nstep = N > SMALL_ROWS ? BIG_STEP : SMALL_TILE;
    /* more rows (batch-invariant mode): blocks of input rows that stay in L2
     * (256 KiB) while every weight tile passes over them; a tile's element
     * is the same sum whatever block or step holds its row */
    int nblk = N > SMALL_ROWS ? PetscMax(nstep, (65536 / PetscMax(C, 1)) / nstep * nstep) : N;
#pragma omp parallel if ((size_t)OC * C > CPU_OMP_MIN)
    for (int b0 = 0; b0 < N; b0 += nblk) {
      int b1 = b0 + nblk < N ? b0 + nblk : N;
#pragma omp for schedule(static)
      for (int t = 0; t < ntile; t++) {
        int o0 = spread ? t : t * SMALL_TILE,
            no = spread ? (OC - 1 - t) / os + 1 : (OC - o0 < SMALL_TILE ? OC - o0 : SMALL_TILE);
        for (int n0 = b0; n0 < b1; n0 += nstep)
          small_tile(out, inp, w, bias, n0, b1 - n0 < nstep ? b1 - n0 : nstep, o0, no, os, C, OC);
      }
    }
    return;
  }
  /* w [C,OC]: out[n,:] += inp[n,c] * w[c,:] for c in order, each thread its columns */
#pragma omp parallel if ((size_t)OC * C > CPU_OMP_MIN)
  {
    int nt = omp_get_num_threads(), id = omp_get_thread_num(), per = ((OC + nt - 1) / nt + 15) / 16 * 16;
    int lo = id * per, hi = lo + per < OC ? lo + per : OC;
    for (int n = 0; n < N && lo < hi; n++) {
      float *restrict o = out + (size_t)n * OC;
      for (int j = lo; j < hi; j++) o[j] = bias ? bias[j] : 0.0f;
      for (int c = 0; c < C; c++) {
        const float *restrict wr = w + (size_t)c * OC;
        float                 x  = inp[(size_t)n * C + c];
        for (int j = lo; j < hi; j++) o[j] += x * wr[j];
      }
    }
  }
}

/* Batch invariance (Backend.matmul_forward_rows). sgemm's bits for
 * a row depend on the call's row count and on the row's place in its
 * register tiles and in sgemm_tiled's tiles (measured, OpenBLAS 0.3.21 Haswell
 * kernels: a row differs between M = 1, 33, 48, 100 and between first and
 * last row of one call), so the dispatch above, which switches to sgemm
 * past SMALL_ROWS (GEMV_ROWS for [C,OC]) rows, gives a prompt's prefill rows
 * other bits among other prompts than alone. matmul_forward_rows takes the
 * row-wise kernels at every row count, whose order for an element is fixed
 * by C alone. They are the decode path's, so rows up to SMALL_ROWS ([OC,C]) or
 * GEMV_ROWS ([C,OC]) keep their bits; larger calls (a prefill) get other
 * bits than sgemm's and run slower (docs/benchmarks.md).
 * Generation's -gen_batch_invariant routes the cached forward's matmuls
 * here (model_cached_batch_invariant); training's stay on matmul_forward. */
PetscErrorCode cpu_matmul_forward_rows(float *out, const float *inp, const float *w, const float *bias, int N, int C,
                                       int OC, PetscBool transposed)
{
  PetscFunctionBegin;
  if (N > 0 && OC > 0) gemv_forward(out, inp, w, bias, N, C, OC, transposed);
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode cpu_matmul_forward(float *out, const float *inp, const float *w, const float *bias, int N, int C, int OC,
                                  PetscBool transposed)
{
  float beta = 0.0f;

  PetscFunctionBegin;
  if (N <= 0 || OC <= 0) PetscFunctionReturn(PETSC_SUCCESS);
  if (N <= (transposed ? SMALL_ROWS : GEMV_ROWS)) {
    gemv_forward(out, inp, w, bias, N, C, OC, transposed);
    PetscFunctionReturn(PETSC_SUCCESS);
  }
  if (bias) {
    /* the bias enters as sgemm's C operand: one pass over out, not two */
#pragma omp parallel for schedule(static) if ((size_t)N * OC > CPU_OMP_MIN)
    for (int n = 0; n < N; n++) memcpy(out + (size_t)n * OC, bias, (size_t)OC * sizeof(float));
    beta = 1.0f;
  }
  if (transposed) sgemm_tiled(CblasNoTrans, CblasTrans, N, OC, C, inp, C, w, C, beta, out, OC);
  else sgemm_tiled(CblasNoTrans, CblasNoTrans, N, OC, C, inp, C, w, OC, beta, out, OC);
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode cpu_matmul_backward(float *dinp, float *dw, float *dbias, const float *dout, const float *inp,
                                   const float *w, int N, int C, int OC, PetscBool transposed)
{
  PetscFunctionBegin;
  if (N <= 0 || OC <= 0) PetscFunctionReturn(PETSC_SUCCESS);
  if (dinp) {
    if (transposed) sgemm_tiled(CblasNoTrans, CblasNoTrans, N, C, OC, dout, OC, w, C, 1.0f, dinp, C);
    else sgemm_tiled(CblasNoTrans, CblasTrans, N, C, OC, dout, OC, w, OC, 1.0f, dinp, C);
  }
  if (dw) {
    if (transposed) sgemm_tiled(CblasTrans, CblasNoTrans, OC, C, N, dout, OC, inp, C, 1.0f, dw, C);
    else sgemm_tiled(CblasTrans, CblasNoTrans, C, OC, N, inp, C, dout, OC, 1.0f, dw, OC);
  }
  if (dbias) PetscCall(cpu_colsum_accumulate(dbias, dout, N, OC));
  PetscFunctionReturn(PETSC_SUCCESS);
}
