/* sched.c: pipeline schedules as task lists (1F1B, GPipe), their check, and
 * the executor that plays a list on one stage with one activation slot per
 * micro-batch in flight. Schedules are plain data so a searched schedule
 * (fused actor/critic pipelines, docs/design.md) runs through the same
 * executor as the textbook ones: the stages' messages are tagged by micro-
 * batch, so any dependency-respecting order runs. */
#include "schedule.h"

static PetscErrorCode sched_args_check(int pp, int p, int m, const SchedTask *tasks, const char *fn)
{
  PetscFunctionBegin;
  PetscCheck(pp >= 1 && p >= 0 && p < pp, PETSC_COMM_SELF, PETSC_ERR_ARG_OUTOFRANGE, "%s: stage %d of %d", fn, p, pp);
  PetscCheck(m >= 1, PETSC_COMM_SELF, PETSC_ERR_ARG_OUTOFRANGE, "%s: %d micro-batches", fn, m);
  PetscCheck(tasks, PETSC_COMM_SELF, PETSC_ERR_ARG_NULL, "%s: tasks is NULL", fn);
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode sched_1f1b(int pp, int p, int m, SchedTask *tasks, int *nslots)
{
  int warm, n = 0, f = 0, b = 0;

  PetscFunctionBegin;
  PetscCall(sched_args_check(pp, p, m, tasks, "sched_1f1b"));
  /* stage p can start its first backward only after the micro-batch has
   * passed the pp-p-1 stages after it, so it fills that gap with forwards */
  warm = PetscMin(pp - p - 1, m);
  while (f < warm) tasks[n++] = (SchedTask){SCHED_F, f++};
  while (f < m) {
    tasks[n++] = (SchedTask){SCHED_F, f++};
    tasks[n++] = (SchedTask){SCHED_B, b++};
  }
  while (b < m) tasks[n++] = (SchedTask){SCHED_B, b++};
  if (nslots) *nslots = PetscMin(warm + 1, m);
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode sched_gpipe(int pp, int p, int m, SchedTask *tasks, int *nslots)
{
  PetscFunctionBegin;
  PetscCall(sched_args_check(pp, p, m, tasks, "sched_gpipe"));
  for (int i = 0; i < m; i++) tasks[i] = (SchedTask){SCHED_F, i};
  for (int i = 0; i < m; i++) tasks[m + i] = (SchedTask){SCHED_B, i};
  if (nslots) *nslots = m;
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode sched_check(const SchedTask *tasks, int ntasks, int m, int *inflight)
{
  int           *state, cur = 0, most = 0; /* state[mb]: 0 not started, 1 forward done, 2 backward done */
  PetscErrorCode ierr = PETSC_SUCCESS;

  PetscFunctionBegin;
  PetscCheck(ntasks == 2 * m, PETSC_COMM_SELF, PETSC_ERR_ARG_SIZ,
             "sched_check: %d tasks for %d micro-batches (want %d)", ntasks, m, 2 * m);
  PetscCall(PetscCalloc1(m, &state));
  for (int i = 0; i < ntasks && !ierr; i++) {
    int mb = tasks[i].mb, want = tasks[i].kind == SCHED_F ? 0 : 1;
    if (tasks[i].kind != SCHED_F && tasks[i].kind != SCHED_B) ierr = PETSC_ERR_ARG_WRONG;
    else if (mb < 0 || mb >= m) ierr = PETSC_ERR_ARG_OUTOFRANGE;
    else if (state[mb] != want) ierr = PETSC_ERR_ORDER;
    if (ierr) {
      (void)PetscFree(state);
      SETERRQ(PETSC_COMM_SELF, ierr,
              "sched_check: task %d (%s of micro-batch %d) is a repeat, a backward before its forward, or out of range",
              i, tasks[i].kind == SCHED_F ? "forward" : "backward", mb);
    }
    state[mb]++;
    cur += tasks[i].kind == SCHED_F ? 1 : -1;
    most = PetscMax(most, cur);
  }
  PetscCall(PetscFree(state));
  if (inflight) *inflight = most;
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Error of task i of sched_run, raised with the slot selection undone. */
#define SCHED_FAIL(code, ...)                                                                                          \
  PetscError(PETSC_COMM_SELF, __LINE__, PETSC_FUNCTION_NAME, __FILE__, code, PETSC_ERROR_INITIAL, __VA_ARGS__)

PetscErrorCode sched_run_models(const SchedModel *models, int nmodels, const SchedMTask *tasks, int ntasks)
{
  int          **holder; /* holder[x][k]: the micro-batch whose activations slot k of model x keeps, or -1 */
  PetscErrorCode ierr = PETSC_SUCCESS;

  PetscFunctionBegin;
  PetscCheck(nmodels >= 1, PETSC_COMM_SELF, PETSC_ERR_ARG_OUTOFRANGE, "sched_run: %d models", nmodels);
  for (int x = 0; x < nmodels; x++) {
    PetscCheck(models[x].nslots >= 1, PETSC_COMM_SELF, PETSC_ERR_ARG_OUTOFRANGE, "sched_run: %d activation slots",
               models[x].nslots);
    PetscCheck(models[x].forward && models[x].backward, PETSC_COMM_SELF, PETSC_ERR_ARG_NULL,
               "sched_run: forward and backward callbacks are required");
  }
  PetscCall(PetscCalloc1(nmodels, &holder));
  for (int x = 0; x < nmodels; x++) {
    if (!models[x].lm) continue; /* a model with no tasks on this rank */
    PetscCall(model_acts_slots(models[x].lm, models[x].nslots));
    PetscCall(PetscMalloc1(models[x].nslots, &holder[x]));
    for (int k = 0; k < models[x].nslots; k++) holder[x][k] = -1;
  }
  for (int i = 0; i < ntasks && !ierr; i++) {
    int               mb = tasks[i].mb, kind = tasks[i].kind, x = tasks[i].model, k = -1, mine = -1;
    const SchedModel *md = x >= 0 && x < nmodels && models[x].lm ? &models[x] : NULL;

    /* the slot map: a forward takes the first free slot, a backward finds
     * its micro-batch's; micro-batches may come in any order */
    for (int j = 0; md && j < md->nslots; j++) {
      if (holder[x][j] == mb && mine < 0) mine = j;
      if (holder[x][j] < 0 && k < 0) k = j;
    }
    if (!md)
      ierr = SCHED_FAIL(PETSC_ERR_ARG_OUTOFRANGE,
                        "sched_run: task %d is of model %d, which has no shard here (%d models)", i, x, nmodels);
    else if (mb < 0) ierr = SCHED_FAIL(PETSC_ERR_ARG_OUTOFRANGE, "sched_run: task %d has micro-batch %d", i, mb);
    else if (kind != SCHED_F && kind != SCHED_B)
      ierr = SCHED_FAIL(PETSC_ERR_ARG_WRONG, "sched_run: task %d has kind %d", i, kind);
    else if (kind == SCHED_F && mine >= 0)
      ierr = SCHED_FAIL(PETSC_ERR_ORDER,
                        "sched_run: task %d, forward of micro-batch %d, which is already in flight (slot %d)", i, mb,
                        mine);
    else if (kind == SCHED_F && k < 0)
      ierr = SCHED_FAIL(PETSC_ERR_ORDER,
                        "sched_run: task %d, forward of micro-batch %d, finds all %d activation slots held by "
                        "micro-batches awaiting their backward (too few slots for this schedule)",
                        i, mb, md->nslots);
    else if (kind == SCHED_B && mine < 0)
      ierr = SCHED_FAIL(PETSC_ERR_ORDER,
                        "sched_run: task %d, backward of micro-batch %d, which is not in flight (no forward before it)",
                        i, mb);
    if (kind == SCHED_B) k = mine;
    if (!ierr) ierr = model_acts_select(md->lm, k);
    if (!ierr) ierr = model_msg_ids(md->lm, md->lm->msg_model, mb); /* the stage messages carry mb */
    if (!ierr) ierr = kind == SCHED_F ? md->forward(md->ctx, md->lm, mb) : md->backward(md->ctx, md->lm, mb);
    if (!ierr) holder[x][k] = kind == SCHED_F ? mb : -1;
  }
  for (int x = 0; x < nmodels; x++) {
    if (!models[x].lm) continue;
    PetscCall(PetscFree(holder[x]));
    PetscCall(model_acts_select(models[x].lm, 0)); /* also after a failed task: callers may recover */
    PetscCall(model_msg_ids(models[x].lm, models[x].lm->msg_model, 0));
  }
  PetscCall(PetscFree(holder));
  PetscCall(ierr);
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode sched_run(Model *lm, const SchedTask *tasks, int ntasks, int nslots, SchedFn forward, SchedFn backward,
                         void *ctx)
{
  SchedModel     md = {lm, nslots, forward, backward, ctx};
  SchedMTask    *mt;
  PetscErrorCode ierr;

  PetscFunctionBegin;
  PetscCall(PetscMalloc1(ntasks, &mt));
  for (int i = 0; i < ntasks; i++) mt[i] = (SchedMTask){0, tasks[i].kind, tasks[i].mb};
  ierr = sched_run_models(&md, 1, mt, ntasks); /* a refused order returns here too: free, then pass it on */
  PetscCall(PetscFree(mt));
  PetscCall(ierr);
  PetscFunctionReturn(PETSC_SUCCESS);
}
