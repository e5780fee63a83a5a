/* cuda backend: causal self-attention, the CUDA twin of
 * src/tensor/cpu_attention.c: the training forward/backward and the KV-cache
 * path used by generation.
 *
 * Training. The backend's pair is tiled, like the cpu's: it keeps each
 * row's log-sum-exp and never a T x T array (described before it below).
 * q, k, v (and dout) are first permuted from the token-major qkv
 * [B,T,C+2Ckv] into head-major scratch, so that every (b, kv head) unit is
 * one product at a fixed stride and each product is a single
 * cublasGemmStridedBatchedEx call over the units; the grp = NH/NKV query
 * heads of a kv head meet in dK and dV as terms of one GEMM's inner
 * dimension, summed by cuBLAS deterministically, with no second pass. In
 * fp32 precision the GEMMs use CUBLAS_COMPUTE_32F_PEDANTIC: true fp32
 * whatever math mode the handle is in (TF32 would lose ~3 digits against
 * the CPU). In bf16 precision their operands are bf16, as the linear
 * layers' are, accumulated and stored in fp32; the softmax runs on fp32
 * scores. cuBLAS gives the same bits on every run on the same GPU, and the
 * softmax kernels sum in a fixed order, so the op is deterministic.
 *
 * KV cache. One kernel stores every row's k and v, and only then (the next
 * launch on the same stream) does a second kernel attend: a prefill row
 * reads the rows before it from the same call. The caches hold the NKV kv
 * heads, [nslot, Tmax, Ckv]. The attend kernel is one block per (row, query
 * head) and reads its kv head's keys and values with loads that are
 * coalesced along the head dimension (float4 when aligned), several keys in
 * flight per lane, because decoding is bound by the memory bandwidth of
 * the cache. Its scores live in shared memory (or in scratch past 48 KiB)
 * and its sums run in a fixed order. */
#include "cuda_common.cuh"
#include <limits.h>
#include <math.h>

#define ATT_WARPS        8     /* rows per block of the softmax kernels, one warp per row */
#define ATT_PERM_THREADS 256   /* threads per block of the permutations */
#define ATT_BATCH_MAX    65535 /* units (b, kv head) per strided-batched GEMM call */
#define ATT_DEC_THREADS  128 /* threads per (row, head) block of the KV-cache attend */
#define ATT_DEC_WARPS    (ATT_DEC_THREADS / 32)
#define ATT_DEC_UNROLL   4   /* keys per lane group and pass of the score loop (loads in flight) */
#define ATT_SMEM_MAX     (48 * 1024) /* dynamic shared memory usable without opting in */

/* ---- reductions ------------------------------------------------------------ */

/* Butterfly over the warp: both lanes of a pair add the same two values
 * (float addition commutes), so every lane ends with the same bits and the
 * order is fixed by the lane layout. */
__device__ __forceinline__ float att_warp_sum(float v)
{
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float att_warp_max(float v)
{
  for (int o = 16; o > 0; o >>= 1) {
    float w = __shfl_xor_sync(0xffffffffu, v, o);
    v       = w > v ? w : v;
  }
  return v;
}

/* Block-wide sum or max for ATT_DEC_THREADS threads: warp butterflies, then
 * every thread adds the warps' results in warp order (the same bits in every
 * thread). red holds ATT_DEC_WARPS floats; the closing barrier lets the
 * caller reuse it, and makes the caller's shared writes before the call
 * visible after it. */
__device__ float att_block_sum(float v, float *red)
{
  float r = 0.0f;

  v = att_warp_sum(v);
  if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = v;
  __syncthreads();
  for (int w = 0; w < ATT_DEC_WARPS; w++) r += red[w];
  __syncthreads();
  return r;
}

__device__ float att_block_max(float v, float *red)
{
  float r = -INFINITY;

  v = att_warp_max(v);
  if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = v;
  __syncthreads();
  for (int w = 0; w < ATT_DEC_WARPS; w++) r = red[w] > r ? red[w] : r;
  __syncthreads();
  return r;
}

/* ---- training forward and backward ------------------------------------------- */

/* dst[b][h][t][d] = src[(b*T + t)*ld + col0 + h*hs + d] for the nh heads of
 * one matrix: q (nh NH, col0 0), k (NKV, C) or v (NKV, C + Ckv) of qkv with
 * ld C + 2Ckv, or dout (NH, 0, ld C). One thread per destination element in
 * a grid-stride loop: writes are coalesced, reads are coalesced along each
 * head's hs contiguous floats. */
/* Where element i of the permuted [B][nh][T][hs] array sits in the
 * row-major [B*T, ld] one. */
__device__ __forceinline__ size_t att_row_offset(size_t i, int T, int nh, int hs, int ld, int col0)
{
  size_t r = i;
  int    d = (int)(r % hs);
  r /= hs;
  int t = (int)(r % T);
  r /= T;
  int    h = (int)(r % nh);
  size_t b = r / nh;
  return (b * T + t) * ld + col0 + (size_t)h * hs + d;
}

__device__ __forceinline__ void att_store(float *dst, size_t i, float x) { dst[i] = x; }
__device__ __forceinline__ void att_store(__nv_bfloat16 *dst, size_t i, float x) { dst[i] = __float2bfloat16_rn(x); }

template <typename Tout>
__global__ void att_permute_kernel(Tout *dst, const float *src, int B, int T, int nh, int hs, int ld, int col0)
{
  size_t total = (size_t)B * nh * T * hs;

  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x)
    att_store(dst, i, src[att_row_offset(i, T, nh, hs, ld, col0)]);
}

