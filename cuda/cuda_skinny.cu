/* CUDA backend: the linear layer for few rows (a decode step's), in one
 * kernel that reads each weight once per group of rows.
 *
 * For N <= SK_MAX_ROWS (8) rows, cuBLAS's GEMM plus the bf16 path's conversion
 * of the input and its rounding epilogue were three launches per matmul,
 * and at a decode step's sizes the launches, not the weights' bytes, set
 * the time. Here the input's rounding to bf16, the products, the bias and
 * the output's rounding happen in the kernel that reads the weights (bf16
 * from the kept copies of cuda_wcache.cu, or fp32), with fp32 accumulation
 * as cuBLAS does.
 *
 * Order of the sums. Each output is reduced in an order fixed by C, OC and
 * the device's SM count alone, never by N or by the row's place in the call:
 * a row's result is the same whether it runs alone or among 7 others. More
 * rows go to cuBLAS (which reads the weights once for all of them), so on
 * cuda a row's bits depend on whether its step has more than 8 rows.
 *
 * Layouts (tensor.h): W [C, OC] in rows of ld (the bf16 copy pads rows to a
 * multiple of 8; fp32 has ld = OC), or transposed W [OC, C].
 * - [C, ld]: a block owns 64 columns (a warp's lanes two each) and a range
 *   of k; its 8 warps take every 8th k of the range; the warps' partials
 *   are added in warp order. When C is long against the columns, blocks
 *   split k further (SK_SPLIT chunks, fixed by the sizes) and a second
 *   kernel adds the chunks in order, then the bias.
 * - [OC, C]: a warp owns an output column (a weight row, contiguous); its
 *   lanes take every 32nd pair of k and the lanes' partials meet by a
 *   butterfly, the same on every lane. */
#include "cuda_common.cuh"

#define SK_MAX_ROWS  RFCUDA_FEW_ROWS /* one group of rows: more would read the weights again per group */
#define SK_ROWS      8  /* rows per block (grid.z takes the groups of 8) */
#define SK_THREADS   256
#define SK_WARPS     (SK_THREADS / 32)
#define SK_COLS      64   /* columns per block, [C, ld] layout */
#define SK_KTILE     512  /* inputs staged in shared memory per pass */
#define SK_UNROLL    8    /* weight loads in flight per warp, [C, ld] layout */
#define SK_RUNROLL   4    /* chunks of 8 weights in flight per thread and weight row, [OC, C] layout */
#define SK_RPW       2    /* weight rows a group of warps loads together, [OC, C] layout */

enum { SK_PLAIN, SK_GATED, SK_NORMED }; /* the [OC, C] kernel's input: inp's rows, their SwiGLU, their RMSNorm */

static_assert(SK_THREADS == RFCUDA_ROW_THREADS,
              "the kernels norm their input rows with rfcuda_rms_scale, which needs a block of RFCUDA_ROW_THREADS");

template <int BF>
__device__ __forceinline__ float sk_load(const void *w, size_t i)
{
  if (BF) return __bfloat162float(((const __nv_bfloat16 *)w)[i]);
  return __ldg((const float *)w + i);
}

__device__ __forceinline__ float sk_in(float x, int bf) { return bf ? rfcuda_round_bf16(x) : x; }

/* input k of row n: inp[n, k], or with gated the SwiGLU of inp's row of 2C
 * (gate k, up C + k) as swiglu_forward forms it */
__device__ __forceinline__ float sk_input(const float *inp, int n, int k, int C, int gated, int bf)
{
  if (!gated) return inp[(size_t)n * C + k];
  const float *row = inp + 2 * (size_t)n * C;
  return rfcuda_swiglu(row[k], row[C + k], bf);
}

/* an output: the bias added, rounded in bf16 mode, then stored or (add)
 * added to what is there, with the bits of axpy(out, 1, .) */
__device__ __forceinline__ void sk_store(float *o, float s, const float *bias, int round_out, int add)
{
  if (bias) s = __fadd_rn(s, *bias);
  if (round_out) s = rfcuda_round_bf16(s);
  *o = add ? __fadd_rn(*o, __fmul_rn(1.0f, s)) : s;
}

/* [C, ld] layout: partial sums of k in [k0, k1) for rows n0 .. n0+nr-1 and
 * columns c0 .. c0+63; with part NULL they are the whole sum and get the
 * bias and rounding, else they go to part[chunk][n][OC]. */
