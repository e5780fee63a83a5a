/* cuda backend: GPT-2 LayerNorm (eps 1e-5, biased variance), the CUDA twin
 * of src/tensor/cpu_layernorm.c with the same arguments, and the LLaMA
 * family's RMSNorm (the twin of cpu_llama.c's), built the same way.
 *
 * Forward and dinp are one warp per row: a row is at most a few thousand
 * floats, so 32 lanes and a shuffle reduction keep every lane busy with no
 * block-wide barrier (RMSNorm's forward of a decode step's few rows takes a
 * block per row, rms_row_kernel). dw and db are sums over rows; float atomics would make
 * their bits depend on scheduling, so instead one thread sums one column of
 * one block of LN_ROW_BLOCK rows serially into a partial, and a second
 * kernel adds the partials in block order, in double. That is the CPU's
 * two-level sum (cpu_reduce.c) with the same block size and order, and the
 * partials avoid contracted multiply-adds, so dw and db get the CPU's bits
 * whenever mean and rstd are the same. bf16 mode rounds the outputs of both
 * norms to bf16 (activations); rstd, mean and the gradients stay fp32. */
#include "cuda_common.cuh"

#define LN_EPS         1e-5f
#define LN_WARPS       8   /* rows per block in the per-row kernels */
#define LN_ROW_BLOCK   64  /* rows per dw/db partial: CPU_ROW_BLOCK */
#define LN_COL_THREADS 128 /* columns per block in the column kernels */
#define LN_FEW_ROWS    256 /* calls of at most this many rows (decode steps) take rms_row_kernel */

/* Sum over the warp. Each butterfly step adds the same two values on both
 * lanes of a pair and float addition commutes, so every lane ends with the
 * same bits, and the order depends on nothing but the lane layout. */
