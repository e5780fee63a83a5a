/* Counter-based random numbers: Philox4x32-10 (Salmon, Moraes, Dror, Shaw,
 * "Parallel random numbers: as easy as 1, 2, 3", SC'11). A draw is a pure
 * function of its key and counter, so the same (seed, iteration, sample,
 * position) gives the same number on any rank, slot, thread or batch order.
 * The generator itself is in internal/philox.h, which the CUDA sampler
 * compiles too. */
#include "sys.h"
#include "internal/philox.h"
#include <math.h>

void philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]) { philox_block(ctr, key, out); }

uint32_t rng_u32(uint64_t seed, uint32_t a, uint32_t b, uint32_t c, uint32_t lane)
{
  return philox_u32(seed, a, b, c, lane);
}

float rng_uniform(uint64_t seed, uint32_t a, uint32_t b, uint32_t c, uint32_t lane)
{
  return philox_uniform(seed, a, b, c, lane);
}

float rng_normal(uint64_t seed, uint32_t a, uint32_t b, uint32_t c, uint32_t lane)
{
  /* u1 in (0,1] so the logarithm is finite. */
  double u1 = ((double)(rng_u32(seed, a, b, c, 2 * lane) >> 8) + 1.0) / 16777216.0;
  double u2 = (double)(rng_u32(seed, a, b, c, 2 * lane + 1) >> 8) / 16777216.0;
  return (float)(sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2));
}

void rng_shuffle(int *perm, int N, uint64_t seed, uint32_t stream, int64_t epoch)
{
  for (int i = 0; i < N; i++) perm[i] = i;
  for (int i = N - 1; i > 0; i--) {
    int j   = (int)(rng_u32(seed, stream, (uint32_t)epoch, (uint32_t)i, 0) % (uint32_t)(i + 1));
    int t   = perm[i];
    perm[i] = perm[j];
    perm[j] = t;
  }
}
