/* prims.c: CostPrims from a measured profile (docs/costmodel.md, "Measured
 * primitives"). Every table is read as a piecewise power law: log(seconds)
 * is linear in log(size) between grid points (bilinear in (log rows, log len)
 * for the model parts), because the measured costs are a fixed overhead plus
 * a part linear in tokens (plus one quadratic in len for attention), which a
 * power law follows piecewise far better than a line through the origin.
 * Outside the grid the edge segment's log-log slope goes on, clamped to what
 * the cost can physically do (Slopes below): more rows or more bytes never
 * cost less than proportionally more once past the grid, and less work never
 * costs more. */
#include "profile.h"
#include <math.h>
#include <string.h>

typedef struct {
  char    path[PETSC_MAX_PATH_LEN];
  Profile pf;
} PrimsCtx;

/* The allowed log-log slope when extrapolating above the last grid point
 * and below the first. */
typedef struct {
  double up_lo, up_hi, down_lo, down_hi;
} Slopes;

static const Slopes rows_slopes   = {1, 1, 0, 1}; /* more sequences: proportionally more work */
static const Slopes tokens_slopes = {1, 2, 0, 1}; /* longer sequences: at least linear, at most quadratic (attention) */
static const Slopes decode_slopes = {0, 1, 0, 1}; /* one token over a longer context: at most linear in the context */
static const Slopes size_slopes   = {1, 1, 0, 1}; /* parameters, message bytes: bandwidth-bound past the grid */

static double clampd(double x, double lo, double hi) { return x < lo ? lo : x > hi ? hi : x; }

/* y(x) from n points (xs[k], ys[k*stride]). Between neighbours: a power law
 * when both are positive, a straight line when one is 0 (a part too small
 * to time there). Outside: the edge segment's power law with its slope
 * clamped by sl (without a slope, both ends not positive: sl's lowest slope
 * above, proportional below). One point: proportional both ways. */
static double interp1(double x, int n, const double *xs, const double *ys, size_t stride, const Slopes *sl)
{
  double y0, y1, s;
  int    i;

  if (n == 1) return ys[0] * x / xs[0];
  for (i = 0; i < n - 2 && x > xs[i + 1]; i++) {}
  y0 = ys[i * stride], y1 = ys[(i + 1) * stride];
  s  = y0 > 0 && y1 > 0 ? log(y1 / y0) / log(xs[i + 1] / xs[i]) : NAN;
  if (x > xs[n - 1]) return y1 * pow(x / xs[n - 1], isnan(s) ? sl->up_lo : clampd(s, sl->up_lo, sl->up_hi));
  if (x < xs[0]) return y0 * pow(x / xs[0], isnan(s) ? sl->down_hi : clampd(s, sl->down_lo, sl->down_hi));
  if (isnan(s)) return y0 + (y1 - y0) * (x - xs[i]) / (xs[i + 1] - xs[i]);
  return y0 * pow(x / xs[i], s);
}

/* One table (a tp, part and phase): interpolate in len at the two rows that
 * bracket `rows` (the edge pair outside), then in rows between those two. */
static double interp2(const ProfileModel *m, int itp, int part, int ph, double rows, double len)
{
  const double *t  = profile_entry(m, itp, part, ph, 0, 0);
  const Slopes *ls = ph == COST_DECODE ? &decode_slopes : &tokens_slopes;
  double        g[2], xr[2];
  int           i = 0;

  if (m->nrows == 1) return interp1(len, m->nlen, m->len, t, 1, ls) * rows / m->rows[0];
  while (i < m->nrows - 2 && rows > m->rows[i + 1]) i++;
  for (int k = 0; k < 2; k++) {
    g[k]  = interp1(len, m->nlen, m->len, t + (size_t)(i + k) * m->nlen, 1, ls);
    xr[k] = m->rows[i + k];
  }
  return interp1(rows, 2, xr, g, 1, &rows_slopes);
}

static PetscBool shape_same(const CostShape *a, const CostShape *b)
{
  return a->n_embd == b->n_embd && a->n_head == b->n_head && a->n_kv_head == b->n_kv_head && a->n_ffn == b->n_ffn &&
                 a->vocab_size == b->vocab_size && a->n_positions == b->n_positions && a->gated == b->gated &&
                 a->value_head == b->value_head && cost_head_dim(a) == cost_head_dim(b)
             ? PETSC_TRUE
             : PETSC_FALSE;
}