__device__ __forceinline__ float ln_warp_sum(float v)
{
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

/* Warp w of block b normalises row b*LN_WARPS + w; lane l handles columns
 * l, l+32, ... Two passes over the row, as on the CPU: the one-pass
 * E[x^2]-E[x]^2 cancels badly in float. */
__global__ void __launch_bounds__(32 * LN_WARPS)
    ln_forward_kernel(float *out, float *mean, float *rstd, const float *inp, const float *w, const float *b, int N,
                      int C, int bf16)
{
  int row = blockIdx.x * LN_WARPS + threadIdx.x / 32, lane = threadIdx.x % 32;

  if (row >= N) return; /* the whole warp leaves together: row is warp-uniform */
  const float *x = inp + (size_t)row * C;
  float       *o = out + (size_t)row * C;
  float        m = 0.0f, v = 0.0f, s;

  for (int c = lane; c < C; c += 32) m += x[c];
  m = ln_warp_sum(m) / C;
  for (int c = lane; c < C; c += 32) {
    float d = x[c] - m;
    v += d * d;
  }
  v = ln_warp_sum(v) / C;
  s = 1.0f / sqrtf(v + LN_EPS);
  for (int c = lane; c < C; c += 32) {
    float y = (x[c] - m) * s * w[c] + b[c];
    o[c]    = bf16 ? rfcuda_round_bf16(y) : y;
  }
  if (lane == 0) {
    if (mean) mean[row] = m;
    if (rstd) rstd[row] = s;
  }
}

/* dinp += (w*g - mean(w*g) - norm*mean(w*g*norm)) * rstd, one warp per row
 * as in the forward. */
__global__ void __launch_bounds__(32 * LN_WARPS)
    ln_backward_dinp_kernel(float *dinp, const float *dout, const float *inp, const float *w, const float *mean,
                            const float *rstd, int N, int C)
{
  int row = blockIdx.x * LN_WARPS + threadIdx.x / 32, lane = threadIdx.x % 32;

  if (row >= N) return;
  const float *x = inp + (size_t)row * C, *g = dout + (size_t)row * C;
  float       *dx = dinp + (size_t)row * C;
  float        m = mean[row], s = rstd[row], gm = 0.0f, gnm = 0.0f;

  for (int c = lane; c < C; c += 32) {
    float dnorm = w[c] * g[c];
    gm += dnorm;
    gnm += dnorm * (x[c] - m) * s;
  }
  gm  = ln_warp_sum(gm) / C;
  gnm = ln_warp_sum(gnm) / C;
  for (int c = lane; c < C; c += 32) {
    float norm = (x[c] - m) * s;
    dx[c] += (w[c] * g[c] - gm - norm * gnm) * s;
  }
}

/* Block (blk, tile): thread t sums column c = tile*LN_COL_THREADS + t over
 * rows blk*LN_ROW_BLOCK .. +LN_ROW_BLOCK-1 in row order, into
 * pw[blk][c] (norm*g) and pb[blk][c] (g). Loads are coalesced across the
 * threads of a row; __fmul_rn/__fadd_rn keep nvcc from fusing the
 * multiply-add, which the CPU (ISO C, no contraction) does not do. */
__global__ void __launch_bounds__(LN_COL_THREADS)
    ln_backward_partials_kernel(float *pw, float *pb, const float *dout, const float *inp, const float *mean,
                                const float *rstd, int N, int C)
{
  int blk = blockIdx.x, c = blockIdx.y * LN_COL_THREADS + threadIdx.x;
  int n0 = blk * LN_ROW_BLOCK, n1 = n0 + LN_ROW_BLOCK < N ? n0 + LN_ROW_BLOCK : N;

  if (c >= C) return;
  float sw = 0.0f, sb = 0.0f;
  for (int n = n0; n < n1; n++) {
    float g = dout[(size_t)n * C + c], norm = __fmul_rn(inp[(size_t)n * C + c] - mean[n], rstd[n]);
    sw = __fadd_rn(sw, __fmul_rn(norm, g));
    sb = __fadd_rn(sb, g);
  }
  pw[(size_t)blk * C + c] = sw;
  pb[(size_t)blk * C + c] = sb;
}

/* Thread c: dst[c] += the nblk partials of column c, added in block order in
 * double (cpu_partials_reduce). */
__global__ void __launch_bounds__(LN_COL_THREADS)
    ln_partials_reduce_kernel(float *dst, const float *part, int nblk, int C)
{
  int c = blockIdx.x * LN_COL_THREADS + threadIdx.x;

  if (c >= C) return;
  double acc = dst[c];
  for (int b = 0; b < nblk; b++) acc += part[(size_t)b * C + c];
  dst[c] = (float)acc;
}

extern "C" int rfcuda_layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *w,
                                        const float *b, int N, int C)
{
  RFCUDA_REQUIRE(N >= 0 && C > 0, "layernorm_forward: bad sizes N %d C %d", N, C);
  if (N == 0) return 0;
  ln_forward_kernel<<<(N + LN_WARPS - 1) / LN_WARPS, 32 * LN_WARPS, 0, rfcuda_stream()>>>(out, mean, rstd, inp, w, b, N,
                                                                                          C,
                                                                                          rfcuda_get_precision() == 1);
  RFCUDA_LAUNCHED();
  return 0;
}

