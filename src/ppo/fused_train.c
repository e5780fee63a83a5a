/* PPO's fused training stage (-fuse_train 1): the actor's and the critic's
 * micro-batch tasks of one mini-batch run interleaved on the same ranks, in
 * the order of a fused schedule (src/actorcritic), each model with its own
 * activation slots, loss state and optimizer step. The schedule is either
 * read from -fuse_train_schedule FILE or searched at the first mini-batch
 * from its measured stage forward times: that mini-batch runs in the
 * sequential order (the actor's 1F1B, then the critic's), which is itself a
 * valid fused schedule, so measuring costs no extra work. The order of the
 * tasks changes no result: each model's micro-batches keep their own state
 * (train.c) and its stage messages carry its model id and micro-batch. */
#include "ppo_impl.h"
#include <math.h>

/* Micro-batches of one model's replica in a mini-batch of nmb sequences, as
 * trainer_split will cut them (the plan's mbs, else -ppo_microbatches). */
static int fused_split_count(const PlanCall *c, const PPOOptions *o, int nmb)
{
  int share = nmb / c->dp, size = c->mbs > 0 ? (share + c->mbs - 1) / c->mbs : PetscMax(1, nmb / (int)o->microbatches);

  size = PetscMax(1, size);
  return (share + size - 1) / size;
}

