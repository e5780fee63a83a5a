/* cuda backend: token log-probabilities under a sampling distribution
 * (log-softmax of tempered logits, optionally restricted to an allowed set
 * per row), their entropy, their gradient, and the vocabulary-parallel
 * variants: the CUDA twin of src/tensor/cpu_logprob.c.
 *
 * One block per row; thread i takes set members i, i+LP_THREADS, ... (the
 * whole vocabulary: coalesced columns). Tempered logits are rounded to float
 * exactly as on the CPU (__fmul_rn: no fused multiply-add), the exps are
 * float and their sums double, as on the CPU, so the results agree with it
 * to about 1e-7 relative. Sums are per-thread in member order, then a warp
 * butterfly, then the warps in order: the same bits on every run.
 *
 * Argument errors. The CPU checks masks and targets on the host; here they
 * are device arrays, so the kernels check them as they go (never reading
 * outside a row), record what they find in an error word in scratch, and
 * the host reads it back after the kernel. That costs a synchronisation, so
 * only masked calls (mask_off != NULL) do it; an unmasked call with a target
 * >= V gets NaN for that row instead of an error. */
#include "cuda_common.cuh"
#include <limits.h>
#include <math.h>

#define LP_THREADS 256
#define LP_WARPS   (LP_THREADS / 32)

/* bits of the error word */
#define LP_ERR_MASK_OFF   1 /* mask_off negative or decreasing */
#define LP_ERR_MASK_ID    2 /* an allowed id outside [0,V) */
#define LP_ERR_TARGET_V   4 /* a target >= V */
#define LP_ERR_TARGET_SET 8 /* a target outside its row's set */

/* A row's allowed set: ids[0..n-1], or with ids NULL every column but the
 * global id skip (INT_MAX: none skipped). Set members are numbered in
 * ascending id order and thread i takes the members k = i (mod LP_THREADS)
 * in k0 .. k0+n-1; with skip, member k is id k + (k >= skip), the position
 * it has in the explicit list of the same ids, so the compact set "every id
 * but e" (tensor.h) sums the same numbers in the same threads and order. */
struct LpSet {
  const int *ids;
  int        n, skip, k0, v0;
};

/* err[0] |= bit; err[1] = the smallest row with an error (err may be NULL) */
__device__ __forceinline__ void lp_flag(int *err, int bit, int row)
{
  if (!err) return;
  atomicOr(err, bit);
  atomicMin(err + 1, row);
}

/* Row n's set (tensor.h) on columns v0 .. v0+ncol-1: a non-empty range of
 * mask_ids, else everything. A bad range (negative or decreasing) is flagged
 * and read as everything, so nothing outside mask_ids is touched. A range
 * of one negative id -(e+1) is every id but e; an e >= ncol is flagged (err
 * is given only where v0 is 0 and ncol the vocabulary) and read as
 * everything. */
__device__ LpSet lp_row_set(const int *mask_off, const int *mask_ids, int n, int ncol, int v0, int *err)
{
  LpSet s = {NULL, ncol, INT_MAX, 0, 0};

  if (mask_off) {
    int a = mask_off[n], b = mask_off[n + 1];
    if (a < 0 || b < a) {
      if (threadIdx.x == 0) lp_flag(err, LP_ERR_MASK_OFF, n);
    } else if (b == a + 1 && mask_ids[a] < 0) {
      long long e = -(long long)mask_ids[a] - 1, lo = v0, hi = (long long)v0 + ncol;
      if (err && e >= ncol) {
        if (threadIdx.x == 0) lp_flag(err, LP_ERR_MASK_ID, n);
        return s;
      }
      /* members below id X: X - (X > e); those of the shard are k0 .. k0+n-1 */
      s.skip = (int)e;
      s.v0   = v0;
      s.k0   = (int)(lo - (lo > e));
      s.n    = (int)(hi - (hi > e)) - s.k0;
    } else if (b > a) {
      s.ids = mask_ids + a;
      s.n   = b - a;
    }
  }
  return s;
}