extern "C" int rfcuda_layernorm_backward(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                                         const float *w, const float *mean, const float *rstd, int N, int C)
{
  int    nblk  = (N + LN_ROW_BLOCK - 1) / LN_ROW_BLOCK, ntile = (C + LN_COL_THREADS - 1) / LN_COL_THREADS;
  size_t bytes = (size_t)2 * nblk * C * sizeof(float);
  float *part; /* [2][nblk][C]: block partials of dw, then of db */

  RFCUDA_REQUIRE(N >= 0 && C > 0, "layernorm_backward: bad sizes N %d C %d", N, C);
  RFCUDA_REQUIRE(ntile <= 65535, "layernorm_backward: C %d is too wide for the column grid", C);
  if (N == 0) return 0;
  if (dinp) {
    ln_backward_dinp_kernel<<<(N + LN_WARPS - 1) / LN_WARPS, 32 * LN_WARPS, 0, rfcuda_stream()>>>(dinp, dout, inp, w,
                                                                                                  mean, rstd, N, C);
    RFCUDA_LAUNCHED();
  }
  if (!dw && !db) return 0;
  if (rfcuda_scratch(bytes, (void **)&part)) return 1;
  ln_backward_partials_kernel<<<dim3(nblk, ntile), LN_COL_THREADS, 0, rfcuda_stream()>>>(part, part + (size_t)nblk * C,
                                                                                         dout, inp, mean, rstd, N, C);
  RFCUDA_LAUNCHED();
  if (dw) {
    ln_partials_reduce_kernel<<<ntile, LN_COL_THREADS, 0, rfcuda_stream()>>>(dw, part, nblk, C);
    RFCUDA_LAUNCHED();
  }
  if (db) {
    ln_partials_reduce_kernel<<<ntile, LN_COL_THREADS, 0, rfcuda_stream()>>>(db, part + (size_t)nblk * C, nblk, C);
    RFCUDA_LAUNCHED();
  }
  return 0;
}

/* ---- RMSNorm ----------------------------------------------------------------- */

/* One warp per row as in ln_forward_kernel: rstd = 1/sqrt(mean x^2 + eps),
 * y = (x*rstd)*w, the CPU's order of the two products. */
__global__ void __launch_bounds__(32 * LN_WARPS)
  rms_forward_kernel(float *out, float *rstd, const float *inp, const float *w, int N, int C, float eps, int bf16)
{
  int row = blockIdx.x * LN_WARPS + threadIdx.x / 32, lane = threadIdx.x % 32;

  if (row >= N) return; /* warp-uniform */
  const float *x = inp + (size_t)row * C;
  float       *o = out + (size_t)row * C;
  float        ss = 0.0f, s;

  for (int c = lane; c < C; c += 32) ss += x[c] * x[c];
  s = 1.0f / sqrtf(ln_warp_sum(ss) / C + eps);
  for (int c = lane; c < C; c += 32) {
    float y = __fmul_rn(__fmul_rn(x[c], s), w[c]);
    o[c]    = bf16 ? rfcuda_round_bf16(y) : y;
  }
  if (lane == 0 && rstd) rstd[row] = s;
}

/* A block per row, for the few rows of a decode step: one warp per row
 * left 28 dependent loads per lane on a 896-wide row and took ~14 us a row.
 * The scale is rfcuda_rms_scale's (an order fixed by C alone, which the
 * few-row matmuls share when they norm their input): a row's bits do not
 * depend on how many rows its call has, up to LN_FEW_ROWS (more take
 * rms_forward_kernel, whose order differs). */
__global__ void __launch_bounds__(RFCUDA_ROW_THREADS)
    rms_row_kernel(float *out, float *rstd, const float *inp, const float *w, int C, float eps, int bf16)
{
  __shared__ float sh[RFCUDA_ROW_THREADS / 32];
  const float     *x = inp + (size_t)blockIdx.x * C;
  float           *o = out + (size_t)blockIdx.x * C;
  const float      s = rfcuda_rms_scale(x, C, eps, sh);

  for (int c = threadIdx.x; c < C; c += RFCUDA_ROW_THREADS) o[c] = rfcuda_rms_apply(x[c], s, w[c], bf16);
  if (threadIdx.x == 0 && rstd) rstd[blockIdx.x] = s;
}

