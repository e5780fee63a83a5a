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

#define RFCUDA_CHECK(call) \
  do { \
    cudaError_t e_ = (call); \
    if (e_ != cudaSuccess) return rfcuda_fail(__FILE__, __LINE__, "%s: %s (%s)", #call, cudaGetErrorString(e_), cudaGetErrorName(e_)); \
  } while (0)

#define RFCUBLAS_CHECK(call) \
  do { \
    cublasStatus_t s_ = (call); \
    if (s_ != CUBLAS_STATUS_SUCCESS) return rfcuda_fail(__FILE__, __LINE__, "%s: %s (%s)", #call, cublasGetStatusString(s_), cublasGetStatusName(s_)); \
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
int    rfcuda_skinny_rows(void);
size_t rfcuda_skinny_part_bytes(int N, int C, int OC, int transposed);
int    rfcuda_matmul_skinny(float *out, float *part, const float *inp, const void *w, int bf16, const float *bias, int N, int C, int OC, int ld, int transposed);

/* Launch geometry for n elements with a grid-stride loop. */
static inline unsigned rfcuda_blocks(size_t n, unsigned threads)
{
  size_t b = (n + threads - 1) / threads;
  return (unsigned)(b < 1 ? 1 : b > 65535u * 8 ? 65535u * 8 : b);
}

/* bf16 mode: round a float to the nearest bf16 and back (what storing an
 * activation in bf16 does to its value). */
__device__ __forceinline__ float rfcuda_round_bf16(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }

#endif
