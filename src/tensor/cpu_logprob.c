/* cpu backend: token log-probabilities from logits (log-softmax gathered at
 * the target) and their gradient. One row is one thread's work, so the
 * logsumexp of a row never depends on the thread count. */
#include "cpu_ops.h"
#include <math.h>

#define LSE_LANES 16

/* max + log(sum exp(x - max)). The exps are float; the 16 lane partials are
 * double, because a 50k-entry vocabulary row loses ~1e-4 in a float sum. */
static inline float row_logsumexp(const float *restrict x, int V)
{
  float  m = -INFINITY, e[LSE_LANES];
  double part[LSE_LANES] = {0}, s = 0.0;
  int    j0;

#pragma omp simd reduction(max : m)
  for (int j = 0; j < V; j++) m = x[j] > m ? x[j] : m;
  for (j0 = 0; j0 + LSE_LANES <= V; j0 += LSE_LANES) {
    for (int j = 0; j < LSE_LANES; j++) e[j] = cpu_expf(x[j0 + j] - m);
    for (int j = 0; j < LSE_LANES; j++) part[j] += e[j];
  }
  for (int j = 0; j0 + j < V; j++) part[j] += cpu_expf(x[j0 + j] - m);
  for (int j = 0; j < LSE_LANES; j++) s += part[j];
  return m + (float)log(s);
}

static PetscErrorCode check_targets(const int *target, int N, int V)
{
  PetscFunctionBegin;
  for (int n = 0; n < N; n++) PetscCheck(target[n] < V, PETSC_COMM_SELF, PETSC_ERR_ARG_OUTOFRANGE, "logprob: row %d has target %d >= vocab_size %d", n, target[n], V);
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode cpu_logprob_forward(float *logprob, float *lse, const float *logits, const int *target, int N, int V)
{
  PetscFunctionBegin;
  PetscCall(check_targets(target, N, V));
  /* lse is written for every row, masked or not: callers may want the
   * entropy of prompt positions too */
#pragma omp parallel for schedule(static) if ((size_t)N * V > CPU_OMP_MIN)
  for (int n = 0; n < N; n++) {
    const float *x = logits + (size_t)n * V;
    float        l = row_logsumexp(x, V);

    if (lse) lse[n] = l;
    logprob[n] = target[n] >= 0 ? x[target[n]] - l : 0.0f;
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode cpu_logprob_backward(float *dlogits, const float *logits, const float *lse, const int *target, const float *dlogprob, int N, int V)
{
  PetscFunctionBegin;
  PetscCall(check_targets(target, N, V));
#pragma omp parallel for schedule(static) if ((size_t)N * V > CPU_OMP_MIN)
  for (int n = 0; n < N; n++) {
    const float *restrict x  = logits + (size_t)n * V;
    float *restrict       dx = dlogits + (size_t)n * V;

    if (target[n] < 0) {
      memset(dx, 0, (size_t)V * sizeof(float));
      continue;
    }
    float l = lse ? lse[n] : row_logsumexp(x, V), g = dlogprob[n];
    for (int j = 0; j < V; j++) dx[j] = -g * cpu_expf(x[j] - l);
    dx[target[n]] += g;
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}
