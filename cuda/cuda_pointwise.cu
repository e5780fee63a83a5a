/* CUDA backend: the element-wise ops (GELU, the LLaMA family's SwiGLU,
 * residual add, axpy, scale), the optimizer step and the squared norm for
 * gradient clipping.
 *
 * Same bits as the cpu backend. nvcc contracts a*b+c into an FMA by default
 * and gcc (-std=c11) does not, so every float operation here that the cpu
 * code writes as a separate multiply and add is spelled with the _rn
 * intrinsics, which are never contracted; GELU uses a port of the cpu
 * backend's own expf (cpu_expf in src/tensor/cpu_ops.h) for the same reason,
 * and so does SwiGLU's sigmoid. With that, GELU, SwiGLU, the residual add,
 * axpy, scale, AdamW and the squared norm give the cpu backend's results
 * bit for bit, which keeps the optimizer
 * trajectory and gradient clipping of the two backends together.
 *
 * bf16 mode rounds the GELU and SwiGLU outputs to bf16 (activations, stored
 * at bf16 precision). The residual stream is not rounded: residual_forward and the
 * KV-cache path's axpy are the same addition and must stay equal, and the
 * stream itself is the fp32 accumulator of the layers' outputs. */
#include "cuda_common.cuh"
#include <math.h>

#define PW_THREADS   256
#define SUMSQ_BLOCK  8192 /* elements per partial: the cpu backend's, for equal bits */
#define SUMSQ_LANES  8
#define GELU_K       0.7978845608028654f /* sqrt(2/pi) */
#define GELU_A       0.044715f

#define PW_LOOP(i, n)                                                                                                  \
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (n); i += (size_t)gridDim.x * blockDim.x)

/* tanh(K (x + A x^3)) as the cpu backend forms it: 1 - 2/(exp(2u) + 1) */
__device__ __forceinline__ float pw_gelu_tanh(float x)
{
  float u = __fmul_rn(GELU_K, __fadd_rn(x, __fmul_rn(__fmul_rn(__fmul_rn(GELU_A, x), x), x)));
  return __fsub_rn(1.0f, __fdiv_rn(2.0f, __fadd_rn(rfcuda_expf(__fmul_rn(2.0f, u)), 1.0f)));
}

/* out may alias inp (element-wise) */
__global__ void pw_gelu_forward(float *out, const float *inp, size_t n, int bf16)
{
  PW_LOOP(i, n)
  {
    float x = inp[i];
    float y = __fmul_rn(__fmul_rn(0.5f, x), __fadd_rn(1.0f, pw_gelu_tanh(x)));
    out[i]  = bf16 ? rfcuda_round_bf16(y) : y;
  }
}

__global__ void pw_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n)
{
  PW_LOOP(i, n)
  {
    float x    = inp[i];
    float th   = pw_gelu_tanh(x);
    float sech = __fsub_rn(1.0f, __fmul_rn(th, th));
    /* 0.5 (1 + th) + 0.5 x sech K (1 + 3 A x x), left to right as in C */
    float slope = __fmul_rn(__fmul_rn(__fmul_rn(__fmul_rn(0.5f, x), sech), GELU_K),
                            __fadd_rn(1.0f, __fmul_rn(__fmul_rn(__fmul_rn(3.0f, GELU_A), x), x)));
    float grad  = __fadd_rn(__fmul_rn(0.5f, __fadd_rn(1.0f, th)), slope);
    dinp[i]     = __fadd_rn(dinp[i], __fmul_rn(dout[i], grad));
  }
}

/* Thread per (n, j) of out [N,F]: out = (g*sigmoid(g))*u with g = gu[n,j],
 * u = gu[n,F+j], the cpu's order of the products. */
__global__ void pw_swiglu_forward(float *out, const float *gu, int N, int F, int bf16)
{
  PW_LOOP(i, (size_t)N * F)
  {
    size_t n = i / F, j = i % F;
    out[i]   = rfcuda_swiglu(gu[2 * n * F + j], gu[2 * n * F + F + j], bf16);
  }
}

/* dg += ((d*u)*s)*(1 + g(1 - s)), du += (d*g)*s, s = sigmoid(g): the cpu's
 * expressions, left to right. Each thread owns its (n, j) pair of dgu. */
__global__ void pw_swiglu_backward(float *dgu, const float *gu, const float *dout, int N, int F)
{
  PW_LOOP(i, (size_t)N * F)
  {
    size_t n = i / F, j = i % F, ig = 2 * n * F + j, iu = ig + F;
    float  g = gu[ig], u = gu[iu], d = dout[i], s = rfcuda_sigmoid(g);
    float  slope = __fadd_rn(1.0f, __fmul_rn(g, __fsub_rn(1.0f, s)));
    dgu[ig]      = __fadd_rn(dgu[ig], __fmul_rn(__fmul_rn(__fmul_rn(d, u), s), slope));
    dgu[iu]      = __fadd_rn(dgu[iu], __fmul_rn(__fmul_rn(d, g), s));
  }
}