template <int BF>
__global__ void __launch_bounds__(SK_THREADS)
    sk_cols_kernel(float *out, float *part, const float *inp, const void *w, const float *bias, int N, int C, int OC,
                   int ld, int kchunk, int round_out, int gated, int add, const float *nw, float eps)
{
  __shared__ float xs[SK_ROWS][SK_KTILE];
  __shared__ float red[SK_WARPS][SK_ROWS][SK_COLS];
  __shared__ float rs[SK_ROWS], nsh[SK_WARPS];
  const int        lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int        c0 = blockIdx.x * SK_COLS, col = c0 + 2 * lane;
  const int        n0 = blockIdx.z * SK_ROWS, nr = N - n0 < SK_ROWS ? N - n0 : SK_ROWS;
  const int        k0 = blockIdx.y * kchunk, k1 = k0 + kchunk < C ? k0 + kchunk : C;
  float            acc[SK_ROWS][2];

#pragma unroll
  for (int n = 0; n < SK_ROWS; n++) acc[n][0] = acc[n][1] = 0.0f;
  if (nw) /* the rows' RMSNorm scales, as rms_row_kernel forms them */
    for (int n = 0; n < nr; n++) {
      float sc = rfcuda_rms_scale(inp + (size_t)(n0 + n) * C, C, eps, nsh);
      if (threadIdx.x == 0) rs[n] = sc;
    }
  for (int kt = k0; kt < k1; kt += SK_KTILE) {
    int kn = k1 - kt < SK_KTILE ? k1 - kt : SK_KTILE;
    __syncthreads();
    for (int i = threadIdx.x; i < SK_ROWS * SK_KTILE; i += SK_THREADS) {
      int n = i / SK_KTILE, k = i % SK_KTILE;
      float v  = 0.0f;
      if (n < nr && k < kn) {
        v = sk_input(inp, n0 + n, kt + k, C, gated, BF);
        if (nw) v = rfcuda_rms_apply(v, rs[n], nw[kt + k], BF);
      }
      xs[n][k] = sk_in(v, BF);
    }
    __syncthreads();
    /* SK_UNROLL of the warp's k at a time: their loads first, so that each
     * warp has that many in flight (one at a time left the loop waiting on
     * memory latency), then the products in the same k order as one by one */
    for (int k = warp; k < kn; k += SK_WARPS * SK_UNROLL) {
      float w0[SK_UNROLL], w1[SK_UNROLL];
#pragma unroll
      for (int u = 0; u < SK_UNROLL; u++) {
        int    kk = k + u * SK_WARPS;
        size_t at = (size_t)(kt + kk) * ld + col;
        w0[u] = w1[u] = 0.0f;
        if (kk >= kn) continue;
        if (BF && col + 1 < ld) { /* rows of ld (a multiple of 8, zeros past OC): an aligned pair */
          float2 f = __bfloat1622float2(*(const __nv_bfloat162 *)((const __nv_bfloat16 *)w + at));
          w0[u] = f.x, w1[u] = f.y;
        } else {
          if (col < OC) w0[u] = sk_load<BF>(w, at);
          if (col + 1 < OC) w1[u] = sk_load<BF>(w, at + 1);
        }
      }
#pragma unroll
      for (int u = 0; u < SK_UNROLL; u++) {
        int kk = k + u * SK_WARPS;
        if (kk >= kn) break;
#pragma unroll
        for (int n = 0; n < SK_ROWS; n++) {
          acc[n][0] = fmaf(xs[n][kk], w0[u], acc[n][0]);
          acc[n][1] = fmaf(xs[n][kk], w1[u], acc[n][1]);
        }
      }
    }
  }
#pragma unroll
  for (int n = 0; n < SK_ROWS; n++) red[warp][n][2 * lane] = acc[n][0], red[warp][n][2 * lane + 1] = acc[n][1];
  __syncthreads();
  for (int i = threadIdx.x; i < SK_ROWS * SK_COLS; i += SK_THREADS) {
    int   n = i / SK_COLS, j = i % SK_COLS, o = c0 + j;
    float s = 0.0f;
    if (n >= nr || o >= OC) continue;
    for (int q = 0; q < SK_WARPS; q++) s = __fadd_rn(s, red[q][n][j]);
    if (part) part[((size_t)blockIdx.y * N + n0 + n) * OC + o] = s;
    else sk_store(out + (size_t)(n0 + n) * OC + o, s, bias ? bias + o : NULL, round_out, add);
  }
}