/* dinp += r (w*g - x r^2 mean(w*g*x)), r = rstd; one warp per row. */
__global__ void __launch_bounds__(32 * LN_WARPS)
    rms_backward_dinp_kernel(float *dinp, const float *dout, const float *inp, const float *w, const float *rstd, int N,
                             int C)
{
  int row = blockIdx.x * LN_WARPS + threadIdx.x / 32, lane = threadIdx.x % 32;

  if (row >= N) return;
  const float *x = inp + (size_t)row * C, *g = dout + (size_t)row * C;
  float       *dx = dinp + (size_t)row * C;
  float        r = rstd[row], dot = 0.0f, k;

  for (int c = lane; c < C; c += 32) dot += w[c] * g[c] * x[c];
  k = r * r * ln_warp_sum(dot) / C;
  for (int c = lane; c < C; c += 32) dx[c] += r * (w[c] * g[c] - x[c] * k);
}

/* The dw partials as ln_backward_partials_kernel's: thread (blk, column c)
 * sums (g*x)*r over the block's rows in row order, uncontracted, which is
 * how cpu_rmsnorm_backward forms its partials. */
__global__ void __launch_bounds__(LN_COL_THREADS)
  rms_backward_partials_kernel(float *pw, const float *dout, const float *inp, const float *rstd, int N, int C)
{
  int blk = blockIdx.x, c = blockIdx.y * LN_COL_THREADS + threadIdx.x;
  int n0 = blk * LN_ROW_BLOCK, n1 = n0 + LN_ROW_BLOCK < N ? n0 + LN_ROW_BLOCK : N;

  if (c >= C) return;
  float sw = 0.0f;
  for (int n = n0; n < n1; n++)
    sw = __fadd_rn(sw, __fmul_rn(__fmul_rn(dout[(size_t)n * C + c], inp[(size_t)n * C + c]), rstd[n]));
  pw[(size_t)blk * C + c] = sw;
}

extern "C" int rfcuda_rmsnorm_forward(float *out, float *rstd, const float *inp, const float *w, int N, int C,
                                      float eps)
{
  RFCUDA_REQUIRE(N >= 0 && C > 0, "rmsnorm_forward: bad sizes N %d C %d", N, C);
  if (N == 0) return 0;
  if (N <= LN_FEW_ROWS)
    rms_row_kernel<<<N, RFCUDA_ROW_THREADS, 0, rfcuda_stream()>>>(out, rstd, inp, w, C, eps,
                                                                  rfcuda_get_precision() == 1);
  else
    rms_forward_kernel<<<(N + LN_WARPS - 1) / LN_WARPS, 32 * LN_WARPS, 0, rfcuda_stream()>>>(out, rstd, inp, w, N, C,
                                                                                             eps,
                                                                                             rfcuda_get_precision() ==
                                                                                                 1);
  RFCUDA_LAUNCHED();
  return 0;
}

/* dw deterministically: block partials, then their sum in block order
 * (ln_partials_reduce_kernel), as layernorm_backward does. */
extern "C" int rfcuda_rmsnorm_backward(float *dinp, float *dw, const float *dout, const float *inp, const float *w,
                                       const float *rstd, int N, int C)
{
  int    nblk = (N + LN_ROW_BLOCK - 1) / LN_ROW_BLOCK, ntile = (C + LN_COL_THREADS - 1) / LN_COL_THREADS;
  float *part; /* [nblk][C] block partials of dw */

  RFCUDA_REQUIRE(N >= 0 && C > 0, "rmsnorm_backward: bad sizes N %d C %d", N, C);
  RFCUDA_REQUIRE(ntile <= 65535, "rmsnorm_backward: C %d is too wide for the column grid", C);
  if (N == 0) return 0;
  if (dinp) {
    rms_backward_dinp_kernel<<<(N + LN_WARPS - 1) / LN_WARPS, 32 * LN_WARPS, 0, rfcuda_stream()>>>(dinp, dout, inp, w,
                                                                                                   rstd, N, C);
    RFCUDA_LAUNCHED();
  }
  if (!dw) return 0;
  if (rfcuda_scratch((size_t)nblk * C * sizeof(float), (void **)&part)) return 1;
  rms_backward_partials_kernel<<<dim3(nblk, ntile), LN_COL_THREADS, 0, rfcuda_stream()>>>(part, dout, inp, rstd, N, C);
  RFCUDA_LAUNCHED();
  ln_partials_reduce_kernel<<<ntile, LN_COL_THREADS, 0, rfcuda_stream()>>>(dw, part, nblk, C);
  RFCUDA_LAUNCHED();
  return 0;
}