/* This thread's first member and the end of the members. */
__device__ __forceinline__ int lp_first(LpSet s)
{
  return s.k0 + (int)((threadIdx.x + LP_THREADS - (unsigned)s.k0 % LP_THREADS) % LP_THREADS);
}
__device__ __forceinline__ int lp_end(LpSet s) { return s.k0 + s.n; }

/* Local column of set member k (global id minus v0), or -1 when the id is
 * outside [v0, v0+ncol): skipped (a shard's foreign id), and flagged when
 * err is given (a full-vocabulary op, where it is an error). */
__device__ __forceinline__ int lp_column(LpSet s, int k, int ncol, int v0, int *err, int row)
{
  if (!s.ids) return k + (k >= s.skip) - s.v0;
  long long j = (long long)s.ids[k] - v0;
  if (j >= 0 && j < ncol) return (int)j;
  lp_flag(err, LP_ERR_MASK_ID, row);
  return -1;
}

/* Block-wide sum and max: warp butterflies (both lanes of a pair add the same
 * two values, so all lanes agree), then every thread combines the warps in
 * order. red holds LP_WARPS doubles; the closing barrier lets it be reused. */
__device__ double lp_block_sum(double v, double *red)
{
  double r = 0.0;

  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = v;
  __syncthreads();
  for (int w = 0; w < LP_WARPS; w++) r += red[w];
  __syncthreads();
  return r;
}

__device__ double lp_block_max(double v, double *red)
{
  double r = -INFINITY;

  for (int o = 16; o > 0; o >>= 1) {
    double w = __shfl_xor_sync(0xffffffffu, v, o);
    v        = w > v ? w : v;
  }
  if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = v;
  __syncthreads();
  for (int w = 0; w < LP_WARPS; w++) r = red[w] > r ? red[w] : r;
  __syncthreads();
  return r;
}

/* Is target t (a column) in the set? Block-wide: every thread must call it
 * (s is the same for the whole block). */
__device__ bool lp_target_in_set(LpSet s, int t)
{
  int found = 0;

  if (!s.ids) return t != s.skip;
  for (int k = threadIdx.x; k < s.n; k += LP_THREADS) found |= s.ids[k] == t;
  return __syncthreads_or(found) != 0;
}

/* Over row x's set, y = inv_temp*x: m = max y, sum = sum exp(y - m) (float
 * exps, double sum), and with want_w wsum = sum e (y - m) (the entropy's
 * numerator: H = log sum - wsum/sum, in which the large m cancels exactly).
 * Every thread returns the same values. */
struct LpStats {
  float  m;
  double sum, wsum;
};

__device__ LpStats lp_row_stats(const float *x, LpSet s, int V, float inv_temp, bool want_w, int *err, int row,
                                double *red)
{
  LpStats st;
  float   m = -INFINITY;
  double  sum = 0.0, wsum = 0.0;

  for (int k = lp_first(s); k < lp_end(s); k += LP_THREADS) {
    int j = lp_column(s, k, V, 0, err, row);
    if (j < 0) continue;
    float y = __fmul_rn(x[j], inv_temp);
    m       = y > m ? y : m;
  }
  st.m = (float)lp_block_max(m, red); /* a float's max is exact in double */
  for (int k = lp_first(s); k < lp_end(s); k += LP_THREADS) {
    int j = lp_column(s, k, V, 0, NULL, row);
    if (j < 0) continue;
    float y = __fmul_rn(x[j], inv_temp), e = expf(y - st.m);
    sum += e;
    if (want_w) wsum += __dmul_rn((double)e, (double)y - (double)st.m);
  }
  st.sum  = lp_block_sum(sum, red);
  st.wsum = want_w ? lp_block_sum(wsum, red) : 0.0; /* want_w is block-uniform */
  return st;
}

