/* test_gen: the generation engine. The sampler against hand-computed allowed
 * sets and probabilities (top-k, top-p with its boundary token and ties,
 * min_new_tokens, temperature, greedy) and against its own distribution
 * empirically; continuous batching gives the same tokens, log-probabilities
 * and allowed sets whatever the slot count or request order, and a reused
 * engine and batch the same as fresh ones; the recorded log-probabilities
 * are what training computes with model_logprobs_dist; stop conditions and
 * the on_finish hand-over; batch invariance (a prompt alone and among 63
 * others, prefill included, on 1 and 2 threads: the same bits, with the cpu
 * backend's batch-invariant matmuls); configuration and argument errors. Prints one
 * "ok"/"not ok" line per check and exits non-zero on any failure.
 *
 * The checks in detail: the sampler on hand-computed cases (top-k, top-p boundary,
 * min_new_tokens, temperature, greedy, empirical frequencies), continuous batching with 4
 * slots and with all slots giving exactly the tokens of one-at-a-time generation (masks too),
 * recorded log-probabilities equal to the training forward's under the same distribution, stop
 * conditions, a full-length run (min_new = max_new) recording one entry, every id but EOS, per
 * response token, with log-probabilities under those entries bitwise those under the explicit
 * V-1 ids, configuration errors; a sample stopped by its budget (`GenRequest.budget`, 3 and 2
 * tokens) and resumed from its drawn tokens (`resumed`) draws the tokens of one uninterrupted
 * call, log-probabilities within 2e-6 (the resumed prefill's rounding), EOS still banned by
 * `min_new_tokens` after the resume; batch invariance with `-gen_batch_invariant` on, for a GPT-2- and a LLaMA-shaped model: one prompt generated alone and among 63 others of
 * lengths 1-24 (64 slots, one prefill of every prompt; 16 slots, admitted later at another
 * slot), on 1 and 2 threads, gives the same tokens and log-probabilities bit for bit (without
 * it the prefill's sgemm moves them by up to 2e-6), and training's logits the same bits with
 * it on and off; prompts
 * shared by groups of samples (4 groups of 6 on 8 slots, `-gen_share_prompts`) give the bits
 * of unshared generation and of one sample at a time in that mode, with fewer prompt rows run;
 * the cpu backend's `sample` op (what the engine calls) against the reference sampler
 * `ref_sample_row` (regression/ref_sample.c) bit for bit
 * (token, log-probability, allowed set) on rows of V = 37 with ties and of 151,936, at
 * temperature 1 and 0.7 with top-k, top-p, both and greedy, EOS banned in every third row, a
 * NaN and an all -inf row; its boundary rebuilding each allowed set from the row; 1 and 2
 * threads alike; the sums of weights in chunks of 256 ids (the total and 200 draws on a row of
 * 151,936 recomputed by the test's own loops, where the id-order sum differs)
 */
#include <math.h>
#include <stdarg.h>
#include <string.h>

#include <omp.h>

#include "gen.h"
#include "internal/sample_core.h"
#include "ref.h"
#include "sys.h"
#include "test_report.h"

static const char help[] = "Generation engine regression tests.\n";

static GenConfig base_config(void)
{
  GenConfig c = {.temperature = 1.0, .top_k = 0, .top_p = 1.0, .greedy = PETSC_FALSE, .max_new_tokens = 16, .min_new_tokens = 0, .slots = 4, .kv_mb = 64, .eos = 3};
  return c;
}

/* ---- the sampler on tiny rows ------------------------------------------- */
#define SV 6
/* p = {0.1, 0.4, 0.2, 0.05, 0.15, 0.1}: by rank 1, 2, 4, 0, 5, 3 (0 before 5 by id) */
static const double p6[SV] = {0.1, 0.4, 0.2, 0.05, 0.15, 0.1};

typedef struct {
  int    tok, nallowed, allowed[SV];
  float  logprob;
  double work[2 * SV];
} Draw;

static Draw draw6(const GenConfig *cfg, const float *logits, int n_new, uint32_t sample, uint32_t position)
{
  Draw d;
  d.tok = ref_sample_row(cfg, logits, SV, n_new, 42, 3, sample, position, &d.logprob, d.allowed, &d.nallowed, d.work);
  return d;
}

static PetscBool set_is(const Draw *d, int n, const int *want)
{
  if (d->nallowed != n) return PETSC_FALSE;
  for (int j = 0; j < n; j++)
    if (d->allowed[j] != want[j]) return PETSC_FALSE;
  return PETSC_TRUE;
}

static PetscBool in_set(const Draw *d, int tok)
{
  for (int j = 0; j < d->nallowed; j++)
    if (d->allowed[j] == tok) return PETSC_TRUE;
  return d->nallowed == 0 ? PETSC_TRUE : PETSC_FALSE;
}

/* log q(tok) with q = p restricted to `set` and renormalised, by hand. */
static double logq(const double *p, int n, const int *set, int tok)
{
  double s = 0;
  for (int j = 0; j < n; j++) s += p[set[j]];
  return log(p[tok] / s);
}

static void set_str(const Draw *d, char *buf, size_t len)
{
  size_t o = 0;
  o += (size_t)snprintf(buf + o, len - o, "{");
  for (int j = 0; j < d->nallowed && o < len; j++) o += (size_t)snprintf(buf + o, len - o, "%s%d", j ? "," : "", d->allowed[j]);
  if (o < len) snprintf(buf + o, len - o, "} token %d logprob %.6f", d->tok, (double)d->logprob);
}

static void test_sampler_sets(void)
{
  GenConfig cfg = base_config();
  float     lg[SV], tie[SV] = {1.0f, 3.0f, 2.0f, 0.5f, 2.0f, -1.0f};
  Draw      d;
  char      s[128];

  for (int v = 0; v < SV; v++) lg[v] = (float)log(p6[v]);

  cfg.top_k = 2; /* 3.0, then the tie at 2.0 goes to the lower id */
  d         = draw6(&cfg, tie, 0, 1, 5);
  set_str(&d, s, sizeof s);
  test_measure(set_is(&d, 2, (int[]){1, 2}) && in_set(&d, d.tok), "top-k 2 keeps the two largest, ties to the lower id", "%s (want {1,2})", s);

  cfg = base_config(), cfg.top_k = 3;
  d   = draw6(&cfg, lg, 0, 2, 5);
  set_str(&d, s, sizeof s);
  test_measure(set_is(&d, 3, (int[]){1, 2, 4}) && fabs(d.logprob - logq(p6, 3, (int[]){1, 2, 4}, d.tok)) < 1e-6, "top-k 3: set and renormalised logprob by hand", "%s (want {1,2,4}, logprob %.6f)", s, logq(p6, 3, (int[]){1, 2, 4}, d.tok));

  cfg = base_config(), cfg.top_p = 0.7; /* 0.4, 0.6, 0.75: token 4 crosses 0.7 and is kept */
  d   = draw6(&cfg, lg, 0, 3, 5);
  set_str(&d, s, sizeof s);
  test_measure(set_is(&d, 3, (int[]){1, 2, 4}) && fabs(d.logprob - logq(p6, 3, (int[]){1, 2, 4}, d.tok)) < 1e-6, "top-p 0.7 keeps the boundary token", "%s (want {1,2,4})", s);

  cfg = base_config(), cfg.top_p = 0.8; /* 0.75 + 0.1: 0 and 5 tie at 0.1, 0 wins */
  d   = draw6(&cfg, lg, 0, 4, 5);
  set_str(&d, s, sizeof s);
  test_measure(set_is(&d, 4, (int[]){0, 1, 2, 4}) && fabs(d.logprob - logq(p6, 4, (int[]){0, 1, 2, 4}, d.tok)) < 1e-6, "top-p 0.8: boundary tie goes to the lower id", "%s (want {0,1,2,4})", s);

  /* top-k 4 leaves mass 0.85; renormalised, 1 and 2 hold 0.6/0.85 = 0.706 >= 0.7 */
  cfg = base_config(), cfg.top_k = 4, cfg.top_p = 0.7;
  d   = draw6(&cfg, lg, 0, 5, 5);
  set_str(&d, s, sizeof s);
  test_measure(set_is(&d, 2, (int[]){1, 2}) && fabs(d.logprob - logq(p6, 2, (int[]){1, 2}, d.tok)) < 1e-6, "top-p applies over the top-k set, renormalised", "%s (want {1,2})", s);

  cfg = base_config(), cfg.top_p = 1e-9; /* always at least the first-ranked token */
  d   = draw6(&cfg, lg, 0, 6, 5);
  set_str(&d, s, sizeof s);
  test_measure(set_is(&d, 1, (int[]){1}) && d.tok == 1 && fabs(d.logprob) < 1e-7, "top-p tiny keeps exactly the most probable token", "%s", s);

  cfg = base_config();
  d   = draw6(&cfg, lg, 0, 7, 5);
  test_measure(d.nallowed == 0 && fabs(d.logprob - log(p6[d.tok])) < 1e-6, "no restriction: nallowed 0, logprob log p", "nallowed %d token %d logprob %.6f", d.nallowed, d.tok, (double)d.logprob);
}

