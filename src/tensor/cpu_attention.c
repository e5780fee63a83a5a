/* cpu backend: causal self-attention, the training forward/backward and the
 * KV-cache path used by generation.
 *
 * The inner products run over the head dimension with keys (or values) held
 * transposed in a per-thread scratch, so the vector lanes run over key
 * positions and each lane sums its dot product serially in d: no horizontal
 * reductions, and the same bits whatever the vector width, alignment or call
 * site. The only other sum (the softmax denominator, and the p.dp row sum in
 * backward) uses a fixed set of ATT_LANES partials. The full forward and the
 * cached path share att_row, so a KV-cache decode reproduces the full
 * forward bit for bit. */
#include "cpu_ops.h"
#include <math.h>

#define ATT_LANES  16 /* width of the fixed partial sums, one AVX-512 vector */
#define ATT_QBLOCK 64 /* query rows per forward task: balances causal work */

static inline int att_ld(int T) { return (T + ATT_LANES - 1) / ATT_LANES * ATT_LANES; }

/* s[j] = sum_d a[d] * BT[d*ld + j] for j < L. Whole blocks of ATT_LANES
 * columns are computed (ld >= att_ld(L) columns exist, finite), and only
 * j < L stored. */
static inline void att_dots(float *restrict s, const float *restrict a, const float *restrict BT, int ld, int L, int hs)
{
  for (int j0 = 0; j0 < L; j0 += ATT_LANES) {
    float acc[ATT_LANES] = {0};
    int   w              = L - j0 < ATT_LANES ? L - j0 : ATT_LANES;

    for (int d = 0; d < hs; d++) {
      const float *restrict b  = BT + (size_t)d * ld + j0;
      float                 ad = a[d];
      for (int j = 0; j < ATT_LANES; j++) acc[j] += ad * b[j];
    }
    for (int j = 0; j < w; j++) s[j0 + j] = acc[j];
  }
}

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

/* One query row of one head: p[0..L) = softmax(scale * q.k_j), o = sum_j p_j v_j.
 * KT is the head's keys transposed ([hs][ld]); v rows are ldv apart. */
static inline void att_row(float *restrict o, float *restrict p, const float *restrict q, const float *restrict KT, int ld, int L, const float *restrict v, size_t ldv, int hs, float scale)
{
  float m = -INFINITY, inv;

  att_dots(p, q, KT, ld, L, hs);
  for (int j = 0; j < L; j++) {
    p[j] *= scale;
    m = p[j] > m ? p[j] : m;
  }
  for (int j = 0; j < L; j++) p[j] = cpu_expf(p[j] - m);
  inv = 1.0f / att_lane_sum(p, NULL, L);
  for (int j = 0; j < L; j++) p[j] *= inv;
  for (int d = 0; d < hs; d++) o[d] = 0.0f;
  for (int j = 0; j < L; j++) {
    const float *restrict vj = v + (size_t)j * ldv;
    float                 pj = p[j];
    for (int d = 0; d < hs; d++) o[d] += pj * vj[d];
  }
}

