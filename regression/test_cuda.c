/* test_cuda: every op of the cuda backend against the cpu backend (which
 * test_ops checks against double-precision references) on the same seeded
 * random inputs, first in fp32 and then in bf16 precision.
 *
 * Without a CUDA device, or in a build without CUDA, it prints one
 * "skip - cuda: <reason>" line (a skip, never a pass) and exits 0; with
 * RLFUSE_REQUIRE_CUDA=1 in the environment that is a failure instead, so a
 * GPU machine cannot pass by skipping. `test_cuda -probe` only prints
 * "# cuda: <devices>" or "# skip: <reason>" (scenarios/cuda.sh asks it).
 *
 * Each check runs the cpu op on host arrays and the cuda op on device copies
 * of the same inputs. Device outputs are NaN before the call (from_host), so
 * an element the kernel does not write fails; accumulating outputs start
 * from the same random values on both sides and their increments are
 * compared. The reductions (encoder, layernorm, rmsnorm and matmul backward,
 * attention, logprob, sumsq) must give the same bits when run twice, as
 * tensor.h requires of every backend. Prints "ok - cuda <precision> <op>:
 * <measured error>" or "not ok - ..." per check and "P passed, F failed,
 * S skipped";
 * exits non-zero on any failure.
 *
 * Tolerance: max|gpu - cpu| <= rtol * max|cpu| over each array (over the
 * increment for accumulated outputs, plus a few ulp of the accumulated value
 * for the final additions).
 * - fp32, rtol 1e-5: both sides are float32 and differ only in the order of
 *   their sums (cuBLAS tiles and warp trees against the CPU's fixed blocks)
 *   and in the last bits of expf/tanhf/rsqrtf. A K-term float sum in any
 *   order is within ~sqrt(K)*6e-8 of exact relative to its scale, i.e.
 *   ~2e-6 for the largest K here (C = 768 in a matmul, V = 50257 in a
 *   log-sum-exp, done in wider partials on the CPU); the differences are
 *   typically 1e-7. 1e-5 leaves a margin and still fails a wrong or missing
 *   term (>= 1e-3), a skipped row, or TF32 tensor-core math (a 10-bit
 *   mantissa), which fp32 mode must not use: emulated, it fails every
 *   matmul check by 25-30x.
 * - bf16, rtol 1e-2, for the arrays bf16 mode rounds (tensor.h,
 *   backend_cuda_set_precision): matmul outputs and the dinp and dw that
 *   come from its bf16 operands, the training attention's probabilities,
 *   output and dqkv (its products take bf16 operands too), and the outputs
 *   of layernorm, rmsnorm, cached attention, GELU and SwiGLU. bf16 keeps 8
 *   significant bits, so each
 *   rounding moves a value by up to 2^-9 (2e-3) of itself. A matmul rounds
 *   both operands (random over K terms: ~2e-3 of the output's scale) and
 *   then its output (2e-3 of the element): ~4e-3 in all. This test run on
 *   the cpu ops with that rounding emulated reaches 4.6e-3 (the one-column
 *   scalar head), 2x below 1e-2; a wrong term still exceeds it. The training
 *   attention with bf16 operands, emulated in numpy at this test's shapes,
 *   moves the probabilities by up to 1.9e-3 of their maximum, the output
 *   before its rounding by 5.6e-3 and dqkv by 2.7e-3 (GPT-2's T 1024, 12
 *   heads, the worst); the grouped-query shapes, emulated in C with the
 *   kernels' GEMM layout, reach 1.7e-3, 6.6e-3 (with its rounding; NH 9
 *   NKV 3) and 2.2e-3. Everything else (mean, rstd, caches, dbias, rope,
 *   every other backward, logprob, sumsq, AdamW) is fp32 in either mode and
 *   keeps the fp32 tolerance in bf16 mode
 *   too, so a bf16 path leaking into them fails.
 *
 * The checks in detail: every op of the cuda backend against the cpu op on the same seeded
 * random inputs, in fp32 and then in bf16: encoder (whole vocabulary with wpe; a vocabulary
 * shard with v0 > 0 and wpe NULL), layernorm (C = 72, 160, 1600; one row of 768), matmul both
 * layouts with and without bias and with NULL dinp/dbias (37x72x200, 333x96x160, 64x768x2304,
 * one decode row 1x768x2304, a 1000-row LM head, GPT-2's whole 50257-row tied LM head on 3
 * rows and on 1400 (bf16's padded output in two chunks), width 201 in both layouts (bf16 pads
 * rows not a multiple of 8), the 1-row scalar head; up to 8 rows, the few-row kernels, each
 * row alone giving its bits among the others; C 4864, 1000 and 1004, the scalar loads),
 * `matmul_fused` bit for bit against the ops it replaces (RMSNorm, SwiGLU, the residual add;
 * both layouts, odd sizes, a normed row longer than 2048), the tiled attention
 * forward/backward against the cpu's tiled pair (out, the log-sum-exp and dqkv; B 1-3, T 1-64,
 * 259, 300, 2600 (blocks of 192 positions) and GPT-2's full window T 1024 with 12 heads, head
 * sizes 16, 32, 64, 128; run twice for the bits, again with score panels of one (sequence, kv
 * head) unit at a time, and the forward without the log-sum-exp giving the same output bits)
 * and the former pair that keeps the probabilities against the cpu's former pair, cached
 * attention over 37 calls (three prompts in one shuffled call, then decoding interleaved over
 * slots 2, 0, 3 of 4, caches compared), GELU, residual, axpy, scale, logprob forward/backward
 * (plain, inv_temp 1/0.7, CSR masks with logits outside the sets NaN, rows without a target, V
 * = 50257, lse NULL), logprob_stats and logprob_backward_shard on columns 300-649, compact
 * "every id but e" rows against the explicit V-1 ids on the device bit for bit and against the
 * cpu (V = 1003 and 50257, shards at 0, 300 and V-3, a target equal to e an error), sumsq,
 * three AdamW steps; the LLaMA family's ops: RMSNorm (C = 72, 160, 2048; one row), the rotary
 * embedding (4 over 2 to 32 over 8 heads, head sizes 16-128, one decode row), Qwen3's per-head
 * q/k norm (heads of 12 and 128), SwiGLU (one decode row of 8192 too), grouped-query and
 * multi-query attention (4 query heads over 2 and over 1 kv heads, 7 over 1, 9 over 3, 32 over
 * 8, head size 128) and cached attention over 2 and 1 kv heads; device outputs NaN before each
 * call, accumulated outputs from random values; the reductions bitwise equal over two runs
 * (and logprob unchanged by asking for the entropy); a target outside its set an error naming
 * the row (forward and backward) and the device usable afterwards; the sampler
 * (`Backend.sample`) on 48 rows of V = 37 (ties) and 64 of 151,936 (temperature 1 and 0.7,
 * top-k, top-p, both, greedy; logits on a grid of 0.5 (ties among the candidates) and greedy
 * among ties; top-p over a nucleus of thousands of tokens (the sorted candidates) and of
 * ~29,000 and top-k 10,000 (the serial fallback); every third row with EOS banned, a NaN row
 * and an all -inf row, rows read through an index), the wall time of a call printed: tokens,
 * set sizes, boundaries and allowed ids equal to the cpu op's, log-probabilities equal or one
 * float ulp apart (the count of bitwise-equal rows printed), two runs bitwise; bf16 changes a
 * matmul and fp32 afterwards gives the fp32 bits again (`-sample_only`: the sampler's checks
 * alone, in fp32). Each line gives max\|gpu − cpu\| and its fraction of the tolerance (below);
 * skips without a GPU
 */
#include "sys.h"
#include "tensor.h"
#include "test_report.h"
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char help[] = "Unit tests of the cuda backend ops against the cpu backend (skips without a CUDA device).\n"
                           "  -probe: only print the device count, or the reason to skip, and exit\n"
                           "  -sample_only: only the sampler's checks (Backend.sample), in fp32\n";

#define RTOL_FP32 1e-5
#define RTOL_BF16 1e-2

typedef struct {
  uint64_t s;
} Rng;

typedef struct {
  const Backend *cpu, *gpu;
  Rng            r;
  PetscBool      bf16;
  const char    *prec; /* "fp32" or "bf16", in every check name */
} Ctx;

/* whether bf16 mode rounds an array (tensor.h, backend_cuda_set_precision) */
typedef enum { FP32_ALWAYS, BF16_ROUNDED } Affected;

static double rtol_of(const Ctx *c, Affected a) { return c->bf16 && a == BF16_ROUNDED ? RTOL_BF16 : RTOL_FP32; }

/* splitmix64: tiny, seeded, and the same on every platform (as test_ops) */
static uint64_t rng_next(Rng *r)
{
  uint64_t z = (r->s += 0x9e3779b97f4a7c15ULL);
  z          = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z          = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}
static double rng_unif(Rng *r, double lo, double hi) { return lo + (hi - lo) * (double)(rng_next(r) >> 11) * 0x1.0p-53; }
static int    rng_int(Rng *r, int n) { return (int)(rng_next(r) % (uint64_t)n); }

/* ---- buffers: host and device allocations of one check, freed together -- */
#define ARENA_MAX 128
typedef struct {
  const Backend *gpu;
  void          *host[ARENA_MAX], *dev[ARENA_MAX];
  int            nhost, ndev;
} Arena;

static void *h_alloc(Arena *a, size_t bytes)
{
  void *p = malloc(bytes ? bytes : 1);
  if (!p || a->nhost == ARENA_MAX) {
    fprintf(stderr, "test_cuda: out of host memory or arena slots\n");
    abort();
  }
  a->host[a->nhost++] = p;
  return p;
}
static float *h_nan(Arena *a, size_t n)
{
  float *x = h_alloc(a, n * sizeof(float));
  for (size_t i = 0; i < n; i++) x[i] = NAN;
  return x;
}
static float *h_rand(Arena *a, Rng *r, size_t n, double lo, double hi)
{
  float *x = h_alloc(a, n * sizeof(float));
  for (size_t i = 0; i < n; i++) x[i] = (float)rng_unif(r, lo, hi);
  return x;
}
static float *h_dup(Arena *a, const float *x, size_t n)
{
  float *y = h_alloc(a, n * sizeof(float));
  memcpy(y, x, n * sizeof(float));
  return y;
}
static int *h_ints(Arena *a, size_t n) { return h_alloc(a, n * sizeof(int)); }