PetscErrorCode ppo_fused_train_setup(const RunCtx *run, const PPOOptions *o, PPOFusedTrain *fz)
{
  const Plan *plan = &o->plan;
  int         nmb  = (int)(o->rollout_batch / o->minibatches);

  PetscFunctionBegin;
  PetscCall(PetscMemzero(fz, sizeof *fz));
  fz->on = (PetscBool)(plan->fuse_train && ppo_algo(o)->has_critic);
  if (!fz->on) PetscFunctionReturn(PETSC_SUCCESS);
  fz->seed      = (uint64_t)run->seed;
  fz->root      = plan->call[MFC_ACTOR_TRAIN].ranks[0];
  fz->in.pp[0]  = plan->call[MFC_ACTOR_TRAIN].pp;
  fz->in.pp[1]  = plan->call[MFC_CRITIC_TRAIN].pp;
  fz->in.m[0]   = fused_split_count(&plan->call[MFC_ACTOR_TRAIN], o, nmb);
  fz->in.m[1]   = fused_split_count(&plan->call[MFC_CRITIC_TRAIN], o, nmb);
  fz->in.f[0]   = fz->in.f[1] = 1; /* until measured */
  fz->in.mem[0] = fz->in.mem[1] = 1;
  if (o->plan.fuse_schedule[0]) { /* read and validated for the instance (a deadlock-free order of every task) */
    PetscCall(ac_sched_read(o->plan.fuse_schedule, &fz->in, &fz->sched));
    fz->ready = PETSC_TRUE;
    fz->from_file = PETSC_TRUE;
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode ppo_fused_train_destroy(PPOFusedTrain *fz)
{
  PetscFunctionBegin;
  if (fz->ready) PetscCall(ac_sched_free(&fz->sched));
  fz->ready = PETSC_FALSE;
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* A model's callbacks, the forward timed: the shortest forward of the
 * model on this rank (the measuring mini-batch). */
typedef struct {
  SchedFn fw, bw;
  void   *ctx;
  double  best;
} TimedFn;

static PetscErrorCode timed_forward(void *ctx, Model *g, int mb)
{
  TimedFn *t  = (TimedFn *)ctx;
  double   t0 = sys_wtime();

  PetscFunctionBegin;
  PetscCall(t->fw(t->ctx, g, mb));
  t->best = PetscMin(t->best, sys_wtime() - t0);
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode timed_backward(void *ctx, Model *g, int mb)
{
  TimedFn *t = (TimedFn *)ctx;

  PetscFunctionBegin;
  PetscCall(t->bw(t->ctx, g, mb));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* The tasks of this rank (fuse rank p, its actor stage) and each model's
 * slots: the most micro-batches in flight. */
static PetscErrorCode fused_rank_tasks(const ACSched *s, int p, SchedMTask *t, int nslots[2])
{
  int cur[2] = {0, 0};

  PetscFunctionBegin;
  nslots[0] = nslots[1] = 1;
  for (int i = 0; i < s->n; i++) {
    const ACTask *f = &s->order[(size_t)p * s->n + i];
    t[i] = (SchedMTask){f->model, f->kind == AC_F ? SCHED_F : SCHED_B, f->mb};
    cur[f->model] += f->kind == AC_F ? 1 : -1;
    nslots[f->model] = PetscMax(nslots[f->model], cur[f->model]);
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* After the measuring mini-batch: forward times per stage (the slowest
 * rank's shortest forward: the shortest excludes most waiting for the
 * previous stage), the search on the mesh's first rank, the schedule sent
 * to every rank of the mesh. */
static PetscErrorCode fused_schedule_measured(PPOFusedTrain *fz, const Mesh *mesh, const double best[2])
{
  double         f[2] = {best[0], best[1]};
  ACOptimizeOpts opt  = {fz->seed, 4, 2000, 0};
  ACOptimizeInfo info;
  ACScore      seq = {0};
  int            count;

  PetscFunctionBegin;
  PetscCallMPI(sys_mpi_allreduce(MPI_IN_PLACE, f, 2, MPI_DOUBLE, MPI_MAX, mesh->all.mpi));
  fz->in.f[0] = PetscMax(f[0], 1e-9);
  fz->in.f[1] = PetscMax(f[1], 1e-9);
  if (mesh->all.rank == 0) {
    PetscCall(ac_optimize(&fz->in, &opt, &fz->sched, &info));
    fz->predicted = info.best.makespan;
    fz->lower     = info.lower_bound;
  } else PetscCall(ac_sched_alloc(&fz->in, &fz->sched));
  count = 3 * fz->sched.nranks * fz->sched.n;
  PetscCallMPI(sys_mpi_bcast(fz->sched.order, count, MPI_INT, 0, mesh->all.mpi));
  PetscCallMPI(sys_mpi_bcast(&fz->predicted, 1, MPI_DOUBLE, 0, mesh->all.mpi));
  PetscCallMPI(sys_mpi_bcast(&fz->lower, 1, MPI_DOUBLE, 0, mesh->all.mpi));
  PetscCall(ac_sequential(&fz->in, NULL, &seq));
  fz->sequential = seq.makespan;
  fz->ready      = PETSC_TRUE;
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode ppo_fused_train_pass(PPOFusedTrain *fz, Trainer *tr[2], const MicroSplit *s[2], const TrainWork *w[2])
{
  Model     *g[2] = {tr[0]->dm->lm, tr[1]->dm->lm};
  ACSched  seq, *use = fz->ready ? &fz->sched : &seq;
  TimedFn    tf[2];
  SchedModel md[2];
  SchedMTask *tasks;
  int        nslots[2];

  PetscFunctionBegin;
  PetscCall(PetscMemzero(&seq, sizeof seq));
  PetscCheck(g[0] && g[1], PETSC_COMM_SELF, PETSC_ERR_PLIB,
             "fused training: a rank holds only one of the actor and critic shards");
  PetscCheck(s[0]->count == fz->in.m[0] && s[1]->count == fz->in.m[1], PETSC_COMM_SELF, PETSC_ERR_PLIB,
             "fused training: %d and %d micro-batches, the schedule has %d and %d", s[0]->count, s[1]->count,
             fz->in.m[0], fz->in.m[1]);
  for (int x = 0; x < 2; x++) {
    PetscCall(model_zero_grad(g[x]));
    PetscCall(model_msg_ids(g[x], x, 0)); /* AC_ACTOR, AC_CRITIC: their messages never pair across models */
    tf[x] = (TimedFn){w[x]->forward, w[x]->backward, w[x]->ctx, INFINITY};
  }
  if (!fz->ready) {
    ACScore sc = {0};
    PetscCall(ac_sequential(&fz->in, &seq, &sc));
  }
  PetscCall(PetscMalloc1(use->n, &tasks));
  PetscCall(fused_rank_tasks(use, g[0]->sh.p, tasks, nslots));
  for (int x = 0; x < 2; x++) {
    if (fz->ready) md[x] = (SchedModel){g[x], nslots[x], w[x]->forward, w[x]->backward, w[x]->ctx};
    else md[x] = (SchedModel){g[x], nslots[x], timed_forward, timed_backward, &tf[x]};
  }
  PetscCall(sched_run_models(md, 2, tasks, use->n));
  PetscCall(PetscFree(tasks));
  if (!fz->ready) {
    double best[2] = {tf[0].best, tf[1].best};
    PetscCall(ac_sched_free(&seq));
    PetscCall(fused_schedule_measured(fz, tr[0]->dm->mesh, best));
  }
  for (int x = 0; x < 2; x++)
    if (w[x]->nacc > 0) PetscCall(trainer_sum_heads(tr[x], w[x]->acc, w[x]->nacc));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode ppo_fused_train_report(const RunCtx *run, RunRecord *rec, PPOFusedTrain *fz)
{
  const char *names[5] = {"fuse_f0", "fuse_f1", "fuse_predicted", "fuse_sequential", "fuse_lower_bound"};
  double      v[5]     = {fz->in.f[0], fz->in.f[1], fz->predicted, fz->sequential, fz->lower};

  PetscFunctionBegin;
  fz->reported = PETSC_TRUE;
  PetscCallMPI(sys_mpi_bcast(v, 5, MPI_DOUBLE, fz->root, MPI_COMM_WORLD));
  if (fz->from_file) {
    PetscCall(PetscPrintf(run->comm,
                          "fused training: schedule from -fuse_train_schedule (actor pp %d x %d micro-batches, critic "
                          "pp %d x %d copies x %d)\n",
                          fz->in.pp[0], fz->in.m[0], fz->in.pp[1], fz->in.pp[0] / fz->in.pp[1], fz->in.m[1]));
    PetscFunctionReturn(PETSC_SUCCESS);
  }
  PetscCall(PetscPrintf(run->comm,
                        "fused training: actor pp %d x %d micro-batches (forward %.3g ms per stage), critic pp %d x %d "
                        "copies x %d (%.3g ms); searched schedule predicts %.3g ms per mini-batch, sequential 1F1B "
                        "%.3g ms (%.3fx), lower bound %.3g ms\n",
                        fz->in.pp[0], fz->in.m[0], 1e3 * v[0], fz->in.pp[1], fz->in.pp[0] / fz->in.pp[1], fz->in.m[1],
                        1e3 * v[1], 1e3 * v[2], 1e3 * v[3], v[3] / v[2], 1e3 * v[4]));
  for (int k = 0; k < 5; k++) PetscCall(record_summary(rec, names[k], v[k]));
  PetscFunctionReturn(PETSC_SUCCESS);
}