/* The reverse: dst[(b*T + t)*ld + col0 + h*hs + d] = (or +=) src[b][h][t][d],
 * rounded to bf16 when asked. Each destination element has one thread, so
 * the += has no race. */
__global__ void att_unpermute_kernel(float *dst, const float *src, int B, int T, int nh, int hs, int ld, int col0,
                                     int accumulate, int bf16)
{
  size_t total = (size_t)B * nh * T * hs;

  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
    float *o = dst + att_row_offset(i, T, nh, hs, ld, col0);
    float  y = accumulate ? *o + src[i] : src[i];
    *o       = bf16 ? rfcuda_round_bf16(y) : y;
  }
}

/* One warp's row of L scaled scores: columns 0..t become their softmax
 * (max subtracted), columns t+1..L-1 zeros; p16 (may be NULL) gets them
 * rounded to bf16; lse (may be NULL) gets max + log(sum). A lane only
 * rereads what it wrote. */
__device__ void att_row_softmax(float *p, __nv_bfloat16 *p16, int t, int L, int lane, float *lse)
{
  float m = -INFINITY, sum = 0.0f, inv;

  for (int j = lane; j <= t; j += 32) m = p[j] > m ? p[j] : m;
  m = att_warp_max(m);
  for (int j = lane; j <= t; j += 32) {
    float e = expf(p[j] - m);
    p[j]    = e;
    sum += e;
  }
  sum = att_warp_sum(sum);
  inv = 1.0f / sum;
  for (int j = lane; j < L; j += 32) {
    float y = j <= t ? p[j] * inv : 0.0f;
    p[j]    = y;
    if (p16) p16[j] = __float2bfloat16_rn(y);
  }
  if (lse && lane == 0) *lse = m + logf(sum);
}

/* One strided-batched GEMM (column-major, C = alpha op(A) op(B) + beta C,
 * fp32 output): true fp32, or bf16 operands (bf) accumulated in fp32.
 * Strides and leading dimensions count elements of the operands' type. */
static int att_gemm_beta(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, float alpha, const void *A,
                         int lda, long long sA, const void *Bm, int ldb, long long sB, float beta, float *Cm, int ldc,
                         long long sC, int batch, int bf)
{
  const cudaDataType_t t = bf ? CUDA_R_16BF : CUDA_R_32F;

  RFCUBLAS_CHECK(cublasGemmStridedBatchedEx(rfcuda_cublas(), ta, tb, m, n, k, &alpha, A, t, lda, sA, Bm, t, ldb, sB,
                                            &beta, Cm, CUDA_R_32F, ldc, sC, batch,
                                            bf ? CUBLAS_COMPUTE_32F : CUBLAS_COMPUTE_32F_PEDANTIC,
                                            CUBLAS_GEMM_DEFAULT));
  return 0;
}

static int att_gemm(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, float alpha, const void *A,
                    int lda, long long sA, const void *Bm, int ldb, long long sB, float *Cm, int ldc, long long sC,
                    int batch, int bf)
{
  return att_gemm_beta(ta, tb, m, n, k, alpha, A, lda, sA, Bm, ldb, sB, 0.0f, Cm, ldc, sC, batch, bf);
}

/* One matrix of nh heads (at column col0 of rows ld apart) into head-major
 * scratch: fp32, or bf16 when bf (dst then holds __nv_bfloat16) */
static int att_permute(void *dst, const float *src, int B, int T, int nh, int hs, int ld, int col0, int bf)
{
  size_t   n = (size_t)B * nh * T * hs;
  unsigned g = rfcuda_blocks(n, ATT_PERM_THREADS);

  if (bf)
    att_permute_kernel<<<g, ATT_PERM_THREADS, 0, rfcuda_stream()>>>((__nv_bfloat16 *)dst, src, B, T, nh, hs, ld, col0);
  else att_permute_kernel<<<g, ATT_PERM_THREADS, 0, rfcuda_stream()>>>((float *)dst, src, B, T, nh, hs, ld, col0);
  RFCUDA_LAUNCHED();
  return 0;
}

/* q, k and v of qkv [B*T, C + 2Ckv] into their head-major places (elements
 * of es bytes): q [B,NKV,T,grp*hs] (a kv head's query heads side by side
 * per position), then k and v [B,NKV,T,hs]. */