/* ---- Qwen3's per-head q/k RMSNorm ---------------------------------------------- */

/* One warp per (row, head) of the NH + NKV normed heads, the CPU's order:
 * sum of squares, s = 1/sqrt(ss/hd + eps), (x*s)*w (rounded to bf16 in bf16
 * mode, as RMSNorm's output). */
__global__ void __launch_bounds__(32 * LN_WARPS)
    qk_norm_forward_kernel(float *qkv, float *in, float *rstd, const float *wq, const float *wk, int N, int NH, int nh,
                           int hd, size_t W, float eps, int bf16)
{
  size_t u = (size_t)blockIdx.x * LN_WARPS + threadIdx.x / 32;
  int    lane = threadIdx.x % 32;

  if (u >= (size_t)N * nh) return; /* warp-uniform */
  size_t       n = u / nh;
  int          h = (int)(u % nh);
  float       *x = qkv + n * W + (size_t)h * hd;
  const float *w = h < NH ? wq : wk;
  float        ss = 0.0f, s;

  for (int c = lane; c < hd; c += 32) ss += x[c] * x[c];
  s = 1.0f / sqrtf(ln_warp_sum(ss) / hd + eps);
  if (in) {
    for (int c = lane; c < hd; c += 32) in[u * hd + c] = x[c];
    if (lane == 0) rstd[u] = s;
  }
  __syncwarp();
  for (int c = lane; c < hd; c += 32) {
    float y = __fmul_rn(__fmul_rn(x[c], s), w[c]);
    x[c]    = bf16 ? rfcuda_round_bf16(y) : y;
  }
}

/* d out -> d in in place, one warp per (row, head): r (w*g - x r^2 mean(w*g*x)).
 * Runs after the partials kernel, which reads the incoming d out. */
__global__ void __launch_bounds__(32 * LN_WARPS)
    qk_norm_backward_dinp_kernel(float *dqkv, const float *in, const float *rstd, const float *wq, const float *wk,
                                 int N, int NH, int nh, int hd, size_t W)
{
  size_t u = (size_t)blockIdx.x * LN_WARPS + threadIdx.x / 32;
  int    lane = threadIdx.x % 32;

  if (u >= (size_t)N * nh) return;
  size_t       n = u / nh;
  int          h = (int)(u % nh);
  float       *g = dqkv + n * W + (size_t)h * hd;
  const float *x = in + u * hd, *w = h < NH ? wq : wk;
  float        r = rstd[u], dot = 0.0f, k;

  for (int c = lane; c < hd; c += 32) dot += w[c] * g[c] * x[c];
  k = r * r * ln_warp_sum(dot) / hd;
  for (int c = lane; c < hd; c += 32) g[c] = r * (w[c] * g[c] - x[c] * k);
}

/* Thread (blk, column c of q then k): the block's rows in row order and
 * each row's heads in head order, as cpu_qk_norm_backward adds them. */
