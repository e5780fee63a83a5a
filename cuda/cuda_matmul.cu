/* CUDA backend: the linear layers, through cublasGemmEx.
 *
 * Layout. The tensors are row-major and cuBLAS is column-major; a row-major
 * [R,K] matrix is the column-major [K,R] one with leading dimension K, so
 * out[N,OC] = inp[N,C] . W becomes out^T[OC,N] = W^T . inp^T with no copies:
 * W [C,OC] is column-major [OC,C] (op N, ld OC), and a transposed W [OC,C]
 * is column-major [C,OC] (op T, ld C). Each call below spells out its
 * mapping.
 *
 * Precision (rfcuda_get_precision()).
 * - fp32 (0): fp32 operands, CUBLAS_COMPUTE_32F under the default math mode,
 *   which is true fp32 (no TF32), so results agree with the cpu backend to
 *   the ~1e-5 relative of a differently ordered fp32 sum.
 * - bf16 (1): both operands are rounded to bf16 into scratch, the product
 *   is accumulated in fp32 (CUDA_R_16BF inputs, CUDA_R_32F output,
 *   CUBLAS_COMPUTE_32F). The forward adds the bias in fp32 and rounds the
 *   output to a bf16 value, since in bf16 mode activations are stored at
 *   bf16 precision (the arrays stay float: every other op reads them as is).
 *   Backward: dinp comes from bf16 dout and W; dw from bf16 inp and dout,
 *   accumulated (beta 1) into the fp32 master gradient; dbias is summed from
 *   the fp32 dout. Gradients are never rounded to bf16.
 *
 * Alignment. cuBLAS picks its fast tensor-core kernels only when every
 * bf16 leading dimension is a multiple of 8 elements and the fp32 output's
 * of 4; GPT-2's vocabulary (50257) is neither, and its LM head ran on a
 * Turing-era kernel at a sixth of the speed (docs/benchmarks.md, GPU). So
 * in bf16 a width OC that is not a multiple of 8 is padded: the bf16 copies
 * of dout and of an untransposed W get rows of OCp = OC rounded up to 8
 * (zeros past OC), and the forward's product goes to scratch rows of OCp,
 * in chunks of rows, from which the epilogue (a pass bf16 makes anyway)
 * writes the rows of OC. The sums are those of the unpadded product.
 *
 * Determinism. cuBLAS gives the same bits every run on one GPU model with a
 * fixed workspace and stream (cuda_runtime.cu sets both). dbias is our own
 * two-level column sum in the cpu backend's exact order (blocks of 64 rows
 * summed in float, then the block partials in order in double), so it is
 * bitwise equal to the cpu backend's. */
#include "cuda_common.cuh"

#define MM_THREADS   256
#define MM_ROW_BLOCK 64 /* rows per dbias partial: CPU_ROW_BLOCK in src/tensor/cpu_ops.h */

#define MM_PAD_CHUNK ((size_t)256 << 20) /* bytes of padded forward output per chunk of rows */

__global__ void mm_to_bf16(__nv_bfloat16 *dst, const float *src, size_t n)
{
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    dst[i] = __float2bfloat16_rn(src[i]);
}

/* Row-wise kernels: block row y takes rows y, y + gridDim.y, ..., its
 * threads the columns of each (no division per element). */
static dim3 mm_row_grid(size_t rows, int cols)
{
  unsigned x = (unsigned)((cols + MM_THREADS - 1) / MM_THREADS);

  return dim3(x < 32 ? x : 32, (unsigned)(rows < 65535 ? (rows ? rows : 1) : 65535));
}

/* dst[r, c] (rows of ld) = src[r, c] (rows of cols) in bf16, zeros for cols <= c < ld */
__global__ void mm_to_bf16_pad(__nv_bfloat16 *dst, const float *src, size_t rows, int cols, int ld)
{
  for (size_t r = blockIdx.y; r < rows; r += gridDim.y)
    for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < ld; c += gridDim.x * blockDim.x)
      dst[r * ld + c] = c < cols ? __float2bfloat16_rn(src[r * cols + c]) : __float2bfloat16_rn(0.0f);
}

