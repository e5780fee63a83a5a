/* profio.c: profile files (docs/formats.md, "Profile file"). Layout:
 *   /                attributes format "rlfuse profile", host, backend,
 *                    cores, threads, nranks, ranks_per_node, seconds,
 *                    mem_per_rank, bytes_per_param, collectives_modeled
 *                    (1: a one-rank job's modeled 2-rank entries),
 *                    cache_key (profiles of the cache only),
 *                    rlfuse_version, git_revision
 *   /model_<i>       attributes of the shape (n_layer, n_embd, n_head,
 *                    n_kv_head, n_ffn, vocab_size, n_positions, gated,
 *                    value_head, head_dim: 0 or absent n_embd / n_head);
 *                    datasets tp int [ntp], rows, len double,
 *                    seconds double [ntp][3 parts][4 phases][nrows][nlen]
 *   /optimizer       nparams, seconds double [nopt]
 *   /collectives     bytes double [nbytes], nranks int [nmesh],
 *                    seconds double [4 ops][nmesh][nbytes]
 * The reader checks every axis (positive, increasing) and every time
 * (finite, >= 0), so the interpolation never meets a table it cannot use. */
#include "profile.h"
#include "io.h"
#include <math.h>
#include <string.h>

static const char *const shape_int_names[] = { "n_layer",    "n_embd",      "n_head", "n_kv_head", "n_ffn",
                                               "vocab_size", "n_positions", "gated",  "value_head" };
#define NSHAPE_INT 9

static void shape_to_ints(const CostShape *s, int64_t *v)
{
  int64_t a[NSHAPE_INT] = { s->n_layer,    s->n_embd,      s->n_head,        s->n_kv_head,         s->n_ffn,
                            s->vocab_size, s->n_positions, s->gated ? 1 : 0, s->value_head ? 1 : 0 };
  memcpy(v, a, sizeof a);
}

static void shape_from_ints(const int64_t *v, CostShape *s)
{
  s->n_layer = (int)v[0], s->n_embd = (int)v[1], s->n_head = (int)v[2], s->n_kv_head = (int)v[3], s->n_ffn = (int)v[4];
  s->vocab_size = (int)v[5], s->n_positions = (int)v[6], s->gated = v[7] ? PETSC_TRUE : PETSC_FALSE,
  s->value_head = v[8] ? PETSC_TRUE : PETSC_FALSE;
}

