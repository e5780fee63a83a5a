/* CUDA backend: the embedding lookup and its scatter-add.
 *
 * Backward without float atomics. Rows that share a token add into the same
 * row of dwte, and atomicAdd would sum them in whatever order the hardware
 * picks. Instead the rows are grouped by token with a sort, and one warp per
 * token adds that token's rows into its dwte row in row order, with the
 * running sum in a register: the same additions in the same order as the
 * cpu backend (dwte[t,c] += dout[n,c] for n ascending), so the bits equal
 * the cpu backend's, every run. dwpe is the same scatter keyed by position.
 *
 * The sort is a bitonic sort of 64-bit keys (index << 32 | row). Every key
 * is distinct, so the sorted order is unique and no sort stability is
 * needed; within one index the rows come out ascending. Bitonic sort is a
 * fixed network of compare-exchanges: simple enough to be obviously right,
 * O(N log^2 N) work, and cheap at the sizes that occur (N = B*T rows). The
 * stages whose pairs lie within a 2048-key tile run in shared memory, so a
 * sort of 64K rows is 21 launches. (The simpler one-thread-per-channel loop
 * over all rows keeps only C threads busy and chains N dependent global
 * read-modify-writes; cub's radix sort would need libstdc++ at link time.)
 * A token that fills much of the batch makes one warp's loop long; that
 * costs time, never correctness. */
#include "cuda_common.cuh"

#define ENC_THREADS 256
#define ENC_TILE    2048 /* keys per shared-memory tile: 16 KiB, 1024 threads */
#define ENC_NONE    0xffffffffu /* the key of a row outside the table's index range */

/* out[n,c] = wte[tok[n]-v0, c] (0 outside the shard) + wpe[pos[n], c] (0 without wpe) */
__global__ void enc_forward(float *out, const int *tok, const int *pos, const float *wte, const float *wpe, int N,
                            int C, int v0, int Vl)
{
  size_t total = (size_t)N * C;

  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
    size_t n = i / (size_t)C, c = i % (size_t)C;
    int    t = tok[n];
    float  te = t >= v0 && (long long)t < (long long)v0 + Vl ? wte[(size_t)(t - v0) * C + c] : 0.0f;
    float  pe = wpe ? wpe[(size_t)pos[n] * C + c] : 0.0f;
    out[i]    = __fadd_rn(te, pe);
  }
}

/* keys[n] = (idx[n]-lo) << 32 | n for lo <= idx[n] < lo+count, ENC_NONE << 32 | n
 * otherwise; keys[N..P) = all ones (after every real key) */
__global__ void enc_keys(unsigned long long *keys, const int *idx, int N, size_t P, long long lo, long long count)
{
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < P; i += (size_t)gridDim.x * blockDim.x) {
    unsigned long long key = ~0ull;
    if (i < (size_t)N) {
      long long    t   = idx[i];
      unsigned int hi  = t >= lo && t < lo + count ? (unsigned int)(t - lo) : ENC_NONE;
      key              = (unsigned long long)hi << 32 | (unsigned long long)i;
    }
    keys[i] = key;
  }
}

/* One compare-exchange of bitonic sort: stage k (the length of the bitonic
 * sequences being merged), step j. Pair (i, i+j) is ordered ascending where
 * bit k of i is clear, descending where it is set; t numbers the pairs. */
__device__ __forceinline__ void enc_cmpx(unsigned long long *a, size_t t, size_t j, size_t k, size_t base)
{
  size_t             i = 2 * t - (t & (j - 1)), l = i + j;
  unsigned long long x = a[i], y = a[l];
  bool               up = ((base + i) & k) == 0;

  if ((x > y) == up) a[i] = y, a[l] = x;
}

/* Stages kfirst..klast (powers of two), each for its steps j < tile, on
 * tiles of `tile` keys in shared memory; blockDim.x = tile/2 (one pair per
 * thread). Bit k is read from the global index, so a tile knows its
 * direction in a merge longer than itself. */
__global__ void enc_bitonic_tile(unsigned long long *keys, size_t kfirst, size_t klast, unsigned tile)
{
  extern __shared__ unsigned long long sh[];
  size_t                               base = (size_t)blockIdx.x * tile;
  unsigned                             t    = threadIdx.x, half = tile / 2;

  sh[t]        = keys[base + t];
  sh[t + half] = keys[base + t + half];
  __syncthreads();
  for (size_t k = kfirst; k <= klast; k <<= 1)
    for (size_t j = (k < tile ? k : tile) / 2; j > 0; j >>= 1) {
      enc_cmpx(sh, t, j, k, base);
      __syncthreads();
    }
  keys[base + t]        = sh[t];
  keys[base + t + half] = sh[t + half];
}

/* One step j >= tile of stage k over all P keys in global memory */
__global__ void enc_bitonic_step(unsigned long long *keys, size_t P, size_t k, size_t j)
{
  for (size_t t = blockIdx.x * (size_t)blockDim.x + threadIdx.x; t < P / 2; t += (size_t)gridDim.x * blockDim.x)
    enc_cmpx(keys, t, j, k, 0);
}