/* out[n, o] = the chunks' partials added in chunk order, then the bias */
__global__ void sk_chunks_kernel(float *out, const float *part, const float *bias, int N, int OC, int nchunk,
                                 int round_out, int add)
{
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (size_t)N * OC;
       i += (size_t)gridDim.x * blockDim.x) {
    float s = 0.0f;
    for (int q = 0; q < nchunk; q++) s = __fadd_rn(s, part[(size_t)q * N * OC + i]);
    sk_store(out + i, s, bias ? bias + i % (size_t)OC : NULL, round_out, add);
  }
}

/* [OC, C] layout. A weight row (one output) is split in chunks of 8 k;
 * the row's 32 * wpr threads take every (32 wpr)th chunk, a chunk's 8 k in
 * order into one fp32 sum per input row, so each thread reads 16 bytes (bf16)
 * or 32 (fp32) of weights at a time. The threads' sums meet by a butterfly
 * in each warp, then the row's warps add in warp order. wpr is a function of
 * C alone (sk_row_warps), so the order of every output's sum is fixed by C:
 * the same whether its input row runs alone or among 7 others, whichever
 * loads (vector or scalar, by alignment) bring the values and whichever
 * warp takes the row. NR, the input rows rounded up to 1, 2, 4 or 8, and
 * MODE, what the input is (SK_PLAIN, SK_GATED, SK_NORMED), are template
 * arguments: registers only for what a call has.
 *
 * The grid is as many blocks as fit on the device at once (or fewer, for
 * few weight rows); each group of wpr warps takes its rows SK_RPW at a time,
 * SK_RUNROLL chunks of each in flight, so that a short row (896 k: 3.5
 * chunks a lane) still keeps several loads per thread waiting on memory. */
template <int BF> struct SkRaw; /* a chunk's 8 weights as loaded */
template <> struct SkRaw<1> {
  uint4 a;
};
template <> struct SkRaw<0> {
  float4 a, b;
};

__device__ __forceinline__ void sk_raw_load(SkRaw<1> &r, const void *w, size_t at, int kn, int vec)
{
  const __nv_bfloat16 *p = (const __nv_bfloat16 *)w + at;
  if (vec) r.a = __ldcs((const uint4 *)p);
  else {
    unsigned q[4] = {0, 0, 0, 0};
#pragma unroll
    for (int j = 0; j < 8; j++)
      if (j < kn)
        q[j / 2] |= (unsigned)__bfloat16_as_ushort(p[j])
                    << (16 * (j % 2)); /* element 2i in the low half, as a 32-bit load has it */
    r.a = make_uint4(q[0], q[1], q[2], q[3]);
  }
}

__device__ __forceinline__ void sk_raw_load(SkRaw<0> &r, const void *w, size_t at, int kn, int vec)
{
  const float *p = (const float *)w + at;
  if (vec) r.a = __ldcs((const float4 *)p), r.b = __ldcs((const float4 *)p + 1);
  else {
    float v[8];
#pragma unroll
    for (int j = 0; j < 8; j++) v[j] = j < kn ? p[j] : 0.0f;
    r.a = make_float4(v[0], v[1], v[2], v[3]), r.b = make_float4(v[4], v[5], v[6], v[7]);
  }
}

/* weight j (a constant once unrolled) of a chunk, as a float */
__device__ __forceinline__ float sk_raw_at(const SkRaw<1> &r, int j)
{
  unsigned q = j < 2 ? r.a.x : j < 4 ? r.a.y : j < 6 ? r.a.z : r.a.w;
  return __uint_as_float(j % 2 ? q & 0xffff0000u : q << 16);
}

__device__ __forceinline__ float sk_raw_at(const SkRaw<0> &r, int j)
{
  const float4 &h = j < 4 ? r.a : r.b;
  int           i = j % 4;
  return i == 0 ? h.x : i == 1 ? h.y : i == 2 ? h.z : h.w;
}

