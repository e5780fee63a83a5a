/* The host sampler, the reference of Backend.sample (test_gen: the cpu op
 * gives exactly its bits; test_cuda: the cuda op's tokens). One draw from
 * one row of logits. The restrictions apply in
 * the order Hugging Face's generate applies them (temperature, the EOS ban
 * of min_new_tokens, top-k, then top-p over what top-k left, renormalised),
 * so a configuration means the same thing here as there. The draw is keyed
 * by (seed, iteration, sample, position) and the allowed set is scanned in
 * id order, so the token does not depend on the slot, the batch or the
 * order in which tokens were ranked. The allowed set is returned because
 * training must score the token under the same distribution. The sums
 * (the total, top-p's mass without top-k, the inverse CDF) follow
 * sample_core.h's chunked order, the one definition a GPU can run in
 * parallel; the ranking here is this file's own heap. */
#include "ref.h" /* gen.h first: sample_core.h needs its size_t */
#include "internal/sample_core.h"
#include "sys.h"
#include <math.h>

/* Rank order: more probable first, the lower id first among equals. It is a
 * strict total order, so popping a heap gives exactly the sequence a full
 * sort would, and the top-k and top-p sets are defined without ambiguity. */
static inline int ranks_before(const double *w, int a, int b)
{
  return w[a] > w[b] || (w[a] == w[b] && a < b);
}

static void sift_down(const double *w, int *h, int n, int i)
{
  for (;;) {
    int l = 2 * i + 1, r = l + 1, m = i, tmp;
    if (l < n && ranks_before(w, h[l], h[m])) m = l;
    if (r < n && ranks_before(w, h[r], h[m])) m = r;
    if (m == i) return;
    tmp  = h[i];
    h[i] = h[m];
    h[m] = tmp;
    i    = m;
  }
}

/* Moves the first-ranked of h[0..n) to h[n-1]; h[0..n-1) stays a heap. */
static int heap_pop(const double *w, int *h, int n)
{
  int top = h[0];
  h[0]     = h[n - 1];
  h[n - 1] = top;
  sift_down(w, h, n - 1, 0);
  return top;
}

/* Top-k, then top-p over the k kept, on weights w (w < 0: not allowed; n
 * tokens allowed). A heap costs O(V + kept*log V) instead of sorting the
 * whole vocabulary for every token. Removed tokens get w = -1. h needs room
 * for V. */
static void restrict_ranked(const GenConfig *cfg, double *w, int V, int n, int *h)
{
  int    k = cfg->top_k > 0 && cfg->top_k < n ? (int)cfg->top_k : n, kept = k, m = 0;
  double mass = 0, cum = 0;

  if (k == n && cfg->top_p >= 1) return;
  for (int v = 0; v < V; v++)
    if (w[v] >= 0) h[m++] = v;
  for (int i = n / 2 - 1; i >= 0; i--) sift_down(w, h, n, i);
  /* popped tokens collect at the end: the j-th ranked is h[n-1-j] */
  for (int j = 0; j < k && k < n; j++) heap_pop(w, h, n - j);
  if (cfg->top_p < 1) {
    if (k < n)
      for (int j = 0; j < k; j++) mass += w[h[n - 1 - j]];
    else mass = sample_total(w, V);
    /* the smallest prefix whose mass reaches top_p; the token that crosses
     * the threshold is kept, and the first-ranked always is */
    for (kept = 0; kept < k;) {
      int t = k < n ? h[n - 1 - kept] : heap_pop(w, h, n - kept);
      cum += w[t];
      kept++;
      if (cum >= cfg->top_p * mass) break;
    }
  }
  for (int j = 0; j < n - kept; j++) w[h[j]] = -1;
}

static int argmax(const double *w, const int *allowed, int m)
{
  int best = allowed[0];
  for (int j = 1; j < m; j++)
    if (w[allowed[j]] > w[best]) best = allowed[j];
  return best;
}

int ref_sample_row(const GenConfig *cfg, const float *logits, int V, int n_new, uint64_t seed, uint32_t iteration, uint32_t sample, uint32_t position,
                   float *logprob, int *allowed, int *nallowed, double *work)
{
  double *w     = work;
  double  inv_t = 1.0 / (double)cfg->temperature, zmax = -INFINITY, total = 0;
  int     ban   = n_new < cfg->min_new_tokens && cfg->eos >= 0 && cfg->eos < V && V > 1 ? (int)cfg->eos : -1;
  int     m     = 0, tok;

  /* weights relative to the largest allowed logit, so the first-ranked
   * token has weight 1 and the total never underflows */
  for (int v = 0; v < V; v++) {
    double z = (double)logits[v] * inv_t;

    if (v == ban) continue;
    /* NaN or +inf would leave no token with a weight and nothing to draw */
    if (isnan(z) || z == INFINITY) return -1;
    if (z > zmax) zmax = z;
  }
  if (zmax == -INFINITY) return -1;
  for (int v = 0; v < V; v++) w[v] = v == ban ? -1.0 : exp((double)logits[v] * inv_t - zmax);
  restrict_ranked(cfg, w, V, V - (ban >= 0), allowed);
  for (int v = 0; v < V; v++)
    if (w[v] >= 0) allowed[m++] = v;
  total     = sample_total(w, V);
  *nallowed = m < V ? m : 0;
  if (cfg->greedy) tok = argmax(w, allowed, m);
  else tok = sample_draw(w, V, total, (double)rng_uniform(seed ^ GEN_RNG_DOMAIN, iteration, sample, position, 0));
  *logprob = (float)(((double)logits[tok] * inv_t - zmax) - log(total));
  return tok;
}