/* FLOPs per token of a part, for the fallback on a shape the profile lacks */
static double part_flops(const CostShape *s, CostPart part)
{
  double C = s->n_embd, F = s->n_ffn, Q = s->n_head > 0 ? cost_q_width(s) : C,
         kv = s->n_head > 0 ? cost_kv_width(s) : C;
  switch (part) {
  case COST_PART_EMBED: return C;
  case COST_PART_BLOCK: return 2 * (C * (2 * Q + 2 * kv) + (s->gated ? 3 : 2) * C * F);
  default: return 2 * C * (s->value_head ? 1 : s->vocab_size);
  }
}

static int find_model(const Profile *pf, const CostShape *m, double *scale, CostPart part)
{
  int near = 0;

  *scale = 1;
  for (int i = 0; i < pf->nmodel; i++)
    if (shape_same(&pf->model[i].shape, m)) return i;
  for (int i = 0; i < pf->nmodel; i++)
    if (pf->model[i].shape.value_head == m->value_head) near = i;
  *scale = part_flops(m, part) / part_flops(&pf->model[near].shape, part);
  return near;
}

static double profile_compute(void *vctx, const CostShape *m, CostPart part, CostPhase ph, int tp, double rows,
                              double len)
{
  const Profile      *pf = &((PrimsCtx *)vctx)->pf;
  double              scale;
  const ProfileModel *pm;
  int                 itp = 0;

  if (rows <= 0 || len <= 0 || tp < 1) return 0;
  pm = &pf->model[find_model(pf, m, &scale, part)];
  /* the largest measured tp not above the one asked; a tp beyond the grid
   * gets that one's time shrunk in proportion (each rank's share of the work) */
  for (int k = 0; k < pm->ntp; k++)
    if (pm->tp[k] <= tp) itp = k;
  scale *= (double)pm->tp[itp] / tp;
  return scale * interp2(pm, itp, part, ph, rows, len);
}

static double profile_optimizer(void *vctx, double nparams)
{
  const Profile *pf = &((PrimsCtx *)vctx)->pf;
  if (nparams <= 0) return 0;
  return interp1(nparams, pf->nopt, pf->opt_n, pf->opt_sec, 1, &size_slopes);
}

/* The ring formulas' bandwidth factor: what one rank sends per byte of the
 * buffer (all-reduce: reduce-scatter + all-gather; broadcast: scatter +
 * all-gather, as MPICH does for large messages). */
static double ring_factor(CostColl op, int n)
{
  switch (op) {
  case COST_ALLREDUCE:
  case COST_BCAST: return 2.0 * (n - 1) / n;
  case COST_ALLGATHER: return (double)(n - 1) / n;
  default: return 1;
  }
}

static double coll_row(const Profile *pf, CostColl op, int im, double bytes)
{
  return interp1(bytes, pf->nbytes, pf->bytes, profile_coll_entry(pf, op, im, 0), 1, &size_slopes);
}

/* Intra-node measurements only: a group that spans nodes gets the same
 * times (the profile cannot know the network it did not see). */
static double profile_coll(void *vctx, CostColl op, int nranks, PetscBool internode, double bytes)
{
  const Profile *pf = &((PrimsCtx *)vctx)->pf;
  int            k  = 0;

  if (nranks <= 1 || bytes <= 0) return 0;
  if (op == COST_P2P) return coll_row(pf, op, 0, bytes); /* between two ranks whatever the mesh */
  while (k < pf->nmesh - 1 && pf->mesh[k + 1] <= nranks) k++;
  if (pf->mesh[k] == nranks) return coll_row(pf, op, k, bytes);
  if (nranks > pf->mesh[k] && k < pf->nmesh - 1) { /* between two measured mesh sizes: linear in nranks */
    double w = (double)(nranks - pf->mesh[k]) / (pf->mesh[k + 1] - pf->mesh[k]);
    return (1 - w) * coll_row(pf, op, k, bytes) + w * coll_row(pf, op, k + 1, bytes);
  }
  return coll_row(pf, op, k, bytes) * ring_factor(op, nranks) / ring_factor(op, pf->mesh[k]);
}

