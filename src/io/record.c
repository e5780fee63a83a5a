/* io: run records. <output_dir>/run.h5 holds how the run was made (/code),
 * every option (/parameters), and one row per step of stage timings (max and
 * min over ranks) and metrics, flushed each step so a killed run still leaves
 * a readable file. Layout: docs/formats.md. Rank 0 writes; the other ranks
 * only take part in the reductions. */
#include "internal/h5util.h"

#include <math.h>
#include <string.h>
#include <unistd.h>

#define REC_NAME_LEN 64
#define REC_CHUNK    256 /* rows per chunk: a few KiB, appended one row at a time */

/* A stage (times) or a metric (values): this step's value and, on rank 0,
 * its datasets. */
typedef struct {
  char      name[REC_NAME_LEN];
  double    value;
  PetscBool set;
  hid_t     dset, dset_min; /* metrics: dset only; stages: <name>_max, <name>_min */
} RecColumn;

typedef struct {
  RecColumn *col;
  int        n, cap;
  int        nsynced; /* stages: the first nsynced have the same order on every rank */
} RecColumns;

struct RunRecord {
  MPI_Comm    comm;
  PetscMPIInt rank, size;
  char        path[PETSC_MAX_PATH_LEN];
  hid_t       file, timing, metrics, summary, timing_step, metrics_step;
  hsize_t     nrows;
  RecColumns  stages, mets;
  TimelineRows tl;          /* rank 0: this step's calls of every rank */
  hid_t        tl_group, tl_dset[5]; /* rank, step, call, start, end */
  hsize_t      tl_rows;
  int          tl_nnames;   /* names already in /timeline@calls */
};

static PetscErrorCode rec_group(hid_t loc, const char *name, hid_t *g);