template <int MODE>
__device__ __forceinline__ void sk_chunk_x(float v[8], const float *x, int kn, int BF, int vec, int C, const float *nw,
                                           float sc)
{
  if (MODE == SK_GATED) { /* x: the row of 2C at this chunk's gate; its up is C further */
    float g[8], u[8];
    if (vec) {
      float4 a = __ldg((const float4 *)x), b = __ldg((const float4 *)x + 1), c = __ldg((const float4 *)(x + C)),
             d = __ldg((const float4 *)(x + C) + 1);
      g[0] = a.x, g[1] = a.y, g[2] = a.z, g[3] = a.w, g[4] = b.x, g[5] = b.y, g[6] = b.z, g[7] = b.w;
      u[0] = c.x, u[1] = c.y, u[2] = c.z, u[3] = c.w, u[4] = d.x, u[5] = d.y, u[6] = d.z, u[7] = d.w;
    } else {
#pragma unroll
      for (int j = 0; j < 8; j++) g[j] = j < kn ? __ldg(x + j) : 0.0f, u[j] = j < kn ? __ldg(x + C + j) : 0.0f;
    }
#pragma unroll
    for (int j = 0; j < 8; j++) v[j] = sk_in(rfcuda_swiglu(g[j], u[j], BF), BF);
    return;
  }
  if (vec) {
    float4 a = __ldg((const float4 *)x), b = __ldg((const float4 *)x + 1);
    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
  } else {
#pragma unroll
    for (int j = 0; j < 8; j++) v[j] = j < kn ? __ldg(x + j) : 0.0f;
  }
  if (MODE == SK_NORMED) /* nw: this chunk's norm weights */
#pragma unroll
    for (int j = 0; j < 8; j++) v[j] = j < kn ? rfcuda_rms_apply(v[j], sc, __ldg(nw + j), BF) : 0.0f;
#pragma unroll
  for (int j = 0; j < 8; j++) v[j] = sk_in(v[j], BF);
}

template <int BF, int NR, int MODE>
__global__ void __launch_bounds__(SK_THREADS, BF &&NR == 1 ? 3 : 2)
    sk_rows_kernel(float *out, const float *inp, const void *w, const float *bias, int nr, int C, int OC, int wpr,
                   int vec, int round_out, int add, const float *nw, float eps)
{
  __shared__ float red[SK_RPW][SK_WARPS][NR], nsh[SK_WARPS];
  const int        lane = threadIdx.x & 31, warp = threadIdx.x >> 5, rpb = SK_WARPS / wpr;
  const int        part = warp % wpr, slot = warp / wpr, tpr = 32 * wpr, t = 32 * part + lane, nch = (C + 7) / 8;
  const int        step = gridDim.x * rpb; /* between a group's rows */
  float            rs[NR];

#pragma unroll
  for (int n = 0; n < NR; n++)
    rs[n] = MODE == SK_NORMED && n < nr ? rfcuda_rms_scale(inp + (size_t)n * C, C, eps, nsh)
                                        : 1.0f; /* the rows' RMSNorm scales */

  for (int base = blockIdx.x * rpb; base < OC; base += SK_RPW * step) { /* block-uniform: the barriers below */
    int   o[SK_RPW];
    float acc[SK_RPW][NR];
#pragma unroll
    for (int r = 0; r < SK_RPW; r++) {
      o[r] = base + slot + r * step;
#pragma unroll
      for (int n = 0; n < NR; n++) acc[r][n] = 0.0f;
    }
    for (int c0 = t; c0 < nch; c0 += tpr * SK_RUNROLL) {
      SkRaw<BF> raw[SK_RPW][SK_RUNROLL];
#pragma unroll
      for (int r = 0; r < SK_RPW; r++) /* the loads first: SK_RPW * SK_RUNROLL chunks in flight */
#pragma unroll
        for (int u = 0; u < SK_RUNROLL; u++) {
          int c = c0 + u * tpr;
          if (c < nch && o[r] < OC) sk_raw_load(raw[r][u], w, (size_t)o[r] * C + 8 * (size_t)c, C - 8 * c, vec);
        }
#pragma unroll
      for (int u = 0; u < SK_RUNROLL; u++) {
        int c = c0 + u * tpr, kn = C - 8 * c;
        if (c >= nch) break;
#pragma unroll
        for (int n = 0; n < NR; n++) {
          float xv[8];
          if (n >= nr) break;
          sk_chunk_x<MODE>(xv, inp + (size_t)n * (MODE == SK_GATED ? 2 * C : C) + 8 * (size_t)c, kn, BF, vec, C,
                           MODE == SK_NORMED ? nw + 8 * (size_t)c : NULL, rs[n]);
#pragma unroll
          for (int r = 0; r < SK_RPW; r++)
            if (o[r] < OC)
#pragma unroll
              for (int j = 0; j < 8; j++)
                if (j < kn) acc[r][n] = fmaf(xv[j], sk_raw_at(raw[r][u], j), acc[r][n]);
        }
      }
    }
#pragma unroll
    for (int r = 0; r < SK_RPW; r++)
#pragma unroll
      for (int n = 0; n < NR; n++)
#pragma unroll
        for (int m = 16; m >= 1; m >>= 1) acc[r][n] = __fadd_rn(acc[r][n], __shfl_xor_sync(0xffffffffu, acc[r][n], m));
    if (wpr > 1) {
      if (lane == 0)
#pragma unroll
        for (int r = 0; r < SK_RPW; r++)
#pragma unroll
          for (int n = 0; n < NR; n++) red[r][warp][n] = acc[r][n];
      __syncthreads();
#pragma unroll
      for (int r = 0; r < SK_RPW; r++)
        if (part == 0 && lane < nr && o[r] < OC) {
          float s = 0.0f;
          for (int q = 0; q < wpr; q++) s = __fadd_rn(s, red[r][warp + q][lane]);
          sk_store(out + (size_t)lane * OC + o[r], s, bias ? bias + o[r] : NULL, round_out, add);
        }
      __syncthreads();
    } else
#pragma unroll
      for (int r = 0; r < SK_RPW; r++)
        if (lane < nr && o[r] < OC) {
          float s = 0.0f;
#pragma unroll
          for (int n = 0; n < NR; n++)
            if (n == lane) s = acc[r][n];
          sk_store(out + (size_t)lane * OC + o[r], s, bias ? bias + o[r] : NULL, round_out, add);
        }
  }
}

