/* io: evals.h5, a file of groups, one per held-out evaluation
 * (docs/formats.md, "Evaluations"). The first evaluation creates the file
 * through a temporary and a rename; each later one opens it read-write and
 * adds its group (replacing one of the same name, which a run restarted
 * from an earlier checkpoint evaluates again), flushed and closed before
 * the call returns. Copying the earlier groups into a new file at every
 * evaluation, as this once did, made a run's evaluations cost quadratic in
 * their number. The append follows run.h5's precedent (src/io/record.c),
 * not io's temporary-then-rename rule: a crash during an append can damage
 * the file, as it can the run record; the file is opened without HDF5's
 * lock, as run.h5 is, so that a reader (tools/tokenizer.py samples) may
 * look at it while the run goes on. */
#include "internal/h5util.h"

typedef struct {
  const char        *path, *group, *text_name;
  const IODataset   *d;
  int                n, nattr, ntexts;
  const char *const *texts;
  const char *const *attr_names;
  const double      *attr_values;
} ReplaceCtx;

/* Row texts as a prompt file holds them: <name>_bytes uint8, <name>_offsets int64 [N+1]. */
static PetscErrorCode replace_texts(hid_t g, ReplaceCtx *ctx)
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

static PetscErrorCode evals_group_write(hid_t file, ReplaceCtx *ctx)
{
  hid_t g;

  PetscFunctionBegin;
  if (H5Lexists(file, ctx->group, H5P_DEFAULT) > 0) H5Call(H5Ldelete(file, ctx->group, H5P_DEFAULT), "%s: cannot replace group /%s", ctx->path, ctx->group);
  g = H5Gcreate2(file, ctx->group, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  H5Call(g, "%s: cannot create group /%s", ctx->path, ctx->group);
  PetscCall(io_group_fill(g, ctx->d, ctx->n, ctx->attr_names, ctx->attr_values, ctx->nattr));
  if (ctx->texts) PetscCall(replace_texts(g, ctx));
  PetscCall(io_close(&g));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* The first evaluation: a new file, through the temporary. */
static PetscErrorCode evals_fill_new(hid_t file, void *vctx)
{
  PetscFunctionBegin;
  PetscCall(io_write_version(file));
  PetscCall(evals_group_write(file, (ReplaceCtx *)vctx));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* A later one: its group added to the file in place. */
static PetscErrorCode evals_append(ReplaceCtx *ctx)
{
  hid_t          fapl = h5u_fapl(PETSC_FALSE), file;
  PetscErrorCode ierr;

  PetscFunctionBegin;
  H5Call(fapl, "%s: cannot set up HDF5 file access", ctx->path);
  ierr = io_output_ok("evaluations file", ctx->path);
  if (ierr) H5Pclose(fapl);
  PetscCall(ierr);
  file = H5Fopen(ctx->path, H5F_ACC_RDWR, fapl);
  H5Pclose(fapl);
  H5Call(file, "%s: cannot open the evaluations file to add /%s", ctx->path, ctx->group);
  ierr = evals_group_write(file, ctx);
  PetscCall(h5u_flush_close(&file, ctx->path, ctx->group, ierr));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode replace_task(void *vctx)
{
  ReplaceCtx *ctx = (ReplaceCtx *)vctx;

  PetscFunctionBegin;
  if (H5Fis_hdf5(ctx->path) > 0) PetscCall(evals_append(ctx));
  else PetscCall(io_write_atomic("evaluations file", ctx->path, evals_fill_new, ctx));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode io_group_replace(MPI_Comm comm, const char *path, const char *group, const IODataset *d, int n, const char *text_name, const char *const *texts, int ntexts, const char *const *attr_names, const double *attr_values, int nattr)
{
  ReplaceCtx ctx = {path, group, text_name, d, n, nattr, ntexts, texts, attr_names, attr_values};

  PetscFunctionBegin;
  PetscCall(io_on_root(comm, replace_task, &ctx));
  PetscFunctionReturn(PETSC_SUCCESS);
}