static int att_permute_qkv(char *q, char *k, char *v, const float *qkv, int B, int T, int NH, int NKV, int hs, int bf)
{
  int C = NH * hs, Ckv = NKV * hs, ld = C + 2 * Ckv;

  if (att_permute(q, qkv, B, T, NKV, NH / NKV * hs, ld, 0, bf)) return 1;
  if (att_permute(k, qkv, B, T, NKV, hs, ld, C, bf)) return 1;
  return att_permute(v, qkv, B, T, NKV, hs, ld, C + Ckv, bf);
}

static int att_unpermute(float *dst, const float *src, int B, int T, int nh, int hs, int ld, int col0, int accumulate,
                         int bf16)
{
  size_t n = (size_t)B * nh * T * hs;

  att_unpermute_kernel<<<rfcuda_blocks(n, ATT_PERM_THREADS), ATT_PERM_THREADS, 0, rfcuda_stream()>>>(dst, src, B, T, nh,
                                                                                                     hs, ld, col0,
                                                                                                     accumulate, bf16);
  RFCUDA_LAUNCHED();
  return 0;
}

/* Query heads NH over NKV kv heads (NKV divides NH), head size C/NH (C the
 * query width, which Qwen3's head_dim makes other than the residual's). */
static int att_check_heads(const char *op, int C, int NH, int NKV)
{
  RFCUDA_REQUIRE(NH > 0 && C > 0 && C % NH == 0, "%s: query width %d is not a multiple of n_head %d", op, C, NH);
  RFCUDA_REQUIRE(NKV > 0 && NH % NKV == 0, "%s: n_kv_head %d does not divide n_head %d", op, NKV, NH);
  return 0;
}

static int att_check_sizes(const char *op, int B, int T, int C, int NH, int NKV)
{
  if (att_check_heads(op, C, NH, NKV)) return 1;
  RFCUDA_REQUIRE(B >= 0 && T >= 0, "%s: bad sizes B %d T %d", op, B, T);
  RFCUDA_REQUIRE((size_t)B * NH * T <= INT_MAX, "%s: B*n_head*T = %zu rows of att is too many", op, (size_t)B * NH * T);
  return 0;
}

/* ---- training forward and backward, tiled: no T x T array --------------------- */

/* The tiled pair (the cuda backend's attention_forward/backward) is the cpu
 * backend's algorithm on cuBLAS: queries go in blocks of qb positions, and
 * a block's scores are a panel over the keys it can see (0..t1), so only the log-sum-exp of each row is kept and the
 * backward recomputes the probabilities from it. q and dout are permuted
 * into [B, NKV, T, grp*hs]: a unit (b, kv head)'s group of query heads is
 * then one row-major [T*grp, hs] matrix whose row t*grp + g is query head
 * kh*grp + g at position t, so a query block is grp*(t1-t0) consecutive rows
 * and each product is one strided-batched GEMM over the units, with no copy
 * of k or v per query head. The panels of a block ([grp*(t1-t0), t1] per
 * unit, fp32, plus their bf16 copies in bf16 precision) are made for chunks
 * of units whose panels fit att_panel_bytes, so scratch is linear in T.
 * The backward runs the blocks last to first: the last block reaches every
 * key, so its dK and dV products set them (beta 0) and the earlier blocks
 * add theirs in a fixed order. Each query row's dQ comes from its own block.
 * Every product's shape depends on T, the head shapes and the chunk only,
 * and the kernels sum in a fixed order, so the op gives the same bits on
 * every run on the same GPU. */
#define ATT_QBLOCK_MIN   128 /* query positions per block, at least (T/16 rounded up to 64 above 2048) */
#define ATT_PANEL_BYTES  ((size_t)256 << 20)

static size_t att_panel_bytes = ATT_PANEL_BYTES;

extern "C" size_t rfcuda_attention_set_panel_bytes(size_t bytes)
{
  size_t was = att_panel_bytes;

  att_panel_bytes = bytes ? bytes : ATT_PANEL_BYTES;
  return was;
}

/* Query positions per block: a function of T alone, so a sequence's
 * products do not depend on the batch. */
static int att_qblock(int T)
{
  int q = (T / 16 + 63) / 64 * 64;

  q = q < ATT_QBLOCK_MIN ? ATT_QBLOCK_MIN : q;
  return q < T ? q : T;
}

/* Units (b, kv head) per chunk: as many whose fp32 panel of the widest
 * block (qb*grp rows of T) fits att_panel_bytes, at least 1. */
static int att_units_per_chunk(int qb, int grp, int T, int nu)
{
  size_t per = (size_t)qb * grp * T * sizeof(float), cb = att_panel_bytes / per;

  cb = cb < 1 ? 1 : cb;
  cb = cb > (size_t)nu ? (size_t)nu : cb;
  return cb > ATT_BATCH_MAX ? ATT_BATCH_MAX : (int)cb;
}

