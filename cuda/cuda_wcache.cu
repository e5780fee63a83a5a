/* CUDA backend: bf16 copies of the weights, kept between calls.
 *
 * Under -precision bf16 a matmul reads its weight as bf16. Converting the
 * fp32 master weight on every call cost a full extra pass over the weights
 * per matmul (and made bf16 decode slower than fp32). Instead, the model
 * names its parameter buffer once (rfcuda_weights_region), and a matmul whose
 * weight lies inside a named buffer gets a bf16 copy that is made on first
 * use and kept: the same rounding as before, so the results are the same
 * bits.
 *
 * A copy goes stale when the buffer under it is written: every op that
 * writes memory it was given (copy, from_host, zero, axpy, scale, adamw and
 * the NCCL receives) calls rfcuda_weights_touched on what it writes, which
 * marks the overlapping copies stale; the next matmul that uses one
 * refreshes it in place, on the compute stream, after the write. A CUDA
 * graph holds the copies' addresses, so rfcuda_graph_launch first refreshes
 * every stale copy (rfcuda_weights_refresh): the graph then reads the new
 * weights. Freeing a named buffer drops its copies and changes
 * rfcuda_epoch(), so graphs that hold them are captured again. */
#include "cuda_common.cuh"
#include <stdlib.h>

#define WC_MAX_REGIONS 64

typedef struct {
  const char *p;
  size_t      bytes;
} WcRegion;

typedef struct {
  const float   *w;         /* the fp32 weight (key, with rows, cols and ld) */
  size_t         rows;
  int            cols, ld;
  __nv_bfloat16 *b;         /* rows of ld, zeros past cols */
  int            stale;
} WcEntry;

static struct {
  WcRegion region[WC_MAX_REGIONS];
  int      nregion;
  WcEntry *e;
  int      n, cap;
  int      nstale;
} wc;

int rfcuda_weights_region(const void *p, size_t bytes)
{
  if (!p || !bytes) return 0;
  for (int i = 0; i < wc.nregion; i++)
    if (wc.region[i].p == (const char *)p) {
      wc.region[i].bytes = bytes;
      return 0;
    }
  RFCUDA_REQUIRE(wc.nregion < WC_MAX_REGIONS, "rfcuda_weights_region: more than %d weight buffers", WC_MAX_REGIONS);
  wc.region[wc.nregion].p     = (const char *)p;
  wc.region[wc.nregion].bytes = bytes;
  wc.nregion++;
  return 0;
}

static int wc_in_region(const char *p, size_t bytes)
{
  for (int i = 0; i < wc.nregion; i++)
    if (p >= wc.region[i].p && p + bytes <= wc.region[i].p + wc.region[i].bytes) return 1;
  return 0;
}

void rfcuda_weights_touched(const void *p, size_t bytes)
{
  const char *a = (const char *)p;

  int         any = 0;

  if (!wc.n || !bytes) return;
  /* most writes (a step's rows, activations, the cache) touch no weight
   * buffer: the few buffers first, the copies only when one overlaps */
  for (int i = 0; i < wc.nregion && !any; i++)
    any = a < wc.region[i].p + wc.region[i].bytes && wc.region[i].p < a + bytes;
  if (!any) return;
  for (int i = 0; i < wc.n; i++) {
    const char *s = (const char *)wc.e[i].w, *t = s + wc.e[i].rows * (size_t)wc.e[i].cols * sizeof(float);
    if (!wc.e[i].stale && a < t && s < a + bytes) {
      wc.e[i].stale = 1;
      wc.nstale++;
    }
  }
}

/* The buffer at p is being freed: its copies go, graphs holding them are stale. */
int rfcuda_weights_release(const void *p)
{
  int k = 0, dropped = 0;

  for (int i = 0; i < wc.nregion; i++)
    if (wc.region[i].p == (const char *)p) {
      const char *s = wc.region[i].p, *t = s + wc.region[i].bytes;
      for (int j = 0; j < wc.n; j++) {
        if ((const char *)wc.e[j].w >= s && (const char *)wc.e[j].w < t) {
          RFCUDA_CHECK(cudaFree(wc.e[j].b));
          wc.nstale -= wc.e[j].stale;
          dropped = 1;
        } else wc.e[k++] = wc.e[j];
      }
      wc.n                = k;
      wc.region[i]        = wc.region[--wc.nregion];
      if (dropped) rfcuda_epoch_bump();
      return 0;
    }
  return 0;
}

static int wc_convert(WcEntry *x)
{
  if (rfcuda_to_bf16_rows(x->b, x->w, x->rows, x->cols, x->ld)) return 1;
  if (x->stale) wc.nstale--;
  x->stale = 0;
  return 0;
}

int rfcuda_weights_bf16(const float *w, size_t rows, int cols, int ld, const __nv_bfloat16 **out)
{
  WcEntry    *x = NULL;
  cudaError_t e;

  *out = NULL;
  if (!wc_in_region((const char *)w, rows * (size_t)cols * sizeof(float))) return 0;
  for (int i = 0; i < wc.n && !x; i++)
    if (wc.e[i].w == w && wc.e[i].rows == rows && wc.e[i].cols == cols && wc.e[i].ld == ld) x = &wc.e[i];
  if (!x) {
    if (wc.n == wc.cap) {
      int      cap = wc.cap ? 2 * wc.cap : 64;
      WcEntry *ne  = (WcEntry *)realloc(wc.e, (size_t)cap * sizeof *ne);
      RFCUDA_REQUIRE(ne, "rfcuda_weights_bf16: out of host memory for %d entries", cap);
      wc.e = ne, wc.cap = cap;
    }
    x = &wc.e[wc.n];
    *x = (WcEntry){w, rows, cols, ld, NULL, 1};
    e  = cudaMalloc((void **)&x->b, rows * (size_t)ld * sizeof(__nv_bfloat16));
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      return 0; /* no room for a copy: the caller converts into scratch as before */
    }
    wc.n++;
    wc.nstale++;
  }
  if (x->stale && wc_convert(x)) return 1;
  *out = x->b;
  return 0;
}

int rfcuda_weights_refresh(void)
{
  for (int i = 0; i < wc.n && wc.nstale > 0; i++)
    if (wc.e[i].stale && wc_convert(&wc.e[i])) return 1;
  return 0;
}

size_t rfcuda_weights_bf16_bytes(void)
{
  size_t b = 0;
  for (int i = 0; i < wc.n; i++) b += wc.e[i].rows * (size_t)wc.e[i].ld * sizeof(__nv_bfloat16);
  return b;
}
