/* cpu backend: token log-probabilities under a sampling distribution
 * (log-softmax of tempered logits, optionally restricted to an allowed set
 * per row), their entropy, and their gradient. One row is one thread's work
 * and its sums run in a fixed lane order, so nothing depends on the thread
 * count. */
#include "cpu_ops.h"
#include <limits.h>
#include <math.h>

#define LSE_LANES 16

/* A row's allowed set: ids[0..n-1], or, when ids is NULL, the whole
 * vocabulary but skip (INT_MAX: nothing skipped; no mask at all or an empty
 * range: see tensor.h). Member k of a set with skip is id k + (k >= skip):
 * the ascending order of the explicit list, so every sum below adds the
 * same numbers in the same order either way. */
typedef struct {
  const int *ids;
  int        n, skip;
} RowSet;

static inline RowSet row_set(const int *mask_off, const int *mask_ids, int row, int V)
{
  RowSet s = {NULL, V, INT_MAX};

  if (mask_off && mask_off[row + 1] > mask_off[row]) {
    const int *ids = mask_ids + mask_off[row];
    int        n = mask_off[row + 1] - mask_off[row], e = tensor_set_excluded(ids, n);

    if (e >= 0) s.n = V - 1, s.skip = e;
    else s.ids = ids, s.n = n;
  }
  return s;
}

/* y[j] = inv_temp * logit of set member k0 + j, for j < nb. */
static inline void load_tempered(float *restrict y, const float *restrict x, RowSet s, int k0, int nb, float inv_temp)
{
  if (s.ids)
    for (int j = 0; j < nb; j++) y[j] = x[s.ids[k0 + j]] * inv_temp;
  else if (k0 + nb <= s.skip || k0 >= s.skip) {
    const float *xb = x + k0 + (k0 >= s.skip);
    for (int j = 0; j < nb; j++) y[j] = xb[j] * inv_temp;
  } else
    for (int j = 0; j < nb; j++) y[j] = x[k0 + j + (k0 + j >= s.skip)] * inv_temp;
}

/* The largest of x[a..b) * inv_temp, or m if larger. The vector reduction
 * finds the value the scalar loop finds, but of +0 and -0 it may keep the
 * other: no result depends on that sign (m - y and m + log(sum) with sum >= 1
 * round alike), so a compact set still gives the explicit list's bits. */
static inline float range_max(const float *restrict x, int a, int b, float inv_temp, float m)
{
#pragma omp simd reduction(max : m)
  for (int k = a; k < b; k++) m = x[k] * inv_temp > m ? x[k] * inv_temp : m;
  return m;
}

static inline float row_max(const float *restrict x, RowSet s, float inv_temp)
{
  float m = -INFINITY;

  if (s.ids) {
    for (int k = 0; k < s.n; k++) m = x[s.ids[k]] * inv_temp > m ? x[s.ids[k]] * inv_temp : m;
  } else if (s.skip < INT_MAX) { /* every id but skip: two runs */
    m = range_max(x, 0, s.skip, inv_temp, m);
    m = range_max(x, s.skip + 1, s.n + 1, inv_temp, m);
  } else {
#pragma omp simd reduction(max : m)
    for (int k = 0; k < s.n; k++) m = x[k] * inv_temp > m ? x[k] * inv_temp : m;
  }
  return m;
}

/* Adds one block of nb <= LSE_LANES tempered logits to the lane partials:
 * part[j] += e_j and, with wpart, wpart[j] += e_j (y_j - m), e_j = exp(y_j - m). */
static inline void lse_block(double *restrict part, double *restrict wpart, const float *restrict y, int nb, float m)
{
  float e[LSE_LANES];

  for (int j = 0; j < nb; j++) e[j] = cpu_expf(y[j] - m);
  for (int j = 0; j < nb; j++) part[j] += e[j];
  if (wpart)
    for (int j = 0; j < nb; j++) wpart[j] += (double)e[j] * ((double)y[j] - m);
}

/* logsumexp over the row's set of y = inv_temp*x: m + log(sum exp(y - m)).
 * The exps are float; the 16 lane partials are double, because a 50k-entry
 * vocabulary row loses ~1e-4 in a float sum. Set member k always goes to
 * lane k % 16 and lanes are added in order. With ent != NULL also the
 * entropy H = lse - sum q y, written as log s - sum e (y - m) / s so that
 * the large m cancels exactly rather than in rounding. */
static inline float row_logsumexp(const float *restrict x, RowSet s, float inv_temp, double *ent)
{
  float  m = row_max(x, s, inv_temp), y[LSE_LANES];
  double part[LSE_LANES] = {0}, wpart[LSE_LANES] = {0}, sum = 0.0, wsum = 0.0;
  int    k0;

  for (k0 = 0; k0 + LSE_LANES <= s.n; k0 += LSE_LANES) {
    load_tempered(y, x, s, k0, LSE_LANES, inv_temp);
    lse_block(part, ent ? wpart : NULL, y, LSE_LANES, m);
  }
  load_tempered(y, x, s, k0, s.n - k0, inv_temp);
  lse_block(part, ent ? wpart : NULL, y, s.n - k0, m);
  for (int j = 0; j < LSE_LANES; j++) sum += part[j];
  for (int j = 0; j < LSE_LANES && ent; j++) wsum += wpart[j];
  if (ent) *ent = log(sum) - wsum / sum;
  return m + (float)log(sum);
}

