/* exec: a model placed on a call's mesh (inc/exec.h). Checkpoints are read
 * and written by shard: each member transfers its own part of the file
 * (src/io), so no rank ever holds the whole model; copying between
 * placements (and dmodel_gather) goes through parameter reallocation, so
 * both work between any two layouts. */
#include "exec.h"
#include "io.h"

static PetscErrorCode dmodel_alloc(DModel *dm)
{
  PetscFunctionBegin;
  if (!dmodel_member(dm) || dm->lm) PetscFunctionReturn(PETSC_SUCCESS);
  PetscCall(model_create_on_mesh(&dm->cfg, dm->be, dm->mesh, &dm->lm));
  dm->lm->dist.bucket_bytes = dm->dist.bucket_bytes;
  if (dm->optim) {
    PetscCall(model_set_zero1(dm->lm, dm->dist.zero1));
    PetscCall(model_optim_init(dm->lm));
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode dmodel_create(const char *name, const ModelConfig *cfg, const Backend *be, const Plan *plan, MFCId call,
                             PetscBool optim, DModel *dm)
{
  PetscFunctionBegin;
  PetscCall(PetscMemzero(dm, sizeof *dm));
  PetscCall(PetscStrncpy(dm->name, name, sizeof dm->name));
  dm->cfg   = *cfg;
  dm->be    = be;
  dm->optim = optim;
  dm->dist  = (ModelDistConfig){plan->zero1, (size_t)(plan->bucket_mb * 1048576.0)};
  PetscCall(plan_mesh(plan, call, &dm->mesh));
  PetscCall(dmodel_alloc(dm));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode dmodel_destroy(DModel *dm)
{
  PetscFunctionBegin;
  PetscCall(model_destroy(&dm->lm));
  PetscCall(PetscFree(dm->host));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode dmodel_release(DModel *dm, PetscBool keep)
{
  PetscFunctionBegin;
  if (!dm->lm) PetscFunctionReturn(PETSC_SUCCESS);
  PetscCheck(!dm->optim, PETSC_COMM_SELF, PETSC_ERR_ARG_WRONG,
             "dmodel_release: %s carries optimizer state and cannot be released", dm->name);
  if (keep) {
    PetscCall(PetscMalloc1(dm->lm->nparams + 1, &dm->host));
    PetscCall(model_params_get(dm->lm, dm->host));
  }
  PetscCall(model_destroy(&dm->lm));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode dmodel_acquire(DModel *dm)
{
  PetscFunctionBegin;
  if (!dmodel_member(dm) || dm->lm) PetscFunctionReturn(PETSC_SUCCESS);
  PetscCall(dmodel_alloc(dm));
  if (dm->host) {
    PetscCall(model_params_set(dm->lm, dm->host));
    PetscCall(PetscFree(dm->host));
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode dmodel_ckpt_model(const DModel *dm, const char *role, PetscBool with_optim, CkptModel *cm,
                                 CkptWhere *where)
{
  PetscFunctionBegin;
  *cm    = (CkptModel){role, dm->lm, with_optim, PETSC_FALSE};
  *where = (CkptWhere){&dm->cfg, dm->mesh, dm->host};
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode dmodel_load(DModel *dm, const char *path, const char *role, PetscBool with_optim, PetscBool trunk_only,
                           uint64_t seed)
{
  CkptModel cm;
  CkptWhere w;

  PetscFunctionBegin;
  PetscCheck(!with_optim || dm->optim, PETSC_COMM_SELF, PETSC_ERR_ARG_WRONG,
             "dmodel_load: %s has no optimizer state to read into", dm->name);
  PetscCall(dmodel_acquire(dm));
  if (trunk_only && dm->lm) PetscCall(model_init_random(dm->lm, seed)); /* the fresh head, the same on every layout */
  PetscCall(dmodel_ckpt_model(dm, role, with_optim, &cm, &w));
  cm.trunk_only = trunk_only;
  PetscCall(ckpt_read_model_placed(MPI_COMM_WORLD, path, &cm, &w));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* This member's parameters on the host (the kept copy while offloaded). */
static PetscErrorCode dmodel_params_host(const DModel *dm, float **host, PetscBool *owned)
{
  PetscFunctionBegin;
  *owned = PETSC_FALSE;
  *host  = NULL;
  if (!dmodel_member(dm)) PetscFunctionReturn(PETSC_SUCCESS);
  if (!dm->lm) {
    PetscCheck(dm->host, PETSC_COMM_SELF, PETSC_ERR_ORDER, "%s: the model was dropped; its parameters are gone",
               dm->name);
    *host = dm->host;
    PetscFunctionReturn(PETSC_SUCCESS);
  }
  PetscCall(PetscMalloc1(dm->lm->nparams + 1, host));
  PetscCall(model_params_get(dm->lm, *host));
  *owned = PETSC_TRUE;
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode dmodel_gather(DModel *dm, Model *full, size_t bucket_bytes)
{
  const Mesh        *root;
  const ReallocPlan *plan;
  int                zero = 0, me;
  char               what[64];
  float             *src = NULL, *m = NULL, *v = NULL, *dst[3] = {NULL, NULL, NULL};
  PetscBool          owned;

  PetscFunctionBegin;
  PetscCallMPI(MPI_Comm_rank(MPI_COMM_WORLD, &me));
  PetscCall(mesh_get(&zero, 1, 1, 1, 1, &root));
  PetscCall(PetscSNPrintf(what, sizeof what, "%s: %s -> rank 0 (checkpoint)", dm->name, dm->name));
  PetscCall(realloc_plan_get(&dm->cfg, dm->mesh, root, what, &plan));
  PetscCall(dmodel_params_host(dm, &src, &owned));
  if (me == 0) {
    PetscCheck(full && full->nparams > 0, PETSC_COMM_SELF, PETSC_ERR_ARG_NULL,
               "dmodel_gather: rank 0 needs the staging model");
    PetscCall(PetscMalloc1(full->nparams, &dst[0]));
  }
  PetscCall(realloc_execute(plan, src, dst[0], bucket_bytes, NULL));
  if (me == 0) PetscCall(model_params_set(full, dst[0]));
  if (dm->optim) {
    int step = dm->lm ? dm->lm->step : 0;
    if (dmodel_member(dm)) {
      PetscCall(PetscMalloc2(dm->lm->nparams + 1, &m, dm->lm->nparams + 1,
                             &v)); /* a model with optimizer state is never released */
      PetscCall(model_optim_get(dm->lm, m, v));
    }
    if (me == 0) PetscCall(PetscMalloc2(full->nparams, &dst[1], full->nparams, &dst[2]));
    PetscCall(realloc_execute(plan, m, dst[1], bucket_bytes, NULL));
    PetscCall(realloc_execute(plan, v, dst[2], bucket_bytes, NULL));
    PetscCallMPI(sys_mpi_bcast(&step, 1, MPI_INT, dm->mesh->ranks[0], MPI_COMM_WORLD));
    if (me == 0) PetscCall(model_optim_set(full, dst[1], dst[2], step));
    if (dmodel_member(dm)) PetscCall(PetscFree2(m, v));
    if (me == 0) PetscCall(PetscFree2(dst[1], dst[2]));
  }
  if (owned) PetscCall(PetscFree(src));
  PetscCall(PetscFree(dst[0]));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode dmodel_copy(DModel *src, DModel *dst, size_t bucket_bytes, ReallocStats *stats)
{
  const ReallocPlan *plan;
  char               what[96];
  float             *s = NULL, *d = NULL;
  PetscBool          owned;

  PetscFunctionBegin;
  if (!dmodel_member(src) && !dmodel_member(dst)) PetscFunctionReturn(PETSC_SUCCESS);
  PetscCall(PetscSNPrintf(what, sizeof what, "%s -> %s", src->name, dst->name));
  PetscCall(realloc_plan_get(&src->cfg, src->mesh, dst->mesh, what, &plan));
  PetscCall(dmodel_params_host(src, &s, &owned));
  if (dmodel_member(dst)) {
    PetscCall(dmodel_acquire(dst));
    PetscCall(PetscMalloc1(dst->lm->nparams + 1, &d));
  }
  PetscCall(realloc_execute(plan, s, d, bucket_bytes, stats));
  if (dmodel_member(dst)) {
    PetscCall(model_params_set(dst->lm, d));
    PetscCall(PetscFree(d));
  }
  if (owned) PetscCall(PetscFree(s));
  PetscFunctionReturn(PETSC_SUCCESS);
}