/* One warp per sorted key; the first key of each index's run adds the run's
 * rows, in row order, into the table row of that index. */
__global__ void enc_scatter(float *tab, const float *dout, const unsigned long long *keys, int N, int C)
{
  size_t warps = ((size_t)gridDim.x * blockDim.x) / 32;
  int    lane  = threadIdx.x & 31;

  for (size_t i = (blockIdx.x * (size_t)blockDim.x + threadIdx.x) / 32; i < (size_t)N; i += warps) {
    unsigned int hi = (unsigned int)(keys[i] >> 32);
    size_t       end;
    float       *row;

    if (hi == ENC_NONE || (i > 0 && (unsigned int)(keys[i - 1] >> 32) == hi)) continue;
    for (end = i + 1; end < (size_t)N && (unsigned int)(keys[end] >> 32) == hi; end++) {}
    row = tab + (size_t)hi * C;
    for (int c = lane; c < C; c += 32) {
      float acc = row[c];
      for (size_t r = i; r < end; r++) acc = __fadd_rn(acc, dout[(size_t)(unsigned int)keys[r] * C + c]);
      row[c] = acc;
    }
  }
}

/* Sorts keys[0..P) (P a power of two >= 2) ascending. */
static int enc_sort(unsigned long long *keys, size_t P)
{
  unsigned tile = P < ENC_TILE ? (unsigned)P : ENC_TILE;
  unsigned grid = (unsigned)(P / tile);
  size_t   shm  = (size_t)tile * sizeof(unsigned long long);

  enc_bitonic_tile<<<grid, tile / 2, shm, rfcuda_stream()>>>(keys, 2, tile, tile);
  RFCUDA_LAUNCHED();
  for (size_t k = 2 * (size_t)tile; k <= P; k <<= 1) {
    for (size_t j = k / 2; j >= tile; j >>= 1) {
      enc_bitonic_step<<<rfcuda_blocks(P / 2, ENC_THREADS), ENC_THREADS, 0, rfcuda_stream()>>>(keys, P, k, j);
      RFCUDA_LAUNCHED();
    }
    enc_bitonic_tile<<<grid, tile / 2, shm, rfcuda_stream()>>>(keys, k, k, tile);
    RFCUDA_LAUNCHED();
  }
  return 0;
}

/* tab[idx[n]-lo, :] += dout[n, :] for lo <= idx[n] < lo+count, rows in order */
static int enc_scatter_by(float *tab, const float *dout, const int *idx, int N, int C, long long lo, long long count,
                          unsigned long long *keys, size_t P)
{
  enc_keys<<<rfcuda_blocks(P, ENC_THREADS), ENC_THREADS, 0, rfcuda_stream()>>>(keys, idx, N, P, lo, count);
  RFCUDA_LAUNCHED();
  if (enc_sort(keys, P)) return 1;
  enc_scatter<<<rfcuda_blocks((size_t)N * 32, ENC_THREADS), ENC_THREADS, 0, rfcuda_stream()>>>(tab, dout, keys, N, C);
  RFCUDA_LAUNCHED();
  return 0;
}

int rfcuda_encoder_forward(float *out, const int *tok, const int *pos, const float *wte, const float *wpe, int N, int C,
                           int v0, int Vl)
{
  RFCUDA_REQUIRE(N >= 0 && C >= 0, "encoder_forward: negative size (N %d, C %d)", N, C);
  if (!N || !C) return 0;
  enc_forward<<<rfcuda_blocks((size_t)N * C, ENC_THREADS), ENC_THREADS, 0, rfcuda_stream()>>>(out, tok, pos, wte, wpe,
                                                                                              N, C, v0, Vl);
  RFCUDA_LAUNCHED();
  return 0;
}

int rfcuda_encoder_backward(float *dwte, float *dwpe, const float *dout, const int *tok, const int *pos, int N, int C,
                            int v0, int Vl)
{
  size_t              P = 2;
  void               *s;
  unsigned long long *keys;

  RFCUDA_REQUIRE(N >= 0 && C >= 0, "encoder_backward: negative size (N %d, C %d)", N, C);
  RFCUDA_REQUIRE(N <= (1 << 30), "encoder_backward: %d rows is more than the sort handles (2^30)", N);
  if (!N || !C || (!dwte && !dwpe)) return 0;
  while (P < (size_t)N) P <<= 1;
  if (rfcuda_scratch(P * sizeof(unsigned long long), &s)) return 1;
  keys = (unsigned long long *)s;
  /* the two scatters reuse the keys in stream order */
  if (dwte && enc_scatter_by(dwte, dout, tok, N, C, v0, Vl, keys, P)) return 1;
  if (dwpe && enc_scatter_by(dwpe, dout, pos, N, C, 0, INT32_MAX, keys, P)) return 1;
  return 0;
}