/* Where row i of a chunk's panels (units u0.., nr rows each) keeps its
 * log-sum-exp in [B, NH, T], and its query position. */
__device__ __forceinline__ size_t att_panel_lse_index(int i, int nr, int t0, int grp, int u0, int NKV, int NH, int T,
                                                      int *t)
{
  int u = u0 + i / nr, r = i % nr, b = u / NKV, h = (u % NKV) * grp + r % grp;

  *t = t0 + r / grp;
  return ((size_t)b * NH + h) * T + *t;
}

/* Warp per panel row (L = t1 columns; query t): the scaled scores of
 * columns 0..t become their softmax, columns t+1..L-1 zeros; p16 (bf16
 * precision; else NULL) gets the probabilities rounded; lse (NULL: a forward
 * that no backward follows) gets max + log(sum). */
__global__ void __launch_bounds__(32 * ATT_WARPS)
    att_panel_softmax_kernel(float *S, __nv_bfloat16 *p16, float *lse, int rows, int nr, int L, int t0, int grp, int u0,
                             int NKV, int NH, int T)
{
  int i = blockIdx.x * ATT_WARPS + threadIdx.x / 32, lane = threadIdx.x % 32, t;

  if (i >= rows) return; /* warp-uniform */
  size_t at = att_panel_lse_index(i, nr, t0, grp, u0, NKV, NH, T, &t);
  att_row_softmax(S + (size_t)i * L, p16 ? p16 + (size_t)i * L : NULL, t, L, lane, lse ? lse + at : NULL);
}

/* Warp per panel row, S the scaled scores and dP = dO V^T on entry:
 * P = exp(S - lse) into S and dS = P * (dP - sum_j P dP) * scale into dP on
 * columns 0..t, zeros above; ds16 and p16 (bf16 precision; else NULL) get
 * them rounded. */
__global__ void __launch_bounds__(32 * ATT_WARPS)
    att_panel_backward_kernel(float *S, float *dP, __nv_bfloat16 *p16, __nv_bfloat16 *ds16, const float *lse, int rows,
                              int nr, int L, int t0, int grp, int u0, int NKV, int NH, int T, float scale)
{
  int i = blockIdx.x * ATT_WARPS + threadIdx.x / 32, lane = threadIdx.x % 32, t;

  if (i >= rows) return;
  size_t at = att_panel_lse_index(i, nr, t0, grp, u0, NKV, NH, T, &t);
  float *s = S + (size_t)i * L, *d = dP + (size_t)i * L, l = lse[at], dot = 0.0f;

  for (int j = lane; j <= t; j += 32) {
    float p = expf(s[j] - l);
    s[j]    = p;
    dot += p * d[j];
  }
  dot = att_warp_sum(dot);
  for (int j = lane; j < L; j += 32) {
    float p = j <= t ? s[j] : 0.0f, y = j <= t ? p * (d[j] - dot) * scale : 0.0f;
    s[j]    = p;
    d[j]    = y;
    if (ds16) {
      ds16[(size_t)i * L + j] = __float2bfloat16_rn(y);
      p16[(size_t)i * L + j]  = __float2bfloat16_rn(p);
    }
  }
}

/* Per query block and chunk of units: S = scale Q_blk K^T (column-major
 * S^T = K^T' Q_blk, op T on k), the softmax with its log-sum-exp, then
 * Y_blk = P V (Y^T = V^T P^T, N N). Scratch: q, k, v (fp32, or bf16), y,
 * the panel and its bf16 copy. lse may be NULL. */
