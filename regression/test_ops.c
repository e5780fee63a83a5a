/* test_ops: every op of the cpu backend against a slow, obviously correct
 * double-precision reference written here, on seeded random inputs.
 *
 * Each backward op is compared with its double reference in full and, at a
 * few random coordinates, with central finite differences of the double
 * reference forward (so the reference itself is checked too). Outputs are
 * filled with NaN before each call so an unwritten element fails;
 * accumulating outputs start from random values so "+=" is checked. The
 * reductions and attention must give the same bits with 1, 2 and 3 OpenMP
 * threads. The log-probability ops are also checked at a temperature and
 * under a CSR allowed-token mask, with the logits outside each masked row's
 * set NaN so that reading one fails. The LLaMA family's ops (RMSNorm at eps
 * 1e-5 and 1e-6, rotary embeddings forward, inverse and gradient, SwiGLU)
 * and grouped-query attention (4 query heads over 2 and 1 kv heads:
 * training forward/backward and the KV cache) follow the same pattern, after
 * GPT-2's checks so that those keep their inputs. The backend's training
 * attention is tiled (it saves the log-sum-exp [B,NH,T], never a T x T
 * array): it is checked against the former attention that saves the
 * probabilities (kept as the reference, itself checked against double)
 * and against double (out, lse, dqkv) at T = 1, odd T and T around the
 * 64-row blocks, head sizes 16-64, GQA 7:1 and 4:2, with gradients by
 * Richardson-extrapolated differences and 1-3 threads on the small cases
 * (its own random draws, last). There is no bf16 on the cpu backend. Prints "ok - name" /
 * "not ok - name: detail" per check and the tally (test_report.h); exits
 * non-zero on any failure. -worst prints every comparison's worst element
 * as a "#" line (how close each is to its tolerance).
 *
 * Tolerances: a float result passes if |got - ref| <= atol + rtol*|ref|.
 * Float32 ops accumulate rounding of ~sqrt(K)*6e-8 relative over a K-term
 * sum, so element-wise ops use 1e-6 and the reductions (K <= 1000 here)
 * 1e-5 relative with a matching atol for values near zero. Finite
 * differences (h = 1e-4 in double, truncation ~1e-8) are compared with the
 * float gradient at 1e-4 relative + 2e-5 absolute: they check the formula,
 * the full comparison checks the precision.
 *
 * The checks in detail: every CPU op against a slow double-precision reference on fresh random
 * inputs, backward ops against finite differences, accumulate semantics, NaN-poisoned outputs
 * (an unwritten element fails), bitwise equality with 1, 2 and 3 OpenMP threads, KV-cached
 * attention against full attention; the LLaMA family's ops: RMSNorm (eps 1e-5 and 1e-6, rows
 * whose mean square is near eps), the rotary embedding (forward against a double reference
 * with the same float angle, the inverse, inverse(forward(x)) = x, the v heads and position 0
 * untouched, its gradient by finite differences), SwiGLU, grouped-query attention (4 query
 * heads over 2 and over 1 kv heads: forward, backward with the group's dK/dV sums, cached
 * prefill and interleaved decode), and their argument checks; the tiled training attention
 * (the log-sum-exp [B,NH,T] saved, no T x T array; a guard after it untouched) against
 * the former attention that saves the probabilities (the tests' reference
 * `ref_attention_probs_*`, regression/ref_attention.c, itself checked against double:
 * the forward's output bit for bit, dqkv to 1e-5) and against double (out, lse, dqkv) at B 1-3, T 1, 7, 63, 64, 65, 70,
 * 130, 200, head sizes 16, 32, 64, multi-head, GQA 4:2 and 7:1, and inputs that make the
 * softmax nearly one-hot, with gradients by Richardson-extrapolated central differences ((4
 * D(h/2) - D(h))/3, h 1e-2, to 2e-6 + 1e-5 relative) and bitwise equality on 1, 2, 3 threads
 * on three small cases (there is no bf16 on the cpu backend); Qwen3's per-head q/k RMSNorm
 * (heads of 12 and 128, against RMSNorm's double reference per head: in place, v untouched,
 * the saved inputs, the backward's d in and accumulated weight gradients); `-worst` prints
 * every comparison's worst element; the decode path's matmuls of 1 to 4 rows in both layouts
 * and up to 32 in the transposed one (with and without bias) against the reference, bitwise on
 * 1, 2 and 3 threads, and each transposed row's bits the same alone as among 1 to 29 rows;
 * through `matmul_forward_rows` (`-gen_batch_invariant`'s matmuls), every row of calls of
 * 1 to 333 rows in both layouts the same bits as alone, on 1, 2 and 3 threads, and against
 * the reference; the logprob ops' compact set "every id but e" (one entry -(e+1)) against the explicit list of
 * the same V-1 ids bit for bit (forward, backward with and without lse, stats and
 * backward_shard on three shards, inv_temp 1/0.7, e at the row's and the 16-lane blocks'
 * edges, rows whose largest logits are -0 and +0), a target equal to e and an e outside the
 * vocabulary refused; memory: small and large (mapped) blocks zero-filled and 64-byte aligned,
 * `grow` from nothing, larger (the new part zero, the whole usable) and smaller (the block
 * stays)
 */
#include "ref.h"
#include "sys.h"
#include "tensor.h"
#include "test_report.h"
#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static const char help[] = "Unit tests of the cpu backend ops against double-precision references.\n";

typedef struct {
  uint64_t s;
} Rng;

/* splitmix64: tiny, seeded, and the same on every platform */
static uint64_t rng_next(Rng *r)
{
  uint64_t z = (r->s += 0x9e3779b97f4a7c15ULL);
  z          = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z          = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}
static double rng_unif(Rng *r, double lo, double hi) { return lo + (hi - lo) * (double)(rng_next(r) >> 11) * 0x1.0p-53; }
static int    rng_int(Rng *r, int n) { return (int)(rng_next(r) % (uint64_t)n); }

static float *fvec(size_t n) { return malloc((n ? n : 1) * sizeof(float)); }
static double *dvec(size_t n) { return calloc(n ? n : 1, sizeof(double)); }
static float *frand(Rng *r, size_t n, double lo, double hi)
{
  float *x = fvec(n);
  for (size_t i = 0; i < n; i++) x[i] = (float)rng_unif(r, lo, hi);
  return x;
}
static float *fdup(const float *x, size_t n)
{
  float *y = fvec(n);
  memcpy(y, x, n * sizeof(float));
  return y;
}
static double *todouble(const float *x, size_t n)
{
  double *y = dvec(n);
  for (size_t i = 0; i < n; i++) y[i] = x[i];
  return y;
}
static void poison(float *x, size_t n)
{
  for (size_t i = 0; i < n; i++) x[i] = NAN;
}

/* Worst |got - ref| / (atol + rtol|ref|) over n elements; a NaN is infinitely bad.
 * base (may be NULL) is subtracted from got first, for accumulated outputs. */
static double worst_ratio(const float *got, const float *base, const double *ref, size_t n, double atol, double rtol, size_t *at)
{
  double w = 0.0;
  *at      = 0;
  for (size_t i = 0; i < n; i++) {
    double g = (double)got[i] - (base ? (double)base[i] : 0.0);
    double e = fabs(g - ref[i]) / (atol + rtol * fabs(ref[i]));
    if (isnan(e) || isnan(g)) e = INFINITY;
    if (e > w) {
      w   = e;
      *at = i;
    }
  }
  return w;
}

/* -worst: every comparison prints its worst element as a "#" comment line */
static PetscBool show_worst = PETSC_FALSE;

/* Appends one array's verdict to a check; returns 1 if it passed. */
static int cmp(char *detail, size_t len, const char *what, const float *got, const float *base, const double *ref, size_t n, double atol, double rtol)
{
  size_t at;
  double w = worst_ratio(got, base, ref, n, atol, rtol, &at);
  size_t l = strlen(detail);
  if (show_worst)
    printf("# %-24s worst %.3g x tolerance (atol %g, rtol %g): |err| %.3g at |ref| %.3g\n", what, w, atol, rtol, fabs((double)got[at] - (base ? (double)base[at] : 0.0) - ref[at]), fabs(ref[at]));
  if (w <= 1.0) return 1;
  snprintf(detail + l, len - l, "%s[%zu] = %.9g, reference %.9g (%.3g x tolerance); ", what, at, (double)got[at] - (base ? (double)base[at] : 0.0), ref[at], w);
  return 0;
}

static int bitwise_equal(const void *a, const void *b, size_t bytes) { return memcmp(a, b, bytes) == 0; }

/* ---- finite differences ------------------------------------------------ */
typedef double (*LossFn)(void *ctx);

/* Compares grad (float, minus base when accumulated) with central
 * differences of loss() in x at k random coordinates. */
static int fd_check(char *detail, size_t len, const char *what, Rng *r, LossFn loss, void *ctx, double *x, size_t n, const float *grad, const float *base, int k)
{
  const double h = 1e-4;
  int          ok = 1;
  for (int s = 0; s < k; s++) {
    size_t i  = (size_t)rng_int(r, (int)n);
    double x0 = x[i], lp, lm, fd, g;
    x[i]      = x0 + h;
    lp        = loss(ctx);
    x[i]      = x0 - h;
    lm        = loss(ctx);
    x[i]      = x0;
    fd        = (lp - lm) / (2 * h);
    g         = (double)grad[i] - (base ? (double)base[i] : 0.0);
    if (!(fabs(g - fd) <= 2e-5 + 1e-4 * fabs(fd))) {
      size_t l = strlen(detail);
      snprintf(detail + l, len - l, "d%s[%zu] = %.9g, finite difference %.9g; ", what, i, g, fd);
      ok = 0;
    }
  }
  return ok;
}

/* ---- references (double) ----------------------------------------------- */
static void ref_layernorm(double *out, double *mean, double *rstd, const double *x, const double *w, const double *b, int N, int C)
{
  for (int n = 0; n < N; n++) {
    double m = 0, v = 0;
    for (int c = 0; c < C; c++) m += x[n * C + c];
    m /= C;
    for (int c = 0; c < C; c++) v += (x[n * C + c] - m) * (x[n * C + c] - m);
    v /= C;
    double s = 1.0 / sqrt(v + 1e-5);
    for (int c = 0; c < C; c++) out[n * C + c] = (x[n * C + c] - m) * s * w[c] + b[c];
    if (mean) mean[n] = m;
    if (rstd) rstd[n] = s;
  }
}

static void ref_layernorm_backward(double *dx, double *dw, double *db, const double *g, const double *x, const double *w, int N, int C)
{
  double *mean = dvec(N), *rstd = dvec(N), *out = dvec((size_t)N * C);
  ref_layernorm(out, mean, rstd, x, w, w, N, C);
  for (int n = 0; n < N; n++) {
    double gm = 0, gnm = 0;
    for (int c = 0; c < C; c++) {
      double norm = (x[n * C + c] - mean[n]) * rstd[n];
      gm += w[c] * g[n * C + c];
      gnm += w[c] * g[n * C + c] * norm;
    }
    gm /= C;
    gnm /= C;
    for (int c = 0; c < C; c++) {
      double norm = (x[n * C + c] - mean[n]) * rstd[n];
      dx[n * C + c] += (w[c] * g[n * C + c] - gm - norm * gnm) * rstd[n];
      dw[c] += norm * g[n * C + c];
      db[c] += g[n * C + c];
    }
  }
  free(mean);
  free(rstd);
  free(out);
}

static void ref_matmul(double *out, const double *x, const double *w, const double *bias, int N, int C, int OC, int tr)
{
  for (int n = 0; n < N; n++)
    for (int o = 0; o < OC; o++) {
      double s = bias ? bias[o] : 0.0;
      for (int c = 0; c < C; c++) s += x[n * C + c] * (tr ? w[o * C + c] : w[c * OC + o]);
      out[n * OC + o] = s;
    }
}

/* RMSNorm: out = x * rstd * w, rstd = 1/sqrt(mean x^2 + eps) */
static void ref_rmsnorm(double *out, double *rstd, const double *x, const double *w, int N, int C, double eps)
{
  for (int n = 0; n < N; n++) {
    double ss = 0, s;
    for (int c = 0; c < C; c++) ss += x[(size_t)n * C + c] * x[(size_t)n * C + c];
    s = 1.0 / sqrt(ss / C + eps);
    for (int c = 0; c < C; c++) out[(size_t)n * C + c] = x[(size_t)n * C + c] * s * w[c];
    if (rstd) rstd[n] = s;
  }
}

/* dx += d/dx sum(g * out), dw += d/dw sum(g * out), written out from the
 * chain rule: d rstd / d x_j = -rstd^3 x_j / C. */
static void ref_rmsnorm_backward(double *dx, double *dw, const double *g, const double *x, const double *w, int N, int C, double eps)
{
  for (int n = 0; n < N; n++) {
    const double *xr = x + (size_t)n * C, *gr = g + (size_t)n * C;
    double        ss = 0, s, dot = 0;
    for (int c = 0; c < C; c++) ss += xr[c] * xr[c];
    s = 1.0 / sqrt(ss / C + eps);
    for (int c = 0; c < C; c++) dot += gr[c] * w[c] * xr[c];
    for (int c = 0; c < C; c++) {
      dx[(size_t)n * C + c] += gr[c] * w[c] * s - xr[c] * s * s * s * dot / C;
      dw[c] += gr[c] * xr[c] * s;
    }
  }
}

/* Rotary embedding of tensor.h, in double except the angle, which is the
 * float product float(pos) * inv_freq[i] as the op forms it (and Hugging
 * Face): y = x with each (i, i+hd/2) pair of the NH query and NKV key heads
 * turned by that angle (by minus it when inverse); v heads copied. */
static void ref_rope(double *y, const double *x, const int *pos, const float *inv_freq, int N, int NH, int NKV, int hd, int inverse)
{
  int    half = hd / 2;
  size_t W    = (size_t)(NH + 2 * NKV) * hd;
  memcpy(y, x, (size_t)N * W * sizeof(double));
  for (int n = 0; n < N; n++)
    for (int i = 0; i < half; i++) {
      float  ang = (float)pos[n] * inv_freq[i];
      double c = cos((double)ang), s = inverse ? -sin((double)ang) : sin((double)ang);
      for (int h = 0; h < NH + NKV; h++) {
        size_t o = (size_t)n * W + (size_t)h * hd + i;
        double a = x[o], b = x[o + half];
        y[o]        = a * c - b * s;
        y[o + half] = b * c + a * s;
      }
    }
}

static double ref_sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }

/* SwiGLU: out[n,j] = silu(gate) * up, gu = [gate | up] */
static void ref_swiglu(double *out, const double *gu, int N, int F)
{
  for (int n = 0; n < N; n++)
    for (int j = 0; j < F; j++) {
      double g = gu[(size_t)n * 2 * F + j], u = gu[(size_t)n * 2 * F + F + j];
      out[(size_t)n * F + j] = g * ref_sigmoid(g) * u;
    }
}

/* Grouped-query attention: query head h reads kv head h / (NH/NKV); qkv rows
 * are [C + 2*Ckv] (q | k | v), Ckv = NKV*hs. NKV = NH is plain multi-head. */