/* Block n = row n (see the file comment for the thread mapping). */
__global__ void __launch_bounds__(LP_THREADS)
    lp_forward_kernel(float *logprob, float *lse, float *entropy, const float *logits, const int *target,
                      float inv_temp, const int *mask_off, const int *mask_ids, int V, int *err)
{
  __shared__ double red[LP_WARPS];
  const int         n = blockIdx.x, t = target[n];
  const float      *x = logits + (size_t)n * V;
  const LpSet       s = lp_row_set(mask_off, mask_ids, n, V, 0, err);

  if (t >= V && threadIdx.x == 0) lp_flag(err, LP_ERR_TARGET_V, n);
  if (t >= 0 && t < V && !lp_target_in_set(s, t) && threadIdx.x == 0) lp_flag(err, LP_ERR_TARGET_SET, n);

  /* lse for every row, target or not: callers may want prompt entropies */
  LpStats st = lp_row_stats(x, s, V, inv_temp, entropy && t >= 0, err, n, red);
  if (threadIdx.x == 0) {
    double ls = log(st.sum);
    float  l  = st.m + (float)ls;
    if (lse) lse[n] = l;
    logprob[n] = t < 0 ? 0.0f : t >= V ? __int_as_float(0x7fc00000) : __fmul_rn(x[t], inv_temp) - l;
    if (entropy) entropy[n] = t >= 0 ? (float)(ls - st.wsum / st.sum) : 0.0f;
  }
}

/* Block n = row n of dlogits [N, Vl], columns v0 .. v0+Vl-1 (v0 0 and Vl V
 * for the full vocabulary, shard 0: there foreign ids and targets are
 * errors, on a shard they are skipped). Thread i writes columns (or set
 * members) i, i+LP_THREADS, ... A masked row is zeroed, then the set's
 * columns are written, then thread 0 adds g at the target: barriers order
 * the three, as the statements are ordered on the CPU. */
__global__ void __launch_bounds__(LP_THREADS)
    lp_backward_kernel(float *dlogits, const float *logits, const float *lse, const int *target, const float *dlogprob,
                       float inv_temp, const int *mask_off, const int *mask_ids, int Vl, int v0, int shard, int *err)
{
  __shared__ double red[LP_WARPS];
  const int         n = blockIdx.x, t = target[n], tl = t - v0;
  const float      *x  = logits + (size_t)n * Vl;
  float            *dx = dlogits + (size_t)n * Vl;
  const LpSet       s  = lp_row_set(mask_off, mask_ids, n, Vl, v0, shard ? NULL : err);
  int              *cerr = shard ? NULL : err; /* where a foreign id is an error */

  if (t < 0) { /* t, s, shard and lse are block-uniform: the branches below are too */
    for (int j = threadIdx.x; j < Vl; j += LP_THREADS) dx[j] = 0.0f;
    return;
  }
  if (!shard) {
    if (t >= Vl) {
      if (threadIdx.x == 0) lp_flag(err, LP_ERR_TARGET_V, n);
      for (int j = threadIdx.x; j < Vl; j += LP_THREADS) dx[j] = __int_as_float(0x7fc00000);
      return;
    }
    if (!lp_target_in_set(s, t) && threadIdx.x == 0) lp_flag(err, LP_ERR_TARGET_SET, n);
  }

  /* d logprob / d x_v = inv_temp (onehot_v - q_v), q_v = 0 outside the set */
  float l = lse ? lse[n] : 0.0f, g = __fmul_rn(dlogprob[n], inv_temp);
  if (!lse) {
    LpStats st = lp_row_stats(x, s, Vl, inv_temp, false, cerr, n, red);
    l          = st.m + (float)log(st.sum);
  }
  if (s.ids) {
    for (int j = threadIdx.x; j < Vl; j += LP_THREADS) dx[j] = 0.0f;
    __syncthreads();
    for (int k = lp_first(s); k < lp_end(s); k += LP_THREADS) {
      int j = lp_column(s, k, Vl, v0, cerr, n);
      if (j >= 0) dx[j] = __fmul_rn(-g, expf(__fmul_rn(x[j], inv_temp) - l));
    }
    __syncthreads();
    if (threadIdx.x == 0 && tl >= 0 && tl < Vl) dx[tl] += g;
  } else { /* every column, or every column but skip's (0 there, then g added at the target: the masked path's bits) */
    long long js = (long long)s.skip - v0;
    for (int j = threadIdx.x; j < Vl; j += LP_THREADS) {
      float d = j == js ? 0.0f : __fmul_rn(-g, expf(__fmul_rn(x[j], inv_temp) - l));
      dx[j]   = j == tl ? __fadd_rn(d, g) : d;
    }
  }
}