static PetscErrorCode check_mask(const int *mask_off, const int *mask_ids, int N, int V)
{
  PetscFunctionBegin;
  PetscCheck(mask_off[0] >= 0, PETSC_COMM_SELF, PETSC_ERR_ARG_OUTOFRANGE, "logprob: mask_off[0] = %d is negative",
             mask_off[0]);
  for (int n = 0; n < N; n++) {
    int a = mask_off[n], len = mask_off[n + 1] - a;

    PetscCheck(len >= 0, PETSC_COMM_SELF, PETSC_ERR_ARG_OUTOFRANGE, "logprob: mask_off decreases at row %d (%d > %d)",
               n, mask_off[n], mask_off[n + 1]);
    if (len == 1 && mask_ids[a] < 0) { /* every id but e */
      PetscCheck(-(long long)mask_ids[a] - 1 < V, PETSC_COMM_SELF, PETSC_ERR_ARG_OUTOFRANGE,
                 "logprob: row %d allows every token but %lld, outside the vocabulary [0,%d)", n,
                 -(long long)mask_ids[a] - 1, V);
      continue;
    }
    for (int k = a; k < a + len; k++)
      PetscCheck(mask_ids[k] >= 0 && mask_ids[k] < V, PETSC_COMM_SELF, PETSC_ERR_ARG_OUTOFRANGE,
                 "logprob: row %d allows token %d outside the vocabulary [0,%d)", n, mask_ids[k], V);
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscBool in_set(RowSet s, int v)
{
  if (!s.ids) return v != s.skip ? PETSC_TRUE : PETSC_FALSE;
  for (int k = 0; k < s.n; k++)
    if (s.ids[k] == v) return PETSC_TRUE;
  return PETSC_FALSE;
}

/* Host checks before the parallel loop (the cpu backend's pointers are host
 * memory): a bad temperature, mask or target would otherwise read outside
 * the row or give a logprob of a token that cannot be sampled. */
static PetscErrorCode check_args(const int *target, float inv_temp, const int *mask_off, const int *mask_ids, int N,
                                 int V)
{
  PetscFunctionBegin;
  PetscCheck(inv_temp > 0 && isfinite(inv_temp), PETSC_COMM_SELF, PETSC_ERR_ARG_OUTOFRANGE,
             "logprob: inv_temp must be positive and finite, not %g", (double)inv_temp);
  if (mask_off) PetscCall(check_mask(mask_off, mask_ids, N, V));
  for (int n = 0; n < N; n++) {
    PetscCheck(target[n] < V, PETSC_COMM_SELF, PETSC_ERR_ARG_OUTOFRANGE,
               "logprob: row %d has target %d >= vocab_size %d", n, target[n], V);
    PetscCheck(target[n] < 0 || in_set(row_set(mask_off, mask_ids, n, V), target[n]), PETSC_COMM_SELF,
               PETSC_ERR_ARG_OUTOFRANGE, "logprob: row %d has target %d outside its allowed set", n, target[n]);
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode cpu_logprob_forward(float *logprob, float *lse, float *entropy, const float *logits, const int *target,
                                   float inv_temp, const int *mask_off, const int *mask_ids, int N, int V)
{
  PetscFunctionBegin;
  PetscCall(check_args(target, inv_temp, mask_off, mask_ids, N, V));
  /* lse is written for every row, with a target or not: callers may want the
   * entropy of prompt positions too */
#pragma omp parallel for schedule(static) if ((size_t)N * V > CPU_OMP_MIN)
  for (int n = 0; n < N; n++) {
    const float *x   = logits + (size_t)n * V;
    int          t   = target[n];
    double       ent = 0.0;
    float        l   = row_logsumexp(x, row_set(mask_off, mask_ids, n, V), inv_temp, entropy && t >= 0 ? &ent : NULL);

    if (lse) lse[n] = l;
    logprob[n] = t >= 0 ? x[t] * inv_temp - l : 0.0f;
    if (entropy) entropy[n] = (float)ent;
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode cpu_logprob_backward(float *dlogits, const float *logits, const float *lse, const int *target,
                                    const float *dlogprob, float inv_temp, const int *mask_off, const int *mask_ids,
                                    int N, int V)
{
  PetscFunctionBegin;
  PetscCall(check_args(target, inv_temp, mask_off, mask_ids, N, V));
#pragma omp parallel for schedule(static) if ((size_t)N * V > CPU_OMP_MIN)
  for (int n = 0; n < N; n++) {
    const float *restrict x  = logits + (size_t)n * V;
    float *restrict       dx = dlogits + (size_t)n * V;
    RowSet                s  = row_set(mask_off, mask_ids, n, V);

    if (target[n] < 0) {
      memset(dx, 0, (size_t)V * sizeof(float));
      continue;
    }
    /* d logprob / d x_v = inv_temp (onehot_v - q_v), q_v = 0 outside the set */
    float l = lse ? lse[n] : row_logsumexp(x, s, inv_temp, NULL), g = dlogprob[n] * inv_temp;
    if (s.ids) {
      memset(dx, 0, (size_t)V * sizeof(float));
      for (int k = 0; k < s.n; k++) dx[s.ids[k]] = -g * cpu_expf(x[s.ids[k]] * inv_temp - l);
    } else {
      for (int j = 0; j < V; j++) dx[j] = -g * cpu_expf(x[j] * inv_temp - l);
      if (s.skip < V) dx[s.skip] = 0.0f;
    }
    dx[target[n]] += g;
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* ---- vocabulary-parallel shards --------------------------------------------- */

/* Calls f(j) for every local column j (id v0+j) of row n's allowed set, in
 * ascending id order. */
#define SHARD_FOREACH(s, v0, Vl, j, ...)                                          \
  do {                                                                             \
    if ((s).ids) {                                                                 \
      for (int k_ = 0; k_ < (s).n; k_++) {                                         \
        int j = (s).ids[k_] - (v0);                                                \
        if (j >= 0 && j < (Vl)) __VA_ARGS__;                                              \
      }                                                                            \
    } else {                                                                       \
      long long js_ = (long long)(s).skip - (v0); /* the column skipped, if here */ \
      int       je_ = js_ >= 0 && js_ < (Vl) ? (int)js_ : (Vl);                     \
      for (int j = 0; j < je_; j++) __VA_ARGS__;                                   \
      for (int j = je_ + 1; j < (Vl); j++) __VA_ARGS__;                            \
    }                                                                              \
  } while (0)

PetscErrorCode cpu_logprob_stats(double *stats, const float *logits, const int *target, float inv_temp,
                                 const int *mask_off, const int *mask_ids, int N, int Vl, int v0)
{
  PetscFunctionBegin;
  PetscCheck(inv_temp > 0 && isfinite(inv_temp), PETSC_COMM_SELF, PETSC_ERR_ARG_OUTOFRANGE,
             "logprob_stats: inv_temp must be positive and finite, not %g", (double)inv_temp);
#pragma omp parallel for schedule(static) if ((size_t)N * Vl > CPU_OMP_MIN)
  for (int n = 0; n < N; n++) {
    const float *x = logits + (size_t)n * Vl;
    RowSet       s = row_set(mask_off, mask_ids, n, INT32_MAX);
    double       m = -INFINITY, sum = 0, wsum = 0;
    int          t = target[n] - v0;

    SHARD_FOREACH(s, v0, Vl, j, { m = PetscMax(m, (double)(x[j] * inv_temp)); });
    if (m > -INFINITY) SHARD_FOREACH(s, v0, Vl, j, {
        double y = (double)(x[j] * inv_temp) - m, e = exp(y);
        sum += e;
        wsum += e * y;
      });
    stats[4 * n + 0] = m;
    stats[4 * n + 1] = sum;
    stats[4 * n + 2] = wsum;
    stats[4 * n + 3] = target[n] >= 0 && t >= 0 && t < Vl ? (double)(x[t] * inv_temp) : 0.0;
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode cpu_logprob_backward_shard(float *dlogits, const float *logits, const float *lse, const int *target,
                                          const float *dlogprob, float inv_temp, const int *mask_off,
                                          const int *mask_ids, int N, int Vl, int v0)
{
  PetscFunctionBegin;
  PetscCheck(inv_temp > 0 && isfinite(inv_temp), PETSC_COMM_SELF, PETSC_ERR_ARG_OUTOFRANGE,
             "logprob_backward_shard: inv_temp must be positive and finite, not %g", (double)inv_temp);
  PetscCheck(lse, PETSC_COMM_SELF, PETSC_ERR_ARG_NULL, "logprob_backward_shard: the global lse is required");
#pragma omp parallel for schedule(static) if ((size_t)N * Vl > CPU_OMP_MIN)
  for (int n = 0; n < N; n++) {
    const float *restrict x  = logits + (size_t)n * Vl;
    float *restrict       dx = dlogits + (size_t)n * Vl;
    RowSet                s  = row_set(mask_off, mask_ids, n, INT32_MAX);
    float                 g  = dlogprob[n] * inv_temp, l = lse[n];
    int                   t  = target[n] - v0;

    memset(dx, 0, (size_t)Vl * sizeof(float));
    if (target[n] < 0) continue;
    SHARD_FOREACH(s, v0, Vl, j, { dx[j] = -g * cpu_expf(x[j] * inv_temp - l); });
    if (t >= 0 && t < Vl) dx[t] += g;
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}
