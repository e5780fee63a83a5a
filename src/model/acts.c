/* acts.c: sizing and carving of the activation buffers. Training activations
 * (everything the backward needs, plus a few gradient scratch buffers reused
 * by every layer, as in llm.c) and the cached-forward buffers each live in one
 * float and one int slab, grown only when a larger shape arrives. */
#include <limits.h>
#include <math.h>

#include "model_impl.h"

/* Each buffer starts on a 256-byte boundary so device kernels see aligned rows. */
#define ACTS_ALIGN 64

static size_t round_up(size_t n) { return (n + ACTS_ALIGN - 1) / ACTS_ALIGN * ACTS_ALIGN; }

/* Hands out the next n elements of a slab; with slab == NULL it only counts. */
static float *take_f(float *slab, size_t *off, size_t n)
{
  float *p = slab ? slab + *off : NULL;
  *off += round_up(n);
  return p;
}

static int *take_i(int *slab, size_t *off, size_t n)
{
  int *p = slab ? slab + *off : NULL;
  *off += round_up(n);
  return p;
}

static size_t layer_layout(float *base, size_t N, const ModelDims *d, size_t natt, ModelLayerActs *la)
{
  ModelLayerActs dummy;
  size_t       off = 0, C = d->C;

  if (!la) la = &dummy;
  la->ln1      = take_f(base, &off, N * C);
  la->ln1_mean = take_f(base, &off, N);
  la->ln1_rstd = take_f(base, &off, N);
  la->qkv      = take_f(base, &off, N * model_dims_qkv(d));
  la->qk_in    = take_f(base, &off, d->qk_norm ? N * (d->Ca + d->Ckv) : 0);
  la->qk_rstd  = take_f(base, &off, d->qk_norm ? N * (d->NH + d->NKV) : 0);
  la->atty     = take_f(base, &off, N * d->Ca);
  la->att      = take_f(base, &off, natt);
  la->res2     = take_f(base, &off, N * C);
  la->ln2      = take_f(base, &off, N * C);
  la->ln2_mean = take_f(base, &off, N);
  la->ln2_rstd = take_f(base, &off, N);
  la->fch      = take_f(base, &off, N * model_dims_fc(d));
  la->fch_gelu = take_f(base, &off, N * d->F);
  la->res3     = take_f(base, &off, N * C);
  return off;
}

/* Carves (or, with a == NULL, only counts) the training buffers for (B,T)
 * of a shard (sh NULL: the whole model). */
static void train_layout(const ModelConfig *cfg, const ModelShard *sh, int B, int T, float *sf, int *si, ModelActs *a,
                         size_t *nf, size_t *ni)
{
  ModelActs dummy;
  ModelDims d = model_dims(cfg, sh);
  size_t  N = (size_t)B * T, C = d.C, V = d.V, L = d.L;
  size_t  tile = cfg->head == MODEL_HEAD_LM ? PetscMin(N, (size_t)model_logits_tile_rows(cfg->vocab_size)) : N;
  size_t  natt = tensor_attention_saved((size_t)B, (size_t)d.NH, (size_t)T);
  size_t  head = cfg->head == MODEL_HEAD_LM ? tile * V : N;
  size_t  of = 0, oi = 0;

  if (!a) {
    a  = &dummy;
    sf = NULL;
    si = NULL;
  }
  a->tok          = take_i(si, &oi, N);
  a->pos          = take_i(si, &oi, N);
  a->target       = take_i(si, &oi, N);
  a->mask_off     = cfg->head == MODEL_HEAD_LM ? take_i(si, &oi, N + 1) : NULL;
  a->encoded      = take_f(sf, &of, N * C);
  a->layer_stride = layer_layout(NULL, N, &d, natt, NULL);
  a->layer_base   = take_f(sf, &of, L * a->layer_stride);
  a->lnf          = take_f(sf, &of, N * C);
  a->lnf_mean     = take_f(sf, &of, N);
  a->lnf_rstd     = take_f(sf, &of, N);
  a->head_out     = take_f(sf, &of, head);
  a->lse          = take_f(sf, &of, N);
  a->logprob      = take_f(sf, &of, N);
  a->entropy      = cfg->head == MODEL_HEAD_LM ? take_f(sf, &of, N) : NULL;
  a->proj         = take_f(sf, &of, N * C);
  a->dres         = take_f(sf, &of, N * C);
  a->dA           = take_f(sf, &of, N * model_dims_scratch(&d));
  a->dB           = take_f(sf, &of, N * model_dims_scratch(&d));
  a->dhead        = take_f(sf, &of, N);
  a->dlogits      = cfg->head == MODEL_HEAD_LM ? take_f(sf, &of, tile * V) : NULL;
  a->tile         = (int)tile;
  *nf             = of;
  *ni             = oi;
}

/* N rows through the trunk, M of them through the head (c_sel holds those
 * M rows of the residual stream when M < N). */
