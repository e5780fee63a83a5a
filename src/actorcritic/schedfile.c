/* schedfile.c: schedule files (docs/formats.md, "Schedule file"). Layout:
 *   /                 attributes pp0, pp1, m0, m1 (int); f0, f1, mem0, mem1,
 *                     mem_cap, makespan, lower_bound, greedy_makespan,
 *                     sequential_makespan, sequential_peak_memory (double);
 *                     peak_memory (double [nranks]); rlfuse_version,
 *                     git_revision
 *   /node_<i>/tasks   int32 [n, 3]: rank i's tasks in the order it runs them,
 *                     rows (model 0 actor / 1 critic, kind 0 forward /
 *                     1 backward, micro-batch)
 * The reader checks the file against the instance it is given and
 * validates the schedule (every task once, no deadlock, memory cap). */
#include "ac_impl.h"
#include "internal/h5util.h"
#include <sys/stat.h>

typedef struct {
  const char           *path;
  const ACSched      *s;
  const ACOptimizeInfo *info;
  const ACScore      *seq;
  double               *peak;
} ACWriteCtx;

static PetscErrorCode attr_write_doubles(hid_t obj, const char *name, int n, const double *v)
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

static PetscErrorCode ac_write_fill(hid_t file, void *vctx)
{
  ACWriteCtx   *ctx = (ACWriteCtx *)vctx;
  const ACSched *s  = ctx->s;
  const ACInst  *in = &s->inst;
  const char      *ints[4] = {"pp0", "pp1", "m0", "m1"};
  int              iv[4]   = {in->pp[0], in->pp[1], in->m[0], in->m[1]};
  const char      *dbl[10] = {"f0", "f1", "mem0", "mem1", "mem_cap", "makespan", "lower_bound", "greedy_makespan", "sequential_makespan", "sequential_peak_memory"};
  double           dv[10]  = {in->f[0], in->f[1], in->mem[0], in->mem[1], in->mem_cap, ctx->info->best.makespan, ctx->info->lower_bound, ctx->info->greedy.makespan, ctx->seq->makespan, ctx->seq->peak_mem};
  int             *rows;

  PetscFunctionBegin;
  PetscCall(h5u_write_version(file));
  for (int k = 0; k < 4; k++) PetscCall(h5u_attr_write_int(file, ints[k], H5T_STD_I32LE, iv[k]));
  for (int k = 0; k < 10; k++) PetscCall(h5u_attr_write_double(file, dbl[k], dv[k]));
  PetscCall(attr_write_doubles(file, "peak_memory", s->nranks, ctx->peak));
  PetscCall(PetscMalloc1(3 * s->n, &rows));
  for (int r = 0; r < s->nranks; r++) {
    char    name[32];
    hsize_t dims[2] = {(hsize_t)s->n, 3};
    hid_t   g;

    for (int j = 0; j < s->n; j++) {
      ACTask t      = s->order[r * s->n + j];
      rows[3 * j]     = t.model;
      rows[3 * j + 1] = t.kind;
      rows[3 * j + 2] = t.mb;
    }
    PetscCall(PetscSNPrintf(name, sizeof name, "node_%d", r));
    g = H5Gcreate2(file, name, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5Call(g, "cannot create group /%s", name);
    PetscCall(h5u_dataset_write(g, "tasks", H5T_STD_I32LE, H5T_NATIVE_INT, 2, dims, rows));
    PetscCall(h5u_close(&g));
  }
  PetscCall(PetscFree(rows));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode ac_sched_write(const char *path, const ACSched *s, const ACOptimizeInfo *info, const ACScore *seq)
{
  ACWriteCtx ctx = {path, s, info, seq, NULL};
  ACScore    sc  = {0};

  struct stat  st;

  PetscFunctionBegin;
  /* the atomic write renames a temporary over path: never over a device
   * such as /dev/null */
  PetscCheck(stat(path, &st) != 0 || S_ISREG(st.st_mode), PETSC_COMM_SELF, PETSC_ERR_FILE_WRITE, "schedule file %s exists and is not a regular file (a device or directory): not replacing it", path);
  PetscCall(PetscMalloc1(s->nranks, &ctx.peak));
  sc.rank_peak = ctx.peak;
  PetscCall(ac_replay(s, &sc, NULL));
  PetscCall(h5u_write_atomic("schedule file", path, ac_write_fill, &ctx));
  PetscCall(PetscFree(ctx.peak));
  PetscFunctionReturn(PETSC_SUCCESS);
}

typedef struct {
  const char     *path;
  const ACInst *in;
  ACSched      *s;
} ACReadCtx;

static PetscErrorCode ac_read_groups(hid_t file, void *vctx)
{
  ACReadCtx    *ctx = (ACReadCtx *)vctx;
  const ACInst *in  = ctx->in;
  ACSched      *s   = ctx->s;
  const char     *names[4] = {"pp0", "pp1", "m0", "m1"};
  int             want[4]  = {in->pp[0], in->pp[1], in->m[0], in->m[1]};
  char            where[PETSC_MAX_PATH_LEN + 32];
  int            *rows;

  PetscFunctionBegin;
  PetscCall(PetscSNPrintf(where, sizeof where, "schedule file %s", ctx->path));
  for (int k = 0; k < 4; k++) {
    int64_t v;
    PetscCall(h5u_attr_read_int(file, where, names[k], INT32_MIN, INT32_MAX, &v));
    PetscCheck(v == want[k], PETSC_COMM_SELF, PETSC_ERR_FILE_UNEXPECTED, "%s: %s is %lld, this run needs %d", where, names[k], (long long)v, want[k]);
  }
  PetscCall(PetscMalloc1(3 * s->n, &rows));
  for (int r = 0; r < s->nranks; r++) {
    char           name[32], full[48];
    hsize_t        dims[2] = {0, 3};
    hid_t          dset;
    PetscErrorCode ierr;

    PetscCall(PetscSNPrintf(name, sizeof name, "node_%d/tasks", r));
    PetscCall(PetscSNPrintf(full, sizeof full, "/node_%d/tasks", r));
    if (H5Lexists(file, name, H5P_DEFAULT) <= 0) { /* name is "node_<r>/tasks": the group first */
      char grp[32];
      PetscCall(PetscSNPrintf(grp, sizeof grp, "node_%d", r));
      ierr = H5Lexists(file, grp, H5P_DEFAULT) > 0 ? PETSC_ERR_FILE_UNEXPECTED : PETSC_ERR_FILE_READ;
      PetscCall(PetscFree(rows));
      SETERRQ(PETSC_COMM_SELF, ierr, "%s has no %s (one /node_<i>/tasks per rank, i < pp0 %d)", where, ierr == PETSC_ERR_FILE_READ ? grp : full, in->pp[0]);
    }
    ierr = h5u_dataset_open(file, where, full, name, H5T_INTEGER, 0, 2, dims, &dset);
    if (!ierr && dims[0] != (hsize_t)s->n) {
      h5u_close(&dset);
      PetscCall(PetscFree(rows));
      SETERRQ(PETSC_COMM_SELF, PETSC_ERR_FILE_UNEXPECTED, "%s: %s has %llu rows, expected %d (2 m0 + 2 m1)", where, full, (unsigned long long)dims[0], s->n);
    }
    if (!ierr) ierr = h5u_dataset_read(dset, where, full, H5T_NATIVE_INT, rows);
    if (!ierr) ierr = h5u_close(&dset);
    if (ierr) {
      (void)PetscFree(rows);
      PetscCall(ierr);
    }
    for (int j = 0; j < s->n; j++) s->order[r * s->n + j] = (ACTask){rows[3 * j], rows[3 * j + 1], rows[3 * j + 2]};
  }
  PetscCall(PetscFree(rows));
  PetscCall(ac_sched_validate(s, where));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode ac_read_task(void *vctx)
{
  ACReadCtx *ctx = (ACReadCtx *)vctx;

  PetscFunctionBegin;
  PetscCall(h5u_read_file("schedule file", ctx->path, ac_read_groups, ctx));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Rank 0 reads and validates; every rank gets the schedule or rank 0's
 * error. */
PetscErrorCode ac_sched_read(const char *path, const ACInst *in, ACSched *s)
{
  ACReadCtx    ctx = {path, in, s};
  PetscErrorCode ierr;

  PetscFunctionBegin;
  PetscCall(ac_sched_alloc(in, s));
  ierr = h5u_rank0(PETSC_COMM_WORLD, ac_read_task, &ctx);
  if (ierr) {
    (void)ac_sched_free(s);
    PetscCall(ierr);
  }
  PetscCall(h5u_bcast(s->order, (size_t)3 * s->nranks * s->n, MPI_INT, PETSC_COMM_WORLD));
  PetscFunctionReturn(PETSC_SUCCESS);
}
