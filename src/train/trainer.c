/* The one training step of SFT, RM and PPO, and checkpoints of placed models
 * (inc/train.h). */
#include "train.h"
#include <math.h>

static const char *const sched_names[] = {"1f1b", "gpipe", "TrainSched", "TRAIN_SCHED_", NULL};

PetscErrorCode trainer_options(TrainSched *sched)
{
  PetscInt k = TRAIN_SCHED_1F1B;

  PetscFunctionBegin;
  /* GPipe gives the same results as 1F1B with more memory: a comparison that
   * scenarios rlhf.sh and train_layouts.sh run end to end, so it stays a
   * command-line option, listed apart in -help. */
  PetscOptionsBegin(PETSC_COMM_WORLD, "train_", SYS_HELP_DEVELOPER, NULL);
  RfOptEnum("-schedule", "Pipeline schedule of training passes: 1f1b (at most pp micro-batches in flight) or gpipe "
            "(all forwards, then all backwards)", sched_names, 2, &k);
  PetscOptionsEnd();
  *sched = (TrainSched)k;
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode trainer_plan_check(const RunCtx *run, const Plan *plan, MFCId call, const ModelConfig *cfg, int batch,
                                  PetscBool print, PlanNeeds *needs)
{
  PetscFunctionBegin;
  PetscCall(PetscMemzero(needs, sizeof *needs));
  needs->cfg[call]   = cfg;
  needs->batch[call] = batch;
  PetscCall(plan_check(plan, needs));
  if (print) PetscCall(plan_print(run->comm, plan, needs));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode trainer_count(const ModelConfig *cfg, size_t *nparams)
{
  ModelTensor *t;
  int        n;

  PetscFunctionBegin;
  PetscCall(model_tensor_table(cfg, &t, &n, nparams));
  PetscCall(PetscFree(t));
  PetscFunctionReturn(PETSC_SUCCESS);
}

void trainer_attach(DModel *dm, const Plan *plan, MFCId call, TrainSched sched, Trainer *tr)
{
  PetscMemzero(tr, sizeof *tr);
  tr->dm     = dm;
  tr->mbs    = plan->call[call].mbs;
  tr->bucket = (size_t)(plan->bucket_mb * 1048576.0);
  tr->sched  = sched;
  tr->red    = dm->mesh->all;
}

PetscErrorCode trainer_create(const char *name, const ModelConfig *cfg, const Backend *be, const Plan *plan, MFCId call,
                              TrainSched sched, Trainer *tr)
{
  DModel own;

  PetscFunctionBegin;
  PetscCall(dmodel_create(name, cfg, be, plan, call, PETSC_TRUE, &own));
  trainer_attach(&own, plan, call, sched, tr);
  tr->own = own;
  tr->dm  = &tr->own; /* so a Trainer is not copied once created */
  tr->red = (Comm){.mpi = MPI_COMM_WORLD, .kind = COMM_MPI};
  PetscCallMPI(MPI_Comm_rank(MPI_COMM_WORLD, &tr->red.rank));
  PetscCallMPI(MPI_Comm_size(MPI_COMM_WORLD, &tr->red.size));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode trainer_destroy(Trainer *tr)
{
  PetscFunctionBegin;
  if (tr->dm == &tr->own) PetscCall(dmodel_destroy(&tr->own));
  tr->dm = NULL;
  PetscFunctionReturn(PETSC_SUCCESS);
}

void trainer_split(const Trainer *tr, int B, int size, MicroSplit *s)
{
  const Mesh *m = tr->dm->mesh;
  int         share;

  *s = (MicroSplit){0, 0, 1, 0};
  if (m->me < 0) return;
  exec_rows(B, m->dp, m->d, &s->b0, &s->b1);
  share = s->b1 - s->b0;
  if (tr->mbs > 0) s->size = (share + tr->mbs - 1) / tr->mbs;
  else s->size = size > 0 ? size : share;
  s->size  = PetscMax(1, s->size);
  s->count = (share + s->size - 1) / s->size;
}

PetscErrorCode trainer_schedule(const Trainer *tr, const MicroSplit *s, SchedTask **tasks, int *nslots)
{
  const Model *g = tr->dm->lm;

  PetscFunctionBegin;
  PetscCheck(g && s->count > 0, PETSC_COMM_SELF, PETSC_ERR_ARG_WRONG,
             "trainer_schedule: no micro-batches on this rank");
  PetscCall(PetscMalloc1(2 * s->count, tasks));
  if (tr->sched == TRAIN_SCHED_GPIPE) PetscCall(sched_gpipe(g->sh.pp, g->sh.p, s->count, *tasks, nslots));
  else PetscCall(sched_1f1b(g->sh.pp, g->sh.p, s->count, *tasks, nslots));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode trainer_pass(Trainer *tr, const MicroSplit *s, const TrainWork *w)
{
  Model *g = tr->dm->lm;

  PetscFunctionBegin;
  if (g && w->backward) PetscCall(model_zero_grad(g));
  if (g && s->count > 0) {
    if (!w->backward) { /* evaluation: forwards in order; the stages pass activations on as they go */
      for (int k = 0; k < s->count; k++) PetscCall(w->forward(w->ctx, g, k));
    } else {
      SchedTask *tasks;
      int        nslots;
      PetscCall(trainer_schedule(tr, s, &tasks, &nslots));
      PetscCall(sched_run(g, tasks, 2 * s->count, nslots, w->forward, w->backward, w->ctx));
      PetscCall(PetscFree(tasks));
    }
  }
  if (w->nacc > 0) PetscCall(trainer_sum_heads(tr, w->acc, w->nacc));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode trainer_sum_heads(const Trainer *tr, double *v, int n)
{
  Comm red = tr->red;

  PetscFunctionBegin;
  if (!exec_is_head(tr->dm->mesh))
    for (int i = 0; i < n; i++) v[i] = 0;
  PetscCall(comm_allreduce_sum_double(&red, v, n)); /* in rank order: the same bits on every rank */
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode trainer_step(Trainer *tr, const AdamWConfig *opt, const char *what, const char *at, double loss,
                            PetscReal *lr, PetscReal *gnorm)
{
  Model *g   = tr->dm->lm;
  Comm   red = tr->red;
  double v[2] = {0, 0};

  PetscFunctionBegin;
  PetscCheck(isfinite(loss), PETSC_COMM_WORLD, PETSC_ERR_FP,
             "%s loss is %g at %s; stopping before the optimizer step, the last checkpoint is intact", what, loss, at);
  if (g) {
    PetscReal norm;
    PetscCall(PetscLogEventBegin(sys_log.optimizer, 0, 0, 0, 0));
    PetscCall(model_grad_norm(g, &norm)); /* the same on every rank of the mesh */
    PetscCall(PetscLogEventEnd(sys_log.optimizer, 0, 0, 0, 0));
    if (tr->dm->mesh->me == 0) {
      v[0] = norm;
      v[1] = adamw_lr(opt, g->step);
    }
  }
  PetscCall(comm_allreduce_sum_double(&red, v, 2)); /* one contribution: the mesh's first rank */
  *gnorm = (PetscReal)v[0];
  *lr    = (PetscReal)v[1];
  /* every rank of the trainer sees the same norm, so all stop together, before any weight or moment changes */
  PetscCheck(isfinite(*gnorm), PETSC_COMM_WORLD, PETSC_ERR_FP,
             "%s gradient norm is %g at %s; stopping before the optimizer step, the last checkpoint is intact", what,
             (double)*gnorm, at);
  if (g) {
    PetscCall(PetscLogEventBegin(sys_log.optimizer, 0, 0, 0, 0));
    PetscCall(model_adamw_update(g, opt, *gnorm, NULL));
    PetscCall(PetscLogEventEnd(sys_log.optimizer, 0, 0, 0, 0));
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode trainer_restart(Trainer *tr, const RunCtx *run, const char *path, PetscInt steps, const char *opt,
                               CkptState *st)
{
  PetscFunctionBegin;
  PetscCall(dmodel_load(tr->dm, path, tr->dm->name, PETSC_TRUE, PETSC_FALSE, 0));
  PetscCall(ckpt_read_state(run->comm, path, st));
  PetscCheck(st->iteration <= steps, run->comm, PETSC_ERR_ARG_OUTOFRANGE,
             "-restart %s is at step %" PetscInt_FMT ", past %s %" PetscInt_FMT, path, st->iteration, opt, steps);
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode trainer_checkpoint(Trainer *tr, const RunCtx *run, const char *name, const CkptState *st, RunRecord *rec)
{
  DModel *const   dm[1] = {tr->dm};
  const CkptModel cm[1] = {{tr->dm->name, NULL, PETSC_TRUE, PETSC_FALSE}};

  PetscFunctionBegin;
  PetscCall(train_checkpoint_models(run, dm, cm, 1, name, st, tr->bucket, rec));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode train_checkpoint_models(const RunCtx *run, DModel *const *dm, const CkptModel *cm, int n,
                                       const char *name, const CkptState *st, size_t bucket, RunRecord *rec)
{
  PetscFunctionBegin;
  PetscCall(train_checkpoint_sourced(run, dm, cm, n, name, st, NULL, NULL, rec));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode train_checkpoint_sourced(const RunCtx *run, DModel *const *dm, const CkptModel *cm, int n,
                                        const char *name, const CkptState *st, const CkptSource *src,
                                        const CkptCarry *carry, RunRecord *rec)
{
  char      path[PETSC_MAX_PATH_LEN];
  CkptModel out[8];
  CkptWhere where[8];
  double    t0 = sys_wtime();

  PetscFunctionBegin;
  PetscCheck(n >= 1 && n <= 8, PETSC_COMM_SELF, PETSC_ERR_ARG_OUTOFRANGE, "train_checkpoint_models: %d models (1 to 8)",
             n);
  PetscCall(sys_output_path(run, name, path, sizeof path));
  PetscCall(record_commit(rec)); /* the rows first: a restart from this checkpoint finds them in the record */
  PetscCall(PetscLogEventBegin(sys_log.ckpt_write, 0, 0, 0, 0));
  /* each member writes its shard: nothing is gathered */
  for (int k = 0; k < n; k++) PetscCall(dmodel_ckpt_model(dm[k], cm[k].role, cm[k].with_optim, &out[k], &where[k]));
  PetscCall(ckpt_write_sourced(run->comm, path, out, where, n, st, src, carry));
  PetscCall(PetscLogEventEnd(sys_log.ckpt_write, 0, 0, 0, 0));
  if (rec) PetscCall(record_time(rec, "checkpoint", sys_wtime() - t0));
  PetscFunctionReturn(PETSC_SUCCESS);
}