extern "C" int rfcuda_attention_forward(float *out, float *lse, const float *qkv, int B, int T, int C, int NH, int NKV)
{
  if (att_check_sizes("attention_forward", B, T, C, NH, NKV)) return 1;
  if (B == 0 || T == 0) return 0;

  const int    bf = rfcuda_get_precision() == 1;
  const size_t es = bf ? sizeof(__nv_bfloat16) : sizeof(float);
  int          hs = C / NH, Ckv = NKV * hs, grp = NH / NKV, nu = B * NKV, qb = att_qblock(T),
      cb           = att_units_per_chunk(qb, grp, T, nu);
  size_t       btc = (size_t)B * T * C, btk = (size_t)B * T * Ckv, pan = (size_t)cb * qb * grp * T;
  size_t       qkv_bytes = rfcuda_align((btc + 2 * btk) * es), y_bytes = rfcuda_align(btc * sizeof(float)),
         s_bytes    = rfcuda_align(pan * sizeof(float));
  long long    sq = (long long)T * grp * hs, sk = (long long)T * hs; /* per unit: q and y, k and v */
  float        scale = 1.0f / sqrtf((float)hs), *y, *S;
  char        *base, *q, *k, *v;
  __nv_bfloat16 *p16 = NULL;

  if (rfcuda_scratch(qkv_bytes + y_bytes + s_bytes + (bf ? rfcuda_align(pan * es) : 0), (void **)&base)) return 1;
  q = base, k = q + btc * es, v = k + btk * es;
  y = (float *)(base + qkv_bytes), S = (float *)(base + qkv_bytes + y_bytes);
  if (bf) p16 = (__nv_bfloat16 *)(base + qkv_bytes + y_bytes + s_bytes);

  if (att_permute_qkv(q, k, v, qkv, B, T, NH, NKV, hs, bf)) return 1;
  for (int t0 = 0; t0 < T; t0 += qb) {
    int       L = t0 + qb < T ? t0 + qb : T, nr = (L - t0) * grp;
    long long sp = (long long)nr * L;

    for (int u0 = 0; u0 < nu; u0 += cb) {
      int         nb = nu - u0 < cb ? nu - u0 : cb;
      size_t      oq = (size_t)u0 * sq + (size_t)t0 * grp * hs, okv = (size_t)u0 * sk;
      const void *P  = bf ? (const void *)p16 : (const void *)S;
      unsigned    g  = (unsigned)((nb * nr + ATT_WARPS - 1) / ATT_WARPS);

      if (att_gemm(CUBLAS_OP_T, CUBLAS_OP_N, L, nr, hs, scale, k + okv * es, hs, sk, q + oq * es, hs, sq, S, L, sp, nb,
                   bf))
        return 1;
      att_panel_softmax_kernel<<<g, 32 * ATT_WARPS, 0, rfcuda_stream()>>>(S, p16, lse, nb * nr, nr, L, t0, grp, u0, NKV,
                                                                          NH, T);
      RFCUDA_LAUNCHED();
      if (att_gemm(CUBLAS_OP_N, CUBLAS_OP_N, hs, nr, L, 1.0f, v + okv * es, hs, sk, P, L, sp, y + oq, hs, sq, nb, bf))
        return 1;
    }
  }
  return att_unpermute(out, y, B, T, NKV, grp * hs, C, 0, 0, bf);
}

/* Blocks last to first, per chunk of units: S = scale Q_blk K^T and
 * dP = dO_blk V^T, the kernel's P and dS, then dQ_blk = dS K, dK += dS^T Q_blk
 * and dV += P^T dO_blk over the block's keys 0..t1 (beta 0 for the last
 * block, which sets every key); then three kernels add dQ, dK and dV into
 * dqkv, one thread per element. */
