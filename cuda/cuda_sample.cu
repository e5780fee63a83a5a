/* cuda backend: Backend.sample, the token draws of N rows of device-resident
 * logits: the CUDA twin of src/tensor/cpu_sample.c, compiled from the same
 * arithmetic (inc/internal/sample_core.h) and the same Philox
 * (inc/internal/philox.h). Three kernels:
 *   sample_max_kernel    a block per SAMPLE_PART_IDS ids of a row: the
 *                        tempered logits' maximum (a max is exact in any
 *                        order) and "a drawable logit is bad";
 *   sample_chunks_kernel a block per SAMPLE_BLOCK_CHUNKS chunks: their
 *                        weights (into w too when the row may be cut), then
 *                        one lane per chunk adds its weights in id order
 *                        (sample_chunk_sum's additions) and finds its first
 *                        largest weight (for greedy);
 *   sample_row_kernel    a block per row: the cut, the draw and the outputs.
 * Without top-k/top-p the row kernel only adds the chunk sums in order (one
 * thread, a few hundred additions) and scans the one chunk the draw falls
 * in: the bits of sample_total and sample_draw. With a cut it finds the
 * candidates with a radix select on the weights rounded to float (a
 * monotone key, so "key >= threshold" is a prefix of the rank order; top-k:
 * the k-th key, top-p: the key where the bins' mass, summed in any order,
 * passes top_p*mass), sorts them in shared memory by the exact rank order
 * (sample_ranks_before) and runs sample_restrict's running sums over the
 * sorted candidates: the approximate mass only chooses how many candidates
 * to take, the exact sums decide. The kept ones, sorted again by id, give
 * the chunk sums (in id order), the allowed ids and the draw. When the
 * candidates do not fit (SAMPLE_CAND_MAX) or the exact sum does not reach
 * top_p*mass within them, one thread runs sample_restrict, the CPU's heap,
 * on the row: slow, the same set. Scratch (work): the weights and the heap
 * (V doubles and V ints per row), the chunks' sums and first largest
 * weights, the parts' maxima. */
#include "cuda_common.cuh"
#include "internal/philox.h"
#include "internal/sample_core.h"
#include <math.h>

#define SAMPLE_THREADS       1024 /* the row kernel */
#define SAMPLE_MAX_THREADS   256  /* sample_max_kernel */
#define SAMPLE_PART_IDS      4096 /* ids per block of sample_max_kernel */
#define SAMPLE_BLOCK_CHUNKS  16   /* chunks per block of sample_chunks_kernel */
#define SAMPLE_CHUNK_THREADS 256
#define SAMPLE_PAD (SAMPLE_CHUNK + 1) /* a chunk's stride in shared memory: the lanes that sum 16 chunks hit 16 banks  \
                                       */
#define SAMPLE_CAND_MAX      8192 /* candidates sorted in shared memory (96 KiB) */

struct SampleArgs {
  double             inv_t, top_p;
  long long          top_k;
  int                greedy, eos, V, nc, parts, cut;
  unsigned long long key;
  unsigned           iteration;
};

/* The work buffer's pieces for N rows. */
struct SampleWork {
  double *w, *csum, *cbest, *pmax;
  int    *h, *cbidx, *pbad;
};

static int sample_parts(int V) { return (V + SAMPLE_PART_IDS - 1) / SAMPLE_PART_IDS; }

static SampleWork sample_work_split(void *work, int N, int V)
{
  SampleWork s;
  size_t     nc = (size_t)sample_nchunks(V), P = (size_t)sample_parts(V);
  s.w     = (double *)work;
  s.csum  = s.w + (size_t)N * V;
  s.cbest = s.csum + (size_t)N * nc;
  s.pmax  = s.cbest + (size_t)N * nc;
  s.h     = (int *)(s.pmax + (size_t)N * P);
  s.cbidx = s.h + (size_t)N * V;
  s.pbad  = s.cbidx + (size_t)N * nc;
  return s;
}

__device__ static const float *sample_row_logits(const float *logits, const int *row, int n, int V)
{
  return logits + (size_t)(row ? row[n] : n) * V;
}