/* Block n = row n of a shard's logits [N, Vl]: stats[4n..4n+3] (tensor.h),
 * in double like the CPU (the float-rounded tempered logit, then double
 * exps). Foreign ids are skipped. */
__global__ void __launch_bounds__(LP_THREADS)
    lp_stats_kernel(double *stats, const float *logits, const int *target, float inv_temp, const int *mask_off,
                    const int *mask_ids, int Vl, int v0)
{
  __shared__ double red[LP_WARPS];
  const int         n = blockIdx.x;
  const float      *x = logits + (size_t)n * Vl;
  const LpSet       s = lp_row_set(mask_off, mask_ids, n, Vl, v0, NULL);
  double            m = -INFINITY, sum = 0.0, wsum = 0.0;

  for (int k = lp_first(s); k < lp_end(s); k += LP_THREADS) {
    int j = lp_column(s, k, Vl, v0, NULL, n);
    if (j < 0) continue;
    double y = (double)__fmul_rn(x[j], inv_temp);
    m        = y > m ? y : m;
  }
  m = lp_block_max(m, red);
  if (m > -INFINITY) { /* block-uniform */
    for (int k = lp_first(s); k < lp_end(s); k += LP_THREADS) {
      int j = lp_column(s, k, Vl, v0, NULL, n);
      if (j < 0) continue;
      double y = (double)__fmul_rn(x[j], inv_temp) - m, e = exp(y);
      sum += e;
      wsum += __dmul_rn(e, y);
    }
  }
  sum  = lp_block_sum(sum, red);
  wsum = lp_block_sum(wsum, red);
  if (threadIdx.x == 0) {
    int       t  = target[n];
    long long tl = (long long)t - v0;
    stats[4 * (size_t)n + 0] = m;
    stats[4 * (size_t)n + 1] = sum;
    stats[4 * (size_t)n + 2] = wsum;
    stats[4 * (size_t)n + 3] = t >= 0 && tl >= 0 && tl < Vl ? (double)__fmul_rn(x[tl], inv_temp) : 0.0;
  }
}

/* ---- host side -------------------------------------------------------------- */

/* The error word (0) and first bad row (INT_MAX-ish) in scratch, set on the
 * stream before the kernel. */
static int lp_err_begin(int **err)
{
  if (rfcuda_scratch(2 * sizeof(int), (void **)err)) return 1;
  RFCUDA_CHECK(cudaMemsetAsync(*err, 0, sizeof(int), rfcuda_stream()));
  RFCUDA_CHECK(cudaMemsetAsync(*err + 1, 0x7f, sizeof(int), rfcuda_stream()));
  return 0;
}

/* Waits for the kernel and turns the error word into a failure. */
static int lp_err_end(const char *op, const int *err, int V)
{
  int h[2];

  RFCUDA_CHECK(cudaMemcpyAsync(h, err, sizeof h, cudaMemcpyDeviceToHost, rfcuda_stream()));
  RFCUDA_CHECK(cudaStreamSynchronize(rfcuda_stream()));
  RFCUDA_REQUIRE(!(h[0] & LP_ERR_MASK_OFF), "%s: mask_off is negative or decreasing (first bad row %d)", op, h[1]);
  RFCUDA_REQUIRE(!(h[0] & LP_ERR_MASK_ID), "%s: a row allows a token outside the vocabulary [0,%d) (first bad row %d)",
                 op, V, h[1]);
  RFCUDA_REQUIRE(!(h[0] & LP_ERR_TARGET_V), "%s: a row's target is >= vocab_size %d (first bad row %d)", op, V, h[1]);
  RFCUDA_REQUIRE(!(h[0] & LP_ERR_TARGET_SET), "%s: a row's target is outside its allowed set (first bad row %d)", op,
                 h[1]);
  return 0;
}

