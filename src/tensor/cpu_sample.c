/* cpu backend: Backend.sample, the token draws of N rows of logits. The
 * arithmetic is inc/internal/sample_core.h, shared with the CUDA kernel;
 * here each row is one thread's serial work, so the result does not depend
 * on the thread count, and it equals the reference sampler's bits (regression/ref_sample.c, test_gen). */
#include "cpu_ops.h"
#include "internal/philox.h"
#include "internal/sample_core.h"

/* One row with this thread's w (V doubles) and ids (V ints). */
static void sample_one(int n, int *token, float *logprob, int *nallowed, int *boundary, int *allowed, double *w,
                       int *ids, const float *logits, const int *row, const int *sample_id, const int *position,
                       const int *ban_eos, const BackendSampleCfg *cfg, int V)
{
  const float *x     = logits + (size_t)(row ? row[n] : n) * V;
  int         *set   = allowed ? allowed + (size_t)n * V : ids;
  double       inv_t = 1.0 / cfg->temperature, zmax = -INFINITY;
  int          ban   = sample_ban(cfg->eos, ban_eos ? ban_eos[n] : 0, V);
  float        u     = 0;

  nallowed[n] = 0;
  boundary[n] = -1;
  logprob[n]  = 0;
  token[n]    = -1;
  for (int v = 0; v < V; v++) {
    double z = sample_z(x[v], inv_t);

    if (v == ban) continue;
    if (sample_z_bad(z)) return;
    if (z > zmax) zmax = z;
  }
  if (zmax == -INFINITY) return;
  for (int v = 0; v < V; v++) w[v] = sample_weight(x[v], inv_t, zmax, v, ban);
  if (!cfg->greedy) u = philox_uniform(cfg->key, cfg->iteration, (uint32_t)sample_id[n], (uint32_t)position[n], 0);
  token[n] = sample_finish(x, V, ban, inv_t, zmax, cfg->top_k, cfg->top_p, cfg->greedy, u, w, set, set, &logprob[n],
                           &nallowed[n], &boundary[n]);
}

size_t cpu_sample_work(int N, int V) { return (size_t)cpu_max_threads() * (size_t)V * (sizeof(double) + sizeof(int)); }

PetscErrorCode cpu_sample(int *token, float *logprob, int *nallowed, int *boundary, int *allowed, void *work,
                          const float *logits, const int *row, const int *sample_id, const int *position,
                          const int *ban_eos, const BackendSampleCfg *cfg, int N, int V)
{
  int     nt = cpu_max_threads();
  double *w  = (double *)work;
  int    *ids = (int *)(w + (size_t)nt * V);

  PetscFunctionBegin;
  PetscCheck(cfg->temperature > 0 && N >= 0 && V >= 1, PETSC_COMM_SELF, PETSC_ERR_ARG_OUTOFRANGE,
             "cpu_sample: temperature %g, N %d and V %d must be positive", cfg->temperature, N, V);
  /* one row at a time per thread (a row of GPT-2's vocabulary takes
   * ~0.5 ms); one row is drawn alone: waking the threads for one row cost
   * more than it saved (docs/benchmarks.md, GPU decode) */
#pragma omp parallel for schedule(dynamic, 1) num_threads(nt) if (N > 1)
  for (int n = 0; n < N; n++) {
    int t = cpu_thread_num();
    sample_one(n, token, logprob, nallowed, boundary, allowed, w + (size_t)t * V, ids + (size_t)t * V, logits, row,
               sample_id, position, ban_eos, cfg, V);
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}