/* The weights rounded to float, as unsigned: w >= 0, so the order of the
 * keys is the order of the floats, and w1 > w2 gives key1 >= key2. */
__device__ __forceinline__ unsigned sample_key(double w) { return __float_as_uint((float)w); }

__global__ void sample_max_kernel(double *pmax, int *pbad, const float *logits, const int *row, const int *ban_eos,
                                  SampleArgs a)
{
  __shared__ double smax[SAMPLE_MAX_THREADS];
  __shared__ int    sbad[SAMPLE_MAX_THREADS];
  int               p = blockIdx.x, n = blockIdx.y, V = a.V, tid = threadIdx.x, bad = 0;
  const float      *x   = sample_row_logits(logits, row, n, V);
  int               ban = sample_ban(a.eos, ban_eos ? ban_eos[n] : 0, V);
  int               lo = p * SAMPLE_PART_IDS, hi = min(V, lo + SAMPLE_PART_IDS);
  double            zmax = -INFINITY;

  /* float4 loads where the part is 16-byte aligned (V a multiple of 4) */
#define SAMPLE_MAX_ONE(val, v) \
  do { \
    double z_ = sample_z((val), a.inv_t); \
    if ((v) != ban) { \
      bad |= sample_z_bad(z_); \
      if (z_ > zmax) zmax = z_; \
    } \
  } while (0)
  if (((uintptr_t)(x + lo) & 15) == 0) {
    const float4 *x4 = (const float4 *)(x + lo);
    int           n4 = (hi - lo) / 4;
    for (int i = tid; i < n4; i += blockDim.x) {
      float4 q = x4[i];
      int    v = lo + 4 * i;
      SAMPLE_MAX_ONE(q.x, v);
      SAMPLE_MAX_ONE(q.y, v + 1);
      SAMPLE_MAX_ONE(q.z, v + 2);
      SAMPLE_MAX_ONE(q.w, v + 3);
    }
    lo += 4 * n4;
  }
  for (int v = lo + tid; v < hi; v += blockDim.x) SAMPLE_MAX_ONE(x[v], v);
#undef SAMPLE_MAX_ONE
  smax[tid] = zmax;
  sbad[tid] = bad;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (tid < s) {
      smax[tid] = fmax(smax[tid], smax[tid + s]);
      sbad[tid] |= sbad[tid + s];
    }
    __syncthreads();
  }
  if (tid == 0) {
    pmax[(size_t)n * a.parts + p] = smax[0];
    pbad[(size_t)n * a.parts + p] = sbad[0];
  }
}

/* The row's zmax from its parts (warp 0 reads them), for the whole block;
 * *bad: a bad logit or nothing finite. */
__device__ static double sample_row_zmax(const double *pmax, const int *pbad, int n, int parts, int *bad)
{
  __shared__ double s_z;
  __shared__ int    s_bad;
  if (threadIdx.x < 32) {
    double z = -INFINITY;
    int    b = 0;
    for (int p = threadIdx.x; p < parts; p += 32) {
      z = fmax(z, pmax[(size_t)n * parts + p]);
      b |= pbad[(size_t)n * parts + p];
    }
    for (int o = 16; o > 0; o >>= 1) {
      z = fmax(z, __shfl_xor_sync(0xffffffffu, z, o));
      b |= __shfl_xor_sync(0xffffffffu, b, o);
    }
    if (threadIdx.x == 0) {
      s_z   = z;
      s_bad = b || z == -INFINITY;
    }
  }
  __syncthreads();
  *bad = s_bad;
  return s_z;
}