static void cached_layout(const ModelConfig *cfg, const ModelShard *sh, int N_, int M_, float *sf, int *si,
                          ModelActs *a, size_t *nf, size_t *ni)
{
  ModelActs dummy;
  ModelDims d = model_dims(cfg, sh);
  size_t  N = (size_t)N_, M = (size_t)M_, C = d.C, V = d.V;
  size_t  of = 0, oi = 0;

  if (!a) {
    a  = &dummy;
    sf = NULL;
    si = NULL;
  }
  a->c_tok      = take_i(si, &oi, N);
  a->c_pos      = take_i(si, &oi, N);
  a->c_slot     = take_i(si, &oi, N);
  a->c_x        = take_f(sf, &of, N * C);
  a->c_ln       = take_f(sf, &of, N * C);
  a->c_mean     = take_f(sf, &of, N);
  a->c_rstd     = take_f(sf, &of, N);
  a->c_qkv      = take_f(sf, &of, N * model_dims_qkv(&d));
  a->c_atty     = take_f(sf, &of, N * d.Ca);
  a->c_proj     = take_f(sf, &of, N * C);
  a->c_fch      = take_f(sf, &of, N * model_dims_fc(&d));
  a->c_fch_gelu = take_f(sf, &of, N * d.F);
  a->c_sel      = take_f(sf, &of, M < N ? M * C : 0);
  a->c_out      = take_f(sf, &of, cfg->head == MODEL_HEAD_LM ? M * V : M);
  *nf           = of;
  *ni           = oi;
}

/* One slab buffer to `bytes`: where the backend can, the pages already
 * touched stay (a slab that grows with the longest batch so far then costs
 * each page once), else a fresh zeroed block. */