PetscErrorCode cpu_attention_forward(float *out, float *att, const float *qkv, int B, int T, int C, int NH)
{
  int    hs = C / NH, ld = att_ld(T), nqb = (T + ATT_QBLOCK - 1) / ATT_QBLOCK;
  size_t per = (size_t)hs * ld + ld, C3 = 3 * (size_t)C;
  float  scale = 1.0f / sqrtf((float)hs), *scratch;

  PetscFunctionBegin;
  PetscCheck(NH > 0 && C % NH == 0, PETSC_COMM_SELF, PETSC_ERR_ARG_SIZ, "attention: n_embd %d is not a multiple of n_head %d", C, NH);
  if (B <= 0 || T <= 0) PetscFunctionReturn(PETSC_SUCCESS);
  /* zeroed so that the padding columns att_dots reads are finite */
  PetscCall(PetscCalloc1(per * cpu_max_threads(), &scratch));
#pragma omp parallel for collapse(3) schedule(dynamic)
  for (int b = 0; b < B; b++)
    for (int h = 0; h < NH; h++)
      for (int qb = 0; qb < nqb; qb++) {
        float       *KT = scratch + per * cpu_thread_num(), *prow = KT + (size_t)hs * ld;
        const float *base = qkv + (size_t)b * T * C3 + (size_t)h * hs;
        int          t0 = qb * ATT_QBLOCK, t1 = t0 + ATT_QBLOCK < T ? t0 + ATT_QBLOCK : T;

        for (int j = 0; j < t1; j++)
          for (int d = 0; d < hs; d++) KT[(size_t)d * ld + j] = base[j * C3 + C + d];
        for (int t = t0; t < t1; t++) {
          float *p = att ? att + (((size_t)b * NH + h) * T + t) * T : prow;
          att_row(out + ((size_t)b * T + t) * C + (size_t)h * hs, p, base + t * C3, KT, ld, t + 1, base + 2 * C, C3, hs, scale);
          if (att)
            for (int j = t + 1; j < T; j++) p[j] = 0.0f;
        }
      }
  PetscCall(PetscFree(scratch));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Per (b,h): dp = dout.v^T, ds = p*(dp - p.dp)*scale, dq = ds.k, dk += ds^T.q,
 * dv += p^T.dout. dk and dv collect over all queries of the pair in a private
 * scratch and are added to dqkv once, so a pair belongs to one thread and
 * the order of every sum is fixed. */
PetscErrorCode cpu_attention_backward(float *dqkv, const float *dout, const float *qkv, const float *att, int B, int T, int C, int NH)
{
  int    hs = C / NH, ld = att_ld(T);
  size_t per = (size_t)hs * ld + 3 * (size_t)T * hs + ld + hs, C3 = 3 * (size_t)C;
  float  scale = 1.0f / sqrtf((float)hs), *scratch;

  PetscFunctionBegin;
  PetscCheck(NH > 0 && C % NH == 0, PETSC_COMM_SELF, PETSC_ERR_ARG_SIZ, "attention: n_embd %d is not a multiple of n_head %d", C, NH);
  if (B <= 0 || T <= 0) PetscFunctionReturn(PETSC_SUCCESS);
  PetscCall(PetscCalloc1(per * cpu_max_threads(), &scratch));
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; b++)
    for (int h = 0; h < NH; h++) {
      float *VT = scratch + per * cpu_thread_num();
      float *K = VT + (size_t)hs * ld, *dK = K + (size_t)T * hs, *dV = dK + (size_t)T * hs;
      float *dp = dV + (size_t)T * hs, *dq = dp + ld;
      const float *base  = qkv + (size_t)b * T * C3 + (size_t)h * hs;
      float       *dbase = dqkv + (size_t)b * T * C3 + (size_t)h * hs;

      for (int j = 0; j < T; j++)
        for (int d = 0; d < hs; d++) {
          VT[(size_t)d * ld + j] = base[j * C3 + 2 * C + d];
          K[(size_t)j * hs + d]  = base[j * C3 + C + d];
        }
      memset(dK, 0, 2 * (size_t)T * hs * sizeof(float));
      for (int t = 0; t < T; t++) {
        const float *restrict p = att + (((size_t)b * NH + h) * T + t) * T;
        const float *restrict g = dout + ((size_t)b * T + t) * C + (size_t)h * hs;
        const float *restrict q = base + t * C3;
        float                 dot;

        att_dots(dp, g, VT, ld, t + 1, hs);
        dot = att_lane_sum(p, dp, t + 1);
        for (int j = 0; j <= t; j++) dp[j] = p[j] * (dp[j] - dot) * scale;
        for (int d = 0; d < hs; d++) dq[d] = 0.0f;
        for (int j = 0; j <= t; j++) {
          const float *restrict kj  = K + (size_t)j * hs;
          float *restrict       dkj = dK + (size_t)j * hs;
          float *restrict       dvj = dV + (size_t)j * hs;
          float                 a = dp[j], pj = p[j];
          for (int d = 0; d < hs; d++) {
            dq[d] += a * kj[d];
            dkj[d] += a * q[d];
            dvj[d] += pj * g[d];
          }
        }
        for (int d = 0; d < hs; d++) dbase[t * C3 + d] += dq[d];
      }
      for (int j = 0; j < T; j++)
        for (int d = 0; d < hs; d++) {
          dbase[j * C3 + C + d] += dK[(size_t)j * hs + d];
          dbase[j * C3 + 2 * C + d] += dV[(size_t)j * hs + d];
        }
    }
  PetscCall(PetscFree(scratch));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode cpu_attention_cached(float *out, float *kcache, float *vcache, const float *qkv, const int *slot, const int *pos, int N, int Tmax, int C, int NH)
{
  int    hs = C / NH, ld = att_ld(Tmax);
  size_t per = (size_t)hs * ld + ld, C3 = 3 * (size_t)C;
  float  scale = 1.0f / sqrtf((float)hs), *scratch;

  PetscFunctionBegin;
  PetscCheck(NH > 0 && C % NH == 0, PETSC_COMM_SELF, PETSC_ERR_ARG_SIZ, "attention: n_embd %d is not a multiple of n_head %d", C, NH);
  for (int r = 0; r < N; r++)
    PetscCheck(slot[r] >= 0 && pos[r] >= 0 && pos[r] < Tmax, PETSC_COMM_SELF, PETSC_ERR_ARG_OUTOFRANGE, "attention_cached: row %d has slot %d position %d, outside the cache (Tmax %d)", r, slot[r], pos[r], Tmax);
  if (N <= 0) PetscFunctionReturn(PETSC_SUCCESS);
  /* every row's k,v must be in the cache before any row reads it: a prefill
   * row attends to the rows before it in the same call */
#pragma omp parallel for schedule(static) if ((size_t)N * C > CPU_OMP_MIN)
  for (int r = 0; r < N; r++) {
    size_t at = ((size_t)slot[r] * Tmax + pos[r]) * C;
    memcpy(kcache + at, qkv + r * C3 + C, (size_t)C * sizeof(float));
    memcpy(vcache + at, qkv + r * C3 + 2 * C, (size_t)C * sizeof(float));
  }
  PetscCall(PetscCalloc1(per * cpu_max_threads(), &scratch));
#pragma omp parallel for collapse(2) schedule(dynamic)
  for (int r = 0; r < N; r++)
    for (int h = 0; h < NH; h++) {
      float       *KT = scratch + per * cpu_thread_num(), *prow = KT + (size_t)hs * ld;
      size_t       s0 = (size_t)slot[r] * Tmax * C + (size_t)h * hs;
      const float *kb = kcache + s0;
      int          L  = pos[r] + 1;

      for (int j = 0; j < L; j++)
        for (int d = 0; d < hs; d++) KT[(size_t)d * ld + j] = kb[(size_t)j * C + d];
      att_row(out + (size_t)r * C + (size_t)h * hs, prow, qkv + r * C3 + (size_t)h * hs, KT, ld, L, vcache + s0, C, hs, scale);
    }
  PetscCall(PetscFree(scratch));
  PetscFunctionReturn(PETSC_SUCCESS);
}