static PetscErrorCode profile_prims_destroy(void *vctx)
{
  PrimsCtx *c = (PrimsCtx *)vctx;

  PetscFunctionBegin;
  PetscCall(profile_free(&c->pf));
  PetscCall(PetscFree(c));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode cost_prims_profile(const char *path, CostPrims *p)
{
  PrimsCtx      *c;
  PetscErrorCode ierr;

  PetscFunctionBegin;
  PetscCall(PetscMemzero(p, sizeof *p));
  PetscCall(PetscNew(&c));
  PetscCall(PetscStrncpy(c->path, path, sizeof c->path));
  ierr = profile_read(path, &c->pf);
  if (ierr) (void)PetscFree(c);
  PetscCall(ierr);
  PetscCall(PetscSNPrintf(p->source, sizeof p->source, "profile %s", path));
  p->ctx             = c;
  p->ranks_per_node  = c->pf.ranks_per_node;
  p->mem_per_rank    = c->pf.mem_per_rank;
  p->bytes_per_param = c->pf.bytes_per_param;
  p->compute         = profile_compute;
  p->optimizer       = profile_optimizer;
  p->coll            = profile_coll;
  p->destroy         = profile_prims_destroy;
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode cost_prims_profile_check(const CostPrims *p, const CostShape *m, const char *role)
{
  const PrimsCtx *c;
  const char     *names[9] = { "n_embd",      "n_head", "n_kv_head",  "n_ffn",   "vocab_size",
                               "n_positions", "gated",  "value_head", "head_dim" };
  int             want[9]  = { m->n_embd,      m->n_head, m->n_kv_head,  m->n_ffn,        m->vocab_size,
                               m->n_positions, m->gated,  m->value_head, cost_head_dim(m) },
      best = -1, bestk = 0;

  PetscFunctionBegin;
  PetscCheck(p->compute == profile_compute, PETSC_COMM_SELF, PETSC_ERR_ARG_WRONG,
             "cost_prims_profile_check: primitives from %s are not from a profile", p->source);
  c = (const PrimsCtx *)p->ctx;
  for (int i = 0; i < c->pf.nmodel; i++) {
    const CostShape *s      = &c->pf.model[i].shape;
    int              have[9] = { s->n_embd,      s->n_head, s->n_kv_head,  s->n_ffn,        s->vocab_size,
                                 s->n_positions, s->gated,  s->value_head, cost_head_dim(s) },
        k                    = 0;
    while (k < 9 && have[k] == want[k]) k++;
    if (k == 9) PetscFunctionReturn(PETSC_SUCCESS);
    if (k > bestk || best < 0) best = i, bestk = k;
  }
  {
    const CostShape *s       = &c->pf.model[best].shape;
    int              have[9] = { s->n_embd,      s->n_head, s->n_kv_head,  s->n_ffn,        s->vocab_size,
                                 s->n_positions, s->gated,  s->value_head, cost_head_dim(s) };
    SETERRQ(PETSC_COMM_SELF, PETSC_ERR_ARG_WRONG,
            "profile %s does not hold the %s's shape: %s is %d there, %d here (profile this deck's models with -mode "
            "profile)",
            c->path, role, names[bestk], have[bestk], want[bestk]);
  }
}

/* A check that fails frees the primitives: the caller gets none. */
PetscErrorCode cost_prims_profile_for(const char *path, const CostWork *w, CostPrims *p)
{
  const CostShape *m[4]    = {&w->actor, &w->ref, &w->reward, &w->critic};
  const char      *role[4] = {"actor", "reference", "reward model", "critic"};
  PetscErrorCode   ierr    = PETSC_SUCCESS;

  PetscFunctionBegin;
  PetscCall(cost_prims_profile(path, p));
  for (int k = 0; k < 4 && !ierr; k++)
    if (!(k == 2 && w->reward_free) && !(k == 3 && w->critic_free)) ierr = cost_prims_profile_check(p, m[k], role[k]);
  if (ierr) (void)cost_prims_destroy(p);
  PetscCall(ierr);
  PetscFunctionReturn(PETSC_SUCCESS);
}

const Profile *cost_prims_profile_info(const CostPrims *p)
{
  return p->compute == profile_compute ? &((const PrimsCtx *)p->ctx)->pf : NULL;
}
