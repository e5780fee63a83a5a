/* io: a group of datasets written into a file that grows during a run, one
 * group at a time, each replacing a group of the same name (which a run
 * restarted from an earlier checkpoint writes again), flushed and closed
 * before the call returns, so every completed group is on disk.
 * io_group_append (rollouts.h5: one /iter_<k> per PPO iteration) creates the
 * file in place; io_group_replace (evals.h5: one group per held-out
 * evaluation) creates it through a temporary and a rename, with row texts,
 * and opens it without HDF5's lock, as run.h5 is, so that a reader may look
 * at it while the run goes on. Adding a group in place follows run.h5's
 * precedent (src/io/record.c), not io's temporary-then-rename rule: a crash
 * during an append can damage the file, as it can the run record; copying
 * the earlier groups into a new file at every call made a run's
 * evaluations cost quadratic in their number. */
#include "internal/h5util.h"

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
    PetscCall(io_dataset_write(g, d[i].name, d[i].is_int ? IO_I32LE : IO_F32LE, d[i].is_int ? IO_INT : IO_FLOAT,
                               d[i].ndim, dims, d[i].data));
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

/* A later one: added to the file in place, without HDF5's lock. */
static PetscErrorCode group_add_in_place(const GroupCtx *ctx)
{
  hid_t          fapl = h5u_fapl(PETSC_FALSE), file;
  PetscErrorCode ierr;

  PetscFunctionBegin;
  H5Call(fapl, "%s: cannot set up HDF5 file access", ctx->path);
  ierr = io_output_ok(ctx->kind, ctx->path);
  if (ierr) H5Pclose(fapl);
  PetscCall(ierr);
  file = H5Fopen(ctx->path, H5F_ACC_RDWR, fapl);
  H5Pclose(fapl);
  H5Call(file, "%s: cannot open the %s to add /%s", ctx->path, ctx->kind, ctx->group);
  ierr = group_write(file, ctx);
  PetscCall(h5u_flush_close(&file, ctx->path, ctx->group, ierr));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode group_replace_task(void *vctx)
{
  GroupCtx *ctx = (GroupCtx *)vctx;

  PetscFunctionBegin;
  if (H5Fis_hdf5(ctx->path) > 0) PetscCall(group_add_in_place(ctx));
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
