/* philox: Philox4x32-10 and the key/counter layout of the keyed draws
 * (src/sys/rng.c), in one header that both C and CUDA compile, so a draw
 * keyed by (seed; a, b, c, lane) is the same number on the CPU and in a
 * kernel (cuda/cuda_sample.cu). Integer arithmetic only: nothing here
 * depends on the compiler's floating-point choices. */
#ifndef RLFUSE_PHILOX_H
#define RLFUSE_PHILOX_H

#include <stdint.h>

#ifdef __CUDACC__
  #define PHILOX_HD __host__ __device__ __forceinline__
#else
  #define PHILOX_HD static inline
#endif

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

PHILOX_HD void philox_round(uint32_t c[4], const uint32_t k[2])
{
  uint64_t p0  = (uint64_t)PHILOX_M0 * c[0];
  uint64_t p1  = (uint64_t)PHILOX_M1 * c[2];
  uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
  uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
  uint32_t n0 = hi1 ^ c[1] ^ k[0], n2 = hi0 ^ c[3] ^ k[1];
  c[0] = n0;
  c[1] = lo1;
  c[2] = n2;
  c[3] = lo0;
}

PHILOX_HD void philox_block(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4])
{
  uint32_t c[4] = {ctr[0], ctr[1], ctr[2], ctr[3]};
  uint32_t k[2] = {key[0], key[1]};
  for (int r = 0; r < 10; r++) {
    if (r > 0) {
      k[0] += PHILOX_W0;
      k[1] += PHILOX_W1;
    }
    philox_round(c, k);
  }
  for (int i = 0; i < 4; i++) out[i] = c[i];
}

/* The key is the seed's two halves; the counter (a, b, c, lane/4); the
 * draw is word lane%4 of the block. */
PHILOX_HD uint32_t philox_u32(uint64_t seed, uint32_t a, uint32_t b, uint32_t c, uint32_t lane)
{
  const uint32_t ctr[4] = {a, b, c, lane >> 2};
  const uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
  uint32_t       out[4];
  philox_block(ctr, key, out);
  return out[lane & 3u];
}

/* A uniform in [0,1) with 24 random bits: exact in float, so no rounding
 * mode or contraction can change it. */
PHILOX_HD float philox_uniform(uint64_t seed, uint32_t a, uint32_t b, uint32_t c, uint32_t lane)
{
  return (float)(philox_u32(seed, a, b, c, lane) >> 8) * (1.0f / 16777216.0f);
}

#endif