static void ref_attention(double *out, double *att, const double *qkv, int B, int T, int C, int NH, int NKV)
{
  int     hs = C / NH, grp = NH / NKV;
  size_t  Ckv = (size_t)NKV * hs, C3 = C + 2 * Ckv;
  double  scale = 1.0 / sqrt((double)hs);
  double *s     = dvec(T);
  for (int b = 0; b < B; b++)
    for (int h = 0; h < NH; h++)
      for (int t = 0; t < T; t++) {
        const double *q  = qkv + ((size_t)b * T + t) * C3 + h * hs;
        size_t        kh = (size_t)(h / grp) * hs;
        double        m = -INFINITY, z = 0;
        for (int j = 0; j <= t; j++) {
          const double *k = qkv + ((size_t)b * T + j) * C3 + C + kh;
          s[j]            = 0;
          for (int d = 0; d < hs; d++) s[j] += q[d] * k[d];
          s[j] *= scale;
          m = fmax(m, s[j]);
        }
        for (int j = 0; j <= t; j++) z += exp(s[j] - m);
        for (int d = 0; d < hs; d++) out[((size_t)b * T + t) * C + h * hs + d] = 0;
        for (int j = 0; j < T; j++) {
          double p = j <= t ? exp(s[j] - m) / z : 0.0;
          if (att) att[(((size_t)b * NH + h) * T + t) * T + j] = p;
          for (int d = 0; d < hs && j <= t; d++) out[((size_t)b * T + t) * C + h * hs + d] += p * qkv[((size_t)b * T + j) * C3 + C + Ckv + kh + d];
        }
      }
  free(s);
}

/* dqkv += the gradient of sum(out * dout); the query heads of a group add
 * into their shared k and v gradients. */
static void ref_attention_backward(double *dqkv, const double *dout, const double *qkv, int B, int T, int C, int NH, int NKV)
{
  int     hs = C / NH, grp = NH / NKV;
  size_t  Ckv = (size_t)NKV * hs, C3 = C + 2 * Ckv;
  double  scale = 1.0 / sqrt((double)hs);
  double *att = dvec((size_t)B * NH * T * T), *out = dvec((size_t)B * T * C), *dp = dvec(T);
  ref_attention(out, att, qkv, B, T, C, NH, NKV);
  for (int b = 0; b < B; b++)
    for (int h = 0; h < NH; h++)
      for (int t = 0; t < T; t++) {
        const double *p  = att + (((size_t)b * NH + h) * T + t) * T;
        const double *g  = dout + ((size_t)b * T + t) * C + h * hs;
        size_t        kh = (size_t)(h / grp) * hs, qo = ((size_t)b * T + t) * C3 + h * hs;
        double        dot = 0;
        for (int j = 0; j <= t; j++) {
          size_t vo = ((size_t)b * T + j) * C3 + C + Ckv + kh;
          dp[j]     = 0;
          for (int d = 0; d < hs; d++) {
            dp[j] += g[d] * qkv[vo + d];
            dqkv[vo + d] += p[j] * g[d];
          }
          dot += p[j] * dp[j];
        }
        for (int j = 0; j <= t; j++) {
          size_t ko = ((size_t)b * T + j) * C3 + C + kh;
          double ds = p[j] * (dp[j] - dot) * scale;
          for (int d = 0; d < hs; d++) {
            dqkv[qo + d] += ds * qkv[ko + d];
            dqkv[ko + d] += ds * qkv[qo + d];
          }
        }
      }
  free(att);
  free(out);
  free(dp);
}

static double ref_gelu(double x) { return 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x))); }
static double ref_gelu_grad(double x)
{
  double u = sqrt(2 / M_PI) * (x + 0.044715 * x * x * x), th = tanh(u);
  return 0.5 * (1 + th) + 0.5 * x * (1 - th * th) * sqrt(2 / M_PI) * (1 + 3 * 0.044715 * x * x);
}

/* q = softmax(inv_temp * x) over a row's allowed set (0 outside it), in
 * double; returns the logsumexp. set NULL: the whole vocabulary. Only the
 * set's logits are read. */
static double ref_softmax_row(double *q, const double *x, double it, const int *set, int nset, int V)
{
  double m = -INFINITY, z = 0, l;
  for (int v = 0; v < V; v++) q[v] = set ? 0.0 : 1.0; /* membership first */
  for (int k = 0; k < nset; k++) q[set[k]] = 1.0;
  for (int v = 0; v < V; v++)
    if (q[v] != 0.0) m = fmax(m, it * x[v]);
  for (int v = 0; v < V; v++)
    if (q[v] != 0.0) z += exp(it * x[v] - m);
  l = m + log(z);
  for (int v = 0; v < V; v++) q[v] = q[v] != 0.0 ? exp(it * x[v] - l) : 0.0;
  return l;
}

/* Row n's allowed set in a CSR mask; returns its size, *set NULL for the whole vocabulary. */
static int ref_row_set(const int *off, const int *ids, int n, const int **set)
{
  *set = off && off[n + 1] > off[n] ? ids + off[n] : NULL;
  return *set ? off[n + 1] - off[n] : 0;
}

/* tensor.h's logprob_forward in double; entropy as -sum q log q (not the
 * kernel's lse - sum q y), and q (may be NULL) kept as [N,V] for the backward. */
static void ref_logprob(double *lp, double *lse, double *ent, double *qall, const double *x, const int *tgt, double it, const int *off, const int *ids, int N, int V)
{
  double *q = dvec(V);
  for (int n = 0; n < N; n++) {
    const int *set;
    int        nset = ref_row_set(off, ids, n, &set);
    double     h    = 0;

    lse[n] = ref_softmax_row(q, x + (size_t)n * V, it, set, nset, V);
    lp[n]  = tgt[n] >= 0 ? it * x[(size_t)n * V + tgt[n]] - lse[n] : 0.0;
    for (int v = 0; v < V && tgt[n] >= 0; v++)
      if (q[v] > 0) h -= q[v] * log(q[v]);
    if (ent) ent[n] = h;
    if (qall) memcpy(qall + (size_t)n * V, q, V * sizeof(double));
  }
  free(q);
}