__global__ void __launch_bounds__(SAMPLE_CHUNK_THREADS)
    sample_chunks_kernel(SampleWork sw, const float *logits, const int *row, const int *ban_eos, SampleArgs a)
{
  __shared__ double sw_[SAMPLE_BLOCK_CHUNKS * SAMPLE_PAD];
  int               n = blockIdx.y, c0 = blockIdx.x * SAMPLE_BLOCK_CHUNKS, V = a.V, bad, tid = threadIdx.x;
  const float      *x   = sample_row_logits(logits, row, n, V);
  int               ban = sample_ban(a.eos, ban_eos ? ban_eos[n] : 0, V), lo = c0 * SAMPLE_CHUNK,
      len                = min(V - lo, SAMPLE_BLOCK_CHUNKS * SAMPLE_CHUNK);
  double            zmax = sample_row_zmax(sw.pmax, sw.pbad, n, a.parts, &bad);

  if (bad) return;
  for (int i = tid; i < len; i += blockDim.x) {
    double wv = sample_weight(x[lo + i], a.inv_t, zmax, lo + i, ban);
    sw_[(i / SAMPLE_CHUNK) * SAMPLE_PAD + i % SAMPLE_CHUNK] = wv;
    if (a.cut) sw.w[(size_t)n * V + lo + i] = wv;
  }
  __syncthreads();
  if (tid < SAMPLE_BLOCK_CHUNKS && c0 + tid < a.nc) {
    const double *wc  = sw_ + tid * SAMPLE_PAD;
    int           c   = c0 + tid, L = sample_chunk_len(c, V), bi = 0;
    double        s   = 0, best = -1;
    /* sample_chunk_sum's additions; the loads run ahead of them */
#pragma unroll 8
    for (int i = 0; i < L; i++) {
      double t = wc[i];
      if (t >= 0) s += t;
      if (t > best) {
        best = t;
        bi   = i;
      }
    }
    sw.csum[(size_t)n * a.nc + c]  = s;
    sw.cbest[(size_t)n * a.nc + c] = best;
    sw.cbidx[(size_t)n * a.nc + c] = c * SAMPLE_CHUNK + bi;
  }
}

/* Block reduction to the first-ranked (largest weight, lowest id). */
__device__ static int sample_block_argmax(double wv, int id, double *rw, int *ri)
{
  int tid = threadIdx.x;
  rw[tid] = wv;
  ri[tid] = id;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (tid < s && (rw[tid + s] > rw[tid] || (rw[tid + s] == rw[tid] && ri[tid + s] < ri[tid]))) {
      rw[tid] = rw[tid + s];
      ri[tid] = ri[tid + s];
    }
    __syncthreads();
  }
  id = ri[0];
  __syncthreads();
  return id;
}

/* Sorts (cw, cid)[0..m) into rank order, or by id (m a power of two;
 * padding last): bitonic, so the result is the one order
 * sample_ranks_before defines, whatever the candidates' gathered order. */
__device__ static void sample_sort(double *cw, int *cid, int m, int by_id)
{
  for (int size = 2; size <= m; size <<= 1)
    for (int stride = size / 2; stride > 0; stride >>= 1) {
      for (int i = threadIdx.x; i < m; i += blockDim.x) {
        int j = i ^ stride;
        if (j > i) {
          int jfirst = by_id ? cid[j] < cid[i] : cw[j] > cw[i] || (cw[j] == cw[i] && cid[j] < cid[i]);
          if ((i & size) == 0 ? jfirst : !jfirst) {
            double tw = cw[i];
            int    ti = cid[i];
            cw[i]     = cw[j];
            cid[i]    = cid[j];
            cw[j]     = tw;
            cid[j]    = ti;
          }
        }
      }
      __syncthreads();
    }
}

/* The cut of one row on its weights w (global): the boundary, as
 * sample_restrict returns it. *kept > 0: the kept tokens are (cw, cid)
 * [0..*kept) in rank order; 0: the serial path set the removed tokens'
 * weights in w to -1. mass0: sample_total of the uncut weights. The
 * block's threads all call it. */