__global__ void __launch_bounds__(LN_COL_THREADS)
    qk_norm_partials_kernel(float *part, const float *dqkv, const float *in, const float *rstd, int N, int NH, int nh,
                            int hd, size_t W, int nblk)
{
  int blk = blockIdx.x, c2 = blockIdx.y * LN_COL_THREADS + threadIdx.x;
  int n0 = blk * LN_ROW_BLOCK, n1 = n0 + LN_ROW_BLOCK < N ? n0 + LN_ROW_BLOCK : N;

  if (c2 >= 2 * hd) return;
  int   k = c2 / hd, c = c2 % hd, h0 = k ? NH : 0, h1 = k ? nh : NH;
  float sw = 0.0f;
  for (int n = n0; n < n1; n++)
    for (int h = h0; h < h1; h++) {
      size_t u = (size_t)n * nh + h;
      sw       = __fadd_rn(sw, __fmul_rn(__fmul_rn(dqkv[(size_t)n * W + (size_t)h * hd + c], in[u * hd + c]), rstd[u]));
    }
  part[((size_t)k * nblk + blk) * hd + c] = sw;
}

extern "C" int rfcuda_qk_norm_forward(float *qkv, float *in, float *rstd, const float *wq, const float *wk, int N,
                                      int NH, int NKV, int hd, float eps)
{
  size_t units = (size_t)N * (NH + NKV);

  RFCUDA_REQUIRE(N >= 0 && NH > 0 && NKV > 0 && hd > 0,
                 "qk_norm_forward: bad sizes N %d n_head %d n_kv_head %d head_dim %d", N, NH, NKV, hd);
  if (!units) return 0;
  qk_norm_forward_kernel<<<(unsigned)((units + LN_WARPS - 1) / LN_WARPS), 32 * LN_WARPS, 0, rfcuda_stream()>>>(
      qkv, in, rstd, wq, wk, N, NH, NH + NKV, hd, (size_t)(NH + 2 * NKV) * hd, eps, rfcuda_get_precision() == 1);
  RFCUDA_LAUNCHED();
  return 0;
}

extern "C" int rfcuda_qk_norm_backward(float *dqkv, float *dwq, float *dwk, const float *in, const float *rstd,
                                       const float *wq, const float *wk, int N, int NH, int NKV, int hd)
{
  int    nblk = (N + LN_ROW_BLOCK - 1) / LN_ROW_BLOCK, ntile = (2 * hd + LN_COL_THREADS - 1) / LN_COL_THREADS;
  size_t units = (size_t)N * (NH + NKV), W = (size_t)(NH + 2 * NKV) * hd;
  float *part; /* [2][nblk][hd] */

  RFCUDA_REQUIRE(N >= 0 && NH > 0 && NKV > 0 && hd > 0,
                 "qk_norm_backward: bad sizes N %d n_head %d n_kv_head %d head_dim %d", N, NH, NKV, hd);
  if (!units) return 0;
  if (dwq || dwk) {
    if (rfcuda_scratch((size_t)2 * nblk * hd * sizeof(float), (void **)&part)) return 1;
    qk_norm_partials_kernel<<<dim3(nblk, ntile), LN_COL_THREADS, 0, rfcuda_stream()>>>(part, dqkv, in, rstd, N, NH,
                                                                                       NH + NKV, hd, W, nblk);
    RFCUDA_LAUNCHED();
    if (dwq) {
      ln_partials_reduce_kernel<<<(hd + LN_COL_THREADS - 1) / LN_COL_THREADS, LN_COL_THREADS, 0, rfcuda_stream()>>>(
          dwq, part, nblk, hd);
      RFCUDA_LAUNCHED();
    }
    if (dwk) {
      ln_partials_reduce_kernel<<<(hd + LN_COL_THREADS - 1) / LN_COL_THREADS, LN_COL_THREADS, 0, rfcuda_stream()>>>(
          dwk, part + (size_t)nblk * hd, nblk, hd);
      RFCUDA_LAUNCHED();
    }
  }
  qk_norm_backward_dinp_kernel<<<(unsigned)((units + LN_WARPS - 1) / LN_WARPS), 32 * LN_WARPS, 0, rfcuda_stream()>>>(
      dqkv, in, rstd, wq, wk, N, NH, NH + NKV, hd, W);
  RFCUDA_LAUNCHED();
  return 0;
}