__global__ void pw_residual(float *out, const float *a, const float *b, size_t n)
{
  PW_LOOP(i, n) out[i] = __fadd_rn(a[i], b[i]);
}

__global__ void pw_axpy(float *y, float alpha, const float *x, size_t n)
{
  PW_LOOP(i, n) y[i] = __fadd_rn(y[i], __fmul_rn(alpha, x[i]));
}

__global__ void pw_scale(float *x, float alpha, size_t n)
{
  PW_LOOP(i, n) x[i] = __fmul_rn(x[i], alpha);
}

/* The cpu backend's AdamW, operation for operation (see cpu_adamw.c for why
 * this order: it is torch.optim.AdamW's). */
__global__ void pw_adamw(float *p, const float *g, float *m, float *v, size_t n, float decay, float w1, float b2,
                         float w2, float step, float bc2s, float eps, float gs)
{
  PW_LOOP(i, n)
  {
    float gi = __fmul_rn(g[i], gs), mi = m[i], vi, pi, denom;

    pi    = __fmul_rn(p[i], decay);
    mi    = w1 < 0.5f ? __fadd_rn(mi, __fmul_rn(w1, __fsub_rn(gi, mi)))
                      : __fsub_rn(gi, __fmul_rn(__fsub_rn(gi, mi), __fsub_rn(1.0f, w1))); /* lerp */
    vi    = __fadd_rn(__fmul_rn(v[i], b2), __fmul_rn(__fmul_rn(w2, gi), gi));
    v[i]  = vi;
    m[i]  = mi;
    denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vi), bc2s), eps);
    p[i]  = __fadd_rn(pi, __fdiv_rn(__fmul_rn(-step, mi), denom));
  }
}

/* part[b] = sum of x^2 over block b of SUMSQ_BLOCK elements, in double, as
 * the cpu backend forms it: 8 lanes, lane j taking elements j, j+8, ...,
 * then the lanes added in order. Thread (b, j) is lane j of block b; lane 0
 * adds the 8 lanes through shared memory. blockDim.x is a multiple of 8. */
__global__ void pw_sumsq_part(double *part, const float *x, size_t n, size_t nblk)
{
  __shared__ double lanes[PW_THREADS];
  size_t            t = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  size_t            b = t / SUMSQ_LANES;
  int               j = (int)(t % SUMSQ_LANES);
  double            acc = 0.0;

  if (b < nblk) {
    size_t base = b * SUMSQ_BLOCK, m = n - base < SUMSQ_BLOCK ? n - base : SUMSQ_BLOCK;
    for (size_t i = (size_t)j; i < m; i += SUMSQ_LANES) {
      double xi = (double)x[base + i];
      acc       = __dadd_rn(acc, __dmul_rn(xi, xi));
    }
  }
  lanes[threadIdx.x] = acc;
  __syncthreads();
  if (b < nblk && j == 0) {
    double s = 0.0;
    for (int k = 0; k < SUMSQ_LANES; k++) s = __dadd_rn(s, lanes[threadIdx.x + k]);
    part[b] = s;
  }
}

/* out = the partials added in block order (one thread: the order is the
 * cpu backend's, and there are only n/8192 of them) */
__global__ void pw_sumsq_finish(double *out, const double *part, size_t nblk)
{
  double s = 0.0;

  if (blockIdx.x || threadIdx.x) return;
  for (size_t b = 0; b < nblk; b++) s = __dadd_rn(s, part[b]);
  *out = s;
}

int rfcuda_gelu_forward(float *out, const float *inp, size_t n)
{
  if (!n) return 0;
  pw_gelu_forward<<<rfcuda_blocks(n, PW_THREADS), PW_THREADS, 0, rfcuda_stream()>>>(out, inp, n,
                                                                                    rfcuda_get_precision());
  RFCUDA_LAUNCHED();
  return 0;
}

int rfcuda_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n)
{
  if (!n) return 0;
  pw_gelu_backward<<<rfcuda_blocks(n, PW_THREADS), PW_THREADS, 0, rfcuda_stream()>>>(dinp, inp, dout, n);
  RFCUDA_LAUNCHED();
  return 0;
}

