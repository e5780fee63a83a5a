/* plan: the plan on screen and on disk. The table printed at start shows
 * what runs where; /plan in run.h5 (docs/formats.md) stores the same, and a
 * later run can start from it with -plan_file. Layout:
 *   /plan               attributes placement, world, gen_replicas, offload,
 *                       zero1, bucket_mb, fuse_gen_inf (0 none, 1 stream,
 *                       2 migrate), fuse_migrate_at (-1: auto),
 *                       fuse_migrate_replicas, fuse_tokens, fuse_hold,
 *                       fuse_train (doubles; the fuse_ ones optional on
 *                       reading); est_iter_s, est_realloc_s, est_mem (the
 *                       plan search's estimate: seconds per iteration and
 *                       of reallocation, peak bytes per rank; only when
 *                       estimated); dataset concurrent
 *                       int32 [nconc,2] of call indices when there are pairs
 *   /plan/<call>        dataset ranks int32 [nranks]; attributes dp, tp, pp, mbs,
 *                       est_s (estimated seconds of the call per iteration,
 *                       with the estimate) */
#include "plan_impl.h"

#include <stdio.h>
#include <string.h>

/* ---- table -------------------------------------------------------------------- */
PetscErrorCode plan_print(MPI_Comm comm, const Plan *plan, const PlanNeeds *needs)
{
  char ranks[MFC_COUNT][PLAN_RANKS_STR], mbs[16];
  int  w = 5; /* width of the ranks column: the widest list, at least "ranks" */

  PetscFunctionBegin;
  for (int c = 0; c < MFC_COUNT; c++) {
    plan_ranks_str(&plan->call[c], ranks[c], sizeof ranks[c]);
    if (plan_in_use(needs, c)) w = PetscMax(w, (int)strlen(ranks[c]));
  }
  PetscCall(PetscPrintf(comm, "plan: %s (%d ranks)\n", plan->source, plan->world));
  PetscCall(PetscPrintf(comm, "  %-13s %-*s %3s %2s %2s %3s\n", "call", w, "ranks", "dp", "tp", "pp", "mbs"));
  for (int c = 0; c < MFC_COUNT; c++) {
    const PlanCall *call = &plan->call[c];

    if (!plan_in_use(needs, c)) continue;
    PetscCall(PetscSNPrintf(mbs, sizeof mbs, call->mbs ? "%d" : "-", call->mbs));
    PetscCall(PetscPrintf(comm, "  %-13s %-*s %3d %2d %2d %3s\n", mfc_names[c], w, ranks[c], call->dp, call->tp,
                          call->pp, mbs));
  }
  for (int k = 0; k < plan->nconc; k++)
    if (plan_in_use(needs, plan->conc[k][0]) && plan_in_use(needs, plan->conc[k][1]))
      PetscCall(
          PetscPrintf(comm, "  concurrent: %s and %s\n", mfc_names[plan->conc[k][0]], mfc_names[plan->conc[k][1]]));
  snprintf(mbs, sizeof mbs, "%g", plan->bucket_mb); /* PETSc's %g would print 16 as "16." */
  PetscCall(PetscPrintf(comm, "  offload %s, zero1 %s, bucket %s MiB\n", plan->offload ? "yes" : "no",
                        plan->zero1 ? "yes" : "no", mbs));
  if (plan_in_use(needs, MFC_ACTOR_GEN) && plan_in_use(needs, MFC_REF_INF)) {
    char fuse[128];
    PetscCall(PetscPrintf(comm, "  fusion of generation and inference: %s\n", plan_fuse_str(plan, fuse, sizeof fuse)));
  }
  if (plan->fuse_train && plan_in_use(needs, MFC_CRITIC_TRAIN))
    PetscCall(PetscPrintf(comm, "  fused training: actor_train and critic_train interleaved on the same ranks, the "
                                "critic's pipeline reversed (-fuse_train 1)\n"));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* ---- run record ----------------------------------------------------------------- */
static const char *const call_attrs[] = {"dp", "tp", "pp", "mbs", "est_s"};

/* /plan goes through put(): into an open run record, or into a new file. */
typedef PetscErrorCode (*PlanPut)(void *ctx, const char *group, const IODataset *d, int n, const char *const *names,
                                  const double *values, int nattr);

static PetscErrorCode plan_put(PlanPut put, void *ctx, const Plan *plan, const PlanNeeds *needs)
{
  const char *names[3 + PLAN_MAX_SETTINGS + 3] = {"placement", "world", "gen_replicas"};
  double      top[3 + PLAN_MAX_SETTINGS + 3]   = {plan->placement, plan->world, plan->gen_replicas};
  int         n                                = 3 + plan_settings_attrs(plan, names + 3, top + 3);
  IODataset   conc                             = {"concurrent", 2, {plan->nconc, 2}, plan->conc, PETSC_TRUE};
  PetscBool   est = plan->est_iter_s > 0 ? PETSC_TRUE : PETSC_FALSE; /* the estimates only when there are some */

  PetscFunctionBegin;
  if (est) { /* the search's estimate of the whole plan */
    names[n] = "est_iter_s", top[n++] = plan->est_iter_s;
    names[n] = "est_realloc_s", top[n++] = plan->est_realloc_s;
    names[n] = "est_mem", top[n++] = plan->est_mem;
  }
  /* /plan first: writing it replaces the group, children included */
  PetscCall(put(ctx, "plan", &conc, plan->nconc ? 1 : 0, names, top, n));
  for (int c = 0; c < MFC_COUNT; c++) {
    const PlanCall *call  = &plan->call[c];
    double          v[5]  = {call->dp, call->tp, call->pp, call->mbs, plan->est_call_s[c]};
    IODataset       ranks = {"ranks", 1, {call->nranks, 0}, call->ranks, PETSC_TRUE};
    char            group[64];

    if (!plan_in_use(needs, c)) continue;
    PetscCall(PetscSNPrintf(group, sizeof group, "plan/%s", mfc_names[c]));
    PetscCall(put(ctx, group, &ranks, 1, call_attrs, v, est ? 5 : 4));
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode plan_put_record(void *ctx, const char *group, const IODataset *d, int n, const char *const *names,
                                      const double *values, int nattr)
{
  return record_group((RunRecord *)ctx, group, d, n, names, values, nattr);
}

PetscErrorCode plan_record(RunRecord *rec, const Plan *plan, const PlanNeeds *needs)
{
  PetscFunctionBegin;
  PetscCall(plan_put(plan_put_record, rec, plan, needs));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* ---- plan file written by -mode plan -------------------------------------------- */
typedef struct {
  const Plan      *plan;
  const PlanNeeds *needs;
} PlanWriteCtx;

static PetscErrorCode plan_put_file(void *ctx, const char *group, const IODataset *d, int n, const char *const *names,
                                    const double *values, int nattr)
{
  IoId g;

  PetscFunctionBegin;
  PetscCall(io_group_create(*(IoId *)ctx, "plan file", group, &g));
  PetscCall(io_group_fill(g, d, n, names, values, nattr));
  PetscCall(io_close(&g));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode plan_write_fill(IoId file, void *vctx)
{
  PlanWriteCtx *ctx = (PlanWriteCtx *)vctx;

  PetscFunctionBegin;
  PetscCall(io_write_version(file));
  PetscCall(plan_put(plan_put_file, &file, ctx->plan, ctx->needs));
  PetscFunctionReturn(PETSC_SUCCESS);
}

typedef struct {
  const char   *path;
  PlanWriteCtx *w;
} PlanWriteTask;

static PetscErrorCode plan_write_task(void *vctx)
{
  PlanWriteTask *t = (PlanWriteTask *)vctx;

  PetscFunctionBegin;
  PetscCall(io_write_atomic("plan file", t->path, plan_write_fill, t->w));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode plan_write_file(MPI_Comm comm, const char *path, const Plan *plan, const PlanNeeds *needs)
{
  PlanWriteCtx  w = {plan, needs};
  PlanWriteTask t = {path, &w};

  PetscFunctionBegin;
  PetscCall(io_on_root(comm, plan_write_task, &t));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* ---- plan file ------------------------------------------------------------------- */
typedef struct {
  const char *path;
  Plan       *plan;
} PlanReadCtx;

static PetscErrorCode plan_read_settings(IoId g, const char *where, Plan *plan)
{
  int p;

  PetscFunctionBegin;
  PetscCall(plan_attr_int(g, where, "placement", 0, PLACEMENT_DISAGGREGATE, &p));
  PetscCall(plan_attr_int(g, where, "world", 1, PLAN_MAX_RANKS, &plan->world));
  PetscCall(plan_attr_int(g, where, "gen_replicas", 0, PLAN_MAX_RANKS, &plan->gen_replicas));
  plan->placement = (Placement)p;
  PetscCall(plan_settings_read(g, where, plan));
  /* the search's estimate: only in files that have one */
  plan->est_iter_s = plan->est_realloc_s = plan->est_mem = 0;
  if (io_attr_exists(g, "est_iter_s")) {
    PetscCall(io_attr_read_double(g, where, "est_iter_s", &plan->est_iter_s));
    PetscCall(io_attr_read_double(g, where, "est_realloc_s", &plan->est_realloc_s));
    PetscCall(io_attr_read_double(g, where, "est_mem", &plan->est_mem));
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode plan_read_concurrent(IoId g, const char *where, Plan *plan)
{
  IoSize  dims[2] = {0, 2};
  IoId    dset;
  int     conc[8][2];

  PetscFunctionBegin;
  plan->nconc = 0;
  if (!io_exists(g, "concurrent")) PetscFunctionReturn(PETSC_SUCCESS);
  PetscCall(io_dataset_open(g, where, "/plan/concurrent", "concurrent", IO_CLASS_INT, 0, 2, dims, &dset));
  PetscCheck(dims[0] <= 8, PETSC_COMM_SELF, PETSC_ERR_FILE_UNEXPECTED,
             "%s: /plan/concurrent has %llu pairs, at most 8 allowed", where, (unsigned long long)dims[0]);
  PetscCall(io_dataset_read(dset, where, "/plan/concurrent", IO_INT, conc));
  PetscCall(io_close(&dset));
  for (IoSize k = 0; k < dims[0]; k++) {
    PetscCheck(conc[k][0] >= 0 && conc[k][0] < MFC_COUNT && conc[k][1] >= 0 && conc[k][1] < MFC_COUNT, PETSC_COMM_SELF,
               PETSC_ERR_FILE_UNEXPECTED, "%s: /plan/concurrent pair %llu names calls %d, %d (calls are 0..%d)", where,
               (unsigned long long)k, conc[k][0], conc[k][1], MFC_COUNT - 1);
    plan->conc[k][0] = conc[k][0];
    plan->conc[k][1] = conc[k][1];
  }
  plan->nconc = (int)dims[0];
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode plan_read_call(IoId g, const char *path, MFCId c, PlanCall *call, double *est)
{
  char    where[PETSC_MAX_PATH_LEN + 64], full[64];
  IoSize  dims[1] = {0};
  IoId    cg, dset;

  PetscFunctionBegin;
  PetscCall(PetscSNPrintf(full, sizeof full, "/plan/%s/ranks", mfc_names[c]));
  PetscCall(PetscSNPrintf(where, sizeof where, "plan file %s /plan/%s", path, mfc_names[c]));
  PetscCall(io_group_open(g, where, mfc_names[c], &cg));
  PetscCall(io_dataset_open(cg, where, full, "ranks", IO_CLASS_INT, 0, 1, dims, &dset));
  PetscCheck(dims[0] >= 1 && dims[0] <= PLAN_MAX_RANKS, PETSC_COMM_SELF, PETSC_ERR_FILE_UNEXPECTED,
             "%s: %s has %llu ranks, expected 1 to %d", where, full, (unsigned long long)dims[0], PLAN_MAX_RANKS);
  PetscCall(io_dataset_read(dset, where, full, IO_INT, call->ranks));
  PetscCall(io_close(&dset));
  call->nranks = (int)dims[0];
  PetscCall(plan_attr_int(cg, where, "dp", 1, PLAN_MAX_RANKS, &call->dp));
  PetscCall(plan_attr_int(cg, where, "tp", 1, PLAN_MAX_RANKS, &call->tp));
  PetscCall(plan_attr_int(cg, where, "pp", 1, PLAN_MAX_RANKS, &call->pp));
  PetscCall(plan_attr_int(cg, where, "mbs", 0, 1 << 30, &call->mbs));
  *est = 0;
  if (io_attr_exists(cg, "est_s")) PetscCall(io_attr_read_double(cg, where, "est_s", est));
  PetscCall(io_close(&cg));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode plan_read_groups(IoId file, void *vctx)
{
  PlanReadCtx *ctx = (PlanReadCtx *)vctx;
  char         where[PETSC_MAX_PATH_LEN + 32];
  IoId         g;

  PetscFunctionBegin;
  PetscCall(PetscSNPrintf(where, sizeof where, "plan file %s /plan", ctx->path));
  PetscCheck(io_exists(file, "plan"), PETSC_COMM_SELF, PETSC_ERR_FILE_UNEXPECTED,
             "plan file %s has no group /plan (written by a run that records its plan)", ctx->path);
  PetscCall(io_group_open(file, where, "plan", &g));
  PetscCall(plan_read_settings(g, where, ctx->plan));
  PetscCall(plan_read_concurrent(g, where, ctx->plan));
  for (int c = 0; c < MFC_COUNT; c++)
    if (io_exists(g, mfc_names[c]))
      PetscCall(plan_read_call(g, ctx->path, (MFCId)c, &ctx->plan->call[c], &ctx->plan->est_call_s[c]));
  PetscCall(io_close(&g));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Rank 0 reads into a copy, so a file that fails half-way leaves the plan
 * as it was; then every rank gets rank 0's result. */
PetscErrorCode plan_read_file(MPI_Comm comm, const char *path, Plan *plan)
{
  Plan        copy = *plan;
  PlanReadCtx ctx  = {path, &copy};

  PetscFunctionBegin;
  PetscCall(PetscSNPrintf(copy.source, sizeof copy.source, "file %s", path));
  PetscCall(io_read_on_root(comm, "plan file", path, plan_read_groups, &ctx));
  PetscCallMPI(sys_mpi_bcast(&copy, (int)sizeof copy, MPI_BYTE, 0, comm));
  *plan = copy;
  PetscFunctionReturn(PETSC_SUCCESS);
}
