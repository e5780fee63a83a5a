/* The T x T training attention, the reference of the cpu backend's tiled
 * pair (test_ops: the tiled forward must give its output's bits) and the
 * baseline of tools/bench/bench_attention.c. It keeps the softmax
 * probabilities [B,NH,T,T], zeros above the diagonal, where the backend
 * keeps one log-sum-exp per row. It runs the backend's own row kernels
 * (src/tensor/cpu_attention_rows.h) and sgemm blocking, so its bits are
 * those the tiled forward must reproduce. Not in librlfuse.a: linked into
 * the test and benchmark programs (GNUmakefile, REF_OBJ). */
/* As in cpu_attention.c: before any include, so att_exp_row vectorizes. */
#if defined(__GNUC__) && !defined(__clang__)
  #pragma GCC optimize("no-trapping-math")
#endif
#include "../src/tensor/cpu_attention_rows.h"
#include "ref.h"
#include <cblas.h>
#include <math.h>

static PetscErrorCode ref_check_heads(int C, int NH, int NKV)
{
  PetscFunctionBegin;
  PetscCheck(NH > 0 && C % NH == 0 && NKV > 0 && NH % NKV == 0, PETSC_COMM_SELF, PETSC_ERR_ARG_SIZ, "reference attention: width %d, %d heads over %d", C, NH, NKV);
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Per (b, h, query block t0..t1): S = scale * Q K^T
 * over keys 0..t1, written straight into att (or a per-thread scratch when
 * att is NULL), softmax row by row, zeros above the diagonal, then O = P V. */
PetscErrorCode ref_attention_probs_forward(float *out, float *att, const float *qkv, int B, int T, int C, int NH, int NKV)
{
  int    hs = NH > 0 ? C / NH : 0, nqb = (T + ATT_QBLOCK - 1) / ATT_QBLOCK, Ckv = NKV > 0 && NH > 0 ? C / NH * NKV : 0, C3 = C + 2 * Ckv, grp = NKV > 0 ? NH / NKV : 1;
  float  scale = 1.0f / sqrtf((float)hs), *scratch = NULL;
  size_t per   = (size_t)(T < ATT_QBLOCK ? T : ATT_QBLOCK) * T;

  PetscFunctionBegin;
  PetscCall(ref_check_heads(C, NH, NKV));
  if (B <= 0 || T <= 0) PetscFunctionReturn(PETSC_SUCCESS);
  if (!att) PetscCall(PetscMalloc1(per * cpu_max_threads(), &scratch));
#pragma omp parallel for collapse(3) schedule(dynamic)
  for (int b = 0; b < B; b++)
    for (int h = 0; h < NH; h++)
      for (int qb = 0; qb < nqb; qb++) {
        const float *q = qkv + (size_t)b * T * C3 + (size_t)h * hs, *k = qkv + (size_t)b * T * C3 + C + (size_t)(h / grp) * hs, *v = k + Ckv;
        int          t0 = qb * ATT_QBLOCK, t1 = t0 + ATT_QBLOCK < T ? t0 + ATT_QBLOCK : T, zend = att ? T : t1;
        float       *S  = att ? att + (((size_t)b * NH + h) * T + t0) * T : scratch + per * cpu_thread_num();

        cpu_sgemm_kblocked(CblasNoTrans, CblasTrans, t1 - t0, t1, hs, scale, q + (size_t)t0 * C3, C3, k, C3, 0.0f, S, T);
        for (int t = t0; t < t1; t++) {
          float *p = S + (size_t)(t - t0) * T;
          att_softmax_row(p, t);
          for (int j = t + 1; j < zend; j++) p[j] = 0.0f;
        }
        cpu_sgemm_kblocked(CblasNoTrans, CblasNoTrans, t1 - t0, hs, t1, 1.0f, S, T, v, C3, 0.0f, out + ((size_t)b * T + t0) * C + (size_t)h * hs, C);
      }
  PetscCall(PetscFree(scratch));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* out is not read. Per (b, kv head), one thread, for
 * each query head h of the kv head's group in order: dP = dO V^T and dS = P*(dP - rowsum(P*dP))*scale by query
 * blocks (into a [T,T] scratch, zeros above the diagonal), with dQ += dS K;
 * then by key blocks j0..j1, over queries j0..T only: dK += dS^T Q,
 * dV += P^T dO. All three accumulate straight into dqkv; a group's query
 * heads add into their shared dK and dV in a fixed order, on one thread. */
PetscErrorCode ref_attention_probs_backward(float *dqkv, const float *dout, const float *qkv, const float *out, const float *att, int B, int T, int C, int NH, int NKV)
{
  int    hs = NH > 0 ? C / NH : 0, nqb = (T + ATT_QBLOCK - 1) / ATT_QBLOCK, Ckv = NKV > 0 && NH > 0 ? C / NH * NKV : 0, C3 = C + 2 * Ckv, grp = NKV > 0 ? NH / NKV : 1;
  size_t per   = (size_t)T * T;
  float  scale = 1.0f / sqrtf((float)hs), *scratch;

  PetscFunctionBegin;
  (void)out;
  PetscCall(ref_check_heads(C, NH, NKV));
  if (B <= 0 || T <= 0) PetscFunctionReturn(PETSC_SUCCESS);
  PetscCall(PetscMalloc1(per * cpu_max_threads(), &scratch));
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; b++)
    for (int kh = 0; kh < NKV; kh++)
      for (int h = kh * grp; h < (kh + 1) * grp; h++) {
        const float *q = qkv + (size_t)b * T * C3 + (size_t)h * hs, *k = qkv + (size_t)b * T * C3 + C + (size_t)kh * hs, *v = k + Ckv;
        const float *P = att + ((size_t)b * NH + h) * per, *g = dout + (size_t)b * T * C + (size_t)h * hs;
        float       *dq = dqkv + (size_t)b * T * C3 + (size_t)h * hs, *dk = dqkv + (size_t)b * T * C3 + C + (size_t)kh * hs, *dv = dk + Ckv;
        float       *dS = scratch + per * cpu_thread_num();

        for (int qb = 0; qb < nqb; qb++) {
          int t0 = qb * ATT_QBLOCK, t1 = t0 + ATT_QBLOCK < T ? t0 + ATT_QBLOCK : T;

          cpu_sgemm_kblocked(CblasNoTrans, CblasTrans, t1 - t0, t1, hs, 1.0f, g + (size_t)t0 * C, C, v, C3, 0.0f, dS + (size_t)t0 * T, T);
          for (int t = t0; t < t1; t++) {
            const float *restrict p = P + (size_t)t * T;
            float *restrict       d = dS + (size_t)t * T;
            float                 dot = att_lane_sum(p, d, t + 1);

            for (int j = 0; j <= t; j++) d[j] = p[j] * (d[j] - dot) * scale;
            for (int j = t + 1; j < t1; j++) d[j] = 0.0f;
          }
          cpu_sgemm_kblocked(CblasNoTrans, CblasNoTrans, t1 - t0, hs, t1, 1.0f, dS + (size_t)t0 * T, T, k, C3, 1.0f, dq + (size_t)t0 * C3, C3);
        }
        for (int kb = 0; kb < nqb; kb++) {
          int j0 = kb * ATT_QBLOCK, j1 = j0 + ATT_QBLOCK < T ? j0 + ATT_QBLOCK : T;

          cpu_sgemm_kblocked(CblasTrans, CblasNoTrans, j1 - j0, hs, T - j0, 1.0f, dS + (size_t)j0 * T + j0, T, q + (size_t)j0 * C3, C3, 1.0f, dk + (size_t)j0 * C3, C3);
          cpu_sgemm_kblocked(CblasTrans, CblasNoTrans, j1 - j0, hs, T - j0, 1.0f, P + (size_t)j0 * T + j0, T, g + (size_t)j0 * C, C, 1.0f, dv + (size_t)j0 * C3, C3);
        }
      }
  PetscCall(PetscFree(scratch));
  PetscFunctionReturn(PETSC_SUCCESS);
}