int rfcuda_swiglu_forward(float *out, const float *gu, int N, int F)
{
  size_t n = (size_t)N * F;

  RFCUDA_REQUIRE(N >= 0 && F >= 0, "swiglu_forward: bad sizes N %d F %d", N, F);
  if (!n) return 0;
  pw_swiglu_forward<<<rfcuda_blocks(n, PW_THREADS), PW_THREADS, 0, rfcuda_stream()>>>(out, gu, N, F,
                                                                                      rfcuda_get_precision());
  RFCUDA_LAUNCHED();
  return 0;
}

int rfcuda_swiglu_backward(float *dgu, const float *gu, const float *dout, int N, int F)
{
  size_t n = (size_t)N * F;

  RFCUDA_REQUIRE(N >= 0 && F >= 0, "swiglu_backward: bad sizes N %d F %d", N, F);
  if (!n) return 0;
  pw_swiglu_backward<<<rfcuda_blocks(n, PW_THREADS), PW_THREADS, 0, rfcuda_stream()>>>(dgu, gu, dout, N, F);
  RFCUDA_LAUNCHED();
  return 0;
}

int rfcuda_residual_forward(float *out, const float *a, const float *b, size_t n)
{
  if (!n) return 0;
  pw_residual<<<rfcuda_blocks(n, PW_THREADS), PW_THREADS, 0, rfcuda_stream()>>>(out, a, b, n);
  RFCUDA_LAUNCHED();
  return 0;
}

int rfcuda_axpy(float *y, float alpha, const float *x, size_t n)
{
  if (!n) return 0;
  rfcuda_weights_touched(y, n * sizeof(float));
  pw_axpy<<<rfcuda_blocks(n, PW_THREADS), PW_THREADS, 0, rfcuda_stream()>>>(y, alpha, x, n);
  RFCUDA_LAUNCHED();
  return 0;
}

int rfcuda_scale(float *x, float alpha, size_t n)
{
  if (!n) return 0;
  rfcuda_weights_touched(x, n * sizeof(float));
  pw_scale<<<rfcuda_blocks(n, PW_THREADS), PW_THREADS, 0, rfcuda_stream()>>>(x, alpha, n);
  RFCUDA_LAUNCHED();
  return 0;
}

/* Two passes (fixed blocks, then their partials in order) in double; the
 * result is copied to the host and the stream waited for. */
int rfcuda_sumsq(double *out_host, const float *x, size_t n)
{
  size_t  nblk = (n + SUMSQ_BLOCK - 1) / SUMSQ_BLOCK, threads = nblk * SUMSQ_LANES;
  size_t  grid = (threads + PW_THREADS - 1) / PW_THREADS;
  void   *s;
  double *part, *sum;

  *out_host = 0.0;
  if (!n) return 0;
  RFCUDA_REQUIRE(grid <= 0x7fffffffu, "sumsq: %zu elements is too many", n);
  if (rfcuda_scratch(rfcuda_align(sizeof(double)) + rfcuda_align(nblk * sizeof(double)), &s)) return 1;
  sum = (double *)s, part = (double *)((char *)s + rfcuda_align(sizeof(double)));
  pw_sumsq_part<<<(unsigned)grid, PW_THREADS, 0, rfcuda_stream()>>>(part, x, n, nblk);
  RFCUDA_LAUNCHED();
  pw_sumsq_finish<<<1, 1, 0, rfcuda_stream()>>>(sum, part, nblk);
  RFCUDA_LAUNCHED();
  RFCUDA_CHECK(cudaMemcpyAsync(out_host, sum, sizeof(double), cudaMemcpyDeviceToHost, rfcuda_stream()));
  RFCUDA_CHECK(cudaStreamSynchronize(rfcuda_stream()));
  return 0;
}

/* The step's scalars are formed on the host in double and used in float,
 * exactly as cpu_adamw does. */
int rfcuda_adamw(float *p, const float *g, float *m, float *v, size_t n, float lr, float b1, float b2, float eps,
                 float wd, int t, float gs)
{
  double bc1 = 1.0 - pow((double)b1, t), bc2 = 1.0 - pow((double)b2, t);
  float  decay = (float)(1.0 - (double)lr * wd);
  float  w1 = (float)(1.0 - (double)b1), w2 = (float)(1.0 - (double)b2);
  float  step = (float)((double)lr / bc1), bc2s = (float)sqrt(bc2);

  RFCUDA_REQUIRE(t >= 1, "adamw: step %d must be >= 1", t);
  if (!n) return 0;
  rfcuda_weights_touched(p, n * sizeof(float));
  pw_adamw<<<rfcuda_blocks(n, PW_THREADS), PW_THREADS, 0, rfcuda_stream()>>>(p, g, m, v, n, decay, w1, b2, w2, step,
                                                                             bc2s, eps, gs);
  RFCUDA_LAUNCHED();
  return 0;
}