/* ---- columns ------------------------------------------------------------- */
static PetscErrorCode rec_find(RecColumns *c, const char *kind, const char *name, RecColumn **col)
{
  PetscFunctionBegin;
  for (int i = 0; i < c->n; i++)
    if (!strcmp(c->col[i].name, name)) {
      *col = &c->col[i];
      PetscFunctionReturn(PETSC_SUCCESS);
    }
  PetscCheck(strlen(name) > 0 && strlen(name) < REC_NAME_LEN - 4 && !strchr(name, '/'), PETSC_COMM_SELF,
             PETSC_ERR_ARG_WRONG, "run record: %s name '%s' must be 1..%d characters without '/'", kind, name,
             REC_NAME_LEN - 5);
  PetscCheck(strcmp(name, "step"), PETSC_COMM_SELF, PETSC_ERR_ARG_WRONG, "run record: %s name 'step' is reserved",
             kind);
  if (c->n == c->cap) {
    c->cap = c->cap ? 2 * c->cap : 16;
    PetscCall(PetscRealloc(c->cap * sizeof(RecColumn), &c->col));
  }
  *col = &c->col[c->n++];
  PetscCall(PetscMemzero(*col, sizeof **col));
  PetscCall(PetscStrncpy((*col)->name, name, REC_NAME_LEN));
  (*col)->dset = (*col)->dset_min = H5I_INVALID_HID;
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode record_time(RunRecord *rec, const char *stage, double seconds)
{
  RecColumn *c;

  PetscFunctionBegin;
  PetscCall(rec_find(&rec->stages, "stage", stage, &c));
  c->value += seconds;
  c->set = PETSC_TRUE;
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode record_metric(RunRecord *rec, const char *name, double value)
{
  RecColumn *c;

  PetscFunctionBegin;
  PetscCall(rec_find(&rec->mets, "metric", name, &c));
  c->value = value;
  c->set   = PETSC_TRUE;
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Stage names first seen on some ranks only are appended on every rank in
 * the same order (rank 0's new names, then rank 1's, ...), so the arrays
 * reduced below line up. Costs one Allreduce when nothing is new. */
static PetscErrorCode rec_sync_stages(RunRecord *rec)
{
  RecColumns *c    = &rec->stages;
  int         nnew = c->n - c->nsynced, maxnew, len = 0, *lens, *displs, total;
  char       *mine, *all;
  RecColumn  *tail;

  PetscFunctionBegin;
  PetscCallMPI(MPI_Allreduce(&nnew, &maxnew, 1, MPI_INT, MPI_MAX, rec->comm));
  if (!maxnew) PetscFunctionReturn(PETSC_SUCCESS);
  for (int i = c->nsynced; i < c->n; i++) len += (int)strlen(c->col[i].name) + 1;
  PetscCall(PetscMalloc4(len + 1, &mine, rec->size, &lens, rec->size, &displs, nnew + 1, &tail));
  for (int i = c->nsynced, off = 0; i < c->n; i++) {
    PetscCall(PetscStrcpy(mine + off, c->col[i].name));
    off += (int)strlen(c->col[i].name) + 1;
    tail[i - c->nsynced] = c->col[i];
  }
  PetscCallMPI(MPI_Allgather(&len, 1, MPI_INT, lens, 1, MPI_INT, rec->comm));
  total = 0;
  for (int r = 0; r < rec->size; r++) {
    displs[r] = total;
    total += lens[r];
  }
  PetscCall(PetscMalloc1(total + 1, &all));
  PetscCallMPI(MPI_Allgatherv(mine, len, MPI_CHAR, all, lens, displs, MPI_CHAR, rec->comm));
  c->n = c->nsynced;
  for (int off = 0; off < total; off += (int)strlen(all + off) + 1) {
    RecColumn *col;

    PetscCall(rec_find(c, "stage", all + off, &col));
  }
  for (int i = 0; i < nnew; i++) { /* put this rank's values back under the new order */
    RecColumn *col;

    PetscCall(rec_find(c, "stage", tail[i].name, &col));
    col->value = tail[i].value;
    col->set   = tail[i].set;
  }
  c->nsynced = c->n;
  PetscCall(PetscFree(all));
  PetscCall(PetscFree4(mine, lens, displs, tail));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* ---- datasets ------------------------------------------------------------ */
/* A 1-D extendible column whose first `rows` entries (steps before it was
 * first seen) read as `fill`. */
static PetscErrorCode rec_column_create(hid_t g, const char *name, hid_t type, const void *fill, hsize_t rows,
                                        hid_t *dset)
{
  hsize_t maxdims = H5S_UNLIMITED, chunk = REC_CHUNK;
  hid_t   space, dcpl;

  PetscFunctionBegin;
  space = H5Screate_simple(1, &rows, &maxdims);
  H5Call(space, "HDF5: cannot create a dataspace for %s", name);
  dcpl = H5Pcreate(H5P_DATASET_CREATE);
  H5Call(dcpl, "HDF5: cannot create dataset properties");
  H5Call(H5Pset_chunk(dcpl, 1, &chunk), "HDF5: cannot set chunking");
  if (fill) H5Call(H5Pset_fill_value(dcpl, type, fill), "HDF5: cannot set the fill value of %s", name);
  *dset = H5Dcreate2(g, name, type, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
  H5Pclose(dcpl);
  H5Sclose(space);
  H5Call(*dset, "HDF5: cannot create dataset %s", name);
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode rec_append_n(hid_t dset, hsize_t row, hsize_t one, hid_t memtype, const void *value)
{
  hsize_t n = row + one;
  hid_t   fspace, mspace;
  herr_t  e;

  PetscFunctionBegin;
  H5Call(H5Dset_extent(dset, &n), "HDF5: cannot extend a run-record column");
  fspace = H5Dget_space(dset);
  H5Call(fspace, "HDF5: cannot get a run-record column's dataspace");
  H5Call(H5Sselect_hyperslab(fspace, H5S_SELECT_SET, &row, NULL, &one, NULL), "HDF5: cannot select row %llu",
         (unsigned long long)row);
  mspace = H5Screate_simple(1, &one, NULL);
  e      = H5Dwrite(dset, memtype, mspace, fspace, H5P_DEFAULT, value);
  H5Sclose(mspace);
  H5Sclose(fspace);
  H5CallWrite(e, "HDF5: cannot write row %llu of a run-record column", (unsigned long long)row);
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode rec_append(hid_t dset, hsize_t row, hid_t memtype, const void *value)
{
  PetscFunctionBegin;
  PetscCall(rec_append_n(dset, row, 1, memtype, value));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* /timeline: the step's calls of every rank, and the name list when it grew. */
static PetscErrorCode rec_write_timeline(RunRecord *rec, int64_t step)
{
  static const char *names[5] = {"rank", "step", "call", "start", "end"};
  TimelineRows      *t        = &rec->tl;
  int64_t           *steps;

  PetscFunctionBegin;
  if (!t->n && rec->tl_group < 0) PetscFunctionReturn(PETSC_SUCCESS);
  if (rec->tl_group < 0) {
    PetscCall(rec_group(rec->file, "timeline", &rec->tl_group));
    for (int k = 0; k < 5; k++)
      PetscCall(rec_column_create(rec->tl_group, names[k],
                                  k == 1  ? H5T_STD_I64LE
                                  : k < 3 ? H5T_STD_I32LE
                                          : H5T_IEEE_F64LE,
                                  NULL, 0, &rec->tl_dset[k]));
  }
  if (t->nnames > rec->tl_nnames) {
    char list[TIMELINE_MAX_NAMES * TIMELINE_NAME_LEN] = "";
    for (int k = 0; k < t->nnames; k++) {
      if (k) PetscCall(PetscStrlcat(list, " ", sizeof list));
      PetscCall(PetscStrlcat(list, t->names[k], sizeof list));
    }
    PetscCall(io_attr_write_string(rec->tl_group, "calls", list));
    rec->tl_nnames = t->nnames;
  }
  if (!t->n) PetscFunctionReturn(PETSC_SUCCESS);
  PetscCall(PetscMalloc1(t->n, &steps));
  for (int i = 0; i < t->n; i++) steps[i] = step;
  PetscCall(rec_append_n(rec->tl_dset[0], rec->tl_rows, (hsize_t)t->n, H5T_NATIVE_INT, t->rank));
  PetscCall(rec_append_n(rec->tl_dset[1], rec->tl_rows, (hsize_t)t->n, H5T_NATIVE_INT64, steps));
  PetscCall(rec_append_n(rec->tl_dset[2], rec->tl_rows, (hsize_t)t->n, H5T_NATIVE_INT, t->call));
  PetscCall(rec_append_n(rec->tl_dset[3], rec->tl_rows, (hsize_t)t->n, H5T_NATIVE_DOUBLE, t->start));
  PetscCall(rec_append_n(rec->tl_dset[4], rec->tl_rows, (hsize_t)t->n, H5T_NATIVE_DOUBLE, t->end));
  PetscCall(PetscFree(steps));
  rec->tl_rows += (hsize_t)t->n;
  PetscFunctionReturn(PETSC_SUCCESS);
}

typedef struct {
  RunRecord *rec;
  int64_t    step;
  double    *tmax, *tmin; /* per stage, reduced over ranks */
} RecRowCtx;

static PetscErrorCode rec_write_stages(RecRowCtx *ctx)
{
  RunRecord *rec  = ctx->rec;
  double     zero = 0;
  char       name[REC_NAME_LEN];

  PetscFunctionBegin;
  for (int i = 0; i < rec->stages.n; i++) {
    RecColumn *c = &rec->stages.col[i];

    if (c->dset < 0) {
      PetscCall(PetscSNPrintf(name, sizeof name, "%s_max", c->name));
      PetscCall(rec_column_create(rec->timing, name, H5T_IEEE_F64LE, &zero, rec->nrows, &c->dset));
      PetscCall(PetscSNPrintf(name, sizeof name, "%s_min", c->name));
      PetscCall(rec_column_create(rec->timing, name, H5T_IEEE_F64LE, &zero, rec->nrows, &c->dset_min));
    }
    PetscCall(rec_append(c->dset, rec->nrows, H5T_NATIVE_DOUBLE, &ctx->tmax[i]));
    PetscCall(rec_append(c->dset_min, rec->nrows, H5T_NATIVE_DOUBLE, &ctx->tmin[i]));
  }
  PetscCall(rec_append(rec->timing_step, rec->nrows, H5T_NATIVE_INT64, &ctx->step));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode rec_write_metrics(RecRowCtx *ctx)
{
  RunRecord *rec = ctx->rec;
  double     nan = NAN;

  PetscFunctionBegin;
  for (int i = 0; i < rec->mets.n; i++) {
    RecColumn *c = &rec->mets.col[i];

    if (c->dset < 0) PetscCall(rec_column_create(rec->metrics, c->name, H5T_IEEE_F64LE, &nan, rec->nrows, &c->dset));
    PetscCall(rec_append(c->dset, rec->nrows, H5T_NATIVE_DOUBLE, c->set ? &c->value : &nan));
  }
  PetscCall(rec_append(rec->metrics_step, rec->nrows, H5T_NATIVE_INT64, &ctx->step));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode rec_write_row_task(void *vctx)
{
  RecRowCtx *ctx = (RecRowCtx *)vctx;

  PetscFunctionBegin;
  PetscCall(rec_write_stages(ctx));
  PetscCall(rec_write_metrics(ctx));
  PetscCall(rec_write_timeline(ctx->rec, ctx->step));
  H5CallWrite(H5Fflush(ctx->rec->file, H5F_SCOPE_GLOBAL), "run record %s: flush failed", ctx->rec->path);
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode record_step(RunRecord *rec, PetscInt step)
{
  RecRowCtx ctx = {rec, (int64_t)step, NULL, NULL};
  double   *local;
  int       n;

  PetscFunctionBegin;
  PetscCall(rec_sync_stages(rec));
  n = rec->stages.n;
  PetscCall(PetscMalloc3(n + 1, &local, n + 1, &ctx.tmax, n + 1, &ctx.tmin));
  for (int i = 0; i < n; i++) local[i] = rec->stages.col[i].value; /* 0 when not timed this step */
  PetscCallMPI(MPI_Allreduce(local, ctx.tmax, n, MPI_DOUBLE, MPI_MAX, rec->comm));
  PetscCallMPI(MPI_Allreduce(local, ctx.tmin, n, MPI_DOUBLE, MPI_MIN, rec->comm));
  PetscCall(timeline_gather(rec->comm, &rec->tl));
  PetscCall(io_on_root(rec->comm, rec_write_row_task, &ctx));
  PetscCall(timeline_rows_free(&rec->tl));
  PetscCall(PetscFree3(local, ctx.tmax, ctx.tmin));
  rec->nrows++;
  for (int i = 0; i < rec->stages.n; i++) {
    rec->stages.col[i].value = 0;
    rec->stages.col[i].set   = PETSC_FALSE;
  }
  for (int i = 0; i < rec->mets.n; i++) rec->mets.col[i].set = PETSC_FALSE;
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode record_summary(RunRecord *rec, const char *name, double value)
{
  PetscFunctionBegin;
  if (rec->rank) PetscFunctionReturn(PETSC_SUCCESS);
  PetscCall(io_attr_write_double(rec->summary, name, value));
  H5CallWrite(H5Fflush(rec->file, H5F_SCOPE_GLOBAL), "run record %s: flush failed", rec->path);
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* ---- open and close ------------------------------------------------------ */
/* A previous <stem>.h5 in dir is evidence of a previous run: keep it as
 * <stem>.<k>.h5, the first k free (this rank; rank 0's work). */
PetscErrorCode io_keep_previous_local(const char *dir, const char *stem)
{
  char path[PETSC_MAX_PATH_LEN], old[PETSC_MAX_PATH_LEN];

  PetscFunctionBegin;
  PetscCall(sys_path_printf(path, sizeof path, "%s/%s.h5", dir, stem));
  if (access(path, F_OK)) PetscFunctionReturn(PETSC_SUCCESS);
  for (int k = 1;; k++) {
    PetscCheck(k < 100000, PETSC_COMM_SELF, PETSC_ERR_FILE_WRITE,
               "%s: %s.1.h5 to %s.99999.h5 all exist; clean up the output directory", path, stem, stem);
    PetscCall(sys_path_printf(old, sizeof old, "%s/%s.%d.h5", dir, stem, k));
    if (access(old, F_OK)) break;
  }
  PetscCheck(rename(path, old) == 0, PETSC_COMM_SELF, PETSC_ERR_FILE_WRITE, "%s: cannot rename the previous one to %s",
             path, old);
  PetscFunctionReturn(PETSC_SUCCESS);
}

typedef struct {
  const char *dir, *stem;
} KeepCtx;

static PetscErrorCode keep_task(void *vctx)
{
  KeepCtx *k = (KeepCtx *)vctx;

  PetscFunctionBegin;
  PetscCall(io_keep_previous_local(k->dir, k->stem));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode io_keep_previous(MPI_Comm comm, const char *dir, const char *stem)
{
  KeepCtx k = {dir, stem};

  PetscFunctionBegin;
  PetscCall(io_on_root(comm, keep_task, &k));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode rec_write_parameters(hid_t g)
{
  const SysParam *p;
  int             n;
  size_t          len = 1;
  char           *given, *db;

  PetscFunctionBegin;
  PetscCall(sys_params_get(&p, &n));
  for (int i = 0; i < n; i++) {
    PetscCall(io_attr_write_string(g, p[i].name, p[i].value));
    len += strlen(p[i].name) + 1;
  }
  PetscCall(PetscCalloc1(len, &given));
  for (int i = 0; i < n; i++) {
    if (!p[i].set) continue;
    if (given[0]) PetscCall(PetscStrlcat(given, " ", len));
    PetscCall(PetscStrlcat(given, p[i].name, len));
  }
  PetscCall(io_attr_write_string(g, "_given", given));
  PetscCall(PetscFree(given));
  PetscCall(PetscOptionsGetAll(NULL, &db)); /* also what rlfuse never read */
  PetscCall(io_attr_write_string(g, "_database", db));
  PetscCall(PetscFree(db));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Missing parents of a nested name ("plan/actor_gen") are created too. */
static PetscErrorCode rec_group(hid_t loc, const char *name, hid_t *g)
{
  hid_t lcpl;

  PetscFunctionBegin;
  lcpl = H5Pcreate(H5P_LINK_CREATE);
  H5Call(lcpl, "HDF5: cannot create link properties");
  *g = H5Pset_create_intermediate_group(lcpl, 1) < 0 ? H5I_INVALID_HID
                                                     : H5Gcreate2(loc, name, lcpl, H5P_DEFAULT, H5P_DEFAULT);
  H5Pclose(lcpl);
  H5Call(*g, "HDF5: cannot create group %s", name);
  PetscFunctionReturn(PETSC_SUCCESS);
}

typedef struct {
  RunRecord    *rec;
  const RunCtx *run;
  const char   *mode;
} RecOpenCtx;

static PetscErrorCode rec_write_header(RunRecord *rec, const RunCtx *run, const char *mode)
{
  hid_t g;

  PetscFunctionBegin;
  PetscCall(rec_group(rec->file, "code", &g));
  PetscCall(io_provenance_write(g, run, mode));
  PetscCall(io_close(&g));
  PetscCall(rec_group(rec->file, "parameters", &g));
  PetscCall(rec_write_parameters(g));
  PetscCall(io_close(&g));
  PetscCall(rec_group(rec->file, "timing", &rec->timing));
  PetscCall(rec_group(rec->file, "metrics", &rec->metrics));
  PetscCall(rec_group(rec->file, "summary", &rec->summary));
  PetscCall(rec_column_create(rec->timing, "step", H5T_STD_I64LE, NULL, 0, &rec->timing_step));
  PetscCall(rec_column_create(rec->metrics, "step", H5T_STD_I64LE, NULL, 0, &rec->metrics_step));
  H5CallWrite(H5Fflush(rec->file, H5F_SCOPE_GLOBAL), "run record %s: flush failed", rec->path);
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode rec_open_task(void *vctx)
{
  RecOpenCtx    *ctx = (RecOpenCtx *)vctx;
  RunRecord     *rec = ctx->rec;
  hid_t          fapl;
  PetscErrorCode ierr;

  PetscFunctionBegin;
  PetscCall(sys_mkdir_p(ctx->run->output_dir));
  PetscCall(io_output_ok("run record", rec->path));
  PetscCall(h5u_remove_stale_tmp(ctx->run->output_dir, NULL)); /* checkpoints of a killed run */
  PetscCall(io_keep_previous_local(ctx->run->output_dir, "run"));
  /* Unlocked, so that h5py or h5dump can look at a running job's record. */
  fapl = h5u_fapl(PETSC_FALSE);
  H5Call(fapl, "HDF5: cannot create file access properties");
  rec->file = H5Fcreate(rec->path, H5F_ACC_EXCL, H5P_DEFAULT, fapl);
  H5Pclose(fapl);
  PetscCheck(rec->file >= 0, PETSC_COMM_SELF, PETSC_ERR_FILE_OPEN, "run record %s: cannot create the file", rec->path);
  ierr = rec_write_header(rec, ctx->run, ctx->mode);
  if (ierr) {
    h5u_fclose(rec->file);
    rec->file = H5I_INVALID_HID;
  }
  PetscCall(ierr);
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode record_open(const RunCtx *run, const char *mode, RunRecord **out)
{
  RunRecord     *rec;
  RecOpenCtx     ctx;
  PetscErrorCode ierr;

  PetscFunctionBegin;
  PetscCall(sys_used_deck_write()); /* the job's first record: its options have been checked */
  PetscCall(PetscNew(&rec));
  rec->comm = run->comm;
  rec->file = rec->timing = rec->metrics = rec->summary = rec->timing_step = rec->metrics_step = rec->tl_group =
      H5I_INVALID_HID;
  PetscCallMPI(MPI_Comm_rank(rec->comm, &rec->rank));
  PetscCallMPI(MPI_Comm_size(rec->comm, &rec->size));
  PetscCall(sys_path_printf(rec->path, sizeof rec->path, "%s/run.h5", run->output_dir));
  ctx.rec  = rec;
  ctx.run  = run;
  ctx.mode = mode;
  ierr     = io_on_root(rec->comm, rec_open_task, &ctx);
  if (ierr) PetscCall(PetscFree(rec));
  PetscCall(ierr);
  PetscCall(timeline_start(rec->comm));
  *out = rec;
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* The file is opened with the strong close degree: closing it closes every
 * group and dataset still open. */
PetscErrorCode record_close(RunRecord **rec)
{
  RunRecord *r = *rec;

  PetscFunctionBegin;
  if (!r) PetscFunctionReturn(PETSC_SUCCESS);
  if (r->file >= 0) H5CallWrite(h5u_fclose(r->file), "run record %s: close failed", r->path);
  PetscCall(PetscFree(r->stages.col));
  PetscCall(PetscFree(r->mets.col));
  PetscCall(PetscFree(r));
  *rec = NULL;
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* ---- further groups (e.g. /plan) -------------------------------------------- */
typedef struct {
  RunRecord        *rec;
  const char       *group;
  const IODataset  *d;
  int               n, nattr;
  const char *const *attr_names;
  const double     *attr_values;
} RecGroupCtx;

static PetscErrorCode rec_group_task(void *vctx)
{
  RecGroupCtx *ctx = (RecGroupCtx *)vctx;
  RunRecord   *rec = ctx->rec;
  hid_t        g;

  PetscFunctionBegin;
  /* H5Lexists fails when a parent is missing, which also means "absent" */
  if (H5Lexists(rec->file, ctx->group, H5P_DEFAULT) > 0)
    H5Call(H5Ldelete(rec->file, ctx->group, H5P_DEFAULT), "run record %s: cannot replace group /%s", rec->path,
           ctx->group);
  PetscCall(rec_group(rec->file, ctx->group, &g));
  PetscCall(io_group_fill(g, ctx->d, ctx->n, ctx->attr_names, ctx->attr_values, ctx->nattr));
  PetscCall(io_close(&g));
  H5CallWrite(H5Fflush(rec->file, H5F_SCOPE_GLOBAL), "run record %s: flush failed", rec->path);
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode record_group(RunRecord *rec, const char *group, const IODataset *d, int n, const char *const *attr_names,
                            const double *attr_values, int nattr)
{
  RecGroupCtx ctx = {rec, group, d, n, nattr, attr_names, attr_values};

  PetscFunctionBegin;
  PetscCall(io_on_root(rec->comm, rec_group_task, &ctx));
  PetscFunctionReturn(PETSC_SUCCESS);
}
