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

#define SK_MAX_ROWS  8  /* one group of rows: more would read the weights again per group */
#define SK_ROWS      8  /* rows per block (grid.z takes the groups of 8) */
#define SK_THREADS   256
#define SK_WARPS     (SK_THREADS / 32)
#define SK_COLS      64   /* columns per block, [C, ld] layout */
#define SK_KTILE     512  /* inputs staged in shared memory per pass */
#define SK_UNROLL    8    /* weight loads in flight per warp */

template <int BF>
__device__ __forceinline__ float sk_load(const void *w, size_t i)
{
  if (BF) return __bfloat162float(((const __nv_bfloat16 *)w)[i]);
  return __ldg((const float *)w + i);
}

__device__ __forceinline__ float sk_in(float x, int bf) { return bf ? rfcuda_round_bf16(x) : x; }

/* [C, ld] layout: partial sums of k in [k0, k1) for rows n0 .. n0+nr-1 and
 * columns c0 .. c0+63; with part NULL they are the whole sum and get the
 * bias and rounding, else they go to part[chunk][n][OC]. */
template <int BF>
__global__ void __launch_bounds__(SK_THREADS) sk_cols_kernel(float *out, float *part, const float *inp, const void *w, const float *bias, int N, int C, int OC, int ld,
                                                             int kchunk, int round_out)
{
  __shared__ float xs[SK_ROWS][SK_KTILE];
  __shared__ float red[SK_WARPS][SK_ROWS][SK_COLS];
  const int        lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int        c0 = blockIdx.x * SK_COLS, col = c0 + 2 * lane;
  const int        n0 = blockIdx.z * SK_ROWS, nr = N - n0 < SK_ROWS ? N - n0 : SK_ROWS;
  const int        k0 = blockIdx.y * kchunk, k1 = k0 + kchunk < C ? k0 + kchunk : C;
  float            acc[SK_ROWS][2];

#pragma unroll
  for (int n = 0; n < SK_ROWS; n++) acc[n][0] = acc[n][1] = 0.0f;
  for (int kt = k0; kt < k1; kt += SK_KTILE) {
    int kn = k1 - kt < SK_KTILE ? k1 - kt : SK_KTILE;
    __syncthreads();
    for (int i = threadIdx.x; i < SK_ROWS * SK_KTILE; i += SK_THREADS) {
      int n = i / SK_KTILE, k = i % SK_KTILE;
      xs[n][k] = n < nr && k < kn ? sk_in(inp[(size_t)(n0 + n) * C + kt + k], BF) : 0.0f;
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
    else {
      if (bias) s = __fadd_rn(s, bias[o]);
      out[(size_t)(n0 + n) * OC + o] = round_out ? rfcuda_round_bf16(s) : s;
    }
  }
}

/* out[n, o] = the chunks' partials added in chunk order, then the bias */
__global__ void sk_chunks_kernel(float *out, const float *part, const float *bias, int N, int OC, int nchunk, int round_out)
{
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (size_t)N * OC; i += (size_t)gridDim.x * blockDim.x) {
    float s = 0.0f;
    for (int q = 0; q < nchunk; q++) s = __fadd_rn(s, part[(size_t)q * N * OC + i]);
    if (bias) s = __fadd_rn(s, bias[i % (size_t)OC]);
    out[i] = round_out ? rfcuda_round_bf16(s) : s;
  }
}

