/* measure.c: the model tables of a profile. The parts are timed through the
 * model's public calls, as a run makes them, on models of 1 and 1+K layers
 * of the deck's shape: one block = (T(1+K) - T(1)) / K, the embedding is
 * timed alone through the backend's encoder op (plus the tp sum a sharded
 * embedding does), and the head is what remains of T(1), smoothed to a line
 * in the tokens (head_fit). The critic shares the actor's trunk, so only
 * its 1-layer model is timed (its own head). */
#include "profile_impl.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

static int cmp_double(const void *a, const void *b)
{
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

PetscErrorCode prof_time(const ProfTimer *tm, ProfWork work, void *ctx, double *seconds)
{
  double *t, best;

  PetscFunctionBegin;
  PetscCall(PetscMalloc1(tm->repeats, &t));
  for (int k = 0; k < tm->warmup + tm->repeats; k++) {
    double t0;
    PetscCall(tm->be->sync());
    PetscCallMPI(sys_mpi_barrier(PETSC_COMM_WORLD));
    t0 = MPI_Wtime();
    PetscCall(work(ctx));
    PetscCall(tm->be->sync());
    if (k >= tm->warmup) t[k - tm->warmup] = MPI_Wtime() - t0;
  }
  /* the fastest repeat: interference from other processes only ever adds
   * time, and the medians of 3 still let one busy spell of the machine
   * triple a block's entry now and then (a block is a difference of two
   * such timings) */
  qsort(t, (size_t)tm->repeats, sizeof *t, cmp_double);
  best = t[0];
  PetscCall(PetscFree(t));
  PetscCallMPI(sys_mpi_allreduce(&best, seconds, 1, MPI_DOUBLE, MPI_MAX, PETSC_COMM_WORLD));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* One case: a model (or NULL on a rank without work in this tp) at one
 * (rows, len), with host inputs for every phase. */
typedef struct {
  Model      *g;
  ModelKVCache *kv;
  const Mesh *mesh;
  int         rows, len;
  int *tok, *target, *slot, *pos, *dslot, *dpos, *last; /* last: each prefill sequence's last row, the head's rows */
  float      *grad, *out;
  /* the embedding alone, on device */
  float *wte, *wpe, *emb, *demb;
  int   *dtok, *dposd;
} Case;

static PetscErrorCode w_fwd(void *v)
{
  Case *c = (Case *)v;

  PetscFunctionBegin;
  if (!c->g) PetscFunctionReturn(PETSC_SUCCESS);
  PetscCall(model_forward(c->g, c->tok, c->rows, c->len));
  if (c->g->cfg.head == MODEL_HEAD_LM) PetscCall(model_logprobs(c->g, c->target, c->out));
  else PetscCall(model_values_get(c->g, c->out));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode w_bwd(void *v)
{
  Case *c = (Case *)v;

  PetscFunctionBegin;
  if (!c->g) PetscFunctionReturn(PETSC_SUCCESS);
  if (c->g->cfg.head == MODEL_HEAD_LM) PetscCall(model_backward_logprob(c->g, c->target, c->grad));
  else PetscCall(model_backward_values(c->g, c->grad));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode w_prefill(void *v)
{
  Case *c = (Case *)v;

  PetscFunctionBegin;
  if (c->g)
    PetscCall(model_forward_cached(c->g, c->kv, c->tok, c->slot, c->pos, c->rows * c->len, c->last, c->rows, c->out));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode w_decode(void *v)
{
  Case *c = (Case *)v;

  PetscFunctionBegin;
  if (c->g) PetscCall(model_forward_cached(c->g, c->kv, c->tok, c->dslot, c->dpos, c->rows, NULL, c->rows, c->out));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* the embedding of a sharded model: the encoder op over this rank's
 * vocabulary rows, then the sum over the tp group (as the model does) */
static PetscErrorCode embed_fwd(Case *c, int N)
{
  const Model *g = c->g;

  PetscFunctionBegin;
  if (!g) PetscFunctionReturn(PETSC_SUCCESS);
  PetscCall(g->be->encoder_forward(c->emb, c->dtok, c->dposd, c->wte, c->wpe, N, g->cfg.n_embd, g->v0, g->Vl));
  if (c->mesh) PetscCall(comm_allreduce_sum(&c->mesh->tp_comm, c->emb, (size_t)N * g->cfg.n_embd));
  PetscFunctionReturn(PETSC_SUCCESS);
}
static PetscErrorCode w_embed_tokens(void *v) { return embed_fwd((Case *)v, ((Case *)v)->rows * ((Case *)v)->len); }
static PetscErrorCode w_embed_decode(void *v) { return embed_fwd((Case *)v, ((Case *)v)->rows); }
static PetscErrorCode w_embed_bwd(void *v)
{
  Case      *c = (Case *)v;
  const Model *g = c->g;

  PetscFunctionBegin;
  if (g)
    PetscCall(g->be->encoder_backward(c->wte, c->wpe, c->demb, c->dtok, c->dposd, c->rows * c->len, g->cfg.n_embd,
                                      g->v0, g->Vl));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Host and device inputs for the largest case; every case uses a prefix. */
static PetscErrorCode case_alloc(Case *c, const Model *g, int maxrows, int maxlen)
{
  size_t N = (size_t)maxrows * maxlen, C = g->cfg.n_embd, V = g->cfg.vocab_size;

  PetscFunctionBegin;
  PetscCall(PetscMalloc6(N, &c->tok, N, &c->target, N, &c->slot, N, &c->pos, maxrows, &c->dslot, maxrows, &c->dpos));
  PetscCall(PetscMalloc3(N, &c->grad, N * V, &c->out, maxrows, &c->last));
  for (size_t i = 0; i < N; i++) c->tok[i] = c->target[i] = (int)((i * 7 + 3) % V), c->grad[i] = 1e-3f;
  PetscCall(g->be->alloc((size_t)g->Vl * C * sizeof(float), (void **)&c->wte));
  PetscCall(g->be->alloc((size_t)g->cfg.n_positions * C * sizeof(float), (void **)&c->wpe));
  PetscCall(g->be->alloc(N * C * sizeof(float), (void **)&c->emb));
  PetscCall(g->be->alloc(N * C * sizeof(float), (void **)&c->demb));
  PetscCall(g->be->alloc(N * sizeof(int), (void **)&c->dtok));
  PetscCall(g->be->alloc(N * sizeof(int), (void **)&c->dposd));
  PetscCall(g->be->from_host(c->dtok, c->tok, N * sizeof(int)));
  PetscCall(model_kv_create(g, maxrows, maxlen, &c->kv));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode case_free(Case *c)
{
  const Backend *be;

  PetscFunctionBegin;
  if (!c->g) PetscFunctionReturn(PETSC_SUCCESS);
  be = c->g->be;
  PetscCall(model_kv_destroy(c->g, &c->kv));
  PetscCall(be->free(c->wte));
  PetscCall(be->free(c->wpe));
  PetscCall(be->free(c->emb));
  PetscCall(be->free(c->demb));
  PetscCall(be->free(c->dtok));
  PetscCall(be->free(c->dposd));
  PetscCall(PetscFree6(c->tok, c->target, c->slot, c->pos, c->dslot, c->dpos));
  PetscCall(PetscFree3(c->grad, c->out, c->last));
  PetscCall(model_destroy(&c->g));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* positions of (rows, len): prefill rows r*len+j = (slot r, position j);
 * decode row r = (slot r, position len-1) */
static PetscErrorCode case_shape(Case *c, int rows, int len)
{
  PetscFunctionBegin;
  c->rows = rows, c->len = len;
  if (!c->g) PetscFunctionReturn(PETSC_SUCCESS);
  for (int r = 0; r < rows; r++) {
    for (int j = 0; j < len; j++) c->slot[r * len + j] = r, c->pos[r * len + j] = j;
    c->dslot[r] = r, c->dpos[r] = len - 1, c->last[r] = r * len + len - 1;
  }
  PetscCall(c->g->be->from_host(c->dposd, c->pos, (size_t)rows * len * sizeof(int)));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* The tp group of this rank: consecutive ranks; NULL model when the world
 * does not divide into groups of tp and this rank is left over. */
static PetscErrorCode case_create(const ModelConfig *cfg, const Backend *be, int tp, int maxrows, int maxlen, Case *c)
{
  int size, rank;

  PetscFunctionBegin;
  PetscCall(PetscMemzero(c, sizeof *c));
  PetscCallMPI(MPI_Comm_size(PETSC_COMM_WORLD, &size));
  PetscCallMPI(MPI_Comm_rank(PETSC_COMM_WORLD, &rank));
  if (rank >= size / tp * tp) PetscFunctionReturn(PETSC_SUCCESS);
  if (tp == 1) PetscCall(model_create(cfg, be, &c->g));
  else {
    int ranks[64], g0 = rank / tp * tp;
    for (int k = 0; k < tp; k++) ranks[k] = g0 + k;
    PetscCall(mesh_get(ranks, tp, 1, 1, tp, &c->mesh));
    PetscCall(model_create_on_mesh(cfg, be, c->mesh, &c->g));
  }
  PetscCall(model_init_random(c->g, 1));
  PetscCall(case_alloc(c, c->g, maxrows, maxlen));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* t[ph][ir][il]: the whole model's time per phase over the grid; e[..]: the embedding's */
static PetscErrorCode time_grid(const ProfTimer *tm, Case *c, const ProfGrid *gr, double *t, double *e)
{
  ProfWork whole[COST_NPHASE] = { w_fwd, w_bwd, w_prefill, w_decode },
           emb[COST_NPHASE]   = { w_embed_tokens, w_embed_bwd, w_embed_tokens, w_embed_decode };
  size_t   stride = (size_t)gr->nrows * gr->nlen;

  PetscFunctionBegin;
  for (int ir = 0; ir < gr->nrows; ir++)
    for (int il = 0; il < gr->nlen; il++) {
      size_t at = (size_t)ir * gr->nlen + il;
      PetscCall(case_shape(c, (int)gr->rows[ir], (int)gr->len[il]));
      for (int ph = 0; ph < COST_NPHASE; ph++) {
        if (ph == COST_BWD) PetscCall(w_fwd(c)); /* the backward of this shape's forward */
        PetscCall(prof_time(tm, whole[ph], c, &t[ph * stride + at]));
        if (e) PetscCall(prof_time(tm, emb[ph], c, &e[ph * stride + at]));
      }
    }
  PetscFunctionReturn(PETSC_SUCCESS);
}

static void shape_of(const ModelConfig *cfg, PetscBool value_head, CostShape *s)
{
  cost_shape_from_model(cfg, s);
  s->value_head = value_head;
}

/* The head's entries of one model, tp and phase, replaced by a straight
 * line in its tokens (rows x len; decode: rows), fitted by Theil-Sen (the
 * median of the pairwise slopes, then the median intercept). The head is a
 * per-token matrix product and loss, so a line is its physics; what the
 * grid holds is a small difference of two timings (the whole 1-layer model
 * less a block and the embedding), whose noise alone made single entries
 * 0 or 20 times their neighbours, and a median ignores those. */
static PetscErrorCode head_fit(ProfileModel *m, int itp, int ph)
{
  int     n = m->nrows * m->nlen, np = 0;
  double *x, *y, *sl, a, b;

  PetscFunctionBegin;
  PetscCall(PetscMalloc3(n, &x, n, &y, (size_t)n * n, &sl));
  for (int ir = 0; ir < m->nrows; ir++)
    for (int il = 0; il < m->nlen; il++) {
      int k = ir * m->nlen + il;
      x[k]  = ph == COST_DECODE ? m->rows[ir] : m->rows[ir] * m->len[il];
      y[k]  = *profile_entry(m, itp, COST_PART_HEAD, ph, ir, il);
    }
  for (int i = 0; i < n; i++)
    for (int j = i + 1; j < n; j++)
      if (x[j] != x[i]) sl[np++] = (y[j] - y[i]) / (x[j] - x[i]);
  qsort(sl, (size_t)np, sizeof *sl, cmp_double);
  b = np ? PetscMax(0, np % 2 ? sl[np / 2] : 0.5 * (sl[np / 2 - 1] + sl[np / 2])) : 0;
  for (int k = 0; k < n; k++) sl[k] = y[k] - b * x[k];
  qsort(sl, (size_t)n, sizeof *sl, cmp_double);
  a = PetscMax(0, n % 2 ? sl[n / 2] : 0.5 * (sl[n / 2 - 1] + sl[n / 2]));
  for (int ir = 0; ir < m->nrows; ir++)
    for (int il = 0; il < m->nlen; il++)
      *profile_entry(m, itp, COST_PART_HEAD, ph, ir, il) = a + b * x[ir * m->nlen + il];
  PetscCall(PetscFree3(x, y, sl));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode prof_models(const ProfTimer *tm, const ModelConfig *cfg, const ProfGrid *gr, Profile *pf)
{
  size_t  stride = (size_t)gr->nrows * gr->nlen, n = COST_NPHASE * stride;
  double *t1, *tk, *e, *tc;
  int     maxrows = (int)gr->rows[gr->nrows - 1], maxlen = (int)gr->len[gr->nlen - 1], K = gr->extra_layers;
  ProfileModel *pm = pf->model + pf->nmodel;

  PetscFunctionBegin;
  PetscCheck(pf->nmodel + 2 <= PROFILE_MAX_MODELS, PETSC_COMM_SELF, PETSC_ERR_PLIB,
             "a profile holds at most %d model tables", PROFILE_MAX_MODELS);
  for (int i = 0; i < 2; i++) {
    pf->nmodel++; /* counted first, so profile_free frees a half-made table */
    PetscCall(profile_model_alloc(&pm[i], gr->ntp, gr->nrows, gr->nlen));
    shape_of(cfg, i ? PETSC_TRUE : PETSC_FALSE, &pm[i].shape);
    PetscCall(PetscArraycpy(pm[i].tp, gr->tp, gr->ntp));
    PetscCall(PetscArraycpy(pm[i].rows, gr->rows, gr->nrows));
    PetscCall(PetscArraycpy(pm[i].len, gr->len, gr->nlen));
  }
  PetscCall(PetscMalloc4(n, &t1, n, &tk, n, &e, n, &tc));
  for (int itp = 0; itp < gr->ntp; itp++) {
    ModelConfig one = *cfg, deep = *cfg, crit = *cfg;
    Case      c;

    one.n_layer = crit.n_layer = 1, deep.n_layer = 1 + K, one.head = deep.head = MODEL_HEAD_LM,
    crit.head = MODEL_HEAD_SCALAR;
    PetscCall(case_create(&one, tm->be, gr->tp[itp], maxrows, maxlen, &c));
    PetscCall(time_grid(tm, &c, gr, t1, e));
    PetscCall(case_free(&c));
    PetscCall(case_create(&deep, tm->be, gr->tp[itp], maxrows, maxlen, &c));
    PetscCall(time_grid(tm, &c, gr, tk, NULL));
    PetscCall(case_free(&c));
    PetscCall(case_create(&crit, tm->be, gr->tp[itp], maxrows, maxlen, &c));
    PetscCall(time_grid(tm, &c, gr, tc, NULL));
    PetscCall(case_free(&c));
    for (int ph = 0; ph < COST_NPHASE; ph++)
      for (size_t at = 0; at < stride; at++) {
        size_t k     = ph * stride + at;
        double block = PetscMax(0, (tk[k] - t1[k]) / K);
        int    ir = (int)(at / gr->nlen), il = (int)(at % gr->nlen);
        for (int i = 0; i < 2; i++) {
          double whole = i ? tc[k] : t1[k];
          *profile_entry(&pm[i], itp, COST_PART_EMBED, ph, ir, il) = e[k];
          *profile_entry(&pm[i], itp, COST_PART_BLOCK, ph, ir, il) = block;
          *profile_entry(&pm[i], itp, COST_PART_HEAD, ph, ir, il)  = PetscMax(0, whole - block - e[k]);
        }
      }
    for (int i = 0; i < 2; i++)
      for (int ph = 0; ph < COST_NPHASE; ph++) PetscCall(head_fit(&pm[i], itp, ph));
  }
  PetscCall(PetscFree4(t1, tk, e, tc));
  PetscFunctionReturn(PETSC_SUCCESS);
}
