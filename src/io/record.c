/* io: run records. <output_dir>/run.h5 holds how the run was made (/code),
 * every option (/parameters), and one row per step of stage timings (max and
 * min over ranks) and metrics. Layout: docs/formats.md. Rank 0 writes; the
 * other ranks only take part in the reductions.
 * A kill at any moment leaves run.h5 whole: rank 0 appends to a copy of it
 * (its temporary, locked as a checkpoint's is) and commits the copy by a
 * rename: before every checkpoint (record_commit, so that a checkpoint's rows
 * are in the record), at the end, and after a row whenever the time since the
 * last commit is REC_COMMIT_RATIO times what a commit costs (docs/design.md
 * says why), and on an error exit. A restarted run continues the record of
 * its output directory from its checkpoint's step. */
#include "internal/h5util.h"

#include <math.h>
#include <string.h>
#include <unistd.h>

#define REC_NAME_LEN 64
#define REC_CHUNK    256 /* rows per chunk: a few KiB, appended one row at a time */
#define REC_COMMIT_RATIO 20 /* commits cost at most about 1/20 of the run's time */

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
  char        path[PETSC_MAX_PATH_LEN], tmp[PETSC_MAX_PATH_LEN]; /* rank 0 writes tmp, a copy of path */
  int         lock;                                             /* rank 0: the temporary's claim */
  int         writing;                                          /* rank 0: a row or group half written */
  double      t_commit, commit_s;                               /* the last commit's end and its cost */
  hid_t       file, timing, metrics, summary, timing_step, metrics_step;
  hsize_t     nrows;
  int         continued; /* 1: a restart continues the run.h5 that was there (record_continued) */
  RecColumns  stages, mets;
  TimelineRows tl;          /* rank 0: this step's calls of every rank */
  hid_t        tl_group, tl_dset[5]; /* rank, step, call, start, end */
  hsize_t      tl_rows;
  int          tl_nnames;   /* names already in /timeline@calls */
};