extern "C" int rfcuda_attention_backward(float *dqkv, const float *dout, const float *qkv, const float *lse, int B,
                                         int T, int C, int NH, int NKV)
{
  if (att_check_sizes("attention_backward", B, T, C, NH, NKV)) return 1;
  if (B == 0 || T == 0) return 0;

  const int    bf = rfcuda_get_precision() == 1;
  const size_t es = bf ? sizeof(__nv_bfloat16) : sizeof(float);
  int          hs = C / NH, Ckv = NKV * hs, grp = NH / NKV, nu = B * NKV, qb = att_qblock(T),
      cb = att_units_per_chunk(qb, grp, T, nu), nqb = (T + qb - 1) / qb;
  size_t       btc = (size_t)B * T * C, btk = (size_t)B * T * Ckv, pan = (size_t)cb * qb * grp * T;
  size_t in_bytes = rfcuda_align((2 * btc + 2 * btk) * es), out_bytes = rfcuda_align((btc + 2 * btk) * sizeof(float)),
         s_bytes         = rfcuda_align(pan * sizeof(float));
  size_t       h_bytes = bf ? rfcuda_align(pan * es) : 0;
  long long    sq = (long long)T * grp * hs, sk = (long long)T * hs;
  float        scale = 1.0f / sqrtf((float)hs), *dq, *dk, *dv, *S, *dP;
  char        *base, *q, *k, *v, *dO;
  __nv_bfloat16 *p16 = NULL, *ds16 = NULL;

  if (rfcuda_scratch(in_bytes + out_bytes + 2 * s_bytes + 2 * h_bytes, (void **)&base)) return 1;
  q = base, k = q + btc * es, v = k + btk * es, dO = v + btk * es;
  dq = (float *)(base + in_bytes), dk = dq + btc, dv = dk + btk;
  S = (float *)(base + in_bytes + out_bytes), dP = (float *)(base + in_bytes + out_bytes + s_bytes);
  if (bf) {
    p16  = (__nv_bfloat16 *)(base + in_bytes + out_bytes + 2 * s_bytes);
    ds16 = (__nv_bfloat16 *)(base + in_bytes + out_bytes + 2 * s_bytes + h_bytes);
  }

  if (att_permute_qkv(q, k, v, qkv, B, T, NH, NKV, hs, bf)) return 1;
  if (att_permute(dO, dout, B, T, NKV, grp * hs, C, 0, bf)) return 1;
  for (int ib = nqb - 1; ib >= 0; ib--) {
    int       t0 = ib * qb, L = t0 + qb < T ? t0 + qb : T, nr = (L - t0) * grp;
    long long sp   = (long long)nr * L;
    float     beta = ib == nqb - 1 ? 0.0f : 1.0f;

    for (int u0 = 0; u0 < nu; u0 += cb) {
      int         nb = nu - u0 < cb ? nu - u0 : cb;
      size_t      oq = (size_t)u0 * sq + (size_t)t0 * grp * hs, okv = (size_t)u0 * sk;
      const void *dSop = bf ? (const void *)ds16 : (const void *)dP, *Pop = bf ? (const void *)p16 : (const void *)S;
      unsigned    g    = (unsigned)((nb * nr + ATT_WARPS - 1) / ATT_WARPS);

      if (att_gemm(CUBLAS_OP_T, CUBLAS_OP_N, L, nr, hs, scale, k + okv * es, hs, sk, q + oq * es, hs, sq, S, L, sp, nb,
                   bf))
        return 1;
      if (att_gemm(CUBLAS_OP_T, CUBLAS_OP_N, L, nr, hs, 1.0f, v + okv * es, hs, sk, dO + oq * es, hs, sq, dP, L, sp, nb,
                   bf))
        return 1;
      att_panel_backward_kernel<<<g, 32 * ATT_WARPS, 0, rfcuda_stream()>>>(S, dP, p16, ds16, lse, nb * nr, nr, L, t0,
                                                                           grp, u0, NKV, NH, T, scale);
      RFCUDA_LAUNCHED();
      if (att_gemm(CUBLAS_OP_N, CUBLAS_OP_N, hs, nr, L, 1.0f, k + okv * es, hs, sk, dSop, L, sp, dq + oq, hs, sq, nb,
                   bf))
        return 1;
      if (att_gemm_beta(CUBLAS_OP_N, CUBLAS_OP_T, hs, L, nr, 1.0f, q + oq * es, hs, sq, dSop, L, sp, beta, dk + okv, hs,
                        sk, nb, bf))
        return 1;
      if (att_gemm_beta(CUBLAS_OP_N, CUBLAS_OP_T, hs, L, nr, 1.0f, dO + oq * es, hs, sq, Pop, L, sp, beta, dv + okv, hs,
                        sk, nb, bf))
        return 1;
    }
  }
  if (att_unpermute(dqkv, dq, B, T, NKV, grp * hs, C + 2 * Ckv, 0, 1, 0)) return 1;
  if (att_unpermute(dqkv, dk, B, T, NKV, hs, C + 2 * Ckv, C, 1, 0)) return 1;
  return att_unpermute(dqkv, dv, B, T, NKV, hs, C + 2 * Ckv, C + Ckv, 1, 0);
}

/* ---- KV cache ------------------------------------------------------------------ */

/* Thread per (row, column) of the N rows' k and v (Ckv columns each, after
 * the C of q in rows of C + 2Ckv): copies them into the caches
 * [nslot, Tmax, Ckv] at (slot, pos). Rows outside the cache are skipped
 * here and reported by the attend kernel. */
__global__ void att_kv_store_kernel(float *kcache, float *vcache, const float *qkv, const int *slot, const int *pos,
                                    int N, int Tmax, int C, int Ckv)
{
  size_t total = (size_t)N * Ckv, C3 = (size_t)C + 2 * (size_t)Ckv;

  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
    size_t r = i / Ckv, c = i % Ckv;
    int    sl = slot[r], p = pos[r];
    if (sl < 0 || p < 0 || p >= Tmax) continue;
    size_t at  = ((size_t)sl * Tmax + p) * Ckv + c;
    kcache[at] = qkv[r * C3 + C + c];
    vcache[at] = qkv[r * C3 + C + Ckv + c];
  }
}

/* Lanes that share one key in the score pass: the next power of two >= the
 * head's nc chunks (of VW floats), at most 32, so groups are aligned blocks
 * of lanes that a butterfly over offsets < P keeps apart. */
__host__ __device__ static inline int att_dec_group(int nc)
{
  int p = 1;

  while (p < nc && p < 32) p *= 2;
  return p;
}

/* Floats of the P.V partials: NG = threads/nc key groups of hs each, or one
 * row of hs when the head has more chunks than the block has threads. */
__host__ __device__ static inline int att_dec_part_len(int hs, int vw)
{
  int nc = hs / vw;

  return nc <= ATT_DEC_THREADS ? ATT_DEC_THREADS / nc * hs : hs;
}

__host__ __device__ static inline int att_round4(int n) { return (n + 3) / 4 * 4; }

/* Dynamic shared memory of the attend kernel, in floats: q, the P.V
 * partials, the reduction slots, and (unless in scratch) the L <= Tmax scores. */