static int sk_sm_count(void)
{
  static int sms = 0;
  if (!sms) {
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || sms < 1)
      sms = 1;
    (void)cudaGetLastError();
  }
  return sms;
}

/* warps per weight row of the [OC, C] layout, from C alone: about 4 chunks
 * of 8 k per thread up to 8 warps (C 8192 and longer) */
static int sk_row_warps(int C)
{
  int nch = (C + 7) / 8, wpr = 1;

  while (wpr < SK_WARPS && nch > 32 * wpr * SK_RUNROLL) wpr *= 2;
  return wpr;
}

/* blocks for sk_rows_kernel<bf, nr, mode>: those resident on the device at once
 * (asked once per instance), at most need */
static unsigned sk_rows_grid(const void *kernel, int bf, int nr, int mode, unsigned need)
{
  static int fit[2][SK_MAX_ROWS + 1][3];
  int       *f = &fit[bf][nr][mode];

  if (!*f) {
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(f, kernel, SK_THREADS, 0) != cudaSuccess || *f < 1) *f = 1;
    (void)cudaGetLastError();
    *f *= sk_sm_count();
  }
  return need < (unsigned)*f ? need : (unsigned)*f;
}

template <int BF, int NR, int MODE>
static void sk_rows_go(float *out, const float *inp, const void *w, const float *bias, int N, int C, int OC, int add,
                       const float *nw, float eps)
{
  int      wpr = sk_row_warps(C), rpb = SK_WARPS / wpr;
  int      vec = C % 8 == 0 && ((uintptr_t)w & 15) == 0 && ((uintptr_t)inp & 15) == 0;
  unsigned need = (unsigned)((OC + rpb - 1) / rpb);

  sk_rows_kernel<BF, NR, MODE>
      <<<sk_rows_grid((const void *)sk_rows_kernel<BF, NR, MODE>, BF, NR, MODE, need), SK_THREADS, 0,
         rfcuda_stream()>>>(out, inp, w, bias, N, C, OC, wpr, vec, BF, add, nw, eps);
}