PetscErrorCode profile_model_alloc(ProfileModel *m, int ntp, int nrows, int nlen)
{
  PetscFunctionBegin;
  m->ntp = ntp, m->nrows = nrows, m->nlen = nlen;
  PetscCall(PetscCalloc4(ntp, &m->tp, nrows, &m->rows, nlen, &m->len,
                         (size_t)ntp * COST_NPART * COST_NPHASE * nrows * nlen, &m->sec));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode profile_tables_alloc(Profile *pf, int nopt, int nmesh, int nbytes)
{
  PetscFunctionBegin;
  pf->nopt = nopt, pf->nmesh = nmesh, pf->nbytes = nbytes;
  PetscCall(PetscCalloc2(nopt, &pf->opt_n, nopt, &pf->opt_sec));
  PetscCall(PetscCalloc3(nbytes, &pf->bytes, nmesh, &pf->mesh, (size_t)COST_NCOLL * nmesh * nbytes, &pf->coll_sec));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode profile_free(Profile *pf)
{
  PetscFunctionBegin;
  for (int i = 0; i < pf->nmodel; i++)
    PetscCall(PetscFree4(pf->model[i].tp, pf->model[i].rows, pf->model[i].len, pf->model[i].sec));
  PetscCall(PetscFree2(pf->opt_n, pf->opt_sec));
  PetscCall(PetscFree3(pf->bytes, pf->mesh, pf->coll_sec));
  PetscCall(PetscMemzero(pf, sizeof *pf));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode write_doubles(IoId loc, const char *name, int ndim, const IoSize *dims, const double *v)
{
  PetscFunctionBegin;
  PetscCall(io_dataset_write(loc, name, IO_F64LE, IO_DOUBLE, ndim, dims, v));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode group_create(IoId file, const char *name, IoId *g)
{
  PetscFunctionBegin;
  PetscCall(io_group_create(file, "profile", name, g));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode profile_fill(IoId file, void *vctx)
{
  const Profile *pf = (const Profile *)vctx;
  const char    *ints[4] = {"cores", "threads", "nranks", "ranks_per_node"};
  int            iv[4]   = {pf->cores, pf->threads, pf->nranks, pf->ranks_per_node};
  IoId           g;

  PetscFunctionBegin;
  PetscCall(io_write_version(file));
  PetscCall(io_attr_write_string(file, "format", "rlfuse profile"));
  PetscCall(io_attr_write_string(file, "host", pf->host));
  PetscCall(io_attr_write_string(file, "backend", pf->backend));
  for (int k = 0; k < 4; k++) PetscCall(io_attr_write_int(file, ints[k], IO_I32LE, iv[k]));
  PetscCall(io_attr_write_double(file, "seconds", pf->seconds));
  PetscCall(io_attr_write_double(file, "mem_per_rank", pf->mem_per_rank));
  PetscCall(io_attr_write_double(file, "bytes_per_param", pf->bytes_per_param));
  PetscCall(io_attr_write_int(file, "collectives_modeled", IO_I32LE, pf->coll_modeled));
  if (pf->key[0]) PetscCall(io_attr_write_string(file, "cache_key", pf->key));
  for (int i = 0; i < pf->nmodel; i++) {
    const ProfileModel *m = &pf->model[i];
    char                name[32];
    int64_t             sv[NSHAPE_INT];
    IoSize              d5[5] = {(IoSize)m->ntp, COST_NPART, COST_NPHASE, (IoSize)m->nrows, (IoSize)m->nlen}, d1;

    PetscCall(PetscSNPrintf(name, sizeof name, "model_%d", i));
    PetscCall(group_create(file, name, &g));
    shape_to_ints(&m->shape, sv);
    for (int k = 0; k < NSHAPE_INT; k++) PetscCall(io_attr_write_int(g, shape_int_names[k], IO_I32LE, sv[k]));
    PetscCall(io_attr_write_int(g, "head_dim", IO_I32LE, m->shape.head_dim)); /* 0: n_embd / n_head */
    d1 = (IoSize)m->ntp;
    PetscCall(io_dataset_write(g, "tp", IO_I32LE, IO_INT, 1, &d1, m->tp));
    d1 = (IoSize)m->nrows;
    PetscCall(write_doubles(g, "rows", 1, &d1, m->rows));
    d1 = (IoSize)m->nlen;
    PetscCall(write_doubles(g, "len", 1, &d1, m->len));
    PetscCall(write_doubles(g, "seconds", 5, d5, m->sec));
    PetscCall(io_close(&g));
  }
  {
    IoSize d1 = (IoSize)pf->nopt;
    PetscCall(group_create(file, "optimizer", &g));
    PetscCall(write_doubles(g, "nparams", 1, &d1, pf->opt_n));
    PetscCall(write_doubles(g, "seconds", 1, &d1, pf->opt_sec));
    PetscCall(io_close(&g));
  }
  {
    IoSize d3[3] = {COST_NCOLL, (IoSize)pf->nmesh, (IoSize)pf->nbytes}, d1;
    PetscCall(group_create(file, "collectives", &g));
    d1 = (IoSize)pf->nbytes;
    PetscCall(write_doubles(g, "bytes", 1, &d1, pf->bytes));
    d1 = (IoSize)pf->nmesh;
    PetscCall(io_dataset_write(g, "nranks", IO_I32LE, IO_INT, 1, &d1, pf->mesh));
    PetscCall(write_doubles(g, "seconds", 3, d3, pf->coll_sec));
    PetscCall(io_close(&g));
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode profile_write(const char *path, const Profile *pf)
{
  PetscFunctionBegin;
  PetscCall(io_output_ok("profile", path));
  PetscCall(io_write_atomic("profile", path, profile_fill, (void *)pf));
  PetscFunctionReturn(PETSC_SUCCESS);
}

typedef struct {
  const char *path;
  Profile    *pf;
  char        where[PETSC_MAX_PATH_LEN + 16];
} ReadCtx;

/* Dataset `name` of loc, of ndim dimensions; dims in: 0 accepts any extent
 * (returned), else it must match. */
static PetscErrorCode read_array(ReadCtx *c, IoId loc, const char *grp, const char *name, IoClass cls, int ndim,
                                 IoSize *dims, IoType mem, void **buf, size_t elsize)
{
  char           full[96];
  IoId           d;
  size_t         n = 1;
  PetscErrorCode ierr;

  PetscFunctionBegin;
  PetscCall(PetscSNPrintf(full, sizeof full, "/%s/%s", grp, name));
  PetscCheck(io_exists(loc, name), PETSC_COMM_SELF, PETSC_ERR_FILE_UNEXPECTED, "%s has no dataset %s", c->where, full);
  PetscCall(io_dataset_open(loc, c->where, full, name, cls, 0, ndim, dims, &d));
  for (int k = 0; k < ndim; k++) n *= (size_t)dims[k];
  if (n == 0) {
    io_close(&d);
    SETERRQ(PETSC_COMM_SELF, PETSC_ERR_FILE_UNEXPECTED, "%s: %s is empty", c->where, full);
  }
  if (*buf == NULL) PetscCall(PetscMalloc(n * elsize, buf));
  ierr = io_dataset_read(d, c->where, full, mem, *buf);
  io_close(&d);
  PetscCall(ierr);
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode check_axis(ReadCtx *c, const char *full, int n, const double *x)
{
  PetscFunctionBegin;
  for (int i = 0; i < n; i++) {
    PetscCheck(isfinite(x[i]) && x[i] > 0, PETSC_COMM_SELF, PETSC_ERR_FILE_UNEXPECTED,
               "%s: %s[%d] is %g, must be positive", c->where, full, i, x[i]);
    PetscCheck(i == 0 || x[i] > x[i - 1], PETSC_COMM_SELF, PETSC_ERR_FILE_UNEXPECTED,
               "%s: %s is not increasing at [%d] (%g after %g)", c->where, full, i, x[i], x[i - 1]);
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode check_times(ReadCtx *c, const char *full, size_t n, const double *t)
{
  PetscFunctionBegin;
  for (size_t i = 0; i < n; i++)
    PetscCheck(isfinite(t[i]) && t[i] >= 0, PETSC_COMM_SELF, PETSC_ERR_FILE_UNEXPECTED,
               "%s: %s has %g at flat index %zu (times must be finite and >= 0)", c->where, full, t[i], i);
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode read_model(ReadCtx *c, IoId file, int i)
{
  ProfileModel *m = &c->pf->model[i];
  char          name[32];
  IoId          g;
  int64_t       sv[NSHAPE_INT];
  IoSize        d1, d5[5];
  double       *axis;

  PetscFunctionBegin;
  PetscCall(PetscSNPrintf(name, sizeof name, "model_%d", i));
  PetscCall(io_group_open(file, c->where, name, &g));
  for (int k = 0; k < NSHAPE_INT; k++)
    PetscCall(io_attr_read_int(g, c->where, shape_int_names[k], 0, INT32_MAX, &sv[k]));
  shape_from_ints(sv, &m->shape);
  m->shape.head_dim = 0; /* profiles written before it: n_embd / n_head */
  if (io_attr_exists(g, "head_dim")) {
    int64_t hd;
    PetscCall(io_attr_read_int(g, c->where, "head_dim", 0, INT32_MAX, &hd));
    m->shape.head_dim = (int)hd;
  }
  {
    int   *tp = NULL;
    double *r = NULL, *l = NULL;
    d1 = 0;
    PetscCall(read_array(c, g, name, "tp", IO_CLASS_INT, 1, &d1, IO_INT, (void **)&tp, sizeof(int)));
    m->ntp = (int)d1;
    d1 = 0;
    PetscCall(read_array(c, g, name, "rows", IO_CLASS_FLOAT, 1, &d1, IO_DOUBLE, (void **)&r, sizeof(double)));
    m->nrows = (int)d1;
    d1 = 0;
    PetscCall(read_array(c, g, name, "len", IO_CLASS_FLOAT, 1, &d1, IO_DOUBLE, (void **)&l, sizeof(double)));
    m->nlen = (int)d1;
    PetscCall(profile_model_alloc(m, m->ntp, m->nrows, m->nlen));
    PetscCall(PetscArraycpy(m->tp, tp, m->ntp));
    PetscCall(PetscArraycpy(m->rows, r, m->nrows));
    PetscCall(PetscArraycpy(m->len, l, m->nlen));
    PetscCall(PetscFree(tp));
    PetscCall(PetscFree(r));
    PetscCall(PetscFree(l));
  }
  PetscCall(PetscMalloc1(m->ntp, &axis));
  for (int k = 0; k < m->ntp; k++) axis[k] = m->tp[k];
  PetscCall(PetscSNPrintf(name, sizeof name, "/model_%d/tp", i));
  PetscCall(check_axis(c, name, m->ntp, axis));
  PetscCall(PetscFree(axis));
  PetscCall(PetscSNPrintf(name, sizeof name, "/model_%d/rows", i));
  PetscCall(check_axis(c, name, m->nrows, m->rows));
  PetscCall(PetscSNPrintf(name, sizeof name, "/model_%d/len", i));
  PetscCall(check_axis(c, name, m->nlen, m->len));
  d5[0] = (IoSize)m->ntp, d5[1] = COST_NPART, d5[2] = COST_NPHASE, d5[3] = (IoSize)m->nrows, d5[4] = (IoSize)m->nlen;
  PetscCall(PetscSNPrintf(name, sizeof name, "model_%d", i));
  PetscCall(read_array(c, g, name, "seconds", IO_CLASS_FLOAT, 5, d5, IO_DOUBLE, (void **)&m->sec, sizeof(double)));
  PetscCall(PetscSNPrintf(name, sizeof name, "/model_%d/seconds", i));
  PetscCall(check_times(c, name, (size_t)m->ntp * COST_NPART * COST_NPHASE * m->nrows * m->nlen, m->sec));
  PetscCall(io_close(&g));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode read_tables(ReadCtx *c, IoId file)
{
  Profile *pf = c->pf;
  IoId     g;
  IoSize   d1 = 0, d3[3];
  double  *n = NULL, *b = NULL;
  int     *mesh = NULL;

  PetscFunctionBegin;
  PetscCheck(io_exists(file, "optimizer") && io_exists(file, "collectives"), PETSC_COMM_SELF, PETSC_ERR_FILE_UNEXPECTED,
             "%s has no /optimizer or no /collectives group", c->where);
  PetscCall(io_group_open(file, c->where, "optimizer", &g));
  PetscCall(read_array(c, g, "optimizer", "nparams", IO_CLASS_FLOAT, 1, &d1, IO_DOUBLE, (void **)&n, sizeof(double)));
  pf->nopt = (int)d1;
  PetscCall(io_close(&g));
  PetscCall(io_group_open(file, c->where, "collectives", &g));
  d1 = 0;
  PetscCall(read_array(c, g, "collectives", "bytes", IO_CLASS_FLOAT, 1, &d1, IO_DOUBLE, (void **)&b, sizeof(double)));
  pf->nbytes = (int)d1;
  d1 = 0;
  PetscCall(read_array(c, g, "collectives", "nranks", IO_CLASS_INT, 1, &d1, IO_INT, (void **)&mesh, sizeof(int)));
  PetscCall(profile_tables_alloc(pf, pf->nopt, (int)d1, pf->nbytes));
  PetscCall(PetscArraycpy(pf->opt_n, n, pf->nopt));
  PetscCall(PetscArraycpy(pf->bytes, b, pf->nbytes));
  PetscCall(PetscArraycpy(pf->mesh, mesh, pf->nmesh));
  PetscCall(PetscFree(n));
  PetscCall(PetscFree(b));
  PetscCall(PetscFree(mesh));
  d3[0] = COST_NCOLL, d3[1] = (IoSize)pf->nmesh, d3[2] = (IoSize)pf->nbytes;
  PetscCall(read_array(c, g, "collectives", "seconds", IO_CLASS_FLOAT, 3, d3, IO_DOUBLE, (void **)&pf->coll_sec,
                       sizeof(double)));
  PetscCall(io_close(&g));
  PetscCall(io_group_open(file, c->where, "optimizer", &g));
  d1 = (IoSize)pf->nopt;
  PetscCall(read_array(c, g, "optimizer", "seconds", IO_CLASS_FLOAT, 1, &d1, IO_DOUBLE, (void **)&pf->opt_sec,
                       sizeof(double)));
  PetscCall(io_close(&g));
  PetscCall(check_axis(c, "/optimizer/nparams", pf->nopt, pf->opt_n));
  PetscCall(check_times(c, "/optimizer/seconds", (size_t)pf->nopt, pf->opt_sec));
  PetscCall(check_axis(c, "/collectives/bytes", pf->nbytes, pf->bytes));
  for (int k = 0; k < pf->nmesh; k++)
    PetscCheck(pf->mesh[k] >= 2 && (k == 0 || pf->mesh[k] > pf->mesh[k - 1]), PETSC_COMM_SELF,
               PETSC_ERR_FILE_UNEXPECTED, "%s: /collectives/nranks[%d] is %d (must be >= 2 and increasing)", c->where,
               k, pf->mesh[k]);
  PetscCall(check_times(c, "/collectives/seconds", (size_t)COST_NCOLL * pf->nmesh * pf->nbytes, pf->coll_sec));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode profile_read_fill(IoId file, void *vctx)
{
  ReadCtx *c  = (ReadCtx *)vctx;
  Profile *pf = c->pf;
  char     fmt[64];
  int64_t  v;
  const char *ints[4] = {"cores", "threads", "nranks", "ranks_per_node"};
  int        *iv[4]   = {&pf->cores, &pf->threads, &pf->nranks, &pf->ranks_per_node};

  PetscFunctionBegin;
  PetscCall(io_attr_read_string(file, c->where, "format", fmt, sizeof fmt));
  PetscCheck(!strcmp(fmt, "rlfuse profile"), PETSC_COMM_SELF, PETSC_ERR_FILE_UNEXPECTED,
             "%s: format is '%s', not 'rlfuse profile'", c->where, fmt);
  PetscCall(io_attr_read_string(file, c->where, "host", pf->host, sizeof pf->host));
  PetscCall(io_attr_read_string(file, c->where, "backend", pf->backend, sizeof pf->backend));
  for (int k = 0; k < 4; k++) {
    PetscCall(io_attr_read_int(file, c->where, ints[k], 1, INT32_MAX, &v));
    *iv[k] = (int)v;
  }
  PetscCall(io_attr_read_double(file, c->where, "seconds", &pf->seconds));
  PetscCall(io_attr_read_double(file, c->where, "mem_per_rank", &pf->mem_per_rank));
  PetscCall(io_attr_read_double(file, c->where, "bytes_per_param", &pf->bytes_per_param));
  if (io_attr_exists(file, "collectives_modeled")) { /* absent in profiles written before it */
    PetscCall(io_attr_read_int(file, c->where, "collectives_modeled", 0, 1, &v));
    pf->coll_modeled = (int)v;
  }
  if (io_attr_exists(file, "cache_key"))
    PetscCall(io_attr_read_string(file, c->where, "cache_key", pf->key, sizeof pf->key));
  PetscCheck(pf->mem_per_rank > 0 && pf->bytes_per_param > 0, PETSC_COMM_SELF, PETSC_ERR_FILE_UNEXPECTED,
             "%s: mem_per_rank %g and bytes_per_param %g must be positive", c->where, pf->mem_per_rank,
             pf->bytes_per_param);
  while (pf->nmodel < PROFILE_MAX_MODELS) {
    char name[32];
    PetscCall(PetscSNPrintf(name, sizeof name, "model_%d", pf->nmodel));
    if (!io_exists(file, name)) break;
    pf->nmodel++; /* counted first, so profile_free frees a half-read table */
    PetscCall(read_model(c, file, pf->nmodel - 1));
  }
  PetscCheck(pf->nmodel > 0, PETSC_COMM_SELF, PETSC_ERR_FILE_UNEXPECTED, "%s has no /model_0 group", c->where);
  PetscCall(read_tables(c, file));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode profile_read(const char *path, Profile *pf)
{
  ReadCtx        c = {path, pf, ""};
  PetscErrorCode ierr;

  PetscFunctionBegin;
  PetscCall(PetscMemzero(pf, sizeof *pf));
  PetscCall(PetscSNPrintf(c.where, sizeof c.where, "profile %s", path));
  ierr = io_read_file("profile", path, profile_read_fill, &c);
  if (ierr) (void)profile_free(pf);
  PetscCall(ierr);
  PetscFunctionReturn(PETSC_SUCCESS);
}