/* [OC, C] layout: warp per output column; rows n0 .. n0+nr-1 */
template <int BF>
__global__ void __launch_bounds__(SK_THREADS) sk_rows_kernel(float *out, const float *inp, const void *w, const float *bias, int N, int C, int OC, int round_out)
{
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int n0 = blockIdx.z * SK_ROWS, nr = N - n0 < SK_ROWS ? N - n0 : SK_ROWS;

  for (int o = blockIdx.x * SK_WARPS + warp; o < OC; o += gridDim.x * SK_WARPS) {
    float  acc[SK_ROWS];
    size_t row = (size_t)o * C;
#pragma unroll
    for (int n = 0; n < SK_ROWS; n++) acc[n] = 0.0f;
    for (int k0 = 2 * lane; k0 < C; k0 += 64 * SK_UNROLL) { /* loads first, as in sk_cols_kernel */
      float w0[SK_UNROLL], w1[SK_UNROLL];
#pragma unroll
      for (int u = 0; u < SK_UNROLL; u++) {
        int k = k0 + 64 * u;
        w0[u] = k < C ? sk_load<BF>(w, row + k) : 0.0f;
        w1[u] = k + 1 < C ? sk_load<BF>(w, row + k + 1) : 0.0f;
      }
#pragma unroll
      for (int u = 0; u < SK_UNROLL; u++) {
        int k = k0 + 64 * u;
        if (k >= C) break;
#pragma unroll
        for (int n = 0; n < SK_ROWS; n++)
          if (n < nr) {
            const float *x = inp + (size_t)(n0 + n) * C + k;
            acc[n] = fmaf(sk_in(__ldg(x), BF), w0[u], acc[n]);
            if (k + 1 < C) acc[n] = fmaf(sk_in(__ldg(x + 1), BF), w1[u], acc[n]);
          }
      }
    }
#pragma unroll
    for (int n = 0; n < SK_ROWS; n++)
#pragma unroll
      for (int m = 16; m >= 1; m >>= 1) acc[n] = __fadd_rn(acc[n], __shfl_xor_sync(0xffffffffu, acc[n], m));
    if (lane < nr) {
      float s = 0.0f;
#pragma unroll
      for (int n = 0; n < SK_ROWS; n++)
        if (n == lane) s = acc[n];
      if (bias) s = __fadd_rn(s, bias[o]);
      out[(size_t)(n0 + lane) * OC + o] = round_out ? rfcuda_round_bf16(s) : s;
    }
  }
}

static int sk_sm_count(void)
{
  static int sms = 0;
  if (!sms) {
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || sms < 1) sms = 1;
    (void)cudaGetLastError();
  }
  return sms;
}

int rfcuda_skinny_rows(void) { return SK_MAX_ROWS; }

/* the k chunks of the [C, ld] layout: about two blocks per SM, each of at
 * least 256 k (a function of C, OC and the device: never of N) */
static void sk_chunks(int C, int OC, int *nchunk, int *kchunk)
{
  int colblocks = (OC + SK_COLS - 1) / SK_COLS, want = (2 * sk_sm_count() + colblocks - 1) / colblocks, most = (C + 255) / 256;

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

int rfcuda_matmul_skinny(float *out, float *part, const float *inp, const void *w, int bf16, const float *bias, int N, int C, int OC, int ld, int transposed)
{
  dim3 grid;

  RFCUDA_REQUIRE(N >= 1 && N <= SK_MAX_ROWS && C >= 1 && OC >= 1, "matmul_skinny: N %d (1 to %d), C %d and OC %d", N, SK_MAX_ROWS, C, OC);
  if (transposed) {
    unsigned blocks = (unsigned)((OC + SK_WARPS - 1) / SK_WARPS), cap = (unsigned)sk_sm_count() * 16;
    grid            = dim3(blocks < cap ? blocks : cap, 1, (unsigned)((N + SK_ROWS - 1) / SK_ROWS));
    if (bf16) sk_rows_kernel<1><<<grid, SK_THREADS, 0, rfcuda_stream()>>>(out, inp, w, bias, N, C, OC, bf16);
    else sk_rows_kernel<0><<<grid, SK_THREADS, 0, rfcuda_stream()>>>(out, inp, w, bias, N, C, OC, bf16);
    RFCUDA_LAUNCHED();
    return 0;
  }
  {
    int nchunk, kchunk;

    sk_chunks(C, OC, &nchunk, &kchunk);
    RFCUDA_REQUIRE(nchunk == 1 || part, "matmul_skinny: %d k chunks need the partials' buffer", nchunk);
    if (nchunk == 1) part = NULL;
    grid = dim3((unsigned)((OC + SK_COLS - 1) / SK_COLS), (unsigned)nchunk, (unsigned)((N + SK_ROWS - 1) / SK_ROWS));
    if (bf16) sk_cols_kernel<1><<<grid, SK_THREADS, 0, rfcuda_stream()>>>(out, part, inp, w, bias, N, C, OC, ld, kchunk, bf16);
    else sk_cols_kernel<0><<<grid, SK_THREADS, 0, rfcuda_stream()>>>(out, part, inp, w, bias, N, C, OC, ld, kchunk, bf16);
    RFCUDA_LAUNCHED();
    if (nchunk > 1) {
      sk_chunks_kernel<<<rfcuda_blocks((size_t)N * OC, 256), 256, 0, rfcuda_stream()>>>(out, part, bias, N, OC, nchunk, bf16);
      RFCUDA_LAUNCHED();
    }
  }
  return 0;
}
