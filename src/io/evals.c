/* io: a file of groups replaced one at a time through a temporary and a
 * rename (evals.h5: one group per held-out evaluation, docs/formats.md).
 * Unlike rollouts.h5, which grows in place every iteration, evaluations are
 * few and their file is read while the run goes on, so each write copies the
 * groups already there into the temporary, adds the new one and renames:
 * a reader sees the old file or the new one, never half a group. */
#include "internal/h5util.h"

typedef struct {
  const char        *path, *group, *text_name;
  const IODataset   *d;
  int                n, nattr, ntexts;
  const char *const *texts;
  const char *const *attr_names;
  const double      *attr_values;
  hid_t              dst;
} ReplaceCtx;

/* One top-level object of the file being replaced, copied unless it is the
 * group written anew. */
static herr_t replace_copy_one(hid_t src, const char *name, const H5L_info_t *info, void *vctx)
{
  ReplaceCtx *ctx = (ReplaceCtx *)vctx;

  (void)info;
  if (!strcmp(name, ctx->group)) return 0;
  return H5Ocopy(src, name, ctx->dst, name, H5P_DEFAULT, H5P_DEFAULT) < 0 ? -1 : 0;
}

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
  PetscCall(h5u_dataset_write(g, bn, H5T_STD_U8LE, H5T_NATIVE_UCHAR, 1, &nb, bytes));
  PetscCall(h5u_dataset_write(g, on, H5T_STD_I64LE, H5T_NATIVE_INT64, 1, &no, off));
  PetscCall(PetscFree(bytes));
  PetscCall(PetscFree(off));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode replace_fill(hid_t file, void *vctx)
{
  ReplaceCtx *ctx = (ReplaceCtx *)vctx;
  hid_t       g;

  PetscFunctionBegin;
  PetscCall(h5u_write_version(file));
  if (H5Fis_hdf5(ctx->path) > 0) { /* the groups of earlier evaluations */
    hid_t  src;
    herr_t e;

    PetscCall(h5u_open_read("evaluations file", ctx->path, &src));
    ctx->dst = file;
    e        = H5Literate(src, H5_INDEX_NAME, H5_ITER_INC, NULL, replace_copy_one, ctx);
    h5u_fclose(src);
    PetscCheck(e >= 0, PETSC_COMM_SELF, PETSC_ERR_FILE_WRITE, "%s: cannot copy its groups into the new file", ctx->path);
  }
  g = H5Gcreate2(file, ctx->group, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  H5Call(g, "%s: cannot create group /%s", ctx->path, ctx->group);
  PetscCall(io_group_fill(g, ctx->d, ctx->n, ctx->attr_names, ctx->attr_values, ctx->nattr));
  if (ctx->texts) PetscCall(replace_texts(g, ctx));
  PetscCall(h5u_close(&g));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode replace_task(void *vctx)
{
  ReplaceCtx *ctx = (ReplaceCtx *)vctx;

  PetscFunctionBegin;
  PetscCall(h5u_write_atomic("evaluations file", ctx->path, replace_fill, ctx));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode io_group_replace(MPI_Comm comm, const char *path, const char *group, const IODataset *d, int n, const char *text_name, const char *const *texts, int ntexts, const char *const *attr_names, const double *attr_values, int nattr)
{
  ReplaceCtx ctx = {path, group, text_name, d, n, nattr, ntexts, texts, attr_names, attr_values, -1};

  PetscFunctionBegin;
  PetscCall(h5u_rank0(comm, replace_task, &ctx));
  PetscFunctionReturn(PETSC_SUCCESS);
}