static PetscErrorCode rec_group(hid_t loc, const char *name, hid_t *g);
static PetscErrorCode rec_commit(RunRecord *rec, int reopen);

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
  PetscCallMPI(sys_mpi_allreduce(&nnew, &maxnew, 1, MPI_INT, MPI_MAX, rec->comm));
  if (!maxnew) PetscFunctionReturn(PETSC_SUCCESS);
  for (int i = c->nsynced; i < c->n; i++) len += (int)strlen(c->col[i].name) + 1;
  PetscCall(PetscMalloc4(len + 1, &mine, rec->size, &lens, rec->size, &displs, nnew + 1, &tail));
  for (int i = c->nsynced, off = 0; i < c->n; i++) {
    PetscCall(PetscStrcpy(mine + off, c->col[i].name));
    off += (int)strlen(c->col[i].name) + 1;
    tail[i - c->nsynced] = c->col[i];
  }
  PetscCallMPI(sys_mpi_allgather(&len, 1, MPI_INT, lens, 1, MPI_INT, rec->comm));
  total = 0;
  for (int r = 0; r < rec->size; r++) {
    displs[r] = total;
    total += lens[r];
  }
  PetscCall(PetscMalloc1(total + 1, &all));
  PetscCallMPI(sys_mpi_allgatherv(mine, len, MPI_CHAR, all, lens, displs, MPI_CHAR, rec->comm));
  c->n = c->nsynced;
  for (int off = 0; off < total; off += (int)strlen(all + off) + 1) {
    RecColumn *col;

    PetscCall(rec_find(c, "stage", all + off, &col));
  }
  for (int i = 0; i < nnew; i++) { /* put this rank's values back under the new order */
    RecColumn *col;

    PetscCall(rec_find(c, "stage", tail[i].name, &col));
    col->value    = tail[i].value;
    col->set      = tail[i].set;
    col->dset     = tail[i].dset; /* rank 0: a continued record's columns are open */
    col->dset_min = tail[i].dset_min;
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
  ctx->rec->writing = 1; /* until the row is whole: an error exit then drops it */
  PetscCall(rec_write_stages(ctx));
  PetscCall(rec_write_metrics(ctx));
  PetscCall(rec_write_timeline(ctx->rec, ctx->step));
  ctx->rec->writing = 0;
  if (sys_wtime() - ctx->rec->t_commit >= REC_COMMIT_RATIO * ctx->rec->commit_s) PetscCall(rec_commit(ctx->rec, 1));
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
  PetscCallMPI(sys_mpi_allreduce(local, ctx.tmax, n, MPI_DOUBLE, MPI_MAX, rec->comm));
  PetscCallMPI(sys_mpi_allreduce(local, ctx.tmin, n, MPI_DOUBLE, MPI_MIN, rec->comm));
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

PetscBool record_continued(const RunRecord *rec) { return (PetscBool)rec->continued; }

PetscErrorCode record_summary(RunRecord *rec, const char *name, double value)
{
  PetscFunctionBegin;
  if (rec->rank) PetscFunctionReturn(PETSC_SUCCESS);
  PetscCall(io_attr_write_double(rec->summary, name, value));
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
  PetscInt      from_step; /* > 0: a restart from that step's checkpoint */
} RecOpenCtx;

/* /code and /parameters: this process's. */
static PetscErrorCode rec_write_provenance(RunRecord *rec, const RunCtx *run, const char *mode)
{
  hid_t g;

  PetscFunctionBegin;
  PetscCall(rec_group(rec->file, "code", &g));
  PetscCall(io_provenance_write(g, run, mode));
  PetscCall(io_close(&g));
  PetscCall(rec_group(rec->file, "parameters", &g));
  PetscCall(rec_write_parameters(g));
  PetscCall(io_close(&g));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode rec_write_header(RunRecord *rec, const RunCtx *run, const char *mode)
{
  hid_t g, d;

  PetscFunctionBegin;
  PetscCall(rec_write_provenance(rec, run, mode));
  for (int k = 0; k < 2; k++) {
    PetscCall(rec_group(rec->file, k ? "metrics" : "timing", &g));
    PetscCall(rec_column_create(g, "step", H5T_STD_I64LE, NULL, 0, &d));
    PetscCall(io_close(&d));
    PetscCall(io_close(&g));
  }
  PetscCall(rec_group(rec->file, "summary", &g));
  PetscCall(io_close(&g));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static hid_t rec_open_if(hid_t loc, const char *name)
{
  return H5Lexists(loc, name, H5P_DEFAULT) > 0 ? H5Oopen(loc, name, H5P_DEFAULT) : H5I_INVALID_HID;
}

/* Rank 0, the temporary just opened: the handles of every group and column
 * the record has made so far (columns not in the file yet are made when
 * first written). */
static PetscErrorCode rec_attach(RunRecord *rec)
{
  static const char *tl_names[5] = {"rank", "step", "call", "start", "end"};
  char               name[REC_NAME_LEN];

  PetscFunctionBegin;
  rec->timing  = rec_open_if(rec->file, "timing");
  rec->metrics = rec_open_if(rec->file, "metrics");
  rec->summary = rec_open_if(rec->file, "summary");
  PetscCheck(rec->timing >= 0 && rec->metrics >= 0 && rec->summary >= 0, PETSC_COMM_SELF, PETSC_ERR_FILE_UNEXPECTED,
             "run record %s: /timing, /metrics or /summary is missing", rec->path);
  rec->timing_step  = rec_open_if(rec->timing, "step");
  rec->metrics_step = rec_open_if(rec->metrics, "step");
  PetscCheck(rec->timing_step >= 0 && rec->metrics_step >= 0, PETSC_COMM_SELF, PETSC_ERR_FILE_UNEXPECTED,
             "run record %s: /timing/step or /metrics/step is missing", rec->path);
  for (int i = 0; i < rec->stages.n; i++) {
    RecColumn *c = &rec->stages.col[i];
    PetscCall(PetscSNPrintf(name, sizeof name, "%s_max", c->name));
    c->dset = rec_open_if(rec->timing, name);
    PetscCall(PetscSNPrintf(name, sizeof name, "%s_min", c->name));
    c->dset_min = rec_open_if(rec->timing, name);
    PetscCheck((c->dset < 0) == (c->dset_min < 0), PETSC_COMM_SELF, PETSC_ERR_FILE_UNEXPECTED,
               "run record %s: /timing/%s_max and _min: one is missing", rec->path, c->name);
  }
  for (int i = 0; i < rec->mets.n; i++) rec->mets.col[i].dset = rec_open_if(rec->metrics, rec->mets.col[i].name);
  rec->tl_group = rec_open_if(rec->file, "timeline");
  for (int k = 0; k < 5; k++)
    rec->tl_dset[k] = rec->tl_group < 0 ? H5I_INVALID_HID : rec_open_if(rec->tl_group, tl_names[k]);
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Rank 0: the temporary closed, renamed over run.h5 (the commit), and,
 * unless the record ends, copied again to go on appending. */
static PetscErrorCode rec_commit(RunRecord *rec, int reopen)
{
  double t0 = sys_wtime();
  herr_t e;
  hid_t  fapl;

  PetscFunctionBegin;
  if (rec->file < 0) PetscFunctionReturn(PETSC_SUCCESS);
  e         = h5u_fclose(rec->file); /* the strong close degree: every handle with it */
  rec->file = H5I_INVALID_HID;
  H5CallWrite(e, "run record %s: closing %s failed", rec->path, rec->tmp);
  PetscCall(h5u_sync_rename("run record", rec->tmp, rec->path));
  if (!reopen) PetscFunctionReturn(PETSC_SUCCESS);
  PetscCall(h5u_copy_file(rec->path, rec->tmp));
  /* unlocked: the temporary is this process's alone (its claim), and HDF5's
   * lock fails on some file systems */
  fapl = h5u_fapl(PETSC_FALSE);
  H5Call(fapl, "HDF5: cannot create file access properties");
  rec->file = H5Fopen(rec->tmp, H5F_ACC_RDWR, fapl);
  H5Pclose(fapl);
  PetscCheck(rec->file >= 0, PETSC_COMM_SELF, PETSC_ERR_FILE_OPEN, "run record %s: cannot open its copy %s", rec->path,
             rec->tmp);
  PetscCall(rec_attach(rec));
  rec->t_commit = sys_wtime();
  rec->commit_s = rec->t_commit - t0;
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode rec_commit_task(void *vctx)
{
  PetscFunctionBegin;
  PetscCall(rec_commit((RunRecord *)vctx, 1));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode record_commit(RunRecord *rec)
{
  PetscFunctionBegin;
  if (rec) PetscCall(io_on_root(rec->comm, rec_commit_task, rec));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* ---- a restarted run's record ------------------------------------------------ */
/* Whether the int64 column `step` of group g has a row at step `from` or later. */
static PetscBool rec_reaches(hid_t file, const char *column, int64_t from)
{
  hid_t     d = H5Dopen2(file, column, H5P_DEFAULT), space;
  hsize_t   n = 0;
  int64_t  *steps;
  PetscBool yes = PETSC_FALSE;

  if (d < 0) return PETSC_FALSE;
  space = H5Dget_space(d);
  if (space >= 0 && H5Sget_simple_extent_ndims(space) == 1) H5Sget_simple_extent_dims(space, &n, NULL);
  if (space >= 0) H5Sclose(space);
  steps = n ? malloc(n * sizeof *steps) : NULL;
  if (steps && H5Dread(d, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, steps) >= 0)
    for (hsize_t i = 0; i < n && !yes; i++) yes = (PetscBool)(steps[i] >= from);
  free(steps);
  H5Dclose(d);
  return yes;
}

/* Whether path is a record this run continues: a readable run record of the
 * same mode whose rows reach the checkpoint's step `from` (another mode's, a
 * damaged one, or one that stops short, such as another run's record in the
 * output directory, is kept as run.<k>.h5). */
static PetscBool rec_continues(const char *path, const char *mode, int64_t from)
{
  hid_t     fapl = h5u_fapl(PETSC_FALSE), file, code;
  char      was[64] = "";
  PetscBool same    = PETSC_FALSE;

  if (fapl < 0) return PETSC_FALSE;
  file = H5Fis_hdf5(path) > 0 ? H5Fopen(path, H5F_ACC_RDONLY, fapl) : H5I_INVALID_HID;
  H5Pclose(fapl);
  if (file < 0) return PETSC_FALSE;
  code = rec_open_if(file, "code");
  if (code >= 0 && H5Aexists(code, "mode") > 0 &&
      !io_attr_read_string(code, "run record /code", "mode", was, sizeof was))
    same = (PetscBool)(!strcmp(was, mode) && H5Lexists(file, "metrics", H5P_DEFAULT) > 0 &&
                       H5Lexists(file, "metrics/step", H5P_DEFAULT) > 0 && H5Lexists(file, "timing", H5P_DEFAULT) > 0 &&
                       H5Lexists(file, "timing/step", H5P_DEFAULT) > 0 && rec_reaches(file, "metrics/step", from));
  if (code >= 0) H5Oclose(code);
  h5u_fclose(file);
  return same;
}

typedef struct {
  RunRecord *rec;
  hsize_t    keep;
  int        timing; /* the group: its stage columns are registered */
  herr_t     err;
} RecCut;

/* A column of the group: cut to the rows kept, registered as a column. */
static int rec_cut_one(hid_t g, const char *name, void *vctx)
{
  RecCut    *c = (RecCut *)vctx;
  hid_t      d = H5Dopen2(g, name, H5P_DEFAULT);
  RecColumn *col;
  size_t     n = strlen(name);
  char       stage[REC_NAME_LEN];

  if (d < 0 || H5Dset_extent(d, &c->keep) < 0) c->err = -1;
  if (d >= 0) H5Dclose(d);
  if (c->err < 0 || !strcmp(name, "step") || !c->rec) return c->err < 0;
  if (!c->timing && rec_find(&c->rec->mets, "metric", name, &col)) c->err = -1;
  if (c->timing && n > 4 && n < sizeof stage && !strcmp(name + n - 4, "_max")) {
    snprintf(stage, sizeof stage, "%.*s", (int)(n - 4), name);
    if (rec_find(&c->rec->stages, "stage", stage, &col)) c->err = -1;
  }
  return c->err < 0;
}

/* Rows of column `step` (int64, increasing) in group g up to `last`. */
static PetscErrorCode rec_rows_upto(hid_t g, const char *what, int64_t last, hsize_t *keep)
{
  hid_t    d = H5Dopen2(g, "step", H5P_DEFAULT), space;
  hsize_t  n = 0;
  int64_t *steps;

  PetscFunctionBegin;
  H5Call(d, "run record: cannot open %s/step", what);
  space = H5Dget_space(d);
  if (space >= 0) H5Sget_simple_extent_dims(space, &n, NULL), H5Sclose(space);
  PetscCall(PetscMalloc1(n + 1, &steps));
  if (n && H5Dread(d, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, steps) < 0) n = 0, *keep = (hsize_t)-1;
  else *keep = 0;
  H5Dclose(d);
  PetscCheck(*keep == 0, PETSC_COMM_SELF, PETSC_ERR_FILE_READ, "run record: cannot read %s/step", what);
  while (*keep < n && steps[*keep] <= last) (*keep)++;
  PetscCall(PetscFree(steps));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* The record as an uninterrupted run has it after step `last`: the rows of
 * later steps (written before a kill) cut off, the summary cleared, /code
 * and /parameters this process's (@resumed_from_step: the checkpoint's). */
static PetscErrorCode rec_continue(RunRecord *rec, const RunCtx *run, const char *mode, int64_t last)
{
  static const char *groups[2] = {"timing", "metrics"};
  RecCut             cut       = {rec, 0, 0, 0};
  hid_t              g;

  PetscFunctionBegin;
  for (int k = 0; k < 2; k++) {
    g = H5Gopen2(rec->file, groups[k], H5P_DEFAULT);
    H5Call(g, "run record %s: cannot open /%s", rec->path, groups[k]);
    PetscCall(rec_rows_upto(g, groups[k], last, &cut.keep));
    rec->nrows = cut.keep; /* the same in both groups: every row has a step in each */
    cut.timing = !k;
    cut.err    = 0;
    if (io_iterate(g, rec_cut_one, &cut) < 0 || cut.err < 0) {
      H5Gclose(g);
      SETERRQ(PETSC_COMM_SELF, PETSC_ERR_FILE_WRITE, "run record %s: cannot cut /%s to step %lld", rec->path, groups[k],
              (long long)last);
    }
    H5Gclose(g);
  }
  if ((g = rec_open_if(rec->file, "timeline")) >= 0) { /* its rows, and its call names in their indices' order */
    char list[TIMELINE_MAX_NAMES * TIMELINE_NAME_LEN] = "", *tok, *save = NULL;
    PetscCall(rec_rows_upto(g, "/timeline", last, &cut.keep));
    cut.rec = NULL, cut.err = 0; /* its columns are cut, not registered */
    (void)io_iterate(g, rec_cut_one, &cut);
    rec->tl_rows = cut.keep;
    if (H5Aexists(g, "calls") > 0)
      PetscCall(io_attr_read_string(g, "run record /timeline", "calls", list, sizeof list));
    H5Oclose(g);
    PetscCheck(cut.err == 0, PETSC_COMM_SELF, PETSC_ERR_FILE_WRITE, "run record %s: cannot cut /timeline", rec->path);
    for (tok = strtok_r(list, " ", &save); tok && rec->tl.nnames < TIMELINE_MAX_NAMES; tok = strtok_r(NULL, " ", &save))
      PetscCall(PetscStrncpy(rec->tl.names[rec->tl.nnames++], tok, TIMELINE_NAME_LEN));
    rec->tl_nnames = rec->tl.nnames;
  }
  for (int k = 0; k < 3; k++) {
    static const char *replaced[3] = {"summary", "code", "parameters"};
    H5Call(H5Ldelete(rec->file, replaced[k], H5P_DEFAULT), "run record %s: cannot replace /%s", rec->path, replaced[k]);
  }
  PetscCall(rec_write_provenance(rec, run, mode));
  PetscCall(rec_group(rec->file, "summary", &g));
  PetscCall(io_close(&g));
  g = H5Gopen2(rec->file, "code", H5P_DEFAULT);
  H5Call(g, "run record %s: cannot open /code", rec->path);
  PetscCall(io_attr_write_int(g, "resumed_from_step", IO_I64LE, last));
  PetscCall(io_close(&g));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* The record a process has open (rank 0; one at a time: a pipeline's
 * stages open theirs in turn), for the error exit. */
static RunRecord *rec_live;

/* On an error exit (sys_error_exit), before HDF5's files are closed: the
 * rows written since the last commit are committed too (a failing run's
 * last rows are what tells why), unless a row or group was half written or
 * the close fails (a full disk); then the temporary is removed. 1: HDF5
 * holds a file it could not close. */
static int rec_exit_commit(void)
{
  RunRecord *r = rec_live;
  int        stuck = 0, committed = 0;

  if (!r) return 0;
  rec_live = NULL;
  if (r->file >= 0 && !r->writing) {
    stuck     = h5u_fclose(r->file) < 0;
    r->file   = H5I_INVALID_HID;
    committed = !stuck && h5u_sync_rename_quiet(r->tmp, r->path) == 0;
  }
  if (!committed) unlink(r->tmp); /* a file still open is closed later, unlinked */
  h5u_tmp_release(r->tmp, r->lock);
  r->lock = -1;
  return stuck;
}

static PetscErrorCode rec_open_task(void *vctx)
{
  RecOpenCtx    *ctx = (RecOpenCtx *)vctx;
  RunRecord     *rec = ctx->rec;
  hid_t          fapl;
  PetscBool      cont;
  PetscErrorCode ierr;

  PetscFunctionBegin;
  PetscCall(sys_mkdir_p(ctx->run->output_dir));
  PetscCall(io_output_ok("run record", rec->path));
  PetscCall(h5u_remove_stale_tmp(ctx->run->output_dir, NULL)); /* checkpoints and records of a killed run */
  cont = (PetscBool)(ctx->from_step > 0 && rec_continues(rec->path, ctx->mode, (int64_t)ctx->from_step));
  if (!cont) PetscCall(io_keep_previous_local(ctx->run->output_dir, "run"));
  rec->continued = cont;
  PetscCall(h5u_tmp_name(rec->path, rec->tmp, sizeof rec->tmp));
  PetscCall(h5u_tmp_claim(rec->tmp, &rec->lock));
  if (cont) PetscCall(h5u_copy_file(rec->path, rec->tmp));
  fapl = h5u_fapl(PETSC_FALSE);
  H5Call(fapl, "HDF5: cannot create file access properties");
  rec->file = cont ? H5Fopen(rec->tmp, H5F_ACC_RDWR, fapl) : H5Fcreate(rec->tmp, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
  H5Pclose(fapl);
  PetscCheck(rec->file >= 0, PETSC_COMM_SELF, PETSC_ERR_FILE_OPEN, "run record %s: cannot create %s", rec->path,
             rec->tmp);
  ierr = cont ? rec_continue(rec, ctx->run, ctx->mode, (int64_t)ctx->from_step)
              : rec_write_header(rec, ctx->run, ctx->mode);
  if (!ierr) ierr = rec_commit(rec, 1); /* the header (or the cut record) is run.h5 from the start */
  if (ierr && rec->file >= 0) {
    h5u_fclose(rec->file);
    rec->file = H5I_INVALID_HID;
  }
  PetscCall(ierr);
  rec_live = rec;
  sys_error_exit_hook(rec_exit_commit); /* after h5u_fapl's: the hooks run last first */
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode record_open(const RunCtx *run, const char *mode, PetscInt from_step, RunRecord **out)
{
  RunRecord     *rec;
  RecOpenCtx     ctx;
  PetscErrorCode ierr;

  PetscFunctionBegin;
  PetscCall(sys_used_deck_write()); /* the job's first record: its options have been checked */
  PetscCall(PetscNew(&rec));
  rec->comm = run->comm;
  rec->lock = -1;
  rec->file = rec->timing = rec->metrics = rec->summary = rec->timing_step = rec->metrics_step = rec->tl_group =
      H5I_INVALID_HID;
  PetscCallMPI(MPI_Comm_rank(rec->comm, &rec->rank));
  PetscCallMPI(MPI_Comm_size(rec->comm, &rec->size));
  PetscCall(sys_path_printf(rec->path, sizeof rec->path, "%s/run.h5", run->output_dir));
  ctx.rec       = rec;
  ctx.run       = run;
  ctx.mode      = mode;
  ctx.from_step = from_step;
  ierr          = io_on_root(rec->comm, rec_open_task, &ctx);
  if (ierr) {
    if (rec->lock >= 0) unlink(rec->tmp), h5u_tmp_release(rec->tmp, rec->lock);
    PetscCall(PetscFree(rec->stages.col));
    PetscCall(PetscFree(rec->mets.col));
    PetscCall(PetscFree(rec));
  }
  PetscCall(ierr);
  PetscCall(io_bcast(&rec->nrows, sizeof rec->nrows, MPI_BYTE, rec->comm)); /* a continued record's rows */
  PetscCall(io_bcast(&rec->continued, 1, MPI_INT, rec->comm));
  PetscCall(timeline_start(rec->comm));
  *out = rec;
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* The last commit. The file is opened with the strong close degree: closing
 * it closes every group and dataset still open. */
static PetscErrorCode rec_close_task(void *vctx)
{
  PetscFunctionBegin;
  PetscCall(rec_commit((RunRecord *)vctx, 0));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode record_close(RunRecord **rec)
{
  RunRecord     *r = *rec;
  PetscErrorCode ierr;

  PetscFunctionBegin;
  if (!r) PetscFunctionReturn(PETSC_SUCCESS);
  if (rec_live == r) rec_live = NULL;
  ierr = io_on_root(r->comm, rec_close_task, r);
  if (r->lock >= 0) h5u_tmp_release(r->tmp, r->lock); /* after a failed commit the temporary stays for the sweep */
  PetscCall(ierr);
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
  rec->writing = 1;
  /* H5Lexists fails when a parent is missing, which also means "absent" */
  if (H5Lexists(rec->file, ctx->group, H5P_DEFAULT) > 0)
    H5Call(H5Ldelete(rec->file, ctx->group, H5P_DEFAULT), "run record %s: cannot replace group /%s", rec->path,
           ctx->group);
  PetscCall(rec_group(rec->file, ctx->group, &g));
  PetscCall(io_group_fill(g, ctx->d, ctx->n, ctx->attr_names, ctx->attr_values, ctx->nattr));
  PetscCall(io_close(&g));
  rec->writing = 0;
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
