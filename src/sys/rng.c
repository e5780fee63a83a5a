/* Counter-based random numbers: Philox4x32-10 (Salmon, Moraes, Dror, Shaw,
 * "Parallel random numbers: as easy as 1, 2, 3", SC'11). A draw is a pure
 * function of its key and counter, so the same (seed, iteration, sample,
 * position) gives the same number on any rank, slot, thread or batch order. */
#include "sys.h"
#include <math.h>

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

static inline void philox_round(uint32_t c[4], const uint32_t k[2])
{
  uint64_t p0 = (uint64_t)PHILOX_M0 * c[0];
  uint64_t p1 = (uint64_t)PHILOX_M1 * c[2];
  uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
  uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
  uint32_t n0 = hi1 ^ c[1] ^ k[0], n2 = hi0 ^ c[3] ^ k[1];
  c[0] = n0;
  c[1] = lo1;
  c[2] = n2;
  c[3] = lo0;
}

void philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4])
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

uint32_t rng_u32(uint64_t seed, uint32_t a, uint32_t b, uint32_t c, uint32_t lane)
{
  const uint32_t ctr[4] = {a, b, c, lane >> 2};
  const uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
  uint32_t       out[4];
  philox4x32_10(ctr, key, out);
  return out[lane & 3u];
}

float rng_uniform(uint64_t seed, uint32_t a, uint32_t b, uint32_t c, uint32_t lane)
{
  return (float)(rng_u32(seed, a, b, c, lane) >> 8) * (1.0f / 16777216.0f);
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
