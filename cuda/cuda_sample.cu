/* cuda backend: Backend.sample, the token draws of N rows of device-resident
 * logits: the CUDA twin of src/tensor/cpu_sample.c, compiled from the same
 * arithmetic (inc/internal/sample_core.h) and the same Philox
 * (inc/internal/philox.h).
 *
 * One block per row. The block computes the tempered logits' maximum (a max
 * is exact in any order) and the weights (element-wise, the same formula
 * without FMA contraction); then thread 0 runs the serial part exactly as
 * the CPU does: the heap that ranks the top-k and top-p candidates, the sum
 * of the weights in id order, the inverse-CDF draw in id order and the
 * log-probability. Doing those sums in the CPU's order is what makes the
 * same row give the same token; it costs one thread's serial passes over
 * the vocabulary per row (rows run in parallel). Measured on an H100
 * (test_cuda, 8 rows of V = 151,936, 2026-11-28): 25 ms a call without
 * top-k/top-p, 83 ms with top-k (the serial heap build), 247 ms with top-p
 * alone (heap pops over the nucleus): correct, not yet fast. The next step
 * is a block-parallel selection of the candidates (a radix select on the
 * weights' bits, ties by id) that leaves only the kept tokens to the
 * serial part. Scratch: the caller's work, V doubles and V ints per row. */
#include "cuda_common.cuh"
#include "internal/philox.h"
#include "internal/sample_core.h"
#include <math.h>

#define SAMPLE_THREADS 256

struct SampleArgs {
  double             inv_t, top_p;
  long long          top_k;
  int                greedy, eos, V;
  unsigned long long key;
  unsigned           iteration;
};

__global__ void sample_kernel(int *token, float *logprob, int *nallowed, int *boundary, int *allowed, double *w_all, int *ids_all, const float *logits,
                              const int *row, const int *sample_id, const int *position, const int *ban_eos, SampleArgs a)
{
  __shared__ double smax[SAMPLE_THREADS];
  __shared__ int    sbad[SAMPLE_THREADS];
  int               n = blockIdx.x, V = a.V, tid = threadIdx.x;
  const float      *x   = logits + (size_t)(row ? row[n] : n) * V;
  double           *w   = w_all + (size_t)n * V;
  int              *set = allowed ? allowed + (size_t)n * V : ids_all + (size_t)n * V;
  int               ban = sample_ban(a.eos, ban_eos ? ban_eos[n] : 0, V), bad = 0;
  double            zmax = -INFINITY;

  for (int v = tid; v < V; v += blockDim.x) {
    double z = sample_z(x[v], a.inv_t);
    if (v == ban) continue;
    bad |= sample_z_bad(z);
    if (z > zmax) zmax = z;
  }
  smax[tid] = zmax;
  sbad[tid] = bad;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (tid < s) {
      smax[tid] = fmax(smax[tid], smax[tid + s]);
      sbad[tid] |= sbad[tid + s];
    }
    __syncthreads();
  }
  zmax = smax[0];
  if (sbad[0] || zmax == -INFINITY) {
    if (tid == 0) {
      token[n]    = -1;
      logprob[n]  = 0;
      nallowed[n] = 0;
      boundary[n] = -1;
    }
    return;
  }
  for (int v = tid; v < V; v += blockDim.x) w[v] = sample_weight(x[v], a.inv_t, zmax, v, ban);
  __syncthreads();
  if (tid == 0) {
    float u = a.greedy ? 0.0f : philox_uniform(a.key, a.iteration, (uint32_t)sample_id[n], (uint32_t)position[n], 0);
    token[n] = sample_finish(x, V, ban, a.inv_t, zmax, a.top_k, a.top_p, a.greedy, u, w, set, set, &logprob[n], &nallowed[n], &boundary[n]);
  }
}

size_t rfcuda_sample_work(int N, int V) { return (size_t)N * V * (sizeof(double) + sizeof(int)); }

int rfcuda_sample(int *token, float *logprob, int *nallowed, int *boundary, int *allowed, void *work, const float *logits, const int *row, const int *sample_id,
                  const int *position, const int *ban_eos, double temperature, double top_p, long long top_k, int greedy, int eos, unsigned long long key,
                  unsigned iteration, int N, int V)
{
  SampleArgs a;

  RFCUDA_REQUIRE(temperature > 0 && N >= 0 && V >= 1, "rfcuda_sample: temperature %g, N %d and V %d must be positive", temperature, N, V);
  if (N == 0) return 0;
  a.inv_t     = 1.0 / temperature;
  a.top_p     = top_p;
  a.top_k     = top_k;
  a.greedy    = greedy;
  a.eos       = eos;
  a.V         = V;
  a.key       = key;
  a.iteration = iteration;
  sample_kernel<<<N, SAMPLE_THREADS, 0, rfcuda_stream()>>>(token, logprob, nallowed, boundary, allowed, (double *)work, (int *)((double *)work + (size_t)N * V),
                                                           logits, row, sample_id, position, ban_eos, a);
  RFCUDA_LAUNCHED();
  return 0;
}
