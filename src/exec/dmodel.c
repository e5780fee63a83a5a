/* exec: a model placed on a call's mesh (inc/exec.h). Loading reads the
 * whole model on every rank and each member keeps its shard; gathering for a
 * checkpoint and copying between placements go through parameter
 * reallocation, so both work between any two layouts. */
#include "exec.h"
#include "io.h"

static PetscErrorCode dmodel_alloc(DModel *dm)
{
  PetscFunctionBegin;
  if (!dmodel_member(dm) || dm->gpt) PetscFunctionReturn(PETSC_SUCCESS);
  PetscCall(gpt_create_on_mesh(&dm->cfg, dm->be, dm->mesh, &dm->gpt));
  dm->gpt->dist.bucket_bytes = dm->dist.bucket_bytes;
  if (dm->optim) {
    PetscCall(gpt_set_zero1(dm->gpt, dm->dist.zero1));
    PetscCall(gpt_optim_init(dm->gpt));
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode dmodel_create(const char *name, const GPTConfig *cfg, const Backend *be, const Plan *plan, MFCId call, PetscBool optim, DModel *dm)
{
  PetscFunctionBegin;
  PetscCall(PetscMemzero(dm, sizeof *dm));
  PetscCall(PetscStrncpy(dm->name, name, sizeof dm->name));
  dm->cfg   = *cfg;
  dm->be    = be;
  dm->optim = optim;
  dm->dist  = (GPTDistConfig){plan->zero1, (size_t)(plan->bucket_mb * 1048576.0)};
  PetscCall(plan_mesh(plan, call, &dm->mesh));
  PetscCall(dmodel_alloc(dm));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode dmodel_destroy(DModel *dm)
{
  PetscFunctionBegin;
  PetscCall(gpt_destroy(&dm->gpt));
  PetscCall(PetscFree(dm->host));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode dmodel_release(DModel *dm, PetscBool keep)
{
  PetscFunctionBegin;
  if (!dm->gpt) PetscFunctionReturn(PETSC_SUCCESS);
  PetscCheck(!dm->optim, PETSC_COMM_SELF, PETSC_ERR_ARG_WRONG, "dmodel_release: %s carries optimizer state and cannot be released", dm->name);
  if (keep) {
    PetscCall(PetscMalloc1(dm->gpt->nparams + 1, &dm->host));
    PetscCall(gpt_params_get(dm->gpt, dm->host));
  }
  PetscCall(gpt_destroy(&dm->gpt));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode dmodel_acquire(DModel *dm)
{
  PetscFunctionBegin;
  if (!dmodel_member(dm) || dm->gpt) PetscFunctionReturn(PETSC_SUCCESS);
  PetscCall(dmodel_alloc(dm));
  if (dm->host) {
    PetscCall(gpt_params_set(dm->gpt, dm->host));
    PetscCall(PetscFree(dm->host));
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* A one-rank staging copy of the whole model in host memory. */
static PetscErrorCode dmodel_staging(const DModel *dm, PetscBool optim, GPT **full)
{
  const Backend *cpu;

  PetscFunctionBegin;
  PetscCall(backend_get("cpu", &cpu));
  PetscCall(gpt_create(&dm->cfg, cpu, full));
  if (optim) PetscCall(gpt_optim_init(*full));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode dmodel_load(DModel *dm, const char *path, const char *role, PetscBool with_optim, PetscBool trunk_only, uint64_t seed)
{
  GPT      *full;
  CkptModel cm;
  float    *buf[3] = {NULL, NULL, NULL}, *sh[3] = {NULL, NULL, NULL};
  int       nb     = with_optim ? 3 : 1;

  PetscFunctionBegin;
  PetscCheck(!with_optim || dm->optim, PETSC_COMM_SELF, PETSC_ERR_ARG_WRONG, "dmodel_load: %s has no optimizer state to read into", dm->name);
  PetscCall(dmodel_staging(dm, with_optim, &full));
  if (trunk_only) PetscCall(gpt_init_random(full, seed)); /* the fresh head */
  cm = (CkptModel){role, full, with_optim, trunk_only};
  PetscCall(ckpt_read_model(MPI_COMM_WORLD, path, &cm));
  if (dmodel_member(dm)) {
    PetscCall(dmodel_acquire(dm));
    for (int k = 0; k < nb; k++) PetscCall(PetscMalloc2(full->nparams, &buf[k], dm->gpt->nparams + 1, &sh[k]));
    PetscCall(gpt_params_get(full, buf[0]));
    if (with_optim) PetscCall(gpt_optim_get(full, buf[1], buf[2]));
    for (int k = 0; k < nb; k++) PetscCall(gpt_shard_extract(&dm->cfg, &dm->gpt->sh, buf[k], sh[k]));
    PetscCall(gpt_params_set(dm->gpt, sh[0]));
    if (with_optim) PetscCall(gpt_optim_set(dm->gpt, sh[1], sh[2], full->step));
    for (int k = 0; k < nb; k++) PetscCall(PetscFree2(buf[k], sh[k]));
  }
  PetscCall(gpt_destroy(&full));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* This member's parameters on the host (the kept copy while offloaded). */
static PetscErrorCode dmodel_params_host(const DModel *dm, float **host, PetscBool *owned)
{
  PetscFunctionBegin;
  *owned = PETSC_FALSE;
  *host  = NULL;
  if (!dmodel_member(dm)) PetscFunctionReturn(PETSC_SUCCESS);
  if (!dm->gpt) {
    PetscCheck(dm->host, PETSC_COMM_SELF, PETSC_ERR_ORDER, "%s: the model was dropped; its parameters are gone", dm->name);
    *host = dm->host;
    PetscFunctionReturn(PETSC_SUCCESS);
  }
  PetscCall(PetscMalloc1(dm->gpt->nparams + 1, host));
  PetscCall(gpt_params_get(dm->gpt, *host));
  *owned = PETSC_TRUE;
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode dmodel_gather(DModel *dm, GPT *full, size_t bucket_bytes)
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
    PetscCheck(full && full->nparams > 0, PETSC_COMM_SELF, PETSC_ERR_ARG_NULL, "dmodel_gather: rank 0 needs the staging model");
    PetscCall(PetscMalloc1(full->nparams, &dst[0]));
  }
  PetscCall(realloc_execute(plan, src, dst[0], bucket_bytes, NULL));
  if (me == 0) PetscCall(gpt_params_set(full, dst[0]));
  if (dm->optim) {
    int step = dm->gpt ? dm->gpt->step : 0;
    if (dmodel_member(dm)) {
      PetscCall(PetscMalloc2(dm->gpt->nparams + 1, &m, dm->gpt->nparams + 1, &v)); /* a model with optimizer state is never released */
      PetscCall(gpt_optim_get(dm->gpt, m, v));
    }
    if (me == 0) PetscCall(PetscMalloc2(full->nparams, &dst[1], full->nparams, &dst[2]));
    PetscCall(realloc_execute(plan, m, dst[1], bucket_bytes, NULL));
    PetscCall(realloc_execute(plan, v, dst[2], bucket_bytes, NULL));
    PetscCallMPI(MPI_Bcast(&step, 1, MPI_INT, dm->mesh->ranks[0], MPI_COMM_WORLD));
    if (me == 0) PetscCall(gpt_optim_set(full, dst[1], dst[2], step));
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
    PetscCall(PetscMalloc1(dst->gpt->nparams + 1, &d));
  }
  PetscCall(realloc_execute(plan, s, d, bucket_bytes, stats));
  if (dmodel_member(dst)) {
    PetscCall(gpt_params_set(dst->gpt, d));
    PetscCall(PetscFree(d));
  }
  if (owned) PetscCall(PetscFree(s));
  PetscFunctionReturn(PETSC_SUCCESS);
}
