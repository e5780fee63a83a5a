/* cost/timeline.c: a simulated run's timeline written as a run records its
 * own (/timeline of docs/formats.md), so tools/plot_timeline.py draws a
 * simulated iteration beside a measured one. */
#include "cost_impl.h"
#include "internal/h5util.h"

typedef struct {
  const CostTimeline *tl;
  const char         *source;
} TlWrite;

static PetscErrorCode tl_column(hid_t g, const char *name, hid_t file_type, hid_t mem_type, int n, const void *data)
{
  hsize_t dim = (hsize_t)n;
  hid_t   space, dset;

  PetscFunctionBegin;
  space = H5Screate_simple(1, &dim, NULL);
  PetscCheck(space >= 0, PETSC_COMM_SELF, PETSC_ERR_LIB, "cost timeline: HDF5 dataspace for %s failed", name);
  dset = H5Dcreate2(g, name, file_type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  H5Sclose(space);
  PetscCheck(dset >= 0, PETSC_COMM_SELF, PETSC_ERR_LIB, "cost timeline: creating /timeline/%s failed", name);
  if (n > 0) H5CallWrite(H5Dwrite(dset, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data), "cost timeline: writing /timeline/%s failed", name);
  H5CallWrite(H5Dclose(dset), "cost timeline: closing /timeline/%s failed", name);
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode tl_fill(hid_t file, void *ctx)
{
  const TlWrite      *x  = ctx;
  const CostTimeline *tl = x->tl;
  char                list[16 * 33] = "";
  hid_t               g;

  PetscFunctionBegin;
  for (int k = 0; k < tl->nnames; k++) {
    if (k) PetscCall(PetscStrlcat(list, " ", sizeof list));
    PetscCall(PetscStrlcat(list, tl->names[k], sizeof list));
  }
  g = H5Gcreate2(file, "timeline", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  PetscCheck(g >= 0, PETSC_COMM_SELF, PETSC_ERR_LIB, "cost timeline: creating /timeline failed");
  PetscCall(h5u_attr_write_string(g, "calls", list));
  PetscCall(h5u_attr_write_string(g, "source", x->source ? x->source : "simulated"));
  PetscCall(tl_column(g, "rank", H5T_STD_I32LE, H5T_NATIVE_INT, tl->n, tl->rank));
  PetscCall(tl_column(g, "step", H5T_STD_I64LE, H5T_NATIVE_LLONG, tl->n, tl->step));
  PetscCall(tl_column(g, "call", H5T_STD_I32LE, H5T_NATIVE_INT, tl->n, tl->call));
  PetscCall(tl_column(g, "start", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, tl->n, tl->start));
  PetscCall(tl_column(g, "end", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, tl->n, tl->end));
  H5CallWrite(H5Gclose(g), "cost timeline: closing /timeline failed");
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode cost_timeline_write(const char *path, const CostTimeline *tl, const char *source)
{
  TlWrite x = {tl, source};

  PetscFunctionBegin;
  PetscCall(h5u_write_atomic("simulated timeline", path, tl_fill, &x));
  PetscFunctionReturn(PETSC_SUCCESS);
}
