/* io: a group of datasets written into a file that grows during a run, one
 * group at a time, each replacing a group of the same name (which a run
 * restarted from an earlier checkpoint writes again), flushed and closed
 * before the call returns, so every completed group is on disk.
 * io_group_append (rollouts.h5: one /iter_<k> per PPO iteration) adds it in
 * place. io_group_replace (evals.h5: one group per held-out evaluation, with
 * row texts) creates the file through a temporary and a rename and adds each
 * later group to a byte copy renamed over it, so that a kill at any moment
 * leaves the file whole, as run.h5 is (src/io/record.c): a byte copy costs
 * little beside an evaluation (HDF5's copy of the groups, object by object,
 * made the evaluations' cost quadratic). io_group_drop_after continues a
 * restarted run's file. */
#include "internal/h5util.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
  const char        *kind, *path, *group, *text_name;
  const IODataset   *d;
  int                n, nattr, ntexts;
  const char *const *texts; /* NULL: none */
  const char *const *attr_names;
  const double      *attr_values;
} GroupCtx;

PetscErrorCode io_group_fill(hid_t g, const IODataset *d, int n, const char *const *attr_names,
                             const double *attr_values, int nattr)
{
  PetscFunctionBegin;
  for (int i = 0; i < n; i++) {
    hsize_t dims[2] = {(hsize_t)d[i].dims[0], (hsize_t)d[i].dims[1]};
    PetscBool u8 = (PetscBool)(d[i].is_int == IO_DATASET_U8);
    PetscCall(io_dataset_write(g, d[i].name, u8 ? IO_U8LE : d[i].is_int ? IO_I32LE : IO_F32LE,
                               u8 ? IO_UCHAR : d[i].is_int ? IO_INT : IO_FLOAT, d[i].ndim, dims, d[i].data));
  }
  for (int i = 0; i < nattr; i++) PetscCall(io_attr_write_double(g, attr_names[i], attr_values[i]));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Row texts as a prompt file holds them: <name>_bytes uint8, <name>_offsets int64 [N+1]. */
static PetscErrorCode group_texts(hid_t g, const GroupCtx *ctx)
{
  char     bn[64], on[64];
  int64_t *off;
  char    *bytes;
  hsize_t  nb, no = (hsize_t)ctx->ntexts + 1;

  PetscFunctionBegin;
  PetscCall(PetscMalloc1(ctx->ntexts + 1, &off));
  off[0] = 0;
  for (int i = 0; i < ctx->ntexts; i++) off[i + 1] = off[i] + (int64_t)(ctx->texts[i] ? strlen(ctx->texts[i]) : 0);
  PetscCall(PetscMalloc1(off[ctx->ntexts] + 1, &bytes));
  for (int i = 0; i < ctx->ntexts; i++)
    if (ctx->texts[i]) PetscCall(PetscArraycpy(bytes + off[i], ctx->texts[i], off[i + 1] - off[i]));
  nb = (hsize_t)off[ctx->ntexts];
  PetscCall(PetscSNPrintf(bn, sizeof bn, "%s_bytes", ctx->text_name));
  PetscCall(PetscSNPrintf(on, sizeof on, "%s_offsets", ctx->text_name));
  PetscCall(io_dataset_write(g, bn, IO_U8LE, IO_UCHAR, 1, &nb, bytes));
  PetscCall(io_dataset_write(g, on, IO_I64LE, IO_INT64, 1, &no, off));
  PetscCall(PetscFree(bytes));
  PetscCall(PetscFree(off));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode group_write(hid_t file, const GroupCtx *ctx)
{
  hid_t g;

  PetscFunctionBegin;
  if (H5Lexists(file, ctx->group, H5P_DEFAULT) > 0)
    H5Call(H5Ldelete(file, ctx->group, H5P_DEFAULT), "%s: cannot replace group /%s", ctx->path, ctx->group);
  g = H5Gcreate2(file, ctx->group, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  H5Call(g, "%s: cannot create group /%s", ctx->path, ctx->group);
  PetscCall(io_group_fill(g, ctx->d, ctx->n, ctx->attr_names, ctx->attr_values, ctx->nattr));
  if (ctx->texts) PetscCall(group_texts(g, ctx));
  PetscCall(io_close(&g));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode group_append_task(void *vctx)
{
  GroupCtx      *ctx  = (GroupCtx *)vctx;
  hid_t          fapl = h5u_fapl(PETSC_TRUE), file;
  PetscErrorCode ierr;

  PetscFunctionBegin;
  if (fapl >= 0) {
    PetscErrorCode ierr0 = io_output_ok(ctx->kind, ctx->path);
    if (ierr0) H5Pclose(fapl);
    PetscCall(ierr0);
  }
  if (H5Fis_hdf5(ctx->path) > 0) file = H5Fopen(ctx->path, H5F_ACC_RDWR, fapl);
  else file = H5Fcreate(ctx->path, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
  H5Pclose(fapl);
  H5Call(file, "%s: cannot open or create the file for writing", ctx->path);
  ierr = group_write(file, ctx);
  PetscCall(h5u_flush_close(&file, ctx->path, ctx->group, ierr));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode io_group_append(MPI_Comm comm, const char *path, const char *group, const IODataset *d, int n,
                               const char *const *attr_names, const double *attr_values, int nattr)
{
  GroupCtx ctx = {"output", path, group, NULL, d, n, nattr, 0, NULL, attr_names, attr_values};

  PetscFunctionBegin;
  PetscCall(io_on_root(comm, group_append_task, &ctx));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* The first group: a new file, through the temporary. */
static PetscErrorCode group_fill_new(hid_t file, void *vctx)
{
  PetscFunctionBegin;
  PetscCall(io_write_version(file));
  PetscCall(group_write(file, (GroupCtx *)vctx));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* A later one: added to a copy of the file, renamed over it. */
static PetscErrorCode group_fill_copy(hid_t file, void *vctx)
{
  PetscFunctionBegin;
  PetscCall(group_write(file, (GroupCtx *)vctx));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode group_replace_task(void *vctx)
{
  GroupCtx *ctx = (GroupCtx *)vctx;

  PetscFunctionBegin;
  if (H5Fis_hdf5(ctx->path) > 0) PetscCall(h5u_update_atomic(ctx->kind, ctx->path, group_fill_copy, ctx));
  else PetscCall(io_write_atomic(ctx->kind, ctx->path, group_fill_new, ctx));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode io_group_replace(MPI_Comm comm, const char *kind, const char *path, const char *group,
                                const IODataset *d, int n, const char *text_name, const char *const *texts, int ntexts,
                                const char *const *attr_names, const double *attr_values, int nattr)
{
  GroupCtx ctx = {kind, path, group, text_name, d, n, nattr, ntexts, texts, attr_names, attr_values};

  PetscFunctionBegin;
  PetscCall(io_on_root(comm, group_replace_task, &ctx));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* ---- a restarted run's file ------------------------------------------------- */
typedef struct {
  const char *kind, *path, *prefix;
  int64_t     last;
  int         nstale;
  char        stale[256][64];
} DropCtx;

static herr_t drop_scan(hid_t g, const char *name, const H5L_info_t *info, void *vctx)
{
  DropCtx *d = (DropCtx *)vctx;
  size_t   n = strlen(d->prefix);
  char    *end;
  long long k;

  (void)g, (void)info;
  if (strncmp(name, d->prefix, n) || strlen(name) >= sizeof d->stale[0]) return 0;
  k = strtoll(name + n, &end, 10);
  if (*end || end == name + n || k <= d->last) return 0;
  if (d->nstale == (int)(sizeof d->stale / sizeof d->stale[0])) return 1; /* the rest on the next pass */
  strcpy(d->stale[d->nstale++], name);
  return 0;
}

static PetscErrorCode drop_fill(hid_t file, void *vctx)
{
  DropCtx *d = (DropCtx *)vctx;
  herr_t   e;

  PetscFunctionBegin;
  do {
    d->nstale = 0;
    e         = H5Literate(file, H5_INDEX_NAME, H5_ITER_INC, NULL, drop_scan, d);
    H5Call(e, "%s %s: cannot list its groups", d->kind, d->path);
    for (int i = 0; i < d->nstale; i++)
      H5Call(H5Ldelete(file, d->stale[i], H5P_DEFAULT), "%s %s: cannot remove /%s", d->kind, d->path, d->stale[i]);
  } while (e > 0);
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode drop_task(void *vctx)
{
  DropCtx *d = (DropCtx *)vctx;
  DropCtx  probe;

  PetscFunctionBegin;
  if (H5Fis_hdf5(d->path) <= 0) PetscFunctionReturn(PETSC_SUCCESS); /* none yet (or not a file to continue) */
  probe = *d;
  { /* only a file with such groups is rewritten */
    hid_t fapl = h5u_fapl(PETSC_FALSE), file = fapl < 0 ? H5I_INVALID_HID : H5Fopen(d->path, H5F_ACC_RDONLY, fapl);
    if (fapl >= 0) H5Pclose(fapl);
    H5Call(file, "%s %s: cannot open it to continue it", d->kind, d->path);
    probe.nstale = 0;
    (void)H5Literate(file, H5_INDEX_NAME, H5_ITER_INC, NULL, drop_scan, &probe);
    h5u_fclose(file);
  }
  if (probe.nstale) PetscCall(h5u_update_atomic(d->kind, d->path, drop_fill, d));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode io_group_drop_after(MPI_Comm comm, const char *kind, const char *path, const char *prefix, int64_t last)
{
  DropCtx *d;

  PetscFunctionBegin;
  PetscCall(PetscNew(&d));
  d->kind = kind, d->path = path, d->prefix = prefix, d->last = last;
  PetscCall(io_on_root(comm, drop_task, d));
  PetscCall(PetscFree(d));
  PetscFunctionReturn(PETSC_SUCCESS);
}