static size_t att_dec_smem_floats(int hs, int vw, int Tmax, int scores_in_smem)
{
  return (size_t)att_round4(hs) + att_round4(att_dec_part_len(hs, vw)) + 32 + (scores_in_smem ? (size_t)Tmax : 0);
}

/* Block = (row r, head h) = blockIdx.x = r*NH + h, ATT_DEC_THREADS threads;
 * the head reads the keys and values of kv head h / (NH/NKV), whose cache
 * rows are Ckv = NKV*hs floats apart.
 * 1. q of the head to shared memory.
 * 2. Scores s[j] = scale q.k_j, j < L = pos+1: a group of P lanes shares key
 *    j, lane g of the group takes chunks g, g+P, ... of VW floats (coalesced
 *    along the head dimension); each lane group takes ATT_DEC_UNROLL keys per
 *    pass so that several loads are in flight; the group's partials meet in
 *    a butterfly, and its first lane stores the score.
 * 3. Softmax over s (block max, exps in place, block sum).
 * 4. o = sum_j p_j v_j: thread (group kg, chunk c) sums keys kg, kg+NG, ...
 *    of chunk c in key order (coalesced along d), then the NG partials of
 *    each d are added in group order.
 * Every sum has a fixed order: the result is the same on every run. A row
 * outside the cache (slot < 0, pos outside [0,Tmax)) gets NaN. */
template <int VW>
__global__ void __launch_bounds__(ATT_DEC_THREADS)
    att_decode_kernel(float *out, const float *kcache, const float *vcache, const float *qkv, const int *slot,
                      const int *pos, float *gscores, int Tmax, int C, int NH, int NKV, float scale, int bf16)
{
  extern __shared__ float4 att_smem4[]; /* float4: 16-byte alignment for the q chunks */
  float    *smem = reinterpret_cast<float *>(att_smem4);
  const int hs = C / NH, nc = hs / VW, r = blockIdx.x / NH, h = blockIdx.x % NH, tid = threadIdx.x;
  const int sl = slot[r], L = pos[r] + 1, Ckv = NKV * hs, C3 = C + 2 * Ckv;
  float    *o = out + (size_t)r * C + (size_t)h * hs;

  if (sl < 0 || L < 1 || L > Tmax) { /* block-uniform, before any barrier */
    for (int d = tid; d < hs; d += ATT_DEC_THREADS) o[d] = __int_as_float(0x7fc00000);
    return;
  }
  float       *q = smem, *part = q + att_round4(hs), *red = part + att_round4(att_dec_part_len(hs, VW));
  float       *s  = gscores ? gscores + (size_t)blockIdx.x * Tmax : red + 32;
  const size_t at = (size_t)sl * Tmax * Ckv + (size_t)(h / (NH / NKV)) * hs;
  const float *kb = kcache + at, *vb = vcache + at;

  for (int d = tid; d < hs; d += ATT_DEC_THREADS) q[d] = qkv[(size_t)r * C3 + (size_t)h * hs + d];
  __syncthreads();

  { /* 2. scores */
    const int P = att_dec_group(nc), kpw = 32 / P, lane = tid % 32, warp = tid / 32, g = lane % P, grp = lane / P;
    const int per_warp = kpw * ATT_DEC_UNROLL, step = ATT_DEC_WARPS * per_warp;

    for (int j0 = warp * per_warp; j0 < L; j0 += step) { /* warp-uniform: full-mask shuffles are safe */
      float acc[ATT_DEC_UNROLL];

#pragma unroll
      for (int u = 0; u < ATT_DEC_UNROLL; u++) acc[u] = 0.0f;
      for (int c = g; c < nc; c += P) {
        if constexpr (VW == 4) {
          const float4 qv = reinterpret_cast<const float4 *>(q)[c];
          float4       kv[ATT_DEC_UNROLL];
#pragma unroll
          for (int u = 0; u < ATT_DEC_UNROLL; u++) {
            int j = j0 + u * kpw + grp;
            kv[u] = j < L ? reinterpret_cast<const float4 *>(kb + (size_t)j * Ckv)[c]
                          : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
          }
#pragma unroll
          for (int u = 0; u < ATT_DEC_UNROLL; u++) {
            acc[u] += qv.x * kv[u].x;
            acc[u] += qv.y * kv[u].y;
            acc[u] += qv.z * kv[u].z;
            acc[u] += qv.w * kv[u].w;
          }
        } else {
          const float qv = q[c];
          float       kv[ATT_DEC_UNROLL];
#pragma unroll
          for (int u = 0; u < ATT_DEC_UNROLL; u++) {
            int j = j0 + u * kpw + grp;
            kv[u] = j < L ? kb[(size_t)j * Ckv + c] : 0.0f;
          }
#pragma unroll
          for (int u = 0; u < ATT_DEC_UNROLL; u++) acc[u] += qv * kv[u];
        }
      }
#pragma unroll
      for (int u = 0; u < ATT_DEC_UNROLL; u++) {
        int j = j0 + u * kpw + grp;
        for (int off = P / 2; off > 0; off >>= 1) acc[u] += __shfl_xor_sync(0xffffffffu, acc[u], off);
        if (g == 0 && j < L) s[j] = acc[u] * scale;
      }
    }
  }
  __syncthreads();

  /* 3. softmax; the block reductions' barriers publish s */
  float m = -INFINITY, sum = 0.0f, inv;
  for (int j = tid; j < L; j += ATT_DEC_THREADS) m = s[j] > m ? s[j] : m;
  m = att_block_max(m, red);
  for (int j = tid; j < L; j += ATT_DEC_THREADS) {
    float e = expf(s[j] - m);
    s[j]    = e;
    sum += e;
  }
  inv = 1.0f / att_block_sum(sum, red);

  /* 4. o = P.V */
  const int NG = nc <= ATT_DEC_THREADS ? ATT_DEC_THREADS / nc : 1;
  const int kg = nc <= ATT_DEC_THREADS ? tid / nc : 0, c0 = nc <= ATT_DEC_THREADS ? tid % nc : tid;
  const int cstep = nc <= ATT_DEC_THREADS ? nc : ATT_DEC_THREADS;
  if (kg < NG) {
    for (int c = c0; c < nc; c += cstep) {
      if constexpr (VW == 4) {
        float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll 4
        for (int j = kg; j < L; j += NG) {
          float        p  = s[j] * inv;
          const float4 vv = reinterpret_cast<const float4 *>(vb + (size_t)j * Ckv)[c];
          acc.x += p * vv.x;
          acc.y += p * vv.y;
          acc.z += p * vv.z;
          acc.w += p * vv.w;
        }
        reinterpret_cast<float4 *>(part + (size_t)kg * hs)[c] = acc;
      } else {
        float acc = 0.0f;
#pragma unroll 4
        for (int j = kg; j < L; j += NG) acc += s[j] * inv * vb[(size_t)j * Ckv + c];
        part[(size_t)kg * hs + c] = acc;
      }
    }
  }
  __syncthreads();
  for (int d = tid; d < hs; d += ATT_DEC_THREADS) {
    float acc = 0.0f;
    for (int k = 0; k < NG; k++) acc += part[(size_t)k * hs + d];
    o[d] = bf16 ? rfcuda_round_bf16(acc) : acc;
  }
}