static void test_sampler_min_new_temp_greedy(void)
{
  GenConfig cfg = base_config();
  float     lg[SV] = {0.0f, 1.0f, -1.0f, 2.5f, 0.5f, 0.0f}; /* EOS (3) is the most probable */
  double    z[SV], s = 0;
  Draw      d;
  int       neos = 0;
  PetscBool ok   = PETSC_TRUE;

  cfg.min_new_tokens = 2;
  for (uint32_t smp = 0; smp < 200; smp++) {
    d = draw6(&cfg, lg, 1, smp, 9);
    ok = ok && set_is(&d, 5, (int[]){0, 1, 2, 4, 5}) ? PETSC_TRUE : PETSC_FALSE;
    neos += d.tok == 3;
  }
  test_measure(ok && neos == 0, "min_new_tokens bans EOS while n_new < min_new", "200 draws at n_new 1: %d EOS, set without 3: %s", neos, ok ? "yes" : "no");
  neos = 0;
  for (uint32_t smp = 0; smp < 200; smp++) {
    d = draw6(&cfg, lg, 2, smp, 9);
    neos += d.tok == 3;
  }
  test_measure(neos > 0 && d.nallowed == 0, "min_new_tokens allows EOS once n_new reaches it", "200 draws at n_new 2: %d EOS, nallowed %d", neos, d.nallowed);

  /* greedy with temperature 2: the token is the argmax, the logprob that of softmax(l/2) */
  cfg = base_config(), cfg.greedy = PETSC_TRUE, cfg.temperature = 2.0;
  for (int v = 0; v < SV; v++) s += exp(lg[v] / 2.0);
  for (int v = 0; v < SV; v++) z[v] = lg[v] / 2.0 - log(s);
  d = draw6(&cfg, lg, 0, 1, 1);
  test_measure(d.tok == 3 && fabs(d.logprob - z[3]) < 1e-6, "greedy takes the argmax; logprob under softmax(l/T), T = 2", "token %d logprob %.6f (want 3, %.6f)", d.tok, (double)d.logprob, z[3]);

  cfg.min_new_tokens = 1; /* EOS banned: argmax of the rest is 1, renormalised without 3 */
  d = draw6(&cfg, lg, 0, 1, 1);
  test_measure(d.tok == 1 && fabs(d.logprob - (z[1] - log(1 - exp(z[3])))) < 1e-6, "greedy with EOS banned takes the best other token", "token %d logprob %.6f (want 1, %.6f)", d.tok, (double)d.logprob, z[1] - log(1 - exp(z[3])));

  cfg            = base_config();
  cfg.greedy     = PETSC_TRUE;
  float tie[SV]  = {1.0f, 3.0f, 3.0f, 0.0f, 0.0f, 0.0f};
  d              = draw6(&cfg, tie, 0, 1, 1);
  test_measure(d.tok == 1, "greedy ties go to the lower id", "token %d", d.tok);

  /* temperature 0.5 sharpens: logprob = l/T - logsumexp(l/T) for the drawn token */
  cfg             = base_config();
  cfg.temperature = 0.5;
  s               = 0;
  for (int v = 0; v < SV; v++) s += exp(lg[v] / 0.5);
  d = draw6(&cfg, lg, 0, 11, 1);
  test_measure(fabs(d.logprob - (lg[d.tok] / 0.5 - log(s))) < 1e-6, "temperature 0.5 logprob by hand", "token %d logprob %.6f want %.6f", d.tok, (double)d.logprob, lg[d.tok] / 0.5 - log(s));
}

/* Draws keyed by sample id: frequencies over 40000 ids match q within 5
 * standard errors; the same key gives the same token. */
static void test_sampler_draws(void)
{
  GenConfig cfg = base_config();
  float     lg[SV];
  int       count[SV] = {0}, N = 40000, bad = 0, same = 1, differ = 0;
  double    worst = 0, q[SV] = {0};
  Draw      a, b;

  cfg.top_p = 0.8; /* {0,1,2,4}, mass 0.85 */
  for (int v = 0; v < SV; v++) lg[v] = (float)log(p6[v]);
  for (int v = 0; v < SV; v++) q[v] = (v == 3 || v == 5) ? 0 : p6[v] / 0.85;
  for (int smp = 0; smp < N; smp++) count[draw6(&cfg, lg, 0, (uint32_t)smp, 17).tok]++;
  for (int v = 0; v < SV; v++) {
    double f = (double)count[v] / N, se = sqrt(q[v] * (1 - q[v]) / N);
    if (q[v] == 0) bad += count[v];
    else worst = PetscMax(worst, fabs(f - q[v]) / se);
  }
  test_measure(bad == 0 && worst < 5, "empirical frequencies match q (top-p 0.8)", "%d draws; max |f - q| = %.2f standard errors; %d outside the set", N, worst, bad);

  for (uint32_t pos = 0; pos < 64; pos++) {
    a = draw6(&cfg, lg, 0, 5, pos);
    b = draw6(&cfg, lg, 0, 5, pos);
    same &= a.tok == b.tok && a.logprob == b.logprob;
    differ += a.tok != draw6(&cfg, lg, 0, 5, 0).tok;
  }
  test_measure(same && differ > 0, "same (seed, iteration, sample, position) gives the same token", "64 positions repeated; %d differ from position 0", differ);
}

/* Logits of a diverged model: nothing may be drawn (the caller stops the
 * run); a NaN on the banned EOS does not matter. */
static void test_sampler_nonfinite(void)
{
  GenConfig cfg = base_config();
  float     lg[SV];
  Draw      d;
  int       ok_nan, ok_inf, ok_allneg, ok_ban;

  for (int v = 0; v < SV; v++) lg[v] = (float)log(p6[v]);
  lg[3]  = NAN;
  ok_nan = draw6(&cfg, lg, 0, 1, 0).tok == -1;
  cfg.greedy = PETSC_TRUE;
  ok_nan &= draw6(&cfg, lg, 0, 1, 0).tok == -1;
  cfg.greedy = PETSC_FALSE;
  lg[3]  = INFINITY;
  ok_inf = draw6(&cfg, lg, 0, 1, 0).tok == -1;
  for (int v = 0; v < SV; v++) lg[v] = -INFINITY;
  ok_allneg = draw6(&cfg, lg, 0, 1, 0).tok == -1;
  for (int v = 0; v < SV; v++) lg[v] = (float)log(p6[v]);
  cfg.eos            = 3;
  cfg.min_new_tokens = 2;
  lg[3]              = NAN;
  d                  = draw6(&cfg, lg, 0, 1, 0);
  ok_ban             = d.tok >= 0 && d.tok != 3;
  test_measure(ok_nan && ok_inf && ok_allneg && ok_ban, "NaN, +inf or all -inf logits draw nothing (-1)", "NaN %d, +inf %d, all -inf %d, NaN on the banned EOS still draws %d", ok_nan, ok_inf, ok_allneg, ok_ban);
}

/* A GPT-2-sized vocabulary: top-k 50 equals a brute-force selection, and top-p
 * keeps a prefix of the ranking whose mass reaches p. */
