/* io: a frozen model that a checkpoint does not carry. PPO's reference is
 * the unchanged weights of an input file; a checkpoint records that file
 * (path as given and absolute, the role read, size and checksum) in
 * /<as>_source instead of a copy of the weights, and a restart reads the
 * file again once its checksum shows it is still the one the run read. */
#include "internal/ckpt_shard.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

typedef struct {
  const char *ckpt; /* reading: the checkpoint */
  const char *opt;  /* the option that named the file (making) or the checkpoint (reading), for messages */
  CkptSource *src;
  PetscBool   found;
} CkptSourceCtx;

/* Why path cannot be read as a model's file ("" when it is a regular file):
 * missing, a directory, a loop of symbolic links, or errno's text. */
static const char *ckpt_source_problem(const char *path, char *buf, size_t len)
{
  struct stat st;

  if (stat(path, &st)) {
    snprintf(buf, len, "%s", errno == ENOENT ? "is missing" : errno == ELOOP ? "is a symlink loop" : strerror(errno));
    return buf;
  }
  if (S_ISREG(st.st_mode)) return "";
  return S_ISDIR(st.st_mode) ? "is a directory" : "is not a regular file";
}

static PetscErrorCode ckpt_source_group(const char *as, char *name, size_t len)
{
  PetscFunctionBegin;
  PetscCall(PetscSNPrintf(name, len, "%s_source", as));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode ckpt_source_write(hid_t file, const CkptSource *src)
{
  char  name[32];
  hid_t g;

  PetscFunctionBegin;
  PetscCall(ckpt_source_group(src->as, name, sizeof name));
  g = H5Gcreate2(file, name, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  H5Call(g, "HDF5: cannot create group /%s", name);
  PetscCall(io_attr_write_string(g, "path", src->path));
  PetscCall(io_attr_write_string(g, "abspath", src->abspath));
  PetscCall(io_attr_write_string(g, "role", src->role));
  PetscCall(io_attr_write_string(g, "checksum", src->checksum));
  PetscCall(io_attr_write_int(g, "size", IO_I64LE, src->size));
  PetscCall(io_close(&g));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Rank 0: the absolute path, size and checksum of src->path. */
static PetscErrorCode ckpt_source_fill(void *vctx)
{
  CkptSourceCtx *ctx = (CkptSourceCtx *)vctx;
  CkptSource    *src = ctx->src;
  char           abs[PATH_MAX], why[128];
  const char    *bad = ckpt_source_problem(src->path, why, sizeof why);

  PetscFunctionBegin;
  PetscCheck(!bad[0], PETSC_COMM_SELF, PETSC_ERR_FILE_OPEN, "%s %s %s", ctx->opt, src->path, bad);
  PetscCheck(realpath(src->path, abs), PETSC_COMM_SELF, PETSC_ERR_FILE_OPEN, "%s %s: %s", ctx->opt, src->path,
             strerror(errno));
  PetscCall(PetscStrncpy(src->abspath, abs, sizeof src->abspath));
  PetscCall(io_file_checksum_local(src->abspath, src->checksum, sizeof src->checksum, &src->size));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode ckpt_source_make(MPI_Comm comm, const char *opt, const char *path, const char *role, const char *as,
                                CkptSource *src)
{
  CkptSourceCtx ctx = {NULL, opt, src, PETSC_TRUE};

  PetscFunctionBegin;
  PetscCall(PetscMemzero(src, sizeof *src));
  PetscCall(PetscStrncpy(src->as, as, sizeof src->as));
  PetscCall(PetscStrncpy(src->path, path, sizeof src->path));
  PetscCall(PetscStrncpy(src->role, role, sizeof src->role));
  PetscCall(io_on_root(comm, ckpt_source_fill, &ctx));
  PetscCallMPI(sys_mpi_bcast(src, (int)sizeof *src, MPI_BYTE, 0, comm));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode ckpt_source_read_group(hid_t file, void *vctx)
{
  CkptSourceCtx *ctx = (CkptSourceCtx *)vctx;
  CkptSource    *src = ctx->src;
  char           name[32], where[PETSC_MAX_PATH_LEN + 64];
  int64_t        size;
  hid_t          g;

  PetscFunctionBegin;
  PetscCall(ckpt_source_group(src->as, name, sizeof name));
  ctx->found = (PetscBool)(H5Lexists(file, name, H5P_DEFAULT) > 0);
  if (!ctx->found) PetscFunctionReturn(PETSC_SUCCESS);
  PetscCall(PetscSNPrintf(where, sizeof where, "checkpoint %s /%s", ctx->ckpt, name));
  g = H5Gopen2(file, name, H5P_DEFAULT);
  H5Call(g, "%s is not a group (corrupt file?)", where);
  PetscCall(io_attr_read_string(g, where, "path", src->path, sizeof src->path));
  PetscCall(io_attr_read_string(g, where, "abspath", src->abspath, sizeof src->abspath));
  PetscCall(io_attr_read_string(g, where, "role", src->role, sizeof src->role));
  PetscCall(io_attr_read_string(g, where, "checksum", src->checksum, sizeof src->checksum));
  PetscCall(io_attr_read_int(g, where, "size", 0, INT64_MAX, &size));
  src->size = size;
  PetscCall(io_close(&g));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Rank 0: reads the group and checks the file it names. The absolute path
 * first; when it is gone, the path as given (a tree moved as a whole), which
 * then becomes the recorded absolute path. */
static PetscErrorCode ckpt_source_verify(void *vctx)
{
  CkptSourceCtx *ctx = (CkptSourceCtx *)vctx;
  CkptSource    *src = ctx->src;
  struct stat    st;
  char           sum[sizeof src->checksum], abs[PATH_MAX], why[128];
  const char    *bad;
  int64_t        size;

  PetscFunctionBegin;
  PetscCall(io_read_file("checkpoint", ctx->ckpt, ckpt_source_read_group, ctx));
  if (!ctx->found) PetscFunctionReturn(PETSC_SUCCESS);
  if (lstat(src->abspath, &st) && !stat(src->path, &st) && realpath(src->path, abs))
    PetscCall(PetscStrncpy(src->abspath, abs, sizeof src->abspath));
  bad = ckpt_source_problem(src->abspath, why, sizeof why);
  PetscCheck(!bad[0], PETSC_COMM_SELF, PETSC_ERR_FILE_OPEN,
             "%s: checkpoint %s holds no %s: it was read from %s, which %s (restore that file, unchanged)", ctx->opt,
             ctx->ckpt, src->as, src->abspath, bad);
  PetscCall(io_file_checksum_local(src->abspath, sum, sizeof sum, &size));
  PetscCheck(size == src->size && !strcmp(sum, src->checksum), PETSC_COMM_SELF, PETSC_ERR_FILE_UNEXPECTED,
             "%s: checkpoint %s holds no %s: it was read from %s, which changed since the checkpoint was written "
             "(%" PRId64 " bytes, %s; recorded %" PRId64 " bytes, %s)",
             ctx->opt, ctx->ckpt, src->as, src->abspath, size, sum, src->size, src->checksum);
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode ckpt_read_source(MPI_Comm comm, const char *opt, const char *path, const char *as, CkptSource *src,
                                PetscBool *found)
{
  CkptSource    s;
  CkptSourceCtx ctx = {path, opt, &s, PETSC_FALSE};

  PetscFunctionBegin;
  PetscCall(PetscMemzero(&s, sizeof s));
  PetscCall(PetscStrncpy(s.as, as, sizeof s.as));
  PetscCall(io_on_root(comm, ckpt_source_verify, &ctx));
  PetscCallMPI(sys_mpi_bcast(&s, (int)sizeof s, MPI_BYTE, 0, comm));
  PetscCallMPI(sys_mpi_bcast(&ctx.found, 1, MPI_INT, 0, comm));
  *found = ctx.found;
  if (ctx.found) *src = s;
  PetscFunctionReturn(PETSC_SUCCESS);
}
