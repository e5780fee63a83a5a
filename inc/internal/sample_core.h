/* sample_core: the sampler's arithmetic in one header that both C
 * (src/tensor/cpu_sample.c, the tests' regression/ref_sample.c) and CUDA
 * (cuda/cuda_sample.cu) compile, so the two backends of Backend.sample and
 * the tests' host sampler run the
 * same operations in the same order: temperature, the EOS ban, top-k, top-p
 * over what top-k left, then one keyed uniform through an inverse CDF in
 * token-id order (docs/design.md, "Generation"). Phases:
 *   1. sample_z per token, reduced to zmax (a max: exact in any order) and
 *      to "a drawable logit is NaN or +inf";
 *   2. sample_weight per token;
 *   3. the cut (sample_restrict: rank order, defined by the weights alone),
 *      the chunked sums and the draw.
 * Sums of weights are defined over fixed chunks of SAMPLE_CHUNK token ids
 * (the chunking depends on V alone): each chunk summed in id order, the
 * chunk sums added in chunk order (sample_total, sample_draw). A GPU sums
 * the chunks in parallel and then adds a few hundred chunk sums, with the
 * bits of the serial definition.
 * Products and differences go through SAMPLE_MUL and SAMPLE_SUB so that
 * nvcc cannot contract them into an FMA (the CPU build never does): the
 * only difference left between the backends is the last bits of the
 * libraries' exp and log (see test_cuda for the tolerance). */
#ifndef RLFUSE_SAMPLE_CORE_H
#define RLFUSE_SAMPLE_CORE_H

#include <math.h>

#ifdef __CUDACC__
  #define SAMPLE_HD __host__ __device__ __forceinline__
#else
  #define SAMPLE_HD static inline
#endif
#ifdef __CUDA_ARCH__
  #define SAMPLE_MUL(a, b) __dmul_rn((a), (b))
  #define SAMPLE_SUB(a, b) __dsub_rn((a), (b))
#else
  #define SAMPLE_MUL(a, b) ((a) * (b))
  #define SAMPLE_SUB(a, b) ((a) - (b))
#endif

/* The banned id of a row: eos while min_new_tokens is not reached, if it is
 * a token and not the only one; -1: none. */
SAMPLE_HD int sample_ban(int eos, int banned, int V) { return banned && eos >= 0 && eos < V && V > 1 ? eos : -1; }

SAMPLE_HD double sample_z(float logit, double inv_t) { return SAMPLE_MUL((double)logit, inv_t); }

/* A logit that could be drawn and is NaN or +inf leaves no token a weight. */
SAMPLE_HD int sample_z_bad(double z) { return isnan(z) || z == INFINITY; }

/* Weights relative to the largest allowed logit, so the first-ranked token
 * has weight 1 and the total never underflows; -1: not allowed. */
SAMPLE_HD double sample_weight(float logit, double inv_t, double zmax, int v, int ban)
{
  return v == ban ? -1.0 : exp(SAMPLE_SUB(sample_z(logit, inv_t), zmax));
}

/* The canonical summation order: chunks of SAMPLE_CHUNK ids. */
#define SAMPLE_CHUNK 256

SAMPLE_HD int sample_nchunks(int V) { return (V + SAMPLE_CHUNK - 1) / SAMPLE_CHUNK; }

SAMPLE_HD int sample_chunk_len(int c, int V)
{
  return V - c * SAMPLE_CHUNK < SAMPLE_CHUNK ? V - c * SAMPLE_CHUNK : SAMPLE_CHUNK;
}

/* One chunk's sum in id order, removed tokens (w < 0) skipped. */
SAMPLE_HD double sample_chunk_sum(const double *wc, int len)
{
  double s = 0;
  for (int i = 0; i < len; i++)
    if (wc[i] >= 0) s += wc[i];
  return s;
}

/* The weights' total: the chunk sums added in chunk order. */
SAMPLE_HD double sample_total(const double *w, int V)
{
  double t = 0;
  for (int c = 0, nc = sample_nchunks(V); c < nc; c++)
    t += sample_chunk_sum(w + (size_t)c * SAMPLE_CHUNK, sample_chunk_len(c, V));
  return t;
}

/* Inside the chunk the draw x fell in: the first token whose running sum,
 * started from the chunk's prefix cum, passes x; if rounding leaves x past
 * them all, the chunk's last token with mass (one has: the chunk's sum
 * passed x). Returns the index in the chunk. */
SAMPLE_HD int sample_chunk_pick(const double *wc, int len, double cum, double x)
{
  for (int i = 0; i < len; i++)
    if (wc[i] >= 0) {
      cum += wc[i];
      if (x < cum) return i;
    }
  for (int i = len - 1; i > 0; i--)
    if (wc[i] > 0) return i;
  return 0;
}

/* Rank order: more probable first, the lower id first among equals. A
 * strict total order, so popping a heap gives exactly the sequence a full
 * sort would, and the top-k and top-p sets are defined without ambiguity. */
SAMPLE_HD int sample_ranks_before(const double *w, int a, int b) { return w[a] > w[b] || (w[a] == w[b] && a < b); }

SAMPLE_HD void sample_sift_down(const double *w, int *h, int n, int i)
{
  for (;;) {
    int l = 2 * i + 1, r = l + 1, m = i, tmp;
    if (l < n && sample_ranks_before(w, h[l], h[m])) m = l;
    if (r < n && sample_ranks_before(w, h[r], h[m])) m = r;
    if (m == i) return;
    tmp  = h[i];
    h[i] = h[m];
    h[m] = tmp;
    i    = m;
  }
}