static PetscErrorCode d_alloc(Arena *a, size_t bytes, void **p)
{
  PetscFunctionBegin;
  PetscCheck(a->ndev < ARENA_MAX, PETSC_COMM_SELF, PETSC_ERR_PLIB, "test_cuda: more than %d device buffers in one check", ARENA_MAX);
  PetscCall(a->gpu->alloc(bytes ? bytes : sizeof(float), p));
  a->dev[a->ndev++] = *p;
  PetscFunctionReturn(PETSC_SUCCESS);
}
/* A device copy of host data (NULL stays NULL: optional arguments). */
static PetscErrorCode d_put(Arena *a, const void *host, size_t bytes, void **p)
{
  PetscFunctionBegin;
  *p = NULL;
  if (!host) PetscFunctionReturn(PETSC_SUCCESS);
  PetscCall(d_alloc(a, bytes, p));
  PetscCall(a->gpu->from_host(*p, host, bytes));
  PetscFunctionReturn(PETSC_SUCCESS);
}
/* n floats of NaN on the device: an output element the op leaves unwritten fails. */
static PetscErrorCode d_nan(Arena *a, size_t n, float **p)
{
  float *h = h_nan(a, n);

  PetscFunctionBegin;
  PetscCall(d_put(a, h, n * sizeof(float), (void **)p));
  PetscFunctionReturn(PETSC_SUCCESS);
}
/* A host copy of n floats of device memory. */
static PetscErrorCode d_get(Arena *a, const float *dev, size_t n, float **h)
{
  PetscFunctionBegin;
  *h = h_alloc(a, n * sizeof(float));
  PetscCall(a->gpu->to_host(*h, dev, n * sizeof(float)));
  PetscFunctionReturn(PETSC_SUCCESS);
}
static PetscErrorCode arena_free(Arena *a)
{
  PetscFunctionBegin;
  for (int i = 0; i < a->ndev; i++) PetscCall(a->gpu->free(a->dev[i]));
  for (int i = 0; i < a->nhost; i++) free(a->host[i]);
  a->ndev = a->nhost = 0;
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* ---- verdicts ------------------------------------------------------------ */
typedef struct {
  char text[4096];
  int  ok;
} Verdict;

static void vappend(Verdict *v, const char *fmt, ...)
{
  size_t  l = strlen(v->text);
  va_list ap;

  va_start(ap, fmt);
  if (l < sizeof v->text) vsnprintf(v->text + l, sizeof v->text - l, fmt, ap);
  va_end(ap);
}

/* One array's verdict, in double: err = max|got - cpu| (NaN or an infinity
 * on one side only is infinitely wrong; equal infinities agree), scale =
 * max|cpu - base| over finite values (base NULL: max|cpu|), mag = max|cpu|.
 * Passes when err <= rtol*scale + ulps*FLT_EPSILON*mag; ulps covers the
 * rounding of the final additions into an accumulated output. With nan_ok,
 * NaN on both sides agrees (cache entries neither side wrote). */
static void compare_at(Verdict *v, const char *what, double (*get)(const void *, size_t), const void *got, const void *cpu, const void *base, size_t n, double rtol,
                       double ulps, PetscBool nan_ok)
{
  double err = 0, scale = 0, mag = 0, tol;
  size_t at = 0;

  for (size_t i = 0; i < n; i++) {
    double g = get(got, i), r = get(cpu, i), e;
    if (nan_ok && isnan(g) && isnan(r)) continue;
    e = g == r ? 0.0 : fabs(g - r);
    if (isnan(e)) e = INFINITY;
    if (!(e <= err)) err = e, at = i;
    if (isfinite(r)) {
      scale = fmax(scale, fabs(r - (base ? get(base, i) : 0.0)));
      mag   = fmax(mag, fabs(r));
    }
  }
  tol = rtol * scale + ulps * FLT_EPSILON * mag;
  if (err <= tol) {
    vappend(v, "%s%s %.2g of %.2g (%.2g x tol)", v->text[0] ? "; " : "", what, err, scale, tol > 0 ? err / tol : 0.0);
    return;
  }
  v->ok = 0;
  vappend(v, "%sFAIL %s: max|gpu-cpu| %.3g at [%zu] (gpu %.9g, cpu %.9g), max|cpu%s| %.3g, tol %.3g (%.3g x tol)", v->text[0] ? "; " : "", what, err, at, get(got, at),
          get(cpu, at), base ? " increment" : "", scale, tol, tol > 0 ? err / tol : INFINITY);
}
static double get_f(const void *x, size_t i) { return ((const float *)x)[i]; }
static double get_d(const void *x, size_t i) { return ((const double *)x)[i]; }

static void compare(Verdict *v, const char *what, const float *got, const float *cpu, const float *base, size_t n, double rtol)
{
  compare_at(v, what, get_f, got, cpu, base, n, rtol, base ? 2.0 : 0.0, PETSC_FALSE);
}

/* Copies the device result back and compares it with the cpu's. */
static PetscErrorCode compare_dev(Arena *a, Verdict *v, const char *what, const float *dev, const float *cpu, const float *base, size_t n, double rtol)
{
  float *h;

  PetscFunctionBegin;
  PetscCall(d_get(a, dev, n, &h));
  compare(v, what, h, cpu, base, n, rtol);
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Two runs of an op on the device: bitwise equal or a failure. */
static PetscErrorCode same_bits(Arena *a, Verdict *v, const char *what, const float *dev1, const float *dev2, size_t n)
{
  float *h1, *h2;

  PetscFunctionBegin;
  PetscCall(d_get(a, dev1, n, &h1));
  PetscCall(d_get(a, dev2, n, &h2));
  if (memcmp(h1, h2, n * sizeof(float))) {
    size_t i = 0;
    while (i < n && !memcmp(h1 + i, h2 + i, sizeof(float))) i++;
    v->ok = 0;
    vappend(v, "%sFAIL %s differs between two runs at [%zu] (%.9g vs %.9g)", v->text[0] ? "; " : "", what, i, (double)h1[i], (double)h2[i]);
  } else vappend(v, "%s%s bitwise", v->text[0] ? "; " : "", what);
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* One check's line, "cuda <precision> <name>: <measured errors>", and a fresh
 * verdict for the next. */
static void verdict_report(Ctx *c, Verdict *v, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void verdict_report(Ctx *c, Verdict *v, const char *fmt, ...)
{
  char    name[256], full[300];
  va_list ap;

  va_start(ap, fmt);
  vsnprintf(name, sizeof name, fmt, ap);
  va_end(ap);
  snprintf(full, sizeof full, "cuda %s %s", c->prec, name);
  test_measure(v->ok ? PETSC_TRUE : PETSC_FALSE, full, "%s", v->text);
  v->text[0] = 0;
  v->ok      = 1;
}

/* ---- the device and the precision ---------------------------------------- */

static PetscErrorCode set_precision(Ctx *c, PetscBool bf16)
{
  PetscFunctionBegin;
  PetscCall(backend_cuda_set_precision(bf16));
  c->bf16 = bf16;
  c->prec = bf16 ? "bf16" : "fp32";
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* ---- checks ---------------------------------------------------------------- */

static PetscErrorCode check_memory(Ctx *c)
{
  const size_t n = ((size_t)1 << 20) + 3; /* larger than one allocation granule */
  Arena        a = {.gpu = c->gpu};
  Verdict      v = {"", 1};
  float       *d1, *d2, *h = h_alloc(&a, n * sizeof(float)), *back;
  size_t       bad = n;

  PetscFunctionBegin;
  if (strcmp(c->gpu->name, "cuda")) v.ok = 0, vappend(&v, "FAIL backend name \"%s\"; ", c->gpu->name);
  PetscCall(d_alloc(&a, n * sizeof(float), (void **)&d1));
  PetscCall(d_alloc(&a, n * sizeof(float), (void **)&d2));
  PetscCall(d_get(&a, d1, n, &back));
  for (size_t i = 0; i < n && bad == n; i++)
    if (back[i] != 0.0f) bad = i;
  if (bad < n) v.ok = 0, vappend(&v, "FAIL alloc is not zero-filled at [%zu]; ", bad);
  for (size_t i = 0; i < n; i++) h[i] = (float)i + 0.5f;
  PetscCall(c->gpu->from_host(d1, h, n * sizeof(float)));
  PetscCall(c->gpu->copy(d2, d1, n * sizeof(float)));
  PetscCall(c->gpu->zero(d1, n * sizeof(float)));
  PetscCall(c->gpu->zero(d2 + 7, 100 * sizeof(float))); /* a range inside a buffer */
  PetscCall(c->gpu->copy(d2 + 1000, d2 + 2000, 10 * sizeof(float)));
  for (size_t i = 7; i < 107; i++) h[i] = 0.0f;
  for (size_t i = 1000; i < 1010; i++) h[i] = h[i + 1000];
  PetscCall(d_get(&a, d2, n, &back));
  if (memcmp(back, h, n * sizeof(float))) v.ok = 0, vappend(&v, "FAIL from_host/copy/zero/to_host round trip (with offsets) differs; ");
  PetscCall(d_get(&a, d1, n, &back));
  for (size_t i = 0; i < n; i++)
    if (back[i] != 0.0f) {
      v.ok = 0, vappend(&v, "FAIL zero left a nonzero at [%zu]; ", i);
      break;
    }
  PetscCall(c->gpu->sync());
  PetscCall(c->gpu->free(NULL));
  if (v.ok) vappend(&v, "%zu floats", n);
  verdict_report(c, &v, "memory (alloc zero-filled, from_host, copy and zero with offsets, to_host, free(NULL))");
  PetscCall(arena_free(&a));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Tokens from a vocabulary of V ids; wte holds ids v0 .. v0+Vl-1 (a shard
 * when Vl < V: the other tokens add nothing); wpe may be absent. */
static PetscErrorCode check_encoder(Ctx *c, int N, int C, int V, int P, int v0, int Vl, PetscBool with_wpe)
{
  Arena   a = {.gpu = c->gpu};
  Verdict v = {"", 1};
  int    *tok = h_ints(&a, N), *pos = h_ints(&a, N), *dtok, *dpos;
  float  *wte = h_rand(&a, &c->r, (size_t)Vl * C, -1, 1), *wpe = with_wpe ? h_rand(&a, &c->r, (size_t)P * C, -1, 1) : NULL, *out = h_nan(&a, (size_t)N * C);
  float  *g = h_rand(&a, &c->r, (size_t)N * C, -1, 1), *dwte0 = h_rand(&a, &c->r, (size_t)Vl * C, -1, 1), *dwpe0 = with_wpe ? h_rand(&a, &c->r, (size_t)P * C, -1, 1) : NULL;
  float  *dwte = h_dup(&a, dwte0, (size_t)Vl * C), *dwpe = with_wpe ? h_dup(&a, dwpe0, (size_t)P * C) : NULL;
  float  *d_wte, *d_wpe, *d_out, *d_g, *d_dwte[2], *d_dwpe[2];
  char    what[128];

  PetscFunctionBegin;
  for (int n = 0; n < N; n++) tok[n] = rng_int(&c->r, V), pos[n] = rng_int(&c->r, P);
  PetscCall(PetscSNPrintf(what, sizeof what, "N=%d C=%d, %s, %s", N, C, Vl < V ? "a vocabulary shard (v0 > 0)" : "the whole vocabulary", with_wpe ? "wpe" : "wpe NULL"));
  PetscCall(d_put(&a, tok, N * sizeof(int), (void **)&dtok));
  PetscCall(d_put(&a, pos, N * sizeof(int), (void **)&dpos));
  PetscCall(d_put(&a, wte, (size_t)Vl * C * sizeof(float), (void **)&d_wte));
  PetscCall(d_put(&a, wpe, (size_t)P * C * sizeof(float), (void **)&d_wpe));
  PetscCall(d_nan(&a, (size_t)N * C, &d_out));
  PetscCall(c->cpu->encoder_forward(out, tok, pos, wte, wpe, N, C, v0, Vl));
  PetscCall(c->gpu->encoder_forward(d_out, dtok, dpos, d_wte, d_wpe, N, C, v0, Vl));
  PetscCall(compare_dev(&a, &v, "out", d_out, out, NULL, (size_t)N * C, rtol_of(c, FP32_ALWAYS)));
  verdict_report(c, &v, "encoder_forward %s", what);

  PetscCall(d_put(&a, g, (size_t)N * C * sizeof(float), (void **)&d_g));
  for (int k = 0; k < 2; k++) {
    PetscCall(d_put(&a, dwte0, (size_t)Vl * C * sizeof(float), (void **)&d_dwte[k]));
    PetscCall(d_put(&a, dwpe0, (size_t)P * C * sizeof(float), (void **)&d_dwpe[k]));
    PetscCall(c->gpu->encoder_backward(d_dwte[k], d_dwpe[k], d_g, dtok, dpos, N, C, v0, Vl));
  }
  PetscCall(c->cpu->encoder_backward(dwte, dwpe, g, tok, pos, N, C, v0, Vl));
  PetscCall(compare_dev(&a, &v, "dwte", d_dwte[0], dwte, dwte0, (size_t)Vl * C, rtol_of(c, FP32_ALWAYS)));
  if (with_wpe) PetscCall(compare_dev(&a, &v, "dwpe", d_dwpe[0], dwpe, dwpe0, (size_t)P * C, rtol_of(c, FP32_ALWAYS)));
  PetscCall(same_bits(&a, &v, "dwte", d_dwte[0], d_dwte[1], (size_t)Vl * C));
  if (with_wpe) PetscCall(same_bits(&a, &v, "dwpe", d_dwpe[0], d_dwpe[1], (size_t)P * C));
  verdict_report(c, &v, "encoder_backward %s (accumulates; repeated tokens; run twice)", what);
  PetscCall(arena_free(&a));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode check_layernorm(Ctx *c, int N, int C)
{
  Arena   a  = {.gpu = c->gpu};
  Verdict v  = {"", 1};
  size_t  NC = (size_t)N * C;
  float  *x = h_rand(&a, &c->r, NC, -2, 3), *w = h_rand(&a, &c->r, C, 0.5, 1.5), *b = h_rand(&a, &c->r, C, -0.5, 0.5);
  float  *out = h_nan(&a, NC), *mean = h_nan(&a, N), *rstd = h_nan(&a, N), *g = h_rand(&a, &c->r, NC, -1, 1);
  float  *dx0 = h_rand(&a, &c->r, NC, -1, 1), *dw0 = h_rand(&a, &c->r, C, -1, 1), *db0 = h_rand(&a, &c->r, C, -1, 1);
  float  *dx = h_dup(&a, dx0, NC), *dw = h_dup(&a, dw0, C), *db = h_dup(&a, db0, C);
  float  *d_x, *d_w, *d_b, *d_out, *d_mean, *d_rstd, *d_g, *d_cmean, *d_crstd, *d_dx[2], *d_dw[2], *d_db[2];
  double  rt = rtol_of(c, FP32_ALWAYS);

  PetscFunctionBegin;
  PetscCall(d_put(&a, x, NC * sizeof(float), (void **)&d_x));
  PetscCall(d_put(&a, w, C * sizeof(float), (void **)&d_w));
  PetscCall(d_put(&a, b, C * sizeof(float), (void **)&d_b));
  PetscCall(d_nan(&a, NC, &d_out));
  PetscCall(d_nan(&a, N, &d_mean));
  PetscCall(d_nan(&a, N, &d_rstd));
  PetscCall(c->cpu->layernorm_forward(out, mean, rstd, x, w, b, N, C));
  PetscCall(c->gpu->layernorm_forward(d_out, d_mean, d_rstd, d_x, d_w, d_b, N, C));
  PetscCall(compare_dev(&a, &v, "out", d_out, out, NULL, NC, rtol_of(c, BF16_ROUNDED)));
  PetscCall(compare_dev(&a, &v, "mean", d_mean, mean, NULL, N, rt));
  PetscCall(compare_dev(&a, &v, "rstd", d_rstd, rstd, NULL, N, rt));
  verdict_report(c, &v, "layernorm_forward N=%d C=%d", N, C);

  /* the backward gets the cpu's mean and rstd on both sides: it alone is tested */
  PetscCall(d_put(&a, g, NC * sizeof(float), (void **)&d_g));
  PetscCall(d_put(&a, mean, N * sizeof(float), (void **)&d_cmean));
  PetscCall(d_put(&a, rstd, N * sizeof(float), (void **)&d_crstd));
  for (int k = 0; k < 2; k++) {
    PetscCall(d_put(&a, dx0, NC * sizeof(float), (void **)&d_dx[k]));
    PetscCall(d_put(&a, dw0, C * sizeof(float), (void **)&d_dw[k]));
    PetscCall(d_put(&a, db0, C * sizeof(float), (void **)&d_db[k]));
    PetscCall(c->gpu->layernorm_backward(d_dx[k], d_dw[k], d_db[k], d_g, d_x, d_w, d_cmean, d_crstd, N, C));
  }
  PetscCall(c->cpu->layernorm_backward(dx, dw, db, g, x, w, mean, rstd, N, C));
  PetscCall(compare_dev(&a, &v, "dinp", d_dx[0], dx, dx0, NC, rt));
  PetscCall(compare_dev(&a, &v, "dw", d_dw[0], dw, dw0, C, rt));
  PetscCall(compare_dev(&a, &v, "db", d_db[0], db, db0, C, rt));
  PetscCall(same_bits(&a, &v, "dinp", d_dx[0], d_dx[1], NC));
  PetscCall(same_bits(&a, &v, "dw", d_dw[0], d_dw[1], C));
  PetscCall(same_bits(&a, &v, "db", d_db[0], d_db[1], C));
  verdict_report(c, &v, "layernorm_backward N=%d C=%d (accumulates; run twice)", N, C);
  PetscCall(arena_free(&a));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* RMSNorm as LayerNorm above: the forward (also with rstd NULL, which must
 * change no bit of out), then the backward on the cpu's rstd. */
static PetscErrorCode check_rmsnorm(Ctx *c, int N, int C)
{
  const float eps = 1e-6f;
  Arena       a  = {.gpu = c->gpu};
  Verdict     v  = {"", 1};
  size_t      NC = (size_t)N * C;
  float      *x = h_rand(&a, &c->r, NC, -2, 3), *w = h_rand(&a, &c->r, C, 0.5, 1.5), *out = h_nan(&a, NC), *rstd = h_nan(&a, N), *g = h_rand(&a, &c->r, NC, -1, 1);
  float      *dx0 = h_rand(&a, &c->r, NC, -1, 1), *dw0 = h_rand(&a, &c->r, C, -1, 1), *dx = h_dup(&a, dx0, NC), *dw = h_dup(&a, dw0, C);
  float      *d_x, *d_w, *d_out, *d_out2, *d_rstd, *d_g, *d_crstd, *d_dx[2], *d_dw[2];
  double      rt = rtol_of(c, FP32_ALWAYS);

  PetscFunctionBegin;
  PetscCall(d_put(&a, x, NC * sizeof(float), (void **)&d_x));
  PetscCall(d_put(&a, w, C * sizeof(float), (void **)&d_w));
  PetscCall(d_nan(&a, NC, &d_out));
  PetscCall(d_nan(&a, NC, &d_out2));
  PetscCall(d_nan(&a, N, &d_rstd));
  PetscCall(c->cpu->rmsnorm_forward(out, rstd, x, w, N, C, eps));
  PetscCall(c->gpu->rmsnorm_forward(d_out, d_rstd, d_x, d_w, N, C, eps));
  PetscCall(c->gpu->rmsnorm_forward(d_out2, NULL, d_x, d_w, N, C, eps));
  PetscCall(compare_dev(&a, &v, "out", d_out, out, NULL, NC, rtol_of(c, BF16_ROUNDED)));
  PetscCall(compare_dev(&a, &v, "rstd", d_rstd, rstd, NULL, N, rt));
  PetscCall(same_bits(&a, &v, "out with rstd NULL", d_out, d_out2, NC));
  verdict_report(c, &v, "rmsnorm_forward N=%d C=%d eps=%g", N, C, (double)eps);

  PetscCall(d_put(&a, g, NC * sizeof(float), (void **)&d_g));
  PetscCall(d_put(&a, rstd, N * sizeof(float), (void **)&d_crstd));
  for (int k = 0; k < 2; k++) {
    PetscCall(d_put(&a, dx0, NC * sizeof(float), (void **)&d_dx[k]));
    PetscCall(d_put(&a, dw0, C * sizeof(float), (void **)&d_dw[k]));
    PetscCall(c->gpu->rmsnorm_backward(d_dx[k], d_dw[k], d_g, d_x, d_w, d_crstd, N, C));
  }
  PetscCall(c->cpu->rmsnorm_backward(dx, dw, g, x, w, rstd, N, C));
  PetscCall(compare_dev(&a, &v, "dinp", d_dx[0], dx, dx0, NC, rt));
  PetscCall(compare_dev(&a, &v, "dw", d_dw[0], dw, dw0, C, rt));
  PetscCall(same_bits(&a, &v, "dinp", d_dx[0], d_dx[1], NC));
  PetscCall(same_bits(&a, &v, "dw", d_dw[0], d_dw[1], C));
  verdict_report(c, &v, "rmsnorm_backward N=%d C=%d (accumulates; run twice)", N, C);
  PetscCall(arena_free(&a));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Qwen3's per-head q/k RMSNorm in place on qkv rows (whole rows compared:
 * the v heads must be untouched), with and without saving (no bit may
 * change); the backward from the cpu's saved inputs, twice. */
static PetscErrorCode check_qk_norm(Ctx *c, int N, int NH, int NKV, int hd)
{
  const float eps = 1e-6f;
  Arena       a = {.gpu = c->gpu};
  Verdict     v = {"", 1};
  size_t      n = (size_t)N * (NH + 2 * NKV) * hd, ns = (size_t)N * (NH + NKV);
  float      *qkv = h_rand(&a, &c->r, n, -2, 2), *wq = h_rand(&a, &c->r, hd, 0.5, 1.5), *wk = h_rand(&a, &c->r, hd, 0.5, 1.5), *in = h_nan(&a, ns * hd), *rstd = h_nan(&a, ns);
  float      *g = h_rand(&a, &c->r, n, -1, 1), *dg = h_dup(&a, g, n), *dwq0 = h_rand(&a, &c->r, hd, -1, 1), *dwk0 = h_rand(&a, &c->r, hd, -1, 1);
  float      *dwq = h_dup(&a, dwq0, hd), *dwk = h_dup(&a, dwk0, hd);
  float      *d_qkv, *d_qkv2, *d_wq, *d_wk, *d_in, *d_rstd, *d_cin, *d_crstd, *d_g[2], *d_dwq[2], *d_dwk[2];
  double      rt = rtol_of(c, FP32_ALWAYS);

  PetscFunctionBegin;
  PetscCall(d_put(&a, qkv, n * sizeof(float), (void **)&d_qkv));
  PetscCall(d_put(&a, qkv, n * sizeof(float), (void **)&d_qkv2));
  PetscCall(d_put(&a, wq, hd * sizeof(float), (void **)&d_wq));
  PetscCall(d_put(&a, wk, hd * sizeof(float), (void **)&d_wk));
  PetscCall(d_nan(&a, ns * hd, &d_in));
  PetscCall(d_nan(&a, ns, &d_rstd));
  PetscCall(c->cpu->qk_norm_forward(qkv, in, rstd, wq, wk, N, NH, NKV, hd, eps));
  PetscCall(c->gpu->qk_norm_forward(d_qkv, d_in, d_rstd, d_wq, d_wk, N, NH, NKV, hd, eps));
  PetscCall(c->gpu->qk_norm_forward(d_qkv2, NULL, NULL, d_wq, d_wk, N, NH, NKV, hd, eps));
  PetscCall(compare_dev(&a, &v, "qkv", d_qkv, qkv, NULL, n, rtol_of(c, BF16_ROUNDED)));
  PetscCall(compare_dev(&a, &v, "in", d_in, in, NULL, ns * hd, rt));
  PetscCall(compare_dev(&a, &v, "rstd", d_rstd, rstd, NULL, ns, rt));
  PetscCall(same_bits(&a, &v, "qkv without saving", d_qkv, d_qkv2, n));
  verdict_report(c, &v, "qk_norm_forward N=%d NH=%d NKV=%d hd=%d", N, NH, NKV, hd);

  PetscCall(d_put(&a, in, ns * hd * sizeof(float), (void **)&d_cin));
  PetscCall(d_put(&a, rstd, ns * sizeof(float), (void **)&d_crstd));
  for (int k = 0; k < 2; k++) {
    PetscCall(d_put(&a, g, n * sizeof(float), (void **)&d_g[k]));
    PetscCall(d_put(&a, dwq0, hd * sizeof(float), (void **)&d_dwq[k]));
    PetscCall(d_put(&a, dwk0, hd * sizeof(float), (void **)&d_dwk[k]));
    PetscCall(c->gpu->qk_norm_backward(d_g[k], d_dwq[k], d_dwk[k], d_cin, d_crstd, d_wq, d_wk, N, NH, NKV, hd));
  }
  PetscCall(c->cpu->qk_norm_backward(dg, dwq, dwk, in, rstd, wq, wk, N, NH, NKV, hd));
  PetscCall(compare_dev(&a, &v, "dqkv", d_g[0], dg, NULL, n, rt));
  PetscCall(compare_dev(&a, &v, "dwq", d_dwq[0], dwq, dwq0, hd, rt));
  PetscCall(compare_dev(&a, &v, "dwk", d_dwk[0], dwk, dwk0, hd, rt));
  PetscCall(same_bits(&a, &v, "dqkv", d_g[0], d_g[1], n));
  PetscCall(same_bits(&a, &v, "dwq", d_dwq[0], d_dwq[1], hd));
  verdict_report(c, &v, "qk_norm_backward N=%d NH=%d NKV=%d hd=%d (run twice)", N, NH, NKV, hd);
  PetscCall(arena_free(&a));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Rotary embeddings in place on qkv rows [N, (NH+2NKV)*hd], positions up to
 * 32767 (large angles) and theta 500000 (Llama 3): the forward, then the
 * inverse applied to each side's result. The whole rows are compared, so a
 * kernel that touches the v heads fails. Not rounded in bf16 mode. */
static PetscErrorCode check_rope(Ctx *c, int N, int NH, int NKV, int hd)
{
  Arena   a = {.gpu = c->gpu};
  Verdict v = {"", 1};
  size_t  n = (size_t)N * (NH + 2 * NKV) * hd;
  float  *qkv = h_rand(&a, &c->r, n, -1.5, 1.5), *inv = h_alloc(&a, (size_t)(hd / 2) * sizeof(float)), *d_qkv, *d_inv;
  int    *pos = h_ints(&a, N), *d_pos;
  double  rt = rtol_of(c, FP32_ALWAYS);

  PetscFunctionBegin;
  for (int i = 0; i < hd / 2; i++) inv[i] = (float)(1.0 / pow(500000.0, 2.0 * i / hd));
  for (int r = 0; r < N; r++) pos[r] = r == 0 ? 0 : rng_int(&c->r, 32768);
  PetscCall(d_put(&a, qkv, n * sizeof(float), (void **)&d_qkv));
  PetscCall(d_put(&a, inv, (size_t)(hd / 2) * sizeof(float), (void **)&d_inv));
  PetscCall(d_put(&a, pos, N * sizeof(int), (void **)&d_pos));
  PetscCall(c->cpu->rope(qkv, pos, inv, N, NH, NKV, hd, 0));
  PetscCall(c->gpu->rope(d_qkv, d_pos, d_inv, N, NH, NKV, hd, 0));
  PetscCall(compare_dev(&a, &v, "qkv", d_qkv, qkv, NULL, n, rt));
  PetscCall(c->cpu->rope(qkv, pos, inv, N, NH, NKV, hd, 1));
  PetscCall(c->gpu->rope(d_qkv, d_pos, d_inv, N, NH, NKV, hd, 1));
  PetscCall(compare_dev(&a, &v, "qkv after the inverse", d_qkv, qkv, NULL, n, rt));
  verdict_report(c, &v, "rope N=%d NH=%d NKV=%d hd=%d (in place, then inverse)", N, NH, NKV, hd);
  PetscCall(arena_free(&a));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* SwiGLU on gu [N, 2F] (gate | up) over silu's curved range. */
static PetscErrorCode check_swiglu(Ctx *c, int N, int F)
{
  Arena   a  = {.gpu = c->gpu};
  Verdict v  = {"", 1};
  size_t  nf = (size_t)N * F;
  float  *gu = h_rand(&a, &c->r, 2 * nf, -8, 8), *out = h_nan(&a, nf), *g = h_rand(&a, &c->r, nf, -1, 1);
  float  *dgu0 = h_rand(&a, &c->r, 2 * nf, -1, 1), *dgu = h_dup(&a, dgu0, 2 * nf), *d_gu, *d_out, *d_g, *d_dgu;

  PetscFunctionBegin;
  PetscCall(d_put(&a, gu, 2 * nf * sizeof(float), (void **)&d_gu));
  PetscCall(d_nan(&a, nf, &d_out));
  PetscCall(c->cpu->swiglu_forward(out, gu, N, F));
  PetscCall(c->gpu->swiglu_forward(d_out, d_gu, N, F));
  PetscCall(compare_dev(&a, &v, "out", d_out, out, NULL, nf, rtol_of(c, BF16_ROUNDED)));
  verdict_report(c, &v, "swiglu_forward N=%d F=%d", N, F);

  PetscCall(d_put(&a, g, nf * sizeof(float), (void **)&d_g));
  PetscCall(d_put(&a, dgu0, 2 * nf * sizeof(float), (void **)&d_dgu));
  PetscCall(c->cpu->swiglu_backward(dgu, gu, g, N, F));
  PetscCall(c->gpu->swiglu_backward(d_dgu, d_gu, d_g, N, F));
  PetscCall(compare_dev(&a, &v, "dgu", d_dgu, dgu, dgu0, 2 * nf, rtol_of(c, FP32_ALWAYS)));
  verdict_report(c, &v, "swiglu_backward N=%d F=%d (accumulates)", N, F);
  PetscCall(arena_free(&a));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode check_matmul(Ctx *c, int N, int C, int OC, PetscBool tr)
{
  Arena       a = {.gpu = c->gpu};
  Verdict     v = {"", 1};
  size_t      nx = (size_t)N * C, nw = (size_t)C * OC, no = (size_t)N * OC;
  float      *x = h_rand(&a, &c->r, nx, -1, 1), *w = h_rand(&a, &c->r, nw, -1, 1), *bias = h_rand(&a, &c->r, OC, -1, 1);
  float      *out = h_nan(&a, no), *out2 = h_nan(&a, no), *g = h_rand(&a, &c->r, no, -1, 1);
  float      *dx0 = h_rand(&a, &c->r, nx, -1, 1), *dw0 = h_rand(&a, &c->r, nw, -1, 1), *db0 = h_rand(&a, &c->r, OC, -1, 1);
  float      *dx = h_dup(&a, dx0, nx), *dw = h_dup(&a, dw0, nw), *db = h_dup(&a, db0, OC), *dw2 = h_dup(&a, dw0, nw);
  float      *d_x, *d_w, *d_bias, *d_out, *d_out2, *d_g, *d_dx[2], *d_dw[2], *d_db[2], *d_dw2;
  double      rt = rtol_of(c, BF16_ROUNDED);
  const char *lay = tr ? " transposed" : "";

  PetscFunctionBegin;
  PetscCall(d_put(&a, x, nx * sizeof(float), (void **)&d_x));
  PetscCall(d_put(&a, w, nw * sizeof(float), (void **)&d_w));
  PetscCall(d_put(&a, bias, OC * sizeof(float), (void **)&d_bias));
  PetscCall(d_nan(&a, no, &d_out));
  PetscCall(d_nan(&a, no, &d_out2));
  PetscCall(c->cpu->matmul_forward(out, x, w, bias, N, C, OC, tr));
  PetscCall(c->cpu->matmul_forward(out2, x, w, NULL, N, C, OC, tr));
  PetscCall(c->gpu->matmul_forward(d_out, d_x, d_w, d_bias, N, C, OC, tr));
  PetscCall(c->gpu->matmul_forward(d_out2, d_x, d_w, NULL, N, C, OC, tr));
  PetscCall(compare_dev(&a, &v, "out", d_out, out, NULL, no, rt));
  PetscCall(compare_dev(&a, &v, "out(no bias)", d_out2, out2, NULL, no, rt));
  if (N > 1 && N <= 8) { /* the few-row kernels: each row alone gives its bits among the others */
    float *d_row;
    PetscCall(d_nan(&a, no, &d_row));
    for (int n = 0; n < N; n++) PetscCall(c->gpu->matmul_forward(d_row + (size_t)n * OC, d_x + (size_t)n * C, d_w, d_bias, 1, C, OC, tr));
    PetscCall(same_bits(&a, &v, "each row alone", d_out, d_row, no));
  }
  verdict_report(c, &v, "matmul_forward%s N=%d C=%d OC=%d (with and without bias)", lay, N, C, OC);

  PetscCall(d_put(&a, g, no * sizeof(float), (void **)&d_g));
  for (int k = 0; k < 2; k++) {
    PetscCall(d_put(&a, dx0, nx * sizeof(float), (void **)&d_dx[k]));
    PetscCall(d_put(&a, dw0, nw * sizeof(float), (void **)&d_dw[k]));
    PetscCall(d_put(&a, db0, OC * sizeof(float), (void **)&d_db[k]));
    PetscCall(c->gpu->matmul_backward(d_dx[k], d_dw[k], d_db[k], d_g, d_x, d_w, N, C, OC, tr));
  }
  PetscCall(d_put(&a, dw0, nw * sizeof(float), (void **)&d_dw2));
  PetscCall(c->gpu->matmul_backward(NULL, d_dw2, NULL, d_g, d_x, d_w, N, C, OC, tr));
  PetscCall(c->cpu->matmul_backward(dx, dw, db, g, x, w, N, C, OC, tr));
  PetscCall(c->cpu->matmul_backward(NULL, dw2, NULL, g, x, w, N, C, OC, tr));
  PetscCall(compare_dev(&a, &v, "dinp", d_dx[0], dx, dx0, nx, rt));
  PetscCall(compare_dev(&a, &v, "dw", d_dw[0], dw, dw0, nw, rt));
  PetscCall(compare_dev(&a, &v, "dbias", d_db[0], db, db0, OC, rtol_of(c, FP32_ALWAYS))); /* from the fp32 dout */
  PetscCall(compare_dev(&a, &v, "dw(dinp, dbias NULL)", d_dw2, dw2, dw0, nw, rt));
  /* cuBLAS gives the same bits on the same device, stream and sizes */
  PetscCall(same_bits(&a, &v, "dinp", d_dx[0], d_dx[1], nx));
  PetscCall(same_bits(&a, &v, "dw", d_dw[0], d_dw[1], nw));
  PetscCall(same_bits(&a, &v, "dbias", d_db[0], d_db[1], OC));
  verdict_report(c, &v, "matmul_backward%s N=%d C=%d OC=%d (accumulates; NULL dinp and dbias; run twice)", lay, N, C, OC);
  PetscCall(arena_free(&a));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Backend.matmul_fused against the ops it replaces, run one by one on the
 * same device: swiglu_forward (gated) or rmsnorm_forward (norm),
 * matmul_forward, axpy(out, 1, .) (add): the same bits. */
static PetscErrorCode check_matmul_fused(Ctx *c, int N, int C, int OC, PetscBool tr, PetscBool gated, PetscBool norm, PetscBool add)
{
  Arena        a = {.gpu = c->gpu};
  Verdict      v = {"", 1};
  size_t       ni = (size_t)N * C * (gated ? 2 : 1), nw = (size_t)C * OC, no = (size_t)N * OC;
  float       *x = h_rand(&a, &c->r, ni, gated ? -4 : -1, gated ? 4 : 1), *w = h_rand(&a, &c->r, nw, -1, 1), *bias = h_rand(&a, &c->r, OC, -1, 1);
  float       *o0 = h_rand(&a, &c->r, no, -1, 1), *g = h_rand(&a, &c->r, C, 0.5, 1.5), *d_x, *d_w, *d_bias, *d_g, *d_in, *d_prod, *d_ref, *d_out;
  MatmulFusion f = {.gated = gated, .add = add, .norm_eps = 1e-6f};

  PetscFunctionBegin;
  PetscCall(d_put(&a, x, ni * sizeof(float), (void **)&d_x));
  PetscCall(d_put(&a, w, nw * sizeof(float), (void **)&d_w));
  PetscCall(d_put(&a, bias, OC * sizeof(float), (void **)&d_bias));
  PetscCall(d_put(&a, g, C * sizeof(float), (void **)&d_g));
  PetscCall(d_put(&a, o0, no * sizeof(float), (void **)&d_ref));
  PetscCall(d_put(&a, o0, no * sizeof(float), (void **)&d_out));
  PetscCall(d_nan(&a, (size_t)N * C, &d_in));
  PetscCall(d_nan(&a, no, &d_prod));
  if (norm) f.norm_w = d_g;
  if (gated) PetscCall(c->gpu->swiglu_forward(d_in, d_x, N, C));
  if (norm) PetscCall(c->gpu->rmsnorm_forward(d_in, NULL, d_x, d_g, N, C, f.norm_eps));
  PetscCall(c->gpu->matmul_forward(add ? d_prod : d_ref, gated || norm ? d_in : d_x, d_w, d_bias, N, C, OC, tr));
  if (add) PetscCall(c->gpu->axpy(d_ref, 1.0f, d_prod, no));
  PetscCall(c->gpu->matmul_fused(d_out, d_x, d_w, d_bias, N, C, OC, tr, &f));
  PetscCall(same_bits(&a, &v, "out", d_ref, d_out, no));
  verdict_report(c, &v, "matmul_fused%s%s%s%s N=%d C=%d OC=%d (against the ops one by one)", tr ? " transposed" : "", gated ? " gated" : "", norm ? " normed" : "",
                 add ? " add" : "", N, C, OC);
  PetscCall(arena_free(&a));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* NKV < NH: grouped-query attention, qkv rows [C + 2*NKV*C/NH] and each kv
 * head's gradient summed over its group of query heads. The backend's tiled
 * pair (the log-sum-exp [B,NH,T], no T x T array) against the cpu's tiled
 * pair (which test_ops holds to the T x T and double references): run twice
 * for the bits, once more with score panels of one (sequence, kv head) unit
 * at a time (several chunks per query block), and the forward once without
 * saving the log-sum-exp (the same bits). Each backward gets the cpu
 * forward's saved arrays. */
static PetscErrorCode check_attention(Ctx *c, int B, int T, int C, int NH, int NKV)
{
  Arena   a  = {.gpu = c->gpu};
  Verdict v  = {"", 1};
  size_t  nq = (size_t)B * T * (C + 2 * (size_t)(C / NH) * NKV), no = (size_t)B * T * C, nl = (size_t)B * NH * T, was;
  float  *qkv = h_rand(&a, &c->r, nq, -1.5, 1.5), *out = h_nan(&a, no), *lse = h_nan(&a, nl), *g = h_rand(&a, &c->r, no, -1, 1);
  float  *dq0 = h_rand(&a, &c->r, nq, -1, 1), *dq = h_dup(&a, dq0, nq);
  float  *d_qkv, *d_out[4], *d_lse[3], *d_g, *d_cout, *d_clse, *d_dq[3];
  double  rt = rtol_of(c, BF16_ROUNDED); /* bf16 products in bf16 mode */

  PetscFunctionBegin;
  PetscCall(d_put(&a, qkv, nq * sizeof(float), (void **)&d_qkv));
  for (int k = 0; k < 4; k++) {
    PetscCall(d_nan(&a, no, &d_out[k]));
    if (k < 3) PetscCall(d_nan(&a, nl, &d_lse[k]));
    if (k == 2) PetscCall(backend_cuda_set_attention_panel_bytes(1, &was)); /* one unit per chunk */
    PetscCall(c->gpu->attention_forward(d_out[k], k < 3 ? d_lse[k] : NULL, d_qkv, B, T, C, NH, NKV));
    if (k == 2) PetscCall(backend_cuda_set_attention_panel_bytes(was, NULL));
  }
  PetscCall(c->cpu->attention_forward(out, lse, qkv, B, T, C, NH, NKV));
  PetscCall(compare_dev(&a, &v, "out", d_out[0], out, NULL, no, rt));
  PetscCall(compare_dev(&a, &v, "lse", d_lse[0], lse, NULL, nl, rt));
  PetscCall(same_bits(&a, &v, "out", d_out[0], d_out[1], no));
  PetscCall(same_bits(&a, &v, "lse", d_lse[0], d_lse[1], nl));
  PetscCall(compare_dev(&a, &v, "out (panels of one unit)", d_out[2], out, NULL, no, rt));
  PetscCall(compare_dev(&a, &v, "lse (panels of one unit)", d_lse[2], lse, NULL, nl, rt));
  PetscCall(same_bits(&a, &v, "out (no lse)", d_out[0], d_out[3], no));
  verdict_report(c, &v, "attention_forward B=%d T=%d C=%d NH=%d NKV=%d (tiled, log-sum-exp; run twice, panels of one unit, no lse)", B, T, C, NH, NKV);

  PetscCall(d_put(&a, g, no * sizeof(float), (void **)&d_g));
  PetscCall(d_put(&a, out, no * sizeof(float), (void **)&d_cout));
  PetscCall(d_put(&a, lse, nl * sizeof(float), (void **)&d_clse));
  for (int k = 0; k < 3; k++) {
    PetscCall(d_put(&a, dq0, nq * sizeof(float), (void **)&d_dq[k]));
    if (k == 2) PetscCall(backend_cuda_set_attention_panel_bytes(1, &was));
    PetscCall(c->gpu->attention_backward(d_dq[k], d_g, d_qkv, d_cout, d_clse, B, T, C, NH, NKV));
    if (k == 2) PetscCall(backend_cuda_set_attention_panel_bytes(was, NULL));
  }
  PetscCall(c->cpu->attention_backward(dq, g, qkv, out, lse, B, T, C, NH, NKV));
  PetscCall(compare_dev(&a, &v, "dqkv", d_dq[0], dq, dq0, nq, rt));
  PetscCall(same_bits(&a, &v, "dqkv", d_dq[0], d_dq[1], nq));
  PetscCall(compare_dev(&a, &v, "dqkv (panels of one unit)", d_dq[2], dq, dq0, nq, rt));
  verdict_report(c, &v, "attention_backward B=%d T=%d C=%d NH=%d NKV=%d (tiled; accumulates; run twice, panels of one unit)", B, T, C, NH, NKV);

  PetscCall(arena_free(&a));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* The same sequence of cached calls on both backends: three sequences in
 * slots {2, 0, 3} of a 4-slot cache whose Tmax exceeds T. The first call
 * holds all three prompts (5, 1 and 20 tokens) with their rows shuffled, so
 * rows of one slot attend to keys written by the same call; then one token
 * per unfinished slot per call, in rotating order. Compared: every output
 * row, and the caches at the end (entries neither side wrote stay NaN).
 * NKV < NH: grouped-query attention, caches [nslot, Tmax, NKV*C/NH]. */
static PetscErrorCode check_attention_cached(Ctx *c, int C, int NH, int NKV)
{
  const int B = 3, T = 37, Tmax = T + 5, nslot = 4, slot_of[3] = {2, 0, 3}, prompt[3] = {5, 1, 20};
  Arena     a   = {.gpu = c->gpu};
  Verdict   v   = {"", 1};
  size_t    Ckv = (size_t)(C / NH) * NKV, C3 = (size_t)C + 2 * Ckv, nc = (size_t)nslot * Tmax * Ckv;
  float    *qkv = h_rand(&a, &c->r, (size_t)B * T * C3, -1.5, 1.5), *kc = h_nan(&a, nc), *vc = h_nan(&a, nc);
  float    *rows = h_alloc(&a, (size_t)B * T * C3 * sizeof(float)), *rout = h_alloc(&a, (size_t)B * T * C * sizeof(float)), *gout;
  float    *want = h_nan(&a, (size_t)B * T * C), *got = h_nan(&a, (size_t)B * T * C);
  int      *slot = h_ints(&a, (size_t)B * T), *pos = h_ints(&a, (size_t)B * T), *seq = h_ints(&a, (size_t)B * T), done[3], ncall = 0;
  float    *d_kc, *d_vc, *d_rows, *d_out;
  int      *d_slot, *d_pos;
  double    rt = rtol_of(c, FP32_ALWAYS);

  PetscFunctionBegin;
  PetscCall(d_nan(&a, nc, &d_kc));
  PetscCall(d_nan(&a, nc, &d_vc));
  PetscCall(d_alloc(&a, (size_t)B * T * C3 * sizeof(float), (void **)&d_rows));
  PetscCall(d_alloc(&a, (size_t)B * T * C * sizeof(float), (void **)&d_out));
  PetscCall(d_alloc(&a, (size_t)B * T * sizeof(int), (void **)&d_slot));
  PetscCall(d_alloc(&a, (size_t)B * T * sizeof(int), (void **)&d_pos));
  for (int b = 0; b < B; b++) done[b] = 0;
  for (;;) {
    int n = 0;
    if (!ncall) { /* the prompts, shuffled */
      for (int b = 0; b < B; b++)
        for (int t = 0; t < prompt[b]; t++) seq[n] = b, pos[n] = t, n++;
      for (int k = n - 1; k > 0; k--) {
        int j = rng_int(&c->r, k + 1), s = seq[k], p = pos[k];
        seq[k] = seq[j], pos[k] = pos[j], seq[j] = s, pos[j] = p;
      }
    } else
      for (int k = 0; k < B; k++) {
        int b = (k + ncall) % B;
        if (done[b] < T) seq[n] = b, pos[n] = done[b], n++;
      }
    if (!n) break;
    for (int r = 0; r < n; r++) {
      slot[r] = slot_of[seq[r]];
      memcpy(rows + r * C3, qkv + ((size_t)seq[r] * T + pos[r]) * C3, C3 * sizeof(float));
    }
    for (size_t i = 0; i < (size_t)n * C; i++) rout[i] = NAN;
    PetscCall(c->gpu->from_host(d_rows, rows, n * C3 * sizeof(float)));
    PetscCall(c->gpu->from_host(d_out, rout, (size_t)n * C * sizeof(float)));
    PetscCall(c->gpu->from_host(d_slot, slot, n * sizeof(int)));
    PetscCall(c->gpu->from_host(d_pos, pos, n * sizeof(int)));
    PetscCall(c->gpu->attention_cached(d_out, d_kc, d_vc, d_rows, d_slot, d_pos, n, Tmax, C, NH, NKV));
    PetscCall(c->cpu->attention_cached(rout, kc, vc, rows, slot, pos, n, Tmax, C, NH, NKV));
    PetscCall(d_get(&a, d_out, (size_t)n * C, &gout));
    for (int r = 0; r < n; r++) {
      size_t at = ((size_t)seq[r] * T + pos[r]) * C;
      memcpy(want + at, rout + (size_t)r * C, C * sizeof(float));
      memcpy(got + at, gout + (size_t)r * C, C * sizeof(float));
      if (ncall) done[seq[r]]++;
    }
    if (!ncall)
      for (int b = 0; b < B; b++) done[b] = prompt[b];
    ncall++;
  }
  compare(&v, "out", got, want, NULL, (size_t)B * T * C, rtol_of(c, BF16_ROUNDED));
  {
    float *gk, *gv;
    PetscCall(d_get(&a, d_kc, nc, &gk));
    PetscCall(d_get(&a, d_vc, nc, &gv));
    compare_at(&v, "kcache", get_f, gk, kc, NULL, nc, rt, 0.0, PETSC_TRUE);
    compare_at(&v, "vcache", get_f, gv, vc, NULL, nc, rt, 0.0, PETSC_TRUE);
  }
  verdict_report(c, &v, "attention_cached C=%d NH=%d NKV=%d, %d calls: 3 prompts in one shuffled call, then interleaved decoding in slots 2, 0, 3 of 4 (Tmax %d)", C, NH,
                 NKV, ncall, Tmax);
  PetscCall(arena_free(&a));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode check_pointwise(Ctx *c)
{
  const size_t n = 100003;
  Arena        a = {.gpu = c->gpu};
  Verdict      v = {"", 1};
  float       *x = h_rand(&a, &c->r, n, -6, 6), *y = h_rand(&a, &c->r, n, -1, 1), *g = h_rand(&a, &c->r, n, -1, 1), *dx0 = h_rand(&a, &c->r, n, -1, 1);
  float       *out = h_nan(&a, n), *res = h_nan(&a, n), *dx = h_dup(&a, dx0, n), *y2 = h_dup(&a, y, n);
  float       *d_x, *d_y, *d_g, *d_out, *d_res, *d_dx, *d_y2;

  PetscFunctionBegin;
  PetscCall(d_put(&a, x, n * sizeof(float), (void **)&d_x));
  PetscCall(d_put(&a, y, n * sizeof(float), (void **)&d_y));
  PetscCall(d_put(&a, g, n * sizeof(float), (void **)&d_g));
  PetscCall(d_put(&a, dx0, n * sizeof(float), (void **)&d_dx));
  PetscCall(d_put(&a, y, n * sizeof(float), (void **)&d_y2));
  PetscCall(d_nan(&a, n, &d_out));
  PetscCall(d_nan(&a, n, &d_res));

  PetscCall(c->cpu->gelu_forward(out, x, n));
  PetscCall(c->gpu->gelu_forward(d_out, d_x, n));
  PetscCall(compare_dev(&a, &v, "out", d_out, out, NULL, n, rtol_of(c, BF16_ROUNDED)));
  verdict_report(c, &v, "gelu_forward n=%zu", n);

  PetscCall(c->cpu->gelu_backward(dx, x, g, n));
  PetscCall(c->gpu->gelu_backward(d_dx, d_x, d_g, n));
  PetscCall(compare_dev(&a, &v, "dinp", d_dx, dx, dx0, n, rtol_of(c, FP32_ALWAYS)));
  verdict_report(c, &v, "gelu_backward n=%zu (accumulates)", n);

  PetscCall(c->cpu->residual_forward(res, x, y, n));
  PetscCall(c->gpu->residual_forward(d_res, d_x, d_y, n));
  PetscCall(compare_dev(&a, &v, "residual", d_res, res, NULL, n, rtol_of(c, FP32_ALWAYS)));
  PetscCall(c->cpu->axpy(y2, 0.37f, x, n));
  PetscCall(c->gpu->axpy(d_y2, 0.37f, d_x, n));
  PetscCall(compare_dev(&a, &v, "axpy", d_y2, y2, y, n, rtol_of(c, FP32_ALWAYS)));
  PetscCall(c->cpu->scale(y2, -1.75f, n));
  PetscCall(c->gpu->scale(d_y2, -1.75f, n));
  PetscCall(compare_dev(&a, &v, "axpy then scale", d_y2, y2, NULL, n, rtol_of(c, FP32_ALWAYS)));
  verdict_report(c, &v, "residual_forward, axpy, scale n=%zu", n);
  PetscCall(arena_free(&a));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* A CSR allowed-token mask over N rows (as test_ops): rows cycle through an
 * empty range (the whole vocabulary), one token, 2..20 and 100..700 tokens,
 * each a random subset in random order; targets come from the row's set and
 * every fifth row has none (-1). off [N+1] and ids live in the arena. */
static void make_mask(Arena *a, Rng *r, int N, int V, int *tgt, int **off, int **ids)
{
  int *perm = h_ints(a, V), *size = h_ints(a, N);

  *off      = h_ints(a, (size_t)N + 1);
  (*off)[0] = 0;
  for (int n = 0; n < N; n++) {
    size[n]       = n % 4 == 0 ? 0 : n % 4 == 1 ? 1 : n % 4 == 2 ? 2 + rng_int(r, 19) : 100 + rng_int(r, 601);
    (*off)[n + 1] = (*off)[n] + size[n];
  }
  *ids = h_ints(a, (*off)[N] ? (*off)[N] : 1);
  for (int v = 0; v < V; v++) perm[v] = v;
  for (int n = 0; n < N; n++) {
    int *set = *ids + (*off)[n];
    for (int k = 0; k < size[n]; k++) {
      int j = k + rng_int(r, V - k), t = perm[k];
      perm[k] = perm[j], perm[j] = t;
      set[k] = perm[k];
    }
    tgt[n] = n % 5 == 3 ? -1 : size[n] ? set[rng_int(r, size[n])] : rng_int(r, V);
  }
}

/* Random logits; those a masked row must never read are NaN, so a read shows. */
static float *make_logits(Arena *a, Rng *r, int N, int V, const int *off, const int *ids)
{
  float *x = h_rand(a, r, (size_t)N * V, -6, 6), *keep = h_alloc(a, (size_t)V * sizeof(float));

  for (int n = 0; off && n < N; n++) {
    float *row = x + (size_t)n * V;
    if (off[n + 1] == off[n]) continue;
    memcpy(keep, row, (size_t)V * sizeof(float));
    for (int j = 0; j < V; j++) row[j] = NAN;
    for (int k = off[n]; k < off[n + 1]; k++) row[ids[k]] = keep[ids[k]];
  }
  return x;
}

/* Forward (with and without lse/entropy) and backward (with the lse and
 * without) of one distribution, on both backends. */
static PetscErrorCode check_logprob_dist(Ctx *c, const char *what, int N, int V, float it, PetscBool masked)
{
  Arena   a = {.gpu = c->gpu};
  Verdict v = {"", 1};
  size_t  NV = (size_t)N * V;
  int    *tgt = h_ints(&a, N), *off = NULL, *ids = NULL, *d_tgt, *d_off, *d_ids;
  float  *x, *lp = h_nan(&a, N), *lse = h_nan(&a, N), *ent = h_nan(&a, N), *dlp = h_rand(&a, &c->r, N, -1, 1), *dx = h_nan(&a, NV);
  float  *d_x, *d_lp[2], *d_lse[2], *d_ent[2], *d_lp3, *d_dlp, *d_clse, *d_dx[2], *d_dx3;
  double  rt = rtol_of(c, FP32_ALWAYS);

  PetscFunctionBegin;
  if (masked) make_mask(&a, &c->r, N, V, tgt, &off, &ids);
  else
    for (int n = 0; n < N; n++) tgt[n] = n % 5 == 3 ? -1 : rng_int(&c->r, V);
  x = make_logits(&a, &c->r, N, V, off, ids);
  PetscCall(d_put(&a, x, NV * sizeof(float), (void **)&d_x));
  PetscCall(d_put(&a, tgt, N * sizeof(int), (void **)&d_tgt));
  PetscCall(d_put(&a, off, masked ? (N + 1) * sizeof(int) : 0, (void **)&d_off));
  PetscCall(d_put(&a, ids, masked ? (off[N] ? off[N] : 1) * sizeof(int) : 0, (void **)&d_ids));
  for (int k = 0; k < 2; k++) {
    PetscCall(d_nan(&a, N, &d_lp[k]));
    PetscCall(d_nan(&a, N, &d_lse[k]));
    PetscCall(d_nan(&a, N, &d_ent[k]));
    PetscCall(c->gpu->logprob_forward(d_lp[k], d_lse[k], d_ent[k], d_x, d_tgt, it, d_off, d_ids, N, V));
  }
  PetscCall(d_nan(&a, N, &d_lp3));
  PetscCall(c->gpu->logprob_forward(d_lp3, NULL, NULL, d_x, d_tgt, it, d_off, d_ids, N, V));
  PetscCall(c->cpu->logprob_forward(lp, lse, ent, x, tgt, it, off, ids, N, V));
  PetscCall(compare_dev(&a, &v, "logprob", d_lp[0], lp, NULL, N, rt));
  PetscCall(compare_dev(&a, &v, "lse", d_lse[0], lse, NULL, N, rt));
  PetscCall(compare_dev(&a, &v, "entropy", d_ent[0], ent, NULL, N, rt));
  PetscCall(same_bits(&a, &v, "logprob", d_lp[0], d_lp[1], N));
  PetscCall(same_bits(&a, &v, "lse", d_lse[0], d_lse[1], N));
  PetscCall(same_bits(&a, &v, "entropy", d_ent[0], d_ent[1], N));
  /* PPO's first ratio exp(new - old) is exactly 1 only if asking for the
   * entropy changes no bit of the log-probabilities */
  PetscCall(same_bits(&a, &v, "logprob with lse and entropy NULL", d_lp[0], d_lp3, N));
  verdict_report(c, &v, "logprob_forward N=%d V=%d, %s (rows without a target give 0; run twice)", N, V, what);

  /* the backward gets the cpu's lse on both sides; then none (recomputed) */
  PetscCall(d_put(&a, dlp, N * sizeof(float), (void **)&d_dlp));
  PetscCall(d_put(&a, lse, N * sizeof(float), (void **)&d_clse));
  for (int k = 0; k < 2; k++) {
    PetscCall(d_nan(&a, NV, &d_dx[k]));
    PetscCall(c->gpu->logprob_backward(d_dx[k], d_x, d_clse, d_tgt, d_dlp, it, d_off, d_ids, N, V));
  }
  PetscCall(d_nan(&a, NV, &d_dx3));
  PetscCall(c->gpu->logprob_backward(d_dx3, d_x, NULL, d_tgt, d_dlp, it, d_off, d_ids, N, V));
  PetscCall(c->cpu->logprob_backward(dx, x, lse, tgt, dlp, it, off, ids, N, V));
  PetscCall(compare_dev(&a, &v, "dlogits", d_dx[0], dx, NULL, NV, rt));
  PetscCall(compare_dev(&a, &v, "dlogits(lse NULL)", d_dx3, dx, NULL, NV, rt));
  PetscCall(same_bits(&a, &v, "dlogits", d_dx[0], d_dx[1], NV));
  verdict_report(c, &v, "logprob_backward N=%d V=%d, %s (overwrites; rows without a target zero; run twice)", N, V, what);
  PetscCall(arena_free(&a));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* logprob_stats and logprob_backward_shard on the columns v0 .. v0+Vl-1 of a
 * V-column row, with global targets and mask ids: some targets and many
 * masked rows' whole sets lie outside the shard (then max y is -inf). */
static PetscErrorCode check_logprob_shard(Ctx *c, const char *what, float it, PetscBool masked)
{
  const int N = 97, V = 1000, v0 = 300, Vl = 350;
  Arena     a = {.gpu = c->gpu};
  Verdict   v = {"", 1};
  size_t    NL = (size_t)N * Vl;
  int      *tgt = h_ints(&a, N), *off = NULL, *ids = NULL, *d_tgt, *d_off, *d_ids;
  float    *x, *xs = h_alloc(&a, NL * sizeof(float)), *lp = h_nan(&a, N), *lse = h_nan(&a, N), *dlp = h_rand(&a, &c->r, N, -1, 1), *dxs = h_nan(&a, NL);
  double   *st = h_alloc(&a, 4 * (size_t)N * sizeof(double)), *gst = h_alloc(&a, 4 * (size_t)N * sizeof(double)), *part[2][4];
  double   *d_st[2];
  float    *d_xs, *d_lse, *d_dlp, *d_dx[2];
  double    rt = rtol_of(c, FP32_ALWAYS);
  const char *comp[4] = {"stats max", "stats sum", "stats weighted sum", "stats target y"};

  PetscFunctionBegin;
  if (masked) make_mask(&a, &c->r, N, V, tgt, &off, &ids);
  else
    for (int n = 0; n < N; n++) tgt[n] = n % 5 == 3 ? -1 : rng_int(&c->r, V);
  x = make_logits(&a, &c->r, N, V, off, ids);
  for (int n = 0; n < N; n++) memcpy(xs + (size_t)n * Vl, x + (size_t)n * V + v0, Vl * sizeof(float));
  PetscCall(c->cpu->logprob_forward(lp, lse, NULL, x, tgt, it, off, ids, N, V)); /* the global lse */
  PetscCall(d_put(&a, xs, NL * sizeof(float), (void **)&d_xs));
  PetscCall(d_put(&a, tgt, N * sizeof(int), (void **)&d_tgt));
  PetscCall(d_put(&a, off, masked ? (N + 1) * sizeof(int) : 0, (void **)&d_off));
  PetscCall(d_put(&a, ids, masked ? (off[N] ? off[N] : 1) * sizeof(int) : 0, (void **)&d_ids));
  for (int i = 0; i < 4 * N; i++) gst[i] = NAN;
  for (int k = 0; k < 2; k++) {
    PetscCall(d_put(&a, gst, 4 * (size_t)N * sizeof(double), (void **)&d_st[k]));
    PetscCall(c->gpu->logprob_stats(d_st[k], d_xs, d_tgt, it, d_off, d_ids, N, Vl, v0));
  }
  PetscCall(c->cpu->logprob_stats(st, xs, tgt, it, off, ids, N, Vl, v0));
  for (int k = 0; k < 2; k++)
    for (int j = 0; j < 4; j++) part[k][j] = h_alloc(&a, (size_t)N * sizeof(double));
  PetscCall(c->gpu->to_host(gst, d_st[0], 4 * (size_t)N * sizeof(double)));
  for (int n = 0; n < N; n++)
    for (int j = 0; j < 4; j++) part[0][j][n] = gst[4 * n + j], part[1][j][n] = st[4 * n + j];
  for (int j = 0; j < 4; j++) compare_at(&v, comp[j], get_d, part[0][j], part[1][j], NULL, N, rt, 0.0, PETSC_FALSE);
  {
    double *again = h_alloc(&a, 4 * (size_t)N * sizeof(double));
    PetscCall(c->gpu->to_host(again, d_st[1], 4 * (size_t)N * sizeof(double)));
    if (memcmp(again, gst, 4 * (size_t)N * sizeof(double))) v.ok = 0, vappend(&v, "; FAIL stats differ between two runs");
    else vappend(&v, "; stats bitwise");
  }
  verdict_report(c, &v, "logprob_stats N=%d, columns %d..%d of V=%d, %s (run twice)", N, v0, v0 + Vl - 1, V, what);

  PetscCall(d_put(&a, lse, N * sizeof(float), (void **)&d_lse));
  PetscCall(d_put(&a, dlp, N * sizeof(float), (void **)&d_dlp));
  for (int k = 0; k < 2; k++) {
    PetscCall(d_nan(&a, NL, &d_dx[k]));
    PetscCall(c->gpu->logprob_backward_shard(d_dx[k], d_xs, d_lse, d_tgt, d_dlp, it, d_off, d_ids, N, Vl, v0));
  }
  PetscCall(c->cpu->logprob_backward_shard(dxs, xs, lse, tgt, dlp, it, off, ids, N, Vl, v0));
  PetscCall(compare_dev(&a, &v, "dlogits", d_dx[0], dxs, NULL, NL, rt));
  PetscCall(same_bits(&a, &v, "dlogits", d_dx[0], d_dx[1], NL));
  verdict_report(c, &v, "logprob_backward_shard N=%d, columns %d..%d of V=%d, %s (overwrites; run twice)", N, v0, v0 + Vl - 1, V, what);
  PetscCall(arena_free(&a));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* The same rows masked two ways (tensor.h): "every id but e[n]" as the
 * one-entry compact set and as the explicit ascending list of those V-1
 * ids; every fourth row keeps a small explicit set in both. e[n] walks the
 * row's edges and a thread stride's (LP_THREADS 256). Targets avoid e[n];
 * every fifth row has none. */
static void make_but_masks(Arena *a, Rng *r, int N, int V, int *tgt, int **coff, int **cids, int **xoff, int **xids)
{
  const int edges[8] = {0, V - 1, 255, 256, 257, V / 2, V - 2, 1};
  int       nc = 0, nx = 0;

  *coff = h_ints(a, (size_t)N + 1), *xoff = h_ints(a, (size_t)N + 1);
  *cids = h_ints(a, (size_t)N * V), *xids = h_ints(a, (size_t)N * V);
  (*coff)[0] = (*xoff)[0] = 0;
  for (int n = 0; n < N; n++) {
    int e = n < 8 ? edges[n] : rng_int(r, V);
    if (n % 4 == 3) {
      for (int k = 0; k < 5; k++) (*cids)[nc++] = (*xids)[nx++] = (7 * n + 13 * k) % V;
      tgt[n] = (*xids)[nx - 1 - rng_int(r, 5)];
    } else {
      (*cids)[nc++] = tensor_set_but(e);
      for (int v = 0; v < V; v++)
        if (v != e) (*xids)[nx++] = v;
      do tgt[n] = rng_int(r, V);
      while (tgt[n] == e);
    }
    if (n % 5 == 4) tgt[n] = -1;
    (*coff)[n + 1] = nc, (*xoff)[n + 1] = nx;
  }
}

/* Compact "every id but e" rows against the explicit V-1 ids on the device:
 * the same bits (forward, backward with and without lse, stats and
 * backward_shard on shards that start off a thread stride), and the cpu's
 * values within the usual tolerance; a target equal to e is an error. */
static PetscErrorCode check_logprob_but(Ctx *c, int N, int V)
{
  const int v0s[3] = {0, 300, V - 3}, Vls[3] = {300, V - 303, 3};
  const float it = 1.0f / 0.7f;
  Arena     a = {.gpu = c->gpu};
  Verdict   v = {"", 1};
  size_t    NV = (size_t)N * V;
  int      *tgt = h_ints(&a, N), *coff, *cids, *xoff, *xids, *d_tgt, *d_off[2], *d_ids[2];
  float    *x = h_rand(&a, &c->r, NV, -6, 6), *dlp = h_rand(&a, &c->r, N, -1, 1), *lp = h_nan(&a, N), *lse = h_nan(&a, N), *ent = h_nan(&a, N);
  float    *dx = h_nan(&a, NV), *d_x, *d_dlp, *d_lp[2], *d_lse[2], *d_ent[2], *d_dx[2];
  double    rt = rtol_of(c, FP32_ALWAYS);

  PetscFunctionBegin;
  make_but_masks(&a, &c->r, N, V, tgt, &coff, &cids, &xoff, &xids);
  PetscCall(d_put(&a, x, NV * sizeof(float), (void **)&d_x));
  PetscCall(d_put(&a, dlp, N * sizeof(float), (void **)&d_dlp));
  PetscCall(d_put(&a, tgt, N * sizeof(int), (void **)&d_tgt));
  for (int w = 0; w < 2; w++) { /* 0: compact, 1: explicit */
    PetscCall(d_put(&a, w ? xoff : coff, (N + 1) * sizeof(int), (void **)&d_off[w]));
    PetscCall(d_put(&a, w ? xids : cids, (size_t)(w ? xoff : coff)[N] * sizeof(int), (void **)&d_ids[w]));
    PetscCall(d_nan(&a, N, &d_lp[w]));
    PetscCall(d_nan(&a, N, &d_lse[w]));
    PetscCall(d_nan(&a, N, &d_ent[w]));
    PetscCall(c->gpu->logprob_forward(d_lp[w], d_lse[w], d_ent[w], d_x, d_tgt, it, d_off[w], d_ids[w], N, V));
  }
  PetscCall(c->cpu->logprob_forward(lp, lse, ent, x, tgt, it, coff, cids, N, V));
  PetscCall(same_bits(&a, &v, "compact vs explicit logprob", d_lp[0], d_lp[1], N));
  PetscCall(same_bits(&a, &v, "compact vs explicit lse", d_lse[0], d_lse[1], N));
  PetscCall(same_bits(&a, &v, "compact vs explicit entropy", d_ent[0], d_ent[1], N));
  PetscCall(compare_dev(&a, &v, "logprob", d_lp[0], lp, NULL, N, rt));
  PetscCall(compare_dev(&a, &v, "entropy", d_ent[0], ent, NULL, N, rt));
  for (int pass = 0; pass < 2; pass++) { /* the lse, then none (recomputed) */
    for (int w = 0; w < 2; w++) {
      PetscCall(d_nan(&a, NV, &d_dx[w]));
      PetscCall(c->gpu->logprob_backward(d_dx[w], d_x, pass ? NULL : d_lse[w], d_tgt, d_dlp, it, d_off[w], d_ids[w], N, V));
    }
    PetscCall(same_bits(&a, &v, pass ? "compact vs explicit dlogits (lse NULL)" : "compact vs explicit dlogits", d_dx[0], d_dx[1], NV));
  }
  PetscCall(c->cpu->logprob_backward(dx, x, lse, tgt, dlp, it, coff, cids, N, V));
  PetscCall(compare_dev(&a, &v, "dlogits", d_dx[0], dx, NULL, NV, rt));
  for (int sh = 0; sh < 3; sh++) {
    int     v0 = v0s[sh], Vl = Vls[sh];
    float  *xs = h_alloc(&a, (size_t)N * Vl * sizeof(float)), *d_xs, *d_ds[2];
    double *st[2], *d_st[2];
    for (int n = 0; n < N; n++) memcpy(xs + (size_t)n * Vl, x + (size_t)n * V + v0, Vl * sizeof(float));
    PetscCall(d_put(&a, xs, (size_t)N * Vl * sizeof(float), (void **)&d_xs));
    for (int w = 0; w < 2; w++) {
      st[w] = h_alloc(&a, 4 * (size_t)N * sizeof(double));
      PetscCall(d_alloc(&a, 4 * (size_t)N * sizeof(double), (void **)&d_st[w]));
      PetscCall(c->gpu->logprob_stats(d_st[w], d_xs, d_tgt, it, d_off[w], d_ids[w], N, Vl, v0));
      PetscCall(c->gpu->to_host(st[w], d_st[w], 4 * (size_t)N * sizeof(double)));
      PetscCall(d_nan(&a, (size_t)N * Vl, &d_ds[w]));
      PetscCall(c->gpu->logprob_backward_shard(d_ds[w], d_xs, d_lse[w], d_tgt, d_dlp, it, d_off[w], d_ids[w], N, Vl, v0));
    }
    if (memcmp(st[0], st[1], 4 * (size_t)N * sizeof(double))) v.ok = 0, vappend(&v, "; FAIL stats of columns %d.. differ, compact vs explicit", v0);
    else vappend(&v, "; stats of columns %d.. bitwise", v0);
    PetscCall(same_bits(&a, &v, "compact vs explicit backward_shard", d_ds[0], d_ds[1], (size_t)N * Vl));
  }
  { /* a target equal to e: an error naming the row */
    const int   off1[2] = {0, 1}, but3[1] = {tensor_set_but(3)}, t3[1] = {3};
    const char *msg = NULL;
    int        *d_o1, *d_b3, *d_t3;
    PetscErrorCode ierr;
    PetscCall(d_put(&a, off1, sizeof off1, (void **)&d_o1));
    PetscCall(d_put(&a, but3, sizeof but3, (void **)&d_b3));
    PetscCall(d_put(&a, t3, sizeof t3, (void **)&d_t3));
    PetscCall(PetscPushErrorHandler(PetscReturnErrorHandler, NULL));
    ierr = c->gpu->logprob_forward(d_lp[0], d_lse[0], NULL, d_x, d_t3, it, d_o1, d_b3, 1, V);
    PetscCall(PetscPopErrorHandler());
    if (ierr) PetscCall(PetscErrorMessage(ierr, NULL, (char **)&msg));
    if (ierr && msg && strstr(msg, "outside its allowed set") && strstr(msg, "row 0")) vappend(&v, "; target e refused: \"%s\"", msg);
    else v.ok = 0, vappend(&v, "; FAIL target e: %s \"%s\"", ierr ? "message lacks \"outside its allowed set\" or \"row 0\"" : "no error", msg ? msg : "");
  }
  verdict_report(c, &v, "logprob ops N=%d V=%d, compact \"every id but e\" rows against the explicit V-1 ids (inv_temp 1/0.7; shards at 0, 300, V-3)", N, V);
  PetscCall(arena_free(&a));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode check_sumsq(Ctx *c, size_t n)
{
  Arena   a = {.gpu = c->gpu};
  Verdict v = {"", 1};
  float  *x = h_rand(&a, &c->r, n, -1, 1), *d_x;
  double  s = 0, gs[2] = {NAN, NAN};

  PetscFunctionBegin;
  PetscCall(d_put(&a, x, n * sizeof(float), (void **)&d_x));
  PetscCall(c->gpu->sumsq(&gs[0], d_x, n));
  PetscCall(c->gpu->sumsq(&gs[1], d_x, n));
  PetscCall(c->cpu->sumsq(&s, x, n));
  compare_at(&v, "sumsq", get_d, &gs[0], &s, NULL, 1, rtol_of(c, FP32_ALWAYS), 0.0, PETSC_FALSE);
  if (memcmp(&gs[0], &gs[1], sizeof(double))) v.ok = 0, vappend(&v, "; FAIL differs between two runs (%.17g, %.17g)", gs[0], gs[1]);
  else vappend(&v, "; bitwise");
  verdict_report(c, &v, "sumsq n=%zu (run twice)", n);
  PetscCall(arena_free(&a));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Three AdamW steps with weight decay and a gradient scale, fresh gradients
 * each step. The parameters are compared by their change: 6 roundings of p
 * per side (decay and update, 3 steps) allow 8 ulp of |p| on top of 1e-5 of
 * the change, which still resolves the update to ~1e-4. */
static PetscErrorCode check_adamw(Ctx *c)
{
  const size_t n = 50001;
  const float  lr = 3e-3f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.1f, gs = 0.7f;
  Arena        a = {.gpu = c->gpu};
  Verdict      v = {"", 1};
  float       *p0 = h_rand(&a, &c->r, n, -1, 1), *p = h_dup(&a, p0, n), *m = h_alloc(&a, n * sizeof(float)), *vv = h_alloc(&a, n * sizeof(float));
  float       *d_p, *d_m, *d_v, *d_g, *gp;
  double       rt = rtol_of(c, FP32_ALWAYS);

  PetscFunctionBegin;
  memset(m, 0, n * sizeof(float)), memset(vv, 0, n * sizeof(float));
  PetscCall(d_put(&a, p0, n * sizeof(float), (void **)&d_p));
  PetscCall(d_put(&a, m, n * sizeof(float), (void **)&d_m));
  PetscCall(d_put(&a, vv, n * sizeof(float), (void **)&d_v));
  PetscCall(d_alloc(&a, n * sizeof(float), (void **)&d_g));
  for (int t = 1; t <= 3; t++) {
    float *g = h_rand(&a, &c->r, n, -2, 2);
    PetscCall(c->gpu->from_host(d_g, g, n * sizeof(float)));
    PetscCall(c->gpu->adamw(d_p, d_g, d_m, d_v, n, lr, b1, b2, eps, wd, t, gs));
    PetscCall(c->cpu->adamw(p, g, m, vv, n, lr, b1, b2, eps, wd, t, gs));
  }
  PetscCall(d_get(&a, d_p, n, &gp));
  compare_at(&v, "p", get_f, gp, p, p0, n, rt, 8.0, PETSC_FALSE);
  PetscCall(compare_dev(&a, &v, "m", d_m, m, NULL, n, rt));
  PetscCall(compare_dev(&a, &v, "v", d_v, vv, NULL, n, rt));
  verdict_report(c, &v, "adamw n=%zu (3 steps, weight decay, gradient scale)", n);
  PetscCall(arena_free(&a));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* A target outside its row's allowed set must be an error naming the row,
 * in the forward and the backward: the kernels check the device arrays
 * themselves (cuda_logprob.cu). An unmasked call skips that check to save a
 * synchronisation and gives NaN for a row whose target is >= V instead
 * (documented there; tensor.h calls it an error, and the model checks
 * targets on the host first): either is accepted, a finite value is not.
 * Afterwards the backend must work normally. */
static PetscErrorCode check_logprob_errors(Ctx *c)
{
  const int      N = 4, V = 50, off[5] = {0, 3, 3, 4, 6}, ids[6] = {7, 2, 40, 11, 5, 9};
  const int      outside[4] = {2, 33, 12, 9} /* row 2 allows only 11 */, beyond[4] = {2, 50, 1, -1}, good[4] = {2, 33, 11, -1};
  Arena          a = {.gpu = c->gpu};
  Verdict        v = {"", 1};
  float         *x = h_rand(&a, &c->r, (size_t)N * V, -3, 3), *lp = h_nan(&a, N), *dlp = h_rand(&a, &c->r, N, -1, 1), *glp, *d_x, *d_lp, *d_lse, *d_dlp, *d_dx;
  int           *d_off, *d_ids, *d_tgt;
  const char    *msg;
  PetscErrorCode ierr;

  PetscFunctionBegin;
  PetscCall(d_put(&a, x, (size_t)N * V * sizeof(float), (void **)&d_x));
  PetscCall(d_put(&a, off, sizeof off, (void **)&d_off));
  PetscCall(d_put(&a, ids, sizeof ids, (void **)&d_ids));
  PetscCall(d_put(&a, dlp, N * sizeof(float), (void **)&d_dlp));
  PetscCall(d_alloc(&a, N * sizeof(int), (void **)&d_tgt));
  PetscCall(d_nan(&a, N, &d_lp));
  PetscCall(d_nan(&a, N, &d_lse));
  PetscCall(d_nan(&a, (size_t)N * V, &d_dx));
  PetscCall(c->gpu->from_host(d_tgt, outside, N * sizeof(int)));
  for (int k = 0; k < 3; k++) {
    const char *label[3] = {"forward, target 12 outside row 2's set {11}", "backward, the same", "forward without a mask, target 50 >= V"};
    if (k == 2) PetscCall(c->gpu->from_host(d_tgt, beyond, N * sizeof(int)));
    PetscCall(c->gpu->from_host(d_lp, lp, N * sizeof(float))); /* NaN again */
    PetscCall(PetscPushErrorHandler(PetscReturnErrorHandler, NULL));
    ierr = k == 0 ? c->gpu->logprob_forward(d_lp, d_lse, NULL, d_x, d_tgt, 1.0f, d_off, d_ids, N, V)
         : k == 1 ? c->gpu->logprob_backward(d_dx, d_x, NULL, d_tgt, d_dlp, 1.0f, d_off, d_ids, N, V)
                  : c->gpu->logprob_forward(d_lp, NULL, NULL, d_x, d_tgt, 1.0f, NULL, NULL, N, V);
    PetscCall(PetscPopErrorHandler());
    msg = NULL;
    if (ierr) PetscCall(PetscErrorMessage(ierr, NULL, (char **)&msg));
    if (ierr && msg && (k == 2 || (strstr(msg, "outside its allowed set") && strstr(msg, "row 2")))) {
      vappend(&v, "%s%s: \"%s\"", v.text[0] ? "; " : "", label[k], msg);
    } else if (ierr) {
      v.ok = 0;
      vappend(&v, "%sFAIL %s: message \"%s\" lacks \"outside its allowed set\" or \"row 2\"", v.text[0] ? "; " : "", label[k], msg ? msg : "");
    } else if (k == 2) { /* no error: row 1 must then be NaN */
      PetscCall(d_get(&a, d_lp, N, &glp));
      if (isnan(glp[1])) vappend(&v, "%s%s: NaN in that row, no error", v.text[0] ? "; " : "", label[k]);
      else v.ok = 0, vappend(&v, "%sFAIL %s: no error and a finite log-probability %.9g", v.text[0] ? "; " : "", label[k], (double)glp[1]);
    } else {
      v.ok = 0;
      vappend(&v, "%sFAIL %s: no error", v.text[0] ? "; " : "", label[k]);
    }
  }
  /* the device still works, and the valid call agrees with the cpu */
  PetscCall(c->gpu->from_host(d_tgt, good, N * sizeof(int)));
  PetscCall(c->gpu->logprob_forward(d_lp, NULL, NULL, d_x, d_tgt, 1.0f, d_off, d_ids, N, V));
  PetscCall(c->cpu->logprob_forward(lp, NULL, NULL, x, good, 1.0f, off, ids, N, V));
  PetscCall(compare_dev(&a, &v, "then a valid call", d_lp, lp, NULL, N, rtol_of(c, FP32_ALWAYS)));
  verdict_report(c, &v, "logprob_forward/backward reject a target outside its set");
  PetscCall(arena_free(&a));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* bf16 must change a matmul (rounded operands), and going back to fp32 must
 * give the fp32 bits again: the precision switch is real and reversible. */
static PetscErrorCode check_precision_switch(Ctx *c)
{
  const int N = 37, C = 72, OC = 200;
  Arena     a = {.gpu = c->gpu};
  Verdict   v = {"", 1};
  float    *x = h_rand(&a, &c->r, (size_t)N * C, -1, 1), *w = h_rand(&a, &c->r, (size_t)C * OC, -1, 1), *d_x, *d_w, *d_o[3], *o[3];
  double    diff = 0, scale = 0;

  PetscFunctionBegin;
  PetscCall(d_put(&a, x, (size_t)N * C * sizeof(float), (void **)&d_x));
  PetscCall(d_put(&a, w, (size_t)C * OC * sizeof(float), (void **)&d_w));
  for (int k = 0; k < 3; k++) {
    PetscCall(set_precision(c, k == 1 ? PETSC_TRUE : PETSC_FALSE));
    PetscCall(d_nan(&a, (size_t)N * OC, &d_o[k]));
    PetscCall(c->gpu->matmul_forward(d_o[k], d_x, d_w, NULL, N, C, OC, PETSC_FALSE));
    PetscCall(d_get(&a, d_o[k], (size_t)N * OC, &o[k]));
  }
  PetscCall(set_precision(c, PETSC_TRUE));
  for (size_t i = 0; i < (size_t)N * OC; i++) diff = fmax(diff, fabs((double)o[1][i] - o[0][i])), scale = fmax(scale, fabs((double)o[0][i]));
  if (!(diff > 1e-4 * scale)) v.ok = 0, vappend(&v, "FAIL bf16 changes max|out| %.3g only %.3g (not > 1e-4 of it): is bf16 in effect?", scale, diff);
  else vappend(&v, "bf16 moves the output by %.3g of %.3g", diff, scale);
  if (memcmp(o[0], o[2], (size_t)N * OC * sizeof(float))) v.ok = 0, vappend(&v, "; FAIL fp32 after bf16 differs from fp32 before");
  else vappend(&v, "; fp32 again bitwise as before");
  verdict_report(c, &v, "precision switch: matmul_forward N=%d C=%d OC=%d in fp32, bf16, fp32", N, C, OC);
  PetscCall(arena_free(&a));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Backend.sample: the cuda kernel against the cpu op (which test_gen holds
 * to ref_sample_row bit for bit) on the same rows. Both run the same
 * operations in the same order (inc/internal/sample_core.h, no FMA), so
 * the tokens, set sizes, boundaries and allowed ids must be equal. The
 * log-probabilities may differ only through the last bits of CUDA's and
 * glibc's double exp and log (each within 1 ulp): the double results then
 * differ by ~1e-15 relative (the id-order sums add no difference, being the
 * same additions), far below float's half ulp (3e-8), so after rounding to
 * float they are equal or one float ulp apart. Tolerance: 1 ulp; the count
 * of bitwise-equal rows is printed. Run twice: the same bits. */
typedef struct {
  double temperature, top_p;
  int    top_k, greedy;
  double scale; /* logits uniform in (-6 scale, 6 scale): 4 makes top-p's nucleus a few thousand tokens */
  int    ties;  /* logits on a grid of 0.5 at any V (always at V < 100) */
} SampleCase;

static PetscErrorCode check_sample(Ctx *c, const SampleCase *sc, int V, int N)
{
  Arena            a   = {.gpu = c->gpu};
  Verdict          v   = {"", 1};
  BackendSampleCfg cfg = {sc->temperature, sc->top_p, sc->top_k, sc->greedy, 7, 0x5eed0123456789ull, 4};
  size_t           NV  = (size_t)N * V;
  float           *lg  = h_alloc(&a, NV * sizeof(float)), *lp = h_alloc(&a, N * sizeof(float)), *glp = h_alloc(&a, 2 * N * sizeof(float)), *d_lg, *d_lp;
  int *row = h_ints(&a, N), *sid = h_ints(&a, N), *pos = h_ints(&a, N), *ban = h_ints(&a, N), *tok = h_ints(&a, N), *na = h_ints(&a, N), *bd = h_ints(&a, N);
  int *allowed = h_ints(&a, NV), *gout = h_ints(&a, 6 * (size_t)N), *gallowed = h_ints(&a, NV);
  int *d_row, *d_sid, *d_pos, *d_ban, *d_out, *d_allowed, bad_tok = 0, bad_set = 0, ulp1 = 0, bad_lp = 0, twice = 0;
  void *cwork = h_alloc(&a, c->cpu->sample_work(N, V)), *d_work;
  double t0, dt;

  PetscFunctionBegin;
  for (size_t i = 0; i < NV; i++) {
    float x = (float)rng_unif(&c->r, -6 * sc->scale, 6 * sc->scale);
    lg[i]   = V < 100 || sc->ties ? 0.5f * roundf(2.0f * x) : x; /* ties in the ranking */
  }
  for (int n = 0; n < N; n++) {
    row[n] = N - 1 - n;
    sid[n] = 11 * n + 1;
    pos[n] = 3 + n;
    ban[n] = n % 3 == 0;
  }
  for (int j = 0; j < V; j++) lg[(size_t)(N - 2) * V + j] = -INFINITY; /* sample 1 draws nothing */
  lg[(size_t)(N - 3) * V + V / 3] = NAN;                                /* nor sample 2 */
  PetscCall(c->cpu->sample(tok, lp, na, bd, allowed, cwork, lg, row, sid, pos, ban, &cfg, N, V));
  PetscCall(d_put(&a, lg, NV * sizeof(float), (void **)&d_lg));
  PetscCall(d_put(&a, row, N * sizeof(int), (void **)&d_row));
  PetscCall(d_put(&a, sid, N * sizeof(int), (void **)&d_sid));
  PetscCall(d_put(&a, pos, N * sizeof(int), (void **)&d_pos));
  PetscCall(d_put(&a, ban, N * sizeof(int), (void **)&d_ban));
  PetscCall(d_alloc(&a, 6 * (size_t)N * sizeof(int), (void **)&d_out)); /* token, nallowed, boundary; twice */
  PetscCall(d_nan(&a, 2 * (size_t)N, &d_lp));
  PetscCall(d_alloc(&a, NV * sizeof(int), (void **)&d_allowed));
  PetscCall(d_alloc(&a, c->gpu->sample_work(N, V), &d_work));
  PetscCall(c->gpu->sync());
  t0 = sys_wtime();
  for (int r = 0; r < 2; r++)
    PetscCall(c->gpu->sample(d_out + 3 * N * r, d_lp + N * r, d_out + 3 * N * r + N, d_out + 3 * N * r + 2 * N, r ? NULL : d_allowed, d_work, d_lg, d_row, d_sid,
                             d_pos, d_ban, &cfg, N, V));
  PetscCall(c->gpu->sync());
  dt = (sys_wtime() - t0) / 2;
  PetscCall(c->gpu->to_host(gout, d_out, 6 * (size_t)N * sizeof(int)));
  PetscCall(c->gpu->to_host(glp, d_lp, 2 * (size_t)N * sizeof(float)));
  PetscCall(c->gpu->to_host(gallowed, d_allowed, NV * sizeof(int)));
  twice = memcmp(gout, gout + 3 * N, 3 * (size_t)N * sizeof(int)) || memcmp(glp, glp + N, N * sizeof(float));
  for (int n = 0; n < N; n++) {
    bad_tok += gout[n] != tok[n];
    bad_set += gout[N + n] != na[n] || gout[2 * N + n] != bd[n] || (na[n] && memcmp(gallowed + (size_t)n * V, allowed + (size_t)n * V, (size_t)na[n] * sizeof(int)));
    if (tok[n] < 0 || !memcmp(&glp[n], &lp[n], sizeof(float))) continue;
    if (fabsf(glp[n] - lp[n]) <= fabsf(nextafterf(lp[n], -INFINITY) - lp[n])) ulp1++;
    else bad_lp++;
  }
  v.ok = !bad_tok && !bad_set && !bad_lp && !twice;
  vappend(&v, "%d rows: %d tokens and %d allowed sets differ; log-probs %d bitwise, %d 1 ulp apart, %d further; two runs %s; %.2f ms a call", N, bad_tok, bad_set, N - ulp1 - bad_lp,
          ulp1, bad_lp, twice ? "DIFFER" : "bitwise", dt * 1e3);
  verdict_report(c, &v, "sample V=%d, %d rows, temperature %g, top-k %d, top-p %g%s, logits x%g%s", V, N, sc->temperature, sc->top_k, sc->top_p,
                 sc->greedy ? ", greedy" : "", sc->scale, sc->ties ? " on a grid (ties)" : "");
  PetscCall(arena_free(&a));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode check_samples(Ctx *c)
{
  /* at V = 151,936 the kernel's paths: plain; top-k and top-p through the
   * sorted candidates (ties among them too); the serial fallback when they
   * do not fit (top-p 0.9 on the unscaled rows keeps ~29,000 tokens; top-k
   * 10,000); greedy with and without a cut */
  const SampleCase cases[] = {
    {1.0, 1.0,  0,     0, 1, 0},
    {0.7, 1.0,  0,     0, 1, 0},
    {0.7, 1.0,  50,    0, 1, 0},
    {1.0, 0.9,  0,     0, 1, 0},
    {0.7, 0.8,  200,   0, 1, 0},
    {1.0, 1.0,  3,     1, 1, 0}, /* greedy */
    {1.0, 0.9,  0,     0, 4, 0},
    {1.0, 0.95, 50,    0, 4, 0},
    {1.0, 1.0,  50,    0, 1, 1},
    {1.0, 0.9,  0,     0, 4, 1},
    {1.0, 1.0,  0,     1, 1, 1}, /* greedy among equal logits */
    {0.7, 1.0,  5000,  0, 1, 0},
    {1.0, 1.0,  10000, 0, 1, 0},
  };

  PetscFunctionBegin;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    SampleCase small = cases[i];
    if (small.top_k > 20) small.top_k = 20;
    PetscCall(check_sample(c, &small, 37, 48));
    PetscCall(check_sample(c, &cases[i], 151936, 64));
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Every check, in the current precision. */
static PetscErrorCode check_all(Ctx *c)
{
  const int mm[][4] = {
    {37,  72,  200,  0}, {37, 72, 200, 1}, {333, 96, 160, 0}, {333, 96, 160, 1},
    {64,  768, 2304, 0}, /* GPT-2 small's c_attn */
    {37,  72,  1000, 1}, /* a tied LM head [V,C] */
    {5,   72,  1,    1}, /* the scalar head [1,C] */
    {1,   768, 2304, 0}, /* one decode token (N = 1) */
    {3,   768, 50257, 1}, /* GPT-2's tied LM head, its whole vocabulary */
    {37,  72,  201,  0}, {37, 72, 201, 1}, /* a width not a multiple of 8: bf16 pads its rows */
    {1400, 64, 50257, 1}, /* bf16's padded output in two chunks of rows */
    /* up to 8 rows: the one-kernel path of cuda_skinny.cu */
    {8,   768, 2304, 0}, {8, 72, 1000, 1},
    {5,   8960, 1536, 0}, /* Qwen2.5-1.5B's down projection: k split over blocks */
    {1,   896, 151936, 1}, /* Qwen2.5's tied LM head, one row */
    {7,   33,  13,   0}, {7, 33, 13, 1}, /* odd sizes: fewer columns than a block, C odd */
    {2,   1536, 8960 * 2, 0}, /* a SwiGLU gate|up projection */
    {3,   4864, 896,  1}, /* Qwen2.5-0.5B's down projection, transposed: 8 warps a weight row */
    {6,   1000, 37,   1}, /* C a multiple of 8, fewer outputs than a block has warps */
    {4,   1004, 300,  1}, /* C a multiple of 4, not 8: the scalar loads */
    {8,   1536, 1152, 1}, /* a fused qkv projection, 8 rows */
  };
  const int fused[][7] = { /* N, C, OC, transposed, gated, normed, add */
    {1, 896,  896,  1, 0, 0, 1}, /* Qwen2.5-0.5B's o projection into the residual */
    {1, 4864, 896,  1, 1, 0, 1}, /* its down projection of the SwiGLU, into the residual */
    {1, 896,  1152, 1, 0, 1, 0}, /* its qkv projection of the normed residual */
    {3, 896,  9728, 1, 0, 1, 0}, /* its gate|up projection, 3 rows */
    {2, 896,  5003, 1, 0, 1, 0}, /* a head of an odd vocabulary */
    {5, 4864, 896,  1, 1, 0, 1}, {8, 1000, 37, 1, 1, 0, 0}, {3, 33, 13, 1, 1, 0, 1}, {3, 33, 13, 1, 0, 1, 1}, /* odd C: the scalar loads */
    {2, 3000, 64,   1, 0, 1, 0}, /* a row longer than 2048 normed */
    {2, 768,  768,  0, 0, 0, 1}, /* GPT-2's layout */
    {7, 3072, 768,  0, 0, 0, 1}, /* its down projection: k split over blocks */
    {4, 200,  72,   0, 1, 0, 1}, {4, 200, 72, 0, 0, 1, 0}, {5, 3000, 300, 0, 0, 1, 1}, {6, 1004, 300, 1, 0, 0, 0},
  };
  const int att[][5] = {
    {2, 64,   64,   4,  4}, /* head size 16 */
    {3, 37,   128,  4,  4}, /* 32, T not a multiple of anything */
    {2, 64,   256,  4,  4}, /* 64, as GPT-2 */
    {3, 1,    64,   4,  4}, /* one token */
    {1, 1024, 768,  12, 12}, /* GPT-2 small's full window */
    {2, 64,   256,  4,  2}, /* grouped-query: pairs of query heads per kv head */
    {3, 37,   256,  4,  1}, /* one kv head for all (multi-query) */
    {2, 37,   576,  9,  3}, /* an odd head count, head size 64 */
    {3, 1,    576,  9,  3}, /* the same, one token */
    {2, 100,  1024, 8,  2}, /* head size 128 */
    {1, 256,  2048, 32, 8}, /* Llama 3.2 1B's heads */
    {2, 300,  256,  4,  2}, /* three query blocks of the tiled pair, the last one short */
    {1, 259,  448,  7,  1}, /* GQA 7:1 (Qwen2.5-0.5B's ratio), head size 64, odd T */
    {1, 2600, 128,  2,  1}, /* blocks of 192 positions (T/16 rounded up to 64) */
  };
  const int cached[][3] = {
    {64,  4, 4}, /* head size 16 */
    {64,  4, 2},
    {64,  4, 1},
    {576, 9, 3}, /* head size 64 */
    {72,  4, 2}, /* head size 18: not a multiple of 4, the scalar loads */
  };

  PetscFunctionBegin;
  PetscCall(check_encoder(c, 333, 160, 7, 11, 0, 7, PETSC_TRUE));
  PetscCall(check_encoder(c, 333, 72, 10, 11, 3, 4, PETSC_FALSE));
  PetscCall(check_layernorm(c, 37, 72));
  PetscCall(check_layernorm(c, 333, 160));
  PetscCall(check_layernorm(c, 64, 1600));
  PetscCall(check_layernorm(c, 1, 768)); /* one row */
  PetscCall(check_rmsnorm(c, 37, 72));
  PetscCall(check_rmsnorm(c, 333, 160));
  PetscCall(check_rmsnorm(c, 64, 2048));
  PetscCall(check_rmsnorm(c, 1, 768)); /* one row */
  PetscCall(check_rmsnorm(c, 3, 4000)); /* a row longer than the per-row kernel keeps in registers */
  PetscCall(check_rope(c, 37, 4, 2, 16));
  PetscCall(check_rope(c, 5, 9, 3, 64));
  PetscCall(check_rope(c, 1, 32, 8, 64)); /* one decode row */
  PetscCall(check_rope(c, 300, 8, 2, 128));
  PetscCall(check_qk_norm(c, 70, 4, 2, 12));
  PetscCall(check_qk_norm(c, 300, 16, 8, 128)); /* Qwen3-0.6B's heads */
  PetscCall(check_swiglu(c, 37, 200));
  PetscCall(check_swiglu(c, 333, 1001));
  PetscCall(check_swiglu(c, 1, 8192)); /* one decode row */
  for (size_t i = 0; i < sizeof mm / sizeof mm[0]; i++) PetscCall(check_matmul(c, mm[i][0], mm[i][1], mm[i][2], mm[i][3] ? PETSC_TRUE : PETSC_FALSE));
  for (size_t i = 0; i < sizeof fused / sizeof fused[0]; i++)
    PetscCall(check_matmul_fused(c, fused[i][0], fused[i][1], fused[i][2], (PetscBool)fused[i][3], (PetscBool)fused[i][4], (PetscBool)fused[i][5], (PetscBool)fused[i][6]));
  for (size_t i = 0; i < sizeof att / sizeof att[0]; i++) PetscCall(check_attention(c, att[i][0], att[i][1], att[i][2], att[i][3], att[i][4]));
  for (size_t i = 0; i < sizeof cached / sizeof cached[0]; i++) PetscCall(check_attention_cached(c, cached[i][0], cached[i][1], cached[i][2]));
  PetscCall(check_pointwise(c));
  PetscCall(check_logprob_dist(c, "plain log-softmax", 97, 1000, 1.0f, PETSC_FALSE));
  PetscCall(check_logprob_dist(c, "inv_temp 1/0.7", 97, 1000, 1.0f / 0.7f, PETSC_FALSE));
  PetscCall(check_logprob_dist(c, "inv_temp 1/0.7 and a mask of 0, 1, 2-20, 100-700 tokens per row", 97, 1000, 1.0f / 0.7f, PETSC_TRUE));
  PetscCall(check_logprob_dist(c, "GPT-2's vocabulary", 6, 50257, 1.0f, PETSC_FALSE));
  PetscCall(check_logprob_dist(c, "GPT-2's vocabulary with inv_temp 1/0.7 and a mask", 6, 50257, 1.0f / 0.7f, PETSC_TRUE));
  PetscCall(check_logprob_shard(c, "inv_temp 1", 1.0f, PETSC_FALSE));
  PetscCall(check_logprob_shard(c, "inv_temp 1/0.7 and a mask", 1.0f / 0.7f, PETSC_TRUE));
  PetscCall(check_logprob_but(c, 41, 1003));
  PetscCall(check_logprob_but(c, 6, 50257));
  PetscCall(check_sumsq(c, 100003));
  PetscCall(check_sumsq(c, ((size_t)1 << 20) + 7));
  PetscCall(check_adamw(c));
  PetscCall(check_logprob_errors(c));
  PetscCall(check_samples(c));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode run(Ctx *c, PetscBool sample_only)
{
  PetscFunctionBegin;
  PetscCall(backend_get("cuda", &c->gpu));
  c->cpu = backend_cpu();
  PetscCall(set_precision(c, PETSC_FALSE));
  if (sample_only) {
    PetscCall(check_samples(c));
    PetscFunctionReturn(PETSC_SUCCESS);
  }
  PetscCall(check_memory(c));
  PetscCall(check_all(c));
  PetscCall(check_precision_switch(c)); /* leaves bf16 on */
  PetscCall(check_all(c));
  PetscCall(set_precision(c, PETSC_FALSE));
  PetscFunctionReturn(PETSC_SUCCESS);
}

int main(int argc, char **argv)
{
  Ctx            c = {.r = {20240611}, .prec = "fp32"};
  PetscBool      have = PETSC_FALSE, probe = PETSC_FALSE, sample_only = PETSC_FALSE;
  const char    *req = getenv("RLFUSE_REQUIRE_CUDA");
  char           why[512];
  PetscErrorCode ierr;

  ierr = PetscInitialize(&argc, &argv, NULL, help);
  if (ierr) return 1;
  ierr = sys_error_handler_install();
  if (!ierr) ierr = PetscOptionsGetBool(NULL, NULL, "-probe", &probe, NULL);
  if (!ierr) ierr = PetscOptionsGetBool(NULL, NULL, "-sample_only", &sample_only, NULL);
  if (!ierr) ierr = backend_cuda_available(why, sizeof why, &have);
  if (ierr) sys_error_exit(ierr);
  if (!have) {
    if (probe) {
      printf("# skip: %s\n", why); /* the answer */
    } else if (req && !strcmp(req, "1")) {
      test_report(PETSC_FALSE, "cuda", "no usable CUDA device but RLFUSE_REQUIRE_CUDA=1 (%s)", why);
    } else {
      char nodev[600];
      snprintf(nodev, sizeof nodev, "no CUDA device (%s)", why);
      test_skip("cuda", nodev);
    }
  } else if (probe) {
    printf("# cuda: %s\n", why);
  } else {
    printf("# %s\n", why);
    ierr = run(&c, sample_only);
    if (ierr) {
      char what[32];
      snprintf(what, sizeof what, "cuda %s", c.prec);
      test_report(PETSC_FALSE, what, "stopped by an error (the 'rlfuse: error' line names it)");
      test_tally();
      sys_error_exit(ierr);
    }
  }
  if (!probe) {
    test_tally();
    if (test_state.fail) printf("HINT: the measured error of each array is in its line; compare the kernel with the cpu op in src/tensor/cpu_*.c (test_ops checks those)\n");
  }
  ierr = PetscFinalize();
  return test_state.fail || ierr ? 1 : 0;
}