/* out[r,c] = bias[c] over n = rows*OC elements: the GEMM then adds into it
 * (beta 1), which is how the cpu backend applies the bias too */
__global__ void mm_bias_fill(float *out, const float *bias, size_t n, int OC)
{
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    out[i] = bias[i % (size_t)OC];
}

/* bf16 forward epilogue: out[r, c] = bf16(src[r, c] + bias[c]) in fp32 for
 * rows of OC, src with rows of ld (src == out and ld == OC: in place) */
__global__ void mm_bf16_epilogue(float *out, const float *src, int ld, const float *bias, size_t rows, int OC)
{
  for (size_t r = blockIdx.y; r < rows; r += gridDim.y)
    for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < OC; c += gridDim.x * blockDim.x) {
      float x = src[r * ld + c];
      if (bias) x = __fadd_rn(x, bias[c]);
      out[r * OC + c] = rfcuda_round_bf16(x);
    }
}

/* part[b,c] = sum of dout[n,c] over the rows n of block b, in row order
 * (one thread per column: a warp reads 32 consecutive floats of a row) */
__global__ void mm_colsum_part(float *part, const float *dout, int N, int OC, int nblk)
{
  int c = blockIdx.x * blockDim.x + threadIdx.x;

  if (c >= OC) return;
  for (int b = blockIdx.y; b < nblk; b += gridDim.y) {
    int   n0 = b * MM_ROW_BLOCK, n1 = n0 + MM_ROW_BLOCK < N ? n0 + MM_ROW_BLOCK : N;
    float p  = 0.0f;
    for (int n = n0; n < n1; n++) p = __fadd_rn(p, dout[(size_t)n * OC + c]);
    part[(size_t)b * OC + c] = p;
  }
}

/* dbias[c] += the partials of column c, in block order, in double */
__global__ void mm_colsum_finish(float *dbias, const float *part, int OC, int nblk)
{
  int    c = blockIdx.x * blockDim.x + threadIdx.x;
  double acc;

  if (c >= OC) return;
  acc = dbias[c];
  for (int b = 0; b < nblk; b++) acc = __dadd_rn(acc, (double)part[(size_t)b * OC + c]);
  dbias[c] = (float)acc;
}

static int mm_to_bf16_launch(__nv_bfloat16 *dst, const float *src, size_t n)
{
  if (!n) return 0;
  mm_to_bf16<<<rfcuda_blocks(n, MM_THREADS), MM_THREADS, 0, rfcuda_stream()>>>(dst, src, n);
  RFCUDA_LAUNCHED();
  return 0;
}

/* rows x cols fp32 to bf16 rows of ld >= cols (ld == cols: a plain copy) */
int rfcuda_to_bf16_rows(__nv_bfloat16 *dst, const float *src, size_t rows, int cols, int ld)
{
  if (ld == cols) return mm_to_bf16_launch(dst, src, rows * (size_t)cols);
  if (!rows) return 0;
  mm_to_bf16_pad<<<mm_row_grid(rows, ld), MM_THREADS, 0, rfcuda_stream()>>>(dst, src, rows, cols, ld);
  RFCUDA_LAUNCHED();
  return 0;
}

/* the bf16 rows' width for OC columns: a multiple of 8 (see Alignment) */
static inline int mm_ld_bf16(int OC) { return (OC + 7) / 8 * 8; }

/* The kept bf16 copy of weight w in the layout the GEMMs read (a
 * transposed [OC,C] as is; a [C,OC] in rows of mm_ld_bf16(OC)), or NULL
 * when w is not in a weight buffer (cuda_wcache.cu). */
static int mm_weight_bf16(const float *w, int C, int OC, int transposed, const __nv_bfloat16 **w16)
{
  return transposed ? rfcuda_weights_bf16(w, (size_t)OC, C, C, w16)
                    : rfcuda_weights_bf16(w, (size_t)C, OC, mm_ld_bf16(OC), w16);
}

static int mm_epilogue(float *out, const float *src, int ld, const float *bias, size_t rows, int OC)
{
  if (!rows || !OC) return 0;
  mm_bf16_epilogue<<<mm_row_grid(rows, OC), MM_THREADS, 0, rfcuda_stream()>>>(out, src, ld, bias, rows, OC);
  RFCUDA_LAUNCHED();
  return 0;
}