/* Moves the first-ranked of h[0..n) to h[n-1]; h[0..n-1) stays a heap. */
SAMPLE_HD int sample_heap_pop(const double *w, int *h, int n)
{
  int top  = h[0];
  h[0]     = h[n - 1];
  h[n - 1] = top;
  sample_sift_down(w, h, n - 1, 0);
  return top;
}

/* Top-k, then top-p over the k kept, on weights w (w < 0: not allowed; n
 * tokens allowed). A heap costs O(V + kept*log V) instead of sorting the
 * whole vocabulary. Top-p's mass is the k kept summed in rank order when
 * top-k cuts, else sample_total (chunked, what a GPU sums in parallel); the
 * running sum that meets top_p*mass is in rank order. Removed tokens get
 * w = -1; h needs room for V (the cuda kernel finds the same set with a
 * radix select and a sort of the candidates). Returns
 * the boundary: the last-ranked token kept, or -1 when nothing was cut.
 * The kept set is then exactly the allowed tokens that rank no later than
 * the boundary (sample_kept), a fact of the row's weights alone. */
SAMPLE_HD int sample_restrict(long long top_k, double top_p, double *w, int V, int n, int *h)
{
  int    k = top_k > 0 && top_k < n ? (int)top_k : n, kept = k, m = 0;
  double mass = 0, cum = 0;

  if (k == n && top_p >= 1) return -1;
  for (int v = 0; v < V; v++)
    if (w[v] >= 0) h[m++] = v;
  for (int i = n / 2 - 1; i >= 0; i--) sample_sift_down(w, h, n, i);
  /* popped tokens collect at the end: the j-th ranked is h[n-1-j] */
  for (int j = 0; j < k && k < n; j++) sample_heap_pop(w, h, n - j);
  if (top_p < 1) {
    if (k < n)
      for (int j = 0; j < k; j++) mass += w[h[n - 1 - j]];
    else mass = sample_total(w, V);
    /* the smallest prefix whose mass reaches top_p; the token that crosses
     * the threshold is kept, and the first-ranked always is */
    for (kept = 0; kept < k;) {
      int t = k < n ? h[n - 1 - kept] : sample_heap_pop(w, h, n - kept);
      cum += w[t];
      kept++;
      if (cum >= SAMPLE_MUL(top_p, mass)) break;
    }
  }
  for (int j = 0; j < n - kept; j++) w[h[j]] = -1;
  return h[n - kept];
}

/* Whether token v (allowed before the cut, w[v] >= 0 on the uncut
 * weights) is in the set that boundary b leaves (b < 0: every token). */
SAMPLE_HD int sample_kept(const double *w, int v, int b) { return b < 0 || v == b || sample_ranks_before(w, v, b); }

/* Inverse CDF in id order over the chunks: x = u*total; the first chunk
 * whose running prefix (the chunk sums added in order) passes x, then
 * sample_chunk_pick from that chunk's prefix. If rounding leaves x past
 * every prefix: the last token with mass. total: sample_total(w, V). */
SAMPLE_HD int sample_draw(const double *w, int V, double total, double u)
{
  double x = SAMPLE_MUL(u, total), cum = 0;
  int    nc = sample_nchunks(V), last = 0;

  for (int c = 0; c < nc; c++) {
    const double *wc  = w + (size_t)c * SAMPLE_CHUNK;
    int           len = sample_chunk_len(c, V);
    double        s = sample_chunk_sum(wc, len), next = cum + s;

    if (x < next) return c * SAMPLE_CHUNK + sample_chunk_pick(wc, len, cum, x);
    if (s > 0) last = c;
    cum = next;
  }
  return last * SAMPLE_CHUNK +
         sample_chunk_pick(w + (size_t)last * SAMPLE_CHUNK, sample_chunk_len(last, V), 0, INFINITY);
}

SAMPLE_HD int sample_argmax(const double *w, const int *allowed, int m)
{
  int best = allowed[0];
  for (int j = 1; j < m; j++)
    if (w[allowed[j]] > w[best]) best = allowed[j];
  return best;
}

/* Phase 3 of one row, after w holds every token's weight (zmax finite):
 * the cut, the allowed ids in ascending order into allowed (room for V;
 * h, room for V, may be the same array), the draw with uniform u (unused
 * when greedy), and the token's log-probability under the cut, tempered
 * distribution. *nallowed: the set's size, 0 when nothing restricts it;
 * *boundary: sample_restrict's. Returns the token. */
SAMPLE_HD int sample_finish(const float *logits, int V, int ban, double inv_t, double zmax, long long top_k,
                            double top_p, int greedy, float u, double *w, int *h, int *allowed, float *logprob,
                            int *nallowed, int *boundary)
{
  double total = 0;
  int    m = 0, tok;

  *boundary = sample_restrict(top_k, top_p, w, V, V - (ban >= 0), h);
  /* the allowed list and sample_total in one pass (the same additions) */
  for (int c = 0, nc = sample_nchunks(V); c < nc; c++) {
    double s = 0;
    for (int v = c * SAMPLE_CHUNK, end = v + sample_chunk_len(c, V); v < end; v++)
      if (w[v] >= 0) {
        allowed[m++] = v;
        s += w[v];
      }
    total += s;
  }
  *nallowed = m < V ? m : 0;
  if (greedy) tok = sample_argmax(w, allowed, m);
  else tok = sample_draw(w, V, total, (double)u);
  *logprob = (float)SAMPLE_SUB(SAMPLE_SUB(sample_z(logits[tok], inv_t), zmax), log(total));
  return tok;
}

#endif