/* ---- checks ------------------------------------------------------------ */
static PetscErrorCode check_backend(void)
{
  const Backend *be = NULL, *bad = NULL;
  PetscErrorCode ierr;
  char           buf[256], detail[512] = "";
  int            ok;

  PetscFunctionBegin;
  PetscCall(backend_get("cpu", &be));
  ok = be == backend_cpu() && !strcmp(be->name, "cpu");
  PetscCall(PetscPushErrorHandler(PetscReturnErrorHandler, NULL));
  ierr = backend_get("tpu", &bad);
  if (!ierr || bad) {
    ok = 0;
    strcat(detail, "backend_get(\"tpu\") did not fail; ");
  }
#ifndef RLFUSE_HAVE_CUDA
  ierr = backend_get("cuda", &bad);
  if (!ierr || bad) {
    ok = 0;
    strcat(detail, "backend_get(\"cuda\") did not fail without CUDA; ");
  }
#endif
  PetscCall(PetscPopErrorHandler());
  PetscCall(backend_cuda_version(buf, sizeof buf));
#ifndef RLFUSE_HAVE_CUDA
  if (strcmp(buf, "none (built without CUDA)")) {
    ok = 0;
    strcat(detail, "backend_cuda_version is wrong; ");
  }
#endif
  test_measure(ok, "backend_get, backend_cuda_version", "%s", detail);
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode check_memory(const Backend *be)
{
  const size_t n = 1001;
  float       *a = NULL, *b = NULL, *h = fvec(n), *h2 = fvec(n);
  char         detail[256] = "";
  int          ok = 1;

  PetscFunctionBegin;
  PetscCall(be->alloc(n * sizeof(float), (void **)&a));
  PetscCall(be->alloc(n * sizeof(float), (void **)&b));
  if ((uintptr_t)a % 64 || (uintptr_t)b % 64) ok = 0, strcat(detail, "not 64-byte aligned; ");
  for (size_t i = 0; i < n; i++)
    if (a[i] != 0.0f) ok = 0;
  if (!ok && !*detail) strcat(detail, "alloc is not zero-filled; ");
  for (size_t i = 0; i < n; i++) h[i] = (float)i + 0.5f;
  PetscCall(be->from_host(a, h, n * sizeof(float)));
  PetscCall(be->copy(b, a, n * sizeof(float)));
  PetscCall(be->zero(a, n * sizeof(float)));
  PetscCall(be->to_host(h2, b, n * sizeof(float)));
  if (!bitwise_equal(h, h2, n * sizeof(float))) ok = 0, strcat(detail, "from_host/copy/to_host round trip differs; ");
  for (size_t i = 0; i < n; i++)
    if (a[i] != 0.0f) {
      ok = 0;
      strcat(detail, "zero left a nonzero; ");
      break;
    }
  PetscCall(be->sync());
  PetscCall(be->free(a));
  PetscCall(be->free(b));
  PetscCall(be->free(NULL));
  test_measure(ok, "memory (alloc zero-filled and aligned, copies, zero, free(NULL))", "%s", detail);
  free(h);
  free(h2);
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Large blocks (the cpu maps them: zero pages on first touch) and grow,
 * where the backend has it: from NULL, larger (the new part zero, the
 * whole block usable), smaller (the block stays). Host-visible memory only. */
static PetscErrorCode check_memory_large(const Backend *be)
{
  const size_t n0 = 3 << 20 >> 2, n1 = 9 << 20 >> 2; /* 3 and 9 MiB of floats */
  float       *a = NULL, *keep;
  char         detail[256] = "";
  int          ok = 1;

  PetscFunctionBegin;
  if (!be->grow || strcmp(be->name, "cpu")) PetscFunctionReturn(PETSC_SUCCESS);
  PetscCall(be->grow((void **)&a, n0 * sizeof(float)));
  if (!a || (uintptr_t)a % 64) ok = 0, strcat(detail, "grow from NULL: not 64-byte aligned; ");
  for (size_t i = 0; ok && i < n0; i++)
    if (a[i] != 0.0f) ok = 0, strcat(detail, "a large block is not zero-filled; ");
  for (size_t i = 0; ok && i < n0; i++) a[i] = 1.0f;
  PetscCall(be->grow((void **)&a, n1 * sizeof(float)));
  if ((uintptr_t)a % 64) ok = 0, strcat(detail, "grown: not 64-byte aligned; ");
  for (size_t i = n0; ok && i < n1; i++)
    if (a[i] != 0.0f) ok = 0, strcat(detail, "the grown part is not zero; ");
  for (size_t i = 0; ok && i < n1; i++) a[i] = (float)(i % 7);
  keep = a;
  PetscCall(be->grow((void **)&a, n0 * sizeof(float)));
  if (a != keep) ok = 0, strcat(detail, "a smaller grow moved the block; ");
  for (size_t i = 0; ok && i < n1; i++)
    if (a[i] != (float)(i % 7)) ok = 0, strcat(detail, "a smaller grow changed the block; ");
  PetscCall(be->free(a));
  a = NULL;
  PetscCall(be->alloc(n1 * sizeof(float), (void **)&a));
  for (size_t i = 0; ok && i < n1; i++)
    if (a[i] != 0.0f) ok = 0, strcat(detail, "alloc of a large block is not zero-filled; ");
  PetscCall(be->grow((void **)&a, 64)); /* a small size: the large block is kept */
  PetscCall(be->free(a));
  test_measure(ok, "memory: large blocks zero-filled, grow (from NULL, larger, smaller)", "%s", detail);
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode check_encoder(const Backend *be, Rng *r)
{
  const int N = 333, C = 160, V = 7, P = 11; /* few tokens/positions: many repeats */
  int      *tok = malloc(N * sizeof(int)), *pos = malloc(N * sizeof(int));
  float    *wte = frand(r, (size_t)V * C, -1, 1), *wpe = frand(r, (size_t)P * C, -1, 1), *out = fvec((size_t)N * C);
  float    *dout = frand(r, (size_t)N * C, -1, 1), *dwte0 = frand(r, (size_t)V * C, -1, 1), *dwpe0 = frand(r, (size_t)P * C, -1, 1);
  float    *dwte = fdup(dwte0, (size_t)V * C), *dwpe = fdup(dwpe0, (size_t)P * C);
  double   *ref = dvec((size_t)N * C), *rte = dvec((size_t)V * C), *rpe = dvec((size_t)P * C);
  char      detail[1024] = "";
  int       ok;

  PetscFunctionBegin;
  for (int n = 0; n < N; n++) tok[n] = rng_int(r, V), pos[n] = rng_int(r, P);
  poison(out, (size_t)N * C);
  PetscCall(be->encoder_forward(out, tok, pos, wte, wpe, N, C, 0, V));
  for (int n = 0; n < N; n++)
    for (int c = 0; c < C; c++) ref[n * C + c] = (double)wte[tok[n] * C + c] + wpe[pos[n] * C + c];
  ok = cmp(detail, sizeof detail, "out", out, NULL, ref, (size_t)N * C, 1e-7, 1e-6);
  test_measure(ok, "encoder_forward", "%s", detail);

  PetscCall(be->encoder_backward(dwte, dwpe, dout, tok, pos, N, C, 0, V));
  for (int n = 0; n < N; n++)
    for (int c = 0; c < C; c++) rte[tok[n] * C + c] += dout[n * C + c], rpe[pos[n] * C + c] += dout[n * C + c];
  detail[0] = 0;
  ok        = cmp(detail, sizeof detail, "dwte", dwte, dwte0, rte, (size_t)V * C, 1e-5, 1e-5);
  ok        = cmp(detail, sizeof detail, "dwpe", dwpe, dwpe0, rpe, (size_t)P * C, 1e-5, 1e-5) && ok;
  test_measure(ok, "encoder_backward (repeated tokens, accumulates)", "%s", detail);
  free(tok), free(pos), free(wte), free(wpe), free(out), free(dout), free(dwte0), free(dwpe0), free(dwte), free(dwpe), free(ref), free(rte), free(rpe);
  PetscFunctionReturn(PETSC_SUCCESS);
}

typedef struct {
  int     N, C;
  double *x, *w, *b, *R, *out;
} LNCtx;

static double ln_loss(void *ctx)
{
  LNCtx *c = ctx;
  double s = 0;
  ref_layernorm(c->out, NULL, NULL, c->x, c->w, c->b, c->N, c->C);
  for (int i = 0; i < c->N * c->C; i++) s += c->out[i] * c->R[i];
  return s;
}

static PetscErrorCode check_layernorm(const Backend *be, Rng *r)
{
  const int N = 333, C = 160; /* N not a multiple of the 64-row block */
  size_t    NC = (size_t)N * C;
  float    *x = frand(r, NC, -2, 3), *w = frand(r, C, 0.5, 1.5), *b = frand(r, C, -0.5, 0.5);
  float    *out = fvec(NC), *mean = fvec(N), *rstd = fvec(N), *g = frand(r, NC, -1, 1);
  float    *dx0 = frand(r, NC, -1, 1), *dw0 = frand(r, C, -1, 1), *db0 = frand(r, C, -1, 1);
  float    *dx = fdup(dx0, NC), *dw = fdup(dw0, C), *db = fdup(db0, C);
  double   *xd = todouble(x, NC), *wd = todouble(w, C), *bd = todouble(b, C), *gd = todouble(g, NC);
  double   *rout = dvec(NC), *rmean = dvec(N), *rrstd = dvec(N), *rdx = dvec(NC), *rdw = dvec(C), *rdb = dvec(C);
  LNCtx     ctx = {N, C, xd, wd, bd, gd, dvec(NC)};
  char      detail[2048] = "";
  int       ok;

  PetscFunctionBegin;
  poison(out, NC), poison(mean, N), poison(rstd, N);
  PetscCall(be->layernorm_forward(out, mean, rstd, x, w, b, N, C));
  ref_layernorm(rout, rmean, rrstd, xd, wd, bd, N, C);
  ok = cmp(detail, sizeof detail, "out", out, NULL, rout, NC, 1e-5, 1e-5);
  ok = cmp(detail, sizeof detail, "mean", mean, NULL, rmean, N, 1e-6, 1e-5) && ok;
  ok = cmp(detail, sizeof detail, "rstd", rstd, NULL, rrstd, N, 1e-6, 1e-5) && ok;
  test_measure(ok, "layernorm_forward", "%s", detail);

  PetscCall(be->layernorm_backward(dx, dw, db, g, x, w, mean, rstd, N, C));
  ref_layernorm_backward(rdx, rdw, rdb, gd, xd, wd, N, C);
  detail[0] = 0;
  ok        = cmp(detail, sizeof detail, "dinp", dx, dx0, rdx, NC, 1e-5, 1e-5);
  ok        = cmp(detail, sizeof detail, "dw", dw, dw0, rdw, C, 1e-4, 1e-5) && ok;
  ok        = cmp(detail, sizeof detail, "db", db, db0, rdb, C, 1e-4, 1e-5) && ok;
  ok        = fd_check(detail, sizeof detail, "inp", r, ln_loss, &ctx, xd, NC, dx, dx0, 12) && ok;
  ok        = fd_check(detail, sizeof detail, "w", r, ln_loss, &ctx, wd, C, dw, dw0, 6) && ok;
  ok        = fd_check(detail, sizeof detail, "b", r, ln_loss, &ctx, bd, C, db, db0, 6) && ok;
  test_measure(ok, "layernorm_backward (accumulates; finite differences)", "%s", detail);
  free(x), free(w), free(b), free(out), free(mean), free(rstd), free(g), free(dx0), free(dw0), free(db0), free(dx), free(dw), free(db);
  free(xd), free(wd), free(bd), free(gd), free(rout), free(rmean), free(rrstd), free(rdx), free(rdw), free(rdb), free(ctx.out);
  PetscFunctionReturn(PETSC_SUCCESS);
}

typedef struct {
  int     N, C;
  double  eps, *x, *w, *R, *out;
} RMSCtx;

static double rms_loss(void *ctx)
{
  RMSCtx *c = ctx;
  double  s = 0;
  ref_rmsnorm(c->out, NULL, c->x, c->w, c->N, c->C, c->eps);
  for (size_t i = 0; i < (size_t)c->N * c->C; i++) s += c->out[i] * c->R[i];
  return s;
}

/* The last NS rows are scaled so that mean(x^2) runs from 0.1 to 10 times eps
 * (eps matters there, and rstd is large); finite differences (h = 1e-4) are
 * taken on the other rows only, where h is small against x. */
static PetscErrorCode check_rmsnorm(const Backend *be, Rng *r, float eps)
{
  const int N = 333, C = 160, NS = 13; /* N not a multiple of the 64-row block */
  size_t    NC = (size_t)N * C, NB = (size_t)(N - NS) * C;
  float    *x = frand(r, NC, -2, 3), *w = frand(r, C, 0.5, 1.5), *out = fvec(NC), *rstd = fvec(N), *g = frand(r, NC, -1, 1);
  float    *dx0 = frand(r, NC, -1, 1), *dw0 = frand(r, C, -1, 1), *dx = fdup(dx0, NC), *dw = fdup(dw0, C);
  double   *xd, *wd = todouble(w, C), *gd = todouble(g, NC), *rout = dvec(NC), *rrstd = dvec(N), *rdx = dvec(NC), *rdw = dvec(C);
  RMSCtx    ctx;
  char      detail[2048] = "", name[128];
  int       ok;

  PetscFunctionBegin;
  for (int k = 0; k < NS; k++) { /* uniform on [-a, a] has mean square a^2/3 */
    double f = pow(10.0, -1.0 + 2.0 * k / (NS - 1)), a = sqrt(3.0 * f * eps);
    for (int c = 0; c < C; c++) x[(size_t)(N - NS + k) * C + c] = (float)rng_unif(r, -a, a);
  }
  xd  = todouble(x, NC);
  ctx = (RMSCtx){N, C, (double)eps, xd, wd, gd, dvec(NC)};
  poison(out, NC), poison(rstd, N);
  PetscCall(be->rmsnorm_forward(out, rstd, x, w, N, C, eps));
  ref_rmsnorm(rout, rrstd, xd, wd, N, C, (double)eps);
  ok = cmp(detail, sizeof detail, "out", out, NULL, rout, NC, 1e-5, 1e-5);
  ok = cmp(detail, sizeof detail, "rstd", rstd, NULL, rrstd, N, 1e-6, 1e-5) && ok;
  snprintf(name, sizeof name, "rmsnorm_forward (eps %g; rows with mean square 0.1-10 eps)", (double)eps);
  test_measure(ok, name, "%s", detail);

  PetscCall(be->rmsnorm_backward(dx, dw, g, x, w, rstd, N, C));
  ref_rmsnorm_backward(rdx, rdw, gd, xd, wd, N, C, (double)eps);
  detail[0] = 0;
  ok = cmp(detail, sizeof detail, "dinp", dx, dx0, rdx, NB, 1e-5, 1e-5);
  /* the small rows: dinp is of order rstd (up to 1/sqrt(1.1 eps)), and so is its rounding */
  for (int k = N - NS; k < N; k++) {
    char what[32];
    snprintf(what, sizeof what, "dinp(row %d)", k);
    ok = cmp(detail, sizeof detail, what, dx + (size_t)k * C, dx0 + (size_t)k * C, rdx + (size_t)k * C, C, 1e-5 * rrstd[k], 1e-5) && ok;
  }
  ok = cmp(detail, sizeof detail, "dw", dw, dw0, rdw, C, 1e-4, 1e-5) && ok;
  ok = fd_check(detail, sizeof detail, "inp", r, rms_loss, &ctx, xd, NB, dx, dx0, 12) && ok;
  ok = fd_check(detail, sizeof detail, "w", r, rms_loss, &ctx, wd, C, dw, dw0, 6) && ok;
  snprintf(name, sizeof name, "rmsnorm_backward (eps %g; accumulates; finite differences)", (double)eps);
  test_measure(ok, name, "%s", detail);
  free(x), free(w), free(out), free(rstd), free(g), free(dx0), free(dw0), free(dx), free(dw);
  free(xd), free(wd), free(gd), free(rout), free(rrstd), free(rdx), free(rdw), free(ctx.out);
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Rows of nh normed heads then NKV v heads (each hd wide) into the normed
 * heads [N*nh, hd] and the v heads [N*NKV, hd]. */
static void qk_split(const float *rows, int N, int nh, int NKV, int hd, float *heads, float *v)
{
  size_t W = (size_t)(nh + NKV) * hd;
  for (int n = 0; n < N; n++) {
    memcpy(heads + (size_t)n * nh * hd, rows + (size_t)n * W, (size_t)nh * hd * sizeof(float));
    memcpy(v + (size_t)n * NKV * hd, rows + (size_t)n * W + (size_t)nh * hd, (size_t)NKV * hd * sizeof(float));
  }
}

/* Qwen3's per-head q/k RMSNorm against ref_rmsnorm(_backward) applied to
 * each head as a row of its own (q heads with wq, k heads with wk): the
 * heads normed in place, v untouched, the saved inputs and 1/rms, the same
 * output without saving; the backward's d in in place of d out (v
 * untouched) and dwq, dwk accumulated. N is not a multiple of the 64-row
 * block of the weight gradients. */
static PetscErrorCode check_qk_norm(const Backend *be, Rng *r, int hd)
{
  const int N = 70, NH = 4, NKV = 2, nh = NH + NKV, W = (NH + 2 * NKV) * hd;
  float     eps = 1e-6f, *qkv = frand(r, (size_t)N * W, -2, 2), *again = fdup(qkv, (size_t)N * W);
  float    *wq = frand(r, hd, 0.5, 1.5), *wk = frand(r, hd, 0.5, 1.5), *in = fvec((size_t)N * nh * hd), *rstd = fvec((size_t)N * nh);
  float    *g = frand(r, (size_t)N * W, -1, 1), *dwq0 = frand(r, hd, -1, 1), *dwk0 = frand(r, hd, -1, 1);
  float    *dwq = fdup(dwq0, hd), *dwk = fdup(dwk0, hd), *got = fvec((size_t)N * nh * hd), *gotd = fvec((size_t)N * nh * hd), *vpart = fvec((size_t)N * NKV * hd);
  float    *vorig = fvec((size_t)N * NKV * hd);
  double   *x = dvec((size_t)N * nh * hd), *gr = dvec((size_t)N * nh * hd), *rout = dvec((size_t)N * nh * hd), *rrstd = dvec((size_t)N * nh);
  double   *rdx = dvec((size_t)N * nh * hd), *rdwq = dvec(hd), *rdwk = dvec(hd), *wqd = todouble(wq, hd), *wkd = todouble(wk, hd), *vref = dvec((size_t)N * NKV * hd);
  char      detail[2048] = "", name[128];
  int       ok;

  PetscFunctionBegin;
  for (int n = 0; n < N; n++) /* the heads as rows; the v heads kept aside */
    for (int h = 0; h < nh + NKV; h++)
      for (int c = 0; c < hd; c++) {
        size_t at = (size_t)n * W + (size_t)h * hd + c;
        if (h < nh) x[((size_t)n * nh + h) * hd + c] = qkv[at], gr[((size_t)n * nh + h) * hd + c] = g[at];
        else vorig[((size_t)n * NKV + h - nh) * hd + c] = qkv[at], vref[((size_t)n * NKV + h - nh) * hd + c] = g[at];
      }
  for (size_t u = 0; u < (size_t)N * nh; u++) {
    const double *w = u % nh < (size_t)NH ? wqd : wkd;
    ref_rmsnorm(rout + u * hd, rrstd + u, x + u * hd, w, 1, hd, (double)eps);
    ref_rmsnorm_backward(rdx + u * hd, u % nh < (size_t)NH ? rdwq : rdwk, gr + u * hd, x + u * hd, w, 1, hd, (double)eps);
  }
  poison(in, (size_t)N * nh * hd), poison(rstd, (size_t)N * nh);
  PetscCall(be->qk_norm_forward(qkv, in, rstd, wq, wk, N, NH, NKV, hd, eps));
  PetscCall(be->qk_norm_forward(again, NULL, NULL, wq, wk, N, NH, NKV, hd, eps));
  qk_split(qkv, N, nh, NKV, hd, got, vpart);
  ok = cmp(detail, sizeof detail, "out", got, NULL, rout, (size_t)N * nh * hd, 1e-5, 1e-5);
  ok = cmp(detail, sizeof detail, "rstd", rstd, NULL, rrstd, (size_t)N * nh, 1e-6, 1e-5) && ok;
  ok = cmp(detail, sizeof detail, "in", in, NULL, x, (size_t)N * nh * hd, 1e-30, 0) && ok;
  {
    double *vo = todouble(vorig, (size_t)N * NKV * hd);
    ok = cmp(detail, sizeof detail, "v", vpart, NULL, vo, (size_t)N * NKV * hd, 1e-30, 0) && ok;
    free(vo);
  }
  ok = ok && !memcmp(again, qkv, (size_t)N * W * sizeof(float));
  snprintf(name, sizeof name, "qk_norm_forward (4 q and 2 k heads of %d, v untouched, the same without saving)", hd);
  test_measure(ok, name, "%s%s", detail, ok ? "" : " (or the output without saving differs)");

  PetscCall(be->qk_norm_backward(g, dwq, dwk, in, rstd, wq, wk, N, NH, NKV, hd));
  qk_split(g, N, nh, NKV, hd, gotd, vpart);
  detail[0] = 0;
  ok = cmp(detail, sizeof detail, "dinp", gotd, NULL, rdx, (size_t)N * nh * hd, 1e-5, 1e-5);
  ok = cmp(detail, sizeof detail, "v", vpart, NULL, vref, (size_t)N * NKV * hd, 1e-30, 0) && ok;
  ok = cmp(detail, sizeof detail, "dwq", dwq, dwq0, rdwq, hd, 1e-4, 1e-5) && ok;
  ok = cmp(detail, sizeof detail, "dwk", dwk, dwk0, rdwk, hd, 1e-4, 1e-5) && ok;
  snprintf(name, sizeof name, "qk_norm_backward (head %d; d in in place, v untouched, dwq and dwk accumulate)", hd);
  test_measure(ok, name, "%s", detail);
  free(qkv), free(again), free(wq), free(wk), free(in), free(rstd), free(g), free(dwq0), free(dwk0), free(dwq), free(dwk);
  free(got), free(gotd), free(vpart), free(vorig), free(x), free(gr), free(rout), free(rrstd), free(rdx), free(rdwq), free(rdwk);
  free(wqd), free(wkd), free(vref);
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* The decode path: 1 to 4 rows (cpu_matmul.c's GEMV) in both layouts and
 * up to 32 rows in the transposed one (its register tiles), C not a
 * multiple of the 16 lanes, against the reference; the same bits with 1, 2
 * and 3 threads; and in the transposed layout every row's bits the same
 * whatever the number of rows beside it (a sequence's logits must not
 * depend on how many others share its decode step). */
static PetscErrorCode check_matmul_rows(const Backend *be, Rng *r)
{
  const int C = 100, OC = 77, NMAX = 32, nt[3] = {1, 2, 3}, nmax = omp_get_max_threads();
  float    *x = frand(r, (size_t)NMAX * C, -1, 1), *w = frand(r, (size_t)C * OC, -1, 1), *bias = frand(r, OC, -1, 1), *out[3], *alone = fvec(OC);
  double   *xd = todouble(x, (size_t)NMAX * C), *wd = todouble(w, (size_t)C * OC), *bd = todouble(bias, OC), *ref = dvec((size_t)NMAX * OC);
  char      detail[1024] = "";
  int       ok = 1, same = 1, rowwise = 1;

  PetscFunctionBegin;
  for (int k = 0; k < 3; k++) out[k] = fvec((size_t)NMAX * OC);
  for (int tr = 0; tr < 2; tr++)
    for (int N = 1; N <= (tr ? NMAX : 4); N += N < 8 ? 1 : 7) {
      char what[32];
      for (int k = 0; k < 3; k++) {
        omp_set_num_threads(nt[k]);
        poison(out[k], (size_t)N * OC);
        PetscCall(be->matmul_forward(out[k], x, w, N % 2 ? bias : NULL, N, C, OC, tr ? PETSC_TRUE : PETSC_FALSE));
      }
      ref_matmul(ref, xd, wd, N % 2 ? bd : NULL, N, C, OC, tr);
      snprintf(what, sizeof what, "%s N=%d", tr ? "transposed" : "plain", N);
      ok   = cmp(detail, sizeof detail, what, out[0], NULL, ref, (size_t)N * OC, 1e-5, 1e-5) && ok;
      same = bitwise_equal(out[0], out[1], (size_t)N * OC * sizeof(float)) && bitwise_equal(out[0], out[2], (size_t)N * OC * sizeof(float)) && same;
      for (int n = 0; tr && n < N; n++) {
        PetscCall(be->matmul_forward(alone, x + (size_t)n * C, w, N % 2 ? bias : NULL, 1, C, OC, PETSC_TRUE));
        rowwise = bitwise_equal(alone, out[0] + (size_t)n * OC, (size_t)OC * sizeof(float)) && rowwise;
      }
    }
  omp_set_num_threads(nmax);
  test_measure(ok, "matmul_forward on 1-4 rows in both layouts and up to 32 transposed, with and without bias (the decode path)", "%s", detail);
  test_report(same, "bitwise with 1, 2, 3 threads: matmul_forward on the decode path", "results differ");
  test_report(rowwise, "bitwise: a transposed decode row alone and among 1-32 rows", "a row's bits depend on the rows beside it");
  for (int k = 0; k < 3; k++) free(out[k]);
  free(x), free(w), free(bias), free(alone), free(xd), free(wd), free(bd), free(ref);
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Backend.matmul_forward_rows (-gen_batch_invariant's matmuls): in both
 * layouts, every row of calls of 1 to 333 rows (past the decode path's 4
 * and 32, where matmul_forward would take sgemm) has the bits of the same
 * row alone through matmul_forward (the decode path's kernels), with 1, 2
 * and 3 threads, and agrees with the reference. */
static PetscErrorCode check_matmul_batch_invariant(const Backend *be, Rng *r)
{
  const int C = 100, OC = 77, NMAX = 333, Ns[5] = {1, 5, 33, 100, NMAX}, nt[3] = {1, 2, 3}, nmax = omp_get_max_threads();
  float    *x = frand(r, (size_t)NMAX * C, -1, 1), *w = frand(r, (size_t)C * OC, -1, 1), *bias = frand(r, OC, -1, 1), *out = fvec((size_t)NMAX * OC), *alone = fvec((size_t)NMAX * OC);
  double   *xd = todouble(x, (size_t)NMAX * C), *wd = todouble(w, (size_t)C * OC), *bd = todouble(bias, OC), *ref = dvec((size_t)NMAX * OC);
  char      detail[1024] = "";
  int       ok = 1, rowwise = 1;

  PetscFunctionBegin;
  for (int tr = 0; tr < 2; tr++) {
    for (int n = 0; n < NMAX; n++) PetscCall(be->matmul_forward(alone + (size_t)n * OC, x + (size_t)n * C, w, bias, 1, C, OC, tr ? PETSC_TRUE : PETSC_FALSE));
    for (int k = 0; k < 5; k++)
      for (int t = 0; t < 3; t++) {
        char what[48];
        omp_set_num_threads(nt[t]);
        poison(out, (size_t)Ns[k] * OC);
        PetscCall(be->matmul_forward_rows(out, x, w, bias, Ns[k], C, OC, tr ? PETSC_TRUE : PETSC_FALSE));
        rowwise = bitwise_equal(out, alone, (size_t)Ns[k] * OC * sizeof(float)) && rowwise;
        if (t) continue;
        ref_matmul(ref, xd, wd, bd, Ns[k], C, OC, tr);
        snprintf(what, sizeof what, "%s N=%d", tr ? "transposed" : "plain", Ns[k]);
        ok = cmp(detail, sizeof detail, what, out, NULL, ref, (size_t)Ns[k] * OC, 1e-5, 1e-5) && ok;
      }
  }
  omp_set_num_threads(nmax);
  test_measure(ok, "matmul_forward_rows, 1-333 rows in both layouts", "%s", detail);
  test_report(rowwise, "bitwise: matmul_forward_rows, a row alone and among 5, 33, 100, 333 rows in both layouts, with 1, 2, 3 threads", "a row's bits depend on the rows beside it");
  free(x), free(w), free(bias), free(out), free(alone), free(xd), free(wd), free(bd), free(ref);
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode check_matmul(const Backend *be, Rng *r, int tr)
{
  const int N = 333, C = 96, OC = 160;
  float    *x = frand(r, (size_t)N * C, -1, 1), *w = frand(r, (size_t)C * OC, -1, 1), *bias = frand(r, OC, -1, 1);
  float    *out = fvec((size_t)N * OC), *g = frand(r, (size_t)N * OC, -1, 1);
  float    *dx0 = frand(r, (size_t)N * C, -1, 1), *dw0 = frand(r, (size_t)C * OC, -1, 1), *db0 = frand(r, OC, -1, 1);
  float    *dx = fdup(dx0, (size_t)N * C), *dw = fdup(dw0, (size_t)C * OC), *db = fdup(db0, OC), *dw2 = fdup(dw0, (size_t)C * OC);
  double   *xd = todouble(x, (size_t)N * C), *wd = todouble(w, (size_t)C * OC), *bd = todouble(bias, OC);
  double   *ref = dvec((size_t)N * OC), *rdx = dvec((size_t)N * C), *rdw = dvec((size_t)C * OC), *rdb = dvec(OC);
  char      name[128], detail[1024] = "";
  int       ok;

  PetscFunctionBegin;
  poison(out, (size_t)N * OC);
  PetscCall(be->matmul_forward(out, x, w, bias, N, C, OC, tr ? PETSC_TRUE : PETSC_FALSE));
  ref_matmul(ref, xd, wd, bd, N, C, OC, tr);
  ok = cmp(detail, sizeof detail, "out", out, NULL, ref, (size_t)N * OC, 1e-5, 1e-5);
  poison(out, (size_t)N * OC);
  PetscCall(be->matmul_forward(out, x, w, NULL, N, C, OC, tr ? PETSC_TRUE : PETSC_FALSE));
  ref_matmul(ref, xd, wd, NULL, N, C, OC, tr);
  ok = cmp(detail, sizeof detail, "out(no bias)", out, NULL, ref, (size_t)N * OC, 1e-5, 1e-5) && ok;
  snprintf(name, sizeof name, "matmul_forward%s (with and without bias)", tr ? " transposed" : "");
  test_measure(ok, name, "%s", detail);

  PetscCall(be->matmul_backward(dx, dw, db, g, x, w, N, C, OC, tr ? PETSC_TRUE : PETSC_FALSE));
  PetscCall(be->matmul_backward(NULL, dw2, NULL, g, x, w, N, C, OC, tr ? PETSC_TRUE : PETSC_FALSE));
  for (int n = 0; n < N; n++)
    for (int o = 0; o < OC; o++) {
      double gv = g[n * OC + o];
      for (int c = 0; c < C; c++) {
        size_t wi = tr ? (size_t)o * C + c : (size_t)c * OC + o;
        rdx[n * C + c] += gv * wd[wi];
        rdw[wi] += gv * xd[n * C + c];
      }
      rdb[o] += gv;
    }
  detail[0] = 0;
  ok        = cmp(detail, sizeof detail, "dinp", dx, dx0, rdx, (size_t)N * C, 1e-5, 1e-5);
  ok        = cmp(detail, sizeof detail, "dw", dw, dw0, rdw, (size_t)C * OC, 1e-4, 1e-5) && ok;
  ok        = cmp(detail, sizeof detail, "dw(dinp NULL)", dw2, dw0, rdw, (size_t)C * OC, 1e-4, 1e-5) && ok;
  ok        = cmp(detail, sizeof detail, "dbias", db, db0, rdb, OC, 1e-4, 1e-5) && ok;
  snprintf(name, sizeof name, "matmul_backward%s (accumulates; NULL dinp/dbias)", tr ? " transposed" : "");
  test_measure(ok, name, "%s", detail);
  free(x), free(w), free(bias), free(out), free(g), free(dx0), free(dw0), free(db0), free(dx), free(dw), free(db), free(dw2);
  free(xd), free(wd), free(bd), free(ref), free(rdx), free(rdw), free(rdb);
  PetscFunctionReturn(PETSC_SUCCESS);
}

typedef struct {
  int     B, T, C, NH, NKV;
  double *qkv, *R, *out;
} AttCtx;

static double att_loss(void *ctx)
{
  AttCtx *a = ctx;
  double  s = 0;
  ref_attention(a->out, NULL, a->qkv, a->B, a->T, a->C, a->NH, a->NKV);
  for (size_t i = 0; i < (size_t)a->B * a->T * a->C; i++) s += a->out[i] * a->R[i];
  return s;
}

/* ", head size hs[, GQA NH query heads over NKV kv heads]" for a check's name */
static void heads_label(char *buf, size_t len, int hs, int NH, int NKV)
{
  snprintf(buf, len, ", head size %d", hs);
  if (NKV != NH) snprintf(buf + strlen(buf), len - strlen(buf), ", GQA %d query heads over %d kv head%s", NH, NKV, NKV > 1 ? "s" : "");
}

/* The float reference that keeps the T x T probabilities (the former
 * training attention, regression/ref_attention.c; check_attention_tiled
 * compares the backend's op with it), against the double reference. T = 70: a partial 16-lane block and two 64-row
 * query blocks. NKV = NH is GPT-2's multi-head attention; NKV < NH
 * grouped-query attention, whose query heads share (and add into the
 * gradients of) their kv head. */
static PetscErrorCode check_attention(const Backend *be, Rng *r, int NH, int NKV)
{
  const int B = 2, T = 70, C = 64, hs = C / NH;
  size_t    C3 = (size_t)C + 2 * (size_t)NKV * hs, nq = (size_t)B * T * C3, no = (size_t)B * T * C, na = (size_t)B * NH * T * T;
  float    *qkv = frand(r, nq, -1.5, 1.5), *out = fvec(no), *att = fvec(na), *g = frand(r, no, -1, 1);
  float    *dq0 = frand(r, nq, -1, 1), *dq = fdup(dq0, nq);
  double   *qd = todouble(qkv, nq), *gd = todouble(g, no), *rout = dvec(no), *ratt = dvec(na), *rdq = dvec(nq);
  AttCtx    ctx = {B, T, C, NH, NKV, qd, gd, dvec(no)};
  char      detail[2048] = "", gqa[64] = "", name[160];
  int       ok;

  PetscFunctionBegin;
  heads_label(gqa, sizeof gqa, hs, NH, NKV);
  poison(out, no), poison(att, na);
  (void)be;
  PetscCall(ref_attention_probs_forward(out, att, qkv, B, T, C, NH, NKV));
  ref_attention(rout, ratt, qd, B, T, C, NH, NKV);
  ok = cmp(detail, sizeof detail, "out", out, NULL, rout, no, 1e-5, 1e-5);
  ok = cmp(detail, sizeof detail, "att", att, NULL, ratt, na, 1e-6, 1e-5) && ok;
  snprintf(name, sizeof name, "ref_attention_probs_forward, the T x T reference (out, probabilities, zeros above the diagonal%s)", gqa);
  test_measure(ok, name, "%s", detail);

  PetscCall(ref_attention_probs_backward(dq, g, qkv, out, att, B, T, C, NH, NKV));
  ref_attention_backward(rdq, gd, qd, B, T, C, NH, NKV);
  detail[0] = 0;
  ok        = cmp(detail, sizeof detail, "dqkv", dq, dq0, rdq, nq, 1e-5, 1e-5);
  ok        = fd_check(detail, sizeof detail, "qkv", r, att_loss, &ctx, qd, nq, dq, dq0, 24) && ok;
  if (NKV != NH) /* the shared k and v columns, where the group's sums meet */
    ok = fd_check(detail, sizeof detail, "qkv(k,v)", r, att_loss, &ctx, qd + C, nq - C, dq + C, dq0 + C, 12) && ok;
  snprintf(name, sizeof name, "ref_attention_probs_backward, the T x T reference (accumulates; finite differences%s)", gqa);
  test_measure(ok, name, "%s", detail);
  free(qkv), free(out), free(att), free(g), free(dq0), free(dq), free(qd), free(gd), free(rout), free(ratt), free(rdq), free(ctx.out);
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* ---- the tiled attention (log-sum-exp) ------------------------------------ */

/* lse[b,h,t] = log sum_{j<=t} exp(scale q_t.k_j), in double. */
static void ref_attention_lse(double *lse, const double *qkv, int B, int T, int C, int NH, int NKV)
{
  int    hs = C / NH, grp = NH / NKV;
  size_t Ckv = (size_t)NKV * hs, C3 = C + 2 * Ckv;
  double scale = 1.0 / sqrt((double)hs), *s = dvec(T);
  for (int b = 0; b < B; b++)
    for (int h = 0; h < NH; h++)
      for (int t = 0; t < T; t++) {
        double m = -INFINITY, z = 0;
        for (int j = 0; j <= t; j++) {
          s[j] = 0;
          for (int d = 0; d < hs; d++) s[j] += qkv[((size_t)b * T + t) * C3 + h * hs + d] * qkv[((size_t)b * T + j) * C3 + C + (size_t)(h / grp) * hs + d];
          s[j] *= scale;
          m = fmax(m, s[j]);
        }
        for (int j = 0; j <= t; j++) z += exp(s[j] - m);
        lse[((size_t)b * NH + h) * T + t] = m + log(z);
      }
  free(s);
}

/* Compares grad (minus base) at k random coordinates with Richardson-
 * extrapolated central differences of loss(): (4 D(h/2) - D(h)) / 3, whose
 * truncation error is O(h^4) (h = 1e-2: ~1e-9 here), so the tolerance is
 * the float gradient's own rounding, not the difference's. */
static int fd_richardson(char *detail, size_t len, const char *what, Rng *r, LossFn loss, void *ctx, double *x, size_t n, const float *grad, const float *base, int k, double atol, double rtol)
{
  const double h  = 1e-2;
  int          ok = 1;
  for (int s = 0; s < k; s++) {
    size_t i  = (size_t)rng_int(r, (int)n);
    double x0 = x[i], d[2], g;
    for (int e = 0; e < 2; e++) {
      double he = e ? h / 2 : h, lp, lm;
      x[i] = x0 + he, lp = loss(ctx);
      x[i] = x0 - he, lm = loss(ctx);
      d[e] = (lp - lm) / (2 * he);
    }
    x[i] = x0;
    d[0] = (4 * d[1] - d[0]) / 3;
    g    = (double)grad[i] - (base ? (double)base[i] : 0.0);
    if (!(fabs(g - d[0]) <= atol + rtol * fabs(d[0]))) {
      size_t l = strlen(detail);
      snprintf(detail + l, len - l, "d%s[%zu] = %.9g, Richardson difference %.9g; ", what, i, g, d[0]);
      ok = 0;
    }
  }
  return ok;
}

typedef struct {
  int    B, T, hs, NH, NKV;
  double amp; /* inputs uniform in [-amp, amp]: 3 makes some rows' softmax nearly one-hot */
} TiledCase;

/* One case: the backend's tiled forward/backward (att = the log-sum-exp
 * [B,NH,T], a guard after it must stay untouched) against the probabilities
 * reference (the forward's out bit for bit: the same sgemm and softmax
 * arithmetic; dqkv to 1e-5, the same tolerance as both against double) and
 * against the double reference (out, lse, dqkv); with fd > 0 also the
 * gradient at fd coordinates by Richardson differences, and the same bits
 * with 1, 2 and 3 threads. */
static PetscErrorCode check_attention_tiled_case(const Backend *be, Rng *r, const TiledCase *tc, int fd)
{
  const int B = tc->B, T = tc->T, NH = tc->NH, NKV = tc->NKV, C = tc->hs * NH, GUARD = 64, nt[3] = {1, 2, 3};
  size_t    C3 = (size_t)C + 2 * (size_t)NKV * tc->hs, nq = (size_t)B * T * C3, no = (size_t)B * T * C, nl = (size_t)B * NH * T, na = (size_t)B * NH * T * T;
  float    *qkv = frand(r, nq, -tc->amp, tc->amp), *g = frand(r, no, -1, 1), *out = fvec(no), *lse = fvec(nl + GUARD), *dq0 = frand(r, nq, -1, 1), *dq = fdup(dq0, nq);
  float    *pout = fvec(no), *patt = fvec(na), *pdq = fdup(dq0, nq), *pd = fvec(nq);
  double   *qd = todouble(qkv, nq), *gd = todouble(g, no), *rout = dvec(no), *rlse = dvec(nl), *rdq = dvec(nq), *pdd = dvec(nq);
  AttCtx    ctx = {B, T, C, NH, NKV, qd, gd, dvec(no)};
  char      detail[2048] = "", name[224];
  int       ok, guard = 1, nmax = omp_get_max_threads();

  PetscFunctionBegin;
  poison(out, no), poison(lse, nl + GUARD);
  PetscCall(be->attention_forward(out, lse, qkv, B, T, C, NH, NKV));
  PetscCall(ref_attention_probs_forward(pout, patt, qkv, B, T, C, NH, NKV));
  ref_attention(rout, NULL, qd, B, T, C, NH, NKV);
  ref_attention_lse(rlse, qd, B, T, C, NH, NKV);
  for (int i = 0; i < GUARD; i++) guard &= !(lse[nl + i] == lse[nl + i]); /* still NaN */
  ok = bitwise_equal(out, pout, no * sizeof(float));
  if (!ok) snprintf(detail, sizeof detail, "out is not the reference's bits; ");
  if (!guard) snprintf(detail + strlen(detail), sizeof detail - strlen(detail), "wrote past lse [B,NH,T]; ");
  ok = cmp(detail, sizeof detail, "out", out, NULL, rout, no, 1e-5, 1e-5) && guard && ok;
  ok = cmp(detail, sizeof detail, "lse", lse, NULL, rlse, nl, 1e-5, 1e-5) && ok;
  snprintf(name, sizeof name, "tiled attention_forward B=%d T=%d hs=%d heads %d over %d%s (out = the T x T reference's bits; lse against double)", B, T, tc->hs, NH, NKV, tc->amp > 2 ? ", sharp" : "");
  test_measure(ok, name, "%s", detail);

  PetscCall(be->attention_backward(dq, g, qkv, out, lse, B, T, C, NH, NKV));
  PetscCall(ref_attention_probs_backward(pdq, g, qkv, pout, patt, B, T, C, NH, NKV));
  ref_attention_backward(rdq, gd, qd, B, T, C, NH, NKV);
  for (size_t i = 0; i < nq; i++) pdd[i] = (double)pdq[i] - (double)dq0[i];
  detail[0] = 0;
  ok        = cmp(detail, sizeof detail, "dqkv", dq, dq0, rdq, nq, 1e-5, 1e-5);
  ok        = cmp(detail, sizeof detail, "dqkv-vs-T x T", dq, dq0, pdd, nq, 1e-5, 1e-5) && ok;
  if (fd) ok = fd_richardson(detail, sizeof detail, "qkv", r, att_loss, &ctx, qd, nq, dq, dq0, fd, 2e-6, 1e-5) && ok;
  snprintf(name, sizeof name, "tiled attention_backward B=%d T=%d hs=%d heads %d over %d%s (accumulates; against double and the T x T reference%s)", B, T, tc->hs, NH, NKV,
           tc->amp > 2 ? ", sharp" : "", fd ? "; Richardson differences" : "");
  test_measure(ok, name, "%s", detail);

  if (fd) { /* thread counts: out, lse and dqkv the same bits */
    int same = 1;
    for (int k = 0; k < 3; k++) {
      float *o = fvec(no), *l = fvec(nl), *d = fdup(dq0, nq);
      omp_set_num_threads(nt[k]);
      PetscCall(be->attention_forward(o, l, qkv, B, T, C, NH, NKV));
      PetscCall(be->attention_backward(d, g, qkv, o, l, B, T, C, NH, NKV));
      same &= bitwise_equal(o, out, no * sizeof(float)) && bitwise_equal(l, lse, nl * sizeof(float)) && bitwise_equal(d, dq, nq * sizeof(float));
      free(o), free(l), free(d);
    }
    omp_set_num_threads(nmax);
    snprintf(name, sizeof name, "bitwise with 1, 2, 3 threads: tiled attention B=%d T=%d hs=%d heads %d over %d", B, T, tc->hs, NH, NKV);
    test_report(same, name, "results differ");
  }
  free(qkv), free(g), free(out), free(lse), free(dq0), free(dq), free(pout), free(patt), free(pdq), free(pd);
  free(qd), free(gd), free(rout), free(rlse), free(rdq), free(pdd), free(ctx.out);
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* The training attention of the backend (the log-sum-exp: no T x T array)
 * over the shapes that reach its edges: T = 1, odd T, T on either side of
 * the 64-row query block and two blocks and more; head sizes 16, 32, 64;
 * multi-head, GQA 4:2 and 7:1; inputs that make the softmax sharp. The
 * small cases also get Richardson differences and the thread counts. */
static PetscErrorCode check_attention_tiled(const Backend *be, Rng *r)
{
  const TiledCase cases[] = {
    {1, 1, 16, 4, 4, 1.5},  {2, 1, 32, 7, 1, 1.5},  {3, 7, 16, 4, 2, 1.5},   {1, 63, 64, 4, 4, 1.5}, {2, 64, 32, 7, 1, 1.5},
    {1, 65, 16, 4, 2, 1.5}, {3, 130, 32, 4, 4, 1.5}, {2, 130, 64, 7, 1, 1.5}, {2, 130, 16, 4, 2, 3.0}, {1, 200, 64, 4, 2, 1.5},
  };
  const TiledCase fdc[] = {{2, 7, 16, 7, 1, 1.5}, {1, 70, 16, 4, 2, 1.5}, {2, 65, 32, 4, 4, 1.5}};

  PetscFunctionBegin;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) PetscCall(check_attention_tiled_case(be, r, &cases[i], 0));
  for (size_t i = 0; i < sizeof fdc / sizeof fdc[0]; i++) PetscCall(check_attention_tiled_case(be, r, &fdc[i], 16));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Three sequences: the full forward over all of them is the reference for
 * (a) a prefill of each whole sequence and (b) a decode that interleaves the
 * slots, starting from prompts of different lengths, in a cache whose Tmax
 * exceeds T and with a spare slot. The two paths share their arithmetic, so
 * they agree to rounding (1e-6): the training forward runs through sgemm.
 * The cache holds NKV heads per position ([nslot, Tmax, NKV*hs]), sized
 * exactly, and starts NaN so an unwritten entry that is read fails. */
static PetscErrorCode check_attention_cached(const Backend *be, Rng *r, int C, int NH, int NKV)
{
  const int B = 3, T = 37, Tmax = T + 5, nslot = 4, hs = C / NH;
  const int slot_of[3] = {2, 0, 3}, prompt[3] = {5, 1, 20};
  size_t    Ckv = (size_t)NKV * hs, C3 = (size_t)C + 2 * Ckv, cache = (size_t)nslot * Tmax * Ckv;
  float    *qkv = frand(r, (size_t)B * T * C3, -1.5, 1.5), *full = fvec((size_t)B * T * C), *got = fvec((size_t)B * T * C);
  float    *kc = fvec(cache), *vc = fvec(cache), *rowqkv = fvec(3 * C3), *rowout = fvec(3 * (size_t)C);
  double   *ref = dvec((size_t)B * T * C);
  int      *slot = malloc(T * sizeof(int)), *pos = malloc(T * sizeof(int)), done[3];
  char      detail[1024] = "", buf[128], gqa[64] = "", name[192];
  int       ok, bitwise;

  PetscFunctionBegin;
  heads_label(gqa, sizeof gqa, hs, NH, NKV);
  PetscCall(be->attention_forward(full, NULL, qkv, B, T, C, NH, NKV));
  for (size_t i = 0; i < (size_t)B * T * C; i++) ref[i] = full[i];

  /* (a) prefill: one call per sequence with all its rows */
  poison(kc, cache), poison(vc, cache), poison(got, (size_t)B * T * C);
  for (int b = 0; b < B; b++) {
    for (int t = 0; t < T; t++) slot[t] = slot_of[b], pos[t] = t;
    PetscCall(be->attention_cached(got + (size_t)b * T * C, kc, vc, qkv + (size_t)b * T * C3, slot, pos, T, Tmax, C, NH, NKV));
  }
  ok      = cmp(detail, sizeof detail, "out", got, NULL, ref, (size_t)B * T * C, 1e-6, 1e-6);
  bitwise = bitwise_equal(got, full, (size_t)B * T * C * sizeof(float));
  for (int b = 0; b < B; b++) /* the cache holds each row's k and v, as given */
    for (int t = 0; t < T; t++) {
      const float *row = qkv + ((size_t)b * T + t) * C3;
      size_t       at  = ((size_t)slot_of[b] * Tmax + t) * Ckv;
      if (!bitwise_equal(kc + at, row + C, Ckv * sizeof(float)) || !bitwise_equal(vc + at, row + C + Ckv, Ckv * sizeof(float))) {
        if (ok) snprintf(detail + strlen(detail), sizeof detail - strlen(detail), "cache entry of slot %d position %d is not the row's k|v; ", slot_of[b], t);
        ok = 0;
      }
    }
  snprintf(name, sizeof name, "attention_cached prefill = attention_forward%s", gqa);
  test_measure(ok, name, "%s", ok ? (bitwise ? "(bitwise)" : "(to 1e-6)") : detail);

  /* (b) prompts of different lengths, then one token per unfinished slot per call, in rotating order */
  poison(kc, cache), poison(vc, cache), poison(got, (size_t)B * T * C);
  detail[0] = 0;
  for (int b = 0; b < B; b++) {
    for (int t = 0; t < prompt[b]; t++) slot[t] = slot_of[b], pos[t] = t;
    PetscCall(be->attention_cached(got + (size_t)b * T * C, kc, vc, qkv + (size_t)b * T * C3, slot, pos, prompt[b], Tmax, C, NH, NKV));
    done[b] = prompt[b];
  }
  for (int step = 0;; step++) {
    int seq[3], n = 0;
    for (int k = 0; k < B; k++) {
      int b = (k + step) % B;
      if (done[b] < T) {
        seq[n] = b, slot[n] = slot_of[b], pos[n] = done[b];
        memcpy(rowqkv + n * C3, qkv + ((size_t)b * T + done[b]) * C3, C3 * sizeof(float));
        n++;
      }
    }
    if (!n) break;
    poison(rowout, 3 * (size_t)C);
    PetscCall(be->attention_cached(rowout, kc, vc, rowqkv, slot, pos, n, Tmax, C, NH, NKV));
    for (int k = 0; k < n; k++) {
      memcpy(got + ((size_t)seq[k] * T + done[seq[k]]) * C, rowout + (size_t)k * C, C * sizeof(float));
      done[seq[k]]++;
    }
  }
  ok      = cmp(detail, sizeof detail, "out", got, NULL, ref, (size_t)B * T * C, 1e-6, 1e-6);
  bitwise = bitwise_equal(got, full, (size_t)B * T * C * sizeof(float));
  snprintf(buf, sizeof buf, "%s", bitwise ? "(bitwise)" : "(to 1e-6)");
  snprintf(name, sizeof name, "attention_cached decode over 3 interleaved slots = attention_forward%s", gqa);
  test_measure(ok, name, "%s", ok ? buf : detail);
  free(qkv), free(full), free(got), free(kc), free(vc), free(rowqkv), free(rowout), free(ref), free(slot), free(pos);
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode check_pointwise(const Backend *be, Rng *r)
{
  const size_t n = 100003;
  float       *x = frand(r, n, -6, 6), *y = frand(r, n, -1, 1), *out = fvec(n), *g = frand(r, n, -1, 1);
  float       *dx0 = frand(r, n, -1, 1), *dx = fdup(dx0, n), *y2 = fdup(y, n);
  double      *ref = dvec(n);
  char         detail[1024] = "";
  int          ok;

  PetscFunctionBegin;
  poison(out, n);
  PetscCall(be->gelu_forward(out, x, n));
  for (size_t i = 0; i < n; i++) ref[i] = ref_gelu(x[i]);
  ok = cmp(detail, sizeof detail, "out", out, NULL, ref, n, 1e-6, 1e-6);
  test_measure(ok, "gelu_forward (tanh approximation)", "%s", detail);

  PetscCall(be->gelu_backward(dx, x, g, n));
  detail[0] = 0;
  for (size_t i = 0; i < n; i++) ref[i] = (double)g[i] * ref_gelu_grad(x[i]);
  ok = cmp(detail, sizeof detail, "dinp", dx, dx0, ref, n, 2e-6, 1e-5);
  for (int s = 0; s < 16; s++) { /* the analytic derivative against differences of the forward */
    size_t i  = (size_t)rng_int(r, (int)n);
    double fd = (ref_gelu(x[i] + 1e-5) - ref_gelu(x[i] - 1e-5)) / 2e-5;
    if (fabs(fd - ref_gelu_grad(x[i])) > 1e-7 * (1 + fabs(fd))) ok = 0, strcat(detail, "reference derivative disagrees with finite differences; ");
  }
  test_measure(ok, "gelu_backward (accumulates; finite differences)", "%s", detail);

  detail[0] = 0;
  poison(out, n);
  PetscCall(be->residual_forward(out, x, y, n));
  for (size_t i = 0; i < n; i++) ref[i] = (double)x[i] + y[i];
  ok = cmp(detail, sizeof detail, "residual", out, NULL, ref, n, 1e-7, 1e-6);
  PetscCall(be->axpy(y2, 0.37f, x, n));
  for (size_t i = 0; i < n; i++) ref[i] = (double)y[i] + 0.37f * (double)x[i];
  ok = cmp(detail, sizeof detail, "axpy", y2, NULL, ref, n, 1e-6, 1e-6) && ok;
  PetscCall(be->scale(y2, -1.75f, n));
  for (size_t i = 0; i < n; i++) ref[i] *= -1.75;
  ok = cmp(detail, sizeof detail, "scale", y2, NULL, ref, n, 1e-6, 1e-6) && ok;
  test_measure(ok, "residual_forward, axpy, scale", "%s", detail);
  free(x), free(y), free(out), free(g), free(dx0), free(dx), free(y2), free(ref);
  PetscFunctionReturn(PETSC_SUCCESS);
}

typedef struct {
  int          N, NH, NKV, hd;
  const int   *pos;
  const float *inv_freq;
  double      *x, *R, *y;
} RopeCtx;

static double rope_loss(void *ctx)
{
  RopeCtx *c = ctx;
  double   s = 0;
  ref_rope(c->y, c->x, c->pos, c->inv_freq, c->N, c->NH, c->NKV, c->hd, 0);
  for (size_t i = 0; i < (size_t)c->N * (c->NH + 2 * c->NKV) * c->hd; i++) s += c->y[i] * c->R[i];
  return s;
}

/* In place on qkv rows [N, (NH + 2 NKV) hd], GQA 4 query heads over 2 kv
 * heads, hd 32, theta 500000 (Llama 3), positions up to 131071 with some 0.
 * Forward and inverse against the double reference (the same float angle),
 * the v heads untouched, positions 0 unchanged, inverse(forward(x)) = x to
 * rounding, and the gradient: the loss sum R . rope(x) has gradient
 * rope^T R = inverse(R), compared with finite differences. */
static PetscErrorCode check_rope(const Backend *be, Rng *r)
{
  const int    N = 333, NH = 4, NKV = 2, hd = 32, half = hd / 2;
  const double theta = 500000.0;
  size_t       W = (size_t)(NH + 2 * NKV) * hd, NW = (size_t)N * W, nqk = (size_t)(NH + NKV) * hd;
  float       *x = frand(r, NW, -1.5, 1.5), *y = fvec(NW), *z = fvec(NW), *R = frand(r, NW, -1, 1), *gr = fvec(NW), inv_freq[16];
  int         *pos = malloc(N * sizeof(int)), okv = 1, ok0 = 1, ok;
  double      *xd = todouble(x, NW), *Rd = todouble(R, NW), *ref = dvec(NW), *xref = todouble(x, NW);
  RopeCtx      ctx = {N, NH, NKV, hd, pos, inv_freq, xd, Rd, dvec(NW)};
  char         detail[2048] = "";

  PetscFunctionBegin;
  for (int i = 0; i < half; i++) inv_freq[i] = (float)(1.0 / pow(theta, 2.0 * i / hd));
  for (int n = 0; n < N; n++) pos[n] = n % 11 == 0 ? 0 : n % 7 == 0 ? 131071 - n : rng_int(r, 8192);

  memcpy(y, x, NW * sizeof(float));
  PetscCall(be->rope(y, pos, inv_freq, N, NH, NKV, hd, 0));
  ref_rope(ref, xd, pos, inv_freq, N, NH, NKV, hd, 0);
  ok = cmp(detail, sizeof detail, "out", y, NULL, ref, NW, 1e-6, 1e-6);
  for (int n = 0; n < N; n++) {
    okv &= bitwise_equal(y + n * W + nqk, x + n * W + nqk, (W - nqk) * sizeof(float));
    if (!pos[n]) ok0 &= bitwise_equal(y + n * W, x + n * W, W * sizeof(float));
  }
  if (!okv) strcat(detail, "the v heads changed; ");
  if (!ok0) strcat(detail, "a row at position 0 changed; ");
  test_measure(ok && okv && ok0, "rope forward (GQA 4/2 heads, hd 32, theta 5e5; v heads and position 0 untouched)", "%s", detail);

  detail[0] = 0, okv = 1;
  memcpy(z, x, NW * sizeof(float));
  PetscCall(be->rope(z, pos, inv_freq, N, NH, NKV, hd, 1));
  ref_rope(ref, xd, pos, inv_freq, N, NH, NKV, hd, 1);
  ok = cmp(detail, sizeof detail, "inverse", z, NULL, ref, NW, 1e-6, 1e-6);
  for (int n = 0; n < N; n++) okv &= bitwise_equal(z + n * W + nqk, x + n * W + nqk, (W - nqk) * sizeof(float));
  if (!okv) strcat(detail, "the inverse changed the v heads; ");
  PetscCall(be->rope(y, pos, inv_freq, N, NH, NKV, hd, 1)); /* y = inverse(forward(x)) */
  ok = cmp(detail, sizeof detail, "inverse(forward)", y, NULL, xref, NW, 1e-6, 1e-6) && ok;
  test_measure(ok && okv, "rope inverse (against the reference, and inverse(forward(x)) = x)", "%s", detail);

  detail[0] = 0;
  memcpy(gr, R, NW * sizeof(float));
  PetscCall(be->rope(gr, pos, inv_freq, N, NH, NKV, hd, 1));
  ok = fd_check(detail, sizeof detail, "qkv", r, rope_loss, &ctx, xd, NW, gr, NULL, 24);
  ok = fd_check(detail, sizeof detail, "qkv(q,k heads of row 1)", r, rope_loss, &ctx, xd + W, nqk, gr + W, NULL, 12) && ok;
  test_measure(ok, "rope gradient = inverse (finite differences of sum R . rope(x))", "%s", detail);
  free(x), free(y), free(z), free(R), free(gr), free(pos), free(xd), free(Rd), free(ref), free(xref), free(ctx.y);
  PetscFunctionReturn(PETSC_SUCCESS);
}

typedef struct {
  int     N, F;
  double *gu, *R, *out;
} SwiCtx;

static double swiglu_loss(void *ctx)
{
  SwiCtx *c = ctx;
  double  s = 0;
  ref_swiglu(c->out, c->gu, c->N, c->F);
  for (size_t i = 0; i < (size_t)c->N * c->F; i++) s += c->out[i] * c->R[i];
  return s;
}

/* gate in [-12, 12] (sigmoid saturating on both sides), up in [-3, 3] */
static PetscErrorCode check_swiglu(const Backend *be, Rng *r)
{
  const int N = 333, F = 160;
  size_t    NF = (size_t)N * F;
  float    *gu = fvec(2 * NF), *out = fvec(NF), *g = frand(r, NF, -1, 1), *d0 = frand(r, 2 * NF, -1, 1), *d = fdup(d0, 2 * NF);
  double   *gud, *gd = todouble(g, NF), *ref = dvec(NF), *rd = dvec(2 * NF);
  SwiCtx    ctx;
  char      detail[2048] = "";
  int       ok;

  PetscFunctionBegin;
  for (int n = 0; n < N; n++)
    for (int j = 0; j < F; j++) gu[(size_t)n * 2 * F + j] = (float)rng_unif(r, -12, 12), gu[(size_t)n * 2 * F + F + j] = (float)rng_unif(r, -3, 3);
  gud = todouble(gu, 2 * NF);
  ctx = (SwiCtx){N, F, gud, gd, dvec(NF)};
  poison(out, NF);
  PetscCall(be->swiglu_forward(out, gu, N, F));
  ref_swiglu(ref, gud, N, F);
  ok = cmp(detail, sizeof detail, "out", out, NULL, ref, NF, 1e-6, 1e-6);
  test_measure(ok, "swiglu_forward (silu(gate) * up)", "%s", detail);

  PetscCall(be->swiglu_backward(d, gu, g, N, F));
  for (int n = 0; n < N; n++)
    for (int j = 0; j < F; j++) {
      double gt = gud[(size_t)n * 2 * F + j], up = gud[(size_t)n * 2 * F + F + j], sg = ref_sigmoid(gt), go = gd[(size_t)n * F + j];
      rd[(size_t)n * 2 * F + j]     = go * up * (sg + gt * sg * (1 - sg));
      rd[(size_t)n * 2 * F + F + j] = go * gt * sg;
    }
  detail[0] = 0;
  ok        = cmp(detail, sizeof detail, "dgu", d, d0, rd, 2 * NF, 2e-6, 1e-5);
  ok        = fd_check(detail, sizeof detail, "gu", r, swiglu_loss, &ctx, gud, 2 * NF, d, d0, 32) && ok;
  test_measure(ok, "swiglu_backward (accumulates; finite differences)", "%s", detail);
  free(gu), free(out), free(g), free(d0), free(d), free(gud), free(gd), free(ref), free(rd), free(ctx.out);
  PetscFunctionReturn(PETSC_SUCCESS);
}

typedef struct {
  int        N, V;
  double    *x, *dlp, *lp, *lse, it;
  const int *tgt, *off, *ids;
} LPCtx;

static double lp_loss(void *ctx)
{
  LPCtx *c = ctx;
  double s = 0;
  ref_logprob(c->lp, c->lse, NULL, NULL, c->x, c->tgt, c->it, c->off, c->ids, c->N, c->V);
  for (int n = 0; n < c->N; n++) s += c->dlp[n] * c->lp[n];
  return s;
}

/* A CSR allowed-token mask over N rows: the rows cycle through an empty range
 * (whole vocabulary), one token, 2..20 tokens and 100..700 tokens, each a
 * random subset in random order. Targets are drawn from the row's set, and
 * every fifth row has none (-1). Returns off [N+1] and ids (malloc'ed). */
static void make_mask(Rng *r, int N, int V, int *tgt, int **off, int **ids)
{
  int *perm = malloc(V * sizeof(int)), *size = malloc(N * sizeof(int));

  *off = malloc((N + 1) * sizeof(int));
  (*off)[0] = 0;
  for (int n = 0; n < N; n++) {
    size[n]       = n % 4 == 0 ? 0 : n % 4 == 1 ? 1 : n % 4 == 2 ? 2 + rng_int(r, 19) : 100 + rng_int(r, 601);
    (*off)[n + 1] = (*off)[n] + size[n];
  }
  *ids = malloc(((*off)[N] ? (*off)[N] : 1) * sizeof(int));
  for (int v = 0; v < V; v++) perm[v] = v;
  for (int n = 0; n < N; n++) {
    int *set = *ids + (*off)[n];
    for (int k = 0; k < size[n]; k++) { /* partial Fisher-Yates: a random subset in random order */
      int j = k + rng_int(r, V - k), t = perm[k];
      perm[k] = perm[j], perm[j] = t;
      set[k] = perm[k];
    }
    tgt[n] = n % 5 == 3 ? -1 : size[n] ? set[rng_int(r, size[n])] : rng_int(r, V);
  }
  free(perm), free(size);
}

/* Logits a masked row must never read are NaN, so any read shows. */
static void nan_outside_sets(float *x, const int *off, const int *ids, int N, int V)
{
  for (int n = 0; n < N; n++) {
    float *row = x + (size_t)n * V, *keep;
    if (off[n + 1] == off[n]) continue;
    keep = fvec(V);
    memcpy(keep, row, V * sizeof(float));
    poison(row, V);
    for (int k = off[n]; k < off[n + 1]; k++) row[ids[k]] = keep[ids[k]];
    free(keep);
  }
}

/* Forward and backward of one distribution (inv_temp, mask) against the double reference. */
static PetscErrorCode check_logprob_dist(const Backend *be, Rng *r, const char *what, float it, const int *off, const int *ids, const int *tgt, int N, int V)
{
  size_t  NV = (size_t)N * V;
  float  *x = frand(r, NV, -6, 6), *lp = fvec(N), *lp2 = fvec(N), *lse = fvec(N), *ent = fvec(N), *dlp = frand(r, N, -1, 1), *dx = fvec(NV);
  double *xd, *dlpd = todouble(dlp, N), *rlp = dvec(N), *rlse = dvec(N), *rent = dvec(N), *q = dvec(NV), *rdx = dvec(NV);
  char    detail[2048] = "", name[160];
  int     ok;
  LPCtx   ctx;

  PetscFunctionBegin;
  if (off) nan_outside_sets(x, off, ids, N, V);
  xd  = todouble(x, NV);
  ctx = (LPCtx){N, V, xd, dlpd, dvec(N), dvec(N), it, tgt, off, ids};
  poison(lp, N), poison(lp2, N), poison(lse, N), poison(ent, N);
  PetscCall(be->logprob_forward(lp, lse, ent, x, tgt, it, off, ids, N, V));
  PetscCall(be->logprob_forward(lp2, NULL, NULL, x, tgt, it, off, ids, N, V));
  ref_logprob(rlp, rlse, rent, q, xd, tgt, it, off, ids, N, V);
  ok = cmp(detail, sizeof detail, "logprob", lp, NULL, rlp, N, 1e-5, 1e-6);
  ok = cmp(detail, sizeof detail, "lse", lse, NULL, rlse, N, 1e-5, 1e-6) && ok;
  ok = cmp(detail, sizeof detail, "entropy", ent, NULL, rent, N, 1e-5, 1e-5) && ok;
  if (!bitwise_equal(lp, lp2, N * sizeof(float))) ok = 0, strcat(detail, "logprob changes when lse and entropy are NULL; ");
  snprintf(name, sizeof name, "logprob_forward, %s (rows without a target give 0)", what);
  test_measure(ok, name, "%s", detail);

  for (int n = 0; n < N; n++)
    for (int v = 0; tgt[n] >= 0 && v < V; v++) rdx[(size_t)n * V + v] = dlpd[n] * it * ((v == tgt[n]) - q[(size_t)n * V + v]);
  poison(dx, NV);
  PetscCall(be->logprob_backward(dx, x, lse, tgt, dlp, it, off, ids, N, V));
  detail[0] = 0;
  ok        = cmp(detail, sizeof detail, "dlogits", dx, NULL, rdx, NV, 1e-7, 1e-5);
  ok        = fd_check(detail, sizeof detail, "logits", r, lp_loss, &ctx, xd, NV, dx, NULL, 32) && ok;
  poison(dx, NV);
  PetscCall(be->logprob_backward(dx, x, NULL, tgt, dlp, it, off, ids, N, V));
  ok = cmp(detail, sizeof detail, "dlogits(lse NULL)", dx, NULL, rdx, NV, 1e-7, 1e-5) && ok;
  snprintf(name, sizeof name, "logprob_backward, %s (overwrites; rows without a target zero; finite differences)", what);
  test_measure(ok, name, "%s", detail);
  free(x), free(lp), free(lp2), free(lse), free(ent), free(dlp), free(dx), free(xd), free(dlpd), free(rlp), free(rlse), free(rent), free(q), free(rdx);
  free(ctx.lp), free(ctx.lse);
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Calls that must fail: each returns an error whose message contains want. */
/* Case c of an error check: ierr must be an error whose message holds want;
 * otherwise ok becomes 0 and detail gets the case, the error and its message. */
static PetscErrorCode expect_error_case(PetscErrorCode ierr, int c, const char *want, int *ok, char *detail, size_t len)
{
  const char *msg = NULL;

  PetscFunctionBegin;
  if (ierr) PetscCall(PetscErrorMessage(ierr, NULL, (char **)&msg));
  if (!ierr || !msg || !strstr(msg, want)) {
    size_t l = strlen(detail);
    *ok      = 0;
    snprintf(detail + l, len - l, "case %d: error %d, message \"%s\" lacks \"%s\"; ", c, (int)ierr, msg ? msg : "", want);
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode check_logprob_errors(const Backend *be, Rng *r)
{
  const int      N = 4, V = 50, off[5] = {0, 3, 3, 4, 6}, ids[6] = {7, 2, 40, 11, 5, 9}, bad_off[5] = {0, 3, 2, 4, 6}, bad_ids[6] = {7, 2, 50, 11, 5, 9};
  const int      tgt[4] = {2, 33, 11, -1}, outside[4] = {2, 33, 12, 9} /* row 2 allows only 11 */;
  float         *x = frand(r, (size_t)N * V, -3, 3), *lp = fvec(N), *lse = fvec(N), *dlp = frand(r, N, -1, 1), *dx = fvec((size_t)N * V);
  char           detail[1024] = "";
  int            ok = 1;
  PetscErrorCode ierr;

  PetscFunctionBegin;
  PetscCall(be->logprob_forward(lp, lse, NULL, x, tgt, 1.0f, off, ids, N, V)); /* the valid call, for reference */
  PetscCall(PetscPushErrorHandler(PetscReturnErrorHandler, NULL));
  for (int c = 0; c < 6; c++) {
    const char *want[6] = {"row 2 has target 12 outside its allowed set", "row 2 has target 12 outside its allowed set", "inv_temp", "inv_temp", "decreases at row 1",
                           "row 0 allows token 50"};
    ierr = c == 0 ? be->logprob_forward(lp, lse, NULL, x, outside, 1.0f, off, ids, N, V)
         : c == 1 ? be->logprob_backward(dx, x, lse, outside, dlp, 1.0f, off, ids, N, V)
         : c == 2 ? be->logprob_forward(lp, lse, NULL, x, tgt, 0.0f, off, ids, N, V)
         : c == 3 ? be->logprob_backward(dx, x, lse, tgt, dlp, INFINITY, off, ids, N, V)
         : c == 4 ? be->logprob_forward(lp, lse, NULL, x, tgt, 1.0f, bad_off, ids, N, V)
                  : be->logprob_forward(lp, lse, NULL, x, tgt, 1.0f, off, bad_ids, N, V);
    PetscCall(expect_error_case(ierr, c, want[c], &ok, detail, sizeof detail));
  }
  PetscCall(PetscPopErrorHandler());
  test_measure(ok, "logprob_forward/backward reject a target outside its set, a bad inv_temp, a bad mask", "%s", detail);
  free(x), free(lp), free(lse), free(dlp), free(dx);
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* The same rows masked two ways: "every id but e[n]" as the one-entry
 * compact set (tensor.h) and as the explicit ascending list of those V-1
 * ids; every fourth row has a small explicit set in both. e[n] walks the
 * row's edges and the 16-lane blocks' edges. Targets avoid e[n]; every
 * fifth row has none. */
static void make_but_masks(Rng *r, int N, int V, int *e, int *tgt, int **coff, int **cids, int **xoff, int **xids)
{
  const int edges[8] = {0, V - 1, 15, 16, 17, V / 2, V - 2, 1};
  int       nc = 0, nx = 0;

  *coff = malloc((N + 1) * sizeof(int)), *xoff = malloc((N + 1) * sizeof(int));
  *cids = malloc((size_t)N * V * sizeof(int)), *xids = malloc((size_t)N * V * sizeof(int));
  (*coff)[0] = (*xoff)[0] = 0;
  for (int n = 0; n < N; n++) {
    e[n] = n < 8 ? edges[n] : rng_int(r, V);
    if (n % 4 == 3) { /* the same small explicit set in both */
      for (int k = 0; k < 5; k++) (*cids)[nc++] = (*xids)[nx++] = (7 * n + 13 * k) % V;
      tgt[n] = (*xids)[nx - 1 - rng_int(r, 5)];
    } else {
      (*cids)[nc++] = tensor_set_but(e[n]);
      for (int v = 0; v < V; v++)
        if (v != e[n]) (*xids)[nx++] = v;
      do tgt[n] = rng_int(r, V);
      while (tgt[n] == e[n]);
    }
    if (n % 5 == 4) tgt[n] = -1;
    (*coff)[n + 1] = nc, (*xoff)[n + 1] = nx;
  }
}

/* One distribution two ways (tensor.h): a compact "every id but e" row
 * must give exactly the explicit list's bits, forward, backward and on
 * shards, at inv_temp 1/0.7, in the full-vocabulary ops and the shards'.
 * Row 1's largest logits are -0 and then +0: the compact row's max may take
 * either sign (a vector reduction), which must not show. */
static PetscErrorCode check_logprob_but(const Backend *be, Rng *r)
{
  const int N = 41, V = 1003, v0s[3] = {0, 300, 1000}, Vls[3] = {300, 700, 3};
  const float it = 1.0f / 0.7f;
  size_t    NV = (size_t)N * V;
  int      *e = malloc(N * sizeof(int)), *tgt = malloc(N * sizeof(int)), *coff, *cids, *xoff, *xids, ok = 1;
  float    *x = frand(r, NV, -6, 6), *dlp = frand(r, N, -1, 1), *out[2][4], *dx[2];
  double   *st[2];
  char      detail[1024] = "";

  PetscFunctionBegin;
  make_but_masks(r, N, V, e, tgt, &coff, &cids, &xoff, &xids);
  for (int v = 0; v < V; v++) x[V + v] = -(float)(1 + v % 7);
  x[V + 100] = -0.0f, x[V + 200] = 0.0f;
  for (int w = 0; w < 2; w++) {
    const int *off = w ? xoff : coff, *ids = w ? xids : cids;
    for (int k = 0; k < 4; k++) out[w][k] = fvec(N), poison(out[w][k], N);
    dx[w] = fvec(NV), st[w] = dvec(4 * (size_t)N);
    PetscCall(be->logprob_forward(out[w][0], out[w][1], out[w][2], x, tgt, it, off, ids, N, V));
    PetscCall(be->logprob_forward(out[w][3], NULL, NULL, x, tgt, it, off, ids, N, V));
    if (!bitwise_equal(out[w][0], out[w][3], N * sizeof(float))) ok = 0, strcat(detail, "logprob changes when lse and entropy are NULL; ");
  }
  for (int k = 0; k < 3; k++)
    if (!bitwise_equal(out[0][k], out[1][k], N * sizeof(float))) ok = 0, strcat(detail, k == 0 ? "logprob differs; " : k == 1 ? "lse differs; " : "entropy differs; ");
  for (int pass = 0; pass < 2; pass++) { /* with the saved lse, then without */
    for (int w = 0; w < 2; w++) {
      poison(dx[w], NV);
      PetscCall(be->logprob_backward(dx[w], x, pass ? NULL : out[w][1], tgt, dlp, it, w ? xoff : coff, w ? xids : cids, N, V));
    }
    if (!bitwise_equal(dx[0], dx[1], NV * sizeof(float))) ok = 0, strcat(detail, pass ? "dlogits (lse NULL) differ; " : "dlogits differ; ");
  }
  for (int sh = 0; sh < 3; sh++) { /* the shard's columns, copied out of x */
    int    v0 = v0s[sh], Vl = Vls[sh];
    float *xs = fvec((size_t)N * Vl), *ds[2];
    for (int n = 0; n < N; n++) memcpy(xs + (size_t)n * Vl, x + (size_t)n * V + v0, Vl * sizeof(float));
    for (int w = 0; w < 2; w++) {
      ds[w] = fvec((size_t)N * Vl), poison(ds[w], (size_t)N * Vl);
      PetscCall(be->logprob_stats(st[w], xs, tgt, it, w ? xoff : coff, w ? xids : cids, N, Vl, v0));
      PetscCall(be->logprob_backward_shard(ds[w], xs, out[w][1], tgt, dlp, it, w ? xoff : coff, w ? xids : cids, N, Vl, v0));
    }
    if (!bitwise_equal(st[0], st[1], 4 * (size_t)N * sizeof(double))) ok = 0, strcat(detail, "logprob_stats differ; ");
    if (!bitwise_equal(ds[0], ds[1], (size_t)N * Vl * sizeof(float))) ok = 0, strcat(detail, "logprob_backward_shard differs; ");
    free(xs), free(ds[0]), free(ds[1]);
  }
  test_measure(ok, "logprob ops: a compact \"every id but e\" row gives the explicit V-1 ids' bits (forward, backward, stats, backward_shard, inv_temp 1/0.7)", "%s",
               detail);

  { /* a target equal to e is outside the set; an e outside the vocabulary is a bad mask */
    const int   off1[2] = {0, 1}, but3[1] = {tensor_set_but(3)}, but_v[1] = {tensor_set_but(V)}, t3[1] = {3}, t4[1] = {4};
    const char *want[3] = {"row 0 has target 3 outside its allowed set", "row 0 has target 3 outside its allowed set", "row 0 allows every token but 1003"};
    PetscErrorCode ierr;

    detail[0] = 0, ok = 1;
    PetscCall(PetscPushErrorHandler(PetscReturnErrorHandler, NULL));
    for (int c = 0; c < 3; c++) {
      ierr = c == 0 ? be->logprob_forward(out[0][0], out[0][1], NULL, x, t3, it, off1, but3, 1, V)
           : c == 1 ? be->logprob_backward(dx[0], x, out[0][1], t3, dlp, it, off1, but3, 1, V)
                    : be->logprob_forward(out[0][0], out[0][1], NULL, x, t4, it, off1, but_v, 1, V);
      PetscCall(expect_error_case(ierr, c, want[c], &ok, detail, sizeof detail));
    }
    PetscCall(PetscPopErrorHandler());
    test_measure(ok, "logprob_forward/backward reject a target equal to a compact set's e, and an e outside the vocabulary", "%s", detail);
  }
  for (int w = 0; w < 2; w++) {
    for (int k = 0; k < 4; k++) free(out[w][k]);
    free(dx[w]), free(st[w]);
  }
  free(e), free(tgt), free(coff), free(cids), free(xoff), free(xids), free(x), free(dlp);
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode check_logprob(const Backend *be, Rng *r)
{
  const int N = 97, V = 1000;
  int      *tgt = malloc(N * sizeof(int)), *off, *ids;

  PetscFunctionBegin;
  for (int n = 0; n < N; n++) tgt[n] = n % 5 == 3 ? -1 : rng_int(r, V); /* every fifth row without a target */
  PetscCall(check_logprob_dist(be, r, "plain softmax", 1.0f, NULL, NULL, tgt, N, V));
  PetscCall(check_logprob_dist(be, r, "inv_temp 1/0.7", 1.0f / 0.7f, NULL, NULL, tgt, N, V));
  make_mask(r, N, V, tgt, &off, &ids);
  PetscCall(check_logprob_dist(be, r, "inv_temp 1/0.7 and a mask of 0, 1, 2-20, 100-700 tokens per row", 1.0f / 0.7f, off, ids, tgt, N, V));
  PetscCall(check_logprob_errors(be, r));
  PetscCall(check_logprob_but(be, r));
  free(tgt), free(off), free(ids);
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode check_optim(const Backend *be, Rng *r)
{
  const size_t n = 50001;
  const float  lr = 3e-3f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.1f, gs = 0.7f;
  float       *p = frand(r, n, -1, 1), *m = fvec(n), *v = fvec(n);
  double      *pd = todouble(p, n), *md = dvec(n), *vd = dvec(n), sumsq, ref = 0;
  char         detail[1024] = "";
  int          ok = 1;

  PetscFunctionBegin;
  PetscCall(be->sumsq(&sumsq, p, n));
  for (size_t i = 0; i < n; i++) ref += (double)p[i] * p[i];
  if (!(fabs(sumsq - ref) <= 1e-12 * ref)) {
    ok = 0;
    snprintf(detail, sizeof detail, "sumsq %.17g, reference %.17g", sumsq, ref);
  }
  test_measure(ok, "sumsq", "%s", detail);

  memset(m, 0, n * sizeof(float)), memset(v, 0, n * sizeof(float));
  for (int t = 1; t <= 3; t++) {
    float *g = frand(r, n, -2, 2);
    PetscCall(be->adamw(p, g, m, v, n, lr, b1, b2, eps, wd, t, gs));
    for (size_t i = 0; i < n; i++) { /* tensor.h's formula, in double */
      double gi = (double)g[i] * gs;
      pd[i] -= (double)lr * wd * pd[i];
      md[i] = b1 * md[i] + (1 - (double)b1) * gi;
      vd[i] = b2 * vd[i] + (1 - (double)b2) * gi * gi;
      pd[i] -= lr / (1 - pow(b1, t)) * md[i] / (sqrt(vd[i]) / sqrt(1 - pow(b2, t)) + eps);
    }
    free(g);
  }
  detail[0] = 0;
  ok        = cmp(detail, sizeof detail, "p", p, NULL, pd, n, 1e-6, 1e-5);
  ok        = cmp(detail, sizeof detail, "m", m, NULL, md, n, 1e-7, 1e-5) && ok;
  ok        = cmp(detail, sizeof detail, "v", v, NULL, vd, n, 1e-8, 1e-5) && ok;
  test_measure(ok, "adamw (3 steps, weight decay, gradient scale)", "%s", detail);
  free(p), free(m), free(v), free(pd), free(md), free(vd);
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* The same inputs with 1, 2 and 3 OpenMP threads must give the same bits. */
static PetscErrorCode check_threads(const Backend *be, Rng *r)
{
  const int    N = 333, C = 160, V = 7, B = 2, T = 70, AC = 64, NH = 4, LV = 1000, LN = 97;
  const size_t nsq = 100003;
  const int    nt[3] = {1, 2, 3};
  float       *x = frand(r, (size_t)N * C, -2, 2), *w = frand(r, C, 0.5, 1.5), *g = frand(r, (size_t)N * C, -1, 1);
  float       *mean = fvec(N), *rstd = fvec(N), *out = fvec((size_t)N * C);
  float       *qkv = frand(r, (size_t)B * T * 3 * AC, -1.5, 1.5), *ag = frand(r, (size_t)B * T * AC, -1, 1);
  float       *logits = frand(r, (size_t)LN * LV, -6, 6), *dlp = frand(r, LN, -1, 1);
  int         *tok = malloc(N * sizeof(int)), *tgt = malloc(LN * sizeof(int)), *mtgt = malloc(LN * sizeof(int)), *off, *ids;
  /* per thread count: ln dinp|dw|db, dbias, dwte|dwpe, att out|lse|dqkv, lse,
   * tempered and masked logprob|lse|entropy|dlogits, sumsq */
  size_t       nln = (size_t)N * C + 2 * C, natt = (size_t)B * T * AC + (size_t)B * NH * T + (size_t)B * T * 3 * AC, nlpm = 3 * (size_t)LN + (size_t)LN * LV;
  float       *ln[3], *dbias[3], *enc[3], *att[3], *lse[3], *lpm[3];
  double       sq[3];
  int          okln = 1, okmm = 1, okenc = 1, okatt = 1, oklp = 1, oklpm = 1, oksq = 1, nmax = omp_get_max_threads();

  PetscFunctionBegin;
  for (int n = 0; n < N; n++) tok[n] = rng_int(r, V);
  for (int n = 0; n < LN; n++) tgt[n] = rng_int(r, LV);
  make_mask(r, LN, LV, mtgt, &off, &ids);
  PetscCall(be->layernorm_forward(out, mean, rstd, x, w, w, N, C));
  for (int k = 0; k < 3; k++) {
    omp_set_num_threads(nt[k]);
    ln[k] = fvec(nln), dbias[k] = fvec(C), enc[k] = fvec(2 * (size_t)V * C), att[k] = fvec(natt), lse[k] = fvec(LN);
    memset(ln[k], 0, nln * sizeof(float)), memset(dbias[k], 0, C * sizeof(float)), memset(enc[k], 0, 2 * (size_t)V * C * sizeof(float));
    memset(att[k] + natt - (size_t)B * T * 3 * AC, 0, (size_t)B * T * 3 * AC * sizeof(float));
    PetscCall(be->layernorm_backward(ln[k], ln[k] + (size_t)N * C, ln[k] + (size_t)N * C + C, g, x, w, mean, rstd, N, C));
    PetscCall(be->matmul_backward(NULL, NULL, dbias[k], g, x, w, N, C, C, PETSC_FALSE));
    PetscCall(be->encoder_backward(enc[k], enc[k] + (size_t)V * C, g, tok, tok, N, C, 0, V));
    PetscCall(be->attention_forward(att[k], att[k] + (size_t)B * T * AC, qkv, B, T, AC, NH, NH));
    PetscCall(be->attention_backward(att[k] + (size_t)B * T * AC + (size_t)B * NH * T, ag, qkv, att[k], att[k] + (size_t)B * T * AC, B, T, AC, NH, NH));
    PetscCall(be->logprob_forward(lse[k] /* logprobs are a function of lse */, NULL, NULL, logits, tgt, 1.0f, NULL, NULL, LN, LV));
    lpm[k] = fvec(nlpm);
    PetscCall(be->logprob_forward(lpm[k], lpm[k] + LN, lpm[k] + 2 * LN, logits, mtgt, 1.0f / 0.7f, off, ids, LN, LV));
    PetscCall(be->logprob_backward(lpm[k] + 3 * LN, logits, lpm[k] + LN, mtgt, dlp, 1.0f / 0.7f, off, ids, LN, LV));
    PetscCall(be->sumsq(&sq[k], x, nsq < (size_t)N * C ? nsq : (size_t)N * C));
    if (k) {
      okln &= bitwise_equal(ln[0], ln[k], nln * sizeof(float));
      okmm &= bitwise_equal(dbias[0], dbias[k], C * sizeof(float));
      okenc &= bitwise_equal(enc[0], enc[k], 2 * (size_t)V * C * sizeof(float));
      okatt &= bitwise_equal(att[0], att[k], natt * sizeof(float));
      oklp &= bitwise_equal(lse[0], lse[k], LN * sizeof(float));
      oklpm &= bitwise_equal(lpm[0], lpm[k], nlpm * sizeof(float));
      oksq &= sq[0] == sq[k];
    }
  }
  omp_set_num_threads(nmax);
  test_report(okln, "bitwise with 1, 2, 3 threads: layernorm_backward", "results differ");
  test_report(okmm, "bitwise with 1, 2, 3 threads: matmul_backward dbias", "results differ");
  test_report(okenc, "bitwise with 1, 2, 3 threads: encoder_backward", "results differ");
  test_report(okatt, "bitwise with 1, 2, 3 threads: attention_forward/backward", "results differ");
  test_report(oklp, "bitwise with 1, 2, 3 threads: logprob_forward", "results differ");
  test_report(oklpm, "bitwise with 1, 2, 3 threads: logprob_forward/backward with inv_temp, mask and entropy", "results differ");
  test_report(oksq, "bitwise with 1, 2, 3 threads: sumsq", "results differ");
  for (int k = 0; k < 3; k++) free(ln[k]), free(dbias[k]), free(enc[k]), free(att[k]), free(lse[k]), free(lpm[k]);
  free(x), free(w), free(g), free(mean), free(rstd), free(out), free(qkv), free(ag), free(logits), free(dlp), free(tok), free(tgt), free(mtgt), free(off), free(ids);
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Shapes that must be refused, each with an error naming the problem:
 * n_kv_head not dividing n_head (all three attention ops), a query width
 * not a multiple of n_head, an odd rope head size. */
static PetscErrorCode check_llama_errors(const Backend *be)
{
  const int      B = 1, T = 4, C = 24, NH = 4;
  float         *qkv = fvec((size_t)B * T * 3 * C), *out = fvec((size_t)B * T * 3 * C), *att = fvec((size_t)B * NH * T * T), *kc = fvec((size_t)T * 3 * C), *vc = fvec((size_t)T * 3 * C);
  int            slot[4] = {0, 0, 0, 0}, pos[4] = {0, 1, 2, 3};
  float          inv_freq[8] = {0};
  char           detail[1024] = "";
  int            ok = 1;
  PetscErrorCode ierr;

  PetscFunctionBegin;
  for (size_t i = 0; i < (size_t)B * T * 3 * C; i++) qkv[i] = 0.01f * (float)(i % 17);
  PetscCall(PetscPushErrorHandler(PetscReturnErrorHandler, NULL));
  for (int c = 0; c < 6; c++) {
    const char *want[6] = {"n_kv_head 3 does not divide n_head 4", "n_kv_head 3 does not divide n_head 4", "n_kv_head 3 does not divide n_head 4",
                           "n_kv_head 0 does not divide n_head 4", "not a multiple of n_head 5", "head size 5 is not even"};
    ierr = c == 0 ? be->attention_forward(out, att, qkv, B, T, C, NH, 3)
         : c == 1 ? be->attention_backward(out, qkv, qkv, qkv, att, B, T, C, NH, 3)
         : c == 2 ? be->attention_cached(out, kc, vc, qkv, slot, pos, T, T, C, NH, 3)
         : c == 3 ? be->attention_forward(out, att, qkv, B, T, C, NH, 0)
         : c == 4 ? be->attention_forward(out, att, qkv, B, T, C, 5, 5)
                  : be->rope(qkv, pos, inv_freq, T, 2, 1, 5, 0);
    PetscCall(expect_error_case(ierr, c, want[c], &ok, detail, sizeof detail));
  }
  PetscCall(PetscPopErrorHandler());
  test_measure(ok, "attention ops reject n_kv_head not dividing n_head; rope rejects an odd head size", "%s", detail);
  free(qkv), free(out), free(att), free(kc), free(vc);
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* The LLaMA ops with 1, 2 and 3 OpenMP threads: the same bits. Sizes above
 * CPU_OMP_MIN so the ops do go parallel; rmsnorm N = 333 spans six 64-row
 * blocks of dw partials; GQA attention 4 query heads over 2 and over 1 kv
 * heads, whose backward adds a group's query heads into shared dk, dv. */
static PetscErrorCode check_threads_llama(const Backend *be, Rng *r)
{
  const int N = 333, C = 160, F = 160, NH = 4, hd = 32, B = 2, T = 70, AC = 64, nt[3] = {1, 2, 3};
  const int nkv[2] = {2, 1};
  size_t    NC = (size_t)N * C, NF = (size_t)N * F, W = (size_t)(NH + 2 * 2) * hd;
  float    *x = frand(r, NC, -2, 2), *w = frand(r, C, 0.5, 1.5), *g = frand(r, NC, -1, 1), *gu = frand(r, 2 * NF, -8, 8), *go = frand(r, NF, -1, 1);
  float    *qkv = frand(r, N * W, -1.5, 1.5), *ag = frand(r, (size_t)B * T * AC, -1, 1), *aqkv = frand(r, (size_t)B * T * 3 * AC, -1.5, 1.5), inv_freq[16];
  int      *pos = malloc(N * sizeof(int)), okrms = 1, okswi = 1, okrope = 1, okatt = 1, nmax = omp_get_max_threads();
  /* per thread count: rmsnorm out|rstd|dinp|dw; swiglu out|dgu; rope forward|inverse; per NKV att out|lse|dqkv */
  size_t    nrms = 2 * NC + N + C, nswi = NF + 2 * NF, nrope = 2 * N * W, natt[2];
  float    *rms[3], *swi[3], *rope[3], *att[2][3];

  PetscFunctionBegin;
  for (int i = 0; i < hd / 2; i++) inv_freq[i] = (float)(1.0 / pow(10000.0, 2.0 * i / hd));
  for (int n = 0; n < N; n++) pos[n] = rng_int(r, 4096);
  for (int v = 0; v < 2; v++) natt[v] = (size_t)B * T * AC + (size_t)B * NH * T + (size_t)B * T * (AC + 2 * nkv[v] * (AC / NH));
  for (int k = 0; k < 3; k++) {
    omp_set_num_threads(nt[k]);
    rms[k] = fvec(nrms), swi[k] = fvec(nswi), rope[k] = fvec(nrope);
    memset(rms[k] + NC + N, 0, (NC + C) * sizeof(float)), memset(swi[k] + NF, 0, 2 * NF * sizeof(float));
    PetscCall(be->rmsnorm_forward(rms[k], rms[k] + NC, x, w, N, C, 1e-5f));
    PetscCall(be->rmsnorm_backward(rms[k] + NC + N, rms[k] + 2 * NC + N, g, x, w, rms[k] + NC, N, C));
    PetscCall(be->swiglu_forward(swi[k], gu, N, F));
    PetscCall(be->swiglu_backward(swi[k] + NF, gu, go, N, F));
    memcpy(rope[k], qkv, N * W * sizeof(float)), memcpy(rope[k] + N * W, qkv, N * W * sizeof(float));
    PetscCall(be->rope(rope[k], pos, inv_freq, N, NH, 2, hd, 0));
    PetscCall(be->rope(rope[k] + N * W, pos, inv_freq, N, NH, 2, hd, 1));
    for (int v = 0; v < 2; v++) { /* the first B*T*(AC + 2 Ckv) of aqkv as this NKV's qkv */
      float *a = att[v][k] = fvec(natt[v]), *dq = a + (size_t)B * T * AC + (size_t)B * NH * T;
      memset(dq, 0, (size_t)B * T * (AC + 2 * nkv[v] * (AC / NH)) * sizeof(float));
      PetscCall(be->attention_forward(a, a + (size_t)B * T * AC, aqkv, B, T, AC, NH, nkv[v]));
      PetscCall(be->attention_backward(dq, ag, aqkv, a, a + (size_t)B * T * AC, B, T, AC, NH, nkv[v]));
    }
    if (k) {
      okrms &= bitwise_equal(rms[0], rms[k], nrms * sizeof(float));
      okswi &= bitwise_equal(swi[0], swi[k], nswi * sizeof(float));
      okrope &= bitwise_equal(rope[0], rope[k], nrope * sizeof(float));
      for (int v = 0; v < 2; v++) okatt &= bitwise_equal(att[v][0], att[v][k], natt[v] * sizeof(float));
    }
  }
  omp_set_num_threads(nmax);
  test_report(okrms, "bitwise with 1, 2, 3 threads: rmsnorm_forward/backward", "results differ");
  test_report(okswi, "bitwise with 1, 2, 3 threads: swiglu_forward/backward", "results differ");
  test_report(okrope, "bitwise with 1, 2, 3 threads: rope forward and inverse", "results differ");
  test_report(okatt, "bitwise with 1, 2, 3 threads: GQA attention_forward/backward (4 query heads over 2 and 1 kv heads)", "results differ");
  for (int k = 0; k < 3; k++) free(rms[k]), free(swi[k]), free(rope[k]), free(att[0][k]), free(att[1][k]);
  free(x), free(w), free(g), free(gu), free(go), free(qkv), free(ag), free(aqkv), free(pos);
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* The training path's matmuls (sgemm, past the decode path's row counts):
 * forward, dinp, dW and dbias the same bits with 1, 2 and 3 OpenMP threads,
 * in both layouts, at the quickstart's shapes and at shapes whose old cut
 * (one tile per thread) put rows or columns at other places in OpenBLAS's
 * calls (measured, 0.3.21: with the SkylakeX kernels C = 32, OC = 128 at
 * N = 40 and 129; with the Haswell/Zen kernels a third of all shapes). */
static PetscErrorCode check_threads_sgemm(const Backend *be, Rng *r)
{
  const int shape[][3] = {{40, 32, 128},   {129, 32, 128},  {983, 32, 128}, {864, 128, 384},
                          {864, 512, 128}, {864, 128, 20}, {200, 128, 1}};
  const int nt[3] = {1, 2, 3}, nmax = omp_get_max_threads();
  int       ok = 1;

  PetscFunctionBegin;
  for (size_t s = 0; s < sizeof shape / sizeof shape[0]; s++) {
    const int N = shape[s][0], C = shape[s][1], OC = shape[s][2];
    size_t    n = (size_t)N * OC + (size_t)N * C + (size_t)C * OC + OC;
    float    *x = frand(r, (size_t)N * C, -1, 1), *w = frand(r, (size_t)C * OC, -1, 1), *res[3];
    float    *g = frand(r, (size_t)N * OC, -1, 1);
    for (int tr = 0; tr < 2; tr++) {
      for (int k = 0; k < 3; k++) {
        omp_set_num_threads(nt[k]);
        res[k] = fvec(n);
        memset(res[k], 0, n * sizeof(float));
        PetscCall(be->matmul_forward(res[k], x, w, NULL, N, C, OC, tr ? PETSC_TRUE : PETSC_FALSE));
        float *dinp = res[k] + (size_t)N * OC, *dw = dinp + (size_t)N * C, *dbias = res[k] + n - OC;
        PetscCall(be->matmul_backward(dinp, dw, dbias, g, x, w, N, C, OC, tr ? PETSC_TRUE : PETSC_FALSE));
      }
      ok = bitwise_equal(res[0], res[1], n * sizeof(float)) && bitwise_equal(res[0], res[2], n * sizeof(float)) && ok;
      for (int k = 0; k < 3; k++) free(res[k]);
    }
    free(x), free(w), free(g);
  }
  omp_set_num_threads(nmax);
  test_report(ok, "bitwise with 1, 2, 3 threads: matmul_forward/backward through sgemm, both layouts, N 40-983", "results differ");
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* OpenBLAS's own thread count must not change the bits either. Its threaded
 * driver does not give the bits of its serial one (with the Haswell kernels
 * that OPENBLAS_CORETYPE selects on some machines, even K = 64 differs), so
 * the backend pins OpenBLAS to one thread whenever it is fetched and threads
 * the products itself. Here OpenBLAS is set to 1, then 2 threads, as a user's
 * OPENBLAS_NUM_THREADS or another library might, before the backend is
 * fetched: the products must not change. Every K here (C = 300 forward,
 * OC = 600 for dinp, N = 333 for dW) also exceeds OpenBLAS's GEMM_Q. */
static PetscErrorCode check_blas_threads(const Backend *be_unused, Rng *r)
{
  const int N = 333, C = 300, OC = 600;
  float    *x = frand(r, (size_t)N * C, -1, 1), *w = frand(r, (size_t)C * OC, -1, 1), *g = frand(r, (size_t)N * OC, -1, 1);
  float    *res[2];
  int       ok = 1;
  size_t    n = (size_t)N * OC + (size_t)N * C + (size_t)C * OC;

  PetscFunctionBegin;
  for (int tr = 0; tr < 2; tr++) {
    for (int k = 0; k < 2; k++) {
      const Backend *be;

      openblas_set_num_threads(k + 1);
      be     = backend_cpu();
      res[k] = fvec(n);
      memset(res[k], 0, n * sizeof(float));
      PetscCall(be->matmul_forward(res[k], x, w, NULL, N, C, OC, tr ? PETSC_TRUE : PETSC_FALSE));
      PetscCall(be->matmul_backward(res[k] + (size_t)N * OC, res[k] + (size_t)N * OC + (size_t)N * C, NULL, g, x, w, N, C, OC, tr ? PETSC_TRUE : PETSC_FALSE));
    }
    ok &= bitwise_equal(res[0], res[1], n * sizeof(float));
    free(res[0]), free(res[1]);
  }
  test_report(ok, "bitwise with 1, 2 OpenBLAS threads: matmul_forward/backward (both layouts)", "results differ");
  free(x), free(w), free(g);
  PetscFunctionReturn(PETSC_SUCCESS);
}

int main(int argc, char **argv)
{
  Rng            r  = {20240611};
  const Backend *be = backend_cpu();

  PetscCall(PetscInitialize(&argc, &argv, NULL, help));
  PetscCall(PetscOptionsHasName(NULL, NULL, "-worst", &show_worst));
  PetscCall(check_backend());
  PetscCall(check_memory(be));
  PetscCall(check_memory_large(be));
  PetscCall(check_encoder(be, &r));
  PetscCall(check_layernorm(be, &r));
  PetscCall(check_matmul(be, &r, 0));
  PetscCall(check_matmul(be, &r, 1));
  PetscCall(check_attention(be, &r, 4, 4));
  PetscCall(check_attention_cached(be, &r, 48, 3, 3));
  PetscCall(check_pointwise(be, &r));
  PetscCall(check_logprob(be, &r));
  PetscCall(check_optim(be, &r));
  PetscCall(check_threads(be, &r));
  /* the LLaMA family's ops and grouped-query attention */
  PetscCall(check_rmsnorm(be, &r, 1e-5f));
  PetscCall(check_rmsnorm(be, &r, 1e-6f));
  PetscCall(check_qk_norm(be, &r, 12));
  PetscCall(check_qk_norm(be, &r, 128));
  PetscCall(check_rope(be, &r));
  PetscCall(check_swiglu(be, &r));
  PetscCall(check_attention(be, &r, 4, 2));
  PetscCall(check_attention(be, &r, 4, 1));
  PetscCall(check_attention_cached(be, &r, 48, 4, 2));
  PetscCall(check_attention_cached(be, &r, 48, 4, 1));
  /* the cpu backend's AVX-512 paths: head sizes 64 and 128 (values summed
   * in registers), keys in 16 x 16 blocks for every head size divisible by 16 */
  PetscCall(check_attention_cached(be, &r, 192, 3, 1));
  PetscCall(check_attention_cached(be, &r, 256, 2, 1));
  PetscCall(check_llama_errors(be));
  PetscCall(check_threads_llama(be, &r));
  PetscCall(check_matmul_rows(be, &r));
  PetscCall(check_matmul_batch_invariant(be, &r));
  PetscCall(check_blas_threads(be, &r));
  PetscCall(check_threads_sgemm(be, &r));
  { /* its own draws, so the checks above keep their inputs */
    Rng rt = {20261128};
    PetscCall(check_attention_tiled(be, &rt));
  }
  if (test_state.fail) printf("HINT: compare the failing op with its reference in regression/test_ops.c\n");
  PetscCall(PetscFinalize());
  return test_tally();
}
