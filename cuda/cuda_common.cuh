/* Private to cuda/: the checking macros every CUDA file uses, and the
 * stream and precision state that cuda_runtime.cu owns.
 *
 * Every CUDA, cuBLAS and NCCL call goes through a macro that, on failure,
 * records "file:line: call: library error string" for rfcuda_error() and
 * returns 1 from the calling function (which therefore returns int).
 * RFCUDA_LAUNCHED() follows every kernel launch and checks the last error. */
#ifndef RLFUSE_CUDA_COMMON_CUH
#define RLFUSE_CUDA_COMMON_CUH

#include "internal/rfcuda.h"
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

/* cuda_runtime.cu: records a message for rfcuda_error(); returns 1. */
int rfcuda_fail(const char *file, int line, const char *fmt, ...);

#define RFCUDA_CHECK(call)                                                                                             \
  do {                                                                                                                 \
    cudaError_t e_ = (call);                                                                                           \
    if (e_ != cudaSuccess)                                                                                             \
      return rfcuda_fail(__FILE__, __LINE__, "%s: %s (%s)", #call, cudaGetErrorString(e_), cudaGetErrorName(e_));      \
  } while (0)

#define RFCUBLAS_CHECK(call)                                                                                           \
  do {                                                                                                                 \
    cublasStatus_t s_ = (call);                                                                                        \
    if (s_ != CUBLAS_STATUS_SUCCESS)                                                                                   \
      return rfcuda_fail(__FILE__, __LINE__, "%s: %s (%s)", #call, cublasGetStatusString(s_),                          \
                         cublasGetStatusName(s_));                                                                     \
  } while (0)

#define RFCUDA_LAUNCHED() RFCUDA_CHECK(cudaGetLastError())

/* Fails (returns 1) with a message when cond is false. */
#define RFCUDA_REQUIRE(cond, ...) \
  do { \
    if (!(cond)) return rfcuda_fail(__FILE__, __LINE__, __VA_ARGS__); \
  } while (0)

/* cuda_runtime.cu: the state every op uses (valid after rfcuda_init). */
cudaStream_t     rfcuda_stream(void);      /* compute stream */
cublasHandle_t   rfcuda_cublas(void);      /* bound to the compute stream */
cublasLtHandle_t rfcuda_cublaslt(void);
/* Scratch on the device that grows on demand and is reused by later calls
 * on the compute stream (never freed while work that uses it is queued).
 * It is ONE region: an op that needs several buffers at once asks for their
 * total, each rounded up with rfcuda_align, and carves the region itself.
 * Ask once per op: a later call may grow (move) the region, after which the
 * earlier pointer is stale (the work already queued on it has finished). */
int rfcuda_scratch(size_t bytes, void **ptr);

/* bytes rounded up to 256, cudaMalloc's alignment, so that carved pieces
 * start aligned for any element type and for vector loads. */
static inline size_t rfcuda_align(size_t bytes) { return (bytes + 255) & ~(size_t)255; }

/* cuda_wcache.cu / cuda_graph.cu: an op wrote p .. p+bytes (stale bf16
 * weight copies there); a weight buffer is freed; the bf16 copy of weight w
 * (rows x cols, rows of ld in the copy) or NULL in *out when w is not in a
 * weight buffer; whether the compute stream is capturing a graph; a moved
 * buffer (graphs must be captured again). */
void               rfcuda_weights_touched(const void *p, size_t bytes);
int                rfcuda_weights_release(const void *p);
int                rfcuda_weights_bf16(const float *w, size_t rows, int cols, int ld, const __nv_bfloat16 **out);
int                rfcuda_capturing(void);
void               rfcuda_epoch_bump(void);
/* cuda_matmul.cu: rows x cols fp32 to bf16 rows of ld >= cols, zeros past cols */
int rfcuda_to_bf16_rows(__nv_bfloat16 *dst, const float *src, size_t rows, int cols, int ld);

/* cuda_skinny.cu: the linear layer for at most rfcuda_skinny_rows() rows in
 * one kernel (w bf16 in rows of ld, or fp32; part: rfcuda_skinny_part_bytes
 * of device memory, or NULL when that is 0) */
size_t rfcuda_skinny_part_bytes(int N, int C, int OC, int transposed);
/* gated: inp holds N rows of 2C (gate | up) and the input is their SwiGLU
 * (swiglu_forward's bits); norm_w: the input is inp's RMSNorm with these
 * weights and eps (rmsnorm_forward's bits for up to 256 rows); add: out +=
 * the result (axpy(out, 1, .)'s bits) */
int rfcuda_matmul_skinny(float *out, float *part, const float *inp, const void *w, int bf16, const float *bias, int N,
                         int C, int OC, int ld, int transposed, int gated, int add, const float *norm_w, float eps);

/* Launch geometry for n elements with a grid-stride loop. */
static inline unsigned rfcuda_blocks(size_t n, unsigned threads)
{
  size_t b = (n + threads - 1) / threads;
  return (unsigned)(b < 1 ? 1 : b > 65535u * 8 ? 65535u * 8 : b);
}

/* bf16 mode: round a float to the nearest bf16 and back (what storing an
 * activation in bf16 does to its value). */
__device__ __forceinline__ float rfcuda_round_bf16(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }

/* cpu_expf: Cephes expf, Cody-Waite reduction and a degree 5 polynomial */
__device__ __forceinline__ float rfcuda_expf(float x)
{
  const float big = 12582912.0f; /* 1.5*2^23: adding it rounds to an integer */
  float       n, r, p;

  x = x < -87.3f ? -87.3f : x;
  x = x > 88.3f ? 88.3f : x;
  n = __fsub_rn(__fadd_rn(__fmul_rn(x, 1.44269504088896341f), big), big);
  r = __fsub_rn(x, __fmul_rn(n, 0.693359375f));
  r = __fadd_rn(r, __fmul_rn(n, 2.12194440e-4f));
  p = 1.9875691500e-4f;
  p = __fadd_rn(__fmul_rn(p, r), 1.3981999507e-3f);
  p = __fadd_rn(__fmul_rn(p, r), 8.3334519073e-3f);
  p = __fadd_rn(__fmul_rn(p, r), 4.1665795894e-2f);
  p = __fadd_rn(__fmul_rn(p, r), 1.6666665459e-1f);
  p = __fadd_rn(__fmul_rn(p, r), 5.0000001201e-1f);
  p = __fadd_rn(__fadd_rn(__fmul_rn(__fmul_rn(p, r), r), r), 1.0f);
  return __fmul_rn(p, __int_as_float(((int)n + 127) << 23));
}

/* cpu_llama.c's sigmoid: 1/(1 + exp(-x)) with cpu_expf */
__device__ __forceinline__ float rfcuda_sigmoid(float x) { return __fdiv_rn(1.0f, __fadd_rn(1.0f, rfcuda_expf(-x))); }

/* Threads of the block-per-row kernels that norm a row (rms_row_kernel,
 * and the few-row matmuls when they norm their input). */
#define RFCUDA_ROW_THREADS 256

/* RMSNorm's 1/sqrt(mean x^2 + eps) of a row of C, by a block of
 * RFCUDA_ROW_THREADS threads, every one of which calls it (sh: room for
 * RFCUDA_ROW_THREADS/32 floats of shared memory). The order is fixed by C:
 * thread t squares x[t], x[t + 256], ... into one sum, a warp's 32 sums meet
 * by a butterfly and the warps' in warp order. */
__device__ __forceinline__ float rfcuda_rms_scale(const float *x, int C, float eps, float *sh)
{
  const int t = threadIdx.x, lane = t % 32, warp = t / 32;
  float     ss = 0.0f;

  for (int c = t; c < C; c += RFCUDA_ROW_THREADS) ss = fmaf(x[c], x[c], ss);
  for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
  __syncthreads(); /* sh may still be read from the call before */
  if (lane == 0) sh[warp] = ss;
  __syncthreads();
  ss = 0.0f;
  for (int q = 0; q < RFCUDA_ROW_THREADS / 32; q++) ss = __fadd_rn(ss, sh[q]);
  return 1.0f / sqrtf(ss / C + eps);
}

/* RMSNorm's output (x*s)*w in the cpu's order, rounded in bf16 mode */
__device__ __forceinline__ float rfcuda_rms_apply(float x, float s, float w, int bf16)
{
  float y = __fmul_rn(__fmul_rn(x, s), w);
  return bf16 ? rfcuda_round_bf16(y) : y;
}

/* SwiGLU of gate g and up u, (g*sigmoid(g))*u in the cpu's order of the
 * products, rounded to bf16 in bf16 mode (swiglu_forward's value) */
__device__ __forceinline__ float rfcuda_swiglu(float g, float u, int bf16)
{
  float y = __fmul_rn(__fmul_rn(g, rfcuda_sigmoid(g)), u);
  return bf16 ? rfcuda_round_bf16(y) : y;
}

#endif
