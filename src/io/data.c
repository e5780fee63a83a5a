/* io: token datasets (prompts, SFT and preference data, rollouts saved for
 * inspection) and plain float matrices (score outputs). Rank 0 reads and
 * validates, then broadcasts; a bad file is one error naming the file and,
 * for a bad value, its row and column. Layout: docs/formats.md. */
#include "internal/h5util.h"
#include "internal/texts.h"

#include <string.h>

/* Row i's /loss_mask: 0 or 1 everywhere, 1 only where SFT can train (after
 * the prompt, and after the first token, which nothing predicts; before the
 * length), and 1 somewhere: a mask that marks a prompt token or padding is
 * misaligned with its tokens, and a row with no target would train nothing. */
static PetscErrorCode data_validate_mask(const char *path, const TokenData *d, int i)
{
  const unsigned char *m     = d->loss_mask + (size_t)i * d->T;
  int                  first = PetscMax(d->prompt_lengths ? d->prompt_lengths[i] : 0, 1), len = d->lengths[i], n = 0;

  PetscFunctionBegin;
  for (int t = 0; t < d->T; t++) {
    PetscCheck(m[t] <= 1, PETSC_COMM_SELF, PETSC_ERR_FILE_UNEXPECTED,
               "data file %s: /loss_mask[%d,%d] = %d, expected 0 (context) or 1 (a target)", path, i, t, m[t]);
    PetscCheck(!m[t] || (t >= first && t < len), PETSC_COMM_SELF, PETSC_ERR_FILE_UNEXPECTED,
               "data file %s: /loss_mask[%d,%d] = 1 where nothing is trained (row %d's targets can be positions "
               "%d..%d: after its prompt and first token, before /lengths[%d] = %d)",
               path, i, t, i, first, len - 1, i, len);
    n += m[t];
  }
  PetscCheck(n > 0, PETSC_COMM_SELF, PETSC_ERR_FILE_UNEXPECTED,
             "data file %s: row %d has no target (/loss_mask[%d,:] is 0 at every position): nothing to train on",
             path, i, i);
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* The checks data_read applies to a file, and data_write to what it writes. */
static PetscErrorCode data_validate(const char *path, const TokenData *d, const char *vocab_name)
{
  PetscFunctionBegin;
  PetscCheck(d->N >= 0 && d->T > 0, PETSC_COMM_SELF, PETSC_ERR_FILE_UNEXPECTED,
             "data file %s: /tokens has shape [%d,%d], expected at least one column", path, d->N, d->T);
  PetscCheck(d->vocab_size > 0, PETSC_COMM_SELF, PETSC_ERR_FILE_UNEXPECTED,
             "data file %s: vocab_size %d must be positive", path, d->vocab_size);
  for (int i = 0; i < d->N; i++) {
    int len = d->lengths[i];

    PetscCheck(len >= 1 && len <= d->T, PETSC_COMM_SELF, PETSC_ERR_FILE_UNEXPECTED,
               "data file %s: /lengths[%d] = %d, expected 1..%d (the width of /tokens)", path, i, len, d->T);
    PetscCheck(!d->prompt_lengths || (d->prompt_lengths[i] >= 0 && d->prompt_lengths[i] <= len), PETSC_COMM_SELF,
               PETSC_ERR_FILE_UNEXPECTED, "data file %s: /prompt_lengths[%d] = %d, expected 0..%d (/lengths[%d])", path,
               i, d->prompt_lengths ? d->prompt_lengths[i] : 0, len, i);
    for (int t = 0; t < d->T; t++) {
      int tok = d->tokens[(size_t)i * d->T + t];

      PetscCheck(tok >= 0 && tok < d->vocab_size, PETSC_COMM_SELF, PETSC_ERR_FILE_UNEXPECTED,
                 "data file %s: /tokens[%d,%d] = %d is outside [0, %s=%d)", path, i, t, tok, vocab_name, d->vocab_size);
    }
    if (d->loss_mask) PetscCall(data_validate_mask(path, d, i));
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* ---- reading ------------------------------------------------------------- */
typedef struct {
  const char *path;
  TokenData  *d;
  int         vocab;      /* > 0: stands in for a missing vocab_size attribute */
  const char *vocab_name; /* how errors name that stand-in */
} DataCtx;

/* An integer vector of length n; HDF5 converts any integer width to int
 * (values beyond int's range saturate, and then fail validation). */
static PetscErrorCode data_read_vector(hid_t file, const char *where, const char *name, int n, int **v)
{
  hsize_t dims[1] = {(hsize_t)n};
  char    full[64];
  hid_t   dset;

  PetscFunctionBegin;
  PetscCall(PetscSNPrintf(full, sizeof full, "/%s", name));
  PetscCall(io_dataset_open(file, where, full, name, IO_CLASS_INT, 0, 1, dims, &dset));
  PetscCheck(dims[0] == (hsize_t)n, PETSC_COMM_SELF, PETSC_ERR_FILE_UNEXPECTED,
             "%s: %s has %llu entries, expected %d (the rows of /tokens)", where, full, (unsigned long long)dims[0], n);
  PetscCall(PetscMalloc1(n + 1, v));
  if (n) PetscCall(io_dataset_read(dset, where, full, IO_INT, *v));
  PetscCall(io_close(&dset));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* /loss_mask, [N,T] of any integer type: read as int so that a value such as
 * -1 or 256 is reported as it is rather than converted to 0 or 255. */
static PetscErrorCode data_read_mask(hid_t file, const char *where, TokenData *d)
{
  hsize_t dims[2] = {0, 0};
  hid_t   dset;
  int    *v;
  size_t  n = (size_t)d->N * d->T;

  PetscFunctionBegin;
  PetscCall(io_dataset_open(file, where, "/loss_mask", "loss_mask", IO_CLASS_INT, 0, 2, dims, &dset));
  PetscCheck(dims[0] == (hsize_t)d->N && dims[1] == (hsize_t)d->T, PETSC_COMM_SELF, PETSC_ERR_FILE_UNEXPECTED,
             "%s: /loss_mask has shape [%llu,%llu], expected [%d,%d] (the shape of /tokens)", where,
             (unsigned long long)dims[0], (unsigned long long)dims[1], d->N, d->T);
  PetscCall(PetscMalloc1(n + 1, &v));
  if (n) PetscCall(io_dataset_read(dset, where, "/loss_mask", IO_INT, v));
  PetscCall(io_close(&dset));
  PetscCall(PetscMalloc1(n + 1, &d->loss_mask));
  for (size_t k = 0; k < n; k++) {
    if (v[k] < 0 || v[k] > 1) {
      int i = (int)(k / (size_t)d->T), t = (int)(k % (size_t)d->T), x = v[k];
      PetscCall(PetscFree(v));
      SETERRQ(PETSC_COMM_SELF, PETSC_ERR_FILE_UNEXPECTED,
              "%s: /loss_mask[%d,%d] = %d, expected 0 (context) or 1 (a target)", where, i, t, x);
    }
    d->loss_mask[k] = (unsigned char)v[k];
  }
  PetscCall(PetscFree(v));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode data_read_file(hid_t file, void *vctx)
{
  DataCtx   *ctx = (DataCtx *)vctx;
  TokenData *d   = ctx->d;
  char       where[PETSC_MAX_PATH_LEN + 16];
  hsize_t    dims[2] = {0, 0};
  hid_t      dset;
  int64_t    vocab;
  const char *vname = "vocab_size";

  PetscFunctionBegin;
  PetscCall(PetscSNPrintf(where, sizeof where, "data file %s", ctx->path));
  PetscCall(io_dataset_open(file, where, "/tokens", "tokens", IO_CLASS_INT, 0, 2, dims, &dset));
  PetscCheck(dims[0] < INT32_MAX && dims[1] < INT32_MAX, PETSC_COMM_SELF, PETSC_ERR_FILE_UNEXPECTED,
             "%s: /tokens is too large", where);
  d->N = (int)dims[0];
  d->T = (int)dims[1];
  PetscCall(PetscMalloc1((size_t)d->N * d->T + 1, &d->tokens));
  if (d->N && d->T) PetscCall(io_dataset_read(dset, where, "/tokens", IO_INT, d->tokens));
  PetscCall(io_close(&dset));
  if (ctx->vocab > 0 && H5Aexists(file, "vocab_size") <= 0) { /* optional for this caller */
    vocab = ctx->vocab;
    vname = ctx->vocab_name;
  } else PetscCall(io_attr_read_int(file, where, "vocab_size", INT64_MIN, INT64_MAX, &vocab));
  PetscCheck(vocab > 0 && vocab < INT32_MAX, PETSC_COMM_SELF, PETSC_ERR_FILE_UNEXPECTED,
             "%s: vocab_size %lld must be positive", where, (long long)vocab);
  d->vocab_size = (int)vocab;
  PetscCall(data_read_vector(file, where, "lengths", d->N, &d->lengths));
  if (H5Lexists(file, "prompt_lengths", H5P_DEFAULT) > 0)
    PetscCall(data_read_vector(file, where, "prompt_lengths", d->N, &d->prompt_lengths));
  if (H5Lexists(file, "loss_mask", H5P_DEFAULT) > 0) PetscCall(data_read_mask(file, where, d));
  PetscCall(io_texts_read(file, where, "answer", d->N, &d->answer));
  PetscCall(io_texts_read(file, where, "metadata", d->N, &d->metadata));
  PetscCall(data_validate(ctx->path, d, vname));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode data_read_task(void *vctx)
{
  DataCtx *ctx = (DataCtx *)vctx;

  PetscFunctionBegin;
  PetscCall(io_read_file("data file", ctx->path, data_read_file, ctx));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode data_bcast(MPI_Comm comm, TokenData *d)
{
  PetscMPIInt rank;
  int         hdr[5] = {d->N, d->T, d->vocab_size, d->prompt_lengths != NULL, d->loss_mask != NULL};

  PetscFunctionBegin;
  PetscCallMPI(MPI_Comm_rank(comm, &rank));
  PetscCallMPI(sys_mpi_bcast(hdr, 5, MPI_INT, 0, comm));
  if (rank) {
    d->N          = hdr[0];
    d->T          = hdr[1];
    d->vocab_size = hdr[2];
    PetscCall(PetscMalloc1((size_t)d->N * d->T + 1, &d->tokens));
    PetscCall(PetscMalloc1(d->N + 1, &d->lengths));
    if (hdr[3]) PetscCall(PetscMalloc1(d->N + 1, &d->prompt_lengths));
    if (hdr[4]) PetscCall(PetscMalloc1((size_t)d->N * d->T + 1, &d->loss_mask));
  }
  PetscCall(io_bcast(d->tokens, (size_t)d->N * d->T, MPI_INT, comm));
  PetscCall(io_bcast(d->lengths, (size_t)d->N, MPI_INT, comm));
  if (hdr[3]) PetscCall(io_bcast(d->prompt_lengths, (size_t)d->N, MPI_INT, comm));
  if (hdr[4]) PetscCall(io_bcast(d->loss_mask, (size_t)d->N * d->T, MPI_UNSIGNED_CHAR, comm));
  PetscCall(io_texts_bcast(comm, d->N, &d->answer));
  PetscCall(io_texts_bcast(comm, d->N, &d->metadata));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode data_read(MPI_Comm comm, const char *path, TokenData *d)
{
  PetscFunctionBegin;
  PetscCall(data_read_vocab(comm, path, 0, NULL, d));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode data_read_vocab(MPI_Comm comm, const char *path, int vocab, const char *vocab_name, TokenData *d)
{
  DataCtx        ctx = {path, d, vocab, vocab_name ? vocab_name : "vocab_size"};
  PetscErrorCode ierr;

  PetscFunctionBegin;
  PetscCall(PetscMemzero(d, sizeof *d));
  ierr = io_on_root(comm, data_read_task, &ctx);
  if (ierr) PetscCall(data_free(d));
  PetscCall(ierr);
  PetscCall(data_bcast(comm, d));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode data_free(TokenData *d)
{
  PetscFunctionBegin;
  PetscCall(PetscFree(d->tokens));
  PetscCall(PetscFree(d->lengths));
  PetscCall(PetscFree(d->prompt_lengths));
  PetscCall(PetscFree(d->loss_mask));
  PetscCall(io_texts_free(&d->answer));
  PetscCall(io_texts_free(&d->metadata));
  d->N = d->T = 0;
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* ---- writing ------------------------------------------------------------- */
typedef struct {
  const char      *path, *task;
  const TokenData *d;
  const IODataset *extra; /* further datasets of the same file (e.g. a generation's log-probabilities) */
  int              nextra;
} DataWriteCtx;

static PetscErrorCode data_fill(hid_t file, void *vctx)
{
  DataWriteCtx    *ctx     = (DataWriteCtx *)vctx;
  const TokenData *d       = ctx->d;
  hsize_t          dims[2] = {(hsize_t)d->N, (hsize_t)d->T};

  PetscFunctionBegin;
  PetscCall(io_dataset_write(file, "tokens", IO_I32LE, IO_INT, 2, dims, d->tokens));
  PetscCall(io_dataset_write(file, "lengths", IO_I32LE, IO_INT, 1, dims, d->lengths));
  if (d->prompt_lengths)
    PetscCall(io_dataset_write(file, "prompt_lengths", IO_I32LE, IO_INT, 1, dims, d->prompt_lengths));
  if (d->loss_mask) PetscCall(io_dataset_write(file, "loss_mask", IO_U8LE, IO_UCHAR, 2, dims, d->loss_mask));
  for (int i = 0; i < ctx->nextra; i++) {
    const IODataset *x     = &ctx->extra[i];
    hsize_t          xd[2] = {(hsize_t)x->dims[0], (hsize_t)(x->ndim > 1 ? x->dims[1] : 0)};
    PetscBool        u8    = (PetscBool)(x->is_int == IO_DATASET_U8);
    PetscCall(io_dataset_write(file, x->name, u8 ? IO_U8LE : x->is_int ? IO_I32LE : IO_F32LE,
                               u8 ? IO_UCHAR : x->is_int ? IO_INT : IO_FLOAT, x->ndim, xd, x->data));
  }
  PetscCall(io_attr_write_int(file, "vocab_size", IO_I32LE, d->vocab_size));
  PetscCall(io_attr_write_string(file, "task", ctx->task ? ctx->task : ""));
  PetscCall(io_write_version(file));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode data_write_task(void *vctx)
{
  DataWriteCtx *ctx = (DataWriteCtx *)vctx;

  PetscFunctionBegin;
  PetscCall(data_validate(ctx->path, ctx->d, "vocab_size"));
  PetscCall(io_write_atomic("data file", ctx->path, data_fill, ctx));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Validated first: a file this writes is one data_read accepts. */
PetscErrorCode data_write(MPI_Comm comm, const char *path, const TokenData *d, const char *task)
{
  PetscFunctionBegin;
  PetscCall(data_write_extra(comm, path, d, task, NULL, 0));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode data_write_extra(MPI_Comm comm, const char *path, const TokenData *d, const char *task,
                                const IODataset *extra, int nextra)
{
  DataWriteCtx ctx = {path, task, d, extra, nextra};

  PetscFunctionBegin;
  PetscCall(io_on_root(comm, data_write_task, &ctx));
  PetscFunctionReturn(PETSC_SUCCESS);
}

typedef struct {
  const char  *path, *name;
  const float *x;
  int          rows, cols;
} MatrixCtx;

static PetscErrorCode matrix_fill(hid_t file, void *vctx)
{
  MatrixCtx *ctx     = (MatrixCtx *)vctx;
  hsize_t    dims[2] = {(hsize_t)ctx->rows, (hsize_t)ctx->cols};

  PetscFunctionBegin;
  PetscCall(io_dataset_write(file, ctx->name, IO_F32LE, IO_FLOAT, 2, dims, ctx->x));
  PetscCall(io_write_version(file));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode matrix_write_task(void *vctx)
{
  MatrixCtx *ctx = (MatrixCtx *)vctx;

  PetscFunctionBegin;
  PetscCheck(ctx->rows >= 0 && ctx->cols >= 0 && ctx->name && ctx->name[0] && !strchr(ctx->name, '/'), PETSC_COMM_SELF,
             PETSC_ERR_ARG_WRONG, "output %s: bad matrix name or shape", ctx->path);
  PetscCall(io_write_atomic("output", ctx->path, matrix_fill, ctx));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* x is read on rank 0 only. */
PetscErrorCode io_write_matrix(MPI_Comm comm, const char *path, const char *name, const float *x, int rows, int cols)
{
  MatrixCtx ctx = {path, name, x, rows, cols};

  PetscFunctionBegin;
  PetscCall(io_on_root(comm, matrix_write_task, &ctx));
  PetscFunctionReturn(PETSC_SUCCESS);
}
