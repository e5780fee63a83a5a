/* test_sys: the counter-based RNG against the Random123 known-answer vectors
 * for Philox4x32-10, and the properties the rest of rlfuse relies on (draws
 * are pure functions of their key; uniform and normal draws have the right
 * range and moments). */
#include "sys.h"
#include "test_report.h"
#include <math.h>
#include <stdio.h>

static void check_kat(void)
{
  /* Random123 kat_vectors, philox4x32 with 10 rounds: counter, key, result */
  static const uint32_t kat[3][10] = {
    {0, 0, 0, 0, 0, 0, 0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8},
    {0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd},
    {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344, 0xa4093822, 0x299f31d0, 0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1},
  };
  for (int i = 0; i < 3; i++) {
    uint32_t out[4];
    char     detail[128];
    philox4x32_10(kat[i], kat[i] + 4, out);
    snprintf(detail, sizeof detail, "got %08x %08x %08x %08x", out[0], out[1], out[2], out[3]);
    test_report(out[0] == kat[i][6] && out[1] == kat[i][7] && out[2] == kat[i][8] && out[3] == kat[i][9], "Philox4x32-10 known-answer vector", "%s", detail);
  }
}

static void check_draws(void)
{
  const int n  = 200000;
  double    su = 0, sn = 0, sn2 = 0, umin = 1, umax = 0;
  char      detail[160];

  for (int i = 0; i < n; i++) {
    double u = rng_uniform(42, 1, (uint32_t)i, 3, 0), z = rng_normal(42, 2, (uint32_t)i, 3, 0);
    su += u;
    sn += z;
    sn2 += z * z;
    umin = u < umin ? u : umin;
    umax = u > umax ? u : umax;
  }
  snprintf(detail, sizeof detail, "mean %.4f, range [%g, %g]", su / n, umin, umax);
  test_report(fabs(su / n - 0.5) < 0.005 && umin >= 0 && umax < 1, "uniform draws in [0,1) with mean 1/2", "%s", detail);
  snprintf(detail, sizeof detail, "mean %.4f, variance %.4f", sn / n, sn2 / n - (sn / n) * (sn / n));
  test_report(fabs(sn / n) < 0.01 && fabs(sn2 / n - 1) < 0.02, "normal draws with mean 0 and variance 1", "%s", detail);
  test_report(rng_u32(7, 1, 2, 3, 5) == rng_u32(7, 1, 2, 3, 5) && rng_u32(7, 1, 2, 3, 5) != rng_u32(7, 1, 2, 4, 5) && rng_u32(7, 1, 2, 3, 5) != rng_u32(8, 1, 2, 3, 5), "a draw is a pure function of (seed, counter, lane)", NULL);
}

int main(int argc, char **argv)
{
  if (PetscInitialize(&argc, &argv, NULL, "Tests of src/sys.\n")) return 1;
  check_kat();
  check_draws();
  PetscFinalize();
  return test_tally();
}