static int lp_check_temp(const char *op, float inv_temp)
{
  RFCUDA_REQUIRE(inv_temp > 0 && isfinite(inv_temp), "%s: inv_temp must be positive and finite, not %g", op,
                 (double)inv_temp);
  return 0;
}

extern "C" int rfcuda_logprob_forward(float *logprob, float *lse, float *entropy, const float *logits,
                                      const int *target, float inv_temp, const int *mask_off, const int *mask_ids,
                                      int N, int V)
{
  int *err = NULL;

  if (lp_check_temp("logprob", inv_temp)) return 1;
  RFCUDA_REQUIRE(N >= 0 && V > 0, "logprob: bad sizes N %d V %d", N, V);
  if (N == 0) return 0;
  if (mask_off && lp_err_begin(&err)) return 1;
  lp_forward_kernel<<<N, LP_THREADS, 0, rfcuda_stream()>>>(logprob, lse, entropy, logits, target, inv_temp, mask_off,
                                                           mask_ids, V, err);
  RFCUDA_LAUNCHED();
  return mask_off ? lp_err_end("logprob", err, V) : 0;
}

extern "C" int rfcuda_logprob_backward(float *dlogits, const float *logits, const float *lse, const int *target,
                                       const float *dlogprob, float inv_temp, const int *mask_off, const int *mask_ids,
                                       int N, int V)
{
  int *err = NULL;

  if (lp_check_temp("logprob", inv_temp)) return 1;
  RFCUDA_REQUIRE(N >= 0 && V > 0, "logprob: bad sizes N %d V %d", N, V);
  if (N == 0) return 0;
  if (mask_off && lp_err_begin(&err)) return 1;
  lp_backward_kernel<<<N, LP_THREADS, 0, rfcuda_stream()>>>(dlogits, logits, lse, target, dlogprob, inv_temp, mask_off,
                                                            mask_ids, V, 0, 0, err);
  RFCUDA_LAUNCHED();
  return mask_off ? lp_err_end("logprob", err, V) : 0;
}

extern "C" int rfcuda_logprob_stats(double *stats, const float *logits, const int *target, float inv_temp,
                                    const int *mask_off, const int *mask_ids, int N, int Vl, int v0)
{
  if (lp_check_temp("logprob_stats", inv_temp)) return 1;
  RFCUDA_REQUIRE(N >= 0 && Vl >= 0, "logprob_stats: bad sizes N %d Vl %d", N, Vl);
  if (N == 0) return 0;
  lp_stats_kernel<<<N, LP_THREADS, 0, rfcuda_stream()>>>(stats, logits, target, inv_temp, mask_off, mask_ids, Vl, v0);
  RFCUDA_LAUNCHED();
  return 0;
}

extern "C" int rfcuda_logprob_backward_shard(float *dlogits, const float *logits, const float *lse, const int *target,
                                             const float *dlogprob, float inv_temp, const int *mask_off,
                                             const int *mask_ids, int N, int Vl, int v0)
{
  if (lp_check_temp("logprob_backward_shard", inv_temp)) return 1;
  RFCUDA_REQUIRE(lse, "logprob_backward_shard: the global lse is required");
  RFCUDA_REQUIRE(N >= 0 && Vl >= 0, "logprob_backward_shard: bad sizes N %d Vl %d", N, Vl);
  if (N == 0) return 0;
  lp_backward_kernel<<<N, LP_THREADS, 0, rfcuda_stream()>>>(dlogits, logits, lse, target, dlogprob, inv_temp, mask_off,
                                                            mask_ids, Vl, v0, 1, NULL);
  RFCUDA_LAUNCHED();
  return 0;
}
