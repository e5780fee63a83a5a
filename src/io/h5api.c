/* io: the calls of io.h that only walk or query a file (links, groups,
 * attribute classes, unchecked reads for scans); the checked readers and
 * writers are in h5util.c. */
#include "internal/h5util.h"

#include <string.h>

/* IoId is hid_t and IoSize hsize_t, so handles and extents pass unconverted. */
_Static_assert(_Generic((hid_t)0, IoId: 1, default: 0), "IoId must be hid_t");
_Static_assert(_Generic((hsize_t)0, IoSize: 1, default: 0), "IoSize must be hsize_t");

typedef struct {
  const char *kind, *path;
  IoFileFn    read;
  void       *ctx;
} IoReadTask;

static PetscErrorCode io_read_task(void *vctx)
{
  IoReadTask *t = (IoReadTask *)vctx;

  PetscFunctionBegin;
  PetscCall(io_read_file(t->kind, t->path, t->read, t->ctx));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode io_read_on_root(MPI_Comm comm, const char *kind, const char *path, IoFileFn read, void *ctx)
{
  IoReadTask t = {kind, path, read, ctx};

  PetscFunctionBegin;
  PetscCall(io_on_root(comm, io_read_task, &t));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscBool io_exists(IoId loc, const char *name)
{
  return H5Lexists(loc, name, H5P_DEFAULT) > 0 ? PETSC_TRUE : PETSC_FALSE;
}

PetscBool io_is_group(IoId loc, const char *name)
{
  H5O_info_t info;

  return H5Oget_info_by_name(loc, name, &info, H5P_DEFAULT) >= 0 && info.type == H5O_TYPE_GROUP ? PETSC_TRUE
                                                                                                : PETSC_FALSE;
}

PetscBool io_attr_exists(IoId obj, const char *name)
{
  return H5Aexists(obj, name) > 0 ? PETSC_TRUE : PETSC_FALSE;
}

PetscErrorCode io_group_open(IoId loc, const char *where, const char *name, IoId *g)
{
  PetscFunctionBegin;
  *g = H5Gopen2(loc, name, H5P_DEFAULT);
  H5Call(*g, "%s: cannot open group %s (corrupt file?)", where, name);
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode io_group_create(IoId loc, const char *where, const char *name, IoId *g)
{
  PetscFunctionBegin;
  *g = H5Gcreate2(loc, name, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  H5Call(*g, "%s: cannot create group %s", where, name);
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode io_attr_write_doubles(IoId obj, const char *name, int n, const double *v)
{
  hsize_t dim = (hsize_t)n;
  hid_t   space, attr;

  PetscFunctionBegin;
  space = H5Screate_simple(1, &dim, NULL);
  H5Call(space, "cannot create the dataspace of attribute %s", name);
  attr = H5Acreate2(obj, name, H5T_IEEE_F64LE, space, H5P_DEFAULT, H5P_DEFAULT);
  H5Sclose(space);
  H5Call(attr, "cannot create attribute %s", name);
  if (H5Awrite(attr, H5T_NATIVE_DOUBLE, v) < 0) {
    H5Aclose(attr);
    SETERRQ(PETSC_COMM_SELF, PETSC_ERR_FILE_WRITE, "cannot write attribute %s", name);
  }
  H5Call(H5Aclose(attr), "cannot close attribute %s", name);
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode io_attr_class(IoId obj, const char *where, const char *name, IoClass *cls)
{
  hid_t       attr, type;
  H5T_class_t c;

  PetscFunctionBegin;
  attr = H5Aopen(obj, name, H5P_DEFAULT);
  H5Call(attr, "%s: cannot open attribute %s (corrupt file?)", where, name);
  type = H5Aget_type(attr);
  c    = type >= 0 ? H5Tget_class(type) : H5T_NO_CLASS;
  PetscCall(io_close(&type));
  PetscCall(io_close(&attr));
  *cls = c == H5T_INTEGER ? IO_CLASS_INT : c == H5T_FLOAT ? IO_CLASS_FLOAT : IO_CLASS_OTHER;
  PetscFunctionReturn(PETSC_SUCCESS);
}

long long io_dataset_npoints(IoId loc, const char *path)
{
  hid_t    d = H5Dopen2(loc, path, H5P_DEFAULT), sp;
  hssize_t n;

  if (d < 0) return -1;
  sp = H5Dget_space(d);
  n  = sp < 0 ? -1 : H5Sget_simple_extent_npoints(sp);
  if (sp >= 0) H5Sclose(sp);
  H5Dclose(d);
  return (long long)n;
}

int io_dataset_read_all(IoId loc, const char *path, IoType mem, void *buf)
{
  hid_t d = H5Dopen2(loc, path, H5P_DEFAULT);
  int   ok;

  if (d < 0) return -1;
  ok = H5Dread(d, h5u_type(mem), H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) < 0 ? -1 : 0;
  H5Dclose(d);
  return ok;
}

typedef struct {
  IoIterFn fn;
  void    *ctx;
} IoIter;

static herr_t io_iterate_one(hid_t g, const char *name, const H5L_info_t *info, void *vctx)
{
  IoIter *it = (IoIter *)vctx;

  (void)info;
  return it->fn(g, name, it->ctx);
}

int io_iterate(IoId loc, IoIterFn fn, void *ctx)
{
  IoIter it = {fn, ctx};

  return H5Literate(loc, H5_INDEX_NAME, H5_ITER_INC, NULL, io_iterate_one, &it);
}