/* dbias[OC] += column sums of dout[N,OC]; part holds nblk*OC floats */
static int mm_dbias(float *dbias, float *part, const float *dout, int N, int OC)
{
  int  nblk = (N + MM_ROW_BLOCK - 1) / MM_ROW_BLOCK;
  dim3 grid((unsigned)((OC + MM_THREADS - 1) / MM_THREADS), (unsigned)(nblk < 65535 ? nblk : 65535));

  mm_colsum_part<<<grid, MM_THREADS, 0, rfcuda_stream()>>>(part, dout, N, OC, nblk);
  RFCUDA_LAUNCHED();
  mm_colsum_finish<<<grid.x, MM_THREADS, 0, rfcuda_stream()>>>(dbias, part, OC, nblk);
  RFCUDA_LAUNCHED();
  return 0;
}

/* Column-major Cm[m,n] = op(A)[m,k] . op(B)[k,n] + beta*Cm, fp32 accumulate
 * and output; A and B are fp32, or bf16 when bf is set. */
static int mm_gemm(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const void *A, int lda,
                   const void *B, int ldb, float beta, float *Cm, int ldc, int bf)
{
  const float          alpha = 1.0f;
  const cudaDataType_t t     = bf ? CUDA_R_16BF : CUDA_R_32F;

  RFCUBLAS_CHECK(cublasGemmEx(rfcuda_cublas(), ta, tb, m, n, k, &alpha, A, t, lda, B, t, ldb, &beta, Cm, CUDA_R_32F,
                              ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  return 0;
}

/* A decode step's few rows: one kernel (cuda_skinny.cu) on the weight's
 * kept bf16 copy, or on one made in scratch with the partials' room. */
static int mm_forward_few(float *out, const float *inp, const float *w, const float *bias, int N, int C, int OC,
                          int transposed, int bf, int gated, int add, const float *nw, float eps)
{
  const int            ldo = transposed ? C : bf ? mm_ld_bf16(OC) : OC;
  size_t               pb  = rfcuda_skinny_part_bytes(N, C, OC, transposed), wb;
  const __nv_bfloat16 *w16 = NULL;
  void                *s   = NULL;

  if (bf && mm_weight_bf16(w, C, OC, transposed, &w16)) return 1;
  wb = bf && !w16 ? rfcuda_align((size_t)C * (transposed ? OC : ldo) * sizeof(__nv_bfloat16)) : 0;
  if (wb + pb && rfcuda_scratch(wb + pb, &s)) return 1;
  if (wb) {
    __nv_bfloat16 *tmp = (__nv_bfloat16 *)s;
    if (transposed ? mm_to_bf16_launch(tmp, w, (size_t)C * OC) : rfcuda_to_bf16_rows(tmp, w, (size_t)C, OC, ldo))
      return 1;
    w16 = tmp;
  }
  return rfcuda_matmul_skinny(out, pb ? (float *)((char *)s + wb) : NULL, inp, bf ? (const void *)w16 : (const void *)w,
                              bf, bias, N, C, OC, ldo, transposed, gated, add, nw, eps);
}

int rfcuda_matmul_fused(float *out, const float *inp, const float *w, const float *bias, int N, int C, int OC,
                        int transposed, int gated, int add, const float *norm_w, float norm_eps)
{
  RFCUDA_REQUIRE(N >= 1 && N <= RFCUDA_FEW_ROWS && C > 0 && OC > 0, "matmul_fused: N %d (1 to %d), C %d and OC %d", N,
                 RFCUDA_FEW_ROWS, C, OC);
  return mm_forward_few(out, inp, w, bias, N, C, OC, transposed, rfcuda_get_precision(), gated, add, norm_w, norm_eps);
}

int rfcuda_matmul_forward(float *out, const float *inp, const float *w, const float *bias, int N, int C, int OC,
                          int transposed)
{
  const int    bf   = rfcuda_get_precision();
  const size_t nout = (size_t)N * OC;
  const void  *A = w, *B = inp;
  float        beta = 0.0f;
  int          lda = transposed ? C : OC;

  RFCUDA_REQUIRE(N >= 0 && C >= 0 && OC >= 0, "matmul_forward: negative size (N %d, C %d, OC %d)", N, C, OC);
  if (!nout) return 0;
  if (N <= RFCUDA_FEW_ROWS && C > 0)
    return mm_forward_few(out, inp, w, bias, N, C, OC, transposed, bf, 0, 0, NULL, 0.0f);
  if (bf && C > 0) {
    /* scratch: [bf16 W | bf16 inp | padded output rows, when OC needs them] */
    const int            ldo = mm_ld_bf16(OC);
    size_t               chunk = ldo == OC ? 0
                                           : (MM_PAD_CHUNK / ((size_t)ldo * sizeof(float)) > 0
                                                  ? MM_PAD_CHUNK / ((size_t)ldo * sizeof(float))
                                                  : 1);
    size_t               wb, ib = rfcuda_align((size_t)N * C * sizeof(__nv_bfloat16));
    void                *s;
    const __nv_bfloat16 *w16;
    __nv_bfloat16       *i16;
    float               *pad;

    if (chunk > (size_t)N) chunk = (size_t)N;
    /* the weight's kept bf16 copy (cuda_wcache.cu), or one made here */
    if (mm_weight_bf16(w, C, OC, transposed, &w16)) return 1;
    wb = w16 ? 0 : rfcuda_align((size_t)C * (transposed ? OC : ldo) * sizeof(__nv_bfloat16));
    if (rfcuda_scratch(wb + ib + rfcuda_align(chunk * ldo * sizeof(float)), &s)) return 1;
    i16 = (__nv_bfloat16 *)((char *)s + wb), pad = (float *)((char *)s + wb + ib);
    if (!transposed) lda = ldo;
    if (!w16) {
      __nv_bfloat16 *tmp = (__nv_bfloat16 *)s;
      if (transposed ? mm_to_bf16_launch(tmp, w, (size_t)C * OC) : rfcuda_to_bf16_rows(tmp, w, (size_t)C, OC, ldo))
        return 1;
      w16 = tmp;
    }
    if (mm_to_bf16_launch(i16, inp, (size_t)N * C)) return 1;
    if (chunk) { /* out^T rows of ldo in scratch, chunk by chunk; the epilogue adds the bias */
      for (size_t r0 = 0; r0 < (size_t)N; r0 += chunk) {
        int n = (int)((size_t)N - r0 < chunk ? (size_t)N - r0 : chunk);
        if (mm_gemm(transposed ? CUBLAS_OP_T : CUBLAS_OP_N, CUBLAS_OP_N, OC, n, C, w16, lda, i16 + r0 * C, C, 0.0f, pad,
                    ldo, 1))
          return 1;
        if (mm_epilogue(out + r0 * OC, pad, ldo, bias, (size_t)n, OC)) return 1;
      }
      return 0;
    }
    A = w16, B = i16;
  }
  if (bias && !bf) { /* bf16 adds the bias in its epilogue instead */
    mm_bias_fill<<<rfcuda_blocks(nout, MM_THREADS), MM_THREADS, 0, rfcuda_stream()>>>(out, bias, nout, OC);
    RFCUDA_LAUNCHED();
    beta = 1.0f;
  }
  /* out^T[OC,N] = op(W)[OC,C] . inp^T[C,N]; inp^T is inp (ld C) */
  if (C > 0) {
    if (mm_gemm(transposed ? CUBLAS_OP_T : CUBLAS_OP_N, CUBLAS_OP_N, OC, N, C, A, lda, B, C, beta, out, OC, bf))
      return 1;
  } else if (beta == 0.0f)
    RFCUDA_CHECK(cudaMemsetAsync(out, 0, nout * sizeof(float), rfcuda_stream())); /* an empty sum */
  return bf ? mm_epilogue(out, out, OC, bias, (size_t)N, OC) : 0;
}

int rfcuda_matmul_backward(float *dinp, float *dw, float *dbias, const float *dout, const float *inp, const float *w,
                           int N, int C, int OC, int transposed)
{
  const int   bf   = rfcuda_get_precision();
  const int   nblk = N > 0 ? (N + MM_ROW_BLOCK - 1) / MM_ROW_BLOCK : 0;
  const int   gemm = C > 0 && (dinp || dw);
  const int   ldd  = bf ? mm_ld_bf16(OC) : OC; /* dout's rows; an untransposed W's too */
  const int   ldw  = transposed ? C : ldd;
  size_t      pb, ob, wb, ib;
  void       *s;
  const void *Wop = w, *Dop = dout, *Iop = inp;
  const __nv_bfloat16 *wkept = NULL;

  RFCUDA_REQUIRE(N >= 0 && C >= 0 && OC >= 0, "matmul_backward: negative size (N %d, C %d, OC %d)", N, C, OC);
  if (N == 0 || OC == 0 || (!gemm && !dbias)) return 0;
  /* one scratch region: [dbias partials | bf16 dout | bf16 W | bf16 inp] */
  pb = dbias ? rfcuda_align((size_t)nblk * OC * sizeof(float)) : 0;
  ob = bf && gemm ? rfcuda_align((size_t)N * ldd * sizeof(__nv_bfloat16)) : 0;
  if (bf && gemm && dinp && mm_weight_bf16(w, C, OC, transposed, &wkept)) return 1;
  wb = bf && gemm && dinp && !wkept ? rfcuda_align((size_t)(transposed ? OC : C) * ldw * sizeof(__nv_bfloat16)) : 0;
  ib = bf && gemm && dw ? rfcuda_align((size_t)N * C * sizeof(__nv_bfloat16)) : 0;
  if (rfcuda_scratch(pb + ob + wb + ib, &s)) return 1;
  if (dbias && mm_dbias(dbias, (float *)s, dout, N, OC)) return 1;
  if (!gemm) return 0;
  if (bf) {
    __nv_bfloat16 *o16 = (__nv_bfloat16 *)((char *)s + pb), *w16 = (__nv_bfloat16 *)((char *)s + pb + ob),
                  *i16 = (__nv_bfloat16 *)((char *)s + pb + ob + wb);

    if (rfcuda_to_bf16_rows(o16, dout, (size_t)N, OC, ldd)) return 1;
    if (dinp && !wkept &&
        (transposed ? mm_to_bf16_launch(w16, w, (size_t)C * OC) : rfcuda_to_bf16_rows(w16, w, (size_t)C, OC, ldw)))
      return 1;
    if (dw && mm_to_bf16_launch(i16, inp, (size_t)N * C)) return 1;
    Dop = o16, Wop = wkept ? (const void *)wkept : (const void *)w16, Iop = i16;
  }
  if (dinp) {
    /* dinp^T[C,N] += W'[C,OC] . dout^T[OC,N]; W' is W (stored [C,OC]: op T, ld OC)
     * or the transposed W (stored [OC,C]: op N, ld C) */
    if (transposed) {
      if (mm_gemm(CUBLAS_OP_N, CUBLAS_OP_N, C, N, OC, Wop, C, Dop, ldd, 1.0f, dinp, C, bf)) return 1;
    } else if (mm_gemm(CUBLAS_OP_T, CUBLAS_OP_N, C, N, OC, Wop, ldw, Dop, ldd, 1.0f, dinp, C, bf)) return 1;
  }
  if (dw) {
    /* W [C,OC]: dW^T[OC,C] += dout^T[OC,N] . inp[N,C] (inp stored as inp^T, op T);
     * transposed W [OC,C]: dW^T[C,OC] += inp^T[C,N] . dout[N,OC] (op T on dout^T) */
    if (transposed) {
      if (mm_gemm(CUBLAS_OP_N, CUBLAS_OP_T, C, OC, N, Iop, C, Dop, ldd, 1.0f, dw, C, bf)) return 1;
    } else if (mm_gemm(CUBLAS_OP_N, CUBLAS_OP_T, OC, C, N, Dop, ldd, Iop, C, 1.0f, dw, OC, bf)) return 1;
  }
  return 0;
}