extern "C" int rfcuda_attention_cached(float *out, float *kcache, float *vcache, const float *qkv, const int *slot,
                                       const int *pos, int N, int Tmax, int C, int NH, int NKV)
{
  if (att_check_heads("attention_cached", C, NH, NKV)) return 1;
  RFCUDA_REQUIRE(N >= 0 && Tmax > 0, "attention_cached: bad sizes N %d Tmax %d", N, Tmax);
  RFCUDA_REQUIRE((size_t)N * NH <= INT_MAX, "attention_cached: %d rows of %d heads is too many blocks", N, NH);
  if (N == 0) return 0;

  int    hs = C / NH, Ckv = NKV * hs, bf16 = rfcuda_get_precision() == 1;
  float  scale   = 1.0f / sqrtf((float)hs), *gscores = NULL;
  int    aligned = hs % 4 == 0 && ((uintptr_t)kcache | (uintptr_t)vcache) % 16 == 0, vw = aligned ? 4 : 1;
  size_t smem    = att_dec_smem_floats(hs, vw, Tmax, 1) * sizeof(float);

  att_kv_store_kernel<<<rfcuda_blocks((size_t)N * Ckv, 256), 256, 0, rfcuda_stream()>>>(kcache, vcache, qkv, slot, pos,
                                                                                        N, Tmax, C, Ckv);
  RFCUDA_LAUNCHED();
  if (smem > ATT_SMEM_MAX) { /* long caches: the scores go to scratch, one Tmax row per block */
    smem = att_dec_smem_floats(hs, vw, Tmax, 0) * sizeof(float);
    RFCUDA_REQUIRE(smem <= ATT_SMEM_MAX, "attention_cached: head size %d needs %zu bytes of shared memory", hs, smem);
    if (rfcuda_scratch((size_t)N * NH * Tmax * sizeof(float), (void **)&gscores)) return 1;
  }
  if (vw == 4)
    att_decode_kernel<4><<<N * NH, ATT_DEC_THREADS, smem, rfcuda_stream()>>>(out, kcache, vcache, qkv, slot, pos,
                                                                             gscores, Tmax, C, NH, NKV, scale, bf16);
  else
    att_decode_kernel<1><<<N * NH, ATT_DEC_THREADS, smem, rfcuda_stream()>>>(out, kcache, vcache, qkv, slot, pos,
                                                                             gscores, Tmax, C, NH, NKV, scale, bf16);
  RFCUDA_LAUNCHED();
  return 0;
}