static PetscErrorCode slab_grow(const Backend *be, void **p, size_t bytes)
{
  PetscFunctionBegin;
  if (be->grow) PetscCall(be->grow(p, bytes));
  else {
    if (*p) PetscCall(be->free(*p));
    *p = NULL;
    PetscCall(be->alloc(bytes, p));
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

static double acts_grown; /* model_acts_grown_bytes */

static double logits_tile_mb = MODEL_LOGITS_TILE_MB; /* -logits_tile_mb */

PetscErrorCode model_set_logits_tile_mb(double mb)
{
  PetscFunctionBegin;
  PetscCheck(mb >= 0 && mb <= 1048576, PETSC_COMM_SELF, PETSC_ERR_ARG_OUTOFRANGE,
             "-logits_tile_mb %g must be 0 (no tiles) or a size in MiB up to 1048576", mb);
  logits_tile_mb = mb;
  PetscFunctionReturn(PETSC_SUCCESS);
}

int model_logits_tile_rows(int vocab_size)
{
  double rows;

  if (logits_tile_mb <= 0) return INT_MAX;
  rows = floor(logits_tile_mb * 1048576.0 / (4.0 * vocab_size));
  return rows < 1 ? 1 : rows >= INT_MAX ? INT_MAX : (int)rows;
}

double model_acts_grown_bytes(void) { return acts_grown; }

/* Grows a slab to at least (nf, ni) elements; contents are not kept. */
static PetscErrorCode slab_reserve(const Backend *be, ModelSlab *s, size_t nf, size_t ni)
{
  PetscFunctionBegin;
  if (nf > s->cap_f) {
    acts_grown += (double)(nf - s->cap_f) * sizeof(float);
    PetscCall(slab_grow(be, (void **)&s->slab_f, nf * sizeof(float)));
    s->cap_f = nf;
  }
  if (ni > s->cap_i) {
    acts_grown += (double)(ni - s->cap_i) * sizeof(int);
    PetscCall(slab_grow(be, (void **)&s->slab_i, ni * sizeof(int)));
    s->cap_i = ni;
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode slab_free(const Backend *be, ModelSlab *s)
{
  PetscFunctionBegin;
  if (s->slab_f) PetscCall(be->free(s->slab_f));
  if (s->slab_i) PetscCall(be->free(s->slab_i));
  s->slab_f = NULL;
  s->slab_i = NULL;
  s->cap_f = s->cap_i = 0;
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode model_acts_create(ModelActs **acts)
{
  PetscFunctionBegin;
  PetscCall(PetscNew(acts));
  (*acts)->send_fwd = (*acts)->send_bwd = MPI_REQUEST_NULL;
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode model_acts_destroy(const Backend *be, ModelActs **acts)
{
  PetscFunctionBegin;
  if (!*acts) PetscFunctionReturn(PETSC_SUCCESS);
  PetscCall(comm_wait(&(*acts)->send_fwd));
  PetscCall(comm_wait(&(*acts)->send_bwd));
  PetscCall(slab_free(be, &(*acts)->train));
  PetscCall(slab_free(be, &(*acts)->cached));
  if ((*acts)->mask_ids) PetscCall(be->free((*acts)->mask_ids));
  PetscCall(PetscFree(*acts));
  PetscFunctionReturn(PETSC_SUCCESS);
}

void model_acts_train_size(const ModelConfig *cfg, const ModelShard *sh, int B, int T, size_t *nf, size_t *ni)
{
  train_layout(cfg, sh, B, T, NULL, NULL, NULL, nf, ni);
}

PetscErrorCode model_acts_train_resize(Model *lm, int B, int T)
{
  ModelActs *a = lm->acts;
  size_t   nf, ni;

  PetscFunctionBegin;
  PetscCall(comm_wait(&a->send_fwd)); /* the buffers are about to be overwritten */
  PetscCall(comm_wait(&a->send_bwd));
  train_layout(&lm->cfg, &lm->sh, B, T, NULL, NULL, NULL, &nf, &ni);
  PetscCall(slab_reserve(lm->be, &a->train, nf, ni));
  train_layout(&lm->cfg, &lm->sh, B, T, a->train.slab_f, a->train.slab_i, a, &nf, &ni);
  a->B        = B;
  a->T        = T;
  a->N        = B * T;
  a->have_lse = PETSC_FALSE;
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode model_acts_cached_resize(Model *lm, int N, int M)
{
  ModelActs *a = lm->acts;
  size_t   nf, ni;

  PetscFunctionBegin;
  cached_layout(&lm->cfg, &lm->sh, N, M, NULL, NULL, NULL, &nf, &ni);
  PetscCall(slab_reserve(lm->be, &a->cached, nf, ni));
  cached_layout(&lm->cfg, &lm->sh, N, M, a->cached.slab_f, a->cached.slab_i, a, &nf, &ni);
  a->cached_N = N;
  a->cached_M = M;
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* l is the global layer index (one of the shard's). */
void model_acts_layer(const Model *lm, int l, ModelLayerActs *la)
{
  const ModelActs *a    = lm->acts;
  ModelDims      d    = model_dims(&lm->cfg, &lm->sh);
  size_t         N    = (size_t)a->N;
  size_t         natt = tensor_attention_saved((size_t)a->B, (size_t)d.NH, (size_t)a->T);

  layer_layout(a->layer_base + (size_t)(l - lm->sh.l0) * a->layer_stride, N, &d, natt, la);
}

/* Activation slots for micro-batches in flight on a pipeline stage; slot 0
 * is the one model_create made. */
PetscErrorCode model_acts_slots(Model *lm, int nslots)
{
  PetscFunctionBegin;
  PetscCheck(nslots >= 1, PETSC_COMM_SELF, PETSC_ERR_ARG_OUTOFRANGE, "model_acts_slots: %d slots", nslots);
  if (nslots <= lm->nslots) PetscFunctionReturn(PETSC_SUCCESS);
  PetscCall(PetscRealloc(nslots * sizeof(ModelActs *), &lm->slots));
  for (int k = lm->nslots; k < nslots; k++) PetscCall(model_acts_create(&lm->slots[k]));
  lm->nslots = nslots;
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode model_acts_select(Model *lm, int k)
{
  PetscFunctionBegin;
  PetscCheck(k >= 0 && k < lm->nslots, PETSC_COMM_SELF, PETSC_ERR_ARG_OUTOFRANGE, "model_acts_select: slot %d of %d", k,
             lm->nslots);
  lm->acts = lm->slots[k];
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Grows the device buffer of the allowed-token ids to at least n ints; contents are not kept. */
PetscErrorCode model_acts_mask_reserve(Model *lm, size_t n)
{
  ModelActs *a = lm->acts;

  PetscFunctionBegin;
  if (n <= a->mask_cap) PetscFunctionReturn(PETSC_SUCCESS);
  if (a->mask_ids) PetscCall(lm->be->free(a->mask_ids));
  a->mask_ids = NULL;
  a->mask_cap = 0;
  PetscCall(lm->be->alloc(n * sizeof(int), (void **)&a->mask_ids));
  a->mask_cap = n;
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Bytes of the training activations, gradient scratch included (the
 * cached-forward buffers are small and allocated only when decoding). */
size_t model_activation_bytes(const ModelConfig *cfg, int B, int T)
{
  size_t nf, ni;

  model_acts_train_size(cfg, NULL, B, T, &nf, &ni);
  return nf * sizeof(float) + ni * sizeof(int);
}

PetscErrorCode model_training_bytes(const ModelConfig *cfg, const Backend *be, int B, int T, double *weights,
                                    double *acts)
{
  ModelTensor *t;
  int          n;
  size_t       nparams;

  PetscFunctionBegin;
  PetscCall(model_tensor_table(cfg, &t, &n, &nparams));
  PetscCall(PetscFree(t));
  *weights = (4.0 * sizeof(float) + (be ? backend_weight_copy_bytes(be) : 0.0)) * (double)nparams;
  *acts    = (double)model_activation_bytes(cfg, B, T);
  PetscFunctionReturn(PETSC_SUCCESS);
}