static PetscErrorCode test_sampler_large(void)
{
  const int V = 50257;
  GenConfig cfg = base_config();
  float    *lg;
  int      *allowed, na, tok, bad = 0;
  double   *work, t0, dt;
  float     lp;

  PetscFunctionBegin;
  PetscCall(PetscMalloc3(V, &lg, V, &allowed, 2 * V, &work));
  for (int v = 0; v < V; v++) lg[v] = 3.0f * rng_normal(99, 0, 0, (uint32_t)v, 0);
  lg[100] = lg[200] = 20.0f; /* a tie at the top */
  cfg.top_k = 50;
  t0        = sys_wtime();
  tok       = ref_sample_row(&cfg, lg, V, 0, 1, 0, 0, 0, &lp, allowed, &na, work);
  dt        = sys_wtime() - t0;
  {
    float thresh = INFINITY;
    int   above  = 0;
    for (int j = 0; j < na; j++) thresh = PetscMin(thresh, lg[allowed[j]]);
    for (int v = 0; v < V; v++) above += lg[v] > thresh;
    for (int j = 1; j < na; j++) bad += allowed[j] <= allowed[j - 1];
    int   found  = 0;
    for (int j = 0; j < na; j++) found += allowed[j] == tok;
    test_measure(na == 50 && above <= 49 && bad == 0 && found == 1, "top-k 50 over V = 50257 equals brute force", "%d allowed, %d tokens above the smallest kept, %.2f ms", na, above, dt * 1e3);
  }
  cfg       = base_config();
  cfg.top_p = 0.9;
  lg[100] = lg[200] = 0.0f; /* no dominant pair: the nucleus holds many tokens */
  t0        = sys_wtime();
  tok       = ref_sample_row(&cfg, lg, V, 0, 1, 0, 0, 0, &lp, allowed, &na, work);
  dt        = sys_wtime() - t0;
  {
    double zmax = -INFINITY, s = 0, kept = 0, kept_minus_min = 0, minp = INFINITY;
    for (int v = 0; v < V; v++) zmax = PetscMax(zmax, lg[v]);
    for (int v = 0; v < V; v++) s += exp(lg[v] - zmax);
    for (int j = 0; j < na; j++) {
      double pj = exp(lg[allowed[j]] - zmax) / s;
      kept += pj;
      minp = PetscMin(minp, pj);
    }
    kept_minus_min = kept - minp;
    test_measure(na > 0 && kept >= 0.9 - 1e-12 && kept_minus_min < 0.9, "top-p 0.9 over V = 50257 keeps the smallest prefix reaching 0.9", "%d allowed, mass %.6f (%.6f without the least), %.2f ms", na, kept, kept_minus_min, dt * 1e3);
  }
  PetscCall(PetscFree3(lg, allowed, work));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* The canonical summation order (sample_core.h): the weights' total is the
 * sums of chunks of 256 ids (each in id order) added in chunk order, and the
 * inverse CDF walks the same chunk prefixes. Recomputed here with loops of
 * the test's own on a row of 151,936 tokens, where the plain id-order sum
 * differs in its last bits (checked, or the row could not tell the two
 * orders apart); ref_sample_row's tokens and log-probabilities must be the
 * chunked definition's. */
static PetscErrorCode test_sampler_chunked(void)
{
  const int V = 151936, C = 256, ndraw = 200;
  GenConfig cfg = base_config();
  float    *lg, lp;
  int      *allowed, na, bad_tok = 0, bad_lp = 0;
  double   *w, *work, zmax = -INFINITY, seq = 0, chunked = 0;

  PetscFunctionBegin;
  PetscCall(PetscMalloc4(V, &lg, V, &allowed, V, &w, V, &work));
  for (int v = 0; v < V; v++) lg[v] = 3.0f * rng_normal(98, 0, 0, (uint32_t)v, 0);
  for (int v = 0; v < V; v++) zmax = PetscMax(zmax, (double)lg[v]);
  for (int v = 0; v < V; v++) w[v] = exp((double)lg[v] - zmax);
  for (int v = 0; v < V; v++) seq += w[v];
  for (int c0 = 0; c0 < V; c0 += C) {
    double s = 0;
    for (int v = c0; v < c0 + C && v < V; v++) s += w[v];
    chunked += s;
  }
  for (int i = 0; i < ndraw; i++) {
    double x = (double)rng_uniform(1 ^ GEN_RNG_DOMAIN, 0, (uint32_t)i, 7, 0) * chunked, cum = 0;
    int    ref = -1, tok;
    for (int c0 = 0; c0 < V && ref < 0; c0 += C) {
      double s = 0, next;
      for (int v = c0; v < c0 + C && v < V; v++) s += w[v];
      next = cum + s;
      if (x < next)
        for (int v = c0; v < c0 + C && v < V && ref < 0; v++) {
          cum += w[v];
          if (x < cum) ref = v;
        }
      cum = next;
    }
    tok = ref_sample_row(&cfg, lg, V, 0, 1, 0, (uint32_t)i, 7, &lp, allowed, &na, work);
    bad_tok += tok != ref;
    bad_lp += tok >= 0 && lp != (float)(((double)lg[tok] - zmax) - log(chunked));
  }
  test_measure(seq != chunked && sample_total(w, V) == chunked && !bad_tok && !bad_lp, "the sums of weights in chunks of 256 ids (V = 151936): the total and the draw",
               "total chunked %.17g, in id order %.17g, sample_total %s; %d draws: %d tokens and %d log-probabilities differ from the chunked definition", chunked, seq,
               sample_total(w, V) == chunked ? "equal" : "DIFFERS", ndraw, bad_tok, bad_lp);
  PetscCall(PetscFree4(lg, allowed, w, work));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* ---- Backend.sample against the host sampler ----------------------------- */
/* The cpu op (what the engine calls) must give ref_sample_row's bits: the
 * token, the log-probability, the allowed set; its compact form (the
 * boundary token) must rebuild that set from the row alone; and the rows
 * are independent of the thread count and of where they sit in the logits
 * (row indirection). Rows of V = 37 (logits on a grid of 0.5, so ties in
 * the ranking) and of Qwen's 151,936 tokens, several settings, every third
 * row with EOS banned, one row with a NaN and one all -inf. */
typedef struct {
  const char *what;
  double      temperature, top_p;
  int         top_k, greedy;
} OpCase;

static PetscErrorCode sample_op_case(const Backend *cpu, const OpCase *oc, int V, int N, uint32_t salt)
{
  const uint64_t   seed = 1234;
  const int        eos  = 7;
  GenConfig        cfg  = base_config();
  BackendSampleCfg sc   = {oc->temperature, oc->top_p, oc->top_k, oc->greedy, eos, seed ^ GEN_RNG_DOMAIN, 5};
  float           *lg, *lp, *lp1, ref_lp;
  int             *tok, *tok1, *na, *na1, *bd, *bd1, *allowed, *allowed1, *ref_allowed, *row, *sid, *pos, *ban, ref_na;
  double          *ref_work, *w;
  void            *work;
  int              nt = omp_get_max_threads(), bad_tok = 0, bad_lp = 0, bad_set = 0, bad_bd = 0, bad_thr = 0, restricted = 0, nan_rows = 0;
  char             name[200];

  PetscFunctionBegin;
  cfg.temperature    = oc->temperature;
  cfg.top_p          = oc->top_p;
  cfg.top_k          = oc->top_k;
  cfg.greedy         = (PetscBool)oc->greedy;
  cfg.eos            = eos;
  cfg.min_new_tokens = 1;
  PetscCall(PetscMalloc5((size_t)N * V, &lg, N, &lp, N, &lp1, N, &tok, N, &tok1));
  PetscCall(PetscMalloc5(N, &na, N, &na1, N, &bd, N, &bd1, (size_t)N * V, &allowed));
  PetscCall(PetscMalloc5((size_t)N * V, &allowed1, V, &ref_allowed, N, &row, N, &sid, N, &pos));
  PetscCall(PetscMalloc3(N, &ban, 2 * (size_t)V, &ref_work, V, &w));
  PetscCall(PetscMalloc(cpu->sample_work(N, V), &work));
  for (int n = 0; n < N; n++) {
    for (int v = 0; v < V; v++) {
      float x = 3.0f * rng_normal(77, salt, (uint32_t)n, (uint32_t)v, 0);
      lg[(size_t)n * V + v] = V < 100 ? 0.5f * roundf(2.0f * x) : x;
    }
    row[n] = N - 1 - n; /* sample n reads row N-1-n */
    sid[n] = 100 + 3 * n;
    pos[n] = 10 + n;
    ban[n] = n % 3 == 0;
  }
  for (int v = 0; v < V; v++) lg[(size_t)(N - 1 - 1) * V + v] = -INFINITY; /* sample 1 */
  lg[(size_t)(N - 1 - 2) * V + V / 2] = NAN;                             /* sample 2 */
  PetscCall(cpu->sample(tok, lp, na, bd, allowed, work, lg, row, sid, pos, ban, &sc, N, V));
  omp_set_num_threads(1);
  PetscCall(cpu->sample(tok1, lp1, na1, bd1, allowed1, work, lg, row, sid, pos, ban, &sc, N, V));
  omp_set_num_threads(nt);
  for (int n = 0; n < N; n++) {
    const float *x   = lg + (size_t)row[n] * V;
    int          ref = ref_sample_row(&cfg, x, V, ban[n] ? 0 : 1, seed, 5, (uint32_t)sid[n], (uint32_t)pos[n], &ref_lp, ref_allowed, &ref_na, ref_work);

    bad_thr += tok1[n] != tok[n] || memcmp(&lp1[n], &lp[n], sizeof(float)) || na1[n] != na[n] || bd1[n] != bd[n] ||
               (na[n] && memcmp(allowed1 + (size_t)n * V, allowed + (size_t)n * V, (size_t)na[n] * sizeof(int)));
    bad_tok += tok[n] != ref;
    nan_rows += ref < 0;
    if (ref < 0) continue;
    bad_lp += memcmp(&lp[n], &ref_lp, sizeof(float)) != 0;
    bad_set += na[n] != ref_na || (ref_na && memcmp(allowed + (size_t)n * V, ref_allowed, (size_t)ref_na * sizeof(int)));
    restricted += ref_na > 0;
    {
      /* rebuild the set from the boundary and the row's weights */
      int    b = sample_ban(eos, ban[n], V), m = 0, mism = 0;
      double inv_t = 1.0 / oc->temperature, zmax = -INFINITY;
      for (int v = 0; v < V; v++)
        if (v != b) zmax = PetscMax(zmax, sample_z(x[v], inv_t));
      for (int v = 0; v < V; v++) w[v] = sample_weight(x[v], inv_t, zmax, v, b);
      for (int v = 0; v < V; v++)
        if (w[v] >= 0 && sample_kept(w, v, bd[n])) {
          if (ref_na && (m >= ref_na || ref_allowed[m] != v)) mism = 1;
          m++;
        }
      bad_bd += mism || (ref_na ? m != ref_na : m != V);
    }
  }
  snprintf(name, sizeof name, "Backend.sample (cpu) = ref_sample_row bit for bit: V %d, %s", V, oc->what);
  test_measure(!bad_tok && !bad_lp && !bad_set && !bad_bd && !bad_thr && nan_rows == 2, name,
               "%d rows (%d restricted, %d NaN/-inf): %d tokens, %d log-probs, %d allowed sets, %d boundary rebuilds differ; 1 vs %d threads: %d rows differ", N, restricted,
               nan_rows, bad_tok, bad_lp, bad_set, bad_bd, nt, bad_thr);
  PetscCall(PetscFree(work));
  PetscCall(PetscFree3(ban, ref_work, w));
  PetscCall(PetscFree5(allowed1, ref_allowed, row, sid, pos));
  PetscCall(PetscFree5(na, na1, bd, bd1, allowed));
  PetscCall(PetscFree5(lg, lp, lp1, tok, tok1));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode test_sample_op(void)
{
  const Backend *cpu   = backend_cpu();
  const OpCase   cases[] = {
    {"temperature 1",                       1.0, 1.0, 0,  0},
    {"temperature 0.7",                     0.7, 1.0, 0,  0},
    {"temperature 0.7, top-k 5",            0.7, 1.0, 5,  0},
    {"temperature 1, top-p 0.9",            1.0, 0.9, 0,  0},
    {"temperature 0.7, top-k 20, top-p 0.8", 0.7, 0.8, 20, 0},
    {"greedy, top-k 3",                     1.0, 1.0, 3,  1},
  };
  const int ncase = (int)(sizeof cases / sizeof cases[0]);

  PetscFunctionBegin;
  for (int i = 0; i < ncase; i++) PetscCall(sample_op_case(cpu, &cases[i], 37, 48, (uint32_t)i));
  for (int i = 0; i < ncase; i++) {
    OpCase big = cases[i];
    if (big.top_k) big.top_k *= 10; /* top-k 50 and 200 over the large vocabulary */
    PetscCall(sample_op_case(cpu, &big, 151936, 4, 100 + (uint32_t)i));
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* ---- the engine on a small random Model ----------------------------------- */
#define NREQ 13
#define MAXP 12

typedef struct {
  Model     *lm;
  int        n, maxp, prompts[NREQ][MAXP];
  GenRequest req[NREQ];
} Fixture;

/* Weights drawn O(0.3) around GPT-2's centres make the next-token
 * distributions far from uniform (as in test_model). */
static PetscErrorCode perturbed_params(Model *lm, uint64_t seed)
{
  float *p;

  PetscFunctionBegin;
  PetscCall(PetscMalloc1(lm->nparams, &p));
  for (int i = 0; i < lm->ntensors; i++) {
    const ModelTensor *t      = &lm->tensors[i];
    PetscBool        ln_w   = t->ndim == 1 && strstr(t->name, "ln_") && strstr(t->name, ".weight") ? PETSC_TRUE : PETSC_FALSE;
    float            centre = ln_w ? 1.0f : 0.0f, std = t->ndim == 2 ? 0.3f : 0.1f;
    for (size_t e = 0; e < t->numel; e++) p[t->offset + e] = centre + std * rng_normal(seed, (uint32_t)i, 0, (uint32_t)e, 7);
  }
  PetscCall(model_params_set(lm, p));
  PetscCall(PetscFree(p));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode fixture_create(const Backend *be, Fixture *f)
{
  ModelConfig cfg = {.n_layer = 2, .n_head = 2, .n_embd = 32, .vocab_size = 10, .n_positions = 40, .head = MODEL_HEAD_LM};
  const int len[NREQ] = {5, 1, 12, 3, 7, 2, 9, 4, 11, 6, 1, 8, 10};

  PetscFunctionBegin;
  PetscCall(model_create(&cfg, be, &f->lm));
  PetscCall(perturbed_params(f->lm, 5));
  f->n    = NREQ;
  f->maxp = MAXP;
  for (int i = 0; i < NREQ; i++) {
    for (int t = 0; t < len[i]; t++) f->prompts[i][t] = (int)(rng_u32(11, (uint32_t)i, 0, (uint32_t)t, 0) % 10u);
    f->req[i] = (GenRequest){.id = 100 + 7 * i, .prompt = f->prompts[i], .prompt_len = len[i]};
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* What each on_finish call saw: the sample's length and its allowed sets. */
typedef struct {
  int  calls[NREQ], resp[NREQ], ids_ok[NREQ];
  char order[256];
} FinishLog;

static PetscErrorCode on_finish_log(void *ctx, const GenBatch *b, int i)
{
  FinishLog *log = (FinishLog *)ctx;
  size_t     o   = strlen(log->order);

  PetscFunctionBegin;
  log->calls[i]++;
  log->resp[i] = b->response_len[i];
  if (o + 4 < sizeof log->order) snprintf(log->order + o, sizeof log->order - o, "%d ", i);
  /* ranges of the response positions must be readable now: save a checksum */
  log->ids_ok[i] = 0;
  if (b->mask_off)
    for (int t = b->prompt_len[i]; t < b->prompt_len[i] + b->response_len[i]; t++) {
      size_t k = (size_t)i * b->Tmax + t;
      for (int j = b->mask_off[k]; j < b->mask_off[k + 1]; j++) log->ids_ok[i] += (t + 1) * (b->mask_ids[j] + 1);
    }
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Requests in the order given by perm (perm NULL: as in the fixture). */
static PetscErrorCode run_gen(Fixture *f, const GenConfig *cfg, const int *perm, GenBatch *b, FinishLog *log)
{
  GenEngine *eng;
  GenRequest req[NREQ];

  PetscFunctionBegin;
  for (int i = 0; i < f->n; i++) req[i] = f->req[perm ? perm[i] : i];
  if (log) PetscCall(PetscMemzero(log, sizeof *log));
  PetscCall(gen_batch_create(f->n, f->maxp + (int)cfg->max_new_tokens, gen_masked(cfg), b));
  PetscCall(gen_engine_create(f->lm, cfg, f->maxp, &eng));
  PetscCall(gen_generate(eng, 1234, 7, f->n, req, b, log ? on_finish_log : NULL, log));
  PetscCall(gen_engine_destroy(&eng));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Sample a's row i against b's row pa[i]: exact tokens, lengths, EOS and
 * allowed sets; the largest log-probability difference in *lperr. */
static PetscBool same_results(const GenBatch *a, const GenBatch *b, const int *pb, double *lperr, char *why, size_t len)
{
  *lperr = 0;
  if (a->Tmax != b->Tmax || a->n != b->n) return snprintf(why, len, "shapes differ"), PETSC_FALSE;
  for (int i = 0; i < a->n; i++) {
    int    j  = pb ? pb[i] : i;
    size_t ra = (size_t)i * a->Tmax, rb = (size_t)j * b->Tmax;
    if (a->response_len[i] != b->response_len[j] || a->eos[i] != b->eos[j] || a->prompt_len[i] != b->prompt_len[j])
      return snprintf(why, len, "request %d: length %d/%d eos %d/%d", i, a->response_len[i], b->response_len[j], a->eos[i], b->eos[j]), PETSC_FALSE;
    if (memcmp(a->tokens + ra, b->tokens + rb, (size_t)a->Tmax * sizeof(int))) return snprintf(why, len, "request %d: tokens differ", i), PETSC_FALSE;
    for (int t = 0; t < a->Tmax; t++) *lperr = PetscMax(*lperr, fabs(a->logprobs[ra + t] - b->logprobs[rb + t]));
    if (!a->mask_off != !b->mask_off) return snprintf(why, len, "one batch has masks"), PETSC_FALSE;
    for (int t = 0; a->mask_off && t < a->Tmax; t++) {
      int na = a->mask_off[ra + t + 1] - a->mask_off[ra + t], nb = b->mask_off[rb + t + 1] - b->mask_off[rb + t];
      if (na != nb || (na && memcmp(a->mask_ids + a->mask_off[ra + t], b->mask_ids + b->mask_off[rb + t], (size_t)na * sizeof(int))))
        return snprintf(why, len, "request %d position %d: allowed sets differ (%d vs %d ids)", i, t, na, nb), PETSC_FALSE;
    }
  }
  snprintf(why, len, "identical");
  return PETSC_TRUE;
}

static void batch_stats(const GenBatch *b, int *neos, int *nlen)
{
  int seen[64] = {0};
  *neos = *nlen = 0;
  for (int i = 0; i < b->n; i++) {
    *neos += b->eos[i];
    if (b->response_len[i] < 64 && !seen[b->response_len[i]]++) (*nlen)++;
  }
}

static PetscErrorCode test_equivalence(Fixture *f, const GenConfig *cfg, const char *what)
{
  const int slots[3] = {4, 1, NREQ + 3};
  int       rev[NREQ], inv[NREQ], neos, nlen, maxactive = 0;
  GenBatch  ref, b;
  GenConfig c = *cfg;
  double    err;
  char      why[160], name[160];
  PetscBool ok;

  PetscFunctionBegin;
  for (int i = 0; i < NREQ; i++) rev[i] = NREQ - 1 - i, inv[NREQ - 1 - i] = i;
  c.slots = slots[0];
  PetscCall(run_gen(f, &c, NULL, &ref, NULL));
  for (int s = 0; s < ref.nsteps; s++) maxactive = PetscMax(maxactive, ref.step_active[s]);
  batch_stats(&ref, &neos, &nlen);
  PetscCall(PetscSNPrintf(name, sizeof name, "%s: the run exercises continuous batching", what));
  test_measure(neos > 0 && neos < NREQ && nlen >= 3 && maxactive == 4, name, "%d of %d end with EOS, %d distinct response lengths, %d steps, at most %d active", neos, NREQ, nlen, ref.nsteps, maxactive);
  for (int k = 1; k < 3; k++) {
    c.slots = slots[k];
    PetscCall(run_gen(f, &c, NULL, &b, NULL));
    ok = same_results(&ref, &b, NULL, &err, why, sizeof why);
    PetscCall(PetscSNPrintf(name, sizeof name, "%s: slots %d equals slots 4", what, slots[k]));
    test_measure(ok && err <= 1e-5, name, "%s, max |dlogprob| %.3g, %d steps", why, err, b.nsteps);
    PetscCall(gen_batch_destroy(&b));
  }
  { /* the slots are drawn in parallel: 1 thread and 4 give the same */
    int nt = omp_get_max_threads();

    c.slots = slots[0];
    omp_set_num_threads(nt == 1 ? 4 : 1);
    PetscCall(run_gen(f, &c, NULL, &b, NULL));
    omp_set_num_threads(nt);
    ok = same_results(&ref, &b, NULL, &err, why, sizeof why);
    PetscCall(PetscSNPrintf(name, sizeof name, "%s: slots 4 drawn on %d thread(s) equal %d", what, nt == 1 ? 4 : 1, nt));
    test_measure(ok && err == 0, name, "%s, max |dlogprob| %.3g", why, err);
    PetscCall(gen_batch_destroy(&b));
  }
  c.slots = 3;
  PetscCall(run_gen(f, &c, rev, &b, NULL));
  ok = same_results(&ref, &b, inv, &err, why, sizeof why);
  PetscCall(PetscSNPrintf(name, sizeof name, "%s: reversed requests with slots 3 give the same results per sample id", what));
  test_measure(ok && err <= 1e-5, name, "%s, max |dlogprob| %.3g", why, err);
  PetscCall(gen_batch_destroy(&b));
  PetscCall(gen_batch_destroy(&ref));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* One engine and batch serve many generations: a second call into the same
 * batch, and a call into a fresh batch, equal a fresh engine's results;
 * another iteration number gives other tokens. */
static PetscErrorCode test_reuse(Fixture *f, const GenConfig *cfg, const char *what)
{
  GenEngine *eng;
  GenBatch   ref, a, b;
  int        Tmax = f->maxp + (int)cfg->max_new_tokens, ndiff = 0;
  double     e1, e2;
  char       w1[160], w2[160], name[160];
  PetscBool  ok1, ok2;

  PetscFunctionBegin;
  PetscCall(run_gen(f, cfg, NULL, &ref, NULL));
  PetscCall(gen_engine_create(f->lm, cfg, f->maxp, &eng));
  PetscCall(gen_batch_create(f->n, Tmax, gen_masked(cfg), &a));
  PetscCall(gen_batch_create(f->n, Tmax, gen_masked(cfg), &b));
  PetscCall(gen_generate(eng, 1234, 8, f->n, f->req, &a, NULL, NULL));
  for (int i = 0; i < f->n; i++) ndiff += memcmp(a.tokens + (size_t)i * Tmax, ref.tokens + (size_t)i * Tmax, (size_t)Tmax * sizeof(int)) != 0;
  PetscCall(gen_generate(eng, 1234, 7, f->n, f->req, &b, NULL, NULL));
  PetscCall(gen_generate(eng, 1234, 7, f->n, f->req, &a, NULL, NULL));
  ok1 = same_results(&ref, &a, NULL, &e1, w1, sizeof w1);
  ok2 = same_results(&ref, &b, NULL, &e2, w2, sizeof w2);
  PetscCall(PetscSNPrintf(name, sizeof name, "%s: a reused engine and batch give the fresh results", what));
  test_measure(ok1 && ok2 && e1 <= 1e-5 && e2 <= 1e-5, name, "reused batch: %s; fresh batch: %s", w1, w2);
  PetscCall(PetscSNPrintf(name, sizeof name, "%s: another iteration number draws other tokens", what));
  test_measure(ndiff > f->n / 2, name, "%d of %d sequences differ", ndiff, f->n);
  PetscCall(gen_batch_destroy(&a));
  PetscCall(gen_batch_destroy(&b));
  PetscCall(gen_batch_destroy(&ref));
  PetscCall(gen_engine_destroy(&eng));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* A sample that goes on (GenRequest.resumed, .budget: partial rollouts):
 * S new tokens at most, then the rest from its prompt and those tokens in a
 * second call with the same key, gives the tokens of one uninterrupted call
 * (log-probabilities within the prefill's rounding); the budget stops a
 * sample without EOS, and min_new_tokens counts the resumed tokens. */
static PetscErrorCode test_resume(Fixture *f, const GenConfig *cfg, int S, const char *what)
{
  GenEngine *eng;
  GenBatch   ref, a, b;
  GenRequest req[NREQ], more[NREQ];
  int        Tmax = f->maxp + (int)cfg->max_new_tokens, at[NREQ], n2 = 0, bad = 0, stopped = 0;
  double     err = 0;

  PetscFunctionBegin;
  PetscCall(run_gen(f, cfg, NULL, &ref, NULL));
  PetscCall(gen_engine_create(f->lm, cfg, f->maxp, &eng));
  PetscCall(gen_batch_create(f->n, Tmax, gen_masked(cfg), &a));
  for (int i = 0; i < f->n; i++) req[i] = f->req[i], req[i].budget = S;
  PetscCall(gen_generate(eng, 1234, 7, f->n, req, &a, NULL, NULL));
  for (int i = 0; i < f->n; i++) {
    bad += a.response_len[i] > S || (a.response_len[i] < S && !a.eos[i]);
    if (a.eos[i] || a.response_len[i] == cfg->max_new_tokens) continue;
    more[n2] = (GenRequest){f->req[i].id, a.tokens + (size_t)i * Tmax, a.prompt_len[i] + a.response_len[i], a.response_len[i], 0};
    at[n2++] = i;
  }
  stopped = n2;
  PetscCall(gen_batch_create(PetscMax(n2, 1), Tmax, gen_masked(cfg), &b));
  b.n = n2;
  PetscCall(gen_generate(eng, 1234, 7, n2, more, &b, NULL, NULL));
  for (int j = 0; j < n2; j++) { /* the second call's tokens after the first's */
    int    i = at[j], P = b.prompt_len[j], L = b.response_len[j];
    size_t ra = (size_t)i * Tmax;
    PetscCall(PetscArraycpy(a.tokens + ra + P, b.tokens + (size_t)j * Tmax + P, L));
    for (int t = P; t < P + L; t++) a.logprobs[ra + t] = b.logprobs[(size_t)j * Tmax + t];
    a.response_len[i] += L, a.eos[i] = b.eos[j];
  }
  for (int i = 0; i < f->n; i++) {
    size_t r = (size_t)i * Tmax;
    bad += a.response_len[i] != ref.response_len[i] || a.eos[i] != ref.eos[i] || memcmp(a.tokens + r, ref.tokens + r, (size_t)Tmax * sizeof(int));
    for (int t = 0; t < Tmax; t++) err = PetscMax(err, fabs(a.logprobs[r + t] - ref.logprobs[r + t]));
  }
  test_measure(bad == 0 && err <= 1e-5 && stopped > 0, what, "%d of %d stopped by the budget %d and went on; %d rows differ from one call, max |dlogprob| %.3g", stopped, f->n, S, bad, err);
  PetscCall(gen_batch_destroy(&a));
  PetscCall(gen_batch_destroy(&b));
  PetscCall(gen_batch_destroy(&ref));
  PetscCall(gen_engine_destroy(&eng));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Stop conditions and bookkeeping of one run. */
static PetscErrorCode test_stops(Fixture *f, const GenConfig *cfg, const char *what)
{
  GenBatch  b;
  FinishLog log;
  int       bad_len = 0, bad_eos = 0, early = 0, bad_tail = 0, bad_calls = 0, bad_masks = 0, sum_active = 0;
  long long sum = 0;
  char      name[160];

  PetscFunctionBegin;
  PetscCall(run_gen(f, cfg, NULL, &b, &log));
  for (int i = 0; i < b.n; i++) {
    int        P = b.prompt_len[i], L = b.response_len[i];
    const int *row = b.tokens + (size_t)i * b.Tmax;
    int        chk = 0;
    sum += L;
    bad_len += L < 1 || L > cfg->max_new_tokens || (!b.eos[i] && L != cfg->max_new_tokens);
    bad_eos += b.eos[i] != (row[P + L - 1] == cfg->eos);
    for (int t = P; t < P + L - 1; t++) bad_eos += row[t] == cfg->eos;
    early += b.eos[i] && L <= cfg->min_new_tokens;
    for (int t = P + L; t < b.Tmax; t++) bad_tail += row[t] != 0 || b.logprobs[(size_t)i * b.Tmax + t] != 0;
    for (int t = 0; t < P; t++) bad_tail += b.logprobs[(size_t)i * b.Tmax + t] != 0 || row[t] != f->prompts[i][t];
    bad_calls += log.calls[i] != 1 || log.resp[i] != L;
    for (int t = P; b.mask_off && t < P + L; t++) {
      size_t k = (size_t)i * b.Tmax + t;
      for (int j = b.mask_off[k]; j < b.mask_off[k + 1]; j++) chk += (t + 1) * (b.mask_ids[j] + 1);
    }
    bad_masks += chk != log.ids_ok[i];
  }
  for (int s = 0; s < b.nsteps; s++) sum_active += b.step_active[s];
  PetscCall(PetscSNPrintf(name, sizeof name, "%s: stop at EOS (included) or max_new_tokens %" PetscInt_FMT, what, cfg->max_new_tokens));
  test_measure(!bad_len && !bad_eos, name, "%d bad lengths, %d EOS flags/positions wrong", bad_len, bad_eos);
  PetscCall(PetscSNPrintf(name, sizeof name, "%s: no EOS before min_new_tokens %" PetscInt_FMT, what, cfg->min_new_tokens));
  test_measure(!early, name, "%d samples ended with EOS too early", early);
  PetscCall(PetscSNPrintf(name, sizeof name, "%s: prompt kept, zeros past the end, counters agree", what));
  test_measure(!bad_tail && sum == b.new_tokens && sum == sum_active && b.seconds > 0, name, "%d bad entries; new_tokens %lld, sum of lengths %lld, sum over steps %d", bad_tail, b.new_tokens, sum, sum_active);
  PetscCall(PetscSNPrintf(name, sizeof name, "%s: on_finish once per sample, allowed sets already final", what));
  test_measure(!bad_calls && !bad_masks, name, "%d wrong calls, %d samples whose sets changed after the callback; order %s", bad_calls, bad_masks, log.order);
  PetscCall(gen_batch_destroy(&b));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* The recorded logprobs against model_logprobs_dist over the full sequences:
 * forward row (i, r) predicts the token at position r+1. */
static PetscErrorCode test_logprob_consistency(Fixture *f, const GenConfig *cfg, const char *what)
{
  GenBatch     b;
  int          T, N, *target, *off = NULL, *ids = NULL, ntgt = 0;
  float       *lp;
  double       err = 0;
  ModelTokenDist dist;
  char         name[160];

  PetscFunctionBegin;
  PetscCall(run_gen(f, cfg, NULL, &b, NULL));
  T = b.Tmax;
  N = b.n * T;
  PetscCall(PetscMalloc2(N, &target, N, &lp));
  for (int i = 0; i < b.n; i++)
    for (int r = 0; r < T; r++) {
      int t = r + 1;
      target[i * T + r] = t >= b.prompt_len[i] && t < b.prompt_len[i] + b.response_len[i] ? b.tokens[i * T + t] : -1;
      ntgt += target[i * T + r] >= 0;
    }
  dist.inv_temp = (float)(1.0 / cfg->temperature);
  dist.mask_off = dist.mask_ids = NULL;
  if (b.mask_off) {
    int run = 0;
    PetscCall(PetscMalloc2(N + 1, &off, b.mask_off[N] + 1, &ids));
    for (int i = 0; i < b.n; i++)
      for (int r = 0; r < T; r++) {
        size_t k = (size_t)i * T + r + 1;
        off[i * T + r] = run;
        for (int j = r + 1 < T ? b.mask_off[k] : 0; r + 1 < T && j < b.mask_off[k + 1]; j++) ids[run++] = b.mask_ids[j];
      }
    off[N]        = run;
    dist.mask_off = off;
    dist.mask_ids = ids;
  }
  PetscCall(model_forward(f->lm, b.tokens, b.n, T));
  PetscCall(model_logprobs_dist(f->lm, target, &dist, lp, NULL));
  for (int i = 0; i < b.n; i++)
    for (int r = 0; r < T; r++)
      if (target[i * T + r] >= 0) err = PetscMax(err, fabs(lp[i * T + r] - b.logprobs[i * T + r + 1]));
  PetscCall(PetscSNPrintf(name, sizeof name, "%s: recorded logprobs equal model_logprobs_dist on the full sequences", what));
  test_measure(err <= 1e-4 && ntgt == b.new_tokens, name, "max |diff| %.3g over %d response tokens", err, ntgt);
  if (off) PetscCall(PetscFree2(off, ids));
  PetscCall(PetscFree2(target, lp));
  PetscCall(gen_batch_destroy(&b));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* The sets of a full-length run (EOS banned at every response position,
 * nothing else cutting) are recorded as one entry each, tensor_set_but(eos),
 * not V-1 ids; the model's log-probabilities under them equal those under
 * the explicit lists of the same V-1 ids bit for bit, and the recorded ones. */
static PetscErrorCode test_full_length_sets(Fixture *f, const GenConfig *cfg, const char *what)
{
  GenBatch       b;
  int            T, N, V = f->lm->cfg.vocab_size, *target, *off[2], *ids[2], nbut = 0, nother = 0;
  float         *lp[2];
  double         err = 0;
  ModelTokenDist dist;
  char           name[160];

  PetscFunctionBegin;
  PetscCall(run_gen(f, cfg, NULL, &b, NULL));
  T = b.Tmax, N = b.n * T;
  for (int i = 0; i < b.n; i++)
    for (int t = b.prompt_len[i]; t < b.prompt_len[i] + b.response_len[i]; t++) {
      size_t k = (size_t)i * T + t;
      if (b.mask_off[k + 1] - b.mask_off[k] == 1 && b.mask_ids[b.mask_off[k]] == tensor_set_but((int)cfg->eos)) nbut++;
      else nother++;
    }
  PetscCall(PetscSNPrintf(name, sizeof name, "%s: one entry, every id but EOS, per response token", what));
  test_measure(nbut == b.new_tokens && !nother && b.mask_off[N] == nbut, name, "%d of %lld response tokens recorded as tensor_set_but(%d), %d otherwise, %d ids in all", nbut,
               b.new_tokens, (int)cfg->eos, nother, b.mask_off[N]);

  /* forward row (i, r) predicts position r+1: its set, compact (w 0) or expanded (w 1) */
  PetscCall(PetscMalloc3(N, &target, N, &lp[0], N, &lp[1]));
  for (int w = 0; w < 2; w++) PetscCall(PetscMalloc2(N + 1, &off[w], (size_t)N * V + 1, &ids[w]));
  for (int w = 0; w < 2; w++) {
    int run = 0;
    for (int i = 0; i < b.n; i++)
      for (int r = 0; r < T; r++) {
        int t = r + 1;
        target[i * T + r] = t >= b.prompt_len[i] && t < b.prompt_len[i] + b.response_len[i] ? b.tokens[i * T + t] : -1;
        off[w][i * T + r] = run;
        if (target[i * T + r] < 0) continue;
        for (int j = b.mask_off[(size_t)i * T + t]; j < b.mask_off[(size_t)i * T + t + 1]; j++) {
          int e = tensor_set_excluded(b.mask_ids + j, 1);
          if (w == 0 || e < 0) ids[w][run++] = b.mask_ids[j];
          else
            for (int v = 0; v < V; v++)
              if (v != e) ids[w][run++] = v;
        }
      }
    off[w][N] = run;
    dist      = (ModelTokenDist){(float)(1.0 / cfg->temperature), off[w], ids[w]};
    PetscCall(model_forward(f->lm, b.tokens, b.n, T));
    PetscCall(model_logprobs_dist(f->lm, target, &dist, lp[w], NULL));
  }
  for (int n = 0; n < N; n++)
    if (target[n] >= 0) err = PetscMax(err, fabs(lp[0][n] - b.logprobs[n + 1]));
  PetscCall(PetscSNPrintf(name, sizeof name, "%s: log-probabilities under the compact sets equal the explicit V-1 ids' bits and the recorded ones", what));
  test_measure(!memcmp(lp[0], lp[1], (size_t)N * sizeof(float)) && err <= 1e-4, name, "compact vs explicit %s; max |recorded - model| %.3g (%d vs %d ids)",
               memcmp(lp[0], lp[1], (size_t)N * sizeof(float)) ? "DIFFER" : "bitwise", err, off[0][N], off[1][N]);
  for (int w = 0; w < 2; w++) PetscCall(PetscFree2(off[w], ids[w]));
  PetscCall(PetscFree3(target, lp[0], lp[1]));
  PetscCall(gen_batch_destroy(&b));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode test_engine(const Backend *be)
{
  Fixture   f;
  GenConfig plain = base_config(), masked = base_config(), full = base_config();

  PetscFunctionBegin;
  PetscCall(fixture_create(be, &f));
  plain.temperature = 0.8;
  masked.top_k = 6, masked.top_p = 0.9, masked.min_new_tokens = 3, masked.temperature = 1.3;
  full.min_new_tokens = full.max_new_tokens = 10;
  PetscCall(test_equivalence(&f, &plain, "temperature 0.8"));
  PetscCall(test_equivalence(&f, &masked, "top-k 6, top-p 0.9, min_new 3, T 1.3"));
  PetscCall(test_reuse(&f, &masked, "top-k/top-p/min_new"));
  PetscCall(test_resume(&f, &plain, 3, "temperature 0.8: at most 3 tokens, then resumed, equals one call"));
  PetscCall(test_resume(&f, &masked, 2, "top-k/top-p/min_new 3: at most 2 tokens, then resumed (EOS still banned), equals one call"));
  PetscCall(test_stops(&f, &plain, "temperature 0.8"));
  PetscCall(test_stops(&f, &masked, "top-k/top-p/min_new"));
  PetscCall(test_stops(&f, &full, "min_new = max_new 10"));
  PetscCall(test_logprob_consistency(&f, &plain, "temperature 0.8, no mask"));
  PetscCall(test_logprob_consistency(&f, &masked, "top-k 6, top-p 0.9, min_new 3, T 1.3"));
  full.temperature = 0.8;
  PetscCall(test_full_length_sets(&f, &full, "min_new = max_new 10, T 0.8"));
  PetscCall(model_destroy(&f.lm));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* ---- batch invariance, prefill included --------------------------------- */
#define BI_N      64 /* requests: the target and 63 others */
#define BI_MAXP   24
#define BI_TARGET 37 /* with 16 slots it enters late, at a slot freed by another */

/* One generation of requests [first, first+n) of the 64 with the given slots
 * and threads; the target's row goes to tok/lp (its prompt and response). */
static PetscErrorCode bi_run(Model *lm, const GenConfig *cfg, const GenRequest *req, int first, int n, int slots, int threads, int *tok, float *lp, int *len)
{
  GenEngine *eng;
  GenBatch   b;
  GenConfig  c = *cfg;
  int        nt = omp_get_max_threads(), i = BI_TARGET - first, T = BI_MAXP + (int)cfg->max_new_tokens;

  PetscFunctionBegin;
  c.slots = slots;
  omp_set_num_threads(threads);
  PetscCall(gen_batch_create(n, T, gen_masked(&c), &b));
  PetscCall(gen_engine_create(lm, &c, BI_MAXP, &eng));
  PetscCall(gen_generate(eng, 1234, 7, n, req + first, &b, NULL, NULL));
  omp_set_num_threads(nt);
  PetscCall(PetscArraycpy(tok, b.tokens + (size_t)i * T, T));
  for (int t = 0; t < T; t++) lp[t] = b.logprobs[(size_t)i * T + t];
  *len = b.response_len[i];
  PetscCall(gen_engine_destroy(&eng));
  PetscCall(gen_batch_destroy(&b));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* A prompt generated alone (one slot) and among 63 others of lengths 1..24
 * (64 slots: one prefill of every prompt, 1,000 rows and more; 16 slots:
 * continuous batching admits it later, at another slot, beside decode
 * rows), on 1 and 2 threads, with -gen_batch_invariant (the cached
 * forward's matmuls row-wise): the same tokens and log-probabilities, bit
 * for bit. Without it a prefill of more than 32 rows (4 for GPT-2) goes
 * through sgemm and the log-probabilities move in their last bits. */
static PetscErrorCode test_batch_invariance(const Backend *be, const ModelConfig *mc, const char *what)
{
  const int  slots[3] = {1, BI_N, 16}, threads[2] = {1, 2};
  Model     *lm;
  GenConfig  cfg = base_config();
  GenRequest req[BI_N];
  int        prompts[BI_N][BI_MAXP], T, len[6], *tok;
  float     *lp;
  char       name[200];

  PetscFunctionBegin;
  cfg.temperature    = 0.9;
  cfg.max_new_tokens = 12;
  T                  = BI_MAXP + (int)cfg.max_new_tokens;
  PetscCall(model_create(mc, be, &lm));
  PetscCall(perturbed_params(lm, 9));
  for (int i = 0; i < BI_N; i++) {
    int L = 1 + (int)(rng_u32(13, (uint32_t)i, 1, 0, 0) % BI_MAXP);
    for (int t = 0; t < L; t++) prompts[i][t] = 4 + (int)(rng_u32(13, (uint32_t)i, 0, (uint32_t)t, 0) % (uint32_t)(mc->vocab_size - 4));
    req[i] = (GenRequest){.id = 1000 + 3 * i, .prompt = prompts[i], .prompt_len = L};
  }
  PetscCall(PetscMalloc2(6 * T, &tok, 6 * T, &lp));
  cfg.batch_invariant = PETSC_TRUE;
  for (int k = 0; k < 6; k++) {
    int s = k % 3, th = threads[k / 3];
    PetscCall(bi_run(lm, &cfg, req, s ? 0 : BI_TARGET, s ? BI_N : 1, slots[s], th, tok + k * T, lp + k * T, &len[k]));
  }
  { /* the option leaves training's forward as it was: its logits the same bits with it on and off */
    int    B = 8, Tt = 40, *tk;
    float *l0, *l1;
    size_t n = (size_t)B * Tt * mc->vocab_size;
    PetscCall(PetscMalloc3((size_t)B * Tt, &tk, n, &l0, n, &l1));
    for (int q = 0; q < B * Tt; q++) tk[q] = (int)(rng_u32(29, (uint32_t)q, 0, 0, 0) % (uint32_t)mc->vocab_size);
    PetscCall(model_cached_batch_invariant(lm, PETSC_TRUE));
    PetscCall(model_forward(lm, tk, B, Tt));
    PetscCall(be->to_host(l0, model_logits(lm), n * sizeof(float)));
    PetscCall(model_cached_batch_invariant(lm, PETSC_FALSE));
    PetscCall(model_forward(lm, tk, B, Tt));
    PetscCall(be->to_host(l1, model_logits(lm), n * sizeof(float)));
    test_measure(!memcmp(l0, l1, n * sizeof(float)), "training forward", "%s: %d x %d tokens' logits the same bits with the option on and off (sgemm either way)", what, B, Tt);
    PetscCall(PetscFree3(tk, l0, l1));
  }
  for (int k = 1; k < 6; k++) {
    double err = 0;
    int    ntok = memcmp(tok, tok + k * T, (size_t)T * sizeof(int)) != 0, nlp = 0;
    for (int t = 0; t < T; t++) {
      nlp += memcmp(&lp[t], &lp[k * T + t], sizeof(float)) != 0;
      err = PetscMax(err, fabs((double)lp[t] - lp[k * T + t]));
    }
    if (k % 3) PetscCall(PetscSNPrintf(name, sizeof name, "%s: prompt %d (%d tokens) among %d with %d slots on %d thread(s) equals it alone on 1 thread, bit for bit", what, BI_TARGET,
                                       req[BI_TARGET].prompt_len, BI_N, slots[k % 3], threads[k / 3]));
    else PetscCall(PetscSNPrintf(name, sizeof name, "%s: prompt %d alone on %d threads equals it alone on 1 thread, bit for bit", what, BI_TARGET, threads[k / 3]));
    test_measure(!ntok && !nlp && len[k] == len[0] && len[0] > 1, name, "tokens %s, %d of %d log-probabilities differ (max %.3g), %d new tokens", ntok ? "differ" : "equal", nlp, T, err,
                 len[k]);
  }
  PetscCall(PetscFree2(tok, lp));
  PetscCall(model_destroy(&lm));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* ---- prompts shared by a group ------------------------------------------ */
/* 4 prompts, each requested by a group of 6 samples (GRPO's layout), on 8
 * slots: with -gen_share_prompts a group admitted together prefills its
 * prompt once and its other samples copy the keys and values. With
 * -gen_batch_invariant the prompt's rows give the same bits in
 * any company, so sharing must change nothing: the same tokens,
 * log-probabilities and allowed sets as without sharing and as one sample
 * at a time; and the forward ran fewer prompt rows. */
static PetscErrorCode test_shared_prompts(const Backend *be, const ModelConfig *mc, const char *what)
{
  enum { G = 6, NP = 4, N = G * NP };
  Model     *lm;
  GenConfig  cfg = base_config(), c;
  GenRequest req[N];
  GenBatch   b[3];
  int        prompts[NP][BI_MAXP], len[NP] = {5, 17, 1, 9}, slots[3] = {8, 8, 1};
  PetscBool  share[3] = {PETSC_TRUE, PETSC_FALSE, PETSC_TRUE};
  long long  rows_all = 0;
  double     lperr = 0;
  char       why[256];

  PetscFunctionBegin;
  cfg.temperature     = 1.1;
  cfg.max_new_tokens  = 10;
  cfg.min_new_tokens  = 2; /* restricted sets too */
  cfg.batch_invariant = PETSC_TRUE;
  PetscCall(model_create(mc, be, &lm));
  PetscCall(perturbed_params(lm, 21));
  for (int p = 0; p < NP; p++)
    for (int t = 0; t < len[p]; t++) prompts[p][t] = 4 + (int)(rng_u32(23, (uint32_t)p, 0, (uint32_t)t, 0) % (uint32_t)(mc->vocab_size - 4));
  for (int i = 0; i < N; i++) {
    req[i] = (GenRequest){.id = 500 + i, .prompt = prompts[i / G], .prompt_len = len[i / G]};
    rows_all += len[i / G];
  }
  for (int k = 0; k < 3; k++) {
    GenEngine *eng;
    c               = cfg;
    c.slots         = slots[k];
    c.share_prompts = share[k];
    PetscCall(gen_batch_create(N, BI_MAXP + (int)c.max_new_tokens, gen_masked(&c), &b[k]));
    PetscCall(gen_engine_create(lm, &c, BI_MAXP, &eng));
    PetscCall(gen_generate(eng, 77, 2, N, req, &b[k], NULL, NULL));
    PetscCall(gen_engine_destroy(&eng));
  }
  test_measure(same_results(&b[0], &b[1], NULL, &lperr, why, sizeof why) && lperr == 0, "shared prompts",
               "%s: 4 groups of 6 on 8 slots, prompts shared or not, the same bits (%s, log-probability difference %.3g)", what, why, lperr);
  test_measure(same_results(&b[0], &b[2], NULL, &lperr, why, sizeof why) && lperr == 0, "shared prompts",
               "%s: shared on 8 slots against one sample at a time, the same bits (%s, log-probability difference %.3g)", what, why, lperr);
  test_measure(b[1].prompt_rows == rows_all && b[2].prompt_rows == rows_all && b[0].prompt_rows < rows_all, "shared prompts",
               "%s: prompt rows run: %lld shared, %lld not, %lld one at a time (all prompts: %lld)", what, b[0].prompt_rows, b[1].prompt_rows, b[2].prompt_rows, rows_all);
  for (int k = 0; k < 3; k++) PetscCall(gen_batch_destroy(&b[k]));
  PetscCall(model_destroy(&lm));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* ---- configuration and argument errors ---------------------------------- */
static PetscErrorCode expect_error(PetscErrorCode ierr, const char *msg, const char *want1, const char *want2, const char *name)
{
  PetscFunctionBegin;
  test_measure(ierr != 0 && strstr(msg, want1) && (!want2 || strstr(msg, want2)) ? PETSC_TRUE : PETSC_FALSE, name, "error %d, message \"%s\"", (int)ierr, msg);
  PetscFunctionReturn(PETSC_SUCCESS);
}

#define TRY(call)                                                   \
  do {                                                              \
    msg[0] = '\0';                                                  \
    PetscCall(PetscPushErrorHandler(test_capture_error, msg));           \
    ierr = (call);                                                  \
    PetscCall(PetscPopErrorHandler());                              \
  } while (0)

static PetscErrorCode test_config(const Backend *be)
{
  ModelConfig    model = {.n_layer = 2, .n_head = 2, .n_embd = 32, .vocab_size = 10, .n_positions = 40, .head = MODEL_HEAD_LM};
  GenConfig      cfg, c;
  PetscErrorCode ierr;
  char           msg[TEST_MESSAGE_MAX];
  size_t         kv;

  PetscFunctionBegin;
  PetscCall(PetscOptionsSetValue(NULL, "-gen_top_k", "5"));
  PetscCall(PetscOptionsSetValue(NULL, "-gen_greedy", "true"));
  PetscCall(gen_config_set_from_options(&cfg));
  PetscCall(PetscOptionsClearValue(NULL, "-gen_top_k"));
  PetscCall(PetscOptionsClearValue(NULL, "-gen_greedy"));
  test_measure(cfg.top_k == 5 && cfg.greedy && cfg.temperature == 1.0 && cfg.top_p == 1.0 && cfg.max_new_tokens == 32 && cfg.min_new_tokens == 0 && cfg.slots == 16 &&
           cfg.kv_mb == 1024 && cfg.eos == 3, "options: -gen_top_k 5 -gen_greedy read, defaults otherwise", "top_k %d greedy %d max_new %d slots %d eos %d", (int)cfg.top_k, (int)cfg.greedy, (int)cfg.max_new_tokens, (int)cfg.slots, (int)cfg.eos);
  {
    GenConfig k = base_config(), p = base_config(), m = base_config(), g = base_config();
    k.top_k = 5, p.top_p = 0.9, m.min_new_tokens = 1, g.greedy = PETSC_TRUE, g.temperature = 0.5;
    c = base_config();
    test_measure(!gen_masked(&c) && !gen_masked(&g) && gen_masked(&k) && gen_masked(&p) && gen_masked(&m), "gen_masked is true exactly for top-k, top-p or min_new_tokens", NULL);
  }
  c  = base_config();
  kv = gen_kv_bytes(&c, &model, 28);
  test_measure(kv == 2 * 2 * 4 * 28 * 32 * 4, "gen_kv_bytes = 2 n_layer slots Tmax n_embd 4 bytes", "%zu bytes", kv);

  cfg                = base_config();
  cfg.max_new_tokens = 32;
  TRY(gen_config_check(&cfg, &model, "actor_", 27));
  PetscCall(expect_error(ierr, msg, "-gen_max_new_tokens 32 plus the longest prompt (27 tokens) exceeds -actor_n_positions 40", NULL, "config: prompt + max_new > n_positions"));
  cfg       = base_config();
  cfg.kv_mb = 0.01;
  TRY(gen_config_check(&cfg, &model, "actor_", 12));
  PetscCall(expect_error(ierr, msg, "-gen_kv_mb 0.01", "raise -gen_kv_mb", "config: KV cache bound too small for one slot"));
  cfg       = base_config();
  cfg.kv_mb = 0.03; /* 14 KiB per slot of 28 positions: 2 of the 4 slots fit */
  TRY(gen_config_check(&cfg, &model, "actor_", 12));
  PetscCall(expect_error(ierr, msg, "-gen_kv_mb 0.03", "use -gen_slots 2 or fewer", "config: KV cache bound too small for the slots"));
  cfg             = base_config();
  cfg.temperature = 0;
  TRY(gen_config_check(&cfg, &model, "actor_", 12));
  PetscCall(expect_error(ierr, msg, "-gen_temperature 0", NULL, "config: temperature 0"));
  cfg       = base_config();
  cfg.top_p = 0;
  TRY(gen_config_check(&cfg, &model, "actor_", 12));
  PetscCall(expect_error(ierr, msg, "-gen_top_p 0", NULL, "config: top_p 0"));
  cfg       = base_config();
  cfg.top_k = 11;
  TRY(gen_config_check(&cfg, &model, "actor_", 12));
  PetscCall(expect_error(ierr, msg, "-gen_top_k 11", "-actor_vocab_size 10", "config: top_k above the vocabulary"));
  cfg                = base_config();
  cfg.min_new_tokens = 17;
  TRY(gen_config_check(&cfg, &model, "actor_", 12));
  PetscCall(expect_error(ierr, msg, "-gen_min_new_tokens 17", NULL, "config: min_new above max_new"));
  cfg     = base_config();
  cfg.eos = 10;
  TRY(gen_config_check(&cfg, &model, "actor_", 12));
  PetscCall(expect_error(ierr, msg, "-gen_eos 10", NULL, "config: eos outside the vocabulary"));
  cfg = base_config();
  TRY(gen_config_check(&cfg, &model, "actor_", 24));
  test_measure(ierr == 0, "config: prompt 24 + max_new 16 = n_positions 40 is accepted", "%s", msg);

  {
    Model     *lm;
    GenEngine *eng = NULL;
    GenBatch   b;
    int        prompt[2] = {1, 2};
    GenRequest req       = {.id = 0, .prompt = prompt, .prompt_len = 3};

    model.head = MODEL_HEAD_SCALAR;
    PetscCall(model_create(&model, be, &lm));
    TRY(gen_engine_create(lm, &cfg, 4, &eng));
    PetscCall(expect_error(ierr, msg, "LM head", NULL, "engine: a scalar-head model is rejected"));
    PetscCall(model_destroy(&lm));
    model.head = MODEL_HEAD_LM;
    PetscCall(model_create(&model, be, &lm));
    PetscCall(gen_engine_create(lm, &cfg, 2, &eng));
    PetscCall(gen_batch_create(1, 2 + (int)cfg.max_new_tokens, PETSC_FALSE, &b));
    TRY(gen_generate(eng, 1, 0, 1, &req, &b, NULL, NULL));
    PetscCall(expect_error(ierr, msg, "prompt of 3 tokens", NULL, "engine: a prompt longer than max_prompt_len is rejected"));
    req.prompt_len = 0;
    TRY(gen_generate(eng, 1, 0, 1, &req, &b, NULL, NULL));
    PetscCall(expect_error(ierr, msg, "prompt of 0 tokens", NULL, "engine: an empty prompt is rejected"));
    PetscCall(gen_batch_destroy(&b));
    PetscCall(gen_engine_destroy(&eng));
    PetscCall(model_destroy(&lm));
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

int main(int argc, char **argv)
{
  const Backend *be;

  PetscCall(PetscInitialize(&argc, &argv, NULL, help));
  PetscCall(backend_get("cpu", &be));
  test_sampler_sets();
  test_sampler_min_new_temp_greedy();
  test_sampler_draws();
  test_sampler_nonfinite();
  PetscCall(test_sampler_large());
  PetscCall(test_sampler_chunked());
  PetscCall(test_sample_op());
  PetscCall(test_engine(be));
  {
    ModelConfig gpt2 = {.n_layer = 2, .n_head = 2, .n_embd = 32, .vocab_size = 24, .n_positions = 40, .head = MODEL_HEAD_LM};
    ModelConfig llama = {.n_layer = 2, .n_head = 4, .n_kv_head = 2, .n_embd = 64, .n_ffn = 96, .vocab_size = 24, .n_positions = 40, .head = MODEL_HEAD_LM,
                         .arch = MODEL_ARCH_LLAMA, .tie_embeddings = PETSC_TRUE, .rope_theta = 10000, .norm_eps = 1e-5};
    PetscCall(test_batch_invariance(be, &gpt2, "-gen_batch_invariant, GPT-2"));
    PetscCall(test_batch_invariance(be, &llama, "-gen_batch_invariant, LLaMA"));
    PetscCall(test_shared_prompts(be, &gpt2, "GPT-2"));
    PetscCall(test_shared_prompts(be, &llama, "LLaMA"));
  }
  PetscCall(test_config(be));
  PetscCall(PetscFinalize());
  return test_tally();
}
