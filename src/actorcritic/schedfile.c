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
#include "io.h"
#include <sys/stat.h>

typedef struct {
  const char           *path;
  const ACSched      *s;
  const ACOptimizeInfo *info;
  const ACScore      *seq;
  double               *peak;
} ACWriteCtx;

static PetscErrorCode ac_write_fill(IoId file, void *vctx)
{
  ACWriteCtx   *ctx = (ACWriteCtx *)vctx;
  const ACSched *s  = ctx->s;
  const ACInst  *in = &s->inst;
  const char      *ints[4] = {"pp0", "pp1", "m0", "m1"};
  int              iv[4]   = {in->pp[0], in->pp[1], in->m[0], in->m[1]};
  const char      *dbl[10] = { "f0",
                               "f1",
                               "mem0",
                               "mem1",
                               "mem_cap",
                               "makespan",
                               "lower_bound",
                               "greedy_makespan",
                               "sequential_makespan",
                               "sequential_peak_memory" };
  double           dv[10]  = { in->f[0],
                               in->f[1],
                               in->mem[0],
                               in->mem[1],
                               in->mem_cap,
                               ctx->info->best.makespan,
                               ctx->info->lower_bound,
                               ctx->info->greedy.makespan,
                               ctx->seq->makespan,
                               ctx->seq->peak_mem };
  int             *rows;

  PetscFunctionBegin;
  PetscCall(io_write_version(file));
  for (int k = 0; k < 4; k++) PetscCall(io_attr_write_int(file, ints[k], IO_I32LE, iv[k]));
  for (int k = 0; k < 10; k++) PetscCall(io_attr_write_double(file, dbl[k], dv[k]));
  PetscCall(io_attr_write_doubles(file, "peak_memory", s->nranks, ctx->peak));
  PetscCall(PetscMalloc1(3 * s->n, &rows));
  for (int r = 0; r < s->nranks; r++) {
    char    name[32];
    IoSize  dims[2] = {(IoSize)s->n, 3};
    IoId    g;

    for (int j = 0; j < s->n; j++) {
      ACTask t      = s->order[r * s->n + j];
      rows[3 * j]     = t.model;
      rows[3 * j + 1] = t.kind;
      rows[3 * j + 2] = t.mb;
    }
    PetscCall(PetscSNPrintf(name, sizeof name, "node_%d", r));
    PetscCall(io_group_create(file, "schedule file", name, &g));
    PetscCall(io_dataset_write(g, "tasks", IO_I32LE, IO_INT, 2, dims, rows));
    PetscCall(io_close(&g));
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
  PetscCheck(stat(path, &st) != 0 || S_ISREG(st.st_mode), PETSC_COMM_SELF, PETSC_ERR_FILE_WRITE,
             "schedule file %s exists and is not a regular file (a device or directory): not replacing it", path);
  PetscCall(PetscMalloc1(s->nranks, &ctx.peak));
  sc.rank_peak = ctx.peak;
  PetscCall(ac_replay(s, &sc, NULL));
  PetscCall(io_write_atomic("schedule file", path, ac_write_fill, &ctx));
  PetscCall(PetscFree(ctx.peak));
  PetscFunctionReturn(PETSC_SUCCESS);
}

typedef struct {
  const char     *path;
  const ACInst *in;
  ACSched      *s;
} ACReadCtx;

static PetscErrorCode ac_read_groups(IoId file, void *vctx)
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
    PetscCall(io_attr_read_int(file, where, names[k], INT32_MIN, INT32_MAX, &v));
    PetscCheck(v == want[k], PETSC_COMM_SELF, PETSC_ERR_FILE_UNEXPECTED, "%s: %s is %lld, this run needs %d", where,
               names[k], (long long)v, want[k]);
  }
  PetscCall(PetscMalloc1(3 * s->n, &rows));
  for (int r = 0; r < s->nranks; r++) {
    char           name[32], full[48];
    IoSize         dims[2] = {0, 3};
    IoId           dset;
    PetscErrorCode ierr;

    PetscCall(PetscSNPrintf(name, sizeof name, "node_%d/tasks", r));
    PetscCall(PetscSNPrintf(full, sizeof full, "/node_%d/tasks", r));
    if (!io_exists(file, name)) { /* name is "node_<r>/tasks": the group first */
      char grp[32];
      PetscCall(PetscSNPrintf(grp, sizeof grp, "node_%d", r));
      ierr = io_exists(file, grp) ? PETSC_ERR_FILE_UNEXPECTED : PETSC_ERR_FILE_READ;
      PetscCall(PetscFree(rows));
      SETERRQ(PETSC_COMM_SELF, ierr, "%s has no %s (one /node_<i>/tasks per rank, i < pp0 %d)", where,
              ierr == PETSC_ERR_FILE_READ ? grp : full, in->pp[0]);
    }
    ierr = io_dataset_open(file, where, full, name, IO_CLASS_INT, 0, 2, dims, &dset);
    if (!ierr && dims[0] != (IoSize)s->n) {
      io_close(&dset);
      PetscCall(PetscFree(rows));
      SETERRQ(PETSC_COMM_SELF, PETSC_ERR_FILE_UNEXPECTED, "%s: %s has %llu rows, expected %d (2 m0 + 2 m1)", where,
              full, (unsigned long long)dims[0], s->n);
    }
    if (!ierr) ierr = io_dataset_read(dset, where, full, IO_INT, rows);
    if (!ierr) ierr = io_close(&dset);
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

/* Rank 0 reads and validates; every rank gets the schedule or rank 0's
 * error. */
PetscErrorCode ac_sched_read(const char *path, const ACInst *in, ACSched *s)
{
  ACReadCtx    ctx = {path, in, s};
  PetscErrorCode ierr;

  PetscFunctionBegin;
  PetscCall(ac_sched_alloc(in, s));
  ierr = io_read_on_root(PETSC_COMM_WORLD, "schedule file", path, ac_read_groups, &ctx);
  if (ierr) {
    (void)ac_sched_free(s);
    PetscCall(ierr);
  }
  PetscCall(io_bcast(s->order, (size_t)3 * s->nranks * s->n, MPI_INT, PETSC_COMM_WORLD));
  PetscFunctionReturn(PETSC_SUCCESS);
}