/* NR: the call's rows rounded up to 1, 2, 4 or 8 (registers for so many) */
template <int BF, int MODE>
static void sk_rows_launch(float *out, const float *inp, const void *w, const float *bias, int N, int C, int OC,
                           int add, const float *nw, float eps)
{
  if (N == 1) sk_rows_go<BF, 1, MODE>(out, inp, w, bias, N, C, OC, add, nw, eps);
  else if (N == 2) sk_rows_go<BF, 2, MODE>(out, inp, w, bias, N, C, OC, add, nw, eps);
  else if (N <= 4) sk_rows_go<BF, 4, MODE>(out, inp, w, bias, N, C, OC, add, nw, eps);
  else sk_rows_go<BF, 8, MODE>(out, inp, w, bias, N, C, OC, add, nw, eps);
}

template <int BF>
static void sk_rows_mode(float *out, const float *inp, const void *w, const float *bias, int N, int C, int OC,
                         int gated, int add, const float *nw, float eps)
{
  if (gated) sk_rows_launch<BF, SK_GATED>(out, inp, w, bias, N, C, OC, add, nw, eps);
  else if (nw) sk_rows_launch<BF, SK_NORMED>(out, inp, w, bias, N, C, OC, add, nw, eps);
  else sk_rows_launch<BF, SK_PLAIN>(out, inp, w, bias, N, C, OC, add, nw, eps);
}

/* the k chunks of the [C, ld] layout: about two blocks per SM, each of at
 * least 256 k (a function of C, OC and the device: never of N) */
static void sk_chunks(int C, int OC, int *nchunk, int *kchunk)
{
  int colblocks = (OC + SK_COLS - 1) / SK_COLS, want = (2 * sk_sm_count() + colblocks - 1) / colblocks,
      most = (C + 255) / 256;

  *nchunk = want < most ? want : most;
  if (*nchunk < 1) *nchunk = 1;
  *kchunk = (C + *nchunk - 1) / *nchunk;
  *nchunk = (C + *kchunk - 1) / *kchunk;
}

size_t rfcuda_skinny_part_bytes(int N, int C, int OC, int transposed)
{
  int nchunk, kchunk;

  if (transposed) return 0;
  sk_chunks(C, OC, &nchunk, &kchunk);
  return nchunk > 1 ? (size_t)nchunk * N * OC * sizeof(float) : 0;
}

int rfcuda_matmul_skinny(float *out, float *part, const float *inp, const void *w, int bf16, const float *bias, int N,
                         int C, int OC, int ld, int transposed, int gated, int add, const float *nw, float eps)
{
  dim3 grid;

  RFCUDA_REQUIRE(N >= 1 && N <= SK_MAX_ROWS && C >= 1 && OC >= 1, "matmul_skinny: N %d (1 to %d), C %d and OC %d", N,
                 SK_MAX_ROWS, C, OC);
  RFCUDA_REQUIRE(!(gated && nw), "matmul_skinny: an input both gated and normed");
  if (transposed) {
    if (bf16) sk_rows_mode<1>(out, inp, w, bias, N, C, OC, gated, add, nw, eps);
    else sk_rows_mode<0>(out, inp, w, bias, N, C, OC, gated, add, nw, eps);
    RFCUDA_LAUNCHED();
    return 0;
  }
  {
    int nchunk, kchunk;

    sk_chunks(C, OC, &nchunk, &kchunk);
    RFCUDA_REQUIRE(nchunk == 1 || part, "matmul_skinny: %d k chunks need the partials' buffer", nchunk);
    if (nchunk == 1) part = NULL;
    grid = dim3((unsigned)((OC + SK_COLS - 1) / SK_COLS), (unsigned)nchunk, (unsigned)((N + SK_ROWS - 1) / SK_ROWS));
    if (bf16)
      sk_cols_kernel<1><<<grid, SK_THREADS, 0, rfcuda_stream()>>>(out, part, inp, w, bias, N, C, OC, ld, kchunk, bf16,
                                                                  gated, add, nw, eps);
    else
      sk_cols_kernel<0><<<grid, SK_THREADS, 0, rfcuda_stream()>>>(out, part, inp, w, bias, N, C, OC, ld, kchunk, bf16,
                                                                  gated, add, nw, eps);
    RFCUDA_LAUNCHED();
    if (nchunk > 1) {
      sk_chunks_kernel<<<rfcuda_blocks((size_t)N * OC, 256), 256, 0, rfcuda_stream()>>>(out, part, bias, N, OC, nchunk,
                                                                                        bf16, add);
      RFCUDA_LAUNCHED();
    }
  }
  return 0;
}