__device__ static int sample_cut(double *w, int *h, int V, int n, long long top_k, double top_p, double mass0,
                                 double *cw, int *cid, int *kept_out)
{
  /* the digits of the keys, high to low: 12, 12 and 7 bits (bit 31, the
   * sign, is 0); the histograms live in the candidates' shared memory */
  const int           shifts[3] = {19, 7, 0}, widths[3] = {12, 12, 7};
  unsigned           *hcnt  = (unsigned *)cid;
  double             *hmass = cw;
  __shared__ unsigned s_prefix, s_thr, s_above;
  __shared__ double   s_above_mass;
  __shared__ int      s_state, s_cnt, s_b, s_kept;
  int                 tid = threadIdx.x, k = top_k > 0 && top_k < n ? (int)top_k : n, topp_only = k == n;
  /* the mass the candidates must reach: top_p*mass0 with a margin over the
   * bins' sums in atomic order (the exact sums below decide) */
  double target = topp_only ? SAMPLE_MUL(top_p, mass0) * (1 + 1e-9) : 0;

  if (tid == 0) {
    s_prefix     = 0;
    s_above      = 0;
    s_above_mass = 0;
    s_state      = 0; /* 0: refining, 1: threshold found, 2: the serial path */
  }
  for (int level = 0; level < 3; level++) {
    int      shift = shifts[level], nb = 1 << widths[level];
    unsigned mask = (unsigned)nb - 1;
    for (int d = tid; d < nb; d += blockDim.x) {
      hcnt[d]  = 0;
      hmass[d] = 0;
    }
    __syncthreads();
    for (int v = tid; v < V; v += blockDim.x) {
      double   wv = w[v];
      unsigned key;
      if (wv < 0) continue;
      key = sample_key(wv);
      if ((key >> (shift + widths[level])) != s_prefix) continue;
      atomicAdd(&hcnt[(key >> shift) & mask], 1u);
      if (topp_only) atomicAdd(&hmass[(key >> shift) & mask], wv);
    }
    __syncthreads();
    if (tid == 0) {
      unsigned cnt = 0;
      double   m   = 0;
      /* no weight exceeds 1: the first level's walk starts at 1's bin */
      int d = level ? nb - 1 : (int)(sample_key(1.0) >> shift);
      for (; d > 0; d--) {
        cnt += hcnt[d];
        m += hmass[d];
        if (topp_only ? s_above_mass + m >= target : s_above + cnt >= (unsigned)k) break;
      }
      if (d == 0) {
        cnt += hcnt[0];
        m += hmass[0];
      }
      if (s_above + cnt <= SAMPLE_CAND_MAX) {
        s_thr   = ((s_prefix << widths[level]) | (unsigned)d) << shift;
        s_state = 1;
      } else if (shift == 0 || (topp_only && s_above_mass + m < target)) s_state = 2;
      else {
        s_above += cnt - hcnt[d];
        s_above_mass += m - hmass[d];
        s_prefix = (s_prefix << widths[level]) | (unsigned)d;
      }
      s_cnt = 0;
    }
    __syncthreads();
    if (s_state) break;
  }
  if (s_state == 1) {
    int m = 1, cnt;
    for (int v = tid; v < V; v += blockDim.x)
      if (w[v] >= 0 && sample_key(w[v]) >= s_thr) {
        int i  = atomicAdd(&s_cnt, 1);
        cw[i]  = w[v];
        cid[i] = v;
      }
    __syncthreads();
    cnt = s_cnt;
    while (m < cnt) m <<= 1;
    for (int i = cnt + tid; i < m; i += blockDim.x) {
      cw[i]  = -2;
      cid[i] = 0x7fffffff;
    }
    __syncthreads();
    sample_sort(cw, cid, m, 0);
    if (tid == 0) {
      /* sample_restrict's sums over the rank order */
      double mass = 0, cum = 0;
      int    kept = k;
      s_b         = -1;
      if (!topp_only) {
        if (top_p < 1) {
          for (int j = 0; j < k; j++) mass += cw[j];
          for (kept = 0; kept < k;) {
            cum += cw[kept];
            kept++;
            if (cum >= SAMPLE_MUL(top_p, mass)) break;
          }
        }
        s_b    = cid[kept - 1];
        s_kept = kept;
      } else {
        double lim = SAMPLE_MUL(top_p, mass0);
        int    hit = -1;
        /* in rank order, 8 loads ahead of the additions */
        for (int j0 = 0; j0 < cnt && hit < 0; j0 += 8) {
          double t[8];
#pragma unroll
          for (int i = 0; i < 8; i++) t[i] = j0 + i < cnt ? cw[j0 + i] : 0;
#pragma unroll
          for (int i = 0; i < 8; i++)
            if (hit < 0 && j0 + i < cnt) {
              cum += t[i];
              if (cum >= lim) hit = j0 + i;
            }
        }
        if (hit >= 0) {
          s_b    = cid[hit];
          s_kept = hit + 1;
        }
        if (s_b < 0 && cnt == n) {
          s_b    = cid[n - 1];
          s_kept = n;
        }
      }
      if (s_b < 0) s_state = 2;
    }
    __syncthreads();
  }
  if (s_state == 2) {
    if (tid == 0) {
      s_b    = sample_restrict(top_k, top_p, w, V, n, h);
      s_kept = 0;
    }
  }
  __syncthreads();
  *kept_out = s_kept;
  return s_b;
}

