/* Private to the cpu backend: the row kernels of the training attention's
 * softmax, whose sums run over fixed lanes so that a row's bits depend on
 * its length only. cpu_attention.c's tiled pair uses them, and so does the
 * T x T reference of the tests (regression/ref_attention.c), which must give
 * the tiled forward's bits. Include it after GCC's no-trapping-math pragma
 * (see cpu_attention.c) so that att_exp_row vectorizes. */
#ifndef RLFUSE_CPU_ATTENTION_ROWS_H
#define RLFUSE_CPU_ATTENTION_ROWS_H

#include "cpu_ops.h"
#include <math.h>

#define ATT_LANES  16 /* width of the fixed partial sums, one AVX-512 vector */
#ifndef ATT_QBLOCK
  #define ATT_QBLOCK 64 /* query (and key) rows per block of the causal triangle */
#endif

/* Sum of x[j]*y[j] (y may be NULL: sum of x[j]) over fixed lanes, so the
 * result depends on L only. */
static inline float att_lane_sum(const float *restrict x, const float *restrict y, int L)
{
  float part[ATT_LANES] = {0}, s = 0.0f;
  int   j0;

  for (j0 = 0; j0 + ATT_LANES <= L; j0 += ATT_LANES) {
    if (y)
      for (int j = 0; j < ATT_LANES; j++) part[j] += x[j0 + j] * y[j0 + j];
    else
      for (int j = 0; j < ATT_LANES; j++) part[j] += x[j0 + j];
  }
  for (int j = 0; j0 + j < L; j++) part[j] += y ? x[j0 + j] * y[j0 + j] : x[j0 + j];
  for (int w = ATT_LANES / 2; w > 0; w /= 2)
    for (int j = 0; j < w; j++) part[j] += part[j + w];
  s = part[0];
  return s;
}

/* s[j] = exp(s[j] - m), j < n */
static inline void att_exp_row(float *restrict s, int n, float m)
{
  for (int j = 0; j < n; j++) s[j] = cpu_expf(s[j] - m);
}

/* In place on a row of scores s[0..t] (already scaled): s = softmax(s);
 * returns the row's log-sum-exp m + log(sum_j exp(s_j - m)), m its max. */
static inline float att_softmax_row(float *restrict s, int t)
{
  float m = -INFINITY, sum, inv;

  for (int j = 0; j <= t; j++) m = s[j] > m ? s[j] : m;
  att_exp_row(s, t + 1, m);
  sum = att_lane_sum(s, NULL, t + 1);
  inv = 1.0f / sum;
  for (int j = 0; j <= t; j++) s[j] *= inv;
  return m + logf(sum);
}

#endif
