/* io: appending a group of datasets to a file that grows during a run
 * (rollouts.h5: one /iter_<k> per PPO iteration). The file is opened, the
 * group written (replacing one of the same name left by a run that was
 * restarted from an earlier checkpoint), flushed and closed each time, so
 * every completed group is on disk when the call returns. */
#include "internal/h5util.h"

typedef struct {
  const char      *path, *group;
  const IODataset *d;
  int              n, nattr;
  const char     *const *attr_names;
  const double    *attr_values;
} GroupCtx;

PetscErrorCode io_group_fill(hid_t g, const IODataset *d, int n, const char *const *attr_names, const double *attr_values, int nattr)
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

static PetscErrorCode group_write(hid_t file, GroupCtx *ctx)
{
  hid_t g;

  PetscFunctionBegin;
  if (H5Lexists(file, ctx->group, H5P_DEFAULT) > 0) H5Call(H5Ldelete(file, ctx->group, H5P_DEFAULT), "%s: cannot replace group /%s", ctx->path, ctx->group);
  g = H5Gcreate2(file, ctx->group, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  H5Call(g, "%s: cannot create group /%s", ctx->path, ctx->group);
  PetscCall(io_group_fill(g, ctx->d, ctx->n, ctx->attr_names, ctx->attr_values, ctx->nattr));
  PetscCall(io_close(&g));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode group_task(void *vctx)
{
  GroupCtx      *ctx  = (GroupCtx *)vctx;
  hid_t          fapl = h5u_fapl(PETSC_TRUE), file;
  PetscErrorCode ierr;

  PetscFunctionBegin;
  if (fapl >= 0) {
    PetscErrorCode ierr0 = io_output_ok("output", ctx->path);
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

PetscErrorCode io_group_append(MPI_Comm comm, const char *path, const char *group, const IODataset *d, int n, const char *const *attr_names, const double *attr_values, int nattr)
{
  GroupCtx ctx = {path, group, d, n, nattr, attr_names, attr_values};

  PetscFunctionBegin;
  PetscCall(io_on_root(comm, group_task, &ctx));
  PetscFunctionReturn(PETSC_SUCCESS);
}
