/* cuda backend: rotary position embeddings (the LLaMA family), the CUDA twin
 * of cpu_rope in src/tensor/cpu_llama.c with the same arguments.
 *
 * In place on the NH query and NKV key heads of qkv rows [N, (NH+2NKV)*hd]
 * (they are contiguous at the start of the row; the v heads are left
 * alone), Hugging Face's rotate-half pairing: element i < hd/2 of a head
 * pairs with i + hd/2 and the pair turns by pos[n]*inv_freq[i].
 *
 * Same bits as the cpu backend: the angle is the float product, cos and sin
 * are taken in double and rounded once to float (as cpu_rope does: float
 * sinf/cosf on either side would differ in the last bits for the large
 * angles of long positions), and the rotation's products and sums are spelled with
 * the _rn intrinsics so nvcc does not contract them into FMAs, which gcc
 * (-std=c11) does not do. The op is a small part of a layer, so the double
 * sincos costs little, even taken once per head. Each pair has one thread:
 * no races, no reductions. bf16 mode does not round (q and k are
 * the matmul's already rounded outputs, and the turn is exact to float). */
#include "cuda_common.cuh"

#define ROPE_THREADS 256

/* Thread per (row n, head h, pair i), grid-stride over N*nrot*half;
 * consecutive threads take consecutive i of one head, so the loads are
 * coalesced. (A thread per (n, i) turning every head in a loop left a
 * decode step's one row with 32 threads and 16 loads each in sequence.) */
__global__ void rope_kernel(float *qkv, const int *pos, const float *inv_freq, int N, int nrot, int hd, size_t W,
                            int inverse)
{
  const int    half = hd / 2;
  const size_t per  = (size_t)nrot * half;

  for (size_t t = blockIdx.x * (size_t)blockDim.x + threadIdx.x; t < (size_t)N * per;
       t += (size_t)gridDim.x * blockDim.x) {
    size_t n = t / per;
    int    h = (int)(t % per / half), i = (int)(t % half);
    float  ang = __fmul_rn((float)pos[n], inv_freq[i]);
    double sd, cd;

    sincos((double)ang, &sd, &cd);
    float  c = (float)cd, s = inverse ? -(float)sd : (float)sd;
    float *x = qkv + n * W + (size_t)h * hd, a = x[i], b = x[i + half];
    x[i]        = __fsub_rn(__fmul_rn(a, c), __fmul_rn(b, s));
    x[i + half] = __fadd_rn(__fmul_rn(b, c), __fmul_rn(a, s));
  }
}

extern "C" int rfcuda_rope(float *qkv, const int *pos, const float *inv_freq, int N, int NH, int NKV, int hd,
                           int inverse)
{
  size_t W = (size_t)(NH + 2 * NKV) * hd, n = (size_t)N * (NH + NKV) * (hd / 2);

  RFCUDA_REQUIRE(hd > 0 && hd % 2 == 0, "rope: head size %d is not even", hd);
  RFCUDA_REQUIRE(N >= 0 && NH > 0 && NKV > 0, "rope: bad sizes N %d n_head %d n_kv_head %d", N, NH, NKV);
  if (!n) return 0;
  rope_kernel<<<rfcuda_blocks(n, ROPE_THREADS), ROPE_THREADS, 0, rfcuda_stream()>>>(qkv, pos, inv_freq, N, NH + NKV, hd,
                                                                                    W, inverse);
  RFCUDA_LAUNCHED();
  return 0;
}