__device__ static int sample_lower_bound(const int *a, int n, int key)
{
  int lo = 0, hi = n;
  while (lo < hi) {
    int mid = (lo + hi) / 2;
    if (a[mid] < key) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/* Thread 0: sample_draw's chunk for x = u*total, with the chunk sums
 * csum[0..nc) turned into their running prefixes (the same additions). The
 * prefixes never decrease, so the first chunk whose prefix passes x is
 * found by bisection. *cum: the prefix before it; when rounding leaves x
 * past them all, the last chunk with mass, *cum 0 and *x infinite (its
 * last token with mass, as sample_draw). */
__device__ static int sample_pick_chunk(double *csum, int nc, float u, double *total, double *x, double *cum)
{
  double t = 0;
  int    last = 0, c;

#pragma unroll 8
  for (c = 0; c < nc; c++) {
    double s = csum[c];
    if (s > 0) last = c;
    t += s;
    csum[c] = t;
  }
  *total = t;
  *x     = SAMPLE_MUL((double)u, t);
  c      = 0;
  for (int hi = nc; c < hi;) {
    int mid = (c + hi) / 2;
    if (*x < csum[mid]) hi = mid;
    else c = mid + 1;
  }
  if (c == nc) {
    *x   = INFINITY;
    *cum = 0;
    return last;
  }
  *cum = c ? csum[c - 1] : 0;
  return c;
}

__global__ void __launch_bounds__(SAMPLE_THREADS)
    sample_row_kernel(int *token, float *logprob, int *nallowed, int *boundary, int *allowed, SampleWork sw,
                      const float *logits, const int *row, const int *sample_id, const int *position,
                      const int *ban_eos, SampleArgs a)
{
  extern __shared__ double dsm[];
  __shared__ double        rw[SAMPLE_THREADS], wc[SAMPLE_CHUNK];
  __shared__ int           ri[SAMPLE_THREADS];
  __shared__ int           s_c, s_tok, s_m;
  __shared__ double        s_cum, s_x, s_total;
  int                      n = blockIdx.x, V = a.V, nc = a.nc, tid = threadIdx.x, bad, tok = 0, b = -1, m, kept = 0;
  const float             *x    = sample_row_logits(logits, row, n, V);
  int                      ban  = sample_ban(a.eos, ban_eos ? ban_eos[n] : 0, V), nv = V - (ban >= 0);
  double                   zmax = sample_row_zmax(sw.pmax, sw.pbad, n, a.parts, &bad);
  double                  *w = sw.w + (size_t)n * V, *scsum = dsm, *cw = dsm + nc;
  int                     *scnt = (int *)(cw + (a.cut ? SAMPLE_CAND_MAX : 0)), *cid = scnt + nc;
  int                      cut  = (a.top_k > 0 && a.top_k < nv) || a.top_p < 1;
  int                     *out  = allowed ? allowed + (size_t)n * V : NULL;
  float                    u    = 0;

  if (bad) {
    if (tid == 0) {
      token[n]    = -1;
      logprob[n]  = 0;
      nallowed[n] = 0;
      boundary[n] = -1;
    }
    return;
  }
  if (!a.greedy && tid == 0) u = philox_uniform(a.key, a.iteration, (uint32_t)sample_id[n], (uint32_t)position[n], 0);
  for (int c = tid; c < nc; c += blockDim.x) scsum[c] = sw.csum[(size_t)n * nc + c];
  __syncthreads();
  if (cut) {
    if (tid == 0) {
      double mass0 = 0;
      for (int c = 0; c < nc; c++) mass0 += scsum[c];
      s_total = mass0;
    }
    __syncthreads();
    b = sample_cut(w, sw.h + (size_t)n * V, V, nv, a.top_k, a.top_p, s_total, cw, cid, &kept);
  }
  if (cut && kept) {
    /* the kept tokens (cw, cid)[0..kept) in rank order: the first is the
     * greedy token; sorted by id they give each chunk's kept weights in id
     * order, contiguous */
    int p2 = 1;
    tok    = cid[0];
    while (p2 < kept) p2 <<= 1;
    for (int i = kept + tid; i < p2; i += blockDim.x) cid[i] = 0x7fffffff;
    __syncthreads();
    sample_sort(cw, cid, p2, 1);
    for (int c = tid; c < nc; c += blockDim.x) {
      int lo    = sample_lower_bound(cid, kept, c * SAMPLE_CHUNK),
          hi    = sample_lower_bound(cid, kept, (c + 1) * SAMPLE_CHUNK);
      double s  = 0;
      for (int j = lo; j < hi; j++) s += cw[j];
      scsum[c] = s;
      scnt[c]  = lo;
    }
    __syncthreads();
    if (tid == 0) {
      double total, xd, cum;
      int    c = sample_pick_chunk(scsum, nc, u, &total, &xd, &cum), lo = scnt[c], hi = c + 1 < nc ? scnt[c + 1] : kept;
      s_total = total;
      if (!a.greedy) tok = cid[lo + sample_chunk_pick(cw + lo, hi - lo, cum, xd)];
      s_tok = tok;
    }
    if (out && kept < V)
      for (int j = tid; j < kept; j += blockDim.x) out[j] = cid[j];
    __syncthreads();
    tok = s_tok;
    m   = kept;
  } else {
    if (cut) {
      /* the serial path marked the removed weights: the kept chunk sums,
       * counts and offsets from w */
      for (int c = tid; c < nc; c += blockDim.x) {
        double s   = 0;
        int    cnt = 0;
        for (int v = c * SAMPLE_CHUNK, end = v + sample_chunk_len(c, V); v < end; v++)
          if (w[v] >= 0) {
            s += w[v];
            cnt++;
          }
        scsum[c] = s;
        scnt[c]  = cnt;
      }
      __syncthreads();
    }
    if (a.greedy) {
      double best = -1;
      int    id   = V;
      if (cut)
        for (int v = tid; v < V; v += blockDim.x) {
          if (w[v] > best) {
            best = w[v];
            id   = v;
          }
        }
      else
        for (int c = tid; c < nc; c += blockDim.x) {
          double bw = sw.cbest[(size_t)n * nc + c];
          if (bw > best) {
            best = bw;
            id   = sw.cbidx[(size_t)n * nc + c];
          }
        }
      tok = sample_block_argmax(best, id, rw, ri);
    }
    if (tid == 0) {
      double total, xd, cum;
      s_c     = sample_pick_chunk(scsum, nc, u, &total, &xd, &cum);
      s_total = total;
      s_x     = xd;
      s_cum   = cum;
      if (cut) {
        m = 0;
        for (int j = 0; j < nc; j++) {
          int t   = scnt[j];
          scnt[j] = m;
          m += t;
        }
      } else m = nv;
      s_m = m;
    }
    __syncthreads();
    if (!a.greedy) {
      int lo = s_c * SAMPLE_CHUNK, len = sample_chunk_len(s_c, V);
      for (int i = tid; i < len; i += blockDim.x)
        wc[i] = cut ? w[lo + i] : sample_weight(x[lo + i], a.inv_t, zmax, lo + i, ban);
      __syncthreads();
      if (tid == 0) s_tok = lo + sample_chunk_pick(wc, len, s_cum, s_x);
      __syncthreads();
      tok = s_tok;
    }
    m = s_m;
    if (out && m < V) {
      if (cut)
        for (int c = tid; c < nc; c += blockDim.x) {
          int j = scnt[c];
          for (int v = c * SAMPLE_CHUNK, end = v + sample_chunk_len(c, V); v < end; v++)
            if (w[v] >= 0) out[j++] = v;
        }
      else
        for (int v = tid; v < V; v += blockDim.x)
          if (v != ban) out[v - (ban >= 0 && v > ban)] = v;
    }
  }
  if (tid == 0) {
    token[n]    = tok;
    nallowed[n] = m < V ? m : 0;
    boundary[n] = b;
    logprob[n]  = (float)SAMPLE_SUB(SAMPLE_SUB(sample_z(x[tok], a.inv_t), zmax), log(s_total));
  }
}

size_t rfcuda_sample_work(int N, int V)
{
  return (size_t)N *
         ((size_t)V * (sizeof(double) + sizeof(int)) + (size_t)sample_nchunks(V) * (2 * sizeof(double) + sizeof(int)) +
          (size_t)sample_parts(V) * (sizeof(double) + sizeof(int)));
}

int rfcuda_sample(int *token, float *logprob, int *nallowed, int *boundary, int *allowed, void *work,
                  const float *logits, const int *row, const int *sample_id, const int *position, const int *ban_eos,
                  double temperature, double top_p, long long top_k, int greedy, int eos, unsigned long long key,
                  unsigned iteration, int N, int V)
{
  SampleArgs a;
  SampleWork sw = sample_work_split(work, N, V);
  size_t     smem;
  int        smem_max, dev;

  RFCUDA_REQUIRE(temperature > 0 && N >= 0 && V >= 1, "rfcuda_sample: temperature %g, N %d and V %d must be positive",
                 temperature, N, V);
  RFCUDA_REQUIRE(N <= 65535, "rfcuda_sample: N %d rows is more than a grid's 65535 (call in pieces)", N);
  if (N == 0) return 0;
  a.inv_t     = 1.0 / temperature;
  a.top_p     = top_p;
  a.top_k     = top_k;
  a.greedy    = greedy;
  a.eos       = eos;
  a.V         = V;
  a.nc        = sample_nchunks(V);
  a.parts     = sample_parts(V);
  a.cut       = top_k > 0 || top_p < 1;
  a.key       = key;
  a.iteration = iteration;
  /* the row kernel's dynamic shared memory: the chunk sums and counts, and
   * with a cut the candidates; its static part is under 16 KiB */
  smem = (size_t)a.nc * (sizeof(double) + sizeof(int)) +
         (a.cut ? (size_t)SAMPLE_CAND_MAX * (sizeof(double) + sizeof(int)) : 0);
  RFCUDA_CHECK(cudaGetDevice(&dev));
  RFCUDA_CHECK(cudaDeviceGetAttribute(&smem_max, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  RFCUDA_REQUIRE(smem + 16 * 1024 <= (size_t)smem_max,
                 "rfcuda_sample: V %d needs %zu bytes of shared memory, the device has %d", V, smem + 16 * 1024,
                 smem_max);
  if (smem > 48 * 1024)
    RFCUDA_CHECK(cudaFuncSetAttribute(sample_row_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
  sample_max_kernel<<<dim3(a.parts, N), SAMPLE_MAX_THREADS, 0, rfcuda_stream()>>>(sw.pmax, sw.pbad, logits, row,
                                                                                  ban_eos, a);
  RFCUDA_LAUNCHED();
  sample_chunks_kernel<<<dim3((a.nc + SAMPLE_BLOCK_CHUNKS - 1) / SAMPLE_BLOCK_CHUNKS, N), SAMPLE_CHUNK_THREADS, 0,
                         rfcuda_stream()>>>(sw, logits, row, ban_eos, a);
  RFCUDA_LAUNCHED();
  sample_row_kernel<<<N, SAMPLE_THREADS, smem, rfcuda_stream()>>>(token, logprob, nallowed, boundary, allowed, sw,
                                                                  logits, row, sample_id, position, ban_eos, a);
  RFCUDA_LAUNCHED();
  return 0;
}
